"""Xid lines and PCI addresses: the one decoder of what the rulebook's Xid matchers took apart.

Replay, the node agent and the NVML sources all reduce PCI bus ids to one form here, so that a
kernel's Xid line and an NVML device compare.
"""

from __future__ import annotations

from typing import Any


def normalize_pci(text: str | None) -> str | None:
    """``00000000:3B:00.0``, ``PCI:0000:3b:00``, ``3b:00.0`` → ``0000:3b:00`` (``None`` if not PCI).

    The form both the kernel's Xid lines and NVML's bus ids are reduced to, so they compare."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if t[:4].upper() == "PCI:":
        t = t[4:]
    t = t.split(".", 1)[0]
    parts = t.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    dom, bus, dev = parts
    try:
        if not (1 <= len(dom) <= 8 and 1 <= len(bus) <= 2 and 1 <= len(dev) <= 2):
            return None
        d, b, v = int(dom, 16), int(bus, 16), int(dev, 16)
    except ValueError:
        return None
    return f"{d & 0xFFFF:04x}:{b:02x}:{v:02x}"


def decode_xid(attrs: dict[str, Any]) -> dict[str, Any]:
    """The one Xid decoder, after the rulebook's Xid matchers took the line apart: the PCI
    address in the form NVML devices carry, the words of a decode (fatality, recovery action)
    with their blanks collapsed. Replay and the node agent both reach Xids through here."""
    pci = normalize_pci(attrs.get("pci")) if "pci" in attrs else None
    if pci is not None:
        attrs["pci"] = pci
    else:
        attrs.pop("pci", None)
    for name in ("fatality", "recovery_action", "nvlink_unit", "process"):
        value = attrs.get(name)
        if isinstance(value, str):
            value = " ".join(value.split()).strip("'\"")
            if value and value != "<unknown>":
                attrs[name] = value
            else:
                attrs.pop(name)
    return attrs
