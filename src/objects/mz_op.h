/* maize internals: graph nodes (graph/graph.c builds them).  A node is an
 * mz_op; a task node (apply, host, partition, unpartition) has its task
 * right after the op and its per-parameter arrays after the task, so that
 * no pointer to either is stored.
 *
 * Locks: a task's spinlock guards its state's change to DONE and its
 * successors; its counters are atomics; the rest is written while it is
 * built (its graph's lock held) or planned (the runtime's lock held). */
#ifndef MZ_NODE_H
#define MZ_NODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "coldtab.h"
#include "device_ops.h"
#include "maize.h"
#include "mz_kernel.h"
#include "util.h"

struct mz__run;

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

/* A buffer a task reads or writes, and how (1 read, 2 write, 3 both) in
 * the pointer's two low bits (an mz_buffer is at least 8-byte aligned):
 * one word per access, not two.  Read with mz__acc_buf and mz__acc_mode. */
struct mz__access {
  uintptr_t w;
};
static inline mz_buffer *mz__acc_buf(struct mz__access a) { return (mz_buffer *)(a.w & ~(uintptr_t)3); }
static inline uint8_t mz__acc_mode(struct mz__access a) { return (uint8_t)(a.w & 3); }
static inline struct mz__access mz__acc_make(mz_buffer *b, uint8_t mode) {
  return (struct mz__access){(uintptr_t)b | mode};
}

/* A task's successors: the first nrun are its run's (counted when the run
 * is scheduled; they do not change while it is in flight), in an exact
 * array of nrun from the run's arena (a frozen run's block holds it beside
 * the task's predecessors); edges a later run adds go past them, into a
 * malloc'd copy (mz__succs_room).  So the array is the heap's exactly when
 * it holds more than nrun (mz__succs_heap), and its capacity need not be
 * stored: nrun while it is the run's; on the heap, the least power of two
 * above the count it was made at, doubled each time the count reaches a
 * power of two.  NULL while it has none.  No inline slot: a task of a
 * plain or Task Bench graph has no successor or more than one. */
struct mz__succs {
  unsigned n;
  unsigned nrun;
  struct mz_op **v;
};
static inline bool mz__succs_heap(const struct mz__succs *s) { return s->n > s->nrun; }
/* Make room for one more successor; false on ENOMEM. */
static inline bool mz__succs_room(struct mz__succs *s) {
  unsigned n = s->n;
  bool heap = n > s->nrun;
  if (heap ? n < 2 || (n & (n - 1)) : n < s->nrun) return true;
  /* Full: the heap's array at a power of two, or the run's (n == nrun). */
  size_t cap = heap ? 2 * (size_t)n : n < 2 ? 2 : (size_t)1 << (32 - __builtin_clz(n));
  struct mz_op **v = heap ? realloc(s->v, cap * sizeof *v) : malloc(cap * sizeof *v);
  if (!v) return false;
  if (!heap && n) memcpy(v, s->v, n * sizeof *v);
  s->v = v;
  return true;
}

/* What a host node (mz_host) calls. */
struct mz__host_call {
  mz_cpu_fn fn;
  void *user;
};

/* What few tasks use: explicit edges (mz_depend), plan order and
 * expected times (mz_task_set_after, mz_task_set_expected_times), a launch
 * the user gave an apply, a host node's function.  A task's is in its
 * graph's table (src/coldtab.h), made on first use (mz__task_cold) and
 * freed with its graph; its op's cold flag says it has one.
 * Plan order: the task is placed only once prev was, and holds one unsub
 * count of next until it is placed or finishes (released once: exchanged
 * with NULL). */
