/* dmda: deque model data aware (after StarPU's dmda).  When a node is
 * ready, it goes to the queue where it is expected to finish first:
 *
 *   finish(q) = ready(q) + transfers(q) + expected(q)
 *
 * where ready(q) is when q will have done the work already given to it
 * (mz_sched_queue_ready_ns), transfers(q) the time to bring the node's
 * stale inputs to q's memory (measured links: mz_sched_measure_links at
 * init), and expected(q) the perf model's estimate.  Where q's device has
 * a copy engine (mz_sched_queue_copy_engine) the transfers start at once,
 * behind the copies already given to that engine, and overlap the work
 * before the node on q:
 *
 *   finish(q) = max(ready(q), copy_ready(q) + transfers(q)) + expected(q)  While the model of
 * some capable device is unsure (no estimate yet), the node goes to the
 * soonest-free such queue instead, so the model calibrates (exploration);
 * a kernel is explored once per device class and size bucket, a few
 * samples each.
 *
 * Deciding only at ready time is what makes the transfer and backlog terms
 * exact: the inputs are where they will be read from.  Ties go to the
 * calling CPU worker's queue (mz_sched_current_queue: it is running, where
 * another idle worker must be woken), else to the lowest queue number, so
 * runs on simulated devices are deterministic.
 *
 * Devices whose queues share the device (OpenCL and CUDA: kernels from
 * several queues run at once and slow each other down; the CPU has a
 * worker per queue and simulated queues are independent) count as one
 * processor: their expected ready time is now plus the work left on all
 * their queues, and they get work on their first queue only, so kernels
 * there run one after another and the perf model learns their time alone,
 * not the time of several sharing the device.
 *
 * Devices on the host's cores (mz_sched_device_host_cores): a device
 * whose node keeps more than one of them busy (PoCL's CPU device) holds
 * them all while it runs, so it adds no capacity to the CPU's queues.
 * Its expected ready time is the latest of every queue on the host's
 * cores, theirs is at least its own, and its copies (a memcpy on those
 * cores) count as its work even where it has a copy engine.
 *
 * Where the run may go (plan, before the run starts): greedy finish times
 * count the transfers of a node's inputs but not those its successors will
 * make for its output, so once a run with dear transfers is spread over
 * devices, nearly every edge crosses and the queues fill with copies (with
 * CCR 10, dmda ended 8 to 15 times later than the fastest device alone).
 * So the plan rehearses the run: dmda's own rule on a virtual clock, each
 * node decided when its predecessors are predicted to end (a heap of ready
 * times), with the queues' and copy engines' backlogs, the links between
 * classes, and a node's output copied to a device once for all its readers
 * there.  It rehearses three homes: one device of the fastest class (the
 * class whose devices would run the whole run soonest; nodes it cannot run
 * go where they can), that whole class (when it has several devices and
 * others exist), and every device; the run gets the home that ends first,
 * the single device on a tie (it moves nothing).  Where some device holds
 * the host's cores, a fourth home leaves such devices out: the greedy rule
 * sees only each node's finish, and would fill such a device while it ends
 * a node first, though it ends it at the cost of every core.  The first
 * nodes of the run pay for their host inputs (mz_task_transfer_ns_all), so
 * a home whose memory lacks them is not taken for free.  A home is kept in each
 * task's policy word (a device, or a class: HOME_CLASS); select only looks
 * there, except for nodes no queue of the home can run.  Nodes without an
 * estimate leave the run free, so exploration still calibrates the models.
 * The rehearsal costs O(n (classes + queues) + edges (classes + copies))
 * per home.  (It replaced a formula that compared the single device with
 * the work spread evenly plus every edge's transfer shared among the
 * devices: too dear at CCR 1, where a spread run on two devices ends at
 * the work bound.)
 *
 * dmdas (after StarPU's dmdas) places as dmda does and also orders each
 * queue (policy ABI 2's pick): its plan computes each node's upward rank
 * (HEFT's priority: the longest expected path from the node to the run's
 * end, in the high half of the policy word), and when a queue has a free
 * slot it takes the pending node of highest rank, the oldest on ties, so
 * the critical path goes first among the ready nodes placed there.  Its
 * nodes wait in the runtime's pending lists, in no backlog the runtime
 * knows: select adds what each adds to its queue's finish time to a
 * per-queue sum of its own, which pick takes down.
 *
 * Cost per decision: one estimate and one capability check per device
 * class, one transfer estimate per input and memory node, and a pass over
 * the queues with what the state caches (each queue's device and class). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "maize/device.h"
#include "maize/policy.h"

enum { HOST_NONE, HOST_CORE, HOST_GANG };

struct dmda {
  unsigned nq, ncls;
  unsigned *qdev, *qcls; /* per queue */
  int *lead;             /* per queue: the first queue of its device when the device's queues share it, else -1 */
  bool *copy;            /* per queue: its device has a copy engine */
  bool all_copy;         /* every device has one */
  /* per queue: HOST_NONE, or its device shares the host's cores as one of
   * them (HOST_CORE, a CPU worker) or holding them all (HOST_GANG) */
  unsigned char *host;
  bool any_gang;
  /* dmdas: the work selected for each queue and not yet picked (it is in
   * no backlog the runtime knows), in expected ns, and how many nodes. */
  bool sorted;
  pthread_mutex_t pm;
  double *pend_ns;
  unsigned *pend_n;
};

