/* test_rerun: graphs built once and run many times (mz_graph_run), and the
 * three defects found with them.
 *
 * - 100 runs of one graph, with the input rewritten before each, under
 *   every registered policy in turn, checked against a serial reference
 *   that applies the same steps to plain arrays;
 * - a run that fails (a kernel refuses a negative input) followed by a run
 *   on good input that succeeds, and a run queued while the last one is in
 *   flight (it waits for it, so both runs' increments land);
 * - the same graph on simulated devices (every node runs each time), and
 *   re-placed on one device at a time with mz_graph_run_with;
 * - two threads that build on one graph and schedule its roots at the same
 *   time (a data race ThreadSanitizer reported in the builders);
 * - a reader left out of one run and scheduled after a later-built writer
 *   has run: refused with MZ_ESTATE, never a silent newer value;
 * - a later graph reading a buffer whose writer failed in an earlier, ended
 *   run is canceled instead of reading what the failure left;
 * - futures still alive at mz_runtime_destroy are freed (LeakSanitizer
 *   reports them in the sanitizer build);
 * - replayed runs (a root's run that reuses its last run's edges): one
 *   waits for another graph's writer in flight, and another graph's
 *   reader waits for a replayed writer; a host read waits for a replayed
 *   writer; a replay does not name another run's reader of its buffers; a
 *   buffer partitioned after replays;
 * - kernels of scalar parameters only, whose nodes' stored values are
 *   passed as they are on the workers' short path: each call sees its own
 *   values and zero shapes, on one and two workers;
 * - many replayed graphs of independent nodes in flight at once (more than
 *   the CPU device holds as arrays), and a replay started from a worker:
 *   every node runs once per run;
 * - replays of chains and stencils, whose sources run while the rest are
 *   reset: every node runs once per run, after the nodes it reads from,
 *   and a failure mid-graph cancels its descendants only;
 * - runs of overlapping roots of one graph whose futures go in turn (an
 *   ended run is kept while its tasks may name it): each node runs once
 *   per run that includes it;
 * - one graph re-run lean (its nodes keep no times), observed, timed,
 *   under a policy with plan and under a select-only policy that keeps a
 *   word per task, in turn: each run that reports times reports every
 *   node's, a lean one after them refuses timings, and the policy's word
 *   is zero at each run's start. */
#include <pthread.h>

#include "common.h"

TestSuite(rerun, .timeout = 180);

enum { N = 1024, CHAINS = 6, RUNS = 100 };

/* "in f32[] x, out f32[] t, f32 a, u64 n = sizeof(x)": t = a * x */
static int scale_fn(const mz_call *c) {
  const float *x = c->args[0].p;
  float *t = c->args[1].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) t[i] = c->args[2].f32 * x[i];
  return 0;
}

/* "in f32[] t, inout f32[] y, u64 n = sizeof(t)": y += t, refusing a
 * negative first element of t (the failure test). */
static int accum_fn(const mz_call *c) {
  const float *t = c->args[0].p;
  float *y = c->args[1].p;
  if (t[0] < 0) return MZ_EKERNEL;
  for (uint64_t i = 0; i < c->args[2].u64; i++) y[i] += t[i];
  return 0;
}

struct chains {
  mz_kernel *scale, *accum;
  mz_buffer *x[CHAINS], *t[CHAINS], *y[CHAINS];
  mz_graph *g;
  mz_op *root;
};

/* CHAINS independent chains scale -> accum, joined into one root. */
static void build_chains(mz_runtime *rt, struct chains *c) {
  c->scale = test_kernel(rt, "scale", "in f32[] x, out f32[] t, f32 a, u64 n = sizeof(x)", scale_fn, NULL);
  c->accum = test_kernel(rt, "accum", "in f32[] t, inout f32[] y, u64 n = sizeof(t)", accum_fn, NULL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &c->g));
  mz_op *ends[CHAINS];
  for (int k = 0; k < CHAINS; k++) {
    c->x[k] = test_buffer_1d(rt, MZ_F32, N, NULL);
    c->t[k] = test_buffer_1d(rt, MZ_F32, N, NULL);
    c->y[k] = test_buffer_1d(rt, MZ_F32, N, NULL);
    mz_op *s = mz_apply(c->g, c->scale,
                        mz_zip(c->g, 3, (mz_op *[]){mz_value(c->g, c->x[k]), mz_value(c->g, c->t[k]), mz_f32(c->g, 0.5f)}),
                        NULL);
    mz_op *a = mz_apply(c->g, c->accum, mz_zip(c->g, 2, (mz_op *[]){mz_unzip(c->g, s, 1), mz_value(c->g, c->y[k])}), NULL);
    ends[k] = mz_unzip(c->g, a, 1);
  }
  c->root = mz_join(c->g, CHAINS, ends);
  cr_assert_eq(mz_graph_status(c->g), MZ_OK, "%s", mz_graph_message(c->g));
}

static void free_chains(struct chains *c) {
  mz_graph_destroy(c->g);
  for (int k = 0; k < CHAINS; k++) {
    mz_buffer_release(c->x[k]);
    mz_buffer_release(c->t[k]);
    mz_buffer_release(c->y[k]);
  }
  mz_kernel_destroy(c->scale);
  mz_kernel_destroy(c->accum);
}

/* Run the chains RUNS times, rewriting x before each run, under policy
 * (NULL: cycling through the policies); every run checked against the serial reference (values
 * only where the devices compute: simulated ones model time, not data). */
static void run_many_under(mz_runtime *rt, struct chains *c, unsigned runs, bool values, const char *policy) {
  static float ref[CHAINS][N], x[N], got[N];
  memset(ref, 0, sizeof ref);
  for (int k = 0; k < CHAINS; k++) MZ_OK_OR_DIE(rt, mz_buffer_write(c->y[k], ref[k], sizeof ref[k]));
  unsigned npol = 0;
  while (mz_policy_name(rt, npol)) npol++;
  cr_assert_gt(npol, 0);
  for (unsigned r = 0; r < runs; r++) {
    for (int k = 0; k < CHAINS; k++) {
      for (int i = 0; i < N; i++) x[i] = (float)((r * 7 + (unsigned)k * 3 + (unsigned)i) % 13);
      MZ_OK_OR_DIE(rt, mz_buffer_write(c->x[k], x, sizeof x));
      for (int i = 0; i < N; i++) ref[k][i] += 0.5f * x[i];
    }
    const char *pol = policy ? policy : mz_policy_name(rt, r % npol);
    mz_future *f = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(c->g, c->root, pol, &f));
    int st = mz_future_wait(f);
    cr_assert_eq(st, MZ_OK, "run %u (%s): %s: %s", r, pol, mz_err_name(st), mz_future_message(f));
    mz_run_stats stats;
    MZ_OK_OR_DIE(rt, mz_future_stats(f, &stats));
    cr_assert_eq(stats.ops, 2 * CHAINS, "run %u (%s) ran %llu nodes, not %d", r, pol, (unsigned long long)stats.ops,
                 2 * CHAINS);
    mz_future_destroy(f);
    for (int k = 0; values && k < CHAINS; k++) {
      MZ_OK_OR_DIE(rt, mz_buffer_read(c->y[k], got, sizeof got));
      for (int i = 0; i < N; i++)
        cr_assert_float_eq(got[i], ref[k][i], 1e-3f, "run %u (%s), chain %d, y[%d] = %g, expected %g", r, pol, k, i,
                           (double)got[i], (double)ref[k][i]);
    }
  }
}

static void run_many(mz_runtime *rt, struct chains *c, unsigned runs, bool values) {
  run_many_under(rt, c, runs, values, NULL);
}

Test(rerun, hundred_runs_every_policy) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  run_many(rt, &c, RUNS, true);
  free_chains(&c);
  mz_runtime_destroy(rt);
}

Test(rerun, on_simulated_devices) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(
      &(mz_runtime_config){.devices = "sim:cpu*2@speed=1;sim:gpu*2@speed=10,mem=1G,link=8G/s", .quiet = true}, &rt);
  cr_assert_eq(rc, MZ_OK, "sim runtime: %s", mz_err_name(rc));
  struct chains c;
  build_chains(rt, &c);
  run_many(rt, &c, 12, false);
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* A re-run under heft, dmda or dmdas keeps its last run's plan while the
 * perf models' estimates stay where they were: on simulated devices,
 * whose times are exact, every run after the models have their first
 * samples restores the plan (no time spent planning).  single and
 * round-robin, whose plans read no estimate, keep theirs from the first
 * re-run on.  Under heft, single and round-robin (which fix every node's
 * queue) each node stays on its queue.  A run
 * under another planning policy, or on fewer devices, plans again, and so
 * does the first run back under the first policy; a run under a policy
 * without plan (eager) leaves the kept plan as it was. */
