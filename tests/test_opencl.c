/* Tests of the OpenCL backend, run for real on PoCL's CPU device (the test
 * environment sets POCL_DEVICES="pthread pthread", so there are two OpenCL
 * devices in one platform and one context).  They check discovery and the
 * device inspection API, kernel loading (source and binary, in memory and
 * on disk, build options, build failures with their log), every
 * combinator on OpenCL, coherence across the CPU and both OpenCL devices
 * against a CPU reference, a kernel the device refuses at run time, many
 * queues with edges between them, CPU-only nodes beside device nodes
 * under the planning policies, re-run, and the policy conformance subset.
 * Every test is skipped, with the reason, when no OpenCL device exists. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "maize.h"
#include "maize/policy.h"
#include "common.h"

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(opencl, .timeout = 300);

#ifndef MZ_KERNELS_CL
#error "MZ_KERNELS_CL must name examples/kernels/kernels.cl"
#endif

/* ---- helpers ---- */

/* OpenCL devices the ICD loader reports, counted without maize. */
static unsigned cl_device_total(void)
{
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
    return 0;
  cl_platform_id *p = calloc(np, sizeof *p);
  unsigned total = 0;
  if (p && clGetPlatformIDs(np, p, NULL) == CL_SUCCESS)
    for (cl_uint i = 0; i < np; i++) {
      cl_uint nd = 0;
      if (clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS)
        total += nd;
    }
  free(p);
  return total;
}

#define NEED_OPENCL(n)                                                                                  \
  do {                                                                                                \
    unsigned have_ = cl_device_total();                                                               \
    if (have_ < (n))                                                                                  \
      cr_skip_test("needs %u OpenCL device(s), found %u: install pocl-opencl-icd and set "            \
                   "POCL_DEVICES=\"pthread pthread\"",                                                \
                   (unsigned)(n), have_);                                                             \
  } while (0)

static mz_runtime *rt_open(const char *devices, unsigned queues)
{
  mz_runtime_config cfg = { .devices = devices, .opencl_queues = queues };
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&cfg, &rt);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(\"%s\"): %s", devices, mz_err_name(rc));
  return rt;
}

/* The runtime index of the n-th device of a kind, or -1. */
static int device_of_kind(mz_runtime *rt, mz_device_kind kind, unsigned n)
{
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, i), &info), MZ_OK);
    if (info.kind == kind && n-- == 0)
      return (int)i;
  }
  return -1;
}

/* CPU implementations of examples/kernels/kernels.cl, for mixed runs. */
static int cpu_saxpy(const mz_call *c)
{
  float a = c->args[0].f32;
  const float *x = c->args[1].p;
  float *y = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++)
    y[i] = a * x[i] + y[i];
  return 0;
}
static int cpu_scale(const mz_call *c)
{
  float *y = c->args[1].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++)
    y[i] = c->args[0].f32 * y[i];
  return 0;
}
static int cpu_add(const mz_call *c)
{
  const float *x = c->args[0].p, *y = c->args[1].p;
  float *z = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++)
    z[i] = x[i] + y[i];
  return 0;
}
static int cpu_square(const mz_call *c)
{
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++)
    y[i] = y[i] * y[i];
  return 0;
}

enum { K_SAXPY, K_SCALE, K_ADD, K_SQUARE, K_COUNT };
static const struct {
  const char *name, *params;
  mz_cpu_fn fn;
} kdefs[K_COUNT] = {
  { "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)", cpu_saxpy },
  { "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)", cpu_scale },
  { "add", "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)", cpu_add },
  { "square", "inout f32[] y, u64 n = sizeof(y)", cpu_square },
};

/* One of the example kernels, its OpenCL code read from kernels.cl on
 * disk.  name may carry a placement suffix ("scale@2", see the pin
 * policy); with_cpu adds the CPU implementation. */
static mz_kernel *kernel_ex(mz_runtime *rt, int which, const char *name, bool with_cpu)
{
  mz_kernel_spec s = {
    .name = name ? name : kdefs[which].name,
    .params = kdefs[which].params,
    .cpu = { .fn = with_cpu ? kdefs[which].fn : NULL },
    .opencl = { .format = MZ_CODE_SOURCE, .path = MZ_KERNELS_CL, .entry = kdefs[which].name },
  };
  mz_kernel *k = NULL;
  int rc = mz_kernel_create(rt, &s, &k);
  cr_assert_eq(rc, MZ_OK, "mz_kernel_create(%s): %s: %s", s.name, mz_err_name(rc), mz_runtime_last_error(rt));
  return k;
}

/* An OpenCL-only kernel from source text in memory. */
static mz_kernel *kernel_src(mz_runtime *rt, const char *name, const char *params, const char *src,
                             const char *options)
{
  mz_kernel_spec s = {
    .name = name,
    .params = params,
    .opencl = { .format = MZ_CODE_SOURCE, .data = src, .options = options },
  };
  mz_kernel *k = NULL;
  int rc = mz_kernel_create(rt, &s, &k);
  cr_assert_eq(rc, MZ_OK, "mz_kernel_create(%s): %s: %s", name, mz_err_name(rc), mz_runtime_last_error(rt));
  return k;
}

static mz_buffer *buf_f32(mz_runtime *rt, size_t n, const float *data)
{
  mz_buffer *b = NULL;
  int rc = mz_buffer_create(rt, MZ_F32, 1, (size_t[]){ n }, data, &b);
  cr_assert_eq(rc, MZ_OK, "mz_buffer_create: %s", mz_err_name(rc));
  return b;
}

static void fill(float *v, size_t n, float base)
{
  for (size_t i = 0; i < n; i++)
    v[i] = base + (float)(i % 97) * 0.25f;
}

static void expect_buf(mz_buffer *b, const float *want, size_t n, const char *what)
{
  float *got = malloc(n * sizeof *got);
  cr_assert_not_null(got);
  int rc = mz_buffer_read(b, got, n * sizeof *got);
  cr_assert_eq(rc, MZ_OK, "%s: mz_buffer_read: %s", what, mz_err_name(rc));
  for (size_t i = 0; i < n; i++)
    cr_assert(fabsf(got[i] - want[i]) <= 1e-4f * fmaxf(1.0f, fabsf(want[i])), "%s[%zu] = %g, want %g", what,
              i, (double)got[i], (double)want[i]);
  free(got);
}

/* Schedule root and wait; returns the run's status (the future is freed). */
static int run_root(mz_graph *g, mz_op *root, const char *policy, mz_run_stats *stats)
{
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc != MZ_OK)
    return rc;
  rc = mz_future_wait(f);
  if (stats) {
    mz_run_stats st;
    cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
    stats->ops = st.ops;
    stats->transfers = st.transfers;
    stats->failed = st.failed;
    stats->batches = st.batches;
    stats->callbacks = st.callbacks;
  }
  mz_future_destroy(f);
  return rc;
}

static mz_graph *graph_new(mz_runtime *rt)
{
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  return g;
}

/* ---- the "pin" policy: a kernel named "name@D" runs on device D ---- */

/* Place a task on a queue of the device its kernel's name ends with
 * ("@2"), spreading over that device's queues by task id; tasks without a
 * suffix (host, partition) go to the first queue that can run them. */
