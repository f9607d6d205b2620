/* The end of a run (see run.h): clearing its hazard records, resolving
 * its future, releasing device resources on the reaper thread, and
 * freeing it with its last reference. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "handle.h"
#include "hazard.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_runtime.h"
#include "observe.h"
#include "run.h"

/* Device resources of finished runs are freed off the completion path: a
 * CUDA host function may not call CUDA, so release_exec runs here. */
struct mz__reaper {
  pthread_mutex_t m;
  pthread_cond_t c;
  struct mz__run **v;
  size_t n, cap;
  bool stop;
  pthread_t thread;
};

static void release_execs(struct mz__run *r) {
  mz_runtime *rt = r->rt;
  for (size_t i = 0; i < r->ntasks; i++) {
    struct mz__task *t = mz__task_of(r->tasks[i]);
    if (t->exec.queue < 0) continue;
    struct mz_device *dev = rt->queues[t->exec.queue]->dev;
    if (dev->ops->release_exec) dev->ops->release_exec(&t->exec);
    mz__task_set_message(t, NULL);
  }
}

/* The executor is done with r's tasks: a re-run of its graph may reset
 * them (mz_graph_run waits for this). */
static void run_released(struct mz__run *r) {
  mz_runtime *rt = r->rt;
  pthread_mutex_lock(&rt->lock);
  if (--r->g->active == 0) pthread_cond_broadcast(&rt->idle);
  pthread_mutex_unlock(&rt->lock);
}

static void *reaper_main(void *arg) {
  mz_runtime *rt = arg;
  struct mz__reaper *rp = rt->reaper;
  mz__in_runtime_thread = 1;
  pthread_mutex_lock(&rp->m);
  for (;;) {
    while (!rp->n && !rp->stop) pthread_cond_wait(&rp->c, &rp->m);
    if (!rp->n && rp->stop) break;
    struct mz__run *r = rp->v[--rp->n];
    pthread_mutex_unlock(&rp->m);
    release_execs(r);
    run_released(r);
    mz__run_unref(r);
    pthread_mutex_lock(&rp->m);
  }
  pthread_mutex_unlock(&rp->m);
  return NULL;
}

int mz__reaper_start(mz_runtime *rt) {
  struct mz__reaper *rp = calloc(1, sizeof *rp);
  if (!rp) return MZ_ENOMEM;
  pthread_mutex_init(&rp->m, NULL);
  pthread_cond_init(&rp->c, NULL);
  rt->reaper = rp;
  if (pthread_create(&rp->thread, NULL, reaper_main, rt)) {
    rt->reaper = NULL;
    free(rp);
    return MZ_ENOMEM;
  }
  mz__thread_name(rp->thread, "reaper");
  return MZ_OK;
}

void mz__reaper_stop(mz_runtime *rt) {
  struct mz__reaper *rp = rt->reaper;
  if (!rp) return;
  pthread_mutex_lock(&rp->m);
  rp->stop = true;
  pthread_cond_signal(&rp->c);
  pthread_mutex_unlock(&rp->m);
  pthread_join(rp->thread, NULL);
  pthread_mutex_destroy(&rp->m);
  pthread_cond_destroy(&rp->c);
  free(rp->v);
  free(rp);
  rt->reaper = NULL;
}

/* The run no longer counts as in flight.  Called last, once this thread
 * has dropped the execution's reference on the run (or handed it to the
 * reaper, which mz_runtime_destroy drains): counting it out earlier let
 * mz_runtime_destroy free the graph and its buffers while this thread
 * still released them (found with the simulator's engine
 * thread; CPU workers had the same window). */
static void run_idle(mz_runtime *rt) {
  pthread_mutex_lock(&rt->lock);
  rt->nruns--;
  /* Every run's end, not only the last: mz_runtime_set_observer waits for
   * particular runs. */
  pthread_cond_broadcast(&rt->idle);
  pthread_mutex_unlock(&rt->lock);
}

/* Drop r's hazard records on b: its last writer, its readers, a pending
 * fetch into device memory.  rt->lock is held. */