Test(rerun, planning_policies_keep_their_plan) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "sim:cpu*2@speed=1;sim:gpu*2@speed=10,mem=1G,link=8G/s",
                                                  .quiet = true, .timings = true},
                             &rt);
  cr_assert_eq(rc, MZ_OK, "sim runtime: %s", mz_err_name(rc));
  struct chains c;
  build_chains(rt, &c);
  const char *pols[] = {"heft", "dmda", "dmdas", "single", "round-robin", "heft"};
  enum { R = 8 };
  for (unsigned p = 0; p < sizeof pols / sizeof *pols; p++) {
    int queue[2 * CHAINS + 64] = {0};
    for (unsigned r = 0; r < R; r++) {
      mz_future *f = NULL;
      MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, pols[p], &f));
      int st = mz_future_wait(f);
      cr_assert_eq(st, MZ_OK, "%s run %u: %s: %s", pols[p], r, mz_err_name(st), mz_future_message(f));
      mz_run_stats stats;
      MZ_OK_OR_DIE(rt, mz_future_stats(f, &stats));
      cr_assert_eq(stats.ops, 2 * CHAINS);
      if (r == 0) cr_assert(!stats.plan_kept, "%s: the first run after another policy's plan kept a plan", pols[p]);
      /* Three samples give a bucket its estimate (one run here), which
       * moves the epoch once; from then on the estimates stand. */
      bool models = strcmp(pols[p], "single") && strcmp(pols[p], "round-robin"); /* its plan reads them */
      if (r >= (models ? 3 : 1)) cr_assert(stats.plan_kept, "%s run %u planned again with no estimate moved", pols[p], r);
      if (stats.plan_kept) cr_assert_eq(stats.plan_ns, 0, "%s run %u kept its plan but timed one", pols[p], r);
      else cr_assert_gt(stats.plan_ns, 0, "%s run %u planned in no time", pols[p], r);
      const mz_node_timing *tm = NULL;
      size_t n = 0;
      MZ_OK_OR_DIE(rt, mz_future_timings(f, &tm, &n));
      cr_assert_eq(n, 2 * CHAINS);
      for (size_t i = 0; i < n; i++) {
        cr_assert_lt(tm[i].node, sizeof queue / sizeof *queue);
        cr_assert_geq(tm[i].queue, 0);
        if (stats.plan_kept && strncmp(pols[p], "dmda", 4))
          cr_assert_eq(tm[i].queue, queue[tm[i].node], "%s run %u: node %u moved from queue %d to %d with the plan kept",
                       pols[p], r, tm[i].node, queue[tm[i].node], tm[i].queue);
        queue[tm[i].node] = tm[i].queue;
      }
      mz_future_destroy(f);
    }
  }
  /* A run without plan in between keeps heft's; one on fewer devices
   * plans again, and the run after it too (on every device). */
  const char *seq[] = {"eager", "heft", "heft", "heft"};
  bool kept[] = {false, true, false, false};
  unsigned devs[] = {1, 2, 3};
  for (unsigned k = 0; k < 4; k++) {
    mz_future *f = NULL;
    if (k == 2) MZ_OK_OR_DIE(rt, mz_graph_run_with(c.g, c.root, &(mz_run_options){.policy = "heft", .devices = devs, .ndevices = 3}, &f));
    else MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, seq[k], &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", seq[k], mz_future_message(f));
    mz_run_stats stats;
    MZ_OK_OR_DIE(rt, mz_future_stats(f, &stats));
    cr_assert_eq(stats.plan_kept, kept[k], "step %u (%s%s): plan_kept %d", k, seq[k], k == 2 ? " on 3 devices" : "",
                 stats.plan_kept);
    mz_future_destroy(f);
  }
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* Thirty re-runs under two planning policies on the CPU alone, with x
 * rewritten before each: such a run is shared among the workers, not
 * planned, and computes what the serial reference does.  (Kept plans with
 * values: test_opencl's cpu_only_nodes_beside_planned_device_nodes.) */
Test(rerun, planning_policies_on_the_cpu_alone_compute_what_the_serial_code_does) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  run_many_under(rt, &c, 30, true, "heft");
  run_many_under(rt, &c, 30, true, "dmdas");
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* The same built graph re-placed on one device at a time, then on all:
 * only the chosen devices are busy. */
Test(rerun, on_another_device_set) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(
      &(mz_runtime_config){.devices = "sim:cpu*2@speed=1;sim:gpu*2@speed=10,mem=1G,link=8G/s", .quiet = true}, &rt);
  cr_assert_eq(rc, MZ_OK, "sim runtime: %s", mz_err_name(rc));
  unsigned ndev = mz_runtime_device_count(rt);
  cr_assert_geq(ndev, 2);
  struct chains c;
  build_chains(rt, &c);
  /* Device 0 is the host CPU, which runs host work only when nothing but
   * simulated devices is named: no device of that run can run a kernel. */
  mz_future *f = NULL;
  unsigned host = 0;
  MZ_OK_OR_DIE(rt, mz_graph_run_with(c.g, c.root, &(mz_run_options){.devices = &host, .ndevices = 1}, &f));
  int st0 = mz_future_wait(f);
  cr_assert_eq(st0, MZ_ENODEV, "kernels on a host-only CPU: %s", mz_err_name(st0));
  mz_future_destroy(f);
  /* That failure left y unreadable: write it again before the next runs. */
  static float zero[N];
  for (int k = 0; k < CHAINS; k++) MZ_OK_OR_DIE(rt, mz_buffer_write(c.y[k], zero, sizeof zero));
  for (unsigned d = 1; d < ndev; d++) {
    for (unsigned p = 0; mz_policy_name(rt, p); p++) {
      const char *pol = mz_policy_name(rt, p);
      MZ_OK_OR_DIE(rt, mz_graph_run_with(c.g, c.root, &(mz_run_options){.policy = pol, .devices = &d, .ndevices = 1}, &f));
      int rs = mz_future_wait(f);
      cr_assert_eq(rs, MZ_OK, "device %u, %s: %s: %s", d, pol, mz_err_name(rs), mz_future_message(f));
      mz_run_stats st;
      MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
      cr_assert_eq(st.ops, 2 * CHAINS);
      for (unsigned e = 0; e < st.ndevices; e++)
        if (e != d) cr_assert_eq(st.busy_ns[e], 0, "device %u ran nodes of a run limited to device %u (%s)", e, d, pol);
      cr_assert_gt(st.busy_ns[d], 0, "device %u ran nothing (%s)", d, pol);
      mz_future_destroy(f);
    }
  }
  unsigned bad = ndev;
  rc = mz_graph_run_with(c.g, c.root, &(mz_run_options){.devices = &bad, .ndevices = 1}, &f);
  cr_assert_eq(rc, MZ_EINVAL, "device %u of %u: %s", bad, ndev, mz_err_name(rc));
  cr_assert_null(f);
  rc = mz_graph_run_with(c.g, c.root, &(mz_run_options){.devices = &bad, .ndevices = 0}, &f);
  cr_assert_eq(rc, MZ_EINVAL, "an empty device list: %s", mz_err_name(rc));
  MZ_OK_OR_DIE(rt, mz_graph_run_with(c.g, c.root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* One run is counted for a node that ran; a mz_schedule after runs of
 * mz_graph_run still runs nothing already run (one-shot meaning kept). */
Test(rerun, schedule_keeps_its_one_shot_meaning) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  run_many(rt, &c, 2, true);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(c.g, c.root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_assert_eq(st.ops, 0, "mz_schedule ran %llu nodes that had run", (unsigned long long)st.ops);
  mz_future_destroy(f);
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* y = 0 everywhere; x = 2 everywhere but chain bad (-1: its accum fails;
 * -1: none). */
static void set_inputs(mz_runtime *rt, struct chains *c, int bad) {
  static float badv[N], good[N], zero[N];
  for (int i = 0; i < N; i++) {
    badv[i] = -1.0f;
    good[i] = 2.0f;
  }
  for (int k = 0; k < CHAINS; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_write(c->y[k], zero, sizeof zero));
    MZ_OK_OR_DIE(rt, mz_buffer_write(c->x[k], k == bad ? badv : good, sizeof good));
  }
}

Test(rerun, after_a_failed_run) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  float good[N], zero[N] = {0}, got[N];
  for (int i = 0; i < N; i++) good[i] = 2.0f;
  set_inputs(rt, &c, 2);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, "eager", &f));
  cr_assert_eq(mz_future_wait(f), MZ_EKERNEL, "the run with a bad input: %s", mz_err_name(mz_future_status(f)));
  mz_future_destroy(f);
  cr_assert_eq(mz_buffer_read(c.y[2], got, sizeof got), MZ_EKERNEL, "a failed writer's buffer must not be readable");
  /* Good input everywhere: the same graph runs again and succeeds. */
  MZ_OK_OR_DIE(rt, mz_buffer_write(c.x[2], good, sizeof good));
  MZ_OK_OR_DIE(rt, mz_buffer_write(c.y[2], zero, sizeof zero));
  MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, "ws", &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_OK, "the run after the failure: %s: %s", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
  for (int k = 0; k < CHAINS; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_read(c.y[k], got, sizeof got));
    float want = k == 2 ? 1.0f : 2.0f; /* chains other than 2 ran twice */
    for (int i = 0; i < N; i++) cr_assert_float_eq(got[i], want, 1e-6f, "chain %d y[%d] = %g", k, i, (double)got[i]);
  }
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* A kernel that fails in a re-run of a graph that ran well before: its
 * nodes then take the workers' short path for re-runs (devices/cpu/cpu.c,
 * run_lean), which must fail the run as the first run's path does, and
 * leave the graph runnable. */
