/* maize: the OpenCL backend.
 *
 * Every platform and device the ICD loader reports becomes one maize device
 * with several in-order command queues.  The devices of one platform share
 * one cl_context (one per platform and runtime), so that an edge between
 * two of them is an event in a wait list and a buffer moves between them
 * with clEnqueueCopyBuffer, never through the host.
 *
 * Threads.  The core gives each OpenCL device a submission thread
 * (inline_submit is false), so submit, queue_init and mem_alloc for one
 * device never run concurrently, and one cl_kernel per kernel and device is
 * enough even though clSetKernelArg is not thread safe.  mem_read and
 * mem_write may come from any worker thread: they use a separate "I/O"
 * queue of the device, and the core guarantees that no kernel touches the
 * buffer meanwhile.  Completion comes from one clSetEventCallback per
 * batch, on an OpenCL runtime thread; that callback makes no blocking
 * OpenCL call (the specification forbids it) and hands the batch to the
 * submission thread (mz__batch_done_later), which ends its nodes.
 *
 * Events.  A command gets an event of its own only where one is needed:
 * the last of a batch (its completion callback), the first when the batch
 * is timed (its start), a node of a timed run (its own times: observed,
 * mz_runtime_config.timings, a policy with done()),
 * a node that a node other than the next command of its batch waits for
 * (on another queue, or in a later batch: mz__exec_waited_apart),
 * canned library calls and markers.  Hand-written host code asks for
 * none, and on PoCL 3.1 an event kept per node cost about 1,000
 * instructions in all (at enqueue, the status query at completion, the
 * release; callgrind), more than maize's planning of the node.  Another
 * node of the batch borrows the next event after it on its in-order queue
 * (EV_BORROWED): a node on another queue that must wait for it waits for
 * that later command, which never waits for the waiter (it was enqueued
 * before it), and the node's status is that command's.  A node without
 * times of its own gets an equal share of its batch's span (see
 * batch_complete and struct ocl_queue), as the CUDA backend does.
 *
 * Copy engine.  Each device has one more in-order queue for the copies
 * into its memory that nodes need (struct mz__exec's xfers): they are
 * enqueued there when the node is submitted (those from other devices
 * after the node's wait list, those from host memory at once), and the
 * node's kernel waits for the last one's event, so the copies for
 * the next nodes run while the kernels before them do (on a GPU, its DMA
 * engines; on PoCL's CPU device, another host thread).  MZ_COPY_ENGINE=0
 * puts them back on the node's own queue, before its kernel.
 *
 * Failures.  A command the implementation refuses at enqueue time (for
 * example a work-group size above the device's maximum) fails only its
 * node: the node gets a marker instead of the kernel so that its event
 * still orders what waits for it, and the rest of the batch goes on.  A
 * command whose event ends with a negative status fails its node with
 * MZ_EKERNEL and marks the device dead, as the OpenCL specification leaves
 * the context in an undefined state after such an error; the commands
 * after it on the same in-order queue report MZ_ECANCELED. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "ops/native.h"

#define OCL_DEFAULT_QUEUES 4u

/* One cl_context shared by the devices of one platform within a runtime.
 * Reference counted by those devices; the last destroy releases it. */
struct ocl_ctx {
  cl_context ctx;
  cl_platform_id platform;
  _Atomic unsigned refs;
  bool cl2;                  /* clCreateCommandQueueWithProperties exists */
};

/* The backend's state for one device (dev->priv). */
struct ocl_dev {
  struct ocl_ctx *ctx;
  cl_device_id id;
  cl_command_queue io;       /* for the synchronous mem_read and mem_write */
  cl_command_queue copy;     /* the copy engine's queue (submission thread only), or NULL */
  cl_ulong max_alloc;        /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  cl_ulong global_mem;       /* CL_DEVICE_GLOBAL_MEM_SIZE */
  cl_uint base_align;        /* CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes */
  _Atomic uint64_t allocated; /* bytes of live buffers from mem_alloc */
  _Atomic uint64_t freed;     /* mem_free calls: a freed cl_mem's address may come back */
  bool unified;              /* CL_DEVICE_HOST_UNIFIED_MEMORY */
  bool svm_fine;             /* fine-grained buffer SVM (MZ_BUFFER_MANAGED) */
  bool use_map;              /* mem_read/mem_write go through map/unmap */
  bool profiling;            /* queues record start/end times */
};

#define OCL_ARG_MEMO 16 /* arguments whose last bound value is remembered */

/* A kernel prepared for one device (the kdev handle). */
struct ocl_kernel {
  cl_program program;
  cl_kernel kernel;
  const struct mz__ocl_native *native; /* a canned op's library call (ops/native.h), or NULL */
  void *native_state;                  /* the library call's own data (plans), or NULL */
  /* The argument values last bound to kernel (submission thread only):
   * a chain of nodes running the same kernel on the same buffers binds
   * them once.  args_known has bit i when args_last[i] holds argument i's
   * bits; args_freed is the device's freed count then. */
  uint64_t args_last[OCL_ARG_MEMO];
  uint32_t args_known;
  uint64_t args_freed;
};

extern const struct mz__devtype mz__devtype_opencl;

/* The OpenCL state of a device. */
static inline struct ocl_dev *ocl_of(const struct mz_device *dev) { return dev->priv; }

/* The OpenCL side of one maize queue (struct mz__queue's priv).  Two
 * in-order command queues: one that keeps no timestamps, for batches
 * nobody observes, and one with CL_QUEUE_PROFILING_ENABLE (NULL where the
 * device has none) for batches with a node of a timed run (see
 * mz__exec_timed), whose nodes and copies are measured.  A queue that keeps timestamps reads the clock about three
 * times per command (PoCL 3.1: at enqueue, and at start and end on the
 * threads that run the kernels), at 130-170 ns a read in a VM: about a
 * fifth of what PoCL spends per small kernel in all, where hand-written
 * host code asks for no timestamps.  A batch goes to the queue that fits
 * it; when that is not the queue of the batch before, a marker there and
 * a barrier on the new one keep the maize queue in order (the submission
 * thread makes every call on both, so nothing slips in between). */
struct ocl_queue {
  cl_command_queue plain;
  cl_command_queue timed;
  cl_command_queue cur;       /* the last batch's (submission thread only) */
  _Atomic uint64_t last_end;  /* host time the last completed batch ended */
};

/* A node's event (struct mz__xdev's event) is its own command's, or one
 * it borrows from a later command of its batch.  A borrowed event of a
 * node of the same run as its owner is marked with this low bit and not
 * retained (the owner's release frees it, when the run is torn down, after
 * every node of the run that could wait for it); one borrowed across runs
 * is retained and released like an own event. */
#define EV_BORROWED ((uintptr_t)1)

static inline cl_event ev_of(const struct mz__exec *e)
{
  return (cl_event)((uintptr_t)mz__exec_xd(e)->event & ~EV_BORROWED);
}

