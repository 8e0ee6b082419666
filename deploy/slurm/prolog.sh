#!/bin/sh
# Slurm Prolog for Recover sites: refuse to start a job on a node whose GPUs are not all there.
#
# slurm.conf:   Prolog=/etc/slurm/recover-prolog.sh
#               PrologFlags=Alloc          (run it when the allocation is made, before the job)
#
# Runs as root on every node of the job. A non-zero exit makes Slurm drain this node (reason
# "Prolog error") and requeue the job elsewhere: the same isolate-and-restart Recover does, but
# before a single step wastes time on a node that lost a GPU since its last job. Keep it fast
# (Slurm waits for it) and never fail on a tool that is merely missing.
#
# Settings (environment, or /etc/default/recover):
#   RECOVER_EXPECTED_GPUS   GPUs this node must show; unset: the count is not checked (set it per
#                           node type: SLURM_JOB_GPUS only lists the GPUs this job was given)
#   NVIDIA_SMI              path of nvidia-smi (default: nvidia-smi on PATH)
DEFAULTS=${RECOVER_DEFAULTS:-/etc/default/recover}
# shellcheck source=/dev/null
[ -r "$DEFAULTS" ] && . "$DEFAULTS"
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
EXPECTED=${RECOVER_EXPECTED_GPUS:-}
command -v "$NVIDIA_SMI" >/dev/null 2>&1 || exit 0   # not a GPU node, or no driver tools: nothing to check

say() { logger -t recover-prolog -- "job ${SLURM_JOB_ID:-?} on $(hostname -s): $*" 2>/dev/null; echo "recover-prolog: $*" >&2; }

out=$(timeout 20 "$NVIDIA_SMI" --query-gpu=index,pci.bus_id,retired_pages.pending,remapped_rows.pending \
      --format=csv,noheader 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  say "nvidia-smi failed (rc $rc): $(printf '%s' "$out" | head -n 1)"
  exit 1
fi
count=$(printf '%s\n' "$out" | grep -c .)
if [ -n "$EXPECTED" ] && [ "$count" -lt "$EXPECTED" ]; then
  say "only $count of $EXPECTED GPUs visible"
  exit 1
fi
# a pending page retirement or row remap needs a GPU reset before the memory is trusted again
if printf '%s\n' "$out" | awk -F', *' '$3 == "Yes" || $4 == "Yes" {bad=1} END {exit bad ? 0 : 1}'; then
  say "GPU with a pending page retirement or row remap: $(printf '%s\n' "$out" | awk -F', *' '$3 == "Yes" || $4 == "Yes" {print $1" "$2}' | tr '\n' ' ')"
  exit 1
fi
exit 0
