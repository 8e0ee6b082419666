"""Finding a live job's dumps (issue 21 item 7, live part): the prefix a job prints is hostile and
is used only inside the folders the site allows, reached without a link; the wait for the dumps
is bounded and polled, never slept in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.errors import DumpRefused
from engine.sources.fr_analysis import analyze
from engine.sources.fr_locate import DumpWait, locate, printed_prefix, site_place
from tests.attribution.fr_dumps import FakeJob


def test_printed_prefix() -> None:
    assert printed_prefix("export TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/scratch/fr/42/trace_") == "/scratch/fr/42/trace_"
    assert printed_prefix("TORCH_FR_DUMP_TEMP_FILE: '/scratch/fr/x_'") == "/scratch/fr/x_"
    assert printed_prefix("[rank0]: TORCH_NCCL_DEBUG_INFO_TEMP_FILE=relative/x") is None
    assert printed_prefix("nothing here") is None


def test_only_inside_the_allowed_folders(tmp_path: Path) -> None:
    root = tmp_path / "fr"
    (root / "42").mkdir(parents=True)
    place = locate(f"{root}/42/trace_", [str(root)])
    assert (place.folder, place.start) == (f"{root}/42", "trace_")
    for prefix, why in (
        ("/etc/pass", "outside the folders"),
        (f"{root}/../secret/x_", "'..'"),
        ("relative/x_", "absolute"),
        (f"{root}/42/a b", "characters"),
        (f"{tmp_path}/fr2/x_", "outside the folders"),  # a name that only starts like the root
    ):
        with pytest.raises(DumpRefused) as info:
            locate(prefix, [str(root)])
        assert why in info.value.reason
    with pytest.raises(DumpRefused):
        site_place(f"{root}/{{job}}/trace_", "../../etc")
    assert site_place(f"{root}/{{job}}/trace_", "42").folder == f"{root}/42"


def test_a_link_on_the_way_is_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "fr"
    root.mkdir()
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    FakeJob(2).write(elsewhere, prefix="trace_")
    (root / "42").symlink_to(elsewhere)  # the job made its folder a link to someone's files
    wait = DumpWait(locate(f"{root}/42/trace_", [str(root)]), started=0.0)
    assert wait.poll(0.0) == [] and wait.done and "symbolic link" in (wait.error or "")
    assert wait.read()[0] == []


def test_a_linked_dump_file_is_refused_inside_the_folder(tmp_path: Path) -> None:
    root = tmp_path / "fr"
    FakeJob(2).write(root / "42", prefix="trace_")
    (root / "42" / "trace_1").unlink()
    (root / "42" / "trace_1").symlink_to("/etc/hostname")
    wait = DumpWait(locate(f"{root}/42/trace_", [str(root)]), started=0.0, expect=2)
    assert wait.poll(0.0) == ["trace_0", "trace_1"]
    dumps, refused = wait.read()
    assert [d.rank for d in dumps] == [0] and "symbolic link" in refused[0].reason


def test_the_wait_is_bounded_and_polled(tmp_path: Path) -> None:
    root = tmp_path / "fr"
    root.mkdir()
    job = FakeJob(4)
    for _ in range(3):
        job.collective()
    job.collective(state="scheduled", skip={3})
    wait = DumpWait(locate(f"{root}/42/trace_", [str(root)]), started=100.0, wait_s=60, settle_s=5)
    assert wait.poll(100.0) is None  # the folder is not there yet: wait
    job.write(root / "42", prefix="trace_", omit={2, 3})
    assert wait.poll(101.0) is None  # two dumps, more may come
    job.write(root / "42", prefix="trace_", omit={0, 1, 3})
    assert wait.poll(104.0) is None  # a third came: settling again
    assert wait.poll(109.5) == ["trace_0", "trace_1", "trace_2"]  # none for 5 s: done
    dumps, refused = wait.read()
    assert refused == [] and {s.rank for s in analyze(dumps)} == {3}

    nothing = DumpWait(locate(f"{root}/43/trace_", [str(root)]), started=100.0, wait_s=60)
    assert nothing.poll(159.0) is None and nothing.poll(160.0) == []  # gives up at the bound


def test_a_folder_with_too_many_files_is_not_listed_in_full(tmp_path: Path) -> None:
    from engine.sources.flight_recorder import Limits

    root = tmp_path / "fr"
    (root / "42").mkdir(parents=True)
    for i in range(20):
        os.close(os.open(root / "42" / f"junk{i}", os.O_CREAT | os.O_WRONLY))
    wait = DumpWait(locate(f"{root}/42/trace_", [str(root)]), started=0.0, limits=Limits(max_files=10))
    assert wait.poll(0.0) == [] and "more than the bound of 10" in (wait.error or "")
