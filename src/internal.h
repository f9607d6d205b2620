/* maize internals shared by src/, graph/, devices/ and policies/.
 *
 * Object map:
 *   mz_runtime  owns devices, queues, policies, the trace, and lists of the
 *               live kernels, buffers and graphs (freed at destruction).
 *   mz_graph    owns an arena with its ops; holds references on buffers.
 *   mz_op       a node: a value, scalar, tuple, or a task (apply, host,
 *               partition, unpartition).  unzip creates no node: it returns
 *               the tuple's element.
 *   mz__run     one mz_schedule(): its tasks, counters, status; it is the
 *               mz_future too.  Holds a reference on its graph.
 *
 * Locking order: rt->lock (scheduling, hazards, object lists) before a
 * buffer's spinlock before a task's spinlock.  Completion paths never take
 * rt->lock except at a run's teardown. */
#ifndef MZ_INTERNAL_H
#define MZ_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "maize.h"
#include "maize/policy.h"
#include "mz_config.h"

#define MZ__MAX_POLICIES 32
/* The default of MZ_WAIT_SPIN_US: how long, in microseconds, a thread
 * waiting on a run with at most two nodes left spins before it sleeps. */
#define MZ__WAIT_SPIN_US 50

#include "util.h"

/* The observers of a run: at most the trace's and the user's (src/observe.c). */
struct mz__observers {
  unsigned n;
  mz_observer v[2];
};

#include "run.h"

/* ---- handle tags ----
 * The first word of every public object says what it is.  It is set at
 * creation and poisoned with MZ__TAG_DEAD when the user destroys the handle
 * (or the object is freed), so NULL, a handle of another kind, and a
 * destroyed handle whose memory is still held (a graph with runs in flight,
 * a kernel a graph still uses, a future whose run goes on) are refused with
 * MZ_EINVAL, never a crash.  One load per public call, never on the
 * dispatch path.  A handle whose memory was freed cannot be told apart
 * reliably (README.md, "Handles that cannot be checked"). */
enum mz__tag {
  MZ__TAG_RUNTIME = 0x4d5a5254u,
  MZ__TAG_GRAPH = 0x4d5a4752u,
  MZ__TAG_BUFFER = 0x4d5a4246u,
  MZ__TAG_KERNEL = 0x4d5a4b4eu,
  MZ__TAG_FUTURE = 0x4d5a4655u,
  MZ__TAG_DEAD = 0xdead0bedu,
};
#define MZ__LIVE(obj, TAG) ((obj) != NULL && (obj)->tag == (uint32_t)(TAG))

/* ---- kernels (src/kernel.c) ---- */

enum mz__dir {
  MZ__SCALAR,     /* given by the caller */
  MZ__IN,
  MZ__OUT,
  MZ__INOUT,
  MZ__OUTLIKE,    /* new buffer shaped like ref */
  MZ__SIZEOF,     /* computed scalars */
  MZ__WIDTHOF,
  MZ__HEIGHTOF,
};

struct mz__param {
  enum mz__dir dir;
  mz_dtype dtype;
  int ref;        /* referenced parameter for outlike/sizeof/widthof/heightof */
  unsigned char ndim; /* dims a buffer must have ("f32[2]"); 0: 1 to 3 */
  char name[32];
};

struct mz_kernel {
  uint32_t tag;             /* MZ__TAG_KERNEL */
  mz_runtime *rt;
  mz_kernel_spec spec;      /* strings copied into strs */
  char *strs;
  unsigned nparams;
  unsigned nuser;           /* parameters the caller gives */
  unsigned nbufs;           /* buffer parameters (in, out, inout, outlike) */
  struct mz__param *params;
  pthread_mutex_t lock;     /* guards prepared[] */
  void **prepared;          /* per device: the backend's handle, or NULL */
  int *prep_status;         /* per device: 0 not tried, 1 ok, <0 failure */
  _Atomic int refs;         /* creator + graphs using it */
  bool destroyed;
  struct mz_kernel *prev, *next; /* rt->kernels */
  const struct mz__async_ops *async; /* NULL: the node ends when its function returns */
};

