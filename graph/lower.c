/* mz_schedule(): turn what a root op needs into a run.
 *
 * 1. The closure: the tasks the root's values come from, following the
 *    build-time edges (argument producers, the previous writer of each
 *    buffer read, explicit mz_depend edges), skipping tasks already run.
 * 2. Hazards, in build order, against each buffer's state left by earlier
 *    runs: a reader waits for the last writer; a writer for the last writer
 *    and the readers since.  Computed into scratch state first.
 * 3. A depth-first topological sort over the run's edges rejects cycles
 *    (nothing is changed then).
 * 4. Commit: buffers' hazard state, successor lists, counters; edges to
 *    tasks of runs still in flight are registered under their locks. */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "handle.h"
#include "hazard.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"
#include "observe.h"
#include "perfmodel.h"
#include "policy_table.h"

struct vec {
  mz_op **v;
  size_t n, cap;
};

static int vgrow(struct vec *v) {
  size_t cap = v->cap ? v->cap * 2 : 64;
  mz_op **nv = realloc(v->v, cap * sizeof *nv);
  if (!nv) return MZ_ENOMEM;
  v->v = nv;
  v->cap = cap;
  return MZ_OK;
}

static inline __attribute__((always_inline)) int vpush(struct vec *v, mz_op *op) {
  if (v->n == v->cap && vgrow(v)) return MZ_ENOMEM;
  v->v[v->n++] = op;
  return MZ_OK;
}

