/* mz-bench-sched: schedule quality of every policy on simulated platforms.
 *
 * Random layered DAGs (graph/daggen.c, HEFT-paper style) of 100 to 10,000
 * nodes (CCR 0.1, 1 and 10) run on sim platforms of 2 to 64 devices with
 * mixed speeds.  For each run it prints the makespan (virtual time) divided
 * by the lower bound
 *
 *   LB = max(critical path in flops / fastest speed, total flops / total
 *            speed, the path bound with unavoidable transfers: comm_bound)
 *
 * (the schedule length ratio, SLR), and the planning time per node:
 * the CPU time of the calling thread spent in the policy's plan, select and pick
 * calls (CPU time, so that other processes on a shared machine do not
 * inflate it), measured by wrapping the shipped ops tables, less the
 * clock's own cost per call (calibrated at start).  The last lines are
 *
 *   BENCH sched.<policy> slr_mean=<x> slr_p95=<y> slr_nocomm_mean=<w> plan_ns_per_node=<z>
 *
 * over every run (slr_nocomm_mean: against the first two terms alone), with
 * plan_ns_per_node taken on the largest DAGs
 * (10,000 nodes; 1,000 with --quick).
 *
 * The simulated devices have copy engines (copy=1: a node's input copies
 * overlap the kernels before it on its queue, as on GPUs with copy
 * streams); --copy-engine off runs them on the receiving queue instead, as
 * on devices without one.
 *
 * A run that ends before the bound fails the benchmark (exit 1): the bound
 * or the cost model it reads would be wrong.
 *
 * --exact runs DAGs of 8 to 14 nodes on platforms of 2 to 8 devices and
 * finds each DAG's optimum (sched_exact.c, branch and bound) in two
 * models: the simulator's own with copy engines (the optimum is also run
 * in the simulator, which must give its makespan) and the delay model
 * (below every schedule); it prints each policy's makespan over them
 * beside its SLR, and the optimum's own SLR: how much of a policy's SLR
 * no schedule can remove.  MZ_SCHED_EXACT_SHOW=1 prints the optimum's
 * schedule and where each policy's nodes ran and ended.
 *
 * --improve (heft, dmda and dmdas, DAGs of up to 1,000 nodes): from the
 * policy's own schedule (where each node ran, in which order), a local
 * search in the same model moves one node at a time to another queue
 * while the makespan drops (sched_model_improve, three passes), and the
 * result is run in the simulator: how much a policy leaves that single
 * moves recover, on DAGs too large for --exact.
 *
 * Usage: mz-bench-sched [--quick] [--exact | --improve] [--seeds N] [--copy-engine on|off]
 * Perf models are not written unless MZ_PERFMODEL_DIR is set. */
#include <getopt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "maize.h"
#include "maize/daggen.h"
#include "maize/policy.h"
#include "bench_util.h"
#include "sched_exact.h"

extern const struct mz_policy_ops mz_policy_single, mz_policy_round_robin, mz_policy_eager, mz_policy_ws,
    mz_policy_dmda, mz_policy_dmdas, mz_policy_heft;

static const struct mz_policy_ops *const inner[] = {&mz_policy_single, &mz_policy_round_robin, &mz_policy_eager,
                                                    &mz_policy_ws,     &mz_policy_dmda,        &mz_policy_heft,
                                                    &mz_policy_dmdas};
#define NPOL (sizeof inner / sizeof inner[0])

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The calling thread's CPU time: planning time is counted in it, so that
 * other processes on a shared machine do not inflate it. */
static uint64_t cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Timing wrappers: the same policy, with its decision time counted. */
static _Atomic uint64_t decide_ns[NPOL], decide_calls[NPOL];
/* What an empty interval measures (the clock's own cost), subtracted per
 * call: the median of many back-to-back readings. */
static double empty_ns;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void calibrate(void) {
  enum { N = 2001 };
  static uint64_t v[N];
  for (int i = 0; i < N; i++) {
    uint64_t t0 = cpu_ns();
    v[i] = cpu_ns() - t0;
  }
  qsort(v, N, sizeof v[0], cmp_u64);
  empty_ns = (double)v[N / 2];
}

static double decided_ns(unsigned i) {
  double v = (double)atomic_load(&decide_ns[i]) - empty_ns * (double)atomic_load(&decide_calls[i]);
  return v > 0 ? v : 0;
}

struct wrap {
  unsigned i;
  void *state;
};

#define WRAPPERS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
#define DEF(I)                                                                                           \
  static int init_##I(const mz_sched *s, void **state) {                                                 \
    struct wrap *w = calloc(1, sizeof *w);                                                               \
    if (!w) return MZ_ENOMEM;                                                                            \
    w->i = I;                                                                                            \
    int rc = inner[I]->init ? inner[I]->init(s, &w->state) : 0;                                          \
    if (rc) free(w);                                                                                     \
    else *state = w;                                                                                     \
    return rc;                                                                                           \
  }
WRAPPERS(DEF)
#undef DEF

static void w_fini(void *state) {
  struct wrap *w = state;
  if (inner[w->i]->fini) inner[w->i]->fini(w->state);
  free(w);
}

/* What comm_bound finds for the run being planned (ns), computed in
 * w_plan from the runtime's own cost model before the policy plans: the
 * path bound, and the idle times the energy bound in main adds. */
struct cbound {
  double path;          /* the largest EF(j) or BL(j) */
  double head, tail;    /* H and G below */
  unsigned nsrc, nsink; /* nodes without predecessors, without successors (in the run) */
};
static struct cbound comm_bound_res;

/* One neighbour of a node in the recursions below: the edge's remote
 * side (release ra, then a lane time rc; arrival ra + rc) and its local
 * side (a job of length ld released at la on the node's device). */
struct bitem {
  double ra, rc, la, ld;
  size_t from; /* the neighbour's index */
};

/* Room for need items in the scratch arrays (grown together); false on ENOMEM. */
static bool room(struct bitem **it, unsigned **ord, size_t *cap, size_t need) {
  if (need <= *cap) return true;
  struct bitem *v = realloc(*it, need * sizeof *v);
  unsigned *o = realloc(*ord, need * sizeof *o);
  if (v) *it = v;
  if (o) *ord = o;
  if (!v || !o) return false;
  *cap = need;
  return true;
}

static int by_ra(const void *a, const void *b) {
  double x = ((const struct bitem *)a)->ra, y = ((const struct bitem *)b)->ra;
  return x < y ? -1 : x > y;
}

/* The least, over the sets P of neighbours on the node's device, of
 *   max(remote(items not in P), local(P))
 * where local(P) is the end of P's jobs run one at a time on one device,
 * each from its release: at least the earliest-release-first schedule's
 * end (the least makespan of one machine with release dates), which is at
 * least max(la + ld) and sum(ld); remote(R) is, with a lane (the copies
 * into one device are made one at a time), the same schedule of R's copies
 * (each released at ra, lasting rc), else max(ra + rc).  Exact over all
 * 2^k sets for k <= 12.  Beyond, a weaker value that is still below it:
 * with the neighbours ranked by arrival ra + rc, latest first, any P
 * misses a first rank m, so its remote part is at least the m-th arrival
 * and its local part at least that of the m ranks before (a subset of P:
 * both parts only grow with their sets); the least over m is taken.
 * it[] comes sorted by ra; ord[] is scratch of k entries. */
