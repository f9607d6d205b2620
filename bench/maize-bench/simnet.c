/* maize-bench sim-net: what maize's simulator predicts for Task Bench's
 * stencil_1d on many machines, on one machine, deterministically.
 *
 * Each simulated node is one sim device ("sim:node*N@nodes=N,queues=C,
 * speed=1,netlat=L,netbw=B": C cores, one in-order queue each, on its own
 * machine of the network model, devices/sim/sim.c).  The graph is Task
 * Bench's stencil_1d of width N x C (point p on node p / C), each task
 * costed at exactly its granularity g (a kernel of g flops at 1 GFLOP/s,
 * plus the per-task overhead --overhead-us, which is not useful work), its
 * output 16 bytes (-output) sent to the neighbouring node when a boundary
 * point's consumer lives there: netlat + bytes / netbw on the receiving
 * core, before the task.  Placement is owner computes, as maize over MPI
 * does it (the "owner-node" policy below: a task runs on its point's node,
 * point p on core p % C of that node).
 *
 * For g from --coarse-us down by halves: the run's virtual makespan T
 * (mz_run_stats.virtual_ns), efficiency = tasks x g / (T x N x C), and the
 * granularity T x N x C / tasks; METG(50%) as Task Bench computes it
 * (tb_metg).  One line per node count:
 *   BENCH sim.net.stencil_1d nodes=N cores=C metg_us=X
 * The simulator models no contention and no runtime overhead beyond
 * --overhead-us: the figures are a lower bound set by the network. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <maize.h>
#include <maize/policy.h>

#include "mzb.h"
#include "patterns.h"

/* ---- the owner-node policy: the node and core are in the kernel's name ---- */

struct owner_state {
  unsigned nsim;      /* sim devices, in device order: node i is the i-th */
  unsigned *first, *count; /* per sim device: its first queue and how many */
};

static int owner_init(const mz_sched *s, void **state) {
  struct owner_state *o = calloc(1, sizeof *o);
  unsigned nq = mz_sched_queue_count(s), nd = mz_sched_device_count(s);
  int *simidx = o ? calloc(nd, sizeof *simidx) : NULL;
  if (!o || !simidx) {
    free(o);
    return MZ_ENOMEM;
  }
  for (unsigned d = 0; d < nd; d++) simidx[d] = mz_sched_device_kind(s, d) == MZ_DEVICE_SIM ? (int)o->nsim++ : -1;
  o->first = calloc(o->nsim ? o->nsim : 1, sizeof *o->first);
  o->count = calloc(o->nsim ? o->nsim : 1, sizeof *o->count);
  if (!o->first || !o->count) {
    free(simidx);
    free(o->first);
    free(o->count);
    free(o);
    return MZ_ENOMEM;
  }
  for (unsigned q = nq; q-- > 0;) {
    int i = simidx[mz_sched_queue_device(s, q)];
    if (i < 0) continue;
    o->first[i] = q;
    o->count[i]++;
  }
  free(simidx);
  *state = o;
  return MZ_OK;
}

static void owner_fini(void *state) {
  struct owner_state *o = state;
  if (!o) return;
  free(o->first);
  free(o->count);
  free(o);
}

static int owner_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)ready;
  const struct owner_state *o = state;
  const char *name = mz_task_name(t);
  const char *n = name ? strstr(name, ".n") : NULL, *c = name ? strstr(name, ".c") : NULL;
  if (!n || !c) return MZ_EPOLICY;
  unsigned node = (unsigned)strtoul(n + 2, NULL, 10), core = (unsigned)strtoul(c + 2, NULL, 10);
  if (node >= o->nsim || core >= o->count[node]) return MZ_EPOLICY;
  (void)s;
  return (int)(o->first[node] + core);
}

static const struct mz_policy_ops owner_ops = {
    .abi = MZ_POLICY_ABI,
    .name = "owner-node",
    .description = "a task runs on the node and core its kernel's name gives (sim-net's owner computes)",
    .init = owner_init,
    .fini = owner_fini,
    .select = owner_select,
};

/* ---- the graph ---- */

static double task_flops(const mz_call *c) { return (double)c->args[0].u64; }

static int noop(const mz_call *c) {
  (void)c;
  return 0;
}

struct simnet {
  mz_runtime *rt;
  unsigned nodes, cores;
  mz_kernel **k0, **k3; /* per point (node, core): no input (t = 0), three inputs */
  mz_buffer **bufs;     /* [2][width] */
};

static void simnet_free(struct simnet *sn) {
  if (sn->k0)
    for (unsigned i = 0; i < sn->nodes * sn->cores; i++) {
      mz_kernel_destroy(sn->k0[i]);
      mz_kernel_destroy(sn->k3[i]);
    }
  if (sn->bufs)
    for (size_t i = 0; i < 2 * (size_t)sn->nodes * sn->cores; i++) mz_buffer_release(sn->bufs[i]);
  free(sn->k0);
  free(sn->k3);
  free(sn->bufs);
  mz_runtime_destroy(sn->rt);
}

