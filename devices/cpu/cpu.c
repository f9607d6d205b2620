/* The CPU device: one in-order queue per worker thread, each worker pinned
 * to its own core with hwloc.  Buffers live in host memory, so there is no
 * device memory and no transfer, except reading a buffer back from another
 * device before a task that needs it.  The worker is its own completion
 * signal: it finishes each task as soon as it ran.
 *
 * Two ways in.  A node placed on a queue (submit) goes to that worker's
 * inbox and runs there, in order.  A node shared with the device (share:
 * nodes only the CPU can run, under every shipped policy but single) goes
 * to the workers' pool:
 * from a worker, into its run-next slot (the successor it made ready runs
 * next, inputs in cache, no hand-off) or its own deque, which idle workers
 * steal from; from any other thread, into the injection list, which
 * workers take from in chunks (a run's sources may come as one array,
 * share_array, held whole in a small ring beside the list).  A worker
 * takes work in this order: run-next,
 * its local list (the few nodes it took from its own deque at once, or,
 * alone on its device, what it would have put there), inbox, own deque,
 * injection, steal.  An idle worker spins a while, then
 * says it is idle and parks; whoever shares a node wakes one idle worker,
 * and only when one is idle (one atomic load otherwise).
 *
 * Lending (cpu_help, with MZ_WAIT_HELP=1; off by default: METG stencil_1d
 * is no better with it, see bench/README.md).  A thread that waits for a
 * run borrows a parked worker and, while it runs nodes, is bound to that
 * worker's core (pin_help): it runs that worker's loop on its own stack (run-next slot,
 * inbox, deque, counters) while the worker sleeps on, so a node it can
 * take costs no wake-up, the run's end wakes nobody, and no more threads
 * run nodes than there are workers.  w->lend says who owns the worker:
 * LEND_OWN (its thread), LEND_PARKED (its thread committed to sleep; a
 * waiter may take it with one CAS), LEND_BORROWED, LEND_MISSED (borrowed,
 * and its thread woke for work meanwhile and sleeps again until it is
 * handed back).  The CAS that takes it and the exchange that gives it
 * back are acquire/release, so each side sees the other's deque and slot;
 * the one that gives it back wakes its thread when it missed a wake-up or
 * has work left, else leaves it asleep and still counted idle. */
#include <ctype.h>
#include <hwloc.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "deque.h"
#include "exec.h"
#include "lean_end.h"
#include "objects/mz_buffer.h"
#include "objects/mz_kernel.h"
#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"
#include "perfmodel.h"
#include "perfmodel_tick.h"

struct worker;
struct cpu_dev;
static void cpu_share(struct mz_device *dev, struct mz_op *head, struct mz_op *tail, size_t n);
static void wake_idle(struct cpu_dev *cd, size_t n);

/* Arrays the injection ring holds at once (struct cpu_dev). */
#define INJ_SEGS 16

struct cpu_dev {
  hwloc_topology_t topo;
  unsigned nworkers;
  hwloc_cpuset_t *sets; /* per worker: the core it is bound to */
  bool nobind;          /* MZ_BIND=none: the workers are not pinned */
  uint8_t *dist;        /* [a * nworkers + b]: see cpu_queue_distance */
  /* The pool.  workers[i] is set once worker i exists (queue_init). */
  _Atomic(struct worker *) *workers;
  _Atomic unsigned nidle;       /* workers that said they are idle */
  /* Nodes shared from outside the workers, or too many for one worker's
   * deque: a FIFO linked through their tasks (mz__op_next: a shared node is in no inbox),
   * so sharing allocates nothing, however many nodes. */
  pthread_mutex_t inj_lock;     /* guards the injection list and ring */
  struct mz_op *inj_head, *inj_tail;
  /* Arrays shared whole (cpu_share_array), taken from the front in
   * chunks: the next nodes' addresses are read from an array, not each
   * from the node before it, so a worker's loads of them overlap (a
   * replayed graph larger than the caches waited for each node's line in
   * turn).  A ring of INJ_SEGS; when it is full, an array is linked into
   * the list instead. */
  struct inj_seg {
    struct mz_op *const *v;
    size_t n;
  } segs[INJ_SEGS];
  unsigned seg_head, nsegs;
  size_t inj_n;                 /* nodes in the list and the ring */
  _Atomic size_t inj_count;     /* inj_n, read without the lock as a hint */
  _Atomic unsigned park_now;    /* threads in cpu_hold waiting for a worker to park: idle ones stop spinning */
};

/* The most nodes a worker keeps in its own deque; more go to the
 * injection list (the deque's array then never grows past this). */
#define LOCAL_MAX 1024
/* The most nodes a worker takes from its own deque at once. */
#define LOCAL_TAKE 8
/* The most nodes its local list holds (struct worker's local): a worker
 * alone on its device keeps there what others would steal from its deque,
 * as many as an injection chunk. */
#define LOCAL_CAP 64

struct worker {
  struct mz__mpsc inbox;
  struct mz__stub stub;
  struct mz__parker park;
  pthread_t thread;
  _Atomic bool stop;
  bool joined;            /* the thread has been joined (cpu_stop_all) */
  struct mz__queue *q;
  hwloc_topology_t topo;
  hwloc_cpuset_t set;
  uint64_t spin_ns;        /* how long an idle worker spins before it parks */
  bool watch;             /* the runtime has a watchdog: tell it what runs */
  uint32_t dev1;          /* its device's index + 1: a node's args_dev1 when planned for it */
  struct cpu_dev *cd;
  struct mz_op *next;     /* run-next slot (its owner only: see lend) */
  /* Nodes taken from its own deque in one go (mz__deque_take_some), or
   * made ready on a device of one worker (push_ready), run next after the
   * run-next slot: local[nlocal - 1] first (its owner only). */
  struct mz_op *local[LOCAL_CAP];
  unsigned nlocal;
  _Atomic bool idle;      /* about to park or parked (see the top) */
  _Atomic int lend;       /* LEND_*: who owns the worker's loop (see the top) */
  struct mz__deque dq;    /* shared nodes: this worker takes, others steal */
  /* The idle ops (mz__idle_get) that the last spin_take found a node with
   * and kept in use for the next one (its loop's owner only): see
   * idle_keep. */
  const struct mz__idle_ops *io_kept;
  void *ictx_kept;
};

enum { LEND_OWN, LEND_PARKED, LEND_BORROWED, LEND_MISSED };

static bool cpu_can_run(const struct mz_device *dev, const mz_kernel *k) {
  (void)dev;
  return !k || mz__kernel_spec(k)->cpu.fn != NULL;
}

/* mz__exec_prepare (device_ops.h) where it has nothing to do, inline on
 * the worker's path: a node whose arguments an earlier plan built for
 * this device, in a runtime with host memory only, no faults injected, a
 * live device and no failed predecessor.  The plan then only resets the
 * exec's times and status, as plan_exec would (src/exec.c). */
static inline int prepare_kept(struct mz__exec *e, const struct mz__queue *q) {
  struct mz__task *t = mz__task_of(mz__exec_node(e));
  const struct mz_device *dev = q->dev;
  const mz_runtime *rt = dev->rt;
  if (__builtin_expect(t->exec.args_dev1 == dev->info.index + 1 && rt->nmem == 1 && !rt->faults && !(rt->ml && dev->memnode) &&
                           !atomic_load_explicit(&dev->dead, memory_order_relaxed) &&
                           !atomic_load_explicit(&t->pred_failed, memory_order_acquire),
                       1)) {
    /* No copies to reset (one memory); times only where the run keeps
     * records (exec.xd; a lean run does not). */
    struct mz__xdev *xd = mz__exec_xd(e);
    if (__builtin_expect(xd != NULL, 0)) xd->t_start = xd->t_end = 0;
    e->status = 0;
    t->planned = true;
    return MZ_OK;
  }
  return mz__exec_prepare(e);
}

