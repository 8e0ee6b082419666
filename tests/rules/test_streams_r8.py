"""The fallback layers on the non-job streams (helper streams8): a kernel log and a scheduler's
log have an END too (engine/core/logend.py), and rules/27-weak-r8streams.yaml and
rules/38-log-end-r8streams.yaml give them their words. Each input is replayed on the ablated view
(engine/ops/ablate.py: the specific matchers switched off), the way an unseen wording fares, as
the corpus replays a case of its stream: a kernel excerpt as a kernel log (no job), a scheduler's
as a job's output read with every matcher.

Lines with a URL are verbatim from that (train-side) source; lines marked constructed are built
from the program's own format string, whose source is named beside them. Weak evidence names no
node and never isolates one.
"""

from __future__ import annotations

import pytest

from engine.core.logend import log_end, TailState
from engine.core.replay import Input
from engine.facts import Fact
from engine.ops.ablate import ablated
from engine.ops.corpus_eval import HEALTHY, Case, evaluate
from engine.rulebook import require_rulebook

# (stream, text, expected class)
POSITIVE = [
    # --- a scheduler killed the job for its memory (host_oom's keywords)
    # https://github.com/jdblischak/smk-simple-slurm/issues/29 (seff)
    ("slurm", "State: OUT_OF_MEMORY (exit code 0)\n", "host_oom"),
    # constructed: sacct's State column, cut to 10 characters with "+" (src/sacct/print.c, the
    # field width; the state string from job_state_string in
    # https://github.com/SchedMD/slurm/blob/master/src/common/slurm_protocol_defs.c)
    ("slurm", "4242         train        gpu    OUT_OF_ME+    0:125\n", "host_oom"),
    # https://github.com/OmicsML/scMoFormer/issues/2 (LSF's job report)
    (
        "slurm",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code 130.\n",
        "host_oom",
    ),
    # https://github.com/BEFH/snakemake-executor-plugin-lsf/pull/4
    (
        "slurm",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\nExited with exit code 1.\n",
        "host_oom",
    ),
    # https://github.com/cBio/cbio-cluster/issues/251 (PBS Pro's mail)
    ("slurm", "job deleted\njob 3132467 exceeded MEM usage hard limit (2528 > 1126)\n", "host_oom"),
    # https://github.com/marbl/canu/issues/530 (Torque's kill, then its epilogue's summary)
    (
        "mixed",
        "=>> PBS: job killed: mem 38427376kb exceeded limit 33554432kb\n\n-----\nPBS Job 2130285.pbs\nCPU time  : 00:16:12\n",
        "host_oom",
    ),
    # --- a userspace OOM killer acted (host_oom)
    # https://github.com/rfjakob/earlyoom/issues/261
    (
        "mixed",
        "Oct 07 19:16:10 <hostname> earlyoom[26328]: low memory! at or below SIGTERM limits: mem  5.00%, swap 40.00%\n",
        "host_oom",
    ),
    # https://github.com/rfjakob/earlyoom/issues/354
    (
        "mixed",
        "Nov 12 17:08:27 earlyoom[1295]: low memory! at or below SIGTERM limits: mem  1.66%, swap 10.00%\n",
        "host_oom",
    ),
    # https://github.com/systemd/systemd/pull/42321
    (
        "mixed",
        "[   77.752252] systemd[1]: systemd-journald.service: systemd-oomd killed 1 process(es) in this unit.\n",
        "host_oom",
    ),
    # --- the kernel's NFS client stalls and the log ends there (storage_io_error)
    # https://github.com/csabahenk/cirros/issues/9
    ("kernel", "[ 4182.497622] nfs: server 10.0.0.2 not responding, timed out\n", "storage_io_error"),
    # https://github.com/kubernetes-sigs/nfs-ganesha-server-and-external-provisioner/issues/155
    ("kernel", "[1576939.453001] nfs: server 100.73.159.36 not responding, still trying\n", "storage_io_error"),
    # constructed: "nfs: server %s not responding, still trying" (fs/nfs/client.c,
    # https://github.com/torvalds/linux/blob/master/fs/nfs/client.c), a syslog prefix before it
    ("kernel", "Mar 10 01:33:03 gpu-7 kernel: nfs: server fs1 not responding, still trying\n", "storage_io_error"),
    # --- NVLink5's Xid words and the NVSwitch driver's SXid (nvlink_error)
    # https://github.com/leptonai/gpud/pull/1160
    (
        "kernel",
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n",
        "nvlink_error",
    ),
    # https://github.com/leptonai/gpud/pull/1174
    (
        "kernel",
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n",
        "nvlink_error",
    ),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150
    (
        "kernel",
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n",
        "nvlink_error",
    ),
    # https://github.com/leptonai/gpud/pull/338
    (
        "kernel",
        "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}\n",
        "nvlink_error",
    ),
    # --- a kernel log ends on an older class's keyword: its end is read now, as a job log's is
    # https://github.com/leptonai/gpud/blob/main/components/accelerator/nvidia/sxid/README.md is
    # SXid's; here NVRM's "fallen off the bus" (constructed from the driver's message, as
    # nvidia-bug-report logs print it: "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    ("kernel", "[ 8021.223301] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n", "gpu_fell_off_bus"),
    # --- a scheduler's bare record that the job failed (unknown)
    # constructed: slurmctld's "_job_complete: %pJ WEXITSTATUS %d" / "WTERMSIG %d"
    # (https://github.com/SchedMD/slurm/blob/master/src/slurmctld/job_mgr.c)
    (
        "slurm",
        "[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WEXITSTATUS 1\n[2022-05-27T11:37:57.377] _job_complete: JobId=127441 done\n",
        "unknown",
    ),
    (
        "slurm",
        "[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WTERMSIG 6\n[2022-05-27T11:37:57.377] _job_complete: JobId=127441 done\n",
        "unknown",
    ),
    # constructed: seff's "State: %s (exit code %d)" (https://github.com/SchedMD/slurm/blob/master/contrib/seff/seff)
    ("slurm", "Job ID: 4242\nCluster: c1\nState: FAILED (exit code 1)\n", "unknown"),
    # constructed: sacct's row, State FAILED and ExitCode exit:signal
    # (https://github.com/SchedMD/slurm/blob/master/src/sacct/print.c)
    ("slurm", "4242         train        gpu    acct          8     FAILED      1:0\n", "unknown"),
    # https://github.com/marbl/canu/issues/444 (LSF's job report, its line alone)
    (
        "slurm",
        "Job was executed on host(s) <n1>, in queue <normal>, as user <u>.\nExited with exit code 140.\n",
        "unknown",
    ),
]

