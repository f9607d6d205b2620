/* maize internals: the runtime's policy table (src/policy.c) and the
 * built-in policies (policies/builtin.c).  Thread: any; the table has its
 * own lock (rt->pol_lock). */
#ifndef MZ_POLICY_TABLE_H
#define MZ_POLICY_TABLE_H

#include <stdbool.h>

#include "maize.h"
#include "maize/policy.h"

struct mz__run;

/* Policy plumbing (src/policy.c). */
int mz__policy_find(mz_runtime *rt, const char *name, unsigned *idx);
int mz__policy_instance(mz_runtime *rt, unsigned idx, void **state);
/* The code a failed init or plan fails with: rc when it is an MZ_E* error
 * code, else MZ_EPOLICY (a policy's own value is never passed on as a
 * status nobody can name). */
int mz__policy_code(int rc);
/* After a run's plan: MZ_OK when the order the plan set (mz_task_set_after)
 * with the run's edges has no cycle; else the order is dropped (the counts
 * it added given back) and MZ_EPOLICY or MZ_ENOMEM is returned.  Only
 * before the run starts. */
int mz__plan_order_check(struct mz__run *r);
/* Whether po places a ready node on any idle queue that can run it (eager,
 * ws): then nodes only the CPU can run are shared among its workers, with
 * no select call (policies/builtin.c). */
bool mz__policy_shares(const struct mz_policy_ops *po);
/* The built-in policies, NULL-terminated (policies/builtin.c). */
extern const struct mz_policy_ops *const mz__builtin_policies[];

#endif
