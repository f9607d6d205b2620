/* test_hazards: the edges buffer hazards imply, in build order.
 *
 * Kernels record a start and an end sequence number (one atomic counter)
 * and sleep a little, so that an ordering the runtime failed to enforce
 * shows up as an overlap or a wrong value.  Checked on 2 workers with the
 * eager and round-robin policies: read-after-write, write-after-read and
 * write-after-write between ops built independently (each from its own
 * mz_value, so no combinator edge orders them); that a read pulls in its
 * writer lazily and not the readers before it, and that a value taken
 * after a writer runs that writer; the same hazards across two mz_schedule
 * calls on two graphs sharing a buffer; that a run keeps alive the graph
 * of a predecessor from another run, which a policy may read after that
 * run has finished and its graph was destroyed (a use-after-free that the
 * fuzzer found; ASan and valgrind report it); and mz_buffer_read (and
 * mz_buffer_write) waiting for the last writer (and readers). */
#include "common.h"

enum { N = 256, MAXID = 32 };

static _Atomic int seq;
static _Atomic int start_[MAXID], end_[MAXID];

static void reset_seq(void) {
  atomic_store(&seq, 0);
  for (int i = 0; i < MAXID; i++) {
    atomic_store(&start_[i], -1);
    atomic_store(&end_[i], -1);
  }
}

/* "out i32[] y, i32 id, i32 val, u32 ms, u64 n = sizeof(y)" */
static int write_fn(const mz_call *c) {
  int id = c->args[1].i32;
  atomic_store(&start_[id], atomic_fetch_add(&seq, 1));
  test_sleep_ms(c->args[3].u32);
  int32_t *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[4].u64; i++) y[i] = c->args[2].i32;
  atomic_store(&end_[id], atomic_fetch_add(&seq, 1));
  return 0;
}

/* "in i32[] y, out i32[] r, i32 id, u32 ms, u64 n = sizeof(y)": sleeps
 * between reading the first half and the second, so a concurrent writer
 * would tear the copy. */
static int read_fn(const mz_call *c) {
  int id = c->args[2].i32;
  atomic_store(&start_[id], atomic_fetch_add(&seq, 1));
  const int32_t *y = c->args[0].p;
  int32_t *r = c->args[1].p;
  uint64_t n = c->args[4].u64;
  for (uint64_t i = 0; i < n / 2; i++) r[i] = y[i];
  test_sleep_ms(c->args[3].u32);
  for (uint64_t i = n / 2; i < n; i++) r[i] = y[i];
  atomic_store(&end_[id], atomic_fetch_add(&seq, 1));
  return 0;
}

#define WRITE_PARAMS "out i32[] y, i32 id, i32 val, u32 ms, u64 n = sizeof(y)"
#define READ_PARAMS "in i32[] y, out i32[] r, i32 id, u32 ms, u64 n = sizeof(y)"

struct fixture {
  mz_runtime *rt;
  mz_kernel *wr, *rd;
};

static struct fixture setup(const char *devices) {
  struct fixture fx;
  fx.rt = test_runtime(devices);
  fx.wr = test_kernel(fx.rt, "write", WRITE_PARAMS, write_fn, NULL);
  fx.rd = test_kernel(fx.rt, "read", READ_PARAMS, read_fn, NULL);
  return fx;
}

static void teardown(struct fixture *fx) {
  mz_kernel_destroy(fx->wr);
  mz_kernel_destroy(fx->rd);
  mz_runtime_destroy(fx->rt);
}

static mz_op *writer(mz_graph *g, struct fixture *fx, mz_buffer *y, int id, int val, unsigned ms) {
  return mz_apply(g, fx->wr, mz_zip(g, 4, (mz_op *[]){mz_value(g, y), mz_i32(g, id), mz_i32(g, val), mz_u32(g, ms)}),
                  NULL);
}

static mz_op *reader(mz_graph *g, struct fixture *fx, mz_buffer *y, mz_buffer *r, int id, unsigned ms) {
  return mz_apply(g, fx->rd, mz_zip(g, 4, (mz_op *[]){mz_value(g, y), mz_value(g, r), mz_i32(g, id), mz_u32(g, ms)}),
                  NULL);
}

