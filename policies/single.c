/* single: every node on one queue, the first that can run it (the
 * cuda-async default).  On a CPU-only runtime that is one worker, so the
 * run is sequential and needs no cross-queue synchronization at all.
 *
 * It plans: the choice depends on the node and the devices alone, so it
 * is made once per run, before any node starts, and a re-run of a built
 * graph keeps it (mz_graph_run) until a device is lost or revived.  select
 * is asked only for a node the plan could not place (no queue can run it:
 * the runtime then reports that). */
#include "maize/policy.h"

static int first_queue(const mz_sched *s, mz_task *t) {
  unsigned n = mz_sched_queue_count(s);
  for (unsigned q = 0; q < n; q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return -1;
}

static int single_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  (void)state;
  for (size_t i = 0; i < n; i++) {
    int q = first_queue(s, tasks[i]);
    if (q >= 0) (void)mz_task_set_queue(s, tasks[i], (unsigned)q);
  }
  return 0;
}

static int single_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)ready;
  int q = first_queue(s, t);
  return q >= 0 ? q : 0; /* the runtime reports that no device can run it */
}

const struct mz_policy_ops mz_policy_single = {
    .abi = MZ_POLICY_ABI,
    .name = "single",
    .description = "everything on the first queue that can run it",
    .plan = single_plan,
    .select = single_select,
};
