/* maize over MPI: one program on every rank (SPMD), as StarPU-MPI does.
 *
 * Every rank runs the same program: it creates a runtime, an mz_mpi
 * context on it, the same buffers registered in the same order, and builds
 * the same distributed graph (mz_dgraph) with the same calls.  Each
 * registered buffer has an owner rank.  A task runs on the rank that owns
 * the first buffer it writes (owner computes), or on the rank it is pinned
 * to.  A rank builds, in its local mz_graph, only the tasks it runs; where
 * a task reads a buffer whose latest value is on another rank, the
 * producing rank sends it (MPI_Isend, as soon as the producer ends) and
 * this rank receives it (MPI_Irecv, before the task), so the transfer
 * overlaps the other work.  A value received once is kept until the
 * buffer is written again (no second transfer).  Inside a rank everything
 * is as in one process: devices, policies, coherence, futures.
 *
 * Transfers are folded into the tasks where the runtime's only device is
 * its CPU and the task's kernel has a CPU function (and no parameter named
 * mz_mpi_task, the name of the one maize adds to it): the task's remote
 * inputs gate it (it becomes ready when their messages are in, and reads
 * them from the transfer's own memory, where they landed), and its outputs
 * that other ranks read are copied and sent by the task itself when its
 * function returns (up to 64 KiB each), so a step of a distributed graph
 * is one node per task, as in one process.  Otherwise, or with
 * MZ_MPI_FOLD=0, a transfer is a node of the local graph: a send node
 * after the producer (it holds the buffer until the message is out) and a
 * receive node that copies the message into the buffer; a received value
 * that a task updates in place (inout), or that a task without a CPU
 * function reads, also goes through a receive node.  Folded or not, the
 * messages are the same.  A buffer registered on a rank that does not own
 * it holds the values it received only where a receive node copied them.
 *
 * Progress.  Every receive of up to 64 KiB is posted ahead, into memory
 * of its own (staging), so a message that comes early is taken at once;
 * the receive node copies it into the buffer when it runs.  With
 * MPI_THREAD_MULTIPLE a graph has the first MZ_MPI_RECV_WINDOW (default
 * 8) of them in plan order posted when the run starts, and each one that
 * completes has the next posted at the next poll (MPI_Irecv): a few
 * requests in flight, reused, where one per receive of the run cost a
 * cold request object each.  A message that comes before its receive is
 * posted waits in MPI, at the cost of a copy.  Without it, every such
 * receive is posted when the run starts, one persistent request each
 * (MPI_Recv_init at the graph's first run, MPI_Start at each), freed with
 * the graph.
 * A larger receive is posted by its node when the node starts (it then
 * holds the buffer), straight into the buffer: no staging memory, and the
 * sender's message (too large to go eagerly) waits for it.  A send is
 * posted by the worker that runs its node (MPI_Isend) and tested at once.
 * With MPI_THREAD_MULTIPLE, CPU workers with nothing to run test the
 * requests while they spin, before parking (the oldest with MPI_Test at
 * each poll, the next few with MPI_Testsome every fourth): a receive that
 * completes ends its node there, and the successor runs on that worker.
 * A worker polls on past the runtime's spin time (MZ_SPIN_US) while a
 * node of this rank waits on a message, messages come and go less than
 * ten times $MZ_MPI_SPIN_US apart on average, and the last one is younger
 * than twice that mean gap (at least $MZ_MPI_SPIN_US), yielding the CPU
 * between polls once past $MZ_MPI_SPIN_US: the next message of a stencil's
 * fine or medium steps then finds it awake, where long tasks' workers
 * park as before.
 * One communication thread per context (named mz-mpi, as top -H shows
 * it) makes the collectives (those of
 * mz_dgraph_wait only with MZ_MPI_SELF=0 or without MPI_THREAD_MULTIPLE:
 * see "Self-driven waits") and tests the requests only when a node waits on one
 * and no worker tests (a worker parked): it then polls without pausing
 * (yielding the CPU between polls) for $MZ_MPI_SPIN_US microseconds
 * (default 200) after the last completion, then every 50 us; otherwise it
 * sleeps, but for a test every 1 ms while a node waits (the workers
 * may all be busy; none while a worker spins, which tests) and every 2 ms
 * while only requests nobody waits on are in flight, each up to 8 times
 * as far apart while idle workers test the requests in between.  Without MPI_THREAD_MULTIPLE (MPI_THREAD_SERIALIZED at
 * least), or with MZ_MPI_THREAD=serialized, the thread makes every MPI
 * call and polls while requests are in flight.  No worker blocks in MPI.
 *
 * Self-driven waits.  mpirun binds each rank to one core by default, so a
 * rank's CPU worker, its communication thread and the user's thread share
 * it, and each hand-off between them (a wake-up, then the core given up)
 * cost 8-56 us on a loaded machine.  mz_dgraph_run_wait() makes none:
 * where a CPU worker sleeps, the calling thread takes its place before the
 * run starts (the worker stays asleep and the run's nodes wake nobody),
 * runs this rank's part, tests the requests as an idle worker does (its
 * successor runs next, here), and gives the worker back once its run
 * ended; past the runtime's spin time with no message in sight it gives
 * it back early and waits as mz_dgraph_wait does.  mz_dgraph_wait()
 * itself makes the status exchange on the calling thread (MPI_Iallgather,
 * tested there, yielding the CPU between tests for $MZ_MPI_SPIN_US, then
 * every 50 us), not through the communication thread, and a run's start
 * tests the last run's requests itself before it asks that thread.  All
 * of it needs MPI_THREAD_MULTIPLE; MZ_MPI_SELF=0 turns it off (the
 * communication thread makes the exchange, and mz_dgraph_run_wait runs
 * and waits as the two calls do).
 *
 * Binding.  Ranks that mpirun leaves unbound (it does when they
 * outnumber the cores) pin their CPU workers to their own share of the
 * machine's cores by local rank ($OMPI_COMM_WORLD_LOCAL_RANK of
 * $OMPI_COMM_WORLD_LOCAL_SIZE), one worker per core of the share by
 * default, instead of every rank on cores 0, 1, ... (MZ_BIND=none leaves
 * them unpinned).
 *
 * Failures cross ranks: a transfer whose producer failed (or was canceled)
 * sends an empty message instead of the data, and on the receiving rank
 * the receive node, or the tasks it gates, fail with MZ_ECANCELED,
 * canceling their dependents there; a receive that cannot run still takes
 * its message, so the sender never waits.  Every
 * rank's future resolves; mz_dgraph_wait() returns the same status on
 * every rank.  A rank that dies takes the job down (mpirun aborts it: MPI
 * cannot survive a lost rank).
 *
 * A distributed graph is built once and may be run many times: the
 * communication plan (which buffer goes from which rank to which, with
 * which tag) is computed while building; each run replays it.  At the end
 * of each run every buffer's latest value is on its owner again (a buffer
 * a pinned task wrote elsewhere is sent home), so the owner can read it
 * with mz_buffer_read() after mz_dgraph_wait().
 *
 * Threads: the calls of this header are made by user threads, one at a
 * time per context (as a program's main thread makes them); the runs they
 * start go on concurrently with them.  With MPI_THREAD_MULTIPLE,
 * mz_dgraph_wait and mz_dgraph_run_wait make MPI calls on the calling
 * thread (see "Self-driven waits").
 *
 * Outside mpirun (no MPI launcher in the environment, MPI not initialized
 * by the program), mz_mpi_create() gives a context of one rank that never
 * calls MPI, and everything runs locally.
 *
 * This header exists only when maize was built with MPI (the meson
 * feature "mpi"); maize.h does not include it. */
