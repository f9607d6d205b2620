/* Helpers the core's Criterion tests share: runtimes on the CPU only (so
 * no test depends on OpenCL or CUDA), a check macro that prints the
 * runtime's last error, and a few small kernels' bodies. */
#ifndef MZ_TESTS_COMMON_H
#define MZ_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <maize.h>
#include <maize/policy.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "threads.h"

/* Assert that a maize call returned MZ_OK; on failure show the code's name
 * and the runtime's last message. */
#define MZ_OK_OR_DIE(rt, call)                                                                      \
  do {                                                                                              \
    int rc_ = (call);                                                                               \
    cr_assert_eq(rc_, MZ_OK, "%s: %s (%s)", #call, mz_err_name(rc_), mz_runtime_last_error(rt));    \
  } while (0)

/* A runtime with only CPU devices ("cpu", "cpu:1", "cpu:2"). */
static inline mz_runtime *test_runtime(const char *devices) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  cr_assert_not_null(rt);
  return rt;
}

/* A runtime that times every node (mz_future_timings needs it). */
static inline mz_runtime *test_runtime_timed(const char *devices) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true, .timings = true}, &rt);
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  cr_assert_not_null(rt);
  return rt;
}

static inline mz_kernel *test_kernel(mz_runtime *rt, const char *name, const char *params, mz_cpu_fn fn, void *user) {
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = name, .params = params, .cpu = {.fn = fn, .user = user}}, &k));
  return k;
}

static inline mz_buffer *test_buffer_1d(mz_runtime *rt, mz_dtype t, size_t n, const void *data) {
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, 1, (size_t[]){n}, data, &b));
  return b;
}

/* Schedule root and wait; returns the run's status.  The future is
 * returned through fout when not NULL (the caller destroys it). */
static inline int test_run(mz_graph *g, mz_op *root, const char *policy, mz_future **fout) {
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc) {
    if (fout) *fout = NULL;
    return rc;
  }
  int st = mz_future_wait(f);
  if (fout) *fout = f;
  else mz_future_destroy(f);
  return st;
}

static inline void test_sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts)) {
  }
}

static inline uint64_t test_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wait (at most timeout_ms) until *flag becomes non-zero. */
static inline bool test_wait_flag(_Atomic int *flag, unsigned timeout_ms) {
  uint64_t end = test_now_ns() + (uint64_t)timeout_ms * 1000000u;
  while (!atomic_load(flag)) {
    if (test_now_ns() > end) return false;
    test_sleep_ms(1);
  }
  return true;
}

#endif
