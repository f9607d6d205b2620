/* maize: writing a scheduling policy.
 *
 * A policy maps every node of a run to an in-order queue.  It is a const
 * ops table registered by name with mz_policy_register(); the runtime
 * creates one instance (state) per runtime the first time the policy is
 * used.  Queues are numbered 0..mz_sched_queue_count()-1 across all
 * devices.  Nodes that need no queue (values, zips, joins) never reach a
 * policy.
 *
 * A policy may place nodes in two ways, and may use both:
 *  - plan: at mz_schedule(), see the whole run (nodes in a topological
 *    order) and fix queues up front with mz_task_set_queue();
 *  - select: when a node can be submitted, return its queue.
 *
 * A policy may also order each queue (ABI 2, pick): nodes selected for a
 * queue then wait on the host until the queue has a free slot, and the
 * policy picks which of them goes next.
 *
 * The runtime checks every decision: a queue that does not exist or whose
 * device cannot run the node fails that node with MZ_EPOLICY (its
 * dependents are canceled, other branches finish).  It never waits for a
 * decision that does not come.
 *
 * ABI versions.  A table says which header it was built against in abi.
 * ABI 1 tables end at done and keep working unchanged (the runtime reads
 * no field past done from them); ABI 2 adds pick. */
#ifndef MAIZE_POLICY_H
#define MAIZE_POLICY_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

#define MZ_POLICY_ABI 2
/* The oldest ABI still accepted: tables without pick. */
#define MZ_POLICY_ABI_MIN 1

/* Returned by select to be asked again once every predecessor of the
 * node has finished (a dynamic choice at ready time). */
#define MZ_POLICY_DEFER (-1000)

/* The most pending nodes pick is shown at once (the oldest). */
#define MZ_POLICY_PICK_MAX 256

typedef struct mz_sched mz_sched; /* the runtime as a policy sees it */
typedef struct mz_task mz_task;   /* one node to place */

struct mz_policy_ops {
  unsigned abi;             /* MZ_POLICY_ABI */
  const char *name;         /* the name mz_schedule() and MZ_POLICY use */
  const char *description;  /* one line */

  /* Create the policy's state for one runtime.
   * Thread: the one calling mz_schedule() that first uses the policy.
   * Locks: the runtime's policy lock is held on entry and on return.
   * Ownership: *state belongs to the policy until fini; may stay NULL.
   * Returns MZ_OK, or an error: then the mz_schedule() (or mz_graph_run())
   * that first used the policy fails, with no future and nothing run, with
   * that code when it is an MZ_E* code, else MZ_EPOLICY, and a message
   * naming the policy and the value; the next use calls init again. */
  int (*init)(const mz_sched *s, void **state);

  /* Free the state.  Optional.
   * Thread: the one calling mz_runtime_destroy(), after all runs ended.
   * Locks: none held.  Ownership: state is given back for good. */
  void (*fini)(void *state);

  /* See a whole run before it starts.  Optional.  Called for every run
   * of a user's policy.  The shipped single, round-robin, heft, dmda and
   * dmdas are the only policies whose plan a re-run may keep (mz_graph_run
   * in future.h); all but single make none for a run that only the CPU
   * workers can run: with no device to choose, its nodes are shared among
   * the workers as under eager (a CPU placement is a preference that
   * stealing may override), while single plans such a run onto one worker.
   * Thread: the one calling mz_schedule().  Locks: none held; no node of
   * the run has started.  Ownership: tasks[] and the tasks are borrowed for
   * the call; set queues with mz_task_set_queue().  A negative return fails
   * the run: mz_schedule() still returns its future, which resolves with
   * that code when it is an MZ_E* code, else MZ_EPOLICY, and a message
   * naming the policy and the value; no node of the run starts (they are
   * canceled, so what they write reads back as MZ_ECANCELED). */
  int (*plan)(void *state, const mz_sched *s, mz_task *const tasks[], size_t n);

  /* Choose a queue for t.  Required unless plan places every node.
   * Thread: any runtime thread (the scheduling thread, a CPU worker, a
   * device's submission thread, a completion callback's thread), possibly
   * several at once for different tasks: guard your state.
   * Locks: no runtime lock held.  Ownership: t is borrowed for the call.
   * ready is true when every predecessor has finished; when false some are
   * only submitted (the node could follow them on their queue).  Return a
   * queue number or MZ_POLICY_DEFER (only when !ready). */
  int (*select)(void *state, const mz_sched *s, mz_task *t, bool ready);

