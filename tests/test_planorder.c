/* test_planorder: plan order (mz_task_set_after) and planned times
 * (mz_task_set_expected_times).
 *
 * - heft runs its plan in planned order on every queue: an observer
 *   collects each node's queue, real start and planned start, and on each
 *   queue the nodes that started later were planned later, on simulated
 *   platforms (random DAGs, the plan's insertion slots included) and on
 *   two CPU queues; every node carries its planned times, and so does
 *   every node dmda placed.
 * - A user plan that orders three independent nodes on one queue against
 *   their build order runs them in its order.
 * - The rules: NULL or t == prev is MZ_EINVAL; a second order for a task
 *   or a prev, or a call outside plan (from select), is MZ_ESTATE; an
 *   order that makes a cycle with the run's edges fails the run with
 *   MZ_EPOLICY and a message, and the future resolves (no hang), also
 *   when the plan that made it failed.
 * - On simulated devices with copy engines no node ends later than heft
 *   planned (a copy to a device serves every later reader there).
 * Results under faults and memory limits with heft's order are checked by
 * test_faults (its random fault runs and memory sweeps include heft). */
#include <inttypes.h>
#include <pthread.h>

#include "common.h"
#include <maize/daggen.h>
#include <maize/observer.h>

TestSuite(planorder, .timeout = 120);

/* ---- an observer that keeps every node record ---- */

struct nrec {
  uint64_t run;
  int queue;
  uint64_t start, end, pstart, pend;
  uint32_t node;
};

struct log {
  pthread_mutex_t m;
  struct nrec *v;
  size_t n, cap;
};

static void on_node(const mz_node_record *r, void *user) {
  struct log *l = user;
  pthread_mutex_lock(&l->m);
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    struct nrec *v = realloc(l->v, cap * sizeof *v);
    if (!v) abort(); /* the test cannot go on without its records */
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (struct nrec){r->run, r->queue, r->start_ns, r->end_ns, r->planned_start_ns, r->planned_end_ns, r->node};
  pthread_mutex_unlock(&l->m);
}

static void log_init(mz_runtime *rt, struct log *l) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->m, NULL);
  mz_observer o = {.node = on_node, .user = l};
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
}

static void log_free(struct log *l) {
  free(l->v);
  pthread_mutex_destroy(&l->m);
}

/* Within a run: plans of different runs are not ordered against each
 * other (a plan that expected a node later than it ran may put it after
 * the next run's first nodes). */
static int by_queue_then_start(const void *a, const void *b) {
  const struct nrec *x = a, *y = b;
  if (x->run != y->run) return x->run < y->run ? -1 : 1;
  if (x->queue != y->queue) return x->queue < y->queue ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->pstart > y->pstart) - (x->pstart < y->pstart);
}

/* Every node has planned times, and in each run, on each queue, real and
 * planned starts come in the same order. */
static void check_plan_order(struct log *l, const char *what) {
  cr_assert_gt(l->n, 0, "%s: no node records", what);
  qsort(l->v, l->n, sizeof *l->v, by_queue_then_start);
  size_t queued_behind = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct nrec *r = &l->v[i];
    cr_assert(r->pend > 0 && r->pend >= r->pstart, "%s: node %u has no planned times (%" PRIu64 ", %" PRIu64 ")", what,
              r->node, r->pstart, r->pend);
    if (i && l->v[i - 1].run == r->run && l->v[i - 1].queue == r->queue) {
      queued_behind++;
      cr_assert_leq(l->v[i - 1].pstart, r->pstart,
                    "%s: run %" PRIu64 ", queue %d: node %u started before node %u but was planned after it (%" PRIu64
                    " > %" PRIu64 ")",
                    what, r->run, r->queue, l->v[i - 1].node, r->node, l->v[i - 1].pstart, r->pstart);
    }
  }
  cr_assert_gt(queued_behind, 0, "%s: no queue ran two nodes: nothing was checked", what);
}

/* Run a generated DAG under policy on devices, with every node record
 * collected in *l (delivered by the runtime's end). */
