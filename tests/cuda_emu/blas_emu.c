/* Test doubles of cuBLAS and cuFFT for the CUDA driver emulator.
 *
 * libmzcublasemu.so and libmzcufftemu.so export the cuBLAS and cuFFT entry
 * points maize loads (devices/cuda/cuda_libs.h), under the same versioned
 * names, so that the canned ops' CUDA code runs unchanged on the emulated
 * device when MZ_CUBLAS_LIBRARY and MZ_CUFFT_LIBRARY name them.  Like the
 * emulator they stand in for absent hardware: built only for the tests,
 * never installed.  One source makes both (MZEMU_CUFFT picks the FFT).
 *
 * They behave as the libraries do where maize depends on it: a handle or a
 * plan belongs to the context current at its creation; every call is
 * asynchronous, enqueued on the stream set with cublasSetStream or
 * cufftSetStream (as an emulated kernel launch, so it runs in stream order,
 * faults on a bad device pointer, and is counted as a launch); cuBLAS is
 * column-major with its pointer modes (alpha on the host or the device,
 * dot's result on the host or the device); cuFFT's inverse is unscaled.
 * The numbers are plain loops (a naive DFT), in double precision.
 *
 * Threads: a handle or plan is used by one thread at a time, as the real
 * libraries require; the plan table has its own lock. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mzemu.h"

#define EXPORT __attribute__((visibility("default")))
#define NPARAM 16
typedef unsigned long long u64;

/* One entry with NPARAM u64 parameters; its C body is call_kernel. */
static const char ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry MZEMU_ENTRY(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3, .param .u64 p4,"
    " .param .u64 p5, .param .u64 p6, .param .u64 p7, .param .u64 p8, .param .u64 p9, .param .u64 p10,"
    " .param .u64 p11, .param .u64 p12, .param .u64 p13, .param .u64 p14, .param .u64 p15)\n{\n\tret;\n}\n";

__attribute__((unused)) static u64 dbits(double v) {
  u64 b;
  memcpy(&b, &v, sizeof b);
  return b;
}
__attribute__((unused)) static double bitsd(u64 b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}
#define P(i) MZEMU_PARAM(l, i, u64)

/* The module for the current context, and its one function. */
struct lib_ctx {
  CUmodule mod;
  CUfunction fn;
};

static CUresult kernel_load(struct lib_ctx *c, const char *entry, mzemu_kernel_fn body) {
  if (mzemu_register_kernel(entry, body) < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  char text[sizeof ptx + 32];
  const char *at = strstr(ptx, "MZEMU_ENTRY");
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - ptx), ptx, entry, at + strlen("MZEMU_ENTRY"));
  CUresult r = cuModuleLoadDataEx(&c->mod, text, 0, NULL, NULL);
  if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&c->fn, c->mod, entry);
  return r;
}

/* Enqueue one call: the values in p[0..NPARAM). */
static CUresult launch(const struct lib_ctx *c, CUstream st, u64 p[NPARAM]) {
  void *params[NPARAM];
  for (unsigned i = 0; i < NPARAM; i++) params[i] = &p[i];
  return cuLaunchKernel(c->fn, 1, 1, 1, 1, 1, 1, 0, st, params, NULL);
}

#ifndef MZEMU_CUFFT
/* ------------------------------------------------------------------ */
/* cuBLAS                                                              */
/* ------------------------------------------------------------------ */
#include <cublas_v2.h>

struct cublasContext {
  struct lib_ctx k;
  CUstream stream;
  cublasPointerMode_t mode;
};

enum { B_GEMM, B_COPY, B_SCAL, B_AXPY, B_DOT };

/* The host view of a strided vector of n elements of es bytes at p. */
static void *vec(u64 p, u64 n, u64 inc, size_t es) { return n ? mzemu_device_ptr(p, ((n - 1) * inc + 1) * es) : (void *)1; }

