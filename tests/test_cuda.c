/* Tests of the CUDA backend (devices/cuda/).
 *
 * Without a GPU: the run-time loader (a missing library, a library that
 * lacks a symbol, the MZ_CUDA_LIBRARY override), discovery with no usable
 * driver ("all" finds no CUDA device, "cuda:0" is MZ_ENODEV with a
 * message), and that the backend is built and registered.  Where a GPU is
 * present: a PTX error is MZ_EBUILD with the JIT log, saxpy runs, data
 * stays coherent between the CPU and the GPU, edges between streams hold,
 * one host callback is taken per batch, and a faulting kernel marks the
 * device dead without hanging anything.  GPU tests skip, saying why, on a
 * machine without a CUDA driver or GPU.
 *
 * MZ_FAKE_CUDA is a library with cuInit only (tests/fake_cuda.c);
 * MZ_KERNELS_PTX is examples/kernels/kernels.ptx. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_emu/client.h"
#include "device_ops.h"
#include "devices/cuda/cuda_loader.h"
#include "maize.h"
#include "mz_config.h"

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(cuda, .timeout = 120);

extern const struct mz__devtype mz__devtype_cuda;

/* ---- helpers ---- */

#define NEED_GPU() need_cuda()
#define NEED_EMU() need_emu()

static mz_runtime *runtime(const char *devices, const char *policy, unsigned streams) {
  mz_runtime_config cfg = {.devices = devices, .policy = policy, .cuda_streams = streams};
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&cfg, &rt);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(\"%s\"): %s", devices, mz_err_name(rc));
  return rt;
}

static unsigned count_kind(const mz_runtime *rt, mz_device_kind kind) {
  unsigned n = 0;
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, i), &info), MZ_OK);
    if (info.kind == kind) n++;
  }
  return n;
}

static mz_device *first_cuda(const mz_runtime *rt) {
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    mz_device_get_info(mz_runtime_device(rt, i), &info);
    if (info.kind == MZ_DEVICE_CUDA) return mz_runtime_device(rt, i);
  }
  return NULL;
}

static mz_kernel *ptx_kernel(mz_runtime *rt, const char *name, const char *params) {
  mz_kernel_spec spec = {
      .name = name,
      .params = params,
      .cuda = {.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX},
  };
  mz_kernel *k = NULL;
  int rc = mz_kernel_create(rt, &spec, &k);
  cr_assert_eq(rc, MZ_OK, "kernel %s: %s", name, mz_runtime_last_error(rt));
  return k;
}

static mz_buffer *fbuf(mz_runtime *rt, size_t n, float v) {
  float *h = malloc(n * sizeof *h);
  cr_assert_not_null(h);
  for (size_t i = 0; i < n; i++) h[i] = v + (float)(i % 7);
  mz_buffer *b = NULL;
  cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, h, &b), MZ_OK);
  free(h);
  return b;
}

static int run(mz_graph *g, mz_op *root, const char *policy, mz_run_stats *st) {
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc < 0) return rc;
  rc = mz_future_wait_for(f, 60ull * 1000000000ull);
  cr_assert_neq(rc, MZ_ETIMEDOUT, "the run did not finish in 60 s");
  if (rc < 0) cr_log_info("run failed: %s: %s", mz_err_name(rc), mz_future_message(f));
  if (st) {
    mz_run_stats s;
    cr_assert_eq(mz_future_stats(f, &s), MZ_OK);
    *st = s;
  }
  mz_future_destroy(f);
  return rc;
}

/* ---- without a GPU ---- */

Test(cuda, backend_registered) {
  cr_assert_eq(MZ_HAVE_CUDA, 1, "the CUDA backend is compiled but mz_config.h says otherwise");
  bool found = false;
  for (unsigned i = 0; mz__devtypes[i]; i++)
    if (mz__devtypes[i] == &mz__devtype_cuda) found = true;
  cr_assert(found, "mz__devtype_cuda is not in the registry");
  cr_assert_str_eq(mz__devtype_cuda.name, "cuda");
  cr_assert_eq(mz__devtype_cuda.kind, MZ_DEVICE_CUDA);
  cr_assert_not(mz__devtype_cuda.ops->inline_submit);
  cr_assert_not(mz__devtype_cuda.ops->host_memory);
}

Test(cuda, loader_missing_library) {
  struct mz__cuda_api api;
  memset(&api, 0xab, sizeof api);
  char err[512] = "";
  int rc = mz__cuda_load("/nonexistent/libcuda.so.1", &api, err, sizeof err);
  cr_assert_eq(rc, MZ_ELOAD);
  cr_assert(strstr(err, "/nonexistent/libcuda.so.1"), "message: %s", err);
  cr_assert_null(api.handle);
  cr_assert_null(api.Init, "the table must be zeroed on failure");
  mz__cuda_unload(&api); /* a zeroed table is fine to unload */
  mz__cuda_unload(NULL);
}

Test(cuda, loader_missing_symbol) {
  struct mz__cuda_api api;
  char err[512] = "";
  int rc = mz__cuda_load(MZ_FAKE_CUDA, &api, err, sizeof err);
  cr_assert_eq(rc, MZ_ELOAD, "a library with cuInit only must not load");
  /* cuInit is there; the next symbol of the table is not. */
  cr_assert(strstr(err, "cuDriverGetVersion"), "message: %s", err);
  cr_assert(strstr(err, MZ_FAKE_CUDA), "message: %s", err);
  cr_assert_null(api.handle);
  cr_assert_null(api.Init);
}

Test(cuda, loader_env_override) {
  setenv("MZ_CUDA_LIBRARY", "/nonexistent/libcuda-test.so", 1);
  struct mz__cuda_api api;
  char err[512] = "";
  cr_assert_eq(mz__cuda_load(NULL, &api, err, sizeof err), MZ_ELOAD);
  cr_assert(strstr(err, "libcuda-test.so"), "message: %s", err);
  /* An explicit path wins over the environment. */
  cr_assert_eq(mz__cuda_load(MZ_FAKE_CUDA, &api, err, sizeof err), MZ_ELOAD);
  cr_assert(strstr(err, "cuDriverGetVersion"), "message: %s", err);
}

/* "all" on a machine whose driver cannot be used: a runtime with no CUDA
 * device, not an error. */
