#!/bin/sh
# Whether ops/ops_cuda_ptx.c is what ops/gen-ptx.sh makes from
# ops/ops_cuda.cu now: check-ptx.sh NVCC RANDOM123_INCLUDE SRCDIR TMPDIR
# (the test ops-ptx-fresh, where nvcc exists).  Comment lines are left out
# of the comparison, as they name nvcc's release.  On a difference,
# regenerate: ops/gen-ptx.sh NVCC /usr/include ops/ops_cuda.cu ops/ops_cuda_ptx.c
set -eu
nvcc=$1 r123=$2 src=$3 tmp=$4
mkdir -p "$tmp"
"$src/ops/gen-ptx.sh" "$nvcc" "$r123" "$src/ops/ops_cuda.cu" "$tmp/ops_cuda_ptx.c"
grep -v '^    "//' "$tmp/ops_cuda_ptx.c" > "$tmp/new"
grep -v '^    "//' "$src/ops/ops_cuda_ptx.c" > "$tmp/old"
if ! cmp -s "$tmp/old" "$tmp/new"; then
  diff "$tmp/old" "$tmp/new" | head -20
  echo "ops/ops_cuda_ptx.c is stale: regenerate it with ops/gen-ptx.sh" >&2
  exit 1
fi