struct mz__tcold {
  struct mz_op *prev, *next;
  uint64_t start, end;        /* the policy's expectation, 0: none */
  /* Explicit edges (malloc'd; the capacity is implicit, see mz_depend). */
  struct mz_op **xpreds;
  unsigned nxpreds;
  /* The detail of the task's failure in its last run (malloc'd; the
   * exec's message: mz__exec_message), freed when the run is torn down. */
  char *message;
  /* By kind: an apply's launch as the user gave it (copied into the
   * graph's arena; NULL: the default, mz__exec_launch), or a host node's
   * call (set when the node is made).  Partition and unpartition have
   * neither. */
  union {
    const mz_launch *launch;
    struct mz__host_call host;
  };
  /* An apply's accesses when two of its parameters name one buffer
   * (mz__task_access; in the graph's arena). */
  struct mz__access *acc;
  /* A host node's name (mz_host_named; copied into the graph's arena),
   * or NULL: "host". */
  const char *name;
  /* The policy's word in a run whose tasks have no exec record
   * (mz_task_policy_data: a policy without plan that asks for one);
   * zeroed where the task enters a run. */
  uintptr_t policy_word;
  /* Outside gates (src/mpi.c: messages the task reads; mz__task_ngates):
   * counted into unfin at each run's start, each released once by
   * mz__task_ungate; a gated task always waits on the host (it is never
   * submitted behind a predecessor). */
  uint32_t ngates;
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
  /* The placement bits, in one byte: each is written only by the thread
   * that holds the task at that moment (the lowering, under rt->lock;
   * then the thread placing it, which hands it on through an atomic
   * release: its gate, a queue, the workers' pool; then the worker that
   * runs it), so two never write the byte at once.  A field written by
   * other threads while the task is held (its state, pred_failed,
   * rerouted, the perf model's bytes, replay_dirty, the lock) keeps a
   * byte of its own; the lowering's scratch color and the perf model's
   * size bucket are in the op (struct mz_op). */
  bool deferred : 1, fixed : 1, host_wait : 1;
  bool plan_after : 1;        /* waits for plan->prev's placement (mz_task_set_after) */
  bool shared : 1;            /* handed to the CPU workers' pool, not to a queue (ops->share) */
  /* Planned in this run (plan_exec): its exec's times and copies are this
   * run's; a node that ends unplanned has them cleared by finish. */
  bool planned : 1;
  bool plan_times : 1;        /* plan->start and end set (mz_task_set_expected_times) */
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
  /* (Its status and its queue, -1 until placed, are its exec's: struct
   * mz__exec.) */
  /* The counts sit together, each array's beside the others', so that no
   * pointer after a count is padded.  A task has at most MZ__TASK_MAX_PARAMS
   * parameters and accesses (graph/graph.c refuses more). */
  unsigned npreds;
  uint16_t nacc;
  uint16_t nparams;
  /* While the task waits in a queue or list (a device's inbox, the CPU
   * workers' shared list: never two at once), the link (mz__op_next);
   * else the stamp of the last lowering that took the task into a run
   * (mz__task_mark: mz_schedule's scratch, rt->lock held).  The two never
   * meet: a lowering stamps only tasks in no run in flight (new ones, or
   * a re-run's once its graph is quiet), a popped task's link is never
   * written again, and a link left behind never reads as a stamp (stamps
   * are odd, links 8-byte aligned or NULL).  Both are atomic: a lowering
   * reads the stamps of other runs' tasks, which may be linked meanwhile. */
  union {
    _Atomic(struct mz_op *) next;
    uint64_t mark;
  };
  struct mz__run *run;
  /* What a replay resets comes first (through plan), then what the
   * workers read as well. */
  struct mz__succs succs;
  /* (Its policy word is its run's: struct mz__xdev, or the cold record's
   * in a run without exec records: mz_task_policy_data.  Its cold record
   * is its graph's: mz__task_cold.) */
  /* (Its kernel is in its op, right before it: mz__task_kernel.) */
  /* (Its predecessors in the run share a word with its exec's record:
   * mz__task_preds.) */
  struct mz__exec exec;
  /* (The build-time predecessors are in the task's op: mz__task_bpreds.) */
};
/* Nine words: with its 24-byte op, a task and its node take 96 bytes
 * before their parameter slots. */
_Static_assert(sizeof(struct mz__task) == 72, "a task is nine words");

/* t's kernel, NULL for host work (defined after struct mz_op, which holds it). */
static inline mz_kernel *mz__task_kernel(const struct mz__task *t);

