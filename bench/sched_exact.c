/* The least makespan of a small run, by branch and bound (sched_exact.h).
 *
 * Machines are the queues that can run the run's nodes, one per device
 * (the simulated platforms of mz-bench-sched --exact); a node j takes
 * w(j, q) = mz_task_expected_ns on queue q, and an edge from p (on queue
 * a) into j (on queue b, another device) carries c = mz_sched_link_ns(a,
 * b, bytes).  Two models:
 *
 *  - delay (the default): j starts no earlier than its queue is free and,
 *    for each predecessor p, p's end (same device) or p's end + c (the
 *    classic model of Topcuoglu et al.: copies overlap everything and
 *    each other).  Every schedule the simulator makes obeys these
 *    constraints (a copy starts after its producer ends and takes its
 *    link time; a node waits for its queue and its inputs), so this
 *    optimum is at or below every policy's makespan: a lower bound.
 *  - copy engine (SCHED_EXACT_LANE): as the simulator with copy=1
 *    (devices/sim/sim.c, sim_submit): the input copies into a device run
 *    on one in-order lane, in the order of the nodes on its queue, each
 *    from the later of the lane being free and the end of the node's
 *    predecessors on the copy's source device; a device keeps the copy
 *    it received, so a later reader there copies nothing; j starts once
 *    its queue is free, its predecessors have ended and its last copy is
 *    in.  Given where each node runs and in which order on each queue
 *    this is what the simulator does, so this optimum is the best any
 *    policy can get from it.
 *
 * Why exhaustive search over "append a ready node to a queue" finds the
 * optimum: for a fixed placement and queue orders the earliest schedule
 * is one (each node starts as early as the constraints allow).  Build it
 * by taking its nodes in order of (start, index): when j comes, its
 * predecessors (which end after they start, costs being > 0) and the
 * nodes before it on its queue (and so their copies on the lane) are
 * placed, and appending j at its earliest start gives its start again.
 * So the search may keep only sequences whose (start, index) increase
 * (canonical), and below a partial schedule every later node starts no
 * earlier than the last one placed (ls).  Pruning bounds, each below
 * every completion: the latest end so far; for each unplaced node its
 * earliest start (ls, its placed predecessors' ends, its unplaced ones'
 * earliest finishes at their cheapest cost) plus its bottom level at the
 * cheapest costs; and the work bound: queue q can give the unplaced nodes
 * only T - max(ls, free(q)), in which it does at most rate(q) (T -
 * max(ls, free(q))) of their cheapest time (rate(q) the least over nodes
 * of wmin(j) / w(j, q)).  Of the queues that are interchangeable (same
 * costs, same links) and still empty, only the first is tried (relabel
 * them in order of first use). */
#include "sched_exact.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "maize.h"

enum { MAXN = 24, MAXD = 8 };

struct ex {
  unsigned n, nq;
  bool lane, plain;
  double w[MAXN][MAXD];      /* w[j][q] */
  unsigned qid[MAXD];        /* the runtime's queue number */
  unsigned dev[MAXD];        /* device of the usable queue */
  int same_as[MAXD];         /* an earlier interchangeable queue, or -1 */
  unsigned np[MAXN];         /* distinct predecessors in the run */
  unsigned pred[MAXN][MAXN];
  double c[MAXN][MAXN][MAXD][MAXD]; /* c[j][k][a][b]: pred k of j from queue a to b */
  unsigned topo[MAXN];
  double wmin[MAXN], bl[MAXN], rate[MAXD], rsum;
  /* The partial schedule. */
  int q[MAXN];
  double st[MAXN], en[MAXN];
  double qfree[MAXD], lanefree[MAXD];
  unsigned has[MAXN];        /* devices (queue indexes) holding a copy of j's output */
  unsigned left[MAXN];       /* unplaced predecessors */
  unsigned qcount[MAXD];
  double ub;
  int best_q[MAXN];
  double best_st[MAXN];
  uint64_t visits, budget;
  bool out_of_budget;
};

