"""Rulebook reload: noticing that its files changed, and loading a new one that is valid.

A rulebook that does not load, does not validate, or that the rule engine refuses is reported
(each error logged, ``recover_rulebook_reloads_total{result="rejected"}``) and the old one kept;
the controller swaps engines only for one that passed. Rules that compile to a durable_rules
ruleset this process does not hold yet are tried in a child process (``engine_refusal``): a
second ruleset in one process crashes durable_rules 2.0.28, so the controller loads them by
restarting in place, and only once the C engine took them elsewhere.

    watch = RulebookWatch(rules, defaults, metrics, load=lambda: load_rulebook(...))
    if watch.changed(): ...
    compiled = watch.load()        # None: rejected, said in the log
    ...                            # build the engine; on failure log why, watch.rejected()
    watch.accepted(compiled)
    why = engine_refusal(ruleset_definition(compiled))   # None: durable_rules takes it
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import Callable, Sequence

from engine.live.metrics import Metrics
from engine.rulebook import CompiledRulebook, LoadResult

logger = logging.getLogger(__name__)

__all__ = ["RELOADED_ENV", "RulebookWatch", "engine_refusal", "rulebook_stamps"]

#: what the child runs: the definition comes on stdin; a refusal is one line on stderr, exit 1
_CHILD = (
    "import sys\n"
    "from engine.core.rete import ReteError, try_definition\n"
    "try:\n"
    "    try_definition(sys.stdin.read())\n"
    "except ReteError as exc:\n"
    "    sys.exit(str(exc))\n"
)
#: the longest a child may take: registering the shipped rulebook takes milliseconds, but some
#: definitions make durable_rules spin (an $or of 5,000 terms did not finish in a minute)
CHECK_TIMEOUT_S = 30.0
#: set by the CLI for the process it re-executes to load a changed rulebook (see Controller.run)
RELOADED_ENV = "RECOVER_RELOADED"


def rulebook_stamps(rules: Sequence[str], defaults: bool) -> dict[str, object]:
    """(mtime, size, inode) of every file of the rulebook (a folder's YAML files; -1.0 where one
    cannot be read): a change in any of them is a reason to reload."""
    from engine.rulebook import default_rule_files

    paths = [str(p) for p in (default_rule_files() if defaults else [])]
    for p in rules:
        if os.path.isdir(p):
            try:
                paths += [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith((".yaml", ".yml"))]
            except OSError:
                paths.append(p)
        else:
            paths.append(p)
    out: dict[str, object] = {}
    for p in paths:
        try:
            st = os.stat(p)
            out[p] = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            out[p] = -1.0
    return out


def engine_refusal(definition: str, timeout: float = CHECK_TIMEOUT_S, argv: Sequence[str] | None = None) -> str | None:
    """Why durable_rules refuses a ruleset definition (``rete.ruleset_definition``), or None when
    it takes it. It is registered in a child process, never in this one; a child that fails,
    crashes or runs past ``timeout`` is a refusal. ``argv``: the child's command line (a test seam;
    by default this Python running ``rete.try_definition`` on the same ``engine`` package)."""
    import engine

    root = os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run(
            list(argv) if argv is not None else [sys.executable, "-c", _CHILD],
            input=definition.encode(),
            capture_output=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return f"checking it did not finish within {timeout:g} s"
    except OSError as exc:
        return f"could not check it: {exc}"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"checking it crashed the checking process ({name})"
    said = [ln.strip() for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return (said[-1] if said else f"checking it failed (exit status {done.returncode})")[:500]


class RulebookWatch:
    """The rulebook's files as last loaded, and the loading of a new rulebook."""

    def __init__(
        self, rules: Sequence[str], defaults: bool, metrics: Metrics | None, load: Callable[[], LoadResult]
    ):  # metrics: None in the node agent, which serves none
        self.rules = list(rules)
        self.defaults = defaults
        self.metrics = metrics
        self._load = load
        self._stamps = rulebook_stamps(self.rules, self.defaults)
        self._seen: dict[str, object] | None = None  # the changed files' stamps at the last look

    def changed(self) -> bool:
        """True once the files differ from those last loaded and did not change since the last
        look: a file caught mid-write (an editor's truncate then write, a copy still running) is
        taken when it settles, once, not half-written and then again."""
        now = rulebook_stamps(self.rules, self.defaults)
        if now == self._stamps:
            self._seen = None
            return False
        settled, self._seen = now == self._seen, now
        return settled

    def load(self) -> CompiledRulebook | None:
        """The rulebook as its files are now, or None when it is rejected (said in the log)."""
        self._stamps, self._seen = rulebook_stamps(self.rules, self.defaults), None
        try:
            result = self._load()
        except Exception as exc:  # a loader bug must not stop the service either
            logger.error("rulebook reload rejected, keeping the current rulebook: %s", exc)
            self.rejected()
            return None
        if not result.ok:
            logger.error("rulebook reload rejected, keeping the current rulebook: %d error(s)", len(result.errors))
            for d in result.errors:
                logger.error("rulebook reload rejected: %s", d)
            self.rejected()
            return None
        return result.compiled

    def rejected(self) -> None:
        """Counted: a rulebook that was not taken (whoever refused it says why in the log)."""
        if self.metrics is not None:
            self.metrics.reloads.labels(result="rejected").inc()

    def accepted(self, compiled: CompiledRulebook) -> None:
        if self.metrics is not None:
            self.metrics.reloads.labels(result="ok").inc()
        logger.info("rulebook reloaded: %d rules, %d matchers", len(compiled.rules), len(compiled.matchers))
