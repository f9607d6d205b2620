#!/usr/bin/env bash
# Run test suites under valgrind memcheck:
#   scripts/valgrind-tests.sh [BUILD_DIR] [SUITE...]
# BUILD_DIR is a plain (unsanitized) meson build (default: build); SUITEs
# are meson test names (default: the CPU and sim core suites).  It fails on
# any memcheck error and on any definitely lost byte in any process; leaks
# that are only "possibly lost" or "still reachable" (thread stacks, caches
# that live until exit) do not fail it.
#
# Criterion runs every test in a child that it forks and re-executes
# (BoxFort), so valgrind follows children (--trace-children=yes) and each
# test is its own valgrind process with its own leak check at exit.  But
# Criterion ignores a child's exit status once the test has reported, so
# --error-exitcode cannot fail a test: every process writes its report to
# LOGDIR/vg.PID.log instead, and this script fails when any report has a
# non-zero "ERROR SUMMARY" (definite leaks count as errors there, from
# --errors-for-leak-kinds=definite), printing those reports.  LOGDIR is
# $MZ_VALGRIND_LOGDIR (kept) or a temporary directory (removed).
#
# Suites run two at a time (CI has 2 cores), tests within a suite one at a
# time (--jobs=1, from tests/meson.build).  runtime/many_runtimes_in_a_loop
# is left out: 50 runtimes take longer than its 60 s timeout under
# memcheck, and tests/test_stress.c's 1,000 create/destroy cycles check the
# same under ASan and for RSS.  (partition/tiles_run_in_parallel, left out
# in session 3 after eager put both tiles on one queue three times under
# memcheck, runs again: the cause was a window in finish(), closed in
# session 4; test_policy's follow_queue_while_a_predecessor_finishes holds
# that window open on purpose.)
#
# hwloc cannot query the CPU with cpuid under valgrind and rediscovering
# the topology from /sys costs seconds per runtime there, so it is read
# once (natively) into an XML file that every runtime loads
# (HWLOC_XMLFILE, with HWLOC_THISSYSTEM=1 so that binding still works), with
# hwloc's own XML parser (HWLOC_LIBXML=0): libxml2 keeps per-thread state
# that it never frees in threads that exit, which memcheck reports as
# definitely lost in runtimes created on other threads than main.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [ $# -eq 0 ]; then
  set -- errors graph hazards partition future failure policy runtime sim perfmodel rerun share dot planorder hostcores
  # The CUDA backend, on the driver emulator where there is no GPU.
  [ -x "$build/tests/test_cuda" ] && set -- "$@" cuda
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
logdir=${MZ_VALGRIND_LOGDIR:-$tmp/logs}
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
rm -f "$logdir"/vg.*.log
lstopo-no-graphics --of xml --force "$tmp/topo.xml" >/dev/null
export HWLOC_XMLFILE="$tmp/topo.xml" HWLOC_THISSYSTEM=1 HWLOC_LIBXML=0
# Programs that libraries start (PoCL runs the system linker to build a
# kernel) are not followed: --error-exitcode would turn their own leaks
# into a failed kernel build.
# --fair-sched=yes: valgrind runs one thread at a time, and its default
# lock lets a thread that spins (maize's idle workers do, briefly) take it
# back again and again while the thread that would hand it work waits.
vg="valgrind --fair-sched=yes --trace-children=yes --trace-children-skip=/usr/*,/bin/* --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1"
vg="$vg --suppressions=$PWD/tests/valgrind.supp --num-callers=30 --log-file=$logdir/vg.%p.log"
start=$(date +%s)
rc=0
meson test -C "$build" --no-rebuild --wrap="$vg" --num-processes 2 --timeout-multiplier 10 \
  --test-args='--filter=!(runtime/many_runtimes_in_a_loop)' --print-errorlogs "$@" || rc=$?
nlogs=$(find "$logdir" -name 'vg.*.log' | wc -l)
bad=$(grep -l "ERROR SUMMARY: [1-9]" "$logdir"/vg.*.log || true)
for f in $bad; do
  echo "=== valgrind errors in $f"
  cat "$f"
done
nbad=$(echo "$bad" | grep -c . || true)
nclean=$(grep -lE "definitely lost: 0 bytes|All heap blocks were freed" "$logdir"/vg.*.log | wc -l)
echo "valgrind: $nlogs processes, $nbad with errors or definite leaks, $nclean with a leak check of 0 bytes" \
  "definitely lost (the others exited without one: killed on purpose, or exec'd); $(( $(date +%s) - start ))s"
[ "$rc" -eq 0 ] || { echo "valgrind: meson test failed" >&2; exit "$rc"; }
[ "$nbad" -eq 0 ] || { echo "valgrind: memcheck errors or definite leaks, see above" >&2; exit 1; }
echo "valgrind: suites $* passed"
