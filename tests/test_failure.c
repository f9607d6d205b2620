/* test_failure: a failing op and what it takes down with it.
 *
 * Checks that a CPU kernel returning MZ_EKERNEL fails its run with that
 * code; that its dependents are canceled (their kernels never run, the
 * counters say so) and counted as failed; that an independent branch of the
 * same run finishes with the right result; that the future's message names
 * the failing node; that other codes and positive returns are reported
 * (a positive return becomes MZ_EKERNEL); that a failing host node cancels
 * its dependents the same way; that mz_buffer_read of a buffer whose writer
 * failed returns the error; that a later run depending on a failed op is
 * canceled, not run; and that mz_buffer_write clears the failure. */
#include "common.h"

static _Atomic int fail_calls, dep_calls, ind_calls;

static int fail_fn(const mz_call *c) {
  atomic_fetch_add(&fail_calls, 1);
  int32_t *v = c->args[0].p;
  v[0] = -1;
  return c->user ? *(const int *)c->user : MZ_EKERNEL;
}

/* v[i] += 1, counting calls in *user. */
static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

struct fixture {
  mz_runtime *rt;
  mz_kernel *fail, *dep, *ind;
};

static struct fixture setup(const char *devices, const int *fail_code) {
  struct fixture fx;
  fx.rt = test_runtime(devices);
  fx.fail = test_kernel(fx.rt, "explode", "inout i32[] v", fail_fn, (void *)fail_code);
  fx.dep = test_kernel(fx.rt, "dependent", "inout i32[] v", inc_fn, &dep_calls);
  fx.ind = test_kernel(fx.rt, "independent", "inout i32[] v", inc_fn, &ind_calls);
  return fx;
}

static void teardown(struct fixture *fx) {
  mz_kernel_destroy(fx->fail);
  mz_kernel_destroy(fx->dep);
  mz_kernel_destroy(fx->ind);
  mz_runtime_destroy(fx->rt);
}

static void check_failing_run(const char *devices, const char *policy, const int *code, int want) {
  atomic_store(&fail_calls, 0);
  atomic_store(&dep_calls, 0);
  atomic_store(&ind_calls, 0);
  struct fixture fx = setup(devices, code);
  enum { N = 64, CHAIN = 4, IND = 6 };
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL), *z = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_buffer *w = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  /* y: explode, then a chain of dependents.  w: explode alone.  z: an
   * independent chain. */
  mz_op *ry = mz_unzip(g, mz_apply(g, fx.fail, mz_value(g, y), NULL), 0);
  for (int i = 0; i < CHAIN; i++) ry = mz_unzip(g, mz_apply(g, fx.dep, ry, NULL), 0);
  mz_op *rw = mz_unzip(g, mz_apply(g, fx.fail, mz_value(g, w), NULL), 0);
  mz_op *rz = mz_value(g, z);
  for (int i = 0; i < IND; i++) rz = mz_unzip(g, mz_apply(g, fx.ind, rz, NULL), 0);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g, mz_join(g, 3, (mz_op *[]){ry, rz, rw}), policy, &f));
  int st = mz_future_wait(f);
  cr_expect_eq(st, want, "%s/%s: the run failed with %s", devices, policy, mz_err_name(st));
  cr_expect_eq(mz_future_status(f), want);
  const char *msg = mz_future_message(f);
  cr_expect(strstr(msg, "explode"), "the message names the failing node: %s", msg);
  cr_expect(strstr(msg, "node"), "%s", msg);
  cr_expect(strstr(msg, mz_strerror(want)), "the message says why: %s", msg);
  cr_expect_eq(atomic_load(&fail_calls), 2);
  cr_expect_eq(atomic_load(&dep_calls), 0, "dependents of a failed node never run");
  cr_expect_eq(atomic_load(&ind_calls), IND, "the independent branch finished");
  mz_run_stats s;
  MZ_OK_OR_DIE(fx.rt, mz_future_stats(f, &s));
  cr_expect_eq(s.failed, 2 + CHAIN, "failed %llu", (unsigned long long)s.failed);
  cr_expect_eq(s.ops, 2 + IND, "ops %llu (kernels that ran)", (unsigned long long)s.ops);
  int32_t out[N];
  MZ_OK_OR_DIE(fx.rt, mz_buffer_read(z, out, sizeof out));
  for (int i = 0; i < N; i++) cr_expect_eq(out[i], IND, "independent result z[%d]", i);
  int rc = mz_buffer_read(w, out, sizeof out);
  cr_expect_eq(rc, want, "reading a buffer whose writer failed: %s", mz_err_name(rc));
  cr_expect(strstr(mz_runtime_last_error(fx.rt), "failed"), "%s", mz_runtime_last_error(fx.rt));
  rc = mz_buffer_read(y, out, sizeof out);
  cr_expect_lt(rc, 0, "reading a buffer whose last writer was canceled: %s", mz_err_name(rc));

  /* A later run that needs a failed op's result is canceled. */
  mz_op *after = mz_unzip(g, mz_apply(g, fx.dep, rw, NULL), 0);
  mz_future *f2;
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g, after, policy, &f2));
  cr_expect_eq(mz_future_wait(f2), MZ_ECANCELED);
  cr_expect_eq(atomic_load(&dep_calls), 0);
  mz_future_destroy(f2);

  /* mz_buffer_write replaces the data and clears the failure. */
  int32_t fresh[N] = {0};
  MZ_OK_OR_DIE(fx.rt, mz_buffer_write(w, fresh, sizeof fresh));
  MZ_OK_OR_DIE(fx.rt, mz_buffer_read(w, out, sizeof out));
  mz_graph *g2;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g2));
  cr_expect_eq(test_run(g2, mz_apply(g2, fx.dep, mz_value(g2, w), NULL), policy, NULL), MZ_OK);
  MZ_OK_OR_DIE(fx.rt, mz_buffer_read(w, out, sizeof out));
  cr_expect_eq(out[0], 1);
  cr_expect_eq(atomic_load(&dep_calls), 1);
  mz_graph_destroy(g2);

  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_buffer_release(z);
  mz_buffer_release(w);
  teardown(&fx);
}

