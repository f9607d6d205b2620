/* The policy registry and what policies may ask of the runtime. */
#include <string.h>

#include "handle.h"
#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"
#include "perfmodel.h"
#include "policy_table.h"

int mz_policy_register(mz_runtime *rt, const struct mz_policy_ops *ops) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !ops) return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: NULL argument");
  if (ops->abi < MZ_POLICY_ABI_MIN || ops->abi > MZ_POLICY_ABI)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: ABI %u, this maize takes %u to %u", ops->abi,
                         MZ_POLICY_ABI_MIN, MZ_POLICY_ABI);
  if (!ops->name || !*ops->name || strlen(ops->name) >= 64)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: the policy needs a name (under 64 characters)");
  if (!ops->select && !ops->plan)
    return mz__set_error(rt, MZ_EINVAL, "mz_policy_register: policy '%s' has neither select nor plan", ops->name);
  pthread_mutex_lock(&rt->pol_lock);
  int rc = MZ_OK;
  for (unsigned i = 0; i < rt->npol; i++)
    if (!strcmp(rt->pol[i]->name, ops->name)) rc = MZ_ESTATE;
  if (!rc && rt->npol == MZ__MAX_POLICIES) rc = MZ_ENOMEM;
  if (!rc) {
    /* An ABI 1 table ends at done: pick is not read from it. */
    rt->pol_pick[rt->npol] = ops->abi >= 2 ? ops->pick : NULL;
    rt->pol[rt->npol++] = ops;
  }
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

bool mz_sched_queue_copy_engine(const mz_sched *s, unsigned q) {
  return q < s->rt->nq && s->rt->queues[q]->dev->copy_engine;
}

uint64_t mz_sched_copy_ready_ns(const mz_sched *s, unsigned q) {
  const mz_runtime *rt = s->rt;
  if (q >= rt->nq || !rt->queues[q]->dev->copy_engine) return mz_sched_queue_ready_ns(s, q);
  uint64_t now = mz__runtime_clock(rt);
  const struct mz_device *d = rt->queues[q]->dev;
  uint64_t r = d->ops->copy_ready_ns ? d->ops->copy_ready_ns(d) : 0;
  return r > now ? r : now;
}

int mz_sched_device_kind(const mz_sched *s, unsigned dev) {
  return dev < s->rt->ndev ? (int)s->rt->devs[dev]->info.kind : MZ_ERANGE;
}

unsigned mz_sched_device_host_cores(const mz_sched *s, unsigned dev) {
  return dev < s->rt->ndev ? s->rt->devs[dev]->info.host_cores : 0;
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
  return atomic_load_explicit(&mz__task_of((const mz_op *)t)->state, memory_order_acquire) == MZ__T_DONE;
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

const char *mz_task_name(const mz_task *t) { return mz__op_name((const mz_op *)t); }
uint64_t mz_task_id(const mz_task *t) { return ((const mz_op *)t)->id; }

unsigned mz_task_pred_count(const mz_task *t) { return mz__task_of((const mz_op *)t)->npreds; }

mz_task *mz_task_pred(const mz_task *t, unsigned i) {
  const struct mz__task *k = mz__task_of((const mz_op *)t);
  return i < k->npreds ? (mz_task *)mz__task_preds(k)[i] : NULL;
}

/* Atomic: a node taken back from a dead device is placed again. */
int mz_task_queue(const mz_task *t) { return __atomic_load_n(&mz__task_of((const mz_op *)t)->exec.queue, __ATOMIC_RELAXED); }

int mz_task_set_queue(const mz_sched *s, mz_task *t, unsigned q) {
  if (q >= s->rt->nq) return MZ_ERANGE;
  struct mz__task *k = mz__task_of((mz_op *)t);
  k->exec.queue = (int)q;
  k->fixed = true;
  return MZ_OK;
}

uintptr_t *mz_task_policy_data(mz_task *t) {
  struct mz__task *k = mz__task_of((mz_op *)t);
  __atomic_store_n(&k->replay_dirty, true, __ATOMIC_RELAXED); /* the next replay clears the word */
  /* The run's exec record (a run whose policy has plan has one for every
   * task); else, for a policy that asks only at select, the cold record,
   * which cannot be refused here: out of memory, as the work lists do. */
  if (mz__exec_xd(&k->exec)) return &mz__exec_xd(&k->exec)->policy_word;
  struct mz__tcold *c = mz__task_cold(k);
  if (!c) abort();
  return &c->policy_word;
}

/* Only from plan: the run has not started, so nothing else reads these
 * fields or t's counters yet. */
int mz_task_set_after(const mz_sched *s, mz_task *t, mz_task *prev) {
  (void)s;
  if (!t || !prev || t == prev) return MZ_EINVAL;
  struct mz__task *kt = mz__task_of((mz_op *)t), *kp = mz__task_of((mz_op *)prev);
  const struct mz__tcold *ct = mz__task_cold_get(kt), *cp = mz__task_cold_get(kp);
  if (!kt->run || kt->run != kp->run || !kt->run->planning || (ct && ct->prev) || (cp && cp->next))
    return MZ_ESTATE;
  struct mz__tcold *pt = mz__task_cold(kt), *pp = pt ? mz__task_cold(kp) : NULL;
  if (!pp) return MZ_ENOMEM;
  pt->prev = (mz_op *)prev;
  kt->plan_after = true;
  kt->run->nafter++; /* (only the planning thread is here) */
  pp->next = (mz_op *)t;
  __atomic_store_n(&kt->replay_dirty, true, __ATOMIC_RELAXED);
  __atomic_store_n(&kp->replay_dirty, true, __ATOMIC_RELAXED);
  atomic_fetch_add_explicit(&kt->unsub, 1, memory_order_relaxed);
  return MZ_OK;
}

struct ord_ix {
  const mz_op *op;
  size_t i;
};

static int by_op(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const struct ord_ix *)a)->op, y = (uintptr_t)((const struct ord_ix *)b)->op;
  return (x > y) - (x < y);
}

