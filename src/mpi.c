/* maize over MPI (include/maize/mpi.h): the SPMD model of StarPU-MPI on
 * the public graph API, plus two core hooks: struct mz__async_ops for the
 * send and receive nodes, which end when their MPI request completes, and
 * struct mz__idle_ops, through which idle CPU workers test the requests.
 *
 * Requests.  Every request in flight is in the context's pending set
 * (guarded by plock), which one thread at a time tests (poll_pending:
 * MPI_Test of the oldest, MPI_Testsome of the next few) and completes
 * outside the lock: a send or receive node ends then, which releases its
 * successors as a device's completion does.  The receives of up to
 * MZ__MPI_FOLD_MAX bytes are posted ahead, each into its transfer's own
 * staging memory: the first few in plan order when the run starts, the
 * next each time one completes (start_transfers), so a message that comes
 * early is taken at once; the receive node copies it into the buffer when it
 * runs (at once when the message is in, else when it completes).  A
 * larger receive (direct) has no staging: its node posts it into the
 * buffer when it starts, and a direct receive whose node will not run
 * takes its message into a block it frees (drain), so that every message
 * of a run is matched in that run.  A send is
 * posted by the worker that runs its node, and tested at once (small
 * messages go out eagerly: the node then ends on that worker).
 *
 * Folded transfers.  On a runtime whose only device is the CPU, a task
 * whose kernel has a CPU function is built with that kernel's wrapper (one
 * per kernel: its parameters and a u64, the task's struct dtask), an async
 * kernel whose start calls the user's function.  A remote value it only
 * reads is a folded receive: no node; the task holds a gate
 * (mz__task_ngates) per such transfer, released (mz__task_ungate) once
 * the message is in and the run has started (the graph's early list: the counters
 * are set by mz_graph_run, after the receives were posted), and the
 * wrapper passes the staging memory in place of the buffer.  A value it
 * writes that another rank reads is sent when the user's function returns
 * (struct dtask's out): up to m->direct_max bytes from the buffer (C_DSEND;
 * the task ends once it is out, most often at once), else up to
 * MZ__MPI_FOLD_MAX bytes copied into a staging block first (shared by the
 * graph's folded sends, reused once a message is out: struct sblock; the
 * task ends at once); a larger one, or one with no wrapped producer, gets
 * a send node.  A wrapped task that ends in its start returns
 * MZ__ASYNC_ENDED, and its worker ends it as a CPU function's; a reader
 * that a worker's idle poll releases runs next on that worker
 * (mz__task_ungate_take).  A task that updates a received value in
 * place, or one not wrapped, reads it from the buffer: a receive node
 * copies it there (made when such a reader comes).  The messages are the
 * same either way; a failed or canceled producer sends a mark
 * (task_ended), and a mark cancels the gated readers.
 *
 * Who tests.  With MPI_THREAD_MULTIPLE, CPU workers with nothing to run
 * test the pending set while they spin, before parking: a receive that
 * completes ends its node on that worker, whose successor then runs in
 * the worker's run-next slot, with no wake-up of another thread on the
 * critical path; past the runtime's spin time they keep testing while a
 * node waits and messages were recent (idle_hold).  The communication
 * thread makes the other MPI calls
 * (collectives, communicators) and tests only when someone waits on a
 * request that no worker tests: a worker parked while a node waited, or
 * a user thread waiting; it then polls (yielding the CPU between polls)
 * for $MZ_MPI_SPIN_US after the last completion, then naps between polls.
 * Otherwise it sleeps, but for a test every few milliseconds while
 * requests are pending (progress for large messages and for marks).
 * Without MPI_THREAD_MULTIPLE the communication thread makes every MPI
 * call: the others queue commands to it, and it polls while anything is
 * pending.
 *
 * Self-driven waits (m->self, with MPI_THREAD_MULTIPLE).  A rank bound
 * to one core shares it among its worker, the communication thread and
 * the user's thread, and every hand-off between them costs a wake-up and
 * the core: mz_dgraph_run_wait holds a sleeping CPU worker (the device's
 * hold: its thread is no longer woken for shared nodes) before the run
 * starts, runs the worker's loop on the calling thread (help_held: its
 * idle polls test the requests through the idle hook, as the worker's
 * would) until the run's future resolves, and gives it back; the run's
 * start then wakes neither the worker nor the communication thread.
 * mz_dgraph_wait posts and tests the status exchange on the calling
 * thread (self_collective), and a run's start tests the last run's
 * requests there first (drain).
 *
 * Locks.  m->qlock guards the command queue and the stop flag, and is
 * the communication thread's sleeping lock; m->plock guards the pending
 * set; m->lock guards the registry (buffer to data id).  None is held
 * while a node ends.  A distributed graph's build state is used by the
 * thread that builds it, as a graph's builders are (mz_dgraph calls on
 * one graph are not to be made concurrently).
 *
 * Messages.  Each distributed graph has its own communicator (an
 * MPI_Comm_idup of the context's), and each planned transfer a tag, its
 * index in the plan, the same on every rank since every rank makes the
 * same calls.  A transfer sends exactly one message per run: the data, or
 * an empty message (a mark) when the data will not come (its producer
 * failed).  A run starts only once every request of the graph's last run
 * on this rank has completed, so the messages of one (source, tag,
 * communicator), matched in order, never meet another run's request. */
#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <time.h>

#include "exec.h"
#include "handle.h"
#include "maize/mpi.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_kernel.h"
#include "objects/mz_runtime.h"

/* ---- commands and requests ---- */

enum cmd_kind {
  C_SEND,   /* a send node's data */
  C_FSEND,  /* a task's output, sent from its completion (staged) */
  C_DSEND,  /* a task's small output, sent from its buffer: the task ends once it is out */
  C_RECV,   /* a transfer's message, into its staging memory */
  C_MARK,   /* an empty message: the data will not come */
  C_COLL,   /* the status exchange of mz_dgraph_wait (MPI_Iallgather) */
  C_IDUP,   /* a graph's communicator (MPI_Comm_idup) */
  C_FREE,   /* free a graph's communicator and its persistent requests, after the commands queued before */
};

/* A user thread waiting for a collective to complete. */
struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  int err;  /* MPI error class, 0 on success */
};

struct xfer;

/* One request: a transfer's (embedded in its struct xfer, reused every
 * run) or a collective's (allocated). */
struct cmd {
  /* What a send from a task touches, on one cache line with the
   * transfer's posted and dg (struct xfer starts with them). */
  enum cmd_kind kind;
  int bytes;
  int peer, tag;
  void *buf;          /* data, or the gather's array */
  MPI_Comm comm;
  MPI_Request req;
  struct dtask *dt;   /* C_DSEND: the task whose end waits for it */
  struct xfer *x;     /* C_SEND, C_FSEND, C_DSEND, C_RECV, C_MARK */
  struct cmd *next;   /* the queue, or the list of completed ones */
  mz_op *op;          /* C_SEND: the node to end */
  int got;            /* C_RECV: the bytes received */
  MPI_Comm *newcomm;  /* C_IDUP */
  int *sendv;         /* C_COLL: this rank's status, buf gets everyone's */
  struct waiter *w;   /* C_COLL, C_IDUP */
  MPI_Request *reqs;  /* C_FREE: the graph's persistent requests (freed here) */
  int nreqs;
};

/* How long the communication thread naps between polls once nothing has
 * completed for spin_ns; between its tests while a node waits but a
 * worker may test (it is busy, or spinning); and while nobody waits. */
#define MZ__MPI_NAP_US 50
#define MZ__MPI_BUSY_US 1000
#define MZ__MPI_IDLE_US 2000
/* Those two tests come up to 2^MZ__MPI_BACKOFF times as far apart while
 * idle workers test the requests between them (see comm_main). */
#define MZ__MPI_BACKOFF 3
/* An idle worker's hold follows the mean gap between messages up to this
 * many spin times (see idle_hold). */
#define MZ__MPI_HOLD_MAX 10

struct mz_mpi {
  mz_runtime *rt;
  uint64_t spin_ns;    /* $MZ_MPI_SPIN_US: polling without a pause after the last completion */
  size_t stage_max;    /* $MZ_MPI_STAGING_MAX: folded sends' staging one graph may hold here (bytes) */
  int direct_max;      /* $MZ_MPI_DIRECT_MAX: folded sends up to this size go from the buffer (bytes) */
  size_t rwin;         /* $MZ_MPI_RECV_WINDOW: staged receives a graph has posted ahead (MPI_THREAD_MULTIPLE) */
  int rank, size;
  bool use_mpi;        /* false: one rank, MPI never called */
  bool finalize;       /* MPI was initialized here */
  bool multiple;       /* MPI_THREAD_MULTIPLE: any thread makes its MPI calls itself */
  bool idle_hook;      /* the runtime's idle workers test the pending set */
  bool fold;           /* transfers fold into the tasks (see the top); $MZ_MPI_FOLD=0 turns it off */
  bool self;           /* $MZ_MPI_SELF (default 1): the user thread drives its own waits (see "Self-driven waits") */
  /* The tasks' kernels as this layer runs them (folded transfers): per
   * user kernel (referenced), its wrapper. */
  struct { mz_kernel *uk, *wk; } *wraps;
  size_t nwraps, capwraps;
  MPI_Comm comm;
  int tag_ub;          /* the largest tag (MPI_TAG_UB) */
  /* The send and receive kernels, one per element type. */
  mz_kernel *ksend[MZ_DTYPE_COUNT], *krecv[MZ_DTYPE_COUNT];
  /* The registry: buffers by data id, and an open-addressing map from
   * buffer to id + 1 (guarded by lock). */
  pthread_mutex_t lock;
  mz_buffer **data;
  int *owner;
  size_t ndata, capdata;
  struct { const mz_buffer *b; size_t id1; } *map;
  size_t mapcap;
  /* The communication thread and its queue (guarded by qlock). */
  pthread_t thread;
  bool thread_on;
  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  struct cmd *qhead, *qtail;
  bool stop;
  /* The pending set (guarded by plock): entries phead to phead + pn - 1
   * of the arrays, oldest first (a run's receives in plan order, which is
   * about the order they complete in); npend mirrors pn for lock-free looks. */
  pthread_mutex_t plock;
  MPI_Request *preq;
  struct cmd **pcmd;
  int *pidx;
  MPI_Status *psts;
  int phead, pn, pcap;
  unsigned pscan;      /* the workers' polls, for their scans of the window */
  /* Graphs owed receives (see start_transfers): their next ones are
   * posted at the next poll (under plock). */
  struct mz_dgraph *owed;
  int nowed;
  _Atomic int npend;   /* pn + nowed */
  /* Someone waits on a pending request (a started send or receive node, a
   * collective, a run start draining the last run's); workers spinning
   * idle (they test); the communication thread is asked to poll. */
  _Atomic int urgent, spinning;
  _Atomic bool poll_on;
  _Atomic int uwait;   /* user threads waiting on a request (a collective, a drain) */
  /* When a request last completed, or a task last sent (mz__now_ns), and
   * the mean gap between such events (a moving average): idle workers keep
   * polling for spin_ns after the last one while a node waits, where
   * messages are closely spaced (idle_hold).  unnoted: a worker completed
   * requests and stamps the time when it next polls idle, not at once (a
   * clock read costs tens of ns, before the node it released runs). */
  _Atomic uint64_t last_done, gap;
  _Atomic unsigned unread;  /* workers' events not stamped since the last stamp (see idle_poll) */
  _Atomic bool unnoted;
  /* An idle worker tested the requests since the communication thread
   * last looked (idle_poll sets it, that thread clears it). */
  _Atomic bool tested;
  /* Folded receives in before their run started (in graphs' early
   * lists): their readers wait for the run's start to end (gates_open). */
  _Atomic int nearly;
};

/* The largest send folded into its producer (copied into staging memory
 * there); a larger one gets a node, which holds the buffer until sent.
 * Folded sends' staging blocks come in power-of-two size classes up to it. */
#define MZ__MPI_FOLD_MAX 65536
#define MZ__MPI_NCLASS 17
/* By default a folded send of at most this many bytes goes from its
 * producer's buffer, with no staging copy ($MZ_MPI_DIRECT_MAX, up to
 * MZ__MPI_FOLD_MAX): MPI sends it eagerly on any transport (shared
 * memory's and InfiniBand's eager limits are 4 and 12 KiB, TCP's 64), so
 * its request is most often complete once posted; when it is not, the
 * producer ends when it is (it holds the buffer until then). */
#define MZ__MPI_DIRECT_MAX 1024
/* By default a graph has this many staged receives posted ahead, in plan
 * order, where MPI gives MPI_THREAD_MULTIPLE ($MZ_MPI_RECV_WINDOW): see
 * start_transfers. */
#define MZ__MPI_RECV_WINDOW 8

/* A staging block of a folded send; its bytes follow the header. */
struct sblock {
  struct sblock *all, *next;
  unsigned cls;
  _Alignas(16) unsigned char bytes[];
};

static void stage_give(mz_dgraph *dg, struct sblock *b);
static struct sblock *sblock_of(void *bytes) {
  return (struct sblock *)(void *)((unsigned char *)bytes - offsetof(struct sblock, bytes));
}

/* One planned transfer of a distributed graph.  Its address travels as
 * the send or receive node's u64 argument. */
enum xstate {
  X_POSTED,   /* receive: in flight, its node not started */
  X_WAITING,  /* receive: in flight, its node waits for it */
  X_DONE,     /* receive: arrived, its node not started */
  X_ENDED,    /* nothing more to do this run */
};