static int pin_select(void *state, const mz_sched *s, mz_task *t, bool ready)
{
  const char *name = mz_task_name(t);
  const char *at = strrchr(name, '@');
  unsigned nq = mz_sched_queue_count(s);
  if (at) {
    unsigned dev = (unsigned)atoi(at + 1), count = 0;
    for (unsigned q = 0; q < nq; q++)
      count += mz_sched_queue_device(s, q) == dev;
    unsigned pick = count ? (unsigned)(mz_task_id(t) % count) : 0;
    for (unsigned q = 0; q < nq; q++)
      if (mz_sched_queue_device(s, q) == dev && pick-- == 0)
        return (int)q;
  }
  for (unsigned q = 0; q < nq; q++)
    if (mz_task_can_run(s, t, q))
      return (int)q;
  return 0;
}

static const struct mz_policy_ops pin_policy = {
  .abi = MZ_POLICY_ABI,
  .name = "pin",
  .description = "tests: a kernel named name@D runs on device D",
  .select = pin_select,
};

/* ---- discovery and inspection ---- */

Test(opencl, discovery)
{
  NEED_OPENCL(1);
  unsigned total = cl_device_total();
  mz_runtime *rt = rt_open("opencl", 0);
  unsigned found = 0, queues = 0;
  /* The runtime may keep a host-only CPU device for host nodes: count the
   * OpenCL ones, and check that queue numbers run on across all devices. */
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, i), &info), MZ_OK);
    cr_assert_eq(info.index, i);
    cr_assert_eq(info.first_queue, queues);
    queues += info.queues;
    if (info.kind != MZ_DEVICE_OPENCL)
      continue;
    found++;
    cr_assert(info.name && *info.name, "device %u has no name", i);
    cr_assert(info.vendor && *info.vendor, "device %u has no vendor", i);
    cr_assert(info.version && strstr(info.version, "OpenCL"), "version \"%s\"", info.version);
    cr_assert_gt(info.memory, 0);
    cr_assert_gt(info.compute_units, 0);
    cr_assert_eq(info.numa_node, -1);
    cr_assert_eq(info.queues, 4, "default queue count %u", info.queues);
    if (strstr(info.vendor, "PoCL") || strstr(info.name, "pthread"))
      cr_assert(info.unified_memory, "PoCL's CPU device shares host memory");
    cr_assert(!mz_device_is_dead(mz_runtime_device(rt, i)));
    char thread[32];
    snprintf(thread, sizeof thread, "mz-submit%u", i);
    cr_assert_eq(test_threads_named(thread), 1, "device %u's submission thread is %s", i, thread);
  }
  cr_assert_eq(found, total, "maize found %u OpenCL devices, the loader %u", found, total);
  cr_assert_eq(mz_runtime_queue_count(rt), queues);
  cr_assert_str_eq(mz_device_kind_name(MZ_DEVICE_OPENCL), "opencl");
  mz_runtime_destroy(rt);
}

/* host_cores follows the device type the loader reports: a CPU device
 * (PoCL's pthread device) runs kernels on the host's cores, spread over its
 * compute units; any other type has processors of its own.  The CPU
 * device of the same runtime is one core per worker. */
Test(opencl, host_cores_from_device_type)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("cpu,opencl", 0);
  cl_uint np = 0;
  cr_assert_eq(clGetPlatformIDs(0, NULL, &np), CL_SUCCESS);
  cl_platform_id plats[8];
  cr_assert_eq(clGetPlatformIDs(np < 8 ? np : 8, plats, NULL), CL_SUCCESS);
  unsigned checked = 0;
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, i), &info), MZ_OK);
    if (info.kind == MZ_DEVICE_CPU) {
      cr_assert_eq(info.host_cores, 1, "the CPU device: host_cores %u", info.host_cores);
      continue;
    }
    if (info.kind != MZ_DEVICE_OPENCL)
      continue;
    /* The loader's device of that name: its type and compute units. */
    bool found = false;
    for (cl_uint p = 0; p < np && p < 8 && !found; p++) {
      cl_device_id ids[16];
      cl_uint nd = 0;
      if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, ids, &nd) != CL_SUCCESS)
        continue;
      for (cl_uint k = 0; k < nd && k < 16 && !found; k++) {
        char name[256] = "";
        clGetDeviceInfo(ids[k], CL_DEVICE_NAME, sizeof name, name, NULL);
        if (strcmp(name, info.name))
          continue;
        found = true;
        cl_device_type type = 0;
        cl_uint cus = 0;
        clGetDeviceInfo(ids[k], CL_DEVICE_TYPE, sizeof type, &type, NULL);
        clGetDeviceInfo(ids[k], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
        unsigned want = (type & CL_DEVICE_TYPE_CPU) ? (cus ? cus : 1) : 0;
        cr_assert_eq(info.host_cores, want, "%s: host_cores %u, want %u (type %#llx, %u compute units)", info.name,
                     info.host_cores, want, (unsigned long long)type, cus);
      }
    }
    cr_assert(found, "no OpenCL device named \"%s\"", info.name);
    if (strstr(info.name, "pthread"))
      cr_assert_gt(info.host_cores, 0, "PoCL's pthread device runs on the host's cores");
    checked++;
  }
  cr_assert_gt(checked, 0, "no OpenCL device was checked");
  mz_runtime_destroy(rt);
}

/* OpenCL devices of a runtime. */
static unsigned opencl_count(mz_runtime *rt)
{
  unsigned n = 0;
  while (device_of_kind(rt, MZ_DEVICE_OPENCL, n) >= 0)
    n++;
  return n;
}

Test(opencl, select_by_index_and_queue_count)
{
  NEED_OPENCL(2);
  mz_runtime *rt = rt_open("opencl:1", 2);
  cr_assert_eq(opencl_count(rt), 1);
  mz_device_info info;
  cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, (unsigned)device_of_kind(rt, MZ_DEVICE_OPENCL, 0)), &info),
               MZ_OK);
  cr_assert_eq(info.kind, MZ_DEVICE_OPENCL);
  cr_assert_eq(info.queues, 2);
  mz_runtime_destroy(rt);

  rt = rt_open("cpu,opencl", 3);
  cr_assert_eq(device_of_kind(rt, MZ_DEVICE_CPU, 0), 0, "the CPU comes first");
  cr_assert_geq(device_of_kind(rt, MZ_DEVICE_OPENCL, 1), 1);
  mz_runtime_destroy(rt);

  /* Two items, one device each: still one platform, one context, so a
   * kernel chain across them works (checked in the coherence test). */
  rt = rt_open("opencl:0,opencl:1", 0);
  cr_assert_eq(opencl_count(rt), 2);
  mz_runtime_destroy(rt);
}

Test(opencl, absent_index_is_enodev)
{
  NEED_OPENCL(1);
  mz_runtime_config cfg = { .devices = "opencl:999" };
  mz_runtime *rt = NULL;
  cr_assert_eq(mz_runtime_create(&cfg, &rt), MZ_ENODEV);
  cr_assert_null(rt);
  cfg.devices = "opencl:first";
  cr_assert_eq(mz_runtime_create(&cfg, &rt), MZ_EINVAL);
  cr_assert_null(rt);
}

/* ---- kernel loading ---- */

static const char *triple_src =
    "__kernel void triple(__global float *y, ulong n)\n"
    "{ size_t i = get_global_id(0); if (i < n) y[i] = FACTOR * y[i]; }\n";

/* Source in memory with build options, then the program's binary, in
 * memory and on disk: all three must compute the same. */
