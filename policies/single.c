/* single: every node on one queue, the first that can run it (the
 * cuda-async default).  On a CPU-only runtime that is one worker, so the
 * run is sequential and needs no cross-queue synchronization at all. */
#include "maize/policy.h"

static int single_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)ready;
  unsigned n = mz_sched_queue_count(s);
  for (unsigned q = 0; q < n; q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0; /* the runtime reports that no device can run it */
}

const struct mz_policy_ops mz_policy_single = {
    .abi = MZ_POLICY_ABI,
    .name = "single",
    .description = "everything on the first queue that can run it",
    .select = single_select,
};
