/* test_observe: the observer API and what is built on it.
 *
 * - mz_runtime_set_observer: a record per node that reached a queue, with
 *   its device, queue and measured times; run_end once per run, after its
 *   nodes' records and before mz_future_wait returns; replacing and
 *   removing an observer; refusal from a runtime thread.
 * - mz_future_timings: per-node timings of a finished run, MZ_EAGAIN while
 *   in flight, MZ_ESTATE once a re-run has taken the nodes over, or when
 *   the run was not timed (the default for CPU nodes: perf-model samples
 *   only; busy time then counted per burst).
 * - On OpenCL (skipped without a device): copies into the device and reads
 *   back to the host are reported, measured, and add up to the run's
 *   statistics; so do the trace's transfer slices.
 * - The trace is written at each run's end: a child process
 *   (tests/trace_child.c) that aborts after two runs leaves a valid trace
 *   with both. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "mzb.h"

TestSuite(observe, .timeout = 120);

/* ---- a recording observer ---- */

struct rec {
  _Atomic unsigned nodes, xfers, runs, bad_times, nodes_at_end, set_rc_set;
  _Atomic uint64_t xbytes, last_run;
  _Atomic int set_rc; /* mz_runtime_set_observer's answer from a callback */
  _Atomic unsigned measured, xfer_after_node, reads, copies_in;
  _Atomic uint64_t read_end, copy_end, host_start, scale_start; /* the OpenCL test's order */
  mz_runtime *rt;     /* for the callback-side refusal */
  unsigned ndev, nq;
};

static void rec_node(const mz_node_record *n, void *user) {
  struct rec *r = user;
  if (n->start_ns > n->end_ns || n->device < 0 || (unsigned)n->device >= r->ndev || n->queue < 0 ||
      (unsigned)n->queue >= r->nq || !n->name)
    atomic_fetch_add(&r->bad_times, 1);
  if (n->name && !strcmp(n->name, "host")) atomic_store(&r->host_start, n->start_ns);
  if (n->name && !strcmp(n->name, "scale")) atomic_store(&r->scale_start, n->start_ns);
  atomic_fetch_add(&r->nodes, 1);
}

static void rec_xfer(const mz_transfer_record *x, void *user) {
  struct rec *r = user;
  atomic_fetch_add(&r->xfers, 1);
  atomic_fetch_add(&r->xbytes, x->bytes);
  if (x->measured) atomic_fetch_add(&r->measured, 1);
  if (x->measured && x->start_ns > x->end_ns) atomic_fetch_add(&r->bad_times, 1);
  if (x->dst_device < 0) atomic_fetch_add(&r->reads, 1);
  else atomic_fetch_add(&r->copies_in, 1);
  if (x->measured) atomic_store(x->dst_device < 0 ? &r->read_end : &r->copy_end, x->end_ns);
}

static void rec_run_end(const mz_run_record *e, void *user) {
  struct rec *r = user;
  atomic_store(&r->nodes_at_end, atomic_load(&r->nodes));
  atomic_store(&r->last_run, e->run);
  if (!e->stats || e->stats->ops != atomic_load(&r->nodes)) atomic_fetch_add(&r->bad_times, 1000);
  if (r->rt && !atomic_load(&r->set_rc_set)) {
    atomic_store(&r->set_rc, mz_runtime_set_observer(r->rt, NULL));
    atomic_store(&r->set_rc_set, 1);
  }
  atomic_fetch_add(&r->runs, 1);
}

static mz_observer rec_observer(struct rec *r) {
  return (mz_observer){.node = rec_node, .transfer = rec_xfer, .run_end = rec_run_end, .user = r};
}

static int k_inc(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] += 1.0f;
  return 0;
}

/* A diamond of `width` increments between two more, on one buffer each. */
static mz_op *build(mz_graph *g, mz_kernel *k, mz_buffer **bufs, unsigned width) {
  mz_op **ends = calloc(width, sizeof *ends);
  for (unsigned i = 0; i < width; i++) {
    mz_op *a = mz_unzip(g, mz_apply(g, k, mz_value(g, bufs[i]), NULL), 0);
    ends[i] = mz_apply(g, k, a, NULL);
  }
  mz_op *root = mz_join(g, width, ends);
  free(ends);
  return root;
}

