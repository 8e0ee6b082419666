r"""Multi-pattern scanning of log bytes: the hot path from raw log data to matcher hits.

A :class:`Scanner` is fed chunks of one byte stream, keeps the incomplete trailing line for the
next call and reports, for each complete line, every matcher whose regex is found in it. Most
lines match nothing, so a chunk is never walked line by line in Python: one engine call over
the whole buffer proposes candidate lines, and only those are looked at again.

Semantics, identical for every backend:

* A line is the bytes before ``\n`` without one trailing ``\r``, cut to ``max_line`` bytes; a
  cut line is matched on that head. A matcher hits when its RE2 regex is found in the line;
  ``^ $ \A \z`` refer to the line. The truth is always RE2 on the line: buffer scans only
  propose candidates and must never miss one.
* Patterns work on bytes (RE2 Latin-1): ``.`` and classes match one byte and ``\w \d \s \b``
  are ASCII, so invalid UTF-8 never stops a match. A pattern with non-ASCII characters or
  ``\p{..}`` classes is compiled for UTF-8 instead and matches characters.

Backends:

* ``hyperscan`` (x86-64): the non-sampled patterns in one block-mode database. Its copy of a
  pattern drops ``^ $ \A \z`` (this build misses some multi-line anchor matches) and spells
  ``\s \S \v`` the RE2 way; reports are mapped to lines, deduplicated, and checked with RE2,
  which extracts the groups. Fallback, per pattern, to the RE2 path (logged at INFO): UTF-8
  patterns, ``\C``, ``{,n}``, numeric escapes under ignore-case, and anything hyperscan fails
  to compile, e.g. ``(?U)``. After 4096 reports in one call the scan stops, the line it
  stopped in is checked with RE2, and the scan resumes after it.
* ``re2`` (portable): per encoding, one alternation searched over the buffer in multi-line
  mode; an ``re2.Set`` says which patterns hit each candidate line; the search resumes at the
  next line.
* ``auto``: hyperscan when it imports and compiles, else re2.

Sampled matchers are searched over windows that tile the buffer from its end (16 KiB, then 4x
larger) until a line really matches: no callback per heartbeat line. Patterns that can match a
cut head but not the whole line (``$ \z \b \B``, UTF-8) are also checked on each cut head.
A Scanner is not thread-safe.
"""

from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass
from typing import Any, Sequence

import re2

from engine.core import cache

logger = logging.getLogger(__name__)

_hs: Any
try:  # hyperscan is only built for x86-64
    import hyperscan as _hs
except (ImportError, OSError):  # pragma: no cover - depends on the platform
    _hs = None

__all__ = ["MatcherSpec", "Hit", "Scanner", "check_pattern", "hyperscan_available", "digit_blind", "blank_digits"]

_WINDOW = 16 * 1024  # first tail window for sampled matchers; grows x4
_COMBINED_MAX_MEM = 64 << 20  # RE2 memory budget of the combined alternation (mostly DFA cache)
_UNANCHORED = re2._Anchor.UNANCHORED
_STORM = 1 << 16  # hyperscan reports in one call before the scan stops and resumes after the line
_MEMO_MAX = 8192  # (matcher, line with digits blanked) -> RE2's answer, per rulebook and source
_MEMO_LINE = 2048  # longer lines are always matched afresh
_ZERO = bytes.maketrans(b"0123456789", b"0000000000")
_LINE_SPEC = operator.itemgetter(0, 1)  # records in line, then spec order


@dataclass(frozen=True)
class MatcherSpec:
    """One regex to look for. ``sample``: only the last matching line per fed chunk is needed."""

    id: str
    pattern: str
    sample: bool = False
    ignore_case: bool = False