/* A CPU kernel whose nodes end later, from another thread: the MPI layer's
 * sends and receives (src/mpi.c), whose requests its communication thread
 * completes.  Set once with mz__kernel_set_async() before any node of the
 * kernel is built. */
struct mz__async_ops {
  /* A CPU worker, no lock held: start the node's work (call as a CPU
   * function gets it; its arrays are valid during the call only) and
   * return 0; the work then ends the node exactly once with
   * mz__task_finish(op, status), from any thread.  Nonzero: nothing was
   * started, and the node fails at once as a CPU function's would. */
  int (*start)(struct mz_op *op, const mz_call *call);
  /* start may also return MZ__ASYNC_ENDED: its work ended in the call and
   * succeeded, and the worker ends the node as it ends a CPU function's
   * (timed only when the run or the perf models want it, then the short
   * end of a lean run).  A kernel that does so sets ends_inline: its nodes
   * are then not timed for start's sake (t_start and t_end are 0 in start
   * when nobody times the node). */
  bool ends_inline;
  /* The node ended with status < 0, from any path (canceled before it
   * ran, start failed, or its work failed).  Called from the thread that
   * finishes it, no lock held; must not block.  values: the node's
   * scalar arguments by parameter (buffers' entries unused). */
  void (*ended)(struct mz_op *op, const mz_arg *values, int status, void *user);
};
#define MZ__ASYNC_ENDED 1
static inline void mz__kernel_set_async(mz_kernel *k, const struct mz__async_ops *ops) { k->async = ops; }

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
void mz__kernel_unref(mz_kernel *k);
/* Prepare k on dev once; returns the backend handle through *kdev. */
int mz__kernel_prepare(mz_kernel *k, struct mz_device *dev, void **kdev, char **log);

/* ---- buffers (src/buffer.c) ---- */

enum mz__cstate { MZ__INVALID = 0, MZ__SHARED = 1, MZ__OWNER = 2 };

struct mz__copy {
  uint8_t state;
  void *mem;      /* device handle; for memnode 0 the host pointer */
  /* The exec whose transfer makes this copy valid, while that transfer
   * may not have run yet (device memory only; cleared when its run ends).
   * A reader on another queue must wait for it or copy again. */
  struct mz__exec *fetcher;
  /* Memory limits (src/memlimit.c; used only when rt->ml is on),
   * guarded by the buffer's lock: ops planned with this copy and not yet
   * finished (an evictable copy has none), ops ever planned with it,
   * evictions so far, and the last use for LRU order. */
  uint32_t pins, uses, evictions;
  uint64_t stamp;
  /* This device copy is the host memory itself (mem_wrap, zero copy): it
   * still has its own state, but making it valid from a valid host copy,
   * or the host copy valid from it, is a mem_sync, never a transfer. */
  bool alias;
};

