"""How a log ends (engine/core/logend.py): an ending line that a specific matcher read as well
carries that matcher's id (``read_by``) from the scan on, so the generic "the program died of its
own error" rules give way to it in replay and live alike; an ending explains nothing to the weak
layer (a class's keyword on the program's last word still names the class); and LogTail's state
is one object, so undoing a side thread's block restores every field of it.

The lines marked "constructed" are made for the mechanism; the others are verbatim excerpts
(sources beside them)."""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType

import pytest

from engine.core.context import FileContext
from engine.core.converter import HitConverter
from engine.core.linefacts import StreamFacts
from engine.core.logend import READ_BY, TailState, ending_tables, log_end, read_endings
from engine.core.matching import Hit
from engine.core.replay import Input, LogTail, replay_inputs
from engine.core.scanner import scanner_for
from engine.facts import Fact
from engine.rulebook import require_rulebook
from engine.rulebook.model import Matcher
from engine.rulebook.yamlmarks import Mark
from engine.store import Store

# https://github.com/autobase-tech/autobase/pull/1200: logind's RemoveIPC under a running server
SHM_FATAL = 'FATAL: could not open shared memory segment "/PostgreSQL.3317458760": No such file or directory\n'
# constructed: a logger's last word that no specific matcher reads
PLAIN_FATAL = "FATAL: failed to read the model configuration\n"


@pytest.fixture(scope="module")
def compiled():
    return require_rulebook()


def _matcher(id: str, emit: str = "log", **attrs) -> Matcher:
    return Matcher(
        id=id, pattern="x", sources=("job",), emit=emit, mark=Mark("test", 1, 1), attrs=MappingProxyType(attrs)
    )


