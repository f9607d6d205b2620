#!/usr/bin/env bash
# Run test suites under valgrind memcheck (issue 7):
#   scripts/valgrind-tests.sh [BUILD_DIR] [SUITE...]
# BUILD_DIR is a plain (unsanitized) meson build (default: build); SUITEs
# are meson test names (default: the CPU and sim core suites).  A suite
# fails on any memcheck error and on any definitely lost byte; leaks that
# are only "possibly lost" or "still reachable" (thread stacks, caches
# that live until exit) are reported but do not fail it.
#
# Criterion runs every test in a child that it forks and re-executes
# (BoxFort), so valgrind follows children (--trace-children=yes): each
# test is its own valgrind process, with its own leak check at exit, and
# Criterion reports a test whose valgrind exits with status 1 as failed.
# Suites run two at a time (the CI machine has 2 cores), tests within a
# suite one at a time (--jobs=1, from tests/meson.build).
#
# runtime/many_runtimes_in_a_loop is left out: 50 runtimes take longer
# than its 60 s timeout under memcheck, and tests/test_stress.c's 1,000
# create/destroy cycles check the same under ASan and for RSS.
#
# hwloc cannot query the CPU with cpuid under valgrind and rediscovering
# the topology from /sys costs seconds per runtime there, so it is read
# once (natively) into an XML file that every runtime loads
# (HWLOC_XMLFILE, with HWLOC_THISSYSTEM=1 so that binding still works).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [ $# -eq 0 ]; then
  set -- errors graph hazards partition future failure policy runtime sim perfmodel
fi
topo=$(mktemp --suffix=.xml)
trap 'rm -f "$topo"' EXIT
lstopo-no-graphics --of xml --force "$topo" >/dev/null
export HWLOC_XMLFILE="$topo" HWLOC_THISSYSTEM=1
vg="valgrind -q --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite"
vg="$vg --error-exitcode=1 --suppressions=$PWD/tests/valgrind.supp --num-callers=30"
start=$(date +%s)
meson test -C "$build" --no-rebuild --wrap="$vg" --num-processes 2 --timeout-multiplier 10 \
  --test-args='--filter=!(runtime/many_runtimes_in_a_loop)' --print-errorlogs "$@"
echo "valgrind: suites $* passed in $(( $(date +%s) - start ))s"
