"""PyTorch flight-recorder dumps: read one rank's file, in either form PyTorch writes, as plain
checked values.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set and ``TORCH_NCCL_DUMP_ON_TIMEOUT`` on, each rank of a
job that times out writes the last collectives it recorded to ``<prefix><rank>`` (the prefix is
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` or ``TORCH_FR_DUMP_TEMP_FILE``). The file is a pickle of
plain values (dicts, lists, tuples, strings, numbers) or, from ``dump_json``, the same keys as
JSON (tuples become lists, the ``pg_status`` numbers strings). Its top-level keys:

* ``version``: "major.minor" of the format (1.x used ``seq_id``; 2.x ``collective_seq_id`` and
  ``p2p_seq_id``; ``pg_status`` came in 2.3 or so);
* ``pg_config``: ``{pg_name: {name, desc, ranks: "[0, 1, ...]"}}``, the groups this rank is in;
* ``pg_status``: ``{pg_id: {last_enqueued_collective, last_started_collective,
  last_completed_collective}}``;
* ``entries``: one dict per recorded operation: ``record_id``, ``pg_id``, ``process_group``
  (name, desc), ``collective_seq_id``, ``p2p_seq_id``, ``op_id``, ``profiling_name``
  ("nccl:all_reduce", "nccl:send 0->1" with group-local ranks), ``input_sizes``, ``state``
  (scheduled, started, completed), ``time_created_ns``, ``is_p2p``, ``frames``, ...

The file is the user's, so it is hostile: the pickle is loaded by an unpickler that refuses every
class (a dump holds none), the size is bounded by fstat before a byte is read, only a regular
file reached without a link is opened (never a FIFO or a device), every field used is checked
for its type and range, and anything wrong refuses that one file with a reason
(``DumpRefused``), never the others. The rank is the number the file name ends in (PyTorch
writes no rank into the dump).

    dumps, refused = read_dumps(["/scratch/fr/"])      # files or folders, sniffed by content
    signals = analyze(dumps)                           # engine.sources.fr_analysis
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from engine.core.rank_signals import MAX_RANK
from engine.errors import DumpRefused, RecoverError
from engine.facts import clean_text
from engine.sources.files import NOT_REGULAR, open_regular

__all__ = [
    "DumpRefused",
    "Limits",
    "Group",
    "Entry",
    "Dump",
    "sniff",
    "read_dump",
    "read_dumps",
    "rank_from_name",
    "PICKLE",
    "JSON",
]

PICKLE = "pickle"
JSON = "json"

#: states an entry can be in (PyTorch's words)
STATES = ("scheduled", "started", "completed")
#: the largest sequence number or id believed (int64 in PyTorch)
MAX_SEQ = (1 << 63) - 1
#: bytes looked at to tell a dump from a log
SNIFF_BYTES = 512
_NAME_LIMIT = 96  # group names, descriptions and operation names, as shown


@dataclass(frozen=True)
class Limits:
    """Bounds on one dump (settings: ``recover.toml`` ``fr_dump_max_bytes``). A dump of 2000
    entries (PyTorch's default buffer) with stack frames is a few MB."""

    max_bytes: int = 64 << 20
    max_entries: int = 1 << 16
    max_groups: int = 1 << 12
    #: files a folder may hold to be read as dumps (one a rank)
    max_files: int = 1 << 16


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]  # global ranks, sorted: a group-local rank i is ranks[i]


@dataclass(frozen=True)
class Entry:
    record_id: int
    pg_id: int
    group: str  # the process group's name, a key of the dump's ``groups``
    seq: int  # collective_seq_id (0 for a p2p operation that did not count one)
    p2p_seq: int
    op_id: int
    op: str  # the operation ("all_reduce", "send"), without the "nccl:" backend
    state: str  # one of STATES
    sizes: tuple[tuple[int, ...], ...]  # input sizes
    p2p: bool
    src: int | None = None  # group-local ranks of a send or a recv
    dst: int | None = None
    created_ns: int = 0

    @property
    def pending(self) -> bool:
        return self.state != "completed"


@dataclass
class Dump:
    path: str
    rank: int
    version: str
    form: str  # PICKLE or JSON
    groups: dict[str, Group] = field(default_factory=dict)
    #: pg_id -> (last enqueued, last started, last completed) collective sequence numbers
    status: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)


class _Bad(RecoverError):
    """A field that is not what the format says (turned into DumpRefused with the path)."""


class _ClassRefused(RecoverError, pickle.UnpicklingError):
    pass


class _NoClasses(pickle.Unpickler):
    """Builds only what the pickle opcodes build themselves (dicts, lists, tuples, strings,
    numbers): every class lookup, hence every REDUCE/BUILD/NEWOBJ and every extension code, is
    refused, and so are persistent ids."""

    def find_class(self, module: str, name: str) -> Any:
        raise _ClassRefused(f"names a class ({clean_text(module, 64)}.{clean_text(name, 64)}): a dump holds none")

    def persistent_load(self, pid: Any) -> Any:
        raise _ClassRefused("holds a persistent id: a dump holds none")


