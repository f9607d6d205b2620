/* mz-bench-memory: memory per task at a million tasks, as peak RSS.
 *
 * Two shapes, each in a child process of its own (peak RSS is a process's
 * high-water mark, so one shape must not inherit the other's):
 *
 *  plain      N independent applies of an empty CPU kernel with one i32
 *             scalar argument, joined: the smallest task maize has.
 *  taskbench  a Task Bench stencil_1d-shaped graph, width W and N / W
 *             steps: each task is an apply of a kernel on a zip of a
 *             scalar, the two neighbour points of the previous step and
 *             its own output (maize-bench's Task Bench system builds
 *             a task alike, but takes its inputs as the producers'
 *             results, mz_unzip, and gives each task a scalar id of its
 *             own), buffers of 16 bytes.
 *
 * The figure is (peak RSS after build and run - RSS before the build) / N:
 * everything the graph, the run and the runtime hold per task, measured
 * by the kernel rather than counted by maize.  The runtime is created and
 * warmed up, and the program's own array of the N ops written, before the
 * baseline is read.
 *
 * Usage: mz-bench-memory [--tasks N] [--quick] [--only SHAPE]
 *   (default 1,000,000 tasks; quick 100,000; --only plain|taskbench measures
 *   that shape alone, in this process: what bench/callgrind-build.sh counts)
 * Last lines: BENCH memory.<shape> tasks=<N> bytes_per_task=<x> peak_rss_mib=<y> build_ns=<per task> run_ns=<per task> */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "maize.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Resident set now, in bytes (/proc/self/statm's second field). */
static double rss_now(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  fclose(f);
  return (double)res * (double)sysconf(_SC_PAGESIZE);
}

static double rss_peak(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0;
}

static int empty(const mz_call *c) {
  (void)c;
  return 0;
}

static void die(mz_runtime *rt, const char *what, int rc) {
  fprintf(stderr, "mz-bench-memory: %s: %s (%s)\n", what, mz_err_name(rc), rt ? mz_runtime_last_error(rt) : "");
  exit(1);
}

static int run_root(mz_graph *g, mz_op *root) {
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, "eager", &f);
  if (rc == MZ_OK) rc = mz_future_wait(f);
  mz_future_destroy(f);
  return rc;
}

