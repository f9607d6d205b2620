/* fuzz_api: a libFuzzer harness for maize's API on the CPU backend.
 *
 * The input bytes choose a sequence of calls: create small i32 buffers,
 * build ops on them (apply with four CPU kernels, host nodes, a partition
 * into tiles updated separately and put back, zips, joins, mz_depend
 * edges, some of which close a cycle), schedule what was built with a
 * policy the input picks, wait in several ways, read and write buffers,
 * and release buffers, destroy futures and graphs in the order the input
 * says.  A serial shadow applies every op to plain arrays in build order;
 * whenever maize's buffers can be read (after a run, or at any time for
 * what was scheduled) they must equal the shadow, and every call must
 * return what the shadow expects (MZ_ECYCLE exactly when an edge closed a
 * cycle).  A mismatch aborts, so libFuzzer keeps the input.
 *
 * Semantics the shadow relies on: a schedule action runs everything built
 * since the last one (the join of the pending tasks), so tasks run in
 * build order as far as the hazards say; a buffer read returns what the
 * scheduled ops left; a run rejected with MZ_ECYCLE runs nothing, and the
 * graph is then destroyed with its unscheduled tasks.  Buffers are written
 * from the host only when no unscheduled task uses them.
 *
 * One runtime (2 CPU workers) serves the whole process; each input
 * releases everything it created.  Build: scripts/fuzz.sh. */
#include <maize.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXBUF 8
#define MAXELEM 32
#define MAXPEND 48
#define MAXFUT 8
#define MAXACTIONS 96

static mz_runtime *rt;
static bool trace; /* $MZ_FUZZ_TRACE: print each action (to read a crashing input) */
static mz_kernel *k_add, *k_scale, *k_copy, *k_sum;

/* "i32 a, inout i32[] v, u64 n = sizeof(v)": v += a */
static int add_fn(const mz_call *c) {
  int32_t *v = c->args[1].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++) v[i] = (int32_t)((uint32_t)v[i] + (uint32_t)c->args[0].i32);
  return 0;
}

/* "i32 a, inout i32[] v": v *= a */
static int scale_fn(const mz_call *c) {
  int32_t *v = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) v[i] = (int32_t)((uint32_t)v[i] * (uint32_t)c->args[0].i32);
  return 0;
}

/* "in i32[] x, out i32[] y": y[i] = x[i % |x|] */
static int copy_fn(const mz_call *c) {
  const int32_t *x = c->args[0].p;
  int32_t *y = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) y[i] = x[i % c->shapes[0].count];
  return 0;
}

/* "in i32[] x, inout i32[] y": y[i] += x[i % |x|] */
static int sum_fn(const mz_call *c) {
  const int32_t *x = c->args[0].p;
  int32_t *y = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) y[i] = (int32_t)((uint32_t)y[i] + (uint32_t)x[i % c->shapes[0].count]);
  return 0;
}

/* A host node: every element + 1. */
static int host_inc(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] = (int32_t)((uint32_t)v[i] + 1u);
  return 0;
}

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "fuzz_api: %s:%d: %s: ", __FILE__, __LINE__, #cond);                                            \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fprintf(stderr, " (last error: %s)\n", mz_runtime_last_error(rt));                                               \
      abort();                                                                                                         \
    }                                                                                                                  \
  } while (0)

static mz_kernel *kernel(const char *name, const char *params, mz_cpu_fn fn) {
  mz_kernel *k = NULL;
  int rc = mz_kernel_create(rt, &(mz_kernel_spec){.name = name, .params = params, .cpu = {.fn = fn}}, &k);
  CHECK(rc == MZ_OK, "mz_kernel_create(%s): %s", name, mz_err_name(rc));
  return k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* dmda and heft learn perf models: keep them out of the user's cache. */
  setenv("MZ_PERFMODEL_DIR", "/tmp/maize-fuzz-perfmodels", 0);
  trace = getenv("MZ_FUZZ_TRACE") != NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2", .quiet = true}, &rt);
  CHECK(rc == MZ_OK, "mz_runtime_create: %s", mz_err_name(rc));
  k_add = kernel("add", "i32 a, inout i32[] v, u64 n = sizeof(v)", add_fn);
  k_scale = kernel("scale", "i32 a, inout i32[] v", scale_fn);
  k_copy = kernel("copy", "in i32[] x, out i32[] y", copy_fn);
  k_sum = kernel("sum", "in i32[] x, inout i32[] y", sum_fn);
  return 0;
}

