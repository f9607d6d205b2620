/* test_faults: fault injection, dead devices and device memory limits.
 *
 * Checks that MZ_FAULTS is parsed (bad syntax fails runtime creation with
 * MZ_EINVAL); that each injected fault kind (alloc, enqueue, transfer,
 * kernel) fails its node with its documented code on the CPU, on simulated
 * devices and on OpenCL (skipped, saying why, without an OpenCL device),
 * cancels that node's dependents and lets the independent branch finish
 * with the right data; that a device marked dead mid-run hands its
 * remaining work to another device when the inputs have a valid copy
 * elsewhere, and fails the node with MZ_EDEVICE (dependents canceled)
 * when the only valid copy was on the dead device; that a heft re-run
 * which kept its plan plans again once a device died or came back; that
 * a memory limit
 * swept from plenty down to one buffer ends every run with correct results
 * or MZ_ENOMEM, never above the limit, with evictions per buffer bounded
 * by its uses; and, in 1,000 random runs (random graphs, policies, fault
 * kinds and indices, devices killed), that nothing hangs, every future
 * resolves, and every result no fault touched is correct. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <maize.h>
#include <maize/daggen.h>
#include <maize/policy.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault.h"
#ifdef MZ_CUDA_EMU_LIB
#include "cuda_kernels.h"
#endif

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own).
 * Four times as long under a sanitizer: the CUDA memory-limit sweep takes
 * about 50 s in a plain build and 260 s under ThreadSanitizer on an idle
 * 2-core machine (meson scales the whole suite's deadline by its
 * --timeout-multiplier; it cannot scale these). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SAN_SLOW(s) ((s) * 4)
#else
#define SAN_SLOW(s) (s)
#endif
TestSuite(faults, .timeout = SAN_SLOW(120));

#define OK(rt, call)                                                                                 \
  do {                                                                                               \
    int rc_ = (call);                                                                                \
    cr_assert_eq(rc_, MZ_OK, "%s: %s (%s)", #call, mz_err_name(rc_), mz_runtime_last_error(rt));     \
  } while (0)

#define WAIT_NS 20000000000ull /* a future not resolved after 20 s is a hang */

/* ---- kernels: CPU code and the same in OpenCL C ---- */

static const char cl_src[] =
    "__kernel void mixk(uint id, __global const uint *a, __global const uint *b, __global uint *o, ulong n) {\n"
    "  size_t i = get_global_id(0); if (i < n) o[i] = a[i] * 31u + b[i] * 17u + id + (uint)i; }\n"
    "__kernel void inc(__global uint *v, ulong n) { size_t i = get_global_id(0); if (i < n) v[i] += 1u; }\n"
    "__kernel void wr(__global uint *v, ulong n) { size_t i = get_global_id(0); if (i < n) v[i] = (uint)i + 7u; }\n";

static uint32_t mix1(uint32_t id, uint32_t a, uint32_t b, uint32_t i) { return a * 31u + b * 17u + id + i; }

static int mix_cpu(const mz_call *c) {
  uint32_t id = c->args[0].u32;
  const uint32_t *a = c->args[1].p, *b = c->args[2].p;
  uint32_t *o = c->args[3].p;
  uint64_t n = c->args[4].u64;
  for (uint64_t i = 0; i < n; i++) o[i] = mix1(id, a[i], b[i], (uint32_t)i);
  if (c->user) atomic_store((_Atomic unsigned char *)c->user + id, 1); /* ran on the CPU */
  return 0;
}

static int inc_cpu(const mz_call *c) {
  uint32_t *v = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) v[i] += 1;
  return 0;
}

static int wr_cpu(const mz_call *c) {
  uint32_t *v = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) v[i] = (uint32_t)i + 7;
  return 0;
}

static mz_kernel *kernel(mz_runtime *rt, const char *name, const char *entry, void *user) {
  mz_kernel_spec spec = {.name = name, .opencl = {.format = MZ_CODE_SOURCE, .data = cl_src, .entry = entry}};
#ifdef MZ_CUDA_EMU_LIB
  spec.cuda = (mz_code_spec){.format = MZ_CODE_PTX, .data = mz_test_ptx, .entry = entry};
#endif
  if (!strcmp(entry, "mixk")) { /* not "mix": an OpenCL C built-in */
    spec.params = "u32 id, in u32[] a, in u32[] b, out u32[] o, u64 n = sizeof(o)";
    spec.cpu.fn = mix_cpu;
    spec.cpu.user = user;
  } else if (!strcmp(entry, "inc")) {
    spec.params = "inout u32[] v, u64 n = sizeof(v)";
    spec.cpu.fn = inc_cpu;
  } else {
    spec.params = "out u32[] v, u64 n = sizeof(v)";
    spec.cpu.fn = wr_cpu;
  }
  mz_kernel *k = NULL;
  OK(rt, mz_kernel_create(rt, &spec, &k));
  return k;
}

/* ---- "pin": nodes named cpu_* on the first CPU queue that can run them,
 * every other node on the first queue of a device that is not the CPU,
 * dead or not (the core must move it). ---- */

static int pin_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state, (void)ready;
  bool cpu = !strncmp(mz_task_name(t), "cpu", 3);
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++) {
    bool is_cpu = mz_sched_device_kind(s, mz_sched_queue_device(s, q)) == MZ_DEVICE_CPU;
    if (cpu && is_cpu && mz_task_can_run(s, t, q)) return (int)q;
    if (!cpu && !is_cpu) return (int)q;
  }
  return 0;
}

static const struct mz_policy_ops pin_policy = {
    .abi = MZ_POLICY_ABI, .name = "pin", .description = "test placement by name", .select = pin_select};

/* "pin-picked": pin's placement, each queue newest first (policy ABI 2's
 * pick), so that nodes wait in the queue's pending list while its device
 * dies. */
static unsigned pick_newest(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  (void)state, (void)s, (void)q;
  unsigned k = 0;
  for (unsigned i = 1; i < n; i++)
    if (mz_task_id(pending[i]) > mz_task_id(pending[k])) k = i;
  return k;
}

static const struct mz_policy_ops pin_picked_policy = {.abi = MZ_POLICY_ABI,
                                                       .name = "pin-picked",
                                                       .description = "pin, each queue newest first",
                                                       .select = pin_select,
                                                       .pick = pick_newest};

/* A runtime on devices, or NULL when they do not exist here (no OpenCL,
 * no CUDA driver: CUDA runs on the emulator, with two devices, when there
 * is no GPU). */
