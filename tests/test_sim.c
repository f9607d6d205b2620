/* Simulated devices: the MZ_DEVICES grammar, deterministic
 * virtual-time runs whose makespan under each policy equals a value
 * computed by hand, cost-based policies on a platform with one device 10x
 * faster, ws balancing equal devices and reading CPU distances from hwloc,
 * and the DAG generators. */
#include <criterion/criterion.h>
#include <hwloc.h>
#include <math.h>
#include <maize.h>
#include <maize/daggen.h>
#include <maize/policy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every test has a deadline: one that hangs is reported by name
 * as timed out instead of blocking the suite (a test may set its own). */
TestSuite(sim, .timeout = 120);

#define OK(rt, call)                                                                                 \
  do {                                                                                               \
    int rc_ = (call);                                                                                \
    cr_assert_eq(rc_, MZ_OK, "%s: %s (%s)", #call, mz_err_name(rc_), mz_runtime_last_error(rt));     \
  } while (0)

static mz_runtime *sim_runtime(const char *devices) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  return rt;
}

static double arg0(const mz_call *c) { return c->args[0].f64; }

static mz_kernel *cost_kernel(mz_runtime *rt, const char *name, const char *params) {
  mz_kernel *k;
  OK(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = name, .params = params, .cost = {.flops = arg0}}, &k));
  return k;
}

Test(sim, grammar) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  mz_runtime *rt = sim_runtime("sim:gpu*4@speed=20,mem=16G,link=12G/s;sim:cpu*8");
  /* The host-only CPU worker, then 4 + 8 simulated devices. */
  cr_assert_eq(mz_runtime_device_count(rt), 13);
  mz_device_info info;
  OK(rt, mz_device_get_info(mz_runtime_device(rt, 1), &info));
  cr_assert_eq(info.kind, MZ_DEVICE_SIM);
  cr_assert_str_eq(info.name, "sim-gpu");
  cr_assert_eq(info.memory, 16ull << 30);
  OK(rt, mz_device_get_info(mz_runtime_device(rt, 12), &info));
  cr_assert_str_eq(info.name, "sim-cpu");
  mz_runtime_destroy(rt);
  /* Malformed items fail creation with MZ_EINVAL; "all" adds no sim device. */
  const char *bad[] = {"sim:gpu*0", "sim:gpu@speed=-1", "sim:gpu@color=red", "sim:g*2@speed=1;sim:g@speed=2",
                       "sim:@speed=1", "sim:x@lat=5parsecs"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = bad[i], .quiet = true}, &rt);
    cr_assert_eq(rc, MZ_EINVAL, "%s gave %s", bad[i], mz_err_name(rc));
  }
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1,all", .quiet = true}, &rt));
  for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) {
    OK(rt, mz_device_get_info(mz_runtime_device(rt, d), &info));
    cr_assert_neq(info.kind, MZ_DEVICE_SIM);
  }
  mz_runtime_destroy(rt);
}

/* The hand-checked platform and graph.
 *
 * Platform: queue 0 is the host-only CPU worker (runs no kernel), queue 1
 * the device "fast" (10 GFLOP/s), queue 2 the device "slow" (5 GFLOP/s).
 * Links: 10 GB/s = 10 bytes/ns, no latency, so a 1000-byte buffer moves in
 * 100 ns, between the two devices too (the slower link, the larger
 * latency).  Every node costs 10,000 flops: 1000 ns on fast, 2000 ns on
 * slow.
 *
 * Graph (1000-byte u8 buffers, built in this order):
 *   A: out a            B: in a, out b     C: in a, out c     E: in a, out e
 *   D: in b, in c, in e, out d
 * so A forks to B, C, E, which join in D.  Writes need no transfer (out),
 * and a device reads what it lacks from where the valid copy is.
 *
 * The core places a node when its predecessors are queued and, when they
 * finish on another queue, submits it only once they are done (host
 * wait); its work list is a stack, so A's successors are considered in
 * the order E, C, B.  Submitting to a queue starts the node at
 * max(queue free, now) + its transfers. */
static const char *const hand_platform = "sim:fast*1@speed=10,link=10G/s,lat=0;sim:slow*1@speed=5,link=10G/s,lat=0";

