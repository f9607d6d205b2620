/* Execution: placing tasks on queues, planning their transfers, submitting
 * them, and finishing them.
 *
 * A task has two counters.  unsub counts its predecessors in the same run
 * that are not yet handed to a queue; when it reaches zero the task is
 * placed (the policy's select).  If every unfinished predecessor is on the
 * same queue, or on a queue the device can wait on (same OpenCL context,
 * CUDA events), the task is submitted at once, ordered on the device.
 * Otherwise it waits on the host: unfin counts unfinished predecessors plus
 * a gate, and the gate is released only on that path, so a task is
 * submitted exactly once.  Completion comes per batch from devices (one
 * callback after the last op of a queue run) and per task from CPU workers.
 *
 * Under a policy with pick (ABI 2), a placed node waits on the host until
 * it is ready and then joins its queue's pending list; the queue takes
 * nodes from it, in the order the policy picks, while it has a free slot
 * (pend, pick_drain).
 *
 * All cascades (a submission making successors placeable, a completion
 * making them ready) go through a local work list, never recursion, so a
 * chain of a million tasks is fine. */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "coherence.h"
#include "exec.h"
#include "fault.h"
#include "objects/mz_graph.h"
#include "objects/mz_kernel.h"
#include "observe.h"
#include "perfmodel.h"
#include "policy_table.h"
#include "run.h"

enum { W_PLACE, W_READY, W_SUBMIT, W_BADPICK };

/* The most nodes one device batch holds.  Its array of execs (8 bytes
 * each) stays under glibc's smallest "large" request (1,024 bytes): a
 * large request first merges every freed small chunk of the arena
 * (malloc_consolidate), and the submission thread's arena collects the
 * driver's per-command allocations, freed on the driver's threads: with
 * 256 (2 KiB) that merge took 5% of perf's samples of a chain on PoCL. */
#define MZ__BATCH_MAX 120

struct work {
  struct { mz_op *op; int what; } inl[64], *v;
  size_t n, cap;
  /* Ready nodes for the CPU workers' pool, linked through their tasks (mz__op_next: a
   * shared node is in no inbox), handed over together when the list is
   * drained: one hand-off per cascade, and no allocation. */
  mz_op *sh_head, *sh_tail;
  size_t nsh;
  struct mz_device *shdev;
  /* Queues whose pending nodes (pick) are to be handed over once the list
   * is drained: the policy then picks among every node the cascade made
   * ready, such as the successor of the node whose end freed the slot. */
  struct mz__queue *dq[4];
  unsigned ndq;
};

static void work_init(struct work *w) {
  w->v = w->inl;
  w->n = 0;
  w->cap = 64;
  w->sh_head = w->sh_tail = NULL;
  w->nsh = 0;
  w->shdev = NULL;
  w->ndq = 0;
}

/* The most ready nodes held back before they are handed over: the workers
 * start on the first ones while this thread makes the rest ready (a run
 * of 100,000 sources is not handed over in one piece at its end). */
#define SHARE_BURST 64

static void work_share(struct work *w, mz_runtime *rt, mz_op *op) {
  atomic_store_explicit(mz__op_next(op), NULL, memory_order_relaxed);
  if (w->sh_tail) atomic_store_explicit(mz__op_next(w->sh_tail), op, memory_order_relaxed);
  else w->sh_head = op;
  w->sh_tail = op;
  w->shdev = rt->share_dev;
  /* Once handed over, a node may run and end its run: the caller touches
   * neither op nor its run after this call (see share()). */
  if (++w->nsh == SHARE_BURST) {
    w->shdev->ops->share(w->shdev, w->sh_head, w->sh_tail, w->nsh);
    w->sh_head = w->sh_tail = NULL;
    w->nsh = 0;
  }
}

static void work_push(struct work *w, mz_op *op, int what) {
  if (w->n == w->cap) {
    size_t cap = w->cap * 2;
    void *nv = w->v == w->inl ? malloc(cap * sizeof *w->v) : realloc(w->v, cap * sizeof *w->v);
    if (!nv) abort(); /* cannot lose a task: there is no sane way to go on */
    if (w->v == w->inl) memcpy(nv, w->inl, sizeof w->inl);
    w->v = nv;
    w->cap = cap;
  }
  w->v[w->n].op = op;
  w->v[w->n].what = what;
  w->n++;
}

static void work_drain(struct work *w);
static void finish(mz_op *op, int status, const char *detail, struct work *w);

/* ---- messages ---- */

bool mz__fail_reaches(const mz_op *p, const mz_op *s) {
  const struct mz__task *pt = mz__op_t(p), *st = mz__op_t(s);
  for (unsigned i = 0, n = mz__task_nbpreds(st); i < n; i++)
    if (mz__task_bpreds(st)[i] == p) return true;
  for (unsigned i = 0; i < mz__task_nxpreds(st); i++)
    if (mz__task_xpreds(st)[i] == p) return true;
  for (unsigned i = 0; i < st->nacc; i++) {
    if (!(mz__acc_mode(mz__task_access(st, i)) & 1)) continue;
    for (unsigned j = 0; j < pt->nacc; j++)
      if ((mz__acc_mode(mz__task_access(pt, j)) & 2) && mz__acc_buf(mz__task_access(pt, j)) == mz__acc_buf(mz__task_access(st, i))) return true;
  }
  return false;
}

void mz__fail_message(struct mz__run *r, mz_op *op, int code, const char *detail) {
  mz__spin_lock(&r->msg_lock);
  int expected = 0;
  char *m;
  if (atomic_compare_exchange_strong(&r->status, &expected, code) && (m = malloc(MZ__ERRLEN)) != NULL) {
    if (op) {
      int q = mz__task_of(op)->exec.queue;
      const char *dn = q >= 0 ? r->rt->queues[q]->dev->info.name : "no device";
      snprintf(m, MZ__ERRLEN, "node %u (%s) on %s queue %d: %s%s%s", op->id, mz__op_name(op), dn, q,
               mz_strerror(code), detail ? ": " : "", detail ? detail : "");
    } else {
      snprintf(m, MZ__ERRLEN, "%s%s%s", mz_strerror(code), detail ? ": " : "", detail ? detail : "");
    }
    r->message = m;
  }
  mz__spin_unlock(&r->msg_lock);
}

/* ---- placement ---- */

/* At the start of planning op on Q, when faults or limits are on or Q's
 * device is dead: returns MZ__ERETRY (dead device), MZ__EHOSTWAIT (a
 * predecessor was taken off its queue), MZ_EKERNEL (an injected kernel
 * fault) or MZ_OK.  With limits on, pins the node's copies on the device
 * (unpinned by mz__mem_unpin when the node finishes) unless it returns a
 * retry code. */
static int fault_plan(mz_op *op, struct mz__queue *Q, const char **why) {
  struct mz__task *t = mz__op_t(op);
  mz_runtime *rt = t->run->rt;
  struct mz_device *dev = Q->dev;
  if (atomic_load_explicit(&dev->dead, memory_order_acquire)) {
    *why = "its device failed before the node reached it";
    return MZ__ERETRY;
  }
  if (rt->ml) {
    /* A predecessor submitted to this device ahead of the node (same queue,
     * or waited for on the device) was taken back to wait for memory: the
     * device order the node relied on is gone, so wait on the host. */
    for (unsigned i = 0; i < t->npreds; i++) {
      struct mz__task *p = mz__op_t(mz__task_preds(t)[i]);
      if (atomic_load_explicit(&p->rerouted, memory_order_acquire) &&
          atomic_load_explicit(&p->state, memory_order_acquire) != MZ__T_DONE) {
        *why = "a predecessor was taken off its queue";
        return MZ__EHOSTWAIT;
      }
    }
  }
  if (rt->faults) mz__fault_device_op(rt, dev);
  if (rt->ml && dev->memnode) mz__mem_pin_exec(&t->exec, dev);
  if (rt->faults && mz__task_kernel(t) && mz__fault_hit(rt, MZ__FAULT_KERNEL)) {
    *why = "injected fault: the kernel failed";
    return MZ_EKERNEL;
  }
  return MZ_OK;
}

/* Undo what a failed or refused plan promised: read copies whose transfer
 * will now never run become invalid again.  Thread: the planning thread. */
static void exec_unplan(struct mz__exec *e, const struct mz__queue *Q) {
  if (!Q->dev->memnode) return;
  unsigned m = Q->dev->memnode;
  struct mz__task *t = mz__task_of(mz__exec_node(e));
  for (unsigned a = 0; a < t->nacc; a++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    mz__spin_lock(&b->lock);
    struct mz__copy *c = &b->copies[m];
    if (c->fetcher == e) {
      c->fetcher = NULL;
      if (mz__acc_mode(mz__task_access(t, a)) == 1) c->state = MZ__INVALID;
    }
    mz__spin_unlock(&b->lock);
  }
}

/* Dead devices: the queue the plan or the policy named is on a dead device, or
 * the node was taken back from one: the capable queue with the shortest
 * backlog (the first on ties), else MZ_EDEVICE. */
static int fallback(mz_runtime *rt, mz_op *op, const char **why) {
  int best = -1;
  unsigned best_backlog = 0;
  for (unsigned i = 0; i < rt->nq; i++) {
    if (!mz__can_run(rt, op, i)) continue;
    unsigned bl = atomic_load_explicit(&rt->queues[i]->backlog, memory_order_relaxed);
    if (best < 0 || bl < best_backlog) {
      best = (int)i;
      best_backlog = bl;
    }
  }
  if (best < 0) *why = "its device failed and no other enabled device can run it";
  return best >= 0 ? best : MZ_EDEVICE;
}

static bool queue_dead(const mz_runtime *rt, int q) {
  return q >= 0 && (unsigned)q < rt->nq && atomic_load_explicit(&rt->queues[q]->dev->dead, memory_order_relaxed);
}

/* Ask the policy; returns a valid queue, MZ_POLICY_DEFER, or a negative
 * error with a message in *why. */
