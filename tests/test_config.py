"""recover.toml, environment overrides, and flags winning."""

import os

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.config import ConfigError, autonomy_overlay, load_settings
from engine.rulebook import load_rulebook


def test_file_then_env(tmp_path):
    cfg = tmp_path / "recover.toml"
    cfg.write_text(
        'db = "x.db"\nrules = ["site"]\nscheduler = "slurm"\n[autonomy]\nisolate_and_restart = "recommend"\n'
    )
    s = load_settings(str(cfg), env={})
    assert s.db == str(tmp_path / "x.db") and s.rules == [str(tmp_path / "site")] and s.scheduler == "slurm"
    s = load_settings(str(cfg), env={"RECOVER_DB": "/e.db", "RECOVER_RULES": "/a:/b", "RECOVER_SCHEDULER": "none"})
    assert (s.db, s.rules, s.scheduler) == ("/e.db", ["/a", "/b"], "none")


@pytest.mark.parametrize("text", ["nope = 1\n", 'rules = "notalist"\n', '[autonomy]\nrestart = "yolo"\n', "db = [\n"])
def test_bad_config_is_a_clear_error(tmp_path, text):
    cfg = tmp_path / "recover.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match="recover.toml"):
        load_settings(str(cfg), env={})


def test_autonomy_overlay_reaches_the_policy(tmp_path):
    cfg = tmp_path / "recover.toml"
    cfg.write_text('[autonomy]\nisolate_and_restart = "recommend"\n')
    result = load_rulebook(overlays=autonomy_overlay(load_settings(str(cfg), env={})))
    assert result.ok
    assert result.compiled.policy["autonomy"]["isolate_and_restart"] == "recommend"


def test_scope_in_the_config_reaches_the_policy_partition_by_partition(tmp_path):
    cfg = tmp_path / "recover.toml"
    cfg.write_text('[scope]\ndefault = "recommend"\npartitions = { canary = "act", "gpu.scratch" = "ignore" }\n')
    site = tmp_path / "site.yaml"
    site.write_text("policy:\n  scope: {partitions: {batch: recommend}}\n")
    result = load_rulebook([str(site)], overlays=autonomy_overlay(load_settings(str(cfg), env={})))
    assert result.ok, [str(d) for d in result.diagnostics]
    scope = result.compiled.policy.scope
    assert (scope.default, dict(scope.partitions), scope.job_comment) == (
        "recommend",
        {"batch": "recommend", "canary": "act", "gpu.scratch": "ignore"},
        True,
    )


@pytest.mark.parametrize(
    "text",
    [
        '[scope]\ndefault = "yolo"\n',
        '[scope]\npartitions = { canary = "observe" }\n',
        '[scope]\npartitions = { "a b: x" = "act" }\n',
        "[scope]\njob_comment = 1\n",
        "[scope]\nallow = []\n",
    ],
)
def test_a_bad_scope_is_a_clear_error(tmp_path, text):
    cfg = tmp_path / "recover.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match="recover.toml: .*scope"):
        load_settings(str(cfg), env={})


def test_flags_win_over_file_and_env(tmp_path):
    cfg = tmp_path / "recover.toml"
    cfg.write_text(f'db = "{tmp_path / "from-file.db"}"\n')
    log = tmp_path / "slurm-1.out"
    log.write_text(
        "2026-11-29T17:00:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    # the CLI in this process (three interpreters and rulebook loads took seconds): its
    # environment is this one's with every RECOVER_* setting removed but those given here
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECOVER_")}
    env["RECOVER_CONFIG"] = str(cfg)

    def run(*args: str) -> int:
        result = CliRunner().invoke(app, list(args), env=env)
        assert result.exit_code == 0, (result.output, result.exception)
        return result.exit_code

    assert run("replay", str(log)) == 0
    assert (tmp_path / "from-file.db").exists()
    env["RECOVER_DB"] = str(tmp_path / "from-env.db")
    assert run("replay", str(log)) == 0
    assert (tmp_path / "from-env.db").exists()
    assert run("replay", "--db", str(tmp_path / "from-flag.db"), str(log)) == 0
    assert (tmp_path / "from-flag.db").exists()


def test_a_postgresql_dsn_is_kept_as_written(tmp_path):
    """A relative db path is relative to the config file; a DSN is not a path (issue 22)."""
    cfg = tmp_path / "recover.toml"
    cfg.write_text('db = "postgresql://recover@db1.example.org:5432/recover"\n')
    assert load_settings(str(cfg), env={}).db == "postgresql://recover@db1.example.org:5432/recover"
    cfg.write_text('db = "state/recover.db"\n')
    assert load_settings(str(cfg), env={}).db == str(tmp_path / "state" / "recover.db")