Test(observe, every_node_and_run_reported) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct rec r = {.ndev = mz_runtime_device_count(rt), .nq = mz_runtime_queue_count(rt)};
  mz_observer o = rec_observer(&r);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
  mz_kernel *k = test_kernel(rt, "inc", "inout f32[] y, u64 n = sizeof(y)", k_inc, NULL);
  mz_buffer *b[4];
  for (int i = 0; i < 4; i++) b[i] = test_buffer_1d(rt, MZ_F32, 1000, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  cr_assert_eq(test_run(g, build(g, k, b, 4), NULL, &f), MZ_OK);
  /* run_end came before the wait returned, after every node's record. */
  cr_expect_eq(atomic_load(&r.runs), 1);
  cr_expect_eq(atomic_load(&r.nodes), 8);
  cr_expect_eq(atomic_load(&r.nodes_at_end), 8);
  cr_expect_eq(atomic_load(&r.bad_times), 0);
  cr_expect_eq(atomic_load(&r.xfers), 0, "host memory only: no copies");
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, 8);
  cr_expect_eq(atomic_load(&r.last_run), 1);
  /* The callback's own mz_runtime_set_observer was refused (r.rt unset
   * here: not called). */
  cr_expect_eq(atomic_load(&r.set_rc_set), 0);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int i = 0; i < 4; i++) mz_buffer_release(b[i]);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(observe, replace_remove_and_refuse) {
  mz_runtime *rt = test_runtime("cpu:2");
  cr_expect_eq(mz_runtime_set_observer(NULL, NULL), MZ_EINVAL);
  struct rec a = {.ndev = mz_runtime_device_count(rt), .nq = mz_runtime_queue_count(rt), .rt = rt};
  struct rec b = {.ndev = a.ndev, .nq = a.nq};
  mz_observer oa = rec_observer(&a), ob = rec_observer(&b);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &oa));
  mz_kernel *k = test_kernel(rt, "inc", "inout f32[] y, u64 n = sizeof(y)", k_inc, NULL);
  mz_buffer *buf = test_buffer_1d(rt, MZ_F32, 100, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *root = mz_apply(g, k, mz_value(g, buf), NULL);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  /* From run_end (a runtime thread) the call is refused, nothing changed. */
  cr_expect_eq(atomic_load(&a.set_rc_set), 1);
  cr_expect_eq(atomic_load(&a.set_rc), MZ_EDEADLK);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &ob));
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, NULL));
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  cr_expect_eq(atomic_load(&a.runs), 1, "the first observer saw only the first run");
  cr_expect_eq(atomic_load(&a.nodes), 1);
  cr_expect_eq(atomic_load(&b.runs), 1, "the second observer saw only the second run");
  cr_expect_eq(atomic_load(&b.last_run), 2);
  mz_graph_destroy(g);
  mz_buffer_release(buf);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- mz_future_timings ---- */

static _Atomic int gate;
static int h_wait(const mz_call *c) {
  (void)c;
  while (!atomic_load(&gate)) test_sleep_ms(1);
  return 0;
}

