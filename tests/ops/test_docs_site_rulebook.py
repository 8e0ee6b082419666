"""The worked example of docs/site-rulebook.md, executed: its YAML is written to the files it
names and its commands run with the real `recover`, their exit status and output checked against
the doc. Marker comments in the doc say what each fenced block is:

    <!-- doctest: file PATH -->      the next block is written to PATH
    <!-- doctest: run [exit=N] -->   the next block is a console session: `$ command` lines, each
                                     followed by lines its output must contain (`...` = anything)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "site-rulebook.md"
_MARKER = re.compile(r"^<!-- doctest: (file (?P<path>\S+)|run(?: exit=(?P<exit>\d+))?) -->\s*$")


@dataclass
class Step:
    line: int  # where the block starts in the doc
    kind: str  # file | run
    body: str
    path: str | None = None
    exit: int = 0
    commands: list[tuple[str, list[str]]] = field(default_factory=list)


def parse_doc(text: str) -> list[Step]:
    lines = text.splitlines()
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        m = _MARKER.match(lines[i])
        i += 1
        if not m:
            continue
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines) or not lines[i].startswith("```"):
            raise AssertionError(f"{DOC.name}:{i}: a doctest marker must be followed by a fenced block")
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = "\n".join(lines[start:end]) + "\n"
        if m.group("path"):
            steps.append(Step(start, "file", body, path=m.group("path")))
        else:
            step = Step(start, "run", body, exit=int(m.group("exit") or 0))
            for raw in lines[start:end]:
                if raw.startswith("$ "):
                    step.commands.append((raw[2:], []))
                elif raw.strip() and step.commands:
                    step.commands[-1][1].append(raw.strip())
            steps.append(step)
        i = end + 1
    return steps


def expected_in(expected: str, output: str) -> bool:
    """Does one output line contain the expected line (``...`` matches any text)?"""
    parts = [re.escape(p.strip()) if n else re.escape(p.lstrip()) for n, p in enumerate(expected.split("..."))]
    pattern = re.compile(".*".join(p for p in parts if p) or ".*")
    return any(pattern.search(line) for line in output.splitlines())


def test_matching_rule_can_fail():
    assert expected_in("silence 1: n3 until ... (DIMM swap)", "silence 1: n3 until 2026-11-29 19:41:40 (DIMM swap)")
    assert not expected_in("silence 2: n3 until ... (DIMM swap)", "silence 1: n3 until 2026-11-29 19:41:40 (DIMM swap)")
    assert not expected_in("a...b", "b then a")
    assert expected_in("...3 passed", "x 3 passed")


def test_doc_has_the_worked_example():
    steps = parse_doc(DOC.read_text())
    files = {s.path for s in steps if s.kind == "file"}
    assert {"site/10-acme.yaml", "kern-n3.log"} <= files
    commands = " ".join(c for s in steps if s.kind == "run" for c, _ in s.commands) + " ".join(s.body for s in steps)
    for needed in (
        "recover rules check",
        "recover rules test",
        "recover rules explain-line",
        "recover rules show",
        "recover silence add --node",
        "--for 2h",
        "--reason",
        "recover rules schema",
        "recover replay",
        "--site-only",
        "--junit out.xml",
        "fault_classes:",
        "override: true\n    enabled: false",
    ):
        assert needed in commands, needed


@pytest.fixture
def shim(tmp_path) -> dict[str, str]:
    """`recover` on PATH, running this checkout with this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "recover"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m engine.cli "$@"\n')
    exe.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        COLUMNS="300",
        RECOVER_DB=str(tmp_path / "work" / "default.db"),
    )
    return env


def test_worked_example_runs_as_documented(tmp_path, shim):
    work = tmp_path / "work"
    work.mkdir()
    for step in parse_doc(DOC.read_text()):
        if step.kind == "file":
            target = work / step.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.body)
            continue
        for command, expected in step.commands:
            proc = subprocess.run(
                ["bash", "-c", command], cwd=work, env=shim, capture_output=True, text=True, timeout=300
            )
            output = proc.stdout + proc.stderr
            where = f"{DOC.name}:{step.line}: $ {command}"
            assert proc.returncode == step.exit, f"{where}\nexit {proc.returncode}, the doc says {step.exit}\n{output}"
            assert "Traceback" not in output, f"{where}\n{output}"
            for line in expected:
                assert expected_in(line, output), f"{where}\nexpected a line like: {line}\ngot:\n{output}"
    # the JUnit file CI reads: every site test, the superseding one, none failed, the disabled one skipped
    import xml.etree.ElementTree as ET

    suite = ET.parse(work / "out.xml").getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert suite.get("failures") == "0" and suite.get("skipped") == "1"
    assert "acme - an IB link flap, then the NCCL errors it causes, is the flap" in cases
    assert cases["Xid 63 alone (a row remap recorded) does not isolate"].get("file") == "site/10-acme.yaml"
    assert cases["NVLink CRC errors at 100/s or more isolate"].find("skipped") is not None
    # the schema the modeline points at was written where the modeline says
    modeline = (work / "site" / "10-acme.yaml").read_text().splitlines()[0]
    target = modeline.split("$schema=", 1)[1]
    assert (work / "site" / target).resolve().is_file()
