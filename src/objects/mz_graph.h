/* maize internals: a graph (graph/graph.c builds it, graph/lower.c lowers
 * and schedules it).  It owns an arena with its nodes and holds
 * references on the buffers and kernels they use.
 *
 * Locks: g->lock (builders, mz_schedule, mz_graph_run) comes before the
 * runtime's lock; never held while waiting for a run. */
#ifndef MZ_GRAPH_H
#define MZ_GRAPH_H

#include <stdbool.h>
#include <stddef.h>

#include "maize.h"
#include "objects/mz_op.h"
#include "util.h"

struct mz__bufmap; /* buffer -> last writer / partition flag, per graph */

struct mz_graph {
  uint32_t tag;               /* MZ__TAG_GRAPH */
  mz_runtime *rt;
  struct mz__arena arena;
  int status;
  char message[MZ__ERRLEN];
  uint32_t nops;
  struct mz_op *error_op;     /* returned by failing builders (in the arena: its graph is found as any node's) */
  struct mz_op *last_scalar;  /* the last scalar built: an equal one is that node */
  /* Its tasks' cold records (src/coldtab.h; its own lock), found by a
   * task through its arena's aux word. */
  struct mz__coldtab cold;
  /* The last apply of a kernel without buffer parameters, with the default
   * launch, and its kernel and arguments: an apply of the same kernel on
   * the same arguments copies its parameter slots (graph/graph.c). */
  mz_kernel *rep_kernel;
  struct mz_op *rep_args, *rep_op;
  /* The bytes of the last apply with buffers and their perf-model size
   * bucket (+ 1, as a task's pm_key1; 0 until one is built). */
  uint64_t pm_bytes;
  uint8_t pm_key1;
  /* Some task has an explicit edge (mz_depend), which may point to a
   * task built after it: mz_schedule's closure then follows edges depth
   * first, not by one sweep down the build order (graph/lower.c). */
  bool xpreds_any;
  /* Some task of it got a successor list on the heap (an edge from a task
   * of a later run while it was in flight: mz__succs_room), which its end
   * frees; else its end reads no task.  Guarded by rt->lock. */
  bool succs_heap;
  /* buffer -> state in this graph (open addressing) */
  /* ran_writer: the highest id of a task writing buf that a run has
   * included (guarded by lock): a reader built before it and scheduled
   * later would see a newer value than its build point, so mz_schedule
   * refuses it (MZ_ESTATE). */
  struct mz__bentry {
    mz_buffer *buf;
    struct mz_op *writer;
    /* The last mz_value of buf, shared by later ones while writer stays
     * (a value is only its producer, or the buffer: readers of one
     * version need one node, not one each). */
    struct mz_op *value;
    struct mz_op *part;
    /* The last apply that took an access of buf: an apply passed one
     * buffer twice finds its first access without a scan per buffer. */
    struct mz_op *acc_op;
    bool partitioned;
    uint16_t wacc;            /* where writer holds buf (a value's vacc) */
    uint32_t ran_writer;
  } *bmap;
  size_t bmap_cap, bmap_n;
  unsigned bmap_shift;        /* 64 - log2(bmap_cap): see mz__ptr_slot */
  size_t npartitioned;        /* entries with partitioned set */
  uint64_t bmap_gen;          /* bumped when the map grows (entries move) */
  mz_buffer **held; size_t nheld, capheld; /* references to release */
  mz_kernel **kheld; size_t nkheld, capkheld;
  /* Every task op, in build (id) order.  The slot before tasks_all[0]
   * links the list's earlier blocks that runs were lent (tasks_lent), freed
   * with the graph; NULL: none. */
  struct mz_op **tasks_all;
  size_t first_new;           /* tasks_all[<first_new] are all scheduled */
  size_t ntasks_all, captasks_all;
  /* A run's task list is a piece of this block (struct mz__run,
   * tasks_lent): when the list grows, the block is kept (linked before
   * the new one) instead of moved, so the run's piece stays valid; the
   * graph's end frees every block.  Guarded by lock. */
  bool tasks_lent;
  _Atomic int refs;           /* the user + runs in flight (and runs after them) */
  /* Builders and mz_schedule/mz_graph_run of this graph hold it, so two
   * threads may build and schedule on one graph.  Taken before rt->lock;
   * never held while waiting for a run. */
  mz__ylock lock;
  /* Runs of this graph whose tasks the executor or the reaper may still
   * touch (guarded by rt->lock; rt->idle is broadcast when it drops to 0).
   * A re-run resets its tasks only once this is 0. */
  unsigned active;
  uint32_t ran_max;           /* the highest ran_writer of bmap (guarded by lock) */
  /* The last root mz_graph_run ran: its closure in build order, reused
   * by its next run (guarded by lock).
   *
   * replay: the last run of that root had no edge to a task of another
   * run and no partitioned buffer, so its in-run edges are all its edges
   * for as long as no other run holds a hazard record on its buffers: a
   * next run replays them (topo: the tasks in run order; bufs: each
   * buffer's writer and readers of the run at its end, the hazard records
   * its replays claim: src/hazard.h)
   * instead of computing them again.  The tasks' predecessor, successor
   * and exec arrays then live in frozen, which the next frozen run or the
   * graph's end frees (tasks of no run read none of them). */
  struct mz__lowered {
    struct mz_op *root;
    struct mz_op **tasks;
    size_t ntasks;
    bool replay;
    /* The frozen blocks hold exec records (the frozen run's xrec): only
     * a run that wants them as well replays them. */
    bool xrec;
    struct mz_op **topo;
    struct mz_op ***succv;     /* per task of topo: its in-run successors */
    struct mz__lwbuf {
      mz_buffer *b;
      struct mz__lowered *lw;  /* the lowering this entry is part of */
      struct mz_op *writer;
      unsigned nreaders;
      struct mz_op **readers;
    } *bufs;
    size_t nbufs;
    struct mz__arena frozen;
    /* The last run of these tasks gave every one to the CPU workers with
     * every device allowed (run_start): their shared flags are still set,
     * and stay right, since a device's death only adds nodes that only
     * the CPU can run.  Cleared by any run of them that decides otherwise. */
    bool all_shared;
    /* The frozen run's tasks without predecessors, and whether no task
     * has an outside gate (src/mpi.c): then a replay that shares every
     * task opens their run gates at once (graph/lower.c, replay). */
    struct mz_op **sources;
    size_t nsources;
    bool ungated;
    /* The frozen run's tasks with outside gates, in topo order (index in
     * topo and count): a replay adds them to the counters in its one pass
     * over the tasks, without the tasks' cold records (a cache miss each,
     * and a second pass over a graph larger than the caches). */
    struct mz__lwgate { uint32_t idx, n; } *gated;
    size_t ngated;
    /* The buffers' claims (src/hazard.h): every buffer of bufs is claimed
     * by its entry (claimed), and the replay in flight whose records they
     * are (claim_run; NULL when none).  Guarded by rt->lock. */
    bool claimed;
    struct mz__run *claim_run;
    /* The plan of the frozen run's policy when that policy keeps plans
     * (mz__policy_keeps_plan): per task of topo (malloc'd; NULL: none),
     * the policy's index and the runtime's plan epoch when it was made.
     * A replay under that policy, with every device and the same epoch,
     * restores it instead of calling the policy's plan.  Dropped with the
     * frozen run. */
    struct mz__plan_copy *plan;
    unsigned plan_pol;
    uint64_t plan_epoch;
  } lowered;
  /* The last ended run of this graph whose tasks were not all taken over
   * by a later run when its future went: kept (its list and its memory
   * only) so that its tasks may go on naming it, instead of a pass over
   * them (src/run.c, mz__run_unref).  Guarded by rt->lock; freed by the
   * next one parked or with the graph. */
  struct mz__run *parked;
  uint64_t hold_stamp;        /* scratch for mz_schedule (rt->lock held) */
  bool destroyed;
  struct mz_graph *prev, *next;
};
void mz__graph_unref(mz_graph *g);
/* Record a builder error on g as its sticky error (the first one wins) and
 * return its error op; NULL for a graph that is not live.  Takes g->lock:
 * for builders outside graph/graph.c (canned ops). */
mz_op *mz__graph_fail(mz_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* g's record of b, or NULL when no op of g uses b.  g->lock is held. */
struct mz__bentry *mz__graph_bentry(mz_graph *g, mz_buffer *b);
/* Flatten op's value into leaves (values and scalars), appending to *v. */
int mz__flatten(struct mz_op *op, struct mz_op ***v, size_t *n, size_t *cap);
/* Free what a graph's lowered root holds (graph/lower.c). */
void mz__lowered_free(struct mz__lowered *lw);

#endif