Test(cuda, all_without_driver_has_no_cuda_device) {
  setenv("MZ_CUDA_LIBRARY", MZ_FAKE_CUDA, 1);
  mz_runtime *rt = runtime("all", NULL, 0);
  cr_assert_eq(count_kind(rt, MZ_DEVICE_CUDA), 0);
  cr_assert_geq(count_kind(rt, MZ_DEVICE_CPU), 1, "the CPU is always there");
  mz_runtime_destroy(rt);
}

/* "cuda:0" without a usable driver: MZ_ENODEV with the reason. */
Test(cuda, index_without_driver_is_enodev) {
  setenv("MZ_CUDA_LIBRARY", MZ_FAKE_CUDA, 1);
  mz_runtime_config cfg = {.devices = "cuda:0"};
  mz_runtime *rt = NULL;
  cr_assert_eq(mz_runtime_create(&cfg, &rt), MZ_ENODEV);
  cr_assert_null(rt);

  /* The message itself, through discovery on a runtime that exists. */
  rt = runtime("cpu", NULL, 0);
  struct mz__devsel sel = {.all = false, .arg = "0"};
  cr_assert_eq(mz__devtype_cuda.discover(rt, &mz__devtype_cuda, &sel), MZ_ENODEV);
  const char *msg = mz_runtime_last_error(rt);
  cr_assert(strstr(msg, "cuda:0"), "message: %s", msg);
  cr_assert(strstr(msg, "cuDriverGetVersion"), "the message should say why: %s", msg);
  sel = (struct mz__devsel){.all = true};
  cr_assert_eq(mz__devtype_cuda.discover(rt, &mz__devtype_cuda, &sel), 0);
  sel = (struct mz__devsel){.arg = "zero"};
  cr_assert_eq(mz__devtype_cuda.discover(rt, &mz__devtype_cuda, &sel), MZ_EINVAL);
  cr_assert_eq(mz_runtime_device_count(rt), count_kind(rt, MZ_DEVICE_CPU));
  mz_runtime_destroy(rt);
}

/* MZ_DEVICES=cuda on a machine without a driver: creation fails with
 * MZ_ENODEV and says so on stderr. */
Test(cuda, kind_without_driver_is_enodev, .init = cr_redirect_stderr) {
  setenv("MZ_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  unsetenv("MZ_QUIET");
  mz_runtime_config cfg = {.devices = "cuda"};
  mz_runtime *rt = NULL;
  cr_assert_eq(mz_runtime_create(&cfg, &rt), MZ_ENODEV);
  cr_assert_null(rt);
  fflush(stderr);
  char out[4096] = "";
  FILE *f = cr_get_redirected_stderr();
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  cr_assert(strstr(out, "cuda"), "stderr should name the missing device: '%s'", out);
}

/* ---- with a GPU ---- */

static const char bad_ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry broken(.param .u64 p)\n{\n  this is not ptx;\n}\n";

Test(cuda, ptx_error_is_ebuild_with_log) {
  NEED_GPU();
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  mz_kernel_spec spec = {
      .name = "broken",
      .params = "inout f32[] y",
      .cuda = {.format = MZ_CODE_PTX, .data = bad_ptx},
  };
  mz_kernel *k = NULL;
  cr_assert_eq(mz_kernel_create(rt, &spec, &k), MZ_OK);

  /* Directly through the backend: the JIT log comes back. */
  mz_device *dev = first_cuda(rt);
  cr_assert_not_null(dev);
  void *kdev = NULL;
  char *log = NULL;
  cr_assert_eq(dev->ops->prepare(dev, k, &kdev, &log), MZ_EBUILD);
  cr_assert_null(kdev);
  cr_assert_not_null(log);
  cr_log_info("JIT log: %s", log);
  cr_assert(strstr(log, "broken") && strstr(log, "rror"), "log: %s", log);
  free(log);

  /* And through a run. */
  mz_buffer *y = fbuf(rt, 1000, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *out = mz_apply(g, k, mz_value(g, y), NULL);
  mz_future *f = NULL;
  int rc = mz_schedule(g, out, NULL, &f);
  if (rc == MZ_OK) {
    rc = mz_future_wait_for(f, 60ull * 1000000000ull);
    cr_log_info("message: %s", mz_future_message(f));
    mz_future_destroy(f);
  }
  cr_assert_eq(rc, MZ_EBUILD, "got %s", mz_err_name(rc));
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

Test(cuda, device_info) {
  NEED_GPU();
  mz_runtime *rt = runtime("cuda:0", NULL, 3);
  mz_device *dev = first_cuda(rt);
  cr_assert_not_null(dev);
  mz_device_info info;
  cr_assert_eq(mz_device_get_info(dev, &info), MZ_OK);
  cr_log_info("%s: cc %d.%d, %u SMs, %llu MiB, pci %s, numa %d, %s", info.name, info.cc_major,
              info.cc_minor, info.compute_units, (unsigned long long)(info.memory >> 20),
              info.pci_bus_id, info.numa_node, info.version);
  cr_assert_gt(strlen(info.name), 0);
  cr_assert_geq(info.cc_major, 3);
  cr_assert_gt(info.compute_units, 0);
  cr_assert_gt(info.memory, 0);
  cr_assert_eq(strlen(info.pci_bus_id), 12, "bus id '%s'", info.pci_bus_id);
  cr_assert_eq(info.queues, 3);
  cr_assert_geq(info.max_work_group, 512);
  cr_assert_gt(info.local_memory, 0);
  cr_assert_gt(info.max_alloc, 0);
  cr_assert(info.fp64);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

Test(cuda, saxpy) {
  NEED_GPU();
  mz_runtime *rt = runtime("cuda:0", NULL, 0);
  mz_kernel *k = ptx_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)");
  const size_t n = (1u << 20) + 7; /* not a multiple of the block */
  mz_buffer *x = fbuf(rt, n, 1.0f), *y = fbuf(rt, n, 10.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *out = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f32(g, 2.0f), mz_value(g, x), mz_value(g, y)}),
                        NULL);
  cr_assert_eq(run(g, mz_unzip(g, out, 2), NULL, NULL), MZ_OK);
  float *h = malloc(n * sizeof *h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) {
    float want = 2.0f * (1.0f + (float)(i % 7)) + 10.0f + (float)(i % 7);
    cr_assert_float_eq(h[i], want, 1e-5, "y[%zu] = %g, want %g", i, h[i], want);
  }
  free(h);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* The copy engine: a chain of saxpy nodes on one stream, each reading a
 * fresh host buffer x_i into y.  The copies go to the device's copy stream
 * (one stream more than the queues), each node's stream waits for an event
 * recorded after its copies, and the result is right; with
 * MZ_COPY_ENGINE=0 the copies stay on the node's stream (no extra stream,
 * no event). */
static void copy_engine_case(bool on) {
  NEED_EMU();
  if (!on) setenv("MZ_COPY_ENGINE", "0", 1);
  mz_runtime *rt = runtime("cuda:0", "single", 1);
  mz_kernel *k = ptx_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)");
  enum { N = 6 };
  const size_t n = 4099;
  mz_buffer *x[N], *y = fbuf(rt, n, 0.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *v = mz_value(g, y);
  for (int i = 0; i < N; i++) {
    x[i] = fbuf(rt, n, (float)i);
    v = mz_unzip(g, mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f32(g, 1.0f), mz_value(g, x[i]), v}), NULL), 2);
  }
  mzemu_stats before, es;
  emu.get_stats(&before);
  cr_assert_eq(run(g, v, "single", NULL), MZ_OK);
  emu.get_stats(&es);
  /* y = sum over i of (i + i%7) plus its own start (i%7). */
  float *h = malloc(n * sizeof *h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) {
    float want = (float)(N * (N - 1) / 2) + (float)(N + 1) * (float)(i % 7);
    cr_assert_float_eq(h[i], want, 1e-3, "y[%zu] = %g, want %g", i, h[i], want);
  }
  free(h);
  cr_expect_geq(es.copies_htod - before.copies_htod, N + 1, "x_0..x_5 and y go to the device");
  if (on) {
    cr_expect_eq(es.live_streams, 2, "one stream and the copy stream");
    cr_expect_geq(es.event_records - before.event_records, N, "an event after each node's copies");
    cr_expect_geq(es.event_waits - before.event_waits, N, "each node's stream waits for its copies");
  } else {
    cr_expect_eq(es.live_streams, 1);
    cr_expect_eq(es.event_records - before.event_records, 0, "no copy engine, no event on one stream");
  }
  mz_graph_destroy(g);
  for (int i = 0; i < N; i++) mz_buffer_release(x[i]);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