  /* A node finished on queue q after ns nanoseconds of execution.
   * Optional.  Thread: any runtime thread, as select.  Locks: none.
   * Ownership: t is borrowed for the call. */
  void (*done)(void *state, const mz_sched *s, const mz_task *t, unsigned q, uint64_t ns);

  /* --- ABI 2 --- */

  /* Order queue q.  Optional.  With pick, a node of this policy's runs
   * that is placed on a queue (by select or plan) waits until every
   * predecessor has finished, then joins q's pending list, in arrival
   * order; whenever q has a free slot (q holds one node submitted and
   * unfinished where its device runs nodes on the thread that ends them,
   * such as a CPU worker; two behind a submission thread; eight where the
   * device has a copy engine, whose copies start at submission), the
   * runtime calls pick with the oldest pending nodes (all of them, up to
   * MZ_POLICY_PICK_MAX), in arrival order, and submits the node at the
   * returned index: a list of thousands of ready nodes costs each pick
   * no more than that many.  Every node passes through pick, also one
   * that finds q idle (then n may be 1).  Without pick, a placed node is
   * submitted at once and q runs nodes in placement order.
   * Thread: any runtime thread, as select; pick calls for one queue never
   * overlap, calls for different queues may.
   * Locks: q's pending lock (a spin lock of the runtime's) is held: keep
   * pick short, and call nothing that may block; the mz_sched_ and
   * mz_task_ queries below are fine.
   * Ownership: pending[] and its tasks are borrowed for the call; all are
   * ready, placed on q, and of runs of this policy.  When runs of
   * different policies share q, pick is asked only while every node it
   * would be shown is of its policy; otherwise they leave in arrival
   * order.
   * Returns an index below n.  Any other value fails pending[0] with
   * MZ_EPOLICY (its dependents are canceled) and the runtime asks again. */
  unsigned (*pick)(void *state, const mz_sched *s, unsigned q, mz_task *const pending[], unsigned n);
};

/* Register a policy on rt under ops->name.  ops must outlive the runtime
 * (a const table does).  ops->abi says which fields it has: from
 * MZ_POLICY_ABI_MIN to MZ_POLICY_ABI.  Errors: MZ_EINVAL (NULL, an abi
 * outside that range, no name, no select and no plan), MZ_ESTATE (the
 * name is taken); each with a message (mz_runtime_last_error). */
int mz_policy_register(mz_runtime *rt, const struct mz_policy_ops *ops) MZ_WUR;

/* The registered policies' names: the i-th, or NULL past the end. */
const char *mz_policy_name(const mz_runtime *rt, unsigned i);

/* --- What a policy may ask.  All calls are cheap and lock-free. --- */

unsigned mz_sched_queue_count(const mz_sched *s);
/* The device (index in the runtime) of queue q. */
unsigned mz_sched_queue_device(const mz_sched *s, unsigned q);
/* Nodes submitted to q and not yet finished. */
unsigned mz_sched_queue_backlog(const mz_sched *s, unsigned q);
/* The queue whose CPU worker is calling (select runs there when that
 * worker's node finished and made this one ready), or -1 from any other
 * thread.  Choosing it when it is idle hands the node straight to the
 * worker that is already running, with no wake-up. */
int mz_sched_current_queue(const mz_sched *s);
unsigned mz_sched_device_count(const mz_sched *s);
/* The device's kind (an mz_device_kind) and whether it is dead. */
int mz_sched_device_kind(const mz_sched *s, unsigned dev);
bool mz_sched_device_dead(const mz_sched *s, unsigned dev);
/* The host's CPU cores one node on dev keeps busy (mz_device_info's
 * host_cores): 0 when dev has processors of its own; else dev shares the
 * host's cores with every other device that says so.  The shipped cost
 * policies (heft, dmda, dmdas) take a device with more than one (PoCL's
 * CPU device) to hold all of the host's cores while one of its nodes
 * runs: such a node starts once the queues of every device sharing the
 * cores are free, and they wait for it, so the device adds no capacity of
 * its own to the CPU's queues.  0 for a device out of range. */
