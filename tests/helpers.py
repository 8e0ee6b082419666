"""What several test folders share: one ``wait_for``; a small rulebook new to this process.

wait_for(probe)                                  # the probe's truthy value, or the test fails
wait_for("the node to drain", probe, 60, 0.5)    # a description first reads better in e2e tests
wait_for(probe, timeout=2, fail=False)           # False instead of failing (a best-effort wait)

A probe that raises AssertionError means "not yet, and this is why": the wait goes on, and the
last such message is shown if it times out. A probe that sees the wait can never succeed (the
process it waits on has exited) calls ``pytest.fail``: that ends the wait at once.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest


def wait_for(
    *args: Any,
    timeout: float = 30.0,
    every: float | None = None,
    step: float | None = None,
    what: str = "condition",
    fail: bool = True,
) -> Any:
    if args and isinstance(args[0], str):
        what, args = args[0], args[1:]
    probe: Callable[[], Any] = args[0]
    if len(args) > 1:
        timeout = args[1]
    interval = args[2] if len(args) > 2 else (every if every is not None else step if step is not None else 0.05)
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except AssertionError as exc:  # a probe may assert to explain itself
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            if not fail:
                return False
            pytest.fail(f"waited {timeout:g} s for {what}; last seen: {last!r}", pytrace=False)
        time.sleep(interval)


_FRESH_RULES = """
matchers:
  - {id: evt, pattern: 'EVT (?P<n>\\w+)'}
rules:
  - id: s.evt
    description: an event line
    when: [{as: e, kind: log, where: {matcher: evt, n: TAG}}]
    then: {symptom: {name: evt}}
policy: {settle: 1s}
"""


def fresh_rules() -> str:
    """A one-rule rulebook whose durable_rules ruleset no other test registered (rulesets are
    registered process-wide, and never freed): for tests of which reloads need a new one."""
    return _FRESH_RULES.replace("TAG", uuid.uuid4().hex)


def with_rule(rulebook: str, rule: str) -> str:
    """``fresh_rules()`` with one more rule (YAML list item text) after its own."""
    return rulebook.replace("\npolicy:", "\n" + rule.strip("\n") + "\npolicy:")


def as_user(uid: int, gid: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a forked child with this uid and gid (and no other groups), its result sent
    back pickled: how a test run as root sees what another account may read. Needs root."""
    import os
    import pickle
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the account, run, report, never return into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            payload = pickle.dumps(("ok", fn()))
        except BaseException:  # anything the child hits goes back to the test as its failure
            payload = pickle.dumps(("error", traceback.format_exc()))
            code = 1
        with os.fdopen(w, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    if status != "ok":
        raise AssertionError(f"in the child as uid {uid}:\n{value}")
    return value


#: host time zones a test of dates runs under: UTC and zones east and west of it, one off the hour
HOST_ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata")


def host_zone(request: Any):
    """Body of a fixture parametrised over ``HOST_ZONES``: the process's ``TZ`` is the param for
    one test and is put back after it (``time.tzset`` both times)."""
    import os

    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    try:
        yield request.param
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


#: the packages whose modules the structural tests read (layering, module size, exception tree)
PACKAGES = ("engine", "scheduler_adapters")


def package_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> Iterator[tuple[str, Path, bool]]:
    """(dotted name, path, is a package's __init__) of every module of ``packages`` under ``root``, in
    path order."""
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts.pop()
            yield ".".join(parts), path, is_pkg


def rule_test_cases(path: Path, prefix: str, alone: Any = None) -> list[tuple[str, str, str]]:
    """(test name, text, expected class) of every input of a rule-test file's tests whose name
    starts with ``prefix``: the class its test expects for the input's job, healthy when none.
    ``alone``: a compiled pattern whose group 1, found in a test's name, overrides the class (a
    test whose whole-rulebook answer is a specific matcher's names the fallback's answer so)."""
    import yaml

    from engine.ops.corpus_eval import HEALTHY

    out = []
    for test in yaml.safe_load(path.read_text())["tests"]:
        if not test["name"].startswith(prefix):
            continue
        named = alone.search(test["name"]) if alone is not None else None
        want = {str(e["job"]): named.group(1) if named else e["fault_class"] for e in test["expect"] or []}
        for inp in test["input"]:
            job = inp["file"].removeprefix("slurm-").removesuffix(".out")
            out.append((test["name"], inp["lines"], want.get(job, HEALTHY)))
    return out


def replay_texts(view: Any, cases: list[tuple[str, str, str]], tag: str) -> Any:
    """``rule_test_cases``' inputs replayed as job-log corpus cases on a compiled rulebook (or an
    ablated view of one): the evaluation report."""
    from engine.ops.corpus_eval import Case, evaluate

    return evaluate(
        view, [Case(f"{tag}-{i}", f"https://example.org/{tag}", "app", t, w) for i, (_, t, w) in enumerate(cases)]
    )
