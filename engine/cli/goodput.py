"""recover goodput: what failures cost a job. Only the analytical model (``--model``) is built;
the measured report from the incident store is not, and the command says so rather than print
figures it does not have. Exit codes as in ``engine.cli.main``: 0 ok, 2 usage or input errors."""

from __future__ import annotations

import json
import math
from typing import Optional

import typer

from engine.cli.common import JsonOpt, _err, app

__all__ = ["goodput", "parse_rate", "parse_seconds"]


def parse_seconds(text: str) -> Optional[float]:
    """'60m', '5m', '30s', '1h30m' (the rulebook's own durations) or a plain number of seconds;
    None when it is neither."""
    from engine.rulebook.schema import parse_duration

    try:
        value: object = float(text)
    except ValueError:
        value = text
    seconds = parse_duration(value)
    return seconds if seconds is not None and math.isfinite(seconds) else None


def parse_rate(text: str) -> Optional[float]:
    """Failures per node-day: '0.0065', '6.5e-3', or as papers print it, '6.5/1000'; None when
    it is not a finite number above 0."""
    num, sep, den = text.partition("/")
    try:
        value = float(num) / float(den) if sep else float(num)
    except (ValueError, ZeroDivisionError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _human(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _usage(msg: str) -> typer.Exit:
    _err(f"recover goodput: {msg}")
    return typer.Exit(2)


@app.command()
def goodput(
    model: bool = typer.Option(
        False, "--model", help="The analytical model: expected ETTR, MTTF and the best checkpoint interval."
    ),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Nodes the job runs on (N in the model)."),
    gpus: Optional[int] = typer.Option(
        None, "--gpus", help="GPUs the job runs on, instead of --nodes: nodes = GPUs / --gpus-per-node, rounded up."
    ),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="With --gpus: GPUs on each node."),
    failure_rate: Optional[str] = typer.Option(
        None, "--failure-rate", help="The site's failures per node-day: 0.0065 or 6.5/1000."
    ),
    interval: Optional[str] = typer.Option(None, "--interval", help="Checkpoint interval: 60m, 5m, 1h, 300 (s)."),
    restart: Optional[str] = typer.Option(
        None, "--restart", help="Restart overhead per failure (detect, reschedule, reload): 5m, 300 (s)."
    ),
    write: Optional[str] = typer.Option(
        None, "--write", help="Time one checkpoint write stalls training: 30s. Default 0, and said so."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """What failures cost a job. --model: the expected ETTR of Kokolis et al. (HPCA 2025)."""
    from engine.ops.goodput_model import ModelError, model as run_model

    if not model:
        raise _usage(
            "the measured report (per job, from the incident store) is not built yet; only the "
            "analytical model is: recover goodput --model --nodes N --failure-rate R --interval D --restart D [--write D]"
        )
    if nodes is not None and gpus is not None:
        raise _usage("give --nodes or --gpus, not both")
    if gpus is not None:
        if gpus <= 0 or gpus_per_node <= 0:
            raise _usage("--gpus and --gpus-per-node must be greater than 0")
        nodes = -(-gpus // gpus_per_node)
    missing = [
        flag
        for flag, value in (
            ("--nodes (or --gpus)", nodes),
            ("--failure-rate", failure_rate),
            ("--interval", interval),
            ("--restart", restart),
        )
        if value is None
    ]
    if missing:
        raise _usage(f"--model needs {', '.join(missing)}")
    assert nodes is not None and failure_rate is not None and interval is not None and restart is not None
    if nodes <= 0:
        raise _usage(f"--nodes must be greater than 0, not {nodes}")
    rate = parse_rate(failure_rate)
    if rate is None:
        raise _usage(f"--failure-rate {failure_rate!r} is not a number of failures per node-day above 0 (e.g. 0.0065)")
    durations: dict[str, float] = {}
    for flag, text in (("--interval", interval), ("--restart", restart), ("--write", write)):
        if text is None:
            continue
        seconds = parse_seconds(text)
        if seconds is None:
            raise _usage(f"{flag} {text!r} is not a duration (e.g. 60m, 5m, 30s, 1h, or seconds)")
        durations[flag] = seconds
    if durations["--interval"] <= 0:
        raise _usage("--interval must be longer than 0")
    try:
        result = run_model(nodes, rate, durations["--interval"], durations["--restart"], durations.get("--write"))
    except ModelError as exc:  # the checks above should catch every bad input first
        raise _usage(str(exc))

    if json_out:
        typer.echo(json.dumps(result.to_dict()))
        return
    job = f"{nodes} nodes" + (f" ({gpus} GPUs at {gpus_per_node} per node)" if gpus is not None else "")
    write_text = _human(result.write_s) + ("" if result.write_given else " (not given: assumed 0)")
    lines = [
        "recover goodput --model: expected ETTR, small-loss approximation of Kokolis et al. (HPCA 2025)",
        f"  job                   {job}",
        f"  failure rate          {rate:g} per node-day: {result.failures_per_day:.3g} failures a day for the job",
        f"  MTTF                  {result.mttf_hours:.3g} h   1/(N·r_f)",
        f"  checkpoint interval   {_human(result.interval_s)}",
        f"  restart overhead      {_human(result.restart_s)}",
        f"  checkpoint write      {write_text}",
        f"  lost to failures      {result.failure_loss:.1%} of the time   N·r_f·(u0 + Δt/2)",
        f"  checkpoint overhead   {result.checkpoint_overhead:.1%}   w_cp/Δt",
    ]
    if result.ettr is None:
        lines.append("  expected ETTR         none: the approximation breaks down (see below)")
    else:
        lines.append(f"  expected ETTR         {result.ettr:.3f}   (1 − N·r_f·(u0 + Δt/2)) / (1 + w_cp/Δt)")
    if result.best_interval_s is not None:
        at = "" if result.ettr_at_best_interval is None else f", ETTR {result.ettr_at_best_interval:.3f} there"
        lines.append(f"  best interval         {_human(result.best_interval_s)}   √(2·w_cp/(N·r_f)), Young/Daly{at}")
    else:
        lines.append("  best interval         not computed: Young/Daly needs --write above 0")
    lines += [f"note: {n}" for n in result.notes]
    typer.echo("\n".join(lines))
