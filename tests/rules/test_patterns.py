"""The default rulebook's matchers, checked with plain pyyaml + RE2 (no engine needed).

- every pattern compiles with RE2 and does not match the empty string;
- every matcher is exercised: some embedded test line or some line of CORPUS below hits it;
- CORPUS: real-world wordings and formats, each with the matchers it must hit and the groups
  it must extract (Xid codes and syslog hosts, NCCL host prefixes, Slurm node names...);
- HEALTHY: lines from healthy jobs that no matcher leading to an error may hit;
- embedded tests: a negative case (expect: []) contains no line that makes an error symptom;
  a positive case contains evidence that can lead to the fault class it expects;
- overlap: when several matchers hit one line, they lead to the same fault class (so it does
  not matter whether the scanner reports every matcher of a line or only one).

Matching semantics follow engine/core/scanner.py: a matcher hits a line when its regex is found
anywhere in it; anchors refer to the line; ``ignore_case`` is ``(?i)``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
import re2
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"


# ----------------------------------------------------------------------------- loading -------
def _docs():
    for path in sorted(RULES.glob("*.yaml")):
        yield path.name, (yaml.safe_load(path.read_text()) or {})


@lru_cache(maxsize=None)
def book():
    lists, matchers, rules, tests = {}, {}, [], []
    for name, doc in _docs():
        for k, v in (doc.get("lists") or {}).items():
            if isinstance(v, dict) and v.get("override") == "append" and k in lists:
                lists[k] = list(lists[k]) + list(v["items"])  # a later file appends, as layering does
            else:
                lists[k] = v["items"] if isinstance(v, dict) else v
        for m in doc.get("matchers") or []:
            if m.get("override") is True and m["id"] in matchers:  # a later file changes fields, as layering does
                m = {**matchers[m["id"]], **{k: v for k, v in m.items() if k != "override"}}
            matchers[m["id"]] = m
        for r in doc.get("rules") or []:
            at = next((i for i, o in enumerate(rules) if o.get("id") == r.get("id")), None)
            if r.get("override") is True and at is not None:  # a later file changes fields, as layering does
                rules[at] = {**rules[at], **{k: v for k, v in r.items() if k != "override"}}
            else:
                rules.append(r)
        tests.extend((name, t) for t in doc.get("tests") or [])
    return lists, matchers, rules, tests


@lru_cache(maxsize=None)
def compiled(mid: str):
    m = book()[1][mid]
    return re2.compile(("(?i)" if m.get("ignore_case") else "") + m["pattern"])


def _values(test, lists):
    if isinstance(test, dict) and "in" in test:
        v = test["in"]
        return list(lists[v[1:]]) if isinstance(v, str) and v.startswith("@") else list(v)
    if isinstance(test, (str, int)):
        return [test]
    return []


@lru_cache(maxsize=None)
def symptom_of_matcher() -> dict[str, tuple[str, str]]:
    """matcher id -> (symptom name, severity) for log matchers (from the symptom rules)."""
    lists, matchers, rules, _ = book()
    out: dict[str, tuple[str, str]] = {}
    for r in rules:
        when = r.get("when") or []
        if len(when) != 1 or when[0].get("kind") != "log" or "symptom" not in r["then"]:
            continue
        where = when[0].get("where") or {}
        sym = r["then"]["symptom"]
        for mid in _values(where.get("matcher"), lists):
            # several rules may read one matcher (nvswitch fatal / non-fatal): keep the strongest
            sev = sym.get("severity", "error")
            old = out.get(mid)
            if old is None or (old[1] == "warning" and sev != "warning"):
                out[mid] = (sym["name"], sev)
    return out


@lru_cache(maxsize=None)
def log_end_error_matchers() -> frozenset[str]:
    """Matchers whose hit makes an error symptom when the job's log ends after it (a rule with one
    log condition and one log_end condition, such as symptom.log_ends_in_traceback)."""
    lists, _, rules, _ = book()
    out: set[str] = set()
    for r in rules:
        when = r.get("when") or []
        kinds = sorted(c.get("kind") for c in when)
        sym = r["then"].get("symptom")
        if kinds != ["log", "log_end"] or sym is None or sym.get("severity", "error") == "warning":
            continue
        log = next(c for c in when if c.get("kind") == "log")
        out.update(_values((log.get("where") or {}).get("matcher"), lists))
    return frozenset(out)


@lru_cache(maxsize=None)
def log_end_symptoms() -> dict[str, frozenset[str]]:
    """matcher -> the symptoms its hit makes when the job's log ends after it (the rules of
    log_end_error_matchers, any severity), so that their fault classes are reachable from it."""
    lists, _, rules, _ = book()
    out: dict[str, set[str]] = {}
    for r in rules:
        when = r.get("when") or []
        sym = r["then"].get("symptom")
        if sorted(c.get("kind") for c in when) != ["log", "log_end"] or sym is None:
            continue
        log = next(c for c in when if c.get("kind") == "log")
        for mid in _values((log.get("where") or {}).get("matcher"), lists):
            out.setdefault(mid, set()).add(sym["name"])
    return {k: frozenset(v) for k, v in out.items()}


@lru_cache(maxsize=None)
def classes_of_symptom() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """symptom -> fault classes of single-condition rules (direct) and of any rule (reachable)."""
    lists, _, rules, _ = book()
    direct: dict[str, set[str]] = {}
    reach: dict[str, set[str]] = {}
    macros: dict = {}  # read once: parsing every rule file again for each rule cost ~1 min
    for _, doc in _docs():
        macros.update(doc.get("macros") or {})
    for r in rules:
        if "fault" not in r["then"]:
            continue
        fc = r["then"]["fault"]["fault_class"]
        when = r.get("when") or []
        for cond in when:
            if cond.get("kind") != "symptom":
                continue
            where = dict(cond.get("where") or {})
            if "macro" in where:
                where.update(macros[where.pop("macro")])
            for name in _values(where.get("name"), lists):
                reach.setdefault(name, set()).add(fc)
                if len(when) == 1:
                    direct.setdefault(name, set()).add(fc)
    return direct, reach


XID_MATCHERS = {"xid", "xid_decoded"}
# an Xid a job's or a monitor's line reports by its code: 14-matchers-families-hw2.yaml maps the
# code through the same lists, but only when the job's log ends on the line (or the job then
# fails), so it is no error line of its own (the nvlink5 and recovery-action decodes are the kernel's)
LOG_END_XID_MATCHERS = {"hw2_xid_reported"}


def xid_symptom(groups: dict) -> tuple[str, str]:
    """The symptom the xid rules give a Xid line (by code lists and the decoded text)."""
    lists = book()[0]
    code = int(groups["code"])
    if code in lists["xid_fell_off_bus"]:
        return "gpu_fell_off_bus", "fatal"
    if code in lists["xid_memory_fatal"]:
        return "gpu_memory_uncorrectable", "fatal"
    if code in lists["xid_nvlink_fatal"]:
        return "nvlink_error", "fatal"
    if code in lists["xid_hardware_reset"]:
        return "gpu_hardware_other", "fatal"
    if code in lists["xid_nvlink5_decoded"] and groups.get("fatality") in lists["nvlink5_fatal_words"]:
        return "nvlink_error", "fatal"
    if code in lists["xid_recovery_action"] and groups.get("recovery_action") in lists["recovery_actions_isolate"]:
        return "gpu_hardware_other", "fatal"
    return "gpu_xid_warning", "warning"


def hits(line: str, source: str = "any") -> dict[str, dict]:
    """matcher id -> groups, for every matcher that hits the line from this source (a fresh
    dict: the callers' own to change)."""
    return {mid: dict(groups) for mid, groups in _hits(line, source)}


@lru_cache(maxsize=None)
def _hits(line: str, source: str) -> tuple:
    """``hits`` once per line and source: several tests search every test line with every
    matcher (~20 s each)."""
    out = []
    for mid, m in book()[1].items():
        src = m.get("source", "any")
        srcs = src if isinstance(src, list) else [src]
        if source != "any" and source not in srcs and "any" not in srcs:
            continue
        found = compiled(mid).search(line)
        if found:
            out.append((mid, {k: v for k, v in found.groupdict().items() if v is not None}))
    return tuple(out)


@lru_cache(maxsize=None)
def _weak_matchers() -> tuple:
    """The weak-evidence matchers (a class's keywords, compiled after layering; not in the YAML)."""
    from engine.rulebook import require_rulebook

    return tuple(
        (m.attrs["weak_class"], re2.compile(("(?i)" if m.ignore_case else "") + m.pattern), m.unless)
        for m in require_rulebook().matchers
        if m.attrs.get("weak")
    )


def weak_classes(line: str) -> set[str]:
    """The classes whose keywords a line holds (not on a quiet line): how a log ends on it."""
    return {fc for fc, rx, unless in _weak_matchers() if rx.search(line) and not any(u in line for u in unless)}


def symptom_of_hit(mid: str, groups: dict) -> tuple[str, str] | None:
    m = book()[1][mid]
    if m.get("emit", "log") in ("progress", "context"):
        return None
    if mid in XID_MATCHERS:
        return xid_symptom(groups)
    if mid == "nvswitch_sxid":  # symptom.nvswitch_fatal: the driver's word, its severity, or the code
        fatal = (
            groups.get("fatality") == "Fatal"
            or groups.get("severity") == "1"
            or int(groups.get("sxid", -1)) in set(book()[0]["sxid_fatal"])
        )
        return ("nvlink_error", "fatal") if fatal else ("nvlink_warning", "warning")
    return _symptom_for_groups(mid, groups)


@lru_cache(maxsize=None)
def _symptom_rules_of(mid: str) -> tuple[tuple[dict, str, str], ...]:
    """(where, symptom name, severity) of each single-log-condition symptom rule reading ``mid``."""
    lists, _, rules, _ = book()
    out = []
    for r in rules:
        when = r.get("when") or []
        if len(when) != 1 or when[0].get("kind") != "log" or "symptom" not in r["then"]:
            continue
        where = when[0].get("where") or {}
        if mid in _values(where.get("matcher"), lists):
            sym = r["then"]["symptom"]
            out.append((where, sym["name"], sym.get("severity", "error")))
    return tuple(out)


def _groups_pass(where: dict, groups: dict, named: set[str]) -> bool:
    """The where-clause's `exists` tests on the matcher's own groups (a retry clause the socket
    matchers capture: rules/14-matchers-families-retry.yaml); other tests are left to the rules."""
    for key, test in where.items():
        if key == "any":
            if not any(_groups_pass(w, groups, named) for w in test):
                return False
        elif key in named and isinstance(test, dict) and "exists" in test:
            if bool(groups.get(key)) != bool(test["exists"]):
                return False
    return True


def _symptom_for_groups(mid: str, groups: dict) -> tuple[str, str] | None:
    named = set(re.findall(r"\(\?P<(\w+)>", book()[1][mid].get("pattern", "")))
    rules = _symptom_rules_of(mid)
    if not any(k in named for where, _, _ in rules for k in where):
        return symptom_of_matcher().get(mid)
    best = None
    for where, name, sev in rules:
        if _groups_pass(where, groups, named) and (best is None or (best[1] == "warning" and sev != "warning")):
            best = (name, sev)
    return best


def error_classes(line: str, source: str = "any") -> dict[str, set[str]]:
    """matcher -> direct fault classes, for matchers of this line that make error/fatal symptoms
    (a symptom with no direct fault, such as task_failed, maps to {'unknown'})."""
    direct, _ = classes_of_symptom()
    out = {}
    for mid, groups in hits(line, source).items():
        s = symptom_of_hit(mid, groups)
        if s is None or s[1] == "warning":
            continue
        out[mid] = direct.get(s[0]) or {"unknown"}
    return out


# ----------------------------------------------------------------------------- corpus -------
# (line, {matcher: {group: value, ...}}) -- the matcher must hit, with at least these groups
CORPUS: list[tuple[str, dict[str, dict]]] = [
    # Xid, every format of gpu-signals.md 1.2
    (
        "Nov 29 17:00:05 n3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        {"xid": {"code": "79", "node": "n3", "pci": "0000:3b:00", "pid": "1234", "process": "python"}},
    ),
    (
        "Nov  9 07:00:05 gpu-a100-017.cluster.local kernel: [155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
        {"xid": {"code": "79", "node": "gpu-a100-017"}},
    ),
    ("[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.", {"xid": {"code": "79"}}),
    (
        "[ T1946] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        {"xid": {"code": "79", "process": "<unknown>"}},
    ),
    (
        "6,1234,5678,-;NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
        {"xid": {"code": "48"}},
    ),
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", {"xid": {"code": "14", "pci": "0000:03:00"}}),
    # a Xid is `NVRM: Xid` + its code, whatever the PCI field: redacted (NVIDIA/nccl#2241 "PCI:..."),
    # x'd out, empty or missing; the code and the other groups are read all the same
    (
        "kernel: NVRM: Xid (PCI:...): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 11 (...)",
        {"xid_decoded": {"code": "145", "fatality": "Nonfatal", "pci": "..."}},
    ),
    (
        "kernel: NVRM: Xid (PCI:...): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error",
        {"xid": {"code": "137"}},
    ),
    (
        "Nov 29 17:00:05 n3 kernel: NVRM: Xid (PCI:XXXX:XX:XX): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        {"xid": {"code": "79", "node": "n3", "process": "<unknown>"}},
    ),
    ("NVRM: Xid (): 48, pid=1, name=python, DBE (0x1) detected", {"xid": {"code": "48", "pid": "1"}}),
    ("NVRM: Xid: 79, pid=1, name=python, GPU has fallen off the bus.", {"xid": {"code": "79"}}),
    (
        "NVRM: Xid (PCI:xxxx:xx:xx): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        {"xid_decoded": {"code": "154", "recovery_action": "Node Reboot Required"}},
    ),
    (
        "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064}",
        {"nvswitch_sxid": {"sxid": "12028"}},
    ),
    (
        "nvidia-nvswitch3: SXid (PCI:...): 20034, Fatal, Link 30 LTSSM Fault Up",
        {"nvswitch_sxid": {"sxid": "20034", "fatality": "Fatal"}},
    ),
    # gpu_unavailable: each program's words for "no usable GPU"
    ("RuntimeError: Found no NVIDIA driver on your system. Please check", {"cuda_no_gpu_available": {}}),
    ("E cuda_driver.cc:406] failed call to cuInit: CUDA_ERROR_UNKNOWN: unknown error", {"cuda_no_gpu_available": {}}),
    ("  cuInit return value:   100", {"cuda_no_gpu_available": {}}),
    (
        "RuntimeError: Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.",
        {"cuda_no_gpu_available": {}},
    ),
    ("No GPUs were found available on this machine. Exiting with EX_TEMPFAIL (75)", {"cuda_no_gpu_available": {}}),
    ("  what():  #owl: no CUDA capable devices found!", {"cuda_no_gpu_available": {}}),
    ("cudaGetDeviceCount: no CUDA-capable devices were found", {"cuda_no_gpu_available": {}}),
    ("Failed to initialize NVML: Unknown Error", {"nvidia_smi_no_driver": {}}),
    (
        "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
        {"nvidia_smi_no_driver": {}},
    ),
    ("No devices were found", {"nvidia_smi_no_driver": {}}),
    (
        "Apr 13 23:38:47 gpu7 kernel: NVRM: API mismatch: the client has the version 535.171.04, but",
        {"kernel_nvidia_no_device": {"node": "gpu7"}},
    ),
    (
        "Nov 29 10:00:01 n2 kernel: nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
        {"kernel_gpu_lost_status": {"node": "n2", "pci": "0000:03:00.0"}},
    ),
    (
        "2026-11-29T17:00:05.118950+00:00 n3 kernel: NVRM: Xid (PCI:0008:01:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP!",
        {"xid": {"code": "119", "node": "n3", "pci": "0008:01:00"}},
    ),
    (
        "Nov 29 17:00:05.123456 n3 kernel: NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
        {"xid": {"code": "109", "node": "n3"}},
    ),
    (
        "[Sun Nov 29 17:00:05 2026] NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        {"xid": {"code": "45"}},
    ),
    ("NVRM: Xid (PCI:0000:0a:00): 999, pid=1, name=x, something new", {"xid": {"code": "999"}}),
    (
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
        {"xid_decoded": {"code": "145", "nvlink_unit": "RLW_RXPIPE", "fatality": "Nonfatal"}},
    ),
    (
        "Nov 29 17:00:05 gb-07 kernel: NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        {"xid_decoded": {"code": "149", "fatality": "Fatal", "node": "gb-07"}},
    ),
    (
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        {"xid_decoded": {"code": "154", "recovery_action": "Drain and Reset"}},
    ),
    (
        "NVRM: Xid (PCI:0008:01:00): 154, pid=1, name=x, GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)",
        {"xid_decoded": {"code": "154", "recovery_action": "GPU Reset Required"}},
    ),
    # fallen off the bus without a Xid
    ("[ 1843.308152] NVRM: fallen off the bus and is not responding to commands.", {"gpu_fallen_off_bus_text": {}}),
    (
        "Nov 29 11:42:17 gpu-018 kernel: NVRM: The NVIDIA GPU 0000:05:00.0 installed in this system has fallen off the bus and is not responding to commands.",
        {"gpu_fallen_off_bus_text": {"node": "gpu-018", "pci": "0000:05:00.0"}},
    ),
    ("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", {"gpu_fallen_off_bus_text": {"pci": "0000:3b:00.0"}}),
    (
        "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
        {"nvml_gpu_is_lost": {"pci": "0000:3B:00.0"}},
    ),
    (
        "nvidia-nvswitch3: SXid (PCI:0000:89:00.0): 12028, Non-fatal, Link 46 egress non-posted PRIV error (First)",
        {"nvswitch_sxid": {"sxid": "12028", "fatality": "Non-fatal"}},
    ),
    # NCCL / torch wordings
    (
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2664597, OpType=ALLREDUCE, NumelIn=8272897, NumelOut=8272897, Timeout(ms)=600000) ran for 600002 milliseconds before timing out.",
        {"nccl_watchdog_timeout": {"rank": "2", "seq": "2664597", "op": "ALLREDUCE"}},
    ),
    (
        "[rank368]:[E808 04:21:41.160918398 ProcessGroupNCCL.cpp:655] [Rank 368] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
        {"nccl_watchdog_timeout": {"rank": "368", "op": "ALLREDUCE"}},
    ),
    (
        "[rank368]:[E808 04:21:41.161005534 ProcessGroupNCCL.cpp:2299] [PG ID 0 PG GUID 0(default_pg) Rank 368]  failure detected by watchdog at work sequence id: 5 PG status: last enqueued work: 5, last completed work: 4",
        {"nccl_work_timeout_summary": {"seq": "5"}},
    ),
    (
        "[Rank 5] Timeout at NCCL work: 4212, last enqueued NCCL work: 4213, last completed NCCL work: 4211.",
        {"nccl_work_timeout_summary": {"seq": "4212"}},
    ),
    (
        "[PG ID 0 PG GUID 0(default_pg) Rank 5] Received a global timeout from another rank and will start to dump the debug info.",
        {"nccl_timeout_dump": {}},
    ),
    ("torch.distributed.DistStoreError: Socket Timeout", {"c10d_store_timeout": {}}),
    (
        "[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to (n1, 29500).",
        {"c10d_store_timeout": {}},
    ),
    ("RuntimeError: Wait timeout after 1800000ms, keys: /default_pg//cuda//0", {"store_wait_timeout": {}}),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
        {"gloo_timeout": {}},
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.4]:23456",
        {"gloo_connection_error": {}},
    ),
    (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.",
        {"c10d_store_connection_error": {}},
    ),
    (
        "[E socket.cpp:1011] [c10d] sendBytes failed on SocketImpl(fd=44, addr=[n2]:40122, remote=[n1]:29500): Broken pipe",
        {"c10d_store_connection_error": {}},
    ),
    (
        "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
        {
            "nccl_ib_completion_error": {
                "node": "node-2",
                "local_rank": "0",
                "ib_status": "12",
                "peer": "10.2.0.5<33092>",
            },
            "nccl_warn": {"node": "node-2"},
        },
    ),
    (
        "[2026-03-03 12:11:38] tpgds-aihub0007:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.99.91.63<51161> with status=4 opcode=32614 len=32614 vendor err 81 (Send) localGid ::ffff:10.99.92.59 remoteGids::ffff:10.99.91.63 hca mlx5_1",
        {"nccl_ib_completion_error": {"node": "tpgds-aihub0007", "ib_wc_status": "4"}},
    ),
    (
        "n1.cluster.example.org:1:2 [7] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129",
        {"nccl_ib_completion_error": {"node": "n1", "local_rank": "7", "ib_status": "12"}},
    ),
    (
        "NET/IB: ibp198s0f0:1 async fatal event on QP: local access violation work queue error",
        {"nccl_ib_completion_error": {"ib_event": "local access violation work queue error"}},
    ),
    # the OFI plugin's and the EFA provider's completion errors are of the same family (src20f)
    (
        "[1,13]<stdout>:nccl-tests-worker-1:35:89 [5] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7fbb944701b8 completed with error. RC: 20. Error: unknown error. Completed length: 0, Request: { buffer_index: 255, dev: 1, size: 0, state: CREATED, direction: SEND }",
        {"nccl_ib_completion_error": {"node": "nccl-tests-worker-1", "local_rank": "5"}},
    ),
    (
        "libfabric:451707:1708520807::efa:cq:efa_rdm_txe_handle_error():737<warn> err: 5, message: Invalid address",
        {"nccl_ib_completion_error": {}},
    ),
    # review20: NCCL's WARN prefix is "host:pid:tid [dev] <filefunc>:<line> NCCL WARN " (and
    # "... <file>:<line> (<func>) NCCL WARN " in NCCL 2.2x); the OFI plugin's filefunc is its
    # __PRETTY_FUNCTION__, which in its C++ builds holds spaces, parentheses and '*'. Lines
    # written from those format strings: host and rank come from that prefix, whatever the
    # filefunc, and never from text after NCCL WARN.
    (
        "p4d-st-1:4011:4090 [6] int nccl_net_ofi_rdma_process_cq(nccl_net_ofi_rdma_ep_t*, size_t):1039 NCCL WARN NET/OFI Request 0x7fbb944701b8 completed with error. RC: 20. Error: 4126 (Unresponsive receiver). Completed length: 0",
        {"nccl_ib_completion_error": {"node": "p4d-st-1", "local_rank": "6"}},
    ),
    (
        "n3:2201:2290 [1] transport/net_ib.cc:1573 (ncclIbTest) NCCL WARN NET/IB : Got completion from peer 10.0.0.4<56789> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Recv)",
        {"nccl_ib_completion_error": {"node": "n3", "local_rank": "1", "ib_wc_status": "12"}},
    ),
    (
        "[1,3]<stderr>:n5:77:91 [2] net_ib.cc:92 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : mlx5_0:1 Got async event : port error",
        {"nccl_ib_completion_error": {"node": "n5", "local_rank": "2", "ib_event": "port error"}},
    ),
    (
        "n1:10:11 [0] enqueue.cc:88 NCCL WARN Cuda failure 'x' n9:3:4 [5] f.cc:1 NCCL WARN NET/OFI Request 0x1 completed with error. RC: 5",
        {"nccl_ib_completion_error": {"node": "n9", "local_rank": "5"}},
    ),
    (
        "n4:9:10 [1] NCCL WARN NET/IB : Call to ibv_modify_qp failed with error Connection timed out",
        {"nccl_ib_verbs_call_failed": {"node": "n4", "verb": "modify_qp"}},
    ),
    (
        "n4:9:10 [1] NCCL WARN Net : Connection closed by remote peer n3.cluster<52214>",
        {"nccl_socket_closed": {"node": "n4"}},
    ),
    (
        "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3",
        {"nccl_result_network": {}},
    ),
    (
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled cuda error, NCCL version 2.14.3",
        {"nccl_unhandled_cuda_error": {}},
    ),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", {"nccl_unhandled_cuda_error": {}}),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
        {"nccl_invalid_usage": {}},
    ),
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", {"nccl_invalid_usage": {}}),
    ("n2:3:4 [0] NCCL WARN Error : ring 0 does not loop back to start (1 != 0)", {"nccl_warn": {"node": "n2"}}),
    # CUDA
    (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
        {"cuda_oom_torch": {"tried": "2.00 GiB"}},
    ),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", {"cuda_oom_library": {}}),
    (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        {"cuda_oom_xla": {}},
    ),
    (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192]",
        {"cuda_oom_xla": {}},
    ),
    ("CUDA_ERROR_OUT_OF_MEMORY: out of memory", {"cuda_oom_runtime": {}}),
    ("RuntimeError: CUDA error: misaligned address", {"cuda_illegal_access": {"cuda_error": "misaligned address"}}),
    ("RuntimeError: CUDA error: an illegal instruction was encountered", {"cuda_illegal_access": {}}),
    (
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
        {"cuda_illegal_access": {}},
    ),
    (
        "n3:1:2 [5] NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
        {"cuda_illegal_access": {"node": "n3"}},
    ),
    (
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
        {"cuda_illegal_library": {}},
    ),
    (
        "n7:3311:3391 [5] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
        {"cuda_ecc_uncorrectable": {"node": "n7"}},
    ),
    ("RuntimeError: No CUDA GPUs are available", {"cuda_no_gpu_available": {}}),
    (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
        {"nvidia_smi_no_driver": {}},
    ),
    # application
    (
        "omegaconf.errors.ConfigAttributeError: Key 'lr_warmup' is not in struct",
        {"python_exception": {"exception": "omegaconf.errors.ConfigAttributeError"}},
    ),
    (
        "ImportError: cannot import name 'flash_attn_func' from 'flash_attn' (unknown location)",
        {"python_exception": {"exception": "ImportError"}},
    ),
    (
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
        {"python_exception": {"exception": "json.decoder.JSONDecodeError"}},
    ),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/tokenizer.model'",
        {"python_exception": {"exception": "FileNotFoundError"}},
    ),
    (
        "RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for embedding.weight",
        {"torch_app_runtime_error": {}},
    ),
    (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
        {"torch_app_runtime_error": {}},
    ),
    # JAX's lost coordination service is of the coordination-timeout family (src20f)
    (
        "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details.",
        {"coordination_deadline_exceeded": {}},
    ),
    (
        "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`",
        {"nan_grad_norm": {}},
    ),
    (
        "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
        {"nan_anomaly_backward": {}},
    ),
    ("ValueError: The loss returned in `training_step` is nan.", {"nan_loss_detected": {}, "python_exception": {}}),
    (
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 40001 got signal: 15",
        {"torchrun_signal_exception": {"signal": "15"}},
    ),
    # storage
    (
        "cp: error writing '/ckpt/iter_0001000/optim.pt': No space left on device",
        {"storage_errno": {"error_text": "No space left on device"}},
    ),
    ("OSError: [Errno 122] Disk quota exceeded: '/home/bob/ckpt'", {"storage_errno": {"errno": "122"}}),
    ("OSError: [Errno 30] Read-only file system: '/scratch/out'", {"storage_errno": {"errno": "30"}}),
    (
        "2026-11-29 01:00:00,000 - ckpt - ERROR - Failed to save checkpoint at step 5000: timed out",
        {"checkpoint_save_failed": {}},
    ),
    (
        "LustreError: 11-0: scratch-OST0003-osc-ffff8a: operation ost_write to node 10.1.0.3@o2ib failed: rc = -107",
        {"kernel_netfs_error": {}},
    ),
    (
        "Nov 29 01:00:00 n4 kernel: LustreError: 167-0: scratch-MDT0000-mdc-ffff8a: This client was evicted by scratch-MDT0000; in progress operations using this service will fail.",
        {"kernel_netfs_error": {"node": "n4"}},
    ),
    (
        "Nov 29 01:00:00 n4 kernel: blk_update_request: I/O error, dev nvme0n1, sector 123456 op 0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0",
        {"kernel_block_io_error": {"node": "n4"}},
    ),
    (
        "Nov 29 01:00:00 n4 kernel: EXT4-fs error (device nvme0n1p1): ext4_find_entry:1455: inode #2: comm python: reading directory lblock 0",
        {"kernel_block_io_error": {}},
    ),
    # host memory
    (
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 14037828.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        {"slurm_oom_kill_event": {"oom_events": "1"}},
    ),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.",
        {"slurm_oom_kill_event": {}},
    ),
    (
        "slurmstepd: error: Job 1234 exceeded memory limit (16777216 > 16384000), being killed",
        {"slurm_memory_limit_kill": {}},
    ),
    ("slurmstepd: error: Exceeded step memory limit at some point.", {"slurm_memory_limit_exceeded": {}}),
    (
        "Nov 29 12:00:00 n3 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_8812/step_0/user/task_0,task=python,pid=9911,uid=1000",
        {"kernel_oom_memcg_slurm": {"job": "8812", "node": "n3", "process": "python"}},
    ),
    # Slurm
    (
        "slurmstepd: error: *** JOB 6847502 ON udc-aw29-24b CANCELLED AT 2019-11-07T02:09:10 DUE TO TIME LIMIT ***",
        {"slurm_cancelled_time_limit": {"slurm_job": "6847502"}},
    ),
    (
        "slurmstepd: error: *** STEP 1234.0 CANCELLED AT 2026-11-29T00:00:00 DUE TO TIME LIMIT ***",
        {"slurm_cancelled_time_limit": {}},
    ),
    (
        "slurmstepd: error: *** STEP 1234.0 ON n1 CANCELLED AT 2026-11-29T00:00:00 *** on n1",
        {"slurm_cancelled_by_user": {}},
    ),
    (
        "slurmstepd: error: *** JOB 1234 ON n3 UNCORRECTABLE MEMORY ERROR AT 2026-11-29T00:00:00 ***",
        {"slurm_step_uncorrectable_memory": {"node": "n3"}},
    ),
    (
        "srun: error: n3: tasks 8-15: Exited with exit code 137",
        {"srun_task_exit_code": {"node": "n3", "tasks": "8-15", "exit_code": "137"}},
    ),
    (
        "srun: error: gpu-12.cluster: task 5: Segmentation fault (core dumped)",
        {"srun_task_crashed": {"node": "gpu-12", "signal_name": "Segmentation fault"}},
    ),
    ("srun: error: nic5-w052: task 13: Out Of Memory", {"srun_task_oom": {"node": "nic5-w052"}}),
    ("srun: error: Node failure on n[3-4]", {"srun_node_failure": {"failed_nodes": "n[3-4]"}}),
    ("srun: forcing job termination", {"srun_step_aborted": {}}),
    (
        "[2026-11-29T22:00:30.552] requeue JobId=12210_11(12238) due to failure of node master",
        {"ctld_job_failed_node": {"job": "12210_11", "node": "master"}},
    ),
    (
        "[2026-11-29T22:00:30.552] Killing job_id 48 on failed node node03",
        {"ctld_job_failed_node": {"job": "48", "node": "node03"}},
    ),
    (
        "[2026-11-29T22:00:30.552] error: Removing failed node n3 from JobId=8",
        {"ctld_remove_failed_node": {"node": "n3", "job": "8"}},
    ),
    (
        "[2026-11-29T22:00:30.552] node n3 not responding, setting DOWN",
        {"ctld_node_down": {"node": "n3"}},
    ),
    (
        "[2026-11-29T22:00:30.552] error: Nodes q2-st-t2large-[1-2] not responding, setting DOWN",
        {"ctld_node_down": {"failed_nodes": "q2-st-t2large-[1-2]"}},
    ),
    (
        "[2026-11-29T22:00:30.552] validate_node_specs: Node n3 unexpectedly rebooted boot_time=1795900000 last response=1795899000",
        {"ctld_node_down": {"node": "n3"}},
    ),
    (
        "compute001      1     main*       down*   12   12:1:1  64267        0      1   (null) Not responding",
        {"ctld_node_down": {"failed_nodes": "compute001"}},  # a list of one: the converter's node
    ),
    (
        "[2026-11-29T22:00:30.552] error: slurmd error running JobId=1209813 on node(s)=n6: Kill task failed",
        {"ctld_job_failed_node": {"job": "1209813", "node": "n6"}},
    ),
    ("[2026-11-29T22:00:30.552] Time limit exhausted for JobId=2", {"ctld_time_limit": {"job": "2"}}),
    # progress and context
    (
        "[2026-11-29 06:01:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=100/global_step=100, RunningAvgSamplesPerSec=101.2",
        {},
    ),
    (
        "[2026-11-29 06:01:00,000] [INFO] [engine.py:1986:_report_progress] steps: 100 loss: 2.1234 iter time (s): 1.011 samples/sec: 506.4",
        {"progress_deepspeed_steps_loss": {"step": "100"}},
    ),
    (
        "[rank0]:[titan] 2026-11-29 06:01:00,000 - root - INFO - step: 100  loss:  2.3456  memory: 60.12GiB(76.01%)  tps: 12,345  mfu: 45.67%",
        {"progress_torchtitan": {"step": "100"}},
    ),
    (
        "2026-11-29 06:01:00,000 INFO saved checkpoint at step 2000 to s3://bucket/run1",
        {"checkpoint_generic": {"checkpoint": "2000"}},
    ),
    ("  successfully saved checkpoint at iteration    1000 to /ckpt", {"checkpoint_megatron": {"checkpoint": "1000"}}),
    ("SLURM_JOBID=4242", {"ctx_slurm_job_id": {"job": "4242"}}),
    ("export SLURM_NODELIST=gpu-[001-004,010]", {"ctx_slurm_nodelist": {"nodes": "gpu-[001-004,010]"}}),
    ("SLURMD_NODENAME=n3", {"ctx_slurmd_nodename": {"node": "n3"}}),
    # other wordings of the world (rules/13-matchers-world.yaml), verbatim from tests/corpus/
    (
        "submitit WARNING (2022-07-12 04:18:45,881) - Caught signal SIGHUP on learnfair0293: this job is preempted.",
        {"preemption_notice": {}},
    ),
    (
        "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks: [76, 13, 45]",
        {"straggler_reported": {}},
    ),
    ("  what():  CUDA error: uncorrectable NVLink error detected during the execution", {"nvlink_error_text": {}}),
    ("[   39.147720] NVRM: RmInitAdapter failed! (0x26:0xffff:1127)", {"gpu_needs_reset_text": {}}),
    (
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x1e1 (0x7fe705ea04e1 in /usr/local/lib/python3.10/dist-packages/torch/l",
        {"nccl_watchdog_frames": {}},
    ),
    (
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        {"xid_cause_named": {"cause": "149"}},
    ),
]

