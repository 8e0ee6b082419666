"""Live flight-recorder dumps (issue 21 item 7): once a job attempt's incident is a collective
timeout, the controller finds the dumps where the job's log said (only inside the folders the
site allows) or in the site's folder, waits for them without holding detection back, and their
rank signals join that attempt's incident. In process, on a fake scheduler (as tests/live)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.live.controller import Controller, ControllerConfig
from engine.rulebook import load_rulebook
from scheduler_adapters.base import CommandResult, JobInfo, NodeInfo
from tests.attribution.fr_dumps import FakeJob

NODES = ("n1", "n2")
SITE = "policy:\n  settle: 2500ms\n"
TIMEOUT = (
    "[rank0]:[E1202 00:10:00.491021130 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=12, NumelOut=12, Timeout(ms)=600000) ran for "
    "600011 milliseconds before timing out.\n"
)


class Scheduler:
    name = "fake"
    template_scheduler = "slurm"

    def __init__(self, jobs: list[JobInfo]) -> None:
        self.job_list = jobs

    def jobs(self):
        return list(self.job_list)

    def job(self, job_id):
        return next((j for j in self.job_list if j.job_id == job_id), None)

    def jobs_on(self, nodes):
        return [j for j in self.job_list if set(j.nodes) & set(nodes)]

    def nodes(self):
        return [NodeInfo(n, "allocated") for n in NODES]

    def run(self, argv, timeout=30.0):
        return CommandResult(0)


@pytest.fixture
def start(tmp_path):
    made: list[Controller] = []

    def make(out: Path, **fr) -> Controller:
        res = load_rulebook(defaults=True, overlays=[("site.yaml", SITE)])
        assert res.ok, res.errors
        sched = Scheduler([JobInfo("501", 0, "RUNNING", nodes=NODES, stdout=str(out))])
        cfg = ControllerConfig(
            db=str(tmp_path / "recover.db"),
            scheduler="fake",
            adapter=sched,
            scheduler_interval=0.0,
            scheduler_startup_wait=5.0,
            follow=[str(out.parent / "*.out")],
            fr_dump_wait=2.0,
            **fr,
        )
        ctl = Controller(cfg, res.compiled)
        ctl.startup()
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.stop_event.set()
        if ctl.sched is not None:
            ctl.sched.stop()
        ctl.follower.stop()
        ctl.store.close()


def _steps(ctl: Controller, seconds: float, until=None) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until and until()):
        ctl.step()
        time.sleep(0.05)
    ctl.step()


def _job_dumps(folder: Path, prefix: str = "trace_") -> None:
    job = FakeJob(8)
    for _ in range(41):
        job.collective()
    job.collective(state="scheduled", skip={7})
    job.write(folder, prefix=prefix)


def _log(tmp_path: Path, first: str) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    out = logs / "slurm-501.out"
    out.write_text(first)
    return out


def test_the_printed_prefix_leads_to_the_dumps_and_they_join_the_incident(start, tmp_path: Path) -> None:
    root = tmp_path / "fr"
    out = _log(tmp_path, f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={root}/501/trace_\n")
    ctl = start(out, fr_dump_dirs=[str(root)])
    ctl.step()
    with open(out, "a") as fh:
        fh.write(TIMEOUT)
    _steps(ctl, 1.0, until=lambda: ctl.frdumps.waits)
    # detection did not wait: the incident is open while the dumps are still being waited for
    assert [i.fault_class for i in ctl.store.incidents()] == ["nccl_timeout"] and ctl.frdumps.waits
    _job_dumps(root / "501")  # the ranks write theirs a moment after the timeout
    _steps(ctl, 6.0, until=lambda: ctl.frdumps.stats["signals"])
    assert ctl.frdumps.stats["signals"] == 1
    assert ctl.frdumps.stats["read"] == 8
    _steps(ctl, 5.0, until=lambda: ctl.store.incidents()[0].status != "open")
    [inc] = ctl.store.incidents()
    assert inc.job == "501" and "symptom.rank_signal" in ctl.store.rules_fired(inc.id)


def test_a_prefix_outside_the_allowed_folders_is_not_read(start, tmp_path: Path) -> None:
    root = tmp_path / "fr"
    outside = tmp_path / "someone-else"
    _job_dumps(outside / "501")
    out = _log(tmp_path, f"TORCH_NCCL_DEBUG_INFO_TEMP_FILE={outside}/501/trace_\n")
    ctl = start(out, fr_dump_dirs=[str(root)])
    ctl.step()
    with open(out, "a") as fh:
        fh.write(TIMEOUT)
    _steps(ctl, 3.0, until=lambda: ctl.frdumps.stats["prefix_refused"])
    _steps(ctl, 0.6)  # a poll later: nothing was read from there
    assert ctl.frdumps.stats["prefix_refused"] == 1 and ctl.frdumps.stats["read"] == 0
    assert [i.fault_class for i in ctl.store.incidents()] == ["nccl_timeout"]


def test_the_site_folder_when_the_job_prints_none(start, tmp_path: Path) -> None:
    root = tmp_path / "fr"
    _job_dumps(root / "501", prefix="nccl_trace_rank_")
    out = _log(tmp_path, "")
    ctl = start(out, fr_dump_dir=f"{root}/{{job}}/nccl_trace_rank_")
    ctl.step()
    with open(out, "a") as fh:
        fh.write(TIMEOUT)
    _steps(ctl, 6.0, until=lambda: ctl.frdumps.stats["signals"])
    assert ctl.frdumps.stats["read"] == 8 and ctl.frdumps.stats["signals"] == 1


def test_the_settings(tmp_path: Path) -> None:
    from engine.config import ConfigError, load_settings

    good = tmp_path / "recover.toml"
    good.write_text('fr_dump_dir = "/scratch/fr/{job}/"\nfr_dump_dirs = ["/scratch/fr"]\nfr_dump_wait = 30\n')
    s = load_settings(str(good), env={})
    assert (s.fr_dump_dir, s.fr_dump_dirs, s.fr_dump_wait, s.fr_dump_max_bytes) == (
        "/scratch/fr/{job}/",
        ["/scratch/fr"],
        30,
        64 << 20,
    )
    for bad in ('fr_dump_dirs = ["relative"]', "fr_dump_wait = 0", "fr_dump_wait = true", "fr_dump_max_bytes = -1"):
        (tmp_path / "bad.toml").write_text(bad + "\n")
        with pytest.raises(ConfigError):
            load_settings(str(tmp_path / "bad.toml"), env={})


def test_what_the_watch_remembers_is_bounded(monkeypatch) -> None:
    from engine.live import frdumps

    monkeypatch.setattr(frdumps, "MAX_REMEMBERED", 3)
    watch = frdumps.DumpWatch(site_dir="/scratch/fr/{job}/")
    for job in range(10):
        watch.job_log(str(job), 0, f"/logs/{job}.out")
    assert list(watch.logs) == [("7", 0), ("8", 0), ("9", 0)]
