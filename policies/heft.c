/* heft: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri and Wu,
 * 2002), planned once for the whole run at mz_schedule().
 *
 * 1. Costs.  w(i, c): the expected time of node i on a device of class c
 *    (mz_task_expected_ns), computed once per class.  Unknown estimates
 *    take the mean of the known ones for that node, or 1 us.  The mean
 *    cost w̄(i) is the mean over capable queues; the mean communication
 *    cost of an edge is L̄ + bytes * 1/B̄, averaged over pairs of distinct
 *    queues (0 where they share memory).  Links are the measured ones
 *    (mz_sched_measure_links at init; the configured ones on simulated
 *    devices).
 * 2. Upward rank: rank(i) = w̄(i) + max over successors j of
 *    (c̄(i, j) + rank(j)), computed in reverse topological order.
 * 3. In decreasing rank (ties: topological order), each node goes to the
 *    queue giving the earliest finish time, inserted into the first idle
 *    gap of that queue that is long enough, after its predecessors end.
 *    Queues that tie: a CPU worker's queue whose predecessor ends last
 *    first (that worker is running then; an idle one sleeps and must be
 *    woken), then the fastest class first.
 * 4. Device selection.  Step 3 is greedy: when transfers are dear, moving a
 *    node to a slow device to finish it a little earlier makes every
 *    successor on the fast devices fetch its output, on their own queues,
 *    and the whole plan ends later than one that never used the slow
 *    device.  So step 3 is run on the fastest device class alone, then the
 *    two fastest, and so on up to all of them (at most MAX_PASSES passes),
 *    and the plan with the earliest predicted end is kept.  A node that no
 *    device of a pass can run may go anywhere in that pass.  Where a
 *    device holds the host's cores (below), one more pass leaves such
 *    devices out.
 *
 * Devices on the host's cores (mz_sched_device_host_cores): a node of a
 * device that keeps more than one of them busy (PoCL's CPU device) holds
 * them all, so it needs a gap of its length on every queue on the host's
 * cores at once, and takes it on all of them; its copies are a memcpy on
 * those cores and count as its work, copy engine or not.  Step 3 would
 * still fill such a device while it ends each node first (it does not see
 * that the node took every core), hence the pass without it.
 *
 * Devices whose queues share the device (OpenCL, CUDA: kernels from
 * several queues slow each other down) are one processor in the plan: only
 * their first queue gets nodes, and it starts with the work left on all of
 * them (as in dmda).
 *
 * The model follows how maize runs a node.  On a device without a copy
 * engine, the transfers of its inputs from other devices are made on the
 * receiving queue, before the node, so they lengthen the node's slot (as
 * in dmda), and nodes that read host data pay that transfer too.  On a
 * device with one (mz_sched_queue_copy_engine), they run beside the
 * queue's kernels, as in the paper's model: the node may start once its
 * queue has a gap of its own length and its inputs have arrived.  The
 * copies start when the node is submitted, once its predecessors have
 * ended (a root's host inputs: at the plan's start), and wait for each
 * other on the device's engine, which the plan keeps as one more lane of
 * slots per device, with insertion as on the queues (the paper's model has
 * no such contention: at CCR 1 and 10 a plan without it sent a node's
 * copies to an engine already busy for longer than the node's work).
 * Queues and copy engines start from their current backlog.
 *
 * 5. Plan order.  Queues are in order, and a node fixed to a queue would
 *    be queued as soon as its predecessors allow, so a node ready early
 *    would jump ahead of one planned before it (and take the gap the plan
 *    kept for that one).  Each queue's nodes are chained in planned start
 *    order (mz_task_set_after): a node is placed only after the one
 *    planned before it on its queue, so each queue runs the plan's order,
 *    insertion slots included.  On simulated devices, whose costs are
 *    exact, what runs is then the plan.  The planned start and finish of
 *    every node are reported (mz_task_set_expected_times) for the trace.
 *
 * Cost: O(passes * n * (queues + preds) * log(slots)) time in the worst
 * case; a queue whose earliest possible finish cannot beat the best found
 * is skipped without searching its gaps, and queues are tried fastest
 * class first, so most are.  O(n * classes + queues) memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "maize/device.h"
#include "maize/policy.h"

#define MAX_PASSES 4
#define SCAN_MAX 32

struct slot {
  double s, e;
};

struct qplan {
  struct slot *v;
  unsigned n, cap;
  double maxgap; /* no idle gap before the last slot is longer (an upper bound) */
};

