"""The ``recover`` command line. Thin: parse, call the library, print (rich for people, --json
for tools). Exit codes: 0 ok, 1 a check or test failed / the rulebook has errors, 2 usage or
input errors (missing database, unknown incident, unreadable file)."""

from __future__ import annotations
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import List, Optional
import typer
from engine.cli.common import (
    _open_store,
    app,
    rules_app,
    RulesOpt,
    NoDefaultsOpt,
    DbOpt,
    JsonOpt,
    _settings,
    _db,
    _err,
    _rule_args,
    _load_or_exit,
    _setup_logging,
    _exit_on,
    path_hint,
)
from engine.cli import rules as _rules  # noqa: F401  (registers the rules commands)
from engine.cli import goodput as _goodput  # noqa: F401  (registers recover goodput)
from engine.cli import dumps as _dumps
from engine.cli import status as _status  # noqa: F401  (registers recover status)
from engine.cli import outage as _outage  # noqa: F401  (registers recover outage)


app.add_typer(rules_app, name="rules")


# -- replay, incidents, explain -------------------------------------------------------------
@app.command()
def replay(
    logs: List[str] = typer.Argument(
        ...,
        help="Log files: job stdout/stderr, kernel logs, Slurm daemon logs, or a mix; PyTorch "
        "flight-recorder dumps (files or folders of them) among them are told apart by content.",
    ),
    rules: Optional[List[str]] = RulesOpt,
    no_defaults: bool = NoDefaultsOpt,
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
    job: Optional[str] = typer.Option(None, "--job", help="Job id of the logs when their names do not say."),
    progress: bool = typer.Option(False, "--progress", help="Show a progress bar (large inputs)."),
    all_files: bool = typer.Option(
        False, "--all-files", help="Replay every file given, also documents (*.md, ...) and binary files."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Evaluate the rulebook over historical logs and record the incidents."""
    from engine.core.replay import not_a_log, replay as do_replay
    from engine.store import Store, StoreError

    _setup_logging(verbose)
    compiled = _load_or_exit(rules, no_defaults)
    missing = [p for p in logs if not Path(p).is_file() and not Path(p).is_dir()]
    for p in missing:
        _err(f"{p}: no such file")
    if missing:
        raise typer.Exit(2)
    inputs = _dumps.split_inputs(logs)
    logs = inputs.logs
    if not all_files:
        # `recover replay logs/*` takes whatever the folder holds: what is plainly no log is left
        # out, and said so, never silently
        skipped = [(p, why) for p in logs for why in [not_a_log(p)] if why]
        for p, why in skipped:
            _err(f"skipped {p}: {why} (--all-files replays it)")
        logs = [p for p in logs if p not in {s for s, _ in skipped}]
    if not logs and not inputs.dumps:
        _err("no logs to replay")
        raise typer.Exit(2)
    extra = _dumps.dump_facts(inputs.dumps, job, logs) if inputs.dumps else []
    with _exit_on(StoreError):
        store = Store(_db(db))
    on_bytes = None
    bar = None
    if progress and sys.stderr.isatty():
        from rich.progress import Progress

        total = sum(Path(p).stat().st_size for p in logs)
        bar = Progress(transient=True)
        task = bar.add_task("replay", total=total)
        bar.start()
        on_bytes = lambda n: bar.advance(task, n)
    try:
        result = do_replay(logs, compiled, store, job=job, on_bytes=on_bytes, extra_facts=extra)
    finally:
        if bar is not None:
            bar.stop()
    for closed in result.incidents:
        row = store.require_incident(closed.id)
        rules_fired = store.rules_fired(closed.id)
        if json_out:
            typer.echo(
                json.dumps(
                    {
                        "id": closed.id,
                        "job": row.job,
                        "attempt": row.attempt,
                        "fault_class": row.fault_class,
                        "decision": row.decision,
                        "nodes": list(row.nodes),
                        "rules": rules_fired,
                        "commands": [list(p.argv) for p in closed.plan],
                        # held back by a shared outage until it ends (recover outage list)
                        "held": [a["argv"] for a in store.actions(closed.id, status="held")],
                    }
                )
            )
    if not json_out:
        _print_incident_table(
            [store.incident(c.id) for c in result.incidents],
            title=f"{len(result.incidents)} incident(s) from {result.files} file(s)",
        )
        typer.echo(
            f"db: {store.path}; {result.bytes} bytes, {result.hits} matched lines, {result.long_lines} long lines cut"
        )
    if result.unreadable:
        raise typer.Exit(2)


def _print_incident_table(rows, title: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # the title names the database (a path the user chose) and the cells the rulebook's names: text,
    # never Rich markup (a folder named `[/x]` crashed the table with a MarkupError)
    table = Table(title=Text(title))
    for col in ("id", "job", "attempt", "status", "fault_class", "decision", "nodes"):
        table.add_column(col)
    for r in rows:
        cells = (
            str(r.id),
            r.job or "-",
            "-" if r.attempt is None else str(r.attempt),
            r.status,
            r.fault_class or "-",
            r.decision or "-",
            ",".join(r.nodes) or "-",
        )
        table.add_row(*map(Text, cells))
    Console(width=int(os.environ.get("COLUMNS", "120"))).print(table)


#: incidents the table shows unless --limit says otherwise (a year of history is ~100,000 rows)
TABLE_INCIDENTS = 50


@app.command()
def incidents(
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
    status: Optional[str] = typer.Option(None, "--status", help="open or closed"),
    errors: bool = typer.Option(
        False,
        "--errors",
        help="List the quarantined inputs instead: lines and spool facts whose handling failed, with the error.",
    ),
    limit: Optional[int] = typer.Option(
        None,
        "--limit",
        "-n",
        min=0,
        help="Only the newest N incidents; 0: all (default: the table shows the newest 50, --json all).",
    ),
) -> None:
    """List incidents: the table the newest 50, --json every one (unless --limit says otherwise)."""
    store = _open_store(db, readonly=True)
    if errors:
        quarantined = store.quarantined()
        for q in quarantined:
            if json_out:
                typer.echo(json.dumps(q))
            else:
                typer.echo(f"{q['origin']}  x{q['count']}  {q['error']}\n    {q['input'][:200]!r}")
        if not json_out:
            typer.echo(f"{len(quarantined)} quarantined input(s) in {store.path}")
        return
    if limit is None:
        limit = 0 if json_out else TABLE_INCIDENTS
    rows = store.incidents(status=status, newest=limit or None)
    if json_out:
        for r in rows:
            d = r.to_dict()
            d["rules"] = store.rules_fired(r.id)
            typer.echo(json.dumps(d))
        return
    total = store.count_incidents(status) if limit and len(rows) == limit else len(rows)
    shown = f"the newest {len(rows)} of " if len(rows) < total else ""
    more = " (--limit 0 for all)" if len(rows) < total else ""
    _print_incident_table(rows, title=f"{shown}{total} incident(s) in {store.path}{more}")


@app.command()
def explain(
    incident: str = typer.Argument(..., help="Incident id (as listed by `recover incidents`)."),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Show the chain from evidence to decision for one incident."""
    from engine.ops.explain import ExplainError, build, render_text

    store = _open_store(db, readonly=True)
    try:
        report = build(store, int(incident.removeprefix("INC-").removeprefix("#")))
    except (ValueError, ExplainError) as exc:
        _err(f"no incident {incident!r} in {store.path}" if isinstance(exc, ValueError) else str(exc))
        raise typer.Exit(2) from None
    if json_out:
        typer.echo(json.dumps(report, default=str))
    else:
        typer.echo(render_text(report))


#: the signals that stop the controller
_STOPS = {signal.SIGTERM, signal.SIGINT}


@app.command()
def run(
    dry_run: bool = typer.Option(False, "--dry-run", help="Monitor mode: record recommendations, execute nothing."),
    rules: Optional[List[str]] = RulesOpt,
    no_defaults: bool = NoDefaultsOpt,
    db: Optional[str] = DbOpt,
    follow: Optional[List[str]] = typer.Option(
        None, "--follow", help="Glob of log files to tail, also files that appear later (repeatable)."
    ),
    spool: Optional[str] = typer.Option(None, "--spool", help="Spool folder the node agents write to."),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", help="slurm | none (default: the settings', else none)"
    ),
    poll: Optional[float] = typer.Option(
        None, "--poll", help="Poll files every SECONDS instead of inotify (NFS, Lustre)."
    ),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port."),
    scheduler_interval: float = typer.Option(5.0, "--scheduler-interval", help="Seconds between scheduler polls."),
    from_start: bool = typer.Option(
        False,
        "--from-start",
        help="With a new database, read the files that already "
        "exist from their start (a backfill; monitor mode only). Without it a new "
        "database starts reading them at their end: the past is not acted on.",
    ),
    lease: float = typer.Option(
        15.0,
        "--lease",
        help="Seconds the leader lease lives: one controller per database acts, the others follow "
        "and take over within about this once the leader stops renewing it.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run the controller: follow logs, the agents' spool and the scheduler; record or act."""
    from engine.live.controller import RESTART, Controller, ControllerConfig
    from engine.live.reload import RELOADED_ENV
    from engine.store import StoreError

    # set by the process this one replaced to load a changed rulebook; said and counted once,
    # so it leaves the environment (a later restart of this process is a plain start)
    reloaded = os.environ.pop(RELOADED_ENV, None) == "1"
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)  # held across a restart in place: see there
    # a daemon says what it does at INFO (start, stop, reload, recommendations); WARNING is kept
    # for what an operator should look at, and -v adds DEBUG
    _setup_logging(verbose)
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)
    compiled = _load_or_exit(rules, no_defaults)
    settings = _settings()
    follow = follow or settings.follow
    spool = spool or settings.spool
    scheduler = scheduler or settings.scheduler or "none"
    if not follow and not spool and scheduler == "none":
        _err("nothing to watch: give --follow GLOB, --spool DIR or --scheduler slurm")
        raise typer.Exit(2)
    if from_start and not dry_run:
        _err("--from-start reads the past: only in monitor mode (--dry-run)")
        raise typer.Exit(2)
    actuator_factory = None
    if not dry_run:
        try:
            from engine.live.actuator import Actuator

            actuator_factory = Actuator.for_controller
        except ImportError:  # pragma: no cover - the action layer is part of the package
            _err("acting needs engine.live.actuator; run with --dry-run")
            raise typer.Exit(2) from None
    rule_paths, defaults, overlays = _rule_args(rules, no_defaults)
    cfg = ControllerConfig(
        rules=rule_paths,
        defaults=defaults,
        overlays=overlays,
        db=_db(db),
        follow=follow or [],
        spool=spool,
        scheduler=scheduler,
        dry_run=dry_run,
        poll=poll,
        metrics_port=metrics_port,
        scheduler_interval=scheduler_interval,
        actuator_factory=actuator_factory,
        from_start=from_start,
        reloaded=reloaded,
        lease_s=lease,
        fr_dump_dir=_settings().fr_dump_dir,
        fr_dump_dirs=_settings().fr_dump_dirs,
        fr_dump_wait=_settings().fr_dump_wait,
        fr_dump_max_bytes=_settings().fr_dump_max_bytes,
    )
    if lease <= 0:
        _err("--lease: the lease must live a positive number of seconds")
        raise typer.Exit(2)
    try:
        controller = Controller(cfg, compiled)
    except StoreError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    except Exception as exc:  # e.g. the scheduler adapter cannot start
        _err(f"cannot start: {exc}")
        raise typer.Exit(2) from None
    code = controller.run()
    if code == RESTART:
        code = _restart_in_place(controller)
    raise typer.Exit(code)


def _restart_in_place(controller) -> int:
    """Run this same command line again in this process (same pid: systemd and pid files see no
    change; Python's descriptors are not inherited, so sockets and the store close). The
    controller has stopped as on SIGTERM to load a rulebook whose rules changed. Returns (0)
    only when a stop was asked for in the meantime: then there is no restart."""
    from engine.live.reload import RELOADED_ENV

    # a stop that came while the controller stopped has cancelled the restart (its handler has
    # run once this returns); one that comes from here stays pending, blocked, across the exec
    # and ends the new process as soon as it unblocks it (first thing in `run`), or, caught by
    # another thread, ends this one: a `systemctl stop` is never lost to a restart
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    for sig in _STOPS:
        signal.signal(sig, signal.SIG_DFL)
    if not controller.restart_requested:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        return 0
    os.environ[RELOADED_ENV] = "1"
    # a handler does not survive exec, an ignored signal does: a SIGHUP before the new process
    # installs its handler must not end it (it loads the rulebook files as they are then anyway)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as exc:  # the service manager restarts it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        _err(f"cannot restart to load the rulebook: {exc}")
        return 1


@app.command()
def agent(
    node: str = typer.Option(..., "--node", help="This node's name, as the scheduler knows it."),
    spool: str = typer.Option(..., "--spool", help="Spool folder (shared with the controller)."),
    kernel_log: Optional[str] = typer.Option(None, "--kernel-log", help="Kernel log file to read (else --kmsg)."),
    kmsg: bool = typer.Option(False, "--kmsg", help="Read /dev/kmsg."),
    nvml: bool = typer.Option(True, "--nvml/--no-nvml", help="Poll GPU counters through NVML."),
    interval: float = typer.Option(10.0, "--interval", help="NVML poll interval, seconds."),
    expected_gpus: str = typer.Option(
        "gres",
        "--expected-gpus",
        help="GPUs this node should have: a number, or "
        "'gres' (what the scheduler's GRES gives the node; the count first seen when it cannot say).",
    ),
    scheduler: str = typer.Option(
        "slurm", "--scheduler", help="Who says how many GPUs the node has (--expected-gpus gres): slurm | none."
    ),
    rules: Optional[List[str]] = RulesOpt,
    no_defaults: bool = NoDefaultsOpt,
    state_dir: Optional[str] = typer.Option(
        None, "--state-dir", help="Where the agent keeps its offsets and GPU count (default: in the spool)."
    ),
    from_start: bool = typer.Option(False, "--from-start", help="Read the kernel log from its start, not its end."),
    fsync: str = typer.Option(
        "batch",
        "--fsync",
        help="When spool writes are synced: batch (each write), line, never, or seconds between syncs.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run the node agent: kernel-log lines (the rulebook's kernel matchers) and NVML counters
    (the rulebook's thresholds) -> facts in the spool. SIGHUP, or a change in the rulebook's
    files, reloads the rulebook (an invalid one is reported and the running one kept)."""
    from engine.live.agent import launch_positions, run_agent

    # a stop that comes while the agent still starts (loading the rulebook) is a clean stop too,
    # and a reload asked for meanwhile is done once it runs (SIGHUP's default would end it)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    reload_event = threading.Event()
    signal.signal(signal.SIGHUP, lambda signum, frame: reload_event.set())
    # before anything slow (the rulebook, NVML, Slurm): a first start reads from here, so an Xid
    # logged while the agent starts is read
    launch = launch_positions(kernel_log, kmsg)
    _setup_logging(verbose)
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)  # as `recover run`
    if kernel_log is None and not kmsg and not nvml:
        _err("no source: give --kernel-log PATH, --kmsg or --nvml")
        raise typer.Exit(2)
    if not (expected_gpus == "gres" or expected_gpus.isdigit()):
        _err(f"--expected-gpus: {expected_gpus!r} is neither a number nor 'gres'")
        raise typer.Exit(2)
    sync: str | float = fsync
    try:
        sync = float(fsync)
    except ValueError:
        if fsync not in ("batch", "line", "never"):
            _err(f"--fsync: {fsync!r} is not batch, line, never or a number of seconds")
            raise typer.Exit(2) from None
    adapter = None
    if scheduler != "none":
        from scheduler_adapters.registry import UnknownAdapter, get_adapter

        try:
            adapter = get_adapter(scheduler)
        except UnknownAdapter as exc:
            _err(f"--scheduler: {exc}")
            raise typer.Exit(2) from None
    rule_paths, defaults, _overlays = _rule_args(rules, no_defaults)
    compiled = _load_or_exit(rules, no_defaults)
    raise typer.Exit(
        run_agent(
            node,
            spool,
            launch=launch,
            rules=rule_paths,
            defaults=defaults,
            reload_event=reload_event,
            kernel_log=kernel_log,
            kmsg=kmsg,
            nvml=nvml,
            poll_interval=interval,
            rulebook=compiled,
            expected_gpus=int(expected_gpus) if expected_gpus.isdigit() else "gres",
            scheduler=adapter,
            state_dir=state_dir,
            replay=from_start,
            fsync=sync,
        )
    )


@app.command()
def demo(
    db: str = typer.Option("recover-demo.db", "--db", help="Where the demo writes its incidents (recreated)."),
    seed: int = typer.Option(7, "--seed", help="Which failures are drawn from the failure mix."),
    jobs: int = typer.Option(6, "--jobs", help="Training jobs on the simulated cluster."),
    keep: Optional[str] = typer.Option(
        None, "--keep", help="Keep the demo's logs, kernel logs and spool in this folder."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Monitor mode on a SIMULATED cluster: real controller and agents, injected failures, then explain one."""
    from engine.ops.demo import run_demo
    from engine.ops.explain import build, render_text
    from engine.store import Store

    _setup_logging(False)
    logging.getLogger().setLevel(logging.ERROR)
    if not json_out:
        typer.echo(
            "recover demo: a SIMULATED 8-node cluster with fake GPUs (no Slurm, no GPU, no network); the real controller "
            "and node agents watch it in monitor mode while failures drawn from the published failure mix are injected."
        )
    result = run_demo(db, jobs=jobs, seed=seed, keep=keep)
    store = Store(db, readonly=True)
    if json_out:
        for r in result.incidents:
            typer.echo(json.dumps(r.to_dict() | {"rules": store.rules_fired(r.id)}))
        return
    typer.echo("")
    typer.echo("Injected (component of the failure mix -> job, node):")
    for comp, job, node in result.injected:
        typer.echo(f"  {comp:28} job {job} on {node}")
    _print_incident_table(result.incidents, title=f"{len(result.incidents)} incident(s) in {result.seconds:.0f} s")
    pick = next(
        (r for r in result.incidents if r.decision == "isolate_and_restart"),
        result.incidents[0] if result.incidents else None,
    )
    attributed = next((r for r in result.incidents if r.suspects), None)  # a timeout with its suspect
    for shown in [r for r in (pick, attributed) if r is not None and (pick is None or r is pick or r.id != pick.id)]:
        typer.echo("")
        typer.echo(f"$ recover explain {shown.id} --db {db}")
        typer.echo(render_text(build(store, shown.id)))
    typer.echo("")
    typer.echo(f"Recommendations were recorded, nothing was executed. Explore: recover incidents --db {db}")
    hint = path_hint()
    if hint:
        typer.echo(hint)
    from engine.ops.goodput_text import render_summary

    typer.echo("")
    typer.echo(f"$ recover goodput --db {db} --gpus-per-node 1")
    typer.echo(render_summary(result.goodput))


def _register_extensions() -> None:
    """Operator tooling (review, report, rules schema/show/explain-line, silences) lives in its own module."""
    from engine.cli import ops

    ops.register(app, rules_app)


_register_extensions()


def main() -> None:
    """The error boundary: anything Recover raises on purpose is one line on stderr and exit 2,
    never a traceback (usage errors are typer's, a bug still shows its traceback: it is one)."""
    from engine.errors import RecoverError

    try:
        app()
    except RecoverError as exc:
        _err(f"recover: {type(exc).__name__}: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
