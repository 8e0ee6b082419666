"""What users set in a job (name, comment, paths) is never read as scontrol's structure (issue 18
item 11, review M15): no GPU indexes, output paths or records out of a user-set field.

The text here is what Slurm 22.05 printed for ``sbatch -N2 --gres=gpu:2 -J 'x Nodes=n3 CPU_IDs=0
Mem=0 GRES=gpu:8(IDX:0-7)' --comment 'hi Nodes=n4 ...'`` (and with newlines in the fields).
"""

from __future__ import annotations

import json

import pytest

from scheduler_adapters.base import MAX_COMMENT_KEPT, CommandFailed, CommandResult
from scheduler_adapters.slurm import SlurmAdapter, text

FORGED = "Nodes=n3 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)"
HEAD = (
    "JobId=2 JobName={name} UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag={batch} "
    "Reboot=0 ExitCode=0:0 DerivedExitCode=0:0 RunTime=00:00:02 TimeLimit=365-00:00:00 TimeMin=N/A "
    "Partition=debug AllocNode:Sid=localhost:4828 ReqNodeList=(null) ExcNodeList=(null) NodeList=n[1-2] "
    "BatchHost=n1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=2,billing=2 "
    "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:4   Nodes=n[1-2] CPU_IDs=0 Mem=0 "
    "GRES=gpu:2(IDX:0-1) MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp Comment={comment} "
    "{paths}Power= TresPerNode=gres:gpu:2 "
)
PATHS = "StdErr=/w/2.out StdIn=/dev/null StdOut=/w/2.out "
DETAIL_ARGV = ("scontrol", "show", "job", "-d", "-o", "2")
ALL_ARGV = ("scontrol", "show", "job", "-o")
SQUEUE = ("squeue", "--json", "--states=all")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(text, "_warned", set())


def line(name="train", comment="hi", batch=1, paths=PATHS) -> str:
    return HEAD.format(name=name, comment=comment, batch=batch, paths=paths)


def text_adapter(stdout: str, argv=DETAIL_ARGV) -> SlurmAdapter:
    answers = {argv: CommandResult(0, stdout=stdout)}
    return SlurmAdapter(runner=lambda a, t: answers[tuple(a)], use_json=False)


def test_an_honest_record_gives_its_gpus():
    j = text_adapter(line() + "\n").job_detail("2")
    assert j.detailed and j.gpus == (("n1", (0, 1)), ("n2", (0, 1)))
    assert (j.name, j.stdout, j.nodes) == ("train", "/w/2.out", ("n1", "n2"))


@pytest.mark.parametrize(
    "name, comment",
    [
        (f"x {FORGED}", "hi"),  # before the real detail
        ("train", f"hi {FORGED} "),  # after it: one more group, but not in its run
        ("train", f"hi JOB_GRES=gpu:8 {FORGED} "),
        ("x NodeList=n3 JobState=RUNNING", "hi"),
        ("train", "hi StdOut=/etc/shadow"),  # a batch job prints its own StdOut: twice
    ],
)
def test_a_user_field_that_copies_structure_is_refused_not_read(name, comment, caplog):
    adapter = text_adapter(line(name=name, comment=comment) + "\n")
    with pytest.raises(CommandFailed, match="ambiguous"):
        adapter.job_detail("2")
    assert "scontrol record of job 2 not used" in caplog.text


def test_a_refused_record_is_warned_about_once_not_at_every_poll(caplog):
    adapter = text_adapter(line(name=f"x {FORGED}") + "\n", ALL_ARGV)
    for _ in range(3):
        assert adapter.jobs() == []
    assert caplog.text.count("scontrol record of job 2 not used") == 1


def test_a_newline_in_a_user_field_is_refused():
    text = line(name=f"x\n     {FORGED}") + "\n"
    with pytest.raises(CommandFailed, match="ambiguous"):
        text_adapter(text).job_detail("2")


def test_a_job_that_prints_no_paths_gets_none_from_its_fields():
    # an srun job (BatchFlag=0) prints no StdOut: one in its comment is not its log
    j = text_adapter(line(batch=0, comment="hi StdOut=/etc/shadow", paths="") + "\n").job_detail("2")
    assert j.stdout is None and j.stderr is None and j.gpus_on("n1") == (0, 1)


