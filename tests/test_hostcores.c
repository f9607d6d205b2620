/* test_hostcores: devices that share the host's CPU cores
 * (mz_device_info.host_cores, mz_sched_device_host_cores).
 *
 * - The fact: 1 on the CPU device, 0 on a simulated class unless host=N
 *   says so, and policies read the same value as mz_device_get_info; bad
 *   host= values fail runtime creation with MZ_EINVAL.  (An OpenCL CPU
 *   device such as PoCL's is checked in test_opencl against the device
 *   type the OpenCL loader reports.)
 * - The simulator: a node of a class with host > 1 holds the host's cores,
 *   so it never overlaps a node of another host class, while the same
 *   platform without host= overlaps them.
 * - The policies: independent nodes on a platform whose "pocl" class ends
 *   each node first but holds both host cores (host=2) while the two
 *   "cpu" queues (host=1) do two nodes in the time of 1.7 of its own.
 *   heft, dmda and dmdas leave the pocl device idle (it would add no
 *   capacity, only copies), and end the run as soon as the cpu queues
 *   alone can; on the same platform without host=, where pocl is capacity
 *   of its own, they use it.  On a random DAG over such classes, no node
 *   ends after heft planned it (its gang slots match the simulator). */
#include <pthread.h>

#include "common.h"
#include <maize/observer.h>

TestSuite(hostcores, .timeout = 120);

static mz_runtime *rt_quiet(const char *devices) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  return test_runtime(devices);
}

/* ---- the fact, as the device and a policy see it ---- */

struct seen {
  unsigned n;
  unsigned cores[16];
  int kinds[16];
};

static struct seen the_seen; /* written by the policy's init (one test at a time) */

static int seen_init(const mz_sched *s, void **state) {
  *state = NULL;
  the_seen.n = mz_sched_device_count(s) < 16 ? mz_sched_device_count(s) : 16;
  for (unsigned d = 0; d < the_seen.n; d++) {
    the_seen.cores[d] = mz_sched_device_host_cores(s, d);
    the_seen.kinds[d] = mz_sched_device_kind(s, d);
  }
  /* Out of range: none. */
  if (mz_sched_device_host_cores(s, mz_sched_device_count(s)) != 0) return MZ_EINVAL;
  return MZ_OK;
}

static int seen_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state, (void)ready;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0;
}

static const struct mz_policy_ops seen_policy = {
    .abi = MZ_POLICY_ABI, .name = "seen", .init = seen_init, .select = seen_select};

static int k_nop(const mz_call *c) {
  (void)c;
  return 0;
}

/* The policy's view equals the devices' info; returns the runtime. */
static void check_view(mz_runtime *rt) {
  MZ_OK_OR_DIE(rt, mz_policy_register(rt, &seen_policy));
  mz_kernel *k = test_kernel(rt, "nop", "inout u8[] a", k_nop, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_U8, 16, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  memset(&the_seen, 0, sizeof the_seen);
  mz_op *op = mz_apply(g, k, mz_value(g, b), NULL);
  cr_assert_eq(test_run(g, op, "seen", NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_eq(the_seen.n, mz_runtime_device_count(rt));
  for (unsigned d = 0; d < the_seen.n; d++) {
    mz_device_info info;
    MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, d), &info));
    cr_assert_eq(the_seen.cores[d], info.host_cores, "device %u (%s): the policy sees %u, the info says %u", d, info.name,
                 the_seen.cores[d], info.host_cores);
    cr_assert_eq(the_seen.kinds[d], (int)info.kind);
  }
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
}

Test(hostcores, cpu_device_is_the_host) {
  mz_runtime *rt = rt_quiet("cpu:2");
  mz_device_info info;
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &info));
  cr_assert_eq(info.kind, MZ_DEVICE_CPU);
  cr_assert_eq(info.host_cores, 1, "a CPU worker keeps one core busy, got %u", info.host_cores);
  check_view(rt);
  mz_runtime_destroy(rt);
}