/* Whether op's run on w's queue is a perf-model sample (perfmodel.h):
 * asked once per node, since it advances the queue's tick. */
static inline bool pm_wants(const struct worker *w, const mz_op *op) {
  const struct mz_device *dev = w->q->dev;
  const struct mz__pm_hot *pm = (const struct mz__pm_hot *)(const void *)dev->rt->pm;
  if (!pm) return false;
  struct mz__pm_queue *pq = &pm->qs[w->q->index];
  uint32_t tick;
  int due = mz__pm_due(pq, mz__task_of(op), w->dev1, &tick);
  return due >= 0 ? due : mz__perfmodel_due_new(pq, op, dev, tick);
}

/* Nodes w's own node made ready (its lean end), past the first: to w's
 * deque, where idle workers may steal them; past the deque's share, to the
 * device's pool as cpu_share does.  In the order the deque would give them
 * back: the last first. */
static void push_ready(struct worker *w, mz_op **rd, unsigned n) {
  /* A device of one worker has no thief: its nodes wait where taking them
   * back costs no fence (as many as fit). */
  if (w->cd->nworkers == 1 && w->nlocal + n <= LOCAL_CAP) {
    for (unsigned i = 0; i < n; i++) w->local[w->nlocal++] = rd[i];
    return;
  }
  unsigned i = 0;
  int64_t held = atomic_load_explicit(&w->dq.bottom, memory_order_relaxed) -
                 atomic_load_explicit(&w->dq.top, memory_order_relaxed);
  unsigned pushed = 0;
  for (; i < n && held < LOCAL_MAX && mz__deque_push(&w->dq, rd[i]); i++, held++) pushed++;
  if (pushed) wake_idle(w->cd, pushed);
  if (i == n) return;
  for (unsigned j = i; j < n; j++)
    atomic_store_explicit(mz__op_next(rd[j]), j + 1 < n ? rd[j + 1] : NULL, memory_order_relaxed);
  cpu_share(w->q->dev, rd[i], rd[n - 1], n - i);
}
/* All of them: the first to w's run-next slot when it is free. */
static inline void keep_ready(struct worker *w, mz_op **rd, unsigned n) {
  if (!w->next) {
    w->next = rd[0];
    rd++;
    n--;
  }
  if (n) push_ready(w, rd, n);
}

/* Run one task: plan it (read stale inputs back from their devices), call
 * the function, finish it. */
/* A node of a lean run taken from the pool is not counted in its queue's
 * backlog while it runs (run_taken): the count went up and down on this
 * thread alone, two locked instructions per node (about 5 ns each on this
 * machine kind) that told other threads only that this worker was busy for
 * a moment.  Any end but the lean one goes through mz__task_finish, which
 * drops the count: count it first. */
static void finish_counted(struct worker *w, mz_op *op, int status, bool counted) {
  if (!counted) atomic_fetch_add_explicit(&w->q->backlog, 1, memory_order_relaxed);
  mz__task_finish(op, status);
}

/* A CPU call's arguments, from the task's own arrays (host memory: a
 * buffer is its host copy), not from argument records, which the run keeps
 * only for devices with memory of their own. */
static void fill_args_any(const struct mz__task *t, mz_arg *args, mz_shape *shapes) {
  const mz_arg *vals = mz__task_values(t);
  for (unsigned i = 0; i < t->nparams; i++) {
    const mz_buffer *b = mz__task_buf(t, i);
    if (b) {
      args[i].p = b->host;
      shapes[i] = b->shape;
    } else {
      args[i] = vals[i];
      memset(&shapes[i], 0, sizeof shapes[i]);
    }
  }
}
/* An apply's of at most 64 parameters (the common case, kept inline on
 * the workers' path) reads its kernel's masks. */
/* The shapes a call of scalars only gets: count 0 for each (mz_call). */
static const mz_shape no_shapes[16];

static inline __attribute__((always_inline)) void fill_apply_args(const mz_kernel *kern, const struct mz__task *t,
                                                                  mz_arg *args, mz_shape *shapes) {
  const mz_arg *vals = mz__task_values(t);
  /* One pass over the buffers' bits and one over the scalars': no test
   * per parameter. */
  for (uint64_t m = kern->bufmask; m; m &= m - 1) {
    unsigned i = (unsigned)__builtin_ctzll(m);
    const mz_buffer *b = vals[i].p;
    args[i].p = b->host;
    shapes[i] = b->shape;
  }
  for (uint64_t m = kern->scalmask; m; m &= m - 1) {
    unsigned i = (unsigned)__builtin_ctzll(m);
    args[i] = vals[i];
    memset(&shapes[i], 0, sizeof shapes[i]);
  }
}
static inline __attribute__((always_inline)) void fill_args(const struct mz__task *t, mz_arg *args, mz_shape *shapes) {
  if (__builtin_expect(!mz__task_kernel(t) || t->nparams > 64, 0)) fill_args_any(t, args, shapes);
  else fill_apply_args(mz__task_kernel(t), t, args, shapes);
}

/* The message of a node whose function returned ret != 0. */
static char *failed_message(const mz_kernel *kern, int ret) {
  char buf[200];
  const char *name = mz_err_name(ret);
  snprintf(buf, sizeof buf, "the %s function returned %d (%s)", kern ? "kernel's CPU" : "host", ret,
           strcmp(name, "MZ_EUNKNOWN") ? name : "not a maize code");
  return strdup(buf);
}

/* counted: see finish_counted.  sampled: whether the perf models take
 * this run of the node as a sample, when run_lean already asked
 * (pm_wants advances a tick: once a node); -1: not asked. */