/* a finished before b started. */
#define EXPECT_BEFORE(a, b, what)                                                                        \
  cr_expect(atomic_load(&end_[a]) >= 0 && atomic_load(&start_[b]) >= 0 &&                                \
                atomic_load(&end_[a]) < atomic_load(&start_[b]),                                         \
            "%s: %s: node %d (end %d) must finish before node %d (start %d)", policy, what, a,           \
            atomic_load(&end_[a]), b, atomic_load(&start_[b]))

static void expect_all(mz_runtime *rt, mz_buffer *b, int32_t val, const char *what, const char *policy) {
  int32_t out[N];
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += out[i] != val;
  cr_expect_eq(bad, 0, "%s: %s: %d elements differ from %d (first %d)", policy, what, bad, val, out[0]);
}

static const char *const policies[] = {"eager", "round-robin"};

Test(hazards, raw_war_waw_in_build_order, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  for (unsigned p = 0; p < 2; p++) {
    const char *policy = policies[p];
    reset_seq();
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_buffer *r[3];
    for (int i = 0; i < 3; i++) r[i] = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
    /* W1, then readers R1 and R2, then W2, then R3: all built from fresh
     * values of y, so only hazards order them. */
    mz_op *w1 = writer(g, &fx, y, 0, 1, 30);
    mz_op *r1 = reader(g, &fx, y, r[0], 1, 30);
    mz_op *r2 = reader(g, &fx, y, r[1], 2, 30);
    mz_op *w2 = writer(g, &fx, y, 3, 2, 5);
    mz_op *r3 = reader(g, &fx, y, r[2], 4, 5);
    /* Join in an order unlike the build order. */
    mz_op *root = mz_join(g, 5, (mz_op *[]){r3, w2, r2, r1, w1});
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
    mz_future *f;
    cr_assert_eq(test_run(g, root, policy, &f), MZ_OK, "%s: %s", policy, mz_future_message(f));
    EXPECT_BEFORE(0, 1, "RAW");
    EXPECT_BEFORE(0, 2, "RAW");
    EXPECT_BEFORE(1, 3, "WAR");
    EXPECT_BEFORE(2, 3, "WAR");
    EXPECT_BEFORE(0, 3, "WAW");
    EXPECT_BEFORE(3, 4, "RAW");
    expect_all(fx.rt, r[0], 1, "R1 saw W1's data", policy);
    expect_all(fx.rt, r[1], 1, "R2 saw W1's data", policy);
    expect_all(fx.rt, r[2], 2, "R3 saw W2's data", policy);
    expect_all(fx.rt, y, 2, "y is W2's", policy);
    mz_future_destroy(f);
    mz_graph_destroy(g);
    mz_buffer_release(y);
    for (int i = 0; i < 3; i++) mz_buffer_release(r[i]);
  }
  teardown(&fx);
}

/* "in i32[] a, in i32[] b, out i32[] r, i32 id, u32 ms, u64 n = sizeof(a)":
 * r = a + b, with a pause between the halves (a concurrent writer of a
 * or b would tear the sum). */
static int sum2_fn(const mz_call *c) {
  int id = c->args[3].i32;
  atomic_store(&start_[id], atomic_fetch_add(&seq, 1));
  const int32_t *a = c->args[0].p, *b = c->args[1].p;
  int32_t *r = c->args[2].p;
  uint64_t n = c->args[5].u64;
  for (uint64_t i = 0; i < n / 2; i++) r[i] = a[i] + b[i];
  test_sleep_ms(c->args[4].u32);
  for (uint64_t i = n / 2; i < n; i++) r[i] = a[i] + b[i];
  atomic_store(&end_[id], atomic_fetch_add(&seq, 1));
  return 0;
}

/* One buffer read through two parameters of one apply: the task keeps a
 * single read access (its accesses then are kept apart from its buffer
 * slots), which still orders it after the writer before it and before the
 * writer after it, in a one-shot run and in re-runs of the built graph,
 * under a policy that shares the work and one that places each task. */
