/* maize-bench's Task Bench module: each dependence pattern's
 * dependency sets, widths and offsets match Task Bench's definitions on
 * small sizes (expected sets worked out by hand from core/core.cc); the
 * counts Task Bench reports; its graph checks; the input check of
 * execute_point catches a wrong, missing or extra input; the maize runner
 * runs every pattern with every input checked, and fails (not times) a
 * run with a deliberately wrong dependency; the METG interpolation on a
 * fixed table.  Behaviour only, never timings.  The OpenMP and StarPU
 * peers are not linked here (they are not sanitizer-instrumented). */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "patterns.h"
#include "tb_systems.h"

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(check, .timeout = 120);
TestSuite(maize, .timeout = 240);
TestSuite(metg, .timeout = 240);
TestSuite(patterns, .timeout = 240);

static tb_graph graph(tb_dep dep, long steps, long width) {
  tb_graph g;
  tb_graph_default(&g, 0);
  g.dep = dep;
  g.timesteps = steps;
  g.max_width = width;
  return g;
}

static tb_graph finished(tb_graph g) {
  char err[256];
  cr_assert_eq(tb_graph_finish(&g, err, sizeof err), 0, "tb_graph_finish: %s", err);
  return g;
}

/* Assert that task (t, p) reads exactly the points want[0..n), in order. */
static void expect_inputs(const tb_graph *g, long t, long p, size_t n, const long *want) {
  long got[64];
  cr_assert_leq(tb_max_inputs(g), 64);
  size_t k = tb_inputs(g, t, p, got);
  cr_assert_leq((long)k, tb_max_inputs(g), "%s t=%ld p=%ld: more inputs than tb_max_inputs", tb_dep_name(g->dep), t, p);
  char gs[256] = "", ws[256] = "";
  for (size_t i = 0; i < k; i++) snprintf(gs + strlen(gs), sizeof gs - strlen(gs), " %ld", got[i]);
  for (size_t i = 0; i < n; i++) snprintf(ws + strlen(ws), sizeof ws - strlen(ws), " %ld", want[i]);
  cr_assert_str_eq(gs, ws, "%s t=%ld p=%ld: inputs {%s } expected {%s }", tb_dep_name(g->dep), t, p, gs, ws);
}
#define EXPECT(g, t, p, ...)                                                                           \
  do {                                                                                               \
    const long w_[] = {-1, __VA_ARGS__};                                                             \
    expect_inputs(g, t, p, sizeof w_ / sizeof w_[0] - 1, w_ + 1);                                    \
  } while (0)

Test(patterns, trivial_and_no_comm) {
  tb_graph g = finished(graph(TB_TRIVIAL, 4, 4));
  EXPECT(&g, 1, 2);
  g = finished(graph(TB_NO_COMM, 4, 4));
  EXPECT(&g, 0, 2); /* timestep 0 has no inputs */
  EXPECT(&g, 1, 2, 2);
  EXPECT(&g, 3, 0, 0);
}

Test(patterns, stencil_1d) {
  tb_graph g = finished(graph(TB_STENCIL_1D, 4, 4));
  EXPECT(&g, 1, 0, 0, 1);
  EXPECT(&g, 1, 1, 0, 1, 2);
  EXPECT(&g, 2, 3, 2, 3);
  g = finished(graph(TB_STENCIL_1D_PERIODIC, 4, 4));
  EXPECT(&g, 1, 0, 0, 1, 3);
  EXPECT(&g, 1, 1, 0, 1, 2);
  EXPECT(&g, 1, 3, 2, 3, 0);
}

Test(patterns, dom) {
  /* steps 4, width 3: offsets 0 0 1 2, widths 1 2 2 1. */
  tb_graph g = finished(graph(TB_DOM, 4, 3));
  long off[4] = {0, 0, 1, 2}, wid[4] = {1, 2, 2, 1};
  for (long t = 0; t < 4; t++) {
    cr_assert_eq(tb_offset_at(&g, t), off[t], "dom offset at %ld", t);
    cr_assert_eq(tb_width_at(&g, t), wid[t], "dom width at %ld", t);
  }
  EXPECT(&g, 1, 0, 0);
  EXPECT(&g, 1, 1, 0);
  EXPECT(&g, 2, 1, 0, 1);
  EXPECT(&g, 2, 2, 1);
  EXPECT(&g, 3, 2, 1, 2);
}

