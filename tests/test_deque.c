/* The work-stealing deque (src/deque.h) on its own: an owner that pushes
 * and takes, one at a time and several at once (mz__deque_push_rev,
 * mz__deque_take_some),
 * while thieves steal.  Every task must come out exactly once, and the
 * owner's takes must come newest first.  The plain build checks the counts;
 * the TSan build (CI) checks the orderings the deque's comment claims. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "deque.h"

TestSuite(deque, .timeout = 120);

#define NTASKS 200000
#define NTHIEVES 2

struct shared {
  struct mz__deque dq;
  _Atomic unsigned char seen[NTASKS + 1]; /* task i is the pointer value i (never 0) */
  _Atomic bool done;
  _Atomic unsigned started; /* thieves running */
  _Atomic uint64_t stolen;
  _Atomic uint64_t live; /* steals so far */
};

static void mark(struct shared *s, struct mz_op *op) {
  uintptr_t i = (uintptr_t)op;
  cr_assert(i >= 1 && i <= NTASKS, "a task that was never pushed came out: %zu", (size_t)i);
  unsigned char was = atomic_fetch_add_explicit(&s->seen[i], 1, memory_order_relaxed);
  cr_assert_eq(was, 0, "task %zu came out twice", (size_t)i);
}

static void *thief(void *arg) {
  struct shared *s = arg;
  uint64_t n = 0;
  atomic_fetch_add(&s->started, 1);
  while (!atomic_load_explicit(&s->done, memory_order_acquire) || mz__deque_busy(&s->dq)) {
    struct mz_op *op = mz__deque_steal(&s->dq);
    if (op) {
      mark(s, op);
      n++;
      atomic_fetch_add_explicit(&s->live, 1, memory_order_relaxed);
    }
  }
  atomic_fetch_add(&s->stolen, n);
  return NULL;
}

/* The owner pushes bursts of 1 to 40 tasks (one at a time, or at once
 * with mz__deque_push_rev) and takes some of them back
 * between bursts (one at a time or up to k at once), so the deque is
 * often near empty, where the owner and the thieves race for the last
 * tasks, and sometimes holds enough for take_some's batched path. */
static void run_owner(struct shared *s, unsigned k) {
  uintptr_t next = 1;
  unsigned seed = 12345;
  uint64_t taken = 0;
  /* The thieves run before the owner starts, and now and then the owner
   * waits for a steal, so that they steal even where the threads share a
   * core. */
  while (atomic_load(&s->started) < NTHIEVES) sched_yield();
  for (unsigned round = 0; next <= NTASKS; round++) {
    if (round % 64 == 63) {
      uint64_t seen = atomic_load_explicit(&s->live, memory_order_relaxed);
      while (atomic_load_explicit(&s->live, memory_order_relaxed) == seen && mz__deque_busy(&s->dq)) sched_yield();
    }
    seed = seed * 1103515245u + 12345u;
    unsigned burst = 1 + (seed >> 16) % 40;
    /* What the deque held before this burst: the burst's tasks lie above. */
    if (burst % 2) {
      for (unsigned i = 0; i < burst && next <= NTASKS; i++)
        cr_assert(mz__deque_push(&s->dq, (struct mz_op *)next++), "push failed (ENOMEM)");
    } else {
      /* As one publication: v[n - 1] goes in first, so it is the oldest. */
      struct mz_op *v[40];
      unsigned n = next + burst <= NTASKS + 1 ? burst : (unsigned)(NTASKS + 1 - next);
      for (unsigned i = 0; i < n; i++) v[n - 1 - i] = (struct mz_op *)(next + i);
      cr_assert(mz__deque_push_rev(&s->dq, v, n), "push_rev failed (ENOMEM)");
      next += n;
    }
    unsigned takes = (seed >> 8) % 4;
    for (unsigned j = 0; j < takes; j++) {
      struct mz_op *out[16];
      unsigned n = k ? mz__deque_take_some(&s->dq, out, k) : ((out[0] = mz__deque_take(&s->dq)) != NULL);
      cr_assert_leq(n, k ? k : 1u);
      for (unsigned i = 0; i < n; i++) {
        /* Newest last: the owner takes at the bottom. */
        if (i) cr_assert_gt((uintptr_t)out[i], (uintptr_t)out[i - 1], "take_some's tasks are not newest last");
        mark(s, out[i]);
      }
      taken += n;
    }
  }
  /* Drain what is left, racing the thieves. */
  for (;;) {
    struct mz_op *out[16];
    unsigned n = k ? mz__deque_take_some(&s->dq, out, k) : ((out[0] = mz__deque_take(&s->dq)) != NULL);
    if (!n) break;
    for (unsigned i = 0; i < n; i++) mark(s, out[i]);
    taken += n;
  }
  atomic_store_explicit(&s->done, true, memory_order_release);
  cr_log_info("k=%u: owner took %llu", k, (unsigned long long)taken);
}

static void check(unsigned k) {
  struct shared *s = calloc(1, sizeof *s);
  cr_assert_not_null(s);
  cr_assert(mz__deque_init(&s->dq, 16)); /* small: the owner's pushes grow it */
  pthread_t th[NTHIEVES];
  for (int i = 0; i < NTHIEVES; i++) cr_assert_eq(pthread_create(&th[i], NULL, thief, s), 0);
  run_owner(s, k);
  for (int i = 0; i < NTHIEVES; i++) pthread_join(th[i], NULL);
  for (size_t i = 1; i <= NTASKS; i++) cr_assert_eq(atomic_load(&s->seen[i]), 1, "task %zu never came out", i);
  cr_assert_gt(atomic_load(&s->stolen), 0, "no task was stolen: the race was not exercised");
  mz__deque_fini(&s->dq);
  free(s);
}

Test(deque, one_at_a_time_with_thieves) { check(0); }
Test(deque, several_at_once_with_thieves) { check(8); }
Test(deque, take_some_of_one) { check(1); }

/* Alone, take_some takes at most half of what the deque holds (the rest
 * stays for thieves), at most k, newest last, and 0 from an empty deque. */
Test(deque, take_some_leaves_half) {
  struct mz__deque dq;
  cr_assert(mz__deque_init(&dq, 4));
  struct mz_op *out[8];
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 0);
  for (uintptr_t i = 1; i <= 20; i++) cr_assert(mz__deque_push(&dq, (struct mz_op *)i));
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 8);
  for (unsigned i = 0; i < 8; i++) cr_assert_eq((uintptr_t)out[i], 13 + i);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 6); /* 12 left: half */
  cr_assert_eq((uintptr_t)out[0], 7);
  cr_assert_eq((uintptr_t)out[5], 12);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 3);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 1); /* 3 left: one, as take */
  cr_assert_eq((uintptr_t)out[0], 3);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 1);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 1);
  cr_assert_eq((uintptr_t)out[0], 1);
  cr_assert_eq(mz__deque_take_some(&dq, out, 8), 0);
  mz__deque_fini(&dq);
}
