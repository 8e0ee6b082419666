#!/usr/bin/env bash
# slurm-up.sh - bring up a real Slurm cluster on this one machine for Recover's tests.
#
# One slurmctld and N slurmd (`slurmd -N nX`, one port each) with fake GPUs (gres files that
# are symlinks to /dev/null). Installs the Debian packages when they are missing. Run as root.
#
# Idempotent: when the controller already runs with the same configuration, it only starts the
# slurmd that are missing and checks that every node answers; a changed configuration restarts
# the cluster. Exits non-zero, saying why, when the cluster does not come up.
#
# Settings (environment):
#   SLURM_NODES  number of nodes n1..nN            (default 4)
#   SLURM_GPUS   fake GPUs per node, 0 = no gres    (default 4)
#   SLURM_CPUS   CPUs per node                      (default 2)
#   SLURM_CLEAN  1 = wipe state and logs when the controller is (re)started (default 1)
#   SLURM_WAIT   seconds to wait for the nodes      (default 60)
#   SLURM_ACCOUNTING  1 = accounting through slurmdbd and MariaDB, 0 = none (default 1)
#
# Accounting (sacct) is optional: when MariaDB or slurmdbd cannot come up, the cluster comes up
# without it, this script says why, and so does /run/slurm/accounting-off (read by the tests that
# need accounting; removed while accounting works).
#
# Companions: scripts/slurm-down.sh stops it; scripts/slurm-node.sh kill|start NODE makes one
# node die or return.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

NODES=${SLURM_NODES:-4}
GPUS=${SLURM_GPUS:-4}
CPUS=${SLURM_CPUS:-2}
CLEAN=${SLURM_CLEAN:-1}
WAIT_S=${SLURM_WAIT:-60}
ACCOUNTING=${SLURM_ACCOUNTING:-1}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ETC=/etc/slurm
RUN_DIR=/run/slurm
CTLD_STATE=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
FAKE_GPU_DIR=$RUN_DIR/fakegpu
STARTED=$(date +%s.%N)