Test(patterns, tree) {
  tb_graph g = finished(graph(TB_TREE, 4, 4));
  long wid[4] = {1, 2, 4, 4};
  for (long t = 0; t < 4; t++) cr_assert_eq(tb_width_at(&g, t), wid[t], "tree width at %ld", t);
  EXPECT(&g, 1, 1, 0);
  EXPECT(&g, 2, 3, 1);
  EXPECT(&g, 3, 2, 1);
  EXPECT(&g, 3, 0, 0);
}

Test(patterns, fft) {
  /* width 8: 3 dependence sets, set (t + 2) % 3 at timestep t, distance 2^set. */
  tb_graph g = finished(graph(TB_FFT, 4, 8));
  cr_assert_eq(tb_max_dsets(&g), 3);
  cr_assert_eq(tb_dset_at(&g, 1), 0);
  cr_assert_eq(tb_dset_at(&g, 2), 1);
  cr_assert_eq(tb_dset_at(&g, 3), 2);
  EXPECT(&g, 1, 0, 0, 1);
  EXPECT(&g, 2, 3, 1, 3, 5);
  EXPECT(&g, 3, 5, 1, 5);
  EXPECT(&g, 3, 2, 2, 6);
}

Test(patterns, all_to_all_and_nearest) {
  tb_graph g = finished(graph(TB_ALL_TO_ALL, 3, 3));
  EXPECT(&g, 1, 1, 0, 1, 2);
  g = graph(TB_NEAREST, 3, 8);
  g.radix = 5;
  g = finished(g);
  EXPECT(&g, 1, 3, 1, 2, 3, 4, 5);
  EXPECT(&g, 1, 0, 0, 1, 2);
  g.radix = 4; /* even radix: one more point on the left */
  EXPECT(&g, 1, 3, 1, 2, 3, 4);
  EXPECT(&g, 1, 7, 5, 6, 7);
  g.radix = 0;
  EXPECT(&g, 1, 3);
}

Test(patterns, spread) {
  /* width 8, radix 2, period 2: set t % 2; point p reads p and (p + 4 + set) % 8. */
  tb_graph g = graph(TB_SPREAD, 4, 8);
  g.radix = 2;
  g.period = 2;
  g = finished(g);
  EXPECT(&g, 1, 0, 0, 5);
  EXPECT(&g, 1, 6, 6, 3);
  EXPECT(&g, 2, 6, 6, 2);
}

Test(patterns, random_nearest) {
  tb_graph g = graph(TB_RANDOM_NEAREST, 6, 16);
  g.radix = 5;
  g.fraction = 1.0;
  g = finished(g);
  EXPECT(&g, 1, 7, 5, 6, 7, 8, 9); /* fraction 1: the whole window */
  g.fraction = 0.0;
  EXPECT(&g, 1, 7, 7); /* fraction 0: only the point itself */
  g.fraction = 0.5;
  cr_assert_eq(tb_graph_finish(&g, NULL, 0), 0, "reverse dependencies must mirror dependencies");
  for (long t = 1; t < 6; t++)
    for (long p = 0; p < 16; p++) {
      long in[16];
      size_t n = tb_inputs(&g, t, p, in), self = 0;
      for (size_t i = 0; i < n; i++) {
        cr_assert(in[i] >= p - 2 && in[i] <= p + 2, "outside the window");
        if (i) cr_assert_gt(in[i], in[i - 1], "not increasing");
        self += in[i] == p;
      }
      cr_assert_eq(self, 1, "random_nearest always includes the point itself");
    }
}