unsigned mz_sched_device_host_cores(const mz_sched *s, unsigned dev);

/* Whether queue q's device can run t (has an implementation, is alive). */
bool mz_task_can_run(const mz_sched *s, const mz_task *t, unsigned q);
/* The kernel's name ("host", "partition", "unpartition" for those). */
const char *mz_task_name(const mz_task *t);
/* A number unique within the run, in build order. */
uint64_t mz_task_id(const mz_task *t);
/* Bytes of all buffer arguments. */
size_t mz_task_bytes(const mz_task *t);
/* Bytes of t's buffer arguments that already have a valid copy in the
 * memory of queue q's device (no transfer needed there). */
size_t mz_task_bytes_on(const mz_sched *s, const mz_task *t, unsigned q);
/* Predecessors: of this run, and of runs still in flight that it waits
 * for (through buffer hazards); finished ones are left out when the run
 * is scheduled. */
unsigned mz_task_pred_count(const mz_task *t);
mz_task *mz_task_pred(const mz_task *t, unsigned i);
/* The queue a predecessor was placed on, or -1 if not placed yet. */
int mz_task_queue(const mz_task *t);
/* Whether t has finished (successfully or not). */
bool mz_task_finished(const mz_task *t);
/* The queue t can follow its predecessors onto, or -1: the queue where
 * every unfinished predecessor of t is (at least one, or none when prefer
 * is a queue and t is ready), which holds nothing but them (its backlog is
 * their number) and whose device can run t.  Queued there, t runs right
 * after them on the same worker or device, with no wake-up and its inputs
 * in place.  prefer: the queue to test when t has no unfinished
 * predecessor (for example the last predecessor's), or -1.  A snapshot:
 * predecessors may finish meanwhile, which only makes the answer safer. */
int mz_task_follow_queue(const mz_sched *s, const mz_task *t, int prefer);
/* Fix t's queue (from plan).  Returns MZ_OK or MZ_ERANGE. */
int mz_task_set_queue(const mz_sched *s, mz_task *t, unsigned q);
/* A per-task word the policy may use freely: its run's, zero when the run
 * starts (a predecessor of another run gives that run's word); the pointer
 * is valid while t's run is in flight (ask again in a later run).  Never
 * NULL (out of memory aborts). */
uintptr_t *mz_task_policy_data(mz_task *t);
/* Plan order: t is placed on its queue only once prev has been (or has
 * finished without reaching one), so that with both on one in-order queue
 * t runs after prev even when t is ready first, as a plan (HEFT's, with
 * its insertion slots) wants.  Only from plan, at most one prev per task
 * and one task after each prev, both of the run.  The order must agree
 * with the run's edges: when it makes a cycle with them, the run fails
 * with MZ_EPOLICY (no node runs) instead of waiting forever.  A prev that
 * is late holds t back: a policy should order only nodes it means to run
 * in that order.  Returns MZ_OK, MZ_EINVAL (NULL, t == prev) or MZ_ESTATE
 * (not in plan, another run's task, or a second order for either), or
 * MZ_ENOMEM (the order is kept apart from the task, made on first use). */
int mz_task_set_after(const mz_sched *s, mz_task *t, mz_task *prev);
/* Say when the policy expects t to start and finish, in the runtime clock
 * (mz_sched_now_ns), from plan or select.  Only reported: observers get
 * it in mz_node_record.planned_start_ns and planned_end_ns, and the trace
 * draws it beside the real times, so that a hole in a Gantt chart has a
 * reason.  The last call wins; a run's tasks start with none.  Returns
 * MZ_OK, MZ_EINVAL when end_ns < start_ns, or MZ_ENOMEM (the times are
 * kept apart from the task, made on first use). */
int mz_task_set_expected_times(const mz_sched *s, mz_task *t, uint64_t start_ns, uint64_t end_ns);

