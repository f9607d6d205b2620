/* maize internals: a work-stealing deque of tasks (Chase and Lev, with the
 * C11 orderings of Lê, Pop, Cohen and Zappa Nardelli, PPoPP 2013).
 *
 * Threads: one owner pushes and takes at the bottom; any thread steals at
 * the top.  Nothing blocks.  The owner's push grows the array when it is
 * full; arrays it replaced stay allocated until mz__deque_fini, because a
 * thief may still read one (they are few: sizes double).
 *
 * Orderings: the paper's two seq_cst fences are a seq_cst exchange (take)
 * and seq_cst loads (steal), which give the same order and which TSan
 * checks.  Publication: the owner stores bottom with release (every store, the
 * take's too, which are plain stores on x86) and thieves load it with
 * acquire, so a thief that takes a task sees everything the owner wrote
 * before pushing it, whichever of the owner's stores it read (TSan follows
 * these edges; it does not follow the fences alone). */
#ifndef MZ_DEQUE_H
#define MZ_DEQUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct mz_op;

struct mz__deque_array {
  size_t mask;                          /* capacity - 1, capacity a power of two */
  struct mz__deque_array *older;        /* the array this one replaced */
  _Atomic(struct mz_op *) slot[];
};

struct mz__deque {
  /* top is the thieves' line, bottom and the array pointer the owner's. */
  _Alignas(64) _Atomic int64_t top;
  _Alignas(64) _Atomic int64_t bottom;
  _Atomic(struct mz__deque_array *) array;
};

/* capacity: a power of two.  Returns false on ENOMEM. */
bool mz__deque_init(struct mz__deque *d, size_t capacity);
void mz__deque_fini(struct mz__deque *d);
/* Grow the owner's array (called by push when full); false on ENOMEM. */
bool mz__deque_grow(struct mz__deque *d);

/* Owner only.  Returns false on ENOMEM (the task was not pushed). */
static inline bool mz__deque_push(struct mz__deque *d, struct mz_op *op) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
  if ((size_t)(b - t) > a->mask) {
    if (!mz__deque_grow(d)) return false;
    a = atomic_load_explicit(&d->array, memory_order_relaxed);
  }
  atomic_store_explicit(&a->slot[(size_t)b & a->mask], op, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
  return true;
}

/* Owner only: push v[n - 1], ..., v[0] (so that takes give back v[0]
 * first and thieves take v[n - 1] first), as n pushes would, with one
 * publication: thieves see all of them or none, and the owner reads the
 * ends and the array once, not per task.  Returns false on ENOMEM
 * (nothing was pushed). */
static inline bool mz__deque_push_rev(struct mz__deque *d, struct mz_op *const *v, size_t n) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
  while ((size_t)(b - t) + n > a->mask + 1) {
    if (!mz__deque_grow(d)) return false;
    a = atomic_load_explicit(&d->array, memory_order_relaxed);
  }
  for (size_t i = 0; i < n; i++)
    atomic_store_explicit(&a->slot[(size_t)(b + (int64_t)i) & a->mask], v[n - 1 - i], memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b + (int64_t)n, memory_order_release);
  return true;
}

/* Owner only: the newest task, or NULL. */
static inline struct mz_op *mz__deque_take(struct mz__deque *d) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
  /* The paper's store and seq_cst fence, as one seq_cst exchange (what
   * the fence costs on x86 anyway; TSan does not model fences). */
  atomic_exchange_explicit(&d->bottom, b, memory_order_seq_cst);
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  if (t > b) {
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    return NULL;
  }
  struct mz_op *op = atomic_load_explicit(&a->slot[(size_t)b & a->mask], memory_order_relaxed);
  if (t == b) { /* the last one: race the thieves for it */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
      op = NULL;
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
  }
  return op;
}

/* Owner only: up to k of the newest tasks, the newest last in out[]
 * (out[n - 1]: a caller that keeps them as a stack pops them in the
 * order single takes would give); returns how many (0: the deque is
 * empty).  One seq_cst exchange for all of them where mz__deque_take
 * makes one per task.  It takes at most half
 * of what the deque holds, leaving thieves the rest, and falls back to
 * mz__deque_take when the deque holds fewer than 4 or thieves reached
 * the range meanwhile.  Safe as take is: a thief that read bottom before
 * the exchange read top before it too (its loads are seq_cst, top first),
 * so it can win only the task at the top the owner reads after the
 * exchange, which lies below the range (tested); later thieves see the
 * new bottom. */
static inline unsigned mz__deque_take_some(struct mz__deque *d, struct mz_op **out, unsigned k) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  /* top only grows: a deque that looked empty here is. */
  int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
  if (b <= t) return 0;
  int64_t n = (b - t) / 2;
  if (n > (int64_t)k) n = k;
  if (n >= 2) {
    struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    int64_t nb = b - n;
    atomic_exchange_explicit(&d->bottom, nb, memory_order_seq_cst);
    t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    if (t < nb) {
      for (int64_t i = 0; i < n; i++)
        out[i] = atomic_load_explicit(&a->slot[(size_t)(nb + i) & a->mask], memory_order_relaxed);
      return (unsigned)n;
    }
    atomic_store_explicit(&d->bottom, b, memory_order_release); /* nothing taken: as before */
  }
  return (out[0] = mz__deque_take(d)) != NULL;
}

/* Any thread: the oldest task, or NULL when the deque looked empty or
 * another thief won the race (the caller may try again). */
static inline struct mz_op *mz__deque_steal(struct mz__deque *d) {
  /* seq_cst loads in place of the paper's fence between them (plain loads
   * on x86). */
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
  if (t >= b) return NULL;
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_acquire);
  struct mz_op *op = atomic_load_explicit(&a->slot[(size_t)t & a->mask], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
    return NULL;
  return op;
}

/* Any thread: whether the deque looks non-empty (a hint). */
static inline bool mz__deque_busy(struct mz__deque *d) {
  return atomic_load_explicit(&d->bottom, memory_order_acquire) > atomic_load_explicit(&d->top, memory_order_acquire);
}

#endif
