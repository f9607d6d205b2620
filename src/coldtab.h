/* maize internals: a table of rare records keyed by address (a graph's
 * tasks' cold records: struct mz__tcold, src/objects/mz_op.h).
 *
 * Few tasks have a cold record, so a task holds no pointer to one: a flag
 * byte of its own says that it has one (set here, once the record is in
 * the table), and the record is found here by the task's address.
 *
 * Locks: makers hold the table's spinlock; readers take none.  A slot's
 * key is stored (release) after its record, and the caller's flag after
 * the slot, and a block that a larger one replaced is kept until the
 * table's end: so a reader that saw the flag set (acquire) finds the
 * record in whichever block it loads.  Records are never removed before
 * the table's end. */
#ifndef MZ_COLDTAB_H
#define MZ_COLDTAB_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct mz__coldblk {
  struct mz__coldblk *older;  /* the block this one replaced, kept */
  size_t cap;                 /* a power of two */
  struct mz__coldslot {
    const void *key;          /* NULL: free; __atomic builtins */
    void *rec;
  } v[];
};

struct mz__coldtab {
  struct mz__coldblk *blk;    /* NULL until the first record; __atomic builtins */
  size_t n;                   /* records (lock held) */
  mz__spin lock;
};

/* key's record; the caller's flag for key must have been seen set
 * (acquire).  Thread: any. */
void *mz__coldtab_find(const struct mz__coldtab *tab, const void *key);
/* key's record, made (bytes, zeroed) where the flag *has says it has none,
 * which is then set (release); NULL on ENOMEM.  Thread: any; two makers
 * of one key get the same record. */
void *mz__coldtab_make(struct mz__coldtab *tab, const void *key, size_t bytes, uint8_t *has);
/* drop(record) for every record, then the table's blocks freed: its end,
 * with no other thread using it.  The table is empty again. */
void mz__coldtab_fini(struct mz__coldtab *tab, void (*drop)(void *rec));

#endif
