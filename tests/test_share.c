/* Nodes shared among the CPU workers (eager and ws, nodes only the CPU can
 * run): each worker's run-next slot and deque, stealing, the injection
 * list, its chunks and a fan-out wider than one worker's deque, failures,
 * runs that wait on runs in flight, and re-runs.  Every test checks the
 * values against a serial reference and the run's counts. */
#include "common.h"

TestSuite(share, .timeout = 300);

static const char *const policies[] = {"eager", "ws"};

/* out[i] = i * 3 + 1, through the kernel's scalar argument. */
static int put_fn(const mz_call *c) {
  int32_t *out = c->args[0].p;
  int64_t i = c->args[1].i64;
  out[i] = (int32_t)(i * 3 + 1);
  return 0;
}

static void check_stats(mz_future *f, uint64_t ops, const char *pol) {
  mz_run_stats st;
  MZ_OK_OR_DIE(NULL, mz_future_stats(f, &st));
  cr_assert_eq(st.ops, ops, "%s: %llu ops ran, %llu expected", pol, (unsigned long long)st.ops,
               (unsigned long long)ops);
  cr_assert_eq(st.batches, ops, "%s: %llu batches for %llu CPU nodes", pol, (unsigned long long)st.batches,
               (unsigned long long)ops);
  cr_assert_eq(st.failed, 0, "%s: %llu nodes failed", pol, (unsigned long long)st.failed);
}

/* Independent nodes from the scheduling thread: the injection list,
 * taken in chunks, then stolen.  Every node ran once, on a CPU queue. */
Test(share, independent_nodes_all_run_once) {
  enum { N = 20000 };
  mz_runtime *rt = test_runtime_timed("cpu:2");
  mz_kernel *k = test_kernel(rt, "put", "inout i32[] out, i64 i", put_fn, NULL);
  /* N nodes, each writing its own one-element buffer (one buffer for all
   * would order them). */
  for (unsigned p = 0; p < 2; p++) {
    mz_buffer **bufs = malloc(N * sizeof *bufs);
    mz_op **ops = malloc(N * sizeof *ops);
    cr_assert(bufs && ops);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    for (size_t i = 0; i < N; i++) {
      bufs[i] = test_buffer_1d(rt, MZ_I32, 1, NULL);
      ops[i] = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_value(g, bufs[i]), mz_i64(g, 0)}), NULL);
    }
    mz_future *f;
    cr_assert_eq(test_run(g, mz_join(g, N, ops), policies[p], &f), MZ_OK, "%s: %s", policies[p],
                 mz_future_message(f));
    check_stats(f, N, policies[p]);
    const struct mz_node_timing *tm = NULL;
    size_t nt = 0;
    MZ_OK_OR_DIE(rt, mz_future_timings(f, &tm, &nt));
    cr_assert_eq(nt, N);
    for (size_t i = 0; i < nt; i++)
      cr_assert(tm[i].queue >= 0 && tm[i].queue < 2, "%s: node ran on queue %d", policies[p], tm[i].queue);
    mz_future_destroy(f);
    for (size_t i = 0; i < N; i++) {
      int32_t x = -1;
      MZ_OK_OR_DIE(rt, mz_buffer_read(bufs[i], &x, sizeof x));
      cr_assert_eq(x, 1, "%s: node %zu wrote %d", policies[p], i, x);
      mz_buffer_release(bufs[i]);
    }
    free(bufs);
    free(ops);
    mz_graph_destroy(g);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* v[0] += 1, then each reader r: out[r] = v[0] * 2 + r. */
static int incr_fn(const mz_call *c) {
  int64_t *v = c->args[0].p;
  v[0] += 1;
  return 0;
}
static int read_fn(const mz_call *c) {
  const int64_t *v = c->args[0].p;
  int64_t *out = c->args[1].p;
  out[0] = v[0] * 2 + c->args[2].i64;
  return 0;
}

/* One node makes 5,000 readers ready on a worker: the first goes to its
 * run-next slot, 1,024 to its deque, the rest to the injection list.  Run
 * three times (re-runs), the readers seeing the new value each time. */
