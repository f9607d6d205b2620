/* test_badinput: the bad-input matrix.
 *
 * One Criterion test per bad input.  Each asserts the documented negative
 * MZ_E* code and a non-empty message (from mz_runtime_last_error,
 * mz_graph_message, mz_future_message, or stderr where no object exists to
 * hold it), waits with a timeout wherever a hang is possible (so a hang
 * fails the case instead of blocking), and checks that independent work
 * still completes.  The cases: cycles (a self edge, a 2-cycle, a
 * 100,000-node ring); NULL, foreign, wrong-kind and destroyed handles; a
 * buffer passed twice with conflicting directions; zero-size buffers,
 * arguments that do not match the parameter list, buffers larger than
 * every device's memory; a kernel no enabled device can run; an OpenCL
 * kernel that does not build; a kernel that fails at run time; policies
 * that choose a queue that does not exist, one that cannot run the node,
 * or nothing, and one that never places dependent nodes; blocking calls
 * from tasks and completion callbacks; bad environment values.  At the end
 * a report hook prints "badinput: k/n cases gave the documented error, c
 * crashes, h hangs" and, for quoting, a line
 * "BADINPUT tried=N crashes=C hangs=H leaks=L wrong=W": N counts the bad
 * API calls whose documented error a case checked (TRIED), summed over the
 * cases' processes; C the cases killed by a signal, H those over their
 * timeout, L those that exited non-zero after their checks passed (what
 * LeakSanitizer does on a leak), W those whose checks failed. */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"

#define WAIT_NS 20000000000ull /* a generous bound: reaching it is a hang */

/* TRIED(call): a bad API call whose documented error is checked, counted
 * for the report.  Criterion runs each case in a child process: each
 * child adds its count to a tally file (named in the environment by the
 * runner, before the children start) when it exits, and the runner sums
 * them at the end. */
static _Atomic unsigned long tried;
#define TRIED(call) (atomic_fetch_add(&tried, 1), (call))
#define TALLY_ENV "MZ_BADINPUT_TALLY"

/* ---- helpers ---- */

static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  return 0;
}

static int fail_fn(const mz_call *c) {
  (void)c;
  return MZ_EKERNEL;
}

static void expect_msg(const char *msg, const char *word, const char *what) {
  cr_assert_not_null(msg, "%s: no message", what);
  cr_expect_gt(strlen(msg), 0, "%s: empty message", what);
  if (word) cr_expect(strstr(msg, word) != NULL, "%s: message '%s' should contain '%s'", what, msg, word);
}

/* Schedule and wait with a bound; returns the status (the schedule's error
 * when it refused) and the message in msg. */
static int run_bounded(mz_runtime *rt, mz_graph *g, mz_op *root, const char *policy, char *msg, size_t cap) {
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc) {
    snprintf(msg, cap, "%s", mz_runtime_last_error(rt));
    cr_expect_null(f, "no future on a refused schedule");
    return rc;
  }
  rc = mz_future_wait_for(f, WAIT_NS);
  cr_assert_neq(rc, MZ_ETIMEDOUT, "HANG: the future did not resolve in %llu s", WAIT_NS / 1000000000ull);
  snprintf(msg, cap, "%s", mz_future_message(f));
  mz_future_destroy(f);
  return rc;
}

/* An independent branch: a fresh buffer incremented once, which must hold
 * 1 afterwards. */
static void check_independent(mz_runtime *rt, mz_buffer *b) {
  int32_t out[8];
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 8; i++) cr_expect_eq(out[i], 1, "the independent branch did not complete: b[%d] = %d", i, out[i]);
}

/* stderr into a temporary file, for messages of a runtime that could not
 * be created (they have no object to live in). */
struct capture {
  int saved;
  char path[64];
};

static void capture_begin(struct capture *c) {
  snprintf(c->path, sizeof c->path, "/tmp/mz-badinput-XXXXXX");
  int fd = mkstemp(c->path);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  c->saved = dup(2);
  dup2(fd, 2);
  close(fd);
}

static void capture_end(struct capture *c, char *out, size_t cap) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  FILE *fp = fopen(c->path, "r");
  size_t n = fp ? fread(out, 1, cap - 1, fp) : 0;
  out[n] = 0;
  if (fp) fclose(fp);
  unlink(c->path);
}

/* Create a runtime from the environment (cfg NULL) or cfg, expecting code,
 * with the message captured from stderr (not quiet). */
static void expect_create_fails(const mz_runtime_config *cfg, int code, const char *word) {
  unsetenv("MZ_QUIET");
  struct capture c;
  char msg[2048];
  mz_runtime *rt = (mz_runtime *)1;
  capture_begin(&c);
  int rc = mz_runtime_create(cfg, &rt);
  capture_end(&c, msg, sizeof msg);
  if (rc == MZ_OK) mz_runtime_destroy(rt);
  cr_expect_eq(TRIED(rc), code, "got %s, want %s (%s)", mz_err_name(rc), mz_err_name(code), msg);
  cr_expect_null(rt, "*out is NULL on failure");
  expect_msg(msg, word, "mz_runtime_create");
  expect_msg(msg, mz_err_name(code), "mz_runtime_create");
}

