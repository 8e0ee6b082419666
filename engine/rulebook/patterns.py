r"""The matcher pattern dialect: what a valid pattern is, and how one is rendered for each engine.

A rulebook pattern is RE2 syntax matched against one log line as bytes (RE2 Latin-1): ``.`` and
classes match one byte, ``\w \d \s \b`` are ASCII, ``^ $ \A \z`` refer to the line. A pattern
with non-ASCII characters or ``\p{..}`` classes is compiled for UTF-8 instead and matches
characters. This module is the one place that knows the dialect; the rulebook compiler asks it
whether a pattern is usable (``check_pattern``) and the scanner (``engine.core.matching``, ``engine.core.scanner``) asks
it for each rendering of a pattern (``analyse``, ``buffer_source``):

* as written (``as_written``): an unterminated ``\Q`` closed, so it can be wrapped in a group;
  this is the truth every backend's candidate line is checked against;
* for a multi-line search of the RE2 backend over a whole buffer (``buffer_source``): captures
  made non-capturing, ``^ \A`` -> line start, ``$ \z`` -> line end allowing a CR before the LF;
* for hyperscan (``analyse(...).hyperscan``): anchors dropped (the scanner checks each reported
  line with RE2) and the escapes whose meaning differs between RE2 and PCRE spelled out; None
  when hyperscan would not mean the same (UTF-8 patterns, ``\C``, ``{,n}``, numeric escapes
  under ignore-case).

``digit_insensitive`` says whether a pattern can tell one ASCII digit from another; lines equal
under ``mask_digits`` then match it alike, which lets the scanner answer a flood's repeats once.

Usage::

    check_pattern(r"Xid \d+")       # None: usable
    check_pattern(r"(a)\1")         # 'backreferences (\1) are not supported: RE2 has none'
"""

from __future__ import annotations

import functools
import re
from typing import AbstractSet, Any, Iterable, NamedTuple

import re2

__all__ = [
    "Analysis",
    "analyse",
    "as_written",
    "buffer_source",
    "check_pattern",
    "digit_insensitive",
    "mask_digits",
    "re2_options",
    "DIGITS_TO_ZERO",
]

#: translate table of ``mask_digits``: every ASCII digit written ``0``
DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0000000000")


def mask_digits(line: bytes) -> bytes:
    """``line`` with every ASCII digit written ``0``: equal for lines that differ only in digits."""
    return line.translate(DIGITS_TO_ZERO)


def re2_options(utf8: bool, max_mem: int | None = None) -> re2.Options:
    """RE2 options for a pattern of this encoding (errors are returned, never logged by RE2)."""
    o = re2.Options()
    o.encoding = re2.Options.Encoding.UTF8 if utf8 else re2.Options.Encoding.LATIN1
    o.log_errors = False
    if max_mem:
        o.max_mem = max_mem
    return o


# --------------------------------------------------------------------------------------------
# rendering


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


# (hyperscan's copy is line-bound: it never holds a newline outside a negated class, for a line
# never has one; a class or \s that matched it let a copy match across lines, and made the
# compiler's graphs of a gap such as \s{2,}[^\n]{0,200}?\s the larger)
_HS_CLASS_ESCAPES = {
    "s": "\\t\\f\\r\\x20",  # RE2's \s has no \v; hyperscan's has
    "S": "\\x00-\\x08\\x0b\\x0e-\\x1f\\x21-\\xff",
    "v": "\\x0b",  # RE2: vertical tab; PCRE: any vertical space
}
#: in a negated class \s keeps the newline out, as everywhere
_HS_NEGATED_ESCAPES = {**_HS_CLASS_ESCAPES, "s": "\\t\\n\\f\\r\\x20"}
_HS_ESCAPES = {"s": "[\\t\\f\\r ]", "S": "[^\\t\\n\\f\\r ]", "v": "\\x0b"}

# Features the walk collects; they decide the encoding and which engine may take a pattern.
_NONASCII = "nonascii"  # a non-ASCII character: the pattern is UTF-8
_UNICODE = "unicode"  # \p{..} / \P{..}: UTF-8
_CUT = "cut"  # $ \z \b \B: a cut line's head can match where the whole line does not
_ANYBYTE = "anybyte"  # \C
_NUMERIC = "numeric"  # \x.. or an octal escape
_INLINE_I = "inline_i"  # (?i) inside the pattern
_BRACE_COMMA = "brace_comma"  # {,n}: RE2 reads it as literal text, PCRE as a repeat


