/* The hazard records of a buffer across runs (src/hazard.h). */
#include <stdlib.h>
#include <string.h>

#include "hazard.h"
#include "maize.h"
#include "objects/mz_op.h"

int mz__hz_grow(struct mz__hazards *h) {
  unsigned cap = h->cappreaders ? h->cappreaders * 2 : 8;
  mz_op **v = realloc(h->preaders, cap * sizeof *v);
  if (!v) return MZ_ENOMEM;
  h->preaders = v;
  h->cappreaders = cap;
  return MZ_OK;
}

int mz__hz_copy(struct mz__hazards *h) {
  h->pwriter = h->writer;
  h->npreaders = 0;
  for (unsigned k = 0; k < h->nreaders; k++)
    if (mz__hz_plan_read(h, h->readers[k])) return MZ_ENOMEM;
  return MZ_OK;
}

void mz__hz_set(struct mz__hazards *h, mz_op *writer, mz_op *const *readers, unsigned nreaders) {
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

void mz__hz_commit(struct mz__hazards *h) { mz__hz_set(h, h->pwriter, h->preaders, h->npreaders); }

void mz__hz_drop_run(struct mz__hazards *h, const struct mz__run *r) {
  if (h->writer && mz__task_of(h->writer)->run == r) h->writer = NULL;
  unsigned k = 0;
  for (unsigned j = 0; j < h->nreaders; j++)
    if (mz__task_of(h->readers[j])->run != r) h->readers[k++] = h->readers[j];
  h->nreaders = k;
}

void mz__hz_free(struct mz__hazards *h) {
  free(h->readers);
  free(h->preaders);
  h->readers = h->preaders = NULL;
}