Test(share, fan_out_wider_than_a_deque) {
  enum { N = 5000 };
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ki = test_kernel(rt, "incr", "inout i64[] v", incr_fn, NULL);
  mz_kernel *kr = test_kernel(rt, "read", "in i64[] v, out i64[] out, i64 r", read_fn, NULL);
  for (unsigned p = 0; p < 2; p++) {
    int64_t zero = 0;
    mz_buffer *v = test_buffer_1d(rt, MZ_I64, 1, &zero);
    mz_buffer **outs = malloc(N * sizeof *outs);
    mz_op **ops = malloc(N * sizeof *ops);
    cr_assert(outs && ops);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *w = mz_unzip(g, mz_apply(g, ki, mz_value(g, v), NULL), 0);
    for (size_t i = 0; i < N; i++) {
      outs[i] = test_buffer_1d(rt, MZ_I64, 1, NULL);
      ops[i] = mz_apply(g, kr, mz_zip(g, 3, (mz_op *[]){w, mz_value(g, outs[i]), mz_i64(g, (int64_t)i)}), NULL);
    }
    mz_op *root = mz_join(g, N, ops);
    for (int run = 1; run <= 3; run++) {
      mz_future *f;
      MZ_OK_OR_DIE(rt, mz_graph_run(g, root, policies[p], &f));
      cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", policies[p], mz_future_message(f));
      check_stats(f, N + 1, policies[p]);
      mz_future_destroy(f);
      for (size_t i = 0; i < N; i++) {
        int64_t x = -1;
        MZ_OK_OR_DIE(rt, mz_buffer_read(outs[i], &x, sizeof x));
        cr_assert_eq(x, run * 2 + (int64_t)i, "%s run %d: reader %zu saw %lld", policies[p], run, i, (long long)x);
      }
    }
    for (size_t i = 0; i < N; i++) mz_buffer_release(outs[i]);
    free(outs);
    free(ops);
    mz_graph_destroy(g);
    mz_buffer_release(v);
  }
  mz_kernel_destroy(ki);
  mz_kernel_destroy(kr);
  mz_runtime_destroy(rt);
}

/* A chain: each node v[0] = v[0] * 3 + 1 (mod 2^32).  The successor a
 * node makes ready runs next on the same worker. */
static int step_fn(const mz_call *c) {
  uint32_t *v = c->args[0].p;
  v[0] = v[0] * 3u + 1u;
  return 0;
}
static int fail_at_fn(const mz_call *c) {
  uint32_t *v = c->args[0].p;
  _Atomic int *armed = c->user;
  if (atomic_load(armed)) return 7;
  v[0] = v[0] * 3u + 1u;
  return 0;
}

/* A failure in the middle of a chain cancels what follows and not what
 * came before; the same graph run again once the fault is gone gives the
 * serial result. */
