"""Operator commands: silences, reviews and the review report, and the rulebook inspectors
(``rules schema``, ``rules show``, ``rules explain-line``). Exit codes as in ``engine.cli.main``:
0 ok, 1 the rulebook has errors, 2 usage or input errors (bad file, unknown incident, bad date).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import List, Optional

import typer

logger = logging.getLogger(__name__)

from engine.clock import SYSTEM
from engine.cli.common import _exit_on, _open_store, _write_or_exit

__all__ = ["register"]

_SOURCES = ("job", "kernel", "slurm", "any")


def _default_reviewer() -> Optional[str]:
    try:
        import getpass

        return getpass.getuser()
    except (KeyError, OSError, ImportError):  # no user database entry (containers)
        return os.environ.get("USER")


def register(app: typer.Typer, rules_app: typer.Typer) -> None:
    silence_app = typer.Typer(
        no_args_is_help=True, help="Silence nodes for maintenance: their incidents are only recorded."
    )
    app.add_typer(silence_app, name="silence")

    @silence_app.command("add")
    def silence_add(
        node: str = typer.Option(..., "--node"),
        for_: str = typer.Option("2h", "--for", help="e.g. 30m, 2h"),
        reason: str = typer.Option(..., "--reason"),
        by: Optional[str] = typer.Option(None, "--by"),
        start: Optional[str] = typer.Option(
            None, "--start", help="When the window starts: a date (2026-11-29T16:00:00Z) or epoch seconds; default now."
        ),
        db: Optional[str] = typer.Option(None, "--db"),
    ) -> None:
        """Silence a node for a while (from --start, default now). Evidence is judged on its own
        time: a replayed line from before the window is not silenced."""
        from engine.cli.common import _db, _err, _since
        from engine.facts import NODE_RE
        from engine.rulebook.schema import parse_duration
        from engine.store import Store

        seconds = parse_duration(for_)
        if not seconds:
            _err(f"--for {for_!r} is not a duration (e.g. 30m, 2h)")
            raise typer.Exit(2)
        if not NODE_RE.match(node):
            _err(f"--node {node!r} is not a valid node name")
            raise typer.Exit(2)
        begin = SYSTEM.wall() if start is None else _since(start)
        store = Store(_db(db))
        sid = store.add_silence(node, begin + seconds, reason, by, start=begin)
        typer.echo(
            f"silence {sid}: {node} until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(begin + seconds))} ({reason})"
        )

    @silence_app.command("list")
    def silence_list(
        db: Optional[str] = typer.Option(None, "--db"),
        json_out: bool = typer.Option(False, "--json"),
        all_: bool = typer.Option(False, "--all", help="Also expired silences."),
    ) -> None:
        """List active silences."""
        from engine.cli.common import _db
        from engine.store import Store

        store = Store(_db(db))
        rows = store.silences(active_at=None if all_ else SYSTEM.wall())
        for r in rows:
            if json_out:
                typer.echo(json.dumps(r))
            else:
                until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["until"]))
                typer.echo(
                    f"{r['id']}\t{r['node']}\tuntil {until}\t{r['reason']}" + (f"\tby {r['by']}" if r.get("by") else "")
                )

    @silence_app.command("remove")
    def silence_remove(silence_id: int = typer.Argument(...), db: Optional[str] = typer.Option(None, "--db")) -> None:
        """Remove a silence by id."""
        from engine.cli.common import _db, _err
        from engine.store import Store

        if not Store(_db(db)).remove_silence(silence_id):
            _err(f"no silence {silence_id}")
            raise typer.Exit(2)
        typer.echo(f"removed silence {silence_id}")

    _register_review(app)
    _register_rules(rules_app)


# -- review and report ---------------------------------------------------------------------------
def _register_review(app: typer.Typer) -> None:
    @app.command("review")
    def review(
        incident: Optional[str] = typer.Argument(None, help="Incident id (as `recover incidents` lists it)."),
        agree: bool = typer.Option(False, "--agree", help="The decision was right."),
        disagree: bool = typer.Option(
            False, "--disagree", help="The decision was wrong (say what you did with --did)."
        ),
        did: Optional[str] = typer.Option(None, "--did", help="What the operator actually did."),
        by: Optional[str] = typer.Option(None, "--by", help="Who reviewed (default: the current user)."),
        import_file: Optional[str] = typer.Option(
            None,
            "--import",
            help="Import reviews: JSON list, JSON lines, or CSV with columns incident,verdict,did,by[,at].",
        ),
        db: Optional[str] = typer.Option(
            None,
            "--db",
            help="Incident store: a SQLite file, or a postgresql://... DSN (default: $RECOVER_DB or ./recover.db).",
        ),
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    ) -> None:
        """Record an operator's verdict on an incident's decision, or import verdicts from a ticket system."""
        from engine.cli.common import _err
        from engine.ops.review import ReviewError, import_reviews, parse_import, parse_incident_id, record_review

        if import_file is not None:
            if incident is not None or agree or disagree or did or by:
                _err("--import takes no INCIDENT, --agree/--disagree, --did or --by (they come from the file)")
                raise typer.Exit(2)
            try:
                text = Path(import_file).read_bytes().decode("utf-8")
            except OSError as exc:
                _err(f"{import_file}: {exc.strerror or exc}")
                raise typer.Exit(2) from None
            except UnicodeDecodeError as exc:
                _err(f"{import_file}: not UTF-8 text (byte {exc.start})")
                raise typer.Exit(2) from None
            store = _open_store(db)
            with _exit_on(ReviewError):
                rows, problems = parse_import(text, import_file)
            result = import_reviews(store, rows)
            rejected = sorted(problems + result.rejected, key=lambda p: p.line)
            for p in rejected:
                _err(f"{import_file}:{p.line}: {p.message}")
            summary = {
                "imported": len(result.imported),
                "duplicates": len(result.duplicates),
                "rejected": len(rejected),
                "problems": [{"line": p.line, "message": p.message} for p in rejected],
            }
            if json_out:
                typer.echo(json.dumps(summary))
            else:
                typer.echo(
                    f"{import_file}: imported {summary['imported']} review(s), {summary['duplicates']} already recorded, "
                    f"{summary['rejected']} rejected"
                )
            raise typer.Exit(2 if rejected else 0)

        if incident is None:
            _err("give an INCIDENT with --agree or --disagree, or --import FILE")
            raise typer.Exit(2)
        if agree == disagree:
            _err("give exactly one of --agree or --disagree")
            raise typer.Exit(2)
        with _exit_on(ReviewError):
            inc = parse_incident_id(incident)
        store = _open_store(db)
        with _exit_on(ReviewError):
            rid = record_review(store, inc, "agree" if agree else "disagree", did, by or _default_reviewer())
        row = store.incident(inc)
        rec = store.reviews(inc)[-1]
        if json_out:
            typer.echo(json.dumps(rec | {"fault_class": row.fault_class, "decision": row.decision}))
        else:
            typer.echo(
                f"review {rid}: incident {inc} ({row.fault_class} → {row.decision}): {rec['verdict']}"
                + (f", did: {rec['did']}" if rec["did"] else "")
                + (f" (by {rec['by']})" if rec["by"] else "")
            )

    @app.command("report")
    def report(
        since: Optional[str] = typer.Option(
            None,
            "--since",
            help="Only incidents from then on: 2026-11-01, 2026-11-01T08:00Z, or back from now: 12h, 7d, 2w.",
        ),
        json_out: bool = typer.Option(False, "--json", help="The whole report as one JSON object."),
        html: Optional[str] = typer.Option(None, "--html", help="Write the report as one self-contained HTML page."),
        db: Optional[str] = typer.Option(
            None,
            "--db",
            help="Incident store: a SQLite file, or a postgresql://... DSN (default: $RECOVER_DB or ./recover.db).",
        ),
        min_reviewed: int = typer.Option(
            50, "--min-reviewed", help="Reviewed incidents a decision kind needs for autonomy."
        ),
        min_agreement: float = typer.Option(
            0.95, "--min-agreement", help="Agreement a decision kind needs for autonomy (0-1)."
        ),
    ) -> None:
        """Agreement of operators with Recover's decisions, detection latency, and which decisions may act."""
        from engine.cli.common import _err
        from engine.ops.report import Thresholds, build_report, parse_since, print_report
        from engine.ops.report_html import render_html
        from engine.ops.review import ReviewError

        if min_reviewed < 1:
            _err("--min-reviewed must be at least 1")
            raise typer.Exit(2)
        if not 0.0 < min_agreement <= 1.0:
            _err("--min-agreement is a fraction between 0 and 1, e.g. 0.95")
            raise typer.Exit(2)
        with _exit_on(ReviewError):
            since_t = parse_since(since)
        store = _open_store(db, readonly=True)
        rep = build_report(store, since_t, Thresholds(min_reviewed, min_agreement))
        if html is not None:
            _write_or_exit(html, render_html(rep))
        if json_out:
            typer.echo(json.dumps(rep, default=str))
        elif html is not None:
            typer.echo(f"wrote {html}: {rep['totals']['incidents']} incident(s), {rep['totals']['reviewed']} reviewed")
        else:
            print_report(rep, width=int(os.environ.get("COLUMNS", "120")))


