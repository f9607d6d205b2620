/* mz-bench-overhead: the dispatch overhead of empty CPU tasks.
 *
 * N empty tasks, first independent and then as a dependent chain, with 1
 * and 2 workers, in maize, in OpenMP tasks and (when built with StarPU) in
 * StarPU.  Each figure is the median of -r repetitions, in nanoseconds per
 * task, from submission to completion:
 *
 *  maize   a CPU kernel with an empty cpu.fn.  Independent: params "i32 k",
 *          one shared scalar argument, so the tasks share no buffer, joined
 *          by one mz_join.  Chain: params "inout u8[] t" on one 1-byte
 *          buffer, so the buffer hazards (RAW/WAW in build order) chain
 *          the tasks; the root is the last apply.  The graph is built
 *          first (timed apart: "build"), then the figure is mz_schedule()
 *          to mz_future_wait() and mz_future_destroy(), as a loop of runs
 *          pays them, of which the time inside mz_schedule() is printed
 *          apart ("sched"); then the same graph is run again four times
 *          with mz_graph_run(): the first lowers it for re-runs (closure,
 *          edges and the copy that later runs replay: "lower", printed
 *          apart), the median of the other three is "rerun" (no build;
 *          again to mz_future_destroy()).  The
 *          BENCH figure maize_ns is build + schedule + run, since OpenMP's
 *          and StarPU's figures include creating their tasks; run_ns,
 *          build_ns and rerun_ns are its parts.  Runtime: devices "cpu:1" or "cpu:2";
 *          policy "eager" (and "single" for the chain).  Every run checks
 *          that mz_future_stats() counted N ops, and gives up on a hang.
 *  openmp  #pragma omp task in one single region (independent), with
 *          depend(inout: x) for the chain; the figure includes the
 *          parallel region and its closing barrier.
 *  starpu  starpu_task_insert of an empty STARPU_CPU codelet (no buffers
 *          for independent, STARPU_RW on one registered variable for the
 *          chain), then starpu_task_wait_for_all(); conf.ncpus = workers,
 *          no CUDA or OpenCL workers; StarPU is initialized once per
 *          worker count.
 *
 * Usage: mz-bench-overhead [-n N] [-r reps] [--quick] [--only maize|openmp|starpu]
 *                           [--shape independent|chain] [--indep-buffers]
 * --indep-buffers gives each independent maize task its own 1-byte buffer
 * ("inout u8[] t") instead of the shared scalar.
 * The last lines are machine readable, one per shape:
 *   BENCH overhead.<shape> maize_ns=<x> openmp_ns=<y> starpu_ns=<z|na> maize_run_ns=<r>
 *         maize_build_ns=<b> maize_rerun_ns=<rr> ratio_omp=<x/y> tasks=<N> maize_lower_ns=<l>
 * The figures depend on N: past the caches (about 100,000 tasks on a
 * machine with 32 MB of them) every pass over the tasks costs a line from
 * memory per task (bench/README.md, session 16), so N is printed too.
 * (maize is the default policy, eager.) */
#include <getopt.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maize.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MZ_HAVE_STARPU
#include <starpu.h>
#endif

#include "bench_util.h"

#define MAX_REPS 101
#define NSHAPES 4 /* independent_1w, independent_2w, chain_1w, chain_2w */

enum { FW_MAIZE = 1, FW_OPENMP = 2, FW_STARPU = 4, FW_ALL = 7 };

static const char *const shape_names[NSHAPES] = {"independent_1w", "independent_2w", "chain_1w",
                                                 "chain_2w"};

/* Results, ns per task; negative: not measured. */
typedef struct results {
  double maize[NSHAPES];        /* eager */
  double maize_single[NSHAPES]; /* single (chain shapes only) */
  double maize_build[NSHAPES];  /* graph build, ns per task */
  double maize_sched[NSHAPES];  /* inside mz_schedule() (part of maize[]) */
  double maize_rerun[NSHAPES];  /* mz_graph_run() of the built graph, to the end of the run */
  double maize_lower[NSHAPES];  /* the first of them, which lowers it for re-runs */
  double openmp[NSHAPES];
  double starpu[NSHAPES];
} results;

