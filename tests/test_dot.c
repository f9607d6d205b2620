/* test_dot: mz_graph_dump_dot, the graph as Graphviz DOT.
 *
 * Checks on a small graph with every edge kind: one node per task, filled
 * with one colour per kernel (the same kernel, the same colour); data edges
 * from a value's producer, hazard edges labelled RAW, WAR and WAW where no
 * other edge orders the pair, explicit edges from mz_depend; before a run
 * the tasks are grey and name no device, after it each names the device it
 * ran on and a failed one its error; names with quotes and newlines are
 * escaped; bad arguments give MZ_EINVAL, an unwritable path MZ_EIO.  When
 * Graphviz is installed (meson passes its `dot`), the output is parsed by
 * `dot -Tsvg` and must give an SVG; without it that test is skipped. */
#include <unistd.h>

#include "common.h"

static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) v[i] += 1;
  return 0;
}

static int sum_fn(const mz_call *c) {
  const int32_t *v = c->args[0].p;
  int32_t *s = c->args[1].p;
  s[0] = 0;
  for (uint64_t i = 0; i < c->args[2].u64; i++) s[0] += v[i];
  return 0;
}

static int slow_fn(const mz_call *c) {
  test_sleep_ms((unsigned)c->args[0].i32);
  return 0;
}

static int fail_fn(const mz_call *c) {
  (void)c;
  return -1;
}

/* The dump as a string (the caller frees it). */
static char *dump(mz_runtime *rt, mz_graph *g) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cr_assert_not_null(f);
  MZ_OK_OR_DIE(rt, mz_graph_dump_dot(g, f));
  fclose(f);
  return text;
}