/* ---- the state of one input ---- */

struct slot {
  mz_buffer *b;             /* NULL: free or released */
  size_t n;
  int32_t committed[MAXELEM]; /* contents after every scheduled op */
  int32_t pending[MAXELEM];   /* ... and after the unscheduled ones too */
  mz_op *cur;               /* its value in the current graph, or NULL */
  int writer;               /* the pending task (index) that produced cur, or -1 */
};

static struct state {
  const uint8_t *p, *end;
  struct slot s[MAXBUF];
  mz_graph *g;
  mz_op *pend[MAXPEND];     /* unscheduled tasks of g, in build order */
  unsigned npend;
  bool cycle;               /* an edge closed a cycle among them */
  int cons_a, cons_b;       /* a pending pair: task cons_b read cons_a's result */
  mz_future *fut[MAXFUT];
} st;

static unsigned byte(void) { return st.p < st.end ? *st.p++ : 0; }

static int32_t word(void) {
  uint32_t v = byte();
  v |= (uint32_t)byte() << 8;
  return (int32_t)(v * 2654435761u >> 8) - 0x400000;
}

static struct slot *pick(void) {
  unsigned n = 0;
  for (unsigned i = 0; i < MAXBUF; i++) n += st.s[i].b != NULL;
  if (!n) return NULL;
  unsigned k = byte() % n;
  for (unsigned i = 0; i < MAXBUF; i++)
    if (st.s[i].b && k-- == 0) return &st.s[i];
  return NULL;
}

static void check_buffer(struct slot *s) {
  int32_t got[MAXELEM];
  int rc = mz_buffer_read(s->b, got, s->n * sizeof(int32_t));
  CHECK(rc == MZ_OK, "mz_buffer_read: %s", mz_err_name(rc));
  for (size_t i = 0; i < s->n; i++)
    CHECK(got[i] == s->committed[i], "buffer %d element %zu: maize %d, serial %d", (int)(s - st.s), i, got[i],
          s->committed[i]);
}

static void new_graph(void) {
  int rc = mz_graph_create(rt, &st.g);
  CHECK(rc == MZ_OK, "mz_graph_create: %s", mz_err_name(rc));
  for (unsigned i = 0; i < MAXBUF; i++) {
    st.s[i].cur = NULL;
    st.s[i].writer = -1;
  }
  st.npend = 0;
  st.cycle = false;
  st.cons_a = st.cons_b = -1;
}

/* Destroy the graph; its unscheduled tasks never run. */
static void drop_graph(void) {
  mz_graph_destroy(st.g);
  for (unsigned i = 0; i < MAXBUF; i++) memcpy(st.s[i].pending, st.s[i].committed, sizeof st.s[i].pending);
  new_graph();
}

static mz_op *value_of(struct slot *s) {
  if (!s->cur || byte() % 4 == 0) return mz_value(st.g, s->b); /* the same value, by another road */
  return s->cur;
}

/* Record a task built on the pending list; inputs: slots it read. */
static void note_task(mz_op *t, struct slot *in1, struct slot *in2) {
  CHECK(mz_graph_status(st.g) == MZ_OK, "builder failed: %s", mz_graph_message(st.g));
  int idx = (int)st.npend;
  st.pend[st.npend++] = t;
  struct slot *ins[2] = {in1, in2};
  for (int i = 0; i < 2; i++)
    if (ins[i] && ins[i]->writer >= 0 && st.cons_a < 0) {
      st.cons_a = ins[i]->writer;
      st.cons_b = idx;
    }
}

static void wrote(struct slot *s, mz_op *value) {
  s->cur = value;
  s->writer = (int)st.npend - 1;
}

static void add_future(mz_future *f) {
  for (unsigned i = 0; i < MAXFUT; i++)
    if (!st.fut[i]) {
      st.fut[i] = f;
      return;
    }
  int rc = mz_future_wait(f);
  CHECK(rc == MZ_OK, "mz_future_wait: %s (%s)", mz_err_name(rc), mz_future_message(f));
  mz_future_destroy(f);
}