static void dmda_fini(void *state) {
  struct dmda *d = state;
  if (!d) return;
  if (d->sorted) pthread_mutex_destroy(&d->pm);
  free(d->pend_ns);
  free(d->pend_n);
  free(d->qdev);
  free(d->qcls);
  free(d->lead);
  free(d->copy);
  free(d->host);
  free(d);
}

static int dmda_init(const mz_sched *s, void **state) {
  struct dmda *d = calloc(1, sizeof *d);
  if (!d) return -2; /* MZ_ENOMEM */
  d->nq = mz_sched_queue_count(s);
  d->qdev = malloc((d->nq + 1) * sizeof *d->qdev);
  d->qcls = malloc((d->nq + 1) * sizeof *d->qcls);
  d->lead = malloc((d->nq + 1) * sizeof *d->lead);
  d->copy = malloc((d->nq + 1) * sizeof *d->copy);
  d->host = malloc((d->nq + 1) * sizeof *d->host);
  if (!d->qdev || !d->qcls || !d->lead || !d->copy || !d->host) {
    dmda_fini(d);
    return -2;
  }
  for (unsigned q = 0; q < d->nq; q++) {
    d->qdev[q] = mz_sched_queue_device(s, q);
    d->qcls[q] = mz_sched_device_class(s, d->qdev[q]);
    if (d->qcls[q] + 1 > d->ncls) d->ncls = d->qcls[q] + 1;
    int kind = mz_sched_device_kind(s, d->qdev[q]);
    bool shared = kind == MZ_DEVICE_OPENCL || kind == MZ_DEVICE_CUDA;
    d->lead[q] = shared ? (q && d->qdev[q - 1] == d->qdev[q] ? d->lead[q - 1] : (int)q) : -1;
    /* A copy engine on the host's cores (PoCL's) is a memcpy there: it
     * overlaps nothing, so its copies count as the node's own work. */
    d->copy[q] = mz_sched_queue_copy_engine(s, q) && !mz_sched_device_host_cores(s, d->qdev[q]);
    unsigned hc = mz_sched_device_host_cores(s, d->qdev[q]);
    d->host[q] = hc > 1 ? HOST_GANG : hc ? HOST_CORE : HOST_NONE;
    if (hc > 1) d->any_gang = true;
  }
  d->all_copy = d->nq > 0;
  for (unsigned q = 0; q < d->nq; q++) d->all_copy = d->all_copy && d->copy[q];
  *state = d;
  /* Transfer costs from measured links (a no-op on simulated devices). */
  return mz_sched_measure_links(s);
}

enum { STACK_Q = 256 };

/* The home a plan gives a run, in the low 16 bits of each task's policy
 * word: 0, free; a device + 1; or HOME_CLASS | (class + 1): the devices of
 * one class (the runtime has at most 1024 devices).  dmdas keeps the
 * node's upward rank, a float, in the high 32 bits (64-bit words only). */
#define HOME_CLASS ((uintptr_t)1 << 15)
#define HOME_NOGANG ((uintptr_t)1 << 14) /* every device but those holding the host's cores */
#define HOME_MASK ((uintptr_t)0xffff)
#define RANK_BITS (UINTPTR_MAX > 0xffffffffu)

/* ---- the plan's rehearsal: dmda's own decisions on a virtual clock ---- */

struct rh_link {
  double lat, per_byte;
};

struct rh {
  const struct dmda *d;
  const mz_sched *s;
  mz_task *const *tasks;
  size_t n, ne;
  const double *w;            /* [i * ncls + c]: INFINITY where the class cannot run it */
  const size_t *eoff;         /* preds of i: edges[eoff[i] .. eoff[i + 1]) */
  const unsigned *ep;         /* predecessor index per edge */
  const size_t *ebytes;
  const size_t *soff;         /* successors of i: succ[soff[i] .. soff[i + 1]) */
  const unsigned *succ;
  const struct rh_link *links; /* [a * ncls + b], distinct devices */
  const double *qback, *cback; /* per queue: backlog of the queue, of its copy engine */
  double *qfree, *cfree;       /* per queue (copy engine: its lead queue's device's first queue) */
  double *fin, *rdy;
  int *dev;                    /* per node: the device it ran on */
  const unsigned *dcls;        /* per device: its class */
  const bool *live;            /* per queue: takes nodes (alive, and its device's first queue where they share it) */
  double *base, *disc;         /* per class, per device: the copies of the node being placed */
  unsigned *left, *heap, *ncp, *cpd; /* preds not yet done; ready heap; copies made (device) */
  /* The run's first nodes read host data (or data of earlier runs): what
   * bringing it to each queue costs now, [rix[i] * nq + q]; rix[i] is -1
   * for a node with predecessors in the run (its edges say what it reads). */
  const double *rx;
  const long *rix;
};

#define RH_NCOPY 4