static void run_dag_logged(const char *devices, const mz_dag_params *p, const char *policy, struct log *l) {
  mz_runtime *rt = test_runtime(devices);
  log_init(rt, l);
  mz_dag *d;
  MZ_OK_OR_DIE(rt, mz_dag_generate(rt, p, &d));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(d->g, d->root, policy, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  mz_dag_destroy(d);
  mz_runtime_destroy(rt); /* every record delivered */
}

static void heft_on_sim(const char *devices, double ccr, uint64_t seed) {
  struct log l;
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 300, .seed = seed, .ccr = ccr, .flops = 1e5};
  run_dag_logged(devices, &p, "heft", &l);
  char what[256];
  snprintf(what, sizeof what, "heft on %s, ccr %g", devices, ccr);
  cr_assert_eq(l.n, 300, "%s: %zu node records", what, l.n);
  check_plan_order(&l, what);
  log_free(&l);
}

Test(planorder, heft_in_plan_order_on_sim) {
  heft_on_sim("sim:fast*2@speed=8,link=200M/s;sim:slow*2@speed=2,link=400M/s", 0.1, 3);
  heft_on_sim("sim:fast*2@speed=8,link=200M/s;sim:slow*2@speed=2,link=400M/s", 1.0, 5);
  heft_on_sim("sim:a*4@speed=4", 0.5, 11);
}

/* On simulated devices with copy engines, whose costs are exact, no node
 * ends later than heft planned: the plan charges every copy the runtime
 * makes (a copy to a device serves every later reader there, as the plan
 * assumes), and the simulator starts a node's copies no later than the
 * plan does (each from its own producer's end).  The DAG's producers have
 * several readers, so copies are shared. */
static void heft_plan_is_run(const char *devices, double ccr, uint64_t seed) {
  struct log l;
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 300, .seed = seed, .ccr = ccr, .flops = 1e5,
                     .ref_speed = 5, .ref_link = 0.3};
  run_dag_logged(devices, &p, "heft", &l);
  cr_assert_eq(l.n, 300, "%s: %zu node records", devices, l.n);
  size_t queues[64] = {0};
  for (size_t i = 0; i < l.n; i++) {
    const struct nrec *r = &l.v[i];
    /* Plan and simulator round each cost to the nanosecond on their own. */
    cr_assert(r->end <= r->pend + 100, "%s, ccr %g: node %u planned %" PRIu64 "..%" PRIu64 " ns, ran %" PRIu64 "..%" PRIu64,
              devices, ccr, r->node, r->pstart, r->pend, r->start, r->end);
    if (r->queue >= 0 && r->queue < 64) queues[r->queue]++;
  }
  size_t used = 0;
  for (int q = 0; q < 64; q++) used += queues[q] > 0;
  cr_assert_gt(used, 1, "%s, ccr %g: the plan used one queue: no copy was planned", devices, ccr);
  log_free(&l);
}

Test(planorder, heft_never_ends_later_than_planned_on_sim) {
  heft_plan_is_run("sim:fast*2@speed=8,link=200M/s,copy=1;sim:slow*2@speed=2,link=400M/s,copy=1", 0.1, 3);
  heft_plan_is_run("sim:fast*2@speed=8,link=200M/s,copy=1;sim:slow*2@speed=2,link=400M/s,copy=1", 1.0, 9);
  heft_plan_is_run("sim:a*4@speed=4,link=1G/s,copy=1", 0.5, 11);
}

static int k_spin(const mz_call *c) {
  uint32_t *x = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) x[i] = x[i] * 1664525u + 1013904223u;
  return 0;
}

/* On CPU workers alone there is no device to choose: heft, dmda, dmdas and
 * round-robin share such a run among the workers as eager does (their CPU
 * placements are preferences that stealing may override), so no node has
 * planned times and the run made no plan; single plans its one queue.
 * The results are the serial ones either way. */
