#!/usr/bin/env bash
# What building a graph costs per task, counted by callgrind (instruction
# counts do not move with the machine's load).  mz-bench-memory --only S
# builds N tasks of shape S (plain: independent applies of an empty kernel
# on one i32 scalar; taskbench: a stencil_1d of width 1,000, each task an
# apply of a zip of a u64 scalar and three buffer values), joins them and
# runs the graph once.  The figures are the difference between N = 30,000
# and N = 10,000 divided by 20,000: the runtime's start, the warm-up graph
# and the teardown cancel out.  Printed per task: the whole program, and
# the builders' inclusive costs (mz_apply, and for taskbench mz_value,
# mz_zip and mz_u64 too), then mz_schedule and the run's wait.
#   bash bench/callgrind-build.sh [build-dir]   (default: build)
set -euo pipefail
B=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# incl FILE FUNCTION: FUNCTION's inclusive instructions in FILE (0 if absent).
incl() {
  callgrind_annotate --inclusive=yes --show-percs=no "$1" 2>/dev/null |
    awk -v f="$2" '$1 ~ /^[0-9,]+$/ { name = $2; sub(/^.*:/, "", name); sub(/ .*/, "", name)
                                       if (name == f && !found) { gsub(",", "", $1); print $1; found = 1 } }
                   END { if (!found) print 0 }'
}
for shape in plain taskbench; do
  for n in 10000 30000; do
    MZ_QUIET=1 MZ_PERFMODEL_DIR=off valgrind --tool=callgrind --callgrind-out-file="$tmp/$shape$n" \
      "$B/bench/mz-bench-memory" --only $shape --tasks $n >/dev/null 2>&1
  done
  line="BENCH build.$shape"
  for f in PROGRAM_TOTALS mz_apply mz_value mz_zip mz_u64 mz_schedule; do
    if [ $f = PROGRAM_TOTALS ]; then
      a=$(callgrind_annotate "$tmp/${shape}10000" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
      b=$(callgrind_annotate "$tmp/${shape}30000" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
      key=total
    else
      a=$(incl "$tmp/${shape}10000" $f) b=$(incl "$tmp/${shape}30000" $f) key=$f
    fi
    [ "$shape" = plain ] && case $f in mz_value | mz_zip | mz_u64) continue ;; esac
    line="$line $key=$(((b - a) / 20000))"
  done
  echo "$line"
done