# lines from healthy jobs and hosts: no matcher that makes an error or fatal symptom may hit them
HEALTHY: list[str] = [
    # JAX probing its backends on a CPU run, and Lightning saying so (a fallback, not a failure)
    "2023-09-10 13:47:04 - INFO - Unable to initialize backend 'cuda': FAILED_PRECONDITION: No visible GPU devices.",
    "2023-09-10 13:47:04 - WARNING - No GPU/TPU found, falling back to CPU. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for more info.)",
    "2023-09-10 13:47:05 - INFO - GPU available: False, used: False",
    "snd_hda_intel 0000:63:00.1: AER: can't recover (no error_detected callback)",
    "print('on Xid 79 the node is drained')",
    "n1:51234:51234 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    "n1:51234:52001 [0] NCCL INFO [Service thread] Connection closed by localRank 1",
    "n1:51234:51980 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
    "n1:51234:51980 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "  distributed_timeout_minutes ..................... 10",
    "timeout=datetime.timedelta(seconds=1800)",
    "export NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_BLOCKING_WAIT=0",
    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
    " [2026-11-29 06:01:00] iteration      100/  500000 | lm loss: 7.4E+00 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "Nov 29 08:59:00 n9 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07",
    "Nov 29 08:59:02 n9 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d",
    "Nov 29 08:59:03 n9 kernel: nfs: server nas01 OK",
    "UserWarning: TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only storage class.",
    "2026-11-29 07:00:05,000 - huggingface_hub - WARNING - Read timed out. Trying to resume download...",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    # c10d trying IPv6 localhost first, then connecting over IPv4: a warning every healthy run may print
    "[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot assign requested address).",
    # TensorFlow/XLA's BFC allocator retrying after freeing: it says itself that this is not a failure
    "W tensorflow/core/common_runtime/bfc_allocator.cc:243] Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.20GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be performance gains if more memory were available.",
    # NCCL INFO lines of a healthy start over sockets
    "worker:101542:101542 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> [1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>",
    "n1:3001:3050 [2] NCCL INFO Connected all rings",
    "torch.backends.cuda.matmul.allow_tf32 = True  # avoid CUDA out of memory? no: just speed",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "logger.info('retrying after ValueError: bad sample')",
    "    raise ValueError(f'unknown optimizer {name}')",
    "Epoch 0: 100%|██████████| 1000/1000 [16:40<00:00,  1.00it/s, v_num=0, train_loss=2.340]",
    "slurmstepd: error: *** JOB 7108 ON n1 CANCELLED AT 2026-11-29T12:10:30 DUE TO JOB REQUEUE ***",
    "Nov 29 08:59:04 n9 kernel: Lustre: scratch-OST0003-osc-ffff9a1b2c3d4000: Connection restored to 10.1.0.3@o2ib (at 10.1.0.3@o2ib)",
    "NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=python, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    "NVRM: Xid (PCI:0000:cb:00): 63, pid=1, name=python, Row Remapper: New row marked for remapping, reset gpu to activate.",
    "NVRM: Xid (PCI:0000:cb:00): 94, pid=1, name=python, Contained: SM (0x1). RST: No, D-RST: No",
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
    "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)",
]