def sniff(head: bytes) -> str | None:
    """PICKLE, JSON or None, by a file's first bytes: a pickle protocol 2-5 header (no text log
    starts with byte 0x80, a UTF-8 continuation byte), or a JSON object that names the dump's keys
    near its start (``dump_json`` writes its keys sorted: entries, nccl_comm_state, pg_config,
    pg_status, version). What a pickle holds is the loader's to check, not the sniffer's."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return PICKLE
    text = head.lstrip()
    if text[:1] != b"{":
        return None
    keys = (b'"version"', b'"pg_config"', b'"pg_status"', b'"entries"', b'"nccl_comm_state"')
    return JSON if any(k in text for k in keys) else None


_TRAILING_NUMBER = re.compile(r"(\d+)$")


def rank_from_name(path: str) -> int:
    """The rank a dump is for: the number its file name ends in (``<prefix><rank>``, optionally
    with ``.json`` or ``.pkl``). Raises _Bad."""
    name = os.path.basename(path)
    for ext in (".json", ".pkl", ".pickle"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    m = _TRAILING_NUMBER.search(name)
    if not m or len(m.group(1)) > 20:
        if m:
            raise _Bad(f"rank {m.group(1)[:20]}... is out of range (at most {MAX_RANK})")
        raise _Bad("no rank: the file name does not end in the rank number (PyTorch writes <prefix><rank>)")
    rank = int(m.group(1))
    if rank > MAX_RANK:
        raise _Bad(f"rank {rank} is out of range (at most {MAX_RANK})")
    return rank


def _open_at(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """``open_regular`` of a name inside an open folder (no link, FIFO or device either)."""
    return open_regular(name, dir_fd=dir_fd)


def _read_bounded(path: str, limits: Limits, dir_fd: int | None = None) -> bytes:
    try:
        fd, st = open_regular(path) if dir_fd is None else _open_at(dir_fd, os.path.basename(path))
    except OSError as exc:
        if exc.strerror == NOT_REGULAR:
            raise _Bad("not a regular file (a FIFO, a device or a socket is never read)") from None
        if exc.errno == errno.ELOOP:
            raise _Bad("a symbolic link (a dump is read only where it is, never through a link)") from None
        raise _Bad(f"cannot open: {exc.strerror or exc}") from None
    try:
        if st.st_size > limits.max_bytes:
            raise _Bad(f"{st.st_size} bytes, more than the bound of {limits.max_bytes} (fr_dump_max_bytes)")
        chunks, total = [], 0
        while True:  # the file may still grow after fstat: never more than the bound
            data = os.read(fd, min(1 << 20, limits.max_bytes + 1 - total))
            if not data:
                break
            chunks.append(data)
            total += len(data)
            if total > limits.max_bytes:
                raise _Bad(f"grew past the bound of {limits.max_bytes} bytes while read (fr_dump_max_bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise _Bad(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _decode(data: bytes, path: str) -> tuple[str, Any]:
    form = sniff(data[:SNIFF_BYTES])
    if form is None:
        raise _Bad("not a flight-recorder dump (neither a pickle of a dict nor JSON with its keys)")
    try:
        if form == PICKLE:
            return form, _NoClasses(io.BytesIO(data)).load()
        return form, json.loads(data)
    # the one place every error is caught: whatever the bytes make a loader raise (truncation,
    # a refused class, too deep, a number too long) is a reason to refuse this file, no more
    except Exception as exc:
        what = "pickle" if form == PICKLE else "JSON"
        if isinstance(exc, _ClassRefused):
            raise _Bad(f"{what} {exc}") from None
        if isinstance(exc, EOFError) or "truncated" in str(exc):
            raise _Bad(f"{what} is truncated") from None
        raise _Bad(f"{what} cannot be read: {clean_text(str(exc) or type(exc).__name__, 160)}") from None


# -- checked fields ----------------------------------------------------------------------------


def _int(value: Any, where: str, lo: int = 0, hi: int = MAX_SEQ, text: bool = False) -> int:
    """An integer in [lo, hi]; ``text``: also its decimal string (JSON's pg_status)."""
    if text and isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{where}: expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _Bad(f"{where}: {value} is out of range [{lo}, {hi}]")
    return value


def _str(value: Any, where: str, limit: int = _NAME_LIMIT) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{where}: expected a string, got {type(value).__name__}")
    return clean_text(value, limit)


def _dict(value: Any, where: str) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _seq(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _ranks(value: Any, where: str) -> tuple[int, ...]:
    """A group's global ranks: PyTorch writes the list as a string, "[0, 1, 2]"."""
    if isinstance(value, str):
        body = value.strip()
        if not (body.startswith("[") and body.endswith("]")):
            raise _Bad(f"{where}: expected a list of ranks like '[0, 1]'")
        parts = [p.strip() for p in body[1:-1].split(",")] if body[1:-1].strip() else []
        if any(not re.fullmatch(r"\d{1,20}", p) for p in parts):
            raise _Bad(f"{where}: expected a list of ranks like '[0, 1]'")
        items: list[Any] = [int(p) for p in parts]
    else:
        items = list(_seq(value, where))
    if len(items) > MAX_RANK + 1:
        raise _Bad(f"{where}: {len(items)} ranks, more than {MAX_RANK + 1}")
    ranks = sorted({_int(r, f"{where}[{i}]", 0, MAX_RANK) for i, r in enumerate(items)})
    if len(ranks) != len(items):
        raise _Bad(f"{where}: a rank is listed twice")
    return tuple(ranks)


def _sizes(value: Any, where: str) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    out = []
    for i, dims in enumerate(_seq(value, where)[:64]):
        out.append(tuple(_int(d, f"{where}[{i}]", 0) for d in _seq(dims, f"{where}[{i}]")[:16]))
    return tuple(out)


_P2P = re.compile(r"(send|recv) (\d{1,12})(->|<-)(\d{1,12})")


def _op(name: str, where: str) -> tuple[str, int | None, int | None]:
    """("send", src, dst) from "nccl:send 0->1", ("recv", src, dst) from "nccl:recv 1<-0",
    (op, None, None) from "nccl:all_reduce" (group-local ranks)."""
    _, _, rest = name.partition(":") if ":" in name else ("", "", name)
    m = _P2P.fullmatch(rest.strip())
    if m:
        kind, a, arrow, b = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
        if (kind == "send") != (arrow == "->"):
            raise _Bad(f"{where}: {name!r} is no send a->b or recv a<-b")
        return (kind, a, b) if kind == "send" else (kind, b, a)
    if rest.startswith(("send", "recv")):
        raise _Bad(f"{where}: {name!r} is no send a->b or recv a<-b")
    return clean_text(rest.split(" ", 1)[0], _NAME_LIMIT) or "?", None, None


def _group_ref(value: Any, where: str) -> str:
    """An entry's ``process_group``: (name, desc) in a pickle, [name, desc] in JSON."""
    pair = _seq(value, where)
    if len(pair) != 2:
        raise _Bad(f"{where}: expected (name, desc)")
    _str(pair[1], f"{where}[1]")
    return _str(pair[0], f"{where}[0]")


def _entry(raw: Any, where: str, major: int, groups: Mapping[str, Group]) -> Entry:
    e = _dict(raw, where)
    name = _str(e.get("profiling_name", ""), f"{where}.profiling_name", 256)
    op, src, dst = _op(name, f"{where}.profiling_name")
    pg_id = _int(e.get("pg_id", 0), f"{where}.pg_id")
    if "process_group" in e:
        group = _group_ref(e["process_group"], f"{where}.process_group")
    else:  # 1.x named groups by id only
        group = str(pg_id)
    seq_key = "collective_seq_id" if major >= 2 else "seq_id"
    if seq_key not in e:
        raise _Bad(f"{where}: no {seq_key}")
    state = e.get("state")
    if state not in STATES:
        raise _Bad(f"{where}.state: expected one of {', '.join(STATES)}")
    p2p = e.get("is_p2p", src is not None)
    if not isinstance(p2p, bool):
        raise _Bad(f"{where}.is_p2p: expected a boolean, got {type(p2p).__name__}")
    if src is not None and group in groups:
        size = len(groups[group].ranks)
        if src >= size or dst is None or dst >= size:
            raise _Bad(f"{where}.profiling_name: {name!r} names a rank outside the group's {size}")
    created = e.get("time_created_ns", 0)
    return Entry(
        record_id=_int(e.get("record_id", 0), f"{where}.record_id"),
        pg_id=pg_id,
        group=group,
        seq=_int(e[seq_key], f"{where}.{seq_key}"),
        p2p_seq=_int(e.get("p2p_seq_id", 0), f"{where}.p2p_seq_id"),
        op_id=_int(e.get("op_id", 0), f"{where}.op_id"),
        op=op,
        state=state,
        sizes=_sizes(e.get("input_sizes"), f"{where}.input_sizes"),
        p2p=p2p or src is not None,
        src=src,
        dst=dst,
        created_ns=_int(created, f"{where}.time_created_ns") if created is not None else 0,
    )


def _parse(top: Any, path: str, rank: int, form: str, limits: Limits) -> Dump:
    d = _dict(top, "dump")
    version = d.get("version")
    if not isinstance(version, str) or not (m := re.fullmatch(r"(\d{1,3})\.(\d{1,3})", version)):
        raise _Bad("version: expected 'major.minor' (a string)")
    major = int(m.group(1))
    if major not in (1, 2):
        raise _Bad(f"version {version} is not one this reader knows (1.x, 2.x)")
    dump = Dump(path=path, rank=rank, version=version, form=form)
    config = _dict(d.get("pg_config", {}), "pg_config")
    if len(config) > limits.max_groups:
        raise _Bad(f"pg_config: {len(config)} groups, more than the bound of {limits.max_groups}")
    for key, info in config.items():
        where = f"pg_config[{clean_text(str(key), 40)!r}]"
        info = _dict(info, where)
        name = _str(info.get("name", key), f"{where}.name")
        dump.groups[name] = Group(
            name, _str(info.get("desc", ""), f"{where}.desc"), _ranks(info.get("ranks"), f"{where}.ranks")
        )
    status = _dict(d.get("pg_status", {}), "pg_status")
    if len(status) > limits.max_groups:
        raise _Bad(f"pg_status: {len(status)} groups, more than the bound of {limits.max_groups}")
    for key, st in status.items():
        where = f"pg_status[{clean_text(str(key), 40)!r}]"
        st = _dict(st, where)
        pg = _int(key, f"{where} (the pg_id)", text=True)
        dump.status[pg] = tuple(  # type: ignore[assignment]
            _int(st.get(k, -1), f"{where}.{k}", -1, text=True)
            for k in ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
        )
    entries = _seq(d.get("entries", []), "entries")  # JSON leaves the key out when there are none
    if len(entries) > limits.max_entries:
        raise _Bad(f"entries: {len(entries)}, more than the bound of {limits.max_entries}")
    dump.entries = [_entry(e, f"entries[{i}]", major, dump.groups) for i, e in enumerate(entries)]
    return dump


def read_dump(path: str, limits: Limits = Limits(), rank: int | None = None, dir_fd: int | None = None) -> Dump:
    """One rank's dump, checked; raises DumpRefused with the reason. ``rank``: the rank when the
    file name does not say it (otherwise the number the name ends in); ``dir_fd``: the folder
    ``path`` is in, already open (the file is opened by its name there: no link on the way)."""
    try:
        if rank is not None and (isinstance(rank, bool) or not 0 <= rank <= MAX_RANK):
            raise _Bad(f"rank {rank} is out of range (at most {MAX_RANK})")
        form, top = _decode(_read_bounded(path, limits, dir_fd), path)
        if rank is None:  # after the content: "not a dump" says more than "no rank in the name"
            rank = rank_from_name(path)
        return _parse(top, path, rank, form, limits)
    except _Bad as exc:
        refused = DumpRefused(path, str(exc))
    except RecursionError:
        refused = DumpRefused(path, "nested too deeply")
    try:  # the rank a refused file was for, where its name says: it wrote a dump, not none
        refused.rank = rank if rank is not None else rank_from_name(path)
    except _Bad:
        pass
    raise refused


def is_dump(path: str) -> bool:
    """Does the regular file at ``path`` start like a dump (by content, never by name)?"""
    try:
        fd, _ = open_regular(path)
    except OSError:
        return False
    try:
        return sniff(os.pread(fd, SNIFF_BYTES, 0)) is not None
    except OSError:
        return False
    finally:
        os.close(fd)


def _expand(paths: Iterable[str], limits: Limits, refused: list[DumpRefused]) -> list[str]:
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                refused.append(DumpRefused(path, f"cannot list: {exc.strerror or exc}"))
                continue
            if len(names) > limits.max_files:
                refused.append(DumpRefused(path, f"{len(names)} files, more than the bound of {limits.max_files}"))
                continue
            # a folder holds the dumps and maybe other things: only what reads as a dump is taken
            out.extend(p for n in names for p in [os.path.join(path, n)] if not os.path.isdir(p) and is_dump(p))
        else:
            out.append(path)
    return out


def read_dumps(paths: Iterable[str], limits: Limits = Limits()) -> tuple[list[Dump], list[DumpRefused]]:
    """The dumps of the files and folders given (a folder: the files in it that sniff as
    dumps), each read on its own: one refused file never stops the others. Two files for one
    rank: the second is refused."""
    refused: list[DumpRefused] = []
    dumps: dict[int, Dump] = {}
    for path in _expand(paths, limits, refused):
        try:
            dump = read_dump(path, limits)
        except DumpRefused as exc:
            refused.append(exc)
            continue
        if dump.rank in dumps:
            refused.append(
                DumpRefused(path, f"a second dump for rank {dump.rank} (the first: {dumps[dump.rank].path})")
            )
            continue
        dumps[dump.rank] = dump
    return [dumps[r] for r in sorted(dumps)], refused
