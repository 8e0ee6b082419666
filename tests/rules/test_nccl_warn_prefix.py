"""NCCL's WARN prefix is read the same way by every matcher that takes a node from it (review5).

NCCL prints ``host:pid:tid [dev] <filefunc>:<line> NCCL WARN `` and, since 2.2x, ``... <file>:<line>
(<func>) NCCL WARN ``; the AWS OFI plugin's filefunc is its ``__PRETTY_FUNCTION__``, with spaces and
parentheses in its C++ builds. One matcher read all of these and the others only
``[\\w./-]+:\\d+``: on a line with a ``(func)`` part they fell back to their prefix-less branch and
lost the node (nccl_warn, which needs the prefix, missed the line). The rulebook has no shared
pattern pieces (docs/rulebook.md: lists and macros are values and where-clauses), so every such
matcher spells the prefix with the same text, ``PREFIX`` below, and this test fails when one
drifts. The filefunc may hold anything but a bracket or a newline, so that it never reaches over
another ``[dev]`` and the node is the host that printed the line, never a host named after
NCCL WARN.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
import re2
import yaml

RULES = Path(__file__).resolve().parents[2] / "rules"

PREFIX = (
    r"(?P<node>[A-Za-z0-9][A-Za-z0-9_-]*)(?:\.[A-Za-z0-9-]+)*:\d+:\d+ \[(?P<local_rank>\d+)\]"
    r"(?: [^\n\[\]]{1,200}?:\d+(?: \([^\n\[\]]{1,120}?\))?)? NCCL WARN "
)


@lru_cache(maxsize=None)
def matchers() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(RULES.glob("*.yaml")):
        for m in (yaml.safe_load(path.read_text()) or {}).get("matchers") or []:
            out[m["id"]] = {**out.get(m["id"], {}), **m}
    return out


def prefixed() -> list[str]:
    """Matchers that take a node from an NCCL WARN line."""
    return sorted(
        mid for mid, m in matchers().items() if "NCCL WARN" in m.get("pattern", "") and "(?P<node>" in m["pattern"]
    )


def hit(mid: str, line: str) -> dict | None:
    m = re2.search(matchers()[mid]["pattern"], line)
    return None if m is None else {k: v for k, v in m.groupdict().items() if v is not None}


def test_every_nccl_warn_prefix_is_spelled_the_same():
    ids = prefixed()
    # nccl_ib_completion_error, nccl_ib_verbs_call_failed, nccl_socket_closed, nccl_warn,
    # cuda_oom_runtime, cuda_illegal_access, cuda_fault_family, cuda_ecc_uncorrectable
    assert len(ids) >= 8, ids
    for mid in ids:
        pattern = matchers()[mid]["pattern"]
        assert pattern.count("NCCL WARN") == pattern.count(PREFIX), (
            f"{mid}: its NCCL WARN prefix differs from the one every NCCL WARN matcher shares "
            "(tests/rules/test_nccl_warn_prefix.py PREFIX)"
        )


# Real lines whose filefunc has a "(func)" part, each with the URL of its train-side source.
REAL = [
    # https://github.com/NVIDIA/nccl/issues/2303 (NCCL 2.30.7)
    (
        "[2026-07-23 04:16:01] watchtower-navy-cn13:2619531:2620804 [1] misc/strongstream.cc:424 (ncclStrongStreamSynchronize) NCCL WARN Cuda failure 'unspecified launch failure'",
        {"cuda_illegal_access": "watchtower-navy-cn13", "nccl_warn": "watchtower-navy-cn13"},
        "1",
    ),
    (
        "[2026-07-23 04:16:01] watchtower-navy-cn13:2619531:2620804 [1] init.cc:2745 (commDestroySync) NCCL WARN commDestroySync: comm 0x3a0f7f50 rank 1 sync deviceStream error 1",
        {"nccl_warn": "watchtower-navy-cn13"},
        "1",
    ),
    # https://github.com/NVIDIA/DCGM/issues/304
    (
        "[2026-06-23 15:45:07] gpu-stress-dgc86-xfpt6:420:437 [5] transport/nvls.cc:379 (nvlsAllocateMem) NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the operation cannot be performed in the present state'.",
        {"nccl_warn": "gpu-stress-dgc86-xfpt6"},
        "5",
    ),
    # https://github.com/NVIDIA/nccl/issues/2397 (NCCL 2.30.4, a filefunc with no "(func)" part)
    (
        "[2026-09-09 11:29:56] ubuntu2:321049:321049 [0] ras/client_support.cc:181 NCCL WARN Call to bind failed: Address already in use",
        {"nccl_warn": "ubuntu2"},
        "0",
    ),
]


@pytest.mark.parametrize("line,nodes,local_rank", REAL, ids=[r[0][22:70] for r in REAL])
def test_real_lines_with_a_func_part_keep_their_node(line, nodes, local_rank):
    for mid, node in nodes.items():
        got = hit(mid, line)
        assert got is not None, (mid, line)
        assert (got.get("node"), got.get("local_rank")) == (node, local_rank), (mid, got)


def test_a_filefunc_with_brackets_gives_no_node_rather_than_a_wrong_one():
    # https://github.com/NVIDIA/nccl/issues/2397: the markdown turned the filefunc into a
    # link, "[p2p.cc:648](https://p2p.cc:648/)". The prefix cannot reach over a bracket, so the
    # failure is still read, with no node (the job's allocation decides), never another host.
    line = "[2026-09-09 10:46:34] ubuntu4:250415:250528 [1] transport/net_ib/[p2p.cc:648](https://p2p.cc:648/) NCCL WARN NET/IB: Got completion from peer 10.153.235.11<52743> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129 localGid ::ffff:1.1.1.4 remoteGids::ffff:1.1.2.2 hca mlx5_0"
    got = hit("nccl_ib_completion_error", line)
    assert got is not None and "node" not in got and got["ib_wc_status"] == "12"
    assert hit("nccl_warn", line) is None


# Constructed hostile lines (not from a source): text after NCCL WARN that names another host,
# even in the prefix's own shape, never becomes the node.
HOSTILE = [
    (
        "n1:10:11 [0] transport/net_ib.cc:1573 (ncclIbTest) NCCL WARN NET/IB : Got completion from peer evil7.cluster<52214> with error 12, opcode 0, len 0, vendor err 129",
        {"nccl_ib_completion_error": "n1", "nccl_warn": "n1"},
    ),
    (
        "n4:9:10 [1] misc/socket.cc:540 (socketProgress) NCCL WARN Net : Connection closed by remote peer evil7.cluster<52214>",
        {"nccl_socket_closed": "n4", "nccl_warn": "n4"},
    ),
    (
        "n1:10:11 [0] enqueue.cc:88 (ncclLaunchKernel) NCCL WARN Cuda failure 'uncorrectable ECC error encountered' evil7:3:4 [5] x.cc:1 (f) NCCL WARN from evil7",
        {"cuda_ecc_uncorrectable": "n1", "nccl_warn": "n1"},
    ),
    (
        "n1:10:11 [0] alloc.h:320 (ncclCuMemAlloc) NCCL WARN Cuda failure 2 'out of memory' on evil7:3:4 [2] NCCL WARN",
        {"cuda_oom_runtime": "n1", "nccl_warn": "n1"},
    ),
    (
        "n2:1:2 [3] misc/ibvwrap.cc:213 (wrap_ibv_modify_qp) NCCL WARN Call to ibv_modify_qp failed with error Connection timed out on evil7:1:2 [0]",
        {"nccl_ib_verbs_call_failed": "n2", "nccl_warn": "n2"},
    ),
    (
        "n3:1:2 [5] misc/strongstream.cc:424 (ncclStrongStreamSynchronize) NCCL WARN Cuda failure 700 'an illegal memory access was encountered' (host evil7:9:9 [1])",
        {"cuda_illegal_access": "n3", "cuda_fault_family": None, "nccl_warn": "n3"},
    ),
]


@pytest.mark.parametrize("line,nodes", HOSTILE, ids=[h[0][:50] for h in HOSTILE])
def test_a_host_named_after_nccl_warn_is_never_the_node(line, nodes):
    for mid, node in nodes.items():
        got = hit(mid, line)
        if node is None:
            assert got is None or got.get("node") != "evil7", (mid, got)
            continue
        assert got is not None, (mid, line)
        assert got.get("node") == node, (mid, got)


def test_a_line_without_the_prefix_takes_no_node_from_its_text():
    # constructed: NCCL's words with a host in the message but no prefix of their own
    for mid, line in [
        ("cuda_oom_runtime", "NCCL WARN Cuda failure 'out of memory' from evil7:1:2 [0] x.cc:1 (f)"),
        ("nccl_ib_completion_error", "NET/IB : Got completion with error 12, opcode 0 (peer evil7:1:2 [0])"),
    ]:
        got = hit(mid, line)
        assert got is not None and "node" not in got, (mid, got)