say() { echo "slurm-up: $*"; }
die() { echo "slurm-up: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"
[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "SLURM_NODES must be a positive integer, got '$NODES'"
[[ $GPUS =~ ^[0-9]+$ ]] || die "SLURM_GPUS must be a non-negative integer, got '$GPUS'"
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "SLURM_CPUS must be a positive integer, got '$CPUS'"
[[ $WAIT_S =~ ^[1-9][0-9]*$ ]] || die "SLURM_WAIT must be a positive integer, got '$WAIT_S'"

# shellcheck source=slurm-lib.sh
. "$HERE/slurm-lib.sh"
# alive PIDFILE COMM: the pid file names a live (non-zombie) process running COMM.
alive() { live_pid "$1" "$2" >/dev/null; }

log_tail() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "--- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

# range NAME_PREFIX FIRST LAST -> n[1-4], or n1 when there is one
range() { if [ "$2" = "$3" ]; then echo "$1$2"; else echo "$1[$2-$3]"; fi; }

# ---------------------------------------------------------------------------------------------
# 1. Packages
missing=()
for bin in slurmctld slurmd sbatch sinfo munged munge; do
  command -v "$bin" >/dev/null || missing+=("$bin")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install Slurm with"
  say "installing Slurm (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages from starting their own daemons with the packaged configuration
  # (policy-rc.d is what invoke-rc.d and deb-systemd-invoke ask); we start our own below.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  installed=0
  apt-get update -qq && apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null && installed=1
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  [ "$installed" = 1 ] || die "apt-get could not install slurmctld slurmd slurm-client munge"
fi
# Where systemd runs the packaged services (started by the install), they would hold the ports.
if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then
  systemctl stop slurmd slurmctld 2>/dev/null || true
fi

mkdir -p "$ETC" "$RUN_DIR" "$CTLD_STATE" "$SPOOL_DIR" "$LOG_DIR" /run/munge
chown slurm:slurm "$RUN_DIR" "$CTLD_STATE" "$LOG_DIR"
chown munge:munge /run/munge
chmod 755 /run/munge "$RUN_DIR"

# ---------------------------------------------------------------------------------------------
# 2. munge: reuse one that works, otherwise start our own (and remember that we did)
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
      || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
  touch "$RUN_DIR/recover-started-munged"
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munge does not answer (see /var/log/munge/munged.log)"
  say "started munged"
fi

# ---------------------------------------------------------------------------------------------
# 2b. Accounting: MariaDB and slurmdbd (Debian's packages). Each step that fails sets acct_off
#     to why, and the cluster comes up without accounting (accounting_storage/none).
DBD_CONF=$ETC/slurmdbd.conf
DBD_RUN=/run/slurmdbd
DBD_LOG=/var/log/slurmdbd
MYSQL_SOCK=/run/mysqld/mysqld.sock
acct_off=""
[ "$ACCOUNTING" = 1 ] || acct_off="SLURM_ACCOUNTING=$ACCOUNTING"
# closed CMD...: CMD without the descriptors this script inherited past 0-2. slurmdbd keeps what
# it inherits: a caller's `flock /tmp/slurm.lock` would live on in it and lock everyone out.
closed() {
  (
    for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
    exec "$@"
  )
}
db_ok() { mariadb-admin --socket="$MYSQL_SOCK" ping >/dev/null 2>&1; }
# sacctmgr reads slurm.conf, which names no slurmdbd yet on a first run: it is asked with one that does
dbd_probe=$(mktemp)
trap 'rm -f "$dbd_probe"' EXIT
printf '%s\n' "ClusterName=recover" "SlurmctldHost=$(hostname -s)(127.0.0.1)" "AuthType=auth/munge" \
  "AccountingStorageType=accounting_storage/slurmdbd" "AccountingStorageHost=127.0.0.1" \
  "AccountingStoragePort=6819" >"$dbd_probe"
dbd() { SLURM_CONF=$dbd_probe timeout 10 sacctmgr "$@"; }
dbd_ok() { dbd -n -P list cluster format=cluster >/dev/null 2>&1; }
if [ -z "$acct_off" ] && ! { command -v slurmdbd && command -v mariadbd; } >/dev/null; then
  say "installing MariaDB and slurmdbd for accounting"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server slurmdbd \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      mariadb-server slurmdbd; }; } >/dev/null 2>&1 || acct_off="apt-get could not install mariadb-server slurmdbd"
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
if [ -z "$acct_off" ] && ! db_ok; then
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null 2>&1 || acct_off="mariadb-install-db failed"
  if [ -z "$acct_off" ]; then
    # our own MariaDB: its socket only, no TCP port
    closed setsid mariadbd --user=mysql --skip-networking --socket="$MYSQL_SOCK" --pid-file=/run/mysqld/mysqld.pid \
      </dev/null >>/var/log/recover-mariadb.log 2>&1 &
    for _ in $(seq 150); do db_ok && break; sleep 0.2; done
    db_ok || acct_off="MariaDB did not answer within 30 s (see /var/log/recover-mariadb.log)"
  fi
fi
if [ -z "$acct_off" ]; then
  # the database password: kept from the slurmdbd.conf already written, else a new one
  pass=""
  [ ! -s "$DBD_CONF" ] || pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
  [[ $pass =~ ^[A-Za-z0-9]{16,64}$ ]] || pass=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  mariadb --socket="$MYSQL_SOCK" -u root >/dev/null 2>&1 <<EOF || acct_off="could not create the database slurm_acct_db and its user"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
fi
if [ -z "$acct_off" ]; then
  mkdir -p "$DBD_RUN" "$DBD_LOG" && chown slurm:slurm "$DBD_RUN" "$DBD_LOG"
  new_dbd=$(mktemp)
  cat >"$new_dbd" <<EOF
# Written by Recover's scripts/slurm-up.sh: accounting for the test cluster.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
PidFile=$DBD_RUN/slurmdbd.pid
LogFile=$DBD_LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$pass
EOF
  dbd_changed=0
  if ! cmp -s "$new_dbd" "$DBD_CONF"; then
    dbd_changed=1
    install -m 600 -o slurm -g slurm "$new_dbd" "$DBD_CONF"
  fi
  rm -f "$new_dbd"
  if [ "$dbd_changed" = 1 ] && pid=$(live_pid "$DBD_RUN/slurmdbd.pid" slurmdbd); then
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do live_pid "$DBD_RUN/slurmdbd.pid" slurmdbd >/dev/null || break; sleep 0.1; done
  fi
  if ! alive "$DBD_RUN/slurmdbd.pid" slurmdbd; then
    closed slurmdbd || acct_off="slurmdbd failed to start (see $DBD_LOG/slurmdbd.log)"
  fi
  if [ -z "$acct_off" ]; then
    for _ in $(seq 60); do dbd_ok && break; sleep 0.5; done
    dbd_ok || acct_off="slurmdbd does not answer sacctmgr (see $DBD_LOG/slurmdbd.log)"
  fi
  if [ -z "$acct_off" ] && [ -z "$(dbd -n -P list cluster format=cluster where cluster=recover 2>/dev/null)" ]; then
    dbd -i add cluster recover >/dev/null 2>&1 || acct_off="sacctmgr could not register the cluster 'recover'"
  fi