/* ---- the report: k/n cases gave the documented error ---- */


__attribute__((destructor)) static void tally_write(void) {
  const char *path = getenv(TALLY_ENV);
  unsigned long n = atomic_load(&tried);
  if (!path || !n || getpid() == (pid_t)strtol(strrchr(path, '.') + 1, NULL, 10)) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0) return;
  char line[32];
  int len = snprintf(line, sizeof line, "%lu\n", n);
  ssize_t w = write(fd, line, (size_t)len); /* one short O_APPEND write: not interleaved */
  (void)w;
  close(fd);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  char path[96];
  snprintf(path, sizeof path, "%s/mz-badinput-tally.%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
  unlink(path);
  setenv(TALLY_ENV, path, 1);
}

static unsigned long tally_read(void) {
  const char *path = getenv(TALLY_ENV);
  unsigned long sum = atomic_load(&tried); /* cases run in this process (--no-fork) */
  FILE *fp = path ? fopen(path, "r") : NULL;
  unsigned long n;
  while (fp && fscanf(fp, "%lu", &n) == 1) sum += n;
  if (fp) fclose(fp);
  if (path) unlink(path);
  return sum;
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  size_t n = 0, ok = 0, crashes = 0, hangs = 0, skipped = 0, wrong = 0, leaks = 0;
  for (struct criterion_suite_stats *s = stats->suites; s; s = s->next) {
    if (strcmp(s->suite->name, "badinput")) continue;
    for (struct criterion_test_stats *t = s->tests; t; t = t->next) {
      if (t->test_status == CR_STATUS_SKIPPED) {
        skipped++;
        continue;
      }
      n++;
      if (t->timed_out) hangs++;
      else if (t->crashed || t->signal) crashes++;
      else if (t->test_status != CR_STATUS_PASSED) wrong++;
      else if (t->exit_code) leaks++;
      else ok++;
    }
  }
  printf("badinput: %zu/%zu cases gave the documented error, %zu crashes, %zu hangs", ok, n, crashes, hangs);
  if (skipped) printf(" (%zu skipped: hardware absent)", skipped);
  printf("\n");
  printf("BADINPUT tried=%lu crashes=%zu hangs=%zu leaks=%zu wrong=%zu\n", tally_read(), crashes, hangs, leaks, wrong);
  fflush(stdout);
}

/* ---- cycles ---- */

