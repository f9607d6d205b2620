/* maize internals: the runtime object (made and destroyed by src/runtime.c).
 *
 * Object map:
 *   mz_runtime  owns devices, queues, policies, the trace, and lists of the
 *               live kernels, buffers and graphs (freed at destruction).
 *   mz_graph    owns an arena with its ops; holds references on buffers
 *               (objects/mz_graph.h).
 *   mz_op       a node: a value, scalar, tuple, or a task (apply, host,
 *               partition, unpartition); objects/mz_op.h.  unzip creates no
 *               node: it returns the tuple's element.
 *   mz__run     one mz_schedule(): its tasks, counters, status; it is the
 *               mz_future too (objects/mz_run.h; its life in run.h).  Holds a reference on its graph.
 *
 * Locking order: a graph's lock before rt->lock (scheduling, hazards,
 * object lists) before a buffer's spinlock before a task's spinlock.
 * Completion paths never take rt->lock except at a run's teardown. */
#ifndef MZ_OBJ_RUNTIME_H
#define MZ_OBJ_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "maize.h"
#include "maize/policy.h"
#include "util.h"

#define MZ__MAX_POLICIES 32
/* The default of MZ_WAIT_SPIN_US: how long, in microseconds, a thread
 * waiting on a run with at most two nodes left spins before it sleeps. */
#define MZ__WAIT_SPIN_US 50

struct mz_device;
struct mz__devtype;
struct mz__queue;
struct mz__run;
struct mz__trace;
struct mz__reaper;
struct mz__perfmodel;
struct mz__watchdog;
struct mz__faults;
struct mz__memlimit;

/* Outside work for idle CPU workers: the MPI layer's requests (src/mpi.c),
 * tested by a worker with nothing to run, so that the node a completed
 * receive releases runs on that worker at once, with no hand-off from
 * another thread.  One set per runtime (mz__idle_set), called only by CPU
 * workers, no lock held; neither call may block. */
enum mz__idle_state { MZ__IDLE_SPIN, MZ__IDLE_WORK, MZ__IDLE_PARK };
struct mz__idle_ops {
  /* Make progress; true when something completed (a node may be ready).
   * *next (NULL on entry) may be set to one node it made ready, from
   * mz__task_ungate_take, which the worker runs next. */
  bool (*poll)(void *ctx, struct mz_op **next);
  /* The worker starts spinning idle (SPIN), or stops: it found work
   * (WORK) or is about to park (PARK). */
  void (*idle)(void *ctx, enum mz__idle_state to);
  /* Optional: asked, with the time now, once the worker has spun its
   * runtime's spin time; true keeps it spinning and polling (a message a
   * node waits on is expected soon), asked again every few polls. */
  bool (*hold)(void *ctx, uint64_t now);
};

struct mz_sched { mz_runtime *rt; };

