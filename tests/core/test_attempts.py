"""Attempts kept apart: a log that sbatch --open-mode=append keeps across restarts is split into
the job's attempts (SLURM_RESTART_COUNT, requeue lines, start banners printed again), and no
correlation joins facts of different attempts."""

from __future__ import annotations

import pytest

from engine.facts import Fact
from engine.core.incidents import Engine
from engine.core.replay import replay
from engine.rulebook import load_rulebook
from engine.store import Store

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
NCCL = (
    "[rank0]:[E301 {t} ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
)
ITER = "iteration      {step}/  10000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.1E+00 |"
FAILS = [OOM, "NCCL", OOM, OOM]  # attempt -> its failure
CLASSES = ["cuda_oom", "nccl_timeout", "cuda_oom", "cuda_oom"]


def _failure(n: int, hh: int) -> str:
    return NCCL.format(t=f"{hh}:05:00.000000") if FAILS[n] == "NCCL" else FAILS[n]


def banner_with_restart_count(n: int, hh: int) -> list[str]:
    rc = f" SLURM_RESTART_COUNT={n}" if n else " SLURM_RESTART_COUNT="  # Slurm leaves it unset at first
    return [f"2026-03-01T{hh}:00:00 === start SLURM_JOB_ID=4242{rc} SLURM_JOB_NODELIST=n[1-2]"]


def banner_job_id_only(n: int, hh: int) -> list[str]:
    return [f"2026-03-01T{hh}:00:00 SLURM_JOB_ID=4242", f"2026-03-01T{hh}:00:00 SLURM_JOB_NODELIST=n[1-2]"]


def requeue_lines_then_banner(n: int, hh: int) -> list[str]:
    # the previous attempt ends on a requeue line (Slurm's, submitit's, Lightning's); the start
    # banner follows within seconds, so only the requeue line can tell them apart
    ends = {
        1: f"slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-03-01T{hh - 1}:59:59 DUE TO JOB REQUEUE ***",
        2: f"submitit INFO (2026-03-01 {hh - 1}:59:59,912) - Requeued job 4242 (3 remaining timeouts)",
        3: f"2026-03-01T{hh - 1}:59:59 [lightning] Requeued SLURM job: 4242",
    }
    return ([ends[n]] if n else []) + [f"2026-03-01T{hh}:00:00 SLURM_JOB_ID=4242"]


def untimestamped(n: int, hh: int) -> list[str]:
    return ["SLURM_JOB_ID=4242", "SLURM_JOB_NODELIST=n[1-2]"]


def appended_log(banner, gap_hours: int = 1, stamped: bool = True) -> str:
    lines = []
    for n in range(4):
        hh = 10 + n * gap_hours
        lines += banner(n, hh)
        stamp = f"2026-03-01T{hh}:00:05 " if stamped else ""
        lines.append(stamp + ITER.format(step=100))
        fail = _failure(n, hh)
        lines.append((f"2026-03-01T{hh}:05:00 " if stamped and FAILS[n] != "NCCL" else "") + fail)
        lines.append("srun: error: n1: task 0: Exited with exit code 1")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook()
    assert result.ok
    return result.compiled


def _replay(tmp_path, compiled, text: str, name: str = "slurm-4242.out"):
    path = tmp_path / name
    path.write_text(text)
    store = Store(str(tmp_path / "r.db"))
    res = replay([str(path)], compiled, store)
    rows = [store.incident(c.id) for c in res.incidents]
    return store, sorted((r.attempt, r.fault_class) for r in rows), rows


@pytest.mark.parametrize("banner", [banner_with_restart_count, banner_job_id_only, requeue_lines_then_banner])
def test_a_log_appended_across_four_attempts_is_four_incidents(tmp_path, compiled, banner):
    _, got, rows = _replay(tmp_path, compiled, appended_log(banner))
    assert got == list(enumerate(CLASSES))
    assert {r.job for r in rows} == {"4242"}


def test_untimestamped_banners_split_attempts_by_the_evidence_between_them(tmp_path, compiled):
    _, got, _ = _replay(tmp_path, compiled, appended_log(untimestamped, stamped=False))
    assert [a for a, _ in got] == [0, 1, 2, 3]


def test_attempts_restarted_within_minutes_are_not_joined(tmp_path, compiled):
    """The OOM of attempt 0 is 2 minutes before attempt 1's NCCL timeout: inside the 5-minute
    window of corr.cuda_oom_root_of_collective_errors, so only the attempt keeps them apart."""
    text = (
        "\n".join(
            [
                "2026-03-01T10:00:00 SLURM_JOB_ID=4242",
                "2026-03-01T10:00:05 " + ITER.format(step=100),
                "2026-03-01T10:03:00 " + OOM,
                "slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-03-01T10:03:30 DUE TO JOB REQUEUE ***",
                "2026-03-01T10:04:00 SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1",
                "2026-03-01T10:04:30 " + ITER.format(step=100),
                NCCL.format(t="10:05:00.000000"),
            ]
        )
        + "\n"
    )
    store, got, rows = _replay(tmp_path, compiled, text)
    assert got == [(0, "cuda_oom"), (1, "nccl_timeout")]
    second = next(r for r in rows if r.attempt == 1)
    assert "corr.cuda_oom_root_of_collective_errors" not in store.rules_fired(second.id)
    assert all(f.get("attempt") in (1, None) for f, _, _ in store.facts(second.id))