Test(badinput, cycle_self_edge, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, x), NULL);
  cr_assert_eq(mz_depend(g, a, a), MZ_OK, "the edge is only checked at mz_schedule");
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, a, NULL, msg, sizeof msg)), MZ_ECYCLE);
  expect_msg(msg, "cycle", "self edge");
  /* The graph stays usable for what is not on the cycle. */
  cr_expect_eq(run_bounded(rt, g, mz_apply(g, k, mz_value(g, ind), NULL), NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(badinput, cycle_of_two, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 8, NULL), *y = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, x), NULL), *b = mz_apply(g, k, mz_value(g, y), NULL);
  MZ_OK_OR_DIE(rt, mz_depend(g, a, b));
  MZ_OK_OR_DIE(rt, mz_depend(g, b, a));
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, mz_join(g, 2, (mz_op *[]){a, b}), NULL, msg, sizeof msg)), MZ_ECYCLE);
  expect_msg(msg, "cycle", "2-cycle");
  int32_t out[8];
  MZ_OK_OR_DIE(rt, mz_buffer_read(x, out, sizeof out));
  cr_expect_eq(out[0], 0, "nothing ran");
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(badinput, cycle_ring_of_100000, .timeout = 120) {
  enum { N = 100000 };
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  /* A chain through the buffer's hazards, closed by one explicit edge. */
  mz_op *first = mz_apply(g, k, mz_value(g, x), NULL), *last = first;
  for (int i = 1; i < N; i++) last = mz_apply(g, k, mz_unzip(g, last, 0), NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  MZ_OK_OR_DIE(rt, mz_depend(g, first, last));
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, last, NULL, msg, sizeof msg)), MZ_ECYCLE);
  expect_msg(msg, "cycle", "100,000-node ring");
  cr_expect_eq(run_bounded(rt, g, mz_apply(g, k, mz_value(g, ind), NULL), NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- handles ---- */

Test(badinput, null_handles, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_graph *g = NULL;
  mz_future *f = NULL;
  int32_t tmp[8];
  /* Calls with no object to hold a message: the code, and a text from the
   * accessor of the NULL handle. */
  cr_expect_eq(TRIED(mz_graph_create(NULL, &g)), MZ_EINVAL);
  cr_expect_eq(TRIED(mz_buffer_read(NULL, tmp, sizeof tmp)), MZ_EINVAL);
  cr_expect_eq(TRIED(mz_future_wait(NULL)), MZ_EINVAL);
  cr_expect_eq(TRIED(mz_schedule(NULL, NULL, NULL, &f)), MZ_EINVAL);
  cr_expect_eq(TRIED(mz_runtime_wait_idle(NULL)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error(NULL), "NULL", "mz_runtime_last_error(NULL)");
  expect_msg(mz_graph_message(NULL), "NULL", "mz_graph_message(NULL)");
  expect_msg(mz_future_message(NULL), "NULL", "mz_future_message(NULL)");
  /* With a runtime: its message. */
  cr_expect_eq(TRIED(mz_buffer_read(b, NULL, sizeof tmp)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error(rt), "NULL", "mz_buffer_read(b, NULL)");
  cr_expect_eq(TRIED(mz_kernel_create(rt, NULL, &k)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error(rt), "NULL", "mz_kernel_create(rt, NULL)");
  /* With a graph: its sticky message. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *e = mz_apply(g, k, NULL, NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "NULL", "mz_apply(g, k, NULL)");
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, e, NULL, msg, sizeof msg)), MZ_EINVAL);
  expect_msg(msg, "NULL", "mz_schedule after a NULL op");
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(badinput, foreign_handles, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1"), *rt2 = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_kernel *k2 = test_kernel(rt2, "inc2", "inout i32[] v", inc_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL), *b2 = test_buffer_1d(rt2, MZ_I32, 8, NULL);
  mz_graph *g, *g2;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_value(g, b2); /* a buffer of another runtime */
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "another runtime", "foreign buffer");
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k2, mz_value(g, b), NULL); /* a kernel of another runtime */
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "another runtime", "foreign kernel");
  mz_graph_destroy(g);
  /* An op of another graph (of another runtime) as the root. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  MZ_OK_OR_DIE(rt2, mz_graph_create(rt2, &g2));
  mz_op *a2 = mz_apply(g2, k2, mz_value(g2, b2), NULL);
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, a2, NULL, msg, sizeof msg)), MZ_EINVAL);
  expect_msg(msg, "another graph", "foreign root");
  /* A policy registered on rt2 only. */
  cr_expect_eq(TRIED(run_bounded(rt, g, mz_apply(g, k, mz_value(g, b), NULL), "not-here", msg, sizeof msg)), MZ_ENOENT);
  expect_msg(msg, "not-here", "foreign policy name");
  /* The other runtime is untouched. */
  cr_expect_eq(run_bounded(rt2, g2, a2, NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  check_independent(rt2, b2);
  mz_graph_destroy(g);
  mz_graph_destroy(g2);
  mz_buffer_release(b);
  mz_buffer_release(b2);
  mz_kernel_destroy(k);
  mz_kernel_destroy(k2);
  mz_runtime_destroy(rt);
  mz_runtime_destroy(rt2);
}

Test(badinput, wrong_kind_handles, .timeout = 60) {
  /* A handle of one kind cast to another: the tag in the first word says
   * no.  (Each object is larger than the tag, so reading it is safe.) */
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f = NULL;
  cr_expect_eq(TRIED(mz_schedule((mz_graph *)b, mz_value(g, b), NULL, &f)), MZ_EINVAL);
  cr_expect_null(mz_value((mz_graph *)k, b));
  cr_expect_eq(TRIED(mz_graph_status((mz_graph *)b)), MZ_EINVAL);
  expect_msg(mz_graph_message((mz_graph *)b), "not a live graph", "buffer as graph");
  cr_expect_eq(TRIED(mz_future_wait((mz_future *)g)), MZ_EINVAL);
  expect_msg(mz_future_message((mz_future *)g), "not a live future", "graph as future");
  cr_expect_eq(TRIED(mz_buffer_read((mz_buffer *)k, (int32_t[8]){0}, 32)), MZ_EINVAL);
  cr_expect_null(mz_buffer_retain((mz_buffer *)g));
  mz_buffer_release((mz_buffer *)g); /* a no-op, not a free */
  cr_expect_eq(TRIED(mz_runtime_wait_idle((mz_runtime *)b)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error((mz_runtime *)b), "not a live runtime", "buffer as runtime");
  mz_kernel_destroy((mz_kernel *)b); /* no-ops */
  mz_graph_destroy((mz_graph *)k);
  mz_future_destroy((mz_future *)b);
  /* As arguments of a live graph: sticky errors with messages. */
  mz_value(g, (mz_buffer *)k);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "not a live buffer", "kernel as buffer");
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, (mz_kernel *)b, mz_value(g, b), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "not a live kernel", "buffer as kernel");
  mz_graph_destroy(g);
  /* Everything still works. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  char msg[1024];
  cr_expect_eq(run_bounded(rt, g, mz_apply(g, k, mz_value(g, b), NULL), NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  check_independent(rt, b);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

static int gate_fn(const mz_call *c) {
  _Atomic int *gate = c->user;
  uint64_t end = test_now_ns() + WAIT_NS;
  while (!atomic_load(gate) && test_now_ns() < end) test_sleep_ms(1);
  return 0;
}

Test(badinput, destroyed_graph_with_run_in_flight, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int gate;
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate, NULL), NULL, &f));
  mz_graph_destroy(g); /* the run keeps the graph's memory alive */
  cr_expect_null(mz_value(g, b), "a builder on a destroyed graph");
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "destroyed", "destroyed graph");
  mz_future *f2 = (mz_future *)1;
  cr_expect_eq(TRIED(mz_schedule(g, NULL, NULL, &f2)), MZ_EINVAL);
  cr_expect_null(f2);
  mz_graph_destroy(g); /* twice: a no-op, not a double free */
  atomic_store(&gate, 1);
  cr_assert_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK, "the run in flight finishes");
  mz_future_destroy(f);
  mz_kernel_destroy(k);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(badinput, destroyed_kernel_still_used_by_a_graph, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, b), NULL);
  mz_kernel_destroy(k); /* g still holds it */
  mz_kernel_destroy(k); /* twice: a no-op */
  cr_expect_null(mz_kernel_name(k));
  mz_apply(g, k, mz_unzip(g, a, 0), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "not a live kernel", "destroyed kernel");
  mz_graph_destroy(g);
  /* What was built before the destruction still runs in a fresh graph?  No:
   * the kernel is gone for new graphs; the buffer is fine. */
  mz_kernel *k2 = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  char msg[1024];
  cr_expect_eq(run_bounded(rt, g, mz_apply(g, k2, mz_value(g, b), NULL), NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  check_independent(rt, b);
  mz_graph_destroy(g);
  mz_kernel_destroy(k2);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(badinput, destroyed_future_with_run_in_flight, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int gate;
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate, NULL), NULL, &f));
  mz_future_destroy(f); /* the run goes on and keeps its memory */
  cr_expect_eq(TRIED(mz_future_wait_for(f, 1000000)), MZ_EINVAL);
  cr_expect_eq(TRIED(mz_future_poll(f)), MZ_EINVAL);
  expect_msg(mz_future_message(f), "destroyed", "destroyed future");
  mz_future_destroy(f); /* twice: a no-op, not a double free */
  atomic_store(&gate, 1);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

static void *open_gate_later(void *arg) {
  test_sleep_ms(200);
  atomic_store((_Atomic int *)arg, 1);
  return NULL;
}

Test(badinput, future_wait_for_extreme_timeouts, .timeout = 60) {
  /* 0 polls; UINT64_MAX means forever, not an overflowed deadline that
   * times out at once. */
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int gate;
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate, NULL), NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, 0), MZ_ETIMEDOUT);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, open_gate_later, (void *)&gate), 0);
  int rc = mz_future_wait_for(f, UINT64_MAX);
  pthread_join(th, NULL);
  cr_expect_eq(rc, MZ_OK, "UINT64_MAX gave %s", mz_err_name(rc));
  expect_msg(mz_err_name(rc), "MZ_", "the code's name");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* ---- a buffer twice with conflicting directions ---- */

