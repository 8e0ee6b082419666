"""Time-zone names of ``policy.log_timezone``: which are valid, and the zone each names.

The rulebook's schema checks the name and ``core.linetime`` reads stamps in the zone, so the
check lives here, in the rulebook layer both may import (the rulebook never imports ``core``).
"""

from __future__ import annotations

import functools
from datetime import timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["check_zone", "zone"]


def check_zone(name: Any) -> str | None:
    """The problem with a ``policy.log_timezone`` value, or ``None`` when it names a zone."""
    if not isinstance(name, str) or not name.strip():
        return "must be a time-zone name such as UTC or Europe/Berlin"
    try:
        zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown time zone {name!r} (an IANA name such as UTC, Europe/Berlin, America/New_York)"
    return None


@functools.lru_cache(maxsize=64)
def zone(name: str) -> Any:
    """The tzinfo of a zone name (UTC's spellings without the zone database)."""
    if name.upper() in ("UTC", "Z", "ETC/UTC", "GMT"):
        return timezone.utc
    return ZoneInfo(name)
