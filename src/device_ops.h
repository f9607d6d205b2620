/* maize internals: the device plug-in point.
 *
 * A backend is one descriptor (struct mz__devtype) in the registry
 * (src/registry.c) plus one const ops table.  The core never asks which
 * kind of device it talks to: everything device specific is behind these
 * calls.  The core plans coherence (which copies to make), ordering (which
 * predecessors a node waits for on the device) and completion; a backend
 * only turns the plan into its API calls.
 *
 * Threads.  A backend whose ops.inline_submit is false gets one submission
 * thread per device from the core: every submit, marker and memory call
 * for its queues is made from that thread, except mem_read/mem_write,
 * which any worker thread may call (never a completion callback).  A
 * backend with inline_submit (the CPU) has submit called from any runtime
 * thread, including completion callbacks of other devices. */
#ifndef MZ_DEVICE_OPS_H
#define MZ_DEVICE_OPS_H

#include <stdio.h>

#include "maize.h"
#include "maize/policy.h"
#include "util.h"

struct mz__queue;
struct mz__exec;
struct mz__batch;
struct mz__devsel;

/* One transfer into the memory of the queue's device, before a node. */
struct mz__xfer {
  void *dst;              /* destination: a handle from dst device's mem_alloc */
  const void *src_host;   /* source in host memory, or NULL when src_dev is set */
  struct mz_device *src_dev; /* source device of the same backend (a peer copy) */
  void *src;              /* source handle on src_dev */
  size_t bytes;
  /* When the copy ran, in mz__now_ns time, for observers and the trace:
   * set by a backend that measures its copies (OpenCL profiling events),
   * left 0 by one that does not (the copy is then shown with its modelled
   * length).  The core measures the reads into host memory it makes itself
   * (struct mz__exec's reads) with the host clock. */
  uint64_t t_start, t_end;
  /* Backend scratch for the measurement (an OpenCL event), zeroed by the
   * core when it plans the copy; the backend frees what it puts here. */
  void *event;
};

/* One argument of a node as the device must bind it. */
struct mz__xarg {
  mz_arg value;           /* scalar value; for buffers, value.p = host pointer when the
                             device's memory is host memory */
  void *mem;              /* buffer: the handle in this device's memory */
  const mz_shape *shape;  /* buffer shape; NULL for scalars */
  mz_dtype dtype;         /* scalar or element type */
  bool is_buffer;
};

/* An exec's record for what a lean run never needs: the node's times, the
 * policy's word, and what a device with memory of its own uses (struct
 * mz__exec's xd).  In a run's arena (or its frozen replay's) beside the
 * arrays it points to, made for every task of a run that may read or
 * write any of them (struct mz__run's xrec, set by mz__observe_init: a device
 * with memory of its own, a device that is not a plain CPU, a timed run,
 * a policy with plan, async kernels); NULL in any other run, whose CPU nodes keep no times
 * (a perf-model sample is recorded where it is measured). */
struct mz__xdev {
  /* The task's predecessors in the run (mz__task_preds): where the record
   * exists, the task's word for them is the record's (struct mz__exec's
   * rec). */
  struct mz_op **preds;
  /* ns (mz__now_ns clock, or the device's own: ops->clock); 0 = the core
   * fills them.  Read them with mz__exec_t_start and mz__exec_t_end. */
  uint64_t t_start, t_end;
  /* The word mz_task_policy_data hands out: zero at the run's start. */
  uintptr_t policy_word;
  /* Filled for a device with memory of its own (memnode > 0).  A
   * host-memory device (the CPU) builds its call from the task's values
   * and buffers instead. */
  struct mz__xarg *args;
  void *kernel_dev;           /* the backend's prepared kernel for this device */
  struct mz__xfer *xfers;     /* transfers to make first, in order */
  /* Reads back into host memory the core made itself while planning the
   * node (synchronous mem_read calls: a CPU node's stale inputs, or the
   * first leg of a copy between two backends), already done and timed;
   * src_dev is the device read from; they follow the transfers in the
   * same array (mz__exec_reads, src/objects/mz_op.h).  Backends ignore them. */
  struct mz__exec **waits;    /* nodes on other queues to wait for on the device (nwait) */
  void *event;                /* the backend's completion event for this node, or NULL;
                                 the backend owns it and frees it in release_exec */
  /* The arrays' lengths, read through mz__exec_nxfer, mz__exec_nread and
   * mz__exec_nwait (0 for an exec without this record). */
  unsigned nxfer;
  unsigned nread;             /* the reads after the transfers */
  unsigned nwait;
};

