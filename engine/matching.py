"""Multi-pattern scanning of log bytes: the hot path from raw log data to matcher hits.

A :class:`Scanner` is fed chunks of one byte stream. It keeps the incomplete trailing line for
the next call and reports, for every complete line, each matcher whose regex is found in it.
Most lines match nothing, so a chunk is never walked line by line in Python: one engine call
scans the whole buffer for candidate lines, and only those are looked at again.

Matching semantics (the same for every backend):

* A line is the bytes before ``\\n``, without one trailing ``\\r``, cut to ``max_line`` bytes.
  A matcher hits a line when its RE2 regex is found anywhere in that line (search, not
  fullmatch); anchors ``^ $ \\A \\z`` refer to the line.
* Patterns work on bytes: ``.`` and classes match one byte, ``\\w \\d \\s \\b`` are ASCII, so
  invalid UTF-8 never stops a match. A pattern that contains non-ASCII characters or Unicode
  classes (``\\p{..}``) is compiled for UTF-8 instead and matched by character.
* The truth for a line is always RE2 on that line. The buffer-wide scan only proposes
  candidate lines and must never miss one; it may propose too many.

Backends:

* ``hyperscan`` (x86-64): all eligible patterns in one block-mode database over the buffer with
  HS_FLAG_MULTILINE. Each pattern is wrapped as ``(?:P)[^\\n]*$`` so that every match is
  reported once, at the end of its line, whatever the number of places it matches there.
  A pattern goes to the RE2 path instead (logged at INFO) when hyperscan and RE2 could read it
  differently or hyperscan refuses it: UTF-8 patterns, ``\\C``, ``{,n}``, numeric escapes
  under ignore-case, and any pattern hyperscan fails to compile (e.g. ``(?U)``).
* ``re2`` (portable): per encoding, one alternation of all patterns searched over the buffer
  in multi-line mode; at each candidate line an ``re2.Set`` says which patterns hit, and the
  search resumes at the next line, so the Python work is per candidate line.
* ``auto``: hyperscan if it imports and compiles here, else re2.

Sampled matchers (progress heartbeats) never cost a callback per line: the buffer scan only
says whether (and first where) they match, then growing windows from the end of the buffer find
the last line that really matches.

A Scanner is not thread-safe (hyperscan scratch space and the pending line are per object).
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field
from typing import Sequence

import re2

logger = logging.getLogger(__name__)

try:  # hyperscan is only built for x86-64
    import hyperscan as _hs
except Exception:  # pragma: no cover - depends on the platform
    _hs = None

__all__ = ["MatcherSpec", "Hit", "Scanner", "check_pattern", "hyperscan_available"]

_WINDOW = 16 * 1024  # first tail window for sampled matchers; grows x4
_COMBINED_MAX_MEM = 256 << 20  # RE2 memory budget for the combined alternation (DFA cache)
_SAMPLED_ID = 1 << 20  # hyperscan id offset of the single-match copies of sampled patterns


@dataclass(frozen=True)
class MatcherSpec:
    """One regex to look for. ``sample``: only the last matching line per fed chunk is needed."""

    id: str
    pattern: str
    sample: bool = False
    ignore_case: bool = False


@dataclass(frozen=True)
class Hit:
    """One line that one matcher hit."""

    matcher: int
    line: bytes
    line_no: int
    offset: int
    groups: dict[str, str] = field(default_factory=dict)
    truncated: bool = False


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
            elif d == "C":
                feats.add("anybyte")
            elif d == "x" or d in "01234567":
                feats.add("numeric")
            if buf and d == "A":
                out.append("(?m:^)")
            elif buf and d == "z":
                out.append("(?m:\\r?$)")
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
            if p.startswith("(?P<", i) or (
                p.startswith("(?<", i) and not p.startswith(("(?<=", "(?<!"), i)
            ):
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
            out.append("(?m:^)")
            i += 1
        elif buf and c == "$":
            out.append("(?m:\\r?$)")
            i += 1
        else:
            if c == "{" and p.startswith("{,", i):
                feats.add("brace_comma")
            out.append(c)
            i += 1
    return "".join(out), feats


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
    if not isinstance(pattern, str):
        return f"pattern must be a string, not {type(pattern).__name__}"
    if not pattern:
        return "empty pattern: it would match every line"
    src, feats = _source(pattern, "truth", False)
    try:
        rx = re2.compile(src, _options(_is_utf8(feats)))
    except re2.error as e:
        msg = e.args[0] if e.args else str(e)
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        return _explain(str(msg))
    if _matches_empty(rx):
        return "pattern can match the empty string, so it would hit (nearly) every line"
    return None


# --------------------------------------------------------------------------------------------
# the scanner


class _Compiled:
    """One spec, compiled for the line (truth) and for the buffer-wide search."""

    __slots__ = ("idx", "spec", "utf8", "truth", "rx", "has_groups", "buf_src", "buf_rx", "hs_src")

    def __init__(self, idx: int, spec: MatcherSpec):
        msg = check_pattern(spec.pattern)
        if msg is not None:
            raise ValueError(f"matcher {spec.id!r}: {msg}")
        self.idx = idx
        self.spec = spec
        self.truth, feats = _source(spec.pattern, "truth", spec.ignore_case)
        self.utf8 = _is_utf8(feats)
        self.rx = re2.compile(self.truth, _options(self.utf8))
        self.has_groups = bool(self.rx.groupindex)
        self.buf_src, _ = _source(spec.pattern, "re2buf", spec.ignore_case)
        self.buf_rx = None  # compiled on demand (sampled specs on the RE2 path)
        hs_ok = not (
            self.utf8
            or "anybyte" in feats
            or "brace_comma" in feats
            or ("numeric" in feats and (spec.ignore_case or "inline_i" in feats))
        )
        self.hs_src = _source(spec.pattern, "hs", False)[0] if hs_ok else None


class _Re2Group:
    """Non-sampled specs of one encoding on the RE2 path: one alternation plus one Set."""

    def __init__(self, members: list[_Compiled], utf8: bool):
        self.members = members
        alt = b"|".join(b"(?:" + c.buf_src + b")" for c in members)
        self.comb = re2.compile(alt, _options(utf8, _COMBINED_MAX_MEM))
        self.set = re2.Set.SearchSet(_options(utf8, _COMBINED_MAX_MEM))
        for c in members:
            self.set.Add(c.truth)
        self.set.Compile()


def _hs_compile(expressions: list[bytes], ids: list[int], flags: list[int]):
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
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

        self._hs_main = self._hs_sampled = None
        hs_specs: list[_Compiled] = []
        if backend in ("auto", "hyperscan") and _hs is not None:
            hs_specs = self._build_hyperscan(strict=backend == "hyperscan")
        self.backend = "hyperscan" if self._hs_main is not None else "re2"
        on_hs = {c.idx for c in hs_specs} if self._hs_main is not None else set()
        self.hyperscan_specs = frozenset(on_hs)  # indexes matched by hyperscan (for reports)
        rest = [c for c in self._c if c.idx not in on_hs]
        self._groups = [
            _Re2Group(m, utf8)
            for utf8 in (False, True)
            if (m := [c for c in rest if not c.spec.sample and c.utf8 == utf8])
        ]
        self._re2_sampled = [c for c in rest if c.spec.sample]
        for c in self._re2_sampled:
            c.buf_rx = re2.compile(c.buf_src, _options(c.utf8))
        self._hs_sampled_idx = [c.idx for c in hs_specs if c.spec.sample] if on_hs else []

    # -- construction ---------------------------------------------------------------------

    def _build_hyperscan(self, strict: bool) -> list[_Compiled]:
        base = _hs.HS_FLAG_MULTILINE
        ok: list[tuple[_Compiled, bytes]] = []
        for c in self._c:
            if c.hs_src is None:
                logger.info("matcher %r: matched with RE2 (pattern needs RE2 semantics)", c.spec.id)
                continue
            flags = base | (_hs.HS_FLAG_CASELESS if c.spec.ignore_case else 0)
            for expr in (b"(?:" + c.hs_src + b")[^\\n]*$", c.hs_src):
                try:
                    _hs_compile([expr], [0], [flags])
                except Exception as e:  # hyperscan refuses some RE2 syntax
                    err = e
                    continue
                ok.append((c, expr))
                break
            else:
                logger.info("matcher %r: hyperscan cannot compile it (%s); matched with RE2", c.spec.id, err)
        if not ok:
            return []
        exprs, ids, flags = [], [], []
        sampled_exprs, sampled_ids, sampled_flags = [], [], []
        for c, expr in ok:
            f = base | (_hs.HS_FLAG_CASELESS if c.spec.ignore_case else 0)
            if c.spec.sample:
                exprs.append(expr)
                ids.append(c.idx + _SAMPLED_ID)
                flags.append(f | _hs.HS_FLAG_SINGLEMATCH)
                sampled_exprs.append(expr)
                sampled_ids.append(c.idx)
                sampled_flags.append(f)
            else:
                exprs.append(expr)
                ids.append(c.idx)
                flags.append(f)
        try:
            self._hs_main = _hs_compile(exprs, ids, flags)
            if sampled_exprs:
                self._hs_sampled = _hs_compile(sampled_exprs, sampled_ids, sampled_flags)
        except Exception as e:
            if strict:
                raise
            logger.warning("hyperscan database failed (%s); falling back to RE2 for all matchers", e)
            self._hs_main = self._hs_sampled = None
            return []
        return [c for c, _ in ok]

    # -- public API ---------------------------------------------------------------------------

    @property
    def position(self) -> tuple[int, int]:
        """(byte offset, lines consumed) of the first byte not yet consumed.

        The offset is where the pending partial line starts; the next complete line will be
        number ``lines consumed + 1``. ``reset(*position)`` on a new Scanner resumes there.
        """
        return self._off, self._lines

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
        first_drop = self._pend_total - len(self._pend)
        if self._pend:
            buf = bytes(self._pend) + data[: nl + 1]
        else:
            buf = data if nl == len(data) - 1 else data[: nl + 1]
        hits = self._scan(buf, first_drop)
        lines = buf.count(b"\n")
        self._off += first_drop + len(buf)
        self._lines += lines
        self.lines_seen += lines
        self._pend = bytearray()
        self._pend_total = 0
        if nl + 1 < len(data):
            self._keep(memoryview(data)[nl + 1 :])
        return hits

    def flush(self) -> list[Hit]:
        """End of stream: scan the pending partial line, if any, as a last line."""
        if self._pend_total == 0:
            return []
        first_drop = self._pend_total - len(self._pend)
        hits = self._scan(bytes(self._pend) + b"\n", first_drop)
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

    def _cut(self, buf: bytes):
        """Cut lines longer than max_line to their head. Returns (scan buffer, cut map, cut lines).

        Windows of max_line+1 bytes hop from line start to line start (the last newline in each
        window), so only a window without any newline, i.e. a long line, costs more than a find.
        """
        ml = self.max_line
        width = ml + 1
        n = len(buf)
        pieces: list[bytes] = []
        cut_at: list[int] = []
        cut_drop: list[int] = []
        trunc: set[int] = set()
        src = drop = p = 0
        while p + width < n:
            q = buf.rfind(b"\n", p, p + width)
            if q >= 0:
                p = q + 1
                continue
            e = buf.find(b"\n", p + width)
            if e < 0:
                e = n
            content = e - p - (1 if buf[e - 1] == 13 else 0)
            if content > ml:
                pieces.append(buf[src : p + ml])
                trunc.add(p - drop)
                drop += e - (p + ml)
                src = e
                cut_at.append(e - drop)
                cut_drop.append(drop)
            p = e + 1
        if not pieces:
            return buf, cut_at, cut_drop, trunc
        pieces.append(buf[src:])
        self.long_lines_cut += len(trunc)
        return b"".join(pieces), cut_at, cut_drop, trunc

    def _scan(self, buf: bytes, first_drop: int) -> list[Hit]:
        """Hits of the complete lines in ``buf`` (which ends with a newline)."""
        sb, cut_at, cut_drop, trunc = self._cut(buf)
        found: list[tuple] = []  # (line start, spec index, line, match or None)

        def line_at(ls: int, le: int) -> bytes:
            text = sb[ls:le]
            if text[-1:] == b"\r" and ls not in trunc:
                text = text[:-1]
            return text

        first: dict[int, int] = {}  # sampled spec -> line start of its first candidate
        if self._hs_main is not None:
            self._hs_scan(sb, line_at, found, first)
        for g in self._groups:
            self._re2_scan(g, sb, line_at, found)
        for c in self._re2_sampled:
            m = c.buf_rx.search(sb)
            if m is not None:
                first[c.idx] = sb.rfind(b"\n", 0, m.start()) + 1
        if first:
            self._last_sampled(sb, first, line_at, found)
        if not found:
            return []
        found.sort(key=lambda r: (r[0], r[1]))

        hits: list[Hit] = []
        base_off, base_line = self._off, self._lines
        count = sb.count
        prev = nlines = 0
        for ls, idx, text, m in found:
            nlines += count(b"\n", prev, ls)
            prev = ls
            pos = ls
            if cut_at:
                k = bisect.bisect_right(cut_at, ls)
                if k:
                    pos += cut_drop[k - 1]
            if pos:
                pos += first_drop
            groups: dict[str, str] = {}
            if m is not None and self._c[idx].has_groups:
                for name, value in m.groupdict().items():
                    if value is not None:
                        key = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
                        groups[key] = value.decode("utf-8", "replace")
            hits.append(
                Hit(
                    matcher=idx,
                    line=text,
                    line_no=base_line + 1 + nlines,
                    offset=base_off + pos,
                    groups=groups,
                    truncated=ls in trunc,
                )
            )
        return hits

    def _hs_scan(self, sb: bytes, line_at, found: list, first: dict) -> None:
        ends: list[tuple[int, int]] = []
        add = ends.append

        def on_match(ident, _from, to, _flags, _ctx):
            add((to, ident))

        self._hs_main.scan(sb, match_event_handler=on_match)
        if not ends:
            return
        ends.sort()
        rx = [c.rx for c in self._c]
        rfind, find, n = sb.rfind, sb.find, len(sb)
        seen: set[tuple[int, int]] = set()
        ls = le = -1
        text = b""
        for to, ident in ends:
            if not ls <= to <= le:  # not in the line of the previous report
                ls = rfind(b"\n", 0, to) + 1
                le = find(b"\n", to)
                if le < 0:
                    le = n
                text = line_at(ls, le)
            if ident >= _SAMPLED_ID:
                first.setdefault(ident - _SAMPLED_ID, ls)
                continue
            if (ls, ident) in seen:
                continue
            seen.add((ls, ident))
            m = rx[ident].search(text)
            if m is not None:
                found.append((ls, ident, text, m))

    def _re2_scan(self, g: _Re2Group, sb: bytes, line_at, found: list) -> None:
        search = g.comb.search
        match_set = g.set.Match
        find, rfind = sb.find, sb.rfind
        n = len(sb)
        pos = 0
        while pos < n:
            m = search(sb, pos)
            if m is None:
                break
            s = m.start()
            ls = rfind(b"\n", 0, s) + 1
            le = find(b"\n", s)
            if le < 0:
                le = n
            text = line_at(ls, le)
            for k in sorted(match_set(text) or ()):
                c = g.members[k]
                found.append((ls, c.idx, text, c.rx.search(text) if c.has_groups else None))
            pos = le + 1

    def _window_candidates(self, sb: bytes, lo: int, hi: int, want) -> dict[int, list[int]]:
        """Line starts in [lo, hi) where the buffer search proposes each wanted sampled spec."""
        out: dict[int, list[int]] = {}
        rfind = sb.rfind
        if self._hs_sampled is not None and any(i in want for i in self._hs_sampled_idx):
            ends: list[tuple[int, int]] = []
            add = ends.append

            def on_match(ident, _from, to, _flags, _ctx):
                add((to, ident))

            self._hs_sampled.scan(memoryview(sb)[lo:hi], match_event_handler=on_match)
            ends.sort()
            for to, ident in ends:
                if ident in want:
                    ls = max(rfind(b"\n", lo, lo + to) + 1, lo)
                    starts = out.setdefault(ident, [])
                    if not starts or starts[-1] != ls:
                        starts.append(ls)
        for c in self._re2_sampled:
            if c.idx not in want:
                continue
            starts = out.setdefault(c.idx, [])
            pos = lo
            while pos < hi:
                m = c.buf_rx.search(sb, pos, hi)
                if m is None:
                    break
                s = m.start()
                starts.append(rfind(b"\n", 0, s) + 1)
                pos = sb.find(b"\n", s) + 1
                if pos == 0:
                    break
        return out

    def _last_sampled(self, sb: bytes, first: dict[int, int], line_at, found: list) -> None:
        """For each sampled spec with a candidate, add its last verified line (windows from the end)."""
        pending = dict(first)
        hi, width = len(sb), _WINDOW
        while pending and hi > 0:
            cut = hi - width
            lo = sb.rfind(b"\n", 0, cut) + 1 if cut > 0 else 0
            lo = max(lo, min(pending.values()))
            for idx, starts in self._window_candidates(sb, lo, hi, pending).items():
                if idx not in pending:
                    continue
                rx = self._c[idx].rx
                for ls in reversed(starts):
                    le = sb.find(b"\n", ls)
                    text = line_at(ls, le)
                    m = rx.search(text)
                    if m is not None:
                        found.append((ls, idx, text, m))
                        del pending[idx]
                        break
            for idx in [i for i, f in pending.items() if f >= lo]:
                del pending[idx]  # no line at or after its first candidate really matches
            hi = lo
            width *= 4
