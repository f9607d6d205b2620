/* Observers: records of finished nodes, their copies and runs, for the
 * user's observer (mz_runtime_set_observer) and the trace (src/trace.c),
 * and the per-node timings of a finished run (mz_future_timings).
 *
 * A run copies the runtime's observers when it is made, so the completion
 * path reads only its own run (no lock, no shared pointer that may change
 * under it), and replacing the observer waits only for runs that copied
 * the old one.  With no observer a run pays one test per finished node. */
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"
#include "observe.h"
#include "policy_table.h"
#include "run.h"
#include "trace.h"

void mz__observe_init(mz_runtime *rt, struct mz__run *r) {
  r->obs.n = 0;
  if (rt->tracing) r->obs.v[r->obs.n++] = mz__trace_observer(rt);
  if (rt->user_obs_set) r->obs.v[r->obs.n++] = rt->user_obs;
  r->timed = r->obs.n > 0 || rt->timings || rt->pol[r->policy]->done != NULL;
  /* A policy whose plan may set a word on every task: in the record, not
   * a cold record per task. */
  r->xrec = r->timed || rt->nmem > 1 || atomic_load_explicit(&rt->xrec_always, memory_order_relaxed) ||
            mz__policy_plan_sets_words(rt->pol[r->policy]);
}

static int dev_of_mem(const struct mz_device *d) { return d ? (int)d->info.index : -1; }

void mz__observe_node(struct mz__run *r, mz_op *op, int status) {
  mz_runtime *rt = r->rt;
  struct mz__task *t = mz__op_t(op);
  const struct mz__exec *e = &t->exec;
  int q = t->exec.queue;
  const struct mz_device *dev = rt->queues[q]->dev;
  mz_transfer_record x = {.run = r->id, .node = op->id, .queue = q};
  unsigned nx = 0;
  uint64_t bytes = 0;
  /* Reads first: they ran before the node's copies in (a copy between two
   * backends reads back, then writes the host copy into the device). */
  for (unsigned i = 0; i < mz__exec_nread(e); i++) {
    const struct mz__xfer *c = &mz__exec_reads(e)[i];
    x.src_device = dev_of_mem(c->src_dev);
    x.dst_device = -1;
    x.bytes = c->bytes;
    x.start_ns = c->t_start;
    x.end_ns = c->t_end;
    x.measured = c->t_end != 0;
    x.on_queue = dev->memnode == 0; /* a worker's read; else the planning thread's */
    for (unsigned k = 0; k < r->obs.n; k++)
      if (r->obs.v[k].transfer) r->obs.v[k].transfer(&x, r->obs.v[k].user);
    nx++;
    bytes += c->bytes;
  }
  for (unsigned i = 0; i < mz__exec_nxfer(e); i++) {
    const struct mz__xfer *c = &mz__exec_xd(e)->xfers[i];
    x.src_device = dev_of_mem(c->src_dev);
    x.dst_device = (int)dev->info.index;
    x.bytes = c->bytes;
    /* A device on a virtual clock times its copies only on its copy
     * engine (in that clock, as its nodes). */
    x.measured = c->t_end != 0 && c->t_end >= c->t_start && (!dev->ops->clock || dev->copy_engine);
    x.start_ns = x.measured ? c->t_start : 0;
    x.end_ns = x.measured ? c->t_end : 0;
    x.on_queue = !dev->copy_engine;
    x.on_copy_engine = dev->copy_engine;
    for (unsigned k = 0; k < r->obs.n; k++)
      if (r->obs.v[k].transfer) r->obs.v[k].transfer(&x, r->obs.v[k].user);
    nx++;
    bytes += c->bytes;
  }
  uint32_t stack_preds[32], *preds = stack_preds;
  if (t->npreds > 32) preds = malloc(t->npreds * sizeof *preds);
  unsigned np = 0;
  for (unsigned i = 0; preds && i < t->npreds; i++)
    if (mz__op_t(mz__task_preds(t)[i])->run == r) preds[np++] = mz__task_preds(t)[i]->id;
  const struct mz__tcold *tc = mz__task_cold_get(t);
  mz_node_record n = {.run = r->id,
                      .node = op->id,
                      .name = mz__op_name(op),
                      .device = (int)dev->info.index,
                      .queue = q,
                      .status = status,
                      .start_ns = mz__exec_t_end(e) ? mz__exec_t_start(e) : 0,
                      .end_ns = mz__exec_t_end(e),
                      .virtual_clock = dev->ops->clock != NULL,
                      .npreds = np,
                      .preds = preds,
                      .transfers = nx,
                      .bytes = bytes,
                      .planned_start_ns = tc ? tc->start : 0,
                      .planned_end_ns = tc ? tc->end : 0};
  for (unsigned k = 0; k < r->obs.n; k++)
    if (r->obs.v[k].node) r->obs.v[k].node(&n, r->obs.v[k].user);
  if (preds != stack_preds) free(preds);
}

