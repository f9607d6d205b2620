#!/bin/sh
# Generate kernels.ptx from kernels.cu: gen-ptx.sh NVCC INPUT OUTPUT
#
# nvcc writes the PTX ISA version of its own release (9.0 for CUDA 13),
# which a driver older than that release refuses to JIT
# (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).  These kernels use only
# instructions that PTX ISA 7.0 (CUDA 11.0, the first with sm_80) has, so
# the ".version" line is lowered to 7.0: the PTX then loads on every driver
# since CUDA 11.0, on compute capability 8.0 and later (A100, H100, H200).
set -eu
nvcc=$1 in=$2 out=$3
"$nvcc" -ptx -arch=compute_80 "$in" -o "$out.tmp"
sed 's/^\.version [0-9][0-9.]*$/.version 7.0/' "$out.tmp" > "$out"
rm -f "$out.tmp"
grep -q '^\.version 7\.0$' "$out"
