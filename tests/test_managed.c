/* Shared memory (MZ_BUFFER_MANAGED, include/maize/buffer.h): CUDA managed
 * memory on a CUDA device (a GPU, else the CUDA driver emulator, which
 * emulates managed memory), and OpenCL fine-grained SVM on PoCL's CPU
 * device.  A chain of kernels alternating between the CPU and the device
 * (and an OpenCL device using CUDA's managed memory in place) moves no
 * bytes: the run statistics count 0 transfers (and the emulator 0 copies),
 * where a plain buffer moves its bytes, with the same results.  Without
 * managed memory (the emulator's managed=0) the buffer falls back to
 * copies and says so (mz_buffer_memory lacks the flag).  Tests skip,
 * saying why, without the device they need. */
#include "common.h"
#include "mz_config.h"
#if MZ_HAVE_CUDA
#include "cuda_emu/client.h"
#endif

TestSuite(managed, .timeout = 300);

static int add1_fn(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] += 1.0f;
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

/* A kernel that doubles y, only on the device kind asked: OpenCL C, or the
 * examples' PTX "scale" (with a = 2). */
static mz_kernel *mul2_kernel(mz_runtime *rt, bool cuda) {
  mz_kernel *k = NULL;
  mz_kernel_spec s = {.name = "mul2", .params = "inout f32[] y, u64 n = sizeof(y)",
                      .opencl = {.format = MZ_CODE_SOURCE, .data = mul2_src, .entry = "mul2"}};
#ifdef MZ_KERNELS_PTX
  if (cuda)
    s = (mz_kernel_spec){.name = "scale", .params = "f32 a, inout f32[] y, u64 n = sizeof(y)",
                         .cuda = {.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX}};
#endif
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &s, &k));
  return k;
}

static mz_op *mul2(mz_graph *g, mz_kernel *k, mz_op *y) {
  if (!strcmp(mz_kernel_name(k), "scale")) return mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 2.0f), y}), NULL), 1);
  return mz_unzip(g, mz_apply(g, k, y, NULL), 0);
}

/* y = ((y * 2) + 1) * 2 + 1, the doublings on the devices of dev (one or
 * two kernels, taking turns), the additions on the CPU.  Returns the run's
 * transfers; checks the result. */
static uint64_t chain(mz_runtime *rt, mz_kernel *const dev[2], mz_buffer *b, size_t n) {
  mz_kernel *cpu = test_kernel(rt, "add1", "inout f32[] y, u64 n = sizeof(y)", add1_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *y = mz_value(g, b);
  for (int i = 0; i < 2; i++) {
    y = mul2(g, dev[dev[1] ? i : 0], y);
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
  float *got = malloc(n * sizeof *got);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, got, n * sizeof *got));
  for (size_t i = 0; i < n; i++) {
    float x = (float)(i % 100);
    cr_assert_eq(got[i], ((x * 2.0f) + 1.0f) * 2.0f + 1.0f, "[%zu]: %g", i, got[i]);
  }
  free(got);
  mz_kernel_destroy(cpu);
  return stats.transfers;
}

static mz_buffer *input(mz_runtime *rt, size_t n, unsigned flags) {
  float *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = (float)(i % 100);
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){n}, v, flags, &b));
  free(v);
  return b;
}

/* The chain on a plain and on a managed buffer: (plain, managed) transfers. */
static void both(mz_runtime *rt, mz_kernel *const dev[2], uint64_t out[2], unsigned *managed_flags) {
  const size_t n = 100003;
  mz_buffer *p = input(rt, n, 0), *m = input(rt, n, MZ_BUFFER_MANAGED);
  *managed_flags = mz_buffer_memory(m);
  out[0] = chain(rt, dev, p, n);
  out[1] = chain(rt, dev, m, n);
  mz_buffer_release(p);
  mz_buffer_release(m);
}

/* OpenCL SVM: fine-grained SVM from PoCL, used in place. */
Test(managed, opencl_svm) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0");
  mz_kernel *k[2] = {mul2_kernel(rt, false), NULL};
  uint64_t t[2];
  unsigned flags;
  both(rt, k, t, &flags);
  cr_assert_eq(flags, MZ_BUFFER_MANAGED | MZ_BUFFER_ZERO_COPY, "PoCL's CPU device has fine-grained SVM: flags 0x%x", flags);
  cr_assert_geq(t[0], 3, "a plain buffer is copied: %llu transfers", (unsigned long long)t[0]);
  cr_assert_eq(t[1], 0, "SVM is shared: %llu transfers", (unsigned long long)t[1]);
  mz_kernel_destroy(k[0]);
  mz_runtime_destroy(rt);
}

