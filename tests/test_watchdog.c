/* test_watchdog: the stuck-work report.
 *
 * Checks that with a watchdog period set (the config's watchdog_s with a
 * report callback, or $MZ_WATCHDOG_S with the report on stderr), a CPU
 * task blocked on a condition the test controls for longer than the
 * period is reported by name with its device, queue and state ("running"),
 * and its dependent as waiting; that the run completes once the task is
 * released; that a healthy run of short tasks and an idle runtime produce
 * no report; and that no watchdog thread exists unless asked for. */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"

#define WAIT_NS 20000000000ull

struct reports {
  pthread_mutex_t m;
  char text[16384];
  size_t n;
  unsigned count;
};

static void collect(const char *report, void *user) {
  struct reports *r = user;
  pthread_mutex_lock(&r->m);
  size_t len = strlen(report);
  if (r->n + len >= sizeof r->text) len = sizeof r->text - r->n - 1;
  memcpy(r->text + r->n, report, len);
  r->n += len;
  r->text[r->n] = 0;
  r->count++;
  pthread_mutex_unlock(&r->m);
  /* A report callback runs on a runtime thread: blocking is refused. */
}

static unsigned report_count(struct reports *r) {
  pthread_mutex_lock(&r->m);
  unsigned c = r->count;
  pthread_mutex_unlock(&r->m);
  return c;
}

static _Atomic int release;

static int stuck_fn(const mz_call *c) {
  (void)c;
  uint64_t end = test_now_ns() + WAIT_NS;
  while (!atomic_load(&release) && test_now_ns() < end) test_sleep_ms(1);
  return 0;
}

static int quick_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  v[0] += 1;
  test_sleep_ms(1);
  return 0;
}

/* Builds stuck_kernel -> after_stuck on one buffer, runs it, waits for a
 * report via poll(), then releases the task. */
static void stuck_run(mz_runtime *rt, bool (*have_report)(void *), void *arg) {
  atomic_store(&release, 0);
  mz_kernel *stuck = test_kernel(rt, "stuck_kernel", "inout i32[] v", stuck_fn, NULL);
  mz_kernel *after = test_kernel(rt, "after_stuck", "inout i32[] v", quick_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *s = mz_unzip(g, mz_apply(g, stuck, mz_value(g, b), NULL), 0);
  mz_op *a = mz_unzip(g, mz_apply(g, after, s, NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, a, "single", &f));
  uint64_t end = test_now_ns() + 10000000000ull;
  bool got = false;
  while (!(got = have_report(arg)) && test_now_ns() < end) test_sleep_ms(5);
  cr_expect_eq(mz_future_poll(f), MZ_EAGAIN, "the run is still stuck while reported");
  atomic_store(&release, 1);
  cr_assert(got, "no watchdog report within 10 s for a task stuck past a 0.2 s period");
  cr_assert_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK, "the run completes once the task is released");
  int32_t out[4];
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  cr_expect_eq(out[0], 1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(stuck);
  mz_kernel_destroy(after);
}

static bool have_cb_report(void *arg) { return report_count(arg) > 0; }

static void check_report(const char *text, mz_runtime *rt) {
  mz_device_info info;
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  cr_expect(strstr(text, "maize watchdog"), "report: %s", text);
  cr_expect(strstr(text, "(stuck_kernel): running"), "the stuck node, running: %s", text);
  cr_expect(strstr(text, info.name), "the device's name '%s': %s", info.name, text);
  cr_expect(strstr(text, "device 0"), "the device: %s", text);
  cr_expect(strstr(text, "queue 0"), "the queue: %s", text);
  cr_expect(strstr(text, "(after_stuck): waiting for predecessors") || strstr(text, "(after_stuck): gated on host") ||
                strstr(text, "(after_stuck): submitted to device"),
            "the dependent and its state: %s", text);
  cr_expect(strstr(text, "node "), "node ids: %s", text);
}

Test(watchdog, stuck_task_reported_to_callback, .timeout = 60) {
  static struct reports rep = {.m = PTHREAD_MUTEX_INITIALIZER};
  mz_runtime *rt = NULL;
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true, .watchdog_s = 0.2,
                                                            .watchdog_fn = collect, .watchdog_user = &rep},
                                       &rt));
  stuck_run(rt, have_cb_report, &rep);
  pthread_mutex_lock(&rep.m);
  char text[16384];
  snprintf(text, sizeof text, "%s", rep.text);
  pthread_mutex_unlock(&rep.m);
  check_report(text, rt);
  mz_runtime_destroy(rt);
}

/* stderr into a file for the environment variable's path. */
static char err_path[64];

static bool have_stderr_report(void *arg) {
  (void)arg;
  fflush(stderr);
  FILE *fp = fopen(err_path, "r");
  if (!fp) return false;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = 0;
  return strstr(buf, "(after_stuck)") != NULL;
}

Test(watchdog, stuck_task_reported_on_stderr_from_env, .timeout = 60) {
  setenv("MZ_WATCHDOG_S", "0.2", 1);
  snprintf(err_path, sizeof err_path, "/tmp/mz-watchdog-XXXXXX");
  int fd = mkstemp(err_path);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  close(fd);
  mz_runtime *rt = test_runtime("cpu:1"); /* quiet: the report is printed anyway */
  stuck_run(rt, have_stderr_report, NULL);
  mz_runtime_destroy(rt);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  unsetenv("MZ_WATCHDOG_S");
  char text[16384];
  FILE *fp = fopen(err_path, "r");
  cr_assert_not_null(fp);
  size_t n = fread(text, 1, sizeof text - 1, fp);
  text[n] = 0;
  fclose(fp);
  unlink(err_path);
  mz_runtime *probe = test_runtime("cpu:1");
  check_report(text, probe);
  mz_runtime_destroy(probe);
}

Test(watchdog, silent_on_a_healthy_run_and_when_idle, .timeout = 60) {
  static struct reports rep = {.m = PTHREAD_MUTEX_INITIALIZER};
  mz_runtime *rt = NULL;
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2", .quiet = true, .watchdog_s = 0.2,
                                                            .watchdog_fn = collect, .watchdog_user = &rep},
                                       &rt));
  /* Idle, longer than the period. */
  test_sleep_ms(500);
  /* A chain of 300 tasks of about 1 ms each: always moving. */
  mz_kernel *k = test_kernel(rt, "quick", "inout i32[] v", quick_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *c = mz_value(g, b);
  for (int i = 0; i < 300; i++) c = mz_unzip(g, mz_apply(g, k, c, NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, c, NULL, &f));
  cr_assert_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK);
  test_sleep_ms(500); /* idle again */
  cr_expect_eq(report_count(&rep), 0, "a report on a healthy run: %s", rep.text);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(watchdog, zero_is_off, .timeout = 30) {
  setenv("MZ_WATCHDOG_S", "0", 1);
  mz_runtime *rt = test_runtime("cpu:1");
  mz_runtime_destroy(rt);
  unsetenv("MZ_WATCHDOG_S");
}