struct edge {
  unsigned p;   /* predecessor's index in the run */
  size_t bytes;
};

struct rank_ix {
  double rank;
  size_t i;
};

/* Plan order on a queue: by queue, then planned start, then index (a
 * predecessor never starts after its successor, and comes first in the
 * run's topological order, so the order agrees with the edges). */
struct qorder_ix {
  int q;
  double st;
  size_t i;
};

static int by_queue_start(const void *a, const void *b) {
  const struct qorder_ix *x = a, *y = b;
  if (x->q != y->q) return x->q < y->q ? -1 : 1;
  if (x->st != y->st) return x->st < y->st ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

static int by_rank(const void *a, const void *b) {
  const struct rank_ix *x = a, *y = b;
  if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* The earliest start >= ready of a gap of length d on queue p. */
static double find_gap(const struct qplan *p, double ready, double d) {
  if (!p->n) return ready;
  double end = p->v[p->n - 1].e;
  if (ready >= end || d > p->maxgap) return ready > end ? ready : end;
  unsigned lo = 0, hi = p->n;
  while (lo < hi) { /* first slot ending after ready */
    unsigned mid = (lo + hi) / 2;
    if (p->v[mid].e <= ready) lo = mid + 1;
    else hi = mid;
  }
  /* Gaps are searched from ready on, up to SCAN_MAX slots: beyond, the
   * node goes after the last slot (a valid, slightly worse choice) so that
   * long plans stay linear. */
  double s = ready;
  unsigned stop = p->n - lo > SCAN_MAX ? lo + SCAN_MAX : p->n;
  for (unsigned j = lo; j < stop; j++) {
    if (s + d <= p->v[j].s) return s;
    if (p->v[j].e > s) s = p->v[j].e;
  }
  return stop == p->n ? s : end;
}

static int insert_slot(struct qplan *p, double s, double e) {
  if (p->n == p->cap) {
    unsigned cap = p->cap ? p->cap * 2 : 16;
    struct slot *v = realloc(p->v, cap * sizeof *v);
    if (!v) return -2; /* MZ_ENOMEM */
    p->v = v;
    p->cap = cap;
  }
  double end = p->n ? p->v[p->n - 1].e : 0;
  if (s >= end) { /* appended: a new gap before it */
    if (s - end > p->maxgap) p->maxgap = s - end;
    p->v[p->n++] = (struct slot){s, e};
    return 0;
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

struct heft {
  unsigned nq, ndev, ncls;
  unsigned *qcls, *qdev; /* per queue */
  unsigned *dcls;        /* per device: its class */
  int *rep;              /* per class: a queue of it */
  unsigned *qorder;      /* queues, fastest class first (per plan) */
  int *lead;             /* per queue: the first queue of its device when the device's queues share it, else -1 */
  bool *copy;            /* per queue: its device has a copy engine */
  /* per queue: the host's cores its device keeps busy per node
   * (mz_sched_device_host_cores); more than one: it holds them all */
  unsigned *host;
  bool any_gang;
  bool *worker; /* per queue: a CPU worker's (it sleeps when idle) */
};

static void heft_fini(void *state) {
  struct heft *h = state;
  if (!h) return;
  free(h->qcls);
  free(h->qdev);
  free(h->dcls);
  free(h->rep);
  free(h->qorder);
  free(h->lead);
  free(h->copy);
  free(h->host);
  free(h->worker);
  free(h);
}

static int heft_init(const mz_sched *s, void **state) {
  struct heft *h = calloc(1, sizeof *h);
  if (!h) return -2; /* MZ_ENOMEM */
  h->nq = mz_sched_queue_count(s);
  h->ndev = mz_sched_device_count(s);
  for (unsigned d = 0; d < h->ndev; d++) {
    unsigned c = mz_sched_device_class(s, d);
    if (c + 1 > h->ncls) h->ncls = c + 1;
  }
  h->qcls = malloc((h->nq + 1) * sizeof *h->qcls);
  h->qdev = malloc((h->nq + 1) * sizeof *h->qdev);
  h->dcls = malloc((h->ndev + 1) * sizeof *h->dcls);
  h->qorder = malloc((h->nq + 1) * sizeof *h->qorder);
  h->rep = malloc((h->ncls + 1) * sizeof *h->rep);
  h->lead = malloc((h->nq + 1) * sizeof *h->lead);
  h->copy = malloc((h->nq + 1) * sizeof *h->copy);
  h->host = malloc((h->nq + 1) * sizeof *h->host);
  h->worker = malloc((h->nq + 1) * sizeof *h->worker);
  if (!h->qcls || !h->qdev || !h->dcls || !h->rep || !h->qorder || !h->lead || !h->copy || !h->host || !h->worker) {
    heft_fini(h);
    return -2;
  }
  for (unsigned c = 0; c < h->ncls; c++) h->rep[c] = -1;
  for (unsigned d = 0; d < h->ndev; d++) h->dcls[d] = mz_sched_device_class(s, d);
  for (unsigned q = 0; q < h->nq; q++) {
    h->qdev[q] = mz_sched_queue_device(s, q);
    h->qcls[q] = mz_sched_device_class(s, h->qdev[q]);
    if (h->rep[h->qcls[q]] < 0) h->rep[h->qcls[q]] = (int)q;
    int kind = mz_sched_device_kind(s, h->qdev[q]);
    bool shared = kind == MZ_DEVICE_OPENCL || kind == MZ_DEVICE_CUDA;
    h->worker[q] = kind == MZ_DEVICE_CPU;
    h->lead[q] = shared ? (q && h->qdev[q - 1] == h->qdev[q] ? h->lead[q - 1] : (int)q) : -1;
    /* A copy engine on the host's cores (PoCL's) is a memcpy there: it
     * overlaps nothing, so its copies count as the node's own work. */
    h->copy[q] = mz_sched_queue_copy_engine(s, q) && !mz_sched_device_host_cores(s, h->qdev[q]);
    h->host[q] = mz_sched_device_host_cores(s, h->qdev[q]);
    if (h->host[q] > 1) h->any_gang = true;
  }
  *state = h;
  return mz_sched_measure_links(s);
}

/* What one planning pass reads and writes. */
struct pass {
  const struct heft *h;
  const mz_sched *s;
  mz_task *const *tasks;
  size_t n;
  const double *w;            /* [i * ncls + c] */
  const struct link *links;   /* [a * ncls + b], distinct devices */
  const size_t *eoff;
  const struct edge *edges;
  const struct rank_ix *order;
  const bool *alive;          /* per queue */
  bool *allow;                /* per queue: in the pass's allowed list */
  const double *backlog;      /* per queue: busy from plan time 0 until this */
  struct qplan *qp;
  struct qplan *cq;           /* per device: its copy engine's lane */
  const double *cbacklog;     /* per device: the copy engine busy until this */
  double *aft, *ast, *base, *disc, *xfer; /* ast, aft: planned start and finish */
  int *placed;
  /* Per node, the devices its output was already planned to be copied to
   * (NCOPY at most), and when it arrives there: a later successor on such
   * a device reads that copy (the runtime keeps a valid copy until the
   * buffer is written again, and a node's output is written once). */
  unsigned *ndst, *dst;
  double *arrive;
  double *darr; /* per device: the latest arrival of a copy made before, for the node being placed */
};

#define NCOPY 4

static double link_cost(const struct link *l, size_t bytes) { return l->lat + l->per_byte * (double)bytes; }

/* Step 3 on the allowed queues (fastest class first; skip[k] is where the
 * class of allowed[k] ends in the list).  Returns the predicted end,
 * INFINITY as soon as it reaches cutoff (a better plan is known), or a
 * negative code. */
/* A queue of class c that can run t: the class's first queue, or another
 * when a run leaves that one's device out (mz_graph_run_with), or -1. */
static int class_queue(const struct heft *h, const mz_sched *s, const mz_task *t, unsigned c) {
  if (h->rep[c] < 0) return -1;
  if (mz_task_can_run(s, t, (unsigned)h->rep[c])) return h->rep[c];
  for (unsigned q = 0; q < h->nq; q++)
    if (h->qcls[q] == c && mz_task_can_run(s, t, q)) return (int)q;
  return -1;
}

/* The earliest start >= ready of a gap of length d on every queue on the
 * host's cores: a node of a device that holds them all (PoCL's CPU device)
 * runs while the CPU workers and other such devices wait. */
static double find_host_gap(const struct pass *P, double ready, double d) {
  const struct heft *h = P->h;
  double st = ready;
  for (unsigned round = 0; round < 64; round++) {
    bool moved = false;
    for (unsigned q = 0; q < h->nq; q++) {
      if (!h->host[q] || !P->alive[q]) continue;
      double g = find_gap(&P->qp[q], st, d);
      if (g > st) {
        st = g;
        moved = true;
      }
    }
    if (!moved) return st;
  }
  /* Gaps that never line up: after the last slot of every host queue. */
  for (unsigned q = 0; q < h->nq; q++)
    if (h->host[q] && P->alive[q] && P->qp[q].n && P->qp[q].v[P->qp[q].n - 1].e > st) st = P->qp[q].v[P->qp[q].n - 1].e;
  return st;
}

static double eft_pass(struct pass *P, const unsigned *allowed, const unsigned *skip, unsigned nallowed,
                       double cutoff) {
  const struct heft *h = P->h;
  unsigned nq = h->nq, ncls = h->ncls;
  double makespan = 0;
  for (unsigned q = 0; q < nq; q++) {
    P->qp[q].n = 0;
    P->qp[q].maxgap = 0;
    if (P->backlog[q] > 0 && insert_slot(&P->qp[q], 0, P->backlog[q])) return -2;
  }
  for (unsigned k = 0; k < h->ndev; k++) {
    P->cq[k].n = 0;
    P->cq[k].maxgap = 0;
    if (P->cbacklog[k] > 0 && insert_slot(&P->cq[k], 0, P->cbacklog[k])) return -2;
  }
  for (size_t i = 0; i < P->n; i++) P->placed[i] = -1, P->ndst[i] = 0;
  for (unsigned q = 0; q < nq; q++) P->allow[q] = false;
  for (unsigned k = 0; k < nallowed; k++) P->allow[allowed[k]] = true;
  for (size_t oi = 0; oi < P->n; oi++) {
    size_t i = P->order[oi].i;
    mz_task *t = P->tasks[i];
    bool root = P->eoff[i] == P->eoff[i + 1];
    double ready = 0;
    int lastq = -1; /* the queue of the predecessor planned to end last */
    for (unsigned c = 0; c < ncls; c++) P->base[c] = 0;
    /* Inputs from other devices: every class pays its link; the device
     * holding the predecessor's output pays nothing (disc takes it back). */
    for (size_t k = P->eoff[i]; k < P->eoff[i + 1]; k++) {
      unsigned p = P->edges[k].p;
      int pq = P->placed[p];
      if (pq < 0) continue;
      if (P->aft[p] > ready || lastq < 0) {
        if (P->aft[p] > ready) ready = P->aft[p];
        lastq = pq;
      }
      if (!P->edges[k].bytes) continue;
      unsigned pc = h->qcls[pq];
      for (unsigned c = 0; c < ncls; c++) P->base[c] += link_cost(&P->links[pc * ncls + c], P->edges[k].bytes);
      P->disc[h->qdev[pq]] += link_cost(&P->links[pc * ncls + pc], P->edges[k].bytes);
      /* A device that already gets p's output for an earlier successor
       * pays nothing for it, but the node waits for that copy. */
      for (unsigned a = 0; a < P->ndst[p]; a++) {
        unsigned e = P->dst[p * NCOPY + a];
        P->disc[e] += link_cost(&P->links[pc * ncls + h->dcls[e]], P->edges[k].bytes);
        if (P->arrive[p * NCOPY + a] > P->darr[e]) P->darr[e] = P->arrive[p * NCOPY + a];
      }
    }
    if (root) mz_task_transfer_ns_all(P->s, t, P->xfer);
    int best = -1;
    double best_f = INFINITY, best_s = 0, best_cs = 0, best_x = 0;
    /* On a tie, a CPU worker's queue whose node (a predecessor) ends last
     * wins, so it is tried first (when the pass allows it): that worker is
     * running when the node becomes ready and takes it at once, where an
     * idle worker sleeps and must be woken (on a loaded host that took 4 to
     * 50 ms before the pipeline's verify).  Other queues keep the plain
     * order: nothing sleeps on them (the simulator's plans are unchanged). */
    if (lastq >= 0 && (!P->allow[lastq] || !h->worker[lastq])) lastq = -1;
    for (int any = 0; any < 2 && best < 0; any++)
      for (int oq = any || lastq < 0 ? 0 : -1, nl = any ? (int)nq : (int)nallowed; oq < nl; oq++) {
        unsigned q = oq < 0 ? (unsigned)lastq : any ? h->qorder[oq] : allowed[oq], c = h->qcls[q];
        if (!any && oq >= 0 && (int)q == lastq) continue; /* tried first */
        double wc = P->w[i * ncls + c];
        if (!isfinite(wc) || !P->alive[q] || !mz_task_can_run(P->s, t, q)) continue;
        if (!any && oq >= 0 && ready + wc >= best_f) { /* no queue of this class can do better */
          oq = (int)skip[oq] - 1;
          continue;
        }
        double d, from = ready > P->darr[h->qdev[q]] ? ready : P->darr[h->qdev[q]], cs = 0, x = 0;
        if (h->copy[q]) {
          /* Copies beside the kernels, on the device's copy lane, from the
           * node's submission (its predecessors' end) on. */
          d = wc;
          x = P->base[c] - P->disc[h->qdev[q]] + (root ? P->xfer[q] : 0);
          if (x > 1e-9) {
            cs = find_gap(&P->cq[h->qdev[q]], ready, x);
            if (cs + x > from) from = cs + x;
          } else {
            x = 0;
          }
        } else {
          d = wc + P->base[c] - P->disc[h->qdev[q]] + (root ? P->xfer[q] : 0);
          if (d < wc) d = wc; /* rounding */
        }
        if (from + d >= best_f) continue;
        double st = h->host[q] > 1 ? find_host_gap(P, from, d) : find_gap(&P->qp[q], from, d);
        if (st + d < best_f) {
          best_f = st + d;
          best_s = st;
          best_cs = cs;
          best_x = x;
          best = (int)q;
        }
      }
    for (size_t k = P->eoff[i]; k < P->eoff[i + 1]; k++) {
      unsigned p = P->edges[k].p;
      int pq = P->placed[p];
      if (pq < 0) continue;
      P->disc[h->qdev[pq]] = 0;
      bool there = best < 0 || !P->edges[k].bytes || h->qdev[pq] == h->qdev[best];
      for (unsigned a = 0; a < P->ndst[p]; a++) {
        unsigned e = P->dst[p * NCOPY + a];
        P->disc[e] = 0;
        P->darr[e] = 0;
        if (best >= 0 && e == h->qdev[best]) there = true;
      }
      if (!there && P->ndst[p] < NCOPY) { /* copied for this node: in before it starts */
        P->dst[p * NCOPY + P->ndst[p]] = h->qdev[best];
        P->arrive[p * NCOPY + P->ndst[p]] = h->copy[best] ? best_cs + best_x : best_f - P->w[i * ncls + h->qcls[best]];
        P->ndst[p]++;
      }
    }
    P->placed[i] = best;
    P->aft[i] = best >= 0 ? best_f : ready;
    P->ast[i] = best >= 0 ? best_s : ready;
    if (best < 0) continue; /* no queue can run it: select reports it */
    if (h->host[best] > 1) { /* it holds every queue on the host's cores */
      for (unsigned q = 0; q < nq; q++)
        if (h->host[q] && P->alive[q] && insert_slot(&P->qp[q], best_s, best_f)) return -2;
    } else if (insert_slot(&P->qp[best], best_s, best_f)) {
      return -2;
    }
    if (best_x > 0 && insert_slot(&P->cq[h->qdev[best]], best_cs, best_cs + best_x)) return -2;
    if (best_f > makespan) makespan = best_f;
    if (makespan >= cutoff) return INFINITY;
  }
  return makespan;
}

static int heft_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct heft *h = state;
  unsigned nq = h->nq, ndev = h->ndev, ncls = h->ncls;
  const unsigned *qcls = h->qcls, *qdev = h->qdev;
  const int *rep = h->rep;
  double *w = malloc((n * ncls + 1) * sizeof *w); /* cost per node and class, INFINITY: cannot */
  double *wbar = malloc((n + 1) * sizeof *wbar), *rank = calloc(n + 1, sizeof *rank);
  double *aft = malloc((n + 1) * sizeof *aft), *ast = malloc((n + 1) * sizeof *ast);
  double *best_aft = malloc((n + 1) * sizeof *best_aft), *best_ast = malloc((n + 1) * sizeof *best_ast);
  int *placed = malloc((n + 1) * sizeof *placed), *best_placed = malloc((n + 1) * sizeof *best_placed);
  struct rank_ix *order = malloc((n + 1) * sizeof *order);
  struct link *links = malloc(((size_t)ncls * ncls + 1) * sizeof *links);
  struct qplan *qp = calloc(nq + 1, sizeof *qp), *cq = calloc(ndev + 1, sizeof *cq);
  double *cbacklog = calloc(ndev + 1, sizeof *cbacklog);
  size_t *eoff = malloc((n + 1) * sizeof *eoff);
  double *base = calloc(ncls + 1, sizeof *base), *disc = calloc(ndev + 1, sizeof *disc);
  double *xfer = calloc(nq + 1, sizeof *xfer), *backlog = calloc(nq + 1, sizeof *backlog);
  double *slow = calloc(ncls + 1, sizeof *slow);
  bool *alive = calloc(nq + 1, sizeof *alive), *allow = calloc(nq + 1, sizeof *allow);
  unsigned *allowed = calloc(nq + 1, sizeof *allowed), *skip = calloc(nq + 1, sizeof *skip);
  unsigned *cls_order = malloc((ncls + 1) * sizeof *cls_order);
  unsigned *ndst = malloc((n + 1) * sizeof *ndst), *dst = malloc((n * NCOPY + 1) * sizeof *dst);
  double *arrive = malloc((n * NCOPY + 1) * sizeof *arrive), *darr = calloc(ndev + 1, sizeof *darr);
  struct edge *edges = NULL;
  int rc = -2; /* MZ_ENOMEM */
  if (!w || !wbar || !rank || !aft || !ast || !best_aft || !best_ast || !placed || !best_placed || !order || !links || !qp || !cq || !cbacklog || !eoff || !base || !disc ||
      !xfer || !backlog || !slow || !alive || !allow || !allowed || !skip || !cls_order || !ndst || !dst || !arrive || !darr)
    goto out;

  for (unsigned q = 0; q < nq; q++)
    alive[q] = !mz_sched_device_dead(s, qdev[q]) && (h->lead[q] < 0 || h->lead[q] == (int)q);
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

  /* 1. Costs per class, and how slow each class is on this run (the mean
   * of its cost over the fastest cost, per node it can run). */
  double *cnt = calloc(ncls + 1, sizeof *cnt);
  if (!cnt) goto out;
  for (size_t i = 0; i < n; i++) {
    double known = 0, fastest = INFINITY;
    unsigned nknown = 0;
    for (unsigned c = 0; c < ncls; c++) {
      double v = INFINITY;
      int kq = class_queue(h, s, tasks[i], c);
      if (kq >= 0) {
        v = mz_task_expected_ns(s, tasks[i], (unsigned)kq);
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
    for (unsigned c = 0; c < ncls; c++) {
      double *v = &w[i * ncls + c];
      if (*v < 0) *v = fill;
      if (*v < fastest) fastest = *v;
    }
    double sum = 0, nc = 0;
    for (unsigned q = 0; q < nq; q++) {
      double v = w[i * ncls + qcls[q]];
      if (isfinite(v)) {
        sum += v;
        nc++;
      }
    }
    wbar[i] = nc ? sum / nc : 0;
    for (unsigned c = 0; c < ncls; c++) {
      double v = w[i * ncls + c];
      if (isfinite(v) && fastest > 0) {
        slow[c] += v / fastest;
        cnt[c]++;
      }
    }
  }
  for (unsigned c = 0; c < ncls; c++) slow[c] = cnt[c] ? slow[c] / cnt[c] : INFINITY;
  free(cnt);

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

  /* Queues start with what they already have to do; they are tried
   * fastest class first. */
  uint64_t now = mz_sched_now_ns(s);
  for (unsigned q = 0; q < nq; q++) {
    uint64_t r = mz_sched_queue_ready_ns(s, q);
    backlog[q] = r > now ? (double)(r - now) : 0;
  }
  for (unsigned q = 0; q < nq; q++)
    if (h->copy[q]) {
      uint64_t r = mz_sched_copy_ready_ns(s, q);
      cbacklog[qdev[q]] = r > now ? (double)(r - now) : 0;
    }
  for (unsigned q = 0; q < nq; q++) /* a shared device's work left, on its first queue */
    if (h->lead[q] >= 0 && h->lead[q] != (int)q) backlog[h->lead[q]] += backlog[q];
  if (h->any_gang) { /* the CPU workers wait for what a device holding the host's cores has to do */
    double g = 0;
    for (unsigned q = 0; q < nq; q++)
      if (h->host[q] > 1 && alive[q] && backlog[q] > g) g = backlog[q];
    for (unsigned q = 0; q < nq; q++)
      if (h->host[q] == 1 && backlog[q] < g) backlog[q] = g;
  }
  /* Classes by slowness (insertion sort: there are few; stable). */
  for (unsigned c = 0; c < ncls; c++) {
    unsigned j = c;
    for (; j > 0 && slow[cls_order[j - 1]] > slow[c]; j--) cls_order[j] = cls_order[j - 1];
    cls_order[j] = c;
  }
  unsigned nused = 0;
  for (unsigned k = 0; k < ncls; k++)
    for (unsigned q = 0; q < nq; q++)
      if (qcls[q] == cls_order[k]) h->qorder[nused++] = q;
  unsigned ncap = 0; /* classes that can run something */
  while (ncap < ncls && isfinite(slow[cls_order[ncap]])) ncap++;

  /* 3 and 4: one pass with every device, then one per shorter prefix of
   * the classes by speed, then the fastest device alone (when its class
   * has several).  A pass stops once it cannot beat the best plan, and is
   * skipped when its work bound (the sum over nodes of the cheapest cost
   * among its queues, over its queue count) already cannot. */
  struct pass P = {h,     s,  tasks,    n,   w,   links, eoff, edges, order, alive, allow, backlog,
                   qp,    cq, cbacklog, aft, ast, base,  disc, xfer,  placed, ndst, dst, arrive, darr};
  double best_end = INFINITY;
  unsigned nprefix = ncap < MAX_PASSES ? ncap : MAX_PASSES;
  if (!nprefix) nprefix = 1;
  bool one_dev = false;
  for (unsigned q = 1; q < nq && ncap; q++)
    if (qcls[q] == cls_order[0] && qdev[q] != qdev[h->qorder[0]]) one_dev = true;
  /* A device that holds the host's cores adds no capacity to the CPU's
   * queues, yet step 3 fills it while it ends a node first (at the cost of
   * every core): one more pass leaves such devices out. */
  bool nogang = false;
  for (unsigned q = 0; q < nq && h->any_gang; q++) nogang = nogang || (alive[q] && h->host[q] <= 1);
  for (unsigned pi = nprefix + 1 + nogang; pi-- > (one_dev ? 0u : 1u);) {
    /* pi 0: one device; then prefixes of 1, 2, ... classes, the pass at
     * nprefix with them all, the one after it without the devices that
     * hold the host's cores. */
    unsigned k = pi >= nprefix ? ncls : pi, na = 0;
    for (unsigned c = 0; c < ncls; c++) base[c] = 0; /* base: allowed classes, as a flag */
    for (unsigned j = 0; j < k; j++) base[cls_order[j]] = 1;
    if (pi == nprefix + 1)
      for (unsigned q = 0; q < nq; q++)
        if (h->host[q] > 1) base[qcls[q]] = 0;
    for (unsigned oq = 0; oq < nq; oq++) { /* fastest class first */
      unsigned q = h->qorder[oq];
      if (pi ? base[qcls[q]] != 0 : qdev[q] == qdev[h->qorder[0]]) allowed[na++] = q;
    }
    for (unsigned j = na; j-- > 0;) skip[j] = j + 1 < na && qcls[allowed[j + 1]] == qcls[allowed[j]] ? skip[j + 1] : j + 1;
    if (isfinite(best_end)) {
      double work = 0;
      for (size_t i = 0; i < n; i++) {
        double m = INFINITY;
        for (unsigned c = 0; c < ncls; c++)
          if (base[c] != 0 && w[i * ncls + c] < m) m = w[i * ncls + c];
        if (isfinite(m)) work += m;
      }
      if (na && work / (pi ? na : 1) >= best_end) continue;
    }
    for (unsigned c = 0; c < ncls; c++) base[c] = 0;
    double end = eft_pass(&P, allowed, skip, na, best_end);
    if (end < 0) goto out;
    if (end < best_end) {
      best_end = end;
      memcpy(best_placed, placed, n * sizeof *placed);
      memcpy(best_aft, aft, n * sizeof *aft);
      memcpy(best_ast, ast, n * sizeof *ast);
    }
  }
  for (size_t i = 0; i < n; i++)
    if (best_placed[i] >= 0) {
      mz_task_set_queue(s, tasks[i], (unsigned)best_placed[i]);
      /* The plan's times, for traces (plan time 0 is now): the slot, the
       * node's input transfers included. */
      mz_task_set_expected_times(s, tasks[i], now + (uint64_t)llround(best_ast[i]),
                                 now + (uint64_t)llround(best_aft[i]));
    }
  /* 5. Each queue runs its nodes in planned order, insertion slots
   * included: a node ready before the one planned ahead of it waits. */
  struct qorder_ix *qo = malloc((n + 1) * sizeof *qo);
  if (!qo) goto out;
  size_t nqo = 0;
  for (size_t i = 0; i < n; i++)
    if (best_placed[i] >= 0) qo[nqo++] = (struct qorder_ix){best_placed[i], best_ast[i], i};
  qsort(qo, nqo, sizeof *qo, by_queue_start);
  for (size_t k = 1; k < nqo; k++)
    if (qo[k].q == qo[k - 1].q) mz_task_set_after(s, tasks[qo[k].i], tasks[qo[k - 1].i]);
  free(qo);
  rc = 0;
out:
  for (unsigned q = 0; qp && q < nq; q++) free(qp[q].v);
  free(qp);
  for (unsigned k = 0; cq && k < ndev; k++) free(cq[k].v);
  free(cq);
  free(cbacklog);
  free(w);
  free(wbar);
  free(rank);
  free(aft);
  free(ast);
  free(best_aft);
  free(best_ast);
  free(placed);
  free(best_placed);
  free(order);
  free(links);
  free(eoff);
  free(edges);
  free(base);
  free(disc);
  free(xfer);
  free(backlog);
  free(slow);
  free(alive);
  free(allow);
  free(allowed);
  free(skip);
  free(cls_order);
  free(ndst);
  free(dst);
  free(arrive);
  free(darr);
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
    .description = "whole-run list scheduling by upward rank, earliest finish time with insertion, best device subset",
    .init = heft_init,
    .fini = heft_fini,
    .plan = heft_plan,
    .select = heft_select,
};