Test(opencl, source_binary_options)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl:0", 1);
  enum { N = 1000 };
  float h[N], want[N];
  fill(h, N, 1.0f);
  for (int i = 0; i < N; i++)
    want[i] = 3.0f * h[i];

  mz_kernel *k = kernel_src(rt, "triple", "inout f32[] y, u64 n = sizeof(y)", triple_src, "-DFACTOR=3.0f");
  mz_buffer *b = buf_f32(rt, N, h);
  mz_graph *g = graph_new(rt);
  mz_op *r = mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0);
  cr_assert_eq(run_root(g, r, NULL, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  expect_buf(b, want, N, "triple from source");
  mz_graph_destroy(g);

  /* The same program as a binary, built here with plain OpenCL. */
  cl_platform_id p;
  cl_device_id d;
  cl_int err;
  cr_assert_eq(clGetPlatformIDs(1, &p, NULL), CL_SUCCESS);
  cr_assert_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL), CL_SUCCESS);
  cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
  cl_program prog = clCreateProgramWithSource(ctx, 1, &triple_src, NULL, &err);
  cr_assert_eq(clBuildProgram(prog, 1, &d, "-DFACTOR=2.0f", NULL, NULL), CL_SUCCESS);
  size_t bsize = 0;
  cr_assert_eq(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, NULL), CL_SUCCESS);
  unsigned char *bin = malloc(bsize);
  cr_assert_eq(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL), CL_SUCCESS);
  clReleaseProgram(prog);
  clReleaseContext(ctx);

  char path[] = "/tmp/mz-test-binary-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, bin, bsize), (ssize_t)bsize);
  close(fd);

  for (int on_disk = 0; on_disk < 2; on_disk++) {
    mz_kernel_spec s = {
      .name = on_disk ? "triple_bin_disk" : "triple_bin_mem",
      .params = "inout f32[] y, u64 n = sizeof(y)",
      .opencl = { .format = MZ_CODE_BINARY, .data = on_disk ? NULL : bin, .size = on_disk ? 0 : bsize,
                  .path = on_disk ? path : NULL, .entry = "triple" },
    };
    mz_kernel *kb = NULL;
    cr_assert_eq(mz_kernel_create(rt, &s, &kb), MZ_OK);
    g = graph_new(rt);
    r = mz_unzip(g, mz_apply(g, kb, mz_value(g, b), NULL), 0);
    int rc = run_root(g, r, NULL, NULL);
    cr_assert_eq(rc, MZ_OK, "%s: %s: %s", s.name, mz_err_name(rc), mz_runtime_last_error(rt));
    for (int i = 0; i < N; i++)
      want[i] *= 2.0f;
    expect_buf(b, want, N, s.name);
    mz_graph_destroy(g);
    mz_kernel_destroy(kb);
  }
  unlink(path);
  free(bin);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* A program that does not compile fails its node with MZ_EBUILD, and the
 * compiler's log reaches the user. */
Test(opencl, build_failure_has_log)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 0);
  mz_kernel *k = kernel_src(rt, "broken", "inout f32[] y, u64 n = sizeof(y)",
                            "__kernel void broken(__global float *y, ulong n)\n"
                            "{ y[get_global_id(0)] = no_such_identifier_here; }\n",
                            NULL);
  mz_buffer *b = buf_f32(rt, 64, NULL);
  mz_graph *g = graph_new(rt);
  mz_op *r = mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0);
  mz_future *f = NULL;
  int rc = mz_schedule(g, r, NULL, &f);
  const char *msg;
  if (rc == MZ_OK) {
    rc = mz_future_wait(f);
    msg = mz_future_message(f);
  } else {
    msg = mz_runtime_last_error(rt);
  }
  cr_assert_eq(rc, MZ_EBUILD, "got %s", mz_err_name(rc));
  cr_assert(strstr(msg, "no_such_identifier_here"), "the build log is missing from the message: \"%s\"", msg);
  mz_future_destroy(f);

  /* A missing entry point is a build failure too. */
  mz_kernel_spec s = {
    .name = "absent",
    .params = "inout f32[] y, u64 n = sizeof(y)",
    .opencl = { .format = MZ_CODE_SOURCE, .data = triple_src, .options = "-DFACTOR=1.0f" },
  };
  mz_kernel *k2 = NULL;
  cr_assert_eq(mz_kernel_create(rt, &s, &k2), MZ_OK);
  /* A fresh buffer: b's last writer failed, so anything on b is canceled. */
  mz_buffer *b2 = buf_f32(rt, 64, NULL);
  r = mz_unzip(g, mz_apply(g, k2, mz_value(g, b2), NULL), 0);
  f = NULL;
  rc = mz_schedule(g, r, NULL, &f);
  if (rc == MZ_OK)
    rc = mz_future_wait(f);
  cr_assert_eq(rc, MZ_EBUILD, "got %s", mz_err_name(rc));
  if (f)
    cr_assert(strstr(mz_future_message(f), "absent"), "message: %s", mz_future_message(f));
  mz_future_destroy(f);

  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_buffer_release(b2);
  mz_kernel_destroy(k);
  mz_kernel_destroy(k2);
  mz_runtime_destroy(rt);
}

/* ---- combinators ---- */

