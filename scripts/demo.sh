#!/usr/bin/env bash
# The main job on its embedded default: install (if needed), then run `recover demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/recover demo "$@"