static uint64_t run_hand(const char *policy, uint64_t *busy_fast, uint64_t *busy_slow) {
  mz_runtime *rt = sim_runtime(hand_platform);
  mz_kernel *k0 = cost_kernel(rt, "k0", "f64 flops, out u8[] o");
  mz_kernel *k1 = cost_kernel(rt, "k1", "f64 flops, in u8[] a, out u8[] o");
  mz_kernel *k3 = cost_kernel(rt, "k3", "f64 flops, in u8[] a, in u8[] b, in u8[] c, out u8[] o");
  mz_buffer *a, *b, *c, *e, *d;
  size_t n[1] = {1000};
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &a));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &b));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &c));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &e));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, n, NULL, &d));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *fl = mz_f64(g, 1e4);
  mz_apply(g, k0, mz_zip(g, 2, (mz_op *[]){fl, mz_value(g, a)}), NULL);
  mz_apply(g, k1, mz_zip(g, 3, (mz_op *[]){fl, mz_value(g, a), mz_value(g, b)}), NULL);
  mz_apply(g, k1, mz_zip(g, 3, (mz_op *[]){fl, mz_value(g, a), mz_value(g, c)}), NULL);
  mz_apply(g, k1, mz_zip(g, 3, (mz_op *[]){fl, mz_value(g, a), mz_value(g, e)}), NULL);
  mz_op *D = mz_apply(g, k3, mz_zip(g, 5, (mz_op *[]){fl, mz_value(g, b), mz_value(g, c), mz_value(g, e), mz_value(g, d)}),
                      NULL);
  mz_future *f;
  OK(rt, mz_schedule(g, D, policy, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", policy, mz_future_message(f));
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  cr_assert_eq(st.ops, 5);
  *busy_fast = st.busy_ns[1];
  *busy_slow = st.busy_ns[2];
  uint64_t v = st.virtual_ns;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer *bufs[] = {a, b, c, d, e};
  for (int i = 0; i < 5; i++) mz_buffer_release(bufs[i]);
  mz_kernel_destroy(k0);
  mz_kernel_destroy(k1);
  mz_kernel_destroy(k3);
  mz_runtime_destroy(rt);
  return v;
}

Test(sim, hand_computed_makespans) {
  uint64_t bf, bs;
  /* single: all five on fast, one after another: 5 x 1000 = 5000. */
  cr_expect_eq(run_hand("single", &bf, &bs), 5000);
  cr_expect_eq(bf, 5000);
  cr_expect_eq(bs, 0);

  /* round-robin (a counter over queues 0, 1, 2, skipping 0): A -> 1;
   * E -> 1; C -> 2; B -> 0 (cannot) -> 1; D, placed once C is submitted at
   * t=1000, -> 1.  Fast: A 0-1000, E 1000-2000, B 2000-3000 (queued behind
   * A at once).  Slow: C waits for A (another device), then moves a
   * (100) and runs: 1100-3100.  D waits for C: at 3100 it moves c (100)
   * and runs 3200-4200. */
  cr_expect_eq(run_hand("round-robin", &bf, &bs), 4200);
  cr_expect_eq(bf, 4000);
  cr_expect_eq(bs, 2000);

  /* eager: A -> fast (free).  E follows A on fast (its backlog is 1); C
   * and B are deferred.  At 1000: C follows again (backlog 1: E) and runs
   * 2000-3000; B finds fast busy (2) and slow free: 1100-3100.  D is
   * deferred (its last predecessor's queue is busy), ready at 3100, goes
   * to fast (now free): moves b, 3200-4200. */
  cr_expect_eq(run_hand("eager", &bf, &bs), 4200);

  /* ws: A -> fast (both idle, the first found).  E follows A; C and B are
   * deferred.  At 1000 C is ready: fast has E (backlog 1), slow is idle:
   * C -> slow, 1100-3100.  B: both have backlog 1, fast is nearer its
   * home (A's queue): 2000-3000.  D (home: B's queue, busy) is deferred;
   * ready at 3100 it goes to fast, now idle: moves c, 3200-4200. */
  cr_expect_eq(run_hand("ws", &bf, &bs), 4200);

  /* dmda, earliest expected finish at ready time: A -> fast (1000 vs
   * 2000).  At 1000 E, C, B are ready, considered in that order:
   *   E: fast 1000+1000 = 2000, slow 1000+100+2000 = 3100 -> fast;
   *   C: fast 2000+1000 = 3000, slow 3100 -> fast;
   *   B: fast 3000+1000 = 4000, slow 3100 -> slow (1100-3100).
   * D, ready at 3100: fast 3100 + 100 (b) + 1000 = 4200, slow 3100 + 200
   * (c, e) + 2000 = 5300 -> fast: 4200. */
  cr_expect_eq(run_hand("dmda", &bf, &bs), 4200);
  cr_expect_eq(bf, 4000);
  cr_expect_eq(bs, 2000);

  /* heft: mean costs 1500; every link moves 1000 bytes in 100 ns, so the
   * mean edge costs 100.  Ranks: D 1500; B, C, E 1500+100+1500 = 3100;
   * A 1500+100+3100 = 4700.  In rank order (ties by build order):
   *   A: fast [0,1000];  B: fast [1000,2000] (slow would end at 1000 +
   *   100 + 2000 = 3100);  C: fast [2000,3000] (3000 < 3100);
   *   E: slow [1000,3100] (fast would end at 4000);
   *   D: ready 3100; fast 3100 + 100 (e) + 1000 = 4200, slow 3100 + 200 +
   *   2000 = 5300 -> fast.  Planned 4200.
   * As run: C and B queue behind A on fast in the order E, C, B are
   * considered (C 1000-2000, B 2000-3000); E waits for A, 1100-3100; D at
   * 3100 moves e: 3200-4200. */
  cr_expect_eq(run_hand("heft", &bf, &bs), 4200);
  cr_expect_eq(bf, 4000);
  cr_expect_eq(bs, 2000);
}

static mz_run_stats run_dag(mz_runtime *rt, const mz_dag_params *p, const char *policy, uint64_t *busy, unsigned nd) {
  mz_dag *d;
  OK(rt, mz_dag_generate(rt, p, &d));
  mz_future *f;
  OK(rt, mz_schedule(d->g, d->root, policy, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s: %s", policy, mz_future_message(f));
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  cr_assert_eq(st.ops, d->nodes);
  for (unsigned i = 0; i < nd && busy; i++) busy[i] = st.busy_ns[i];
  mz_future_destroy(f);
  mz_dag_destroy(d);
  return st;
}

Test(sim, deterministic) {
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 500, .seed = 42, .ccr = 0.5};
  const char *pols[] = {"eager", "ws", "dmda", "heft", "dmdas"};
  for (unsigned i = 0; i < sizeof pols / sizeof *pols; i++) {
    uint64_t v[2];
    for (int k = 0; k < 2; k++) {
      mz_runtime *rt = sim_runtime("sim:gpu*2@speed=8;sim:cpu*5@speed=1");
      v[k] = run_dag(rt, &p, pols[i], NULL, 0).virtual_ns;
      mz_runtime_destroy(rt);
    }
    cr_expect_eq(v[0], v[1], "%s: %llu then %llu", pols[i], (unsigned long long)v[0], (unsigned long long)v[1]);
    cr_expect_gt(v[0], 0);
  }
}

/* One device 10x faster than three others: the cost-based policies give
 * it most of the work (its ideal share is 10/13 of the flops). */
Test(sim, cost_policies_prefer_the_fast_device) {
  const char *pols[] = {"dmda", "heft"};
  for (unsigned i = 0; i < 2; i++) {
    mz_runtime *rt = sim_runtime("sim:fast*1@speed=10;sim:slow*3@speed=1");
    mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 300, .seed = 7, .ccr = 0.1, .flops = 1e5};
    uint64_t busy[5];
    run_dag(rt, &p, pols[i], busy, 5);
    double fast = (double)busy[1] * 10, slow = (double)(busy[2] + busy[3] + busy[4]);
    cr_expect_gt(fast / (fast + slow), 0.6, "%s: the fast device did %.0f%% of the work", pols[i],
                 100 * fast / (fast + slow));
    mz_runtime_destroy(rt);
  }
}

/* dmda rehearses a run before it starts and keeps it where it ends first:
 * with transfers as dear as a node (CCR 1) a fast and a slow device with
 * copy engines share the run, and it ends before the fast device alone
 * could end it; with transfers ten times dearer (CCR 10) the fast device
 * runs it alone, and the slow one does nothing. */
Test(sim, dmda_spreads_only_where_it_pays) {
  const double ccrs[] = {1, 10};
  for (unsigned i = 0; i < 2; i++) {
    mz_runtime *rt = sim_runtime("sim:fast*1@speed=8,link=200M/s,copy=1;sim:slow*1@speed=2,link=200M/s,copy=1");
    mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 300, .seed = 5, .ccr = ccrs[i], .flops = 1e6,
                       .ref_speed = 5, .ref_link = 0.2};
    mz_dag *d;
    OK(rt, mz_dag_generate(rt, &p, &d));
    double alone = d->total_flops / 8; /* ns on the fast device, at 8 flops per ns */
    mz_dag_destroy(d);
    uint64_t busy[3];
    mz_run_stats st = run_dag(rt, &p, "dmda", busy, 3);
    if (ccrs[i] == 1) {
      cr_expect_gt(busy[2], 0, "ccr 1: the slow device did nothing");
      cr_expect_lt((double)st.virtual_ns, 0.9 * alone, "ccr 1: %llu ns, the fast device alone %.0f",
                   (unsigned long long)st.virtual_ns, alone);
    } else {
      cr_expect_eq(busy[2], 0, "ccr 10: the slow device ran %llu ns of nodes", (unsigned long long)busy[2]);
      cr_expect_lt(fabs((double)st.virtual_ns - alone), 300, "ccr 10: %llu ns, the fast device alone %.0f (each node rounded to 1 ns)",
                   (unsigned long long)st.virtual_ns, alone);
    }
    mz_runtime_destroy(rt);
  }
}

