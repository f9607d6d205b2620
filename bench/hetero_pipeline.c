/* mz-bench-hetero-pipeline: a tiled pipeline on the CPU and OpenCL devices
 * together, under every registered policy.
 *
 * Two W x H float buffers x and y are split into T tiles each; every tile
 * goes through scale, square and saxpy (y = a*x + y), then the tiles of y
 * are put back.  Every kernel has a CPU implementation and OpenCL C code
 * (examples/kernels/kernels.cl), so the policy decides where each of the
 * 3*T tile operations runs.  For each policy (mz_policy_name) the program
 * prints the makespan (mz_run_stats.elapsed_ns, the median of -r runs) and
 * the busy time of each device in that median run, then one line
 *   BENCH hetero.pipeline policy=<p> makespan_ns=<x> busy_ns=<d0>,<d1>,...
 * per policy.  Options: -d devices (default "cpu,opencl"), -t tiles
 * (default 16), -r reps (default 5), --quick (small buffers, 2 reps: the
 * CI smoke test). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maize.h"
#include "maize/policy.h"
#include "bench_util.h"

#ifndef MZ_KERNELS_CL
#error "MZ_KERNELS_CL must name examples/kernels/kernels.cl"
#endif

#define MAX_DEV 16

static void die(const char *what, int code)
{
  fprintf(stderr, "hetero_pipeline: %s (%d)\n", what, code);
  exit(1);
}

static int cpu_saxpy(const mz_call *c)
{
  float a = c->args[0].f32;
  const float *x = c->args[1].p;
  float *y = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++)
    y[i] = a * x[i] + y[i];
  return 0;
}
static int cpu_scale(const mz_call *c)
{
  float *y = c->args[1].p;
  for (uint64_t i = 0; i < c->args[2].u64; i++)
    y[i] = c->args[0].f32 * y[i];
  return 0;
}
static int cpu_square(const mz_call *c)
{
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++)
    y[i] = y[i] * y[i];
  return 0;
}

static mz_kernel *mk(mz_runtime *rt, const char *name, const char *params, mz_cpu_fn fn)
{
  mz_kernel_spec s = {
    .name = name,
    .params = params,
    .cpu = { .fn = fn },
    .opencl = { .format = MZ_CODE_SOURCE, .path = MZ_KERNELS_CL },
    .cost = { .flops_per_elem = 2, .bytes_per_elem = 8 },
  };
  mz_kernel *k;
  int rc = mz_kernel_create(rt, &s, &k);
  if (rc)
    die(mz_runtime_last_error(rt), rc);
  return k;
}

struct result {
  uint64_t makespan;
  uint64_t busy[MAX_DEV];
  unsigned ndev;
};

static int cmp_result(const void *a, const void *b)
{
  uint64_t x = ((const struct result *)a)->makespan, y = ((const struct result *)b)->makespan;
  return (x > y) - (x < y);
}

/* Build and run the pipeline once; the buffers are rewritten first so that
 * every run starts from host data. */
static struct result run_once(mz_runtime *rt, mz_kernel *const k[3], mz_buffer *x, mz_buffer *y, const float *init,
                              size_t count, unsigned tiles, const char *policy)
{
  if (mz_buffer_write(x, init, count * sizeof(float)) || mz_buffer_write(y, init, count * sizeof(float)))
    die("mz_buffer_write", -1);
  mz_graph *g;
  if (mz_graph_create(rt, &g))
    die("mz_graph_create", -1);
  mz_op *xt = mz_partition(g, mz_value(g, x), tiles);
  mz_op *yt = mz_partition(g, mz_value(g, y), tiles);
  mz_op **done = calloc(tiles, sizeof *done);
  mz_op **xs = calloc(tiles, sizeof *xs);
  for (unsigned t = 0; t < tiles; t++) {
    mz_op *v = mz_unzip(g, yt, t);
    v = mz_unzip(g, mz_apply(g, k[0], mz_zip(g, 2, (mz_op *[]){ mz_f32(g, 0.5f), v }), NULL), 1);
    v = mz_unzip(g, mz_apply(g, k[1], v, NULL), 0);
    mz_op *out = mz_apply(g, k[2], mz_zip(g, 3, (mz_op *[]){ mz_f32(g, 2.0f), mz_unzip(g, xt, t), v }), NULL);
    done[t] = mz_unzip(g, out, 2);
    xs[t] = mz_unzip(g, out, 1);
  }
  mz_op *root = mz_join(g, 2, (mz_op *[]){ mz_unpartition(g, mz_zip(g, tiles, done)),
                                           mz_unpartition(g, mz_zip(g, tiles, xs)) });
  if (mz_graph_status(g))
    die(mz_graph_message(g), mz_graph_status(g));
  mz_future *f;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc)
    die(mz_runtime_last_error(rt), rc);
  if ((rc = mz_future_wait(f)))
    die(mz_future_message(f), rc);
  mz_run_stats st;
  struct result r = { 0 };
  if (mz_future_stats(f, &st) == MZ_OK) {
    r.makespan = st.elapsed_ns;
    r.ndev = st.ndevices < MAX_DEV ? st.ndevices : MAX_DEV;
    for (unsigned d = 0; d < r.ndev; d++)
      r.busy[d] = st.busy_ns ? st.busy_ns[d] : 0;
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);
  free(done);
  free(xs);
  return r;
}

