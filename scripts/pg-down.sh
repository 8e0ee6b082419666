#!/usr/bin/env bash
# Stop the throwaway PostgreSQL of scripts/pg-up.sh and remove its folder.
set -euo pipefail
DIR=${RECOVER_PG_DIR:-/tmp/recover-pg}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -1)
if [ -n "$BIN" ] && [ -f "$DIR/data/PG_VERSION" ]; then
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -m fast stop || true
  else "$BIN/pg_ctl" -D "$DIR/data" -m fast stop || true; fi
fi
rm -rf "$DIR"