/* Four equal devices, a stencil 16 nodes wide (16 equal nodes ready at
 * each step): ws keeps the devices equally busy. */
Test(sim, ws_balances_equal_devices) {
  mz_runtime *rt = sim_runtime("sim:eq*4@speed=1");
  mz_dag_params p = {.shape = MZ_DAG_STENCIL, .tiles = 16, .steps = 8, .tile_bytes = 64};
  uint64_t busy[5];
  run_dag(rt, &p, "ws", busy, 5);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 1; i < 5; i++) {
    if (busy[i] < lo) lo = busy[i];
    if (busy[i] > hi) hi = busy[i];
  }
  cr_expect_gt(lo, 0);
  cr_expect_leq((double)hi, 1.25 * (double)lo, "busy from %llu to %llu ns", (unsigned long long)lo,
                (unsigned long long)hi);
  mz_runtime_destroy(rt);
}

/* Every shape builds and runs to completion under every policy, and a
 * chain's makespan is exactly its length times a node's cost. */
Test(sim, generators) {
  mz_runtime *rt = sim_runtime("sim:a*2@speed=2,lat=0;sim:b*2@speed=1,lat=0");
  mz_dag_shape shapes[] = {MZ_DAG_RANDOM, MZ_DAG_CHAIN, MZ_DAG_FORKJOIN, MZ_DAG_CHOLESKY, MZ_DAG_LU, MZ_DAG_STENCIL};
  for (unsigned s = 0; s < 6; s++)
    for (unsigned i = 0; mz_policy_name(rt, i); i++) {
      mz_dag_params p = {.shape = shapes[s], .nodes = 60, .tiles = 4, .steps = 3, .seed = s};
      run_dag(rt, &p, mz_policy_name(rt, i), NULL, 0);
    }
  /* Chain of 10 nodes of 1e4 flops on "single" (the first sim device,
   * speed 2): 10 x 5000 ns, no transfer. */
  mz_dag_params p = {.shape = MZ_DAG_CHAIN, .tiles = 10, .flops = 1e4};
  cr_expect_eq(run_dag(rt, &p, "single", NULL, 0).virtual_ns, 50000);
  /* Tiled Cholesky on 3x3 tiles: 3 potrf, 3 trsm, 3 syrk, 1 gemm. */
  mz_dag *d;
  OK(rt, mz_dag_generate(rt, &(mz_dag_params){.shape = MZ_DAG_CHOLESKY, .tiles = 3}, &d));
  cr_expect_eq(d->nodes, 10);
  mz_dag_destroy(d);
  mz_runtime_destroy(rt);
}

