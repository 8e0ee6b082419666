"""The agent spool: facts as JSON lines, one file per node, on a (usually shared) directory.

``SpoolWriter`` (agent side, in ``spool_writer``; imported here too) appends ``Fact.to_json()`` lines to ``<spool_dir>/<node>.jsonl``
with one ``os.write`` per line on an ``O_APPEND`` descriptor, rotates by size
(``<node>.jsonl`` → ``<node>.jsonl.1`` → …, ``keep`` old files) and never writes a fact whose
id is already among the last ones in the spool: it re-learns them from the tail of its own
files when it starts, so an agent restarted after ``kill -9`` that re-reads a kernel-log line
does not write its fact again.

``SpoolReader`` (controller side) reads every node's spool incrementally from offsets the
caller stores (``{"<node>.jsonl": (inode, offset, head)}``, where ``head`` is a short hash of
the file's first bytes that guards against a re-used inode number; a bare ``(inode, offset)``
is accepted too), follows rotation without losing or
repeating lines, leaves a partial last line for later, skips and counts garbage, and drops
facts whose id it has seen recently.

Who may read what: the agents run as root and the controller as another user (the units in
``deploy/systemd``: ``slurm``), so a spool file is shared through its group. The writer makes
every file it writes mode ``0640`` (whatever the umask) and gives it the group of the spool
folder; a site creates the folder with the controller's group (``install -d -m 2750 -g slurm``,
docs/deploying.md). A file or folder the reader cannot open is an error, never a silent skip:
logged at ERROR once (with its mode and owner), counted (``stats["unreadable"]``,
``recover_source_errors_total{kind="spool",reason="unreadable"}``), and the spool unhealthy
until it can be read.
"""

from __future__ import annotations
from engine.clock import SYSTEM, Clock
from engine.errors import SpoolError

import errno
import logging
import os
import re
from collections import OrderedDict
from typing import Any, Mapping

from engine.sources.files import NOT_REGULAR
from engine.sources.tail import GONE, NOT_REGULAR_FILE, OTHER, SAME, TRUNCATED, Lines, TailFile, open_failure
from engine.facts import NODE_RE, DERIVED_KINDS, Fact
from engine.sources.spool_writer import SpoolWriter

logger = logging.getLogger(__name__)

__all__ = ["SpoolWriter", "SpoolReader", "SpoolError", "NODE_RE"]

#: node names that may become a spool file name
#: a listing of the spool is reused while the folder is unchanged only if it was taken this long
#: (seconds) after the folder's last change (its mtime)
LIST_SETTLE_S = 2.0
_FILE_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127}\.jsonl)(?:\.([1-9][0-9]{0,5}))?$")


#: kinds an agent never writes: what runs where is the scheduler's to say, conclusions are the
#: rules' to draw, and a rank signal is about a job's rank, which a node's spool cannot speak for
REFUSED_KINDS = frozenset({"job", "node", "rank_signal"}) | DERIVED_KINDS
#: attributes that list nodes: a spool file may name only its own node in them
NODE_LISTS = ("failed_nodes", "nodes")


def _close_all(opened: list[tuple[TailFile, int, str]]) -> None:
    for f, _, _ in opened:
        f.close()