Test(planorder, a_cpu_only_run_is_shared_not_planned) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct log l;
  log_init(rt, &l);
  mz_kernel *k = test_kernel(rt, "spin", "inout u32[] x, u64 n = sizeof(x)", k_spin, NULL);
  enum { W = 24, N = 4096 };
  const char *pols[] = {"heft", "dmda", "dmdas", "round-robin", "single"};
  enum { P = sizeof pols / sizeof *pols };
  mz_buffer *b[W];
  static uint32_t x[N], want[N];
  for (unsigned p = 0; p < P; p++) {
    for (int i = 0; i < W; i++) {
      for (unsigned j = 0; j < N; j++) x[j] = j + (unsigned)i + p;
      b[i] = test_buffer_1d(rt, MZ_U32, N, x);
    }
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *ends[W];
    for (int i = 0; i < W; i++) {
      mz_op *v = mz_unzip(g, mz_apply(g, k, mz_value(g, b[i]), NULL), 0);
      for (int s = 0; s < 2 + i % 3; s++) v = mz_unzip(g, mz_apply(g, k, v, NULL), 0);
      ends[i] = v;
    }
    mz_future *f;
    MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, W, ends), pols[p], &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", pols[p], mz_future_message(f));
    mz_run_stats st;
    MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
    if (strcmp(pols[p], "single")) cr_assert_eq(st.plan_ns, 0, "%s planned a CPU-only run", pols[p]);
    else cr_assert_gt(st.plan_ns, 0, "single made no plan");
    mz_future_destroy(f);
    mz_graph_destroy(g);
    for (int i = 0; i < W; i++) {
      for (unsigned j = 0; j < N; j++) {
        want[j] = j + (unsigned)i + p;
        for (int s = 0; s < 3 + i % 3; s++) want[j] = want[j] * 1664525u + 1013904223u;
      }
      MZ_OK_OR_DIE(rt, mz_buffer_read(b[i], x, sizeof x));
      cr_assert(!memcmp(x, want, sizeof x), "%s: chain %d differs from the serial result", pols[p], i);
      mz_buffer_release(b[i]);
    }
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt); /* every record delivered */
  size_t per = 0;
  for (unsigned i = 0; i < W; i++) per += 3 + i % 3;
  cr_assert_eq(l.n, P * per, "%zu node records", l.n);
  uint64_t last = 0; /* single's run, the last */
  for (size_t i = 0; i < l.n; i++) last = l.v[i].run > last ? l.v[i].run : last;
  int single_q = -2;
  for (size_t i = 0; i < l.n; i++) {
    const struct nrec *r = &l.v[i];
    bool single = r->run == last;
    if (!single) {
      cr_assert(r->pstart == 0 && r->pend == 0, "run %" PRIu64 ": node %u has planned times", r->run, r->node);
    } else {
      if (single_q == -2) single_q = r->queue;
      cr_assert_eq(r->queue, single_q, "single ran node %u on queue %d and another on %d", r->node, r->queue, single_q);
    }
  }
  log_free(&l);
}

/* dmda says what it expects of each node it places. */
Test(planorder, dmda_reports_expected_times) {
  struct log l;
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 200, .seed = 9, .ccr = 0.1, .flops = 1e5};
  run_dag_logged("sim:fast*2@speed=8;sim:slow*2@speed=2", &p, "dmda", &l);
  cr_assert_eq(l.n, 200);
  for (size_t i = 0; i < l.n; i++)
    cr_assert(l.v[i].pend > 0 && l.v[i].pend >= l.v[i].pstart, "node %u: no expected times", l.v[i].node);
  log_free(&l);
}

/* ---- user plans ---- */

struct order_state {
  int mode; /* 0: reverse build order; 1: a cycle with an edge */
  int rc_null, rc_self, rc_ok, rc_again_t, rc_again_prev, rc_select;
  _Atomic int selects;
};

static struct order_state *the_state; /* the test's, read by the policy (one test at a time) */

static int order_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  (void)state;
  struct order_state *o = the_state;
  for (size_t i = 0; i < n; i++)
    if (mz_task_set_queue(s, tasks[i], 0)) return MZ_EINVAL;
  if (o->mode == 0) {
    o->rc_null = mz_task_set_after(s, NULL, tasks[0]);
    o->rc_self = mz_task_set_after(s, tasks[0], tasks[0]);
    /* n-1 first, then n-2, ..., 0 last. */
    o->rc_ok = MZ_OK;
    for (size_t i = 0; i + 1 < n; i++) {
      int rc = mz_task_set_after(s, tasks[i], tasks[i + 1]);
      if (rc) o->rc_ok = rc;
    }
    o->rc_again_t = mz_task_set_after(s, tasks[0], tasks[n - 1]);    /* tasks[0] has its prev */
    o->rc_again_prev = mz_task_set_after(s, tasks[n - 1], tasks[1]); /* tasks[1] has its next */
  } else {
    /* tasks[1] reads what tasks[0] writes: tasks[0] after tasks[1] is a cycle. */
    o->rc_ok = mz_task_set_after(s, tasks[0], tasks[1]);
    if (o->mode == 2) return MZ_EIO; /* and the plan fails: canceled, not hung */
  }
  return 0;
}

