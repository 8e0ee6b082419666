"""The typing of a matcher's captured groups: which are numbers, and how far log numbers go."""

from __future__ import annotations

from engine.rulebook.model import Matcher

#: the most characters of a line kept as a fact's text (and a flood's last line)
MAX_TEXT = 400

#: numbers from logs are bounded: exact in a double (what the Rete compares) and far inside
#: SQLite's integers, so that SLURM_RESTART_COUNT=99999999999999999999 is dropped, not stored
MAX_NUMBER = 1 << 53


def number(raw: str, kind: str) -> int | float | None:
    if len(raw) > 32:
        return None
    try:
        if kind == "float":
            v = float(raw)
            return v if v == v and abs(v) <= MAX_NUMBER else None
        v = int(raw, 16) if raw.lower().startswith("0x") else int(raw)
        return v if -MAX_NUMBER <= v <= MAX_NUMBER else None
    except ValueError:
        return None


#: groups that are integers unless their matcher types them otherwise
INT_GROUPS = {"attempt", "code", "step", "checkpoint", "rank", "exit_code", "pid", "gpu", "local_rank"}


def group_type(m: Matcher, name: str) -> str:
    """``int``, ``float`` or ``str``: the type a matcher gives one of its groups."""
    return m.types.get(name) or ("int" if name in INT_GROUPS else "str")