Test(cuda, copies_on_the_copy_stream) { copy_engine_case(true); }
Test(cuda, copies_on_the_node_stream_without_copy_engine) { copy_engine_case(false); }

static int host_add_one(const mz_call *call) {
  float *p = call->args[0].p;
  for (size_t i = 0; i < call->shapes[0].count; i++) p[i] += 1.0f;
  return 0;
}

/* GPU, then host, then GPU on one buffer: each side sees the other's
 * writes (the kernels have no CPU implementation, so they run on CUDA). */
Test(cuda, coherence_cpu_cuda) {
  NEED_GPU();
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  mz_kernel *square = ptx_kernel(rt, "square", "inout f32[] y, u64 n = sizeof(y)");
  const size_t n = 4099;
  mz_buffer *y = fbuf(rt, n, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *a = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 3.0f), mz_value(g, y)}), NULL), 1);
  mz_op *b = mz_host(g, host_add_one, NULL, a);
  mz_op *c = mz_apply(g, square, mz_unzip(g, b, 0), NULL);
  mz_run_stats st;
  cr_assert_eq(run(g, c, NULL, &st), MZ_OK);
  cr_assert_geq(st.transfers, 3, "host->gpu, gpu->host, host->gpu");
  float *h = malloc(n * sizeof *h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) {
    float v = (3.0f * (1.0f + (float)(i % 7)) + 1.0f);
    cr_assert_float_eq(h[i], v * v, 1e-4, "y[%zu] = %g, want %g", i, h[i], v * v);
  }
  /* And the host's write goes back to the device for a second run. */
  float *ones = malloc(n * sizeof *ones);
  for (size_t i = 0; i < n; i++) ones[i] = 2.0f;
  cr_assert_eq(mz_buffer_write(y, ones, n * sizeof *ones), MZ_OK);
  mz_op *d = mz_apply(g, square, mz_value(g, y), NULL);
  cr_assert_eq(run(g, d, NULL, NULL), MZ_OK);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) cr_assert_float_eq(h[i], 4.0f, 0, "y[%zu] = %g", i, h[i]);
  free(ones);
  free(h);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(square);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* Diamonds spread over 4 streams by round-robin: every edge between two
 * streams must hold on the device (cuStreamWaitEvent). */
Test(cuda, edges_between_streams) {
  NEED_GPU();
  mz_runtime *rt = runtime("cuda:0", "round-robin", 4);
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  mz_kernel *add = ptx_kernel(rt, "add", "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)");
  const size_t n = 1 << 18;
  mz_buffer *x = fbuf(rt, n, 0.0f), *y = fbuf(rt, n, 0.0f), *z = fbuf(rt, n, 0.0f);
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = 1.0f;
  cr_assert_eq(mz_buffer_write(x, h, n * sizeof *h), MZ_OK);
  cr_assert_eq(mz_buffer_write(y, h, n * sizeof *h), MZ_OK);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  /* x = 2x; y = 3y; z = x + y; x = z * 0.5 ... eight rounds.  Each round's
   * add reads what two other streams wrote; each scale overwrites what an
   * add on another stream read (write-after-read). */
  mz_op *lasts[8];
  float xv = 1, yv = 1, zv = 0;
  for (int r = 0; r < 8; r++) {
    mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 2.0f), mz_value(g, x)}), NULL);
    mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 3.0f), mz_value(g, y)}), NULL);
    mz_op *s = mz_apply(g, add, mz_zip(g, 3, (mz_op *[]){mz_value(g, x), mz_value(g, y), mz_value(g, z)}), NULL);
    lasts[r] = mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 0.5f), mz_unzip(g, s, 2)}), NULL);
    xv *= 2, yv *= 3, zv = (xv + yv) * 0.5f;
  }
  /* Joining every round's last op makes all 32 ops run (an add writes z
   * whole, so the last round alone would not need the earlier ones). */
  mz_run_stats st;
  cr_assert_eq(run(g, mz_join(g, 8, lasts), "round-robin", &st), MZ_OK);
  cr_assert_eq(st.ops, 32);
  cr_assert_eq(mz_buffer_read(z, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i += 997) cr_assert_float_eq(h[i], zv, 1e-3 * zv, "z[%zu] = %g, want %g", i, h[i], zv);
  cr_assert_eq(mz_buffer_read(x, h, n * sizeof *h), MZ_OK);
  cr_assert_float_eq(h[n - 1], xv, 0);
  free(h);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_buffer_release(z);
  mz_kernel_destroy(scale);
  mz_kernel_destroy(add);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* A chain on one stream: as many host callbacks as batches, not ops. */
Test(cuda, one_callback_per_batch) {
  NEED_GPU();
  mz_runtime *rt = runtime("cuda:0", "single", 1);
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  const size_t n = 1024;
  mz_buffer *y = fbuf(rt, n, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *last = NULL;
  for (int i = 0; i < 200; i++)
    last = mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 1.0f), mz_value(g, y)}), NULL);
  mz_run_stats st;
  cr_assert_eq(run(g, last, "single", &st), MZ_OK);
  cr_log_info("ops %llu batches %llu callbacks %llu", (unsigned long long)st.ops,
              (unsigned long long)st.batches, (unsigned long long)st.callbacks);
  cr_assert_eq(st.ops, 200);
  cr_assert_geq(st.batches, 1);
  cr_assert_eq(st.callbacks, st.batches);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* A buffer released while a batch on the same device finishes.  A real
 * cuMemFree waits until the device is idle, host functions included, and
 * the completion callback takes the device's memory mutex: a free made
 * under that mutex deadlocked on an H200.  Here the emulator starts each
 * host function 200 ms late, so that the free always overlaps one. */
