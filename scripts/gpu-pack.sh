#!/bin/sh
# scripts/gpu-pack.sh: a CUDA build of maize and the shared libraries it
# needs, packed for a GPU machine that cannot build it (no hwloc, Criterion,
# OpenBLAS or FFTW there, and no network to fetch them).
#
# Builds BUILD_DIR (default build-gpu) with -Dcuda=enabled in release mode
# on this machine (the CUDA toolkit's headers under CUDA_ROOT; the driver
# and cuBLAS/cuFFT are loaded at run time, so none is needed to build),
# then writes .gpu/libs.tar.xz: every library the tests, benchmarks,
# examples and tools link against, except the C runtime every Linux has.
# On the GPU machine (run from the repository root, as in the README):
#   mkdir -p /tmp/mzlibs && tar xJf .gpu/libs.tar.xz -C /tmp/mzlibs &&
#   LD_LIBRARY_PATH=/tmp/mzlibs MZ_GPU_PREBUILT=1 sh bench/gpu-check.sh build-gpu
# The build keeps this checkout's absolute path in its tests; the GPU
# machine's copy must be reachable under the same path (a symbolic link).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-gpu}
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
cd "$src"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=enabled -Dcudatoolkit="$cuda_root" -Dbuildtype=release \
    -Dmpi=disabled -Dstarpu=disabled -Ddocs=disabled
fi
ninja -C "$build" -j "${JOBS:-2}"
mkdir -p .gpu/libs
rm -f .gpu/libs/*
find "$build/tests" "$build/bench" "$build/examples" "$build/tools" -maxdepth 2 -type f -perm -u+x \
  | while read -r f; do ldd "$f" 2>/dev/null || true; done \
  | awk '/=> \//{print $3}' | sort -u \
  | grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+)\.so' \
  | while read -r l; do cp -L "$l" .gpu/libs/; done
tar cJf .gpu/libs.tar.xz -C .gpu/libs .
rm -rf .gpu/libs
ls -l .gpu/libs.tar.xz