static int by_id(const void *a, const void *b) {
  const mz_op *x = *(mz_op *const *)a, *y = *(mz_op *const *)b;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* A predecessor gathered for the task being planned is flagged in its
 * color (the cycle search's, which only ever holds 0, 1 or 2): one test
 * per candidate instead of a scan of the list, whatever its length.  The
 * flags are cleared once the task's list is complete (or planning stops:
 * unflag), so only one task's are ever set; rt->lock is held, and nothing
 * else reads a task's color. */
#define MZ__SEEN 0x80

static inline void unflag(const struct vec *out) {
  for (size_t k = 0; k < out->n; k++) out->v[k]->color &= (uint8_t)~MZ__SEEN;
}

/* Collect op's predecessors into out (deduplicated, done ones dropped but
 * their failure remembered). */
static inline __attribute__((always_inline)) int add_pred(mz_op *op, mz_op *p, struct vec *out, uint64_t run_stamp) {
  if (!p || p == op) return MZ_OK;
  struct mz__task *pt = mz__task_of(p);
  if (p->color & MZ__SEEN) return MZ_OK;
  /* A task of this run is a predecessor even when done: a re-run runs it
   * again. */
  if (mz__task_mark(pt) != run_stamp && atomic_load(&pt->state) == MZ__T_DONE) {
    if (pt->exec.status < 0 && mz__fail_reaches(p, op)) atomic_store(&mz__task_of(op)->pred_failed, true);
    return MZ_OK;
  }
  int rc = vpush(out, p);
  if (!rc) p->color |= MZ__SEEN;
  return rc;
}

/* Push op on the cycle search's stack, with its next predecessor index
 * (0) beside it in next[]. */
static int dfs_push(struct vec *stack, unsigned **next, size_t *cap_next, mz_op *op) {
  int rc = vpush(stack, op);
  if (rc) return rc;
  if (*cap_next < stack->cap) {
    unsigned *nv = realloc(*next, stack->cap * sizeof *nv);
    if (!nv) {
      stack->n--;
      return MZ_ENOMEM;
    }
    *next = nv;
    *cap_next = stack->cap;
  }
  (*next)[stack->n - 1] = 0;
  return MZ_OK;
}

/* b's scratch hazard state for this run, set up from its committed state
 * the first time the run touches it. */
/* b's first access in this planning pass: its records are copied into
 * the planned state (src/hazard.h) and b is listed in touched. */
static inline int hz_touch(mz_buffer *b, uint64_t stamp, struct vec *touched) {
  int rc = mz__hz_begin(&b->hz, stamp);
  return rc <= 0 ? rc : vpush(touched, (mz_op *)(void *)b);
}

/* A tile and its parent share memory: an access of one is ordered after
 * the other's conflicting accesses (its writer; also its readers when
 * this access writes).  Tiles of one partition are disjoint; tiles of two
 * partitions are ordered through the parent, which each partition task
 * writes. */
static int alias_preds(mz_op *op, mz_buffer *r, uint8_t mode, struct vec *preds, uint64_t stamp,
                       struct vec *touched) {
  int rc = hz_touch(r, stamp, touched);
  if (!rc) rc = add_pred(op, r->hz.pwriter, preds, stamp);
  for (unsigned k = 0; !rc && (mode & 2) && k < r->hz.npreaders; k++) rc = add_pred(op, r->hz.preaders[k], preds, stamp);
  return rc;
}

static int alias_hazards(mz_op *op, mz_buffer *b, uint8_t mode, struct vec *preds, uint64_t stamp,
                         struct vec *touched) {
  if (b->parent) return alias_preds(op, b->parent, mode, preds, stamp, touched);
  int rc = MZ_OK;
  pthread_mutex_lock(&b->alias_lock);
  for (unsigned i = 0; !rc && i < b->ntiles; i++) rc = alias_preds(op, b->tiles[i], mode, preds, stamp, touched);
  pthread_mutex_unlock(&b->alias_lock);
  return rc;
}

/* Keep pg (another graph, with a task this run waits for) alive until the
 * run is freed (mz__run_unref).  rt->lock is held.  A graph whose count is
 * already zero is being freed and has nothing in flight: not held. */
static bool hold_graph(struct mz__run *r, mz_graph *pg, uint64_t stamp) {
  if (r->ngheld == r->capgheld) {
    size_t cap = r->capgheld ? r->capgheld * 2 : 4;
    mz_graph **v = realloc(r->gheld, cap * sizeof *v);
    if (!v) return false;
    r->gheld = v;
    r->capgheld = cap;
  }
  int n = atomic_load(&pg->refs);
  while (n > 0 && !atomic_compare_exchange_weak(&pg->refs, &n, n + 1)) {
  }
  if (n > 0) r->gheld[r->ngheld++] = pg;
  pg->hold_stamp = stamp;
  return true;
}

/* Add the closure of the tasks op needs directly (op itself when it is a
 * task, the elements of a tuple such as a join of applies, the producer
 * of a value) to tasks, marking each with stamp.  Each element of a tuple
 * is followed to the end before the next is pushed, so the stack holds
 * one path's frontier, not a million-element join at once.  A one-shot
 * run (rerun false) skips tasks that were scheduled already. */
static void reset_for_rerun(struct mz__task *t);

/* Add task p to the closure unless it is in already (or, in a one-shot
 * run, was scheduled before), and stack its predecessors not in yet. */
static inline __attribute__((always_inline)) int closure_visit(mz_op *p, struct vec *stack, struct vec *tasks, bool rerun, uint64_t stamp) {
  struct mz__task *t = mz__task_of(p);
  if (mz__task_mark(t) == stamp || (!rerun && atomic_load_explicit(&t->state, memory_order_relaxed) != MZ__T_NEW)) return MZ_OK;
  mz__task_set_mark(t, stamp);
  p->color = 0;
  if (rerun) reset_for_rerun(t);
  t->succs.nrun = 0;
  int rc = vpush(tasks, p);
  for (unsigned i = 0, nb = mz__task_nbpreds(t); !rc && i < nb; i++)
    if (mz__task_mark(mz__task_of(p->u.bpreds[i])) != stamp) rc = vpush(stack, p->u.bpreds[i]);
  for (unsigned i = 0; !rc && i < mz__task_nxpreds(t); i++)
    if (mz__task_mark(mz__task_of(mz__task_xpreds(t)[i])) != stamp) rc = vpush(stack, mz__task_xpreds(t)[i]);
  return rc;
}

static int closure(mz_op *op, struct vec *stack, struct vec *tasks, bool rerun, uint64_t stamp) {
  bool tup = op->kind == MZ__K_TUPLE && !mz__op_t(op);
  unsigned n = tup ? mz__tuple_n(op) : 1;
  int rc = MZ_OK;
  for (unsigned i = 0; !rc && i < n; i++) {
    mz_op *e = tup ? mz__tuple_elems(op)[i] : op;
    if (e->kind == MZ__K_TUPLE && !mz__op_t(e)) {
      rc = closure(e, stack, tasks, rerun, stamp);
      continue;
    }
    /* An element's own task is visited without the stack (a join of a
     * million independent tasks never stacks one); its predecessors'
     * paths are followed to the end before the next element. */
    mz_op *first = mz__op_t(e) ? e : e->kind == MZ__K_VALUE ? mz__value_producer(e) : NULL;
    if (first) rc = closure_visit(first, stack, tasks, rerun, stamp);
    while (!rc && stack->n) rc = closure_visit(stack->v[--stack->n], stack, tasks, rerun, stamp);
  }
  return rc;
}

/* The one-shot closure by one sweep down the graph's unscheduled tasks
 * in build order, without a stack: a task's build-time predecessors were
 * all built before it, so going down from the root's last task, each
 * task is marked (needed) before it is reached, and marks its own
 * predecessors then.  The sweep stops once no marked task is left below.
 * It only marks and counts (*count tasks, all in tasks_all from *low on):
 * the caller lists them in build order, the order the DFS (closure) gets
 * by picking or sorting, or takes the graph's own list when they are all
 * of its new tasks.  Only where no task has an explicit edge (mz_depend
 * may point forward).
 *
 * Returns 1 when done, 0 when it gave up: it found the root's tasks far
 * apart, with more than about four unneeded tasks between them per
 * needed one (then the DFS, with a new stamp, costs less than the rest
 * of the sweep; marks left with this stamp are never read again), or a
 * negative error. */
static int root_mark(mz_op *op, uint64_t stamp, size_t *pending, uint32_t *maxid) {
  bool tup = op->kind == MZ__K_TUPLE && !mz__op_t(op);
  unsigned n = tup ? mz__tuple_n(op) : 1;
  mz_op *const *el = tup ? mz__tuple_elems(op) : &op;
  for (unsigned i = 0; i < n; i++) {
    mz_op *e = el[i];
    if (e->kind == MZ__K_TUPLE && !mz__op_t(e)) {
      root_mark(e, stamp, pending, maxid);
      continue;
    }
    mz_op *first = mz__op_t(e) ? e : e->kind == MZ__K_VALUE ? mz__value_producer(e) : NULL;
    if (!first) continue;
    struct mz__task *t = mz__task_of(first);
    if (mz__task_mark(t) == stamp || atomic_load_explicit(&t->state, memory_order_relaxed) != MZ__T_NEW) continue;
    mz__task_set_mark(t, stamp);
    ++*pending;
    if (first->id > *maxid) *maxid = first->id;
  }
  return MZ_OK;
}

static int closure_sweep(mz_graph *g, mz_op *root, uint64_t stamp, size_t *count, size_t *low) {
  size_t pending = 0, n = 0;
  uint32_t maxid = 0;
  *count = 0;
  root_mark(root, stamp, &pending, &maxid);
  if (!pending) return 1;
  /* The root's last task in tasks_all (in id order), from the end. */
  size_t lo = g->first_new, hi = g->ntasks_all;
  if (g->tasks_all[hi - 1]->id != maxid) {
    size_t a = lo, b = hi; /* binary search: tasks_all[a..b) */
    while (a < b) {
      size_t m = a + (b - a) / 2;
      if (g->tasks_all[m]->id < maxid) a = m + 1;
      else b = m;
    }
    hi = a + 1;
  }
  size_t skipped = 0, at = hi;
  mz_op *const *all = g->tasks_all;
  for (size_t i = hi; pending && i-- > lo;) {
    mz_op *op = all[i];
    struct mz__task *t = mz__task_of(op);
    if (mz__task_mark(t) != stamp) {
      if (__builtin_expect(++skipped > 4 * (n + pending) + 256, 0)) return 0;
      continue;
    }
    pending--;
    n++;
    at = i;
    op->color = 0;
    t->succs.nrun = 0;
    mz_op *const *bp = op->u.bpreds;
    for (unsigned k = 0, nb = mz__task_nbpreds(t); k < nb; k++) {
      struct mz__task *pt = mz__task_of(bp[k]);
      if (mz__task_mark(pt) == stamp || atomic_load_explicit(&pt->state, memory_order_relaxed) != MZ__T_NEW) continue;
      mz__task_set_mark(pt, stamp);
      pending++;
    }
  }
  *count = n;
  *low = at;
  return 1;
}

/* In a runtime with host memory only and no device that waits, a task
 * with no edge and no buffer has nothing to plan: no predecessor, no
 * device record (xdev_set's NULL case), and the perf models' size bucket
 * 0.  Readied so by the edge pass (schedule_locked) or all_new_mark. */
static inline void ready_bare(mz_op *op, struct mz__task *t) {
  t->npreds = 0;
  t->exec.args_dev1 = 0;
  mz__task_set_preds(t, NULL, NULL);
  op->pm_key1 = 1;
}

/* The one-shot closure where root is a tuple of exactly the graph's new
 * tasks (tasks_all from first_new on), in build order: the common "join
 * of all I built".  Every predecessor of a new task is new or was
 * scheduled, so the closure is the whole list, which one pass marks and
 * readies for the edge pass (what closure_sweep does per task) without
 * reading a task before: the root's elements are checked against the
 * list by address.  A task without an edge or a buffer, where bare_ok,
 * gets here what the edge pass would give it (bare), so that a run of
 * such tasks alone skips that pass (*nbare counts them).  Returns 1 when
 * done, 0 when root is not such a tuple (nothing was touched), -1 when a
 * task of the list was scheduled already (marks made with stamp are left:
 * the caller takes a new one). */
static int all_new_mark(mz_graph *g, mz_op *root, uint64_t stamp, bool bare_ok, size_t *nbare) {
  size_t lo = g->first_new, n = g->ntasks_all - lo;
  if (root->kind != MZ__K_TUPLE || mz__tuple_n(root) != n) return 0;
  mz_op *const *el = mz__tuple_elems(root), *const *all = g->tasks_all + lo;
  for (size_t i = 0; i < n; i++)
    if (el[i] != all[i]) return 0;
  size_t bare = 0;
  for (size_t i = 0; i < n; i++) {
    mz_op *op = all[i];
    struct mz__task *t = mz__task_of(op);
    if (atomic_load_explicit(&t->state, memory_order_relaxed) != MZ__T_NEW) return -1;
    mz__task_set_mark(t, stamp);
    op->color = 0;
    t->succs.nrun = 0;
    if (bare_ok && !op->u.bpreds && !t->nacc && !op->cold) { /* (no cold record: no explicit edge) */
      ready_bare(op, t);
      bare++;
    }
  }
  *nbare = bare;
  return 1;
}

/* The n tasks of g marked with stamp, in build order, into v: picked from
 * the graph's list from index from on (every one of them is there). */
static void pick_marked(const mz_graph *g, size_t from, uint64_t stamp, mz_op **v, size_t n) {
  for (size_t i = from, k = 0; i < g->ntasks_all && k < n; i++)
    if (mz__task_mark(mz__task_of(g->tasks_all[i])) == stamp) v[k++] = g->tasks_all[i];
}

/* A reader that a one-shot run would give a newer value than the one at
 * its build point: a writer of the buffer built after it has run already.
 * Returns that writer's id, or 0. */
static uint32_t stale_read(mz_graph *g, const mz_op *op, mz_buffer **buf) {
  const struct mz__task *t = mz__task_of(op);
  for (unsigned a = 0; a < t->nacc; a++) {
    struct mz__access acc = mz__task_access(t, a);
    if (!(mz__acc_mode(acc) & 1)) continue;
    const struct mz__bentry *be = mz__graph_bentry(g, mz__acc_buf(acc));
    if (be && be->ran_writer > op->id) {
      *buf = mz__acc_buf(acc);
      return be->ran_writer;
    }
  }
  return 0;
}

/* Wait until no run of g can still touch its tasks (a re-run resets
 * them).  rt->lock is held on entry and on return. */
static int wait_graph_quiet(mz_runtime *rt, mz_graph *g) {
  while (g->active) {
    if (mz__in_runtime_thread) return MZ_EDEADLK;
    pthread_cond_wait(&rt->idle, &rt->lock);
  }
  return MZ_OK;
}

static int schedule(mz_graph *g, mz_op *root, const mz_run_options *opts, bool rerun, mz_future **out);

/* A task of a re-run, done (or new) with no run of its graph in flight:
 * its successors and failure mark belong to the last run. */
static void reset_for_rerun(struct mz__task *t) {
  /* (Its run's count stays until its caller clears it: it tells a heap
   * array from the run's, which is the arena's.) */
  if (mz__succs_heap(&t->succs)) free(t->succs.v);
  t->succs.v = NULL;
  t->succs.n = 0;
  atomic_store_explicit(&t->pred_failed, false, memory_order_relaxed);
}

/* Keep root's closure (in build order) for its next mz_graph_run.  The
 * closure cannot change once its tasks ran: build-time edges are fixed,
 * and mz_depend refuses tasks that were scheduled.  On ENOMEM nothing is
 * kept, which only costs the next run the walk. */
static void keep_lowered(mz_graph *g, mz_op *root, mz_op *const *tasks, size_t ntasks) {
  struct mz__lowered *lw = &g->lowered;
  mz_op **tv = malloc((ntasks ? ntasks : 1) * sizeof *tv);
  if (!tv) return;
  if (ntasks) memcpy(tv, tasks, ntasks * sizeof *tv);
  mz__lowered_unclaim(lw);
  mz__lowered_free(lw);
  *lw = (struct mz__lowered){.root = root, .tasks = tv, .ntasks = ntasks};
}

/* The root's next run computes its edges again. */
static void unfreeze(struct mz__lowered *lw) {
  mz__lowered_unclaim(lw);
  mz__arena_free(&lw->frozen);
  free(lw->plan);
  lw->plan = NULL;
  lw->replay = false;
  lw->sources = NULL;
  lw->nsources = 0;
  lw->ungated = false;
  lw->gated = NULL;
  lw->ngated = 0;
  lw->topo = NULL;
  lw->succv = NULL;
  lw->bufs = NULL;
  lw->nbufs = 0;
}

/* Whether a device of rt can make a node wait for another on the device
 * (ops->can_wait): only then does an exec need its waits array (src/exec.c
 * fills it for device queues alone), one pointer per predecessor and
 * access that a CPU-only runtime would never touch. */
static bool rt_device_waits(const mz_runtime *rt) {
  for (unsigned i = 0; i < rt->ndev; i++)
    if (rt->devs[i]->ops->can_wait) return true;
  return false;
}

#define XD_HEAD ((sizeof(struct mz__xdev) + 15) & ~(size_t)15)

/* The bytes of a task's exec record (struct mz__xdev) in run r, and its
 * argument records, which only a runtime with a device of its own memory
 * needs (rt->nmem > 1): a host-memory device builds its call from the
 * task's values and buffers (devices/cpu/cpu.c).  None in a run without
 * records (r->xrec: a lean one). */
static size_t xdev_bytes(const struct mz__run *r, const struct mz__task *t) {
  return !r->xrec ? 0 : XD_HEAD + (r->rt->nmem > 1 ? t->nparams * sizeof(struct mz__xarg) : 0);
}

/* Point t at its predecessors preds and its exec at its record at xd
 * (NULL: none), with its arrays; its times and policy word zero. */
static void xdev_set(const mz_runtime *rt, struct mz__task *t, mz_op **preds, char *xd, struct mz__xfer *xfers,
                     struct mz__exec **waits) {
  t->exec.args_dev1 = 0;
  struct mz__xdev *x = (struct mz__xdev *)(void *)xd;
  if (x)
    *x = (struct mz__xdev){.args = t->nparams && rt->nmem > 1 ? (struct mz__xarg *)(void *)(xd + XD_HEAD) : NULL,
                           .xfers = xfers,
                           .waits = waits};
  mz__task_set_preds(t, preds, x);
}

/* The bytes of a task's block in a frozen run: its predecessors, its
 * in-run successors, then the exec's record and arrays as schedule_locked
 * sizes them (offsets in *o: successors, device record, transfers,
 * waits). */
static size_t frozen_block(const struct mz__run *r, bool dwait, const struct mz__task *t, size_t o[4]) {
  const mz_runtime *rt = r->rt;
  size_t pb = t->npreds * sizeof(mz_op *), sb = t->succs.nrun * sizeof *t->succs.v, ab = xdev_bytes(r, t),
         xb = rt->nmem > 1 ? 2 * t->nacc * sizeof(struct mz__xfer) : 0,
         wb = dwait ? (t->npreds + t->nacc) * sizeof(struct mz__exec *) : 0;
  pb = (pb + 15) & ~(size_t)15;
  sb = (sb + 15) & ~(size_t)15;
  ab = (ab + 15) & ~(size_t)15;
  xb = (xb + 15) & ~(size_t)15;
  wb = (wb + 15) & ~(size_t)15;
  o[0] = pb;
  o[1] = pb + sb;
  o[2] = pb + sb + ab;
  o[3] = pb + sb + ab + xb;
  return pb + sb + ab + xb + wb;
}

/* n ops from src to dst: the few a task has by a loop the compiler keeps
 * (a memcpy call for one or two pointers was most of what freeze spent on
 * a chain), more by memcpy. */
static inline void copy_ops(mz_op **dst, mz_op *const *src, size_t n) {
  if (n > 4) {
    memcpy(dst, src, n * sizeof *dst);
    return;
  }
  for (size_t i = 0; i < n && i < 4; i++) dst[i] = src[i];
}

/* What freeze needs to size its arena, summed over the run's tasks where
 * they are committed (schedule_locked), so that it walks them once: the
 * bytes of their blocks (frozen_block), the tasks with outside gates and
 * those without predecessors. */
struct frz_sizes {
  size_t total, ng, ns;
};

/* Run r of lw's root has only in-run edges and touches no partitioned
 * buffer (the caller checked): copy its run order, its tasks' predecessor
 * and successor lists and exec arrays, and its buffers' hazard records
 * into a new frozen arena, and point the tasks at it, so that the next
 * run replays them.  rt->lock is held and r has not started. */
static void freeze(struct mz__lowered *lw, struct mz__run *r, mz_op *const *touched, size_t ntouched,
                   const struct frz_sizes *z) {
  mz_runtime *rt = r->rt;
  size_t n = r->ntasks, total = z->total, nrd = 0, ng = z->ng, ns = z->ns, o[4];
  bool dwait = rt_device_waits(rt);
  for (size_t i = 0; i < ntouched; i++) nrd += ((mz_buffer *)(void *)touched[i])->hz.nreaders;
  mz__lowered_unclaim(lw); /* its entries are in the arena replaced */
  struct mz__arena a = {.pool = &rt->chunks};
  mz_op **topo = mz__arena_alloc(&a, (n ? n : 1) * sizeof *topo);
  mz_op ***succv = mz__arena_alloc(&a, (n ? n : 1) * sizeof *succv);
  struct mz__lwbuf *bufs = mz__arena_alloc(&a, (ntouched ? ntouched : 1) * sizeof *bufs);
  mz_op **rd = mz__arena_alloc(&a, (nrd ? nrd : 1) * sizeof *rd);
  char *mem = mz__arena_alloc(&a, total ? total : 1);
  struct mz__lwgate *gated = ng ? mz__arena_alloc(&a, ng * sizeof *gated) : NULL;
  /* The sources, in the array of the tasks' blocks' arena (none: the run
   * gates stay, see ungated below). */
  mz_op **src = ns ? mz__arena_alloc(&a, ns * sizeof *src) : NULL;
  if (!topo || !succv || !bufs || !rd || !mem || (ng && !gated)) {
    mz__arena_free(&a);
    unfreeze(lw);
    return;
  }
  /* This run's records only: a reader of another run in flight (this run
   * only read the buffer) is not this run's to replay; named by a replay,
   * it would outlive its run and its graph. */
  for (size_t i = 0; i < ntouched; i++) {
    mz_buffer *b = (mz_buffer *)(void *)touched[i];
    mz_op *w = b->hz.writer && mz__task_of(b->hz.writer)->run == r ? b->hz.writer : NULL;
    unsigned k = 0;
    for (unsigned j = 0; j < b->hz.nreaders; j++)
      if (mz__task_of(b->hz.readers[j])->run == r) rd[k++] = b->hz.readers[j];
    bufs[i] = (struct mz__lwbuf){.b = b, .lw = lw, .writer = w, .nreaders = k, .readers = rd};
    rd += k;
  }
  for (size_t i = 0, k = 0, j = 0; i < n; i++) {
    struct mz__task *t = mz__task_of(r->tasks[i]);
    size_t sz = frozen_block(r, dwait, t, o);
    uint32_t tg = mz__task_ngates(t);
    if (tg) gated[k++] = (struct mz__lwgate){.idx = (uint32_t)i, .n = tg};
    if (src && !t->npreds) src[j++] = r->tasks[i];
    topo[i] = r->tasks[i];
    copy_ops((mz_op **)(void *)mem, mz__task_preds(t), t->npreds);
    copy_ops((mz_op **)(void *)(mem + o[0]), t->succs.v, t->succs.nrun);
    succv[i] = (mz_op **)(void *)(mem + o[0]);
    xdev_set(rt, t, t->npreds ? (mz_op **)(void *)mem : NULL, o[2] > o[1] ? mem + o[1] : NULL,
             o[3] > o[2] ? (void *)(mem + o[2]) : NULL, dwait && t->npreds + t->nacc ? (void *)(mem + o[3]) : NULL);
    mem += sz;
  }
  bool ungated = ng == 0;
  if (ns && !src) ungated = false; /* no list: the run gates stay */
  mz__arena_free(&lw->frozen);
  free(lw->plan); /* of the tasks in the old order: this run plans */
  lw->plan = NULL;
  lw->frozen = a;
  lw->sources = src;
  lw->nsources = src ? ns : 0;
  lw->ungated = ungated;
  lw->gated = gated;
  lw->ngated = ng;
  lw->topo = topo;
  lw->succv = succv;
  lw->bufs = bufs;
  lw->nbufs = ntouched;
  lw->xrec = r->xrec;
  lw->replay = true;
}
/* A task joins run r: the per-run state of its last run is reset (its
 * edges and counters are set by the caller).  Only fields on the task's
 * first lines: its exec's times and copies are reset where it is planned
 * (plan_exec, src/exec.c), or at its end when it never was (finish).
 * fresh: not a replay, so its successors are this run's; host_wait: that
 * bit's value to start with (a replay whose gates are open sets it). */
static inline void task_enter(mz_op *op, struct mz__run *r, bool fresh, bool host_wait) {
  struct mz__task *t = mz__task_of(op);
  /* Taken over from a run still alive (see mz__run_unref): counted on the
   * old run, under rt->lock, as its end reads it. */
  if (t->run && t->run != r) t->run->ntaken++;
  t->run = r;
  t->exec.queue = -1;
  /* (Its status, in the exec, is the last run's until it is planned,
   * which clears it, or ends: read only once it is DONE.) */
  atomic_store_explicit(&t->rerouted, false, memory_order_relaxed);
  if (__builtin_expect(t->plan_times, 0)) {
    struct mz__tcold *c = mz__task_cold_get(t);
    c->start = c->end = 0;
  }
  /* The placement bits but shared (set where the run starts, or kept by a
   * replay), and host_wait as asked: together, so that the compiler makes
   * one store of their byte. */
  t->deferred = t->fixed = t->planned = t->plan_times = t->plan_after = false;
  t->host_wait = host_wait;
  /* The second line only where something may have changed it. */
  if (fresh || __atomic_load_n(&t->replay_dirty, __ATOMIC_RELAXED)) {
    /* (The record's policy word: a fresh run's record is made zeroed,
     * xdev_set; a replay clears its frozen run's, reused.) */
    struct mz__tcold *c = mz__task_cold_get(t);
    if (c) {
      c->prev = c->next = NULL;
      c->policy_word = 0;
    }
  }
  if (fresh) {
    __atomic_store_n(&t->replay_dirty, true, __ATOMIC_RELAXED); /* its successors are this run's */
  }
}

/* Whether lw's frozen run still holds all of its edges: no other run has a
 * hazard record on its buffers (its own runs, which a re-run waits for,
 * dropped theirs at their end), none is poisoned (a read of it would be
 * canceled) and none was partitioned since; and, in the same pass over
 * the buffers, claim them (src/hazard.h): true.  The pass is made only
 * where a claim was broken since the last one (lw->claimed false): else
 * nothing can have changed what it checks, and a replay touches no
 * buffer.  false: some claims may be set, which do nothing while no
 * replay of lw is in flight.  rt->lock is held. */
static bool replay_claim(struct mz__lowered *lw) {
  if (lw->claimed) return true;
  for (size_t i = 0; i < lw->nbufs; i++) {
    const struct mz__lwbuf *lb = &lw->bufs[i];
    mz_buffer *b = lb->b;
    if (atomic_load_explicit(&b->poison, memory_order_relaxed) || atomic_load_explicit(&b->has_tiles, memory_order_relaxed) ||
        !mz__hz_claim(&b->hz, lb))
      return false;
  }
  lw->claimed = true;
  return true;
}

/* Commit run r from lw's frozen run: the same edges, counters as at its
 * start (the buffers' hazard records as at its end: their claims).
 * rt->lock is held; r->tasks holds lw->topo.  Cannot fail.  Out of line:
 * inlined into schedule_locked, its loop kept r on the stack (two loads
 * a task more per re-run under callgrind once the exec records came). */
static __attribute__((noinline)) void replay(struct mz__lowered *lw, struct mz__run *r) {
  /* The last run shared every task and this one will too: no task is
   * placed, so none needs its run gate (it keeps a task from being placed
   * before the run is committed); its start releases the sources. */
  bool open = lw->ungated && lw->all_shared && !r->devok && mz__run_may_share(r);
  r->gates_open = open;
  /* With the gates open, the sources are made QUEUED for their hand-off
   * here, in the pass that resets them, not in another pass by run_start
   * (a graph larger than the caches is walked once less per run), and
   * run_start hands lw's array of them over whole. */
  mz_runtime *rt = r->rt;
  bool handed = open && rt->share_dev && rt->share_dev->ops->share_array;
  /* Every task a source (independent work): the workers start on the
   * first ones while this pass resets the rest, in about 8 pieces of the
   * task list (mz__run_share_early), so that a graph larger than the
   * caches is not walked twice one after the other.  Only where nothing
   * reads the run before its start (no plan, no virtual clock), and for
   * pieces worth a hand-off; run_start hands over the last piece, so the
   * run cannot end while it is being committed. */
  size_t n = r->ntasks, piece = n / 8 > 256 ? n / 8 : 256, from = 0;
  /* The next gated task (lw->gated), in locals: the loop's atomic stores
   * would make the compiler load lw's fields again for every task. */
  const struct mz__lwgate *gate = lw->gated, *gend = gate + lw->ngated;
  size_t gnext = gate < gend ? gate->idx : SIZE_MAX;
  bool early = handed && lw->nsources == n && n >= 2 * piece && mz__run_early_ok(r);
  /* Other work (chains, stencils, trees): the sources this pass has reset
   * go to the workers after its first 256 tasks, then after each piece, so
   * that this pass runs beside the workers rather than before them (it
   * takes a quarter to a half of a chain's re-run on its own).  They may
   * then end a task whose successor is not reset yet: struct mz__run's
   * resetting makes them wait for it, and its src_hold keeps the run from
   * ending before run_start.  nsrc: the sources reset so far (lw->sources
   * is in task order); from counts those handed over. */
  bool lag = handed && !early && lw->nsources < n && n >= 2 * piece && mz__run_early_ok(r);
  size_t nsrc = 0, hand_at = 256;
  for (size_t i = 0; i < n; i++) {
    if (__builtin_expect(lag && i == hand_at, 0)) {
      if (nsrc > from) {
        if (!r->src_hold) {
          /* Before the first hand-off, which publishes both. */
          r->src_hold = r->src_list = true;
          atomic_store_explicit(&r->remaining, n + 1, memory_order_relaxed);
          atomic_store_explicit(&r->resetting, true, memory_order_relaxed);
        }
        mz__run_share_early(r, lw->sources + from, nsrc - from);
        from = nsrc;
      }
      hand_at = i + piece;
    }
    mz_op *op = r->tasks[i];
    struct mz__task *t = mz__task_of(op);
    /* The task's second line (successors, policy word, plan links) only
     * where something changed it since the last replay: a replay of a
     * CPU-only graph under a policy that shares then writes one line per
     * task.
     * (The mark need not be set: nothing after a replay in this call
     * reads it, and later calls use new stamps.) */
    if (__atomic_load_n(&t->replay_dirty, __ATOMIC_RELAXED)) {
      struct mz__succs *sc = &t->succs;
      if (mz__succs_heap(sc)) free(sc->v);
      sc->v = sc->nrun ? lw->succv[i] : NULL;
      sc->n = sc->nrun;
      if (mz__exec_xd(&t->exec)) mz__exec_xd(&t->exec)->policy_word = 0; /* the frozen run's record */
    }
    atomic_store_explicit(&t->pred_failed, false, memory_order_relaxed);
    task_enter(op, r, false, open);
    __atomic_store_n(&t->replay_dirty, false, __ATOMIC_RELAXED);
    atomic_store_explicit(&t->unsub, t->npreds, memory_order_relaxed);
    /* Its outside gates (MPI's folded receives): a run with any is never
     * open.  The run has not started, and a replay has no edge from
     * another run, so no other thread reads the count yet. */
    uint32_t unfin = t->npreds + !open;
    if (__builtin_expect(i == gnext, 0)) {
      unfin += gate++->n;
      gnext = gate < gend ? gate->idx : SIZE_MAX;
    }
    atomic_store_explicit(&t->unfin, unfin, memory_order_relaxed);
    if (handed && t->npreds == 0) {
      /* The hand-off takes a node with no plan link (run_start's
       * ready_shared); a source with one leaves it all to run_start. */
      if (__builtin_expect(!mz__task_has_plan_next(t), 1)) {
        atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
        nsrc++;
        /* Once handed over, a task may run and end: not touched again. */
        if (early && i + 1 - from == piece && i + 1 < n) {
          mz__run_share_early(r, r->tasks + from, piece);
          from = i + 1;
        }
        continue;
      }
      /* From here on run_start walks the rest (ready_shared): the sources
       * reset so far are handed over now, this one and the next are not. */
      if (early && i > from) mz__run_share_early(r, r->tasks + from, i - from);
      if (early) from = i;
      if (lag && nsrc > from && r->src_hold) {
        mz__run_share_early(r, lw->sources + from, nsrc - from);
        from = nsrc;
      }
      handed = lag = false;
    }
    atomic_store_explicit(&t->state, MZ__T_WAIT, memory_order_release);
  }
  /* Every task is reset: the workers need not look (release: a worker that
   * reads false sees every reset). */
  if (r->src_hold) atomic_store_explicit(&r->resetting, false, memory_order_release);
  r->src_handed = handed;
  r->src_from = from;
}

/* The run whose first n tasks were committed with their gates open
 * (schedule_locked's commit pass) starts the usual way after all: those
 * tasks take their run gate back, as if committed gated.  Nothing of the
 * run has been released, so only an edge from a run in flight may drop a
 * count meanwhile, and never a source's last: a source with such an edge
 * kept its gate, and a task that is not a source waits for its in-run
 * predecessors.  rt->lock is held. */
static void close_gates(mz_op *const *tasks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    struct mz__task *t = mz__task_of(tasks[i]);
    t->host_wait = false;
    if (atomic_load_explicit(&t->unsub, memory_order_relaxed) != 0) {
      atomic_fetch_add_explicit(&t->unfin, 1, memory_order_relaxed);
    } else if (atomic_load_explicit(&t->state, memory_order_relaxed) == MZ__T_QUEUED) {
      atomic_store_explicit(&t->unfin, 1, memory_order_relaxed);
      atomic_store_explicit(&t->state, MZ__T_WAIT, memory_order_release);
    }
  }
}

