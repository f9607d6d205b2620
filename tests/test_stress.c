/* test_stress: large graphs and many runs, checked node by node.
 *
 * Every task increments its own slot of a host counter array (indexed by
 * a scalar argument) and every slot must be exactly 1 at the end; every
 * task also computes a value from its inputs, compared with a serial
 * evaluation of the same graph.  The shapes:
 *
 *  - chain: 1,000,000 tasks updating one buffer in place (inout), ordered
 *    only by maize's write-after-write hazards; each records the value it
 *    saw, so the order is checked exactly;
 *  - fan-out: one writer and 1,000,000 readers of its buffer (read after
 *    write), joined by one mz_join;
 *  - random DAG: nodes with a mean of 4 predecessors each, drawn from
 *    earlier nodes, given as mz_depend edges; a node's value is a hash of
 *    its index plus its predecessors' values;
 *  - futures: 16 threads submit 100,000 single-task runs in all, each
 *    from its own graph; every task waits for a gate, so all 100,000
 *    futures are outstanding (polled MZ_EAGAIN) before any finishes;
 *  - cycles: 1,000 runtimes created, used for one task and destroyed.
 *
 * After each test tears its runtime down, the resident set must be back
 * at its baseline (taken after one warm-up runtime, so libraries hwloc
 * loads are counted in it) within RSS_SLACK_MIB, after malloc_trim(0):
 * glibc keeps some freed memory in its arenas (one per thread that
 * allocated) and in fragmented heap tops that trim cannot return, so the
 * tolerance is a few MiB, far below what a per-node or per-run leak of
 * these sizes would leave (tens to hundreds of MiB).  The largest seen:
 * after the 1,000,000-reader fan-out, RSS stays ~6 MiB above baseline,
 * and malloc_stats() ($MZ_STRESS_MALLOC_STATS=1) shows one worker
 * thread's arena holding 12 MiB from the system with 3 KiB in use (0.7
 * MiB in use in the whole process).  Not checked in
 * sanitizer builds (see check_rss).
 *
 * Sizes are multiplied by $MZ_STRESS_SCALE (0 < scale <= 1; meson sets it
 * for sanitizer builds, where a node costs several times more time and
 * memory).  Each test prints the sizes it used and its figures on stderr
 * ("stress: ..."); the figures are not asserted. */
#include <malloc.h>
#include <stdlib.h>
#include <pthread.h>
#include <unistd.h>
#include <string.h>

#include "common.h"

#define RSS_SLACK_MIB 24.0
#define DEVICES "cpu:2"

static double stress_scale(void) {
  const char *s = getenv("MZ_STRESS_SCALE");
  double v = s ? atof(s) : 1.0;
  return v > 0 && v <= 1 ? v : 1.0;
}

static size_t scaled(size_t n) {
  size_t m = (size_t)((double)n * stress_scale());
  return m ? m : 1;
}

static double rss_mib(void) {
  malloc_trim(0);
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  cr_assert_not_null(f);
  cr_assert_eq(fscanf(f, "%ld %ld", &size, &resident), 2);
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static double secs_since(uint64_t t0) { return (double)(test_now_ns() - t0) / 1e9; }

/* One runtime created and destroyed before the baseline, so that what the
 * first one loads for good (hwloc's topology plugins, libraries) is in it. */
static double rss_baseline(void) {
  mz_runtime *rt = test_runtime(DEVICES);
  mz_runtime_destroy(rt);
  return rss_mib();
}

/* The sanitizers' allocators keep freed memory (ASan's quarantine, TSan's
 * caches) and ignore malloc_trim, and so does valgrind's, whose own memory
 * counts in the process's RSS besides: the RSS is only checked without
 * them; their leak checkers (LeakSanitizer at exit, memcheck) stand in for
 * it.  Valgrind is seen by the preload it puts in the environment. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKED false
#else
#define RSS_CHECKED (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "vgpreload"))
#endif

static void check_rss(const char *what, double base) {
  double after = rss_mib();
  /* $MZ_STRESS_MALLOC_STATS=1: glibc's per-arena figures (in use versus
   * held from the system), to tell allocator caching from a leak. */
  if (getenv("MZ_STRESS_MALLOC_STATS")) malloc_stats();
  fprintf(stderr, "stress: %s: RSS baseline %.1f MiB, after teardown %.1f MiB%s\n", what, base, after,
          RSS_CHECKED ? "" : " (not checked under a sanitizer or valgrind)");
  if (RSS_CHECKED)
    cr_expect_leq(after, base + RSS_SLACK_MIB, "%s: RSS %.1f MiB after teardown, baseline %.1f MiB", what, after,
                  base);
}

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Host-side state the kernels write: one slot per task. */
struct slots {
  size_t n;
  uint32_t *count; /* times task i ran */
  uint32_t *val;   /* what task i computed (or saw) */
};