Test(rerun, failure_after_good_runs) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  float bad[N], good[N], zero[N] = {0}, got[N];
  for (int i = 0; i < N; i++) {
    bad[i] = -1.0f;
    good[i] = 2.0f;
  }
  set_inputs(rt, &c, -1);
  mz_future *f = NULL;
  for (int r = 0; r < 3; r++) {
    MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, "eager", &f));
    int st = mz_future_wait(f);
    cr_assert_eq(st, MZ_OK, "good run %d: %s: %s", r, mz_err_name(st), mz_future_message(f));
    mz_future_destroy(f);
  }
  MZ_OK_OR_DIE(rt, mz_buffer_write(c.x[4], bad, sizeof bad));
  MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, "eager", &f));
  cr_assert_eq(mz_future_wait(f), MZ_EKERNEL, "the re-run with a bad input: %s", mz_err_name(mz_future_status(f)));
  cr_assert(strstr(mz_future_message(f), "returned") != NULL, "the message says what failed: %s",
            mz_future_message(f));
  mz_future_destroy(f);
  cr_assert_eq(mz_buffer_read(c.y[4], got, sizeof got), MZ_EKERNEL, "a failed writer's buffer must not be readable");
  MZ_OK_OR_DIE(rt, mz_buffer_write(c.x[4], good, sizeof good));
  MZ_OK_OR_DIE(rt, mz_buffer_write(c.y[4], zero, sizeof zero));
  MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, "eager", &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_OK, "the run after the failure: %s: %s", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
  for (int k = 0; k < CHAINS; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_read(c.y[k], got, sizeof got));
    float want = k == 4 ? 1.0f : 5.0f; /* four good runs; chain 4 rewritten before the last */
    for (int i = 0; i < N; i++) cr_assert_float_eq(got[i], want, 1e-6f, "chain %d y[%d] = %g", k, i, (double)got[i]);
  }
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* Runs issued back to back without waiting: the second waits for the
 * first, and both accumulate. */
Test(rerun, back_to_back_without_waiting) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  float one[N], zero[N] = {0}, got[N];
  for (int i = 0; i < N; i++) one[i] = 2.0f;
  for (int k = 0; k < CHAINS; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_write(c.y[k], zero, sizeof zero));
    MZ_OK_OR_DIE(rt, mz_buffer_write(c.x[k], one, sizeof one));
  }
  enum { K = 20 };
  mz_future *f[K];
  for (int r = 0; r < K; r++) MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, NULL, &f[r]));
  for (int r = 0; r < K; r++) {
    cr_assert_eq(mz_future_wait(f[r]), MZ_OK, "run %d: %s", r, mz_future_message(f[r]));
    mz_future_destroy(f[r]);
  }
  for (int k = 0; k < CHAINS; k++) {
    MZ_OK_OR_DIE(rt, mz_buffer_read(c.y[k], got, sizeof got));
    for (int i = 0; i < N; i++) cr_assert_float_eq(got[i], (float)K, 1e-4f, "chain %d y[%d] = %g", k, i, (double)got[i]);
  }
  free_chains(&c);
  mz_runtime_destroy(rt);
}

/* A host task that re-runs its own graph would wait for itself. */
static mz_graph *self_graph;
static mz_op *self_root;
static _Atomic int self_rc;
static int rerun_self(const mz_call *c) {
  mz_future *f = NULL;
  atomic_store(&self_rc, mz_graph_run(self_graph, self_root, NULL, &f));
  mz_future_destroy(f);
  return 0;
}

Test(rerun, from_a_task_of_its_own_run_is_refused) {
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &self_graph));
  self_root = mz_host(self_graph, rerun_self, NULL, NULL);
  atomic_store(&self_rc, 1);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_run(self_graph, self_root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  mz_future_destroy(f);
  cr_assert_eq(atomic_load(&self_rc), MZ_EDEADLK, "mz_graph_run from its own run: %s", mz_err_name(atomic_load(&self_rc)));
  mz_graph_destroy(self_graph);
  mz_runtime_destroy(rt);
}

/* ---- two threads on one graph ---- */

struct builder {
  mz_runtime *rt;
  mz_graph *g;
  mz_kernel *scale;
  int id, failures;
};

static void *build_and_schedule(void *arg) {
  struct builder *b = arg;
  for (int i = 0; i < 40; i++) {
    float v[64];
    for (int j = 0; j < 64; j++) v[j] = (float)(b->id * 1000 + i);
    mz_buffer *x = NULL, *t = NULL;
    if (mz_buffer_create(b->rt, MZ_F32, 1, (size_t[]){64}, v, &x) ||
        mz_buffer_create(b->rt, MZ_F32, 1, (size_t[]){64}, NULL, &t)) {
      b->failures++;
      break;
    }
    mz_op *s = mz_apply(b->g, b->scale, mz_zip(b->g, 3, (mz_op *[]){mz_value(b->g, x), mz_value(b->g, t), mz_f32(b->g, 2.0f)}),
                        NULL);
    mz_future *f = NULL;
    if (mz_schedule(b->g, mz_unzip(b->g, s, 1), NULL, &f) || mz_future_wait(f)) b->failures++;
    mz_future_destroy(f);
    float got[64];
    if (mz_buffer_read(t, got, sizeof got) || got[5] != 2.0f * v[5]) b->failures++;
    mz_buffer_release(x);
    mz_buffer_release(t);
  }
  return NULL;
}

