/* Buffers: typed memory with one tracked copy per memory node.
 *
 * Memory node 0 is host memory, which the CPU uses directly; every device
 * with its own memory has one more node.  A copy is OWNER (the only valid
 * one), SHARED (valid, others too) or INVALID.  The states are changed when
 * a task is submitted, in submission order, which is the order the queues
 * run them in; hazards order conflicting tasks, so a transfer's source is
 * valid when the transfer runs. */
#include <stdlib.h>
#include <string.h>

#include "coherence.h"
#include "fault.h"
#include "handle.h"
#include "hazard.h"

/* A new buffer: a tile of parent at offset, or over the user's memory
 * (user), or with its own host memory, pinned when flags ask and a device
 * can. */
static int buffer_new(mz_runtime *rt, mz_dtype t, unsigned ndim, const size_t dims[], mz_buffer *parent,
                      size_t offset, void *user, unsigned flags, mz_buffer **out) {
  *out = NULL;
  size_t es = mz_dtype_size(t);
  if (!es) return mz__set_error(rt, MZ_EINVAL, "buffer: unknown element type %d", (int)t);
  if (ndim < 1 || ndim > 3 || !dims) return mz__set_error(rt, MZ_EINVAL, "buffer: ndim must be 1 to 3 (got %u)", ndim);
  mz_shape sh = {.dtype = t, .ndim = ndim, .dims = {1, 1, 1}, .count = 1};
  for (unsigned i = 0; i < ndim; i++) {
    if (dims[i] == 0) return mz__set_error(rt, MZ_EINVAL, "buffer: dimension %u is zero", i);
    if (sh.count > SIZE_MAX / dims[i] || sh.count * dims[i] > SIZE_MAX / es)
      return mz__set_error(rt, MZ_EINVAL, "buffer: size overflows");
    sh.dims[i] = dims[i];
    sh.count *= dims[i];
  }
  if (!parent) {
    /* A buffer no device could ever hold is refused here, with a
     * message, rather than by an allocator (or a sanitizer) later.  Devices
     * whose memory is unknown (0) do not count. */
    uint64_t most = 0;
    const char *where = "";
    for (unsigned d = 0; d < rt->ndev; d++)
      if (rt->devs[d]->info.memory > most) {
        most = rt->devs[d]->info.memory;
        where = rt->devs[d]->info.name;
      }
    if (most && sh.count * es > most)
      return mz__set_error(rt, MZ_ENOMEM,
                           "buffer: %zu bytes is larger than every device's memory (the largest: %llu bytes, %s)",
                           sh.count * es, (unsigned long long)most, where);
  }
  mz_buffer *b = calloc(1, sizeof *b);
  struct mz__copy *copies = calloc(rt->nmem, sizeof *copies);
  if (!b || !copies) {
    free(b);
    free(copies);
    return mz__set_error(rt, MZ_ENOMEM, "buffer: out of memory");
  }
  b->tag = MZ__TAG_BUFFER;
  b->rt = rt;
  atomic_init(&b->refs, 1);
  b->shape = sh;
  b->dlaunch.ndim = sh.ndim;
  for (unsigned d = 0; d < 3; d++) b->dlaunch.global[d] = sh.dims[d];
  b->bytes = sh.count * es;
  b->copies = copies;
  pthread_mutex_init(&b->fetch_lock, NULL);
  pthread_mutex_init(&b->alias_lock, NULL);
  if (parent) {
    pthread_mutex_lock(&parent->alias_lock);
    if (parent->ntiles == parent->captiles) {
      unsigned cap = parent->captiles ? parent->captiles * 2 : 4;
      mz_buffer **v = realloc(parent->tiles, cap * sizeof *v);
      if (v) {
        parent->tiles = v;
        parent->captiles = cap;
      }
    }
    bool room = parent->ntiles < parent->captiles;
    if (room) parent->tiles[parent->ntiles++] = b;
    atomic_store(&parent->has_tiles, true);
    pthread_mutex_unlock(&parent->alias_lock);
    /* A replay claiming the parent would not look at has_tiles again. */
    pthread_mutex_lock(&rt->lock);
    mz__hz_unclaim(&parent->hz);
    pthread_mutex_unlock(&rt->lock);
    if (!room) {
      pthread_mutex_destroy(&b->fetch_lock);
      pthread_mutex_destroy(&b->alias_lock);
      free(copies);
      free(b);
      return mz__set_error(rt, MZ_ENOMEM, "buffer: out of memory");
    }
    b->parent = mz_buffer_retain(parent);
    b->host = (char *)parent->host + offset;
    b->mem_flags = parent->mem_flags;
  } else if (user) {
    b->host = user;
    b->mem_flags = MZ_BUFFER_WRAPPED | MZ_BUFFER_ZERO_COPY;
    atomic_fetch_add(&rt->nwrapped, 1);
  } else {
    if (flags & MZ_BUFFER_MANAGED) {
      /* Shared memory from the first device that has it, devices with
       * memory of their own first (a CUDA GPU's managed memory is also
       * usable in place by host-unified devices; the SVM of a host-unified
       * device is not by a GPU of another driver). */
      for (int pass = 0; pass < 2 && !b->pin_dev; pass++)
        for (unsigned d = 0; d < rt->ndev && !b->pin_dev; d++) {
          struct mz_device *dev = rt->devs[d];
          if (dev->info.unified_memory == (pass == 0) || !dev->ops->shared_alloc || atomic_load(&dev->dead)) continue;
          if (dev->ops->shared_alloc(dev, b->bytes, &b->host, &b->pin_handle) == MZ_OK) b->pin_dev = dev;
        }
      b->mem_flags = b->pin_dev ? MZ_BUFFER_MANAGED | MZ_BUFFER_ZERO_COPY : MZ_BUFFER_ZERO_COPY;
    } else if (flags & MZ_BUFFER_PINNED) {
      /* The first device that can pin; plain memory where none can. */
      for (unsigned d = 0; d < rt->ndev && !b->pin_dev; d++) {
        struct mz_device *dev = rt->devs[d];
        if (dev->ops->host_alloc && !atomic_load(&dev->dead) &&
            dev->ops->host_alloc(dev, b->bytes, &b->host, &b->pin_handle) == MZ_OK)
          b->pin_dev = dev;
      }
      b->mem_flags = flags & (b->pin_dev ? (MZ_BUFFER_PINNED | MZ_BUFFER_ZERO_COPY) : MZ_BUFFER_ZERO_COPY);
    } else {
      b->mem_flags = flags;
    }
    /* 64-byte alignment suits vector loads and device DMA; a page, any
     * device's base address alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN), so
     * that a zero-copy buffer can be used in place. */
    size_t alloc = (b->bytes + 63) & ~(size_t)63;
    if (!b->pin_dev && posix_memalign(&b->host, (b->mem_flags & MZ_BUFFER_ZERO_COPY) ? 4096 : 64, alloc)) {
      size_t bytes = b->bytes;
      pthread_mutex_destroy(&b->fetch_lock);
      pthread_mutex_destroy(&b->alias_lock);
      free(copies);
      free(b);
      return mz__set_error(rt, MZ_ENOMEM, "buffer: cannot allocate %zu bytes of host memory", bytes);
    }
    b->host_owned = !b->pin_dev;
  }
  copies[0].state = MZ__OWNER;
  copies[0].mem = b->host;
  pthread_mutex_lock(&rt->lock);
  b->next = rt->buffers;
  if (rt->buffers) rt->buffers->prev = b;
  rt->buffers = b;
  pthread_mutex_unlock(&rt->lock);
  *out = b;
  return MZ_OK;
}

