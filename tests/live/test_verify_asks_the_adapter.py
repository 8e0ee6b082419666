"""The verifiers ask the adapter's JobInfo what a job's state means (active, held, ended) instead
of reading Slurm's state names and "held" reasons themselves (review M6)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.live import verify
from scheduler_adapters.base import JobInfo


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
