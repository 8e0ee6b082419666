"""How a job's log ends, as a fact (``log_end``): replay's reading of a whole log, which live
never has (live, the scheduler's job state says that a job ended).

``LogTail`` (engine/core/replay.py) reads the collected items of one input and keeps what
decides the end: the last fact, whether it was progress, and after the last progress the last
weak-evidence hit, exit-time cleanup and the program's *ending*. An ending is a hit of a matcher
with ``attrs: {ending: app_error}`` (a program's last word that says it died of its own error,
with a message: a logger's final ``ERROR:`` line, Hydra's error report, a shell that could not run
a command, ``MPI_ABORT was invoked``) or ``attrs: {ending: unknown}`` (a bare non-zero exit that
names no cause: ``Process finished with exit code 1``, ``exit status 1``, make's ``Error 2``).
docs/rulebook.md ("How a log ends in other languages") lists the shipped vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.facts import Fact

if TYPE_CHECKING:
    from engine.core.replay import Input

#: the ending classes a matcher's ``ending`` attr may name; any other value is no ending
ENDINGS = ("app_error", "unknown")


def takes_ending(fact: Fact, current: Fact | None) -> bool:
    """Whether ``fact`` becomes the log's ending in place of ``current`` (the ending seen so far
    after the last progress). A hit whose line carries a ``notice`` group (the matcher's own
    exclusion: "... ignored.", an exit code reported by a launcher) is no ending. An error with a
    message (``app_error``) is not replaced by the bare exit that follows it (``unknown``): the
    exit is that error's consequence."""
    ending = fact.get("ending") if fact.kind == "log" else None
    if ending not in ENDINGS or fact.get("notice"):
        return False
    return current is None or ending == "app_error" or current.get("ending") != "app_error"


def log_end(
    inp: "Input",
    last: Fact | None,
    tail_progress: bool,
    weak: Fact | None = None,
    cleanup: bool = False,
    ending: Fact | None = None,
) -> Fact | None:
    """The end of a whole job log, as a fact: what its job printed last was progress (the job went
    on after any error it logged), its exit-time cleanup (``cleanup``: a hit of a matcher with
    ``attrs: {cleanup: true}`` after the last progress, such as multiprocessing's finalizers
    failing to remove a temporary directory: the work was done, so the log ends on no failure), or
    neither (it ended on its failure). Only replay knows where a log ends; live, the scheduler's
    job state says that a job ended.

    ``weak``: the last weak-evidence hit (a class's keyword, engine/rulebook/weak.py) after the
    last progress; its class and keyword ride on the fact, so that a keyword the job printed
    before it went on training never decides how the log ended. ``ending``: the program's ending
    after the last progress (``takes_ending``); its class rides on the fact as ``ending``, its
    line as ``ending_evidence``."""
    if last is None or inp.source not in ("job", "any") or last.get("job") is None:
        return None
    attrs = {
        "job": last.get("job"),
        "attempt": int(last.get("attempt") or 0),
        "tail": "progress" if tail_progress else "cleanup" if cleanup else "failure",
    }
    if weak is not None and not tail_progress and not cleanup:
        attrs["weak_class"] = weak.get("weak_class")
        attrs["keyword"] = weak.get("keyword")
        attrs["evidence"] = str(weak.get("text") or "")[:300]
    if ending is not None and not tail_progress and not cleanup:
        attrs["ending"] = ending.get("ending")
        attrs["ending_evidence"] = str(ending.get("text") or "")[:300]
    return Fact.make("log_end", attrs, last.at, f"{inp.name}:end")
