/* maize internals: the trace file (src/trace.c). */
#ifndef MZ_TRACE_H
#define MZ_TRACE_H

#include "maize.h"

/* Trace (src/trace.c).  open runs at mz_runtime_create once the devices
 * are known and sets rt->trace and rt->tracing; its observer (trace_observer)
 * then writes each run to the file when the run ends; close writes what is
 * left (a file with no run at all) and frees it.  Thread: create's and
 * destroy's. */
int mz__trace_open(mz_runtime *rt, const char *path);
mz_observer mz__trace_observer(mz_runtime *rt);
void mz__trace_close(mz_runtime *rt);

#endif