struct mz_buffer {
  uint32_t tag;             /* MZ__TAG_BUFFER */
  _Atomic int refs;
  mz_runtime *rt;
  /* host and shape are what a CPU node's call reads of each buffer
   * argument: beside each other, in the first 64 bytes. */
  void *host;               /* host memory (memnode 0) */
  mz_shape shape;
  /* The launch of an apply given none whose first written buffer (or
   * first buffer) this is: its shape, the device's work-group size.  Kept
   * here once, not in every such task. */
  mz_launch dlaunch;
  size_t bytes;
  bool host_owned;          /* false for a tile: host aliases the parent's */
  unsigned mem_flags;       /* MZ_BUFFER_* flags in effect (a tile inherits its parent's) */
  struct mz_device *pin_dev; /* pinned host memory: the device that gave it, and its handle */
  void *pin_handle;
  mz_buffer *parent;        /* tiles: the partitioned buffer (referenced) */
  mz__spin lock;            /* guards copies[] */
  pthread_mutex_t fetch_lock; /* serializes blocking reads into host memory */
  struct mz__copy *copies;  /* rt->nmem entries */
  _Atomic int poison;       /* error of the last failed writer, 0 when fine */
  /* Hazard state across runs, guarded by rt->lock: the last scheduled
   * writer and the readers scheduled since, all in live runs. */
  struct mz_op *last_writer;
  struct mz_op **readers;
  unsigned nreaders, capreaders;
  uint64_t touch_stamp;     /* dedup at run teardown and scheduling */
  /* Scratch for mz_schedule (rt->lock held): the hazard state as the run
   * being planned would leave it, committed only if planning succeeds. */
  struct mz_op *hz_writer;
  struct mz_op **hz_readers;
  unsigned hz_nreaders, hz_capreaders;
  struct mz_buffer *prev, *next; /* rt->buffers */
  /* Partitions.  A tile's host memory is part of its parent's, but each
   * has its own copies elsewhere, so a write through one leaves the other's
   * copies behind: tiles_dirty (a tile was written since the parent's
   * copies were brought up to date) and tiles_stale (the parent was
   * written since its tiles' copies were) say which, and mz__alias_sync
   * brings the side about to be used up to date first.  Never both set.
   * On the parent, guarded by its alias_lock: the live tiles. */
  pthread_mutex_t alias_lock;
  mz_buffer **tiles;
  unsigned ntiles, captiles;
  _Atomic bool tiles_dirty, tiles_stale;
  _Atomic bool has_tiles; /* set once a tile of it is made: the fast check */
};

int mz__buffer_new(mz_runtime *rt, mz_dtype t, unsigned ndim, const size_t dims[], mz_buffer *parent,
                   size_t offset, mz_buffer **out);
/* Before an access of b, a partitioned buffer or a tile: bring b's copies
 * up to date from the other side (the tiles' latest copies gathered into
 * the parent's host memory, or the parent's latest copy into host memory
 * for its tiles).  Thread: any but a completion callback.  Locks: none
 * held.  Returns MZ_OK or the error of a read back. */
int mz__alias_sync(mz_buffer *b);
/* After an access wrote b: the other side's copies are behind. */
void mz__alias_wrote(mz_buffer *b);
/* b was written whole without error: clear its tiles' poison. */
void mz__alias_clear_tiles_poison(mz_buffer *b);
/* Bring the host copy up to date: a blocking read from a valid device copy
 * when the host copy is invalid.  Adds the bytes read to *moved (may be
 * NULL).  rec (may be NULL) describes the read this call made, timed with
 * the host clock, or has bytes 0 when it made none (the host copy was
 * valid, or another reader fetched it meanwhile).  Thread: any but a
 * completion callback.  Locks: none held. */
int mz__buffer_fetch_host(mz_buffer *b, uint64_t *moved, struct mz__xfer *rec);
/* Allocate b's copy on dev: in place over the host copy (*alias set) when
 * b is zero copy and dev can (mem_wrap), else with mem_alloc.  Thread: the
 * planning thread of dev. */
int mz__mem_alloc_kind(struct mz_device *dev, mz_buffer *b, void **mem, bool *alias);
/* Make b's aliased copy on memory node m (device dev) valid for a read:
 * from the host copy, made valid first if needed, with mem_sync; no bytes
 * move unless the host copy had to be fetched from a device with its own
 * memory (added to *moved, and described in *rec when rec is not NULL,
 * for the observers and the trace, as mz__buffer_fetch_host does).
 * Called and returns with b's spinlock held. */
int mz__plan_alias_read(mz_runtime *rt, mz_buffer *b, unsigned m, struct mz_device *dev, uint64_t *moved,
                        const char **why, struct mz__xfer *rec);