/* What a backend needs to run one node, built by the core at submission. */
struct mz__exec {
  /* Its node is not a field: the exec is in the node's task
   * (mz__exec_node, src/objects/mz_op.h), as are its kernel, its number of
   * arguments, its launch (mz__exec_kernel and the next two) and the
   * device an earlier plan was for (args_dev1 below).  Its first 16
   * bytes are all that a CPU node re-run with its plan kept reads or
   * writes, so that they share a cache line of the task (with its
   * kernel) where the task's lines allow. */
  /* Set by the backend before batch completion; 0 = ok.  Once the node is
   * DONE, its final status (finish writes it: MZ_ECANCELED behind a failed
   * predecessor), which the task keeps no copy of; cleared where the node
   * is planned again. */
  int status;
  /* The core's, in what was padding: the index + 1 of the host-memory
   * device an earlier plan of this node was for (0: plan it; at most
   * MZ__MAX_DEVICES).  Host pointers and build-time scalars do not
   * change, so a re-run on the same device in a host-only runtime is not
   * planned again. */
  uint16_t args_dev1;
  /* The index of the queue the node is placed on (rt->queues), -1 until
   * it is; written atomically (policies read a predecessor's queue while
   * it is placed: mz_task_queue), read with mz__exec_queue for the queue
   * itself.  A runtime has at most INT16_MAX queues (src/device.c). */
  int16_t queue;
  /* The run's record of the node's times, policy word and device
   * arguments (struct mz__xdev; read with mz__exec_xd), NULL in a lean
   * run: never NULL on a device other than the CPU, nor in a timed run.
   * One word for two lists that go together: with its low bit set, the
   * record's address (the record holds the task's predecessors); clear,
   * the task's predecessor list itself (mz__task_preds), in a run without
   * records.  Both are set together where the task is lowered, into the
   * same run's memory (mz__task_set_preds).  (The detail of a failure is
   * kept with the task's rare fields: mz__exec_message.) */
  uintptr_t rec;
};
/* e's record in this run, or NULL (struct mz__exec's rec). */
static inline struct mz__xdev *mz__exec_xd(const struct mz__exec *e) {
  return e->rec & 1 ? (struct mz__xdev *)(e->rec - 1) : NULL;
}
/* e's times in this run (0, 0: not measured, or no record). */
static inline uint64_t mz__exec_t_start(const struct mz__exec *e) { return mz__exec_xd(e) ? mz__exec_xd(e)->t_start : 0; }
static inline uint64_t mz__exec_t_end(const struct mz__exec *e) { return mz__exec_xd(e) ? mz__exec_xd(e)->t_end : 0; }
/* The detail of e's failure (NULL: none), and its replacement: msg is
 * malloc'd (or NULL: clear it) and taken over; the core frees it when the
 * run is torn down.  Thread: the one that ends or fails e's node. */
const char *mz__exec_message(const struct mz__exec *e);
void mz__exec_set_message(struct mz__exec *e, char *msg);
/* e's transfers, its reads back into host memory and its waits: all in
 * its device record, so none without one (a runtime of host memory only). */