struct xfer {
  /* Send, or direct receive: the run (dg->epoch) whose message (data or
   * mark) is posted or handed on, set by whichever of start and ended
   * comes first: a new run needs no reset. */
  _Atomic unsigned posted;
  mz_dgraph *dg;
  struct cmd c;         /* here: see struct cmd */
  bool send;            /* this rank's side */
  int peer, tag;
  size_t data;          /* data id */
  int bytes;            /* the buffer's size (read here: the registry may grow meanwhile) */
  unsigned scls;        /* folded send: its staging blocks' size class (2^scls >= bytes) */
  bool dsend;           /* folded send from the producer's buffer (C_DSEND: m->direct_max) */
  void *stage;          /* receive: where the message lands (bytes, at least 1) */
  _Atomic int state;    /* receive: enum xstate */
  mz_op *op;            /* receive: the waiting node (X_WAITING) */
  void *dst;            /* receive: its buffer's memory */
  /* Folded: a receive whose readers read its staging memory and wait on
   * it through a gate (no node), or a send posted by its producer task's
   * completion from the staging memory (no node). */
  bool fold;
  bool has_node;        /* receive: a node also copies it into the buffer */
  /* Receive of more than MZ__MPI_FOLD_MAX bytes: no staging memory; its
   * node posts it straight into the buffer when it starts (it holds the
   * buffer then), or, when the node will not run, into a block of its own
   * that drops the message (drain: freed when it is in). */
  bool direct, drain;
  struct xfer *enext;   /* folded receive: the next in its graph's early list */
  size_t rk;            /* staged receive: its persistent request, dg->rreq[rk] */
  mz_op **readers;      /* folded receive: the tasks it gates */
  size_t nreaders, capreaders;
};


/* A folded receive's gates, per run, are released once both the message
 * is in and the run has started (its counters are set then): a message in
 * before that waits in the graph's early list, which the run's start
 * closes (EARLY_CLOSED) after the counters are set, releasing the gates of
 * those in it; a message that finds it closed releases its gates itself. */
#define EARLY_CLOSED ((struct xfer *)(uintptr_t)1)

/* Lines a wrapped task asks the cache for ahead of the next (struct dtask). */
#define MZ__MPI_AHEAD 16

/* A task built with its kernel's wrapper: the user's kernel, the inputs it
 * reads from folded receives (parameter index, transfer), the outputs its
 * completion sends.  Its address travels as the wrapper's last argument. */
struct tio {
  unsigned p;
  bool dsend;           /* out: x->dsend */
  struct xfer *x;
  void *stage;          /* in: x->stage (read here: one cache line less per input) */
};
struct dtask {
  mz_kernel *uk;
  mz_cpu_fn fn;         /* uk's CPU function and its user pointer */
  void *fn_user;
  struct tio *in, *out;
  unsigned nin, capin, nout, capout;
  unsigned ndirect;     /* outputs sent from the buffer (xfer's dsend) */
  /* This run: the node, and its direct sends not yet out plus one (the
   * task's own share): whoever takes it to 0 ends the node. */
  mz_op *op;
  _Atomic unsigned pend;
  /* The look-ahead (plan_ahead): the first wrapped task here that reads
   * what this one writes (a stencil's next step), the node of this one,
   * and the lines that next one's start and end touch, asked of the cache
   * before this task's function runs. */
  struct dtask *next;
  mz_op *node;
  unsigned nahead;
  const void *ahead[MZ__MPI_AHEAD];
};

struct mz_dgraph {
  mz_mpi *m;
  mz_graph *g;
  /* The plan's records (its transfers, their staging memory, its wrapped
   * tasks), made while the graph is built (by its one builder) and freed
   * with it: a bump each, not a malloc (a transfer's aligned one cost
   * about 750 instructions). */
  struct mz__arena arena;
  /* The wrapped tasks' lists of transfers (struct dtask in and out) while
   * the graph is built: grown by a bump and a copy, not a realloc (three
   * mallocs a task were a tenth of an apply's cost), and freed at once
   * when the plan packs them into tios. */
  struct mz__arena scratch;
  MPI_Comm comm;
  bool has_comm;
  int status;
  char message[MZ__ERRLEN];
  /* The model of where values are while the graph is built: per data,
   * the rank with its latest value and the ranks holding that value
   * (m->size bits each). */
  int *latest;
  uint8_t *valid;
  /* This rank's side, per data: the wrapped task here that wrote its
   * latest value (and the parameter), and the folded receive that brought
   * it here (NULL: none). */
  struct dtask **wtask;
  unsigned *wparam;
  struct xfer **rx;
  size_t nmodel, vbytes;
  struct dtask **dts;
  size_t ndts, capdts;
  int ntags;
  /* This rank's part: its transfers and its tasks (the run's root joins them). */
  struct xfer **xf;
  size_t nxf, capxf, nsends, nrecvs;
  mz_op **tasks;
  size_t ntasks, captasks;
  mz_op *root;
  bool frozen;
  int run_status;      /* the last mz_dgraph_run's error, for a wait without a future */
  struct xfer *_Atomic early; /* folded receives in before the run started, or EARLY_CLOSED */
  size_t nfold;        /* folded receives */
  unsigned epoch;      /* runs started (struct xfer's posted) */
  /* Set at the first run: the staged receives' commands in plan order
   * (rk), and those of them with a node (their state is reset per run). */
  bool planned;
  struct tio *tios;    /* every wrapped task's in and out lists, in build order (set at the first run) */
  struct cmd **rcmd;
  struct xfer **rnode;
  size_t nrnode;
  /* The staged receives' persistent requests (without
   * MPI_THREAD_MULTIPLE: MPI_Recv_init at the first run that posts them,
   * MPI_Start at each; a staged receive lands in the same memory every
   * run), in plan order; NULL: plain MPI_Irecv (out of memory when the
   * first run started). */
  MPI_Request *rreq;
  size_t nrreq;
  /* With MPI_THREAD_MULTIPLE: the staged receives posted this run (the
   * first rpost in plan order), those owed (one per completed receive,
   * while some are still to post), and the next graph owed (m->owed); all
   * under plock. */
  bool rwin;
  size_t rpost, rowed;
  struct mz_dgraph *onext;
  _Atomic long inflight; /* this graph's requests not yet completed */
  /* Staging memory of folded sends, shared by all of them: a send takes a
   * block of its size class when its producer ends and gives it back when
   * the send completes, so what is held is what was in flight at once, not
   * one block per transfer.  sall: every block (freed with the graph);
   * slast, then sfree: the free ones per class (sfree under slock);
   * sbytes: their total size. */
  pthread_mutex_t slock;
  struct sblock *sall, *sfree[MZ__MPI_NCLASS];
  struct sblock *_Atomic slast[MZ__MPI_NCLASS]; /* per class: one free block outside the lock */
  size_t sbytes;
  size_t rbytes; /* staging memory of this rank's receives (one per staged transfer; under slock) */
};

/* Whether x's message of this run was posted already; marks it posted. */
static bool posted_before(struct xfer *x) {
  unsigned e = x->dg->epoch;
  return atomic_exchange_explicit(&x->posted, e, memory_order_relaxed) == e;
}

static void comm_fail(mz_mpi *m, int err, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", err);
  /* A transfer that cannot be made leaves a peer waiting for it forever:
   * MPI offers no way to tell it, so the job ends, as a lost rank ends it. */
  fprintf(stderr, "maize (rank %d): %s failed: %s; aborting the job\n", m->rank, what, s);
  MPI_Abort(MPI_COMM_WORLD, 70);
}

/* Ask the communication thread to poll, or to look at its queue. */
static void wake_comm(mz_mpi *m) {
  atomic_store(&m->poll_on, true);
  pthread_mutex_lock(&m->qlock);
  pthread_cond_signal(&m->qcond);
  pthread_mutex_unlock(&m->qlock);
}

static void push_cmd(mz_mpi *m, struct cmd *c) {
  c->next = NULL;
  pthread_mutex_lock(&m->qlock);
  if (m->qtail) m->qtail->next = c;
  else m->qhead = c;
  m->qtail = c;
  pthread_cond_signal(&m->qcond);
  pthread_mutex_unlock(&m->qlock);
}

static struct cmd *new_cmd(enum cmd_kind kind) {
  struct cmd *c = calloc(1, sizeof *c);
  /* A lost command would leave a peer or a node waiting forever. */
  if (!c) {
    fprintf(stderr, "maize: out of memory for an MPI command; aborting\n");
    abort();
  }
  c->kind = kind;
  return c;
}

