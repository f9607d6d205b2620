/* maize internals: a run's object (struct mz__run, which is also the
 * user's mz_future).  Its life, ownership and locks are in src/run.h. */
#ifndef MZ_OBJ_RUN_H
#define MZ_OBJ_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "maize.h"
#include "util.h"

/* The observers of a run: at most the trace's and the user's (src/observe.c). */
struct mz__observers {
  unsigned n;
  mz_observer v[2];
};

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
  /* Committed with every task shared and its gate open (graph/lower.c:
   * a replay, whose sources are lw's, or a one-shot run, whose sources
   * are src_v below): run_start releases the sources only.  For a
   * replay, src_handed: those sources are already QUEUED by the replay (in
   * the pass that reset them, while their lines were at hand), and lw's
   * array of them goes to the sharing device whole (share_array); false
   * when the replay could not (a source with a plan link, or no
   * share_array): run_start then walks the array. */
  bool gates_open, src_handed;
  /* A replay hands the first sources over as it resets the tasks
   * (src_early: mz__run_share_early), so that the workers run while it
   * resets the rest, and run_start hands over the others: from
   * r->tasks[src_from] on when every task is a source, else from
   * lw->sources[src_from] on (src_list).  In the second case the workers
   * may end a task whose successor the replay has not reset yet: while
   * resetting is true, a task's end waits for each successor's reset
   * (mz__run_wait_reset, src/exec.h) before it drops its count, and the
   * run holds one count of remaining (src_hold) that run_start drops, so
   * that the run cannot end before it is committed. */
  bool src_early, src_list, src_hold;
  _Atomic bool resetting;
  size_t src_from;
  /* A one-shot run lowered with its gates open (graph/lower.c, the commit
   * pass: every task shared, no plan): its sources, which run_start
   * releases (r->tasks when every task is one, else an array of the run's
   * arena).  Those without a run gate are already QUEUED, and go to the
   * sharing device in pieces of the array; a source that keeps its gate
   * (an edge from a run in flight, or a failure that reached it) is left
   * WAIT, and released there one by one (src_gated: there is one).  A
   * task that is not a source has no gate at all: it cannot become ready
   * before a source has run. */
  struct mz_op **src_v;
  size_t src_n;
  bool src_gated;
  struct mz__arena arena;     /* preds, exec arrays */
  /* A replayed run (graph/lower.c): its graph's lowered root, which
   * cannot change while the run is in flight (a re-run waits for it); its
   * bufs are the buffers the run's tasks use, each once.  NULL otherwise. */
  struct mz__lowered *replayed;
  /* Any other run without a tile or a partitioned buffer (tbufs_listed):
   * the buffers its planning touched, each once, which are the buffers
   * its tasks access (malloc'd, the mz_buffer * of each, stored as ops:
   * graph/lower.c's list); its end clears their hazard records.  (With
   * tiles, planning also touches tiles of other graphs, which may be
   * freed before the run ends: the end then clears the records of each
   * task's own buffers.) */
  struct mz_op **tbufs;
  size_t ntbufs;
  bool tbufs_listed;
  /* The run's tasks in topological order (malloc'd, or a replay's from
   * the runtime's kept blocks: tasks_pool), or, where a one-shot
   * run took every task its graph had not run yet (tasks_lent), a piece of
   * the graph's own list (g->tasks_all), which lives as long as the graph. */
  bool tasks_lent;
  struct mz__chunk_pool *tasks_pool; /* where tasks came from (a replay's: mz__chunk_pool_get), or NULL */
  struct mz_op **tasks;
  size_t ntasks;
  size_t ntaken;              /* tasks a later run has taken over (rt->lock) */
  _Atomic size_t remaining;
  _Atomic int status;
  /* The first failure's message (mz__fail_message: MZ__ERRLEN bytes,
   * malloc'd then, under msg_lock), or NULL: none, or no memory for it.
   * Not in the run itself, whose allocation, a calloc per run, it would
   * more than double.  Freed with the run. */
  char *message;
  mz__spin msg_lock;
  /* The root's leaves (values and scalars), flattened from root when
   * first asked for (mz__run_results): a run needs none of them, and a
   * join of a million tasks has a million.  results_ready is set (release)
   * once they are. */
  struct mz_op *root;
  struct mz_op **results;
  size_t nresults;
  _Atomic bool results_ready;
  pthread_mutex_t m;
  pthread_cond_t c;
  _Atomic bool done;
  mz_future_fn then_fn;
  void *then_user;
  bool then_set;
  bool planning;              /* inside the policy's plan (mz_task_set_after is allowed) */
  size_t nafter;              /* the plan's mz_task_set_after orders (mz__plan_order_check) */
  bool plan_kept;             /* the last run's plan was restored (graph/lower.c) */
  uint64_t plan_ns;           /* time in the policy's plan, 0 when kept or none */
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
  /* Every task of the run has an exec record (struct mz__xdev: times,
   * policy word, device arguments), made where its edges are (graph/lower.c);
   * set with timed (mz__observe_init).  A lean run has none. */
  bool xrec;
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

/* What is left of a parked run (see mz__run_unref, src/run.c): its task
 * list and its memory, which its tasks may still name.  Its graph frees
 * it (the next run parked, or the graph's end), with rt->lock held or the
 * graph unreachable; NULL: nothing. */
static inline void mz__run_parked_free(struct mz__run *r) {
  if (!r) return;
  if (r->tasks_pool) mz__chunk_pool_put(r->tasks_pool, r->tasks);
  else if (!r->tasks_lent) free(r->tasks);
  free(r->message);
  free(r);
}

#endif