Test(hazards, one_buffer_read_through_two_parameters, .timeout = 60) {
  for (unsigned p = 0; p < 2; p++) {
    struct fixture fx = setup("cpu:2");
    mz_kernel *sum = test_kernel(fx.rt, "sum2", "in i32[] a, in i32[] b, out i32[] r, i32 id, u32 ms, u64 n = sizeof(a)",
                                 sum2_fn, NULL);
    const char *policy = policies[p];
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL), *r = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
    mz_op *w1 = writer(g, &fx, y, 0, 3, 20);
    mz_op *s = mz_apply(g, sum, mz_zip(g, 5, (mz_op *[]){mz_value(g, y), mz_value(g, y), mz_value(g, r), mz_i32(g, 1),
                                                       mz_u32(g, 20)}), NULL);
    mz_op *w2 = writer(g, &fx, y, 2, 5, 1);
    mz_op *root = mz_join(g, 3, (mz_op *[]){w2, s, w1});
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
    for (int run = 0; run < 3; run++) {
      reset_seq();
      mz_future *f;
      int rc = run ? mz_graph_run(g, root, policy, &f) : test_run(g, root, policy, &f);
      cr_assert_eq(rc, MZ_OK, "%s: run %d: %s", policy, run, mz_runtime_last_error(fx.rt));
      cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: run %d: %s", policy, run, mz_future_message(f));
      EXPECT_BEFORE(0, 1, run ? "RAW through both parameters, re-run" : "RAW through both parameters");
      EXPECT_BEFORE(1, 2, "WAR through both parameters");
      expect_all(fx.rt, r, 6, "the sum read W1's data twice", policy);
      expect_all(fx.rt, y, 5, "y is W2's", policy);
      mz_future_destroy(f);
    }
    mz_graph_destroy(g);
    mz_buffer_release(y);
    mz_buffer_release(r);
    mz_kernel_destroy(sum);
    teardown(&fx);
  }
}

Test(hazards, waw_only, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  for (unsigned p = 0; p < 2; p++) {
    const char *policy = policies[p];
    reset_seq();
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
    mz_op *w[4];
    for (int i = 0; i < 4; i++) w[i] = writer(g, &fx, y, i, 10 + i, i == 0 ? 40 : 5);
    mz_op *root = mz_join(g, 4, (mz_op *[]){w[3], w[1], w[2], w[0]});
    cr_assert_eq(test_run(g, root, policy, NULL), MZ_OK);
    for (int i = 0; i < 3; i++) EXPECT_BEFORE(i, i + 1, "WAW");
    expect_all(fx.rt, y, 13, "the last writer in build order wins", policy);
    mz_graph_destroy(g);
    mz_buffer_release(y);
  }
  teardown(&fx);
}

Test(hazards, war_readers_before_writer, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  for (unsigned p = 0; p < 2; p++) {
    const char *policy = policies[p];
    reset_seq();
    int32_t init[N];
    for (int i = 0; i < N; i++) init[i] = 7;
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, init);
    mz_buffer *r[4];
    for (int i = 0; i < 4; i++) r[i] = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
    mz_op *ops[5];
    for (int i = 0; i < 4; i++) ops[i] = reader(g, &fx, y, r[i], i, 20);
    ops[4] = writer(g, &fx, y, 4, 99, 0);
    /* Four readers, then a writer: the writer waits for all four. */
    cr_assert_eq(test_run(g, mz_join(g, 5, ops), policy, NULL), MZ_OK);
    for (int i = 0; i < 4; i++) {
      EXPECT_BEFORE(i, 4, "WAR");
      expect_all(fx.rt, r[i], 7, "a reader saw the data from before the writer", policy);
    }
    expect_all(fx.rt, y, 99, "y", policy);
    mz_graph_destroy(g);
    mz_buffer_release(y);
    for (int i = 0; i < 4; i++) mz_buffer_release(r[i]);
  }
  teardown(&fx);
}

/* What the observer saw of the node named "write": its predecessors, each
 * must be distinct. */
struct writer_seen {
  _Atomic unsigned npreds, distinct;
};
static void note_writer(const mz_node_record *rec, void *user) {
  struct writer_seen *w = user;
  if (strcmp(rec->name, "write")) return;
  unsigned d = 0;
  for (unsigned i = 0; i < rec->npreds; i++) {
    bool dup = false;
    for (unsigned j = 0; j < i; j++) dup |= rec->preds[j] == rec->preds[i];
    d += !dup;
  }
  atomic_store(&w->npreds, rec->npreds);
  atomic_store(&w->distinct, d);
}

