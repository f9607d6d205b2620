/* maize internals: observers of runs (src/observe.c). */
#ifndef MZ_OBSERVE_H
#define MZ_OBSERVE_H

#include "maize.h"

struct mz__run;
struct mz_op;

/* Observers (src/observe.c).  init copies the runtime's observers into a
 * new run (rt->lock held).  node reports a finished node that reached a
 * queue, with its transfers (from finish(), any thread, no lock held);
 * run_end reports the run's end (from mz__run_complete, before the future
 * resolves, no lock held). */
void mz__observe_init(mz_runtime *rt, struct mz__run *r);
void mz__observe_node(struct mz__run *r, struct mz_op *op, int status);
void mz__observe_run_end(struct mz__run *r);

#endif
