"""The recover app, its shared options and helpers: every command module imports these; nothing
here imports a command module."""

from __future__ import annotations
import contextlib
import logging
import sys
from typing import List, Optional, overload
from pathlib import Path

import typer


def load_rulebook(*args, **kw):
    """engine.rulebook.load_rulebook, imported when a command loads a rulebook: not at start, so
    that `recover incidents` and `recover explain` do not pay for YAML, jinja2 and the compiler."""
    from engine.rulebook import load_rulebook as load

    return load(*args, **kw)


app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    help="Recover: detect, attribute, isolate and restart failed GPU training jobs.",
)


rules_app = typer.Typer(no_args_is_help=True, help="Validate, test and inspect rulebooks.")


DEFAULT_DB = "recover.db"


RulesOpt = typer.Option(
    None, "--rules", "-r", help="Site rulebook file or folder, layered over the defaults (repeatable)."
)


NoDefaultsOpt = typer.Option(False, "--no-defaults", help="Do not load the shipped default rulebook.")


DbOpt = typer.Option(
    None,
    "--db",
    help="Incident store: a SQLite file, or a postgresql://... DSN (default: $RECOVER_DB or ./recover.db).",
)


JsonOpt = typer.Option(False, "--json", help="Machine-readable output: one JSON object per line.")


_SETTINGS = None


def _settings():
    """recover.toml (or --config / $RECOVER_CONFIG), with the environment over it."""
    global _SETTINGS
    if _SETTINGS is None:
        from engine.config import ConfigError, load_settings

        try:
            _SETTINGS = load_settings()
        except ConfigError as exc:
            _err(f"config: {exc}")
            raise typer.Exit(2) from None
    return _SETTINGS


@app.callback()
def _main(
    config: Optional[str] = typer.Option(
        None, "--config", help="Settings file (default: $RECOVER_CONFIG or ./recover.toml)."
    ),
) -> None:
    """Recover: detect, attribute, isolate and restart failed GPU training jobs."""
    global _SETTINGS
    from engine.config import ConfigError, load_settings

    try:
        _SETTINGS = load_settings(config)
    except ConfigError as exc:
        _err(f"config: {exc}")
        raise typer.Exit(2) from None


def _db(path: Optional[str]) -> str:
    return path or _settings().db or DEFAULT_DB


def _err(msg: str) -> None:
    typer.echo(msg, err=True)


def _rule_args(paths: Optional[List[str]], no_defaults: bool):
    """(paths, defaults, overlays): flags win over the settings."""
    from engine.config import autonomy_overlay

    s = _settings()
    return (list(paths) if paths else list(s.rules)), not (no_defaults or s.no_defaults), autonomy_overlay(s)


def _load_or_exit(paths: Optional[List[str]], no_defaults: bool, tests: bool = False):
    """The compiled rulebook, its diagnostics printed; exit 1 when it has errors. ``tests``: with
    its rule tests (``load_rulebook``)."""
    paths, defaults, overlays = _rule_args(paths, no_defaults)
    result = load_rulebook(paths, defaults=defaults, overlays=overlays, tests=tests)
    for d in result.diagnostics:
        _err(str(d))
    if not result.ok:
        _err(f"rulebook has {len(result.errors)} error(s); nothing was run")
        raise typer.Exit(1)
    return result.compiled


def path_hint() -> str | None:
    """How to get ``recover`` on PATH, when it is not: scripts/demo.sh runs .venv/bin/recover, and
    the commands the demo then suggests (``recover explain N``) would be 'command not found'."""
    import shutil

    if shutil.which("recover"):
        return None
    bindir = Path(sys.executable).parent  # not resolved: a venv's python is a link out of it
    script, activate = bindir / "recover", bindir / "activate"
    if activate.is_file():
        return f"(recover is not on your PATH: `source {activate}` puts it there, or run {script})"
    if script.is_file():
        return f"(recover is not on your PATH: add {bindir} to it, or run {script})"
    return f"(recover is not on your PATH: `{sys.executable} -m engine.cli` runs it)"


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@overload
def _since(text: str) -> float: ...


@overload
def _since(text: None) -> None: ...


def _since(text: Optional[str]) -> Optional[float]:
    """An operator's instant (engine.ops.report.parse_since: a date, epoch seconds or a span
    back from now); a usage error, exit 2, when it is none of them."""
    if text is None:
        return None
    from engine.ops.report import parse_since
    from engine.ops.review import ReviewError

    try:
        t = parse_since(text, what="time")
    except ReviewError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    if t is None:  # blank
        _err("time: empty; give a date, epoch seconds or a span back from now")
        raise typer.Exit(2)
    return t


@contextlib.contextmanager
def _exit_on(*kinds: type[BaseException]):
    """A usage error of one of these kinds (a bad review value, a database that cannot be opened)
    is its one-line message on stderr and exit 2."""
    try:
        yield
    except kinds as exc:
        _err(str(exc))
        raise typer.Exit(2) from None


def _write_or_exit(path: str, text: str, what: str = "") -> None:
    """Write an output file the user named; a failure is one line on stderr and exit 2."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        _err(f"{what}{path}: {exc.strerror or exc}")
        raise typer.Exit(2) from None


def _open_store(db: Optional[str], readonly: bool = False):
    """The store at --db; exit 2 when it does not exist (never create an empty one by mistake)."""
    from engine.store import Store, StoreError
    from engine.store.dialect import is_postgres

    path = _db(db)
    if path != ":memory:" and not is_postgres(path) and not Path(path).is_file():
        _err(f"{path}: no such database (give --db FILE or set RECOVER_DB)")
        raise typer.Exit(2)
    with _exit_on(StoreError):
        return Store(path, readonly=readonly)
