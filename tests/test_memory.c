/* Memory kinds (include/maize/buffer.h): buffers over the user's memory
 * (mz_buffer_wrap: no copy in, never freed, the user's array holds the
 * latest data after mz_future_wait and mz_buffer_read), zero-copy buffers
 * on an OpenCL device that shares host memory (PoCL's CPU device: the run
 * statistics count no transfer, where a plain buffer moves its bytes), and
 * pinned host memory; the results are checked against the same chain on
 * plain buffers.  Also: two OpenCL devices sharing a zero-copy buffer under
 * every policy, and a read of a partitioned buffer before mz_unpartition
 * (it sees the tiles' writes).  OpenCL tests are skipped, saying why,
 * without PoCL. */
#include "common.h"

TestSuite(memory, .timeout = 300);

static void add1(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] += 1.0f;
}

static int add1_fn(const mz_call *c) {
  add1(c);
  return MZ_OK;
}

static const char mul2_src[] =
    "__kernel void mul2(__global float *y, ulong n) { size_t i = get_global_id(0); if (i < n) y[i] *= 2.0f; }\n";

static mz_runtime *runtime_or_skip(const char *devices) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  if (rc != MZ_OK && strstr(devices, "opencl"))
    cr_skip_test("no OpenCL device (%s): install pocl-opencl-icd and set POCL_DEVICES=\"pthread pthread\"",
                 mz_err_name(rc));
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  return rt;
}

/* The CPU-only add1 and the OpenCL-only mul2 kernels. */
static void kernels(mz_runtime *rt, mz_kernel **cpu, mz_kernel **cl) {
  *cpu = test_kernel(rt, "add1", "inout f32[] y, u64 n = sizeof(y)", add1_fn, NULL);
  mz_kernel_spec s = {.name = "mul2",
                      .params = "inout f32[] y, u64 n = sizeof(y)",
                      .opencl = {.format = MZ_CODE_SOURCE, .data = mul2_src, .entry = "mul2"}};
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &s, cl));
}

/* y = ((y * 2) + 1) * 2 + 1: OpenCL, CPU, OpenCL, CPU.  Returns the run's
 * transfers; the buffer is left with the result. */
static uint64_t chain(mz_runtime *rt, mz_kernel *cpu, mz_kernel *cl, mz_buffer *b) {
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *y = mz_value(g, b);
  for (int i = 0; i < 2; i++) {
    y = mz_unzip(g, mz_apply(g, cl, y, NULL), 0);
    y = mz_unzip(g, mz_apply(g, cpu, y, NULL), 0);
  }
  mz_future *f = NULL;
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  MZ_OK_OR_DIE(rt, mz_schedule(g, y, NULL, &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_OK, "%s: %s", mz_err_name(st), mz_future_message(f));
  mz_run_stats stats;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &stats));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  return stats.transfers;
}

static float expect(float x) { return ((x * 2.0f) + 1.0f) * 2.0f + 1.0f; }

/* A wrapped array on the CPU alone: no copy in, updated in place, the
 * user's memory is not freed. */
Test(memory, wrap_cpu) {
  mz_runtime *rt = test_runtime("cpu");
  enum { N = 1000 };
  float *user = malloc(N * sizeof *user);
  for (int i = 0; i < N; i++) user[i] = (float)i;
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_wrap(rt, MZ_F32, 1, (size_t[]){N}, user, &b));
  cr_assert_eq(mz_buffer_memory(b), MZ_BUFFER_WRAPPED | MZ_BUFFER_ZERO_COPY);
  mz_kernel *k = test_kernel(rt, "add1", "inout f32[] y, u64 n = sizeof(y)", add1_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_assert_eq(test_run(g, mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0), NULL, NULL), MZ_OK);
  mz_graph_destroy(g);
  for (int i = 0; i < N; i++) cr_assert_eq(user[i], (float)i + 1.0f, "[%d] %g", i, user[i]);
  /* The user writes the array, tells maize, and reads it through maize. */
  user[3] = 42.0f;
  MZ_OK_OR_DIE(rt, mz_buffer_write(b, user, N * sizeof *user));
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, user, N * sizeof *user));
  cr_assert_eq(user[3], 42.0f);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  /* Still the user's: writable after the buffer and the runtime are gone. */
  user[0] = 7.0f;
  free(user);
}

