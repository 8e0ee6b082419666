#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, starts the real Slurm
# cluster the Slurm tests use (as root), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [ "$(id -u)" = 0 ] && ! command -v chromium >/dev/null; then
  # the report test opens the HTML report in a real headless browser
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    || echo "test.sh: could not install chromium; the browser test will say so" >&2
fi
if [ "$(id -u)" = 0 ] && ! command -v prometheus-alertmanager >/dev/null; then
  # the Alertmanager action is tested against the real one from Debian's packages
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null; } \
    || echo "test.sh: could not install prometheus-alertmanager; its test will say so" >&2
fi
if [ "$(id -u)" = 0 ]; then
  if ! bash scripts/slurm-up.sh; then
    echo "test.sh: the Slurm cluster did not come up" >&2
    # the Slurm tests fail (not skip) under CI when the cluster is missing; elsewhere they skip
    [ -n "${CI:-}" ] && exit 1
  fi
else
  echo "test.sh: not root, so no Slurm cluster: the real-Slurm tests will be skipped" >&2
fi
# the store's tests run on PostgreSQL too: a throwaway one (installed from Debian's packages when
# missing and root); without it they skip, and fail under CI
if ! bash scripts/pg-up.sh >/dev/null; then
  echo "test.sh: PostgreSQL did not come up: the PostgreSQL store tests will say so" >&2
  [ -n "${CI:-}" ] && exit 1
fi
# gates first (the same for a person and for CI): lint, format, types, layering
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports  # the layers of docs/architecture.md (contracts in pyproject.toml)
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
