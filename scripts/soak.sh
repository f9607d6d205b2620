#!/bin/sh
# scripts/soak.sh [MINUTES] [THREADS] [BUILD_DIR]: many threads creating
# runtimes, graphs and futures with random faults for MINUTES (default 10),
# checking that every future resolves, that runs no fault touched match a
# serial reference, and that the resident set stays flat (tests/soak.c).
# Exit 0 when all held; the last line is the SOAK summary.
set -eu
minutes=${1:-10}
threads=${2:-3}
build=${3:-build}
[ -x "$build/tests/mz-soak" ] || { echo "soak.sh: build first: meson setup $build && ninja -C $build" >&2; exit 2; }
exec "$build/tests/mz-soak" --minutes "$minutes" --threads "$threads" --seed "${MZ_SOAK_SEED:-1}"
