"""A rule is never written from a holdout case (issue 20), and neither is a rule test: no URL in
the shipped rulebook's files may name a source of the corpus's holdout side (a repository is
keyed owner/name, any other site by its host, as the corpus keys its cases)."""

import re
from pathlib import Path

from engine.ops.corpus_eval import source_key
from engine.ops.corpus_split import Manifest, load_manifest

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"https?://[^\s)'\"`>]+")


def holdout_urls(rules_dir: Path, manifest: Manifest) -> list[str]:
    found = []
    for path in sorted(rules_dir.glob("*.yaml")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for url in URL.findall(line):
                key, _ = source_key(url)
                if key and manifest.side_of(key) == "holdout":
                    found.append(f"{path.name}:{n}: {url} ({key})")
    return found


def _manifest() -> Manifest:
    manifest, problem = load_manifest(str(ROOT / "tests/corpus/holdout.manifest.json"))
    assert manifest is not None, problem
    return manifest


def test_no_rule_file_quotes_a_holdout_source():
    found = holdout_urls(ROOT / "rules", _manifest())
    assert not found, "rule files cite holdout-side sources (quote a train-side one instead):\n" + "\n".join(found)


def test_a_holdout_url_in_a_rule_file_is_found(tmp_path):
    manifest = _manifest()
    key = sorted(manifest.holdout_sources)[0]
    (tmp_path / "96-tests-x.yaml").write_text(
        f"# https://github.com/pytorch/pytorch/issues/1\n# https://github.com/{key}/issues/2\n", encoding="utf-8"
    )
    found = holdout_urls(tmp_path, manifest)
    assert len(found) == 1 and key in found[0]