static void waiter_done(struct waiter *w, int err) {
  pthread_mutex_lock(&w->lock);
  w->done = true;
  w->err = err;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

/* Whether a pending c has someone waiting on it. */
static bool is_urgent(const struct cmd *c) {
  return c->kind == C_SEND || c->kind == C_FSEND || c->kind == C_DSEND || c->kind == C_COLL || c->kind == C_IDUP ||
         (c->kind == C_RECV && c->x->direct && !c->x->drain);
}

/* Room for n more requests after the pending set's last: its entries
 * moved to the front when the room is behind them, else the arrays grown
 * (doubling).  Like a lost command, a request that cannot be tracked
 * would leave a peer or a node waiting forever: out of memory aborts.
 * plock held. */
static void pending_reserve(mz_mpi *m, int n) {
  if (m->phead + m->pn + n > m->pcap && m->phead > 0) {
    memmove(m->preq, m->preq + m->phead, (size_t)m->pn * sizeof *m->preq);
    memmove(m->pcmd, m->pcmd + m->phead, (size_t)m->pn * sizeof *m->pcmd);
    m->phead = 0;
  }
  if (m->pn + n <= m->pcap) return;
  int nc = m->pcap ? m->pcap : 64;
  while (nc < m->pn + n) nc *= 2;
  MPI_Request *r2 = realloc(m->preq, (size_t)nc * sizeof *r2);
  if (r2) m->preq = r2;
  struct cmd **c2 = r2 ? realloc(m->pcmd, (size_t)nc * sizeof *c2) : NULL;
  if (c2) m->pcmd = c2;
  int *i2 = c2 ? realloc(m->pidx, (size_t)nc * sizeof *i2) : NULL;
  if (i2) m->pidx = i2;
  MPI_Status *s2 = i2 ? realloc(m->psts, (size_t)nc * sizeof *s2) : NULL;
  if (s2) m->psts = s2;
  if (!s2) {
    fprintf(stderr, "maize: out of memory for MPI requests; aborting\n");
    abort();
  }
  m->pcap = nc;
}

/* Put c's posted request in the pending set: one somebody waits on first
 * when there is room before the oldest (idle workers test the oldest few
 * only), else last.  plock held. */
static void add_pending_locked(mz_mpi *m, struct cmd *c) {
  bool urgent = is_urgent(c);
  if (urgent) atomic_fetch_add(&m->urgent, 1);
  if (urgent && m->phead > 0) {
    m->phead--;
    m->preq[m->phead] = c->req;
    m->pcmd[m->phead] = c;
    m->pn++;
    atomic_store_explicit(&m->npend, m->pn + m->nowed, memory_order_relaxed);
    return;
  }
  pending_reserve(m, 1);
  m->preq[m->phead + m->pn] = c->req;
  m->pcmd[m->phead + m->pn] = c;
  m->pn++;
  atomic_store_explicit(&m->npend, m->pn + m->nowed, memory_order_relaxed);
}

static void add_pending(mz_mpi *m, struct cmd *c) {
  pthread_mutex_lock(&m->plock);
  add_pending_locked(m, c);
  pthread_mutex_unlock(&m->plock);
}

/* Post c's request; false when it has none to wait for (c is freed). */
static bool post(mz_mpi *m, struct cmd *c) {
  int err = MPI_SUCCESS;
  switch (c->kind) {
  case C_SEND:
  case C_FSEND:
  case C_DSEND:
    err = MPI_Isend(c->buf, c->bytes, MPI_BYTE, c->peer, c->tag, c->comm, &c->req);
    break;
  case C_RECV: {
    MPI_Request *init = !c->x->direct && c->x->dg->rreq ? &c->x->dg->rreq[c->x->rk] : NULL;
    if (!init) {
      err = MPI_Irecv(c->buf, c->bytes, MPI_BYTE, c->peer, c->tag, c->comm, &c->req);
      break;
    }
    if (*init == MPI_REQUEST_NULL) err = MPI_Recv_init(c->buf, c->bytes, MPI_BYTE, c->peer, c->tag, c->comm, init);
    if (err == MPI_SUCCESS) err = MPI_Start(init);
    c->req = *init;
    break;
  }
  case C_MARK:
    err = MPI_Isend(NULL, 0, MPI_BYTE, c->peer, c->tag, c->comm, &c->req);
    break;
  case C_COLL:
    err = MPI_Iallgather(c->sendv, 1, MPI_INT, c->buf, 1, MPI_INT, c->comm, &c->req);
    break;
  case C_IDUP:
    err = MPI_Comm_idup(c->comm, c->newcomm, &c->req);
    break;
  case C_FREE:
    /* The persistent requests are inactive (a graph is destroyed once all
     * its requests completed); requests in flight on the communicator
     * complete normally (MPI_Comm_free only marks it). */
    for (int i = 0; i < c->nreqs; i++)
      if (c->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&c->reqs[i]);
    free(c->reqs);
    MPI_Comm_free(&c->comm);
    free(c);
    return false;
  }
  if (err != MPI_SUCCESS) comm_fail(m, err, "posting an MPI request");
  return true;
}

/* Post a transfer's request from this thread when MPI allows it, else
 * through the communication thread. */
static void submit(mz_mpi *m, struct cmd *c) {
  if (m->multiple) {
    post(m, c);
    add_pending(m, c);
  } else {
    push_cmd(m, c);
  }
}

/* The receive's node ends: its data into the buffer, or canceled when
 * the message was a mark. */
static void recv_finish(struct xfer *x, mz_op *op) {
  int st = MZ_OK;
  if (x->c.got == 0 && x->bytes > 0) st = MZ_ECANCELED; /* the sending rank's producer failed */
  else if (x->c.got > 0) memcpy(x->dst, x->stage, (size_t)x->c.got);
  mz__task_finish(op, st);
}

/* A folded receive's message is in and its run started: its readers may
 * run (canceled when the message is a mark).  next: on a CPU worker's idle
 * poll, where one reader it makes ready is handed to that worker to run
 * next (NULL elsewhere). */
static void release_gates(struct xfer *x, mz_op **next) {
  bool failed = x->c.got == 0 && x->bytes > 0;
  for (size_t i = 0; i < x->nreaders; i++) {
    if (next && !*next && !failed) *next = mz__task_ungate_take(x->readers[i]);
    else mz__task_ungate(x->readers[i], failed);
  }
}

/* The message of folded receive x is in: its gates are released now if
 * its run started, else when it starts. */
static void gate_arrived(mz_mpi *m, struct xfer *x, mz_op **next) {
  mz_dgraph *dg = x->dg;
  struct xfer *h = atomic_load_explicit(&dg->early, memory_order_acquire);
  do {
    if (h == EARLY_CLOSED) {
      atomic_fetch_sub(&m->urgent, 1);
      release_gates(x, next);
      return;
    }
    x->enext = h;
  } while (!atomic_compare_exchange_weak_explicit(&dg->early, &h, x, memory_order_acq_rel, memory_order_acquire));
  atomic_fetch_add_explicit(&m->nearly, 1, memory_order_relaxed);
}

/* The run of dg started (its tasks' counters are set): the messages still
 * to come have readers that wait on them, as a started receive node does
 * (urgent: counted for all the folded receives first, and given back for
 * those already in, whose gates are released here).  Only the early ones
 * are visited: a pass over every receive here would run beside the
 * workers, which wait on its gates, on a machine where this thread and a
 * spinning worker may share a core.  True when a message is to come. */
static bool gates_open(mz_dgraph *dg) {
  mz_mpi *m = dg->m;
  long in = 0;
  atomic_fetch_add(&m->urgent, (int)dg->nfold);
  struct xfer *x = atomic_exchange_explicit(&dg->early, EARLY_CLOSED, memory_order_acq_rel);
  for (; x; x = x->enext, in++) release_gates(x, NULL);
  atomic_fetch_sub(&m->urgent, (int)in);
  atomic_fetch_sub_explicit(&m->nearly, (int)in, memory_order_relaxed);
  return (size_t)in < dg->nfold;
}

static void complete(mz_mpi *m, struct cmd *c, mz_op **next) {
  struct xfer *x = c->x;
  switch (c->kind) {
  case C_SEND:
    atomic_fetch_sub(&m->urgent, 1);
    mz__task_finish(c->op, MZ_OK);
    break;
  case C_FSEND:
    atomic_fetch_sub(&m->urgent, 1);
    stage_give(x->dg, sblock_of(c->buf));
    break;
  case C_DSEND:
    atomic_fetch_sub(&m->urgent, 1);
    if (atomic_fetch_sub_explicit(&c->dt->pend, 1, memory_order_acq_rel) == 1) mz__task_finish(c->dt->op, MZ_OK);
    break;
  case C_RECV: {
    if (x->direct) {
      if (x->drain) {
        free(c->buf);
      } else {
        atomic_fetch_sub(&m->urgent, 1);
        mz__task_finish(x->op, c->got == 0 && x->bytes > 0 ? MZ_ECANCELED : MZ_OK);
      }
      break;
    }
    if (x->fold) gate_arrived(m, x, next);
    if (!x->has_node) break;
    int s = atomic_load_explicit(&x->state, memory_order_relaxed);
    for (;;) {
      int to = s == X_POSTED ? X_DONE : X_ENDED;
      if (s == X_ENDED || atomic_compare_exchange_weak_explicit(&x->state, &s, to, memory_order_acq_rel, memory_order_acquire))
        break;
    }
    if (s == X_WAITING) {
      atomic_fetch_sub(&m->urgent, 1);
      recv_finish(x, x->op);
    }
    break;
  }
  case C_MARK:
    break;
  case C_COLL:
  case C_IDUP:
    atomic_fetch_sub(&m->urgent, 1);
    waiter_done(c->w, 0);
    free(c);
    return;
  case C_FREE:
    break;
  }
  /* Last: a run start or mz_dgraph_destroy waits for this count, and may
   * then reuse or free x. */
  atomic_fetch_sub_explicit(&x->dg->inflight, 1, memory_order_release);
}

/* A message came or went at now: the last time, and the mean gap (3/4
 * of the old one and 1/4 of this one; racing updates may lose one, which
 * only blurs the mean). */
static void note_traffic(mz_mpi *m, uint64_t now, unsigned events) {
  uint64_t prev = atomic_exchange_explicit(&m->last_done, now, memory_order_relaxed);
  uint64_t d = now > prev ? (now - prev) / events : 0, g = atomic_load_explicit(&m->gap, memory_order_relaxed);
  atomic_store_explicit(&m->gap, g - g / 4 + d / 4, memory_order_relaxed);
}

/* Post staged receive c of a windowed graph (MPI_Irecv: the request
 * comes from MPI's free list, where the last one completed went) and
 * append it to the pending set, which has room.  plock held. */
static void post_recv_locked(mz_mpi *m, struct cmd *c) {
  int err = MPI_Irecv(c->buf, c->bytes, MPI_BYTE, c->peer, c->tag, c->comm, &c->req);
  if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Irecv");
  m->preq[m->phead + m->pn] = c->req;
  m->pcmd[m->phead + m->pn] = c;
  m->pn++;
}

/* A staged receive of a windowed graph completed: the graph owes the next
 * one in plan order, if any is left, posted at the next poll.  plock held. */
static void owe_locked(mz_mpi *m, mz_dgraph *dg) {
  if (dg->rpost + dg->rowed >= dg->nrreq) return;
  if (!dg->rowed++) {
    dg->onext = m->owed;
    m->owed = dg;
  }
  m->nowed++;
}

/* Post the receives owed.  plock held. */
static void refill_locked(mz_mpi *m) {
  pending_reserve(m, m->nowed);
  for (mz_dgraph *dg = m->owed; dg; dg = dg->onext) {
    for (; dg->rowed; dg->rowed--) post_recv_locked(m, dg->rcmd[dg->rpost++]);
  }
  m->owed = NULL;
  m->nowed = 0;
  atomic_store_explicit(&m->npend, m->pn, memory_order_relaxed);
}

/* How many of the oldest pending requests an idle worker tests (all of
 * them would cost it a pass over every receive of the run each poll). */
#define MZ__MPI_WINDOW 32
/* A worker tests the window past the oldest request every this many polls. */
#define MZ__MPI_SCAN 4

/* Test the oldest limit pending requests and complete what finished;
 * try: leave them when another thread tests them; next: see
 * release_gates.  Returns how many completed. */
static int poll_pending(mz_mpi *m, bool try, int limit, mz_op **next) {
  if (!atomic_load_explicit(&m->npend, memory_order_relaxed)) return 0;
  if (try) {
    if (pthread_mutex_trylock(&m->plock)) return 0;
  } else {
    pthread_mutex_lock(&m->plock);
  }
  /* Owed receives first: a poll is made by a thread with nothing else to
   * do (a worker idle, or the communication thread), off the path from a
   * message to its reader and from a task to its sends. */
  if (m->nowed) refill_locked(m);
  int n = m->pn < limit ? m->pn : limit, out = 0, h = m->phead;
  struct cmd *head = NULL, **tail = &head;
  if (n > 0) {
    /* MPI_Testsome reports what was complete when it was called, and
     * makes progress only when nothing was: a message that progress takes
     * in shows at the next call, a whole spin later.  MPI_Test makes
     * progress and looks again, so a test of the oldest request (most
     * often the next message to come) sees it in this poll; the Testsome
     * after it reports what else was complete by then. */
    int first = 0;
    int err = MPI_Test(&m->preq[h], &first, &m->psts[0]);
    if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Test");
    if (first) {
      m->psts[0].MPI_ERROR = MPI_SUCCESS; /* MPI_Test leaves it unset */
      m->pidx[0] = 0;
    }
    /* A worker that found the message runs its reader first; the next
     * poll reports the rest.  Otherwise a worker looks at the others
     * every MZ__MPI_SCAN-th poll only: MPI_Testsome reads one cache line
     * per request, and requests of one size, allocated alike, fall into a
     * few cache sets: a scan of the window at each poll missed the level-1
     * cache about 200 times a step (callgrind's cache model, a stencil),
     * and its parameter checks cost as much again. */
    bool scan = try ? !first && m->pscan++ % MZ__MPI_SCAN == 0 : true;
    if (n > first && scan) {
      err = MPI_Testsome(n - first, m->preq + h + first, &out, m->pidx + first, m->psts + first);
      if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Testsome");
      if (out == MPI_UNDEFINED) out = 0;
      for (int i = first; i < first + out; i++) m->pidx[i] += first;
    }
    out += first;
    for (int i = 0; i < out; i++) {
      struct cmd *c = m->pcmd[h + m->pidx[i]];
      if (m->psts[i].MPI_ERROR != MPI_SUCCESS && c->kind != C_COLL && c->kind != C_IDUP)
        comm_fail(m, m->psts[i].MPI_ERROR, "an MPI transfer");
      if (c->kind == C_RECV) {
        MPI_Get_count(&m->psts[i], MPI_BYTE, &c->got);
        if (!c->x->direct && c->x->dg->rwin) owe_locked(m, c->x->dg);
      }
      m->pcmd[h + m->pidx[i]] = NULL;
      c->next = NULL;
      *tail = c;
      tail = &c->next;
    }
    if (out > 0) {
      /* The window's survivors move to its end, the head past the gap. */
      int k = h + n - 1;
      for (int i = h + n - 1; i >= h; i--)
        if (m->pcmd[i]) {
          m->pcmd[k] = m->pcmd[i];
          m->preq[k] = m->preq[i];
          k--;
        }
      m->phead = h + out;
      m->pn -= out;
      if (m->pn == 0) m->phead = 0;
      atomic_store_explicit(&m->npend, m->pn + m->nowed, memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&m->plock);
  if (out > 0) {
    if (try) atomic_store_explicit(&m->unnoted, true, memory_order_relaxed);
    else note_traffic(m, mz__now_ns(), 1);
  }
  while (head) {
    struct cmd *c = head;
    head = c->next;
    complete(m, c, next);
  }
  return out;
}

/* ---- the idle workers' hook ---- */

static bool idle_poll(void *ctx, mz_op **next) {
  mz_mpi *m = ctx;
  /* Nothing to test: give the core to another thread that wants it.
   * mpirun binds a rank's threads to one core by default, so a worker
   * spinning after this rank's part of a run held off the thread waiting
   * for the run (its wake-up came when the worker parked, MZ_SPIN_US
   * later: 56 of a 200-step stencil run's 250 us), then the communication
   * thread's collective.  Where none is runnable, the yield returns at
   * once.  Likewise while a message waits for its run's start to end:
   * the thread starting the run, which the worker woke up and took the
   * core from, opens its gates (13 us at a stencil run's start). */
  if (!atomic_load_explicit(&m->npend, memory_order_relaxed)) {
    sched_yield();
    return false;
  }
  if (atomic_load_explicit(&m->nearly, memory_order_relaxed) > 0) sched_yield();
  if (!atomic_load_explicit(&m->tested, memory_order_relaxed)) atomic_store_explicit(&m->tested, true, memory_order_relaxed);
  if (atomic_load_explicit(&m->unnoted, memory_order_relaxed) &&
      atomic_exchange_explicit(&m->unnoted, false, memory_order_relaxed)) {
    /* Messages a few microseconds apart (a stencil's fine steps): the
     * time is read at every 4th event only (a clock read is about 12 ns
     * of a 500 ns step), the stamp then at most a few steps old against
     * idle_hold's spin_ns; farther apart, at each.  Racing updates of the
     * count only blur the mean. */
    unsigned k = atomic_load_explicit(&m->unread, memory_order_relaxed);
    if (k < 3 && atomic_load_explicit(&m->gap, memory_order_relaxed) < m->spin_ns / 64) {
      atomic_store_explicit(&m->unread, k + 1, memory_order_relaxed);
    } else {
      atomic_store_explicit(&m->unread, 0, memory_order_relaxed);
      note_traffic(m, mz__now_ns(), k + 1);
    }
  }
  return poll_pending(m, true, MZ__MPI_WINDOW, next) > 0;
}

static void idle_state(void *ctx, enum mz__idle_state to) {
  mz_mpi *m = ctx;
  if (to == MZ__IDLE_SPIN) {
    atomic_fetch_add(&m->spinning, 1);
    return;
  }
  atomic_fetch_sub(&m->spinning, 1);
  /* Nobody tests while this worker sleeps: the communication thread
   * completes what a node waits on, and wakes a worker for its successor. */
  if (to == MZ__IDLE_PARK && atomic_load(&m->urgent) > 0) wake_comm(m);
}

/* Past the runtime's spin time (MZ_SPIN_US), an idle worker keeps
 * polling while a node of this rank waits on a message, messages have
 * come and gone less than MZ__MPI_HOLD_MAX spin times ($MZ_MPI_SPIN_US)
 * apart on average, and the last one is younger than twice that mean gap
 * (at least spin_ns, at most the same bound): the next one is then due
 * soon, and a worker that parks costs two wake-ups to get back (the
 * communication thread's, then its own), tens to hundreds of microseconds
 * on a loaded machine, a step's worth where tasks take a few hundred
 * microseconds (a 2-rank stencil whose tasks took 220-450 us took 650-790
 * us a step with a hold of spin_ns alone, against 220-450 for plain MPI).
 * Past spin_ns it yields the CPU at each poll, so that a thread of
 * another rank on the same core (an oversubscribed run) still gets it.
 * Where tasks are long (messages milliseconds apart) it parks as before. */
static bool idle_hold(void *ctx, uint64_t now) {
  mz_mpi *m = ctx;
  if (atomic_load_explicit(&m->urgent, memory_order_relaxed) <= 0) return false;
  uint64_t bound = m->spin_ns * MZ__MPI_HOLD_MAX, gap = atomic_load_explicit(&m->gap, memory_order_relaxed);
  if (gap >= bound) return false;
  uint64_t window = 2 * gap < m->spin_ns ? m->spin_ns : 2 * gap < bound ? 2 * gap : bound;
  int64_t age = (int64_t)(now - atomic_load_explicit(&m->last_done, memory_order_relaxed));
  if (age >= (int64_t)window) return false;
  if (age > (int64_t)m->spin_ns) sched_yield();
  return true;
}

static const struct mz__idle_ops idle_ops = {.poll = idle_poll, .idle = idle_state, .hold = idle_hold};

/* ---- the communication thread ---- */

/* Whether it should poll now.  qlock held. */
static bool comm_active(mz_mpi *m) {
  if (!atomic_load(&m->npend)) return false;
  if (m->stop || !m->idle_hook || atomic_load(&m->uwait) > 0) return true;
  if (!atomic_load(&m->poll_on)) return false;
  if (atomic_load(&m->urgent) > 0 && atomic_load(&m->spinning) == 0) return true;
  /* Nothing waits, or a spinning worker tests: sleep until asked again. */
  atomic_store(&m->poll_on, false);
  return false;
}

static void timed_wait(mz_mpi *m, long us) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += us * 1000L;
  while (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&m->qcond, &m->qlock, &ts);
}

static void *comm_main(void *arg) {
  mz_mpi *m = arg;
  /* It ends nodes, which may run future callbacks: those must not block. */
  mz__in_runtime_thread = 1;
  /* Sleeps are short: a timer's default slack (50 us) would add to each. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  uint64_t last = mz__now_ns(); /* the last time something was posted or completed */
  unsigned polls = 0, backoff = 0;
  for (;;) {
    pthread_mutex_lock(&m->qlock);
    bool active = comm_active(m), napped = false;
    if (!m->qhead && !active) {
      if (m->stop) {
        pthread_mutex_unlock(&m->qlock);
        break;
      }
      /* Pending requests still get a test now and then: often while a
       * node waits (the workers may all be busy), rarely otherwise. */
      if (atomic_load(&m->npend)) timed_wait(m, (atomic_load(&m->urgent) > 0 ? MZ__MPI_BUSY_US : MZ__MPI_IDLE_US) << backoff);
      else pthread_cond_wait(&m->qcond, &m->qlock);
      last = mz__now_ns();
      napped = true;
    } else if (!m->qhead && mz__now_ns() - last > m->spin_ns) {
      /* Nothing completed for a while (long tasks): poll every
       * MZ__MPI_NAP_US instead of spinning, or sooner when a command comes. */
      timed_wait(m, MZ__MPI_NAP_US);
    }
    struct cmd *q = m->qhead;
    m->qhead = m->qtail = NULL;
    pthread_mutex_unlock(&m->qlock);
    bool progress = q != NULL;
    /* What it posts has a waiter (a collective's user thread), or is
     * posted here because the workers may not call MPI: it polls. */
    if (q) atomic_store(&m->poll_on, true);
    while (q) {
      struct cmd *c = q;
      q = q->next;
      if (post(m, c)) add_pending(m, c);
    }
    /* The test after a nap is left to a worker that spins: it tests and
     * makes progress, and a pass over all the requests here (all of a
     * run's receives, a cache miss each) would hold plock meanwhile, and
     * the spinning worker's polls would find it taken.  A message that
     * only this pass finds comes once that worker parks (and asks). */
    if (napped && !q && atomic_load(&m->spinning) > 0) continue;
    /* Likewise when an idle worker tested them during the nap (a thread
     * that runs a fine stencil's tasks tests at each step's end), and the
     * next nap is twice as long, up to 2^MZ__MPI_BACKOFF times: where a
     * rank's threads keep its cores busy, each wake-up of this thread
     * takes a core from a task, and at a test every 1 ms a 2-rank stencil
     * step of 25 us took 1.086 times the plain MPI peer's (median of 12
     * alternating rounds), 1.025 with the back-off.  Where the workers
     * stop testing (tasks longer than a nap), a test comes within
     * 2^MZ__MPI_BACKOFF naps and the naps are short again. */
    if (napped && !q && atomic_load_explicit(&m->tested, memory_order_relaxed) &&
        atomic_exchange_explicit(&m->tested, false, memory_order_relaxed)) {
      if (backoff < MZ__MPI_BACKOFF) backoff++;
      continue;
    }
    backoff = 0;
    /* The oldest requests, which complete first, and every 16th time all
     * of them (a run's receives: a pass over all costs microseconds). */
    if (poll_pending(m, false, polls++ % 16 == 0 || !active ? INT32_MAX : 2 * MZ__MPI_WINDOW, NULL) > 0) progress = true;
    /* Asked to poll for a parked worker: what completed woke one, which
     * tests again when it runs out of work (or asks again). */
    if (progress && m->idle_hook) atomic_store(&m->poll_on, false);
    if (progress) last = mz__now_ns();
    else if (active) sched_yield(); /* spinning: let a worker of this rank (or another rank) run */
  }
  return NULL;
}

/* ---- the send and receive nodes ---- */

static struct xfer *xfer_of(uint64_t v) { return (struct xfer *)(uintptr_t)v; }

static bool on_worker(const mz_mpi *m) { return mz__cur_rt == m->rt && mz__cur_queue >= 0; }

/* Post send c of transfer x from this thread (MPI_THREAD_MULTIPLE) and
 * test it once: a small message goes out at once (eagerly), and true says
 * it is done; a large one needs progress until the peer has it, so it is
 * left to the pending requests that the workers and the communication
 * thread test, and counted in flight (dg->inflight) only then.  A send
 * out at once is not counted: the node that sends it (a send node, or a
 * task with folded sends) is still running, so no run start or
 * mz_dgraph_destroy of its graph waits on the count meanwhile (both wait
 * for the last run's nodes first), and the two atomic updates were a
 * tenth of the runtime's own cost in a fine step. */
static bool send_now(mz_mpi *m, struct xfer *x, struct cmd *c) {
  post(m, c);
  int done = 0;
  MPI_Status st;
  int err = MPI_Test(&c->req, &done, &st);
  if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Test");
  if (done) {
    if (c->kind == C_FSEND) stage_give(x->dg, sblock_of(c->buf));
    /* (C_DSEND: counted out by its task, which learns it from the return.) */
    return true;
  }
  atomic_fetch_add_explicit(&x->dg->inflight, 1, memory_order_relaxed);
  add_pending(m, c);
  if (!on_worker(m) || !m->idle_hook) wake_comm(m);
  return false;
}

static int xfer_start(mz_op *op, const mz_call *call) {
  struct xfer *x = xfer_of(call->args[1].u64);
  mz_mpi *m = x->dg->m;
  if (!x->send && x->direct) {
    /* The node holds the buffer: the message lands there. */
    x->op = op;
    atomic_store_explicit(&x->posted, x->dg->epoch, memory_order_relaxed);
    struct cmd *c = &x->c;
    c->kind = C_RECV;
    c->buf = call->args[0].p;
    c->got = 0;
    x->drain = false;
    atomic_fetch_add_explicit(&x->dg->inflight, 1, memory_order_relaxed);
    submit(m, c);
    if (!on_worker(m) || !m->idle_hook) wake_comm(m);
    return 0;
  }
  if (!x->send) {
    x->op = op;
    x->dst = call->args[0].p;
    int s = X_POSTED;
    atomic_fetch_add(&m->urgent, 1);
    if (atomic_compare_exchange_strong_explicit(&x->state, &s, X_WAITING, memory_order_acq_rel, memory_order_acquire)) {
      /* A worker tests the requests when it runs out of work (and asks the
       * communication thread before it parks); any other thread asks now. */
      if (!on_worker(m) || !m->idle_hook) wake_comm(m);
      return 0;
    }
    atomic_fetch_sub(&m->urgent, 1);
    /* Arrived already (X_DONE): the data is in the staging memory. */
    atomic_store_explicit(&x->state, X_ENDED, memory_order_relaxed);
    recv_finish(x, op);
    return 0;
  }
  atomic_store_explicit(&x->posted, x->dg->epoch, memory_order_relaxed);
  struct cmd *c = &x->c;
  c->kind = C_SEND;
  c->op = op;
  c->buf = call->args[0].p;
  c->bytes = x->bytes;
  if (!m->multiple) {
    atomic_fetch_add_explicit(&x->dg->inflight, 1, memory_order_relaxed);
    push_cmd(m, c);
  } else if (send_now(m, x, c)) {
    mz__task_finish(op, MZ_OK); /* out already: the node ends here */
  }
  return 0;
}

/* Post what the peer expects of a send that will not run this time (a
 * mark), or take and drop the message of a direct receive that will not
 * (the next run's receive must not match it). */
static void xfer_abandon(struct xfer *x) {
  if (!(x->send || x->direct) || posted_before(x)) return;
  struct cmd *c = &x->c;
  if (x->send) {
    c->kind = C_MARK;
  } else {
    c->kind = C_RECV;
    c->got = 0;
    x->drain = true;
    c->buf = malloc((size_t)x->bytes);
    /* A message nobody takes would be matched by the next run's receive. */
    if (!c->buf) {
      fprintf(stderr, "maize: out of memory for a message to drop; aborting\n");
      abort();
    }
  }
  atomic_fetch_add_explicit(&x->dg->inflight, 1, memory_order_relaxed);
  submit(x->dg->m, c);
}

static void xfer_ended(mz_op *op, const mz_arg *values, int status, void *user) {
  (void)op;
  (void)status;
  (void)user;
  struct xfer *x = xfer_of(values[1].u64);
  if (x->send || x->direct) {
    xfer_abandon(x);
    return;
  }
  /* A receive canceled before it ran: its message is still taken (the
   * request was posted at the run's start), and dropped. */
  int s = atomic_load_explicit(&x->state, memory_order_relaxed);
  while ((s == X_POSTED || s == X_DONE) &&
         !atomic_compare_exchange_weak_explicit(&x->state, &s, X_ENDED, memory_order_acq_rel, memory_order_relaxed)) {
  }
}

static const struct mz__async_ops xfer_ops = {.start = xfer_start, .ended = xfer_ended};

/* ---- tasks with folded transfers ---- */

static int xfer_cpu(const mz_call *call);

/* A free staging block of size class k (NULL: out of memory, or
 * a new block would take the graph's folded sends past
 * $MZ_MPI_STAGING_MAX; receives' staging is fixed by the plan, at most
 * MZ__MPI_FOLD_MAX bytes per transfer, and is not counted: a limit that
 * failed a build on one rank only would leave its peers' messages
 * unmatched). */
static struct sblock *stage_take(mz_dgraph *dg, unsigned k) {
  /* The class's last block given back, without the lock (one slot,
   * exchanged whole: no ABA); the common case of a message that went out
   * before the next task of its class ended. */
  struct sblock *b = atomic_exchange_explicit(&dg->slast[k], NULL, memory_order_acquire);
  if (b) return b;
  size_t sz = (size_t)1 << k, max = dg->m->stage_max;
  pthread_mutex_lock(&dg->slock);
  b = dg->sfree[k];
  if (b) dg->sfree[k] = b->next;
  bool room = !b && sz <= max && dg->sbytes <= max - sz;
  if (room) dg->sbytes += sz; /* reserved before the allocation, so takers at once stay within max */
  pthread_mutex_unlock(&dg->slock);
  if (b || !room) return b;
  b = malloc(sizeof *b + sz);
  pthread_mutex_lock(&dg->slock);
  if (b) {
    b->cls = k;
    b->all = dg->sall;
    dg->sall = b;
  } else {
    dg->sbytes -= sz;
  }
  pthread_mutex_unlock(&dg->slock);
  return b;
}

static void stage_give(mz_dgraph *dg, struct sblock *b) {
  struct sblock *none = NULL;
  if (atomic_compare_exchange_strong_explicit(&dg->slast[b->cls], &none, b, memory_order_release, memory_order_relaxed))
    return;
  pthread_mutex_lock(&dg->slock);
  b->next = dg->sfree[b->cls];
  dg->sfree[b->cls] = b;
  pthread_mutex_unlock(&dg->slock);
}

/* Send a folded send's data (src, the producer's output) from its
 * staging memory: the producer ends at once, and a later writer of the
 * buffer need not wait for the message. */
static void fsend(struct xfer *x, const void *src, struct sblock *blk) {
  if (posted_before(x)) {
    stage_give(x->dg, blk);
    return;
  }
  mz_mpi *m = x->dg->m;
  struct cmd *c = &x->c;
  memcpy(blk->bytes, src, (size_t)x->bytes);
  c->kind = C_FSEND;
  c->buf = blk->bytes;
  c->bytes = x->bytes;
  if (!m->multiple) {
    atomic_fetch_add_explicit(&x->dg->inflight, 1, memory_order_relaxed);
    push_cmd(m, c);
  } else {
    send_now(m, x, c);
  }
}

/* Send a small folded send's data from its producer's buffer src (held
 * by the producer until the message is out): true when it is out now (or
 * the peer got a mark instead), else its completion takes dt->pend down. */
static bool dsend(struct xfer *x, const void *src, struct dtask *dt) {
  if (posted_before(x)) return true;
  struct cmd *c = &x->c;
  c->kind = C_DSEND;
  c->buf = (void *)(uintptr_t)src; /* MPI_Isend's buffer is const from MPI 3 on; Open MPI 4's headers say so */
  c->dt = dt;
  return send_now(x->dg->m, x, c);
}

static struct dtask *dtask_of(uint64_t v) { return (struct dtask *)(uintptr_t)v; }

/* A wrapped task: its gates are released (its folded inputs are in their
 * staging memory); run the user's function on them, then send the
 * outputs that other ranks read.  It ends here (MZ__ASYNC_ENDED: the
 * worker ends it as a CPU function's, the short way in a lean run) unless
 * it failed (ended here with its message) or a send from its buffer is not
 * out yet (that send's completion ends it). */
static int task_start(mz_op *op, const mz_call *call) {
  unsigned n = call->nargs - 1;
  struct dtask *dt = dtask_of(call->args[n].u64);
  mz_arg argv[16];
  mz_arg *args = n <= 16 ? argv : malloc(n * sizeof *args);
  struct mz__exec *e = &mz__task_of(op)->exec; /* (a task: the wrapper's) */
  int st = MZ_OK;
  bool late = false;
  char *msg = NULL;
  if (!args) {
    st = MZ_ENOMEM;
  } else {
    memcpy(args, call->args, n * sizeof *args);
    for (unsigned i = 0; i < dt->nin; i++) args[dt->in[i].p].p = dt->in[i].stage;
    mz_call uc = *call;
    uc.kernel = dt->uk;
    uc.nargs = n;
    uc.args = args;
    uc.user = dt->fn_user;
    for (unsigned i = 0; i < dt->nahead; i++) __builtin_prefetch(dt->ahead[i]);
    int ret = dt->fn(&uc);
    /* Timed (the run or the perf models want it: t_start is set): the
     * function's end, before any send may end the node elsewhere. */
    if (mz__exec_t_start(e)) mz__exec_xd(e)->t_end = mz__now_ns();
    if (ret != 0) {
      /* As a CPU function's failure (devices/cpu/cpu.c). */
      char buf[200];
      const char *name = mz_err_name(ret);
      snprintf(buf, sizeof buf, "the kernel's CPU function returned %d (%s)", ret,
               strcmp(name, "MZ_EUNKNOWN") ? name : "not a maize code");
      msg = strdup(buf);
      st = MZ_EKERNEL;
    } else if (dt->nout) {
      /* Every staging block first: out of memory fails the task before
       * any message goes (the peers then get marks, as for any failure). */
      unsigned ns = dt->nout - dt->ndirect;
      struct sblock *bv[8];
      struct sblock **blk = ns <= 8 ? bv : malloc(ns * sizeof *blk);
      unsigned got = 0;
      for (unsigned i = 0; blk && got < ns && i < dt->nout; i++) {
        if (dt->out[i].dsend) continue;
        const struct xfer *x = dt->out[i].x;
        if (!(blk[got++] = stage_take(x->dg, x->scls))) {
          got--;
          break;
        }
      }
      if (!blk || got < ns) {
        for (unsigned i = 0, k = 0; k < got; i++)
          if (!dt->out[i].dsend) stage_give(dt->out[i].x->dg, blk[k++]);
        st = MZ_ENOMEM;
        msg = strdup("no staging memory for a value sent to another rank (out of memory, or MZ_MPI_STAGING_MAX)");
      } else {
        unsigned out = 0;
        if (dt->ndirect) {
          dt->op = op;
          atomic_store_explicit(&dt->pend, dt->ndirect + 1, memory_order_relaxed);
        }
        for (unsigned i = 0, k = 0; i < dt->nout; i++) {
          struct xfer *x = dt->out[i].x;
          const void *src = call->args[dt->out[i].p].p;
          if (dt->out[i].dsend) out += dsend(x, src, dt);
          else fsend(x, src, blk[k++]);
        }
        /* A reply may follow soon: idle workers poll on (idle_hold); the
         * time is read at the next idle poll, not here (a clock read before
         * the task's successor runs). */
        atomic_store_explicit(&dt->out[0].x->dg->m->unnoted, true, memory_order_relaxed);
        if (dt->ndirect) late = atomic_fetch_sub_explicit(&dt->pend, out + 1, memory_order_acq_rel) != out + 1;
      }
      if (blk != bv) free(blk);
    }
  }
  if (args != argv) free(args);
  if (st == MZ_OK) return late ? 0 : MZ__ASYNC_ENDED;
  if (msg) mz__exec_set_message(e, msg);
  /* On a failure the peers get marks (task_ended). */
  mz__task_finish(op, st);
  return 0;
}

static void task_ended(mz_op *op, const mz_arg *values, int status, void *user) {
  (void)status;
  (void)user;
  struct dtask *dt = dtask_of(values[mz__op_t(op)->nparams - 1].u64);
  for (unsigned i = 0; i < dt->nout; i++) xfer_abandon(dt->out[i].x);
}

static const struct mz__async_ops task_ops = {.start = task_start, .ended = task_ended, .ends_inline = true};

/* The wrapper of user kernel uk: its parameters and a u64 (the struct
 * dtask), run on the CPU by task_start.  Created once per kernel. */
static int wrapper_of(mz_mpi *m, mz_kernel *uk, mz_kernel **out) {
  for (size_t i = 0; i < m->nwraps; i++)
    if (m->wraps[i].uk == uk) return (*out = m->wraps[i].wk) ? MZ_OK : MZ_ENOTSUP;
  if (m->nwraps == m->capwraps) {
    size_t nc = m->capwraps ? m->capwraps * 2 : 8;
    void *nw = realloc(m->wraps, nc * sizeof *m->wraps);
    if (!nw) return mz__set_error(m->rt, MZ_ENOMEM, "out of memory");
    m->wraps = nw;
    m->capwraps = nc;
  }
  const mz_kernel_spec *us = mz__kernel_spec(uk);
  size_t len = strlen(us->params) + 32;
  char *params = malloc(len);
  if (!params) return mz__set_error(m->rt, MZ_ENOMEM, "out of memory");
  snprintf(params, len, "%s, u64 mz_mpi_task", us->params);
  /* The same name: traces and perf models see the user's kernel. */
  mz_kernel_spec ks = {.name = us->name, .params = params, .cpu = {.fn = xfer_cpu, .user = m}};
  mz_kernel *wk = NULL;
  int st = mz_kernel_create(m->rt, &ks, &wk);
  free(params);
  /* Kept either way: a kernel that cannot be wrapped is tried once. */
  if (st == MZ_OK) mz__kernel_set_async(wk, &task_ops);
  else wk = NULL;
  atomic_fetch_add(&uk->refs, 1);
  m->wraps[m->nwraps].uk = uk;
  m->wraps[m->nwraps].wk = wk;
  m->nwraps++;
  *out = wk;
  return wk ? MZ_OK : st;
}

/* Never called: the node's work is started by xfer_start.  The kernel
 * needs a CPU function to be placed on the CPU. */
static int xfer_cpu(const mz_call *call) {
  (void)call;
  return MZ_ESTATE;
}

static bool under_launcher(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return true;
  return false;
}

static int mpi_error(mz_runtime *rt, int err, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", err);
  return mz__set_error(rt, MZ_EIO, "mz_mpi_create: %s failed: %s", what, s);
}

/* The count in environment variable name, from lo to hi, in *out (left
 * as it is when the variable is unset or empty); false, with *bad the
 * text, when it is not such a count. */
static bool env_count(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long *out,
                      const char **bad) {
  const char *s = getenv(name);
  if (!s || !*s) return true;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-' || v < lo || v > hi) {
    *bad = s;
    return false;
  }
  *out = v;
  return true;
}

int mz_mpi_create(mz_runtime *rt, mz_mpi **out) {
  if (out) *out = NULL;
  if (!out || !MZ__LIVE(rt, MZ__TAG_RUNTIME)) return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: NULL argument or runtime not live");
  if (mz__in_runtime_thread) return mz__set_error(rt, MZ_EDEADLK, "mz_mpi_create: called from a runtime thread");
  mz_mpi *m = calloc(1, sizeof *m);
  if (!m) return mz__set_error(rt, MZ_ENOMEM, "mz_mpi_create: out of memory");
  m->rt = rt;
  m->size = 1;
  m->tag_ub = INT32_MAX;
  unsigned long long v = 200;
  const char *bad = NULL;
  if (!env_count("MZ_MPI_SPIN_US", 0, 10000000ULL, &v, &bad)) {
    free(m);
    return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_SPIN_US must be 0 to 10000000 microseconds, not '%s'", bad);
  }
  m->spin_ns = (uint64_t)v * 1000u;
  v = SIZE_MAX;
  if (!env_count("MZ_MPI_STAGING_MAX", 0, SIZE_MAX, &v, &bad)) {
    free(m);
    return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_STAGING_MAX must be a count of bytes, not '%s'", bad);
  }
  m->stage_max = (size_t)v;
  v = MZ__MPI_RECV_WINDOW;
  if (!env_count("MZ_MPI_RECV_WINDOW", 1, 1000000ULL, &v, &bad)) {
    free(m);
    return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_RECV_WINDOW must be 1 to 1000000 receives, not '%s'",
                         bad);
  }
  m->rwin = (size_t)v;
  v = MZ__MPI_DIRECT_MAX;
  if (!env_count("MZ_MPI_DIRECT_MAX", 0, MZ__MPI_FOLD_MAX, &v, &bad)) {
    free(m);
    return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_DIRECT_MAX must be 0 to %d bytes, not '%s'",
                         MZ__MPI_FOLD_MAX, bad);
  }
  m->direct_max = (int)v;
  bool fold = true, serialized = false;
  const char *fv = getenv("MZ_MPI_FOLD"), *tv = getenv("MZ_MPI_THREAD"), *sv = getenv("MZ_MPI_SELF");
  m->self = true;
  if (sv && *sv) {
    if (strcmp(sv, "0") && strcmp(sv, "1")) {
      free(m);
      return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_SELF must be 0 or 1, not '%s'", sv);
    }
    m->self = sv[0] == '1';
  }
  if (fv && *fv) {
    if (strcmp(fv, "0") && strcmp(fv, "1")) {
      free(m);
      return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_FOLD must be 0 or 1, not '%s'", fv);
    }
    fold = fv[0] == '1';
  }
  if (tv && *tv) {
    if (strcmp(tv, "multiple") && strcmp(tv, "serialized")) {
      free(m);
      return mz__set_error(rt, MZ_EINVAL, "mz_mpi_create: MZ_MPI_THREAD must be multiple or serialized, not '%s'", tv);
    }
    serialized = tv[0] == 's';
  }
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_init(&m->qlock, NULL);
  pthread_cond_init(&m->qcond, NULL);
  pthread_mutex_init(&m->plock, NULL);
  int st = MZ_OK;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) {
    st = mz__set_error(rt, MZ_ESTATE, "mz_mpi_create: MPI was finalized already (it cannot start twice in a process)");
    goto fail;
  }
  m->use_mpi = inited || under_launcher();
  if (m->use_mpi) {
    int provided = 0, err;
    if (!inited) {
      err = MPI_Init_thread(NULL, NULL, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &provided);
      if (err != MPI_SUCCESS) {
        st = mpi_error(rt, err, "MPI_Init_thread");
        goto fail;
      }
      m->finalize = true;
    } else {
      MPI_Query_thread(&provided);
    }
    /* MZ_MPI_THREAD=serialized: as if MPI gave no more (the path such an
     * MPI takes, tested where it gives more). */
    m->multiple = provided >= MPI_THREAD_MULTIPLE && !serialized;
    /* The communication thread makes the calls, while the thread that
     * initialized MPI may be another: at least serialized. */
    if (provided < MPI_THREAD_SERIALIZED) {
      st = mz__set_error(rt, MZ_ENOTSUP, "mz_mpi_create: MPI gives thread level %d, maize needs MPI_THREAD_SERIALIZED or more",
                         provided);
      goto fail;
    }
    err = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (err != MPI_SUCCESS) {
      st = mpi_error(rt, err, "MPI_Comm_dup");
      goto fail;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    int *ub = NULL, flag = 0;
    if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag && ub) m->tag_ub = *ub;
  }
  for (int t = 0; t < MZ_DTYPE_COUNT && st == MZ_OK; t++) {
    char name[40], params[64];
    const char *tn = mz_dtype_name((mz_dtype)t);
    snprintf(name, sizeof name, "mpi.send.%s", tn);
    snprintf(params, sizeof params, "in %s[] x, u64 xfer", tn);
    mz_kernel_spec ks = {.name = name, .params = params, .cpu = {.fn = xfer_cpu, .user = m}};
    st = mz_kernel_create(rt, &ks, &m->ksend[t]);
    if (st != MZ_OK) break;
    snprintf(name, sizeof name, "mpi.recv.%s", tn);
    snprintf(params, sizeof params, "out %s[] x, u64 xfer", tn);
    ks.name = name;
    ks.params = params;
    st = mz_kernel_create(rt, &ks, &m->krecv[t]);
    if (st != MZ_OK) break;
    mz__kernel_set_async(m->ksend[t], &xfer_ops);
    mz__kernel_set_async(m->krecv[t], &xfer_ops);
  }
  if (st != MZ_OK) goto fail;
  if (m->use_mpi) {
    if (pthread_create(&m->thread, NULL, comm_main, m) != 0) {
      st = mz__set_error(rt, MZ_ENOMEM, "mz_mpi_create: cannot start the communication thread");
      goto fail;
    }
    m->thread_on = true;
    mz__thread_name(m->thread, "mpi");
    /* Transfers fold into the tasks where only the CPU runs them (another
     * device could hold a copy of a buffer that a folded receive bypasses). */
    m->fold = fold && rt->ndev == 1 && rt->share_dev == rt->devs[0];
    /* Idle workers test the requests (one context per runtime does). */
    if (m->multiple && !atomic_load(&rt->idle_ops)) {
      m->idle_hook = true;
      mz__idle_set(rt, &idle_ops, m);
    }
  }
  *out = m;
  return MZ_OK;
