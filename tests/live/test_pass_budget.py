"""A job log whose every line is a different error must not hold back other input: one pass over
a file ends after ``ingest.PASS_SECONDS`` of conversion (made 0 here: one line a pass), the
follower reads nothing more of that file meanwhile (``Tailed.held``), and the spool is served in
the same pass; the file goes on where it stopped, and every line is taken once."""

from __future__ import annotations

import json

from engine.live import ingest
from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import load_rulebook
from engine.sources.follow import Follower
from engine.sources.spool import SpoolWriter
from engine.facts import Fact
from tests.live.conftest import RULES, evts


def test_a_held_file_is_not_read_until_released(tmp_path):
    log = tmp_path / "slurm-3.out"
    log.write_bytes(b"one\n")
    f = Follower([str(tmp_path / "*.out")])
    try:
        t = f.add(str(log))
        got = [(tt, data) for tt, data in f.read_ready()]
        assert [d for _, d in got] == [b"one\n"]
        t.offset, t.line_no, t.held = 4, 1, True  # the caller took the bytes but not all their lines yet
        with open(log, "ab") as fh:
            fh.write(b"two\n")
        f.rescan()
        assert [d for _, d in f.read_ready()] == []  # held: nothing more of it
        t.held = False
        assert [d for _, d in f.read_ready()] == [b"two\n"]  # it stayed due: read on once released
        t.offset, t.line_no, t.held = 8, 2, True
        f.rewind(t)  # a rewind (reload, store outage) lets go of it: it is read again from its offset
        assert not t.held
    finally:
        f.stop()


def test_the_spool_is_served_while_a_flooding_file_waits_its_turn(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "PASS_SECONDS", 0.0)  # one line of a file a pass
    logs, spool = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    spool.mkdir()
    log = logs / "slurm-11.out"
    log.write_text("")
    res = load_rulebook(defaults=False, overlays=[("live.yaml", RULES.replace("MARKER", str(tmp_path)))])
    assert res.ok, res.errors
    ctl = Controller(
        ControllerConfig(
            db=str(tmp_path / "r.db"), follow=[str(logs / "*.out")], spool=str(spool), scheduler="none", dry_run=True
        ),
        res.compiled,
    )
    ctl.startup()
    try:
        n = 40
        log.write_text(evts(1, n + 1))
        writer = SpoolWriter(str(spool), "gpub001", fsync="never")
        writer.write([Fact.make("xid", {"code": 79, "node": "gpub001"}, 1.0, "kernel:gpub001:1")])
        writer.close()
        ctl.follower.rescan()
        ctl.step()

        def xids() -> int:
            return ctl.store.db.execute("SELECT COUNT(*) FROM facts WHERE kind = 'xid'").fetchone()[0]

        def committed() -> int:
            return ctl.store.offsets().get(str(log), (None, 0, 0))[2]

        assert xids() == 1  # in the first pass, with the flood's lines still waiting
        assert committed() < n and ctl.follower.files[str(log)].held
        for _ in range(4 * n):
            if committed() == n:
                break
            ctl.step()
        assert committed() == n
        numbers = sorted(
            json.loads(a)["n"] for (a,) in ctl.store.db.execute("SELECT attrs FROM facts WHERE kind = 'log'").fetchall()
        )
        assert numbers == list(range(1, n + 1))  # every line once
        assert not ctl.files.paused and not ctl.follower.files[str(log)].held
    finally:
        ctl.follower.stop()
        ctl.store.close()
