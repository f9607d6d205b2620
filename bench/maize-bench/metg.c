/* maize-bench metg: minimum effective task granularity, METG(50%), as Task
 * Bench's METG experiments measure it.
 *
 * For each pattern, each system (maize, OpenMP, StarPU when built) runs the
 * same graph (compute_bound kernel, width = workers, --steps timesteps)
 * with kernel iterations 2^k, k from a calibrated coarsest value (a task of
 * about --coarse-us microseconds) down to 2^0.  Each point is the median
 * elapsed time of -r runs.  Then, as Task Bench does:
 *
 *   FLOP/s       = total FLOPs / elapsed
 *   peak         = the best FLOP/s of the sweep, over every system
 *   efficiency   = FLOP/s / peak
 *   granularity  = elapsed * workers / tasks (microseconds of wall time a
 *                  worker spends per task, overhead included)
 *   METG(50%)    = the granularity where efficiency crosses 0.5, linear in
 *                  log(granularity) between the bracketing points
 *                  (tb_metg in patterns.c).
 *
 * Prints a table per pattern, writes an SVG plot per pattern (efficiency
 * against granularity, log x, one curve per system, dashed 0.5 line) and
 * ends with one line per pattern:
 *   BENCH metg.<pattern> maize_us=<x> openmp_us=<y> starpu_us=<z|na> maize_rerun_us=<r|na> tbb_us=<t|na>
 * (maize builds its graph inside the timed region, as the peers create
 * their tasks there; maize-rerun builds it once, in the warm-up run, and
 * times mz_graph_run of it.)
 * See TASKBENCH.md. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <maize.h>

#include "mzb.h"
#include "patterns.h"
#include "svg.h"
#include "tb_systems.h"

#define MAX_POINTS 48
#define MAX_PATTERNS 16
#define MAX_REPS 101
#define NSYS 5

static const tb_system *const systems[NSYS] = {&tb_system_maize, &tb_system_openmp, &tb_system_starpu,
                                               &tb_system_maize_rerun, &tb_system_tbb};

/* One system's sweep of one pattern. */
typedef struct sweep {
  int ran;    /* measured (selected and available) */
  int failed; /* create or a run failed: no METG */
  int n;
  long iter[MAX_POINTS];
  double elapsed[MAX_POINTS]; /* median seconds */
  double flops[MAX_POINTS];   /* FLOP/s */
  double gran[MAX_POINTS];    /* us */
  double eff[MAX_POINTS];
  double metg; /* us; < 0: none */
} sweep;

/* Options (file-static: this is the command's configuration). */
static long o_steps = 1000, o_workers = 2, o_width = 0;
static int o_reps = 3, o_quick, o_sysmask = 31, o_sequential;
static double o_coarse_us = 500;
static long o_max_iter = -1;
static const char *o_svg, *o_outdir = ".", *o_devices, *o_policy;
static long o_chunk; /* maize: tasks per run while building (0: default) */
static const char *o_patterns[MAX_PATTERNS];
static int o_npatterns;

static void usage(FILE *f) {
  fprintf(f,
          "usage: maize-bench metg [--pattern P]... [--steps N] [--workers N] [--width W] [-r N]\n"
          "                        [--systems maize,openmp,starpu,maize-rerun,tbb] [--devices S] [--policy P]\n"
          "                        [--coarse-us US] [--max-iter N] [--svg PATH] [--outdir DIR] [--quick]\n"
          "                        [--sequential] [--help]\n"
          "  Options take their value as '--steps 50' or '--steps=50'.\n"
          "  --pattern P   Task Bench pattern, may repeat or be a comma list (default:\n"
          "                stencil_1d,nearest,spread,fft,tree; nearest has radix 5)\n"
          "  --steps N     timesteps (default 1000)\n"
          "  --workers N   workers of every system (default 2)\n"
          "  --width W     graph width (default: the workers)\n"
          "  -r, --reps N  runs per point, the median is used (default 3)\n"
          "  --systems L   systems to run (default: all that are built)\n"
          "  --devices S   maize devices (default cpu:<workers>); --policy P maize policy\n"
          "  --chunk N     maize: schedule every N tasks while building (default 64; 0: one run)\n"
          "  --coarse-us U the coarsest task, in microseconds (default 500; sets the first -iter)\n"
          "  --max-iter N  the first (coarsest) -iter instead, rounded down to a power of 2\n"
          "  --svg PATH    the plot (default metg-<pattern>.svg in --outdir; with several\n"
          "                patterns, -<pattern> is inserted before .svg)\n"
          "  --outdir DIR  where default plots go (default .)\n"
          "  --quick       CI smoke: 50 steps, -r 1, coarsest task 100 us\n"
          "  --sequential  sweep one system after the other (default: each -iter on every\n"
          "                system in turn, all of them set up at once)\n");
}