static void do_schedule(bool wait) {
  static const char *const policies[] = {NULL, "eager", "single", "round-robin", "ws", "dmda", "heft"};
  const char *pol = policies[byte() % (sizeof policies / sizeof *policies)];
  if (!st.npend) return;
  mz_op *root = st.npend == 1 && byte() % 2 ? st.pend[0] : mz_join(st.g, st.npend, st.pend);
  mz_future *f = NULL;
  int rc = mz_schedule(st.g, root, pol, &f);
  if (trace) fprintf(stderr, "schedule %u tasks with %s: %s\n", st.npend, pol ? pol : "default", mz_err_name(rc));
  if (st.cycle) {
    CHECK(rc == MZ_ECYCLE, "mz_schedule with a cycle: %s", mz_err_name(rc));
    CHECK(f == NULL, "a future for a rejected run");
    drop_graph();
    return;
  }
  CHECK(rc == MZ_OK, "mz_schedule(%s): %s", pol ? pol : "default", mz_err_name(rc));
  for (unsigned i = 0; i < MAXBUF; i++) memcpy(st.s[i].committed, st.s[i].pending, sizeof st.s[i].pending);
  st.npend = 0;
  st.cons_a = st.cons_b = -1;
  for (unsigned i = 0; i < MAXBUF; i++) st.s[i].writer = -1;
  if (!wait) {
    add_future(f);
    return;
  }
  switch (byte() % 3) {
  case 0: rc = mz_future_wait(f); break;
  case 1:
    while ((rc = mz_future_wait_for(f, 1000000)) == MZ_ETIMEDOUT) {
    }
    break;
  default:
    while ((rc = mz_future_poll(f)) == MZ_EAGAIN) {
    }
    break;
  }
  CHECK(rc == MZ_OK, "run: %s (%s)", mz_err_name(rc), mz_future_message(f));
  mz_run_stats stats;
  CHECK(mz_future_stats(f, &stats) == MZ_OK && stats.failed == 0, "stats");
  mz_future_destroy(f);
  for (unsigned i = 0; i < MAXBUF; i++)
    if (st.s[i].b) check_buffer(&st.s[i]);
}