def test_a_record_forged_after_a_newline_hides_nothing_and_names_no_log(caplog):
    victim = line().replace("JobId=2 ", "JobId=6 ")
    # job 9's StdOut ends in a newline and a whole record for job 6, with a log of job 9's choosing
    forged = line().replace("JobId=2 ", "JobId=6 ").replace("/w/2.out", "/tmp/evil")
    attacker = line(paths=f"StdErr=/w/9.out StdIn=/dev/null StdOut=/w/9.out\n{forged}").replace("JobId=2 ", "JobId=9 ")
    jobs = {j.job_id: j for j in text_adapter(f"{victim}\n{attacker}\n", ALL_ARGV).jobs()}
    assert "6" not in jobs or jobs["6"].stdout != "/tmp/evil"
    assert "more than one record of this job id" in caplog.text


def test_json_names_a_victims_log_whatever_scontrol_text_says():
    # in JSON mode no scontrol text is read: another job's forged record cannot name the log
    record = {
        "job_id": 6,
        "job_state": "RUNNING",
        "nodes": "n1",
        "batch_flag": True,
        "current_working_directory": "/w",
        "standard_output": "/w/train-%j.out",
    }
    forged = line().replace("JobId=2 ", "JobId=6 ").replace("/w/2.out", "/tmp/evil")
    answers = {
        SQUEUE: CommandResult(0, json.dumps({"jobs": [record]})),
        ALL_ARGV: CommandResult(
            0,
            stdout=line().replace("JobId=2 ", "JobId=6 ").replace("/w/2", "/w/train-6")
            + "\n"
            + f"{line(paths='StdOut=/w/9')}\n{forged}\n",
        ),
    }
    [job] = SlurmAdapter(runner=lambda a, t: answers[tuple(a)]).jobs()
    assert job.stdout == "/w/train-6.out"


def test_json_detail_reads_gpus_from_gres_detail_not_from_names():
    record = {
        "job_id": 2,
        "job_state": "RUNNING",
        "name": f"x {FORGED}",
        "comment": f"hi {FORGED}",
        "nodes": "n[1-2]",
        "restart_cnt": 0,
        "required_nodes": "",
        "gres_detail": ["gpu:2(IDX:0-1)", "gpu:2(IDX:2-3)"],
        "job_resources": {"nodes": "n[1-2]", "allocated_nodes": [{"nodename": "n1"}, {"nodename": "n2"}]},
    }
    answers = {
        SQUEUE: CommandResult(0, json.dumps({"jobs": [record]})),
        # what the same job's scontrol -d -o text says (read by the old code)
        DETAIL_ARGV: CommandResult(0, stdout=line(name=f"x {FORGED}", comment=f"hi {FORGED} ") + "\n"),
    }
    j = SlurmAdapter(runner=lambda a, t: answers[tuple(a)]).job_detail("2")
    assert j.detailed and j.gpus == (("n1", (0, 1)), ("n2", (2, 3)))
    assert j.gpus_on("n3") == ()


def test_json_detail_with_a_gres_list_that_does_not_match_the_nodes_is_unknown():
    record = {"job_id": 2, "job_state": "RUNNING", "nodes": "n[1-2]", "gres_detail": ["gpu:2(IDX:0-1)"]}
    answers = {SQUEUE: CommandResult(0, json.dumps({"jobs": [record]}))}
    j = SlurmAdapter(runner=lambda a, t: answers[tuple(a)]).job_detail("2")
    assert j.gpus_on("n1") is None  # not known: the actuator does not guess


# -- the job comment, whole (issue 22: its recover: directives hold "word=" text) -----------------


@pytest.mark.parametrize(
    "comment",
    [
        "recover:off",
        "project=llm7 recover:max_restarts=2  owner=ana",  # word=... inside, two spaces kept
        "(null)",
        "recover:off;rm -rf /",
    ],
)
def test_the_comment_is_read_whole_from_text_and_json(comment):
    want = "" if comment == "(null)" else comment
    j = text_adapter(line(comment=comment) + "\n").job_detail("2")
    assert j is not None and j.comment == want
    record = {"job_id": 2, "job_state": "RUNNING", "nodes": "n1", "comment": comment, "partition": "canary"}
    answers = {SQUEUE: CommandResult(0, json.dumps({"jobs": [record]}))}
    [info] = SlurmAdapter(runner=lambda a, t: answers[tuple(a)]).jobs()
    assert (info.comment, info.partition) == (want, "canary")


def test_a_huge_comment_is_kept_bounded():
    record = {"job_id": 2, "job_state": "RUNNING", "nodes": "n1", "comment": "recover:off " + "x" * 100_000}
    answers = {SQUEUE: CommandResult(0, json.dumps({"jobs": [record]}))}
    [info] = SlurmAdapter(runner=lambda a, t: answers[tuple(a)]).jobs()
    assert len(info.comment) == MAX_COMMENT_KEPT + 1  # longer than the engine reads: ignored whole there