#ifndef MAIZE_MPI_H
#define MAIZE_MPI_H

#include "future.h"
#include "graph.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

typedef struct mz_mpi mz_mpi;         /* the distributed context of one runtime */
typedef struct mz_dgraph mz_dgraph;   /* a graph built the same on every rank */

/* Create the context on rt.  Initializes MPI with MPI_THREAD_MULTIPLE
 * (MPI_THREAD_SERIALIZED with MZ_MPI_THREAD=serialized) when the program
 * has not, and then finalizes it in mz_mpi_destroy.  A program that
 * initialized MPI itself finalizes it itself, after mz_mpi_destroy(), and
 * must have been given MPI_THREAD_SERIALIZED at least (else MZ_ENOTSUP),
 * since maize's own threads make its MPI calls: with
 * MPI_THREAD_MULTIPLE, CPU workers, the communication thread and the
 * thread in mz_dgraph_wait or mz_dgraph_run_wait; with
 * less, the communication thread alone, and then the program's own MPI
 * calls must not overlap it, so it makes none while the context lives.
 * Works on a duplicate of MPI_COMM_WORLD.  Outside mpirun (see above)
 * the context has one rank and MPI is never called.  Collective: every
 * rank calls it.  Thread: a user thread.  On success *out is freed by
 * mz_mpi_destroy(), which must come before mz_runtime_destroy(rt).
 * Environment: MZ_MPI_SPIN_US (0 to 10000000), MZ_MPI_FOLD (0 or 1,
 * default 1), MZ_MPI_THREAD (multiple, the default, or serialized),
 * MZ_MPI_STAGING_MAX (bytes; see mz_dgraph_staging), MZ_MPI_RECV_WINDOW
 * (1 to 1000000 receives, default 8; see "Progress"), MZ_MPI_SELF (0 or
 * 1, default 1; see "Self-driven waits").
 * Errors: MZ_EINVAL (NULL arguments, rt not live, a bad environment
 * value), MZ_ENOTSUP (MPI's thread level), MZ_ESTATE (MPI finalized
 * already), MZ_ENOMEM, MZ_EIO (MPI failed; message in
 * mz_runtime_last_error()). */