fail:
  mz_mpi_destroy(m);
  return st;
}

void mz_mpi_destroy(mz_mpi *m) {
  if (!m) return;
  /* The workers stop testing (idle_hook stays: the thread reads it). */
  if (m->idle_hook) mz__idle_set(m->rt, NULL, NULL);
  if (m->thread_on) {
    pthread_mutex_lock(&m->qlock);
    m->stop = true;
    pthread_cond_signal(&m->qcond);
    pthread_mutex_unlock(&m->qlock);
    pthread_join(m->thread, NULL);
  }
  for (int t = 0; t < MZ_DTYPE_COUNT; t++) {
    mz_kernel_destroy(m->ksend[t]);
    mz_kernel_destroy(m->krecv[t]);
  }
  for (size_t i = 0; i < m->nwraps; i++) {
    mz_kernel_destroy(m->wraps[i].wk);
    mz__kernel_unref(m->wraps[i].uk);
  }
  free(m->wraps);
  for (size_t i = 0; i < m->ndata; i++) mz_buffer_release(m->data[i]);
  free(m->data);
  free(m->owner);
  free(m->map);
  if (m->use_mpi && m->comm != MPI_COMM_NULL && m->comm != 0) MPI_Comm_free(&m->comm);
  if (m->finalize) MPI_Finalize();
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->qlock);
  pthread_cond_destroy(&m->qcond);
  pthread_mutex_destroy(&m->plock);
  free(m->preq);
  free(m->pcmd);
  free(m->pidx);
  free(m->psts);
  free(m);
}

