/* maize: building operation graphs.
 *
 * A graph is built from a few combinators.  Each returns a node (an op) that
 * belongs to the graph; ops are never freed one by one.  Builders never
 * crash on bad input: the first failure is recorded on the graph (a sticky
 * error, as cairo does), the builder returns an inert error op, later
 * builders given an error op return it too, and mz_schedule() reports the
 * error with its message.  So a chain of builder calls needs one check.
 *
 * Evaluation is lazy: mz_schedule() runs only what its root needs.  Edges
 * come from the combinators and from buffer hazards, in build order: a node
 * that reads a buffer depends on the last earlier node that writes it
 * (read-after-write, and that writer is run if needed); among the nodes that
 * run, writers also wait for earlier readers (write-after-read) and writers
 * (write-after-write).  Hazards also order runs: a run that uses a buffer
 * waits for the earlier runs' nodes that use it.
 *
 * A graph is built once and may run many times: mz_graph_run() (future.h)
 * runs everything a root needs again, on the buffers' current contents,
 * under any policy and on any subset of the devices.  Builders and
 * scheduling may be called from several threads on one graph (they take
 * the graph's lock). */
#ifndef MAIZE_GRAPH_H
#define MAIZE_GRAPH_H

#include <stdio.h>

#include "kernel.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

/* Create an empty graph on rt.  Freed by mz_graph_destroy(). */
int mz_graph_create(mz_runtime *rt, mz_graph **out) MZ_WUR;

/* Free the graph.  Runs scheduled from it keep what they need alive and
 * finish normally.  NULL is a no-op.  While such runs are in flight the
 * handle's memory lives on: builders on it return NULL, mz_schedule()
 * returns MZ_EINVAL, mz_graph_message() says the graph is not live, and a
 * second destroy is a no-op (see README.md, "Handles that cannot be
 * checked", for a handle whose memory is gone). */
void mz_graph_destroy(mz_graph *g);

/* The sticky error: MZ_OK, or the first builder error.  The message names
 * the builder and the cause; never NULL.  On a NULL, destroyed or
 * wrong-kind handle: MZ_EINVAL and a message saying so. */
int mz_graph_status(const mz_graph *g);
const char *mz_graph_message(const mz_graph *g);

/* The number of nodes built so far (an apply's result elements count
 * once they are made: mz_apply). */
size_t mz_graph_node_count(const mz_graph *g);

/* A buffer as a value: its contents at this point of the build, that is,
 * after the last task built so far in this graph that writes it (so
 * scheduling the value runs that task).  The graph holds a reference on
 * the buffer until it is destroyed. */
mz_op *mz_value(mz_graph *g, mz_buffer *b);

/* Scalar values.  A scalar of the same type and bits as the last scalar
 * built in the graph is that same node (a scalar is only its value, and a
 * row of tasks often takes one). */
mz_op *mz_scalar(mz_graph *g, mz_dtype t, const void *value);
mz_op *mz_i32(mz_graph *g, int32_t v);
mz_op *mz_u32(mz_graph *g, uint32_t v);
mz_op *mz_i64(mz_graph *g, int64_t v);
mz_op *mz_u64(mz_graph *g, uint64_t v);
mz_op *mz_f32(mz_graph *g, float v);
mz_op *mz_f64(mz_graph *g, double v);

/* A tuple of n ops (n >= 1).  ops is copied. */
mz_op *mz_zip(mz_graph *g, unsigned n, mz_op *const ops[]);

/* Element i of a tuple (a zip, a join, an apply's result, a partition). */
mz_op *mz_unzip(mz_graph *g, mz_op *tuple, unsigned i);

/* Launch dimensions for mz_apply().  NULL there takes a default: the shape
 * of the first written buffer (or the first buffer), with the device's
 * preferred work-group size. */
typedef struct mz_launch {
  unsigned ndim;     /* 1..3 */
  size_t global[3];  /* work items per dimension */
  size_t local[3];   /* work-group (block) size; 0: the device chooses */
} mz_launch;

/* Run kernel k on args, a zip of the caller's arguments in the kernel's
 * parameter order (computed and outlike parameters left out; a single
 * argument may be given without a zip).  The result is a tuple with one
 * element per parameter (computed ones included), holding the arguments as
 * they are after the call: unzip the ones you need (a buffer's element is
 * its value after the call; a scalar's is a scalar node of the value the
 * kernel gets, in the parameter's type; each made when asked for, as the
 * apply keeps no array of them: asked for again, a buffer's element is the
 * same node while the apply is still the buffer's last writer in the
 * graph, a scalar's while it is the graph's last scalar, else an equal
 * one, which schedules and reads alike).  Checked here, as the
 * graph's sticky error: a wrong argument count, a NULL, destroyed or
 * foreign kernel or op, and one buffer passed twice where either use
 * writes it (in and out, in and inout, out and out) give MZ_EINVAL; a
 * buffer for a scalar, a scalar for a buffer, a wrong element type or a
 * float scalar for an integer parameter give MZ_ESHAPE, and so do a
 * scalar (given, or computed from a shape) that does not fit the
 * parameter's type and a buffer with other dims than a "[N]" parameter
 * says.  launch may be NULL and is copied; its global and local sizes must
 * be 1 to 2^32-1 (local 0: the device chooses) with at most 2^36 work
 * items, else MZ_EINVAL. */
