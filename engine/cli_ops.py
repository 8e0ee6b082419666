"""Operator commands: silences (more join here: review, report, rules schema/show/explain-line)."""

from __future__ import annotations

import json
import time
from typing import Optional

import typer

__all__ = ["register"]


def register(app: typer.Typer, rules_app: typer.Typer) -> None:
    silence_app = typer.Typer(no_args_is_help=True, help="Silence nodes for maintenance: their incidents are only recorded.")
    app.add_typer(silence_app, name="silence")

    @silence_app.command("add")
    def silence_add(node: str = typer.Option(..., "--node"), for_: str = typer.Option("2h", "--for", help="e.g. 30m, 2h"),
                    reason: str = typer.Option(..., "--reason"), by: Optional[str] = typer.Option(None, "--by"),
                    db: Optional[str] = typer.Option(None, "--db")) -> None:
        """Silence a node for a while."""
        from .cli import _db, _err
        from .linefacts import NODE_RE
        from .rulebook.schema import parse_duration
        from .store import Store

        seconds = parse_duration(for_)
        if not seconds:
            _err(f"--for {for_!r} is not a duration (e.g. 30m, 2h)")
            raise typer.Exit(2)
        if not NODE_RE.match(node):
            _err(f"--node {node!r} is not a valid node name")
            raise typer.Exit(2)
        store = Store(_db(db))
        sid = store.add_silence(node, time.time() + seconds, reason, by)
        typer.echo(f"silence {sid}: {node} until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(time.time() + seconds))} ({reason})")

    @silence_app.command("list")
    def silence_list(db: Optional[str] = typer.Option(None, "--db"), json_out: bool = typer.Option(False, "--json"),
                     all_: bool = typer.Option(False, "--all", help="Also expired silences.")) -> None:
        """List active silences."""
        from .cli import _db
        from .store import Store

        store = Store(_db(db))
        rows = store.silences(active_at=None if all_ else time.time())
        for r in rows:
            if json_out:
                typer.echo(json.dumps(r))
            else:
                until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["until"]))
                typer.echo(f"{r['id']}\t{r['node']}\tuntil {until}\t{r['reason']}" + (f"\tby {r['by']}" if r.get("by") else ""))

    @silence_app.command("remove")
    def silence_remove(silence_id: int = typer.Argument(...), db: Optional[str] = typer.Option(None, "--db")) -> None:
        """Remove a silence by id."""
        from .cli import _db, _err
        from .store import Store

        if not Store(_db(db)).remove_silence(silence_id):
            _err(f"no silence {silence_id}")
            raise typer.Exit(2)
        typer.echo(f"removed silence {silence_id}")
