/* Device memory limits and eviction.  See src/fault.h.
 *
 * On only when a limit was set (MZ_LIMIT_<KIND>_MEM or mz__memlimit_set),
 * so the hot path pays one test of rt->ml.  Then every node planned on a
 * device with its own memory pins its buffers' copies there (struct
 * mz__copy's pins, under the buffer's lock) until it finishes; a copy
 * with no pin belongs to no queued or running op and may be evicted.
 *
 * Allocation on a device (mz__mem_alloc, on the thread that plans for that
 * device) under the device's mutex: when the allocation would pass the
 * limit, or the device itself says MZ_ENOMEM, evict the least recently
 * used unpinned copy (writing it back to host memory first when it is the
 * only valid one) and try again.  When nothing can be evicted, the node
 * waits (MZ__EMEMWAIT: the core parks it, mz__mem_park) if ops in flight
 * on the device hold pinned copies, since their end releases memory; else
 * it fails with MZ_ENOMEM.  A parked node is resumed by the next node that
 * finishes on the device, and goes back through the host-side path.
 *
 * No livelock.  Only a node's end wakes parked nodes (parking does not),
 * a node parks only while another holds pins, and a copy is evicted at
 * most once per use (c->evictions <= c->uses, checked), so evictions per
 * buffer are bounded by the ops that use it.
 *
 * Locks: the device's mutex, then a buffer's fetch_lock (trylock only),
 * then its spinlock.  Nothing here takes rt->lock.  No device memory is
 * freed or read back under the device's mutex: those calls may wait for
 * the device's completion callbacks, which take it (mz__mem_unpin). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coherence.h"
#include "fault.h"
#include "memdev.h"

static void unpin_own(struct mz__exec *e, unsigned m) {
  struct mz__task *t = mz__task_of(mz__exec_node(e));
  for (unsigned a = 0; a < t->nacc; a++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    mz__spin_lock(&b->lock);
    if (b->copies[m].pins) b->copies[m].pins--;
    mz__spin_unlock(&b->lock);
  }
}

/* md->m held. */
static void take_parked(struct memdev *md, mz_op ***v, size_t *n, size_t *cap) {
  if (md->npark) {
    if (*n + md->npark > *cap) {
      size_t nc = *n + md->npark + 8;
      mz_op **nv = realloc(*v, nc * sizeof *nv);
      if (!nv) abort(); /* cannot lose a node: nothing sane to do */
      *v = nv;
      *cap = nc;
    }
    memcpy(*v + *n, md->parked, md->npark * sizeof *md->parked);
    *n += md->npark;
    md->npark = 0;
  }
}

/* The pins of e's peer-transfer sources, on their own devices (md->m of
 * each taken in turn); parked nodes there are appended to *v. */
static void unpin_sources(struct mz__exec *e, struct mz__memlimit *ml, unsigned m, mz_op ***v, size_t *n, size_t *cap) {
  struct mz__task *t = mz__task_of(mz__exec_node(e));
  for (unsigned i = 0; i < mz__exec_nxfer(e); i++) {
    struct mz__xfer *x = &mz__exec_xd(e)->xfers[i];
    if (!x->src_dev) continue;
    struct memdev *ms = &ml->md[x->src_dev->info.index];
    pthread_mutex_lock(&ms->m);
    for (unsigned a = 0; a < t->nacc; a++) {
      mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
      mz__spin_lock(&b->lock);
      bool hit = b->copies[m].mem == x->dst;
      if (hit && b->copies[x->src_dev->memnode].pins) b->copies[x->src_dev->memnode].pins--;
      mz__spin_unlock(&b->lock);
      if (hit) break;
    }
    take_parked(ms, v, n, cap);
    pthread_mutex_unlock(&ms->m);
  }
}

/* Unpin what the plans of ex[0..n) pinned (one queue's execs), those
 * that ended (status above MZ__ERETRY) when ended_only; the parked nodes
 * to resume come back (*nw of them).  Pins drop only under the device's
 * mutex, so an allocation that holds it sees no copy turn evictable
 * between its search for a victim and its check for pinned copies (which
 * would fail it with MZ_ENOMEM); taken once for all of ex.  The sources of
 * peer transfers first: they are found through the nodes' own copies,
 * which may be evicted once unpinned (a pin left behind would make nodes
 * wait for memory forever). */
static mz_op **unpin_execs(struct mz__exec *const *ex, unsigned n, bool ended_only, size_t *nw) {
  mz_op **v = NULL;
  size_t cap = 0;
  *nw = 0;
  if (!n) return NULL;
  struct mz_device *dev = mz__exec_queue(ex[0])->dev;
  struct mz__memlimit *ml = dev->rt->ml;
  unsigned m = dev->memnode;
  for (unsigned i = 0; i < n; i++)
    if (mz__exec_nxfer(ex[i]) && (!ended_only || ex[i]->status > MZ__ERETRY)) unpin_sources(ex[i], ml, m, &v, nw, &cap);
  struct memdev *md = &ml->md[dev->info.index];
  pthread_mutex_lock(&md->m);
  for (unsigned i = 0; i < n; i++)
    if (!ended_only || ex[i]->status > MZ__ERETRY) unpin_own(ex[i], m);
  take_parked(md, &v, nw, &cap);
  pthread_mutex_unlock(&md->m);
  return v;
}