void mz__run_stats(const struct mz__run *r, mz_run_stats *out) {
  memset(out, 0, sizeof *out);
  out->ops = atomic_load(&r->st_ops);
  out->batches = atomic_load(&r->st_batches);
  out->callbacks = atomic_load(&r->st_callbacks);
  out->transfers = atomic_load(&r->st_transfers);
  out->bytes_moved = atomic_load(&r->st_bytes);
  out->failed = atomic_load(&r->st_failed);
  out->elapsed_ns = r->t1 > r->t0 ? r->t1 - r->t0 : 0;
  out->ndevices = r->rt->ndev;
  out->busy_ns = (const uint64_t *)r->busy;
  uint64_t v1 = atomic_load(&r->v1);
  out->virtual_ns = v1 > r->v0 ? v1 - r->v0 : 0;
  out->plan_ns = r->plan_ns;
  out->plan_kept = r->plan_kept;
}

void mz__observe_run_end(struct mz__run *r) {
  mz_run_stats st;
  mz__run_stats(r, &st);
  mz_run_record rec = {.run = r->id, .status = atomic_load(&r->status), .start_ns = r->t0, .end_ns = r->t1, .stats = &st};
  /* Like a completion callback: maize calls that would block refuse. */
  int saved = mz__in_runtime_thread;
  mz__in_runtime_thread = 1;
  for (unsigned k = 0; k < r->obs.n; k++)
    if (r->obs.v[k].run_end) r->obs.v[k].run_end(&rec, r->obs.v[k].user);
  mz__in_runtime_thread = saved;
}

int mz_runtime_set_observer(mz_runtime *rt, const mz_observer *obs) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME)) return MZ_EINVAL;
  if (mz__in_runtime_thread)
    return mz__set_error(rt, MZ_EDEADLK, "mz_runtime_set_observer: called from a runtime thread; it would deadlock");
  pthread_mutex_lock(&rt->lock);
  rt->user_obs_set = obs != NULL;
  rt->user_obs = obs ? *obs : (mz_observer){0};
  /* Runs made from now on copy the new one; wait for those that copied
   * the old one (run ids grow, and a run leaves rt->runs after its last
   * report). */
  uint64_t last = rt->next_run_id;
  for (;;) {
    bool old = false;
    for (struct mz__run *r = rt->runs; r && !old; r = r->next) old = r->id <= last;
    if (!old) break;
    pthread_cond_wait(&rt->idle, &rt->lock);
  }
  pthread_mutex_unlock(&rt->lock);
  return MZ_OK;
}

int mz_future_timings(mz_future *f, const mz_node_timing **out, size_t *n) {
  if (out) *out = NULL;
  if (n) *n = 0;
  if (!f || f->run.tag != MZ__TAG_FUTURE || !out || !n) return MZ_EINVAL;
  struct mz__run *r = &f->run;
  mz_runtime *rt = r->rt;
  if (!atomic_load(&r->done)) return MZ_EAGAIN;
  if (!r->timed)
    return mz__set_error(rt, MZ_ESTATE,
                         "mz_future_timings: the run was not timed (set mz_runtime_config.timings or MZ_TIMINGS=1, "
                         "or register an observer, before it starts)");
  int rc = MZ_OK;
  pthread_mutex_lock(&rt->lock);
  if (!r->timings && r->ntasks) {
    /* A later run that took a node over set its run under rt->lock before
     * touching its exec: while every node still names this run, their
     * times are this run's. */
    for (size_t i = 0; i < r->ntasks && !rc; i++)
      if (mz__op_t(r->tasks[i])->run != r) rc = MZ_ESTATE;
    mz_node_timing *v = rc ? NULL : calloc(r->ntasks, sizeof *v);
    if (!rc && !v) rc = MZ_ENOMEM;
    for (size_t i = 0; !rc && i < r->ntasks; i++) {
      const mz_op *op = r->tasks[i];
      const struct mz__task *t = mz__op_t(op);
      const struct mz__exec *e = &t->exec;
      mz_node_timing *o = &v[i];
      o->node = op->id;
      o->name = mz__op_name(op);
      o->status = e->status;
      o->queue = t->exec.queue;
      o->device = t->exec.queue >= 0 ? (int)rt->queues[t->exec.queue]->dev->info.index : -1;
      uint64_t ts = mz__exec_t_start(e), te = mz__exec_t_end(e);
      if (t->exec.queue >= 0 && te && te >= ts) {
        uint64_t base = rt->queues[t->exec.queue]->dev->ops->clock ? r->v0 : r->t0;
        o->start_ns = ts > base ? ts - base : 0;
        o->end_ns = te > base ? te - base : 0;
      }
      o->transfers = mz__exec_nxfer(e) + mz__exec_nread(e);
      for (unsigned k = 0; k < mz__exec_nxfer(e); k++) o->bytes += mz__exec_xd(e)->xfers[k].bytes;
      for (unsigned k = 0; k < mz__exec_nread(e); k++) o->bytes += mz__exec_reads(e)[k].bytes;
    }
    if (!rc) {
      r->timings = v;
      r->ntimings = r->ntasks;
    }
  }
  pthread_mutex_unlock(&rt->lock);
  if (rc == MZ_ESTATE)
    return mz__set_error(rt, rc, "mz_future_timings: the run's nodes ran again since it finished; ask before re-running");
  if (rc) return mz__set_error(rt, rc, "mz_future_timings: out of memory");
  *out = r->timings;
  *n = r->ntimings;
  return MZ_OK;
}
