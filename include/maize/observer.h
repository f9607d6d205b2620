/* maize: watching runs as they finish, for a profiler of one's own.
 *
 * An observer is a set of callbacks and a user pointer registered on a
 * runtime (Taskflow's observer interface has the same role).  For every
 * node of a run that reached a queue it gets one record with the node's
 * measured start and end; for every copy between memories made for that
 * node, one record with the copy's start and end where the device measures
 * them; and once per run, a record at the run's end.  maize's own trace
 * (mz_runtime_config.trace, MZ_TRACE) is written from the same records.
 *
 * Records come after the fact: a device's timestamps are known only when
 * its work has finished, so "start" and "end" travel together in one
 * record, delivered when the node finishes.
 *
 * Clocks.  Times are nanoseconds of CLOCK_MONOTONIC (clock_gettime), so
 * they can be compared with the caller's own timestamps.  CPU nodes are
 * timed by the worker around the call.  OpenCL nodes and copies are timed
 * by the device's profiling events, mapped onto CLOCK_MONOTONIC when the
 * batch completes (within that callback's latency, some microseconds).
 * CUDA nodes are timed at the host, per batch of nodes submitted together:
 * from the later of the batch's submission and the end of the stream's
 * previous batch, to its completion callback, shared equally by the
 * batch's nodes (cuEventElapsedTime is a driver call, which the callback
 * may not make).  CUDA copies are not measured (measured false: the trace
 * draws them with the link model's length).  Simulated devices report their virtual clock
 * (virtual_clock is true); their copies are not measured either. */
#ifndef MAIZE_OBSERVER_H
#define MAIZE_OBSERVER_H

#include "future.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

/* One node that reached a queue, after it finished (or failed there). */
typedef struct mz_node_record {
  uint64_t run;           /* the run: 1, 2, ... per runtime, in scheduling order */
  uint32_t node;          /* the node's id in its graph, as in messages and traces */
  const char *name;       /* the kernel's name, "host", "partition", ... */
  int device;             /* device index (mz_runtime_device) */
  int queue;              /* runtime-wide queue number (mz_runtime_queue_count) */
  int status;             /* MZ_OK, or the node's error (MZ_ECANCELED: it never ran) */
  uint64_t start_ns;      /* when it started and ended on its queue; both 0 */
  uint64_t end_ns;        /*   when the device reported no time (it never ran) */
  bool virtual_clock;     /* times are a simulated device's virtual clock */
  unsigned npreds;        /* the nodes of the same run it waited for */
  const uint32_t *preds;
  unsigned transfers;     /* the copies reported for it (mz_transfer_record) */
  uint64_t bytes;         /* and the bytes they moved */
  /* When the policy expected it to start and end (mz_task_set_expected_times,
   * the same clock as start_ns); both 0 when it said nothing. */
  uint64_t planned_start_ns, planned_end_ns;
} mz_node_record;

/* One copy between memories, made for one node.  Counted, with its bytes,
 * in the run's statistics (mz_run_stats.transfers, bytes_moved). */
typedef struct mz_transfer_record {
  uint64_t run;
  uint32_t node;          /* the node it was made for */
  int queue;              /* that node's queue */
  int src_device;         /* device whose memory was read; -1: host memory */
  int dst_device;         /* device whose memory was written; -1: host memory (a read back) */
  uint64_t bytes;
  /* When it ran.  measured false: the device does not time its copies
   * (CUDA, simulated devices without a copy engine) and both are 0; it ran
   * before the node, on its queue or on its device's copy engine. */
  uint64_t start_ns, end_ns;
  bool measured;
  /* true: made in order on the node's queue, before the node (a device's
   * copy in, or a CPU worker's read of a stale input).  false: made by the
   * host while it planned the node (the first leg of a copy between two
   * backends), alongside whatever the queue was running then, or on the
   * device's copy engine (on_copy_engine). */
  bool on_queue;
  /* true: a copy into the device made on its copy engine (a CUDA copy
   * stream, a second OpenCL queue, a simulated device with copy=1), beside
   * the kernels of its queues, before the node started. */
  bool on_copy_engine;
} mz_transfer_record;

