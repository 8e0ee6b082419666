"""The corpus split by source (engine/ops/corpus_split.py), the errors by what they cost, `rules eval`'s
split figures, and scripts/corpus_merge.py: the holdout of tests/corpus/ is frozen, one source never
sits on both sides, and a frozen case cannot change without a test failing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.ops.corpus_eval import HEALTHY, Case, CaseResult, evaluate, load_cases, node_scoped_classes, source_key
from engine.ops.corpus_split import (
    ADDED,
    HOLDOUT,
    MANIFEST_NAME,
    TRAIN,
    Manifest,
    case_hash,
    check_split,
    cost_errors,
    freeze,
    in_holdout_folder,
    load_manifest,
    side_by_hash,
    side_report,
    split_cases,
)
from engine.rulebook import load_rulebook

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
MERGE = ROOT / "scripts" / "corpus_merge.py"

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
# a kernel log that names its host: the DBE isolates worker4 (an isolating decision with a node)
DBE = (
    "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', "
    "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at physAddr 0x7fffa8860 partition 7, subpartition 1."
)
# the same fault in a dmesg excerpt with no host: the class is found, no node is known
DBE_NO_HOST = "[  219.470994] " + DBE.split("] ", 1)[1]


@pytest.fixture(scope="module")
def compiled():
    result = load_rulebook()
    assert result.ok
    return result.compiled


def _case(i, text, label, stream="app", source="https://github.com/acme/one/issues/1", **kw) -> dict:
    return {"id": f"t-{i}", "source": source, "stream": stream, "text": text, "label": label} | kw


def _write(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -- source keys ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source, repo, key",
    [
        ("https://github.com/NVIDIA/nccl/issues/1288", None, "nvidia/nccl"),
        ("https://github.com/NVIDIA/nccl", None, "nvidia/nccl"),
        ("https://raw.githubusercontent.com/pytorch/pytorch/main/x.log", None, "pytorch/pytorch"),
        ("https://forums.developer.nvidia.com/t/xid-79/1234", None, "forums.developer.nvidia.com"),
        ("https://discuss.pytorch.org/t/x", "discuss.pytorch.org", "discuss.pytorch.org"),
        ("https://github.com/NVIDIA/nccl/issues/1", "nvidia/NCCL", "nvidia/nccl"),
        ("https://gitlab.com/a/b/-/issues/3", "gitlab.com", "gitlab.com"),
    ],
)
def test_source_key(source, repo, key):
    assert source_key(source, repo) == (key, "")


@pytest.mark.parametrize(
    "source, repo, why",
    [
        ("https://github.com/NVIDIA/nccl/issues/1", "pytorch/pytorch", "is not the repository of its source"),
        ("https://github.com/NVIDIA", None, "names no repository"),
        ("not a url", None, "names no repository"),
        ("https://example.org/x", "a b/c", "neither owner/name nor a host"),
        ("https://example.org/x", "../../etc", "neither owner/name nor a host"),
    ],
)
def test_source_key_problems(source, repo, why):
    key, problem = source_key(source, repo)
    assert key == "" and why in problem


def test_loader_takes_repo_and_reports_a_bad_one(tmp_path):
    p = _write(
        tmp_path / "c.jsonl",
        [
            _case(1, "x", "cuda_oom", source="https://discuss.pytorch.org/t/1", repo="discuss.pytorch.org"),
            _case(2, "x", "cuda_oom", repo="other/repo"),
            _case(3, "x", "cuda_oom", repo=["acme/one"]),
            _case(4, "x", "cuda_oom"),
        ],
    )
    cases, problems = load_cases([str(p)])
    assert [(c.id, c.repo) for c in cases] == [("t-1", "discuss.pytorch.org"), ("t-4", "acme/one")]
    assert problems == [
        f"{p}:2: repo 'other/repo' is not the repository of its source (acme/one)",
        f"{p}:3: repo must be a string (owner/name or a host)",
    ]


# -- the side rule --------------------------------------------------------------------------
def test_side_by_hash_is_deterministic_and_near_its_share():
    keys = [f"owner{i}/repo{i}" for i in range(2000)]
    sides = [side_by_hash(k) for k in keys]
    assert sides == [side_by_hash(k) for k in keys]
    assert 0.26 < sides.count(HOLDOUT) / len(keys) < 0.34
    # another salt is another draw: the salt, recorded in the manifest, is part of the rule
    assert sides != [side_by_hash(k, salt="other:") for k in keys]


def test_a_source_is_placed_whatever_the_case_its_name_is_spelt_in():
    # a helper checking "IBM/autopilot" must get the side of the key cases carry, "ibm/autopilot"
    keys = [f"Owner{i}/Repo-{i}" for i in range(200)]
    assert [side_by_hash(k) for k in keys] == [side_by_hash(f" {k.lower()} ") for k in keys]
    held = next(k for k in keys if side_by_hash(k.lower()) == HOLDOUT)
    m = Manifest(train_sources=frozenset({held.lower()}))
    assert m.side_of(held) == m.side_of(held.upper()) == TRAIN


def test_the_manifest_lists_win_over_the_hash():
    on_holdout = next(f"o/r{i}" for i in range(100) if side_by_hash(f"o/r{i}") == HOLDOUT)
    on_train = next(f"o/r{i}" for i in range(100) if side_by_hash(f"o/r{i}") == TRAIN)
    m = Manifest(holdout_sources=frozenset({on_train}), train_sources=frozenset({on_holdout}))
    assert m.side_of(on_train) == HOLDOUT and m.side_of(on_holdout) == TRAIN


def test_bad_manifests_are_problems_not_tracebacks(tmp_path):
    cases = {
        "notjson": ("{", "not JSON"),
        "list": ("[]", "a manifest is a JSON object"),
        "both": (json.dumps({"holdout_sources": ["a/b"], "train_sources": ["a/b"]}), "sources on both sides"),
        "share": (json.dumps({"share": 2}), "share is a fraction"),
        "cases": (json.dumps({"cases": ["x"]}), "cases maps a case id"),
    }
    for name, (text, why) in cases.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        m, problem = load_manifest(str(p))
        assert m is None and why in problem, name
    assert "cannot read" in load_manifest(str(tmp_path / "absent.json"))[1]


# -- tests/corpus keeps to its frozen split ---------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    cases, problems = load_cases([str(CORPUS)])
    assert not problems, "\n".join(problems)
    manifest, why = load_manifest(str(CORPUS / MANIFEST_NAME))
    assert manifest is not None, why
    return cases, manifest


def test_shipped_corpus_keeps_to_its_manifest(shipped):
    cases, manifest = shipped
    # a frozen case edited or removed, or a case in a file of the wrong side, fails here
    assert check_split(cases, manifest) == []
    split = split_cases(cases, manifest)
    assert not split.changed and not split.vanished
    assert sum(s == HOLDOUT for s in split.side.values()) == len(manifest.cases) >= 100
    assert manifest.frozen


def test_every_source_of_the_shipped_corpus_is_on_one_side(shipped):
    cases, manifest = shipped
    sides: dict[str, set] = defaultdict(set)
    folders: dict[str, set] = defaultdict(set)
    for c in cases:
        sides[c.repo].add(TRAIN if manifest.side_of(c.repo) == TRAIN else HOLDOUT)
        folders[c.repo].add(in_holdout_folder(c.where))
    assert all(len(s) == 1 for s in sides.values())
    assert all(len(f) == 1 for f in folders.values()), [k for k, f in folders.items() if len(f) > 1]
    # every source of the corpus was placed at the freeze, on exactly one list
    assert set(sides) <= manifest.holdout_sources | manifest.train_sources
    assert not manifest.holdout_sources & manifest.train_sources
    holdout = {k for k in sides if manifest.side_of(k) == HOLDOUT}
    assert len(holdout) >= 50 and len(sides) - len(holdout) >= 150


# -- freeze detection on a small corpus -------------------------------------------------------
def _frozen_corpus(tmp_path: Path) -> tuple[Path, Manifest]:
    """Two sources: acme/one on the train side, acme/two held out (three cases, frozen)."""
    corpus = tmp_path / "corpus"
    two = "https://github.com/acme/two/issues/5"
    _write(corpus / "a.jsonl", [_case(1, OOM, "cuda_oom"), _case(2, "loss 2.3 | iteration 10", HEALTHY)])
    _write(
        corpus / "holdout" / "a.jsonl",
        [_case(3, OOM + " (rank 3)", "cuda_oom", source=two), _case(4, "iteration 11", HEALTHY, source=two)]
        + [_case(5, DBE, "gpu_memory_uncorrectable", stream="kernel", source=two)],
    )
    base = Manifest(holdout_sources=frozenset({"acme/two"}), train_sources=frozenset({"acme/one"}))
    cases, problems = load_cases([str(corpus)])
    assert not problems
    m = freeze(cases, base, "2026-12-01")
    m.path = str(corpus / MANIFEST_NAME)
    (corpus / MANIFEST_NAME).write_text(json.dumps(m.to_json()))
    return corpus, m


def test_freeze_lists_the_holdout_cases_with_their_hashes(tmp_path):
    corpus, m = _frozen_corpus(tmp_path)
    cases, _ = load_cases([str(corpus)])
    assert set(m.cases) == {"t-3", "t-4", "t-5"}
    assert m.cases["t-3"] == case_hash(next(c for c in cases if c.id == "t-3"))
    assert m.frozen == "2026-12-01" and m.train_sources == {"acme/one"}
    assert check_split(cases, m) == []
    # the manifest written reads back the same
    again, why = load_manifest(str(corpus / MANIFEST_NAME))
    assert again is not None and again.cases == m.cases and again.holdout_sources == m.holdout_sources


def _edit(path: Path, case_id: str, **change) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r | change if r["id"] == case_id else r) + "\n" for r in rows))


@pytest.mark.parametrize(
    "change, why",
    [
        ({"text": OOM + " (rank 4)"}, "changed since 2026-12-01"),
        ({"label": "app_error"}, "changed since 2026-12-01"),
        ({"accept": ["app_error"]}, "changed since 2026-12-01"),
        ({"stream": "mixed"}, "changed since 2026-12-01"),
    ],
)
def test_a_changed_frozen_case_is_a_problem(tmp_path, change, why):
    corpus, m = _frozen_corpus(tmp_path)
    _edit(corpus / "holdout" / "a.jsonl", "t-3", **change)
    cases, _ = load_cases([str(corpus)])
    problems = check_split(cases, m)
    assert len(problems) == 1 and "'t-3'" in problems[0] and why in problems[0]
    # and it is not scored as frozen any more
    assert split_cases(cases, m).side["t-3"] == ADDED


def test_a_vanished_frozen_case_and_a_case_moved_across_are_problems(tmp_path):
    corpus, m = _frozen_corpus(tmp_path)
    held = corpus / "holdout" / "a.jsonl"
    lines = held.read_text().splitlines()
    held.write_text(lines[1] + "\n" + lines[2] + "\n")  # t-3 gone
    with open(corpus / "a.jsonl", "a") as fh:  # a holdout source's case in a train file
        fh.write(json.dumps(_case(6, "Segmentation fault", "app_error", source="https://github.com/acme/two")) + "\n")
    cases, _ = load_cases([str(corpus)])
    problems = check_split(cases, m)
    assert any("'t-3' vanished" in p for p in problems)
    assert any(
        "'t-6' of source acme/two belongs to the holdout side, but its file is a train file" in p for p in problems
    )
    # a frozen case moved by a change of its source to a train source
    _edit(held, "t-4", source="https://github.com/acme/one/issues/9")
    cases, _ = load_cases([str(corpus)])
    assert any("'t-4' changed" in p for p in check_split(cases, m))


def test_a_new_case_of_a_holdout_source_is_added_after_the_freeze(tmp_path):
    corpus, m = _frozen_corpus(tmp_path)
    with open(corpus / "holdout" / "a.jsonl", "a") as fh:
        fh.write(json.dumps(_case(7, "RuntimeError: boom", "app_error", source="https://github.com/acme/two")) + "\n")
    cases, _ = load_cases([str(corpus)])
    assert check_split(cases, m) == []
    side = split_cases(cases, m).side
    assert side == {"t-1": TRAIN, "t-2": TRAIN, "t-3": HOLDOUT, "t-4": HOLDOUT, "t-5": HOLDOUT, "t-7": ADDED}


# -- errors by what they cost ----------------------------------------------------------------
def _result(i: int, label: str, got: str, isolated: tuple = (), isolating: bool = False) -> CaseResult:
    case = Case(f"c-{i}", "https://github.com/a/b", "app", "x", label, repo="a/b")
    return CaseResult(case, got, 1, (), "", isolated, (got,) if isolated else (), isolating or bool(isolated))


def test_cost_errors_count_what_a_site_pays_for():
    node = frozenset({"gpu_fell_off_bus", "node_failure"})
    results = [
        _result(1, "gpu_fell_off_bus", "gpu_fell_off_bus", ("n1",)),  # right, isolated: no cost
        _result(2, "gpu_fell_off_bus", "gpu_fell_off_bus"),  # right class, no node known: not isolated
        _result(3, "node_failure", "app_error"),  # wrong, not isolated
        _result(4, "app_error", "node_failure", ("n2",)),  # an application fault drained a node
        _result(5, HEALTHY, "gpu_fell_off_bus", ("n3",)),  # a healthy log drained a node
        _result(6, "cuda_oom", "cuda_oom"),  # no cost
        _result(7, "app_error", "node_failure", (), isolating=True),  # isolating decision, no node named
        _result(8, "unknown", "node_failure", ("n4",)),  # an unknown cause is not the node's either
    ]
    assert cost_errors(results, node) == {
        "wrongful_isolations": ["c-4", "c-5", "c-7", "c-8"],
        "node_faults_not_isolated": ["c-2", "c-3"],
    }


def test_cost_errors_on_a_replayed_corpus(compiled, tmp_path):
    node = node_scoped_classes(compiled)
    assert {"gpu_fell_off_bus", "gpu_memory_uncorrectable", "node_failure", "straggler"} <= node
    assert not {"app_error", "cuda_oom", "host_oom", "nccl_timeout"} & node
    corpus, m = _frozen_corpus(tmp_path)
    _write(
        corpus / "b.jsonl",
        [
            _case(10, DBE, HEALTHY, stream="kernel"),  # wrongful: healthy, a node drained
            _case(11, DBE, "app_error", stream="kernel", accept=["gpu_memory_uncorrectable"]),  # wrongful, right
            _case(12, DBE_NO_HOST, "gpu_memory_uncorrectable", stream="kernel"),  # right class, no node
            _case(13, OOM, "gpu_memory_uncorrectable"),  # wrong class, not isolated
        ],
    )
    cases, problems = load_cases([str(corpus)])
    assert not problems
    report = evaluate(compiled, cases)
    by_id = {r.case.id: r for r in report.results}
    assert by_id["t-5"].isolated == ("worker4",) and by_id["t-5"].right
    assert by_id["t-12"].right and by_id["t-12"].isolated == ()
    sides = side_report(report.results, split_cases(cases, m), node)
    assert sides[TRAIN]["wrongful_isolations"] == ["t-10", "t-11"]
    assert sides[TRAIN]["node_faults_not_isolated"] == ["t-12", "t-13"]
    assert sides[TRAIN]["not_isolated_right_class"] == ["t-12"]
    assert sides[HOLDOUT]["wrongful_isolations"] == [] and sides[HOLDOUT]["node_faults_not_isolated"] == []
    assert sides[TRAIN]["healthy_opened"] == ["t-10"] and sides[HOLDOUT]["healthy_opened"] == []
    assert sides[HOLDOUT] | {"per_source": None} == sides[HOLDOUT] | {
        "cases": 3,
        "right": 3,
        "accuracy": 1.0,
        "sources": 1,
        "healthy": 1,
        "per_source": None,
    }
    assert sides[HOLDOUT]["per_source"] == {"acme/two": {"right": 3, "total": 3}}
    assert sides[TRAIN]["per_source"]["acme/one"] == {"right": 4, "total": 6}


# -- the command ---------------------------------------------------------------------------------
def test_cli_prints_the_split_and_the_cost_errors(tmp_path):
    corpus, _ = _frozen_corpus(tmp_path)
    _write(corpus / "b.jsonl", [_case(10, DBE, HEALTHY, stream="kernel"), _case(11, OOM, "app_error")])
    with open(corpus / "holdout" / "a.jsonl", "a") as fh:
        fh.write(json.dumps(_case(7, OOM + "!", "app_error", source="https://github.com/acme/two")) + "\n")
    runner = CliRunner()
    out = runner.invoke(app, ["rules", "eval", str(corpus), "-v"])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "split by source (holdout frozen 2026-12-01" in text
    assert "  train:" in text and "50.0% (2/4) from 1 source(s)" in text
    assert "frozen holdout:" in text and "100.0% (3/3) from 1 source(s)" in text
    assert "added after the freeze:" in text and "0.0% (0/1) from 1 source(s)" in text
    assert "wrongful isolations (a node taken out for a cause not the node's): train 1, frozen holdout 0" in text
    assert "    train: t-10" in text
    assert "      acme/two: 3/3" in text  # per source, with -v
    assert "accuracy: 62.5% (5/8)" in text  # the figure over every case, as before
    miss = [line for line in text.splitlines() if line.startswith("  t-11: app_error -> cuda_oom")]
    assert len(miss) == 1 and miss[0].endswith("b.jsonl:2] {train}"), miss

    js = json.loads(runner.invoke(app, ["rules", "eval", str(corpus), "--json"]).output.strip().splitlines()[-1])
    sides = js["split"]["sides"]
    assert js["split"]["frozen"] == "2026-12-01" and js["split"]["manifest"].endswith(MANIFEST_NAME)
    assert (sides["train"]["right"], sides["train"]["cases"], sides["train"]["sources"]) == (2, 4, 1)
    assert sides["holdout"]["accuracy"] == 1.0 and sides["added"]["cases"] == 1
    assert sides["train"]["wrongful_isolations"] == ["t-10"]
    assert sides["holdout"]["per_source"] == {"acme/two": {"right": 3, "total": 3}}
    assert {m["id"]: m["side"] for m in js["misses"]} == {"t-10": "train", "t-11": "train", "t-7": "added"}

    # --min is the figure over every case; --min-holdout the frozen holdout's
    assert runner.invoke(app, ["rules", "eval", str(corpus), "--min", "0.6"]).exit_code == 0
    assert runner.invoke(app, ["rules", "eval", str(corpus), "--min", "0.7"]).exit_code == 1
    assert runner.invoke(app, ["rules", "eval", str(corpus), "--min", "0.7", "--min-holdout", "99"]).exit_code == 1
    assert runner.invoke(app, ["rules", "eval", str(corpus), "--min-holdout", "99"]).exit_code == 0
    # a file of the corpus given alone finds the manifest above its folder
    one = runner.invoke(app, ["rules", "eval", str(corpus / "holdout" / "a.jsonl"), "--min-holdout", "1.0"])
    assert one.exit_code == 0 and "frozen holdout:" in one.output


def test_cli_without_a_manifest_and_with_a_bad_one(tmp_path):
    p = _write(tmp_path / "c.jsonl", [_case(1, OOM, "cuda_oom"), _case(2, DBE, HEALTHY, stream="kernel")])
    runner = CliRunner()
    out = runner.invoke(app, ["rules", "eval", str(p)])
    assert out.exit_code == 0
    assert "split by source: no holdout manifest" in out.output
    assert (
        "all cases:" in out.output
        and "wrongful isolations (a node taken out for a cause not the node's): all cases 1" in out.output
    )
    nomani = runner.invoke(app, ["rules", "eval", str(p), "--min-holdout", "0.5"])
    assert nomani.exit_code == 2 and "--min-holdout needs" in nomani.output
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    worse = runner.invoke(app, ["rules", "eval", str(p), "--manifest", str(bad)])
    assert worse.exit_code == 2 and "not JSON" in worse.output and "Traceback" not in worse.output


def test_cli_reports_a_broken_split(tmp_path):
    corpus, _ = _frozen_corpus(tmp_path)
    _edit(corpus / "holdout" / "a.jsonl", "t-4", text="iteration 12")
    out = CliRunner().invoke(app, ["rules", "eval", str(corpus)])
    assert "frozen holdout case 't-4' changed since 2026-12-01" in out.output
    assert "100.0% (2/2) from 1 source(s)" in out.output  # the frozen figure counts only what was frozen


# -- scripts/corpus_merge.py --------------------------------------------------------------------
def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MERGE), *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_merge_puts_each_case_on_its_side_and_rejects_the_bad(tmp_path):
    corpus, m = _frozen_corpus(tmp_path)
    new_source = next(f"https://github.com/new/r{i}" for i in range(200) if side_by_hash(f"new/r{i}") == HOLDOUT)
    train_source = next(f"https://github.com/new/r{i}" for i in range(200) if side_by_hash(f"new/r{i}") == TRAIN)
    incoming = _write(
        tmp_path / "incoming" / "gather.jsonl",
        [
            _case(20, "RuntimeError: a", "app_error"),  # acme/one: train
            _case(21, "RuntimeError: b", "app_error", source="https://github.com/acme/two/issues/8"),  # holdout
            _case(22, "RuntimeError: c", "app_error", source=new_source, repo=new_source[19:]),  # new: by hash
            _case(23, "RuntimeError: d", "app_error", source=train_source),  # new: by hash
            _case(24, "  " + OOM.replace(" ", "  ") + "\n", "cuda_oom"),  # the text of t-1, spaced otherwise
            _case(3, "RuntimeError: e", "app_error"),  # an id the corpus has
            "{broken",
            _case(25, "x", "no_such_class"),
            _case(26, "x", "app_error", repo="wrong/repo"),
        ],
    )
    before = (corpus / MANIFEST_NAME).read_text()
    dry = _run("merge", str(incoming), "--corpus", str(corpus), "--dry-run")
    assert dry.returncode == 1 and "would append" in dry.stdout
    assert "would list new source(s) in holdout.manifest.json: 1 train, 1 holdout" in dry.stdout
    assert not (corpus / "gather.jsonl").exists() and (corpus / MANIFEST_NAME).read_text() == before
    res = _run("merge", str(incoming), "--corpus", str(corpus))
    assert res.returncode == 1, res.stderr
    assert "merged: 2 train, 2 holdout (added after the freeze); rejected: 5" in res.stdout
    err = res.stderr
    assert "same text as corpus case 't-1'" in err and "id 't-3' is already in the corpus" in err
    assert "not JSON" in err and "unknown label(s): no_such_class" in err and "repo 'wrong/repo'" in err
    train = [json.loads(x)["id"] for x in (corpus / "gather.jsonl").read_text().splitlines()]
    held = [json.loads(x)["id"] for x in (corpus / "holdout" / "gather.jsonl").read_text().splitlines()]
    assert train == ["t-20", "t-23"] and held == ["t-21", "t-22"]
    assert json.loads((corpus / "holdout" / "gather.jsonl").read_text().splitlines()[1])["repo"] == new_source[19:]
    # the two new sources are listed on the side they were placed on; what was frozen is not touched
    assert "listed new source(s) in holdout.manifest.json: 1 train, 1 holdout" in res.stdout
    pinned, why = load_manifest(str(corpus / MANIFEST_NAME))
    assert pinned is not None and not why, why
    assert pinned.cases == m.cases and pinned.frozen == m.frozen
    assert pinned.holdout_sources == m.holdout_sources | {new_source[19:]}
    assert pinned.train_sources == m.train_sources | {train_source[19:]}
    cases, problems = load_cases([str(corpus)])
    assert not problems and check_split(cases, m) == [] and check_split(cases, pinned) == []
    side = split_cases(cases, m).side
    assert side["t-21"] == ADDED and side["t-22"] == ADDED and side["t-23"] == TRAIN
    # merging the same file again adds nothing
    again = _run("merge", str(incoming), "--corpus", str(corpus))
    assert "merged: 0 train, 0 holdout" in again.stdout and "listed" not in again.stdout
    assert (corpus / MANIFEST_NAME).read_text() == json.dumps(pinned.to_json(), indent=1, ensure_ascii=False) + "\n"
    assert _run("check", "--corpus", str(corpus)).returncode == 0


def test_freeze_moves_misplaced_cases_and_refreezes(tmp_path):
    corpus, _ = _frozen_corpus(tmp_path)
    with open(corpus / "a.jsonl", "a") as fh:  # a holdout source's new case, put in a train file
        fh.write(json.dumps(_case(8, "RuntimeError: z", "app_error", source="https://github.com/acme/two")) + "\n")
    assert _run("check", "--corpus", str(corpus)).returncode == 1
    res = _run("freeze", "--corpus", str(corpus), "--date", "2026-12-02")
    assert res.returncode == 0, res.stderr
    m, _ = load_manifest(str(corpus / MANIFEST_NAME))
    assert m is not None and m.frozen == "2026-12-02" and set(m.cases) == {"t-3", "t-4", "t-5", "t-8"}
    assert "t-8" in (corpus / "holdout" / "a.jsonl").read_text() and "t-8" not in (corpus / "a.jsonl").read_text()
    assert _run("check", "--corpus", str(corpus)).returncode == 0


def test_a_sides_figure_is_rounded_once(capsys):
    # 373/417 is 89.448 %: the JSON keeps 0.8945, and formatting that again printed 89.5 %
    from engine.cli.rules import _echo_sides

    side = {
        "accuracy": round(373 / 417, 4),
        "right": 373,
        "cases": 417,
        "sources": 1,
        "healthy_opened": [],
        "healthy": 0,
    }
    side |= {"wrongful_isolations": [], "node_faults_not_isolated": [], "not_isolated_right_class": []}
    _echo_sides({"holdout": side}, None, None, False)
    out = capsys.readouterr().out
    assert "89.4% (373/417)" in out, out
