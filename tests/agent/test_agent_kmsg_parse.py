"""Kernel-log lines through the agent's reader: the rulebook's kernel matchers (one parser for the
agent and replay), every documented format, prefixes, PCI domains, and lines that must not match.

The agent had its own Python Xid parser until issue 11; what it decoded beyond the rulebook
(UUID mapping lines, recovery actions as slugs, ``caused_by``, ``link``) is gone with it: the
rulebook's matchers decide what a kernel line says, on both sides of the spool (a Xid 45 that names
its cause also gives the rulebook's ``xid_cause_named`` log fact, with ``cause``).
"""

from __future__ import annotations

import pytest

from engine.sources.kmsg import KernelLineFacts, default_rulebook, kernel_line_time, normalize_pci

NODE = "gpu-n3"
_LINES = KernelLineFacts(default_rulebook(), NODE)


def parse_all(line: str):
    return _LINES.feed(line, 1000.0, "kern.log:1", "fid")


def parse(line: str):
    facts = [f for f in parse_all(line) if f.get("matcher") != "xid_cause_named"]
    assert len(facts) <= 1, facts
    return facts[0] if facts else None


# (line, code, pci, pid, process, detail-start, extra attrs) — the real examples from gpu-signals.md §1.2
EXAMPLES = [
    (
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        13,
        "0000:cb:00",
        None,
        None,
        "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0)",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: ChID 0052, Class 00000000, Offset 00001b0c, Data 1000f010",
        13,
        "0000:01:00",
        None,
        None,
        "Graphics Exception: ChID 0052",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=cuda_plot_k32_v, Ch 00000010, intr 00000000. MMU Fault: ENGINE CE2 HUBCLIENT_CE0 faulted @ 0x7f29_5b8c9000. Fault is of type FAULT_PRIV_VIOLATION ACCESS_TYPE_VIRT_READ",
        31,
        "0000:0a:00",
        13332,
        "cuda_plot_k32_v",
        "Ch 00000010, intr 00000000. MMU Fault",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 31, Ch 0000005a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_1 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
        31,
        "0000:01:00",
        None,
        None,
        "Ch 0000005a, intr 10000000.",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000052 intr 02000000",
        32,
        "0000:01:00",
        None,
        None,
        "Channel ID 00000052 intr 02000000",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        45,
        "0000:dc:00",
        1818990,
        "python3",
        "Ch 00000001 caused by previous Xid 149",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008",
        45,
        "0000:0a:00",
        None,
        None,
        "Ch 00000008",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
        48,
        "0000:07:00",
        None,
        None,
        "An uncorrectable double bit error (DBE)",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:0a:00): 62, pid='<unknown>', name=<unknown>, 2023b230 20238a3a 2023e8b6 2023eac4",
        62,
        "0000:0a:00",
        None,
        None,
        "2023b230 20238a3a",
        {},
    ),
    (
        "kernel: NVRM: Xid (PCI:0000:c1:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1",
        74,
        "0000:c1:00",
        None,
        None,
        "NVLink: fatal error detected on link 1",
        {},
    ),
    (
        "[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
        79,
        "0000:06:00",
        None,
        None,
        "GPU has fallen off the bus.",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        79,
        "0000:05:00",
        None,
        None,
        "GPU has fallen off the bus.",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
        109,
        "0000:cb:00",
        1797828,
        "pt_main_thread",
        "Ch 00000008, errorString CTX SWITCH TIMEOUT",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
        119,
        "0000:9b:00",
        2024380,
        "nvidia-smi",
        "Timeout after 6s of waiting for RPC response",
        {},
    ),
    (
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
        145,
        "0018:01:00",
        None,
        None,
        "",
        {"nvlink_unit": "RLW_RXPIPE", "fatality": "Nonfatal"},
    ),
    (
        "NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        149,
        "0008:01:00",
        None,
        None,
        "",
        {"nvlink_unit": "NETIR_LINK_EVT", "fatality": "Fatal"},
    ),
    (
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        154,
        "0009:01:00",
        None,
        None,
        "",
        {"recovery_action": "Drain and Reset"},
    ),
    (
        "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)",
        154,
        "0008:01:00",
        None,
        None,
        "",
        {"recovery_action": "GPU Reset Required"},
    ),
    # the documented (synthetic) shapes of 94 and 95, and NVIDIA's own oldest example
    (
        "NVRM: Xid (PCI:0000:3b:00): 94, pid=4242, name=python, Contained: SM (0x1). RST: No, D-RST: No",
        94,
        "0000:3b:00",
        4242,
        "python",
        "Contained: SM (0x1). RST: No, D-RST: No",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:3b:00): 95, pid=4242, name=python, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
        95,
        "0000:3b:00",
        4242,
        "python",
        "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
        {},
    ),
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00", None, None, "Channel 00000001", {}),
    (
        "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000321) marked for remapping, reset gpu to activate.",
        63,
        "0000:3b:00",
        None,
        None,
        "Row Remapper: New row",
        {},
    ),
    (
        "NVRM: Xid (PCI:0000:3b:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: Failed to remap row",
        64,
        "0000:3b:00",
        None,
        None,
        "Row Remapper Error",
        {},
    ),
]


@pytest.mark.parametrize(
    "line,code,pci,pid,process,detail,extra", EXAMPLES, ids=[f"xid{e[1]}-{i}" for i, e in enumerate(EXAMPLES)]
)
def test_documented_examples(line, code, pci, pid, process, detail, extra):
    f = parse(line)
    assert f is not None and f.kind == "xid"
    assert f.get("code") == code and isinstance(f.get("code"), int)
    assert f.get("pci") == pci
    assert f.get("node") == NODE
    assert f.get("pid") == pid
    assert f.get("process") == process
    if detail:
        assert f.get("detail", "").startswith(detail), f.get("detail")
    for k, v in extra.items():
        assert f.get(k) == v, k
    assert f.get("source") == "kernel" and f.get("matcher", "").startswith("xid")


