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
 * the CPU time of the calling thread spent in the policy's plan and select
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
 * Usage: mz-bench-sched [--quick] [--seeds N] [--copy-engine on|off]
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

extern const struct mz_policy_ops mz_policy_single, mz_policy_round_robin, mz_policy_eager, mz_policy_ws,
    mz_policy_dmda, mz_policy_heft;

static const struct mz_policy_ops *const inner[] = {&mz_policy_single, &mz_policy_round_robin, &mz_policy_eager,
                                                    &mz_policy_ws,     &mz_policy_dmda,        &mz_policy_heft};
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

#define WRAPPERS(X) X(0) X(1) X(2) X(3) X(4) X(5)
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

/* The transfer-aware lower bound of the run being planned (ns), computed
 * in w_plan from the runtime's own cost model before the policy plans. */
static double comm_bound_ns;

struct bpred {
  double arrive; /* EF(p) + the cheapest transfer of the edge */
  double ef, w;  /* EF(p), w_min(p) */
};

static int by_arrive_desc(const void *a, const void *b) {
  double x = ((const struct bpred *)a)->arrive, y = ((const struct bpred *)b)->arrive;
  return x > y ? -1 : x < y;
}

/* A lower bound on the makespan that counts the transfers no schedule can
 * avoid.  w(i): node i's cheapest execution time over the devices; c(e):
 * the cheapest transfer of edge e's bytes between two distinct devices
 * (the least latency plus the least time per byte over all pairs, below
 * any real pair).  EF(j), a bound on j's finish, in topological order:
 * for each predecessor p of j, either p ran on j's device, and then that
 * device was busy for w(p) before j started, or j waited for p's output
 * to come over a link, until EF(p) + c(p, j) at the earliest.  With P the
 * set of predecessors on j's device,
 *   start(j) >= max( max over p not in P of EF(p) + c(p, j),
 *                    max over p in P of EF(p),  sum over p in P of w(p) )
 * and no schedule does better than the least of that over all P.  Both
 * sides grow as P grows, so the least is found among the sets P that hold
 * the k predecessors with the latest arrivals EF(p) + c(p, j), k = 0..np.
 * EF(j) = that + w(j); the bound is the largest EF.  Transfers occupy no
 * device in it (maize runs them on the receiving queue or on its device's
 * copy engine, which only makes schedules longer), so it holds for every
 * policy, with copy engines or without. */
static int comm_bound(const mz_sched *s, mz_task *const tasks[], size_t n, double *out) {
  unsigned nq = mz_sched_queue_count(s);
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
  double *ef = malloc((n + 1) * sizeof *ef), *w = malloc((n + 1) * sizeof *w);
  struct bpred *pr = NULL;
  size_t prcap = 0;
  if (!ef || !w) goto oom;
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = i + 1;
  double best = 0;
  for (size_t j = 0; j < n; j++) {
    double wm = INFINITY;
    for (unsigned q = 0; q < nq; q++) {
      if (!mz_task_can_run(s, tasks[j], q)) continue;
      double e = mz_task_expected_ns(s, tasks[j], q);
      if (e >= 0 && e < wm) wm = e;
    }
    w[j] = isfinite(wm) ? wm : 0;
    unsigned np = mz_task_pred_count(tasks[j]), k = 0;
    if (np > prcap) {
      struct bpred *v = realloc(pr, np * sizeof *v);
      if (!v) goto oom;
      pr = v;
      prcap = np;
    }
    for (unsigned e = 0; e < np; e++) {
      mz_task *p = mz_task_pred(tasks[j], e);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue; /* of another run */
      size_t bytes = mz_task_edge_bytes(tasks[j], e);
      double c = bytes ? lat + pb * (double)bytes : 0;
      pr[k++] = (struct bpred){ef[ix - 1] + c, ef[ix - 1], w[ix - 1]};
    }
    if (k > 1) qsort(pr, k, sizeof *pr, by_arrive_desc);
    double start = k ? pr[0].arrive : 0, local_ef = 0, local_w = 0;
    for (unsigned m = 0; m < k; m++) { /* the first m + 1 on j's device */
      if (pr[m].ef > local_ef) local_ef = pr[m].ef;
      local_w += pr[m].w;
      double v = fmax(m + 1 < k ? pr[m + 1].arrive : 0, fmax(local_ef, local_w));
      if (v < start) start = v;
    }
    ef[j] = start + w[j];
    if (ef[j] > best) best = ef[j];
  }
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = 0;
  free(ef);
  free(w);
  free(pr);
  *out = best;
  return 0;
oom:
  free(ef);
  free(w);
  free(pr);
  return MZ_ENOMEM;
}

