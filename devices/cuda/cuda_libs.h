/* maize internals: cuBLAS and cuFFT, loaded at run time like the driver.
 *
 * The canned operations (ops/) call cuBLAS and cuFFT on CUDA devices.  As
 * with libcuda (cuda_loader.h), maize never links them: the CUDA backend
 * opens each with dlopen when it discovers its devices, and an op whose
 * library did not load is simply not runnable on a CUDA device.  The
 * tables are plain data in the backend's per-runtime state; there is no
 * global mutable state.
 *
 * Which file: $MZ_CUBLAS_LIBRARY (or $MZ_CUFFT_LIBRARY) when set, else the
 * soname of the major version the headers describe ("libcublas.so.13"),
 * else the unversioned development link ("libcublas.so").  The tests point
 * the variables at test doubles (tests/cuda_emu/) on machines without a
 * GPU.
 *
 * Entries are typed with __typeof__ of the headers' functions, under the
 * versioned names the headers map the plain names to (cublasSgemm is
 * cublasSgemm_v2). */
#ifndef MZ_CUDA_LIBS_H
#define MZ_CUDA_LIBS_H

#include <cuda.h>
#include <stddef.h>

#include "mz_config.h"

#if MZ_HAVE_CUBLAS
#include <cublas_v2.h>
/* X(field, symbol): every cuBLAS call maize makes. */
#define MZ_CUBLAS_API_MAP(X)                     \
  X(Create, cublasCreate_v2)                     \
  X(Destroy, cublasDestroy_v2)                   \
  X(SetStream, cublasSetStream_v2)               \
  X(SetPointerMode, cublasSetPointerMode_v2)     \
  X(Sgemm, cublasSgemm_v2)                       \
  X(Dgemm, cublasDgemm_v2)                       \
  X(Scopy, cublasScopy_v2)                       \
  X(Dcopy, cublasDcopy_v2)                       \
  X(Sscal, cublasSscal_v2)                       \
  X(Dscal, cublasDscal_v2)                       \
  X(Saxpy, cublasSaxpy_v2)                       \
  X(Daxpy, cublasDaxpy_v2)                       \
  X(Sdot, cublasSdot_v2)                         \
  X(Ddot, cublasDdot_v2)

struct mz__cublas_api {
  void *handle; /* dlopen's; NULL when cuBLAS did not load */
#define MZ__CUBLAS_FIELD(field, symbol) __typeof__(symbol) *field;
  MZ_CUBLAS_API_MAP(MZ__CUBLAS_FIELD)
#undef MZ__CUBLAS_FIELD
};
#else
struct mz__cublas_api {
  void *handle;
};
#endif

#if MZ_HAVE_CUFFT
#include <cufft.h>
#define MZ_CUFFT_API_MAP(X)          \
  X(PlanMany, cufftPlanMany)         \
  X(SetStream, cufftSetStream)       \
  X(ExecC2C, cufftExecC2C)           \
  X(ExecZ2Z, cufftExecZ2Z)           \
  X(Destroy, cufftDestroy)

struct mz__cufft_api {
  void *handle; /* NULL when cuFFT did not load */
#define MZ__CUFFT_FIELD(field, symbol) __typeof__(symbol) *field;
  MZ_CUFFT_API_MAP(MZ__CUFFT_FIELD)
#undef MZ__CUFFT_FIELD
};
#else
struct mz__cufft_api {
  void *handle;
};
#endif

/* Open cuBLAS (cuFFT) and fill *api.  Returns MZ_OK, or MZ_ELOAD with *api
 * zeroed and a sentence in err (the file that failed to open, or the
 * missing symbol); MZ_ENOTSUP when this build has no header for the
 * library.  Called by the CUDA backend's discovery.  A loaded library is
 * never closed: cuBLAS and cuFFT start threads and register with the
 * driver, as libcuda does, and dlopen of a loaded library only counts a
 * reference, so each runtime's load finds the same copy. */
int mz__cublas_load(struct mz__cublas_api *api, char *err, size_t errlen);
int mz__cufft_load(struct mz__cufft_api *api, char *err, size_t errlen);

#endif