static void run_task(struct worker *w, struct mz__exec *e, bool counted, int sampled) {
  mz_op *op = mz__exec_node(e);
  const struct mz__task *t = mz__task_of(op);
  const mz_kernel *kern = mz__task_kernel(t);
  int status = MZ_OK;
  char *msg = NULL;
  if (atomic_load_explicit(&t->pred_failed, memory_order_acquire)) {
    finish_counted(w, op, MZ_ECANCELED, counted);
    return;
  }
  if (w->watch) atomic_store_explicit(&w->q->current, op, memory_order_relaxed); /* for the watchdog */
  /* Timed when its run is (observed, or asked for: struct mz__run.timed),
   * or as a perf-model sample; an async kernel always is, since the thread
   * that ends it reads its start, unless it mostly ends in its start. */
  const struct mz__async_ops *async = kern ? kern->async : NULL;
  bool timed = t->run->timed || (async && !async->ends_inline) ||
               (sampled >= 0 ? sampled : pm_wants(w, op));
  uint64_t t0 = timed ? mz__now_ns() : 0;
  status = prepare_kept(e, w->q); /* resets the exec's times: stamp after */
  /* The node starts where the reads of its stale inputs back into host
   * memory that planning made end (they are timed apart, as copies:
   * exec->reads), so its time, its queue's busy time and its perf model
   * are the function's alone; no second clock read on the common path. */
  uint64_t ts = !timed ? 0 : status == MZ_OK && mz__exec_nread(e) ? mz__exec_reads(e)[mz__exec_nread(e) - 1].t_end : t0;
  if (timed && mz__exec_xd(e)) mz__exec_xd(e)->t_start = ts;
  if (status == MZ_OK) {
    mz_cpu_fn fn = NULL;
    void *user = NULL;
    if (kern) {
      fn = kern->spec.cpu.fn; /* the spec's field, not mz__kernel_spec's call */
      user = kern->spec.cpu.user;
    } else { /* host work; partition and unpartition have none */
      const struct mz__host_call *h = mz__task_host(t);
      if (h) {
        fn = h->fn;
        user = h->user;
      }
    }
    if (fn) {
      mz_arg argv[16];
      mz_shape shv[16];
      mz_arg *args = t->nparams <= 16 ? argv : malloc(t->nparams * sizeof *args);
      mz_shape *shapes = t->nparams <= 16 ? shv : malloc(t->nparams * sizeof *shapes);
      if (!args || !shapes) {
        status = MZ_ENOMEM;
      } else {
        /* From the task's own arrays (host memory: a buffer is its host
         * copy), not from argument records, which the run keeps only for
         * devices with memory of their own. */
        fill_args(t, args, shapes);
        mz_call call = {.kernel = kern, .nargs = t->nparams, .args = args, .shapes = shapes, .user = user,
                        .queue = w->q->index};
        int ret;
        if (__builtin_expect(async != NULL, 0)) {
          /* Its time on the queue is the start; stamped before it, since
           * the thread that ends the node reads it (and may do so at once):
           * the start's stamp, read just now (a clock read is tens of ns,
           * and an async kernel's start is a message's latency). */
          if (mz__exec_xd(e)) mz__exec_xd(e)->t_end = ts;
          if (!counted) { /* ended by mz__task_finish, on another thread */
            atomic_fetch_add_explicit(&w->q->backlog, 1, memory_order_relaxed);
            counted = true;
          }
          ret = async->start(op, &call);
          if (ret == MZ__ASYNC_ENDED) ret = 0; /* ended in start: as a function's return */
          else if (ret == 0) { /* started: another thread ends the node (struct mz__async_ops) */
            if (args != argv) free(args);
            if (shapes != shv) free(shapes);
            if (w->watch) atomic_store_explicit(&w->q->current, NULL, memory_order_relaxed);
            return;
          }
        } else {
          ret = fn(&call);
        }
        /* The only place a kernel's or host function's return is read
         *: any nonzero value fails the node with MZ_EKERNEL and
         * stays in the message only.  Passed on as a status, a user's code
         * would alias the runtime's internal ones (MZ__ERETRY, -1000 and
         * below, turn the node back to be placed again) or a wait's result. */
        if (ret != 0) {
          msg = failed_message(kern, ret);
          status = MZ_EKERNEL;
        }
      }
      if (args != argv) free(args);
      if (shapes != shv) free(shapes);
    }
  }
  if (timed) {
    uint64_t te = mz__now_ns();
    if (mz__exec_xd(e)) {
      mz__exec_xd(e)->t_end = te;
    } else if (status == MZ_OK && te > ts) {
      /* A run without records (struct mz__exec's xd) keeps no times: a
       * perf-model sample of a CPU function that returned goes to the
       * models here, as finish would from the record (its busy time is
       * the burst's: the run is not timed). */
      mz__perfmodel_record(w->q->dev->rt, op, w->q->dev, w->q->index, te - ts, !(async && !async->ends_inline));
    }
  }
  if (msg) mz__exec_set_message(e, msg);
  if (w->watch) atomic_store_explicit(&w->q->current, NULL, memory_order_relaxed);
  if (!timed && status == MZ_OK && t->run->lean && !w->watch) {
    /* The short end (src/exec.c): the successors it made ready come back
     * here and go to this worker's run-next slot and deque at once. */
    mz_op *rd[8];
    unsigned n = mz__task_finish_lean(w->q, op, counted, rd, 8);
    if (n) keep_ready(w, rd, n);
    return;
  }
  finish_counted(w, op, status, counted);
}

/* Wake one idle worker, if any said it is idle.  After a node was made
 * visible: the fence pairs with the one a worker makes between saying it
 * is idle and looking for work a last time, so one of the two sees the
 * other. */
static void wake_idle(struct cpu_dev *cd, size_t n) {
#ifdef MZ__TSAN
  /* TSan does not model fences: the same order through an RMW on nidle,
   * which a worker's increment reads from or is read by. */
  if (!atomic_fetch_add_explicit(&cd->nidle, 0, memory_order_seq_cst)) return;
#else
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&cd->nidle, memory_order_relaxed)) return;
#endif
  for (unsigned i = 0; i < cd->nworkers && n; i++) {
    struct worker *v = atomic_load_explicit(&cd->workers[i], memory_order_acquire);
    if (v && atomic_load_explicit(&v->idle, memory_order_relaxed) && atomic_exchange(&v->idle, false)) {
      mz__parker_wake(&v->park);
      n--;
    }
  }
}

/* Shared nodes waiting in the injection ring: take up to a fair share of
 * them (the first to run, the rest into this worker's deque, where others
 * may steal them). */
static mz_op *take_injected(struct worker *w) {
  struct cpu_dev *cd = w->cd;
  pthread_mutex_lock(&cd->inj_lock);
  size_t n = cd->inj_n / cd->nworkers;
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  if (n > cd->inj_n) n = cd->inj_n;
  struct mz_op *const *v = NULL;
  mz_op *first = NULL;
  if (cd->nsegs) {
    /* From the ring's first array: at most what it has left. */
    struct inj_seg *sg = &cd->segs[cd->seg_head];
    if (n > sg->n) n = sg->n;
    v = sg->v;
    sg->v += n;
    sg->n -= n;
    if (!sg->n) {
      cd->seg_head = (cd->seg_head + 1) % INJ_SEGS;
      cd->nsegs--;
    }
    cd->inj_n -= n;
  } else if (n) {
    mz_op *last = first = cd->inj_head;
    for (size_t i = 1; i < n; i++) last = atomic_load_explicit(mz__op_next(last), memory_order_relaxed);
    cd->inj_head = atomic_load_explicit(mz__op_next(last), memory_order_relaxed);
    if (!cd->inj_head) cd->inj_tail = NULL;
    cd->inj_n -= n;
  }
  atomic_store_explicit(&cd->inj_count, cd->inj_n, memory_order_relaxed);
  pthread_mutex_unlock(&cd->inj_lock);
  if (!n) return NULL;
  /* The first runs here; the rest go to this worker's deque, or, alone
   * on its device, to its local list (no thief: no fences), in the order
   * the deque would give them back (the last first).  An array's chunk
   * goes in backwards, so that it runs in its order (the order its nodes
   * were built, and laid out, in) and thieves take its far end. */
  bool alone = cd->nworkers == 1 && w->nlocal + n - 1 <= LOCAL_CAP;
  if (v) {
    if (alone)
      for (size_t i = n; i-- > 1;) w->local[w->nlocal++] = v[i];
    else if (n > 1 && !mz__deque_push_rev(&w->dq, v + 1, n - 1))
      abort(); /* cannot lose a task: there is no sane way to go on */
    first = v[0];
  } else {
    mz_op *op = atomic_load_explicit(mz__op_next(first), memory_order_relaxed);
    for (size_t i = 1; i < n; i++) {
      mz_op *nx = i + 1 < n ? atomic_load_explicit(mz__op_next(op), memory_order_relaxed) : NULL;
      if (alone) w->local[w->nlocal++] = op;
      else if (!mz__deque_push(&w->dq, op)) abort(); /* cannot lose a task: there is no sane way to go on */
      op = nx;
    }
  }
  if (n > 1 && !alone) wake_idle(cd, n - 1);
  return first;
}

