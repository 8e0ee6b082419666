"""Who may read the spool: the writer shares each file through the spool folder's group (mode
0640 whatever the umask), and a file or folder the reader cannot open is an ERROR said once,
counted, and the spool unhealthy, never a silent skip.

Run as root (as the agents are), the reading side runs in a child dropped to another account,
because root reads every file whatever its mode."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from engine.facts import Fact
from engine.sources.spool import SpoolReader, SpoolWriter
from tests.helpers import as_user

NOBODY = 65534


def fact(i: int, node: str) -> Fact:
    return Fact.make("xid", {"code": 79, "node": node, "pid": i}, at=float(i), origin=f"kern.log:{i}")


@pytest.fixture
def shared_dir():
    """A folder another account can reach (pytest's tmp_path is root's alone)."""
    base = tempfile.mkdtemp(prefix="recover-spool-perm-", dir="/tmp")
    os.chmod(base, 0o755)
    yield Path(base)
    shutil.rmtree(base, ignore_errors=True)


def _reader_side() -> tuple[int, int, Callable[[Callable[[], Any]], Any]]:
    """(uid, gid, run): the account the reading side runs as, and how to run it there."""
    if os.geteuid() == 0:
        return NOBODY, NOBODY, lambda fn: as_user(NOBODY, NOBODY, fn)
    return os.getuid(), os.getgid(), lambda fn: fn()


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))


def test_an_unreadable_spool_file_or_folder_is_an_error_said_once_and_counted(shared_dir):
    uid, gid, run = _reader_side()
    spool = shared_dir / "spool"
    spool.mkdir()
    os.chown(spool, uid, gid)  # the reader's own folder (its group shares the files), so that it can
    for node, i in (("n1", 1), ("n2", 2)):  # make things readable again itself
        with SpoolWriter(str(spool), node) as w:
            w.write([fact(i, node)])
    os.chown(spool / "n2.jsonl", uid, gid)
    os.chmod(spool / "n2.jsonl", 0)

    def reader_side():
        said = _Said()
        log = logging.getLogger("engine.sources.spool")
        log.addHandler(said)
        try:
            reader = SpoolReader(str(spool))
            first = [f.get("pid") for f in reader.read()]
            again = [f.get("pid") for f in reader.read()]
            stats_then, unreadable_then = dict(reader.stats), dict(reader.unreadable)
            os.chmod(spool / "n2.jsonl", 0o640)
            later = [f.get("pid") for f in reader.read()]
            unreadable_after = dict(reader.unreadable)
            os.chmod(spool, 0)  # now the folder itself
            folder = reader.read()
            unreadable_folder = dict(reader.unreadable)
            os.chmod(spool, 0o750)
            return (
                first,
                again,
                stats_then,
                unreadable_then,
                later,
                unreadable_after,
                folder,
                unreadable_folder,
                said.records,
            )
        finally:
            log.removeHandler(said)

    first, again, stats, unreadable, later, after, folder, unreadable_folder, records = run(reader_side)
    assert first == [1] and again == []  # n1 is read; n2 is not, and that is not silent:
    errors = [m for lvl, m in records if lvl == logging.ERROR]
    assert len([m for m in errors if "n2.jsonl" in m]) == 1, records  # once, not on every pass
    assert "Permission denied" in errors[0] and "mode 0000" in errors[0], errors[0]
    assert stats["unreadable"] == 1 and list(unreadable) == ["n2.jsonl"]
    assert later == [2] and after == {}  # readable again: read, and said
    assert any(lvl == logging.WARNING and "n2.jsonl can be read again" in m for lvl, m in records)
    assert folder == [] and list(unreadable_folder) == ["."]
    assert any("the folder cannot be read" in m for m in errors), errors


def test_the_controller_counts_an_unreadable_spool_file_and_calls_the_spool_unhealthy(shared_dir):
    from engine.live.ingest import SpoolIngest
    from engine.live.batch import Batch
    from engine.live.metrics import LogLimiter, Metrics
    from engine.store import Store
    from types import SimpleNamespace

    uid, gid, run = _reader_side()
    spool = shared_dir / "spool"
    spool.mkdir()
    with SpoolWriter(str(spool), "n2") as w:
        w.write([fact(2, "n2")])
    # what agents wrote before: root's alone (not root here: unreadable to its owner as well)
    os.chmod(spool / "n2.jsonl", 0o600 if os.geteuid() == 0 else 0)

    def controller_side():
        store = Store(":memory:")
        metrics = Metrics()
        batch = Batch(store, SimpleNamespace(files={}, touched={}), metrics, LogLimiter(), lambda closed: None)
        ingest = SpoolIngest(str(spool), store, batch, metrics, LogLimiter(), trust_job_claims=True)
        engine = SimpleNamespace(facts=[], ingest=lambda f: engine.facts.append(f))
        for _ in range(3):
            ingest.feed(engine)
        counted = metrics.source_errors.labels(kind="spool", reason="unreadable")._value.get()
        health = metrics.source_health.labels(source="spool")._value.get()
        return len(engine.facts), counted, health, ingest.healthy()

    n, counted, health, healthy = run(controller_side)
    assert n == 0 and counted == 1 and health == 0 and healthy is False


def test_spool_files_are_group_readable_with_the_folders_group_whatever_the_umask(shared_dir):
    spool = shared_dir / "spool"
    spool.mkdir()
    group = NOBODY if os.geteuid() == 0 else os.getgid()  # root may give any group; others their own
    os.chown(spool, -1, group)
    old = spool / "n1.jsonl.1"  # rotated by an older agent, which made files 0600
    old.write_text(fact(0, "n1").to_json() + "\n")
    os.chmod(old, 0o600)
    umask = os.umask(0o077)  # a strict unit
    try:
        with SpoolWriter(str(spool), "n1", max_bytes=1024) as w:
            w.write([fact(i, "n1") for i in range(1, 40)])  # enough to rotate: new files too
    finally:
        os.umask(umask)
    files = sorted(spool.glob("n1.jsonl*"))
    assert len(files) >= 3
    for p in files:
        st = p.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, group), p