# ----------------------------------------------------------------------------- tests --------
def test_patterns_compile_and_never_match_empty():
    for mid, m in book()[1].items():
        r = compiled(mid)
        assert not r.search(""), f"{mid} matches the empty string"
        if m.get("emit") == "xid":
            assert "(?P<code>" in m["pattern"], mid


@pytest.mark.parametrize("line,expected", CORPUS, ids=[c[0][:60] for c in CORPUS])
def test_corpus(line, expected):
    got = hits(line)
    for mid, groups in expected.items():
        assert mid in got, f"{mid} does not hit: {line!r} (hits: {sorted(got)})"
        for k, v in groups.items():
            assert got[mid].get(k) == v, f"{mid}.{k}: {got[mid].get(k)!r} != {v!r}"


@pytest.mark.parametrize("line", HEALTHY)
def test_healthy_lines_make_no_error(line):
    assert not error_classes(line), f"{line!r} -> {error_classes(line)}"


def _test_lines():
    for fname, t in book()[3]:
        for inp in t.get("input") or []:
            for line in (inp.get("lines") or "").splitlines():
                if line.strip():
                    yield fname, t, inp.get("source", "any"), line


def test_every_matcher_is_exercised():
    used = set()
    for _, _, source, line in _test_lines():
        used.update(hits(line, source))
    for line, _expected in CORPUS:
        used.update(hits(line))
    unused = sorted(set(book()[1]) - used)
    assert not unused, f"matchers no test line or corpus line hits: {unused}"


