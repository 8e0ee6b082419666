"""The corpus split by source: train and a frozen holdout that rules are never written from.

Every case has a source key (``Case.repo``: a repository ``owner/name`` or a site's host). The
split puts every case of one source on the same side, so a rule written from one issue thread
cannot be scored on a sibling excerpt of the same thread. The side of a source is decided once:

* a source the manifest names (``holdout_sources`` / ``train_sources``) stays where it was put;
* a source it does not name is placed by a hash of its key (``side_by_hash``): nobody picks it,
  per case or otherwise, and every tool places it the same way.

The manifest (``tests/corpus/holdout.manifest.json``) also freezes the holdout: per holdout case
its id and a hash of what is scored (stream, text, label, accept, source key), with the date of
the freeze. A holdout-side case the manifest does not list is *added after the freeze* and is
scored apart; a frozen case that changed or vanished is a problem (a test fails on it). Holdout
cases live in files under a folder named ``holdout/``; train cases everywhere else.

Usage::

    manifest = load_manifest("tests/corpus/holdout.manifest.json")
    split = split_cases(cases, manifest)
    split.side["nccl-001"]        # "train" | "holdout" | "added"
    problems = check_split(cases, manifest)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from engine.ops.corpus_eval import HEALTHY, MANIFEST_SUFFIX, Case, CaseResult, load_cases

__all__ = [
    "Manifest",
    "Split",
    "MANIFEST_NAME",
    "TRAIN",
    "HOLDOUT",
    "ADDED",
    "SALT",
    "SHARE",
    "case_hash",
    "side_by_hash",
    "load_manifest",
    "find_manifest",
    "split_cases",
    "check_split",
    "freeze",
    "in_holdout_folder",
    "train_side_cases",
    "cost_errors",
    "side_report",
]

MANIFEST_NAME = "holdout" + MANIFEST_SUFFIX
HOLDOUT_DIR = "holdout"
TRAIN, HOLDOUT, ADDED = "train", "holdout", "added"
#: the hash rule for sources no manifest names yet (recorded in the manifest, which wins)
SALT = "recover-corpus-holdout-v1:"
SHARE = 0.30


def case_hash(case: Case) -> str:
    """What scoring reads of a case; an edit to any of it changes a frozen case."""
    what = {
        "stream": case.stream,
        "text": case.text,
        "label": case.label,
        "accept": sorted(case.accept),
        "repo": case.repo,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def side_by_hash(key: str, salt: str = SALT, share: float = SHARE) -> str:
    """The side of a source no manifest names. Keys are compared as ``source_key`` makes them
    (stripped, lowercased): "IBM/autopilot" is on the side of "ibm/autopilot", whoever asks."""
    key = key.strip().lower()
    h = int(hashlib.sha256((salt + key).encode("utf-8")).hexdigest()[:8], 16)
    return HOLDOUT if h / 2**32 < share else TRAIN


@dataclass
class Manifest:
    frozen: str = ""  # the date of the freeze (YYYY-MM-DD)
    salt: str = SALT
    share: float = SHARE
    holdout_sources: frozenset[str] = frozenset()
    train_sources: frozenset[str] = frozenset()
    cases: dict[str, str] = field(default_factory=dict)  # frozen holdout case id -> case_hash
    path: str = ""

    def side_of(self, key: str) -> str:
        key = key.strip().lower()  # as source_key makes every case's key, and the lists hold
        if key in self.holdout_sources:
            return HOLDOUT
        if key in self.train_sources:
            return TRAIN
        return side_by_hash(key, self.salt, self.share)

    def to_json(self) -> dict[str, Any]:
        return {
            "frozen": self.frozen,
            "rule": "a source no list names is held out when int(sha256(salt + key)[:8], 16) / 2**32 < share",
            "salt": self.salt,
            "share": self.share,
            "holdout_sources": sorted(self.holdout_sources),
            "train_sources": sorted(self.train_sources),
            "cases": dict(sorted(self.cases.items())),
        }


def load_manifest(path: str) -> tuple[Manifest | None, str]:
    """``(manifest, problem)``; a manifest that cannot be read is a problem, never a traceback."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as exc:
        return None, f"{path}: cannot read: {exc.strerror or exc}"
    except ValueError as exc:
        return None, f"{path}: not JSON: {exc}"
    try:
        if not isinstance(raw, dict):
            raise TypeError("a manifest is a JSON object")
        lists = {k: raw.get(k, []) for k in ("holdout_sources", "train_sources")}
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists.values()):
            raise TypeError("holdout_sources and train_sources are lists of source keys")
        cases = raw.get("cases", {})
        if not isinstance(cases, dict) or not all(isinstance(v, str) for v in cases.values()):
            raise TypeError("cases maps a case id to its hash")
        share = float(raw.get("share", SHARE))
        if not 0 < share < 1:
            raise ValueError("share is a fraction between 0 and 1")
        m = Manifest(
            frozen=str(raw.get("frozen", "")),
            salt=str(raw.get("salt", SALT)),
            share=share,
            holdout_sources=frozenset(lists["holdout_sources"]),
            train_sources=frozenset(lists["train_sources"]),
            cases=dict(cases),
            path=path,
        )
    except (TypeError, ValueError) as exc:
        return None, f"{path}: bad manifest: {exc}"
    both = m.holdout_sources & m.train_sources
    if both:
        return None, f"{path}: bad manifest: sources on both sides: {', '.join(sorted(both))}"
    return m, ""