static int choose(mz_op *op, bool ready, const char **why) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  if (t->fixed) {
    if (!mz__can_run(rt, op, (unsigned)t->exec.queue)) {
      if (queue_dead(rt, t->exec.queue)) return fallback(rt, op, why);
      *why = "the plan put the node on a queue that cannot run it";
      return MZ_EPOLICY;
    }
    return t->exec.queue;
  }
  const struct mz_policy_ops *po = rt->pol[r->policy];
  if (!po->select) {
    if (atomic_load_explicit(&t->rerouted, memory_order_relaxed)) return fallback(rt, op, why);
    *why = "the policy's plan left the node unplaced and it has no select";
    return MZ_EPOLICY;
  }
  int q = po->select(rt->pol_state[r->policy], &rt->sched, (mz_task *)op, ready);
  if (q == MZ_POLICY_DEFER) {
    if (!ready) return q;
    *why = "the policy deferred a node that is ready";
    return MZ_EPOLICY;
  }
  if (q < 0 || (unsigned)q >= rt->nq) {
    *why = "the policy chose a queue that does not exist";
    return MZ_EPOLICY;
  }
  if (!mz__can_run(rt, op, (unsigned)q)) {
    if (queue_dead(rt, q)) return fallback(rt, op, why);
    bool any = false;
    for (unsigned i = 0; i < rt->nq && !any; i++) any = mz__can_run(rt, op, i);
    *why = any ? "the policy chose a queue whose device cannot run the node"
               : "no enabled device can run this node";
    return any ? MZ_EPOLICY : MZ_ENODEV;
  }
  return q;
}

static void submit(mz_op *op, unsigned q, struct work *w, bool counted);

/* Plan order (mz_task_set_after): op is placed (or will never be), so the
 * task planned after it on its queue may be placed.  Exactly once. */
static void plan_release_to(mz_op *s, struct work *w) {
  if (s && atomic_fetch_sub_explicit(&mz__task_of(s)->unsub, 1, memory_order_acq_rel) == 1) work_push(w, s, W_PLACE);
}

/* The task planned after t, claimed (NULL: none, or claimed already). */
static inline mz_op *take_plan_next(struct mz__task *t) {
  struct mz__tcold *p = mz__task_cold_get(t);
  return p ? __atomic_exchange_n(&p->next, NULL, __ATOMIC_ACQ_REL) : NULL;
}

static void plan_release(mz_op *op, struct work *w) { plan_release_to(take_plan_next(mz__task_of(op)), w); }

/* Whether t uses a tile of a buffer p uses, or a buffer a tile of which p
 * uses. */
static bool alias_related(const struct mz__task *t, const struct mz__task *p) {
  for (unsigned a = 0; a < t->nacc; a++) {
    const mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    for (unsigned j = 0; j < p->nacc; j++) {
      const mz_buffer *c = mz__acc_buf(mz__task_access(p, j));
      if ((b->parent && c == b->parent) || (c->parent && c->parent == b)) return true;
    }
  }
  return false;
}

/* Whether t uses a tile or a partitioned buffer that an unfinished
 * predecessor uses the other side of. */
static bool alias_wait(const struct mz__task *t) {
  bool alias = false;
  for (unsigned a = 0; a < t->nacc && !alias; a++)
    alias = mz__acc_buf(mz__task_access(t, a))->parent || atomic_load_explicit(&mz__acc_buf(mz__task_access(t, a))->has_tiles, memory_order_relaxed);
  for (unsigned i = 0; alias && i < t->npreds; i++) {
    const struct mz__task *p = mz__op_t(mz__task_preds(t)[i]);
    if (atomic_load_explicit(&p->state, memory_order_acquire) != MZ__T_DONE && alias_related(t, p)) return true;
  }
  return false;
}

static void release_gate(mz_op *op, struct work *w) {
  if (atomic_fetch_sub_explicit(&mz__task_of(op)->unfin, 1, memory_order_acq_rel) == 1) work_push(w, op, W_READY);
}

/* unsub reached zero: every predecessor in the run is queued or done. */
static void place(mz_op *op, struct work *w) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  /* Cancel once the predecessors are done; a shared node is handed to the
   * workers' pool once it is ready. */
  if (atomic_load_explicit(&t->pred_failed, memory_order_acquire) || t->shared) {
    t->host_wait = true;
    release_gate(op, w);
    return;
  }
  bool ready = atomic_load_explicit(&t->unfin, memory_order_acquire) == 1;
  /* A buffer and its tiles share memory but not copies: the sync before
   * the access (mz__alias_sync, when the node is planned) reads the other
   * side's latest copy, so the nodes that wrote it must have run.  The
   * queue is chosen then too (tiles placed now would all follow the
   * partition's queue). */
  if (__builtin_expect(!ready && alias_wait(t), 0)) {
    t->deferred = true;
    t->host_wait = true;
    release_gate(op, w);
    return;
  }
  const char *why = NULL;
  int q = choose(op, ready, &why);
  if (q == MZ_POLICY_DEFER) {
    t->deferred = true;
    t->host_wait = true;
    release_gate(op, w);
    return;
  }
  if (q < 0) {
    finish(op, q, why, w);
    return;
  }
  /* Atomic: policies read the queues of predecessors (mz_task_queue), also
   * of one in an earlier run that is being placed right now. */
  __atomic_store_n(&t->exec.queue, q, __ATOMIC_RELAXED);
  struct mz__queue *Q = rt->queues[q];
  unsigned nw = 0;
  /* An outside gate is released on the host; a queue a policy orders
   * takes ready nodes only (pend). */
  bool device_side = mz__task_ngates(t) == 0 && !rt->pol_pick[r->policy];
  for (unsigned i = 0; i < t->npreds && device_side; i++) {
    mz_op *p = mz__task_preds(t)[i];
    int s = atomic_load_explicit(&mz__task_of(p)->state, memory_order_acquire);
    if (s == MZ__T_DONE) continue;
    if (mz__task_of(p)->run != r) {
      device_side = false;
      break;
    }
    int pq = __atomic_load_n(&mz__task_of(p)->exec.queue, __ATOMIC_RELAXED); /* a rerouted one's may change */
    /* In-order queue, unless p ends after its function returns. */
    if (pq == q && !(mz__task_kernel(mz__task_of(p)) && mz__task_kernel(mz__task_of(p))->async)) continue;
    if (pq < 0) { /* shared and not yet taken by a worker */
      device_side = false;
      break;
    }
    struct mz__queue *P = rt->queues[pq];
    /* On another device of the same backend, an event orders the node
     * after p, but p's output reaches this device on the device only by a
     * peer copy; without one it goes through host memory, read back when
     * the node is planned, so p must have finished by then: wait on the
     * host (seen on the CUDA emulator with peer access off: a read back
     * raced the producing kernel).  p must also have been planned (its
     * output's copy states set): enqueued on the device, or queued on an
     * inline device with its own memory, which plans in submit(). */
    bool same_dev = P->dev == Q->dev;
    bool planned = s >= MZ__T_FLUSHED || (P->dev->ops->inline_submit && !P->dev->ops->host_memory);
    if (P->dev->ops == Q->dev->ops && Q->dev->ops->can_wait && Q->dev->ops->can_wait(Q, P) &&
        (same_dev || (planned && Q->dev->ops->can_copy_peer && Q->dev->ops->can_copy_peer(Q->dev, P->dev)))) {
      mz__exec_xd(&t->exec)->waits[nw++] = &mz__task_of(p)->exec;
      continue;
    }
    device_side = false;
  }
  if (device_side) {
    if (mz__exec_xd(&t->exec)) mz__exec_xd(&t->exec)->nwait = nw; /* nw > 0 only with a device record */
    submit(op, (unsigned)q, w, false);
  } else {
    if (mz__exec_xd(&t->exec)) mz__exec_xd(&t->exec)->nwait = 0;
    t->host_wait = true;
    release_gate(op, w);
  }
}

static void share(mz_op *op, struct work *w);

/* ---- queues a policy orders (pick) ---- */

/* How many nodes such a queue holds submitted and unfinished: one where the
 * device runs nodes on the thread that ends them (a CPU worker, the
 * simulator), which then submits the next with no gap; two behind a
 * submission thread, so that the next node's submission overlaps the
 * current node; PICK_PREFETCH on a device with a copy engine, whose copies
 * start at submission: a shallower window starves the engine (in
 * mz-bench-sched --quick, dmdas's mean SLR was 3.54 with two, 3.42 with
 * four, 3.38 with eight or more, and dmda's 3.39). */
#define PICK_PREFETCH 8
static unsigned pick_window(const struct mz__queue *Q) {
  const struct mz_device *d = Q->dev;
  return d->copy_engine ? PICK_PREFETCH : d->ops->inline_submit ? 1 : 2;
}

/* Hand Q's pending nodes to Q while it has free slots, in the order the
 * policy picks; they are submitted when w is drained.  Called (through
 * pick_later) after a node joins the list (pend) and after Q's backlog
 * drops with nodes pending (finish, demote).  No node is left waiting on
 * an idle queue: the backlog drop and the read of npend after it, and the
 * store of npend and the read of the backlog after it (here, under the
 * lock), are all sequentially consistent, so one of the two sides sees
 * the other's write. */
static void pick_drain(mz_runtime *rt, struct mz__queue *Q, struct work *w) {
  unsigned win = pick_window(Q);
  mz_op *out[PICK_PREFETCH]; /* the window's worth at most, in picked order */
  unsigned nout = 0;
  mz__spin_lock(&Q->pend_lock);
  unsigned n = atomic_load_explicit(&Q->npend, memory_order_relaxed);
  unsigned busy = atomic_load(&Q->backlog);
  while (n && busy < win && nout < PICK_PREFETCH) { /* a drop meanwhile: its thread drains too */
    /* The oldest MZ_POLICY_PICK_MAX at most: a pick that looks at every
     * node pending made a run of 50,000 independent nodes under dmdas
     * quadratic (52 us a node). */
    mz_op **v = Q->pend + Q->pend_head;
    unsigned nw = n < MZ_POLICY_PICK_MAX ? n : MZ_POLICY_PICK_MAX;
    unsigned pi = mz__task_of(v[0])->run->policy, k = 0;
    bool same = true, bad = false;
    for (unsigned i = 1; i < nw && same; i++) same = mz__task_of(v[i])->run->policy == pi;
    if (same && rt->pol_pick[pi]) {
      k = rt->pol_pick[pi](rt->pol_state[pi], &rt->sched, Q->index, (mz_task *const *)v, nw);
      if (k >= nw) {
        k = 0;
        bad = true;
      }
    }
    mz_op *op = v[k];
    /* The older ones move up one place: the list's tail stays put. */
    memmove(v + 1, v, k * sizeof *v);
    Q->pend_head++;
    atomic_store_explicit(&Q->npend, --n, memory_order_relaxed);
    if (!n) Q->pend_head = 0;
    if (bad) {
      work_push(w, op, W_BADPICK);
      continue;
    }
    /* Counted in the backlog now, under the lock, though submitted only
     * when w drains: a pend() on another thread meanwhile sees the slot
     * taken. */
    busy = atomic_fetch_add(&Q->backlog, 1) + 1;
    out[nout++] = op;
  }
  mz__spin_unlock(&Q->pend_lock);
  /* w is a stack: pushed last, the first picked is submitted first. */
  while (nout) work_push(w, out[--nout], W_SUBMIT);
}

