"""Check the scanner against the truth: every line of every corpus case, each plain matcher's own
RE2 regex against what the scanner reported (the buffer scans only propose candidate lines; they
must never miss one, and never report a line the regex does not match).

    .venv/bin/python scripts/scan_truth.py [--backend hyperscan|re2|auto] [CORPUS_FILE ...]

Sampled and block-sampled progress matchers are left out (they report chosen lines by design).
Prints the case id, matcher and line of each difference (never the text), then one summary line;
exit 1 when there is a difference. Default files: the train side, tests/corpus/*.jsonl.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time

from engine.core.matching import CompiledSpec
from engine.core.scanner import Scanner, matcher_specs
from engine.ops.corpus_eval import load_cases
from engine.rulebook import load_rulebook


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "hyperscan", "re2"])
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    compiled = load_rulebook().compiled
    specs = matcher_specs(compiled)
    scanner = Scanner(specs, backend=args.backend)
    plain = [CompiledSpec(i, s) for i, s in enumerate(specs) if not s.sample and not s.block]
    cases, problems = load_cases(args.files or sorted(glob.glob("tests/corpus/*.jsonl")))
    for p in problems:
        print(p, file=sys.stderr)
    started = time.perf_counter()
    lines = truths = missed = extra = 0
    for case in cases:
        data = case.text.encode("utf-8", "surrogateescape")
        s = scanner.clone()
        got = {(h.matcher, h.line_no) for h in s.feed(data if data.endswith(b"\n") else data + b"\n") + s.flush()}
        for n, line in enumerate(data.split(b"\n"), 1):
            lines += 1
            line = line[:-1] if line.endswith(b"\r") else line
            for c in plain:
                truth = c.rx.search(line[: scanner.max_line]) is not None
                truths += truth
                if truth != ((c.idx, n) in got):
                    missed += truth
                    extra += not truth
                    what = "missed" if truth else "extra"
                    print(f"{case.id}: line {n}: matcher {specs[c.idx].id}: {what} by the {scanner.backend} scan")
    print(
        f"{len(cases)} cases, {lines} lines, {len(plain)} plain matchers, backend {scanner.backend}: "
        f"{truths} true hits, {missed} missed, {extra} extra ({time.perf_counter() - started:.1f} s)"
    )
    return 1 if missed or extra else 0


if __name__ == "__main__":
    sys.exit(main())
