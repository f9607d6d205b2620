/* test_model: a model-based random tester, after the Legion
 * fuzzer.  Random episodes of API calls (graphs of random kernels over a
 * few shared buffers, full and partial roots, two graphs built on the same
 * buffers and scheduled back to back, kernels that fail, every shipped
 * policy) run on maize and on a serial reference interpreter written here;
 * every buffer read and every status is compared.
 *
 * The reference's rules: a graph's ops run in the order they were built
 * (sequential consistency); a root runs the ops it needs, that is itself
 * and, transitively, the last earlier writer of every buffer an op reads
 * (all parameters here are in or inout, so every writer also reads); runs
 * scheduled one after the other see each other's writes in schedule order;
 * a failing kernel fails the run with MZ_EKERNEL, cancels its dependents
 * through every hazard edge (read-after-write, write-after-write and
 * write-after-read), and every buffer it or a canceled op writes then
 * reads back as an error, and cancels the ops of later graphs that read it
 * (MZ_ECANCELED), until mz_buffer_write replaces its data.
 *
 * Lazy evaluation across schedules: some episodes schedule the whole
 * graph after a partial root.  When an op left out of the first run reads
 * a buffer that an op built after it has written in that run (op0 =
 * mix(in a, inout b), op1 = inc(inout a): op1 first, then both), it would
 * see the newer value, so mz_schedule refuses with MZ_ESTATE and nothing
 * runs; the episode then re-runs the whole graph with mz_graph_run, which
 * the reference applies in build order to the current state.  Otherwise
 * the ops left run, in build order, on the buffers as they are now (the
 * first run's results, and data mz_buffer_write replaced in between); an
 * op left whose value at its point of the build came from an op of the
 * graph that failed or was canceled in the first run is canceled.  On by
 * default; MZ_MODEL_LAZY=0 turns them off.
 *
 * Bounded: MZ_MODEL_RUNS episodes (default 300) or MZ_MODEL_SECONDS
 * (default 3), whichever ends first.  MZ_MODEL_SEED replays a seed; each
 * divergence prints the seed and episode to replay. */
#include <inttypes.h>

#include "common.h"

#define NB 6   /* buffers */
#define NE 16  /* elements per buffer */
#define MAXOPS 12
#define WAIT_NS 20000000000ull

TestSuite(model, .timeout = 120);

static int inc_fn(const mz_call *c) {
  uint32_t *a = c->args[0].p;
  for (unsigned i = 0; i < NE; i++) a[i] = a[i] * 2u + 1u;
  return 0;
}

static int mix_fn(const mz_call *c) {
  const uint32_t *x = c->args[0].p;
  uint32_t *y = c->args[1].p;
  for (unsigned i = 0; i < NE; i++) y[i] = y[i] * 31u + x[i] + i;
  return 0;
}

static int fail_fn(const mz_call *c) {
  (void)c;
  return 1;
}

enum kind { K_INC, K_MIX, K_FAIL };

struct mop {
  enum kind kind;
  int x, y; /* K_MIX reads x, writes y; the others write y (x = -1) */
  mz_op *op;
};

struct mgraph {
  mz_graph *g;
  struct mop ops[MAXOPS];
  int n;
  bool run[MAXOPS]; /* the ops the root needs */
};

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct model {
  mz_runtime *rt;
  mz_kernel *k[3];
  mz_buffer *b[NB];
  uint32_t ref[NB][NE];
  bool retired[NB];
  bool bad[NB]; /* the last writer failed or was canceled: reads give an error */
  uint64_t seed, episode;
  unsigned long calls, divergences;
  bool verbose; /* MZ_MODEL_VERBOSE: print each episode's graphs (* runs) */
  bool lazy; /* MZ_MODEL_LAZY=1: episodes that schedule the whole graph after a partial root */
};

static void ref_apply(struct model *m, const struct mop *o, bool *poison) {
  if (o->kind == K_INC) {
    for (unsigned i = 0; i < NE; i++) m->ref[o->y][i] = m->ref[o->y][i] * 2u + 1u;
  } else if (o->kind == K_MIX) {
    for (unsigned i = 0; i < NE; i++) m->ref[o->y][i] = m->ref[o->y][i] * 31u + m->ref[o->x][i] + i;
  }
  (void)poison;
}

