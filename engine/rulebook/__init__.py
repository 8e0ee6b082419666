"""Loading a rulebook: files -> marked YAML -> schema check -> layering -> compiled rulebook.

Usage::

    result = load_rulebook(["site/"], defaults=True)
    for d in result.diagnostics:
        print(d)                      # file:line:col: CODE message (hint: ...)
    if result.ok:
        book = result.compiled

Errors::

    RulebookError        raised by ``require_rulebook`` when a rulebook has errors; carries them
"""

from __future__ import annotations
from engine.errors import RulebookError

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

from engine.rulebook import patterns, stored
from engine.rulebook.compile import CompiledRulebook, LoadResult
from engine.rulebook.model import Diagnostic, FileModel, TestsNotLoaded
from engine.rulebook.yamlmarks import Mark

__all__ = [
    "load_rulebook",
    "require_rulebook",
    "LoadResult",
    "RulebookError",
    "default_rule_files",
    "fault_class_files",
    "policy_files",
    "Diagnostic",
    "CompiledRulebook",
]

MAX_FILE_BYTES = 8 * 1024 * 1024


def fault_class_files() -> list[Path]:
    """The shipped fault class declarations: loaded even with ``defaults=False`` (--no-defaults),
    because they are the vocabulary every rulebook, report and test speaks, not rules."""
    return [p for p in default_rule_files() if p.name.endswith("fault-classes.yaml")]


def policy_files() -> list[Path]:
    """The shipped policy (rules/50-policy.yaml): the one place the policy's defaults live. Loaded
    even with ``defaults=False``, before the site's files, so a rulebook that says nothing of the
    policy gets the shipped settle window, isolation and plans."""
    return [p for p in default_rule_files() if p.name.endswith("-policy.yaml")]


def default_rule_files() -> list[Path]:
    here = Path(__file__).resolve().parent.parent.parent / "rules"
    return sorted(p for p in here.iterdir() if p.suffix in (".yaml", ".yml")) if here.is_dir() else []


def _expand(paths: Iterable[str | os.PathLike], diags: list[Diagnostic]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(q for q in path.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file()))
        elif path.is_file():
            out.append(path)
        else:
            diags.append(Diagnostic(Mark(str(path), 0, 0), "E-IO", "no such file or folder"))
    return out


_SHIPPED = Path(__file__).resolve().parent.parent.parent
_SHIPPED_RULES = _SHIPPED / "rules"


def _display(path: Path) -> str:
    """How a rulebook file is named in messages: shipped files as rules/NAME, others as given."""
    if path.parent == _SHIPPED_RULES and not path.is_symlink():  # (default_rule_files' paths: no resolve)
        return f"rules/{path.name}"
    try:
        resolved = path.resolve()
        if resolved.parent == _SHIPPED_RULES:
            return f"rules/{resolved.name}"
    except (ValueError, OSError):
        pass
    return str(path)  # as the user named it


def load_rulebook(
    paths: Iterable[str | os.PathLike] = (),
    defaults: bool = True,
    overlays: Sequence[tuple[str, str]] = (),
    tests: bool = False,
) -> LoadResult:
    """``overlays``: (name, YAML text) layers after the files (e.g. autonomy from recover.toml).

    ``tests``: load the rule tests too (``recover rules check``, ``rules test``, ``rules show``).
    Without them no test is checked or layered, so a broken test never stops a run: a file that
    holds nothing but tests (``_tests_only``: the 68 shipped 9x-tests files, 1.18 of the 1.70 MB
    shipped) is read but not parsed, a ``tests`` section beside others is dropped once parsed, and
    ``book.tests`` refuses to be read (``TestsNotLoaded``).

    A load of files and overlays that were all read cleanly is kept on disk (``stored``): the
    next load of the same bytes by the same code and libraries is read back instead of built."""
    diags: list[Diagnostic] = []
    base = [] if defaults else fault_class_files() + policy_files()
    files = (default_rule_files() if defaults else base) + _expand(paths, diags)
    read = [_read(path, _display(path)) for path in files]
    k = None
    if not diags and all(problem is None for _, _, problem in read):
        k = stored.key([(name, text) for name, text, _ in read], overlays, defaults, tests)
        hit = stored.get(k)
        if hit is not None:
            if hit.compiled is not None:
                patterns.remember(hit.compiled.analyses)
            return hit
    result = _build(read, [path in base for path in files], overlays, diags, tests)
    if k is not None:
        stored.put(k, result)
    return result