Test(memory, bad_input) {
  mz_runtime *rt = test_runtime("cpu");
  mz_buffer *b = (mz_buffer *)1;
  cr_assert_eq(mz_buffer_wrap(rt, MZ_F32, 1, (size_t[]){4}, NULL, &b), MZ_EINVAL);
  cr_assert_null(b);
  float x[4];
  cr_assert_eq(mz_buffer_wrap(NULL, MZ_F32, 1, (size_t[]){4}, x, &b), MZ_EINVAL);
  cr_assert_eq(mz_buffer_wrap(rt, MZ_F32, 0, (size_t[]){4}, x, &b), MZ_EINVAL);
  cr_assert_eq(mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){4}, NULL, 1u << 7, &b), MZ_EINVAL);
  cr_assert_null(b);
  cr_assert_eq(mz_buffer_memory(NULL), 0u);
  /* Pinned with no device that pins (the CPU alone): plain memory that works. */
  MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){4}, (float[]){1, 2, 3, 4}, MZ_BUFFER_PINNED, &b));
  cr_assert_eq(mz_buffer_memory(b), 0u);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, x, sizeof x));
  cr_assert_eq(x[3], 4.0f);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* The same chain across the CPU and PoCL on a plain, a zero-copy, a
 * wrapped and a pinned buffer: the same results; plain and pinned buffers
 * move their bytes, zero-copy and wrapped ones move none. */
Test(memory, kinds_cpu_and_opencl, .timeout = 300) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0");
  mz_kernel *cpu, *cl;
  kernels(rt, &cpu, &cl);
  enum { N = 4096 };
  float *init = malloc(N * sizeof *init), *got = malloc(N * sizeof *got);
  for (int i = 0; i < N; i++) init[i] = (float)(i % 97) - 40.0f;

  mz_buffer *plain = NULL, *zc = NULL, *pinned = NULL, *wrapped = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, init, &plain));
  MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){N}, init, MZ_BUFFER_ZERO_COPY, &zc));
  MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){N}, init, MZ_BUFFER_PINNED, &pinned));
  void *user = NULL;
  cr_assert_eq(posix_memalign(&user, 4096, N * sizeof(float)), 0);
  memcpy(user, init, N * sizeof(float));
  MZ_OK_OR_DIE(rt, mz_buffer_wrap(rt, MZ_F32, 1, (size_t[]){N}, user, &wrapped));
  cr_assert_eq(mz_buffer_memory(pinned), MZ_BUFFER_PINNED, "PoCL gives pinned memory (CL_MEM_ALLOC_HOST_PTR)");
  cr_assert_eq(mz_buffer_memory(zc), MZ_BUFFER_ZERO_COPY);

  uint64_t t_plain = chain(rt, cpu, cl, plain);
  uint64_t t_pinned = chain(rt, cpu, cl, pinned);
  uint64_t t_zc = chain(rt, cpu, cl, zc);
  uint64_t t_wrapped = chain(rt, cpu, cl, wrapped);
  cr_assert_geq(t_plain, 3, "a plain buffer moves between CPU and OpenCL (%llu transfers)", (unsigned long long)t_plain);
  cr_assert_geq(t_pinned, 3, "a pinned buffer is still copied (%llu transfers)", (unsigned long long)t_pinned);
  cr_assert_eq(t_zc, 0, "a zero-copy buffer on a host-unified device: %llu transfers", (unsigned long long)t_zc);
  cr_assert_eq(t_wrapped, 0, "a wrapped buffer on a host-unified device: %llu transfers", (unsigned long long)t_wrapped);

  /* The wrapped array holds the result after mz_future_wait, with no read. */
  const float *u = user;
  for (int i = 0; i < N; i++) cr_assert_eq(u[i], expect(init[i]), "wrapped [%d]: %g, expected %g", i, u[i], expect(init[i]));
  mz_buffer *all[] = {plain, zc, pinned, wrapped};
  for (int k = 0; k < 4; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_read(all[k], got, N * sizeof *got));
    for (int i = 0; i < N; i++) cr_assert_eq(got[i], expect(init[i]), "buffer %d [%d]: %g", k, i, got[i]);
  }

  /* The last op on OpenCL: the wrapped array holds its result after the
   * wait (a map where the device used it in place). */
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f = NULL;
  cr_assert_eq(test_run(g, mz_unzip(g, mz_apply(g, cl, mz_value(g, wrapped), NULL), 0), NULL, &f), MZ_OK);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_assert_eq(st.transfers, 0);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int i = 0; i < N; i++) cr_assert_eq(u[i], 2.0f * expect(init[i]), "wrapped after OpenCL [%d]: %g", i, u[i]);

  /* The user writes the array and says so; the device sees the new data. */
  for (int i = 0; i < N; i++) ((float *)user)[i] = 1.0f;
  MZ_OK_OR_DIE(rt, mz_buffer_write(wrapped, user, N * sizeof(float)));
  cr_assert_eq(chain(rt, cpu, cl, wrapped), 0);
  for (int i = 0; i < N; i++) cr_assert_eq(u[i], expect(1.0f), "rewritten [%d]: %g", i, u[i]);

  for (int k = 0; k < 4; k++) mz_buffer_release(all[k]);
  mz_kernel_destroy(cpu);
  mz_kernel_destroy(cl);
  mz_runtime_destroy(rt);
  free(user);
  free(init);
  free(got);
}

/* A misaligned wrapped array cannot be used in place: the device copies,
 * and the results are the same. */