Test(hazards, a_writer_after_many_readers_waits_for_each_once, .timeout = 60) {
  /* More readers than a short list is scanned for repeats (the schedule
   * then keeps a set), each named twice: as a read-before-write hazard and
   * as an explicit edge. */
  enum { R = 40 };
  struct fixture fx = setup("cpu:2");
  struct writer_seen seen = {0};
  MZ_OK_OR_DIE(fx.rt, mz_runtime_set_observer(fx.rt, &(mz_observer){.node = note_writer, .user = &seen}));
  const char *policy = "eager";
  reset_seq();
  int32_t init[N];
  for (int i = 0; i < N; i++) init[i] = 7;
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, init);
  mz_buffer *r[R];
  mz_op *ops[R];
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  for (int i = 0; i < R; i++) {
    r[i] = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    ops[i] = reader(g, &fx, y, r[i], i % (MAXID - 1), 0);
  }
  mz_op *w = writer(g, &fx, y, MAXID - 1, 99, 0);
  cr_assert_eq(mz_depend(g, w, mz_join(g, R, ops)), MZ_OK, "%s", mz_graph_message(g));
  cr_assert_eq(test_run(g, w, policy, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&seen.npreds), R, "the writer waited for %u nodes, not the %d readers",
               atomic_load(&seen.npreds), R);
  cr_expect_eq(atomic_load(&seen.distinct), atomic_load(&seen.npreds), "a predecessor was listed twice");
  for (int i = 0; i < R; i++) expect_all(fx.rt, r[i], 7, "a reader saw the data from before the writer", policy);
  expect_all(fx.rt, y, 99, "y", policy);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  for (int i = 0; i < R; i++) mz_buffer_release(r[i]);
  MZ_OK_OR_DIE(fx.rt, mz_runtime_set_observer(fx.rt, NULL));
  teardown(&fx);
}

Test(hazards, read_pulls_in_only_its_writer, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  reset_seq();
  const char *policy = "eager";
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_buffer *r[3];
  for (int i = 0; i < 3; i++) r[i] = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  writer(g, &fx, y, 0, 1, 0);
  reader(g, &fx, y, r[0], 1, 0);
  /* W2 is given y as W1 left it (a value taken after W1), so it follows
   * W1; the reader R1 between them is not needed by anything. */
  writer(g, &fx, y, 2, 2, 0);
  mz_op *r3 = reader(g, &fx, y, r[2], 3, 0);
  cr_assert_eq(test_run(g, r3, policy, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&start_[1]), -1, "the first reader is not needed");
  EXPECT_BEFORE(0, 2, "WAW");
  EXPECT_BEFORE(2, 3, "RAW");
  expect_all(fx.rt, r[2], 2, "R3 saw W2's data", policy);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  for (int i = 0; i < 3; i++) mz_buffer_release(r[i]);
  teardown(&fx);
}

Test(hazards, value_runs_the_writer_it_follows, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  reset_seq();
  const char *policy = "round-robin";
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL), *other = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  mz_op *before = mz_value(g, y);
  writer(g, &fx, y, 0, 6, 20);
  writer(g, &fx, other, 1, 1, 0);
  mz_op *after = mz_value(g, y);
  /* The value taken before the writer needs nothing. */
  cr_assert_eq(test_run(g, before, policy, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&start_[0]), -1);
  /* The value taken after it runs it (and not the unrelated writer). */
  mz_future *f;
  cr_assert_eq(test_run(g, after, policy, &f), MZ_OK);
  cr_expect_geq(atomic_load(&end_[0]), 0, "the writer ran");
  cr_expect_eq(atomic_load(&start_[1]), -1, "the other buffer's writer did not");
  cr_expect_eq(mz_future_result(f, 0), y);
  expect_all(fx.rt, y, 6, "y", policy);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_buffer_release(other);
  teardown(&fx);
}

/* ---- across runs ---- */