/* pick_drain(Q) once w's list is drained (work_drain).  Q outlives that:
 * a pending node's run is in flight, and the threads that end nodes are
 * the runtime's, joined before its queues are freed, or the one in
 * mz_schedule(). */
static void pick_later(mz_runtime *rt, struct mz__queue *Q, struct work *w) {
  for (unsigned i = 0; i < w->ndq; i++)
    if (w->dq[i] == Q) return;
  if (w->ndq < sizeof w->dq / sizeof w->dq[0]) w->dq[w->ndq++] = Q;
  else pick_drain(rt, Q, w);
}

/* A ready node placed on queue q by a policy with pick: into q's pending
 * list, then to q if a slot is free. */
static void pend(mz_op *op, unsigned q, struct work *w) {
  mz_runtime *rt = mz__task_of(op)->run->rt;
  struct mz__queue *Q = rt->queues[q];
  mz__spin_lock(&Q->pend_lock);
  unsigned n = atomic_load_explicit(&Q->npend, memory_order_relaxed);
  if (Q->pend_head && Q->pend_head + n == Q->pend_cap && Q->pend_head >= Q->pend_cap / 2) {
    /* Half the room is before the head: move the list down (each node
     * moves at most once per node picked since the last move). */
    memmove(Q->pend, Q->pend + Q->pend_head, n * sizeof *Q->pend);
    Q->pend_head = 0;
  }
  if (Q->pend_head + n == Q->pend_cap) {
    unsigned cap = Q->pend_cap ? 2 * Q->pend_cap : 16;
    mz_op **v = realloc(Q->pend, cap * sizeof *v);
    if (!v) {
      mz__spin_unlock(&Q->pend_lock);
      finish(op, MZ_ENOMEM, "no memory for the queue's pending list", w);
      return;
    }
    Q->pend = v;
    Q->pend_cap = cap;
  }
  Q->pend[Q->pend_head + n] = op;
  atomic_store(&Q->npend, n + 1);
  mz__spin_unlock(&Q->pend_lock);
  pick_later(rt, Q, w);
}

/* After Q's backlog dropped (sequentially consistent, see pick_drain). */
static inline void pick_after_drop(mz_runtime *rt, struct mz__queue *Q, struct work *w) {
  if (__builtin_expect(atomic_load(&Q->npend) != 0, 0)) pick_later(rt, Q, w);
}

/* Every predecessor finished (host-side path). */
static void ready(mz_op *op, struct work *w) {
  struct mz__task *t = mz__task_of(op);
  if (atomic_load_explicit(&t->pred_failed, memory_order_acquire)) {
    finish(op, MZ_ECANCELED, NULL, w);
    return;
  }
  if (t->shared) {
    share(op, w);
    return;
  }
  if (t->deferred) {
    const char *why = NULL;
    int q = choose(op, true, &why);
    if (q < 0) {
      finish(op, q, why, w);
      return;
    }
    __atomic_store_n(&t->exec.queue, q, __ATOMIC_RELAXED); /* successors may read it */
  }
  if (mz__exec_xd(&t->exec)) mz__exec_xd(&t->exec)->nwait = 0;
  if (t->run->rt->pol_pick[t->run->policy]) pend(op, (unsigned)t->exec.queue, w);
  else submit(op, (unsigned)t->exec.queue, w, false);
}

/* ---- coherence planning ---- */

/* Plan one read of b into device memory node m for exec e on queue Q.
 * Called with b's spinlock held; returns with it held.  Fills a transfer
 * when the copy there is invalid, or when it is being made valid by a
 * transfer on another queue that Q cannot wait for on the device. */
static int plan_device_read(mz_runtime *rt, mz_buffer *b, unsigned m, struct mz__exec *e, struct mz__queue *Q,
                            uint64_t *moved, const char **why) {
  struct mz_device *dev = Q->dev;
  struct mz__copy *c = &b->copies[m];
  if (c->alias) {
    /* A read back into the host copy on the way is recorded like any. */
    struct mz__xfer *rec = mz__exec_reads(e) ? &mz__exec_reads(e)[mz__exec_xd(e)->nread] : NULL;
    int rc = mz__plan_alias_read(rt, b, m, dev, moved, why, rec);
    if (rec && rec->bytes) mz__exec_xd(e)->nread++; /* rec: e has a device record */
    return rc;
  }
  if (c->state != MZ__INVALID) {
    struct mz__exec *f = c->fetcher;
    if (!f || mz__exec_queue(f) == Q) return MZ_OK; /* valid, or made valid earlier on this queue */
    struct mz__task *ft = mz__task_of(mz__exec_node(f));
    if (atomic_load_explicit(&ft->state, memory_order_acquire) == MZ__T_DONE) {
      c->fetcher = NULL;
      return MZ_OK;
    }
    /* The transfer may not have run yet.  Wait for it on the device when the
     * device can (same run: its event lives until the run ends), else copy
     * again: the same bytes, from a copy that stays valid until we finish. */
    if (ft->run == mz__task_of(mz__exec_node(e))->run && dev->ops->can_wait && dev->ops->can_wait(Q, mz__exec_queue(f))) {
      bool have = false;
      for (unsigned i = 0; i < mz__exec_xd(e)->nwait && !have; i++) have = mz__exec_xd(e)->waits[i] == f;
      if (!have) mz__exec_xd(e)->waits[mz__exec_xd(e)->nwait++] = f;
      return MZ_OK;
    }
  }
  if (__builtin_expect(rt->faults != NULL, 0) && mz__fault_hit(rt, MZ__FAULT_TRANSFER)) {
    *why = "injected fault: a transfer into the device failed";
    return MZ_EDEVICE;
  }
  struct mz__xfer *x = &mz__exec_xd(e)->xfers[mz__exec_xd(e)->nxfer];
  memset(x, 0, sizeof *x);
  x->dst = c->mem;
  x->bytes = b->bytes;
  if (b->copies[0].state != MZ__INVALID) {
    x->src_host = b->host;
  } else {
    unsigned src = 0;
    for (unsigned k = 1; k < rt->nmem && !src; k++)
      if (k != m && mz__copy_readable(rt, b, k)) src = k;
    if (!src) {
      *why = "no valid copy of a buffer exists";
      return MZ_EDEVICE;
    }
    struct mz_device *sd = rt->mem_dev[src];
    if (sd->ops == dev->ops && dev->ops->can_copy_peer && dev->ops->can_copy_peer(dev, sd)) {
      x->src_dev = sd;
      x->src = b->copies[src].mem;
      if (rt->ml) mz__mem_pin_src(b, src); /* not evicted until e finishes */
      mz__copy_read_from(b, src);
    } else {
      /* Across backends, or devices without peer copies: through host
       * memory.  The producer has finished, since such edges are released
       * on the host (place()). */
      mz__spin_unlock(&b->lock);
      struct mz__xfer *rec = mz__exec_reads(e) ? &mz__exec_reads(e)[mz__exec_xd(e)->nread] : NULL;
      int rc = mz__buffer_fetch_host(b, moved, rec);
      if (rec && rec->bytes) mz__exec_xd(e)->nread++; /* rec: e has a device record */
      mz__spin_lock(&b->lock);
      if (rc) {
        *why = "cannot read a buffer back from its device";
        return rc;
      }
      x->src_host = b->host;
    }
  }
  mz__copy_read_from(b, 0);
  c->state = MZ__SHARED;
  c->fetcher = e;
  mz__exec_xd(e)->nxfer++;
  *moved += b->bytes;
  return MZ_OK;
}

/* Fill exec's arguments and transfers for queue Q and update the copy
 * states.  Device memory: on the thread that submits to Q's device, in
 * submission order.  Host memory: on the worker, right before the task
 * runs, reading stale inputs back at once; planning there rather than at
 * submission keeps a reader on one worker from trusting a host copy that
 * another worker has planned but not yet fetched. */
