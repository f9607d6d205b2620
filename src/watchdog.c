/* The watchdog: a report when runs in flight stop moving.
 *
 * Started only when asked for (mz_runtime_config.watchdog_s or
 * $MZ_WATCHDOG_S).  One thread per runtime wakes a few times per period
 * and takes rt->lock briefly to fold the progress counters of the runs in
 * flight into one signature: each run's remaining node count (it drops
 * when a node finishes) and its submitted batches (they grow when nodes are
 * handed to queues), plus the run count and the last run id.  The dispatch
 * path is untouched: these counters exist already.  When the signature has
 * not changed for a whole period while runs are in flight, the thread
 * writes one report naming every unfinished node of those runs (up to a
 * cap per run) with its device, queue and state, then waits another period
 * before reporting the same stall again.
 *
 * States, read from the task's atomics only:
 *   waiting for predecessors   some predecessor in the run is not yet on a queue
 *   gated on host              placed or deferred; waits on the host for
 *                              predecessors to finish (another backend, another
 *                              run, a dynamic policy's choice)
 *   queued for submission      in a device's submission thread inbox
 *   submitted to device        on its queue, not running yet as far as the
 *                              runtime knows (on an accelerator it may be)
 *   running                    the queue says it runs it now (CPU workers)
 *
 * Lifetime: runs listed in rt->runs are alive while rt->lock is held
 * (run_complete unlists a run under that lock before dropping it), so the
 * walk dereferences only their tasks. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"
#include "watchdog.h"

/* Nodes listed per run in one report; the rest are counted. */
#define MZ__WD_LIST_MAX 32

struct mz__watchdog {
  mz_runtime *rt;
  pthread_t thread;
  pthread_mutex_t m;
  pthread_cond_t c; /* CLOCK_MONOTONIC */
  bool stop;
  uint64_t period_ns;
  void (*fn)(const char *report, void *user);
  void *user;
};

/* A growing text buffer; on ENOMEM it keeps what it has. */
struct text {
  char *s;
  size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void tprintf(struct text *t, const char *fmt, ...) {
  for (int pass = 0; pass < 2; pass++) {
    size_t room = t->cap - t->n;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? room : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (t->s && (size_t)k < room) {
      t->n += (size_t)k;
      return;
    }
    if (pass) return;
    size_t cap = t->cap ? t->cap : 1024;
    while (cap - t->n <= (size_t)k) cap *= 2;
    char *ns = realloc(t->s, cap);
    if (!ns) return;
    t->s = ns;
    t->cap = cap;
    if (!t->n) t->s[0] = 0;
  }
}

int mz__watchdog_config(mz_runtime *rt, double *seconds) {
  *seconds = 0;
  double s = rt->cfg.watchdog_s;
  if (s < 0 || isnan(s) || s > 1e6)
    return mz__set_error(rt, MZ_EINVAL, "watchdog_s: %g is not a number of seconds from 0 to 1e6", s);
  if (s > 0) {
    *seconds = s;
    return MZ_OK;
  }
  const char *e = getenv("MZ_WATCHDOG_S");
  if (!e || !*e) return MZ_OK;
  char *end;
  s = strtod(e, &end);
  while (*end == ' ') end++;
  if (end == e || *end || !(s >= 0) || s > 1e6)
    return mz__set_error(rt, MZ_EINVAL, "MZ_WATCHDOG_S: '%.64s' is not a number of seconds from 0 to 1e6 (0: off)", e);
  *seconds = s;
  return MZ_OK;
}

static uint64_t mix(uint64_t h, uint64_t x) { return (h ^ (x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2))) * 0xFF51AFD7ED558CCDull; }

/* rt->lock held. */
static uint64_t signature(mz_runtime *rt) {
  uint64_t h = mix(rt->nruns, rt->next_run_id);
  for (struct mz__run *r = rt->runs; r; r = r->next) {
    h = mix(h, atomic_load_explicit(&r->remaining, memory_order_relaxed));
    h = mix(h, atomic_load_explicit(&r->st_batches, memory_order_relaxed));
  }
  return h;
}

static const char *task_state(mz_runtime *rt, mz_op *op, int *queue) {
  struct mz__task *t = mz__op_t(op);
  int s = atomic_load_explicit(&t->state, memory_order_acquire);
  *queue = -1;
  if (s == MZ__T_DONE) return NULL;
  if (s == MZ__T_WAIT || s == MZ__T_NEW) {
    if (atomic_load_explicit(&t->unsub, memory_order_acquire) > 0) return "waiting for predecessors";
    return "gated on host";
  }
  /* QUEUED or FLUSHED: t->queue was written before the state's release. */
  *queue = t->exec.queue;
  if (*queue < 0 || (unsigned)*queue >= rt->nq) return "submitted to device";
  struct mz__queue *Q = rt->queues[*queue];
  if (atomic_load_explicit(&Q->current, memory_order_relaxed) == op) return "running";
  if (s == MZ__T_QUEUED && !Q->dev->ops->inline_submit) return "queued for submission";
  return "submitted to device";
}

