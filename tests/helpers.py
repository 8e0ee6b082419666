"""What several test folders share: one ``wait_for``.

wait_for(probe)                                  # the probe's truthy value, or the test fails
wait_for("the node to drain", probe, 60, 0.5)    # a description first reads better in e2e tests
wait_for(probe, timeout=2, fail=False)           # False instead of failing (a best-effort wait)
"""

from __future__ import annotations

import time
from typing import Any, Callable

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