/* The next node for w, or NULL (see the top for the order). */
static mz_op *take(struct worker *w) {
  mz_op *op = w->next;
  if (op) {
    w->next = NULL;
    return op;
  }
  if (w->nlocal) return w->local[--w->nlocal];
  op = mz__mpsc_pop(&w->inbox);
  if (op) return op;
  /* Into the (empty) local list, the newest last: it runs now, then the
   * one before it, ... as single takes would. */
  unsigned n = mz__deque_take_some(&w->dq, w->local, LOCAL_TAKE);
  if (n) {
    w->nlocal = n - 1;
    return w->local[n - 1];
  }
  struct cpu_dev *cd = w->cd;
  if (atomic_load_explicit(&cd->inj_count, memory_order_relaxed)) {
    op = take_injected(w);
    if (op) return op;
  }
  for (unsigned i = 1; i < cd->nworkers; i++) {
    struct worker *v = atomic_load_explicit(&cd->workers[(w->q->local + i) % cd->nworkers], memory_order_acquire);
    if (v && (op = mz__deque_steal(&v->dq)) != NULL) return op;
  }
  return NULL;
}

/* Put back the idle ops that w's last spin kept in use (see spin_take):
 * before w runs a node that no spin found, parks, or is handed back. */
static void idle_drop(struct worker *w) {
  if (!w->io_kept) return;
  w->io_kept = NULL;
  mz__idle_put(w->q->dev->rt);
}

/* Spin a bounded time (the clock is read every 16 pauses; outside work
 * is tested every 4, the first at once: a message's latency) for w's next
 * node; NULL when none came.  now: the time at the start when the caller
 * read it (its flush ended a burst), else 0.  Outside work (MPI requests)
 * is tested meanwhile: a node it releases comes to w's run-next slot, and
 * the nodes it ended are counted in w's queue and published before w may
 * park.  A waiter that borrowed w (done non-NULL) also stops once
 * done(arg), which *fin then says. */
static mz_op *spin_take(struct worker *w, bool (*done)(void *), void *arg, bool *fin, uint64_t now) {
  mz_runtime *rt = w->q->dev->rt;
  mz_op *op = NULL;
  /* A clock read is tens of nanoseconds in a virtual machine (kvm-clock:
   * about 38 ns, against a 340 ns step of a fine distributed stencil):
   * one per test of the outside work lengthened the gap between tests,
   * and so a message's wait for its reader, for a bound (spin_ns, tens of
   * microseconds) that three tests more or less do not move. */
  uint64_t until = now ? now + w->spin_ns : 0;
  void *ictx = NULL;
  /* The ops the last spin kept in use (it found a node, which ran, and
   * nothing else came since), while they are still the runtime's: one
   * load instead of two atomic updates a step of a fine distributed run
   * (mz__idle_get, mz__idle_put).  Kept for one node's run at most (and
   * its successors run in place): the removal of the ops
   * (mz__idle_set) waits for that. */
  const struct mz__idle_ops *io = w->io_kept;
  if (io && atomic_load_explicit(&rt->idle_ops, memory_order_relaxed) == io) {
    ictx = w->ictx_kept;
    w->io_kept = NULL;
  } else {
    idle_drop(w);
    io = mz__idle_get(rt, &ictx);
  }
  if (io) io->idle(ictx, MZ__IDLE_SPIN);
  for (unsigned i = 1; !op && !(done && (*fin = done(arg))); i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    op = take(w);
    if (!op && atomic_load_explicit(&w->cd->park_now, memory_order_relaxed)) break; /* see cpu_hold */
    /* Outside work is tested at once (its message may be in already: a
     * worker behind its peer), then every 4th pause. */
    if (op || (io ? (i - 1) % 4 : i % 16)) continue;
    mz_op *next = NULL;
    if (io && io->poll(ictx, &next)) {
      /* A node the poll made ready here (mz__task_ungate_take) runs first. */
      if ((op = next) != NULL || (op = take(w)) != NULL) break;
      mz__queue_flush(w->q);
    }
    if (io && until && (i - 1) % 16) continue;
    now = mz__now_ns();
    if (!until) until = now + w->spin_ns;
    else if (now >= until && !(io && io->hold && io->hold(ictx, now))) break;
  }
  if (io) {
    io->idle(ictx, op ? MZ__IDLE_WORK : MZ__IDLE_PARK);
    if (op) {
      w->io_kept = io;
      w->ictx_kept = ictx;
    } else {
      mz__idle_put(rt);
    }
  }
  return op;
}

/* A node of a lean run (struct mz__run.lean: host memory only, no faults,
 * memory limits, observers or timing) taken from the pool, on its common
 * path: no failed predecessor, not a perf-model sample, a synchronous
 * function of at most 16 parameters, or the start of an async kernel
 * that mostly ends in it (struct mz__async_ops.ends_inline: MPI's wrapped
 * tasks).  What run_task, prepare_kept and plan_exec test for the general
 * case is known here: with host memory only, a node's call is built from
 * its task's values and buffers, and a CPU kernel needs no build, so
 * planning would only note the device.
 *
 * The successor it makes ready runs next, here, as take() would give it
 * from the run-next slot: of the same run, shared and lean (the lean end
 * returns only such nodes), so what run_taken tests per node holds for it
 * (same run, its time already started, not counted).  With none, so does
 * the next node taken from the deque at once (w->local), when it is of the
 * same run.  The loop ends where neither is, or at a node not for this
 * path.  Returns the node run_task is to take (nothing was done to it but
 * asking the perf models, *sampled), or NULL. */
static mz_op *run_lean(struct worker *w, mz_op *op, struct mz__task *t, int *sampled) {
  const struct mz_device *dev = w->q->dev;
  for (;;) {
    const mz_kernel *kern = mz__task_kernel(t);
    struct mz__exec *e = &t->exec;
    mz_cpu_fn fn = NULL;
    void *user = NULL;
    if (kern) {
      if (__builtin_expect(kern->async != NULL, 0) && !kern->async->ends_inline) return op;
      fn = kern->spec.cpu.fn;
      user = kern->spec.cpu.user;
    } else {
      const struct mz__host_call *h = mz__task_host(t);
      if (h) {
        fn = h->fn;
        user = h->user;
      }
    }
    if (__builtin_expect(t->nparams > 16 || atomic_load_explicit(&dev->dead, memory_order_relaxed) ||
                             atomic_load_explicit(&t->pred_failed, memory_order_acquire),
                         0))
      return op;
    if (__builtin_expect((*sampled = pm_wants(w, op)), 0)) return op;
    struct mz__xdev *xd = mz__exec_xd(e);
    if (__builtin_expect(xd != NULL, 0)) xd->t_start = xd->t_end = 0; /* no copies to reset: one memory */
    e->status = 0;
    t->planned = true;
    t->exec.args_dev1 = w->dev1; /* what plan_exec would note (src/exec.c) */
    mz_op *rd[8];
    unsigned n;
    if (fn) {
      mz_arg args[16];
      mz_shape shapes[16];
      mz_call call = {.kernel = kern, .nargs = t->nparams, .args = args, .shapes = shapes, .user = user,
                      .queue = w->q->index};
      if (kern && !kern->bufmask) {
        /* Scalars only: the node's values are the arguments as they are,
         * and every shape is the zero one (at most 16: see above). */
        call.args = mz__task_values(t);
        call.shapes = no_shapes;
      } else if (kern) {
        fill_apply_args(kern, t, args, shapes); /* at most 16 parameters: see above */
      } else {
        fill_args_any(t, args, shapes);
      }
      const struct mz__async_ops *async = kern ? kern->async : NULL;
      if (__builtin_expect(async != NULL, 0)) {
        /* As run_task: counted first, since another thread may end it
         * (mz__task_finish) before start returns.  A lean end of its own
         * (counted): a function's keeps its constant arguments, a few
         * instructions a node. */
        atomic_fetch_add_explicit(&w->q->backlog, 1, memory_order_relaxed);
        int ret = async->start(op, &call);
        if (ret == 0) return NULL; /* started: another thread ends the node */
        if (__builtin_expect(ret != MZ__ASYNC_ENDED, 0)) {
          mz__exec_set_message(e, failed_message(kern, ret));
          finish_counted(w, op, MZ_EKERNEL, true);
          return NULL;
        }
        n = mz__task_finish_lean(w->q, op, true, rd, 8);
        goto ended;
      }
      int ret = fn(&call);
      if (__builtin_expect(ret != 0, 0)) {
        mz__exec_set_message(e, failed_message(kern, ret));
        finish_counted(w, op, MZ_EKERNEL, false);
        return NULL;
      }
    }
    n = mz__task_finish_lean(w->q, op, false, rd, 8);
  ended:;
    const struct mz__acct *acct = &w->q->acct;
    if (w->next) {
      if (n) push_ready(w, rd, n);
      return NULL;
    }
    if (n) {
      /* The first runs next, here; the rest where others may steal them. */
      if (n > 1) push_ready(w, rd + 1, n - 1);
      op = rd[0];
      t = mz__task_of(op);
    } else {
      /* None made ready: the next of the nodes taken from the deque at
       * once, when it is of this run (take() would give it next). */
      if (!w->nlocal) return NULL;
      op = w->local[w->nlocal - 1];
      t = mz__task_of(op);
      if (t->run != acct->run) return NULL;
      w->nlocal--;
    }
    /* As run_taken does for a node from the pool. */
    if (__builtin_expect(t->exec.queue >= 0, 0)) {
      w->next = op;
      return NULL;
    }
    __atomic_store_n(&t->exec.queue, (int)w->q->index, __ATOMIC_RELAXED);
    e = &t->exec;
  }
}