static size_t n_tasks = 200000;
static int reps = 5;
static int indep_buffers; /* independent maize tasks on their own buffers */
static int shapes_mask = 3; /* 1: independent, 2: chain */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int shape_index(int chain, int workers) { return chain * 2 + (workers - 1); }

/* An empty task body the compiler cannot remove. */
static void __attribute__((noinline)) empty_body(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* ------------------------------------------------------------------ maize */

static int mz_empty_fn(const mz_call *call) {
  (void)call;
  return 0;
}

typedef struct mz_bench {
  mz_runtime *rt;
  mz_kernel *k_indep; /* "i32 k" */
  mz_kernel *k_chain; /* "inout u8[] t" */
  mz_buffer *buf;     /* the chain's 1-byte buffer */
  mz_buffer **bufs;   /* --indep-buffers: one 1-byte buffer per task */
  mz_op **ops;        /* n_tasks slots, for the join */
} mz_bench;

static void die_mz(mz_runtime *rt, const char *what, int rc) {
  fprintf(stderr, "mz-bench-overhead: %s: %s (%s)%s%s\n", what, mz_err_name(rc), mz_strerror(rc),
          rt ? ": " : "", rt ? mz_runtime_last_error(rt) : "");
  exit(1);
}

/* One measurement: build the graph of n tasks, schedule it with policy, wait.
 * Returns the schedule+run time; *build_ns gets the build time and
 * *sched_ns the time mz_schedule() itself took. */
static uint64_t mz_wait_checked(mz_bench *b, mz_future *f, int chain, size_t n, const char *policy);

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint64_t mz_measure(mz_bench *b, int chain, size_t n, const char *policy, uint64_t *build_ns,
                           uint64_t *sched_ns, uint64_t *rerun_ns, uint64_t *lower_ns) {
  uint64_t t0 = now_ns();
  mz_graph *g;
  int rc = mz_graph_create(b->rt, &g);
  if (rc != MZ_OK) die_mz(b->rt, "mz_graph_create", rc);
  mz_op *root;
  if (chain) {
    mz_op *v = mz_value(g, b->buf);
    mz_op *last = NULL;
    for (size_t i = 0; i < n; i++) last = mz_apply(g, b->k_chain, v, NULL);
    root = last;
  } else {
    if (b->bufs) {
      for (size_t i = 0; i < n; i++) b->ops[i] = mz_apply(g, b->k_chain, mz_value(g, b->bufs[i]), NULL);
    } else {
      mz_op *k = mz_i32(g, 0);
      for (size_t i = 0; i < n; i++) b->ops[i] = mz_apply(g, b->k_indep, k, NULL);
    }
    root = mz_join(g, (unsigned)n, b->ops);
  }
  uint64_t t1 = now_ns();
  if (mz_graph_status(g) != MZ_OK) {
    fprintf(stderr, "mz-bench-overhead: graph build failed: %s: %s\n", mz_err_name(mz_graph_status(g)),
            mz_graph_message(g));
    exit(1);
  }

  mz_future *f;
  rc = mz_schedule(g, root, policy, &f);
  if (rc != MZ_OK) die_mz(b->rt, "mz_schedule", rc);
  uint64_t ts = now_ns();
  mz_wait_checked(b, f, chain, n, policy);
  mz_future_destroy(f);
  uint64_t t2 = now_ns();
  uint64_t rr[4];
  for (int i = 0; i < 4; i++) {
    uint64_t t3 = now_ns();
    rc = mz_graph_run(g, root, policy, &f);
    if (rc != MZ_OK) die_mz(b->rt, "mz_graph_run", rc);
    mz_wait_checked(b, f, chain, n, policy);
    mz_future_destroy(f);
    rr[i] = now_ns() - t3;
  }
  *lower_ns = rr[0];
  qsort(rr + 1, 3, sizeof *rr, cmp_u64);
  *rerun_ns = rr[2];
  mz_graph_destroy(g);
  *build_ns = t1 - t0;
  *sched_ns = ts - t1;
  return t2 - t1;
}

/* Wait for f (with a bound, so a hang is reported rather than waited
 * out), check that it ran n ops; returns the clock at its end. */
static uint64_t mz_wait_checked(mz_bench *b, mz_future *f, int chain, size_t n, const char *policy) {
  uint64_t limit = 60000000000ull + (uint64_t)n * 100000u;
  int rc = mz_future_wait_for(f, limit);
  uint64_t t2 = now_ns();
  if (rc == MZ_ETIMEDOUT) {
    fprintf(stderr, "mz-bench-overhead: maize %s n=%zu policy=%s did not finish in %.0f s (hang?)\n",
            chain ? "chain" : "independent", n, policy, (double)limit / 1e9);
    exit(2);
  }
  if (rc != MZ_OK) {
    fprintf(stderr, "mz-bench-overhead: run failed: %s: %s\n", mz_err_name(rc), mz_future_message(f));
    exit(1);
  }
  mz_run_stats st;
  if (mz_future_stats(f, &st) == MZ_OK && st.ops != n) {
    fprintf(stderr, "mz-bench-overhead: maize ran %" PRIu64 " ops, expected %zu\n", st.ops, n);
    exit(1);
  }
  (void)b;
  return t2;
}

static void bench_maize(results *r, int workers) {
  mz_bench b;
  memset(&b, 0, sizeof b);
  char devices[16];
  snprintf(devices, sizeof devices, "cpu:%d", workers);
  mz_runtime_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.devices = devices;
  cfg.policy = "eager";
  int rc = mz_runtime_create(&cfg, &b.rt);
  if (rc != MZ_OK) {
    fprintf(stderr, "mz-bench-overhead: mz_runtime_create(%s): %s\n", devices, mz_err_name(rc));
    exit(1);
  }
  mz_kernel_spec ks;
  memset(&ks, 0, sizeof ks);
  ks.name = "empty";
  ks.params = "i32 k";
  ks.cpu.fn = mz_empty_fn;
  if ((rc = mz_kernel_create(b.rt, &ks, &b.k_indep)) != MZ_OK) die_mz(b.rt, "mz_kernel_create", rc);
  ks.name = "empty_inout";
  ks.params = "inout u8[] t";
  if ((rc = mz_kernel_create(b.rt, &ks, &b.k_chain)) != MZ_OK) die_mz(b.rt, "mz_kernel_create", rc);
  size_t dims[1] = {1};
  if ((rc = mz_buffer_create(b.rt, MZ_U8, 1, dims, NULL, &b.buf)) != MZ_OK)
    die_mz(b.rt, "mz_buffer_create", rc);
  b.ops = malloc(n_tasks * sizeof *b.ops);
  if (!b.ops) {
    perror("malloc");
    exit(1);
  }
  if (indep_buffers) {
    b.bufs = malloc(n_tasks * sizeof *b.bufs);
    if (!b.bufs) {
      perror("malloc");
      exit(1);
    }
    for (size_t i = 0; i < n_tasks; i++)
      if ((rc = mz_buffer_create(b.rt, MZ_U8, 1, dims, NULL, &b.bufs[i])) != MZ_OK)
        die_mz(b.rt, "mz_buffer_create", rc);
  }

  for (int chain = 0; chain <= 1; chain++) {
    if (!(shapes_mask & (1 << chain))) continue;
    int s = shape_index(chain, workers);
    int npol = chain ? 2 : 1;
    for (int p = 0; p < npol; p++) {
      const char *policy = p == 0 ? "eager" : "single";
      double run[MAX_REPS], build[MAX_REPS], sched[MAX_REPS], rerun[MAX_REPS], lower[MAX_REPS];
      uint64_t bns, sns, rns, lns;
      mz_measure(&b, chain, n_tasks / 10 ? n_tasks / 10 : 1, policy, &bns, &sns, &rns, &lns); /* warm-up */
      for (int i = 0; i < reps; i++) {
        run[i] = (double)mz_measure(&b, chain, n_tasks, policy, &bns, &sns, &rns, &lns) / (double)n_tasks;
        lower[i] = (double)lns / (double)n_tasks;
        build[i] = (double)bns / (double)n_tasks;
        sched[i] = (double)sns / (double)n_tasks;
        rerun[i] = (double)rns / (double)n_tasks;
      }
      double m = median(run, reps), mb = median(build, reps), ms = median(sched, reps), mr = median(rerun, reps);
      if (p == 0) {
        r->maize[s] = m;
        r->maize_build[s] = mb;
        r->maize_sched[s] = ms;
        r->maize_rerun[s] = mr;
        r->maize_lower[s] = median(lower, reps);
      } else {
        r->maize_single[s] = m;
      }
      fprintf(stderr,
              "  maize  %-15s %-6s %8.1f ns/task (of which mz_schedule %.1f; build %.1f; re-run %.1f ns/task, the "
              "first %.1f)\n",
              shape_names[s], policy, m, ms, mb, mr, median(lower, reps));
    }
  }

  free(b.ops);
  if (b.bufs) {
    for (size_t i = 0; i < n_tasks; i++) mz_buffer_release(b.bufs[i]);
    free(b.bufs);
  }
  mz_buffer_release(b.buf);
  mz_kernel_destroy(b.k_indep);
  mz_kernel_destroy(b.k_chain);
  mz_runtime_destroy(b.rt);
}

/* ----------------------------------------------------------------- OpenMP */

#ifdef _OPENMP
static uint64_t omp_measure(int chain, size_t n) {
  int x = 0;
  uint64_t t0 = now_ns();
  if (!chain) {
#pragma omp parallel
#pragma omp single
    {
      for (size_t i = 0; i < n; i++) {
#pragma omp task firstprivate(i)
        empty_body((void *)i);
      }
    }
  } else {
#pragma omp parallel shared(x)
#pragma omp single
    {
      for (size_t i = 0; i < n; i++) {
#pragma omp task depend(inout : x) shared(x)
        empty_body(&x);
      }
    }
  }
  return now_ns() - t0;
}

static void bench_openmp(results *r, int workers) {
  omp_set_dynamic(0);
  omp_set_num_threads(workers);
  for (int chain = 0; chain <= 1; chain++) {
    if (!(shapes_mask & (1 << chain))) continue;
    int s = shape_index(chain, workers);
    double v[MAX_REPS];
    omp_measure(chain, n_tasks / 10 ? n_tasks / 10 : 1); /* warm-up: the team is created */
    for (int i = 0; i < reps; i++) v[i] = (double)omp_measure(chain, n_tasks) / (double)n_tasks;
    r->openmp[s] = median(v, reps);
    fprintf(stderr, "  openmp %-15s        %8.1f ns/task\n", shape_names[s], r->openmp[s]);
  }
}
#endif

/* ----------------------------------------------------------------- StarPU */

#ifdef MZ_HAVE_STARPU
static void starpu_empty(void *buffers[], void *arg) {
  (void)arg;
  empty_body(buffers);
}

static struct starpu_codelet cl_indep = {
    .where = STARPU_CPU,
    .cpu_funcs = {starpu_empty},
    .nbuffers = 0,
    .name = "empty",
};

static struct starpu_codelet cl_chain = {
    .where = STARPU_CPU,
    .cpu_funcs = {starpu_empty},
    .nbuffers = 1,
    .modes = {STARPU_RW},
    .name = "empty_rw",
};

static uint64_t starpu_measure(int chain, size_t n, starpu_data_handle_t h) {
  uint64_t t0 = now_ns();
  for (size_t i = 0; i < n; i++) {
    int rc = chain ? starpu_task_insert(&cl_chain, STARPU_RW, h, 0) : starpu_task_insert(&cl_indep, 0);
    if (rc != 0) {
      fprintf(stderr, "mz-bench-overhead: starpu_task_insert: %d\n", rc);
      exit(1);
    }
  }
  starpu_task_wait_for_all();
  return now_ns() - t0;
}

static void bench_starpu(results *r, int workers) {
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  int rc = starpu_init(&conf);
  if (rc != 0) {
    fprintf(stderr, "mz-bench-overhead: starpu_init: %d (StarPU skipped)\n", rc);
    return;
  }
  int x = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&x, sizeof x);
  for (int chain = 0; chain <= 1; chain++) {
    if (!(shapes_mask & (1 << chain))) continue;
    int s = shape_index(chain, workers);
    double v[MAX_REPS];
    starpu_measure(chain, n_tasks / 10 ? n_tasks / 10 : 1, h); /* warm-up */
    for (int i = 0; i < reps; i++) v[i] = (double)starpu_measure(chain, n_tasks, h) / (double)n_tasks;
    r->starpu[s] = median(v, reps);
    fprintf(stderr, "  starpu %-15s        %8.1f ns/task (%u CPU workers)\n", shape_names[s], r->starpu[s],
            starpu_cpu_worker_get_count());
  }
  starpu_data_unregister(h);
  starpu_shutdown();
}
#endif

