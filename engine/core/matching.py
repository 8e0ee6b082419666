"""Matcher specs compiled for the scanner: what ``engine.core.scanner.Scanner`` is built from.

A :class:`MatcherSpec` is one regex to look for; a :class:`CompiledSpec` holds it compiled for
the line (RE2, the truth) and renders it for the buffer-wide searches; :class:`Re2Group` is the
RE2 backend's alternation over several specs; ``hyperscan_databases`` builds the hyperscan
backend's databases (from the on-disk cache when it can). A :class:`Hit` is one line one
matcher hit. What a pattern means and how it is rendered for each engine is
``engine.rulebook.patterns``'s.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

import re2

from engine import cache
from engine.rulebook import patterns

logger = logging.getLogger(__name__)

hs: Any
try:  # hyperscan is only built for x86-64
    import hyperscan as hs
except (ImportError, OSError):  # pragma: no cover - depends on the platform
    hs = None

__all__ = ["MatcherSpec", "Hit", "CompiledSpec", "Re2Group", "hyperscan_available", "hyperscan_databases"]

_COMBINED_MAX_MEM = 64 << 20  # RE2 memory budget of the combined alternation (mostly DFA cache)


def hyperscan_available() -> bool:
    """True when the hyperscan module imports on this machine."""
    return hs is not None


@dataclass(frozen=True)
class MatcherSpec:
    """One regex to look for. ``sample``: only the last matching line per fed chunk is needed.
    ``block``: a progress matcher whose lines may be sampled per block (``engine.core.blockscan``:
    the first line of each block and after each boundary hit, and the last of a chunk).
    ``boundary``: the first progress line after a hit of this spec is always reported."""

    id: str
    pattern: str
    sample: bool = False
    ignore_case: bool = False
    block: bool = False
    boundary: bool = True


class Hit:
    """One line that one matcher hit.

    ``groups`` (the named groups' text) is decoded on first use: most hits of a dense training
    log are progress lines that are counted and left out, and never read. ``blank``: the line
    with its digits masked (``patterns.mask_digits``) when the matcher is digit-insensitive:
    lines with equal ``blank`` match alike, with the same group spans."""

    __slots__ = ("matcher", "line", "line_no", "offset", "truncated", "blank", "_groups", "_c", "_spans")

    def __init__(
        self,
        matcher: int,
        line: bytes,
        line_no: int,
        offset: int,
        groups: dict[str, str] | None = None,
        truncated: bool = False,
        blank: bytes | None = None,
    ):
        self.matcher, self.line, self.line_no, self.offset = matcher, line, line_no, offset
        self.truncated, self.blank = truncated, blank
        self._groups: dict[str, str] | None = {} if groups is None else groups
        self._c: CompiledSpec | None = None
        self._spans: Any = None

    @property
    def groups(self) -> dict[str, str]:
        g = self._groups
        if g is None:
            g = self._groups = self._c.groups(self.line, self._spans)  # type: ignore[union-attr]
        return g

    def group(self, name: str) -> str | None:
        """One named group's text, without decoding the others (None: unmatched or no such group)."""
        g = self._groups
        if g is not None:
            return g.get(name)
        return self._c.group(self.line, self._spans, name)  # type: ignore[union-attr]

    def _key(self) -> tuple:
        return (self.matcher, self.line, self.line_no, self.offset, self.groups, self.truncated, self.blank)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hit) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Hit(matcher={self.matcher}, line={self.line!r}, line_no={self.line_no}, offset={self.offset}, "
            f"groups={self.groups!r}, truncated={self.truncated}, blank={self.blank!r})"
        )


