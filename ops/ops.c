/* Canned operations: the graph builders of include/maize/ops.h, their CPU
 * implementations (OpenBLAS where BLAS has the op, FFTW for the FFT, plain
 * C otherwise) and their OpenCL C kernels (fill, min/max, rng); the CLBlast
 * implementations are in ops_clblast.c, the clFFT one in ops_clfft.c.
 *
 * Each op and type has one kernel per runtime, created at its first use
 * and found again in the runtime's kernel list (by name and by being one
 * of ours); the runtime frees it at its destruction. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handle.h"
#include "mz_config.h"
#include "native.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_kernel.h"
#include "objects/mz_runtime.h"
#if MZ_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if MZ_HAVE_RANDOM123
#include <Random123/philox.h>
#endif
#if MZ_HAVE_FFTW
#include <fftw3.h>
#endif

enum op_id { OP_FILL, OP_COPY, OP_SCAL, OP_AXPY, OP_DOT, OP_SUM, OP_MIN, OP_MAX, OP_GEMM, OP_RNG_UNIFORM, OP_RNG_NORMAL, OP_RNG_BITS, OP_FFT, OP_COUNT };

/* Per op: its name, its parameter list (%s is the element type), the index
 * of the buffer it writes, the CLBlast routine or the OpenCL C entry, the
 * CPU library it needs (NULL: plain C), and on CUDA the library it calls
 * (cuBLAS, cuFFT) or NULL for a kernel of ops_cuda.cu named like the
 * maize kernel (mz_<op>_<type>). */
static const struct op_desc {
  const char *name;
  const char *params;
  unsigned result;
  int native;        /* enum mz__native_id (CLBlast), or -1 */
  const char *entry; /* OpenCL C entry, or NULL */
  const char *cpu_lib;
  const char *cl_lib; /* the OpenCL library it needs (NULL: an OpenCL C compiler) */
  const char *cu_lib; /* the CUDA library it needs (NULL: the embedded PTX) */
} ops[OP_COUNT] = {
    [OP_FILL] = {"fill", "%s v, out %s[] x, u64 n = sizeof(x)", 1, -1, "mz_fill", NULL, NULL, NULL},
    [OP_COPY] = {"copy", "in %s[] x, out %s[] y, u64 n = sizeof(x)", 1, MZ__NAT_COPY, NULL, "OpenBLAS", "CLBlast", "cuBLAS"},
    [OP_SCAL] = {"scal", "%s alpha, inout %s[] x, u64 n = sizeof(x)", 1, MZ__NAT_SCAL, NULL, "OpenBLAS", "CLBlast", "cuBLAS"},
    [OP_AXPY] = {"axpy", "%s alpha, in %s[] x, inout %s[] y, u64 n = sizeof(x)", 2, MZ__NAT_AXPY, NULL, "OpenBLAS", "CLBlast", "cuBLAS"},
    [OP_DOT] = {"dot", "in %s[] x, in %s[] y, out %s[] r, u64 n = sizeof(x)", 2, MZ__NAT_DOT, NULL, "OpenBLAS", "CLBlast", "cuBLAS"},
    [OP_SUM] = {"sum", "in %s[] x, out %s[] r, u64 n = sizeof(x)", 1, MZ__NAT_SUM, "mz_sum", NULL, NULL, NULL},
    [OP_MIN] = {"min", "in %s[] x, out %s[] r, u64 n = sizeof(x)", 1, -1, "mz_min", NULL, NULL, NULL},
    [OP_MAX] = {"max", "in %s[] x, out %s[] r, u64 n = sizeof(x)", 1, -1, "mz_max", NULL, NULL, NULL},
    [OP_GEMM] = {"gemm",
                 "u32 ta, u32 tb, u64 m, u64 n, u64 k, %s alpha, in %s[] A, u64 lda, in %s[] B, u64 ldb, %s beta, "
                 "inout %s[] C, u64 ldc",
                 11, MZ__NAT_GEMM, NULL, "OpenBLAS", "CLBlast", "cuBLAS"},
    [OP_RNG_UNIFORM] = {"rng_uniform", "u64 seed, u64 offset, out %s[] x, u64 n = sizeof(x)", 2, -1, "mz_rng_uniform",
                        "Random123", NULL, NULL},
    [OP_RNG_NORMAL] = {"rng_normal", "u64 seed, u64 offset, out %s[] x, u64 n = sizeof(x)", 2, -1, "mz_rng_normal",
                       "Random123", NULL, NULL},
    [OP_RNG_BITS] = {"rng_bits", "u64 seed, u64 offset, out %s[] x, u64 n = sizeof(x)", 2, -1, "mz_rng_bits",
                     "Random123", NULL, NULL},
    [OP_FFT] = {"fft", "u32 inverse, u32 rank, u64 n0, u64 n1, u64 batch, in %s[] x, out %s[] y", 6, -1, NULL, "FFTW",
                "clFFT", "cuFFT"},
};