Test(rerun, two_threads_build_and_schedule_one_graph) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_kernel *scale = test_kernel(rt, "scale", "in f32[] x, out f32[] t, f32 a, u64 n = sizeof(x)", scale_fn, NULL);
  struct builder b[2] = {{rt, g, scale, 1, 0}, {rt, g, scale, 2, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, build_and_schedule, &b[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_assert_eq(b[0].failures + b[1].failures, 0, "failures: %d and %d", b[0].failures, b[1].failures);
  mz_graph_destroy(g);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

/* ---- a reader scheduled after a later writer ran ---- */

/* "out i32[] y, i32 v, u64 n = sizeof(y)" */
static int set_fn(const mz_call *c) {
  int32_t *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++) y[i] = c->args[1].i32;
  return 0;
}
/* "in i32[] y, out i32[] r, u64 n = sizeof(y)" */
static int copy_fn(const mz_call *c) {
  memcpy(c->args[1].p, c->args[0].p, c->args[2].u64 * sizeof(int32_t));
  return 0;
}

Test(rerun, reader_after_a_later_writer_ran_is_refused) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *set = test_kernel(rt, "set", "out i32[] y, i32 v, u64 n = sizeof(y)", set_fn, NULL);
  mz_kernel *copy = test_kernel(rt, "copy", "in i32[] y, out i32[] r, u64 n = sizeof(y)", copy_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 16, NULL), *r = test_buffer_1d(rt, MZ_I32, 16, NULL);
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *w1 = mz_apply(g, set, mz_zip(g, 2, (mz_op *[]){mz_value(g, b), mz_i32(g, 1)}), NULL);
  mz_op *rd = mz_apply(g, copy, mz_zip(g, 2, (mz_op *[]){mz_unzip(g, w1, 0), mz_value(g, r)}), NULL);
  mz_op *w2 = mz_apply(g, set, mz_zip(g, 2, (mz_op *[]){mz_value(g, b), mz_i32(g, 2)}), NULL);
  /* w2 alone: runs w1 (w2 writes after it) but not the reader. */
  cr_assert_eq(test_run(g, mz_unzip(g, w2, 0), NULL, NULL), MZ_OK);
  mz_future *f = NULL;
  int rc = mz_schedule(g, mz_unzip(g, rd, 1), NULL, &f);
  cr_assert_eq(rc, MZ_ESTATE, "the reader saw a newer value silently: %s", mz_err_name(rc));
  cr_assert_null(f);
  cr_assert(strstr(mz_runtime_last_error(rt), "built after it"), "message: %s", mz_runtime_last_error(rt));
  /* mz_graph_run runs the reader's whole part again, in build order: the
   * reader sees w1's value. */
  MZ_OK_OR_DIE(rt, mz_graph_run(g, mz_unzip(g, rd, 1), NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  int32_t got[16];
  MZ_OK_OR_DIE(rt, mz_buffer_read(r, got, sizeof got));
  for (int i = 0; i < 16; i++) cr_assert_eq(got[i], 1);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_buffer_release(r);
  mz_kernel_destroy(set);
  mz_kernel_destroy(copy);
  mz_runtime_destroy(rt);
}

/* ---- futures the user never destroyed ---- */

Test(rerun, futures_alive_at_destroy_are_freed) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct chains c;
  build_chains(rt, &c);
  mz_future *f[3];
  for (int i = 0; i < 3; i++) MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, NULL, &f[i]));
  cr_assert_eq(mz_future_wait(f[2]), MZ_OK);
  /* Neither the futures nor the graph, buffers and kernels are freed by
   * the test: mz_runtime_destroy frees them (LeakSanitizer checks). */
  mz_runtime_destroy(rt);
}

/* ---- a buffer left invalid by a failed writer of an earlier run ---- */

Test(rerun, later_graph_does_not_read_a_failed_writers_buffer) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *accum = test_kernel(rt, "accum", "in f32[] t, inout f32[] y, u64 n = sizeof(t)", accum_fn, NULL);
  mz_kernel *scale = test_kernel(rt, "scale", "in f32[] x, out f32[] t, f32 a, u64 n = sizeof(x)", scale_fn, NULL);
  float neg[N], zero[N] = {0};
  for (int i = 0; i < N; i++) neg[i] = -1.0f;
  mz_buffer *t = test_buffer_1d(rt, MZ_F32, N, neg), *y = test_buffer_1d(rt, MZ_F32, N, zero),
            *z = test_buffer_1d(rt, MZ_F32, N, zero);
  mz_graph *g1 = NULL, *g2 = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  mz_op *a = mz_apply(g1, accum, mz_zip(g1, 2, (mz_op *[]){mz_value(g1, t), mz_value(g1, y)}), NULL);
  cr_assert_eq(test_run(g1, mz_unzip(g1, a, 1), NULL, NULL), MZ_EKERNEL);
  /* The failed run is over: a later graph reading y has no edge to it. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_op *s = mz_apply(g2, scale, mz_zip(g2, 3, (mz_op *[]){mz_value(g2, y), mz_value(g2, z), mz_f32(g2, 1.0f)}), NULL);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_unzip(g2, s, 1), NULL, &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_ECANCELED, "reading a buffer whose writer failed: %s (%s)", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
  /* Written again, it is fine (into another buffer: z's last writer was
   * canceled, and a later writer of z follows it into the failure). */
  MZ_OK_OR_DIE(rt, mz_buffer_write(y, zero, sizeof zero));
  mz_buffer *z2 = test_buffer_1d(rt, MZ_F32, N, NULL);
  mz_op *s2 = mz_apply(g2, scale, mz_zip(g2, 3, (mz_op *[]){mz_value(g2, y), mz_value(g2, z2), mz_f32(g2, 1.0f)}), NULL);
  int st2 = test_run(g2, mz_unzip(g2, s2, 1), NULL, NULL);
  cr_assert_eq(st2, MZ_OK, "after mz_buffer_write: %s (%s)", mz_err_name(st2), mz_runtime_last_error(rt));
  mz_buffer_release(z2);
  mz_graph_destroy(g1);
  mz_graph_destroy(g2);
  mz_buffer_release(t);
  mz_buffer_release(y);
  mz_buffer_release(z);
  mz_kernel_destroy(accum);
  mz_kernel_destroy(scale);
  mz_runtime_destroy(rt);
}

/* Replayed runs.  A re-run of a root whose last run had no edge to
 * another run replays that run's edges instead of computing them again
 * (graph/lower.c): it must still wait for another graph's writer in
 * flight, and leave hazard records another graph's run waits on. */
enum { HB = 64 };

/* Host node on one f32 buffer: b += 1. */
static int bump_fn(const mz_call *c) {
  float *b = c->args[0].p;
  for (int i = 0; i < HB; i++) b[i] += 1.0f;
  return 0;
}

/* Host node on one f32 buffer: after 30 ms, b = 100 (a writer still in
 * flight when the next run is scheduled). */
static int slow_set_fn(const mz_call *c) {
  struct timespec ts = {0, 30 * 1000000L};
  nanosleep(&ts, NULL);
  float *b = c->args[0].p;
  for (int i = 0; i < HB; i++) b[i] = 100.0f;
  return 0;
}

/* Host node on one f32 buffer: after 30 ms, b += 1. */
static int slow_bump_fn(const mz_call *c) {
  struct timespec ts = {0, 30 * 1000000L};
  nanosleep(&ts, NULL);
  return bump_fn(c);
}

/* Host node on (b, c): c = b. */
static int copy_hb_fn(const mz_call *c) {
  memcpy(c->args[1].p, c->args[0].p, HB * sizeof(float));
  return 0;
}

static void expect_all(mz_runtime *rt, mz_buffer *b, float v, const char *what) {
  float got[HB];
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, got, sizeof got));
  for (int i = 0; i < HB; i++)
    cr_assert_float_eq(got[i], v, 1e-6f, "%s: [%d] = %g, expected %g", what, i, (double)got[i], (double)v);
}

/* c = b in a graph of its own, scheduled while f1's run may still write b
 * (it must wait for that run's last writer); then both runs are waited
 * for and f1 is destroyed. */
static void copy_while_in_flight(mz_runtime *rt, mz_buffer *b, mz_buffer *c, mz_future *f1) {
  mz_graph *g2 = NULL;
  mz_future *f2 = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_host(g2, copy_hb_fn, NULL, mz_zip(g2, 2, (mz_op *[]){mz_value(g2, b), mz_value(g2, c)})),
                               NULL, &f2));
  cr_assert_eq(mz_future_wait(f2), MZ_OK, "%s", mz_future_message(f2));
  cr_assert_eq(mz_future_wait(f1), MZ_OK, "%s", mz_future_message(f1));
  mz_future_destroy(f1);
  mz_future_destroy(f2);
  mz_graph_destroy(g2);
}