# -- rules schema / show / explain-line --------------------------------------------------------------
def _register_rules(rules_app: typer.Typer) -> None:
    rules_opt = typer.Option(
        None, "--rules", "-r", help="Site rulebook file or folder, layered over the defaults (repeatable)."
    )
    no_defaults_opt = typer.Option(False, "--no-defaults", help="Do not load the shipped default rulebook.")

    @rules_app.command("schema")
    def rules_schema(
        output: Optional[str] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    ) -> None:
        """Print the JSON Schema (draft 2020-12) of a rulebook file, for editors (yaml-language-server)."""
        from engine.ops.schema_json import rulebook_schema

        text = json.dumps(rulebook_schema(), indent=2) + "\n"
        if output is None:
            typer.echo(text, nl=False)
            return
        _write_or_exit(output, text)
        typer.echo(f"wrote {output}")

    @rules_app.command("show")
    def rules_show(
        rules: Optional[List[str]] = rules_opt,
        no_defaults: bool = no_defaults_opt,
        section: Optional[List[str]] = typer.Option(
            None,
            "--section",
            "-s",
            help="Only these sections: "
            "fault_classes, lists, macros, matchers, rules, actions, policy, tests (repeatable).",
        ),
        name: Optional[str] = typer.Option(None, "--name", "-k", help="Only items whose name contains this."),
        json_out: bool = typer.Option(False, "--json", help="The effective rulebook as one JSON object."),
    ) -> None:
        """Print the effective rulebook after site layering, with the file:line each item came from and what overrode it."""
        from engine.cli.common import _err, _load_or_exit
        from engine.ops.rules_inspect import SECTIONS, effective_rulebook, summary_of

        bad = [s for s in section or [] if s not in SECTIONS]
        if bad:
            _err(f"unknown section(s) {', '.join(bad)}; one of: {', '.join(SECTIONS)}")
            raise typer.Exit(2)
        compiled = _load_or_exit(rules or [], no_defaults, tests=True)
        doc = effective_rulebook(compiled)
        wanted = section or list(SECTIONS)

        def keep(item: dict) -> bool:
            label = item.get("id") or item.get("name") or item.get("key") or ""
            return name is None or name in label

        doc = {"files": doc["files"], **{s: [i for i in doc[s] if keep(i)] for s in wanted}}
        if json_out:
            typer.echo(json.dumps(doc, default=str))
            return
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # every cell is the rulebook's own text (regexes, descriptions, paths): shown as it is, never
        # read as Rich markup, where `[a-z]` is a style tag that vanishes and `[/-]` is an error
        console = Console(width=int(os.environ.get("COLUMNS", "160")))
        console.print(
            f"effective rulebook from {len(doc['files'])} file(s): {', '.join(doc['files'])}",
            highlight=False,
            markup=False,
        )
        for s in wanted:
            items = doc[s]
            table = Table(title=f"{s} ({len(items)})", title_justify="left")
            for col in ("name", "defined at", "overridden by", "effective"):
                table.add_column(col, overflow="fold")
            for item in items:
                label = item.get("id") or item.get("name") or item.get("key")
                table.add_row(
                    Text(str(label)),
                    Text(item.get("defined_at") or "-"),
                    Text(", ".join(item.get("overridden_by") or []) or "-"),
                    Text(summary_of(s, item)),
                )
            console.print(table)

    @rules_app.command("explain-line")
    def rules_explain_line(
        line: str = typer.Argument(..., help="One log line, quoted."),
        source: str = typer.Option("any", "--source", help="job | kernel | slurm | any: which matchers apply."),
        rules: Optional[List[str]] = rules_opt,
        no_defaults: bool = no_defaults_opt,
        job: Optional[str] = typer.Option(
            None, "--job", help="Job id the line belongs to (as a log file name would say)."
        ),
        node: Optional[str] = typer.Option(None, "--node", help="The node the line comes from."),
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    ) -> None:
        """Show which matchers hit one log line (with groups) and which rules fire from it alone."""
        from engine.cli.common import _err, _load_or_exit
        from engine.facts import JOB_RE, NODE_RE
        from engine.ops.rules_inspect import explain_line

        if source not in _SOURCES:
            _err(f"--source {source!r}: one of {', '.join(_SOURCES)}")
            raise typer.Exit(2)
        if job is not None and not JOB_RE.match(job):
            _err(f"--job {job!r} is not a job id")
            raise typer.Exit(2)
        if node is not None and not NODE_RE.match(node):
            _err(f"--node {node!r} is not a node name")
            raise typer.Exit(2)
        if "\n" in line.rstrip("\n"):
            _err("give one line (it contains a newline)")
            raise typer.Exit(2)
        compiled = _load_or_exit(rules or [], no_defaults)
        out = explain_line(compiled, line, source=source, job=job, node=node)
        if json_out:
            typer.echo(json.dumps(out, default=str))
            return
        echo = typer.echo
        echo(f"line ({source}): {out['line']}")
        if not out["hits"]:
            echo(f"no matcher for source {source!r} hits this line")
        else:
            echo(f"matchers that hit ({len(out['hits'])}):")
        for h in out["hits"]:
            echo(f"  {h['matcher']}  [{h['emit']}]  {h['at']}")
            if h["groups"]:
                echo("      groups: " + ", ".join(f"{k}={v!r}" for k, v in sorted(h["groups"].items())))
            if h["fact"]:
                attrs = {k: v for k, v in h["fact"]["attrs"].items() if k != "text"}
                echo(f"      fact:   {h['fact']['kind']} {json.dumps(attrs, default=str)}")
            elif h["emit"] == "context":
                echo("      (context: updates what is known about the file's job; no fact)")
        if out["firings"]:
            echo(f"rules that fire from this line alone ({len(out['firings'])}):")
            for f in out["firings"]:
                p = f["produces"]
                what = f"fault {p['fault_class']}" if p["kind"] == "fault" else f"symptom {p['name']} ({p['severity']})"
                echo(f"  {f['rule']}  → {what}  {f['at']}")
                echo(f"      {f['status']}")
        elif out["hits"]:
            echo(
                "no rule fires from this line alone (rules may need more evidence: other lines, Xids, scheduler state)"
            )
        if (
            out["incidents"]
            and job is None
            and not any(h["fact"] and h["fact"]["attrs"].get("job") for h in out["hits"])
        ):
            echo("(no job is known for this line: give --job ID to see the incident of a job and its commands)")
        for inc in out["incidents"]:
            echo(
                f"incident: {inc['fault_class']} → {inc['decision']}"
                + (f" on {', '.join(inc['nodes'])}" if inc["nodes"] else "")
            )
            for cmd in inc["commands"]:
                echo("  would run: " + " ".join(cmd))
            for g in inc["guards"]:
                echo(f"  guard {g.get('guard')}: {g.get('why')}")
            whys = {g.get("why") for g in inc["guards"]}
            for pr in inc["problems"]:
                if pr not in whys:
                    echo(f"  note: {pr}")