int mz_mpi_rank(const mz_mpi *m) { return m ? m->rank : -1; }
int mz_mpi_size(const mz_mpi *m) { return m ? m->size : 0; }

/* id + 1 of b, 0 when not registered.  m->lock held. */
static size_t map_get(const mz_mpi *m, const mz_buffer *b) {
  if (!m->mapcap) return 0;
  for (size_t i = mz__ptr_slot(b, m->mapcap);; i = (i + 1) & (m->mapcap - 1)) {
    if (!m->map[i].b) return 0;
    if (m->map[i].b == b) return m->map[i].id1;
  }
}

static bool map_put(mz_mpi *m, const mz_buffer *b, size_t id1) {
  if ((m->ndata + 1) * 2 > m->mapcap) {
    size_t nc = m->mapcap ? m->mapcap * 2 : 64;
    void *nm = calloc(nc, sizeof *m->map);
    if (!nm) return false;
    void *old = m->map;
    size_t oc = m->mapcap;
    m->map = nm;
    m->mapcap = nc;
    for (size_t i = 0; i < oc; i++) {
      const mz_buffer *ob = ((__typeof__(m->map))old)[i].b;
      if (!ob) continue;
      size_t j = mz__ptr_slot(ob, nc);
      while (m->map[j].b) j = (j + 1) & (nc - 1);
      m->map[j] = ((__typeof__(m->map))old)[i];
    }
    free(old);
  }
  size_t j = mz__ptr_slot(b, m->mapcap);
  while (m->map[j].b) j = (j + 1) & (m->mapcap - 1);
  m->map[j].b = b;
  m->map[j].id1 = id1;
  return true;
}