static void run_wait(mz_runtime *rt, mz_graph *g, mz_op *root) {
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_run(g, root, NULL, &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_OK, "%s: %s", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
}

Test(rerun, replayed_run_waits_for_another_graphs_writer) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0};
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, zero);
  mz_graph *g1 = NULL, *g2 = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_op *r1 = mz_host(g1, bump_fn, NULL, mz_value(g1, b));
  run_wait(rt, g1, r1);
  run_wait(rt, g1, r1); /* replays the first run's edges */
  expect_all(rt, b, 2.0f, "two runs");
  /* A slow writer of b in another graph, in flight; then the root again:
   * it must run after that writer. */
  mz_future *f2 = NULL, *f1 = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_host(g2, slow_set_fn, NULL, mz_value(g2, b)), NULL, &f2));
  MZ_OK_OR_DIE(rt, mz_graph_run(g1, r1, NULL, &f1));
  cr_assert_eq(mz_future_wait(f1), MZ_OK, "%s", mz_future_message(f1));
  cr_assert_eq(mz_future_wait(f2), MZ_OK, "%s", mz_future_message(f2));
  mz_future_destroy(f1);
  mz_future_destroy(f2);
  expect_all(rt, b, 101.0f, "the re-run after the other graph's writer");
  run_wait(rt, g1, r1);
  run_wait(rt, g1, r1);
  expect_all(rt, b, 103.0f, "two more runs");
  mz_graph_destroy(g1);
  mz_graph_destroy(g2);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(rerun, another_graph_waits_for_a_replayed_writer) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0};
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, zero), *c = test_buffer_1d(rt, MZ_F32, HB, zero);
  mz_graph *g1 = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  /* b += 1 after 30 ms, then b += 1: each run writes b twice. */
  mz_op *slow = mz_host(g1, slow_bump_fn, NULL, mz_value(g1, b));
  mz_op *r1 = mz_host(g1, bump_fn, NULL, slow);
  run_wait(rt, g1, r1);
  run_wait(rt, g1, r1);
  expect_all(rt, b, 4.0f, "two runs");
  for (int k = 0; k < 3; k++) {
    /* A replay in flight, and another graph reading b: it must wait for the
     * replay's last writer of b. */
    mz_future *f1 = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(g1, r1, NULL, &f1));
    copy_while_in_flight(rt, b, c, f1);
    expect_all(rt, c, 6.0f + 2.0f * (float)k, "the other graph's copy of b");
  }
  mz_graph_destroy(g1);
  mz_buffer_release(b);
  mz_buffer_release(c);
  mz_runtime_destroy(rt);
}

/* A replay in flight holds its buffers' hazards through their claims
 * (src/hazard.h): a host read of a buffer it writes waits for it. */
Test(rerun, host_read_waits_for_a_replayed_writer) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0};
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, zero);
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_host(g, slow_bump_fn, NULL, mz_value(g, b));
  for (int k = 1; k <= 4; k++) {
    mz_future *f = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(g, r, NULL, &f));
    expect_all(rt, b, (float)k, "a host read while the run is in flight");
    cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
    mz_future_destroy(f);
  }
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* Host node on (b, c): after 30 ms, c = b. */
static int slow_copy_fn(const mz_call *c) {
  struct timespec ts = {0, 30 * 1000000L};
  nanosleep(&ts, NULL);
  return copy_hb_fn(c);
}

/* A re-run that only reads a buffer, first run while another graph's
 * reader of it was in flight (its records then named that reader too: the
 * frozen records keep the run's own, since the other graph is gone before
 * the replays), then replayed while a third graph writes the buffer: the
 * writer waits for the replay's reader, which reads the old value. */
Test(rerun, another_runs_reader_is_not_replayed) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0}, seven[HB];
  for (int i = 0; i < HB; i++) seven[i] = 7.0f;
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, seven), *c = test_buffer_1d(rt, MZ_F32, HB, zero),
            *d = test_buffer_1d(rt, MZ_F32, HB, zero);
  mz_graph *ga = NULL, *gb = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &ga));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &gb));
  mz_future *fa = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(ga, mz_host(ga, slow_copy_fn, NULL, mz_zip(ga, 2, (mz_op *[]){mz_value(ga, b), mz_value(ga, c)})),
                               NULL, &fa));
  mz_op *rb = mz_host(gb, slow_copy_fn, NULL, mz_zip(gb, 2, (mz_op *[]){mz_value(gb, b), mz_value(gb, d)}));
  run_wait(rt, gb, rb); /* its records end with ga's reader of b still in flight */
  cr_assert_eq(mz_future_wait(fa), MZ_OK, "%s", mz_future_message(fa));
  mz_future_destroy(fa);
  mz_graph_destroy(ga);
  expect_all(rt, c, 7.0f, "the first graph's copy");
  for (int k = 0; k < 3; k++) {
    /* A replay in flight, and a writer of b in a third graph. */
    mz_graph *gc = NULL;
    mz_future *fb = NULL, *fc = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(gb, rb, NULL, &fb));
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &gc));
    MZ_OK_OR_DIE(rt, mz_schedule(gc, mz_host(gc, bump_fn, NULL, mz_value(gc, b)), NULL, &fc));
    cr_assert_eq(mz_future_wait(fc), MZ_OK, "%s", mz_future_message(fc));
    cr_assert_eq(mz_future_wait(fb), MZ_OK, "%s", mz_future_message(fb));
    mz_future_destroy(fb);
    mz_future_destroy(fc);
    mz_graph_destroy(gc);
    /* The writer waited for the replay's reader. */
    expect_all(rt, d, 7.0f + (float)k, "the replay's copy of b");
    expect_all(rt, b, 8.0f + (float)k, "b after the writer");
  }
  mz_graph_destroy(gb);
  mz_buffer_release(b);
  mz_buffer_release(c);
  mz_buffer_release(d);
  mz_runtime_destroy(rt);
}

/* Host node on a tile of an f32 buffer: t += 10. */
static int tile_add_fn(const mz_call *c) {
  float *t = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) t[i] += 10.0f;
  return 0;
}

/* A buffer claimed by a graph's replays (src/hazard.h) is partitioned by
 * another graph: the claim is broken, and the next runs of the first graph
 * see the tiles' writes. */
Test(rerun, partitioned_after_replays) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0};
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, zero);
  mz_graph *g1 = NULL, *g2 = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  mz_op *r1 = mz_host(g1, bump_fn, NULL, mz_value(g1, b));
  for (int k = 0; k < 3; k++) run_wait(rt, g1, r1);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_op *parts = mz_partition(g2, mz_value(g2, b), 2);
  mz_op *tiles[2];
  for (unsigned i = 0; i < 2; i++) tiles[i] = mz_host(g2, tile_add_fn, NULL, mz_unzip(g2, parts, i));
  mz_op *whole = mz_unpartition(g2, mz_zip(g2, 2, tiles));
  cr_assert_eq(mz_graph_status(g2), MZ_OK, "%s", mz_graph_message(g2));
  run_wait(rt, g2, whole);
  expect_all(rt, b, 13.0f, "three runs and the tiles' writes");
  for (int k = 0; k < 2; k++) run_wait(rt, g1, r1);
  expect_all(rt, b, 15.0f, "two more runs");
  mz_graph_destroy(g1);
  mz_graph_destroy(g2);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* A reader scheduled in another graph while a replay's last writer of b
 * may be ending at that very moment (on the lean end's path), hundreds of
 * times, the writer chain's length varied to sweep the timing.  The
 * schedule adds the reader to the writer's successors unless the writer
 * is DONE, and the writer's end reads its successors after publishing
 * DONE: a lost edge would show as the reader's copy of b taken too early,
 * or as a reader that never runs (a hang, which the suite's timeout
 * reports).  A temporary count showed the schedule adding such an edge to
 * a writer still in flight in more than half of the rounds. */
Test(rerun, reader_scheduled_while_a_lean_writer_ends) {
  mz_runtime *rt = test_runtime("cpu:2");
  float zero[HB] = {0};
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, HB, zero), *c = test_buffer_1d(rt, MZ_F32, HB, zero);
  enum { WCHAINS = 8, ROUNDS = 300 };
  mz_graph *g1[WCHAINS];
  mz_op *root[WCHAINS];
  for (int n = 0; n < WCHAINS; n++) { /* graph n: n + 1 writers of b in a chain */
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1[n]));
    mz_op *last = mz_value(g1[n], b);
    for (int i = 0; i <= n; i++) last = mz_host(g1[n], bump_fn, NULL, i ? last : mz_value(g1[n], b));
    root[n] = last;
  }
  float want = 0.0f;
  for (int k = 0; k < ROUNDS; k++) {
    int n = (k * 5) % WCHAINS;
    mz_future *f1 = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(g1[n], root[n], NULL, &f1));
    want += (float)(n + 1);
    copy_while_in_flight(rt, b, c, f1);
    float got[HB];
    MZ_OK_OR_DIE(rt, mz_buffer_read(c, got, sizeof got));
    for (int i = 0; i < HB; i++)
      cr_assert_float_eq(got[i], want, 1e-3f, "round %d: the reader copied %g, the writers had made %g", k,
                         (double)got[i], (double)want);
  }
  for (int n = 0; n < WCHAINS; n++) mz_graph_destroy(g1[n]);
  mz_buffer_release(b);
  mz_buffer_release(c);
  mz_runtime_destroy(rt);
}