/* ---- graph nodes (graph/graph.c) ---- */

enum mz__kind {
  MZ__K_ERROR,
  MZ__K_VALUE,      /* a buffer, maybe produced by a task */
  MZ__K_SCALAR,
  MZ__K_TUPLE,      /* zip, join */
  MZ__K_APPLY,
  MZ__K_HOST,
  MZ__K_PARTITION,
  MZ__K_UNPARTITION,
};

enum mz__tstate {
  MZ__T_NEW = 0,    /* built, never scheduled */
  MZ__T_WAIT,       /* in a run, not submitted */
  MZ__T_QUEUED,     /* handed to its queue (CPU FIFO or submission inbox) */
  MZ__T_FLUSHED,    /* enqueued on the device */
  MZ__T_DONE,       /* finished (status says how) */
};

struct mz__access {
  mz_buffer *buf;
  uint8_t mode;       /* 1 read, 2 write, 3 both */
};

/* A task's successors: inl, or an exact array from its run's arena (sized
 * when the run is scheduled), or malloc'd once a later run adds edges to
 * it (heap). */
struct mz__succs {
  unsigned n;
  unsigned cap : 31;          /* a run's edges are counted in 32 bits */
  unsigned heap : 1;
  struct mz_op **v;
  struct mz_op *inl[2];
};
/* Make room for one more successor; false on ENOMEM. */
static inline bool mz__succs_room(struct mz__succs *s) {
  if (s->n < s->cap) return true;
  unsigned cap = s->cap * 2;
  struct mz_op **v = s->heap ? realloc(s->v, cap * sizeof *v) : malloc(cap * sizeof *v);
  if (!v) return false;
  if (!s->heap && s->n) memcpy(v, s->v, s->n * sizeof *v);
  s->v = v;
  s->cap = cap & 0x7fffffffu;
  s->heap = 1;
  return true;
}

/* What few tasks use: explicit edges (mz_depend), plan order and
 * expected times (mz_task_set_after, mz_task_set_expected_times).  A task
 * holds a pointer to one, made on first use (mz__task_cold) and freed
 * with its graph.
 * Plan order: the task is placed only once prev was, and holds one unsub
 * count of next until it is placed or finishes (released once: exchanged
 * with NULL). */
struct mz__tcold {
  struct mz_op *prev, *next;
  uint64_t start, end;        /* the policy's expectation, 0: none */
  /* Explicit edges (malloc'd; the capacity is implicit, see mz_depend). */
  struct mz_op **xpreds;
  unsigned nxpreds;
};

/* What a host node (mz_host) calls: kept apart from its task, as an
 * apply's launch is, so that each takes one pointer in the task. */
struct mz__host_call {
  mz_cpu_fn fn;               /* may be NULL: nothing to run */
  void *user;
};