static int w_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct wrap *w = state;
  int brc = comm_bound(s, tasks, n, &comm_bound_ns);
  if (brc) return brc;
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

static void w_done(void *state, const mz_sched *s, const mz_task *t, unsigned q, uint64_t ns) {
  struct wrap *w = state;
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

/* Speeds of a platform, read back from the runtime's devices' names is not
 * possible through the public API, so they are parsed from the string. */
static void speeds(const char *dev, double *total, double *fastest, double *mean_link, double *ndev) {
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
    links += n * ln;
    nd += n;
    p = end;
  }
  *mean_link = nd ? links / nd : 16;
  *ndev = nd;
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
  bool copy = true;
  static const struct option longopts[] = {
      {"copy-engine", required_argument, NULL, 'C'},
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
    case 's':
      if (!bench_arg_long(prog, "--seeds", optarg, 1, 1000, &num)) return 2;
      seeds = (unsigned)num;
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
      printf("usage: %s [--quick] [--seeds N] [--platform I] [--nodes N] [--ccr X] [--policy P] [--copy-engine on|off]\n",
             prog);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  if (quick) seeds = 1;
  setenv("MZ_PERFMODEL_DIR", "off", 0);
  calibrate();
  setenv("MZ_QUIET", "1", 0);
  const unsigned sizes_full[] = {100, 1000, 10000}, sizes_quick[] = {100, 1000};
  const unsigned *sizes = quick ? sizes_quick : sizes_full;
  unsigned nsizes = quick ? 2 : 3, largest = sizes[nsizes - 1];
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
  }
  size_t cap = NPLAT * nsizes * NCCR * seeds;
  double *slr[NPOL];
  size_t nslr[NPOL] = {0};
  double ccr_sum[NPOL][NCCR] = {{0}}, ccr_n[NPOL][NCCR] = {{0}}; /* per CCR, for the breakdown */
  /* Against the bounds without transfers: the classic max(cp, work) one, and
   * the critical path alone (Topcuoglu et al.'s SLR denominator). */
  double nocomm_sum[NPOL] = {0}, cp_sum[NPOL][NCCR] = {{0}};
  double big_ns[NPOL] = {0}, big_nodes[NPOL] = {0};
  for (unsigned i = 0; i < NPOL; i++) slr[i] = calloc(cap, sizeof *slr[i]);
  printf("# sim devices with copy engines: %s\n", copy ? "on" : "off");
  printf("%-18s %6s %5s %4s %-12s %12s %12s %8s %14s %12s\n", "platform", "nodes", "ccr", "seed", "policy",
         "makespan_us", "bound_us", "slr", "plan_ns/node", "wall_ms");
  int status = 0;
  for (unsigned pi = 0; pi < NPLAT; pi++) {
    if (only_plat >= 0 && pi != (unsigned)only_plat) continue;
    char devs[512];
    with_copy(platforms[pi].devices, copy, devs, sizeof devs);
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
    double total, fastest, link;
    double nsim;
    speeds(platforms[pi].devices, &total, &fastest, &link, &nsim);
    for (unsigned si = 0; si < nsizes; si++)
      for (unsigned ci = 0; ci < NCCR; ci++)
        for (unsigned seed = 1; seed <= seeds; seed++)
          for (unsigned i = 0; i < NPOL; i++) {
            if (only_size && sizes[si] != (unsigned)only_size) continue;
            if (only_pol && strcmp(only_pol, inner[i]->name)) continue;
            if (!isnan(only_ccr) && ci) continue;
            comm_bound_ns = 0;
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
            double lb = fmax(lb0, comm_bound_ns);
            double s = (double)st.virtual_ns / lb;
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
              printf("  bounds: cp/fastest %.1f us, work/total %.1f us, with transfers %.1f us\n",
                     d->cp_flops / fastest / 1e3, d->total_flops / total / 1e3, comm_bound_ns / 1e3);
            printf("%-18s %6zu %5.1f %4u %-12s %12.1f %12.1f %8.3f %14.0f %12.2f\n", platforms[pi].label, d->nodes,
                   p.ccr, seed, inner[i]->name, st.virtual_ns / 1e3, lb / 1e3, s, plan, wall / 1e6);
            fflush(stdout);
            mz_future_destroy(f);
            mz_dag_destroy(d);
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
