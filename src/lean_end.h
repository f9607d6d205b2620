/* maize internals: the lean end of a node, inline on the CPU workers'
 * path.  A node of a lean run (struct mz__run.lean, objects/mz_run.h) that
 * succeeded on a CPU worker, untimed, ends here: what mz__task_finish
 * would do with it, less what cannot apply (copies, times, observers,
 * memory pins, poison while the runtime has had no failure, plan links
 * while the task has none).  Its successors of the same run that it makes
 * ready come back in ready[] (state QUEUED, as share() leaves them) for
 * the worker to run next; any other goes the common way.
 *
 * Inline because a re-run of a built graph is mostly this and the call of
 * the node's function: the worker's loop (devices/cpu/cpu.c) runs a chain
 * of such nodes without leaving its frame.  src/exec.c owns the rest of a
 * node's end and the cases this one sends there.
 *
 * Thread: a CPU worker of the node's runtime (or a waiter lending one),
 * whose queue ran the node.  Locks: none held on entry; the task's spinlock
 * is taken to publish DONE (objects/mz_op.h). */
#ifndef MZ_LEAN_END_H
#define MZ_LEAN_END_H

#include <stdatomic.h>
#include <stdbool.h>

#include "device_ops.h"
#include "exec.h"
#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"

/* The lean end of op, whose run's completions acct counts (the worker's
 * queue Q, which ran op, with acct->run == op's run) while the runtime has
 * no failure and op no plan link (mz__task_finish_lean, below, tests both
 * first), in three parts: the node's own end (mz__lean_done), the drop of
 * its successors' counts (mz__task_drop, objects/mz_op.h) and the hand-off
 * of those that became ready (mz__lean_ready); mz__lean_end makes all
 * three.  acct->done is counted last: the run may end with the published
 * count.
 *
 * mz__lean_done: op is DONE.  counted: op is in Q's backlog (see
 * mz__task_finish_lean). */
static inline void mz__lean_done(struct mz__queue *Q, struct mz__acct *acct, struct mz_op *op, bool counted) {
  struct mz__task *t = mz__task_of(op);
  acct->ops++;
  acct->batches++; /* a shared node is a batch of one */
  mz__spin_lock(&t->lock);
  t->exec.status = MZ_OK;
  atomic_store_explicit(&t->state, MZ__T_DONE, memory_order_release);
  mz__spin_unlock(&t->lock);
  if (counted) atomic_fetch_sub(&Q->backlog, 1); /* seq_cst, as in finish */
  if (__builtin_expect(atomic_load(&Q->npend) != 0, 0)) mz__queue_serve_pending(Q);
}

/* s, which a node of run r made ready, goes to ready[n] (QUEUED, for this
 * worker to run or share) when there is room and it may take the short
 * way (of r, shared, not canceled, no plan link), else the common way.
 * Returns the new count in ready[]. */
static inline unsigned mz__lean_ready(struct mz__run *r, struct mz_op *s, struct mz_op **ready, unsigned n,
                                      unsigned cap) {
  struct mz__task *st = mz__task_of(s);
  if (__builtin_expect(n < cap && st->run == r && st->shared &&
                           !atomic_load_explicit(&st->pred_failed, memory_order_acquire) &&
                           !mz__task_has_plan_next(st),
                       1)) {
    atomic_store_explicit(&st->state, MZ__T_QUEUED, memory_order_release);
    ready[n++] = s;
  } else {
    mz__task_ready_common(s);
  }
  return n;
}

/* All of it.  Returns the count in ready[].  Always inline: the worker
 * calls it from two places, and GCC would else keep one copy out of line,
 * a call per node on the re-run's path. */
static inline __attribute__((always_inline)) unsigned mz__lean_end(struct mz__queue *Q, struct mz__acct *acct,
                                                                   struct mz_op *op, bool counted,
                                                                   struct mz_op **ready, unsigned cap) {
  struct mz__task *t = mz__task_of(op);
  mz__lean_done(Q, acct, op, counted);
  /* Its successors, its run: fixed now that it is DONE (a later run adds
   * no edge to a task that is), so read once, not again after each store
   * the loop makes. */
  struct mz_op **sv = t->succs.v;
  unsigned sn = t->succs.n, n = 0;
  struct mz__run *r = t->run;
  /* A successor the replay has not reset yet (struct mz__run's resetting):
   * waited for before its count is dropped. */
  if (__builtin_expect(atomic_load_explicit(&r->resetting, memory_order_acquire), 0)) mz__run_wait_reset(sv, sn);
  for (unsigned i = 0; i < sn; i++)
    if (mz__task_drop(mz__task_of(sv[i]), 1)) n = mz__lean_ready(r, sv[i], ready, n, cap);
  acct->done++;
  return n;
}

/* The end of op, a node of a lean run (struct mz__run.lean) that
 * succeeded on the CPU worker of queue Q and was not timed: it is
 * finished, and up to cap successors of its run that it made ready are
 * returned in ready[] (already QUEUED: the caller runs them or shares them
 * with the workers, as ops->share would); others are handled as by
 * mz__task_finish.  counted: whether op is in Q's backlog (one taken from
 * the pool is not: its worker alone would have raised and dropped the
 * count); a fall-back to mz__task_finish counts it first.  Returns the
 * count in ready[]. */
static inline __attribute__((always_inline)) unsigned mz__task_finish_lean(struct mz__queue *Q, struct mz_op *op,
                                                                           bool counted, struct mz_op **ready,
                                                                           unsigned cap) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  if (__builtin_expect(atomic_load_explicit(&r->rt->poisoned, memory_order_relaxed) || mz__task_has_plan_next(t), 0)) {
    if (!counted) atomic_fetch_add_explicit(&Q->backlog, 1, memory_order_relaxed); /* finish drops it */
    mz__task_finish(op, MZ_OK);
    return 0;
  }
  struct mz__acct *acct = __builtin_expect(Q->acct.run == r, 1) ? &Q->acct : mz__queue_acct(Q, r);
  return mz__lean_end(Q, acct, op, counted, ready, cap);
}

#endif
