/* The device table: the devices and their queues found at discovery,
 * their facts, and a device's death.
 *
 * Written by discovery on the creating thread only (mz__device_add), before
 * any worker runs; read by every thread afterwards without a lock.  A
 * device's death (`dead`) is the one field that changes later: an atomic
 * flag set once, by whichever thread sees the failure first. */
#include <stdlib.h>

#include "handle.h"
#include "objects/mz_graph.h"
#include "objects/mz_op.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"

/* Enough for large simulated platforms (4 to 1,000 devices). */
#define MZ__MAX_DEVICES 1024

struct mz_device *mz__device_add(mz_runtime *rt, const struct mz__devtype *type, unsigned nqueues, void *priv) {
  /* A node names its queue in 16 bits (struct mz__exec). */
  unsigned nq = 0;
  for (unsigned i = 0; i < rt->ndev; i++) nq += rt->devs[i]->nqueues;
  if (rt->ndev == MZ__MAX_DEVICES || nqueues == 0 || nqueues > (unsigned)INT16_MAX - nq) return NULL;
  if (rt->ndev == rt->capdev) {
    unsigned cap = rt->capdev ? rt->capdev * 2 : 8;
    struct mz_device **v = realloc(rt->devs, cap * sizeof *v);
    if (!v) return NULL;
    rt->devs = v;
    rt->capdev = cap;
  }
  struct mz_device *d = calloc(1, sizeof *d);
  struct mz__queue *qs = calloc(nqueues, sizeof *qs);
  if (!d || !qs) {
    free(d);
    free(qs);
    return NULL;
  }
  d->rt = rt;
  d->type = type;
  d->ops = type->ops;
  d->priv = priv;
  d->kernels = true;
  d->nqueues = nqueues;
  d->queues = qs;
  d->info.kind = type->kind;
  d->info.index = rt->ndev;
  d->info.queues = nqueues;
  d->info.numa_node = -1;
  /* The CPU device's workers are the host's cores, one each. */
  d->info.host_cores = type->kind == MZ_DEVICE_CPU ? 1 : 0;
  d->info.name = d->info.vendor = d->info.version = "";
  for (unsigned i = 0; i < nqueues; i++) {
    qs[i].dev = d;
    qs[i].local = i;
  }
  if (type->hold) {
    unsigned k = 0;
    while (k < rt->nhold_types && rt->hold_types[k] != type) k++;
    if (k == rt->nhold_types) {
      if (k == sizeof rt->hold_types / sizeof *rt->hold_types) {
        free(qs);
        free(d);
        return NULL;
      }
      rt->hold_types[rt->nhold_types++] = type;
    }
  }
  rt->devs[rt->ndev++] = d;
  return d;
}

unsigned mz_runtime_device_count(const mz_runtime *rt) { return MZ__LIVE(rt, MZ__TAG_RUNTIME) ? rt->ndev : 0; }
mz_device *mz_runtime_device(const mz_runtime *rt, unsigned i) {
  return MZ__LIVE(rt, MZ__TAG_RUNTIME) && i < rt->ndev ? rt->devs[i] : NULL;
}
unsigned mz_runtime_queue_count(const mz_runtime *rt) { return MZ__LIVE(rt, MZ__TAG_RUNTIME) ? rt->nq : 0; }

int mz_device_get_info(const mz_device *dev, mz_device_info *info) {
  if (!dev || !info) return MZ_EINVAL;
  *info = dev->info;
  return MZ_OK;
}

const char *mz_device_kind_name(mz_device_kind kind) {
  switch (kind) {
    case MZ_DEVICE_CPU: return "cpu";
    case MZ_DEVICE_OPENCL: return "opencl";
    case MZ_DEVICE_CUDA: return "cuda";
    case MZ_DEVICE_SIM: return "sim";
  }
  return "unknown";
}

bool mz_device_is_dead(const mz_device *dev) { return dev ? atomic_load(&dev->dead) : true; }

void mz__device_fail(struct mz_device *dev, int code, const char *why) {
  if (!atomic_exchange(&dev->dead, true)) {
    atomic_fetch_add_explicit(&dev->rt->plan_epoch, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&dev->rt->dev_epoch, 1, memory_order_relaxed);
    mz__warn(dev->rt, "device %u (%s) failed and takes no more work: %s (%s)", dev->info.index, dev->info.name,
             why ? why : "", mz_err_name(code));
  }
}

/* Whether queue q can run op now: its device lives, takes kernels like
 * op's, and is among the run's devices. */
struct mz__queue *mz__exec_queue(const struct mz__exec *e) {
  int q = __atomic_load_n(&e->queue, __ATOMIC_RELAXED);
  return q < 0 ? NULL : mz__op_graph(mz__exec_node(e))->rt->queues[q];
}

bool mz__can_run(const mz_runtime *rt, const mz_op *op, unsigned q) {
  if (q >= rt->nq) return false;
  struct mz_device *dev = rt->queues[q]->dev;
  if (atomic_load_explicit(&dev->dead, memory_order_relaxed)) return false;
  const mz_kernel *k = mz__task_kernel(mz__task_of(op));
  /* Host work (host nodes, partition, unpartition) runs where host memory
   * is the device's memory and a worker runs it: capabilities, not kinds. */
  if (!k) return dev->ops->host_memory && dev->ops->inline_submit;
  /* A run on a subset of the devices (mz_graph_run_with) limits kernels;
   * host work still runs where host memory is. */
  const struct mz__run *r = mz__task_of(op)->run;
  if (r && r->devok && !r->devok[dev->info.index]) return false;
  return dev->kernels && dev->ops->can_run(dev, k);
}
