/* maize: the runtime.
 *
 * A runtime owns the devices it found, one worker thread per CPU queue, the
 * registered policies and the trace.  More than one runtime may exist in a
 * process; they share nothing.  Its threads carry names that top -H, ps -L
 * and gdb show: mz-cpuN (the CPU worker of queue N of the CPU device),
 * mz-submitN (the submission thread of device N), mz-sim (simulated
 * devices' clock), mz-reaper (frees ended runs), mz-watchdog and
 * mz-cuda-mon; a distributed context adds mz-mpi (maize/mpi.h). */
#ifndef MAIZE_RUNTIME_H
#define MAIZE_RUNTIME_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

struct mz_policy_ops;

/* Settings for mz_runtime_create().  Zero or NULL fields take the default,
 * which is read from the environment where one is named. */
typedef struct mz_runtime_config {
  /* Which devices to use, as MZ_DEVICES spells them: items separated by ','
   * or ';', each "kind" or "kind:arg".  "cpu" uses every core the process
   * may run on, "cpu:N" N workers; "opencl" every OpenCL device, "opencl:I"
   * the I-th; "cuda", "cuda:I" likewise; "sim:..." simulated devices where
   * that backend is built; "all" every device found.  NULL: $MZ_DEVICES,
   * else "all".  An item that matches no device fails creation with
   * MZ_ENODEV; an unknown kind with MZ_ENOENT. */
  const char *devices;
  /* The default policy's name.  NULL: $MZ_POLICY, else "eager". */
  const char *policy;
  /* Where to write a Chrome trace-event JSON file (Perfetto opens it).
   * Each run is appended when it ends, before its future resolves, and the
   * file is valid JSON after each run; a runtime that ran nothing writes
   * an empty trace when destroyed.  A runtime that finds the file being
   * written by another runtime (an advisory lock) writes "<name>-2.json"
   * (-3, ...) instead and warns.  The trace is an observer of every run
   * (maize/observer.h).  NULL: $MZ_TRACE, else no trace; "": no trace. */
  const char *trace;
  /* In-order queues per OpenCL device and streams per CUDA device.  0: the
   * default (4), or $MZ_OPENCL_QUEUES / $MZ_CUDA_STREAMS. */
  unsigned opencl_queues;
  unsigned cuda_streams;
  /* How long an idle CPU worker, or a device's submission thread, spins,
   * in microseconds, before it parks (sleeps until work arrives; waking it
   * costs a system call).  0: the default, $MZ_SPIN_US or 50. */
  unsigned spin;
  /* Print warnings (an ignored device, a bad perf model file) to stderr.
   * Default true; $MZ_QUIET=1 turns them off. */
  bool quiet;
  /* --- The watchdog. --- */
  /* Report stuck work: when runs are in flight and no node has been
   * submitted or has finished for this many seconds, a runtime thread
   * writes one report listing each unfinished node of those runs: its id
   * and name, its device and queue (when placed) and its state ("waiting
   * for predecessors", "gated on host", "queued for submission",
   * "submitted to device", "running"), then reports the same stall again
   * after every further period.  0: $MZ_WATCHDOG_S (seconds, fractions
   * allowed; unset or 0: off).  A negative, NaN or non-numeric value fails
   * mz_runtime_create() with MZ_EINVAL.  The watchdog costs nothing on the
   * dispatch path: it reads counters the runtime keeps anyway, taking the
   * runtime's lock briefly a few times per period. */
  double watchdog_s;
  /* Where reports go: NULL writes them to stderr (even when quiet, since
   * they were asked for).  Called on the watchdog's thread with no runtime
   * lock held; report is valid during the call only.  Like a completion
   * callback it must not block on maize calls (they return MZ_EDEADLK). */
  void (*watchdog_fn)(const char *report, void *user);
  void *watchdog_user;
  /* User policies (NULL-terminated array of ops tables, include/maize/policy.h)
   * registered right after the shipped ones and before the default policy
   * is chosen, so that policy or $MZ_POLICY may name one of them.  The
   * tables must outlive the runtime.  NULL: none.  A table that
   * mz_policy_register refuses fails creation with its error. */
  const struct mz_policy_ops *const *policies;
  /* Time every node (mz_future_timings).  By default a CPU node is timed
   * only when its run is observed (an mz_observer or the trace), when the
   * run's policy has a done callback, or as one of the perf models'
   * samples (one node in 16 once a kernel's model is calibrated, one in
   * 128 once it is settled):
   * two clock reads are a sixth of a re-run node's cost here.  A CPU
   * queue's busy time (mz_run_stats.busy_ns) is then measured per burst
   * of back-to-back nodes rather than per node (by the CPU's time-stamp
   * counter where its rate is constant, which mz_runtime_create measures).
   * false: $MZ_TIMINGS (1 or 0), else off. */
  bool timings;
} mz_runtime_config;

