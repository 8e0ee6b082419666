"""The files in deploy/: the systemd units' command lines are ones `recover` accepts, and the Slurm
scripts do what their comments say (with a fake nvidia-smi), feeding the real pipeline."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.main import get_command

from engine.cli import app
from engine.facts import Fact
from engine.core.replay import replay_inputs
from engine.rulebook import require_rulebook
from engine.ops.rules_inspect import explain_line
from engine.sources.spool import SpoolReader
from engine.store import Store

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCRIPTS = sorted((DEPLOY / "slurm").glob("*.sh"))


def _env_file() -> dict[str, str]:
    out = {}
    for raw in (DEPLOY / "systemd" / "recover.env.example").read_text().splitlines():
        if raw.strip() and not raw.lstrip().startswith("#"):
            key, _, value = raw.partition("=")
            out[key.strip()] = value.strip().strip('"')
    return out


def _unit(name: str) -> dict[str, list[str]]:
    """key -> values of a unit file (continuation lines joined)."""
    text = (DEPLOY / "systemd" / name).read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        if "=" in raw and not raw.lstrip().startswith(("#", "[")):
            key, _, value = raw.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def _expand(command: str, env: dict[str, str]) -> list[str]:
    """systemd's rules: ${VAR} is one argument, $VAR splits on whitespace."""
    words = []
    for word in shlex.split(command):
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            words.extend(env.get(m.group(1), "").split())
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda mm: env.get(mm.group(1), ""), word))
    return [w for w in words if w != ""]


def _parses(argv: list[str]) -> dict:
    """Parse argv (after the `recover` program) with the real CLI, without running anything."""
    cmd, i = get_command(app), 0
    while i < len(argv) and argv[i] in getattr(cmd, "commands", {}):
        cmd, i = cmd.commands[argv[i]], i + 1
    return cmd.make_context(cmd.name, argv[i:]).params


def _unit_env(unit: dict[str, list[str]]) -> dict[str, str]:
    env = {}
    for assignment in unit.get("Environment", []):
        key, _, value = assignment.partition("=")
        env[key] = value
    env.update(_env_file())  # EnvironmentFile= wins over Environment=
    return env


def test_controller_unit_runs_a_valid_command():
    unit = _unit("recover-controller.service")
    env = _unit_env(unit)
    assert unit["EnvironmentFile"] == ["-/etc/default/recover"] and unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    argv = _expand(unit["ExecStart"][0], env)
    assert argv[0].endswith("/recover") and argv[1] == "run"
    params = _parses(argv[1:])
    assert params["dry_run"] is True  # monitor mode until someone decides otherwise
    assert params["scheduler"] == "slurm" and params["spool"] == env["RECOVER_SPOOL"]
    assert params["follow"] == [env["RECOVER_FOLLOW"]] and params["rules"] == [env["RECOVER_RULES"]]
    assert params["poll"] == 2.0 and params["metrics_port"] == 9464
    check = _expand(unit["ExecStartPre"][0], env)
    assert check[1:3] == ["rules", "check"] and _parses(check[1:])["paths"] == [env["RECOVER_RULES"]]
    # acting is one edit away: an empty RECOVER_MODE
    assert _parses(_expand(unit["ExecStart"][0], {**env, "RECOVER_MODE": ""})[1:])["dry_run"] is False


def test_agent_unit_runs_a_valid_command():
    unit = _unit("recover-agent.service")
    env = _unit_env(unit)
    inner = shlex.split(unit["ExecStart"][0])
    assert inner[:2] == ["/bin/sh", "-c"]
    command = (
        inner[2]
        .replace('"${RECOVER_NODE:-$(hostname -s)}"', "gpu017")
        .replace('"${RECOVER_SPOOL}"', env["RECOVER_SPOOL"])
        .replace('"${RECOVER_RULES}"', env["RECOVER_RULES"])
    )
    argv = shlex.split(command)
    assert argv[0] == "exec" and argv[1].endswith("/recover")
    params = _parses(argv[2:])
    assert params["node"] == "gpu017" and params["kmsg"] is True and params["spool"] == env["RECOVER_SPOOL"]
    # the controller's site rulebook, and `systemctl reload` reloads it (SIGHUP), as the controller's does
    assert (
        params["rules"] == [env["RECOVER_RULES"]] == [_unit_env(_unit("recover-controller.service"))["RECOVER_RULES"]]
    )
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze(tmp_path):
    for unit in ("recover-controller.service", "recover-agent.service"):
        proc = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(DEPLOY / "systemd" / unit)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        # the binaries under /opt/recover need not exist here; anything else is a unit error
        problems = [
            ln
            for ln in proc.stderr.splitlines()
            if ln.strip()
            and "/opt/recover/venv/bin/recover" not in ln
            and "is not executable" not in ln
            and "Failed to prepare" not in ln
        ]
        assert not problems, problems


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_scripts_are_valid_sh(script):
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def _run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {"PATH": os.environ["PATH"], "RECOVER_DEFAULTS": str(tmp_path / "no-such-defaults"), **env}
    return subprocess.run(["sh", str(DEPLOY / "slurm" / script)], capture_output=True, text=True, env=full, timeout=60)