static bool rh_less(const struct rh *R, unsigned a, unsigned b) {
  return R->rdy[a] < R->rdy[b] || (R->rdy[a] == R->rdy[b] && a < b);
}

static void rh_push(struct rh *R, size_t *nh, unsigned v) {
  size_t i = (*nh)++;
  R->heap[i] = v;
  while (i && rh_less(R, R->heap[i], R->heap[(i - 1) / 2])) {
    unsigned t = R->heap[i];
    R->heap[i] = R->heap[(i - 1) / 2];
    R->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static unsigned rh_pop(struct rh *R, size_t *nh) {
  unsigned top = R->heap[0];
  R->heap[0] = R->heap[--*nh];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *nh && rh_less(R, R->heap[l], R->heap[m])) m = l;
    if (r < *nh && rh_less(R, R->heap[r], R->heap[m])) m = r;
    if (m == i) break;
    unsigned t = R->heap[i];
    R->heap[i] = R->heap[m];
    R->heap[m] = t;
    i = m;
  }
  return top;
}

/* The run as dmda would place it if every node became ready when its
 * predecessors are predicted to end, on the queues allowed (allow[q]), the
 * device of each copy reused by later readers there.  Returns the
 * predicted end (plan time 0 is now), or INFINITY once a node ends at
 * cutoff or later (a home known to end by then is better). */
static double rehearse(struct rh *R, const bool *allow, double cutoff) {
  const struct dmda *d = R->d;
  unsigned nq = d->nq, ncls = d->ncls;
  for (unsigned q = 0; q < nq; q++) {
    R->qfree[q] = R->qback[q];
    R->cfree[q] = R->cback[q];
  }
  /* The host's cores (HOST_CORE, HOST_GANG queues) are all free by hostfree. */
  double hostfree = 0;
  for (unsigned q = 0; q < nq; q++)
    if (d->host[q] == HOST_GANG && R->live[q] && R->qfree[q] > hostfree) hostfree = R->qfree[q];
  for (unsigned q = 0; q < nq; q++) /* the workers wait for what a gang device has to do */
    if (d->host[q] == HOST_CORE && R->qfree[q] < hostfree) R->qfree[q] = hostfree;
  for (unsigned q = 0; q < nq; q++)
    if (d->host[q] != HOST_NONE && R->live[q] && R->qfree[q] > hostfree) hostfree = R->qfree[q];
  size_t nh = 0;
  for (size_t i = 0; i < R->n; i++) {
    R->left[i] = (unsigned)(R->eoff[i + 1] - R->eoff[i]);
    R->ncp[i] = 0;
    R->rdy[i] = 0;
    if (!R->left[i]) rh_push(R, &nh, (unsigned)i);
  }
  double end = 0;
  while (nh) {
    unsigned i = rh_pop(R, &nh);
    double ready = R->rdy[i], best_f = INFINITY, best_x = 0;
    int best = -1;
    /* The copies each class would make (base), less those a device needs
     * not make: its own outputs, and copies made there before (disc). */
    for (unsigned c = 0; c < ncls; c++) R->base[c] = 0;
    for (size_t k = R->eoff[i]; k < R->eoff[i + 1]; k++) {
      unsigned p = R->ep[k];
      if (!R->ebytes[k] || R->dev[p] < 0) continue;
      unsigned pc = R->dcls[R->dev[p]];
      for (unsigned c = 0; c < ncls; c++) {
        const struct rh_link *l = &R->links[pc * ncls + c];
        R->base[c] += l->lat + l->per_byte * (double)R->ebytes[k];
      }
      const struct rh_link *l = &R->links[pc * ncls + pc];
      R->disc[R->dev[p]] += l->lat + l->per_byte * (double)R->ebytes[k];
      for (unsigned a = 0; a < R->ncp[p]; a++) {
        unsigned e = R->cpd[p * RH_NCOPY + a];
        const struct rh_link *m = &R->links[pc * ncls + R->dcls[e]];
        R->disc[e] += m->lat + m->per_byte * (double)R->ebytes[k];
      }
    }
    for (int any = 0; any < 2 && best < 0; any++) /* a node no allowed queue runs goes where it can */
      for (unsigned q = 0; q < nq; q++) {
        unsigned c = d->qcls[q];
        if (!R->live[q] || (!any && !allow[q]) || !isfinite(R->w[i * ncls + c])) continue;
        double x = R->base[c] - R->disc[d->qdev[q]] + (R->rix[i] >= 0 ? R->rx[(size_t)R->rix[i] * nq + q] : 0);
        if (x < 1e-9) x = 0;
        double qf = d->host[q] == HOST_GANG ? hostfree : R->qfree[q];
        double at = qf > ready ? qf : ready, st;
        if (d->copy[q] && x > 0) {
          double cr = R->cfree[q] > ready ? R->cfree[q] : ready;
          st = fmax(at, cr + x);
        } else {
          st = at + x;
        }
        double f = st + R->w[i * ncls + c];
        if (f < best_f) {
          best_f = f;
          best = (int)q;
          best_x = x;
        }
      }
    for (size_t k = R->eoff[i]; k < R->eoff[i + 1]; k++) {
      unsigned p = R->ep[k];
      if (R->dev[p] < 0) continue;
      R->disc[R->dev[p]] = 0;
      for (unsigned a = 0; a < R->ncp[p]; a++) R->disc[R->cpd[p * RH_NCOPY + a]] = 0;
    }
    if (best < 0) { /* nothing runs it: the run fails at select, not here */
      R->fin[i] = ready;
      R->dev[i] = -1;
    } else {
      unsigned q = (unsigned)best, dv = d->qdev[q];
      R->fin[i] = best_f;
      R->dev[i] = (int)dv;
      R->qfree[q] = best_f;
      if (d->host[q] != HOST_NONE && best_f > hostfree) hostfree = best_f;
      if (d->host[q] == HOST_GANG) /* it held every core until best_f */
        for (unsigned k = 0; k < nq; k++)
          if (d->host[k] != HOST_NONE && R->qfree[k] < best_f) R->qfree[k] = best_f;
      if (d->copy[q] && best_x > 0) R->cfree[q] = (R->cfree[q] > ready ? R->cfree[q] : ready) + best_x;
      for (size_t k = R->eoff[i]; k < R->eoff[i + 1]; k++) {
        unsigned p = R->ep[k];
        if (!R->ebytes[k] || R->dev[p] < 0 || R->dev[p] == (int)dv || R->ncp[p] >= RH_NCOPY) continue;
        bool there = false;
        for (unsigned a = 0; a < R->ncp[p] && !there; a++) there = R->cpd[p * RH_NCOPY + a] == dv;
        if (!there) R->cpd[p * RH_NCOPY + R->ncp[p]++] = dv;
      }
    }
    if (R->fin[i] > end) end = R->fin[i];
    if (end >= cutoff) return INFINITY;
    for (size_t k = R->soff[i]; k < R->soff[i + 1]; k++) {
      unsigned v = R->succ[k];
      if (R->fin[i] > R->rdy[v]) R->rdy[v] = R->fin[i];
      if (--R->left[v] == 0) rh_push(R, &nh, v);
    }
  }
  return end;
}