def test_one_line_one_fault_class():
    """Several matchers on one line must agree on the fault class they lead to."""
    lines = [(s, l) for _, _, s, l in _test_lines()] + [("any", l) for l, _ in CORPUS] + [("any", l) for l in HEALTHY]
    bad = []
    for source, line in lines:
        ec = error_classes(line, source)
        classes = set().union(*ec.values()) if ec else set()
        # a symptom with no fault of its own (a task exit) never competes with one that names a
        # cause (that task exit's SIGKILL): the named cause always outranks "unknown"
        if len(classes - {"unknown"}) > 1:
            bad.append((line[:120], ec))
    assert not bad, "\n".join(f"{l!r}: {ec}" for l, ec in bad)


def _tests_by(kind):
    out = []
    for fname, t in book()[3]:
        if not t.get("input"):
            continue
        if (kind == "negative") == (t["expect"] == []):
            out.append(pytest.param(t, id=f"{fname}:{t['name'][:70]}"))
    return out


def _holds_recovery_notice(inp) -> bool:
    """An input with a program's own recovery notice (a matcher with attrs handled: true) or a
    command's notice that its exit is its own (own_exit: true, killall finding nothing), or a row
    of a listing of jobs' states (listing: true, sacct's): its failure lines are handled by replay
    (engine/core/replay.py, HandledFailure, LogTail), not by the lines."""
    matchers = book()[1]
    source = inp.get("source", "any")
    replayed = ("handled", "own_exit", "listing")
    return any(
        any((matchers[mid].get("attrs") or {}).get(a) for a in replayed)
        for line in inp["lines"].splitlines()
        for mid in hits(line, source)
    )