/* Build a random graph; fail_ok allows failing kernels. */
static void build(struct model *m, struct mgraph *G, uint64_t *s, bool fail_ok, bool partial) {
  MZ_OK_OR_DIE(m->rt, mz_graph_create(m->rt, &G->g));
  m->calls++;
  int live[NB], nl = 0;
  for (int i = 0; i < NB; i++)
    if (!m->retired[i]) live[nl++] = i;
  G->n = 1 + (int)(rng(s) % MAXOPS);
  for (int i = 0; i < G->n; i++) {
    struct mop *o = &G->ops[i];
    unsigned r = (unsigned)(rng(s) % 100);
    o->kind = r < 45 ? K_INC : (r < 97 || !fail_ok) ? K_MIX : K_FAIL;
    if (nl < 2 && o->kind == K_MIX) o->kind = K_INC;
    o->y = live[rng(s) % (unsigned)nl];
    o->x = -1;
    if (o->kind == K_MIX)
      do o->x = live[rng(s) % (unsigned)nl];
      while (o->x == o->y);
    mz_op *args = o->kind == K_MIX ? mz_zip(G->g, 2, (mz_op *[]){mz_value(G->g, m->b[o->x]), mz_value(G->g, m->b[o->y])})
                                   : mz_value(G->g, m->b[o->y]);
    o->op = mz_apply(G->g, m->k[o->kind], args, NULL);
    m->calls += o->kind == K_MIX ? 4 : 2;
  }
  cr_assert_eq(mz_graph_status(G->g), MZ_OK, "seed %" PRIu64 " episode %" PRIu64 ": build: %s", m->seed, m->episode,
               mz_graph_message(G->g));
  memset(G->run, 0, sizeof G->run);
  int root = partial ? (int)(rng(s) % (unsigned)G->n) : -1;
  if (root < 0) {
    for (int i = 0; i < G->n; i++) G->run[i] = true;
  } else {
    G->run[root] = true;
    for (int i = root; i >= 0; i--) {
      if (!G->run[i]) continue;
      /* The last earlier writer of each buffer op i reads (x and y). */
      int reads[2] = {G->ops[i].x, G->ops[i].y};
      for (int r = 0; r < 2; r++) {
        if (reads[r] < 0) continue;
        for (int j = i - 1; j >= 0; j--)
          if (G->ops[j].y == reads[r]) {
            G->run[j] = true;
            break;
          }
      }
    }
  }
}

static mz_op *root_of(struct mgraph *G) {
  int n = 0, last = -1;
  for (int i = 0; i < G->n; i++) n += G->run[i], last = G->run[i] ? i : last;
  if (n == G->n && n > 1) {
    mz_op *all[MAXOPS];
    for (int i = 0; i < G->n; i++) all[i] = G->ops[i].op;
    return mz_join(G->g, (unsigned)G->n, all);
  }
  return G->ops[last].op; /* partial: the root is the last op it needs */
}

/* Apply G's run set to the reference; returns the expected status and
 * marks the buffers a failed or canceled op writes in bad. */
/* Across runs only data cancels: an op of this run that reads a buffer
 * left bad by a run before it, in flight or not. */
static int ref_run(struct model *m, struct mgraph *G, bool bad[NB], bool *either, bool down[MAXOPS],
                   const bool *precancel) {
  bool failed = false, canceled = false;
  memset(down, 0, MAXOPS * sizeof *down);
  for (int i = 0; i < G->n; i++) {
    if (!G->run[i]) continue;
    const struct mop *o = &G->ops[i];
    /* An input whose last writer failed, in this run or an earlier one,
     * or (precancel) whose value at this op's point of the build came from
     * an op of this graph that failed or was canceled in an earlier run. */
    bool cancel = (o->x >= 0 && bad[o->x]) || bad[o->y] || (precancel && precancel[i]);
    /* Dependents through any hazard edge are canceled: RAW, WAW and WAR. */
    for (int j = 0; j < i && !cancel; j++)
      cancel = down[j] && (G->ops[j].y == o->y || G->ops[j].y == o->x || G->ops[j].x == o->y);
    /* Behind a failed or canceled op of a run scheduled before, through
     * a write-after-read hazard only (this op overwrites what that op
     * read): ordered after it, not canceled, whether that run is still in
     * flight or has finished. */
    if (cancel || o->kind == K_FAIL) {
      down[i] = true;
      bad[o->y] = true;
      if (cancel) canceled = true;
      else failed = true;
      continue;
    }
    ref_apply(m, o, NULL);
  }
  /* A run with a failure and a cancellation independent of it reports the
   * one that came first: either is right. */
  *either = failed && canceled;
  return failed ? MZ_EKERNEL : canceled ? MZ_ECANCELED : MZ_OK;
}

