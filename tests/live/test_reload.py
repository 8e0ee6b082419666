"""engine.live.reload alone: a changed rulebook file is noticed; a rulebook that does not load or
does not validate is rejected (said, counted) and never handed to the controller."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from engine.live.metrics import Metrics
from engine.live.reload import RulebookWatch, rulebook_stamps


def reloads(metrics: Metrics, result: str) -> float | None:
    return metrics.registry.get_sample_value("recover_rulebook_reloads_total", {"result": result})


class Result(SimpleNamespace):
    """What load_rulebook returns, as far as the watch reads it."""


def test_an_edited_added_or_removed_rule_file_is_a_change(tmp_path):
    folder = tmp_path / "rules.d"
    folder.mkdir()
    (folder / "10-site.yaml").write_text("rules: []\n")
    single = tmp_path / "extra.yaml"
    single.write_text("lists: {}\n")
    valid = Result(ok=True, errors=[], compiled=object())
    watch = RulebookWatch([str(folder), str(single)], False, Metrics(), load=lambda: valid)
    assert not watch.changed()
    (folder / "20-more.yml").write_text("rules: []\n")
    assert watch.changed()
    watch.load()
    assert not watch.changed()
    (folder / "notes.txt").write_text("not a rule file\n")
    assert not watch.changed()
    single.write_text("lists: {a: [1]}\n")
    assert watch.changed()
    single.unlink()
    assert rulebook_stamps([str(single)], False) == {str(single): -1.0}


def test_the_shipped_files_are_watched_with_the_defaults(tmp_path):
    assert rulebook_stamps([], True) and rulebook_stamps([], False) == {}


def _raise():
    raise RuntimeError("loader bug")


@pytest.mark.parametrize(
    "load, said",
    [
        (_raise, "keeping the current rulebook: loader bug"),
        (lambda: Result(ok=False, errors=["rules.yaml:3:5: E101 unknown key"], compiled=None), "E101 unknown key"),
    ],
)
def test_a_rulebook_that_fails_is_rejected_and_said(tmp_path, caplog, load, said):
    metrics = Metrics()
    watch = RulebookWatch([], False, metrics, load=load)
    with caplog.at_level(logging.ERROR, logger="engine.live.reload"):
        assert watch.load() is None
    assert said in caplog.text
    assert reloads(metrics, "rejected") == 1 and reloads(metrics, "ok") == 0


def test_a_valid_rulebook_is_handed_over_and_counted_once_accepted(tmp_path):
    metrics = Metrics()
    compiled = SimpleNamespace(rules=[1, 2], matchers=[1])
    rules = tmp_path / "r.yaml"
    rules.write_text("rules: []\n")
    watch = RulebookWatch([str(rules)], False, metrics, load=lambda: Result(ok=True, errors=[], compiled=compiled))
    rules.write_text("rules: [] # edited\n")
    assert watch.changed()
    assert watch.load() is compiled
    assert not watch.changed()  # the files as loaded are the new reference
    assert reloads(metrics, "ok") == 0  # the controller says when the engine took it
    watch.accepted(compiled)
    assert reloads(metrics, "ok") == 1
    watch.rejected()
    assert reloads(metrics, "rejected") == 1
