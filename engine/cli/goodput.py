"""recover goodput: what failures cost. Without ``--model``, the measured report from the incident
store (``engine.ops.goodput``); with it, the analytical model (``engine.ops.goodput_model``).
docs/goodput.md defines every figure. Exit codes as in ``engine.cli.main``: 0 ok, 2 usage or
input errors."""

from __future__ import annotations

import json
import math
from typing import List, Optional

import typer

from engine.clock import SYSTEM
from engine.cli.common import DbOpt, JsonOpt, _err, _open_store, _settings, _since, app

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
    gpus_per_node: Optional[int] = typer.Option(
        None,
        "--gpus-per-node",
        help="GPUs on each node: for the report's GPU-hours (default: recover.toml's gpus_per_node, else 8), "
        "and with --model --gpus.",
    ),
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
    since: Optional[str] = typer.Option(
        None, "--since", help="Report from: a date (2026-11-01), epoch seconds, or a span back from now (7d, 12h)."
    ),
    until: Optional[str] = typer.Option(None, "--until", help="Report up to: the same forms as --since."),
    job: Optional[str] = typer.Option(None, "--job", help="Only this job id."),
    what_if: bool = typer.Option(
        False,
        "--what-if",
        help="Re-decide the stored incidents under --rules and/or --policy: GPU-hours saved or cost.",
    ),
    rules: Optional[List[str]] = typer.Option(
        None, "--rules", "-r", help="With --what-if: the candidate's site rulebook files or folders (repeatable)."
    ),
    policy: Optional[List[str]] = typer.Option(
        None, "--policy", help="With --what-if: a policy key of the candidate, KEY=VALUE (settle=30s; repeatable)."
    ),
    html: Optional[str] = typer.Option(None, "--html", help="Also write the report as a self-contained HTML page."),
    scheduler: Optional[str] = typer.Option(
        None,
        "--scheduler",
        help="Whose accounting to read the job states from (sacct): slurm | none "
        "(default: the settings' scheduler, else none: the states the controller recorded).",
    ),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """What failures cost: ETTR and lost GPU-hours per job attempt and for the cluster, from the
    store. --model: the expected ETTR of Kokolis et al. (HPCA 2025)."""
    if not model:
        given = [
            f
            for f, v in (
                ("--nodes", nodes),
                ("--gpus", gpus),
                ("--failure-rate", failure_rate),
                ("--interval", interval),
                ("--restart", restart),
                ("--write", write),
            )
            if v is not None
        ]
        if given:
            raise _usage(f"{', '.join(given)}: only with --model")
        if not what_if and (rules or policy):
            raise _usage("--rules and --policy: only with --what-if")
        if what_if and not (rules or policy):
            raise _usage("--what-if needs a candidate: --rules FILE_OR_FOLDER and/or --policy KEY=VALUE")
        if what_if and html:
            raise _usage("--html: for the report, not --what-if")
        _measured(
            since,
            until,
            job,
            db,
            gpus_per_node,
            json_out,
            html,
            (rules or [], policy or []) if what_if else None,
            scheduler,
        )
        return
    given = [
        f
        for f, v in (
            ("--since", since),
            ("--until", until),
            ("--job", job),
            ("--db", db),
            ("--html", html),
            ("--scheduler", scheduler),
        )
        if v is not None
    ]
    if what_if or rules or policy:
        given.append("--what-if, --rules, --policy")
    if given:
        raise _usage(f"{', '.join(given)}: for the measured report, not --model")
    _model(
        nodes, gpus, gpus_per_node if gpus_per_node is not None else 8, failure_rate, interval, restart, write, json_out
    )


