/* maize-bench taskbench: run Task Bench graphs on maize (or a peer) and
 * print Task Bench's summary, so Task Bench's scripts parse the output.
 * The patterns, kernels and counts are in patterns.c; the
 * systems in tb_maize.c, peer_openmp.c and peer_starpu.c.  See
 * TASKBENCH.md. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mzb.h"
#include "patterns.h"
#include "tb_systems.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: maize-bench taskbench [Task Bench flags] [--system maize|maize-rerun|openmp|starpu|tbb|\n"
          "                              maize-mpi|maize-mpi-rerun|maize-mpi-pair|mpi]\n"
          "                             [--devices S] [--policy P] [-r N]\n"
          "\nTask Bench flags (as in StanfordLegion/task-bench):\n"
          "  %-18s height of the task graph (default 4)\n"
          "  %-18s width of the task graph (default 4)\n"
          "  %-18s dependence pattern (default trivial; list below)\n"
          "  %-18s radix (nearest, spread, random_nearest; default 3)\n"
          "  %-18s period (spread, random_nearest; default 3)\n"
          "  %-18s fraction of connected dependencies (random_nearest; default 0.25)\n"
          "  %-18s start configuring the next task graph (graphs run together)\n"
          "  %-18s kernel (default empty; list below)\n"
          "  %-18s kernel iterations (default 0)\n"
          "  %-18s output bytes per task (default 16, a multiple of 16)\n"
          "  %-18s scratch bytes per worker (memory_bound)\n"
          "  %-18s samples (memory_bound; default 16)\n"
          "  %-18s load imbalance, 0..2 (load_imbalance)\n"
          "  %-18s output slots per point (default: steps; fewer reuse buffers)\n"
          "  %-18s worker threads (maize: devices cpu:N unless --devices)\n"
          "  %-18s print the dependencies of every task\n"
          "\nmaize-bench options (--name VALUE or --name=VALUE):\n"
          "  --system S         maize (default), maize-rerun (the graph built once, then\n"
          "                     re-run with mz_graph_run), openmp, starpu or tbb; under mpirun (when\n"
          "                     built with MPI): maize-mpi, maize-mpi-rerun (distributed graphs, each\n"
          "                     run with mz_dgraph_run_wait), maize-mpi-pair (re-run with mz_dgraph_run\n"
          "                     and mz_dgraph_wait) or mpi (plain MPI, the peer)\n"
          "  --devices S        maize devices, as MZ_DEVICES (default $MZ_DEVICES, or cpu:N with -worker N)\n"
          "  --policy P         maize policy (default $MZ_POLICY, else eager)\n"
          "  -r, --reps N       run N times and report the median (default 1)\n"
          "  --breakdown        maize: print build, mz_schedule and wait time per task (stderr)\n"
          "  --chunk N          maize: schedule every N tasks while building (default 64; 0: one run at the end)\n"
          "\ndependence patterns:",
          "-steps INT", "-width INT", "-type DEP", "-radix INT", "-period INT", "-fraction FLOAT", "-and",
          "-kernel KERNEL", "-iter INT", "-output INT", "-scratch INT", "-sample INT", "-imbalance FLOAT",
          "-field INT", "-worker INT", "-v");
  for (int d = 0; d < TB_DEP_COUNT; d++) fprintf(f, " %s", tb_dep_name((tb_dep)d));
  fprintf(f, "\nkernels:");
  for (int k = 0; k < TB_K_COUNT; k++) fprintf(f, " %s", tb_ktype_name((tb_ktype)k));
  fprintf(f, "\n");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Task Bench's own flags (-steps 4: one dash, the value apart, as its
 * scripts write them) are taken out first by tb_app_parse; what is left
 * goes through getopt_long, so "--devices cpu:2" and "--devices=cpu:2"
 * both work and anything unknown is refused. */