static void diverge(struct model *m, const char *what, int got, int want) {
  m->divergences++;
  cr_log_error("DIVERGENCE seed %" PRIu64 " episode %" PRIu64 ": %s: maize %d (%s), reference %d (%s)", m->seed,
               m->episode, what, got, mz_err_name(got), want, mz_err_name(want));
  cr_expect_fail("model divergence (replay: MZ_MODEL_SEED=%" PRIu64 ")", m->seed);
}

static void check_buffers(struct model *m, bool bad[NB], uint64_t *s) {
  for (int i = 0; i < NB; i++) {
    if (m->retired[i]) continue;
    uint32_t got[NE];
    int rc = mz_buffer_read(m->b[i], got, sizeof got);
    m->calls++;
    if (bad[i]) {
      if (rc >= 0) diverge(m, "a buffer written by a failed op read back fine", rc, MZ_EKERNEL);
      /* Sometimes replace the data (which clears the error), else keep the
       * buffer poisoned for later graphs to read. */
      if (rng(s) % 3 == 0) {
        for (unsigned j = 0; j < NE; j++) m->ref[i][j] = (uint32_t)rng(s);
        MZ_OK_OR_DIE(m->rt, mz_buffer_write(m->b[i], m->ref[i], sizeof m->ref[i]));
        m->calls++;
        bad[i] = false;
      }
      continue;
    }
    if (rc != MZ_OK) {
      diverge(m, "buffer read", rc, MZ_OK);
      m->retired[i] = true;
      continue;
    }
    if (memcmp(got, m->ref[i], sizeof got)) {
      char what[96];
      snprintf(what, sizeof what, "buffer %d element 0 is %" PRIu32 ", reference %" PRIu32, i, got[0], m->ref[i][0]);
      diverge(m, what, 1, 0);
      memcpy(m->ref[i], got, sizeof got); /* resynchronize: report each divergence once */
    }
  }
}

