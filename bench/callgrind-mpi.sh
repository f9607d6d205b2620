#!/usr/bin/env bash
# What a step of a re-run distributed stencil costs on rank 0 (Task Bench
# stencil_1d, width 2, 2 ranks x 1 CPU worker, empty kernels: a step is
# one task, one send and one receive per rank), counted by callgrind with
# its cache model inside the runtime's own work: the tasks and their ends
# (run_taken, with the lean way and run_task below it), the run's start
# (mz_dgraph_run), the requests' completions (complete, where not
# inlined) and the release of a task a message gates
# (mz__task_ungate, mz__task_ungate_take).  The idle workers' polls, which
# wait, are left out (as the peer's MPI_Waitall would be); they also post
# the receives a graph keeps ahead (MPI_Irecv, about 350 instructions a
# step: --toggle-collect=PMPI_Irecv counts them).  The
# figure is the difference between 13 and 3 runs of the same graph (the
# first run builds it), divided by 10 runs x STEPS steps: building and
# tearing down cancel out.  Instructions and level-1 data misses a step
# (reads and writes) by function follow, then the totals.  Repeatable on
# a busy machine (the misses within about 1.5 a step).  The runs are made
# with mz_dgraph_run and mz_dgraph_wait (system maize-mpi-pair); with
# maize-mpi-rerun (mz_dgraph_run_wait) the calling thread runs the tasks,
# and the run's start, inside mz_dgraph_run_wait with its polls, is not
# counted.  Builds before mz_dgraph_run_wait name the pair maize-mpi-rerun.
#   bash bench/callgrind-mpi.sh [build-dir] [steps] [system]   (default: build 300 maize-mpi-pair)
set -euo pipefail
source "$(dirname "$0")/callgrind-self.sh"
B=${1:-build}
S=${2:-300}
SYS=${3:-maize-mpi-pair}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MZ_QUIET=1 MZ_PERFMODEL_DIR=off
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
for n in 3 13; do
  mpirun --oversubscribe -np 2 valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=524288,8,64 \
    --toggle-collect=run_taken --toggle-collect=complete --toggle-collect=mz_dgraph_run \
    --toggle-collect=mz__task_ungate --toggle-collect=mz__task_ungate_take \
    --callgrind-out-file="$tmp/cg$n.%q{OMPI_COMM_WORLD_RANK}" \
    "$B/bench/maize-bench/maize-bench" taskbench --system "$SYS" -r $n -steps $S -width 2 \
    -kernel compute_bound -iter 1 -worker 1 -type stencil_1d >/dev/null 2>&1
  callgrind_self "$tmp/cg$n.0" >"$tmp/f$n"
done
awk -F'\t' -v div=$((10 * S)) '
  NR == FNR { ir[$1] = $2; m[$1] = $3; next }
  { di = ($2 - ir[$1]) / div; dm = ($3 - m[$1]) / div
    if ($1 == "PROGRAM TOTALS") { ti = di; tm = dm }
    else if (di >= 10 || dm >= 0.5) printf "%8.1f %6.2f  %s\n", di, dm, substr($1, 1, 90) }
  END { printf "BENCH mpi.step_cost instructions=%.0f d1_misses=%.1f\n", ti, tm }' "$tmp/f3" "$tmp/f13" | sort -rn
