/* test_runtime: the runtime's life and what it tells about itself.
 *
 * Checks device inspection on a CPU-only runtime (one device, the CPU,
 * first, with its kind, a name, memory, compute units and as many queues
 * as workers for "cpu:2"), the device selection from MZ_DEVICES and the
 * config, the default policy, the trace (MZ_TRACE or the config writes
 * Chrome trace-event JSON with one "X" slice per task and flow arrows),
 * mz_runtime_wait_idle, 50 runtimes created and destroyed in a loop with
 * work on each, two runtimes running at once (sharing nothing:
 * buffers and kernels of one are refused by the other's graphs), and the
 * names of the runtime's threads as /proc shows them (gone once it is
 * destroyed). */
#include <unistd.h>

#include "common.h"

static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  if (c->user) atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

Test(runtime, device_inspection, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  cr_assert_eq(mz_runtime_device_count(rt), 1, "cpu:2 selects the CPU only");
  mz_device *d = mz_runtime_device(rt, 0);
  cr_assert_not_null(d);
  cr_expect_null(mz_runtime_device(rt, 1));
  mz_device_info info;
  MZ_OK_OR_DIE(rt, mz_device_get_info(d, &info));
  cr_expect_eq(info.kind, MZ_DEVICE_CPU);
  cr_expect_str_eq(mz_device_kind_name(info.kind), "cpu");
  cr_expect_eq(info.index, 0);
  cr_assert_not_null(info.name);
  cr_expect_gt(strlen(info.name), 0);
  cr_expect_neq(info.name[strlen(info.name) - 1], ' ', "the CPU's name '%s' ends in a blank", info.name);
  cr_expect_not_null(info.vendor);
  cr_expect_not_null(info.version);
  cr_expect_gt(info.memory, 0);
  cr_expect_geq(info.compute_units, 1);
  cr_expect_eq(info.queues, 2);
  cr_expect_eq(info.first_queue, 0);
  cr_expect(info.unified_memory);
  cr_expect_geq(info.numa_node, -1);
  cr_expect_eq(info.cc_major, 0);
  cr_expect_eq(mz_runtime_queue_count(rt), 2);
  cr_expect_not(mz_device_is_dead(d));
  mz_runtime_destroy(rt);

  rt = test_runtime("cpu:1");
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  cr_expect_eq(info.queues, 1);
  cr_expect_eq(mz_runtime_queue_count(rt), 1);
  mz_runtime_destroy(rt);

  /* "cpu": one worker per core. */
  rt = test_runtime("cpu");
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  cr_expect_eq(info.queues, info.compute_units);
  cr_expect_eq(mz_runtime_queue_count(rt), info.queues);
  mz_runtime_destroy(rt);

  /* More workers than cores is allowed. */
  rt = test_runtime("cpu:5");
  cr_expect_eq(mz_runtime_queue_count(rt), 5);
  mz_runtime_destroy(rt);
}

Test(runtime, threads_are_named, .timeout = 30) {
  mz_runtime *rt = NULL;
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2;sim:gpu*2", .quiet = true,
                                                            .watchdog_s = 5},
                                       &rt));
  cr_expect_eq(test_threads_named("mz-cpu0"), 1, "the first CPU worker is mz-cpu0");
  cr_expect_eq(test_threads_named("mz-cpu1"), 1, "the second CPU worker is mz-cpu1");
  cr_expect_eq(test_threads_named("mz-reaper"), 1);
  cr_expect_eq(test_threads_named("mz-watchdog"), 1);
  cr_expect_eq(test_threads_named("mz-sim"), 1, "one engine thread drives the simulated devices");
  mz_runtime_destroy(rt);
  const char *names[] = {"mz-cpu0", "mz-cpu1", "mz-reaper", "mz-watchdog", "mz-sim"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    cr_expect_eq(test_threads_named(names[i]), 0, "%s outlives its runtime", names[i]);
}

Test(runtime, devices_and_policy_from_environment, .timeout = 30) {
  setenv("MZ_DEVICES", "cpu:3", 1);
  setenv("MZ_POLICY", "single", 1);
  mz_runtime *rt;
  MZ_OK_OR_DIE(NULL, mz_runtime_create(NULL, &rt));
  cr_expect_eq(mz_runtime_queue_count(rt), 3);
  cr_expect_str_eq(mz_runtime_policy(rt), "single");
  mz_runtime_destroy(rt);
  /* The config wins over the environment. */
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .policy = "eager"}, &rt));
  cr_expect_eq(mz_runtime_queue_count(rt), 1);
  cr_expect_str_eq(mz_runtime_policy(rt), "eager");
  mz_runtime_destroy(rt);
  unsetenv("MZ_POLICY");
  MZ_OK_OR_DIE(NULL, mz_runtime_create(NULL, &rt));
  cr_expect_str_eq(mz_runtime_policy(rt), "eager", "the default policy is eager");
  mz_runtime_destroy(rt);
}

