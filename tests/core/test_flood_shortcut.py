"""The flood shortcut (a repeat of a known shape counted without matching, typing and shaping it
again) gives exactly what the full conversion gives: same facts, same counts, same evidence,
same values dropped, and it never merges lines whose shapes differ."""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from engine.core import floods as flood_mod
from engine.core.context import ClusterContext, FileContext
from engine.core.converter import HitConverter
from engine.core.floods import Flood
from engine.core.replay import scan_chunks
from engine.core.scanner import scanner_for
from engine.rulebook.patterns import digit_insensitive, mask_digits
from engine.rulebook import require_rulebook


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook(tests=True)


@pytest.mark.parametrize(
    "pattern",
    [
        r"NET/IB : Got completion with error (?P<code>\d+)",
        r"(?P<node>[A-Za-z0-9][A-Za-z0-9_-]*):\d+:\d+ \[(?P<local_rank>\d+)\]",
        r"addr=0x[0-9a-fA-F]{4,8}",  # the 0 of 0x is a literal digit: not blind
        r"[[:alnum:]_]+ failed \w+ [^\n]{0,200}",
        r"(?P<g1>a)(?i:b)\s\S\D\W[/-:]",
        r"\Qa.b\E x{2,3}",
        r"[a-f]+",
    ],
)
def test_digit_insensitive_patterns(pattern):
    assert digit_insensitive(pattern) is ("0x" not in pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"Xid (?P<code>79|48)",
        r"error [0-5]",
        r"[^1]x",
        r"ECC\x31",
        r"\Qmlx5\E",
        r"x[1-9]\d*",
        r"\pN",
        r"\101",
        r"EXT4-fs",
        r"[[:foo:]]",
    ],
)
def test_digit_sensitive_patterns(pattern):
    assert not digit_insensitive(pattern)


def test_mask_digits_is_injective_up_to_digits():
    assert mask_digits(b"gpu0007:123 [5]") == mask_digits(b"gpu1234:987 [0]")
    assert mask_digits(b"a#1") != mask_digits(b"a11")  # a masked digit is not any other byte
    assert mask_digits(b"err 12") != mask_digits(b"err 123")


def _items(compiled, name: str, data: bytes, source: str, shortcut: bool, monkeypatch, chunk: int, setup=None):
    """Every fact and flood a stream gives, as plain values (floods as they are when handed on)."""
    with monkeypatch.context() as mp:
        if not shortcut:
            mp.setattr(flood_mod.Collapser, "fast", lambda *a, **k: flood_mod.SLOW)
        fast = [0]
        if shortcut:
            real = flood_mod.Collapser.fast

            def counting(self, *a, **k):
                out = real(self, *a, **k)
                fast[0] += out is not flood_mod.SLOW
                return out

            mp.setattr(flood_mod.Collapser, "fast", counting)
        cluster = ClusterContext()
        conv = HitConverter(compiled.matchers, cluster)
        ctx = FileContext(path=name, source=source)
        if setup is not None:
            setup(conv, ctx)
        scanner, index_map = scanner_for(compiled, source)
        chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        out = []
        floods: list[Flood] = []
        for item in scan_chunks(chunks, scanner, conv, ctx, index_map):
            if isinstance(item, Flood):
                floods.append(item)
                out.append(("flood", item.fact_id, item.count))
            else:
                out.append(("fact", item.kind, item.id, item.at, item.origin, sorted(item.attrs.items())))
        final = sorted(
            (f.fact_id, f.count, f.first_at, f.last_at, f.last_origin, f.last_line, sorted(f.nodes), sorted(f.ranks))
            for f in set(floods)
        )
        return (
            out,
            final,
            (conv.dropped_values, sorted(conv.refused.items())),
            (ctx.job, ctx.attempt, sorted(ctx.nodes), ctx.last_at),
            fast[0],
        )


def _same(compiled, name, data, source, monkeypatch, chunk=4096, expect_fast=True, setup=None):
    slow = _items(compiled, name, data, source, False, monkeypatch, chunk, setup)
    fast = _items(compiled, name, data, source, True, monkeypatch, chunk, setup)
    assert fast[:4] == slow[:4]
    if expect_fast and slow[0]:  # a stream no matcher hits has nothing to take the shortcut for
        assert fast[4] > 0, "the shortcut was never taken"
    return slow


def _vary_digits(rng: random.Random, line: str) -> str:
    return re.sub(r"\d", lambda m: str(rng.randrange(10)), line)