/* ---- random numbers: the same text compiled as C here and as OpenCL C ----
 * Element e uses the counter {e, e >> 32, 0, 0} and the key {seed, seed >> 32}.
 * Conversions use only exact integer-to-float steps, so uniform values are
 * the same bits everywhere. */
#define RNG_CODE(...) __VA_ARGS__
#define RNG_TEXT(...) #__VA_ARGS__
#define RNG_BODY(X)                                                                                           \
  X(static float mz_u01f(mzu32 a) { return (float)(a >> 8) * 5.9604644775390625e-08f + 2.98023223876953125e-08f; } \
    static double mz_u01d(mzu32 a, mzu32 b) {                                                                 \
      mzu64 x = (((mzu64)a << 32) | b) >> 11;                                                                 \
      return (double)x * 1.1102230246251565e-16 + 5.5511151231257827e-17;                                    \
    })

#if MZ_HAVE_RANDOM123
typedef uint32_t mzu32;
typedef uint64_t mzu64;
RNG_BODY(RNG_CODE)

static philox4x32_ctr_t rng_at(uint64_t seed, uint64_t e) {
  philox4x32_ctr_t c = {{(uint32_t)e, (uint32_t)(e >> 32), 0, 0}};
  philox4x32_key_t k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
  return philox4x32(c, k);
}

static int cpu_rng(const mz_call *call, enum op_id id) {
  uint64_t seed = call->args[0].u64, off = call->args[1].u64, n = call->args[3].u64;
  mz_dtype t = call->shapes[2].dtype;
  void *x = call->args[2].p;
  for (uint64_t i = 0; i < n; i++) {
    philox4x32_ctr_t r = rng_at(seed, off + i);
    if (id == OP_RNG_BITS) ((uint32_t *)x)[i] = r.v[0];
    else if (t == MZ_F32) {
      float u = mz_u01f(r.v[0]);
      if (id == OP_RNG_NORMAL) u = sqrtf(-2.0f * logf(u)) * cosf(6.2831853071795865f * mz_u01f(r.v[1]));
      ((float *)x)[i] = u;
    } else {
      double u = mz_u01d(r.v[0], r.v[1]);
      if (id == OP_RNG_NORMAL) u = sqrt(-2.0 * log(u)) * cos(6.283185307179586 * mz_u01d(r.v[2], r.v[3]));
      ((double *)x)[i] = u;
    }
  }
  return MZ_OK;
}
#endif

static const char cl_rng_src[] =
    "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n"
    "#include <Random123/philox.h>\n"
    "typedef uint mzu32;\ntypedef ulong mzu64;\n" RNG_BODY(RNG_TEXT) "\n"
    "static philox4x32_ctr_t rng_at(ulong seed, ulong e) {\n"
    "  philox4x32_ctr_t c = {{(uint)e, (uint)(e >> 32), 0, 0}};\n"
    "  philox4x32_key_t k = {{(uint)seed, (uint)(seed >> 32)}};\n"
    "  return philox4x32(c, k);\n}\n"
    "__kernel void mz_rng_bits(ulong seed, ulong off, __global uint *x, ulong n) {\n"
    "  ulong i = get_global_id(0); if (i < n) x[i] = rng_at(seed, off + i).v[0];\n}\n"
    "#ifdef IS_F64\n"
    "__kernel void mz_rng_uniform(ulong seed, ulong off, __global T *x, ulong n) {\n"
    "  ulong i = get_global_id(0); if (i >= n) return; philox4x32_ctr_t r = rng_at(seed, off + i);\n"
    "  x[i] = mz_u01d(r.v[0], r.v[1]);\n}\n"
    "__kernel void mz_rng_normal(ulong seed, ulong off, __global T *x, ulong n) {\n"
    "  ulong i = get_global_id(0); if (i >= n) return; philox4x32_ctr_t r = rng_at(seed, off + i);\n"
    "  x[i] = sqrt(-2.0 * log(mz_u01d(r.v[0], r.v[1]))) * cos(6.283185307179586 * mz_u01d(r.v[2], r.v[3]));\n}\n"
    "#else\n"
    "__kernel void mz_rng_uniform(ulong seed, ulong off, __global T *x, ulong n) {\n"
    "  ulong i = get_global_id(0); if (i >= n) return; x[i] = mz_u01f(rng_at(seed, off + i).v[0]);\n}\n"
    "__kernel void mz_rng_normal(ulong seed, ulong off, __global T *x, ulong n) {\n"
    "  ulong i = get_global_id(0); if (i >= n) return; philox4x32_ctr_t r = rng_at(seed, off + i);\n"
    "  x[i] = sqrt(-2.0f * log(mz_u01f(r.v[0]))) * cos(6.2831853071795865f * mz_u01f(r.v[1]));\n}\n"
    "#endif\n";

