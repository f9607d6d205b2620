/* mz-soak: a soak test, run by scripts/soak.sh (not by CI's default run:
 * it takes minutes).
 *
 * Several threads, each in a loop until the deadline: create a runtime
 * (CPU workers, sometimes simulated devices), arm a random fault (an
 * allocation, a submission, a transfer or a kernel failing, or a device
 * dying), build a graph of random chains over a few buffers with kernels
 * that may fail on their own, schedule it once and run it again a few
 * times under random policies, wait for every future with a deadline
 * (a hang is reported with the thread, seed and iteration, and the program
 * exits 2), sometimes destroy a future before its run ends or leave it to
 * mz_runtime_destroy, check every result no failure touched against a
 * serial reference, and destroy the runtime.
 *
 * The main thread samples the resident set size every few seconds; at the
 * end the last quarter's median is compared with the second quarter's:
 * growth past 10% plus 8 MiB fails (exit 1), since a soak with flat memory
 * leaks nothing per iteration.
 *
 * Usage: mz-soak [--minutes M] [--threads T] [--seed S]
 * Prints one line per sample and a summary:
 *   SOAK minutes=M threads=T iterations=N runs=R futures=F failures_injected=K hangs=0 wrong=0 rss_start_mib=A rss_end_mib=B */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <maize.h>
#include <maize/policy.h>

#include "fault.h"

enum { N = 64, NBUF = 6, MAXSTEPS = 24, MAXSAMPLES = 4096 };

static double o_minutes = 1;
static int o_threads = 3;
static uint64_t o_seed = 1;

static _Atomic uint64_t n_iter, n_runs, n_futures, n_faults, n_wrong, n_hangs;
static _Atomic bool stop;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* "inout i32[] y, i32 add, i32 fail, u64 n = sizeof(y)": y += add, or
 * fails when fail is set (a kernel's own failure). */
static int step_fn(const mz_call *c) {
  if (c->args[2].i32) return MZ_EKERNEL;
  int32_t *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) y[i] += c->args[1].i32;
  return 0;
}

static bool wait_bounded(mz_future *f, int tid, uint64_t seed, uint64_t iter, int *status) {
  int st = mz_future_wait_for(f, 60ull * 1000000000ull);
  if (st == MZ_ETIMEDOUT) {
    fprintf(stderr, "mz-soak: HANG: thread %d, seed %" PRIu64 ", iteration %" PRIu64 ": a future did not resolve in 60 s\n",
            tid, seed, iter);
    atomic_fetch_add(&n_hangs, 1);
    return false;
  }
  *status = st;
  return true;
}

struct worker_arg {
  int tid;
};