PREFIXES = [
    "",
    "[ 1234.5678] ",
    "[155044.078590] ",
    "[ T1946] ",
    "[  123.456789] [ T1946] ",
    "Nov 29 17:00:01 gpu-n3 kernel: ",
    "Nov  2 07:00:01 gpu-n3 kernel: [ 1234.5678] ",
    "2026-11-29T17:00:01.123456+00:00 gpu-n3 kernel: ",
    "kernel: ",
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    "body",
    [
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ],
)
def test_prefixes_do_not_change_the_fact(prefix, body):
    f = parse(prefix + body)
    assert f is not None
    assert f.get("code") == 79
    assert f.get("pci") == "0000:3b:00"
    assert f.get("node") == NODE
    assert f.get("detail") == "GPU has fallen off the bus."


def test_a_syslog_host_that_is_not_this_node_is_kept_aside():
    f = parse("Nov 29 17:00:01 other kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert f.get("node") == NODE and f.get("logged_node") == "other"


@pytest.mark.parametrize(
    "written,normal",
    [
        ("0000:3b:00", "0000:3b:00"),
        ("0000:3B:00", "0000:3b:00"),
        ("0008:01:00", "0008:01:00"),
        ("0018:01:00", "0018:01:00"),
        ("00000000:3B:00.0", "0000:3b:00"),
        ("0000:3b:00.0", "0000:3b:00"),
    ],
)
def test_any_pci_domain_and_case(written, normal):
    f = parse(f"NVRM: Xid (PCI:{written}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error")
    assert f is not None and f.get("pci") == normal


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "Nov 29 17:00:01 h kernel: NVRM: The NVIDIA GPU 0008:01:00.0 (PCI ID: 10de:2335) installed in this system has fallen off the bus and is not responding to commands.",
        "NVRM: fallen off the bus and is not responding to commands.",
    ],
)
def test_fallen_off_the_bus_without_xid_is_the_rulebook_matcher(line):
    f = parse(line)
    assert f is not None and f.kind == "log" and f.get("matcher") == "gpu_fallen_off_bus_text"
    assert f.get("node") == NODE


@pytest.mark.parametrize(
    "line",
    [
        "",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
        "NVRM: GPU at PCI:0000:01:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d",
        "NVRM: GPU Board Serial Number: 1652321012345",
        "NVRM: Xid (PCI:0000:3b:00): Graphics Exception",  # no code
        "NVRM: Xid: 79",
        "training step 100: Xid 79 mentioned by a user",
        "pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0",
        "NVRM: The NVIDIA GPU 0000:3b:00.0",  # header alone is not a fact
    ],
)
def test_lines_that_are_not_facts(line):
    assert parse(line) is None


@pytest.mark.parametrize(
    "line, code",
    [("NVRM: Xid (PCI:zz00:3b:00): 13, Graphics Exception", 13), ("NVRM: Xid (PCI:0000:3b): 79, two-part address", 79)],
)
def test_an_xid_whose_pci_field_is_no_bus_id_is_the_xid_without_one(line, code):
    """An Xid is `Xid` and a code whatever its PCI field says (issue 20: redacted and odd fields are
    common in real reports); a field that is no bus id is dropped, never kept as one."""
    f = parse(line)
    assert f is not None and f.kind == "xid" and f.get("code") == code and f.get("node") == NODE
    assert f.get("pci") is None


def test_text_is_bounded_and_cleaned():
    noise = "A\x00B\x1b[31mC\x7fD\u202eE\tF\r\n" + "x" * 5000
    f = parse(f"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=py, {noise}")
    for key in ("detail", "text"):
        d = f.get(key)
        assert len(d) <= 512
        assert "\u202e" not in d and "\x00" not in d and "\x1b" not in d


def test_name_unknown_and_quoted_pid():
    f = parse("NVRM: Xid (PCI:0000:3b:00): 31, pid=4567, name='python3', Ch 00000010")
    assert f.get("pid") == 4567 and f.get("process") == "python3"


def test_ids_are_the_ones_given():
    line = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    assert _LINES.feed(line, 5.0, "kern.log:10", "abc")[0].id == "abc"


@pytest.mark.parametrize(
    "text,normal",
    [
        ("00000000:3B:00.0", "0000:3b:00"),
        ("PCI:0008:01:00", "0008:01:00"),
        ("3b:00.0", "0000:3b:00"),
        ("0001:3B:1F.7", "0001:3b:1f"),
        ("garbage", None),
        ("3b:1f", "0000:3b:1f"),  # two parts are bus:device, the domain left out
        ("0000:3b", None),  # not an address: a bus has at most two hex digits
        ("", None),
        (None, None),
    ],
)
def test_normalize_pci(text, normal):
    assert normalize_pci(text) == normal


def test_line_times():
    now = kernel_line_time("2026-11-29T17:00:01Z host kernel: x")
    assert now is not None
    assert kernel_line_time("2026-11-29T17:00:01.5+0100 host kernel: x") == pytest.approx(now - 3600 + 0.5)
    # a BSD stamp takes the year that puts it at most a day ahead of now
    t = kernel_line_time("Nov 29 17:00:01 host kernel: x", now=now)
    assert t is not None and abs(t - now) < 2 * 86400
    t_dec = kernel_line_time("Dec 31 23:59:59 host kernel: x", now=now)
    assert t_dec < now
    assert kernel_line_time("[ 12.5] NVRM: x") is None
    assert kernel_line_time("Foo 29 17:00:01 host kernel: x") is None