static int nop_fn(const mz_call *c) {
  (void)c;
  return 0;
}

static void conflicting(const char *params) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "twice", params, nop_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, x)}), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL, "%s: %s", params, mz_err_name(mz_graph_status(g)));
  expect_msg(mz_graph_message(g), "twice", params);
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, r, NULL, msg, sizeof msg)), MZ_EINVAL);
  expect_msg(msg, "twice", params);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(badinput, buffer_twice_in_and_out, .timeout = 60) { conflicting("in f32[] x, out f32[] y"); }
Test(badinput, buffer_twice_in_and_inout, .timeout = 60) { conflicting("in f32[] x, inout f32[] y"); }
Test(badinput, buffer_twice_out_and_out, .timeout = 60) { conflicting("out f32[] x, out f32[] y"); }

/* ---- sizes and shapes ---- */

Test(badinput, zero_size_buffer, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *b = (mz_buffer *)1;
  cr_expect_eq(TRIED(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){0}, NULL, &b)), MZ_EINVAL);
  cr_expect_null(b);
  expect_msg(mz_runtime_last_error(rt), "zero", "zero-size 1-D buffer");
  cr_expect_eq(TRIED(mz_buffer_create(rt, MZ_F32, 3, (size_t[]){4, 0, 2}, NULL, &b)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error(rt), "zero", "zero-size 3-D buffer");
  /* A zero-byte read or write of a real buffer. */
  b = test_buffer_1d(rt, MZ_F32, 4, NULL);
  float tmp[4];
  cr_expect_eq(TRIED(mz_buffer_read(b, tmp, 0)), MZ_EINVAL);
  expect_msg(mz_runtime_last_error(rt), "bytes", "zero-byte read");
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(badinput, shape_wrong_element_type, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y", nop_fn, NULL);
  mz_buffer *xi = test_buffer_1d(rt, MZ_I32, 8, NULL), *y = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f32(g, 1), mz_value(g, xi), mz_value(g, y)}), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_ESHAPE);
  expect_msg(mz_graph_message(g), "'x'", "i32 buffer for f32[] x");
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, r, NULL, msg, sizeof msg)), MZ_ESHAPE);
  expect_msg(msg, "i32", "mz_schedule");
  mz_graph_destroy(g);
  mz_buffer_release(xi);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(badinput, shape_scalar_for_buffer, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y", nop_fn, NULL);
  mz_buffer *y = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f32(g, 1), mz_f32(g, 2), mz_value(g, y)}), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_ESHAPE);
  expect_msg(mz_graph_message(g), "scalar", "scalar for a buffer");
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, y), mz_value(g, y), mz_value(g, y)}), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_ESHAPE);
  expect_msg(mz_graph_message(g), "'a'", "buffer for a scalar");
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(badinput, argument_count_mismatch, .timeout = 60) {
  /* Counts are MZ_EINVAL (documented in graph.h): the list, not a shape, is wrong. */
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y", nop_fn, NULL);
  mz_buffer *y = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 1), mz_value(g, y)}), NULL);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_EINVAL);
  expect_msg(mz_graph_message(g), "arguments", "two arguments for three");
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* A host node that counts the scalars it gets, each 1. */
static int count_args_fn(const mz_call *c) {
  unsigned *seen = c->user;
  for (unsigned i = 0; i < c->nargs; i++) *seen += c->args[i].i32 == 1;
  return 0;
}