/* j's start on queue b, given the partial schedule; with the lane, the
 * lane's time after j's copies in *lane_after and the copies made in
 * *made (a bit per predecessor index). */
static double start_on(const struct ex *e, unsigned j, unsigned b, double *lane_after, unsigned *made) {
  double t = e->qfree[b], lane = e->lanefree[b];
  bool copied = false;
  *made = 0;
  for (unsigned k = 0; k < e->np[j]; k++) {
    unsigned p = e->pred[j][k];
    unsigned a = (unsigned)e->q[p];
    t = fmax(t, e->en[p]);
    if (e->dev[a] == e->dev[b] || e->c[j][k][a][b] <= 0) continue;
    if (!e->lane) {
      t = fmax(t, e->en[p] + e->c[j][k][a][b]);
      continue;
    }
    if (e->has[p] >> b & 1) continue; /* copied for an earlier reader: in before that reader started */
    /* The copy waits for j's predecessors on its source's device. */
    double from = lane;
    for (unsigned x = 0; x < e->np[j]; x++) {
      unsigned r = e->pred[j][x];
      if (e->dev[e->q[r]] == e->dev[a]) from = fmax(from, e->en[r]);
    }
    lane = from + e->c[j][k][a][b];
    *made |= 1u << k;
    copied = true;
  }
  if (copied) t = fmax(t, lane);
  *lane_after = lane;
  return t;
}

/* A bound below every completion of the partial schedule (see the top). */
static double partial_bound(const struct ex *e, double ls, double latest) {
  double lb = latest, est[MAXN];
  double work = 0, have = 0;
  for (unsigned i = 0; i < e->n; i++) {
    unsigned j = e->topo[i];
    if (e->q[j] >= 0) continue;
    double t = ls;
    for (unsigned k = 0; k < e->np[j]; k++) {
      unsigned p = e->pred[j][k];
      t = fmax(t, e->q[p] >= 0 ? e->en[p] : est[p] + e->wmin[p]);
    }
    est[j] = t;
    lb = fmax(lb, t + e->bl[j]);
    work += e->wmin[j];
  }
  if (work > 0) {
    for (unsigned b = 0; b < e->nq; b++) have += e->rate[b] * fmax(ls, e->qfree[b]);
    lb = fmax(lb, (work + have) / e->rsum);
  }
  return lb;
}

struct cand {
  unsigned j, b;
  double t, fin;
};

static int by_fin(const void *x, const void *y) {
  const struct cand *a = x, *b = y;
  if (a->fin != b->fin) return a->fin < b->fin ? -1 : 1;
  return a->j != b->j ? (a->j < b->j ? -1 : 1) : (a->b < b->b ? -1 : a->b > b->b);
}

