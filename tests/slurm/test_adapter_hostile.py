"""What users set reaches the adapter in any bytes (issue 18): a job name, path or comment that
is not UTF-8 never fails a poll, and what a command prints is read up to a bound.

Through the runner seam: the real subprocess_runner on a child that prints the bytes Slurm 22.05
printed for ``sbatch -J $'bad\\xff\\xfename' -o $'/tmp/\\xff-%j.log'`` (raw, inside the JSON).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from scheduler_adapters.base import CommandResult, SchedulerUnavailable
from scheduler_adapters.slurm import SlurmAdapter
from scheduler_adapters.slurm.adapter import subprocess_runner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
PY = sys.executable
BAD_NAME = b"bad\xff\xfename"
BAD_PATH = b"/srv/train/\xff-%j.out"


def printing(data: bytes, tmp: Path, scontrol: bytes = b""):
    """A runner that answers through a real child process, printing raw bytes: ``data`` to
    every command but ``scontrol show job -o`` (``scontrol``: the recorded text by default)."""
    answers = {}
    for name, out in (("out", data), ("scontrol", scontrol or (FIXTURES / "scontrol_show_job.txt").read_bytes())):
        blob = tmp / f"{name}.bin"
        blob.write_bytes(out)
        answers[name] = f"import sys; sys.stdout.buffer.write(open({str(blob)!r}, 'rb').read())"

    def run(argv, timeout):
        code = answers["scontrol" if list(argv) == ["scontrol", "show", "job", "-o"] else "out"]
        return subprocess_runner([PY, "-c", code], timeout)

    return run


def hostile_squeue() -> bytes:
    """The recorded squeue --json with job 10 (pending) named and logged in bytes that are not UTF-8."""
    data = json.loads((FIXTURES / "squeue.json").read_text())
    for job in data["jobs"]:
        if job["job_id"] == 10:
            job["name"], job["standard_output"], job["standard_error"] = "@NAME@", "@PATH@", "@PATH@"
    text = json.dumps(data).encode()
    return text.replace(b"@NAME@", BAD_NAME).replace(b"@PATH@", BAD_PATH.replace(b"/", b"\\/"))


def hostile_scontrol() -> bytes:
    """The recorded scontrol show job -o, job 10's paths as scontrol expands BAD_PATH."""
    text = (FIXTURES / "scontrol_show_job.txt").read_bytes()
    return text.replace(b"/srv/train/rq-10.out", BAD_PATH.replace(b"%j", b"10"))


def test_the_runner_keeps_bytes_that_are_not_utf8():
    result = subprocess_runner([PY, "-c", "import sys; sys.stdout.buffer.write(b'bad\\xff\\xfename\\n')"], 10)
    assert result.rc == 0 and not result.truncated
    assert result.stdout.encode("utf-8", "surrogateescape") == BAD_NAME + b"\n"  # lossless


def test_a_job_name_that_is_not_utf8_does_not_fail_the_poll(tmp_path, caplog):
    adapter = SlurmAdapter(runner=printing(hostile_squeue(), tmp_path, hostile_scontrol()))
    jobs = {j.job_id: j for j in adapter.jobs()}
    assert len(jobs) == 12  # every job, the hostile one included
    bad = jobs["10"]
    assert (bad.state, bad.attempt, bad.excluded_nodes) == ("PENDING", 1, ("n1", "n2"))
    assert bad.name == "bad\ufffd\ufffdname"
    # a path with U+FFFD would name another file: the log is not followed, and the log says why
    assert bad.stdout is None and bad.stderr is None
    assert "job 10: its output path is not UTF-8" in caplog.text
    assert jobs["6"].name == "train llama" and jobs["6"].stdout == "/srv/train/train-6.out"
    # what the adapter hands on can be stored: sqlite refuses lone surrogates
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (v TEXT)")
    for j in jobs.values():
        con.execute("INSERT INTO t VALUES (?)", (repr(j),))


def test_one_job_of_many_with_a_bad_name_is_found(tmp_path):
    adapter = SlurmAdapter(runner=printing(hostile_squeue(), tmp_path, hostile_scontrol()))
    assert adapter.job("10").name == "bad\ufffd\ufffdname"
    assert adapter.job("6").nodes == ("n1", "n2")


def test_text_output_that_is_not_utf8_is_read(tmp_path):
    line = (
        b"JobId=3 JobName=" + BAD_NAME + b" UserId=ann(1000) JobState=PENDING Reason=JobHeldUser Requeue=1 "
        b"Restarts=0 ExcNodeList=(null) NodeList=(null) StdErr=/w/\xff.out StdOut=/w/\xff.out\n"
    )
    adapter = SlurmAdapter(runner=printing(line, tmp_path, scontrol=line), use_json=False)
    (job,) = adapter.jobs()
    assert (job.job_id, job.state, job.name, job.stdout, job.user) == (
        "3",
        "PENDING",
        "bad\ufffd\ufffdname",
        None,
        "ann",
    )


def test_a_node_reason_that_is_not_utf8_is_read(tmp_path):
    data = json.loads((FIXTURES / "sinfo.json").read_text())
    data["nodes"][0]["reason"] = "@R@"
    adapter = SlurmAdapter(runner=printing(json.dumps(data).encode().replace(b"@R@", b"gpu \xff"), tmp_path))
    nodes = adapter.nodes()
    assert nodes[0].reason == "gpu \ufffd" and len(nodes) == len(data["nodes"])


def test_what_run_returns_can_be_logged_and_stored():
    result = SlurmAdapter().run([PY, "-c", "import sys; sys.stdout.buffer.write(b'ok \\xff'); sys.exit(2)"])
    assert (result.rc, result.stdout) == (2, "ok \ufffd")
    result.stdout.encode("utf-8")


def test_output_past_the_bound_kills_the_command_and_says_so():
    spew = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    result = subprocess_runner([PY, "-c", spew], 20, max_output=1 << 20)
    assert result.truncated and not result.timed_out and result.rc != 0
    assert result.stdout == "" and "printed more than 1048576 bytes" in result.stderr
    assert result.duration_s < 15


def test_a_query_past_the_bound_is_an_outage_with_a_clear_message():
    spew = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    adapter = SlurmAdapter(
        runner=lambda argv, timeout: subprocess_runner([PY, "-c", spew], timeout, max_output=1 << 20),
        max_output=1 << 20,
    )
    with pytest.raises(SchedulerUnavailable, match="max_output"):
        adapter.nodes()
    # a runner of the caller's own is held to the same bound
    big = SlurmAdapter(runner=lambda argv, timeout: CommandResult(0, stdout="{}" + " " * 2048), max_output=1024)
    with pytest.raises(SchedulerUnavailable, match="more than 1024 bytes"):
        big.nodes()


def test_the_bound_is_a_setting_of_the_adapter(tmp_path):
    data = (FIXTURES / "sinfo.json").read_bytes()
    blob = tmp_path / "sinfo.json"
    blob.write_bytes(data)
    code = f"import sys; sys.stdout.buffer.write(open({str(blob)!r}, 'rb').read())"

    def real(argv, timeout):
        return [PY, "-c", code]

    small = SlurmAdapter(max_output=len(data) - 1)
    small._runner = lambda argv, timeout, r=small._runner: r(real(argv, timeout), timeout)
    with pytest.raises(SchedulerUnavailable, match="max_output"):
        small.nodes()
    roomy = SlurmAdapter(max_output=len(data))
    roomy._runner = lambda argv, timeout, r=roomy._runner: r(real(argv, timeout), timeout)
    assert roomy.nodes()
