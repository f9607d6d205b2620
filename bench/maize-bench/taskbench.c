/* maize-bench taskbench: run Task Bench graphs on maize (or a peer) and
 * print Task Bench's summary, so Task Bench's scripts parse the output.
 * The patterns, kernels and counts are in patterns.c; the
 * systems in tb_maize.c, peer_openmp.c and peer_starpu.c.  See
 * TASKBENCH.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mzb.h"
#include "patterns.h"
#include "tb_systems.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: maize-bench taskbench [Task Bench flags] [--system maize|maize-rerun|openmp|starpu|tbb]\n"
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
          "\nmaize-bench options:\n"
          "  --system S         maize (default), maize-rerun (the graph built once, then\n"
          "                     re-run with mz_graph_run), openmp, starpu or tbb\n"
          "  --devices S        maize devices, as MZ_DEVICES (default $MZ_DEVICES, or cpu:N with -worker N)\n"
          "  --policy P         maize policy (default $MZ_POLICY, else eager)\n"
          "  -r N               run N times and report the median (default 1)\n"
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
  for (int i = 0; i < nrest; i++) {
    const char *a = rest[i];
    const char *v = i + 1 < nrest ? rest[i + 1] : NULL;
    if (!strcmp(a, "--devices") || !strcmp(a, "--policy") || !strcmp(a, "--system") || !strcmp(a, "-r") ||
        !strcmp(a, "--chunk")) {
      if (!v) {
        fprintf(stderr, "maize-bench taskbench: %s needs a value\n", a);
        free(rest);
        return 2;
      }
      i++;
      if (!strcmp(a, "--chunk")) {
        char *end;
        errno = 0;
        long c = strtol(v, &end, 10);
        if (errno || *end || end == v || c < 0 || c > (1L << 30)) {
          fprintf(stderr, "maize-bench taskbench: --chunk must be 0..2^30, not '%s'\n", v);
          free(rest);
          return 2;
        }
        opts.chunk = c ? c : -1;
      } else if (!strcmp(a, "--devices")) {
        opts.devices = v;
      } else if (!strcmp(a, "--policy")) {
        opts.policy = v;
      } else if (!strcmp(a, "--system")) {
        if (!strcmp(v, "maize"))
          sys = &tb_system_maize;
        else if (!strcmp(v, "openmp"))
          sys = &tb_system_openmp;
        else if (!strcmp(v, "starpu"))
          sys = &tb_system_starpu;
        else if (!strcmp(v, "tbb"))
          sys = &tb_system_tbb;
        else if (!strcmp(v, "maize-rerun"))
          sys = &tb_system_maize_rerun;
        else {
          fprintf(stderr, "maize-bench taskbench: unknown system '%s' (maize, openmp, starpu, tbb, maize-rerun)\n", v);
          free(rest);
          return 2;
        }
      } else {
        char *end;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno || *end || end == v || r < 1 || r > 101) {
          fprintf(stderr, "maize-bench taskbench: -r must be 1..101, not '%s'\n", v);
          free(rest);
          return 2;
        }
        reps = (int)r;
      }
    } else if (!strcmp(a, "--breakdown")) {
      opts.breakdown = 1;
    } else {
      fprintf(stderr, "maize-bench taskbench: unknown option '%s' (maize-bench taskbench -h)\n", a);
      free(rest);
      return 2;
    }
  }
  free(rest);
  if (!sys->available) {
    char e2[256];
    void *st;
    sys->create(&app, &opts, &st, e2, sizeof e2);
    fprintf(stderr, "maize-bench taskbench: %s\n", e2);
    return 2;
  }

  tb_app_display(stdout, &app);
  fflush(stdout);
  void *state;
  int crc = sys->create(&app, &opts, &state, err, sizeof err);
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
  tb_app_report(stdout, &app, elapsed);
  return 0;
}
