#!/usr/bin/env python3
"""Score the fallback layers alone on the corpus's train side (issue 20, item 2).

    scripts/ablate_eval.py                     # per class: cases, right, other, nothing; healthy price
    scripts/ablate_eval.py --normal            # and the ordinary eval of the same train cases
    scripts/ablate_eval.py --list CLASS        # the ids and answers of CLASS's train cases, ablated
    scripts/ablate_eval.py --price             # the ids of train healthy cases the fallback opens
    scripts/ablate_eval.py --misses CLASS      # CLASS's train cases the fallback opens nothing for,
                                               # each with its log's last lines (--stream, --tail)

Every train case is replayed with the specific matchers switched off (engine/ops/ablate.py), so
only the weak vocabulary and the log-ending reader can answer: how an unseen wording fares.
Holdout cases are never read: tests/corpus/holdout/ is skipped, and of the rest only the cases the
manifest puts on the train side are used.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from engine.ops.ablate import ablate_eval, layer
from engine.ops.corpus_eval import HEALTHY, Case, evaluate
from engine.ops.corpus_split import train_side_cases
from engine.rulebook import require_rulebook

CORPUS = os.path.join(ROOT, "tests", "corpus")


def train_cases(corpus: str = CORPUS) -> list[Case]:
    try:
        return train_side_cases(corpus)
    except ValueError as exc:  # no manifest, or one that cannot be read
        raise SystemExit(str(exc)) from None


def last_lines(text: str, n: int) -> list[str]:
    """The last ``n`` non-blank lines of a case's text."""
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    return lines[-n:] if n > 0 else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--rules", nargs="*", default=[], help="rulebook files after the shipped ones")
    ap.add_argument("--normal", action="store_true", help="also the ordinary eval of the train cases")
    ap.add_argument(
        "--list",
        metavar="CLASS",
        help="ids and ablated answers of CLASS's train cases (or of a stream's: kernel, slurm, mixed, app)",
    )
    ap.add_argument("--price", action="store_true", help="ids of train healthy cases the fallback opens")
    ap.add_argument(
        "--misses", metavar="CLASS", help="CLASS's train cases the fallback opens nothing for ('all': every class)"
    )
    ap.add_argument("--stream", default="", help="with --misses: only cases of this stream (app, slurm, kernel, mixed)")
    ap.add_argument("--tail", type=int, default=3, help="with --misses: how many of the log's last lines to print")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the pipeline's own notices are not the figures

    compiled = require_rulebook(args.rules)
    cases = train_cases(args.corpus)
    report = ablate_eval(compiled, cases)
    print(f"ablated (fallback layers alone), train side: {len(cases)} cases")
    for line in report.text():
        print(line)
    wrong = report.wrong_answers()
    if wrong:
        print("other-class answers: " + ", ".join(f"{a}->{b} {n}" for (a, b), n in wrong.most_common()))
    if args.price:
        for r in report.price:
            print(f"price: {r.case.id} -> {r.got}")
    if args.list:
        for r in report.results:
            if r.case.label == args.list or r.case.stream == args.list:
                print(f"{r.case.id}: {r.got} ({layer(r)})")
    if args.misses:
        for r in report.results:
            c = r.case
            if c.label == HEALTHY or r.got != HEALTHY or args.misses not in ("all", c.label):
                continue
            if args.stream and c.stream != args.stream:
                continue
            print(f"--- {c.id} [{c.label}, {c.stream}]")
            for line in last_lines(c.text, args.tail):
                print(f"    {line[:220]}")
    if args.normal:
        normal = evaluate(compiled, cases)
        healthy_open = sum(1 for r in normal.results if r.case.label == HEALTHY and not r.right)
        healthy = sum(1 for r in normal.results if r.case.label == HEALTHY)
        by = Counter((r.case.label, r.got) for r in normal.misses)
        print(
            f"normal, train side: {normal.right}/{normal.total} = {100 * normal.accuracy:.1f} %, "
            f"healthy open {healthy_open} of {healthy}, weak right {normal.weak_right}"
        )
        print("normal misses: " + ", ".join(f"{a}->{b} {n}" for (a, b), n in by.most_common()))
        streams: dict[str, Counter[str]] = {}
        for r in normal.results:
            row = streams.setdefault(r.case.stream, Counter())
            row["cases"] += 1
            row["right"] += int(r.right)
            row["healthy open"] += int(r.case.label == HEALTHY and not r.right)
        print(
            "normal per stream: "
            + ", ".join(
                f"{k} {v['right']}/{v['cases']} (healthy open {v['healthy open']})" for k, v in sorted(streams.items())
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
