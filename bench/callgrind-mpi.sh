#!/usr/bin/env bash
# Instructions a step of a re-run distributed stencil (Task Bench
# stencil_1d, width 2, 2 ranks x 1 CPU worker, empty kernels), counted by
# callgrind on rank 0 inside the runtime's own work: the tasks and their
# ends (run_task), the completion of requests (complete) and the run's
# start (mz_dgraph_run); the idle workers' polls, which wait, are left
# out.  The figure is the difference between 13 and 3 runs of the same
# graph (the first run builds it), divided by 10 runs x STEPS steps:
# building and tearing down cancel out.  Repeatable on a busy machine.
# Top functions follow (instructions a step, by function, inclusive of
# nothing: self cost).
#   bash bench/callgrind-mpi.sh [build-dir] [steps]   (default: build 300)
set -euo pipefail
B=${1:-build}
S=${2:-300}
tmp=$(mktemp -d)
[ -n "${KEEP:-}" ] && tmp=$KEEP && mkdir -p "$tmp" || trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MZ_QUIET=1 MZ_PERFMODEL_DIR=off
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
for n in 3 13; do
  mpirun --oversubscribe -np 2 valgrind --tool=callgrind --toggle-collect=run_task --toggle-collect=complete \
    --toggle-collect=mz_dgraph_run --callgrind-out-file="$tmp/cg$n.%q{OMPI_COMM_WORLD_RANK}" \
    "$B/bench/maize-bench/maize-bench" taskbench --system maize-mpi-rerun -r $n -steps $S -width 2 \
    -kernel compute_bound -iter 1 -worker 1 -type stencil_1d >/dev/null 2>&1
  callgrind_annotate --show-percs=no "$tmp/cg$n.0" 2>/dev/null |
    awk '/^-- Auto-annotated source/ {done = 1}
         !done && NF >= 2 && $1 ~ /^[0-9,]+$/ {
           name = $2; for (i = 3; i <= NF && $i !~ /^\[/; i++) name = name " " $i
           gsub(",", "", $1); print name "\t" $1 }' >"$tmp/f$n"
done
awk -F'\t' -v div=$((10 * S)) '
  NR == FNR { ir[$1] = $2; next }
  { di = ($2 - ir[$1]) / div
    if ($1 == "PROGRAM TOTALS") ti = di
    else if (di >= 10) printf "%8.1f  %s\n", di, substr($1, 1, 90) }
  END { printf "BENCH mpi.step_instructions instructions=%.0f\n", ti }' "$tmp/f3" "$tmp/f13" | sort -rn