NEGATIVE = [
    # constructed: a user's scancel, slurmstepd's "error: *** %s ON %s CANCELLED AT %s ***" with no
    # reason (https://github.com/SchedMD/slurm/blob/master/src/slurmd/slurmstepd/req.c), opens nothing
    ("slurm", "slurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2024-01-01T10:00:00 ***\n"),
    # https://github.com/rfjakob/earlyoom/issues/269 (earlyoom starting: its thresholds, not an act)
    (
        "mixed",
        "mars 27 18:46:05 user-G3-3779-pro earlyoom[1460]: sending SIGTERM when mem <=  4.00% and swap <= 10.00%,\nmars 27 18:46:05 user-G3-3779-pro earlyoom[1460]: mem avail: 15342 of 15881 MiB (96.61%), swap free: 4095 of 4095 MiB (100.00%)\n",
    ),
    # https://github.com/linux-surface/linux-surface/issues/1494 (the stall and the server back, in a job's output)
    (
        "app",
        "[32956.142249] nfs: server thinkcentre not responding, still trying\n[32958.266147] nfs: server thinkcentre OK\n",
    ),
    # https://cesga-docs.gitlab.io/ft3-user-guide/batch_jobs_states.html (a site's table of state names)
    ("slurm", "OOM OUT_OF_MEMORY: Job experienced out of memory error.\nState: COMPLETED (exit code 0)\n"),
    # https://github.com/leptonai/gpud/pull/1174: a Nonfatal NVLink5 Xid is a warning (the catalog's IGNORE)
    (
        "kernel",
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)\n",
    ),
    # https://www.des-testbed.net/content/outcome-node-or-network-failures (the server came back)
    (
        "kernel",
        "[  959.792370] nfs: server 192.168.16.10 not responding, still trying\n[ 1917.894851] nfs: server 192.168.16.10 OK\n",
    ),
    # constructed: exit status 0 and signal 0 are no failure (job_mgr.c's format, sacct's row)
    ("slurm", "[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WEXITSTATUS 0\n"),
    ("slurm", "4242         train        gpu    acct          8  COMPLETED      0:0\n"),
    ("slurm", "State: COMPLETED (exit code 0)\n"),
    # constructed: a driver's load line at boot, the kernel log's usual last words
    ("kernel", "[   12.000001] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver\n"),
    # constructed: CUDA's error name holds OUT_OF_MEMORY, not as Slurm's state (a word boundary);
    # a line of the job's own output, read as a job log
    ("app", "error: CUDA_ERROR_OUT_OF_MEMORY while loading the plugin, skipped\n{'loss': 0.41, 'epoch': 0.3}\n"),
]


@pytest.fixture(scope="module")
def view():
    return ablated(require_rulebook())


def _cases(rows):
    return [
        Case(f"s8-{i}", "https://example.org/s8", row[0], row[1], row[2] if len(row) > 2 else HEALTHY)
        for i, row in enumerate(rows)
    ]


def test_each_line_is_its_class_by_the_fallback_alone(view):
    results = evaluate(view, _cases(POSITIVE)).results
    wrong = [(r.case.text.strip()[:80], r.case.label, r.got) for r in results if not r.right]
    assert wrong == []
    assert all(r.isolated == () for r in results)  # weak evidence and bare exits name no node


def test_the_look_alikes_open_nothing(view):
    results = evaluate(view, _cases(NEGATIVE)).results
    assert [(r.case.text.strip()[:80], r.got) for r in results if r.got != HEALTHY] == []


def test_a_kernel_log_has_an_end_that_names_no_job():
    inp = Input("kern.log", lambda: [], "kernel")
    assert log_end(inp, TailState()) is None
    weak = Fact.make(
        "log", {"node": "n1", "weak": True, "weak_class": "storage_io_error", "keyword": "nfs"}, 1.0, "kern.log:1"
    )
    end = log_end(inp, TailState(last=weak, weak=weak))
    assert end is not None and end.get("job") is None
    assert (end.get("stream"), end.get("node"), end.get("tail"), end.get("weak_class")) == (
        "kernel",
        "n1",
        "failure",
        "storage_io_error",
    )
