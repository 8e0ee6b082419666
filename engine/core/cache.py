"""A small on-disk cache of derived artefacts (compiled hyperscan databases), so that every
command starts fast.

An entry's key is a hash of everything it was derived from plus the versions of Recover, Python
and the libraries that built it (``versions()``), so a changed rulebook, library or interpreter
can never be served a stale entry: it simply looks for another key. Entries are written
atomically; one that cannot be read or loaded is rebuilt. ``RECOVER_CACHE_DIR`` names the folder
(default ``$XDG_CACHE_HOME/recover``, else ``~/.cache/recover``); ``RECOVER_CACHE_DIR=off``
turns the cache off.

Usage::

    k = cache.key("hyperscan", patterns, flags)
    data = cache.get(k)
    if data is None:
        data = build()
        cache.put(k, data)
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["cache_dir", "versions", "key", "get", "put"]

_LIBRARIES = ("recover", "pyyaml", "google-re2", "hyperscan", "jinja2", "durable-rules")


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    env = os.environ.get("RECOVER_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "no") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "recover"


@functools.lru_cache(maxsize=1)
def versions() -> tuple[str, ...]:
    """What a cached artefact also depends on: Python, the machine, and each library's version."""
    out = [sys.version, platform.machine()]
    for name in _LIBRARIES:
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=-")
    try:
        import yaml

        out.append(f"libyaml={getattr(yaml, '__with_libyaml__', False)}")
    except ImportError:  # pragma: no cover
        pass
    return tuple(out)


def key(kind: str, *parts: Any) -> str:
    """A hex key for an artefact of ``kind`` derived from ``parts`` (repr-able values)."""
    h = hashlib.sha256()
    h.update(repr((kind, versions(), parts)).encode("utf-8", "surrogateescape"))
    return f"{kind}-{h.hexdigest()[:40]}"


def get(k: str) -> bytes | None:
    d = cache_dir()
    if d is None:
        return None
    try:
        return (d / k).read_bytes()
    except OSError:
        return None


def put(k: str, data: bytes) -> None:
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, d / k)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:  # a read-only home or a full disk costs speed, nothing else
        logger.debug("cache %s: not written: %s", d, exc)
