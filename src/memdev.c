/* Device memory under limits: what maize holds on each device (bytes used
 * and peak, the resident copies, the limits themselves) and the pins that
 * keep a planned node's copies there.  Freeing a copy (a buffer's release,
 * a node's end) is counted here; making room when an allocation would pass
 * the limit is src/memlimit.c's.  Locks and the design: src/memlimit.c,
 * src/memdev.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "memdev.h"
#include "objects/mz_buffer.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"

int mz__memlimit_set(mz_runtime *rt, mz_device_kind kind, uint64_t bytes) {
  if (!rt || kind == MZ_DEVICE_CPU) return MZ_EINVAL;
  struct mz__memlimit *ml = rt->ml;
  if (!ml) {
    ml = calloc(1, sizeof *ml);
    if (!ml) return MZ_ENOMEM;
    ml->ndev = rt->ndev;
    ml->md = calloc(rt->ndev ? rt->ndev : 1, sizeof *ml->md);
    if (!ml->md) {
      free(ml);
      return MZ_ENOMEM;
    }
    for (unsigned d = 0; d < ml->ndev; d++) pthread_mutex_init(&ml->md[d].m, NULL);
    rt->ml = ml;
  }
  for (unsigned d = 0; d < ml->ndev; d++)
    if (rt->devs[d]->info.kind == kind) {
      pthread_mutex_lock(&ml->md[d].m);
      ml->md[d].limit = bytes;
      pthread_mutex_unlock(&ml->md[d].m);
    }
  return MZ_OK;
}

int mz__memlimit_init(mz_runtime *rt) {
  int rc = MZ_OK;
  static const struct { mz_device_kind kind; const char *var; } lim[] = {
      {MZ_DEVICE_OPENCL, "MZ_LIMIT_OPENCL_MEM"},
      {MZ_DEVICE_CUDA, "MZ_LIMIT_CUDA_MEM"},
      {MZ_DEVICE_SIM, "MZ_LIMIT_SIM_MEM"},
  };
  bool set[sizeof lim / sizeof *lim] = {false};
  for (unsigned i = 0; i < sizeof lim / sizeof *lim && !rc; i++) {
    const char *v = getenv(lim[i].var);
    if (!v || !*v) continue;
    set[i] = true;
    uint64_t bytes = 0;
    if (!mz__parse_bytes(v, &bytes))
      return mz__set_error(rt, MZ_EINVAL, "%s: cannot read '%s' (bytes from 1, with K, M or G: 64M)", lim[i].var, v);
    rc = mz__memlimit_set(rt, lim[i].kind, bytes);
  }
  /* A GPU's memory runs out without any limit set: the device's own
   * MZ_ENOMEM must then evict or wait as under a limit, which needs the
   * residency and pins of the memory-limit code from the first copy on.
   * So devices that own their memory get it, unlimited (the CPU queues'
   * path is unchanged; simulated devices keep no data). */
  for (unsigned i = 0; i < 2 && !rc; i++) /* lim[0], lim[1]: OpenCL, CUDA */
    for (unsigned d = 0; d < rt->ndev && !set[i] && !rc; d++)
      if (rt->devs[d]->memnode && rt->devs[d]->info.kind == lim[i].kind) {
        rc = mz__memlimit_set(rt, lim[i].kind, 0);
        set[i] = true;
      }
  return rc;
}

bool mz__memlimit_capped(const mz_runtime *rt, const struct mz_device *dev) {
  const struct mz__memlimit *ml = rt->ml;
  if (!ml || dev->info.index >= ml->ndev) return false;
  struct memdev *md = &ml->md[dev->info.index];
  pthread_mutex_lock(&md->m);
  bool capped = md->limit != 0;
  pthread_mutex_unlock(&md->m);
  return capped;
}

void mz__memlimit_fini(mz_runtime *rt) {
  struct mz__memlimit *ml = rt->ml;
  if (!ml) return;
  for (unsigned d = 0; d < ml->ndev; d++) {
    pthread_mutex_destroy(&ml->md[d].m);
    free(ml->md[d].res);
    free(ml->md[d].parked);
  }
  free(ml->md);
  free(ml);
  rt->ml = NULL;
}

void mz__mem_stats(const mz_runtime *rt, struct mz__mem_stats *out) {
  memset(out, 0, sizeof *out);
  const struct mz__memlimit *ml = rt ? rt->ml : NULL;
  if (!ml) return;
  out->evictions = atomic_load(&ml->evictions);
  out->writebacks = atomic_load(&ml->writebacks);
  out->waits = atomic_load(&ml->waits);
  out->enomem = atomic_load(&ml->enomem);
  out->max_copy_evictions = atomic_load(&ml->maxev);
}

static uint64_t copy_field(const mz_buffer *b, unsigned dev, bool ev) {
  if (!b || dev >= b->rt->ndev) return 0;
  unsigned m = b->rt->devs[dev]->memnode;
  if (!m) return 0;
  mz__spin_lock((mz__spin *)&b->lock);
  uint64_t v = ev ? b->copies[m].evictions : b->copies[m].uses;
  mz__spin_unlock((mz__spin *)&b->lock);
  return v;
}
uint64_t mz__mem_buffer_evictions(const mz_buffer *b, unsigned dev) { return copy_field(b, dev, true); }
uint64_t mz__mem_buffer_uses(const mz_buffer *b, unsigned dev) { return copy_field(b, dev, false); }

