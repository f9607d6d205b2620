/* test_policy: the policy conformance suite, and user policies.
 *
 * Every registered policy (mz_policy_name(rt, i) until NULL: the shipped
 * ones and two registered here, one with select and one with plan only) is
 * run through the same checks, on "cpu:1" and "cpu:2": a chain, a
 * fork-join, and a random DAG of 300 nodes (fixed seed) mixing applies
 * and host nodes over shared buffers, where each node counts its own
 * calls (every counter must be exactly 1) and every buffer must equal a
 * serial reference computed here in build order.  Then the registry's
 * checks (wrong ABI, no name, no select nor plan -> MZ_EINVAL; a taken
 * name -> MZ_ESTATE), and the runtime's checks of decisions: a queue that
 * does not exist and a deferral of a ready node fail the node with
 * MZ_EPOLICY and the future resolves (no hang); a plan that fixes queues
 * with mz_task_set_queue is followed; a plan error fails the run.  Last,
 * mz_task_follow_queue with a predecessor held between its end and DONE
 * (the window that put both tiles of a partition on one queue). */
#include <time.h>

#include "common.h"

/* ---- user policies ---- */

/* Least backlog among the queues that can run the node, once it is ready. */
static int least_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  if (!ready) return MZ_POLICY_DEFER;
  int best = -1;
  unsigned bb = 0;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++) {
    if (!mz_task_can_run(s, t, q)) continue;
    unsigned b = mz_sched_queue_backlog(s, q);
    if (best < 0 || b < bb) {
      best = (int)q;
      bb = b;
    }
  }
  return best < 0 ? 0 : best;
}

static const struct mz_policy_ops least_policy = {
    .abi = MZ_POLICY_ABI,
    .name = "test-least",
    .description = "least backlog when ready",
    .select = least_select,
};

/* A static policy: the plan puts node i on queue (id % queues) and checks
 * what it is shown. */
struct plan_state {
  _Atomic int plans;
  _Atomic int bad_order;
  _Atomic int erange_ok;
};

static int plan_init(const mz_sched *s, void **state) {
  (void)s;
  *state = calloc(1, sizeof(struct plan_state));
  return *state ? 0 : MZ_ENOMEM;
}

static void plan_fini(void *state) { free(state); }

static int plan_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct plan_state *ps = state;
  atomic_fetch_add(&ps->plans, 1);
  unsigned nq = mz_sched_queue_count(s);
  for (size_t i = 0; i < n; i++) {
    mz_task *t = tasks[i];
    /* Topological order: every predecessor in the run comes earlier. */
    for (unsigned p = 0; p < mz_task_pred_count(t); p++) {
      mz_task *pr = mz_task_pred(t, p);
      bool earlier = false;
      for (size_t j = 0; j < i && !earlier; j++) earlier = tasks[j] == pr;
      if (!earlier) atomic_fetch_add(&ps->bad_order, 1);
    }
    if (mz_task_set_queue(s, t, nq + 3) == MZ_ERANGE) atomic_store(&ps->erange_ok, 1);
    int rc = mz_task_set_queue(s, t, (unsigned)(i % nq)); /* alternate queues in plan order */
    if (rc) return rc;
  }
  return 0;
}

static const struct mz_policy_ops plan_policy = {
    .abi = MZ_POLICY_ABI,
    .name = "test-plan",
    .description = "a plan that fixes every queue",
    .init = plan_init,
    .fini = plan_fini,
    .plan = plan_plan,
};

static mz_runtime *policy_runtime(const char *devices) {
  mz_runtime *rt = test_runtime(devices);
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &least_policy));
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &plan_policy));
  return rt;
}

/* ---- kernels ---- */

enum { L = 16, MAXNODES = 400 };

static _Atomic int calls[MAXNODES];

/* "in u64[] a, in u64[] b, inout u64[] o, i32 id": o = 3o + a - b + id. */
static int mix_fn(const mz_call *c) {
  const uint64_t *a = c->args[0].p, *b = c->args[1].p;
  uint64_t *o = c->args[2].p;
  int id = c->args[3].i32;
  for (size_t j = 0; j < c->shapes[2].count; j++) o[j] = o[j] * 3 + a[j] - b[j] + (uint64_t)id;
  atomic_fetch_add(&calls[id], 1);
  return 0;
}

