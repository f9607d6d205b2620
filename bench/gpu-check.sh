#!/bin/sh
# bench/gpu-check.sh: everything CUDA, in one command, on a GPU machine.
#
# Configures and builds maize with the CUDA backend required
# (-Dcuda=enabled, release build), prints the device and driver, runs the
# CUDA tests (which must not skip here), the fault cases on CUDA 48 times
# (races that only a real driver's threads show), every other suite, the
# CUDA benchmarks, the core's own benchmarks (OpenCL chain, dispatch, METG:
# a lent machine is quieter and wider than the 2-core ones), the examples
# that use CUDA and the main job, and writes a summary for
# docs/gpu-results.md.
#
# Usage: bench/gpu-check.sh [BUILD_DIR]      (default: build-gpu)
# Env:   CUDA_ROOT (default /usr/local/cuda), JOBS (ninja -j, default nproc)
#        MZ_GPU_PREBUILT=1: BUILD_DIR was configured and built elsewhere
#        (a lent GPU machine has no hwloc or Criterion to build with, and no
#        network); it is used as it is and the suites run without meson.
#        scripts/gpu-pack.sh makes such a build and the libraries it needs.
# Output: BUILD_DIR/gpu-check/{summary.md,*.log}; exits non-zero when a
#         build or a test fails, or when no GPU is visible.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-gpu}
case $build in /*) ;; *) build=$src/$build ;; esac
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
out=$build/gpu-check
status=0

say() { printf '%s\n' "$*"; }
step() { say ""; say "== $*"; }

step "device and driver"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "gpu-check: no NVIDIA GPU is visible (nvidia-smi missing or failing); nothing to check."
  exit 1
fi
nvidia-smi
gpus=$(nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version,compute_cap \
  --format=csv,noheader 2>/dev/null)
say "$gpus"

# cuBLAS and cuFFT are loaded at run time by name; on machines where they
# come with a Python wheel rather than the toolkit, put their folder on the
# library path so the canned ops find them.
for lib in libcublas.so libcufft.so; do
  ldconfig -p 2>/dev/null | grep -q "$lib" && continue
  dir=$(find "$cuda_root/lib64" "$cuda_root/targets" /usr/local/lib /usr/lib /opt -name "$lib*" 2>/dev/null \
        | head -n 1 | xargs -r dirname)
  [ -n "$dir" ] && LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} && say "found $lib in $dir"
done
export LD_LIBRARY_PATH

mkdir -p "$out"
if [ "${MZ_GPU_PREBUILT:-0}" = 1 ]; then
  step "prebuilt build ($build)"
  [ -x "$build/tests/test_cuda" ] || { say "no $build/tests/test_cuda: build it first"; exit 1; }
elif true; then
step "configure and build ($build)"
mkdir -p "$build"
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" -Dcuda=enabled -Dcudatoolkit="$cuda_root" -Dbuildtype=release || exit 1
else
  meson setup "$build" "$src" -Dcuda=enabled -Dcudatoolkit="$cuda_root" -Dbuildtype=release || exit 1
fi
mkdir -p "$out"
ninja -C "$build" -j "$jobs" > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
fi
grep -q '#define MZ_HAVE_CUDA 1' "$build/mz_config.h" || { say "MZ_HAVE_CUDA is not 1"; exit 1; }

step "devices maize finds"
"$build/tools/maize-info/maize-info" 2>&1 | tee "$out/maize-info.log"

step "CUDA tests"
# Criterion's verbose output names every test, so a skip cannot hide.
MZ_QUIET=1 timeout 300 "$build/tests/test_cuda" --verbose --jobs=1 > "$out/tests.log" 2>&1
trc=$?
cat "$out/tests.log"
[ $trc -eq 0 ] || status=1
# A skip is a failure here, except a test that also needs an OpenCL
# device when the machine has no OpenCL platform (PoCL is not carried).
if grep 'SKIP' "$out/tests.log" | grep -v 'OpenCL needs PoCL' | grep -q .; then
  say "gpu-check: some CUDA tests skipped on a GPU machine: that is a failure here."
  status=1
fi

step "races only a real driver shows: the fault cases on CUDA, 48 runs, 8 at a time"
# A real driver runs host functions on its own threads and makes cuMemFree
# wait for them; the emulator orders things its own way.  The four injected
# fault kinds on one runtime once hung here (a free under a lock that the
# completion callback takes), in 8 of 48 runs: repeat them under load.
ok=0
bad=0
for round in 1 2 3 4 5 6; do
  pids=
  for j in 1 2 3 4 5 6 7 8; do
    MZ_QUIET=1 MZ_PERFMODEL_DIR=off MZ_WATCHDOG_S=5 timeout 60 "$build/tests/test_faults" --jobs=1 \
      --filter 'faults/each_kind_cuda*' > "$out/race-$j.log" 2>&1 &
    pids="$pids $!"
  done
  wait $pids
  for j in 1 2 3 4 5 6 7 8; do
    if grep -q 'Failing: 0 | Crashing: 0' "$out/race-$j.log" && ! grep -q 'Tested: 0' "$out/race-$j.log"; then
      ok=$((ok + 1))
    else
      bad=$((bad + 1))
      cat "$out/race-$j.log" >> "$out/races.log"
    fi
  done
done
rm -f "$out"/race-*.log
say "fault cases on CUDA: $ok passed, $bad failed (failures in $out/races.log)"
[ $bad -eq 0 ] || status=1

step "the whole test suite"
if [ "${MZ_GPU_PREBUILT:-0}" = 1 ]; then
  # Without meson: each Criterion suite with the environment meson gives it
  # (tests/meson.build), several at once; MPI is left to the MPI machines.
  : > "$out/meson-test.log"
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case $t in *test_mpi|*test_cuda) continue ;; esac
    echo "$t"
  done | xargs -P "$jobs" -I{} sh -c 'cd "$(dirname {})" && log=$(mktemp) &&
      if MZ_QUIET=1 POCL_DEVICES="pthread pthread" MZ_PERFMODEL_DIR="$PWD/perfmodels" timeout 300 {} --jobs=1 > "$log" 2>&1;
      then echo "OK   $(basename {}) $(grep -E "Synthesis" "$log")"; else echo "FAIL $(basename {})"; cat "$log"; fi; rm -f "$log"' \
    >> "$out/meson-test.log" 2>&1
  grep -q '^FAIL' "$out/meson-test.log" && status=1
  grep -E '^(OK|FAIL)' "$out/meson-test.log"
else
  meson test -C "$build" --print-errorlogs > "$out/meson-test.log" 2>&1 || status=1
  tail -n 25 "$out/meson-test.log"
fi

step "CUDA benchmarks"
"$build/bench/mz-bench-cuda-chain" > "$out/cuda-chain.log" 2>&1 || status=1
cat "$out/cuda-chain.log"
for b in "$build"/bench/mz-bench-hetero* "$build"/bench/mz-bench-cuda-* "$build"/bench/mz-bench-ops-gemm; do
  [ -x "$b" ] && [ -f "$b" ] || continue
  case $b in *cuda-chain) continue ;; esac
  say "-- $(basename "$b")"
  timeout 300 "$b" > "$out/$(basename "$b").log" 2>&1 || status=1
  cat "$out/$(basename "$b").log"
done

step "the core's figures on a quiet many-core machine (OpenCL chain on PoCL, dispatch, METG)"
# Not CUDA, but a lent machine is quieter and wider than the 2-core ones
# the project is built on, so its figures for the core's targets are worth
# having beside the GPU's.
for b in mz-bench-opencl-chain mz-bench-overhead; do
  [ -x "$build/bench/$b" ] || continue
  say "-- $b"
  case $b in
    mz-bench-overhead) args="-n 100000 -r 5" ;;
    *) args="" ;;
  esac
  # shellcheck disable=SC2086
  MZ_QUIET=1 POCL_DEVICES="pthread" timeout 300 "$build/bench/$b" $args > "$out/$b.log" 2>&1 || status=1
  grep '^BENCH' "$out/$b.log"
done
if [ -x "$build/bench/maize-bench/maize-bench" ]; then
  say "-- maize-bench metg stencil_1d"
  mkdir -p "$out/metg"
  MZ_QUIET=1 timeout 300 "$build/bench/maize-bench/maize-bench" metg --pattern stencil_1d --steps 500 -r 3 \
    --outdir "$out/metg" > "$out/metg.log" 2>&1 || status=1
  grep '^BENCH' "$out/metg.log"
fi

step "examples on CUDA (multi-stream, CPU + GPU)"
for ex in saxpy pipeline; do
  [ -x "$build/examples/$ex" ] || continue
  for devs in "cuda:0" "cpu,cuda"; do
    say "-- MZ_DEVICES=$devs $ex"
    MZ_DEVICES=$devs MZ_CUDA_STREAMS=4 timeout 120 "$build/examples/$ex" > "$out/$ex-$(echo "$devs" | tr ':,' '__').log" 2>&1 \
      || status=1
    tail -n 5 "$out/$ex-$(echo "$devs" | tr ':,' '__').log"
  done
done

step "the main job: maize-bench pipeline on the devices found, every policy"
timeout 240 "$build/bench/maize-bench/maize-bench" pipeline --outdir "$out/pipeline" \
  > "$out/maize-bench-pipeline.log" 2>&1 || status=1
cat "$out/maize-bench-pipeline.log"

step "summary ($out/summary.md)"
{
  say "## $(date -u +%Y-%m-%d) on $(hostname)"
  say ""
  say "- GPU(s): $(echo "$gpus" | tr '\n' ';')"
  say "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)," \
      "CUDA toolkit: $("$cuda_root/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  say "- maize: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo 'no commit'), build: release"
  say "- CUDA tests: $(grep -E '^\[====\] Synthesis' "$out/tests.log" | sed 's/^\[====\] //')"
  say "- fault cases on CUDA, 48 runs, 8 at a time: $ok passed, $bad failed"
  say "- other suites: $(grep -c '^OK' "$out/meson-test.log" 2>/dev/null) OK, $(grep -c '^FAIL' "$out/meson-test.log" 2>/dev/null) FAIL $(grep '^FAIL' "$out/meson-test.log" 2>/dev/null | tr '\n' ' ')"
  say ""
  say '```'
  grep '^BENCH' "$out"/*.log | sed 's/^[^:]*://'
  say '```'
  say ""
  say "status: $([ $status -eq 0 ] && echo pass || echo FAIL)"
} > "$out/summary.md"
cat "$out/summary.md"
say ""
say "Paste $out/summary.md into docs/gpu-results.md."
exit $status
