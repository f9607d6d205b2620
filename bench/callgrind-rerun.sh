#!/usr/bin/env bash
# What one re-run of a built graph costs per task, counted by callgrind with
# its cache model: instructions and level-1 data cache misses (reads and
# writes).  Both are repeatable on a busy machine; a miss is a cache line
# the task's data did not have in L1 (with 10,000 tasks a run's working
# set is several MB, so nearly every one also misses a 1 MB last level).
# The figure is the difference between 13 and 3 re-runs of the same graph
# (mz-bench-dispatch, a Task Bench stencil of empty tasks on one CPU
# worker), divided by 10 re-runs x 10,000 tasks: building, the first run
# and tearing down cancel out.  Top functions by misses follow.  Then two
# instruction counts without the cache model: a steady re-run (23 minus 13
# re-runs: the perf models' sampling has settled) and a graph built and
# run once in a runtime that ran such graphs before (6 minus 2 graphs,
# no re-run), the one-shot use of mz_schedule.
#   bash bench/callgrind-rerun.sh [build-dir]   (default: build)
set -euo pipefail
source "$(dirname "$0")/callgrind-self.sh"
B=${1:-build}
W=2 T=5000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 3 13; do
  MZ_QUIET=1 MZ_PERFMODEL_DIR=off valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64 \
    --callgrind-out-file="$tmp/cg$n" "$B/bench/mz-bench-dispatch" -w $W -t $T -r 1 --reruns $n --devices cpu:1 \
    >/dev/null 2>&1
  callgrind_self "$tmp/cg$n" >"$tmp/f$n"
done
awk -F'\t' -v div=$((10 * W * T)) '
  NR == FNR { ir[$1] = $2; m[$1] = $3; next }
  { di = ($2 - ir[$1]) / div; dm = ($3 - m[$1]) / div
    if ($1 == "PROGRAM TOTALS") { ti = di; tm = dm; next }
    if (dm >= 0.1) printf "  %-60s instructions %7.1f  D1 misses %5.2f\n", substr($1, 1, 60), di, dm }
  END { printf "BENCH dispatch.rerun_cache instructions=%.0f d1_misses=%.2f\n", ti, tm }' \
  "$tmp/f3" "$tmp/f13"
ir_of() {
  MZ_QUIET=1 MZ_PERFMODEL_DIR=off valgrind --tool=callgrind --callgrind-out-file="$tmp/ir" "$B/bench/mz-bench-dispatch" \
    -w $W -t $T --devices cpu:1 "$@" >/dev/null 2>&1
  callgrind_annotate "$tmp/ir" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
s13=$(ir_of -r 1 --reruns 13) s23=$(ir_of -r 1 --reruns 23) o2=$(ir_of -r 2 --reruns 0) o6=$(ir_of -r 6 --reruns 0)
echo "BENCH dispatch.steady_rerun instructions=$(((s23 - s13) / (10 * W * T))) oneshot_instructions=$(((o6 - o2) / (4 * W * T)))"