int mz_mpi_create(mz_runtime *rt, mz_mpi **out) MZ_WUR;

/* Stop the communication thread (after the requests in flight complete)
 * and free the context.  Destroy its distributed graphs first, after
 * their runs have been waited for.  Collective when MPI is to be
 * finalized here.  NULL is a no-op. */
void mz_mpi_destroy(mz_mpi *m);

/* This process's rank and the number of ranks (1 outside mpirun);
 * -1 and 0 for NULL. */
int mz_mpi_rank(const mz_mpi *m);
int mz_mpi_size(const mz_mpi *m);

/* Give b an owner rank.  Every rank registers the same buffers (same
 * shapes) in the same order; each has its own local buffer for it: the
 * owner's holds the data (after each run, its latest value), the others'
 * are where receive nodes copy values to (see above).
 * The context holds a reference on b until it is destroyed.  Errors:
 * MZ_EINVAL (NULL, b of another runtime, already registered),
 * MZ_ERANGE (owner not a rank), MZ_ENOTSUP (b over 2 GiB, more than one
 * MPI message; a partitioned buffer or a tile), MZ_ENOMEM. */
int mz_mpi_register(mz_mpi *m, mz_buffer *b, int owner) MZ_WUR;

/* b's owner rank, or MZ_EINVAL when b is not registered. */
int mz_mpi_owner(const mz_mpi *m, const mz_buffer *b);

/* Distributions of tiles over ranks (the owner to register with):
 * tile i of n in contiguous blocks (the first n % nranks blocks one
 * longer), tile i round robin, and tile (i, j) of a matrix of tiles
 * block-cyclic over a p x q grid of ranks ((i % p) * q + j % q).
 * Invalid arguments (n 0, i >= n, nranks, p or q < 1) give MZ_EINVAL. */
int mz_mpi_block(size_t i, size_t n, int nranks);
int mz_mpi_cyclic(size_t i, int nranks);
int mz_mpi_cyclic2d(size_t i, size_t j, int p, int q);

/* Create an empty distributed graph.  Collective (it duplicates the
 * context's communicator, so graphs never mix their messages).  Freed by
 * mz_dgraph_destroy(). */
int mz_dgraph_create(mz_mpi *m, mz_dgraph **out) MZ_WUR;

/* Free the graph; its runs must have been waited for (mz_dgraph_wait).
 * Local: its communicator is freed once the messages queued before are
 * posted.  NULL is a no-op. */
void mz_dgraph_destroy(mz_dgraph *dg);

/* The rank-local graph: the tasks this rank runs and its transfers.  For
 * mz_graph_dump_dot() and statistics; add no nodes to it. */
mz_graph *mz_dgraph_local(mz_dgraph *dg);

/* One argument of mz_dgraph_apply(): a registered buffer, or a scalar. */
typedef struct mz_darg {
  mz_buffer *buf;   /* a registered buffer; NULL for a scalar */
  mz_dtype dtype;   /* the scalar's type */
  mz_arg value;     /* the scalar's value */
} mz_darg;

