/* Futures: the user's handle on a run. */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "handle.h"
#include "hazard.h"
#include "objects/mz_buffer.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"
#include "run.h"

/* NULL, a destroyed future or another kind of handle is refused. */
static inline bool live(const mz_future *f) { return f && f->run.tag == MZ__TAG_FUTURE; }

/* After a successful run, the user's memory of every wrapped buffer it
 * wrote holds the latest contents (mz_buffer_wrap's contract; a buffer a
 * later run also writes is left to that run's wait): read back
 * what a device with its own memory holds (a map where the device used the
 * memory in place).  On the waiting thread, which may block. */
static int sync_wrapped(struct mz__run *r) {
  int rc = MZ_OK;
  if (!atomic_load_explicit(&r->rt->nwrapped, memory_order_relaxed)) return MZ_OK;
  for (size_t i = 0; i < r->ntasks && rc == MZ_OK; i++) {
    const struct mz__task *t = mz__op_t(r->tasks[i]);
    for (unsigned a = 0; a < t->nacc && rc == MZ_OK; a++) {
      mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
      if (!(mz__acc_mode(mz__task_access(t, a)) & 2) || !(b->mem_flags & MZ_BUFFER_WRAPPED)) continue;
      /* Not while a later run writes it: that run's own wait reads it back,
       * and fetching now could read a copy its writer is still filling. */
      pthread_mutex_lock(&r->rt->lock);
      bool later = mz__hz_run(&b->hz, false) != NULL;
      pthread_mutex_unlock(&r->rt->lock);
      if (!later) rc = mz__buffer_fetch_host(b, NULL, NULL);
    }
  }
  return rc;
}

int mz_future_wait(mz_future *f) {
  if (!live(f)) return MZ_EINVAL;
  if (mz__in_runtime_thread && !atomic_load(&f->run.done))
    return mz__set_error(f->run.rt, MZ_EDEADLK, "mz_future_wait: called from a runtime thread; it would deadlock");
  int st = mz__run_wait(&f->run, 0, false);
  if (st == MZ_OK && !mz__in_runtime_thread) {
    int rc = sync_wrapped(&f->run);
    if (rc) return mz__set_error(f->run.rt, rc, "mz_future_wait: cannot read a wrapped buffer back into its memory");
  }
  return st;
}

int mz_future_wait_for(mz_future *f, uint64_t timeout_ns) {
  if (!live(f)) return MZ_EINVAL;
  if (mz__in_runtime_thread && !atomic_load(&f->run.done))
    return mz__set_error(f->run.rt, MZ_EDEADLK, "mz_future_wait_for: called from a runtime thread; it would deadlock");
  /* A deadline past ~146 years (UINT64_MAX as "forever") would
   * overflow the clock arithmetic and time out at once: wait untimed. */
  int st = timeout_ns >= (uint64_t)1 << 62 ? mz__run_wait(&f->run, 0, false) : mz__run_wait(&f->run, timeout_ns, true);
  if (st == MZ_OK && !mz__in_runtime_thread) {
    int rc = sync_wrapped(&f->run);
    if (rc) return mz__set_error(f->run.rt, rc, "mz_future_wait_for: cannot read a wrapped buffer back into its memory");
  }
  return st;
}

int mz_future_poll(const mz_future *f) {
  if (!live(f)) return MZ_EINVAL;
  return atomic_load(&f->run.done) ? atomic_load(&f->run.status) : MZ_EAGAIN;
}

int mz_future_status(const mz_future *f) { return mz_future_poll(f); }

const char *mz_future_message(const mz_future *f) {
  if (!live(f)) return f ? "not a live future (NULL, destroyed, or another kind of handle)" : "NULL future";
  if (!atomic_load(&f->run.done)) return "";
  /* (No message with a failure: there was no memory for it.) */
  int st = atomic_load(&f->run.status);
  return f->run.message ? f->run.message : st < 0 ? mz_strerror(st) : "";
}

int mz_future_then(mz_future *f, mz_future_fn fn, void *user) {
  if (!live(f) || !fn) return MZ_EINVAL;
  struct mz__run *r = &f->run;
  pthread_mutex_lock(&r->m);
  if (r->then_set) {
    pthread_mutex_unlock(&r->m);
    return mz__set_error(r->rt, MZ_ESTATE, "mz_future_then: the future already has a callback");
  }
  r->then_set = true;
  r->then_fn = fn;
  r->then_user = user;
  bool done = atomic_load(&r->done);
  pthread_mutex_unlock(&r->m);
  if (done) {
    /* A callback runs as on a runtime thread wherever it runs, so a
     * blocking call in it is refused the same way. */
    int saved = mz__in_runtime_thread;
    mz__in_runtime_thread = 1;
    fn(f, atomic_load(&r->status), user);
    mz__in_runtime_thread = saved;
  }
  return MZ_OK;
}

int mz_future_fd(mz_future *f) {
  if (!live(f)) return MZ_EINVAL;
  struct mz__run *r = &f->run;
  pthread_mutex_lock(&r->m);
  if (r->efd < 0) {
    r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->efd >= 0 && atomic_load(&r->done)) {
      uint64_t one = 1;
      ssize_t w = write(r->efd, &one, sizeof one);
      (void)w;
    }
  }
  int fd = r->efd;
  pthread_mutex_unlock(&r->m);
  return fd >= 0 ? fd : mz__set_error(r->rt, MZ_EIO, "mz_future_fd: eventfd failed");
}

/* The run's results, flattened on first use; false (and the runtime's
 * error set) when they cannot be. */
static bool results(const mz_future *f) {
  struct mz__run *r = (struct mz__run *)(uintptr_t)&f->run; /* made once, under the graph's lock */
  if (!mz__run_results(r)) return true;
  mz__set_error(r->rt, MZ_ENOMEM, "mz_future_result: out of memory");
  return false;
}

unsigned mz_future_result_count(const mz_future *f) {
  return live(f) && atomic_load(&f->run.done) && results(f) ? (unsigned)f->run.nresults : 0;
}

mz_buffer *mz_future_result(const mz_future *f, unsigned i) {
  if (!live(f) || !atomic_load(&f->run.done) || !results(f) || i >= f->run.nresults) return NULL;
  mz_op *leaf = f->run.results[i];
  return leaf->kind == MZ__K_VALUE ? mz__value_buf(leaf) : NULL;
}

int mz_future_stats(const mz_future *f, mz_run_stats *out) {
  if (!live(f) || !out) return MZ_EINVAL;
  const struct mz__run *r = &f->run;
  if (!atomic_load(&r->done)) return MZ_EAGAIN;
  mz__run_stats(r, out);
  return MZ_OK;
}

void mz_future_destroy(mz_future *f) {
  if (!live(f)) return; /* NULL, or destroyed already */
  f->run.tag = MZ__TAG_DEAD;
  mz__run_unref(&f->run);
}