Test(share, chain_failure_then_rerun) {
  enum { N = 2000, FAIL_AT = 700 };
  static _Atomic int armed = 1;
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "step", "inout u32[] v", step_fn, NULL);
  mz_kernel *kf = test_kernel(rt, "fail_at", "inout u32[] v", fail_at_fn, (void *)&armed);
  for (unsigned p = 0; p < 2; p++) {
    atomic_store(&armed, 1);
    uint32_t zero = 0;
    mz_buffer *b = test_buffer_1d(rt, MZ_U32, 1, &zero);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *c = mz_value(g, b);
    for (int i = 0; i < N; i++) c = mz_unzip(g, mz_apply(g, i == FAIL_AT ? kf : k, c, NULL), 0);
    mz_future *f;
    MZ_OK_OR_DIE(rt, mz_graph_run(g, c, policies[p], &f));
    cr_assert_eq(mz_future_wait(f), MZ_EKERNEL, "%s: %s", policies[p], mz_future_message(f));
    mz_run_stats st;
    MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
    cr_assert_eq(st.ops, FAIL_AT + 1, "%s: %llu nodes ran", policies[p], (unsigned long long)st.ops);
    cr_assert_eq(st.failed, N - FAIL_AT, "%s: %llu failed or canceled", policies[p], (unsigned long long)st.failed);
    mz_future_destroy(f);
    atomic_store(&armed, 0);
    uint32_t start = 5;
    MZ_OK_OR_DIE(rt, mz_buffer_write(b, &start, sizeof start));
    MZ_OK_OR_DIE(rt, mz_graph_run(g, c, policies[p], &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", policies[p], mz_future_message(f));
    check_stats(f, N, policies[p]);
    mz_future_destroy(f);
    uint32_t want = 5, got = 0;
    for (int i = 0; i < N; i++) want = want * 3u + 1u;
    MZ_OK_OR_DIE(rt, mz_buffer_read(b, &got, sizeof got));
    cr_assert_eq(got, want, "%s: %u, serial %u", policies[p], got, want);
    mz_graph_destroy(g);
    mz_buffer_release(b);
  }
  mz_kernel_destroy(k);
  mz_kernel_destroy(kf);
  mz_runtime_destroy(rt);
}

/* A slow writer in one run; a second graph's shared readers, scheduled
 * while it is in flight, wait for it and see its value. */
static int slow_set_fn(const mz_call *c) {
  test_sleep_ms(50);
  int64_t *v = c->args[0].p;
  v[0] = 4242;
  return 0;
}

Test(share, readers_wait_for_a_run_in_flight) {
  enum { N = 300 };
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ks = test_kernel(rt, "slow_set", "inout i64[] v", slow_set_fn, NULL);
  mz_kernel *kr = test_kernel(rt, "read", "in i64[] v, out i64[] out, i64 r", read_fn, NULL);
  for (unsigned p = 0; p < 2; p++) {
    int64_t zero = 0;
    mz_buffer *v = test_buffer_1d(rt, MZ_I64, 1, &zero);
    mz_graph *g1, *g2;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
    mz_op *w = mz_apply(g1, ks, mz_value(g1, v), NULL);
    mz_future *f1, *f2;
    MZ_OK_OR_DIE(rt, mz_schedule(g1, w, policies[p], &f1));
    mz_buffer **outs = malloc(N * sizeof *outs);
    mz_op **ops = malloc(N * sizeof *ops);
    cr_assert(outs && ops);
    for (size_t i = 0; i < N; i++) {
      outs[i] = test_buffer_1d(rt, MZ_I64, 1, NULL);
      ops[i] = mz_apply(g2, kr, mz_zip(g2, 3, (mz_op *[]){mz_value(g2, v), mz_value(g2, outs[i]), mz_i64(g2, (int64_t)i)}),
                        NULL);
    }
    MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_join(g2, N, ops), policies[p], &f2));
    cr_assert_eq(mz_future_wait(f2), MZ_OK, "%s: %s", policies[p], mz_future_message(f2));
    cr_assert_eq(mz_future_wait(f1), MZ_OK);
    for (size_t i = 0; i < N; i++) {
      int64_t x = -1;
      MZ_OK_OR_DIE(rt, mz_buffer_read(outs[i], &x, sizeof x));
      cr_assert_eq(x, 4242 * 2 + (int64_t)i, "%s: reader %zu saw %lld", policies[p], i, (long long)x);
      mz_buffer_release(outs[i]);
    }
    free(outs);
    free(ops);
    mz_future_destroy(f1);
    mz_future_destroy(f2);
    mz_graph_destroy(g1);
    mz_graph_destroy(g2);
    mz_buffer_release(v);
  }
  mz_kernel_destroy(ks);
  mz_kernel_destroy(kr);
  mz_runtime_destroy(rt);
}

/* A binary tree of sums over 4,096 leaves (fan-in and fan-out at every
 * level), then a host node (shared too) that reads the root, on one to
 * three workers. */
static int add2_fn(const mz_call *c) {
  const int64_t *a = c->args[0].p, *b = c->args[1].p;
  int64_t *out = c->args[2].p;
  out[0] = a[0] + b[0];
  return 0;
}
static int take_fn(const mz_call *c) {
  int64_t *dst = c->user;
  *dst = ((const int64_t *)c->args[0].p)[0];
  return 0;
}

