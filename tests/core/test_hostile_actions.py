"""Log text is hostile: whatever a job prints, the commands Recover renders keep their shape and
carry only validated values (host names, job ids) and our own bounded reason text."""

import re

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.facts import NODE_RE
from engine.core.replay import Input, replay_inputs
from engine.rulebook import require_rulebook
from engine.store import Store

BOOK = require_rulebook()
SAFE_REASON = re.compile(r"^[A-Za-z0-9 _.:/,()#+-]*$")
KEYS = {
    "NodeName": NODE_RE,
    "JobId": re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?$"),
    "State": re.compile(r"^(DRAIN|RESUME)$"),
    "ExcNodeList": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}(,[A-Za-z0-9][A-Za-z0-9._-]{0,62})*$"),
    "Reason": SAFE_REASON,
}
HOSTILE = [
    "n1;rm -rf /",
    "n1 State=RESUME",
    "$(reboot)",
    "`id`",
    "n1\nscontrol update NodeName=n2 State=DOWN",
    "'n1'",
    '"n1"',
    "-n1",
    "--help",
    "n1|cat /etc/shadow",
    "State=RESUME",
    "n1,n2,n3",
    "ｎ１",
    "n\u200b1",
    "a" * 300,
    "n1\x00",
    "../../etc",
    "Reason=pwned",
    "n1 Reason=x",
    "%s%n",
    "\u202en1",
    "NodeName=n9",
]


def check_argv(argv):
    assert argv and argv[0] in ("scontrol", "logger", "scancel"), argv
    for a in argv:
        assert isinstance(a, str) and a.isascii() and not any(c in a for c in "\n\r\x00"), argv
    if argv[0] == "scontrol" and argv[1] == "update":
        for a in argv[2:]:
            key, _, value = a.partition("=")
            assert key in KEYS and KEYS[key].match(value), (a, argv)
    elif argv[0] == "scontrol":
        assert (
            argv[1] in ("requeue", "requeuehold", "release", "hold") and KEYS["JobId"].match(argv[2]) and len(argv) == 3
        ), argv
    elif argv[0] == "logger":
        assert argv[1:3] == ["-t", "recover"] and len(argv) == 4 and SAFE_REASON.match(argv[3].split(": ", 2)[-1]), argv


def commands_for(lines: str, filename="slurm-5150.out", kernel: str = ""):
    store = Store(":memory:")
    inputs = [Input(filename, lambda: [lines.encode("utf-8", "surrogatepass")], "any")]
    if kernel:
        inputs.append(Input("kern.log", lambda: [kernel.encode("utf-8", "surrogatepass")], "kernel"))
    result = replay_inputs(inputs, BOOK, store, job="5150", nodes=["n1", "n2"])
    return [list(p.argv) for c in result.incidents for p in c.plan]


def lines_with(host: str) -> tuple[str, str]:
    job = (
        f"SLURM_JOB_NODELIST={host}\n"
        f"{host}:4242:4299 [0] transport/net_ib.cc:1687 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12 opcode=0\n"
        f"srun: error: Node failure on {host}\n"
        f"slurmstepd: error: *** JOB 5150 ON {host} CANCELLED AT 2026-11-29T17:00:00 DUE TO NODE FAILURE ***\n"
        f"2026-11-29T17:00:00Z [rank0]: KeyError: '{host}'\n"
    )
    kern = f"Nov 29 17:00:00 {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name={host}, GPU has fallen off the bus.\n"
    return job, kern


def test_hostile_corpus_never_changes_the_commands():
    seen = 0
    for host in HOSTILE:
        job, kern = lines_with(host)
        for argv in commands_for(job, kernel=kern):
            check_argv(argv)
            seen += 1
        # what a job printed never becomes a node we act on, unless it is a plain valid host name
        for argv in commands_for(job, kernel=kern):
            for a in argv:
                if a.startswith("NodeName="):
                    assert a[9:] in ("n1", "n2") or NODE_RE.match(a[9:]) and a[9:] in host
    assert seen > 20  # the corpus did produce commands to check


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=80))
def test_random_text_in_every_field(host):
    host = host.replace("\n", " ").replace("\r", " ")
    job, kern = lines_with(host)
    for argv in commands_for(job, kernel=kern):
        check_argv(argv)