/* Where the run should go: see the top of the file.  Marks every task
 * with its home in its policy word (HOME_CLASS); a run left free keeps 0. */
static int dmda_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct dmda *d = state;
  unsigned nq = d->nq, ncls = d->ncls, ndev = mz_sched_device_count(s);
  if (n < 2 || ncls == 0 || nq == 0) return 0;
  size_t ne = 0;
  for (size_t i = 0; i < n; i++) ne += mz_task_pred_count(tasks[i]);
  double *w = malloc((n * ncls + 1) * sizeof *w), *wc = calloc(ncls + 1, sizeof *wc);
  size_t *eoff = malloc((n + 1) * sizeof *eoff), *soff = calloc(n + 2, sizeof *soff);
  unsigned *ep = malloc((ne + 1) * sizeof *ep), *succ = malloc((ne + 1) * sizeof *succ);
  size_t *ebytes = malloc((ne + 1) * sizeof *ebytes);
  struct rh_link *links = calloc((size_t)ncls * ncls + 1, sizeof *links);
  double *qback = calloc(nq + 1, sizeof *qback), *cback = calloc(nq + 1, sizeof *cback);
  double *qfree = malloc((nq + 1) * sizeof *qfree), *cfree = malloc((nq + 1) * sizeof *cfree);
  double *fin = malloc((n + 1) * sizeof *fin), *rdy = malloc((n + 1) * sizeof *rdy);
  int *dev = malloc((n + 1) * sizeof *dev), *rep = malloc((ncls + 1) * sizeof *rep);
  unsigned *left = malloc((n + 1) * sizeof *left), *heap = malloc((n + 1) * sizeof *heap);
  unsigned *ncp = malloc((n + 1) * sizeof *ncp), *cpd = malloc((n * RH_NCOPY + 1) * sizeof *cpd);
  unsigned *dcls = calloc(ndev + 1, sizeof *dcls), *ndevc = calloc(ncls + 1, sizeof *ndevc);
  bool *live = calloc(nq + 1, sizeof *live), *allow = calloc(nq + 1, sizeof *allow), *runs = calloc(ncls + 1, sizeof *runs);
  uint64_t *at = malloc((nq + 1) * sizeof *at);
  double *base = calloc(ncls + 1, sizeof *base), *disc = calloc(ndev + 1, sizeof *disc), *rx = NULL;
  long *rix = NULL;
  int rc = 0;
  bool indexed = false;
  if (!w || !wc || !eoff || !soff || !ep || !succ || !ebytes || !links || !qback || !cback || !qfree || !cfree || !fin ||
      !rdy || !dev || !rep || !left || !heap || !ncp || !cpd || !dcls || !ndevc || !live || !allow || !runs || !at || !base || !disc) {
    rc = -2; /* MZ_ENOMEM */
    goto out;
  }
  for (unsigned k = 0; k < ndev; k++) dcls[k] = mz_sched_device_class(s, k);
  for (unsigned c = 0; c < ncls; c++) rep[c] = -1;
  unsigned nlive = 0;
  for (unsigned q = 0; q < nq; q++) {
    live[q] = !mz_sched_device_dead(s, d->qdev[q]) && (d->lead[q] < 0 || d->lead[q] == (int)q);
    if (!live[q]) continue;
    if (rep[d->qcls[q]] < 0) rep[d->qcls[q]] = (int)q;
    if (!(q && d->qdev[q - 1] == d->qdev[q])) ndevc[d->qcls[q]]++, nlive++; /* a device counts once */
  }
  if (nlive < 2) goto out;
  /* Costs per class, and the work of the whole run on one device of each
   * class (nodes it cannot run counted where they run fastest).  A node
   * without an estimate leaves the run free (exploration decides). */
  for (size_t i = 0; i < n; i++) {
    double wmin = INFINITY;
    for (unsigned c = 0; c < ncls; c++) {
      double *v = &w[i * ncls + c];
      *v = INFINITY;
      if (rep[c] < 0 || !mz_task_can_run(s, tasks[i], (unsigned)rep[c])) continue;
      double e = mz_task_expected_ns(s, tasks[i], (unsigned)rep[c]);
      if (e < 0) goto out;
      *v = e;
      if (e < wmin) wmin = e;
    }
    if (!isfinite(wmin)) continue; /* no class can run it: select says so */
    for (unsigned c = 0; c < ncls; c++) {
      wc[c] += isfinite(w[i * ncls + c]) ? w[i * ncls + c] : wmin;
      if (isfinite(w[i * ncls + c])) runs[c] = true;
    }
  }
  unsigned f = ncls;
  for (unsigned c = 0; c < ncls; c++)
    if (rep[c] >= 0 && runs[c] && (f == ncls || wc[c] < wc[f])) f = c;
  if (f == ncls || !isfinite(wc[f])) goto out;
  /* The run's edges (predecessors in this run only) and successors. */
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = i + 1;
  indexed = true;
  ne = 0;
  for (size_t i = 0; i < n; i++) {
    eoff[i] = ne;
    for (unsigned k = 0, np = mz_task_pred_count(tasks[i]); k < np; k++) {
      mz_task *p = mz_task_pred(tasks[i], k);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue; /* of another run */
      ep[ne] = (unsigned)(ix - 1);
      ebytes[ne] = mz_task_edge_bytes(tasks[i], k);
      soff[ix]++;
      ne++;
    }
  }
  eoff[n] = ne;
  size_t nroot = 0;
  rix = malloc((n + 1) * sizeof *rix);
  if (!rix) goto out;
  for (size_t i = 0; i < n; i++) rix[i] = eoff[i] == eoff[i + 1] ? (long)nroot++ : -1;
  rx = malloc((nroot * nq + 1) * sizeof *rx);
  if (!rx) goto out;
  for (size_t i = 0; i < n; i++)
    if (rix[i] >= 0) mz_task_transfer_ns_all(s, tasks[i], &rx[(size_t)rix[i] * nq]);
  for (size_t i = 0; i < n; i++) soff[i + 1] += soff[i];
  for (size_t i = 0; i < n; i++)
    for (size_t k = eoff[i]; k < eoff[i + 1]; k++) succ[soff[ep[k]]++] = (unsigned)i;
  for (size_t i = n; i > 0; i--) soff[i] = soff[i - 1]; /* back to starts */
  soff[0] = 0;
  /* Links between classes, from a pair of queues on distinct devices. */
  for (unsigned a = 0; a < ncls; a++)
    for (unsigned b = 0; b < ncls && rep[a] >= 0; b++)
      for (unsigned q = 0; q < nq; q++) {
        if (d->qcls[q] != b || d->qdev[q] == d->qdev[rep[a]]) continue;
        double l = mz_sched_link_ns(s, (unsigned)rep[a], q, 0), m = mz_sched_link_ns(s, (unsigned)rep[a], q, 1u << 20);
        if (l >= 0 && m >= l) links[a * ncls + b] = (struct rh_link){l, (m - l) / (double)(1u << 20)};
        break;
      }
  /* Queues and copy engines start from their backlog; a shared device's
   * work left is summed on its first queue. */
  uint64_t now = mz_sched_now_ns(s);
  mz_sched_queue_ready_ns_all(s, at);
  for (unsigned q = 0; q < nq; q++) {
    qback[q] = at[q] > now ? (double)(at[q] - now) : 0;
    uint64_t c = d->copy[q] ? mz_sched_copy_ready_ns(s, q) : 0;
    cback[q] = c > now ? (double)(c - now) : 0;
  }
  for (unsigned q = 0; q < nq; q++)
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) qback[d->lead[q]] += qback[q];
  struct rh R = {d,  s,     tasks, n,     ne,    w,    eoff, ep,  ebytes, soff, succ, links, qback, cback,
                 qfree, cfree, fin, rdy, dev, dcls, live, base, disc, left, heap, ncp, cpd, rx, rix};
  /* Rehearse the run on the fastest class's first device alone, on that
   * class, and on every device; keep the home that ends first (the single
   * device on a tie: it moves nothing). */
  unsigned home_dev = d->qdev[rep[f]];
  for (unsigned q = 0; q < nq; q++) allow[q] = d->qdev[q] == home_dev;
  double best = rehearse(&R, allow, INFINITY);
  uintptr_t home = (uintptr_t)home_dev + 1;
  if (ndevc[f] > 1 && ndevc[f] < nlive) {
    for (unsigned q = 0; q < nq; q++) allow[q] = d->qcls[q] == f;
    double e = rehearse(&R, allow, best);
    if (e < best) {
      best = e;
      home = HOME_CLASS | (uintptr_t)(f + 1);
    }
  }
  /* A device that holds the host's cores adds no capacity to the CPU's
   * queues, and the greedy rule, which sees only each node's finish, would
   * still fill it while it ends a node first (at the cost of every core):
   * the run without such devices is one more home. */
  bool others = false;
  for (unsigned q = 0; q < nq && d->any_gang; q++) others = others || (live[q] && d->host[q] != HOST_GANG);
  if (others) {
    for (unsigned q = 0; q < nq; q++) allow[q] = d->host[q] != HOST_GANG;
    double e = rehearse(&R, allow, best);
    if (e < best) {
      best = e;
      home = HOME_NOGANG;
    }
  }
  for (unsigned q = 0; q < nq; q++) allow[q] = true;
  if (rehearse(&R, allow, best) < best) home = 0;
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = home;
  indexed = false;
