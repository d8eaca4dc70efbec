#!/usr/bin/env bash
# run_comm.sh - the agents' wire on this machine: bench_comm under mpirun with
# 2 processes (shared-memory transport), best of REPS ping-pongs per size.
#   usage: bash bench/run_comm.sh BUILD_DIR [REPS]
set -euo pipefail
B=${1:?usage: run_comm.sh BUILD_DIR [REPS]}
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
"${MPIRUN[@]}" -np 2 "$B/bench_comm" "${2:-40}"