def _read(path: Path, name: str) -> tuple[str, str, Diagnostic | None]:
    """(shown name, text, None) or (shown name, "", why it cannot be loaded)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return name, "", Diagnostic(Mark(name, 1, 1), "E-IO", f"file is larger than {MAX_FILE_BYTES // 2**20} MiB")
        return name, path.read_bytes().decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return name, "", Diagnostic(Mark(name, 1, 1), "E-IO", f"not UTF-8 text (byte {exc.start})")
    except OSError as exc:
        return name, "", Diagnostic(Mark(name, 0, 0), "E-IO", f"cannot read: {exc.strerror or exc}")


#: a line that starts a top-level key (or anything else) of a block mapping at column 0
_TOP = re.compile(r"^[^ \t\r\n#]", re.MULTILINE)
_TESTS_KEY = re.compile(r"tests:(?:[ \t\r]|$)", re.MULTILINE)


def _tests_only(text: str) -> bool:
    """Whether a file's one document is a block mapping whose only key is ``tests``: its first
    line that is not blank or a comment is ``tests:`` at column 0, so every key of its top-level
    mapping stands at column 0, and every line that starts at column 0 is that key. Anything
    else (a second section, a flow mapping, ``---``, a directive, a byte-order mark) is not, and
    the file is parsed."""
    seen = False
    for m in _TOP.finditer(text):
        if _TESTS_KEY.match(text, m.start()) is None:
            return False
        seen = True
    return seen


def _build(
    read: list[tuple[str, str, Diagnostic | None]],
    in_base: list[bool],
    overlays: Sequence[tuple[str, str]],
    diags: list[Diagnostic],
    tests: bool = True,
) -> LoadResult:
    """``in_base``: per file, whether it is a shipped base file loaded under --no-defaults (its
    plans are the policy's inherited defaults). ``tests``: see ``load_rulebook``; without them a
    tests-only file is layered as an empty one (it still names itself in ``book.files``)."""
    from engine.rulebook.compile import compile_rulebook
    from engine.rulebook.layer import layer
    from engine.rulebook.schema import check_file
    from engine.rulebook.yamlmarks import load_marked

    models: list[FileModel] = []
    inherited: dict[str, tuple[str, ...]] = {}
    for (name, text, problem), base in zip(read, in_base):
        if problem is not None:
            diags.append(problem)
            continue
        if not tests and _tests_only(text):
            models.append(check_file(None, name)[0])
            continue
        tree, problems = load_marked(text, name)
        diags.extend(Diagnostic(p.mark, p.code, p.message) for p in problems)
        if not tests and isinstance(tree, dict):
            tree.pop("tests", None)  # (a section beside others: neither checked nor layered)
        model, file_diags = check_file(tree, name)
        diags.extend(file_diags)
        models.append(model)
        if base:
            inherited.update({k: tuple(v) for k, v in dict(model.policy.get("plans") or {}).items()})
    for name, text in overlays:
        tree, problems = load_marked(text, name)
        diags.extend(Diagnostic(p.mark, p.code, p.message) for p in problems)
        model, file_diags = check_file(tree, name)
        diags.extend(file_diags)
        models.append(model)
    book, layer_diags = layer(models)
    diags.extend(layer_diags)
    compiled, compile_diags = compile_rulebook(book, inherited)
    diags.extend(compile_diags)
    if not tests:
        compiled = replace(compiled, book=replace(compiled.book, tests=TestsNotLoaded()))
    has_errors = any(d.severity == "error" for d in diags)
    return LoadResult(
        None if has_errors else compiled,
        tuple(diags),
        tuple(name for name, _, _ in read) + tuple(name for name, _ in overlays),
    )


def require_rulebook(
    paths: Iterable[str | os.PathLike] = (),
    defaults: bool = True,
    overlays: Sequence[tuple[str, str]] = (),
    tests: bool = False,
) -> CompiledRulebook:
    result = load_rulebook(paths, defaults, overlays, tests)
    if not result.ok:
        raise RulebookError(result.diagnostics)
    assert result.compiled is not None
    return result.compiled
