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

/* A malloc'd printf-formatted message (NULL when out of memory). */
char *mz__ops_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
