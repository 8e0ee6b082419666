"""Matcher specs compiled for the scanner: what ``engine.core.scanner.Scanner`` is built from.

A :class:`MatcherSpec` is one regex to look for; a :class:`CompiledSpec` holds it compiled for
the line (RE2, the truth) and renders it for the buffer-wide searches; :class:`Re2Group` is the
RE2 backend's alternation over several specs; ``engine.core.hsdb`` builds the hyperscan
backend's databases (from the on-disk cache when it can). A :class:`Hit` is one line one
matcher hit. What a pattern means and how it is rendered for each engine is
``engine.rulebook.patterns``'s.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import re2

from engine.rulebook import patterns

logger = logging.getLogger(__name__)

hs: Any
try:  # hyperscan is only built for x86-64
    import hyperscan as hs
except (ImportError, OSError):  # pragma: no cover - depends on the platform
    hs = None

__all__ = ["MatcherSpec", "Hit", "CompiledSpec", "Re2Group", "hyperscan_available"]

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


def _grouping(p: str) -> Iterator[tuple[int, str]]:
    """The grouping characters of a pattern, outside escapes, ``\\Q...\\E`` and character
    classes: (index, one of ``(``, ``)``, ``|``)."""
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            j = p.find("\\E", i + 2) if p.startswith("\\Q", i) else -2
            i = i + 2 if j == -2 else n if j < 0 else j + 2
            continue
        if c == "[":
            i = patterns._class_end(p, i)
            continue
        if c in "()|":
            yield i, c
        i += 1


def _alternatives(p: str) -> list[str]:
    """The top-level alternatives of a pattern (as written, or hyperscan's spelling of it)."""
    out: list[str] = []
    depth = start = 0
    for i, c in _grouping(p):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(p[start:i])
            start = i + 1
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
    ``search(line)``: see ``_searcher``.

    What only some runs need is made on first use: the RE2 (``rx``, ``search`` and the group
    names; a scan asks for it only for a candidate line of this spec, and a warm start read most
    specs' analyses from the store without one) and hyperscan's copy with its line anchors
    (``hs_src``, ``hs_multiline``: only a database built anew reads it). Two threads that make
    the same one at once make equal ones; either is kept."""

    __slots__ = (
        "idx",
        "spec",
        "utf8",
        "truth",
        "_rx",
        "_has_groups",
        "buf_src",
        "buf_rx",
        "_hs",
        "_hs_src",
        "_hs_multiline",
        "hs_ok",
        "cut_sensitive",
        "_named",
        "_index",
        "search",
        "digit_insensitive",
    )

    def __init__(self, idx: int, spec: MatcherSpec):
        self.idx = idx
        self.spec = spec
        try:
            a = patterns.analyse(spec.pattern, spec.ignore_case)
        except ValueError as e:
            raise ValueError(f"matcher {spec.id!r}: {e}") from None
        self.truth, self.utf8, self.cut_sensitive = a.truth, a.utf8, a.cut_sensitive
        self.digit_insensitive, self._hs = a.digit_insensitive, a.hyperscan
        #: whether hyperscan may take the spec (its copy: ``hs_src``)
        self.hs_ok = a.hyperscan is not None
        self._hs_src: bytes | None = None
        self._hs_multiline = False
        self._rx: Any = None  # the truth's RE2: the checker's when it is the truth, else made on first use
        self._has_groups = False
        self._named: tuple[tuple[str, int], ...] = ()
        self._index: dict[str, int] = {}
        self.search: Callable[[bytes], Any] = self._first_search if a.rx is None else self._ready(a.rx)
        self.buf_src: bytes | None = None  # rendered on demand (specs on the RE2 path), see buffer_source
        self.buf_rx: Any = None  # compiled on demand (sampled specs on the RE2 path)

    def _ready(self, rx: Any) -> Callable[[bytes], Any]:
        """Take ``rx`` as the spec's RE2: its group names and searcher; returns the searcher."""
        named = tuple(
            (k.decode("utf-8", "replace") if isinstance(k, bytes) else k, i) for k, i in rx.groupindex.items()
        )
        self._named, self._index, self._has_groups = named, dict(named), bool(rx.groupindex)
        self.search = search = _searcher(rx)
        self._rx = rx  # (last: a thread that sees it sees the rest)
        return search

    def _compiled(self) -> Any:
        rx = self._rx
        if rx is None:
            rx = re2.compile(self.truth, patterns.re2_options(self.utf8))
            self._ready(rx)
        return rx

    def _first_search(self, text: bytes) -> Any:
        self._compiled()
        return self.search(text)

    @property
    def rx(self) -> Any:
        """The spec's RE2 (the truth), compiled on first use."""
        return self._compiled()

    @property
    def has_groups(self) -> bool:
        self._compiled()
        return self._has_groups

    @property
    def named(self) -> tuple[tuple[str, int], ...]:
        self._compiled()
        return self._named

    @property
    def index(self) -> dict[str, int]:
        self._compiled()
        return self._index

    def _hyperscan_copy(self) -> None:
        if self._hs is not None and self._hs_src is None:
            anchored = _line_anchored(self.spec.pattern, self._hs)
            #: hyperscan's copy has its line anchors back (compiled with HS_FLAG_MULTILINE): see _line_anchored
            self._hs_multiline = anchored is not None
            self._hs_src = anchored if anchored is not None else self._hs

    @property
    def hs_src(self) -> bytes | None:
        """Hyperscan's copy of the pattern (None: hyperscan does not take it), made on first use."""
        self._hyperscan_copy()
        return self._hs_src

    @property
    def hs_multiline(self) -> bool:
        """Whether ``hs_src`` has its line anchors back (compiled with HS_FLAG_MULTILINE)."""
        self._hyperscan_copy()
        return self._hs_multiline

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