Test(cuda, free_while_a_batch_finishes, .timeout = 60) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "devices=1;hostfn_delay_us=200000", 1);
  mz_runtime *rt = runtime("cuda:0", "single", 1);
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  const size_t n = 4096;
  mz_buffer *x = fbuf(rt, n, 1.0f), *y = fbuf(rt, n, 1.0f);
  mz_graph *g1 = NULL, *g2 = NULL;
  cr_assert_eq(mz_graph_create(rt, &g1), MZ_OK);
  mz_op *a = mz_apply(g1, scale, mz_zip(g1, 2, (mz_op *[]){mz_f32(g1, 2.0f), mz_value(g1, x)}), NULL);
  cr_assert_eq(run(g1, a, "single", NULL), MZ_OK); /* x now has a copy on the device */
  mz_graph_destroy(g1);
  cr_assert_eq(mz_graph_create(rt, &g2), MZ_OK);
  mz_op *b = mz_apply(g2, scale, mz_zip(g2, 2, (mz_op *[]){mz_f32(g2, 3.0f), mz_value(g2, y)}), NULL);
  mz_future *f = NULL;
  cr_assert_eq(mz_schedule(g2, b, "single", &f), MZ_OK);
  struct timespec d = {0, 50 * 1000000L}; /* the batch is on the stream, its host function pending */
  nanosleep(&d, NULL);
  mz_buffer_release(x); /* frees x's device copy while the host function waits to run */
  int rc = mz_future_wait_for(f, 30ull * 1000000000ull);
  cr_assert_eq(rc, MZ_OK, "%s: %s", mz_err_name(rc), mz_future_message(f));
  mz_future_destroy(f);
  float *h = malloc(n * sizeof *h);
  cr_assert_not_null(h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) cr_assert_float_eq(h[i], 3.0f * (1.0f + (float)(i % 7)), 1e-5, "y[%zu] = %g", i, h[i]);
  free(h);
  mz_graph_destroy(g2);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

static const char trap_ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry fault(.param .u64 y, .param .u64 n)\n{\n  trap;\n  ret;\n}\n";

/* A kernel that traps leaves a sticky error: the run fails (no hang), the
 * device is marked dead, and later work that only it could run fails
 * instead of waiting forever. */
Test(cuda, kernel_fault_kills_device) {
  NEED_GPU();
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  mz_kernel_spec spec = {
      .name = "fault",
      .params = "inout f32[] y, u64 n = sizeof(y)",
      .cuda = {.format = MZ_CODE_PTX, .data = trap_ptx},
  };
  mz_kernel *k = NULL;
  cr_assert_eq(mz_kernel_create(rt, &spec, &k), MZ_OK);
  mz_buffer *y = fbuf(rt, 256, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  int rc = run(g, mz_apply(g, k, mz_value(g, y), NULL), NULL, NULL);
  cr_assert_lt(rc, 0, "a trapping kernel must fail its run");
  mz_device *dev = first_cuda(rt);
  cr_assert(mz_device_is_dead(dev), "the device must be marked dead");
  /* The next run that needs CUDA fails at once or when run, never hangs. */
  rc = run(g, mz_apply(g, k, mz_value(g, y), NULL), NULL, NULL);
  cr_assert_lt(rc, 0);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  emu_check_rules();
}

/* ---- driver failures, injected by the emulator ---- */

/* A chain of n scale-by-2 ops on y (4099 floats, from fbuf), then a host
 * node that adds one: returns the run's status; with want_ok, checks y. */
static int chain_run(mz_runtime *rt, int n, bool want_ok) {
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  const size_t len = 4099;
  mz_buffer *y = fbuf(rt, len, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *v = mz_value(g, y);
  for (int i = 0; i < n; i++) v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 2.0f), v}), NULL), 1);
  v = mz_host(g, host_add_one, NULL, v);
  int rc = run(g, v, NULL, NULL);
  if (want_ok) {
    cr_assert_eq(rc, MZ_OK, "%s", mz_err_name(rc));
    float *h = malloc(len * sizeof *h);
    cr_assert_eq(mz_buffer_read(y, h, len * sizeof *h), MZ_OK);
    for (size_t i = 0; i < len; i++) {
      float want = (1.0f + (float)(i % 7)) * (float)(1 << n) + 1.0f;
      cr_assert_float_eq(h[i], want, 1e-3, "y[%zu] = %g, want %g", i, h[i], want);
    }
    free(h);
  }
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  return rc;
}

/* The driver refuses device memory once: the core evicts, retries and the
 * run ends well. */
