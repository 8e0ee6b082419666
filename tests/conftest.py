"""Fixtures for every test."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import textwrap
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from engine.rulebook import load_rulebook


def pytest_configure(config):
    """The suite starts hundreds of Python children (``recover run``, agents, CLI commands). Where
    the environment forbids bytecode files (PYTHONDONTWRITEBYTECODE, as in some containers), each
    child compiled every module it imports from source again (~0.35 s of CPU each on a 2-core
    machine). The children write and reuse their bytecode in a private folder outside the
    checkout instead (PYTHONPYCACHEPREFIX): nothing is written into the source tree, and Python
    checks each cached file against its source as usual."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        prefix = Path(tempfile.gettempdir()) / f"recover-test-pycache-{os.getuid()}"
        try:
            prefix.mkdir(mode=0o700, exist_ok=True)
            mine = prefix.stat().st_uid == os.getuid() and not prefix.is_symlink()
        except OSError:
            mine = False
        if mine:
            del os.environ["PYTHONDONTWRITEBYTECODE"]
            os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A CLI command run in-process (typer's CliRunner) sets up logging as the service would: the
    root logger's level (``recover demo`` sets ERROR) and handlers. Left in place, a later test's
    ``caplog`` sees nothing below that level, so each test gets the root logger back as it was."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)


@pytest.fixture
def write_rules(tmp_path: Path):
    """Write YAML text (dedented) to files and load them without the shipped defaults, tests
    included (as `recover rules check` and `rules test` do)."""

    def write(*texts: str, defaults: bool = False):
        paths = []
        for i, text in enumerate(texts):
            p = tmp_path / f"{i:02d}-rules.yaml"
            p.write_text(textwrap.dedent(text))
            paths.append(p)
        return load_rulebook(paths, defaults=defaults, tests=True)

    return write


# -- the store on PostgreSQL ------------------------------------------------------------------
# scripts/pg-up.sh (run by scripts/test.sh) starts a throwaway PostgreSQL and writes its DSN to
# $RECOVER_PG_DIR/dsn; $RECOVER_TEST_PG names another. Without one the PostgreSQL cases skip
# with the reason, and under CI=... they fail, like the Slurm tests (tests/slurm/conftest.py).


def _pg_dsn_or_why() -> tuple[str | None, str]:
    dsn = os.environ.get("RECOVER_TEST_PG", "").strip()
    where = Path(os.environ.get("RECOVER_PG_DIR", "/tmp/recover-pg")) / "dsn"
    if not dsn:
        try:
            dsn = where.read_text().strip()
        except OSError:
            return None, f"no PostgreSQL for the store's tests ({where} missing): start one with scripts/pg-up.sh"
    try:
        import psycopg
    except ImportError:
        return None, "psycopg is not installed (pip install -e '.[test]')"
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return None, f"the PostgreSQL of {where} does not answer ({str(exc).strip()[:200]}): run scripts/pg-up.sh"
    return dsn, ""


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The DSN of the test PostgreSQL (its database 'recover')."""
    dsn, why = _pg_dsn_or_why()
    if dsn is None:
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return dsn


@contextlib.contextmanager
def pg_schema(server: str) -> Iterator[str]:
    """A DSN whose tables live in a schema of their own (a fresh, empty store), dropped after."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in server else "?"
    try:
        yield f"{server}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_dsn(pg_server):
    """A fresh store on the test PostgreSQL, for this test alone."""
    with pg_schema(pg_server) as dsn:
        yield dsn


@pytest.fixture(params=["sqlite", "postgres"])
def db_target(request, tmp_path) -> str:
    """Where a test's store lives, once on each database: a SQLite file, or a PostgreSQL DSN."""
    if request.param == "sqlite":
        return str(tmp_path / "r.db")
    return str(request.getfixturevalue("pg_dsn"))