int mz_mpi_register(mz_mpi *m, mz_buffer *b, int owner) {
  if (!m) return MZ_EINVAL;
  if (!MZ__LIVE(b, MZ__TAG_BUFFER) || b->rt != m->rt)
    return mz__set_error(m->rt, MZ_EINVAL, "mz_mpi_register: not a live buffer of the context's runtime");
  if (owner < 0 || owner >= m->size)
    return mz__set_error(m->rt, MZ_ERANGE, "mz_mpi_register: owner %d is not a rank (0 to %d)", owner, m->size - 1);
  if (b->parent || atomic_load(&b->has_tiles))
    return mz__set_error(m->rt, MZ_ENOTSUP, "mz_mpi_register: partitioned buffers and tiles cannot be distributed");
  if (mz_buffer_bytes(b) > (size_t)INT32_MAX)
    return mz__set_error(m->rt, MZ_ENOTSUP, "mz_mpi_register: a buffer over 2 GiB needs more than one MPI message");
  pthread_mutex_lock(&m->lock);
  int st = MZ_OK;
  if (map_get(m, b)) {
    st = mz__set_error(m->rt, MZ_EINVAL, "mz_mpi_register: buffer registered twice");
  } else if (m->ndata == m->capdata) {
    size_t nc = m->capdata ? m->capdata * 2 : 64;
    mz_buffer **nd = realloc(m->data, nc * sizeof *nd);
    if (nd) m->data = nd;
    int *no = nd ? realloc(m->owner, nc * sizeof *no) : NULL;
    if (no) m->owner = no;
    if (!no) st = mz__set_error(m->rt, MZ_ENOMEM, "mz_mpi_register: out of memory");
    else m->capdata = nc;
  }
  if (st == MZ_OK && !map_put(m, b, m->ndata + 1)) st = mz__set_error(m->rt, MZ_ENOMEM, "mz_mpi_register: out of memory");
  if (st == MZ_OK) {
    m->data[m->ndata] = mz_buffer_retain(b);
    m->owner[m->ndata] = owner;
    m->ndata++;
  }
  pthread_mutex_unlock(&m->lock);
  return st;
}

int mz_mpi_owner(const mz_mpi *m, const mz_buffer *b) {
  if (!m || !b) return MZ_EINVAL;
  pthread_mutex_lock((pthread_mutex_t *)&m->lock);
  size_t id1 = map_get(m, b);
  int o = id1 ? m->owner[id1 - 1] : MZ_EINVAL;
  pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
  return o;
}

int mz_mpi_block(size_t i, size_t n, int nranks) {
  if (n == 0 || i >= n || nranks < 1) return MZ_EINVAL;
  size_t r = (size_t)nranks, q = n / r, e = n % r;
  /* The first e blocks have q + 1 tiles. */
  size_t big = e * (q + 1);
  if (i < big) return (int)(i / (q + 1));
  return (int)(e + (i - big) / q);
}

int mz_mpi_cyclic(size_t i, int nranks) { return nranks < 1 ? MZ_EINVAL : (int)(i % (size_t)nranks); }

int mz_mpi_cyclic2d(size_t i, size_t j, int p, int q) {
  if (p < 1 || q < 1) return MZ_EINVAL;
  return (int)((i % (size_t)p) * (size_t)q + j % (size_t)q);
}

/* ---- distributed graphs ---- */

static int dg_fail(mz_dgraph *dg, int code, const char *fmt, ...) {
  if (dg->status == MZ_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dg->message, sizeof dg->message, fmt, ap);
    va_end(ap);
    dg->status = code;
  }
  return code;
}

/* Wait until every request of dg's runs on this rank has completed (a
 * node's, or a mark's, or a receive's whose node was canceled). */
static void drain(mz_dgraph *dg) {
  mz_mpi *m = dg->m;
  if (!atomic_load_explicit(&dg->inflight, memory_order_acquire)) return;
  if (m->self && m->multiple) {
    /* Tested here first (a wake-up of the communication thread takes the
     * core on a rank bound to one): most often the last sends of the
     * last run, out in a poll or two. */
    for (int i = 0; i < 64 && atomic_load_explicit(&dg->inflight, memory_order_acquire); i++) {
      if (!poll_pending(m, false, INT32_MAX, NULL)) sched_yield();
    }
    if (!atomic_load_explicit(&dg->inflight, memory_order_acquire)) return;
  }
  atomic_fetch_add(&m->urgent, 1);
  atomic_fetch_add(&m->uwait, 1);
  wake_comm(m);
  while (atomic_load_explicit(&dg->inflight, memory_order_acquire))
    nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
  atomic_fetch_sub(&m->uwait, 1);
  atomic_fetch_sub(&m->urgent, 1);
}

/* Run a collective command on the communication thread and wait for it. */
static int run_collective(mz_mpi *m, struct cmd *c) {
  struct waiter w = {.done = false};
  pthread_mutex_init(&w.lock, NULL);
  pthread_cond_init(&w.cond, NULL);
  c->w = &w;
  atomic_fetch_add(&m->uwait, 1);
  push_cmd(m, c);
  pthread_mutex_lock(&w.lock);
  while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
  pthread_mutex_unlock(&w.lock);
  atomic_fetch_sub(&m->uwait, 1);
  pthread_mutex_destroy(&w.lock);
  pthread_cond_destroy(&w.cond);
  return w.err;
}

int mz_dgraph_create(mz_mpi *m, mz_dgraph **out) {
  if (out) *out = NULL;
  if (!m || !out) return MZ_EINVAL;
  if (mz__in_runtime_thread) return mz__set_error(m->rt, MZ_EDEADLK, "mz_dgraph_create: called from a runtime thread");
  mz_dgraph *dg = calloc(1, sizeof *dg);
  if (!dg) return mz__set_error(m->rt, MZ_ENOMEM, "mz_dgraph_create: out of memory");
  dg->m = m;
  dg->vbytes = ((size_t)m->size + 7) / 8;
  if (pthread_mutex_init(&dg->slock, NULL)) {
    free(dg);
    return mz__set_error(m->rt, MZ_ENOMEM, "mz_dgraph_create: out of resources");
  }
  int st = mz_graph_create(m->rt, &dg->g);
  if (st != MZ_OK) {
    pthread_mutex_destroy(&dg->slock);
    free(dg);
    return st;
  }
  if (m->use_mpi) {
    struct cmd *c = new_cmd(C_IDUP);
    c->comm = m->comm;
    c->newcomm = &dg->comm;
    run_collective(m, c);
    dg->has_comm = true;
    MPI_Comm_set_errhandler(dg->comm, MPI_ERRORS_RETURN); /* a local call, no communication */
  }
  *out = dg;
  return MZ_OK;
}

void mz_dgraph_destroy(mz_dgraph *dg) {
  if (!dg) return;
  /* The nodes of the runs waited for have ended; the marks of canceled
   * sends and the receives of canceled receive nodes may still be in
   * flight (the peers send what they owe when their runs end). */
  drain(dg);
  mz_graph_destroy(dg->g);
  if (dg->has_comm) {
    /* Freeing the communicator is local; the communication thread makes
     * the call (MPI may give less than MPI_THREAD_MULTIPLE). */
    struct cmd *c = new_cmd(C_FREE);
    c->comm = dg->comm;
    c->reqs = dg->rreq;
    c->nreqs = (int)dg->nrreq;
    push_cmd(dg->m, c);
  }
  mz__arena_free(&dg->scratch);
  mz__arena_free(&dg->arena);
  free(dg->tios);
  free(dg->dts);
  free(dg->rcmd);
  free(dg->rnode);
  free(dg->wtask);
  free(dg->wparam);
  free(dg->rx);
  free(dg->xf);
  free(dg->tasks);
  free(dg->latest);
  free(dg->valid);
  for (struct sblock *b = dg->sall, *nb; b; b = nb) {
    nb = b->all;
    free(b);
  }
  pthread_mutex_destroy(&dg->slock);
  free(dg);
}

mz_graph *mz_dgraph_local(mz_dgraph *dg) { return dg ? dg->g : NULL; }
int mz_dgraph_status(const mz_dgraph *dg) { return dg ? dg->status : MZ_EINVAL; }
const char *mz_dgraph_message(const mz_dgraph *dg) { return dg ? dg->message : "NULL distributed graph"; }

void mz_dgraph_transfers(const mz_dgraph *dg, size_t *sends, size_t *recvs) {
  if (sends) *sends = dg ? dg->nsends : 0;
  if (recvs) *recvs = dg ? dg->nrecvs : 0;
}

void mz_dgraph_staging(const mz_dgraph *dg, size_t *send_bytes, size_t *recv_bytes) {
  size_t sb = 0, rb = 0;
  if (dg) {
    pthread_mutex_lock((pthread_mutex_t *)&dg->slock);
    sb = dg->sbytes;
    rb = dg->rbytes;
    pthread_mutex_unlock((pthread_mutex_t *)&dg->slock);
  }
  if (send_bytes) *send_bytes = sb;
  if (recv_bytes) *recv_bytes = rb;
}

/* Grow the model to cover every registered data. */
static int model_fit(mz_dgraph *dg) {
  mz_mpi *m = dg->m;
  pthread_mutex_lock(&m->lock);
  size_t n = m->ndata;
  pthread_mutex_unlock(&m->lock);
  if (n <= dg->nmodel) return MZ_OK;
  int *l = realloc(dg->latest, n * sizeof *l);
  if (!l) return MZ_ENOMEM;
  dg->latest = l;
  uint8_t *v = realloc(dg->valid, n * dg->vbytes);
  if (!v) return MZ_ENOMEM;
  dg->valid = v;
  struct dtask **wt = realloc(dg->wtask, n * sizeof *wt);
  if (!wt) return MZ_ENOMEM;
  dg->wtask = wt;
  unsigned *wp = realloc(dg->wparam, n * sizeof *wp);
  if (!wp) return MZ_ENOMEM;
  dg->wparam = wp;
  struct xfer **rx = realloc(dg->rx, n * sizeof *rx);
  if (!rx) return MZ_ENOMEM;
  dg->rx = rx;
  for (size_t d = dg->nmodel; d < n; d++) {
    l[d] = m->owner[d];
    wt[d] = NULL;
    wp[d] = 0;
    rx[d] = NULL;
    memset(v + d * dg->vbytes, 0, dg->vbytes);
    v[d * dg->vbytes + (size_t)l[d] / 8] |= (uint8_t)(1u << (l[d] % 8));
  }
  dg->nmodel = n;
  return MZ_OK;
}

static bool is_valid(const mz_dgraph *dg, size_t d, int r) {
  return dg->valid[d * dg->vbytes + (size_t)r / 8] & (1u << (r % 8));
}

static void set_written(mz_dgraph *dg, size_t d, int r) {
  dg->latest[d] = r;
  dg->wtask[d] = NULL;
  dg->rx[d] = NULL;
  memset(dg->valid + d * dg->vbytes, 0, dg->vbytes);
  dg->valid[d * dg->vbytes + (size_t)r / 8] |= (uint8_t)(1u << (r % 8));
}

/* A copy of array old (n elements of size elem) with room for cap, from
 * arena a (the old one stays there until the arena is freed); NULL when
 * out of memory. */
static void *arena_grow(struct mz__arena *a, const void *old, size_t n, size_t cap, size_t elem) {
  void *p = mz__arena_alloc(a, cap * elem);
  if (p && n) memcpy(p, old, n * elem);
  return p;
}

static int add_task(mz_dgraph *dg, mz_op *op) {
  if (dg->ntasks == dg->captasks) {
    size_t nc = dg->captasks ? dg->captasks * 2 : 64;
    mz_op **nt = realloc(dg->tasks, nc * sizeof *nt);
    if (!nt) return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
    dg->tasks = nt;
    dg->captasks = nc;
  }
  dg->tasks[dg->ntasks++] = op;
  return MZ_OK;
}

/* The send or receive node of transfer x. */
static int xfer_node(mz_dgraph *dg, struct xfer *x) {
  mz_mpi *m = dg->m;
  mz_buffer *b = m->data[x->data];
  mz_dtype t = mz_buffer_shape(b)->dtype;
  mz_op *args = mz_zip(dg->g, 2, (mz_op *[]){mz_value(dg->g, b), mz_u64(dg->g, (uint64_t)(uintptr_t)x)});
  mz_op *op = mz_apply(dg->g, x->send ? m->ksend[t] : m->krecv[t], args, NULL);
  x->has_node = true;
  int st = mz_graph_status(dg->g);
  if (st != MZ_OK) return dg_fail(dg, st, "mz_dgraph_apply: %s", mz_graph_message(dg->g));
  return add_task(dg, op);
}

/* Plan the transfer of data d's latest value to rank dst, and build this
 * rank's side of it.  rfold: the receiving side has a reader that can wait
 * on it as a gate (no receive node).  *out: this rank's transfer (NULL
 * when this rank has no side in it). */
