"""How a log ends, live (engine/core/logend.py): a logger's last word that a specific matcher read
as well is that matcher's evidence, live as in replay. The mark (``read_by``) is set in the scan
loop that both share, so the live reading of an ending (``symptom.le_program_error``, then
``fault.le_program_error_then_exit`` when the job's tasks fail) gives way to it as replay's
``fault.le_log_ends_on_program_error`` does.

In process, on the fake scheduler of test_app_xids_live.
"""

from __future__ import annotations

import pytest

from engine.live.controller import Controller
from scheduler_adapters.base import JobInfo
from tests.live.test_app_xids_live import Scheduler, controller, steps  # noqa: F401 (a fixture)

# https://github.com/autobase-tech/autobase/pull/1200: logind's RemoveIPC under a running server
SHM_FATAL = 'FATAL: could not open shared memory segment "/PostgreSQL.3317458760": No such file or directory\n'
# constructed: a logger's last word that no specific matcher reads
PLAIN_FATAL = "FATAL: failed to read the model configuration\n"
# srun's word on the tasks (the wording of tests/live/test_app_xids_live.py)
TASKS_FAILED = "srun: error: n1: tasks 0-7: Exited with exit code 1\n"


def _run(controller, tmp_path, job: str, text: str) -> tuple[Controller, list[str], set[str]]:
    logs = tmp_path / "logs"
    logs.mkdir()
    out = logs / f"slurm-{job}.out"
    out.write_text("")
    ctl = controller(Scheduler([JobInfo(job, 0, "RUNNING", nodes=("n1",), stdout=str(out))]), [str(logs / "*.out")])
    ctl.step()
    with open(out, "a") as fh:
        fh.write(text)
    steps(ctl, 1.6)  # past the settle window
    incidents = ctl.store.incidents()
    fired = {r for i in incidents for r in ctl.store.rules_fired(i.id)}
    return ctl, [i.fault_class or "unknown" for i in incidents], fired


@pytest.mark.parametrize(
    "text, app_error",
    [(PLAIN_FATAL + TASKS_FAILED, True), (SHM_FATAL + TASKS_FAILED, False)],
    ids=["unread", "read-by-a-specific-matcher"],
)
def test_a_logger_fatal_line_a_specific_matcher_read_is_no_program_error_live(controller, tmp_path, text, app_error):
    ctl, classes, fired = _run(controller, tmp_path, "501", text)
    assert classes, "the job's tasks failed: an incident opens either way"
    assert ("fault.le_program_error_then_exit" in fired) is app_error, fired
    assert ("symptom.le_program_error" in fired) is app_error, fired
    assert ("app_error" in classes) is app_error, classes
