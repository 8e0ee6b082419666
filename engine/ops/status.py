"""``recover status``: who leads the store (holder, term, lease age and what is left of it), the
controllers that follow, the scheduler's health as the leader last saw it, the partitions' modes
the leader applies (policy.scope), and the backlog (acted actions not finished, open incidents). Read from the store only: it works from any host that can
read the database, with no controller to ask."""

from __future__ import annotations

import json
from typing import Any

from engine.store import Store, StoreError

__all__ = ["status_of", "render_status"]


def status_of(store: Store) -> dict[str, Any]:
    """The store's HA state as a plain dict (the ``--json`` form)."""
    try:
        lease = store.lease()
        controllers = store.controllers()
    except StoreError as exc:
        if "no such table" not in str(exc):
            raise
        lease, controllers = None, []  # a store from before leases: no controller has led it
    leader: dict[str, Any] | None = None
    if lease is not None:
        leader = {
            "holder": lease.holder,
            "term": lease.term,
            "lease_age_s": round(lease.now - lease.acquired_at, 3),
            "renewed_s_ago": round(lease.now - lease.renewed_at, 3),
            "expires_in_s": round(lease.left_s, 3),
            "live": lease.live,
        }
    followers, scheduler, scope = [], None, None
    for c in controllers:
        info = json.loads(c["info"]) if c.get("info") else {}
        entry = {"holder": c["holder"], "role": c["role"], "mode": c["mode"], "seen_s_ago": round(c["age_s"], 3)}
        if isinstance(info.get("behind_bytes"), int):  # a warm follower (engine.live.standby): its lag
            entry["behind_bytes"], entry["files"] = info["behind_bytes"], info.get("files")
        if lease is not None and c["holder"] == lease.holder and lease.live:
            scheduler = info.get("scheduler")
            scope = info.get("scope") if isinstance(info.get("scope"), dict) else None
            if leader is not None:
                leader["mode"] = c["mode"]
        elif c["role"] == "follower" or (lease is not None and c["holder"] != lease.holder):
            followers.append(entry)
    try:
        backlog = store.backlog()
    except StoreError:
        backlog = {}
    return {
        "leader": leader if leader is not None and leader["live"] else None,
        "last_leader": leader,
        "followers": followers,
        "scheduler": scheduler or "unknown",
        "scope": scope,  # the leader's policy.scope: each partition's mode (engine.core.scope)
        "backlog": {
            "actions": sum(backlog.values()),
            "by_status": backlog,
            "open_incidents": store.count_incidents("open"),
        },
    }


def render_status(st: dict[str, Any]) -> str:
    lines = []
    ld = st["leader"]
    if ld is not None:
        lines.append(
            f"leader     {ld['holder']}  term {ld['term']}  lease held {ld['lease_age_s']:.1f} s, "
            f"renewed {ld['renewed_s_ago']:.1f} s ago, expires in {ld['expires_in_s']:.1f} s  ({ld.get('mode') or '-'})"
        )
    elif st["last_leader"] is not None:
        last = st["last_leader"]
        lines.append(f"leader     none: the lease of {last['holder']} (term {last['term']}) has run out")
    else:
        lines.append("leader     none: no controller has led this store")
    if st["followers"]:
        for f in st["followers"]:
            warm = f", warm: {f['files']} files, {f['behind_bytes']} bytes behind" if "behind_bytes" in f else ""
            lines.append(f"follower   {f['holder']}  seen {f['seen_s_ago']:.1f} s ago  ({f['mode'] or '-'}{warm})")
    else:
        lines.append("follower   none")
    lines.append(f"scheduler  {st['scheduler']}")
    sc = st.get("scope")
    if sc:
        named = ", ".join(f"{p} {m}" for p, m in sorted(sc.get("partitions", {}).items()))
        lines.append(
            f"scope      {named + '; ' if named else ''}other partitions {sc.get('default')}; "
            f"job comments {'read' if sc.get('job_comment') else 'not read'}"
        )
    b = st["backlog"]
    detail = ", ".join(f"{k} {v}" for k, v in sorted(b["by_status"].items()))
    lines.append(
        f"backlog    {b['actions']} actions unfinished{' (' + detail + ')' if detail else ''}, {b['open_incidents']} incidents open"
    )
    return "\n".join(lines)