/* A task names at most 65,535 parameters and buffers (its counts are 16
 * bits): a kernel, a host node and a partition beyond that are refused
 * with MZ_ERANGE, and a graph of tasks within it still runs. */
Test(badinput, task_with_more_parameters_than_a_task_holds, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  const unsigned over = 65536;
  size_t cap = (size_t)over * 12 + 16, len = 0;
  char *params = malloc(cap);
  cr_assert_not_null(params);
  for (unsigned i = 0; i < over; i++) len += (size_t)snprintf(params + len, cap - len, "%si32 a%u", i ? ", " : "", i);
  mz_kernel *k = (mz_kernel *)1;
  cr_expect_eq(TRIED(mz_kernel_create(rt, &(mz_kernel_spec){.name = "wide", .params = params, .cpu = {.fn = nop_fn}}, &k)),
               MZ_ERANGE);
  cr_expect_null(k);
  expect_msg(mz_runtime_last_error(rt), "at most 65535", "a kernel of 65,536 parameters");
  free(params);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op **sc = malloc(over * sizeof *sc);
  cr_assert_not_null(sc);
  mz_op *one = mz_i32(g, 1);
  for (unsigned i = 0; i < over; i++) sc[i] = one;
  mz_host(g, nop_fn, NULL, mz_zip(g, over, sc));
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_ERANGE);
  expect_msg(mz_graph_message(g), "at most 65535", "a host node on 65,536 scalars");
  mz_graph_destroy(g);
  mz_buffer *b = test_buffer_1d(rt, MZ_U8, over, NULL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_partition(g, mz_value(g, b), over - 1);
  cr_expect_eq(TRIED(mz_graph_status(g)), MZ_ERANGE);
  expect_msg(mz_graph_message(g), "at most 65534", "a partition into 65,535 tiles");
  mz_graph_destroy(g);
  /* Just within: a host node on 65,535 scalars runs, and sees them all. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  unsigned seen = 0;
  one = mz_i32(g, 1);
  for (unsigned i = 0; i < over - 1; i++) sc[i] = one;
  mz_op *h = mz_host(g, count_args_fn, &seen, mz_zip(g, over - 1, sc));
  cr_expect_eq(mz_graph_status(g), MZ_OK);
  char msg[256];
  cr_expect_eq(run_bounded(rt, g, h, NULL, msg, sizeof msg), MZ_OK, "%s", msg);
  cr_expect_eq(seen, over - 1);
  mz_graph_destroy(g);
  free(sc);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(badinput, buffer_larger_than_every_device, .timeout = 60) {
  /* Refused at creation, before any allocation is tried. */
  mz_runtime *rt = test_runtime("cpu:1");
  mz_device_info info;
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  if (!info.memory) cr_skip_test("hwloc does not know this machine's memory size");
  mz_buffer *b = (mz_buffer *)1;
  size_t n = (size_t)(info.memory / 8) * 2; /* twice the host's memory in f64 */
  cr_expect_eq(TRIED(mz_buffer_create(rt, MZ_F64, 1, (size_t[]){n}, NULL, &b)), MZ_ENOMEM);
  cr_expect_null(b);
  expect_msg(mz_runtime_last_error(rt), "larger than", "huge buffer");
  mz_buffer *ok = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_buffer_release(ok);
  mz_runtime_destroy(rt);
}

Test(badinput, buffer_larger_than_device_memory_at_run_time, .timeout = 60) {
  /* Larger than the only device that can run the kernel (a simulated GPU
   * with 1 MiB): the node fails with MZ_ENOMEM when it is placed; an
   * independent branch on the CPU finishes. */
  mz_runtime *rt = test_runtime("cpu:1;sim:gpu@mem=1M");
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "gpu_only", .params = "inout f32[] v"}, &k));
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *big = test_buffer_1d(rt, MZ_F32, 1 << 20, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, big), NULL);
  mz_op *i = mz_apply(g, inc, mz_value(g, ind), NULL);
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, mz_join(g, 2, (mz_op *[]){a, i}), NULL, msg, sizeof msg)), MZ_ENOMEM);
  expect_msg(msg, "memory", "4 MiB on a 1 MiB device");
  check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(big);
  mz_buffer_release(ind);
  mz_kernel_destroy(k);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

/* ---- devices and kernels ---- */

