"""Actions get the incident's words: `reason` is the winning fault's reason, and `evidence` (first
line, count, nodes) is readable by templates; both come from logs, so both are cleaned and bounded."""

import re

from engine.core.replay import Input, replay_inputs
from engine.rulebook import require_rulebook
from engine.store import Store

SITE = """
actions:
  notify:
    override: true
    argv: [logger, -t, recover, "{{ fault_class }}: {{ reason }} | first: {{ evidence.first_line }} | {{ evidence.count }} lines | on {{ evidence.nodes|join(',') }}"]
"""


def notify_for(tmp_path, lines: str) -> list[str]:
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    book = require_rulebook([site])
    store = Store(":memory:")
    result = replay_inputs(
        [Input("slurm-5150.out", lambda: [lines.encode()], "job")], book, store, job="5150", nodes=["n1", "n2"]
    )
    return [p.argv[3] for c in result.incidents for p in c.plan if p.name == "notify"]


def test_notify_carries_the_reason_and_the_evidence(tmp_path):
    lines = (
        "2026-11-29T17:00:00Z [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "2026-11-29T17:00:01Z [rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    (msg,) = notify_for(tmp_path, lines)
    assert msg.startswith("cuda_oom: ")
    reason = msg.split(" | first:")[0]
    assert reason.startswith("cuda_oom: recover incident 1 cuda_oom: ")  # the incident, then the fault's own reason
    assert "CUDA out of memory" in reason
    assert "first: 2026-11-29T17:00:00Z rank3 : torch.OutOfMemoryError: CUDA out of memory" in msg  # [] are not safe
    assert int(re.search(r"\| (\d+) lines", msg).group(1)) == 2  # the two lines, not the conclusions drawn from them


def test_hostile_evidence_is_cleaned_and_bounded(tmp_path):
    hostile = "x" * 500 + " ;rm -rf / `id` $(reboot) Reason=pwned NodeName=n9"
    lines = f"2026-11-29T17:00:00Z [rank0]: torch.OutOfMemoryError: CUDA out of memory. {hostile}\n"
    (msg,) = notify_for(tmp_path, lines)
    reason, first = msg.split(" | first: ")[0], msg.split(" | first: ")[1].split(" | ")[0]
    for part in (reason, first):
        assert not set(part) & set(";`$=\n"), part
    assert len(first) <= 120 and len(reason) <= 130
