/* maize internals: the hazard records of a buffer across runs.
 *
 * A node scheduled while earlier runs are in flight must wait for their
 * conflicting accesses of its buffers: for the last writer scheduled (a
 * read or a write after a write) and for the readers scheduled since (a
 * write after a read).  Each buffer keeps those, for the runs in flight
 * only: a run's end drops its own (mz__hz_drop_run), so a buffer no run
 * uses has none, and a re-run's replay may claim them wholesale.
 *
 * Claims.  A re-run replays a frozen run (graph/lower.c), whose records
 * at its end are the same on every replay.  Setting them on each buffer
 * at the start and dropping them at the end were two passes over buffers
 * the run had not touched yet, a cache miss each.  Instead each buffer
 * names the frozen run's entry for it (h->claim, set by the first replay's
 * pass over the buffers), and the lowering names its replay in flight
 * (lw->claim_run): while that is set, the buffer's records are the
 * entry's, and the buffer's own are empty; a replay's start and end then
 * set and clear claim_run alone.  Anything else that plans an access of a
 * claimed buffer (mz__hz_begin) breaks the claim first: the entry's
 * records become the buffer's own where the replay is in flight, and the
 * lowering's next replay checks every buffer again (lw->claimed false);
 * so does a tile made of it (src/buffer.c) and a failed node of the
 * replay (a buffer may be poisoned).  Readers of the records outside
 * planning use mz__hz_run.
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

#include "maize.h"
#include "objects/mz_buffer.h"

struct mz_op;
struct mz__lowered;
struct mz__lwbuf;
struct mz__run;

/* struct mz__hazards is a buffer's part (objects/mz_buffer.h). */

/* Out of line: the copy mz__hz_begin makes (breaking a claim first), and
 * a planned readers list's growth.  MZ_ENOMEM or MZ_OK. */
int mz__hz_copy(struct mz__hazards *h);
int mz__hz_grow(struct mz__hazards *h);

/* The first access of a buffer in the planning pass stamp copies its
 * records into the planned state: 1.  Later ones: 0.  MZ_ENOMEM when the
 * copy could not be made. */
static inline int mz__hz_begin(struct mz__hazards *h, uint64_t stamp) {
  if (h->stamp == stamp) return 0;
  h->stamp = stamp;
  int rc = mz__hz_copy(h);
  return rc ? rc : 1;
}
/* The planned state after a write by op: op is the writer, no reader. */
static inline void mz__hz_plan_write(struct mz__hazards *h, struct mz_op *op) {
  h->pwriter = op;
  h->npreaders = 0;
}
/* ... after a read by op: one more reader (MZ_ENOMEM: not added). */
static inline int mz__hz_plan_read(struct mz__hazards *h, struct mz_op *op) {
  if (h->npreaders == h->cappreaders && mz__hz_grow(h)) return MZ_ENOMEM;
  h->preaders[h->npreaders++] = op;
  return MZ_OK;
}
/* Planning succeeded: the planned state becomes the records. */
void mz__hz_commit(struct mz__hazards *h);
/* Set the records (a replay: the records its last run left).  A readers
 * list that cannot grow (ENOMEM) keeps what fits: a later writer then does
 * not wait for the readers left out. */
void mz__hz_set(struct mz__hazards *h, struct mz_op *writer, struct mz_op *const *readers, unsigned nreaders);
/* Run r ended: drop its nodes from the records. */
void mz__hz_drop_run(struct mz__hazards *h, const struct mz__run *r);
/* The run in flight that holds the buffer's last writer or, with all,
 * its last reader when it has no writer (claims included); NULL: none. */
struct mz__run *mz__hz_run(const struct mz__hazards *h, bool all);
/* Break the buffer's claim, if any (see above). */
void mz__hz_unclaim(struct mz__hazards *h);
/* A replay's claim pass: the buffer is claimed by lb, unless a run in
 * flight holds records on it (its own or a claim's): false, nothing
 * changed.  A claim of another lowering, not in flight, is taken over. */
bool mz__hz_claim(struct mz__hazards *h, const struct mz__lwbuf *lb);
/* Run r, a replay of lw, ended (failed: some node of it failed): its
 * claims' records end with it.  true: no buffer holds a record of r;
 * false: some were made the buffers' own (a broken claim), for the caller
 * to drop with mz__hz_drop_run on each of r's buffers. */
bool mz__hz_claims_end(struct mz__lowered *lw, const struct mz__run *r, bool failed);
/* Withdraw lw's claims from its buffers (before its frozen arena is
 * freed). */
void mz__lowered_unclaim(struct mz__lowered *lw);
/* Free the arrays (the buffer is being freed). */
void mz__hz_free(struct mz__hazards *h);

#endif