def test_rulebook_test_lines_with_varied_digits_give_the_same_answers(compiled, monkeypatch):
    rng = random.Random(12)
    by_source: dict[str, list[str]] = {}
    for test in compiled.book.tests:
        for inp in test.inputs:
            by_source.setdefault(inp.source, []).extend(inp.lines.splitlines())
    assert sum(len(v) for v in by_source.values()) > 100
    hit_any = False
    for source, lines in by_source.items():
        stream = []
        for _ in range(3):  # (each line three times shuffled, with its variants: ~20 s for ~2,000 tests)
            for line in rng.sample(lines, len(lines)):
                stream.append(line)
                stream.extend(_vary_digits(rng, line) for _ in range(rng.randrange(4)))
                if rng.random() < 0.3:
                    stream.append(line)  # an exact repeat too
        data = ("\n".join(stream) + "\n").encode()
        slow = _same(compiled, f"/logs/{source}.log", data, source, monkeypatch, chunk=rng.choice([777, 4096, 1 << 20]))
        hit_any = hit_any or bool(slow[0])
    assert hit_any, "no source's test lines hit a matcher: the shortcut was exercised nowhere"


def test_kernel_log_floods_keep_nodes_and_codes_apart(compiled, monkeypatch):
    lines = []
    for i in range(300):
        node, at = f"gpu{i % 3:03d}", f"2026-03-02T08:{i // 60:02d}:{i % 60:02d}"
        lines.append(f"{at} {node} kernel: nfs: server 10.0.0.{(i // 3) % 2 + 1} not responding, still trying")
        lines.append(
            f"{at} {node} kernel: nvidia-nvswitch{i % 4}: SXid (PCI:0000:{5 + i % 2:02x}:00.0): "
            f"{(12028, 20034)[i // 3 % 2]}, Non-fatal, Link {i % 36} LTSSM Fault Up"
        )
        lines.append(
            f"{at} {node} kernel: NVRM: Xid (PCI:0000:{17 + i % 2:02x}:00): {(79, 48, 13)[i // 3 % 3]}, "
            f"pid={1000 + i}, name=python, Ch 0000000{i % 8}"
        )
        lines.append(
            f"{node}:{100 + i}:{200 + i} [{i % 8}] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion "
            f"from peer 10.0.{i % 4}.1<{i}> with error {(12, 13, 5)[i // 3 % 3]}, opcode 0"
        )
    data = ("\n".join(lines) + "\n").encode()
    items, *_ = _same(compiled, "/var/log/kern.log", data, "kernel", monkeypatch)
    facts = [dict(i[5]) for i in items if i[0] == "fact"]

    def distinct(matcher, *names):
        return {tuple(f.get(n) for n in names) for f in facts if f["matcher"] == matcher}

    # outside a job log the node is part of the shape, and so are the server, the SXid and the status
    assert distinct("kernel_netfs_error", "node", "server") == {
        (f"gpu{n:03d}", f"10.0.0.{s}") for n in range(3) for s in (1, 2)
    }
    assert distinct("nvswitch_sxid", "node", "sxid") == {(f"gpu{n:03d}", x) for n in range(3) for x in (12028, 20034)}


def test_job_log_flood_with_context_lines_midway(compiled, monkeypatch):
    lines = ["[2026-03-02 08:00:00] iteration 1 | lm loss: 2.5 |"]
    for r in range(40):
        if r == 20:
            lines.append("SLURM_JOB_ID=4242")
            lines.append("SLURM_JOB_NODELIST=gpu[001-004]")
        for rank in range(16):
            lines.append(
                f"gpu{rank // 4 + 1:03d}:{5000 + rank}:{5100 + rank} [{rank % 4}] transport/net_ib.cc:1696 NCCL WARN "
                f"NET/IB : Got completion from peer 10.1.{rank}.{r}<{40000 + rank}> with "
                f"status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129"
            )
    data = ("\n".join(lines) + "\n").encode()
    items, final, _, ctx, _ = _same(compiled, "/logs/train.log", data, "job", monkeypatch, chunk=8192)
    assert ctx[0] == "4242"
    facts = [dict(i[5]) for i in items if i[0] == "fact"]
    # before and after the job id became known: one fact each per matcher
    assert sorted((f["matcher"], f.get("job", "-")) for f in facts if f["matcher"].startswith("nccl")) == [
        ("nccl_ib_completion_error", "-"),
        ("nccl_ib_completion_error", "4242"),
        ("nccl_warn", "-"),
        ("nccl_warn", "4242"),
    ]
    nccl = [f for f in facts if f["matcher"].startswith("nccl")]
    assert len(nccl) + sum(f[1] for f in final) == 40 * 16 * 2  # every warning line counted once


