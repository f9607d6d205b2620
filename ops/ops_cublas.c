/* Canned operations on CUDA devices through cuBLAS, loaded at run time
 * (devices/cuda/cuda_libs.h).  Each function reads the node's arguments in
 * the parameter order ops/ops.c gives its kernels and enqueues one cuBLAS
 * call on the node's stream; see ops/native.h for the contract.
 *
 * maize's matrices are row-major and cuBLAS's column-major: a row-major
 * matrix is its transpose in column-major order, so C = op(A) op(B) is
 * computed as C^T = op(B)^T op(A)^T, that is cuBLAS's gemm with A and B
 * swapped and m and n swapped, the transposes and leading dimensions as
 * given. */
#include <limits.h>
#include <stdlib.h>

#include "devices/cuda/cuda_libs.h"
#include "native.h"

#define DPTR(i) ((void *)args[i].mem)
#define F64(i) (args[i].dtype == MZ_F64)

/* The stream's handle, created at its first use, set to this stream. */
static int handle(const struct mz__cu_env *env, cublasPointerMode_t mode, cublasHandle_t *out, char **why) {
  const struct mz__cublas_api *b = env->blas_api;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (!*env->blas) {
    cublasHandle_t h = NULL;
    st = b->Create(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
      *why = mz__strdupf("cublasCreate failed with status %d", (int)st);
      return st == CUBLAS_STATUS_ALLOC_FAILED ? MZ_ENOMEM : MZ_EDEVICE;
    }
    *env->blas = h;
  }
  *out = *env->blas;
  st = b->SetStream(*out, (cudaStream_t)env->stream);
  if (st == CUBLAS_STATUS_SUCCESS) st = b->SetPointerMode(*out, mode);
  if (st != CUBLAS_STATUS_SUCCESS) {
    *why = mz__strdupf("cublasSetStream failed with status %d", (int)st);
    return MZ_EDEVICE;
  }
  return 0;
}

static int status(cublasStatus_t st, const char *what, char **why) {
  if (st == CUBLAS_STATUS_SUCCESS) return 0;
  *why = mz__strdupf("cublas%s failed with status %d", what, (int)st);
  return st == CUBLAS_STATUS_ALLOC_FAILED ? MZ_ENOMEM : MZ_EKERNEL;
}

/* cuBLAS's sizes are int. */
static bool fits(uint64_t v) { return v <= INT_MAX; }
static int too_big(const char *what, char **why) {
  *why = mz__strdupf("cublas%s: a size or leading dimension above INT_MAX", what);
  return MZ_ESHAPE;
}

/* u32 ta, u32 tb, u64 m, u64 n, u64 k, T alpha, in A, u64 lda, in B, u64 ldb, T beta, inout C, u64 ldc */
static int gemm(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned n, char **why) {
  const struct mz__cublas_api *b = env->blas_api;
  cublasHandle_t h;
  int rc = handle(env, CUBLAS_POINTER_MODE_HOST, &h, why);
  if (rc) return rc;
  cublasOperation_t ta = args[0].value.u32 ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = args[1].value.u32 ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint64_t m = args[2].value.u64, nn = args[3].value.u64, k = args[4].value.u64;
  uint64_t lda = args[7].value.u64, ldb = args[9].value.u64, ldc = args[12].value.u64;
  if (!fits(m) || !fits(nn) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc)) return too_big("gemm", why);
  if (F64(11))
    return status(b->Dgemm(h, tb, ta, (int)nn, (int)m, (int)k, &args[5].value.f64, DPTR(8), (int)ldb, DPTR(6),
                           (int)lda, &args[10].value.f64, DPTR(11), (int)ldc),
                  "Dgemm", why);
  return status(b->Sgemm(h, tb, ta, (int)nn, (int)m, (int)k, &args[5].value.f32, DPTR(8), (int)ldb, DPTR(6), (int)lda,
                         &args[10].value.f32, DPTR(11), (int)ldc),
                "Sgemm", why);
}

/* in x, out y, u64 n */
static int copy(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned n, char **why) {
  cublasHandle_t h;
  int rc = handle(env, CUBLAS_POINTER_MODE_HOST, &h, why);
  if (rc) return rc;
  if (!fits(args[2].value.u64)) return too_big("copy", why);
  int c = (int)args[2].value.u64;
  if (F64(0)) return status(env->blas_api->Dcopy(h, c, DPTR(0), 1, DPTR(1), 1), "Dcopy", why);
  return status(env->blas_api->Scopy(h, c, DPTR(0), 1, DPTR(1), 1), "Scopy", why);
}

/* T alpha, inout x, u64 n */
static int scal(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned n, char **why) {
  cublasHandle_t h;
  int rc = handle(env, CUBLAS_POINTER_MODE_HOST, &h, why);
  if (rc) return rc;
  if (!fits(args[2].value.u64)) return too_big("scal", why);
  int c = (int)args[2].value.u64;
  if (F64(1)) return status(env->blas_api->Dscal(h, c, &args[0].value.f64, DPTR(1), 1), "Dscal", why);
  return status(env->blas_api->Sscal(h, c, &args[0].value.f32, DPTR(1), 1), "Sscal", why);
}

/* T alpha, in x, inout y, u64 n */
static int axpy(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned n, char **why) {
  cublasHandle_t h;
  int rc = handle(env, CUBLAS_POINTER_MODE_HOST, &h, why);
  if (rc) return rc;
  if (!fits(args[3].value.u64)) return too_big("axpy", why);
  int c = (int)args[3].value.u64;
  if (F64(1)) return status(env->blas_api->Daxpy(h, c, &args[0].value.f64, DPTR(1), 1, DPTR(2), 1), "Daxpy", why);
  return status(env->blas_api->Saxpy(h, c, &args[0].value.f32, DPTR(1), 1, DPTR(2), 1), "Saxpy", why);
}

/* in x, in y, out r, u64 n: the result stays on the device (pointer mode
 * device), so the call does not wait for the stream. */
static int dot(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned n, char **why) {
  cublasHandle_t h;
  int rc = handle(env, CUBLAS_POINTER_MODE_DEVICE, &h, why);
  if (rc) return rc;
  if (!fits(args[3].value.u64)) return too_big("dot", why);
  int c = (int)args[3].value.u64;
  if (F64(0)) return status(env->blas_api->Ddot(h, c, DPTR(0), 1, DPTR(1), 1, DPTR(2)), "Ddot", why);
  return status(env->blas_api->Sdot(h, c, DPTR(0), 1, DPTR(1), 1, DPTR(2)), "Sdot", why);
}

const struct mz__cu_native mz__cu_cublas[MZ__NAT_COUNT] = {
    [MZ__NAT_GEMM] = {.library = "cuBLAS", .lib = MZ__CU_CUBLAS, .enqueue = gemm},
    [MZ__NAT_COPY] = {.library = "cuBLAS", .lib = MZ__CU_CUBLAS, .enqueue = copy},
    [MZ__NAT_SCAL] = {.library = "cuBLAS", .lib = MZ__CU_CUBLAS, .enqueue = scal},
    [MZ__NAT_AXPY] = {.library = "cuBLAS", .lib = MZ__CU_CUBLAS, .enqueue = axpy},
    [MZ__NAT_DOT] = {.library = "cuBLAS", .lib = MZ__CU_CUBLAS, .enqueue = dot},
    /* the sum is a kernel of ops_cuda.cu: cuBLAS sums absolute values only */
};