static int simnet_setup(struct simnet *sn, unsigned nodes, unsigned cores, const char *netlat, const char *netbw,
                        size_t out_bytes) {
  memset(sn, 0, sizeof *sn);
  sn->nodes = nodes;
  sn->cores = cores;
  char devs[256];
  snprintf(devs, sizeof devs, "sim:node*%u@nodes=%u,queues=%u,speed=1,netlat=%s,netbw=%s", nodes, nodes, cores, netlat,
           netbw);
  mz_runtime_config cfg = {.devices = devs, .quiet = true};
  int rc = mz_runtime_create(&cfg, &sn->rt);
  if (rc) {
    fprintf(stderr, "maize-bench sim-net: %s: %s\n", devs, mz_runtime_last_error(NULL));
    return rc;
  }
  if ((rc = mz_policy_register(sn->rt, &owner_ops))) return rc;
  size_t w = (size_t)nodes * cores;
  sn->k0 = calloc(w, sizeof *sn->k0);
  sn->k3 = calloc(w, sizeof *sn->k3);
  sn->bufs = calloc(2 * w, sizeof *sn->bufs);
  if (!sn->k0 || !sn->k3 || !sn->bufs) return MZ_ENOMEM;
  for (unsigned i = 0; i < w; i++) {
    char name[48];
    snprintf(name, sizeof name, "stencil.n%u.c%u.a0", i / cores, i % cores);
    mz_kernel_spec ks = {.name = name, .params = "u64 flops, out u8[] o", .cpu = {.fn = noop}, .cost = {.flops = task_flops}};
    if ((rc = mz_kernel_create(sn->rt, &ks, &sn->k0[i]))) return rc;
    snprintf(name, sizeof name, "stencil.n%u.c%u.a3", i / cores, i % cores);
    ks.params = "u64 flops, out u8[] o, in u8[] a, in u8[] b, in u8[] c";
    if ((rc = mz_kernel_create(sn->rt, &ks, &sn->k3[i]))) return rc;
  }
  for (size_t i = 0; i < 2 * w; i++)
    if ((rc = mz_buffer_create(sn->rt, MZ_U8, 1, (size_t[]){out_bytes}, NULL, &sn->bufs[i]))) return rc;
  return MZ_OK;
}

/* One run of steps timesteps with tasks of task_ns (overhead_ns more each,
 * not useful work): the virtual makespan in *virt_ns. */
static int simnet_run(struct simnet *sn, long steps, uint64_t task_ns, uint64_t overhead_ns, uint64_t *virt_ns) {
  mz_graph *g = NULL;
  int rc = mz_graph_create(sn->rt, &g);
  if (rc) return rc;
  long w = (long)sn->nodes * sn->cores;
  mz_op **last = malloc((size_t)w * sizeof *last);
  if (!last) {
    mz_graph_destroy(g);
    return MZ_ENOMEM;
  }
  for (long t = 0; t < steps; t++) {
    for (long p = 0; p < w; p++) {
      mz_buffer *o = sn->bufs[(size_t)(t % 2) * (size_t)w + (size_t)p];
      mz_op *f = mz_u64(g, task_ns + overhead_ns);
      mz_op *op;
      if (t == 0) {
        op = mz_apply(g, sn->k0[p], mz_zip(g, 2, (mz_op *[]){f, mz_value(g, o)}), NULL);
      } else {
        /* Task Bench's stencil_1d: p - 1, p, p + 1 of the last step, clipped. */
        mz_buffer **prev = sn->bufs + (size_t)((t - 1) % 2) * (size_t)w;
        long a = p > 0 ? p - 1 : p, c = p + 1 < w ? p + 1 : p;
        op = mz_apply(g, sn->k3[p],
                      mz_zip(g, 5, (mz_op *[]){f, mz_value(g, o), mz_value(g, prev[a]), mz_value(g, prev[p]),
                                               mz_value(g, prev[c])}),
                      NULL);
      }
      last[p] = mz_unzip(g, op, 1);
    }
  }
  mz_op *root = mz_join(g, (unsigned)w, last);
  free(last);
  mz_future *f = NULL;
  rc = mz_schedule(g, root, "owner-node", &f);
  if (rc == MZ_OK) rc = mz_future_wait(f);
  mz_run_stats st;
  if (rc == MZ_OK && (rc = mz_future_stats(f, &st)) == MZ_OK) *virt_ns = st.virtual_ns;
  if (rc) fprintf(stderr, "maize-bench sim-net: %s\n", f ? mz_future_message(f) : mz_runtime_last_error(sn->rt));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  return rc;
}