fi
if [ -z "$acct_off" ]; then
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819"
  rm -f "$RUN_DIR/accounting-off"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none"
  say "accounting is off: $acct_off"
  echo "$acct_off" >"$RUN_DIR/accounting-off"
fi

# ---------------------------------------------------------------------------------------------
# 3. Configuration. Written to temporary files first so that a second run can tell whether
#    anything changed.
HOST=$(hostname -s)
NODE_SET=$(range n 1 "$NODES")
CANARY_SET=$(range n 1 $((NODES < 2 ? NODES : 2)))
PORTS=$(range "" 17001 $((17000 + NODES)))
GRES_NODE=""
new_conf=$(mktemp) new_gres=$(mktemp)
trap 'rm -f "$new_conf" "$new_gres" "$dbd_probe"' EXIT

if [ "$GPUS" -gt 0 ]; then
  # gres/gpu wants File= (no File=: slurmd drops the GPUs and the node goes INVALID_REG), and
  # warns unless the file is a character device: a symlink to /dev/null is both.
  mkdir -p "$FAKE_GPU_DIR"
  for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$FAKE_GPU_DIR/nvidia$i"; done
  GRES_NODE="Gres=gpu:$GPUS"
  cat >"$new_gres" <<EOF
AutoDetect=off
NodeName=$NODE_SET Name=gpu File=$(range "$FAKE_GPU_DIR/nvidia" 0 $((GPUS - 1)))
EOF
fi

cat >"$new_conf" <<EOF
# Written by Recover's scripts/slurm-up.sh: a test cluster on one machine.
ClusterName=recover
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s;
# 5 is the least Slurm takes: a requeue waits ~6 s, a credential still lives 5 s from its launch).
# Only a slurmctld restart applies it; scontrol reconfigure does not.
AuthInfo=cred_expire=5
SlurmctldPort=6817
StateSaveLocation=$CTLD_STATE
SlurmdSpoolDir=$SPOOL_DIR/%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# slurmdbd with MariaDB when it came up (sacct), else none (section 2b says why)
$ACCT_CONF
# Also one line per finished run (requeues included) here, with or without slurmdbd; sacct -c reads it.
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
RebootProgram=$ETC/recover-fake-reboot.sh
ResumeTimeout=60
# A node DOWN for not responding returns when its slurmd registers again; an admin DOWN stays
# until State=RESUME.
ReturnToService=1
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
# Finished jobs stay visible to squeue/scontrol for an hour (with or without accounting).
MinJobAge=3600
JobRequeue=1
NodeName=$NODE_SET NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$PORTS CPUs=$CPUS RealMemory=1000 $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
# A second partition over the first nodes (they are in both): Recover's scope tests make it act
# while debug only recommends (policy.scope); jobs that name no partition still go to debug.
PartitionName=canary Nodes=$CANARY_SET Default=NO MaxTime=INFINITE State=UP
EOF