Test(share, sum_tree_and_host_node) {
  enum { LEAVES = 4096 };
  const char *devs[] = {"cpu:1", "cpu:2", "cpu:3"};
  for (unsigned d = 0; d < 3; d++) {
    mz_runtime *rt = test_runtime(devs[d]);
    mz_kernel *k = test_kernel(rt, "add2", "in i64[] a, in i64[] b, out i64[] c", add2_fn, NULL);
    mz_buffer **buf = calloc(2 * LEAVES, sizeof *buf);
    mz_op **v = calloc(2 * LEAVES, sizeof *v);
    cr_assert(buf && v);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    int64_t want = 0;
    for (size_t i = 0; i < LEAVES; i++) {
      int64_t x = (int64_t)i * 7 + 3;
      want += x;
      buf[LEAVES + i] = test_buffer_1d(rt, MZ_I64, 1, &x);
      v[LEAVES + i] = mz_value(g, buf[LEAVES + i]);
    }
    /* Heap order: node i sums 2i and 2i+1. */
    for (size_t i = LEAVES - 1; i >= 1; i--) {
      buf[i] = test_buffer_1d(rt, MZ_I64, 1, NULL);
      v[i] = mz_unzip(g, mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){v[2 * i], v[2 * i + 1], mz_value(g, buf[i])}), NULL), 2);
    }
    int64_t got = -1;
    mz_op *h = mz_host(g, take_fn, &got, v[1]);
    mz_future *f;
    cr_assert_eq(test_run(g, h, NULL, &f), MZ_OK, "%s: %s", devs[d], mz_future_message(f));
    check_stats(f, LEAVES, devs[d]);
    mz_future_destroy(f);
    cr_assert_eq(got, want, "%s: sum %lld, serial %lld", devs[d], (long long)got, (long long)want);
    mz_graph_destroy(g);
    for (size_t i = 1; i < 2 * LEAVES; i++) mz_buffer_release(buf[i]);
    free(buf);
    free(v);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* A one-shot run of shared work is committed with its gates open: only a
 * source that could become ready before the run starts keeps its gate.
 * Here, scheduled while another graph's slow writer of x is in flight:
 * independent sources (no gate), a source reading x and one reading a
 * buffer whose last writer failed (both gated), and a chain one of whose
 * later tasks also reads x (an edge from the run in flight on a task that
 * is not a source).  Every value is the serial one, the reader of the
 * failed buffer and its successor are canceled, nothing else is. */
static int set_fn(const mz_call *c) {
  int64_t *o = c->args[0].p;
  o[0] = c->args[1].i64;
  return 0;
}
static int addx_fn(const mz_call *c) {
  const int64_t *x = c->args[0].p;
  uint32_t *v = c->args[1].p;
  v[0] += (uint32_t)x[0];
  return 0;
}