static double least_start(const struct bitem *it, unsigned k, bool lane, unsigned *ord) {
  if (!k) return 0;
  if (k <= 12) {
    /* ERD order of the local side: by la. */
    for (unsigned i = 0; i < k; i++) ord[i] = i;
    for (unsigned i = 1; i < k; i++)
      for (unsigned j = i; j > 0 && it[ord[j - 1]].la > it[ord[j]].la; j--) {
        unsigned t = ord[j];
        ord[j] = ord[j - 1];
        ord[j - 1] = t;
      }
    double best = INFINITY;
    for (unsigned mask = 0; mask < (1u << k); mask++) { /* bit set: on the node's device */
      double rem = 0, loc = 0;
      for (unsigned i = 0; i < k; i++) /* it[] is in ra order */
        if (!(mask >> i & 1)) rem = lane ? fmax(rem, it[i].ra) + it[i].rc : fmax(rem, it[i].ra + it[i].rc);
      for (unsigned i = 0; i < k; i++)
        if (mask >> ord[i] & 1) loc = fmax(loc, it[ord[i]].la) + it[ord[i]].ld;
      double v = fmax(rem, loc);
      if (v < best) best = v;
    }
    return best;
  }
  for (unsigned i = 0; i < k; i++) ord[i] = i;
  for (unsigned i = 1; i < k; i++) /* by arrival, latest first */
    for (unsigned j = i; j > 0 && it[ord[j - 1]].ra + it[ord[j - 1]].rc < it[ord[j]].ra + it[ord[j]].rc; j--) {
      unsigned t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  double best = it[ord[0]].ra + it[ord[0]].rc, lmax = 0, lsum = 0;
  for (unsigned m = 0; m < k; m++) { /* ranks 0..m on the node's device */
    lmax = fmax(lmax, it[ord[m]].la + it[ord[m]].ld);
    lsum += it[ord[m]].ld;
    double v = fmax(m + 1 < k ? it[ord[m + 1]].ra + it[ord[m + 1]].rc : 0, fmax(lmax, lsum));
    if (v < best) best = v;
  }
  return best;
}

/* A lower bound on the makespan that counts the transfers no schedule can
 * avoid, in three parts (bench/README.md has the same in prose).
 *
 * w(i): node i's cheapest execution time over the devices; c(e): the
 * cheapest transfer of edge e's bytes between two distinct devices (the
 * least latency plus the least time per byte over all pairs, below any
 * real pair).  The platforms here have one queue per device, so a device
 * runs one node at a time; where a device has several queues that can run
 * the run's nodes, c is taken as 0 (the bound then counts no transfer).
 *
 * EF(j), a bound on j's finish, in topological order: each predecessor p
 * of j either ran on j's device, which it kept busy for w(p) from EF(p) -
 * w(p) at the earliest, or j waited for p's output to be copied into its
 * device: a copy that starts after EF(p) and takes c(p, j).  With P the
 * set of predecessors on j's device, j starts no earlier than the end of
 * P's nodes run one after another (each from its earliest start) and no
 * earlier than the end of the other predecessors' copies; when every
 * device makes its input copies one at a time (on its copy engine's
 * in-order lane, or on its one queue when it has none: the simulator does
 * either), those copies too run one after another, each from EF(p).  A
 * copy made earlier for another reader still took its time on that lane
 * between EF(p) and j's start.  No schedule does better than the least of
 * this over all P (least_start), and EF(j) = that + w(j).
 *
 * BL(i), a bound on the time from i's start to the end, in reverse: each
 * successor s either runs on i's device after i (then i's device is busy
 * with the successors there, one after another, each leaving at least
 * BL(s) - w(s) after it ends), or waits for a copy of i's output: the end
 * is at least c(i, s) + BL(s) after i ends.  Copies out of a node go to
 * different devices' lanes, so no lane is assumed there.
 *
 * The path bound is the largest EF(j) and BL(j).
 *
 * Idle times for the energy bound (main): a device whose first node is
 * not a source waits for all that node's inputs to be copied in, so it
 * computes nothing before H = the least, over nodes j with predecessors,
 * of the end of their copies; a device whose last node is not a sink
 * computes nothing in its last G = the least, over nodes i with
 * successors, of max over s of c(i, s) + BL(s).  At most nsrc devices
 * start on a source and at most nsink end on a sink; a device that runs
 * nothing idles throughout. */
static int comm_bound(const mz_sched *s, mz_task *const tasks[], size_t n, struct cbound *out) {
  unsigned nq = mz_sched_queue_count(s), nd = mz_sched_device_count(s);
  double lat = INFINITY, pb = INFINITY;
  for (unsigned a = 0; a < nq; a++)
    for (unsigned b = 0; b < nq; b++) {
      if (mz_sched_queue_device(s, a) == mz_sched_queue_device(s, b)) continue;
      double l = mz_sched_link_ns(s, a, b, 0), m = mz_sched_link_ns(s, a, b, 1u << 20);
      if (l < 0 || m < 0) continue;
      if (l < lat) lat = l;
      if ((m - l) / (double)(1u << 20) < pb) pb = (m - l) / (double)(1u << 20);
    }
  if (!isfinite(lat)) lat = pb = 0; /* one device: every edge stays on it */
  int rc = MZ_ENOMEM;
  double *ef = malloc((n + 1) * sizeof *ef), *w = malloc((n + 1) * sizeof *w), *bl = malloc((n + 1) * sizeof *bl);
  unsigned *qn = calloc(nd + 1, sizeof *qn), *nsucc = calloc(n + 1, sizeof *nsucc), *ord = NULL;
  bool *qused = calloc(nq + 1, sizeof *qused);
  size_t *sstart = calloc(n + 2, sizeof *sstart);
  struct bsucc {
    size_t j;
    double c;
  } *sl = NULL;
  struct bitem *it = NULL;
  size_t itcap = 0, nedges = 0;
  if (!ef || !w || !bl || !qn || !nsucc || !qused || !sstart) goto done;
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = i + 1;
  for (size_t j = 0; j < n; j++) {
    double wm = INFINITY;
    for (unsigned q = 0; q < nq; q++) {
      if (!mz_task_can_run(s, tasks[j], q)) continue;
      qused[q] = true;
      double e = mz_task_expected_ns(s, tasks[j], q);
      if (e >= 0 && e < wm) wm = e;
    }
    w[j] = isfinite(wm) ? wm : 0;
  }
  /* Devices with one queue that runs the run's nodes run one at a time;
   * copies into a device are made one at a time when it has a copy engine
   * or one queue in all. */
  bool lane = true;
  for (unsigned q = 0; q < nq; q++)
    if (qused[q]) qn[mz_sched_queue_device(s, q)]++;
  for (unsigned q = 0; q < nq; q++) {
    if (!qused[q]) continue;
    unsigned dv = mz_sched_queue_device(s, q), all = 0;
    for (unsigned r = 0; r < nq; r++) all += mz_sched_queue_device(s, r) == dv;
    if (qn[dv] > 1) lat = pb = 0, lane = false;
    if (!mz_sched_queue_copy_engine(s, q) && all > 1) lane = false;
  }
  /* Successor lists of the run's edges (c per edge). */
  for (size_t j = 0; j < n; j++)
    for (unsigned e = 0, np = mz_task_pred_count(tasks[j]); e < np; e++) {
      uintptr_t ix = *mz_task_policy_data(mz_task_pred(tasks[j], e));
      if (ix == 0 || ix > n || tasks[ix - 1] != mz_task_pred(tasks[j], e)) continue; /* of another run */
      nsucc[ix - 1]++;
      nedges++;
    }
  for (size_t i = 0; i < n; i++) sstart[i + 1] = sstart[i] + nsucc[i];
  sl = malloc((nedges + 1) * sizeof *sl);
  if (!sl) goto done;
  memset(nsucc, 0, n * sizeof *nsucc);
  double best = 0, head = INFINITY, tail = INFINITY;
  unsigned nsrc = 0, nsink = 0;
  for (size_t j = 0; j < n; j++) {
    unsigned np = mz_task_pred_count(tasks[j]), k = 0;
    if (!room(&it, &ord, &itcap, np)) goto done;
    for (unsigned e = 0; e < np; e++) {
      mz_task *p = mz_task_pred(tasks[j], e);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue;
      size_t bytes = mz_task_edge_bytes(tasks[j], e);
      double c = bytes ? lat + pb * (double)bytes : 0;
      sl[sstart[ix - 1] + nsucc[ix - 1]++] = (struct bsucc){j, c};
      /* One entry per producer (its largest edge), were it listed twice. */
      unsigned x = 0;
      while (x < k && it[x].from != ix - 1) x++;
      if (x < k) {
        if (c > it[x].rc) it[x].rc = c;
        continue;
      }
      it[k++] = (struct bitem){ef[ix - 1], c, ef[ix - 1] - w[ix - 1], w[ix - 1], ix - 1};
    }
    if (k > 1) qsort(it, k, sizeof *it, by_ra);
    ef[j] = least_start(it, k, lane, ord) + w[j];
    if (ef[j] > best) best = ef[j];
    if (k) {
      double all_remote = 0; /* every copy in, as a device's first node */
      for (unsigned x = 0; x < k; x++)
        all_remote = lane ? fmax(all_remote, it[x].ra) + it[x].rc : fmax(all_remote, it[x].ra + it[x].rc);
      if (all_remote < head) head = all_remote;
    } else {
      nsrc++;
    }
  }
  for (size_t i = n; i-- > 0;) {
    unsigned k = nsucc[i];
    if (!room(&it, &ord, &itcap, k)) goto done;
    double last = 0;
    for (unsigned x = 0; x < k; x++) {
      const struct bsucc *e = &sl[sstart[i] + x];
      it[x] = (struct bitem){bl[e->j], e->c, bl[e->j] - w[e->j], w[e->j], e->j};
      last = fmax(last, e->c + bl[e->j]);
    }
    if (k > 1) qsort(it, k, sizeof *it, by_ra);
    bl[i] = w[i] + least_start(it, k, false, ord);
    if (bl[i] > best) best = bl[i];
    if (k) {
      if (last < tail) tail = last;
    } else {
      nsink++;
    }
  }
  *out = (struct cbound){best, isfinite(head) ? head : 0, isfinite(tail) ? tail : 0, nsrc, nsink};
  rc = 0;
done:
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = 0;
  free(ef);
  free(w);
  free(bl);
  free(qn);
  free(nsucc);
  free(ord);
  free(qused);
  free(sstart);
  free(sl);
  free(it);
  return rc;
}

/* --exact: the optimum of the DAG being run, in both of sched_exact.h's
 * models, found once per DAG (main clears exact_have for a new one). */
static bool exact_mode, exact_have, exact_check;
static uint64_t exact_budget = 200000000;
static struct sched_exact exact_delay, exact_lane;
static const char *exact_fail; /* what the plain search found otherwise, for main to report */

/* With MZ_SCHED_EXACT_CHECK set, small DAGs are searched again without
 * the pruning (every sequence, sched_exact.h's SCHED_EXACT_PLAIN): the
 * optimum must be the same, or the pruning lost a schedule. */
static int exact_solve_both(const mz_sched *s, mz_task *const tasks[], size_t n) {
  int rc = sched_exact_solve(s, tasks, n, 0, exact_budget, &exact_delay, NULL, NULL);
  if (!rc) rc = sched_exact_solve(s, tasks, n, SCHED_EXACT_LANE, exact_budget, &exact_lane, NULL, NULL);
  if (rc || !exact_check || n > 7) return rc;
  for (unsigned f = 0; f < 2; f++) {
    struct sched_exact plain;
    rc = sched_exact_solve(s, tasks, n, f | SCHED_EXACT_PLAIN, UINT64_MAX, &plain, NULL, NULL);
    if (rc) return rc;
    const struct sched_exact *x = f ? &exact_lane : &exact_delay;
    if (fabs(plain.opt_ns - x->opt_ns) > 1e-6 * plain.opt_ns) exact_fail = f ? "copy engine" : "delay";
  }
  return 0;
}

/* The optimum run: a policy (bench-opt, --exact only) that places each
 * node where the copy-engine model's optimum has it, in its order on
 * each queue (mz_task_set_after, as heft), so that the simulator's
 * makespan under it checks the model against the simulator. */
/* --improve sets these to replay the local search's schedule instead. */
static const unsigned *replay_queue;
static const double *replay_key;
static size_t replay_n;

static int opt_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  (void)state;
  unsigned *q = malloc((n + 1) * sizeof *q);
  double *st = malloc((n + 1) * sizeof *st);
  size_t *ord = malloc((n + 1) * sizeof *ord);
  struct sched_exact r;
  int rc = !q || !st || !ord ? MZ_ENOMEM : MZ_OK;
  if (!rc && replay_queue) {
    if (replay_n != n) rc = MZ_EINVAL;
    for (size_t i = 0; !rc && i < n; i++) q[i] = replay_queue[i], st[i] = replay_key[i];
  } else if (!rc) {
    rc = sched_exact_solve(s, tasks, n, SCHED_EXACT_LANE, exact_budget, &r, q, st);
  }
  for (size_t i = 0; !rc && i < n; i++) {
    rc = mz_task_set_queue(s, tasks[i], q[i]);
    ord[i] = i;
  }
  /* Each queue in the order of the starts (few nodes: insertion sort). */
  for (size_t i = 1; !rc && i < n; i++)
    for (size_t j = i; j > 0 && (st[ord[j - 1]] > st[ord[j]] || (st[ord[j - 1]] == st[ord[j]] && ord[j - 1] > ord[j])); j--) {
      size_t t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  if (!rc && getenv("MZ_SCHED_EXACT_SHOW")) /* the optimum's schedule, node by node */
    for (size_t i = 0; i < n; i++) {
      size_t j = ord[i];
      printf("  opt: node %zu on queue %u at %.1f us, %.1f us long, after", j, q[j], st[j] / 1e3,
             mz_task_expected_ns(s, tasks[j], q[j]) / 1e3);
      for (unsigned k = 0; k < mz_task_pred_count(tasks[j]); k++)
        for (size_t x = 0; x < n; x++)
          if (tasks[x] == mz_task_pred(tasks[j], k)) printf(" %zu", x);
      printf("\n");
    }
  for (size_t i = 0; !rc && i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (q[ord[j]] == q[ord[i]]) {
        rc = mz_task_set_after(s, tasks[ord[j]], tasks[ord[i]]);
        break;
      }
  free(q);
  free(st);
  free(ord);
  return rc;
}

static int opt_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state, (void)ready;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0;
}

static const struct mz_policy_ops opt_policy = {
    .abi = MZ_POLICY_ABI, .name = "bench-opt",
    .description = "the exact optimum's placement and order (--exact), or the local search's (--improve)",
    .plan = opt_plan, .select = opt_select};

/* --improve: the run's costs (from its plan call) and where each node ran
 * (from done), for a local search from the policy's own schedule. */
static bool improve_mode;
static struct sched_model *imp_model;
struct imp_ix {
  const mz_task *t;
  size_t i;
};
static struct imp_ix *imp_ix;
static size_t imp_n;
static unsigned *imp_queue;
static double *imp_start;

static int by_task(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const struct imp_ix *)a)->t, y = (uintptr_t)((const struct imp_ix *)b)->t;
  return x < y ? -1 : x > y;
}

