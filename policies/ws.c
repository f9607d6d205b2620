/* ws: work stealing, as far as in-order device queues allow.
 *
 * A node stays with the worker that made its data: when it can be queued
 * right behind its main predecessor (the one whose output it reads most)
 * and that queue has nothing else to do, it follows it there, before it is
 * even ready.  Otherwise it waits until it is ready (MZ_POLICY_DEFER) and
 * is then taken by an idle queue of the same device kind as its home (the
 * main predecessor's queue), the nearest one first: the hwloc distance
 * between CPU cores (mz_sched_queue_distance), all equal on simulated and
 * most other devices.  When no queue is idle, the one with the least
 * backlog takes it, nearest first, so equal devices stay balanced.
 *
 * Limits, honestly: maize's queues are in-order device queues and the
 * policy API has no "queue is idle" hook, so a node handed to a queue
 * cannot be stolen back from it later.  Stealing happens at the only point
 * where a node is free, when it becomes ready: deferring every node that
 * cannot follow its predecessor keeps all of them free until then, and the
 * idle queues take them.  Nodes whose kind has no capable queue go to any
 * queue that can run them. */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "maize/policy.h"

struct ws {
  _Atomic unsigned next; /* where roots start looking, so they spread */
};

static int ws_init(const mz_sched *s, void **state) {
  (void)s;
  struct ws *w = calloc(1, sizeof *w);
  if (!w) return -2; /* MZ_ENOMEM */
  *state = w;
  return 0;
}

static void ws_fini(void *state) { free(state); }

/* The queue of the predecessor whose output t reads most, or -1. */
static int home_queue(mz_task *t) {
  unsigned np = mz_task_pred_count(t);
  int home = -1;
  size_t most = 0;
  for (unsigned i = 0; i < np; i++) {
    int q = mz_task_queue(mz_task_pred(t, i));
    if (q < 0) continue;
    size_t b = mz_task_edge_bytes(t, i);
    if (home < 0 || b > most) {
      home = q;
      most = b;
    }
  }
  return home;
}

static int ws_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  struct ws *w = state;
  int home = home_queue(t);
  if (!ready) {
    /* Behind its predecessors, when they are all on home and home holds
     * nothing else (a node queued behind one that just finished is not
     * that predecessor: two nodes must not pile onto one queue). */
    int f = home >= 0 ? mz_task_follow_queue(s, t, -1) : -1;
    return f == home && f >= 0 ? f : MZ_POLICY_DEFER;
  }
  unsigned nq = mz_sched_queue_count(s);
  int kind = home >= 0 ? mz_sched_device_kind(s, mz_sched_queue_device(s, (unsigned)home)) : -1;
  unsigned start = home >= 0 ? (unsigned)home : atomic_fetch_add_explicit(&w->next, 1, memory_order_relaxed) % nq;
  for (int pass = 0; pass < 2; pass++) {
    int best = -1;
    unsigned best_backlog = UINT_MAX, best_dist = UINT_MAX;
    for (unsigned i = 0; i < nq; i++) {
      unsigned q = (start + i) % nq;
      if (!mz_task_can_run(s, t, q)) continue;
      if (pass == 0 && kind >= 0 && mz_sched_device_kind(s, mz_sched_queue_device(s, q)) != kind) continue;
      unsigned b = mz_sched_queue_backlog(s, q);
      unsigned d = home >= 0 ? mz_sched_queue_distance(s, (unsigned)home, q) : 0;
      if (b < best_backlog || (b == best_backlog && d < best_dist)) {
        best = (int)q;
        best_backlog = b;
        best_dist = d;
      }
    }
    if (best >= 0) return best;
  }
  return 0; /* no queue can run it: the runtime reports it */
}

const struct mz_policy_ops mz_policy_ws = {
    .abi = MZ_POLICY_ABI,
    .name = "ws",
    .description = "work stealing at ready time: idle queues of the same kind take ready nodes, nearest first",
    .init = ws_init,
    .fini = ws_fini,
    .select = ws_select,
};