struct host_arg {
  int id;
};

/* A host node: o ^= id * 0x9E37 (then rotated). */
static int host_mix(const mz_call *c) {
  const struct host_arg *h = c->user;
  uint64_t *o = c->args[0].p;
  for (size_t j = 0; j < c->shapes[0].count; j++) {
    uint64_t v = o[j] ^ ((uint64_t)h->id * 0x9E37u);
    o[j] = (v << 7) | (v >> 57);
  }
  atomic_fetch_add(&calls[h->id], 1);
  return 0;
}

/* "inout u64[] y, i64 k, u64 n = sizeof(y)": y = 2y + k (wrapping). */
static int chain_fn(const mz_call *c) {
  uint64_t *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++) y[i] = y[i] * 2 + (uint64_t)c->args[1].i64;
  atomic_fetch_add(&calls[c->args[1].i64], 1);
  return 0;
}

/* "in f64[] x, out f64[] o, i32 f": o = x * f. */
static int scale_fn(const mz_call *c) {
  const double *x = c->args[0].p;
  double *o = c->args[1].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) o[i] = x[i] * c->args[2].i32;
  atomic_fetch_add(&calls[c->args[2].i32], 1);
  return 0;
}

static int fill_fn(const mz_call *c) {
  double *x = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) x[i] = (double)i + 0.5;
  atomic_fetch_add(&calls[0], 1);
  return 0;
}

/* Sums buffers 0..n-2 into the last one. */
static int sum_fn(const mz_call *c) {
  double *s = c->args[c->nargs - 1].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) {
    s[i] = 0;
    for (unsigned b = 0; b + 1 < c->nargs; b++) s[i] += ((const double *)c->args[b].p)[i];
  }
  atomic_fetch_add(&calls[MAXNODES - 1], 1);
  return 0;
}

static void reset_calls(void) {
  for (int i = 0; i < MAXNODES; i++) atomic_store(&calls[i], 0);
}

/* ---- the three checks ---- */

static void check_chain(mz_runtime *rt, const char *pol) {
  enum { STEPS = 100, N = 33 };
  reset_calls();
  mz_kernel *k = test_kernel(rt, "chain", "inout u64[] y, i64 k, u64 n = sizeof(y)", chain_fn, NULL);
  uint64_t init[N], ref[N], out[N];
  for (int i = 0; i < N; i++) init[i] = ref[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < N; i++) ref[i] = ref[i] * 2 + (uint64_t)s;
  mz_buffer *y = test_buffer_1d(rt, MZ_U64, N, init);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *cur = mz_value(g, y);
  for (int s = 0; s < STEPS; s++) cur = mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){cur, mz_i64(g, s)}), NULL), 0);
  mz_future *f;
  int st = test_run(g, cur, pol, &f);
  cr_assert_eq(st, MZ_OK, "%s: chain: %s", pol, f ? mz_future_message(f) : mz_runtime_last_error(rt));
  mz_run_stats rs;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &rs));
  cr_expect_eq(rs.ops, STEPS, "%s: chain: ops %llu", pol, (unsigned long long)rs.ops);
  for (int s = 0; s < STEPS; s++) cr_expect_eq(atomic_load(&calls[s]), 1, "%s: chain step %d ran %d times", pol, s, atomic_load(&calls[s]));
  MZ_OK_OR_DIE(rt, mz_buffer_read(y, out, sizeof out));
  cr_expect_arr_eq(out, ref, sizeof ref, "%s: chain result", pol);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
}

