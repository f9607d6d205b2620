/* maize internals: the executor (src/exec.c): a run's start, a node's
 * planning (copies, waits, placement) and end (successors released),
 * failures, and the submission threads of devices that need one. */
#ifndef MZ_EXEC_H
#define MZ_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "maize.h"

struct mz__run;
struct mz_op;
struct mz__task;
struct mz_device;
struct mz__queue;
struct mz__acct;

void mz__run_start(struct mz__run *r);
void mz__task_finish(struct mz_op *op, int status);
/* For the lean end (lean_end.h), on the worker of queue Q: Q's completion
 * counts, switched to run r (the previous run's published first); a node
 * of another run waiting for Q's slot (a pick policy's pending list)
 * served, as after any node's end on Q; s, made ready, sent the common way
 * (another run's, not shared, canceled, plan-linked, or past the lean
 * end's room). */
struct mz__acct *mz__queue_acct(struct mz__queue *Q, struct mz__run *r);
void mz__queue_serve_pending(struct mz__queue *Q);
void mz__task_ready_common(struct mz_op *s);
/* Release one of op's outside gates (struct mz__task's ngates) in its
 * run, from any thread, no lock held; failed: op is canceled once ready. */
void mz__task_ungate(struct mz_op *op, bool failed);
/* As mz__task_ungate(op, false), from a CPU worker of op's runtime (an idle
 * poll): when this makes op ready and op may take the short way (a shared
 * node of a lean run, not canceled, no plan link), op is returned in state
 * QUEUED for that worker to run next, as mz__task_finish_lean's ready
 * nodes are; otherwise it goes the common way and NULL is returned. */
struct mz_op *mz__task_ungate_take(struct mz_op *op);
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

/* Whether run r may give the nodes only the CPU can run to the CPU
 * workers' pool (src/exec.c): a live CPU device, no fault injection, a
 * policy that shares (mz__policy_shares).  A run all of whose nodes are
 * such is not planned; in another, the plan's placement of such a node is
 * dropped (a CPU placement is a preference). */
bool mz__run_may_share(const struct mz__run *r);
/* Whether only the CPU device (rt->share_dev) can run t in run r: host
 * work, or a kernel that no other enabled, live device can run; then a
 * run that may share hands t to the CPU workers' pool.  The answer
 * depends on t's kernel alone.  rt->lock is held. */
bool mz__run_shareable(const struct mz__run *r, const struct mz__task *t);
/* A replay (graph/lower.c, replay): hand v[0, n), sources of r already
 * reset and QUEUED, to the CPU workers before the run starts, so that
 * they run while the replay resets the rest.  Called with rt->lock held,
 * from the thread committing r, on a run that cannot end before run_start
 * (it hands the last piece, or r holds a count: struct mz__run's
 * src_hold); the first call sets what the workers read of r (share,
 * all_shared, lean). */
void mz__run_share_early(struct mz__run *r, struct mz_op *const *v, size_t n);
/* A task of a run whose replay may still be resetting its tasks (struct
 * mz__run's resetting, read with acquire) ends: wait until each of its n
 * successors v[] is reset (its state is no longer the DONE of its last
 * run), before its count is dropped.  Thread: the one ending the task;
 * the replay, on another thread, holds no lock this one may hold. */
void mz__run_wait_reset(struct mz_op *const *v, unsigned n);
/* Whether r, all of whose nodes are shared, may be handed over early: it
 * will be lean (struct mz__run.lean), it is not planned (no plan reads it
 * before its start) and no backend runs on a virtual clock.  rt->lock is
 * held. */
bool mz__run_early_ok(const struct mz__run *r);

#endif
