"""Where a live job's flight-recorder dumps are, and waiting for them without blocking.

A job that sets ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (or ``TORCH_FR_DUMP_TEMP_FILE``) often prints
it; each rank then writes ``<prefix><rank>`` when its watchdog times out. The printed prefix is
the job's text, so it is hostile: it is used only where its folder lies inside a folder the site
allows (``fr_dump_dirs``), reached from there one component at a time, never through a link
(``openat`` with O_NOFOLLOW), so a job cannot make Recover read ``/etc`` or another user's files.
A site may instead name the folder itself, with ``{job}`` for the job id.

    place = locate("/scratch/fr/4242/trace_", ["/scratch/fr"])     # DumpRefused if not allowed
    wait = DumpWait(place, started=now, wait_s=120)
    ...
    names = wait.poll(now)           # None: not yet; a list (maybe empty): done, read them
    dumps, refused = wait.read()     # each opened inside the folder, by name, no link followed
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from typing import Sequence

from engine.errors import DumpRefused
from engine.facts import clean_text
from engine.sources.flight_recorder import Dump, Limits, read_dump

__all__ = ["PREFIX_VARS", "printed_prefix", "Place", "locate", "site_place", "DumpWait"]

PREFIX_VARS = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")
_PRINTED = re.compile(
    r"\b(?:TORCH_NCCL_DEBUG_INFO_TEMP_FILE|TORCH_FR_DUMP_TEMP_FILE)\s*[=:]\s*['\"]?(/[^\s'\"]{0,1024})"
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NAME = re.compile(r"[\w.+-]{0,200}")


def printed_prefix(line: str) -> str | None:
    """The dump prefix a job's line sets or prints (``export TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/x/y_``,
    ``TORCH_FR_DUMP_TEMP_FILE: /x/y_``), or None."""
    m = _PRINTED.search(line)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Place:
    """A folder inside an allowed root (``parts`` below it) and the start of the dumps' names."""

    root: str
    parts: tuple[str, ...]
    start: str

    @property
    def folder(self) -> str:
        return os.path.join(self.root, *self.parts)

    def open_folder(self) -> int:
        """The folder, opened from the root one component at a time with O_NOFOLLOW: a link
        anywhere on the way is ELOOP/ENOTDIR, never followed. Raises OSError."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in self.parts:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd


def _roots(allowed: Sequence[str]) -> list[tuple[list[str], str]]:
    """(the folder as written, split; the folder with its links resolved) per allowed folder: the
    site's folders are the site's word (config), so their own links are followed, once, here."""
    return [
        ([p for p in os.path.normpath(a).split("/") if p], os.path.realpath(a))
        for a in allowed
        if a and os.path.isabs(a)
    ]


def locate(prefix: str, allowed: Sequence[str]) -> Place:
    """The place of a printed prefix, if its folder is inside one of the ``allowed`` folders;
    raises DumpRefused(prefix, reason) otherwise (relative, '..', odd names, outside)."""
    shown = clean_text(prefix, 200)
    if not prefix.startswith("/") or "\x00" in prefix:
        raise DumpRefused(shown, "a dump prefix must be an absolute path")
    folder, start = prefix.rsplit("/", 1)
    parts = [p for p in folder.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise DumpRefused(shown, "a dump prefix may not climb out with '..'")
    if not _NAME.fullmatch(start) or not all(_NAME.fullmatch(p) for p in parts):
        raise DumpRefused(shown, "a dump prefix with characters no file name needs")
    for written, real in _roots(allowed):
        for rparts in (written, [p for p in real.split("/") if p]):
            if parts[: len(rparts)] == rparts:
                return Place(real, tuple(parts[len(rparts) :]), start)
    raise DumpRefused(shown, "outside the folders the site allows for dumps (fr_dump_dirs)")


def site_place(template: str, job: str) -> Place:
    """The site's own dump folder for a job (``/scratch/fr/{job}/``, ``/scratch/fr/{job}/trace_``):
    the job id is the scheduler's, checked to be a plain name before it goes into a path."""
    if not re.fullmatch(r"[0-9A-Za-z_.-]{1,64}", job) or job in (".", ".."):
        raise DumpRefused(clean_text(job, 64), "not a job id to put in a path")
    path = template.replace("{job}", job)
    root = template.split("{job}", 1)[0].rsplit("/", 1)[0] or "/"
    return locate(path, [root])


class DumpWait:
    """One attempt's dumps, waited for a bounded time by polling (never sleeping): done when
    ``expect`` files are there, or when some are and none came for ``settle_s``, or at
    ``wait_s`` after ``started`` with whatever is there (maybe nothing)."""

    def __init__(
        self,
        place: Place,
        started: float,
        wait_s: float = 120.0,
        settle_s: float = 10.0,
        expect: int | None = None,
        limits: Limits = Limits(),
    ) -> None:
        self.place, self.started, self.wait_s, self.settle_s = place, started, wait_s, settle_s
        self.expect, self.limits = expect, limits
        self.names: list[str] = []
        self.changed = started
        self.done = False
        self.error: str | None = None

    def _list(self) -> list[str]:
        fd = self.place.open_folder()
        try:
            names = os.listdir(fd)
        finally:
            os.close(fd)
        if len(names) > self.limits.max_files:
            raise OSError(0, f"{len(names)} files, more than the bound of {self.limits.max_files}")
        start = self.place.start
        return sorted(n for n in names if n.startswith(start) and n[len(start) :].isdigit())

    def poll(self, now: float) -> list[str] | None:
        if self.done:
            return self.names
        try:
            names = self._list()
        except FileNotFoundError:
            names = []  # not made yet: the ranks may still be writing
        except OSError as exc:  # a link on the way, not a folder, unreadable: nothing to wait for
            why = exc.strerror or str(exc)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                why = "a symbolic link or a file where a folder should be (never followed)"
            self.error = f"{self.place.folder}: {why}"
            self.done = True
            self.names = []
            return self.names
        if names != self.names:
            self.names, self.changed = names, now
        enough = self.expect is not None and len(names) >= self.expect
        settled = bool(names) and now - self.changed >= self.settle_s
        if enough or settled or now - self.started >= self.wait_s:
            self.done = True
            return self.names
        return None

    def read(self) -> tuple[list[Dump], list[DumpRefused]]:
        """The dumps found, each opened by name inside the folder (no link followed), bounded."""
        dumps: list[Dump] = []
        refused: list[DumpRefused] = []
        try:
            fd = self.place.open_folder()
        except OSError as exc:
            return [], [DumpRefused(self.place.folder, f"cannot open: {exc.strerror or exc}")]
        try:
            for name in self.names:
                path = os.path.join(self.place.folder, name)
                try:
                    dumps.append(read_dump(path, self.limits, dir_fd=fd))
                except DumpRefused as exc:
                    refused.append(exc)
        finally:
            os.close(fd)
        return dumps, refused
