/* maize: kernels.
 *
 * A kernel is one computation described once: its name, its parameter list
 * with directions, and one implementation per platform (a C function for the
 * CPU, OpenCL C or a binary, CUDA PTX or cubin).  The runtime picks the
 * implementation that fits the device a node is placed on.
 *
 * The parameter list is a string of comma-separated parameters:
 *
 *   [direction] type[] name    a buffer; direction is in, out, inout or
 *                              outlike(ref); "[]" takes 1 to 3 dims,
 *                              "[1]", "[2]" or "[3]" exactly that many
 *                              (mz_apply refuses others with MZ_ESHAPE)
 *   type name                  a scalar given by the caller
 *   type name = sizeof(ref)    a scalar computed from a buffer's shape:
 *   type name = widthof(ref)   sizeof is the element count, widthof
 *   type name = heightof(ref)  dims[0], heightof dims[1]
 *
 * type is i8 u8 i16 u16 i32 u32 i64 u64 f32 f64; ref is a parameter's name
 * or its 0-based index.  in is read (copied to the device when its copy is
 * stale), out is written whole (never copied in), inout both.  outlike(ref)
 * is a new buffer shaped like ref, allocated by the runtime.  Example:
 *
 *   "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(x)"
 *
 * The caller of mz_apply() gives values only for buffers and plain scalars;
 * outlike and computed parameters are filled in by the runtime. */
#ifndef MAIZE_KERNEL_H
#define MAIZE_KERNEL_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

/* What an implementation receives for one call. */
typedef struct mz_call {
  const mz_kernel *kernel;  /* NULL for a host node */
  unsigned nargs;           /* every parameter, computed ones included */
  const mz_arg *args;       /* args[i]: buffer pointer or scalar value */
  const mz_shape *shapes;   /* shapes[i]: the buffer's shape; count 0 for scalars */
  void *user;               /* the implementation's user pointer */
  unsigned queue;           /* the runtime-wide queue running the call */
} mz_call;

/* A CPU implementation, or a host node's function.  Runs on a CPU worker.
 * Returns 0 on success; any other value fails the node with MZ_EKERNEL,
 * the value itself in the future's message (its dependents get
 * MZ_ECANCELED).  The value is never read as a status of the runtime's, so
 * a function may return any code of its own.  It must not block on maize
 * calls. */
typedef int (*mz_cpu_fn)(const mz_call *call);

/* Where the code for one platform is. */
typedef enum mz_code_format {
  MZ_CODE_NONE = 0,   /* no implementation for this platform */
  MZ_CODE_SOURCE,     /* OpenCL C text */
  MZ_CODE_BINARY,     /* OpenCL program binary (device specific) */
  MZ_CODE_PTX,        /* CUDA PTX text */
  MZ_CODE_CUBIN,      /* CUDA cubin or fatbin */
} mz_code_format;

typedef struct mz_code_spec {
  mz_code_format format;
  const void *data;     /* the code in memory, or NULL to read path */
  size_t size;          /* bytes of data; 0 for NUL-terminated text */
  const char *path;     /* the code on disk, when data is NULL */
  const char *options;  /* build options (clBuildProgram) or NULL */
  const char *entry;    /* function name in the code; NULL: the kernel's name */
} mz_code_spec;

/* Cost hints for simulated devices and cost models (optional).  A kernel
 * with a cost (any field set) is costed by formula on devices that model
 * costs (the simulator): flops / speed, or bytes / memory bandwidth when
 * that is longer.  Kernels without one are timed and learned (perf models). */
typedef struct mz_cost_spec {
  double flops_per_elem;  /* floating-point operations per element of the first written buffer */
  double bytes_per_elem;  /* bytes touched per element */
  /* The flops of one call, when they depend on its arguments (a scalar, a
   * shape): called with the call's scalars and shapes (args[i].p is NULL
   * for buffers; user is NULL).  Overrides flops_per_elem.  Must be pure:
   * it may be called several times per node, from any thread. */
  double (*flops)(const mz_call *call);
} mz_cost_spec;

/* The kernel descriptor.  Copied by mz_kernel_create(): the spec and its
 * strings need not outlive the call, but code data given in memory must
 * stay valid until the kernel is destroyed. */
typedef struct mz_kernel_spec {
  const char *name;        /* required; used in traces, perf models, errors */
  const char *params;      /* required; see the grammar above */
  struct {
    mz_cpu_fn fn;          /* NULL: no CPU implementation */
    void *user;
  } cpu;
  mz_code_spec opencl;
  mz_code_spec cuda;
  mz_cost_spec cost;
} mz_kernel_spec;

/* Create a kernel.  The parameter list is parsed here; an error in it gives
 * MZ_EINVAL with a message naming the parameter (see mz_kernel_last_error
 * via mz_runtime_last_error()), and more than 65,535 parameters MZ_ERANGE.  Device code is built lazily, once per
 * device, the first time a node runs there.  On success the kernel is
 * freed by mz_kernel_destroy() (or by the runtime at its destruction). */
int mz_kernel_create(mz_runtime *rt, const mz_kernel_spec *spec, mz_kernel **out) MZ_WUR;

/* Build (or load) the kernel's device code now instead of at its first run:
 * for dev, or for every device of the runtime that has code for it when dev
 * is NULL (CPU and simulated devices need no build and always succeed).
 * The result is kept: a later run uses it, and a failed build fails that
 * device's nodes with the same error.  On failure *log (when log is not
 * NULL) receives a malloc'd text, freed with free(), holding each failing
 * device's name and its build log; on success *log is NULL.
 * Returns MZ_OK, MZ_EBUILD (a compile error), MZ_EIO (a missing code file),
 * MZ_ENOTSUP (dev has no code for this kernel), MZ_EINVAL (a bad handle, a
 * device of another runtime, a destroyed kernel) or MZ_EDEADLK (called from
 * a runtime thread).  Thread: any user thread; blocks while it compiles. */
int mz_kernel_build(mz_kernel *k, const mz_device *dev, char **log) MZ_WUR;

/* Free a kernel.  Graphs that use it keep it alive until they are
 * destroyed and their runs have finished.  NULL is a no-op, and so is a
 * second destroy while a graph still holds the kernel; mz_apply() refuses
 * the destroyed kernel (MZ_EINVAL, "not a live kernel"). */
void mz_kernel_destroy(mz_kernel *k);

/* The kernel's name and parameter count (computed parameters included). */
const char *mz_kernel_name(const mz_kernel *k);
unsigned mz_kernel_param_count(const mz_kernel *k);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