Test(observe, timings_of_a_finished_run) {
  mz_runtime *rt = test_runtime_timed("cpu:2");
  mz_kernel *k = test_kernel(rt, "inc", "inout f32[] y, u64 n = sizeof(y)", k_inc, NULL);
  mz_buffer *b[3];
  for (int i = 0; i < 3; i++) b[i] = test_buffer_1d(rt, MZ_F32, 1000, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *root = build(g, k, b, 3);
  const mz_node_timing *tv;
  size_t n;
  cr_expect_eq(mz_future_timings(NULL, &tv, &n), MZ_EINVAL);
  mz_future *f1, *f2, *f3;
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f1));
  cr_assert_eq(mz_future_wait(f1), MZ_OK);
  cr_expect_eq(mz_future_timings(f1, NULL, &n), MZ_EINVAL);
  MZ_OK_OR_DIE(rt, mz_future_timings(f1, &tv, &n));
  cr_assert_eq(n, 6);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f1, &st));
  for (size_t i = 0; i < n; i++) {
    cr_expect_str_eq(tv[i].name, "inc");
    cr_expect_eq(tv[i].device, 0);
    cr_expect(tv[i].queue >= 0 && (unsigned)tv[i].queue < mz_runtime_queue_count(rt));
    cr_expect_eq(tv[i].status, MZ_OK);
    cr_expect_leq(tv[i].start_ns, tv[i].end_ns);
    cr_expect_leq(tv[i].end_ns, st.elapsed_ns, "node %u ends after the run", tv[i].node);
    cr_expect_gt(tv[i].end_ns, 0);
  }
  /* A second run that nobody asked the first run's timings of... */
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f2));
  cr_assert_eq(mz_future_wait(f2), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f3));
  cr_assert_eq(mz_future_wait(f3), MZ_OK);
  /* ...has lost them to the third; the first keeps its snapshot. */
  cr_expect_eq(mz_future_timings(f2, &tv, &n), MZ_ESTATE);
  cr_expect_null(tv);
  cr_expect_eq(n, 0);
  MZ_OK_OR_DIE(rt, mz_future_timings(f1, &tv, &n));
  cr_expect_eq(n, 6);
  MZ_OK_OR_DIE(rt, mz_future_timings(f3, &tv, &n));
  cr_expect_eq(n, 6);
  mz_future_destroy(f1);
  mz_future_destroy(f2);
  mz_future_destroy(f3);
  /* In flight: MZ_EAGAIN. */
  atomic_store(&gate, 0);
  mz_op *h = mz_host(g, h_wait, NULL, mz_value(g, b[0]));
  MZ_OK_OR_DIE(rt, mz_schedule(g, h, NULL, &f1));
  cr_expect_eq(mz_future_timings(f1, &tv, &n), MZ_EAGAIN);
  atomic_store(&gate, 1);
  cr_assert_eq(mz_future_wait(f1), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_future_timings(f1, &tv, &n));
  cr_expect_eq(n, 1);
  cr_expect_str_eq(tv[0].name, "host");
  mz_future_destroy(f1);
  mz_graph_destroy(g);
  for (int i = 0; i < 3; i++) mz_buffer_release(b[i]);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- OpenCL: measured copies and reads back ---- */

static const char *scale_cl =
    "__kernel void scale(float a, __global float *y, ulong n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) y[i] = a * y[i];\n"
    "}\n";

static int h_check(const mz_call *c) {
  const float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++)
    if (y[i] != 2.0f * (float)i) return 1;
  return 0;
}

static size_t count_in(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) n++;
  return n;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  if (s && fread(s, 1, (size_t)len, f) != (size_t)len) {
    free(s);
    s = NULL;
  }
  if (s) s[len] = 0;
  fclose(f);
  return s;
}

/* Without timings asked for, nobody observing and a policy without done,
 * CPU nodes are timed only as perf-model samples: mz_future_timings says
 * the run was not timed, the busy time still adds up (counted per burst),
 * and an observer or MZ_TIMINGS=1 makes a run timed again. */
static int k_nap(const mz_call *c) {
  (void)c;
  test_sleep_ms(2);
  return 0;
}

Test(observe, untimed_runs) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "nap", "inout u8[] x", k_nap, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_U8, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *last = mz_value(g, b);
  for (int i = 0; i < 5; i++) last = mz_unzip(g, mz_apply(g, k, last, NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_graph_run(g, last, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  const mz_node_timing *tv = (const mz_node_timing *)1;
  size_t n = 7;
  cr_expect_eq(mz_future_timings(f, &tv, &n), MZ_ESTATE);
  cr_expect_null(tv);
  cr_expect_eq(n, 0);
  cr_expect(strstr(mz_runtime_last_error(rt), "not timed") != NULL, "%s", mz_runtime_last_error(rt));
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, 5);
  cr_expect_geq(st.busy_ns[0], 5 * 2000000ull, "busy %llu ns", (unsigned long long)st.busy_ns[0]);
  cr_expect_leq(st.busy_ns[0], st.elapsed_ns, "busy %llu ns in a run of %llu ns on one worker",
                (unsigned long long)st.busy_ns[0], (unsigned long long)st.elapsed_ns);
  mz_future_destroy(f);
  /* Observed: timed. */
  struct rec r = {.ndev = mz_runtime_device_count(rt), .nq = mz_runtime_queue_count(rt)};
  mz_observer o = rec_observer(&r);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
  MZ_OK_OR_DIE(rt, mz_graph_run(g, last, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_future_timings(f, &tv, &n));
  cr_assert_eq(n, 5);
  for (size_t i = 0; i < n; i++) cr_expect_geq(tv[i].end_ns, tv[i].start_ns + 2000000, "node %zu", i);
  cr_expect_eq(atomic_load(&r.bad_times), 0);
  mz_future_destroy(f);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, NULL));
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  /* MZ_TIMINGS: 1 times every node; anything but 0 or 1 is refused. */
  setenv("MZ_TIMINGS", "1", 1);
  rt = test_runtime("cpu:1");
  k = test_kernel(rt, "nap", "inout u8[] x", k_nap, NULL);
  b = test_buffer_1d(rt, MZ_U8, 8, NULL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, k, mz_value(g, b), NULL), NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_future_timings(f, &tv, &n));
  cr_expect_eq(n, 1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  setenv("MZ_TIMINGS", "yes", 1);
  rt = NULL;
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_null(rt);
  unsetenv("MZ_TIMINGS");
}