static int plan_exec_body(mz_op *op, struct mz__queue *Q, const char **why, char **log) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  struct mz_device *dev = Q->dev;
  unsigned m = dev->memnode;
  struct mz__exec *e = &t->exec;
  e->status = 0; /* times and copies: reset by plan_exec */
  /* A predecessor failed before this node reached its device (found
   * with faults injected at planning): do not run it on garbage.
   * Its own successors are then canceled before they are planned; had it
   * run, one on another queue could complete before it and be counted a
   * success, as completions of different batches come in any order. */
  if (atomic_load_explicit(&t->pred_failed, memory_order_acquire)) {
    *why = "a node it depends on failed";
    return MZ_ECANCELED;
  }
  /* A re-run in host memory only: the kernel was prepared for this device
   * and the arguments built by an earlier plan, and nothing below would
   * change them (no copy to plan, no fault to inject). */
  if (t->exec.args_dev1 == dev->info.index + 1 && rt->nmem == 1 && !rt->faults) return MZ_OK;
  t->exec.args_dev1 = 0;
  mz_kernel *kern = mz__task_kernel(t);
  unsigned di = dev->info.index;
  /* Built for this device already: mz__kernel_prepare's first check, inline. */
  if (kern && dev->ops->prepare && di < kern->rt->ndev && kern->rt->devs[di] == dev &&
      __atomic_load_n(&kern->prep_status[di], __ATOMIC_ACQUIRE) == 1) {
    mz__exec_xd(e)->kernel_dev = kern->prepared[di]; /* a device with prepare has memory of its own */
    if (log) *log = NULL;
  } else if (kern) {
    void *kdev = NULL; /* a host-memory device's (none kept: no record) */
    int rc = mz__kernel_prepare(kern, dev, &kdev, log);
    if (rc) {
      *why = "cannot build the kernel for this device";
      return rc;
    }
    if (mz__exec_xd(e)) mz__exec_xd(e)->kernel_dev = kdev;
  }
  uint64_t moved = 0;
  /* Device memory first, for every buffer, before any copy state changes:
   * a node that must wait for memory retries with nothing to undo. */
  for (unsigned a = 0; m && a < t->nacc; a++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    struct mz__copy *c = &b->copies[m];
    mz__spin_lock(&b->lock);
    bool have = c->mem != NULL;
    mz__spin_unlock(&b->lock);
    if (have) continue;
    void *mem = NULL;
    const char *mwhy = NULL;
    bool alias = false;
    /* Zero copy takes no device memory: outside fault injection and caps
     * it bypasses the memory-limit accounting. */
    bool plain = !rt->faults && (!rt->ml || ((b->mem_flags & MZ_BUFFER_ZERO_COPY) && !mz__memlimit_capped(rt, dev)));
    int rc = plain ? mz__mem_alloc_kind(dev, b, &mem, &alias) : mz__mem_alloc(e, dev, b, &mem, &mwhy);
    if (rc == MZ_OK && plain && !alias && rt->ml) {
      /* Not aliased after all (the device cannot wrap this memory): count
       * it as any other copy. */
      dev->ops->mem_free(dev, mem);
      mem = NULL;
      rc = mz__mem_alloc(e, dev, b, &mem, &mwhy);
    }
    if (rc) {
      *why = mwhy ? mwhy : "cannot allocate device memory for a buffer";
      return rc;
    }
    mz__spin_lock(&b->lock);
    bool lost_race = c->mem != NULL;
    if (!lost_race) {
      c->mem = mem;
      c->alias = alias;
    }
    mz__spin_unlock(&b->lock);
    if (lost_race) {
      if (rt->ml && !alias) mz__mem_free(dev, b, mem);
      else dev->ops->mem_free(dev, mem);
    }
  }
  /* With host memory only (and no fault injection), the host copy is the
   * only one: nothing to plan. */
  for (unsigned a = 0; (rt->nmem > 1 || rt->faults) && a < t->nacc; a++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    uint8_t mode = mz__acc_mode(mz__task_access(t, a));
    /* A tile, or a buffer a tile was written into: the other side's latest
     * copy first (one relaxed load for other buffers). */
    if (__builtin_expect(b->parent != NULL || atomic_load_explicit(&b->tiles_dirty, memory_order_relaxed), 0)) {
      int rc = mz__alias_sync(b);
      if (rc) {
        *why = "cannot bring a partitioned buffer and its tiles up to date";
        return rc;
      }
    }
    if (!m) {
      if (__builtin_expect(rt->faults != NULL, 0)) { /* the CPU's transfer and allocation faults */
        if ((mode & 1) && mz__fault_host_transfer(rt, b)) {
          *why = "injected fault: reading an input back from its device failed";
          return MZ_EDEVICE;
        }
        if ((mode & 2) && mz__fault_hit(rt, MZ__FAULT_ALLOC)) {
          *why = "injected fault: no memory for a buffer the node writes";
          return MZ_ENOMEM;
        }
      }
      if (mode & 1) {
        struct mz__xfer *rec = mz__exec_reads(e) ? &mz__exec_reads(e)[mz__exec_xd(e)->nread] : NULL;
        int rc = mz__buffer_fetch_host(b, &moved, rec);
        if (rec && rec->bytes) mz__exec_xd(e)->nread++; /* rec: e has a device record */
        if (rc) {
          *why = "cannot read an input back from its device";
          return rc;
        }
      }
      if (mode & 2) {
        mz__spin_lock(&b->lock);
        mz__copy_written(b, 0);
        mz__spin_unlock(&b->lock);
        mz__alias_wrote(b);
      }
      continue;
    }
    mz__spin_lock(&b->lock);
    struct mz__copy *c = &b->copies[m];
    if (!c->mem) {
      mz__spin_unlock(&b->lock);
      void *mem = NULL;
      int rc = dev->ops->mem_alloc(dev, b->bytes, &mem);
      if (rc) {
        *why = "cannot allocate device memory for a buffer";
        return rc;
      }
      mz__spin_lock(&b->lock);
      if (c->mem) {
        /* Lost a race: free it outside the spinlock (a device's free may
         * wait for its queues, whose completion callbacks take the lock). */
        mz__spin_unlock(&b->lock);
        dev->ops->mem_free(dev, mem);
        mz__spin_lock(&b->lock);
      } else {
        c->mem = mem;
        c->alias = false;
      }
    }
    if (mode & 1) {
      int rc = plan_device_read(rt, b, m, e, Q, &moved, why);
      if (rc) {
        mz__spin_unlock(&b->lock);
        return rc;
      }
    }
    if (mode & 2) {
      mz__copy_written(b, m);
    }
    mz__spin_unlock(&b->lock);
    if (mode & 2) mz__alias_wrote(b);
  }
  (void)moved; /* counted when the node finishes (see finish) */
  /* Arguments, for a device with memory of its own (a host-memory device
   * builds its call from the task's values and buffers). */
  const struct mz__param *ps = mz__task_kernel(t) ? mz__task_kernel(t)->params : NULL;
  for (unsigned i = 0; m && i < t->nparams; i++) {
    struct mz__xarg *x = &mz__exec_xd(e)->args[i];
    mz_buffer *b = mz__task_buf(t, i);
    if (b) {
      x->is_buffer = true;
      x->mem = b->copies[m].mem;
      x->value.p = m ? NULL : b->host;
      x->shape = &b->shape;
      x->dtype = b->shape.dtype;
    } else {
      x->is_buffer = false;
      x->value = mz__task_values(t)[i];
      x->shape = NULL;
      x->dtype = ps ? ps[i].dtype : MZ_U64;
    }
  }
  if (!m) t->exec.args_dev1 = dev->info.index + 1;
  return MZ_OK;
}

/* Faults, memory limits and dead devices are checked first (one
 * predictable branch when all are off), and a plan that fails leaves no
 * promise of a copy that its transfer will now never make. */
static int plan_exec(mz_op *op, struct mz__queue *Q, const char **why, char **log) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  /* This run's times and copies from here on (reset here rather than when
   * the run starts, which then need not touch the exec's lines). */
  struct mz__exec *e = &t->exec;
  struct mz__xdev *xd = mz__exec_xd(e);
  if (xd) xd->t_start = xd->t_end = xd->nxfer = xd->nread = 0;
  t->planned = true;
  /* Memory limits concern device memory: a node in host memory is never
   * taken back to wait for memory, nor waits on the device for one that
   * was, so it skips that check (the limits are on wherever a runtime has
   * an OpenCL or CUDA device). */
  if (__builtin_expect(rt->faults || (rt->ml && Q->dev->memnode) || atomic_load_explicit(&Q->dev->dead, memory_order_relaxed), 0)) {
    int rc = fault_plan(op, Q, why);
    if (rc) return rc;
  }
  int rc = plan_exec_body(op, Q, why, log);
  if (__builtin_expect(rc != MZ_OK, 0)) exec_unplan(&mz__task_of(op)->exec, Q);
  return rc;
}

bool mz__exec_observed(const struct mz__exec *e) { return mz__task_of(mz__exec_node(e))->run->obs.n > 0; }
bool mz__exec_timed(const struct mz__exec *e) { return mz__task_of(mz__exec_node(e))->run->timed; }
bool mz__exec_same_run(const struct mz__exec *a, const struct mz__exec *b) {
  return mz__task_of(mz__exec_node(a))->run == mz__task_of(mz__exec_node(b))->run;
}

bool mz__exec_waited_apart(const struct mz__exec *e, const struct mz__exec *next) {
  /* succs.nrun and a task's preds are set when its run is scheduled and do
   * not change while it is in flight (a later run's edges go to succs past
   * succs.nrun, under the task's lock: not read here). */
  const mz_op *op = mz__exec_node(e);
  unsigned n = mz__task_of(op)->succs.nrun;
  if (n != 1) return n > 1;
  if (!next) return true;
  const struct mz__task *nt = mz__task_of(mz__exec_node(next));
  for (unsigned i = 0; i < nt->npreds; i++)
    if (mz__task_preds(nt)[i] == op) return false;
  return true;
}

const char *mz__exec_message(const struct mz__exec *e) { return mz__task_message(mz__task_of(mz__exec_node(e))); }
void mz__exec_set_message(struct mz__exec *e, char *msg) { mz__task_set_message(mz__task_of(mz__exec_node(e)), msg); }

const mz_kernel *mz__exec_kernel(const struct mz__exec *e) { return mz__task_kernel(mz__task_of(mz__exec_node(e))); }
unsigned mz__exec_nargs(const struct mz__exec *e) { return mz__task_of(mz__exec_node(e))->nparams; }
const mz_launch *mz__exec_launch(const struct mz__exec *e) {
  static const mz_launch none = {0, {0, 0, 0}, {0, 0, 0}}; /* host work: never read */
  static const mz_launch one = {1, {1, 1, 1}, {0, 0, 0}};
  const struct mz__task *t = mz__task_of(mz__exec_node(e));
  const mz_kernel *k = mz__task_kernel(t);
  if (!k) return &none;
  const struct mz__tcold *c = mz__task_cold_get(t);
  if (c && c->launch) return c->launch;
  /* The default: the shape of the first buffer written, else of the
   * first buffer (its dlaunch), else one work item.  Not kept in the
   * task: found again for each launch, which costs a device far more. */
  const mz_buffer *lb = NULL;
  for (unsigned i = 0; i < t->nparams && !lb; i++)
    if (k->params[i].dir != MZ__IN) lb = mz__task_buf(t, i);
  for (unsigned i = 0; i < t->nparams && !lb; i++) lb = mz__task_buf(t, i);
  return lb ? &lb->dlaunch : &one;
}

int mz__exec_prepare(struct mz__exec *e) {
  const char *why = NULL;
  char *log = NULL;
  int rc = plan_exec(mz__exec_node(e), mz__exec_queue(e), &why, &log);
  if (rc) {
    mz__exec_set_message(e, log ? log : strdup(why ? why : mz_strerror(rc)));
  }
  return rc;
}

/* ---- submission ---- */

struct mz__proxy {
  struct mz__mpsc inbox;
  /* Batches whose completion the thread makes (mz__batch_done_later): a
   * stack pushed by any thread, taken whole by the thread. */
  _Atomic(struct mz__batch *) done;
  /* Threads inside mz__batch_done_later: the last batch may end the last
   * run, and so let the runtime be destroyed, before its caller has woken
   * the thread; mz__proxy_free waits for them. */
  _Atomic unsigned handing;
  /* Batches handed over and not ended yet, and whether the thread is out
   * of work (polling or parked): mz__batch_done_callback's test. */
  _Atomic unsigned undone;
  _Atomic bool idle;
  struct mz__stub stub;
  struct mz__parker park;
  pthread_t thread;
  _Atomic bool stop;
  bool joined;                /* the thread has been joined (mz__proxy_stop) */
  struct mz_device *dev;
};