Test(cuda, emu_alloc_refused_once) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "fail=cuMemAlloc_v2@1:OUT_OF_MEMORY", 1);
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  int rc = chain_run(rt, 4, false);
  cr_log_info("first run: %s", mz_err_name(rc));
  cr_assert(rc == MZ_OK || rc == MZ_ENOMEM, "%s", mz_err_name(rc));
  /* Either way the runtime is fine for the next run. */
  chain_run(rt, 4, true);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* No pinned memory: transfers go from pageable memory, still correct. */
Test(cuda, emu_no_pinned_memory) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "fail=cuMemHostAlloc@1:OUT_OF_MEMORY;fail=cuMemHostAlloc@2:OUT_OF_MEMORY", 1);
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  chain_run(rt, 5, true);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* A copy that faults on the device (reported later, as a real fault is):
 * the run fails, the device is dead, nothing hangs, and the CPU still
 * works. */
Test(cuda, emu_copy_fault_kills_device) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "fail=cuMemcpyHtoDAsync_v2@1:ILLEGAL_ADDRESS", 1);
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  int rc = chain_run(rt, 3, false);
  cr_assert_lt(rc, 0, "a faulting copy must fail its run");
  cr_assert(mz_device_is_dead(first_cuda(rt)));
  cr_assert_lt(chain_run(rt, 2, false), 0, "CUDA is dead and the kernels are CUDA-only");
  mz_runtime_destroy(rt);
  emu_check_rules();
}

/* A launch the driver refuses (not sticky): that node fails with
 * MZ_EKERNEL, its dependents are canceled, the device lives on. */
Test(cuda, emu_launch_refused) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "fail=cuLaunchKernel@2:LAUNCH_OUT_OF_RESOURCES", 1);
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  int rc = chain_run(rt, 4, false);
  cr_assert_eq(rc, MZ_EKERNEL, "%s", mz_err_name(rc));
  cr_assert_not(mz_device_is_dead(first_cuda(rt)));
  chain_run(rt, 3, true);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* The completion callback cannot be enqueued: the device is beyond use,
 * and the monitor completes its batches (nothing hangs). */
Test(cuda, emu_host_func_refused) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "fail=cuLaunchHostFunc@1:INVALID_VALUE", 1);
  mz_runtime *rt = runtime("cpu,cuda:0", NULL, 0);
  cr_assert_lt(chain_run(rt, 3, false), 0);
  cr_assert(mz_device_is_dead(first_cuda(rt)));
  mz_runtime_destroy(rt);
  emu_check_rules();
}

/* ---- several devices, other device kinds, every policy ---- */

/* A chain of scale ops on one buffer, round-robin over two CUDA devices
 * with one stream each, so that every op moves the data between them:
 * directly (cuMemcpyPeerAsync) where peer access is allowed, through the
 * host otherwise. */
static void two_devices(const char *config, bool peer) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", config, 1);
  mz_runtime *rt = runtime("cuda", "round-robin", 1);
  cr_assert_eq(count_kind(rt, MZ_DEVICE_CUDA), 2);
  mz_kernel *scale = ptx_kernel(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
  const size_t n = 10007;
  mz_buffer *y = fbuf(rt, n, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *v = mz_value(g, y);
  for (int i = 0; i < 8; i++) v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 2.0f), v}), NULL), 1);
  mz_run_stats st;
  cr_assert_eq(run(g, v, "round-robin", &st), MZ_OK);
  float *h = malloc(n * sizeof *h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) cr_assert_float_eq(h[i], 256.0f * (1.0f + (float)(i % 7)), 1e-3, "y[%zu] = %g", i, h[i]);
  free(h);
  mzemu_stats es;
  emu.get_stats(&es);
  cr_log_info("%s: %llu peer copies, %llu htod, %llu dtoh, %llu transfers in maize's count", config, es.copies_peer,
              es.copies_htod, es.copies_dtoh, (unsigned long long)st.transfers);
  /* The final read is one copy to the host; every other one is a move. */
  if (peer) {
    cr_assert_geq(es.copies_peer, 3, "moves between the devices go device to device");
    cr_assert_eq(es.copies_dtoh, 1, "only the final read goes to the host");
  } else {
    cr_assert_eq(es.copies_peer, 0, "without peer access both ways no copy may go device to device");
    cr_assert_geq(es.copies_dtoh, 4, "each move goes through the host");
  }
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

Test(cuda, two_devices_peer) { two_devices("devices=2;peer=all", true); }
Test(cuda, two_devices_without_peer_access) { two_devices("devices=2;peer=none", false); }
/* Access one way only: maize copies device to device only where both
 * directions are enabled (cuda_can_copy_peer), so this goes through the
 * host too. */
Test(cuda, two_devices_one_way_peer) { two_devices("devices=2;peer=0>1", false); }

static int cpu_scale(const mz_call *c) {
  float a = c->args[0].f32, *y = c->args[1].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++) y[i] *= a;
  return 0;
}
static int cpu_square(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] *= y[i];
  return 0;
}
static int cpu_add(const mz_call *c) {
  const float *x = c->args[0].p, *y = c->args[1].p;
  float *z = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) z[i] = x[i] + y[i];
  return 0;
}
static int cpu_saxpy(const mz_call *c) {
  float a = c->args[0].f32;
  const float *x = c->args[1].p;
  float *y = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) y[i] = a * x[i] + y[i];
  return 0;
}

enum { K_SCALE, K_SQUARE, K_ADD, K_SAXPY, K_COUNT };

/* The examples' kernels with the implementations asked for: bit 0 CPU,
 * bit 1 CUDA (kernels.ptx), bit 2 OpenCL (kernels.cl). */
static mz_kernel *kernel_on(mz_runtime *rt, int which, unsigned impls) {
  static const struct {
    const char *name, *params;
    mz_cpu_fn fn;
  } ks[K_COUNT] = {
      {"scale", "f32 a, inout f32[] y, u64 n = sizeof(y)", cpu_scale},
      {"square", "inout f32[] y, u64 n = sizeof(y)", cpu_square},
      {"add", "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)", cpu_add},
      {"saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)", cpu_saxpy},
  };
  mz_kernel_spec spec = {.name = ks[which].name, .params = ks[which].params};
  if (impls & 1) spec.cpu.fn = ks[which].fn;
  if (impls & 2) spec.cuda = (mz_code_spec){.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX};
  if (impls & 4) spec.opencl = (mz_code_spec){.format = MZ_CODE_SOURCE, .path = MZ_KERNELS_CL};
  mz_kernel *k = NULL;
  cr_assert_eq(mz_kernel_create(rt, &spec, &k), MZ_OK, "%s", mz_runtime_last_error(rt));
  return k;
}

