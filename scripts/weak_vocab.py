#!/usr/bin/env python3
"""Mine candidate weak-evidence keywords from the corpus's train side (issue 20, "What to build" 2).

    scripts/weak_vocab.py                      # candidates per class, from every train source
    scripts/weak_vocab.py --min-sources 4 --top 15
    scripts/weak_vocab.py --split              # mine on the even-hash train sources, score the odd half
    scripts/weak_vocab.py --split --vocab rules/28-weak-mined.yaml   # the hand-kept list, re-qualified

For each class that has keywords (the weak layer's classes), a candidate is a case-folded word or
2-3 word phrase of the error-like lines of failing train cases (a line naming an error, a failure,
an exception, a kill, an abort..., or one of the last 5 lines) that appears in cases of that class
from at least --min-sources different sources, in no healthy train case (anywhere in its text),
and in at most --max-other cases of other classes. It prints figures and tokens, never case text.

Holdout cases are never read: files under a holdout/ folder are skipped, and of the rest only the
cases the manifest puts on the train side are used.

--split: the train sources are cut in two by sha256(source key) (even last hex digit: mining
half; odd: scoring half). The candidates mined on the even half, with no hand selection, are
appended to each class's keywords, and the odd half is evaluated with and without them: how many
odd-half misses become right and how many rights become wrong. That is the generalisation
estimate of mined vocabulary; the corpus figure is not (the tokens were mined from it). With
--vocab FILE, the keywords of FILE (a hand-kept list) that pass the same criteria on the even half
alone are scored instead (the hand choice itself saw the whole train side: an optimistic figure).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import yaml

from engine.errors import RecoverError
from engine.ops.corpus_eval import HEALTHY, Case, evaluate
from engine.ops.corpus_split import train_side_cases
from engine.rulebook import require_rulebook
from engine.rulebook.weak import keyword_pattern

CORPUS = os.path.join(ROOT, "tests", "corpus")
ERRORISH = re.compile(
    r"error|fail|fatal|exception|killed|abort|traceback|denied|refused|timed? ?out|terminat|panic|cannot|unable",
    re.I,
)
WORD = re.compile(r"[a-z_][a-z0-9_'-]*[a-z0-9_]|[a-z]")
#: words that carry no meaning alone; a phrase made only of them is no candidate
STOP = frozenset(
    "a an and are as at be by for from has have in is it its not of on or the this that to was were with "
    "error errors failed failure fail fatal exception warning warn info debug line file self return raise "
    "call last most recent traceback job task rank process main python py lib site-packages packages "
    "during handling above another occurred torch".split()
)


def train_cases() -> list[Case]:
    try:
        return train_side_cases(CORPUS)
    except ValueError as exc:  # no manifest, or one that cannot be read
        raise SystemExit(str(exc)) from None


def error_lines(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return [ln for i, ln in enumerate(lines) if ERRORISH.search(ln) or i >= len(lines) - 5]


def tokens(lines: list[str]) -> set[str]:
    out: set[str] = set()
    for ln in lines:
        words = WORD.findall(ln.lower())
        for n in (1, 2, 3):
            for i in range(len(words) - n + 1):
                gram = words[i : i + n]
                if all(w in STOP for w in gram) or (n == 1 and len(gram[0]) < 4):
                    continue
                if gram[0] in STOP or gram[-1] in STOP:
                    continue  # a phrase begins and ends on a meaningful word
                out.add(" ".join(gram))
    return out


def mine(cases: list[Case], classes: dict[str, list[str]], min_sources: int, max_other: int) -> dict[str, list[tuple]]:
    """Per class: (token, sources in class, cases of other classes, cases in class, has it already)."""
    healthy: set[str] = set()
    per_case: list[tuple[str, str, set[str]]] = []
    for c in cases:
        if c.label == HEALTHY:
            healthy |= tokens(c.text.splitlines())
        else:
            per_case.append((c.label, c.repo, tokens(error_lines(c.text))))
    sources: dict[tuple[str, str], set[str]] = defaultdict(set)
    in_class: dict[tuple[str, str], int] = defaultdict(int)
    anywhere: dict[str, int] = defaultdict(int)
    for label, repo, toks in per_case:
        for t in toks:
            anywhere[t] += 1
            if label in classes:
                sources[(label, t)].add(repo)
                in_class[(label, t)] += 1
    out: dict[str, list[tuple]] = {k: [] for k in classes}
    for (label, t), srcs in sources.items():
        other = anywhere[t] - in_class[(label, t)]
        if len(srcs) < min_sources or t in healthy or other > max_other or other >= in_class[(label, t)]:
            continue
        has = bool(re.search(keyword_pattern(classes[label]), t, re.I)) if classes[label] else False
        out[label].append((t, len(srcs), other, in_class[(label, t)], has))
    for label in out:
        out[label].sort(key=lambda r: (-r[1], r[2], -len(r[0]), r[0]))
    return out


def keyword_classes() -> dict[str, list[str]]:
    compiled = require_rulebook()
    return {name: list(fc.keywords) for name, fc in compiled.fault_classes.items() if fc.keywords}


def half(key: str) -> str:
    return "even" if int(hashlib.sha256(key.encode("utf-8")).hexdigest()[-1], 16) % 2 == 0 else "odd"


def vocab_file(path: str) -> dict[str, list[str]]:
    """The keywords per class of a rulebook file (fault_classes.<class>.keywords)."""
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return {k: [str(w) for w in (v or {}).get("keywords", [])] for k, v in (raw.get("fault_classes") or {}).items()}


def qualify(cases: list[Case], vocab: dict[str, list[str]], min_sources: int, max_other: int) -> dict[str, list[str]]:
    """The keywords that pass mine()'s criteria on these cases alone, matched as the weak layer
    matches them (whole words, any case, any run of spaces)."""
    healthy = [c.text for c in cases if c.label == HEALTHY]
    failing = [(c.label, c.repo, error_lines(c.text)) for c in cases if c.label != HEALTHY]
    out: dict[str, list[str]] = {}
    for label, words in vocab.items():
        keep = []
        for w in words:
            pat = re.compile(keyword_pattern([w]), re.I)
            hits = [(lab, repo) for lab, repo, lines in failing if any(pat.search(ln) for ln in lines)]
            srcs = {repo for lab, repo in hits if lab == label}
            other = sum(1 for lab, _ in hits if lab != label)
            if len(srcs) >= min_sources and other <= max_other and not any(pat.search(t) for t in healthy):
                keep.append(w)
        out[label] = keep
    return out


def split_estimate(cases: list[Case], classes: dict[str, list[str]], args: argparse.Namespace) -> None:
    even = [c for c in cases if half(c.repo) == "even"]
    odd = [c for c in cases if half(c.repo) == "odd"]
    if args.vocab:
        new = qualify(even, vocab_file(args.vocab), args.min_sources, args.max_other)
        what = f"keywords of {args.vocab} that qualify on the even half alone"
    else:
        mined = mine(even, classes, args.min_sources, args.max_other)
        new = {k: [r[0] for r in rows if not r[4]] for k, rows in mined.items()}
        what = "tokens mined on the even half (no hand selection)"
    print(
        f"split: mining half {len(even)} cases ({len({c.repo for c in even})} sources); scoring half {len(odd)} cases"
    )
    print(f"{what}: " + ", ".join(f"{k} {len(v)}" for k, v in new.items()))
    with tempfile.TemporaryDirectory() as tmp:
        layer = os.path.join(tmp, "99-mined-even.yaml")
        with open(layer, "w", encoding="utf-8") as fh:
            fh.write("fault_classes:\n")
            for k, toks in new.items():
                if toks:
                    fh.write(f"  {k}:\n    override: {{keywords: append}}\n    keywords: {toks!r}\n")
        base = evaluate(require_rulebook(), odd)
        more = evaluate(require_rulebook([layer]), odd)
    before = {r.case.id: r for r in base.results}
    gained = [r for r in more.results if r.right and not before[r.case.id].right]
    lost = [r for r in more.results if not r.right and before[r.case.id].right]
    healthy = sum(1 for r in more.results if r.case.label == HEALTHY and r.incidents)
    print(
        f"odd half: right {base.right}/{base.total} -> {more.right}/{more.total}; misses that became right "
        f"{len(gained)} of {base.total - base.right}; right->wrong {len(lost)}; healthy with an incident {healthy}; "
        f"weak right {base.weak_right} -> {more.weak_right}"
    )
    for r in gained:
        print(f"  gained {r.case.id}: {r.case.label}")
    for r in lost:
        print(f"  lost {r.case.id}: {r.case.label} -> {r.got}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-sources", type=int, default=3)
    ap.add_argument("--max-other", type=int, default=2, help="most cases of other classes a token may appear in")
    ap.add_argument("--top", type=int, default=30, help="candidates shown per class")
    ap.add_argument("--split", action="store_true", help="mine on even-hash sources, score the odd half")
    ap.add_argument(
        "--vocab", metavar="FILE", help="with --split: score FILE's keywords that qualify on the even half instead"
    )
    args = ap.parse_args(argv)
    try:
        classes = keyword_classes()
        cases = train_cases()
        if args.split:
            split_estimate(cases, classes, args)
            return 0
        mined = mine(cases, classes, args.min_sources, args.max_other)
    except RecoverError as exc:
        print(f"weak_vocab: {exc}", file=sys.stderr)
        return 2
    print(f"train cases: {len(cases)} ({len({c.repo for c in cases})} sources)")
    for label, rows in mined.items():
        print(f"{label}: {len(rows)} candidates ({sum(not r[4] for r in rows)} new)")
        print(f"  {'token':<40} {'sources':>7} {'other':>5} {'cases':>5} {'healthy':>7} has")
        for t, n_src, other, n_cases, has in rows[: args.top]:
            print(f"  {t:<40} {n_src:>7} {other:>5} {n_cases:>5} {0:>7} {'yes' if has else 'no'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
