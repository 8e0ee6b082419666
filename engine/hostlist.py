"""Slurm hostlist expressions: ``n[1-3,5]`` → ``n1 n2 n3 n5``. Shared by the Slurm adapter and
the engine (``SLURM_JOB_NODELIST=...`` lines in job logs). It lives in ``engine``'s bottom layer,
beside ``errors``, so that ``core`` reads it without depending on the adapters package; the
adapters import it from here. It imports only ``engine.errors``.

>>> expand_hostlist("gpu-[01-03],login1")
['gpu-01', 'gpu-02', 'gpu-03', 'login1']

Zero padding follows the lower bound (``[08-10]`` → ``08 09 10``), several bracket groups in
one name multiply (``r[1-2]n[1-2]`` → ``r1n1 r1n2 r2n1 r2n2``), and order and duplicates are
kept as written, as ``scontrol show hostnames`` does.
"""

from __future__ import annotations

import logging
import re

from engine.errors import HostlistError

__all__ = ["MAX_HOSTS", "HostlistError", "expand_hostlist"]

logger = logging.getLogger(__name__)

#: a bound on the expansion, so that a hostile or broken ``n[1-999999999]`` cannot eat memory
MAX_HOSTS = 100_000

_NUMBER = re.compile(r"[0-9]+")


def expand_hostlist(text: str | None) -> list[str]:
    """Every host name a hostlist expression stands for; ``""`` and ``"(null)"`` give ``[]``."""
    if text is None:
        return []
    text = text.strip()
    if text in ("", "(null)", "None"):
        return []
    hosts: list[str] = []
    for item in _split_top_level(text):
        if not item:
            raise HostlistError(f"empty host name in {text!r}")
        _expand_item(item, text, hosts)
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Split on the commas that are outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise HostlistError(f"unclosed '[' in {text!r}")
    items.append(text[start:].strip())
    return items


def _expand_item(item: str, whole: str, out: list[str]) -> None:
    """Expand one comma-free name (possibly with several bracket groups) into ``out``."""
    # Work left to right: a list of prefixes grows group by group.
    prefixes = [""]
    rest = item
    while True:
        open_at = rest.find("[")
        if open_at < 0:
            break
        close_at = rest.index("]", open_at)  # balanced: checked by _split_top_level
        head, body, rest = rest[:open_at], rest[open_at + 1 : close_at], rest[close_at + 1 :]
        values = _expand_range_set(body, whole)
        if len(prefixes) * len(values) > MAX_HOSTS:
            raise HostlistError(f"{whole!r} names more than {MAX_HOSTS} hosts")
        prefixes = [p + head + v for p in prefixes for v in values]
    if any(ch.isspace() for ch in item):
        raise HostlistError(f"white space inside host name {item!r}")
    if len(out) + len(prefixes) > MAX_HOSTS:
        raise HostlistError(f"{whole!r} names more than {MAX_HOSTS} hosts")
    out.extend(p + rest for p in prefixes)


def _expand_range_set(body: str, whole: str) -> list[str]:
    """``1-3,05`` → ``['1', '2', '3', '05']``."""
    values: list[str] = []
    for part in body.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not _NUMBER.fullmatch(lo) or (sep and not _NUMBER.fullmatch(hi)):
            raise HostlistError(f"bad range {part!r} in {whole!r}")
        if not sep:
            values.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise HostlistError(f"descending range {part!r} in {whole!r}")
        if len(values) + last - first + 1 > MAX_HOSTS:
            raise HostlistError(f"{whole!r} names more than {MAX_HOSTS} hosts")
        width = len(lo)
        values.extend(str(n).zfill(width) for n in range(first, last + 1))
    return values