Test(memory, wrap_misaligned_copies, .timeout = 300) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0");
  mz_kernel *cpu, *cl;
  kernels(rt, &cpu, &cl);
  enum { N = 257 };
  char *raw = malloc(N * sizeof(float) + 64);
  float *user = (float *)(raw + 4 + (64 - (uintptr_t)raw % 64) % 64); /* 4 bytes past a 64-byte boundary */
  for (int i = 0; i < N; i++) user[i] = (float)i;
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_wrap(rt, MZ_F32, 1, (size_t[]){N}, user, &b));
  uint64_t t = chain(rt, cpu, cl, b);
  cr_assert_geq(t, 1, "misaligned memory is copied (%llu transfers)", (unsigned long long)t);
  for (int i = 0; i < N; i++) cr_assert_eq(user[i], expect((float)i), "[%d] %g", i, user[i]);
  mz_buffer_release(b);
  mz_kernel_destroy(cpu);
  mz_kernel_destroy(cl);
  mz_runtime_destroy(rt);
  free(raw);
}

/* Reading a partitioned buffer whose tile an OpenCL op wrote, before any
 * mz_unpartition: the read gives the latest data (or refuses), never the
 * stale host bytes. */
Test(memory, read_partitioned_before_unpartition, .timeout = 300) {
  mz_runtime *rt = runtime_or_skip("opencl:0");
  mz_kernel *cpu, *cl;
  kernels(rt, &cpu, &cl);
  enum { N = 64 };
  float init[N], got[N];
  for (int i = 0; i < N; i++) init[i] = (float)i;
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, init, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *p = mz_partition(g, mz_value(g, b), 2);
  mz_op *t0 = mz_unzip(g, mz_apply(g, cl, mz_unzip(g, p, 0), NULL), 0);
  cr_assert_eq(test_run(g, t0, NULL, NULL), MZ_OK);
  int rc = mz_buffer_read(b, got, sizeof got);
  if (rc == MZ_OK)
    for (int i = 0; i < N; i++) cr_assert_eq(got[i], i < N / 2 ? 2.0f * init[i] : init[i], "[%d] %g", i, got[i]);
  else
    cr_assert_eq(rc, MZ_ESTATE, "%s", mz_err_name(rc));
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(cpu);
  mz_kernel_destroy(cl);
  mz_runtime_destroy(rt);
}

/* Two OpenCL devices (POCL_DEVICES="pthread pthread") and the CPU read one
 * zero-copy buffer at once and write zero-copy results: no transfer, the
 * right values, whatever the policy puts where. */
Test(memory, zero_copy_shared_by_two_devices, .timeout = 300) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl");
  if (mz_runtime_device_count(rt) < 3) {
    mz_runtime_destroy(rt);
    cr_skip_test("fewer than two OpenCL devices (set POCL_DEVICES=\"pthread pthread\")");
  }
  static const char src[] = "__kernel void twice(__global const float *x, __global float *y, ulong n) {\n"
                            "  size_t i = get_global_id(0); if (i < n) y[i] = 2.0f * x[i]; }\n";
  mz_kernel_spec s = {.name = "twice",
                      .params = "in f32[] x, out f32[] y, u64 n = sizeof(x)",
                      .opencl = {.format = MZ_CODE_SOURCE, .data = src, .entry = "twice"}};
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &s, &k));
  enum { N = 1024, OUTS = 6 };
  float init[N], got[N];
  for (int i = 0; i < N; i++) init[i] = (float)i - 100.0f;
  for (unsigned p = 0; mz_policy_name(rt, p); p++) {
    mz_buffer *x = NULL, *y[OUTS];
    MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){N}, init, MZ_BUFFER_ZERO_COPY, &x));
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *outs[OUTS];
    for (int j = 0; j < OUTS; j++) {
      MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){N}, NULL, MZ_BUFFER_ZERO_COPY, &y[j]));
      outs[j] = mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, y[j])}), NULL), 1);
    }
    mz_future *f = NULL;
    cr_assert_eq(test_run(g, mz_join(g, OUTS, outs), mz_policy_name(rt, p), &f), MZ_OK, "%s", mz_policy_name(rt, p));
    mz_run_stats st;
    MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
    cr_assert_eq(st.transfers, 0, "policy %s: %llu transfers", mz_policy_name(rt, p), (unsigned long long)st.transfers);
    mz_future_destroy(f);
    mz_graph_destroy(g);
    for (int j = 0; j < OUTS; j++) {
      MZ_OK_OR_DIE(rt, mz_buffer_read(y[j], got, sizeof got));
      for (int i = 0; i < N; i++) cr_assert_eq(got[i], 2.0f * init[i], "policy %s, y%d[%d] %g", mz_policy_name(rt, p), j, i, got[i]);
      mz_buffer_release(y[j]);
    }
    mz_buffer_release(x);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}
