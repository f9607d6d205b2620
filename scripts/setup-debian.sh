#!/usr/bin/env bash
# Install what maize needs to build, test and benchmark on Debian 12.
# Run as root (or through sudo).  Safe to run again.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# build: compiler, meson, ninja; libraries: hwloc (topology, pinning),
# the OpenCL ICD loader and headers; tests: Criterion, PoCL (a real OpenCL
# CPU device), clang for the sanitizer and fuzzing builds; benchmarks:
# OpenMP (libomp for clang, libgomp ships with gcc) and StarPU as peers.
apt-get install -y -qq --no-install-recommends \
  build-essential pkg-config meson ninja-build \
  libhwloc-dev hwloc \
  ocl-icd-opencl-dev opencl-headers ocl-icd-libopencl1 pocl-opencl-icd clinfo \
  libcriterion-dev \
  clang libclang-rt-dev libomp-dev \
  libstarpu-dev \
  python3 >/dev/null
echo "maize: dependencies installed"