/* p: op, f64, then the op's values (see each call below). */
static CUresult blas_kernel(const mzemu_launch *l) {
  int op = (int)P(0);
  bool f64 = P(1) != 0;
  size_t es = f64 ? 8 : 4;
#define AT(ptr, i) (f64 ? ((double *)(ptr))[i] : (double)((float *)(ptr))[i])
#define PUT(ptr, i, v) (f64 ? (void)(((double *)(ptr))[i] = (v)) : (void)(((float *)(ptr))[i] = (float)(v)))
  if (op == B_GEMM) {
    /* ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc: column-major */
    bool ta = P(2), tb = P(3);
    u64 m = P(4), n = P(5), k = P(6), lda = P(8), ldb = P(10), ldc = P(13);
    double alpha = bitsd(P(7)), beta = bitsd(P(12));
    u64 ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    void *A = ac && ar ? mzemu_device_ptr(P(9), ((ac - 1) * lda + ar) * es) : (void *)1;
    void *B = bc && br ? mzemu_device_ptr(P(11), ((bc - 1) * ldb + br) * es) : (void *)1;
    void *C = n && m ? mzemu_device_ptr(P(14), ((n - 1) * ldc + m) * es) : (void *)1;
    if (!A || !B || !C || lda < ar || ldb < br || ldc < m) return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (u64 j = 0; j < n; j++)
      for (u64 i = 0; i < m; i++) {
        double s = 0;
        for (u64 q = 0; q < k; q++)
          s += AT(A, ta ? i * lda + q : q * lda + i) * AT(B, tb ? q * ldb + j : j * ldb + q);
        double c = beta == 0 ? 0 : beta * AT(C, j * ldc + i);
        PUT(C, j * ldc + i, alpha * s + c);
      }
    return CUDA_SUCCESS;
  }
  /* n, alpha (value or device pointer), alpha on the device, x, incx, y, incy, result, result on the device */
  u64 n = P(2), incx = P(5), incy = P(7);
  void *x = vec(P(4), n, incx, es), *y = op == B_SCAL ? (void *)1 : vec(P(6), n, incy, es);
  if (!x || !y) return CUDA_ERROR_ILLEGAL_ADDRESS;
  double alpha = 0;
  if (op == B_SCAL || op == B_AXPY) {
    if (P(10)) {
      void *a = mzemu_device_ptr(P(3), es);
      if (!a) return CUDA_ERROR_ILLEGAL_ADDRESS;
      alpha = AT(a, 0);
    } else {
      alpha = bitsd(P(3));
    }
  }
  switch (op) {
  case B_COPY:
    for (u64 i = 0; i < n; i++) PUT(y, i * incy, AT(x, i * incx));
    break;
  case B_SCAL:
    for (u64 i = 0; i < n; i++) PUT(x, i * incx, alpha * AT(x, i * incx));
    break;
  case B_AXPY:
    for (u64 i = 0; i < n; i++) PUT(y, i * incy, alpha * AT(x, i * incx) + AT(y, i * incy));
    break;
  case B_DOT: {
    double s = 0;
    for (u64 i = 0; i < n; i++) s += AT(x, i * incx) * AT(y, i * incy);
    /* host pointer mode: the result was given as a host address */
    void *r = P(9) ? mzemu_device_ptr(P(8), es) : (void *)(uintptr_t)P(8);
    if (!r) return CUDA_ERROR_ILLEGAL_ADDRESS;
    PUT(r, 0, s);
    break;
  }
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
#undef AT
#undef PUT
}

static cublasStatus_t st_of(CUresult r) {
  if (r == CUDA_SUCCESS) return CUBLAS_STATUS_SUCCESS;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return CUBLAS_STATUS_ALLOC_FAILED;
  if (r == CUDA_ERROR_INVALID_CONTEXT) return CUBLAS_STATUS_NOT_INITIALIZED;
  return CUBLAS_STATUS_EXECUTION_FAILED;
}

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  struct cublasContext *h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  CUresult r = kernel_load(&h->k, "mzemu_cublas", blas_kernel);
  if (r != CUDA_SUCCESS) {
    if (h->k.mod) cuModuleUnload(h->k.mod);
    free(h);
    return st_of(r);
  }
  h->mode = CUBLAS_POINTER_MODE_HOST;
  *out = h;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  /* cuModuleUnload waits for the handle's launches, as cublasDestroy
   * synchronizes. */
  CUresult r = cuModuleUnload(h->k.mod);
  free(h);
  return st_of(r);
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = (CUstream)s;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  h->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm(cublasHandle_t h, bool f64, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const void *alpha, const void *A, int lda, const void *B, int ldb, const void *beta, void *C,
                           int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (h->mode != CUBLAS_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED; /* not needed by maize */
  double a = f64 ? *(const double *)alpha : *(const float *)alpha, b = f64 ? *(const double *)beta : *(const float *)beta;
  u64 p[NPARAM] = {B_GEMM, f64, ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, (u64)m, (u64)n, (u64)k, dbits(a),
                   (u64)lda, (u64)(uintptr_t)A, (u64)ldb, (u64)(uintptr_t)B, dbits(b), (u64)ldc, (u64)(uintptr_t)C};
  return st_of(launch(&h->k, h->stream, p));
}

EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                     const float *alpha, const float *A, int lda, const float *B, int ldb,
                                     const float *beta, float *C, int ldc) {
  return gemm(h, false, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                     const double *alpha, const double *A, int lda, const double *B, int ldb,
                                     const double *beta, double *C, int ldc) {
  return gemm(h, true, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The level-1 calls: p = op, f64, n, alpha, x, incx, y, incy, result, result on device, alpha on device. */
static cublasStatus_t level1(cublasHandle_t h, int op, bool f64, int n, const void *alpha, const void *x, int incx,
                             const void *y, int incy, void *result) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || incx <= 0 || (op != B_SCAL && incy <= 0)) return CUBLAS_STATUS_INVALID_VALUE;
  bool dev = h->mode == CUBLAS_POINTER_MODE_DEVICE;
  u64 a = 0;
  if (alpha) a = dev ? (u64)(uintptr_t)alpha : dbits(f64 ? *(const double *)alpha : *(const float *)alpha);
  u64 p[NPARAM] = {(u64)op, f64, (u64)n, a, (u64)(uintptr_t)x, (u64)incx, (u64)(uintptr_t)y, (u64)incy,
                   (u64)(uintptr_t)result, dev, dev};
  CUresult r = launch(&h->k, h->stream, p);
  /* With the result on the host, cuBLAS returns once it is there. */
  if (r == CUDA_SUCCESS && op == B_DOT && !dev) r = cuStreamSynchronize(h->stream);
  return st_of(r);
}

EXPORT cublasStatus_t cublasScopy_v2(cublasHandle_t h, int n, const float *x, int incx, float *y, int incy) {
  return level1(h, B_COPY, false, n, NULL, x, incx, y, incy, NULL);
}
EXPORT cublasStatus_t cublasDcopy_v2(cublasHandle_t h, int n, const double *x, int incx, double *y, int incy) {
  return level1(h, B_COPY, true, n, NULL, x, incx, y, incy, NULL);
}
EXPORT cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x, int incx) {
  return level1(h, B_SCAL, false, n, alpha, x, incx, NULL, 1, NULL);
}
EXPORT cublasStatus_t cublasDscal_v2(cublasHandle_t h, int n, const double *alpha, double *x, int incx) {
  return level1(h, B_SCAL, true, n, alpha, x, incx, NULL, 1, NULL);
}
EXPORT cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float *alpha, const float *x, int incx, float *y,
                                     int incy) {
  return level1(h, B_AXPY, false, n, alpha, x, incx, y, incy, NULL);
}
EXPORT cublasStatus_t cublasDaxpy_v2(cublasHandle_t h, int n, const double *alpha, const double *x, int incx,
                                     double *y, int incy) {
  return level1(h, B_AXPY, true, n, alpha, x, incx, y, incy, NULL);
}
EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float *x, int incx, const float *y, int incy,
                                    float *result) {
  return level1(h, B_DOT, false, n, NULL, x, incx, y, incy, result);
}
EXPORT cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double *x, int incx, const double *y, int incy,
                                    double *result) {
  return level1(h, B_DOT, true, n, NULL, x, incx, y, incy, result);
}

