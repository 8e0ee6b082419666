"""What the benchmarks share: the repository on sys.path (so that ``engine`` is this checkout's),
percentiles, and the start of a benchmark that needs the default rulebook and a work folder.

    from _common import ROOT, percentile, setup     # a bench script's own folder is on sys.path
    args, compiled, tmp = setup(ap, "recover-flood-")
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))


#: the fault benchmarks' matcher: a line ``FAULT job=N``
FAULT_MATCHER = "  - {id: fault, pattern: 'FAULT job=(?P<job>\\d+)'}\n"


def fault_rules(settle: str) -> str:
    """The rules and policy of the fault benchmarks: a FAULT line is a failure of its job."""
    return f"""rules:
  - id: s.fault
    description: a fault line
    when: [{{as: l, kind: log, where: {{matcher: fault}}}}]
    then: {{symptom: {{name: fault_line}}}}
  - id: f.fault
    description: a fault line is a failure
    when: [{{as: s, kind: symptom, where: {{name: fault_line}}}}]
    then: {{fault: {{fault_class: app_error, reason: bench}}}}
policy:
  settle: {settle}
"""


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1), interpolated between the two nearest ranks; nan when empty."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def rss_of(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB; (0, 0) when it is gone."""
    vals = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    vals[k] = int(v.split()[0])
    except OSError:
        pass
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def rss_mb() -> float:
    """This process's resident memory now, in MiB."""
    return rss_of()[0] / 1024


def setup(ap: argparse.ArgumentParser, prefix: str) -> tuple[argparse.Namespace, Any, Path]:
    """Parse the arguments (with ``--keep``: keep the work folder), load the default rulebook and
    make a work folder named ``prefix...``."""
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    from engine.rulebook import require_rulebook

    return args, require_rulebook(), Path(tempfile.mkdtemp(prefix=prefix))


def cleanup(args: argparse.Namespace, tmp: Path) -> None:
    """The work folder removed, or said where it is kept (``--keep``)."""
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
