/* maize: buffers.
 *
 * A buffer is typed memory of 1 to 3 dimensions that may have copies on
 * several devices.  The runtime tracks, per memory, whether a copy is the
 * owner (the only valid one), shared (valid, like others) or invalid, and
 * copies data only when an operation needs a copy it lacks.  Buffers are
 * reference counted: graphs and futures that use one hold a reference. */
#ifndef MAIZE_BUFFER_H
#define MAIZE_BUFFER_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

/* Create a buffer of ndim (1..3) dims, dims[0] fastest.  When data is not
 * NULL, count*size bytes are copied from it; otherwise the buffer is zeroed.
 * The caller holds one reference, dropped with mz_buffer_release().
 * Errors: MZ_EINVAL (NULL or dead rt, NULL out, bad dtype, ndim not 1..3,
 * a zero dimension, overflow), MZ_ENOMEM (no host memory, or larger than
 * every device's memory: refused here, before any allocation).  A buffer
 * that fits some device but not the one a node is placed on fails that
 * node with MZ_ENOMEM when it runs (its dependents are canceled).
 *
 * Buffer handles are checked: NULL, a handle of another kind and
 * a buffer already freed whose memory is still mapped give MZ_EINVAL (or a
 * NULL / no-op for retain, release, shape, bytes); see README.md, "Handles
 * that cannot be checked", for what cannot be detected. */
int mz_buffer_create(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[],
                     const void *data, mz_buffer **out) MZ_WUR;

/* Memory kinds, as flags of mz_buffer_create_ex (and what
 * mz_buffer_memory reports). */
enum {
  /* Page-locked host memory, given by the first device that can (OpenCL:
   * a CL_MEM_ALLOC_HOST_PTR buffer, mapped for the buffer's life), so that
   * transfers to and from devices need no staging copy.  Where no device
   * can, plain memory (mz_buffer_memory then lacks the flag). */
  MZ_BUFFER_PINNED = 1u << 0,
  /* Zero copy: a device that shares host memory (PoCL's CPU device, an
   * integrated GPU: device info unified_memory) uses the host copy itself
   * (OpenCL CL_MEM_USE_HOST_PTR) instead of a copy of its own, so running
   * there moves no bytes (the run statistics count no transfer).  Other
   * devices copy as usual.  Not with memory limits or fault injection on
   * (mz_runtime_config): those runtimes copy. */
  MZ_BUFFER_ZERO_COPY = 1u << 1,
  /* The host memory is the user's (mz_buffer_wrap); reported only. */
  MZ_BUFFER_WRAPPED = 1u << 2,
  /* Memory that the host and devices share: CUDA managed memory
   * (cuMemAllocManaged, from a CUDA device whose host and device may use it
   * at the same time, "concurrent managed access"), else OpenCL
   * fine-grained shared virtual memory (clSVMAlloc, on a device that
   * reports fine-grained buffer SVM, as PoCL's CPU device does).  Devices
   * that can use it in place do (CUDA devices for managed memory, and
   * every host-unified OpenCL device), so running there moves no bytes;
   * others copy.  Implies MZ_BUFFER_ZERO_COPY.  Where no device can
   * allocate it, plain zero-copy memory (mz_buffer_memory then lacks the
   * flag).  Not with memory limits or fault injection on: those runtimes
   * copy. */
  MZ_BUFFER_MANAGED = 1u << 3,
};

/* mz_buffer_create with memory flags (MZ_BUFFER_PINNED, MZ_BUFFER_ZERO_COPY,
 * MZ_BUFFER_MANAGED, or several; 0 is mz_buffer_create; MANAGED wins over
 * PINNED).  Errors: those of mz_buffer_create, and MZ_EINVAL for an
 * unknown flag. */
int mz_buffer_create_ex(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[], const void *data,
                        unsigned flags, mz_buffer **out) MZ_WUR;

/* A buffer over the user's memory, without a copy: ptr (count*size bytes)
 * becomes the buffer's host copy, with its current contents, and is never
 * freed by maize; it must stay valid until the last reference is released.
 * The buffer is zero copy (MZ_BUFFER_ZERO_COPY): devices that share host
 * memory use ptr in place.  While a run that uses the buffer is in flight
 * the user must not touch ptr.  ptr holds the latest contents again after
 * mz_buffer_read (dst may be ptr itself: nothing is copied) or after
 * mz_future_wait returns for a run that wrote the buffer (a run observed
 * only through poll, a callback or the file descriptor: call
 * mz_buffer_read).  After writing ptr directly, call mz_buffer_write(b,
 * ptr, bytes) so that device copies are dropped (nothing is copied).
 * Errors: those of mz_buffer_create; MZ_EINVAL for a NULL ptr. */
int mz_buffer_wrap(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[], void *ptr,
                   mz_buffer **out) MZ_WUR;

/* The MZ_BUFFER_* flags in effect for b (0 for plain memory or a bad handle). */
unsigned mz_buffer_memory(const mz_buffer *b);

/* Add and drop a reference.  The last release frees every copy.  NULL is a
 * no-op for both. */
mz_buffer *mz_buffer_retain(mz_buffer *b);
void mz_buffer_release(mz_buffer *b);

/* Copy the latest contents into dst (bytes must equal the buffer's size).
 * Blocks until every scheduled operation that writes the buffer has
 * finished, fetching the latest copy from its device if needed.  For a
 * partitioned buffer this includes the ops on its tiles: the result holds
 * what they wrote even before mz_unpartition runs.
 * Errors: MZ_EINVAL, MZ_EDEADLK (called from a runtime thread), or the
 * error of the operation that should have produced the data. */
int mz_buffer_read(mz_buffer *b, void *dst, size_t bytes) MZ_WUR;

/* Replace the contents from src (bytes must equal the buffer's size), after
 * every scheduled operation that uses the buffer has finished.  The host
 * copy becomes the owner; device copies become invalid. */
int mz_buffer_write(mz_buffer *b, const void *src, size_t bytes) MZ_WUR;

/* The shape and the size in bytes. */
const mz_shape *mz_buffer_shape(const mz_buffer *b);
size_t mz_buffer_bytes(const mz_buffer *b);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