static void check_fork_join(mz_runtime *rt, const char *pol) {
  enum { B = 8, N = 50 };
  reset_calls();
  mz_kernel *k = test_kernel(rt, "scale", "in f64[] x, out f64[] o, i32 f", scale_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F64, N, NULL), *s = test_buffer_1d(rt, MZ_F64, N, NULL);
  mz_buffer *o[B];
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *filled = mz_unzip(g, mz_host(g, fill_fn, NULL, mz_value(g, x)), 0);
  mz_op *outs[B + 1];
  for (int b = 0; b < B; b++) {
    o[b] = test_buffer_1d(rt, MZ_F64, N, NULL);
    outs[b] = mz_unzip(g, mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){filled, mz_value(g, o[b]), mz_i32(g, b + 1)}), NULL), 1);
  }
  outs[B] = mz_value(g, s);
  mz_op *joined = mz_host(g, sum_fn, NULL, mz_zip(g, B + 1, outs));
  mz_future *f;
  int st = test_run(g, mz_unzip(g, joined, B), pol, &f);
  cr_assert_eq(st, MZ_OK, "%s: fork-join: %s", pol, f ? mz_future_message(f) : mz_runtime_last_error(rt));
  cr_expect_eq(atomic_load(&calls[0]), 1, "%s: fork", pol);
  for (int b = 1; b <= B; b++) cr_expect_eq(atomic_load(&calls[b]), 1, "%s: branch %d", pol, b);
  cr_expect_eq(atomic_load(&calls[MAXNODES - 1]), 1, "%s: join", pol);
  double out[N];
  MZ_OK_OR_DIE(rt, mz_buffer_read(s, out, sizeof out));
  for (int i = 0; i < N; i++) {
    double ref = 0;
    for (int b = 1; b <= B; b++) ref += ((double)i + 0.5) * b;
    cr_expect_eq(out[i], ref, "%s: fork-join sum[%d]", pol, i);
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int b = 0; b < B; b++) mz_buffer_release(o[b]);
  mz_buffer_release(x);
  mz_buffer_release(s);
  mz_kernel_destroy(k);
}

/* A small deterministic generator (xorshift64*), so the DAG is the same
 * on every machine. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

static void check_random_dag(mz_runtime *rt, const char *pol) {
  enum { NB = 24, NODES = 300 };
  reset_calls();
  mz_kernel *k = test_kernel(rt, "mix", "in u64[] a, in u64[] b, inout u64[] o, i32 id", mix_fn, NULL);
  uint64_t ref[NB][L];
  mz_buffer *bufs[NB];
  for (int b = 0; b < NB; b++) {
    for (int j = 0; j < L; j++) ref[b][j] = (uint64_t)(b * 100 + j);
    bufs[b] = test_buffer_1d(rt, MZ_U64, L, ref[b]);
  }
  static struct host_arg hargs[NODES];
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *last[NB];
  for (int b = 0; b < NB; b++) last[b] = mz_value(g, bufs[b]);
  mz_op *nodes[NODES];
  uint64_t seed = 0x5EED1234ABCDull;
  for (int id = 0; id < NODES; id++) {
    int o = (int)(rng_next(&seed) % NB);
    /* Half the time take the latest value op (a combinator edge), else a
     * fresh value (only hazards order it). */
#define PICK(buf) (rng_next(&seed) % 2 ? last[buf] : mz_value(g, bufs[buf]))
    if (rng_next(&seed) % 10 == 0) {
      hargs[id].id = id;
      nodes[id] = mz_host(g, host_mix, &hargs[id], PICK(o));
      last[o] = mz_unzip(g, nodes[id], 0);
      for (int j = 0; j < L; j++) {
        uint64_t v = ref[o][j] ^ ((uint64_t)id * 0x9E37u);
        ref[o][j] = (v << 7) | (v >> 57);
      }
      continue;
    }
    int a, b;
    do a = (int)(rng_next(&seed) % NB);
    while (a == o);
    do b = (int)(rng_next(&seed) % NB);
    while (b == o);
    nodes[id] = mz_apply(g, k, mz_zip(g, 4, (mz_op *[]){PICK(a), PICK(b), PICK(o), mz_i32(g, id)}), NULL);
