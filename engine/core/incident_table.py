"""The engine's tables of incidents by key (``Engine.open``, ``Engine.recent``), each with an
index by incident id kept in step, so that finding the incident a fact or a firing belongs to
is one look-up, not a scan of every open incident (hundreds in a cascade).

A plain ``dict`` by key for every reader; writes go through ``__setitem__``, ``__delitem__``,
``pop`` and ``clear``, which keep ``by_id`` exact: an incident is in ``by_id`` exactly while it
is one of the table's values. The other ways of writing a dict are refused.

``settled`` (the open table: which incidents close) and ``ended`` (the recent table: which
leave the cascade window) look at every incident only when one may be due: ``low`` is at most
the time each incident's window runs from (its ``last_at``, which only grows; for ``ended`` the
later of it and ``closed_at``), so until ``now`` is a window past ``low`` none is. A table is
asked one of the two, never both.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from engine.core.open_incident import OpenIncident

__all__ = ["IncidentTable"]

_MISSING: Any = object()


class IncidentTable(dict[str, OpenIncident]):
    def __init__(self) -> None:
        super().__init__()
        #: incident id -> the incident, for the incidents this table holds
        self.by_id: dict[int, OpenIncident] = {}
        #: at most the time each incident's window runs from (see the module's text)
        self.low = math.inf

    def __setitem__(self, key: str, inc: OpenIncident) -> None:
        old = dict.get(self, key)
        if old is not None and old is not inc:
            self.by_id.pop(old.id, None)  # replaced under its key: no longer in this table
        super().__setitem__(key, inc)
        self.by_id[inc.id] = inc
        self.low = min(self.low, inc.last_at)

    def __delitem__(self, key: str) -> None:
        inc = self[key]
        super().__delitem__(key)
        self.by_id.pop(inc.id, None)

    def pop(self, key: str, default: Any = _MISSING) -> Any:  # type: ignore[override]
        if key not in self:
            return super().pop(key) if default is _MISSING else default  # dict's own KeyError
        inc = self[key]
        del self[key]
        return inc

    def clear(self) -> None:
        super().clear()
        self.by_id.clear()
        self.low = math.inf

    def settled(self, now: float, settle: float) -> list[tuple[str, OpenIncident]]:
        """(key, incident) of the open incidents with no new evidence for ``settle`` seconds at
        ``now``, in the table's order; the caller takes each out and closes it."""
        if now - self.low < settle:
            return []
        due, low = [], math.inf
        for key, inc in self.items():
            if now - inc.last_at >= settle:
                due.append((key, inc))
            else:
                low = min(low, inc.last_at)
        self.low = low
        return due

    def ended(self, now: float, window: float) -> list[tuple[str, OpenIncident]]:
        """(key, incident) of the closed incidents whose cascade ``window`` (after their last
        evidence, or their close if later) is over at ``now``, in the table's order; the caller
        takes each out."""
        if now - self.low <= window:
            return []
        due, low = [], math.inf
        for key, inc in self.items():
            last = max(inc.last_at, inc.closed_at or 0.0)
            if now - last > window:
                due.append((key, inc))
            else:
                low = min(low, last)
        self.low = low
        return due

    def _refused(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an IncidentTable is written by key (table[key] = incident, del, pop, clear)")

    update = setdefault = popitem = __ior__ = _refused  # type: ignore[assignment]