/* The task t is planned after (mz_task_set_after), or NULL. */
static const mz_op *plan_prev(const struct mz__task *t) {
  const struct mz__tcold *c = mz__task_cold_get(t);
  return c ? c->prev : NULL;
}

static size_t ord_find(const struct ord_ix *v, size_t n, const mz_op *op) {
  struct ord_ix key = {op, 0};
  const struct ord_ix *f = bsearch(&key, v, n, sizeof *v, by_op);
  return f ? f->i : n;
}

/* Kahn's algorithm over the run's edges and the plan order: every task
 * taken once all that it waits for were taken; a cycle leaves some out. */
int mz__plan_order_check(struct mz__run *r) {
  size_t n = r->ntasks;
  if (!r->nafter) return MZ_OK; /* no order: no pass over the tasks */
  struct ord_ix *v = malloc(n * sizeof *v);
  size_t *deg = calloc(n, sizeof *deg), *off = calloc(n + 1, sizeof *off), *stack = malloc(n * sizeof *stack);
  size_t *adj = NULL, done = 0;
  int rc = MZ_ENOMEM;
  if (!v || !deg || !off || !stack) goto out;
  for (size_t i = 0; i < n; i++) v[i] = (struct ord_ix){r->tasks[i], i};
  qsort(v, n, sizeof *v, by_op);
  /* Edges p -> j: j's predecessors in the run, and its cold->prev. */
  size_t ne = 0;
  for (size_t j = 0; j < n; j++) {
    const struct mz__task *t = mz__op_t(r->tasks[j]);
    for (unsigned k = 0; k <= t->npreds; k++) {
      const mz_op *p = k < t->npreds ? mz__task_preds(t)[k] : plan_prev(t);
      size_t pi = p && mz__op_t(p)->run == r ? ord_find(v, n, p) : n;
      if (pi == n) continue;
      off[pi + 1]++;
      deg[j]++;
      ne++;
    }
  }
  for (size_t i = 0; i < n; i++) off[i + 1] += off[i];
  adj = malloc((ne ? ne : 1) * sizeof *adj);
  size_t *fill = malloc((n ? n : 1) * sizeof *fill);
  if (!adj || !fill) {
    free(fill);
    goto out;
  }
  memcpy(fill, off, n * sizeof *fill);
  for (size_t j = 0; j < n; j++) {
    const struct mz__task *t = mz__op_t(r->tasks[j]);
    for (unsigned k = 0; k <= t->npreds; k++) {
      const mz_op *p = k < t->npreds ? mz__task_preds(t)[k] : plan_prev(t);
      size_t pi = p && mz__op_t(p)->run == r ? ord_find(v, n, p) : n;
      if (pi != n) adj[fill[pi]++] = j;
    }
  }
  free(fill);
  size_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (!deg[i]) stack[top++] = i;
  while (top) {
    size_t i = stack[--top];
    done++;
    for (size_t e = off[i]; e < off[i + 1]; e++)
      if (--deg[adj[e]] == 0) stack[top++] = adj[e];
  }
  rc = done == n ? MZ_OK : MZ_EPOLICY;
out:
  if (rc != MZ_OK) /* drop the order: the run must not wait on it */
    for (size_t i = 0; i < n; i++) {
      struct mz__task *t = mz__op_t(r->tasks[i]);
      if (!t->plan_after) continue;
      struct mz__tcold *c = mz__task_cold_get(t);
      mz__task_cold_get(mz__op_t(c->prev))->next = NULL;
      c->prev = NULL;
      t->plan_after = false;
      atomic_fetch_sub_explicit(&t->unsub, 1, memory_order_relaxed);
    }
  free(v);
  free(deg);
  free(off);
  free(stack);
  free(adj);
  return rc;
}

