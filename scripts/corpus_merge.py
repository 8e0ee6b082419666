#!/usr/bin/env python3
"""Bring cases into the corpus on the side their source belongs to, and freeze the holdout.

    .venv/bin/python scripts/corpus_merge.py merge tests/corpus-incoming/*.jsonl [--corpus tests/corpus] [--dry-run]
    .venv/bin/python scripts/corpus_merge.py freeze [--corpus tests/corpus] [--date 2026-12-01]
    .venv/bin/python scripts/corpus_merge.py check [--corpus tests/corpus]

merge: every incoming line is validated as ``recover rules eval`` reads it (labels from the shipped
rulebook); a malformed line, an id the corpus already has, or a text the corpus already holds
(compared with whitespace collapsed) is rejected and reported. Each accepted case is appended,
line as given, to ``<corpus>/<incoming name>.jsonl`` when its source is on the train side, or to
``<corpus>/holdout/<incoming name>.jsonl`` when on the holdout side (the manifest's lists, then
the hash rule of engine/ops/corpus_split.py for a source it does not name). A source the manifest
did not name is then listed on the side it was placed on, so it stays there whatever becomes of the
hash rule; the frozen cases are not touched: a case from a holdout source is "added after the
freeze" until the next freeze.

freeze: rewrite the manifest at the start of a round (sources keep their side, new ones take the
hash rule, every holdout-side case is frozen as it is now) and move any case in a file of the
wrong side to the right one. check: print what breaks the split; exit 1 if anything does.

Exit status: 0 done, 1 some lines rejected (the rest merged) or the split is broken, 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.ops.corpus_eval import Case, load_cases
from engine.ops.corpus_split import (
    HOLDOUT_DIR,
    MANIFEST_NAME,
    TRAIN,
    Manifest,
    check_split,
    freeze,
    load_manifest,
    split_cases,
)


def _norm(text: str) -> str:
    return " ".join(text.split())


def _labels() -> list[str] | None:
    from engine.rulebook import load_rulebook

    result = load_rulebook()
    return list(result.compiled.policy.get("decisions", {})) if result.ok else None


def _manifest(corpus: str) -> tuple[Manifest | None, str]:
    path = os.path.join(corpus, MANIFEST_NAME)
    if not os.path.exists(path):
        return None, ""
    return load_manifest(path)


def _line_of(where: str) -> str:
    path, n = where.rsplit(":", 1)
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if i == int(n):
                return line.rstrip("\n")
    raise ValueError(f"{where}: line gone")


def _append(path: str, lines: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lead = ""
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            lead = "" if fh.read(1) == b"\n" else "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(lead + "".join(line + "\n" for line in lines))


def target_file(corpus: str, incoming: str, holdout: bool) -> str:
    name = os.path.splitext(os.path.basename(incoming))[0] + ".jsonl"
    return os.path.join(corpus, HOLDOUT_DIR, name) if holdout else os.path.join(corpus, name)


def merge(incoming: list[str], corpus: str, dry_run: bool = False, out=sys.stdout) -> int:
    labels = _labels()
    manifest, why = _manifest(corpus)
    if manifest is None:
        print(why or f"{corpus}: no {MANIFEST_NAME}: freeze the corpus first", file=sys.stderr)
        return 2
    existing, problems = load_cases([corpus], known_labels=labels)
    if problems:
        print("the corpus itself has bad lines; fix them first:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    ids = {c.id for c in existing}
    texts = {_norm(c.text): c.id for c in existing}
    rejected = 0
    placed = {"train": 0, "holdout": 0}
    named = manifest.holdout_sources | manifest.train_sources
    listed: dict[str, set[str]] = {"train": set(), "holdout": set()}
    for path in incoming:
        cases, bad = load_cases([path], known_labels=labels)
        for p in bad:
            print(f"rejected {p}", file=sys.stderr)
        rejected += len(bad)
        writes: dict[str, list[str]] = {}
        for c in cases:
            if c.id in ids:
                print(f"rejected {c.where}: id {c.id!r} is already in the corpus", file=sys.stderr)
                rejected += 1
                continue
            if _norm(c.text) in texts:
                print(f"rejected {c.where}: same text as corpus case {texts[_norm(c.text)]!r}", file=sys.stderr)
                rejected += 1
                continue
            ids.add(c.id)
            texts[_norm(c.text)] = c.id
            holdout = manifest.side_of(c.repo) != TRAIN
            placed["holdout" if holdout else "train"] += 1
            if c.repo not in named:
                listed["holdout" if holdout else "train"].add(c.repo)
            writes.setdefault(target_file(corpus, path, holdout), []).append(_line_of(c.where))
        for target, lines in writes.items():
            print(f"{'would append' if dry_run else 'appended'} {len(lines)} case(s) to {target}", file=out)
            if not dry_run:
                _append(target, lines)
    if (listed["train"] or listed["holdout"]) and not dry_run:
        pinned = dataclasses.replace(
            manifest,
            holdout_sources=manifest.holdout_sources | listed["holdout"],
            train_sources=manifest.train_sources | listed["train"],
        )
        _write_manifest(corpus, pinned)
    print(
        f"merged: {placed['train']} train, {placed['holdout']} holdout (added after the freeze); rejected: {rejected}",
        file=out,
    )
    if listed["train"] or listed["holdout"]:
        print(
            f"{'would list' if dry_run else 'listed'} new source(s) in {MANIFEST_NAME}: "
            f"{len(listed['train'])} train, {len(listed['holdout'])} holdout",
            file=out,
        )
    return 1 if rejected else 0


def _write_manifest(corpus: str, manifest: Manifest) -> None:
    with open(os.path.join(corpus, MANIFEST_NAME), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest.to_json(), indent=1, ensure_ascii=False) + "\n")


def do_freeze(corpus: str, date: str, out=sys.stdout) -> int:
    old, why = _manifest(corpus)
    if why:
        print(why, file=sys.stderr)
        return 2
    cases, problems = load_cases([corpus], known_labels=_labels())
    if problems:
        print("the corpus has bad lines; fix them first:", *problems, sep="\n  ", file=sys.stderr)
        return 2
    new = freeze(cases, old, date)
    moves: dict[str, list[Case]] = {}
    for c in cases:
        path = c.where.rsplit(":", 1)[0]
        holdout = new.side_of(c.repo) != TRAIN
        if (os.path.basename(os.path.dirname(path)) == HOLDOUT_DIR) != holdout:
            home = os.path.dirname(os.path.dirname(path)) if not holdout else os.path.dirname(path)
            moves.setdefault(path, []).append(c)
            c_target = target_file(home, path, holdout)
            _append(c_target, [_line_of(c.where)])
    for path, moved in moves.items():
        gone = {int(c.where.rsplit(":", 1)[1]) for c in moved}
        with open(path, encoding="utf-8") as fh:
            keep = [line for i, line in enumerate(fh, 1) if i not in gone]
        if any(line.strip() for line in keep):
            with open(path, "w", encoding="utf-8") as fh:
                fh.writelines(keep)
        else:
            os.remove(path)
        print(f"moved {len(moved)} case(s) out of {path}", file=out)
    _write_manifest(corpus, new)
    print(
        f"frozen {date}: {len(new.cases)} holdout case(s) from "
        f"{len({c.repo for c in cases if c.id in new.cases})} source(s); "
        f"train {sum(c.id not in new.cases for c in cases)} case(s)",
        file=out,
    )
    return 0


def do_check(corpus: str, out=sys.stdout) -> int:
    manifest, why = _manifest(corpus)
    if manifest is None:
        print(why or f"{corpus}: no {MANIFEST_NAME}", file=sys.stderr)
        return 2
    cases, problems = load_cases([corpus], known_labels=_labels())
    problems += check_split(cases, manifest)
    for p in problems:
        print(p, file=out)
    split = split_cases(cases, manifest)
    sides = {s: sum(v == s for v in split.side.values()) for s in ("train", "holdout", "added")}
    print(
        f"train {sides['train']}, frozen holdout {sides['holdout']}, added after the freeze {sides['added']}; "
        f"{len(problems)} problem(s)",
        file=out,
    )
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="append incoming cases on their side")
    m.add_argument("incoming", nargs="+")
    m.add_argument("--corpus", default="tests/corpus")
    m.add_argument("--dry-run", action="store_true")
    f = sub.add_parser("freeze", help="freeze the holdout as it is now (start of a round)")
    f.add_argument("--corpus", default="tests/corpus")
    f.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).date().isoformat())
    c = sub.add_parser("check", help="print what breaks the split")
    c.add_argument("--corpus", default="tests/corpus")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.corpus):
        print(f"{a.corpus}: not a folder", file=sys.stderr)
        return 2
    if a.cmd == "merge":
        return merge(a.incoming, a.corpus, a.dry_run)
    if a.cmd == "freeze":
        return do_freeze(a.corpus, a.date)
    return do_check(a.corpus)


if __name__ == "__main__":
    sys.exit(main())