static int plan_transfer(mz_dgraph *dg, size_t d, int dst, bool rfold, struct xfer **out) {
  mz_mpi *m = dg->m;
  if (out) *out = NULL;
  int src = dg->latest[d];
  int tag = dg->ntags++;
  if (tag < 0 || tag > m->tag_ub) return dg_fail(dg, MZ_ENOTSUP, "mz_dgraph_apply: more transfers than MPI tags");
  dg->valid[d * dg->vbytes + (size_t)dst / 8] |= (uint8_t)(1u << (dst % 8));
  if (m->rank != src && m->rank != dst) return MZ_OK;
  if (dg->nxf == dg->capxf) {
    size_t nc = dg->capxf ? dg->capxf * 2 : 64;
    struct xfer **nx = realloc(dg->xf, nc * sizeof *nx);
    if (!nx) return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
    dg->xf = nx;
    dg->capxf = nc;
  }
  /* On cache lines of its own: a send from a task touches the first.
   * (Zeroed: an arena block.) */
  unsigned char *xb = mz__arena_alloc(&dg->arena, (sizeof(struct xfer) + 63) / 64 * 64 + 56);
  if (!xb) return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
  struct xfer *x = (struct xfer *)(void *)(xb + (-(uintptr_t)xb & 63));
  x->dg = dg;
  x->send = m->rank == src;
  x->peer = x->send ? dst : src;
  x->tag = tag;
  x->data = d;
  mz_buffer *b = m->data[d];
  x->bytes = (int)mz_buffer_bytes(b);
  x->c.x = x;
  x->c.peer = x->peer;
  x->c.tag = tag;
  x->c.comm = dg->comm;
  x->c.bytes = x->bytes;
  atomic_init(&x->state, X_ENDED);
  struct dtask *prod = x->send ? dg->wtask[d] : NULL;
  x->fold = x->send ? prod && x->bytes <= MZ__MPI_FOLD_MAX : rfold && x->bytes <= MZ__MPI_FOLD_MAX;
  x->direct = !x->send && x->bytes > MZ__MPI_FOLD_MAX;
  /* Without MPI_THREAD_MULTIPLE the communication thread posts it: the
   * producer would wait for that thread, where a staged send lets it end. */
  x->dsend = x->send && x->fold && m->multiple && x->bytes <= m->direct_max;
  while (((size_t)1 << x->scls) < (size_t)x->bytes) x->scls++;
  if (!x->send && !x->direct) {
    if (!(x->stage = mz__arena_alloc(&dg->arena, (size_t)x->bytes))) /* at least 8 bytes */
      return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
    x->c.kind = C_RECV; /* a staged receive's command is the same every run */
    x->c.buf = x->stage;
  }
  dg->xf[dg->nxf++] = x;
  if (x->send) dg->nsends++;
  else dg->nrecvs++;
  if (!x->send && !x->direct) {
    pthread_mutex_lock(&dg->slock);
    dg->rbytes += x->bytes ? (size_t)x->bytes : 1;
    pthread_mutex_unlock(&dg->slock);
  }
  if (out) *out = x;
  if (x->fold && x->send) {
    if (prod->nout == prod->capout) {
      unsigned nc = prod->capout ? prod->capout * 2 : 2;
      struct tio *no = arena_grow(&dg->scratch, prod->out, prod->nout, nc, sizeof *no);
      if (!no) return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
      prod->out = no;
      prod->capout = nc;
    }
    prod->out[prod->nout++] = (struct tio){dg->wparam[d], x->dsend, x, NULL};
    prod->ndirect += x->dsend;
    return MZ_OK;
  }
  if (x->fold) {
    dg->rx[d] = x;
    return MZ_OK;
  }
  return xfer_node(dg, x);
}

mz_op *mz_dgraph_apply(mz_dgraph *dg, mz_kernel *k, unsigned n, const mz_darg args[], const mz_launch *launch,
                       int rank) {
  if (!dg || dg->status != MZ_OK) return NULL;
  mz_mpi *m = dg->m;
  if (dg->frozen) {
    dg_fail(dg, MZ_ESTATE, "mz_dgraph_apply: the graph has run; it is frozen");
    return NULL;
  }
  if (!MZ__LIVE(k, MZ__TAG_KERNEL) || k->rt != m->rt || (n && !args)) {
    dg_fail(dg, MZ_EINVAL, "mz_dgraph_apply: NULL or foreign kernel, or NULL arguments");
    return NULL;
  }
  if (n == 0) {
    dg_fail(dg, MZ_EINVAL, "mz_dgraph_apply: a task needs at least one argument");
    return NULL;
  }
  if (n != k->nuser) {
    dg_fail(dg, MZ_EINVAL, "mz_dgraph_apply: kernel %s takes %u arguments, given %u", k->spec.name, k->nuser, n);
    return NULL;
  }
  if (rank != MZ_MPI_OWNER && (rank < 0 || rank >= m->size)) {
    dg_fail(dg, MZ_ERANGE, "mz_dgraph_apply: rank %d is not a rank (0 to %d)", rank, m->size - 1);
    return NULL;
  }
  if (model_fit(dg) != MZ_OK) {
    dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
    return NULL;
  }
  /* The arguments' data ids (id + 1; 0 for scalars) and directions. */
  size_t ids[64];
  enum mz__dir dirs[64];
  unsigned pidx[64]; /* each argument's parameter index */
  if (n > 64) {
    dg_fail(dg, MZ_ENOTSUP, "mz_dgraph_apply: more than 64 arguments");
    return NULL;
  }
  int first_w = -1, first_r = -1;
  unsigned a = 0;
  /* One hold of the registry's lock for all the arguments' ids and owners
   * (a lock pair was about a twentieth of an apply's cost). */
  pthread_mutex_lock(&m->lock);
  for (unsigned p = 0; p < k->nparams; p++) {
    enum mz__dir dir = k->params[p].dir;
    if (dir == MZ__SIZEOF || dir == MZ__WIDTHOF || dir == MZ__HEIGHTOF) continue;
    if (dir == MZ__OUTLIKE) {
      pthread_mutex_unlock(&m->lock);
      dg_fail(dg, MZ_ENOTSUP, "mz_dgraph_apply: kernel %s has an outlike parameter", k->spec.name);
      return NULL;
    }
    dirs[a] = dir;
    pidx[a] = p;
    ids[a] = 0;
    if (dir == MZ__SCALAR) {
      if (args[a].buf) {
        pthread_mutex_unlock(&m->lock);
        dg_fail(dg, MZ_ESHAPE, "mz_dgraph_apply: argument %u of %s is a scalar, given a buffer", a, k->spec.name);
        return NULL;
      }
    } else {
      ids[a] = args[a].buf ? map_get(m, args[a].buf) : 0;
      if (!ids[a]) {
        pthread_mutex_unlock(&m->lock);
        dg_fail(dg, MZ_EINVAL, "mz_dgraph_apply: argument %u of %s is not a registered buffer", a, k->spec.name);
        return NULL;
      }
      int owner = m->owner[ids[a] - 1];
      if (dir != MZ__IN && first_w < 0) first_w = owner;
      if (first_r < 0) first_r = owner;
    }
    a++;
  }
  pthread_mutex_unlock(&m->lock);
  int exec = rank != MZ_MPI_OWNER ? rank : first_w >= 0 ? first_w : first_r >= 0 ? first_r : 0;
  bool here = m->rank == exec;
  /* Here, a CPU-only runtime runs the task through its kernel's wrapper,
   * so that its transfers fold into it (see the top). */
  mz_kernel *wk = NULL;
  struct dtask *dt = NULL;
  if (here && m->fold && n < 64 && k->spec.cpu.fn) {
    /* A kernel that cannot be wrapped (a parameter named as the wrapper's
     * own) runs as it is, its transfers as nodes. */
    if (wrapper_of(m, k, &wk) == MZ_OK) dt = mz__arena_alloc(&dg->arena, sizeof *dt);
  }
  if (wk) {
    if (dt && dg->ndts == dg->capdts) {
      size_t nc = dg->capdts ? dg->capdts * 2 : 64;
      struct dtask **nd = realloc(dg->dts, nc * sizeof *nd);
      if (nd) {
        dg->dts = nd;
        dg->capdts = nc;
      }
    }
    if (!dt || dg->ndts == dg->capdts) {
      dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
      return NULL;
    }
    dg->dts[dg->ndts++] = dt;
    dt->uk = k;
    dt->fn = k->spec.cpu.fn;
    dt->fn_user = k->spec.cpu.user;
  }
  /* Reads of values not on exec: a transfer from the rank holding them.
   * A wrapped task reads a value it does not also write from the
   * transfer's staging memory, gated on its message; any other reader
   * needs the value in the buffer: a receive node. */
  for (unsigned i = 0; i < n; i++) {
    if (!ids[i] || (dirs[i] != MZ__IN && dirs[i] != MZ__INOUT)) continue;
    size_t d = ids[i] - 1;
    bool writes = false;
    for (unsigned j = 0; j < n; j++) writes |= ids[j] == ids[i] && dirs[j] != MZ__IN;
    bool gated = dt && !writes && mz_buffer_bytes(m->data[d]) <= MZ__MPI_FOLD_MAX;
    struct xfer *x = NULL;
    if (!is_valid(dg, d, exec)) {
      if (plan_transfer(dg, d, exec, gated, &x) != MZ_OK) return NULL;
    } else if (here && dg->rx[d]) {
      x = dg->rx[d];
      if (!gated) {
        /* From now on in the buffer too. */
        if (!x->has_node && xfer_node(dg, x) != MZ_OK) return NULL;
        dg->rx[d] = NULL;
        x = NULL;
      }
    }
    if (!here || !x || !gated) continue;
    if (dt->nin == dt->capin) {
      unsigned nc = dt->capin ? dt->capin * 2 : 4;
      struct tio *ni = arena_grow(&dg->scratch, dt->in, dt->nin, nc, sizeof *ni);
      if (!ni) {
        dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
        return NULL;
      }
      dt->in = ni;
      dt->capin = nc;
    }
    dt->in[dt->nin++] = (struct tio){pidx[i], false, x, x->stage};
  }
  mz_op *res = NULL;
  if (here) {
    mz_op *ops[65];
    for (unsigned i = 0; i < n; i++)
      ops[i] = ids[i] ? mz_value(dg->g, args[i].buf) : mz_scalar(dg->g, args[i].dtype, &args[i].value);
    if (dt) ops[n] = mz_u64(dg->g, (uint64_t)(uintptr_t)dt);
    unsigned na = n + (dt != NULL);
    mz_op *z = na == 1 ? ops[0] : mz_zip(dg->g, na, ops);
    res = mz_apply(dg->g, dt ? wk : k, z, launch);
    int st = mz_graph_status(dg->g);
    if (st != MZ_OK) {
      dg_fail(dg, st, "mz_dgraph_apply: %s", mz_graph_message(dg->g));
      return NULL;
    }
    if (add_task(dg, res) != MZ_OK) return NULL;
    /* One gate per transfer it reads. */
    for (unsigned i = 0; dt && i < dt->nin; i++) {
      struct xfer *x = dt->in[i].x;
      bool seen = false;
      for (unsigned j = 0; j < i && !seen; j++) seen = dt->in[j].x == x;
      if (seen) continue;
      struct mz__tcold *gc = mz__task_cold(mz__op_t(res));
      if (!gc) {
        dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
        return NULL;
      }
      if (x->nreaders == x->capreaders) {
        size_t nc = x->capreaders ? x->capreaders * 2 : 2;
        mz_op **nr = arena_grow(&dg->arena, x->readers, x->nreaders, nc, sizeof *nr);
        if (!nr) {
          dg_fail(dg, MZ_ENOMEM, "mz_dgraph_apply: out of memory");
          return NULL;
        }
        x->readers = nr;
        x->capreaders = nc;
      }
      x->readers[x->nreaders++] = res;
      gc->ngates++;
    }
  }
  if (dt) {
    dt->node = res;
    /* The look-ahead's link: this task follows the wrapped one here that
     * wrote a value it reads (the first such reader only). */
    for (unsigned i = 0; i < n; i++) {
      struct dtask *w = ids[i] && dirs[i] != MZ__OUT ? dg->wtask[ids[i] - 1] : NULL;
      if (w && w != dt && !w->next && dg->latest[ids[i] - 1] == m->rank) w->next = dt;
    }
  }
  for (unsigned i = 0; i < n; i++)
    if (ids[i] && dirs[i] != MZ__IN) {
      set_written(dg, ids[i] - 1, exec);
      if (dt) {
        dg->wtask[ids[i] - 1] = dt;
        dg->wparam[ids[i] - 1] = pidx[i];
      }
    }
  return res;
}

static int noop_host(const mz_call *call) {
  (void)call;
  return 0;
}

/* Freeze the plan: values written away from their owner go home, and the
 * root joins this rank's tasks. */
static int freeze(mz_dgraph *dg) {
  if (dg->frozen) return dg->status;
  dg->frozen = true;
  if (model_fit(dg) != MZ_OK) return dg_fail(dg, MZ_ENOMEM, "mz_dgraph_run: out of memory");
  for (size_t d = 0; d < dg->nmodel && dg->status == MZ_OK; d++)
    if (dg->latest[d] != dg->m->owner[d]) {
      int dst = dg->m->owner[d];
      if (plan_transfer(dg, d, dst, false, NULL) == MZ_OK) set_written(dg, d, dst);
    }
  if (dg->status != MZ_OK) return dg->status;
  if (dg->ntasks == 0) {
    mz_op *h = mz_host(dg->g, noop_host, NULL, NULL);
    if (mz_graph_status(dg->g) != MZ_OK) return dg_fail(dg, mz_graph_status(dg->g), "mz_dgraph_run: %s", mz_graph_message(dg->g));
    if (add_task(dg, h) != MZ_OK) return dg->status;
  }
  dg->root = mz_join(dg->g, (unsigned)dg->ntasks, dg->tasks);
  if (mz_graph_status(dg->g) != MZ_OK) return dg_fail(dg, mz_graph_status(dg->g), "mz_dgraph_run: %s", mz_graph_message(dg->g));
  return MZ_OK;
}

