/* round-robin: queues in turn, skipping those that cannot run the node.
 * Decides as soon as a node can be submitted, so chains on one device stay
 * ordered on the device. */
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

static int rr_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)ready;
  struct rr *r = state;
  unsigned n = mz_sched_queue_count(s);
  unsigned start = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
  for (unsigned i = 0; i < n; i++) {
    unsigned q = (start + i) % n;
    if (mz_task_can_run(s, t, q)) return (int)q;
  }
  return 0;
}

const struct mz_policy_ops mz_policy_round_robin = {
    .abi = MZ_POLICY_ABI,
    .name = "round-robin",
    .description = "queues in turn",
    .init = rr_init,
    .fini = rr_fini,
    .select = rr_select,
};
