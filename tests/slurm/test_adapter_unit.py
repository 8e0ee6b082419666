"""SlurmAdapter on recorded Slurm 22.05 output (tests/fixtures/slurm), through the runner seam.

No Slurm is needed: a fake runner answers each argv with a recorded file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scheduler_adapters.base import (
    CommandFailed,
    CommandResult,
    JobInfo,
    SchedulerAdapter,
    SchedulerUnavailable,
)
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.adapter import (
    parse_scontrol_line,
    split_wait_status,
    subprocess_runner,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"

SQUEUE = ("squeue", "--json", "--states=all")
SCONTROL_ALL = ("scontrol", "show", "job", "-o")
SINFO_JSON = ("sinfo", "--json")
SINFO_TEXT = ("sinfo", "-N", "-h", "-o", "%N|%T|%P|%E")
NO_JSON = CommandResult(rc=1, stderr="squeue: unrecognized option '--json'\nTry \"squeue --help\"\n")


def recorded(name: str) -> CommandResult:
    return CommandResult(rc=0, stdout=(FIXTURES / name).read_text())


class FakeRunner:
    """Answers argv with canned results and records every call."""

    def __init__(self, answers: dict[tuple[str, ...], CommandResult]):
        self.answers = dict(answers)
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __call__(self, argv, timeout):
        self.calls.append((tuple(argv), timeout))
        try:
            return self.answers[tuple(argv)]
        except KeyError:
            raise AssertionError(f"unexpected command {argv}") from None

    @property
    def argvs(self) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.calls]


def cluster_answers() -> dict[tuple[str, ...], CommandResult]:
    return {
        SQUEUE: recorded("squeue.json"),
        SCONTROL_ALL: recorded("scontrol_show_job.txt"),
        (*SCONTROL_ALL, "6"): recorded("scontrol_show_job_one.txt"),
        (*SCONTROL_ALL, "999"): CommandResult(rc=1, stderr="slurm_load_jobs error: Invalid job id specified\n"),
        SINFO_JSON: recorded("sinfo.json"),
        SINFO_TEXT: recorded("sinfo_nodes.txt"),
    }


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner(cluster_answers())


@pytest.fixture
def adapter(runner) -> SlurmAdapter:
    return SlurmAdapter(runner=runner, timeout=7)


# (job id, state, attempt, nodes, exit code, signal, stdout, stderr, excluded, requeue)
EXPECTED_JOBS = [
    ("1", "CANCELLED", 2, ("n3",), 0, 15, "/tmp/sl/1.out", "/tmp/sl/1.out", ("n1",), True),
    ("2", "FAILED", 0, ("n1",), 3, None, "/tmp/sl/fail-2.out", "/tmp/sl/fail-2.err", (), True),
    ("4", "COMPLETED", 0, ("n4",), 0, None, "/tmp/sl/slurm-4.out", "/tmp/sl/slurm-4.out", (), True),
    ("5", "COMPLETED", 0, ("n4",), 0, None, "/tmp/sl/rel-5.txt", "/tmp/sl/rel-5.txt", (), True),
    (
        "6",
        "RUNNING",
        0,
        ("n1", "n2"),
        None,
        None,
        "/srv/train/train-6.out",
        "/srv/train/train-6.out",
        (),
        True,
    ),
    (
        "7",
        "FAILED",
        0,
        ("n1",),
        1,
        None,
        "/srv/train/fail-7.out",
        "/srv/train/fail-7.err",
        (),
        True,
    ),
    (
        "8",
        "FAILED",
        0,
        ("n2",),
        0,
        9,
        "/srv/train/killed-8.out",
        "/srv/train/killed-8.out",
        (),
        True,
    ),
    (
        "10",
        "PENDING",
        1,
        (),
        None,
        None,
        "/srv/train/rq-10.out",
        "/srv/train/rq-10.out",
        ("n1", "n2"),
        True,
    ),
    (
        "11",
        "NODE_FAIL",
        0,
        ("n4",),
        0,
        None,
        "/srv/train/pinned-11.out",
        "/srv/train/pinned-11.out",
        (),
        False,
    ),
    ("12", "CANCELLED", 0, ("n4",), 0, 15, "/srv/train/c-12.out", "/srv/train/c-12.out", (), True),
]


def summary(job: JobInfo) -> tuple:
    return (
        job.job_id,
        job.state,
        job.attempt,
        job.nodes,
        job.exit_code,
        job.signal,
        job.stdout,
        job.stderr,
        job.excluded_nodes,
        job.requeue,
    )


def test_is_a_scheduler_adapter(adapter):
    assert isinstance(adapter, SchedulerAdapter)
    assert adapter.name == "slurm"


@pytest.mark.parametrize("expected", EXPECTED_JOBS, ids=lambda e: f"job{e[0]}")
def test_jobs_from_squeue_json(adapter, expected):
    by_id = {job.job_id: job for job in adapter.jobs()}
    assert summary(by_id[expected[0]]) == expected


def test_jobs_reads_everything_with_one_command(adapter, runner):
    # output paths are expanded from the JSON as scontrol would (EXPECTED_JOBS holds what it
    # printed), never read from its text, where a user-set field can forge a record (issue 18)
    jobs = adapter.jobs()
    assert len(jobs) == 12
    assert runner.argvs == [SQUEUE]
    assert {timeout for _, timeout in runner.calls} == {7}


def test_job_details(adapter):
    job = {j.job_id: j for j in adapter.jobs()}["6"]
    assert (job.name, job.user, job.partition, job.reason) == ("train llama", "root", "debug", "")
    failed = {j.job_id: j for j in adapter.jobs()}["7"]
    assert failed.reason == "NonZeroExitCode"


def test_one_job_is_read_from_squeue(adapter, runner):
    job = adapter.job("6")
    assert job is not None and job.stdout == "/srv/train/train-6.out"
    assert runner.argvs == [SQUEUE]


def test_unknown_job_is_none(adapter, runner):
    assert adapter.job("999") is None
    assert runner.argvs == [SQUEUE]


@pytest.mark.parametrize("bad", ["6; rm -rf /", "-1", "", "abc", "6 7"])
def test_job_id_is_validated(adapter, bad):
    with pytest.raises(ValueError):
        adapter.job(bad)


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("/w/%x-%j.out", "/w/train-6.out"),
        ("/w/%u/%A_%a.out", "/w/ann/6_4294967294.out"),
        ("rel-%j.out", "/home/ann/rel-6.out"),
        ("/w/%N-%j.out", None),  # scontrol leaves %N (slurmd expands it): unknown
        ("/w/%5j.out", None),
        ("/w/a\\%j.out", None),
        ("", "/home/ann/slurm-6.out"),
    ],
)
def test_output_patterns_are_expanded_as_scontrol_does(pattern, path):
    record = {
        "job_id": 6,
        "job_state": "RUNNING",
        "name": "train",
        "user_name": "ann",
        "array_job_id": 0,
        "array_task_id": None,
        "batch_flag": True,
        "current_working_directory": "/home/ann",
        "standard_output": pattern,
    }
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: CommandResult(0, json.dumps({"jobs": [record]}))}))
    [job] = adapter.jobs()
    assert (job.stdout, job.stderr) == (path, path)


def test_an_array_task_without_a_pattern_logs_where_slurm_puts_it():
    record = {"job_id": 13, "array_job_id": 12, "array_task_id": 1, "batch_flag": True, "job_state": "RUNNING"}
    record["current_working_directory"] = "/w"
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: CommandResult(0, json.dumps({"jobs": [record]}))}))
    assert adapter.job("12_1").stdout == "/w/slurm-12_1.out"


@pytest.mark.parametrize(
    ("raw", "split"),
    [
        (0, (0, None)),
        (256, (1, None)),
        (768, (3, None)),
        (9, (0, 9)),
        (15, (0, 15)),
        (35072, (137, None)),
    ],
)
def test_split_wait_status(raw, split):
    assert split_wait_status(raw) == split


def test_nodes_from_sinfo_json(adapter):
    nodes = {n.name: n for n in adapter.nodes()}
    assert [(n.name, n.state, n.flags, n.reason) for n in nodes.values()] == [
        ("n1", "mixed", (), ""),
        ("n2", "mixed", (), ""),
        ("n3", "drained", ("DRAIN",), "xid 79 on GPU 2"),
        ("n4", "down", ("NOT_RESPONDING",), "Not responding"),
    ]
    assert nodes["n3"].drained and not nodes["n3"].down
    assert nodes["n4"].down and not nodes["n4"].drained
    assert nodes["n1"].partitions == ("debug",)


# -- without --json: text output, which must say the same things ------------------------------


@pytest.fixture
def text_runner() -> FakeRunner:
    answers = cluster_answers()
    answers[SQUEUE] = NO_JSON
    answers[SINFO_JSON] = CommandResult(rc=1, stderr="sinfo: unrecognized option '--json'\n")
    return FakeRunner(answers)


def test_falls_back_to_scontrol_and_remembers(text_runner):
    adapter = SlurmAdapter(runner=text_runner)
    first = adapter.jobs()
    second = adapter.jobs()
    assert first == second
    assert text_runner.argvs == [SQUEUE, SCONTROL_ALL, SCONTROL_ALL]


def test_text_jobs_agree_with_json_jobs(adapter, text_runner):
    from_text = {j.job_id: j for j in SlurmAdapter(runner=text_runner).jobs()}
    from_json = {j.job_id: j for j in adapter.jobs()}
    assert from_text.keys() == from_json.keys()
    for job_id, job in from_json.items():
        assert summary(from_text[job_id]) == summary(job)
        assert (from_text[job_id].name, from_text[job_id].user) == (job.name, job.user)
    # scontrol -o writes the reason's spaces as "_" and gives the whole of it
    assert from_text["10"].reason == "ReqNodeNotAvail,_UnavailableNodes:n[3-4]"


def test_text_nodes_agree_with_json_nodes(adapter, text_runner):
    assert SlurmAdapter(runner=text_runner).nodes() == adapter.nodes()


def test_text_only_never_asks_for_json(runner):
    adapter = SlurmAdapter(runner=runner, use_json=False)
    assert len(adapter.jobs()) == 12 and adapter.job("6") is not None and len(adapter.nodes()) == 4
    assert not [argv for argv in runner.argvs if "--json" in argv]


def test_text_one_job(text_runner):
    adapter = SlurmAdapter(runner=text_runner)
    assert adapter.job("999") is None
    assert summary(adapter.job("6")) == EXPECTED_JOBS[4]


def test_parse_scontrol_line_keeps_spaces_in_values():
    fields = parse_scontrol_line(
        "JobId=6 JobName=train llama UserId=root(0) ReqB:S:C:T=0:0:*:* StdOut=/a b/6.out Power="
    )
    assert fields == {
        "JobId": "6",
        "JobName": "train llama",
        "UserId": "root(0)",
        "ReqB:S:C:T": "0:0:*:*",
        "StdOut": "/a b/6.out",
        "Power": "",
    }


# -- later openapi shapes (hand-written, after the 23.02 documentation) ------------------------


def test_reads_later_openapi_shapes():
    job = {
        "job_id": 42,
        "job_state": ["FAILED"],
        "restart_cnt": {"set": True, "infinite": False, "number": 2},
        "exit_code": {
            "status": ["SIGNALED"],
            "return_code": {"set": True, "number": 0},
            "signal": {"id": {"set": True, "number": 9}, "name": "KILL"},
        },
        "nodes": "gpu-[07-08]",
        "standard_output": "/logs/42.out",
        "standard_error": "/logs/42.err",
        "state_reason": "None",
    }
    node = {
        "name": "gpu-07",
        "state": ["IDLE", "DRAIN"],
        "reason": "bad gpu",
        "partitions": ["a100"],
    }
    runner = FakeRunner(
        {
            SQUEUE: CommandResult(0, json.dumps({"jobs": [job], "errors": []})),
            SINFO_JSON: CommandResult(0, json.dumps({"nodes": [node]})),
        }
    )
    adapter = SlurmAdapter(runner=runner)
    [info] = adapter.jobs()
    assert (info.state, info.attempt, info.exit_code, info.signal, info.nodes) == (
        "FAILED",
        2,
        0,
        9,
        ("gpu-07", "gpu-08"),
    )
    assert (info.stdout, info.stderr) == ("/logs/42.out", "/logs/42.err")
    assert runner.argvs == [SQUEUE]  # nothing to expand: scontrol not asked
    [n] = adapter.nodes()
    assert (n.state, n.flags, n.reason, n.partitions) == (
        "drained",
        ("DRAIN",),
        "bad gpu",
        ("a100",),
    )


def test_a_broken_record_is_skipped_not_fatal():
    jobs = [
        {"job_id": 1, "job_state": "RUNNING", "nodes": "n[3-1]", "standard_output": "/x"},
        {"job_id": 2, "job_state": "PENDING", "standard_output": "/y"},
    ]
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: CommandResult(0, json.dumps({"jobs": jobs}))}))
    assert [j.job_id for j in adapter.jobs()] == ["2"]


# -- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (
            CommandResult(127, stderr="[Errno 2] No such file or directory: 'squeue'"),
            SchedulerUnavailable,
        ),
        (CommandResult(124, stderr="timed out", timed_out=True), SchedulerUnavailable),
        (
            CommandResult(1, stderr="squeue: error: Unable to contact slurm controller (connect failure)"),
            SchedulerUnavailable,
        ),
        (CommandResult(1, stderr="squeue: error: Invalid user"), CommandFailed),
        (CommandResult(0, stdout="<html>not json"), CommandFailed),
        (CommandResult(0, stdout="[1, 2]"), CommandFailed),
    ],
)
def test_query_failures_raise(result, error):
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: result, SINFO_JSON: result}))
    with pytest.raises(error):
        adapter.jobs()
    with pytest.raises(error):
        adapter.nodes()


def test_command_failed_carries_the_result():
    result = CommandResult(1, stderr="squeue: error: Invalid user")
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: result}))
    with pytest.raises(CommandFailed) as caught:
        adapter.jobs()
    assert caught.value.result is result and caught.value.argv == list(SQUEUE)


# -- run: the real subprocess runner -------------------------------------------------------------

PY = sys.executable


def test_run_passes_argv_to_the_runner(runner):
    runner.answers[("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=a b")] = CommandResult(0)
    result = SlurmAdapter(runner=runner).run(
        ["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=a b"], timeout=3
    )
    assert result.rc == 0
    assert runner.calls[-1] == (
        ("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=a b"),
        3,
    )


@pytest.mark.parametrize("argv", ["scontrol requeue 5", b"ls", [], ["scontrol", 5]])
def test_run_refuses_what_is_not_an_argv_list(argv):
    with pytest.raises(TypeError):
        SlurmAdapter(runner=FakeRunner({})).run(argv)


def test_run_no_shell():
    result = SlurmAdapter().run([PY, "-c", "import sys; print(sys.argv[1:])", "$HOME; echo hi", "*"])
    assert result.rc == 0
    assert result.stdout.strip() == "['$HOME; echo hi', '*']"


def test_run_exit_status_and_streams():
    result = subprocess_runner([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 10)
    assert (result.rc, result.stdout, result.stderr, result.timed_out) == (
        3,
        "out\n",
        "err\n",
        False,
    )
    assert result.duration_s > 0


def test_run_timeout_gives_124():
    result = subprocess_runner([PY, "-c", "import time; print('started', flush=True); time.sleep(30)"], 0.5)
    assert result.rc == 124 and result.timed_out
    assert result.duration_s < 10


def test_run_missing_program_gives_127():
    result = subprocess_runner(["/nonexistent/squeue", "--json"], 5)
    assert result.rc == 127 and not result.timed_out
    assert "nonexistent" in result.stderr


def test_missing_slurm_is_unavailable():
    adapter = SlurmAdapter(
        runner=lambda argv, timeout: subprocess_runner(["/nonexistent/" + argv[0], *argv[1:]], timeout)
    )
    with pytest.raises(SchedulerUnavailable, match="not found"):
        adapter.nodes()


# -- issue 10: an outage is not an empty cluster; live state for acting ------------------------


def test_an_errors_entry_is_an_outage_not_an_empty_cluster():
    # what 22.05 prints, with exit status 0, while slurmctld is away
    down = CommandResult(
        0,
        stdout=json.dumps(
            {
                "jobs": [],
                "errors": [{"error": "Unable to contact slurm controller (connect failure)", "error_number": 1}],
            }
        ),
    )
    adapter = SlurmAdapter(runner=FakeRunner({SQUEUE: down, SINFO_JSON: down}))
    with pytest.raises(SchedulerUnavailable, match="Unable to contact"):
        adapter.jobs()
    with pytest.raises(SchedulerUnavailable):
        adapter.nodes()


DETAIL = (
    "JobId=41 JobName=train UserId=ann(1000) JobState=RUNNING Reason=None Requeue=0 Restarts=2 "
    "ReqNodeList=n1 ExcNodeList=n[7-8] NodeList=n[1-2] JOB_GRES=gpu:4 "
    "Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1) Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:1,3) "
    "MinCPUsNode=1 StdErr=/w/41.out StdOut=/w/41.out"
)


def test_job_detail_reads_the_live_attempt_exclusions_requirements_and_gpus():
    argv = ("scontrol", "show", "job", "-d", "-o", "41")
    adapter = SlurmAdapter(runner=FakeRunner({argv: CommandResult(0, stdout=DETAIL + "\n")}), use_json=False)
    j = adapter.job_detail("41")
    assert (j.attempt, j.state, j.requeue) == (2, "RUNNING", False)
    assert j.required_nodes == ("n1",) and j.excluded_nodes == ("n7", "n8") and j.nodes == ("n1", "n2")
    assert j.gpus_on("n1") == (0, 1) and j.gpus_on("n2") == (1, 3) and j.gpus_on("n3") == ()


def test_job_detail_of_an_unknown_job_is_none_and_an_outage_raises():
    argv = ("scontrol", "show", "job", "-d", "-o", "9")
    gone = SlurmAdapter(
        runner=FakeRunner({argv: CommandResult(1, stderr="slurm_load_jobs error: Invalid job id specified")}),
        use_json=False,
    )
    assert gone.job_detail("9") is None
    away = SlurmAdapter(
        runner=FakeRunner({argv: CommandResult(1, stderr="Unable to contact slurm controller")}), use_json=False
    )
    with pytest.raises(SchedulerUnavailable):
        away.job_detail("9")


def test_a_gpu_map_is_unknown_without_the_detail():
    assert JobInfo("1", 0, "RUNNING", nodes=("n1",)).gpus_on("n1") is None
