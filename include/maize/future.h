/* maize: scheduling a graph and waiting for it.
 *
 * mz_schedule() turns the part of a graph that an op needs into a run and
 * returns a future.  Every future resolves: with MZ_OK, with the first
 * error of the run, or with MZ_ECANCELED for nodes downstream of a failure.
 * A run finishes only when all of its nodes have finished, so after a
 * future resolves, no work of that run touches any buffer. */
#ifndef MAIZE_FUTURE_H
#define MAIZE_FUTURE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

/* Schedule what root needs with the named policy (NULL: the runtime's
 * default).  Nodes already run or running in an earlier run of the same
 * graph are not run again.  On success *out is the future, freed by
 * mz_future_destroy().  On failure *out is NULL, nothing runs, and
 * mz_runtime_last_error() has the message.  Errors: the graph's sticky
 * error, MZ_EINVAL (NULL, destroyed or foreign arguments: a graph that is
 * not live has no runtime to hold a message, so mz_graph_message() on it
 * says why), MZ_ENOENT (unknown policy), MZ_ECYCLE, MZ_ENOMEM, MZ_ESTATE (a
 * node in the part root needs reads a buffer that a node built after it
 * has already written in an earlier run: it would see a newer value than
 * the one at its build point; the message names both nodes).  Scheduling
 * from a task is allowed.
 *
 * Errors found while the run goes on come back through the future, never
 * a hang: MZ_ENODEV (a kernel no enabled device can run, found when the
 * node is placed), MZ_EPOLICY (the policy chose a queue that does not
 * exist or cannot run the node, deferred a ready node, or left a node
 * unplaced with no select: never re-planned elsewhere), MZ_EBUILD (with
 * the build log), MZ_EKERNEL, MZ_ENOMEM (device memory); dependents of
 * the failed node get MZ_ECANCELED, other branches finish. */
int mz_schedule(mz_graph *g, mz_op *root, const char *policy, mz_future **out) MZ_WUR;

/* Run what root needs again, all of it, on the buffers' current contents:
 * a graph built once and run many times (as a CUDA graph is launched, or
 * Taskflow's run).  Unlike mz_schedule(), tasks that ran before run again.
 * The part root needs is taken as it is now (nodes built since the last
 * run are included), with the hazard edges inside it in build order, and
 * ordered after the runs of other graphs in flight that use its buffers,
 * as mz_schedule() orders them.  policy may differ from run to run (NULL:
 * the runtime's default), so policies can be compared on exactly the same
 * work.  A run whose predecessor run failed starts afresh: nodes fail only
 * for what happens in this run (and a buffer whose writer failed stays
 * unreadable until a writer succeeds or mz_buffer_write() replaces it).
 *
 * While an earlier run of this graph (from either call) is in flight, the
 * call waits for it first, so runs of one graph never overlap; from a
 * runtime thread that wait would deadlock, and the call fails with
 * MZ_EDEADLK instead.  Errors and *out as for mz_schedule().
 *
 * Cost: the first run of a root lowers it (closure, hazard edges, cycle
 * check); the next run of the same root reuses the closure, and replays
 * the last run's edges outright when that run had none to another run and
 * no run of another graph holds its buffers now (no poisoned or newly
 * partitioned buffer either): then only counters are reset.  A replay
 * under single, round-robin, heft, dmda or dmdas also keeps the last run's
 * plan when that run was planned by the same policy on every device and
 * no device died or came back since, nor, under heft, dmda and dmdas,
 * has a perf-model estimate moved (an estimate appeared, or a mean moved
 * by more than an eighth): the plan is not made again
 * (mz_run_stats.plan_kept; its time is plan_ns otherwise).  A kept plan
 * does not see work that other graphs' runs have queued meanwhile.  A
 * user policy's plan is called for every run. */
int mz_graph_run(mz_graph *g, mz_op *root, const char *policy, mz_future **out) MZ_WUR;

/* Options of one run of a built graph. */
typedef struct mz_run_options {
  const char *policy;        /* NULL: the runtime's default */
  /* The devices that may run kernels in this run, as indices of
   * mz_runtime_device(); NULL: every device.  Host work (mz_host,
   * partitions) runs on the CPU regardless.  A node that none of them can
   * run fails with MZ_ENODEV. */
  const unsigned *devices;
  unsigned ndevices;
} mz_run_options;

/* mz_graph_run() with options: re-place the same work on another policy
 * or another set of devices, so that they are compared on exactly the same
 * nodes.  opts NULL is all defaults.  Errors as mz_graph_run(), and
 * MZ_EINVAL for a device index past mz_runtime_device_count() or an empty
 * list. */
int mz_graph_run_with(mz_graph *g, mz_op *root, const mz_run_options *opts, mz_future **out) MZ_WUR;