static void action(void) {
  unsigned what = byte() % 16;
  if (trace) fprintf(stderr, "action %u (pending %u, cycle %d)\n", what, st.npend, st.cycle);
  struct slot *a, *b;
  switch (what) {
  case 0: /* create a buffer */
    for (unsigned i = 0; i < MAXBUF; i++) {
      struct slot *s = &st.s[i];
      if (s->b || s->n) continue; /* a released slot stays used: unscheduled tasks may still write it */
      s->n = 1 + byte() % MAXELEM;
      bool zero = byte() % 4 == 0;
      for (size_t j = 0; j < s->n; j++) s->committed[j] = zero ? 0 : word();
      memcpy(s->pending, s->committed, sizeof s->pending);
      int rc = mz_buffer_create(rt, MZ_I32, 1, (size_t[]){s->n}, zero ? NULL : s->committed, &s->b);
      CHECK(rc == MZ_OK, "mz_buffer_create: %s", mz_err_name(rc));
      s->cur = NULL;
      s->writer = -1;
      break;
    }
    break;
  case 1: /* release a buffer; the graph and runs keep what they use */
    if ((a = pick()) && byte() % 2) {
      mz_buffer_release(a->b);
      a->b = NULL;
    }
    break;
  case 2:
  case 3: { /* add or scale */
    if (!(a = pick()) || st.npend == MAXPEND) break;
    int32_t c = word();
    mz_op *t = mz_apply(st.g, what == 2 ? k_add : k_scale, mz_zip(st.g, 2, (mz_op *[]){mz_i32(st.g, c), value_of(a)}), NULL);
    note_task(t, a, NULL);
    wrote(a, mz_unzip(st.g, t, 1));
    for (size_t j = 0; j < a->n; j++)
      a->pending[j] = (int32_t)(what == 2 ? (uint32_t)a->pending[j] + (uint32_t)c : (uint32_t)a->pending[j] * (uint32_t)c);
    break;
  }
  case 4:
  case 5: { /* copy or sum from a into b */
    if (!(a = pick()) || !(b = pick()) || a == b || st.npend == MAXPEND) break;
    mz_op *t = mz_apply(st.g, what == 4 ? k_copy : k_sum, mz_zip(st.g, 2, (mz_op *[]){value_of(a), value_of(b)}), NULL);
    note_task(t, a, what == 5 ? b : NULL);
    wrote(b, mz_unzip(st.g, t, 1));
    for (size_t j = 0; j < b->n; j++)
      b->pending[j] =
          what == 4 ? a->pending[j % a->n] : (int32_t)((uint32_t)b->pending[j] + (uint32_t)a->pending[j % a->n]);
    break;
  }
  case 6: { /* a host node */
    if (!(a = pick()) || st.npend == MAXPEND) break;
    mz_op *t = mz_host(st.g, host_inc, NULL, value_of(a));
    note_task(t, a, NULL);
    wrote(a, mz_unzip(st.g, t, 0));
    for (size_t j = 0; j < a->n; j++) a->pending[j] = (int32_t)((uint32_t)a->pending[j] + 1u);
    break;
  }
  case 7: { /* partition into tiles, add a different constant to each, put back */
    if (!(a = pick()) || st.npend + 2 > MAXPEND) break;
    unsigned n = 1 + byte() % (a->n < 4 ? (unsigned)a->n : 4u);
    mz_op *parts = mz_partition(st.g, value_of(a), n);
    mz_op *tiles[4];
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
      int32_t c = word();
      tiles[i] = mz_unzip(st.g, mz_apply(st.g, k_add, mz_zip(st.g, 2, (mz_op *[]){mz_i32(st.g, c), mz_unzip(st.g, parts, i)}), NULL), 1);
      size_t rows = a->n / n + (i < a->n % n ? 1 : 0);
      for (size_t j = off; j < off + rows; j++) a->pending[j] = (int32_t)((uint32_t)a->pending[j] + (uint32_t)c);
      off += rows;
    }
    mz_op *whole = mz_unpartition(st.g, mz_zip(st.g, n, tiles));
    note_task(whole, a, NULL);
    wrote(a, mz_unzip(st.g, whole, 0));
    break;
  }
  case 8: /* an edge that orders two independent tasks: legal */
    if (st.npend >= 2) {
      unsigned i = byte() % st.npend, j = byte() % st.npend;
      if (i == j) break;
      if (i < j) {
        unsigned t = i;
        i = j;
        j = t;
      }
      int rc = mz_depend(st.g, st.pend[i], st.pend[j]);
      CHECK(rc == MZ_OK, "mz_depend: %s", mz_err_name(rc));
    }
    break;
  case 9: /* an edge that closes a cycle: the reader's producer after the reader */
    if (st.cons_a >= 0 && byte() % 2) {
      int rc = mz_depend(st.g, st.pend[st.cons_a], st.pend[st.cons_b]);
      CHECK(rc == MZ_OK, "mz_depend (cycle): %s", mz_err_name(rc));
      st.cycle = true;
    }
    break;
  case 10:
  case 11:
    do_schedule(what == 10);
    break;
  case 12: /* read: what the scheduled ops left */
    if ((a = pick())) check_buffer(a);
    break;
  case 13: /* write from the host, when no unscheduled task uses the buffer */
    if ((a = pick()) && st.npend == 0) {
      for (size_t j = 0; j < a->n; j++) a->committed[j] = word();
      memcpy(a->pending, a->committed, sizeof a->pending);
      int rc = mz_buffer_write(a->b, a->committed, a->n * sizeof(int32_t));
      CHECK(rc == MZ_OK, "mz_buffer_write: %s", mz_err_name(rc));
      a->cur = NULL;
    }
    break;
  case 14: /* destroy a future, finished or not */
    for (unsigned i = 0, k = byte() % MAXFUT; i < MAXFUT; i++)
      if (st.fut[(i + k) % MAXFUT]) {
        mz_future_destroy(st.fut[(i + k) % MAXFUT]);
        st.fut[(i + k) % MAXFUT] = NULL;
        break;
      }
    break;
  default: /* a new graph; runs of the old one finish on their own */
    if (byte() % 2) drop_graph();
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  memset(&st, 0, sizeof st);
  st.p = data;
  st.end = data + size;
  new_graph();
  for (unsigned n = 0; st.p < st.end && n < MAXACTIONS; n++) action();
  /* Run what is left, then check and free everything, in slot order. */
  st.p = st.end;
  if (!st.cycle) do_schedule(true);
  for (unsigned i = 0; i < MAXFUT; i++)
    if (st.fut[i]) {
      int rc = mz_future_wait(st.fut[i]);
      CHECK(rc == MZ_OK, "mz_future_wait: %s", mz_err_name(rc));
      mz_future_destroy(st.fut[i]);
    }
  for (unsigned i = 0; i < MAXBUF; i++)
    if (st.s[i].b) {
      check_buffer(&st.s[i]);
      mz_buffer_release(st.s[i].b);
    }
  mz_graph_destroy(st.g);
  int rc = mz_runtime_wait_idle(rt);
  CHECK(rc == MZ_OK, "mz_runtime_wait_idle: %s", mz_err_name(rc));
  return 0;
}