static void imp_clear(void) {
  sched_model_free(imp_model);
  free(imp_ix);
  free(imp_queue);
  free(imp_start);
  imp_model = NULL;
  imp_ix = NULL;
  imp_queue = NULL;
  imp_start = NULL;
  imp_n = 0;
}

static int imp_capture(const mz_sched *s, mz_task *const tasks[], size_t n) {
  imp_clear();
  imp_model = sched_model_build(s, tasks, n);
  imp_ix = malloc((n + 1) * sizeof *imp_ix);
  imp_queue = calloc(n + 1, sizeof *imp_queue);
  imp_start = calloc(n + 1, sizeof *imp_start);
  if (!imp_model || !imp_ix || !imp_queue || !imp_start) {
    imp_clear();
    return MZ_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) imp_ix[i] = (struct imp_ix){tasks[i], i};
  qsort(imp_ix, n, sizeof *imp_ix, by_task);
  imp_n = n;
  return 0;
}

/* MZ_SCHED_EXACT_SHOW: the run's tasks, so that done can name them. */
static mz_task *show_tasks[24];
static size_t show_n;

static int w_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct wrap *w = state;
  if (improve_mode) {
    int irc = imp_capture(s, tasks, n);
    if (irc) return irc;
  }
  if (exact_mode && n <= 24 && getenv("MZ_SCHED_EXACT_SHOW")) {
    memcpy(show_tasks, tasks, n * sizeof *tasks);
    show_n = n;
  }
  int brc = comm_bound(s, tasks, n, &comm_bound_res);
  if (brc) return brc;
  if (exact_mode && !exact_have) {
    brc = exact_solve_both(s, tasks, n);
    if (brc) return brc;
    exact_have = true;
  }
  if (!inner[w->i]->plan) return 0;
  uint64_t t0 = cpu_ns();
  int rc = inner[w->i]->plan(w->state, s, tasks, n);
  atomic_fetch_add(&decide_ns[w->i], cpu_ns() - t0);
  atomic_fetch_add(&decide_calls[w->i], 1);
  return rc;
}