Test(badinput, kernel_without_implementation_for_any_device, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "cl_only", .params = "inout f32[] v",
                                                           .opencl = {.format = MZ_CODE_SOURCE, .data = "__kernel void cl_only(__global float *v) {}"}},
                                    &k));
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, x), NULL);
  mz_op *i = mz_apply(g, inc, mz_value(g, ind), NULL);
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, mz_join(g, 2, (mz_op *[]){a, i}), NULL, msg, sizeof msg)), MZ_ENODEV);
  expect_msg(msg, "cl_only", "no implementation");
  check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(k);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

Test(badinput, opencl_kernel_that_does_not_build, .timeout = 120) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1,opencl:0", .quiet = true}, &rt);
  if (rc != MZ_OK)
    cr_skip_test("needs an OpenCL device (maize built with OpenCL, PoCL with POCL_DEVICES=\"pthread pthread\"): %s",
                 mz_err_name(rc));
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "broken", .params = "inout f32[] v",
                                                           .opencl = {.format = MZ_CODE_SOURCE,
                                                                      .data = "__kernel void broken(__global float *v)\n"
                                                                              "{ v[0] = undeclared_badinput_name; }\n"}},
                                    &k));
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_value(g, x), NULL);
  mz_op *i = mz_apply(g, inc, mz_value(g, ind), NULL);
  char msg[1024];
  cr_expect_eq(TRIED(run_bounded(rt, g, mz_join(g, 2, (mz_op *[]){a, i}), NULL, msg, sizeof msg)), MZ_EBUILD);
  expect_msg(msg, "undeclared_badinput_name", "the build log");
  check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(k);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

static _Atomic int dep_ran;

static int dep_fn(const mz_call *c) {
  (void)c;
  atomic_fetch_add(&dep_ran, 1);
  return 0;
}

Test(badinput, kernel_fails_at_run_time, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *bad = test_kernel(rt, "explode", "inout i32[] v", fail_fn, NULL);
  mz_kernel *dep = test_kernel(rt, "dependent", "inout i32[] v", dep_fn, NULL);
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_unzip(g, mz_apply(g, bad, mz_value(g, x), NULL), 0);
  mz_op *d = mz_unzip(g, mz_apply(g, dep, a, NULL), 0);
  mz_op *i = mz_apply(g, inc, mz_value(g, ind), NULL);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, 2, (mz_op *[]){d, i}), NULL, &f));
  cr_assert_neq(mz_future_wait_for(f, WAIT_NS), MZ_ETIMEDOUT, "HANG");
  cr_expect_eq(TRIED(mz_future_status(f)), MZ_EKERNEL);
  expect_msg(mz_future_message(f), "explode", "the failing node");
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.failed, 2, "the failed node and its canceled dependent");
  cr_expect_eq(atomic_load(&dep_ran), 0, "a dependent of a failed node never runs");
  int32_t out[8];
  cr_expect_eq(TRIED(mz_buffer_read(x, out, sizeof out)), MZ_ECANCELED, "the dependent (x's last writer) was canceled");
  expect_msg(mz_runtime_last_error(rt), "failed", "reading the canceled result");
  check_independent(rt, ind);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(bad);
  mz_kernel_destroy(dep);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

/* ---- policies ---- */

static int select_nowhere(void *s, const mz_sched *sc, mz_task *t, bool ready) {
  (void)s, (void)t, (void)ready;
  return (int)mz_sched_queue_count(sc) + 5;
}

static int select_queue0(void *s, const mz_sched *sc, mz_task *t, bool ready) {
  (void)s, (void)sc, (void)t, (void)ready;
  return 0;
}

static int select_nothing(void *s, const mz_sched *sc, mz_task *t, bool ready) {
  (void)s, (void)sc, (void)t, (void)ready;
  return MZ_POLICY_DEFER;
}

/* Places the nodes without predecessors only; has no select. */
static int plan_roots_only(void *s, const mz_sched *sc, mz_task *const tasks[], size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++)
    if (!mz_task_pred_count(tasks[i])) cr_assert_eq(mz_task_set_queue(sc, tasks[i], 0), MZ_OK);
  return MZ_OK;
}

/* Plans a queue that does not exist: the setter refuses, so the node is
 * left to select, which picks queue 0 (the CPU) for a node it cannot run. */
static int plan_out_of_range(void *s, const mz_sched *sc, mz_task *const tasks[], size_t n) {
  (void)s;
  for (size_t i = 0; i < n; i++) cr_expect_eq(TRIED(mz_task_set_queue(sc, tasks[i], 1u << 30)), MZ_ERANGE);
  return MZ_OK;
}

/* Runs policy on "cpu:1;sim:gpu" (queue 0: the CPU, queue 1: a sim GPU)
 * with a chain: a CPU kernel, then a sim-only kernel, then a CPU kernel; and
 * an independent CPU node.  Expects code with word in the message. */
