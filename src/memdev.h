/* maize internals: device memory as the memory limits see it, shared by
 * src/memdev.c (what each device holds: bytes, resident copies, pins) and
 * src/memlimit.c (making room: eviction, nodes waiting for memory).
 *
 * Locks: a device's mutex (memdev.m) guards its counts, resident list and
 * parked nodes; it comes before a buffer's fetch_lock and spinlock. */
#ifndef MZ_MEMDEV_H
#define MZ_MEMDEV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "maize.h"

struct resident {
  mz_buffer *b;
  unsigned n;   /* allocations of b's copy counted here (a lost race adds one briefly) */
};

struct memdev {
  pthread_mutex_t m;
  uint64_t limit, used, peak;
  unsigned evicting;  /* evictions under way without the mutex (their bytes still count) */
  struct resident *res;
  size_t nres, capres;
  mz_op **parked;
  size_t npark, cappark;
};

struct mz__memlimit {
  unsigned ndev;
  struct memdev *md;
  _Atomic uint64_t clock;
  _Atomic uint64_t evictions, writebacks, waits, enomem, maxev;
};

/* The resident list, md->m held: one more or one fewer allocation of b's
 * copy on the device. */
void mz__memdev_res_add(struct memdev *md, mz_buffer *b);
void mz__memdev_res_remove(struct memdev *md, mz_buffer *b);
/* Free b's copy mem on dev, md->m held (dropped around the free). */
void mz__memdev_free_copy(struct memdev *md, struct mz_device *dev, mz_buffer *b, void *mem);

#endif