mz_op **mz__mem_unpin_batch(struct mz__exec *const *ex, unsigned n, size_t *nw) { return unpin_execs(ex, n, true, nw); }

mz_op **mz__mem_unpin(struct mz__exec *e, size_t *n) { return unpin_execs(&e, 1, false, n); }

static bool any_pinned(struct memdev *md, unsigned m, const struct mz__exec *own) {
  for (size_t i = 0; i < md->nres; i++) {
    mz_buffer *b = md->res[i].b;
    unsigned mine = 0;
    if (own)
      for (unsigned a = 0; a < mz__task_of(mz__exec_node(own))->nacc; a++) mine += mz__acc_buf(mz__task_access(mz__task_of(mz__exec_node(own)), a)) == b;
    mz__spin_lock(&b->lock);
    bool held = b->copies[m].pins > mine;
    mz__spin_unlock(&b->lock);
    if (held) return true;
  }
  return false;
}

bool mz__mem_park(struct mz__exec *e, mz_op ***woken, size_t *nwoken) {
  struct mz_device *dev = mz__exec_queue(e)->dev;
  struct memdev *md = &dev->rt->ml->md[dev->info.index];
  size_t cap = 0;
  *woken = NULL;
  *nwoken = 0;
  pthread_mutex_lock(&md->m);
  unpin_own(e, dev->memnode);
  bool park = any_pinned(md, dev->memnode, NULL);
  if (park) {
    if (md->npark == md->cappark) {
      size_t cap2 = md->cappark ? md->cappark * 2 : 16;
      mz_op **v = realloc(md->parked, cap2 * sizeof *v);
      if (v) {
        md->parked = v;
        md->cappark = cap2;
      }
    }
    park = md->npark < md->cappark;
    if (park) md->parked[md->npark++] = mz__exec_node(e);
  } else {
    /* Nothing here holds memory any more: the nodes parked before, which
     * may have waited for this one's pins, retry too (no node would end
     * to wake them). */
    take_parked(md, woken, nwoken, &cap);
  }
  pthread_mutex_unlock(&md->m);
  if (park) atomic_fetch_add_explicit(&dev->rt->ml->waits, 1, memory_order_relaxed);
  return park;
}

/* ---- eviction ---- */

/* Free b's copy on dev, writing it back to host memory first when it is
 * the only valid copy.  Returns false, changing nothing, when the copy is
 * in use or changed meanwhile.  The device's mutex is NOT held: the
 * write-back is a blocking device read, and completion callbacks take
 * that mutex (mz__mem_unpin) on threads the device may need to finish it.
 * The caller holds a reference on b and does the accounting. */
static bool evict(struct mz__memlimit *ml, struct mz_device *dev, mz_buffer *b, bool *busy) {
  mz_runtime *rt = dev->rt;
  unsigned m = dev->memnode;
  if (pthread_mutex_trylock(&b->fetch_lock)) { /* a read-back is using it: try again later */
    *busy = true;
    return false;
  }
  mz__spin_lock(&b->lock);
  struct mz__copy *c = &b->copies[m];
  void *mem = c->mem;
  if (!mem || c->pins) { /* changed since it was picked: look again */
    *busy = true;
    mz__spin_unlock(&b->lock);
    pthread_mutex_unlock(&b->fetch_lock);
    return false;
  }
  /* Another copy counts only when it is settled: one whose transfer in
   * has not run yet (its reader may be finishing right now) cannot be
   * read back, so this copy is then written back first. */
  bool only = c->state != MZ__INVALID;
  for (unsigned k = 0; k < rt->nmem && only; k++) {
    if (k != m && mz__copy_readable(rt, b, k)) only = false;
  }
  void *tmp = NULL;
  if (only) {
    /* Read into scratch first: until the states are checked again below,
     * a CPU task may own the host copy. */
    uint8_t st = c->state;
    mz__spin_unlock(&b->lock);
    tmp = calloc(1, b->bytes ? b->bytes : 1);
    int rc = tmp ? dev->ops->mem_read(dev, mem, tmp, b->bytes) : MZ_ENOMEM;
    mz__spin_lock(&b->lock);
    if (rc || c->mem != mem || c->pins || c->state != st) {
      *busy = true;
      mz__spin_unlock(&b->lock);
      pthread_mutex_unlock(&b->fetch_lock);
      free(tmp);
      return false;
    }
    memcpy(b->host, tmp, b->bytes);
    mz__copy_written(b, 0);
  }
  c->state = MZ__INVALID;
  c->fetcher = NULL;
  c->mem = NULL;
  uint64_t ev = ++c->evictions;
  mz__spin_unlock(&b->lock);
  pthread_mutex_unlock(&b->fetch_lock);
  free(tmp);
  dev->ops->mem_free(dev, mem);
  atomic_fetch_add_explicit(&ml->evictions, 1, memory_order_relaxed);
  if (only) atomic_fetch_add_explicit(&ml->writebacks, 1, memory_order_relaxed);
  uint64_t mx = atomic_load_explicit(&ml->maxev, memory_order_relaxed);
  while (ev > mx && !atomic_compare_exchange_weak(&ml->maxev, &mx, ev)) {
  }
  return true;
}