static void clear_records(mz_runtime *rt, struct mz__run *r, mz_buffer *b) {
  mz__hz_drop_run(&b->hz, r);
  mz__spin_lock(&b->lock);
  for (unsigned k = 1; k < rt->nmem; k++)
    if (b->copies[k].fetcher && mz__task_of(mz__exec_node(b->copies[k].fetcher))->run == r) b->copies[k].fetcher = NULL;
  mz__spin_unlock(&b->lock);
}

void mz__run_complete(struct mz__run *r) {
  mz_runtime *rt = r->rt;
  r->t1 = mz__now_ns();
  /* Before the future resolves, so that a program that stops right after
   * its wait keeps the trace of this run; and while the run is still in
   * rt->runs, which mz_runtime_set_observer waits on. */
  if (r->obs.n) mz__observe_run_end(r);
  bool device_work = false;
  /* Every node of the run went to the CPU workers: no device resource to
   * release, so the tasks are walked once and their queues not looked at. */
  bool cpu_only = r->all_shared;
  pthread_mutex_lock(&rt->lock);
  /* A run on the CPU workers alone where no node failed leaves nothing in
   * its tasks to clear: no message (a CPU node has one only when it
   * fails) and no device state; its buffers' hazard records are a
   * replay's claims (src/hazard.h), or cleared from its list of them
   * (tbufs).  A task's mark needs no reset: marks are compared with
   * stamps, which never repeat. */
  bool listed = r->replayed || r->tbufs_listed;
  bool walk = !(cpu_only && listed && atomic_load_explicit(&r->st_failed, memory_order_relaxed) == 0);
  uint64_t stamp = listed ? 0 : mz__stamp_next(rt);
  for (size_t i = 0; walk && i < r->ntasks; i++) {
    struct mz__task *t = mz__task_of(r->tasks[i]);
    if (cpu_only) {
      if (__builtin_expect(mz__task_has_cold(t), 0)) mz__task_set_message(t, NULL);
    } else if (t->exec.queue >= 0 && rt->queues[t->exec.queue]->dev->ops->release_exec) {
      device_work = true;
    }
    const struct mz__acc_view av = mz__task_acc_view(t);
    for (unsigned a = 0; !listed && a < t->nacc; a++) {
      mz_buffer *b = mz__acc_buf(mz__acc_at(&av, a));
      if (b->hz.stamp == stamp) continue;
      b->hz.stamp = stamp;
      clear_records(rt, r, b);
    }
  }
  /* A replay's records are its frozen run's claims (src/hazard.h): they
   * end with it, with no pass over its buffers, unless a claim was broken
   * meanwhile or device copies may name its fetches. */
  struct mz__lowered *lw = r->replayed;
  if (lw && (!mz__hz_claims_end(lw, r, atomic_load_explicit(&r->st_failed, memory_order_relaxed) != 0) || rt->nmem > 1))
    for (size_t i = 0; i < lw->nbufs; i++) clear_records(rt, r, lw->bufs[i].b);
  for (size_t i = 0; i < r->ntbufs; i++) clear_records(rt, r, (mz_buffer *)(void *)r->tbufs[i]);
  if (r->prev) r->prev->next = r->next;
  else if (rt->runs == r) rt->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  pthread_mutex_unlock(&rt->lock);
  /* With nothing for a device to release, the graph is free for its next
   * run before the future resolves: a waiter woken on a core it shares
   * with this thread (an MPI rank bound to one core) that runs the graph
   * again found it still active, and waited for this thread to get the
   * core back (9 us of a 200-step distributed stencil run).  Not with a
   * callback, which may read what the run wrote and runs before a re-run
   * may start (one set while the run ends may come after). */
  pthread_mutex_lock(&r->m);
  bool early = !device_work && !r->then_set;
  pthread_mutex_unlock(&r->m);
  if (early) {
    if (!cpu_only)
      for (size_t i = 0; i < r->ntasks; i++) {
        struct mz__task *t = mz__task_of(r->tasks[i]);
        if (__builtin_expect(mz__task_has_cold(t), 0)) mz__task_set_message(t, NULL);
      }
    run_released(r);
  }

  /* Resolve the future: waiters, the eventfd, the callback. */
  pthread_mutex_lock(&r->m);
  atomic_store(&r->done, true);
  pthread_cond_broadcast(&r->c);
  if (r->efd >= 0) {
    uint64_t one = 1;
    ssize_t wr = write(r->efd, &one, sizeof one);
    (void)wr;
  }
  mz_future_fn fn = r->then_set ? r->then_fn : NULL;
  void *user = r->then_user;
  pthread_mutex_unlock(&r->m);
  if (fn) {
    int saved = mz__in_runtime_thread;
    mz__in_runtime_thread = 1;
    fn((mz_future *)r, atomic_load(&r->status), user);
    mz__in_runtime_thread = saved;
  }
  if (device_work && rt->reaper) {
    struct mz__reaper *rp = rt->reaper;
    pthread_mutex_lock(&rp->m);
    if (rp->n == rp->cap) {
      size_t cap = rp->cap ? rp->cap * 2 : 16;
      struct mz__run **v = realloc(rp->v, cap * sizeof *v);
      if (v) {
        rp->v = v;
        rp->cap = cap;
      }
    }
    if (rp->n < rp->cap) {
      rp->v[rp->n++] = r;
      pthread_cond_signal(&rp->c);
      pthread_mutex_unlock(&rp->m);
      run_idle(rt);
      return;
    }
    pthread_mutex_unlock(&rp->m);
  }
  if (!early) run_released(r);
  mz__run_unref(r);
  run_idle(rt);
}