def _walk(p: str, *, buffer: bool, hyperscan: bool) -> tuple[str, set[str]]:
    """Render pattern ``p`` and collect its features. ``buffer``: for a search over a whole
    buffer (captures dropped, anchors at line ends); ``hyperscan``: also in PCRE's spelling.
    The three renderings are ``as_written``, ``buffer_source`` and ``_hyperscan_source``."""
    out: list[str] = []
    feats: set[str] = set()
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if ord(c) > 127:
            feats.add(_NONASCII)
        if c == "\\":
            d = p[i + 1] if i + 1 < n else ""
            if d == "Q":
                j = p.find("\\E", i + 2)
                body = p[i + 2 :] if j < 0 else p[i + 2 : j]
                if any(ord(ch) > 127 for ch in body):
                    feats.add(_NONASCII)
                out.append("\\Q" + body + "\\E")
                i = n if j < 0 else j + 2
                continue
            if d in ("p", "P"):
                feats.add(_UNICODE)
            elif d in ("z", "b", "B"):
                feats.add(_CUT)
            elif d == "C":
                feats.add(_ANYBYTE)
            elif d == "x" or d in "01234567":
                feats.add(_NUMERIC)
            if buffer and d in ("A", "z"):
                out.append("" if hyperscan else "(?m:^)" if d == "A" else "(?m:\\r?$)")
            elif hyperscan and d in _HS_ESCAPES:
                out.append(_HS_ESCAPES[d])
            else:
                out.append(p[i : i + 2])
            i += 2
        elif c == "[":
            j = _class_end(p, i)
            body = p[i:j]
            if any(ord(ch) > 127 for ch in body):
                feats.add(_NONASCII)
            if "\\p" in body or "\\P" in body:
                feats.add(_UNICODE)
            if "\\x" in body or any(f"\\{k}" in body for k in "01234567"):
                feats.add(_NUMERIC)
            if hyperscan:
                parts = []
                k = 0
                esc = _HS_NEGATED_ESCAPES if body.startswith("[^") else _HS_CLASS_ESCAPES
                while k < len(body):
                    if body[k] == "\\" and k + 1 < len(body):
                        parts.append(esc.get(body[k + 1], body[k : k + 2]))
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
                out.append("(?:" if buffer else p[i : j + 1])
                i = j + 1
            elif p.startswith("(?", i):
                j = i + 2
                while j < n and p[j] not in ":)":
                    j += 1
                letters = p[i + 2 : j]
                if "i" in letters:
                    feats.add(_INLINE_I)
                out.append(p[i : j + 1])
                i = j + 1
            else:
                out.append("(?:" if buffer else "(")
                i += 1
        elif buffer and c == "^":
            out.append("" if hyperscan else "(?m:^)")
            i += 1
        elif c == "$":
            feats.add(_CUT)
            out.append(c if not buffer else "" if hyperscan else "(?m:\\r?$)")
            i += 1
        else:
            if c == "{" and p.startswith("{,", i):
                feats.add(_BRACE_COMMA)
            out.append(c)
            i += 1
    return "".join(out), feats


def as_written(pattern: str) -> tuple[bytes, set[str]]:
    """The pattern as written (an unterminated ``\\Q`` closed) and its features."""
    text, feats = _walk(pattern, buffer=False, hyperscan=False)
    return text.encode("utf-8"), feats


def buffer_source(pattern: str, ignore_case: bool) -> bytes:
    """The pattern for the RE2 backend's multi-line search over a whole buffer."""
    text = _walk(pattern, buffer=True, hyperscan=False)[0]
    if ignore_case:
        text = "(?i:" + text + ")"
    return text.encode("utf-8")


def _hyperscan_source(pattern: str) -> bytes:
    """The pattern in hyperscan's spelling (ignore-case is a hyperscan flag, not a group)."""
    return _walk(pattern, buffer=True, hyperscan=True)[0].encode("utf-8")


def _is_utf8(feats: AbstractSet[str]) -> bool:
    return bool(feats & {_NONASCII, _UNICODE})


