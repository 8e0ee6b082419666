"""The verifiers ask the adapter's JobInfo what a job's state means (active, held, ended) instead
of reading Slurm's state names and "held" reasons themselves (review M6)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.live import verify
from scheduler_adapters.base import CommandResult, JobInfo
from scheduler_adapters.slurm import SlurmAdapter


def test_slurm_s_words_mean_what_the_job_info_says():
    held = JobInfo("7", 0, "PENDING", reason="JobHeldUser")
    assert held.held and not held.active and not held.ended
    assert JobInfo("7", 0, "RUNNING").active and not JobInfo("7", 0, "RUNNING").held
    assert JobInfo("7", 0, "CANCELLED").ended and not JobInfo("7", 0, "PENDING").ended


@dataclass(frozen=True)
class _OtherScheduler(JobInfo):
    """A scheduler whose reasons are worded otherwise: only its adapter knows what they mean."""

    @property
    def held(self) -> bool:
        return self.reason == "on ice"


class _Adapter:
    def __init__(self, job: JobInfo):
        self._job = job

    def job(self, job_id: str) -> JobInfo:
        return self._job


class _Inc:
    id, attempt, nodes = 1, 0, ()


def test_a_hold_is_verified_by_the_adapter_s_answer_not_by_the_reason_s_words():
    action = {"target": "7", "action": "hold"}
    assert verify.VERIFIERS["job_held"](_Adapter(_OtherScheduler("7", 0, "PENDING", reason="on ice")), action, _Inc())
    released = _OtherScheduler("7", 0, "PENDING", reason="JobHeldUser")  # Slurm's words mean nothing here
    assert verify.VERIFIERS["job_released"](_Adapter(released), action, _Inc())


class _Quiet:
    """An adapter that has no word for "the controller did not answer"."""


class _Says(_Quiet):
    def unreachable(self, output: str) -> bool:
        return "controller napping" in output


def test_whether_the_controller_was_away_is_the_adapter_s_to_say():
    slurm_words = "sbatch: error: Unable to contact slurm controller (connect failure)"
    assert SlurmAdapter(runner=lambda argv, t: CommandResult(0)).unreachable(slurm_words)
    assert not SlurmAdapter(runner=lambda argv, t: CommandResult(0)).unreachable("Invalid job id specified")
    # the actuator asks the adapter it acts through, not a list of Slurm's messages of its own
    assert verify.unreachable(_Says(), "error: controller napping")
    assert not verify.unreachable(_Says(), slurm_words)  # another scheduler: Slurm's words mean nothing
    assert not verify.unreachable(_Quiet(), slurm_words)  # an adapter that cannot say never says so
    assert not verify.unreachable(_Says(), None)


def test_both_shipped_adapters_are_whole_scheduler_adapters():
    from scheduler_adapters.base import SchedulerAdapter
    from scheduler_adapters.simulated import SimulatedCluster

    assert isinstance(SimulatedCluster(), SchedulerAdapter)
    assert not SimulatedCluster().unreachable("Unable to contact slurm controller")
