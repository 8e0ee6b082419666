"""Rank signals as facts (issue 21): a RankSignal becomes a ``rank_signal`` fact of the job attempt
the caller names, reads back unchanged, and never carries the printed host as a node."""

from __future__ import annotations

import json

import pytest

from engine.core.rank_signals import RankSignal, rank_signal_fact, signal_of
from engine.errors import FactError
from engine.facts import Fact
from engine.sources.spool import SpoolReader


def _sig(**kw) -> RankSignal:
    base = {
        "rank": 7,
        "signal": "fr_not_joined",
        "detail": "pg 0 seq 42 allreduce",
        "origin": "/fr/rank_7",
        "group": "0",
        "seq": 42,
    }
    base.update(kw)
    return RankSignal(**base)


def test_a_signal_becomes_a_fact_of_the_attempt_and_reads_back():
    sig = _sig(host="n3")
    f = rank_signal_fact(sig, "4242", 1, 100.0)
    assert f.kind == "rank_signal" and f.origin == "/fr/rank_7" and f.at == 100.0
    assert dict(f.attrs) == {
        "job": "4242",
        "attempt": 1,
        "rank": 7,
        "signal": "fr_not_joined",
        "detail": "pg 0 seq 42 allreduce",
        "group": "0",
        "seq": 42,
        "host": "n3",
    }
    assert "node" not in f.attrs  # the printed host is no claim about a node
    assert signal_of(f) == sig
    assert signal_of(Fact.from_json(f.to_json())) == sig  # what the store keeps reads back the same


def test_optional_fields_are_left_out():
    f = rank_signal_fact(_sig(group=None, seq=None), "5", 0, 1.0)
    assert set(f.attrs) == {"job", "attempt", "rank", "signal", "detail"}
    assert signal_of(f) == _sig(group=None, seq=None)


@pytest.mark.parametrize(
    "job,attempt,kw",
    [
        ("12; rm -rf /", 0, {}),
        ("5", -1, {}),
        ("5", True, {}),
        ("5", 0, {"seq": 1 << 60}),
        ("5", 0, {"seq": -3}),
    ],
)
def test_bad_job_attempt_or_sequence_is_refused(job, attempt, kw):
    with pytest.raises(FactError):
        rank_signal_fact(_sig(**kw), job, attempt, 1.0)


def test_hostile_text_is_bounded_and_cleaned():
    f = rank_signal_fact(_sig(detail="\x1b[31m" + "x" * 10000, signal="s\u202e" * 100), "5", 0, 1.0)
    assert len(f.get("detail")) <= 512 and "\x1b" not in f.get("detail")
    assert len(f.get("signal")) <= 64 and "\u202e" not in f.get("signal")


def test_other_kinds_and_malformed_facts_are_no_signal():
    assert signal_of(Fact.make("log", {"rank": 3}, 1.0, "x:1")) is None
    assert signal_of(Fact.make("rank_signal", {"rank": 10**13, "signal": "x"}, 1.0, "x")) is None


def test_a_node_spool_cannot_speak_for_a_rank(tmp_path):
    f = rank_signal_fact(_sig(), "5", 0, 1.0)
    (tmp_path / "n1.jsonl").write_text(json.dumps(f.to_dict()) + "\n")
    r = SpoolReader(str(tmp_path))
    assert r.read() == []
    assert r.stats["refused_kind"] == 1