# --------------------------------------------------------------------------------------------
# digit-insensitivity

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
    holds all or none of them is digit-insensitive either way), or None when it is not understood."""
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


def digit_insensitive(pattern: str) -> bool:
    """True when ``pattern`` cannot tell one ASCII digit from another: every literal, class and
    escape in it holds all of 0-9 or none. Two lines that differ only in which digits they hold
    then match alike, with the same group spans (RE2 decides on byte classes, and the digits are
    one class), so the answer for one line of a flood serves every repeat of its shape.
    Conservative: a pattern it does not fully understand is not digit-insensitive."""
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


# --------------------------------------------------------------------------------------------
# checking


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


def _check(pattern: str) -> tuple[str | None, Any, bytes, frozenset[str]]:
    """(why ``pattern`` is refused or None, its RE2 as written, that source, its features)."""
    if not isinstance(pattern, str):
        return f"pattern must be a string, not {type(pattern).__name__}", None, b"", frozenset()
    return _check_text(pattern)


@functools.lru_cache(maxsize=4096)
def _check_text(pattern: str) -> tuple[str | None, Any, bytes, frozenset[str]]:
    """``_check`` of a string, kept: the compiler checks each pattern and the scanner analyses
    it again in the same process (a compiled RE2 is immutable and may be shared)."""
    if not pattern:
        return "empty pattern: it would match every line", None, b"", frozenset()
    src, written = as_written(pattern)
    feats = frozenset(written)
    try:
        rx = re2.compile(src, re2_options(_is_utf8(feats)))
    except re2.error as e:
        msg = e.args[0] if e.args else str(e)
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        return _explain(str(msg)), None, src, feats
    if _matches_empty(rx):
        return "pattern can match the empty string, so it would hit (nearly) every line", None, src, feats
    return None, rx, src, feats


class Analysis(NamedTuple):
    """What the scanner needs to know of a pattern before compiling it."""

    truth: bytes  #: the source every candidate line is checked with (``(?i:..)`` when ignore-case)
    rx: Any  #: that source compiled, when it is the pattern as checked (else None: compile ``truth``)
    utf8: bool  #: compiled for UTF-8 (matches characters), else Latin-1 (bytes)
    cut_sensitive: bool  #: may match a cut line's head but not the whole line
    digit_insensitive: bool  #: see ``digit_insensitive``
    hyperscan: bytes | None  #: hyperscan's spelling, or None when hyperscan would not mean the same


def analyse(pattern: str, ignore_case: bool = False) -> Analysis:
    """The analysis of a usable pattern; ValueError (``check_pattern``'s message) for another.
    The pattern is walked twice (as written, for hyperscan); the buffer form is rendered only
    where the RE2 backend needs it (``buffer_source``)."""
    if not isinstance(pattern, str):
        raise ValueError(_check(pattern)[0])
    kept = _KEPT.get((pattern, bool(ignore_case)))
    return kept if kept is not None else _analyse_text(pattern, bool(ignore_case))


#: analyses read back with a stored rulebook (``remember``), without their compiled RE2
_KEPT: dict[tuple[str, bool], Analysis] = {}


def portable(pattern: str, ignore_case: bool) -> Analysis:
    """``analyse``'s answer without the compiled RE2 (``rx`` None: the scanner compiles
    ``truth``), to be stored with a rulebook and handed back to ``remember``."""
    return analyse(pattern, ignore_case)._replace(rx=None)


def remember(analyses: Iterable[tuple[str, bool, Analysis]]) -> None:
    """Take the analyses a stored rulebook was built with (``portable``'s, made by this same
    code: the store's key covers it), so that its scanners walk and check no pattern again."""
    if len(_KEPT) > 4096:  # (a process that reads many rulebooks: keep the newest)
        _KEPT.clear()
    for pattern, ignore_case, a in analyses:
        _KEPT[(pattern, ignore_case)] = a


@functools.lru_cache(maxsize=4096)
def _analyse_text(pattern: str, ignore_case: bool) -> Analysis:
    msg, rx, truth, feats = _check(pattern)
    if msg is not None:
        raise ValueError(msg)
    utf8 = _is_utf8(feats)
    if ignore_case:
        truth, rx = b"(?i:" + truth + b")", None
    hs_ok = not (
        utf8
        or _ANYBYTE in feats
        or _BRACE_COMMA in feats
        or (_NUMERIC in feats and (ignore_case or _INLINE_I in feats))
    )
    return Analysis(
        truth,
        rx,
        utf8,
        utf8 or _CUT in feats,
        digit_insensitive(pattern),
        _hyperscan_source(pattern) if hs_ok else None,
    )
