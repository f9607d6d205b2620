/* maize internals: the hazard records of a buffer across runs.
 *
 * A node scheduled while earlier runs are in flight must wait for their
 * conflicting accesses of its buffers: for the last writer scheduled (a
 * read or a write after a write) and for the readers scheduled since (a
 * write after a read).  Each buffer keeps those, for the runs in flight
 * only: a run's end drops its own (mz__hz_drop_run), so a buffer no run
 * uses has none, and a re-run's replay may set them wholesale.
 *
 * Planning a run (graph/lower.c) works on a copy of them, the planned
 * state: mz__hz_begin copies the records on the buffer's first access in
 * the run; the run's accesses then update the copy in build order; it
 * becomes the records only when planning succeeds (mz__hz_commit), so a
 * run that fails to plan leaves them as they were.
 *
 * Locks: all of it is guarded by the runtime's lock (rt->lock).
 * Ownership: the arrays belong to the buffer, freed by mz__hz_free. */
#ifndef MZ_HAZARD_H
#define MZ_HAZARD_H

#include <stdbool.h>
#include <stdint.h>

struct mz_op;
struct mz_buffer;
struct mz__run;

struct mz__hazards {
  struct mz_op *writer;           /* the last writer scheduled, in a run in flight */
  struct mz_op **readers;         /* the readers scheduled since */
  unsigned nreaders, capreaders;
  uint64_t stamp;                 /* visited in the pass with this stamp (planning, a run's end) */
  /* The planned state (see the top). */
  struct mz_op *pwriter;
  struct mz_op **preaders;
  unsigned npreaders, cappreaders;
};

/* The first access of b in the planning pass stamp copies its records into
 * the planned state: 1.  Later ones: 0.  MZ_ENOMEM when the copy could not
 * be made. */
int mz__hz_begin(struct mz_buffer *b, uint64_t stamp);
/* The planned state after a write of b by op: op is the writer, no reader. */
void mz__hz_plan_write(struct mz_buffer *b, struct mz_op *op);
/* ... after a read of b by op: one more reader (MZ_ENOMEM: not added). */
int mz__hz_plan_read(struct mz_buffer *b, struct mz_op *op);
/* Planning succeeded: the planned state becomes b's records. */
void mz__hz_commit(struct mz_buffer *b);
/* Set b's records (a replay: the records its last run left).  A readers
 * list that cannot grow (ENOMEM) keeps what fits: a later writer then does
 * not wait for the readers left out. */
void mz__hz_set(struct mz_buffer *b, struct mz_op *writer, struct mz_op *const *readers, unsigned nreaders);
/* Run r ended: drop its nodes from b's records. */
void mz__hz_drop_run(struct mz_buffer *b, const struct mz__run *r);
/* Whether a run in flight accesses b (a writer, or readers). */
bool mz__hz_busy(const struct mz_buffer *b);
/* Free b's arrays (b is being freed). */
void mz__hz_free(struct mz_buffer *b);

#endif