int mz__buffer_new(mz_runtime *rt, mz_dtype t, unsigned ndim, const size_t dims[], mz_buffer *parent,
                   size_t offset, mz_buffer **out) {
  return buffer_new(rt, t, ndim, dims, parent, offset, NULL, 0, out);
}

int mz_buffer_create(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[], const void *data,
                     mz_buffer **out) {
  return mz_buffer_create_ex(rt, dtype, ndim, dims, data, 0, out);
}

int mz_buffer_wrap(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[], void *ptr, mz_buffer **out) {
  if (out) *out = NULL;
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !out || !ptr)
    return mz__set_error(rt, MZ_EINVAL, "mz_buffer_wrap: NULL argument or not a live runtime");
  return buffer_new(rt, dtype, ndim, dims, NULL, 0, ptr, 0, out);
}

unsigned mz_buffer_memory(const mz_buffer *b) { return MZ__LIVE(b, MZ__TAG_BUFFER) ? b->mem_flags : 0; }

int mz_buffer_create_ex(mz_runtime *rt, mz_dtype dtype, unsigned ndim, const size_t dims[], const void *data,
                        unsigned flags, mz_buffer **out) {
  if (out) *out = NULL;
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !out)
    return mz__set_error(rt, MZ_EINVAL, "mz_buffer_create: NULL argument or not a live runtime");
  if (flags & ~(unsigned)(MZ_BUFFER_PINNED | MZ_BUFFER_ZERO_COPY | MZ_BUFFER_MANAGED))
    return mz__set_error(rt, MZ_EINVAL, "mz_buffer_create_ex: unknown flags 0x%x", flags);
  int rc = buffer_new(rt, dtype, ndim, dims, NULL, 0, NULL, flags, out);
  if (rc) return rc;
  if (data) memcpy((*out)->host, data, (*out)->bytes);
  else memset((*out)->host, 0, (*out)->bytes);
  return MZ_OK;
}

