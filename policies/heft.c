/* heft: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri and Wu,
 * 2002), planned once for the whole run at mz_schedule().
 *
 * 1. Costs.  w(i, q): the expected time of node i on queue q
 *    (mz_task_expected_ns), computed once per device class.  Unknown
 *    estimates take the mean of the known ones for that node, or 1 us.
 *    The mean cost w̄(i) is the mean over capable queues; the mean
 *    communication cost of an edge is L̄ + bytes * 1/B̄, averaged over
 *    pairs of distinct queues (0 where they share memory).
 * 2. Upward rank: rank(i) = w̄(i) + max over successors j of
 *    (c̄(i, j) + rank(j)), computed in reverse topological order.
 * 3. In decreasing rank (ties: topological order), each node goes to the
 *    queue giving the earliest finish time, inserted into the first idle
 *    gap of that queue that is long enough, after its predecessors end.
 *
 * The model follows how maize runs a node: the transfers of its inputs
 * from other devices are made on the receiving queue, before the node, so
 * they lengthen the node's slot (as in dmda), and nodes that read host
 * data pay that transfer too.  Queues start from their current backlog.
 *
 * What runs may differ from the plan in one way: queues are in-order and a
 * node is queued when its predecessors allow, so a node planned into an
 * early gap of a queue runs there only if it is submitted before the
 * node planned after the gap.  The placement is HEFT's; the order on each
 * queue is the order in which nodes become ready.
 *
 * Cost: O(n * queues * (preds + gaps searched)) time, O(n * classes)
 * memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "maize/policy.h"

struct slot {
  double s, e;
};

struct qplan {
  struct slot *v;
  unsigned n, cap;
};

struct edge {
  unsigned p;   /* predecessor's index in the run */
  size_t bytes;
};

struct rank_ix {
  double rank;
  size_t i;
};

static int by_rank(const void *a, const void *b) {
  const struct rank_ix *x = a, *y = b;
  if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* The earliest start >= ready of a gap of length d on queue p. */
static double find_gap(const struct qplan *p, double ready, double d) {
  unsigned lo = 0, hi = p->n;
  while (lo < hi) { /* first slot ending after ready */
    unsigned mid = (lo + hi) / 2;
    if (p->v[mid].e <= ready) lo = mid + 1;
    else hi = mid;
  }
  double s = ready;
  for (unsigned j = lo; j < p->n; j++) {
    if (s + d <= p->v[j].s) return s;
    if (p->v[j].e > s) s = p->v[j].e;
  }
  return s;
}

static int insert_slot(struct qplan *p, double s, double e) {
  if (p->n == p->cap) {
    unsigned cap = p->cap ? p->cap * 2 : 16;
    struct slot *v = realloc(p->v, cap * sizeof *v);
    if (!v) return -2; /* MZ_ENOMEM */
    p->v = v;
    p->cap = cap;
  }
  unsigned lo = 0, hi = p->n;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if (p->v[mid].s <= s) lo = mid + 1;
    else hi = mid;
  }
  memmove(&p->v[lo + 1], &p->v[lo], (p->n - lo) * sizeof *p->v);
  p->v[lo] = (struct slot){s, e};
  p->n++;
  return 0;
}

/* A link between device classes: latency and time per byte. */
struct link {
  double lat, per_byte;
};

