"""The actuator in its parts (engine/live/actuator.py, verify.py, preflight.py, paging.py): the
scheduler's "could not tell" is an error of the one tree, and the parts keep one concern each."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.live.actuator as actuator
from engine.errors import NotYet, RecoverError, SchedulerUnavailable, StateUnknown
from engine.live import preflight, verify
from engine.rulebook.model import VERIFY_KINDS

ROOT = Path(__file__).resolve().parents[2]


class _Away:
    """An adapter whose controller does not answer."""

    def job(self, job):
        raise SchedulerUnavailable("slurmctld: Connection refused")

    def nodes(self):
        raise SchedulerUnavailable("slurmctld: Connection refused")


def test_a_scheduler_that_does_not_answer_is_a_recover_error():
    """live_job is public (actuator.__all__): what it raises is caught as a RecoverError, as every
    error Recover raises on purpose (it was a bare Exception)."""
    with pytest.raises(RecoverError, match="Connection refused") as info:
        actuator.live_job(_Away(), "7")
    assert isinstance(info.value, StateUnknown) and not isinstance(info.value, NotYet)
    assert issubclass(NotYet, StateUnknown)
    assert actuator.StateUnknown is StateUnknown and actuator.NotYet is NotYet


def test_a_verifier_that_cannot_ask_raises_state_unknown():
    class Inc:
        id, nodes, attempt = 1, ("n1",), 0

    class Rulebook:
        actions: dict = {}

    action = {"action": "drain", "target": "n1", "rc": 0}
    with pytest.raises(StateUnknown, match="verify node_drained"):
        verify.check(_Away(), Rulebook(), action, Inc())


def test_the_public_names_stay_importable():
    for name in actuator.__all__:
        assert getattr(actuator, name) is not None, name
    assert actuator.VERIFIERS is verify.VERIFIERS


def test_the_rulebook_names_exactly_the_verifiers_live_implements():
    # the linter accepts VERIFY_KINDS without importing the live layer; an action the linter
    # lets through must have a verifier, and a verifier no rulebook may name is dead code
    assert set(VERIFY_KINDS) == set(verify.VERIFIERS)
    assert set(verify.DEFAULT_VERIFY.values()) <= set(VERIFY_KINDS) | {"none"}


def test_every_preflight_kind_is_a_verifier():
    assert set(preflight.PREFLIGHT) <= set(verify.VERIFIERS)


@pytest.mark.parametrize("part", ["actuator", "verify", "preflight", "paging"])
def test_each_part_is_under_600_lines(part):
    assert len((ROOT / "engine" / "live" / f"{part}.py").read_text().splitlines()) < 600
