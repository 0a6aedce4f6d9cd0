#!/usr/bin/env bash
# The emulated GPU cluster the rehearsal runs on: 4 nodes x 8 GPUs x 112 CPUs, 1 TB each, a
# 2-day partition named "gpu" (as profiles/slurm expects). Idempotent; restarts a cluster of
# another shape. Needs ../shared/tools/local-slurm (or SHAPELM_LOCAL_SLURM).
# Under CI (CI=true) it also empties the queue: CI owns this cluster, and jobs left by an earlier
# session (or recovered from slurmctld's saved state at start-up) would hold nodes the 4-node
# jobs need and share the two cores with the tests.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tools="${SHAPELM_LOCAL_SLURM:-$here/../shared/tools/local-slurm}"
if [ ! -x "$tools/start.sh" ]; then
  # A clone made elsewhere (`git clone . /tmp/x/p`): the tools sit beside the checkout it came from.
  origin="$(git -C "$here" config --get remote.origin.url 2>/dev/null || true)"
  [ -d "$origin" ] && tools="$(cd "$origin" && pwd)/../shared/tools/local-slurm"
fi
want="gpu 4 gpu:8 112"

empty_queue_in_ci() {
  [ "${CI:-}" = true ] || return 0
  local left
  left="$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
  [ -n "${left// /}" ] || return 0
  echo "CI: cancelling jobs left on the emulated cluster: $left"
  scancel $left || true
  for _ in $(seq 1 90); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 2; done
  squeue
}

have="$(sinfo -h -o '%P %D %G %c' 2>/dev/null | head -n1 | tr -d '*' || true)"
if [ "$have" = "$want" ]; then
  echo "emulated GPU cluster already up: $have"
  empty_queue_in_ci
  exit 0
fi
[ -x "$tools/start.sh" ] || { echo "no local-slurm tools at $tools" >&2; exit 1; }
[ -n "$have" ] && bash "$tools/stop.sh" || true
LOCAL_SLURM_NODES=4 LOCAL_SLURM_GPUS=8 LOCAL_SLURM_CPUS=112 LOCAL_SLURM_MEM_MB=1000000 \
  LOCAL_SLURM_MAX_TIME=2-00:00:00 LOCAL_SLURM_PARTITION=gpu bash "$tools/start.sh"
empty_queue_in_ci
sinfo