def _fake_smi(tmp_path: Path, output: str, rc: int = 0) -> str:
    smi = tmp_path / "nvidia-smi"
    (tmp_path / "smi-out").write_text(output)
    smi.write_text(f"#!/bin/sh\ncat {tmp_path / 'smi-out'}\nexit {rc}\n")
    smi.chmod(0o755)
    return str(smi)


def test_task_prolog_prints_the_context_the_matchers_read(tmp_path):
    out = _run(
        "task_prolog.sh",
        tmp_path,
        SLURM_PROCID="0",
        SLURM_JOB_ID="4242",
        SLURM_RESTART_COUNT="2",
        SLURM_JOB_NODELIST="n[1-4]",
    ).stdout.splitlines()
    assert out == ["print SLURM_JOB_ID=4242", "print SLURM_RESTART_COUNT=2", "print SLURM_JOB_NODELIST=n[1-4]"]
    compiled = require_rulebook()
    hits = [explain_line(compiled, line.removeprefix("print "), source="job")["hits"] for line in out]
    assert [[h["matcher"] for h in hs] for hs in hits] == [
        ["ctx_slurm_job_id"],
        ["ctx_slurm_restart_count"],
        ["ctx_slurm_nodelist"],
    ]
    # only the first task prints
    assert _run("task_prolog.sh", tmp_path, SLURM_PROCID="3", SLURM_JOB_ID="4242").stdout == ""


HEALTHY = "".join(f"{i}, 00000000:{0x18 + i:02X}:00.0, No, No\n" for i in range(8))


@pytest.mark.parametrize(
    "output, rc, expected_gpus, exit_code, message",
    [
        (HEALTHY, 0, "8", 0, ""),
        (HEALTHY, 0, "", 0, ""),
        ("".join(HEALTHY.splitlines(True)[:7]), 0, "8", 1, "only 7 of 8 GPUs visible"),
        (
            HEALTHY.replace("3, 00000000:1B:00.0, No, No", "3, 00000000:1B:00.0, No, Yes"),
            0,
            "8",
            1,
            "pending page retirement or row remap",
        ),
        (
            "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n",
            15,
            "8",
            1,
            "nvidia-smi failed (rc 15)",
        ),
    ],
)
def test_prolog_refuses_a_node_with_missing_or_unhealthy_gpus(tmp_path, output, rc, expected_gpus, exit_code, message):
    proc = _run(
        "prolog.sh",
        tmp_path,
        NVIDIA_SMI=_fake_smi(tmp_path, output, rc),
        RECOVER_EXPECTED_GPUS=expected_gpus,
        SLURM_JOB_ID="77",
    )
    assert proc.returncode == exit_code, proc.stderr
    assert message in proc.stderr


def test_prolog_without_nvidia_smi_passes(tmp_path):
    assert _run("prolog.sh", tmp_path, NVIDIA_SMI=str(tmp_path / "absent"), RECOVER_EXPECTED_GPUS="8").returncode == 0