#undef PICK
    last[o] = mz_unzip(g, nodes[id], 2);
    for (int j = 0; j < L; j++) ref[o][j] = ref[o][j] * 3 + ref[a][j] - ref[b][j] + (uint64_t)id;
  }
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  int st = test_run(g, mz_join(g, NODES, nodes), pol, &f);
  cr_assert_eq(st, MZ_OK, "%s: random DAG: %s", pol, f ? mz_future_message(f) : mz_runtime_last_error(rt));
  mz_run_stats rs;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &rs));
  cr_expect_eq(rs.ops, NODES, "%s: random DAG: ops %llu", pol, (unsigned long long)rs.ops);
  int wrong_counts = 0;
  for (int id = 0; id < NODES; id++) wrong_counts += atomic_load(&calls[id]) != 1;
  cr_expect_eq(wrong_counts, 0, "%s: %d nodes did not run exactly once", pol, wrong_counts);
  for (int b = 0; b < NB; b++) {
    uint64_t out[L];
    MZ_OK_OR_DIE(rt, mz_buffer_read(bufs[b], out, sizeof out));
    cr_expect_arr_eq(out, ref[b], sizeof out, "%s: random DAG: buffer %d differs from the serial reference", pol, b);
    mz_buffer_release(bufs[b]);
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
}

static void conformance(const char *devices) {
  mz_runtime *rt = policy_runtime(devices);
  unsigned n = 0;
  bool saw_least = false, saw_plan = false, saw_eager = false;
  for (const char *pol; (pol = mz_policy_name(rt, n)); n++) {
    saw_least |= !strcmp(pol, "test-least");
    saw_plan |= !strcmp(pol, "test-plan");
    saw_eager |= !strcmp(pol, "eager");
    cr_log_info("%s: policy %s", devices, pol);
    check_chain(rt, pol);
    check_fork_join(rt, pol);
    check_random_dag(rt, pol);
  }
  cr_expect_geq(n, 5, "at least the three shipped policies and two user ones");
  cr_expect(saw_least && saw_plan && saw_eager);
  mz_runtime_destroy(rt);
}

Test(policy, conformance_cpu1, .timeout = 120) { conformance("cpu:1"); }
Test(policy, conformance_cpu2, .timeout = 120) { conformance("cpu:2"); }

/* The default policy (NULL) and MZ_POLICY take part too. */
Test(policy, default_policy_from_config, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  cr_expect_str_eq(mz_runtime_policy(rt), "eager");
  check_random_dag(rt, NULL);
  mz_runtime_destroy(rt);
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2", .policy = "round-robin"}, &rt));
  cr_expect_str_eq(mz_runtime_policy(rt), "round-robin");
  check_chain(rt, NULL);
  mz_runtime_destroy(rt);
}

/* ---- the registry ---- */

Test(policy, register_checks, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  unsigned before = 0;
  while (mz_policy_name(rt, before)) before++;
  cr_expect_geq(before, 3);
  struct mz_policy_ops bad = least_policy;
  bad.abi = MZ_POLICY_ABI + 1;
  cr_expect_eq(mz_policy_register(rt, &bad), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "ABI"), "%s", mz_runtime_last_error(rt));
  bad = least_policy;
  bad.name = NULL;
  cr_expect_eq(mz_policy_register(rt, &bad), MZ_EINVAL);
  bad.name = "";
  cr_expect_eq(mz_policy_register(rt, &bad), MZ_EINVAL);
  bad = least_policy;
  bad.name = "neither";
  bad.select = NULL;
  cr_expect_eq(mz_policy_register(rt, &bad), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "neither"), "%s", mz_runtime_last_error(rt));
  bad = least_policy;
  bad.name = "eager";
  cr_expect_eq(mz_policy_register(rt, &bad), MZ_ESTATE, "a shipped policy's name is taken");
  cr_expect(strstr(mz_runtime_last_error(rt), "eager"), "%s", mz_runtime_last_error(rt));
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &least_policy));
  cr_expect_eq(mz_policy_register(rt, &least_policy), MZ_ESTATE, "registering twice");
  unsigned after = 0;
  while (mz_policy_name(rt, after)) after++;
  cr_expect_eq(after, before + 1, "only the good one was added");
  cr_expect_str_eq(mz_policy_name(rt, before), "test-least");
  cr_expect_null(mz_policy_name(rt, after));
  /* Registered on one runtime only. */
  mz_runtime *rt2 = test_runtime("cpu:1");
  for (unsigned i = 0; mz_policy_name(rt2, i); i++) cr_expect_str_neq(mz_policy_name(rt2, i), "test-least");
  MZ_OK_OR_DIE(rt2, mz_policy_register(rt2, &least_policy));
  mz_runtime_destroy(rt2);
  mz_runtime_destroy(rt);
}

