"""How many independent sources the rulebook's embedded tests quote, per matcher and per family.

Issue 20 asks that every matcher family have test lines from at least three sources. An embedded
test that quotes real lines names its source as a URL in the comment block directly above it; the
source of a URL is its key as the corpus makes it (``corpus_eval.source_key``: ``owner/name`` for a
GitHub link, else the host). A test with no URL in that block is *constructed*: it counts, but as
no source.

A matcher's sources are those of the **positive** tests (``expect`` not empty) whose input lines it
hits, as the rule-test runner records the hits (the real pipeline, so a matcher that only sees
kernel lines is not credited with a job log's words). A weak keyword (``attrs.weak``) is also
credited with the positive tests of its own class whose lines it reads with the specific matchers
off: in the pipeline a specific matcher's reading of the same line drops the keyword's hit, so
its family's real lines would credit only the specific matcher. A guard (``GUARD_ATTRS``: a
notice that a program recovered, retried or cleaned up) is credited with the sources of the
negative tests (``expect: []``) whose lines it reads: benign output opening nothing is its job.
A family is the fault class a matcher's positive tests expect most often: the wording family the issue speaks of ("a NCCL/c10d network
failure"); ``--group prefix`` (the id's first word) and ``--group file`` are there for a second look.

Usage::

    report = measure(require_rulebook(tests=True))
    report.rows["nccl_socket_failure"].sources    # {"pytorch/pytorch", "discuss.pytorch.org", ...}
    report.under(3)                               # ["cuda_oom_xla", ...]
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from engine.ops.ablate import ablated
from engine.ops.corpus_eval import source_key
from engine.ops.ruletest import EVIDENCE_EMITS, run_one
from engine.core.rete import ReteNetwork
from engine.rulebook import _display as display_name
from engine.rulebook import default_rule_files
from engine.rulebook.compile import CompiledRulebook
from engine.rulebook.model import RuleTest

__all__ = ["MatcherSources", "SourcesReport", "measure", "sources_of_test", "read_debt", "GROUPS", "NO_FAMILY"]

#: the number of distinct sources a matcher (and a family) must reach
ENOUGH = 3
#: a matcher with one of these attrs guards against a false alarm (engine.ops.ablate's
#: GENERIC_ATTRS says what each is): its sources are its negative tests' (``_credit_guards``)
GUARD_ATTRS = frozenset({"handled", "cleanup", "own_exit", "recovers"})
GROUPS = ("class", "prefix", "file")
NO_FAMILY = "(no positive test)"
_URL = re.compile(r"https?://[^\s<>\"'`]+")


@dataclass
class MatcherSources:
    id: str
    file: str
    sources: set[str] = field(default_factory=set)
    constructed: int = 0  # positive tests with no URL above them that hit the matcher
    classes: Counter[str] = field(default_factory=Counter)  # fault classes its positive tests expect

    def family(self, group: str) -> str:
        if group == "prefix":
            return self.id.split("_", 1)[0] if not self.id.startswith("weak.") else "weak"
        if group == "file":
            return self.file
        # the class most often expected; a tie goes to the first by name (Counter's own order
        # follows set iteration, which the hash seed changes from run to run)
        return min(self.classes, key=lambda c: (-self.classes[c], c)) if self.classes else NO_FAMILY


@dataclass
class SourcesReport:
    rows: dict[str, MatcherSources]  # matcher id -> its sources, in rulebook order
    positive_tests: int = 0
    constructed_tests: int = 0

    def under(self, n: int = ENOUGH) -> list[str]:
        return [m for m, r in self.rows.items() if len(r.sources) < n]

    def families(self, group: str = "class") -> dict[str, set[str]]:
        """family -> the union of its matchers' sources."""
        out: dict[str, set[str]] = {}
        for r in self.rows.values():
            out.setdefault(r.family(group), set()).update(r.sources)
        return out

    def family_members(self, group: str = "class") -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in self.rows.values():
            out.setdefault(r.family(group), []).append(r.id)
        return out


def _comment_block(lines: Sequence[str], line_no: int) -> list[str]:
    """The comment lines directly above 1-based line ``line_no`` (no blank line between)."""
    out: list[str] = []
    i = line_no - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        out.append(lines[i])
        i -= 1
    return out[::-1]


def sources_of_test(test: RuleTest, text_of: dict[str, list[str]]) -> set[str]:
    """The source keys of the URLs in the comment block above ``test`` (empty: constructed)."""
    lines = text_of.get(test.mark.file)
    if lines is None:
        return set()
    keys = set()
    for comment in _comment_block(lines, test.mark.line):
        for url in _URL.findall(comment):
            key, _problem = source_key(url.rstrip(").,;:]"))
            if key:
                keys.add(key)
    return keys


