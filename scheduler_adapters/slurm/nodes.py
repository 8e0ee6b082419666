"""Slurm's node records → ``NodeInfo``: ``squeue``/``sinfo --json`` records and ``sinfo``'s text rows.

A node's state is one base word plus flags, however Slurm spells them: the JSON's state list and
``state_flags``, or ``sinfo``'s one word with its one-character suffixes (``*``, ``~``, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..base import NodeInfo
from .runner import readable

__all__ = ["NULLS", "clean", "node_from_json", "node_state", "nodes_from_sinfo_text"]

#: what Slurm prints for a field that has no value
NULLS = ("", "(null)", "None", "N/A")


def clean(value: Any) -> str:
    """A record's field as text, with Slurm's several spellings of "no value" as ''."""
    text = str(value) if value is not None else ""
    return "" if text in NULLS else text


# sinfo's base node states; everything else in a state list is a flag
_BASE_NODE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
# the one-character suffixes of sinfo's %T, and the flag each stands for
_SINFO_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}


def _safe_node(node: NodeInfo) -> NodeInfo:
    """``node`` with U+FFFD for each byte of its texts that was not UTF-8."""
    return dataclasses.replace(
        node,
        name=readable(node.name),
        state=readable(node.state),
        flags=tuple(readable(f) for f in node.flags),
        reason=readable(node.reason),
        partitions=tuple(readable(p) for p in node.partitions),
    )


def node_state(words: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """Slurm's state words → sinfo's word for the node (lower case) and the flags."""
    base, flags = "unknown", []
    for word in words:
        word = word.upper()
        if word in _BASE_NODE_STATES and base == "unknown":
            base = word.lower()
        elif word not in _BASE_NODE_STATES and word not in flags:
            flags.append(word)
    if "DRAIN" in flags:
        # as sinfo says it: still running jobs → draining; otherwise (idle, even down) → drained
        busy = base in ("allocated", "mixed", "completing") or "COMPLETING" in flags
        base = "draining" if busy else "drained"
    return base, tuple(flags)


def node_from_json(record: Mapping[str, Any]) -> NodeInfo:
    raw_state = record.get("state")
    words = list(raw_state) if isinstance(raw_state, (list, tuple)) else [str(raw_state or "unknown")]
    state, flags = node_state(words + list(record.get("state_flags") or []))
    return _safe_node(
        NodeInfo(
            name=str(record["name"]),
            state=state,
            flags=flags,
            reason=clean(record.get("reason")),
            partitions=tuple(record.get("partitions") or ()),
        )
    )


def nodes_from_sinfo_text(text: str) -> list[NodeInfo]:
    """``sinfo -N -h -o '%N|%T|%P|%E'``: one row per node and partition."""
    by_name: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4:
            continue
        name, word, partition, reason = (p.strip() for p in parts)
        flags = []
        while word and word[-1] in _SINFO_SUFFIX_FLAGS:
            flags.append(_SINFO_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if word in ("drained", "draining", "drain"):
            flags.append("DRAIN")
        node = by_name.setdefault(name, {"state": word, "flags": flags, "reason": reason, "parts": []})
        node["parts"].append(partition.rstrip("*"))
    return [
        _safe_node(
            NodeInfo(
                name=name,
                state="drained" if n["state"] == "drain" else n["state"],
                flags=tuple(n["flags"]),
                reason="" if n["reason"] == "none" else n["reason"],
                partitions=tuple(n["parts"]),
            )
        )
        for name, n in by_name.items()
    ]
