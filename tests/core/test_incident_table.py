"""The engine's incident tables: the index by id and the due incidents agree with a scan of
the table after any sequence of writes (the scan is what the engine did before the index)."""

from __future__ import annotations

import random

import pytest

from engine.core.incident_table import IncidentTable
from engine.core.open_incident import OpenIncident


def _scan_settled(table, now, settle):
    return [(k, i) for k, i in table.items() if now - i.last_at >= settle]


def _scan_ended(table, now, window):
    return [(k, i) for k, i in table.items() if now - max(i.last_at, i.closed_at or 0.0) > window]


@pytest.mark.parametrize("ended", [False, True], ids=["open", "recent"])
@pytest.mark.parametrize("seed", range(4))
def test_index_and_due_incidents_agree_with_a_scan(seed, ended):
    """The engine asks its open table which incidents settled, its recent one which left the
    cascade window."""
    rnd = random.Random(seed)
    table = IncidentTable()
    now, next_id, checked = 0.0, 1, 0
    for _ in range(2000):
        now += rnd.choice((0.0, 0.1, 1.0, 7.0))
        op = rnd.random()
        keys = list(table)
        if op < 0.35:  # a new incident under a key (sometimes replacing the one there)
            inc = OpenIncident(next_id, f"job:{rnd.randrange(40)}:0", now, now)
            next_id += 1
            table[inc.key] = inc
        elif op < 0.6 and keys:  # new evidence: last_at only grows
            inc = table[rnd.choice(keys)]
            inc.last_at = max(inc.last_at, now - rnd.choice((0.0, 2.0)))
        elif op < 0.7 and keys:
            inc = table[rnd.choice(keys)]
            inc.closed_at = inc.closed_at or now
        elif op < 0.75 and keys:
            table.pop(rnd.choice(keys))
        elif op < 0.8 and keys:  # re-keyed (bound to a job), as Engine._bind does
            old = rnd.choice(keys)
            new = f"job:b{rnd.randrange(1000)}:0"
            if new not in table:
                inc = table[old]
                del table[old]
                inc.key = new
                table[new] = inc
        else:
            window = rnd.choice((5.0, 10.0))
            want = (_scan_ended if ended else _scan_settled)(table, now, window)
            got = table.ended(now, window) if ended else table.settled(now, window)
            assert got == want
            checked += bool(want)
            for key, _ in got:
                del table[key]
        assert table.by_id == {i.id: i for i in table.values()}
        assert all(table.low <= (max(i.last_at, i.closed_at or 0.0) if ended else i.last_at) for i in table.values())
    assert checked > 20  # incidents came due, not only empty answers


def test_other_writes_are_refused():
    table = IncidentTable()
    with pytest.raises(TypeError):
        table.update({"k": OpenIncident(1, "k", 0.0, 0.0)})
    with pytest.raises(TypeError):
        table.setdefault("k", OpenIncident(1, "k", 0.0, 0.0))
    assert table.pop("missing", None) is None
    with pytest.raises(KeyError):
        table.pop("missing")