/* ---- bad decisions ---- */

static int nowhere_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)t;
  (void)ready;
  return (int)mz_sched_queue_count(s) + 1000;
}

static int negative_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)s;
  (void)t;
  (void)ready;
  return -5;
}

static int defer_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)s;
  (void)t;
  (void)ready;
  return MZ_POLICY_DEFER;
}

/* Decides well for the first node of a run (id 1 is a value), badly for
 * the rest: a bad decision in the middle of a run. */
static int late_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  if (!ready) return MZ_POLICY_DEFER;
  return !strcmp(mz_task_name(t), "first") ? 0 : (int)mz_sched_queue_count(s);
}

static int failing_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  (void)state;
  (void)s;
  (void)tasks;
  (void)n;
  return MZ_ENODEV;
}

static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  atomic_fetch_add(&calls[0], 1);
  return 0;
}

static void expect_policy_failure(const struct mz_policy_ops *ops, int want, const char *word) {
  reset_calls();
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, ops));
  mz_kernel *first = test_kernel(rt, "first", "inout i32[] v", inc_fn, NULL);
  mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *cur = mz_unzip(g, mz_apply(g, first, mz_value(g, b), NULL), 0);
  for (int i = 0; i < 3; i++) cur = mz_unzip(g, mz_apply(g, k, cur, NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, cur, ops->name, &f));
  int st = mz_future_wait_for(f, 10000000000ull);
  cr_expect_eq(st, want, "%s: %s", ops->name, mz_err_name(st));
  cr_expect(strstr(mz_future_message(f), word), "%s: %s", ops->name, mz_future_message(f));
  /* Whatever happened, the run is over. */
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(first);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(policy, queue_that_does_not_exist, .timeout = 30) {
  expect_policy_failure(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "nowhere", .select = nowhere_select},
                        MZ_EPOLICY, "policy");
  cr_expect_eq(atomic_load(&calls[0]), 0);
  expect_policy_failure(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "negative", .select = negative_select},
                        MZ_EPOLICY, "policy");
  cr_expect_eq(atomic_load(&calls[0]), 0);
  expect_policy_failure(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "late", .select = late_select},
                        MZ_EPOLICY, "inc");
  cr_expect_eq(atomic_load(&calls[0]), 1, "the well placed first node ran");
}

Test(policy, defer_when_ready, .timeout = 30) {
  expect_policy_failure(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "procrastinate", .select = defer_select},
                        MZ_EPOLICY, "deferred");
  cr_expect_eq(atomic_load(&calls[0]), 0);
}

Test(policy, plan_error_fails_the_run, .timeout = 30) {
  expect_policy_failure(&(struct mz_policy_ops){.abi = MZ_POLICY_ABI, .name = "bad-plan", .plan = failing_plan},
                        MZ_ENODEV, "plan");
  cr_expect_eq(atomic_load(&calls[0]), 0, "nothing ran");
}

/* A plan puts every node; the kernels see the queue it chose. */
static _Atomic int seen_queue[64];

static int where_fn(const mz_call *c) {
  int id = c->args[1].i32;
  atomic_store(&seen_queue[id], (int)c->queue + 1);
  int32_t *v = c->args[0].p;
  v[0] += 1;
  return 0;
}

Test(policy, plan_with_set_queue, .timeout = 30) {
  mz_runtime *rt = policy_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "where", "inout i32[] v, i32 id", where_fn, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1, NULL), *b = test_buffer_1d(rt, MZ_I32, 1, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ops[32];
  for (int i = 0; i < 32; i++)
    ops[i] = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_value(g, i % 2 ? a : b), mz_i32(g, i)}), NULL);
  mz_future *f;
  cr_assert_eq(test_run(g, mz_join(g, 32, ops), "test-plan", &f), MZ_OK, "%s", f ? mz_future_message(f) : "");
  unsigned nq = mz_runtime_queue_count(rt);
  cr_assert_eq(nq, 2);
  int on[2] = {0, 0};
  for (int i = 0; i < 32; i++) {
    int q = atomic_load(&seen_queue[i]) - 1;
    cr_expect(q == 0 || q == 1, "node %d ran on queue %d", i, q);
    if (q == 0 || q == 1) on[q]++;
  }
  cr_expect(on[0] > 0 && on[1] > 0, "the plan used both queues (%d, %d)", on[0], on[1]);
  int32_t out;
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, &out, sizeof out));
  cr_expect_eq(out, 16);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, &out, sizeof out));
  cr_expect_eq(out, 16);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- dmda: the running worker takes a tie ---- */