Test(hazards, across_two_schedules, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  for (unsigned p = 0; p < 2; p++) {
    const char *policy = policies[p];
    reset_seq();
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_buffer *r1 = test_buffer_1d(fx.rt, MZ_I32, N, NULL), *r2 = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g1, *g2, *g3, *g4;
    mz_future *f1, *f2, *f3, *f4;
    /* RAW: a slow writer in run 1, a reader in run 2. */
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g1));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g1, writer(g1, &fx, y, 0, 5, 60), policy, &f1));
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g2));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g2, reader(g2, &fx, y, r1, 1, 0), policy, &f2));
    /* WAR: a slow reader in run 3, a writer in run 4. */
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g3));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g3, reader(g3, &fx, y, r2, 2, 60), policy, &f3));
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g4));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g4, writer(g4, &fx, y, 3, 9, 0), policy, &f4));
    /* Wait in reverse order. */
    cr_expect_eq(mz_future_wait(f4), MZ_OK);
    cr_expect_eq(mz_future_wait(f3), MZ_OK);
    cr_expect_eq(mz_future_wait(f2), MZ_OK);
    cr_expect_eq(mz_future_wait(f1), MZ_OK);
    EXPECT_BEFORE(0, 1, "RAW across runs");
    EXPECT_BEFORE(0, 2, "RAW across runs");
    EXPECT_BEFORE(2, 3, "WAR across runs");
    EXPECT_BEFORE(1, 3, "WAR across runs");
    EXPECT_BEFORE(0, 3, "WAW across runs");
    expect_all(fx.rt, r1, 5, "run 2 read run 1's data", policy);
    expect_all(fx.rt, r2, 5, "run 3 read run 1's data", policy);
    expect_all(fx.rt, y, 9, "run 4 wrote last", policy);
    mz_future_destroy(f1);
    mz_future_destroy(f2);
    mz_future_destroy(f3);
    mz_future_destroy(f4);
    mz_graph_destroy(g1);
    mz_graph_destroy(g2);
    mz_graph_destroy(g3);
    mz_graph_destroy(g4);
    mz_buffer_release(y);
    mz_buffer_release(r1);
    mz_buffer_release(r2);
  }
  teardown(&fx);
}

/* Many later runs add edges to one writer in flight: its successor list
 * grows past its run's own (none, or one in-run reader) on the heap, past
 * each power of two, and every reader and the last writer still wait for
 * it; the last writer waits for every reader. */
Test(hazards, many_runs_wait_for_one_writer_in_flight, .timeout = 60) {
  enum { NR = 12 };
  struct fixture fx = setup("cpu:2");
  for (unsigned v = 0; v < 4; v++) {
    const char *policy = policies[v & 1];
    bool inrun = v >= 2; /* the writer's run has a reader of its own */
    reset_seq();
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL), *r[NR + 1];
    mz_graph *g[NR + 2];
    mz_future *f[NR + 2];
    for (unsigned k = 0; k <= NR; k++) r[k] = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g[0]));
    mz_op *w = writer(g[0], &fx, y, 0, 7, 200);
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g[0], inrun ? reader(g[0], &fx, y, r[0], 1, 0) : w, policy, &f[0]));
    for (unsigned k = 1; k <= NR; k++) {
      MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g[k]));
      MZ_OK_OR_DIE(fx.rt, mz_schedule(g[k], reader(g[k], &fx, y, r[k], (int)k + 1, 0), policy, &f[k]));
    }
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g[NR + 1]));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g[NR + 1], writer(g[NR + 1], &fx, y, NR + 2, 9, 0), policy, &f[NR + 1]));
    for (unsigned k = NR + 2; k-- > 0;) cr_expect_eq(mz_future_wait(f[k]), MZ_OK);
    for (unsigned k = inrun ? 0 : 1; k <= NR; k++) {
      EXPECT_BEFORE(0, (int)k + 1, "RAW across runs");
      EXPECT_BEFORE((int)k + 1, NR + 2, "WAR across runs");
      expect_all(fx.rt, r[k], 7, "a reader read the writer's data", policy);
    }
    EXPECT_BEFORE(0, NR + 2, "WAW across runs");
    expect_all(fx.rt, y, 9, "the last writer wrote last", policy);
    for (unsigned k = 0; k < NR + 2; k++) {
      mz_future_destroy(f[k]);
      mz_graph_destroy(g[k]);
    }
    for (unsigned k = 0; k <= NR; k++) mz_buffer_release(r[k]);
    mz_buffer_release(y);
  }
  teardown(&fx);
}

Test(hazards, waw_across_runs_graph_destroyed_early, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  for (unsigned p = 0; p < 2; p++) {
    const char *policy = policies[p];
    reset_seq();
    mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
    mz_graph *g1, *g2;
    mz_future *f1, *f2;
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g1));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g1, writer(g1, &fx, y, 0, 1, 60), policy, &f1));
    /* The first graph and future go away while their run is in flight. */
    mz_graph_destroy(g1);
    mz_future_destroy(f1);
    MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g2));
    MZ_OK_OR_DIE(fx.rt, mz_schedule(g2, writer(g2, &fx, y, 1, 2, 0), policy, &f2));
    cr_expect_eq(mz_future_wait(f2), MZ_OK);
    EXPECT_BEFORE(0, 1, "WAW across runs");
    expect_all(fx.rt, y, 2, "the later run wrote last", policy);
    mz_future_destroy(f2);
    mz_graph_destroy(g2);
    mz_buffer_release(y);
  }
  teardown(&fx);
}

