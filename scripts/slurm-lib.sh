# slurm-lib.sh - helpers shared by slurm-up.sh and slurm-down.sh (sourced, not run).

# live_pid PIDFILE COMM: print the pid when the file names a live, non-zombie COMM process
live_pid() {
  local pid stat rest
  [ -r "$1" ] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  [ "${rest%% *}" != Z ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}
