"""The open-file limit and the follower's share of it.

``raise_nofile_limit()`` raises this process's soft limit to its hard one (the shipped unit sets
``LimitNOFILE=65536``); ``default_max_open()`` is how many followed files the follower keeps open
at once: half the soft limit, at most MAX_OPEN. The rest are closed, least recently read first,
and opened again where they were read to when they change. A file read in turn with more others
than the budget (every log written once a round, as training logs are) misses every time, so
the budget should hold every followed log: 10,000 logs want a limit of 20,000 or more.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_OPEN", "MAX_OPEN", "default_max_open", "raise_nofile_limit"]

#: the follower's budget at most, however high the limit
MAX_OPEN = 1 << 16
#: the budget when the limit cannot be read
DEFAULT_OPEN = 512


def default_max_open() -> int:
    """Half the soft limit now, at least 16, at most MAX_OPEN."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return DEFAULT_OPEN
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN
    return max(16, min(MAX_OPEN, int(soft) // 2))


def raise_nofile_limit() -> None:
    """The soft open-file limit raised to the hard one (before the follower is sized on it)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError) as exc:
        logger.info("could not raise the open-file limit: %s", exc)
