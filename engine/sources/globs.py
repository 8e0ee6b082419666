"""Globs the follower watches: where one starts (the folder to watch), whether a path matches one
the way ``glob.glob`` would, and whether the watch must reach below that folder."""

from __future__ import annotations

import fnmatch
import os

__all__ = ["glob_base", "glob_match", "recursive"]


def glob_base(pattern: str) -> str:
    """The longest leading directory of a glob that has no wildcard."""
    parts = os.path.abspath(pattern).split(os.sep)
    base = []
    for p in parts[:-1]:
        if any(c in p for c in "*?["):
            break
        base.append(p)
    return os.sep.join(base) or os.sep


def glob_match(pattern: str, path: str) -> bool:
    """Does ``path`` match ``pattern`` the way ``glob.glob`` would (``*`` stays inside one path
    component and skips names starting with a dot)? Patterns with ``**`` are left to rescan()."""
    if "**" in pattern:
        return False  # left to rescan()
    pp, sp = pattern.split(os.sep), path.split(os.sep)
    if len(pp) != len(sp):
        return False
    for a, b in zip(pp, sp):
        if a == b:
            continue
        if b.startswith(".") and not a.startswith("."):
            return False
        if not fnmatch.fnmatchcase(b, a):
            return False
    return True


def recursive(pattern: str) -> bool:
    """Watch below the glob's base too when a folder part of the glob has a wildcard."""
    return glob_base(pattern) != os.path.dirname(os.path.abspath(pattern))
