"""Property tests: garbage never raises in the kernel-log parser, the file follower or the spool reader."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.facts import Fact
from engine.sources.kmsg import KernelLineFacts, KernelLogSource, default_rulebook, normalize_pci
from engine.sources.tail import LineTail
from engine.sources.spool import SpoolReader

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# text that is likely to reach the interesting branches
FRAGMENTS = st.sampled_from(
    [
        "NVRM: ",
        "Xid ",
        "(PCI:",
        "0000:3b:00",
        "00000000:3B:00.0",
        "): ",
        "79",
        "154",
        "45",
        ", ",
        "pid=",
        "'<unknown>'",
        "name=",
        "<unknown>",
        "GPU has fallen off the bus.",
        "fallen off the bus",
        "The NVIDIA GPU ",
        "(PCI ID: 10de:20b2)",
        "GPU at PCI:",
        "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d",
        "recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        "6,1234,5678,-;",
        "[ 1234.5]",
        "Nov 29 17:00:01 h kernel: ",
        "caused by previous Xid ",
        "Link ",
        "\x00",
        "\u202e",
        "\n",
        "RmInitAdapter failed",
        "SXid",
    ]
)
LINES = st.one_of(st.text(max_size=400), st.lists(st.one_of(FRAGMENTS, st.text(max_size=12)), max_size=25).map("".join))


_LINES = KernelLineFacts(default_rulebook(), "n1")


@SETTINGS
@given(LINES)
def test_parser_never_raises(line):
    for f in _LINES.feed(line, 1.0, "o"):
        assert f.kind in ("xid", "log") and f.get("node") == "n1"
        if f.kind == "xid":
            assert isinstance(f.get("code"), int)
            assert len(f.get("detail", "")) <= 512
            pci = f.get("pci")
            assert pci is None or normalize_pci(pci) == pci
    normalize_pci(line)


@SETTINGS
@given(st.binary(max_size=2000))
def test_parser_on_random_bytes(data):
    _LINES.feed(data, 1.0, "o")


@SETTINGS
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=12))
def test_follower_returns_exactly_the_complete_lines(chunks):
    """Whatever bytes are appended in whatever chunks, the follower returns the lines split at
    newlines, each once, in order, and its position is the start of the unfinished line."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kern.log")
        open(path, "wb").close()
        fol = LineTail(path, max_line=1 << 20)
        fol.read()
        got: list[bytes] = []
        written = b""
        for chunk in chunks:
            with open(path, "ab") as fh:
                fh.write(chunk)
            written += chunk
            got += [line for (_, _, _, line) in fol.read()]
        complete = written[: written.rfind(b"\n") + 1]
        assert got == complete.split(b"\n")[:-1]
        assert fol.position()["offset"] == len(complete)


@SETTINGS
@given(st.lists(st.binary(max_size=300), max_size=10))
def test_kernel_source_on_random_bytes(chunks):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kern.log")
        src = KernelLogSource("n1", path, replay=True)
        for chunk in chunks:
            with open(path, "ab") as fh:
                fh.write(chunk)
            for f in src.poll():
                assert isinstance(f, Fact)


def _fact(i: int) -> Fact:
    return Fact.make("xid", {"code": 79, "node": "n1", "pid": i}, at=float(i), origin=f"k:{i}")


@SETTINGS
@given(st.lists(st.one_of(st.integers(0, 50), st.binary(max_size=200)), max_size=30), st.integers(1, 4000))
def test_spool_reader_never_raises_and_keeps_every_valid_line(items, budget):
    """Garbage between valid lines never raises, never hides a valid fact, and is counted."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "n1.jsonl")
        expected: list[int] = []
        with open(path, "wb") as fh:
            for item in items:
                if isinstance(item, int):
                    fh.write(_fact(item).to_json().encode() + b"\n")
                    if item not in expected:
                        expected.append(item)
                else:
                    fh.write(item.replace(b"\n", b" ") + b"\n")
        r = SpoolReader(d)
        got: list[int] = []
        for _ in range(10000):
            facts = r.read(max_bytes=budget)
            got += [f.get("pid") for f in facts]
            if r.offsets.get("n1.jsonl", (0, -1))[1] == os.path.getsize(path):
                break
        assert got == expected


@SETTINGS
@given(st.binary(max_size=3000))
def test_spool_reader_on_pure_garbage(data):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "x.jsonl"), "wb") as fh:
            fh.write(data)
        with open(os.path.join(d, "x.jsonl.1"), "wb") as fh:
            fh.write(data[::-1])
        r = SpoolReader(d)
        r.read()
        r.read()