/* Fill, min/max, and sum where CLBlast is missing: small kernels; the
 * reductions run on one work item (the default launch is the shape of the
 * 1-element result). */
static const char cl_small_src[] =
    "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n"
    "__kernel void mz_fill(T v, __global T *x, ulong n) { ulong i = get_global_id(0); if (i < n) x[i] = v; }\n"
    "__kernel void mz_min(__global const T *x, __global T *r, ulong n) {\n"
    "  if (get_global_id(0)) return; T m = x[0]; for (ulong i = 1; i < n; i++) m = x[i] < m ? x[i] : m; r[0] = m; }\n"
    "__kernel void mz_sum(__global const T *x, __global T *r, ulong n) {\n"
    "  if (get_global_id(0)) return; T s = 0; for (ulong i = 0; i < n; i++) s += x[i]; r[0] = s; }\n"
    "__kernel void mz_max(__global const T *x, __global T *r, ulong n) {\n"
    "  if (get_global_id(0)) return; T m = x[0]; for (ulong i = 1; i < n; i++) m = x[i] > m ? x[i] : m; r[0] = m; }\n";

/* ---- CPU implementations ---- */

#define P(i) (call->args[i].p)
#define N(i) (call->args[i].u64)

#if MZ_HAVE_FFTW
/* FFTW's planner is process-wide state and not thread safe (only
 * fftw_execute is), so plan creation and destruction take this lock, as
 * FFTW's manual asks; it guards FFTW's state, not maize's, which is why it
 * is the one process-wide lock of the canned ops. */
static pthread_mutex_t fftw_planner = PTHREAD_MUTEX_INITIALIZER;

/* u32 inverse, u32 rank, u64 n0, u64 n1, u64 batch, in x, out y.  One
 * FFTW_ESTIMATE plan per call, made on the call's own arrays: estimating
 * costs microseconds and never touches the data, and a plan made on these
 * pointers suits their alignment. */
static int cpu_fft(const mz_call *call) {
  bool inv = call->args[0].u32 != 0, f64 = call->shapes[5].dtype == MZ_F64;
  unsigned rank = call->args[1].u32;
  int n0 = (int)N(2), n1 = (int)N(3), batch = (int)N(4);
  int dims[2] = {n1, n0}; /* slowest first: rows, then columns */
  int dist = rank == 2 ? n0 * n1 : n0;
  int sign = inv ? FFTW_BACKWARD : FFTW_FORWARD;
  size_t total = (size_t)dist * (size_t)batch;
  const int *n = rank == 2 ? dims : dims + 1;
  if (f64) {
    pthread_mutex_lock(&fftw_planner);
    fftw_plan p = fftw_plan_many_dft((int)rank, n, batch, P(5), NULL, 1, dist, P(6), NULL, 1, dist, sign, FFTW_ESTIMATE);
    pthread_mutex_unlock(&fftw_planner);
    if (!p) return MZ_EKERNEL;
    fftw_execute(p);
    pthread_mutex_lock(&fftw_planner);
    fftw_destroy_plan(p);
    pthread_mutex_unlock(&fftw_planner);
    if (inv) {
      double s = 1.0 / dist, *y = P(6);
      for (size_t i = 0; i < 2 * total; i++) y[i] *= s;
    }
  } else {
    pthread_mutex_lock(&fftw_planner);
    fftwf_plan p = fftwf_plan_many_dft((int)rank, n, batch, P(5), NULL, 1, dist, P(6), NULL, 1, dist, sign, FFTW_ESTIMATE);
    pthread_mutex_unlock(&fftw_planner);
    if (!p) return MZ_EKERNEL;
    fftwf_execute(p);
    pthread_mutex_lock(&fftw_planner);
    fftwf_destroy_plan(p);
    pthread_mutex_unlock(&fftw_planner);
    if (inv) {
      float s = 1.0f / (float)dist, *y = P(6);
      for (size_t i = 0; i < 2 * total; i++) y[i] *= s;
    }
  }
  return MZ_OK;
}
#endif

static int cpu_minmax(const mz_call *call, bool is_max) {
  size_t n = N(2);
  if (call->shapes[0].dtype == MZ_F32) {
    const float *x = P(0);
    float m = x[0];
    for (size_t i = 1; i < n; i++) m = is_max ? (x[i] > m ? x[i] : m) : (x[i] < m ? x[i] : m);
    *(float *)P(1) = m;
  } else {
    const double *x = P(0);
    double m = x[0];
    for (size_t i = 1; i < n; i++) m = is_max ? (x[i] > m ? x[i] : m) : (x[i] < m ? x[i] : m);
    *(double *)P(1) = m;
  }
  return MZ_OK;
}

