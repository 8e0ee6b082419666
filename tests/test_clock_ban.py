"""One clock (issue 19): outside ``engine/clock.py`` no module of engine/ or scheduler_adapters/
reads the machine's time or sleeps on its own. Every such read goes through a ``Clock`` that the
controller's and the agent's configuration carry, so that a test can hand them a ``FakeClock``.

The check is on the AST, by what a name resolves to through the module's imports, so an alias
(``import time as t``, ``from time import monotonic as now``, ``from datetime import datetime``)
is caught as surely as the plain spelling, and so is a reference that is never called here
(``clock=time.time`` as a default). Converting a timestamp one already has is not reading the
clock: ``time.gmtime(t)``, ``time.strftime(fmt, tm)``, ``datetime.fromtimestamp(t)`` are allowed;
``time.gmtime()``, ``time.localtime()``, ``time.ctime()`` and ``time.strftime(fmt)``, which read
the clock themselves, are not."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import package_modules

ROOT = Path(__file__).resolve().parents[1]
CLOCK = ROOT / "engine" / "clock.py"

#: read the clock, or sleep, whether called or only referenced
FORBIDDEN = {
    f"time.{name}"
    for name in (
        "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep",
        "clock_gettime", "clock_gettime_ns", "process_time", "process_time_ns", "thread_time",
    )
} | {
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today", "datetime.date.today",
}  # fmt: skip
#: convert a given time, but read the clock when called with fewer positional arguments than this
NEEDS_ARGS = {"time.gmtime": 1, "time.localtime": 1, "time.ctime": 1, "time.asctime": 1, "time.strftime": 2}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it is bound to by the module's imports (any scope)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    out[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _resolve(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The dotted name an attribute chain on an imported name stands for, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def clock_reads(source: str, filename: str = "<module>") -> list[str]:
    """``line: what`` for every read of the machine's clock in ``source``."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if f"{node.module}.{a.name}" in FORBIDDEN:
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
        elif isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            name = _resolve(node, aliases)
            if name in FORBIDDEN:
                found.append((node.lineno, name))
        if isinstance(node, ast.Call):
            name = _resolve(node.func, aliases)
            if name in NEEDS_ARGS:
                given = [a for a in node.args if not (isinstance(a, ast.Constant) and a.value is None)]
                if len(given) < NEEDS_ARGS[name] and not node.keywords:
                    found.append((node.lineno, f"{name}() without a time"))
    return [f"{line}: {what}" for line, what in sorted(set(found))]


def offenders(root: Path) -> tuple[int, list[str]]:
    """(modules walked, ``path:line: what`` of each clock read outside ``engine/clock.py``)."""
    found: list[str] = []
    modules = 0
    for _, path, _ in package_modules(root):
        modules += 1
        if path == root / "engine" / "clock.py":
            continue
        found += [f"{path.relative_to(root)}:{hit}" for hit in clock_reads(path.read_text(encoding="utf-8"))]
    return modules, found


def test_nothing_outside_the_clock_reads_the_time():
    modules, found = offenders(ROOT)
    assert modules > 50, "the walk found too few modules to mean anything"
    assert not found, "read the time through engine.clock.Clock instead:\n" + "\n".join(found)


def test_the_walk_reports_a_forbidden_call_and_exempts_only_the_clock(tmp_path):
    (tmp_path / "engine" / "live").mkdir(parents=True)
    (tmp_path / "engine" / "clock.py").write_text("import time\n\n\ndef now():\n    return time.time()\n")
    (tmp_path / "engine" / "live" / "bad.py").write_text("from time import time as now\n\nSTARTED = now()\n")
    (tmp_path / "engine" / "live" / "good.py").write_text("import time\n\nSTAMP = time.gmtime(0)\n")
    modules, found = offenders(tmp_path)
    assert modules == 3
    assert found == ["engine/live/bad.py:1: from time import time", "engine/live/bad.py:3: time.time"], found


def test_the_clock_module_itself_is_seen_reading_the_time():
    # the exemption is for a module that does read the clock: the walker must see it doing so
    assert any("time.monotonic" in hit for hit in clock_reads(CLOCK.read_text(encoding="utf-8")))


def test_every_spelling_of_a_clock_read_is_caught(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text(
        "import time\n"
        "import time as t\n"
        "import datetime as dt\n"
        "from time import monotonic as mono, sleep\n"
        "from datetime import datetime, date\n"
        "def f(clock=time.time):\n"  # 6: a reference, never called here
        "    a = t.monotonic()\n"  # 7
        "    b = mono()\n"  # 8
        "    sleep(1)\n"  # 9
        "    c = datetime.now()\n"  # 10
        "    d = dt.datetime.utcnow()\n"  # 11
        "    e = date.today()\n"  # 12
        "    g = time.gmtime()\n"  # 13
        "    h = time.strftime('%H')\n"  # 14
        "    i = time.perf_counter()\n"  # 15
        "    j = time.clock_gettime(time.CLOCK_BOOTTIME)\n"  # 16
        "    k = time.localtime(None)\n"  # 17
    )
    hits = clock_reads(f.read_text())
    lines = {int(h.split(":")[0]) for h in hits}
    assert lines == {4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, hits


def test_converting_a_given_time_is_not_a_clock_read(tmp_path):
    f = tmp_path / "ok.py"
    f.write_text(
        "import time\n"
        "from datetime import datetime, timezone\n"
        "def f(t, clock):\n"
        "    a = time.gmtime(t)\n"
        "    b = time.strftime('%H', time.localtime(t))\n"
        "    c = datetime.fromtimestamp(t, timezone.utc)\n"
        "    d = clock.monotonic()\n"
        "    e = time.CLOCK_BOOTTIME\n"
    )
    assert clock_reads(f.read_text()) == []