/* counted: pick_drain has added op to Q's backlog already. */
static void submit(mz_op *op, unsigned q, struct work *w, bool counted) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  struct mz__queue *Q = rt->queues[q];
  struct mz_device *dev = Q->dev;
  /* Read before the hand-off: once the device has the task it may finish
   * it, and if no successor of this run waits on it, the run (and the graph
   * holding the task) may be gone before this function returns.  With
   * successors left, the run cannot end before they are released below. */
  unsigned nsucc = atomic_load_explicit(&t->rerouted, memory_order_relaxed) ? 0 : t->succs.nrun;
  /* The node planned after this one on its queue is claimed before the
   * hand-off (this node's end then finds none to release) and released
   * after it: released before, it could be placed by another thread that
   * drops its last count in between, and reach the queue first.  It is
   * alive after the hand-off: it cannot be placed, so cannot end, before
   * this release, and its run cannot end before it does. */
  mz_op *plan_next = take_plan_next(t);
  if (!counted) atomic_fetch_add_explicit(&Q->backlog, 1, memory_order_relaxed);
  atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
  if (dev->ops->inline_submit) {
    const char *why = NULL;
    char *log = NULL;
    /* Host-memory devices plan on their worker (see plan_exec). */
    int rc = dev->ops->host_memory ? MZ_OK : plan_exec(op, Q, &why, &log);
    if (rc == MZ_OK) {
      /* A batch of this node alone.  A device with host memory (the CPU)
       * ends its nodes itself and keeps no batch past submit: one on the
       * stack.  Another (a simulated device) keeps it until it calls
       * mz__batch_done, which frees it. */
      struct mz__exec *one[1] = {&t->exec};
      struct mz__batch sb = {.queue = Q, .n = 1, .execs = one}, *b = &sb;
      if (!dev->ops->host_memory) {
        b = malloc(sizeof *b);
        struct mz__exec **v = b ? malloc(sizeof *v) : NULL;
        if (!v) {
          free(b);
          b = NULL;
        } else {
          v[0] = &t->exec;
          *b = (struct mz__batch){.queue = Q, .n = 1, .execs = v};
        }
      }
      atomic_fetch_add_explicit(&r->st_batches, 1, memory_order_relaxed);
      if (!b) {
        rc = MZ_ENOMEM;
        why = "no memory for a batch";
      } else if (__builtin_expect(rt->faults != NULL, 0) && mz__fault_hit(rt, MZ__FAULT_ENQUEUE)) {
        rc = MZ_EDEVICE;
        why = "injected fault: the device refused the submission";
      } else {
        rc = dev->ops->submit(Q, b);
        if (rc) why = "the device refused the submission";
      }
      if (rc && b && b != &sb) {
        free(b->execs);
        free(b);
      }
      if (rc) exec_unplan(&t->exec, Q);
    }
    if (rc) {
      /* Successors are released below; the failure cancels them. */
      finish(op, rc, log ? log : why, w);
      free(log);
    }
  } else {
    mz__mpsc_push(&dev->proxy->inbox, op);
    mz__parker_wake(&dev->proxy->park);
  }
  plan_release_to(plan_next, w);
  /* Successors in this run may now be placed behind it. */
  if (!nsucc) return;
  mz__spin_lock(&t->lock);
  for (unsigned i = 0; i < nsucc; i++) {
    mz_op *s = t->succs.v[i];
    if (atomic_fetch_sub_explicit(&mz__task_of(s)->unsub, 1, memory_order_acq_rel) == 1) work_push(w, s, W_PLACE);
  }
  mz__spin_unlock(&t->lock);
}

/* A ready node for the CPU workers' pool: no policy call, no queue yet
 * (the worker that takes it sets it); handed over when w is drained. */
static void share(mz_op *op, struct work *w) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  /* Read before the hand-off, as in submit(). */
  unsigned nsucc = r->all_shared || atomic_load_explicit(&t->rerouted, memory_order_relaxed) ? 0 : t->succs.nrun;
  /* No exec.nwait to clear: the CPU workers wait for nothing on a device
   * (a node taken back from them is placed again, which sets it). */
  if (__builtin_expect(mz__task_has_plan_next(t), 0)) plan_release(op, w); /* eager and ws set none */
  atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
  if (nsucc) {
    mz__spin_lock(&t->lock);
    for (unsigned i = 0; i < nsucc; i++) {
      mz_op *s = t->succs.v[i];
      if (atomic_fetch_sub_explicit(&mz__task_of(s)->unsub, 1, memory_order_acq_rel) == 1) work_push(w, s, W_PLACE);
    }
    mz__spin_unlock(&t->lock);
  }
  work_share(w, r->rt, op);
}

/* ---- completion ---- */


/* ---- nodes taken back from their queue ---- */

/* Back to the host-side path: submitted once every predecessor is done. */
static void resume(mz_op *op, struct work *w) {
  struct mz__task *t = mz__task_of(op);
  if (t->host_wait) {
    work_push(w, op, W_READY); /* came through ready(): its predecessors are done */
  } else {
    t->host_wait = true;
    release_gate(op, w);
  }
}

/* The plan said the node cannot go on where it is (a dead device, a
 * predecessor taken back, no memory yet): undo its hand-off to the queue.
 * It keeps its successors (released by its first submit, never again). */
static void demote(mz_op *op, int why, struct work *w) {
  struct mz__task *t = mz__task_of(op);
  mz_runtime *rt = t->run->rt;
  atomic_fetch_sub(&rt->queues[t->exec.queue]->backlog, 1);
  pick_after_drop(rt, rt->queues[t->exec.queue], w);
  mz__task_set_message(t, NULL);
  if (mz__exec_xd(&t->exec)) mz__exec_xd(&t->exec)->nwait = 0;
  atomic_store_explicit(&t->rerouted, true, memory_order_release);
  atomic_store_explicit(&t->state, MZ__T_WAIT, memory_order_release);
  if (why == MZ__ERETRY) {
    t->fixed = false;
    t->deferred = true; /* placed again (choose falls back past dead devices) */
  }
  if (why == MZ__EMEMWAIT) {
    size_t nw = 0;
    mz_op **woken = NULL;
    bool parked = mz__mem_park(&t->exec, &woken, &nw);
    for (size_t i = 0; i < nw; i++) resume(woken[i], w);
    free(woken);
    if (parked) return; /* resumed by a node's end */
  }
  resume(op, w);
}

/* This CPU worker's counts (struct mz__acct), made r's.  A flush may
 * complete a run whose callback schedules and finishes nodes of yet
 * another run on this thread: loop until they are r's. */
static inline struct mz__acct *queue_acct(struct mz__queue *Q, struct mz__run *r) {
  struct mz__acct *acct = &Q->acct;
  while (acct->run != r) {
    if (acct->run) {
      mz__queue_flush(Q);
    } else {
      acct->run = r;
      acct->dev = Q->dev->info.index;
    }
  }
  return acct;
}
static inline struct mz__acct *worker_acct(mz_runtime *rt, struct mz__run *r) {
  return queue_acct(rt->queues[mz__cur_queue], r);
}

static void finish_pins(mz_op *op, int status, const char *detail, struct work *w, bool unpin);
static void finish(mz_op *op, int status, const char *detail, struct work *w) {
  finish_pins(op, status, detail, w, true);
}

/* unpin: release the node's pins here (false: its batch's end released
 * them already, mz__mem_unpin_batch). */