static int cpu_op(const mz_call *call) {
  enum op_id id = (enum op_id)(intptr_t)call->user;
  bool f64 = call->shapes[ops[id].result].dtype == MZ_F64;
  switch (id) {
  case OP_FILL:
    for (size_t i = 0; i < N(2); i++) {
      if (f64) ((double *)P(1))[i] = call->args[0].f64;
      else ((float *)P(1))[i] = call->args[0].f32;
    }
    return MZ_OK;
  case OP_SUM: {
    double s = 0; /* in double for f32 too: one rounding at the end */
    for (size_t i = 0; i < N(2); i++) s += f64 ? ((const double *)P(0))[i] : ((const float *)P(0))[i];
    if (f64) *(double *)P(1) = s;
    else *(float *)P(1) = (float)s;
    return MZ_OK;
  }
  case OP_MIN: return cpu_minmax(call, false);
  case OP_MAX: return cpu_minmax(call, true);
#if MZ_HAVE_OPENBLAS
  case OP_COPY:
    if (f64) cblas_dcopy((blasint)N(2), P(0), 1, P(1), 1);
    else cblas_scopy((blasint)N(2), P(0), 1, P(1), 1);
    return MZ_OK;
  case OP_SCAL:
    if (f64) cblas_dscal((blasint)N(2), call->args[0].f64, P(1), 1);
    else cblas_sscal((blasint)N(2), call->args[0].f32, P(1), 1);
    return MZ_OK;
  case OP_AXPY:
    if (f64) cblas_daxpy((blasint)N(3), call->args[0].f64, P(1), 1, P(2), 1);
    else cblas_saxpy((blasint)N(3), call->args[0].f32, P(1), 1, P(2), 1);
    return MZ_OK;
  case OP_DOT:
    if (f64) *(double *)P(2) = cblas_ddot((blasint)N(3), P(0), 1, P(1), 1);
    else *(float *)P(2) = cblas_sdot((blasint)N(3), P(0), 1, P(1), 1);
    return MZ_OK;
  case OP_GEMM: {
    enum CBLAS_TRANSPOSE ta = call->args[0].u32 ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = call->args[1].u32 ? CblasTrans : CblasNoTrans;
    blasint m = (blasint)N(2), n = (blasint)N(3), k = (blasint)N(4);
    if (f64)
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, call->args[5].f64, P(6), (blasint)N(7), P(8), (blasint)N(9),
                  call->args[10].f64, P(11), (blasint)N(12));
    else
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, call->args[5].f32, P(6), (blasint)N(7), P(8), (blasint)N(9),
                  call->args[10].f32, P(11), (blasint)N(12));
    return MZ_OK;
  }
#endif
#if MZ_HAVE_RANDOM123
  case OP_RNG_UNIFORM:
  case OP_RNG_NORMAL:
  case OP_RNG_BITS: return cpu_rng(call, id);
#endif
#if MZ_HAVE_FFTW
  case OP_FFT: return cpu_fft(call);
#endif
  default: return MZ_ENOTSUP;
  }
}

/* Whether the CPU implementation of id was built. */
static bool cpu_has(enum op_id id) {
  const char *lib = ops[id].cpu_lib;
  if (!lib) return true;
  if (!strcmp(lib, "OpenBLAS")) return MZ_HAVE_OPENBLAS;
  if (!strcmp(lib, "FFTW")) return MZ_HAVE_FFTW;
  return MZ_HAVE_RANDOM123;
}

/* The OpenCL library implementation of id, or NULL where it has none or
 * this build lacks its library. */
static const struct mz__ocl_native *native_of(enum op_id id) {
#if MZ_HAVE_CLFFT
  if (id == OP_FFT) return &mz__ocl_clfft;
#endif
#if MZ_HAVE_CLBLAST
  if (ops[id].native >= 0) return &mz__ocl_clblast[ops[id].native];
#endif
  (void)id;
  return NULL;
}

/* The CUDA library implementation of id, or NULL where it is a PTX kernel
 * or this build lacks the library's header. */
static const struct mz__cu_native *cu_native_of(enum op_id id) {
#if MZ_HAVE_CUFFT
  if (id == OP_FFT) return &mz__cu_cufft;
#endif
#if MZ_HAVE_CUBLAS
  if (ops[id].cu_lib && ops[id].native >= 0 && mz__cu_cublas[ops[id].native].enqueue) return &mz__cu_cublas[ops[id].native];
#endif
  (void)id;
  return NULL;
}

/* The embedded PTX (ops_cuda_ptx.c), in builds with the CUDA backend. */
#if MZ_HAVE_CUDA
static const char *const cu_ptx = mz__ops_cuda_ptx;
#else
static const char *const cu_ptx = NULL;
#endif

/* Cost hints for devices that model costs (the simulator); other devices
 * time the kernels and learn perf models as for any kernel. */
static double gemm_flops(const mz_call *call) {
  return 2.0 * (double)call->args[2].u64 * (double)call->args[3].u64 * (double)call->args[4].u64;
}

