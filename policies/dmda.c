/* dmda: deque model data aware (after StarPU's dmda).  When a node is
 * ready, it goes to the queue where it is expected to finish first:
 *
 *   finish(q) = ready(q) + transfers(q) + expected(q)
 *
 * where ready(q) is when q will have done the work already given to it
 * (mz_sched_queue_ready_ns), transfers(q) the time to bring the node's
 * stale inputs to q's memory, and expected(q) the perf model's estimate.
 * While the model of some capable device is unsure (no estimate yet), the
 * node goes to the soonest-free such queue instead, so the model
 * calibrates (exploration); a kernel is explored once per device class and
 * size bucket, a few samples each.
 *
 * Deciding only at ready time is what makes the transfer and backlog terms
 * exact: the inputs are where they will be read from.  Ties go to the
 * lowest queue number, so runs on simulated devices are deterministic. */
#include <math.h>
#include <stdlib.h>

#include "maize/policy.h"

static int dmda_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  if (!ready) return MZ_POLICY_DEFER;
  unsigned nq = mz_sched_queue_count(s);
  double stack[256];
  double *xfer = nq <= 256 ? stack : malloc(nq * sizeof *xfer);
  if (xfer) mz_task_transfer_ns_all(s, t, xfer);
  int best = -1, explore = -1;
  double best_f = INFINITY;
  uint64_t explore_at = UINT64_MAX;
  /* Queues of one device class share an estimate: compute it once per run
   * of such queues (they are numbered consecutively). */
  unsigned last_cls = ~0u;
  double est = -1;
  for (unsigned q = 0; q < nq; q++) {
    if (!mz_task_can_run(s, t, q)) continue;
    unsigned cls = mz_sched_device_class(s, mz_sched_queue_device(s, q));
    if (cls != last_cls) {
      est = mz_task_expected_ns(s, t, q);
      last_cls = cls;
    }
    uint64_t at = mz_sched_queue_ready_ns(s, q);
    if (est < 0) {
      if (at < explore_at) {
        explore_at = at;
        explore = (int)q;
      }
      continue;
    }
    double f = (double)at + (xfer ? xfer[q] : 0) + est;
    if (f < best_f) {
      best_f = f;
      best = (int)q;
    }
  }
  if (xfer != stack) free(xfer);
  if (explore >= 0) return explore;
  return best >= 0 ? best : 0; /* 0: no queue can run it; the runtime says so */
}

const struct mz_policy_ops mz_policy_dmda = {
    .abi = MZ_POLICY_ABI,
    .name = "dmda",
    .description = "at ready time, the queue with the earliest expected finish (backlog + transfers + model)",
    .select = dmda_select,
};