static inline unsigned mz__exec_nxfer(const struct mz__exec *e) { return mz__exec_xd(e) ? mz__exec_xd(e)->nxfer : 0; }
static inline unsigned mz__exec_nread(const struct mz__exec *e) { return mz__exec_xd(e) ? mz__exec_xd(e)->nread : 0; }
static inline unsigned mz__exec_nwait(const struct mz__exec *e) { return mz__exec_xd(e) ? mz__exec_xd(e)->nwait : 0; }
/* Someone observes e's run (an mz_observer or the trace): a backend that
 * can measure its transfers does so (it costs an event per copy). */
bool mz__exec_observed(const struct mz__exec *e);
/* e's run wants every node's own times: observed, or its runtime was
 * created with timings, or its policy has a done() callback (a backend
 * that can measure its nodes one by one at a cost does so then). */
bool mz__exec_timed(const struct mz__exec *e);
/* a and b belong to the same run: an event of one lives as long as the
 * other's (both are released when the run is torn down). */
bool mz__exec_same_run(const struct mz__exec *a, const struct mz__exec *b);
/* Whether a node of e's run other than next's (the command after e on its
 * in-order queue, in the same batch) waits for e's node: then that waiter,
 * on another queue or in a later batch, needs an event that ends with e's
 * command, not a later one.  Edges a later run adds are not counted (those
 * waiters wait for a later command: correct, and rare).  Thread: the
 * submission thread, while e's run is in flight. */
bool mz__exec_waited_apart(const struct mz__exec *e, const struct mz__exec *next);
/* What e runs, read from its node (the exec keeps no copy): the kernel
 * (NULL for host work: host, partition, unpartition), its number of
 * arguments (e->xd->args' length on a device with memory of its own), and
 * its launch (never NULL: the user's, else the default).  Thread: any. */
const mz_kernel *mz__exec_kernel(const struct mz__exec *e);
unsigned mz__exec_nargs(const struct mz__exec *e);
const mz_launch *mz__exec_launch(const struct mz__exec *e);

/* Consecutive nodes for one queue, submitted together.  The backend must
 * call mz__batch_done(b) (or mz__batch_done_later(b)) exactly once, after
 * the last node has finished on the device (one completion callback per
 * batch), from any thread. */
struct mz__batch {
  struct mz__queue *queue;
  unsigned n;
  struct mz__exec **execs;
  void *priv;                 /* backend scratch */
  struct mz__batch *next_done; /* the core's (mz__batch_done_later) */
};

struct mz__device_ops {
  /* Submit from any thread, without a submission thread (CPU). */
  bool inline_submit;
  /* The device's memory is host memory: no mem_alloc, buffers use their
   * host copy (the core uses memory node 0). */
  bool host_memory;

  /* Free the device's resources.  Thread: mz_runtime_destroy's, after every
   * run ended and every submission thread stopped.  Locks: none. */
  void (*destroy)(struct mz_device *dev);

  /* Whether dev can run kernel k (it has code for this platform).  Never
   * called with a NULL kernel: host work runs on devices that have both
   * host_memory and inline_submit.  Thread: any.  Locks: none.  Cheap. */
  bool (*can_run)(const struct mz_device *dev, const mz_kernel *k);

  /* Build or load k for dev once, and return the backend's handle in
   * *kdev (cached by the core per kernel and device).  On failure return
   * MZ_EBUILD (or another code) and set *log to a malloc'd message (the
   * build log), which the core frees.  Thread: the device's submission
   * thread, or the scheduling thread.  Locks: the kernel's lock is held. */
  int (*prepare)(struct mz_device *dev, const mz_kernel *k, void **kdev, char **log);
  /* Free what prepare made.  Thread: mz_kernel_destroy's or the runtime's. */
  void (*unprepare)(struct mz_device *dev, void *kdev);