void mz__run_unref(struct mz__run *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  mz_runtime *rt = r->rt;
  mz_graph *g = r->g;
  /* What r holds goes first: once parked (below) it is another thread's
   * to free. */
  r->tag = MZ__TAG_DEAD;
  if (r->efd >= 0) close(r->efd);
  free(r->timings);
  r->timings = NULL;
  for (size_t i = 0; i < r->ngheld; i++) mz__graph_unref(r->gheld[i]);
  free(r->gheld);
  mz__arena_free(&r->arena);
  free(r->results);
  free(r->tbufs);
  free((void *)r->busy);
  free(r->devok);
  /* A parked run's tasks may still be asked about (mz__can_run): every
   * device, as for a task in no run. */
  r->devok = NULL;
  pthread_mutex_destroy(&r->m);
  pthread_cond_destroy(&r->c);
  struct mz__run *old = NULL;
  pthread_mutex_lock(&rt->lock);
  /* Tasks still naming r (none once a later run has taken every one over,
   * as a re-run of the same graph does) may go on naming it: r's memory
   * is parked in its graph, with its task list, instead of a pass that
   * clears each task's run, a cache line per task (in a loop of re-runs
   * of a graph larger than the caches, a third of a re-run's time).  The
   * run parked before r goes: its tasks that still name it are cleared
   * now (none when r took them all over, the common case). */
  bool park = g && r->ntaken < r->ntasks;
  if (park) {
    old = g->parked;
    g->parked = r;
  } else {
    old = r;
  }
  if (old && old->ntaken < old->ntasks)
    for (size_t i = 0; i < old->ntasks; i++)
      if (mz__task_of(old->tasks[i])->run == old) mz__task_of(old->tasks[i])->run = NULL;
  if (r->fprev) r->fprev->fnext = r->fnext;
  else if (rt->futures == r) rt->futures = r->fnext;
  if (r->fnext) r->fnext->fprev = r->fprev;
  pthread_mutex_unlock(&rt->lock);
  if (old != r) mz__run_parked_free(old);
  /* Last: with r parked, the graph's end frees it. */
  if (!park) mz__run_parked_free(r);
  mz__graph_unref(g);
}

