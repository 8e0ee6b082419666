"""The on-disk cache is read only from a folder no one else can write (issue 18 item 11, review
M14): its entries are unpickled (a loaded rulebook) and handed to hyperscan's loader, so a folder
another user can write would run their code as ours (the agent runs as root). A refused folder
is logged with its reason and the cache is simply not used: never a crash.
"""

from __future__ import annotations

import logging
import os
import pickle
import stat
from pathlib import Path

import pytest

from engine import cache
from engine.rulebook import stored


class Planted:
    """A pickle that, when loaded, creates a file: what an attacker's entry would do instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("RECOVER_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_refused", set(), raising=False)
    return d


def plant(folder: Path, marker: Path) -> str:
    """A rulebook entry that runs code when unpickled, as another user could leave it."""
    k = "rulebook-" + "0" * 40
    folder.mkdir(exist_ok=True)
    (folder / k).write_bytes(pickle.dumps(Planted(marker)))
    os.chmod(folder / k, 0o600)
    return k


def test_a_new_folder_is_created_private(folder):
    old = os.umask(0)  # even where the umask would give everyone everything
    try:
        cache.put("thing-1", b"data")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert cache.get("thing-1") == b"data"


@pytest.mark.parametrize("mode, who", [(0o770, "its group"), (0o707, "others"), (0o777, "its group and others")])
def test_a_folder_others_may_write_is_refused_and_its_pickles_never_loaded(folder, tmp_path, caplog, mode, who):
    marker = tmp_path / "ran"
    k = plant(folder, marker)
    os.chmod(folder, mode)
    with caplog.at_level(logging.WARNING, logger="engine.cache"):
        assert stored.get(k) is None
        assert cache.get(k) is None
    assert not marker.exists()  # the planted code never ran
    assert f"cache {folder} not used: writable by {who}" in caplog.text
    cache.put("thing-1", b"data")  # nothing is written there either
    assert not (folder / "thing-1").exists()
    assert caplog.text.count("not used") == 1  # said once, not at every read


def test_a_folder_owned_by_another_user_is_refused(folder, tmp_path, monkeypatch, caplog):
    marker = tmp_path / "ran"
    k = plant(folder, marker)
    os.chmod(folder, 0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(folder).st_uid + 1)
    assert stored.get(k) is None and not marker.exists()
    assert f"owned by uid {os.stat(folder).st_uid}, not by uid" in caplog.text


def test_an_entry_others_may_write_is_not_read(folder, tmp_path, caplog):
    marker = tmp_path / "ran"
    k = plant(folder, marker)
    os.chmod(folder, 0o700)
    os.chmod(folder / k, 0o666)
    assert stored.get(k) is None and not marker.exists()
    assert "writable by its group and others" in caplog.text


def test_an_entry_that_is_a_link_is_not_followed(folder, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "ran"
    k = plant(elsewhere, marker)
    folder.mkdir(mode=0o700)
    (folder / k).symlink_to(elsewhere / k)
    assert stored.get(k) is None and not marker.exists()


def test_a_file_where_the_folder_should_be_is_refused_without_a_crash(folder, caplog):
    folder.write_bytes(b"")
    os.chmod(folder, 0o600)
    cache.put("thing-1", b"data")
    assert cache.get("thing-1") is None
    assert "not a directory" in caplog.text


def test_a_refused_folder_costs_only_speed(folder):
    from engine.rulebook import load_rulebook

    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    result = load_rulebook()  # the shipped rulebook, built without the cache
    assert result.ok and not list(folder.iterdir())