  /* Device memory.  alloc returns MZ_ENOMEM when the device is full.
   * Thread: the submission thread (alloc), any non-callback thread
   * (free, read, write).  read and write are synchronous. */
  int (*mem_alloc)(struct mz_device *dev, size_t bytes, void **mem);
  void (*mem_free)(struct mz_device *dev, void *mem);
  int (*mem_read)(struct mz_device *dev, void *mem, void *host, size_t bytes);
  int (*mem_write)(struct mz_device *dev, void *mem, const void *host, size_t bytes);

  /* Memory kinds (optional, all may be NULL).
   *
   * mem_wrap: a device buffer that is the host memory at host itself, with
   * no copy (OpenCL CL_MEM_USE_HOST_PTR on a device that shares host
   * memory), for buffers that ask for zero copy.  MZ_ENOTSUP when this
   * device cannot use that memory in place (not host-unified, or host not
   * aligned as the device needs); the core then allocates as usual.  The
   * handle is freed with mem_free; the host memory stays the caller's.
   * Thread: as mem_alloc.
   *
   * mem_sync: make a wrapped buffer's two views agree, synchronously:
   * to_host, what the device wrote becomes visible in host memory; else
   * what the host wrote becomes visible to the device (on OpenCL a map and
   * an unmap: no copy where the implementation uses the host memory in
   * place, a copy where it does not, so correct either way).  Called only
   * while no command uses the buffer.  Thread: any non-callback thread.
   *
   * host_alloc / host_free: page-locked host memory of bytes bytes for
   * faster transfers (OpenCL CL_MEM_ALLOC_HOST_PTR, mapped for the
   * memory's life); *handle is the backend's, given back to host_free.
   * Thread: any non-callback thread.
   *
   * shared_alloc: memory the host and this device share, for
   * MZ_BUFFER_MANAGED (CUDA managed memory, OpenCL fine-grained SVM),
   * usable by the host at any time and by this device in place through
   * mem_wrap; freed with host_free.  MZ_ENOTSUP where the device has none.
   * Thread: any non-callback thread. */
  int (*mem_wrap)(struct mz_device *dev, void *host, size_t bytes, void **mem);
  int (*mem_sync)(struct mz_device *dev, void *mem, size_t bytes, bool to_host);
  int (*host_alloc)(struct mz_device *dev, size_t bytes, void **host, void **handle);
  void (*host_free)(struct mz_device *dev, void *host, void *handle);
  int (*shared_alloc)(struct mz_device *dev, size_t bytes, void **host, void **handle);

  /* Whether a node on queue q can wait on the device for a node already
   * submitted to queue p (another queue, same device or a peer device of
   * the same backend): same OpenCL context, CUDA events.  NULL: never. */
  bool (*can_wait)(const struct mz__queue *q, const struct mz__queue *p);
  /* Whether a peer copy from src to dst devices works (same context or
   * peer access).  NULL: never; the core goes through host memory. */
  bool (*can_copy_peer)(const struct mz_device *dst, const struct mz_device *src);

  /* Submit a batch: for each exec in order, wait for exec->xd->waits (their
   * exec->xd->event, or a marker the backend records on their queue), make the
   * transfers, run the kernel; then arrange one completion that calls
   * mz__batch_done(b).  A device with a copy engine (dev->copy_engine)
   * makes the transfers there instead of on q, in submission order on
   * that engine, and the kernel waits for them on the device (an event),
   * so the copies of the next nodes overlap the kernels before them.  A
   * copy from another device waits for exec->xd->waits (its source may come
   * from them); one from host memory need not (a valid host copy was
   * written by nodes that have finished).  The destinations are copies
   * the core marked invalid, which no node still queued on the device
   * reads (a writer elsewhere ended their readers first: hazard edges),
   * so nothing else on q needs to be waited for.
   * Return MZ_OK, or a negative code when nothing was
   * submitted (the core then fails the batch itself; do not call
   * mz__batch_done).  Thread: see the top of this file.  Ownership: the
   * batch belongs to the core; the backend may keep it until it calls
   * mz__batch_done, which frees it.  A backend with both host_memory and
   * inline_submit (the CPU) ends each node with mz__task_finish instead
   * and must not keep b once submit returns: its one-node batches are on
   * the caller's stack. */
  int (*submit)(struct mz__queue *q, struct mz__batch *b);

