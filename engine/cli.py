"""The ``recover`` command line. Thin: parse, call the library, print (rich for people, --json
for tools). Exit codes: 0 ok, 1 a check or test failed / the rulebook has errors, 2 usage or
input errors (missing database, unknown incident, unreadable file).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer


def load_rulebook(*args, **kw):
    """engine.rulebook.load_rulebook, imported when a command loads a rulebook: not at start, so
    that `recover incidents` and `recover explain` do not pay for YAML, jinja2 and the compiler."""
    from .rulebook import load_rulebook as load

    return load(*args, **kw)

app = typer.Typer(add_completion=True, no_args_is_help=True, help="Recover: detect, attribute, isolate and restart failed GPU training jobs.")
rules_app = typer.Typer(no_args_is_help=True, help="Validate, test and inspect rulebooks.")
app.add_typer(rules_app, name="rules")

DEFAULT_DB = "recover.db"
RulesOpt = typer.Option(None, "--rules", "-r", help="Site rulebook file or folder, layered over the defaults (repeatable).")
NoDefaultsOpt = typer.Option(False, "--no-defaults", help="Do not load the shipped default rulebook.")
DbOpt = typer.Option(None, "--db", help="SQLite incident store (default: $RECOVER_DB or ./recover.db).")
JsonOpt = typer.Option(False, "--json", help="Machine-readable output: one JSON object per line.")


_SETTINGS = None


def _settings():
    """recover.toml (or --config / $RECOVER_CONFIG), with the environment over it."""
    global _SETTINGS
    if _SETTINGS is None:
        from .config import ConfigError, load_settings

        try:
            _SETTINGS = load_settings()
        except ConfigError as exc:
            _err(f"config: {exc}")
            raise typer.Exit(2)
    return _SETTINGS


@app.callback()
def _main(config: Optional[str] = typer.Option(None, "--config", help="Settings file (default: $RECOVER_CONFIG or ./recover.toml).")) -> None:
    """Recover: detect, attribute, isolate and restart failed GPU training jobs."""
    global _SETTINGS
    from .config import ConfigError, load_settings

    try:
        _SETTINGS = load_settings(config)
    except ConfigError as exc:
        _err(f"config: {exc}")
        raise typer.Exit(2)


def _db(path: Optional[str]) -> str:
    return path or _settings().db or DEFAULT_DB


def _err(msg: str) -> None:
    typer.echo(msg, err=True)


def _rule_args(paths: Optional[List[str]], no_defaults: bool):
    """(paths, defaults, overlays): flags win over the settings."""
    from .config import autonomy_overlay

    s = _settings()
    return (list(paths) if paths else list(s.rules)), not (no_defaults or s.no_defaults), autonomy_overlay(s)


def _load_or_exit(paths: Optional[List[str]], no_defaults: bool):
    paths, defaults, overlays = _rule_args(paths, no_defaults)
    result = load_rulebook(paths, defaults=defaults, overlays=overlays)
    for d in result.diagnostics:
        _err(str(d))
    if not result.ok:
        _err(f"rulebook has {len(result.errors)} error(s); nothing was run")
        raise typer.Exit(1)
    return result.compiled


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


# -- rules ---------------------------------------------------------------------------------
@rules_app.command("check")
def rules_check(paths: List[str] = typer.Argument(None, help="Site rulebook files or folders."), no_defaults: bool = NoDefaultsOpt,
                json_out: bool = JsonOpt,
                strict: bool = typer.Option(False, "--strict", help="Warnings fail the check too (exit 1): for CI.")) -> None:
    """Validate the layered rulebook; print every problem as file:line:col: CODE message."""
    paths, defaults, overlays = _rule_args(paths, no_defaults)
    result = load_rulebook(paths, defaults=defaults, overlays=overlays)
    failed = not result.ok or (strict and len(result.diagnostics) > len(result.errors))
    if json_out:
        for d in result.diagnostics:
            typer.echo(json.dumps({"file": d.mark.file, "line": d.mark.line, "col": d.mark.col, "code": d.code,
                                   "severity": d.severity, "message": d.message, "hint": d.hint}))
    else:
        for d in result.diagnostics:
            typer.echo(str(d))
        warnings = len(result.diagnostics) - len(result.errors)
        if not failed:
            c = result.compiled
            typer.echo(f"ok: {len(result.files)} file(s), {len(c.fault_classes)} fault classes, {len(c.matchers)} matchers, "
                       f"{len(c.rules)} rules, {len(c.actions)} actions, {len(c.book.tests)} tests; {warnings} warning(s)")
        else:
            typer.echo(f"{len(result.errors)} error(s), {warnings} warning(s)" + (" (--strict: warnings fail)" if strict and warnings else ""))
    raise typer.Exit(1 if failed else 0)


@rules_app.command("test")
def rules_test(paths: List[str] = typer.Argument(None, help="Site rulebook files or folders."), no_defaults: bool = NoDefaultsOpt,
               verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every test, not only failures."),
               name: Optional[List[str]] = typer.Option(None, "--name", "-k",
                                                        help="Run only the tests whose name contains this text or matches this "
                                                             "regex (case-insensitive; repeatable: any of them)."),
               site_only: bool = typer.Option(False, "--site-only", help="Run only the tests written in the given files, not the shipped ones."),
               junit: Optional[str] = typer.Option(None, "--junit", help="Also write the results as JUnit XML to this file (for CI)."),
               json_out: bool = JsonOpt) -> None:
    """Run the embedded tests of the default and given rulebooks. Exit 1 when a test fails or none is selected."""
    from .rulebook import default_rule_files
    from .rulebook import _display as display_name
    from .ruletest import junit_xml, outcome_json, run_tests, select_tests

    compiled = _load_or_exit(paths or [], no_defaults)
    book = compiled.book
    only = None
    if site_only:
        shipped = {display_name(p) for p in default_rule_files()}
        only = {f for f in book.files if f not in shipped}
    tests = select_tests(compiled, name or (), only)
    disabled = dict(book.disabled_tests)
    if not tests:
        what = f" matching {', '.join(repr(n) for n in name)}" if name else ""
        where = " in the site's files" if site_only else ""
        _err(f"no test selected{what}{where} (of {len(book.tests)}): nothing was run")
        raise typer.Exit(1)
    outcomes = run_tests(compiled, tests=tests)
    failed = sum(1 for o in outcomes if not o.passed)
    for o in outcomes:
        if json_out:
            typer.echo(json.dumps(outcome_json(o)))
            continue
        if o.passed:
            if verbose:
                typer.echo(f"PASS {o.test.name}  ({o.test.mark})")
            continue
        typer.echo(f"FAIL {o.test.name}  ({o.test.mark})")
        for p in o.problems:
            typer.echo(f"     {p}")
    if verbose and not json_out:
        for n, m in disabled.items():
            typer.echo(f"DISABLED {n}  (at {m})")
    summary = f"{len(outcomes) - failed} passed, {failed} failed" + (f", {len(disabled)} disabled" if disabled else "")
    if json_out:
        typer.echo(json.dumps({"passed": len(outcomes) - failed, "failed": failed, "disabled": sorted(disabled),
                               "selected": len(outcomes), "total": len(book.tests)}))
    else:
        typer.echo(summary)
    if junit:
        try:
            Path(junit).write_text(junit_xml(outcomes, disabled))
        except OSError as exc:
            _err(f"cannot write {junit}: {exc.strerror or exc}")
            raise typer.Exit(2)
    raise typer.Exit(1 if failed else 0)


@rules_app.command("eval")
def rules_eval(corpus: List[str] = typer.Argument(..., help="Corpus files (JSON lines) or folders of them."),
               paths: Optional[List[str]] = RulesOpt, no_defaults: bool = NoDefaultsOpt, json_out: bool = JsonOpt,
               minimum: Optional[float] = typer.Option(None, "--min", help="Exit 1 when accuracy (0-1 or a percentage) is below this."),
               verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every case, not only misses.")) -> None:
    """Replay each case of a real-log corpus alone: per-class precision and recall, confusion, every miss."""
    from .corpus_eval import HEALTHY, evaluate, load_cases

    compiled = _load_or_exit(paths or [], no_defaults)
    cases, problems = load_cases(corpus, known_labels=compiled.policy.get("decisions", {}).keys())
    for p in problems:
        _err(p)
    if not cases:
        _err("no case to evaluate")
        raise typer.Exit(2)
    report = evaluate(compiled, cases)
    floor = None if minimum is None else (minimum / 100.0 if minimum > 1 else minimum)
    if json_out:
        typer.echo(json.dumps(report.to_json() | {"problems": problems}))
    else:
        if verbose:
            for r in report.results:
                typer.echo(f"{'ok  ' if r.right else 'MISS'} {r.case.id}: {r.case.label} -> {r.got}")
        typer.echo(f"{'class':<26} {'cases':>5} {'recall':>7} {'answered':>8} {'precision':>9}")
        for label, st in report.per_class().items():
            rec = "-" if st["recall"] is None else f"{st['recall']:.1%}"
            pre = "-" if st["precision"] is None else f"{st['precision']:.1%}"
            typer.echo(f"{label:<26} {st['cases']:>5} {rec:>7} {st['answered']:>8} {pre:>9}")
        typer.echo("confusion (label: answers):")
        for label, answers in sorted(report.confusion().items()):
            typer.echo(f"  {label}: " + ", ".join(f"{k}={v}" for k, v in answers.most_common()))
        if report.misses:
            typer.echo("misses:")
            for r in report.misses:
                why = f" ({r.error})" if r.error else (f" via {', '.join(r.rules)}" if r.rules else "")
                typer.echo(f"  {r.case.id}: {r.case.label} -> {r.got}{why}  [{r.case.where}]")
        typer.echo(f"accuracy: {report.accuracy:.1%} ({report.right}/{report.total}); healthy cases with an incident: "
                   f"{len(report.healthy_with_incident)} of {sum(r.case.label == HEALTHY for r in report.results)}")
    if floor is not None and report.accuracy < floor:
        _err(f"accuracy {report.accuracy:.1%} is below --min {floor:.1%}")
        raise typer.Exit(1)
    raise typer.Exit(0)
@rules_app.command("diff")
def rules_diff(candidate: Optional[List[str]] = typer.Option(None, "--rules", "-r", help="The candidate: site rulebook files or "
                                                            "folders, layered over the defaults (repeatable)."),
               base: Optional[List[str]] = typer.Option(None, "--base", help="The rulebook in force (default: recover.toml's rules)."),
               no_defaults: bool = NoDefaultsOpt, db: Optional[str] = DbOpt,
               since: Optional[str] = typer.Option(None, "--since", help="Only incidents opened since: a date (2026-11-29, "
                                                   "2026-11-29T17:00), seconds since the epoch, or a duration ago (24h, 90m)."),
               json_out: bool = JsonOpt) -> None:
    """Re-evaluate the stored evidence of past incidents with a candidate rulebook and list every incident
    whose fault class, nodes or decision would change. Exit 0 when nothing changes, 1 otherwise."""
    from .cli_ops import _open_store
    from .rulediff import diff_store

    if not candidate:
        _err("give the candidate rulebook with --rules FILE_OR_FOLDER")
        raise typer.Exit(2)
    t = _since(since)
    store = _open_store(db, readonly=True)
    old = _load_or_exit(base or list(_settings().rules), no_defaults)
    new = _load_or_exit(candidate, no_defaults)
    changes = diff_store(store, old, new, since=t)
    total = len(store.incidents(status="closed", since=t))
    for c in changes:
        typer.echo(json.dumps(c.to_dict()) if json_out else c.line())
    if json_out:
        typer.echo(json.dumps({"incidents": total, "changed": len(changes)}))
    else:
        typer.echo(f"{len(changes)} of {total} incident(s) would change")
    raise typer.Exit(1 if changes else 0)


def _since(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    import time
    from datetime import datetime, timezone

    from .rulebook.schema import parse_duration

    try:
        return float(text)
    except ValueError:
        pass
    try:
        d = datetime.fromisoformat(text)
        return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()
    except ValueError:
        pass
    ago = parse_duration(text[:-1] + "h") * 24 if text.endswith("d") and parse_duration(text[:-1] + "h") is not None else parse_duration(text)
    if ago is None:
        _err(f"{text!r}: not a date, a number of seconds or a duration")
        raise typer.Exit(2)
    return time.time() - ago


# -- replay, incidents, explain -------------------------------------------------------------
@app.command()
def replay(logs: List[str] = typer.Argument(..., help="Log files: job stdout/stderr, kernel logs, Slurm daemon logs, or a mix."),
           rules: Optional[List[str]] = RulesOpt, no_defaults: bool = NoDefaultsOpt, db: Optional[str] = DbOpt,
           json_out: bool = JsonOpt, job: Optional[str] = typer.Option(None, "--job", help="Job id of the logs when their names do not say."),
           progress: bool = typer.Option(False, "--progress", help="Show a progress bar (large inputs)."),
           verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Evaluate the rulebook over historical logs and record the incidents."""
    from .replay import replay as do_replay
    from .store import Store, StoreError

    _setup_logging(verbose)
    compiled = _load_or_exit(rules, no_defaults)
    missing = [p for p in logs if not Path(p).is_file()]
    for p in missing:
        _err(f"{p}: no such file")
    if missing:
        raise typer.Exit(2)
    try:
        store = Store(_db(db))
    except StoreError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    on_bytes = None
    bar = None
    if progress and sys.stderr.isatty():
        from rich.progress import Progress

        total = sum(Path(p).stat().st_size for p in logs)
        bar = Progress(transient=True)
        task = bar.add_task("replay", total=total)
        bar.start()
        on_bytes = lambda n: bar.advance(task, n)  # noqa: E731
    try:
        result = do_replay(logs, compiled, store, job=job, on_bytes=on_bytes)
    finally:
        if bar is not None:
            bar.stop()
    for closed in result.incidents:
        row = store.incident(closed.id)
        rules_fired = store.rules_fired(closed.id)
        if json_out:
            typer.echo(json.dumps({"id": closed.id, "job": row.job, "attempt": row.attempt, "fault_class": row.fault_class,
                                   "decision": row.decision, "nodes": list(row.nodes), "rules": rules_fired,
                                   "commands": [list(p.argv) for p in closed.plan]}))
    if not json_out:
        _print_incident_table([store.incident(c.id) for c in result.incidents], title=f"{len(result.incidents)} incident(s) from {result.files} file(s)")
        typer.echo(f"db: {store.path}; {result.bytes} bytes, {result.hits} matched lines, {result.long_lines} long lines cut")
    if result.unreadable:
        raise typer.Exit(2)


