"""Rulebook reloads: RSS over N real reloads of an unchanged default rulebook (each one parsed,
validated and compiled again, as SIGHUP does), next to the cost of registering a new
durable_rules ruleset (never freed), measured in the same run; and the check a reload whose
rules changed makes in a child process before the controller restarts in place to load them.

    python bench/bench_reload.py [--reloads 100]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from _common import rss_mb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reloads", type=int, default=100)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from engine.live.controller import Controller, ControllerConfig
    from engine.rulebook import load_rulebook

    tmp = Path(tempfile.mkdtemp())
    cfg = ControllerConfig(db=str(tmp / "r.db"), overlays=[("site.yaml", "policy: {settle: 1s}\n")])
    ctl = Controller(cfg, load_rulebook(overlays=cfg.overlays).compiled)
    assert ctl.reload()
    start = rss_mb()
    t0 = time.perf_counter()
    for _ in range(args.reloads):
        assert ctl.reload()
    took = time.perf_counter() - t0
    after = rss_mb()
    # the reference, in the same run: networks that each register a new ruleset (what every
    # reload did before rulesets were reused; a reload whose rules changed now restarts instead)
    from engine.core import rete
    from engine.live.reload import engine_refusal

    n_ref = max(1, args.reloads // 10)
    before_ref = rss_mb()
    for _ in range(n_ref):
        rete._RULESETS.clear()
        rete.ReteNetwork(ctl.compiled)
    per_new = (rss_mb() - before_ref) / n_ref
    per_reuse = (after - start) / args.reloads
    print(
        f"{args.reloads} reloads of an unchanged rulebook: RSS {start:.1f} -> {after:.1f} MiB "
        f"({after - start:+.1f} MiB, {per_reuse:+.3f} MiB and {took / args.reloads:.2f} s per reload)"
    )
    print(
        f"reference, {n_ref} reloads each registering a new ruleset: {per_new:+.2f} MiB per reload; "
        f"ratio (reused / new) per reload: {per_reuse / per_new if per_new > 0 else float('nan'):.3f}"
    )
    t0 = time.perf_counter()
    assert engine_refusal(rete.ruleset_definition(ctl.compiled)) is None
    check = time.perf_counter() - t0
    print(
        f"a reload whose rules changed: its check in a child process {check:.2f} s "
        f"(ratio to an unchanged reload: {check / (took / args.reloads):.2f}), then a restart in place"
    )
    ctl.store.close()


if __name__ == "__main__":
    main()