static int nap_fn(const mz_call *c) {
  int id = c->args[1].i32;
  atomic_store(&seen_queue[id], (int)c->queue + 1);
  struct timespec ts = {0, (long)c->args[2].i32 * 1000000L};
  if (ts.tv_nsec) nanosleep(&ts, NULL);
  int32_t *v = c->args[0].p;
  v[0] += 1;
  return 0;
}

/* Two idle CPU queues tie in dmda's finish time; the node made ready by a
 * worker's node goes to that worker, which is running, not to the lowest
 * queue, whose worker sleeps and must be woken.  A (10 ms) is placed first
 * and B (40 ms) beside it, on queue 1 while A holds queue 0; when B ends, A
 * has ended and both queues are idle: B's chain C1..C6 stays on B's queue.
 * (Lowest queue first would send C1 to queue 0.)  A run where B went to
 * queue 0 proves nothing, so the run is repeated until B is on queue 1. */
Test(policy, dmda_tie_goes_to_the_running_worker, .timeout = 120) {
  mz_runtime *rt = policy_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "nap", "inout i32[] v, i32 id, i32 ms", nap_fn, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1, NULL), *b = test_buffer_1d(rt, MZ_I32, 1, NULL);
  bool b_on_1 = false;
  for (int run = 0; run < 8 && !b_on_1; run++) {
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    for (int i = 0; i < 8; i++) atomic_store(&seen_queue[i], 0);
    mz_op *ends[2];
    ends[0] = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, a), mz_i32(g, 0), mz_i32(g, 10)}), NULL);
    mz_op *x = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, b), mz_i32(g, 1), mz_i32(g, 40)}), NULL);
    for (int i = 2; i < 8; i++) /* after B: both write b */
      x = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, b), mz_i32(g, i), mz_i32(g, 0)}), NULL);
    ends[1] = x;
    mz_future *f;
    cr_assert_eq(test_run(g, mz_join(g, 2, ends), "dmda", &f), MZ_OK, "%s / %s", f ? mz_future_message(f) : "",
                 mz_runtime_last_error(rt));
    mz_future_destroy(f);
    mz_graph_destroy(g);
    int qb = atomic_load(&seen_queue[1]) - 1;
    cr_assert(qb == 0 || qb == 1, "B ran on queue %d", qb);
    for (int i = 2; i < 8; i++)
      cr_expect_eq(atomic_load(&seen_queue[i]) - 1, qb, "run %d: C%d ran on queue %d, B on %d", run, i - 1,
                   atomic_load(&seen_queue[i]) - 1, qb);
    b_on_1 = qb == 1;
  }
  cr_expect(b_on_1, "B never went to queue 1 beside A: the tie was not tested");
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* The plan sees the run's tasks in a topological order, and set_queue
 * refuses a queue out of range. */
static struct plan_state *captured;

static int capture_init(const mz_sched *s, void **state) {
  int rc = plan_init(s, state);
  captured = *state;
  return rc;
}

Test(policy, plan_sees_topological_order, .timeout = 30) {
  static const struct mz_policy_ops capture_policy = {
      .abi = MZ_POLICY_ABI, .name = "capture", .init = capture_init, .fini = plan_fini, .plan = plan_plan};
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &capture_policy));
  check_random_dag(rt, "capture");
  cr_assert_not_null(captured);
  cr_expect_eq(atomic_load(&captured->plans), 1);
  cr_expect_eq(atomic_load(&captured->bad_order), 0, "predecessors come first");
  cr_expect_eq(atomic_load(&captured->erange_ok), 1, "mz_task_set_queue refuses a queue out of range");
  mz_runtime_destroy(rt);
}

