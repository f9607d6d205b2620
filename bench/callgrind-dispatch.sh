#!/usr/bin/env bash
# Instructions per task in each phase of the dispatch path, counted by
# callgrind (repeatable on a busy machine; timings are not).  One CPU
# worker, so the worker's instructions are not inflated by spinning.
#   bash bench/callgrind-dispatch.sh [build-dir]   (default: build)
set -euo pipefail
B=${1:-build}
T=5000 W=2 N=3
out=$(mktemp)
MZ_QUIET=1 MZ_PERFMODEL_DIR=off valgrind --tool=callgrind --callgrind-out-file="$out" \
  "$B/bench/mz-bench-dispatch" -w $W -t $T -r 1 --reruns $N --devices cpu:1 >/dev/null 2>&1
tasks=$((W * T))
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk -v n=$tasks -v runs=$((N + 1)) -v N=$N '
  /graph\.c:mz_apply /    {gsub(",","",$1); a=$1}
  /graph\.c:mz_value /    {gsub(",","",$1); v=$1}
  /graph\.c:mz_zip /      {gsub(",","",$1); z=$1}
  /graph\.c:mz_unzip /    {gsub(",","",$1); u=$1}
  /lower\.c:mz_schedule / {gsub(",","",$1); s=$1}
  /lower\.c:mz_graph_run / {gsub(",","",$1); rr=$1}
  /cpu\.c:run_task /      {gsub(",","",$1); w=$1}
  /graph\.c:mz_graph_destroy / {gsub(",","",$1); d=$1}
  END {
    printf "instructions per task (%d tasks, cpu:1):\n", n
    printf "  build (apply+value+zip+unzip) %6.0f\n", (a+v+z+u)/n
    printf "  mz_schedule                   %6.0f\n", s/n
    printf "  worker (run_task, inclusive)  %6.0f  (per task and run, over %d runs)\n", w/n/runs, runs
    printf "  mz_graph_destroy              %6.0f\n", d/n
    printf "  mz_graph_run (a re-run)       %6.0f  (mean of %d)\n", rr/n/N, N
    printf "BENCH dispatch.instructions build=%.0f schedule=%.0f worker=%.0f destroy=%.0f total=%.0f rerun_schedule=%.0f rerun_total=%.0f\n", (a+v+z+u)/n, s/n, w/n/runs, d/n, (a+v+z+u+s+d)/n+w/n/runs, rr/n/N, rr/n/N+w/n/runs
  }'
rm -f "$out"