static int w_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  struct wrap *w = state;
  uint64_t t0 = cpu_ns();
  int q = inner[w->i]->select(w->state, s, t, ready);
  atomic_fetch_add(&decide_ns[w->i], cpu_ns() - t0);
  atomic_fetch_add(&decide_calls[w->i], 1);
  return q;
}

static unsigned w_pick(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  struct wrap *w = state;
  uint64_t t0 = cpu_ns();
  unsigned k = inner[w->i]->pick(w->state, s, q, pending, n);
  atomic_fetch_add(&decide_ns[w->i], cpu_ns() - t0);
  atomic_fetch_add(&decide_calls[w->i], 1);
  return k;
}

static void w_done(void *state, const mz_sched *s, const mz_task *t, unsigned q, uint64_t ns) {
  struct wrap *w = state;
  if (imp_n) {
    struct imp_ix key = {t, 0}, *hit = bsearch(&key, imp_ix, imp_n, sizeof *imp_ix, by_task);
    if (hit) {
      imp_queue[hit->i] = q;
      imp_start[hit->i] = (double)mz_sched_now_ns(s) - (double)ns;
    }
  }
  for (size_t i = 0; i < show_n; i++)
    if (show_tasks[i] == t)
      printf("  %s: node %zu on queue %u ended at %.1f us, %.1f us long\n", inner[w->i]->name, i, q,
             mz_sched_now_ns(s) / 1e3, ns / 1e3);
  if (inner[w->i]->done) inner[w->i]->done(w->state, s, t, q, ns);
}

static struct mz_policy_ops wrapped[NPOL];
static char wnames[NPOL][64];

static int (*const inits[NPOL])(const mz_sched *, void **) = {
#define REF(I) init_##I,
    WRAPPERS(REF)
#undef REF
};

/* Platforms: 2 to 64 devices of mixed speeds. */
struct platform {
  const char *devices;
  const char *label;
};
/* CCR is relative to the mean simulated device and link (the runtime's
 * host-only CPU worker computes nothing and is not counted).  Links are
 * slow and nodes large (1e6 flops on average) so that node
 * outputs stay small in host memory (the simulator allocates real host
 * buffers) while a transfer costs ccr times a node on the mean device. */
static const struct platform platforms[] = {
    {"sim:fast*1@speed=8,link=200M/s;sim:slow*1@speed=2,link=200M/s", "2 dev (8+2)"},
    {"sim:gpu*2@speed=16,link=200M/s;sim:cpu*6@speed=2,link=400M/s", "8 dev (2x16+6x2)"},
    {"sim:gpu*4@speed=16,link=200M/s;sim:mid*4@speed=4,link=200M/s;sim:cpu*8@speed=1,link=400M/s", "16 dev"},
    {"sim:gpu*8@speed=20,link=200M/s;sim:mid*24@speed=5,link=200M/s;sim:cpu*32@speed=1,link=400M/s", "64 dev"},
};
#define NPLAT (sizeof platforms / sizeof platforms[0])
/* --exact: platforms small enough for the exhaustive search, of the same
 * classes and links (the 2-device one is the first above). */
