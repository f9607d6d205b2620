/* mz-bench-memory-kinds: what each memory kind costs a buffer that goes back and
 * forth between the CPU and an OpenCL device.
 *
 * One buffer of B bytes (floats), then a chain of 2 R ops alternating an
 * OpenCL kernel and a CPU kernel (each adds 1 to every element, so the
 * result is checked), in one run: every op on the other side needs the
 * buffer, so a plain buffer crosses 2 R times.  Kinds: plain
 * (mz_buffer_create), pinned (MZ_BUFFER_PINNED), zero copy
 * (MZ_BUFFER_ZERO_COPY) and the user's memory (mz_buffer_wrap of a
 * page-aligned array).  The kinds alternate within each repetition, so
 * they see the same load; the figure is the median of -r repetitions.
 *
 * For each kind and size it prints the run's time, its transfers and bytes
 * moved (mz_run_stats), and the effective rate: the bytes the chain would
 * move if every crossing were a copy (2 R B) over the time, so that a kind
 * that moves nothing shows as a higher rate rather than a division by zero;
 * then
 *   BENCH memory.kinds bytes=<B> kind=<k> s=<x> transfers=<n> eff_bytes_per_s=<r> vs_plain=<r/r_plain>
 *
 * Options: -r reps (default 5), -n crossings R (default 8), --quick (one
 * size of 1 MiB, 1 rep: the smoke test).  Devices "cpu:1,opencl:0"; run
 * with POCL_DEVICES=pthread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "maize.h"

static const char add1_src[] =
    "__kernel void add1(__global float *y, ulong n) { size_t i = get_global_id(0); if (i < n) y[i] += 1.0f; }\n";

static int add1_cpu(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] += 1.0f;
  return 0;
}

static void die(const char *what, int code) {
  fprintf(stderr, "memory_kinds: %s (%d)\n", what, code);
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { PLAIN, PINNED, ZERO_COPY, WRAPPED, NKINDS };
static const char *const kind_names[NKINDS] = {"plain", "pinned", "zero-copy", "wrapped"};

struct result {
  double s;
  uint64_t transfers, bytes;
};

/* One run of the chain on a fresh buffer of the kind; checks the result. */
static struct result run(mz_runtime *rt, mz_kernel *kc, mz_kernel *kl, int kind, size_t n, unsigned crossings,
                         float *user) {
  mz_buffer *b = NULL;
  int rc;
  for (size_t i = 0; i < n; i++) user[i] = 0.0f;
  if (kind == WRAPPED) rc = mz_buffer_wrap(rt, MZ_F32, 1, (size_t[]){n}, user, &b);
  else
    rc = mz_buffer_create_ex(rt, MZ_F32, 1, (size_t[]){n}, user,
                             kind == PINNED ? MZ_BUFFER_PINNED : kind == ZERO_COPY ? MZ_BUFFER_ZERO_COPY : 0, &b);
  if (rc) die(mz_runtime_last_error(rt), rc);
  mz_graph *g;
  if ((rc = mz_graph_create(rt, &g))) die("mz_graph_create", rc);
  mz_op *y = mz_value(g, b);
  for (unsigned i = 0; i < crossings; i++) {
    y = mz_unzip(g, mz_apply(g, kl, y, NULL), 0);
    y = mz_unzip(g, mz_apply(g, kc, y, NULL), 0);
  }
  if (mz_graph_status(g)) die(mz_graph_message(g), mz_graph_status(g));
  uint64_t t0 = now_ns();
  mz_future *f;
  if ((rc = mz_schedule(g, y, "eager", &f))) die(mz_runtime_last_error(rt), rc);
  if ((rc = mz_future_wait(f))) die(mz_future_message(f), rc);
  double s = (double)(now_ns() - t0) / 1e9;
  mz_run_stats st;
  mz_future_stats(f, &st);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  float *out = kind == WRAPPED ? user : malloc(n * sizeof *out);
  if (!out) die("out of memory", -2);
  if (kind != WRAPPED && (rc = mz_buffer_read(b, out, n * sizeof *out))) die("mz_buffer_read", rc);
  for (size_t i = 0; i < n; i += n / 97 + 1)
    if (out[i] != 2.0f * (float)crossings) die("wrong result", (int)i);
  if (out != user) free(out);
  mz_buffer_release(b);
  return (struct result){.s = s, .transfers = st.transfers, .bytes = st.bytes_moved};
}

