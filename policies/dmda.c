/* dmda: deque model data aware (after StarPU's dmda).  When a node is
 * ready, it goes to the queue where it is expected to finish first:
 *
 *   finish(q) = ready(q) + transfers(q) + expected(q)
 *
 * where ready(q) is when q will have done the work already given to it
 * (mz_sched_queue_ready_ns), transfers(q) the time to bring the node's
 * stale inputs to q's memory (measured links: mz_sched_measure_links at
 * init), and expected(q) the perf model's estimate.  While the model of
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
};

static void dmda_fini(void *state) {
  struct dmda *d = state;
  if (!d) return;
  free(d->qdev);
  free(d->qcls);
  free(d->lead);
  free(d);
}

static int dmda_init(const mz_sched *s, void **state) {
  struct dmda *d = calloc(1, sizeof *d);
  if (!d) return -2; /* MZ_ENOMEM */
  d->nq = mz_sched_queue_count(s);
  d->qdev = malloc((d->nq + 1) * sizeof *d->qdev);
  d->qcls = malloc((d->nq + 1) * sizeof *d->qcls);
  d->lead = malloc((d->nq + 1) * sizeof *d->lead);
  if (!d->qdev || !d->qcls || !d->lead) {
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
  }
  *state = d;
  /* Transfer costs from measured links (a no-op on simulated devices). */
  return mz_sched_measure_links(s);
}

enum { STACK_Q = 256 };

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
  double best_f = INFINITY;
  uint64_t explore_at = UINT64_MAX;
  for (unsigned q = 0; q < nq; q++) {
    unsigned c = d->qcls[q];
    if (d->lead[q] >= 0 && d->lead[q] != (int)q) continue;
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
    double f = (double)at[q] + xfer[q] + est[c];
    if (f < best_f) {
      best_f = f;
      best = (int)q;
    }
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
    .select = dmda_select,
};
