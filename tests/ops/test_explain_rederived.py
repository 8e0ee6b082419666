"""`recover explain` is complete when a conclusion is derived again from other evidence: every
firing is recorded and every line it matched is evidence of the incident."""

from __future__ import annotations

import json

from .conftest import recover

# three wordings of one collective timeout: each derives the same nccl_timeout symptom again
LOG = """\
2026-03-01T10:00:00 SLURM_JOB_ID=5151
2026-03-01T10:05:00 [rank0]:[E301 10:05:00.000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.
2026-03-01T10:05:01 [rank3]:[E301 10:05:01.000000 ProcessGroupNCCL.cpp:1000] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
2026-03-01T10:05:02 c10d heartbeat: Heartbeat monitor timed out! Process will be terminated
"""


def _explain(tmp_path, name: str, text: str) -> dict:
    log = tmp_path / name
    log.write_text(text)
    db = str(tmp_path / "r.db")
    proc = recover("replay", str(log), "--db", db)
    assert proc.returncode == 0, proc.stderr
    proc = recover("explain", "1", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_explain_shows_every_firing_and_line_of_a_rederived_symptom(tmp_path):
    report = _explain(tmp_path, "slurm-5151.out", LOG)
    assert report["incident"]["fault_class"] == "nccl_timeout"
    lines = sorted(f["origin"].rsplit(":", 1)[1] for f in report["facts"] if f["kind"] == "log")
    assert lines == ["2", "3", "4"]
    symptom_firings = [f for f in report["firings"] if f["rule"] == "symptom.nccl_timeout"]
    assert len(symptom_firings) == 3
    assert len({f["asserted"] for f in symptom_firings}) == 1  # one conclusion, three derivations
    # the chain walks each derivation down to its line
    symptom = report["chain"]["because"]["s"]
    assert symptom["fact"]["count"] == 3
    derivations = [symptom] + symptom["again"]
    assert sorted(d["because"]["l"]["fact"]["origin"].rsplit(":", 1)[1] for d in derivations) == ["2", "3", "4"]