/* ---- the trace ---- */

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

static unsigned count_of(const char *s, const char *what) {
  unsigned n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static void traced_run(mz_runtime *rt, int tasks) {
  mz_kernel *k = test_kernel(rt, "traced_inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 16, NULL), *b = test_buffer_1d(rt, MZ_I32, 16, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_value(g, a), *rb = mz_value(g, b);
  for (int i = 0; i < tasks; i++) {
    if (i % 2) ra = mz_unzip(g, mz_apply(g, k, ra, NULL), 0);
    else rb = mz_unzip(g, mz_apply(g, k, rb, NULL), 0);
  }
  cr_assert_eq(test_run(g, mz_join(g, 2, (mz_op *[]){ra, rb}), NULL, NULL), MZ_OK);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
}

static void check_trace(const char *path, unsigned tasks) {
  char *s = read_file(path);
  cr_assert_not_null(s, "no trace at %s", path);
  const char *p = s;
  while (*p == ' ' || *p == '\n') p++;
  cr_expect_eq(*p, '{', "the trace is a JSON object");
  cr_expect(strstr(s, "\"traceEvents\""), "the trace has traceEvents");
  cr_expect_eq(count_of(s, "\"ph\":\"X\""), tasks, "one complete event per task");
  cr_expect_eq(count_of(s, "\"traced_inc\""), tasks, "slices are named after the kernel");
  cr_expect_geq(count_of(s, "\"ph\":\"s\""), tasks - 2, "flow arrows for the chains' edges");
  cr_expect_eq(count_of(s, "\"ph\":\"s\""), count_of(s, "\"ph\":\"f\""), "every arrow has two ends");
  cr_expect(strstr(s, "thread_name"), "queues are named tracks");
  const char *end = s + strlen(s);
  while (end > s && (end[-1] == '\n' || end[-1] == ' ')) end--;
  cr_expect(end > s && end[-1] == '}', "the object is closed");
  free(s);
}

Test(runtime, trace_from_config, .timeout = 30) {
  char path[] = "/tmp/mz-trace-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  unlink(path);
  mz_runtime *rt;
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2", .trace = path}, &rt));
  traced_run(rt, 12);
  mz_runtime_destroy(rt);
  check_trace(path, 12);
  unlink(path);
}

Test(runtime, trace_from_environment, .timeout = 30) {
  char path[] = "/tmp/mz-trace-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  unlink(path);
  setenv("MZ_TRACE", path, 1);
  mz_runtime *rt = test_runtime("cpu:1");
  traced_run(rt, 7);
  mz_runtime_destroy(rt);
  check_trace(path, 7);
  unlink(path);
  /* Without MZ_TRACE no file is written. */
  unsetenv("MZ_TRACE");
  rt = test_runtime("cpu:1");
  traced_run(rt, 3);
  mz_runtime_destroy(rt);
  cr_expect_neq(access(path, F_OK), 0, "no trace without MZ_TRACE");
}

/* ---- idle, many, several ---- */

static int slow_flag(const mz_call *c) {
  test_sleep_ms(100);
  atomic_store((_Atomic int *)c->user, 1);
  return 0;
}

Test(runtime, wait_idle, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  cr_expect_eq(mz_runtime_wait_idle(rt), MZ_OK, "idle at once when nothing runs");
  _Atomic int flags[3] = {0, 0, 0};
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  for (int i = 0; i < 3; i++) {
    mz_future *f;
    MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, slow_flag, &flags[i], NULL), NULL, &f));
    mz_future_destroy(f);
  }
  cr_expect_eq(mz_runtime_wait_idle(rt), MZ_OK);
  for (int i = 0; i < 3; i++) cr_expect_eq(atomic_load(&flags[i]), 1, "run %d finished before wait_idle returned", i);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