out:
  if (indexed)
    for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = 0;
  free(w);
  free(wc);
  free(eoff);
  free(soff);
  free(ep);
  free(succ);
  free(ebytes);
  free(links);
  free(qback);
  free(cback);
  free(qfree);
  free(cfree);
  free(fin);
  free(rdy);
  free(dev);
  free(rep);
  free(left);
  free(heap);
  free(ncp);
  free(cpd);
  free(dcls);
  free(ndevc);
  free(live);
  free(allow);
  free(runs);
  free(at);
  free(base);
  free(disc);
  free(rx);
  free(rix);
  return rc;
}

/* Devices on the host's cores: a node on a device that holds them all
 * (HOST_GANG: PoCL's CPU device) starts once every queue on them is
 * free, and the CPU workers start after the work given to such a device.
 * at[] as dmda_select has it (a shared device's work on its first queue). */
static void host_share(const struct dmda *d, uint64_t *at) {
  uint64_t all = 0, gang = 0;
  for (unsigned q = 0; q < d->nq; q++) {
    if (d->host[q] == HOST_NONE || (d->lead[q] >= 0 && d->lead[q] != (int)q)) continue;
    if (at[q] > all) all = at[q];
    if (d->host[q] == HOST_GANG && at[q] > gang) gang = at[q];
  }
  for (unsigned q = 0; q < d->nq; q++) {
    if (d->host[q] == HOST_GANG) at[q] = all;
    else if (d->host[q] == HOST_CORE && at[q] < gang) at[q] = gang;
  }
}

