/* The examples' CUDA kernels (examples/kernels/kernels.cu) for the CUDA
 * driver emulator, so that the examples, benchmarks and tests that load
 * kernels.ptx compute for real against it.  Each runs every thread of the
 * launch, as the GPU would: a grid too small for n leaves elements
 * untouched, and an index past an allocation is an illegal address. */
#include <stdint.h>

#include "mzemu.h"

typedef unsigned long long u64;

/* y = a * x + y */
static CUresult k_saxpy(const mzemu_launch *l) {
  float a = MZEMU_PARAM(l, 0, float);
  u64 n = MZEMU_PARAM(l, 3, u64), t = MZEMU_THREADS_X(l), m = t < n ? t : n;
  const float *x = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), m * sizeof(float));
  float *y = mzemu_device_ptr(MZEMU_PARAM(l, 2, CUdeviceptr), m * sizeof(float));
  if (m && (!x || !y)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (u64 i = 0; i < m; i++) y[i] = a * x[i] + y[i];
  return CUDA_SUCCESS;
}

/* y = a * y */
static CUresult k_scale(const mzemu_launch *l) {
  float a = MZEMU_PARAM(l, 0, float);
  u64 n = MZEMU_PARAM(l, 2, u64), t = MZEMU_THREADS_X(l), m = t < n ? t : n;
  float *y = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), m * sizeof(float));
  if (m && !y) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (u64 i = 0; i < m; i++) y[i] = a * y[i];
  return CUDA_SUCCESS;
}

/* z = x + y */
static CUresult k_add(const mzemu_launch *l) {
  u64 n = MZEMU_PARAM(l, 3, u64), t = MZEMU_THREADS_X(l), m = t < n ? t : n;
  const float *x = mzemu_device_ptr(MZEMU_PARAM(l, 0, CUdeviceptr), m * sizeof(float));
  const float *y = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), m * sizeof(float));
  float *z = mzemu_device_ptr(MZEMU_PARAM(l, 2, CUdeviceptr), m * sizeof(float));
  if (m && (!x || !y || !z)) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (u64 i = 0; i < m; i++) z[i] = x[i] + y[i];
  return CUDA_SUCCESS;
}

/* y = y * y */
static CUresult k_square(const mzemu_launch *l) {
  u64 n = MZEMU_PARAM(l, 1, u64), t = MZEMU_THREADS_X(l), m = t < n ? t : n;
  float *y = mzemu_device_ptr(MZEMU_PARAM(l, 0, CUdeviceptr), m * sizeof(float));
  if (m && !y) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (u64 i = 0; i < m; i++) y[i] = y[i] * y[i];
  return CUDA_SUCCESS;
}

const struct mzemu_builtin {
  const char *name;
  mzemu_kernel_fn fn;
} mzemu_builtins[] = {
    {"saxpy", k_saxpy}, {"scale", k_scale}, {"add", k_add}, {"square", k_square}, {0, 0},
};