/* One shape, in this (child) process. */
static int measure(const char *shape, size_t n) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true}, &rt);
  if (rc) die(NULL, "mz_runtime_create", rc);
  bool plain = !strcmp(shape, "plain");
  mz_kernel *k = NULL;
  mz_kernel_spec ks = {.name = plain ? "empty" : "stencil",
                       .params = plain ? "i32 k" : "u64 t, in u8[] a, in u8[] b, out u8[] o",
                       .cpu = {.fn = empty}};
  if ((rc = mz_kernel_create(rt, &ks, &k))) die(rt, "mz_kernel_create", rc);
  size_t width = 1000, steps = (n + width - 1) / width;
  if (!plain) n = width * steps;
  mz_buffer **bufs = NULL;
  if (!plain) {
    bufs = calloc(2 * width, sizeof *bufs);
    if (!bufs) die(rt, "calloc", MZ_ENOMEM);
    for (size_t i = 0; i < 2 * width; i++)
      if ((rc = mz_buffer_create(rt, MZ_U8, 1, (size_t[]){16}, NULL, &bufs[i]))) die(rt, "mz_buffer_create", rc);
  }
  mz_op **ops = malloc(n * sizeof *ops);
  if (!ops) die(rt, "malloc", MZ_ENOMEM);
  /* Warm up: a small graph of the same shape, so thread stacks, the arena's
   * first chunks and the allocator's pools are in the baseline. */
  {
    mz_graph *g = NULL;
    if ((rc = mz_graph_create(rt, &g))) die(rt, "mz_graph_create", rc);
    for (size_t i = 0; i < 1000; i++) ops[i] = mz_apply(g, k, plain ? mz_i32(g, 0) : mz_zip(g, 4, (mz_op *[]){mz_u64(g, 0), mz_value(g, bufs[0]), mz_value(g, bufs[1]), mz_value(g, bufs[width])}), NULL);
    if ((rc = run_root(g, mz_join(g, 1000, ops)))) die(rt, "warm-up run", rc);
    mz_graph_destroy(g);
  }
  /* The caller's array of the n ops is the program's, not maize's: its
   * pages are in the baseline (written here), so that the figure is what
   * maize holds per task. */
  memset(ops, 0, n * sizeof *ops);
  double base = rss_now();
  uint64_t t0 = now_ns();
  mz_graph *g = NULL;
  if ((rc = mz_graph_create(rt, &g))) die(rt, "mz_graph_create", rc);
  if (plain) {
    mz_op *arg = mz_i32(g, 0);
    for (size_t i = 0; i < n; i++) ops[i] = mz_apply(g, k, arg, NULL);
  } else {
    for (size_t t = 0; t < steps; t++)
      for (size_t p = 0; p < width; p++) {
        mz_buffer **prev = bufs + (t % 2) * width, **cur = bufs + ((t + 1) % 2) * width;
        size_t l = p ? p - 1 : p, r = p + 1 < width ? p + 1 : p;
        mz_op *args[] = {mz_u64(g, t), mz_value(g, prev[l]), mz_value(g, prev[r]), mz_value(g, cur[p])};
        ops[t * width + p] = mz_apply(g, k, mz_zip(g, 4, args), NULL);
      }
  }
  mz_op *root = plain ? mz_join(g, (unsigned)n, ops) : mz_join(g, (unsigned)width, ops + (steps - 1) * width);
  if ((rc = mz_graph_status(g))) die(rt, "building the graph", rc);
  uint64_t t1 = now_ns();
  if ((rc = run_root(g, root))) die(rt, "the run", rc);
  uint64_t t2 = now_ns();
  double peak = rss_peak();
  double per = (peak - base) / (double)n;
  printf("%-9s %8zu tasks: RSS before build %.1f MiB, peak %.1f MiB: %.0f bytes per task "
         "(build %.0f ns, run %.0f ns per task)\n",
         shape, n, base / 1048576.0, peak / 1048576.0, per, (double)(t1 - t0) / (double)n,
         (double)(t2 - t1) / (double)n);
  printf("BENCH memory.%s tasks=%zu bytes_per_task=%.0f peak_rss_mib=%.1f build_ns=%.0f run_ns=%.0f\n", shape, n, per,
         peak / 1048576.0, (double)(t1 - t0) / (double)n, (double)(t2 - t1) / (double)n);
  fflush(stdout);
  mz_graph_destroy(g);
  for (size_t i = 0; bufs && i < 2 * width; i++) mz_buffer_release(bufs[i]);
  free(bufs);
  free(ops);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  return 0;
}

int main(int argc, char **argv) {
  size_t n = 1000000;
  const char *only = NULL;
  static const struct option opts[] = {{"tasks", required_argument, 0, 'n'}, {"quick", no_argument, 0, 'q'},
                                       {"only", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "n:qo:h", opts, NULL)) != -1) {
    char *end;
    switch (c) {
    case 'n':
      n = strtoull(optarg, &end, 10);
      if (*end || n < 1000 || n > 100000000) {
        fprintf(stderr, "mz-bench-memory: --tasks: a count from 1000 to 100000000, not '%s'\n", optarg);
        return 2;
      }
      break;
    case 'q': n = 100000; break;
    case 'o':
      if (strcmp(optarg, "plain") && strcmp(optarg, "taskbench")) {
        fprintf(stderr, "mz-bench-memory: --only: plain or taskbench, not '%s'\n", optarg);
        return 2;
      }
      only = optarg;
      break;
    case 'h':
      printf("usage: mz-bench-memory [--tasks N] [--quick] [--only plain|taskbench]\n"
             "  peak RSS per task for N plain and N Task Bench stencil tasks (default 1000000; --quick 100000);\n"
             "  --only: one shape, in this process (no child)\n");
      return 0;
    default: return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "mz-bench-memory: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (only) return measure(only, n);
  printf("mz-bench-memory: peak RSS per task, each shape in its own process (targets: <= 128 B plain, "
         "<= 256 B Task Bench)\n");
  fflush(stdout);
  const char *shapes[] = {"plain", "taskbench"};
  for (int i = 0; i < 2; i++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("mz-bench-memory: fork");
      return 1;
    }
    if (pid == 0) _exit(measure(shapes[i], n));
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "mz-bench-memory: the %s measurement failed\n", shapes[i]);
      return 1;
    }
  }
  return 0;
}