Test(patterns, murmur3_vector) {
  /* The published MurmurHash3_x64_128 vector. */
  const char *s = "The quick brown fox jumps over the lazy dog";
  uint64_t h[2];
  tb_murmur3_x64_128(s, strlen(s), 0, h);
  cr_assert_eq(h[0], UINT64_C(0xe34bbc7bbc071b6c));
  cr_assert_eq(h[1], UINT64_C(0x7a433ca9c49a9347));
  double u = tb_random_uniform(s, 8);
  cr_assert(u >= 0 && u < 1);
}

Test(patterns, graph_checks) {
  char err[256];
  tb_graph g = graph(TB_STENCIL_1D, 4, 4);
  g.period = 2;
  cr_assert_eq(tb_graph_finish(&g, err, sizeof err), -1, "a period on stencil_1d is refused");
  g = graph(TB_SPREAD, 4, 8);
  g.radix = 2;
  g.period = 5; /* at most ceil(8 / 2) = 4 */
  cr_assert_eq(tb_graph_finish(&g, err, sizeof err), -1);
  cr_assert(strstr(err, "at most 4"), "%s", err);
  g = graph(TB_SPREAD, 4, 2);
  g.radix = 3; /* 3 dependencies among 2 points: a duplicate */
  g.period = 1;
  cr_assert_eq(tb_graph_finish(&g, err, sizeof err), -1);
  cr_assert(strstr(err, "twice"), "%s", err);
  g = graph(TB_TRIVIAL, 4, 4);
  g.kernel.type = TB_K_MEMORY_BOUND;
  cr_assert_eq(tb_graph_finish(&g, err, sizeof err), -1, "memory_bound without scratch is refused");
  for (int d = 0; d < TB_DEP_COUNT; d++) {
    g = graph((tb_dep)d, 9, 7);
    cr_assert_eq(tb_graph_finish(&g, err, sizeof err), 0, "%s: %s", tb_dep_name((tb_dep)d), err);
  }
}

Test(patterns, totals) {
  tb_app app;
  memset(&app, 0, sizeof app);
  app.ngraphs = 1;
  app.graphs[0] = graph(TB_STENCIL_1D, 20, 4);
  app.graphs[0].kernel.type = TB_K_COMPUTE_BOUND;
  app.graphs[0].kernel.iterations = 10;
  app.graphs[0] = finished(app.graphs[0]);
  tb_totals t;
  tb_app_totals(&app, &t);
  cr_assert_eq(t.tasks, 80);
  cr_assert_eq(t.deps, 19 * (2 + 3 + 3 + 2));
  cr_assert_eq(t.flops, 80 * (2 * 64 * 10 + 64));
  cr_assert_eq(t.bytes, 0);
  /* tree, 4 steps, width 4: 1 + 2 + 4 + 4 tasks, one dependency each after t = 0. */
  app.graphs[0] = finished(graph(TB_TREE, 4, 4));
  tb_app_totals(&app, &t);
  cr_assert_eq(t.tasks, 11);
  cr_assert_eq(t.deps, 10);
  /* memory_bound bytes: scratch * iterations / samples per task. */
  app.graphs[0] = graph(TB_NO_COMM, 2, 2);
  app.graphs[0].kernel.type = TB_K_MEMORY_BOUND;
  app.graphs[0].kernel.iterations = 4;
  app.graphs[0].scratch_bytes = 4096;
  app.graphs[0] = finished(app.graphs[0]);
  tb_app_totals(&app, &t);
  cr_assert_eq(t.bytes, 4 * 4096 * 4 / 16);
}