/* rt->lock held.  Lists the unfinished nodes of every run in flight,
 * those on queues first. */
static void report(mz_runtime *rt, struct text *out, double stalled_s) {
  tprintf(out, "maize watchdog: no node was submitted or finished for %.1f s; %zu run%s in flight\n", stalled_s, rt->nruns,
          rt->nruns == 1 ? "" : "s");
  for (struct mz__run *r = rt->runs; r; r = r->next) {
    size_t left = atomic_load_explicit(&r->remaining, memory_order_relaxed);
    tprintf(out, "  run %llu (policy %s): %zu of %zu nodes unfinished\n", (unsigned long long)r->id,
            rt->pol[r->policy]->name, left, r->ntasks);
    unsigned listed = 0;
    size_t more = 0;
    for (int pass = 0; pass < 2; pass++) {
      for (size_t i = 0; i < r->ntasks; i++) {
        mz_op *op = r->tasks[i];
        int q;
        const char *st = task_state(rt, op, &q);
        if (!st || (pass == 0) != (q >= 0)) continue;
        if (listed == MZ__WD_LIST_MAX) {
          more++;
          continue;
        }
        listed++;
        if (q >= 0)
          tprintf(out, "    node %u (%s): %s; device %u (%s), queue %d\n", op->id, mz__op_name(op), st,
                  rt->queues[q]->dev->info.index, rt->queues[q]->dev->info.name, q);
        else
          tprintf(out, "    node %u (%s): %s; no device or queue yet\n", op->id, mz__op_name(op), st);
      }
    }
    if (more) tprintf(out, "    ... and %zu more\n", more);
  }
}

static void *watchdog_main(void *arg) {
  struct mz__watchdog *wd = arg;
  mz_runtime *rt = wd->rt;
  mz__in_runtime_thread = 1; /* a report callback must not block on maize calls */
  uint64_t tick = wd->period_ns / 4;
  if (tick < 5000000u) tick = 5000000u;
  if (tick > 1000000000u) tick = 1000000000u;
  uint64_t last_sig = 0, last_change = mz__now_ns();
  pthread_mutex_lock(&wd->m);
  while (!wd->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + tick;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(&wd->c, &wd->m, &ts);
    if (wd->stop) break;
    pthread_mutex_unlock(&wd->m);
    struct text out = {0};
    uint64_t now = mz__now_ns();
    pthread_mutex_lock(&rt->lock);
    if (!rt->nruns) {
      last_change = now;
    } else {
      uint64_t sig = signature(rt);
      if (sig != last_sig) {
        last_sig = sig;
        last_change = now;
      } else if (now - last_change >= wd->period_ns) {
        report(rt, &out, (double)(now - last_change) / 1e9);
        last_change = now; /* the same stall again only after another period */
      }
    }
    pthread_mutex_unlock(&rt->lock);
    if (out.s) {
      if (wd->fn) {
        wd->fn(out.s, wd->user);
      } else {
        fputs(out.s, stderr);
        fflush(stderr);
      }
      free(out.s);
    }
    pthread_mutex_lock(&wd->m);
  }
  pthread_mutex_unlock(&wd->m);
  return NULL;
}

int mz__watchdog_start(mz_runtime *rt, double seconds) {
  if (!(seconds > 0)) return MZ_OK;
  struct mz__watchdog *wd = calloc(1, sizeof *wd);
  if (!wd) return mz__set_error(rt, MZ_ENOMEM, "watchdog: out of memory");
  wd->rt = rt;
  wd->period_ns = (uint64_t)(seconds * 1e9);
  if (!wd->period_ns) wd->period_ns = 1;
  wd->fn = rt->cfg.watchdog_fn;
  wd->user = rt->cfg.watchdog_user;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&wd->c, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&wd->m, NULL);
  if (pthread_create(&wd->thread, NULL, watchdog_main, wd)) {
    pthread_cond_destroy(&wd->c);
    pthread_mutex_destroy(&wd->m);
    free(wd);
    return mz__set_error(rt, MZ_ENOMEM, "watchdog: cannot start its thread");
  }
  mz__thread_name(wd->thread, "watchdog");
  rt->watchdog = wd;
  return MZ_OK;
}

void mz__watchdog_stop(mz_runtime *rt) {
  struct mz__watchdog *wd = rt->watchdog;
  if (!wd) return;
  pthread_mutex_lock(&wd->m);
  wd->stop = true;
  pthread_cond_signal(&wd->c);
  pthread_mutex_unlock(&wd->m);
  pthread_join(wd->thread, NULL);
  pthread_cond_destroy(&wd->c);
  pthread_mutex_destroy(&wd->m);
  free(wd);
  /* rt->watchdog is left as it was: CPU workers read it when they start,
   * without a lock, and the runtime is being freed.  Nothing reads it
   * after this. */
}