/* A large platform stays fast: 20,000 nodes on 64 devices. */
Test(sim, large_platform, .timeout = 120) {
  mz_runtime *rt = sim_runtime("sim:gpu*16@speed=10,link=100G/s;sim:cpu*48@speed=1,link=100G/s");
  mz_dag_params p = {.shape = MZ_DAG_RANDOM, .nodes = 20000, .seed = 3, .ccr = 0.1};
  mz_run_stats st = run_dag(rt, &p, "dmda", NULL, 0);
  cr_expect_gt(st.virtual_ns, 0);
  mz_runtime_destroy(rt);
}

/* ws's locality on real CPUs: the distance between CPU queues comes from
 * hwloc (0 for a queue and itself, 1 + the levels from a worker's core up
 * to the object holding both cores otherwise, the same both ways), and
 * queues of distinct devices are 8 apart. */
static unsigned dist[4];
static int dist_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)t;
  (void)ready;
  dist[0] = mz_sched_queue_distance(s, 0, 0);
  dist[1] = mz_sched_queue_distance(s, 0, 1);
  dist[2] = mz_sched_queue_distance(s, 1, 0);
  dist[3] = mz_sched_queue_distance(s, 0, 2); /* the sim device's queue */
  return 0;
}
static const struct mz_policy_ops dist_probe = {.abi = MZ_POLICY_ABI, .name = "dist-probe", .select = dist_select};
static int host_nop(const mz_call *c) {
  (void)c;
  return 0;
}

