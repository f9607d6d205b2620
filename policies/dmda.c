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
 * lowest queue number, so runs on simulated devices are deterministic.
 *
 * Devices whose queues share the device (OpenCL and CUDA: kernels from
 * several queues run at once and slow each other down; the CPU has a
 * worker per queue and simulated queues are independent) count as one
 * processor: their expected ready time is now plus the work left on all
 * their queues, and they get work on their first queue only, so kernels
 * there run one after another and the perf model learns their time alone,
 * not the time of several sharing the device.
 *
 * One device for the whole run, when spreading cannot pay (plan, before
 * the run starts): greedy finish times count the transfers of a node's
 * inputs but not those its successors will make for its output, so once a
 * run with dear transfers is spread over devices, nearly every edge crosses
 * and the queues fill with copies (with CCR 10, dmda ended 8 to 15 times
 * later than the fastest device alone).  So the plan compares two rough
 * makespans: W, all of the run's work on one device of the fastest class
 * (nodes that class cannot run counted where they run fastest), against
 * W / C + E (1 - 1/D) / D, the work spread over the capacity C of the D
 * devices (in devices of the fastest class) plus the transfers of every
 * edge's bytes over the cheapest link, shared among the devices, for the
 * edges a random placement would cut.  When the second is larger, every
 * node of the run is kept on that fastest device (its policy word holds
 * the device), except nodes it cannot run.  Nodes without an estimate
 * leave the run free, so exploration still calibrates the models.
 *
 * Cost per decision: one estimate and one capability check per device
 * class, one transfer estimate per input and memory node, and a pass over
 * the queues with what the state caches (each queue's device and class). */
#include <math.h>
#include <stdlib.h>

#include "maize/device.h"
#include "maize/policy.h"

struct dmda {
  unsigned nq, ncls;
  unsigned *qdev, *qcls; /* per queue */
  int *lead;             /* per queue: the first queue of its device when the device's queues share it, else -1 */
  bool *copy;            /* per queue: its device has a copy engine */
  bool all_copy;         /* every device has one */
};

static void dmda_fini(void *state) {
  struct dmda *d = state;
  if (!d) return;
  free(d->qdev);
  free(d->qcls);
  free(d->lead);
  free(d->copy);
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
  if (!d->qdev || !d->qcls || !d->lead || !d->copy) {
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
    d->copy[q] = mz_sched_queue_copy_engine(s, q);
  }
  d->all_copy = d->nq > 0;
  for (unsigned q = 0; q < d->nq; q++) d->all_copy = d->all_copy && d->copy[q];
  *state = d;
  /* Transfer costs from measured links (a no-op on simulated devices). */
  return mz_sched_measure_links(s);
}

enum { STACK_Q = 256 };

/* Whether the run should stay on one device: see the top of the file.
 * Marks every task with 1 + that device in its policy word; a run left
 * free keeps 0. */
static int dmda_plan(void *state, const mz_sched *s, mz_task *const tasks[], size_t n) {
  struct dmda *d = state;
  unsigned nq = d->nq, ncls = d->ncls;
  if (n < 2 || ncls == 0) return 0;
  double *wc = calloc(ncls, sizeof *wc), *spd = calloc(ncls, sizeof *spd); /* per class: run's work, node's cost */
  int *rep = malloc(ncls * sizeof *rep);
  unsigned *ndevc = calloc(ncls, sizeof *ndevc);
  bool *runs = calloc(ncls, sizeof *runs);
  int rc = 0;
  if (!wc || !spd || !rep || !ndevc || !runs) {
    rc = -2; /* MZ_ENOMEM */
    goto out;
  }
  for (unsigned c = 0; c < ncls; c++) rep[c] = -1;
  unsigned ndev = 0;
  for (unsigned q = 0; q < nq; q++) {
    if (mz_sched_device_dead(s, d->qdev[q]) || (d->lead[q] >= 0 && d->lead[q] != (int)q)) continue;
    if (q && d->qdev[q - 1] == d->qdev[q]) continue; /* a device counts once */
    if (rep[d->qcls[q]] < 0) rep[d->qcls[q]] = (int)q;
    ndevc[d->qcls[q]]++;
    ndev++;
  }
  /* Work per class: all of the run on one device of it, but for nodes it
   * cannot run, which go where they run fastest anyway.  A node without an
   * estimate leaves the run free (exploration decides). */
  for (size_t i = 0; i < n; i++) {
    double wmin = INFINITY;
    for (unsigned c = 0; c < ncls; c++) {
      spd[c] = INFINITY; /* this node's cost per class */
      if (rep[c] < 0 || !mz_task_can_run(s, tasks[i], (unsigned)rep[c])) continue;
      double e = mz_task_expected_ns(s, tasks[i], (unsigned)rep[c]);
      if (e < 0) goto out;
      spd[c] = e;
      if (e < wmin) wmin = e;
    }
    if (!isfinite(wmin)) continue; /* no class can run it: select says so */
    for (unsigned c = 0; c < ncls; c++) {
      wc[c] += isfinite(spd[c]) ? spd[c] : wmin;
      if (isfinite(spd[c])) runs[c] = true;
    }
  }
  for (unsigned c = 0; c < ncls; c++)
    if (!runs[c]) rep[c] = -1; /* a class that runs none of it is no home */
  unsigned f = ncls;
  for (unsigned c = 0; c < ncls; c++)
    if (rep[c] >= 0 && (f == ncls || wc[c] < wc[f])) f = c;
  if (f == ncls || !isfinite(wc[f]) || ndev < 2) goto out;
  /* The run's capacity in units of one device of class f, and the
   * transfers if every edge crossed devices, over the cheapest link. */
  double cap = 0;
  ndev = 0;
  for (unsigned c = 0; c < ncls; c++)
    if (rep[c] >= 0 && wc[c] > 0 && isfinite(wc[c])) {
      cap += ndevc[c] * wc[f] / wc[c];
      ndev += ndevc[c];
    }
  if (ndev < 2) goto out;
  double lat = INFINITY, pb = INFINITY;
  for (unsigned a = 0; a < nq; a++)
    for (unsigned b = 0; b < nq; b++) {
      if (d->qdev[a] == d->qdev[b]) continue;
      double l = mz_sched_link_ns(s, a, b, 0), m = mz_sched_link_ns(s, a, b, 1u << 20);
      if (l < 0 || m < l) continue;
      if (l < lat) lat = l;
      if ((m - l) / (double)(1u << 20) < pb) pb = (m - l) / (double)(1u << 20);
    }
  if (!isfinite(lat)) goto out;
  double edges = 0;
  for (size_t i = 0; i < n; i++)
    for (unsigned k = 0, np = mz_task_pred_count(tasks[i]); k < np; k++) {
      size_t b = mz_task_edge_bytes(tasks[i], k);
      if (b) edges += lat + pb * (double)b;
    }
  /* With copy engines everywhere the copies overlap the work: the longer
   * of the two bounds the spread run, not their sum. */
  double xf = edges * (1 - 1.0 / ndev) / ndev;
  double spread = d->all_copy ? fmax(wc[f] / cap, xf) : wc[f] / cap + xf;
  if (spread <= wc[f]) goto out;
  for (size_t i = 0; i < n; i++) *mz_task_policy_data(tasks[i]) = (uintptr_t)d->qdev[rep[f]] + 1;
out:
  free(wc);
  free(spd);
  free(rep);
  free(ndevc);
  free(runs);
  return rc;
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
  if (!xfer || !at || !est) goto out;
  mz_task_transfer_ns_all(s, t, xfer);
  mz_sched_queue_ready_ns_all(s, at);
  /* A shared device's work left, summed on its first queue. */
  uint64_t now = mz_sched_now_ns(s);
  for (unsigned q = 0; q < nq; q++)
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) at[d->lead[q]] += at[q] > now ? at[q] - now : 0;
  for (unsigned c = 0; c < ncls; c++) est[c] = NAN;
  double best_f = INFINITY, best_st = 0;
  uint64_t explore_at = UINT64_MAX;
  /* A run kept on one device (dmda_plan), unless that device cannot run t. */
  uintptr_t home = *mz_task_policy_data(t);
  if (home) {
    bool any = false;
    for (unsigned q = 0; q < nq && !any; q++) any = d->qdev[q] + 1 == home && mz_task_can_run(s, t, q);
    if (!any) home = 0;
  }
  for (unsigned q = 0; q < nq; q++) {
    unsigned c = d->qcls[q];
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) continue;
    if (home && d->qdev[q] + 1 != home) continue;
    /* Devices of one class run the same code: estimate once per class.
     * Whether a queue can run the node is asked per queue, since a dead
     * device, or one a run leaves out (mz_graph_run_with), cannot. */
    if (!mz_task_can_run(s, t, q)) continue;
    if (isnan(est[c])) est[c] = mz_task_expected_ns(s, t, q);
    if (est[c] < 0) {
      if (at[q] < explore_at) {
        explore_at = at[q];
        explore = (int)q;
      }
      continue;
    }
    double st = (double)at[q] + xfer[q];
    if (d->copy[q] && xfer[q] > 0) st = fmax((double)at[q], (double)mz_sched_copy_ready_ns(s, q) + xfer[q]);
    double f = st + est[c];
    if (f < best_f) {
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
  if (xfer != xstack) free(xfer);
  if (at != rstack) free(at);
  if (est != estack) free(est);
  if (explore >= 0) return explore;
  return best >= 0 ? best : 0; /* 0: no queue can run it (or no memory); the runtime says so */
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