int main(int argc, char **argv)
{
  const char *devices = "cpu,opencl";
  unsigned tiles = 16;
  int reps = 5;
  size_t w = 1024, h = 2048;
  static const struct option longopts[] = {{"devices", required_argument, NULL, 'd'},
                                            {"tiles", required_argument, NULL, 't'},
                                            {"reps", required_argument, NULL, 'r'},
                                            {"quick", no_argument, NULL, 'q'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-hetero-pipeline";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":d:t:r:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'd': devices = optarg; break;
    case 't':
      if (!bench_arg_long(prog, "-t", optarg, 1, 4096, &num)) return 2;
      tiles = (unsigned)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, 1000, &num)) return 2;
      reps = (int)num;
      break;
    case 'q':
      h = 256;
      reps = 2;
      break;
    case 'h': printf("usage: %s [-d|--devices S] [-t|--tiles T] [-r|--reps R] [--quick]\n", prog); return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  if (tiles > h) {
    fprintf(stderr, "%s: at most %zu tiles\n", prog, h);
    return 2;
  }

  mz_runtime_config cfg = { .devices = devices };
  mz_runtime *rt;
  int rc = mz_runtime_create(&cfg, &rt);
  if (rc) {
    /* No OpenCL device: say so and measure nothing (not a failure). */
    printf("devices \"%s\" unavailable (%s): nothing to measure\n", devices, mz_err_name(rc));
    printf("BENCH hetero.pipeline policy=na makespan_ns=na busy_ns=na\n");
    return 0;
  }
  mz_kernel *k[3] = {
    mk(rt, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)", cpu_scale),
    mk(rt, "square", "inout f32[] y, u64 n = sizeof(y)", cpu_square),
    mk(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)", cpu_saxpy),
  };
  size_t count = w * h;
  float *init = malloc(count * sizeof *init);
  for (size_t i = 0; i < count; i++)
    init[i] = (float)(i % 1000) * 0.001f;
  mz_buffer *x, *y;
  if (mz_buffer_create(rt, MZ_F32, 2, (size_t[]){ w, h }, init, &x) ||
      mz_buffer_create(rt, MZ_F32, 2, (size_t[]){ w, h }, init, &y))
    die("mz_buffer_create", -1);

  unsigned ndev = mz_runtime_device_count(rt);
  printf("heterogeneous pipeline: %zu x %zu floats, %u tiles, 3 kernels per tile, devices \"%s\", median of %d\n",
         w, h, tiles, devices, reps);
  for (unsigned d = 0; d < ndev && d < MAX_DEV; d++) {
    mz_device_info info;
    mz_device_get_info(mz_runtime_device(rt, d), &info);
    printf("  device %u: %s %s (%u queues)\n", d, mz_device_kind_name(info.kind), info.name, info.queues);
  }
  printf("%-14s %12s", "policy", "makespan_ms");
  for (unsigned d = 0; d < ndev && d < MAX_DEV; d++)
    printf("  busy%u_ms", d);
  printf("\n");

  struct result *res = calloc((size_t)reps, sizeof *res);
  char bench[64 * MAX_DEV];
  for (unsigned p = 0; mz_policy_name(rt, p); p++) {
    const char *policy = mz_policy_name(rt, p);
    run_once(rt, k, x, y, init, count, tiles, policy); /* warm-up: builds, allocations, perf models */
    for (int i = 0; i < reps; i++)
      res[i] = run_once(rt, k, x, y, init, count, tiles, policy);
    qsort(res, (size_t)reps, sizeof *res, cmp_result);
    struct result *m = &res[reps / 2];
    printf("%-14s %12.2f", policy, (double)m->makespan / 1e6);
    size_t off = 0;
    for (unsigned d = 0; d < m->ndev; d++) {
      printf("  %8.2f", (double)m->busy[d] / 1e6);
      off += (size_t)snprintf(bench + off, sizeof bench - off, "%s%llu", d ? "," : "",
                              (unsigned long long)m->busy[d]);
    }
    printf("\n");
    printf("BENCH hetero.pipeline policy=%s makespan_ns=%llu busy_ns=%s\n", policy,
           (unsigned long long)m->makespan, m->ndev ? bench : "na");
  }
  free(res);
  free(init);
  mz_buffer_release(x);
  mz_buffer_release(y);
  for (int i = 0; i < 3; i++)
    mz_kernel_destroy(k[i]);
  mz_runtime_destroy(rt);
  return 0;
}
