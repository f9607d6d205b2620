/* maize internals: fault injection and device memory limits.
 *
 * A private header: the core includes it at its few call sites, and tests
 * include it to arm faults and read the counters.  Nothing here is public
 * API; applications use MZ_FAULTS and MZ_LIMIT_<KIND>_MEM (see README.md).
 *
 * Cost when off.  rt->faults and rt->ml stay NULL unless MZ_FAULTS, a
 * MZ_LIMIT_*_MEM variable or one of the calls below turned them on; the
 * core tests the pointer (one predictable branch) before calling in here.
 *
 * Faults.  Four counters per runtime count events of each kind, from 1:
 *   alloc     a device allocation (mem_alloc); on a device whose memory is
 *             host memory (the CPU), each buffer a task writes
 *   enqueue   a submission to a queue (one batch: one op on the CPU and on
 *             simulated devices, up to 256 consecutive ops on OpenCL)
 *   transfer  a copy planned into a device's memory, or a read back into
 *             host memory before a CPU task
 *   kernel    a kernel node about to run, on any device
 * When a counter reaches the armed index k, that one event fails (once):
 * alloc with MZ_ENOMEM, enqueue and transfer with MZ_EDEVICE, kernel with
 * MZ_EKERNEL.  The op fails as a real failure would: its dependents are
 * canceled (MZ_ECANCELED), independent branches finish, every future
 * resolves.  "dead:DEV@K" marks device DEV dead once K ops were planned on
 * it (the K-th still runs): ops that reach it later move to another device
 * that can run them when their inputs have a valid copy elsewhere, else
 * fail with MZ_EDEVICE; copies on a dead device count as lost.
 *
 * MZ_FAULTS syntax: items separated by ',':  alloc:K  enqueue:K
 * transfer:K  kernel:K  dead:DEV@K, where DEV is a device's kind and its
 * index among that kind's devices ("cpu0", "cl0" or "opencl0", "cuda0",
 * "sim3") or its runtime-wide index ("2").  K >= 1. */
#ifndef MZ_FAULT_H
#define MZ_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "maize.h"

struct mz_op;
struct mz__queue;
struct mz__exec;
struct mz_device;

enum mz__fault_kind {
  MZ__FAULT_ALLOC,
  MZ__FAULT_ENQUEUE,
  MZ__FAULT_TRANSFER,
  MZ__FAULT_KERNEL,
  MZ__FAULT_KINDS,
};

/* Internal plan outcomes that are not failures: the core takes the node
 * back to the host-side path instead of finishing it.  Never seen outside
 * src/exec.c and src/fault.c, never a run's status. */
#define MZ__ERETRY (-1000)    /* the device is dead: place the node again */
#define MZ__EHOSTWAIT (-1001) /* a predecessor left this queue: wait on the host */
#define MZ__EMEMWAIT (-1002)  /* no device memory now: wait for ops to release some */

/* ---- the test API (also what MZ_FAULTS sets) ----
 * Call these while no run is in flight on rt (before the first schedule or
 * after mz_runtime_wait_idle); they reset the counters they touch. */

/* Parse spec with the MZ_FAULTS syntax and arm it; NULL or "" disarms every
 * fault.  Returns MZ_OK, or MZ_EINVAL with mz_runtime_last_error() saying
 * what is wrong (then nothing changed), or MZ_ENOMEM. */
int mz__faults_set(mz_runtime *rt, const char *spec);
/* Fail the k-th event of kind from now on (k = 0 disarms that kind). */
int mz__fault_arm(mz_runtime *rt, enum mz__fault_kind kind, uint64_t k);
/* Mark device dev (runtime-wide index) dead after its k-th op from now on. */
int mz__fault_kill(mz_runtime *rt, unsigned dev, uint64_t k);
/* How many events of kind were counted, and how many faults fired (0 or
 * 1 per arming).  MZ__FAULT_KINDS as kind: devices killed by "dead". */
uint64_t mz__fault_count(const mz_runtime *rt, enum mz__fault_kind kind);
uint64_t mz__fault_fired(const mz_runtime *rt, enum mz__fault_kind kind);
/* Test only: bring a device marked dead back (its copies were dropped). */
void mz__fault_revive(mz_runtime *rt, unsigned dev);

/* Cap what maize allocates on every device of a kind (0: no cap).  The CPU
 * (host memory) is never capped: MZ_EINVAL. */
int mz__memlimit_set(mz_runtime *rt, mz_device_kind kind, uint64_t bytes);
/* Whether dev's memory is capped (a limit set for its kind).  OpenCL and
 * CUDA devices always have the memory-limit machinery, to evict when they
 * run out by themselves; only a cap turns zero copy off.  Thread: any. */