Test(opencl, apply_zip_unzip)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 0);
  enum { N = 4099 }; /* not a multiple of any work-group size */
  float x[N], y[N], want[N];
  fill(x, N, 1.0f);
  fill(y, N, -2.0f);
  for (int i = 0; i < N; i++)
    want[i] = 2.5f * x[i] + y[i];
  mz_kernel *saxpy = kernel_ex(rt, K_SAXPY, NULL, false);
  mz_buffer *bx = buf_f32(rt, N, x), *by = buf_f32(rt, N, y);
  mz_graph *g = graph_new(rt);
  mz_op *args = mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 2.5f), mz_value(g, bx), mz_value(g, by) });
  mz_op *out = mz_apply(g, saxpy, args, NULL);
  mz_op *y1 = mz_unzip(g, out, 2);
  mz_op *x1 = mz_unzip(g, out, 1);
  mz_op *both = mz_zip(g, 2, (mz_op *[]){ x1, y1 });
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));

  mz_future *f = NULL;
  cr_assert_eq(mz_schedule(g, both, NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  cr_assert_eq(mz_future_result_count(f), 2);
  cr_assert_eq(mz_future_result(f, 0), bx);
  cr_assert_eq(mz_future_result(f, 1), by);
  mz_future_destroy(f);
  expect_buf(by, want, N, "saxpy y");
  expect_buf(bx, x, N, "saxpy x (read only)");

  mz_graph_destroy(g);
  mz_buffer_release(bx);
  mz_buffer_release(by);
  mz_kernel_destroy(saxpy);
  mz_runtime_destroy(rt);
}

/* outlike allocates the result on the device; widthof/heightof and a 2-D
 * launch come from the shape. */
Test(opencl, outlike_and_2d_shapes)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 0);
  mz_kernel *twice = kernel_src(rt, "twice", "in f32[] x, outlike(x) f32[] y, u64 n = sizeof(x)",
                                "__kernel void twice(__global const float *x, __global float *y, ulong n)\n"
                                "{ size_t i = get_global_id(0); if (i < n) y[i] = 2.0f * x[i]; }\n",
                                NULL);
  mz_kernel *coords = kernel_src(rt, "coords", "out f32[] y, u32 w = widthof(y), u32 h = heightof(y)",
                                 "__kernel void coords(__global float *y, uint w, uint h)\n"
                                 "{ size_t i = get_global_id(0), j = get_global_id(1);\n"
                                 "  if (i < w && j < h) y[j * w + i] = (float)i + 1000.0f * (float)j; }\n",
                                 NULL);
  enum { N = 300, W = 37, H = 11 };
  float x[N], want[N];
  fill(x, N, 0.5f);
  for (int i = 0; i < N; i++)
    want[i] = 2.0f * x[i];
  mz_buffer *bx = buf_f32(rt, N, x);
  mz_buffer *b2 = NULL;
  cr_assert_eq(mz_buffer_create(rt, MZ_F32, 2, (size_t[]){ W, H }, NULL, &b2), MZ_OK);

  mz_graph *g = graph_new(rt);
  mz_op *out = mz_apply(g, twice, mz_value(g, bx), NULL);
  mz_op *y = mz_unzip(g, out, 1);
  mz_op *c = mz_unzip(g, mz_apply(g, coords, mz_value(g, b2), NULL), 0);
  mz_op *root = mz_join(g, 2, (mz_op *[]){ y, c });
  mz_future *f = NULL;
  cr_assert_eq(mz_schedule(g, root, NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  cr_assert_eq(mz_future_result_count(f), 2);
  mz_buffer *by = mz_future_result(f, 0);
  cr_assert_not_null(by);
  cr_assert_eq(mz_buffer_shape(by)->count, N);
  expect_buf(by, want, N, "outlike result");
  float w2[W * H];
  for (int j = 0; j < H; j++)
    for (int i = 0; i < W; i++)
      w2[j * W + i] = (float)i + 1000.0f * (float)j;
  expect_buf(b2, w2, W * H, "2-D coords");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(bx);
  mz_buffer_release(b2);
  mz_kernel_destroy(twice);
  mz_kernel_destroy(coords);
  mz_runtime_destroy(rt);
}

Test(opencl, join_of_independent_chains)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 0);
  enum { N = 2048, C = 6 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
  mz_kernel *square = kernel_ex(rt, K_SQUARE, NULL, false);
  mz_buffer *b[C];
  float want[C][N];
  mz_graph *g = graph_new(rt);
  mz_op *ends[C];
  for (int c = 0; c < C; c++) {
    float h[N];
    fill(h, N, (float)c);
    b[c] = buf_f32(rt, N, h);
    for (int i = 0; i < N; i++)
      want[c][i] = (0.5f * h[i]) * (0.5f * h[i]) * 3.0f;
    mz_op *v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.5f), mz_value(g, b[c]) }), NULL), 1);
    v = mz_unzip(g, mz_apply(g, square, v, NULL), 0);
    ends[c] = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 3.0f), v }), NULL), 1);
  }
  mz_op *all = mz_join(g, C, ends);
  mz_run_stats st;
  cr_assert_eq(run_root(g, all, "round-robin", &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(st.ops, 3 * C);
  cr_assert_eq(st.failed, 0);
  for (int c = 0; c < C; c++) {
    expect_buf(b[c], want[c], N, "joined chain");
    mz_buffer_release(b[c]);
  }
  mz_graph_destroy(g);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(square);
  mz_runtime_destroy(rt);
}

/* A host function writes the data, OpenCL transforms it, a second host
 * function checks it on the host and changes it again. */
static int host_fill(const mz_call *c)
{
  float *y = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++)
    y[i] = (float)i;
  return 0;
}
static int host_check_and_add(const mz_call *c)
{
  float *y = c->args[0].p;
  int *bad = c->user;
  for (size_t i = 0; i < c->shapes[0].count; i++) {
    if (y[i] != 4.0f * (float)i)
      (*bad)++;
    y[i] += 1.0f;
  }
  return 0;
}

Test(opencl, host_nodes_around_opencl)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("cpu:1,opencl", 0);
  enum { N = 5000 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false); /* OpenCL only: it must go there */
  mz_buffer *b = buf_f32(rt, N, NULL);
  int bad = 0;
  mz_graph *g = graph_new(rt);
  mz_op *v = mz_unzip(g, mz_host(g, host_fill, NULL, mz_value(g, b)), 0);
  v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 4.0f), v }), NULL), 1);
  v = mz_unzip(g, mz_host(g, host_check_and_add, &bad, v), 0);
  v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.5f), v }), NULL), 1);
  mz_run_stats st;
  cr_assert_eq(run_root(g, v, NULL, &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(bad, 0, "%d elements were wrong on the host after the OpenCL scale", bad);
  cr_assert_geq(st.transfers, 3, "host -> device -> host -> device needs copies");
  float want[N];
  for (int i = 0; i < N; i++)
    want[i] = (4.0f * (float)i + 1.0f) * 0.5f;
  expect_buf(b, want, N, "host/opencl/host/opencl");
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

/* "inout f32[] y, u64 n = sizeof(y)": y += 1, with a C body only. */
static int cpu_add_one(const mz_call *c)
{
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++)
    y[i] += 1.0f;
  return 0;
}

/* Chains that alternate a scale (C and OpenCL bodies) and a CPU-only add,
 * re-run under every shipped policy: the planned ones (heft, dmda, dmdas,
 * whose plans re-runs keep) place the scales and leave the CPU-only ones
 * to whichever worker takes them (their CPU placement dropped after the
 * plan), so a CPU node never counts on a worker queue's order.  Every run
 * gives the serial result. */
Test(opencl, cpu_only_nodes_beside_planned_device_nodes)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("cpu:2,opencl", 0);
  enum { N = 2048, C = 4, RUNS = 12 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, true);
  mz_kernel_spec ks = { .name = "add_one", .params = "inout f32[] y, u64 n = sizeof(y)", .cpu = { .fn = cpu_add_one } };
  mz_kernel *add = NULL;
  cr_assert_eq(mz_kernel_create(rt, &ks, &add), MZ_OK);
  mz_buffer *b[C];
  mz_graph *g = graph_new(rt);
  mz_op *ends[C];
  for (int k = 0; k < C; k++) {
    b[k] = buf_f32(rt, N, NULL);
    mz_op *v = mz_value(g, b[k]);
    for (int s = 0; s < 3; s++) {
      v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 2.0f), v }), NULL), 1);
      v = mz_unzip(g, mz_apply(g, add, v, NULL), 0);
    }
    ends[k] = v;
  }
  mz_op *root = mz_join(g, C, ends);
  const char *pols[] = { "heft", "dmda", "dmdas", "round-robin", "eager", "ws", "single" };
  static float x[N], want[N];
  for (unsigned p = 0; p < sizeof pols / sizeof *pols; p++) {
    for (unsigned r = 0; r < RUNS; r++) {
      for (int k = 0; k < C; k++) {
        for (int i = 0; i < N; i++)
          x[i] = (float)((i + k + (int)r) % 17);
        cr_assert_eq(mz_buffer_write(b[k], x, sizeof x), MZ_OK);
      }
      mz_future *f = NULL;
      cr_assert_eq(mz_graph_run(g, root, pols[p], &f), MZ_OK, "%s", mz_runtime_last_error(rt));
      int st = mz_future_wait(f);
      cr_assert_eq(st, MZ_OK, "%s run %u: %s: %s", pols[p], r, mz_err_name(st), mz_future_message(f));
      mz_future_destroy(f);
      for (int k = 0; k < C; k++) {
        for (int i = 0; i < N; i++) {
          float y = (float)((i + k + (int)r) % 17);
          for (int s = 0; s < 3; s++)
            y = 2.0f * y + 1.0f;
          want[i] = y;
        }
        char what[64];
        snprintf(what, sizeof what, "%s run %u chain %d", pols[p], r, k);
        expect_buf(b[k], want, N, what);
      }
    }
  }
  mz_graph_destroy(g);
  for (int k = 0; k < C; k++)
    mz_buffer_release(b[k]);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(add);
  mz_runtime_destroy(rt);
}