static struct slots slots_new(size_t n) {
  struct slots s = {.n = n, .count = calloc(n, sizeof(uint32_t)), .val = calloc(n, sizeof(uint32_t))};
  cr_assert(s.count && s.val);
  return s;
}

static void slots_free(struct slots *s) {
  free(s->count);
  free(s->val);
}

static void check_counts(const char *what, const struct slots *s) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->count[i] != 1 && bad++ == 0) first = i;
  cr_expect_eq(bad, 0, "%s: %zu tasks did not run exactly once (task %zu ran %u times)", what, bad, first,
               bad ? s->count[first] : 1);
}

/* ---- a chain ordered by write-after-write hazards ---- */

/* "i32 id, inout i32[] v": records what it saw, then updates v[0]. */
static int chain_fn(const mz_call *c) {
  struct slots *s = c->user;
  uint32_t id = (uint32_t)c->args[0].i32;
  uint32_t *v = c->args[1].p;
  s->count[id]++;
  s->val[id] = v[0];
  v[0] = v[0] * 1103515245u + id;
  return 0;
}

Test(stress, chain, .timeout = 1200) {
  double base = rss_baseline();
  size_t n = scaled(1000000);
  struct slots s = slots_new(n);
  mz_runtime *rt = test_runtime(DEVICES);
  mz_kernel *k = test_kernel(rt, "chain", "i32 id, inout i32[] v", chain_fn, &s);
  uint32_t init = 12345;
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 1, &init);
  double before = rss_mib();
  uint64_t t0 = test_now_ns();
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *v = mz_value(g, b);
  for (size_t i = 0; i < n; i++)
    v = mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i32(g, (int32_t)i), v}), NULL), 1);
  MZ_OK_OR_DIE(rt, mz_graph_status(g));
  double build_s = secs_since(t0);
  double built = rss_mib();
  uint64_t t1 = test_now_ns();
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, v, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  double run_s = secs_since(t1);
  double ran = rss_mib();
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, n);
  uint32_t got;
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, &got, sizeof got));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);

  check_counts("chain", &s);
  uint32_t x = init;
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    if (s.val[i] != x) wrong++;
    x = x * 1103515245u + (uint32_t)i;
  }
  cr_expect_eq(wrong, 0, "chain: %zu tasks saw a value out of order", wrong);
  cr_expect_eq(got, x, "chain: final value %u, serial %u", got, x);
  fprintf(stderr,
          "stress: chain %zu nodes: built in %.2f s, scheduled and run in %.2f s; RSS +%.0f B/node built, "
          "+%.0f B/node after the run\n",
          n, build_s, run_s, (built - before) * 1048576.0 / (double)n, (ran - before) * 1048576.0 / (double)n);
  slots_free(&s);
  check_rss("chain", base);
}

/* ---- a fan-out: one writer, n readers ---- */

enum { FAN_ELEMS = 1024 };

/* "u32 seed, out u32[] src": fills src. */
static int fan_src_fn(const mz_call *c) {
  uint32_t *src = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) src[i] = mix(c->args[0].u32 + (uint32_t)i);
  return 0;
}

/* "i32 id, in u32[] src" */
static int fan_fn(const mz_call *c) {
  struct slots *s = c->user;
  uint32_t id = (uint32_t)c->args[0].i32;
  const uint32_t *src = c->args[1].p;
  s->count[id]++;
  s->val[id] = src[id % c->shapes[1].count] * 3u + id;
  return 0;
}