static void episode(struct model *m, uint64_t *s) {
  static const char *const policies[] = {"eager", "dmda", "round-robin", "heft", "single", "ws", "dmdas"};
  const char *pol = policies[rng(s) % (sizeof policies / sizeof *policies)];
  bool two = rng(s) % 4 == 0;
  bool partial = rng(s) % 2, again = !two && partial && m->lazy && rng(s) % 2;
  struct mgraph A, B;
  build(m, &A, s, !two, partial);
  if (two) build(m, &B, s, false, rng(s) % 2);
  if (m->verbose)
    for (int gi = 0; gi < (two ? 2 : 1); gi++) {
      const struct mgraph *G = gi ? &B : &A;
      printf("episode %" PRIu64 " graph %c (%s):", m->episode, 'A' + gi, pol);
      for (int i = 0; i < G->n; i++)
        printf(" %s%s(%d,%d)", G->run[i] ? "*" : "", G->ops[i].kind == K_INC ? "inc" : G->ops[i].kind == K_MIX ? "mix" : "fail",
               G->ops[i].x, G->ops[i].y);
      printf("  bad:");
      for (int i = 0; i < NB; i++) printf("%d", m->bad[i]);
      printf("\n");
    }
  mz_future *fa = NULL, *fb = NULL;
  MZ_OK_OR_DIE(m->rt, mz_schedule(A.g, root_of(&A), pol, &fa));
  /* B is scheduled while A is in flight, or (odd episodes: not drawn from
   * the seed, so recorded seeds replay the same graphs) after A ended: the
   * outcome must be the same. */
  if (two && (m->episode & 1)) (void)mz_future_wait_for(fa, WAIT_NS);
  if (two) MZ_OK_OR_DIE(m->rt, mz_schedule(B.g, root_of(&B), pol, &fb));
  m->calls += two ? 4 : 2;
  bool *bad = m->bad, either_a = false, either_b = false;
  bool down_a[MAXOPS], down_b[MAXOPS];
  int want_a = ref_run(m, &A, bad, &either_a, down_a, NULL);
  int want_b = two ? ref_run(m, &B, bad, &either_b, down_b, NULL) : MZ_OK;
  int got_a = mz_future_wait_for(fa, WAIT_NS);
  cr_assert_neq(got_a, MZ_ETIMEDOUT, "HANG: seed %" PRIu64 " episode %" PRIu64, m->seed, m->episode);
  if (got_a != want_a && !(either_a && got_a == MZ_ECANCELED)) diverge(m, "run status", got_a, want_a);
  if (two) {
    int got_b = mz_future_wait_for(fb, WAIT_NS);
    cr_assert_neq(got_b, MZ_ETIMEDOUT, "HANG: seed %" PRIu64 " episode %" PRIu64, m->seed, m->episode);
    if (got_b != want_b && !(either_b && got_b == MZ_ECANCELED))
      diverge(m, "second run status", got_b, want_b);
  }
  check_buffers(m, bad, s);
  /* Lazy evaluation across schedules: after a partial root, the whole
   * graph's root runs the ops left, on the buffers as the first run, the
   * check above (which may have replaced poisoned data) and earlier
   * episodes left them.  An op left reads the value at its point of the
   * build: an op of this graph built before it that wrote what it reads
   * and failed or was canceled in the first run cancels it, even when
   * mz_buffer_write has replaced the data since (precancel). */
  if (again) {
    bool done[MAXOPS], precancel[MAXOPS] = {0};
    memcpy(done, A.run, sizeof done);
    bool stale = false;
    for (int r = 0; r < A.n && !stale; r++) {
      if (done[r]) continue;
      for (int w = r + 1; w < A.n && !stale; w++)
        stale = done[w] && (A.ops[w].y == A.ops[r].y || A.ops[w].y == A.ops[r].x);
    }
    for (int r = 0; r < A.n; r++) {
      if (done[r]) continue;
      int reads[2] = {A.ops[r].x, A.ops[r].y};
      for (int k = 0; k < 2; k++) {
        if (reads[k] < 0) continue;
        for (int j = r - 1; j >= 0; j--)
          if (A.ops[j].y == reads[k]) {
            precancel[r] |= done[j] && down_a[j];
            break;
          }
      }
    }
    /* The reference runs the ops left (all of them after MZ_ESTATE: see
     * below), in build order, on the current state. */
    struct mgraph L = A;
    for (int i = 0; i < A.n; i++) {
      L.run[i] = stale || !done[i];
      A.run[i] = true;
    }
    mz_future *fc = NULL;
    if (m->verbose) printf("episode %" PRIu64 " lazy: the whole graph%s\n", m->episode, stale ? ", stale: MZ_ESTATE then mz_graph_run" : "");
    if (stale) {
      int rc = mz_schedule(A.g, root_of(&A), pol, &fc);
      m->calls += 2;
      if (rc != MZ_ESTATE) diverge(m, "scheduling a reader after a later writer ran", rc, MZ_ESTATE);
      if (fc) {
        (void)mz_future_wait_for(fc, WAIT_NS);
        mz_future_destroy(fc);
        fc = NULL;
      }
      /* The whole graph again, on the current contents, in build order:
       * every op runs again, so none is canceled for the first run. */
      MZ_OK_OR_DIE(m->rt, mz_graph_run(A.g, root_of(&A), pol, &fc));
    } else {
      MZ_OK_OR_DIE(m->rt, mz_schedule(A.g, root_of(&A), pol, &fc));
    }
    m->calls += 2;
    bool either = false;
    bool down[MAXOPS];
    int want = ref_run(m, &L, bad, &either, down, stale ? NULL : precancel);
    int got = mz_future_wait_for(fc, WAIT_NS);
    cr_assert_neq(got, MZ_ETIMEDOUT, "HANG: seed %" PRIu64 " episode %" PRIu64, m->seed, m->episode);
    if (got != want && !(either && got == MZ_ECANCELED))
      diverge(m, "status of the whole graph after a partial root", got, want);
    check_buffers(m, bad, s);
    mz_future_destroy(fc);
  }
  mz_future_destroy(fa);
  mz_future_destroy(fb);
  mz_graph_destroy(A.g);
  if (two) mz_graph_destroy(B.g);
}

