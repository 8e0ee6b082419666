"""engine.live.reload alone: a changed rulebook file is noticed; a rulebook that does not load or
does not validate is rejected (said, counted) and never handed to the controller. Then the
controller's reload in process: the same conditions swap engines; new ones are tried by
durable_rules in a child process and, if it takes them, stop the loop for a restart."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from types import SimpleNamespace

import pytest

from engine.core.rete import is_registered, ruleset_definition
from engine.live.metrics import Metrics
from engine.live.reload import RulebookWatch, engine_refusal, rulebook_stamps
from tests.helpers import fresh_rules, wait_for, with_rule


def reloads(metrics: Metrics, result: str) -> float | None:
    return metrics.registry.get_sample_value("recover_rulebook_reloads_total", {"result": result})


class Result(SimpleNamespace):
    """What load_rulebook returns, as far as the watch reads it."""


def test_an_edited_added_or_removed_rule_file_is_a_change(tmp_path):
    folder = tmp_path / "rules.d"
    folder.mkdir()
    (folder / "10-site.yaml").write_text("rules: []\n")
    single = tmp_path / "extra.yaml"
    single.write_text("lists: {}\n")
    valid = Result(ok=True, errors=[], compiled=object())
    watch = RulebookWatch([str(folder), str(single)], False, Metrics(), load=lambda: valid)
    assert not watch.changed()
    (folder / "20-more.yml").write_text("rules: []\n")
    assert not watch.changed()  # seen once: it may still be being written
    assert watch.changed()  # the same at the next look: settled
    watch.load()
    assert not watch.changed()
    (folder / "notes.txt").write_text("not a rule file\n")
    assert not watch.changed() and not watch.changed()
    single.write_text("lists: {a: [1]}\n")
    assert not watch.changed() and watch.changed()
    single.unlink()
    assert rulebook_stamps([str(single)], False) == {str(single): -1.0}


def test_a_file_still_being_written_is_taken_once_when_it_settles(tmp_path):
    """An editor's save truncates then writes; a copy grows for a while. A look that falls between
    two writes must not load the half-written file (and then the whole one a second time)."""
    rules = tmp_path / "site.yaml"
    rules.write_text("rules: []\n")
    loads = []
    watch = RulebookWatch(
        [str(rules)],
        False,
        Metrics(),
        load=lambda: loads.append(rules.read_text()) or Result(ok=True, errors=[], compiled=object()),
    )
    rules.write_text("")  # truncated: the save has begun
    assert not watch.changed()
    with open(rules, "a") as fh:  # the first half, then the rest, each seen by a look
        fh.write("rules:\n")
        fh.flush()
        assert not watch.changed()
        fh.write("  []  # whole\n")
    assert not watch.changed()
    assert watch.changed()  # unchanged since the last look: settled
    watch.load()
    assert loads == ["rules:\n  []  # whole\n"]
    assert not watch.changed() and not watch.changed()  # taken once


def test_the_shipped_files_are_watched_with_the_defaults(tmp_path):
    assert rulebook_stamps([], True) and rulebook_stamps([], False) == {}


def _raise():
    raise RuntimeError("loader bug")


@pytest.mark.parametrize(
    "load, said",
    [
        (_raise, "keeping the current rulebook: loader bug"),
        (lambda: Result(ok=False, errors=["rules.yaml:3:5: E101 unknown key"], compiled=None), "E101 unknown key"),
    ],
)
def test_a_rulebook_that_fails_is_rejected_and_said(tmp_path, caplog, load, said):
    metrics = Metrics()
    watch = RulebookWatch([], False, metrics, load=load)
    with caplog.at_level(logging.ERROR, logger="engine.live.reload"):
        assert watch.load() is None
    assert said in caplog.text
    assert reloads(metrics, "rejected") == 1 and reloads(metrics, "ok") == 0


def test_a_valid_rulebook_is_handed_over_and_counted_once_accepted(tmp_path):
    metrics = Metrics()
    compiled = SimpleNamespace(rules=[1, 2], matchers=[1])
    rules = tmp_path / "r.yaml"
    rules.write_text("rules: []\n")
    watch = RulebookWatch([str(rules)], False, metrics, load=lambda: Result(ok=True, errors=[], compiled=compiled))
    rules.write_text("rules: [] # edited\n")
    assert not watch.changed() and watch.changed()
    assert watch.load() is compiled
    assert not watch.changed()  # the files as loaded are the new reference
    assert reloads(metrics, "ok") == 0  # the controller says when the engine took it
    watch.accepted(compiled)
    assert reloads(metrics, "ok") == 1
    watch.rejected()
    assert reloads(metrics, "rejected") == 1


# -- rules that need a new durable_rules ruleset: tried in a child, loaded by a restart ----------

#: valid to Recover, refused by durable_rules ("Could not create ruleset, error code: 202")
REFUSED_RULE = """
  - id: s.never
    description: a threshold no number passes
    when: [{as: e, kind: log, where: {matcher: evt, n: {gt: .inf}}}]
    then: {symptom: {name: never}}