/* 5 N log2 N per transform of N points, the usual count for an FFT. */
static double fft_flops(const mz_call *call) {
  double n = (double)call->args[2].u64 * (double)(call->args[1].u32 == 2 ? call->args[3].u64 : 1);
  return 5.0 * n * log2(n > 1 ? n : 2) * (double)call->args[4].u64;
}

/* ---- builders ---- */


/* The buffer an op's result is, or NULL (the graph gets the error). */
static mz_buffer *buffer_of(mz_graph *g, const char *who, mz_op *op) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return NULL;
  if (g->status) return NULL;
  if (!op) {
    mz__graph_fail(g, MZ_EINVAL, "%s: NULL op", who);
    return NULL;
  }
  if (mz__op_graph(op) != g || op->kind != MZ__K_VALUE || !mz__value_buf(op)) {
    mz__graph_fail(g, MZ_EINVAL, "%s: an argument is not a buffer of this graph", who);
    return NULL;
  }
  return mz__value_buf(op);
}

/* k, when a device of the runtime can run it; otherwise NULL, with
 * MZ_ENODEV on the graph and a message saying which library each device
 * kind lacks (the executor would only say that no device can run it). */
static mz_kernel *runnable(mz_graph *g, const char *who, enum op_id id, mz_kernel *k) {
  mz_runtime *rt = g->rt;
  const char *cu_why = NULL;
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dev = rt->devs[d];
    if (dev->kernels && dev->ops->can_run && dev->ops->can_run(dev, k)) return k;
#if MZ_HAVE_CUDA
    if (!cu_why && ops[id].cu_lib)
      cu_why = mz__cuda_lib_missing(dev, id == OP_FFT ? MZ__CU_CUFFT : MZ__CU_CUBLAS);
#endif
  }
  const mz_kernel_spec *s = &k->spec;
  mz__graph_fail(g, MZ_ENODEV,
                 "%s: no device of this runtime can run %s (on the CPU it needs %s%s; on OpenCL %s%s; on CUDA %s%s%s%s)",
                 who, s->name, ops[id].cpu_lib ? ops[id].cpu_lib : "nothing", s->cpu.fn ? ", built" : ", not built",
                 ops[id].cl_lib                                 ? ops[id].cl_lib
                 : id >= OP_RNG_UNIFORM && id <= OP_RNG_BITS ? "an OpenCL C compiler and the Random123 headers "
                                                                  "($MZ_RANDOM123_INCLUDE/Random123)"
                                                                : "an OpenCL C compiler",
                 s->opencl.format != MZ_CODE_NONE ? ", built" : ", not built",
                 ops[id].cu_lib ? ops[id].cu_lib : "its PTX", s->cuda.format != MZ_CODE_NONE ? ", built" : ", not built",
                 cu_why ? ", not loaded: " : "", cu_why ? cu_why : "");
  return NULL;
}

/* The OpenCL generators include Random123 when a device compiles them, so
 * its headers must be on the machine that runs them, not only on the one
 * that built maize: under $MZ_RANDOM123_INCLUDE when set, else where the
 * build found them.  Without them the generators are not offered to OpenCL
 * devices (the CPU or CUDA runs them), instead of failing every run with
 * the compiler's "file not found".  dir gets the folder; false when absent. */
static bool r123_headers(char *dir, size_t len) {
  const char *e = getenv("MZ_RANDOM123_INCLUDE");
  snprintf(dir, len, "%s", e && *e ? e : MZ_RANDOM123_INCLUDE);
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/Random123/philox.h", dir) >= sizeof path) return false;
  return access(path, R_OK) == 0;
}