/* The lines dt's next task (dt->next) touches first, for task_start to
 * ask of the cache while dt's function runs: a step of a fine distributed
 * stencil touches some 25 lines of its own (each step's task and records
 * are its own), and those of its records missed between the message's
 * arrival and its kernel (the next task cannot start before the message,
 * but its lines need not wait for it).  Its wrapper record and lists, the
 * staging memory its inputs land in, the transfers its outputs go out by,
 * its node's op and task lines and parameter slots, its buffers' records.
 * Computed once the plan is fixed (plan_receives: the lists have their
 * last place); all of it stays where it is while the graph lives (a hint
 * to a freed buffer's record would be harmless: a prefetch never faults).
 * The list costs a wrapped task 128 bytes; finding the same lines from
 * the next record at each step (two pointers a task) read its fields
 * before the kernel, and a fine step (1 iteration) came out slower than
 * without any look-ahead (1.50 against 1.37 times plain MPI, medians of
 * 15 alternating rounds), the list's 1.19. */
static void plan_ahead(struct dtask *dt) {
  const struct dtask *nx = dt->next;
  unsigned k = 0;
  if (!nx) return;
#define AHEAD(p)                                           \
  do {                                                     \
    if ((p) && k < MZ__MPI_AHEAD) dt->ahead[k++] = (p);    \
  } while (0)
  /* The record itself spans three or four lines (this list is in it). */
  for (size_t o = 0; o < sizeof *nx; o += 64) AHEAD((const char *)nx + o);
  AHEAD((const char *)nx + sizeof *nx - 1);
  AHEAD(nx->in);
  AHEAD(nx->out);
  for (unsigned i = 0; i < nx->nin && i < 2; i++) AHEAD(nx->in[i].stage);
  for (unsigned i = 0; i < nx->nout && i < 2; i++) AHEAD(nx->out[i].x);
  if (nx->node) {
    const struct mz__task *t = mz__task_of(nx->node);
    AHEAD((const void *)nx->node);
    AHEAD((const char *)t + 64);
    AHEAD(mz__task_values(t) + t->nparams - 1);
    const mz_kernel *kern = mz__task_kernel(t);
    for (uint64_t mk = kern && t->nparams <= 64 ? kern->bufmask : 0; mk; mk &= mk - 1) {
      const mz_buffer *b = mz__task_values(t)[__builtin_ctzll(mk)].p;
      if (b) AHEAD(&b->shape);
    }
  }
#undef AHEAD
  dt->nahead = k;
}

/* At the first run: the staged receives' persistent requests (in plan
 * order: rk), their commands in that order, those with a node, and the
 * count of folded receives.  The plan is fixed by then. */
static bool plan_receives(mz_dgraph *dg) {
  dg->planned = true;
  /* The tasks' lists into one array, in the order they run (a task's own
   * lists were each a cache line of their own); kept where out of memory.
   * The graph is frozen: they no longer grow. */
  size_t nt = 0;
  for (size_t i = 0; i < dg->ndts; i++) nt += dg->dts[i]->nin + dg->dts[i]->nout;
  if (nt && (dg->tios = malloc(nt * sizeof *dg->tios)) != NULL) {
    struct tio *o = dg->tios;
    for (size_t i = 0; i < dg->ndts; i++) {
      struct dtask *dt = dg->dts[i];
      if (dt->nin) memcpy(o, dt->in, dt->nin * sizeof *o);
      dt->in = o;
      o += dt->nin;
      if (dt->nout) memcpy(o, dt->out, dt->nout * sizeof *o);
      dt->out = o;
      o += dt->nout;
    }
    mz__arena_free(&dg->scratch);
  }
  dg->nfold = 0;
  size_t nr = 0, nn = 0;
  for (size_t i = 0; i < dg->nxf; i++) {
    const struct xfer *x = dg->xf[i];
    if (x->send || x->direct) continue;
    nr++;
    nn += x->has_node;
    dg->nfold += x->fold;
  }
  /* The list of receives with a node is needed (their state is reset per
   * run): without it the graph fails (its receives are still posted, so
   * that the peers' messages are taken). */
  bool ok = !nn || (dg->rnode = malloc(nn * sizeof *dg->rnode)) != NULL;
  if (nr && (dg->rreq = malloc(nr * sizeof *dg->rreq)) != NULL && (dg->rcmd = malloc(nr * sizeof *dg->rcmd)) == NULL) {
    free(dg->rreq);
    dg->rreq = NULL;
  }
  for (size_t i = 0; i < dg->nxf; i++) {
    struct xfer *x = dg->xf[i];
    if (x->send || x->direct) continue;
    if (x->has_node && dg->rnode) dg->rnode[dg->nrnode++] = x;
    if (!dg->rreq) continue;
    x->rk = dg->nrreq++;
    dg->rreq[x->rk] = MPI_REQUEST_NULL;
    dg->rcmd[x->rk] = &x->c;
  }
  for (size_t i = 0; i < dg->ndts; i++) plan_ahead(dg->dts[i]);
  return ok;
}

/* A run starts: post its staged receives.  The sends and direct receives
 * need nothing (a new epoch); a staged receive's command is the same
 * every run, its state reset only where a node reads it.
 *
 * With MPI_THREAD_MULTIPLE, the first m->rwin in plan order (from an array
 * of their commands: a pass over a run's transfers here was a cache miss
 * or two each), and each time one completes the next, posted at the next
 * poll (owe_locked, refill_locked): in an idle worker or the communication
 * thread, not between a message and its reader.  Posting every receive of
 * the run here (persistent requests, one MPI_Startall) cost Open MPI a
 * request object per receive, each a cold line or more at its start and
 * again when its message came (11 level-1 misses a step of a re-run
 * stencil); a few in flight at once reuse the same few.  A message that
 * comes before its receive is posted waits in MPI (matched by source, tag
 * and communicator, in order), at the cost of a copy.  No receive waits
 * for one after it: a transfer's data depends only on transfers planned
 * before it (its tag is its place in the plan, the same on every rank), so
 * the receives before it complete, and it is posted.
 *
 * Without it, the communication thread posts all of them at once (a
 * persistent request each: post()). */
static void start_transfers(mz_dgraph *dg) {
  mz_mpi *m = dg->m;
  dg->epoch++;
  atomic_store_explicit(&dg->early, NULL, memory_order_relaxed); /* no request of the graph is in flight */
  for (size_t i = 0; i < dg->nrnode; i++) atomic_store_explicit(&dg->rnode[i]->state, X_POSTED, memory_order_relaxed);
  if (m->multiple && dg->rreq && dg->nrreq) {
    atomic_fetch_add_explicit(&dg->inflight, (long)dg->nrreq, memory_order_relaxed); /* one add for all */
    size_t n = dg->nrreq < m->rwin ? dg->nrreq : m->rwin;
    pthread_mutex_lock(&m->plock);
    dg->rwin = true;
    dg->rowed = 0;
    pending_reserve(m, (int)n);
    for (dg->rpost = 0; dg->rpost < n; dg->rpost++) post_recv_locked(m, dg->rcmd[dg->rpost]);
    atomic_store_explicit(&m->npend, m->pn + m->nowed, memory_order_relaxed);
    pthread_mutex_unlock(&m->plock);
    return;
  }
  /* One at a time (through the communication thread without
   * MPI_THREAD_MULTIPLE: post() starts a persistent request where there is
   * one). */
  for (size_t i = 0; i < dg->nxf; i++) {
    struct xfer *x = dg->xf[i];
    if (x->send || x->direct) continue; /* a direct receive is posted by its node */
    atomic_fetch_add_explicit(&dg->inflight, 1, memory_order_relaxed);
    if (!m->multiple) {
      push_cmd(m, &x->c);
    } else {
      pthread_mutex_lock(&m->plock);
      post(m, &x->c);
      add_pending_locked(m, &x->c);
      pthread_mutex_unlock(&m->plock);
    }
  }
}

/* The first half of a run's start: the graph frozen and planned, the
 * last run of it ended and its requests completed.  Returns the sticky
 * error or MZ_OK. */
static int run_prepare(mz_dgraph *dg) {
  mz_runtime *rt = dg->m->rt;
  int st = freeze(dg);
  /* No node of the previous run may still use a transfer, nor any of its
   * requests be in flight: they are reset for this run. */
  pthread_mutex_lock(&rt->lock);
  while (dg->g->active) pthread_cond_wait(&rt->idle, &rt->lock);
  pthread_mutex_unlock(&rt->lock);
  drain(dg);
  if (!dg->planned && !plan_receives(dg) && st == MZ_OK) st = dg_fail(dg, MZ_ENOMEM, "mz_dgraph_run: out of memory");
  return st;
}

/* The second half: the receives posted, the local graph run.  held: this
 * thread holds a CPU worker and tests the requests itself next, so the
 * communication thread is not woken. */
static int run_launch(mz_dgraph *dg, const char *policy, mz_future **out, int st, bool held) {
  mz_runtime *rt = dg->m->rt;
  if (dg->m->use_mpi) {
    atomic_store_explicit(&dg->m->last_done, mz__now_ns(), memory_order_relaxed);
    start_transfers(dg);
  }
  if (st == MZ_OK) st = mz_graph_run(dg->g, dg->root, policy, out);
  else mz__set_error(rt, st, "mz_dgraph_run: %s", dg->message);
  /* The run's counters are set: the gates of what came may open. */
  if (st == MZ_OK && dg->m->use_mpi) {
    /* Not when a worker spins: it tests, and asks once it parks (urgent
     * is counted first, so one of the two sees the other); a wake-up here
     * can take the core from this thread on a rank bound to one core. */
    if (gates_open(dg) && !held && (!dg->m->idle_hook || atomic_load(&dg->m->spinning) == 0)) wake_comm(dg->m);
  }
  dg->run_status = st;
  /* Nothing runs here: the peers still get one message per send (the
   * receives posted take theirs). */
  if (st != MZ_OK && dg->m->use_mpi)
    for (size_t i = 0; i < dg->nxf; i++) xfer_abandon(dg->xf[i]);
  return st;
}

int mz_dgraph_run(mz_dgraph *dg, const char *policy, mz_future **out) {
  if (out) *out = NULL;
  if (!dg || !out) return MZ_EINVAL;
  if (mz__in_runtime_thread) return mz__set_error(dg->m->rt, MZ_EDEADLK, "mz_dgraph_run: called from a runtime thread");
  return run_launch(dg, policy, out, run_prepare(dg), false);
}

static bool future_done(void *f) { return !f || mz_future_poll(f) != MZ_EAGAIN; }

/* The runtime's CPU device when this thread may run a run's nodes on it
 * (self-driven: with MPI, MPI_THREAD_MULTIPLE and the idle workers' hook,
 * so that it tests the requests as a worker does), else NULL. */
static struct mz_device *self_device(const mz_mpi *m) {
  struct mz_device *d = m->rt->share_dev;
  if (!m->self || (m->use_mpi && !m->idle_hook) || !d || !d->ops->hold || !d->ops->help_held || mz_device_is_dead(d))
    return NULL;
  return d;
}

int mz_dgraph_run_wait(mz_dgraph *dg, const char *policy) {
  if (!dg) return MZ_EINVAL;
  mz_mpi *m = dg->m;
  if (mz__in_runtime_thread) return mz__set_error(m->rt, MZ_EDEADLK, "mz_dgraph_run_wait: called from a runtime thread");
  int st = run_prepare(dg);
  /* After the last run ended: its nodes may have needed the worker. */
  struct mz_device *cpu = st == MZ_OK ? self_device(m) : NULL;
  int token = cpu ? cpu->ops->hold(cpu) : 0;
  mz_future *f = NULL;
  st = run_launch(dg, policy, &f, st, token != 0);
  /* Every token is given back, even with no run (f NULL: done at once). */
  if (token) cpu->ops->help_held(cpu, token, future_done, f);
  int res = mz_dgraph_wait(dg, f);
  mz_future_destroy(f);
  return res;
}

/* The status exchange of mz_dgraph_wait made by this thread: the
 * collective posted and tested here, this rank's other requests tested
 * meanwhile (a peer may wait on them); polls without pausing (yielding
 * the CPU) for spin_ns, then every MZ__MPI_NAP_US. */
static void self_collective(mz_mpi *m, MPI_Comm comm, int *mine, int *all) {
  MPI_Request req;
  int err = MPI_Iallgather(mine, 1, MPI_INT, all, 1, MPI_INT, comm, &req);
  if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Iallgather");
  uint64_t t0 = 0;
  for (unsigned i = 0;; i++) {
    int done = 0;
    err = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS) comm_fail(m, err, "MPI_Test");
    if (done) return;
    poll_pending(m, true, MZ__MPI_WINDOW, NULL);
    if (i % 16) {
      sched_yield();
      continue;
    }
    uint64_t now = mz__now_ns();
    if (!t0) t0 = now;
    if (now - t0 < m->spin_ns) sched_yield();
    else nanosleep(&(struct timespec){.tv_nsec = MZ__MPI_NAP_US * 1000L}, NULL);
  }
}

int mz_dgraph_wait(mz_dgraph *dg, mz_future *f) {
  if (!dg) return MZ_EINVAL;
  mz_mpi *m = dg->m;
  if (mz__in_runtime_thread) return mz__set_error(m->rt, MZ_EDEADLK, "mz_dgraph_wait: called from a runtime thread");
  int mine = f ? mz_future_wait(f) : dg->run_status != MZ_OK ? dg->run_status : MZ_EINVAL;
  if (!m->use_mpi) return mine;
  int *all = calloc((size_t)m->size, sizeof *all);
  if (!all) {
    /* The peers wait for this rank's status: there is no answer without it. */
    fprintf(stderr, "maize: out of memory in mz_dgraph_wait; aborting\n");
    abort();
  }
  if (m->self && m->multiple) {
    self_collective(m, dg->comm, &mine, all);
  } else {
    struct cmd *c = new_cmd(C_COLL);
    c->sendv = &mine;
    c->buf = all;
    c->comm = dg->comm;
    run_collective(m, c);
  }
  int res = MZ_OK;
  for (int r = 0; r < m->size; r++)
    if (all[r] != MZ_OK && all[r] != MZ_ECANCELED) {
      res = all[r];
      break;
    }
  if (res == MZ_OK)
    for (int r = 0; r < m->size; r++)
      if (all[r] == MZ_ECANCELED) res = MZ_ECANCELED;
  free(all);
  return res;
}