Test(observe, opencl_copies_and_reads_back_are_measured) {
  char trace[64];
  snprintf(trace, sizeof trace, "/tmp/mz-observe-%d.json", (int)getpid());
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu,opencl:0", .quiet = true, .trace = trace}, &rt);
  if (rc == MZ_ENODEV || rc == MZ_ENOENT)
    cr_skip_test("needs an OpenCL device (pocl-opencl-icd with POCL_DEVICES=\"pthread pthread\")");
  cr_assert_eq(rc, MZ_OK);
  struct rec r = {.ndev = mz_runtime_device_count(rt), .nq = mz_runtime_queue_count(rt)};
  mz_observer o = rec_observer(&r);
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
  /* scale has OpenCL code only, so it runs on the OpenCL device; the host
   * check reads its result back. */
  mz_kernel *k;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt,
                                    &(mz_kernel_spec){.name = "scale",
                                                      .params = "f32 a, inout f32[] y, u64 n = sizeof(y)",
                                                      .opencl = {.format = MZ_CODE_SOURCE, .data = scale_cl}},
                                    &k));
  enum { N = 1 << 16 };
  float *init = malloc(N * sizeof *init);
  for (int i = 0; i < N; i++) init[i] = (float)i;
  mz_buffer *y = test_buffer_1d(rt, MZ_F32, N, init);
  free(init);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *scaled = mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_f32(g, 2.0f), mz_value(g, y)}), NULL), 1);
  mz_op *checked = mz_host(g, h_check, NULL, mz_zip(g, 2, (mz_op *[]){scaled, mz_u64(g, N)}));
  mz_future *f;
  cr_assert_eq(test_run(g, checked, NULL, &f), MZ_OK, "%s", f ? mz_future_message(f) : "");
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(atomic_load(&r.bad_times), 0);
  cr_expect_geq(st.transfers, 2, "a copy in and a read back");
  cr_expect_eq(atomic_load(&r.xfers), st.transfers, "the observer saw every copy the statistics count");
  cr_expect_eq(atomic_load(&r.xbytes), st.bytes_moved);
  cr_expect_geq(atomic_load(&r.copies_in), 1);
  cr_expect_geq(atomic_load(&r.reads), 1, "the read back to the host is reported");
  cr_expect_eq(atomic_load(&r.measured), atomic_load(&r.xfers), "OpenCL copies and CPU reads are measured");
  /* A copy runs before its node on the node's in-order queue; the CPU's
   * read back runs on its worker before the host node starts. */
  cr_expect_leq(atomic_load(&r.copy_end), atomic_load(&r.scale_start));
  cr_expect_leq(atomic_load(&r.read_end), atomic_load(&r.host_start));
  cr_expect_gt(atomic_load(&r.read_end), 0);
  const mz_node_timing *tv;
  size_t n;
  MZ_OK_OR_DIE(rt, mz_future_timings(f, &tv, &n));
  unsigned tx = 0;
  for (size_t i = 0; i < n; i++) tx += tv[i].transfers;
  cr_expect_eq(tx, st.transfers);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(y);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  /* The trace shows the same copies. */
  char *text = slurp(trace);
  cr_assert_not_null(text);
  cr_expect_eq(count_in(text, "\"cat\":\"transfer\""), st.transfers);
  cr_expect_eq(count_in(text, "\"timing\":\"measured\""), st.transfers);
  cr_expect_geq(count_in(text, "\"name\":\"read opencl"), 1);
  char err[200];
  mzb_trace t;
  cr_expect_eq(mzb_trace_parse(text, strlen(text), &t, err, sizeof err), 0, "%s", err);
  mzb_trace_free(&t);
  free(text);
  remove(trace);
}

