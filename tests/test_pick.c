/* test_pick: policies that order their queues (ABI 2's pick), and the
 * registry's ABI rules.
 *
 * - dmdas runs a queue's ready nodes in upward-rank order: on one
 *   simulated device, a root feeds six leaves (built first) and a chain of
 *   four nodes (built last); the queue runs the root, the whole chain, then
 *   the leaves in arrival order.  Under dmda, which has no pick, the same
 *   run starts the last chain node after some leaf: the order is pick's
 *   doing.  Records come from an observer (virtual start times on the sim:
 *   an order, not a timing).
 * - A user pick on one CPU worker: every node passes through pick, which
 *   sees only ready nodes of its queue; the nodes pending when the root
 *   ends run in the order pick chose (highest id first), as each host
 *   node records.
 * - A long list (1,200 ready nodes, each with a successor that joins the
 *   list as it runs) is shown to pick MZ_POLICY_PICK_MAX at a time; each
 *   node runs once, after its predecessor; dmdas runs 20,000 ready nodes.
 * - A pick that returns an index past the list fails that node with
 *   MZ_EPOLICY and a message; the future resolves (no hang).
 * - Two pick policies whose runs share a queue: both runs finish with
 *   every node run once.  So do a lean eager run (re-run, every node
 *   shared, ended through the short end) and dmdas runs on one queue.
 * - ABI: an ABI 1 table (one that ends at done, in memory of exactly that
 *   size, so reading a field past it would be caught by ASan and
 *   valgrind) registers and runs; ABI 0 and MZ_POLICY_ABI + 1 give
 *   MZ_EINVAL with a message naming the ABI. */
#include <pthread.h>
#include <stddef.h>
#include <unistd.h>

#include "common.h"
#include <maize/observer.h>

TestSuite(pick, .timeout = 120);

#define OK(rt, call)                                                                             \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    cr_assert_eq(rc_, MZ_OK, "%s: %s (%s)", #call, mz_err_name(rc_), mz_runtime_last_error(rt)); \
  } while (0)

/* ---- node records ---- */

struct rec {
  char name[16];
  uint64_t start;
  int status;
};

struct log {
  pthread_mutex_t m;
  struct rec v[64];
  unsigned n;
};

static void on_node(const mz_node_record *r, void *user) {
  struct log *l = user;
  pthread_mutex_lock(&l->m);
  if (l->n < 64) {
    snprintf(l->v[l->n].name, sizeof l->v[l->n].name, "%s", r->name);
    l->v[l->n].start = r->start_ns;
    l->v[l->n].status = r->status;
    l->n++;
  }
  pthread_mutex_unlock(&l->m);
}

static int by_start(const void *a, const void *b) {
  const struct rec *x = a, *y = b;
  return (x->start > y->start) - (x->start < y->start);
}

/* ---- dmdas on a simulated device ---- */

static double arg0(const mz_call *c) { return c->args[0].f64; }

/* The names of the nodes in the order they started on one sim device. */
static void rank_case(const char *policy, struct log *l) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  mz_runtime *rt = NULL;
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "sim:dev*1@speed=1", .quiet = true}, &rt));
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->m, NULL);
  OK(rt, mz_runtime_set_observer(rt, &(mz_observer){.node = on_node, .user = l}));
  mz_kernel *k[3];
  const char *names[3] = {"root", "leaf", "chain"};
  const char *params[3] = {"f64 flops, out u8[] o", "f64 flops, in u8[] a, out u8[] o", "f64 flops, in u8[] a, out u8[] o"};
  for (int i = 0; i < 3; i++)
    OK(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = names[i], .params = params[i], .cost = {.flops = arg0}}, &k[i]));
  enum { NL = 6, NC = 4 };
  mz_buffer *b[1 + NL + NC];
  size_t n[1] = {64};
  for (int i = 0; i < 1 + NL + NC; i++) OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &b[i]));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *fl = mz_f64(g, 1000), *half = mz_f64(g, 500);
  mz_op *ends[NL + 1];
  mz_apply(g, k[0], mz_zip(g, 2, (mz_op *[]){fl, mz_value(g, b[0])}), NULL);
  for (int i = 0; i < NL; i++) /* leaves first: in build order they come before the chain */
    ends[i] = mz_apply(g, k[1], mz_zip(g, 3, (mz_op *[]){half, mz_value(g, b[0]), mz_value(g, b[1 + i])}), NULL);
  mz_op *c = NULL;
  for (int i = 0; i < NC; i++)
    c = mz_apply(g, k[2], mz_zip(g, 3, (mz_op *[]){fl, mz_value(g, b[i ? NL + i : 0]), mz_value(g, b[1 + NL + i])}),
                 NULL);
  ends[NL] = c;
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, NL + 1, ends), policy, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", policy, mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int i = 0; i < 1 + NL + NC; i++) mz_buffer_release(b[i]);
  for (int i = 0; i < 3; i++) mz_kernel_destroy(k[i]);
  mz_runtime_destroy(rt); /* every record delivered */
  cr_assert_eq(l->n, 1 + NL + NC, "%s: %u records", policy, l->n);
  qsort(l->v, l->n, sizeof l->v[0], by_start);
  pthread_mutex_destroy(&l->m);
}

