"""A small on-disk cache of derived artefacts (compiled hyperscan databases), so that every
command starts fast.

An entry's key is a hash of everything it was derived from plus the versions of Recover, Python
and the libraries that built it (``versions()``), so a changed rulebook, library or interpreter
can never be served a stale entry: it simply looks for another key. Entries are written
atomically; one that cannot be read or loaded is rebuilt. ``RECOVER_CACHE_DIR`` names the folder
(default ``$XDG_CACHE_HOME/recover``, else ``~/.cache/recover``); ``RECOVER_CACHE_DIR=off``
turns the cache off.

An entry is unpickled (a loaded rulebook) or handed to hyperscan's loader, so whoever can write
the folder can run code as whoever reads it (the agent runs as root). The folder is created
0700, and one that is not a directory owned by this process's effective uid, or that its group
or others may write, is refused: a warning says why (once) and the cache is simply not used. An
entry file is read only when it, too, is owned by that uid and writable by no one else.

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
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["cache_dir", "versions", "code_version", "key", "get", "put"]

_LIBRARIES = ("recover", "pyyaml", "google-re2", "hyperscan", "jinja2", "durable-rules")


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    env = os.environ.get("RECOVER_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "no") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "recover"


# the folders already refused, each warned about once
_refused: set[str] = set()


def _unsafe(st: os.stat_result, what: str) -> str | None:
    """Why a cache folder (or entry) with this stat must not be trusted; None when it may be."""
    euid = os.geteuid()
    if st.st_uid != euid:
        return f"owned by uid {st.st_uid}, not by uid {euid} that reads it"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit)
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}); it must be writable by its owner only"
    kind = stat.S_ISDIR if what == "folder" else stat.S_ISREG
    if not kind(st.st_mode):
        return f"not a {'directory' if what == 'folder' else 'regular file'}"
    return None


def _refuse(d: Path, why: str) -> None:
    if str(d) not in _refused:
        _refused.add(str(d))
        logger.warning("cache %s not used: %s (run without it: slower starts, nothing else)", d, why)


def _trusted_dir(create: bool) -> Path | None:
    """The cache folder when it may be trusted (created 0700 when ``create`` and missing); None
    when the cache is off, the folder is missing, or it is refused (warned about once)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        st = os.stat(d)
    except FileNotFoundError:
        if not create:
            return None
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(d, 0o700)  # the umask can only take bits away
        except FileExistsError:
            pass  # another process made it meanwhile: checked below like any other
        except OSError as exc:  # a read-only home costs speed, nothing else
            logger.debug("cache %s: not created: %s", d, exc)
            return None
        try:
            st = os.stat(d)
        except OSError:
            return None
    except OSError as exc:
        logger.debug("cache %s: not usable: %s", d, exc)
        return None
    why = _unsafe(st, "folder")
    if why is not None:
        _refuse(d, why)
        return None
    return d


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed() -> tuple[dict[str, str], bool]:
    """({distribution: version} from the ``NAME-VERSION.dist-info`` folders on sys.path, the
    first of a name winning as for imports; whether PyYAML has its libyaml extension). The
    folder names say what importlib.metadata would, without importing it and parsing every
    METADATA file (~20 ms of each command's start)."""
    found: dict[str, str] = {}
    libyaml: bool | None = None
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                dist, _, version = n[: -len(".dist-info")].partition("-")
                found.setdefault(_normal(dist), version)
            elif n == "yaml" and libyaml is None:
                try:
                    libyaml = any(f.startswith("_yaml.") for f in os.listdir(os.path.join(entry or ".", n)))
                except OSError:
                    pass
    return found, bool(libyaml)


@functools.lru_cache(maxsize=1)
def versions() -> tuple[str, ...]:
    """What a cached artefact also depends on: Python, the machine, and each library's version."""
    out = [sys.version, platform.machine()]
    found, libyaml = _installed()
    for name in _LIBRARIES:
        version = found.get(_normal(name))
        if version is None:  # not installed as a dist-info folder: ask the slow way
            from importlib import metadata

            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "-"
        out.append(f"{name}={version}")
    out.append(f"libyaml={libyaml}")
    return tuple(out)


_ROOT = Path(__file__).resolve().parent.parent  # the folder holding engine/ and scheduler_adapters/
_CODE = ("engine", "scheduler_adapters")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of Recover's own source (~4 ms): for artefacts derived by Recover's code rather than
    by a library from given text (an analysis, a loaded rulebook), so any edit gives a new key."""
    h = hashlib.sha256()
    for top in _CODE:
        for folder, dirs, names in sorted(os.walk(_ROOT / top)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    try:
                        with open(path, "rb") as fh:
                            data = fh.read()
                    except OSError:
                        data = b"?"
                    h.update(f"{os.path.relpath(path, _ROOT)}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
                    h.update(data)
    return h.hexdigest()


def key(kind: str, *parts: Any) -> str:
    """A hex key for an artefact of ``kind`` derived from ``parts`` (repr-able values)."""
    h = hashlib.sha256()
    h.update(repr((kind, versions(), parts)).encode("utf-8", "surrogateescape"))
    return f"{kind}-{h.hexdigest()[:40]}"


#: entries kept per kind (the part of a key before its first "-"); the least recently used go
#: first. A rulebook entry is ~300 KB and every differently named rulebook (a test's temporary
#: folder) is one more; a rulebook's hyperscan databases are ~10 per source kind.
KEEP = {"rulebook": 32}
KEEP_DEFAULT = 256


def get(k: str) -> bytes | None:
    d = _trusted_dir(create=False)
    if d is None:
        return None
    try:
        fd = os.open(d / k, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        why = _unsafe(os.fstat(fh.fileno()), "entry")
        if why is not None:
            _refuse(d / k, why)
            return None
        try:
            data = fh.read()
        except OSError:
            return None
    try:
        os.utime(d / k)  # used now: the last to be pruned
    except OSError:
        pass
    return data


def _prune(d: Path, kind: str) -> None:
    """Remove the least recently used entries of ``kind`` beyond its KEEP."""
    keep = KEEP.get(kind, KEEP_DEFAULT)
    entries = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith(kind + "-"):
                    try:
                        entries.append((e.stat().st_mtime_ns, e.name))
                    except OSError:
                        continue  # removed meanwhile
    except OSError:
        return
    if len(entries) <= keep:
        return
    entries.sort()
    for _, name in entries[: len(entries) - keep]:
        try:
            os.unlink(d / name)
        except OSError:  # another process pruned it first
            pass


def put(k: str, data: bytes) -> None:
    d = _trusted_dir(create=True)
    if d is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, d / k)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(d, k.split("-", 1)[0])
    except OSError as exc:  # a read-only home or a full disk costs speed, nothing else
        logger.debug("cache %s: not written: %s", d, exc)