/* Tiles of one buffer, each scaled on OpenCL (both devices), put back. */
/* The OpenCL device binds an argument only when it differs from the value
 * bound last for that kernel: alternating buffers and scalars in one chain,
 * and buffers freed and created again (a new cl_mem may get an old one's
 * address), must each reach the kernel. */
Test(opencl, kernel_arguments_follow_each_node)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 1);
  enum { N = 777, ROUNDS = 12 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
  static const float as[] = { 2.0f, 2.0f, 0.5f, 3.0f, 3.0f };
  for (int round = 0; round < ROUNDS; round++) {
    float init[2][N], want[2][N];
    fill(init[0], N, (float)round);
    fill(init[1], N, 100.0f + (float)round);
    memcpy(want, init, sizeof want);
    mz_buffer *b[2] = { buf_f32(rt, N, init[0]), buf_f32(rt, N, init[1]) };
    mz_graph *g = graph_new(rt);
    mz_op *v[2] = { mz_value(g, b[0]), mz_value(g, b[1]) };
    /* Buffers 0, 0, 1, 0, 1, ...: the same, then a change, back and forth. */
    for (int i = 0; i < 9; i++) {
      int which = i < 2 ? 0 : i % 2;
      float a = as[(i + round) % 5];
      v[which] = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, a), v[which] }), NULL), 1);
      for (int k = 0; k < N; k++)
        want[which][k] *= a;
    }
    cr_assert_eq(run_root(g, mz_zip(g, 2, v), NULL, NULL), MZ_OK, "round %d: %s", round, mz_runtime_last_error(rt));
    expect_buf(b[0], want[0], N, "the first buffer");
    expect_buf(b[1], want[1], N, "the second buffer");
    mz_graph_destroy(g);
    mz_buffer_release(b[0]);
    mz_buffer_release(b[1]);
  }
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