def _measured(
    since: Optional[str],
    until: Optional[str],
    job: Optional[str],
    db: Optional[str],
    gpus_per_node: Optional[int],
    json_out: bool,
    html: Optional[str] = None,
    what_if: Optional[tuple[List[str], List[str]]] = None,
    scheduler: Optional[str] = None,
) -> None:
    """The measured report: every figure from the store (engine.ops.goodput), the job states from
    the scheduler's accounting where it has them; with ``what_if`` (candidate rule paths, policy
    pairs), what the candidate would have changed."""

    from engine.ops.goodput import DEFAULT_GPUS_PER_NODE, report_from_store
    from engine.ops.goodput_text import render_text

    if gpus_per_node is not None:
        k, source = gpus_per_node, "--gpus-per-node"
    elif _settings().gpus_per_node is not None:
        k, source = int(_settings().gpus_per_node), "gpus_per_node in the settings"
    else:
        k, source = DEFAULT_GPUS_PER_NODE, "the default: give --gpus-per-node or gpus_per_node in recover.toml"
    if k <= 0:
        raise _usage("--gpus-per-node must be greater than 0")
    lo, hi = _since(since), _since(until)
    if lo is not None and hi is not None and hi <= lo:
        raise _usage("--until must be later than --since")
    name = scheduler or _settings().scheduler or "none"
    store = _open_store(db, readonly=True)
    try:
        now = SYSTEM.wall()
        history = None if name == "none" else _history(name, store, lo, hi if hi is not None else now, job)
        rep = report_from_store(
            store, now=now, since=lo, until=hi, job=job, gpus_per_node=k, gpus_from=source, history=history
        )
        if what_if is not None:
            _what_if(store, rep, lo, job, what_if[0], what_if[1], json_out)
            return
    finally:
        store.close()
    if html is not None:
        from engine.ops.goodput_html import render_html

        try:
            with open(html, "w", encoding="utf-8") as out:
                out.write(render_html(rep))
        except OSError as exc:
            raise _usage(f"--html {html}: {exc.strerror or exc}") from None
    typer.echo(json.dumps(rep, sort_keys=True) if json_out else render_text(rep))


def _history(name: str, store, since: Optional[float], until: float, job: Optional[str]) -> tuple[object, str]:
    """The scheduler's accounting of job attempts (``history``: Slurm's sacct) for the report, or
    None and why not: an adapter or a site without accounting, or one that does not answer, is
    no error; the report then uses the states the controller recorded, and says so."""
    from engine.errors import SchedulerError
    from scheduler_adapters.registry import UnknownAdapter, get_adapter

    try:
        adapter = get_adapter(name)
    except UnknownAdapter as exc:
        raise _usage(f"--scheduler: {exc}") from None
    history = getattr(adapter, "job_history", None)
    if history is None:
        return None, f"the {name} adapter keeps no accounting"
    if since is None:  # from a day before the store's first job state (a job seen after it queued)
        first = min((e["at"] for e in store.job_events(job)), default=None)
        since = None if first is None else first - 86400.0
    try:
        records = history(since, until, job)
    except (SchedulerError, ValueError) as exc:  # down, failed, a bad job id: the recorded states, and why
        return None, f"{name} accounting not read: {exc}"
    return records, str(getattr(adapter, "accounting_unavailable", "") or "")


def _what_if(
    store, rep: dict, since: Optional[float], job: Optional[str], rules: List[str], policy: List[str], json_out: bool
) -> None:
    """``--what-if``: the stored incidents re-decided under the candidate (engine.ops.goodput_whatif)."""
    import yaml

    from engine.cli.common import _rule_args
    from engine.ops.goodput_whatif import estimate, policy_overlay
    from engine.ops.rulediff import diff_store
    from engine.rulebook import load_rulebook

    try:
        overlay = policy_overlay(policy)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    books = []
    # the candidate's files replace the site's (as in `recover rules diff`); --policy layers last
    for label, paths in (("the rulebook in force", []), ("the candidate", rules)):
        files, defaults, overlays = _rule_args(paths or None, False)
        layers = list(overlays)
        if label == "the candidate" and overlay:
            layers.append(("--policy", yaml.safe_dump({"policy": overlay})))
        result = load_rulebook(files, defaults=defaults, overlays=layers)
        if not result.ok or result.compiled is None:
            for d in result.diagnostics:
                _err(str(d))
            raise _usage(f"{label} has {len(result.errors)} error(s); nothing was re-decided")
        books.append(result.compiled)
    base, candidate = books
    changes = [c for c in diff_store(store, base, candidate, since=since) if job is None or c.job == job]
    total = len([r for r in store.incidents(status="closed", since=since) if job is None or r.job == job])
    out = estimate(changes, rep, incidents=total, settle_old=base.policy.settle, settle_new=candidate.policy.settle)
    out |= {"rules": list(rules), "policy": overlay}
    if json_out:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    from engine.ops.goodput_text import render_what_if

    typer.echo(render_what_if(out))


def _model(
    nodes: Optional[int],
    gpus: Optional[int],
    gpus_per_node: int,
    failure_rate: Optional[str],
    interval: Optional[str],
    restart: Optional[str],
    write: Optional[str],
    json_out: bool,
) -> None:
    from engine.ops.goodput_model import ModelError, model as run_model

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
        raise _usage(str(exc)) from None

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
