"""Accuracy of a rulebook on a corpus of real failure excerpts (``recover rules eval``).

A corpus is one or more JSON-lines files; each line is a case::

    {"id": "nccl-nccl_timeout-004", "source": "https://github.com/...", "stream": "app",
     "text": "verbatim log lines", "label": "nccl_timeout", "accept": ["nccl_network_error"],
     "note": "why this label", "repo": "NVIDIA/nccl"}

``repo`` (optional) names the case's source: ``owner/name`` of a GitHub repository or a site's
host name. Without it the source is read from ``source``: github.com/OWNER/NAME/... gives
``owner/name``, any other URL its host. Every case of one source lands on one side of the
train/holdout split (engine/ops/corpus_split.py), so the key is compared lowercased.

``label`` is the root cause's fault class, or ``healthy`` for an excerpt that must open no
incident. Each case is replayed alone, through the same pipeline as ``recover replay``, and its
answer is the fault class of its strongest incident (highest priority, earliest on a tie), or
``healthy`` when none opened. A case is right when the answer is its label or one of ``accept``.

What a wrong answer costs is counted too: a case *isolates* a node when any of its incidents
took a decision whose plan runs a per-node action (drain, by default) with a node to act on.
Its label is *node-scoped* when the rulebook's decision for that class isolates.

Usage::

    cases, problems = load_cases(["tests/corpus"])
    report = evaluate(compiled, cases)
    print(report.accuracy, report.per_class())
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence
from urllib.parse import urlsplit

from engine.core.rete import ReteNetwork
from engine.core.replay import Input, replay_inputs
from engine.rulebook.compile import CompiledRulebook
from engine.store import Store

__all__ = [
    "Case",
    "CaseResult",
    "EvalReport",
    "load_cases",
    "evaluate",
    "source_key",
    "isolating_decisions",
    "node_scoped_classes",
    "HEALTHY",
    "STREAM_SOURCES",
    "MANIFEST_SUFFIX",
]

HEALTHY = "healthy"
#: corpus stream -> the source kind its text is replayed as (which matchers apply)
# (slurm lines come both from a job's own output, where srun and slurmstepd print, and from the
# daemons' logs, so they are read with every matcher, as a mixed excerpt is)
STREAM_SOURCES = {"app": "job", "kernel": "kernel", "slurm": "any", "mixed": "any"}
#: the job id every excerpt but a kernel log is replayed as (a job log names its job)
CASE_JOB = "990001"
_REQUIRED = ("id", "source", "stream", "text", "label")
#: a file ending so in a corpus folder is the split's manifest, not cases
MANIFEST_SUFFIX = ".manifest.json"
# GitHub's rules for owner and repository names; a site is named by its host
_REPO = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38})/[a-z0-9._-]{1,100}")
_HOST = re.compile(r"(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")
# hosts whose first two path segments name a repository
_REPO_HOSTS = ("github.com", "www.github.com", "raw.githubusercontent.com")


def source_key(source: str, repo: str | None = None) -> tuple[str, str]:
    """``(key, problem)``: the case's source as a repository (``owner/name``) or a host, lowercased;
    ``problem`` is empty when the key is good, else it says why there is none."""
    derived = ""
    try:
        url = urlsplit(source)
        host = (url.hostname or "").lower()
    except ValueError:
        host = ""
    if host in _REPO_HOSTS:
        parts = [p for p in url.path.split("/") if p]
        derived = "/".join(parts[:2]).lower() if len(parts) >= 2 else ""
    elif host:
        derived = host
    if repo is not None:
        key = repo.strip().lower()
        if not (_REPO.fullmatch(key) or _HOST.fullmatch(key)):
            return "", f"repo {repo!r} is neither owner/name nor a host name"
        if host in _REPO_HOSTS and derived and key != derived:
            # a GitHub link names its repository: another key would let one source sit on both sides
            return "", f"repo {repo!r} is not the repository of its source ({derived})"
        return key, ""
    if not derived:
        return "", "source names no repository or host; give repo"
    if not (_REPO.fullmatch(derived) or _HOST.fullmatch(derived)):
        return "", f"source gives no valid repository or host ({derived!r}); give repo"
    return derived, ""


def isolating_decisions(compiled: CompiledRulebook) -> frozenset[str]:
    """Decisions whose plan takes a node out of service: a per-node action other than resume."""
    plans = compiled.policy.plans
    return frozenset(
        d
        for d, plan in plans.items()
        if any(a in compiled.actions and compiled.actions[a].per == "node" and a != "resume" for a in plan or ())
    )


def node_scoped_classes(compiled: CompiledRulebook) -> frozenset[str]:
    """Fault classes the rulebook isolates a node for: the node is the cause."""
    iso = isolating_decisions(compiled)
    return frozenset(fc for fc, d in compiled.policy.decisions.items() if d in iso)


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    stream: str
    text: str
    label: str
    accept: tuple[str, ...] = ()
    note: str = ""
    where: str = ""  # file:line of the case
    repo: str = ""  # the source key (source_key): the split keeps one source on one side

    @property
    def answers(self) -> frozenset[str]:
        return frozenset((self.label, *self.accept))


@dataclass(frozen=True)
class CaseResult:
    case: Case
    got: str
    incidents: int
    rules: tuple[str, ...] = ()
    error: str = ""
    #: nodes any incident of the case took out of service (an isolating decision), and the classes
    isolated: tuple[str, ...] = ()
    isolated_for: tuple[str, ...] = ()
    #: an incident took an isolating decision (with or without a node to act on)
    isolating: bool = False
    #: the answer came from the weak-evidence layer: the winning fault was a class's keyword
    weak: bool = False

    @property
    def right(self) -> bool:
        return not self.error and self.got in self.case.answers


@dataclass
class EvalReport:
    results: list[CaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def right(self) -> int:
        return sum(r.right for r in self.results)

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0

    @property
    def misses(self) -> list[CaseResult]:
        return [r for r in self.results if not r.right]

    @property
    def weak_right(self) -> int:
        """Right answers that the weak-evidence layer gave (a class's keyword, nothing specific)."""
        return sum(r.right and r.weak for r in self.results)

    @property
    def healthy_with_incident(self) -> list[CaseResult]:
        """Healthy cases that opened an incident no ``accept`` allows."""
        return [r for r in self.results if r.case.label == HEALTHY and not r.right]

    def labels(self) -> list[str]:
        seen = {r.case.label for r in self.results} | {r.got for r in self.results}
        return sorted(seen, key=lambda x: (x == HEALTHY, x))

    def confusion(self) -> dict[str, Counter]:
        """label -> Counter of answers (a case counted right under its label when an accepted answer was given)."""
        out: dict[str, Counter] = {}
        for r in self.results:
            out.setdefault(r.case.label, Counter())[r.case.label if r.right else r.got] += 1
        return out

    def per_class(self) -> dict[str, dict[str, Any]]:
        """label -> {cases, right, precision, recall}; precision counts an accepted answer as right."""
        stats: dict[str, dict[str, Any]] = {}
        for label in self.labels():
            cases = [r for r in self.results if r.case.label == label]
            answered = [r for r in self.results if r.got == label]
            tp_recall = sum(r.right for r in cases)
            tp_precision = sum(r.right for r in answered)
            stats[label] = {
                "cases": len(cases),
                "right": tp_recall,
                "recall": tp_recall / len(cases) if cases else None,
                "answered": len(answered),
                "precision": tp_precision / len(answered) if answered else None,
            }
        return stats

    def to_json(self) -> dict[str, Any]:
        return {
            "cases": self.total,
            "right": self.right,
            "accuracy": round(self.accuracy, 4),
            "healthy_with_incident": [r.case.id for r in self.healthy_with_incident],
            # the share of right answers reached through weak evidence only
            "weak_evidence": {
                "right": self.weak_right,
                "of_right": self.right,
                "share": round(self.weak_right / self.right, 4) if self.right else None,
                "answered": sum(r.weak for r in self.results),
            },
            "per_class": self.per_class(),
            "confusion": {k: dict(v) for k, v in self.confusion().items()},
            "misses": [
                {
                    "id": r.case.id,
                    "label": r.case.label,
                    "got": r.got,
                    "rules": list(r.rules),
                    "error": r.error,
                    "where": r.case.where,
                }
                for r in self.misses
            ],
        }


def _corpus_files(paths: Iterable[str]) -> list[str]:
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            # sub-folders too: the holdout side lives in tests/corpus/holdout/
            found: list[str] = []
            for root, dirs, names in os.walk(p):
                dirs.sort()
                found.extend(
                    os.path.join(root, n)
                    for n in sorted(names)
                    if n.endswith((".jsonl", ".json")) and not n.endswith(MANIFEST_SUFFIX)
                )
            files.extend(found)
        else:
            files.append(p)
    return files


def load_cases(paths: Iterable[str], known_labels: Iterable[str] | None = None) -> tuple[list[Case], list[str]]:
    """Read every case; a bad line is reported (``file:line: problem``) and skipped, never fatal."""
    labels = set(known_labels) | {HEALTHY} if known_labels is not None else None
    cases: list[Case] = []
    problems: list[str] = []
    ids: dict[str, str] = {}
    for path in _corpus_files(paths):
        try:
            fh = open(path, encoding="utf-8")
        except OSError as exc:
            problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        with fh:
            for n, line in enumerate(fh, 1):
                where = f"{path}:{n}"
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except ValueError as exc:
                    problems.append(f"{where}: not JSON: {exc}")
                    continue
                if not isinstance(raw, dict):
                    problems.append(f"{where}: a case is a JSON object")
                    continue
                missing = [k for k in _REQUIRED if not isinstance(raw.get(k), str) or not raw.get(k)]
                if missing:
                    problems.append(f"{where}: missing or empty: {', '.join(missing)}")
                    continue
                if raw["stream"] not in STREAM_SOURCES:
                    problems.append(f"{where}: stream {raw['stream']!r} is not one of {', '.join(STREAM_SOURCES)}")
                    continue
                accept = raw.get("accept") or []
                if not isinstance(accept, list) or not all(isinstance(a, str) for a in accept):
                    problems.append(f"{where}: accept must be a list of labels")
                    continue
                bad = [x for x in [raw["label"], *accept] if labels is not None and x not in labels]
                if bad:
                    problems.append(f"{where}: unknown label(s): {', '.join(bad)}")
                    continue
                repo = raw.get("repo")
                if repo is not None and not isinstance(repo, str):
                    problems.append(f"{where}: repo must be a string (owner/name or a host)")
                    continue
                key, why = source_key(raw["source"], repo)
                if why:
                    problems.append(f"{where}: {why}")
                    continue
                if raw["id"] in ids:
                    problems.append(f"{where}: id {raw['id']!r} already used at {ids[raw['id']]}")
                    continue
                ids[raw["id"]] = where
                cases.append(
                    Case(
                        raw["id"],
                        raw["source"],
                        raw["stream"],
                        raw["text"],
                        raw["label"],
                        tuple(accept),
                        str(raw.get("note", "")),
                        where,
                        key,
                    )
                )
    return cases, problems


def _strongest(store: Store, incidents, priorities) -> tuple[str, tuple[str, ...], bool]:
    """The answer (class of the strongest incident), the rules fired in it, and whether its
    winning fault came from the weak-evidence layer (a fault marked weak)."""
    best: tuple[int, float, str, tuple[str, ...], int] | None = None
    for inc in incidents:
        row = store.require_incident(inc.id)
        fc = row.fault_class or "unknown"
        key = (-int(priorities.get(fc, 0)), inc.at, fc, tuple(store.rules_fired(inc.id)), inc.id)
        if best is None or key[:2] < best[:2]:
            best = key
    if best is None:
        return HEALTHY, (), False
    row = store.require_incident(best[4])
    weak = bool(row.fault_fact) and any(f.id == row.fault_fact and f.get("weak") for f, _, _ in store.facts(best[4]))
    return best[2], best[3], weak


def _isolations(store: Store, incidents, isolating: frozenset[str]) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    nodes: set[str] = set()
    classes: set[str] = set()
    took = False
    for inc in incidents:
        row = store.incident(inc.id)
        if row is None or row.decision not in isolating:
            continue
        took = True
        if row.nodes:
            nodes.update(row.nodes)
            classes.add(row.fault_class or "unknown")
    return tuple(sorted(nodes)), tuple(sorted(classes)), took


def evaluate_case(
    compiled: CompiledRulebook, case: Case, network: ReteNetwork, isolating: frozenset[str] | None = None
) -> CaseResult:
    data = case.text.encode("utf-8")
    name = "kern.log" if case.stream == "kernel" else f"slurm-{CASE_JOB}.out"
    store = Store(":memory:")
    try:
        result = replay_inputs(
            [Input(name, lambda: [data], STREAM_SOURCES[case.stream])], compiled, store, network=network
        )
        got, rules, weak = _strongest(store, result.incidents, compiled.policy.priorities)
        iso = isolating_decisions(compiled) if isolating is None else isolating
        nodes, classes, took = _isolations(store, result.incidents, iso)
        return CaseResult(case, got, len(result.incidents), rules, "", nodes, classes, took, weak)
    except Exception as exc:  # one case that breaks the pipeline is a miss with its reason, not the end of the run
        return CaseResult(case, "error", 0, (), f"{type(exc).__name__}: {exc}")
    finally:
        store.close()


def evaluate(compiled: CompiledRulebook, cases: Sequence[Case]) -> EvalReport:
    network = ReteNetwork(compiled)
    iso = isolating_decisions(compiled)
    return EvalReport([evaluate_case(compiled, c, network, iso) for c in cases])
