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
#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"

/* Whether t holds a node planned after it (mz_task_set_after), whose
 * release is left to mz__task_finish: never while t is as a replay left it
 * (replay_dirty), which spares the look. */
static inline bool mz__task_has_plan_next(struct mz__task *t) {
  if (!__atomic_load_n(&t->replay_dirty, __ATOMIC_RELAXED)) return false;
  struct mz__tcold *p = __atomic_load_n(&t->cold, __ATOMIC_ACQUIRE);
  return p && __atomic_load_n(&p->next, __ATOMIC_RELAXED) != NULL;
}

/* src/exec.c: a node of another run waiting for Q's slot (a pick policy's
 * pending list) is served, as after any node's end on Q. */
void mz__queue_serve_pending(struct mz__queue *Q);
/* src/exec.c: s, made ready by the lean end, goes the common way (another
 * run's, not shared, canceled, plan-linked, or past ready[]'s room). */
void mz__task_ready_common(struct mz_op *s);

/* The lean end of op, whose run's completions acct counts (the worker's
 * queue Q, which ran op, with acct->run == op's run) while the runtime has
 * no failure and op no plan link (mz__task_finish_lean tests both first).
 * counted: op is in Q's backlog (see mz__task_finish_lean).  Returns the
 * count in ready[]. */
static inline unsigned mz__lean_end(struct mz__queue *Q, struct mz__acct *acct, struct mz_op *op, bool counted,
                                    struct mz_op **ready, unsigned cap) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  acct->ops++;
  acct->batches++; /* a shared node is a batch of one */
  mz__spin_lock(&t->lock);
  t->status = MZ_OK;
  atomic_store_explicit(&t->state, MZ__T_DONE, memory_order_release);
  mz__spin_unlock(&t->lock);
  if (counted) atomic_fetch_sub(&Q->backlog, 1); /* seq_cst, as in finish */
  if (__builtin_expect(atomic_load(&Q->npend) != 0, 0)) mz__queue_serve_pending(Q);
  unsigned n = 0;
  for (unsigned i = 0; i < t->succs.n; i++) {
    struct mz_op *s = t->succs.v[i];
    struct mz__task *st = mz__task_of(s);
    /* The last count outstanding is this one: it was the others' to drop,
     * and none is added while a run is in flight (a cross-run edge is
     * counted while its run is scheduled, behind the run's gate), so no
     * locked instruction.  The acquire pairs with the other droppers' RMWs. */
    if (atomic_load_explicit(&st->unfin, memory_order_acquire) == 1)
      atomic_store_explicit(&st->unfin, 0, memory_order_relaxed);
    else if (atomic_fetch_sub_explicit(&st->unfin, 1, memory_order_acq_rel) != 1)
      continue;
    if (__builtin_expect(n < cap && st->run == r && st->shared &&
                             !atomic_load_explicit(&st->pred_failed, memory_order_acquire) &&
                             !mz__task_has_plan_next(st),
                         1)) {
      atomic_store_explicit(&st->state, MZ__T_QUEUED, memory_order_release);
      ready[n++] = s;
    } else {
      mz__task_ready_common(s);
    }
  }
  /* Last: the run may end with the published count. */
  acct->done++;
  return n;
}

#endif