/* The task part of an op (apply, host, partition, unpartition). */
struct mz__task {
  /* Hot: what every run touches for every task (its start, the workers,
   * its end), first, so that a pass over a run's tasks touches the same
   * few cache lines of each; build-time and rarely used fields follow. */
  _Atomic uint32_t unsub;     /* preds in this run not yet queued */
  _Atomic uint32_t unfin;     /* preds not finished, + 1 gate, + ngates */
  _Atomic uint8_t state;
  _Atomic bool pred_failed;
  _Atomic bool rerouted;      /* taken back from its queue once (dead device, no memory) */
  bool deferred, fixed, host_wait;
  bool plan_after;            /* waits for plan->prev's placement (mz_task_set_after) */
  bool shared;                /* handed to the CPU workers' pool, not to a queue (ops->share) */
  /* Planned in this run (plan_exec): its exec's times and copies are this
   * run's; a node that ends unplanned has them cleared by finish. */
  bool planned;
  bool plan_times;            /* plan->start and end set (mz_task_set_expected_times) */
  uint8_t color;
  /* The perf model's size bucket of this task + 1 (0: not known yet); its
   * buffers never change, so the worker that records a sample first keeps
   * it (src/perfmodel.c). */
  uint8_t pm_key1;
  /* The device index + 1 where this task's bucket was saturated at its
   * last sample (0: not, or never sampled): its runs there are sampled
   * one in 16 (src/perfmodel.c). */
  uint8_t pm_sat1;
  uint8_t pm_mask;            /* its sampling period - 1 there, once saturated */
  /* Its second line (succs, policy word, plan links) may differ from
   * what a replay restores: a run that was not a replay built its
   * successors, a later run added edges to it, a policy asked for its
   * word, or mz_task_set_after linked it.  While false the replay leaves
   * that line alone and has no plan->next (share() need not look).
   * Written and read with __atomic builtins (a policy may ask from any
   * runtime thread). */
  bool replay_dirty;
  mz__spin lock;              /* guards state transitions to DONE and succs */
  int queue;                  /* -1 until placed */
  int status;
  /* The counts sit together, each array's beside the others', so that no
   * pointer after a count is padded. */
  unsigned npreds;
  unsigned nsucc_run;         /* successors in the same run (listed first) */
  unsigned nacc;
  /* Outside gates (src/mpi.c: messages it reads): counted into unfin at
   * each run's start, each released once by mz__task_ungate; a gated task
   * always waits on the host (it is never submitted behind a predecessor). */
  uint32_t ngates;
  /* The link of the queue or list the task waits in (a device's inbox, the
   * CPU workers' shared list: never two at once); mz__op_next. */
  _Atomic(struct mz_op *) next;
  struct mz__run *run;
  /* What a replay resets comes first (through plan), then what the
   * workers read as well. */
  struct mz__succs succs;
  uintptr_t policy_word;
  uint64_t mark;              /* scratch for mz_schedule (rt->lock is held) */
  struct mz__tcold *cold;     /* NULL until an edge, order or times is set */
  /* With its exec's first 48 bytes, what a CPU re-run touches. */
  mz_kernel *kernel;          /* apply; NULL for host work (mz__exec_kernel) */
  struct mz__exec exec;
  struct mz_op **preds;
  struct mz__access *acc;
  unsigned nparams;
  /* Cold: build time, host work, policies' expectations. */
  /* Host work's function and argument, or an apply's launch: a task is
   * one or the other (an apply has a kernel; partition and unpartition
   * have neither, and leave both NULL). */
  union {
    const struct mz__host_call *host; /* host: in the graph's arena */
    /* An apply's launch: the user's (copied into the graph's arena) or the
     * default (a buffer's dlaunch, or one work item). */
    const mz_launch *launch;
  };
  unsigned nbpreds;           /* build-time predecessors: producers of the */
  /* bpreds[0..nbdata) are the producers of the arguments (data edges);
   * the rest are read-after-write hazards (mz_graph_dump_dot tells them
   * apart). */
  uint32_t nbdata;

  struct mz_op **bpreds;      /* arguments and the previous writer (RAW) */
};

/* t's cold record, made on first use; NULL on ENOMEM.  Only the thread
 * that builds or places t makes it (a builder holding its graph's lock,
 * or a policy's plan or select of t); others may read t->cold at any
 * time, so it is published initialized. */
static inline struct mz__tcold *mz__task_cold(struct mz__task *t) {
  struct mz__tcold *c = __atomic_load_n(&t->cold, __ATOMIC_ACQUIRE);
  if (c) return c;
  c = calloc(1, sizeof *c);
  if (c) __atomic_store_n(&t->cold, c, __ATOMIC_RELEASE);
  return c;
}
/* t's explicit edges (mz_depend; set only while t is not scheduled). */
static inline unsigned mz__task_nxpreds(const struct mz__task *t) {
  const struct mz__tcold *c = __atomic_load_n(&t->cold, __ATOMIC_ACQUIRE);
  return c ? c->nxpreds : 0;
}
static inline struct mz_op *const *mz__task_xpreds(const struct mz__task *t) {
  const struct mz__tcold *c = __atomic_load_n(&t->cold, __ATOMIC_ACQUIRE);
  return c ? c->xpreds : NULL;
}

