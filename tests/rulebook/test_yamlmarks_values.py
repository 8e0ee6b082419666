"""The marked loader builds the values PyYAML's safe loader would, with a mark on every value:
string scalars take a short path (their text as written) and each container's mark is made once,
so these hold the short path to PyYAML's answer (constructed documents, not log excerpts)."""

from __future__ import annotations

import pytest
import yaml

from engine.rulebook.yamlmarks import MDict, MList, load_marked

DOCS = [
    "a: plain text\nb: 'quoted 1'\nc: \"double: yes\"\nd: |\n  block\n  text\ne: >-\n  folded\n  text\n",
    "n: 1\nf: 1.5\nx: 0x1F\nt: yes\nno: off\nz: ~\nnul: null\ne:\nts: 2001-12-14\ninf: .inf\n",
    "s1: !!str 123\ns2: !!str yes\ni: !!int '7'\nlist: [a, 1, 'b', null, true]\nmap: {k: v, n: 2}\n",
    "- a\n- - b\n  - 2\n- {c: [d, {e: f}]}\n- ''\n- ' lead'\n- '#not a comment'\n",
    "k1: &a [x, y]\nk2: *a\nk3: &b {p: q}\nk4: *b\n",
]


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _types(value):
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return type(value)


def _marks_agree(value) -> None:
    """A container's own mark is the one its parent records for it."""
    if isinstance(value, MDict):
        for k, v in value.items():
            if isinstance(v, (MDict, MList)):
                assert value.key_marks[k] == v.mark
            _marks_agree(v)
    elif isinstance(value, MList):
        assert len(value.item_marks) == len(value)
        for m, v in zip(value.item_marks, value):
            if isinstance(v, (MDict, MList)):
                assert m == v.mark
            _marks_agree(v)


@pytest.mark.parametrize("doc", DOCS)
def test_values_are_pyyamls(doc: str) -> None:
    tree, problems = load_marked(doc, "doc.yaml")
    assert problems == []
    expected = yaml.safe_load(doc)
    # mapping keys are strings in a rulebook (PyYAML keeps `no: off` as {False: False})
    if isinstance(expected, dict):
        expected = {str(k) if not isinstance(k, str) else k: v for k, v in expected.items()}
    assert _plain(tree) == expected
    assert _types(tree) == _types(expected)  # (1 and True are equal; their types are not)
    _marks_agree(tree)


def test_string_marks_point_at_the_value() -> None:
    tree, _ = load_marked("a: text\nb:\n  - one\n  - 'two'\n", "doc.yaml")
    assert str(tree.key_marks["a"]) == "doc.yaml:1:4"
    assert [str(m) for m in tree["b"].item_marks] == ["doc.yaml:3:5", "doc.yaml:4:5"]
    assert str(tree.key_marks["b"]) == "doc.yaml:3:3"