def _file_texts(compiled: CompiledRulebook, extra: Iterable[str | Path]) -> dict[str, list[str]]:
    """Each rulebook file's lines, by the name its marks carry."""
    paths = {display_name(p): p for p in default_rule_files()}
    for p in extra:
        paths[display_name(Path(p))] = Path(p)
    out: dict[str, list[str]] = {}
    for name in compiled.book.files:
        path = paths.get(name, Path(name))
        try:
            out[name] = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue  # an overlay given as text has no file: its tests count as constructed
    return out


def measure(compiled: CompiledRulebook, site_paths: Iterable[str | Path] = ()) -> SourcesReport:
    """Runs every positive embedded test and credits the matchers its lines hit with its sources;
    a weak keyword also with those of its own class's positive tests whose lines it reads when the
    specific matchers are off (``_credit_weak``)."""
    rows = {
        m.id: MatcherSources(m.id, m.mark.file) for m in compiled.matchers if m.enabled and m.emit in EVIDENCE_EMITS
    }
    report = SourcesReport(rows)
    text_of = _file_texts(compiled, site_paths)
    network = ReteNetwork(compiled)
    positive: list[tuple[RuleTest, set[str], set[str]]] = []
    guards = {m.id for m in compiled.matchers if GUARD_ATTRS & set(m.attrs)}
    for test in compiled.book.tests:
        if not test.expect:
            _credit_guards(compiled, rows, guards, test, sources_of_test(test, text_of), network)
            continue
        report.positive_tests += 1
        sources = sources_of_test(test, text_of)
        report.constructed_tests += not sources
        seen: set[str] = set()
        run_one(compiled, test, network, seen)
        classes = {str(e["fault_class"]) for e in test.expect if "fault_class" in e}
        positive.append((test, sources, classes))
        _credit(rows, seen, sources, classes)
    _credit_weak(compiled, rows, positive)
    return report


def _credit(rows: dict[str, MatcherSources], mids: Iterable[str], sources: set[str], classes: set[str]) -> None:
    """Credit the matchers ``mids`` with one positive test: its sources, or one constructed test."""
    for mid in mids:
        row = rows.get(mid)
        if row is not None:
            row.sources |= sources
            row.constructed += not sources
            row.classes.update(classes)


def _credit_guards(
    compiled: CompiledRulebook,
    rows: dict[str, MatcherSources],
    guards: set[str],
    test: RuleTest,
    sources: set[str],
    network: ReteNetwork,
) -> None:
    """A guard (``GUARD_ATTRS``: a program's own notice that it recovered, retried, cleaned up
    or ended its own process) exists so that benign output opens nothing: its family's lines are
    those of the negative tests (``expect: []``) it reads, which credit it; no other matcher is
    credited by a negative test (a detector hitting one would be a false alarm, not a source)."""
    if not guards or not sources:
        return
    seen: set[str] = set()
    run_one(compiled, test, network, seen)
    for mid in seen & guards:
        row = rows.get(mid)
        if row is not None:
            row.sources |= sources


def _credit_weak(
    compiled: CompiledRulebook, rows: dict[str, MatcherSources], positive: list[tuple[RuleTest, set[str], set[str]]]
) -> None:
    """A weak keyword's hit on a line that a specific matcher also reads is dropped (specific
    evidence outranks it), so in the pipeline its family's real lines credit the specific matcher
    alone. The keyword is the fallback for the wordings no specific matcher knows: its test lines
    are those it reads with the specific matchers off (``engine.ops.ablate.ablated``, as the
    fallback is scored). Credited there: a weak matcher on a positive test of its own class only."""
    weak = {m.id: str(m.attrs.get("weak_class")) for m in compiled.matchers if m.attrs.get("weak") is True}
    mine = [(t, src, cls) for t, src, cls in positive if cls & set(weak.values())]
    if not mine:
        return
    off = ablated(compiled)
    network = ReteNetwork(off)
    for test, sources, classes in mine:
        seen: set[str] = set()
        run_one(off, test, network, seen)
        _credit(rows, (mid for mid in seen if weak.get(mid) in classes), sources, classes)


def read_debt(path: str | Path) -> set[str]:
    """The matcher ids a debt file lists (one a line; ``#`` comments and blank lines skipped)."""
    out = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(line)
    return out