/* t's predecessors in its run (npreds of them; NULL when none): its own
 * word, or its exec's record's (struct mz__exec's rec). */
static inline struct mz_op **mz__task_preds(const struct mz__task *t) {
  uintptr_t w = t->exec.rec;
  return w & 1 ? ((const struct mz__xdev *)(w - 1))->preds : (struct mz_op **)w;
}
/* Set t's predecessors and its exec's record (NULL: none) together, as a
 * lowering makes them: the record, when there is one, takes the list. */
static inline void mz__task_set_preds(struct mz__task *t, struct mz_op **preds, struct mz__xdev *xd) {
  if (xd) xd->preds = preds;
  t->exec.rec = xd ? (uintptr_t)xd | 1 : (uintptr_t)preds;
}

/* t's lowering stamp (see its union with the link), and its setting. */
static inline uint64_t mz__task_mark(const struct mz__task *t) { return __atomic_load_n(&t->mark, __ATOMIC_RELAXED); }
static inline void mz__task_set_mark(struct mz__task *t, uint64_t stamp) { __atomic_store_n(&t->mark, stamp, __ATOMIC_RELAXED); }

/* Drop k of t's unfinished-predecessor counts (unfin), which its caller
 * holds (ended predecessors', or its run's gate); whether t is ready now.
 * When they are the last counts outstanding, a load does it, not a locked
 * instruction: the others were dropped (RMWs, which the acquire pairs
 * with), and none is added while t's run is in flight (a cross-run edge is
 * counted while its run is scheduled, behind the run's gate). */
static inline bool mz__task_drop(struct mz__task *t, unsigned k) {
  if (atomic_load_explicit(&t->unfin, memory_order_acquire) == k) {
    atomic_store_explicit(&t->unfin, 0, memory_order_relaxed);
    return true;
  }
  return atomic_fetch_sub_explicit(&t->unfin, k, memory_order_acq_rel) == k;
}
/* A node does not store its graph: it lies in its graph's arena, whose
 * chunks name their owner (mz__op_graph). */
struct mz_op {
  uint32_t id;
  uint8_t kind;
  union {
    /* A tuple made by mz_join rather than mz_zip (only its name differs).
     * An op stores no name: mz__op_name derives it from the kind, the
     * kernel, or a named host node's cold record. */
    bool join;
    /* A task's: the lowering's scratch (graph/lower.c, rt->lock held),
     * here rather than in the task's lines, which the workers write. */
    uint8_t color;
  };
  union {
    struct {
      /* A task's perf-model size bucket + 1 (0: not known yet); its
       * buffers never change, so it is kept once known: set where the
       * task is first lowered (graph/lower.c), else by the first sample's
       * recorder (src/perfmodel.c).  Read only when the task is sampled,
       * so it need not be on the task's lines. */
      uint8_t pm_key1;
      /* A task's: it has a cold record, in its graph's table
       * (mz__task_cold); set once, with __atomic builtins, after the
       * record is in the table. */
      uint8_t cold;
    };
    /* A value's with a producer: where its buffer is in the producer
     * (mz__value_buf): an apply's parameter, else an access (a task has
     * at most 65,535 of each). */
    uint16_t vacc;
    /* A tuple's element count, below MZ__TUPLE_LONG; MZ__TUPLE_LONG: the
     * count is in the union's first word (mz__tuple_n). */
    uint16_t tn;
    /* A scalar's type (an mz_dtype). */
    uint16_t sdtype;
  };
  /* What the op holds, by kind.  A task's (build-time fields: the task's
   * own lines are what runs touch) are in the union too, so that a task
   * op is no larger than a value (a graph holds about as many values and
   * scalars as tasks):
   * - bpreds: the build-time predecessors, the producers of the arguments
   *   (data edges) first, then the previous writers of what the task
   *   reads (read-after-write hazards; mz_graph_dump_dot tells them
   *   apart).  NULL when there is none; else an arena block whose two
   *   32-bit words before bpreds[0] hold the count and the data edges'
   *   count (mz__task_nbpreds, mz__task_nbdata), so that a task without
   *   any stores no count.  Read with mz__task_bpreds.  (An apply keeps
   *   no results: task_result, graph/graph.c, makes them when asked.)
   * - kernel: an apply's, set when its node is made (its parameter slots
   *   depend on it: mz__task_buf); NULL for host work (mz__exec_kernel).
   *   Read with mz__task_kernel: here rather than in the task, whose
   *   first line it is right before. */
  union {
    /* A value: its producer's op (the task that wrote the buffer last
     * before it, in build order) + 1, + 2 more when the producer is not
     * an apply, or its buffer where it has none (both are 8-byte
     * aligned): made by mz__value_word, read with mz__value_producer and
     * mz__value_buf.  A value's block ends after this word
     * (MZ__LEAF_BYTES). */
    struct { uintptr_t w; } value;
    /* A scalar's bits (unused bytes zero): its block too ends after this
     * word (MZ__LEAF_BYTES), its type is in the op's head (sdtype). */
    struct { mz_arg v; } scalar;
    /* A long tuple's element count (tn); its elements follow, in the
     * op's block (mz__tuple_elems): no pointer to them (a tuple has at
     * least one).  A short tuple's elements start here. */
    struct { unsigned n; } tuple;
    struct { struct mz_op **bpreds; mz_kernel *kernel; };
  } u;
};

