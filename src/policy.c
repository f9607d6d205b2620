/* The policy registry and what policies may ask of the runtime. */
#include <string.h>

#include "internal.h"

extern const struct mz_policy_ops mz_policy_single, mz_policy_round_robin, mz_policy_eager, mz_policy_ws,
    mz_policy_dmda, mz_policy_heft;

const struct mz_policy_ops *const mz__builtin_policies[] = {
    &mz_policy_single,
    &mz_policy_round_robin,
    &mz_policy_eager,
    &mz_policy_ws,
    &mz_policy_dmda,
    &mz_policy_heft,
    NULL,
};

int mz_policy_register(mz_runtime *rt, const struct mz_policy_ops *ops) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !ops) return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: NULL argument");
  if (ops->abi != MZ_POLICY_ABI)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: ABI %u, this maize wants %u", ops->abi, MZ_POLICY_ABI);
  if (!ops->name || !*ops->name || strlen(ops->name) >= 64)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: the policy needs a name (under 64 characters)");
  if (!ops->select && !ops->plan)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: policy '%s' has neither select nor plan", ops->name);
  pthread_mutex_lock(&rt->pol_lock);
  int rc = MZ_OK;
  for (unsigned i = 0; i < rt->npol; i++)
    if (!strcmp(rt->pol[i]->name, ops->name)) rc = MZ_ESTATE;
  if (!rc && rt->npol == MZ__MAX_POLICIES) rc = MZ_ENOMEM;
  if (!rc) rt->pol[rt->npol++] = ops;
  pthread_mutex_unlock(&rt->pol_lock);
  if (rc == MZ_ESTATE) return mz__set_error(rt, rc, "mz_policy_register: a policy named '%s' exists", ops->name);
  if (rc) return mz__set_error(rt, rc, "mz_policy_register: too many policies");
  return MZ_OK;
}

const char *mz_policy_name(const mz_runtime *rt, unsigned i) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME)) return NULL;
  mz_runtime *w = (mz_runtime *)rt;
  pthread_mutex_lock(&w->pol_lock);
  const char *n = i < rt->npol ? rt->pol[i]->name : NULL;
  pthread_mutex_unlock(&w->pol_lock);
  return n;
}

int mz__policy_find(mz_runtime *rt, const char *name, unsigned *idx) {
  pthread_mutex_lock(&rt->pol_lock);
  int rc = MZ_ENOENT;
  for (unsigned i = 0; i < rt->npol; i++)
    if (!strcmp(rt->pol[i]->name, name)) {
      *idx = i;
      rc = MZ_OK;
      break;
    }
  pthread_mutex_unlock(&rt->pol_lock);
  return rc;
}

int mz__policy_instance(mz_runtime *rt, unsigned idx, void **state) {
  pthread_mutex_lock(&rt->pol_lock);
  int rc = MZ_OK;
  if (!rt->pol_ready[idx]) {
    void *s = NULL;
    if (rt->pol[idx]->init) rc = rt->pol[idx]->init(&rt->sched, &s);
    if (rc == MZ_OK) {
      rt->pol_state[idx] = s;
      rt->pol_ready[idx] = true;
    }
  }
  *state = rt->pol_state[idx];
  pthread_mutex_unlock(&rt->pol_lock);
  return rc;
}

int mz__policy_code(int rc) { return rc < 0 && strcmp(mz_err_name(rc), "MZ_EUNKNOWN") ? rc : MZ_EPOLICY; }

/* ---- the policy's view ---- */

unsigned mz_sched_queue_count(const mz_sched *s) { return s->rt->nq; }

unsigned mz_sched_queue_device(const mz_sched *s, unsigned q) {
  return q < s->rt->nq ? s->rt->queues[q]->dev->info.index : 0;
}

unsigned mz_sched_queue_backlog(const mz_sched *s, unsigned q) {
  return q < s->rt->nq ? atomic_load_explicit(&s->rt->queues[q]->backlog, memory_order_relaxed) : 0;
}

unsigned mz_sched_device_count(const mz_sched *s) { return s->rt->ndev; }

int mz_sched_device_kind(const mz_sched *s, unsigned dev) {
  return dev < s->rt->ndev ? (int)s->rt->devs[dev]->info.kind : MZ_ERANGE;
}