"""
NEW_RULE = """
  - id: s.new
    description: a new rule
    when: [{as: e, kind: log, where: {matcher: evt, n: new}}]
    then: {symptom: {name: new}}
"""


def _compiled(text: str, tmp_path):
    from engine.rulebook import load_rulebook

    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    path.write_text(text)
    result = load_rulebook([str(path)], defaults=False)
    assert result.ok, result.errors
    return result.compiled


def test_the_child_takes_a_valid_definition_and_nothing_is_registered_here(tmp_path):
    compiled = _compiled(fresh_rules(), tmp_path)
    assert engine_refusal(ruleset_definition(compiled)) is None
    assert not is_registered(compiled)


def test_the_child_says_why_durable_rules_refuses_a_definition(tmp_path):
    compiled = _compiled(with_rule(fresh_rules(), REFUSED_RULE), tmp_path)
    why = engine_refusal(ruleset_definition(compiled))
    assert why is not None and "durable_rules refused the ruleset" in why and "202" in why
    assert engine_refusal("{not json") is not None and "not a ruleset definition" in engine_refusal("{not json")


@pytest.mark.parametrize(
    "code, timeout, said",
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", 30, "crashed the checking process (SIGSEGV)"),
        ("import time; time.sleep(30)", 0.5, "did not finish within 0.5 s"),
        ("import sys; sys.exit(3)", 30, "checking it failed (exit status 3)"),
    ],
)
def test_a_child_that_crashes_hangs_or_fails_is_a_refusal(code, timeout, said):
    assert said in engine_refusal("{}", timeout=timeout, argv=[sys.executable, "-c", code])


def _controller(tmp_path, text: str):
    from engine.live.controller import Controller, ControllerConfig

    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    cfg = ControllerConfig(rules=[str(rules)], defaults=False, db=str(tmp_path / "r.db"), tick=0.05)
    return Controller(cfg, _compiled(text, tmp_path)), rules


def test_a_reload_of_the_same_conditions_swaps_engines_in_place(tmp_path):
    text = fresh_rules()
    ctl, rules = _controller(tmp_path, text)
    try:
        old = ctl.engine
        rules.write_text(text.replace("'EVT (?P<n>", "'EVENT (?P<n>") + "# edited\n")  # a matcher only
        assert ctl.reload()
        assert ctl.engine is not old and ctl.engine.network.name == old.network.name
        assert not ctl.restart_requested and not ctl.stop_event.is_set()
        assert reloads(ctl.metrics, "ok") == 1
    finally:
        ctl.store.close()


def test_rules_durable_rules_refuses_are_rejected_without_registering_them(tmp_path, caplog):
    text = fresh_rules()
    ctl, rules = _controller(tmp_path, text)
    try:
        old = ctl.engine
        rules.write_text(with_rule(text, REFUSED_RULE))
        with caplog.at_level(logging.ERROR):
            assert not ctl.reload()
        assert "the rule engine refused it (tried in a child process): durable_rules refused the ruleset" in caplog.text
        assert ctl.engine is old and not ctl.restart_requested and not ctl.stop_event.is_set()
        assert reloads(ctl.metrics, "rejected") == 1 and reloads(ctl.metrics, "ok") == 0
    finally:
        ctl.store.close()


def test_new_conditions_stop_the_loop_for_a_restart_and_never_register_here(tmp_path, caplog):
    """In process (a thread, as any embedding code would run it) the controller only stops and
    says so: re-executing the command line is the CLI's business, never the controller's."""
    from engine.live.controller import RESTART

    text = fresh_rules()
    ctl, rules = _controller(tmp_path, text)
    old = ctl.engine
    returned: list[int] = []
    runner = threading.Thread(target=lambda: returned.append(ctl.run()), daemon=True)
    with caplog.at_level(logging.INFO):
        runner.start()
        wait_for(lambda: "recover run: mode=" in caplog.text, 10, what="the loop")
        rules.write_text(with_rule(text, NEW_RULE))  # noticed by the loop's rescan (every second)
        runner.join(30)
    assert returned == [RESTART]
    assert f"rulebook changed: restarting in place to load it (pid {os.getpid()} kept)" in caplog.text
    assert "recover run: stopping" in caplog.text and "rulebook reloaded" not in caplog.text
    assert ctl.engine is old and ctl.restart_requested
    assert not is_registered(_compiled(with_rule(text, NEW_RULE), tmp_path))
    assert reloads(ctl.metrics, "ok") == 0 and reloads(ctl.metrics, "rejected") == 0  # the new process counts it
    with pytest.raises(sqlite3.ProgrammingError):
        ctl.store.db.execute("SELECT 1")  # stopped as on SIGTERM: the store is closed


def test_the_restarted_process_says_and_counts_the_reload_once_started(tmp_path, caplog):
    from engine.live.controller import Controller, ControllerConfig

    text = fresh_rules()
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    cfg = ControllerConfig(rules=[str(rules)], defaults=False, db=str(tmp_path / "r.db"), tick=0.05, reloaded=True)
    ctl = Controller(cfg, _compiled(text, tmp_path))
    runner = threading.Thread(target=ctl.run, daemon=True)
    with caplog.at_level(logging.INFO):
        runner.start()
        wait_for(lambda: "rulebook reloaded: 1 rules, 1 matchers" in caplog.text, 10, what="the reload said")
        assert reloads(ctl.metrics, "ok") == 1
        ctl.stop_event.set()
        runner.join(10)
    assert caplog.text.index("recover run: mode=") < caplog.text.index("rulebook reloaded")


def test_a_stop_signal_cancels_a_restart_still_to_come(tmp_path):
    ctl, _ = _controller(tmp_path, fresh_rules())
    try:
        ctl.restart_requested = True
        ctl.on_signal(signal.SIGHUP)
        assert ctl.restart_requested and ctl.reload_requested.is_set() and not ctl.stop_event.is_set()
        ctl.on_signal(signal.SIGTERM)
        assert not ctl.restart_requested and ctl.stop_event.is_set()
    finally:
        ctl.store.close()


#: a process that restarts in place (the CLI's own code) while a SIGTERM comes just after the
#: controller returned; its second image runs `recover run`, which must be ended by that SIGTERM
_STOP_DURING_RESTART = """
import importlib, os, signal, sys
cli = importlib.import_module("engine.cli.main")

if os.environ.get("RECOVER_RELOADED") == "1":
    print("second image", flush=True)
    sys.argv = ["recover", "run", "--dry-run", "--no-defaults"]
    cli.main()

class Stopped:
    @property
    def restart_requested(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return True

signal.signal(signal.SIGTERM, lambda *a: print("caught by the old image", flush=True))
sys.exit(cli._restart_in_place(Stopped()))
"""


def test_a_stop_during_the_exec_stays_pending_and_ends_the_new_process():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "RECOVER_RELOADED"}
    done = subprocess.run(
        [sys.executable, "-c", _STOP_DURING_RESTART], capture_output=True, text=True, cwd=root, env=env, timeout=60
    )
    assert done.stdout == "second image\n", (done.stdout, done.stderr)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr)