Test(opencl, partition_tiles_on_opencl)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 2);
  enum { W = 64, H = 50, T = 7 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
  mz_kernel *square = kernel_ex(rt, K_SQUARE, NULL, false);
  float h[W * H], want[W * H];
  fill(h, W * H, 1.0f);
  for (int i = 0; i < W * H; i++)
    want[i] = (1.5f * h[i]) * (1.5f * h[i]);
  mz_buffer *b = NULL;
  cr_assert_eq(mz_buffer_create(rt, MZ_F32, 2, (size_t[]){ W, H }, h, &b), MZ_OK);
  mz_graph *g = graph_new(rt);
  mz_op *tiles = mz_partition(g, mz_value(g, b), T);
  mz_op *done[T];
  for (unsigned t = 0; t < T; t++) {
    mz_op *v = mz_unzip(g, tiles, t);
    v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 1.5f), v }), NULL), 1);
    done[t] = mz_unzip(g, mz_apply(g, square, v, NULL), 0);
  }
  mz_op *whole = mz_unpartition(g, mz_zip(g, T, done));
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_run_stats st;
  cr_assert_eq(run_root(g, whole, "round-robin", &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(st.failed, 0);
  expect_buf(b, want, W * H, "unpartitioned");
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(square);
  mz_runtime_destroy(rt);
}

/* Tiles written on OpenCL and never put back: the parent is read through
 * mz_buffer_read, by a host node of another graph, by tiles of another
 * graph's partition on the CPU, and whole on OpenCL; every reader sees the
 * tiles' writes (the parent's host memory and copies used to lag behind,
 * returning the data from before the partition). */
struct tiles_seen {
  const float *want;
  size_t n;
  int bad;
};

static int host_expect(const mz_call *c)
{
  struct tiles_seen *ts = c->user;
  const float *y = c->args[0].p;
  size_t n = c->shapes[0].count;
  for (size_t i = 0; i < n; i++)
    if (y[i] != ts->want[i]) ts->bad++;
  return 0;
}

Test(opencl, parent_of_tiles_written_on_opencl_reads_latest)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("cpu:1,opencl", 2);
  enum { W = 32, H = 12, T = 3 };
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false); /* OpenCL only */
  mz_kernel *cpu_scale = kernel_ex(rt, K_SCALE, "scale_both", true);
  float h[W * H], want[W * H];
  fill(h, W * H, 1.0f);
  for (int i = 0; i < W * H; i++) want[i] = 3.0f * h[i];
  mz_buffer *b = NULL;
  cr_assert_eq(mz_buffer_create(rt, MZ_F32, 2, (size_t[]){ W, H }, h, &b), MZ_OK);
  mz_graph *g = graph_new(rt);
  mz_op *tiles = mz_partition(g, mz_value(g, b), T);
  mz_op *done[T];
  for (unsigned t = 0; t < T; t++)
    done[t] = mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 3.0f), mz_unzip(g, tiles, t) }), NULL);
  cr_assert_eq(run_root(g, mz_join(g, T, done), NULL, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  /* 1. mz_buffer_read of the parent, still partitioned in g. */
  expect_buf(b, want, W * H, "the parent read while its tiles hold the latest data on OpenCL");
  /* 2. A host node of another graph. */
  struct tiles_seen ts = { want, W * H, 0 };
  mz_graph *g2 = graph_new(rt);
  cr_assert_eq(run_root(g2, mz_host(g2, host_expect, &ts, mz_value(g2, b)), NULL, NULL), MZ_OK);
  cr_expect_eq(ts.bad, 0, "a host node of another graph saw %d stale elements", ts.bad);
  mz_graph_destroy(g2);
  /* 3. Tiles of another partition, scaled on the CPU, then checked by a
   * host node after the unpartition. */
  for (int i = 0; i < W * H; i++) want[i] *= 2.0f;
  ts.bad = 0;
  g2 = graph_new(rt);
  mz_op *tiles2 = mz_partition(g2, mz_value(g2, b), 2);
  mz_op *d2[2];
  for (unsigned t = 0; t < 2; t++)
    d2[t] = mz_unzip(g2, mz_apply(g2, cpu_scale, mz_zip(g2, 2, (mz_op *[]){ mz_f32(g2, 2.0f), mz_unzip(g2, tiles2, t) }),
                                  NULL), 1);
  mz_op *whole = mz_unpartition(g2, mz_zip(g2, 2, d2));
  cr_assert_eq(mz_graph_status(g2), MZ_OK, "%s", mz_graph_message(g2));
  cr_assert_eq(run_root(g2, mz_host(g2, host_expect, &ts, whole), "single", NULL), MZ_OK, "%s",
               mz_runtime_last_error(rt));
  cr_expect_eq(ts.bad, 0, "tiles of another graph saw %d stale elements", ts.bad);
  mz_graph_destroy(g2);
  expect_buf(b, want, W * H, "after the second partition");
  /* 4. The parent whole on OpenCL, after tiles of g written on OpenCL
   * again (g is re-run: its tiles read the parent's latest data too). */
  for (int i = 0; i < W * H; i++) want[i] *= 3.0f;
  mz_future *f = NULL;
  cr_assert_eq(mz_graph_run(g, mz_join(g, T, done), NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  for (int i = 0; i < W * H; i++) want[i] *= 0.5f;
  g2 = graph_new(rt);
  cr_assert_eq(run_root(g2, mz_apply(g2, scale, mz_zip(g2, 2, (mz_op *[]){ mz_f32(g2, 0.5f), mz_value(g2, b) }), NULL),
                        NULL, NULL),
               MZ_OK, "%s", mz_runtime_last_error(rt));
  mz_graph_destroy(g2);
  expect_buf(b, want, W * H, "the parent scaled whole on OpenCL after its tiles were");
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(cpu_scale);
  mz_runtime_destroy(rt);
}

/* ---- coherence: CPU <-> OpenCL 0 <-> OpenCL 1 ---- */

Test(opencl, coherence_cpu_ocl0_ocl1)
{
  NEED_OPENCL(2);
  mz_runtime *rt = rt_open("cpu:1,opencl:0,opencl:1", 2);
  cr_assert_eq(mz_policy_register(rt, &pin_policy), MZ_OK);
  int cpu = device_of_kind(rt, MZ_DEVICE_CPU, 0);
  int o0 = device_of_kind(rt, MZ_DEVICE_OPENCL, 0), o1 = device_of_kind(rt, MZ_DEVICE_OPENCL, 1);
  cr_assert(cpu >= 0 && o0 >= 0 && o1 >= 0);
  int devs[3] = { cpu, o0, o1 };

  /* The same four kernels under a name per device, so pin places them. */
  mz_kernel *k[K_COUNT][3];
  for (int w = 0; w < K_COUNT; w++)
    for (int d = 0; d < 3; d++) {
      char name[32];
      snprintf(name, sizeof name, "%s@%d", kdefs[w].name, devs[d]);
      k[w][d] = kernel_ex(rt, w, name, true);
    }

  enum { N = 3001, STEPS = 24 };
  static float x[N], y[N], z[N];
  /* Small values, so that repeated squares neither overflow nor vanish. */
  for (int i = 0; i < N; i++) {
    x[i] = 0.1f + 0.002f * (float)(i % 100);
    y[i] = -0.3f + 0.003f * (float)(i % 50);
    z[i] = 0.0f;
  }
  mz_buffer *bx = buf_f32(rt, N, x), *by = buf_f32(rt, N, y), *bz = buf_f32(rt, N, z);
  mz_graph *g = graph_new(rt);
  mz_op *steps[STEPS];
  /* A pseudo-random walk over devices and kernels, so that every pair of
   * memories hands data to every other, and the reference in plain C. */
  unsigned seed = 12345;
  for (int s = 0; s < STEPS; s++) {
    seed = seed * 1103515245u + 12345u;
    int d = (int)((seed >> 16) % 3), w = (int)((seed >> 8) % K_COUNT);
    mz_op *args;
    switch (w) {
    case K_SAXPY:
      args = mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 0.5f), mz_value(g, s % 2 ? bx : bz), mz_value(g, by) });
      for (int i = 0; i < N; i++)
        y[i] = 0.5f * (s % 2 ? x[i] : z[i]) + y[i];
      break;
    case K_SCALE:
      args = mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.75f), mz_value(g, s % 2 ? by : bx) });
      for (int i = 0; i < N; i++) {
        float *v = s % 2 ? y : x;
        v[i] *= 0.75f;
      }
      break;
    case K_ADD:
      args = mz_zip(g, 3, (mz_op *[]){ mz_value(g, bx), mz_value(g, by), mz_value(g, bz) });
      for (int i = 0; i < N; i++)
        z[i] = x[i] + y[i];
      break;
    default:
      args = mz_value(g, bz);
      for (int i = 0; i < N; i++)
        z[i] = z[i] * z[i];
      break;
    }
    steps[s] = mz_apply(g, k[w][d], args, NULL);
  }
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  for (int i = 0; i < N; i++)
    cr_assert(isfinite(x[i]) && isfinite(y[i]) && isfinite(z[i]), "the reference overflowed at %d", i);
  mz_op *root = mz_join(g, STEPS, steps);
  mz_run_stats st;
  cr_assert_eq(run_root(g, root, "pin", &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(st.ops, STEPS, "%llu ops of %d", (unsigned long long)st.ops, STEPS);
  cr_assert_gt(st.transfers, 0);
  expect_buf(bx, x, N, "x");
  expect_buf(by, y, N, "y");
  expect_buf(bz, z, N, "z");

  /* Then a direct OpenCL 0 -> OpenCL 1 hand-over, with the host copy stale. */
  mz_graph_destroy(g);
  g = graph_new(rt);
  mz_op *v = mz_unzip(g, mz_apply(g, k[K_SCALE][1], mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 2.0f), mz_value(g, by) }), NULL), 1);
  v = mz_unzip(g, mz_apply(g, k[K_SQUARE][2], v, NULL), 0);
  v = mz_unzip(g, mz_apply(g, k[K_SCALE][1], mz_zip(g, 2, (mz_op *[]){ mz_f32(g, -1.0f), v }), NULL), 1);
  cr_assert_eq(run_root(g, v, "pin", &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  for (int i = 0; i < N; i++)
    y[i] = -((2.0f * y[i]) * (2.0f * y[i]));
  expect_buf(by, y, N, "y after ocl0 -> ocl1 -> ocl0");

  mz_graph_destroy(g);
  mz_buffer_release(bx);
  mz_buffer_release(by);
  mz_buffer_release(bz);
  for (int w = 0; w < K_COUNT; w++)
    for (int d = 0; d < 3; d++)
      mz_kernel_destroy(k[w][d]);
  mz_runtime_destroy(rt);
}

/* Synchronous reads and writes through map/unmap (opt-in with
 * MZ_OPENCL_MAP=1 on host-unified devices; Criterion runs each test in its
 * own process, so the variable stays here). */
Test(opencl, transfers_through_map)
{
  NEED_OPENCL(2);
  setenv("MZ_OPENCL_MAP", "1", 1);
  mz_runtime *rt = rt_open("cpu:1,opencl", 1);
  cr_assert_eq(mz_policy_register(rt, &pin_policy), MZ_OK);
  int cpu = device_of_kind(rt, MZ_DEVICE_CPU, 0);
  int o0 = device_of_kind(rt, MZ_DEVICE_OPENCL, 0), o1 = device_of_kind(rt, MZ_DEVICE_OPENCL, 1);
  char n0[32], n1[32], nc[32];
  snprintf(n0, sizeof n0, "scale@%d", o0);
  snprintf(n1, sizeof n1, "square@%d", o1);
  snprintf(nc, sizeof nc, "scale@%d", cpu);
  mz_kernel *k0 = kernel_ex(rt, K_SCALE, n0, false), *k1 = kernel_ex(rt, K_SQUARE, n1, false);
  mz_kernel *kc = kernel_ex(rt, K_SCALE, nc, true);
  enum { N = 777 };
  float h[N], want[N];
  fill(h, N, 0.5f);
  mz_buffer *b = buf_f32(rt, N, h);
  for (int round = 0; round < 3; round++) {
    mz_graph *g = graph_new(rt);
    mz_op *v = mz_unzip(g, mz_apply(g, kc, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.25f), mz_value(g, b) }), NULL), 1);
    v = mz_unzip(g, mz_apply(g, k0, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 2.0f), v }), NULL), 1);
    v = mz_unzip(g, mz_apply(g, k1, v, NULL), 0);
    cr_assert_eq(run_root(g, v, "pin", NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
    /* The host copy is stale: reading fetches it from OpenCL device 1. */
    for (int i = 0; i < N; i++)
      want[i] = h[i] = (2.0f * (0.25f * h[i])) * (2.0f * (0.25f * h[i]));
    expect_buf(b, want, N, "through map");
    mz_graph_destroy(g);
  }
  mz_buffer_release(b);
  mz_kernel_destroy(k0);
  mz_kernel_destroy(k1);
  mz_kernel_destroy(kc);
  mz_runtime_destroy(rt);
}