/* The name of an OpenCL error code, for messages; never NULL. */
static const char *cl_err_name(cl_int err)
{
  switch (err) {
#define E(x) \
  case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_BUILD_PROGRAM_FAILURE)
    E(CL_MAP_FAILURE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) E(CL_COMPILE_PROGRAM_FAILURE)
    E(CL_LINK_PROGRAM_FAILURE) E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE)
    E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
    E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
    E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT)
    E(CL_INVALID_OPERATION) E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE)
    E(CL_INVALID_PROPERTY) E(CL_PLATFORM_NOT_FOUND_KHR)
#undef E
  default: return "CL_UNKNOWN_ERROR";
  }
}

/* The maize code for an OpenCL error of a memory or enqueue call. */
static int cl_to_mz(cl_int err)
{
  switch (err) {
  case CL_SUCCESS: return MZ_OK;
  case CL_MEM_OBJECT_ALLOCATION_FAILURE:
  case CL_OUT_OF_HOST_MEMORY:
  case CL_OUT_OF_RESOURCES:
  case CL_INVALID_BUFFER_SIZE: return MZ_ENOMEM;
  case CL_DEVICE_NOT_AVAILABLE: return MZ_EDEVICE;
  default: return MZ_EKERNEL;
  }
}

/* A malloc'd printf result, or NULL when out of memory. */
__attribute__((format(printf, 1, 2))) static char *str_printf(const char *fmt, ...)
{
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s)
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

/* Copy a string device or platform parameter into buf (always terminated). */
static void dev_string(cl_device_id id, cl_device_info what, char *buf, size_t size)
{
  if (clGetDeviceInfo(id, what, size, buf, NULL) != CL_SUCCESS)
    buf[0] = '\0';
  buf[size - 1] = '\0';
}

/* Drop one reference to a shared context; the last one releases it. */
static void ctx_release(struct ocl_ctx *c)
{
  if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
    clReleaseContext(c->ctx);
    free(c);
  }
}

/* Find the context an earlier discover call of this runtime made for
 * platform p ("opencl:0,opencl:1" discovers twice), so that all devices of
 * a platform share one context whichever way they were selected.  Returns
 * it with a new reference, or NULL. */
static struct ocl_ctx *ctx_find(mz_runtime *rt, cl_platform_id p)
{
  unsigned n = mz_runtime_device_count(rt);
  for (unsigned i = 0; i < n; i++) {
    mz_device *d = mz_runtime_device(rt, i);
    if (d && d->type == &mz__devtype_opencl && d->priv && ocl_of(d)->ctx->platform == p) {
      atomic_fetch_add(&ocl_of(d)->ctx->refs, 1);
      return ocl_of(d)->ctx;
    }
  }
  return NULL;
}

/* Create one context holding every device of platform p.  All devices go
 * in, even those not selected, so that a later discover call can add them
 * to the same context. */
static struct ocl_ctx *ctx_create(cl_platform_id p, cl_uint ndev, const cl_device_id *ids)
{
  struct ocl_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  cl_context_properties props[] = { CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0 };
  cl_int err;
  c->ctx = clCreateContext(props, ndev, ids, NULL, NULL, &err);
  if (!c->ctx) {
    free(c);
    return NULL;
  }
  c->platform = p;
  atomic_init(&c->refs, 1);
  char ver[64] = "";
  clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof ver - 1, ver, NULL);
  /* "OpenCL 1.x ..." lacks clCreateCommandQueueWithProperties. */
  c->cl2 = strncmp(ver, "OpenCL 1.", 9) != 0;
  return c;
}

/* Create an in-order command queue on the device, with profiling on
 * request (it is a few clock reads per command: see struct ocl_queue). */
static cl_command_queue queue_create(struct ocl_dev *od, bool profiling, cl_int *err)
{
  cl_command_queue_properties qp = profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
  if (od->ctx->cl2) {
    cl_queue_properties props[] = { CL_QUEUE_PROPERTIES, qp, 0 };
    return clCreateCommandQueueWithProperties(od->ctx->ctx, od->id, qp ? props : NULL, err);
  }
  return clCreateCommandQueue(od->ctx->ctx, od->id, qp, err);
}

/* Add one OpenCL device to the runtime.  Returns MZ_OK or a negative code
 * (the device is then not added). */