static int count_fn(const mz_call *c) {
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

/* A root whose closure holds no value (a host node with no inputs, joined
 * with another): it has no leaves, and its later runs must still run. */
Test(rerun, root_without_values) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  _Atomic int ran = 0;
  mz_op *a = mz_host(g, count_fn, (void *)&ran, NULL), *b = mz_host(g, count_fn, (void *)&ran, NULL);
  mz_op *root = mz_join(g, 2, (mz_op *[]){a, b});
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  for (int k = 1; k <= 3; k++) {
    mz_future *f = NULL;
    int rc = mz_graph_run(g, root, NULL, &f);
    cr_assert_eq(rc, MZ_OK, "run %d: %s: %s", k, mz_err_name(rc), mz_runtime_last_error(rt));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "run %d: %s", k, mz_future_message(f));
    mz_future_destroy(f);
    cr_assert_eq(atomic_load(&ran), 2 * k, "after run %d the host nodes ran %d times", k, atomic_load(&ran));
  }
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* "i32 a, f64 b, u64 c": scalars only, which the worker passes as the
 * node's stored values, each with the zero shape.  Adds a + b + c to the
 * sum when every argument and shape is what the contract says. */
struct scalars_seen {
  _Atomic long sum;
  _Atomic int bad;
};
static int scalars_fn(const mz_call *c) {
  struct scalars_seen *s = c->user;
  bool ok = c->nargs == 3;
  for (unsigned i = 0; ok && i < 3; i++) ok = c->shapes[i].count == 0 && c->shapes[i].ndim == 0;
  if (!ok || c->args[1].f64 != 0.5) atomic_fetch_add(&s->bad, 1);
  atomic_fetch_add(&s->sum, (long)c->args[0].i32 + (long)c->args[2].u64);
  return 0;
}

/* A graph of kernels with scalar parameters only, first run and re-runs
 * (the workers' short path), on one and two workers: each node sees its
 * own values and zero shapes every time. */
Test(rerun, scalar_only_kernels_see_their_values) {
  for (int nw = 1; nw <= 2; nw++) {
    mz_runtime *rt = test_runtime(nw == 1 ? "cpu:1" : "cpu:2");
    struct scalars_seen seen = {0};
    mz_kernel *k = test_kernel(rt, "scalars", "i32 a, f64 b, u64 c", scalars_fn, &seen);
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    enum { NODES = 300 };
    mz_op *ops[NODES];
    long want = 0;
    for (int i = 0; i < NODES; i++) {
      mz_op *args = mz_zip(g, 3, (mz_op *[]){mz_i32(g, i), mz_f64(g, 0.5), mz_u64(g, 1000u * (unsigned)i)});
      ops[i] = mz_apply(g, k, args, NULL);
      want += i + 1000L * i;
    }
    mz_op *root = mz_join(g, NODES, ops);
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
    for (int r = 1; r <= 4; r++) {
      mz_future *f = NULL;
      MZ_OK_OR_DIE(rt, mz_graph_run(g, root, "eager", &f));
      cr_assert_eq(mz_future_wait(f), MZ_OK, "run %d: %s", r, mz_future_message(f));
      mz_future_destroy(f);
      cr_assert_eq(atomic_load(&seen.bad), 0, "%d worker(s), run %d: a call saw other arguments or shapes", nw, r);
      cr_assert_eq(atomic_load(&seen.sum), want * r, "%d worker(s), run %d: sum %ld, expected %ld", nw, r,
                   atomic_load(&seen.sum), want * r);
    }
    mz_graph_destroy(g);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* ---- replayed sources handed to the workers as arrays ---- */

enum { HG = 24, HN = 300 }; /* more graphs in flight than the CPU device's ring of arrays holds */
static _Atomic int hand_count[HG][HN];
static int hand_fn(const mz_call *c) {
  atomic_fetch_add(&hand_count[c->args[0].i32][c->args[1].i32], 1);
  return 0;
}

struct nested {
  mz_graph *g;
  mz_op *root;
  mz_future *f;
  _Atomic int rc;
};
/* A host node that starts another graph's replay from a worker (the
 * sources then go to that worker's slot and deque). */
static int start_other(const mz_call *c) {
  struct nested *n = c->user;
  atomic_store(&n->rc, mz_graph_run(n->g, n->root, "eager", &n->f));
  return 0;
}

/* A replay of g's root started by a host node of another graph (so from a
 * worker), to its end. */
static void replay_from_worker(mz_runtime *rt, mz_graph *g, mz_op *root) {
  struct nested n = {.g = g, .root = root, .rc = 1};
  mz_graph *hg = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &hg));
  mz_op *h = mz_host(hg, start_other, &n, NULL);
  mz_future *hf = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(hg, h, NULL, &hf));
  cr_assert_eq(mz_future_wait(hf), MZ_OK, "%s", mz_future_message(hf));
  mz_future_destroy(hf);
  cr_assert_eq(atomic_load(&n.rc), MZ_OK, "mz_graph_run from a worker: %s", mz_err_name(atomic_load(&n.rc)));
  cr_assert_eq(mz_future_wait(n.f), MZ_OK, "%s", mz_future_message(n.f));
  mz_future_destroy(n.f);
  mz_graph_destroy(hg);
}

/* Many replayed graphs of independent nodes in flight at once, on one and
 * two workers: each node runs exactly once per run, whether its graph's
 * array of sources sits in the workers' ring or, once the ring is full,
 * in their linked list; and a replay started from a worker runs all of
 * its nodes too. */
Test(rerun, replayed_sources_in_flight_at_once_each_run_once) {
  for (int nw = 1; nw <= 2; nw++) {
    memset(hand_count, 0, sizeof hand_count);
    mz_runtime *rt = test_runtime(nw == 1 ? "cpu:1" : "cpu:2");
    mz_kernel *k = test_kernel(rt, "count", "i32 g, i32 i", hand_fn, NULL);
    mz_graph *g[HG];
    mz_op *root[HG];
    for (int j = 0; j < HG; j++) {
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g[j]));
      mz_op *ops[HN];
      for (int i = 0; i < HN; i++) ops[i] = mz_apply(g[j], k, mz_zip(g[j], 2, (mz_op *[]){mz_i32(g[j], j), mz_i32(g[j], i)}), NULL);
      root[j] = mz_join(g[j], HN, ops);
      cr_assert_eq(mz_graph_status(g[j]), MZ_OK, "%s", mz_graph_message(g[j]));
    }
    for (int r = 1; r <= 5; r++) {
      mz_future *f[HG];
      for (int j = 0; j < HG; j++) MZ_OK_OR_DIE(rt, mz_graph_run(g[j], root[j], "eager", &f[j]));
      for (int j = 0; j < HG; j++) {
        cr_assert_eq(mz_future_wait(f[j]), MZ_OK, "graph %d, run %d: %s", j, r, mz_future_message(f[j]));
        mz_future_destroy(f[j]);
      }
      for (int j = 0; j < HG; j++)
        for (int i = 0; i < HN; i++)
          cr_assert_eq(atomic_load(&hand_count[j][i]), r, "%d worker(s), run %d: node %d of graph %d ran %d times", nw, r,
                       i, j, atomic_load(&hand_count[j][i]));
    }
    /* Graph 0's replay, started by a host node of another graph. */
    replay_from_worker(rt, g[0], root[0]);
    for (int i = 0; i < HN; i++) cr_assert_eq(atomic_load(&hand_count[0][i]), 6, "node %d of graph 0 ran %d times", i, atomic_load(&hand_count[0][i]));
    for (int j = 0; j < HG; j++) mz_graph_destroy(g[j]);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* Runs of overlapping parts of one graph, their futures destroyed in
 * turn: an ended run whose tasks no later run took over is kept for them
 * (parked in the graph) until the next one ends or the graph goes; every
 * node runs once per run that includes it, whatever run its task last
 * named (run under ASan and valgrind in CI, which see a task naming
 * freed memory). */