#if MZ_HAVE_CUDA && defined(MZ_KERNELS_PTX)
static void cuda_case(const char *devices, bool with_opencl, bool managed) {
  need_cuda();
  if (!managed) {
    if (!emu.h) cr_skip_test("turning managed memory off needs the emulator");
    setenv("MZ_CUDA_EMU", "managed=0", 1);
  }
  mz_runtime *rt = runtime_or_skip(devices);
  mz_kernel *k[2] = {mul2_kernel(rt, true), with_opencl ? mul2_kernel(rt, false) : NULL};
  mzemu_stats s0 = {0}, s1 = {0};
  uint64_t t[2];
  unsigned flags;
  const size_t n = 100003;
  mz_buffer *p = input(rt, n, 0), *m = input(rt, n, MZ_BUFFER_MANAGED);
  flags = mz_buffer_memory(m);
  t[0] = chain(rt, k, p, n);
  if (emu.h) emu.get_stats(&s0);
  t[1] = chain(rt, k, m, n);
  if (emu.h) emu.get_stats(&s1);
  mz_buffer_release(p);
  mz_buffer_release(m);
  cr_assert_geq(t[0], 3, "a plain buffer is copied: %llu transfers", (unsigned long long)t[0]);
  if (managed) {
    cr_assert_eq(flags, MZ_BUFFER_MANAGED | MZ_BUFFER_ZERO_COPY, "flags 0x%x", flags);
    cr_assert_eq(t[1], 0, "managed memory is shared: %llu transfers", (unsigned long long)t[1]);
    if (emu.h)
      cr_assert_eq(s1.copies_htod + s1.copies_dtoh, s0.copies_htod + s0.copies_dtoh, "the driver copied: %llu htod %llu dtoh",
                   s1.copies_htod - s0.copies_htod, s1.copies_dtoh - s0.copies_dtoh);
  } else {
    cr_assert_eq(flags, MZ_BUFFER_ZERO_COPY, "no managed memory: plain zero copy, flags 0x%x", flags);
    cr_assert_geq(t[1], 3, "without managed memory, copies: %llu transfers", (unsigned long long)t[1]);
  }
  for (int i = 0; i < 2; i++) mz_kernel_destroy(k[i]);
  mz_runtime_destroy(rt);
  emu_check_clean();
}

/* CUDA managed memory between the CPU and a CUDA device. */
Test(managed, cuda) { cuda_case("cpu,cuda:0", false, true); }
/* The same managed buffer also used in place by PoCL: CUDA, CPU, OpenCL, CPU. */
Test(managed, cuda_and_opencl) { cuda_case("cpu,opencl:0,cuda:0", true, true); }
/* No managed memory on the device: copies, same results. */
Test(managed, cuda_without_managed_memory) { cuda_case("cpu,cuda:0", false, false); }
#endif

#if MZ_HAVE_CUDA && defined(MZ_KERNELS_PTX)
/* The observer's view of the copies: all of them, and the reads back. */
struct seen {
  atomic_uint copies, reads_back;
  atomic_ullong bytes;
};

static void on_transfer(const mz_transfer_record *rec, void *user) {
  struct seen *s = user;
  atomic_fetch_add(&s->copies, 1);
  if (rec->dst_device < 0) atomic_fetch_add(&s->reads_back, 1);
  atomic_fetch_add(&s->bytes, rec->bytes);
}

/* A zero-copy buffer written on a CUDA device (a copy of its own there) and
 * then read on PoCL, which uses the host copy in place: the bytes come back
 * from the CUDA device into host memory while PoCL's node is planned.  That
 * read back is a transfer like any other: reported to the observer and
 * counted in the run's statistics, which agree. */
Test(managed, zero_copy_read_back_is_observed) {
  need_cuda();
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0,cuda:0");
  mz_kernel *k[2] = {mul2_kernel(rt, true), mul2_kernel(rt, false)};
  struct seen seen = {0};
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &(mz_observer){.transfer = on_transfer, .user = &seen}));
  const size_t n = 100003;
  mz_buffer *b = input(rt, n, MZ_BUFFER_ZERO_COPY);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *y = mul2(g, k[1], mul2(g, k[0], mz_value(g, b))); /* CUDA, then PoCL */
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, y, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, NULL));
  float *got = malloc(n * sizeof *got);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, got, n * sizeof *got));
  for (size_t i = 0; i < n; i++) cr_assert_eq(got[i], 4.0f * (float)(i % 100));
  free(got);
  cr_assert_geq(seen.reads_back, 1, "the read back from the CUDA device is reported");
  cr_assert_eq(st.transfers, seen.copies, "statistics %llu, observer %u", (unsigned long long)st.transfers, seen.copies);
  cr_assert_eq(st.bytes_moved, seen.bytes, "bytes: statistics %llu, observer %llu", (unsigned long long)st.bytes_moved,
               (unsigned long long)seen.bytes);
  mz_buffer_release(b);
  for (int i = 0; i < 2; i++) mz_kernel_destroy(k[i]);
  mz_runtime_destroy(rt);
  emu_check_clean();
}
#endif