/* The end of a run, after every record of its nodes and copies. */
typedef struct mz_run_record {
  uint64_t run;
  int status;             /* the future's status */
  uint64_t start_ns;      /* mz_schedule() */
  uint64_t end_ns;        /* the end of the run's last node */
  const mz_run_stats *stats; /* as mz_future_stats() will report them */
} mz_run_record;

/* The callbacks.  Any may be NULL.  Records and what they point to are
 * valid during the call only.
 *
 * Threads: node and transfer are called from the thread that finishes the
 * node (a CPU worker, an OpenCL completion thread, a device's submission
 * thread), run_end from the thread that finishes the run, before its
 * future resolves: when mz_future_wait() returns, run_end has returned.
 * Calls for different nodes and runs come concurrently from several
 * threads; calls for one node come in order (its transfers, then the
 * node), and every call for a run comes before that run's run_end.
 * Locks: no maize lock is held.  The callbacks must be thread safe, quick
 * (they delay the completion of other work) and must not block on maize
 * calls: as in a completion callback, mz_future_wait on an unfinished run,
 * mz_buffer_read, mz_buffer_write and mz_runtime_wait_idle return
 * MZ_EDEADLK there. */
typedef struct mz_observer {
  void (*node)(const mz_node_record *rec, void *user);
  void (*transfer)(const mz_transfer_record *rec, void *user);
  void (*run_end)(const mz_run_record *rec, void *user);
  void *user;
} mz_observer;

/* Register obs (copied) as rt's observer, replacing the previous one, or
 * remove it with NULL.  Runs scheduled after the call report to obs; runs
 * already in flight keep reporting to the observer they started with, and
 * the call returns only once none of them is left, so the previous user
 * pointer may be freed on return.  Thread: any thread but a runtime thread
 * (MZ_EDEADLK there, nothing changed).  Errors: MZ_EINVAL (rt not live). */
int mz_runtime_set_observer(mz_runtime *rt, const mz_observer *obs);

/* The timing of one node of a finished run (mz_future_timings). */
typedef struct mz_node_timing {
  uint32_t node;          /* the node's id */
  const char *name;       /* valid while the future lives */
  int device;             /* where it was placed: device index and queue; */
  int queue;              /*   -1 and -1 when never placed */
  int status;             /* MZ_OK, or its error */
  /* Start and end from the run's start (mz_schedule(), as elapsed_ns in
   * mz_run_stats), both 0 when it never ran; on a simulated device, from
   * the run's start on the virtual clock. */
  uint64_t start_ns, end_ns;
  unsigned transfers;     /* copies made for it, and their bytes */
  uint64_t bytes;
} mz_node_timing;

/* Per-node timings of a finished run, one per node of the run in a
 * topological order, in *out (owned by the future, valid until
 * mz_future_destroy) and their count in *n.  The run must have been timed:
 * its runtime was created with mz_runtime_config.timings (or MZ_TIMINGS=1),
 * or an observer or the trace watched it, or its policy has a done
 * callback; by default CPU nodes are timed only as perf-model samples, so
 * an untimed run answers MZ_ESTATE.  The times are taken from the run's
 * nodes on the first call, which must come before the same nodes run
 * again (mz_graph_run of the same graph); after that the call fails with
 * MZ_ESTATE.  Thread: any.  Errors: MZ_EINVAL (NULL arguments, a future
 * that is not live), MZ_EAGAIN (the run is in flight), MZ_ESTATE (not
 * timed, or ran again), MZ_ENOMEM; *out and *n are then NULL and 0. */
int mz_future_timings(mz_future *f, const mz_node_timing **out, size_t *n);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
