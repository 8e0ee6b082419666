#!/usr/bin/env bash
# Create .venv (if missing or stale) and install Recover with its test dependencies into it.
# durable-rules ships no wheels: it needs a C compiler and the Python headers, which are
# installed from Debian's packages when missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
"$PY" -c 'import sysconfig,os,sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")) else 1)' || need_pkgs+=(python3-dev)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  else
    echo "missing: ${need_pkgs[*]} (install them, or run as root)" >&2; exit 1
  fi
fi
stamp=.venv/.recover-installed
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
