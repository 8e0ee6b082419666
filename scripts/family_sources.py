#!/usr/bin/env python3
"""How many sources the rulebook's embedded tests quote, per matcher and per family (issue 20:
"every matcher family has test lines from >= 3 sources").

    scripts/family_sources.py                  # the shipped rulebook: table and summary
    scripts/family_sources.py site.yaml        # with a site's files layered on
    scripts/family_sources.py --group prefix   # families by matcher id prefix instead of class
    scripts/family_sources.py --write-debt     # record the matchers under 3 sources (the ratchet)

A matcher's sources are the distinct URL keys (GitHub owner/name, else the host) written in the
comment block directly above the positive tests whose lines it hits; a test with no URL is
counted as constructed. See engine/ops/family_sources.py.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.errors import RecoverError
from engine.ops.family_sources import ENOUGH, GROUPS, SourcesReport, measure
from engine.rulebook import require_rulebook

DEBT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests/rules/family_sources_debt.txt")
DEBT_HEADER = (
    "# Matchers whose positive embedded tests quote fewer than 3 distinct sources (issue 20).\n"
    "# Written by scripts/family_sources.py --write-debt; tests/rules/test_family_sources.py fails\n"
    "# when a matcher not listed here is under 3, or one listed here has reached 3 (remove it).\n"
)


def _summary(report: SourcesReport, group: str) -> list[str]:
    rows = report.rows.values()
    enough = sum(1 for r in rows if len(r.sources) >= ENOUGH)
    some = sum(1 for r in rows if 0 < len(r.sources) < ENOUGH)
    none = sum(1 for r in rows if not r.sources)
    out = [
        f"matchers: {len(report.rows)}; >= {ENOUGH} sources: {enough}; 1-2: {some}; 0: {none} "
        f"(positive tests: {report.positive_tests}, constructed: {report.constructed_tests})"
    ]
    fams = report.families(group)
    members = report.family_members(group)
    f_enough = sorted(f for f, s in fams.items() if len(s) >= ENOUGH)
    f_some = sorted(f for f, s in fams.items() if 0 < len(s) < ENOUGH)
    f_none = sorted(f for f, s in fams.items() if not s)
    out.append(
        f"families (by {group}): {len(fams)}; >= {ENOUGH} sources: {len(f_enough)}; 1-2: {len(f_some)}; "
        f"0: {len(f_none)}"
    )
    for f in sorted(fams, key=lambda f: (len(fams[f]), f)):
        out.append(f"  {len(fams[f]):3d} sources  {len(members[f]):3d} matchers  {f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="site rulebook files or folders, layered on the shipped ones")
    ap.add_argument("--group", choices=GROUPS, default="class", help="how matchers are grouped into families")
    ap.add_argument("--under", action="store_true", help="list only the matchers under 3 sources")
    ap.add_argument("--write-debt", nargs="?", const=DEBT, metavar="FILE", help=f"write the debt list (default {DEBT})")
    args = ap.parse_args(argv)
    try:
        compiled = require_rulebook(args.paths, tests=True)
    except RecoverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    report = measure(compiled, args.paths)
    print(f"{'sources':>7} {'constr':>6}  matcher  [family]  sources")
    for r in report.rows.values():
        if args.under and len(r.sources) >= ENOUGH:
            continue
        print(
            f"{len(r.sources):7d} {r.constructed:6d}  {r.id}  [{r.family(args.group)}]  {', '.join(sorted(r.sources))}"
        )
    print()
    print("\n".join(_summary(report, args.group)))
    if args.write_debt:
        with open(args.write_debt, "w", encoding="utf-8") as fh:
            fh.write(DEBT_HEADER)
            fh.writelines(f"{m}\n" for m in sorted(report.under(ENOUGH)))
        print(f"wrote {len(report.under(ENOUGH))} matcher(s) to {args.write_debt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