int main(int argc, char **argv) {
  int reps = 5;
  unsigned crossings = 8;
  size_t sizes[] = {1u << 20, 16u << 20, 64u << 20};
  unsigned nsizes = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) crossings = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) {
      reps = 1;
      nsizes = 1;
    } else {
      fprintf(stderr, "usage: %s [-r reps] [-n crossings] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || crossings < 1) {
    fprintf(stderr, "memory_kinds: reps and crossings must be at least 1\n");
    return 2;
  }
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1,opencl:0", .quiet = true}, &rt);
  if (rc) {
    printf("memory_kinds: no CPU + OpenCL runtime here (%s): nothing to measure\n", mz_err_name(rc));
    return 0;
  }
  mz_kernel *kc, *kl;
  if ((rc = mz_kernel_create(rt, &(mz_kernel_spec){.name = "add1_cpu", .params = "inout f32[] y, u64 n = sizeof(y)",
                                                   .cpu = {.fn = add1_cpu}},
                             &kc)) ||
      (rc = mz_kernel_create(rt,
                             &(mz_kernel_spec){.name = "add1_cl", .params = "inout f32[] y, u64 n = sizeof(y)",
                                               .opencl = {.format = MZ_CODE_SOURCE, .data = add1_src, .entry = "add1"}},
                             &kl)))
    die(mz_runtime_last_error(rt), rc);
  char *log = NULL;
  if ((rc = mz_kernel_build(kl, NULL, &log))) die(log ? log : "build", rc);
  printf("memory kinds: a buffer crossing between the CPU and OpenCL %u times each way per run, median of %d\n",
         crossings, reps);
  printf("%10s %-10s %10s %10s %12s %14s %9s\n", "bytes", "kind", "run_s", "transfers", "bytes_moved", "eff_bytes/s",
         "vs_plain");
  for (unsigned si = 0; si < nsizes; si++) {
    size_t bytes = sizes[si], n = bytes / sizeof(float);
    float *user = NULL;
    if (posix_memalign((void **)&user, 4096, bytes)) die("out of memory", -2);
    double *t[NKINDS];
    struct result last[NKINDS];
    for (int k = 0; k < NKINDS; k++) {
      t[k] = calloc((size_t)reps, sizeof **t);
      if (!t[k]) die("out of memory", -2);
      run(rt, kc, kl, k, n, 1, user); /* warm-up: allocation paths, page faults */
    }
    for (int r = 0; r < reps; r++)
      for (int k = 0; k < NKINDS; k++) {
        last[k] = run(rt, kc, kl, k, n, crossings, user);
        t[k][r] = last[k].s;
      }
    double plain_rate = 0;
    for (int k = 0; k < NKINDS; k++) {
      qsort(t[k], (size_t)reps, sizeof *t[k], cmp_d);
      double s = t[k][reps / 2], rate = 2.0 * crossings * (double)bytes / s;
      if (k == PLAIN) plain_rate = rate;
      printf("%10zu %-10s %10.4f %10llu %12llu %14.3e %9.2f\n", bytes, kind_names[k], s,
             (unsigned long long)last[k].transfers, (unsigned long long)last[k].bytes, rate, rate / plain_rate);
      printf("BENCH memory.kinds bytes=%zu kind=%s s=%.5f transfers=%llu eff_bytes_per_s=%.4e vs_plain=%.3f\n", bytes,
             kind_names[k], s, (unsigned long long)last[k].transfers, rate, rate / plain_rate);
      free(t[k]);
    }
    free(user);
  }
  mz_kernel_destroy(kc);
  mz_kernel_destroy(kl);
  mz_runtime_destroy(rt);
  return 0;
}