Test(hostcores, sim_classes_say_what_they_are_told) {
  mz_runtime *rt = rt_quiet("sim:c@queues=2,host=1;sim:p@host=4;sim:g*2");
  /* The host-only CPU worker, then c, p, g, g. */
  cr_assert_eq(mz_runtime_device_count(rt), 5);
  unsigned want[5] = {1, 1, 4, 0, 0};
  for (unsigned d = 0; d < 5; d++) {
    mz_device_info info;
    MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, d), &info));
    cr_assert_eq(info.host_cores, want[d], "device %u (%s): host_cores %u, want %u", d, info.name, info.host_cores,
                 want[d]);
  }
  check_view(rt);
  mz_runtime_destroy(rt);
  const char *bad[] = {"sim:p@host=-1", "sim:p@host=x", "sim:p@host=", "sim:p@host=2000", "sim:p@host=1.5"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    mz_runtime *r = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = bad[i], .quiet = true}, &r);
    cr_assert_eq(rc, MZ_EINVAL, "%s gave %s", bad[i], mz_err_name(rc));
    cr_assert_null(r);
  }
}

/* ---- independent nodes on a cpu-like and a pocl-like class ---- */

/* cpu: two queues on the host's cores, 1 GFLOP/s each, a fast link;
 * pocl: 2 GFLOP/s, a slow link (a node's 10 kB input takes 2 us to copy).
 * Each node: 10,000 flops (10 us on a cpu queue, 5 us on pocl + 2 us
 * copy).  Sixteen nodes: 80 us on the cpu queues alone; pocl ends each
 * node first but, holding both cores, does one node in the time the cpu
 * queues do 1.4. */
#define NODES 16
static const char *const shared_platform =
    "sim:cpu@queues=2,host=1,speed=1,link=1000G/s,lat=0;sim:pocl@host=2,speed=2,link=5G/s,lat=0";
static const char *const separate_platform =
    "sim:cpu@queues=2,speed=1,link=1000G/s,lat=0;sim:pocl@speed=2,link=5G/s,lat=0";

struct span {
  int queue;
  uint64_t start, end;
};

struct spans {
  pthread_mutex_t m;
  struct span v[64];
  unsigned n;
};

static void on_node(const mz_node_record *r, void *user) {
  struct spans *l = user;
  pthread_mutex_lock(&l->m);
  if (l->n < 64) l->v[l->n++] = (struct span){r->queue, r->start_ns, r->end_ns};
  pthread_mutex_unlock(&l->m);
}

static double arg0(const mz_call *c) { return c->args[0].f64; }

struct outcome {
  uint64_t makespan, busy_cpu, busy_pocl;
  bool overlap; /* a pocl node overlapped a cpu node */
};

static struct outcome run_independent(const char *devices, const char *policy) {
  mz_runtime *rt = rt_quiet(devices);
  struct spans l = {.n = 0};
  pthread_mutex_init(&l.m, NULL);
  mz_observer o = {.node = on_node, .user = &l};
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
  mz_kernel *k;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "work", .params = "f64 flops, in u8[] a, out u8[] o",
                                                          .cost = {.flops = arg0}},
                                    &k));
  mz_buffer *in[NODES], *out[NODES];
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ops[NODES];
  for (unsigned i = 0; i < NODES; i++) {
    in[i] = test_buffer_1d(rt, MZ_U8, 10000, NULL);
    out[i] = test_buffer_1d(rt, MZ_U8, 16, NULL);
    ops[i] = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f64(g, 1e4), mz_value(g, in[i]), mz_value(g, out[i])}), NULL);
  }
  mz_op *root = mz_join(g, NODES, ops);
  mz_future *f;
  cr_assert_eq(test_run(g, root, policy, &f), MZ_OK, "%s on %s: %s", policy, devices, mz_runtime_last_error(rt));
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  /* Devices: 0 the host-only CPU worker, 1 cpu (queues 1, 2), 2 pocl (queue 3). */
  struct outcome r = {st.virtual_ns, st.busy_ns[1], st.busy_ns[2], false};
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (unsigned i = 0; i < NODES; i++) {
    mz_buffer_release(in[i]);
    mz_buffer_release(out[i]);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt); /* every record delivered */
  cr_assert_eq(l.n, NODES, "%s on %s: %u node records", policy, devices, l.n);
  for (unsigned i = 0; i < l.n; i++)
    for (unsigned j = 0; j < l.n; j++)
      if (l.v[i].queue == 3 && (l.v[j].queue == 1 || l.v[j].queue == 2) && l.v[i].start < l.v[j].end &&
          l.v[j].start < l.v[i].end)
        r.overlap = true;
  pthread_mutex_destroy(&l.m);
  return r;
}