Test(stress, fan_out, .timeout = 1200) {
  double base = rss_baseline();
  size_t n = scaled(1000000);
  struct slots s = slots_new(n);
  mz_runtime *rt = test_runtime(DEVICES);
  mz_kernel *ksrc = test_kernel(rt, "fan_src", "u32 seed, out u32[] src", fan_src_fn, NULL);
  mz_kernel *k = test_kernel(rt, "fan", "i32 id, in u32[] src", fan_fn, &s);
  mz_buffer *b = test_buffer_1d(rt, MZ_U32, FAN_ELEMS, NULL);
  uint64_t t0 = test_now_ns();
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *src = mz_unzip(g, mz_apply(g, ksrc, mz_zip(g, 2, (mz_op *[]){mz_u32(g, 77), mz_value(g, b)}), NULL), 1);
  mz_op **readers = malloc(n * sizeof *readers);
  cr_assert_not_null(readers);
  for (size_t i = 0; i < n; i++) readers[i] = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i32(g, (int32_t)i), src}), NULL);
  mz_op *root = mz_join(g, (unsigned)n, readers);
  free(readers);
  MZ_OK_OR_DIE(rt, mz_graph_status(g));
  double build_s = secs_since(t0);
  uint64_t t1 = test_now_ns();
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  double run_s = secs_since(t1);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, n + 1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_kernel_destroy(ksrc);
  mz_runtime_destroy(rt);

  check_counts("fan-out", &s);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++)
    if (s.val[i] != mix(77u + (uint32_t)(i % FAN_ELEMS)) * 3u + (uint32_t)i) wrong++;
  cr_expect_eq(wrong, 0, "fan-out: %zu readers computed a wrong value", wrong);
  fprintf(stderr, "stress: fan-out to %zu readers: built in %.2f s, scheduled and run in %.2f s\n", n, build_s, run_s);
  slots_free(&s);
  check_rss("fan-out", base);
}

/* ---- a random DAG given by mz_depend edges ---- */

struct dag {
  struct slots s;
  size_t *first; /* predecessors of i: pred[first[i] .. first[i+1]) */
  uint32_t *pred;
};

/* "i32 id": val[id] = mix(id) + the sum of its predecessors' values. */
static int dag_fn(const mz_call *c) {
  struct dag *d = c->user;
  uint32_t id = (uint32_t)c->args[0].i32;
  uint32_t v = mix(id);
  for (size_t e = d->first[id]; e < d->first[id + 1]; e++) v += d->s.val[d->pred[e]];
  d->s.count[id]++;
  d->s.val[id] = v;
  return 0;
}

Test(stress, random_dag, .timeout = 1200) {
  double base = rss_baseline();
  size_t n = scaled(1000000);
  struct dag d = {.s = slots_new(n), .first = calloc(n + 1, sizeof(size_t)), .pred = malloc(n * 8 * sizeof(uint32_t))};
  cr_assert(d.first && d.pred);
  /* In-degree uniform in 0..8 (mean 4), predecessors among the previous
   * 4096 nodes, so the DAG is wide as well as deep. */
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  size_t ne = 0;
  for (size_t i = 0; i < n; i++) {
    d.first[i] = ne;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    unsigned deg = i ? (unsigned)(rng >> 33) % 9 : 0;
    for (unsigned j = 0; j < deg; j++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      size_t window = i < 4096 ? i : 4096;
      d.pred[ne++] = (uint32_t)(i - 1 - (size_t)(rng >> 33) % window);
    }
  }
  d.first[n] = ne;

  mz_runtime *rt = test_runtime(DEVICES);
  mz_kernel *k = test_kernel(rt, "dag", "i32 id", dag_fn, &d);
  uint64_t t0 = test_now_ns();
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op **ops = malloc(n * sizeof *ops);
  cr_assert_not_null(ops);
  for (size_t i = 0; i < n; i++) {
    ops[i] = mz_apply(g, k, mz_i32(g, (int32_t)i), NULL);
    for (size_t e = d.first[i]; e < d.first[i + 1]; e++) MZ_OK_OR_DIE(rt, mz_depend(g, ops[i], ops[d.pred[e]]));
  }
  mz_op *root = mz_join(g, (unsigned)n, ops);
  free(ops);
  MZ_OK_OR_DIE(rt, mz_graph_status(g));
  double build_s = secs_since(t0);
  uint64_t t1 = test_now_ns();
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  double run_s = secs_since(t1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);

  check_counts("random DAG", &d.s);
  size_t wrong = 0;
  uint32_t *ref = malloc(n * sizeof *ref);
  cr_assert_not_null(ref);
  for (size_t i = 0; i < n; i++) {
    uint32_t v = mix((uint32_t)i);
    for (size_t e = d.first[i]; e < d.first[i + 1]; e++) v += ref[d.pred[e]];
    ref[i] = v;
    if (d.s.val[i] != v) wrong++;
  }
  cr_expect_eq(wrong, 0, "random DAG: %zu nodes differ from the serial evaluation", wrong);
  fprintf(stderr, "stress: random DAG %zu nodes, %zu edges (mean in-degree %.2f): built in %.2f s, run in %.2f s\n", n,
          ne, (double)ne / (double)n, build_s, run_s);
  free(ref);
  free(d.first);
  free(d.pred);
  slots_free(&d.s);
  check_rss("random DAG", base);
}

/* ---- 100,000 outstanding futures from 16 threads ---- */

enum { SUBMITTERS = 16 };