static int order_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state, (void)ready;
  struct order_state *o = the_state;
  if (mz_task_pred_count(t)) o->rc_select = mz_task_set_after(s, t, mz_task_pred(t, 0));
  atomic_fetch_add(&o->selects, 1);
  return 0;
}

static const struct mz_policy_ops order_policy = {
    .abi = MZ_POLICY_ABI,
    .name = "test-order",
    .description = "one queue, in an order of the test's",
    .plan = order_plan,
};

static const struct mz_policy_ops select_after_policy = {
    .abi = MZ_POLICY_ABI,
    .name = "test-select-after",
    .description = "calls mz_task_set_after from select",
    .select = order_select,
};

struct stamp {
  _Atomic unsigned next;
  unsigned seq[8];
};

static int k_stamp(const mz_call *c) {
  struct stamp *st = c->user;
  unsigned id = c->args[0].u32;
  st->seq[id] = atomic_fetch_add(&st->next, 1);
  uint32_t *x = c->args[1].p;
  x[0] += id + 1;
  return 0;
}

Test(planorder, user_plan_order_is_followed) {
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &order_policy));
  struct order_state o = {.mode = 0};
  the_state = &o;
  struct stamp st = {0};
  mz_kernel *k = test_kernel(rt, "stamp", "u32 id, inout u32[] x", k_stamp, &st);
  enum { N = 4 };
  mz_buffer *b[N];
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ends[N];
  for (unsigned i = 0; i < N; i++) {
    b[i] = test_buffer_1d(rt, MZ_U32, 1, (uint32_t[]){0});
    ends[i] = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_u32(g, i), mz_value(g, b[i])}), NULL);
  }
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, N, ends), "test-order", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(o.rc_null, MZ_EINVAL);
  cr_expect_eq(o.rc_self, MZ_EINVAL);
  cr_expect_eq(o.rc_ok, MZ_OK);
  cr_expect_eq(o.rc_again_t, MZ_ESTATE);
  cr_expect_eq(o.rc_again_prev, MZ_ESTATE);
  /* Built 0..3, planned 3, 2, 1, 0 on one queue. */
  for (unsigned i = 0; i < N; i++) cr_expect_eq(st.seq[i], N - 1 - i, "node %u ran %u-th", i, st.seq[i]);
  for (unsigned i = 0; i < N; i++) {
    uint32_t v = 0;
    MZ_OK_OR_DIE(rt, mz_buffer_read(b[i], &v, sizeof v));
    cr_expect_eq(v, i + 1);
    mz_buffer_release(b[i]);
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

static int k_add1(const mz_call *c) {
  uint32_t *x = c->args[0].p;
  x[0]++;
  return 0;
}

static void cycle_run(int mode, int want) {
  mz_runtime *rt = test_runtime("cpu:1");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &order_policy));
  struct order_state o = {.mode = mode};
  the_state = &o;
  mz_kernel *k = test_kernel(rt, "add1", "inout u32[] x", k_add1, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_U32, 1, (uint32_t[]){0});
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0);
  mz_op *c = mz_apply(g, k, a, NULL);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, c, "test-order", &f));
  int st = mz_future_wait_for(f, 20ull * 1000 * 1000 * 1000);
  cr_assert_eq(st, want, "%s (%s)", mz_err_name(st), mz_future_message(f));
  cr_expect_eq(o.rc_ok, MZ_OK);
  if (want == MZ_EPOLICY) cr_expect(strstr(mz_future_message(f), "cycle") != NULL, "%s", mz_future_message(f));
  uint32_t v = 7;
  cr_expect_neq(mz_buffer_read(b, &v, sizeof v), MZ_OK, "nothing ran, so b reads back as canceled");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(planorder, a_cycle_fails_the_run) { cycle_run(1, MZ_EPOLICY); }
Test(planorder, a_cycle_in_a_failed_plan_does_not_hang) { cycle_run(2, MZ_EIO); }

Test(planorder, not_from_select) {
  mz_runtime *rt = test_runtime("cpu:1");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &select_after_policy));
  struct order_state o = {0};
  the_state = &o;
  mz_kernel *k = test_kernel(rt, "add1", "inout u32[] x", k_add1, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_U32, 1, (uint32_t[]){0});
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, k, a, NULL), "test-select-after", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(o.rc_select, MZ_ESTATE);
  uint32_t v = 0;
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, &v, sizeof v));
  cr_expect_eq(v, 2);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}