  /* Work sharing (optional; the CPU device): take n ready nodes, from
   * head to tail linked through mz__op_next (the backend may relink them), for
   * whichever queue of dev gets to them first, instead of a queue the
   * policy picked.  The core hands over only nodes no other device could
   * run, under a policy whose CPU placement is a preference (eager, ws,
   * round-robin, heft, dmda, dmdas: mz__policy_shares);
   * their state is MZ__T_QUEUED and their queue -1.  The queue that takes
   * a node sets its queue (t->queue) and counts it in its
   * backlog before running it like a submitted one.  From one of dev's own
   * queue threads the nodes stay with that queue unless another steals
   * them.  Thread: any.  Locks: none held.  Never fails: a node that cannot
   * be queued is not lost (the backend aborts on ENOMEM, as the core's
   * work lists do). */
  void (*share)(struct mz_device *dev, struct mz_op *head, struct mz_op *tail, size_t n);
  /* The same for the n nodes of v (optional, with share): the array, not
   * links, says which nodes follow, so the backend may read ahead.  v is
   * the caller's and must hold them unchanged until every node in it has
   * run (a frozen graph's sources, which live while its run is in flight,
   * or a piece of a run's own task list, which lives to the run's end:
   * the run ends only after all of them); the backend does not free it.
   * Thread, locks and failure as share. */
  void (*share_array)(struct mz_device *dev, struct mz_op *const *v, size_t n);
  /* Lend the calling thread to the device: it runs the device's nodes in
   * place of a queue thread that sleeps meanwhile, until done(arg) holds
   * or it finds no work for a while.  Returns done(arg).  A thread that
   * waits for a run calls it (mz__run_wait), so that a node it can take
   * costs no wake-up and no more threads run nodes than the device has
   * queues.  NULL where the device has no pool.  Thread: a user thread,
   * never a runtime thread.  Locks: none held. */
  bool (*help)(struct mz_device *dev, bool (*done)(void *), void *arg);
  /* Optional, with help: hold takes one of the device's sleeping queue
   * threads' loops for the calling thread before it starts a run, so that
   * the nodes the run shares wake no thread (they wait for the holder):
   * a token > 0, or 0 when no queue thread came to sleep (those spinning
   * idle are asked to, and waited for up to the runtime's spin time).  help_held then runs
   * that loop until done(arg) (it spins past the device's spin time only
   * while outside work asks it to: struct mz__idle_ops.hold) and gives it
   * back, waking its thread when work is left; it returns done(arg).
   * Every token is given back by exactly one help_held (done(arg) true at
   * once gives it back without running anything).  Thread: a user
   * thread, one holder per token.  Locks: none held. */
  int (*hold)(struct mz_device *dev);
  bool (*help_held)(struct mz_device *dev, int token, bool (*done)(void *), void *arg);

  /* Free exec->xd->event and anything the backend attached to the exec.
   * Thread: the thread tearing down the run (never a callback of the same
   * device).  Optional. */
  void (*release_exec)(struct mz__exec *e);

  /* Open the backend's state for a queue (q->priv) and close it.
   * Thread: mz_runtime_create's / mz_runtime_destroy's. */
  int (*queue_init)(struct mz__queue *q);
  void (*queue_fini)(struct mz__queue *q);

  /* --- Optional cost and clock hooks.  All may be NULL. --- */

  /* The device's own clock, for a device that runs on a virtual clock (the
   * simulator): its execs' times (struct mz__xdev) are in this clock, the run's
   * statistics report a virtual makespan from it, and policies read it as
   * "now" (mz_sched_now_ns).  Thread: any.  Locks: none.  Cheap. */
  uint64_t (*clock)(const struct mz_device *dev);

