/* The least makespan of a small run on the simulated platform, found by
 * exhaustive search (branch and bound), for mz-bench-sched --exact.
 * bench/sched_exact.c states the two machine models and why the search
 * is exact. */
#ifndef MZ_BENCH_SCHED_EXACT_H
#define MZ_BENCH_SCHED_EXACT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "maize/policy.h"

struct sched_exact {
  double opt_ns;     /* the least makespan found (ns) */
  bool proven;       /* the search ended within its budget: opt_ns is the optimum */
  uint64_t visits;   /* partial schedules the search looked at */
  unsigned queues;   /* queues that can run the run's nodes */
};

/* The optimum of the n tasks of one run, from the runtime's own costs
 * (mz_task_expected_ns, mz_sched_link_ns, mz_task_edge_bytes) on the
 * queues that can run them.  Flags: SCHED_EXACT_LANE for the simulator's
 * copy engine (the copies into a device are made one at a time, in the
 * order of the nodes on its queue, each once per device), else the delay
 * model (each input arrives its link time after its producer ends,
 * copies never wait for each other); SCHED_EXACT_PLAIN searches every
 * sequence, without the canonical order, the symmetry and the bounds
 * (slow: to check that they lose nothing).  Stops after budget visits
 * (proven false then).  queue and start, when not NULL, get the best
 * schedule found: each task's queue (the runtime's number) and start (ns
 * from the run's start).  Tasks' policy data are used and cleared.
 * Returns 0, MZ_ENOMEM, or MZ_EINVAL for more than 24 tasks or 8 queues,
 * a device with more than one queue that can run them, a task no queue
 * runs, or a cycle. */
enum { SCHED_EXACT_LANE = 1, SCHED_EXACT_PLAIN = 2 };
int sched_exact_solve(const mz_sched *s, mz_task *const tasks[], size_t n, unsigned flags, uint64_t budget,
                      struct sched_exact *out, unsigned *queue, double *start);

/* The costs of one run (any size), kept after its plan call, for
 * sched_model_improve: tasks are numbered as in the plan's tasks[]. */
struct sched_model;
struct sched_model *sched_model_build(const mz_sched *s, mz_task *const tasks[], size_t n);
void sched_model_free(struct sched_model *m);

/* Local search in the copy-engine model (that of sched_exact_solve with
 * SCHED_EXACT_LANE), from a schedule: queue[i] (the runtime's queue
 * numbers) and key[i] (each queue runs its nodes in increasing key; keys
 * must increase along the edges, as start times do).  Moves one node at a
 * time to another queue (keeping its key) while the model's makespan
 * drops, for at most sweeps passes over the nodes.  *before gets the
 * model's makespan of the given schedule, *after the result's; queue[]
 * the result.  Returns 0, MZ_ENOMEM, or MZ_EINVAL (a queue the model does
 * not know, more than 64 queues that run nodes). */
int sched_model_improve(const struct sched_model *m, unsigned *queue, const double *key, unsigned sweeps,
                        double *before, double *after);

#endif
