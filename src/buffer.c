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

#include "fault.h"
#include "internal.h"

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
  b->bytes = sh.count * es;
  b->copies = copies;
  pthread_mutex_init(&b->fetch_lock, NULL);
  if (parent) {
    b->parent = mz_buffer_retain(parent);
    atomic_fetch_add(&parent->ntiles, 1);
    b->host = (char *)parent->host + offset;
    b->mem_flags = parent->mem_flags;
  } else if (user) {
    b->host = user;
    b->mem_flags = MZ_BUFFER_WRAPPED | MZ_BUFFER_ZERO_COPY;
    atomic_fetch_add(&rt->nwrapped, 1);
  } else if (flags & MZ_BUFFER_PINNED) {
    /* The first device that can pin; plain memory where none can. */
    for (unsigned d = 0; d < rt->ndev && !b->pin_dev; d++) {
      struct mz_device *dev = rt->devs[d];
      if (dev->ops->host_alloc && !atomic_load(&dev->dead) &&
          dev->ops->host_alloc(dev, b->bytes, &b->host, &b->pin_handle) == MZ_OK)
        b->pin_dev = dev;
    }
    b->mem_flags = flags & (b->pin_dev ? (MZ_BUFFER_PINNED | MZ_BUFFER_ZERO_COPY) : MZ_BUFFER_ZERO_COPY);
    if (!b->pin_dev && posix_memalign(&b->host, 4096, (b->bytes + 63) & ~(size_t)63)) {
      pthread_mutex_destroy(&b->fetch_lock);
      free(copies);
      free(b);
      return mz__set_error(rt, MZ_ENOMEM, "buffer: cannot allocate %zu bytes of host memory", sh.count * es);
    }
    b->host_owned = !b->pin_dev;
  } else {
    b->mem_flags = flags;
    /* 64-byte alignment suits vector loads and device DMA; a page, any
     * device's base address alignment (CL_DEVICE_MEM_BASE_ADDR_ALIGN), so
     * that a zero-copy buffer can be used in place. */
    size_t alloc = (b->bytes + 63) & ~(size_t)63;
    if (posix_memalign(&b->host, (flags & MZ_BUFFER_ZERO_COPY) ? 4096 : 64, alloc)) {
      size_t bytes = b->bytes;
      pthread_mutex_destroy(&b->fetch_lock);
      free(copies);
      free(b);
      return mz__set_error(rt, MZ_ENOMEM, "buffer: cannot allocate %zu bytes of host memory", bytes);
    }
    b->host_owned = true;
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
  if (flags & ~(unsigned)(MZ_BUFFER_PINNED | MZ_BUFFER_ZERO_COPY))
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
  free(b->readers);
  free(b->hz_readers);
  free(b->copies);
  if (b->host_owned) free(b->host);
  if (b->pin_dev) b->pin_dev->ops->host_free(b->pin_dev, b->host, b->pin_handle);
  if ((b->mem_flags & MZ_BUFFER_WRAPPED) && !b->parent) atomic_fetch_sub(&rt->nwrapped, 1);
  mz_buffer *parent = b->parent;
  b->tag = MZ__TAG_DEAD;
  free(b);
  if (parent) atomic_fetch_sub(&parent->ntiles, 1);
  mz_buffer_release(parent);
}

const mz_shape *mz_buffer_shape(const mz_buffer *b) { return MZ__LIVE(b, MZ__TAG_BUFFER) ? &b->shape : NULL; }
size_t mz_buffer_bytes(const mz_buffer *b) { return MZ__LIVE(b, MZ__TAG_BUFFER) ? b->bytes : 0; }

int mz__buffer_fetch_host(mz_buffer *b, uint64_t *moved, struct mz__xfer *rec) {
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
      const struct mz__copy *c = &b->copies[m];
      if (c->state == MZ__INVALID || mz__mem_lost(rt, m)) continue;
      if (c->fetcher && atomic_load_explicit(&c->fetcher->node->t->state, memory_order_acquire) != MZ__T_DONE)
        continue;
      if (!src || c->alias) src = m; /* a copy in host memory itself first: no bytes move */
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
      if (b->copies[src].state == MZ__OWNER) b->copies[src].state = MZ__SHARED;
      if (moved && !alias) *moved += b->bytes;
    }
  }
  mz__spin_unlock(&b->lock);
  pthread_mutex_unlock(&b->fetch_lock);
  return rc;
}

/* Wait for the runs that hold buf's last writer (and, when all is set, its
 * readers) to finish.  Takes references on the runs under rt->lock. */
static int wait_hazards(mz_buffer *b, bool all) {
  mz_runtime *rt = b->rt;
  for (;;) {
    struct mz__run *r = NULL;
    pthread_mutex_lock(&rt->lock);
    if (b->last_writer) r = b->last_writer->t->run;
    else if (all && b->nreaders) r = b->readers[b->nreaders - 1]->t->run;
    if (r) atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&rt->lock);
    if (!r) return MZ_OK;
    mz__run_wait(r, 0, false);
    mz__run_unref(r);
  }
}

/* The live tiles of b, each with a reference the caller drops, or NULL
 * (none, or no memory: *n is 0).  A tile whose last reference is being
 * dropped right now is skipped: it is going away with its copies. */