  /* The modelled execution time of a node on dev in ns, or a negative
   * value when the device has no model for it.  op is a task of a run in
   * flight, borrowed for the call.  Thread: any (a policy's).  Locks: none
   * held on entry; must not take rt->lock.  Cheap: called per queue per
   * placement. */
  double (*estimate_ns)(const struct mz_device *dev, const struct mz_op *op);

  /* Time in ns to move bytes into dst's memory from src's memory, where a
   * NULL device is host memory.  The core asks dst's backend first, then
   * src's, and uses a default when neither answers (returns < 0).
   * Thread: any.  Locks: none.  Cheap. */
  double (*link_ns)(const struct mz_device *dst, const struct mz_device *src, size_t bytes);

  /* When queue q is expected to have finished what was submitted to it, in
   * the device's clock (see clock).  NULL: the core estimates it from the
   * backlog and recent execution times.  Thread: any.  Locks: none. */
  uint64_t (*queue_ready_ns)(const struct mz__queue *q);

  /* When dev's copy engine is expected to have made the copies given to
   * it, in the device's clock; only for a device with a copy engine.
   * NULL or a time before now: now.  Thread: any.  Locks: none. */
  uint64_t (*copy_ready_ns)(const struct mz_device *dev);

  /* The distance between the workers of two queues of dev (0 for the same
   * queue; larger is farther, e.g. hwloc levels to a common ancestor).
   * NULL: every pair of distinct queues is at distance 1.  Thread: any. */
  unsigned (*queue_distance)(const struct mz__queue *a, const struct mz__queue *b);
};

/* A backend's descriptor in the registry. */
struct mz__devtype {
  const char *name;           /* the MZ_DEVICES spelling: "cpu", "opencl", "cuda", "sim" */
  mz_device_kind kind;
  const struct mz__device_ops *ops;
  /* Find devices and add them with mz__device_add().  sel says which the
   * user asked for: sel->all, or sel->arg ("2" from "opencl:2"; the
   * backend interprets it: an index for opencl/cuda, a worker count for
   * cpu, a platform description for sim).  Return the number added, 0
   * when none exist (not an error), or a negative code with a message set
   * through mz__set_error(rt, ...) when sel names something absent
   * (MZ_ENODEV) or malformed (MZ_EINVAL).  Thread: mz_runtime_create's. */
  int (*discover)(mz_runtime *rt, const struct mz__devtype *type, const struct mz__devsel *sel);

  /* Hold or release completions for a while (optional).  The
   * core calls hold(rt, true) before it submits a run's first nodes from
   * the scheduling thread and hold(rt, false) once it is done, so a
   * backend on a virtual clock does not advance time between submissions
   * that happen at the same virtual instant.  Calls nest.  Thread: the one
   * in mz_schedule().  Locks: none held.  Must not block. */
  void (*hold)(mz_runtime *rt, bool on);
};

struct mz__devsel {
  bool all;                   /* "kind" alone or "all" */
  const char *arg;            /* text after ':' or NULL */
  unsigned default_queues;    /* config's queue count for this kind (0: backend default) */
  bool implicit;              /* from "all", not named: only real hardware should answer */
};

/* A device as the core keeps it; the public mz_device. */
struct mz_device {
  mz_runtime *rt;
  const struct mz__devtype *type;
  const struct mz__device_ops *ops;
  mz_device_info info;        /* strings point into name_buf etc. or static text */
  char name_buf[128], vendor_buf[128], version_buf[128];
  unsigned memnode;           /* 0: host memory; else this device's own memory */
  unsigned nqueues;
  struct mz__queue *queues;   /* array of nqueues */
  void *priv;                 /* backend state */
  _Atomic bool dead;
  bool kernels;               /* may run kernels; false for a host-only CPU device */
  /* Input copies run on a copy engine of the device's own, overlapping its
   * queues' kernels (see submit); set by the backend when it adds the
   * device, before its queues open, and read by the core and policies. */
  bool copy_engine;
  struct mz__proxy *proxy;    /* the submission thread, when !ops->inline_submit */
  uint64_t mem_used;          /* bytes allocated through mem_alloc (submission thread) */
};

