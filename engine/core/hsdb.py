"""The hyperscan backend's databases of a scanner's specs (``engine.core.matching``'s
:class:`CompiledSpec`): one main database, one single-match database of the block specs, and a
sampled spec's own database made on its first search; each from the on-disk cache
(``engine.cache``) when it was built before.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from engine import cache
from engine.core.matching import _FLAG_GROUPS, CompiledSpec, _alternatives, _grouping, hs
from engine.rulebook import patterns

logger = logging.getLogger(__name__)

__all__ = ["hyperscan_databases", "sampled_database", "block_database", "log_fallback"]


def log_fallback(c: CompiledSpec, err: Exception) -> None:
    logger.info("matcher %r: hyperscan cannot compile it (%s); matched with RE2", c.spec.id, err)


#: a bounded repeat ``{m,n}`` with n at least this is ``{m,}`` in the main database's copy
_RELAX_FROM = 16
_BOUNDS = re.compile(r"\{(\d+),(\d+)\}")


def _relaxed(hs_src: bytes) -> bytes:
    """Hyperscan's copy with each wide bounded repeat made unbounded (``[^\\n]{0,200}`` ->
    ``[^\\n]{0,}``): it matches a superset, and every line the main database reports for a
    plain spec is checked with RE2 (and a line the truth matches is still reported at its end,
    the substring that matches there matching the relaxed copy too). Building the bounds cost
    hyperscan's compiler ~16 % of the main database (30 patterns of 190), scanning no less
    (measured on the bench's training log). A word boundary (``\\b``, ``\\B``) is dropped too
    (a superset again; ~5 % of compiling the main database, 790 of them in 875 expressions),
    but where a repeat follows it. Escapes and classes are stepped over: ``\\{1,20}`` is a
    literal. An optional group that leads the copy (``(?:X)?Y``, a prefix captured only to
    qualify the hit, as host_oom_text's option-help text) is dropped too: a line holds a match
    of ``X?Y`` exactly when it holds one of ``Y`` (~0.17 s of the main database, one pattern)."""
    p = _lead_dropped(hs_src.decode("latin-1"))
    out, i, n, start = [], 0, len(p), 0
    while i < n:
        c = p[i]
        if c == "\\":
            if p.startswith("x{", i + 1):
                i = p.find("}", i) + 1 or n
            elif i + 1 < n and p[i + 1] in "bB" and (i + 2 == n or p[i + 2] not in "?*+{"):
                out.append(p[start:i])  # a word boundary: dropped
                start = i = i + 2
            else:
                i += 2
        elif c == "[":
            i = patterns._class_end(p, i)
        elif c == "{":
            m = _BOUNDS.match(p, i)
            # (a { with nothing before it to repeat is a literal: left alone, as is any doubt)
            if m is not None and int(m.group(2)) >= _RELAX_FROM and i > 0 and p[i - 1] not in "(|^:":
                out.append(p[start:i] + "{" + m.group(1) + ",}")
                start = i = m.end()
            else:
                i += 1
        else:
            i += 1
    out.append(p[start:])
    return "".join(out).encode("latin-1")


def _lead_dropped(p: str) -> str:
    """``p`` without an optional group at its very start, after its leading inline flags:
    ``(?i)(?:X)?Y`` -> ``(?i)Y``. Left whole where the group is not optional once (``??`` is
    optional too; ``(?:X)?+`` or ``{`` after it, or nothing after it, leave it)."""
    lead = _FLAG_GROUPS.match(p).end()  # type: ignore[union-attr]
    if not p.startswith("(", lead) or p.startswith(("(?=", "(?!", "(?<=", "(?<!"), lead):
        return p  # (a lookaround is no group of the line's text)
    depth = 0
    for i, c in _grouping(p[lead:]):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                end = lead + i + 1
                rest = p[end + 1 :].removeprefix("?")  # (a lazy ?? is optional as well)
                if p[end : end + 1] != "?" or not rest or rest[0] in "*+?{|)":
                    return p
                return p[:lead] + rest
    return p


def _stretch(hs_src: bytes) -> bytes:
    """The pattern stretched over the newline that ends its line: one report per line."""
    return b"(?:" + hs_src + b")[^\\n]*\\n"


#: an inline flag group that sets flags for the rest of its group: ``(?i)``, ``(?-m)``
_BARE_FLAGS = re.compile(r"\(\?[a-zA-Z-]+\)")


def _whole_group(p: str) -> str | None:
    """``X`` when ``p`` is one non-capturing group ``(?:X)`` from its first character to its last
    (the weak layer's copies: the keyword group around every token), else None."""
    if not p.startswith("(?:") or not p.endswith(")"):
        return None
    depth = 0
    for i, c in _grouping(p):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return p[3:-1] if i == len(p) - 1 else None
    return None


def _split(hs_src: bytes) -> list[bytes]:
    """Hyperscan's copy as its top-level alternatives, one expression each (compiled with the
    spec's id and flags: they report as the whole did, a line at most once per spec after the
    scanner's dedup, and single-match mode is per id). The compiler builds one graph per
    expression, and an alternation of gaps such as ``a[^\\n]*b|c[^\\n]{0,}?d`` made one large
    graph: cuda_no_gpu_available alone compiled in ~0.4 s, its 26 alternatives in ~0.04. A copy
    that is one group ``(?:a|b)`` whole (after its leading flags) is split as ``a|b``. Inline
    flags that lead the first alternative lead each; an inline flag group anywhere else (it
    would reach into the alternatives after it) leaves the copy whole."""
    p = hs_src.decode("latin-1")
    alts = _alternatives(p)
    if len(alts) == 1:
        lead = _FLAG_GROUPS.match(p).end()  # type: ignore[union-attr]
        inner = _whole_group(p[lead:])
        if inner is None or _BARE_FLAGS.search(inner):
            return [hs_src]
        alts = _alternatives(p[:lead] + inner)
    if len(alts) < 2:
        return [hs_src]
    lead = _FLAG_GROUPS.match(alts[0]).end()  # type: ignore[union-attr]
    if any(_BARE_FLAGS.search(a, lead if k == 0 else 0) for k, a in enumerate(alts)):
        return [hs_src]
    head = alts[0][:lead]
    return [alts[0].encode("latin-1")] + [(head + a).encode("latin-1") for a in alts[1:]]


def _expressions(pairs: list, relax: bool) -> tuple[list[bytes], list[int], list[int]]:
    """(expressions, ids, flags) of ``(spec, flags)`` pairs, each spec's copy split (``_split``)
    and stretched (``_stretch``), HS_FLAG_MULTILINE added where its copy has its line anchors;
    ``relax``: the copy of each spec not in single-match mode is ``_relaxed``."""
    exprs: list[bytes] = []
    ids: list[int] = []
    flags: list[int] = []
    for c, f in pairs:
        src = c.hs_src or b""
        if c.hs_multiline:
            f |= hs.HS_FLAG_MULTILINE
        for part in _split(_relaxed(src) if relax and not f & hs.HS_FLAG_SINGLEMATCH else src):
            exprs.append(_stretch(part))
            ids.append(c.idx)
            flags.append(f)
    return exprs, ids, flags


def _hs_compile(pairs: list, relax: bool):
    """A block-mode database of ``(spec, flags)`` pairs (``_expressions``), from the on-disk
    cache when it was built before (building takes ~1 s for a rulebook's patterns). The key is
    what the expressions are made from: each spec's id, pattern and case and its flags, with
    the source of Recover (which renders them) and the library versions (``cache.key``), so a
    warm start renders no copy to find its database."""
    k = cache.key(
        "hyperscan",
        cache.code_version(),
        relax,
        [(c.idx, c.spec.pattern, c.spec.ignore_case, f) for c, f in pairs],
    )
    data = cache.get(k)
    if data is not None:
        try:
            return hs.loadb(data, hs.HS_MODE_BLOCK)  # (comes without a scratch: each Scanner makes its own)
        except Exception as exc:  # damaged or foreign: build it again
            logger.debug("hyperscan cache entry %s unusable: %s", k, exc)
    expressions, ids, flags = _expressions(pairs, relax)
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    try:
        cache.put(k, bytes(hs.dumpb(db)))
    except Exception as exc:  # pragma: no cover - serialisation is best effort
        logger.debug("hyperscan database not cached: %s", exc)
    return db


def block_database(pairs: list) -> Any:
    """The block specs' single-match database (``(spec, flags)`` pairs, their exact copies):
    per scan call, the first line each block spec proposes (``blockscan._firsts``). Raises what
    hyperscan's compiler raises."""
    return _hs_compile([(c, f | hs.HS_FLAG_SINGLEMATCH) for c, f in pairs], False)


def sampled_database(c: CompiledSpec, flags: int) -> Any:
    """A sampled or block spec's own database (its exact copy, every line it proposes), made on
    the first search that needs it (``Scanner._candidates``): most runs never search most of
    them alone. Raises what hyperscan's compiler raises."""
    return _hs_compile([(c, flags)], False)


def hyperscan_databases(
    specs: list[CompiledSpec], strict: bool
) -> tuple[Any, dict[int, int], set[int], set[int], set[int]]:
    """(one main database of the specs hyperscan takes or None, {sampled or block spec: the flags
    of its own database, made on first use by ``sampled_database``}, the indexes of the specs
    hyperscan takes, the indexes in the main database, the block specs). A spec hyperscan
    cannot take is left out (logged); ``strict``: a main database that fails as a whole raises
    instead of leaving every spec to RE2. Block and sampled specs are in the main database in
    single-match mode (the first line per scan call: whether they occur, and a block's first
    progress line); the block specs' single-match database is made on the first block scan
    (``block_database``). Where hyperscan then refuses a database made on first use, its
    specs' lines are proposed by their RE2 instead (``Scanner._candidates``,
    ``blockscan._firsts``): it takes each pattern in the main database, so this has not been
    seen."""
    todo: list[tuple[CompiledSpec, int]] = []
    for c in specs:
        if not c.hs_ok:
            # how a pattern is matched is no news to an operator (the daemons log INFO): -v shows it
            logger.debug("matcher %r: matched with RE2 (pattern needs RE2 semantics)", c.spec.id)
        else:
            todo.append((c, hs.HS_FLAG_CASELESS if c.spec.ignore_case else 0))
    single = hs.HS_FLAG_SINGLEMATCH

    # non-sampled: one database, each pattern stretched to the end of its line, so that a line is
    # reported once per pattern (bare patterns report every end offset: a flood line cost ~90
    # Python callbacks)
    # (a plain spec's copy relaxed: see _relaxed; single-match reports are taken as they come)
    def database(pairs: list) -> Any:
        return _hs_compile(pairs, True)

    # block specs: each reports its first line per scan call (hyperscan's single-match mode), in
    # a database of their own made on the first block scan (``block_database``)
    blocked = {c.idx for c, _ in todo if c.spec.block}
    # a sampled or block spec's own database (every line it proposes) is made on its first search
    lazy = {c.idx: f for c, f in todo if c.spec.sample or c.idx in blocked}
    main = [(c, f | single if c.idx in blocked or c.spec.sample else f) for c, f in todo]

    db = None
    if main:
        try:
            db = database(main)
        except Exception:  # find the patterns it refuses, keep the rest
            keep = []
            for c, f in main:
                try:
                    database([(c, f)])
                    keep.append((c, f))
                except Exception as e:
                    if not c.spec.sample:  # (a sampled spec still has its own database)
                        log_fallback(c, e)
            main = keep
            if main:
                try:
                    db = database(main)
                except Exception as e:
                    if strict:
                        raise
                    logger.warning("hyperscan database failed (%s); those matchers use RE2", e)
                    main = []
    in_main = {c.idx for c, _ in main}
    return (db if main else None), lazy, in_main | set(lazy), in_main, blocked