def _searcher(rx: Any) -> Callable[[bytes], Any]:
    """``search(line)``: the spans ``[(start, end), ...]`` of group 0 and each group of the first
    match of ``rx`` in ``line`` ((-1, -1) for an unmatched group), or None.

    The wrapper's search() + groupdict() cost ~35 us a line in Python, its engine call 2: that
    call (``_regexp.Match`` with ``_Anchor``) is private to google-re2, so where a release lacks
    it the public ``search`` gives the same spans, slower."""
    anchor = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
    match = getattr(getattr(rx, "_regexp", None), "Match", None)
    if anchor is not None and match is not None:

        def search(text: bytes) -> Any:
            spans = match(anchor, text, 0, len(text))
            return None if spans[0][0] < 0 else spans

        return search
    n = rx.groups + 1
    public = rx.search

    def search_public(text: bytes) -> Any:
        m = public(text)
        return None if m is None else [m.span(i) for i in range(n)]

    return search_public


def _alternatives(p: str) -> list[str]:
    """The top-level alternatives of a pattern (as written, or hyperscan's spelling of it)."""
    out: list[str] = []
    depth = start = i = 0
    n = len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            j = p.find("\\E", i + 2) if p.startswith("\\Q", i) else -2
            i = i + 2 if j == -2 else n if j < 0 else j + 2
            continue
        if c == "[":
            i = patterns._class_end(p, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(p[start:i])
            start = i + 1
        i += 1
    out.append(p[start:])
    return out


_FLAG_GROUPS = re.compile(r"(?:\(\?[a-zA-Z]+\))*")


def _has_literal(alt: str, run: int = 4) -> bool:
    """Whether ``alt`` (one alternative in hyperscan's spelling) has ``run`` literal characters
    in a row (outside classes, at any depth): hyperscan keys its search on literals, and an
    anchor before them only adds work (measured: python_exception_generic got slower)."""
    n, i, got = len(alt), 0, 0
    while i < n:
        c = alt[i]
        step, lit = 1, False
        if c == "\\":
            step, lit = 2, i + 1 < n and not alt[i + 1].isalnum()
        elif c == "[":
            step = patterns._class_end(alt, i) - i
        elif c == "{":  # a repeat's bounds
            step = max(1, alt.find("}", i) + 1 - i)
        elif alt.startswith("(?", i):  # a group's flags: (?:, (?i:, (?m)
            step = next((j + 1 - i for j in range(i + 2, n) if alt[j] in ":)"), n - i)
        else:
            lit = c.isalnum() or c in " _:,'\"=<>/-!@#%&;~`"
        i += step
        if lit and not (i < n and alt[i] in "?*{"):
            got += 1
            if got >= run:
                return True
        else:
            got = 0
    return False


def _line_anchored(pattern: str, hs_src: bytes) -> bytes | None:
    """Hyperscan's copy of ``pattern`` with a ``^`` again at the head of each top-level
    alternative that starts with one (after its inline flags), to be compiled with
    HS_FLAG_MULTILINE; None where no alternative starts with ``^``.

    The copy drops anchors (``patterns``), which keeps it a superset of the truth; but a
    pattern with no literal to look for costs hyperscan dearly unanchored: peers_table_row and
    peers_table_header, each a table line from its start, were a quarter of the main
    database's time over a training log. Every scan starts at a line start (a part, a block, a
    cut head, a window of a sampled spec), so ``^`` there and after each newline is a line
    start, as RE2 reads it on the line."""
    alts = _alternatives(pattern)
    hs_alts = _alternatives(hs_src.decode("latin-1"))
    if len(alts) != len(hs_alts):
        return None
    changed = False
    for k, (a, h) in enumerate(zip(alts, hs_alts)):
        if not a[_FLAG_GROUPS.match(a).end() :].startswith("^") or _has_literal(h):  # type: ignore[union-attr]
            continue
        at = _FLAG_GROUPS.match(h).end()  # type: ignore[union-attr]
        hs_alts[k] = h[:at] + "^" + h[at:]
        changed = True
    return "|".join(hs_alts).encode("latin-1") if changed else None


class CompiledSpec:
    """One spec, compiled for the line (truth) and rendered for the buffer-wide search.
    ``search(line)``: see ``_searcher``."""

    __slots__ = (
        "idx",
        "spec",
        "utf8",
        "truth",
        "rx",
        "has_groups",
        "buf_src",
        "buf_rx",
        "hs_src",
        "cut_sensitive",
        "named",
        "search",
        "digit_insensitive",
        "index",
        "hs_multiline",
    )

    def __init__(self, idx: int, spec: MatcherSpec):
        self.idx = idx
        self.spec = spec
        try:
            a = patterns.analyse(spec.pattern, spec.ignore_case)
        except ValueError as e:
            raise ValueError(f"matcher {spec.id!r}: {e}") from None
        self.truth, self.utf8, self.cut_sensitive = a.truth, a.utf8, a.cut_sensitive
        self.digit_insensitive, self.hs_src = a.digit_insensitive, a.hyperscan
        #: hyperscan's copy has its line anchors back (compiled with HS_FLAG_MULTILINE): see _line_anchored
        self.hs_multiline = False
        if self.hs_src is not None:
            anchored = _line_anchored(spec.pattern, self.hs_src)
            if anchored is not None:
                self.hs_src, self.hs_multiline = anchored, True
        self.rx = a.rx if a.rx is not None else re2.compile(self.truth, patterns.re2_options(self.utf8))
        self.has_groups = bool(self.rx.groupindex)
        self.named = tuple(
            (k.decode("utf-8", "replace") if isinstance(k, bytes) else k, i) for k, i in self.rx.groupindex.items()
        )
        self.index = dict(self.named)
        self.search = _searcher(self.rx)
        self.buf_src: bytes | None = None  # rendered on demand (specs on the RE2 path), see buffer_source
        self.buf_rx: Any = None  # compiled on demand (sampled specs on the RE2 path)

    def buffer_source(self) -> bytes:
        """The pattern for a multi-line search over a whole buffer (the RE2 path)."""
        if self.buf_src is None:
            self.buf_src = patterns.buffer_source(self.spec.pattern, self.spec.ignore_case)
        return self.buf_src

    def groups(self, text: bytes, spans) -> dict[str, str]:
        out: dict[str, str] = {}
        if text.isascii():  # one decode, then str slices: the same text as decoding each slice
            s = text.decode("ascii")
            for name, i in self.named:
                a, b = spans[i]
                if a >= 0:
                    out[name] = s[a:b]
            return out
        for name, i in self.named:
            a, b = spans[i]
            if a >= 0:
                out[name] = text[a:b].decode("utf-8", "replace")
        return out

    def group(self, text: bytes, spans, name: str) -> str | None:
        i = self.index.get(name)
        if i is None or spans is None:
            return None
        a, b = spans[i]
        return text[a:b].decode("utf-8", "replace") if a >= 0 else None


class Re2Group:
    """Non-sampled specs of one encoding on the RE2 path: one alternation plus one Set."""

    def __init__(self, members: list[CompiledSpec], utf8: bool):
        self.members = members
        alt = b"|".join(b"(?:" + c.buffer_source() + b")" for c in members)
        self.comb = re2.compile(alt, patterns.re2_options(utf8, _COMBINED_MAX_MEM))
        self.set = re2.Set.SearchSet(patterns.re2_options(utf8, _COMBINED_MAX_MEM))
        for c in members:
            self.set.Add(c.truth)
        self.set.Compile()


# --------------------------------------------------------------------------------------------
# hyperscan databases


def _log_fallback(c: CompiledSpec, err: Exception) -> None:
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
    (measured on the bench's training log). Escapes and classes are stepped over: ``\\{1,20}``
    is a literal."""
    p = hs_src.decode("latin-1")
    out, i, n, start = [], 0, len(p), 0
    while i < n:
        c = p[i]
        if c == "\\":
            if p.startswith("x{", i + 1):
                i = p.find("}", i) + 1 or n
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
    if not out:
        return hs_src
    out.append(p[start:])
    return "".join(out).encode("latin-1")


def _stretch(hs_src: bytes) -> bytes:
    """The pattern stretched over the newline that ends its line: one report per line."""
    return b"(?:" + hs_src + b")[^\\n]*\\n"


#: an inline flag group that sets flags for the rest of its group: ``(?i)``, ``(?-m)``
_BARE_FLAGS = re.compile(r"\(\?[a-zA-Z-]+\)")


def _split(hs_src: bytes) -> list[bytes]:
    """Hyperscan's copy as its top-level alternatives, one expression each (compiled with the
    spec's id and flags: they report as the whole did, a line at most once per spec after the
    scanner's dedup, and single-match mode is per id). The compiler builds one graph per
    expression, and an alternation of gaps such as ``a[^\\n]*b|c[^\\n]{0,}?d`` made one large
    graph: cuda_no_gpu_available alone compiled in ~0.4 s, its 26 alternatives in ~0.04. Inline
    flags that lead the first alternative lead each; an inline flag group anywhere else (it
    would reach into the alternatives after it) leaves the copy whole."""
    p = hs_src.decode("latin-1")
    alts = _alternatives(p)
    if len(alts) < 2:
        return [hs_src]
    lead = _FLAG_GROUPS.match(alts[0]).end()  # type: ignore[union-attr]
    if any(_BARE_FLAGS.search(a, lead if k == 0 else 0) for k, a in enumerate(alts)):
        return [hs_src]
    head = alts[0][:lead]
    return [alts[0].encode("latin-1")] + [(head + a).encode("latin-1") for a in alts[1:]]


def _expressions(pairs: list, relax: Callable[[Any, int], bool]) -> tuple[list[bytes], list[int], list[int]]:
    """(expressions, ids, flags) of ``(spec, flags)`` pairs, each spec's copy split (``_split``)
    and stretched (``_stretch``); ``relax(spec, flags)``: whether its copy is ``_relaxed``."""
    exprs: list[bytes] = []
    ids: list[int] = []
    flags: list[int] = []
    for c, f in pairs:
        src = c.hs_src or b""
        for part in _split(_relaxed(src) if relax(c, f) else src):
            exprs.append(_stretch(part))
            ids.append(c.idx)
            flags.append(f)
    return exprs, ids, flags


def _hs_compile(expressions: list[bytes], ids: list[int], flags: list[int]):
    """A block-mode database, from the on-disk cache when it was built before from exactly these
    patterns by these library versions (building takes ~1 s for a rulebook's patterns)."""
    k = cache.key("hyperscan", expressions, ids, flags)
    data = cache.get(k)
    if data is not None:
        try:
            return hs.loadb(data, hs.HS_MODE_BLOCK)  # (comes without a scratch: each Scanner makes its own)
        except Exception as exc:  # damaged or foreign: build it again
            logger.debug("hyperscan cache entry %s unusable: %s", k, exc)
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    try:
        cache.put(k, bytes(hs.dumpb(db)))
    except Exception as exc:  # pragma: no cover - serialisation is best effort
        logger.debug("hyperscan database not cached: %s", exc)
    return db


def _exact(_c: Any, _f: int) -> bool:
    """``_expressions``'s ``relax`` of a database whose copies stay exact."""
    return False


class _Ahead:
    """``fn(*args)`` run in a thread of its own; ``result()`` waits for it and returns or raises
    what it did."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self._out: tuple[bool, Any] = (False, None)

        def run() -> None:
            try:
                self._out = (True, fn(*args))
            except BaseException as exc:  # handed to whoever asks for the result, raised there
                logger.debug("hyperscan compile in its own thread failed: %s", exc)
                self._out = (False, exc)

        self._thread = threading.Thread(target=run, name="hyperscan-compile", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        ok, value = self._out
        if not ok:
            raise value
        return value


def hyperscan_databases(specs: list[CompiledSpec], strict: bool) -> tuple[Any, dict[int, Any], set[int], Any, set[int]]:
    """(one main database of the specs hyperscan takes or None, {sampled or block spec: its own
    database}, the indexes of the specs hyperscan takes, one single-match database of the block
    specs or None, the indexes in the main database). A spec hyperscan cannot take is left out
    (logged); ``strict``: a database that fails as a whole raises instead of leaving every spec
    to RE2. Block and sampled specs are in the main database in single-match mode (the first
    line per scan call: whether they occur, and a block's first progress line); a block spec is
    sampled only when its own and the single-match database take it, else it is a plain spec."""
    todo: list[tuple[CompiledSpec, int]] = []
    for c in specs:
        if c.hs_src is None:
            # how a pattern is matched is no news to an operator (the daemons log INFO): -v shows it
            logger.debug("matcher %r: matched with RE2 (pattern needs RE2 semantics)", c.spec.id)
        else:
            flags = hs.HS_FLAG_CASELESS if c.spec.ignore_case else 0
            todo.append((c, flags | hs.HS_FLAG_MULTILINE if c.hs_multiline else flags))

    # non-sampled: one database, each pattern stretched to the end of its line, so that a line is
    # reported once per pattern (bare patterns report every end offset: a flood line cost ~90
    # Python callbacks)
    # (a plain spec's copy relaxed: see _relaxed; single-match reports are taken as they come)
    def database(pairs: list) -> Any:
        return _hs_compile(*_expressions(pairs, lambda _c, f: not f & hs.HS_FLAG_SINGLEMATCH))

    # the main database as it will be when every sampled and block spec compiles alone (they
    # always have): built in another thread meanwhile (hyperscan lets go of the GIL while it
    # compiles), used when the guess held, else built again below
    single = hs.HS_FLAG_SINGLEMATCH
    guess = [(c, f | single if c.spec.block or c.spec.sample else f) for c, f in todo]
    ahead = _Ahead(database, guess) if guess else None
    sampled: dict[int, Any] = {}
    for c, f in todo:
        if not (c.spec.sample or c.spec.block):
            continue
        try:
            sampled[c.idx] = _hs_compile(*_expressions([(c, f)], _exact))
        except Exception as e:  # hyperscan refuses some RE2 syntax, e.g. (?U)
            if c.spec.sample:
                _log_fallback(c, e)
    # block specs: each reports its first line per scan call (hyperscan's single-match mode)
    block = [(c, f) for c, f in todo if c.spec.block and c.idx in sampled]
    block_db = None
    if block:
        try:
            block_db = _hs_compile(*_expressions([(c, f | hs.HS_FLAG_SINGLEMATCH) for c, f in block], _exact))
        except Exception as e:  # every block spec is then matched in full with the others
            logger.info("hyperscan single-match database failed (%s); progress lines are not sampled", e)
            block = []
    blocked = {c.idx for c, _ in block}
    for c, _ in todo:
        if c.spec.block and c.idx not in blocked:
            sampled.pop(c.idx, None)
    main = [(c, f | single if c.idx in blocked or c.spec.sample else f) for c, f in todo]
    main = [(c, f) for c, f in main if not c.spec.sample or c.idx in sampled]

    db = None
    same = False
    if main:
        try:
            same = ahead is not None and [(c.idx, f) for c, f in main] == [(c.idx, f) for c, f in guess]
            db = ahead.result() if same else database(main)  # type: ignore[union-attr]
        except Exception:  # find the patterns it refuses, keep the rest
            keep = []
            for c, f in main:
                try:
                    database([(c, f)])
                    keep.append((c, f))
                except Exception as e:
                    if not c.spec.sample:  # (a sampled spec still has its own database)
                        _log_fallback(c, e)
            main = keep
            if main:
                try:
                    db = database(main)
                except Exception as e:
                    if strict:
                        raise
                    logger.warning("hyperscan database failed (%s); those matchers use RE2", e)
                    main = []
    if ahead is not None and not (main and same):  # (its guess did not hold: rare) let it finish
        try:
            ahead.result()
        except Exception as exc:  # what it raised was found again above
            logger.debug("hyperscan: the guessed main database failed too: %s", exc)
    in_main = {c.idx for c, _ in main}
    return (db if main else None), sampled, in_main | set(sampled), block_db, in_main
