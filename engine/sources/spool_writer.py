"""The agent's side of the spool: facts appended to ``<spool_dir>/<node>.jsonl``, one line each.

One ``os.write`` per line on an ``O_APPEND`` descriptor, rotation by size, and ids already
written re-learned from the tail of the node's own files at start (so an agent restarted after
``kill -9`` does not write a fact again). ``spool`` (the reader) says who may read what.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections import OrderedDict
from typing import Any, Iterable

from engine.clock import SYSTEM, Clock
from engine.errors import SpoolError
from engine.facts import NODE_RE, Fact

logger = logging.getLogger(__name__)

__all__ = ["SpoolWriter"]


def _recent_ids(paths: list[str], budget: int, window: int) -> list[str]:
    """Ids of the facts in the last ``budget`` bytes of ``paths`` (newest file first), oldest first."""
    found: list[list[str]] = []
    for path in paths:
        if budget <= 0:
            break
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                start = max(0, size - budget)
                fh.seek(start)
                data = fh.read(size - start)
        except OSError:
            continue
        budget -= len(data)
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first one is cut
        ids = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                fid = rec.get("id") if isinstance(rec, dict) else None
            except (ValueError, AttributeError):  # garbage of any shape (not JSON, not an object)
                continue
            if isinstance(fid, str) and fid:
                ids.append(fid)
        found.append(ids)
    out: list[str] = []
    for ids in reversed(found):
        out.extend(ids)
    return out[-window:]


class SpoolWriter:
    """Appends facts of one node to ``<spool_dir>/<node>.jsonl``.

    ``fsync``: ``"batch"`` (default: once per ``write`` call, before it returns), ``"line"``
    (after every line), ``"never"``, or a number of seconds (at most that long between fsyncs).
    ``max_bytes``: rotate when the next line would make the file larger; ``keep`` old files.
    ``dedupe_window``: how many recent fact ids are remembered (and re-learnt from the last
    ``tail_scan_bytes`` of the spool on start) so a fact is not written twice.
    """

    def __init__(
        self,
        spool_dir: str,
        node: str,
        *,
        fsync: str | float = "batch",
        max_bytes: int = 64 << 20,
        keep: int = 5,
        dedupe_window: int = 50_000,
        tail_scan_bytes: int = 8 << 20,
        mode: int = 0o640,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock  # an fsync every so many seconds, on its monotonic time
        if not isinstance(node, str) or not NODE_RE.match(node):
            raise SpoolError(f"node name {node!r} cannot name a spool file")
        if isinstance(fsync, str) and fsync not in ("batch", "line", "never"):
            raise SpoolError(f"fsync policy {fsync!r}: use batch, line, never or seconds")
        if not isinstance(fsync, str) and not (isinstance(fsync, (int, float)) and fsync >= 0):
            raise SpoolError(f"fsync policy {fsync!r}: use batch, line, never or seconds")
        self.spool_dir = os.path.abspath(spool_dir)
        self.node = node
        self.path = os.path.join(self.spool_dir, f"{node}.jsonl")
        self.fsync = fsync
        self.max_bytes = max(1024, int(max_bytes))
        self.keep = max(1, int(keep))
        self.window = max(1, int(dedupe_window))
        self.stats = {"written": 0, "skipped_duplicates": 0, "rotations": 0}
        self._last_sync = self.clock.monotonic()
        self._dirty = False
        self.mode = mode
        self._share_warned = False
        if not os.path.isdir(self.spool_dir):
            os.makedirs(self.spool_dir, mode=0o700 if mode & 0o077 == 0 else 0o750, exist_ok=True)
            # made here, its group is this process's: the controller reads it only if that is its group
            logger.warning(
                "%s: the spool folder did not exist and was created with group id %d; the controller reads "
                "it only when that is its group (create it with install -d -m 2750 -g GROUP, docs/deploying.md)",
                self.spool_dir,
                os.stat(self.spool_dir).st_gid,
            )
        rotated = [f"{self.path}.{i}" for i in range(1, self.keep + 1)]
        for old in rotated:  # files an older agent left 0600 are shared as well
            self._share(old)
        self._ids: OrderedDict[str, None] = OrderedDict(
            (i, None) for i in _recent_ids([self.path, *rotated], tail_scan_bytes, self.window)
        )
        self._fd = -1
        self._size = 0
        self._open()

    def _open(self) -> None:
        self._fd = os.open(
            self.path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
            self.mode,
        )
        self._share(self._fd)
        st = os.fstat(self._fd)
        self._size = st.st_size
        if self._size:
            last = self._last_byte()
            if last is not None and last != b"\n":
                # a torn line from a crash: end it so the next fact starts on its own line
                self._write_all(b"\n")
                self._size += 1
                logger.warning("%s: ended a partial last line left by a crash", self.path)

    def _share(self, target: int | str) -> None:
        """Give the file (a descriptor, or a path that may not exist) ``self.mode`` and the spool
        folder's group: how the controller, another user in that group, reads it. The umask
        (0077 under some units) and a file an older agent made 0600 are both corrected here."""
        try:
            st = os.stat(target, follow_symlinks=False) if isinstance(target, str) else os.fstat(target)
        except OSError:
            return  # no such rotated file
        try:
            if st.st_mode & 0o7777 != self.mode:
                if isinstance(target, str):
                    os.chmod(target, self.mode, follow_symlinks=False)
                else:
                    os.fchmod(target, self.mode)
            gid = os.stat(self.spool_dir).st_gid
            if st.st_gid != gid:
                if isinstance(target, str):
                    os.chown(target, -1, gid, follow_symlinks=False)
                else:
                    os.fchown(target, -1, gid)
        except (OSError, NotImplementedError) as exc:  # not root and not in the folder's group, say
            if not self._share_warned:
                self._share_warned = True
                logger.error(
                    "%s: cannot give the spool file mode %o and the spool folder's group (%s); "
                    "the controller may not be able to read it",
                    self.path,
                    self.mode,
                    exc,
                )

    def _last_byte(self) -> bytes | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            return os.pread(fd, 1, self._size - 1)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        first = True
        while view:
            try:
                n = os.write(self._fd, view)
            except InterruptedError:
                continue
            if first and n < len(view):
                logger.warning("%s: short write (%d of %d bytes); the line is not atomic", self.path, n, len(view))
            first = False
            view = view[n:]

    def _rotate(self) -> None:
        self._sync(force=True)
        os.close(self._fd)
        self._fd = -1
        for i in range(self.keep - 1, 0, -1):
            src = f"{self.path}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._sync_dir()
        self.stats["rotations"] += 1
        self._open()

    def _sync_dir(self) -> None:
        try:
            dfd = os.open(self.spool_dir, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def _sync(self, force: bool = False) -> None:
        if not self._dirty or self._fd < 0:
            return
        if not force:
            if self.fsync == "never":
                return
            if not isinstance(self.fsync, str) and self.clock.monotonic() - self._last_sync < float(self.fsync):
                return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        self._dirty = False
        self._last_sync = self.clock.monotonic()

    def seen(self, fact_id: str) -> bool:
        return fact_id in self._ids

    def write(self, facts: Iterable[Fact]) -> int:
        """Append the facts not written before; returns how many were written. The lines are on
        disk (per the fsync policy) when this returns."""
        written = 0
        for fact in facts:
            if fact.id in self._ids:
                self.stats["skipped_duplicates"] += 1
                continue
            data = (fact.to_json() + "\n").encode("utf-8")
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            self._write_all(data)
            self._size += len(data)
            self._dirty = True
            self._ids[fact.id] = None
            if len(self._ids) > self.window:
                self._ids.popitem(last=False)
            written += 1
            if self.fsync == "line":
                self._sync(force=True)
        self.stats["written"] += written
        if self.fsync != "line":
            self._sync()
        return written

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self._sync(force=self.fsync != "never")
            finally:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> "SpoolWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