uint64_t mz__mem_used(const mz_runtime *rt, unsigned dev, bool peak) {
  if (!rt || !rt->ml || dev >= rt->ml->ndev) return 0;
  struct memdev *md = &rt->ml->md[dev];
  pthread_mutex_lock(&md->m);
  uint64_t v = peak ? md->peak : md->used;
  pthread_mutex_unlock(&md->m);
  return v;
}

/* ---- the resident list (md->m held) ---- */

void mz__memdev_res_add(struct memdev *md, mz_buffer *b) {
  for (size_t i = 0; i < md->nres; i++)
    if (md->res[i].b == b) {
      md->res[i].n++;
      return;
    }
  if (md->nres == md->capres) {
    size_t cap = md->capres ? md->capres * 2 : 64;
    struct resident *v = realloc(md->res, cap * sizeof *v);
    if (!v) return; /* not evictable then; still freed with the buffer */
    md->res = v;
    md->capres = cap;
  }
  md->res[md->nres++] = (struct resident){b, 1};
}

void mz__memdev_res_remove(struct memdev *md, mz_buffer *b) {
  for (size_t i = 0; i < md->nres; i++)
    if (md->res[i].b == b) {
      if (--md->res[i].n == 0) md->res[i] = md->res[--md->nres];
      return;
    }
}

/* ---- pins ---- */

void mz__mem_pin_exec(struct mz__exec *e, struct mz_device *dev) {
  struct mz__task *t = mz__task_of(mz__exec_node(e));
  unsigned m = dev->memnode;
  uint64_t stamp = atomic_fetch_add_explicit(&dev->rt->ml->clock, 1, memory_order_relaxed) + 1;
  for (unsigned a = 0; a < t->nacc; a++) {
    mz_buffer *b = mz__acc_buf(mz__task_access(t, a));
    mz__spin_lock(&b->lock);
    b->copies[m].pins++;
    b->copies[m].uses++;
    b->copies[m].stamp = stamp;
    mz__spin_unlock(&b->lock);
  }
}

void mz__mem_pin_src(mz_buffer *b, unsigned m) { b->copies[m].pins++; }

/* Free b's copy mem on dev; called with md->m held, which it drops around
 * the free.  A device's free may wait for the device to go idle (CUDA's
 * cuMemFree does), and the device's completion callbacks take md->m
 * (mz__mem_unpin): freeing under it deadlocks as soon as a batch ends
 * meanwhile.  The bytes count until the free returns; md->evicting tells
 * an allocation that runs short meanwhile to retry rather than fail. */
void mz__memdev_free_copy(struct memdev *md, struct mz_device *dev, mz_buffer *b, void *mem) {
  md->evicting++;
  pthread_mutex_unlock(&md->m);
  dev->ops->mem_free(dev, mem);
  pthread_mutex_lock(&md->m);
  md->evicting--;
  md->used = md->used >= b->bytes ? md->used - b->bytes : 0;
  mz__memdev_res_remove(md, b);
}

void mz__mem_free(struct mz_device *dev, mz_buffer *b, void *mem) {
  struct mz__memlimit *ml = dev->rt->ml;
  if (!ml) {
    dev->ops->mem_free(dev, mem);
    return;
  }
  struct memdev *md = &ml->md[dev->info.index];
  pthread_mutex_lock(&md->m);
  mz__memdev_free_copy(md, dev, b, mem);
  pthread_mutex_unlock(&md->m);
}

void mz__mem_drop(struct mz_device *dev, mz_buffer *b) {
  struct mz__memlimit *ml = dev->rt->ml;
  struct memdev *md = &ml->md[dev->info.index];
  unsigned m = dev->memnode;
  pthread_mutex_lock(&md->m);
  mz__spin_lock(&b->lock);
  void *mem = b->copies[m].mem;
  b->copies[m].mem = NULL;
  mz__spin_unlock(&b->lock);
  if (mem) mz__memdev_free_copy(md, dev, b, mem);
  pthread_mutex_unlock(&md->m);
}

void mz__mem_peak_reset(mz_runtime *rt, unsigned dev) {
  if (!rt || !rt->ml || dev >= rt->ml->ndev) return;
  struct memdev *md = &rt->ml->md[dev];
  pthread_mutex_lock(&md->m);
  md->peak = md->used;
  pthread_mutex_unlock(&md->m);
}

void mz__mem_dump(const mz_runtime *rt, FILE *f) {
  if (!rt || !rt->ml) return;
  struct mz__memlimit *ml = rt->ml;
  for (unsigned d = 0; d < ml->ndev; d++) {
    struct memdev *md = &ml->md[d];
    unsigned m = rt->devs[d]->memnode;
    pthread_mutex_lock(&md->m);
    fprintf(f, "dev %u: used %llu limit %llu evicting %u parked %zu resident %zu\n", d, (unsigned long long)md->used,
            (unsigned long long)md->limit, md->evicting, md->npark, md->nres);
    for (size_t i = 0; i < md->npark; i++) {
      mz_op *op = md->parked[i];
      fprintf(f, "  parked node %u state %d host_wait %d unfin %u unsub %u\n", op->id, atomic_load(&mz__op_t(op)->state),
              mz__op_t(op)->host_wait, atomic_load(&mz__op_t(op)->unfin), atomic_load(&mz__op_t(op)->unsub));
    }
    for (size_t i = 0; m && i < md->nres; i++) {
      mz_buffer *b = md->res[i].b;
      mz__spin_lock(&b->lock);
      fprintf(f, "  res %p pins %u mem %p\n", (void *)b, b->copies[m].pins, b->copies[m].mem);
      mz__spin_unlock(&b->lock);
    }
    pthread_mutex_unlock(&md->m);
  }
}