Test(rerun, overlapping_roots_run_after_their_futures_go) {
  memset(hand_count, 0, sizeof hand_count);
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "count", "i32 g, i32 i", hand_fn, NULL);
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  enum { PART = 40 };
  mz_op *ops[3 * PART];
  for (int i = 0; i < 3 * PART; i++) ops[i] = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i32(g, 0), mz_i32(g, i)}), NULL);
  /* Roots: the first part, the second, the first two, all three. */
  mz_op *root[4] = {mz_join(g, PART, ops), mz_join(g, PART, ops + PART), mz_join(g, 2 * PART, ops),
                    mz_join(g, 3 * PART, ops)};
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  static const int order[] = {0, 1, 0, 2, 3, 1, 1, 3, 0, 2, 2, 1};
  int want[3 * PART] = {0};
  for (size_t s = 0; s < sizeof order / sizeof order[0]; s++) {
    int j = order[s], lo = j == 1 ? PART : 0, hi = j == 0 ? PART : j == 1 ? 2 * PART : j == 2 ? 2 * PART : 3 * PART;
    mz_future *f = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(g, root[j], "eager", &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "step %zu: %s", s, mz_future_message(f));
    mz_future_destroy(f);
    for (int i = lo; i < hi; i++) want[i]++;
    for (int i = 0; i < 3 * PART; i++)
      cr_assert_eq(atomic_load(&hand_count[0][i]), want[i], "step %zu (root %d): node %d ran %d times, expected %d", s, j,
                   i, atomic_load(&hand_count[0][i]), want[i]);
  }
  /* The graph goes with a run parked in it; then a graph destroyed while
   * a future of it is still alive parks that run in a graph that is going. */
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *one = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i32(g, 1), mz_i32(g, 0)}), NULL);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_run(g, one, "eager", &f));
  mz_graph_destroy(g);
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  cr_assert_eq(atomic_load(&hand_count[1][0]), 1);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- replays of independent work handed over while they are reset ---- */

enum { EG = 8, EN = 1500 }; /* pieces of 256: about 6 a run, 48 in flight, past the workers' ring of 16 */
static _Atomic int early_count[EG][EN];
static _Atomic int early_fail_at; /* node i * EG + g fails in the run it names: -1 none */
static _Atomic int early_run;
static int early_fn(const mz_call *c) {
  int g = c->args[0].i32, i = c->args[1].i32;
  atomic_fetch_add(&early_count[g][i], 1);
  return atomic_load(&early_fail_at) == i * EG + g && atomic_load(&early_run) == c->args[2].i32 ? 7 : 0;
}

/* A replay whose tasks are all sources hands the first of them to the
 * workers while it resets the rest: every node still runs exactly once per
 * run, with 1 and 2 workers, with many such replays in flight at once
 * (their pieces fill the workers' ring), with the last run's future still
 * alive when the next starts, with a node failing in an early piece (the
 * run fails, every other node still runs, and the next run is whole), and
 * for a replay started from a worker. */
Test(rerun, independent_replays_start_while_being_reset) {
  for (int nw = 1; nw <= 2; nw++) {
    memset(early_count, 0, sizeof early_count);
    atomic_store(&early_fail_at, -1);
    mz_runtime *rt = test_runtime(nw == 1 ? "cpu:1" : "cpu:2");
    mz_kernel *k = test_kernel(rt, "early", "i32 g, i32 i, i32 fail_run", early_fn, NULL);
    mz_graph *g[EG];
    mz_op *root[EG];
    for (int j = 0; j < EG; j++) {
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g[j]));
      static mz_op *ops[EN];
      for (int i = 0; i < EN; i++)
        ops[i] = mz_apply(g[j], k, mz_zip(g[j], 3, (mz_op *[]){mz_i32(g[j], j), mz_i32(g[j], i), mz_i32(g[j], 3)}), NULL);
      root[j] = mz_join(g[j], EN, ops);
      cr_assert_eq(mz_graph_status(g[j]), MZ_OK, "%s", mz_graph_message(g[j]));
    }
    mz_future *prev[EG] = {0};
    for (int r = 1; r <= 6; r++) {
      atomic_store(&early_run, r);
      /* Run 3: node 10 of graph 5 (in the first piece) fails. */
      atomic_store(&early_fail_at, r == 3 ? 10 * EG + 5 : -1);
      mz_future *f[EG];
      for (int j = 0; j < EG; j++) MZ_OK_OR_DIE(rt, mz_graph_run(g[j], root[j], "eager", &f[j]));
      for (int j = 0; j < EG; j++) {
        int st = mz_future_wait(f[j]);
        if (r == 3 && j == 5) cr_assert_eq(st, MZ_EKERNEL, "run %d: the failing node's run ended %s", r, mz_err_name(st));
        else cr_assert_eq(st, MZ_OK, "graph %d, run %d: %s", j, r, mz_future_message(f[j]));
        /* Odd runs keep their futures until the next run has ended. */
        if (prev[j]) mz_future_destroy(prev[j]);
        prev[j] = NULL;
        if (r % 2) prev[j] = f[j];
        else mz_future_destroy(f[j]);
      }
      for (int j = 0; j < EG; j++)
        for (int i = 0; i < EN; i++)
          cr_assert_eq(atomic_load(&early_count[j][i]), r, "%d worker(s), run %d: node %d of graph %d ran %d times", nw, r,
                       i, j, atomic_load(&early_count[j][i]));
    }
    for (int j = 0; j < EG; j++)
      if (prev[j]) mz_future_destroy(prev[j]);
    /* Graph 0's replay, started by a host node of another graph. */
    replay_from_worker(rt, g[0], root[0]);
    for (int i = 0; i < EN; i++)
      cr_assert_eq(atomic_load(&early_count[0][i]), 7, "node %d of graph 0 ran %d times", i, atomic_load(&early_count[0][i]));
    for (int j = 0; j < EG; j++) mz_graph_destroy(g[j]);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* ---- replays of dependent work run while they are reset ---- */

enum { LG = 6, LT = 600, LW = 4 }; /* graphs in flight; a stencil's steps and widest row */
static _Atomic int lag_ran[LG][LT * LW]; /* the run each task last ran in */
static _Atomic int lag_bad;              /* tasks that found a predecessor not run yet in their run */
static _Atomic int lag_run, lag_fail_at; /* the run number; task t * LW + j of graph 1 fails in run 3 */
/* "i32 g, i32 i, i32 w, in u8[] a, inout u8[] b, in u8[] c": task i of a
 * stencil of width w (a chain when w is 1) checks that the tasks of the
 * step before whose columns it reads ran in this run, and notes its own. */
static int lag_fn(const mz_call *c) {
  int g = c->args[0].i32, i = c->args[1].i32, w = c->args[2].i32;
  int t = i / w, j = i % w, r = atomic_load(&lag_run);
  for (int d = -1; t > 0 && d <= 1; d++)
    if (j + d >= 0 && j + d < w && atomic_load(&lag_ran[g][(t - 1) * w + j + d]) != r) atomic_fetch_add(&lag_bad, 1);
  atomic_store(&lag_ran[g][i], r);
  ((unsigned char *)c->args[4].p)[0]++;
  return g == 1 && r == 3 && i == atomic_load(&lag_fail_at) ? 7 : 0;
}

/* A replay of work that is not all sources (chains, stencils) hands its
 * sources to the workers while it resets the rest, and a task's end waits
 * for a successor not reset yet: every task runs once per run and after
 * the tasks it reads from, with 1 and 2 workers, many such replays in
 * flight at once, the last run's future alive when the next starts, a
 * task failing mid-graph in one run (its run fails, its descendants are
 * canceled, the next run is whole), and a replay started from a worker. */