Test(sim, cpu_queue_distance_from_hwloc) {
  setenv("MZ_PERFMODEL_DIR", "off", 1);
  mz_runtime *rt;
  OK(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2;sim:d", .quiet = true}, &rt));
  OK(rt, mz_policy_register(rt, &dist_probe));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_future *f;
  OK(rt, mz_schedule(g, mz_host(g, host_nop, NULL, NULL), "dist-probe", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
  cr_expect_eq(dist[0], 0);
  cr_expect_geq(dist[1], 1);
  cr_expect_eq(dist[1], dist[2]);
  cr_expect_eq(dist[3], 8);
  /* The same figure from hwloc directly, when the two workers are on two
   * cores (worker i is pinned to the i-th allowed core).  The topology is
   * loaded as the CPU device loads it: a library must not rebind the
   * caller's thread, and without that binding hwloc's x86 discovery may
   * see fewer cache levels than a plain load (on some virtual machines it
   * sees none), so the level counts differ. */
  hwloc_topology_t topo;
  cr_assert_eq(hwloc_topology_init(&topo), 0);
  cr_assert_eq(hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING), 0);
  cr_assert_eq(hwloc_topology_load(topo), 0);
  hwloc_cpuset_t allowed = hwloc_bitmap_alloc();
  hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS);
  if (hwloc_bitmap_iszero(allowed)) hwloc_bitmap_copy(allowed, hwloc_topology_get_allowed_cpuset(topo));
  hwloc_obj_t a = hwloc_get_obj_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE, 0);
  hwloc_obj_t b = hwloc_get_obj_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE, 1);
  if (a && b) {
    hwloc_obj_t c = hwloc_get_common_ancestor_obj(topo, a, b);
    cr_expect_eq(dist[1], 1 + (unsigned)(a->depth - c->depth), "distance %u, hwloc says %u levels", dist[1],
                 (unsigned)(a->depth - c->depth));
  }
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topo);
}

/* The network model: devices dealt to nodes; a copy between devices of
 * different nodes takes netlat + bytes / netbw, one from host memory (node
 * 0) to a device off node 0 adds that to the device's link, and the same
 * copy between devices of one node takes the link. */