_Static_assert(sizeof(struct mz_op) == 24, "an op is three words");

/* op's graph: the owner of the arena chunk it lies in (every node,
 * the error op included, is made in its graph's arena). */
static inline mz_graph *mz__op_graph(const struct mz_op *op) { return (mz_graph *)mz__span_owner(op); }

/* A value's or a scalar's block: its op up to the union's first word (a
 * graph holds about one value per task, and often a scalar). */
#define MZ__LEAF_BYTES (offsetof(struct mz_op, u) + sizeof(uintptr_t))
/* A tuple's bytes before its elements: a short tuple's count is in the
 * op's head (tn), so its elements start at the union (a zip of four is 40
 * bytes); a long one's (MZ__TUPLE_LONG elements or more: joins) is the
 * union's first word, and its elements follow.  With 32-byte ops, the
 * Task Bench shape's zips measured slower with their elements in the
 * union (bench/README.md, "Memory per task, session 17"); with 24-byte
 * ops and 72-byte tasks they do not ("Session 29"). */
#define MZ__TUPLE_LONG 0xffffu
static inline size_t mz__tuple_head(unsigned n) { return offsetof(struct mz_op, u) + (n < MZ__TUPLE_LONG ? 0 : 8); }
/* A tuple's element count and elements. */
static inline unsigned mz__tuple_n(const struct mz_op *op) { return op->tn < MZ__TUPLE_LONG ? op->tn : op->u.tuple.n; }
static inline struct mz_op **mz__tuple_elems(const struct mz_op *op) {
  return (struct mz_op **)(void *)((char *)(uintptr_t)op + mz__tuple_head(op->tn));
}

/* A task op is one of the task kinds (apply, host, partition,
 * unpartition); its task is not a field (mz__op_t). */
static inline bool mz__is_task(const struct mz_op *op) { return op->kind >= MZ__K_APPLY; }

/* A task op's task, without a load: new_task (graph/graph.c) puts the task
 * right after its op, so a pass over a run's tasks need not touch the
 * op's cache line to find them.  op must be a task op. */
static inline struct mz__task *mz__task_of(const struct mz_op *op) {
  return (struct mz__task *)(void *)((char *)(uintptr_t)op + sizeof(struct mz_op));
}

/* The op of task t (the task follows its op: mz__task_of). */
static inline struct mz_op *mz__task_op(const struct mz__task *t) {
  return (struct mz_op *)(void *)((char *)(uintptr_t)t - sizeof(struct mz_op));
}

/* t's kernel (struct mz_op's kernel): NULL for host work. */
static inline mz_kernel *mz__task_kernel(const struct mz__task *t) { return mz__task_op(t)->u.kernel; }