static mz_kernel *make_kernel(mz_graph *g, const char *who, enum op_id id, mz_dtype t) {
  const struct op_desc *d = &ops[id];
  const char *tn = mz_dtype_name(t);
  char name[64], params[512];
  snprintf(name, sizeof name, "mz_%s_%s", d->name, tn);
  snprintf(params, sizeof params, d->params, tn, tn, tn, tn, tn);
  /* One kernel per op and type and runtime: found in the runtime's list by
   * its name and our op id and code (two threads may both miss and create
   * one each; both stay valid until the runtime is destroyed). */
  mz_kernel *k = NULL;
  pthread_mutex_lock(&g->rt->lock);
  for (mz_kernel *it = g->rt->kernels; it && !k; it = it->next)
    if (!it->destroyed && it->spec.cpu.user == (void *)(intptr_t)id && !strcmp(it->spec.name, name) &&
        (it->spec.cpu.fn == cpu_op || it->spec.opencl.data == (void *)cl_small_src ||
         it->spec.opencl.data == (void *)cl_rng_src || it->spec.opencl.format == MZ__CODE_NATIVE ||
         it->spec.cuda.format == MZ__CODE_NATIVE || (cu_ptx && it->spec.cuda.data == (const void *)cu_ptx)))
      k = it;
  pthread_mutex_unlock(&g->rt->lock);
  if (k) return runnable(g, who, id, k);
  mz_kernel_spec s = {.name = name, .params = params, .cpu.user = (void *)(intptr_t)id};
  if (cpu_has(id)) s.cpu.fn = cpu_op;
  if (id == OP_GEMM) s.cost.flops = gemm_flops;
  else if (id == OP_FFT) s.cost.flops = fft_flops;
  else s.cost.flops_per_elem = id == OP_AXPY || id == OP_DOT ? 2.0 : 1.0;
  s.cost.bytes_per_elem = (double)mz_dtype_size(t) * (id == OP_AXPY || id == OP_DOT ? 3.0 : 2.0);
  static const char *const cl_types[MZ_DTYPE_COUNT] = {[MZ_F32] = "-DT=float", [MZ_F64] = "-DT=double -DIS_F64",
                                                       [MZ_U32] = "-DT=uint"};
  char opts[PATH_MAX + 64], r123[PATH_MAX];
  const struct mz__ocl_native *nat = native_of(id);
  if (nat) {
    s.opencl.format = MZ__CODE_NATIVE;
    s.opencl.data = nat;
  }
  /* OpenCL C where CLBlast has no routine or is missing. */
  bool rng = id >= OP_RNG_UNIFORM && id <= OP_RNG_BITS;
  if (d->entry && s.opencl.format == MZ_CODE_NONE &&
      (!rng || (MZ_HAVE_RANDOM123 && r123_headers(r123, sizeof r123)))) {
    snprintf(opts, sizeof opts, "%s%s%s", cl_types[t], rng ? " -I" : "", rng ? r123 : "");
    s.opencl.format = MZ_CODE_SOURCE;
    s.opencl.data = rng ? cl_rng_src : cl_small_src;
    s.opencl.options = opts;
    s.opencl.entry = d->entry;
  }
  /* CUDA: a library call, or a kernel of the embedded PTX. */
  const struct mz__cu_native *cnat = cu_native_of(id);
  if (cnat) {
    s.cuda.format = MZ__CODE_NATIVE;
    s.cuda.data = cnat;
  } else if (!d->cu_lib && cu_ptx) {
    s.cuda.format = MZ_CODE_PTX;
    s.cuda.data = cu_ptx;
  }
  if (!s.cpu.fn && s.opencl.format == MZ_CODE_NONE && s.cuda.format == MZ_CODE_NONE) {
    mz__graph_fail(g, MZ_ENODEV, "%s: no device can run %s: maize was built without %s (CPU)%s%s%s%s%s", who, name,
         d->cpu_lib ? d->cpu_lib : "?", d->cl_lib ? " and without " : "", d->cl_lib ? d->cl_lib : "",
         d->cl_lib ? " (OpenCL)" : "", d->cu_lib ? ", and without " : "", d->cu_lib ? d->cu_lib : "");
    return NULL;
  }
  int rc = mz_kernel_create(g->rt, &s, &k);
  if (rc) {
    mz__graph_fail(g, rc, "%s: cannot create its kernel", who);
    return NULL;
  }
  return runnable(g, who, id, k);
}

/* Apply op id to args (n of them), and return the written buffer's op.
 * The OpenCL C kernels index their buffers as 1-D arrays, so the launch is
 * 1-D over the written buffer's elements whatever its shape (the default
 * launch would follow a 2-D shape). */
static mz_op *apply(mz_graph *g, const char *who, enum op_id id, mz_dtype t, unsigned n, mz_op *const args[]) {
  mz_kernel *k = make_kernel(g, who, id, t);
  if (!k) return MZ__LIVE(g, MZ__TAG_GRAPH) ? g->error_op : NULL;
  mz_op *z = mz_zip(g, n, args);
  const mz_buffer *w = mz__value_buf(args[ops[id].result]);
  mz_launch launch = {.ndim = 1, .global = {w->shape.count, 1, 1}};
  mz_op *r = mz_apply(g, k, z, &launch);
  return mz_unzip(g, r, ops[id].result);
}

static mz_op *scalar(mz_graph *g, mz_dtype t, double v) {
  return t == MZ_F64 ? mz_f64(g, v) : mz_f32(g, (float)v);
}

static bool is_float(mz_graph *g, const char *who, const mz_buffer *b) {
  if (b->shape.dtype == MZ_F32 || b->shape.dtype == MZ_F64) return true;
  mz__graph_fail(g, MZ_ESHAPE, "%s: the buffer's type is %s; f32 or f64 needed", who, mz_dtype_name(b->shape.dtype));
  return false;
}

