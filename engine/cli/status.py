"""``recover status``: the leader, its term and lease, the followers, the scheduler's health and
the backlog, read from the store (engine.ops.status)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from engine.cli.common import DbOpt, JsonOpt, _exit_on, _open_store, app


@app.command()
def status(db: Optional[str] = DbOpt, json_out: bool = JsonOpt) -> None:
    """Who leads the store (holder, term, lease age), the followers, scheduler health and backlog."""
    from engine.ops.status import render_status, status_of
    from engine.store import StoreError

    store = _open_store(db, readonly=True)
    try:
        with _exit_on(StoreError):
            st = status_of(store)
    finally:
        store.close()
    typer.echo(json.dumps(st, indent=2) if json_out else render_status(st))