def test_epilog_reports_a_lost_gpu_as_a_fact_the_rules_attribute(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    smi = _fake_smi(tmp_path, "0\n1\n2\n3\n4\n5\n6\n")
    proc = _run(
        "epilog.sh",
        tmp_path,
        NVIDIA_SMI=smi,
        RECOVER_EXPECTED_GPUS="8",
        RECOVER_SPOOL=str(spool),
        RECOVER_NODE="n3",
        SLURM_JOB_ID="4242",
    )
    assert proc.returncode == 0, proc.stderr
    lines = (spool / "n3.epilog.jsonl").read_text().splitlines()
    assert len(lines) == 1
    fact = Fact.from_json(lines[0])
    got = (fact.kind, fact.get("node"), fact.get("signal"), fact.get("visible"), fact.get("after_job"))
    assert got == ("gpu_state", "n3", "gpu_lost", 7, "4242")
    assert [f.id for f in SpoolReader(str(spool)).read()] == [fact.id]  # the controller's reader takes it
    store = Store(":memory:")
    result = replay_inputs([], require_rulebook(), store, extra_facts=[fact])
    rows = [store.incident(c.id) for c in result.incidents]
    assert [(r.fault_class, r.decision, r.nodes) for r in rows] == [
        ("gpu_fell_off_bus", "isolate_and_restart", ("n3",))
    ]
    # all GPUs there: nothing written
    (spool / "n3.epilog.jsonl").unlink()
    _run(
        "epilog.sh",
        tmp_path,
        NVIDIA_SMI=_fake_smi(tmp_path, HEALTHY),
        RECOVER_EXPECTED_GPUS="8",
        RECOVER_SPOOL=str(spool),
        RECOVER_NODE="n3",
    )
    assert not (spool / "n3.epilog.jsonl").exists()


def _spool_install_line() -> tuple[str, str, int]:
    """(owner, group, mode) of the spool folder, as docs/deploying.md tells a site to create it."""
    text = (REPO / "docs" / "deploying.md").read_text()
    m = re.search(r"install -d -o (\S+) -g (\S+) -m ([0-7]{3,4}) \S+\s+# RECOVER_SPOOL", text)
    assert m, "docs/deploying.md: no `install -d -o OWNER -g GROUP -m MODE ... # RECOVER_SPOOL` line"
    return m.group(1), m.group(2), int(m.group(3), 8)


def test_the_units_and_the_spool_folder_agree_on_who_reads_what():
    """The controller reads the spool through the folder's group: the docs' folder group is one
    the controller unit runs with, the folder lets that group in, and the agent's files are
    readable by that group and by no one else (item: agents 0600 root, controller User=slurm)."""
    import inspect
    from engine.sources.spool import SpoolWriter

    controller, agent = _unit("recover-controller.service"), _unit("recover-agent.service")
    owner, group, mode = _spool_install_line()
    groups = controller.get("Group", []) + " ".join(controller.get("SupplementaryGroups", [])).split()
    assert group in groups, (group, groups)
    assert agent["User"] == [owner] == ["root"]  # the agents write the folder as its owner
    assert mode & 0o2000 and mode & 0o050 == 0o050 and mode & 0o007 == 0  # setgid, group r-x, others nothing
    file_mode = inspect.signature(SpoolWriter).parameters["mode"].default
    assert file_mode & 0o040 and not file_mode & 0o007, oct(file_mode)
    umask = int(agent["UMask"][0], 8)
    assert not umask & 0o040  # what the agent's state files are; its spool files it sets itself


@pytest.mark.skipif(os.geteuid() != 0, reason="writes as root (the agent) and reads as the controller's account")
def test_the_controller_unit_reads_what_the_agent_unit_and_the_epilog_write(tmp_path):
    """The folder made as the docs say, the agent (root, its unit's umask) and the epilog (root,
    slurmd's umask) write; the controller unit's User/Group reads every file with SpoolReader."""
    import grp
    import pwd
    import tempfile
    from engine.sources.spool import SpoolWriter
    from tests.helpers import as_user

    controller, agent = _unit("recover-controller.service"), _unit("recover-agent.service")
    _owner, group, mode = _spool_install_line()
    try:
        uid, gid = pwd.getpwnam(controller["User"][0]).pw_uid, grp.getgrnam(controller["Group"][0]).gr_gid
    except KeyError:
        pytest.fail(f"no account {controller['User'][0]}:{controller['Group'][0]} on this machine")
    base = Path(tempfile.mkdtemp(prefix="recover-deploy-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        spool = base / "spool"
        spool.mkdir()
        os.chown(spool, 0, grp.getgrnam(group).gr_gid)
        os.chmod(spool, mode)
        umask = os.umask(int(agent["UMask"][0], 8))
        try:
            xid = Fact.make("xid", {"code": 79, "node": "n3", "pid": 1}, 1.0, "kern.log:1")
            with SpoolWriter(str(spool), "n3") as w:
                w.write([xid])
        finally:
            os.umask(umask)
        proc = _run(
            "epilog.sh",
            tmp_path,
            NVIDIA_SMI=_fake_smi(tmp_path, "0\n"),
            RECOVER_EXPECTED_GPUS="8",
            RECOVER_SPOOL=str(spool),
            RECOVER_NODE="n3",
            SLURM_JOB_ID="4242",
        )
        assert proc.returncode == 0, proc.stderr

        def controller_reads():
            reader = SpoolReader(str(spool))
            return sorted((f.kind, f.get("node")) for f in reader.read()), dict(reader.unreadable)

        facts, unreadable = as_user(uid, gid, controller_reads)
        assert unreadable == {}
        assert facts == [("gpu_state", "n3"), ("xid", "n3")]
    finally:
        shutil.rmtree(base, ignore_errors=True)