static int schedule_locked(mz_graph *g, mz_op *root, const mz_run_options *opts, bool rerun, const char *who,
                           mz_future **out);

int mz_schedule(mz_graph *g, mz_op *root, const char *policy, mz_future **out) {
  return schedule(g, root, &(mz_run_options){.policy = policy}, false, out);
}

int mz_graph_run(mz_graph *g, mz_op *root, const char *policy, mz_future **out) {
  return schedule(g, root, &(mz_run_options){.policy = policy}, true, out);
}

int mz_graph_run_with(mz_graph *g, mz_op *root, const mz_run_options *opts, mz_future **out) {
  return schedule(g, root, opts ? opts : &(mz_run_options){0}, true, out);
}

static int schedule(mz_graph *g, mz_op *root, const mz_run_options *opts, bool rerun, mz_future **out) {
  const char *who = rerun ? "mz_graph_run" : "mz_schedule";
  if (out) *out = NULL;
  if (!MZ__LIVE(g, MZ__TAG_GRAPH) || !out) return MZ_EINVAL; /* refused by the tag check */
  mz_runtime *rt = g->rt;
  if (!root) return mz__set_error(rt, MZ_EINVAL, "%s: NULL root", who);
  /* A re-run first waits, without the graph's lock (a host task of the run
   * it waits for may build on the graph), for the graph's runs to end. */
  if (rerun) {
    pthread_mutex_lock(&rt->lock);
    int wrc = wait_graph_quiet(rt, g);
    pthread_mutex_unlock(&rt->lock);
    if (wrc)
      return mz__set_error(rt, wrc, "mz_graph_run: called from a runtime thread while a run of this graph is in flight; it would deadlock");
  }
  mz__ylock_lock(&g->lock);
  int rc = schedule_locked(g, root, opts, rerun, who, out);
  mz__ylock_unlock(&g->lock);
  if (rc == MZ_EAGAIN) return schedule(g, root, opts, rerun, out); /* a run of g started meanwhile */
  return rc;
}

