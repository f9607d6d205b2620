/* The user's reads and writes of a buffer's contents (mz_buffer_read,
 * mz_buffer_write): cross-run hazards seen from the host.
 *
 * A read waits for the run that holds the buffer's last writer, a write
 * also for its readers, then each works on the host copy (fetched back
 * first when a device holds the latest).  A partitioned buffer's tiles
 * are waited for too: runs that wrote them are not among the buffer's own
 * hazards.  User threads only: from a runtime thread (a completion
 * callback, a host node) both refuse with MZ_EDEADLK. */
#include <string.h>

#include "coherence.h"
#include "handle.h"
#include "hazard.h"
#include "run.h"

/* Wait for the runs that hold buf's last writer (and, when all is set, its
 * readers) to finish.  Takes references on the runs under rt->lock. */
static int wait_hazards(mz_buffer *b, bool all) {
  mz_runtime *rt = b->rt;
  for (;;) {
    struct mz__run *r = NULL;
    pthread_mutex_lock(&rt->lock);
    r = mz__hz_run(&b->hz, all);
    if (r) atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&rt->lock);
    if (!r) return MZ_OK;
    mz__run_wait(r, 0, false);
    mz__run_unref(r);
  }
}

/* A reference to tile i of b (*more false past the last tile), or NULL
 * for a tile whose last reference is being dropped on another thread: it
 * is still listed until its release takes it out, and retaining it then
 * would bring it back to life and free it twice (found by the API
 * fuzzer). */
static mz_buffer *tile_ref(mz_buffer *b, unsigned i, bool *more) {
  pthread_mutex_lock(&b->alias_lock);
  *more = i < b->ntiles;
  mz_buffer *t = *more ? b->tiles[i] : NULL;
  int r = t ? atomic_load(&t->refs) : 0;
  while (r > 0 && !atomic_compare_exchange_weak(&t->refs, &r, r + 1)) {
  }
  pthread_mutex_unlock(&b->alias_lock);
  return r > 0 ? t : NULL;
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
  /* Partitioned: the latest data may be in its tiles, written by runs
   * that b's own hazards do not name. */
  for (unsigned i = 0;; i++) {
    bool more;
    mz_buffer *tile = tile_ref(b, i, &more);
    if (!more) break;
    if (!tile) continue;
    wait_hazards(tile, false);
    poison = atomic_load(&tile->poison);
    mz_buffer_release(tile);
    if (poison)
      return mz__set_error(b->rt, poison, "mz_buffer_read: the operation that writes a tile of this partitioned buffer failed");
  }
  int rc = mz__alias_sync(b);
  if (!rc) rc = mz__buffer_fetch_host(b, NULL, NULL);
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
  for (unsigned i = 0;; i++) { /* and the runs that use its tiles */
    bool more;
    mz_buffer *tile = tile_ref(b, i, &more);
    if (!more) break;
    if (!tile) continue;
    wait_hazards(tile, true);
    mz_buffer_release(tile);
  }
  pthread_mutex_lock(&b->alias_lock);
  mz__spin_lock(&b->lock);
  if (src != b->host) memcpy(b->host, src, bytes); /* the user wrote a wrapped buffer's memory */
  mz__copy_written(b, 0);
  atomic_store(&b->poison, 0);
  mz__spin_unlock(&b->lock);
  /* Its tiles' copies (if any) are behind now; what they held is replaced. */
  atomic_store(&b->tiles_dirty, false);
  atomic_store(&b->tiles_stale, true);
  for (unsigned i = 0; i < b->ntiles; i++) atomic_store(&b->tiles[i]->poison, 0);
  pthread_mutex_unlock(&b->alias_lock);
  return MZ_OK;
}