static void new_buffers(struct model *m, uint64_t *s) {
  for (int i = 0; i < NB; i++) {
    mz_buffer_release(m->b[i]);
    for (unsigned j = 0; j < NE; j++) m->ref[i][j] = (uint32_t)rng(s);
    m->b[i] = NULL;
    MZ_OK_OR_DIE(m->rt, mz_buffer_create(m->rt, MZ_U32, 1, (size_t[]){NE}, m->ref[i], &m->b[i]));
    m->retired[i] = false;
    m->bad[i] = false;
  }
}

static unsigned long env_ul(const char *name, unsigned long dflt) {
  const char *e = getenv(name);
  return e && *e ? strtoul(e, NULL, 10) : dflt;
}

/* Run episodes from seed until runs or secs; returns the divergences. */
static unsigned long run_model(uint64_t seed, unsigned long runs, unsigned long secs, bool lazy, bool verbose,
                               unsigned long *episodes, unsigned long *calls) {
  struct model m = {.seed = seed, .lazy = lazy, .verbose = verbose};
  uint64_t s = m.seed, end = test_now_ns() + (uint64_t)secs * 1000000000u;
  m.rt = test_runtime("cpu:2");
  m.k[K_INC] = test_kernel(m.rt, "inc", "inout u32[] a", inc_fn, NULL);
  m.k[K_MIX] = test_kernel(m.rt, "mix", "in u32[] x, inout u32[] y", mix_fn, NULL);
  m.k[K_FAIL] = test_kernel(m.rt, "fail", "inout u32[] a", fail_fn, NULL);
  new_buffers(&m, &s);
  unsigned long done = 0;
  for (; done < runs && test_now_ns() < end; done++) {
    m.episode = done;
    int live = 0;
    for (int i = 0; i < NB; i++) live += !m.retired[i];
    if (live < 2) new_buffers(&m, &s);
    episode(&m, &s);
  }
  for (int i = 0; i < NB; i++) mz_buffer_release(m.b[i]);
  for (int i = 0; i < 3; i++) mz_kernel_destroy(m.k[i]);
  mz_runtime_destroy(m.rt);
  *episodes = done;
  *calls = m.calls;
  return m.divergences;
}

Test(model, random_api_sequences_match_the_reference) {
  uint64_t seed = getenv("MZ_MODEL_SEED") ? (uint64_t)strtoull(getenv("MZ_MODEL_SEED"), NULL, 10) : (uint64_t)test_now_ns();
  unsigned long runs = env_ul("MZ_MODEL_RUNS", 300), secs = env_ul("MZ_MODEL_SECONDS", 3);
  bool lazy = !getenv("MZ_MODEL_LAZY") || strcmp(getenv("MZ_MODEL_LAZY"), "0");
  unsigned long episodes = 0, calls = 0;
  unsigned long div = run_model(seed, runs, secs, lazy, getenv("MZ_MODEL_VERBOSE") != NULL, &episodes, &calls);
  printf("model: seed %" PRIu64 ", %lu episodes, %lu API calls, %lu divergences\n", seed, episodes, calls, div);
  /* The figure CI quotes (see also BADINPUT in test_badinput.c). */
  printf("MODEL seed=%" PRIu64 " lazy=%d episodes=%lu calls=%lu divergences=%lu\n", seed, lazy, episodes, calls, div);
  fflush(stdout);
}

/* Seeds that once diverged, replayed to their episode and beyond.
 * 6993832092122, episode 187: a buffer poisoned by an earlier graph's
 * failed writer was replaced with mz_buffer_write, then a lazy episode ran
 * the rest of a graph whose op reads it: maize read the new data (right:
 * the data was replaced), the reference restored a snapshot taken before
 * the replacement. */
Test(model, found_cases_replay) {
  static const struct {
    uint64_t seed;
    unsigned long runs;
  } found[] = {{6993832092122ull, 400}};
  for (size_t i = 0; i < sizeof found / sizeof found[0]; i++) {
    unsigned long episodes = 0, calls = 0;
    unsigned long div = run_model(found[i].seed, found[i].runs, 60, true, false, &episodes, &calls);
    cr_expect_eq(div, 0, "seed %" PRIu64 ": %lu divergences", found[i].seed, div);
    cr_expect_eq(episodes, found[i].runs, "seed %" PRIu64 ": %lu of %lu episodes in time", found[i].seed, episodes,
                 found[i].runs);
  }
}
