/* maize internals: the executor (src/exec.c): a run's start, a node's
 * planning (copies, waits, placement) and end (successors released),
 * failures, and the submission threads of devices that need one. */
#ifndef MZ_EXEC_H
#define MZ_EXEC_H

#include <stdbool.h>

#include "maize.h"

struct mz__run;
struct mz_op;
struct mz_device;

void mz__run_start(struct mz__run *r);
void mz__task_finish(struct mz_op *op, int status);
/* Release one of op's outside gates (struct mz__task's ngates) in its
 * run, from any thread, no lock held; failed: op is canceled once ready. */
void mz__task_ungate(struct mz_op *op, bool failed);
void mz__fail_message(struct mz__run *r, struct mz_op *op, int code, const char *detail);
/* Whether the failure of p, a task of another run (in flight or done),
 * cancels s: p is a build-time predecessor of s (an argument's producer,
 * the previous writer of what s reads, an mz_depend edge), or s reads a
 * buffer p writes.  A hazard edge alone (s overwrites what p read or
 * wrote) only orders them, so the outcome does not depend on whether p's
 * run is still in flight when s is scheduled. */
bool mz__fail_reaches(const struct mz_op *p, const struct mz_op *s);
int mz__proxy_start(struct mz_device *dev);
void mz__proxy_stop(struct mz_device *dev);   /* joins the submission thread */
void mz__proxy_free(struct mz_device *dev);   /* then frees it (after the CPU workers are joined) */

/* Whether run r may give nodes to the CPU workers' pool (src/exec.c): a
 * live CPU device, no fault injection, a policy that shares. */
bool mz__run_may_share(const struct mz__run *r);

#endif