static mz_runtime *open_rt(const char *devices) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  if (strstr(devices, "cuda")) {
#ifdef MZ_CUDA_EMU_LIB
    char why[512];
    if (!cuda_driver_here(why, sizeof why)) return NULL;
    setenv("MZ_CUDA_EMU", "devices=2", 0);
    mz_test_emu_kernels();
#else
    return NULL;
#endif
  }
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  if (rc == MZ_ENODEV) return NULL;
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  OK(rt, mz_policy_register(rt, &pin_policy));
  OK(rt, mz_policy_register(rt, &pin_picked_policy));
  return rt;
}

#define NEED(rt, devices)                                                                             \
  do {                                                                                                \
    if (!(rt))                                                                                        \
      cr_skip_test("no device for '%s' here (OpenCL needs pocl-opencl-icd and "                        \
                   "POCL_DEVICES=\"pthread pthread\"; CUDA needs cuda.h at build time)",                   \
                   devices);                                                                          \
  } while (0)

static mz_buffer *buffer(mz_runtime *rt, size_t n, uint32_t base) {
  uint32_t *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = base + (uint32_t)i;
  mz_buffer *b = NULL;
  OK(rt, mz_buffer_create(rt, MZ_U32, 1, (size_t[]){n}, v, &b));
  free(v);
  return b;
}

static int device_of_kind(mz_runtime *rt, mz_device_kind kind, unsigned n) {
  for (unsigned i = 0; i < mz_runtime_device_count(rt); i++) {
    mz_device_info info;
    cr_assert_eq(mz_device_get_info(mz_runtime_device(rt, i), &info), MZ_OK);
    if (info.kind == kind && n-- == 0) return (int)i;
  }
  return -1;
}

/* ---- MZ_FAULTS ---- */

Test(faults, env_syntax) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  const char *bad[] = {"alloc", "alloc:0", "alloc:x", "oops:3", "dead:cl9@1", "dead:cpu0", "dead:cpu0@0",
                       "kernel:5,,enqueue:-1", "dead:gpu0@3"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("MZ_FAULTS", bad[i], 1);
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true}, &rt);
    cr_expect_eq(rc, MZ_EINVAL, "MZ_FAULTS=%s gave %s", bad[i], mz_err_name(rc));
    cr_expect_null(rt);
  }
  setenv("MZ_FAULTS", "alloc:17,enqueue:300,transfer:4,kernel:5,dead:cpu0@40", 1);
  mz_runtime *rt = NULL;
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true}, &rt));
  unsetenv("MZ_FAULTS");
  cr_expect_eq(mz__faults_set(rt, "kernel:2,bogus"), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "MZ_FAULTS"), "%s", mz_runtime_last_error(rt));
  cr_expect_eq(mz__faults_set(rt, "dead:0@3"), MZ_OK);
  cr_expect_eq(mz__faults_set(rt, NULL), MZ_OK);
  cr_expect_eq(mz__memlimit_set(rt, MZ_DEVICE_CPU, 1024), MZ_EINVAL, "the host is never capped");
  mz_runtime_destroy(rt);
  setenv("MZ_LIMIT_SIM_MEM", "12Q", 1);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "sim:dev", .quiet = true}, &rt), MZ_EINVAL);
  unsetenv("MZ_LIMIT_SIM_MEM");
}

/* ---- one fault of each kind on each device kind ---- */

enum { N = 256 };

/* Two independent chains (buffers A and B) of three nodes; the first
 * event of kind fails, which is the first node of one chain.  first is
 * the first node's kernel, rest the next two's. */
static void kind_case(mz_runtime *rt, enum mz__fault_kind kind, int want, mz_kernel *first, mz_kernel *rest,
                      uint32_t expect_add, bool data, bool one_chain) {
  mz_buffer *buf[2] = {buffer(rt, N, 0), buffer(rt, N, 1000)};
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *ends[2];
  for (int c = 0; c < 2; c++) {
    mz_op *v = mz_unzip(g, mz_apply(g, first, mz_value(g, buf[c]), NULL), 0);
    for (int i = 0; i < 2; i++) v = mz_unzip(g, mz_apply(g, rest, v, NULL), 0);
    ends[c] = v;
  }
  OK(rt, mz_graph_status(g));
  OK(rt, mz__fault_arm(rt, kind, 1));
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, 2, ends), "pin", &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  const char *kname = kind == MZ__FAULT_ALLOC      ? "alloc"
                      : kind == MZ__FAULT_ENQUEUE  ? "enqueue"
                      : kind == MZ__FAULT_TRANSFER ? "transfer"
                                                   : "kernel";
  cr_assert_neq(st, MZ_ETIMEDOUT, "%s fault: the run hung", kname);
  cr_expect_eq(st, want, "%s fault: the run ended with %s (%s)", kname, mz_err_name(st), mz_future_message(f));
  cr_expect(strstr(mz_future_message(f), "injected"), "the message says it was injected: %s", mz_future_message(f));
  cr_expect_eq(mz__fault_fired(rt, kind), 1);
  mz_run_stats s;
  OK(rt, mz_future_stats(f, &s));
  /* The failed node and its dependents: two or three nodes (a CPU
   * transfer fault hits the second node, which reads the first's output). */
  cr_expect_geq(s.failed, 2, "failed nodes: %" PRIu64, s.failed);
  unsigned failed = 0;
  for (int c = 0; c < 2; c++) {
    uint32_t out[N];
    int rc = mz_buffer_read(buf[c], out, sizeof out);
    if (rc) {
      failed++;
      cr_expect(rc == MZ_ECANCELED || rc == want, "chain %d: %s", c, mz_err_name(rc));
      continue;
    }
    for (int i = 0; data && i < N; i++)
      cr_expect_eq(out[i], (uint32_t)i + (c ? 1000u : 0u) + expect_add, "chain %d [%d] = %u", c, i, out[i]);
  }
  cr_expect(one_chain ? failed == 1 : failed >= 1, "%u chains failed", failed);
  OK(rt, mz__fault_arm(rt, kind, 0));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(buf[0]);
  mz_buffer_release(buf[1]);
}

static const int want_code[MZ__FAULT_KINDS] = {MZ_ENOMEM, MZ_EDEVICE, MZ_EDEVICE, MZ_EKERNEL};

Test(faults, each_kind_cpu, .timeout = SAN_SLOW(60)) {
  mz_runtime *rt = open_rt("cpu:2;sim:dev");
  mz_kernel *inc = kernel(rt, "cpu_inc", "inc", NULL), *wr = kernel(rt, "dev_wr", "wr", NULL);
  kind_case(rt, MZ__FAULT_ALLOC, MZ_ENOMEM, inc, inc, 3, true, true);
  kind_case(rt, MZ__FAULT_ENQUEUE, MZ_EDEVICE, inc, inc, 3, true, true);
  kind_case(rt, MZ__FAULT_KERNEL, MZ_EKERNEL, inc, inc, 3, true, true);
  /* A CPU transfer is a read back: the first node writes on the simulated
   * device (which keeps no data: the host copy stays), the CPU reads it. */
  OK(rt, mz__faults_set(rt, NULL));
  kind_case(rt, MZ__FAULT_TRANSFER, MZ_EDEVICE, wr, inc, 2, true, true);
  mz_runtime_destroy(rt);
}