/* A runtime on devices, or a skip when one of them is not here (OpenCL). */
static mz_runtime *runtime_or_skip(const char *devices, const char *policy, unsigned streams) {
  mz_runtime_config cfg = {.devices = devices, .policy = policy, .cuda_streams = streams, .quiet = true};
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&cfg, &rt);
  if (rc == MZ_ENODEV) cr_skip("no device for '%s' (OpenCL needs PoCL)", devices);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(\"%s\"): %s", devices, mz_err_name(rc));
  return rt;
}

/* CUDA, then OpenCL, then the host, then CUDA again, on one buffer: each
 * sees the others' writes (each kernel has one implementation only). */
Test(cuda, coherence_cpu_cuda_opencl) {
  NEED_GPU();
  mz_runtime *rt = runtime_or_skip("cpu,cuda:0,opencl", NULL, 0);
  mz_kernel *scale_cu = kernel_on(rt, K_SCALE, 2), *square_cl = kernel_on(rt, K_SQUARE, 4);
  const size_t n = 5003;
  mz_buffer *y = fbuf(rt, n, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *a = mz_unzip(g, mz_apply(g, scale_cu, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 3.0f), mz_value(g, y)}), NULL), 1);
  mz_op *b = mz_unzip(g, mz_apply(g, square_cl, a, NULL), 0);
  mz_op *c = mz_host(g, host_add_one, NULL, b);
  mz_op *d = mz_apply(g, scale_cu, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 0.5f), mz_unzip(g, c, 0)}), NULL);
  mz_run_stats st;
  cr_assert_eq(run(g, d, NULL, &st), MZ_OK);
  cr_assert_geq(st.transfers, 4, "cuda, opencl, host, cuda: %llu transfers", (unsigned long long)st.transfers);
  float *h = malloc(n * sizeof *h);
  cr_assert_eq(mz_buffer_read(y, h, n * sizeof *h), MZ_OK);
  for (size_t i = 0; i < n; i++) {
    float v = 3.0f * (1.0f + (float)(i % 7));
    float want = (v * v + 1.0f) * 0.5f;
    cr_assert_float_eq(h[i], want, 1e-3, "y[%zu] = %g, want %g", i, h[i], want);
  }
  free(h);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale_cu);
  mz_kernel_destroy(square_cl);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* Every registered policy on devices, with kernels that every device can
 * run: four independent diamonds (scale, square, add, saxpy), checked
 * against plain C. */
static void conformance(const char *devices, unsigned impls) {
  NEED_GPU();
  setenv("MZ_CUDA_EMU", "devices=2", 1);
  mz_runtime *rt = runtime_or_skip(devices, NULL, 2);
  enum { N = 1500, R = 4 };
  mz_kernel *k[K_COUNT];
  for (int w = 0; w < K_COUNT; w++) k[w] = kernel_on(rt, w, impls);
  unsigned npol = 0;
  for (unsigned p = 0; mz_policy_name(rt, p); p++, npol++) {
    const char *policy = mz_policy_name(rt, p);
    mz_buffer *bx[R], *by[R], *bz[R];
    static float want[R][N], x[N], y[N], out[N];
    mz_graph *g = NULL;
    cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
    mz_op *ends[R];
    for (int r = 0; r < R; r++) {
      for (int i = 0; i < N; i++) x[i] = (float)(r + i % 5), y[i] = 1.0f - (float)r + (float)(i % 3);
      cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, x, &bx[r]), MZ_OK);
      cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, y, &by[r]), MZ_OK);
      cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, NULL, &bz[r]), MZ_OK);
      for (int i = 0; i < N; i++) {
        float sx = 3.0f * x[i], sy = y[i] * y[i], z = sx + sy;
        want[r][i] = 2.0f * sx + z;
      }
      mz_op *sx = mz_unzip(g, mz_apply(g, k[K_SCALE], mz_zip(g, 2, (mz_op *[]){mz_f32(g, 3.0f), mz_value(g, bx[r])}), NULL), 1);
      mz_op *sy = mz_unzip(g, mz_apply(g, k[K_SQUARE], mz_value(g, by[r]), NULL), 0);
      mz_op *z = mz_unzip(g, mz_apply(g, k[K_ADD], mz_zip(g, 3, (mz_op *[]){sx, sy, mz_value(g, bz[r])}), NULL), 2);
      ends[r] = mz_unzip(g, mz_apply(g, k[K_SAXPY], mz_zip(g, 3, (mz_op *[]){mz_f32(g, 2.0f), sx, z}), NULL), 2);
    }
    mz_run_stats st;
    int rc = run(g, mz_join(g, R, ends), policy, &st);
    cr_assert_eq(rc, MZ_OK, "policy %s on %s: %s", policy, devices, mz_err_name(rc));
    cr_assert_eq(st.ops, 4 * R, "policy %s on %s", policy, devices);
    for (int r = 0; r < R; r++) {
      cr_assert_eq(mz_buffer_read(bz[r], out, sizeof out), MZ_OK);
      for (int i = 0; i < N; i++)
        cr_assert_float_eq(out[i], want[r][i], 1e-3f * (1.0f + fabsf(want[r][i])), "policy %s on %s: z[%d][%d] = %g, want %g",
                           policy, devices, r, i, out[i], want[r][i]);
      mz_buffer_release(bx[r]);
      mz_buffer_release(by[r]);
      mz_buffer_release(bz[r]);
    }
    mz_graph_destroy(g);
  }
  cr_log_info("%u policies on %s", npol, devices);
  cr_assert_geq(npol, 6);
  for (int w = 0; w < K_COUNT; w++) mz_kernel_destroy(k[w]);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

Test(cuda, policy_conformance_cuda) { conformance("cuda", 2); }
Test(cuda, policy_conformance_cpu_cuda) { conformance("cpu,cuda", 3); }
Test(cuda, policy_conformance_cpu_cuda_opencl, .timeout = 240) { conformance("cpu,cuda,opencl", 7); }

/* ---- device memory ---- */

/* A device with 64 KiB: a sum over 8 buffers of 16 KiB needs evictions
 * driven by the driver's own out-of-memory errors, and ends correct. */
