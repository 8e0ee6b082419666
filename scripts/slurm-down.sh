#!/usr/bin/env bash
# slurm-down.sh - stop the cluster that scripts/slurm-up.sh started, by PID.
#
# Stops slurmctld, then every node (its slurmd, slurmstepds and job processes, through
# scripts/slurm-node.sh), then the accounting daemons (slurmdbd, MariaDB) that slurm-up.sh
# started, then munged if slurm-up.sh was the one that started it. RECOVER_KEEP_ACCOUNTING=1 leaves
# slurmdbd and MariaDB running (a restart of the cluster is quicker then).
# Safe to run when nothing runs. SLURM_PURGE=1 also wipes Slurm's state, spool and logs.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN_DIR=/run/slurm
SPOOL_DIR=/var/spool/slurmd

[ "$(id -u)" = 0 ] || { echo "slurm-down: must run as root" >&2; exit 1; }

# shellcheck source=slurm-lib.sh
. "$HERE/slurm-lib.sh"

# stop PIDFILE COMM: SIGTERM, up to 10 s to exit, then SIGKILL
stop() {
  local pid
  pid=$(live_pid "$1" "$2") || return 0
  kill "$pid" 2>/dev/null
  for _ in $(seq 100); do live_pid "$1" "$2" >/dev/null || break; sleep 0.1; done
  if live_pid "$1" "$2" >/dev/null; then
    echo "slurm-down: $2 (pid $pid) ignored SIGTERM; killing it" >&2
    kill -9 "$pid" 2>/dev/null
  fi
  echo "slurm-down: stopped $2 (pid $pid)"
}

stop "$RUN_DIR/slurmctld.pid" slurmctld

# Nodes: those with a pid file, and those with a spool directory (a node killed by
# slurm-node.sh has no pid file but may still have job processes).
nodes=$(
  for f in "$RUN_DIR"/slurmd-*.pid; do [ -e "$f" ] && basename "$f" .pid | sed 's/^slurmd-//'; done
  for d in "$SPOOL_DIR"/*/; do [ -d "$d" ] && basename "$d"; done
)
stopped=()
for node in $(echo "$nodes" | sort -u); do
  [[ $node =~ ^[A-Za-z0-9][A-Za-z0-9_-]*$ ]] || continue
  "$HERE/slurm-node.sh" stop "$node" >/dev/null && stopped+=("$node")
done
[ ${#stopped[@]} -eq 0 ] || echo "slurm-down: stopped nodes ${stopped[*]}"

if [ "${RECOVER_KEEP_ACCOUNTING:-0}" != 1 ]; then
  stop /run/slurmdbd/slurmdbd.pid slurmdbd
  stop /run/mysqld/mysqld.pid mariadbd
fi

if [ -e "$RUN_DIR/recover-started-munged" ] && [ "${RECOVER_KEEP_MUNGE:-0}" != 1 ]; then
  stop /run/munge/munged.pid munged
  rm -f "$RUN_DIR/recover-started-munged"
fi

rm -f "$RUN_DIR"/slurmctld.pid "$RUN_DIR"/slurmd-*.pid
if [ "${SLURM_PURGE:-0}" = 1 ]; then
  rm -rf /var/spool/slurmctld/* "${SPOOL_DIR:?}"/* /var/log/slurm/*
  echo "slurm-down: state and logs wiped"
fi
echo "slurm-down: done"
