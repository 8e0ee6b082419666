"""Bad rulebooks get every problem at once, each as file:line:col: CODE message, never a traceback."""

import subprocess
import sys

import pytest

CASES = [
    # (yaml, code, line, col)
    ("matchers:\n  - id: a\n    pattern: 'x'\n    colour: red\n", "E-UNKNOWN-KEY", 4, 13),
    ("matchers:\n  - id: a\n    pattern: '(a)\\1'\n", "E-REGEX", 2, 5),
    ("matchers:\n  - id: a\n    pattern: 'foo(?=bar)'\n", "E-REGEX", 2, 5),
    ("matchers:\n  - id: a\n    pattern: '(a+)+$'\n    emit: bogus\n", "E-VALUE", 4, 11),
    ("matchers:\n  - id: a\n    pattern: 'x*'\n", "E-REGEX", 2, 5),
    # read_by is set by the scan on an ending line a specific matcher read: log text may not set it
    ("matchers:\n  - id: a\n    pattern: 'FATAL (?P<read_by>\\w+)'\n", "E-REGEX", 2, 5),
    (
        "rules:\n  - id: r\n    description: d\n    when: [{kind: log}]\n    then: {fault: {fault_class: gpu_on_fire}}\n",
        "E-VALUE",
        5,
        33,
    ),
    (
        'rules:\n  - id: r\n    description: d\n    when: [{kind: log, where: {code: {in: "@nope"}}}]\n    then: {symptom: {name: s}}\n',
        "E-REF",
        4,
        12,
    ),
    (
        'rules:\n  - id: r\n    description: d\n    when: [{kind: log}]\n    then: {symptom: {name: "{{ y.node }}"}}\n',
        "E-TEMPLATE",
        2,
        5,
    ),
    (
        'rules:\n  - id: r\n    description: d\n    when: [{kind: log}]\n    then: {symptom: {name: "{{ c1.node "}}\n',
        "E-TEMPLATE",
        2,
        5,
    ),
    (
        "rules:\n  - id: r\n    description: d\n    when: [{kind: log, where: {node: {same: z.node}}}]\n    then: {symptom: {name: s}}\n",
        "E-REF",
        4,
        45,
    ),
    (
        "rules:\n  - id: r\n    description: d\n    within: soon\n    when: [{kind: log}]\n    then: {symptom: {name: s}}\n",
        "E-VALUE",
        4,
        13,
    ),
    (
        "rules:\n  - {id: r, description: d, when: [{kind: log}], then: {symptom: {name: s}}}\n  - {id: r, description: d, when: [{kind: log}], then: {symptom: {name: s}}}\n",
        "E-DUP-ID",
        3,
        5,
    ),
    ('actions:\n  drain:\n    argv: [scontrol, "{{ secret }}"]\n', "E-TEMPLATE", 3, 5),
    # an unknown filter is found when the template's code is generated (templates are compiled
    # on first render, so the load generates it to check)
    (
        'rules:\n  - id: r\n    description: d\n    when: [{kind: log}]\n    then: {symptom: {name: "{{ c1.node | nosuchfilter }}"}}\n',
        "E-TEMPLATE",
        2,
        5,
    ),
    ("policy:\n  plans: {restart: [reboot_everything]}\n", "E-REF", 2, 10),
    ("lists:\n  a: [1]\n  a: [2]\n", "E-DUPKEY", 3, 3),
    ("matchers: [\n", "E-YAML", 2, 1),
    ("- just\n- a list\n", "E-TYPE", 1, 1),
    ("rules:\n  - id: r\n    override: true\n    description: d\n", "E-OVERRIDE-NOTHING", 2, 5),
]