static uint64_t run_on(mz_runtime *rt, mz_graph *g, mz_op *root, unsigned dev) {
  mz_future *f;
  OK(rt, mz_graph_run_with(g, root, &(mz_run_options){.devices = (unsigned[]){dev}, .ndevices = 1}, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  mz_future_destroy(f);
  return st.virtual_ns;
}

static void network_case(const char *devices, unsigned consumer, uint64_t expect_copy, uint64_t expect_host) {
  mz_runtime *rt = sim_runtime(devices);
  mz_kernel *kp = cost_kernel(rt, "produce", "f64 flops, out f64[] y");
  mz_kernel *kc = cost_kernel(rt, "consume", "f64 flops, in f64[] x, out f64[] z");
  mz_buffer *y, *z, *h;
  OK(rt, mz_buffer_create(rt, MZ_F64, 1, (size_t[]){1000}, NULL, &y));
  OK(rt, mz_buffer_create(rt, MZ_F64, 1, (size_t[]){1000}, NULL, &z));
  OK(rt, mz_buffer_create(rt, MZ_F64, 1, (size_t[]){1000}, NULL, &h));
  mz_graph *g1, *g2, *g3;
  OK(rt, mz_graph_create(rt, &g1));
  OK(rt, mz_graph_create(rt, &g2));
  OK(rt, mz_graph_create(rt, &g3));
  mz_op *p = mz_apply(g1, kp, mz_zip(g1, 2, (mz_op *[]){mz_f64(g1, 1000), mz_value(g1, y)}), NULL);
  mz_op *c = mz_apply(g2, kc, mz_zip(g2, 3, (mz_op *[]){mz_f64(g2, 2000), mz_value(g2, y), mz_value(g2, z)}), NULL);
  mz_op *d = mz_apply(g3, kc, mz_zip(g3, 3, (mz_op *[]){mz_f64(g3, 2000), mz_value(g3, h), mz_value(g3, z)}), NULL);
  cr_expect_eq(run_on(rt, g1, p, 1), 1000);
  /* 8000 bytes from device 1 to the consumer, then 2000 ns of work. */
  cr_expect_eq(run_on(rt, g2, c, consumer), expect_copy + 2000, "%s: copy", devices);
  /* h lives in host memory only. */
  cr_expect_eq(run_on(rt, g3, d, consumer), expect_host + 2000, "%s: from host", devices);
  mz_graph_destroy(g1);
  mz_graph_destroy(g2);
  mz_graph_destroy(g3);
  mz_buffer_release(y);
  mz_buffer_release(z);
  mz_buffer_release(h);
  mz_kernel_destroy(kp);
  mz_kernel_destroy(kc);
  mz_runtime_destroy(rt);
}

Test(sim, network_model) {
  /* Devices 1 and 2 on nodes 0 and 1: 5 us + 8000 B at 1 GB/s across;
   * the link (100 GB/s, no latency) from host memory adds 80 ns. */
  network_case("sim:n*2@nodes=2,speed=1,lat=0,link=100G/s,netlat=5us,netbw=1G/s", 2, 13000, 13080);
  /* Devices 1 and 2 on node 0 (3 devices, 2 nodes: 0, 0, 1): the link only. */
  network_case("sim:n*3@nodes=2,speed=1,lat=0,link=100G/s,netlat=5us,netbw=1G/s", 2, 80, 80);
  /* No network: as before. */
  network_case("sim:n*2@speed=1,lat=0,link=100G/s", 2, 80, 80);
  /* Bad network keys fail creation. */
  const char *bad[] = {"sim:n@nodes=0", "sim:n@nodes=2000", "sim:n@netbw=0", "sim:n@netlat=fast"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = bad[i], .quiet = true}, &rt);
    cr_assert_eq(rc, MZ_EINVAL, "%s gave %s", bad[i], mz_err_name(rc));
  }
}

/* The copy engine (copy=1).  One device (1 GFLOP/s, a 1 GB/s link without
 * latency: 1000 bytes move in 1000 ns), `single` puts every node on its
 * queue, and n independent nodes each read a 1000-byte host buffer and run
 * `flops` ns.  All are submitted at time 0.
 *
 * Without a copy engine each node's copy runs on the queue before it:
 * n x (1000 + flops).  With one the copies run back to back on the engine
 * (copy k ends at 1000 k) and node k starts at the later of its copy's end
 * and the previous node's end:
 *   flops 2000, n 3: copies end 1000, 2000, 3000; nodes 1000-3000,
 *     3000-5000, 5000-7000: 7000 (9000 without);
 *   flops 500, n 3: the engine is the bottleneck: nodes 1000-1500,
 *     2000-2500, 3000-3500: 3500 (4500 without). */
/* The copies an observer saw: start and end (virtual ns), whether on the
 * copy engine.  Called on the engine thread only (a sim-only run). */
static struct {
  unsigned n;
  uint64_t t0[8], t1[8];
  bool ce[8], measured[8];
} seen;
static void on_copy(const mz_transfer_record *rec, void *user) {
  (void)user;
  if (seen.n >= 8) return;
  seen.t0[seen.n] = rec->start_ns;
  seen.t1[seen.n] = rec->end_ns;
  seen.ce[seen.n] = rec->on_copy_engine && !rec->on_queue;
  seen.measured[seen.n] = rec->measured;
  seen.n++;
}