static mz_buffer **tiles_of(mz_buffer *b, unsigned *n) {
  *n = 0;
  if (!atomic_load(&b->ntiles)) return NULL;
  mz_runtime *rt = b->rt;
  pthread_mutex_lock(&rt->lock);
  unsigned cap = atomic_load(&b->ntiles);
  mz_buffer **v = malloc((cap ? cap : 1) * sizeof *v);
  for (mz_buffer *t = rt->buffers; t && v && *n < cap; t = t->next) {
    if (t->parent != b) continue;
    int r = atomic_load(&t->refs);
    while (r > 0 && !atomic_compare_exchange_weak(&t->refs, &r, r + 1)) {
    }
    if (r > 0) v[(*n)++] = t;
  }
  pthread_mutex_unlock(&rt->lock);
  return v;
}

/* Bring the host copies of b's tiles up to date: the tiles alias b's host
 * memory, and the latest data of a tile an op wrote on a device is in the
 * tile's copy there until something fetches it (an unpartition does; a
 * read before it must too).  Returns the first error. */
static int fetch_tiles(mz_buffer *b) {
  unsigned n;
  mz_buffer **v = tiles_of(b, &n);
  int rc = MZ_OK;
  for (unsigned i = 0; i < n; i++) {
    wait_hazards(v[i], false);
    int poison = atomic_load(&v[i]->poison);
    if (!rc && poison) rc = poison;
    if (!rc) rc = mz__buffer_fetch_host(v[i], NULL, NULL);
  }
  for (unsigned i = 0; i < n; i++) mz_buffer_release(v[i]);
  free(v);
  return rc;
}

/* After b's host memory was replaced: its tiles' device copies are stale,
 * their host copies (the same bytes) the latest. */
static void invalidate_tiles(mz_buffer *b) {
  unsigned n;
  mz_buffer **v = tiles_of(b, &n);
  for (unsigned i = 0; i < n; i++) {
    mz__spin_lock(&v[i]->lock);
    v[i]->copies[0].state = MZ__OWNER;
    for (unsigned m = 1; m < b->rt->nmem; m++) v[i]->copies[m].state = MZ__INVALID;
    atomic_store(&v[i]->poison, 0);
    mz__spin_unlock(&v[i]->lock);
  }
  for (unsigned i = 0; i < n; i++) mz_buffer_release(v[i]);
  free(v);
}

/* Wait for the ops of b's tiles that use them (all) or write them. */
static void wait_tiles(mz_buffer *b, bool all) {
  unsigned n;
  mz_buffer **v = tiles_of(b, &n);
  for (unsigned i = 0; i < n; i++) wait_hazards(v[i], all);
  for (unsigned i = 0; i < n; i++) mz_buffer_release(v[i]);
  free(v);
}

int mz_buffer_read(mz_buffer *b, void *dst, size_t bytes) {
  if (!MZ__LIVE(b, MZ__TAG_BUFFER)) return MZ_EINVAL;
  if (!dst) return mz__set_error(b->rt, MZ_EINVAL, "mz_buffer_read: NULL destination");
  if (bytes != b->bytes)
    return mz__set_error(b->rt, MZ_EINVAL, "mz_buffer_read: %zu bytes asked, the buffer has %zu", bytes, b->bytes);
  if (mz__in_runtime_thread)
    return mz__set_error(b->rt, MZ_EDEADLK, "mz_buffer_read: called from a runtime thread; it would deadlock");
  wait_hazards(b, false);
  int poison = atomic_load(&b->poison);
  if (poison) return mz__set_error(b->rt, poison, "mz_buffer_read: the operation that writes this buffer failed");
  int rc = mz__buffer_fetch_host(b, NULL, NULL);
  if (!rc) rc = fetch_tiles(b); /* after the whole buffer: a tile's writes are newer */
  if (rc) return mz__set_error(b->rt, rc, "mz_buffer_read: cannot fetch the latest copy");
  if (dst != b->host) memcpy(dst, b->host, bytes); /* a wrapped buffer read into its own memory */
  return MZ_OK;
}

int mz_buffer_write(mz_buffer *b, const void *src, size_t bytes) {
  if (!MZ__LIVE(b, MZ__TAG_BUFFER)) return MZ_EINVAL;
  if (!src) return mz__set_error(b->rt, MZ_EINVAL, "mz_buffer_write: NULL source");
  if (bytes != b->bytes)
    return mz__set_error(b->rt, MZ_EINVAL, "mz_buffer_write: %zu bytes given, the buffer has %zu", bytes, b->bytes);
  if (mz__in_runtime_thread)
    return mz__set_error(b->rt, MZ_EDEADLK, "mz_buffer_write: called from a runtime thread; it would deadlock");
  wait_hazards(b, true);
  wait_tiles(b, true);
  mz__spin_lock(&b->lock);
  if (src != b->host) memcpy(b->host, src, bytes); /* the user wrote a wrapped buffer's memory */
  b->copies[0].state = MZ__OWNER;
  for (unsigned m = 1; m < b->rt->nmem; m++) b->copies[m].state = MZ__INVALID;
  atomic_store(&b->poison, 0);
  mz__spin_unlock(&b->lock);
  invalidate_tiles(b);
  return MZ_OK;
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
                        const char **why) {
  struct mz__copy *c = &b->copies[m];
  if (c->state != MZ__INVALID) return MZ_OK;
  /* The host copy first (from another device's copy when it is stale),
   * then the device's view of it.  No command uses the device's buffer
   * meanwhile: its copy is invalid, so every earlier user of it was ordered
   * before the writer that invalidated it, and that writer before us. */
  mz__spin_unlock(&b->lock);
  int rc = mz__buffer_fetch_host(b, moved, NULL);
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
    if (b->copies[0].state == MZ__OWNER) b->copies[0].state = MZ__SHARED;
    c->state = MZ__SHARED;
    c->fetcher = NULL;
  }
  pthread_mutex_unlock(&b->fetch_lock);
  (void)rt;
  return rc;
}