/* Whether t has a cold record (struct mz_op's cold), and the record or
 * NULL: a task without one costs no look-up. */
static inline bool mz__task_has_cold(const struct mz__task *t) {
  return __atomic_load_n(&mz__task_op(t)->cold, __ATOMIC_ACQUIRE) != 0;
}
static inline struct mz__tcold *mz__task_cold_get(const struct mz__task *t) {
  const struct mz_op *op = mz__task_op(t);
  return mz__task_has_cold(t) ? (struct mz__tcold *)mz__coldtab_find(mz__span_aux(op), op) : NULL;
}
/* t's cold record, made on first use; NULL on ENOMEM.  Any thread may
 * make it (a builder, a policy's plan or select, the thread that fails
 * t and records why): the first to make it wins (src/coldtab.h).  Each
 * field has its own writer (the builder, the placer, the thread
 * finishing t).  Its graph's table is its arena's aux word
 * (mz__span_aux). */
static inline struct mz__tcold *mz__task_cold(struct mz__task *t) {
  struct mz__tcold *c = mz__task_cold_get(t);
  struct mz_op *op = mz__task_op(t);
  return c ? c : (struct mz__tcold *)mz__coldtab_make(mz__span_aux(op), op, sizeof *c, &op->cold);
}
/* Why t failed in its run (NULL: no detail), and its replacement: msg is
 * malloc'd or NULL, taken over (freed when no record can be made). */
static inline char *mz__task_message(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c ? c->message : NULL;
}
static inline void mz__task_set_message(struct mz__task *t, char *msg) {
  struct mz__tcold *c = msg ? mz__task_cold(t) : mz__task_cold_get(t);
  if (!c) {
    free(msg);
    return;
  }
  free(c->message);
  c->message = msg;
}
/* The call of host node t, or NULL for an apply or a task without a cold
 * record; a partition or unpartition with one gets a call whose fn is
 * NULL (nothing to run). */
static inline const struct mz__host_call *mz__task_host(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c && !mz__task_kernel(t) ? &c->host : NULL;
}
/* Whether t holds a node planned after it (mz_task_set_after), whose
 * release is left to mz__task_finish: never while t is as a replay left it
 * (replay_dirty), which spares the look. */
static inline bool mz__task_has_plan_next(const struct mz__task *t) {
  if (!__atomic_load_n(&t->replay_dirty, __ATOMIC_RELAXED)) return false;
  const struct mz__tcold *p = mz__task_cold_get(t);
  return p && __atomic_load_n(&p->next, __ATOMIC_RELAXED) != NULL;
}
/* t's outside gates (struct mz__tcold; set while t is built). */
static inline uint32_t mz__task_ngates(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c ? c->ngates : 0;
}
/* t's explicit edges (mz_depend; set only while t is not scheduled). */
static inline unsigned mz__task_nxpreds(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c ? c->nxpreds : 0;
}
static inline struct mz_op *const *mz__task_xpreds(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c ? c->xpreds : NULL;
}


/* t's build-time predecessors (struct mz_op's bpreds), their count and
 * the data edges' count (the first ones). */
static inline struct mz_op **mz__task_bpreds(const struct mz__task *t) { return mz__task_op(t)->u.bpreds; }
static inline unsigned mz__task_nbpreds(const struct mz__task *t) {
  struct mz_op **b = mz__task_bpreds(t);
  return b ? ((const uint32_t *)(const void *)b)[-2] : 0;
}
static inline unsigned mz__task_nbdata(const struct mz__task *t) {
  struct mz_op **b = mz__task_bpreds(t);
  return b ? ((const uint32_t *)(const void *)b)[-1] : 0;
}

/* op's task, or NULL for values, scalars, tuples and the error op. */
static inline struct mz__task *mz__op_t(const struct mz_op *op) { return mz__is_task(op) ? mz__task_of(op) : NULL; }