static bool same(mz_graph *g, const char *who, const mz_buffer *a, const mz_buffer *b, bool count) {
  if (a->shape.dtype != b->shape.dtype) {
    mz__graph_fail(g, MZ_ESHAPE, "%s: buffers of types %s and %s", who, mz_dtype_name(a->shape.dtype),
         mz_dtype_name(b->shape.dtype));
    return false;
  }
  if (count && a->shape.count != b->shape.count) {
    mz__graph_fail(g, MZ_ESHAPE, "%s: buffers of %zu and %zu elements", who, a->shape.count, b->shape.count);
    return false;
  }
  return true;
}

#define ERR (MZ__LIVE(g, MZ__TAG_GRAPH) ? g->error_op : NULL)

mz_op *mz_op_fill(mz_graph *g, mz_op *x, double value) {
  mz_buffer *b = buffer_of(g, "mz_op_fill", x);
  if (!b || !is_float(g, "mz_op_fill", b)) return ERR;
  return apply(g, "mz_op_fill", OP_FILL, b->shape.dtype, 2, (mz_op *[]){scalar(g, b->shape.dtype, value), x});
}

mz_op *mz_op_copy(mz_graph *g, mz_op *x, mz_op *y) {
  mz_buffer *bx = buffer_of(g, "mz_op_copy", x), *by = buffer_of(g, "mz_op_copy", y);
  if (!bx || !by || !is_float(g, "mz_op_copy", bx) || !same(g, "mz_op_copy", bx, by, true)) return ERR;
  return apply(g, "mz_op_copy", OP_COPY, bx->shape.dtype, 2, (mz_op *[]){x, y});
}

mz_op *mz_op_scal(mz_graph *g, double alpha, mz_op *x) {
  mz_buffer *b = buffer_of(g, "mz_op_scal", x);
  if (!b || !is_float(g, "mz_op_scal", b)) return ERR;
  return apply(g, "mz_op_scal", OP_SCAL, b->shape.dtype, 2, (mz_op *[]){scalar(g, b->shape.dtype, alpha), x});
}

mz_op *mz_op_axpy(mz_graph *g, double alpha, mz_op *x, mz_op *y) {
  mz_buffer *bx = buffer_of(g, "mz_op_axpy", x), *by = buffer_of(g, "mz_op_axpy", y);
  if (!bx || !by || !is_float(g, "mz_op_axpy", bx) || !same(g, "mz_op_axpy", bx, by, true)) return ERR;
  return apply(g, "mz_op_axpy", OP_AXPY, bx->shape.dtype, 3, (mz_op *[]){scalar(g, bx->shape.dtype, alpha), x, y});
}

mz_op *mz_op_dot(mz_graph *g, mz_op *x, mz_op *y, mz_op *result) {
  const char *who = "mz_op_dot";
  mz_buffer *bx = buffer_of(g, who, x), *by = buffer_of(g, who, y), *br = buffer_of(g, who, result);
  if (!bx || !by || !br || !is_float(g, who, bx) || !same(g, who, bx, by, true) || !same(g, who, bx, br, false))
    return ERR;
  return apply(g, who, OP_DOT, bx->shape.dtype, 3, (mz_op *[]){x, y, result});
}

mz_op *mz_op_reduce(mz_graph *g, mz_reduce_kind kind, mz_op *x, mz_op *result) {
  const char *who = "mz_op_reduce";
  mz_buffer *bx = buffer_of(g, who, x), *br = buffer_of(g, who, result);
  if (!bx || !br || !is_float(g, who, bx) || !same(g, who, bx, br, false)) return ERR;
  if ((unsigned)kind > MZ_REDUCE_MAX) return mz__graph_fail(g, MZ_EINVAL, "%s: unknown reduction %d", who, (int)kind);
  enum op_id id = kind == MZ_REDUCE_SUM ? OP_SUM : kind == MZ_REDUCE_MIN ? OP_MIN : OP_MAX;
  return apply(g, who, id, bx->shape.dtype, 2, (mz_op *[]){x, result});
}

