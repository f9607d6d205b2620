/* pipeline: a multi-stage pipeline on every device found, once per shipped
 * policy, with a table of what happened.
 *
 *   host: fill x and y       (a host node)
 *   partition x and y into tiles
 *   scale:  x_t *= 2         (per tile: mz_op_scal, the canned BLAS scal)
 *   square: x_t = x_t^2      (per tile: a kernel written here)
 *   add:    z_t = x_t + y_t  (per tile, two inputs: a kernel written here)
 *   unpartition, then host: checksum the result and compare with a reference
 *
 * A stage BLAS already has is a canned op (include/maize/ops.h), run by
 * OpenBLAS on the CPU, CLBlast on OpenCL devices and cuBLAS on CUDA
 * devices (where it loads).  square and add are written by hand for every
 * device kind, as the examples of writing a kernel (saxpy.c is the
 * smallest one).
 *
 * Usage: pipeline [elements] [tiles].  MZ_DEVICES picks the devices. */
#include <maize.h>
#include <maize/ops.h>
#include <maize/policy.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MZ_EXAMPLES_DIR
#define MZ_EXAMPLES_DIR "examples"
#endif
/* The PTX the build generated with nvcc, else the checked-in copy. */
#ifndef MZ_KERNELS_PTX
#define MZ_KERNELS_PTX MZ_EXAMPLES_DIR "/kernels/kernels.ptx"
#endif

static int square_cpu(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] *= y[i];
  return 0;
}
static int add_cpu(const mz_call *c) {
  const float *x = c->args[0].p, *y = c->args[1].p;
  float *z = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) z[i] = x[i] + y[i];
  return 0;
}
static int fill(const mz_call *c) {
  float *x = c->args[0].p, *y = c->args[1].p; /* z (args[2]) is written by add */
  for (size_t i = 0; i < c->shapes[0].count; i++) {
    x[i] = (float)(i % 1000) * 0.001f;
    y[i] = 1.0f;
  }
  return 0;
}
static int checksum(const mz_call *c) {
  const float *y = c->args[0].p;
  double *sum = c->user;
  double s = 0;
  for (size_t i = 0; i < c->shapes[0].count; i++) s += y[i];
  *sum = s;
  return 0;
}

#define KSPEC(nm, prm, cfn)                                                                 \
  {.name = nm, .params = prm, .cpu = {.fn = cfn},                                           \
   .opencl = {.format = MZ_CODE_SOURCE, .path = MZ_EXAMPLES_DIR "/kernels/kernels.cl"},     \
   .cuda = {.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX}}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 22;
  unsigned tiles = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 8;
  mz_runtime *rt;
  int rc = mz_runtime_create(NULL, &rt);
  if (rc) {
    fprintf(stderr, "pipeline: %s\n", mz_strerror(rc));
    return 1;
  }
  const mz_kernel_spec specs[2] = {
      KSPEC("square", "inout f32[] y, u64 n = sizeof(y)", square_cpu),
      KSPEC("add", "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)", add_cpu),
  };
  mz_kernel *k[2];
  for (int i = 0; i < 2; i++)
    if (mz_kernel_create(rt, &specs[i], &k[i])) {
      fprintf(stderr, "pipeline: %s\n", mz_runtime_last_error(rt));
      return 1;
    }
  double ref = 0;
  for (size_t i = 0; i < n; i++) {
    float x = (float)(i % 1000) * 0.001f * 2.0f;
    ref += (double)(x * x + 1.0f);
  }
  unsigned ndev = mz_runtime_device_count(rt);
  printf("maize pipeline: %zu floats, %u tiles, %u device(s):\n", n, tiles, ndev);
  for (unsigned d = 0; d < ndev; d++) {
    mz_device_info info;
    mz_device_get_info(mz_runtime_device(rt, d), &info);
    printf("  device %u: %-6s %-40.40s %u queue(s)\n", d, mz_device_kind_name(info.kind), info.name, info.queues);
  }
  printf("\n%-12s %10s %6s %8s %10s %9s %8s  %s\n", "policy", "makespan", "ops", "batches", "callbacks", "transfers",
         "MB moved", "busy ms per device");
  int failures = 0;
  for (unsigned p = 0; mz_policy_name(rt, p); p++) {
    const char *pol = mz_policy_name(rt, p);
    mz_buffer *x, *y, *z;
    if (mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &x) || mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &y) ||
        mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &z))
      return 1;
    mz_graph *g;
    if (mz_graph_create(rt, &g)) return 1;
    double sum = 0;
    mz_op *filled = mz_host_named(g, "fill", fill, NULL, mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, y)}));
    mz_op *px = mz_partition(g, mz_unzip(g, filled, 0), tiles);
    mz_op *py = mz_partition(g, mz_unzip(g, filled, 1), tiles);
    mz_op *pz = mz_partition(g, mz_value(g, z), tiles);
    mz_op **outs = calloc(tiles, sizeof *outs);
    mz_op **xs = calloc(tiles, sizeof *xs);
    mz_op **ys = calloc(tiles, sizeof *ys);
    for (unsigned t = 0; t < tiles; t++) {
      mz_op *xt = mz_unzip(g, px, t), *yt = mz_unzip(g, py, t);
      mz_op *s1 = mz_op_scal(g, 2.0, xt);
      mz_op *s2 = mz_unzip(g, mz_apply(g, k[0], s1, NULL), 0);
      xs[t] = s2;
      outs[t] = mz_unzip(g, mz_apply(g, k[1], mz_zip(g, 3, (mz_op *[]){s2, yt, mz_unzip(g, pz, t)}), NULL), 2);
      ys[t] = yt;
    }
    mz_op *ux = mz_unpartition(g, mz_zip(g, tiles, xs));
    mz_op *uy = mz_unpartition(g, mz_zip(g, tiles, ys));
    mz_op *uz = mz_unpartition(g, mz_zip(g, tiles, outs));
    mz_op *done = mz_host_named(g, "checksum", checksum, &sum, mz_unzip(g, uz, 0));
    mz_op *root = mz_join(g, 3, (mz_op *[]){done, ux, uy});
    mz_future *f;
    rc = mz_schedule(g, root, pol, &f);
    if (rc) {
      fprintf(stderr, "pipeline(%s): %s\n", pol, mz_runtime_last_error(rt));
      return 1;
    }
    rc = mz_future_wait(f);
    mz_run_stats st;
    mz_future_stats(f, &st);
    bool ok = rc == 0 && fabs(sum - ref) <= 1e-4 * fabs(ref);
    failures += !ok;
    printf("%-12s %8.2fms %6llu %8llu %10llu %9llu %8.1f ", pol, (double)st.elapsed_ns / 1e6,
           (unsigned long long)st.ops, (unsigned long long)st.batches, (unsigned long long)st.callbacks,
           (unsigned long long)st.transfers, (double)st.bytes_moved / 1e6);
    for (unsigned d = 0; d < st.ndevices; d++) printf(" %7.2f", (double)st.busy_ns[d] / 1e6);
    printf("  %s\n", ok ? "ok" : rc ? mz_future_message(f) : "WRONG RESULT");
    mz_future_destroy(f);
    mz_graph_destroy(g);
    free(outs);
    free(xs);
    free(ys);
    mz_buffer_release(x);
    mz_buffer_release(y);
    mz_buffer_release(z);
  }
  printf("\nchecksum reference %.3f; %s\n", ref, failures ? "SOME POLICIES FAILED" : "every policy gave it");
  for (int i = 0; i < 2; i++) mz_kernel_destroy(k[i]);
  mz_runtime_destroy(rt);
  return failures ? 1 : 0;
}