static void *soak_thread(void *p) {
  struct worker_arg *a = p;
  uint64_t s = o_seed * 1000003u + (uint64_t)a->tid;
  const char *devsets[] = {"cpu:1", "cpu:2", "cpu:2;sim:gpu*2@speed=10,mem=64M,link=8G/s"};
  const char *faults[] = {"", "alloc:%u", "enqueue:%u", "transfer:%u", "kernel:%u", "dead:1@%u"};
  while (!atomic_load(&stop)) {
    uint64_t iter = atomic_fetch_add(&n_iter, 1), seed = s;
    rnd(&s);
    int dset = (int)(rnd(&s) % 3);
    mz_runtime *rt = NULL;
    if (mz_runtime_create(&(mz_runtime_config){.devices = devsets[dset], .quiet = true}, &rt)) {
      fprintf(stderr, "mz-soak: mz_runtime_create(%s) failed\n", devsets[dset]);
      atomic_fetch_add(&n_wrong, 1);
      continue;
    }
    int fk = (int)(rnd(&s) % 6);
    if (fk == 5 && dset != 2) fk = 4; /* device 1 exists with the simulated GPUs only */
    char spec[64];
    snprintf(spec, sizeof spec, faults[fk], (unsigned)(1 + rnd(&s) % 40));
    bool faulty = fk != 0;
    if (faulty && mz__faults_set(rt, spec) == MZ_OK) atomic_fetch_add(&n_faults, 1);
    mz_kernel *k = NULL;
    mz_buffer *b[NBUF] = {0};
    mz_graph *g = NULL;
    int32_t ref[NBUF][N];
    int crc = mz_kernel_create(rt,
                               &(mz_kernel_spec){.name = "step", .params = "inout i32[] y, i32 add, i32 fail, u64 n = sizeof(y)",
                                                 .cpu = {.fn = step_fn}},
                               &k);
    for (int i = 0; i < NBUF && !crc; i++) {
      for (int j = 0; j < N; j++) ref[i][j] = (int32_t)(rnd(&s) % 1000);
      crc = mz_buffer_create(rt, MZ_I32, 1, (size_t[]){N}, ref[i], &b[i]);
    }
    if (!crc) crc = mz_graph_create(rt, &g);
    if (crc) {
      fprintf(stderr, "mz-soak: setting up failed: %s\n", mz_err_name(crc));
      atomic_fetch_add(&n_wrong, 1);
      mz_runtime_destroy(rt);
      continue;
    }
    int nsteps = 1 + (int)(rnd(&s) % MAXSTEPS);
    int adds[MAXSTEPS], bufs[MAXSTEPS];
    bool kernel_fails = rnd(&s) % 8 == 0;
    mz_op *ends[NBUF] = {0};
    unsigned nends = 0;
    for (int i = 0; i < nsteps; i++) {
      bufs[i] = (int)(rnd(&s) % NBUF);
      adds[i] = (int)(rnd(&s) % 7);
      int fail = kernel_fails && i == nsteps / 2;
      mz_op *op = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, b[bufs[i]]), mz_i32(g, adds[i]), mz_i32(g, fail)}), NULL);
      ends[bufs[i]] = mz_unzip(g, op, 0);
    }
    mz_op *roots[NBUF];
    for (int i = 0; i < NBUF; i++)
      if (ends[i]) roots[nends++] = ends[i];
    mz_op *root = mz_join(g, nends, roots);
    /* Checked against the reference: no fault, and no simulated device
     * (they model time, not data). */
    bool clean = !faulty && !kernel_fails && dset != 2;
    int nruns = 1 + (int)(rnd(&s) % 4);
    mz_future *leftover = NULL;
    for (int r = 0; r < nruns; r++) {
      const char *pol = mz_policy_name(rt, (unsigned)(rnd(&s) % 6));
      mz_future *f = NULL;
      int rc = r == 0 ? mz_schedule(g, root, pol, &f) : mz_graph_run(g, root, pol, &f);
      if (rc) {
        fprintf(stderr, "mz-soak: thread %d seed %" PRIu64 " iteration %" PRIu64 ": schedule failed: %s\n", a->tid,
                seed, iter, mz_err_name(rc));
        atomic_fetch_add(&n_wrong, 1);
        break;
      }
      atomic_fetch_add(&n_runs, 1);
      atomic_fetch_add(&n_futures, 1);
      if (rnd(&s) % 5 == 0) { /* destroyed before its run ends */
        mz_future_destroy(f);
        continue;
      }
      if (r == nruns - 1 && rnd(&s) % 4 == 0) { /* left to mz_runtime_destroy */
        leftover = f;
        break;
      }
      int st = 0;
      if (!wait_bounded(f, a->tid, seed, iter, &st)) exit(2);
      if (!faulty && !kernel_fails && st != MZ_OK) {
        fprintf(stderr, "mz-soak: thread %d seed %" PRIu64 " iteration %" PRIu64 ": a run with no fault failed: %s: %s\n",
                a->tid, seed, iter, mz_err_name(st), mz_future_message(f));
        atomic_fetch_add(&n_wrong, 1);
      }
      mz_future_destroy(f);
    }
    (void)leftover;
    /* Every run of the graph added each step once: check the buffers a
     * fault-free iteration wrote, against the serial reference. */
    if (clean && !leftover) {
      if (mz_runtime_wait_idle(rt) == MZ_OK) {
        for (int i = 0; i < NBUF; i++) {
          int32_t want[N], got[N];
          memcpy(want, ref[i], sizeof want);
          int adds_total = 0;
          for (int t = 0; t < nsteps; t++)
            if (bufs[t] == i) adds_total += adds[t];
          (void)adds_total;
          if (mz_buffer_read(b[i], got, sizeof got) != MZ_OK) {
            atomic_fetch_add(&n_wrong, 1);
            continue;
          }
          /* Runs destroyed early still ran: the number of runs that
           * finished is nruns (every run runs to its end). */
          for (int j = 0; j < N; j++) want[j] += adds_total * nruns;
          if (memcmp(want, got, sizeof got)) {
            fprintf(stderr, "mz-soak: thread %d seed %" PRIu64 " iteration %" PRIu64 ": buffer %d differs from the serial reference\n",
                    a->tid, seed, iter, i);
            atomic_fetch_add(&n_wrong, 1);
          }
        }
      }
    }
    /* Random teardown order: the runtime frees what is left. */
    if (rnd(&s) % 2) {
      mz_graph_destroy(g);
      for (int i = 0; i < NBUF; i++) mz_buffer_release(b[i]);
      mz_kernel_destroy(k);
    }
    mz_runtime_destroy(rt);
  }
  return NULL;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median_of(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--minutes") && i + 1 < argc) o_minutes = strtod(argv[++i], NULL);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) o_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) o_seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--help")) {
      printf("usage: mz-soak [--minutes M] [--threads T] [--seed S]\n");
      return 0;
    } else {
      fprintf(stderr, "usage: mz-soak [--minutes M] [--threads T] [--seed S]\n");
      return 2;
    }
  }
  if (!(o_minutes > 0 && o_minutes <= 10000) || o_threads < 1 || o_threads > 64) {
    fprintf(stderr, "mz-soak: --minutes must be in (0, 10000] and --threads in 1..64\n");
    return 2;
  }
  pthread_t th[64];
  struct worker_arg args[64];
  for (int i = 0; i < o_threads; i++) {
    args[i].tid = i;
    if (pthread_create(&th[i], NULL, soak_thread, &args[i])) {
      fprintf(stderr, "mz-soak: pthread_create failed\n");
      return 1;
    }
  }
  static double samples[MAXSAMPLES];
  size_t ns = 0;
  uint64_t t0 = now_ns(), end = t0 + (uint64_t)(o_minutes * 60e9);
  uint64_t period = (uint64_t)(o_minutes * 60e9 / 64);
  if (period < 1000000000ull) period = 1000000000ull;
  while (now_ns() < end) {
    struct timespec ts = {.tv_sec = (time_t)(period / 1000000000u), .tv_nsec = (long)(period % 1000000000u)};
    nanosleep(&ts, NULL);
    double r = rss_mib();
    if (ns < MAXSAMPLES) samples[ns++] = r;
    printf("t=%6.1fs rss=%7.1f MiB iterations=%" PRIu64 " runs=%" PRIu64 "\n", (double)(now_ns() - t0) * 1e-9, r,
           atomic_load(&n_iter), atomic_load(&n_runs));
    fflush(stdout);
  }
  atomic_store(&stop, true);
  for (int i = 0; i < o_threads; i++) pthread_join(th[i], NULL);
  size_t q = ns / 4;
  double early = q ? median_of(samples + q, q) : (ns ? samples[0] : 0);
  double late = q ? median_of(samples + ns - q, q) : (ns ? samples[ns - 1] : 0);
  bool grew = late > early * 1.10 + 8;
  printf("SOAK minutes=%.1f threads=%d iterations=%" PRIu64 " runs=%" PRIu64 " futures=%" PRIu64
         " failures_injected=%" PRIu64 " hangs=%" PRIu64 " wrong=%" PRIu64 " rss_start_mib=%.1f rss_end_mib=%.1f%s\n",
         o_minutes, o_threads, atomic_load(&n_iter), atomic_load(&n_runs), atomic_load(&n_futures),
         atomic_load(&n_faults), atomic_load(&n_hangs), atomic_load(&n_wrong), early, late,
         grew ? " (memory grew)" : "");
  return grew || atomic_load(&n_wrong) || atomic_load(&n_hangs) ? 1 : 0;
}
