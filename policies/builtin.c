/* The built-in policies: the table every runtime registers at creation,
 * and which of them share CPU work through the workers' stealing.  Above
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

bool mz__policy_shares(const struct mz_policy_ops *po) { return po == &mz_policy_eager || po == &mz_policy_ws; }
