"""A generator of PyTorch flight-recorder dumps for tests: N ranks, process groups, collectives and
sends/receives recorded per rank, faults injected by leaving a rank out of an operation or giving
it another state, written in either form PyTorch writes (a pickle of plain values; JSON).

Written from the format's description (the keys each dump holds, see
engine/sources/flight_recorder.py), not from PyTorch's code.

    job = FakeJob(world=8)
    for _ in range(5):
        job.collective()                                   # seq 1..5 on pg "0", completed
    job.collective(state="scheduled", skip={7})            # rank 7 never issues seq 6
    paths = job.write(tmp_path, form="json", omit={3})     # rank 3 wrote no dump
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

PREFIX = "nccl_trace_rank_"
BASE_NS = 1_764_633_600_000_000_000


@dataclass
class _Rank:
    entries: list[dict[str, Any]] = field(default_factory=list)
    coll_seq: dict[str, int] = field(default_factory=dict)
    p2p_seq: dict[str, int] = field(default_factory=dict)
    op_id: dict[str, int] = field(default_factory=dict)
    #: pg name -> last enqueued/completed written into pg_status (None: from the entries)
    status_override: dict[str, tuple[int, int, int]] = field(default_factory=dict)


class FakeJob:
    def __init__(self, world: int, version: str = "2.5") -> None:
        self.world = world
        self.version = version
        self.versions: dict[int, str] = {}  # per-rank version, where it differs
        self.groups: dict[str, tuple[str, list[int]]] = {"0": ("default_pg", list(range(world)))}
        self.pg_ids: dict[str, int] = {"0": 0}
        self.ranks = {r: _Rank() for r in range(world)}
        self.clock = 0

    def group(self, name: str, desc: str, ranks: Iterable[int]) -> str:
        self.groups[name] = (desc, sorted(ranks))
        self.pg_ids[name] = len(self.pg_ids)
        return name

    def _entry(self, r: int, pg: str, name: str, state: str, sizes: Any, p2p: bool) -> dict[str, Any]:
        rk = self.ranks[r]
        self.clock += 1000
        rk.op_id[pg] = rk.op_id.get(pg, 0) + 1
        if p2p:
            rk.p2p_seq[pg] = rk.p2p_seq.get(pg, 0) + 1
        else:
            rk.coll_seq[pg] = rk.coll_seq.get(pg, 0) + 1
        started = BASE_NS + self.clock + 10 if state in ("started", "completed") else None
        return {
            "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
            "record_id": len(rk.entries),
            "pg_id": self.pg_ids[pg],
            "process_group": (pg, self.groups[pg][0]),
            "collective_seq_id": rk.coll_seq.get(pg, 0),
            "p2p_seq_id": rk.p2p_seq.get(pg, 0),
            "op_id": rk.op_id[pg],
            "profiling_name": f"nccl:{name}",
            "time_created_ns": BASE_NS + self.clock,
            "input_sizes": sizes,
            "input_dtypes": ["Float"] * len(sizes),
            "output_sizes": sizes,
            "output_dtypes": ["Float"] * len(sizes),
            "state": state,
            "time_discovered_started_ns": started,
            "time_discovered_completed_ns": BASE_NS + self.clock + 20 if state == "completed" else None,
            "retired": state == "completed",
            "timeout_ms": 600000,
            "is_p2p": p2p,
        }

    def collective(
        self,
        pg: str = "0",
        op: str = "all_reduce",
        state: str | Mapping[int, str] = "completed",
        skip: Iterable[int] = (),
        sizes: Any = ((3, 4),),
        other: Mapping[int, tuple[str, Any]] | None = None,
        only: Iterable[int] | None = None,
    ) -> None:
        """One collective on every member of ``pg`` but ``skip`` (or only ``only``); ``state``
        one for all or per rank; ``other``: rank -> (op, sizes) it issues instead."""
        members = self.groups[pg][1]
        skipped = set(skip)
        chosen = set(only) if only is not None else set(members)
        for r in members:
            if r in skipped or r not in chosen:
                continue
            st = state if isinstance(state, str) else state.get(r, "completed")
            name, sz = (other or {}).get(r, (op, sizes))
            self.ranks[r].entries.append(self._entry(r, pg, name, st, [list(s) for s in sz], False))

    def send(self, pg: str, src: int, dst: int, state: str = "completed", recv_state: str | None = "completed") -> None:
        """A send from global rank ``src`` to ``dst`` and its receive (``recv_state`` None: the
        receive never posted)."""
        members = self.groups[pg][1]
        ls, ld = members.index(src), members.index(dst)
        self.ranks[src].entries.append(self._entry(src, pg, f"send {ls}->{ld}", state, [[5]], True))
        if recv_state is not None:
            self.ranks[dst].entries.append(self._entry(dst, pg, f"recv {ld}<-{ls}", recv_state, [[5]], True))

    def dump(self, r: int, keep_last: int | None = None) -> dict[str, Any]:
        """Rank ``r``'s dump as PyTorch pickles it (tuples for process_group, ints in pg_status)."""
        rk = self.ranks[r]
        version = self.versions.get(r, self.version)
        entries = rk.entries[-keep_last:] if keep_last else rk.entries
        out: dict[str, Any] = {
            "version": version,
            "pg_config": {
                name: {"name": name, "desc": desc, "ranks": str(ranks)}
                for name, (desc, ranks) in self.groups.items()
                if r in ranks
            },
        }
        vt = tuple(int(x) for x in version.split("."))
        if vt >= (2, 3):
            status = {}
            for name in out["pg_config"]:
                mine = [e for e in rk.entries if e["process_group"][0] == name and not e["is_p2p"]]
                enq = max((e["collective_seq_id"] for e in mine), default=0)
                comp = max((e["collective_seq_id"] for e in mine if e["state"] == "completed"), default=0)
                got = rk.status_override.get(name, (enq, -1, comp))
                status[str(self.pg_ids[name])] = {
                    "last_enqueued_collective": got[0],
                    "last_started_collective": got[1],
                    "last_completed_collective": got[2],
                }
            out["pg_status"] = status
        out["entries"] = [dict(e) for e in entries]
        if vt < (2, 0):  # 1.x: one seq_id, groups named by id only
            for e in out["entries"]:
                e["seq_id"] = e.pop("collective_seq_id")
                del e["p2p_seq_id"], e["process_group"]
        return out

    def write(
        self,
        folder: Path,
        form: str | Mapping[int, str] = "pickle",
        omit: Iterable[int] = (),
        prefix: str = PREFIX,
        keep_last: int | None = None,
    ) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for r in range(self.world):
            if r in set(omit):
                continue
            f = form if isinstance(form, str) else form.get(r, "pickle")
            path = folder / f"{prefix}{r}"
            path.write_bytes(encode(self.dump(r, keep_last), f))
            paths.append(path)
        return paths


def as_json_form(dump: Mapping[str, Any]) -> dict[str, Any]:
    """The same dump as ``dump_json`` writes it: pg_status numbers as strings, no nulls for the
    discovery times (0), and no ``entries`` key when there are none."""
    out = json.loads(json.dumps(dump))
    for st in out.get("pg_status", {}).values():
        for k in list(st):
            st[k] = str(st[k])
    for e in out.get("entries", []):
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if e.get(k) is None:
                e[k] = 0
        e.pop("frames", None)
    if not out.get("entries"):
        out.pop("entries", None)
    return out


def encode(dump: Mapping[str, Any], form: str) -> bytes:
    if form == "json":
        return json.dumps(as_json_form(dump)).encode()
    return pickle.dumps(dict(dump), protocol=2)  # PyTorch's own pickler writes protocol 2