/* A task's per-parameter arrays, which new_task (graph/graph.c) puts
 * right after the task (no pointer to them is stored).
 *
 * First one 8-byte slot per parameter (mz__task_values): a scalar's value,
 * or, in an apply, a buffer parameter's mz_buffer * (in .p).  An apply's
 * kernel says which parameters are buffers, so an apply needs no more.
 * A task without a kernel (host work, partition, unpartition) mixes
 * scalars and buffers as its leaves came, so it has a second array,
 * the buffers (NULL for a scalar; mz__task_hbufs), and leaves its buffer
 * slots in the first unused.  Then the accesses (mz__task_acc).
 * Read a buffer parameter with mz__task_buf, whatever the task. */
static inline mz_arg *mz__task_values(const struct mz__task *t) {
  return (mz_arg *)(void *)((char *)(uintptr_t)t + sizeof *t);
}
/* The buffers of a task without a kernel; t->kernel must be NULL. */
static inline mz_buffer **mz__task_hbufs(const struct mz__task *t) {
  return (mz_buffer **)(void *)(mz__task_values(t) + t->nparams);
}
/* Parameter i's buffer, or NULL for a scalar (or a buffer not set yet
 * while an apply is built). */
static inline mz_buffer *mz__task_buf(const struct mz__task *t, unsigned i) {
  if (mz__task_kernel(t)) return mz__kernel_is_buffer(mz__task_kernel(t), i) ? (mz_buffer *)mz__task_values(t)[i].p : NULL;
  return mz__task_hbufs(t)[i];
}
/* The bytes of a task's parameter slots (both arrays without a kernel). */
static inline size_t mz__task_param_bytes(unsigned nparams, bool kernel) {
  return (size_t)nparams * (kernel ? sizeof(mz_arg) : sizeof(mz_arg) + sizeof(mz_buffer *));
}
/* The buffers t reads or writes, nacc long (one per buffer: two
 * parameters naming one buffer share an access).  A task without a
 * kernel keeps them in an array after its parameter arrays; an apply
 * keeps none while its buffers are distinct (nacc == its kernel's nbufs):
 * they are its buffer slots in its kernel's order (mz_kernel's accs).  An
 * apply that names a buffer twice keeps its array in its cold record.
 * Read access a with mz__task_access. */
static inline struct mz__access *mz__task_acc_array(const struct mz__task *t);
static inline struct mz__access mz__task_access(const struct mz__task *t, unsigned a) {
  const struct mz_kernel *k = mz__task_kernel(t);
  if (k && t->nacc == k->nbufs) {
    uint32_t w = k->accs[a];
    return mz__acc_make((mz_buffer *)mz__task_values(t)[w >> 2].p, (uint8_t)(w & 3));
  }
  return mz__task_acc_array(t)[a];
}

/* t's explicit access array (see mz__task_access): a task without a
 * kernel's, after its parameter arrays, or an apply's in its cold record. */
static inline struct mz__access *mz__task_acc_array(const struct mz__task *t) {
  if (mz__task_kernel(t)) return mz__task_cold_get(t)->acc;
  return (struct mz__access *)(void *)((char *)mz__task_values(t) + mz__task_param_bytes(t->nparams, false));
}

/* t's accesses for a loop over them: what mz__task_access reads, taken
 * once (held in registers, where the loop's stores could make the
 * compiler read the task and its kernel again per access). */
struct mz__acc_view {
  const uint32_t *ka;               /* an apply of distinct buffers: its kernel's order */
  const mz_arg *vals;               /* and its buffer slots */
  const struct mz__access *arr;     /* else the explicit array */
};
static inline struct mz__acc_view mz__task_acc_view(const struct mz__task *t) {
  const struct mz_kernel *k = mz__task_kernel(t);
  if (k && t->nacc == k->nbufs) return (struct mz__acc_view){.ka = k->accs, .vals = mz__task_values(t)};
  return (struct mz__acc_view){.arr = t->nacc ? mz__task_acc_array(t) : NULL};
}
static inline struct mz__access mz__acc_at(const struct mz__acc_view *v, unsigned a) {
  if (v->ka) return mz__acc_make((mz_buffer *)v->vals[v->ka[a] >> 2].p, (uint8_t)(v->ka[a] & 3));
  return v->arr[a];
}
/* Access a's buffer and mode, without packing them into one word. */
static inline mz_buffer *mz__acc_get(const struct mz__acc_view *v, unsigned a, uint8_t *mode) {
  if (v->ka) {
    uint32_t w = v->ka[a];
    *mode = (uint8_t)(w & 3);
    return (mz_buffer *)v->vals[w >> 2].p;
  }
  *mode = mz__acc_mode(v->arr[a]);
  return mz__acc_buf(v->arr[a]);
}