struct mz_op {
  mz_graph *g;
  const char *name;
  uint32_t id;
  uint8_t kind;
  /* What the op holds, by kind.  A task's is its result tuple: in the
   * union too, so that a task op is no larger than a value (a graph holds
   * about as many values and scalars as tasks). */
  union {
    struct { mz_buffer *buf; struct mz_op *producer; } value;
    struct { mz_dtype dtype; mz_arg v; } scalar;
    struct { unsigned n; struct mz_op **elems; } tuple;
    struct { unsigned nres; struct mz_op **res; };
  } u;
};

/* The bytes of an op that is not a task: all of it. */
#define MZ__OP_HEAD sizeof(struct mz_op)

/* A task op is one of the task kinds (apply, host, partition,
 * unpartition); its task is not a field (mz__op_t). */
static inline bool mz__is_task(const struct mz_op *op) { return op->kind >= MZ__K_APPLY; }

/* A task op's task, without a load: new_task (graph/graph.c) puts the task
 * right after its op, so a pass over a run's tasks need not touch the
 * op's cache line to find them.  op must be a task op. */
static inline struct mz__task *mz__task_of(const struct mz_op *op) {
  return (struct mz__task *)(void *)((char *)(uintptr_t)op + sizeof(struct mz_op));
}

/* op's task, or NULL for values, scalars, tuples and the error op. */
static inline struct mz__task *mz__op_t(const struct mz_op *op) { return mz__is_task(op) ? mz__task_of(op) : NULL; }

/* A task's per-parameter arrays, which new_task (graph/graph.c) puts
 * right after the task (no pointer to them is stored): the scalar values
 * (a buffer's entry unused), then the buffers (NULL for a scalar), each
 * nparams long. */
static inline mz_arg *mz__task_values(const struct mz__task *t) {
  return (mz_arg *)(void *)((char *)(uintptr_t)t + sizeof *t);
}
static inline mz_buffer **mz__task_bufs(const struct mz__task *t) {
  return (mz_buffer **)(void *)(mz__task_values(t) + t->nparams);
}

/* The node whose task holds exec e (every exec is a task's). */
static inline struct mz_op *mz__exec_node(const struct mz__exec *e) {
  return (struct mz_op *)(void *)((char *)(uintptr_t)e - offsetof(struct mz__task, exec) - sizeof(struct mz_op));
}

/* e's reads back into host memory (struct mz__exec): after its transfers,
 * one slot per access; NULL when the runtime has host memory only. */
static inline struct mz__xfer *mz__exec_reads(const struct mz__exec *e) {
  return e->xd && e->xd->xfers ? e->xd->xfers + mz__task_of(mz__exec_node(e))->nacc : NULL;
}

/* The link of task op: queues and lists of tasks are linked through the
 * task's first lines, not its op's. */
static inline _Atomic(struct mz_op *) *mz__op_next(struct mz_op *op) { return &mz__task_of(op)->next; }

/* The dummy node of an MPSC queue (struct mz__mpsc): an op with a task's
 * room after it, since the link is in the task. */
struct mz__stub {
  struct mz_op op;
  struct mz__task t;
};
_Static_assert(offsetof(struct mz__stub, t) == sizeof(struct mz_op), "a stub's task must follow its op");

struct mz__bufmap; /* buffer -> last writer / partition flag, per graph */