Test(patterns, parse) {
  tb_app app;
  char *rest[16];
  int nrest;
  char err[256];
  char *argv1[] = {"-steps", "10", "-type", "fft", "--devices", "cpu:1", "-and", "-type", "tree", "-worker", "3"};
  cr_assert_eq(tb_app_parse(&app, 11, argv1, rest, &nrest, err, sizeof err), 0, "%s", err);
  cr_assert_eq(app.ngraphs, 2);
  cr_assert_eq(app.graphs[0].timesteps, 10);
  cr_assert_eq(app.graphs[0].dep, TB_FFT);
  cr_assert_eq(app.graphs[1].dep, TB_TREE);
  cr_assert_eq(app.graphs[1].graph_index, 1);
  cr_assert_eq(app.workers, 3);
  cr_assert_eq(nrest, 2);
  cr_assert_str_eq(rest[0], "--devices");
  char *bad1[] = {"-steps", "0"};
  cr_assert_eq(tb_app_parse(&app, 2, bad1, rest, &nrest, err, sizeof err), -1);
  char *bad2[] = {"-type", "nope"};
  cr_assert_eq(tb_app_parse(&app, 2, bad2, rest, &nrest, err, sizeof err), -1);
  char *bad3[] = {"-width"};
  cr_assert_eq(tb_app_parse(&app, 1, bad3, rest, &nrest, err, sizeof err), -1);
  char *bad4[] = {"-fraction", "1.5"};
  cr_assert_eq(tb_app_parse(&app, 2, bad4, rest, &nrest, err, sizeof err), -1);
  char *bad5[] = {"-iter", "12x"};
  cr_assert_eq(tb_app_parse(&app, 2, bad5, rest, &nrest, err, sizeof err), -1);
}

Test(check, execute_point_catches_wrong_inputs) {
  tb_graph g = finished(graph(TB_STENCIL_1D, 4, 4));
  int64_t in0[2] = {0, 0}, in1[2] = {0, 1}, in2[2] = {0, 2}, out[2];
  const void *ok[3] = {in0, in1, in2};
  char err[320];
  cr_assert_eq(tb_execute_point(&g, 1, 1, out, 16, ok, NULL, 3, NULL, 0, err, sizeof err), 0, "%s", err);
  cr_assert(out[0] == 1 && out[1] == 1, "the output holds (timestep, point)");
  const void *swapped[3] = {in0, in2, in1};
  cr_assert_eq(tb_execute_point(&g, 1, 1, out, 16, swapped, NULL, 3, NULL, 0, err, sizeof err), -1);
  cr_assert(strstr(err, "expected (timestep 0 point 1)"), "%s", err);
  cr_assert_eq(tb_execute_point(&g, 1, 1, out, 16, ok, NULL, 2, NULL, 0, err, sizeof err), -1, "a missing input");
  const void *extra[4] = {in0, in1, in2, in2};
  cr_assert_eq(tb_execute_point(&g, 1, 1, out, 16, extra, NULL, 4, NULL, 0, err, sizeof err), -1, "an extra input");
  int64_t stale[2] = {1, 1}; /* the right point, the wrong timestep */
  const void *st[3] = {in0, stale, in2};
  cr_assert_eq(tb_execute_point(&g, 1, 1, out, 16, st, NULL, 3, NULL, 0, err, sizeof err), -1);
}

static const struct {
  tb_dep dep;
  long radix, period;
} run_cases[] = {
    {TB_TRIVIAL, 3, -1}, {TB_NO_COMM, 3, -1},   {TB_STENCIL_1D, 3, -1}, {TB_STENCIL_1D_PERIODIC, 3, -1},
    {TB_DOM, 3, -1},     {TB_TREE, 3, -1},      {TB_FFT, 3, -1},        {TB_ALL_TO_ALL, 3, -1},
    {TB_NEAREST, 5, -1}, {TB_SPREAD, 2, 2},     {TB_RANDOM_NEAREST, 3, 3},
};

static void run_maize(tb_app *app, const char *policy, long inject, int expect_ok) {
  tb_sys_opts o = {.workers = 2, .devices = "cpu:2", .policy = policy, .inject_wrong_dep = inject};
  void *st;
  char err[640];
  cr_assert_eq(tb_system_maize.create(app, &o, &st, err, sizeof err), 0, "%s", err);
  double s;
  int rc = tb_system_maize.run(st, &s, err, sizeof err);
  if (expect_ok) {
    cr_assert_eq(rc, 0, "%s: %s", tb_dep_name(app->graphs[0].dep), err);
    /* Again on the same state: buffers and kernels are reused. */
    rc = tb_system_maize.run(st, &s, err, sizeof err);
    cr_assert_eq(rc, 0, "second run, %s: %s", tb_dep_name(app->graphs[0].dep), err);
  } else {
    cr_assert_eq(rc, -1, "%s: a wrong dependency must fail the run", tb_dep_name(app->graphs[0].dep));
    cr_assert(strstr(err, "input check failed"), "%s", err);
  }
  tb_system_maize.destroy(st);
}

