/* maize internals: the copy states of a buffer's copies (coherence),
 * written once here: planning, host fetches, tiles, the user's writes and
 * eviction change them only through these. */
#ifndef MZ_COHERENCE_H
#define MZ_COHERENCE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "device_ops.h"
#include "objects/mz_buffer.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"

/* Buffers' copy states: their two transitions, written once (b->lock held; a new
 * buffer starts with the host copy OWNER).  A write on memory node m: m's
 * copy is the only valid one, and no transfer in is pending anywhere
 * (later readers are ordered after the writer by hazards). */
static inline void mz__copy_written(mz_buffer *b, unsigned m) {
  for (unsigned k = 0; k < b->rt->nmem; k++) {
    b->copies[k].state = MZ__INVALID;
    b->copies[k].fetcher = NULL;
  }
  b->copies[m].state = MZ__OWNER;
}
/* A copy made valid on another node from src's: src, if it was the only
 * valid one, is shared now. */
static inline void mz__copy_read_from(mz_buffer *b, unsigned src) {
  if (b->copies[src].state == MZ__OWNER) b->copies[src].state = MZ__SHARED;
}
/* The copy-source rule: whether copy m of b can be read now.  Not an
 * invalid copy, nor one on a dead device's memory, nor one whose own
 * transfer in may not have run yet (another device's reader planned it:
 * it would read as garbage). */
static inline bool mz__copy_readable(const mz_runtime *rt, const mz_buffer *b, unsigned m) {
  const struct mz__copy *c = &b->copies[m];
  if (c->state == MZ__INVALID || (m && atomic_load_explicit(&rt->mem_dev[m]->dead, memory_order_relaxed))) return false;
  return !c->fetcher ||
         atomic_load_explicit(&mz__task_of(mz__exec_node(c->fetcher))->state, memory_order_acquire) == MZ__T_DONE;
}

#endif