int mz__run_results(struct mz__run *r) {
  if (atomic_load_explicit(&r->results_ready, memory_order_acquire)) return MZ_OK;
  mz_graph *g = r->g;
  int rc = MZ_OK;
  /* The graph's lock: flattening may make an apply's result values
   * (graph/graph.c), as a builder would. */
  mz__ylock_lock(&g->lock);
  if (!atomic_load_explicit(&r->results_ready, memory_order_relaxed)) {
    mz_op **v = NULL;
    size_t n = 0, cap = 0;
    rc = mz__flatten(r->root, &v, &n, &cap);
    if (rc) {
      free(v);
    } else {
      r->results = v;
      r->nresults = n;
      atomic_store_explicit(&r->results_ready, true, memory_order_release);
    }
  }
  mz__ylock_unlock(&g->lock);
  return rc;
}

/* Runs of at most this many nodes may be waited on by spinning. */
#define MZ__WAIT_SPIN_NODES 4

/* Whether every node of r not yet finished was placed on a device that
 * computes away from the host's cores (no unified memory: a discrete
 * GPU).  A racy look: a node finishing meanwhile only makes it truer, and
 * a node not placed yet (it may go to a CPU worker) makes it false. */
static bool off_host(const struct mz__run *r) {
  const mz_runtime *rt = r->rt;
  for (size_t i = 0; i < r->ntasks; i++) {
    const struct mz__task *t = mz__task_of(r->tasks[i]);
    if (atomic_load_explicit(&t->state, memory_order_acquire) == MZ__T_DONE) continue;
    int q = __atomic_load_n(&t->exec.queue, __ATOMIC_RELAXED);
    if (q < 0 || rt->queues[q]->dev->info.unified_memory) return false;
  }
  return true;
}

static bool run_done(void *arg) { return atomic_load(&((struct mz__run *)arg)->done); }

int mz__run_wait(struct mz__run *r, uint64_t timeout_ns, bool timed) {
  if (atomic_load(&r->done)) return atomic_load(&r->status);
  /* Without a deadline, the waiting thread first runs CPU nodes in place of
   * a sleeping worker (a node may take long: a timed wait would overrun). */
  mz_runtime *rt = r->rt;
  if (!timed && rt->wait_help && !mz__in_runtime_thread)
    for (unsigned d = 0; d < rt->ndev; d++)
      if (rt->devs[d]->ops->help && !mz_device_is_dead(rt->devs[d]) && rt->devs[d]->ops->help(rt->devs[d], run_done, r))
        return atomic_load(&r->status);
  /* A small run whose nodes left all run on discrete devices (a canned
   * gemm on a GPU) ends soon and needs no CPU core: spin a while, as the
   * device's own synchronize does, rather than sleep and pay a wake-up
   * (tens of microseconds in a VM) when it ends.  Not when a node may run
   * on the host's cores (CPU workers, PoCL, integrated GPUs): there the
   * waiter, which is not pinned, can hold the very core that node needs
   * (measured: a one-node CPU gemm of 64x64 took 67 us with a spinning
   * waiter on the worker's core, 16-23 us without).  Waits with a
   * deadline do not spin (their deadline counts from the call). */
  if (!timed && rt->wait_spin && r->ntasks <= MZ__WAIT_SPIN_NODES && off_host(r)) {
    uint64_t until = 0, cap = (uint64_t)rt->wait_spin * 1000u;
    for (unsigned i = 1; !atomic_load_explicit(&r->done, memory_order_acquire); i++) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 16) continue;
      uint64_t now = mz__now_ns();
      if (!until) until = now + cap;
      else if (now >= until) break;
    }
    if (atomic_load(&r->done)) return atomic_load(&r->status);
  }
  pthread_mutex_lock(&r->m);
  if (!timed) {
    while (!atomic_load(&r->done)) pthread_cond_wait(&r->c, &r->m);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + timeout_ns;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    while (!atomic_load(&r->done))
      if (pthread_cond_timedwait(&r->c, &r->m, &ts)) break;
  }
  bool done = atomic_load(&r->done);
  pthread_mutex_unlock(&r->m);
  return done ? atomic_load(&r->status) : MZ_ETIMEDOUT;
}