def _print_incident_table(rows, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("id", "job", "attempt", "status", "fault_class", "decision", "nodes"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r.id), r.job or "-", "-" if r.attempt is None else str(r.attempt), r.status,
                      r.fault_class or "-", r.decision or "-", ",".join(r.nodes) or "-")
    Console(width=int(os.environ.get("COLUMNS", "120"))).print(table)


@app.command()
def incidents(db: Optional[str] = DbOpt, json_out: bool = JsonOpt,
              status: Optional[str] = typer.Option(None, "--status", help="open or closed"),
              errors: bool = typer.Option(False, "--errors", help="List the quarantined inputs instead: lines and "
                                          "spool facts whose handling failed, with the error.")) -> None:
    """List incidents."""
    from .store import Store, StoreError

    try:
        store = Store(_db(db), readonly=True)
    except StoreError as exc:
        _err(str(exc))
        raise typer.Exit(2)
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
    rows = store.incidents(status=status)
    if json_out:
        for r in rows:
            d = r.to_dict()
            d["rules"] = store.rules_fired(r.id)
            typer.echo(json.dumps(d))
    else:
        _print_incident_table(rows, title=f"{len(rows)} incident(s) in {store.path}")


@app.command()
def explain(incident: str = typer.Argument(..., help="Incident id (as listed by `recover incidents`)."),
            db: Optional[str] = DbOpt, json_out: bool = JsonOpt) -> None:
    """Show the chain from evidence to decision for one incident."""
    from .explain import ExplainError, build, render_text
    from .store import Store, StoreError

    try:
        store = Store(_db(db), readonly=True)
    except StoreError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    try:
        report = build(store, int(incident.removeprefix("INC-").removeprefix("#")))
    except (ValueError, ExplainError) as exc:
        _err(f"no incident {incident!r} in {store.path}" if isinstance(exc, ValueError) else str(exc))
        raise typer.Exit(2)
    if json_out:
        typer.echo(json.dumps(report, default=str))
    else:
        typer.echo(render_text(report))


