"""Property tests: random bytes and random mutations of the shipped rulebook through the loaders
never raise; every problem comes back as a diagnostic with a position."""

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from engine.rulebook import load_rulebook
from engine.rulebook.schema import check_file
from engine.rulebook.yamlmarks import load_marked

SHIPPED = sorted((Path(__file__).resolve().parents[2] / "rules").glob("*.yaml"))
TEXTS = [p.read_text() for p in SHIPPED]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data):
    text = data.decode("utf-8", errors="replace")
    tree, problems = load_marked(text, "fuzz.yaml")
    model, diags = check_file(tree, "fuzz.yaml")
    for d in list(problems) + list(diags):
        assert d.mark.file == "fuzz.yaml" and d.mark.line >= 0


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.randrange(7)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])  # duplicate keys, ids
        elif op == 2:
            lines[i] = lines[i].replace(":", "", 1)
        elif op == 3:
            lines[i] = " " + lines[i]  # indentation
        elif op == 4:
            lines[i] = lines[i].replace("(?P<", "(?<", 1).replace("{{", "{{ nope.", 1)
        elif op == 5:
            lines[i] = lines[i] + rng.choice(
                ["\\1", "(?=x)", " ]", " {", "\x00", ' "', " *&a", " !!python/object:os.system"]
            )
        else:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(TEXTS) - 1), st.integers(0, 2**32 - 1))
def test_mutated_shipped_rulebook_gives_diagnostics_not_tracebacks(tmp_path_factory, which, seed):
    rng = random.Random(seed)
    tmp = tmp_path_factory.mktemp("mut")
    for n, (path, text) in enumerate(zip(SHIPPED, TEXTS)):
        (tmp / path.name).write_text(_mutate(text, rng) if n == which else text)
    result = load_rulebook(sorted(tmp.glob("*.yaml")), defaults=False)
    for d in result.diagnostics:
        assert d.code and d.message
        assert d.mark.file.endswith(".yaml")
    if not result.ok:
        assert result.errors and all(str(d).split(":")[0].endswith(".yaml") for d in result.errors)


def test_yaml_python_tags_are_not_executed(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("lists:\n  x: !!python/object/apply:os.system ['touch /tmp/recover-pwned']\n")
    result = load_rulebook([p], defaults=False)
    assert not result.ok
    assert not Path("/tmp/recover-pwned").exists()