/* The word of a value of buffer b after producer (NULL: none), whose
 * vacc says where the producer holds b. */
static inline uintptr_t mz__value_word(const struct mz_op *producer, const mz_buffer *b) {
  if (!producer) return (uintptr_t)b;
  return (uintptr_t)producer + (producer->kind == MZ__K_APPLY ? 1 : 3);
}
/* Value v's producer, or NULL: the buffer as it was before any task of
 * the graph wrote it. */
static inline struct mz_op *mz__value_producer(const struct mz_op *v) {
  uintptr_t w = v->u.value.w;
  return w & 1 ? (struct mz_op *)(w & ~(uintptr_t)3) : NULL;
}
/* Value v's buffer: its word, or in its producer (whose parameters and
 * accesses never change once it is built) an apply's parameter slot vacc
 * (one load, and not of the producer's op: an apply's buffer slots hold
 * the buffers, see mz__task_values), another task's access vacc. */
static inline mz_buffer *mz__value_buf(const struct mz_op *v) {
  uintptr_t w = v->u.value.w;
  if (!(w & 1)) return (mz_buffer *)w;
  const struct mz__task *t = mz__task_of((const struct mz_op *)(w & ~(uintptr_t)3));
  if (!(w & 2)) return (mz_buffer *)mz__task_values(t)[v->vacc].p;
  return mz__acc_buf(mz__task_acc_array(t)[v->vacc]);
}

/* The node whose task holds exec e (every exec is a task's). */
static inline struct mz_op *mz__exec_node(const struct mz__exec *e) {
  return (struct mz_op *)(void *)((char *)(uintptr_t)e - offsetof(struct mz__task, exec) - sizeof(struct mz_op));
}

/* e's reads back into host memory (struct mz__exec): after its transfers,
 * one slot per access; NULL when the runtime has host memory only. */
static inline struct mz__xfer *mz__exec_reads(const struct mz__exec *e) {
  const struct mz__xdev *xd = mz__exec_xd(e);
  return xd && xd->xfers ? xd->xfers + mz__task_of(mz__exec_node(e))->nacc : NULL;
}

/* The link of task op: queues and lists of tasks are linked through the
 * task's first lines, not its op's. */
static inline _Atomic(struct mz_op *) *mz__op_next(struct mz_op *op) { return &mz__task_of(op)->next; }

/* op's label in messages, traces, timings and DOT, and a host node's perf
 * model key: its kernel's name for an apply, a named host node's name,
 * else its kind's. */
static inline const char *mz__op_name(const struct mz_op *op) {
  switch (op->kind) {
    case MZ__K_VALUE: return "value";
    case MZ__K_SCALAR: return "scalar";
    case MZ__K_TUPLE: return op->join ? "join" : "zip";
    case MZ__K_APPLY: return mz__task_kernel(mz__task_of(op))->spec.name;
    case MZ__K_HOST: {
      const struct mz__tcold *c = mz__task_cold_get(mz__task_of(op));
      return c && c->name ? c->name : "host";
    }
    case MZ__K_PARTITION: return "partition";
    case MZ__K_UNPARTITION: return "unpartition";
    default: return "error";
  }
}

/* The dummy node of an MPSC queue (struct mz__mpsc): an op with a task's
 * room after it, since the link is in the task. */
struct mz__stub {
  struct mz_op op;
  struct mz__task t;
};
_Static_assert(offsetof(struct mz__stub, t) == sizeof(struct mz_op), "a stub's task must follow its op");

#endif
