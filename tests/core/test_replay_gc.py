"""Replay collects cyclic garbage less often while it runs, and puts the process's setting back."""

from __future__ import annotations

import gc
import threading

from engine.core import replay as replay_module
from engine.core.replay import REPLAY_GC_GEN0, Input, replay_inputs
from engine.rulebook import require_rulebook
from engine.store import Store
from tests.helpers import wait_for


def _one(data: bytes, seen: list, gate: threading.Event | None = None) -> None:
    def chunks():
        seen.append(gc.get_threshold()[0])
        if gate is not None:
            gate.wait(5)
        yield data

    store = Store(":memory:")
    try:
        replay_inputs([Input("slurm-77.out", chunks, "job")], require_rulebook(), store)
    finally:
        store.close()


def test_threshold_raised_during_a_replay_and_restored_after():
    before = gc.get_threshold()
    seen: list[int] = []
    _one(b"RuntimeError: CUDA error: an illegal memory access was encountered\n", seen)
    assert seen == [max(before[0], REPLAY_GC_GEN0)]
    assert gc.get_threshold() == before


def test_overlapping_replays_in_threads_restore_the_setting_once_all_ended():
    before = gc.get_threshold()
    gate = threading.Event()
    seen: list[int] = []
    threads = [threading.Thread(target=_one, args=(b"ok\n", seen, gate)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for("three replays reading", lambda: len(seen) == 3, 10)
        assert replay_module._gc_running == 3
        assert gc.get_threshold()[0] == max(before[0], REPLAY_GC_GEN0)
    finally:
        gate.set()
        for t in threads:
            t.join(10)
    assert seen == [max(before[0], REPLAY_GC_GEN0)] * 3
    assert replay_module._gc_running == 0
    assert gc.get_threshold() == before