/* ---- the trace survives a crash after a run ---- */

Test(observe, trace_written_at_each_run_end) {
  char trace[64];
  snprintf(trace, sizeof trace, "/tmp/mz-abort-%d.json", (int)getpid());
  remove(trace);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    execl(MZ_TRACE_CHILD, MZ_TRACE_CHILD, trace, (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT, "the child should abort, status %d", ws);
  char *text = slurp(trace);
  cr_assert_not_null(text, "no trace at %s after the crash", trace);
  char err[200];
  mzb_trace t;
  cr_assert_eq(mzb_trace_parse(text, strlen(text), &t, err, sizeof err), 0, "not a valid trace: %s", err);
  cr_expect_eq(t.last_run, 2, "both runs are in the trace");
  cr_expect_eq(t.nslices, 4, "two nodes per run");
  cr_expect_eq(t.flow_unmatched, 0);
  mzb_trace_free(&t);
  free(text);
  remove(trace);
}

/* Three runtimes tracing to one path at the same time: the second and
 * third write "<name>-2.json" and "<name>-3.json" instead of interleaving
 * with the first. */
Test(observe, concurrent_runtimes_do_not_share_a_trace_file) {
  enum { R = 3 };
  char files[R][80];
  static const char *const names[R] = {"\"first\"", "\"second\"", "\"third\""};
  snprintf(files[0], sizeof files[0], "/tmp/mz-three-%d.json", (int)getpid());
  for (int i = 1; i < R; i++) snprintf(files[i], sizeof files[i], "/tmp/mz-three-%d-%d.json", (int)getpid(), i + 1);
  for (int i = 0; i < R; i++) remove(files[i]);
  mz_runtime *rt[R];
  mz_kernel *k[R];
  mz_buffer *b[R];
  mz_graph *g[R];
  for (int i = 0; i < R; i++) {
    MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true, .trace = files[0]}, &rt[i]));
    char kn[16];
    snprintf(kn, sizeof kn, "%.*s", (int)strlen(names[i]) - 2, names[i] + 1);
    k[i] = test_kernel(rt[i], kn, "inout f32[] y, u64 n = sizeof(y)", k_inc, NULL);
    b[i] = test_buffer_1d(rt[i], MZ_F32, 16, NULL);
    MZ_OK_OR_DIE(rt[i], mz_graph_create(rt[i], &g[i]));
  }
  /* Interleaved runs: each runtime appends after each of its runs. */
  for (int rep = 0; rep < 2; rep++)
    for (int i = 0; i < R; i++)
      cr_assert_eq(test_run(g[i], mz_apply(g[i], k[i], mz_value(g[i], b[i]), NULL), NULL, NULL), MZ_OK);
  for (int i = 0; i < R; i++) {
    mz_graph_destroy(g[i]);
    mz_buffer_release(b[i]);
    mz_kernel_destroy(k[i]);
    mz_runtime_destroy(rt[i]);
  }
  for (int i = 0; i < R; i++) {
    char *text = slurp(files[i]);
    cr_assert_not_null(text, "no trace at %s", files[i]);
    char err[200];
    mzb_trace t;
    cr_expect_eq(mzb_trace_parse(text, strlen(text), &t, err, sizeof err), 0, "%s: %s", files[i], err);
    cr_expect_eq(t.nslices, 2, "%s: two runs of one node", files[i]);
    mzb_trace_free(&t);
    for (int j = 0; j < R; j++)
      cr_expect_eq(count_in(text, names[j]), i == j ? 2 : 0, "%s: %zu nodes of runtime %d", files[i],
                   count_in(text, names[j]), j);
    free(text);
    remove(files[i]);
  }
}
