/* maize internals: the runtime's policy table (src/policy.c) and the
 * built-in policies (policies/builtin.c).  Thread: any; the table has its
 * own lock (rt->pol_lock). */
#ifndef MZ_POLICY_TABLE_H
#define MZ_POLICY_TABLE_H

#include <stdbool.h>
#include <stdint.h>

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
/* A run's plan as its policy left it, kept so that a re-run of the same
 * tasks under the same policy need not plan again (graph/lower.c): per
 * task of the run, in the run's order, its queue (-1: none fixed), the
 * task planned before it on that queue (mz_task_set_after; NULL: none),
 * its policy word, and its expected times (mz_task_set_expected_times)
 * counted from the runtime clock at the plan's start; the queues alone
 * when no task has more.  One malloc'd block (free() frees it). */
struct mz__plan_copy;
/* r's plan (NULL: out of memory, or no task); clock0: the runtime clock
 * at the plan's start.  Before the run starts. */
struct mz__plan_copy *mz__plan_save(const struct mz__run *r, uint64_t clock0);
/* Set r's tasks as p says (which mz__plan_save made of a run of the same
 * tasks in the same order), the times shifted to clock0: true.  false,
 * with nothing set, when a task's cold record cannot be made.  Before the
 * run starts, once it reset the tasks' placements (graph/lower.c). */
bool mz__plan_restore(struct mz__run *r, const struct mz__plan_copy *p, uint64_t clock0);
/* Whether po's plan may be kept for re-runs (policies/builtin.c), and
 * for how long: MZ__KEEP_DEVICES while the devices stay as they were
 * (single, round-robin: their plan reads the run's tasks and the devices
 * alone), MZ__KEEP_MODELS while the perf models' estimates do too (heft,
 * dmda, dmdas).  A user's plan is always called: it may count runs or
 * keep per-run state. */
enum mz__plan_keep { MZ__KEEP_NONE, MZ__KEEP_DEVICES, MZ__KEEP_MODELS };
enum mz__plan_keep mz__policy_keeps_plan(const struct mz_policy_ops *po);
/* Whether po's plan may set a policy word on a task
 * (mz_task_policy_data): the run then keeps an exec record for every task
 * (src/observe.c).  The shipped single and round-robin set none. */
bool mz__policy_plan_sets_words(const struct mz_policy_ops *po);
/* Whether po's choice among the CPU workers is a preference that stealing
 * may override (eager, ws, round-robin, heft, dmda, dmdas): nodes only the
 * CPU can run are shared among the workers, with no select call; a run
 * made of such nodes alone has no choice to make and is not planned
 * either (policies/builtin.c).  A user's policy is always asked. */
bool mz__policy_shares(const struct mz_policy_ops *po);
/* The built-in policies, NULL-terminated (policies/builtin.c). */
extern const struct mz_policy_ops *const mz__builtin_policies[];

#endif