static uint64_t run_copies(const char *devices, unsigned n, double flops, uint64_t *busy, uint64_t *transfers) {
  mz_runtime *rt = sim_runtime(devices);
  memset(&seen, 0, sizeof seen);
  OK(rt, mz_runtime_set_observer(rt, &(mz_observer){.transfer = on_copy}));
  mz_kernel *k = cost_kernel(rt, "kx", "f64 flops, in u8[] x, out u8[] y");
  mz_buffer *x[4], *y[4];
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *outs[4];
  for (unsigned i = 0; i < n; i++) {
    OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &x[i]));
    OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &y[i]));
    outs[i] = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f64(g, flops), mz_value(g, x[i]), mz_value(g, y[i])}), NULL);
  }
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, n, outs), "single", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  *busy = st.busy_ns[1];
  *transfers = st.transfers;
  uint64_t v = st.virtual_ns;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (unsigned i = 0; i < n; i++) {
    mz_buffer_release(x[i]);
    mz_buffer_release(y[i]);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  return v;
}

Test(sim, copy_engine_overlaps_copies_with_kernels) {
  uint64_t busy, nx;
  cr_expect_eq(run_copies("sim:d@speed=1,link=1G/s,lat=0", 3, 2000, &busy, &nx), 9000);
  cr_expect_eq(busy, 6000);
  cr_expect_eq(nx, 3);
  cr_expect(seen.n == 3 && !seen.ce[0] && !seen.measured[0], "without an engine: on the queue, modelled");
  cr_expect_eq(run_copies("sim:d@speed=1,link=1G/s,lat=0,copy=1", 3, 2000, &busy, &nx), 7000);
  cr_expect_eq(busy, 6000, "the copies are not the queue's work");
  cr_expect_eq(nx, 3);
  /* Observers see them on the copy engine, back to back from time 0 (in
   * the order the nodes finished: the order they were copied). */
  cr_expect_eq(seen.n, 3);
  for (unsigned i = 0; i < seen.n; i++) {
    cr_expect(seen.ce[i] && seen.measured[i], "copy %u: on the copy engine, timed", i);
    cr_expect_eq(seen.t1[i] - seen.t0[i], 1000);
  }
  if (seen.n == 3) {
    uint64_t lo = seen.t0[0] < seen.t0[1] ? seen.t0[0] : seen.t0[1], hi = seen.t1[0] > seen.t1[1] ? seen.t1[0] : seen.t1[1];
    if (seen.t0[2] < lo) lo = seen.t0[2];
    if (seen.t1[2] > hi) hi = seen.t1[2];
    cr_expect_eq(hi - lo, 3000, "three copies of 1000 ns back to back");
  }
  cr_expect_eq(run_copies("sim:d@speed=1,link=1G/s,lat=0,copy=0", 3, 500, &busy, &nx), 4500);
  cr_expect_eq(run_copies("sim:d@speed=1,link=1G/s,lat=0,copy=1", 3, 500, &busy, &nx), 3500);
  cr_expect_eq(busy, 1500);
  /* One node: nothing to overlap. */
  cr_expect_eq(run_copies("sim:d@speed=1,link=1G/s,lat=0,copy=1", 1, 2000, &busy, &nx), 3000);
  /* Bad values of the key fail creation. */
  const char *bad[] = {"sim:d@copy=2", "sim:d@copy=", "sim:d@copy=yes"};
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = bad[i], .quiet = true}, &rt);
    cr_expect_eq(rc, MZ_EINVAL, "%s gave %s", bad[i], mz_err_name(rc));
  }
}

/* What a policy reads: which queues overlap copies, and when the copy
 * engine is free (exactly: after one node's 1000-ns copy submitted at 0, a
 * second node placed then sees the engine busy until 1000; a queue without
 * an engine answers its queue's ready time). */
static bool probe_engine[3];
static uint64_t probe_ready[2][3];
static unsigned probe_calls;
static int ce_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)t;
  (void)ready;
  unsigned k = probe_calls++ < 1 ? 0 : 1;
  for (unsigned q = 0; q < 3; q++) {
    probe_engine[q] = mz_sched_queue_copy_engine(s, q);
    probe_ready[k][q] = mz_sched_copy_ready_ns(s, q) - mz_sched_now_ns(s);
  }
  cr_expect_eq(mz_sched_copy_ready_ns(s, 2), mz_sched_queue_ready_ns(s, 2));
  return 1;
}
static const struct mz_policy_ops ce_probe = {.abi = MZ_POLICY_ABI, .name = "ce-probe", .select = ce_select};