Test(faults, each_kind_sim, .timeout = SAN_SLOW(60)) {
  mz_runtime *rt = open_rt("sim:dev*2");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++) kind_case(rt, k, want_code[k], inc, inc, 3, false, true);
  mz_runtime_destroy(rt);
}

/* The same with copy engines: a node's input copies leave its queue. */
Test(faults, each_kind_sim_copy_engine, .timeout = SAN_SLOW(60)) {
  mz_runtime *rt = open_rt("sim:dev*2@copy=1");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++) kind_case(rt, k, want_code[k], inc, inc, 3, false, true);
  mz_runtime_destroy(rt);
}

Test(faults, each_kind_opencl, .timeout = SAN_SLOW(120)) {
  mz_runtime *rt = open_rt("opencl:0");
  NEED(rt, "opencl:0");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  /* One batch may hold the first nodes of both chains: an enqueue fault
   * refuses the whole batch. */
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++)
    kind_case(rt, k, want_code[k], inc, inc, 3, true, k != MZ__FAULT_ENQUEUE);
  mz_runtime_destroy(rt);
}

/* One kind per test on CUDA, each on a fresh runtime: on a GPU, where
 * the driver's own threads run the callbacks, a kind that goes wrong is
 * named, and does not hide the others. */
static void each_kind_cuda(enum mz__fault_kind k) {
  mz_runtime *rt = open_rt("cuda:0");
  NEED(rt, "cuda:0");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  kind_case(rt, k, want_code[k], inc, inc, 3, true, k != MZ__FAULT_ENQUEUE);
  mz_runtime_destroy(rt);
#ifdef MZ_CUDA_EMU_LIB
  emu_check_clean();
#endif
}

Test(faults, each_kind_cuda_alloc, .timeout = SAN_SLOW(60)) { each_kind_cuda(MZ__FAULT_ALLOC); }
Test(faults, each_kind_cuda_enqueue, .timeout = SAN_SLOW(60)) { each_kind_cuda(MZ__FAULT_ENQUEUE); }
Test(faults, each_kind_cuda_transfer, .timeout = SAN_SLOW(60)) { each_kind_cuda(MZ__FAULT_TRANSFER); }
Test(faults, each_kind_cuda_kernel, .timeout = SAN_SLOW(60)) { each_kind_cuda(MZ__FAULT_KERNEL); }

/* All four kinds in turn on one runtime: each run starts where the last
 * one's faults left the device, its queues and its buffers' copies. */
Test(faults, each_kind_cuda_one_runtime, .timeout = SAN_SLOW(120)) {
  mz_runtime *rt = open_rt("cuda:0");
  NEED(rt, "cuda:0");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  for (unsigned k = 0; k < MZ__FAULT_KINDS; k++)
    kind_case(rt, k, want_code[k], inc, inc, 3, true, k != MZ__FAULT_ENQUEUE);
  mz_runtime_destroy(rt);
#ifdef MZ_CUDA_EMU_LIB
  emu_check_clean();
#endif
}

/* ---- dead devices ---- */

/* m independent mix nodes on a's and b's contents, node i writing o[i]
 * (made here) as outs[i]. */
static void mix_nodes(mz_runtime *rt, mz_graph *g, mz_kernel *mix, mz_buffer *a, mz_buffer *b, int m, mz_buffer **o,
                      mz_op **outs) {
  for (int i = 0; i < m; i++) {
    o[i] = buffer(rt, N, 0);
    mz_op *args[] = {mz_u32(g, (uint32_t)i), mz_value(g, a), mz_value(g, b), mz_value(g, o[i])};
    outs[i] = mz_unzip(g, mz_apply(g, mix, mz_zip(g, 4, args), NULL), 3);
  }
}

/* Independent nodes reading host inputs, all pinned to the first non-CPU
 * device, which dies after its 3rd op: the rest move and all succeed. */
static void dead_moves_with(const char *devices, const char *victim_name, bool data, const char *policy) {
  mz_runtime *rt = open_rt(devices);
  NEED(rt, devices);
  enum { M = 10 };
  mz_kernel *mix = kernel(rt, !strcmp(victim_name, "cpu0") ? "cpu_mix" : "dev_mix", "mixk", NULL);
  mz_buffer *a = buffer(rt, N, 1), *b = buffer(rt, N, 2), *o[M];
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *outs[M];
  mix_nodes(rt, g, mix, a, b, M, o, outs);
  char spec[64];
  snprintf(spec, sizeof spec, "dead:%s@3", victim_name);
  OK(rt, mz__faults_set(rt, spec));
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, M, outs), policy, &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_expect_eq(st, MZ_OK, "%s, %s dead, %s: %s (%s)", devices, victim_name, policy, mz_err_name(st),
               mz_future_message(f));
  cr_expect_eq(mz__fault_fired(rt, MZ__FAULT_KINDS), 1, "the device was killed");
  unsigned dead = 0;
  for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) dead += mz_device_is_dead(mz_runtime_device(rt, d));
  cr_expect_eq(dead, 1);
  /* Up to 3 nodes ran on the victim before it died: their outputs were
   * there only, and are lost with it (MZ_EDEVICE); host memory never is. */
  unsigned lost = 0;
  for (int i = 0; i < M; i++) {
    uint32_t out[N];
    int rc = mz_buffer_read(o[i], out, sizeof out);
    if (rc == MZ_EDEVICE && strcmp(victim_name, "cpu0")) {
      lost++;
      continue;
    }
    cr_expect_eq(rc, MZ_OK, "node %d: %s", i, mz_err_name(rc));
    for (int j = 0; data && !rc && j < N; j++)
      cr_expect_eq(out[j], mix1((uint32_t)i, 1u + (uint32_t)j, 2u + (uint32_t)j, (uint32_t)j), "node %d [%d]", i, j);
  }
  cr_expect_leq(lost, 3, "%u outputs lost", lost);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int i = 0; i < M; i++) mz_buffer_release(o[i]);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* A chain updating one buffer in place on the first non-CPU device, which
 * dies after its 3rd op: the 4th node finds the only valid copy on the
 * dead device, fails with MZ_EDEVICE, and the rest are canceled. */