/* A policy that defers every node that is not ready, then reads all of its
 * predecessors (as eager, ws and dmda do) when it is. */
static int peek_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  if (!ready) return MZ_POLICY_DEFER;
  unsigned q = 0;
  for (unsigned i = 0; i < mz_task_pred_count(t); i++) {
    mz_task *p = mz_task_pred(t, i);
    q += (unsigned)(mz_task_queue(p) + (int)strlen(mz_task_name(p)) + (int)mz_task_edge_bytes(t, i));
  }
  return (int)(q % mz_sched_queue_count(s));
}

static const struct mz_policy_ops peek_policy = {
    .abi = MZ_POLICY_ABI, .name = "peek", .description = "reads predecessors at ready time", .select = peek_select};

static int gate_fn(const mz_call *c) {
  test_wait_flag(c->user, 20000);
  return 0;
}

Test(hazards, predecessor_graph_outlives_its_run, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  const char *policy = "peek";
  MZ_OK_OR_DIE(fx.rt, mz_policy_register(fx.rt, &peek_policy));
  reset_seq();
  _Atomic int gate = 0;
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g1, *g2;
  mz_future *f1, *f2;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g1));
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g1, writer(g1, &fx, y, 0, 1, 100), policy, &f1));
  /* Node 1 waits for node 0 (WAW, across runs and graphs) and for a gate
   * in its own run, so it becomes ready only after node 0's run ended. */
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g2));
  mz_op *gated = mz_host(g2, gate_fn, &gate, NULL);
  mz_op *w1 = writer(g2, &fx, y, 1, 2, 0);
  MZ_OK_OR_DIE(fx.rt, mz_depend(g2, w1, gated));
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g2, w1, policy, &f2));
  cr_expect_eq(mz_future_wait(f1), MZ_OK);
  /* The first run is over: without a hold on it, its graph goes now. */
  mz_future_destroy(f1);
  mz_graph_destroy(g1);
  atomic_store(&gate, 1);
  cr_expect_eq(mz_future_wait(f2), MZ_OK, "%s", mz_future_message(f2));
  EXPECT_BEFORE(0, 1, "WAW across runs");
  expect_all(fx.rt, y, 2, "the later run wrote last", policy);
  mz_future_destroy(f2);
  mz_graph_destroy(g2);
  mz_buffer_release(y);
  teardown(&fx);
}

/* ---- blocking reads and writes ---- */

Test(hazards, buffer_read_waits_for_last_writer, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  reset_seq();
  const char *policy = "eager";
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g;
  mz_future *f;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  mz_op *w1 = writer(g, &fx, y, 0, 3, 50);
  mz_op *w2 = writer(g, &fx, y, 1, 7, 50);
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g, mz_join(g, 2, (mz_op *[]){w1, w2}), policy, &f));
  mz_future_destroy(f); /* no one waits on the future */
  expect_all(fx.rt, y, 7, "mz_buffer_read saw the last writer's data", policy);
  cr_expect_geq(atomic_load(&end_[1]), 0, "the writer had finished");
  mz_graph_destroy(g);
  mz_buffer_release(y);
  teardown(&fx);
}

Test(hazards, buffer_write_waits_for_readers, .timeout = 30) {
  struct fixture fx = setup("cpu:2");
  reset_seq();
  const char *policy = "round-robin";
  int32_t init[N], repl[N];
  for (int i = 0; i < N; i++) {
    init[i] = 4;
    repl[i] = 8;
  }
  mz_buffer *y = test_buffer_1d(fx.rt, MZ_I32, N, init), *r = test_buffer_1d(fx.rt, MZ_I32, N, NULL);
  mz_graph *g;
  mz_future *f;
  MZ_OK_OR_DIE(fx.rt, mz_graph_create(fx.rt, &g));
  MZ_OK_OR_DIE(fx.rt, mz_schedule(g, reader(g, &fx, y, r, 0, 80), policy, &f));
  MZ_OK_OR_DIE(fx.rt, mz_buffer_write(y, repl, sizeof repl));
  cr_expect_geq(atomic_load(&end_[0]), 0, "mz_buffer_write returned after the reader finished");
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  expect_all(fx.rt, r, 4, "the reader saw the old data", policy);
  expect_all(fx.rt, y, 8, "the write replaced it", policy);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_buffer_release(r);
  teardown(&fx);
}
