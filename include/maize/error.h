/* maize: error codes.
 *
 * Every maize call that can fail returns MZ_OK (0) or one negative code from
 * the list below.  The list is an X-macro, so the enum, mz_strerror() and
 * mz_err_name() can never disagree (libuv's UV_ERRNO_MAP does the same). */
#ifndef MAIZE_ERROR_H
#define MAIZE_ERROR_H

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

#define MZ_ERRNO_MAP(X)                                                        \
  X(OK, 0, "success")                                                          \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(ENODEV, -3, "no enabled device can run this operation")                    \
  X(ECANCELED, -4, "canceled because an operation it depends on failed")       \
  X(ECYCLE, -5, "the graph has a cycle")                                       \
  X(EBUILD, -6, "kernel build or load failed")                                 \
  X(EKERNEL, -7, "kernel failed at run time")                                  \
  X(ETIMEDOUT, -8, "timed out")                                                \
  X(EAGAIN, -9, "not finished yet")                                            \
  X(ENOENT, -10, "no such name")                                               \
  X(EDEVICE, -11, "device failed")                                             \
  X(EDEADLK, -12, "blocking call from a runtime thread would deadlock")        \
  X(ESHAPE, -13, "buffer shape or type does not match the kernel")             \
  X(ELOAD, -14, "library or symbol could not be loaded")                       \
  X(ENOTSUP, -15, "operation not supported here")                              \
  X(EIO, -16, "input/output error")                                            \
  X(EPOLICY, -17, "the scheduling policy made an invalid decision")            \
  X(ESTATE, -18, "object is in the wrong state for this call")                 \
  X(ERANGE, -19, "index or value out of range")

/* The status codes.  Errors are negative; MZ_OK is zero. */
typedef enum mz_status {
#define MZ__ERR_ENUM(name, value, text) MZ_##name = (value),
  MZ_ERRNO_MAP(MZ__ERR_ENUM)
#undef MZ__ERR_ENUM
} mz_status;

/* A sentence describing code (for example "invalid argument").  Never NULL:
 * an unknown code gives "unknown error".  The string is static. */
const char *mz_strerror(int code);

/* The code's name without its prefix's underscore, e.g. "MZ_EINVAL".  Never
 * NULL: an unknown code gives "MZ_EUNKNOWN".  The string is static. */
const char *mz_err_name(int code);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