/* Run r's plan, by its policy (pol, whose state is pstate), or the one
 * the last run of the same tasks made (struct mz__lowered) when that may
 * be kept: a replay under the same policy, with every device, and no
 * device lost or revived since (rt->dev_epoch), nor, for a plan that
 * reads the perf models, an estimate moved (rt->plan_epoch).  A plan that
 * fails fails every task of r (which is committed), so that its future
 * resolves.  Before r starts; g->lock is held.  Out of line: runs of
 * policies without plan (eager, ws), and CPU-only runs that are shared,
 * not planned, pay nothing here. */
static __attribute__((noinline)) void plan_run(struct mz__run *r, unsigned pol, void *pstate) {
  mz_runtime *rt = r->rt;
  const struct mz_policy_ops *po = rt->pol[pol];
  enum mz__plan_keep keep = mz__policy_keeps_plan(po);
  struct mz__lowered *kw = r->lw && r->lw->replay && !r->devok && keep != MZ__KEEP_NONE ? r->lw : NULL;
  uint64_t epoch = atomic_load_explicit(keep == MZ__KEEP_MODELS ? &rt->plan_epoch : &rt->dev_epoch, memory_order_relaxed);
  if (kw && r->replayed == kw && kw->plan && kw->plan_pol == pol && kw->plan_epoch == epoch &&
      mz__plan_restore(r, kw->plan, mz__runtime_clock(rt))) {
    r->plan_kept = true;
    return;
  }
  uint64_t c0 = mz__runtime_clock(rt), t0 = mz__now_ns();
  r->planning = true;
  int rc = po->plan(pstate, &rt->sched, (mz_task *const *)r->tasks, r->ntasks);
  r->planning = false;
  /* Checked even after a failed plan: a cycle would hang the run (its
   * nodes are canceled through the same counts). */
  int orc = mz__plan_order_check(r);
  r->plan_ns = mz__now_ns() - t0;
  bool cycle = rc >= 0 && orc == MZ_EPOLICY;
  if (rc >= 0) rc = orc;
  if (r->lw) {
    free(r->lw->plan); /* another policy's, or made from older estimates */
    r->lw->plan = NULL;
  }
  if (kw && rc >= 0) {
    kw->plan = mz__plan_save(r, c0);
    kw->plan_pol = pol;
    kw->plan_epoch = epoch;
  }
  if (rc < 0) {
    char why[160];
    if (cycle)
      snprintf(why, sizeof why, "policy '%s': its plan order (mz_task_set_after) has a cycle", po->name);
    else
      snprintf(why, sizeof why, "policy '%s': its plan returned %d (%s)", po->name, rc, mz_err_name(rc));
    mz__fail_message(r, NULL, mz__policy_code(rc), why);
  }
}