@pytest.mark.parametrize("text,code,line,col", CASES)
def test_each_problem_has_code_and_position(tmp_path, text, code, line, col):
    from engine.rulebook import load_rulebook

    path = tmp_path / "site.yaml"
    path.write_text(text)
    result = load_rulebook([path], defaults=False)
    assert not result.ok
    hits = [d for d in result.diagnostics if d.code == code]
    assert hits, [str(d) for d in result.diagnostics]
    assert (hits[0].mark.line, hits[0].mark.col) == (line, col), [str(d) for d in result.diagnostics]
    assert hits[0].mark.file.endswith("site.yaml")


def test_all_errors_at_once(tmp_path):
    from engine.rulebook import load_rulebook

    path = tmp_path / "site.yaml"
    path.write_text(
        "matchers:\n  - {id: a, pattern: x, colour: red}\n  - {id: b, pattern: '(a)\\1'}\n"
        "  - {id: c, pattern: y, emit: bogus}\n"
    )
    result = load_rulebook([path], defaults=False)
    codes = {d.code for d in result.errors}
    assert {"E-UNKNOWN-KEY", "E-REGEX", "E-VALUE"} <= codes


def test_unused_list_is_a_warning_not_an_error(write_rules):
    result = write_rules("lists:\n  spare: [1, 2]\n")
    assert result.ok
    assert [d.code for d in result.diagnostics] == ["W-UNUSED"]


def test_cli_check_prints_positions_and_exits_1_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "rules:\n  - id: r\n    when: 3\n    then: {nonsense: 1}\nmatchers:\n  - {id: m, pattern: '(?<=a)b'}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "rules", "check", "--no-defaults", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    assert "bad.yaml:3:11: E-TYPE" in out
    assert "bad.yaml:6:5: E-REGEX" in out


def test_cli_check_binary_garbage_file(tmp_path):
    bad = tmp_path / "garbage.yaml"
    bad.write_bytes(b"\xff\xfe\x00rules: [\x00\x01")
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "rules", "check", "--no-defaults", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "garbage.yaml:1:1: E-IO" in proc.stdout


def test_templates_compile_on_first_render(tmp_path):
    """A template the load checked is compiled when it is first rendered, and renders as Jinja."""
    from engine.rulebook import load_rulebook

    path = tmp_path / "site.yaml"
    path.write_text(
        "rules:\n  - id: r\n    description: d\n    when: [{kind: log}]\n"
        '    then: {symptom: {name: "{{ c1.node | upper }}-{{ c1.gpu }}"}}\n'
    )
    result = load_rulebook([path], defaults=False)
    assert result.ok, [str(d) for d in result.diagnostics]
    rule = result.compiled.rule("r")
    t = rule.then_templates["name"]
    assert t.is_template and t._tmpl is None  # checked, not compiled
    assert t.render({"c1": {"node": "n1", "gpu": 3}}) == "N1-3"
    assert t._tmpl is not None


def test_alias_bomb_refused():
    """Aliases that expand past MAX_NODES are refused (the count is skipped only for a text with
    no anchor that is too short to reach it)."""
    from engine.rulebook.yamlmarks import MAX_NODES, load_marked

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    tree, problems = load_marked("\n".join(lines) + "\n", "bomb.yaml")
    assert tree is None and [p.code for p in problems] == ["E-YAML"]
    assert f"more than {MAX_NODES}" in problems[0].message


@pytest.mark.parametrize("text", ["-\n" * 500, "{" + ", ".join(f"k{i}" for i in range(300)) + "}", "[" + "," * 0 + "]"])
def test_nodes_without_anchors_bounded_by_length(text):
    """The bound that lets load_marked skip the expansion count: with no anchor, a text of n
    characters composes to at most 2n + 1 nodes (empty values take no character)."""
    import yaml

    from engine.rulebook.yamlmarks import _too_big

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    stack, count = [node], 0
    while stack:
        n = stack.pop()
        count += 1
        if isinstance(n, yaml.MappingNode):
            stack.extend(x for pair in n.value for x in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    assert count <= 2 * len(text) + 1
    assert _too_big(node) is None