static const struct platform platforms_exact[] = {
    {"sim:fast*1@speed=8,link=200M/s;sim:slow*1@speed=2,link=200M/s", "2 dev (8+2)"},
    {"sim:gpu*1@speed=16,link=200M/s;sim:mid*1@speed=4,link=200M/s;sim:cpu*1@speed=1,link=400M/s", "3 dev (16+4+1)"},
    {"sim:gpu*2@speed=16,link=200M/s;sim:cpu*2@speed=2,link=400M/s", "4 dev (2x16+2x2)"},
    {"sim:gpu*2@speed=16,link=200M/s;sim:cpu*6@speed=2,link=400M/s", "8 dev (2x16+6x2)"},
};
#define NPLAT_EXACT (sizeof platforms_exact / sizeof platforms_exact[0])

/* Speeds of a platform, read back from the runtime's devices' names is not
 * possible through the public API, so they are parsed from the string. */
static int by_speed_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x > y ? -1 : x < y;
}

/* sp[] gets each device's speed, fastest first (at most cap of them). */
static void speeds(const char *dev, double *total, double *fastest, double *mean_link, double *ndev, double *sp_out,
                   unsigned cap) {
  *total = 0;
  *fastest = 0;
  double links = 0, nd = 0;
  const char *p = dev;
  while ((p = strstr(p, "sim:"))) {
    unsigned n = 1;
    double sp = 1, ln = 16;
    const char *star = strchr(p, '*'), *end = strchr(p, ';');
    if (!end) end = p + strlen(p);
    if (star && star < end) n = (unsigned)atoi(star + 1);
    const char *s = strstr(p, "speed=");
    if (s && s < end) sp = atof(s + 6);
    const char *l = strstr(p, "link=");
    if (l && l < end) {
      char *u;
      ln = strtod(l + 5, &u);
      if (*u == 'M') ln /= 1e3; /* GB/s */
      if (*u == 'K') ln /= 1e6;
    }
    *total += n * sp;
    if (sp > *fastest) *fastest = sp;
    for (unsigned i = 0; i < n && nd + i < cap; i++) sp_out[(unsigned)nd + i] = sp;
    links += n * ln;
    nd += n;
    p = end;
  }
  *mean_link = nd ? links / nd : 16;
  *ndev = nd;
  qsort(sp_out, nd < cap ? (size_t)nd : cap, sizeof *sp_out, by_speed_desc);
}

/* The energy bound: a device of speed s computes at most s (T - idle)
 * flops by the makespan T, so T >= (total flops + sum of s idle) / total
 * speed, with the idle times of comm_bound: a device whose first node is
 * not a source idles H at the start, one whose last node is not a sink G
 * at the end (both: H + G; one that runs nothing: T, at least lb).  At
 * most nsrc devices start on a source and nsink end on a sink; the least
 * sum puts the smallest idle times on the fastest devices (rearrangement)
 * for every overlap o of the two sets, and the least over o is taken.
 * Each round uses a proven lb for T and yields one; it stops when it no
 * longer grows.  sp[] is fastest first. */
static double energy_bound(double work, const double *sp, unsigned nd, double total, const struct cbound *b,
                           double lb) {
  unsigned a = b->nsrc < nd ? b->nsrc : nd, z = b->nsink < nd ? b->nsink : nd;
  for (int round = 0; round < 100 && total > 0; round++) {
    double H = fmin(b->head, lb), G = fmin(b->tail, lb), F = fmin(b->head + b->tail, lb);
    double least = INFINITY;
    for (unsigned o = a + z > nd ? a + z - nd : 0; o <= (a < z ? a : z); o++) {
      /* o devices idle 0, a - o only G (a source, no sink), z - o only H, the rest F. */
      unsigned cnt[3] = {a - o, z - o, nd - a - z + o};
      double val[3] = {G, H, F};
      if (H < G) cnt[0] = z - o, cnt[1] = a - o, val[0] = H, val[1] = G;
      double sum = 0;
      unsigned d = o;
      for (unsigned g = 0; g < 3; g++)
        for (unsigned i = 0; i < cnt[g] && d < nd; i++) sum += sp[d++] * val[g];
      if (sum < least) least = sum;
    }
    double nl = (work + least) / total;
    if (!(nl > lb * (1 + 1e-12))) break;
    lb = nl;
  }
  return lb;
}

/* The platform with ",copy=<on>" in every class's description (each has
 * an '@' list). */
