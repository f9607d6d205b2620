/* maize internals: a table of rare records keyed by address (contract in
 * src/coldtab.h).  Open addressing on the key's address, at most half
 * full, grown by doubling. */
#include "coldtab.h"

#include <stdbool.h>
#include <stdlib.h>

/* key's slot in b, or the free slot where it would go. */
static struct mz__coldslot *slot_of(struct mz__coldblk *b, const void *key) {
  for (size_t h = mz__ptr_slot(key, b->cap);; h = (h + 1) & (b->cap - 1)) {
    const void *k = __atomic_load_n(&b->v[h].key, __ATOMIC_ACQUIRE);
    if (k == key || !k) return &b->v[h];
  }
}

void *mz__coldtab_find(const struct mz__coldtab *tab, const void *key) {
  struct mz__coldblk *b = __atomic_load_n(&tab->blk, __ATOMIC_ACQUIRE);
  struct mz__coldslot *s = b ? slot_of(b, key) : NULL;
  return s && __atomic_load_n(&s->key, __ATOMIC_RELAXED) == key ? s->rec : NULL;
}

/* A block twice as large as tab's (64 slots at first) with its records,
 * published; false on ENOMEM.  tab->lock held. */
static bool grow(struct mz__coldtab *tab) {
  struct mz__coldblk *old = tab->blk;
  size_t cap = old ? 2 * old->cap : 64;
  struct mz__coldblk *b = calloc(1, sizeof *b + cap * sizeof b->v[0]);
  if (!b) return false;
  b->older = old;
  b->cap = cap;
  for (size_t i = 0; old && i < old->cap; i++)
    if (old->v[i].key) *slot_of(b, old->v[i].key) = old->v[i];
  __atomic_store_n(&tab->blk, b, __ATOMIC_RELEASE);
  return true;
}

void *mz__coldtab_make(struct mz__coldtab *tab, const void *key, size_t bytes, uint8_t *has) {
  mz__spin_lock(&tab->lock);
  void *rec = NULL;
  if (__atomic_load_n(has, __ATOMIC_RELAXED)) { /* another thread's, made under the lock */
    rec = mz__coldtab_find(tab, key);
  } else if ((tab->n + 1) * 2 <= (tab->blk ? tab->blk->cap : 0) || grow(tab)) {
    rec = calloc(1, bytes);
    if (rec) {
      struct mz__coldslot *s = slot_of(tab->blk, key);
      s->rec = rec;
      __atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
      tab->n++;
      __atomic_store_n(has, 1, __ATOMIC_RELEASE);
    }
  }
  mz__spin_unlock(&tab->lock);
  return rec;
}

void mz__coldtab_fini(struct mz__coldtab *tab, void (*drop)(void *rec)) {
  struct mz__coldblk *b = tab->blk;
  for (size_t i = 0; b && i < b->cap; i++)
    if (b->v[i].key) drop(b->v[i].rec);
  while (b) {
    struct mz__coldblk *o = b->older;
    free(b);
    b = o;
  }
  *tab = (struct mz__coldtab){0};
}
