/* The hazard records of a buffer across runs (src/hazard.h). */
#include <stdlib.h>
#include <string.h>

#include "hazard.h"
#include "maize.h"
#include "objects/mz_buffer.h"
#include "objects/mz_op.h"

static int push_planned(mz_buffer *b, mz_op *op) {
  struct mz__hazards *h = &b->hz;
  if (h->npreaders == h->cappreaders) {
    unsigned cap = h->cappreaders ? h->cappreaders * 2 : 8;
    mz_op **v = realloc(h->preaders, cap * sizeof *v);
    if (!v) return MZ_ENOMEM;
    h->preaders = v;
    h->cappreaders = cap;
  }
  h->preaders[h->npreaders++] = op;
  return MZ_OK;
}

int mz__hz_begin(mz_buffer *b, uint64_t stamp) {
  struct mz__hazards *h = &b->hz;
  if (h->stamp == stamp) return 0;
  h->stamp = stamp;
  h->pwriter = h->writer;
  h->npreaders = 0;
  for (unsigned k = 0; k < h->nreaders; k++)
    if (push_planned(b, h->readers[k])) return MZ_ENOMEM;
  return 1;
}

void mz__hz_plan_write(mz_buffer *b, mz_op *op) {
  b->hz.pwriter = op;
  b->hz.npreaders = 0;
}

int mz__hz_plan_read(mz_buffer *b, mz_op *op) { return push_planned(b, op); }

void mz__hz_set(mz_buffer *b, mz_op *writer, mz_op *const *readers, unsigned nreaders) {
  struct mz__hazards *h = &b->hz;
  h->writer = writer;
  if (h->capreaders < nreaders) {
    mz_op **v = realloc(h->readers, nreaders * sizeof *v);
    if (v) {
      h->readers = v;
      h->capreaders = nreaders;
    }
  }
  unsigned n = nreaders <= h->capreaders ? nreaders : h->capreaders;
  if (n) memcpy(h->readers, readers, n * sizeof *h->readers);
  h->nreaders = n;
}

void mz__hz_commit(mz_buffer *b) { mz__hz_set(b, b->hz.pwriter, b->hz.preaders, b->hz.npreaders); }

void mz__hz_drop_run(mz_buffer *b, const struct mz__run *r) {
  struct mz__hazards *h = &b->hz;
  if (h->writer && mz__task_of(h->writer)->run == r) h->writer = NULL;
  unsigned k = 0;
  for (unsigned j = 0; j < h->nreaders; j++)
    if (mz__task_of(h->readers[j])->run != r) h->readers[k++] = h->readers[j];
  h->nreaders = k;
}

bool mz__hz_busy(const mz_buffer *b) { return b->hz.writer || b->hz.nreaders; }

void mz__hz_free(mz_buffer *b) {
  free(b->hz.readers);
  free(b->hz.preaders);
  b->hz.readers = b->hz.preaders = NULL;
}
