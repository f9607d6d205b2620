/* maize internals: whether a node's run is a perf-model sample, inline on
 * the CPU workers' path, which asks once per node (src/perfmodel.c owns
 * the rest of the models and the rule, see MZ__PM_SATURATED there; this
 * header calls none of it, so that it stands below it).
 *
 * Per queue, one cache line: a moving average of the queue's node times
 * and the tick of its sampling.  A node whose bucket on its device is
 * saturated (pm_sat1, its own verdict) is a sample on one tick of its
 * queue in 1 + pm_mask; a new one of the kernel and bucket its queue last
 * found saturated takes that verdict here, and one due by its own takes
 * that verdict's longer period; any other asks perfmodel.c.  A load and a store of
 * the tick, not an RMW: one thread runs (or finishes) a queue's nodes at a
 * time, and a tick lost to a rare overlap only moves the next sample.
 *
 * Thread: the thread that runs the queue's nodes.  The runtime's perf
 * models (rt->pm) exist from the runtime's creation to its destruction. */
#ifndef MZ_PERFMODEL_TICK_H
#define MZ_PERFMODEL_TICK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "objects/mz_op.h"
#include "objects/mz_runtime.h"

struct mz__pm_queue {
  _Alignas(64) _Atomic uint64_t ema;
  _Atomic uint32_t tick;
  /* The bucket of q's last sample, when it was saturated: a node that has
   * no verdict of its own yet (new) and feeds it is sampled as a saturated
   * one, so that a graph run once pays no sample per node. */
  _Atomic(const char *) sat_name;
  _Atomic int sat_key;
  _Atomic(const struct mz_device *) sat_dev;
  _Atomic uint8_t sat_mask; /* and that sample's pm_mask */
  /* The same bucket as the kernel, key + 1 and device index + 1 that a
   * new task holds (pm_key1, set where it is lowered): the short way of
   * mz__pm_due (NULL kernel: none). */
  _Atomic(const void *) sat_kernel;
  _Atomic uint8_t sat_key1, sat_dev1;
};
/* The first member of struct mz__perfmodel (so a pointer to one is a
 * pointer to the other): where a worker finds its queue's line. */
struct mz__pm_hot {
  struct mz__pm_queue *qs; /* per queue, a cache line each */
};

/* mz__pm_due past its common case (t's own verdict, not due): t is new
 * on the device of index dev1 - 1, or due by its own verdict at tick k.
 * Of the kernel and size bucket last found saturated on this queue's
 * device, the node takes that verdict (run by this thread alone), as
 * mz__perfmodel_due_new would; one that has a verdict takes that one's
 * longer period.  A node keeps its verdict until it is sampled, and on
 * two or more workers a node falls on a due tick of its old period at
 * random, one run in 16: nodes that kept the period of a bucket not yet
 * settled (MZ__PM_SETTLED, src/perfmodel.c) were still one sample in 20
 * after 60 re-runs of 20,000 on two workers, against one in 128
 * settled.  Out of line, so that the test before it stays inline. */
static __attribute__((noinline)) int mz__pm_due_rare(struct mz__pm_queue *pq, struct mz__task *t, unsigned dev1,
                                                     uint32_t k) {
  bool mine = t->pm_sat1 == dev1;
  const mz_op *op = mz__task_op(t);
  if (op->u.kernel && op->pm_key1 && (const void *)op->u.kernel == atomic_load_explicit(&pq->sat_kernel, memory_order_relaxed) &&
      op->pm_key1 == atomic_load_explicit(&pq->sat_key1, memory_order_relaxed) &&
      dev1 == atomic_load_explicit(&pq->sat_dev1, memory_order_relaxed)) {
    uint8_t m = atomic_load_explicit(&pq->sat_mask, memory_order_relaxed);
    if (!mine || m > t->pm_mask) {
      t->pm_sat1 = (uint8_t)dev1;
      t->pm_mask = m;
    }
    return !(k & t->pm_mask);
  }
  return mine ? 1 : -1;
}

/* Advances q's tick (pq) and says whether t's run on the device of index
 * dev1 - 1 is a sample: 1 or 0, or -1 when t has no verdict on that device
 * (new, or moved): then mz__perfmodel_due_new (perfmodel.h) decides, with
 * the tick read here. */
static inline int mz__pm_due(struct mz__pm_queue *pq, struct mz__task *t, unsigned dev1, uint32_t *tick) {
  uint32_t k = atomic_load_explicit(&pq->tick, memory_order_relaxed);
  atomic_store_explicit(&pq->tick, k + 1, memory_order_relaxed);
  *tick = k;
  if (__builtin_expect(t->pm_sat1 == dev1 && (k & t->pm_mask), 1)) return 0;
  return mz__pm_due_rare(pq, t, dev1, k);
}

#endif
