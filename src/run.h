/* maize internals: a run, the execution of what one mz_schedule or
 * mz_graph_run call asked for; it is also the user's mz_future.
 *
 * Life: graph/lower.c makes it and links it into rt->runs (in flight) and
 * rt->futures (alive); src/exec.c executes its tasks and calls
 * mz__run_complete once the last one finished; src/run.c (this header's
 * code) ends it there: it clears the run's hazard records on its buffers,
 * resolves the future, hands device resources to the reaper thread, and
 * lets a waiting mz_graph_run of the same graph go on.
 *
 * Ownership: two references, the future's (dropped by mz_future_destroy or
 * by mz_runtime_destroy for futures the user kept) and the execution's
 * (dropped once the executor and the reaper are done with its tasks).  The
 * last one frees its arena, its result list and the references on graphs
 * it holds; its memory and task list go too, or, while some of its tasks
 * still name it (no later run took them all over), stay parked in its
 * graph (mz_graph.parked) until the next run parked there or the graph's
 * end frees them.
 *
 * Locks: rt->lock guards rt->runs, rt->futures, a graph's active count and
 * the buffers' hazard records; r->m guards the future's waiters, callback
 * and eventfd; r->msg_lock the message. */
#ifndef MZ_RUN_H
#define MZ_RUN_H

#include "maize.h"
#include "objects/mz_run.h"

/* The statistics of a finished run, as mz_future_stats reports them (src/future.c). */
void mz__run_stats(const struct mz__run *r, mz_run_stats *out);
/* Flatten r's root into r->results once (under its graph's lock): MZ_OK,
 * or MZ_ENOMEM with nothing kept (a later call tries again).  Any thread. */
int mz__run_results(struct mz__run *r);

/* The end of a run (src/run.c).  complete: the run's last task finished;
 * called once, by the thread that finished it (a worker, a submission or
 * completion thread), with no lock held.  unref: drop a reference; the
 * last ends the run (see Ownership above).  Any thread, no lock held.  wait: block until the
 * future resolves (timed: at most timeout_ns, then MZ_ETIMEDOUT); untimed,
 * from a user thread, it first runs CPU nodes in place of a sleeping
 * worker (struct mz__device_ops.help) when rt->wait_help is on. */
void mz__run_complete(struct mz__run *r);
void mz__run_unref(struct mz__run *r);
int mz__run_wait(struct mz__run *r, uint64_t timeout_ns, bool timed);

/* The reaper: a thread that releases the device resources of finished
 * runs, off the completion path (a CUDA host function may not call CUDA).
 * start and stop run on mz_runtime_create's and mz_runtime_destroy's
 * thread; stop drains what is queued, then joins. */
struct mz__reaper;
int mz__reaper_start(mz_runtime *rt);
void mz__reaper_stop(mz_runtime *rt);

#endif