Test(share, one_shot_sources_with_edges_from_runs_in_flight) {
  enum { N = 600, CHAIN = 300, X_AT = 150 };
  static _Atomic int armed = 1;
  for (int workers = 1; workers <= 2; workers++) {
    mz_runtime *rt = test_runtime(workers == 1 ? "cpu:1" : "cpu:2");
    mz_kernel *ks = test_kernel(rt, "slow_set", "inout i64[] v", slow_set_fn, NULL);
    mz_kernel *kset = test_kernel(rt, "set", "out i64[] o, i64 val", set_fn, NULL);
    mz_kernel *kr = test_kernel(rt, "read", "in i64[] v, out i64[] out, i64 r", read_fn, NULL);
    mz_kernel *kstep = test_kernel(rt, "step", "inout u32[] v", step_fn, NULL);
    mz_kernel *kaddx = test_kernel(rt, "addx", "in i64[] x, inout u32[] v", addx_fn, NULL);
    mz_kernel *kf = test_kernel(rt, "fail_at", "inout u32[] v", fail_at_fn, (void *)&armed);
    for (unsigned p = 0; p < 2; p++) {
      int64_t zero = 0;
      uint32_t one = 1;
      mz_buffer *x = test_buffer_1d(rt, MZ_I64, 1, &zero), *xr = test_buffer_1d(rt, MZ_I64, 1, &zero);
      mz_buffer *c = test_buffer_1d(rt, MZ_U32, 1, &one), *bad = test_buffer_1d(rt, MZ_U32, 1, &one);
      mz_buffer **outs = malloc(N * sizeof *outs);
      mz_op **ops = malloc((N + 3) * sizeof *ops);
      cr_assert(outs && ops);
      /* bad's last writer fails: a later reader is canceled. */
      mz_graph *g0, *g1, *g2;
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g0));
      atomic_store(&armed, 1);
      cr_assert_eq(test_run(g0, mz_apply(g0, kf, mz_value(g0, bad), NULL), policies[p], NULL), MZ_EKERNEL);
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
      mz_future *f1, *f2;
      MZ_OK_OR_DIE(rt, mz_schedule(g1, mz_apply(g1, ks, mz_value(g1, x), NULL), policies[p], &f1));
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
      for (size_t i = 0; i < N; i++) {
        outs[i] = test_buffer_1d(rt, MZ_I64, 1, NULL);
        ops[i] = mz_apply(g2, kset, mz_zip(g2, 2, (mz_op *[]){mz_value(g2, outs[i]), mz_i64(g2, (int64_t)i * 7)}), NULL);
      }
      ops[N] = mz_apply(g2, kr, mz_zip(g2, 3, (mz_op *[]){mz_value(g2, x), mz_value(g2, xr), mz_i64(g2, 5)}), NULL);
      mz_op *cv = mz_value(g2, c);
      for (int i = 0; i < CHAIN; i++) {
        cv = i == X_AT ? mz_unzip(g2, mz_apply(g2, kaddx, mz_zip(g2, 2, (mz_op *[]){mz_value(g2, x), cv}), NULL), 1)
                       : mz_unzip(g2, mz_apply(g2, kstep, cv, NULL), 0);
      }
      ops[N + 1] = cv;
      mz_op *bv = mz_unzip(g2, mz_apply(g2, kstep, mz_value(g2, bad), NULL), 0);
      ops[N + 2] = mz_apply(g2, kstep, bv, NULL);
      MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_join(g2, N + 3, ops), policies[p], &f2));
      int st = mz_future_wait(f2);
      cr_assert_eq(st, MZ_ECANCELED, "cpu:%d %s: %s (%s)", workers, policies[p], mz_err_name(st), mz_future_message(f2));
      cr_assert_eq(mz_future_wait(f1), MZ_OK);
      mz_run_stats stats;
      MZ_OK_OR_DIE(rt, mz_future_stats(f2, &stats));
      cr_assert_eq(stats.ops, N + 1 + CHAIN, "cpu:%d %s: %llu nodes ran", workers, policies[p],
                   (unsigned long long)stats.ops);
      cr_assert_eq(stats.failed, 2, "cpu:%d %s: %llu failed or canceled", workers, policies[p],
                   (unsigned long long)stats.failed);
      for (size_t i = 0; i < N; i++) {
        int64_t got = -1;
        MZ_OK_OR_DIE(rt, mz_buffer_read(outs[i], &got, sizeof got));
        cr_assert_eq(got, (int64_t)i * 7, "cpu:%d %s: source %zu wrote %lld", workers, policies[p], i, (long long)got);
        mz_buffer_release(outs[i]);
      }
      int64_t gotx = -1;
      MZ_OK_OR_DIE(rt, mz_buffer_read(xr, &gotx, sizeof gotx));
      cr_assert_eq(gotx, 4242 * 2 + 5, "cpu:%d %s: the reader of x saw %lld", workers, policies[p], (long long)gotx);
      uint32_t want = 1, got = 0;
      for (int i = 0; i < CHAIN; i++) want = i == X_AT ? want + 4242u : want * 3u + 1u;
      MZ_OK_OR_DIE(rt, mz_buffer_read(c, &got, sizeof got));
      cr_assert_eq(got, want, "cpu:%d %s: the chain ended at %u, serial %u", workers, policies[p], got, want);
      free(outs);
      free(ops);
      mz_future_destroy(f1);
      mz_future_destroy(f2);
      mz_graph_destroy(g0);
      mz_graph_destroy(g1);
      mz_graph_destroy(g2);
      mz_buffer_release(x);
      mz_buffer_release(xr);
      mz_buffer_release(c);
      mz_buffer_release(bad);
    }
    mz_kernel_destroy(ks);
    mz_kernel_destroy(kset);
    mz_kernel_destroy(kr);
    mz_kernel_destroy(kstep);
    mz_kernel_destroy(kaddx);
    mz_kernel_destroy(kf);
    mz_runtime_destroy(rt);
  }
}
