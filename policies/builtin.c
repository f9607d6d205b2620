/* The built-in policies: the table every runtime registers at creation,
 * which of them share CPU work through the workers' stealing, and which
 * keep their plan for re-runs.  Above
 * the policies themselves (they use src/policy.c's API, never this). */
#include "policy_table.h"

extern const struct mz_policy_ops mz_policy_single, mz_policy_round_robin, mz_policy_eager, mz_policy_ws,
    mz_policy_dmda, mz_policy_dmdas, mz_policy_heft;

const struct mz_policy_ops *const mz__builtin_policies[] = {
    &mz_policy_single,
    &mz_policy_round_robin,
    &mz_policy_eager,
    &mz_policy_ws,
    &mz_policy_dmda,
    &mz_policy_dmdas,
    &mz_policy_heft,
    NULL,
};

/* single is left out: it promises one queue, so that a CPU-only run is
 * sequential. */
bool mz__policy_shares(const struct mz_policy_ops *po) {
  return po == &mz_policy_eager || po == &mz_policy_ws || po == &mz_policy_round_robin || po == &mz_policy_heft ||
         po == &mz_policy_dmda || po == &mz_policy_dmdas;
}

/* single's and round-robin's plans read the run's tasks and which
 * devices are alive.  heft's, dmda's and dmdas' read the tasks, edges,
 * devices, perf models and the queues' backlog at the plan's start; a
 * re-run starts once the graph's last run ended, so it finds the same
 * backlog unless other graphs' runs are in flight, a difference the kept
 * plan does not see. */
enum mz__plan_keep mz__policy_keeps_plan(const struct mz_policy_ops *po) {
  if (po == &mz_policy_single || po == &mz_policy_round_robin) return MZ__KEEP_DEVICES;
  if (po == &mz_policy_heft || po == &mz_policy_dmda || po == &mz_policy_dmdas) return MZ__KEEP_MODELS;
  return MZ__KEEP_NONE;
}

bool mz__policy_plan_sets_words(const struct mz_policy_ops *po) {
  return po->plan && po != &mz_policy_single && po != &mz_policy_round_robin;
}
