/* eager: a ready node goes to the first free queue that can run it.
 *
 * A node whose predecessors are still running is deferred until it is
 * ready, except when it can follow its last predecessor on that queue and
 * the queue has nothing else waiting: then it is queued right behind it,
 * which hands a ready successor straight to the worker that ran its
 * predecessor and keeps device chains on the device.  When no queue is
 * free, the one with the smallest backlog wins. */
#include "maize/policy.h"

static int eager_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  unsigned np = mz_task_pred_count(t);
  if (np) {
    /* Follow the last predecessor onto its queue when that queue holds
     * nothing but this node's unfinished predecessors, and every unfinished
     * predecessor is there (so the node can wait for them on the queue).
     * Otherwise the node is placed when it is ready: two nodes fed by the
     * same predecessors would else pile onto one queue while another idles
     * (and a node queued behind a predecessor that has just finished must
     * not count as that predecessor). */
    int pq = mz_task_follow_queue(s, t, mz_task_queue(mz_task_pred(t, np - 1)));
    if (pq >= 0) return pq;
  }
  if (!ready) return MZ_POLICY_DEFER;
  /* The worker that finished the last predecessor, when it is free: no
   * wake-up, and the inputs are in its cache. */
  int cq = mz_sched_current_queue(s);
  if (cq >= 0 && mz_sched_queue_backlog(s, (unsigned)cq) == 0 && mz_task_can_run(s, t, (unsigned)cq)) return cq;
  unsigned n = mz_sched_queue_count(s);
  int best = -1;
  unsigned best_backlog = ~0u;
  for (unsigned q = 0; q < n; q++) {
    if (!mz_task_can_run(s, t, q)) continue;
    unsigned b = mz_sched_queue_backlog(s, q);
    if (b == 0) return (int)q;
    if (b < best_backlog) {
      best = (int)q;
      best_backlog = b;
    }
  }
  return best >= 0 ? best : 0;
}

const struct mz_policy_ops mz_policy_eager = {
    .abi = MZ_POLICY_ABI,
    .name = "eager",
    .description = "a ready node goes to the first free queue that can run it",
    .select = eager_select,
};