/* ---- mz_task_follow_queue while a predecessor finishes ----
 *
 * Found under valgrind (session 4): a finishing task dropped its queue's
 * backlog before it published DONE, so a successor placed in between
 * counted it as a pending predecessor while the backlog no longer did,
 * and two successors of one task both "followed" it onto its queue, one
 * behind the other, while the other queue idled.  Here the window is
 * held open on purpose: this policy's done callback (which finish() calls
 * before DONE) sleeps 20 ms for the root, and its select sleeps 5 ms
 * before the first successor's decision, so that decision falls inside
 * it.  The two successors then wait for each other inside their kernels:
 * on one queue they would time out. */
static _Atomic int fq_first;
static _Atomic int fq_arrived;
static _Atomic int fq_on[2]; /* queue + 1 of each arrival */

static int fq_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  unsigned np = mz_task_pred_count(t);
  if (np) {
    if (!atomic_exchange(&fq_first, 1)) test_sleep_ms(5);
    int q = mz_task_follow_queue(s, t, mz_task_queue(mz_task_pred(t, np - 1)));
    if (q >= 0) return q;
  }
  return least_select(state, s, t, ready);
}

static void fq_done(void *state, const mz_sched *s, const mz_task *t, unsigned q, uint64_t ns) {
  (void)state, (void)s, (void)q, (void)ns;
  if (!mz_task_pred_count(t)) test_sleep_ms(20);
}

static int fq_root(const mz_call *c) {
  int32_t *a = c->args[0].p;
  test_sleep_ms(1);
  a[0] = 7;
  return 0;
}

static int fq_meet(const mz_call *c) {
  const int32_t *a = c->args[0].p;
  int32_t *b = c->args[1].p;
  int n = atomic_fetch_add(&fq_arrived, 1);
  if (n < 2) atomic_store(&fq_on[n], (int)c->queue + 1);
  uint64_t end = test_now_ns() + 30000000000ull; /* valgrind runs one thread at a time */
  while (atomic_load(&fq_arrived) < 2 && test_now_ns() < end) test_sleep_ms(1);
  b[0] = a[0];
  return atomic_load(&fq_arrived) >= 2 ? 0 : MZ_ETIMEDOUT;
}

static const struct mz_policy_ops follow_policy = {
    .abi = MZ_POLICY_ABI,
    .name = "test-follow",
    .description = "eager's follow rule, with sleeps that hold a finish open",
    .select = fq_select,
    .done = fq_done,
};

Test(policy, follow_queue_while_a_predecessor_finishes, .timeout = 120) {
  atomic_store(&fq_first, 0);
  atomic_store(&fq_arrived, 0);
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &follow_policy));
  mz_kernel *kroot = test_kernel(rt, "fq_root", "out i32[] a", fq_root, NULL);
  mz_kernel *kmeet = test_kernel(rt, "fq_meet", "in i32[] a, out i32[] b", fq_meet, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1, NULL), *b0 = test_buffer_1d(rt, MZ_I32, 1, NULL),
            *b1 = test_buffer_1d(rt, MZ_I32, 1, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_unzip(g, mz_apply(g, kroot, mz_value(g, a), NULL), 0);
  mz_op *m0 = mz_apply(g, kmeet, mz_zip(g, 2, (mz_op *[]){ra, mz_value(g, b0)}), NULL);
  mz_op *m1 = mz_apply(g, kmeet, mz_zip(g, 2, (mz_op *[]){ra, mz_value(g, b1)}), NULL);
  mz_future *f;
  cr_assert_eq(test_run(g, mz_join(g, 2, (mz_op *[]){m0, m1}), "test-follow", &f), MZ_OK,
               "the two successors did not run at the same time (queues %d and %d; -1: none): %s",
               atomic_load(&fq_on[0]) - 1, atomic_load(&fq_on[1]) - 1, mz_future_message(f));
  int32_t v0 = 0, v1 = 0;
  MZ_OK_OR_DIE(rt, mz_buffer_read(b0, &v0, sizeof v0));
  MZ_OK_OR_DIE(rt, mz_buffer_read(b1, &v1, sizeof v1));
  cr_expect(v0 == 7 && v1 == 7, "%d %d", v0, v1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b0);
  mz_buffer_release(b1);
  mz_kernel_destroy(kroot);
  mz_kernel_destroy(kmeet);
  mz_runtime_destroy(rt);
}
