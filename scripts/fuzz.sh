#!/usr/bin/env bash
# Build and run the libFuzzer harness tests/fuzz/fuzz_api.c.
#
#   scripts/fuzz.sh build          build build-fuzz/fuzz_api (clang, libFuzzer, ASan, UBSan)
#   scripts/fuzz.sh replay         run every input in tests/fuzz/regressions/ once
#   scripts/fuzz.sh run [SECONDS]  replay, then fuzz for SECONDS (default 60) from the
#                                  seeds in tests/fuzz/corpus/; new inputs go to a
#                                  scratch corpus, crashes to build-fuzz/crash-*
#
# maize itself is built by meson in build-fuzz with clang, the sanitizers
# and -fsanitize=fuzzer-no-link (so its code is instrumented for coverage),
# without OpenCL and CUDA: the harness drives the CPU backend only.  A crash
# found is fixed and its input kept in tests/fuzz/regressions/.
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=build-fuzz
cmd=${1:-run}
secs=${2:-60}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

build() {
  if [ ! -f "$bdir/build.ninja" ]; then
    CC=clang meson setup "$bdir" -Dwerror=true -Dtests=false -Dopencl=disabled -Dcuda=disabled \
      -Dstarpu=disabled -Dopenblas=disabled -Dclblast=disabled -Dfftw=disabled -Dclfft=disabled -Db_sanitize=address,undefined -Db_lundef=false \
      -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
  fi
  ninja -C "$bdir" -j"${JOBS:-2}" libmaize.a
  # shellcheck disable=SC2046
  clang -std=c11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=fuzzer $san -Iinclude -I"$bdir/include" \
    tests/fuzz/fuzz_api.c "$bdir/libmaize.a" $(pkg-config --libs hwloc) -lpthread -ldl -lm \
    -o "$bdir/fuzz_api"
}

export MZ_QUIET=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

replay() {
  shopt -s nullglob
  local files=(tests/fuzz/regressions/* tests/fuzz/corpus/*)
  [ ${#files[@]} -gt 0 ] || return 0
  if ! "$bdir/fuzz_api" -runs=1 "${files[@]}" >"$bdir/replay.log" 2>&1; then
    cat "$bdir/replay.log"
    echo "fuzz: an input of tests/fuzz/regressions or tests/fuzz/corpus fails" >&2
    return 1
  fi
  echo "fuzz: replayed ${#files[@]} inputs"
}

case "$cmd" in
build) build ;;
replay) build && replay ;;
run)
  build
  replay
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  "$bdir/fuzz_api" -max_total_time="$secs" -max_len=512 -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$bdir/" "$scratch" tests/fuzz/corpus
  ;;
*) echo "usage: $0 build|replay|run [SECONDS]" >&2; exit 2 ;;
esac