static void finish_pins(mz_op *op, int status, const char *detail, struct work *w, bool unpin) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  mz_runtime *rt = r->rt;
  if (__builtin_expect(status <= MZ__ERETRY, 0)) { /* not an end, see demote */
    demote(op, status, w);
    return;
  }
  if (status == MZ_OK && atomic_load_explicit(&t->pred_failed, memory_order_acquire)) status = MZ_ECANCELED;
  /* Never planned in this run (canceled first, or failed to be placed):
   * no times or copies to report (observers, busy time, perf models), not
   * an earlier run's. */
  struct mz__xdev *xd = mz__exec_xd(&t->exec);
  if (__builtin_expect(!t->planned, 0) && xd) xd->t_start = xd->t_end = xd->nxfer = xd->nread = 0;
  /* On a CPU worker of this runtime: count locally (see struct mz__acct). */
  struct mz__acct *acct = mz__cur_rt == rt ? worker_acct(rt, r) : NULL;
  int prev = atomic_load_explicit(&t->state, memory_order_acquire);
  bool was_queued = prev >= MZ__T_QUEUED;
  int q = t->exec.queue;
  if (was_queued && q >= 0) {
    struct mz__exec *e = &t->exec;
    struct mz_device *dev = rt->queues[q]->dev;
    /* (The queue's backlog drops after DONE, below.) */
    /* ops counts nodes that ran; one canceled behind a failed predecessor
     * on its queue reached the queue but never ran (it is in failed). */
    if (acct) {
      acct->ops += status != MZ_ECANCELED;
      acct->batches += t->shared; /* a shared node is a batch of one, as a submitted one */
    } else {
      if (status != MZ_ECANCELED) atomic_fetch_add_explicit(&r->st_ops, 1, memory_order_relaxed);
      if (t->shared) atomic_fetch_add_explicit(&r->st_batches, 1, memory_order_relaxed);
    }
    /* Times only in a record: a CPU node of a run without records
     * (devices/cpu/cpu.c) gave its perf-model sample where it ran. */
    uint64_t t_start = mz__exec_t_start(e), t_end = mz__exec_t_end(e);
    if (t_end > t_start) {
      /* A CPU node of a run that is not timed: its queue's busy time is
       * counted per burst (mz__queue_flush), and it was timed because the
       * perf models chose it as a sample, unless its kernel is async and
       * not ends_inline (timed always: the models then decide here, as for
       * other devices). */
      bool burst = dev->ops->host_memory && !r->timed;
      bool chosen = burst && !(mz__task_kernel(t) && mz__task_kernel(t)->async && !mz__task_kernel(t)->async->ends_inline);
      if (!burst) {
        if (acct && acct->dev == dev->info.index)
          acct->busy += t_end - t_start;
        else
          atomic_fetch_add_explicit(&r->busy[dev->info.index], t_end - t_start, memory_order_relaxed);
      }
      /* The perf models learn from successful runs only. */
      if (status == MZ_OK) mz__perfmodel_record(rt, op, dev, (unsigned)q, t_end - t_start, chosen);
      const struct mz_policy_ops *po = rt->pol[r->policy];
      if (po->done) po->done(rt->pol_state[r->policy], &rt->sched, (mz_task *)op, (unsigned)q, t_end - t_start);
    }
    if (dev->ops->clock) {
      /* A virtual-clock device: the run's virtual makespan ends here. */
      uint64_t v = atomic_load_explicit(&r->v1, memory_order_relaxed);
      while (t_end > v && !atomic_compare_exchange_weak_explicit(&r->v1, &v, t_end, memory_order_relaxed,
                                                                 memory_order_relaxed)) {
      }
    }
    /* Copies are counted here, from the exec, with the node's end: the
     * statistics then count what observers and the trace are shown, once
     * per node however often it was planned. */
    if (mz__exec_nxfer(e) | mz__exec_nread(e)) {
      uint64_t bytes = 0;
      for (unsigned i = 0; i < mz__exec_nxfer(e); i++) bytes += mz__exec_xd(e)->xfers[i].bytes;
      for (unsigned i = 0; i < mz__exec_nread(e); i++) bytes += mz__exec_reads(e)[i].bytes;
      atomic_fetch_add_explicit(&r->st_transfers, mz__exec_nxfer(e) + mz__exec_nread(e), memory_order_relaxed);
      atomic_fetch_add_explicit(&r->st_bytes, bytes, memory_order_relaxed);
    }
    if (r->obs.n) mz__observe_node(r, op, status);
    if (__builtin_expect(rt->ml != NULL, 0) && dev->memnode && unpin) { /* release pins, wake waiters */
      size_t nw = 0;
      mz_op **woken = mz__mem_unpin(e, &nw);
      for (size_t i = 0; i < nw; i++) resume(woken[i], w);
      free(woken);
    }
  }
  if (__builtin_expect(status < 0 && mz__task_kernel(t) && mz__task_kernel(t)->async, 0))
    mz__task_kernel(t)->async->ended(op, mz__task_values(t), status, mz__task_kernel(t)->spec.cpu.user);
  if (status < 0) {
    atomic_fetch_add_explicit(&r->st_failed, 1, memory_order_relaxed);
    if (status != MZ_ECANCELED) {
      const char *d = detail ? detail : mz__task_message(t);
      mz__fail_message(r, op, status, d);
    } else {
      mz__fail_message(r, op, status, "a node it depends on failed");
    }
  }
  if (status < 0 && !atomic_load_explicit(&rt->poisoned, memory_order_relaxed))
    atomic_store_explicit(&rt->poisoned, true, memory_order_relaxed);
  if (__builtin_expect(status < 0 || atomic_load_explicit(&rt->poisoned, memory_order_relaxed), 0))
    for (unsigned a = 0; a < t->nacc; a++)
      if (mz__acc_mode(mz__task_access(t, a)) & 2) {
        mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
        /* Stored only when it changes: a buffer many nodes write would else
         * have its line moved between the workers on every node. */
        int poison = status < 0 ? status : 0;
        if (atomic_load_explicit(&b->poison, memory_order_relaxed) != poison)
          atomic_store_explicit(&b->poison, poison, memory_order_relaxed);
        /* Written whole: a failure of a tile's earlier writer no longer
         * shows through it (mz_buffer_read of b checks its tiles too). */
        if (__builtin_expect(status >= 0 && atomic_load_explicit(&b->has_tiles, memory_order_relaxed), 0))
          mz__alias_clear_tiles_poison(b);
      }
  mz__spin_lock(&t->lock);
  /* A successor the replay has not reset yet still shows its last run:
   * waited for before it is marked or its count dropped. */
  if (__builtin_expect(atomic_load_explicit(&r->resetting, memory_order_acquire), 0))
    mz__run_wait_reset(t->succs.v, t->succs.n);
  t->exec.status = status; /* its final status: see struct mz__exec */
  /* A failure marks the successors before DONE is published: a thread that
   * sees this task done (placing a successor behind it on the device, say)
   * must also see that the successor is to be canceled.  Marked after DONE,
   * a successor placed in between could run and report success while this
   * thread was preempted before marking it. */
  if (status < 0)
    for (unsigned i = 0; i < t->succs.n; i++) {
      mz_op *s = t->succs.v[i];
      if (mz__task_of(s)->run == r || mz__fail_reaches(op, s)) atomic_store_explicit(&mz__task_of(s)->pred_failed, true, memory_order_release);
    }
  atomic_store_explicit(&t->state, MZ__T_DONE, memory_order_release);
  mz__spin_unlock(&t->lock);
  /* The backlog drops only after DONE is published, with release: a thread
   * that reads the backlog (acquire) and then this task's state sees either
   * both before or DONE.  mz_task_follow_queue counts a successor's
   * unfinished predecessors against their queue's backlog; with the drop
   * before DONE, a placement in between counted this task as pending but not
   * in the backlog, and eager stacked both tiles of a partition on one queue
   * behind it (seen under valgrind, whose scheduler widens the window). */
  if (was_queued && q >= 0) {
    atomic_fetch_sub(&rt->queues[q]->backlog, 1); /* seq_cst: see pick_drain */
    pick_after_drop(rt, rt->queues[q], w);
  }
  /* The successor list is frozen now: registrants check DONE under the lock. */
  for (unsigned i = 0; i < t->succs.n; i++) {
    mz_op *s = t->succs.v[i];
    if (atomic_fetch_sub_explicit(&mz__task_of(s)->unfin, 1, memory_order_acq_rel) == 1) work_push(w, s, W_READY);
  }
  plan_release(op, w);
  /* A task that never reached a queue still holds its successors' unsub
   * counts: release them so they are placed (and canceled). */
  if (!was_queued && !r->all_shared && !atomic_load_explicit(&t->rerouted, memory_order_relaxed)) {
    for (unsigned i = 0; i < t->succs.nrun; i++) {
      mz_op *s = t->succs.v[i];
      if (atomic_fetch_sub_explicit(&mz__task_of(s)->unsub, 1, memory_order_acq_rel) == 1) work_push(w, s, W_PLACE);
    }
  }
  if (acct) acct->done++;
  else if (atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) == 1) mz__run_complete(r);
}

void mz__queue_flush(struct mz__queue *q) {
  uint64_t now = 0;
  mz__queue_flush_at(q, &now);
}

void mz__queue_flush_at(struct mz__queue *q, uint64_t *now) {
  struct mz__acct *a = &q->acct;
  struct mz__run *r = a->run;
  if (a->t0) { /* a burst of nodes of a run that is not timed ends */
    if (r && a->tick_ns > 0) {
      /* In ticks: the caller reads its own clock when it needs one. */
      uint64_t end = mz__ticks();
      if (end > a->t0) a->busy += (uint64_t)((double)(end - a->t0) * a->tick_ns);
    } else if (r) {
      if (!*now) *now = mz__now_ns();
      a->busy += *now - a->t0;
    }
    a->t0 = 0;
  }
  if (!r) return;
  size_t done = a->done;
  if (a->ops) atomic_fetch_add_explicit(&r->st_ops, a->ops, memory_order_relaxed);
  if (a->batches) atomic_fetch_add_explicit(&r->st_batches, a->batches, memory_order_relaxed);
  if (a->busy) atomic_fetch_add_explicit(&r->busy[a->dev], a->busy, memory_order_relaxed);
  a->run = NULL;
  a->done = 0;
  a->ops = a->busy = a->batches = 0;
  if (done && atomic_fetch_sub_explicit(&r->remaining, done, memory_order_acq_rel) == done) mz__run_complete(r);
}

static void work_drain(struct work *w) {
  for (;;) {
    while (w->n) {
      w->n--;
      mz_op *op = w->v[w->n].op;
      switch (w->v[w->n].what) {
      case W_PLACE: place(op, w); break;
      case W_READY: ready(op, w); break;
      case W_SUBMIT: submit(op, (unsigned)mz__task_of(op)->exec.queue, w, true); break;
      default: finish(op, MZ_EPOLICY, "the policy's pick returned no pending node", w); break;
      }
    }
    if (!w->ndq) break;
    struct mz__queue *Q = w->dq[--w->ndq];
    pick_drain(Q->dev->rt, Q, w);
  }
  if (w->v != w->inl) free(w->v);
  w->v = w->inl;
  w->cap = 64;
  /* Last: once handed over, a node may run and end its run at once. */
  if (w->nsh) w->shdev->ops->share(w->shdev, w->sh_head, w->sh_tail, w->nsh);
  w->sh_head = w->sh_tail = NULL;
  w->nsh = 0;
}

void mz__task_finish(mz_op *op, int status) {
  struct work w;
  work_init(&w);
  finish(op, status, NULL, &w);
  work_drain(&w);
}

struct mz__acct *mz__queue_acct(struct mz__queue *Q, struct mz__run *r) { return queue_acct(Q, r); }

void mz__queue_serve_pending(struct mz__queue *Q) {
  struct work w;
  work_init(&w);
  pick_after_drop(Q->dev->rt, Q, &w);
  work_drain(&w);
}

void mz__task_ready_common(mz_op *s) {
  struct work w;
  work_init(&w);
  work_push(&w, s, W_READY);
  work_drain(&w);
}

void mz__task_ungate(mz_op *op, bool failed) {
  int saved = mz__in_runtime_thread;
  mz__in_runtime_thread = 1; /* it may end the run: its callbacks must not block */
  if (failed) atomic_store_explicit(&mz__task_of(op)->pred_failed, true, memory_order_release);
  struct work w;
  work_init(&w);
  release_gate(op, &w);
  work_drain(&w);
  mz__in_runtime_thread = saved;
}

mz_op *mz__task_ungate_take(mz_op *op) {
  struct mz__task *t = mz__task_of(op);
  struct mz__run *r = t->run;
  if (!r->lean || !t->shared || mz__task_has_plan_next(t) || atomic_load_explicit(&r->rt->poisoned, memory_order_relaxed)) {
    mz__task_ungate(op, false);
    return NULL;
  }
  if (atomic_fetch_sub_explicit(&t->unfin, 1, memory_order_acq_rel) != 1) return NULL;
  if (__builtin_expect(atomic_load_explicit(&t->pred_failed, memory_order_acquire), 0)) {
    int saved = mz__in_runtime_thread;
    mz__in_runtime_thread = 1; /* it may end the run: its callbacks must not block */
    struct work w;
    work_init(&w);
    work_push(&w, op, W_READY); /* canceled there */
    work_drain(&w);
    mz__in_runtime_thread = saved;
    return NULL;
  }
  atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
  return op;
}

