#!/bin/sh
# Slurm TaskProlog for Recover: prints the job's identity into its own output file, so that
# Recover attributes every line of the log to the right job attempt and nodes even when the file
# name does not carry the job id (#SBATCH -o train.log) and after a requeue (a new attempt).
#
# slurm.conf:   TaskProlog=/etc/slurm/recover-task-prolog.sh
#
# A TaskProlog's stdout is read by slurmstepd: a line "print TEXT" is written to the task's
# standard output. Only the first task of the step prints, so a 512-rank job adds three lines.
# The default rulebook's context matchers read exactly these (rules/10-matchers-job.yaml:
# ctx_slurm_job_id, ctx_slurm_restart_count, ctx_slurm_nodelist).
[ "${SLURM_PROCID:-0}" = "0" ] || exit 0
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
echo "print SLURM_JOB_ID=${SLURM_JOB_ID}"
echo "print SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0}"
[ -n "${SLURM_JOB_NODELIST:-}" ] && echo "print SLURM_JOB_NODELIST=${SLURM_JOB_NODELIST}"
exit 0