static void dead_no_copy(const char *devices) {
  mz_runtime *rt = open_rt(devices);
  NEED(rt, devices);
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  mz_buffer *a = buffer(rt, N, 0), *z = buffer(rt, N, 0);
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *v = mz_value(g, a);
  for (int i = 0; i < 6; i++) v = mz_unzip(g, mz_apply(g, inc, v, NULL), 0);
  int victim = device_of_kind(rt, MZ_DEVICE_SIM, 0);
  cr_assert_geq(victim, 0);
  OK(rt, mz__fault_kill(rt, (unsigned)victim, 3));
  mz_future *f;
  OK(rt, mz_schedule(g, v, "pin", &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_expect_eq(st, MZ_EDEVICE, "%s: %s (%s)", devices, mz_err_name(st), mz_future_message(f));
  cr_expect(strstr(mz_future_message(f), "no valid copy"), "%s", mz_future_message(f));
  mz_run_stats s;
  OK(rt, mz_future_stats(f, &s));
  cr_expect_eq(s.failed, 3, "the 4th node and its two dependents: %" PRIu64, s.failed);
  uint32_t out[N];
  cr_expect_lt(mz_buffer_read(a, out, sizeof out), 0);
  /* A fresh buffer still works on the surviving device. */
  mz_graph *g2;
  OK(rt, mz_graph_create(rt, &g2));
  mz_future *f2;
  OK(rt, mz_schedule(g2, mz_apply(g2, inc, mz_value(g2, z), NULL), "pin", &f2));
  cr_expect_eq(mz_future_wait_for(f2, WAIT_NS), MZ_OK, "%s", mz_future_message(f2));
  mz_future_destroy(f2);
  mz_graph_destroy(g2);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(z);
  mz_runtime_destroy(rt);
}

static void dead_moves(const char *devices, const char *victim_name, bool data) {
  dead_moves_with(devices, victim_name, data, "pin");
}

Test(faults, dead_sim_moves_work, .timeout = SAN_SLOW(60)) { dead_moves("sim:dev*2", "sim0", false); }
/* A re-run that kept its plan plans again once a device has died (the run
 * it died in moves its nodes; the next finds the epoch moved) and places
 * nothing on the dead device; a revived device moves the epoch again, and
 * the plan after is kept once more.  Under heft (whose plan reads the perf
 * models), round-robin and single (whose plans read the devices alone). */
static bool planned_run(mz_runtime *rt, mz_graph *g, mz_op *root, const char *policy, unsigned victim, bool victim_idle) {
  mz_future *f;
  OK(rt, mz_graph_run(g, root, policy, &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_assert_eq(st, MZ_OK, "%s: %s: %s", policy, mz_err_name(st), mz_future_message(f));
  mz_run_stats stats;
  OK(rt, mz_future_stats(f, &stats));
  if (victim_idle) cr_expect_eq(stats.busy_ns[victim], 0, "%s: the dead device ran nodes", policy);
  bool kept = stats.plan_kept;
  mz_future_destroy(f);
  return kept;
}

/* victim: the first device whose name holds victim_name. */
static void kept_plan_dies(const char *policy, const char *victim_name) {
  const char *devices = "sim:cpu*2@speed=1;sim:gpu*2@speed=10,mem=1G,link=8G/s";
  mz_runtime *rt = open_rt(devices);
  NEED(rt, devices);
  enum { M = 12 };
  mz_kernel *mix = kernel(rt, "cpu_mix", "mixk", NULL);
  mz_buffer *a = buffer(rt, N, 1), *b = buffer(rt, N, 2), *o[M];
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *outs[M];
  mix_nodes(rt, g, mix, a, b, M, o, outs);
  mz_op *root = mz_join(g, M, outs);
  unsigned victim = mz_runtime_device_count(rt);
  for (unsigned d = 0; d < mz_runtime_device_count(rt) && victim == mz_runtime_device_count(rt); d++) {
    mz_device_info info;
    OK(rt, mz_device_get_info(mz_runtime_device(rt, d), &info));
    if (strstr(info.name, victim_name)) victim = d;
  }
  cr_assert_lt(victim, mz_runtime_device_count(rt), "no simulated %s in '%s'", victim_name, devices);
  bool kept = false;
  for (int r = 0; r < 6 && !kept; r++) kept = planned_run(rt, g, root, policy, victim, false);
  cr_assert(kept, "%s kept no plan in six re-runs on simulated devices", policy);
  /* The plan uses the victim: a run after it moved nothing elsewhere. */
  mz_future *f;
  OK(rt, mz_graph_run(g, root, policy, &f));
  cr_assert_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK, "%s", mz_future_message(f));
  mz_run_stats stats;
  OK(rt, mz_future_stats(f, &stats));
  cr_assert(stats.plan_kept && stats.busy_ns[victim] > 0, "%s: the kept plan leaves device %u idle", policy, victim);
  mz_future_destroy(f);
  char spec[32];
  snprintf(spec, sizeof spec, "dead:%u@1", victim);
  OK(rt, mz__faults_set(rt, spec));
  planned_run(rt, g, root, policy, victim, false); /* it dies here */
  cr_assert(mz_device_is_dead(mz_runtime_device(rt, victim)), "the fault did not fire");
  cr_expect(!planned_run(rt, g, root, policy, victim, true), "%s: a plan made with the dead device was kept", policy);
  cr_expect(planned_run(rt, g, root, policy, victim, true), "%s: the plan made without it was not kept", policy);
  OK(rt, mz__faults_set(rt, NULL));
  mz__fault_revive(rt, victim);
  cr_expect(!planned_run(rt, g, root, policy, victim, false), "%s: a plan made without the revived device was kept",
            policy);
  cr_expect(planned_run(rt, g, root, policy, victim, false), "%s: the plan made with it again was not kept", policy);
  mz_graph_destroy(g);
  for (int i = 0; i < M; i++) mz_buffer_release(o[i]);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(mix);
  mz_runtime_destroy(rt);
}

Test(faults, a_kept_plan_is_made_again_when_a_device_dies, .timeout = SAN_SLOW(60)) {
  kept_plan_dies("heft", "sim-gpu");
  kept_plan_dies("round-robin", "sim-gpu");
  kept_plan_dies("single", "sim-cpu");
}

/* Under a pick policy the victim's nodes wait in its queue's pending list
 * when it dies: they move too. */
Test(faults, dead_sim_moves_pending_work, .timeout = SAN_SLOW(60)) {
  dead_moves_with("sim:dev*2", "sim0", false, "pin-picked");
  dead_moves_with("sim:dev*2@copy=1", "sim0", false, "pin-picked");
  dead_moves_with("cpu:2;sim:dev", "cpu0", false, "pin-picked");
}
Test(faults, dead_opencl_moves_pending_work, .timeout = SAN_SLOW(120)) { dead_moves_with("opencl", "cl0", true, "pin-picked"); }
Test(faults, dead_sim_without_copy_fails_cleanly, .timeout = SAN_SLOW(60)) { dead_no_copy("sim:dev*2"); }
Test(faults, dead_sim_copy_engine_moves_work, .timeout = SAN_SLOW(60)) { dead_moves("sim:dev*2@copy=1", "sim0", false); }
Test(faults, dead_cpu_moves_work, .timeout = SAN_SLOW(60)) { dead_moves("cpu:2;sim:dev", "cpu0", false); }
Test(faults, dead_opencl_moves_work, .timeout = SAN_SLOW(120)) { dead_moves("opencl", "cl0", true); }
Test(faults, dead_cuda_moves_work, .timeout = SAN_SLOW(120)) { dead_moves("cpu,cuda", "cuda0", true); }
Test(faults, dead_opencl_without_copy_fails_cleanly, .timeout = SAN_SLOW(120)) {
  mz_runtime *rt = open_rt("opencl");
  NEED(rt, "opencl");
  mz_runtime_destroy(rt);
  /* The victim is the first OpenCL device: kill it by its kind index. */
  rt = open_rt("opencl");
  mz_kernel *inc = kernel(rt, "dev_inc", "inc", NULL);
  mz_buffer *a = buffer(rt, N, 0);
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *v = mz_value(g, a);
  for (int i = 0; i < 6; i++) v = mz_unzip(g, mz_apply(g, inc, v, NULL), 0);
  OK(rt, mz__faults_set(rt, "dead:cl0@3"));
  mz_future *f;
  OK(rt, mz_schedule(g, v, "pin", &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_expect_eq(st, MZ_EDEVICE, "%s (%s)", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_runtime_destroy(rt);
}

/* ---- memory limits ---- */

/* A reduction tree over 8 inputs of n u32 each (15 buffers), scheduled
 * with policy; returns the run's status and checks the data when it is OK
 * and data is set. */
static int tree_run(mz_runtime *rt, mz_kernel *mix, size_t n, const char *policy, bool data, mz_buffer **bufs,
                    size_t *nbufs) {
  enum { LEAVES = 8 };
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *level[LEAVES];
  uint32_t *ref[2 * LEAVES];
  size_t nb = 0;
  for (int i = 0; i < LEAVES; i++) {
    bufs[nb] = buffer(rt, n, (uint32_t)i * 100);
    ref[nb] = malloc(n * sizeof *ref[nb]);
    for (size_t j = 0; j < n; j++) ref[nb][j] = (uint32_t)i * 100 + (uint32_t)j;
    level[i] = mz_value(g, bufs[nb]);
    nb++;
  }
  uint32_t id = 0;
  size_t idx[LEAVES];
  for (int i = 0; i < LEAVES; i++) idx[i] = (size_t)i;
  for (int w = LEAVES; w > 1; w /= 2) {
    for (int i = 0; i < w / 2; i++) {
      bufs[nb] = buffer(rt, n, 0);
      ref[nb] = malloc(n * sizeof *ref[nb]);
      for (size_t j = 0; j < n; j++) ref[nb][j] = mix1(id, ref[idx[2 * i]][j], ref[idx[2 * i + 1]][j], (uint32_t)j);
      mz_op *args[] = {mz_u32(g, id), level[2 * i], level[2 * i + 1], mz_value(g, bufs[nb])};
      level[i] = mz_unzip(g, mz_apply(g, mix, mz_zip(g, 4, args), NULL), 3);
      idx[i] = nb;
      nb++;
      id++;
    }
  }
  mz_future *f;
  OK(rt, mz_schedule(g, level[0], policy, &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_assert_neq(st, MZ_ETIMEDOUT, "the run hung");
  if (st == MZ_OK && data) {
    uint32_t *out = malloc(n * sizeof *out);
    OK(rt, mz_buffer_read(bufs[nb - 1], out, n * sizeof *out));
    cr_expect_eq(memcmp(out, ref[nb - 1], n * sizeof *out), 0, "the result is wrong");
    free(out);
  }
  for (size_t i = 0; i < nb; i++) free(ref[i]);
  *nbufs = nb;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  return st;
}

static void limit_sweep(const char *devices, mz_device_kind kind, size_t n, bool data) {
  mz_runtime *rt = open_rt(devices);
  NEED(rt, devices);
  mz_runtime_destroy(rt);
  const size_t bytes = n * sizeof(uint32_t);
  const uint64_t limits[] = {64 * bytes, 15 * bytes, 8 * bytes, 5 * bytes, 4 * bytes, 3 * bytes, 2 * bytes, bytes};
  const char *policies[] = {"eager", "dmda", "round-robin", "heft", "dmdas"}; /* heft: its plan order, dmdas: its pick */
  unsigned ok = 0, enomem = 0;
  uint64_t max_ev = 0, evictions = 0, writebacks = 0, waits = 0;
  for (unsigned p = 0; p < sizeof policies / sizeof *policies; p++)
    for (unsigned l = 0; l < sizeof limits / sizeof *limits; l++) {
      rt = open_rt(devices);
      OK(rt, mz__memlimit_set(rt, kind, limits[l]));
      mz_kernel *mix = kernel(rt, "dev_mix", "mixk", NULL);
      mz_buffer *bufs[16];
      size_t nb = 0;
      int st = tree_run(rt, mix, n, policies[p], data, bufs, &nb);
      cr_expect(st == MZ_OK || st == MZ_ENOMEM, "%s, limit %" PRIu64 ", %s: %s", devices, limits[l], policies[p],
                mz_err_name(st));
      if (l == 0) cr_expect_eq(st, MZ_OK, "plenty of memory: %s", mz_err_name(st));
      ok += st == MZ_OK;
      enomem += st == MZ_ENOMEM;
      for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) {
        cr_expect_leq(mz__mem_used(rt, d, true), limits[l], "device %u held %" PRIu64 " bytes over the limit", d,
                      mz__mem_used(rt, d, true));
        for (size_t i = 0; i < nb; i++)
          cr_expect_leq(mz__mem_buffer_evictions(bufs[i], d), mz__mem_buffer_uses(bufs[i], d),
                        "evictions per buffer are bounded by its uses");
      }
      struct mz__mem_stats ms;
      mz__mem_stats(rt, &ms);
      if (l == 0) cr_expect_eq(ms.evictions, 0);
      if (ms.max_copy_evictions > max_ev) max_ev = ms.max_copy_evictions;
      evictions += ms.evictions;
      writebacks += ms.writebacks;
      waits += ms.waits;
      for (size_t i = 0; i < nb; i++) mz_buffer_release(bufs[i]);
      mz_runtime_destroy(rt);
    }
  printf("memlimit %s: %u runs OK, %u MZ_ENOMEM; %" PRIu64 " evictions (%" PRIu64 " written back), %" PRIu64
         " waits, at most %" PRIu64 " evictions of one buffer on one device\n",
         devices, ok, enomem, evictions, writebacks, waits, max_ev);
  fflush(stdout);
  cr_expect_gt(ok, 3);
}

Test(faults, memlimit_sweep_sim, .timeout = SAN_SLOW(120)) { limit_sweep("sim:dev*2", MZ_DEVICE_SIM, 1024, false); }
Test(faults, memlimit_sweep_sim_copy_engine, .timeout = SAN_SLOW(120)) {
  limit_sweep("sim:dev*2@copy=1", MZ_DEVICE_SIM, 1024, false);
}
/* OpenCL devices prefetch on their copy queue unless MZ_COPY_ENGINE=0:
 * both ways, with the data checked. */
Test(faults, memlimit_sweep_opencl, .timeout = SAN_SLOW(300)) { limit_sweep("opencl", MZ_DEVICE_OPENCL, 16384, true); }
Test(faults, memlimit_sweep_opencl_without_copy_engine, .timeout = SAN_SLOW(300)) {
  setenv("MZ_COPY_ENGINE", "0", 1);
  limit_sweep("opencl", MZ_DEVICE_OPENCL, 16384, true);
}
Test(faults, memlimit_sweep_cuda, .timeout = SAN_SLOW(300)) { limit_sweep("cuda", MZ_DEVICE_CUDA, 16384, true); }

Test(faults, memlimit_env, .timeout = SAN_SLOW(60)) {
  setenv("MZ_LIMIT_SIM_MEM", "16K", 1);
  mz_runtime *rt = open_rt("sim:dev*2");
  unsetenv("MZ_LIMIT_SIM_MEM");
  mz_kernel *mix = kernel(rt, "dev_mix", "mixk", NULL);
  mz_buffer *bufs[16];
  size_t nb = 0;
  int st = tree_run(rt, mix, 1024, "eager", false, bufs, &nb);
  cr_expect_eq(st, MZ_OK, "%s", mz_err_name(st));
  struct mz__mem_stats ms;
  mz__mem_stats(rt, &ms);
  cr_expect_gt(ms.evictions, 0, "60 KiB of buffers under 16 KiB per device need evictions");
  for (unsigned d = 1; d < 3; d++) cr_expect_leq(mz__mem_used(rt, d, true), 16384);
  for (size_t i = 0; i < nb; i++) mz_buffer_release(bufs[i]);
  mz_runtime_destroy(rt);
}

/* ---- random fault runs ---- */

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static unsigned below(uint64_t *s, unsigned n) { return (unsigned)(rnd(s) % n); }

enum { RN = 32, NIN = 4, MAXNODES = 40 };

struct rtenv {
  mz_runtime *rt;
  mz_kernel *mix;
  _Atomic unsigned char ran_cpu[MAXNODES];
  const char *devices;
  bool data_everywhere; /* every device computes (no simulated device) */
  mz_device_kind limit_kind;
};

struct tally {
  unsigned runs, hangs, futures, resolved, checked, fired, failed_runs, limited;
};

/* One random run on env; false on a hang (the runtime is then unusable). */
static bool random_run(struct rtenv *env, uint64_t seed, struct tally *tl) {
  uint64_t s = seed;
  mz_runtime *rt = env->rt;
  unsigned nn = 4 + below(&s, MAXNODES - 3);
  int pa[MAXNODES], pb[MAXNODES]; /* -1 - k: input k; else a node */
  uint32_t ref[NIN + MAXNODES][RN];
  mz_buffer *in[NIN], *out[MAXNODES];
  for (int k = 0; k < NIN; k++) {
    in[k] = buffer(rt, RN, (uint32_t)rnd(&s));
    OK(rt, mz_buffer_read(in[k], ref[k], sizeof ref[k]));
  }
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *res[MAXNODES];
  for (unsigned i = 0; i < nn; i++) {
    unsigned ch = NIN + i;
    pa[i] = (int)below(&s, ch) - NIN;
    pb[i] = (int)below(&s, ch) - NIN;
    out[i] = buffer(rt, RN, 0);
    mz_op *a = pa[i] < 0 ? mz_value(g, in[pa[i] + NIN]) : res[pa[i]];
    mz_op *b = pb[i] < 0 ? mz_value(g, in[pb[i] + NIN]) : res[pb[i]];
    mz_op *args[] = {mz_u32(g, i), a, b, mz_value(g, out[i])};
    res[i] = mz_unzip(g, mz_apply(g, env->mix, mz_zip(g, 4, args), NULL), 3);
    for (unsigned j = 0; j < RN; j++)
      ref[NIN + i][j] = mix1(i, ref[pa[i] + NIN][j], ref[pb[i] + NIN][j], j);
  }
  OK(rt, mz_graph_status(g));
  for (unsigned i = 0; i < MAXNODES; i++) atomic_store(&env->ran_cpu[i], 0);
  /* The fault: a kind and an index, or a device killed after some ops. */
  unsigned kind = below(&s, MZ__FAULT_KINDS + 2); /* KINDS: dead; KINDS+1: none */
  const char *only = getenv("MZ_FAULT_KIND"); /* replaying: force one kind (6: none) */
  if (only && *only) kind = (unsigned)atoi(only);
  uint64_t k = 1 + below(&s, nn + 2);
  unsigned victim = below(&s, mz_runtime_device_count(rt));
  OK(rt, mz__faults_set(rt, NULL));
  if (kind < MZ__FAULT_KINDS) OK(rt, mz__fault_arm(rt, kind, k));
  else if (kind == MZ__FAULT_KINDS) OK(rt, mz__fault_kill(rt, victim, k));
  static const char *const pols[] = {"eager", "round-robin", "ws", "dmda", "heft", "single", "pin", "dmdas"};
  const char *pol = pols[below(&s, sizeof pols / sizeof *pols)];
  /* A quarter of the runs cap the devices' memory at 3 to 8 buffers: a
   * node needs at most 3, so they must still succeed, through evictions. */
  uint64_t limit = below(&s, 4) ? 0 : (3 + below(&s, 6)) * RN * sizeof(uint32_t);
  OK(rt, mz__memlimit_set(rt, env->limit_kind, limit));
  for (unsigned d = 0; limit && d < mz_runtime_device_count(rt); d++) mz__mem_peak_reset(rt, d);
  /* Two futures: part of the graph first, then all of it. */
  unsigned half = 1 + below(&s, nn);
  mz_future *f[2] = {NULL, NULL};
  OK(rt, mz_schedule(g, mz_join(g, half, res), pol, &f[0]));
  /* On OpenCL the second run starts after the first: a reader in one run
   * copies again a buffer that a transfer of a run in flight is making
   * valid (src/exec.c, plan_device_read), so two PoCL threads would write
   * the same bytes into one buffer at once, a race ThreadSanitizer reports.
   * Overlapping runs are covered on the other devices. */
  int st[2];
  st[0] = env->data_everywhere ? mz_future_wait_for(f[0], WAIT_NS) : MZ_EAGAIN;
  OK(rt, mz_schedule(g, mz_join(g, nn, res), pol, &f[1]));
  tl->futures += 2;
  for (int i = 0; i < 2; i++) {
    if (i || st[0] == MZ_EAGAIN) st[i] = mz_future_wait_for(f[i], WAIT_NS);
    if (st[i] == MZ_ETIMEDOUT) {
      tl->hangs++;
      fprintf(stderr, "faults: HANG, seed %" PRIu64 " (%s, %s, fault kind %u at %" PRIu64 ", device %u, limit %" PRIu64
              ")\n", seed, env->devices, pol, kind, k, victim, limit);
      mz__mem_dump(rt, stderr);
      return false;
    }
    tl->resolved++;
  }
  uint64_t fired = 0;
  for (unsigned i = 0; i <= MZ__FAULT_KINDS; i++) fired += mz__fault_fired(rt, i);
  tl->fired += fired > 0;
  /* Each node: its output's read status, and its data where no fault
   * touched it and every node it depends on ran where data is computed. */
  int rs[MAXNODES];
  bool verifiable[MAXNODES];
  unsigned nfail = 0;
  for (unsigned i = 0; i < nn; i++) {
    uint32_t got[RN];
    rs[i] = mz_buffer_read(out[i], got, sizeof got);
    bool va = pa[i] < 0 || verifiable[pa[i]], vb = pb[i] < 0 || verifiable[pb[i]];
    verifiable[i] = va && vb && (env->data_everywhere || atomic_load(&env->ran_cpu[i]));
    /* A killed device takes the outputs that were only there with it: a
     * node that finished may read MZ_EDEVICE afterwards. */
    bool dead_run = kind == MZ__FAULT_KINDS;
    if (rs[i] == MZ_OK) {
      bool pa_ok = pa[i] < 0 || rs[pa[i]] == MZ_OK || (dead_run && rs[pa[i]] == MZ_EDEVICE);
      bool pb_ok = pb[i] < 0 || rs[pb[i]] == MZ_OK || (dead_run && rs[pb[i]] == MZ_EDEVICE);
      cr_expect(pa_ok && pb_ok, "seed %" PRIu64 ": node %u succeeded after a failed predecessor (%d: %s, %d: %s)", seed,
                i, pa[i], pa[i] < 0 ? "input" : mz_err_name(rs[pa[i]]), pb[i], pb[i] < 0 ? "input" : mz_err_name(rs[pb[i]]));
      if (verifiable[i]) {
        cr_expect_eq(memcmp(got, ref[NIN + i], sizeof got), 0,
                     "seed %" PRIu64 ": node %u (%s, %s, fault kind %u at %" PRIu64 ", device %u) is wrong", seed, i,
                     env->devices, pol, kind, k, victim);
        tl->checked++;
      }
    } else {
      nfail++;
      cr_expect(rs[i] == MZ_ECANCELED || rs[i] == MZ_ENOMEM || rs[i] == MZ_EDEVICE || rs[i] == MZ_EKERNEL,
                "seed %" PRIu64 ": node %u: %s", seed, i, mz_err_name(rs[i]));
    }
  }
  if (!fired) {
    cr_expect_eq(nfail, 0, "seed %" PRIu64 ": %u nodes failed without a fault (%s, %s, limit %" PRIu64 "): %s", seed,
                 nfail, env->devices, pol, limit, mz_future_message(f[0]));
    cr_expect_eq(st[1], MZ_OK, "seed %" PRIu64 ": %s", seed, mz_future_message(f[1]));
  } else if (kind < MZ__FAULT_KINDS) {
    unsigned direct = 0;
    for (unsigned i = 0; i < nn; i++) direct += rs[i] < 0 && rs[i] != MZ_ECANCELED;
    /* An enqueue fault refuses a whole batch (OpenCL batches several nodes). */
    if (!(direct <= 1 || kind == MZ__FAULT_ENQUEUE))
      for (unsigned i = 0; i < nn; i++)
        if (rs[i] < 0 && rs[i] != MZ_ECANCELED)
          fprintf(stderr, "seed %" PRIu64 ": node %u failed with %s (%s, %s, kind %u at %" PRIu64 ", limit %" PRIu64
                  "): %s | %s\n", seed, i, mz_err_name(rs[i]), env->devices, pol, kind, k, limit,
                  mz_future_message(f[0]), mz_future_message(f[1]));
    cr_expect(direct <= 1 || kind == MZ__FAULT_ENQUEUE, "seed %" PRIu64 ": %u nodes failed on one fault", seed, direct);
  }
  tl->failed_runs += nfail > 0;
  /* A node runs in the first run that needs it: the second future does
   * not see what failed in the first. */
  bool both_ok = st[0] == MZ_OK && st[1] == MZ_OK;
  if (kind != MZ__FAULT_KINDS || !both_ok)
    cr_expect_eq(both_ok, nfail == 0, "seed %" PRIu64 ": the futures say %s, %s; %u nodes failed", seed,
                 mz_err_name(st[0]), mz_err_name(st[1]), nfail);
  for (unsigned i = 0; i < nn && kind == MZ__FAULT_KINDS && both_ok; i++)
    cr_expect(rs[i] == MZ_OK || rs[i] == MZ_EDEVICE, "seed %" PRIu64 ": node %u: %s after a run that ended well",
              seed, i, mz_err_name(rs[i]));
  for (unsigned d = 0; limit && d < mz_runtime_device_count(rt); d++) {
    cr_expect_leq(mz__mem_used(rt, d, true), limit, "seed %" PRIu64 ": device %u went over its limit", seed, d);
    for (unsigned i = 0; i < nn; i++)
      cr_expect_leq(mz__mem_buffer_evictions(out[i], d), mz__mem_buffer_uses(out[i], d), "seed %" PRIu64, seed);
  }
  mz_future_destroy(f[0]);
  mz_future_destroy(f[1]);
  mz_graph_destroy(g);
  for (int i = 0; i < NIN; i++) mz_buffer_release(in[i]);
  for (unsigned i = 0; i < nn; i++) mz_buffer_release(out[i]);
  OK(rt, mz_runtime_wait_idle(rt));
  /* Every copy is freed with its buffer (the last references may go with
   * a finished run's teardown, a moment after mz_runtime_wait_idle). */
  for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) {
    for (int ms = 0; ms < 2000 && mz__mem_used(rt, d, false); ms++) nanosleep(&(struct timespec){0, 1000000}, NULL);
    cr_expect_eq(mz__mem_used(rt, d, false), 0, "seed %" PRIu64 ": device %u still holds memory", seed, d);
  }
  if (limit) tl->limited++;
  OK(rt, mz__memlimit_set(rt, env->limit_kind, 0));
  OK(rt, mz__faults_set(rt, NULL));
  for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) mz__fault_revive(rt, d);
  tl->runs++;
  return true;
}

/* A generated DAG on simulated devices only (no data: statuses only). */
static bool random_dag_run(struct rtenv *env, uint64_t seed, struct tally *tl) {
  uint64_t s = seed;
  mz_runtime *rt = env->rt;
  static const mz_dag_shape shapes[] = {MZ_DAG_RANDOM, MZ_DAG_FORKJOIN, MZ_DAG_CHOLESKY, MZ_DAG_STENCIL};
  mz_dag_params p = {.shape = shapes[below(&s, 4)], .nodes = 20 + below(&s, 40), .tiles = 3 + below(&s, 2),
                     .steps = 3, .seed = seed, .tile_bytes = 256};
  mz_dag *d;
  OK(rt, mz_dag_generate(rt, &p, &d));
  unsigned kind = below(&s, MZ__FAULT_KINDS + 1);
  uint64_t k = 1 + below(&s, (unsigned)d->nodes);
  if (kind < MZ__FAULT_KINDS) OK(rt, mz__fault_arm(rt, kind, k));
  else OK(rt, mz__fault_kill(rt, 1 + below(&s, mz_runtime_device_count(rt) - 1), k));
  static const char *const pols[] = {"eager", "ws", "dmda", "heft", "dmdas"};
  const char *pol = pols[below(&s, sizeof pols / sizeof *pols)];
  mz_future *f;
  OK(rt, mz_schedule(d->g, d->root, pol, &f));
  tl->futures++;
  int st = mz_future_wait_for(f, WAIT_NS);
  if (st == MZ_ETIMEDOUT) {
    tl->hangs++;
    fprintf(stderr, "faults: HANG, dag seed %" PRIu64 " (%s, kind %u at %" PRIu64 ")\n", seed, pol, kind, k);
    return false;
  }
  tl->resolved++;
  uint64_t fired = 0;
  for (unsigned i = 0; i <= MZ__FAULT_KINDS; i++) fired += mz__fault_fired(rt, i);
  tl->fired += fired > 0;
  tl->failed_runs += st != MZ_OK;
  cr_expect(fired || st == MZ_OK, "dag seed %" PRIu64 ": %s without a fault", seed, mz_err_name(st));
  mz_future_destroy(f);
  mz_dag_destroy(d);
  OK(rt, mz_runtime_wait_idle(rt));
  OK(rt, mz__faults_set(rt, NULL));
  for (unsigned dv = 0; dv < mz_runtime_device_count(rt); dv++) mz__fault_revive(rt, dv);
  tl->runs++;
  return true;
}

static void env_open(struct rtenv *env, const char *devices, bool data_everywhere, mz_device_kind limit_kind) {
  memset(env, 0, sizeof *env);
  env->devices = devices;
  env->data_everywhere = data_everywhere;
  env->limit_kind = limit_kind;
  env->rt = open_rt(devices);
  if (env->rt) env->mix = kernel(env->rt, "mix", "mixk", (void *)env->ran_cpu);
}

Test(faults, random_runs, .timeout = SAN_SLOW(600)) {
  unsigned total = 1000;
  const char *e = getenv("MZ_FAULT_RUNS"); /* sanitizer builds may ask for fewer */
  if (e && atoi(e) > 0) total = (unsigned)atoi(e);
  uint64_t base = 0x6d61697a65ull; /* "maize" */
  e = getenv("MZ_FAULT_SEED");
  if (e && *e) base = strtoull(e, NULL, 0);
  struct rtenv envs[4];
  env_open(&envs[0], "cpu:2;sim:dev*2", false, MZ_DEVICE_SIM);
  env_open(&envs[1], "sim:gpu*3@copy=1", false, MZ_DEVICE_SIM); /* copy engines; envs[0]'s sim has none */
  env_open(&envs[2], "cpu:1,opencl", true, MZ_DEVICE_OPENCL);
  env_open(&envs[3], "cpu:1,cuda", true, MZ_DEVICE_CUDA);
  unsigned first = 0; /* MZ_FAULT_FIRST=i: start at run i (to replay a failing seed) */
  e = getenv("MZ_FAULT_FIRST");
  if (e && *e) first = (unsigned)atoi(e);
  struct tally tl = {0};
  unsigned opencl_runs = 0, cuda_runs = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = first; i < first + total; i++) {
    uint64_t seed = base + i;
    bool ok;
    if (i % 10 == 9 && envs[2].rt) {
      ok = random_run(&envs[2], seed, &tl);
      opencl_runs++;
    } else if (i % 10 == 7 && envs[3].rt) {
      ok = random_run(&envs[3], seed, &tl);
      cuda_runs++;
    } else if (i % 5 == 4) {
      ok = random_dag_run(&envs[1], seed, &tl);
    } else {
      ok = random_run(&envs[0], seed, &tl);
    }
    cr_assert(ok, "run %u (seed %" PRIu64 ") hung", i, seed);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  struct mz__mem_stats ms = {0};
  for (int i = 0; i < 4; i++) {
    struct mz__mem_stats m1;
    mz__mem_stats(envs[i].rt, &m1);
    ms.evictions += m1.evictions;
    ms.waits += m1.waits;
    if (m1.max_copy_evictions > ms.max_copy_evictions) ms.max_copy_evictions = m1.max_copy_evictions;
  }
  printf("faults: %u runs, %u hangs, %u futures resolved, %u results checked correct (%u runs with a fault "
         "fired, %u with failed nodes, %u on OpenCL%s, %u on CUDA%s, %u under a memory limit: %" PRIu64 " evictions, %" PRIu64
         " waits, at most %" PRIu64 " of one copy; seeds %#" PRIx64 "+%u..%u, %.1f s)\n",
         tl.runs, tl.hangs, tl.resolved, tl.checked, tl.fired, tl.failed_runs, opencl_runs, 
         envs[2].rt ? "" : ": no OpenCL device", cuda_runs, envs[3].rt ? "" : ": no CUDA driver", tl.limited, ms.evictions, ms.waits, ms.max_copy_evictions, base,
         first, first + total - 1, secs);
  fflush(stdout);
  cr_expect_eq(tl.resolved, tl.futures);
  cr_expect_eq(tl.hangs, 0);
  for (int i = 0; i < 4; i++)
    if (envs[i].rt) mz_runtime_destroy(envs[i].rt);
#ifdef MZ_CUDA_EMU_LIB
  emu_check_rules();
#endif
}
