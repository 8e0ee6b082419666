"""A broad ``except Exception`` is a boundary, never a way to hide a bug: each one in engine/ and
scheduler_adapters/ logs, re-raises, or records what it caught for its one input (a quarantined line,
a failed test, a journaled action). Two modules are boundaries to foreign code that raises anything:
the durable_rules callbacks (core/rete.py) and the NVML binding (sources/nvml.py, sources/nvml_events.py)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = {"engine/core/rete.py", "engine/sources/nvml.py", "engine/sources/nvml_events.py"}
#: what handling looks like: a log, a raise, or the input's failure recorded where a person sees it
HANDLED = (
    "logger.",
    "logging.",
    "raise",
    "problems.append",
    "_err(",
    "stats[",
    "quarantine",
    "CaseResult(",
    "TestOutcome(",
    "_tx_abort(",
    "_mark_down(",
    "log_fallback(",  # engine/core/hsdb.py: logged, the matcher matched with RE2 instead
    "errors.append",
    "_internal_error(",  # the actuator: logged with its traceback, counted, the action escalated
)


def _broad_handlers():
    for path in sorted([*ROOT.glob("engine/**/*.py"), *ROOT.glob("scheduler_adapters/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and (
                node.type is None
                or (isinstance(node.type, ast.Name) and node.type.id in ("Exception", "BaseException"))
            ):
                yield rel, node


def test_every_broad_handler_logs_raises_or_records():
    silent = [
        f"{rel}:{node.lineno}"
        for rel, node in _broad_handlers()
        if rel not in FOREIGN and not any(k in ast.unparse(node) for k in HANDLED)
    ]
    assert not silent, "broad except that swallows what it caught:\n" + "\n".join(silent)


def test_no_bare_except():
    bare = [f"{rel}:{node.lineno}" for rel, node in _broad_handlers() if node.type is None]
    assert not bare