def test_floods_of_one_shape_across_windows_and_interleaved_shapes(compiled, monkeypatch):
    """The shortcut remembers which flood a shape belongs to until a new fact arrives: a shape
    whose flood's window ended becomes a new fact (and flood), and interleaved shapes that look
    alike but for a word or the status keep their own floods."""
    lines = []
    for i in range(240):
        t = f"2026-03-02T08:{i // 2 // 60:02d}:{i // 2 % 60:02d}"  # 2 minutes: two FLOOD_WINDOWs
        for status, word in (("IBV_WC_RETRY_EXC_ERR(12)", "completion"), ("IBV_WC_REM_ACCESS_ERR(10)", "completion")):
            lines.append(
                f"{t} gpu{i % 4:03d}:{100 + i}:{200 + i} [{i % 8}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
                f"Got {word} from peer 10.0.{i % 4}.1<{i}> with status={status} opcode=0 len=0 vendor err 129"
            )
        if i % 50 == 0:
            lines.append(f"{t} [rank3]: RuntimeError: CUDA error: an illegal memory access was encountered")
    data = ("\n".join(lines) + "\n").encode()
    items, final, *_ = _same(compiled, "/logs/train.log", data, "job", monkeypatch, chunk=3000)
    facts = [dict(i[5]) for i in items if i[0] == "fact"]
    ib = [f for f in facts if f["matcher"] == "nccl_ib_completion_error"]
    assert len({f.get("ib_wc_status") for f in ib}) == 2 and len(ib) >= 4  # two statuses, each in two windows at least


def test_job_log_under_a_scheduler_refuses_the_same_lines(compiled, monkeypatch):
    """With a scheduler, a node outside the job's allocation is refused line by line: the
    shortcut keys on the node there, so every refusal is still counted."""
    lines = []
    for r in range(30):
        for rank in range(12):
            node = f"gpu{rank // 2 + 1:03d}"  # gpu001..gpu006; the allocation is gpu001..gpu004
            lines.append(
                f"{node}:{5000 + rank}:{5100 + rank} [{rank % 2}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
                f"Got completion from peer 10.1.{rank}.{r}<{40000 + rank}> with error {(12, 13)[r % 2]}, opcode 0"
            )
        lines.append(f"srun: error: gpu00{r % 9 + 1}: task {r}: Exited with exit code {r % 3 + 1}")
    data = ("\n".join(lines) + "\n").encode()

    def setup(conv, ctx):
        conv.scheduler = True
        ctx.job, ctx.attempt, ctx.nodes = "777", 0, {f"gpu{i:03d}" for i in range(1, 5)}
        conv.cluster.assign("777", 0, ctx.nodes, 0.0)

    items, final, counters, _, _ = _same(compiled, "/logs/slurm-777.out", data, "job", monkeypatch, setup=setup)
    # gpu005 and gpu006 for two matchers on every line, and the srun lines that name gpu005..gpu009
    assert dict(counters[1]).get("other_node") == 30 * 4 * 2 + 15
    assert {n for f in final for n in f[6]} <= {f"gpu{i:03d}" for i in range(1, 5)}


def test_live_controller_counts_every_line_of_a_flood(tmp_path):
    """The controller hands a flood on at its first repeat in a read; the read's later repeats
    are handed on after it (StreamFacts.grown), so the store counts every line, the last read's too."""
    from engine.live.controller import Controller, ControllerConfig
    from engine.rulebook import load_rulebook

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "slurm-55.out"
    log.write_text("")
    res = load_rulebook(defaults=True)
    ctl = Controller(
        ControllerConfig(db=str(tmp_path / "r.db"), follow=[str(logs / "*.out")], scheduler="none", dry_run=True),
        res.compiled,
    )
    ctl.startup()
    try:
        written = 0
        for burst in (700, 1, 2500, 3):
            with open(log, "a") as fh:
                for i in range(burst):
                    rank = (written + i) % 64
                    fh.write(
                        f"gpu{rank // 8:03d}:{100 + rank}:{200 + rank} [{rank % 8}] transport/net_ib.cc:1696 NCCL WARN "
                        f"NET/IB : Got completion from peer 10.0.{rank}.1<{40000 + rank}> with error 12, opcode 0\n"
                    )
            written += burst
            for _ in range(3):
                ctl.step()
                time.sleep(0.05)
            while ctl.files.paused:  # a pass over a file ends after ingest.PASS_SECONDS: go on to its end
                ctl.step()
        counts = {
            json.loads(a)["matcher"]: c
            for a, c in ctl.store.db.execute("SELECT attrs, count FROM facts WHERE kind = 'log'").fetchall()
        }
        assert counts == {"nccl_ib_completion_error": written, "nccl_warn": written}
    finally:
        ctl.follower.stop()
        ctl.store.close()