def find_manifest(paths: Iterable[str]) -> str | None:
    """The manifest next to the corpus: in a folder given, or beside (or above) a file given."""
    for p in paths:
        p = os.path.normpath(p)
        up = os.path.dirname(p)
        for d in (p,) if os.path.isdir(p) else (up, os.path.dirname(up)):
            cand = os.path.join(d, MANIFEST_NAME)
            if os.path.isfile(cand):
                return cand
    return None


def in_holdout_folder(where: str) -> bool:
    """Whether a case's file (``where`` is file:line) lies in a folder named holdout/."""
    path = where.rsplit(":", 1)[0]
    return os.path.basename(os.path.dirname(path)) == HOLDOUT_DIR


@dataclass
class Split:
    side: dict[str, str] = field(default_factory=dict)  # case id -> TRAIN | HOLDOUT | ADDED
    changed: list[str] = field(default_factory=list)  # frozen ids whose case is not what was frozen
    vanished: list[str] = field(default_factory=list)  # frozen ids no case has any more


def train_side_cases(corpus: str) -> list[Case]:
    """Every train-side case of a corpus folder, never opening a file of its holdout folder (the
    tools that study cases: scripts/ablate_eval.py, scripts/weak_vocab.py)."""
    manifest, why = load_manifest(os.path.join(corpus, MANIFEST_NAME))
    if manifest is None:
        raise ValueError(why)
    files = []
    for dirpath, dirnames, names in os.walk(corpus):
        dirnames[:] = [d for d in dirnames if d != HOLDOUT_DIR]  # never open a holdout file
        files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".jsonl")]
    cases, _ = load_cases(sorted(files))
    return [c for c in cases if manifest.side_of(c.repo) == TRAIN]


def split_cases(cases: Sequence[Case], manifest: Manifest) -> Split:
    out = Split()
    present = {c.id for c in cases}
    for c in cases:
        side = manifest.side_of(c.repo)
        if side == HOLDOUT:
            frozen = manifest.cases.get(c.id)
            if frozen is None:
                side = ADDED
            elif frozen != case_hash(c):
                # scored with the added cases: a frozen figure counts only what was frozen
                out.changed.append(c.id)
                side = ADDED
        elif c.id in manifest.cases:
            out.changed.append(c.id)  # a frozen case whose source moved it to the train side
        out.side[c.id] = side
    out.vanished = sorted(set(manifest.cases) - present)
    return out


