#!/usr/bin/env bash
# A throwaway PostgreSQL for the store's tests: Debian's postgresql package (installed when missing
# and root), a cluster initdb'd under $RECOVER_PG_DIR (default /tmp/recover-pg) listening on
# 127.0.0.1 at a free port and on a unix socket there, with a role and a database "recover".
# Idempotent: a cluster already running is reused. Prints the DSN and writes it to $DIR/dsn,
# where the tests read it (tests/conftest.py, fixture pg_dsn). Stop it: scripts/pg-down.sh.
set -euo pipefail
DIR=${RECOVER_PG_DIR:-/tmp/recover-pg}
bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}
if ! BIN=$(bindir); then
  if [ "$(id -u)" != 0 ]; then
    echo "pg-up.sh: PostgreSQL is not installed (apt-get install postgresql, as root)" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }
  BIN=$(bindir)
fi
# PostgreSQL refuses to run as root: root runs it as the package's postgres user
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$DIR" --shell /usr/sbin/nologin postgres
  as() { runuser -u postgres -- "$@"; }
  OWNER=postgres
else
  as() { "$@"; }
  OWNER=$(id -un)
fi
mkdir -p "$DIR"
chown "$OWNER" "$DIR"
chmod 755 "$DIR"  # the dsn file is read by the tests, whoever runs them; data/ stays 0700
if [ -f "$DIR/dsn" ] && as "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1 \
    && "$BIN/psql" "$(cat "$DIR/dsn")" -qAtc 'SELECT 1' >/dev/null 2>&1; then
  cat "$DIR/dsn"; exit 0
fi
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  rm -rf "$DIR/data"
  # the superuser only through the unix socket, which only its owner may open (below); the
  # tests' role with its password over TCP
  as "$BIN/initdb" -D "$DIR/data" -U "$OWNER" --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale \
    >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; exit 1; }
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# fsync off: a test database, thrown away; it makes each test's schema seconds faster
as "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c unix_socket_permissions=0700 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  >/dev/null || { tail -20 "$DIR/server.log" >&2; exit 1; }
psql_su() { as "$BIN/psql" -h "$DIR" -p "$PORT" -U "$OWNER" -d postgres -qAt "$@"; }
psql_su -c "SELECT 1 FROM pg_roles WHERE rolname = 'recover'" | grep -q 1 \
  || psql_su -c "CREATE ROLE recover LOGIN CREATEDB PASSWORD 'recover'"
psql_su -c "SELECT 1 FROM pg_database WHERE datname = 'recover'" | grep -q 1 \
  || psql_su -c "CREATE DATABASE recover OWNER recover"
DSN="postgresql://recover:recover@127.0.0.1:$PORT/recover"
echo "$DSN" >"$DIR/dsn"
chmod 644 "$DIR/dsn"
echo "$DSN"
