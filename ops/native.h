/* Internal: the "native" implementation slot that canned operations use on
 * OpenCL devices.
 *
 * A canned op's OpenCL implementation is not OpenCL C but a host function
 * that enqueues library calls (CLBlast) on the node's queue.  The kernel
 * spec carries it as opencl.format == MZ__CODE_NATIVE with opencl.data
 * pointing to a const struct mz__ocl_native (static storage, never freed).
 * The value is outside the public mz_code_format enum on purpose: only the
 * library's own kernels can carry it, so the public kernel spec is
 * unchanged.  The OpenCL backend runs such a kernel wherever the struct is
 * present (can_run), prepares it without building anything, and calls
 * enqueue in place of clEnqueueNDRangeKernel. */
#ifndef MAIZE_OPS_NATIVE_H
#define MAIZE_OPS_NATIVE_H

#include "maize/kernel.h"
#include "device_ops.h"

struct mz__cuda_api;
struct mz__cublas_api;
struct mz__cufft_api;

#define MZ__CODE_NATIVE ((mz_code_format)0x4e)

struct mz__ocl_native {
  const char *library; /* the library it calls, for messages ("CLBlast") */
  /* Enqueue the node's work on queue (a cl_command_queue, in order).
   * Called on the submission thread that owns the queue, with no maize lock
   * held.  The backend has already ordered the queue after the node's wait
   * list and transfers, so the function only enqueues.  args are the node's
   * arguments in parameter order (a buffer's cl_mem in args[i].mem).
   * On success it returns 0 and gives the caller, through *event, a
   * cl_event (owned by the caller, released by the backend) that completes
   * when the node's work has; *event may stay NULL, and the backend then
   * places a marker.  On failure it returns a negative MZ_E* code and a
   * malloc'd message in *why; nothing it enqueued is waited for. */
  int (*enqueue)(void *queue, void **state, const struct mz__xarg *args, unsigned nargs, void **event, char **why);
  /* state: the implementation's own data for this kernel and device
   * (*state is NULL at the first call; whatever enqueue stores there is
   * kept for later calls on the same device, which come from the same
   * submission thread, and is handed to state_free when the kernel's
   * device copy is freed, before the device itself).  NULL state_free:
   * the implementation keeps nothing. */
  void (*state_free)(void *state);
};

/* The CLBlast implementations (ops/ops_clblast.c), when built with it. */
enum mz__native_id { MZ__NAT_GEMM, MZ__NAT_COPY, MZ__NAT_SCAL, MZ__NAT_AXPY, MZ__NAT_DOT, MZ__NAT_SUM, MZ__NAT_COUNT };
extern const struct mz__ocl_native mz__ocl_clblast[MZ__NAT_COUNT];
/* The FFT through clFFT (ops/ops_clfft.c), when built with it. */
extern const struct mz__ocl_native mz__ocl_clfft;

/* ---- CUDA ----
 * A canned op's CUDA implementation is either PTX (ops_cuda.cu, embedded)
 * or, like on OpenCL, a host function that enqueues library calls (cuBLAS,
 * cuFFT) on the node's stream: cuda.format == MZ__CODE_NATIVE with
 * cuda.data pointing to a const struct mz__cu_native.  The CUDA backend
 * runs such a kernel on a device where the library loaded (can_run), and
 * calls enqueue in place of cuLaunchKernel. */
enum mz__cu_lib { MZ__CU_CUBLAS, MZ__CU_CUFFT };

/* What an implementation may use, for one call: the driver and library
 * tables (devices/cuda/cuda_libs.h; the one it needs is loaded), the
 * node's stream (a CUstream, in order, already ordered after the node's
 * waits and transfers), the stream's cuBLAS handle slot (*blas is NULL
 * until the first call creates it; the backend destroys it with the
 * stream). */
struct mz__cu_env {
  const struct mz__cuda_api *drv;
  const struct mz__cublas_api *blas_api;
  const struct mz__cufft_api *fft_api;
  void *stream;
  void **blas;
};

struct mz__cu_native {
  const char *library;   /* for messages ("cuBLAS") */
  enum mz__cu_lib lib;   /* the library it needs */
  /* Enqueue the node's work on env->stream.  Called on the device's
   * submission thread with its context current and no maize lock held.
   * args as for OpenCL (a buffer's CUdeviceptr in args[i].mem).  *state:
   * as for OpenCL, per kernel and device.  Returns 0, or a negative MZ_E*
   * code with a malloc'd message in *why. */
  int (*enqueue)(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned nargs, char **why);
  /* Free *state (may be NULL: keeps nothing), on a thread with the
   * device's context current, after the kernel's last use on the device. */
  void (*state_free)(const struct mz__cu_env *env, void *state);
};

/* cuBLAS (ops/ops_cublas.c) and cuFFT (ops/ops_cufft.c), when built. */
extern const struct mz__cu_native mz__cu_cublas[MZ__NAT_COUNT];
extern const struct mz__cu_native mz__cu_cufft;
/* Why lib did not load on dev (a sentence), or NULL when it did or dev is
 * not a CUDA device.  Only in builds with the CUDA backend (MZ_HAVE_CUDA);
 * any thread. */
const char *mz__cuda_lib_missing(const struct mz_device *dev, enum mz__cu_lib lib);

/* ops_cuda.cu as PTX text, NUL-terminated (ops/ops_cuda_ptx.c). */
extern const char mz__ops_cuda_ptx[];

#endif
