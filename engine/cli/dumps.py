"""Flight-recorder dumps on the command line: ``recover replay`` takes them beside the logs (told
apart by content, never by name), and ``recover fr-analyze`` lists what they say, read-only.

    recover replay slurm-4242.out /scratch/fr/          # the dumps' signals join job 4242's incident
    recover fr-analyze /scratch/fr/ --json              # one JSON object per signal, no database
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import List

import typer

from engine.cli.common import JsonOpt, _err, _settings, app


@dataclass
class DumpInputs:
    logs: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)  # dump files and folders of them


def split_inputs(paths: List[str]) -> DumpInputs:
    """Which of the paths given are flight-recorder dumps (a folder: a folder of dumps), by their
    first bytes; the rest are logs, as before."""
    from engine.sources.flight_recorder import is_dump

    out = DumpInputs()
    for p in paths:
        if os.path.isdir(p) or is_dump(p):
            out.dumps.append(p)
        else:
            out.logs.append(p)
    return out


def _limits():
    from engine.sources.flight_recorder import Limits

    return Limits(max_bytes=_settings().fr_dump_max_bytes)


def read_and_analyze(paths: List[str]):
    """(dumps, signals) of the dumps at ``paths``; each refused file is said on stderr, with its
    reason, and the others are read all the same."""
    from engine.sources.flight_recorder import read_dumps
    from engine.sources.fr_analysis import analyze

    dumps, refused = read_dumps(paths, _limits())
    for r in refused:
        _err(f"refused dump {r.path}: {r.reason}")
    return dumps, analyze(dumps, unread={r.rank for r in refused if r.rank is not None})


def dump_facts(paths: List[str], job: str | None, logs: List[str], attempt: int = 0) -> list:
    """The ``rank_signal`` facts of the dumps, for the job ``--job`` names or, failing that, the
    one job the logs' names give. The dumps name no job (PyTorch writes none into them), so
    without one their signals are shown and not made facts."""
    from engine.core.linefacts import job_from_filename
    from engine.errors import FactError
    from engine.sources.fr_analysis import dumps_time, signal_facts

    dumps, signals = read_and_analyze(paths)
    if not dumps:
        _err("no flight-recorder dump could be read")
        return []
    if job is None:
        jobs = {j for p in logs for j in [job_from_filename(os.path.basename(p))] if j}
        if len(jobs) != 1:
            named = f" (the logs name {', '.join(sorted(jobs))})" if jobs else ""
            _err(f"flight-recorder dumps name no job: give --job{named}; their signals are not used")
            for s in signals:
                _err(f"  rank {s.rank} {s.signal}: {s.detail}")
            return []
        job = jobs.pop()
    at = dumps_time(dumps) or 0.0
    try:
        return signal_facts(signals, job, attempt, at)
    except FactError as exc:
        _err(f"flight-recorder dumps: {exc}")
        return []


@app.command("fr-analyze")
def fr_analyze(
    paths: List[str] = typer.Argument(..., help="Flight-recorder dump files, or folders of them (one file a rank)."),
    json_out: bool = JsonOpt,
) -> None:
    """List which ranks PyTorch flight-recorder dumps point at (read-only: no incident, no database)."""
    dumps, signals = read_and_analyze(paths)
    if json_out:
        for s in signals:
            row = {
                "rank": s.rank,
                "signal": s.signal,
                "group": s.group,
                "seq": s.seq,
                "detail": s.detail,
                "origin": s.origin,
            }
            typer.echo(json.dumps(row))
    else:
        for s in signals:
            typer.echo(f"rank {s.rank} {s.signal}: {s.detail}")
        typer.echo(f"{len(dumps)} dump(s) read, {len({s.rank for s in signals})} rank(s) named")
    if not dumps:
        raise typer.Exit(2)
