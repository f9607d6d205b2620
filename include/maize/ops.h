/* maize: canned operations.
 *
 * Built-in graph builders for the common numerical operations, run on the
 * field's libraries: OpenBLAS on the CPU, CLBlast on OpenCL devices, FFTW
 * on the CPU and clFFT on OpenCL devices for Fourier transforms, and
 * Random123's Philox for random numbers.  (CUDA devices run none of them
 * yet: cuBLAS and cuFFT are not loaded.)  Each builder adds one apply node
 * to the graph, like mz_apply() with a kernel maize provides, so canned ops
 * compose with the combinators, take part in buffer hazards, and are placed
 * by any policy.  Each returns the op whose result is the buffer it writes
 * (unzipped already), or the graph's error op on failure (the error is kept
 * on the graph, as every builder does).
 *
 * Arguments are ops whose result is a buffer: mz_value(), a partition tile,
 * or a buffer another node wrote.  Element types: f32 or f64 (u32 too for
 * mz_op_rng); all buffers of one call have the same type.  A wrong type or
 * size gives MZ_ESHAPE.  Matrices are row-major: dims[0] is the number of
 * columns, dims[1] the number of rows.
 *
 * Which device can run an op depends on the libraries maize was built with
 * (meson features openblas, clblast, fftw, clfft, random123).  An op with no
 * implementation at all fails at build time with MZ_ENODEV and a message
 * naming the missing libraries; one that only some device kinds can run is
 * placed there by the policy. */
#ifndef MAIZE_OPS_H
#define MAIZE_OPS_H

#include <stdint.h>

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

typedef enum mz_transpose { MZ_NO_TRANS = 0, MZ_TRANS = 1 } mz_transpose;

typedef enum mz_reduce_kind { MZ_REDUCE_SUM = 0, MZ_REDUCE_MIN, MZ_REDUCE_MAX } mz_reduce_kind;

typedef enum mz_rng_dist {
  MZ_RNG_UNIFORM = 0, /* f32/f64 in (0, 1) */
  MZ_RNG_NORMAL,      /* f32/f64, mean 0, deviation 1 (Box-Muller) */
  MZ_RNG_BITS,        /* u32: the generator's raw output */
} mz_rng_dist;

/* x[i] = value for every element (value converted to x's type). */
mz_op *mz_op_fill(mz_graph *g, mz_op *x, double value);
/* y = x (same type and element count).  Result: y. */
mz_op *mz_op_copy(mz_graph *g, mz_op *x, mz_op *y);
/* x = alpha * x.  Result: x. */
mz_op *mz_op_scal(mz_graph *g, double alpha, mz_op *x);
/* y = alpha * x + y.  Result: y. */
mz_op *mz_op_axpy(mz_graph *g, double alpha, mz_op *x, mz_op *y);
/* result[0] = sum of x[i] * y[i]; result has at least one element.  Result: result. */
mz_op *mz_op_dot(mz_graph *g, mz_op *x, mz_op *y, mz_op *result);
/* result[0] = the sum, minimum or maximum of x.  Result: result. */
mz_op *mz_op_reduce(mz_graph *g, mz_reduce_kind kind, mz_op *x, mz_op *result);
/* C = alpha * op(A) * op(B) + beta * C, op(X) = X or its transpose.  C is
 * m x n (dims {n, m}); op(A) is m x k, op(B) k x n.  Result: C. */
mz_op *mz_op_gemm(mz_graph *g, mz_transpose ta, mz_transpose tb, double alpha, mz_op *A, mz_op *B, double beta,
                  mz_op *C);
/* Fill buf with random numbers from Philox4x32-10 keyed by seed.  Element
 * i of the whole buffer (a tile counts from its offset in its parent)
 * depends only on (seed, i): the same bits on every device and for any
 * tiling for MZ_RNG_UNIFORM and MZ_RNG_BITS; MZ_RNG_NORMAL goes through
 * log, sqrt and cos, whose last bit may differ between the CPU's libm and
 * an OpenCL device.  Result: buf. */
mz_op *mz_op_rng(mz_graph *g, mz_op *buf, uint64_t seed, mz_rng_dist dist);

typedef enum mz_fft_direction { MZ_FFT_FORWARD = -1, MZ_FFT_INVERSE = 1 } mz_fft_direction;

/* y = the discrete Fourier transform of x, out of place.  x and y are f32
 * or f64 buffers of the same shape holding interleaved complex numbers
 * (real, imaginary): a row of dims[0] elements is dims[0] / 2 complex
 * numbers, so dims[0] must be even.  rank 1: one transform of length
 * dims[0] / 2 per row (dims[1] * dims[2] of them); rank 2: one transform
 * of dims[1] rows x dims[0] / 2 columns per plane (dims[2] of them).
 * Forward: y[k] = sum_j x[j] exp(-2 pi i jk / N).  Inverse: exp(+...) and
 * scaled by 1 / N (N the points of one transform), so that the inverse of
 * the forward transform gives x back.  x and y must not overlap
 * (MZ_EINVAL).  On OpenCL (clFFT) the lengths must have no prime factor
 * above 13, else the node fails when it runs; FFTW takes any length.
 * Result: y. */
mz_op *mz_op_fft(mz_graph *g, unsigned rank, mz_fft_direction dir, mz_op *x, mz_op *y);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