/* The policy word of t where its run's plan left it (the exec record: a
 * run whose policy has plan has one for every task; else the cold one). */
static uintptr_t *plan_word(struct mz__task *t, bool make) {
  if (mz__exec_xd(&t->exec)) return &mz__exec_xd(&t->exec)->policy_word;
  struct mz__tcold *c = make ? mz__task_cold(t) : mz__task_cold_get(t);
  return c ? &c->policy_word : NULL;
}

/* One task's entry of a full plan copy. */
struct plan_entry {
  struct mz_op *prev;
  uintptr_t word;
  int64_t start, end;
  int32_t q;
  bool times;
};

/* One block: the header, then n entries, or n queues alone when no task
 * has more than its queue (single's and round-robin's plans: 4 bytes a
 * task, restored in one pass). */
struct mz__plan_copy {
  size_t n;
  bool queues_only;
  uint64_t v[]; /* the entries or queues (8-byte aligned) */
};

struct mz__plan_copy *mz__plan_save(const struct mz__run *r, uint64_t clock0) {
  size_t n = r->ntasks;
  bool qonly = true;
  for (size_t i = 0; i < n && qonly; i++) {
    struct mz__task *t = mz__op_t(r->tasks[i]);
    const uintptr_t *w = plan_word(t, false);
    qonly = !t->plan_after && !t->plan_times && !(w && *w);
  }
  if (!n) return NULL;
  struct mz__plan_copy *p = malloc(sizeof *p + n * (qonly ? sizeof(int32_t) : sizeof(struct plan_entry)));
  if (!p) return NULL;
  p->n = n;
  p->queues_only = qonly;
  int32_t *q = (int32_t *)(void *)p->v;
  struct plan_entry *e = (struct plan_entry *)(void *)p->v;
  for (size_t i = 0; i < n; i++) {
    struct mz__task *t = mz__op_t(r->tasks[i]);
    int32_t tq = t->fixed ? t->exec.queue : -1;
    if (qonly) {
      q[i] = tq;
      continue;
    }
    const struct mz__tcold *c = mz__task_cold_get(t);
    const uintptr_t *w = plan_word(t, false);
    e[i] = (struct plan_entry){
        .q = tq, .prev = t->plan_after ? c->prev : NULL, .word = w ? *w : 0, .times = t->plan_times};
    if (t->plan_times) {
      e[i].start = (int64_t)(c->start - clock0);
      e[i].end = (int64_t)(c->end - clock0);
    }
  }
  return p;
}

bool mz__plan_restore(struct mz__run *r, const struct mz__plan_copy *p, uint64_t clock0) {
  size_t n = r->ntasks;
  if (p->n != n) return false;
  const mz_sched *s = &r->rt->sched;
  if (p->queues_only) {
    const int32_t *q = (const int32_t *)(const void *)p->v;
    for (size_t i = 0; i < n; i++)
      if (q[i] >= 0) (void)mz_task_set_queue(s, (mz_task *)r->tasks[i], (unsigned)q[i]);
    return true;
  }
  const struct plan_entry *e = (const struct plan_entry *)(const void *)p->v;
  /* First every record the plan needs, so that a refusal leaves nothing
   * half set (the caller then plans anew). */
  for (size_t i = 0; i < n; i++) {
    struct mz__task *t = mz__op_t(r->tasks[i]);
    if ((e[i].prev || e[i].times) && !mz__task_cold(t)) return false;
    if (e[i].prev && !mz__task_cold(mz__op_t(e[i].prev))) return false;
    if (e[i].word && !plan_word(t, true)) return false;
  }
  /* Then through the calls a plan makes, which cannot fail now (the
   * order was checked against these edges when the plan was made). */
  r->planning = true;
  for (size_t i = 0; i < n; i++) {
    mz_task *t = (mz_task *)r->tasks[i];
    if (e[i].q >= 0) (void)mz_task_set_queue(s, t, (unsigned)e[i].q);
    if (e[i].word) *mz_task_policy_data(t) = e[i].word;
    if (e[i].prev) (void)mz_task_set_after(s, t, (mz_task *)e[i].prev);
    if (e[i].times)
      (void)mz_task_set_expected_times(s, t, clock0 + (uint64_t)e[i].start, clock0 + (uint64_t)e[i].end);
  }
  r->planning = false;
  return true;
}

/* Plain stores: the task's own placement (plan, or select for this task)
 * is the only writer, and the observers read them once it has finished. */
int mz_task_set_expected_times(const mz_sched *s, mz_task *t, uint64_t start_ns, uint64_t end_ns) {
  (void)s;
  if (end_ns < start_ns) return MZ_EINVAL;
  struct mz__task *k = mz__task_of((mz_op *)t);
  struct mz__tcold *p = mz__task_cold(k);
  if (!p) return MZ_ENOMEM;
  p->start = start_ns;
  p->end = end_ns;
  k->plan_times = true;
  return MZ_OK;
}