/* ---- node times with and without timestamps ---- */

struct times_rec {
  unsigned n, bad;
  uint64_t last_end;
};

static void times_node(const mz_node_record *rec, void *user)
{
  struct times_rec *t = user;
  /* One queue, one completion thread at a time: no lock needed, but the
   * counts are read only after the run's wait. */
  t->n++;
  if (rec->status != MZ_OK || rec->start_ns == 0 || rec->end_ns < rec->start_ns)
    t->bad++;
  if (rec->end_ns > t->last_end)
    t->last_end = rec->end_ns;
}

/* Only runs someone observes go to the command queue that keeps
 * timestamps (a few clock reads per command); the others get their
 * batch's time measured at the host, so the busy times and the perf
 * models still see every node.  Runs alternate between the two command
 * queues of one maize queue, which must keep them in order: a chain of
 * several batches on one buffer, three times. */
Test(opencl, node_times_with_and_without_timestamps)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl:0", 1);
  int dev = device_of_kind(rt, MZ_DEVICE_OPENCL, 0);
  cr_assert_geq(dev, 0);
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
  enum { N = 512, STEPS = 300 };
  float h[N], want[N];
  fill(h, N, 1.0f);
  memcpy(want, h, sizeof h);
  mz_buffer *b = buf_f32(rt, N, h);
  struct times_rec tr = { 0 };
  mz_observer obs = { .node = times_node, .user = &tr };
  for (int round = 0; round < 3; round++) {
    bool observed = round == 1;
    cr_assert_eq(mz_runtime_set_observer(rt, observed ? &obs : NULL), MZ_OK);
    mz_graph *g = graph_new(rt);
    float a = round == 1 ? 0.999f : 1.001f;
    mz_op *end = NULL;
    for (int s = 0; s < STEPS; s++)
      end = mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, a), mz_value(g, b) }), NULL);
    for (int s = 0; s < STEPS; s++)
      for (int i = 0; i < N; i++)
        want[i] *= a;
    mz_future *f = NULL;
    cr_assert_eq(mz_schedule(g, end, "single", &f), MZ_OK, "%s", mz_runtime_last_error(rt));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "round %d: %s", round, mz_future_message(f));
    mz_run_stats st;
    cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
    cr_expect_eq(st.ops, STEPS);
    cr_expect_gt(st.callbacks, 1, "round %d: several batches, got %llu", round, (unsigned long long)st.callbacks);
    cr_assert_gt(st.ndevices, (unsigned)dev);
    cr_expect_gt(st.busy_ns[dev], 0, "round %d: the device's busy time is measured", round);
    cr_expect_leq(st.busy_ns[dev], st.elapsed_ns + 1000000, "round %d: busy within the run", round);
    mz_future_destroy(f);
    mz_graph_destroy(g);
    expect_buf(b, want, N, observed ? "observed round" : "unobserved round");
  }
  cr_expect_eq(tr.n, STEPS, "the observed round reports every node");
  cr_expect_eq(tr.bad, 0, "every observed node has a start and an end");
  mz_buffer_release(b);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

/* ---- failures at run time ---- */

/* PoCL has no way to make a well-formed kernel fail once it is running: a
 * device allocation that fails aborts the process (an assertion in
 * pocl_create_migration_commands), and kernels cannot trap.  The real
 * failure it can give is a command refused when it is enqueued, which
 * happens at run time, on the submission thread, after the build: here a
 * work-group larger than CL_DEVICE_MAX_WORK_GROUP_SIZE.  The failed node's
 * dependent is canceled; an independent branch of the same run finishes. */
Test(opencl, kernel_failure_cancels_dependents_only)
{
  NEED_OPENCL(1);
  for (int pol = 0; pol < 2; pol++) {
    const char *policy = pol ? "round-robin" : "single";
    mz_runtime *rt = rt_open("opencl", 0);
    enum { N = 4096 };
    mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
    mz_kernel *square = kernel_ex(rt, K_SQUARE, NULL, false);
    float h[N], want[N];
    fill(h, N, 1.0f);
    for (int i = 0; i < N; i++)
      want[i] = (2.0f * h[i]) * (2.0f * h[i]);
    mz_buffer *bad = buf_f32(rt, N, h), *good = buf_f32(rt, N, h);
    mz_graph *g = graph_new(rt);
    mz_launch huge = { .ndim = 1, .global = { N }, .local = { (size_t)1 << 24 } };
    mz_op *f1 = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 2.0f), mz_value(g, bad) }), &huge), 1);
    mz_op *f2 = mz_unzip(g, mz_apply(g, square, f1, NULL), 0);
    mz_op *o1 = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 2.0f), mz_value(g, good) }), NULL), 1);
    mz_op *o2 = mz_unzip(g, mz_apply(g, square, o1, NULL), 0);
    mz_future *f = NULL;
    cr_assert_eq(mz_schedule(g, mz_join(g, 2, (mz_op *[]){ f2, o2 }), policy, &f), MZ_OK);
    int rc = mz_future_wait(f);
    cr_assert_eq(rc, MZ_EKERNEL, "%s: run status %s (%s)", policy, mz_err_name(rc), mz_future_message(f));
    cr_assert(strstr(mz_future_message(f), "CL_INVALID_WORK_GROUP_SIZE"), "message: %s", mz_future_message(f));
    mz_run_stats st;
    cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
    cr_assert_eq(st.failed, 2, "%s: the failed node and its dependent, got %llu", policy,
                 (unsigned long long)st.failed);
    mz_future_destroy(f);
    expect_buf(good, want, N, "independent branch");
    float tmp[N];
    rc = mz_buffer_read(bad, tmp, sizeof tmp);
    cr_assert_lt(rc, 0, "reading the failed branch's buffer reports its error, got %s", mz_err_name(rc));

    /* A later run on the device still works: the failure was the node's. */
    mz_graph_destroy(g);
    g = graph_new(rt);
    mz_op *again = mz_unzip(g, mz_apply(g, square, mz_value(g, good), NULL), 0);
    cr_assert_eq(run_root(g, again, policy, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
    for (int i = 0; i < N; i++)
      want[i] *= want[i];
    expect_buf(good, want, N, "after the failure");

    mz_graph_destroy(g);
    mz_buffer_release(bad);
    mz_buffer_release(good);
    mz_kernel_destroy(scale);
    mz_kernel_destroy(square);
    mz_runtime_destroy(rt);
  }
}

/* ---- many queues, cross-queue edges ---- */

/* B buffers, S sweeps; each step adds a neighbour buffer into its own, so
 * consecutive steps read what other queues wrote (read-after-write) and
 * overwrite what others read (write-after-read).  Sixteen queues on two
 * devices, placed round-robin: most edges cross queues and devices. */
