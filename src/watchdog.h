/* maize internals: the watchdog (src/watchdog.c). */
#ifndef MZ_WATCHDOG_H
#define MZ_WATCHDOG_H

#include "maize.h"

/* The watchdog (src/watchdog.c).  config reads watchdog_s or
 * $MZ_WATCHDOG_S into *seconds (0: off) and fails with MZ_EINVAL and a
 * message on a bad value; start does nothing for 0 and runs before the
 * queues are opened (backends may read rt->watchdog from their threads to
 * decide whether to keep mz__queue.current); stop is NULL-safe and runs
 * first in the runtime's teardown.  Thread: mz_runtime_create's and
 * mz_runtime_destroy's. */
int mz__watchdog_config(mz_runtime *rt, double *seconds);
int mz__watchdog_start(mz_runtime *rt, double seconds);
void mz__watchdog_stop(mz_runtime *rt);

#endif