static int device_open(mz_runtime *rt, const struct mz__devtype *type, struct ocl_ctx *ctx,
                       cl_device_id id, unsigned nqueues)
{
  struct ocl_dev *od = calloc(1, sizeof *od);
  if (!od)
    return MZ_ENOMEM;
  od->ctx = ctx;
  od->id = id;
  atomic_init(&od->allocated, 0);
  cl_bool unified = CL_FALSE;
  cl_device_type dtype = 0;
  cl_uint cus = 0;
  cl_command_queue_properties qprops = 0;
  clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof dtype, &dtype, NULL);
  /* CL_DEVICE_HOST_UNIFIED_MEMORY is deprecated since OpenCL 2.0; a CPU
   * device shares host memory when the query is refused. */
  if (clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) != CL_SUCCESS)
    unified = (dtype & CL_DEVICE_TYPE_CPU) != 0;
  clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof od->global_mem, &od->global_mem, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof od->max_alloc, &od->max_alloc, NULL);
  clGetDeviceInfo(id, CL_DEVICE_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
  cl_uint align_bits = 0;
  clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  od->base_align = align_bits >= 8 ? align_bits / 8 : 1;
  od->unified = unified;
  /* Fine-grained buffer SVM (OpenCL 2.0 and later; the query fails on 1.x):
   * host and device may use such memory without a map, for
   * MZ_BUFFER_MANAGED. */
  cl_device_svm_capabilities svm = 0;
  if (od->ctx->cl2 && clGetDeviceInfo(id, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL) != CL_SUCCESS)
    svm = 0;
  od->svm_fine = (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
  od->profiling = (qprops & CL_QUEUE_PROFILING_ENABLE) != 0;
  /* Synchronous transfers through map/unmap are opt-in (MZ_OPENCL_MAP=1,
   * host-unified devices only).  Both ways cost one memcpy, since the host
   * side is memory the core owns, and map/unmap takes two commands and a
   * wait where a read or write takes one.  Measured on PoCL 3.1 (pthread,
   * blocking, ns per call): 4 KiB write 19,700 vs map 38,300, read 19,300
   * vs 39,200; 1 MiB write 81,900 vs 134,100, read 83,000 vs 102,200;
   * 16 MiB write 2.84 ms vs 2.64 ms, read 2.38 ms vs 3.11 ms.  A driver
   * that stages reads and writes through a bounce buffer may differ. */
  const char *map_env = getenv("MZ_OPENCL_MAP");
  od->use_map = unified && map_env && map_env[0] == '1';

  cl_int err;
  od->io = queue_create(od, false, &err);
  if (!od->io) {
    free(od);
    return mz__set_error(rt, MZ_EDEVICE, "opencl: clCreateCommandQueue: %s", cl_err_name(err));
  }
  /* The copy engine's queue, timed as the device's queues are. */
  const char *ce = getenv("MZ_COPY_ENGINE");
  if (!(ce && ce[0] == '0' && !ce[1])) {
    od->copy = queue_create(od, od->profiling, &err);
    if (!od->copy && od->profiling)
      od->copy = queue_create(od, false, &err);
    if (!od->copy)
      mz__warn(rt, "opencl: no copy queue (%s): copies run on the nodes' queues", cl_err_name(err));
  }
  struct mz_device *dev = mz__device_add(rt, type, nqueues, od);
  if (!dev) {
    if (od->copy)
      clReleaseCommandQueue(od->copy);
    clReleaseCommandQueue(od->io);
    free(od);
    return MZ_ENOMEM;
  }
  dev->copy_engine = od->copy != NULL;
  atomic_fetch_add(&ctx->refs, 1);
  dev_string(id, CL_DEVICE_NAME, dev->name_buf, sizeof dev->name_buf);
  dev_string(id, CL_DEVICE_VENDOR, dev->vendor_buf, sizeof dev->vendor_buf);
  dev_string(id, CL_DEVICE_VERSION, dev->version_buf, sizeof dev->version_buf);
  dev->info.name = dev->name_buf;
  dev->info.vendor = dev->vendor_buf;
  dev->info.version = dev->version_buf;
  dev->info.memory = od->global_mem;
  dev->info.compute_units = cus;
  dev->info.numa_node = -1;
  dev->info.queues = nqueues;
  dev->info.unified_memory = unified;
  /* A CPU device (PoCL's pthread device) runs kernels on the host's cores,
   * each kernel spread over its compute units, beside the CPU workers. */
  dev->info.host_cores = (dtype & CL_DEVICE_TYPE_CPU) ? (cus ? cus : 1) : 0;
  size_t wg = 0;
  cl_ulong local = 0;
  cl_device_fp_config fp64 = 0;
  clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
  clGetDeviceInfo(id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
  if (clGetDeviceInfo(id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) != CL_SUCCESS)
    fp64 = 0;
  dev->info.max_work_group = wg;
  dev->info.max_alloc = od->max_alloc;
  dev->info.local_memory = local;
  dev->info.fp64 = fp64 != 0;
  dev->kernels = true;
  return MZ_OK;
}

/* Parse sel->arg as a device index; -1 when it is not a plain number. */
static long parse_index(const char *arg)
{
  if (!arg || !*arg)
    return -1;
  for (const char *p = arg; *p; p++)
    if (!isdigit((unsigned char)*p))
      return -1;
  errno = 0;
  unsigned long v = strtoul(arg, NULL, 10);
  return errno || v > 1000000ul ? -1 : (long)v;
}

/* Find every device of every platform (or the one sel->arg names, counted
 * across platforms in the loader's order) and add them.  No ICD or no
 * platform is not an error: zero devices. */
static int ocl_discover(mz_runtime *rt, const struct mz__devtype *type, const struct mz__devsel *sel)
{
  long want = -1;
  if (!sel->all && sel->arg) {
    want = parse_index(sel->arg);
    if (want < 0)
      return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'opencl:%s': the argument must be a device index",
                           sel->arg);
  }
  unsigned nqueues = sel->default_queues ? sel->default_queues : OCL_DEFAULT_QUEUES;

  cl_uint nplat = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &nplat);
  if (err != CL_SUCCESS)
    nplat = 0; /* CL_PLATFORM_NOT_FOUND_KHR: no ICD installed */
  cl_platform_id *plats = nplat ? calloc(nplat, sizeof *plats) : NULL;
  if (nplat && (!plats || clGetPlatformIDs(nplat, plats, NULL) != CL_SUCCESS))
    nplat = 0;

  int added = 0, rc = MZ_OK;
  long index = 0;
  for (cl_uint p = 0; p < nplat && rc == MZ_OK; p++) {
    cl_uint ndev = 0;
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS || ndev == 0)
      continue;
    cl_device_id *ids = calloc(ndev, sizeof *ids);
    if (!ids || clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL) != CL_SUCCESS) {
      free(ids);
      continue;
    }
    /* Skip the platform without a context when the wanted index is elsewhere. */
    if (want >= 0 && (want < index || want >= index + (long)ndev)) {
      index += ndev;
      free(ids);
      continue;
    }
    struct ocl_ctx *ctx = ctx_find(rt, plats[p]);
    if (!ctx)
      ctx = ctx_create(plats[p], ndev, ids);
    if (!ctx) {
      mz__warn(rt, "opencl: cannot create a context on platform %u; its devices are ignored", p);
      index += ndev;
      free(ids);
      continue;
    }
    for (cl_uint d = 0; d < ndev && rc == MZ_OK; d++, index++) {
      if (want >= 0 && want != index)
        continue;
      rc = device_open(rt, type, ctx, ids[d], nqueues);
      if (rc == MZ_OK)
        added++;
    }
    ctx_release(ctx); /* each added device holds its own reference */
    free(ids);
  }
  free(plats);
  if (rc < 0)
    return rc;
  if (want >= 0 && added == 0)
    return mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: no device 'opencl:%ld' (%ld OpenCL device%s found)",
                         want, index, index == 1 ? "" : "s");
  return added;
}

/* Free the device's I/O queue, its context reference and its state. */
static void ocl_destroy(struct mz_device *dev)
{
  struct ocl_dev *od = ocl_of(dev);
  if (!od)
    return;
  clFinish(od->io);
  clReleaseCommandQueue(od->io);
  if (od->copy) {
    clFinish(od->copy);
    clReleaseCommandQueue(od->copy);
  }
  ctx_release(od->ctx);
  free(od);
  dev->priv = NULL;
}

/* A kernel runs here when it has OpenCL C source or a binary. */
static bool ocl_can_run(const struct mz_device *dev, const mz_kernel *k)
{
  const mz_kernel_spec *s = mz__kernel_spec(k);
  if (s && s->opencl.format == MZ__CODE_NATIVE)
    return s->opencl.data != NULL;
  return s && (s->opencl.format == MZ_CODE_SOURCE || s->opencl.format == MZ_CODE_BINARY);
}

/* The build log of program for the device, malloc'd ("" when none). */
static char *build_log(cl_program program, cl_device_id id)
{
  size_t size = 0;
  if (clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS)
    size = 0;
  char *s = malloc(size + 1);
  if (!s)
    return NULL;
  if (size && clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, size, s, NULL) != CL_SUCCESS)
    size = 0;
  s[size] = '\0';
  return s;
}

/* Build the kernel's program for this device alone and create its
 * cl_kernel.  A failed build returns MZ_EBUILD with the whole build log in
 * *log; so does a missing entry point or a parameter count that differs
 * from the maize parameter list (every clSetKernelArg would fail later). */