/* Whether queue q is in the home a plan gave the run. */
static bool at_home(const struct dmda *d, uintptr_t home, unsigned q) {
  if (home == HOME_NOGANG) return d->host[q] != HOST_GANG;
  return home & HOME_CLASS ? d->qcls[q] + 1 == (home & ~HOME_CLASS) : d->qdev[q] + 1 == home;
}

static int dmda_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  struct dmda *d = state;
  if (!ready) return MZ_POLICY_DEFER;
  unsigned nq = d->nq, ncls = d->ncls;
  double xstack[STACK_Q], estack[STACK_Q];
  uint64_t rstack[STACK_Q];
  double *xfer = nq <= STACK_Q ? xstack : malloc(nq * sizeof *xfer);
  uint64_t *at = nq <= STACK_Q ? rstack : malloc(nq * sizeof *at);
  double *est = ncls <= STACK_Q ? estack : malloc(ncls * sizeof *est); /* NAN: not computed, INFINITY: cannot */
  int best = -1, explore = -1;
  /* Before the first jump to out, which reads best_f when best is set. */
  double best_f = INFINITY, best_st = 0;
  if (!xfer || !at || !est) goto out;
  mz_task_transfer_ns_all(s, t, xfer);
  mz_sched_queue_ready_ns_all(s, at);
  /* A shared device's work left, summed on its first queue. */
  uint64_t now = mz_sched_now_ns(s);
  for (unsigned q = 0; q < nq; q++)
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) at[d->lead[q]] += at[q] > now ? at[q] - now : 0;
  if (d->sorted) { /* and what waits to be picked (dmdas) */
    pthread_mutex_lock(&d->pm);
    for (unsigned q = 0; q < nq; q++) at[q] += (uint64_t)llround(d->pend_ns[q]);
    pthread_mutex_unlock(&d->pm);
  }
  if (d->any_gang) host_share(d, at);
  for (unsigned c = 0; c < ncls; c++) est[c] = NAN;
  uint64_t explore_at = UINT64_MAX;
  /* A run kept on one device (dmda_plan), unless that device cannot run t. */
  uintptr_t home = *mz_task_policy_data(t) & HOME_MASK;
  if (home) {
    bool any = false;
    for (unsigned q = 0; q < nq && !any; q++) any = at_home(d, home, q) && mz_task_can_run(s, t, q);
    if (!any) home = 0;
  }
  /* On a tie the calling CPU worker's queue wins: that worker is running
   * and takes the node at once, where another idle worker sleeps and must
   * be woken (on a loaded host that took 4 to 50 ms in the pipeline). */
  int cur = mz_sched_current_queue(s);
  for (unsigned q = 0; q < nq; q++) {
    unsigned c = d->qcls[q];
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) continue;
    if (home && !at_home(d, home, q)) continue;
    /* Devices of one class run the same code: estimate once per class.
     * Whether a queue can run the node is asked per queue, since a dead
     * device, or one a run leaves out (mz_graph_run_with), cannot. */
    if (!mz_task_can_run(s, t, q)) continue;
    if (isnan(est[c])) est[c] = mz_task_expected_ns(s, t, q);
    if (est[c] < 0) {
      if (at[q] < explore_at || (at[q] == explore_at && (int)q == cur)) {
        explore_at = at[q];
        explore = (int)q;
      }
      continue;
    }
    double st = (double)at[q] + xfer[q];
    if (d->copy[q] && xfer[q] > 0) st = fmax((double)at[q], (double)mz_sched_copy_ready_ns(s, q) + xfer[q]);
    double f = st + est[c];
    if (f < best_f || (f == best_f && (int)q == cur)) {
      best_f = f;
      best_st = st;
      best = (int)q;
    }
  }
  if (explore < 0 && best >= 0) { /* what it expects, for traces */
    double st = best_st;
    mz_task_set_expected_times(s, t, (uint64_t)llround(st), (uint64_t)llround(st + est[d->qcls[best]]));
  }
