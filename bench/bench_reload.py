"""Rulebook reloads: RSS over N real reloads of an unchanged default rulebook (each one parsed,
validated and compiled again, as SIGHUP does), next to the cost of one reload whose rules did
change (a new durable_rules ruleset, which durable_rules never frees), measured in the same run.

    python bench/bench_reload.py [--reloads 100]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from _common import rss_mb  # noqa: E402  (puts the repository on sys.path)


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
    # the reference, in the same run: reloads that each register a new ruleset (as every reload
    # did before rulesets were reused, and as a reload whose rules changed still does)
    from engine.core import rete

    n_ref = max(1, args.reloads // 10)
    before_ref = rss_mb()
    for _ in range(n_ref):
        rete._RULESETS.clear()
        assert ctl.reload()
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
    ctl.store.close()


if __name__ == "__main__":
    main()