mz_buffer *mz_buffer_retain(mz_buffer *b) {
  if (!MZ__LIVE(b, MZ__TAG_BUFFER)) return NULL;
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  return b;
}

void mz_buffer_release(mz_buffer *b) {
  if (!MZ__LIVE(b, MZ__TAG_BUFFER) || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  mz_runtime *rt = b->rt;
  if (b->parent) {
    /* A tile whose latest copy is on a device: into the parent's host
     * memory first, or its data would be lost with it (not from a runtime
     * thread, which may be a completion callback that must not block). */
    mz_buffer *p = b->parent;
    pthread_mutex_lock(&p->alias_lock);
    if (!mz__in_runtime_thread && rt->nmem > 1 && atomic_load(&p->tiles_dirty)) (void)mz__buffer_fetch_host(b, NULL, NULL);
    for (unsigned i = 0; i < p->ntiles; i++)
      if (p->tiles[i] == b) {
        p->tiles[i] = p->tiles[--p->ntiles];
        break;
      }
    pthread_mutex_unlock(&p->alias_lock);
  }
  for (unsigned m = 1; m < rt->nmem; m++) {
    if (rt->ml) { /* an eviction may be freeing it right now */
      mz__mem_drop(rt->mem_dev[m], b);
      continue;
    }
    if (b->copies[m].mem) {
      struct mz_device *dev = rt->mem_dev[m];
      dev->ops->mem_free(dev, b->copies[m].mem);
    }
  }
  pthread_mutex_lock(&rt->lock);
  if (b->prev) b->prev->next = b->next;
  else rt->buffers = b->next;
  if (b->next) b->next->prev = b->prev;
  pthread_mutex_unlock(&rt->lock);
  pthread_mutex_destroy(&b->fetch_lock);
  pthread_mutex_destroy(&b->alias_lock);
  free(b->tiles);
  mz__hz_free(&b->hz);
  free(b->copies);
  if (b->host_owned) free(b->host);
  if (b->pin_dev) b->pin_dev->ops->host_free(b->pin_dev, b->host, b->pin_handle);
  if ((b->mem_flags & MZ_BUFFER_WRAPPED) && !b->parent) atomic_fetch_sub(&rt->nwrapped, 1);
  mz_buffer *parent = b->parent;
  b->tag = MZ__TAG_DEAD;
  free(b);
  mz_buffer_release(parent);
}

const mz_shape *mz_buffer_shape(const mz_buffer *b) { return MZ__LIVE(b, MZ__TAG_BUFFER) ? &b->shape : NULL; }
size_t mz_buffer_bytes(const mz_buffer *b) { return MZ__LIVE(b, MZ__TAG_BUFFER) ? b->bytes : 0; }

int mz__buffer_fetch_host(mz_buffer *b, uint64_t *moved, struct mz__xfer *rec) {
  /* Callers count *rec when its bytes are set: never a stale record of an
   * earlier run of the same node. */
  if (rec) rec->bytes = 0;
  mz_runtime *rt = b->rt;
  if (rec) memset(rec, 0, sizeof *rec);
  mz__spin_lock(&b->lock);
  bool valid = b->copies[0].state != MZ__INVALID;
  mz__spin_unlock(&b->lock);
  if (valid) return MZ_OK;
  /* One reader fetches; concurrent readers wait here and then find the
   * host copy valid.  The spinlock is not held across the blocking read. */
  pthread_mutex_lock(&b->fetch_lock);
  int rc = MZ_OK;
  mz__spin_lock(&b->lock);
  if (b->copies[0].state == MZ__INVALID) {
    /* Not from a dead device, and not from a copy whose transfer
     * in may not have run yet (another device's reader planned it): it
     * would read as garbage.  Its source is valid too, unless that was on
     * a device that died since: then no copy can be read. */
    unsigned src = 0;
    for (unsigned m = 1; m < rt->nmem && !(src && b->copies[src].alias); m++) {
      if (!mz__copy_readable(rt, b, m)) continue;
      if (!src || b->copies[m].alias) src = m; /* a copy in host memory itself first: no bytes move */
    }
    void *mem = src ? b->copies[src].mem : NULL;
    bool alias = src && b->copies[src].alias;
    mz__spin_unlock(&b->lock);
    if (!src) {
      rc = MZ_EDEVICE; /* the only valid copy was on a device that died */
    } else {
      struct mz_device *dev = rt->mem_dev[src];
      uint64_t t0 = rec ? mz__now_ns() : 0;
      rc = alias ? dev->ops->mem_sync(dev, mem, b->bytes, true) : dev->ops->mem_read(dev, mem, b->host, b->bytes);
      /* An aliased copy moves no bytes: no read to record. */
      if (rec && rc == MZ_OK && !alias)
        *rec = (struct mz__xfer){.src_dev = dev, .bytes = b->bytes, .t_start = t0, .t_end = mz__now_ns()};
    }
    mz__spin_lock(&b->lock);
    if (rc == MZ_OK) {
      b->copies[0].state = MZ__SHARED;
      mz__copy_read_from(b, src);
      if (moved && !alias) *moved += b->bytes;
    }
  }
  mz__spin_unlock(&b->lock);
  pthread_mutex_unlock(&b->fetch_lock);
  return rc;
}

static void make_host_owner(mz_buffer *b) {
  mz__spin_lock(&b->lock);
  mz__copy_written(b, 0);
  mz__spin_unlock(&b->lock);
}

int mz__alias_sync(mz_buffer *b) {
  int rc = MZ_OK;
  mz_buffer *p = b->parent;
  if (p && atomic_load_explicit(&p->tiles_stale, memory_order_acquire)) {
    /* The parent was written since: its latest copy into host memory,
     * which every tile's host copy is part of. */
    pthread_mutex_lock(&p->alias_lock);
    if (atomic_load(&p->tiles_stale)) {
      rc = mz__buffer_fetch_host(p, NULL, NULL);
      if (!rc) {
        for (unsigned i = 0; i < p->ntiles; i++) make_host_owner(p->tiles[i]);
        atomic_store(&p->tiles_stale, false);
      }
    }
    pthread_mutex_unlock(&p->alias_lock);
  } else if (!p && atomic_load_explicit(&b->tiles_dirty, memory_order_acquire)) {
    /* A tile was written since: every tile's latest copy into host memory
     * (its part of b's), which is then b's only valid copy. */
    pthread_mutex_lock(&b->alias_lock);
    if (atomic_load(&b->tiles_dirty)) {
      for (unsigned i = 0; !rc && i < b->ntiles; i++) rc = mz__buffer_fetch_host(b->tiles[i], NULL, NULL);
      if (!rc) {
        make_host_owner(b);
        atomic_store(&b->tiles_dirty, false);
      }
    }
    pthread_mutex_unlock(&b->alias_lock);
  }
  return rc;
}

void mz__alias_wrote(mz_buffer *b) {
  mz_buffer *p = b->parent;
  if (p) {
    /* The parent's device copies lack this write; its host copy, valid
     * after the tile's sync, lacks it only when the tile was written on a
     * device, which tiles_dirty records. */
    mz__spin_lock(&p->lock);
    if (p->copies[0].state != MZ__INVALID) mz__copy_written(p, 0);
    mz__spin_unlock(&p->lock);
    if (!atomic_load_explicit(&p->tiles_dirty, memory_order_relaxed)) atomic_store(&p->tiles_dirty, true);
  } else if (!atomic_load_explicit(&b->tiles_stale, memory_order_relaxed)) {
    atomic_store(&b->tiles_stale, true); /* any tiles it has are behind (none: never read) */
  }
}

void mz__alias_clear_tiles_poison(mz_buffer *b) {
  pthread_mutex_lock(&b->alias_lock);
  for (unsigned i = 0; i < b->ntiles; i++) atomic_store(&b->tiles[i]->poison, 0);
  pthread_mutex_unlock(&b->alias_lock);
}

int mz__mem_alloc_kind(struct mz_device *dev, mz_buffer *b, void **mem, bool *alias) {
  *alias = false;
  if ((b->mem_flags & MZ_BUFFER_ZERO_COPY) && dev->ops->mem_wrap && dev->ops->mem_sync &&
      dev->ops->mem_wrap(dev, b->host, b->bytes, mem) == MZ_OK) {
    *alias = true;
    return MZ_OK;
  }
  return dev->ops->mem_alloc(dev, b->bytes, mem);
}

int mz__plan_alias_read(mz_runtime *rt, mz_buffer *b, unsigned m, struct mz_device *dev, uint64_t *moved,
                        const char **why, struct mz__xfer *rec) {
  struct mz__copy *c = &b->copies[m];
  if (c->state != MZ__INVALID) return MZ_OK;
  /* The host copy first (from another device's copy when it is stale),
   * then the device's view of it.  No command uses the device's buffer
   * meanwhile: its copy is invalid, so every earlier user of it was ordered
   * before the writer that invalidated it, and that writer before us. */
  mz__spin_unlock(&b->lock);
  int rc = mz__buffer_fetch_host(b, moved, rec);
  if (rc) {
    *why = "cannot read a buffer back from its device";
    mz__spin_lock(&b->lock);
    return rc;
  }
  /* One sync per invalidation: two readers on different queues may both
   * find the copy invalid; the second waits here and finds it valid, so
   * the buffer is never mapped while the first reader's kernel uses it. */
  pthread_mutex_lock(&b->fetch_lock);
  mz__spin_lock(&b->lock);
  bool need = c->state == MZ__INVALID;
  mz__spin_unlock(&b->lock);
  if (need && (rc = dev->ops->mem_sync(dev, c->mem, b->bytes, false)) != MZ_OK)
    *why = "cannot make host memory visible to a device that shares it";
  mz__spin_lock(&b->lock);
  if (!rc && need) {
    mz__copy_read_from(b, 0);
    c->state = MZ__SHARED;
    c->fetcher = NULL;
  }
  pthread_mutex_unlock(&b->fetch_lock);
  (void)rt;
  return rc;
}