out:
  if (d->sorted && (explore >= 0 || best >= 0)) {
    int q = explore >= 0 ? explore : best;
    pthread_mutex_lock(&d->pm);
    /* How much later q is free with t on it: its transfers (where they
     * run on q) and its work. */
    d->pend_ns[q] += explore >= 0 ? 0 : fmax(0, best_f - (double)at[q]);
    d->pend_n[q]++;
    pthread_mutex_unlock(&d->pm);
  }
  if (xfer != xstack) free(xfer);
  if (at != rstack) free(at);
  if (est != estack) free(est);
  if (explore >= 0) return explore;
  return best >= 0 ? best : 0; /* 0: no queue can run it (or no memory); the runtime says so */
}

/* ---- dmdas: dmda's placement, each queue in upward-rank order ---- */

static int dmdas_init(const mz_sched *s, void **state) {
  int rc = dmda_init(s, state);
  if (rc) return rc;
  struct dmda *d = *state;
  d->pend_ns = calloc(d->nq + 1, sizeof *d->pend_ns);
  d->pend_n = calloc(d->nq + 1, sizeof *d->pend_n);
  if (!d->pend_ns || !d->pend_n || pthread_mutex_init(&d->pm, NULL)) {
    dmda_fini(d);
    *state = NULL;
    return -2; /* MZ_ENOMEM */
  }
  d->sorted = true;
  return 0;
}

static float word_rank(uintptr_t w) {
  if (!RANK_BITS) return 0;
  uint32_t b = (uint32_t)((uint64_t)w >> 32);
  float r;
  memcpy(&r, &b, sizeof r);
  return r;
}

static uintptr_t with_rank(uintptr_t w, float r) {
  if (!RANK_BITS) return w;
  uint32_t b;
  memcpy(&b, &r, sizeof b);
  return (uintptr_t)(((uint64_t)w & 0xffffffffu) | ((uint64_t)b << 32));
}

/* Upward ranks of the run (HEFT's priority: the longest path from the
 * node to the run's end, in expected ns):
 *
 *   rank(i) = w(i) + max over successors j of (c(i, j) + rank(j))
 *
 * w(i): the node's expected time averaged over the live devices that can
 * run it (unknown estimates: the mean of the known ones, or 1 us, so a
 * run no model knows yet is ranked by path length); c(i, j): the edge's
 * bytes over the mean link between distinct devices, plus its latency.
 * rank[i] for tasks[i]; 0 on no memory (the queues then stay in arrival
 * order). */