void mz__batch_done(struct mz__batch *b) {
  int saved = mz__in_runtime_thread;
  mz__in_runtime_thread = 1;
  struct work w;
  work_init(&w);
  unsigned n = b->n;
  struct mz__exec **ex = b->execs;
  if (n) atomic_fetch_add_explicit(&mz__task_of(mz__exec_node(ex[0]))->run->st_callbacks, 1, memory_order_relaxed);
  /* The batch's pins in one pass under the device's mutex, not one
   * locking per node (with memory limits, on by default beside a device
   * with memory of its own). */
  const struct mz_device *dev = b->queue->dev;
  bool batch_pins = n && dev->rt->ml && dev->memnode;
  if (batch_pins) {
    size_t nw = 0;
    mz_op **woken = mz__mem_unpin_batch(ex, n, &nw);
    for (size_t i = 0; i < nw; i++) resume(woken[i], &w);
    free(woken);
  }
  for (unsigned i = 0; i < n; i++) {
    struct mz__exec *e = ex[i];
    finish_pins(mz__exec_node(e), e->status, mz__exec_message(e), &w, !batch_pins);
  }
  /* Every batch that ends here was allocated for it (a submission
   * thread's, or an inline device's one-node batch: see submit). */
  free(ex);
  free(b);
  work_drain(&w);
  mz__in_runtime_thread = saved;
}

static void run_start(struct mz__run *r);

bool mz__run_shareable(const struct mz__run *r, const struct mz__task *t) {
  const mz_runtime *rt = r->rt;
  const mz_kernel *k = mz__task_kernel(t);
  if (!k) return true; /* host work runs where host memory is: the CPU */
  const struct mz_device *sd = rt->share_dev;
  if (!sd->kernels || (r->devok && !r->devok[sd->info.index]) || !sd->ops->can_run(sd, k)) return false;
  for (unsigned i = 0; i < rt->ndev; i++) {
    const struct mz_device *d = rt->devs[i];
    if (d == sd || !d->kernels || (r->devok && !r->devok[i]) || atomic_load_explicit(&d->dead, memory_order_relaxed))
      continue;
    if (d->ops->can_run(d, k)) return false;
  }
  return true;
}

/* Backends on a virtual clock are held while the first nodes of a run are
 * submitted from this thread, so all of them start at the same virtual
 * instant (see struct mz__devtype's hold). */
static void hold_all(mz_runtime *rt, bool on) {
  for (unsigned i = 0; i < rt->nhold_types; i++) rt->hold_types[i]->hold(rt, on);
}

/* Whether r, once all of its nodes are shared, is lean (struct
 * mz__run.lean). */
static bool lean_if_shared(const struct mz__run *r) {
  const mz_runtime *rt = r->rt;
  return !r->timed && rt->nmem == 1 && !rt->faults && !rt->ml && !rt->pol_pick[r->policy];
}

/* See struct mz__run.lean. */
static void set_lean(struct mz__run *r) { r->lean = r->all_shared && lean_if_shared(r); }

bool mz__run_early_ok(const struct mz__run *r) {
  /* A lean run's workers read nothing of it that its commit writes later. */
  const mz_runtime *rt = r->rt;
  return lean_if_shared(r) && (r->gates_open || !rt->pol[r->policy]->plan) && !rt->nhold_types;
}

void mz__run_share_early(struct mz__run *r, struct mz_op *const *v, size_t n) {
  if (!r->src_early) {
    r->src_early = true;
    r->share = r->all_shared = true;
    set_lean(r);
  }
  mz_runtime *rt = r->rt;
  rt->share_dev->ops->share_array(rt->share_dev, v, n);
}

void mz__run_wait_reset(struct mz_op *const *v, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    const struct mz__task *s = mz__task_of(v[i]);
    /* The replay runs ahead of the workers, several times faster than
     * they end tasks: a wait is rare and short, unless its thread was
     * preempted, which a yield lets it get back from. */
    unsigned spins = 0;
    while (atomic_load_explicit(&s->state, memory_order_acquire) == MZ__T_DONE) mz__spin_or_yield(&spins, 256);
  }
}

bool mz__run_may_share(const struct mz__run *r) {
  const mz_runtime *rt = r->rt;
  const struct mz_device *sd = rt->share_dev;
  return sd && !rt->faults && !atomic_load_explicit(&sd->dead, memory_order_relaxed) &&
         mz__policy_shares(rt->pol[r->policy]);
}

void mz__run_start(struct mz__run *r) {
  mz_runtime *rt = r->rt;
  hold_all(rt, true);
  r->v0 = mz__runtime_clock(rt);
  run_start(r);
  hold_all(rt, false);
}


/* What ready() and share() do with a ready node of a run whose nodes are
 * all shared (r->all_shared), for one that no failure reached (st: the
 * run's status at its start) and with no plan link, inline: one store and
 * a link. */
static inline void ready_shared(mz_op *op, struct work *w, mz_runtime *rt, int st) {
  struct mz__task *t = mz__task_of(op);
  if (__builtin_expect(st < 0 || atomic_load_explicit(&t->pred_failed, memory_order_acquire) ||
                           mz__task_has_plan_next(t),
                       0)) {
    ready(op, w);
    return;
  }
  atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
  work_share(w, rt, op);
}

static void run_start(struct mz__run *r) {
  struct work w;
  work_init(&w);
  /* A run fails before its start only by its policy's plan.  One whose
   * first tasks were handed over early (src_early: no plan) may have a
   * failed task by now, which cancels no other task of an all-source
   * run, as in any run. */
  int st = r->src_early ? 0 : atomic_load(&r->status);
  if (r->ntasks == 0) {
    mz__run_complete(r);
    return;
  }
  if (st < 0) {
    for (size_t i = 0; i < r->ntasks; i++) {
      atomic_store(&mz__task_of(r->tasks[i])->pred_failed, true);
    }
  }
  /* Nodes only the CPU can run, under a policy that would put them on any
   * idle queue: shared among the CPU workers, who steal from one another
   * (no select call, no queue chosen ahead).  Not with injected faults,
   * which can kill the CPU device (a node is then placed again). */
  mz_runtime *rt = r->rt;
  if (r->gates_open && !r->replayed) {
    /* Lowered with its gates open (struct mz__run's src_v): release the
     * sources.  Once a task is handed over the run may end, but its
     * memory (the arena holding src_v) lives while this thread holds the
     * future, which mz_schedule returns only after this call. */
    if (r->lw) r->lw->all_shared = !r->devok;
    r->lw = NULL;
    r->share = r->all_shared = true;
    set_lean(r);
    void (*arr)(struct mz_device *, struct mz_op *const *, size_t) = rt->share_dev->ops->share_array;
    mz_op **src = r->src_v;
    size_t ns = r->src_n, from = 0;
    /* A run that failed before its start (only a plan fails one, and such
     * a run has none) hands nothing over whole: each source is canceled. */
    bool gated = r->src_gated || st < 0;
    for (size_t i = 0; gated && i < ns; i++) {
      struct mz__task *t = mz__task_of(src[i]);
      bool queued = atomic_load_explicit(&t->state, memory_order_relaxed) == MZ__T_QUEUED;
      if (queued && st >= 0) continue;
      /* One that kept its gate: the QUEUED ones before it go first. */
      if (i > from) arr(rt->share_dev, src + from, i - from);
      from = i + 1;
      if (queued || mz__task_drop(t, 1)) ready_shared(src[i], &w, rt, st);
    }
    if (ns > from) arr(rt->share_dev, src + from, ns - from);
    work_drain(&w);
    return;
  }
  if (r->gates_open) {
    /* Replayed with every task shared and its gate open (graph/lower.c,
     * replay): release the sources.  The first may end the run; the list
     * is the graph's, which lives on. */
    struct mz__lowered *lw = r->lw;
    r->lw = NULL;
    /* (Set already where the workers run tasks of r: not written again.) */
    if (!r->src_early) {
      r->share = r->all_shared = true;
      set_lean(r);
    }
    mz_op **src = lw->sources;
    size_t ns = lw->nsources;
    if (r->src_early) {
      /* The first sources were handed over by the replay
       * (mz__run_share_early): the rest of the task list when every task
       * is a source, else the rest of lw's array of them. */
      src = r->src_list ? lw->sources + r->src_from : r->tasks + r->src_from;
      ns = (r->src_list ? lw->nsources : r->ntasks) - r->src_from;
    }
    if (__builtin_expect(st >= 0 && r->src_handed && ns, 1)) {
      /* QUEUED by the replay: one hand-off, after which the run may end
       * at once (the array is the graph's, which lives on). */
      rt->share_dev->ops->share_array(rt->share_dev, src, ns);
    } else {
      for (size_t i = 0; i < ns; i++) ready_shared(src[i], &w, rt, st);
      work_drain(&w);
    }
    /* The replay's count on the run (struct mz__run's src_hold): the run
     * is committed, it may end. */
    if (r->src_hold && atomic_fetch_sub_explicit(&r->remaining, 1, memory_order_acq_rel) == 1) mz__run_complete(r);
    return;
  }
  r->share = mz__run_may_share(r);
  size_t nshared = 0;
  /* The answer depends on the kernel alone: asked once per run of equal
   * kernels (a graph's nodes mostly come in such runs).  Not asked at all
   * when the last run of the same tasks shared them all (struct
   * mz__lowered.all_shared): one pass over the tasks fewer. */
  const mz_kernel *pk = NULL;
  bool psh = false, asked = false;
  bool planned = rt->pol[r->policy]->plan != NULL;
  bool known = r->share && !r->devok && r->lw && r->lw->all_shared && !planned;
  if (known) nshared = r->ntasks;
  for (size_t i = 0; r->share && !known && i < r->ntasks; i++) {
    struct mz__task *t = mz__task_of(r->tasks[i]);
    if (!asked || mz__task_kernel(t) != pk) {
      psh = mz__run_shareable(r, t);
      pk = mz__task_kernel(t);
      asked = true;
    }
    t->shared = psh;
    nshared += psh;
    /* The plan's worker is a preference: the node goes to whichever takes
     * it, and has no queue until then (a successor placed on the same
     * queue must not count on the queue's order).  Its plan links and
     * expected times stay. */
    if (psh && t->fixed) {
      t->fixed = false;
      __atomic_store_n(&t->exec.queue, -1, __ATOMIC_RELAXED);
    }
  }
  for (size_t i = 0; !r->share && i < r->ntasks; i++) mz__task_of(r->tasks[i])->shared = false;
  r->all_shared = r->share && nshared == r->ntasks;
  if (r->lw) r->lw->all_shared = r->all_shared && !r->devok;
  r->lw = NULL;
  if (r->all_shared) {
    set_lean(r);
    /* No node is placed: open every gate; the sources are ready now, and
     * handed over in bursts as they are found.  From the first burst on,
     * the run may end as soon as no gate is held: the loop reads its task
     * list from locals, and a task whose gate it still holds keeps the run
     * alive until then. */
    mz_op **tasks = r->tasks;
    size_t n = r->ntasks;
    /* While every task so far is a source that takes the short way, they
     * go to the workers as pieces of the task list (share_array: the run
     * keeps it to its end, after its last node ran), about 8 of them, so
     * that the workers start before this pass ends; from the first other
     * task on, one by one. */
    void (*arr)(struct mz_device *, struct mz_op *const *, size_t) =
        st >= 0 && rt->share_dev ? rt->share_dev->ops->share_array : NULL;
    size_t piece = n / 8 > 256 ? n / 8 : 256, from = 0;
    for (size_t i = 0; i < n; i++) {
      struct mz__task *t = mz__task_of(tasks[i]);
      t->host_wait = true;
      bool rd = mz__task_drop(t, 1);
      if (arr && rd && !atomic_load_explicit(&t->pred_failed, memory_order_acquire) && !mz__task_has_plan_next(t)) {
        atomic_store_explicit(&t->state, MZ__T_QUEUED, memory_order_release);
        if (i + 1 - from == piece) {
          arr(rt->share_dev, tasks + from, piece);
          from = i + 1;
        }
        continue;
      }
      if (arr && i > from) arr(rt->share_dev, tasks + from, i - from);
      arr = NULL;
      if (rd) ready_shared(tasks[i], &w, rt, st);
    }
    if (arr && n > from) arr(rt->share_dev, tasks + from, n - from);
    work_drain(&w);
    return;
  }
  /* Tasks with no predecessor in the run, in topological order. */
  for (size_t i = 0; i < r->ntasks; i++)
    if (atomic_load_explicit(&mz__task_of(r->tasks[i])->unsub, memory_order_acquire) == 0) work_push(&w, r->tasks[i], W_PLACE);
  /* Place in topological order: the work list is a stack, so reverse. */
  for (size_t i = 0, j = w.n ? w.n - 1 : 0; i < j; i++, j--) {
    mz_op *tmp = w.v[i].op;
    w.v[i].op = w.v[j].op;
    w.v[j].op = tmp;
  }
  work_drain(&w);
}