def check_split(cases: Sequence[Case], manifest: Manifest) -> list[str]:
    """Everything that breaks the split: a changed or vanished frozen case, a case in a file of the
    wrong side. Empty when the corpus keeps to its manifest."""
    split = split_cases(cases, manifest)
    when = manifest.frozen or "the freeze"
    by_id = {c.id: c for c in cases}
    problems = [f"{by_id[i].where}: frozen holdout case {i!r} changed since {when}" for i in split.changed]
    problems += [f"{manifest.path}: frozen holdout case {i!r} vanished from the corpus" for i in split.vanished]
    for c in cases:
        holdout = split.side[c.id] != TRAIN
        if holdout != in_holdout_folder(c.where):
            problems.append(
                f"{c.where}: case {c.id!r} of source {c.repo} belongs to the "
                f"{'holdout' if holdout else 'train'} side, but its file is a "
                f"{'train' if holdout else 'holdout'} file"
            )
    return problems


def freeze(cases: Sequence[Case], old: Manifest | None, date: str) -> Manifest:
    """A new manifest: sources keep the side they had; new ones take the hash rule; every
    holdout-side case is frozen as it is now."""
    base = old or Manifest()
    holdout = {c.repo for c in cases if base.side_of(c.repo) == HOLDOUT}
    train = {c.repo for c in cases if base.side_of(c.repo) == TRAIN}
    return Manifest(
        frozen=date,
        salt=base.salt,
        share=base.share,
        holdout_sources=frozenset(holdout | base.holdout_sources),
        train_sources=frozenset(train | base.train_sources),
        cases={c.id: case_hash(c) for c in cases if c.repo in holdout | base.holdout_sources},
    )


def cost_errors(results: Sequence[CaseResult], node_scoped: frozenset[str]) -> dict[str, list[str]]:
    """The errors a site pays for, by case id.

    * ``wrongful_isolations``: a case whose label is not node-scoped (an application fault, or
      healthy) and that took a decision isolating a node: a drain for a cause not the node's.
      The label decides, not ``accept``: an accepted answer is scored right, but the drain still
      takes a good node away.
    * ``node_faults_not_isolated``: a node-scoped label and no node taken out.
    """
    wrong = [r.case.id for r in results if r.case.label not in node_scoped and (r.isolating or r.isolated)]
    missed = [r.case.id for r in results if r.case.label in node_scoped and not r.isolated]
    return {"wrongful_isolations": wrong, "node_faults_not_isolated": missed}


def side_report(
    results: Sequence[CaseResult], split: Split | None, node_scoped: frozenset[str]
) -> dict[str, dict[str, Any]]:
    """Per side (``all`` without a split): cases, right, accuracy, sources, right/total per source,
    the healthy cases that opened an incident, and the cost errors."""
    groups: dict[str, list[CaseResult]] = {}
    if split is None:
        groups["all"] = list(results)
    else:
        groups = {TRAIN: [], HOLDOUT: [], ADDED: []}
        for r in results:
            groups[split.side.get(r.case.id, TRAIN)].append(r)
    out: dict[str, dict[str, Any]] = {}
    for side, rs in groups.items():
        per_source: dict[str, dict[str, int]] = {}
        for r in rs:
            st = per_source.setdefault(r.case.repo, {"right": 0, "total": 0})
            st["total"] += 1
            st["right"] += int(r.right)
        right = sum(r.right for r in rs)
        out[side] = {
            "cases": len(rs),
            "right": right,
            "accuracy": round(right / len(rs), 4) if rs else None,
            # right answers the weak-evidence layer gave (a class's keyword, nothing specific)
            "weak_right": sum(r.right and r.weak for r in rs),
            "sources": len(per_source),
            "healthy": sum(r.case.label == HEALTHY for r in rs),
            # stricter than EvalReport.healthy_with_incident: any incident, whatever accept allows
            "healthy_opened": [r.case.id for r in rs if r.case.label == HEALTHY and r.incidents],
            "per_source": dict(sorted(per_source.items())),
        } | cost_errors(rs, node_scoped)
        # of the node faults not isolated, those whose class was found: the node was not known
        # (a job's log is evidence about nodes only where an allocation lists them)
        by_id = {r.case.id: r for r in rs}
        out[side]["not_isolated_right_class"] = [i for i in out[side]["node_faults_not_isolated"] if by_id[i].right]
    return out