def _hit(matcher: int, offset: int, line: bytes = b"FATAL: x\n", blank: bytes | None = b"FATAL: x") -> Hit:
    return Hit(matcher, line, offset // 10 + 1, offset, {"g": "1"}, False, blank)


# -- the tables and the marking, on matchers made for the test ---------------------------------
MATCHERS = [
    _matcher("le_fatal", ending="app_error"),
    _matcher("le_exit", ending="unknown"),
    _matcher("specific"),
    _matcher("weak.x", weak=True),
    _matcher("steps", emit="progress"),
    _matcher("banner", emit="context"),
    _matcher("xid_line", emit="xid"),
]


def test_ending_tables_name_the_endings_and_the_readers():
    endings, readers, ids = ending_tables(MATCHERS, range(len(MATCHERS)))
    assert endings == {0, 1}
    assert readers == {2, 6}  # no ending, weak keyword, progress or context line reads a line
    assert ids[2] == "specific"
    assert ending_tables(MATCHERS[2:], range(5)) is None  # no ending matcher: nothing to mark
    assert ending_tables(MATCHERS[:2], range(2)) is None  # no reader


def test_an_ending_on_a_line_a_reader_hit_carries_the_readers_ids():
    endings, readers, ids = ending_tables(MATCHERS, range(len(MATCHERS)))
    hits = [_hit(0, 0), _hit(2, 0), _hit(6, 0), _hit(1, 10), _hit(0, 20), _hit(3, 20)]
    out = read_endings(hits, endings, readers, ids)
    assert out[0] is not hits[0] and out[0].groups == {"g": "1", READ_BY: "specific,xid_line"}
    assert out[0].blank is None  # a flood's shortcut never hands this fact to an unread line
    assert (out[0].matcher, out[0].line, out[0].offset) == (0, hits[0].line, 0)
    assert out[1:] == hits[1:] and out[3] is hits[3]  # another line's ending, weak hits: as they were
    assert READ_BY not in out[4].groups


def test_a_batch_without_an_ending_or_a_reader_is_the_same_list():
    endings, readers, ids = ending_tables(MATCHERS, range(len(MATCHERS)))
    hits = [_hit(2, 0), _hit(4, 10)]
    assert read_endings(hits, endings, readers, ids) is hits
    hits = [_hit(0, 0), _hit(2, 10)]
    assert read_endings(hits, endings, readers, ids) is hits


# -- the shipped rulebook, through the one scan loop replay and live share ----------------------
def _stream_facts(compiled, text: str, chunk: int = 1 << 16) -> list[Fact]:
    scanner, index_map = scanner_for(compiled, "job")
    stream = StreamFacts(
        scanner, HitConverter(list(compiled.matchers)), FileContext("slurm-7.out", "job", "7"), index_map
    )
    data = text.encode()
    out: list[Fact] = []
    for i in range(0, len(data), chunk):
        out += [it for _, _, it in stream.feed(data[i : i + chunk]) if isinstance(it, Fact)]
    out += [it for _, _, it in stream.flush() if isinstance(it, Fact)]
    return out


@pytest.mark.parametrize("chunk", [1 << 16, 7])
def test_the_scan_loop_marks_the_ending_a_specific_matcher_read(compiled, chunk):
    facts = _stream_facts(compiled, "epoch 1\n" + SHM_FATAL + PLAIN_FATAL, chunk)
    fatal = [f for f in facts if f.get("matcher") == "le_logger_fatal"]
    assert [f.get(READ_BY) for f in fatal] == ["k6_shm_removed_under_job", None]
    assert any(f.get("matcher") == "k6_shm_removed_under_job" for f in facts)


def _replay(compiled, text: str):
    store = Store(":memory:")
    facts: list[Fact] = []
    result = replay_inputs(
        [Input("slurm-4242.out", lambda: [text.encode()], "job")], compiled, store, on_fact=facts.append
    )
    classes = [store.require_incident(i.id).fault_class for i in result.incidents]
    fired = {r for i in result.incidents for r in store.rules_fired(i.id)}
    store.close()
    return facts, classes, fired


def test_the_generic_ending_gives_way_to_a_line_a_specific_matcher_read(compiled):
    facts, classes, fired = _replay(compiled, SHM_FATAL)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("ending") == "app_error" and end.get("ending_read_by") == "k6_shm_removed_under_job"
    assert classes == ["unknown"] and "symptom.k6_shm_removed_under_job_log_ends" in fired
    assert "fault.le_log_ends_on_program_error" not in fired and "symptom.le_program_error" not in fired


def test_a_line_no_specific_matcher_read_is_the_programs_own_error(compiled):
    facts, classes, fired = _replay(compiled, PLAIN_FATAL)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("ending") == "app_error" and end.get("ending_read_by") is None
    assert classes == ["app_error"] and "fault.le_log_ends_on_program_error" in fired


def test_a_read_line_after_an_unread_error_is_still_the_last_word(compiled):
    facts, classes, fired = _replay(compiled, PLAIN_FATAL + SHM_FATAL)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("ending_read_by") == "k6_shm_removed_under_job"
    assert classes == ["unknown"] and "fault.le_log_ends_on_program_error" not in fired


# https://github.com/itchio/itch/issues/1120: Node's ENOSPC, the program's last word (an ending of
# rules/38-log-end-r7ends.yaml) that holds storage's keyword
ENOSPC = "Error: ENOSPC: no space left on device, write\n"


def test_an_ending_on_a_line_leaves_its_keyword_to_the_weak_layer(compiled):
    facts, classes, fired = _replay(compiled, ENOSPC)
    assert any(f.get("matcher") == "r7_le_runtime_report" for f in facts)
    assert any(f.get("weak_class") == "storage_io_error" for f in facts)
    (end,) = [f for f in facts if f.kind == "log_end"]
    assert end.get("ending") == "app_error" and end.get("weak_class") == "storage_io_error"
    assert classes == ["storage_io_error"] and "weak.storage_io_error_log_ends" in fired


# -- LogTail's state: one object, restored whole ------------------------------------------------
def _log(origin: str, **attrs) -> Fact:
    return Fact.make("log", {"job": "7", "matcher": "m", **attrs}, 1.0, origin)


def _other(f) -> object:
    """A value of the field's kind that differs from anything the test set before."""
    return True if f.type in ("bool", bool) else _log("slurm-7.out:99", text=f"changed {f.name}")


def test_a_side_block_restores_every_field_of_the_tail_state():
    tail = LogTail()
    before = TailState(
        last=_log("slurm-7.out:1", text="the last line"),
        progress=False,
        weak=_log("slurm-7.out:2", weak=True, weak_class="cuda_oom"),
        ending=_log("slurm-7.out:3", ending="app_error"),
        cleanup=False,
    )
    tail.state = before.copy()
    tail.feed(_log("slurm-7.out:10", log_block="traceback"), 0)  # a header, counted
    for f in fields(TailState):  # whatever a later line would change, in every field (constructed)
        if f.name != "last":
            setattr(tail.state, f.name, _other(f))
    tail.feed(_log("slurm-7.out:11", log_block="side_frame"), 1)  # it was a side thread's block
    for f in fields(TailState):
        assert getattr(tail.state, f.name) is getattr(before, f.name), f.name


def test_every_field_of_the_tail_state_is_copied():
    state = TailState(**{f.name: _other(f) for f in fields(TailState)})
    copy = state.copy()
    assert copy is not state and all(getattr(copy, f.name) is getattr(state, f.name) for f in fields(TailState))
    copy.ending = None
    assert state.ending is not None


def test_log_end_reads_the_state():
    inp = Input("slurm-7.out", lambda: [], "job")
    assert log_end(inp, TailState()) is None
    read = _log("slurm-7.out:3", ending="app_error", read_by="k6_x", text="FATAL: x")
    end = log_end(inp, TailState(last=read, ending=read))
    assert end is not None and (end.get("tail"), end.get("ending_read_by")) == ("failure", "k6_x")
    end = log_end(inp, TailState(last=read, ending=read, progress=True))
    assert end is not None and end.get("tail") == "progress" and end.get("ending") is None
