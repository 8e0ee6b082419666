#!/bin/sh
# Slurm Epilog for Recover sites: after a job, report a GPU that went missing during it as a
# fact in the Recover spool, so the controller attributes it (gpu_fell_off_bus on this node)
# even when the agent's NVML poll did not see the GPU go.
#
# slurm.conf:   Epilog=/etc/slurm/recover-epilog.sh
#
# Runs as root on every node of the job once it ends. It always exits 0: deciding to drain is
# Recover's job, behind its guards (blast radius, silences, monitor mode). It appends one JSON
# line to <spool>/<node>.epilog.jsonl, which the controller's spool reader reads like an agent's
# file; the fact is a gpu_state with signal gpu_lost (list gpu_signals_lost in the default
# rulebook), so rule symptom.gpu_state_lost turns it into a fatal symptom.
#
# Settings (environment, or /etc/default/recover):
#   RECOVER_SPOOL           the spool folder (required; nothing is written without it)
#   RECOVER_EXPECTED_GPUS   GPUs this node must show (required; nothing is checked without it)
#   RECOVER_NODE            this node's Slurm name (default: SLURMD_NODENAME, else hostname -s)
#   NVIDIA_SMI              path of nvidia-smi (default: nvidia-smi on PATH)
DEFAULTS=${RECOVER_DEFAULTS:-/etc/default/recover}
# shellcheck source=/dev/null
[ -r "$DEFAULTS" ] && . "$DEFAULTS"
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
EXPECTED=${RECOVER_EXPECTED_GPUS:-}
SPOOL=${RECOVER_SPOOL:-}
NODE=${RECOVER_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}
[ -n "$EXPECTED" ] && [ -n "$SPOOL" ] && [ -d "$SPOOL" ] || exit 0
command -v "$NVIDIA_SMI" >/dev/null 2>&1 || exit 0
case "$NODE" in *[!A-Za-z0-9._-]*|"") exit 0 ;; esac
case "${SLURM_JOB_ID:-}" in *[!0-9_]*) job="" ;; *) job=${SLURM_JOB_ID:-} ;; esac

# the file is the controller's to read through the spool folder's group (setgid: it inherits it)
umask 027
count=$(timeout 20 "$NVIDIA_SMI" --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
if [ "$count" -lt "$EXPECTED" ]; then
  now=$(date +%s)
  # one printf, one O_APPEND write: concurrent epilogs never interleave a line
  printf '{"kind":"gpu_state","at":%s,"origin":"slurm-epilog:%s","attrs":{"node":"%s","signal":"gpu_lost","active":true,"visible":%s,"expected":%s,"after_job":"%s"}}\n' \
    "$now" "$NODE" "$NODE" "$count" "$EXPECTED" "$job" >> "$SPOOL/$NODE.epilog.jsonl" 2>/dev/null
  logger -t recover-epilog -- "job ${job:-?}: only $count of $EXPECTED GPUs visible after the job" 2>/dev/null
fi
exit 0
