#!/bin/sh
# .ci/cuda-builds.sh: maize builds with and without the CUDA backend.
#
# 1. -Dcuda=disabled: no CUDA code; mz_config.h says MZ_HAVE_CUDA 0.
# 2. -Dcuda=auto with cudatoolkit pointing nowhere: cuda.h is not found, the
#    build still succeeds without the backend (a machine with no toolkit).
# 3. -Dcuda=enabled (needs cuda.h under $CUDA_ROOT, default
#    /usr/local/cuda): the backend is built and test_cuda runs; its GPU
#    tests skip without a GPU, its GPU-free tests must pass.
# Each build is a fresh directory under ${TMPDIR:-/tmp}; JOBS sets ninja -j.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mz-cuda-builds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
jobs=${JOBS:-1}
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
common="-Dopencl=disabled -Dstarpu=disabled"

check_config() { # dir value
  grep -q "#define MZ_HAVE_CUDA $2" "$1/mz_config.h" || {
    echo "cuda-builds: $1/mz_config.h: MZ_HAVE_CUDA is not $2" >&2; exit 1; }
}

echo "== cuda=disabled"
meson setup "$tmp/off" "$src" $common -Dcuda=disabled >/dev/null
ninja -C "$tmp/off" -j "$jobs" >/dev/null
check_config "$tmp/off" 0
[ ! -e "$tmp/off/tests/test_cuda" ] || { echo "test_cuda built without CUDA" >&2; exit 1; }

echo "== cuda=auto, no cuda.h"
meson setup "$tmp/none" "$src" $common -Dcuda=auto -Dcudatoolkit=/nonexistent >/dev/null
ninja -C "$tmp/none" -j "$jobs" >/dev/null
check_config "$tmp/none" 0

if [ -f "$cuda_root/include/cuda.h" ]; then
  echo "== cuda=enabled ($cuda_root)"
  meson setup "$tmp/on" "$src" $common -Dcuda=enabled -Dcudatoolkit="$cuda_root" >/dev/null
  ninja -C "$tmp/on" -j "$jobs" >/dev/null
  check_config "$tmp/on" 1
  meson test -C "$tmp/on" cuda --print-errorlogs
else
  echo "== cuda=enabled: skipped, no $cuda_root/include/cuda.h"
fi
echo "cuda-builds: ok"