#else
/* ------------------------------------------------------------------ */
/* cuFFT                                                               */
/* ------------------------------------------------------------------ */
#include <cufft.h>

#define MAXPLANS 256

static struct {
  pthread_mutex_t lock;
  struct plan {
    bool used;
    struct lib_ctx k;
    CUstream stream;
    int rank, n[2], batch, idist, odist;
    cufftType type;
  } p[MAXPLANS];
} plans = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* p = f64, rank, rows, cols, batch, in, out, direction (the sign), idist, odist */
static CUresult fft_kernel(const mzemu_launch *l) {
  bool f64 = P(0) != 0;
  u64 rows = P(2), cols = P(3), batch = P(4), idist = P(8), odist = P(9), np = rows * cols;
  int sign = (int)(long long)P(7);
  size_t es = f64 ? 16 : 8;
  void *in = mzemu_device_ptr(P(5), ((batch - 1) * idist + np) * es);
  void *out = mzemu_device_ptr(P(6), ((batch - 1) * odist + np) * es);
  if (!in || !out) return CUDA_ERROR_ILLEGAL_ADDRESS;
  double *tmp = malloc(2 * np * sizeof *tmp); /* in place works too */
  if (!tmp) return CUDA_ERROR_OUT_OF_MEMORY;
  for (u64 b = 0; b < batch; b++) {
    for (u64 kr = 0; kr < rows; kr++)
      for (u64 kc = 0; kc < cols; kc++) {
        double re = 0, im = 0;
        for (u64 jr = 0; jr < rows; jr++)
          for (u64 jc = 0; jc < cols; jc++) {
            double ph = (double)((kr * jr) % rows) / (double)rows + (double)((kc * jc) % cols) / (double)cols;
            double a = sign * 2.0 * M_PI * ph;
            u64 at = b * idist + jr * cols + jc;
            double xr = f64 ? ((double *)in)[2 * at] : ((float *)in)[2 * at];
            double xi = f64 ? ((double *)in)[2 * at + 1] : ((float *)in)[2 * at + 1];
            re += xr * cos(a) - xi * sin(a);
            im += xr * sin(a) + xi * cos(a);
          }
        tmp[2 * (kr * cols + kc)] = re;
        tmp[2 * (kr * cols + kc) + 1] = im;
      }
    for (u64 i = 0; i < np; i++) {
      u64 at = b * odist + i;
      if (f64) {
        ((double *)out)[2 * at] = tmp[2 * i];
        ((double *)out)[2 * at + 1] = tmp[2 * i + 1];
      } else {
        ((float *)out)[2 * at] = (float)tmp[2 * i];
        ((float *)out)[2 * at + 1] = (float)tmp[2 * i + 1];
      }
    }
  }
  free(tmp);
  return CUDA_SUCCESS;
}