static int heft_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  (void)state;
  unsigned nq = mz_sched_queue_count(s), ndev = mz_sched_device_count(s);
  unsigned ncls = 0;
  for (unsigned d = 0; d < ndev; d++) {
    unsigned c = mz_sched_device_class(s, d);
    if (c + 1 > ncls) ncls = c + 1;
  }
  unsigned *qcls = malloc(nq * sizeof *qcls), *qdev = malloc(nq * sizeof *qdev);
  int *rep = malloc(ncls * sizeof *rep);             /* a queue of each class */
  double *w = malloc(n * ncls * sizeof *w);          /* cost per node and class, INFINITY: cannot */
  double *wbar = malloc(n * sizeof *wbar), *rank = calloc(n, sizeof *rank), *aft = malloc(n * sizeof *aft);
  int *placed = malloc(n * sizeof *placed);
  struct rank_ix *order = malloc(n * sizeof *order);
  struct link *links = malloc((size_t)ncls * ncls * sizeof *links);
  struct qplan *qp = calloc(nq, sizeof *qp);
  size_t *eoff = malloc((n + 1) * sizeof *eoff);
  struct edge *edges = NULL;
  int rc = -2; /* MZ_ENOMEM */
  if (!qcls || !qdev || !rep || !w || !wbar || !rank || !aft || !placed || !order || !links || !qp || !eoff) goto out;

  for (size_t i = 0; i < n; i++) placed[i] = -1;
  for (unsigned c = 0; c < ncls; c++) rep[c] = -1;
  for (unsigned q = 0; q < nq; q++) {
    qdev[q] = mz_sched_queue_device(s, q);
    qcls[q] = mz_sched_device_class(s, qdev[q]);
    if (rep[qcls[q]] < 0) rep[qcls[q]] = (int)q;
  }
  /* Links between classes, from a pair of queues on distinct devices. */
  for (unsigned a = 0; a < ncls; a++)
    for (unsigned b = 0; b < ncls; b++) {
      struct link *l = &links[a * ncls + b];
      *l = (struct link){0, 0};
      if (rep[a] < 0) continue;
      for (unsigned q = 0; q < nq; q++) {
        if (qcls[q] != b || qdev[q] == qdev[rep[a]]) continue;
        l->lat = mz_sched_link_ns(s, (unsigned)rep[a], q, 0);
        l->per_byte = (mz_sched_link_ns(s, (unsigned)rep[a], q, 1u << 20) - l->lat) / (double)(1u << 20);
        break;
      }
    }
  /* Mean link over pairs of distinct queues. */
  double lbar = 0, pbar = 0, pairs = 0;
  for (unsigned a = 0; a < nq; a++)
    for (unsigned b = 0; b < nq; b++) {
      if (a == b) continue;
      if (qdev[a] != qdev[b]) {
        const struct link *l = &links[qcls[a] * ncls + qcls[b]];
        lbar += l->lat;
        pbar += l->per_byte;
      }
      pairs++;
    }
  if (pairs) {
    lbar /= pairs;
    pbar /= pairs;
  }

  /* Index the run's nodes through the policy word, and collect edges. */
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = i + 1;
  size_t ne = 0;
  for (size_t i = 0; i < n; i++) ne += mz_task_pred_count(tasks[i]);
  edges = malloc((ne ? ne : 1) * sizeof *edges);
  if (!edges) goto out;
  ne = 0;
  for (size_t i = 0; i < n; i++) {
    eoff[i] = ne;
    unsigned np = mz_task_pred_count(tasks[i]);
    for (unsigned k = 0; k < np; k++) {
      mz_task *p = mz_task_pred(tasks[i], k);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue; /* a node of another run */
      edges[ne++] = (struct edge){(unsigned)(ix - 1), mz_task_edge_bytes(tasks[i], k)};
    }
  }
  eoff[n] = ne;

  /* 1. Costs per class. */
  for (size_t i = 0; i < n; i++) {
    double known = 0;
    unsigned nknown = 0;
    for (unsigned c = 0; c < ncls; c++) {
      double v = INFINITY;
      if (rep[c] >= 0 && mz_task_can_run(s, tasks[i], (unsigned)rep[c])) {
        v = mz_task_expected_ns(s, tasks[i], (unsigned)rep[c]);
        if (v >= 0) {
          known += v;
          nknown++;
        } else {
          v = -1;
        }
      }
      w[i * ncls + c] = v;
    }
    double fill = nknown ? known / nknown : 1e3;
    double sum = 0, cnt = 0;
    for (unsigned q = 0; q < nq; q++) {
      double *v = &w[i * ncls + qcls[q]];
      if (*v < 0) *v = fill;
      if (isfinite(*v)) {
        sum += *v;
        cnt++;
      }
    }
    wbar[i] = cnt ? sum / cnt : 0;
  }

  /* 2. Upward ranks, in reverse topological order. */
  for (size_t i = n; i-- > 0;) {
    rank[i] += wbar[i]; /* rank[i] held the max over successors */
    for (size_t k = eoff[i]; k < eoff[i + 1]; k++) {
      double r = lbar + pbar * (double)edges[k].bytes + rank[i];
      if (edges[k].bytes == 0) r = rank[i];
      if (r > rank[edges[k].p]) rank[edges[k].p] = r;
    }
  }
  for (size_t i = 0; i < n; i++) order[i] = (struct rank_ix){rank[i], i};
  qsort(order, n, sizeof *order, by_rank);

  /* Queues start with what they already have to do. */
  uint64_t now = mz_sched_now_ns(s);
  for (unsigned q = 0; q < nq; q++) {
    uint64_t r = mz_sched_queue_ready_ns(s, q);
    if (r > now && insert_slot(&qp[q], 0, (double)(r - now))) goto out;
  }

  /* 3. Earliest finish time with insertion. */
  for (size_t oi = 0; oi < n; oi++) {
    size_t i = order[oi].i;
    mz_task *t = tasks[i];
    bool root = eoff[i] == eoff[i + 1];
    double ready = 0;
    for (size_t k = eoff[i]; k < eoff[i + 1]; k++)
      if (placed[edges[k].p] >= 0 && aft[edges[k].p] > ready) ready = aft[edges[k].p];
    int best = -1;
    double best_f = INFINITY, best_s = 0;
    for (unsigned q = 0; q < nq; q++) {
      double c = w[i * ncls + qcls[q]];
      if (!isfinite(c) || !mz_task_can_run(s, t, q)) continue;
      double d = c;
      for (size_t k = eoff[i]; k < eoff[i + 1]; k++) {
        unsigned p = edges[k].p;
        if (placed[p] < 0 || !edges[k].bytes || qdev[placed[p]] == qdev[q]) continue;
        const struct link *l = &links[qcls[placed[p]] * ncls + qcls[q]];
        d += l->lat + l->per_byte * (double)edges[k].bytes;
      }
      if (root) d += mz_task_transfer_ns(s, t, q);
      double st = find_gap(&qp[q], ready, d);
      if (st + d < best_f) {
        best_f = st + d;
        best_s = st;
        best = (int)q;
      }
    }
    placed[i] = best;
    aft[i] = best >= 0 ? best_f : ready;
    if (best < 0) continue; /* no queue can run it: select reports it */
    if (insert_slot(&qp[best], best_s, best_f)) goto out;
    mz_task_set_queue(s, t, (unsigned)best);
  }
  rc = 0;
out:
  for (unsigned q = 0; qp && q < nq; q++) free(qp[q].v);
  free(qp);
  free(qcls);
  free(qdev);
  free(rep);
  free(w);
  free(wbar);
  free(rank);
  free(aft);
  free(placed);
  free(order);
  free(links);
  free(eoff);
  free(edges);
  return rc;
}

/* Only for nodes the plan could not place: the first queue that can run
 * them (the runtime reports MZ_ENODEV when there is none). */
static int heft_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  (void)ready;
  unsigned nq = mz_sched_queue_count(s);
  for (unsigned q = 0; q < nq; q++)
    if (mz_task_can_run(s, t, q)) return (int)q;
  return 0;
}

const struct mz_policy_ops mz_policy_heft = {
    .abi = MZ_POLICY_ABI,
    .name = "heft",
    .description = "whole-run list scheduling by upward rank, earliest finish time with insertion",
    .plan = heft_plan,
    .select = heft_select,
};