/* Run a node that take() gave w's loop (its thread's or a borrower's). */
static void run_taken(struct worker *w, mz_op *op) {
  /* Another run's node may take long: publish the previous run's
   * completions first, so that run is not held open behind it. */
  if (w->q->acct.run && w->q->acct.run != mz__task_of(op)->run) mz__queue_flush(w->q);
  struct mz__task *t = mz__task_of(op);
  /* A burst of nodes of a run that is not timed: its length is the
   * queue's busy time (published by mz__queue_flush). */
  if (!w->q->acct.t0 && !t->run->timed) w->q->acct.t0 = mz__acct_now(&w->q->acct);
  bool counted = true;
  if (t->shared && t->exec.queue < 0) { /* from the pool: it runs on this queue */
    __atomic_store_n(&t->exec.queue, (int)w->q->index, __ATOMIC_RELAXED);
    /* A lean run's node is not counted (finish_counted). */
    counted = !t->run->lean || w->watch;
    if (counted) atomic_fetch_add_explicit(&w->q->backlog, 1, memory_order_relaxed);
  }
  int sampled = -1;
  /* A lean run has host memory only and no faults: a plan of a node for
   * this device (a first run, or one after a run on another device) would
   * only note it (args_dev1, set by run_lean), so its first run is lean too. */
  if (!counted) {
    if (!(op = run_lean(w, op, t, &sampled))) return;
    t = mz__task_of(op);
  }
  run_task(w, &t->exec, counted, sampled);
  /* The watchdog reads progress from the runs' counters: publish
   * them per node while it watches. */
  if (w->watch) mz__queue_flush(w->q);
}

/* After a park: take the worker's loop back, sleeping on while a waiter
 * has it (see the top). */
static void reclaim(struct worker *w) {
  for (;;) {
    int exp = LEND_PARKED;
    if (atomic_compare_exchange_strong_explicit(&w->lend, &exp, LEND_OWN, memory_order_acq_rel,
                                                memory_order_acquire))
      return;
    if (exp == LEND_BORROWED &&
        !atomic_compare_exchange_strong_explicit(&w->lend, &exp, LEND_MISSED, memory_order_acq_rel,
                                                 memory_order_acquire))
      continue; /* handed back meanwhile */
    mz__parker_park(&w->park); /* the one who hands it back wakes it */
  }
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  struct cpu_dev *cd = w->cd;
  mz__in_runtime_thread = 1;
  mz__cur_queue = (int)w->q->index;
  mz__cur_rt = w->q->dev->rt;
  w->watch = w->q->dev->rt->watchdog != NULL; /* started before the queues, never restarted */
  w->dev1 = w->q->dev->info.index + 1;
  if (w->set) hwloc_set_cpubind(w->topo, w->set, HWLOC_CPUBIND_THREAD);
  for (;;) {
    mz_op *op = take(w);
    /* Out of work: publish the completions counted so far (exec.c), then
     * spin a bounded time and park: a successor usually arrives within a
     * task's length. */
    if (!op) {
      uint64_t now = 0;
      mz__queue_flush_at(w->q, &now);
      op = spin_take(w, NULL, NULL, NULL, now);
    } else {
      idle_drop(w);
    }
    if (!op && !atomic_load(&w->stop)) {
      /* Say so, look once more, then sleep until a node is shared or
       * submitted (see wake_idle). */
      atomic_store(&w->idle, true);
      atomic_fetch_add(&cd->nidle, 1); /* seq_cst: ordered before the look below */
      op = take(w);
      if (!op && !atomic_load(&w->stop)) {
        atomic_store_explicit(&w->lend, LEND_PARKED, memory_order_release); /* a waiter may borrow it now */
        mz__parker_park(&w->park);
        reclaim(w);
      }
      atomic_store(&w->idle, false);
      atomic_fetch_sub(&cd->nidle, 1);
      if (!op) continue;
    }
    if (op) {
      run_taken(w, op);
      continue;
    }
    break; /* stopped */
  }
  idle_drop(w);
  mz__queue_flush(w->q);
  return NULL;
}

/* A waiter about to run nodes as w: bind it to w's core, since w's
 * thread sleeps and the other workers keep theirs (unbound, it could run
 * beside one of them while w's core idles: METG stencil_1d on 2 cores
 * was 1.5x worse in the median of paired runs, against 1.08 bound).  Once
 * per borrow that runs a node, not per node: three system calls (read,
 * bind, restore; the read only where the thread is bound there already),
 * about 43 borrows in a whole METG sweep.  Returns the binding to restore
 * after, or NULL (w is not bound, this thread is bound to w's core
 * already, or its binding cannot be read or changed). */
static hwloc_cpuset_t pin_help(struct worker *w) {
  if (!w->set) return NULL;
  hwloc_cpuset_t own = hwloc_bitmap_alloc();
  /* Already there (a process mpirun bound to one core): no bind, no
   * restore, two system calls a borrow less. */
  if (own && !hwloc_get_cpubind(w->topo, own, HWLOC_CPUBIND_THREAD) && !hwloc_bitmap_iszero(own) &&
      !hwloc_bitmap_isequal(own, w->set) && !hwloc_set_cpubind(w->topo, w->set, HWLOC_CPUBIND_THREAD))
    return own;
  hwloc_bitmap_free(own);
  return NULL;
}

/* Run w's loop on this thread (borrowed: lend is LEND_BORROWED) until
 * done(arg), or, unless held, until no work comes for a while; then give
 * it back.  held: taken by cpu_hold, which took w out of the idle set
 * (shared nodes woke nobody meanwhile): it goes back there, and its
 * thread is woken when work is left (the injection list included). */