static void with_copy(const char *dev, bool on, char *out, size_t cap) {
  size_t n = 0;
  for (const char *p = dev; *p && n + 8 < cap; p++) {
    if (*p == ';') n += (size_t)snprintf(out + n, cap - n, ",copy=%d", on);
    out[n++] = *p;
  }
  snprintf(out + n, cap - n, ",copy=%d", on);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  bool quick = false;
  unsigned seeds = 3;
  int only_plat = -1, only_size = 0;
  double only_ccr = NAN;
  const char *only_pol = NULL;
  bool copy = true, seeds_given = false;
  static const struct option longopts[] = {
      {"copy-engine", required_argument, NULL, 'C'}, {"exact", no_argument, NULL, 'x'},
      {"improve", no_argument, NULL, 'I'},
      {"quick", no_argument, NULL, 'q'},          {"seeds", required_argument, NULL, 's'},
      {"platform", required_argument, NULL, 'p'}, {"nodes", required_argument, NULL, 'n'},
      {"ccr", required_argument, NULL, 'c'},      {"policy", required_argument, NULL, 'P'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-sched";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'q': quick = true; break;
    case 'x': exact_mode = true; break;
    case 'I': improve_mode = true; break;
    case 's':
      if (!bench_arg_long(prog, "--seeds", optarg, 1, 1000, &num)) return 2;
      seeds = (unsigned)num;
      seeds_given = true;
      break;
    case 'p':
      if (!bench_arg_long(prog, "--platform", optarg, 0, 1000, &num)) return 2;
      only_plat = (int)num;
      break;
    case 'n':
      if (!bench_arg_long(prog, "--nodes", optarg, 1, 10000000, &num)) return 2;
      only_size = (int)num;
      break;
    case 'c':
      if (!bench_arg_double(prog, "--ccr", optarg, -1e9, 1e9, &only_ccr)) return 2;
      break;
    case 'P': only_pol = optarg; break;
    case 'C':
      if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
        fprintf(stderr, "%s: --copy-engine takes on or off, not '%s'\n", prog, optarg);
        return 2;
      }
      copy = !strcmp(optarg, "on");
      break;
    case 'h':
      printf("usage: %s [--quick] [--exact | --improve] [--seeds N] [--platform I] [--nodes N] [--ccr X] [--policy P] "
             "[--copy-engine on|off]\n",
             prog);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  if (quick) seeds = 1;
  if (exact_mode && !seeds_given) seeds = quick ? 2 : 5;
  if (improve_mode && (exact_mode || !copy)) {
    fprintf(stderr, "%s: --improve runs on the full benchmark's DAGs with copy engines (not with --exact or "
            "--copy-engine off)\n", prog);
    return 2;
  }
  if (exact_mode && !copy) {
    fprintf(stderr, "%s: --exact models the simulator's copy engines; it does not run with --copy-engine off\n", prog);
    return 2;
  }
  if (exact_mode && only_size > 24) {
    fprintf(stderr, "%s: --exact searches DAGs of at most 24 nodes, not %d\n", prog, only_size);
    return 2;
  }
  /* MZ_SCHED_EXACT_BUDGET: partial schedules the search may visit per DAG
   * and model (a run over it is reported as not proven). */
  const char *eb = getenv("MZ_SCHED_EXACT_BUDGET");
  double ebv;
  if (eb && *eb) {
    if (!bench_arg_double(prog, "MZ_SCHED_EXACT_BUDGET", eb, 1, 1e15, &ebv)) return 2;
    exact_budget = (uint64_t)ebv;
  }
  exact_check = getenv("MZ_SCHED_EXACT_CHECK") != NULL;
  const struct platform *plats = exact_mode ? platforms_exact : platforms;
  unsigned nplat = exact_mode ? (unsigned)NPLAT_EXACT : (unsigned)NPLAT;
  /* MZ_SCHED_BOUND_SCALE multiplies the bound: only to see that the check
   * below fails a run that ends before it (a test does). */
  double bound_scale = 1;
  const char *bs = getenv("MZ_SCHED_BOUND_SCALE");
  if (bs && *bs && !bench_arg_double(prog, "MZ_SCHED_BOUND_SCALE", bs, 1e-9, 1e9, &bound_scale)) return 2;
  setenv("MZ_PERFMODEL_DIR", "off", 0);
  calibrate();
  setenv("MZ_QUIET", "1", 0);
  const unsigned sizes_full[] = {100, 1000, 10000}, sizes_quick[] = {100, 1000};
  const unsigned sizes_exact[] = {8, 10, 12, 14}, sizes_exact_quick[] = {8};
  const unsigned *sizes = exact_mode ? (quick ? sizes_exact_quick : sizes_exact) : quick ? sizes_quick : sizes_full;
  unsigned nsizes = exact_mode ? (quick ? 1 : 4) : quick ? 2 : 3, largest = sizes[nsizes - 1];
  /* --nodes: a size of the list keeps its place in it (the DAGs' seeds
   * count it, so a run of one size is the same DAG as in the full run);
   * another size is a list of its own. */
  bool listed = false;
  for (unsigned k = 0; k < nsizes; k++) listed |= sizes[k] == (unsigned)only_size;
  if (only_size && !listed) {
    static unsigned one;
    one = (unsigned)only_size;
    sizes = &one;
    nsizes = 1;
    largest = one;
  }
  const double ccrs[] = {0.1, 1.0, 10.0};
  enum { NCCR = 3 };
  for (unsigned i = 0; i < NPOL; i++) {
    wrapped[i] = *inner[i];
    snprintf(wnames[i], sizeof wnames[i], "bench-%s", inner[i]->name);
    wrapped[i].name = wnames[i];
    wrapped[i].init = inits[i];
    wrapped[i].fini = w_fini;
    wrapped[i].plan = w_plan; /* also computes the bound */
    wrapped[i].select = inner[i]->select ? w_select : NULL;
    wrapped[i].done = w_done;
    wrapped[i].pick = inner[i]->pick ? w_pick : NULL;
  }
  size_t cap = nplat * nsizes * NCCR * seeds;
  double *slr[NPOL];
  size_t nslr[NPOL] = {0};
  double ccr_sum[NPOL][NCCR] = {{0}}, ccr_n[NPOL][NCCR] = {{0}}; /* per CCR, for the breakdown */
  /* Against the bounds without transfers: the classic max(cp, work) one, and
   * the critical path alone (Topcuoglu et al.'s SLR denominator). */
  double nocomm_sum[NPOL] = {0}, cp_sum[NPOL][NCCR] = {{0}};
  double big_ns[NPOL] = {0}, big_nodes[NPOL] = {0};
  /* --exact: makespan over the optimum (copy engine, delay), per CCR, and
   * the optimum's own SLR (what the bound leaves to any schedule). */
  double xr_sum[NPOL][NCCR] = {{0}}, xr_max[NPOL][NCCR] = {{0}}, xd_sum[NPOL][NCCR] = {{0}},
         xo_sum[NPOL][NCCR] = {{0}}, xo_cp[NPOL][NCCR] = {{0}}, xn[NPOL][NCCR] = {{0}};
  unsigned unproven = 0, replayed = 0;
  /* --improve: the local search's schedule run in the simulator, over the policy's makespan. */
  double im_sum[NPOL][NCCR] = {{0}}, im_min[NPOL][NCCR], im_n[NPOL][NCCR] = {{0}};
  for (unsigned i = 0; i < NPOL; i++)
    for (unsigned c = 0; c < NCCR; c++) im_min[i][c] = INFINITY;
  double replay_diff = 0; /* the largest |simulated - model| of the optimum's runs, ns */
  for (unsigned i = 0; i < NPOL; i++) slr[i] = calloc(cap, sizeof *slr[i]);
  printf("# sim devices with copy engines: %s\n", copy ? "on" : "off");
  if (exact_mode)
    printf("%-18s %6s %5s %4s %-12s %12s %12s %8s %12s %9s %9s\n", "platform", "nodes", "ccr", "seed", "policy",
           "makespan_us", "bound_us", "slr", "opt_us", "ms/opt", "ms/delay");
  else
    printf("%-18s %6s %5s %4s %-12s %12s %12s %8s %14s %12s\n", "platform", "nodes", "ccr", "seed", "policy",
           "makespan_us", "bound_us", "slr", "plan_ns/node", "wall_ms");
  int status = 0;
  for (unsigned pi = 0; pi < nplat; pi++) {
    if (only_plat >= 0 && pi != (unsigned)only_plat) continue;
    char devs[512];
    with_copy(plats[pi].devices, copy, devs, sizeof devs);
    mz_runtime_config cfg = {.devices = devs, .quiet = true};
    mz_runtime *rt;
    if (mz_runtime_create(&cfg, &rt)) {
      fprintf(stderr, "cannot create the runtime for %s: %s\n", devs, mz_runtime_last_error(NULL));
      return 1;
    }
    for (unsigned i = 0; i < NPOL; i++)
      if (mz_policy_register(rt, &wrapped[i])) {
        fprintf(stderr, "register: %s\n", mz_runtime_last_error(rt));
        return 1;
      }
    if ((exact_mode || improve_mode) && mz_policy_register(rt, &opt_policy)) {
      fprintf(stderr, "register: %s\n", mz_runtime_last_error(rt));
      return 1;
    }
    double total, fastest, link;
    double nsim, sp[256];
    speeds(plats[pi].devices, &total, &fastest, &link, &nsim, sp, 256);
    for (unsigned si = 0; si < nsizes; si++)
      for (unsigned ci = 0; ci < NCCR; ci++)
        for (unsigned seed = 1; seed <= seeds; seed++) {
          exact_have = false; /* a new DAG (each policy below builds the same one) */
          if (only_size && sizes[si] != (unsigned)only_size) continue;
          for (unsigned i = 0; i < NPOL; i++) {
            if (only_pol && strcmp(only_pol, inner[i]->name)) continue;
            if (!isnan(only_ccr) && ci) continue;
            comm_bound_res = (struct cbound){0};
            mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = sizes[si], .ccr = isnan(only_ccr) ? ccrs[ci] : only_ccr, .seed = seed * 7919 + si,
                               .flops = 1e6, .ref_speed = total / nsim, .ref_link = link};
            mz_dag *d;
            if (mz_dag_generate(rt, &p, &d)) {
              fprintf(stderr, "daggen: %s\n", mz_runtime_last_error(rt));
              return 1;
            }
            atomic_store(&decide_ns[i], 0);
            atomic_store(&decide_calls[i], 0);
            uint64_t t0 = now_ns();
            mz_future *f;
            if (mz_schedule(d->g, d->root, wnames[i], &f)) {
              fprintf(stderr, "schedule: %s\n", mz_runtime_last_error(rt));
              return 1;
            }
            int rc = mz_future_wait(f);
            uint64_t wall = now_ns() - t0;
            mz_run_stats st;
            if (rc || mz_future_stats(f, &st)) {
              fprintf(stderr, "%s failed: %s\n", inner[i]->name, mz_future_message(f));
              status = 1;
              mz_future_destroy(f);
              mz_dag_destroy(d);
              continue;
            }
            double lb0 = fmax(d->cp_flops / fastest, d->total_flops / total);
            double lbp = fmax(lb0, comm_bound_res.path);
            double lb = energy_bound(d->total_flops, sp, (unsigned)fmin(nsim, 256), total, &comm_bound_res, lbp);
            if (bound_scale != 1) lb *= bound_scale;
            double s = (double)st.virtual_ns / lb;
            /* Every term is a lower bound: a schedule that beats one means
             * the bound or the cost model it reads is wrong (the simulator
             * rounds each slot to a ns, hence the slack). */
            if ((double)st.virtual_ns + (double)d->nodes < lb * (1 - 1e-9)) {
              fprintf(stderr, "%s: %s ended at %.1f us, before the lower bound %.1f us (%s, %zu nodes, CCR %g)\n", prog,
                      inner[i]->name, st.virtual_ns / 1e3, lb / 1e3, plats[pi].label, d->nodes, p.ccr);
              status = 1;
            }
            nocomm_sum[i] += (double)st.virtual_ns / lb0;
            cp_sum[i][ci] += (double)st.virtual_ns / (d->cp_flops / fastest);
            double plan = decided_ns(i) / (double)d->nodes;
            slr[i][nslr[i]++] = s;
            ccr_sum[i][ci] += s;
            ccr_n[i][ci]++;
            if (sizes[si] == largest) {
              big_ns[i] += decided_ns(i);
              big_nodes[i] += (double)d->nodes;
            }
            if (getenv("MZ_SCHED_BOUNDS"))
              printf("  bounds: cp/fastest %.1f us, work/total %.1f us, path with transfers %.1f us, all terms %.1f us"
                     " (H %.1f us, G %.1f us, %u sources, %u sinks)\n",
                     d->cp_flops / fastest / 1e3, d->total_flops / total / 1e3, comm_bound_res.path / 1e3,
                     lb / 1e3, comm_bound_res.head / 1e3, comm_bound_res.tail / 1e3, comm_bound_res.nsrc,
                     comm_bound_res.nsink);
            if (exact_mode) {
              if (!exact_have) {
                fprintf(stderr, "%s: %s made no plan call: no optimum for this DAG\n", prog, inner[i]->name);
                status = 1;
              } else {
                /* The delay model's optimum is below every schedule, and
                 * the copy-engine model's is the simulator's best: a run
                 * that beats either (beyond the simulator's rounding of
                 * each slot to a ns) means the model is not what the
                 * simulator does. */
                double od = exact_delay.opt_ns, ol = exact_lane.opt_ns, slack = 2.0 * (double)d->nodes;
                if ((double)st.virtual_ns + slack < od || (exact_lane.proven && (double)st.virtual_ns + slack < ol)) {
                  fprintf(stderr, "%s: %s ended at %.3f us, before the optimum %.3f us (delay %.3f us; %s, %zu nodes, CCR %g)\n",
                          prog, inner[i]->name, st.virtual_ns / 1e3, ol / 1e3, od / 1e3, plats[pi].label, d->nodes, p.ccr);
                  status = 1;
                }
                if (!exact_lane.proven || !exact_delay.proven) unproven++;
                double r = (double)st.virtual_ns / ol;
                xr_sum[i][ci] += r;
                if (r > xr_max[i][ci]) xr_max[i][ci] = r;
                xd_sum[i][ci] += (double)st.virtual_ns / od;
                xo_sum[i][ci] += ol / lb;
                xo_cp[i][ci] += ol / (d->cp_flops / fastest);
                xn[i][ci]++;
                printf("%-18s %6zu %5.1f %4u %-12s %12.1f %12.1f %8.3f %12.1f %9.3f %9.3f%s\n", plats[pi].label,
                       d->nodes, p.ccr, seed, inner[i]->name, st.virtual_ns / 1e3, lb / 1e3, s, ol / 1e3, r,
                       (double)st.virtual_ns / od, exact_lane.proven && exact_delay.proven ? "" : " (not proven)");
              }
            } else {
              printf("%-18s %6zu %5.1f %4u %-12s %12.1f %12.1f %8.3f %14.0f %12.2f\n", plats[pi].label, d->nodes,
                     p.ccr, seed, inner[i]->name, st.virtual_ns / 1e3, lb / 1e3, s, plan, wall / 1e6);
            }
            fflush(stdout);
            /* --improve: from the policy's own schedule, a local search in
             * the simulator's model, then its result run in the simulator. */
            bool cost_pol = !strcmp(inner[i]->name, "heft") || !strcmp(inner[i]->name, "dmda") ||
                            !strcmp(inner[i]->name, "dmdas");
            if (improve_mode && cost_pol && imp_n == d->nodes && d->nodes <= 1000) {
              double before, after;
              uint64_t c0 = cpu_ns();
              int irc = sched_model_improve(imp_model, imp_queue, imp_start, 3, &before, &after);
              double search_ms = (double)(cpu_ns() - c0) / 1e6;
              size_t nn = d->nodes;
              mz_future_destroy(f);
              mz_dag_destroy(d);
              if (irc) {
                fprintf(stderr, "%s: local search: error %d\n", prog, irc);
                return 1;
              }
              replay_queue = imp_queue;
              replay_key = imp_start;
              replay_n = nn;
              mz_run_stats rs;
              f = NULL;
              if (mz_dag_generate(rt, &p, &d) || mz_schedule(d->g, d->root, "bench-opt", &f) || mz_future_wait(f) ||
                  mz_future_stats(f, &rs)) {
                fprintf(stderr, "%s: the local search's run failed: %s\n", prog,
                        f ? mz_future_message(f) : mz_runtime_last_error(rt));
                return 1;
              }
              replay_queue = NULL;
              /* heft runs its plan in order on each queue, so the model must
               * give its makespan, and the searched schedule's as run. */
              double slack = 2.0 * (double)nn;
              if ((!strcmp(inner[i]->name, "heft") && fabs(before - (double)st.virtual_ns) > slack) ||
                  fabs(after - (double)rs.virtual_ns) > slack) {
                fprintf(stderr, "%s: the model is not the simulator: %s ran %.3f us (model %.3f us), the searched "
                        "schedule %.3f us (model %.3f us)\n", prog, inner[i]->name, st.virtual_ns / 1e3, before / 1e3,
                        rs.virtual_ns / 1e3, after / 1e3);
                status = 1;
              }
              double r = (double)rs.virtual_ns / (double)st.virtual_ns;
              im_sum[i][ci] += r;
              im_n[i][ci]++;
              if (r < im_min[i][ci]) im_min[i][ci] = r;
              printf("  local search from %s: model %.1f us (ran %.1f us), searched %.1f us, ran %.1f us (%.3f), "
                     "search cpu %.1f ms\n",
                     inner[i]->name, before / 1e3, st.virtual_ns / 1e3, after / 1e3, rs.virtual_ns / 1e3, r, search_ms);
            }
            mz_future_destroy(f);
            mz_dag_destroy(d);
          }
          if (exact_mode && exact_have && exact_fail) {
            fprintf(stderr, "%s: the pruned search's optimum (%s model) differs from the plain search's (%s, seed %u)\n",
                    prog, exact_fail, plats[pi].label, seed);
            exact_fail = NULL;
            status = 1;
          }
          /* The optimum, run: the simulator must give the model's makespan. */
          if (exact_mode && exact_have && exact_lane.proven) {
            mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = sizes[si], .ccr = isnan(only_ccr) ? ccrs[ci] : only_ccr,
                               .seed = seed * 7919 + si, .flops = 1e6, .ref_speed = total / nsim, .ref_link = link};
            mz_dag *d;
            mz_future *f = NULL;
            mz_run_stats st;
            if (mz_dag_generate(rt, &p, &d) || mz_schedule(d->g, d->root, "bench-opt", &f) || mz_future_wait(f) ||
                mz_future_stats(f, &st)) {
              fprintf(stderr, "%s: the optimum's run failed: %s\n", prog,
                      f ? mz_future_message(f) : mz_runtime_last_error(rt));
              return 1;
            }
            double slack = 2.0 * (double)d->nodes;
            replayed++;
            replay_diff = fmax(replay_diff, fabs((double)st.virtual_ns - exact_lane.opt_ns));
            if (fabs((double)st.virtual_ns - exact_lane.opt_ns) > slack) {
              fprintf(stderr, "%s: the optimum ran %.3f us in the simulator, the model says %.3f us (%s, seed %u)\n",
                      prog, st.virtual_ns / 1e3, exact_lane.opt_ns / 1e3, plats[pi].label, seed);
              status = 1;
            }
            mz_future_destroy(f);
            mz_dag_destroy(d);
          }
          if (exact_mode && exact_have && getenv("MZ_SCHED_BOUNDS"))
            printf("  optimum: copy engine %.1f us (%llu visits), delay model %.1f us (%llu visits)\n",
                   exact_lane.opt_ns / 1e3, (unsigned long long)exact_lane.visits, exact_delay.opt_ns / 1e3,
                   (unsigned long long)exact_delay.visits);
        }
    mz_runtime_destroy(rt);
  }
  /* The breakdown by CCR first: the bound ignores transfers, so how far a
   * policy is from it depends mostly on the CCR. */
  for (unsigned i = 0; i < NPOL; i++)
    for (unsigned ci = 0; ci < NCCR; ci++)
      if (ccr_n[i][ci])
        printf("sched.%s ccr=%g slr_mean=%.3f slr_cp_mean=%.3f runs=%.0f\n", inner[i]->name,
               isnan(only_ccr) ? ccrs[ci] : only_ccr, ccr_sum[i][ci] / ccr_n[i][ci], cp_sum[i][ci] / ccr_n[i][ci],
               ccr_n[i][ci]);
  for (unsigned i = 0; i < NPOL; i++)
    for (unsigned ci = 0; ci < NCCR; ci++)
      if (im_n[i][ci])
        printf("sched_improve.%s ccr=%g searched_over_policy_mean=%.3f min=%.3f runs=%.0f\n", inner[i]->name,
               isnan(only_ccr) ? ccrs[ci] : only_ccr, im_sum[i][ci] / im_n[i][ci], im_min[i][ci], im_n[i][ci]);
  imp_clear();
  if (exact_mode) {
    /* Per policy and CCR: makespan over the optimum, and the optimum's
     * own SLR against the bound (the part of a policy's SLR no schedule
     * can remove), then over all runs. */
    for (unsigned i = 0; i < NPOL; i++) {
      double a = 0, m = 0, dd = 0, o = 0, sl = 0, n = 0;
      for (unsigned ci = 0; ci < NCCR; ci++) {
        if (!xn[i][ci]) continue;
        printf("sched_exact.%s ccr=%g opt_ratio_mean=%.3f opt_ratio_max=%.3f delay_ratio_mean=%.3f slr_mean=%.3f "
               "opt_slr_mean=%.3f opt_slr_cp_mean=%.3f runs=%.0f\n",
               inner[i]->name, isnan(only_ccr) ? ccrs[ci] : only_ccr, xr_sum[i][ci] / xn[i][ci], xr_max[i][ci],
               xd_sum[i][ci] / xn[i][ci], ccr_sum[i][ci] / ccr_n[i][ci], xo_sum[i][ci] / xn[i][ci],
               xo_cp[i][ci] / xn[i][ci], xn[i][ci]);
        a += xr_sum[i][ci], dd += xd_sum[i][ci], o += xo_sum[i][ci], sl += ccr_sum[i][ci], n += xn[i][ci];
        if (xr_max[i][ci] > m) m = xr_max[i][ci];
      }
      if (n)
        printf("BENCH sched_exact.%s opt_ratio_mean=%.3f opt_ratio_max=%.3f delay_ratio_mean=%.3f slr_mean=%.3f "
               "opt_slr_mean=%.3f runs=%.0f\n",
               inner[i]->name, a / n, m, dd / n, sl / n, o / n, n);
    }
    if (unproven) printf("# %u runs against an optimum not proven (search budget reached)\n", unproven);
    printf("# the optimum run in the simulator: %u DAGs, at most %.1f ns from the model's makespan\n", replayed,
           replay_diff);
    for (unsigned i = 0; i < NPOL; i++) free(slr[i]);
    return status;
  }
  for (unsigned i = 0; i < NPOL; i++) {
    double sum = 0;
    for (size_t k = 0; k < nslr[i]; k++) sum += slr[i][k];
    if (nslr[i]) qsort(slr[i], nslr[i], sizeof *slr[i], cmp_d);
    double mean = nslr[i] ? sum / nslr[i] : NAN;
    double p95 = nslr[i] ? slr[i][(size_t)ceil(0.95 * nslr[i]) - 1] : NAN;
    printf("BENCH sched.%s slr_mean=%.3f slr_p95=%.3f slr_nocomm_mean=%.3f plan_ns_per_node=%.0f\n", inner[i]->name,
           mean, p95, nslr[i] ? nocomm_sum[i] / nslr[i] : NAN, big_nodes[i] ? big_ns[i] / big_nodes[i] : NAN);
    free(slr[i]);
  }
  return status;
}