@pytest.mark.parametrize("t", _tests_by("negative"))
def test_negative_cases_have_no_error_line(t):
    for inp in t["input"]:
        if _holds_recovery_notice(inp):
            continue
        for line in inp["lines"].splitlines():
            ec = error_classes(line, inp.get("source", "any"))
            assert not ec, f"{line!r} -> {ec}"


@pytest.mark.parametrize("t", _tests_by("positive"))
def test_positive_cases_carry_their_evidence(t):
    direct, reach = classes_of_symptom()
    found: set[str] = set()
    any_error = False
    for inp in t["input"]:
        for line in inp["lines"].splitlines():
            found |= weak_classes(line)  # a keyword the log ends on (rules/25-weak-evidence.yaml)
            for mid, groups in hits(line, inp.get("source", "any")).items():
                # a line the log may end on, which then is an error of its own (a bare traceback)
                any_error = any_error or mid in log_end_error_matchers()
                for name in log_end_symptoms().get(mid, ()):
                    found |= reach.get(name, set())
                if book()[1][mid].get("emit") == "progress":
                    # speeds, aggregated by the progress tracker into a slow_node: no one line
                    # is the evidence, the series is
                    found.add("straggler")
                s = xid_symptom(groups) if mid in LOG_END_XID_MATCHERS else symptom_of_hit(mid, groups)
                if s is None:
                    continue
                any_error = any_error or s[1] != "warning"
                found |= reach.get(s[0], set())
    for e in t["expect"]:
        fc = e.get("fault_class")
        if fc == "unknown":
            assert any_error, "an unknown failure still needs an error symptom"
        elif fc and not t.get("facts"):
            assert fc in found, f"no line can lead to {fc} (reachable: {sorted(found)})"


def test_tests_cover_every_fault_class():
    classes = {e.get("fault_class") for _, t in book()[3] for e in t["expect"]}
    wanted = {
        "gpu_fell_off_bus",
        "gpu_memory_uncorrectable",
        "gpu_hardware_other",
        "nvlink_error",
        "nccl_timeout",
        "nccl_network_error",
        "cuda_oom",
        "host_oom",
        "cuda_illegal_access_app",
        "app_error",
        "node_failure",
        "job_time_limit",
        "preempted",
        "storage_io_error",
        "straggler",
        "unknown",
    }
    assert wanted <= classes, f"fault classes without a positive test: {sorted(wanted - classes)}"
    negatives = [t for _, t in book()[3] if t["expect"] == []]
    assert len(negatives) >= 10
