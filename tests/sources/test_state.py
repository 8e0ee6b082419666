"""engine/sources/state.py: the agent's and the kernel-log source's JSON state files."""

import json
import logging

from engine.sources.state import atomic_write_json, load_json


def test_a_written_state_reads_back_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "deep" / "state.json"  # the folder is made
    atomic_write_json(str(path), {"b": [1, 2], "a": "x"})
    assert load_json(str(path)) == {"a": "x", "b": [1, 2]}
    atomic_write_json(str(path), {"a": "y"})
    assert json.loads(path.read_text()) == {"a": "y"}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_a_missing_state_is_a_fresh_start_in_silence(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert load_json(str(tmp_path / "none.json")) is None
    assert not caplog.records


def test_a_broken_state_is_a_fresh_start_said_in_the_log(tmp_path, caplog):
    path = tmp_path / "state.json"
    path.write_bytes(b'{"offset": 12\xff')
    with caplog.at_level(logging.WARNING, logger="engine.sources.state"):
        assert load_json(str(path)) is None
    assert "unreadable state" in caplog.text
    (tmp_path / "dir.json").mkdir()
    assert load_json(str(tmp_path / "dir.json")) is None  # an OSError, not a traceback