/* ---- the submission thread of a device with its own memory ---- */

static void proxy_flush(struct mz__proxy *p, struct mz__batch **bp, struct work *w) {
  struct mz__batch *b = *bp;
  if (!b) return;
  *bp = NULL;
  struct mz__queue *Q = b->queue;
  struct mz__run *r0 = mz__task_of(mz__exec_node(b->execs[0]))->run;
  atomic_fetch_add_explicit(&r0->st_batches, 1, memory_order_relaxed);
  unsigned n = b->n;
  /* Mark flushed before the device can complete them; the CAS keeps a
   * completion that races ahead from being undone. */
  mz_op *ops_st[MZ__BATCH_MAX], **ops = ops_st;
  struct mz__run *runs_st[MZ__BATCH_MAX], **runs = runs_st;
  for (unsigned i = 0; i < n; i++) {
    ops[i] = mz__exec_node(b->execs[i]);
    runs[i] = mz__task_of(ops[i])->run; /* keep the nodes alive past a fast callback */
    atomic_fetch_add(&runs[i]->refs, 1);
  }
  mz_runtime *rt = Q->dev->rt;
  bool injected = __builtin_expect(rt->faults != NULL, 0) && mz__fault_hit(rt, MZ__FAULT_ENQUEUE);
  int rc = injected ? MZ_EDEVICE : Q->dev->ops->submit(Q, b);
  if (rc) {
    for (unsigned i = 0; i < n; i++) exec_unplan(b->execs[i], Q);
    for (unsigned i = 0; i < n; i++)
      finish(ops[i], rc,
             injected ? "injected fault: the device refused the submission" : "the device refused the submission", w);
    free(b->execs);
    free(b);
  } else {
    for (unsigned i = 0; i < n; i++) {
      uint8_t exp = MZ__T_QUEUED;
      atomic_compare_exchange_strong(&mz__task_of(ops[i])->state, &exp, MZ__T_FLUSHED);
    }
  }
  for (unsigned i = 0; i < n; i++) mz__run_unref(runs[i]);
}

void mz__batch_done_later(struct mz__batch *b) {
  struct mz__proxy *p = b->queue->dev->proxy;
  atomic_fetch_add_explicit(&p->handing, 1, memory_order_acq_rel);
  atomic_fetch_add_explicit(&p->undone, 1, memory_order_relaxed);
  struct mz__batch *head = atomic_load_explicit(&p->done, memory_order_relaxed);
  do b->next_done = head;
  while (!atomic_compare_exchange_weak_explicit(&p->done, &head, b, memory_order_release, memory_order_relaxed));
  mz__parker_wake(&p->park);
  atomic_fetch_sub_explicit(&p->handing, 1, memory_order_release);
}

/* End the batches handed over by mz__batch_done_later, oldest first. */
static void proxy_done(struct mz__proxy *p) {
  struct mz__batch *b = atomic_exchange_explicit(&p->done, NULL, memory_order_acquire), *rev = NULL;
  while (b) {
    struct mz__batch *next = b->next_done;
    b->next_done = rev;
    rev = b;
    b = next;
  }
  while (rev) {
    struct mz__batch *next = rev->next_done;
    mz__batch_done(rev);
    /* After the end: a later batch of the same queue, seeing none left,
     * may end at once on its callback's thread. */
    atomic_fetch_sub_explicit(&p->undone, 1, memory_order_release);
    rev = next;
  }
}

void mz__batch_done_callback(struct mz__batch *b) {
  struct mz__proxy *p = b->queue->dev->proxy;
  if (!atomic_load_explicit(&p->idle, memory_order_relaxed) && atomic_load_explicit(&p->undone, memory_order_acquire) == 0)
    mz__batch_done(b);
  else
    mz__batch_done_later(b);
}

static inline bool proxy_has_done(struct mz__proxy *p) {
  return atomic_load_explicit(&p->done, memory_order_relaxed) != NULL;
}

static void *proxy_main(void *arg) {
  struct mz__proxy *p = arg;
  mz__in_runtime_thread = 1;
  struct mz__batch *b = NULL;
  /* Polls before parking, for as long as an idle CPU worker spins (the
   * runtime's spin setting): a program that submits one op at a time (a
   * canned gemm, then a wait) finds the thread awake, not parked behind a
   * wake-up that costs tens of microseconds in a VM.  No pause between
   * polls: submission latency. */
  const uint64_t spin_ns = (uint64_t)p->dev->rt->spin * 1000u;
  for (;;) {
    if (proxy_has_done(p)) proxy_done(p);
    mz_op *op = mz__mpsc_pop(&p->inbox);
    if (!op) {
      struct work w;
      work_init(&w);
      proxy_flush(p, &b, &w);
      work_drain(&w);
      atomic_store_explicit(&p->idle, true, memory_order_relaxed);
      uint64_t until = 0;
      for (unsigned i = 1; !op && !proxy_has_done(p); i++) {
        op = mz__mpsc_pop(&p->inbox);
        if (op || i % 64) continue;
        uint64_t now = mz__now_ns();
        if (!until) until = now + spin_ns;
        else if (now >= until) break;
      }
      if (!op) {
        if (proxy_has_done(p)) continue;
        if (atomic_load(&p->stop)) break;
        mz__parker_park(&p->park);
        continue;
      }
    }
    if (atomic_load_explicit(&p->idle, memory_order_relaxed)) atomic_store_explicit(&p->idle, false, memory_order_relaxed);
    struct mz__task *t = mz__task_of(op);
    struct mz__queue *Q = p->dev->rt->queues[t->exec.queue];
    struct work w;
    work_init(&w);
    const char *why = NULL;
    char *log = NULL;
    /* Flush another queue's batch before planning: a plan may
     * wait on the device for a transfer in that batch, and if the device
     * refuses the batch, the transfer's copy must read as invalid by then. */
    if (b && b->queue != Q) proxy_flush(p, &b, &w);
    int rc = plan_exec(op, Q, &why, &log);
    if (rc) {
      proxy_flush(p, &b, &w);
      finish(op, rc, log ? log : why, &w);
      free(log);
      work_drain(&w);
      continue;
    }
    if (b && b->queue != Q) proxy_flush(p, &b, &w);
    if (!b) {
      b = calloc(1, sizeof *b);
      /* Room for a whole batch at once: no copies as it grows (under
       * 1 KiB, see MZ__BATCH_MAX, so one small-size malloc). */
      if (b) b->execs = malloc(MZ__BATCH_MAX * sizeof *b->execs);
      if (!b || !b->execs) {
        free(b);
        b = NULL;
        finish(op, MZ_ENOMEM, "no memory for a batch", &w);
        work_drain(&w);
        continue;
      }
      b->queue = Q;
    }
    b->execs[b->n++] = &t->exec;
    /* A long run is cut into batches of MZ__BATCH_MAX so the device starts
     * on the first ones while later ones are planned; each batch costs one
     * completion callback. */
    if (b->n >= MZ__BATCH_MAX) proxy_flush(p, &b, &w);
    /* Mostly nothing was made ready here: spare the call. */
    if (w.n || w.nsh || w.ndq || w.v != w.inl) work_drain(&w);
  }
  return NULL;
}

int mz__proxy_start(struct mz_device *dev) {
  struct mz__proxy *p = calloc(1, sizeof *p);
  if (!p) return MZ_ENOMEM;
  p->dev = dev;
  mz__mpsc_init(&p->inbox, &p->stub.op);
  mz__parker_init(&p->park);
  if (pthread_create(&p->thread, NULL, proxy_main, p)) {
    mz__parker_fini(&p->park);
    free(p);
    return MZ_ENOMEM;
  }
  mz__thread_name(p->thread, "submit%u", dev->info.index);
  dev->proxy = p;
  return MZ_OK;
}

void mz__proxy_stop(struct mz_device *dev) {
  struct mz__proxy *p = dev->proxy;
  if (!p || p->joined) return;
  atomic_store(&p->stop, true);
  mz__parker_wake(&p->park);
  pthread_join(p->thread, NULL);
  p->joined = true;
}

/* Free it only once the CPU workers are joined too: a worker that hands a
 * node to this device may still be waking its parker after that node ended
 * the last run (found by the random fault runs under ThreadSanitizer). */
void mz__proxy_free(struct mz_device *dev) {
  struct mz__proxy *p = dev->proxy;
  if (!p) return;
  mz__proxy_stop(dev);
  while (atomic_load_explicit(&p->handing, memory_order_acquire)) sched_yield();
  mz__parker_fini(&p->park);
  free(p);
  dev->proxy = NULL;
}