Test(cuda, small_device_memory) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "memory=64K", 1);
  mz_runtime *rt = runtime("cuda:0", "eager", 0);
  mz_kernel *add = kernel_on(rt, K_ADD, 2);
  enum { N = 4096, L = 8 };
  mz_buffer *b[2 * L];
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *level[L];
  static float v[N];
  for (int i = 0; i < L; i++) {
    for (int j = 0; j < N; j++) v[j] = (float)(i + j % 3);
    cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, v, &b[i]), MZ_OK);
    level[i] = mz_value(g, b[i]);
  }
  int nb = L;
  for (int w = L; w > 1; w /= 2)
    for (int i = 0; i < w / 2; i++) {
      cr_assert_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, NULL, &b[nb]), MZ_OK);
      level[i] = mz_unzip(g, mz_apply(g, add, mz_zip(g, 3, (mz_op *[]){level[2 * i], level[2 * i + 1], mz_value(g, b[nb])}), NULL), 2);
      nb++;
    }
  cr_assert_eq(run(g, level[0], "eager", NULL), MZ_OK);
  cr_assert_eq(mz_buffer_read(b[nb - 1], v, sizeof v), MZ_OK);
  for (int j = 0; j < N; j++) cr_assert_float_eq(v[j], 28.0f + 8.0f * (float)(j % 3), 1e-3, "sum[%d] = %g", j, v[j]);
  mz_graph_destroy(g);
  for (int i = 0; i < nb; i++) mz_buffer_release(b[i]);
  mz_kernel_destroy(add);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* ---- the emulator itself ---- */

/* What the backend's tests rely on: the emulator notices each broken
 * driver rule (here counted, strict=0, rather than aborting). */
static struct mz__cuda_api *host_fn_api;
static CUstream host_fn_stream;
static void CUDA_CB host_fn_calls_driver(void *arg) {
  (void)arg;
  host_fn_api->StreamQuery(host_fn_stream); /* forbidden in a host function */
}
static _Atomic int gate;
static void CUDA_CB host_fn_waits(void *arg) {
  (void)arg;
  while (!atomic_load(&gate)) sched_yield();
}

static unsigned long long violations(void) {
  mzemu_stats s;
  emu.get_stats(&s);
  return s.violations;
}