Test(runtime, many_runtimes_in_a_loop, .timeout = 60) {
  for (int i = 0; i < 50; i++) {
    mz_runtime *rt = test_runtime(i % 2 ? "cpu:2" : "cpu:1");
    _Atomic int calls = 0;
    mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, &calls);
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *r = mz_value(g, b);
    for (int s = 0; s < 3; s++) r = mz_unzip(g, mz_apply(g, k, r, NULL), 0);
    cr_assert_eq(test_run(g, r, NULL, NULL), MZ_OK, "runtime %d", i);
    int32_t out[4];
    MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
    cr_expect_eq(out[0], 3, "runtime %d", i);
    cr_expect_eq(atomic_load(&calls), 3);
    /* Every other one leaves its objects to mz_runtime_destroy. */
    if (i % 2) {
      mz_graph_destroy(g);
      mz_buffer_release(b);
      mz_kernel_destroy(k);
    }
    mz_runtime_destroy(rt);
  }
}

Test(runtime, two_runtimes_at_once, .timeout = 30) {
  mz_runtime *r1 = test_runtime("cpu:1"), *r2 = test_runtime("cpu:2");
  _Atomic int c1 = 0, c2 = 0;
  mz_kernel *k1 = test_kernel(r1, "inc", "inout i32[] v", inc_fn, &c1);
  mz_kernel *k2 = test_kernel(r2, "inc", "inout i32[] v", inc_fn, &c2);
  mz_buffer *b1 = test_buffer_1d(r1, MZ_I32, 64, NULL), *b2 = test_buffer_1d(r2, MZ_I32, 64, NULL);
  mz_graph *g1, *g2;
  MZ_OK_OR_DIE(r1, mz_graph_create(r1, &g1));
  MZ_OK_OR_DIE(r2, mz_graph_create(r2, &g2));
  mz_op *o1 = mz_value(g1, b1), *o2 = mz_value(g2, b2);
  for (int i = 0; i < 200; i++) {
    o1 = mz_unzip(g1, mz_apply(g1, k1, o1, NULL), 0);
    o2 = mz_unzip(g2, mz_apply(g2, k2, o2, NULL), 0);
  }
  mz_future *f1, *f2;
  MZ_OK_OR_DIE(r1, mz_schedule(g1, o1, NULL, &f1));
  MZ_OK_OR_DIE(r2, mz_schedule(g2, o2, "round-robin", &f2));
  cr_expect_eq(mz_future_wait(f2), MZ_OK);
  cr_expect_eq(mz_future_wait(f1), MZ_OK);
  cr_expect_eq(atomic_load(&c1), 200);
  cr_expect_eq(atomic_load(&c2), 200);
  int32_t out[64];
  MZ_OK_OR_DIE(r1, mz_buffer_read(b1, out, sizeof out));
  cr_expect_eq(out[63], 200);
  MZ_OK_OR_DIE(r2, mz_buffer_read(b2, out, sizeof out));
  cr_expect_eq(out[0], 200);
  /* They share nothing. */
  mz_graph *gx;
  MZ_OK_OR_DIE(r1, mz_graph_create(r1, &gx));
  mz_value(gx, b2);
  cr_expect_eq(mz_graph_status(gx), MZ_EINVAL);
  mz_graph_destroy(gx);
  MZ_OK_OR_DIE(r1, mz_graph_create(r1, &gx));
  mz_apply(gx, k2, mz_value(gx, b1), NULL);
  cr_expect_eq(mz_graph_status(gx), MZ_EINVAL);
  mz_graph_destroy(gx);
  /* An error on one does not touch the other's message. */
  mz_buffer *bad;
  cr_expect_eq(mz_buffer_create(r1, MZ_I32, 1, (size_t[]){0}, NULL, &bad), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(r1), "zero"));
  cr_expect_null(strstr(mz_runtime_last_error(r2), "zero"));
  mz_future_destroy(f1);
  mz_future_destroy(f2);
  mz_graph_destroy(g1);
  mz_graph_destroy(g2);
  mz_buffer_release(b1);
  mz_buffer_release(b2);
  mz_kernel_destroy(k1);
  mz_kernel_destroy(k2);
  /* Destroyed in the order they were made, and the other way round works too. */
  mz_runtime_destroy(r1);
  mz_runtime_destroy(r2);
}

static int destroy_it(const mz_call *c) {
  mz_runtime_destroy(c->user);
  return 0;
}

Test(runtime, destroy_from_runtime_thread_is_refused, .timeout = 30) {
  /* mz_runtime_destroy from a host node prints an error and returns;
   * the runtime stays usable. */
  mz_runtime *rt = test_runtime("cpu:1");
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_assert_eq(test_run(g, mz_host(g, destroy_it, rt, NULL), NULL, NULL), MZ_OK);
  cr_assert_eq(test_run(g, mz_host(g, destroy_it, rt, NULL), NULL, NULL), MZ_OK);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}
