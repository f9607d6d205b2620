/* maize internals: kernels (src/kernel.c).  A kernel is made by
 * mz_kernel_create, referenced by every graph that uses it, and prepared
 * once per device on first use (its lock guards the per-device handles). */
#ifndef MZ_KERNEL_H
#define MZ_KERNEL_H

#include <pthread.h>
#include <stdbool.h>

#include "maize.h"

enum mz__dir {
  MZ__SCALAR,     /* given by the caller */
  MZ__IN,
  MZ__OUT,
  MZ__INOUT,
  MZ__OUTLIKE,    /* new buffer shaped like ref */
  MZ__SIZEOF,     /* computed scalars */
  MZ__WIDTHOF,
  MZ__HEIGHTOF,
};

/* Whether a parameter of direction d is a buffer (else a scalar, given
 * or computed). */
static inline bool mz__dir_is_buffer(enum mz__dir d) { return d >= MZ__IN && d <= MZ__OUTLIKE; }

/* The most parameters (and buffers) a task holds: its counts are 16 bits
 * (struct mz__task).  mz_kernel_create, mz_host and mz_partition refuse
 * more. */
#define MZ__TASK_MAX_PARAMS 65535u

struct mz__param {
  enum mz__dir dir;
  mz_dtype dtype;
  int ref;        /* referenced parameter for outlike/sizeof/widthof/heightof */
  unsigned char ndim; /* dims a buffer must have ("f32[2]"); 0: 1 to 3 */
  char name[32];
};

struct mz_kernel;
/* Whether parameter i of k is a buffer (after struct mz_kernel). */
static inline bool mz__kernel_is_buffer(const struct mz_kernel *k, unsigned i);

struct mz_kernel {
  uint32_t tag;             /* MZ__TAG_KERNEL */
  mz_runtime *rt;
  mz_kernel_spec spec;      /* strings copied into strs */
  char *strs;
  unsigned nparams;
  unsigned nuser;           /* parameters the caller gives */
  unsigned nbufs;           /* buffer parameters (in, out, inout, outlike) */
  /* Bit i: parameter i is a buffer (mz__dir_is_buffer), for the first 64
   * parameters; a node's slots are read through it (mz__task_buf).
   * scalmask: the other parameters among the first 64. */
  uint64_t bufmask, scalmask;
  struct mz__param *params;
  /* An apply's accesses in order (nbufs: the caller's buffers in
   * parameter order, then the outlike ones), each the parameter's index
   * << 2 | its mode (1 read, 2 write, 3 both): an apply of distinct
   * buffers keeps no access array, its accesses are read through these
   * (mz__task_access). */
  uint32_t *accs;
  pthread_mutex_t lock;     /* guards prepared[] */
  void **prepared;          /* per device: the backend's handle, or NULL */
  int *prep_status;         /* per device: 0 not tried, 1 ok, <0 failure */
  _Atomic int refs;         /* creator + graphs using it */
  bool destroyed;
  struct mz_kernel *prev, *next; /* rt->kernels */
  const struct mz__async_ops *async; /* NULL: the node ends when its function returns */
};

static inline bool mz__kernel_is_buffer(const struct mz_kernel *k, unsigned i) {
  return i < 64 ? (k->bufmask >> i) & 1 : mz__dir_is_buffer(k->params[i].dir);
}

/* A CPU kernel whose nodes end later, from another thread: the MPI layer's
 * sends and receives (src/mpi.c), whose requests its communication thread
 * completes.  Set once with mz__kernel_set_async() before any node of the
 * kernel is built. */
struct mz__async_ops {
  /* A CPU worker, no lock held: start the node's work (call as a CPU
   * function gets it; its arrays are valid during the call only) and
   * return 0; the work then ends the node exactly once with
   * mz__task_finish(op, status), from any thread.  Nonzero: nothing was
   * started, and the node fails at once as a CPU function's would. */
  int (*start)(struct mz_op *op, const mz_call *call);
  /* start may also return MZ__ASYNC_ENDED: its work ended in the call and
   * succeeded, and the worker ends the node as it ends a CPU function's
   * (timed only when the run or the perf models want it, then the short
   * end of a lean run).  A kernel that does so sets ends_inline: its nodes
   * are then not timed for start's sake (t_start and t_end are 0 in start
   * when nobody times the node). */
  bool ends_inline;
  /* The node ended with status < 0, from any path (canceled before it
   * ran, start failed, or its work failed).  Called from the thread that
   * finishes it, no lock held; must not block.  values: the node's
   * scalar arguments by parameter (a buffer's entry holds its mz_buffer *:
   * mz__task_values). */
  void (*ended)(struct mz_op *op, const mz_arg *values, int status, void *user);
};
#define MZ__ASYNC_ENDED 1
/* Also makes every later run of k's runtime keep exec records (its
 * xrec_always: the thread that ends an async node reads its start). */
void mz__kernel_set_async(mz_kernel *k, const struct mz__async_ops *ops);

void mz__kernel_unref(mz_kernel *k);
/* Prepare k on dev once; returns the backend handle through *kdev. */
int mz__kernel_prepare(mz_kernel *k, struct mz_device *dev, void **kdev, char **log);

#endif