/* ------------------------------------------------------------------- main */

static void usage(FILE *to) {
  fprintf(to,
          "usage: mz-bench-overhead [-n N] [-r reps] [--quick] [--only maize|openmp|starpu]\n"
          "                         [--shape independent|chain] [--indep-buffers]\n"
          "  -n N      tasks per measurement (default 200000)\n"
          "  -r reps   repetitions; the median is printed (default 5)\n"
          "  --quick   N = 20000 (CI smoke)\n"
          "  --only F  measure only framework F (may be repeated)\n"
          "  --shape S measure only shape S (independent or chain)\n"
          "  --indep-buffers  maize independent tasks each write their own 1-byte buffer\n"
          "            (\"inout u8[] t\") instead of sharing one scalar (\"i32 k\")\n");
}

static void fmt_ns(char *out, size_t size, double v) {
  if (v < 0)
    snprintf(out, size, "na");
  else
    snprintf(out, size, "%.1f", v);
}

static void fmt_ratio(char *out, size_t size, double a, double b) {
  if (a < 0 || b <= 0)
    snprintf(out, size, "na");
  else
    snprintf(out, size, "%.2f", a / b);
}

int main(int argc, char **argv) {
  int only = 0;
  static const struct option longopts[] = {
      {"tasks", required_argument, NULL, 'n'},   {"reps", required_argument, NULL, 'r'},
      {"shape", required_argument, NULL, 's'},   {"indep-buffers", no_argument, NULL, 'b'},
      {"quick", no_argument, NULL, 'q'},         {"only", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-overhead";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":n:r:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'n':
      if (!bench_arg_long(prog, "-n", optarg, 1, 100000000, &num)) return 2;
      n_tasks = (size_t)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, MAX_REPS, &num)) return 2;
      reps = (int)num;
      break;
    case 's':
      if (!strcmp(optarg, "independent"))
        shapes_mask = 1;
      else if (!strcmp(optarg, "chain"))
        shapes_mask = 2;
      else {
        fprintf(stderr, "mz-bench-overhead: unknown shape '%s'\n", optarg);
        return 2;
      }
      break;
    case 'b': indep_buffers = 1; break;
    case 'q': n_tasks = 20000; break;
    case 'o':
      if (!strcmp(optarg, "maize"))
        only |= FW_MAIZE;
      else if (!strcmp(optarg, "openmp"))
        only |= FW_OPENMP;
      else if (!strcmp(optarg, "starpu"))
        only |= FW_STARPU;
      else {
        fprintf(stderr, "mz-bench-overhead: unknown framework '%s'\n", optarg);
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  if (!only) only = FW_ALL;

#ifdef MZ_HAVE_STARPU
  setenv("STARPU_SILENT", "1", 0);
#endif

  results r;
  for (int s = 0; s < NSHAPES; s++)
    r.maize[s] = r.maize_single[s] = r.maize_build[s] = r.maize_sched[s] = r.maize_rerun[s] = r.maize_lower[s] = r.openmp[s] =
        r.starpu[s] = -1;

  printf("mz-bench-overhead: %zu empty CPU tasks per measurement, median of %d%s\n", n_tasks, reps,
         indep_buffers ? " (maize independent: one buffer per task)" : "");
  fflush(stdout);
  for (int w = 1; w <= 2; w++) {
    if (only & FW_MAIZE) bench_maize(&r, w);
#ifdef _OPENMP
    if (only & FW_OPENMP) bench_openmp(&r, w);
#endif
#ifdef MZ_HAVE_STARPU
    if (only & FW_STARPU) bench_starpu(&r, w);
#endif
  }

  printf("\nns per task (maize: build + schedule + run, as OpenMP and StarPU create their tasks in the figure)\n");
  printf("%-15s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "shape", "maize", "m.run", "m.sched", "m.build", "m.rerun",
         "m.single", "openmp", "starpu", "mz/omp");
  double total[NSHAPES];
  for (int s = 0; s < NSHAPES; s++) {
    total[s] = r.maize[s] >= 0 && r.maize_build[s] >= 0 ? r.maize[s] + r.maize_build[s] : -1;
    char c[9][32];
    fmt_ns(c[0], sizeof c[0], total[s]);
    fmt_ns(c[1], sizeof c[1], r.maize[s]);
    fmt_ns(c[2], sizeof c[2], r.maize_sched[s]);
    fmt_ns(c[3], sizeof c[3], r.maize_build[s]);
    fmt_ns(c[4], sizeof c[4], r.maize_rerun[s]);
    fmt_ns(c[5], sizeof c[5], r.maize_single[s]);
    fmt_ns(c[6], sizeof c[6], r.openmp[s]);
    fmt_ns(c[7], sizeof c[7], r.starpu[s]);
    fmt_ratio(c[8], sizeof c[8], total[s], r.openmp[s]);
    printf("%-15s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", shape_names[s], c[0], c[1], c[2], c[3], c[4], c[5], c[6],
           c[7], c[8]);
  }
  printf("maize: policy eager; m.run: mz_schedule() to mz_future_wait() (m.sched: the part inside mz_schedule());\n"
         "m.build: building the graph; m.rerun: mz_graph_run() of the built graph to its end (its first run,\n"
         "which lowers it for re-runs, is maize_lower_ns below); m.single: m.run\n"
         "with policy single.  Targets: independent <= 60 ns and <= OpenMP, chain <= 100 ns, re-run <= 30 ns.\n\n");
  for (int s = 0; s < NSHAPES; s++) {
    char m[32], o[32], sp[32], mr[32], mb[32], rr[32], ro[32], lw[32];
    fmt_ns(m, sizeof m, total[s]);
    fmt_ns(o, sizeof o, r.openmp[s]);
    fmt_ns(sp, sizeof sp, r.starpu[s]);
    fmt_ns(mr, sizeof mr, r.maize[s]);
    fmt_ns(mb, sizeof mb, r.maize_build[s]);
    fmt_ns(rr, sizeof rr, r.maize_rerun[s]);
    fmt_ns(lw, sizeof lw, r.maize_lower[s]);
    fmt_ratio(ro, sizeof ro, total[s], r.openmp[s]);
    printf("BENCH overhead.%s maize_ns=%s openmp_ns=%s starpu_ns=%s maize_run_ns=%s maize_build_ns=%s "
           "maize_rerun_ns=%s ratio_omp=%s tasks=%zu maize_lower_ns=%s\n",
           shape_names[s], m, o, sp, mr, mb, rr, ro, n_tasks, lw);
  }
  return 0;
}