static int ocl_prepare(struct mz_device *dev, const mz_kernel *k, void **kdev, char **log)
{
  struct ocl_dev *od = ocl_of(dev);
  const mz_kernel_spec *spec = mz__kernel_spec(k);
  const mz_code_spec *code = &spec->opencl;
  const char *kname = mz_kernel_name(k);
  const char *entry = code->entry ? code->entry : kname;
  *kdev = NULL;
  *log = NULL;
  if (code->format == MZ__CODE_NATIVE) { /* nothing to build */
    struct ocl_kernel *nk = calloc(1, sizeof *nk);
    if (!nk)
      return MZ_ENOMEM;
    nk->native = code->data;
    *kdev = nk;
    return MZ_OK;
  }

  char *data = NULL, *err_text = NULL;
  size_t size = 0;
  int rc = mz__code_load(code, &data, &size, &err_text);
  if (rc < 0) {
    *log = err_text ? err_text : str_printf("kernel '%s': cannot load its OpenCL code", kname);
    return rc;
  }
  free(err_text);

  cl_int err;
  cl_program program;
  if (code->format == MZ_CODE_BINARY) {
    const unsigned char *bin = (const unsigned char *)data;
    cl_int bin_status = CL_SUCCESS;
    program = clCreateProgramWithBinary(od->ctx->ctx, 1, &od->id, &size, &bin, &bin_status, &err);
    if (program && bin_status != CL_SUCCESS)
      err = bin_status;
  } else {
    const char *text = data;
    program = clCreateProgramWithSource(od->ctx->ctx, 1, &text, &size, &err);
  }
  free(data);
  if (!program || err != CL_SUCCESS) {
    if (program)
      clReleaseProgram(program);
    *log = str_printf("kernel '%s' on %s: cannot create the OpenCL program: %s", kname,
                      dev->info.name, cl_err_name(err));
    return MZ_EBUILD;
  }

  err = clBuildProgram(program, 1, &od->id, code->options ? code->options : "", NULL, NULL);
  if (err != CL_SUCCESS) {
    char *text = build_log(program, od->id);
    *log = str_printf("kernel '%s' on %s: OpenCL build failed (%s), options \"%s\", build log:\n%s", kname,
                      dev->info.name, cl_err_name(err), code->options ? code->options : "",
                      text ? text : "");
    free(text);
    clReleaseProgram(program);
    return MZ_EBUILD;
  }

  cl_kernel kernel = clCreateKernel(program, entry, &err);
  if (!kernel) {
    *log = str_printf("kernel '%s' on %s: no kernel function '%s' in its OpenCL program (%s)", kname,
                      dev->info.name, entry, cl_err_name(err));
    clReleaseProgram(program);
    return MZ_EBUILD;
  }
  cl_uint nargs = 0;
  clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL);
  if (nargs != mz_kernel_param_count(k)) {
    *log = str_printf("kernel '%s' on %s: the OpenCL function '%s' takes %u arguments, the parameter "
                      "list has %u",
                      kname, dev->info.name, entry, nargs, mz_kernel_param_count(k));
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    return MZ_EBUILD;
  }

  struct ocl_kernel *ok = malloc(sizeof *ok);
  if (!ok) {
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    return MZ_ENOMEM;
  }
  ok->program = program;
  ok->kernel = kernel;
  ok->native = NULL;
  ok->native_state = NULL;
  ok->args_known = 0;
  ok->args_freed = 0;
  *kdev = ok;
  return MZ_OK;
}

/* Free what prepare made. */
static void ocl_unprepare(struct mz_device *dev, void *kdev)
{
  struct ocl_kernel *ok = kdev;
  if (!ok)
    return;
  if (ok->native && ok->native->state_free)
    ok->native->state_free(ok->native_state);
  if (ok->kernel)
    clReleaseKernel(ok->kernel);
  if (ok->program)
    clReleaseProgram(ok->program);
  free(ok);
}

/* Allocate a buffer.  The device's global memory is accounted here because
 * some implementations (PoCL) allocate lazily, at the first command that
 * uses the buffer, and cannot report a failure then: refusing up front
 * lets the core evict and retry instead. */
static int ocl_mem_alloc(struct mz_device *dev, size_t bytes, void **mem)
{
  struct ocl_dev *od = ocl_of(dev);
  size_t size = bytes ? bytes : 1;
  *mem = NULL;
  if (size > od->max_alloc)
    return MZ_ENOMEM;
  uint64_t before = atomic_fetch_add(&od->allocated, size);
  if (od->global_mem && before + size > od->global_mem) {
    atomic_fetch_sub(&od->allocated, size);
    return MZ_ENOMEM;
  }
  cl_int err;
  cl_mem m = clCreateBuffer(od->ctx->ctx, CL_MEM_READ_WRITE, size, NULL, &err);
  if (!m) {
    atomic_fetch_sub(&od->allocated, size);
    return cl_to_mz(err) == MZ_ENOMEM ? MZ_ENOMEM : MZ_EDEVICE;
  }
  *mem = m;
  return MZ_OK;
}

/* Free a buffer (the implementation defers it until commands using it end). */
static void ocl_mem_free(struct mz_device *dev, void *mem)
{
  if (!mem)
    return;
  size_t size = 0;
  if (clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL) == CL_SUCCESS)
    atomic_fetch_sub(&ocl_of(dev)->allocated, size);
  /* Before the release: a kernel's remembered binding of this handle must
   * read as stale by the time a new buffer can get its address. */
  atomic_fetch_add_explicit(&ocl_of(dev)->freed, 1, memory_order_release);
  clReleaseMemObject(mem);
}

/* Copy a buffer to host memory, synchronously, on the device's I/O queue.
 * With use_map the buffer is mapped and copied by this thread (zero copy on
 * host-unified devices whose implementation maps in place). */