/* The body of mz_schedule and mz_graph_run; g->lock is held. */
static int schedule_locked(mz_graph *g, mz_op *root, const mz_run_options *opts, bool rerun, const char *who,
                           mz_future **out) {
  mz_runtime *rt = g->rt;
  const char *policy = opts->policy;
  if (g->status) return mz__set_error(rt, g->status, "%s", g->message);
  if (mz__op_graph(root) != g) return mz__set_error(rt, MZ_EINVAL, "%s: the root belongs to another graph", who);
  if (opts->devices && !opts->ndevices)
    return mz__set_error(rt, MZ_EINVAL, "%s: an empty device list (give NULL for every device)", who);
  for (unsigned i = 0; opts->devices && i < opts->ndevices; i++)
    if (opts->devices[i] >= rt->ndev)
      return mz__set_error(rt, MZ_EINVAL, "%s: device %u does not exist (the runtime has %u)", who, opts->devices[i],
                           rt->ndev);
  unsigned pol;
  if (policy) {
    if (mz__policy_find(rt, policy, &pol))
      return mz__set_error(rt, MZ_ENOENT, "%s: no policy named '%s'", who, policy);
  } else {
    pol = rt->default_pol;
  }
  void *pstate;
  int rc = mz__policy_instance(rt, pol, &pstate);
  if (rc)
    return mz__set_error(rt, mz__policy_code(rc), "%s: policy '%s' failed to start: its init returned %d (%s)", who,
                         rt->pol[pol]->name, rc, mz_err_name(rc));

  struct mz_future *f = calloc(1, sizeof *f);
  if (!f) return mz__set_error(rt, MZ_ENOMEM, "%s: out of memory", who);
  struct mz__run *r = &f->run;
  r->arena.pool = &rt->chunks;
  if (opts->devices) {
    r->devok = calloc(rt->ndev, 1);
    if (!r->devok) {
      free(f);
      return mz__set_error(rt, MZ_ENOMEM, "%s: out of memory", who);
    }
    for (unsigned i = 0; i < opts->ndevices; i++) r->devok[opts->devices[i]] = 1;
  }
  r->tag = MZ__TAG_FUTURE;
  r->rt = rt;
  r->g = g;
  r->policy = pol;
  r->efd = -1;
  atomic_init(&r->refs, 2); /* the future and the execution */
  pthread_mutex_init(&r->m, NULL);
  pthread_cond_init(&r->c, NULL);
  r->busy = calloc(rt->ndev ? rt->ndev : 1, sizeof *r->busy);
  struct vec tasks = {0}, stack = {0}, preds = {0}, touched = {0}, topo = {0};
  unsigned *next_pred = NULL; /* the cycle search's stack: each entry's next predecessor */
  size_t cap_next = 0;
  bool dwait = rt_device_waits(rt);
  /* A root run before with mz_graph_run: its closure in build order is
   * kept (struct mz__lowered), so only hazards and counters are set up
   * again.  (The root's leaves are the future's, flattened when it is
   * asked for them: mz__run_results.) */
  struct mz__lowered *lw = rerun && g->lowered.root == root ? &g->lowered : NULL;
  if (!r->busy) rc = MZ_ENOMEM;
  r->root = root;
  r->t0 = mz__now_ns();

  pthread_mutex_lock(&rt->lock);
  if (rerun && g->active) {
    /* Another thread started a run of g between our wait and the lock. */
    pthread_mutex_unlock(&rt->lock);
    free(r->busy);
    free(r->devok);
    pthread_mutex_destroy(&r->m);
    pthread_cond_destroy(&r->c);
    free(f);
    return MZ_EAGAIN;
  }
  uint64_t stamp = mz__stamp_next(rt);
  bool in_order = false; /* the closure came in build order (closure_sweep) */
  bool lent = false;     /* the closure is g->tasks_all from first_new: not ours to free */
  r->id = ++rt->next_run_id;
  mz__observe_init(rt, r);
  /* What decides whether the next run of this root may replay this one:
   * an edge to a task of another run, a partitioned buffer, a lost edge. */
  bool forward = false, cross_any = false, alias_any = false;
  size_t nedges = 0; /* edges within the run: room for the successor lists (below) */
  size_t nfail = 0;
  /* Whether a task without edges and buffers is readied bare (ready_bare);
   * nbare: the run's tasks all_new_mark readied so (the edge pass is
   * skipped when they are all). */
  bool bare_ok = rt->nmem <= 1 && !dwait && !r->xrec;
  size_t nbare = 0;
  /* The root's last run froze its edges and no other run holds records on
   * its buffers: replay them. */
  if (!rc && lw && lw->replay && lw->xrec == r->xrec && replay_claim(lw)) {
    /* From the runtime's kept blocks: a list this large, malloc'd and
     * freed each run, was mapped and faulted in again each time. */
    r->tasks = mz__chunk_pool_get(&rt->chunks, (lw->ntasks ? lw->ntasks : 1) * sizeof *r->tasks);
    r->tasks_pool = r->tasks ? &rt->chunks : NULL;
    if (r->tasks) {
      lw->claim_run = r; /* the buffers' records are the claims' */
      if (lw->ntasks) memcpy(r->tasks, lw->topo, lw->ntasks * sizeof *r->tasks);
      r->ntasks = lw->ntasks;
      atomic_init(&r->remaining, r->ntasks);
      r->replayed = lw; /* before replay, which may hand tasks over */
      replay(lw, r);
      goto linked;
    }
  }
  /* 1. Closure, from the tasks the root names (a task, a tuple holding
   * tasks, values they produce). */
  if (!rc && lw) {
    tasks.v = malloc((lw->ntasks ? lw->ntasks : 1) * sizeof *tasks.v);
    if (!tasks.v) rc = MZ_ENOMEM;
    for (size_t i = 0; !rc && i < lw->ntasks; i++) {
      mz_op *op = lw->tasks[i];
      struct mz__task *t = mz__task_of(op);
      mz__task_set_mark(t, stamp);
      op->color = 0;
      reset_for_rerun(t);
      t->succs.nrun = 0;
      tasks.v[i] = op;
    }
    tasks.n = tasks.cap = rc ? 0 : lw->ntasks;
  } else if (!rc) {
    if (!rerun) { /* past the tasks scheduled since (the sweep starts there) */
      size_t from = g->first_new;
      while (from < g->ntasks_all && atomic_load_explicit(&mz__task_of(g->tasks_all[from])->state, memory_order_relaxed) != MZ__T_NEW)
        from++;
      g->first_new = from;
    }
    int fast = 0;
    /* (The first mz_graph_run of a graph never scheduled too: its
     * closure is every task, none of which ran.) */
    if ((!rerun || g->first_new == 0) && !g->xpreds_any && g->first_new < g->ntasks_all) {
      fast = all_new_mark(g, root, stamp, bare_ok, &nbare);
      if (fast < 0) stamp = mz__stamp_next(rt); /* (its marks are never read again) */
    }
    if (fast > 0) {
      /* Every new task: the graph's list from first_new is the run's
       * (lent: see below). */
      in_order = lent = true;
      tasks.v = g->tasks_all + g->first_new;
      tasks.n = tasks.cap = g->ntasks_all - g->first_new;
    } else if (!rerun && !g->xpreds_any && g->first_new < g->ntasks_all) {
      size_t cnt = 0, low = 0;
      nbare = 0;
      rc = closure_sweep(g, root, stamp, &cnt, &low);
      if (rc == 1) {
        rc = MZ_OK;
        in_order = true;
        if (cnt && cnt == g->ntasks_all - g->first_new) {
          /* Every new task, so the graph's list from first_new is the
           * run's: lent, not copied (its block outlives the run: see
           * tasks_lent, src/objects/mz_graph.h). */
          tasks.v = g->tasks_all + g->first_new;
          lent = true;
        } else if ((tasks.v = malloc((cnt ? cnt : 1) * sizeof *tasks.v)) != NULL) {
          pick_marked(g, low, stamp, tasks.v, cnt);
        } else {
          rc = MZ_ENOMEM;
        }
        tasks.n = tasks.cap = rc ? 0 : cnt;
      } else if (rc == 0) { /* gave up: the DFS, under a stamp of its own */
        stamp = mz__stamp_next(rt);
      }
    }
    if (!rc && !in_order) {
      /* Room for every task that may be in the closure (those not
       * scheduled yet, or all of them for mz_graph_run), so that the list
       * is not copied as it grows; at most 64 Ki of them (a small root of
       * a large graph scheduled again and again would map and unmap that
       * much each time), a larger closure grows from there. */
      size_t most = g->ntasks_all - (rerun ? 0 : g->first_new);
      if (most > 65536) most = 65536;
      tasks.v = malloc((most ? most : 1) * sizeof *tasks.v);
      tasks.cap = tasks.v ? (most ? most : 1) : 0;
      if (!tasks.v) rc = MZ_ENOMEM;
      if (!rc) rc = closure(root, &stack, &tasks, rerun, stamp);
    }
  }
  /* Build order (ids).  The graph lists its tasks in build order: when the
   * unscheduled part of that list is not much longer than the closure,
   * picking the marked tasks from it is cheaper than sorting. */
  if (!rc && tasks.n && !lw && !in_order) {
    size_t from = g->first_new;
    while (from < g->ntasks_all && atomic_load_explicit(&mz__task_of(g->tasks_all[from])->state, memory_order_relaxed) != MZ__T_NEW)
      from++;
    g->first_new = from;
    if (rerun) from = 0;
    if (g->ntasks_all - from <= 4 * tasks.n) {
      pick_marked(g, from, stamp, tasks.v, tasks.n);
    } else {
      qsort(tasks.v, tasks.n, sizeof *tasks.v, by_id);
    }
  }

  /* 2. Hazards into scratch state, and each task's predecessor list.  Every
   * edge points to an earlier task except explicit ones (mz_depend): build
   * order is a topological order unless one of those points forward. */
  mz_op *self_cycle = NULL, *stale_op = NULL;
  mz_buffer *stale_buf = NULL;
  uint32_t stale_writer = 0;
  for (size_t i = 0; !rc && nbare < tasks.n && i < tasks.n; i++) {
    mz_op *op = tasks.v[i];
    struct mz__task *t = mz__task_of(op);
    if (bare_ok && !mz__task_nbpreds(t) && !t->nacc && !mz__task_nxpreds(t)) {
      ready_bare(op, t);
      continue;
    }
    if (!rerun && op->id < g->ran_max && (stale_writer = stale_read(g, op, &stale_buf)) != 0) {
      stale_op = op;
      rc = MZ_ESTATE;
      break;
    }
    preds.n = 0;
    /* The build-time predecessors are distinct and never op: into the
     * empty list without the duplicate scan. */
    unsigned nb = mz__task_nbpreds(t);
    for (unsigned k = 0; !rc && k < nb; k++) {
      mz_op *p = op->u.bpreds[k];
      if (mz__task_mark(mz__task_of(p)) != stamp && atomic_load(&mz__task_of(p)->state) == MZ__T_DONE) {
        if (mz__task_of(p)->exec.status < 0 && mz__fail_reaches(p, op)) atomic_store(&t->pred_failed, true);
        continue;
      }
      rc = vpush(&preds, p);
      if (!rc) p->color |= MZ__SEEN;
    }
    /* Every build-time predecessor kept, in order: the list starts as
     * bpreds, and is bpreds when nothing is added after them. */
    size_t nkept = preds.n;
    bool kept_all = nkept == nb;
    for (unsigned k = 0; !rc && k < mz__task_nxpreds(t); k++) {
      /* add_pred drops self edges; an explicit one is a cycle of one. */
      if (mz__task_xpreds(t)[k] == op) self_cycle = op;
      if (mz__task_xpreds(t)[k]->id > op->id) forward = true;
      rc = add_pred(op, mz__task_xpreds(t)[k], &preds, stamp);
    }
    const struct mz__acc_view av = mz__task_acc_view(t);
    for (unsigned a = 0; !rc && a < t->nacc; a++) {
      uint8_t mode;
      mz_buffer *b = mz__acc_get(&av, a, &mode);
      rc = hz_touch(b, stamp, &touched);
      if (!rc && __builtin_expect(b->parent || atomic_load_explicit(&b->has_tiles, memory_order_relaxed), 0))
        rc = alias_hazards(op, b, mode, &preds, stamp, &touched);
      if (rc) break;
      /* No writer of b in flight or earlier in this run, and the last one
       * failed: b holds no valid data (a writer in flight, done or not, is
       * an edge, and its failure cancels this node the usual way). */
      if ((mode & 1) && !b->hz.pwriter && atomic_load_explicit(&b->poison, memory_order_relaxed))
        atomic_store_explicit(&t->pred_failed, true, memory_order_relaxed);
      rc = add_pred(op, b->hz.pwriter, &preds, stamp);
      if (mode & 2) {
        for (unsigned k = 0; !rc && k < b->hz.npreaders; k++) rc = add_pred(op, b->hz.preaders[k], &preds, stamp);
        mz__hz_plan_write(&b->hz, op);
      } else if (!rc) {
        rc = mz__hz_plan_read(&b->hz, op);
      }
    }
    /* The perf models' size bucket of the task (its buffers never change),
     * noted while they are at hand: a new task whose bucket is the one
     * its queue last found saturated then takes that verdict where it
     * runs, without a call (perfmodel_tick.h). */
    if (!rc && !op->pm_key1) {
      uint64_t bytes = 0;
      for (unsigned a = 0; a < t->nacc; a++) bytes += mz__acc_buf(mz__task_access(t, a))->bytes;
      int key = mz__pm_bucket_of(bytes);
      op->pm_key1 = key < 255 ? (uint8_t)(key + 1) : 0;
    }
    /* The predecessor list and the exec's device record and arrays
     * (arguments, transfers and reads into host memory, one of each per
     * access at most, a wait per predecessor and per pending transfer) in
     * one block. */
    t->npreds = 0;
    mz__task_set_preds(t, NULL, NULL);
    if (rc) {
      unflag(&preds);
      break;
    }
    /* The predecessors are most often exactly the build-time ones (the
     * hazards repeat the argument edges): then the task points at those
     * and the run stores none. */
    bool same = kept_all && preds.n == nkept;
    size_t pb = same ? 0 : preds.n * sizeof(mz_op *), ab = xdev_bytes(r, t),
           xb = rt->nmem > 1 ? 2 * t->nacc * sizeof(struct mz__xfer) : 0, /* host memory only: no transfer */
        wb = dwait ? (preds.n + t->nacc) * sizeof(struct mz__exec *) : 0;
    pb = (pb + 15) & ~(size_t)15;
    ab = (ab + 15) & ~(size_t)15;
    xb = (xb + 15) & ~(size_t)15;
    char *blk = pb + ab + xb + wb ? mz__arena_alloc(&r->arena, pb + ab + xb + wb) : NULL;
    if (pb + ab + xb + wb && !blk) {
      unflag(&preds);
      rc = MZ_ENOMEM;
      break;
    }
    if (pb) memcpy(blk, preds.v, preds.n * sizeof(mz_op *));
    for (size_t k = 0; k < preds.n; k++) { /* (the list is complete: its flags go) */
      preds.v[k]->color &= (uint8_t)~MZ__SEEN;
      struct mz__task *pt = mz__task_of(preds.v[k]);
      if (mz__task_mark(pt) == stamp) { /* successors in the run, and the run's edges */
        pt->succs.nrun++;
        nedges++;
      }
    }
    t->npreds = (unsigned)preds.n;
    xdev_set(rt, t, !preds.n ? NULL : same ? op->u.bpreds : (mz_op **)(void *)blk, ab ? blk + pb : NULL,
             xb ? (void *)(blk + pb + ab) : NULL, wb ? (void *)(blk + pb + ab + xb) : NULL);
  }

  /* 3. With a forward edge: a topological order over in-run edges, where a
   * grey node reached again closes a cycle.  Iterative, so a 100,000-node
   * ring is fine.  Otherwise the build order is one. */
  mz_op *cycle_at = self_cycle;
  if (!rc && !cycle_at && !forward) {
    topo = tasks;
    tasks = (struct vec){0};
  }
  for (size_t i = 0; !rc && !cycle_at && forward && i < tasks.n; i++) {
    if (tasks.v[i]->color) continue;
    stack.n = 0;
    rc = dfs_push(&stack, &next_pred, &cap_next, tasks.v[i]);
    tasks.v[i]->color = 1;
    while (!rc && stack.n && !cycle_at) {
      mz_op *op = stack.v[stack.n - 1];
      struct mz__task *t = mz__task_of(op);
      unsigned *ni = &next_pred[stack.n - 1];
      if (*ni < t->npreds) {
        mz_op *p = mz__task_preds(t)[(*ni)++];
        if (mz__task_mark(mz__task_of(p)) != stamp) continue; /* another run's task */
        if (p->color == 1) cycle_at = p;
        else if (p->color == 0) {
          p->color = 1;
          rc = dfs_push(&stack, &next_pred, &cap_next, p);
        }
      } else {
        op->color = 2;
        stack.n--;
        rc = vpush(&topo, op);
      }
    }
  }
  if (!rc && cycle_at) rc = MZ_ECYCLE;
  /* Successor lists of their exact in-run size, cut in the commit pass
   * below (a task's list before any of its successors, which come after
   * it there) from one block of the run's arena with room for every edge
   * of the run: no pass of its own. */
  mz_op **succ_room = NULL;
  if (!rc && nedges && !(succ_room = mz__arena_alloc(&r->arena, nedges * sizeof *succ_room))) rc = MZ_ENOMEM;
  if (rc) {
    /* Nothing was committed: clear the marks so the tasks stay new. */
    struct vec *all = topo.n && !tasks.n ? &topo : &tasks;
    for (size_t i = 0; i < all->n; i++) {
      /* (Reset or new: no heap array; the arena's goes with the run.) */
      struct mz__succs *sc = &mz__task_of(all->v[i])->succs;
      sc->v = NULL;
      sc->n = sc->nrun = 0;
      mz__task_set_mark(mz__task_of(all->v[i]), 0);
      mz__task_of(all->v[i])->npreds = 0;
      mz__task_set_preds(mz__task_of(all->v[i]), NULL, NULL);
      atomic_store(&mz__task_of(all->v[i])->pred_failed, false);
    }
    pthread_mutex_unlock(&rt->lock);
    if (rc == MZ_ECYCLE)
      mz__set_error(rt, rc, "%s: the graph has a cycle through node %u (%s)", who, cycle_at->id, mz__op_name(cycle_at));
    else if (rc == MZ_ESTATE)
      mz__set_error(rt, rc,
                    "%s: node %u (%s) reads a %s buffer of %zu bytes as it was when the node was built, but node "
                    "%u, built after it, has already written that buffer in an earlier run; schedule the reader "
                    "with or before that writer, or re-run both with mz_graph_run",
                    who, stale_op->id, mz__op_name(stale_op), mz_dtype_name(stale_buf->shape.dtype), stale_buf->bytes,
                    stale_writer);
    else
      mz__set_error(rt, rc, "%s: out of memory", who);
    if (!lent) free(tasks.v);
    free(stack.v);
    free(preds.v);
    free(next_pred);
    free(touched.v);
    if (!lent) free(topo.v);
    mz__arena_free(&r->arena);
    free(r->busy);
    free(r->devok);
    pthread_mutex_destroy(&r->m);
    pthread_cond_destroy(&r->c);
    free(f);
    return rc;
  }

  /* 4. Commit. */
  for (size_t i = 0; i < touched.n; i++) {
    mz_buffer *b = (mz_buffer *)(void *)touched.v[i];
    /* The last writer of b in this run (tasks were visited in build order)
     * is the highest id that has written b: a reader built before it and
     * scheduled later would read too new a value (stale_read). */
    alias_any |= b->parent || atomic_load_explicit(&b->has_tiles, memory_order_relaxed);
    mz_op *w = b->hz.pwriter;
    if (w && mz__task_mark(mz__task_of(w)) == stamp && mz__op_graph(w) == g) {
      struct mz__bentry *be = mz__graph_bentry(g, b);
      if (be && be->ran_writer < w->id) be->ran_writer = w->id;
      if (g->ran_max < w->id) g->ran_max = w->id;
    }
    mz__hz_commit(&b->hz);
  }
  r->tasks = topo.v;
  r->ntasks = topo.n;
  r->tasks_lent = lent;
  g->tasks_lent |= lent;
  atomic_init(&r->remaining, topo.n);
  topo.v = NULL;
  /* One pass in topological order: a task's in-run predecessors were set
   * up before it, so its edge can be appended to their successor lists;
   * edges from tasks of runs in flight are registered under their locks,
   * after the task's counters are set.
   *
   * Where every task will go to the CPU workers' pool (only the CPU can
   * run any of them, under a policy whose CPU placements are preferences:
   * mz__run_may_share; such a run is not planned), the run is lowered
   * with its gates open
   * (struct mz__run's src_v): nothing is placed, so the run gate, which
   * keeps a task from being placed before the run is committed, is needed
   * only where a task could become ready before run_start releases the
   * sources: on a source with an edge from a run in flight or a failure
   * that reached it.  Every other source is QUEUED here, while its line is
   * at hand, and run_start walks the sources alone, not every task twice
   * (deciding what is shared, then dropping each gate).  A task that
   * cannot be shared, or waits on outside gates (MPI), closes the gates
   * of those before it (close_gates) and the run starts the usual way. */
  bool open = r->ntasks && mz__run_may_share(r) && rt->share_dev->ops->share_array;
  /* (Whether a task is shared depends on its kernel alone: asked once
   * per run of equal kernels; pk starts as no kernel's address.) */
  const mz_kernel *pk = (const mz_kernel *)(const void *)&pk;
  bool psh = false, src_gated = false;
  /* The sources: while every task so far is one (prefix), the first nsrc
   * of r->tasks; from the first that is not, listed in srcs. */
  bool prefix = true;
  size_t nsrc = 0;
  struct vec srcs = {0};
  struct frz_sizes frz = {0};
  size_t frz_o[4];
  for (size_t i = 0; i < r->ntasks; i++) {
    mz_op *op = r->tasks[i];
    struct mz__task *t = mz__task_of(op);
    task_enter(op, r, true, false);
    uint32_t ngates = mz__task_ngates(t);
    if (rerun) { /* (its lists are complete: frozen_block's sizes hold) */
      frz.total += frozen_block(r, dwait, t, frz_o);
      frz.ng += ngates != 0;
      frz.ns += t->npreds == 0;
    }
    if (open) {
      if (mz__task_kernel(t) != pk) {
        psh = mz__run_shareable(r, t);
        pk = mz__task_kernel(t);
      }
      if (psh && !ngates) {
        t->shared = t->host_wait = true;
      } else {
        close_gates(r->tasks, i);
        open = false;
      }
    }
    if (t->succs.nrun) { /* (reset or new: no array yet) */
      t->succs.v = succ_room;
      succ_room += t->succs.nrun;
    }
    unsigned inrun = 0;
    bool cross = false;
    for (unsigned k = 0; k < t->npreds; k++) {
      mz_op *p = mz__task_preds(t)[k];
      if (mz__task_mark(mz__task_of(p)) != stamp) {
        cross = true;
        continue;
      }
      inrun++;
      struct mz__succs *s = &mz__task_of(p)->succs;
      if (!mz__succs_room(s)) {
        nfail++;
        continue;
      }
      s->v[s->n++] = op;
    }
    atomic_store_explicit(&t->unsub, inrun, memory_order_relaxed);
    uint32_t unfin = inrun + ngates;
    uint8_t state = MZ__T_WAIT;
    bool oom = false;
    if (!open) {
      unfin++; /* its run gate */
    } else if (inrun == 0) {
      if (cross || atomic_load_explicit(&t->pred_failed, memory_order_relaxed)) {
        unfin++;
        src_gated = true;
      } else {
        state = MZ__T_QUEUED;
      }
      if (prefix) nsrc++;
      else oom = vpush(&srcs, op) != MZ_OK;
    } else if (prefix) {
      prefix = false;
      for (size_t k = 0; k < nsrc && !oom; k++) oom = vpush(&srcs, r->tasks[k]) != MZ_OK;
    }
    atomic_store_explicit(&t->unfin, unfin, memory_order_relaxed);
    atomic_store_explicit(&t->state, state, memory_order_release);
    if (oom) { /* no memory for the list: the usual start */
      close_gates(r->tasks, i + 1);
      open = false;
    }
    cross_any |= cross;
    for (unsigned k = 0; cross && k < t->npreds; k++) {
      mz_op *p = mz__task_preds(t)[k];
      if (mz__task_mark(mz__task_of(p)) == stamp) continue;
      if (mz__op_graph(p) != g && mz__op_graph(p)->hold_stamp != stamp && !hold_graph(r, mz__op_graph(p), stamp)) nfail++;
      mz__spin_lock(&mz__task_of(p)->lock);
      if (atomic_load(&mz__task_of(p)->state) != MZ__T_DONE) {
        struct mz__succs *s = &mz__task_of(p)->succs;
        bool ok = mz__succs_room(s);
        if (ok) {
          atomic_fetch_add(&t->unfin, 1);
          s->v[s->n++] = op;
          if (mz__succs_heap(s)) mz__op_graph(p)->succs_heap = true; /* (for its end: graph_free) */
          __atomic_store_n(&mz__task_of(p)->replay_dirty, true, __ATOMIC_RELAXED);
        } else {
          nfail++;
        }
      } else if (mz__task_of(p)->exec.status < 0 && mz__fail_reaches(p, op)) {
        atomic_store(&t->pred_failed, true);
      }
      mz__spin_unlock(&mz__task_of(p)->lock);
    }
  }
  if (open) {
    r->src_v = prefix ? r->tasks : mz__arena_alloc(&r->arena, srcs.n * sizeof *r->src_v);
    if (r->src_v) {
      if (!prefix) memcpy(r->src_v, srcs.v, srcs.n * sizeof *r->src_v);
      r->src_n = prefix ? nsrc : srcs.n;
      r->src_gated = src_gated;
      r->gates_open = true;
    } else {
      close_gates(r->tasks, r->ntasks);
    }
  }
  free(srcs.v);
  if (rerun) {
    if (!lw) keep_lowered(g, root, forward ? tasks.v : r->tasks, r->ntasks);
    if (g->lowered.root == root) {
      if (!nfail && !cross_any && !alias_any) freeze(&g->lowered, r, touched.v, touched.n, &frz);
      else unfreeze(&g->lowered);
    }
  }
linked:
  r->lw = rerun && g->lowered.root == root ? &g->lowered : NULL;
  r->prev = NULL;
  r->next = rt->runs;
  if (rt->runs) rt->runs->prev = r;
  rt->runs = r;
  rt->nruns++;
  r->fnext = rt->futures;
  if (rt->futures) rt->futures->fprev = r;
  rt->futures = r;
  g->active++;
  atomic_fetch_add(&g->refs, 1);
  pthread_mutex_unlock(&rt->lock);

  /* The run's end clears the records of the buffers touched (none for a
   * replay, whose records are its claims: src/hazard.h), when they are all
   * its tasks' own (struct mz__run). */
  if (!alias_any) {
    r->tbufs = touched.v;
    r->ntbufs = touched.n;
    r->tbufs_listed = true;
  } else {
    free(touched.v);
  }
  if (!lent) free(tasks.v);
  free(stack.v);
  free(preds.v);
  free(next_pred);
  if (nfail) mz__warn(rt, "mz_schedule: %zu edges could not be recorded (out of memory)", nfail);

  if (rt->pol[pol]->plan && r->ntasks && !r->gates_open) plan_run(r, pol, pstate);
  mz__run_start(r);
  *out = f;
  return MZ_OK;
}