static struct plan *plan_of(cufftHandle h) {
  if (h < 0 || h >= MAXPLANS) return NULL;
  pthread_mutex_lock(&plans.lock);
  struct plan *p = plans.p[h].used ? &plans.p[h] : NULL;
  pthread_mutex_unlock(&plans.lock);
  return p;
}

/* Contiguous layouts only (inembed and onembed NULL), as maize uses. */
EXPORT cufftResult cufftPlanMany(cufftHandle *out, int rank, int *n, int *inembed, int istride, int idist,
                                 int *onembed, int ostride, int odist, cufftType type, int batch) {
  if (!out || !n || rank < 1 || rank > 2 || batch < 1 || (type != CUFFT_C2C && type != CUFFT_Z2Z))
    return CUFFT_INVALID_VALUE;
  if (inembed || onembed || istride != 1 || ostride != 1) return CUFFT_NOT_SUPPORTED;
  for (int i = 0; i < rank; i++)
    if (n[i] < 1) return CUFFT_INVALID_SIZE;
  pthread_mutex_lock(&plans.lock);
  int h = -1;
  for (int i = 0; i < MAXPLANS && h < 0; i++)
    if (!plans.p[i].used) h = i;
  if (h >= 0) {
    memset(&plans.p[h], 0, sizeof plans.p[h]);
    plans.p[h].used = true;
  }
  pthread_mutex_unlock(&plans.lock);
  if (h < 0) return CUFFT_ALLOC_FAILED;
  struct plan *p = &plans.p[h];
  p->rank = rank;
  p->n[0] = rank == 2 ? n[0] : 1;
  p->n[1] = rank == 2 ? n[1] : n[0];
  p->batch = batch;
  p->idist = idist;
  p->odist = odist;
  p->type = type;
  CUresult r = kernel_load(&p->k, "mzemu_cufft", fft_kernel);
  if (r != CUDA_SUCCESS) {
    if (p->k.mod) cuModuleUnload(p->k.mod);
    pthread_mutex_lock(&plans.lock);
    p->used = false;
    pthread_mutex_unlock(&plans.lock);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? CUFFT_ALLOC_FAILED : CUFFT_SETUP_FAILED;
  }
  *out = h;
  return CUFFT_SUCCESS;
}

EXPORT cufftResult cufftSetStream(cufftHandle h, cudaStream_t s) {
  struct plan *p = plan_of(h);
  if (!p) return CUFFT_INVALID_PLAN;
  p->stream = (CUstream)s;
  return CUFFT_SUCCESS;
}

static cufftResult exec(cufftHandle h, cufftType type, void *in, void *out, int dir) {
  struct plan *p = plan_of(h);
  if (!p) return CUFFT_INVALID_PLAN;
  if (p->type != type || (dir != CUFFT_FORWARD && dir != CUFFT_INVERSE)) return CUFFT_INVALID_VALUE;
  u64 v[NPARAM] = {type == CUFFT_Z2Z, (u64)p->rank, (u64)p->n[0], (u64)p->n[1], (u64)p->batch,
                   (u64)(uintptr_t)in, (u64)(uintptr_t)out, (u64)(long long)dir, (u64)p->idist, (u64)p->odist};
  return launch(&p->k, p->stream, v) == CUDA_SUCCESS ? CUFFT_SUCCESS : CUFFT_EXEC_FAILED;
}

EXPORT cufftResult cufftExecC2C(cufftHandle h, cufftComplex *in, cufftComplex *out, int dir) {
  return exec(h, CUFFT_C2C, in, out, dir);
}
EXPORT cufftResult cufftExecZ2Z(cufftHandle h, cufftDoubleComplex *in, cufftDoubleComplex *out, int dir) {
  return exec(h, CUFFT_Z2Z, in, out, dir);
}

EXPORT cufftResult cufftDestroy(cufftHandle h) {
  struct plan *p = plan_of(h);
  if (!p) return CUFFT_INVALID_PLAN;
  cuModuleUnload(p->k.mod);
  pthread_mutex_lock(&plans.lock);
  p->used = false;
  pthread_mutex_unlock(&plans.lock);
  return CUFFT_SUCCESS;
}
#endif