static bool lend_run(struct cpu_dev *cd, struct worker *w, bool held, bool (*done)(void *), void *arg) {
  mz_runtime *rt = w->q->dev->rt;
  int saved_in = mz__in_runtime_thread, saved_q = mz__cur_queue;
  const mz_runtime *saved_rt = mz__cur_rt;
  mz__in_runtime_thread = 1;
  mz__cur_queue = (int)w->q->index;
  mz__cur_rt = rt;
  bool fin = held && done(arg), ran = false;
  hwloc_cpuset_t own = NULL; /* this thread's binding, while it runs on w's core */
  while (!fin) {
    mz_op *op = take(w);
    if (op) idle_drop(w);
    if (!op) {
      /* Publish what ran here: the run may end with it.  Then, while CPU
       * work goes on (this thread ran some, or a worker is awake, or the
       * thread holds the worker for its run), spin as a worker does for
       * the next node or the end of the run; with none (a run on other
       * devices) go back to sleeping at once: a spinning waiter would
       * take a core from the threads that feed them. */
      uint64_t now = 0;
      mz__queue_flush_at(w->q, &now);
      if ((fin = done(arg)) ||
          (!ran && !held && atomic_load_explicit(&cd->nidle, memory_order_relaxed) >= cd->nworkers))
        break;
      op = spin_take(w, done, arg, &fin, now);
      if (!op) break;
    }
    if (!ran) own = pin_help(w);
    run_taken(w, op);
    ran = true;
  }
  idle_drop(w); /* this thread's use: the worker's own thread owns w after the hand-back */
  mz__queue_flush(w->q);
  if (own) {
    hwloc_set_cpubind(w->topo, own, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(own);
  }
  mz__in_runtime_thread = saved_in;
  mz__cur_queue = saved_q;
  mz__cur_rt = saved_rt;
  if (held) {
    /* Back among the idle, then look for work shared meanwhile: a sharer
     * that came before this store woke nobody, one after it finds w idle
     * (the fence pairs with wake_idle's). */
    atomic_store(&w->idle, true);
#ifdef MZ__TSAN
    atomic_fetch_add_explicit(&cd->nidle, 0, memory_order_seq_cst);
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
  }
  /* Read before the hand-back: after it, the worker's thread owns these. */
  bool pending = w->next != NULL || w->nlocal ||
                 atomic_load_explicit(&w->dq.bottom, memory_order_relaxed) >
                     atomic_load_explicit(&w->dq.top, memory_order_relaxed) ||
                 (held && atomic_load_explicit(&cd->inj_count, memory_order_relaxed));
  int old = atomic_exchange_explicit(&w->lend, LEND_PARKED, memory_order_acq_rel);
  if (old == LEND_MISSED || pending || !atomic_load(&w->idle)) mz__parker_wake(&w->park);
  return fin || done(arg);
}

/* See the top of the file and struct mz__device_ops.help. */
static bool cpu_help(struct mz_device *dev, bool (*done)(void *), void *arg) {
  struct cpu_dev *cd = dev->priv;
  struct worker *w = NULL;
  for (unsigned i = 0; i < cd->nworkers && !w; i++) {
    struct worker *v = atomic_load_explicit(&cd->workers[i], memory_order_acquire);
    int exp = LEND_PARKED;
    if (v && atomic_compare_exchange_strong_explicit(&v->lend, &exp, LEND_BORROWED, memory_order_acq_rel,
                                                     memory_order_relaxed))
      w = v;
  }
  if (!w) return done(arg);
  return lend_run(cd, w, false, done, arg);
}

/* See struct mz__device_ops.hold: a parked worker borrowed, and taken out
 * of the idle set so that no shared node wakes its thread (which would
 * only find it borrowed and sleep again): its nodes wait for the holder.
 * A worker whose wake-up is under way (idle already cleared) is left. */
static int hold_parked(struct cpu_dev *cd) {
  for (unsigned i = 0; i < cd->nworkers; i++) {
    struct worker *v = atomic_load_explicit(&cd->workers[i], memory_order_acquire);
    int exp = LEND_PARKED;
    if (!v || !atomic_compare_exchange_strong_explicit(&v->lend, &exp, LEND_BORROWED, memory_order_acq_rel,
                                                       memory_order_relaxed))
      continue;
    if (atomic_exchange(&v->idle, false)) return (int)i + 1;
    /* Being woken: hand it back (its thread finds it parked, or missed). */
    if (atomic_exchange_explicit(&v->lend, LEND_PARKED, memory_order_acq_rel) == LEND_MISSED) mz__parker_wake(&v->park);
  }
  return 0;
}

/* With none parked, the workers spinning idle are asked to park now, and
 * the caller yields its core to them for up to their spin time: runs
 * started back to back (a run that ended within the spin time) would
 * otherwise find the worker spinning every time, and never be held. */
static int cpu_hold(struct mz_device *dev) {
  struct cpu_dev *cd = dev->priv;
  int t = hold_parked(cd);
  if (t) return t;
  atomic_fetch_add(&cd->park_now, 1);
  uint64_t until = mz__now_ns() + (uint64_t)dev->rt->spin * 1000u;
  while (!(t = hold_parked(cd)) && mz__now_ns() < until) sched_yield();
  atomic_fetch_sub(&cd->park_now, 1);
  return t;
}

/* See struct mz__device_ops.help_held. */
static bool cpu_help_held(struct mz_device *dev, int token, bool (*done)(void *), void *arg) {
  struct cpu_dev *cd = dev->priv;
  struct worker *w = atomic_load_explicit(&cd->workers[token - 1], memory_order_acquire);
  return lend_run(cd, w, true, done, arg);
}

/* See the top of the file and struct mz__device_ops.share. */
static void cpu_share(struct mz_device *dev, struct mz_op *head, struct mz_op *tail, size_t n) {
  struct cpu_dev *cd = dev->priv;
  mz_runtime *rt = dev->rt;
  struct worker *w = NULL;
  if (mz__cur_rt == rt && mz__cur_queue >= 0 && rt->queues[mz__cur_queue]->dev == dev)
    w = rt->queues[mz__cur_queue]->priv;
  if (w) {
    size_t i = 0;
    /* Read each link before the node is visible to others. */
    mz_op *nx = atomic_load_explicit(mz__op_next(head), memory_order_relaxed);
    if (!w->next) {
      w->next = head;
      head = nx;
      i++;
    }
    int64_t held = atomic_load_explicit(&w->dq.bottom, memory_order_relaxed) -
                   atomic_load_explicit(&w->dq.top, memory_order_relaxed);
    size_t pushed = 0;
    for (; i < n && held < LOCAL_MAX; i++, held++, pushed++) {
      nx = atomic_load_explicit(mz__op_next(head), memory_order_relaxed);
      if (!mz__deque_push(&w->dq, head)) break;
      head = nx;
    }
    if (pushed) wake_idle(cd, pushed);
    if (i == n) return;
    n -= i;
  }
  size_t added = n;
  pthread_mutex_lock(&cd->inj_lock);
  if (cd->inj_tail) atomic_store_explicit(mz__op_next(cd->inj_tail), head, memory_order_relaxed);
  else cd->inj_head = head;
  cd->inj_tail = tail;
  cd->inj_n += added;
  atomic_store_explicit(&cd->inj_count, cd->inj_n, memory_order_relaxed);
  pthread_mutex_unlock(&cd->inj_lock);
  wake_idle(cd, added);
}

/* See struct mz__device_ops.share_array.  From any thread but dev's
 * workers, into the ring while it has room.  Else the nodes (QUEUED and
 * in no other list: their links are free) are linked and shared as a
 * list: a worker keeps them in its slot and deque anyway, and a full ring
 * sends them to the list. */
static void cpu_share_array(struct mz_device *dev, struct mz_op *const *v, size_t n) {
  struct cpu_dev *cd = dev->priv;
  mz_runtime *rt = dev->rt;
  if (!n) return;
  bool worker = mz__cur_rt == rt && mz__cur_queue >= 0 && rt->queues[mz__cur_queue]->dev == dev;
  if (!worker) {
    pthread_mutex_lock(&cd->inj_lock);
    bool room = cd->nsegs < INJ_SEGS;
    if (room) {
      cd->segs[(cd->seg_head + cd->nsegs) % INJ_SEGS] = (struct inj_seg){.v = v, .n = n};
      cd->nsegs++;
      cd->inj_n += n;
      atomic_store_explicit(&cd->inj_count, cd->inj_n, memory_order_relaxed);
    }
    pthread_mutex_unlock(&cd->inj_lock);
    if (room) {
      wake_idle(cd, n);
      return;
    }
  }
  for (size_t i = 0; i + 1 < n; i++) atomic_store_explicit(mz__op_next(v[i]), v[i + 1], memory_order_relaxed);
  atomic_store_explicit(mz__op_next(v[n - 1]), NULL, memory_order_relaxed);
  cpu_share(dev, v[0], v[n - 1], n);
}

static int cpu_submit(struct mz__queue *q, struct mz__batch *b) {
  struct worker *w = q->priv;
  /* Read the batch before each push: once pushed, a node may run, be taken
   * back from a dead device and be submitted again, reusing its batch. */
  unsigned n = b->n;
  for (unsigned i = 0; i < n; i++) {
    mz_op *node = mz__exec_node(b->execs[i]);
    mz__mpsc_push(&w->inbox, node);
  }
  mz__parker_wake(&w->park);
  return MZ_OK;
}

static int cpu_queue_init(struct mz__queue *q) {
  struct cpu_dev *cd = q->dev->priv;
  struct worker *w = calloc(1, sizeof *w);
  if (!w) return MZ_ENOMEM;
  w->q = q;
  w->topo = cd->topo;
  w->set = cd->sets && !cd->nobind ? cd->sets[q->local] : NULL;
  w->spin_ns = (uint64_t)q->dev->rt->spin * 1000u;
  w->cd = cd;
  if (!mz__deque_init(&w->dq, 256)) {
    free(w);
    return MZ_ENOMEM;
  }
  mz__mpsc_init(&w->inbox, &w->stub.op);
  mz__parker_init(&w->park);
  q->priv = w;
  if (pthread_create(&w->thread, NULL, worker_main, w)) {
    mz__parker_fini(&w->park);
    mz__deque_fini(&w->dq);
    free(w);
    q->priv = NULL;
    return MZ_ENOMEM;
  }
  mz__thread_name(w->thread, "cpu%u", q->local);
  atomic_store_explicit(&cd->workers[q->local], w, memory_order_release);
  return MZ_OK;
}

/* Stop and join every worker of the device before any is freed: a worker
 * that hands a task to another worker (cpu_submit) still wakes that one's
 * parker after the task may have run and ended the last run, so the
 * runtime can be in mz_runtime_destroy() while it does. */
static void cpu_stop_all(struct mz_device *dev) {
  for (unsigned i = 0; i < dev->nqueues; i++) {
    struct worker *w = dev->queues[i].priv;
    if (w && !w->joined) {
      atomic_store(&w->stop, true);
      mz__parker_wake(&w->park);
    }
  }
  for (unsigned i = 0; i < dev->nqueues; i++) {
    struct worker *w = dev->queues[i].priv;
    if (w && !w->joined) {
      pthread_join(w->thread, NULL);
      w->joined = true;
    }
  }
}

static void cpu_queue_fini(struct mz__queue *q) {
  struct worker *w = q->priv;
  if (!w) return;
  cpu_stop_all(q->dev);
  struct cpu_dev *cd = q->dev->priv;
  atomic_store_explicit(&cd->workers[q->local], NULL, memory_order_relaxed);
  mz__parker_fini(&w->park);
  mz__deque_fini(&w->dq);
  free(w);
  q->priv = NULL;
}

static void cpu_destroy(struct mz_device *dev) {
  struct cpu_dev *cd = dev->priv;
  if (!cd) return;
  for (unsigned i = 0; cd->sets && i < cd->nworkers; i++) hwloc_bitmap_free(cd->sets[i]);
  free(cd->sets);
  free(cd->dist);
  free(cd->workers);
  pthread_mutex_destroy(&cd->inj_lock);
  hwloc_topology_destroy(cd->topo);
  free(cd);
  dev->priv = NULL;
}

static int cpu_mem_read(struct mz_device *dev, void *mem, void *host, size_t bytes) {
  (void)dev;
  if (mem != host) memcpy(host, mem, bytes);
  return MZ_OK;
}

static int cpu_mem_write(struct mz_device *dev, void *mem, const void *host, size_t bytes) {
  (void)dev;
  if (mem != host) memcpy(mem, host, bytes);
  return MZ_OK;
}

/* How far apart two workers are: 0 for the same queue, 1 for two workers
 * on one core, else 1 + the number of topology levels from a worker's core
 * up to the smallest object holding both cores (2 when they share an L2,
 * more across an L3, a package or a NUMA group).  Work stealing (policy
 * ws) steals from the nearest first.  Computed once at discovery. */
static unsigned cpu_queue_distance(const struct mz__queue *a, const struct mz__queue *b) {
  const struct cpu_dev *cd = a->dev->priv;
  if (a == b) return 0;
  if (!cd->dist || a->local >= cd->nworkers || b->local >= cd->nworkers) return 1;
  return cd->dist[a->local * cd->nworkers + b->local];
}

static void cpu_distances(struct cpu_dev *cd) {
  unsigned n = cd->nworkers;
  if (!cd->sets || n > 1024) return;
  cd->dist = malloc((size_t)n * n);
  if (!cd->dist) return;
  for (unsigned i = 0; i < n; i++)
    for (unsigned j = 0; j < n; j++) {
      unsigned d = i == j ? 0 : 1;
      if (i != j && cd->sets[i] && cd->sets[j] && !hwloc_bitmap_isequal(cd->sets[i], cd->sets[j])) {
        hwloc_obj_t x = hwloc_get_obj_covering_cpuset(cd->topo, cd->sets[i]);
        hwloc_obj_t y = hwloc_get_obj_covering_cpuset(cd->topo, cd->sets[j]);
        /* From the cores (a core's set covers its PU alone without SMT). */
        while (x && x->type == HWLOC_OBJ_PU && x->parent) x = x->parent;
        while (y && y->type == HWLOC_OBJ_PU && y->parent) y = y->parent;
        hwloc_obj_t c = x && y ? hwloc_get_common_ancestor_obj(cd->topo, x, y) : NULL;
        d = c ? 1 + (unsigned)(x->depth - c->depth) : 8;
        if (d > 255) d = 255;
      }
      cd->dist[(size_t)i * n + j] = (uint8_t)d;
    }
}

static const struct mz__device_ops cpu_ops = {
    .inline_submit = true,
    .host_memory = true,
    .destroy = cpu_destroy,
    .can_run = cpu_can_run,
    .mem_read = cpu_mem_read,
    .mem_write = cpu_mem_write,
    .submit = cpu_submit,
    .share = cpu_share,
    .share_array = cpu_share_array,
    .help = cpu_help,
    .hold = cpu_hold,
    .help_held = cpu_help_held,
    .queue_init = cpu_queue_init,
    .queue_fini = cpu_queue_fini,
    .queue_distance = cpu_queue_distance,
};

/* This process's share of ncores among the ranks of an MPI job on this
 * machine, from the launcher's environment (Open MPI's, else MPICH's):
 * the first core and how many; unchanged outside a launcher or alone. */
static void local_share(unsigned ncores, unsigned *first, unsigned *span) {
  static const char *const vars[][2] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                        {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}};
  for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
    const char *rs = getenv(vars[v][0]), *ns = getenv(vars[v][1]);
    if (!rs || !ns) continue;
    char *e1, *e2;
    long r = strtol(rs, &e1, 10), n = strtol(ns, &e2, 10);
    if (*e1 || *e2 || n < 2 || r < 0 || r >= n || n > 1 << 20) return;
    *first = (unsigned)((unsigned long)r * ncores / (unsigned long)n);
    *span = ncores / (unsigned)n ? ncores / (unsigned)n : 1;
    return;
  }
}