class Hit:
    """One line that one matcher hit.

    ``groups`` (the named groups' text) is decoded on first use: most hits of a dense training
    log are progress lines that are counted and left out, and never read. ``blank``: the line
    with every digit written 0, when the matcher cannot tell digits apart (see ``digit_blind``):
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
        self._c: _Compiled | None = None
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


def blank_digits(line: bytes) -> bytes:
    """``line`` with every ASCII digit written ``0``: equal for lines that differ only in digits."""
    return line.translate(_ZERO)


def hyperscan_available() -> bool:
    """True when the hyperscan module imports on this machine."""
    return _hs is not None


# --------------------------------------------------------------------------------------------
# pattern analysis and rewriting


def _class_end(p: str, i: int) -> int:
    """Index just after the character class that starts at ``p[i] == '['`` (RE2 rules)."""
    n = len(p)
    j = i + 1
    if j < n and p[j] == "^":
        j += 1
    if j < n and p[j] == "]":  # a leading ] is a literal
        j += 1
    while j < n and p[j] != "]":
        if p[j] == "\\":
            j += 2
        elif p.startswith("[:", j):
            k = p.find(":]", j + 2)
            j = k + 2 if k >= 0 else j + 1
        else:
            j += 1
    return min(j + 1, n)


_HS_CLASS_ESCAPES = {
    "s": "\\t\\n\\f\\r\\x20",  # RE2's \s has no \v; hyperscan's has
    "S": "\\x00-\\x08\\x0b\\x0e-\\x1f\\x21-\\xff",
    "v": "\\x0b",  # RE2: vertical tab; PCRE: any vertical space
}
_HS_ESCAPES = {"s": "[\\t\\n\\f\\r ]", "S": "[^\\t\\n\\f\\r ]", "v": "\\x0b"}


def _walk(p: str, target: str) -> tuple[str, set[str]]:
    """Render pattern ``p`` for ``target`` and collect the features that decide its path.

    target ``truth``: the pattern as written, with an unterminated ``\\Q`` closed, so that it can
    be wrapped in a group. ``re2buf``: for a multi-line search over a whole buffer: captures made
    non-capturing, ``^ \\A`` -> line start, ``$ \\z`` -> line end allowing a CR before the LF.
    ``hs``: the same, plus the escapes whose meaning differs between RE2 and PCRE spelled out.
    """
    buf = target != "truth"
    hs = target == "hs"
    out: list[str] = []
    feats: set[str] = set()
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if ord(c) > 127:
            feats.add("nonascii")
        if c == "\\":
            d = p[i + 1] if i + 1 < n else ""
            if d == "Q":
                j = p.find("\\E", i + 2)
                body = p[i + 2 :] if j < 0 else p[i + 2 : j]
                if any(ord(ch) > 127 for ch in body):
                    feats.add("nonascii")
                out.append("\\Q" + body + "\\E")
                i = n if j < 0 else j + 2
                continue
            if d in ("p", "P"):
                feats.add("unicode")
            elif d in ("z", "b", "B"):
                feats.add("cut")
            elif d == "C":
                feats.add("anybyte")
            elif d == "x" or d in "01234567":
                feats.add("numeric")
            if buf and d in ("A", "z"):
                out.append("" if hs else "(?m:^)" if d == "A" else "(?m:\\r?$)")
            elif hs and d in _HS_ESCAPES:
                out.append(_HS_ESCAPES[d])
            else:
                out.append(p[i : i + 2])
            i += 2
        elif c == "[":
            j = _class_end(p, i)
            body = p[i:j]
            if any(ord(ch) > 127 for ch in body):
                feats.add("nonascii")
            if "\\p" in body or "\\P" in body:
                feats.add("unicode")
            if "\\x" in body or any(f"\\{k}" in body for k in "01234567"):
                feats.add("numeric")
            if hs:
                parts = []
                k = 0
                while k < len(body):
                    if body[k] == "\\" and k + 1 < len(body):
                        parts.append(_HS_CLASS_ESCAPES.get(body[k + 1], body[k : k + 2]))
                        k += 2
                    else:
                        parts.append(body[k])
                        k += 1
                body = "".join(parts)
            out.append(body)
            i = j
        elif c == "(":
            if p.startswith("(?P<", i) or (p.startswith("(?<", i) and not p.startswith(("(?<=", "(?<!"), i)):
                j = p.find(">", i)
                j = n - 1 if j < 0 else j
                out.append("(?:" if buf else p[i : j + 1])
                i = j + 1
            elif p.startswith("(?", i):
                j = i + 2
                while j < n and p[j] not in ":)":
                    j += 1
                letters = p[i + 2 : j]
                if "i" in letters:
                    feats.add("inline_i")
                out.append(p[i : j + 1])
                i = j + 1
            else:
                out.append("(?:" if buf else "(")
                i += 1
        elif buf and c == "^":
            out.append("" if hs else "(?m:^)")
            i += 1
        elif c == "$":
            feats.add("cut")
            out.append(c if not buf else "" if hs else "(?m:\\r?$)")
            i += 1
        else:
            if c == "{" and p.startswith("{,", i):
                feats.add("brace_comma")
            out.append(c)
            i += 1
    return "".join(out), feats


_ALL_DIGITS = frozenset("0123456789")
#: POSIX classes: True when they hold every digit, False when none
_POSIX_DIGITS = {
    "alnum": True,
    "digit": True,
    "xdigit": True,
    "word": True,
    "print": True,
    "graph": True,
    "ascii": True,
    "alpha": False,
    "upper": False,
    "lower": False,
    "space": False,
    "blank": False,
    "punct": False,
    "cntrl": False,
}
_CLASS_ESCAPES = {
    "d": True,
    "w": True,
    "S": True,
    "D": False,
    "W": False,
    "s": False,
    "t": False,
    "n": False,
    "r": False,
    "f": False,
    "v": False,
    "a": False,
    "e": False,
}
_QUANT = re.compile(r"\{\d+(?:,\d*)?\}")


def _class_digits(body: str) -> frozenset | None:
    """The digits a character class ``[...]`` holds (negation does not matter here: a class that
    holds all or none of them is blind either way), or None when it is not understood."""
    inner = body[1:-1] if body.endswith("]") else body[1:]
    if inner.startswith("^"):
        inner = inner[1:]
    held: set[str] = set()
    i, n = 0, len(inner)
    prev: str | None = None  # the last single character, for a range
    while i < n:
        c = inner[i]
        if inner.startswith("[:", i):
            j = inner.find(":]", i + 2)
            name = inner[i + 2 : j].lstrip("^") if j >= 0 else ""
            if name not in _POSIX_DIGITS:
                return None
            if _POSIX_DIGITS[name]:
                held |= _ALL_DIGITS
            i, prev = j + 2, None
        elif c == "\\":
            d = inner[i + 1] if i + 1 < n else ""
            if d in _CLASS_ESCAPES:
                if _CLASS_ESCAPES[d]:
                    held |= _ALL_DIGITS
                prev = None
            elif d.isalnum() or not d:
                return None  # \x.., octal, \p{..}: not worth understanding
            else:
                prev = d
                held |= {d} & _ALL_DIGITS
            i += 2
        elif c == "-" and prev is not None and i + 1 < n and inner[i + 1] not in "]\\[":
            hi = inner[i + 1]
            held |= {chr(k) for k in range(ord(prev), ord(hi) + 1)} & _ALL_DIGITS
            i, prev = i + 2, None
        else:
            if c in _ALL_DIGITS:
                held.add(c)
            prev = c
            i += 1
    return frozenset(held)


def digit_blind(pattern: str) -> bool:
    """True when ``pattern`` cannot tell one ASCII digit from another: every literal, class and
    escape in it holds all of 0-9 or none. Two lines that differ only in which digits they hold
    then match alike, with the same group spans (RE2 decides on byte classes, and the digits are
    one class), so the answer for one line of a flood serves every repeat of its shape.
    Conservative: a pattern it does not fully understand is not blind."""
    i, n = 0, len(pattern)
    p = pattern
    while i < n:
        c = p[i]
        if c == "\\":
            d = p[i + 1] if i + 1 < n else ""
            if d == "Q":
                j = p.find("\\E", i + 2)
                body = p[i + 2 :] if j < 0 else p[i + 2 : j]
                if set(body) & _ALL_DIGITS:
                    return False
                i = n if j < 0 else j + 2
                continue
            if d in "xpPC" or d.isdigit() or not d:
                return False
            i += 2
        elif c == "[":
            j = _class_end(p, i)
            held = _class_digits(p[i:j])
            if held is None or held not in (frozenset(), _ALL_DIGITS):
                return False
            i = j
        elif c == "(" and p.startswith("(?", i):
            j = (
                p.find(">", i) + 1
                if p.startswith(("(?P<", "(?<"), i) and not p.startswith(("(?<=", "(?<!"), i)
                else i + 2
            )
            if j <= 0:
                return False
            i = j
        elif c == "{":
            q = _QUANT.match(p, i)
            i = q.end() if q else i + 1
        elif c in _ALL_DIGITS:
            return False
        else:
            i += 1
    return True


def _is_utf8(feats: set[str]) -> bool:
    return bool(feats & {"nonascii", "unicode"})


def _options(utf8: bool, max_mem: int | None = None) -> re2.Options:
    o = re2.Options()
    o.encoding = re2.Options.Encoding.UTF8 if utf8 else re2.Options.Encoding.LATIN1
    o.log_errors = False
    if max_mem:
        o.max_mem = max_mem
    return o


def _source(pattern: str, target: str, ignore_case: bool) -> tuple[bytes, set[str]]:
    text, feats = _walk(pattern, target)
    if ignore_case and target != "hs":
        text = "(?i:" + text + ")"
    return text.encode("utf-8"), feats


def _explain(msg: str) -> str:
    """A one-line human message for an RE2 compile error."""
    if msg.startswith("invalid escape sequence: \\") and msg[-1:].isdigit():
        return f"backreferences ({msg.split(': ', 1)[1]}) are not supported: RE2 has none"
    if "(?=" in msg or "(?!" in msg:
        return "look-ahead (?=...) / (?!...) is not supported by RE2"
    if "(?<=" in msg or "(?<!" in msg:
        return "look-behind (?<=...) / (?<!...) is not supported by RE2"
    if "(?>" in msg or "++" in msg or "*+" in msg or "?+" in msg:
        return "atomic groups and possessive quantifiers are not supported by RE2"
    return f"invalid RE2 pattern: {msg}"


def _matches_empty(rx) -> bool:
    """True when ``rx`` can match an empty string somewhere (it would hit nearly every line)."""
    for text in (b"", b"a b-1.\t_Z9"):
        for pos in range(len(text) + 1):
            if rx.match(text, pos, pos) is not None:
                return True
    return False


def check_pattern(pattern: str) -> str | None:
    """None when ``pattern`` is usable by a Scanner; otherwise one line saying why not."""
    return _check(pattern)[0]


def _check(pattern: str) -> tuple[str | None, Any, bytes, set[str]]:
    """(why ``pattern`` is refused or None, its RE2 as written, its truth source, its features)."""
    if not isinstance(pattern, str):
        return f"pattern must be a string, not {type(pattern).__name__}", None, b"", set()
    if not pattern:
        return "empty pattern: it would match every line", None, b"", set()
    src, feats = _source(pattern, "truth", False)
    try:
        rx = re2.compile(src, _options(_is_utf8(feats)))
    except re2.error as e:
        msg = e.args[0] if e.args else str(e)
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        return _explain(str(msg)), None, src, feats
    if _matches_empty(rx):
        return "pattern can match the empty string, so it would hit (nearly) every line", None, src, feats
    return None, rx, src, feats


# --------------------------------------------------------------------------------------------
# the scanner


class _Compiled:
    """One spec, compiled for the line (truth) and for the buffer-wide search."""

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
        "_match",
        "blind",
        "index",
    )

    def __init__(self, idx: int, spec: MatcherSpec):
        self.idx = idx
        self.spec = spec
        self.truth, rx, self.utf8, self.cut_sensitive, self.blind, self.hs_src = _analyse(spec)
        self.rx = rx if rx is not None else re2.compile(self.truth, _options(self.utf8))
        self.has_groups = bool(self.rx.groupindex)
        self.named = tuple(
            (k.decode("utf-8", "replace") if isinstance(k, bytes) else k, i) for k, i in self.rx.groupindex.items()
        )
        self.index = dict(self.named)
        # the wrapper's search() + groupdict() cost ~35 us a line in Python; its engine call, 2
        self._match = self.rx._regexp.Match
        self.buf_src: bytes | None = None  # rendered on demand (specs on the RE2 path), see buffer_source
        self.buf_rx: Any = None  # compiled on demand (sampled specs on the RE2 path)

    def buffer_source(self) -> bytes:
        """The pattern for a multi-line search over a whole buffer (the RE2 path)."""
        if self.buf_src is None:
            self.buf_src = _source(self.spec.pattern, "re2buf", self.spec.ignore_case)[0]
        return self.buf_src

    def search(self, text: bytes):
        """The spans of the first match in ``text`` (a line), or None."""
        spans = self._match(_UNANCHORED, text, 0, len(text))
        return None if spans[0][0] < 0 else spans

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


def _analyse(spec: MatcherSpec) -> tuple:
    """What a Scanner derives from a spec before compiling it: (truth source, its RE2 compiled
    when that is the pattern as checked, UTF-8, may match a cut head but not the line,
    digit-blind, hyperscan source or None). Raises ValueError for a pattern ``check_pattern``
    refuses. The pattern is walked twice (as written, for hyperscan); the buffer form is
    rendered only where the RE2 path needs it."""
    msg, rx, truth, feats = _check(spec.pattern)
    if msg is not None:
        raise ValueError(f"matcher {spec.id!r}: {msg}")
    utf8 = _is_utf8(feats)
    if spec.ignore_case:
        truth, rx = b"(?i:" + truth + b")", None  # as _source writes it
    hs_ok = not (
        utf8
        or "anybyte" in feats
        or "brace_comma" in feats
        or ("numeric" in feats and (spec.ignore_case or "inline_i" in feats))
    )
    return (
        truth,
        rx,
        utf8,
        utf8 or "cut" in feats,
        digit_blind(spec.pattern),
        _source(spec.pattern, "hs", False)[0] if hs_ok else None,
    )


class _Re2Group:
    """Non-sampled specs of one encoding on the RE2 path: one alternation plus one Set."""

    def __init__(self, members: list[_Compiled], utf8: bool):
        self.members = members
        alt = b"|".join(b"(?:" + c.buffer_source() + b")" for c in members)
        self.comb = re2.compile(alt, _options(utf8, _COMBINED_MAX_MEM))
        self.set = re2.Set.SearchSet(_options(utf8, _COMBINED_MAX_MEM))
        for c in members:
            self.set.Add(c.truth)
        self.set.Compile()


def _log_fallback(c: _Compiled, err: Exception) -> None:
    logger.info("matcher %r: hyperscan cannot compile it (%s); matched with RE2", c.spec.id, err)


def _stretch(hs_src: bytes) -> bytes:
    """The pattern stretched over the newline that ends its line: one report per line."""
    return b"(?:" + hs_src + b")[^\\n]*\\n"


def _hs_compile(expressions: list[bytes], ids: list[int], flags: list[int]):
    """A block-mode database, from the on-disk cache when it was built before from exactly these
    patterns by these library versions (building takes ~1 s for a rulebook's patterns)."""
    k = cache.key("hyperscan", expressions, ids, flags)
    data = cache.get(k)
    if data is not None:
        try:
            db = _hs.loadb(data, _hs.HS_MODE_BLOCK)
            db.scratch = _hs.Scratch(db)  # a loaded database comes without one
            return db
        except Exception as exc:  # damaged or foreign: build it again
            logger.debug("hyperscan cache entry %s unusable: %s", k, exc)
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    try:
        cache.put(k, bytes(_hs.dumpb(db)))
    except Exception as exc:  # pragma: no cover - serialisation is best effort
        logger.debug("hyperscan database not cached: %s", exc)
    return db


class Scanner:
    """Stateful multi-pattern scanner over one byte stream; see the module docstring."""

    def __init__(self, specs: Sequence[MatcherSpec], backend: str = "auto", max_line: int = 65536):
        if backend not in ("auto", "hyperscan", "re2"):
            raise ValueError(f"unknown backend {backend!r}: use auto, hyperscan or re2")
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        if backend == "hyperscan" and _hs is None:
            raise ValueError("backend 'hyperscan' requested but the hyperscan module is missing")
        self.specs = tuple(specs)
        self.max_line = int(max_line)
        self._cap = self.max_line + 2  # bytes of a pending line kept: enough to judge the cut
        self._c = [_Compiled(i, s) for i, s in enumerate(self.specs)]
        self.lines_seen = 0
        self.long_lines_cut = 0
        self.bytes_seen = 0
        self._off = 0
        self._lines = 0
        self._pend = bytearray()
        self._pend_total = 0
        # RE2's answer (spans or None) per (matcher, line with digits blanked), for digit-blind
        # matchers: a flood's repeats are not matched again. Shared by the copies scanner_for
        # makes (it is a pure function of the patterns), so its bound is per rulebook, not per file.
        self._memo: dict[tuple[int, bytes], object] = {}
        self._blind = [c.blind for c in self._c]

        self._hs_main: Any = None  # one database: every non-sampled pattern hyperscan takes
        self._hs_sampled: dict[int, Any] = {}  # sampled spec -> its own database
        on_hs: set[int] = set()
        if backend in ("auto", "hyperscan") and _hs is not None:
            on_hs = self._build_hyperscan(strict=backend == "hyperscan")
        self.backend = "hyperscan" if on_hs else "re2"
        self.hyperscan_specs = frozenset(on_hs)  # indexes matched by hyperscan (for reports)
        rest = [c for c in self._c if c.idx not in on_hs]
        self._groups = [
            _Re2Group(m, utf8)
            for utf8 in (False, True)
            if (m := [c for c in rest if not c.spec.sample and c.utf8 == utf8])
        ]
        self._re2_sampled = {c.idx: c for c in rest if c.spec.sample}
        for c in self._re2_sampled.values():
            c.buf_rx = re2.compile(c.buffer_source(), _options(c.utf8))
        self._sampled = [c.idx for c in self._c if c.spec.sample]
        self._cut_sensitive = [c for c in self._c if c.cut_sensitive]

    # -- construction ---------------------------------------------------------------------

    def _build_hyperscan(self, strict: bool) -> set[int]:
        """Compile what hyperscan can take; return the spec indexes it took."""
        todo: list[tuple[_Compiled, int]] = []
        for c in self._c:
            if c.hs_src is None:
                # how a pattern is matched is no news to an operator (the daemons log INFO): -v shows it
                logger.debug("matcher %r: matched with RE2 (pattern needs RE2 semantics)", c.spec.id)
            else:
                todo.append((c, _hs.HS_FLAG_CASELESS if c.spec.ignore_case else 0))
        main = [(c, f) for c, f in todo if not c.spec.sample]
        sampled: dict[int, Any] = {}
        for c, f in todo:
            if not c.spec.sample:
                continue
            try:
                sampled[c.idx] = _hs_compile([_stretch(c.hs_src or b"")], [c.idx], [f])
            except Exception as e:  # hyperscan refuses some RE2 syntax, e.g. (?U)
                _log_fallback(c, e)

        # non-sampled: one database, each pattern stretched to the end of its line, so that a
        # line is reported once per pattern (bare patterns report every end offset: a flood
        # line cost ~90 Python callbacks)
        def database(pairs: list) -> Any:
            return _hs_compile(
                [_stretch(c.hs_src or b"") for c, _ in pairs], [c.idx for c, _ in pairs], [f for _, f in pairs]
            )

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
        self._hs_main = db if main else None
        self._hs_sampled = sampled
        return {c.idx for c, _ in main} | set(sampled)

    # -- public API ---------------------------------------------------------------------------

    @property
    def position(self) -> tuple[int, int]:
        """(byte offset, lines consumed) of the first byte not yet consumed.

        The offset is where the pending partial line starts; the next complete line will be
        number ``lines consumed + 1``. ``reset(*position)`` on a new Scanner resumes there.
        """
        return self._off, self._lines

    @property
    def pending(self) -> int:
        """Bytes of the incomplete last line held back: the next chunk starts this far past ``position``."""
        return self._pend_total

    def group_names(self, index: int) -> tuple[str, ...]:
        """The named groups of spec ``index``."""
        return tuple(self._c[index].index)

    def reset(self, offset: int = 0, line_no: int = 0) -> None:
        """Forget the pending line and resume at a known position (see ``position``)."""
        self._off = int(offset)
        self._lines = int(line_no)
        self._pend = bytearray()
        self._pend_total = 0

    def feed(self, data: bytes) -> list[Hit]:
        """Consume ``data``; return the hits of the lines it completes, in line then spec order."""
        if not data:
            return []
        if not isinstance(data, bytes):
            data = bytes(data)
        self.bytes_seen += len(data)
        nl = data.rfind(b"\n")
        if nl < 0:
            self._keep(data)
            return []
        # parts: (buffer, lo, hi, stream offset of buffer[0], lines before buffer[lo])
        parts: list[tuple[bytes, int, int, int, int]] = []
        start = 0
        if self._pend_total:  # the pending line ends in this chunk: join just that line
            f = data.find(b"\n")
            line = b"".join((self._pend, memoryview(data)[: f + 1]))
            parts.append((line, 0, len(line), self._off, self._lines))
            start = f + 1
        data_off = self._off + self._pend_total
        if start <= nl:  # the rest is scanned in place, without a copy
            parts.append((data, start, nl + 1, data_off, self._lines + len(parts)))
        hits, nlines = self._scan(parts)
        self._off = data_off + nl + 1
        self._lines += nlines
        self.lines_seen += nlines
        self._pend = bytearray()
        self._pend_total = 0
        if nl + 1 < len(data):
            self._keep(memoryview(data)[nl + 1 :])
        return hits

    def flush(self) -> list[Hit]:
        """End of stream: scan the pending partial line, if any, as a last line."""
        if self._pend_total == 0:
            return []
        line = bytes(self._pend) + b"\n"
        hits, _ = self._scan([(line, 0, len(line), self._off, self._lines)])
        self._off += self._pend_total
        self._lines += 1
        self.lines_seen += 1
        self._pend = bytearray()
        self._pend_total = 0
        return hits

    # -- internals ------------------------------------------------------------------------

    def _keep(self, data) -> None:
        room = self._cap - len(self._pend)
        if room > 0:
            self._pend += data[:room]
        self._pend_total += len(data)

    def _long_lines(self, buf: bytes, lo: int, hi: int) -> dict[int, int]:
        """{start: end} of the lines in buf[lo:hi] longer than max_line (they are cut).

        Windows of max_line+1 bytes hop from line start to line start (after the last newline
        in the window), so only a window without a newline, i.e. a long line, costs more.
        """
        ml = self.max_line
        width = ml + 1
        trunc: dict[int, int] = {}
        p = lo
        while p + width < hi:
            q = buf.rfind(b"\n", p, p + width)
            if q >= 0:
                p = q + 1
                continue
            e = buf.find(b"\n", p + width, hi)
            if e < 0:
                e = hi - 1
            if e - p - (1 if buf[e - 1] == 13 else 0) > ml:
                trunc[p] = e
            p = e + 1
        self.long_lines_cut += len(trunc)
        return trunc

    def _scan(self, parts) -> tuple[list[Hit], int]:
        """Hits of the complete lines of each part, and the number of lines in the parts."""
        per_part = []
        sampled_owner: dict[int, int] = {}  # sampled spec -> index of the last part that has it
        for k, (buf, lo, hi, _, _) in enumerate(parts):
            records, sampled, trunc = self._scan_part(buf, lo, hi)
            per_part.append((records, sampled, trunc))
            for idx in sampled:
                sampled_owner[idx] = k
        hits: list[Hit] = []
        total = 0
        for k, ((buf, lo, hi, base_off, base_line), (records, sampled, trunc)) in enumerate(zip(parts, per_part)):
            for idx, (ls, text, m) in sampled.items():
                if sampled_owner[idx] == k:
                    records.append((ls, idx, text, m, None))
            records.sort(key=_LINE_SPEC)
            count = buf.count
            cs = self._c
            add, new = hits.append, Hit.__new__
            prev, nlines = lo, 0
            for ls, idx, text, m, blank in records:
                nlines += count(b"\n", prev, ls)
                prev = ls
                c = cs[idx]
                if blank is None and c.blind:
                    blank = text.translate(_ZERO)
                h = new(Hit)  # set here, not in __init__: this loop runs once per hit; groups decoded on use
                h.matcher, h.line, h.line_no, h.offset, h.truncated, h.blank = (
                    idx,
                    text,
                    base_line + 1 + nlines,
                    base_off + ls,
                    ls in trunc,
                    blank,
                )
                h._c, h._spans, h._groups = c, m, None if m is not None and c.has_groups else {}
                add(h)
            total += nlines + count(b"\n", prev, hi)
        return hits, total

    def _scan_part(self, buf: bytes, lo: int, hi: int):
        """Records (line start, spec, line, match) of buf[lo:hi], the last line of each sampled
        spec, and the cut lines."""
        trunc = self._long_lines(buf, lo, hi)
        ml = self.max_line

        def line_at(ls: int, le: int) -> bytes:
            if ls in trunc:
                return buf[ls : ls + ml]
            if le > ls and buf[le - 1] == 13:
                le -= 1
            return buf[ls:le]

        records: list[tuple] = []
        if self._hs_main is not None:
            self._hs_scan(buf, lo, hi, trunc, records)
        for g in self._groups:
            self._re2_scan(g, buf, lo, hi, line_at, records)
        floors = dict.fromkeys(self._sampled, lo)
        tails: dict[int, tuple] = {}
        if trunc and self._cut_sensitive:
            # a head can match where the whole line does not ($, \b at the cut): check heads directly
            seen = {(r[0], r[1]) for r in records if r[0] in trunc}
            for c in self._cut_sensitive:
                for ls in sorted(trunc, reverse=c.spec.sample):
                    if (ls, c.idx) in seen:
                        continue
                    text = buf[ls : ls + ml]
                    m = c.search(text)
                    if m is None:
                        continue
                    if not c.spec.sample:
                        records.append((ls, c.idx, text, m, None))
                        continue
                    tails[c.idx] = (ls, text, m)
                    floors[c.idx] = ls
                    break
        sampled: dict[int, tuple] = {}
        if floors:
            self._last_sampled(buf, lo, hi, floors, line_at, sampled)
        for idx, rec in tails.items():
            if idx not in sampled or sampled[idx][0] < rec[0]:
                sampled[idx] = rec
        return records, sampled, trunc

    def _hs_scan(self, buf: bytes, lo: int, hi: int, trunc: dict[int, int], records: list) -> None:
        """One hyperscan call over buf[lo:hi] (more only after a storm of reports on one line)."""
        rx = [c.search for c in self._c]
        blind, memo = self._blind, self._memo
        rfind, find = buf.rfind, buf.find
        ml = self.max_line
        blank = None
        pos = lo
        while pos < hi:
            ends: list[tuple[int, int]] = []
            add = ends.append

            def on_match(ident, _from, to, _flags, _ctx):
                add((to, ident))
                return len(ends) >= _STORM  # stop; the line is then checked with RE2

            view = buf if pos == 0 and hi == len(buf) else memoryview(buf)[pos:hi]
            stopped = False
            try:
                self._hs_main.scan(view, match_event_handler=on_match)
            except _hs.ScanTerminated:
                stopped = True
            ends.sort()
            ls = le = -1
            text = b""
            last = None
            for report in ends:
                if report == last:
                    continue  # (a pattern reports a line once: its copy is stretched to the newline)
                last = report
                to, ident = report
                to += pos - 1  # the newline that ends the reported line
                if not ls <= to <= le:  # not in the line of the previous report
                    ls = rfind(b"\n", 0, to) + 1
                    if ls >= hi:
                        stopped = False  # only reports after the last line are left
                        break
                    le = find(b"\n", to, hi)
                    if ls in trunc:  # as _scan_part's line_at
                        text = buf[ls : ls + ml]
                    else:
                        text = buf[ls : le - 1 if le > ls and buf[le - 1] == 13 else le]
                    blank = None
                if blind[ident] and len(text) <= _MEMO_LINE:
                    if blank is None:
                        blank = text.translate(_ZERO)
                    m = memo.get((ident, blank), memo)
                    if m is memo:
                        m = rx[ident](text)
                        if len(memo) >= _MEMO_MAX:
                            memo.clear()
                        memo[(ident, blank)] = m
                    if m is not None:
                        records.append((ls, ident, text, m, blank))
                    continue
                m = rx[ident](text)
                if m is not None:
                    records.append((ls, ident, text, m, None))
            if not stopped or ls < 0:
                return
            # reports come in end-offset order: lines before the last one are complete; check
            # every hyperscan pattern on the last line directly and resume after it
            done = {r[1] for r in records if r[0] == ls}
            for c in self._c:
                if c.idx in self.hyperscan_specs and not c.spec.sample and c.idx not in done:
                    m = c.search(text)
                    if m is not None:
                        records.append((ls, c.idx, text, m, None))
            pos = le + 1

    def _re2_scan(self, g: _Re2Group, buf: bytes, lo: int, hi: int, line_at, records: list) -> None:
        search = g.comb.search
        match_set = g.set.Match
        find, rfind = buf.find, buf.rfind
        pos = lo
        while pos < hi:
            m = search(buf, pos, hi)
            if m is None:
                break
            s = m.start()
            ls = rfind(b"\n", 0, s) + 1
            le = find(b"\n", s, hi)
            if le < 0:
                le = hi - 1
            text = line_at(ls, le)
            for k in sorted(match_set(text) or ()):
                c = g.members[k]
                records.append((ls, c.idx, text, c.search(text) if c.has_groups else None, None))
            pos = le + 1

    def _candidates(self, idx: int, buf: bytes, lo: int, hi: int) -> list[int]:
        """Line starts in buf[lo:hi] where the buffer search proposes sampled spec ``idx``."""
        rfind = buf.rfind
        starts: list[int] = []
        db = self._hs_sampled.get(idx)
        if db is not None:
            ends: list[int] = []

            def on_match(_ident, _from, to, _flags, _ctx):
                ends.append(to)

            db.scan(memoryview(buf)[lo:hi], match_event_handler=on_match)
            ends.sort()
            for to in ends:  # each report ends just after a newline
                ls = rfind(b"\n", 0, lo + to - 1) + 1
                if ls < hi and (not starts or starts[-1] != ls):
                    starts.append(ls)
            return starts
        c = self._re2_sampled[idx]
        pos = lo
        while pos < hi:
            m = c.buf_rx.search(buf, pos, hi)
            if m is None:
                break
            s = m.start()
            starts.append(rfind(b"\n", 0, s) + 1)
            pos = buf.find(b"\n", s, hi) + 1
            if pos == 0:
                break
        return starts

    def _last_sampled(self, buf: bytes, lo: int, hi: int, floors: dict, line_at, out: dict) -> None:
        """Last line at or above ``floors[spec]`` that each sampled spec really matches.

        Windows tile the buffer from its end, each 4x the previous, so a heartbeat near the end
        costs a few small scans and a spec that matches nowhere costs one pass in ~6 calls.
        """
        find = buf.find
        for idx, floor in floors.items():
            rx = self._c[idx].search
            top, width = hi, _WINDOW
            while top > floor:
                cut = top - width
                wlo = max(buf.rfind(b"\n", 0, cut) + 1 if cut > floor else floor, floor)
                for ls in reversed(self._candidates(idx, buf, wlo, top)):
                    text = line_at(ls, find(b"\n", ls, hi))
                    m = rx(text)
                    if m is not None:
                        out[idx] = (ls, text, m)
                        break
                if idx in out:
                    break
                top = wlo
                width *= 4