Test(pick, dmdas_runs_the_queue_in_upward_rank_order) {
  struct log l;
  rank_case("dmdas", &l);
  /* Upward ranks (ns on the one device): the chain 4000, 3000, 2000,
   * 1000; each leaf 500.  The chain's head is ready with the leaves, and
   * each later chain node when the one before ends, while the leaves still
   * wait: pick takes it ahead of them every time. */
  const char *want[] = {"root", "chain", "chain", "chain", "chain", "leaf", "leaf", "leaf", "leaf", "leaf", "leaf"};
  for (unsigned i = 0; i < l.n; i++)
    cr_expect_str_eq(l.v[i].name, want[i], "position %u: %s, want %s", i, l.v[i].name, want[i]);
}

Test(pick, dmda_without_pick_runs_leaves_before_the_chain) {
  struct log l;
  rank_case("dmda", &l);
  /* No pick: the queue runs nodes as they were placed.  The second chain
   * node is ready only once the first ended, behind the leaves queued at
   * the root's end, so some leaf starts before it. */
  unsigned first_leaf = l.n, second_chain = l.n, chains = 0;
  for (unsigned i = 0; i < l.n; i++) {
    if (!strcmp(l.v[i].name, "leaf") && first_leaf == l.n) first_leaf = i;
    if (!strcmp(l.v[i].name, "chain") && ++chains == 2) second_chain = i;
  }
  cr_expect_lt(first_leaf, second_chain, "dmda ran the chain ahead of the leaves: the dmdas case shows nothing");
}

/* ---- user picks on a CPU worker ---- */

static int ready_on_zero(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)s;
  (void)t;
  return ready ? 0 : MZ_POLICY_DEFER;
}

struct pick_seen {
  _Atomic unsigned calls, sum_n, not_ready, wrong_queue;
};
static struct pick_seen seen; /* one test per process (Criterion forks) */

static void look(unsigned q, mz_task *const pending[], unsigned n) {
  atomic_fetch_add(&seen.calls, 1);
  atomic_fetch_add(&seen.sum_n, n);
  for (unsigned i = 0; i < n; i++) {
    if (mz_task_queue(pending[i]) != (int)q) atomic_fetch_add(&seen.wrong_queue, 1);
    for (unsigned p = 0; p < mz_task_pred_count(pending[i]); p++)
      if (!mz_task_finished(mz_task_pred(pending[i], p))) atomic_fetch_add(&seen.not_ready, 1);
  }
}

/* The newest node first (highest id). */
static unsigned pick_newest(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  (void)state;
  (void)s;
  look(q, pending, n);
  unsigned k = 0;
  for (unsigned i = 1; i < n; i++)
    if (mz_task_id(pending[i]) > mz_task_id(pending[k])) k = i;
  return k;
}

static unsigned pick_oldest(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  (void)state;
  (void)s;
  look(q, pending, n);
  return 0;
}

static unsigned pick_nothing(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  (void)state;
  (void)s;
  (void)q;
  (void)pending;
  return n;
}

static const struct mz_policy_ops newest_policy = {
    .abi = MZ_POLICY_ABI, .name = "test-newest", .select = ready_on_zero, .pick = pick_newest};
static const struct mz_policy_ops oldest_policy = {
    .abi = MZ_POLICY_ABI, .name = "test-oldest", .select = ready_on_zero, .pick = pick_oldest};
static const struct mz_policy_ops nothing_policy = {
    .abi = MZ_POLICY_ABI, .name = "test-pick-nothing", .select = ready_on_zero, .pick = pick_nothing};

struct stamp {
  _Atomic unsigned *next;
  unsigned *order; /* order[k]: the id of the k-th node to run */
  unsigned id;
  _Atomic unsigned *runs;
  unsigned sleep_us;
};