static void search(struct ex *e, unsigned placed, double ls, unsigned lj, double latest) {
  if (e->out_of_budget) return;
  if (++e->visits > e->budget) {
    e->out_of_budget = true;
    return;
  }
  if (placed == e->n) {
    if (latest < e->ub) {
      e->ub = latest;
      memcpy(e->best_q, e->q, sizeof e->q);
      memcpy(e->best_st, e->st, sizeof e->st);
    }
    return;
  }
  if (!e->plain && partial_bound(e, ls, latest) >= e->ub * (1 - 1e-12)) return;
  struct cand cs[MAXN * MAXD];
  unsigned nc = 0;
  for (unsigned j = 0; j < e->n; j++) {
    if (e->q[j] >= 0 || e->left[j]) continue;
    for (unsigned b = 0; b < e->nq; b++) {
      if (e->w[j][b] < 0) continue;
      if (!e->plain && e->same_as[b] >= 0 && !e->qcount[b] && !e->qcount[e->same_as[b]]) continue;
      double la;
      unsigned made;
      double t = start_on(e, j, b, &la, &made);
      if (!e->plain && (t < ls || (t == ls && j < lj))) continue; /* not canonical */
      double fin = t + e->w[j][b];
      if (fin >= e->ub * (1 - 1e-12)) continue;
      cs[nc++] = (struct cand){j, b, t, fin};
    }
  }
  qsort(cs, nc, sizeof cs[0], by_fin);
  for (unsigned i = 0; i < nc; i++) {
    unsigned j = cs[i].j, b = cs[i].b;
    if (cs[i].fin >= e->ub * (1 - 1e-12)) break;
    double la;
    unsigned made;
    double t = start_on(e, j, b, &la, &made);
    double oq = e->qfree[b], ol = e->lanefree[b];
    unsigned oh[MAXN];
    for (unsigned k = 0; k < e->np[j]; k++) oh[k] = e->has[e->pred[j][k]];
    e->q[j] = (int)b;
    e->st[j] = t;
    e->en[j] = t + e->w[j][b];
    e->qfree[b] = e->en[j];
    e->lanefree[b] = la;
    e->qcount[b]++;
    for (unsigned k = 0; k < e->np[j]; k++)
      if (made >> k & 1) e->has[e->pred[j][k]] |= 1u << b;
    e->has[j] = 1u << b;
    for (unsigned s = 0; s < e->n; s++)
      for (unsigned k = 0; k < e->np[s]; k++)
        if (e->pred[s][k] == j) e->left[s]--;
    search(e, placed + 1, t, j, fmax(latest, e->en[j]));
    for (unsigned s = 0; s < e->n; s++)
      for (unsigned k = 0; k < e->np[s]; k++)
        if (e->pred[s][k] == j) e->left[s]++;
    for (unsigned k = 0; k < e->np[j]; k++) e->has[e->pred[j][k]] = oh[k];
    e->has[j] = 0;
    e->qcount[b]--;
    e->lanefree[b] = ol;
    e->qfree[b] = oq;
    e->q[j] = -1;
    if (e->out_of_budget) return;
  }
}