def test_the_tasks_banners_of_one_start_are_one_attempt(tmp_path, compiled):
    """Every task prints SLURM_JOB_ID at start, with warnings in between: still attempt 0."""
    lines = []
    for rank in range(4):
        lines.append(f"2026-03-01T10:00:0{rank} SLURM_JOB_ID=4242 SLURM_PROCID={rank}")
        lines.append(f"2026-03-01T10:00:0{rank} n1:100:100 [0] NCCL WARN rank {rank} slow setup")
    lines += ["2026-03-01T10:00:10 " + ITER.format(step=1), "2026-03-01T10:05:00 " + OOM]
    _, got, _ = _replay(tmp_path, compiled, "\n".join(lines) + "\n")
    assert got == [(0, "cuda_oom")]


def test_a_requeue_line_alone_does_not_start_an_attempt(tmp_path, compiled):
    """What the dying attempt prints after its requeue line (killed tasks) is still that attempt."""
    text = (
        "\n".join(
            [
                "2026-03-01T10:00:00 SLURM_JOB_ID=4242",
                "2026-03-01T10:05:00 " + OOM,
                "slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-03-01T10:05:10 DUE TO JOB REQUEUE ***",
                "srun: error: n1: task 0: Exited with exit code 1",
            ]
        )
        + "\n"
    )
    _, got, _ = _replay(tmp_path, compiled, text)
    assert got == [(0, "cuda_oom")]


def test_each_attempt_runs_on_the_nodes_its_own_banner_names(tmp_path, compiled):
    """Attempt 1 was requeued away from n1: an error naming a node of the job is about n2..n3."""
    text = (
        "\n".join(
            [
                "2026-03-01T10:00:00 SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=n1",
                "2026-03-01T10:05:00 " + OOM,
                "2026-03-01T11:00:00 SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 SLURM_JOB_NODELIST=n[2-3]",
                "2026-03-01T11:05:00 " + OOM,
            ]
        )
        + "\n"
    )
    store, got, rows = _replay(tmp_path, compiled, text)
    assert got == [(0, "cuda_oom"), (1, "cuda_oom")]
    first = next(r for r in rows if r.attempt == 0)
    assert {f.get("node") for f, _, _ in store.facts(first.id) if f.kind == "log"} == {"n1"}
    second = next(r for r in rows if r.attempt == 1)
    assert {f.get("node") for f, _, _ in store.facts(second.id) if f.kind == "log"} == {None}  # two nodes: none named


RULES = """
matchers:
  - {id: oom, pattern: 'CUDA out of memory'}
  - {id: timeout, pattern: 'Watchdog caught collective operation timeout'}
rules:
  - id: s.oom
    description: oom
    when: [{as: l, kind: log, where: {matcher: oom}}]
    then: {symptom: {name: cuda_oom}}
  - id: s.timeout
    description: timeout
    when: [{as: l, kind: log, where: {matcher: timeout}}]
    then: {symptom: {name: nccl_timeout}}
  - id: f.blame_oom
    description: an OOM anywhere in the job before a timeout, with no time window
    {join}
    when:
      - {as: r, kind: symptom, where: {name: cuda_oom}}
      - {as: v, kind: symptom, where: {name: nccl_timeout}}
    then: {fault: {fault_class: cuda_oom, priority: 50}}
  - id: f.timeout
    description: timeout alone
    when: [{as: s, kind: symptom, where: {name: nccl_timeout}}]
    then: {fault: {fault_class: nccl_timeout, priority: 10}}
policy: {settle: 60s}
"""


@pytest.mark.parametrize("join, blamed", [("", False), ("join: [job]", True)])
def test_the_default_join_keeps_an_hour_old_oom_of_attempt_0_out_of_attempt_1(write_rules, join, blamed):
    """The default join is [job, attempt]; a rule that joins on the job alone (the control case)
    shows the facts would otherwise meet."""
    result = write_rules(RULES.replace("{join}", join))
    assert result.ok, [str(d) for d in result.diagnostics]
    e = Engine(result.compiled, Store(":memory:"))
    e.ingest(Fact.make("log", {"matcher": "oom", "job": "7", "attempt": 0}, 0.0, "slurm-7.out:3"))
    e.ingest(Fact.make("log", {"matcher": "timeout", "job": "7", "attempt": 1}, 3600.0, "slurm-7.out:9"))
    e.finish()
    second = next(c for c in e.closed if c.attempt == 1)
    assert (second.decision.fault_class == "cuda_oom") is blamed
    assert ("f.blame_oom" in e.store.rules_fired(second.id)) is blamed