# RebootProgram: "scontrol reboot nX" restarts only that node's slurmd. slurmd runs it as a
# descendant, so the nearest ancestor "slurmd -N NODE" names the node.
cat >"$ETC/recover-fake-reboot.sh" <<'EOF'
#!/bin/bash
pid=$PPID node=""
while [ "$pid" -gt 1 ]; do
  mapfile -d '' -t argv < "/proc/$pid/cmdline"
  for ((i = 0; i < ${#argv[@]} - 1; i++)); do
    [ "${argv[i]}" = -N ] && node=${argv[i+1]}
  done
  [ -n "$node" ] && break
  pid=$(awk '{print $4}' "/proc/$pid/stat")
done
echo "$(date -Is) fake reboot of '$node' (slurmd pid $pid)" >> /var/log/slurm/fake-reboot.log
[ -n "$node" ] || exit 1
setsid bash -c "sleep 1; kill $pid; sleep 3; /usr/sbin/slurmd -N $node -b" </dev/null >/dev/null 2>&1 &
EOF
chmod 755 "$ETC/recover-fake-reboot.sh"

changed=0
cmp -s "$new_conf" "$ETC/slurm.conf" || changed=1
if [ "$GPUS" -gt 0 ]; then
  cmp -s "$new_gres" "$ETC/gres.conf" || changed=1
else
  [ ! -e "$ETC/gres.conf" ] || changed=1
fi

# ---------------------------------------------------------------------------------------------
# 4. Daemons
ctld_pidfile=$RUN_DIR/slurmctld.pid
if [ "$changed" = 1 ]; then
  # every daemon must read the new files: stop whatever runs (nothing, on a first run)
  alive "$ctld_pidfile" slurmctld && say "configuration changed: restarting the cluster"
  RECOVER_KEEP_MUNGE=1 RECOVER_KEEP_ACCOUNTING=1 "$HERE/slurm-down.sh" >/dev/null
  install -m 644 "$new_conf" "$ETC/slurm.conf"
  if [ "$GPUS" -gt 0 ]; then install -m 644 "$new_gres" "$ETC/gres.conf"; else rm -f "$ETC/gres.conf"; fi
fi

fresh=0
wiped=0
if ! alive "$ctld_pidfile" slurmctld; then
  fresh=1
  if [ "$CLEAN" = 1 ]; then
    wiped=1
    # slurmd left from an earlier controller would keep using the spool we wipe
    RECOVER_KEEP_MUNGE=1 RECOVER_KEEP_ACCOUNTING=1 "$HERE/slurm-down.sh" >/dev/null
    rm -rf "${CTLD_STATE:?}"/* "${SPOOL_DIR:?}"/* "${LOG_DIR:?}"/*
    if [ -z "$acct_off" ]; then
      # a wiped controller hands out job ids from 1 again: the records of the cluster it replaces
      # would answer for the same ids (sacct -j N), so they go with it
      mariadb --socket="$MYSQL_SOCK" -u root slurm_acct_db \
        -e "DELETE FROM recover_step_table; DELETE FROM recover_job_table;" >/dev/null 2>&1 \
        || say "could not clear the replaced cluster's job records from accounting"
    fi
  fi
  slurmctld || { log_tail "$LOG_DIR/slurmctld.log"; die "slurmctld failed to start"; }
  for _ in $(seq 50); do alive "$ctld_pidfile" slurmctld && break; sleep 0.1; done
  alive "$ctld_pidfile" slurmctld || { log_tail "$LOG_DIR/slurmctld.log"; die "slurmctld exited right after starting"; }
  say "started slurmctld (pid $(<"$ctld_pidfile"))"
fi
for ((i = 1; i <= NODES; i++)); do
  "$HERE/slurm-node.sh" status "n$i" && continue
  "$HERE/slurm-node.sh" start "n$i" >/dev/null || { log_tail "$LOG_DIR/slurmd-n$i.log"; die "slurmd for n$i did not start"; }
  say "started slurmd n$i"
done

# ---------------------------------------------------------------------------------------------
# 5. Wait for the nodes. After a start on wiped state every node must be idle; on a cluster that
#    was already up, or a controller restarted on its saved state (SLURM_CLEAN=0: its jobs and
#    drains survive, as after a failover), jobs and drains are others' business: every node must
#    answer (no "*"). (Waiting for idle there waited SLURM_WAIT for nodes that stay busy.)
unready() {
  sinfo -N -h -o '%N %T' 2>/dev/null | awk -v wiped="$wiped" '
    { n++ }
    wiped == 1 && $2 != "idle" { print $1 "=" $2; next }
    wiped != 1 && ($2 ~ /[*~#!%$@^-]$/ || $2 ~ /^(unknown|inval|future|fail)/) { print $1 "=" $2 }
    END { if (n == 0) print "no-answer-from-sinfo" }'
}
deadline=$((SECONDS + WAIT_S))
while pending=$(unready) && [ -n "$pending" ]; do
  if [ $SECONDS -ge $deadline ]; then
    sinfo -N -o '%N %T %E' >&2 || true
    log_tail "$LOG_DIR/slurmctld.log"
    die "nodes not ready after ${WAIT_S}s: ${pending//$'\n'/ }"
  fi
  sleep 0.5
done

sinfo -N -o '%N %T %c %G %E'
not_idle=$(sinfo -N -h -t drain,down -o '%N %T %E' 2>/dev/null || true)
[ -z "$not_idle" ] || say "note: out of service: ${not_idle//$'\n'/; }"
how="already running"
[ "$fresh" = 0 ] || how="started"
took=$(awk -v t0="$STARTED" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
acct="accounting through slurmdbd"
[ -z "$acct_off" ] || acct="no accounting ($acct_off)"
say "up: $NODES nodes, $GPUS GPUs each, $(sinfo -V), $acct, $how in $took s"