Test(sim, policies_see_the_copy_engine) {
  mz_runtime *rt = sim_runtime("sim:d@speed=1,link=1G/s,lat=0,copy=1;sim:e@speed=1");
  OK(rt, mz_policy_register(rt, &ce_probe));
  mz_kernel *k = cost_kernel(rt, "kx", "f64 flops, in u8[] x, out u8[] y");
  mz_buffer *x[2], *y[2];
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_op *outs[2];
  for (unsigned i = 0; i < 2; i++) {
    OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &x[i]));
    OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &y[i]));
    outs[i] = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_f64(g, 2000), mz_value(g, x[i]), mz_value(g, y[i])}), NULL);
  }
  mz_future *f;
  OK(rt, mz_schedule(g, mz_join(g, 2, outs), "ce-probe", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(probe_calls, 2);
  cr_expect(!probe_engine[0] && probe_engine[1] && !probe_engine[2]);
  cr_expect_eq(probe_ready[0][1], 0);
  cr_expect_eq(probe_ready[1][1], 1000, "the engine holds the first node's copy: %llu",
               (unsigned long long)probe_ready[1][1]);
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.virtual_ns, 5000);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (unsigned i = 0; i < 2; i++) {
    mz_buffer_release(x[i]);
    mz_buffer_release(y[i]);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* Prefetch across devices.  Devices a (queue 1) and b (queue 2), 1
 * GFLOP/s, 1 GB/s links without latency; a policy pins kernels named "a*"
 * to a and "b*" to b and places nodes before their predecessors finish.
 * P1 on a writes p1 (1000 bytes) in 1000 ns; P2 on b writes p2 in 3000 ns;
 * N on b reads p1 and p2 and runs 1000 ns.
 *
 * With copy engines, b waits for a's node on the device: N is submitted at
 * time 0, p1's copy starts when P1 ends (1000-2000, while P2 runs) and N
 * runs 3000-4000.  Without (copy=0), N waits on the host for both, copies
 * p1 on its queue at 3000-4000 and runs 4000-5000. */
static int pin_ab(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)s;
  (void)ready;
  return mz_task_name(t)[0] == 'a' ? 1 : 2;
}
static const struct mz_policy_ops pin_ab_policy = {.abi = MZ_POLICY_ABI, .name = "pin-ab", .select = pin_ab};

static uint64_t run_prefetch(const char *devices) {
  mz_runtime *rt = sim_runtime(devices);
  OK(rt, mz_policy_register(rt, &pin_ab_policy));
  mz_kernel *ka = cost_kernel(rt, "a_prod", "f64 flops, out u8[] o");
  mz_kernel *kb = cost_kernel(rt, "b_prod", "f64 flops, out u8[] o");
  mz_kernel *kn = cost_kernel(rt, "b_join", "f64 flops, in u8[] x, in u8[] y, out u8[] o");
  mz_buffer *p1, *p2, *o;
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &p1));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &p2));
  OK(rt, mz_buffer_create(rt, MZ_U8, 1, (size_t[]){1000}, NULL, &o));
  mz_graph *g;
  OK(rt, mz_graph_create(rt, &g));
  mz_apply(g, ka, mz_zip(g, 2, (mz_op *[]){mz_f64(g, 1000), mz_value(g, p1)}), NULL);
  mz_apply(g, kb, mz_zip(g, 2, (mz_op *[]){mz_f64(g, 3000), mz_value(g, p2)}), NULL);
  mz_op *n = mz_apply(g, kn, mz_zip(g, 4, (mz_op *[]){mz_f64(g, 1000), mz_value(g, p1), mz_value(g, p2), mz_value(g, o)}),
                      NULL);
  mz_future *f;
  OK(rt, mz_schedule(g, n, "pin-ab", &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK, "%s", mz_future_message(f));
  mz_run_stats st;
  OK(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.transfers, 1, "p1 moves to b");
  uint64_t v = st.virtual_ns;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(p1);
  mz_buffer_release(p2);
  mz_buffer_release(o);
  mz_kernel_destroy(ka);
  mz_kernel_destroy(kb);
  mz_kernel_destroy(kn);
  mz_runtime_destroy(rt);
  return v;
}

Test(sim, copy_engine_prefetches_from_other_devices) {
  cr_expect_eq(run_prefetch("sim:a@speed=1,link=1G/s,lat=0,copy=1;sim:b@speed=1,link=1G/s,lat=0,copy=1"), 4000);
  cr_expect_eq(run_prefetch("sim:a@speed=1,link=1G/s,lat=0;sim:b@speed=1,link=1G/s,lat=0"), 5000);
}