static unsigned count(const char *hay, const char *needle) {
  unsigned n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* The attributes of the edge "t<a> -> t<b> [", or NULL. */
static const char *edge(const char *text, unsigned a, unsigned b) {
  char key[64];
  snprintf(key, sizeof key, "t%u -> t%u [", a, b);
  const char *p = strstr(text, key);
  return p ? p + strlen(key) : NULL;
}

static bool edge_is(const char *text, unsigned a, unsigned b, const char *attr) {
  const char *e = edge(text, a, b);
  if (!e) return false;
  const char *end = strchr(e, ']');
  const char *hit = strstr(e, attr);
  return hit && hit < end;
}

/* A node's attribute list "t<id> [...]". */
static char *node_attrs(const char *text, unsigned id) {
  char key[32];
  snprintf(key, sizeof key, "\n  t%u [", id);
  const char *p = strstr(text, key);
  if (!p) return NULL;
  p += strlen(key);
  const char *end = strstr(p, "];\n");
  return end ? strndup(p, (size_t)(end - p)) : NULL;
}

/* The graph:  A = inc(x)  B = sum(x -> s)  C = inc(x)  D = sum(y -> s)
 * with x's value taken afresh for C after A and B, s's value taken once
 * before all of them (so D's s comes from no task), and D made to follow
 * A with mz_depend.  Edges: A->B data (B reads A's result),
 * A->C data (C's value of x is A's), B->C WAR (C writes x that B read),
 * B->D WAW (both write s), A->D explicit. */
struct fixture {
  mz_runtime *rt;
  mz_kernel *inc, *sum;
  mz_buffer *x, *y, *s;
  mz_graph *g;
  mz_op *a, *b, *c, *d;
};

static void build(struct fixture *fx) {
  fx->rt = test_runtime("cpu:2");
  fx->inc = test_kernel(fx->rt, "inc", "inout i32[] v, u64 n = sizeof(v)", inc_fn, NULL);
  fx->sum = test_kernel(fx->rt, "sum", "in i32[] v, out i32[] s, u64 n = sizeof(v)", sum_fn, NULL);
  int32_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  fx->x = test_buffer_1d(fx->rt, MZ_I32, 8, ones);
  fx->y = test_buffer_1d(fx->rt, MZ_I32, 8, ones);
  fx->s = test_buffer_1d(fx->rt, MZ_I32, 1, NULL);
  MZ_OK_OR_DIE(fx->rt, mz_graph_create(fx->rt, &fx->g));
  mz_graph *g = fx->g;
  mz_op *s0 = mz_value(g, fx->s); /* s before any task: no producer */
  fx->a = mz_apply(g, fx->inc, mz_value(g, fx->x), NULL);
  fx->b = mz_apply(g, fx->sum, mz_zip(g, 2, (mz_op *[]){mz_unzip(g, fx->a, 0), s0}), NULL);
  fx->c = mz_apply(g, fx->inc, mz_value(g, fx->x), NULL);
  fx->d = mz_apply(g, fx->sum, mz_zip(g, 2, (mz_op *[]){mz_value(g, fx->y), s0}), NULL);
  MZ_OK_OR_DIE(fx->rt, mz_depend(g, fx->d, fx->a));
  MZ_OK_OR_DIE(fx->rt, mz_graph_status(g));
}

static void teardown(struct fixture *fx) {
  mz_graph_destroy(fx->g);
  mz_buffer_release(fx->x);
  mz_buffer_release(fx->y);
  mz_buffer_release(fx->s);
  mz_kernel_destroy(fx->inc);
  mz_kernel_destroy(fx->sum);
  mz_runtime_destroy(fx->rt);
}

/* The node ids, as the dump names them: the tasks are the 1st to 4th
 * tasks built; their ids are whatever the builders gave, so read them
 * off the node lines in build order. */
static void task_ids(const char *text, unsigned ids[4]) {
  const char *p = text;
  for (int i = 0; i < 4; i++) {
    p = strstr(p, "\n  t");
    cr_assert_not_null(p, "node %d missing:\n%s", i, text);
    cr_assert_eq(sscanf(p, "\n  t%u [", &ids[i]), 1);
    p += 4;
  }
}

Test(dot, nodes_and_edge_kinds, .timeout = 30) {
  struct fixture fx;
  build(&fx);
  char *text = dump(fx.rt, fx.g);
  cr_assert(strncmp(text, "digraph maize {", 15) == 0, "%s", text);
  cr_assert(text[strlen(text) - 2] == '}', "%s", text);
  unsigned id[4];
  task_ids(text, id);
  /* Four task nodes, one colour per kernel. */
  cr_expect_eq(count(text, "shape=box, style=\"rounded,filled\""), 4, "%s", text);
  char *na = node_attrs(text, id[0]), *nb = node_attrs(text, id[1]), *nc = node_attrs(text, id[2]),
       *nd = node_attrs(text, id[3]);
  cr_assert(na && nb && nc && nd, "%s", text);
  cr_expect(strstr(na, "label=\"inc #") && strstr(nb, "label=\"sum #"), "%s\n%s", na, nb);
  char fa[16], fb[16], fc[16], fd[16];
  cr_assert_eq(sscanf(strstr(na, "fillcolor="), "fillcolor=\"%15[^\"]", fa), 1);
  cr_assert_eq(sscanf(strstr(nb, "fillcolor="), "fillcolor=\"%15[^\"]", fb), 1);
  cr_assert_eq(sscanf(strstr(nc, "fillcolor="), "fillcolor=\"%15[^\"]", fc), 1);
  cr_assert_eq(sscanf(strstr(nd, "fillcolor="), "fillcolor=\"%15[^\"]", fd), 1);
  cr_expect_str_eq(fa, fc, "one kernel, one colour");
  cr_expect_str_eq(fb, fd, "one kernel, one colour");
  cr_expect_str_neq(fa, fb, "two kernels, two colours");
  /* Before any run: grey outlines, no device. */
  cr_expect(strstr(na, "color=\"#999999\"") != NULL, "never scheduled: grey: %s", na);
  cr_expect(strstr(text, "queue") == NULL, "no device before a run:\n%s", text);
  /* The edges, each pair once. */
  cr_expect(edge_is(text, id[0], id[1], "color=\"#333333\""), "A->B data:\n%s", text);
  cr_expect(edge_is(text, id[0], id[2], "color=\"#333333\""), "A->C data:\n%s", text);
  cr_expect(edge_is(text, id[1], id[2], "label=\"WAR\""), "B->C WAR:\n%s", text);
  cr_expect(edge_is(text, id[1], id[3], "label=\"WAW\""), "B->D WAW:\n%s", text);
  cr_expect(edge_is(text, id[0], id[3], "style=dotted"), "A->D explicit:\n%s", text);
  cr_expect_eq(count(text, " -> "), 5, "exactly five edges:\n%s", text);
  free(na);
  free(nb);
  free(nc);
  free(nd);
  free(text);
  teardown(&fx);
}

Test(dot, raw_hazard_without_a_data_edge, .timeout = 30) {
  /* B reads x through a value taken before A wrote it: no data edge, but
   * the build order makes it a read-after-write. */
  mz_runtime *rt = test_runtime("cpu");
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v, u64 n = sizeof(v)", inc_fn, NULL);
  mz_kernel *sum = test_kernel(rt, "sum", "in i32[] v, out i32[] s, u64 n = sizeof(v)", sum_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 4, NULL), *s = test_buffer_1d(rt, MZ_I32, 1, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *early = mz_value(g, x);
  mz_apply(g, inc, mz_value(g, x), NULL);
  mz_apply(g, sum, mz_zip(g, 2, (mz_op *[]){early, mz_value(g, s)}), NULL);
  char *text = dump(rt, g);
  unsigned a, b;
  const char *p = strstr(text, "\n  t");
  cr_assert(p && sscanf(p, "\n  t%u [", &a) == 1);
  p = strstr(p + 4, "\n  t");
  cr_assert(p && sscanf(p, "\n  t%u [", &b) == 1);
  cr_expect(edge_is(text, a, b, "label=\"RAW\""), "RAW edge:\n%s", text);
  cr_expect_eq(count(text, " -> "), 1, "%s", text);
  free(text);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(s);
  mz_kernel_destroy(inc);
  mz_kernel_destroy(sum);
  mz_runtime_destroy(rt);
}

Test(dot, devices_after_a_run_and_failures, .timeout = 30) {
  struct fixture fx;
  build(&fx);
  mz_kernel *bad = test_kernel(fx.rt, "bad", "inout i32[] v", fail_fn, NULL);
  mz_op *failed = mz_apply(fx.g, bad, mz_value(fx.g, fx.y), NULL);
  cr_expect_eq(test_run(fx.g, mz_join(fx.g, 3, (mz_op *[]){fx.b, fx.c, fx.d}), "eager", NULL), MZ_OK);
  cr_expect_neq(test_run(fx.g, failed, "eager", NULL), MZ_OK);
  /* No wait for idle: the dump itself waits for the runs' teardown. */
  char *text = dump(fx.rt, fx.g);
  unsigned id[4];
  task_ids(text, id);
  for (int i = 0; i < 4; i++) {
    char *n = node_attrs(text, id[i]);
    cr_assert_not_null(n);
    cr_expect(strstr(n, "\\ndev 0 cpu: ") != NULL && strstr(n, ", queue ") != NULL, "task %d names its device: %s", i, n);
    cr_expect(strstr(n, "#999999") == NULL, "ran: not grey: %s", n);
    free(n);
  }
  const char *fl = strstr(text, "label=\"bad #");
  cr_assert_not_null(fl, "%s", text);
  const char *end = strstr(fl, "];");
  const char *err = strstr(fl, "\\nMZ_EKERNEL\"");
  const char *red = strstr(fl, "penwidth=2");
  cr_expect(err && err < end && red && red < end, "the failed task shows its error in red:\n%s", text);
  (void)failed;
  free(text);
  mz_kernel_destroy(bad);
  teardown(&fx);
}

Test(dot, names_are_escaped, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu");
  mz_kernel *k = test_kernel(rt, "say \"hi\"\\\nthere", "inout i32[] v, u64 n = sizeof(v)", inc_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k, mz_value(g, x), NULL);
  if (mz_graph_status(g) == MZ_OK) {
    char *text = dump(rt, g);
    cr_expect(strstr(text, "label=\"say \\\"hi\\\"\\\\ there #") != NULL, "%s", text);
    free(text);
  }
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(dot, bad_arguments, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu");
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_expect_eq(mz_graph_dump_dot(NULL, stdout), MZ_EINVAL);
  cr_expect_eq(mz_graph_dump_dot(g, NULL), MZ_EINVAL);
  cr_expect_eq(mz_graph_dump_dot_file(NULL, "x.dot"), MZ_EINVAL);
  cr_expect_eq(mz_graph_dump_dot_file(g, NULL), MZ_EINVAL);
  cr_expect_eq(mz_graph_dump_dot((mz_graph *)(void *)rt, stdout), MZ_EINVAL, "a runtime is not a graph");
  cr_expect_eq(mz_graph_dump_dot_file(g, "/nonexistent-folder/g.dot"), MZ_EIO);
  cr_expect(strstr(mz_runtime_last_error(rt), "/nonexistent-folder/g.dot") != NULL, "%s", mz_runtime_last_error(rt));
  /* A graph with a sticky error is drawn, the error in its label. */
  mz_apply(g, NULL, mz_i32(g, 1), NULL);
  cr_assert_neq(mz_graph_status(g), MZ_OK);
  char *text = dump(rt, g);
  cr_expect(strstr(text, "Sticky error: mz_apply: NULL kernel") != NULL, "%s", text);
  free(text);
  /* A destroyed graph whose memory a run still holds is refused. */
  mz_graph *g2;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_kernel *k = test_kernel(rt, "slow", "i32 ms", slow_fn, NULL);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_apply(g2, k, mz_i32(g2, 50), NULL), NULL, &f));
  mz_graph_destroy(g2);
  cr_expect_eq(mz_graph_dump_dot(g2, stdout), MZ_EINVAL, "destroyed, memory still held by its run");
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(dot, graphviz_parses_it, .timeout = 60) {
#ifndef MZ_DOT_PROGRAM
  cr_skip("Graphviz's dot was not found when maize was configured (Debian: graphviz)");
#else
  /* A build carried to another machine (bench/gpu-check.sh's prebuilt mode)
   * may find no dot there. */
  if (access(MZ_DOT_PROGRAM, X_OK) != 0) cr_skip("%s (found when maize was configured) is not on this machine", MZ_DOT_PROGRAM);
  struct fixture fx;
  build(&fx);
  cr_expect_eq(test_run(fx.g, mz_join(fx.g, 2, (mz_op *[]){fx.c, fx.d}), NULL, NULL), MZ_OK);
  char dir[] = "/tmp/mz-dot-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char dotf[64], svgf[64], cmd[512];
  snprintf(dotf, sizeof dotf, "%s/g.dot", dir);
  snprintf(svgf, sizeof svgf, "%s/g.svg", dir);
  MZ_OK_OR_DIE(fx.rt, mz_graph_dump_dot_file(fx.g, dotf));
  snprintf(cmd, sizeof cmd, "'%s' -Tsvg -o '%s' '%s'", MZ_DOT_PROGRAM, svgf, dotf);
  cr_expect_eq(system(cmd), 0, "%s failed", cmd);
  FILE *f = fopen(svgf, "r");
  cr_assert_not_null(f);
  char buf[4096] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  cr_expect(n > 0 && strstr(buf, "<svg") != NULL, "no SVG from dot");
  unlink(svgf);
  unlink(dotf);
  rmdir(dir);
  teardown(&fx);
#endif
}