struct mz__queue {
  struct mz_device *dev;
  unsigned index;             /* runtime-wide queue number */
  unsigned local;             /* index within the device */
  _Atomic unsigned backlog;   /* submitted, not finished */
  /* The node the queue runs now, for the watchdog's report:
   * set (relaxed) by backends that know it (the CPU worker, only when
   * rt->watchdog is set, so the dispatch path pays nothing otherwise).  */
  _Atomic(struct mz_op *) current;
  void *priv;                 /* backend state (a cl_command_queue, a CUstream, a worker) */
  /* Ready nodes of policies with pick, placed on this queue and waiting
   * for a free slot, in arrival order (exec.c: pend, pick_drain): the
   * npend from pend_head on.  Under pend_lock; npend is also read without
   * it, after backlog drops. */
  mz__spin pend_lock;
  _Atomic unsigned npend;
  unsigned pend_head, pend_cap;
  struct mz_op **pend;
  /* A CPU worker's completions, counted here by its own thread and
   * published to the run in one go (mz__queue_flush) when the worker runs
   * out of work or turns to another run: the run's shared counters are
   * then touched once per burst, not once per node. */
  struct mz__acct {
    struct mz__run *run;
    size_t done;
    uint64_t ops, busy, batches;
    /* When the burst of back-to-back nodes of a run that is not timed
     * began (struct mz__run.timed), by mz__acct_now: its length is busy
     * time at the flush; 0: no burst. */
    uint64_t t0;
    unsigned dev;
    /* The runtime's nanoseconds per tick of mz__ticks (0: none, the burst
     * times are mz__now_ns's); set before the queue's worker starts. */
    double tick_ns;
  } acct;
};
/* The time a burst of q's nodes starts or ends, in the unit of its acct's
 * t0: a tick count where the runtime measured the tick rate, else ns. */
static inline uint64_t mz__acct_now(const struct mz__acct *a) { return a->tick_ns > 0 ? mz__ticks() : mz__now_ns(); }
/* Publish q's pending completions.  Thread: q's worker only. */
void mz__queue_flush(struct mz__queue *q);
/* The same, where the caller reads the clock next anyway (a worker about
 * to spin): *now is the time the burst ended, read here when 0 and a
 * burst is open (left 0 when none is), for the caller to use (a clock
 * read is tens of nanoseconds in a virtual machine, a tenth of a fine
 * distributed step).  Thread: q's worker only. */
void mz__queue_flush_at(struct mz__queue *q, uint64_t *now);

/* Add a device found by discover.  nqueues >= 1.  Returns the device (its
 * info zeroed except kind/index, for the backend to fill) or NULL on
 * ENOMEM.  The core opens the queues with ops->queue_init afterwards. */
struct mz_device *mz__device_add(mz_runtime *rt, const struct mz__devtype *type, unsigned nqueues,
                                 void *priv);

/* Completion of a batch; see struct mz__batch.  Never calls device APIs,
 * never blocks on a device; may submit to inline devices and wake
 * submission threads.  Thread: any. */
void mz__batch_done(struct mz__batch *b);
/* mz__batch_done(b), made soon on the submission thread of b's device
 * (inline_submit false only): for a completion callback that should return
 * at once.  A driver that runs its callbacks on the thread that completed
 * the command, before it releases the commands waiting for that one (PoCL
 * 3.1; a CUDA host function holds up its stream the same way), would
 * otherwise hold its queue while the core ends every node of the batch.
 * Thread: any; never blocks. */
