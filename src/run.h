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
 * last one frees it, with its arena, its result list and the references
 * on graphs it holds.
 *
 * Locks: rt->lock guards rt->runs, rt->futures, a graph's active count and
 * the buffers' hazard records; r->m guards the future's waiters, callback
 * and eventfd; r->msg_lock the message. */
#ifndef MZ_RUN_H
#define MZ_RUN_H

#include "maize.h"
#include "util.h"

struct mz__run {
  uint32_t tag;               /* MZ__TAG_FUTURE */
  mz_runtime *rt;
  mz_graph *g;
  /* Other graphs holding tasks that this run's tasks keep in preds (edges
   * from runs in flight, through buffer hazards): held until this run is
   * freed, because the executor, the policies, the perf models and the
   * trace read those predecessors after their own runs have finished. */
  mz_graph **gheld;
  size_t ngheld, capgheld;
  _Atomic int refs;           /* future + execution */
  uint64_t id;
  unsigned policy;            /* index in rt->pol */
  uint8_t *devok;             /* per device: may run kernels in this run; NULL: every device */
  /* Nodes only the CPU can run go to its workers' pool (src/exec.c,
   * run_start); all_shared: every node of the run does, so none is placed
   * (the in-run unsub counts are not used). */
  bool share, all_shared;
  /* The graph's lowered root when this run is one of its (mz_graph_run),
   * else NULL; read by run_start only, under the graph's lock. */
  struct mz__lowered *lw;
  /* Replayed with every task shared and its gate open (graph/lower.c):
   * run_start releases lw's sources only. */
  bool gates_open;
  struct mz__arena arena;     /* preds, exec arrays */
  /* A replayed run (graph/lower.c): the buffers its tasks use, each once,
   * from its graph's lowered root, which cannot change while the run is in
   * flight (a re-run waits for it); NULL otherwise. */
  const struct mz__lwbuf *rbufs;
  size_t nrbufs;
  struct mz_op **tasks;
  size_t ntasks;
  size_t ntaken;              /* tasks a later run has taken over (rt->lock) */
  _Atomic size_t remaining;
  _Atomic int status;
  char message[MZ__ERRLEN];
  mz__spin msg_lock;
  struct mz_op **results;     /* root leaves */
  size_t nresults;
  pthread_mutex_t m;
  pthread_cond_t c;
  _Atomic bool done;
  mz_future_fn then_fn;
  void *then_user;
  bool then_set;
  bool planning;              /* inside the policy's plan (mz_task_set_after is allowed) */
  int efd;                    /* eventfd, -1 until asked */
  /* statistics */
  _Atomic uint64_t st_ops, st_batches, st_callbacks, st_transfers, st_bytes, st_failed;
  _Atomic uint64_t *busy;     /* per device */
  uint64_t t0, t1;
  /* The observers the run reports to (the trace's, then the user's),
   * copied from the runtime when the run is made (src/observe.c). */
  struct mz__observers obs;
  /* Every node of the run is timed (observed, asked for, or its policy's
   * done wants the time); else a CPU node is timed only as a perf-model
   * sample (devices/cpu/cpu.c) and its queue's busy time is counted per
   * burst (struct mz__acct). */
  bool timed;
  /* Every node is shared with the CPU workers and nothing watches or
   * bends a node's end (not timed, host memory only, no faults, no memory
   * limits, no pick): a node that succeeds and was not a perf-model
   * sample ends through mz__task_finish_lean.  Set before the first node
   * is released (run_start, src/exec.c). */
  bool lean;
  /* mz_future_timings' snapshot, taken on its first call under rt->lock;
   * NULL until then.  Freed with the run. */
  struct mz_node_timing *timings;
  size_t ntimings;
  struct mz__run *prev, *next;  /* rt->runs */
  /* Every run whose memory is alive (rt->futures, guarded by rt->lock), so
   * that mz_runtime_destroy frees the futures the user did not. */
  struct mz__run *fprev, *fnext;
  /* Virtual time: the runtime clock when the run started and the
   * latest end of its nodes on devices with a virtual clock (0: none). */
  uint64_t v0;
  _Atomic uint64_t v1;
};

struct mz_future { struct mz__run run; };

/* The statistics of a finished run, as mz_future_stats reports them (src/future.c). */
void mz__run_stats(const struct mz__run *r, mz_run_stats *out);

/* The end of a run (src/run.c).  complete: the run's last task finished;
 * called once, by the thread that finished it (a worker, a submission or
 * completion thread), with no lock held.  unref: drop a reference; the
 * last frees the run.  Any thread, no lock held.  wait: block until the
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