/* sel->arg is the number of workers ("cpu:2"); the default is one per
 * core the process may run on (its share of them: see local_share).  A
 * runtime whose MZ_DEVICES names no CPU still gets one host-only worker
 * for host nodes (sel->arg "host"). */
static int cpu_discover(mz_runtime *rt, const struct mz__devtype *type, const struct mz__devsel *sel) {
  struct cpu_dev *cd = calloc(1, sizeof *cd);
  if (!cd) return MZ_ENOMEM;
  /* MZ_BIND=core (the default) pins each worker to a core; none leaves the
   * workers to the OS scheduler (a busy, shared machine). */
  const char *bind = getenv("MZ_BIND");
  if (bind && *bind && strcmp(bind, "core") && strcmp(bind, "none")) {
    free(cd);
    return mz__set_error(rt, MZ_EINVAL, "MZ_BIND must be 'none' or 'core', not '%s'", bind);
  }
  cd->nobind = bind && !strcmp(bind, "none");
  /* DONT_CHANGE_BINDING: without it hwloc moves the calling thread across
   * the cores while it reads them, which stalled runtime creation for
   * seconds on a busy machine.  What hwloc finds is the same, so device
   * names (and the perf-model files named after them) do not change. */
  if (hwloc_topology_init(&cd->topo) ||
      hwloc_topology_set_flags(cd->topo, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING) ||
      hwloc_topology_load(cd->topo)) {
    if (cd->topo) hwloc_topology_destroy(cd->topo);
    free(cd);
    return mz__set_error(rt, MZ_EDEVICE, "cpu: hwloc could not read the topology");
  }
  bool host_only = sel->arg && !strcmp(sel->arg, "host");
  hwloc_cpuset_t allowed = hwloc_bitmap_alloc();
  hwloc_get_cpubind(cd->topo, allowed, HWLOC_CPUBIND_PROCESS);
  if (hwloc_bitmap_iszero(allowed)) hwloc_bitmap_copy(allowed, hwloc_topology_get_allowed_cpuset(cd->topo));
  int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(cd->topo, allowed, HWLOC_OBJ_CORE);
  int npus = hwloc_get_nbobjs_inside_cpuset_by_type(cd->topo, allowed, HWLOC_OBJ_PU);
  if (ncores <= 0) ncores = npus > 0 ? npus : 1;
  /* Ranks of an MPI job on one machine that the launcher left unbound (as
   * mpirun does when oversubscribed) would each pin worker i to core i:
   * every rank's workers on the same cores.  Local rank r of n takes its
   * own share instead, from core r * ncores / n, and by default one
   * worker per core of its share. */
  unsigned first = 0, span = (unsigned)ncores;
  if (!cd->nobind && hwloc_bitmap_isequal(allowed, hwloc_topology_get_allowed_cpuset(cd->topo)))
    local_share((unsigned)ncores, &first, &span);
  unsigned n = span;
  if (host_only) {
    n = 1;
  } else if (sel->arg) {
    char *end;
    long v = strtol(sel->arg, &end, 10);
    if (*end || v < 1 || v > 1024 || !(*sel->arg >= '0' && *sel->arg <= '9')) { /* no sign or space */
      hwloc_bitmap_free(allowed);
      hwloc_topology_destroy(cd->topo);
      free(cd);
      return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'cpu:%s' must give a worker count from 1 to 1024", sel->arg);
    }
    n = (unsigned)v;
  }
  cd->nworkers = n;
  cd->workers = calloc(n, sizeof *cd->workers);
  if (!cd->workers) {
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(cd->topo);
    free(cd);
    return MZ_ENOMEM;
  }
  pthread_mutex_init(&cd->inj_lock, NULL);
  cd->sets = calloc(n, sizeof *cd->sets);
  /* Pin worker i to core i (round robin when there are more workers than
   * cores); binding to a core, not a PU, leaves its hyperthreads free. */
  for (unsigned i = 0; cd->sets && i < n; i++) {
    unsigned c = first + i % span;
    hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(cd->topo, allowed, HWLOC_OBJ_CORE, c % (unsigned)ncores);
    if (!core) core = hwloc_get_obj_inside_cpuset_by_type(cd->topo, allowed, HWLOC_OBJ_PU, c % (unsigned)(npus > 0 ? npus : 1));
    cd->sets[i] = core ? hwloc_bitmap_dup(core->cpuset) : NULL;
    if (cd->sets[i]) hwloc_bitmap_and(cd->sets[i], cd->sets[i], allowed);
  }
  hwloc_bitmap_free(allowed);
  cpu_distances(cd);
  struct mz_device *dev = mz__device_add(rt, type, n, cd);
  if (!dev) {
    cpu_destroy(&(struct mz_device){.priv = cd});
    return MZ_ENOMEM;
  }
  dev->kernels = !host_only;
  hwloc_obj_t root = hwloc_get_root_obj(cd->topo);
  const char *model = hwloc_obj_get_info_by_name(root, "CPUModel");
  hwloc_obj_t pkg = hwloc_get_obj_by_type(cd->topo, HWLOC_OBJ_PACKAGE, 0);
  if (!model && pkg) model = hwloc_obj_get_info_by_name(pkg, "CPUModel");
  const char *vendor = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUVendor") : NULL;
  snprintf(dev->name_buf, sizeof dev->name_buf, "%s", model ? model : "cpu");
  /* Some CPUs pad their model string with blanks (the CPUID brand string
   * is fixed-length); they would show in tables, traces and perf-model
   * file names. */
  for (size_t len = strlen(dev->name_buf); len && isspace((unsigned char)dev->name_buf[len - 1]);) dev->name_buf[--len] = 0;
  snprintf(dev->vendor_buf, sizeof dev->vendor_buf, "%s", vendor ? vendor : "");
  snprintf(dev->version_buf, sizeof dev->version_buf, "hwloc %s", HWLOC_VERSION);
  dev->info.name = dev->name_buf;
  dev->info.vendor = dev->vendor_buf;
  dev->info.version = dev->version_buf;
  dev->info.memory = root->total_memory;
  dev->info.compute_units = (unsigned)ncores;
  int nnuma = hwloc_get_nbobjs_by_type(cd->topo, HWLOC_OBJ_NUMANODE);
  dev->info.numa_node = nnuma >= 1 ? 0 : -1;
  dev->info.unified_memory = true;
  dev->info.max_alloc = dev->info.memory;
  dev->info.fp64 = true;
  return 1;
}

const struct mz__devtype mz__devtype_cpu = {
    .name = "cpu",
    .kind = MZ_DEVICE_CPU,
    .ops = &cpu_ops,
    .discover = cpu_discover,
};