Test(hostcores, sim_holds_the_host_for_a_gang_node) {
  /* round-robin puts nodes on every queue, whatever they cost. */
  struct outcome sh = run_independent(shared_platform, "round-robin");
  cr_assert_gt(sh.busy_pocl, 0, "round-robin left pocl idle: nothing was checked");
  cr_assert(!sh.overlap, "a node of the device holding the host's cores overlapped a cpu node");
  struct outcome sep = run_independent(separate_platform, "round-robin");
  cr_assert(sep.overlap, "without host=, the devices run side by side");
  cr_assert_lt(sep.makespan, sh.makespan, "sharing the cores costs time (%llu vs %llu ns)",
               (unsigned long long)sep.makespan, (unsigned long long)sh.makespan);
}

Test(hostcores, cost_policies_add_no_capacity_that_shares_the_cores) {
  /* The cpu queues alone: 8 nodes each, 10 us apiece plus a 10 ns copy. */
  const uint64_t cpu_alone = 8 * (10000 + 10);
  const char *pols[] = {"heft", "dmda", "dmdas"};
  for (unsigned i = 0; i < 3; i++) {
    struct outcome sh = run_independent(shared_platform, pols[i]);
    cr_expect_eq(sh.busy_pocl, 0, "%s gave %llu ns of work to the device that shares the cpu's cores", pols[i],
                 (unsigned long long)sh.busy_pocl);
    cr_expect_leq(sh.makespan, cpu_alone, "%s: %llu ns, the cpu queues alone take %llu", pols[i],
                  (unsigned long long)sh.makespan, (unsigned long long)cpu_alone);
    /* Where pocl is capacity of its own, the same policy uses it. */
    struct outcome sep = run_independent(separate_platform, pols[i]);
    cr_expect_gt(sep.busy_pocl, 0, "%s left a separate pocl idle", pols[i]);
    cr_expect_lt(sep.makespan, cpu_alone, "%s: %llu ns with a separate pocl", pols[i], (unsigned long long)sep.makespan);
  }
}

/* heft's plan holds the host's cores as the simulator does: on a random
 * DAG over cpu-like and pocl-like classes (with copy engines, whose costs
 * the plan charges exactly), no node ends later than heft planned, and
 * the plan used the pocl device (so its gang slots were checked). */
#include <maize/daggen.h>

struct plan_log {
  pthread_mutex_t m;
  unsigned n, late, on_pocl;
  uint64_t worst; /* ns past the plan */
};

static void on_planned(const mz_node_record *r, void *user) {
  struct plan_log *l = user;
  pthread_mutex_lock(&l->m);
  l->n++;
  if (r->queue == 3) l->on_pocl++;
  if (r->end_ns > r->planned_end_ns + 100) {
    l->late++;
    if (r->end_ns - r->planned_end_ns > l->worst) l->worst = r->end_ns - r->planned_end_ns;
  }
  pthread_mutex_unlock(&l->m);
}

Test(hostcores, heft_plans_the_gang_as_it_runs) {
  const char *devices =
      "sim:cpu@queues=2,host=1,speed=1,link=2G/s,copy=1;sim:pocl@host=2,speed=4,link=1G/s,copy=1";
  mz_runtime *rt = rt_quiet(devices);
  struct plan_log l = {.n = 0};
  pthread_mutex_init(&l.m, NULL);
  mz_observer o = {.node = on_planned, .user = &l};
  MZ_OK_OR_DIE(rt, mz_runtime_set_observer(rt, &o));
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 200, .seed = 5, .ccr = 0.2, .flops = 1e5, .ref_speed = 2,
                     .ref_link = 1.5};
  mz_dag *d;
  MZ_OK_OR_DIE(rt, mz_dag_generate(rt, &p, &d));
  cr_assert_eq(test_run(d->g, d->root, "heft", NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  mz_dag_destroy(d);
  mz_runtime_destroy(rt);
  cr_assert_eq(l.n, 200);
  cr_expect_gt(l.on_pocl, 0, "heft gave the pocl device nothing: its gang slots were not checked");
  cr_expect_eq(l.late, 0, "%u nodes ended after heft planned (worst by %llu ns)", l.late, (unsigned long long)l.worst);
  pthread_mutex_destroy(&l.m);
}