/* The least recently used evictable copy on dev not tried yet, with a
 * reference taken on its buffer (NULL when none).  md->m held. */
static mz_buffer *pick_victim(struct memdev *md, unsigned m, mz_buffer **tried, size_t ntried, bool *busy) {
  mz_buffer *best = NULL;
  uint64_t best_stamp = UINT64_MAX;
  for (size_t i = 0; i < md->nres; i++) {
    mz_buffer *b = md->res[i].b;
    bool skip = false;
    for (size_t j = 0; j < ntried && !skip; j++) skip = tried[j] == b;
    if (skip) continue;
    if (atomic_load(&b->refs) <= 0) { /* being released: its bytes come back in a moment */
      *busy = true;
      continue;
    }
    mz__spin_lock(&b->lock);
    const struct mz__copy *c = &b->copies[m];
    /* The bound: a copy is evicted at most once per use. */
    bool ok = c->mem && !c->pins && c->evictions < c->uses;
    uint64_t st = c->stamp;
    mz__spin_unlock(&b->lock);
    if (ok && st < best_stamp) {
      best = b;
      best_stamp = st;
    }
  }
  if (!best) return NULL;
  /* Keep it alive while md->m is dropped; one being released is skipped. */
  int r = atomic_load(&best->refs);
  while (r > 0 && !atomic_compare_exchange_weak(&best->refs, &r, r + 1)) {
  }
  if (r <= 0) *busy = true;
  return r > 0 ? best : NULL;
}

int mz__mem_alloc(struct mz__exec *e, struct mz_device *dev, mz_buffer *b, void **mem, const char **why) {
  mz_runtime *rt = dev->rt;
  if (rt->faults && mz__fault_hit(rt, MZ__FAULT_ALLOC)) {
    *why = "injected fault: a device allocation failed";
    return MZ_ENOMEM;
  }
  struct mz__memlimit *ml = rt->ml;
  if (!ml) return dev->ops->mem_alloc(dev, b->bytes, mem);
  struct memdev *md = &ml->md[dev->info.index];
  mz_buffer **tried = NULL; /* referenced: released once md->m is dropped */
  size_t ntried = 0, captried = 0;
  bool busy = false;
  int rc;
  pthread_mutex_lock(&md->m);
  for (;;) {
    if (!md->limit || md->used + b->bytes <= md->limit) {
      rc = dev->ops->mem_alloc(dev, b->bytes, mem);
      if (rc == MZ_OK) {
        md->used += b->bytes;
        if (md->used > md->peak) md->peak = md->used;
        mz__memdev_res_add(md, b);
        break;
      }
      if (rc != MZ_ENOMEM) break;
    }
    mz_buffer *v = NULL;
    if (md->limit && b->bytes > md->limit) {
      rc = MZ_ENOMEM; /* could never fit */
    } else if ((v = pick_victim(md, dev->memnode, tried, ntried, &busy)) != NULL) {
      if (ntried == captried) {
        size_t cap = captried ? captried * 2 : 8;
        mz_buffer **nv = realloc(tried, cap * sizeof *nv);
        if (!nv) {
          pthread_mutex_unlock(&md->m);
          mz_buffer_release(v);
          pthread_mutex_lock(&md->m);
          rc = MZ_ENOMEM;
          break;
        }
        tried = nv;
        captried = cap;
      }
      tried[ntried++] = v;
      md->evicting++;
      pthread_mutex_unlock(&md->m);
      bool done = evict(ml, dev, v, &busy);
      pthread_mutex_lock(&md->m);
      md->evicting--;
      if (done) {
        md->used = md->used >= v->bytes ? md->used - v->bytes : 0;
        mz__memdev_res_remove(md, v);
      }
      continue;
    } else if (md->evicting || busy) {
      /* Another thread is freeing a copy here (simulated devices plan from
       * several threads), or a copy was busy being read back: its bytes
       * come back in a moment.  Try every copy again. */
      pthread_mutex_unlock(&md->m);
      for (size_t i = 0; i < ntried; i++) mz_buffer_release(tried[i]);
      ntried = 0;
      busy = false;
      sched_yield();
      pthread_mutex_lock(&md->m);
      continue;
    } else {
      rc = any_pinned(md, dev->memnode, e) ? MZ__EMEMWAIT : MZ_ENOMEM;
    }
    if (rc == MZ_ENOMEM) {
      atomic_fetch_add_explicit(&ml->enomem, 1, memory_order_relaxed);
      *why = md->limit && b->bytes > md->limit
                 ? "the buffer is larger than the device's memory limit"
                 : "device memory is full and nothing can be evicted (every copy there is in use by this node)";
    }
    break;
  }
  pthread_mutex_unlock(&md->m);
  for (size_t i = 0; i < ntried; i++) mz_buffer_release(tried[i]);
  free(tried);
  return rc;
}