static void policy_case(const struct mz_policy_ops *ops, int code, const char *word, bool independent_runs) {
  mz_runtime *rt = test_runtime("cpu:1;sim:gpu");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, ops));
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_kernel *gpu = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "gpu_only", .params = "inout i32[] v"}, &gpu));
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 8, NULL), *ind = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *c = mz_unzip(g, mz_apply(g, inc, mz_value(g, x), NULL), 0);
  c = mz_unzip(g, mz_apply(g, gpu, c, NULL), 0);
  c = mz_unzip(g, mz_apply(g, inc, c, NULL), 0);
  mz_op *i = mz_apply(g, inc, mz_value(g, ind), NULL);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, 2, (mz_op *[]){c, i}), ops->name, &f));
  int rc = mz_future_wait_for(f, WAIT_NS);
  cr_assert_neq(rc, MZ_ETIMEDOUT, "HANG: policy '%s' left the future unresolved", ops->name);
  cr_expect_eq(TRIED(rc), code, "policy '%s': %s (%s)", ops->name, mz_err_name(rc), mz_future_message(f));
  expect_msg(mz_future_message(f), word, ops->name);
  mz_future_destroy(f);
  /* The independent node finished, unless the policy placed nothing. */
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  if (independent_runs) check_independent(rt, ind);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(ind);
  mz_kernel_destroy(inc);
  mz_kernel_destroy(gpu);
  mz_runtime_destroy(rt);
}

Test(badinput, policy_queue_that_does_not_exist, .timeout = 60) {
  policy_case(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "nowhere", .select = select_nowhere}, MZ_EPOLICY,
              "does not exist", false);
}

Test(badinput, policy_queue_that_cannot_run_the_node, .timeout = 60) {
  policy_case(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "cpu-only", .select = select_queue0}, MZ_EPOLICY,
              "cannot run", true);
}

Test(badinput, policy_plans_a_queue_out_of_range, .timeout = 60) {
  policy_case(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "far", .plan = plan_out_of_range,
                                      .select = select_queue0},
              MZ_EPOLICY, "cannot run", true);
}

Test(badinput, policy_that_chooses_nothing, .timeout = 60) {
  policy_case(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "never", .select = select_nothing}, MZ_EPOLICY,
              "deferred", false);
}

Test(badinput, policy_that_never_dispatches_dependents, .timeout = 60) {
  policy_case(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "roots-only", .plan = plan_roots_only},
              MZ_EPOLICY, "unplaced", true);
}

/* ---- blocking calls from runtime threads ---- */

struct inside {
  mz_runtime *rt;
  mz_future *other;  /* a run still in flight */
  mz_buffer *buf;
  int wait_rc, read_rc, idle_rc;
  char wait_msg[256], read_msg[256], idle_msg[256], destroy_msg[256];
  _Atomic int done;
};

static void blocking_calls(struct inside *in) {
  int32_t tmp[8];
  in->wait_rc = mz_future_wait(in->other);
  snprintf(in->wait_msg, sizeof in->wait_msg, "%s", mz_runtime_last_error(in->rt));
  in->read_rc = mz_buffer_read(in->buf, tmp, sizeof tmp);
  snprintf(in->read_msg, sizeof in->read_msg, "%s", mz_runtime_last_error(in->rt));
  in->idle_rc = mz_runtime_wait_idle(in->rt);
  snprintf(in->idle_msg, sizeof in->idle_msg, "%s", mz_runtime_last_error(in->rt));
  mz_runtime_destroy(in->rt); /* refused: returns, the runtime lives on */
  snprintf(in->destroy_msg, sizeof in->destroy_msg, "%s", mz_runtime_last_error(in->rt));
  atomic_store(&in->done, 1);
}

static int blocking_kernel(const mz_call *c) {
  blocking_calls(c->user);
  return 0;
}

static void blocking_cb(mz_future *f, int status, void *user) {
  (void)f, (void)status;
  blocking_calls(user);
}

static void check_refused(struct inside *in, const char *where) {
  cr_assert(atomic_load(&in->done), "%s: the blocking calls never returned", where);
  cr_expect_eq(TRIED(in->wait_rc), MZ_EDEADLK, "%s: mz_future_wait gave %s", where, mz_err_name(in->wait_rc));
  expect_msg(in->wait_msg, "mz_future_wait", where);
  cr_expect_eq(TRIED(in->read_rc), MZ_EDEADLK, "%s: mz_buffer_read gave %s", where, mz_err_name(in->read_rc));
  expect_msg(in->read_msg, "mz_buffer_read", where);
  cr_expect_eq(TRIED(in->idle_rc), MZ_EDEADLK, "%s: mz_runtime_wait_idle gave %s", where, mz_err_name(in->idle_rc));
  expect_msg(in->idle_msg, "mz_runtime_wait_idle", where);
  expect_msg(in->destroy_msg, "mz_runtime_destroy", where);
}

Test(badinput, blocking_calls_from_a_task, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int gate;
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *blocked, *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate, NULL), NULL, &blocked));
  struct inside in = {.rt = rt, .other = blocked, .buf = b};
  mz_kernel *k = test_kernel(rt, "blocker", "inout i32[] v", blocking_kernel, &in);
  mz_buffer *v = test_buffer_1d(rt, MZ_I32, 8, NULL);
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, k, mz_value(g, v), NULL), NULL, &f));
  int rc = mz_future_wait_for(f, WAIT_NS);
  atomic_store(&gate, 1);
  cr_assert_neq(rc, MZ_ETIMEDOUT, "HANG: a blocking call in a task deadlocked");
  cr_expect_eq(rc, MZ_OK);
  check_refused(&in, "in a task");
  cr_expect_eq(mz_future_wait_for(blocked, WAIT_NS), MZ_OK);
  mz_future_destroy(f);
  mz_future_destroy(blocked);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(b);
  mz_buffer_release(v);
  mz_runtime_destroy(rt);
}