int sched_exact_solve(const mz_sched *s, mz_task *const tasks[], size_t n, unsigned flags, uint64_t budget,
                      struct sched_exact *out, unsigned *queue, double *start) {
  if (n > MAXN || !out) return MZ_EINVAL;
  struct ex *e = calloc(1, sizeof *e);
  if (!e) return MZ_ENOMEM;
  int rc = MZ_EINVAL;
  e->n = (unsigned)n;
  e->lane = flags & SCHED_EXACT_LANE;
  e->plain = flags & SCHED_EXACT_PLAIN;
  e->budget = budget;
  unsigned nqall = mz_sched_queue_count(s);
  for (unsigned q = 0; q < nqall; q++) {
    bool any = false;
    for (size_t j = 0; j < n && !any; j++) any = mz_task_can_run(s, tasks[j], q);
    if (!any) continue;
    if (e->nq == MAXD) goto done;
    for (unsigned b = 0; b < e->nq; b++)
      if (mz_sched_queue_device(s, e->qid[b]) == mz_sched_queue_device(s, q)) goto done;
    e->qid[e->nq] = q;
    e->dev[e->nq] = mz_sched_queue_device(s, q);
    e->nq++;
  }
  if (!e->nq) goto done;
  for (size_t j = 0; j < n; j++) *mz_task_policy_data(tasks[j]) = j + 1;
  for (unsigned j = 0; j < e->n; j++) {
    e->q[j] = -1;
    e->wmin[j] = INFINITY;
    for (unsigned b = 0; b < e->nq; b++) {
      double w = mz_task_can_run(s, tasks[j], e->qid[b]) ? mz_task_expected_ns(s, tasks[j], e->qid[b]) : -1;
      e->w[j][b] = w;
      if (w >= 0 && w < e->wmin[j]) e->wmin[j] = w;
    }
    if (!isfinite(e->wmin[j])) goto clear;
    for (unsigned x = 0, np = mz_task_pred_count(tasks[j]); x < np; x++) {
      mz_task *p = mz_task_pred(tasks[j], x);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue; /* of another run */
      size_t bytes = mz_task_edge_bytes(tasks[j], x);
      unsigned k = 0;
      while (k < e->np[j] && e->pred[j][k] != ix - 1) k++;
      if (k == e->np[j]) e->pred[j][e->np[j]++] = (unsigned)(ix - 1);
      for (unsigned a = 0; a < e->nq; a++)
        for (unsigned b = 0; b < e->nq; b++) {
          double c = bytes && e->dev[a] != e->dev[b] ? mz_sched_link_ns(s, e->qid[a], e->qid[b], bytes) : 0;
          if (c > e->c[j][k][a][b]) e->c[j][k][a][b] = c; /* one producer, two buffers: the larger */
        }
    }
    e->left[j] = e->np[j];
  }
  /* Topological order (Kahn) and the bottom levels at the cheapest costs. */
  {
    unsigned indeg[MAXN], m = 0;
    for (unsigned j = 0; j < e->n; j++) indeg[j] = e->np[j];
    for (unsigned pass = 0; pass < e->n && m < e->n; pass++)
      for (unsigned j = 0; j < e->n; j++) {
        if (indeg[j] != 0) continue;
        indeg[j] = ~0u;
        e->topo[m++] = j;
        for (unsigned t = 0; t < e->n; t++)
          for (unsigned k = 0; k < e->np[t]; k++)
            if (e->pred[t][k] == j) indeg[t]--;
      }
    if (m != e->n) goto clear;
    for (unsigned i = e->n; i-- > 0;) {
      unsigned j = e->topo[i];
      double b = 0;
      for (unsigned t = 0; t < e->n; t++)
        for (unsigned k = 0; k < e->np[t]; k++)
          if (e->pred[t][k] == j && e->bl[t] > b) b = e->bl[t];
      e->bl[j] = e->wmin[j] + b;
    }
  }
  e->rsum = 0;
  for (unsigned b = 0; b < e->nq; b++) {
    double r = INFINITY;
    for (unsigned j = 0; j < e->n; j++)
      if (e->w[j][b] > 0) r = fmin(r, e->wmin[j] / e->w[j][b]);
    e->rate[b] = isfinite(r) ? r : 0;
    e->rsum += e->rate[b];
    /* Interchangeable with an earlier queue: the same costs and links. */
    e->same_as[b] = -1;
    for (unsigned a = b; a-- > 0 && e->same_as[b] < 0;) {
      bool same = true;
      for (unsigned j = 0; j < e->n && same; j++) {
        same = e->w[j][a] == e->w[j][b];
        for (unsigned k = 0; k < e->np[j] && same; k++)
          for (unsigned x = 0; x < e->nq && same; x++) {
            if (x == a || x == b) continue;
            same = e->c[j][k][x][a] == e->c[j][k][x][b] && e->c[j][k][a][x] == e->c[j][k][b][x];
          }
        for (unsigned k = 0; k < e->np[j] && same; k++) same = e->c[j][k][a][b] == e->c[j][k][b][a];
      }
      if (same) e->same_as[b] = (int)a; /* the nearest: empty ones of a kind are always the last */
    }
  }
  if (!(e->rsum > 0)) goto clear;
  e->ub = INFINITY;
  search(e, 0, 0, 0, 0);
  *out = (struct sched_exact){e->ub, !e->out_of_budget && isfinite(e->ub), e->visits, e->nq};
  for (unsigned j = 0; isfinite(e->ub) && j < e->n; j++) {
    if (queue) queue[j] = e->qid[e->best_q[j]];
    if (start) start[j] = e->best_st[j];
  }
  rc = isfinite(e->ub) || e->out_of_budget ? 0 : MZ_EINVAL;
clear:
  for (size_t j = 0; j < n; j++) *mz_task_policy_data(tasks[j]) = 0;
done:
  free(e);
  return rc;
}

/* ---- local search in the copy-engine model, for runs of any size ---- */