Test(failure, kernel_failure_eager_2, .timeout = 30) { check_failing_run("cpu:2", "eager", NULL, MZ_EKERNEL); }
Test(failure, kernel_failure_round_robin_2, .timeout = 30) { check_failing_run("cpu:2", "round-robin", NULL, MZ_EKERNEL); }
Test(failure, kernel_failure_single_1, .timeout = 30) { check_failing_run("cpu:1", "single", NULL, MZ_EKERNEL); }

Test(failure, other_codes, .timeout = 30) {
  static const int enomem = MZ_ENOMEM, positive = 3;
  /* Any code a kernel returns is MZ_EKERNEL, MZ_E* ones too. */
  check_failing_run("cpu:2", "eager", &enomem, MZ_EKERNEL);
  check_failing_run("cpu:2", "eager", &positive, MZ_EKERNEL);
}

/* ---- host nodes ---- */

static int host_fail(const mz_call *c) {
  (void)c;
  atomic_fetch_add(&fail_calls, 1);
  return MZ_EIO;
}

Test(failure, host_node_failure, .timeout = 30) {
  struct fixture fx = setup("cpu:2", NULL);
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, 8, NULL), *z = test_buffer_1d(fx.rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  mz_op *h = mz_host(g, host_fail, NULL, mz_value(g, y));
  mz_op *d = mz_apply(g, fx.dep, mz_unzip(g, h, 0), NULL);
  mz_op *i = mz_apply(g, fx.ind, mz_value(g, z), NULL);
  mz_future *f;
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g, mz_join(g, 2, (mz_op *[]){d, i}), NULL, &f));
  cr_expect_eq(mz_future_wait(f), MZ_EKERNEL);
  cr_expect(strstr(mz_future_message(f), "host"), "%s", mz_future_message(f));
  cr_expect(strstr(mz_future_message(f), "MZ_EIO"), "%s", mz_future_message(f));
  cr_expect_eq(atomic_load(&dep_calls), 0);
  cr_expect_eq(atomic_load(&ind_calls), 1);
  int32_t out[8];
  /* y's last writer is the canceled dependent. */
  cr_expect_eq(mz_buffer_read(y, out, sizeof out), MZ_ECANCELED);
  MZ_OK_OR_DIE(fx.rt, mz_buffer_read(z, out, sizeof out));
  cr_expect_eq(out[7], 1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_buffer_release(z);
  teardown(&fx);
}

Test(failure, failure_in_a_wide_graph_every_future_resolves, .timeout = 30) {
  /* Many runs at once, each with a failure somewhere: every future
   * resolves with the failure, and the independent work is all done. */
  atomic_store(&ind_calls, 0);
  struct fixture fx = setup("cpu:2", NULL);
  enum { RUNS = 20 };
  mz_buffer *bufs[RUNS][2];
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  mz_future *fs[RUNS];
  for (int r = 0; r < RUNS; r++) {
    bufs[r][0] = test_buffer_1d(fx.rt, MZ_I32, 16, NULL);
    bufs[r][1] = test_buffer_1d(fx.rt, MZ_I32, 16, NULL);
    mz_op *a = mz_value(g, bufs[r][0]);
    for (int i = 0; i < 3; i++) a = mz_unzip(g, mz_apply(g, i == r % 3 ? fx.fail : fx.dep, a, NULL), 0);
    mz_op *b = mz_unzip(g, mz_apply(g, fx.ind, mz_value(g, bufs[r][1]), NULL), 0);
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g, mz_join(g, 2, (mz_op *[]){a, b}), r % 2 ? "eager" : "round-robin", &fs[r]));
  }
  for (int r = 0; r < RUNS; r++) {
    cr_expect_eq(mz_future_wait_for(fs[r], 10000000000ull), MZ_EKERNEL, "run %d", r);
    mz_future_destroy(fs[r]);
  }
  cr_expect_eq(atomic_load(&ind_calls), RUNS);
  for (int r = 0; r < RUNS; r++) {
    int32_t out[16];
    MZ_OK_OR_DIE(fx.rt, mz_buffer_read(bufs[r][1], out, sizeof out));
    cr_expect_eq(out[0], 1);
    mz_buffer_release(bufs[r][0]);
    mz_buffer_release(bufs[r][1]);
  }
  mz_graph_destroy(g);
  teardown(&fx);
}