bool mz_sched_device_dead(const mz_sched *s, unsigned dev) {
  return dev < s->rt->ndev ? atomic_load(&s->rt->devs[dev]->dead) : true;
}

int mz_sched_current_queue(const mz_sched *s) {
  return mz__cur_rt == s->rt ? mz__cur_queue : -1;
}

bool mz_task_can_run(const mz_sched *s, const mz_task *t, unsigned q) {
  return mz__can_run(s->rt, (const mz_op *)t, q);
}

bool mz_task_finished(const mz_task *t) {
  return atomic_load_explicit(&((const mz_op *)t)->t->state, memory_order_acquire) == MZ__T_DONE;
}

int mz_task_follow_queue(const mz_sched *s, const mz_task *t, int prefer) {
  unsigned np = mz_task_pred_count(t), pending = 0;
  int q = -1;
  for (unsigned i = 0; i < np; i++) {
    const mz_task *p = mz_task_pred(t, i);
    if (mz_task_finished(p)) continue;
    int pq = mz_task_queue(p);
    if (pq < 0 || (q >= 0 && pq != q)) return -1; /* not placed, or on two queues */
    q = pq;
    pending++;
  }
  if (q < 0) q = prefer;
  if (q < 0 || (unsigned)q >= s->rt->nq || !mz_task_can_run(s, t, (unsigned)q)) return -1;
  /* A task's finish publishes DONE before its queue's backlog drops
   * (exec.c).  Predecessors only ever finish, so more backlog than the
   * pending count above is a safe no.  A yes is confirmed by counting them
   * again after reading the backlog: a predecessor still pending then is in
   * that backlog. */
  unsigned backlog = atomic_load_explicit(&s->rt->queues[q]->backlog, memory_order_acquire);
  if (backlog > pending) return -1;
  pending = 0;
  for (unsigned i = 0; i < np; i++) {
    const mz_task *p = mz_task_pred(t, i);
    if (!mz_task_finished(p) && mz_task_queue(p) == q) pending++;
  }
  return backlog <= pending ? q : -1;
}

const char *mz_task_name(const mz_task *t) { return ((const mz_op *)t)->name; }
uint64_t mz_task_id(const mz_task *t) { return ((const mz_op *)t)->id; }

size_t mz_task_bytes(const mz_task *t) {
  const struct mz__task *k = ((const mz_op *)t)->t;
  size_t n = 0;
  for (unsigned i = 0; i < k->nacc; i++) n += k->acc[i].buf->bytes;
  return n;
}

size_t mz_task_bytes_on(const mz_sched *s, const mz_task *t, unsigned q) {
  if (q >= s->rt->nq) return 0;
  unsigned m = s->rt->queues[q]->dev->memnode;
  const struct mz__task *k = ((const mz_op *)t)->t;
  size_t n = 0;
  for (unsigned i = 0; i < k->nacc; i++) {
    mz_buffer *b = k->acc[i].buf;
    mz__spin_lock(&b->lock);
    if (b->copies[m].state != MZ__INVALID) n += b->bytes;
    mz__spin_unlock(&b->lock);
  }
  return n;
}

unsigned mz_task_pred_count(const mz_task *t) { return ((const mz_op *)t)->t->npreds; }

mz_task *mz_task_pred(const mz_task *t, unsigned i) {
  const struct mz__task *k = ((const mz_op *)t)->t;
  return i < k->npreds ? (mz_task *)k->preds[i] : NULL;
}

/* Atomic: a node taken back from a dead device is placed again. */
int mz_task_queue(const mz_task *t) { return __atomic_load_n(&((const mz_op *)t)->t->queue, __ATOMIC_RELAXED); }

int mz_task_set_queue(const mz_sched *s, mz_task *t, unsigned q) {
  if (q >= s->rt->nq) return MZ_ERANGE;
  struct mz__task *k = ((mz_op *)t)->t;
  k->queue = (int)q;
  k->fixed = true;
  return MZ_OK;
}

uintptr_t *mz_task_policy_data(mz_task *t) { return &((mz_op *)t)->t->policy_word; }

bool mz__policy_shares(const struct mz_policy_ops *po) { return po == &mz_policy_eager || po == &mz_policy_ws; }