struct sched_model {
  size_t n;
  unsigned nq;          /* the runtime's queue count */
  double *w;            /* w[i * nq + q]; < 0: cannot run there */
  unsigned *dev;        /* per queue */
  int *bit;             /* per queue: its bit in the copy sets (queues that run nodes), or -1 */
  unsigned nbits;
  size_t *pstart;       /* CSR of distinct predecessors */
  size_t *pred;
  size_t *bytes;        /* per predecessor entry (the largest edge) */
  double *lat, *pb;     /* per queue pair a * nq + b: link latency and ns per byte */
};

void sched_model_free(struct sched_model *m) {
  if (!m) return;
  free(m->w);
  free(m->dev);
  free(m->bit);
  free(m->pstart);
  free(m->pred);
  free(m->bytes);
  free(m->lat);
  free(m->pb);
  free(m);
}

struct sched_model *sched_model_build(const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct sched_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  unsigned nq = mz_sched_queue_count(s);
  size_t ne = 0;
  for (size_t j = 0; j < n; j++) ne += mz_task_pred_count(tasks[j]);
  m->n = n;
  m->nq = nq;
  m->w = malloc((n * nq + 1) * sizeof *m->w);
  m->dev = malloc((nq + 1) * sizeof *m->dev);
  m->bit = malloc((nq + 1) * sizeof *m->bit);
  m->pstart = calloc(n + 1, sizeof *m->pstart);
  m->pred = malloc((ne + 1) * sizeof *m->pred);
  m->bytes = malloc((ne + 1) * sizeof *m->bytes);
  m->lat = malloc(((size_t)nq * nq + 1) * sizeof *m->lat);
  m->pb = malloc(((size_t)nq * nq + 1) * sizeof *m->pb);
  if (!m->w || !m->dev || !m->bit || !m->pstart || !m->pred || !m->bytes || !m->lat || !m->pb) {
    sched_model_free(m);
    return NULL;
  }
  for (unsigned a = 0; a < nq; a++) m->dev[a] = mz_sched_queue_device(s, a);
  for (unsigned a = 0; a < nq; a++)
    for (unsigned b = 0; b < nq; b++) {
      double l0 = 0, l1 = 0;
      if (m->dev[a] != m->dev[b]) {
        l0 = mz_sched_link_ns(s, a, b, 0);
        l1 = mz_sched_link_ns(s, a, b, 1u << 20);
      }
      m->lat[a * nq + b] = l0 > 0 ? l0 : 0;
      m->pb[a * nq + b] = l1 > l0 ? (l1 - l0) / (double)(1u << 20) : 0;
    }
  for (size_t j = 0; j < n; j++) *mz_task_policy_data(tasks[j]) = j + 1;
  size_t k = 0;
  for (size_t j = 0; j < n; j++) {
    for (unsigned q = 0; q < nq; q++)
      m->w[j * nq + q] = mz_task_can_run(s, tasks[j], q) ? mz_task_expected_ns(s, tasks[j], q) : -1;
    m->pstart[j] = k;
    for (unsigned x = 0, np = mz_task_pred_count(tasks[j]); x < np; x++) {
      mz_task *p = mz_task_pred(tasks[j], x);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue;
      size_t b = mz_task_edge_bytes(tasks[j], x), y = m->pstart[j];
      while (y < k && m->pred[y] != ix - 1) y++;
      if (y < k) {
        if (b > m->bytes[y]) m->bytes[y] = b;
        continue;
      }
      m->pred[k] = ix - 1;
      m->bytes[k++] = b;
    }
  }
  m->pstart[n] = k;
  for (unsigned q = 0; q < nq; q++) {
    bool any = false;
    for (size_t j = 0; j < n && !any; j++) any = m->w[j * nq + q] >= 0;
    m->bit[q] = any ? (int)m->nbits++ : -1;
  }
  for (size_t j = 0; j < n; j++) *mz_task_policy_data(tasks[j]) = 0;
  return m;
}

struct eval_ws {
  size_t *ord;           /* nodes by key */
  double *en;
  uint64_t *has;         /* queues holding a copy of the node's output */
  double *qfree, *lane;  /* per queue */
};