Test(badinput, blocking_calls_from_a_completion_callback, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int gate, gate2;
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *blocked, *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate, NULL), NULL, &blocked));
  /* A callback that runs on a runtime thread: registered before the end. */
  struct inside in = {.rt = rt, .other = blocked, .buf = b};
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gate_fn, (void *)&gate2, NULL), NULL, &f));
  MZ_OK_OR_DIE(rt, mz_future_then(f, blocking_cb, &in));
  atomic_store(&gate2, 1);
  bool met = test_wait_flag(&in.done, 20000);
  if (!met) atomic_store(&gate, 1);
  cr_assert(met, "HANG: a blocking call in a completion callback deadlocked");
  check_refused(&in, "in a callback on a runtime thread");
  /* A callback run at once on this thread (the future has finished) is
   * held to the same rule. */
  struct inside in2 = {.rt = rt, .other = blocked, .buf = b};
  mz_future *f2;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_value(g, b), NULL, &f2));
  cr_assert_eq(mz_future_wait_for(f2, WAIT_NS), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_future_then(f2, blocking_cb, &in2));
  check_refused(&in2, "in a callback run at once");
  atomic_store(&gate, 1);
  cr_expect_eq(mz_future_wait_for(blocked, WAIT_NS), MZ_OK);
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK);
  mz_future_destroy(f);
  mz_future_destroy(f2);
  mz_future_destroy(blocked);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* ---- the environment ---- */

static void clean_env(void) {
  unsetenv("MZ_DEVICES");
  unsetenv("MZ_POLICY");
  unsetenv("MZ_OPENCL_QUEUES");
  unsetenv("MZ_CUDA_STREAMS");
  unsetenv("MZ_WATCHDOG_S");
  unsetenv("MZ_SPIN_US");
  unsetenv("MZ_WAIT_SPIN_US");
}

/* Each case sets one variable, checks, and puts the environment back
 * (Criterion runs each test in its own process, but the cases must not
 * depend on that). */
static void env_case(const char *name, const char *value, const char *devices, int code, const char *word) {
  clean_env();
  const char *old = getenv(name);
  char *saved = old ? strdup(old) : NULL;
  if (devices) setenv("MZ_DEVICES", devices, 1);
  setenv(name, value, 1);
  expect_create_fails(NULL, code, word);
  if (saved) setenv(name, saved, 1);
  else unsetenv(name);
  free(saved);
  clean_env();
}

Test(badinput, env_devices_cuda_99, .timeout = 60) { env_case("MZ_DEVICES", "cuda:99", NULL, MZ_ENODEV, "cuda"); }
Test(badinput, env_devices_bogus, .timeout = 60) { env_case("MZ_DEVICES", "bogus", NULL, MZ_ENOENT, "bogus"); }
Test(badinput, env_devices_cpu_zero, .timeout = 60) { env_case("MZ_DEVICES", "cpu:0", NULL, MZ_EINVAL, "cpu:0"); }
Test(badinput, env_devices_bad_sim, .timeout = 60) {
  env_case("MZ_DEVICES", "sim:gpu@mem=lots", NULL, MZ_EINVAL, "mem");
}
/* More queues than a node can name: 600 simulated devices of 64 queues. */
Test(badinput, env_devices_sim_more_queues_than_a_node_names, .timeout = 60) {
  env_case("MZ_DEVICES", "sim:gpu*600@queues=64", NULL, MZ_ENOMEM, "32767 queues");
}

Test(badinput, env_policy_nope, .timeout = 60) { env_case("MZ_POLICY", "nope", "cpu:1", MZ_ENOENT, "nope"); }
Test(badinput, env_opencl_queues_abc, .timeout = 60) {
  env_case("MZ_OPENCL_QUEUES", "abc", "cpu:1", MZ_EINVAL, "MZ_OPENCL_QUEUES");
}
Test(badinput, env_wait_spin_negative, .timeout = 60) {
  env_case("MZ_WAIT_SPIN_US", "-5", "cpu:1", MZ_EINVAL, "MZ_WAIT_SPIN_US");
}
Test(badinput, env_wait_spin_not_a_number, .timeout = 60) {
  env_case("MZ_WAIT_SPIN_US", "5us", "cpu:1", MZ_EINVAL, "MZ_WAIT_SPIN_US");
}
Test(badinput, env_cuda_streams_zero, .timeout = 60) {
  env_case("MZ_CUDA_STREAMS", "0", "cpu:1", MZ_EINVAL, "MZ_CUDA_STREAMS");
}
Test(badinput, env_watchdog_not_a_number, .timeout = 60) {
  env_case("MZ_WATCHDOG_S", "soon", "cpu:1", MZ_EINVAL, "MZ_WATCHDOG_S");
}
Test(badinput, config_bad_watchdog, .timeout = 60) {
  clean_env();
  expect_create_fails(&(mz_runtime_config){.devices = "cpu:1", .watchdog_s = -1}, MZ_EINVAL, "watchdog");
}
