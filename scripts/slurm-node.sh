#!/usr/bin/env bash
# slurm-node.sh - make one fake node of the scripts/slurm-up.sh cluster die, stop or come back.
#
#   slurm-node.sh kill  NODE   SIGKILL the node's slurmd, its slurmstepds and its job processes:
#                              the node "loses power". slurmctld marks it not responding after
#                              ~10 s and DOWN after SlurmdTimeout (~15-20 s); its jobs are
#                              requeued (or NODE_FAIL with --no-requeue).
#   slurm-node.sh stop  NODE   the same, but politely (SIGTERM, then SIGKILL what is left);
#                              slurm-down.sh uses it.
#   slurm-node.sh start NODE   start the node's slurmd again (a no-op when it runs); with
#                              ReturnToService=1 a node that was DOWN for not responding
#                              returns to service when it registers.
#   slurm-node.sh status NODE  exit 0 when the node's slurmd runs.
#
# Every process is found by PID (pid file, owner of a socket in the node's spool directory,
# SLURMD_NODENAME in its environment), never by process name.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

RUN_DIR=/run/slurm
SPOOL_DIR=/var/spool/slurmd

usage() { echo "usage: $0 kill|stop|start|status NODE" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1 node=$2
[[ $node =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$ ]] || { echo "slurm-node: bad node name: $node" >&2; exit 2; }
pidfile=$RUN_DIR/slurmd-$node.pid

# alive PID [COMM]: the process exists, is not a zombie (PID 1 here may never reap),
# and, when COMM is given, is that program.
alive() {
  local pid=$1 want=${2:-} stat rest
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  [ "${rest%% *}" != Z ] || return 1
  [ -z "$want" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$want" ]
}

slurmd_pid() {
  local pid
  [ -r "$pidfile" ] || return 1
  pid=$(<"$pidfile")
  alive "$pid" slurmd && echo "$pid"
}

# PIDs owning a unix socket under the node's spool directory: its slurmstepds.
stepd_pids() {
  local inodes args=() i
  mapfile -t inodes < <(awk -v d="$SPOOL_DIR/$node/" 'index($8, d) == 1 {print $7}' /proc/net/unix 2>/dev/null | sort -u)
  [ ${#inodes[@]} -gt 0 ] || return 0
  for i in "${inodes[@]}"; do
    [ ${#args[@]} -eq 0 ] || args+=(-o)
    args+=(-lname "socket:\[$i\]")
  done
  find /proc/[0-9]*/fd -maxdepth 1 \( "${args[@]}" \) -printf '%h\n' 2>/dev/null \
    | cut -d/ -f3 | sort -un
}

# PIDs of job processes running "on" the node (Slurm puts SLURMD_NODENAME in their environment).
job_pids() {
  local d
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" != "$$" ] || continue
    grep -qzx "SLURMD_NODENAME=$node" "$d/environ" 2>/dev/null && echo "${d#/proc/}"
  done
}

signal_all() {
  local sig=$1 p
  shift
  for p in "$@"; do alive "$p" && kill "-$sig" "$p" 2>/dev/null; done
  return 0
}

wait_gone() {
  local p _
  for _ in $(seq 50); do
    for p in "$@"; do alive "$p" && { sleep 0.1; continue 2; }; done
    return 0
  done
  return 1
}

case "$action" in
  kill)
    mapfile -t pids < <(slurmd_pid; stepd_pids; job_pids)
    signal_all KILL "${pids[@]}"
    rm -f "$pidfile"
    echo "slurm-node: killed $node (${#pids[@]} processes)"
    ;;
  stop)
    mapfile -t pids < <(slurmd_pid; stepd_pids; job_pids)
    signal_all TERM "${pids[@]}"
    wait_gone "${pids[@]}" || signal_all KILL "${pids[@]}"
    rm -f "$pidfile"
    echo "slurm-node: stopped $node"
    ;;
  start)
    if pid=$(slurmd_pid); then
      echo "slurm-node: $node already runs (slurmd pid $pid)"
      exit 0
    fi
    mkdir -p "$SPOOL_DIR/$node"
    slurmd -N "$node" || { echo "slurm-node: slurmd -N $node failed; see /var/log/slurm/slurmd-$node.log" >&2; exit 1; }
    for _ in $(seq 50); do slurmd_pid >/dev/null && break; sleep 0.1; done
    pid=$(slurmd_pid) || { echo "slurm-node: slurmd for $node exited; see /var/log/slurm/slurmd-$node.log" >&2; exit 1; }
    echo "slurm-node: started $node (slurmd pid $pid)"
    ;;
  status)
    slurmd_pid >/dev/null
    ;;
  *) usage ;;
esac