Test(cuda, emulator_catches_broken_rules) {
  NEED_EMU();
  setenv("MZ_CUDA_EMU", "strict=0", 1);
  struct mz__cuda_api api;
  char err[256];
  cr_assert_eq(mz__cuda_load(NULL, &api, err, sizeof err), MZ_OK, "%s", err);
  cr_assert_eq(api.Init(0), CUDA_SUCCESS);
  CUdevice dev;
  CUcontext ctx;
  cr_assert_eq(api.DeviceGet(&dev, 0), CUDA_SUCCESS);
  cr_assert_eq(api.DevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  unsigned long long v0 = violations();
  CUdeviceptr p;
  cr_assert_eq(api.MemAlloc(&p, 64), CUDA_ERROR_INVALID_CONTEXT, "no context current");
  cr_assert_eq(violations(), v0 + 1);
  cr_assert_eq(api.CtxSetCurrent(ctx), CUDA_SUCCESS);
  CUstream s;
  cr_assert_eq(api.StreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

  /* A driver call from a host function. */
  host_fn_api = &api;
  host_fn_stream = s;
  cr_assert_eq(api.LaunchHostFunc(s, host_fn_calls_driver, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.StreamSynchronize(s), CUDA_SUCCESS);
  cr_assert_eq(violations(), v0 + 2);

  /* Freed memory used, and freed twice. */
  char host[64] = {0};
  cr_assert_eq(api.MemAlloc(&p, 64), CUDA_SUCCESS);
  cr_assert_eq(api.MemFree(p), CUDA_SUCCESS);
  cr_assert_neq(api.MemcpyHtoD(p, host, 64), CUDA_SUCCESS);
  cr_assert_eq(violations(), v0 + 3);
  cr_assert_neq(api.MemFree(p), CUDA_SUCCESS);
  cr_assert_eq(violations(), v0 + 4);

  /* A pinned source changed between the call and the copy. */
  void *pin;
  cr_assert_eq(api.MemHostAlloc(&pin, 64, 0), CUDA_SUCCESS);
  /* Known bytes first: fresh memory may already hold the ones written
   * below (MALLOC_PERTURB_=254 fills it with 0x01), and then nothing
   * would change. */
  memset(pin, 0, 64);
  cr_assert_eq(api.MemAlloc(&p, 64), CUDA_SUCCESS);
  atomic_store(&gate, 0);
  cr_assert_eq(api.LaunchHostFunc(s, host_fn_waits, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.MemcpyHtoDAsync(p, pin, 64, s), CUDA_SUCCESS);
  memset(pin, 1, 64);
  atomic_store(&gate, 1);
  cr_assert_eq(api.StreamSynchronize(s), CUDA_SUCCESS);
  cr_assert_eq(violations(), v0 + 5);

  /* A stream used after destroy: an event recorded on it. */
  CUevent ev;
  cr_assert_eq(api.EventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  cr_assert_eq(api.StreamDestroy(s), CUDA_SUCCESS);
  cr_assert_eq(api.EventRecord(ev, s), CUDA_ERROR_INVALID_HANDLE);
  cr_assert_eq(violations(), v0 + 6);
  cr_assert_eq(api.EventDestroy(ev), CUDA_SUCCESS);
  cr_assert_eq(api.MemFree(p), CUDA_SUCCESS);
  cr_assert_eq(api.MemFreeHost(pin), CUDA_SUCCESS);
  cr_assert_eq(api.DevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
}

/* What the backend relies on from a driver, as the emulator does it:
 * stream order, an event ordering two streams, sticky errors after a
 * fault, host functions never run after one, and the JIT's log. */
static _Atomic int host_fn_ran;
static void CUDA_CB host_fn_count(void *arg) {
  (void)arg;
  atomic_fetch_add(&host_fn_ran, 1);
}

Test(cuda, emulator_driver_semantics) {
  NEED_EMU();
  struct mz__cuda_api api;
  char err[256];
  cr_assert_eq(mz__cuda_load(NULL, &api, err, sizeof err), MZ_OK, "%s", err);
  cr_assert_eq(api.DeviceGetCount(&(int){0}), CUDA_ERROR_NOT_INITIALIZED);
  cr_assert_eq(api.Init(0), CUDA_SUCCESS);
  CUdevice dev;
  CUcontext ctx;
  cr_assert_eq(api.DeviceGet(&dev, 0), CUDA_SUCCESS);
  cr_assert_eq(api.DeviceGet(&dev, 7), CUDA_ERROR_INVALID_DEVICE);
  cr_assert_eq(api.DevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  cr_assert_eq(api.CtxSetCurrent(ctx), CUDA_SUCCESS);

  /* Two streams: B waits for an event recorded on A after a chain of
   * scales there, so B's copy back sees all of them. */
  CUstream a, b;
  cr_assert_eq(api.StreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  cr_assert_eq(api.StreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUmodule mod;
  char *ptx = NULL, *cerr = NULL;
  size_t len = 0;
  cr_assert_eq(mz__code_load(&(mz_code_spec){.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX}, &ptx, &len, &cerr), MZ_OK);
  cr_assert_eq(api.ModuleLoadDataEx(&mod, ptx, 0, NULL, NULL), CUDA_SUCCESS);
  free(ptx);
  CUfunction scale;
  cr_assert_eq(api.ModuleGetFunction(&scale, mod, "scale"), CUDA_SUCCESS);
  cr_assert_eq(api.ModuleGetFunction(&scale, mod, "nonesuch"), CUDA_ERROR_NOT_FOUND);
  cr_assert_eq(api.ModuleGetFunction(&scale, mod, "scale"), CUDA_SUCCESS);
  enum { N = 1000 };
  float h[N];
  for (int i = 0; i < N; i++) h[i] = 1.0f;
  CUdeviceptr y;
  cr_assert_eq(api.MemAlloc(&y, sizeof h), CUDA_SUCCESS);
  cr_assert_eq(api.MemcpyHtoD(y, h, sizeof h), CUDA_SUCCESS);
  float two = 2.0f;
  unsigned long long n = N;
  void *params[] = {&two, &y, &n};
  for (int i = 0; i < 10; i++)
    cr_assert_eq(api.LaunchKernel(scale, (N + 255) / 256, 1, 1, 256, 1, 1, 0, a, params, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.LaunchKernel(scale, 1, 1, 1, 2048, 1, 1, 0, a, params, NULL), CUDA_ERROR_INVALID_VALUE);
  CUevent ev;
  cr_assert_eq(api.EventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  cr_assert_eq(api.EventRecord(ev, a), CUDA_SUCCESS);
  cr_assert_eq(api.StreamWaitEvent(b, ev, 0), CUDA_SUCCESS);
  float out[N];
  cr_assert_eq(api.MemcpyDtoHAsync(out, y, sizeof out, b), CUDA_SUCCESS);
  cr_assert_eq(api.StreamSynchronize(b), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) cr_assert_float_eq(out[i], 1024.0f, 0, "out[%d] = %g", i, out[i]);

  /* A grid too small computes too little, as on a GPU. */
  cr_assert_eq(api.LaunchKernel(scale, 1, 1, 1, 256, 1, 1, 0, a, params, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.MemcpyDtoHAsync(out, y, sizeof out, a), CUDA_SUCCESS);
  cr_assert_eq(api.StreamSynchronize(a), CUDA_SUCCESS);
  cr_assert_float_eq(out[255], 2048.0f, 0);
  cr_assert_float_eq(out[256], 1024.0f, 0);

  /* An access outside the allocation faults; the error is sticky and no
   * host function runs after it. */
  unsigned long long big = 4 * N;
  void *bad[] = {&two, &y, &big};
  atomic_store(&gate, 0); /* the stream waits while the fault and a host function are queued */
  cr_assert_eq(api.LaunchHostFunc(a, host_fn_waits, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.LaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, a, bad, NULL), CUDA_SUCCESS);
  cr_assert_eq(api.LaunchHostFunc(a, host_fn_count, NULL), CUDA_SUCCESS);
  atomic_store(&gate, 1);
  cr_assert_eq(api.StreamSynchronize(a), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(api.StreamQuery(b), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(api.MemAlloc(&y, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(atomic_load(&host_fn_ran), 0);
  const char *name = NULL;
  cr_assert_eq(api.GetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &name), CUDA_SUCCESS);
  cr_assert_str_eq(name, "CUDA_ERROR_ILLEGAL_ADDRESS");
  /* The last release resets the context: it works again. */
  cr_assert_eq(api.DevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
  cr_assert_eq(api.DevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  cr_assert_eq(api.CtxSetCurrent(ctx), CUDA_SUCCESS);
  cr_assert_eq(api.MemAlloc(&y, 16), CUDA_SUCCESS);
  cr_assert_eq(api.MemFree(y), CUDA_SUCCESS);
  cr_assert_eq(api.DevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
}

/* CUDA nodes have times (measured at the host), so the device's busy time
 * is counted and the perf models and policies see what a kernel cost. */
Test(cuda, nodes_have_times) {
  NEED_GPU();
  mz_runtime *rt = runtime("cpu,cuda:0", "single", 1);
  mz_kernel *scale = kernel_on(rt, K_SCALE, 2);
  mz_buffer *y = fbuf(rt, 1 << 16, 1.0f);
  mz_graph *g = NULL;
  cr_assert_eq(mz_graph_create(rt, &g), MZ_OK);
  mz_op *v = mz_value(g, y);
  for (int i = 0; i < 20; i++) v = mz_unzip(g, mz_apply(g, scale, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 1.0f), v}), NULL), 1);
  mz_future *f = NULL;
  cr_assert_eq(mz_schedule(g, v, "single", &f), MZ_OK);
  cr_assert_eq(mz_future_wait_for(f, 60ull * 1000000000ull), MZ_OK);
  mz_run_stats st;
  cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
  mz_device_info info;
  cr_assert_eq(mz_device_get_info(first_cuda(rt), &info), MZ_OK);
  cr_assert_lt(info.index, st.ndevices);
  cr_assert_gt(st.busy_ns[info.index], 0, "the CUDA device ran 20 kernels in no time");
  cr_assert_leq(st.busy_ns[info.index], st.elapsed_ns * 2, "busy %llu ns in a run of %llu ns",
                (unsigned long long)st.busy_ns[info.index], (unsigned long long)st.elapsed_ns);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
  emu_check_clean();
}