struct mz_graph {
  uint32_t tag;               /* MZ__TAG_GRAPH */
  mz_runtime *rt;
  struct mz__arena arena;
  int status;
  char message[MZ__ERRLEN];
  uint32_t nops;
  struct mz_op error_op;      /* returned by failing builders */
  struct mz_op *last_scalar;  /* the last scalar built: an equal one is that node */
  /* buffer -> state in this graph (open addressing) */
  /* ran_writer: the highest id of a task writing buf that a run has
   * included (guarded by lock): a reader built before it and scheduled
   * later would see a newer value than its build point, so mz_schedule
   * refuses it (MZ_ESTATE). */
  struct mz__bentry {
    mz_buffer *buf;
    struct mz_op *writer;
    /* The last mz_value of buf, shared by later ones while writer stays
     * (a value is only the buffer and its producer: readers of one
     * version need one node, not one each). */
    struct mz_op *value;
    struct mz_op *part;
    bool partitioned;
    uint32_t ran_writer;
  } *bmap;
  size_t bmap_cap, bmap_n;
  size_t npartitioned;        /* entries with partitioned set */
  uint64_t bmap_gen;          /* bumped when the map grows (entries move) */
  mz_buffer **held; size_t nheld, capheld; /* references to release */
  mz_kernel **kheld; size_t nkheld, capkheld;
  struct mz_op **tasks_all;   /* every task op, in build (id) order */
  size_t first_new;           /* tasks_all[<first_new] are all scheduled */
  size_t ntasks_all, captasks_all;
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
  /* The last root mz_graph_run ran: its closure in build order and its
   * flattened leaves, reused by its next run (guarded by lock).
   *
   * replay: the last run of that root had no edge to a task of another
   * run and no partitioned buffer, so its in-run edges are all its edges
   * for as long as no other run holds a hazard record on its buffers: a
   * next run replays them (topo: the tasks in run order; bufs: each
   * buffer's writer and readers at the run's end, its hazard records)
   * instead of computing them again.  The tasks' predecessor, successor
   * and exec arrays then live in frozen, which the next frozen run or the
   * graph's end frees (tasks of no run read none of them). */
  struct mz__lowered {
    struct mz_op *root;
    struct mz_op **tasks, **leaves;
    size_t ntasks, nleaves;
    bool replay;
    struct mz_op **topo;
    struct mz_op ***succv;     /* per task of topo: its in-run successors */
    struct mz__lwbuf {
      mz_buffer *b;
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
  } lowered;
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

/* ---- the executor (src/exec.c) ---- */

void mz__run_start(struct mz__run *r);
void mz__task_finish(struct mz_op *op, int status);
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

/* ---- runtime ---- */

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
  bool timings;               /* every node timed (mz_runtime_config.timings, MZ_TIMINGS) */
  struct mz_sched sched;
  uint64_t next_run_id;
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

/* Buffers' copy states: their two transitions, written once (b->lock held; a new
 * buffer starts with the host copy OWNER).  A write on memory node m: m's
 * copy is the only valid one, and no transfer in is pending anywhere
 * (later readers are ordered after the writer by hazards). */
static inline void mz__copy_written(mz_buffer *b, unsigned m) {
  for (unsigned k = 0; k < b->rt->nmem; k++) {
    b->copies[k].state = MZ__INVALID;
    b->copies[k].fetcher = NULL;
  }
  b->copies[m].state = MZ__OWNER;
}
/* A copy made valid on another node from src's: src, if it was the only
 * valid one, is shared now. */
static inline void mz__copy_read_from(mz_buffer *b, unsigned src) {
  if (b->copies[src].state == MZ__OWNER) b->copies[src].state = MZ__SHARED;
}
/* The copy-source rule: whether copy m of b can be read now.  Not an
 * invalid copy, nor one on a dead device's memory, nor one whose own
 * transfer in may not have run yet (another device's reader planned it:
 * it would read as garbage). */
static inline bool mz__copy_readable(const mz_runtime *rt, const mz_buffer *b, unsigned m) {
  const struct mz__copy *c = &b->copies[m];
  if (c->state == MZ__INVALID || (m && atomic_load_explicit(&rt->mem_dev[m]->dead, memory_order_relaxed))) return false;
  return !c->fetcher ||
         atomic_load_explicit(&mz__task_of(mz__exec_node(c->fetcher))->state, memory_order_acquire) == MZ__T_DONE;
}

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
/* Whether run r may give nodes to the CPU workers' pool (src/exec.c): a
 * live CPU device, no fault injection, a policy that shares. */
bool mz__run_may_share(const struct mz__run *r);
/* The built-in policies, NULL-terminated (policies/builtin.c). */
extern const struct mz_policy_ops *const mz__builtin_policies[];

/* Trace (src/trace.c).  open runs at mz_runtime_create once the devices
 * are known and sets rt->trace and rt->tracing; its observer (trace_observer)
 * then writes each run to the file when the run ends; close writes what is
 * left (a file with no run at all) and frees it.  Thread: create's and
 * destroy's. */
int mz__trace_open(mz_runtime *rt, const char *path);
mz_observer mz__trace_observer(mz_runtime *rt);
void mz__trace_close(mz_runtime *rt);

/* Observers (src/observe.c).  init copies the runtime's observers into a
 * new run (rt->lock held).  node reports a finished node that reached a
 * queue, with its transfers (from finish(), any thread, no lock held);
 * run_end reports the run's end (from mz__run_complete, before the future
 * resolves, no lock held). */
void mz__observe_init(mz_runtime *rt, struct mz__run *r);
void mz__observe_node(struct mz__run *r, struct mz_op *op, int status);
void mz__observe_run_end(struct mz__run *r);

/* Performance models and the runtime clock (src/perfmodel.c).
 * create runs once the devices are known; destroy saves what was learned
 * and frees it (NULL-safe).  record is the completion path's feed: a node
 * ran ns on dev; chosen: wants() chose it as a sample before it ran (else
 * record decides whether to keep it).  wants: before op runs on queue q
 * of dev (a CPU node of a run that is not timed, struct mz__run.timed):
 * whether to time it as a sample; advances q's sampling tick, so call it
 * once per node, from the thread that runs q's nodes.  Thread: any; the
 * models have their own lock. */
int mz__perfmodel_create(mz_runtime *rt);
void mz__perfmodel_destroy(mz_runtime *rt);
void mz__perfmodel_record(mz_runtime *rt, const struct mz_op *op, const struct mz_device *dev, unsigned q, uint64_t ns,
                          bool chosen);
bool mz__perfmodel_wants(mz_runtime *rt, const struct mz_op *op, const struct mz_device *dev, unsigned q);
/* The runtime clock: the first virtual-clock device's, else mz__now_ns(). */
uint64_t mz__runtime_clock(const mz_runtime *rt);

/* The watchdog (src/watchdog.c).  config reads watchdog_s or
 * $MZ_WATCHDOG_S into *seconds (0: off) and fails with MZ_EINVAL and a
 * message on a bad value; start does nothing for 0 and runs before the
 * queues are opened (backends may read rt->watchdog from their threads to
 * decide whether to keep mz__queue.current); stop is NULL-safe and runs
 * first in the runtime's teardown.  Thread: mz_runtime_create's and
 * mz_runtime_destroy's. */
int mz__watchdog_config(mz_runtime *rt, double *seconds);
int mz__watchdog_start(mz_runtime *rt, double seconds);
void mz__watchdog_stop(mz_runtime *rt);

/* The simulator's descriptor (devices/sim/sim.c). */
extern const struct mz__devtype mz__devtype_sim;

/* The CPU backend's descriptor (devices/cpu/cpu.c). */
extern const struct mz__devtype mz__devtype_cpu;

/* The device table (src/device.c); read by any thread, lock-free. */
/* Whether queue q can run the task now (device alive, implementation, the
 * run's device subset). */
bool mz__can_run(const mz_runtime *rt, const struct mz_op *op, unsigned q);

#endif
