"""``recover outage``: shared outages (policy.shared_outage), many jobs failing alike at once.

recover outage list                    # the shared outages, open first, with what they hold
recover outage end 6 --reason "lustre back"   # the leader ends it and releases its held requeues
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from engine.cli.common import DbOpt, JsonOpt, _err, _exit_on, _open_store, app

outage_app = typer.Typer(
    no_args_is_help=True, help="Shared outages: many jobs failing alike at once (policy.shared_outage)."
)
app.add_typer(outage_app, name="outage")


@outage_app.command("list")
def outage_list(db: Optional[str] = DbOpt, json_out: bool = JsonOpt) -> None:
    """The shared outage incidents, with the actions each still holds back."""
    from engine.store import StoreError

    store = _open_store(db, readonly=True)
    try:
        with _exit_on(StoreError):
            rows = [r for r in store.incidents() if r.key.startswith("outage:")]
            held = {r.id: store.held_actions(r.id) for r in rows}
    finally:
        store.close()
    for r in sorted(rows, key=lambda r: (r.status != "open", -r.id)):
        item = {
            "id": r.id,
            "status": r.status,
            "fault_class": r.fault_class,
            "opened_at": r.opened_at,
            "reason": r.reason,
            "held": [f"{a['action']} {a['target']} (incident {a['incident']})" for a in held[r.id]],
        }
        if json_out:
            typer.echo(json.dumps(item))
        else:
            typer.echo(f"{r.id}\t{r.status}\t{r.fault_class}\t{len(item['held'])} held\t{r.reason or ''}")


@outage_app.command("end")
def outage_end(
    incident: int = typer.Argument(..., help="The shared outage's incident id."),
    reason: str = typer.Option("ended by an operator", "--reason"),
    db: Optional[str] = DbOpt,
) -> None:
    """End a shared outage: the leading controller closes it at its next step and releases the
    requeues it held (as planned, or recommended in recommend mode). An outage that is closed
    already (a replay's, at the end of its input) has what it still holds released here."""
    from engine.core.shared_outage import end_key
    from engine.core.actions import safe_reason
    from engine.store import StoreError

    store = _open_store(db)
    try:
        with _exit_on(StoreError):
            row = store.incident(incident)
            if row is None or not row.key.startswith("outage:"):
                _err(f"incident {incident} is no shared outage (recover outage list)")
                raise typer.Exit(2)
            why = safe_reason(reason, 200) or "ended by an operator"
            if row.status == "open":
                store.set_meta(end_key(incident), why)
                n = len(store.held_actions(incident))
                typer.echo(
                    f"shared outage {incident}: the controller ends it at its next step and releases {n} held action(s)"
                )
                return
            n = store.release_held(
                incident, f"released: shared outage incident {incident} ended by an operator ({why})"
            )
            typer.echo(f"shared outage {incident} was closed already: {n} held action(s) released")
    finally:
        store.close()
