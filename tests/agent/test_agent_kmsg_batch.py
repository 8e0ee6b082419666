"""The kernel-log reader scans each read as one buffer and dates, numbers and names only the lines
a matcher hit (issue 24). Held here to the line-by-line reading it replaced: the same facts (ids,
kinds, attributes, times, origins) and the same saved position, read after read, for a file and
for /dev/kmsg records, with the inputs that make the buffered path step aside (a rotation, a
truncation, a cut line, bytes that are not UTF-8) or look back (undated hits, yearless stamps)."""

from __future__ import annotations

import os

from engine.sources.kmsg import KernelLineFacts, KernelLogSource, _line_id, default_rulebook

NODE = "n1"


def xid(pid: int, code: int = 79, stamp: str = "Nov 29 17:00:01") -> str:
    head = f"{stamp} {NODE} kernel: " if stamp else ""
    return f"{head}NVRM: Xid (PCI:0000:3b:00): {code}, pid={pid}, name=python3, GPU has fallen off the bus.\n"


def noise(i: int, stamp: str = "Nov 29 17:00:02") -> str:
    return f"{stamp} {NODE} kernel: eth0: link is up, 100 Gbps, flow control rx/tx ({i})\n"


#: what the file gets, read after read: (what is appended, what is done to the file first)
STEPS: list[tuple[str | bytes, str | None]] = [
    (noise(1) + xid(1) + noise(2), None),
    # undated hits: dated by the nearest stamped line before them (in this read, in an earlier one)
    (noise(3, "Nov 29 18:00:00") + "undated continuation\n" + xid(2, stamp=""), None),
    (xid(3, stamp=""), None),
    # yearless stamps across the new year, ISO stamps, a carriage return, empty lines
    (
        noise(4, "Dec 31 23:59:59")
        + xid(4, stamp="Jan  1 00:00:03")
        + "\n\n"
        + xid(5, 48, "2026-01-01T00:00:04+01:00"),
        None,
    ),
    ("garbage\r" + xid(6).rstrip("\n") + "\r\n" + noise(5, "Jan  1 00:01:00"), None),
    # bytes that are not UTF-8: that read goes line by line
    (b"\xff\xfe broken " + xid(7).encode() + xid(8, 13).encode(), None),
    # a line longer than the reader's cut: line by line
    ("x" * 70000 + "\n" + xid(9), None),
    (xid(10) + noise(6), "truncate"),
    (xid(11) + noise(7), "rotate"),
    (noise(8) + xid(12, 31, "") + noise(9, "Jan  2 00:00:00") + xid(13, 63), None),
]


def _facts(facts) -> list[tuple]:
    return [(f.id, f.kind, dict(f.attrs), f.at, f.origin) for f in facts]


def test_file_reads_give_the_facts_and_positions_of_line_by_line(tmp_path):
    log = tmp_path / "kern.log"
    buffered = KernelLogSource(NODE, str(log), replay=True)
    lines = KernelLogSource(NODE, str(log), replay=True)
    lines.lines.scan = lambda raws: None  # type: ignore[method-assign]  # every read takes the fallback
    read = 0
    for text, before in STEPS:
        if before == "truncate":
            log.write_bytes(b"")
        elif before == "rotate":
            os.rename(log, f"{log}.1")
        with open(log, "ab") as fh:
            fh.write(text if isinstance(text, bytes) else text.encode())
        got, want = _facts(buffered.poll()), _facts(lines.poll())
        assert got == want, f"after {before or 'appending'} {text[:60]!r}"
        read += len(got)
        assert buffered.position() == lines.position()
        assert buffered.dates.ref == lines.dates.ref
        assert buffered.lines_read == lines.lines_read
    assert read >= 13  # every Xid was read (a test that can fail)


def test_buffered_path_is_taken_and_steps_aside(tmp_path, monkeypatch):
    """The buffered path runs for a plain read, and not for a read with bytes that are not UTF-8."""
    calls: list[bool] = []
    orig = KernelLineFacts.scan

    def spy(self, lines):
        out = orig(self, lines)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(KernelLineFacts, "scan", spy)
    log = tmp_path / "kern.log"
    src = KernelLogSource(NODE, str(log), replay=True)
    log.write_text(noise(1) * 50 + xid(1) + noise(2) * 50)
    assert [f.get("pid") for f in src.poll()] == [1]
    with open(log, "ab") as fh:
        fh.write(b"\xff\n" + xid(2).encode())
    assert [f.get("pid") for f in src.poll()] == [2]
    assert calls == [True, False]


def kmsg_record(seq: int, usec: int, msg: str) -> str:
    return f"4,{seq},{usec},-;{msg}\n SUBSYSTEM=pci\n"


def test_kmsg_records_scanned_together_give_what_each_gives_alone(tmp_path):
    """/dev/kmsg: the facts of hit records only, with their sequence numbers as ids and origins."""
    dev = tmp_path / "kmsg"
    body = "NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python3, detail\r{code}"
    records = [kmsg_record(1, 1_000_000, "eth0: link up")]
    records += [kmsg_record(2 + i, 2_000_000 + i, body.format(code=code)) for i, code in enumerate((79, 48, 13))]
    records.append(kmsg_record(9, 9_000_000, "NVRM: " + "y" * 9000 + " Xid (PCI:0000:3b:00): 31, too far"))
    dev.write_text("".join(records))
    src = KernelLogSource(NODE, kmsg=True, kmsg_path=str(dev), replay=True)
    src.open()
    facts = src.poll()
    assert [(f.get("code"), f.origin) for f in facts] == [(79, "kmsg:n1:2"), (48, "kmsg:n1:3"), (13, "kmsg:n1:4")]
    assert src.lines_read == 5
    # the same as each record fed on its own
    one = KernelLineFacts(default_rulebook(), NODE, f"kmsg:{NODE}")
    boot = src._kmsg.btime
    want = []
    for i, code in enumerate((79, 48, 13)):
        seq = 2 + i
        fid = _line_id("kmsg", NODE, src._kmsg.boot_id, seq)
        want += one.feed(body.format(code=code), boot + (2_000_000 + i) / 1e6, f"kmsg:{NODE}:{seq}", fid)
    assert _facts(facts) == _facts(want)