static int bad(const char *msg, const char *v) {
  fprintf(stderr, "maize-bench metg: %s '%s' (maize-bench metg -h)\n", msg, v ? v : "");
  return 2;
}

static int parse_pos_long(const char *s, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > max) return -1;
  *out = v;
  return 0;
}

static int add_patterns(const char *list) {
  static char buf[1024];
  static size_t used;
  size_t len = strlen(list) + 1;
  if (used + len > sizeof buf) return -1;
  char *copy = buf + used;
  memcpy(copy, list, len);
  used += len;
  for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    tb_dep d;
    if (tb_dep_parse(tok, &d)) return -1;
    if (o_npatterns == MAX_PATTERNS) return -1;
    o_patterns[o_npatterns++] = tok;
  }
  return 0;
}

/* getopt_long: "--steps 50" and "--steps=50" both work, options may come
 * in any order, and anything that is not an option is refused.  Returns
 * an exit status (0 after --help, 2 for a usage error) or -1 to go on. */
static int parse_args(int argc, char **argv) {
  enum { O_PATTERN = 256, O_STEPS, O_WORKERS, O_WIDTH, O_COARSE, O_MAXITER, O_SYSTEMS, O_DEVICES, O_POLICY, O_SVG,
         O_OUTDIR, O_CHUNK, O_QUICK, O_SEQ };
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},           {"reps", required_argument, NULL, 'r'},
      {"pattern", required_argument, NULL, O_PATTERN}, {"steps", required_argument, NULL, O_STEPS},
      {"workers", required_argument, NULL, O_WORKERS}, {"width", required_argument, NULL, O_WIDTH},
      {"coarse-us", required_argument, NULL, O_COARSE}, {"max-iter", required_argument, NULL, O_MAXITER},
      {"systems", required_argument, NULL, O_SYSTEMS}, {"devices", required_argument, NULL, O_DEVICES},
      {"policy", required_argument, NULL, O_POLICY},   {"svg", required_argument, NULL, O_SVG},
      {"outdir", required_argument, NULL, O_OUTDIR},   {"chunk", required_argument, NULL, O_CHUNK},
      {"quick", no_argument, NULL, O_QUICK},           {"sequential", no_argument, NULL, O_SEQ},
      {NULL, 0, NULL, 0}};
  int c;
  long x;
  optind = 0; /* glibc: 0 re-initialises getopt fully */
  opterr = 0; /* the messages below name the command */
  while ((c = getopt_long(argc, argv, ":hr:", longopts, NULL)) != -1) {
    const char *v = optarg;
    switch (c) {
    case 'h': usage(stdout); return 0;
    case O_QUICK: o_quick = 1; break;
    case O_SEQ: o_sequential = 1; break;
    case O_PATTERN:
      if (add_patterns(v)) return bad("unknown pattern (or too many) in", v);
      break;
    case O_STEPS:
      if (parse_pos_long(v, 1L << 27, &o_steps)) return bad("--steps must be 1..2^27, not", v);
      break;
    case O_WORKERS:
      if (parse_pos_long(v, 1024, &o_workers)) return bad("--workers must be 1..1024, not", v);
      break;
    case O_WIDTH:
      if (parse_pos_long(v, 1L << 20, &o_width)) return bad("--width must be 1..2^20, not", v);
      break;
    case 'r':
      if (parse_pos_long(v, MAX_REPS, &x)) return bad("-r must be 1..101, not", v);
      o_reps = (int)x;
      break;
    case O_COARSE: {
      char *end;
      errno = 0;
      double d = strtod(v, &end);
      if (errno || end == v || *end || !(d > 0 && d <= 1e7)) return bad("--coarse-us must be in (0, 1e7], not", v);
      o_coarse_us = d;
      break;
    }
    case O_MAXITER:
      if (parse_pos_long(v, 1L << 40, &o_max_iter)) return bad("--max-iter must be 1..2^40, not", v);
      break;
    case O_SYSTEMS: {
      o_sysmask = 0;
      char tmp[128];
      if (strlen(v) >= sizeof tmp) return bad("--systems list too long:", v);
      snprintf(tmp, sizeof tmp, "%s", v);
      for (char *tok = strtok(tmp, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int s = 0; s < NSYS; s++)
          if (!strcmp(tok, systems[s]->name)) {
            o_sysmask |= 1 << s;
            found = 1;
          }
        if (!found) return bad("unknown system (maize, openmp, starpu, maize-rerun, tbb) in", v);
      }
      if (!o_sysmask) return bad("--systems names no system:", v);
      break;
    }
    case O_CHUNK:
      if (!strcmp(v, "0")) o_chunk = -1;
      else if (parse_pos_long(v, 1L << 30, &o_chunk)) return bad("--chunk must be 0..2^30, not", v);
      break;
    case O_DEVICES: o_devices = v; break;
    case O_POLICY: o_policy = v; break;
    case O_SVG:
      if (!*v) return bad("empty --svg path", v);
      o_svg = v;
      break;
    case O_OUTDIR: {
      if (!*v) return bad("empty --outdir", v);
      struct stat sb;
      if (stat(v, &sb) || !S_ISDIR(sb.st_mode)) return bad("--outdir is not an existing folder:", v);
      o_outdir = v;
      break;
    }
    case ':': return bad("missing value for", argv[optind - 1]);
    default: return bad("unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return bad("unexpected argument", argv[optind]);
  return -1; /* go on */
}

/* Beyond this relative change of tb_compute_ns_per_iter() across a sweep, metg warns. */
#define MZB_DRIFT_WARN 0.20

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void progress(const char *pattern, const char *sys, long iter, int k, int n) {
  if (!isatty(2)) return;
  fprintf(stderr, "\r\033[K[metg %s] %-6s -iter %-9ld (%d/%d)", pattern, sys, iter, k, n);
  fflush(stderr);
}

static void svg_path(char *out, size_t size, const char *pattern) {
  if (o_svg && o_npatterns <= 1) {
    snprintf(out, size, "%s", o_svg);
  } else if (o_svg) {
    const char *dot = strrchr(o_svg, '.');
    int base = dot ? (int)(dot - o_svg) : (int)strlen(o_svg);
    snprintf(out, size, "%.*s-%s%s", base, o_svg, pattern, dot ? dot : ".svg");
  } else {
    snprintf(out, size, "%s/metg-%s.svg", o_outdir, pattern);
  }
}

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* One point of one system: the median of -r runs.  Returns 0, or -1
 * after printing why. */
static int measure(tb_app *app, const tb_system *sys, void *st, const char *pattern, sweep *sw) {
  tb_graph *g = &app->graphs[0];
  char err[640];
  double t[MAX_REPS];
  for (int r = 0; r < o_reps; r++)
    if (sys->run(st, &t[r], err, sizeof err)) {
      fprintf(stderr, "%smaize-bench metg: %s, %s, -iter %ld: %s\n", isatty(2) ? "\n" : "", pattern, sys->name,
              g->kernel.iterations, err);
      return -1;
    }
  qsort(t, (size_t)o_reps, sizeof t[0], cmp_double);
  double e = (o_reps % 2) ? t[o_reps / 2] : 0.5 * (t[o_reps / 2 - 1] + t[o_reps / 2]);
  tb_totals tot;
  tb_app_totals(app, &tot);
  int i = sw->n++;
  sw->iter[i] = g->kernel.iterations;
  sw->elapsed[i] = e;
  sw->flops[i] = (double)tot.flops / e;
  sw->gran[i] = e * (double)o_workers / (double)tot.tasks * 1e6;
  return 0;
}

/* Whether a system's sweep may stop: 3 points in a row under 5% of its
 * best FLOP/s so far. */
static int done_low(const sweep *sw) {
  if (sw->n < 3) return 0;
  double best = 0;
  for (int j = 0; j < sw->n; j++)
    if (sw->flops[j] > best) best = sw->flops[j];
  for (int j = sw->n - 3; j < sw->n; j++)
    if (sw->flops[j] >= 0.05 * best) return 0;
  return 1;
}

/* Sweep the selected systems over one pattern.  Interleaved (default):
 * every system is set up, and each -iter is measured on each system in
 * turn, so a change in the machine's load over the sweep hits all of them
 * alike; a short pause between systems lets idle threads of the previous
 * one go to sleep.  --sequential sweeps one system after the other, only
 * one set up at a time.  A system that fails is reported and dropped;
 * returns -1 when one did. */
static int run_pattern(tb_app *app, const char *pattern, int kmax, sweep res[NSYS]) {
  tb_sys_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.workers = o_workers;
  opts.devices = o_devices;
  opts.policy = o_policy;
  opts.chunk = o_chunk;
  void *st[NSYS] = {NULL};
  int live[NSYS] = {0}, rc = 0;
  tb_graph *g = &app->graphs[0];
  char err[640];
  int groups = o_sequential ? NSYS : 1;
  for (int grp = 0; grp < groups; grp++) {
    for (int s = 0; s < NSYS; s++) {
      if (!(o_sysmask & (1 << s)) || !systems[s]->available) continue;
      if (o_sequential && s != grp) continue;
      res[s].ran = 1;
      int crc = systems[s]->create(app, &opts, &st[s], err, sizeof err);
      if (crc) {
        fprintf(stderr, "%smaize-bench metg: %s: %s\n", isatty(2) ? "\n" : "", pattern, err);
        res[s].failed = 1;
        if (crc == -2) { /* a bad --devices or --policy: a usage error */
          for (int s2 = 0; s2 < NSYS; s2++)
            if (live[s2]) systems[s2]->destroy(st[s2]);
          return -2;
        }
        rc = -1;
        continue;
      }
      /* Warm-up, untimed: thread start-up, first touch, kernel preparation. */
      g->kernel.iterations = 1;
      double warm;
      if (systems[s]->run(st[s], &warm, err, sizeof err)) {
        fprintf(stderr, "%smaize-bench metg: %s, %s, warm-up: %s\n", isatty(2) ? "\n" : "", pattern,
                systems[s]->name, err);
        systems[s]->destroy(st[s]);
        res[s].failed = 1;
        rc = -1;
        continue;
      }
      live[s] = 1;
    }
    for (int k = kmax; k >= 0; k--) {
      int any = 0;
      for (int s = 0; s < NSYS; s++) {
        if (!live[s]) continue;
        if (done_low(&res[s]) || res[s].n == MAX_POINTS) continue;
        any = 1;
        g->kernel.iterations = 1L << k;
        progress(pattern, systems[s]->name, g->kernel.iterations, kmax - k + 1, kmax + 1);
        if (measure(app, systems[s], st[s], pattern, &res[s])) {
          systems[s]->destroy(st[s]);
          live[s] = 0;
          res[s].failed = 1;
          rc = -1;
        }
        pause_ms(5);
      }
      if (!any) break;
    }
    for (int s = 0; s < NSYS; s++)
      if (live[s]) {
        systems[s]->destroy(st[s]);
        live[s] = 0;
      }
  }
  return rc;
}

static void fmt_us(char *out, size_t size, const sweep *sw) {
  if (!sw->ran || sw->failed || sw->metg == -1)
    snprintf(out, size, "na");
  else
    snprintf(out, size, "%.3f", sw->metg);
}

int mzb_metg_main(int argc, char **argv) {
  int prc = parse_args(argc, argv);
  if (prc >= 0) return prc;
  if (o_quick) {
    o_steps = o_steps == 1000 ? 50 : o_steps;
    o_reps = 1;
    o_coarse_us = 100;
  }
  if (!o_npatterns) add_patterns("stencil_1d,nearest,spread,fft,tree");
  long width = o_width ? o_width : o_workers;
  double ns_per_iter = tb_compute_ns_per_iter(), cal_last = ns_per_iter;
  int kmax;
  if (o_max_iter > 0) {
    kmax = 0;
    while ((2L << kmax) <= o_max_iter) kmax++;
  } else {
    double iters = o_coarse_us * 1000.0 / ns_per_iter;
    kmax = iters >= 2 ? (int)floor(log2(iters)) : 0;
    if (kmax > 40) kmax = 40;
  }

  printf("maize-bench metg: %ld steps x width %ld, kernel compute_bound, %ld workers, median of %d;\n"
         "-iter 2^%d (about %.0f us per task; %.2f ns per iteration here) down to 1\n",
         o_steps, width, o_workers, o_reps, kmax, ldexp(ns_per_iter, kmax) / 1000.0, ns_per_iter);
  fflush(stdout);

  static sweep res[MAX_PATTERNS][NSYS];
  memset(res, 0, sizeof res);
  int failed = 0;
  for (int pi = 0; pi < o_npatterns; pi++) {
    const char *pattern = o_patterns[pi];
    tb_app app;
    memset(&app, 0, sizeof app);
    app.ngraphs = 1;
    tb_graph *g = &app.graphs[0];
    tb_graph_default(g, 0);
    tb_dep_parse(pattern, &g->dep);
    g->timesteps = o_steps;
    g->max_width = width;
    g->kernel.type = TB_K_COMPUTE_BOUND;
    if (g->dep == TB_NEAREST) g->radix = 5; /* a window, clipped to the width: any radix is valid */
    if (g->dep == TB_SPREAD || g->dep == TB_RANDOM_NEAREST) {
      g->radix = 3 < width ? 3 : width;
      long maxp = (width + g->radix - 1) / g->radix;
      g->period = 3 < maxp ? 3 : maxp;
    }
    char err[512];
    if (tb_graph_finish(g, err, sizeof err)) {
      fprintf(stderr, "maize-bench metg: %s: %s\n", pattern, err);
      return 2;
    }
    double cal_before = cal_last;
    int prc2 = run_pattern(&app, pattern, kmax, res[pi]);
    if (prc2 == -2) return 2;
    if (prc2) failed = 1;
    if (isatty(2)) fprintf(stderr, "\r\033[K");
    /* Efficiencies are against the best point of the sweep: if the core
     * itself got faster or slower meanwhile (a shared or throttled
     * machine), they mix two speeds.  Measure it again and say so. */
    cal_last = tb_compute_ns_per_iter();
    double drift = (cal_last - cal_before) / cal_before;

    /* Peak: the best FLOP/s of the sweep, over every system. */
    double peak = 0;
    const char *peak_sys = "none";
    long peak_iter = 0;
    for (int s = 0; s < NSYS; s++)
      for (int i = 0; i < res[pi][s].n; i++)
        if (res[pi][s].flops[i] > peak) {
          peak = res[pi][s].flops[i];
          peak_sys = systems[s]->name;
          peak_iter = res[pi][s].iter[i];
        }
    for (int s = 0; s < NSYS; s++) {
      sweep *sw = &res[pi][s];
      for (int i = 0; i < sw->n; i++) sw->eff[i] = peak > 0 ? sw->flops[i] / peak : 0;
      sw->metg = sw->n ? tb_metg(sw->gran, sw->eff, (size_t)sw->n, 0.5) : -1;
      if (sw->metg == -2) sw->metg = sw->gran[sw->n - 1]; /* never below 50%: the finest point bounds it */
    }

    printf("\n== metg %s (radix %ld, period %ld): peak %.3e FLOP/s (%s, -iter %ld)\n", pattern, g->radix, g->period,
           peak, peak_sys, peak_iter);
    printf("core speed: %.2f ns per iteration before the sweep, %.2f after (%+.0f%%)\n", cal_before, cal_last,
           drift * 100);
    if (fabs(drift) > MZB_DRIFT_WARN)
      printf("warning: the core's speed changed by %+.0f%% during this sweep, so its efficiencies mix two speeds;\n"
             "         compare the systems' METG only as ratios within this run, or run again on a quieter machine\n",
             drift * 100);
    printf("%10s", "iter");
    for (int s = 0; s < NSYS; s++)
      if (res[pi][s].ran) printf(" | %-6s %10s %6s", systems[s]->name, "gran_us", "eff");
    printf("\n");
    int rows = 0;
    for (int s = 0; s < NSYS; s++)
      if (res[pi][s].n > rows) rows = res[pi][s].n;
    for (int i = 0; i < rows; i++) {
      long it = 0;
      for (int s = 0; s < NSYS; s++)
        if (i < res[pi][s].n) it = res[pi][s].iter[i];
      printf("%10ld", it);
      for (int s = 0; s < NSYS; s++) {
        const sweep *sw = &res[pi][s];
        if (!sw->ran) continue;
        if (i < sw->n)
          printf(" | %-6s %10.3f %6.3f", "", sw->gran[i], sw->eff[i]);
        else
          printf(" | %-6s %10s %6s", "", "-", "-");
      }
      printf("\n");
    }
    printf("METG(50%%) \xc2\xb5s:");
    for (int s = 0; s < NSYS; s++) {
      if (!res[pi][s].ran) continue;
      char b[32];
      fmt_us(b, sizeof b, &res[pi][s]);
      printf("  %s %s", systems[s]->name, b);
    }
    printf("\n");

    /* The plot: every system asked for, in the legend with its METG (a
     * ring where its curve crosses 50%), or why it has none. */
    mzb_series series[NSYS];
    char notes[NSYS][64];
    size_t ns = 0, npts = 0;
    for (int s = 0; s < NSYS; s++) {
      const sweep *sw = &res[pi][s];
      if (!(o_sysmask & (1 << s))) continue;
      series[ns] = (mzb_series){.name = systems[s]->name, .x = sw->gran, .y = sw->eff, .n = (size_t)sw->n,
                                .note = notes[ns]};
      if (!systems[s]->available)
        snprintf(notes[ns], sizeof notes[ns], "not built");
      else if (sw->failed)
        snprintf(notes[ns], sizeof notes[ns], "failed (see the output)");
      else if (!sw->n || sw->metg == -1)
        snprintf(notes[ns], sizeof notes[ns], "never 50%% efficient");
      else if (sw->n && sw->metg == sw->gran[sw->n - 1] && sw->eff[sw->n - 1] >= 0.5)
        snprintf(notes[ns], sizeof notes[ns], "METG < %.3g \xc2\xb5s (finest point)", sw->metg);
      else
        snprintf(notes[ns], sizeof notes[ns], "METG %.3g \xc2\xb5s", sw->metg), series[ns].mark_x = sw->metg;
      npts += (size_t)sw->n;
      ns++;
    }
    char title[160], path[1024];
    snprintf(title, sizeof title, "Task Bench %s, compute_bound, %ld steps x %ld, %ld workers", pattern, o_steps,
             width, o_workers);
    mzb_plot plot = {.title = title,
                     .xlabel = "task granularity (\xc2\xb5s per task per worker)",
                     .ylabel = "efficiency (FLOP/s over the sweep's peak)",
                     .logx = 1,
                     .logy = 0,
                     .ymin = 0,
                     .ymax = 1.05,
                     .hline = 0.5};
    svg_path(path, sizeof path, pattern);
    if (npts) {
      int src = mzb_svg_lineplot(path, &plot, series, ns);
      if (src) {
        printf("plot: not written (%s): %s (%s)\n", path, mz_err_name(src), mz_strerror(src));
        failed = 1; /* a plot asked for and not written is a failure: exit 1 */
      }
      else
        printf("plot: %s\n", path);
    }
    fflush(stdout);
  }

  printf("\n");
  for (int pi = 0; pi < o_npatterns; pi++) {
    char m[32], o[32], s[32], mr[32], tb[32];
    fmt_us(m, sizeof m, &res[pi][0]);
    fmt_us(o, sizeof o, &res[pi][1]);
    fmt_us(s, sizeof s, &res[pi][2]);
    fmt_us(mr, sizeof mr, &res[pi][3]);
    fmt_us(tb, sizeof tb, &res[pi][4]);
    printf("BENCH metg.%s maize_us=%s openmp_us=%s starpu_us=%s maize_rerun_us=%s tbb_us=%s\n", o_patterns[pi], m, o, s,
           mr, tb);
  }
  return failed ? 1 : 0;
}