static int parse_ul(const char *what, const char *v, unsigned long lo, unsigned long hi, unsigned long *out) {
  char *end;
  errno = 0;
  unsigned long x = strtoul(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi || *v == '-') {
    fprintf(stderr, "maize-bench sim-net: %s must be %lu..%lu, not '%s'\n", what, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

int mzb_simnet_main(int argc, char **argv) {
  unsigned long nodes_list[16] = {16, 64, 256}, nn = 3, cores = 4, steps = 20, out_bytes = 16;
  double coarse_us = 256, overhead_us = 0;
  const char *netlat = "1us", *netbw = "12.5G/s";
  static const struct option lo[] = {{"nodes", required_argument, NULL, 'n'},   {"cores", required_argument, NULL, 'c'},
                                     {"steps", required_argument, NULL, 's'},   {"netlat", required_argument, NULL, 'l'},
                                     {"netbw", required_argument, NULL, 'b'},   {"output", required_argument, NULL, 'o'},
                                     {"coarse-us", required_argument, NULL, 'g'},
                                     {"overhead-us", required_argument, NULL, 'v'},
                                     {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
  int c;
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    char *end;
    switch (c) {
    case 'n': {
      nn = 0;
      char *list = strdup(optarg);
      if (!list) return 1;
      for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
        if (nn == 16 || parse_ul("--nodes", tok, 1, 1024, &nodes_list[nn++])) {
          free(list);
          return 2;
        }
      free(list);
      if (!nn) return 2;
      break;
    }
    case 'c': if (parse_ul("--cores", optarg, 1, 64, &cores)) return 2; break;
    case 's': if (parse_ul("--steps", optarg, 2, 100000, &steps)) return 2; break;
    case 'o': if (parse_ul("--output", optarg, 16, 1UL << 30, &out_bytes)) return 2; break;
    case 'l': netlat = optarg; break;
    case 'b': netbw = optarg; break;
    case 'g':
    case 'v': {
      errno = 0;
      double d = strtod(optarg, &end);
      if (errno || *end || end == optarg || !(d >= 0) || d > 1e6 || (c == 'g' && d < 0.01)) {
        fprintf(stderr, "maize-bench sim-net: %s must be a number of microseconds, not '%s'\n",
                c == 'g' ? "--coarse-us" : "--overhead-us", optarg);
        return 2;
      }
      if (c == 'g') coarse_us = d;
      else overhead_us = d;
      break;
    }
    case 'h':
      printf("usage: maize-bench sim-net [--nodes 16,64,256] [--cores C] [--steps N] [--netlat 1us]\n"
             "                           [--netbw 12.5G/s] [--output BYTES] [--coarse-us US] [--overhead-us US]\n"
             "Task Bench stencil_1d on simulated nodes (owner computes, maize's network model):\n"
             "METG(50%%) on the virtual clock per node count, BENCH sim.net.stencil_1d lines.\n");
      return 0;
    default:
      fprintf(stderr, "maize-bench sim-net: bad option '%s'\n", argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "maize-bench sim-net: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  printf("sim-net: stencil_1d, %lu steps, %lu cores per node, network latency %s, bandwidth %s, %lu-byte outputs,"
         " per-task overhead %.3g us\n",
         steps, cores, netlat, netbw, out_bytes, overhead_us);
  int rc = 0;
  for (unsigned long ni = 0; ni < nn && !rc; ni++) {
    struct simnet sn;
    rc = simnet_setup(&sn, (unsigned)nodes_list[ni], (unsigned)cores, netlat, netbw, (size_t)out_bytes);
    if (rc) {
      fprintf(stderr, "maize-bench sim-net: setup: %s (%s)\n", mz_err_name(rc), sn.rt ? mz_runtime_last_error(sn.rt) : "");
      simnet_free(&sn);
      return rc == MZ_EINVAL || rc == MZ_ENODEV ? 2 : 1;
    }
    double gran[48], eff[48];
    size_t npts = 0;
    double width = (double)nodes_list[ni] * (double)cores, tasks = width * (double)steps;
    printf("  %lu nodes x %lu cores: task us, granularity us, efficiency\n", nodes_list[ni], cores);
    for (double g = coarse_us; g >= 0.0099 && npts < 48; g /= 2, npts++) {
      uint64_t tns = (uint64_t)llround(g * 1000), vns = 0;
      if ((rc = simnet_run(&sn, (long)steps, tns, (uint64_t)llround(overhead_us * 1000), &vns))) break;
      gran[npts] = (double)vns / 1000 * width / tasks;
      eff[npts] = vns ? tasks * (double)tns / ((double)vns * width) : 0;
      printf("    %10.3f %12.3f %8.3f\n", g, gran[npts], eff[npts]);
    }
    if (!rc) {
      double m = tb_metg(gran, eff, npts, 0.5);
      if (m >= 0) printf("BENCH sim.net.stencil_1d nodes=%lu cores=%lu metg_us=%.3f\n", nodes_list[ni], cores, m);
      else printf("BENCH sim.net.stencil_1d nodes=%lu cores=%lu metg_us=na\n", nodes_list[ni], cores);
    }
    simnet_free(&sn);
  }
  return rc ? 1 : 0;
}