bool mz__memlimit_capped(const mz_runtime *rt, const struct mz_device *dev);

struct mz__mem_stats {
  uint64_t evictions;        /* device copies freed to make room */
  uint64_t writebacks;       /* of those, copies written back to host memory first */
  uint64_t waits;            /* ops that waited for other ops to release memory */
  uint64_t enomem;           /* allocations that failed with MZ_ENOMEM in the end */
  uint64_t max_copy_evictions; /* the most evictions of one buffer on one device */
};
void mz__mem_stats(const mz_runtime *rt, struct mz__mem_stats *out);
/* Evictions and uses (ops planned with it) of b's copy on device dev. */
uint64_t mz__mem_buffer_evictions(const mz_buffer *b, unsigned dev);
uint64_t mz__mem_buffer_uses(const mz_buffer *b, unsigned dev);
/* Bytes maize holds on device dev now, or (peak) the most it ever held
 * while limits were on. */
uint64_t mz__mem_used(const mz_runtime *rt, unsigned dev, bool peak);
/* Debugging: the devices' memory state, parked nodes and pins. */
void mz__mem_dump(const mz_runtime *rt, FILE *f);
/* Start the peak over from what is held now. */
void mz__mem_peak_reset(mz_runtime *rt, unsigned dev);

/* ---- hooks for the core (src/exec.c, src/buffer.c, src/runtime.c) ---- */

/* Runtime creation: read MZ_FAULTS (fault_init) and MZ_LIMIT_<KIND>_MEM
 * (memlimit_init, which also gives devices that own their memory an
 * unlimited limit) once the devices are known; teardown frees.  Creation
 * fails with MZ_EINVAL on bad syntax. */
int mz__fault_init(mz_runtime *rt);
int mz__memlimit_init(mz_runtime *rt);
void mz__fault_fini(mz_runtime *rt);

/* Count one event of kind; true when it is the one to fail. */
bool mz__fault_hit(mz_runtime *rt, enum mz__fault_kind kind);

/* An op is planned on dev, whose death MZ_FAULTS may have armed ("dead:"):
 * counts it and fails the device at the armed count.  Only with rt->faults
 * set. */
void mz__fault_device_op(mz_runtime *rt, struct mz_device *dev);

/* Host memory: whether reading b back for a CPU task is an injected
 * transfer fault. */
bool mz__fault_host_transfer(mz_runtime *rt, mz_buffer *b);


/* Device memory through the limits: allocate b's copy on dev for exec e,
 * evicting least recently used copies that no queued or running op uses.
 * Returns MZ_OK, MZ_ENOMEM (nothing can make room), MZ__EMEMWAIT (ops in
 * flight on dev hold what is needed) or the device's error; *why may get
 * a message (static text). */
int mz__mem_alloc(struct mz__exec *e, struct mz_device *dev, mz_buffer *b, void **mem, const char **why);
/* Free a copy allocated on dev (buffer release, a lost allocation race). */
void mz__mem_free(struct mz_device *dev, mz_buffer *b, void *mem);
/* Free b's copy on dev, if any, at the buffer's release (limits on). */
void mz__mem_drop(struct mz_device *dev, mz_buffer *b);
/* Free what mz__memlimit_init and mz__memlimit_set set up (runtime
 * teardown, after the buffers). */
void mz__memlimit_fini(mz_runtime *rt);
/* Pin the source copy of a peer transfer (b's lock held). */
void mz__mem_pin_src(mz_buffer *b, unsigned m);
/* Pin op's buffer copies on dev's memory node while it is planned there
 * (limits on only). */
void mz__mem_pin_exec(struct mz__exec *e, struct mz_device *dev);
/* The node finished: unpin what its plan pinned and return ops that
 * waited for memory on those devices (malloc'd array, *n of them; NULL
 * when none), for the core to resume. */
struct mz_op **mz__mem_unpin(struct mz__exec *e, size_t *n);
/* The same for the n execs of one batch (one queue), those that ended
 * (status above MZ__ERETRY): the device's mutex is taken once. */
struct mz_op **mz__mem_unpin_batch(struct mz__exec *const *ex, unsigned n, size_t *nw);
/* The node got MZ__EMEMWAIT: unpin its copies and park it until an op on
 * its device finishes.  False when nothing there could release memory any
 * more: retry at once (the retry ends in success or MZ_ENOMEM), and so do
 * the nodes parked there before, returned in *woken (malloc'd, *nwoken). */
bool mz__mem_park(struct mz__exec *e, struct mz_op ***woken, size_t *nwoken);

#endif
