"""Progress lines are sampled per file and matcher (a token bucket on the facts' clock, see
sampler.ProgressSampler): a log printing an iteration line every few milliseconds costs a
fact per few seconds of log, not per line, and still finds a slowdown that stays, keeps the
last point a job printed, and tells attempts apart as the unsampled path does."""

from __future__ import annotations

import calendar
import time

import pytest

from engine.core import sampler
from engine.facts import Fact
from engine.core.context import FileContext
from engine.core.converter import HitConverter
from engine.core.linefacts import StreamFacts
from engine.core.replay import file_input, replay_inputs
from engine.core.scanner import scanner_for
from engine.rulebook import require_rulebook
from engine.store import Store

T0 = calendar.timegm((2026, 3, 1, 10, 0, 0, 0, 0, 0))


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _dense(ms: list[float], every: float = 0.05, start: float = T0) -> list[str]:
    """Megatron iteration lines ``every`` seconds apart (far denser than any real job prints)."""
    return [
        f"[{_stamp(start + i * every)}] iteration {i + 1:8d}/  100000 | consumed samples: {i * 2048:10d} | "
        f"elapsed time per iteration (ms): {m:.1f} | learning rate: 1.0E-04 | lm loss: 2.000000E+00 |"
        for i, m in enumerate(ms)
    ]


def _replay(tmp_path, compiled, lines: list[str]):
    path = tmp_path / "slurm-4343.out"
    path.write_text("SLURM_JOB_ID=4343\n" + "\n".join(lines) + "\n")
    return replay_inputs([file_input(str(path))], compiled, Store(":memory:"))


def _facts(compiled, text: bytes, sample: bool, chunk: int = 1 << 16) -> tuple[list[Fact], FileContext, HitConverter]:
    scanner, index_map = scanner_for(compiled, "job")
    conv = HitConverter(list(compiled.matchers))
    ctx = FileContext(path="slurm-4343.out", source="job", job="4343")
    stream = StreamFacts(scanner, conv, ctx, index_map, sample=sample)
    out = []
    for i in range(0, len(text), chunk):
        out += [it for _, _, it in stream.feed(text[i : i + chunk]) if isinstance(it, Fact)]
    out += [it for _, _, it in stream.flush() if isinstance(it, Fact)]
    return out, ctx, conv


def test_a_dense_log_is_sampled_and_a_slowdown_that_stays_is_still_a_straggler(tmp_path, compiled):
    res = _replay(tmp_path, compiled, _dense([1000.0] * 3000 + [2200.0] * 1500))
    assert res.stats["progress_sampled_out"] > 4000  # most of 4,500 lines never became facts
    assert res.hits >= 4500  # but they are counted as matched
    got = [(c.decision.fault_class, c.decision.decision) for c in res.incidents]
    assert got == [("straggler", "observe")], got


def test_a_dense_healthy_log_is_no_incident(tmp_path, compiled):
    res = _replay(tmp_path, compiled, _dense([1000.0 + (i % 7) * 10 for i in range(4500)]))
    assert res.stats["progress_sampled_out"] > 4000
    assert res.incidents == []


def test_sparse_progress_is_not_sampled(compiled):
    lines = _dense([1000.0] * 40, every=10.0)
    facts, _, conv = _facts(compiled, ("\n".join(lines) + "\n").encode(), sample=True)
    assert conv.progress_skipped == 0 and len(facts) == 40


def test_the_first_and_last_point_are_kept_and_the_rate_is_bounded(compiled):
    lines = _dense([1000.0] * 5000, every=0.01)  # 50 s of log
    text = ("\n".join(lines) + "\n").encode()
    facts, ctx, conv = _facts(compiled, text, sample=True)
    full, full_ctx, _ = _facts(compiled, text, sample=False)
    assert len(full) == 5000
    assert facts[0].at == full[0].at and facts[-1].at == full[-1].at  # the last progress is never lost
    assert facts[-1].get("step") == 5000
    chunks = len(text) // (1 << 16) + 1
    # a burst, one per PROGRESS_EVERY_S of log, every PROGRESS_NTH-th line, the last of each chunk
    bound = sampler.PROGRESS_BURST + 50 / sampler.PROGRESS_EVERY_S + 5000 / sampler.PROGRESS_NTH + chunks + 2
    assert len(facts) <= bound
    # the fact-level sampler left some out, and the scanner the others (never a Hit, not counted)
    assert 0 < conv.progress_skipped < 5000 - len(facts)
    assert ctx.last_at == full_ctx.last_at  # the file's clock moved as if every line were converted


def test_attempts_are_told_apart_as_without_sampling(compiled):
    """A restarted job appends to its log: the start banner again after progress (evidence) is a
    new attempt; the first progress line after each banner is always converted."""
    lines = []
    for attempt in range(3):
        start = T0 + attempt * 600
        lines.append(f"[{_stamp(start)}] SLURM_JOB_ID=4343")
        lines += _dense([1000.0] * 800, every=0.02, start=start + 1)
    text = ("\n".join(lines) + "\n").encode()
    sampled, ctx_s, conv = _facts(compiled, text, sample=True)
    full, ctx_f, _ = _facts(compiled, text, sample=False)
    assert conv.progress_skipped > 1500
    assert ctx_s.attempt == ctx_f.attempt
    attempts = lambda facts: sorted({f.get("attempt") for f in facts})
    assert attempts(sampled) == attempts(full) and len(attempts(full)) == 3
    for a in attempts(full):  # each attempt's first and last points are kept
        s = [f.at for f in sampled if f.get("attempt") == a]
        f_ = [f.at for f in full if f.get("attempt") == a]
        assert (min(s), max(s)) == (min(f_), max(f_))


def test_an_untimestamped_line_after_sampled_progress_is_dated_as_before(compiled):
    lines = _dense([1000.0] * 3000, every=0.05)
    lines.append("RuntimeError: CUDA error: an illegal memory access was encountered")
    text = ("\n".join(lines) + "\n").encode()
    sampled, _, conv = _facts(compiled, text, sample=True)
    full, _, _ = _facts(compiled, text, sample=False)
    assert conv.progress_skipped > 0
    last = lambda facts: [f for f in facts if f.kind != "progress"][-1]
    assert last(sampled).at == last(full).at == [f for f in full if f.kind == "progress"][-1].at


def test_checkpoint_lines_are_never_left_out(compiled):
    lines = [
        f"[{_stamp(T0 + i * 0.01)}] successfully saved checkpoint at iteration {100 * (i + 1):8d} to /ckpt"
        for i in range(500)
    ]
    lines += _dense([1000.0] * 500, every=0.01, start=T0 + 10)
    facts, _, conv = _facts(compiled, ("\n".join(lines) + "\n").encode(), sample=True)
    assert sorted(f.get("checkpoint") for f in facts if f.get("checkpoint") is not None) == [
        100 * (i + 1) for i in range(500)
    ]
    assert conv.progress_skipped > 300  # the iteration lines after them still are sampled