/* Block until the run finishes; return its status.  MZ_EDEADLK when called
 * from a runtime thread (a task, a host node, a completion callback).
 * A run of at most 4 nodes that all run on discrete devices (no unified
 * memory: a GPU) is waited on by spinning up to MZ_WAIT_SPIN_US (50 us)
 * before sleeping, as the device's own synchronize does; no other wait
 * spins.
 * With MZ_WAIT_HELP=1 (off by default) the calling thread meanwhile runs
 * CPU nodes of any run in place of a CPU worker that sleeps, as an OpenMP
 * master thread does: a node it takes costs no wake-up (a one-node graph
 * ends several times sooner), and no more threads run nodes than there
 * are CPU queues; a node run there is on a runtime thread for its
 * duration (the blocking calls above return MZ_EDEADLK in it), and the
 * thread is bound to that worker's core meanwhile (its own binding is
 * restored before the wait returns).  Off by default: Task Bench METG on
 * 2 cores is no better with it.  mz_future_wait_for with a deadline never
 * helps (a node could outlast it); mz_buffer_read and mz_buffer_write,
 * waiting for the runs that use a buffer, help the same way. */
int mz_future_wait(mz_future *f);

/* As mz_future_wait(), giving up after timeout_ns: MZ_ETIMEDOUT then, and
 * the run goes on.  0 polls; UINT64_MAX (any value from 2^62) waits
 * without a deadline. */
int mz_future_wait_for(mz_future *f, uint64_t timeout_ns);

/* The status without blocking: MZ_EAGAIN while the run is in flight. */
int mz_future_poll(const mz_future *f);

/* The run's status (as mz_future_poll) and a message for a failure
 * ("node 12 (saxpy) on cpu queue 0: kernel failed at run time").  The
 * message is "" while pending or on success; owned by the future. */
int mz_future_status(const mz_future *f);
const char *mz_future_message(const mz_future *f);

/* Call fn(f, status, user) once when the run finishes, from a runtime
 * thread, or at once on this thread if it has finished.  Either way it must
 * not block on maize calls: mz_future_wait on an unfinished run,
 * mz_buffer_read, mz_buffer_write and mz_runtime_wait_idle return
 * MZ_EDEADLK there and mz_runtime_destroy is refused.  One callback per
 * future: MZ_ESTATE for a second. */
typedef void (*mz_future_fn)(mz_future *f, int status, void *user);
int mz_future_then(mz_future *f, mz_future_fn fn, void *user);

/* A file descriptor (an eventfd) that becomes readable when the run
 * finishes, for epoll, poll or libuv loops.  Owned by the future: do not
 * close or read it.  Returns the fd, or a negative error. */
int mz_future_fd(mz_future *f);

/* The root op's buffers, flattened in tuple order, once the run has
 * finished (scalars appear as NULL).  Borrowed: valid until the future is
 * destroyed; retain one to keep it longer. */
unsigned mz_future_result_count(const mz_future *f);
mz_buffer *mz_future_result(const mz_future *f, unsigned i);

/* Statistics of a finished run. */
typedef struct mz_run_stats {
  uint64_t ops;           /* nodes that ran on a queue */
  uint64_t batches;       /* queue runs submitted (consecutive ops of a queue) */
  uint64_t callbacks;     /* completion callbacks taken from device queues */
  uint64_t transfers;     /* copies between memories */
  uint64_t bytes_moved;   /* bytes those copies moved */
  uint64_t failed;        /* nodes that failed or were canceled */
  uint64_t elapsed_ns;    /* from mz_schedule() to the end of the run */
  unsigned ndevices;
  const uint64_t *busy_ns;  /* per device: time its queues ran this run's ops (virtual
                               time on simulated devices) */
  uint64_t virtual_ns;      /* simulated devices: the makespan on the virtual clock, from
                               mz_schedule() to the end of the last simulated node; 0 when
                               the run used no simulated device */
  uint64_t plan_ns;         /* time the policy's plan took (0: no plan, or kept) */
  bool plan_kept;           /* a re-run that kept its last run's plan (mz_graph_run) */
} mz_run_stats;
int mz_future_stats(const mz_future *f, mz_run_stats *out);

/* Free the future.  A run still in flight goes on and frees itself when it
 * finishes (its callback, if any, still runs).  NULL is a no-op.  While
 * that run is in flight the handle's memory lives on, so calls on the
 * destroyed handle are refused (MZ_EINVAL, "not a live future" from
 * mz_future_message) and a second destroy is a no-op; after the run ends
 * the handle dangles and cannot be checked (README.md, "Handles that
 * cannot be checked"). */
void mz_future_destroy(mz_future *f);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