static int ocl_mem_read(struct mz_device *dev, void *mem, void *host, size_t bytes)
{
  struct ocl_dev *od = ocl_of(dev);
  cl_int err;
  if (!bytes)
    return MZ_OK;
  if (od->use_map) {
    void *p = clEnqueueMapBuffer(od->io, mem, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &err);
    if (!p)
      return mz__set_error(dev->rt, cl_to_mz(err), "opencl %s: map for reading: %s", dev->info.name,
                           cl_err_name(err));
    memcpy(host, p, bytes);
    cl_event ev = NULL;
    err = clEnqueueUnmapMemObject(od->io, mem, p, 0, NULL, &ev);
    if (err == CL_SUCCESS) {
      err = clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
  } else {
    err = clEnqueueReadBuffer(od->io, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
  }
  if (err != CL_SUCCESS)
    return mz__set_error(dev->rt, cl_to_mz(err) == MZ_ENOMEM ? MZ_ENOMEM : MZ_EDEVICE,
                         "opencl %s: reading %zu bytes: %s", dev->info.name, bytes, cl_err_name(err));
  return MZ_OK;
}

/* Copy host memory into a buffer, synchronously, on the I/O queue.  The
 * core calls it only while no command uses the buffer, and the write is
 * complete on return, so commands on the other queues see it. */
static int ocl_mem_write(struct mz_device *dev, void *mem, const void *host, size_t bytes)
{
  struct ocl_dev *od = ocl_of(dev);
  cl_int err;
  if (!bytes)
    return MZ_OK;
  if (od->use_map) {
    void *p = clEnqueueMapBuffer(od->io, mem, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, 0, bytes, 0, NULL,
                                 NULL, &err);
    if (!p)
      return mz__set_error(dev->rt, cl_to_mz(err), "opencl %s: map for writing: %s", dev->info.name,
                           cl_err_name(err));
    memcpy(p, host, bytes);
    cl_event ev = NULL;
    err = clEnqueueUnmapMemObject(od->io, mem, p, 0, NULL, &ev);
    if (err == CL_SUCCESS) {
      err = clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
  } else {
    err = clEnqueueWriteBuffer(od->io, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
  }
  if (err != CL_SUCCESS)
    return mz__set_error(dev->rt, cl_to_mz(err) == MZ_ENOMEM ? MZ_ENOMEM : MZ_EDEVICE,
                         "opencl %s: writing %zu bytes: %s", dev->info.name, bytes, cl_err_name(err));
  return MZ_OK;
}

/* Zero copy: a buffer over host memory itself (CL_MEM_USE_HOST_PTR), only
 * on a device that shares host memory and only for memory aligned as the
 * device wants its buffers, where implementations (PoCL's CPU devices) use
 * the pointer in place; elsewhere the implementation might keep a copy of
 * its own, so the core allocates as usual.  Accounted like mem_alloc. */
static int ocl_mem_wrap(struct mz_device *dev, void *host, size_t bytes, void **mem)
{
  struct ocl_dev *od = ocl_of(dev);
  *mem = NULL;
  if (!od->unified || !bytes || (uintptr_t)host % od->base_align || bytes > od->max_alloc)
    return MZ_ENOTSUP;
  cl_int err;
  cl_mem m = clCreateBuffer(od->ctx->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &err);
  if (!m)
    return MZ_ENOTSUP;
  atomic_fetch_add(&od->allocated, bytes);
  *mem = m;
  return MZ_OK;
}

/* A map and an unmap on the I/O queue, waited for: the OpenCL way to hand
 * a CL_MEM_USE_HOST_PTR buffer between host and device.  In place (no
 * copy) where the implementation uses the host memory directly. */
static int ocl_mem_sync(struct mz_device *dev, void *mem, size_t bytes, bool to_host)
{
  struct ocl_dev *od = ocl_of(dev);
  cl_int err;
  void *p = clEnqueueMapBuffer(od->io, mem, CL_TRUE, to_host ? CL_MAP_READ : CL_MAP_WRITE_INVALIDATE_REGION, 0,
                               bytes, 0, NULL, NULL, &err);
  if (p) {
    cl_event ev = NULL;
    err = clEnqueueUnmapMemObject(od->io, mem, p, 0, NULL, &ev);
    if (err == CL_SUCCESS) {
      err = clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
  }
  if (err != CL_SUCCESS)
    return mz__set_error(dev->rt, MZ_EDEVICE, "opencl %s: map/unmap of a zero-copy buffer: %s", dev->info.name,
                         cl_err_name(err));
  return MZ_OK;
}

/* Pinned host memory: a CL_MEM_ALLOC_HOST_PTR buffer, mapped for its whole
 * life (the implementation's page-locked staging memory, where it has any). */
static int ocl_host_alloc(struct mz_device *dev, size_t bytes, void **host, void **handle)
{
  struct ocl_dev *od = ocl_of(dev);
  cl_int err;
  if (!bytes || bytes > od->max_alloc)
    return MZ_ENOTSUP;
  cl_mem m = clCreateBuffer(od->ctx->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
  if (!m)
    return MZ_ENOMEM;
  void *p = clEnqueueMapBuffer(od->io, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
  if (!p) {
    clReleaseMemObject(m);
    return MZ_ENOMEM;
  }
  *host = p;
  *handle = m;
  return MZ_OK;
}

/* MZ_BUFFER_MANAGED: fine-grained SVM of the device's context.  Its
 * handle is NULL, which tells host_free it is SVM.  Used in place through
 * mem_wrap, as any host memory is on a host-unified device. */
static int ocl_shared_alloc(struct mz_device *dev, size_t bytes, void **host, void **handle)
{
  struct ocl_dev *od = ocl_of(dev);
  if (!od->svm_fine || !bytes || bytes > od->max_alloc)
    return MZ_ENOTSUP;
  void *p = clSVMAlloc(od->ctx->ctx, CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, bytes, 0);
  if (!p)
    return MZ_ENOMEM;
  *host = p;
  *handle = NULL;
  return MZ_OK;
}

static void ocl_host_free(struct mz_device *dev, void *host, void *handle)
{
  struct ocl_dev *od = ocl_of(dev);
  if (!handle) { /* SVM: the runs that used it are over (they held the buffer) */
    clFinish(od->io);
    clSVMFree(od->ctx->ctx, host);
    return;
  }
  if (clEnqueueUnmapMemObject(od->io, handle, host, 0, NULL, NULL) == CL_SUCCESS)
    clFinish(od->io);
  clReleaseMemObject(handle);
}

/* Two OpenCL devices can order and copy on the device when they share a
 * context, that is, when they are devices of one platform. */
static bool same_context(const struct mz_device *a, const struct mz_device *b)
{
  return a && b && a->type == &mz__devtype_opencl && b->type == &mz__devtype_opencl && a->priv && b->priv &&
         ocl_of(a)->ctx == ocl_of(b)->ctx;
}

/* An event of p's queue can be in q's wait list: same context. */
static bool ocl_can_wait(const struct mz__queue *q, const struct mz__queue *p)
{
  return same_context(q->dev, p->dev);
}

/* clEnqueueCopyBuffer works between buffers of one context. */
static bool ocl_can_copy_peer(const struct mz_device *dst, const struct mz_device *src)
{
  return same_context(dst, src);
}

/* The completion of a batch, called by the OpenCL implementation when the
 * batch's last command has finished (or failed).  The queue is in order,
 * so every earlier command of the batch has finished too.  Only
 * non-blocking queries here: the specification forbids blocking calls in
 * an event callback. */
static void CL_CALLBACK batch_complete(cl_event last, cl_int last_status, void *user)
{
  struct mz__batch *b = user;
  struct mz_device *dev = b->queue->dev;
  struct ocl_queue *oq = b->queue->priv;
  bool failed = false;
  uint64_t offset = 0, span0 = 0, span1 = 0;
  bool timed = false;

  /* Device timestamps are on the device's clock.  The callback runs right
   * after the last command ends, so "now" minus that command's end maps
   * device time to mz__now_ns time, within the callback's latency.  The
   * batch's span runs from its first command's start (that command has an
   * event: see ocl_submit) to the last's end. */
  if (last && ocl_of(dev)->profiling && last_status == CL_COMPLETE) {
    cl_ulong end = 0;
    if (clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) == CL_SUCCESS &&
        end) {
      offset = mz__now_ns() - (uint64_t)end;
      timed = true;
      cl_event first = b->n ? ev_of(b->execs[0]) : NULL;
      cl_ulong start = 0;
      if (first && clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) == CL_SUCCESS &&
          start && start <= end) {
        span0 = (uint64_t)start + offset;
        span1 = (uint64_t)end + offset;
      }
    }
  }
  /* A batch on the queue without timestamps (or whose times could not be
   * read): measured at the host, as the CUDA backend does, from the later
   * of its submission (ocl_submit keeps the time in b->priv) and the end of
   * the queue's batch before to now.  Without times the perf models would
   * never learn an OpenCL kernel, nor count its device busy. */
  uint64_t now = mz__now_ns();
  if (!timed) {
    uint64_t t0 = (uint64_t)(uintptr_t)b->priv, prev = atomic_load_explicit(&oq->last_end, memory_order_relaxed);
    if (t0 < prev)
      t0 = prev;
    if (t0 && t0 < now) {
      span0 = t0;
      span1 = now;
    }
  }
  atomic_store_explicit(&oq->last_end, now, memory_order_relaxed);

  for (unsigned i = 0; i < b->n; i++) {
    struct mz__exec *e = b->execs[i];
    /* The copies' times (see enqueue_exec), then their events go. */
    for (unsigned k = 0; k < mz__exec_nxfer(e); k++) {
      struct mz__xfer *x = &mz__exec_xd(e)->xfers[k];
      if (!x->event)
        continue;
      cl_ulong t0 = 0, t1 = 0;
      cl_int xst = CL_COMPLETE;
      if (timed && e->status >= 0 &&
          clGetEventInfo(x->event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof xst, &xst, NULL) == CL_SUCCESS &&
          xst == CL_COMPLETE &&
          clGetEventProfilingInfo(x->event, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) == CL_SUCCESS &&
          clGetEventProfilingInfo(x->event, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) == CL_SUCCESS &&
          t0 && t1 >= t0) {
        x->t_start = (uint64_t)t0 + offset;
        x->t_end = (uint64_t)t1 + offset;
      }
      clReleaseEvent(x->event);
      x->event = NULL;
    }
    if (e->status < 0) { /* refused at enqueue time; its message is set */
      continue;
    }
    /* The last command's status came with the callback; a node that
     * borrows its event has that status (an earlier command that failed
     * fails every later one on the in-order queue). */
    cl_int st = CL_COMPLETE;
    cl_event ev = ev_of(e);
    if (ev == last)
      st = last_status;
    else if (ev && clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS)
      st = CL_INVALID_EVENT;
    if (st < 0) {
      if (!failed) {
        e->status = MZ_EKERNEL;
        mz__exec_set_message(e, str_printf("OpenCL command failed on %s queue %u with status %s (%d)",
                                           dev->info.name, b->queue->local, cl_err_name(st), st));
        mz__device_fail(dev, MZ_EDEVICE, "an OpenCL command ended with a negative status");
        failed = true;
      } else {
        e->status = MZ_ECANCELED;
        mz__exec_set_message(e, str_printf("OpenCL command on %s queue %u did not run: an earlier command on its "
                                           "in-order queue failed (status %s)",
                                           dev->info.name, b->queue->local, cl_err_name(st)));
      }
      continue;
    }
    if (timed && ev && mz__exec_timed(e)) { /* an event of its own: see ocl_submit */
      cl_ulong t0 = 0, t1 = 0;
      if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) == CL_SUCCESS &&
          clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) == CL_SUCCESS &&
          t0 && t1 >= t0) {
        mz__exec_xd(e)->t_start = (uint64_t)t0 + offset;
        mz__exec_xd(e)->t_end = (uint64_t)t1 + offset;
      }
    } else if (span1 > span0) {
      /* An equal share of the batch's span (the perf models, the busy
       * times and the policies' done() see it). */
      mz__exec_xd(e)->t_start = span0 + (span1 - span0) * i / b->n;
      mz__exec_xd(e)->t_end = span0 + (span1 - span0) * (i + 1) / b->n;
    }
  }
  /* PoCL runs this callback before it releases the commands that wait for
   * the last one (the next batch of an in-order queue): ending 120 nodes
   * here held the queue idle meanwhile.  The submission thread ends them. */
  mz__batch_done_later(b);
}

/* Bind the arguments of one exec to the device's cl_kernel.  Returns
 * CL_SUCCESS or the first error, with the argument's index in *bad.
 * A kernel keeps its arguments from one enqueue to the next, so an
 * argument whose bits are those bound last is not bound again (PoCL
 * spends more on a clSetKernelArg than the core on planning a node).
 * The memo is dropped when a buffer of the device was freed since, as a
 * new buffer may then have an old one's handle, and after an error. */
static cl_int set_args(struct ocl_kernel *ok, uint64_t freed, const struct mz__exec *e, unsigned *bad)
{
  if (ok->args_freed != freed) {
    ok->args_known = 0;
    ok->args_freed = freed;
  }
  for (unsigned i = 0; i < mz__exec_nargs(e); i++) {
    const struct mz__xarg *a = &mz__exec_xd(e)->args[i];
    const void *val;
    size_t size;
    cl_mem m = a->mem;
    if (a->is_buffer) {
      val = &m;
      size = sizeof m;
    } else {
      /* Every member of the mz_arg union starts at its first byte. */
      val = &a->value;
      size = mz_dtype_size(a->dtype);
    }
    uint64_t bits = 0;
    bool memo = i < OCL_ARG_MEMO && size <= sizeof bits;
    if (memo) {
      memcpy(&bits, val, size);
      if ((ok->args_known >> i & 1u) && ok->args_last[i] == bits)
        continue;
    }
    cl_int err = clSetKernelArg(ok->kernel, i, size, val);
    if (err != CL_SUCCESS) {
      ok->args_known = 0;
      *bad = i;
      return err;
    }
    if (memo) {
      ok->args_last[i] = bits;
      ok->args_known |= 1u << i;
    }
  }
  return CL_SUCCESS;
}

/* Enqueue one exec: its transfers and its kernel (or a marker for a node
 * without a kernel), the first command carrying the wait list.  e->xd->event
 * gets the exec's last command's event when want_event, or a canned call's
 * or a marker's (else NULL: see "Events" at the top).  On failure the
 * message is in *why (malloc'd), and e->xd->event is a marker in the
 * kernel's place when the queue still accepts one (NULL otherwise). */
static cl_int enqueue_exec(struct ocl_dev *od, cl_command_queue cq, struct mz__exec *e, bool want_event, char **why)
{
  cl_event stack_waits[8];
  cl_event *waits = stack_waits;
  cl_uint nw = 0;
  if (mz__exec_nwait(e) > 7) { /* room for one more: the copy engine's event */
    waits = malloc((mz__exec_nwait(e) + 1) * sizeof *waits);
    if (!waits) {
      *why = NULL;
      return CL_OUT_OF_HOST_MEMORY;
    }
  }
  for (unsigned i = 0; i < mz__exec_nwait(e); i++)
    if (mz__exec_xd(e)->waits[i] && ev_of(mz__exec_xd(e)->waits[i]))
      waits[nw++] = ev_of(mz__exec_xd(e)->waits[i]);

  cl_command_queue copyq = od->copy;
  bool profiling = od->profiling;
  cl_int err = CL_SUCCESS;
  /* A copy gets an event only when someone observes the run and the queue
   * keeps timestamps: batch_complete reads its times and releases it.  On
   * the copy engine the last copy always gets one: the node waits for it. */
  bool timed = profiling && mz__exec_observed(e);
  cl_command_queue xq = copyq && mz__exec_nxfer(e) ? copyq : cq;
  cl_event copied = NULL; /* the copy engine's last copy for this node */
  /* On the copy engine, copies from host memory go first and wait for
   * nothing (a valid host copy was written by nodes that have finished,
   * and the destination is a copy no queued node reads): only copies
   * from other devices wait for the wait list, so a node whose
   * predecessors are late holds back the engine's later copies only when
   * it reads their output.  The last copy enqueued gets the event the
   * node waits for. */
  bool ce = xq != cq;
  unsigned last = mz__exec_nxfer(e), npeer = 0;
  for (unsigned i = 0; ce && i < mz__exec_nxfer(e); i++)
    if (!mz__exec_xd(e)->xfers[i].src_host)
      npeer++, last = i;
  for (unsigned i = 0; ce && !npeer && i < mz__exec_nxfer(e); i++)
    last = i;
  for (unsigned pass = 0; pass < (ce ? 2u : 1u); pass++)
    for (unsigned i = 0; i < mz__exec_nxfer(e) && err == CL_SUCCESS; i++) {
      struct mz__xfer *x = &mz__exec_xd(e)->xfers[i];
      if (ce && (pass == 0) != (x->src_host != NULL))
        continue;
      bool free_wait = ce && pass == 0; /* from host memory, on the copy engine */
      cl_uint xn = free_wait ? 0 : nw;
      cl_event *xev = timed || (ce && i == last) ? (cl_event *)&x->event : NULL;
      if (x->src_host)
        err = clEnqueueWriteBuffer(xq, x->dst, CL_FALSE, 0, x->bytes, x->src_host, xn, xn ? waits : NULL, xev);
      else
        err = clEnqueueCopyBuffer(xq, x->src, x->dst, 0, 0, x->bytes, xn, xn ? waits : NULL, xev);
      if (err != CL_SUCCESS) {
        *why = str_printf("%s of %zu bytes refused: %s", x->src_host ? "clEnqueueWriteBuffer" : "clEnqueueCopyBuffer",
                          x->bytes, cl_err_name(err));
      } else {
        if (!free_wait)
          nw = 0; /* the queue is in order: later commands follow this one */
        if (ce && i == last)
          copied = x->event;
      }
    }
  cl_event refused = NULL; /* a marker after the copies enqueued before one was refused */
  if (xq != cq) {
    /* The node's commands wait for its copies on the copy engine (which
     * waited for the wait list); when a copy was refused, the marker in the
     * node's place (below) waits for the copies enqueued before it and for
     * the wait list itself. */
    if (err != CL_SUCCESS) {
      nw = 0;
      for (unsigned i = 0; i < mz__exec_nwait(e); i++)
        if (mz__exec_xd(e)->waits[i] && ev_of(mz__exec_xd(e)->waits[i]))
          waits[nw++] = ev_of(mz__exec_xd(e)->waits[i]);
      if (clEnqueueMarkerWithWaitList(xq, 0, NULL, &refused) == CL_SUCCESS)
        waits[nw++] = refused;
      else
        refused = NULL;
    } else if (copied) {
      /* nw is 0 after copies from other devices (they waited for the
       * list), else the list is still to wait for: room for one more. */
      waits[nw++] = copied;
    }
    clFlush(xq);
  }

  cl_event ev = NULL;
  if (err == CL_SUCCESS && mz__exec_kernel(e) && ((struct ocl_kernel *)mz__exec_xd(e)->kernel_dev)->native) {
    /* A canned op: order the queue after the wait list, then the library
     * enqueues its own commands (ops/native.h). */
    struct ocl_kernel *nk = mz__exec_xd(e)->kernel_dev;
    const struct mz__ocl_native *nat = nk->native;
    if (nw)
      err = clEnqueueBarrierWithWaitList(cq, nw, waits, NULL);
    if (err != CL_SUCCESS) {
      *why = str_printf("clEnqueueBarrierWithWaitList refused: %s", cl_err_name(err));
    } else {
      nw = 0;
      void *nev = NULL;
      char *nwhy = NULL;
      if (nat->enqueue(cq, &nk->native_state, mz__exec_xd(e)->args, mz__exec_nargs(e), &nev, &nwhy) != MZ_OK) {
        err = CL_INVALID_OPERATION;
        *why = nwhy ? nwhy : str_printf("%s refused the call", nat->library);
      } else if (nev) {
        ev = nev;
      } else {
        err = clEnqueueMarkerWithWaitList(cq, 0, NULL, &ev);
      }
    }
  } else if (err == CL_SUCCESS && mz__exec_kernel(e)) {
    struct ocl_kernel *ok = mz__exec_xd(e)->kernel_dev;
    unsigned bad = 0;
    err = set_args(ok, atomic_load_explicit(&od->freed, memory_order_acquire), e, &bad);
    if (err != CL_SUCCESS) {
      *why = str_printf("clSetKernelArg(%u) refused: %s", bad, cl_err_name(err));
    } else {
      const mz_launch *l = mz__exec_launch(e);
      const size_t *local = l->local;
      for (unsigned d = 0; d < l->ndim; d++)
        if (l->local[d] == 0)
          local = NULL; /* the implementation chooses */
      err = clEnqueueNDRangeKernel(cq, ok->kernel, l->ndim, NULL, l->global, local, nw, nw ? waits : NULL,
                                   want_event ? &ev : NULL);
      if (err != CL_SUCCESS)
        *why = str_printf("clEnqueueNDRangeKernel(global %zu x %zu x %zu, local %zu x %zu x %zu) refused: %s",
                          l->global[0], l->ndim > 1 ? l->global[1] : 1, l->ndim > 2 ? l->global[2] : 1,
                          local ? l->local[0] : 0, local && l->ndim > 1 ? l->local[1] : 0,
                          local && l->ndim > 2 ? l->local[2] : 0, cl_err_name(err));
    }
  } else if (err == CL_SUCCESS) {
    err = clEnqueueMarkerWithWaitList(cq, nw, nw ? waits : NULL, &ev);
    if (err != CL_SUCCESS)
      *why = str_printf("clEnqueueMarkerWithWaitList refused: %s", cl_err_name(err));
  }
  if (err != CL_SUCCESS && !ev) {
    /* A marker stands for the refused node, so that what waits for it
     * still waits for what it waited for (and for its transfers). */
    if (clEnqueueMarkerWithWaitList(cq, nw, nw ? waits : NULL, &ev) != CL_SUCCESS)
      ev = NULL;
  }
  if (refused)
    clReleaseEvent(refused);
  if (waits != stack_waits)
    free(waits);
  mz__exec_xd(e)->event = ev;
  return err;
}

/* Submit a batch; see struct mz__device_ops.  An exec the implementation
 * refuses gets a failed status and a marker that keeps the ordering its
 * event promised, and the batch goes on: only when nothing at all could be
 * enqueued does submit return an error. */
static int ocl_submit(struct mz__queue *q, struct mz__batch *b)
{
  struct ocl_queue *oq = q->priv;
  struct ocl_dev *od = ocl_of(q->dev);
  /* Timestamps only for a batch with a node of a timed run. */
  bool measure = false;
  for (unsigned i = 0; oq->timed && i < b->n && !measure; i++)
    measure = mz__exec_timed(b->execs[i]);
  cl_command_queue cq = measure ? oq->timed : oq->plain;
  if (cq != oq->cur) {
    /* In order after the batches on the other queue. */
    cl_event m = NULL;
    if (clEnqueueMarkerWithWaitList(oq->cur, 0, NULL, &m) != CL_SUCCESS ||
        clEnqueueBarrierWithWaitList(cq, 1, &m, NULL) != CL_SUCCESS)
      clFinish(oq->cur); /* the submission thread may block */
    else
      clFlush(oq->cur);
    if (m)
      clReleaseEvent(m);
    oq->cur = cq;
  }
#if UINTPTR_MAX >= UINT64_MAX
  b->priv = (void *)(uintptr_t)mz__now_ns(); /* see batch_complete */
#endif
  cl_event last = NULL;
  bool tail = false; /* a command was enqueued after the last event */
  int first_err = MZ_OK;
  for (unsigned i = 0; i < b->n; i++) {
    struct mz__exec *e = b->execs[i];
    char *why = NULL;
    /* See "Events" at the top. */
    bool want = i + 1 == b->n || (measure && (i == 0 || mz__exec_timed(e))) ||
                mz__exec_waited_apart(e, b->execs[i + 1]);
    cl_int err = enqueue_exec(od, cq, e, want, &why);
    if (err != CL_SUCCESS) {
      int code = cl_to_mz(err);
      if (first_err == MZ_OK)
        first_err = code;
      e->status = code;
      mz__exec_set_message(e, str_printf("opencl %s queue %u: %s", q->dev->info.name, q->local,
                                         why ? why : cl_err_name(err)));
      free(why);
    }
    if (mz__exec_xd(e)->event) {
      last = mz__exec_xd(e)->event;
      tail = false;
    } else if (err == CL_SUCCESS) {
      tail = true;
    }
  }
  if (!last && !tail) {
    /* Nothing reached the queue: the core fails the batch itself.  Our
     * statuses and messages would be overwritten or leaked, so undo them. */
    for (unsigned i = 0; i < b->n; i++) {
      struct mz__exec *e = b->execs[i];
      mz__exec_set_message(e, NULL);
      e->status = 0;
      for (unsigned k = 0; k < mz__exec_nxfer(e); k++)
        if (mz__exec_xd(e)->xfers[k].event) {
          clReleaseEvent(mz__exec_xd(e)->xfers[k].event);
          mz__exec_xd(e)->xfers[k].event = NULL;
        }
    }
    return first_err < 0 ? first_err : MZ_EDEVICE;
  }
  /* The nodes without an event borrow the next one after them. */
  cl_event next = NULL;
  const struct mz__exec *owner = NULL;
  for (unsigned i = b->n; i-- > 0;) {
    struct mz__exec *e = b->execs[i];
    if (mz__exec_xd(e)->event) {
      next = mz__exec_xd(e)->event;
      owner = e;
    } else if (next && e->status >= 0) {
      if (mz__exec_same_run(e, owner))
        mz__exec_xd(e)->event = (void *)((uintptr_t)next | EV_BORROWED);
      else if (clRetainEvent(next) == CL_SUCCESS)
        mz__exec_xd(e)->event = next;
    }
  }
  if (tail) {
    /* The last node was refused and no marker took its place, but nodes
     * before it reached the queue without an event: nothing to hang the
     * callback on.  Everything is enqueued, so wait here (the submission
     * thread may block) and complete the batch from this thread; what
     * follows its last event has succeeded by then. */
    clFinish(cq);
    batch_complete(NULL, CL_COMPLETE, b);
    return MZ_OK;
  }
  /* Flush first: the callback may run at once, after which b belongs to
   * the core again. */
  clFlush(cq);
  cl_int err = clSetEventCallback(last, CL_COMPLETE, batch_complete, b);
  if (err != CL_SUCCESS) {
    /* Without a callback the batch would never complete.  Everything is
     * enqueued, so wait here (the submission thread may block) and
     * complete it from this thread. */
    clFinish(cq);
    batch_complete(last, CL_COMPLETE, b);
  }
  return MZ_OK;
}

/* Release the exec's event. */
static void ocl_release_exec(struct mz__exec *e)
{
  if (mz__exec_xd(e)->event && !((uintptr_t)mz__exec_xd(e)->event & EV_BORROWED))
    clReleaseEvent(mz__exec_xd(e)->event);
  mz__exec_xd(e)->event = NULL;
}

/* Open q's in-order command queues (struct ocl_queue). */
static int ocl_queue_init(struct mz__queue *q)
{
  struct ocl_dev *od = ocl_of(q->dev);
  struct ocl_queue *oq = calloc(1, sizeof *oq);
  if (!oq)
    return mz__set_error(q->dev->rt, MZ_ENOMEM, "opencl %s: no memory for queue %u", q->dev->info.name, q->local);
  cl_int err;
  oq->plain = queue_create(od, false, &err);
  if (!oq->plain) {
    free(oq);
    return mz__set_error(q->dev->rt, MZ_EDEVICE, "opencl %s: cannot create queue %u: %s", q->dev->info.name,
                         q->local, cl_err_name(err));
  }
  /* Without it, timed runs get their batches' host-measured times too. */
  cl_int terr;
  oq->timed = od->profiling ? queue_create(od, true, &terr) : NULL;
  oq->cur = oq->plain;
  atomic_init(&oq->last_end, 0);
  q->priv = oq;
  return MZ_OK;
}

/* Close q's command queues once their commands have finished. */
static void ocl_queue_fini(struct mz__queue *q)
{
  struct ocl_queue *oq = q->priv;
  if (oq) {
    clFinish(oq->plain);
    clReleaseCommandQueue(oq->plain);
    if (oq->timed) {
      clFinish(oq->timed);
      clReleaseCommandQueue(oq->timed);
    }
    free(oq);
    q->priv = NULL;
  }
}

static const struct mz__device_ops ocl_ops = {
  .inline_submit = false,
  .host_memory = false,
  .destroy = ocl_destroy,
  .can_run = ocl_can_run,
  .prepare = ocl_prepare,
  .unprepare = ocl_unprepare,
  .mem_alloc = ocl_mem_alloc,
  .mem_wrap = ocl_mem_wrap,
  .mem_sync = ocl_mem_sync,
  .host_alloc = ocl_host_alloc,
  .host_free = ocl_host_free,
  .shared_alloc = ocl_shared_alloc,
  .mem_free = ocl_mem_free,
  .mem_read = ocl_mem_read,
  .mem_write = ocl_mem_write,
  .can_wait = ocl_can_wait,
  .can_copy_peer = ocl_can_copy_peer,
  .submit = ocl_submit,
  .release_exec = ocl_release_exec,
  .queue_init = ocl_queue_init,
  .queue_fini = ocl_queue_fini,
};

const struct mz__devtype mz__devtype_opencl = {
  .name = "opencl",
  .kind = MZ_DEVICE_OPENCL,
  .ops = &ocl_ops,
  .discover = ocl_discover,
};
