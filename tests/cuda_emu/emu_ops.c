/* The canned operations' own CUDA kernels (ops/ops_cuda.cu) for the CUDA
 * driver emulator: the same computations in C, one per PTX entry, so that
 * maize's canned ops run on the emulated device as they would on a GPU.
 * Like every emulator kernel they compute over the launch's threads: a
 * grid too small leaves elements untouched.  The random numbers use the
 * same Random123 Philox counter, key and conversions as ops.c. */
#include <math.h>
#include <stdint.h>

#include "mzemu.h"
#include "mz_config.h"
#if MZ_HAVE_RANDOM123
#include <Random123/philox.h>
#endif

typedef unsigned long long u64;

/* The first min(threads, n) elements: what the grid covers. */
static u64 covered(const mzemu_launch *l, u64 n) {
  u64 t = MZEMU_THREADS_X(l);
  return t < n ? t : n;
}

#define TYPED(T, S)                                                                                   \
  static CUresult fill_##S(const mzemu_launch *l) {                                                  \
    T v = MZEMU_PARAM(l, 0, T);                                                                       \
    u64 m = covered(l, MZEMU_PARAM(l, 2, u64));                                                       \
    T *x = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), m * sizeof(T));                           \
    if (m && !x) return CUDA_ERROR_ILLEGAL_ADDRESS;                                                   \
    for (u64 i = 0; i < m; i++) x[i] = v;                                                             \
    return CUDA_SUCCESS;                                                                              \
  }                                                                                                   \
  static CUresult scale_##S(const mzemu_launch *l) {                                                 \
    T a = MZEMU_PARAM(l, 0, T);                                                                       \
    u64 m = covered(l, MZEMU_PARAM(l, 2, u64));                                                       \
    T *x = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), m * sizeof(T));                           \
    if (m && !x) return CUDA_ERROR_ILLEGAL_ADDRESS;                                                   \
    for (u64 i = 0; i < m; i++) x[i] *= a;                                                            \
    return CUDA_SUCCESS;                                                                              \
  }                                                                                                   \
  /* kind: 0 sum, 1 min, 2 max; one thread does it all, as in the PTX. */                           \
  static CUresult reduce_##S(const mzemu_launch *l, int kind) {                                      \
    u64 n = MZEMU_PARAM(l, 2, u64);                                                                   \
    if (MZEMU_THREADS_X(l) == 0) return CUDA_SUCCESS;                                                   \
    const T *x = mzemu_device_ptr(MZEMU_PARAM(l, 0, CUdeviceptr), n * sizeof(T));                     \
    T *r = mzemu_device_ptr(MZEMU_PARAM(l, 1, CUdeviceptr), sizeof(T));                               \
    if ((n && !x) || !r) return CUDA_ERROR_ILLEGAL_ADDRESS;                                           \
    if (kind == 0) {                                                                                  \
      double s = 0;                                                                                   \
      for (u64 i = 0; i < n; i++) s += x[i];                                                          \
      r[0] = (T)s;                                                                                    \
    } else {                                                                                          \
      T m = x[0];                                                                                     \
      for (u64 i = 1; i < n; i++) m = kind == 1 ? (x[i] < m ? x[i] : m) : (x[i] > m ? x[i] : m);      \
      r[0] = m;                                                                                       \
    }                                                                                                 \
    return CUDA_SUCCESS;                                                                              \
  }                                                                                                   \
  static CUresult sum_##S(const mzemu_launch *l) { return reduce_##S(l, 0); }                        \
  static CUresult min_##S(const mzemu_launch *l) { return reduce_##S(l, 1); }                        \
  static CUresult max_##S(const mzemu_launch *l) { return reduce_##S(l, 2); }
TYPED(float, f32)
TYPED(double, f64)

#if MZ_HAVE_RANDOM123
static float u01f(uint32_t a) { return (float)(a >> 8) * 5.9604644775390625e-08f + 2.98023223876953125e-08f; }
static double u01d(uint32_t a, uint32_t b) {
  u64 x = (((u64)a << 32) | b) >> 11;
  return (double)x * 1.1102230246251565e-16 + 5.5511151231257827e-17;
}
static philox4x32_ctr_t rng_at(u64 seed, u64 e) {
  philox4x32_ctr_t c = {{(uint32_t)e, (uint32_t)(e >> 32), 0, 0}};
  philox4x32_key_t k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
  return philox4x32(c, k);
}

/* what: 0 bits, 1 uniform, 2 normal; es: the element size. */
static CUresult rng(const mzemu_launch *l, int what, size_t es) {
  u64 seed = MZEMU_PARAM(l, 0, u64), off = MZEMU_PARAM(l, 1, u64), m = covered(l, MZEMU_PARAM(l, 3, u64));
  void *x = mzemu_device_ptr(MZEMU_PARAM(l, 2, CUdeviceptr), m * es);
  if (m && !x) return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (u64 i = 0; i < m; i++) {
    philox4x32_ctr_t r = rng_at(seed, off + i);
    if (what == 0) ((uint32_t *)x)[i] = r.v[0];
    else if (es == 4 && what == 1) ((float *)x)[i] = u01f(r.v[0]);
    else if (es == 4) ((float *)x)[i] = sqrtf(-2.0f * logf(u01f(r.v[0]))) * cosf(6.2831853071795865f * u01f(r.v[1]));
    else if (what == 1) ((double *)x)[i] = u01d(r.v[0], r.v[1]);
    else ((double *)x)[i] = sqrt(-2.0 * log(u01d(r.v[0], r.v[1]))) * cos(6.283185307179586 * u01d(r.v[2], r.v[3]));
  }
  return CUDA_SUCCESS;
}
static CUresult rng_bits_u32(const mzemu_launch *l) { return rng(l, 0, 4); }
static CUresult rng_uniform_f32(const mzemu_launch *l) { return rng(l, 1, 4); }
static CUresult rng_uniform_f64(const mzemu_launch *l) { return rng(l, 1, 8); }
static CUresult rng_normal_f32(const mzemu_launch *l) { return rng(l, 2, 4); }
static CUresult rng_normal_f64(const mzemu_launch *l) { return rng(l, 2, 8); }
#define RNG_ENTRIES                                                                                       \
  {"mz_rng_bits_u32", rng_bits_u32}, {"mz_rng_uniform_f32", rng_uniform_f32},                               \
      {"mz_rng_uniform_f64", rng_uniform_f64}, {"mz_rng_normal_f32", rng_normal_f32},                       \
      {"mz_rng_normal_f64", rng_normal_f64},
#else
#define RNG_ENTRIES
#endif

const struct mzemu_builtin {
  const char *name;
  mzemu_kernel_fn fn;
} mzemu_op_builtins[] = {
    {"mz_fill_f32", fill_f32}, {"mz_fill_f64", fill_f64}, {"mz_scale_f32", scale_f32}, {"mz_scale_f64", scale_f64},
    {"mz_sum_f32", sum_f32},   {"mz_sum_f64", sum_f64},   {"mz_min_f32", min_f32},     {"mz_min_f64", min_f64},
    {"mz_max_f32", max_f32},   {"mz_max_f64", max_f64},   RNG_ENTRIES{0, 0},
};