Test(maize, every_pattern_runs_checked) {
  for (size_t i = 0; i < sizeof run_cases / sizeof run_cases[0]; i++) {
    tb_app app;
    memset(&app, 0, sizeof app);
    app.ngraphs = 1;
    tb_graph g = graph(run_cases[i].dep, 12, 6);
    g.radix = run_cases[i].radix;
    g.period = run_cases[i].period;
    g.kernel.type = TB_K_BUSY_WAIT;
    g.kernel.iterations = 10;
    app.graphs[0] = finished(g);
    run_maize(&app, NULL, 0, 1);
  }
}

Test(maize, kernels_fields_and_graphs) {
  tb_app app;
  memset(&app, 0, sizeof app);
  app.ngraphs = 2;
  tb_graph g = graph(TB_STENCIL_1D, 10, 4);
  g.kernel.type = TB_K_MEMORY_BOUND;
  g.kernel.iterations = 3;
  g.scratch_bytes = 4096;
  g.fields = 2; /* reused output buffers: maize's hazards keep it right */
  app.graphs[0] = finished(g);
  g = graph(TB_FFT, 7, 8);
  g.graph_index = 1;
  g.kernel.type = TB_K_LOAD_IMBALANCE;
  g.kernel.iterations = 20;
  g.kernel.imbalance = 1.0;
  g.output_bytes = 64;
  app.graphs[1] = finished(g);
  run_maize(&app, NULL, 0, 1);
  run_maize(&app, "single", 0, 1);
}

Test(maize, wrong_dependency_fails) {
  tb_dep deps[] = {TB_STENCIL_1D, TB_TREE, TB_NO_COMM};
  for (size_t i = 0; i < sizeof deps / sizeof deps[0]; i++) {
    tb_app app;
    memset(&app, 0, sizeof app);
    app.ngraphs = 1;
    app.graphs[0] = finished(graph(deps[i], 6, 4));
    run_maize(&app, NULL, 3, 0);
  }
}

Test(metg, interpolation) {
  /* Crossing between 25 us (0.6) and 12.5 us (0.3): a third of the way
   * in log(granularity), 25 * 0.5^(1/3). */
  double gran[] = {12.5, 100, 25, 50}, eff[] = {0.3, 0.95, 0.6, 0.8};
  double m = tb_metg(gran, eff, 4, 0.5);
  cr_assert_float_eq(m, 25.0 * pow(0.5, 1.0 / 3.0), 1e-9, "METG %f", m);
  /* Exactly at the threshold: that point. */
  double e2[] = {0.2, 1.0, 0.5, 0.7};
  cr_assert_float_eq(tb_metg(gran, e2, 4, 0.5), 25.0, 1e-9);
  double low[] = {0.1, 0.4, 0.2, 0.3};
  cr_assert_eq(tb_metg(gran, low, 4, 0.5), -1, "never efficient");
  double high[] = {0.9, 1.0, 0.9, 0.95};
  cr_assert_eq(tb_metg(gran, high, 4, 0.5), -2, "never below the threshold");
  /* A dip at a coarser point does not count: the finest efficient point
   * (25 us, 0.7) and the next (12.5 us, 0.45) bracket it, 0.8 of the way. */
  double g3[] = {100, 50, 25, 12.5, 6.25}, e3[] = {1.0, 0.4, 0.7, 0.45, 0.1};
  cr_assert_float_eq(tb_metg(g3, e3, 5, 0.5), 25.0 * pow(0.5, 0.8), 1e-9);
}
