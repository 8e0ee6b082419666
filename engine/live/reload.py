"""Rulebook reload: noticing that its files changed, and loading a new one that is valid.

A rulebook that does not load, does not validate, or that the rule engine refuses is reported
(each error logged, ``recover_rulebook_reloads_total{result="rejected"}``) and the old one kept;
the controller swaps engines only for one that passed.

    watch = RulebookWatch(rules, defaults, metrics, load=lambda: load_rulebook(...))
    if watch.changed(): ...
    compiled = watch.load()        # None: rejected, said in the log
    ...                            # build the engine; on failure log why, watch.rejected()
    watch.accepted(compiled)
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Sequence

from engine.live.metrics import Metrics
from engine.rulebook import CompiledRulebook, LoadResult

logger = logging.getLogger(__name__)

__all__ = ["RulebookWatch", "rulebook_stamps"]


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


class RulebookWatch:
    """The rulebook's files as last loaded, and the loading of a new rulebook."""

    def __init__(self, rules: Sequence[str], defaults: bool, metrics: Metrics, load: Callable[[], LoadResult]):
        self.rules = list(rules)
        self.defaults = defaults
        self.metrics = metrics
        self._load = load
        self._stamps = rulebook_stamps(self.rules, self.defaults)

    def changed(self) -> bool:
        return rulebook_stamps(self.rules, self.defaults) != self._stamps

    def load(self) -> CompiledRulebook | None:
        """The rulebook as its files are now, or None when it is rejected (said in the log)."""
        self._stamps = rulebook_stamps(self.rules, self.defaults)
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
        self.metrics.reloads.labels(result="rejected").inc()

    def accepted(self, compiled: CompiledRulebook) -> None:
        self.metrics.reloads.labels(result="ok").inc()
        logger.warning("rulebook reloaded: %d rules, %d matchers", len(compiled.rules), len(compiled.matchers))