/* Run kernel k on args (the caller's arguments in the kernel's parameter
 * order, as for mz_apply; outlike parameters are not supported).
 * rank: the rank that runs it, or MZ_MPI_OWNER for the owner of the first
 * buffer it writes (of the first buffer it reads when it writes none).
 * Every rank makes the same call.  Returns the local apply op on the rank
 * that runs it (to unzip, or NULL), NULL elsewhere; check errors with
 * mz_dgraph_status().  Errors (sticky, as a graph's): MZ_EINVAL (bad
 * arguments, an unregistered buffer, a buffer of another runtime),
 * MZ_ERANGE (rank), MZ_ENOTSUP (outlike), MZ_ESTATE (the graph has run:
 * it is frozen then), and the local mz_apply()'s errors. */
#define MZ_MPI_OWNER (-1)
mz_op *mz_dgraph_apply(mz_dgraph *dg, mz_kernel *k, unsigned n, const mz_darg args[], const mz_launch *launch,
                       int rank);

/* The sticky error (MZ_OK or the first failure) and its message. */
int mz_dgraph_status(const mz_dgraph *dg);
const char *mz_dgraph_message(const mz_dgraph *dg);

/* Transfers this rank posts per run: sends and receives (for statistics
 * and tests; the plan is fixed once the graph has run). */
void mz_dgraph_transfers(const mz_dgraph *dg, size_t *sends, size_t *recvs);

/* Staging memory this rank holds for dg's transfers, in bytes.  Each
 * receive of up to 64 KiB keeps its own (its message may come as soon as
 * the run starts); a larger one lands in the buffer and keeps none:
 * recv_bytes is fixed by the plan, at most 64 KiB per receive.  The values
 * a task sends from its completion (up to 64 KiB each) are copied into
 * blocks shared by all such sends of the graph (a power-of-two size class
 * each), taken when the task ends and reused once the message is out:
 * send_bytes is what was in flight at once (at most, rounded up, what one
 * block per such send would hold) and grows only while the graph runs.
 * $MZ_MPI_STAGING_MAX (bytes, read by mz_mpi_create; default no limit)
 * caps send_bytes: a task whose value would need a new block past it
 * fails with MZ_ENOMEM (as when the allocation fails), and its readers on
 * other ranks are canceled; 0 makes every such send fail (a test of that
 * path).  NULL dg: both 0. */
void mz_dgraph_staging(const mz_dgraph *dg, size_t *send_bytes, size_t *recv_bytes);

/* Run the whole graph on this rank (its tasks and transfers), with the
 * named policy (NULL: the runtime's default), and return this rank's
 * future.  Every rank calls it for every run.  The first run freezes the
 * graph.  A run waits for the previous run of the same graph on this rank
 * (mz_graph_run).  Errors: the sticky error, and mz_graph_run()'s; on an
 * error this rank's transfers of the run are still completed (empty
 * messages), so the other ranks' runs resolve, with MZ_ECANCELED where
 * they needed this rank's data. */
int mz_dgraph_run(mz_dgraph *dg, const char *policy, mz_future **out) MZ_WUR;

/* Collective wait: wait for this rank's future f of the graph's last run
 * (NULL when mz_dgraph_run() failed here: that failure is this rank's
 * status), then agree with the other ranks.  Returns the same status on
 * every rank: MZ_OK when every rank's run succeeded, else the first
 * (lowest rank) error that is not MZ_ECANCELED, else MZ_ECANCELED.  f is
 * not destroyed.  Every rank calls it once per run.  Thread: a user
 * thread (MZ_EDEADLK on a runtime thread). */
int mz_dgraph_wait(mz_dgraph *dg, mz_future *f);

/* mz_dgraph_run() and mz_dgraph_wait() in one call, with this thread
 * running this rank's part of the run (see "Self-driven waits" above):
 * where MPI gives MPI_THREAD_MULTIPLE and a CPU worker of the runtime
 * sleeps, this thread takes that worker's place before the run starts (the
 * worker is not woken), runs the run's CPU nodes and tests the MPI
 * requests as the worker would, then makes the status exchange itself.
 * Otherwise (a busy worker, MZ_MPI_SELF=0, less than
 * MPI_THREAD_MULTIPLE, or outside mpirun) it runs and waits as the two
 * calls do.  Returns what mz_dgraph_wait returns (the same status on
 * every rank; a failure to start the run here is this rank's status).
 * Every rank calls it (or the two calls) once per run.  Thread: a user
 * thread (MZ_EDEADLK on a runtime thread); NULL dg: MZ_EINVAL. */
int mz_dgraph_run_wait(mz_dgraph *dg, const char *policy) MZ_WUR;

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
