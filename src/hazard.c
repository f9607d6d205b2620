/* The hazard records of a buffer across runs (src/hazard.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hazard.h"
#include "maize.h"
#include "objects/mz_graph.h"
#include "objects/mz_op.h"

/* Both arrays start in the buffer (rin, pin) and move to a block of their
 * own past MZ__HZ_INLINE entries. */
int mz__hz_grow(struct mz__hazards *h) {
  if (!h->cappreaders) {
    h->preaders = h->pin;
    h->cappreaders = MZ__HZ_INLINE;
    return MZ_OK;
  }
  unsigned cap = h->cappreaders < 8 ? 8 : h->cappreaders * 2;
  bool own = h->preaders != h->pin;
  mz_op **v = own ? realloc(h->preaders, cap * sizeof *v) : malloc(cap * sizeof *v);
  if (!v) return MZ_ENOMEM;
  if (!own) memcpy(v, h->pin, h->npreaders * sizeof *v);
  h->preaders = v;
  h->cappreaders = cap;
  return MZ_OK;
}

int mz__hz_copy(struct mz__hazards *h) {
  if (h->claim) mz__hz_unclaim(h);
  h->pwriter = h->writer;
  h->npreaders = 0;
  for (unsigned k = 0; k < h->nreaders; k++)
    if (mz__hz_plan_read(h, h->readers[k])) return MZ_ENOMEM;
  return MZ_OK;
}

void mz__hz_set(struct mz__hazards *h, mz_op *writer, mz_op *const *readers, unsigned nreaders) {
  h->writer = writer;
  if (h->capreaders < nreaders) {
    if (nreaders <= MZ__HZ_INLINE) {
      /* (capreaders < MZ__HZ_INLINE: still none.) */
      h->readers = h->rin;
      h->capreaders = MZ__HZ_INLINE;
    } else {
      /* The old entries are not kept: all are set below. */
      bool own = h->readers && h->readers != h->rin;
      mz_op **v = own ? realloc(h->readers, nreaders * sizeof *v) : malloc(nreaders * sizeof *v);
      if (v) {
        h->readers = v;
        h->capreaders = nreaders;
      }
    }
  }
  unsigned n = nreaders <= h->capreaders ? nreaders : h->capreaders;
  if (n) memcpy(h->readers, readers, n * sizeof *h->readers);
  h->nreaders = n;
}

void mz__hz_commit(struct mz__hazards *h) { mz__hz_set(h, h->pwriter, h->preaders, h->npreaders); }

void mz__hz_drop_run(struct mz__hazards *h, const struct mz__run *r) {
  if (h->writer && mz__task_of(h->writer)->run == r) h->writer = NULL;
  unsigned k = 0;
  for (unsigned j = 0; j < h->nreaders; j++)
    if (mz__task_of(h->readers[j])->run != r) h->readers[k++] = h->readers[j];
  h->nreaders = k;
}

void mz__hz_free(struct mz__hazards *h) {
  if (h->readers != h->rin) free(h->readers);
  if (h->preaders != h->pin) free(h->preaders);
  h->readers = h->preaders = NULL;
  h->capreaders = h->cappreaders = 0;
}

void mz__hz_unclaim(struct mz__hazards *h) {
  const struct mz__lwbuf *c = h->claim;
  if (!c) return;
  h->claim = NULL;
  c->lw->claimed = false;
  if (c->lw->claim_run) mz__hz_set(h, c->writer, c->readers, c->nreaders);
}

bool mz__hz_claim(struct mz__hazards *h, const struct mz__lwbuf *lb) {
  if (h->writer || h->nreaders) return false;
  const struct mz__lwbuf *c = h->claim;
  if (c == lb) return true;
  if (c) {
    if (c->lw->claim_run) return false;
    c->lw->claimed = false;
  }
  h->claim = lb;
  return true;
}

struct mz__run *mz__hz_run(const struct mz__hazards *h, bool all) {
  const struct mz__lwbuf *c = h->claim;
  if (c && c->lw->claim_run) return c->writer || (all && c->nreaders) ? c->lw->claim_run : NULL;
  if (h->writer) return mz__task_of(h->writer)->run;
  if (all && h->nreaders) return mz__task_of(h->readers[h->nreaders - 1])->run;
  return NULL;
}

bool mz__hz_claims_end(struct mz__lowered *lw, const struct mz__run *r, bool failed) {
  bool own = lw->claim_run == r;
  if (own) lw->claim_run = NULL;
  /* A failed node poisons what it writes: the next replay checks. */
  if (failed) lw->claimed = false;
  return own && lw->claimed;
}

void mz__lowered_unclaim(struct mz__lowered *lw) {
  for (size_t i = 0; i < lw->nbufs; i++)
    if (lw->bufs[i].b->hz.claim == &lw->bufs[i]) mz__hz_unclaim(&lw->bufs[i].b->hz);
  lw->claimed = false;
}