static void upward_ranks(const struct dmda *d, const mz_sched *s, mz_task *const tasks[], size_t n, float *rank) {
  unsigned nq = d->nq, ncls = d->ncls;
  double *wsum = calloc(n + 1, sizeof *wsum), *up = calloc(n + 1, sizeof *up), *cw = calloc(ncls + 1, sizeof *cw);
  int *rep = malloc((ncls + 1) * sizeof *rep);
  unsigned *ndev = calloc(ncls + 1, sizeof *ndev);
  if (!wsum || !up || !cw || !rep || !ndev) goto out;
  for (unsigned c = 0; c < ncls; c++) rep[c] = -1;
  for (unsigned q = 0; q < nq; q++) {
    if (mz_sched_device_dead(s, d->qdev[q]) || (q && d->qdev[q - 1] == d->qdev[q])) continue;
    if (rep[d->qcls[q]] < 0) rep[d->qcls[q]] = (int)q;
    ndev[d->qcls[q]]++;
  }
  /* The mean link between distinct devices, from one queue per class. */
  double lat = 0, per_byte = 0, pairs = 0;
  for (unsigned a = 0; a < ncls; a++)
    for (unsigned b = 0; b < ncls && rep[a] >= 0; b++) {
      if (rep[b] < 0 || (a == b && ndev[a] < 2)) continue;
      unsigned qb = (unsigned)rep[b];
      if (a == b) /* another device of the class */
        for (unsigned q = 0; q < nq; q++)
          if (d->qcls[q] == b && d->qdev[q] != d->qdev[rep[a]]) {
            qb = q;
            break;
          }
      double l = mz_sched_link_ns(s, (unsigned)rep[a], qb, 0), m = mz_sched_link_ns(s, (unsigned)rep[a], qb, 1u << 20);
      if (l < 0 || m < l) continue;
      double k = (double)ndev[a] * (ndev[b] - (a == b));
      lat += k * l;
      per_byte += k * (m - l) / (double)(1u << 20);
      pairs += k;
    }
  if (pairs) {
    lat /= pairs;
    per_byte /= pairs;
  }
  for (size_t i = 0; i < n; i++) {
    double known = 0, devs = 0, unknown = 0;
    for (unsigned c = 0; c < ncls; c++) {
      cw[c] = -1;
      if (rep[c] < 0 || !mz_task_can_run(s, tasks[i], (unsigned)rep[c])) continue;
      double e = mz_task_expected_ns(s, tasks[i], (unsigned)rep[c]);
      if (e >= 0) {
        known += e * ndev[c];
        devs += ndev[c];
      } else {
        unknown += ndev[c];
      }
    }
    double mean = devs ? known / devs : 1e3;
    wsum[i] = devs + unknown ? (known + mean * unknown) / (devs + unknown) : mean;
  }
  /* Index the run through the policy words, for the edges. */
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = i + 1;
  for (size_t i = n; i-- > 0;) { /* tasks[] is in topological order */
    up[i] += wsum[i]; /* up[i] held the max over successors */
    for (unsigned k = 0, np = mz_task_pred_count(tasks[i]); k < np; k++) {
      mz_task *p = mz_task_pred(tasks[i], k);
      uintptr_t ix = *mz_task_policy_data(p);
      if (ix == 0 || ix > n || tasks[ix - 1] != p) continue; /* of another run */
      size_t b = mz_task_edge_bytes(tasks[i], k);
      double r = up[i] + (b ? lat + per_byte * (double)b : 0);
      if (r > up[ix - 1]) up[ix - 1] = r;
    }
  }
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = 0;
  for (size_t i = 0; i < n; i++) rank[i] = (float)up[i];
out:
  if (!wsum || !up || !cw || !rep || !ndev)
    for (size_t i = 0; i < n; i++) rank[i] = 0;
  free(wsum);
  free(up);
  free(cw);
  free(rep);
  free(ndev);
}

static int dmdas_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct dmda *d = state;
  float *rank = RANK_BITS ? malloc((n + 1) * sizeof *rank) : NULL;
  if (rank) upward_ranks(d, s, tasks, n, rank);
  int rc = dmda_plan(state, s, tasks, n);
  for (size_t i = 0; rank && i < n; i++) {
    uintptr_t *w = mz_task_policy_data(tasks[i]);
    *w = with_rank(*w, rank[i]);
  }
  free(rank);
  return rc;
}

/* The pending node of highest upward rank, the oldest on ties.  The
 * queue's pending work drops by the mean per pending node: what select
 * added for each differs, but their sum is what is left when the queue's
 * list empties (zero). */
static unsigned dmdas_pick(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n) {
  struct dmda *d = state;
  unsigned k = 0;
  float best = word_rank(*mz_task_policy_data(pending[0]));
  for (unsigned i = 1; i < n; i++) {
    float r = word_rank(*mz_task_policy_data(pending[i]));
    if (r > best) {
      best = r;
      k = i;
    }
  }
  pthread_mutex_lock(&d->pm);
  if (d->pend_n[q]) { /* its share of the pending work leaves with it */
    d->pend_ns[q] -= d->pend_ns[q] / d->pend_n[q];
    d->pend_n[q]--;
  }
  pthread_mutex_unlock(&d->pm);
  return k;
}

const struct mz_policy_ops mz_policy_dmda = {
    .abi = MZ_POLICY_ABI,
    .name = "dmda",
    .description = "at ready time, the queue with the earliest expected finish (backlog + transfers + model)",
    .init = dmda_init,
    .fini = dmda_fini,
    .plan = dmda_plan,
    .select = dmda_select,
};

const struct mz_policy_ops mz_policy_dmdas = {
    .abi = MZ_POLICY_ABI,
    .name = "dmdas",
    .description = "dmda's placement; each queue runs its ready nodes in upward-rank order (pick)",
    .init = dmdas_init,
    .fini = dmda_fini,
    .plan = dmdas_plan,
    .select = dmda_select,
    .pick = dmdas_pick,
};