/* Create a runtime.  cfg may be NULL for all defaults.  On success *out
 * holds the runtime, which mz_runtime_destroy() frees.  On failure *out is
 * NULL, nothing is left behind, and mz_runtime_last_error() on a NULL
 * runtime is not available: the message is written to stderr unless quiet.
 * Errors: MZ_EINVAL (NULL out; a malformed value: "cpu:0", "cpu:two",
 * MZ_OPENCL_QUEUES, MZ_CUDA_STREAMS or MZ_SPIN_US that is not a count from 1
 * to 2^20-1, an MZ_WAIT_SPIN_US that is not a count from 0 to 2^20-1, a bad MZ_WATCHDOG_S, MZ_FAULTS or MZ_LIMIT_*_MEM), MZ_ENOENT (unknown device kind or
 * policy: MZ_DEVICES=bogus, MZ_POLICY=nope), MZ_ENODEV (a selected device
 * does not exist, or its backend is not built: MZ_DEVICES=cuda:99),
 * MZ_ENOMEM.
 *
 * Device memory.  MZ_LIMIT_OPENCL_MEM, MZ_LIMIT_CUDA_MEM and
 * MZ_LIMIT_SIM_MEM ("64M"; K, M, G are powers of 1024) cap what the runtime
 * allocates on each device of that kind.  An allocation past the cap, or one
 * the device refuses, evicts least recently used copies that no queued or
 * running op uses (a copy that is the only valid one is written back to host
 * memory first); if none can go, the op waits for ops running on that
 * device to release memory, and fails with MZ_ENOMEM when none could.  A
 * copy is evicted at most once per op that used it: no livelock.  Host
 * memory is never capped.  Without a cap nothing is evicted.
 *
 * Dead devices.  A device that fails takes no more work: ops handed to it
 * and not started move to another device that can run them; its memory is
 * lost, so an op whose input was valid only there fails with MZ_EDEVICE and
 * its dependents with MZ_ECANCELED.
 *
 * Fault injection (tests).  MZ_FAULTS="alloc:17,enqueue:300,transfer:4,
 * kernel:5,dead:cl0@40" fails the k-th device allocation (MZ_ENOMEM),
 * submission (MZ_EDEVICE), transfer (MZ_EDEVICE) or kernel (MZ_EKERNEL)
 * counted per runtime, and marks a device ("cpu0", "cl0", "cuda0", "sim1"
 * or a device index) dead after its k-th op.  See README.md. */
int mz_runtime_create(const mz_runtime_config *cfg, mz_runtime **out) MZ_WUR;

/* Wait for every run still in flight, close the trace if one was asked for,
 * stop the workers and free everything the runtime owns.  Buffers, kernels,
 * graphs and futures must be released first; those still alive are freed
 * here too and their handles become invalid.  NULL is a no-op, and so is a
 * handle that is not a live runtime (see "Handles that cannot be checked"
 * in README.md).  Calling it from a runtime thread (a task or a callback)
 * is refused: it returns without destroying anything and leaves MZ_EDEADLK's
 * message in mz_runtime_last_error() (printed to stderr unless quiet). */
void mz_runtime_destroy(mz_runtime *rt);

/* The message of the last error a call on this runtime reported, from any
 * thread (for example "MZ_DEVICES: no device 'cuda:99'").  Valid until the
 * next failing call on the runtime.  Never NULL. */
const char *mz_runtime_last_error(const mz_runtime *rt);

/* The name of the runtime's default policy. */
const char *mz_runtime_policy(const mz_runtime *rt);

/* Devices found and enabled, in a stable order: the CPU first. */
unsigned mz_runtime_device_count(const mz_runtime *rt);
/* The i-th device, or NULL when i is out of range.  Owned by the runtime. */
mz_device *mz_runtime_device(const mz_runtime *rt, unsigned i);

/* The number of in-order queues of all devices together.  Queues are
 * numbered from 0 in device order; policies see these numbers. */
unsigned mz_runtime_queue_count(const mz_runtime *rt);

/* Wait until every run scheduled on rt so far has finished.  Returns MZ_OK,
 * or MZ_EDEADLK when called from a runtime thread. */
int mz_runtime_wait_idle(mz_runtime *rt);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