class SpoolReader:
    """Reads the facts of every ``<node>.jsonl`` in ``spool_dir`` since the given offsets.

    ``offsets`` maps each node's file name to ``(inode, offset, head)`` of the next byte to read
    (``(inode, offset)`` is accepted); after
    ``read()`` the ``offsets`` attribute holds where to continue (store it with the facts). Garbage
    lines are skipped and counted in ``stats``; a last line without its newline waits.
    """

    def __init__(
        self,
        spool_dir: str,
        offsets: Mapping[str, Any] | None = None,
        *,
        dedupe_window: int = 100_000,
        max_line: int = 1 << 20,
        trust_job_claims: bool = False,
        clock: Clock = SYSTEM,
    ) -> None:
        self.spool_dir = os.path.abspath(spool_dir)
        self.clock = clock
        #: the folder's stat when it was last listed, and that listing's groups: listed again only
        #: when the folder changed (see _groups)
        self._listed: tuple[tuple, dict[str, list[tuple[int, str]]]] | None = None
        self.offsets: dict[str, tuple] = {}
        for name, value in (offsets or {}).items():
            try:
                if len(value) == 2:
                    ino, off = value
                    head = None
                else:
                    ino, off, head = value
                    head = None if head is None else str(head)
                self.offsets[str(name)] = (int(ino), max(0, int(off)), head)
            except (TypeError, ValueError):
                logger.warning("spool offsets: ignoring malformed entry %r", name)
        self.window = max(1, int(dedupe_window))
        self.max_line = max(64, int(max_line))
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.stats = {
            "lines": 0,
            "facts": 0,
            "garbage": 0,
            "duplicates": 0,
            "lost_files": 0,
            "truncations": 0,
            "refused_node": 0,
            "refused_kind": 0,
            "not_regular": 0,
            "unreadable": 0,
        }
        self.trust_job_claims = trust_job_claims
        self._not_regular: set[str] = set()
        #: what cannot be read now ("." is the folder itself) -> why; said once, until it can be
        self.unreadable: dict[str, str] = {}
        #: node file -> the stat of its files (name, inode, size, mtime, ctime) taken before its
        #: last complete read: a node whose files still show it has nothing new and is not opened
        self._sigs: dict[str, tuple] = {}

    # -- listing ------------------------------------------------------------------------------
    def _groups(self) -> dict[str, list[tuple[int, str]]]:
        """The spool's files by node: listed again only when the folder's stat (inode, mtime,
        ctime) is not what it was at the last listing, which was taken at least LIST_SETTLE_S
        after the folder last changed (a file system whose times are coarse could show the same
        mtime after a change made within the same tick); at 2,048 nodes a listing and its names'
        parsing cost ~4 ms a look. A file created, removed or renamed there changes the mtime."""
        try:
            st = os.stat(self.spool_dir)
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            if self._listed is not None and self._listed[0] == key:
                return self._listed[1]
            names = os.listdir(self.spool_dir)
        except FileNotFoundError:
            self._listed = None
            return {}  # not there (yet): the controller's health check says so
        except OSError as exc:
            self._listed = None
            self._cannot_read(".", exc)
            return {}
        self._readable(".")
        for gone in [n for n in self.unreadable if n != "." and n not in names]:
            del self.unreadable[gone]  # deleted or renamed: what replaced it is judged on its own
        groups: dict[str, list[tuple[int, str]]] = {}
        for name in names:
            m = _FILE_RE.match(name)
            if not m:
                continue
            groups.setdefault(m.group(1), []).append((int(m.group(2) or 0), name))
        for files in groups.values():
            files.sort(reverse=True)  # oldest (highest number) first, the live file last
        settled = self.clock.wall() - st.st_mtime >= LIST_SETTLE_S
        self._listed = (key, groups) if settled else None
        return groups

    def _open_group(self, base: str, files: list[tuple[int, str]]) -> list[tuple[TailFile, int, str]] | None:
        """Open every file of a node (with its size now), oldest first; ``None`` when a rotation
        moved them meanwhile."""
        opened: list[tuple[TailFile, int, str]] = []
        for _, name in files:
            try:
                f = TailFile.open(os.path.join(self.spool_dir, name))
            except OSError as exc:
                why = open_failure(exc)
                if why == NOT_REGULAR_FILE:  # a FIFO, a device: never read (it would block or never end)
                    self._refuse_file(name, "a symbolic link" if exc.errno == errno.ELOOP else NOT_REGULAR)
                elif why != GONE:  # gone: rotated away since the listing, found again next time
                    self._cannot_read(name, exc)
                continue
            self._readable(name)
            try:
                opened.append((f, f.size(), name))
            except OSError:
                f.close()
        # the names must still point at what was opened, else a rotation happened in between
        if any(f.change() != SAME for f, _, _ in opened):
            _close_all(opened)
            return None
        return opened

    def _cannot_read(self, name: str, exc: OSError) -> None:
        """A spool file (or the folder, ".") this process may not read: its facts are not seen.
        An ERROR once per file (until it is readable again), with what would explain it."""
        if name in self.unreadable:
            return
        path = os.path.join(self.spool_dir, name)
        try:
            st = os.stat(path, follow_symlinks=False)
            owner = f"mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid} gid {st.st_gid}"
        except OSError:
            owner = "its mode cannot be seen"
        why = f"{exc.strerror or exc} ({owner}; this process is uid {os.geteuid()}, groups {sorted(os.getgroups())})"
        self.unreadable[name] = why
        self.stats["unreadable"] += 1
        logger.error(
            "spool %s: %s cannot be read: %s; its facts are not seen until it can be "
            "(spool files are shared through the spool folder's group: docs/deploying.md)",
            self.spool_dir,
            "the folder" if name == "." else name,
            why,
        )

    def _readable(self, name: str) -> None:
        if self.unreadable.pop(name, None) is not None:
            logger.warning("spool %s: %s can be read again", self.spool_dir, "the folder" if name == "." else name)

    def _refuse_file(self, name: str, why: str) -> None:
        self.stats["not_regular"] += 1
        if name not in self._not_regular:
            self._not_regular.add(name)
            logger.warning("spool %s: %s is %s: never read", self.spool_dir, name, why)

    def skip_to_end(self) -> None:
        """Start every node's spool at its end (after its last complete line): what a new
        database must not take for the present. Files with a saved offset are left alone."""
        for base, files in sorted(self._groups().items()):
            if base in self.offsets:
                continue
            opened = self._open_group(base, [f for f in files if f[1] == base])
            if not opened:
                continue
            f, size, _ = opened[-1]
            try:
                found, end = f.count_lines(max(0, size - self.max_line - 1), size)
                end = end if found else 0
                self.offsets[base] = (f.ino, end, f.head(end))
            except OSError:
                pass
            finally:
                _close_all(opened)

    # -- reading ------------------------------------------------------------------------------
    def read(self, max_bytes: int | None = None, changed: set[str] | None = None) -> list[Fact]:
        """New facts from every node's spool, oldest first per node. ``changed``: the file names
        inotify saw change since the last read (``spool_watch``); a node read to its end whose
        files are not named is not looked at. None: every node's files are stat-ed."""
        out: list[Fact] = []
        budget = max_bytes if max_bytes and max_bytes > 0 else None
        groups = self._groups()
        for gone in [b for b in self._sigs if b not in groups]:
            del self._sigs[gone]
        try:  # the nodes' files are looked at through the folder (no path walk per file)
            folder: int | None = os.open(self.spool_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            folder = None
        try:
            return self._read_groups(groups, folder, out, budget, changed)
        finally:
            if folder is not None:
                os.close(folder)

    def _read_groups(
        self,
        groups: dict[str, list[tuple[int, str]]],
        folder: int | None,
        out: list[Fact],
        budget: int | None,
        changed: set[str] | None = None,
    ) -> list[Fact]:
        sigs = self._sigs
        if changed is None:
            ordered = sorted(groups.items())
        else:  # the nodes an event named, and those not read to their end: not every node
            named = {m.group(1) for m in map(_FILE_RE.match, changed) if m}
            ordered = sorted((b, groups[b]) for b in (named | (groups.keys() - sigs.keys())) & groups.keys())
        for i, (base, files) in enumerate(ordered):
            sig = self._signature(files, folder)
            if sig is not None and self._sigs.get(base) == sig:
                continue  # not written, rotated, truncated or chmod-ed since it was read to its end
            self._sigs.pop(base, None)
            opened = None
            for _ in range(5):
                opened = self._open_group(base, files)
                if opened is not None:
                    break
                files = self._groups().get(base, [])
            if not opened:
                continue
            try:
                budget = self._read_group(base, opened, out, budget)
            finally:
                _close_all(opened)
            if budget is not None and budget <= 0:
                if changed is not None:  # not looked at: their events stay news
                    for later, _ in ordered[i + 1 :]:
                        sigs.pop(later, None)
                break
            if sig is not None and len(opened) == len(files):
                self._sigs[base] = sig  # read to its end as of that stat
        return out

    def _signature(self, files: list[tuple[int, str]], folder: int | None = None) -> tuple | None:
        """The stat of a node's files now (None when one cannot be looked at); ``folder``: the
        spool folder, open."""
        out = []
        for _, name in files:
            try:
                if folder is not None:
                    st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                else:
                    st = os.lstat(os.path.join(self.spool_dir, name))
            except OSError:
                return None
            out.append((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(out)

    def _read_group(
        self, base: str, opened: list[tuple[TailFile, int, str]], out: list[Fact], budget: int | None
    ) -> int | None:
        saved = self.offsets.get(base)
        start_index, start_off = 0, 0
        if saved is not None:
            for i, (f, _, _) in enumerate(opened):
                found = f.identify(saved[1], saved[2], saved[0])
                if found == TRUNCATED:
                    logger.warning("spool %s: file shorter than the saved offset; reading it from 0", base)
                    self.stats["truncations"] += 1
                    start_index, start_off = i, 0
                    break
                if found != OTHER:
                    start_index, start_off = i, saved[1]
                    break
                # another inode, or the same number re-used by a new file
            else:
                # the file we were in is gone: everything still here is newer than it
                self.stats["lost_files"] += 1
                logger.warning(
                    "spool %s: the file last read is gone (rotated out); lines written to it after the last read are lost",
                    base,
                )
        for i in range(start_index, len(opened)):
            f, _, name = opened[i]
            live = name == base and i == len(opened) - 1
            f.pos = start_off if i == start_index else 0
            off, done, budget = self._read_file(f, live, out, budget, base[: -len(".jsonl")])
            self.offsets[base] = (f.ino, off, f.head(off))
            if not done:
                break
        return budget

    def _read_file(
        self, f: TailFile, live: bool, out: list[Fact], budget: int | None, node: str = ""
    ) -> tuple[int, bool, int | None]:
        """Lines from ``f.pos``; returns (next offset, reached the end, budget left)."""
        lines = Lines(self.max_line, f.pos)
        while True:
            if budget is not None and budget <= 0 and not lines.partial:
                return lines.start, False, budget  # the budget is checked at line boundaries only
            want = 1 << 20 if budget is None else min(1 << 20, max(budget, 65536))
            try:
                data = f.read(want)
            except OSError as exc:
                logger.warning("spool: read failed: %s", exc)
                return lines.start, False, budget
            if not data:
                break
            if budget is not None:
                budget -= len(data)
            for _, raw, cut in lines.feed(data):
                self._line(raw, out, node, cut)
        if lines.partial and live:
            return lines.start, True, budget  # wait for the rest of the line
        last = lines.flush()  # a rotated file will not grow: its last line is judged now
        if last is not None:
            self._line(last[1], out, node, last[2])
        return lines.start, True, budget

    def _line(self, raw: bytes, out: list[Fact], node: str = "", cut: bool = False) -> None:
        if not raw.strip() and not cut:
            return
        self.stats["lines"] += 1
        if cut:  # longer than max_line
            self.stats["garbage"] += 1
            return
        try:
            fact = Fact.from_json(raw)
        except Exception:  # FactError, RecursionError on absurd nesting, anything garbage can cause
            self.stats["garbage"] += 1
            return
        if fact.id in self._ids:
            self.stats["duplicates"] += 1
            return
        if node:
            trusted = self._trusted(fact, node)
            if trusted is None:
                return
            fact = trusted
        self._ids[fact.id] = None
        if len(self._ids) > self.window:
            self._ids.popitem(last=False)
        self.stats["facts"] += 1
        out.append(fact)

    def _trusted(self, fact: Fact, node: str) -> Fact | None:
        """A spool file speaks for the node it is named after, and only of what an agent sees."""
        if fact.kind in REFUSED_KINDS:
            self.stats["refused_kind"] += 1
            logger.warning(
                "spool %s.jsonl: a %r fact refused (only the scheduler or the rules say that)", node, fact.kind
            )
            return None
        claimed = fact.get("node")
        # <node>.jsonl, or <node>.<writer>.jsonl (the epilog's n3.epilog.jsonl speaks for n3)
        if claimed is not None and claimed != node and not node.startswith(f"{claimed}."):
            self.stats["refused_node"] += 1
            logger.warning(
                "spool %s.jsonl: a fact about node %r refused (a spool file speaks for its own node only)",
                node,
                str(claimed)[:80],
            )
            return None
        attrs = dict(fact.attrs)
        # nor may it name other nodes in a list (slurmctld's hostlists are read from its own log,
        # never from a node's spool): what names another node is dropped, the rest kept
        for key in NODE_LISTS:
            listed = attrs.get(key)
            if listed is None:
                continue
            own = [n for n in (listed if isinstance(listed, (list, tuple)) else (listed,)) if n == node or n == claimed]
            if len(own) != (len(listed) if isinstance(listed, (list, tuple)) else 1):
                self.stats["refused_node"] += 1
                logger.warning(
                    "spool %s.jsonl: other nodes in %r dropped from a fact (a spool file speaks for its own node only)",
                    node,
                    key,
                )
                if own:
                    attrs[key] = tuple(own)
                else:
                    del attrs[key]
        if not self.trust_job_claims:  # which job ran there is the scheduler's to say (the engine asks it)
            attrs.pop("job", None)
            attrs.pop("attempt", None)
        if attrs == dict(fact.attrs):
            return fact
        return Fact.make(fact.kind, attrs, fact.at, fact.origin, id=fact.id)