@app.command()
def run(dry_run: bool = typer.Option(False, "--dry-run", help="Monitor mode: record recommendations, execute nothing."),
        rules: Optional[List[str]] = RulesOpt, no_defaults: bool = NoDefaultsOpt, db: Optional[str] = DbOpt,
        follow: Optional[List[str]] = typer.Option(None, "--follow", help="Glob of log files to tail, also files that appear later (repeatable)."),
        spool: Optional[str] = typer.Option(None, "--spool", help="Spool folder the node agents write to."),
        scheduler: Optional[str] = typer.Option(None, "--scheduler", help="slurm | none (default: the settings', else none)"),
        poll: Optional[float] = typer.Option(None, "--poll", help="Poll files every SECONDS instead of inotify (NFS, Lustre)."),
        metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port."),
        scheduler_interval: float = typer.Option(5.0, "--scheduler-interval", help="Seconds between scheduler polls."),
        from_start: bool = typer.Option(False, "--from-start", help="With a new database, read the files that already "
                                        "exist from their start (a backfill; monitor mode only). Without it a new "
                                        "database starts reading them at their end: the past is not acted on."),
        verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the controller: follow logs, the agents' spool and the scheduler; record or act."""
    from .controller import Controller, ControllerConfig
    from .store import StoreError

    _setup_logging(verbose)
    logging.getLogger().setLevel(logging.INFO if verbose else logging.WARNING)
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
            from .actuator import Actuator

            actuator_factory = Actuator.for_controller
        except ImportError:  # pragma: no cover - the action layer is part of the package
            _err("acting needs engine.actuator; run with --dry-run")
            raise typer.Exit(2)
    rule_paths, defaults, overlays = _rule_args(rules, no_defaults)
    cfg = ControllerConfig(rules=rule_paths, defaults=defaults, overlays=overlays, db=_db(db), follow=follow or [], spool=spool,
                           scheduler=scheduler, dry_run=dry_run, poll=poll, metrics_port=metrics_port,
                           scheduler_interval=scheduler_interval, actuator_factory=actuator_factory, from_start=from_start)
    try:
        controller = Controller(cfg, compiled)
    except StoreError as exc:
        _err(str(exc))
        raise typer.Exit(2)
    except Exception as exc:  # e.g. the scheduler adapter cannot start
        _err(f"cannot start: {exc}")
        raise typer.Exit(2)
    raise typer.Exit(controller.run())


@app.command()
def agent(node: str = typer.Option(..., "--node", help="This node's name, as the scheduler knows it."),
          spool: str = typer.Option(..., "--spool", help="Spool folder (shared with the controller)."),
          kernel_log: Optional[str] = typer.Option(None, "--kernel-log", help="Kernel log file to read (else --kmsg)."),
          kmsg: bool = typer.Option(False, "--kmsg", help="Read /dev/kmsg."),
          nvml: bool = typer.Option(True, "--nvml/--no-nvml", help="Poll GPU counters through NVML."),
          interval: float = typer.Option(10.0, "--interval", help="NVML poll interval, seconds."),
          expected_gpus: str = typer.Option("gres", "--expected-gpus", help="GPUs this node should have: a number, or "
                                            "'gres' (Slurm's GRES for the node; the count first seen when Slurm cannot say)."),
          rules: Optional[List[str]] = RulesOpt, no_defaults: bool = NoDefaultsOpt,
          state_dir: Optional[str] = typer.Option(None, "--state-dir", help="Where the agent keeps its offsets and GPU count (default: in the spool)."),
          from_start: bool = typer.Option(False, "--from-start", help="Read the kernel log from its start, not its end."),
          fsync: str = typer.Option("batch", "--fsync", help="When spool writes are synced: batch (each write), line, never, or seconds between syncs."),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the node agent: kernel-log lines (the rulebook's kernel matchers) and NVML counters
    (the rulebook's thresholds) -> facts in the spool."""
    import signal

    from .agent import run_agent

    # a stop that comes while the agent still starts (loading the rulebook) is a clean stop too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    _setup_logging(verbose)
    logging.getLogger().setLevel(logging.INFO if verbose else logging.WARNING)
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
            raise typer.Exit(2)
    compiled = _load_or_exit(rules, no_defaults)
    raise typer.Exit(run_agent(node, spool, kernel_log=kernel_log, kmsg=kmsg, nvml=nvml, poll_interval=interval,
                               rulebook=compiled, expected_gpus=int(expected_gpus) if expected_gpus.isdigit() else "gres",
                               state_dir=state_dir, replay=from_start, fsync=sync))


@app.command()
def demo(db: str = typer.Option("recover-demo.db", "--db", help="Where the demo writes its incidents (recreated)."),
         seed: int = typer.Option(7, "--seed", help="Which failures are drawn from the failure mix."),
         jobs: int = typer.Option(6, "--jobs", help="Training jobs on the simulated cluster."),
         keep: Optional[str] = typer.Option(None, "--keep", help="Keep the demo's logs, kernel logs and spool in this folder."),
         json_out: bool = JsonOpt) -> None:
    """Monitor mode on a SIMULATED cluster: real controller and agents, injected failures, then explain one."""
    from .demo import run_demo
    from .explain import build, render_text
    from .store import Store

    _setup_logging(False)
    logging.getLogger().setLevel(logging.ERROR)
    if not json_out:
        typer.echo("recover demo: a SIMULATED 8-node cluster with fake GPUs (no Slurm, no GPU, no network); the real controller "
                   "and node agents watch it in monitor mode while failures drawn from the published failure mix are injected.")
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
    pick = next((r for r in result.incidents if r.decision == "isolate_and_restart"), result.incidents[0] if result.incidents else None)
    if pick is not None:
        typer.echo("")
        typer.echo(f"$ recover explain {pick.id} --db {db}")
        typer.echo(render_text(build(store, pick.id)))
    typer.echo("")
    typer.echo(f"Recommendations were recorded, nothing was executed. Explore: recover incidents --db {db}")


def _register_extensions() -> None:
    """Operator tooling (review, report, rules schema/show/explain-line, silences) lives in its own module."""
    from . import cli_ops

    cli_ops.register(app, rules_app)


_register_extensions()


def main() -> None:
    """The error boundary: anything Recover raises on purpose is one line on stderr and exit 2,
    never a traceback (usage errors are typer's, a bug still shows its traceback: it is one)."""
    from .errors import RecoverError

    try:
        app()
    except RecoverError as exc:
        _err(f"recover: {type(exc).__name__}: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
