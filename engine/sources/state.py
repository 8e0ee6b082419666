"""Small JSON state files of the node sources: read forgivingly, written atomically.

The agent's state (kernel-log positions, NVML samples, the GPU count) and a kernel-log source's
own position file are JSON. A state file that is missing or unreadable is a fresh start, never a
crash (``load_json``: ``None``, with a warning when it was there but broken); one that is written
is either the old content or the new one after a crash at any point (``atomic_write_json``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

__all__ = ["atomic_write_json", "load_json"]

logger = logging.getLogger(__name__)

#: the most of a state file that is read: a state file is small, a runaway one is not loaded whole
MAX_STATE_BYTES = 1 << 22


def load_json(path: str) -> Any:
    """The JSON in ``path``; ``None`` when it is missing, unreadable or not JSON (said in the log)."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read(MAX_STATE_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("%s: unreadable state (%s); starting without it", path, exc)
        return None


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to ``path`` so that a crash leaves either the old or the new content."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    payload = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    # the rename itself is durable only once the folder is synced; a folder that cannot be
    # opened (some network file systems) still has the new content in place
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
