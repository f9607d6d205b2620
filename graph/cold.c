/* maize internals: a graph's table of its tasks' cold records (struct
 * mz__coldtab, src/objects/mz_op.h).
 *
 * Few tasks have a record (explicit edges, plan order, a launch, a host
 * node's call, a failure's message), so a task holds no pointer to one:
 * its op's cold flag says that it has one, and the record is found here.
 * Makers hold the table's spinlock; readers take no lock (see struct
 * mz__coldblk). */
#include <stdlib.h>

#include "objects/mz_graph.h"
#include "objects/mz_op.h"

static struct mz__coldtab *table_of(const struct mz_op *op) { return &mz__op_graph(op)->cold; }

static struct mz__coldslot *slot_of(struct mz__coldblk *b, const struct mz_op *op) {
  for (size_t h = mz__ptr_slot(op, b->cap);; h = (h + 1) & (b->cap - 1)) {
    const struct mz_op *k = __atomic_load_n(&b->v[h].op, __ATOMIC_ACQUIRE);
    if (k == op || !k) return &b->v[h];
  }
}

struct mz__tcold *mz__cold_find(const struct mz_op *op) {
  struct mz__coldblk *b = __atomic_load_n(&table_of(op)->blk, __ATOMIC_ACQUIRE);
  struct mz__coldslot *s = b ? slot_of(b, op) : NULL;
  return s && __atomic_load_n(&s->op, __ATOMIC_RELAXED) == op ? s->c : NULL;
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
    if (old->v[i].op) *slot_of(b, old->v[i].op) = old->v[i];
  __atomic_store_n(&tab->blk, b, __ATOMIC_RELEASE);
  return true;
}

struct mz__tcold *mz__cold_make(struct mz_op *op) {
  struct mz__coldtab *tab = table_of(op);
  mz__spin_lock(&tab->lock);
  struct mz__tcold *c = NULL;
  if (__atomic_load_n(&op->cold, __ATOMIC_RELAXED)) { /* another thread's, made under the lock */
    c = mz__cold_find(op);
  } else if ((tab->n + 1) * 2 <= (tab->blk ? tab->blk->cap : 0) || grow(tab)) {
    c = calloc(1, sizeof *c);
    if (c) {
      struct mz__coldslot *s = slot_of(tab->blk, op);
      s->c = c;
      __atomic_store_n(&s->op, op, __ATOMIC_RELEASE);
      tab->n++;
      __atomic_store_n(&op->cold, 1, __ATOMIC_RELEASE);
    }
  }
  mz__spin_unlock(&tab->lock);
  return c;
}

void mz__cold_free(struct mz__coldtab *tab) {
  struct mz__coldblk *b = tab->blk;
  for (size_t i = 0; b && i < b->cap; i++) {
    struct mz__tcold *c = b->v[i].c;
    if (!b->v[i].op) continue;
    free(c->xpreds);
    free(c->message); /* none once its runs were torn down */
    free(c);
  }
  while (b) {
    struct mz__coldblk *o = b->older;
    free(b);
    b = o;
  }
  *tab = (struct mz__coldtab){0};
}