mz_op *mz_apply(mz_graph *g, mz_kernel *k, mz_op *args, const mz_launch *launch);

/* Several ops that complete together: a tuple of them, done when all are. */
mz_op *mz_join(mz_graph *g, unsigned n, mz_op *const ops[]);

/* A C function run on the host after deps (an op, a tuple, or NULL for no
 * dependency).  Every buffer in deps is brought up to date in host memory
 * and passed in call->args, in order; the function may read and write them.
 * The result is deps as they are after the call (an empty tuple when deps
 * is NULL), so further ops can depend on it. */
mz_op *mz_host(mz_graph *g, mz_cpu_fn fn, void *user, mz_op *deps);
/* (A task takes at most 65,535 buffers and scalars: more in deps is
 * MZ_ERANGE on the graph.) */

/* mz_host() with a name (copied; at most 255 bytes, else MZ_EINVAL on the
 * graph): the node's label in traces, timings and DOT, and the key of its
 * performance model, so that host stages of different lengths are
 * predicted apart (unnamed host nodes share the model "host").  NULL or ""
 * is mz_host(). */
mz_op *mz_host_named(mz_graph *g, const char *name, mz_cpu_fn fn, void *user, mz_op *deps);

/* Split the buffer value v into n disjoint tiles along its slowest
 * dimension (dims[ndim-1]); the first tiles get one more row when it does
 * not divide.  The result is a tuple of n tile values; ops on different
 * tiles may run in parallel and on different devices.  While partitioned,
 * the whole buffer must not be used by other ops of the graph (MZ_ESTATE).
 * Elsewhere (mz_buffer_read and mz_buffer_write, ops of other graphs, a
 * later partition) the buffer and its tiles are the same memory: a use of
 * the buffer waits for the runs that write its tiles and sees their
 * latest data, wherever it is (also tiles never put back with
 * mz_unpartition), and tiles used after the buffer was written see that. */
/* n is 1 to the rows of that dimension, and at most 65,534 (else
 * MZ_ERANGE on the graph). */
mz_op *mz_partition(mz_graph *g, mz_op *v, unsigned n);

/* Put tiles back: tiles is a tuple whose elements are the tiles (or ops
 * whose results are the tiles) of one partition, every tile exactly once.
 * The result is the whole buffer's value after every op on its tiles. */
mz_op *mz_unpartition(mz_graph *g, mz_op *tiles);

/* Add an explicit edge: op (a task, or a value a task produced) runs after
 * every task that after needs.  op must not be scheduled yet.  Such edges
 * can close a cycle, which mz_schedule() rejects with MZ_ECYCLE.  Returns
 * MZ_OK or the graph's sticky error. */
int mz_depend(mz_graph *g, mz_op *op, mz_op *after);

/* Write g as a Graphviz DOT digraph ("dot -Tsvg" draws it), as Taskflow's
 * dump and StarPU's dag.dot do.  Nodes are the tasks (apply, host,
 * partition, unpartition), labelled with their kernel's name and node id
 * and filled with one colour per kernel.  Edges come in three kinds: data
 * (solid: the task uses a value the other produced), hazard (dashed red,
 * labelled RAW, WAR or WAW: the orderings of buffer accesses in build
 * order, as mz_schedule() derives them when every task runs; drawn only
 * where no data or explicit edge already orders the pair) and explicit
 * (dotted blue: mz_depend()).  A task that ran says the device (index,
 * kind, name) and queue it ran on in its last run; a failed one is
 * outlined in red with its error name; one never scheduled is grey.  A
 * graph with a sticky error is drawn as built, the error in its label.
 *
 * Waits first for the runs of g in flight to end, as mz_graph_run() does,
 * so a dump after mz_future_wait() shows that run's placements.  On a
 * runtime thread (a host task, a future callback), where waiting could
 * deadlock, it does not wait: with a run of g in flight, placements are
 * left out and the graph's label says so.  Any thread; takes g's lock
 * while it reads the graph (builders on other threads wait meanwhile),
 * never while writing to f.  f is not closed.
 * Returns MZ_OK; MZ_EINVAL for a NULL, destroyed or wrong-kind graph or a
 * NULL f; MZ_ENOMEM; MZ_EIO when writing fails (part of the text may have
 * been written).  Messages in mz_runtime_last_error(). */
int mz_graph_dump_dot(mz_graph *g, FILE *f);

/* The same, into the file at path (created or truncated).  MZ_EIO when it
 * cannot be opened or written (a partial file may be left). */
int mz_graph_dump_dot_file(mz_graph *g, const char *path);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
