/* The systems that run Task Bench graphs: maize (tb_maize.c; maize-rerun
 * builds the graph once and runs it again with mz_graph_run), OpenMP
 * tasks (peer_openmp.c), StarPU (peer_starpu.c) and oneTBB's flow graph
 * (peer_tbb.cpp).  Each is one
 * const table; taskbench.c and metg.c drive them all the same way.
 *
 * A state is made for one tb_app (which must outlive it); between runs the
 * caller may change the graphs' kernel iterations, nothing else.  Each
 * system runs Task Bench's kernels through tb_execute_point(), so every
 * task checks its inputs; a failed check fails the run. */
#ifndef MZB_TB_SYSTEMS_H
#define MZB_TB_SYSTEMS_H

#include <stddef.h>

#include "patterns.h"

typedef struct tb_sys_opts {
  long workers;        /* CPU workers (threads); 0: the system's default */
  const char *devices; /* maize: MZ_DEVICES spelling; NULL: "cpu:<workers>" when workers > 0, else $MZ_DEVICES */
  const char *policy;  /* maize: policy name; NULL: the runtime's default ($MZ_POLICY, else eager) */
  /* Tests only: when > 0, the inject_wrong_dep-th task built (1-based)
   * that has inputs gets its first input from a wrong point, so its input
   * check must fail (maize only). */
  long inject_wrong_dep;
  /* maize: print, after each run, the time per task spent building the
   * graph, inside mz_schedule() and waiting, to stderr. */
  int breakdown;
  /* maize: schedule the graph in runs of this many tasks while it is
   * built, so the workers start on the first tasks while the rest is
   * built (0: the default, 64; -1: build everything, then one run). */
  long chunk;
} tb_sys_opts;

typedef struct tb_system {
  const char *name;
  int available; /* 0: not built in (no OpenMP, no StarPU); create() then fails saying so */
  /* Set up (runtime, kernels, buffers: untimed).  Returns 0 and *state,
   * or with a message in err and nothing left behind: -2 when the options
   * are wrong (an unknown device or policy: a usage error), else -1. */
  int (*create)(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz);
  /* One run of every graph of the app, timed from the start of task
   * creation to the end of the last task (Task Bench's timing).  Returns
   * 0 and *seconds, or -1 with a message in err (a task's input check
   * failed, or the system reported an error).  The state stays usable. */
  int (*run)(void *state, double *seconds, char *err, size_t errsz);
  /* Free everything; NULL is a no-op. */
  void (*destroy)(void *state);
} tb_system;

extern const tb_system tb_system_maize;
extern const tb_system tb_system_maize_rerun;
extern const tb_system tb_system_openmp;
extern const tb_system tb_system_starpu;
extern const tb_system tb_system_tbb;
#if defined(MZB_HAVE_MPI) && MZB_HAVE_MPI
/* Across MPI ranks (tb_mpi.c): maize's distributed graphs, built each run
 * or once, and a plain MPI peer. */
extern const tb_system tb_system_maize_mpi;
extern const tb_system tb_system_maize_mpi_rerun;
extern const tb_system tb_system_maize_mpi_pair;
extern const tb_system tb_system_mpi;
#endif

/* Pack and unpack a task id: graph (8 bits), timestep (28), point (28). */
static inline unsigned long long tb_task_id(long graph, long t, long p) {
  return ((unsigned long long)graph << 56) | ((unsigned long long)t << 28) | (unsigned long long)p;
}
static inline void tb_task_unpack(unsigned long long id, long *graph, long *t, long *p) {
  *graph = (long)(id >> 56);
  *t = (long)((id >> 28) & ((1ull << 28) - 1));
  *p = (long)(id & ((1ull << 28) - 1));
}

#endif