/* The copy-engine model's makespan of queue[] with the queue orders of
 * key (ord sorted by key).  Devices have one queue here: a copy is kept
 * per queue, as per device. */
static double eval_model(const struct sched_model *m, const unsigned *queue, struct eval_ws *ws) {
  unsigned nq = m->nq;
  for (unsigned q = 0; q < nq; q++) ws->qfree[q] = ws->lane[q] = 0;
  double mk = 0;
  for (size_t i = 0; i < m->n; i++) {
    size_t j = ws->ord[i];
    unsigned b = queue[j];
    double t = ws->qfree[b], lane = ws->lane[b];
    bool copied = false;
    for (size_t y = m->pstart[j]; y < m->pstart[j + 1]; y++) {
      size_t p = m->pred[y];
      unsigned a = queue[p];
      t = fmax(t, ws->en[p]);
      if (m->dev[a] == m->dev[b] || !m->bytes[y] || (ws->has[p] >> m->bit[b] & 1)) continue;
      double from = lane;
      for (size_t x = m->pstart[j]; x < m->pstart[j + 1]; x++)
        if (m->dev[queue[m->pred[x]]] == m->dev[a]) from = fmax(from, ws->en[m->pred[x]]);
      lane = from + m->lat[a * nq + b] + m->pb[a * nq + b] * (double)m->bytes[y];
      ws->has[p] |= 1ull << m->bit[b];
      copied = true;
    }
    if (copied) t = fmax(t, lane);
    ws->lane[b] = lane;
    ws->en[j] = t + m->w[j * nq + b];
    ws->qfree[b] = ws->en[j];
    ws->has[j] = 1ull << m->bit[b];
    if (ws->en[j] > mk) mk = ws->en[j];
  }
  return mk;
}

struct keyed {
  double key;
  size_t i;
};

static int by_key(const void *a, const void *b) {
  const struct keyed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

int sched_model_improve(const struct sched_model *m, unsigned *queue, const double *key, unsigned sweeps,
                        double *before, double *after) {
  if (m->nbits > 64) return MZ_EINVAL;
  for (size_t j = 0; j < m->n; j++)
    if (queue[j] >= m->nq || m->w[j * m->nq + queue[j]] < 0) return MZ_EINVAL;
  struct eval_ws ws = {malloc((m->n + 1) * sizeof *ws.ord), malloc((m->n + 1) * sizeof *ws.en),
                       calloc(m->n + 1, sizeof *ws.has), malloc((m->nq + 1) * sizeof *ws.qfree),
                       malloc((m->nq + 1) * sizeof *ws.lane)};
  struct keyed *kv = malloc((m->n + 1) * sizeof *kv);
  int rc = MZ_ENOMEM;
  if (!ws.ord || !ws.en || !ws.has || !ws.qfree || !ws.lane || !kv) goto out;
  for (size_t j = 0; j < m->n; j++) kv[j] = (struct keyed){key[j], j};
  qsort(kv, m->n, sizeof *kv, by_key);
  for (size_t j = 0; j < m->n; j++) ws.ord[j] = kv[j].i;
  double best = eval_model(m, queue, &ws);
  *before = best;
  for (unsigned sw = 0; sw < sweeps; sw++) {
    bool moved = false;
    for (size_t j = 0; j < m->n; j++) {
      unsigned home = queue[j], to = home;
      for (unsigned b = 0; b < m->nq; b++) {
        if (b == home || m->w[j * m->nq + b] < 0) continue;
        queue[j] = b;
        double v = eval_model(m, queue, &ws);
        if (v < best * (1 - 1e-9)) best = v, to = b;
      }
      queue[j] = to;
      moved |= to != home;
    }
    if (!moved) break;
  }
  *after = best;
  rc = 0;
out:
  free(kv);
  free(ws.ord);
  free(ws.en);
  free(ws.has);
  free(ws.qfree);
  free(ws.lane);
  return rc;
}
