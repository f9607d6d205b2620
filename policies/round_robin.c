/* round-robin: queues in turn, skipping those that cannot run the node.
 *
 * It plans: the nodes of a run take the queues in turn in the run's
 * topological order, before any node starts, so chains on one device stay
 * ordered on the device, and a re-run of a built graph keeps the same
 * placement (mz_graph_run) until a device is lost or revived.  The turn
 * goes on from run to run.  select is asked only for a node the plan could
 * not place (no queue can run it: the runtime then reports that). */
#include <stdatomic.h>
#include <stdlib.h>

#include "maize/policy.h"

struct rr {
  _Atomic unsigned next;
};

static int rr_init(const mz_sched *s, void **state) {
  (void)s;
  struct rr *r = calloc(1, sizeof *r);
  if (!r) return -2; /* MZ_ENOMEM */
  *state = r;
  return 0;
}

static void rr_fini(void *state) { free(state); }

/* The queue after start (in turn) that can run t, or -1. */
static int rr_from(const mz_sched *s, mz_task *t, unsigned start) {
  unsigned n = mz_sched_queue_count(s);
  for (unsigned i = 0; i < n; i++) {
    unsigned q = (start + i) % n;
    if (mz_task_can_run(s, t, q)) return (int)q;
  }
  return -1;
}

static int rr_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct rr *r = state;
  /* One turn per node, taken together: runs planned at once on two
   * threads each get a stretch of turns. */
  unsigned start = atomic_fetch_add_explicit(&r->next, (unsigned)n, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) {
    int q = rr_from(s, tasks[i], start + (unsigned)i);
    if (q >= 0) (void)mz_task_set_queue(s, tasks[i], (unsigned)q);
  }
  return 0;
}

static int rr_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)ready;
  struct rr *r = state;
  int q = rr_from(s, t, atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed));
  return q >= 0 ? q : 0; /* the runtime reports that no device can run it */
}

const struct mz_policy_ops mz_policy_round_robin = {
    .abi = MZ_POLICY_ABI,
    .name = "round-robin",
    .description = "queues in turn",
    .init = rr_init,
    .fini = rr_fini,
    .plan = rr_plan,
    .select = rr_select,
};