void mz__batch_done_later(struct mz__batch *b);
/* mz__batch_done(b) here, on the callback's thread, while the submission
 * thread of b's device is busy and has no batch of that device still to
 * end (so a queue's batches still end in order); else
 * mz__batch_done_later(b).  For a driver whose callback holds up only its
 * own queue (a CUDA host function): while the submission thread is the
 * bottleneck (small kernels, launched one by one), the nodes are ended
 * beside it instead of between its launches; a lone op (a canned gemm,
 * then a wait) still ends on the idle, spinning submission thread.
 * Thread: any. */
void mz__batch_done_callback(struct mz__batch *b);

/* For devices with host_memory: plan exec e (read stale inputs back into
 * host memory, update copy states) right before running it, on the
 * thread that runs it.  On failure mz__exec_message(e) says why, and the
 * backend finishes the node with the returned code (which may be one of the
 * core's internal retry codes, src/fault.h: pass it on unchanged; the core
 * then takes the node back instead of finishing it).  Such devices' submit
 * receives execs that are not planned yet.  Thread: a worker (never a
 * completion callback).  Locks: none held. */
int mz__exec_prepare(struct mz__exec *e);

/* The queue e's node is placed on (e->queue: placing a node and planning
 * its exec name one queue), or NULL before it is placed.  Thread: any
 * that may read the node's exec. */
struct mz__queue *mz__exec_queue(const struct mz__exec *e);

/* Mark a device dead (a sticky error): later placements skip it.  Thread: any. */
void mz__device_fail(struct mz_device *dev, int code, const char *why);

/* Record an error message on the runtime (printf-style).  Returns code. */
int mz__set_error(const mz_runtime *rt, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The one logger: a message at one of MZ_LOG's levels goes to stderr when
 * the runtime's level (MZ_LOG, default warn) includes it and the runtime is
 * not quiet (MZ_QUIET, mz_runtime_config.quiet: nothing at all, as before
 * MZ_LOG).  rt may be NULL (then: warn). */
enum mz__log_level { MZ__LOG_ERROR, MZ__LOG_WARN, MZ__LOG_INFO, MZ__LOG_DEBUG };
void mz__log(const mz_runtime *rt, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* mz__log at MZ__LOG_WARN. */
void mz__warn(const mz_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* (The monotonic clock, mz__now_ns, is util.h's.) */

/* The kernel's implementation specs, for backends. */
const mz_kernel_spec *mz__kernel_spec(const mz_kernel *k);

/* Read a code spec's bytes (from memory or disk).  On success *data is
 * malloc'd (NUL-terminated, size excludes the NUL) and freed by the
 * caller.  MZ_EIO with a message when the file cannot be read. */
int mz__code_load(const mz_code_spec *spec, char **data, size_t *size, char **err);
/* Opens a user-supplied path for reading, refusing what is not a regular
 * file (src/util.c); the caller fcloses it. */
FILE *mz__fopen_regular(const char *path, int *rc, char *err, size_t errlen);
/* Whether a launch's sizes are in the range every device takes (src/util.c). */
bool mz__launch_ok(const mz_launch *l);
/* Bytes as the environment gives them ("64M"); false when malformed (src/util.c). */
bool mz__parse_bytes(const char *s, uint64_t *out);

/* The registered backends (NULL-terminated), in discovery order. */
extern const struct mz__devtype *const mz__devtypes[];

/* The simulator's descriptor (devices/sim/sim.c). */
extern const struct mz__devtype mz__devtype_sim;

/* The CPU backend's descriptor (devices/cpu/cpu.c). */
extern const struct mz__devtype mz__devtype_cpu;

/* The device table (src/device.c); read by any thread, lock-free. */
/* Whether queue q can run the task now (device alive, implementation, the
 * run's device subset). */
bool mz__can_run(const mz_runtime *rt, const struct mz_op *op, unsigned q);

#endif