mz_op *mz_op_gemm(mz_graph *g, mz_transpose ta, mz_transpose tb, double alpha, mz_op *A, mz_op *B, double beta,
                  mz_op *C) {
  const char *who = "mz_op_gemm";
  mz_buffer *ba = buffer_of(g, who, A), *bb = buffer_of(g, who, B), *bc = buffer_of(g, who, C);
  if (!ba || !bb || !bc || !is_float(g, who, ba) || !same(g, who, ba, bb, false) || !same(g, who, ba, bc, false))
    return ERR;
  if (ba->shape.ndim > 2 || bb->shape.ndim > 2 || bc->shape.ndim > 2)
    return mz__graph_fail(g, MZ_ESHAPE, "%s: matrices have 1 or 2 dimensions", who);
  /* Stored shapes: rows x cols = dims[1] x dims[0]. */
  size_t m = bc->shape.dims[1], n = bc->shape.dims[0];
  size_t am = ta ? ba->shape.dims[0] : ba->shape.dims[1], ak = ta ? ba->shape.dims[1] : ba->shape.dims[0];
  size_t bk = tb ? bb->shape.dims[0] : bb->shape.dims[1], bn = tb ? bb->shape.dims[1] : bb->shape.dims[0];
  if (am != m || bn != n || ak != bk)
    return mz__graph_fail(g, MZ_ESHAPE, "%s: op(A) is %zu x %zu, op(B) %zu x %zu, C %zu x %zu", who, am, ak, bk, bn, m, n);
  mz_dtype t = ba->shape.dtype;
  return apply(g, who, OP_GEMM, t, 13,
               (mz_op *[]){mz_u32(g, ta != MZ_NO_TRANS), mz_u32(g, tb != MZ_NO_TRANS), mz_u64(g, m), mz_u64(g, n),
                           mz_u64(g, ak), scalar(g, t, alpha), A, mz_u64(g, ba->shape.dims[0]), B,
                           mz_u64(g, bb->shape.dims[0]), scalar(g, t, beta), C, mz_u64(g, n)});
}

mz_op *mz_op_rng(mz_graph *g, mz_op *buf, uint64_t seed, mz_rng_dist dist) {
  const char *who = "mz_op_rng";
  mz_buffer *b = buffer_of(g, who, buf);
  if (!b) return ERR;
  mz_dtype t = b->shape.dtype;
  if (dist == MZ_RNG_BITS ? t != MZ_U32 : (t != MZ_F32 && t != MZ_F64))
    return mz__graph_fail(g, MZ_ESHAPE, "%s: a %s buffer for %s", who, mz_dtype_name(t),
                dist == MZ_RNG_BITS ? "bits (u32 needed)" : "a distribution (f32 or f64 needed)");
  if ((unsigned)dist > MZ_RNG_BITS) return mz__graph_fail(g, MZ_EINVAL, "%s: unknown distribution %d", who, (int)dist);
  /* A tile counts its elements from its offset in the parent, so that the
   * values never depend on the tiling. */
  uint64_t off = 0;
  if (b->parent) off = (uint64_t)((char *)b->host - (char *)b->parent->host) / mz_dtype_size(t);
  enum op_id id = dist == MZ_RNG_UNIFORM ? OP_RNG_UNIFORM : dist == MZ_RNG_NORMAL ? OP_RNG_NORMAL : OP_RNG_BITS;
  return apply(g, who, id, t, 3, (mz_op *[]){mz_u64(g, seed), mz_u64(g, off), buf});
}

mz_op *mz_op_fft(mz_graph *g, unsigned rank, mz_fft_direction dir, mz_op *x, mz_op *y) {
  const char *who = "mz_op_fft";
  mz_buffer *bx = buffer_of(g, who, x), *by = buffer_of(g, who, y);
  if (!bx || !by || !is_float(g, who, bx) || !same(g, who, bx, by, true)) return ERR;
  if (rank != 1 && rank != 2) return mz__graph_fail(g, MZ_EINVAL, "%s: rank %u; 1 or 2 supported", who, rank);
  if (dir != MZ_FFT_FORWARD && dir != MZ_FFT_INVERSE)
    return mz__graph_fail(g, MZ_EINVAL, "%s: unknown direction %d", who, (int)dir);
  if (bx == by || bx->parent == by || by->parent == bx || (bx->parent && bx->parent == by->parent && bx->host == by->host))
    return mz__graph_fail(g, MZ_EINVAL, "%s: x and y are the same memory; the transform is out of place", who);
  const mz_shape *s = &bx->shape;
  for (unsigned d = 0; d < 3; d++)
    if (s->dims[d] != by->shape.dims[d])
      return mz__graph_fail(g, MZ_ESHAPE, "%s: x is %zu x %zu x %zu, y %zu x %zu x %zu", who, s->dims[0], s->dims[1],
                            s->dims[2], by->shape.dims[0], by->shape.dims[1], by->shape.dims[2]);
  if (s->dims[0] % 2)
    return mz__graph_fail(g, MZ_ESHAPE, "%s: dims[0] is %zu; interleaved complex numbers need an even width", who,
                          s->dims[0]);
  /* FFTW takes int sizes. */
  if (s->count / 2 > INT_MAX) return mz__graph_fail(g, MZ_ESHAPE, "%s: %zu complex numbers; at most %d", who, s->count / 2, INT_MAX);
  size_t n0 = s->dims[0] / 2, n1 = rank == 2 ? s->dims[1] : 1, batch = s->count / 2 / (n0 * n1);
  return apply(g, who, OP_FFT, s->dtype, 7,
               (mz_op *[]){mz_u32(g, dir == MZ_FFT_INVERSE), mz_u32(g, rank), mz_u64(g, n0), mz_u64(g, n1),
                           mz_u64(g, batch), x, y});
}