static int k_stamp(const mz_call *c) {
  struct stamp *st = c->user;
  if (st->sleep_us) usleep(st->sleep_us);
  unsigned k = atomic_fetch_add(st->next, 1);
  if (st->order) st->order[k] = st->id;
  atomic_fetch_add(&st->runs[st->id], 1);
  return 0;
}

enum { FAN = 8 };

/* A root and FAN nodes after it, stamped in the order they run. */
static mz_op *fan(mz_graph *g, struct stamp *st, _Atomic unsigned *next, unsigned *order, _Atomic unsigned *runs,
                  unsigned sleep_us) {
  mz_op *ends[FAN];
  for (unsigned i = 0; i <= FAN; i++) st[i] = (struct stamp){next, order, i, runs, sleep_us};
  mz_op *root = mz_host(g, k_stamp, &st[0], NULL);
  for (unsigned i = 1; i <= FAN; i++) {
    ends[i - 1] = mz_host(g, k_stamp, &st[i], NULL);
    cr_assert_eq(mz_depend(g, ends[i - 1], root), MZ_OK);
  }
  return mz_join(g, FAN, ends);
}

Test(pick, user_pick_orders_the_ready_nodes) {
  mz_runtime *rt = test_runtime("cpu:1");
  OK(rt, mz_policy_register(rt, &newest_policy));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  struct stamp st[FAN + 1];
  _Atomic unsigned next = 0, runs[FAN + 1] = {0};
  unsigned order[FAN + 1] = {0};
  mz_op *end = fan(g, st, &next, order, runs, 0);
  mz_future *f;
  OK(rt, mz_schedule(g, end, "test-newest", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  /* The root, then the fan newest first: all FAN were ready together, when
   * the root ended, and the queue took them one at a time. */
  cr_expect_eq(order[0], 0);
  for (unsigned k = 1; k <= FAN; k++) cr_expect_eq(order[k], FAN + 1 - k, "position %u ran node %u", k, order[k]);
  for (unsigned i = 0; i <= FAN; i++) cr_expect_eq(runs[i], 1, "node %u ran %u times", i, runs[i]);
  cr_expect_eq(seen.calls, FAN + 1, "every node passes through pick once");
  cr_expect_eq(seen.sum_n, 1 + FAN * (FAN + 1) / 2, "pick saw the root alone, then the fan shrinking by one");
  cr_expect_eq(seen.not_ready, 0);
  cr_expect_eq(seen.wrong_queue, 0);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

Test(pick, a_bad_pick_fails_the_node) {
  mz_runtime *rt = test_runtime("cpu:1");
  OK(rt, mz_policy_register(rt, &nothing_policy));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  struct stamp st[FAN + 1];
  _Atomic unsigned next = 0, runs[FAN + 1] = {0};
  mz_op *end = fan(g, st, &next, NULL, runs, 0);
  mz_future *f;
  OK(rt, mz_schedule(g, end, "test-pick-nothing", &f));
  cr_assert_eq(mz_future_wait(f), MZ_EPOLICY);
  cr_expect(strstr(mz_future_message(f), "pick"), "%s", mz_future_message(f));
  cr_expect_eq(next, 0, "no node ran");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

Test(pick, two_pick_policies_share_a_queue) {
  mz_runtime *rt = test_runtime("cpu:1");
  OK(rt, mz_policy_register(rt, &newest_policy));
  OK(rt, mz_policy_register(rt, &oldest_policy));
  mz_graph *g[2];
  struct stamp st[2][FAN + 1];
  _Atomic unsigned next = 0, runs[2][FAN + 1] = {{0}};
  mz_op *end[2];
  mz_future *f[2];
  for (int i = 0; i < 2; i++) {
    OK(rt, mz_graph_create(rt, &g[i]));
    end[i] = fan(g[i], st[i], &next, NULL, runs[i], 200);
  }
  OK(rt, mz_schedule(g[0], end[0], "test-newest", &f[0]));
  OK(rt, mz_schedule(g[1], end[1], "test-oldest", &f[1]));
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(mz_future_wait(f[i]), MZ_OK, "%s", mz_future_message(f[i]));
    mz_future_destroy(f[i]);
    for (unsigned k = 0; k <= FAN; k++) cr_expect_eq(runs[i][k], 1, "run %d node %u ran %u times", i, k, runs[i][k]);
    mz_graph_destroy(g[i]);
  }
  cr_expect_eq(next, 2 * (FAN + 1));
  cr_expect_eq(seen.not_ready, 0);
  cr_expect_eq(seen.wrong_queue, 0);
  mz_runtime_destroy(rt);
}

/* A long pending list is shown in windows: a root feeds LONG nodes, each
 * with one successor, on one CPU worker, under a pick that takes the
 * newest node of what it is shown.  pick never sees more than
 * MZ_POLICY_PICK_MAX nodes, sees that many while more are pending, and
 * every node runs once, each successor after its node: the list keeps
 * its nodes as the picks take them from inside the window and the
 * successors join at its end. */
enum { LONG = 1200 };
static _Atomic unsigned most_seen;
static unsigned pick_newest_seen(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  unsigned m = atomic_load(&most_seen);
  while (n > m && !atomic_compare_exchange_weak(&most_seen, &m, n)) {
  }
  return pick_newest(state, s, q, pending, n);
}
static const struct mz_policy_ops newest_seen_policy = {
    .abi = MZ_POLICY_ABI, .name = "test-newest-seen", .select = ready_on_zero, .pick = pick_newest_seen};

Test(pick, a_long_pending_list_is_shown_in_windows) {
  mz_runtime *rt = test_runtime("cpu:1");
  OK(rt, mz_policy_register(rt, &newest_seen_policy));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  static struct stamp st[2 * LONG + 1];
  static _Atomic unsigned runs[2 * LONG + 1];
  static unsigned order[2 * LONG + 1];
  _Atomic unsigned next = 0;
  static mz_op *ends[LONG];
  for (unsigned i = 0; i <= 2 * LONG; i++) st[i] = (struct stamp){&next, order, i, runs, 0};
  mz_op *root = mz_host(g, k_stamp, &st[0], NULL);
  for (unsigned i = 0; i < LONG; i++) {
    mz_op *a = mz_host(g, k_stamp, &st[1 + i], NULL);
    ends[i] = mz_host(g, k_stamp, &st[1 + LONG + i], NULL);
    cr_assert_eq(mz_depend(g, a, root), MZ_OK);
    cr_assert_eq(mz_depend(g, ends[i], a), MZ_OK);
  }
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, LONG, ends), "test-newest-seen", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  cr_expect_eq(next, 2 * LONG + 1);
  cr_expect_eq(atomic_load(&most_seen), MZ_POLICY_PICK_MAX, "pick was shown at most %u nodes", atomic_load(&most_seen));
  cr_expect_eq(seen.calls, 2 * LONG + 1, "every node passes through pick once");
  cr_expect_eq(seen.not_ready, 0);
  cr_expect_eq(seen.wrong_queue, 0);
  static unsigned pos[2 * LONG + 1];
  for (unsigned k = 0; k <= 2 * LONG; k++) pos[order[k]] = k;
  for (unsigned i = 0; i <= 2 * LONG; i++) cr_assert_eq(runs[i], 1, "node %u ran %u times", i, runs[i]);
  for (unsigned i = 0; i < LONG; i++)
    cr_assert_lt(pos[1 + i], pos[1 + LONG + i], "node %u ran before its predecessor", 1 + LONG + i);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* dmdas on many independent nodes (each pick is shown a window, not the
 * whole list of ready nodes): every node runs once. */
static int k_count(const mz_call *c) {
  atomic_fetch_add((_Atomic unsigned *)c->user, 1);
  return 0;
}

Test(pick, dmdas_on_many_ready_nodes) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  enum { MANY = 20000 };
  static _Atomic unsigned count;
  static mz_op *v[MANY];
  for (unsigned i = 0; i < MANY; i++) v[i] = mz_host(g, k_count, (void *)&count, NULL);
  mz_op *root = mz_join(g, MANY, v);
  for (int r = 0; r < 2; r++) {
    mz_future *f;
    OK(rt, mz_graph_run(g, root, "dmdas", &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
    mz_future_destroy(f);
    cr_assert_eq(atomic_load(&count), (unsigned)(r + 1) * MANY);
  }
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* A lean run (eager, replayed, every node shared with the CPU workers:
 * its nodes end through the short end) beside runs of dmdas, a pick
 * policy, on one CPU queue: the pick runs' nodes pend on the queue while
 * the lean run's nodes hold it, and are served as those end, as by any
 * node's end.  Every run finishes, every increment counted. */
static int k_add1(const mz_call *c) {
  /* Long enough (some microseconds) that the other run's nodes become
   * ready while this one holds the queue. */
  volatile unsigned spin = 0;
  for (unsigned i = 0; i < 20000; i++) spin += i;
  ((int32_t *)c->args[0].p)[0] += 1;
  return 0;
}

Test(pick, a_lean_run_beside_a_pick_run_on_one_queue) {
  enum { NA = 300, NB = 40, RUNS = 8 };
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "add1", "inout i32[] x", k_add1, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1, (int32_t[]){0});
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 1, (int32_t[]){0});
  mz_graph *ga, *gb;
  OK(rt, mz_graph_create(rt, &ga));
  OK(rt, mz_graph_create(rt, &gb));
  mz_op *ra = mz_value(ga, a), *rb = mz_value(gb, b);
  for (int i = 0; i < NA; i++) ra = mz_unzip(ga, mz_apply(ga, k, ra, NULL), 0);
  for (int i = 0; i < NB; i++) rb = mz_unzip(gb, mz_apply(gb, k, rb, NULL), 0);
  for (int r = 0; r < RUNS; r++) {
    mz_future *fa, *fb;
    OK(rt, mz_graph_run(ga, ra, "eager", &fa));
    OK(rt, mz_graph_run(gb, rb, "dmdas", &fb));
    cr_assert_eq(mz_future_wait(fa), MZ_OK, "%s", mz_future_message(fa));
    cr_assert_eq(mz_future_wait(fb), MZ_OK, "%s", mz_future_message(fb));
    mz_future_destroy(fa);
    mz_future_destroy(fb);
  }
  int32_t va = 0, vb = 0;
  OK(rt, mz_buffer_read(a, &va, sizeof va));
  OK(rt, mz_buffer_read(b, &vb, sizeof vb));
  cr_expect_eq(va, NA * RUNS);
  cr_expect_eq(vb, NB * RUNS);
  mz_graph_destroy(ga);
  mz_graph_destroy(gb);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- ABI versions ---- */

/* The table as ABI 1 laid it out: it ends at done. */
struct policy_v1 {
  unsigned abi;
  const char *name;
  const char *description;
  int (*init)(const mz_sched *s, void **state);
  void (*fini)(void *state);
  int (*plan)(void *state, const mz_sched *s, mz_task *const tasks[], size_t n);
  int (*select)(void *state, const mz_sched *s, mz_task *t, bool ready);
  void (*done)(void *state, const mz_sched *s, const mz_task *t, unsigned q, uint64_t ns);
};
_Static_assert(sizeof(struct policy_v1) == offsetof(struct mz_policy_ops, pick), "ABI 1 is ABI 2 up to pick");

static int any_queue(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)ready;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0;
}

Test(pick, abi1_tables_register_and_run) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct policy_v1 *v1 = malloc(sizeof *v1); /* exactly ABI 1's size: a read past it is caught */
  cr_assert_not_null(v1);
  *v1 = (struct policy_v1){.abi = 1, .name = "test-abi1", .description = "an ABI 1 table", .select = any_queue};
  OK(rt, mz_policy_register(rt, (const struct mz_policy_ops *)(void *)v1));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  struct stamp st[FAN + 1];
  _Atomic unsigned next = 0, runs[FAN + 1] = {0};
  mz_op *end = fan(g, st, &next, NULL, runs, 0);
  mz_future *f;
  OK(rt, mz_schedule(g, end, "test-abi1", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  for (unsigned i = 0; i <= FAN; i++) cr_expect_eq(runs[i], 1);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
  free(v1); /* tables must outlive the runtime */
}

Test(pick, abi_out_of_range_is_einval) {
  mz_runtime *rt = test_runtime("cpu:1");
  const unsigned bad[] = {0, MZ_POLICY_ABI + 1, 1000};
  for (unsigned i = 0; i < 3; i++) {
    struct mz_policy_ops ops = newest_policy;
    ops.abi = bad[i];
    cr_expect_eq(mz_policy_register(rt, &ops), MZ_EINVAL, "abi %u", bad[i]);
    cr_expect(strstr(mz_runtime_last_error(rt), "ABI"), "%s", mz_runtime_last_error(rt));
  }
  for (unsigned i = 0; mz_policy_name(rt, i); i++) cr_expect_str_neq(mz_policy_name(rt, i), "test-newest");
  /* ABI 2 with pick and neither select nor plan is still no policy. */
  struct mz_policy_ops ops = {.abi = MZ_POLICY_ABI, .name = "only-pick", .pick = pick_oldest};
  cr_expect_eq(mz_policy_register(rt, &ops), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "only-pick"), "%s", mz_runtime_last_error(rt));
  mz_runtime_destroy(rt);
}
