/* maize internals: buffers (src/buffer.c) and their copies on each memory
 * node.  The copy states' transitions are in src/coherence.h; device
 * memory accounting in src/memdev.h.
 *
 * Locks: a buffer's spinlock guards its copies; fetch_lock serializes
 * blocking reads into host memory and comes before the spinlock; the
 * hazard records are guarded by the runtime's lock. */
#ifndef MZ_BUFFER_H
#define MZ_BUFFER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "maize.h"
#include "util.h"

struct mz__exec;
struct mz__lwbuf;
struct mz__run;
struct mz__xfer;
struct mz_device;
struct mz_op;

/* Readers a buffer's records hold without an allocation of their own: a
 * stencil's value has three (its point and the two neighbours), and a
 * distributed graph makes a buffer per step and point, which would
 * otherwise cost two mallocs and two frees each (src/hazard.c). */
#define MZ__HZ_INLINE 3

/* A buffer's hazard records across runs (their rules: src/hazard.h),
 * guarded by rt->lock. */
struct mz__hazards {
  struct mz_op *writer;           /* the last writer scheduled, in a run in flight */
  struct mz_op **readers;         /* the readers scheduled since: NULL, rin, or its own block */
  unsigned nreaders, capreaders;
  uint64_t stamp;                 /* visited in the pass with this stamp (planning, a run's end) */
  /* A frozen run's claim (src/hazard.h): while one of its replays is in
   * flight, its records are the claim's, and writer and readers are empty. */
  const struct mz__lwbuf *claim;
  /* The planned state (src/hazard.h). */
  struct mz_op *pwriter;
  struct mz_op **preaders;        /* NULL, pin, or its own block */
  unsigned npreaders, cappreaders;
  struct mz_op *rin[MZ__HZ_INLINE], *pin[MZ__HZ_INLINE];
};

enum mz__cstate { MZ__INVALID = 0, MZ__SHARED = 1, MZ__OWNER = 2 };

struct mz__copy {
  uint8_t state;
  void *mem;      /* device handle; for memnode 0 the host pointer */
  /* The exec whose transfer makes this copy valid, while that transfer
   * may not have run yet (device memory only; cleared when its run ends).
   * A reader on another queue must wait for it or copy again. */
  struct mz__exec *fetcher;
  /* Memory limits (src/memlimit.c; used only when rt->ml is on),
   * guarded by the buffer's lock: ops planned with this copy and not yet
   * finished (an evictable copy has none), ops ever planned with it,
   * evictions so far, and the last use for LRU order. */
  uint32_t pins, uses, evictions;
  uint64_t stamp;
  /* This device copy is the host memory itself (mem_wrap, zero copy): it
   * still has its own state, but making it valid from a valid host copy,
   * or the host copy valid from it, is a mem_sync, never a transfer. */
  bool alias;
};

struct mz_buffer {
  uint32_t tag;             /* MZ__TAG_BUFFER */
  _Atomic int refs;
  mz_runtime *rt;
  /* host and shape are what a CPU node's call reads of each buffer
   * argument: beside each other, in the first 64 bytes. */
  void *host;               /* host memory (memnode 0) */
  mz_shape shape;
  /* The launch of an apply given none whose first written buffer (or
   * first buffer) this is: its shape, the device's work-group size.  Kept
   * here once, not in every such task. */
  mz_launch dlaunch;
  size_t bytes;
  bool host_owned;          /* false for a tile: host aliases the parent's */
  unsigned mem_flags;       /* MZ_BUFFER_* flags in effect (a tile inherits its parent's) */
  struct mz_device *pin_dev; /* pinned host memory: the device that gave it, and its handle */
  void *pin_handle;
  mz_buffer *parent;        /* tiles: the partitioned buffer (referenced) */
  mz__spin lock;            /* guards copies[] */
  pthread_mutex_t fetch_lock; /* serializes blocking reads into host memory */
  struct mz__copy *copies;  /* rt->nmem entries */
  _Atomic int poison;       /* error of the last failed writer, 0 when fine */
  struct mz__hazards hz;     /* across runs (src/hazard.h), guarded by rt->lock */
  struct mz_buffer *prev, *next; /* rt->buffers */
  /* Partitions.  A tile's host memory is part of its parent's, but each
   * has its own copies elsewhere, so a write through one leaves the other's
   * copies behind: tiles_dirty (a tile was written since the parent's
   * copies were brought up to date) and tiles_stale (the parent was
   * written since its tiles' copies were) say which, and mz__alias_sync
   * brings the side about to be used up to date first.  Never both set.
   * On the parent, guarded by its alias_lock: the live tiles. */
  pthread_mutex_t alias_lock;
  mz_buffer **tiles;
  unsigned ntiles, captiles;
  _Atomic bool tiles_dirty, tiles_stale;
  _Atomic bool has_tiles; /* set once a tile of it is made: the fast check */
};

int mz__buffer_new(mz_runtime *rt, mz_dtype t, unsigned ndim, const size_t dims[], mz_buffer *parent,
                   size_t offset, mz_buffer **out);
/* Before an access of b, a partitioned buffer or a tile: bring b's copies
 * up to date from the other side (the tiles' latest copies gathered into
 * the parent's host memory, or the parent's latest copy into host memory
 * for its tiles).  Thread: any but a completion callback.  Locks: none
 * held.  Returns MZ_OK or the error of a read back. */
int mz__alias_sync(mz_buffer *b);
/* After an access wrote b: the other side's copies are behind. */
void mz__alias_wrote(mz_buffer *b);
/* b was written whole without error: clear its tiles' poison. */
void mz__alias_clear_tiles_poison(mz_buffer *b);
/* Bring the host copy up to date: a blocking read from a valid device copy
 * when the host copy is invalid.  Adds the bytes read to *moved (may be
 * NULL).  rec (may be NULL) describes the read this call made, timed with
 * the host clock, or has bytes 0 when it made none (the host copy was
 * valid, or another reader fetched it meanwhile).  Thread: any but a
 * completion callback.  Locks: none held. */
int mz__buffer_fetch_host(mz_buffer *b, uint64_t *moved, struct mz__xfer *rec);
/* Allocate b's copy on dev: in place over the host copy (*alias set) when
 * b is zero copy and dev can (mem_wrap), else with mem_alloc.  Thread: the
 * planning thread of dev. */
int mz__mem_alloc_kind(struct mz_device *dev, mz_buffer *b, void **mem, bool *alias);
/* Make b's aliased copy on memory node m (device dev) valid for a read:
 * from the host copy, made valid first if needed, with mem_sync; no bytes
 * move unless the host copy had to be fetched from a device with its own
 * memory (added to *moved, and described in *rec when rec is not NULL,
 * for the observers and the trace, as mz__buffer_fetch_host does).
 * Called and returns with b's spinlock held. */
int mz__plan_alias_read(mz_runtime *rt, mz_buffer *b, unsigned m, struct mz_device *dev, uint64_t *moved,
                        const char **why, struct mz__xfer *rec);

#endif