static int parse_rest(int nrest, char **rest, const char *prog, tb_sys_opts *opts, const tb_system **sys, int *reps) {
  enum { O_DEVICES = 256, O_POLICY, O_SYSTEM, O_CHUNK, O_BREAKDOWN };
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},           {"reps", required_argument, NULL, 'r'},
      {"devices", required_argument, NULL, O_DEVICES}, {"policy", required_argument, NULL, O_POLICY},
      {"system", required_argument, NULL, O_SYSTEM},   {"chunk", required_argument, NULL, O_CHUNK},
      {"breakdown", no_argument, NULL, O_BREAKDOWN},   {NULL, 0, NULL, 0}};
  char **av = calloc((size_t)nrest + 2, sizeof *av);
  if (!av) return 1;
  av[0] = (char *)prog;
  for (int i = 0; i < nrest; i++) av[i + 1] = rest[i];
  int ac = nrest + 1, c, ret = -1;
  optind = 0; /* glibc: 0 re-initialises getopt fully */
  opterr = 0;
  while (ret < 0 && (c = getopt_long(ac, av, ":hr:", longopts, NULL)) != -1) {
    const char *v = optarg;
    char *end;
    long x;
    switch (c) {
    case 'h': usage(stdout); ret = 0; break;
    case O_DEVICES: opts->devices = v; break;
    case O_POLICY: opts->policy = v; break;
    case O_BREAKDOWN: opts->breakdown = 1; break;
    case O_CHUNK:
      errno = 0;
      x = strtol(v, &end, 10);
      if (errno || *end || end == v || x < 0 || x > (1L << 30)) {
        fprintf(stderr, "maize-bench taskbench: --chunk must be 0..2^30, not '%s'\n", v);
        ret = 2;
      }
      opts->chunk = x ? x : -1;
      break;
    case 'r':
      errno = 0;
      x = strtol(v, &end, 10);
      if (errno || *end || end == v || x < 1 || x > 101) {
        fprintf(stderr, "maize-bench taskbench: -r must be 1..101, not '%s'\n", v);
        ret = 2;
      }
      *reps = (int)x;
      break;
    case O_SYSTEM:
      if (!strcmp(v, "maize"))
        *sys = &tb_system_maize;
      else if (!strcmp(v, "openmp"))
        *sys = &tb_system_openmp;
      else if (!strcmp(v, "starpu"))
        *sys = &tb_system_starpu;
      else if (!strcmp(v, "tbb"))
        *sys = &tb_system_tbb;
      else if (!strcmp(v, "maize-rerun"))
        *sys = &tb_system_maize_rerun;
#if MZB_HAVE_MPI
      else if (!strcmp(v, "maize-mpi"))
        *sys = &tb_system_maize_mpi;
      else if (!strcmp(v, "maize-mpi-rerun"))
        *sys = &tb_system_maize_mpi_rerun;
      else if (!strcmp(v, "maize-mpi-pair"))
        *sys = &tb_system_maize_mpi_pair;
      else if (!strcmp(v, "mpi"))
        *sys = &tb_system_mpi;
#endif
      else {
        fprintf(stderr, "maize-bench taskbench: unknown system '%s' (maize, openmp, starpu, tbb, maize-rerun)\n", v);
        ret = 2;
      }
      break;
    case ':':
      fprintf(stderr, "maize-bench taskbench: %s needs a value\n", av[optind - 1]);
      ret = 2;
      break;
    default:
      fprintf(stderr, "maize-bench taskbench: unknown option '%s' (maize-bench taskbench -h)\n", av[optind - 1]);
      ret = 2;
      break;
    }
  }
  if (ret < 0 && optind < ac) {
    fprintf(stderr, "maize-bench taskbench: unexpected argument '%s' (maize-bench taskbench -h)\n", av[optind]);
    ret = 2;
  }
  free(av);
  return ret;
}

int mzb_taskbench_main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
  tb_app app;
  char err[640];
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return 1;
  int nrest = 0;
  if (tb_app_parse(&app, argc - 1, argv + 1, rest, &nrest, err, sizeof err)) {
    fprintf(stderr, "maize-bench taskbench: %s\n", err);
    free(rest);
    return 2;
  }
  tb_sys_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.workers = app.workers;
  const tb_system *sys = &tb_system_maize;
  int reps = 1;
  int prc = parse_rest(nrest, rest, argv[0], &opts, &sys, &reps);
  free(rest);
  if (prc >= 0) return prc;
  if (!sys->available) {
    char e2[256];
    void *st;
    sys->create(&app, &opts, &st, e2, sizeof e2);
    fprintf(stderr, "maize-bench taskbench: %s\n", e2);
    return 2;
  }

  void *state;
  int crc = sys->create(&app, &opts, &state, err, sizeof err);
  /* Across ranks (under mpirun), rank 0 speaks for all, as Task Bench's MPI does. */
  bool quiet = false;
#if MZB_HAVE_MPI
  quiet = mzb_mpi_rank() != 0;
#endif
  if (!crc && !quiet) {
    tb_app_display(stdout, &app);
    fflush(stdout);
  }
  if (crc) {
    fprintf(stderr, "maize-bench taskbench: %s\n", err);
    return crc == -2 ? 2 : 1;
  }
  double t[101];
  int rc = 0;
  for (int r = 0; r < reps && !rc; r++)
    if (sys->run(state, &t[r], err, sizeof err)) {
      fprintf(stderr, "maize-bench taskbench: %s: %s\n", sys->name, err);
      rc = 1;
    }
  sys->destroy(state);
  if (rc) return 1;
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  double elapsed = (reps % 2) ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  if (!quiet) tb_app_report(stdout, &app, elapsed);
  return 0;
}
