"""How a job's log ends, as a fact (``log_end``): replay's reading of a whole log, which live
never has (live, the scheduler's job state says that a job ended).

``LogTail`` (engine/core/replay.py) reads the collected items of one input and keeps what
decides the end (``TailState``): the last fact, whether it was progress, and after the last
progress the last weak-evidence hit, exit-time cleanup and the program's *ending*. An ending is a
hit of a matcher with ``attrs: {ending: app_error}`` (a program's last word that says it died of
its own error, with a message: a logger's final ``ERROR:`` line, Hydra's error report, a shell
that could not run a command, ``MPI_ABORT was invoked``) or ``attrs: {ending: unknown}`` (a bare
non-zero exit that names no cause: ``Process finished with exit code 1``, ``exit status 1``,
make's ``Error 2``). docs/rulebook.md ("How a log ends in other languages") lists the shipped
vocabulary.

A line that a specific matcher read as well is that matcher's evidence first (``read_endings``):
the ending's fact carries ``read_by`` (the ids of those matchers), in replay and live alike, since
it is set where the scan's hits become facts (``StreamFacts``), and the ``log_end`` fact carries it
as ``ending_read_by``. The rulebook decides what it means: the generic "the program died of its
own error" rules of rules/36-log-end-more.yaml ask for no ``read_by``, so that a logger's
``FATAL: could not open shared memory segment ...`` is read as what removed the segment, not as
the program's own error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from engine.core.matching import Hit
from engine.facts import Fact
from engine.rulebook.spec import READ_BY

if TYPE_CHECKING:
    from engine.core.replay import Input
    from engine.rulebook.model import Matcher

#: the ending classes a matcher's ``ending`` attr may name; any other value is no ending
ENDINGS = ("app_error", "unknown")
# READ_BY: the attribute (a synthetic group of the ending's hit) naming the specific matchers that
# read the same line, comma-separated; on the log_end fact, ``ending_read_by``


@dataclass
class TailState:
    """What ``LogTail`` knows of how a log ends so far: the last fact that counts, whether it was
    training progress, and after the last progress the last weak-evidence hit, the program's
    ending and whether exit-time cleanup was seen. One object, so that undoing a side thread's
    block restores it whole (``copy``): a field added here cannot be left out of the undo."""

    last: Fact | None = None
    progress: bool = False
    weak: Fact | None = None
    ending: Fact | None = None
    cleanup: bool = False

    def copy(self) -> "TailState":
        return replace(self)


def ending_tables(
    matchers: Sequence["Matcher"], index_map: Sequence[int]
) -> tuple[frozenset[int], frozenset[int], tuple[str, ...]] | None:
    """(ending matchers, matchers whose hit on a line makes it read, every matcher's id), in
    scanner numbering, or None when there are no ending matchers or no readers. A line is read by
    a matcher that emits evidence of its own (a ``log`` or ``xid`` fact) and is neither an ending
    matcher nor a weak keyword (which a specific matcher's line drops anyway)."""
    endings, readers = set(), set()
    for i, j in enumerate(index_map):
        m = matchers[j]
        if m.attrs.get("ending") in ENDINGS:
            endings.add(i)
        elif m.emit in ("log", "xid") and m.attrs.get("weak") is not True:
            readers.add(i)
    if not endings or not readers:
        return None
    return frozenset(endings), frozenset(readers), tuple(matchers[j].id for j in index_map)


def read_endings(hits: list[Any], endings: frozenset[int], readers: frozenset[int], ids: Sequence[str]) -> list[Any]:
    """The hits of one scanned batch, each ending hit on a line that a reader also hit replaced by
    a copy whose groups carry ``read_by`` (the readers' ids, ``ids`` in scanner numbering). The
    hits of a line are all in one batch. The copy has no ``blank``: a flood's shortcut, which
    reuses what a line of the same shape gave, never hands a read line's fact to an unread one."""
    ended = {h.offset for h in hits if h.matcher in endings}
    if not ended:
        return hits
    lines: dict[int, list[str]] = {}
    for h in hits:
        if h.matcher in readers and h.offset in ended:
            lines.setdefault(h.offset, []).append(ids[h.matcher])
    if not lines:
        return hits
    out = []
    for h in hits:
        by = lines.get(h.offset) if h.matcher in endings else None
        if by:
            groups = dict(h.groups)
            groups[READ_BY] = ",".join(sorted(set(by)))
            h = Hit(h.matcher, h.line, h.line_no, h.offset, groups, h.truncated, None)
        out.append(h)
    return out


def takes_ending(fact: Fact, current: Fact | None) -> bool:
    """Whether ``fact`` becomes the log's ending in place of ``current`` (the ending seen so far
    after the last progress). A hit whose line carries a ``notice`` group (the matcher's own
    exclusion: "... ignored.", an exit code reported by a launcher) is no ending. An error with a
    message (``app_error``) is not replaced by the bare exit that follows it (``unknown``): the
    exit is that error's consequence. A line a specific matcher read (``read_by``) is an ending
    still: it is the log's last word, and the rules read whom it belongs to."""
    ending = fact.get("ending") if fact.kind == "log" else None
    if ending not in ENDINGS or fact.get("notice"):
        return False
    return current is None or ending == "app_error" or current.get("ending") != "app_error"


def log_end(inp: "Input", state: TailState) -> Fact | None:
    """The end of a whole job log, as a fact: what its job printed last was progress (the job went
    on after any error it logged), its exit-time cleanup (``cleanup``: a hit of a matcher with
    ``attrs: {cleanup: true}`` after the last progress, such as multiprocessing's finalizers
    failing to remove a temporary directory: the work was done, so the log ends on no failure), or
    neither (it ended on its failure). Only replay knows where a log ends; live, the scheduler's
    job state says that a job ended.

    ``state.weak``: the last weak-evidence hit (a class's keyword, engine/rulebook/weak.py) after
    the last progress; its class and keyword ride on the fact, so that a keyword the job printed
    before it went on training never decides how the log ended. ``state.ending``: the program's
    ending after the last progress (``takes_ending``); its class rides on the fact as ``ending``,
    its line as ``ending_evidence``, the specific matchers that read that line as
    ``ending_read_by``."""
    last = state.last
    kernel = inp.source == "kernel"
    if last is None or inp.source not in ("job", "any", "kernel") or (last.get("job") is None and not kernel):
        return None
    failure = not state.progress and not state.cleanup
    attrs: dict[str, Any] = {
        "attempt": int(last.get("attempt") or 0),
        "tail": "progress" if state.progress else "cleanup" if state.cleanup else "failure",
    }
    if kernel:  # a node's kernel log: its lines name no job, its end is the node's (KERNEL_END)
        attrs["stream"] = "kernel"
        if last.get("node"):
            attrs["node"] = last.get("node")
    else:
        attrs["job"] = last.get("job")
    weak, ending = state.weak, state.ending
    if weak is not None and failure:
        attrs["weak_class"] = weak.get("weak_class")
        attrs["keyword"] = weak.get("keyword")
        attrs["evidence"] = str(weak.get("text") or "")[:300]
    if ending is not None and failure:
        attrs["ending"] = ending.get("ending")
        attrs["ending_evidence"] = str(ending.get("text") or "")[:300]
        if ending.get(READ_BY):
            attrs["ending_read_by"] = ending.get(READ_BY)
    return Fact.make("log_end", attrs, last.at, f"{inp.name}:end")
