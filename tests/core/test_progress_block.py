"""Progress lines sampled in the scanner (engine.core.blockscan, issue 24) against the full path
(every progress line a hit, ``progress_block=0``): the same incidents, classes, nodes and
decisions; the hits the sampled path reports are hits of the full path, unchanged; a log that
prints progress every few seconds is not sampled at all."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core import test_matching

from engine.core import sampler
from engine.core.context import FileContext
from engine.core.converter import HitConverter
from engine.core.linefacts import StreamFacts
from engine.core import replay
from engine.core.replay import file_input, replay_inputs
from engine.core.matching import MatcherSpec, hyperscan_available
from engine.core.scanner import Scanner, scanner_for
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.store import Store
from tests.core.test_progress_sampling import T0, _dense, _stamp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _incidents(res) -> list[tuple]:
    return sorted(
        (c.key, c.job, c.attempt, c.decision.fault_class, c.decision.decision, tuple(sorted(c.decision.nodes)))
        for c in res.incidents
    )


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Replay reads 64 KiB at a time (4 MiB otherwise): the scanner's block follows the log's
    pace from one chunk to the next, and these logs are a few MiB."""
    monkeypatch.setattr(replay, "CHUNK", 1 << 16)


def _both(compiled, paths: list[str]):
    """(sampled, full) replays of the same files."""
    out = []
    for block in (None, 0):
        out.append(replay_inputs([file_input(p) for p in paths], compiled, Store(":memory:"), progress_block=block))
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The replay bench's own generator (bench/gen_log.py): a dense multi-node training log with
    six failures injected, ~1.1 M lines per 400 MiB; 12 MiB here."""
    path = tmp_path_factory.mktemp("gen") / "slurm-4242.out"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_log.py"), "--size-mb", "12", "--seed", "7", "--out", str(path)],
        check=True,
        capture_output=True,
    )
    return str(path)


def test_the_generated_training_log_gives_the_same_incidents(compiled, generated):
    sampled, full = _both(compiled, [generated])
    assert len(full.incidents) >= 3
    assert _incidents(sampled) == _incidents(full)
    assert sampled.hits < full.hits / 3  # most progress lines never became a hit


def test_the_examples_give_the_same_incidents(compiled):
    paths = sorted(str(p) for p in (ROOT / "examples").iterdir() if p.name != "README.md")
    sampled, full = _both(compiled, paths)
    assert full.incidents and _incidents(sampled) == _incidents(full)


@pytest.mark.parametrize(
    "ms, expect",
    [
        ([1000.0] * 3000 + [2200.0] * 1500, [("straggler", "observe")]),  # a slowdown that stays
        ([1000.0 + (i % 7) * 10 for i in range(4500)], []),  # healthy
        ([1000.0] * 3000 + [2200.0] * 30 + [1000.0] * 1500, []),  # a blip of 1.5 s is no straggler
    ],
)
def test_dense_progress_gives_the_same_verdicts(tmp_path, compiled, ms, expect):
    path = tmp_path / "slurm-4343.out"
    path.write_text("SLURM_JOB_ID=4343\n" + "\n".join(_dense(ms)) + "\n")
    sampled, full = _both(compiled, [str(path)])
    got = [(c.decision.fault_class, c.decision.decision) for c in sampled.incidents]
    assert got == [(c.decision.fault_class, c.decision.decision) for c in full.incidents] == expect
    assert sampled.hits < len(ms) / 3


def test_a_failure_amid_dense_progress_and_the_job_going_on(tmp_path, compiled):
    """A weak keyword, then progress: the job went on, as on the full path; an error the log ends
    on after progress is the failure; restarts appended to one log are the same attempts."""
    lines: list[str] = []
    for attempt in range(3):
        start = T0 + attempt * 900
        lines.append(f"[{_stamp(start)}] SLURM_JOB_ID=4343")
        lines += _dense([1000.0] * 2000, every=0.05, start=start + 1)
        lines.append(f"[{_stamp(start + 101)}] WARNING: CUDA out of memory, retrying with a smaller batch")
        lines += _dense([1000.0] * 2000, every=0.05, start=start + 102)
    lines.append(f"[{_stamp(T0 + 3000)}] RuntimeError: CUDA error: an illegal memory access was encountered")
    path = tmp_path / "slurm-4343.out"
    path.write_text("\n".join(lines) + "\n")
    sampled, full = _both(compiled, [str(path)])
    assert full.incidents and _incidents(sampled) == _incidents(full)
    assert sampled.hits < full.hits / 3


def _hits(compiled, text: bytes, block: int, chunk: int) -> list[tuple]:
    scanner, _ = scanner_for(compiled, "job")
    scanner.block = block
    out = []
    for i in range(0, len(text), chunk):
        out += scanner.feed(text[i : i + chunk])
    out += scanner.flush()
    return [(h.matcher, h.line_no, h.offset, h.line, tuple(sorted(h.groups.items()))) for h in out]


def test_the_scanner_reports_a_line_per_block_and_after_each_boundary(compiled):
    lines = _dense([1000.0] * 4000, every=0.05)
    lines.insert(2500, "NCCL WARN Call to ibv_poll_cq failed with error")  # a boundary hit
    text = ("\n".join(lines) + "\n").encode()
    block = 16 << 10
    full = _hits(compiled, text, 0, 1 << 20)
    sampled = _hits(compiled, text, block, 1 << 20)
    # 4001 lines: every progress line and the warning (which the NCCL matcher and a weak
    # keyword, appfall8's "Call to ibv_... failed", both read: two hits on one line)
    assert len({h[1] for h in full}) == 4001
    assert set(sampled) <= set(full)  # each reported hit is the full path's, groups and all
    blocks = len(text) // block + 1
    assert blocks <= len(sampled) <= 2 * blocks + 4
    nos = [h[1] for h in sampled]
    assert nos[0] == 1 and nos[-1] == 4001  # the first and the last progress line
    assert 2502 in nos  # the warning's line is 2501: the progress line right after it
    # every 16 KiB of the log has a point
    offs = [h[2] for h in sampled]
    assert max(b - a for a, b in zip(offs, offs[1:])) <= block + 400


def test_the_last_line_of_each_chunk_is_reported(compiled):
    text = ("\n".join(_dense([1000.0] * 3000)) + "\n").encode()
    chunk = 50_000
    sampled = _hits(compiled, text, 1 << 16, chunk)
    ends = {text.rfind(b"\n", 0, min(len(text), i + chunk) - 1) + 1 for i in range(0, len(text), chunk)}
    # a chunk's last complete line is one of its hits (a line cut by the chunk's end is the next one's)
    assert {o for _, _, o, _, _ in sampled} >= {e for e in ends if e < len(text)} - {0}


def _stream(compiled, text: bytes, chunk: int, **kw) -> tuple[list[Fact], StreamFacts]:
    scanner, index_map = scanner_for(compiled, "job")
    stream = StreamFacts(
        scanner, HitConverter(list(compiled.matchers)), FileContext("slurm-1.out", "job", "1"), index_map, **kw
    )
    out: list[Fact] = []
    for i in range(0, len(text), chunk):
        out += [it for _, _, it in stream.feed(text[i : i + chunk]) if isinstance(it, Fact)]
    return out, stream


def test_sparse_progress_keeps_every_line_and_dense_progress_gets_blocks(compiled):
    sparse = ("\n".join(_dense([1000.0] * 200, every=6.0)) + "\n").encode()
    facts, stream = _stream(compiled, sparse, 4096)
    assert stream.scanner.block == 0 and len(facts) == 200
    dense = ("\n".join(_dense([1000.0] * 6000, every=0.02)) + "\n").encode()  # ~9 KB of log a second
    _, stream = _stream(compiled, dense, 1 << 20)
    assert 20_000 < stream.scanner.block <= sampler.PROGRESS_BLOCK  # ~5 s of log
    _, stream = _stream(compiled, dense, 1 << 20, block=8192)
    assert stream.scanner.block == 8192  # the bound given
    _, stream = _stream(compiled, dense, 1 << 20, sample=False)
    assert stream.scanner.block == 0


def test_the_setting(monkeypatch, caplog):
    monkeypatch.setenv("RECOVER_PROGRESS_BLOCK", "0")
    assert sampler.progress_block() == 0
    monkeypatch.setenv("RECOVER_PROGRESS_BLOCK", "32768")
    assert sampler.progress_block() == 32768
    monkeypatch.setenv("RECOVER_PROGRESS_BLOCK", "64k")
    with caplog.at_level(logging.ERROR):
        assert sampler.progress_block() == sampler.PROGRESS_BLOCK
    assert "RECOVER_PROGRESS_BLOCK" in caplog.text


# every spec of the scanner's own differential pool a block spec (tests/core/test_matching.py)
_BLOCK_POOL = [
    MatcherSpec(s.id, s.pattern, block=not s.sample, sample=s.sample, ignore_case=s.ignore_case)
    for s in test_matching.FULL_POOL
]


def _feeds(block: int, chunks: list[bytes], max_line: int) -> list[list[tuple]]:
    """The hits of each feed call (and of the flush), hashable."""
    sc = Scanner(_BLOCK_POOL, backend="hyperscan", max_line=max_line)
    sc.block = block
    parts = [sc.feed(c) for c in chunks] + [sc.flush()]
    return [
        [(h.matcher, h.line, h.line_no, h.offset, tuple(sorted(h.groups.items())), h.truncated) for h in p]
        for p in parts
    ]


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan not installed")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(test_matching.logs(), st.sampled_from([1, 24, 64]))
def test_differential_block_specs(case, block):
    """Block 0 is every hit, as RE2 alone; any block reports a subset of those hits, the same
    hits, every hit of the other specs, and the last line of each block spec in each feed."""
    chunks, max_line = case
    expected = test_matching.scan(_BLOCK_POOL, "re2", chunks, max_line)
    full = _feeds(0, chunks, max_line)
    assert [(m, t, n, o, dict(g), c) for p in full for m, t, n, o, g, c in p] == expected
    got = _feeds(block, chunks, max_line)
    for want, have in zip(full, got):
        assert set(have) <= set(want)
        assert {h for h in want if not _BLOCK_POOL[h[0]].block} <= set(have)
        for idx in {h[0] for h in want}:
            assert max(h[2] for h in want if h[0] == idx) == max(h[2] for h in have if h[0] == idx)