Test(rerun, dependent_replays_run_while_being_reset) {
  for (int nw = 1; nw <= 2; nw++) {
    memset(lag_ran, 0, sizeof lag_ran);
    atomic_store(&lag_bad, 0);
    mz_runtime *rt = test_runtime(nw == 1 ? "cpu:1" : "cpu:2");
    mz_kernel *k = test_kernel(rt, "lag", "i32 g, i32 i, i32 w, in u8[] a, inout u8[] b, in u8[] c", lag_fn, NULL);
    mz_graph *g[LG];
    mz_op *root[LG];
    int width[LG];
    mz_buffer *col[LG][LW], *edge[LG];
    for (int m = 0; m < LG; m++) {
      width[m] = m % 2 ? LW : 1; /* chains and stencils in turn */
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g[m]));
      edge[m] = test_buffer_1d(rt, MZ_U8, 1, NULL);
      for (int j = 0; j < width[m]; j++) col[m][j] = test_buffer_1d(rt, MZ_U8, 1, NULL);
      mz_op *last[LW];
      for (int t = 0; t < LT; t++)
        for (int j = 0; j < width[m]; j++) {
          mz_buffer *a = j > 0 ? col[m][j - 1] : edge[m], *c = j + 1 < width[m] ? col[m][j + 1] : edge[m];
          mz_op *args[6] = {mz_i32(g[m], m), mz_i32(g[m], t * width[m] + j), mz_i32(g[m], width[m]), mz_value(g[m], a),
                            mz_value(g[m], col[m][j]), mz_value(g[m], c)};
          last[j] = mz_apply(g[m], k, mz_zip(g[m], 6, args), NULL);
        }
      root[m] = mz_join(g[m], (unsigned)width[m], last);
      cr_assert_eq(mz_graph_status(g[m]), MZ_OK, "%s", mz_graph_message(g[m]));
    }
    /* Graph 1 (a stencil) fails at step 5, column 2 in run 3. */
    atomic_store(&lag_fail_at, 5 * LW + 2);
    mz_future *prev[LG] = {0};
    for (int r = 1; r <= 6; r++) {
      atomic_store(&lag_run, r);
      mz_future *f[LG];
      for (int m = 0; m < LG; m++) MZ_OK_OR_DIE(rt, mz_graph_run(g[m], root[m], "eager", &f[m]));
      for (int m = 0; m < LG; m++) {
        int st = mz_future_wait(f[m]);
        bool fails = r == 3 && m == 1;
        cr_assert_eq(st, fails ? MZ_EKERNEL : MZ_OK, "%d worker(s), graph %d, run %d: %s: %s", nw, m, r, mz_err_name(st),
                     mz_future_message(f[m]));
        if (prev[m]) mz_future_destroy(prev[m]);
        prev[m] = NULL;
        if (r % 2) prev[m] = f[m];
        else mz_future_destroy(f[m]);
        /* The failure poisoned what its task wrote: written again, so that
         * the next run's readers are not canceled. */
        for (int j = 0; fails && j < width[m]; j++) MZ_OK_OR_DIE(rt, mz_buffer_write(col[m][j], &(unsigned char){0}, 1));
        int n = LT * width[m];
        for (int i = 0; i < n; i++) {
          int ran = atomic_load(&lag_ran[m][i]), t = i / width[m];
          if (!fails) cr_assert_eq(ran, r, "%d worker(s), run %d: task %d of graph %d last ran in run %d", nw, r, i, m, ran);
          else if (t < 5 || i == 5 * LW + 2) cr_assert_eq(ran, r, "run %d: task %d, before or at the failure, last ran in run %d", r, i, ran);
          else if (t >= 8) cr_assert_lt(ran, r, "run %d: task %d, after the failure, ran", r, i);
        }
      }
      cr_assert_eq(atomic_load(&lag_bad), 0, "%d worker(s), run %d: %d tasks ran before a task they read from", nw, r,
                   atomic_load(&lag_bad));
    }
    for (int m = 0; m < LG; m++)
      if (prev[m]) mz_future_destroy(prev[m]);
    /* Graph 0's replay (a chain), started by a host node of another graph. */
    atomic_store(&lag_run, 7);
    replay_from_worker(rt, g[0], root[0]);
    for (int i = 0; i < LT; i++) cr_assert_eq(atomic_load(&lag_ran[0][i]), 7, "task %d of graph 0: run %d", i, atomic_load(&lag_ran[0][i]));
    cr_assert_eq(atomic_load(&lag_bad), 0);
    /* Each chain's buffer counts its tasks' runs: 7 runs of LT. */
    unsigned char v = 0;
    MZ_OK_OR_DIE(rt, mz_buffer_read(col[0][0], &v, 1));
    cr_assert_eq(v, (unsigned char)(7 * LT), "graph 0's chain counted %u, not %u", v, (unsigned char)(7 * LT));
    for (int m = 0; m < LG; m++) {
      mz_graph_destroy(g[m]);
      mz_buffer_release(edge[m]);
      for (int j = 0; j < width[m]; j++) mz_buffer_release(col[m][j]);
    }
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* ---- exec records: made only for the runs that read them ---- */

struct rec_seen {
  _Atomic unsigned nodes, timed, bad;
};
static void rec_node(const mz_node_record *n, void *user) {
  struct rec_seen *s = user;
  atomic_fetch_add(&s->nodes, 1);
  if (n->status != MZ_OK) atomic_fetch_add(&s->bad, 1);
  if (n->end_ns && n->start_ns && n->end_ns >= n->start_ns) atomic_fetch_add(&s->timed, 1);
}

/* A select-only policy that keeps a word per task (mz_task_policy_data):
 * in a run without exec records the word is the task's cold record's.  It
 * must be zero the first time a run asks, and keep what was written while
 * the run lasts. */
static _Atomic unsigned word_bad, word_asked;
static int word_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state, (void)ready;
  uintptr_t *w = mz_task_policy_data(t);
  atomic_fetch_add(&word_asked, 1);
  if (*w != 0 && *w != 0x5a5a) atomic_fetch_add(&word_bad, 1);
  *w = 0x5a5a;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0;
}
static const struct mz_policy_ops word_policy = {
    .abi = MZ_POLICY_ABI, .name = "word", .description = "test: a word per task at select", .select = word_select};

Test(rerun, records_follow_what_each_run_wants) {
  mz_runtime *rt = test_runtime("cpu:2");
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &word_policy));
  struct chains c;
  build_chains(rt, &c);
  static float ref[CHAINS][N], x[N], got[N];
  memset(ref, 0, sizeof ref);
  for (int k = 0; k < CHAINS; k++) MZ_OK_OR_DIE(rt, mz_buffer_write(c.y[k], ref[k], sizeof ref[k]));
  /* Lean, lean, observed, lean, heft (plan: records), lean, word
   * (select-only), observed under heft, lean, observed, lean. */
  static const struct {
    const char *policy;
    bool observe;
  } runs[] = {{"eager", false}, {"eager", false}, {"eager", true},  {"eager", false},
              {"heft", false},  {"eager", false}, {"word", false},  {"word", false},
              {"heft", true},   {"ws", false},    {"eager", true},  {"eager", false}};
  for (unsigned r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    struct rec_seen seen = {0};
    mz_observer obs = {.node = rec_node, .user = &seen};
    MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, runs[r].observe ? &obs : NULL));
    for (int k = 0; k < CHAINS; k++) {
      for (int i = 0; i < N; i++) x[i] = (float)((r * 5 + (unsigned)k + (unsigned)i) % 11);
      MZ_OK_OR_DIE(rt, mz_buffer_write(c.x[k], x, sizeof x));
      for (int i = 0; i < N; i++) ref[k][i] += 0.5f * x[i];
    }
    unsigned asked0 = atomic_load(&word_asked);
    mz_future *f = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_run(c.g, c.root, runs[r].policy, &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK, "run %u (%s): %s", r, runs[r].policy, mz_future_message(f));
    const mz_node_timing *tm = NULL;
    size_t n = 0;
    int trc = mz_future_timings(f, &tm, &n);
    if (runs[r].observe) {
      cr_assert_eq(atomic_load(&seen.nodes), 2 * CHAINS, "run %u: %u nodes reported", r, atomic_load(&seen.nodes));
      cr_assert_eq(atomic_load(&seen.timed), 2 * CHAINS, "run %u: %u of %d nodes reported with times", r,
                   atomic_load(&seen.timed), 2 * CHAINS);
      cr_assert_eq(atomic_load(&seen.bad), 0);
      cr_assert_eq(trc, MZ_OK, "run %u: timings: %s", r, mz_err_name(trc));
      cr_assert_eq(n, 2 * CHAINS);
      for (size_t i = 0; i < n; i++)
        cr_assert(tm[i].end_ns >= tm[i].start_ns && tm[i].end_ns > 0, "run %u, node %u: times %llu..%llu", r,
                  tm[i].node, (unsigned long long)tm[i].start_ns, (unsigned long long)tm[i].end_ns);
    } else {
      cr_assert_eq(trc, MZ_ESTATE, "run %u (%s, not timed): timings gave %s", r, runs[r].policy, mz_err_name(trc));
    }
    if (!strcmp(runs[r].policy, "word"))
      cr_assert_geq(atomic_load(&word_asked) - asked0, 2 * CHAINS, "run %u: the policy was asked %u times", r,
                    atomic_load(&word_asked) - asked0);
    cr_assert_eq(atomic_load(&word_bad), 0, "run %u: a policy word was not zero at the run's start", r);
    mz_future_destroy(f);
    for (int k = 0; k < CHAINS; k++) {
      MZ_OK_OR_DIE(rt, mz_buffer_read(c.y[k], got, sizeof got));
      for (int i = 0; i < N; i++)
        cr_assert_float_eq(got[i], ref[k][i], 1e-3f, "run %u (%s), chain %d, y[%d] = %g, expected %g", r,
                           runs[r].policy, k, i, (double)got[i], (double)ref[k][i]);
    }
  }
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, NULL));
  free_chains(&c);
  mz_runtime_destroy(rt);
}
