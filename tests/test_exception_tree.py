"""One exception tree (issue 19): every exception class that engine/ and scheduler_adapters/ define
derives from engine.errors.RecoverError, so the CLI's error boundary and any caller catching
``RecoverError`` sees everything Recover raises on purpose. Built-in exceptions may still be raised
only from an explicit list (programming errors, and the ValueError/OSError/RuntimeError call sites
that older ``except`` clauses catch); a new built-in needs a decision, not a silent addition."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

from engine.errors import RecoverError
from tests.helpers import package_modules

ROOT = Path(__file__).resolve().parents[1]
#: built-in exceptions that may be raised directly (see the module docstring)
ALLOWED_BUILTINS = {"ValueError", "TypeError", "OSError", "RuntimeError", "AttributeError", "NotImplementedError"}


def exception_classes(root: Path, packages: tuple[str, ...] | None = None) -> list[tuple[str, type]]:
    """(module, class) of every exception class the modules define, found by importing them: each
    class statement of a module (at its top level or inside another class, by the AST), resolved
    to the object, kept when it is a BaseException. Whatever its bases are called, an exception
    class is found. A class defined inside a function cannot be resolved, so it is reported as
    outside the tree whatever it is: engine/ keeps its classes where they can be checked."""
    found: list[tuple[str, type]] = []
    kw = {} if packages is None else {"packages": packages}
    for mod, path, _ in package_modules(root, **kw):
        if mod.endswith("__main__"):
            continue
        module = importlib.import_module(mod)
        for qual in _class_paths(ast.parse(path.read_text(encoding="utf-8"))):
            obj: object = module
            for part in qual:
                obj = getattr(obj, part, None)
            if obj is None:
                found.append((mod, type(".".join(qual) + " (in a function: not resolvable)", (), {})))
            elif isinstance(obj, type) and issubclass(obj, BaseException):
                found.append((mod, obj))
    return found


def _class_paths(tree: ast.AST, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The qualified names of the class statements reachable by attribute from a module."""
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            out.append(prefix + (node.name,))
            out.extend(_class_paths(node, prefix + (node.name,)))
        elif isinstance(node, (ast.If, ast.Try)):  # classes defined under a module-level if/try
            out.extend(_class_paths(node, prefix))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not prefix:
            for inner in ast.walk(node):
                if isinstance(inner, ast.ClassDef):
                    out.append((node.name + "." + inner.name,))  # resolves to None: reported
    return out


def outside_the_tree(classes: list[tuple[str, type]]) -> list[str]:
    return sorted(f"{mod}.{cls.__qualname__}" for mod, cls in classes if not issubclass(cls, RecoverError))


def raised_builtins(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = ast.unparse(target)
            if isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException):
                out.add(name)
    return out


def test_the_raise_walker_sees_builtins_in_both_spellings(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "def f():\n    raise KeyError('x')\n\ndef g():\n    raise StopIteration\n\ndef h():\n    raise Mine()\n"
    )
    assert raised_builtins(f.read_text(encoding="utf-8")) == {"KeyError", "StopIteration"}


def test_every_exception_class_derives_from_recover_error():
    classes = exception_classes(ROOT)
    assert len(classes) >= 20, classes  # the finder found the tree (engine/errors.py alone has 19)
    assert outside_the_tree(classes) == []


def test_the_finder_sees_an_exception_class_whatever_its_base_is_called(tmp_path, monkeypatch):
    """The finder itself can fail: a package with an exception class under an oddly named base,
    one nested in a class, one under RecoverError, and a plain class."""
    pkg = tmp_path / "treecheck_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "from engine.errors import RecoverError\n"
        "Oddly = KeyError\n"
        "class Bad(Oddly):\n    pass\n"
        "class Holder:\n    class Inner(LookupError):\n        pass\n"
        "class Good(RecoverError):\n    pass\n"
        "class Plain:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    classes = exception_classes(tmp_path, packages=("treecheck_pkg",))
    assert sorted(c.__qualname__ for _, c in classes) == ["Bad", "Good", "Holder.Inner"]
    assert outside_the_tree(classes) == ["treecheck_pkg.mod.Bad", "treecheck_pkg.mod.Holder.Inner"]


def test_builtins_are_raised_only_from_the_list():
    extra = {}
    for mod, path, _ in package_modules(ROOT):
        names = raised_builtins(path.read_text(encoding="utf-8")) - ALLOWED_BUILTINS
        if names:
            extra[mod] = sorted(names)
    assert extra == {}