Test(opencl, many_queues_cross_edges)
{
  NEED_OPENCL(1);
  mz_runtime *rt = rt_open("opencl", 8);
  enum { N = 1024, B = 8, S = 12 };
  mz_kernel *saxpy = kernel_ex(rt, K_SAXPY, NULL, false);
  mz_kernel *scale = kernel_ex(rt, K_SCALE, NULL, false);
  static float ref[B][N];
  mz_buffer *b[B];
  for (int i = 0; i < B; i++) {
    fill(ref[i], N, (float)i * 0.1f);
    b[i] = buf_f32(rt, N, ref[i]);
  }
  mz_graph *g = graph_new(rt);
  mz_op *ends[B] = { 0 };
  for (int s = 0; s < S; s++)
    for (int i = 0; i < B; i++) {
      int j = (i + 1 + s) % B;
      if (j == i)
        j = (j + 1) % B;
      mz_op *a = mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 0.25f), mz_value(g, b[j]), mz_value(g, b[i]) });
      mz_op *v = mz_unzip(g, mz_apply(g, saxpy, a, NULL), 2);
      ends[i] = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.5f), v }), NULL), 1);
      for (int e = 0; e < N; e++)
        ref[i][e] = 0.5f * (0.25f * ref[j][e] + ref[i][e]);
    }
  mz_run_stats st;
  cr_assert_eq(run_root(g, mz_join(g, B, ends), "round-robin", &st), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(st.ops, 2 * B * S);
  for (int i = 0; i < B; i++) {
    expect_buf(b[i], ref[i], N, "lattice");
    mz_buffer_release(b[i]);
  }
  mz_graph_destroy(g);
  mz_kernel_destroy(saxpy);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

/* Copies on the copy queue: every node reads a buffer another node wrote,
 * often on the other device (peer copies ordered by events between the
 * copy queue and the other device's queues), plus fresh host inputs; the
 * results match the plain C ones under each policy, with the copy engine
 * and without it (MZ_COPY_ENGINE=0). */
static void copy_engine_lattice(bool on)
{
  NEED_OPENCL(2);
  if (!on)
    setenv("MZ_COPY_ENGINE", "0", 1);
  mz_runtime *rt = rt_open("opencl", 2);
  enum { N = 4096, B = 6, S = 6 };
  mz_kernel *saxpy = kernel_ex(rt, K_SAXPY, NULL, false);
  mz_kernel *add = kernel_ex(rt, K_ADD, NULL, false);
  const char *pols[] = { "round-robin", "dmda", "heft", "eager", "dmdas" };
  static float ref[B][N], in[S][N], tmp[N];
  for (unsigned p = 0; p < sizeof pols / sizeof *pols; p++) {
    mz_buffer *b[B], *h[S], *z[S][B];
    for (int i = 0; i < B; i++) {
      fill(ref[i], N, (float)i * 0.1f + (float)p);
      b[i] = buf_f32(rt, N, ref[i]);
    }
    mz_graph *g = graph_new(rt);
    mz_op *ends[B] = { 0 };
    for (int s = 0; s < S; s++) {
      fill(in[s], N, (float)s);
      h[s] = buf_f32(rt, N, in[s]); /* a host input of the whole step */
      for (int i = 0; i < B; i++) {
        int j = (i + 1 + s) % B;
        if (j == i)
          j = (j + 1) % B;
        z[s][i] = buf_f32(rt, N, NULL);
        mz_op *a = mz_zip(g, 3, (mz_op *[]){ mz_value(g, b[j]), mz_value(g, h[s]), mz_value(g, z[s][i]) });
        mz_op *zz = mz_unzip(g, mz_apply(g, add, a, NULL), 2);
        mz_op *x = mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 0.5f), zz, mz_value(g, b[i]) });
        ends[i] = mz_unzip(g, mz_apply(g, saxpy, x, NULL), 2);
        for (int e = 0; e < N; e++) {
          tmp[e] = ref[j][e] + in[s][e];
          ref[i][e] = 0.5f * tmp[e] + ref[i][e];
        }
      }
    }
    mz_run_stats st;
    cr_assert_eq(run_root(g, mz_join(g, B, ends), pols[p], &st), MZ_OK, "%s: %s", pols[p], mz_runtime_last_error(rt));
    cr_expect_eq(st.ops, 2 * B * S);
    cr_expect_gt(st.transfers, 0);
    for (int i = 0; i < B; i++) {
      expect_buf(b[i], ref[i], N, pols[p]);
      mz_buffer_release(b[i]);
    }
    for (int s = 0; s < S; s++) {
      mz_buffer_release(h[s]);
      for (int i = 0; i < B; i++)
        mz_buffer_release(z[s][i]);
    }
    mz_graph_destroy(g);
  }
  mz_kernel_destroy(saxpy);
  mz_kernel_destroy(add);
  mz_runtime_destroy(rt);
}

Test(opencl, copy_engine_lattice) { copy_engine_lattice(true); }
Test(opencl, lattice_without_copy_engine) { copy_engine_lattice(false); }

/* ---- policy conformance on OpenCL and on CPU + OpenCL ---- */

/* A small DAG: two independent chains that meet in an add, then a saxpy
 * on the sum, repeated on four tiles' worth of buffers; its result is
 * compared with the same computation in plain C. */
static void conformance(const char *devices)
{
  mz_runtime *rt = rt_open(devices, 2);
  enum { N = 1500, R = 4 };
  mz_kernel *k[K_COUNT];
  for (int w = 0; w < K_COUNT; w++)
    k[w] = kernel_ex(rt, w, NULL, true);
  for (unsigned p = 0; mz_policy_name(rt, p); p++) {
    const char *policy = mz_policy_name(rt, p);
    mz_buffer *bx[R], *by[R], *bz[R];
    float want[R][N];
    mz_graph *g = graph_new(rt);
    mz_op *ends[R];
    for (int r = 0; r < R; r++) {
      float x[N], y[N];
      fill(x, N, (float)r);
      fill(y, N, 1.0f - (float)r);
      bx[r] = buf_f32(rt, N, x);
      by[r] = buf_f32(rt, N, y);
      bz[r] = buf_f32(rt, N, NULL);
      for (int i = 0; i < N; i++) {
        float sx = 3.0f * x[i], sy = y[i] * y[i], z = sx + sy;
        want[r][i] = 2.0f * sx + z;
      }
      mz_op *sx = mz_unzip(g, mz_apply(g, k[K_SCALE], mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 3.0f), mz_value(g, bx[r]) }), NULL), 1);
      mz_op *sy = mz_unzip(g, mz_apply(g, k[K_SQUARE], mz_value(g, by[r]), NULL), 0);
      mz_op *z = mz_unzip(g, mz_apply(g, k[K_ADD], mz_zip(g, 3, (mz_op *[]){ sx, sy, mz_value(g, bz[r]) }), NULL), 2);
      ends[r] = mz_unzip(g, mz_apply(g, k[K_SAXPY], mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 2.0f), sx, z }), NULL), 2);
    }
    mz_run_stats st;
    int rc = run_root(g, mz_join(g, R, ends), policy, &st);
    cr_assert_eq(rc, MZ_OK, "policy %s on %s: %s: %s", policy, devices, mz_err_name(rc), mz_runtime_last_error(rt));
    cr_assert_eq(st.ops, 4 * R, "policy %s on %s", policy, devices);
    for (int r = 0; r < R; r++) {
      char what[96];
      snprintf(what, sizeof what, "policy %s on %s, z[%d]", policy, devices, r);
      expect_buf(bz[r], want[r], N, what);
      mz_buffer_release(bx[r]);
      mz_buffer_release(by[r]);
      mz_buffer_release(bz[r]);
    }
    mz_graph_destroy(g);
  }
  for (int w = 0; w < K_COUNT; w++)
    mz_kernel_destroy(k[w]);
  mz_runtime_destroy(rt);
}

Test(opencl, policy_conformance_opencl)
{
  NEED_OPENCL(1);
  conformance("opencl");
}

Test(opencl, policy_conformance_cpu_opencl)
{
  NEED_OPENCL(1);
  conformance("cpu,opencl");
}