/* --- Costs, for cost-based policies (src/perfmodel.c).  Cheap and
 * lock-free except where said; callable from plan and select. ---
 *
 * Times are in nanoseconds of the runtime clock: the virtual clock when the
 * runtime has simulated devices, else the monotonic clock.  Expected
 * execution times come, in this order, from the kernel's cost formula on
 * devices that model costs (the simulator: see mz_cost_spec), then from
 * the perf model: the history of measured times per kernel name, device
 * name and size (buffer footprint, in quarter-octave buckets), with a
 * least-squares fit in size for sizes never seen.  The history is fed
 * by every successful node, kept across runs on disk, and is "unsure"
 * (unknown) until a bucket has MZ_PERFMODEL_MIN_SAMPLES samples or two
 * buckets allow a fit. */

#define MZ_PERFMODEL_MIN_SAMPLES 3

/* The runtime clock now. */
uint64_t mz_sched_now_ns(const mz_sched *s);

/* The expected execution time of t on queue q (without transfers), or a
 * negative value when unknown: a cost-based policy should explore then
 * (run it there to calibrate the model). */
double mz_task_expected_ns(const mz_sched *s, const mz_task *t, unsigned q);

/* The expected time to bring the inputs of t that have no valid copy in
 * the memory of queue q's device there, from where a valid copy is now.
 * Takes each input buffer's lock briefly. */
double mz_task_transfer_ns(const mz_sched *s, const mz_task *t, unsigned q);

/* The same for every queue at once: out[q] for q < mz_sched_queue_count()
 * (cheaper than one call per queue on large platforms). */
void mz_task_transfer_ns_all(const mz_sched *s, const mz_task *t, double *out);

/* The expected time to move bytes from queue a's memory to queue b's
 * memory: 0 when they share it. */
double mz_sched_link_ns(const mz_sched *s, unsigned a, unsigned b, size_t bytes);

/* Make the transfer costs above measured ones: for every device class
 * whose backend does not model its links, load the per-link latency and
 * bandwidth saved by an earlier runtime (beside the perf models), or time
 * a small and a large copy each way between host memory and one device of
 * the class and save the fit, atomically.  Until this is called, and where
 * a measurement fails, a default link stands in.  Returns at once after the
 * first call.  Thread: one that may block and call device memory
 * operations: plan, init, or the application's (never select or done,
 * which may run in a completion callback).  Locks: takes a leaf lock of
 * the runtime's while measuring.  Returns MZ_OK or MZ_ENOMEM. */
int mz_sched_measure_links(const mz_sched *s);

/* Bytes that the edge from predecessor i carries: the sizes of t's input
 * buffers that predecessor i writes (0 for an ordering-only edge). */
size_t mz_task_edge_bytes(const mz_task *t, unsigned i);

/* When queue q is expected to have finished the work already submitted
 * to it, in the runtime clock, never earlier than now.  Exact on simulated
 * devices; elsewhere the backlog times recent execution times on q. */
uint64_t mz_sched_queue_ready_ns(const mz_sched *s, unsigned q);

/* The same for every queue at once: out[q] for q < mz_sched_queue_count(). */
void mz_sched_queue_ready_ns_all(const mz_sched *s, uint64_t *out);

/* Whether queue q's device makes the input copies of its nodes on a copy
 * engine of its own (a CUDA copy stream, a second OpenCL queue, a
 * simulated device with copy=1): they start when the node is submitted and
 * overlap the kernels before it on q, so a node's start there is the later
 * of mz_sched_queue_ready_ns(q) and the end of its copies, which follow
 * mz_sched_copy_ready_ns(q).  Without one the copies run on q before the
 * node and lengthen its slot. */
bool mz_sched_queue_copy_engine(const mz_sched *s, unsigned q);
/* When the copy engine of queue q's device is expected to have made the
 * copies already given to it, in the runtime clock, never earlier than now
 * (exact on simulated devices; now where the backend does not know).
 * Without a copy engine: mz_sched_queue_ready_ns(s, q). */
uint64_t mz_sched_copy_ready_ns(const mz_sched *s, unsigned q);
/* How far apart the workers of queues a and b are: 0 for the same queue,
 * then growing with the hwloc distance between their cores for CPU
 * queues; 1 between other queues of one device, 8 across devices. */
unsigned mz_sched_queue_distance(const mz_sched *s, unsigned a, unsigned b);

/* A number shared by devices of the same model (same name and backend):
 * their expected times are equal, so a policy may compute them once per
 * class.  Classes are numbered from 0 in device order. */
unsigned mz_sched_device_class(const mz_sched *s, unsigned dev);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