struct mz_runtime {
  uint32_t tag;                 /* MZ__TAG_RUNTIME */
  mz_runtime_config cfg;
  char policy_name[64];
  bool quiet;
  int log_level; /* MZ_LOG: an enum mz__log_level (device_ops.h); MZ__LOG_WARN by default */
  unsigned spin;
  unsigned wait_spin;          /* us a waiter spins on a run nearly done (MZ_WAIT_SPIN_US) */
  bool wait_help;             /* a waiting thread runs CPU nodes (MZ_WAIT_HELP=1; off by default) */
  unsigned ndev, capdev;
  struct mz_device **devs;
  /* The backends among devs with a hold hook, each once (set at discovery). */
  const struct mz__devtype *hold_types[4];
  unsigned nhold_types;
  unsigned nq;
  struct mz__queue **queues;
  unsigned nmem;
  /* Every run's tasks get exec records (struct mz__run's xrec): a device
   * that is not a plain CPU (its own memory, a submission thread or a
   * virtual clock: its backend writes every node's times), set at
   * discovery; or an async kernel (mz__kernel_set_async), whose end on
   * another thread reads its start. */
  _Atomic bool xrec_always;
  struct mz_device **mem_dev;   /* device of each memnode; [0] NULL (host) */
  pthread_mutex_t lock;         /* scheduling, hazards, object lists, runs */
  pthread_cond_t idle;
  pthread_mutex_t errlock;
  char errmsg[MZ__ERRLEN];
  pthread_mutex_t pol_lock;
  const struct mz_policy_ops *pol[MZ__MAX_POLICIES];
  /* Each policy's pick, NULL for ABI 1 tables (which have no such field). */
  unsigned (*pol_pick[MZ__MAX_POLICIES])(void *, const mz_sched *, unsigned, mz_task *const[], unsigned);
  void *pol_state[MZ__MAX_POLICIES];
  bool pol_ready[MZ__MAX_POLICIES];
  unsigned npol;
  unsigned default_pol;
  /* Wrapped buffers alive (mz_buffer_wrap): while there are none, waiting
   * for a run skips looking for wrapped buffers to read back. */
  _Atomic unsigned nwrapped;
  /* Some node has failed in this runtime, so a buffer may hold a poison
   * (a failed writer's error).  Until then a node that succeeds has none
   * to clear and skips the loop over its writes (its access list is a
   * cache line of its own).  Set before the first poison is stored and
   * never cleared; a later writer of that buffer runs after the failed
   * one (a hazard edge), so it sees the flag. */
  _Atomic bool poisoned;
  /* Moves when what a policy's plan reads may have changed: a perf
   * model's estimate (src/perfmodel.c), a device's death (src/device.c) or
   * revival (src/fault.c).
   * A plan kept for re-runs of a graph is made again once it moved
   * (graph/lower.c).  dev_epoch moves with the devices alone: the epoch
   * of the plans that read no perf model (mz__policy_keeps_plan). */
  _Atomic uint64_t plan_epoch, dev_epoch;
  bool timings;               /* every node timed (mz_runtime_config.timings, MZ_TIMINGS) */
  struct mz_sched sched;
  uint64_t next_run_id;
  /* The last stamp handed out (mz__stamp_next), odd: tasks keep theirs
   * where their queue link is (struct mz__task). */
  uint64_t touch_stamp;
  struct mz__run *runs;         /* in flight */
  struct mz__run *futures;      /* every run not yet freed */
  size_t nruns;
  mz_kernel *kernels;
  mz_buffer *buffers;
  mz_graph *graphs;
  /* trace (src/trace.c): an observer of every run, registered at creation */
  bool tracing;
  pthread_mutex_t trace_lock;
  struct mz__trace *trace;
  /* The user's observer (mz_runtime_set_observer), guarded by rt->lock:
   * runs copy it when they are made. */
  mz_observer user_obs;
  bool user_obs_set;
  bool destroying;
  struct mz__reaper *reaper;
  struct mz__perfmodel *pm;     /* performance models (src/perfmodel.c); NULL until created */
  struct mz__watchdog *watchdog; /* src/watchdog.c; NULL unless asked for */
  /* Faults and memory limits (src/fault.c, src/memlimit.c, src/fault.h): injected faults
   * and device memory limits; NULL when off, which the hot path tests. */
  struct mz__faults *faults;
  struct mz__memlimit *ml;
  /* The device whose queues share ready nodes (ops->share: the CPU
   * device), or NULL.  Set at creation. */
  struct mz_device *share_dev;
  /* Arena chunks that graphs, runs and frozen runs gave back, for the next
   * ones (its own lock). */
  struct mz__chunk_pool chunks;
  /* Idle work (struct mz__idle_ops): set and cleared by mz__idle_set;
   * idle_users counts the workers between mz__idle_get and mz__idle_put. */
  _Atomic(const struct mz__idle_ops *) idle_ops;
  void *_Atomic idle_ctx;
  _Atomic unsigned idle_users;
};

/* Install ops with ctx (NULL ops: remove them); removing returns once no
 * worker uses the old ones.  Thread: a user thread. */
void mz__idle_set(mz_runtime *rt, const struct mz__idle_ops *ops, void *ctx);
/* A worker's use of the idle ops: NULL when there are none; else put
 * them back before parking (a parked worker would hold up mz__idle_set). */
static inline const struct mz__idle_ops *mz__idle_get(mz_runtime *rt, void **ctx) {
  /* Most runtimes have none: no shared write then. */
  if (!atomic_load_explicit(&rt->idle_ops, memory_order_relaxed)) return NULL;
  atomic_fetch_add(&rt->idle_users, 1);
  const struct mz__idle_ops *io = atomic_load(&rt->idle_ops);
  if (!io) {
    atomic_fetch_sub(&rt->idle_users, 1);
    return NULL;
  }
  *ctx = atomic_load(&rt->idle_ctx);
  return io;
}
static inline void mz__idle_put(mz_runtime *rt) { atomic_fetch_sub_explicit(&rt->idle_users, 1, memory_order_release); }

/* A new stamp, never handed out before and odd (touch_stamp starts at 1):
 * a task's stamp shares its word with its queue link, which is even.
 * rt->lock is held. */
static inline uint64_t mz__stamp_next(mz_runtime *rt) { return rt->touch_stamp += 2; }

#endif