static _Atomic int gate_open;

/* "i32 id": waits for the gate (so no run finishes before every future
 * exists), then counts. */
static int gated_fn(const mz_call *c) {
  struct slots *s = c->user;
  while (!atomic_load(&gate_open)) test_sleep_ms(1);
  uint32_t id = (uint32_t)c->args[0].i32;
  s->count[id]++;
  s->val[id] = mix(id);
  return 0;
}

struct submitter {
  mz_runtime *rt;
  mz_kernel *k;
  size_t from, to;
  mz_graph *g;
  mz_future **f;
  int rc;
};

static void *submit_thread(void *arg) {
  struct submitter *t = arg;
  t->rc = mz_graph_create(t->rt, &t->g);
  for (size_t i = t->from; i < t->to && !t->rc; i++)
    t->rc = mz_schedule(t->g, mz_apply(t->g, t->k, mz_i32(t->g, (int32_t)i), NULL), NULL, &t->f[i]);
  return NULL;
}

Test(stress, futures_from_threads, .timeout = 1200) {
  double base = rss_baseline();
  size_t n = scaled(100000);
  struct slots s = slots_new(n);
  mz_runtime *rt = test_runtime(DEVICES);
  mz_kernel *k = test_kernel(rt, "gated", "i32 id", gated_fn, &s);
  mz_future **f = calloc(n, sizeof *f);
  cr_assert_not_null(f);
  atomic_store(&gate_open, 0);
  struct submitter th[SUBMITTERS];
  pthread_t tid[SUBMITTERS];
  uint64_t t0 = test_now_ns();
  for (size_t i = 0; i < SUBMITTERS; i++) {
    th[i] = (struct submitter){.rt = rt, .k = k, .from = n * i / SUBMITTERS, .to = n * (i + 1) / SUBMITTERS, .f = f};
    cr_assert_eq(pthread_create(&tid[i], NULL, submit_thread, &th[i]), 0);
  }
  for (size_t i = 0; i < SUBMITTERS; i++) {
    pthread_join(tid[i], NULL);
    MZ_OK_OR_DIE(rt, th[i].rc);
  }
  double submit_s = secs_since(t0);
  size_t pending = 0;
  for (size_t i = 0; i < n; i++) pending += mz_future_poll(f[i]) == MZ_EAGAIN;
  cr_expect_eq(pending, n, "every future is outstanding before the gate opens");
  atomic_store(&gate_open, 1);
  size_t failed = 0;
  for (size_t i = 0; i < n; i++) {
    failed += mz_future_wait(f[i]) != MZ_OK;
    mz_future_destroy(f[i]);
  }
  double total_s = secs_since(t0);
  cr_expect_eq(failed, 0);
  for (size_t i = 0; i < SUBMITTERS; i++) mz_graph_destroy(th[i].g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  free(f);

  check_counts("futures", &s);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += s.val[i] != mix((uint32_t)i);
  cr_expect_eq(wrong, 0);
  fprintf(stderr, "stress: %zu futures from %d threads: submitted in %.2f s, all resolved in %.2f s\n", n, SUBMITTERS,
          submit_s, total_s);
  slots_free(&s);
  check_rss("futures", base);
}

/* ---- runtimes created and destroyed ---- */

static int add_fn(const mz_call *c) {
  int32_t *v = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) v[i] += c->args[0].i32;
  return 0;
}

Test(stress, create_destroy_cycles, .timeout = 1200) {
  double base = rss_baseline();
  size_t n = scaled(1000);
  uint64_t t0 = test_now_ns();
  for (size_t i = 0; i < n; i++) {
    mz_runtime *rt = test_runtime(DEVICES);
    mz_kernel *k = test_kernel(rt, "add", "i32 a, inout i32[] v", add_fn, NULL);
    int32_t data[4] = {1, 2, 3, 4}, out[4];
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, data);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *r = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i32(g, (int32_t)i), mz_value(g, b)}), NULL);
    cr_assert_eq(test_run(g, r, NULL, NULL), MZ_OK);
    MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
    for (int j = 0; j < 4; j++) cr_assert_eq(out[j], data[j] + (int32_t)i);
    /* Every other cycle leaves its objects for mz_runtime_destroy. */
    if (i % 2 == 0) {
      mz_graph_destroy(g);
      mz_buffer_release(b);
      mz_kernel_destroy(k);
    }
    mz_runtime_destroy(rt);
  }
  fprintf(stderr, "stress: %zu runtime create/destroy cycles in %.2f s\n", n, secs_since(t0));
  check_rss("create/destroy", base);
}
