/* Canned operations on OpenCL devices through CLBlast's C API.  Each
 * function reads the node's arguments in the parameter order that
 * ops/ops.c gives its kernels and enqueues one CLBlast call on the node's
 * in-order queue; see ops/native.h for the contract. */
#define CL_TARGET_OPENCL_VERSION 120
#include <clblast_c.h>
#include <pthread.h>
#include <stdlib.h>

#include "native.h"

/* CLBlast 1.5 (Debian 12's) is not safe to call from two threads at once:
 * its process-wide caches of programs and tuning databases race when two
 * calls fill them together (CLBlast issue 486, fixed in 1.6), which
 * crashed maize-bench pipeline in one process in six with two PoCL
 * devices, whose submission threads call CLBlast at the same time.  So
 * every CLBlast call maize makes holds this lock.  A call only enqueues
 * (the work runs later on the queue), so the lock is held for
 * microseconds, except while CLBlast compiles a routine at its first use
 * on a device.  It guards the library's state, not maize's. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;


static int status(CLBlastStatusCode st, const char *what, char **why) {
  if (st == CLBlastSuccess) return 0;
  *why = mz__strdupf("CLBlast%s failed with status %d", what, (int)st);
  return MZ_EKERNEL;
}

#define MEM(i) ((cl_mem)args[i].mem)
#define F64(i) (args[i].dtype == MZ_F64)

/* u32 ta, u32 tb, u64 m, u64 n, u64 k, T alpha, in A, u64 lda, in B, u64 ldb, T beta, inout C, u64 ldc */
static int gemm(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  CLBlastTranspose ta = args[0].value.u32 ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = args[1].value.u32 ? CLBlastTransposeYes : CLBlastTransposeNo;
  size_t m = args[2].value.u64, nn = args[3].value.u64, k = args[4].value.u64;
  if (F64(11))
    return status(CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, m, nn, k, args[5].value.f64, MEM(6), 0, args[7].value.u64,
                               MEM(8), 0, args[9].value.u64, args[10].value.f64, MEM(11), 0, args[12].value.u64, &cq,
                               (cl_event *)ev),
                  "Dgemm", why);
  return status(CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, nn, k, args[5].value.f32, MEM(6), 0, args[7].value.u64,
                             MEM(8), 0, args[9].value.u64, args[10].value.f32, MEM(11), 0, args[12].value.u64, &cq,
                             (cl_event *)ev),
                "Sgemm", why);
}

/* in x, out y, u64 n */
static int copy(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  size_t c = args[2].value.u64;
  if (F64(0)) return status(CLBlastDcopy(c, MEM(0), 0, 1, MEM(1), 0, 1, &cq, (cl_event *)ev), "Dcopy", why);
  return status(CLBlastScopy(c, MEM(0), 0, 1, MEM(1), 0, 1, &cq, (cl_event *)ev), "Scopy", why);
}

/* T alpha, inout x, u64 n */
static int scal(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  size_t c = args[2].value.u64;
  if (F64(1)) return status(CLBlastDscal(c, args[0].value.f64, MEM(1), 0, 1, &cq, (cl_event *)ev), "Dscal", why);
  return status(CLBlastSscal(c, args[0].value.f32, MEM(1), 0, 1, &cq, (cl_event *)ev), "Sscal", why);
}

/* T alpha, in x, inout y, u64 n */
static int axpy(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  size_t c = args[3].value.u64;
  if (F64(1))
    return status(CLBlastDaxpy(c, args[0].value.f64, MEM(1), 0, 1, MEM(2), 0, 1, &cq, (cl_event *)ev), "Daxpy", why);
  return status(CLBlastSaxpy(c, args[0].value.f32, MEM(1), 0, 1, MEM(2), 0, 1, &cq, (cl_event *)ev), "Saxpy", why);
}

/* in x, in y, out r, u64 n */
static int dot(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  size_t c = args[3].value.u64;
  if (F64(0)) return status(CLBlastDdot(c, MEM(2), 0, MEM(0), 0, 1, MEM(1), 0, 1, &cq, (cl_event *)ev), "Ddot", why);
  return status(CLBlastSdot(c, MEM(2), 0, MEM(0), 0, 1, MEM(1), 0, 1, &cq, (cl_event *)ev), "Sdot", why);
}

/* in x, out r, u64 n */
static int sum(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  cl_command_queue cq = q;
  size_t c = args[2].value.u64;
  if (F64(0)) return status(CLBlastDsum(c, MEM(1), 0, MEM(0), 0, 1, &cq, (cl_event *)ev), "Dsum", why);
  return status(CLBlastSsum(c, MEM(1), 0, MEM(0), 0, 1, &cq, (cl_event *)ev), "Ssum", why);
}

#define LOCKED(f)                                                                                             \
  static int f##_locked(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) { \
    pthread_mutex_lock(&clblast_lock);                                                                        \
    int rc = f(q, state, args, n, ev, why);                                                                   \
    pthread_mutex_unlock(&clblast_lock);                                                                      \
    return rc;                                                                                                \
  }
LOCKED(gemm)
LOCKED(copy)
LOCKED(scal)
LOCKED(axpy)
LOCKED(dot)
LOCKED(sum)

const struct mz__ocl_native mz__ocl_clblast[MZ__NAT_COUNT] = {
    [MZ__NAT_GEMM] = {.library = "CLBlast", .enqueue = gemm_locked},
    [MZ__NAT_COPY] = {.library = "CLBlast", .enqueue = copy_locked},
    [MZ__NAT_SCAL] = {.library = "CLBlast", .enqueue = scal_locked},
    [MZ__NAT_AXPY] = {.library = "CLBlast", .enqueue = axpy_locked},
    [MZ__NAT_DOT] = {.library = "CLBlast", .enqueue = dot_locked},
    [MZ__NAT_SUM] = {.library = "CLBlast", .enqueue = sum_locked},
};
