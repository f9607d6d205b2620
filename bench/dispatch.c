/* mz-bench-dispatch: where the dispatch path spends its time, per phase.
 *
 * Builds a Task Bench stencil_1d graph (width W, T steps, empty CPU
 * kernels on 8-byte buffers: each task reads its neighbours' outputs of
 * the previous step and writes its own), schedules it and waits, and
 * prints nanoseconds per task for each phase: build (the builder calls),
 * schedule (mz_schedule: closure, hazards, commit, first placements),
 * exec (until mz_future_wait returns) and destroy (future and graph);
 * with --reruns N, also N re-runs of the built graph (mz_graph_run to the
 * end of each run: rerun_ns, per task and re-run).
 * The median of -r repetitions per phase.  Run it under callgrind to
 * count instructions per phase instead (bench/callgrind-dispatch.sh),
 * which is repeatable on a busy machine.
 *
 *   mz-bench-dispatch [-w W] [-t T] [-r R] [--reruns N] [--devices S]   */
#include <getopt.h>
#include <maize.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int empty_fn(const mz_call *c) {
  (void)c;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  unsigned W = 2, T = 1000, R = 5, N = 0;
  const char *devices = "cpu:2";
  static const struct option longopts[] = {{"width", required_argument, NULL, 'w'},
                                            {"steps", required_argument, NULL, 't'},
                                            {"reps", required_argument, NULL, 'r'},
                                            {"devices", required_argument, NULL, 'd'},
                                            {"reruns", required_argument, NULL, 'n'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-dispatch";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":w:t:r:d:n:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'w':
      if (!bench_arg_long(prog, "-w", optarg, 1, 4096, &num)) return 2;
      W = (unsigned)num;
      break;
    case 't':
      if (!bench_arg_long(prog, "-t", optarg, 1, 100000000, &num)) return 2;
      T = (unsigned)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, 100, &num)) return 2;
      R = (unsigned)num;
      break;
    case 'd': devices = optarg; break;
    case 'n':
      if (!bench_arg_long(prog, "--reruns", optarg, 0, 1000, &num)) return 2;
      N = (unsigned)num;
      break;
    case 'h':
      printf("usage: %s [-w|--width W] [-t|--steps T] [-r|--reps R] [-n|--reruns N] [-d|--devices S]\n", prog);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  mz_runtime *rt;
  mz_runtime_config cfg = {.devices = devices};
  if (mz_runtime_create(&cfg, &rt)) return 1;
  static const char *params[4] = {"out u8[] o", "in u8[] a, out u8[] o", "in u8[] a, in u8[] b, out u8[] o",
                                  "in u8[] a, in u8[] b, in u8[] c, out u8[] o"};
  mz_kernel *k[4];
  for (int i = 0; i < 4; i++) {
    mz_kernel_spec s = {.name = "stencil", .params = params[i], .cpu = {empty_fn, NULL}};
    if (mz_kernel_create(rt, &s, &k[i])) return 1;
  }
  size_t one = 8;
  mz_buffer **buf = calloc(2 * (size_t)W, sizeof *buf);
  mz_op **last = calloc(W, sizeof *last), **cur = calloc(W, sizeof *cur);
  uint64_t *ph[5];
  for (int i = 0; i < 5; i++) ph[i] = calloc(R, sizeof *ph[i]);
  if (!buf || !last || !cur || !ph[0] || !ph[1] || !ph[2] || !ph[3] || !ph[4]) return 1;
  for (unsigned i = 0; i < 2 * W; i++)
    if (mz_buffer_create(rt, MZ_U8, 1, &one, NULL, &buf[i])) return 1;
  int status = 0;
  for (unsigned r = 0; r < R; r++) {
    uint64_t t0 = now_ns();
    mz_graph *g;
    if (mz_graph_create(rt, &g)) return 1;
    for (unsigned p = 0; p < W; p++) cur[p] = mz_unzip(g, mz_apply(g, k[0], mz_value(g, buf[p]), NULL), 0);
    for (unsigned t = 1; t < T; t++) {
      mz_op **tmp = last;
      last = cur;
      cur = tmp;
      for (unsigned p = 0; p < W; p++) {
        mz_op *a[4];
        unsigned n = 0;
        for (int d = -1; d <= 1; d++) {
          long q = (long)p + d;
          if (q >= 0 && q < (long)W) a[n++] = last[q];
        }
        a[n] = mz_value(g, buf[(t % 2) * W + p]);
        cur[p] = mz_unzip(g, mz_apply(g, k[n], mz_zip(g, n + 1, a), NULL), n);
      }
    }
    mz_op *root = mz_join(g, W, cur);
    uint64_t t1 = now_ns();
    mz_future *f;
    if (mz_schedule(g, root, NULL, &f)) {
      fprintf(stderr, "mz_schedule: %s\n", mz_runtime_last_error(rt));
      return 1;
    }
    uint64_t t2 = now_ns();
    int st = mz_future_wait(f);
    uint64_t t3 = now_ns();
    if (st) status = st;
    mz_future_destroy(f);
    uint64_t t5 = now_ns();
    for (unsigned i = 0; i < N; i++) {
      if (mz_graph_run(g, root, NULL, &f)) {
        fprintf(stderr, "mz_graph_run: %s\n", mz_runtime_last_error(rt));
        return 1;
      }
      st = mz_future_wait(f);
      if (st) status = st;
      mz_future_destroy(f);
    }
    uint64_t t6 = now_ns();
    mz_graph_destroy(g);
    uint64_t t4 = now_ns();
    ph[4][r] = N ? (t6 - t5) / N : 0;
    t4 -= t6 - t5;
    ph[0][r] = t1 - t0;
    ph[1][r] = t2 - t1;
    ph[2][r] = t3 - t2;
    ph[3][r] = t4 - t3;
  }
  double n = (double)W * T;
  for (int i = 0; i < 5; i++) qsort(ph[i], R, sizeof *ph[i], cmp_u64);
  printf("stencil_1d width %u, %u steps, %u tasks, devices %s, median of %u\n", W, T, W * T, devices, R);
  printf("BENCH dispatch.stencil build_ns=%.0f schedule_ns=%.0f exec_ns=%.0f destroy_ns=%.0f total_ns=%.0f",
         ph[0][R / 2] / n, ph[1][R / 2] / n, ph[2][R / 2] / n, ph[3][R / 2] / n,
         (ph[0][R / 2] + ph[1][R / 2] + ph[2][R / 2] + ph[3][R / 2]) / n);
  if (N) printf(" rerun_ns=%.0f", ph[4][R / 2] / n);
  printf("\n");
  for (unsigned i = 0; i < 2 * W; i++) mz_buffer_release(buf[i]);
  for (int i = 0; i < 4; i++) mz_kernel_destroy(k[i]);
  for (int i = 0; i < 5; i++) free(ph[i]);
  free(buf);
  free(last);
  free(cur);
  mz_runtime_destroy(rt);
  if (status) fprintf(stderr, "a run failed: %s\n", mz_strerror(status));
  return status ? 1 : 0;
}
