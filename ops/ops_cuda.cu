// The canned operations' own CUDA kernels: fill, the reductions, the
// random numbers, and the scaling after an inverse FFT.  BLAS ops go to
// cuBLAS and the FFT to cuFFT (ops_cublas.c, ops_cufft.c); these are the
// ops those libraries lack.
//
// maize embeds the PTX of this file (ops_cuda_ptx.c, checked in, made by
// gen-ptx.sh), so a build without nvcc still has it; the test
// `ops-ptx-fresh` regenerates it where nvcc exists and fails when the
// checked-in copy is stale.
//
// Parameters follow the op's parameter list in ops.c exactly (a buffer is
// its device pointer, a scalar its value); launches are 1-D over the
// written buffer's elements.  The reductions run on one thread, as their
// OpenCL C versions do: correct for any size, and meant for small results.
//
// The random numbers are Random123's Philox4x32-10 with the counter and key
// of ops.c, converted to floats with the same exact integer steps, so the
// uniform values and bits are the same on every device.
#include <Random123/philox.h>

typedef unsigned long long u64;

#define IDX() ((u64)blockIdx.x * blockDim.x + threadIdx.x)

__device__ static float mz_u01f(unsigned a) { return (float)(a >> 8) * 5.9604644775390625e-08f + 2.98023223876953125e-08f; }
__device__ static double mz_u01d(unsigned a, unsigned b) {
  u64 x = (((u64)a << 32) | b) >> 11;
  return (double)x * 1.1102230246251565e-16 + 5.5511151231257827e-17;
}
__device__ static philox4x32_ctr_t rng_at(u64 seed, u64 e) {
  philox4x32_ctr_t c = {{(unsigned)e, (unsigned)(e >> 32), 0, 0}};
  philox4x32_key_t k = {{(unsigned)seed, (unsigned)(seed >> 32)}};
  return philox4x32(c, k);
}

#define TYPED(T, S)                                                                                 \
  extern "C" __global__ void mz_fill_##S(T v, T *x, u64 n) {                                        \
    u64 i = IDX();                                                                                  \
    if (i < n) x[i] = v;                                                                            \
  }                                                                                                 \
  extern "C" __global__ void mz_scale_##S(T a, T *x, u64 n) {                                       \
    u64 i = IDX();                                                                                  \
    if (i < n) x[i] *= a;                                                                           \
  }                                                                                                 \
  extern "C" __global__ void mz_sum_##S(const T *x, T *r, u64 n) {                                  \
    if (IDX()) return;                                                                              \
    double s = 0; /* in double for f32 too, as on the CPU */                                        \
    for (u64 i = 0; i < n; i++) s += x[i];                                                          \
    r[0] = (T)s;                                                                                    \
  }                                                                                                 \
  extern "C" __global__ void mz_min_##S(const T *x, T *r, u64 n) {                                  \
    if (IDX()) return;                                                                              \
    T m = x[0];                                                                                     \
    for (u64 i = 1; i < n; i++) m = x[i] < m ? x[i] : m;                                            \
    r[0] = m;                                                                                       \
  }                                                                                                 \
  extern "C" __global__ void mz_max_##S(const T *x, T *r, u64 n) {                                  \
    if (IDX()) return;                                                                              \
    T m = x[0];                                                                                     \
    for (u64 i = 1; i < n; i++) m = x[i] > m ? x[i] : m;                                            \
    r[0] = m;                                                                                       \
  }
TYPED(float, f32)
TYPED(double, f64)

extern "C" __global__ void mz_rng_bits_u32(u64 seed, u64 off, unsigned *x, u64 n) {
  u64 i = IDX();
  if (i < n) x[i] = rng_at(seed, off + i).v[0];
}
extern "C" __global__ void mz_rng_uniform_f32(u64 seed, u64 off, float *x, u64 n) {
  u64 i = IDX();
  if (i < n) x[i] = mz_u01f(rng_at(seed, off + i).v[0]);
}
extern "C" __global__ void mz_rng_uniform_f64(u64 seed, u64 off, double *x, u64 n) {
  u64 i = IDX();
  if (i >= n) return;
  philox4x32_ctr_t r = rng_at(seed, off + i);
  x[i] = mz_u01d(r.v[0], r.v[1]);
}
extern "C" __global__ void mz_rng_normal_f32(u64 seed, u64 off, float *x, u64 n) {
  u64 i = IDX();
  if (i >= n) return;
  philox4x32_ctr_t r = rng_at(seed, off + i);
  x[i] = sqrtf(-2.0f * logf(mz_u01f(r.v[0]))) * cosf(6.2831853071795865f * mz_u01f(r.v[1]));
}
extern "C" __global__ void mz_rng_normal_f64(u64 seed, u64 off, double *x, u64 n) {
  u64 i = IDX();
  if (i >= n) return;
  philox4x32_ctr_t r = rng_at(seed, off + i);
  x[i] = sqrt(-2.0 * log(mz_u01d(r.v[0], r.v[1]))) * cos(6.283185307179586 * mz_u01d(r.v[2], r.v[3]));
}
