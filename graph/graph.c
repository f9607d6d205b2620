/* Graph builders.  Each builder validates its inputs; the first failure is
 * kept on the graph (sticky, as in cairo) and every builder returns the
 * graph's inert error op from then on.  Edges only ever point to ops built
 * earlier, except explicit ones added with mz_depend(), so cycles can only
 * come from those (mz_schedule() checks). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "hazard.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_kernel.h"
#include "objects/mz_run.h"
#include "objects/mz_runtime.h"
#include "perfmodel.h"

_Static_assert(_Alignof(mz_buffer) >= 4, "an access keeps its mode in a buffer pointer's two low bits");

int mz_graph_create(mz_runtime *rt, mz_graph **out) {
  if (out) *out = NULL;
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME) || !out)
    return mz__set_error(rt, MZ_EINVAL, "mz_graph_create: NULL argument or not a live runtime");
  mz_graph *g = calloc(1, sizeof *g);
  if (!g) return mz__set_error(rt, MZ_ENOMEM, "mz_graph_create: out of memory");
  g->tag = MZ__TAG_GRAPH;
  g->rt = rt;
  g->arena.pool = &rt->chunks;
  g->arena.owner = g; /* its nodes' graph (mz__op_graph) */
  g->arena.aux = &g->cold; /* its tasks' cold records (mz__task_cold) */
  g->error_op = mz__arena_alloc(&g->arena, sizeof *g->error_op);
  if (!g->error_op) {
    mz__arena_free(&g->arena);
    free(g);
    return mz__set_error(rt, MZ_ENOMEM, "mz_graph_create: out of memory");
  }
  g->error_op->kind = MZ__K_ERROR;
  atomic_init(&g->refs, 1);
  pthread_mutex_lock(&rt->lock);
  g->next = rt->graphs;
  if (rt->graphs) rt->graphs->prev = g;
  rt->graphs = g;
  pthread_mutex_unlock(&rt->lock);
  *out = g;
  return MZ_OK;
}

/* A lowering of the graph's roots, kept for their next runs; lowered by
 * graph/lower.c, freed with the graph. */
void mz__lowered_free(struct mz__lowered *lw) {
  free(lw->tasks);
  free(lw->plan);
  mz__arena_free(&lw->frozen);
  *lw = (struct mz__lowered){0};
}

/* A task's cold record at its graph's end (mz__coldtab_fini). */
static void drop_cold(void *rec) {
  struct mz__tcold *c = rec;
  free(c->xpreds);
  free(c->message); /* none once its runs were torn down */
  free(c);
}

static void graph_free(mz_graph *g) {
  mz_runtime *rt = g->rt;
  pthread_mutex_lock(&rt->lock);
  if (g->prev) g->prev->next = g->next;
  else rt->graphs = g->next;
  if (g->next) g->next->prev = g->prev;
  mz__lowered_unclaim(&g->lowered); /* its buffers are released below */
  bool succs_heap = g->succs_heap;
  pthread_mutex_unlock(&rt->lock);
  /* Cold records (explicit edges, plan records) and successor lists grown
   * past the exact room a run gave them. */
  mz__coldtab_fini(&g->cold, drop_cold);
  for (size_t i = 0; succs_heap && i < g->ntasks_all; i++) {
    struct mz__task *t = mz__op_t(g->tasks_all[i]);
    if (mz__succs_heap(&t->succs)) free(t->succs.v);
  }
  for (mz_op **b = g->tasks_all ? g->tasks_all - 1 : NULL, **n; b; b = n) {
    n = (mz_op **)(void *)b[0];
    free(b);
  }
  mz__lowered_free(&g->lowered);
  mz__run_parked_free(g->parked);
  for (size_t i = 0; i < g->nheld; i++) mz_buffer_release(g->held[i]);
  for (size_t i = 0; i < g->bmap_cap; i++) mz_buffer_release(g->bmap[i].buf);
  for (size_t i = 0; i < g->nkheld; i++) mz__kernel_unref(g->kheld[i]);
  free(g->held);
  free(g->kheld);
  free(g->bmap);
  mz__arena_free(&g->arena);
  g->tag = MZ__TAG_DEAD;
  free(g);
}

void mz__graph_unref(mz_graph *g) {
  if (g && atomic_fetch_sub(&g->refs, 1) == 1) graph_free(g);
}

void mz_graph_destroy(mz_graph *g) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return; /* NULL, or destroyed already */
  g->tag = MZ__TAG_DEAD;
  g->destroyed = true;
  mz__graph_unref(g);
}

int mz_graph_status(const mz_graph *g) { return MZ__LIVE(g, MZ__TAG_GRAPH) ? g->status : MZ_EINVAL; }
const char *mz_graph_message(const mz_graph *g) {
  return MZ__LIVE(g, MZ__TAG_GRAPH) ? g->message : g ? "not a live graph (NULL, destroyed, or another kind of handle)" : "NULL graph";
}
size_t mz_graph_node_count(const mz_graph *g) { return MZ__LIVE(g, MZ__TAG_GRAPH) ? g->nops : 0; }

/* Record the first error (g->lock held). */
static mz_op *vfail(mz_graph *g, int code, const char *fmt, va_list ap) {
  if (g->status == MZ_OK) {
    vsnprintf(g->message, sizeof g->message, fmt, ap);
    g->status = code;
  }
  return g->error_op;
}

__attribute__((format(printf, 3, 4))) static mz_op *fail(mz_graph *g, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  mz_op *e = vfail(g, code, fmt, ap);
  va_end(ap);
  return e;
}

mz_op *mz__graph_fail(mz_graph *g, int code, const char *fmt, ...) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return NULL;
  va_list ap;
  va_start(ap, fmt);
  mz__ylock_lock(&g->lock);
  mz_op *e = vfail(g, code, fmt, ap);
  mz__ylock_unlock(&g->lock);
  va_end(ap);
  return e;
}

/* A builder's common entry check: a usable graph, and ops of this graph.
 * Returns the error op to hand back, or NULL when all is well. */
static __attribute__((noinline, cold)) mz_op *check_op_fail(mz_graph *g, const char *who, mz_op *op) {
  if (g->status) return g->error_op;
  if (!op) return fail(g, MZ_EINVAL, "%s: NULL op", who);
  if (mz__op_graph(op) != g) return fail(g, MZ_EINVAL, "%s: the op belongs to another graph", who);
  return g->error_op; /* the error op */
}
/* An op of g's and not its error op: a test of its address alone (its
 * chunk names its graph, and g's error op is its only one), so that an
 * op built long before costs no cache miss here (a join of a million
 * tasks). */
static inline mz_op *check_op(mz_graph *g, const char *who, mz_op *op) {
  if (__builtin_expect(!g->status && op && mz__op_graph(op) == g && op != g->error_op, 1)) return NULL;
  return check_op_fail(g, who, op);
}

/* A value or scalar: the op up to the union's first word (a tuple's
 * block is made by tuple, a task's by new_task). */
static inline mz_op *new_op(mz_graph *g, enum mz__kind kind) {
  mz_op *op = mz__arena_alloc(&g->arena, MZ__LEAF_BYTES);
  if (!op) return NULL;
  op->kind = (uint8_t)kind;
  op->id = ++g->nops;
  return op;
}

static int hold_buffer(mz_graph *g, mz_buffer *b) {
  if (g->nheld == g->capheld) {
    size_t cap = g->capheld ? g->capheld * 2 : 16;
    mz_buffer **v = realloc(g->held, cap * sizeof *v);
    if (!v) return MZ_ENOMEM;
    g->held = v;
    g->capheld = cap;
  }
  g->held[g->nheld++] = mz_buffer_retain(b);
  return MZ_OK;
}

/* The graph's per-buffer record: last writer in build order, partition. */
static inline struct mz__bentry *bmap_find(mz_graph *g, mz_buffer *b) {
  size_t h = mz__ptr_slot_shift(b, g->bmap_shift);
  while (g->bmap[h].buf && g->bmap[h].buf != b) h = (h + 1) & (g->bmap_cap - 1);
  return &g->bmap[h];
}

/* Insert b (not in the map yet), growing the map first if it would be
 * more than half full. */
static __attribute__((noinline)) struct mz__bentry *bmap_insert(mz_graph *g, mz_buffer *b) {
  if ((g->bmap_n + 1) * 2 > g->bmap_cap) {
    size_t cap = g->bmap_cap ? g->bmap_cap * 2 : 64;
    struct mz__bentry *nm = calloc(cap, sizeof *nm);
    if (!nm) return NULL;
    for (size_t i = 0; i < g->bmap_cap; i++) {
      if (!g->bmap[i].buf) continue;
      size_t h = mz__ptr_slot(g->bmap[i].buf, cap);
      while (nm[h].buf) h = (h + 1) & (cap - 1);
      nm[h] = g->bmap[i];
    }
    free(g->bmap);
    g->bmap = nm;
    g->bmap_cap = cap;
    g->bmap_shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
    g->bmap_gen++;
  }
  struct mz__bentry *e = bmap_find(g, b);
  e->buf = mz_buffer_retain(b); /* the graph holds every buffer it names */
  g->bmap_n++;
  return e;
}

/* The graph's per-buffer record: last writer in build order, partition.
 * Inserting may move the records: pointers from earlier calls are stale
 * after a call that inserts.  Inline: a build looks up each access of
 * each task, nearly always a buffer the map holds at its home slot. */
static inline struct mz__bentry *bmap_get(mz_graph *g, mz_buffer *b) {
  if (__builtin_expect(g->bmap_cap != 0, 1)) {
    struct mz__bentry *e = bmap_find(g, b);
    if (e->buf) return e;
  }
  return bmap_insert(g, b);
}

static mz_op *value_locked(mz_graph *g, mz_buffer *b) {
  if (g->status) return g->error_op;
  if (!b) return fail(g, MZ_EINVAL, "mz_value: NULL buffer");
  if (!MZ__LIVE(b, MZ__TAG_BUFFER))
    return fail(g, MZ_EINVAL, "mz_value: not a live buffer (released, or another kind of handle)");
  if (b->rt != g->rt) return fail(g, MZ_EINVAL, "mz_value: the buffer belongs to another runtime");
  struct mz__bentry *be = bmap_get(g, b);
  if (!be) return fail(g, MZ_ENOMEM, "mz_value: out of memory");
  /* The buffer as it is at this point of the build: after the last task
   * built so far that writes it, so scheduling this value runs that task.
   * The same version asked for again is the same node. */
  if (be->value && mz__value_producer(be->value) == be->writer) return be->value;
  mz_op *op = new_op(g, MZ__K_VALUE);
  if (!op) return fail(g, MZ_ENOMEM, "mz_value: out of memory");
  op->u.value.w = mz__value_word(be->writer, b);
  op->vacc = be->wacc;
  be->value = op;
  return op;
}

/* A scalar of type t whose bits are v (unused bytes zero), under g->lock.
 * The same scalar as the last one is that node: builders often pass one
 * value to a row of tasks (a time step, a coefficient), and a scalar is
 * only its type and bits. */
static inline __attribute__((always_inline)) mz_op *scalar_bits(mz_graph *g, mz_dtype t, mz_arg v) {
  if (g->status) return g->error_op;
  mz_op *last = g->last_scalar;
  if (last && last->sdtype == t && last->u.scalar.v.u64 == v.u64) return last;
  mz_op *op = new_op(g, MZ__K_SCALAR);
  if (!op) return fail(g, MZ_ENOMEM, "mz_scalar: out of memory");
  op->sdtype = (uint16_t)t;
  op->u.scalar.v = v;
  g->last_scalar = op;
  return op;
}

static mz_op *scalar_locked(mz_graph *g, mz_dtype t, const void *value) {
  if (g->status) return g->error_op;
  size_t es = mz_dtype_size(t);
  if (!es) return fail(g, MZ_EINVAL, "mz_scalar: unknown type %d", (int)t);
  if (!value) return fail(g, MZ_EINVAL, "mz_scalar: NULL value");
  mz_arg v = {.u64 = 0};
  memcpy(&v, value, es);
  return scalar_bits(g, t, v);
}

/* The typed builders: the bits in place, no size look-up nor copy call. */
#define MZ__SCALAR_OF(fn, ctype, dt, member)     \
  mz_op *fn(mz_graph *g, ctype x) {               \
    mz_arg v = {.u64 = 0};                        \
    v.member = x;                                 \
    MZ__LOCKED(g, NULL, scalar_bits(g, dt, v));   \
  }

/* Inlined into mz_zip and mz_join (who is then a constant). */
static inline __attribute__((always_inline)) mz_op *tuple(mz_graph *g, const char *who, unsigned n,
                                                           mz_op *const ops[]) {
  if (g->status) return g->error_op;
  if (n == 0 || !ops) return fail(g, MZ_EINVAL, "%s: needs at least one op", who);
  /* The node and its elements in one block (mz__tuple_elems), made
   * first so that each element is checked and stored in one pass (a
   * refused element leaves the block unused in a graph that is failed). */
  const size_t head = mz__tuple_head(n);
  mz_op *op = mz__arena_alloc(&g->arena, head + n * sizeof(mz_op *));
  if (!op) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  mz_op **el = (mz_op **)(void *)((char *)op + head), *err = g->error_op; /* (mz__tuple_elems, from n) */
  for (unsigned i = 0; i < n; i++) {
    /* check_op's test without its status load (checked above; the
     * stores into el could alias it, and the error op). */
    mz_op *e = ops[i];
    if (__builtin_expect(!e || mz__op_graph(e) != g || e == err, 0)) return check_op_fail(g, who, e);
    el[i] = e;
  }
  op->kind = MZ__K_TUPLE;
  op->id = ++g->nops;
  op->join = who[3] == 'j';
  op->tn = (uint16_t)(n < MZ__TUPLE_LONG ? n : MZ__TUPLE_LONG);
  if (n >= MZ__TUPLE_LONG) op->u.tuple.n = n;
  return op;
}

static mz_op *value_result(mz_graph *g, mz_op *producer, unsigned a);

/* How many results task op t has: an apply one per parameter, a host
 * node one per leaf, a partition one per tile (its accesses but the
 * whole buffer's), an unpartition the whole buffer. */
static unsigned task_nres(const mz_op *t) {
  const struct mz__task *k = mz__task_of(t);
  switch (t->kind) {
    case MZ__K_APPLY: return mz__task_kernel(k)->nparams;
    case MZ__K_HOST: return k->nparams;
    case MZ__K_PARTITION: return k->nacc - 1;
    default: return 1; /* unpartition */
  }
}

/* The results array of a task without a kernel: in its block, after the
 * room new_task made for its accesses (host: one per leaf; unpartition:
 * one more; partition: the buffer's and one per tile, its accesses). */
static mz_op **host_res(const mz_op *t) {
  const struct mz__task *k = mz__task_of(t);
  unsigned na = t->kind == MZ__K_HOST ? k->nparams : t->kind == MZ__K_UNPARTITION ? k->nparams + 1u : k->nacc;
  return (mz_op **)(void *)(mz__task_acc_array(k) + na);
}

/* Result i of task t (g->lock held; NULL on ENOMEM).  A task without a
 * kernel made its results with its node (host_res).  An apply keeps no
 * results array (most are never unzipped, and one cost a word per apply
 * and a pointer per parameter): a buffer's result is its value after t,
 * the buffer's current value node while t is its last writer (so that
 * asking again gives the same node, as mz_value does), else a new one; a
 * scalar's is a scalar node of the value the kernel gets, in its
 * parameter's type. */
static mz_op *task_result(mz_graph *g, mz_op *t, unsigned i) {
  if (t->kind != MZ__K_APPLY) return host_res(t)[i];
  const struct mz__task *k = mz__task_of(t);
  mz_buffer *b = mz__task_buf(k, i);
  if (b) {
    struct mz__bentry *be = bmap_get(g, b);
    if (!be) return NULL;
    if (be->writer != t) return value_result(g, t, i); /* (an apply's: by parameter, see mz__value_buf) */
    if (be->value && mz__value_producer(be->value) == t) return be->value;
    mz_op *r = value_result(g, t, i);
    if (r) be->value = r; /* (value_result looks nothing up: be has not moved) */
    return r;
  }
  /* The graph's last scalar when it is this one (mz_scalar's rule: most
   * often the leaf the apply was given), so that flattening a join of
   * applies of one scalar makes no node per apply. */
  mz_dtype dt = mz__task_kernel(k)->params[i].dtype;
  mz_arg v = mz__task_values(k)[i];
  mz_op *sc = g->last_scalar;
  if (!sc || sc->sdtype != dt || memcmp(&sc->u.scalar.v, &v, sizeof v)) {
    if (!(sc = new_op(g, MZ__K_SCALAR))) return NULL;
    sc->sdtype = (uint16_t)dt;
    sc->u.scalar.v = v;
    g->last_scalar = sc;
  }
  return sc;
}

static mz_op *unzip_locked(mz_graph *g, mz_op *t, unsigned i) {
  mz_op *e = check_op(g, "mz_unzip", t);
  if (e) return e;
  if (t->kind == MZ__K_TUPLE) {
    if (i >= mz__tuple_n(t)) return fail(g, MZ_ERANGE, "mz_unzip: index %u of a tuple of %u", i, mz__tuple_n(t));
    return mz__tuple_elems(t)[i];
  }
  if (mz__op_t(t)) {
    unsigned nres = task_nres(t);
    if (i >= nres) return fail(g, MZ_ERANGE, "mz_unzip: index %u of %s's %u results", i, mz__op_name(t), nres);
    mz_op *r = task_result(g, t, i);
    return r ? r : fail(g, MZ_ENOMEM, "mz_unzip: out of memory");
  }
  return fail(g, MZ_EINVAL, "mz_unzip: a %s is not a tuple", mz__op_name(t));
}

/* Make room for one more op in a growing array of ops. */
static __attribute__((noinline)) int ops_grow(mz_op ***v, size_t *cap) {
  size_t nc = *cap ? *cap * 2 : 16;
  mz_op **nv = realloc(*v, nc * sizeof *nv);
  if (!nv) return MZ_ENOMEM;
  *v = nv;
  *cap = nc;
  return MZ_OK;
}

/* Append op to a growing array of ops. */
static inline int ops_push(mz_op ***v, size_t *n, size_t *cap, mz_op *op) {
  if (*n == *cap && ops_grow(v, cap)) return MZ_ENOMEM;
  (*v)[(*n)++] = op;
  return MZ_OK;
}

int mz__flatten(mz_op *op, mz_op ***v, size_t *n, size_t *cap) {
  if (op->kind == MZ__K_VALUE || op->kind == MZ__K_SCALAR) return ops_push(v, n, cap, op);
  bool tup = op->kind == MZ__K_TUPLE;
  unsigned cnt = tup ? mz__tuple_n(op) : task_nres(op);
  mz_op *const *el = tup ? mz__tuple_elems(op) : NULL;
  for (unsigned i = 0; i < cnt; i++) {
    /* A tuple's element, or a task's result, that is a leaf (most are: a
     * join of tasks is flattened one task at a time) is pushed here,
     * without a recursive call. */
    mz_op *e = tup ? el[i] : task_result(mz__op_graph(op), op, i);
    if (!e) return MZ_ENOMEM;
    int rc = e->kind == MZ__K_VALUE || e->kind == MZ__K_SCALAR ? ops_push(v, n, cap, e) : mz__flatten(e, v, n, cap);
    if (rc) return rc;
  }
  return MZ_OK;
}

/* Room for more tasks in g->tasks_all (its block has one slot before the
 * list: the link to earlier blocks lent to runs). */
static __attribute__((noinline)) int tasks_all_grow(mz_graph *g) {
  size_t cap = g->captasks_all ? g->captasks_all * 2 : 64;
  mz_op **old = g->tasks_all ? g->tasks_all - 1 : NULL, **v;
  if (g->tasks_lent) { /* a run reads the block: a new one, the old one kept */
    v = malloc((cap + 1) * sizeof *v);
    if (!v) return MZ_ENOMEM;
    v[0] = (mz_op *)(void *)old;
    memcpy(v + 1, g->tasks_all, g->ntasks_all * sizeof *v);
    g->tasks_lent = false;
  } else {
    v = realloc(old, (cap + 1) * sizeof *v);
    if (!v) return MZ_ENOMEM;
    if (!old) v[0] = NULL;
  }
  g->tasks_all = v + 1;
  g->captasks_all = cap;
  return MZ_OK;
}

/* Inline: one per task built, nearly always a store. */
static inline int remember_task(mz_graph *g, mz_op *op) {
  if (__builtin_expect(g->ntasks_all == g->captasks_all, 0) && tasks_all_grow(g)) return MZ_ENOMEM;
  g->tasks_all[g->ntasks_all++] = op;
  return MZ_OK;
}

/* Make a task op with np parameters and na accesses: the op, its task,
 * and the task's arrays in one block, each array of its exact size (every
 * element is 8-byte aligned, and a graph holds one such block per task).
 * k: an apply's kernel (the parameter slots' layout depends on it).
 * Inlined: an apply's sizes are then its kernel's, and no call is made. */
static inline __attribute__((always_inline)) mz_op *new_task(mz_graph *g, enum mz__kind kind, mz_kernel *k,
                                                              unsigned np, unsigned na, unsigned nres) {
  _Static_assert(sizeof(mz_op) % 8 == 0 && sizeof(struct mz__task) % 8 == 0 && sizeof(struct mz__access) % 8 == 0,
                 "the arrays after a task must stay 8-byte aligned");
  size_t ob = sizeof(mz_op) + sizeof(struct mz__task);
  size_t pb = mz__task_param_bytes(np, k != NULL), ab = na * sizeof(struct mz__access), rb = nres * sizeof(mz_op *);
  char *blk = mz__arena_alloc(&g->arena, ob + pb + ab + rb);
  if (!blk) return NULL;
  mz_op *op = (mz_op *)(void *)blk;
  op->kind = (uint8_t)kind;
  op->id = ++g->nops;
  struct mz__task *t = mz__task_of(op); /* right after the op: see mz__task_of */
  t->nparams = np;
  op->u.kernel = k;
  t->exec.queue = -1;
  /* The parameter slots and the accesses follow the task: mz__task_values,
   * mz__task_hbufs, mz__task_acc. */
  if (remember_task(g, op)) return NULL;
  return op; /* (no successors: v NULL, cap 0, as the arena zeroed them) */
}

/* Add an access; merge with an earlier one of the same buffer.  Returns
 * its index, or -1 when the directions conflict (read and write through
 * two parameters, or two writes). */
static inline int add_access(struct mz__task *t, mz_buffer *b, uint8_t mode) {
  struct mz__access *acc = mz__task_acc_array(t); /* (t has no kernel) */
  for (unsigned i = 0; i < t->nacc; i++) {
    if (mz__acc_buf(acc[i]) != b) continue;
    return (mz__acc_mode(acc[i]) | mode) != 1 ? -1 : (int)i;
  }
  acc[t->nacc] = mz__acc_make(b, mode);
  return t->nacc++;
}

/* Build-time predecessors: the producers of the inputs, plus the last
 * writer (in build order) of each buffer the task reads.  write: the task
 * is built in full, so it also becomes the last writer of what it writes
 * here, in the same pass (else the caller calls note_writes later). */
static int set_bpreds(mz_graph *g, mz_op *op, mz_op *const *leaves, size_t nleaves, bool write) {
  struct mz__task *t = mz__op_t(op);
  /* Gathered on the stack (or the heap when large), then kept in an
   * arena array of the exact count: most tasks have fewer predecessors
   * than leaves and accesses, and many have none. */
  size_t cap = nleaves + t->nacc;
  mz_op *inl[32];
  mz_op **v = cap <= 32 ? inl : malloc(cap * sizeof *v);
  if (!v) return MZ_ENOMEM;
  unsigned n = 0;
  /* A scan that stops at the first match: the lists are a few entries
   * long, and a loop without an exit is vectorized, with a set-up that
   * cost more than the scan (about 30 instructions a call, measured). */
#define ADD_PRED(p)                                              \
  do {                                                           \
    mz_op *p_ = (p);                                             \
    if (p_ && p_ != op) {                                        \
      unsigned k_ = 0;                                           \
      while (k_ < n && v[k_] != p_) k_++;                        \
      if (k_ == n) v[n++] = p_;                                  \
    }                                                            \
  } while (0)
  for (size_t i = 0; i < nleaves; i++)
    if (leaves[i] && leaves[i]->kind == MZ__K_VALUE) ADD_PRED(mz__value_producer(leaves[i]));
  unsigned ndata = n;
  const struct mz__access *acc = mz__task_acc_array(t); /* (t has no kernel) */
  for (unsigned i = 0; i < t->nacc; i++) {
    /* (An insert may move the entries: e is used before the next one.) */
    struct mz__bentry *e = bmap_get(g, mz__acc_buf(acc[i]));
    if (!e) {
      if (v != inl) free(v);
      return MZ_ENOMEM;
    }
    if (mz__acc_mode(acc[i]) & 1) ADD_PRED(e->writer);
    if (write && (mz__acc_mode(acc[i]) & 2)) { /* one access per buffer: its RAW edge was read */
      e->writer = op;
      e->wacc = (uint16_t)i;
    }
  }
#undef ADD_PRED
  /* The two counts, then the list (mz__task_nbpreds, mz__task_nbdata). */
  uint32_t *head = n ? mz__arena_alloc(&g->arena, 2 * sizeof(uint32_t) + n * sizeof(mz_op *)) : NULL;
  mz_op **kept = head ? (mz_op **)(void *)(head + 2) : NULL;
  if (kept) { /* most tasks have a few: no memcpy call for them */
    head[0] = n;
    head[1] = ndata;
    for (unsigned i = 0; i < n && i < 4; i++) kept[i] = v[i];
    if (n > 4) memcpy(kept + 4, v + 4, (n - 4) * sizeof *kept);
  }
  if (v != inl) free(v);
  if (n && !kept) return MZ_ENOMEM;
  op->u.bpreds = kept;
  return MZ_OK;
}

/* After the task is built: it is now the last writer of what it writes. */
static int note_writes(mz_graph *g, mz_op *op) {
  const struct mz__task *t = mz__task_of(op); /* op is a task's, without a kernel */
  const struct mz__access *acc = mz__task_acc_array(t);
  for (unsigned i = 0; i < t->nacc; i++) {
    if (!(mz__acc_mode(acc[i]) & 2)) continue;
    struct mz__bentry *e = bmap_get(g, mz__acc_buf(acc[i]));
    if (!e) return MZ_ENOMEM;
    e->writer = op;
    e->wacc = (uint16_t)i;
  }
  return MZ_OK;
}

static bool scalar_convert(mz_arg *out, mz_dtype to, const mz_op *s) {
  mz_dtype from = (mz_dtype)s->sdtype;
  const mz_arg *v = &s->u.scalar.v;
  double d = 0;
  int64_t i = 0;
  uint64_t u = 0;
  bool isf = from == MZ_F32 || from == MZ_F64;
  switch (from) {
    case MZ_I8: i = v->i8; break;
    case MZ_U8: i = v->u8; break;
    case MZ_I16: i = v->i16; break;
    case MZ_U16: i = v->u16; break;
    case MZ_I32: i = v->i32; break;
    case MZ_U32: i = v->u32; break;
    case MZ_I64: i = v->i64; break;
    case MZ_U64: u = v->u64; i = (int64_t)u; break;
    case MZ_F32: d = v->f32; break;
    case MZ_F64: d = v->f64; break;
    default: return false;
  }
  if (!isf && from != MZ_U64) u = (uint64_t)i;
  if (!isf) d = from == MZ_U64 ? (double)u : (double)i;
  bool tof = to == MZ_F32 || to == MZ_F64;
  if (isf && !tof) return false; /* no silent float to integer truncation */
  if (!tof) { /* nor integer narrowing: the value must fit */
    static const int64_t lo[] = {INT8_MIN, 0, INT16_MIN, 0, INT32_MIN, 0, INT64_MIN, 0};
    static const uint64_t hi[] = {INT8_MAX, UINT8_MAX, INT16_MAX, UINT16_MAX, INT32_MAX, UINT32_MAX, INT64_MAX, UINT64_MAX};
    if ((unsigned)to >= 8 || (from != MZ_U64 && i < 0 ? i < lo[to] : u > hi[to])) return false;
  }
  switch (to) {
    case MZ_I8: out->i8 = (int8_t)i; break;
    case MZ_U8: out->u8 = (uint8_t)u; break;
    case MZ_I16: out->i16 = (int16_t)i; break;
    case MZ_U16: out->u16 = (uint16_t)u; break;
    case MZ_I32: out->i32 = (int32_t)i; break;
    case MZ_U32: out->u32 = (uint32_t)u; break;
    case MZ_I64: out->i64 = i; break;
    case MZ_U64: out->u64 = u; break;
    case MZ_F32: out->f32 = (float)d; break;
    case MZ_F64: out->f64 = d; break;
    default: return false;
  }
  return true;
}

/* A result of producer: the buffer its parameter a (an apply) or its
 * access a (another task) leaves. */
static mz_op *value_result(mz_graph *g, mz_op *producer, unsigned a) {
  mz_op *r = new_op(g, MZ__K_VALUE);
  if (!r) return NULL;
  r->u.value.w = mz__value_word(producer, NULL);
  r->vacc = (uint16_t)a;
  return r;
}

/* Keep op's build-time predecessors: the data edges dv (distinct), then
 * the read-after-write edges rv (distinct) that are not data edges, in an
 * arena block after their two counts (mz__task_nbpreds, mz__task_nbdata).
 * rv is compacted in place. */
static int keep_bpreds(mz_graph *g, mz_op *op, mz_op *const *dv, unsigned nd, mz_op **rv, unsigned nr) {
  unsigned n = 0;
  for (unsigned i = 0; i < nr; i++) {
    unsigned j = 0;
    while (j < nd && dv[j] != rv[i]) j++;
    if (j == nd) rv[n++] = rv[i];
  }
  nr = n;
  /* The counts, then the list. */
  uint32_t *head = mz__arena_alloc(&g->arena, 2 * sizeof(uint32_t) + (nd + nr) * sizeof(mz_op *));
  if (!head) return MZ_ENOMEM;
  head[0] = nd + nr;
  head[1] = nd;
  mz_op **kept = (mz_op **)(void *)(head + 2);
  /* Most tasks have a few: no memcpy call, and a loop of at most four
   * that is not vectorized (whose set-up cost more than the copy). */
  for (unsigned i = 0; i < nd && i < 4; i++) kept[i] = dv[i];
  if (nd > 4) memcpy(kept + 4, dv + 4, (nd - 4) * sizeof *kept);
  for (unsigned i = 0; i < nr; i++) kept[nd + i] = rv[i];
  op->u.bpreds = kept;
  return MZ_OK;
}

/* Inlined into mz_apply, its only caller (its stack array would keep the
 * compiler from it otherwise): no second call per apply. */
static inline __attribute__((always_inline)) mz_op *apply_locked(mz_graph *g, mz_kernel *k, mz_op *args, const mz_launch *launch) {
  mz_op *e = check_op(g, "mz_apply", args);
  if (e) return e;
  if (!k) return fail(g, MZ_EINVAL, "mz_apply: NULL kernel");
  if (!MZ__LIVE(k, MZ__TAG_KERNEL))
    return fail(g, MZ_EINVAL, "mz_apply: not a live kernel (destroyed, or another kind of handle)");
  if (k->rt != g->rt) return fail(g, MZ_EINVAL, "mz_apply: kernel '%s' belongs to another runtime", k->spec.name);
  unsigned nu = args->kind == MZ__K_TUPLE ? mz__tuple_n(args) : 1;
  mz_op *const *ua = args->kind == MZ__K_TUPLE ? mz__tuple_elems(args) : &args;
  if (mz__op_t(args)) return fail(g, MZ_EINVAL, "mz_apply(%s): pass a zip of arguments, not a task's result tuple", k->spec.name);
  if (nu != k->nuser)
    return fail(g, MZ_EINVAL, "mz_apply(%s): %u arguments given, the kernel takes %u (\"%s\")", k->spec.name, nu,
                k->nuser, k->spec.params);
  if (launch && (launch->ndim < 1 || launch->ndim > 3 || !launch->global[0]))
    return fail(g, MZ_EINVAL, "mz_apply(%s): launch needs ndim 1..3 and non-zero global sizes", k->spec.name);
  if (launch && !mz__launch_ok(launch))
    return fail(g, MZ_EINVAL, "mz_apply(%s): launch sizes out of range (each global and local size 1..2^32-1, "
                "at most 2^36 work items)", k->spec.name);
  /* The graph holds the kernel before any node names it. */
  if (g->nkheld == g->capkheld) {
    size_t cap = g->capkheld ? g->capkheld * 2 : 8;
    mz_kernel **v = realloc(g->kheld, cap * sizeof *v);
    if (!v) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
    g->kheld = v;
    g->capkheld = cap;
  }
  /* The kernel last found or added is kept last (the order is free):
   * most builds apply the kernel of the last apply again. */
  bool have = g->nkheld && g->kheld[g->nkheld - 1] == k;
  for (size_t i = 0; i + 1 < g->nkheld && !have; i++) {
    if (g->kheld[i] != k) continue;
    g->kheld[i] = g->kheld[g->nkheld - 1];
    g->kheld[g->nkheld - 1] = k;
    have = true;
  }
  if (!have) {
    atomic_fetch_add(&k->refs, 1);
    g->kheld[g->nkheld++] = k;
  }
  /* At most one access per buffer parameter. */
  /* It keeps no results array (task_result makes them when asked). */
  mz_op *op = new_task(g, MZ__K_APPLY, k, k->nparams, 0, 0); /* (no access array: mz__task_access) */
  if (!op) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
  struct mz__task *t = mz__op_t(op);
  /* The same kernel on the same arguments as the last apply that took this
   * path's checks, with no buffer parameter (so no access, predecessor or
   * computed parameter) and the default launch: the arguments were
   * checked then and ops do not change, so the parameter slots are that
   * apply's. */
  if (k == g->rep_kernel && args == g->rep_args && !launch) {
    const mz_arg *from = mz__task_values(mz__task_of(g->rep_op));
    mz_arg *to = mz__task_values(t);
    if (k->nparams <= 4) /* most kernels: no memcpy call */
      for (unsigned i = 0; i < k->nparams && i < 4; i++) to[i] = from[i];
    else
      memcpy(to, from, k->nparams * sizeof(mz_arg));
    return op;
  }
  /* The build-time predecessors are gathered in the same pass as the
   * arguments are checked (set_bpreds' rule, one look-up per buffer): the
   * arguments' producers (data edges, dv) and the last writers of what
   * the task reads (rv), each list without repeats; rv's entries that
   * are in dv are dropped at the end (keep_bpreds). */
  mz_op *pv_inl[16];
  const unsigned np = k->nparams;
  const struct mz__param *const params = k->params;
  mz_op **dv = np <= 8 ? pv_inl : mz__arena_alloc(&g->arena, 2 * np * sizeof *dv);
  if (!dv) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
  mz_op **rv = dv + (np <= 8 ? 8 : np);
  unsigned nd = 0, nr = 0;
  unsigned u = 0;
  /* The task's slots and accesses in locals: the loop's stores through
   * them could alias the kernel's and the task's fields, which the
   * compiler would then read again on every parameter. */
  mz_arg *const vals = mz__task_values(t);
  /* The accesses are gathered here (conflicts are found against them)
   * and kept only where two parameters share a buffer (mz__task_access);
   * the task's count is set once they are complete. */
  struct mz__access acc_inl[16];
  struct mz__access *const acc = k->nbufs <= 16 ? acc_inl : mz__arena_alloc(&g->arena, k->nbufs * sizeof *acc);
  if (!acc) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
  unsigned nacc = 0;
  uint64_t bytes = 0; /* of the accesses: the perf models' size bucket (below) */
  for (unsigned i = 0; i < np; i++) {
    const struct mz__param *p = &params[i];
    const enum mz__dir dir = p->dir;
    if (dir > MZ__INOUT) continue; /* set by the loop below */
    /* No op check per argument: args passed check_op, and a zip's
     * elements passed it when the zip was built (ops never change, and
     * a zip never holds the error op). */
    mz_op *a = ua[u++];
    const uint8_t akind = a->kind;
    if (dir == MZ__SCALAR) {
      if (akind == MZ__K_SCALAR && a->sdtype == p->dtype) { /* the common case: the bits as they are */
        vals[i] = a->u.scalar.v;
        continue;
      }
      if (akind != MZ__K_VALUE && akind != MZ__K_SCALAR)
        return fail(g, MZ_EINVAL, "mz_apply(%s): argument for '%s' is a %s; unzip it first", k->spec.name, p->name,
                    mz__op_name(a));
      if (akind != MZ__K_SCALAR)
        return fail(g, MZ_ESHAPE, "mz_apply(%s): parameter '%s' is a scalar, a buffer was given", k->spec.name, p->name);
      if (!scalar_convert(&vals[i], p->dtype, a))
        return fail(g, MZ_ESHAPE, "mz_apply(%s): scalar for '%s' cannot be converted from %s to %s without loss", k->spec.name,
                    p->name, mz_dtype_name((mz_dtype)a->sdtype), mz_dtype_name(p->dtype));
      continue;
    }
    if (__builtin_expect(akind != MZ__K_VALUE, 0)) {
      if (akind != MZ__K_SCALAR)
        return fail(g, MZ_EINVAL, "mz_apply(%s): argument for '%s' is a %s; unzip it first", k->spec.name, p->name,
                    mz__op_name(a));
      return fail(g, MZ_ESHAPE, "mz_apply(%s): parameter '%s' is a buffer, a scalar was given", k->spec.name, p->name);
    }
    mz_op *pd = mz__value_producer(a); /* a data edge (never op: built before it) */
    mz_buffer *b = mz__value_buf(a);
    if (b->shape.dtype != p->dtype)
      return fail(g, MZ_ESHAPE, "mz_apply(%s): parameter '%s' wants %s[], the buffer holds %s", k->spec.name, p->name,
                  mz_dtype_name(p->dtype), mz_dtype_name(b->shape.dtype));
    if (p->ndim && b->shape.ndim != p->ndim)
      return fail(g, MZ_ESHAPE, "mz_apply(%s): parameter '%s' wants %u dims, the buffer has %u", k->spec.name, p->name,
                  (unsigned)p->ndim, (unsigned)b->shape.ndim);
    vals[i].p = b;
    uint8_t mode = dir == MZ__IN ? 1 : dir == MZ__OUT ? 2 : 3;
    if (pd) {
      unsigned j = 0;
      while (j < nd && dv[j] != pd) j++;
      if (j == nd) dv[nd++] = pd;
    }
    struct mz__bentry *be = bmap_get(g, b);
    if (!be) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
    /* A buffer passed again (two reads) shares its access: its partition
     * state and its writer were read with its first.  The map's entry
     * tells a buffer this task has seen (acc_op), so only such a buffer
     * scans the task's accesses. */
    if (__builtin_expect(be->acc_op == op, 0)) {
      unsigned j = 0;
      while (mz__acc_buf(acc[j]) != b) j++;
      if ((mz__acc_mode(acc[j]) | mode) != 1)
        return fail(g, MZ_EINVAL, "mz_apply(%s): one buffer is passed twice with conflicting directions ('%s')",
                    k->spec.name, p->name);
      continue;
    }
    be->acc_op = op;
    if (be->partitioned)
      return fail(g, MZ_ESTATE, "mz_apply(%s): the buffer for '%s' is partitioned; use its tiles or unpartition it",
                  k->spec.name, p->name);
    acc[nacc++] = mz__acc_make(b, mode);
    bytes += b->bytes;
    mz_op *pw = be->writer; /* read-after-write (read before this task writes it) */
    if ((mode & 1) && pw && pw != pd) { /* (the argument's own producer is in dv) */
      unsigned q = 0;
      while (q < nr && rv[q] != pw) q++;
      if (q == nr) rv[nr++] = pw;
    }
    if (mode & 2) { /* (be is used before the next look-up, which may move it) */
      be->writer = op;
      be->wacc = (uint16_t)i;
    }
  }
  /* Outlike buffers and computed scalars (the parameters the caller does
   * not give). */
  bool derived = k->nuser < np;
  for (unsigned i = 0; derived && i < np; i++) {
    const struct mz__param *p = &params[i];
    if (p->dir <= MZ__INOUT) continue;
    const mz_buffer *rb = mz__task_buf(t, (unsigned)p->ref);
    if (!rb) return fail(g, MZ_EINVAL, "mz_apply(%s): parameter '%s' refers to an outlike buffer", k->spec.name, p->name);
    if (p->dir == MZ__OUTLIKE) {
      mz_buffer *nb;
      if (mz__buffer_new(g->rt, p->dtype, rb->shape.ndim, rb->shape.dims, NULL, 0, &nb))
        return fail(g, MZ_ENOMEM, "mz_apply(%s): cannot create the outlike buffer '%s'", k->spec.name, p->name);
      int rc = hold_buffer(g, nb);
      mz_buffer_release(nb);
      if (rc) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
      mz__task_values(t)[i].p = nb;
      acc[nacc++] = mz__acc_make(nb, 2); /* a new buffer: no access has it */
      bytes += nb->bytes;
      struct mz__bentry *be = bmap_get(g, nb);
      if (!be) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
      be->writer = op;
      be->wacc = (uint16_t)i;
      continue;
    }
    uint64_t v = p->dir == MZ__SIZEOF ? rb->shape.count : p->dir == MZ__WIDTHOF ? rb->shape.dims[0] : rb->shape.dims[1];
    mz_op tmp = {.kind = MZ__K_SCALAR};
    tmp.sdtype = MZ_U64;
    tmp.u.scalar.v.u64 = v;
    if (!scalar_convert(&mz__task_values(t)[i], p->dtype, &tmp))
      return fail(g, MZ_ESHAPE, "mz_apply(%s): computed scalar '%s' = %llu does not fit in %s", k->spec.name, p->name,
                  (unsigned long long)v, mz_dtype_name(p->dtype));
  }
  if (nacc < k->nbufs) { /* a buffer named twice: the accesses are kept */
    struct mz__access *kept = acc != acc_inl ? acc : mz__arena_alloc(&g->arena, nacc * sizeof *kept);
    struct mz__tcold *c = kept ? mz__task_cold(t) : NULL;
    if (!c) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
    if (kept != acc) memcpy(kept, acc, nacc * sizeof *kept);
    c->acc = kept;
  }
  t->nacc = (uint16_t)nacc;
  if ((nd || nr) && keep_bpreds(g, op, dv, nd, rv, nr)) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
  /* The perf models' size bucket (mz_task_bytes' sum; buffers never
   * change size), noted while the buffers are at hand, so that lowering
   * the task reads none of them for it (graph/lower.c).  0: not noted. */
  if (t->nacc) {
    if (bytes != g->pm_bytes) { /* most tasks of a build have the last one's sizes: no call */
      int key = mz__pm_bucket_of(bytes);
      g->pm_bytes = bytes;
      g->pm_key1 = key < 255 ? (uint8_t)(key + 1) : 0;
    }
    op->pm_key1 = g->pm_key1;
  }
  if (!k->nbufs && !launch) { /* the repeat's model (above) */
    g->rep_kernel = k;
    g->rep_args = args;
    g->rep_op = op;
  }
  if (launch) { /* else the default, found when a device needs it (mz__exec_launch) */
    mz_launch *l = mz__arena_alloc(&g->arena, sizeof *l);
    struct mz__tcold *c = l ? mz__task_cold(t) : NULL;
    if (!c) return fail(g, MZ_ENOMEM, "mz_apply: out of memory");
    *l = *launch;
    c->launch = l;
  }
  return op;
}

/* Host functions, partition and unpartition share this shape: a task whose
 * parameters are the buffers (and scalars) of some leaves.  xacc: room for
 * that many more accesses, which the caller adds (the access array is
 * part of the task's block and cannot grow). */
static mz_op *host_like(mz_graph *g, enum mz__kind kind, const char *who, mz_op *deps, uint8_t mode, unsigned xacc) {
  mz_op **leaves = NULL;
  size_t n = 0, cap = 0;
  if (deps && mz__flatten(deps, &leaves, &n, &cap)) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  if (n > MZ__TASK_MAX_PARAMS - xacc) {
    free(leaves);
    return fail(g, MZ_ERANGE, "%s: %zu buffers and scalars; a task takes at most %u", who, n, MZ__TASK_MAX_PARAMS - xacc);
  }
  mz_op *op = new_task(g, kind, NULL, (unsigned)n, (unsigned)n + xacc, (unsigned)n);
  if (!op) {
    free(leaves);
    return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  }
  struct mz__task *t = mz__op_t(op);
  mz_op **res = host_res(op); /* (its room, after the n + xacc accesses') */
  for (size_t i = 0; i < n; i++) {
    mz_op *a = leaves[i];
    if (a->kind == MZ__K_SCALAR) {
      mz__task_values(t)[i] = a->u.scalar.v;
      res[i] = a;
      continue;
    }
    mz_buffer *b = mz__value_buf(a);
    struct mz__bentry *be = bmap_get(g, b);
    if (!be) {
      free(leaves);
      return fail(g, MZ_ENOMEM, "%s: out of memory", who);
    }
    if (be->partitioned && kind == MZ__K_HOST) {
      free(leaves);
      return fail(g, MZ_ESTATE, "%s: buffer %zu is partitioned; use its tiles or unpartition it", who, i);
    }
    mz__task_hbufs(t)[i] = b;
    int ai = add_access(t, b, mode);
    if (ai < 0) {
      free(leaves);
      return fail(g, MZ_EINVAL, "%s: a buffer appears twice", who);
    }
    res[i] = value_result(g, op, (unsigned)ai);
    if (!res[i]) {
      free(leaves);
      return fail(g, MZ_ENOMEM, "%s: out of memory", who);
    }
  }
  int rc = set_bpreds(g, op, leaves, n, false);
  free(leaves);
  if (rc) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  return op;
}

/* The longest name a host node may have (mz_host_named), in bytes. */
#define MZ__HOST_NAME_MAX 255

static mz_op *host_locked(mz_graph *g, const char *who, const char *name, mz_cpu_fn fn, void *user, mz_op *deps) {
  if (g->status) return g->error_op;
  if (deps) {
    mz_op *e = check_op(g, who, deps);
    if (e) return e;
  }
  if (!fn) return fail(g, MZ_EINVAL, "%s: NULL function", who);
  size_t len = name ? strnlen(name, MZ__HOST_NAME_MAX + 1) : 0;
  if (len > MZ__HOST_NAME_MAX) return fail(g, MZ_EINVAL, "%s: the name is longer than %d bytes", who, MZ__HOST_NAME_MAX);
  char *copy = NULL;
  if (len) {
    copy = mz__arena_alloc(&g->arena, len + 1);
    if (!copy) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
    memcpy(copy, name, len);
  }
  mz_op *op = host_like(g, MZ__K_HOST, "mz_host", deps, 3, 0);
  if (op->kind == MZ__K_ERROR) return op;
  struct mz__tcold *c = mz__task_cold(mz__task_of(op));
  if (!c) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  c->host = (struct mz__host_call){fn, user};
  /* The label of traces, timings and DOT, and the key of its perf model. */
  c->name = copy;
  if (note_writes(g, op)) return fail(g, MZ_ENOMEM, "%s: out of memory", who);
  return op;
}

static mz_op *partition_locked(mz_graph *g, mz_op *v, unsigned n) {
  mz_op *e = check_op(g, "mz_partition", v);
  if (e) return e;
  if (v->kind != MZ__K_VALUE) return fail(g, MZ_EINVAL, "mz_partition: a %s is not a buffer value", mz__op_name(v));
  mz_buffer *b = mz__value_buf(v);
  size_t rows = b->shape.dims[b->shape.ndim - 1];
  if (n == 0 || n > rows)
    return fail(g, MZ_ERANGE, "mz_partition: %u tiles asked; the slowest dimension has %zu rows", n, rows);
  if (n >= MZ__TASK_MAX_PARAMS)
    return fail(g, MZ_ERANGE, "mz_partition: %u tiles asked; a partition makes at most %u", n, MZ__TASK_MAX_PARAMS - 1);
  struct mz__bentry *be = bmap_get(g, b);
  if (!be) return fail(g, MZ_ENOMEM, "mz_partition: out of memory");
  if (be->partitioned) return fail(g, MZ_ESTATE, "mz_partition: the buffer is already partitioned");
  if (b->parent) return fail(g, MZ_ENOTSUP, "mz_partition: a tile cannot be partitioned again");
  mz_op *op = new_task(g, MZ__K_PARTITION, NULL, 1, n + 1, n);
  if (!op) return fail(g, MZ_ENOMEM, "mz_partition: out of memory");
  struct mz__task *t = mz__op_t(op);
  mz__task_hbufs(t)[0] = b;
  add_access(t, b, 3);
  mz_op **res = (mz_op **)(void *)(mz__task_acc_array(t) + n + 1); /* (host_res once the accesses are in) */
  size_t row_elems = b->shape.count / rows, es = mz_dtype_size(b->shape.dtype), off = 0;
  for (unsigned i = 0; i < n; i++) {
    size_t r = rows / n + (i < rows % n ? 1 : 0);
    size_t dims[3] = {b->shape.dims[0], b->shape.dims[1], b->shape.dims[2]};
    dims[b->shape.ndim - 1] = r;
    mz_buffer *tile;
    if (mz__buffer_new(g->rt, b->shape.dtype, b->shape.ndim, dims, b, off, &tile))
      return fail(g, MZ_ENOMEM, "mz_partition: cannot create tile %u", i);
    int rc = hold_buffer(g, tile);
    mz_buffer_release(tile);
    if (rc) return fail(g, MZ_ENOMEM, "mz_partition: out of memory");
    off += r * row_elems * es;
    res[i] = value_result(g, op, (unsigned)add_access(t, tile, 2)); /* (a new buffer: a new access) */
    if (!res[i]) return fail(g, MZ_ENOMEM, "mz_partition: out of memory");
  }
  mz_op *leaf[1] = {v};
  if (set_bpreds(g, op, leaf, 1, true)) return fail(g, MZ_ENOMEM, "mz_partition: out of memory");
  be = bmap_get(g, b);
  be->partitioned = true;
  g->npartitioned++;
  be->part = op;
  return op;
}

static mz_op *unpartition_locked(mz_graph *g, mz_op *tiles) {
  mz_op *e = check_op(g, "mz_unpartition", tiles);
  if (e) return e;
  mz_op **leaves = NULL;
  size_t n = 0, cap = 0;
  if (mz__flatten(tiles, &leaves, &n, &cap)) return fail(g, MZ_ENOMEM, "mz_unpartition: out of memory");
  mz_buffer *parent = NULL;
  const char *why = NULL;
  for (size_t i = 0; i < n && !why; i++) {
    if (leaves[i]->kind != MZ__K_VALUE || !mz__value_buf(leaves[i])->parent) why = "an element is not a tile";
    else if (!parent) parent = mz__value_buf(leaves[i])->parent;
    else if (mz__value_buf(leaves[i])->parent != parent) why = "tiles of different buffers";
  }
  struct mz__bentry *be = NULL;
  if (!why && !parent) why = "no tiles given";
  if (!why && !(be = bmap_get(g, parent))) why = "out of memory";
  if (!why && (!be->partitioned || !be->part)) why = "the buffer is not partitioned in this graph";
  if (!why) {
    mz_op *part = be->part;
    unsigned nres = task_nres(part);
    if (n != nres) why = "every tile must be given exactly once";
    for (unsigned j = 0; j < nres && !why; j++) {
      unsigned seen = 0;
      for (size_t i = 0; i < n; i++) seen += mz__value_buf(leaves[i]) == mz__value_buf(host_res(part)[j]);
      if (seen != 1) why = "every tile must be given exactly once";
    }
  }
  if (why) {
    free(leaves);
    return fail(g, MZ_EINVAL, "mz_unpartition: %s", why);
  }
  free(leaves);
  mz_op *op = host_like(g, MZ__K_UNPARTITION, "mz_unpartition", tiles, 1, 1);
  if (op->kind == MZ__K_ERROR) return op;
  /* The result is the whole buffer, written by this task. */
  struct mz__task *t = mz__op_t(op);
  /* host_like left room for this access. */
  mz__task_acc_array(t)[t->nacc] = mz__acc_make(parent, 2);
  t->nacc++;
  /* Its one result, in the first of the slots host_like filled with the
   * tiles' (task_nres: 1). */
  mz_op **res = host_res(op);
  res[0] = value_result(g, op, t->nacc - 1u);
  if (!res[0]) return fail(g, MZ_ENOMEM, "mz_unpartition: out of memory");
  if (note_writes(g, op)) return fail(g, MZ_ENOMEM, "mz_unpartition: out of memory");
  be = bmap_get(g, parent);
  be->partitioned = false;
  g->npartitioned--;
  be->part = NULL;
  return op;
}

/* What mz_depend's after names: the tasks in it (a task stands for itself,
 * not for its results: a task whose results are all scalars has no result
 * leaf whose producer is the task) and the other leaves (values, whose
 * producers are the tasks; scalars). */
static int depend_targets(mz_op *op, mz_op ***v, size_t *n, size_t *cap) {
  if (mz__op_t(op) || op->kind != MZ__K_TUPLE) return ops_push(v, n, cap, op);
  for (unsigned i = 0, n_ = mz__tuple_n(op); i < n_; i++) {
    int rc = depend_targets(mz__tuple_elems(op)[i], v, n, cap);
    if (rc) return rc;
  }
  return MZ_OK;
}

static int depend_locked(mz_graph *g, mz_op *op, mz_op *after) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return MZ_EINVAL;
  mz_op *e = check_op(g, "mz_depend", op);
  if (!e) e = check_op(g, "mz_depend", after);
  if (e) return g->status;
  mz_op **lo = NULL;
  size_t n = 0, cap = 0;
  if (op->kind != MZ__K_TUPLE && !mz__op_t(op) && op->kind == MZ__K_VALUE) op = mz__value_producer(op);
  if (!op || !mz__op_t(op)) {
    fail(g, MZ_EINVAL, "mz_depend: the op is not an operation that runs (apply, host, partition, unpartition)");
    return g->status;
  }
  if (atomic_load(&mz__op_t(op)->state) != MZ__T_NEW) {
    fail(g, MZ_ESTATE, "mz_depend: the op was already scheduled");
    return g->status;
  }
  if (depend_targets(after, &lo, &n, &cap)) {
    free(lo);
    fail(g, MZ_ENOMEM, "mz_depend: out of memory");
    return g->status;
  }
  for (size_t i = 0; i < n; i++) {
    mz_op *p = mz__op_t(lo[i]) ? lo[i] : lo[i]->kind == MZ__K_VALUE ? mz__value_producer(lo[i]) : NULL;
    if (!p) continue;
    struct mz__tcold *c = mz__task_cold(mz__op_t(op));
    if (!c) {
      free(lo);
      fail(g, MZ_ENOMEM, "mz_depend: out of memory");
      return g->status;
    }
    /* The capacity is kept implicit: 4, then doubled whenever the count
     * reaches a power of two from 4 on. */
    unsigned nx = c->nxpreds;
    if (nx == 0 || (nx >= 4 && (nx & (nx - 1)) == 0)) {
      unsigned nc = nx ? nx * 2 : 4;
      mz_op **v = realloc(c->xpreds, nc * sizeof *v);
      if (!v) {
        free(lo);
        fail(g, MZ_ENOMEM, "mz_depend: out of memory");
        return g->status;
      }
      c->xpreds = v;
    }
    c->xpreds[c->nxpreds++] = p;
    g->xpreds_any = true;
  }
  free(lo);
  return MZ_OK;
}

/* ---- the public builders ----
 * Each holds the graph's lock, so that threads may build on one graph and
 * schedule its roots at the same time (mz_schedule holds it too).  An
 * uncontended lock is one atomic exchange and one store; the builders
 * under it never call each other through these wrappers, and find the
 * graph live (the wrapper checked it). */

#define MZ__LOCKED(g, fail_value, call)              \
  do {                                                \
    if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return fail_value; \
    mz__ylock_lock(&(g)->lock);                       \
    __typeof__(call) res_ = call;                     \
    mz__ylock_unlock(&(g)->lock);                     \
    return res_;                                      \
  } while (0)

struct mz__bentry *mz__graph_bentry(mz_graph *g, mz_buffer *b) {
  if (!g->bmap_cap) return NULL;
  struct mz__bentry *e = bmap_find(g, b);
  return e->buf ? e : NULL;
}

mz_op *mz_value(mz_graph *g, mz_buffer *b) { MZ__LOCKED(g, NULL, value_locked(g, b)); }
mz_op *mz_scalar(mz_graph *g, mz_dtype t, const void *value) { MZ__LOCKED(g, NULL, scalar_locked(g, t, value)); }
MZ__SCALAR_OF(mz_i32, int32_t, MZ_I32, i32)
MZ__SCALAR_OF(mz_u32, uint32_t, MZ_U32, u32)
MZ__SCALAR_OF(mz_i64, int64_t, MZ_I64, i64)
MZ__SCALAR_OF(mz_u64, uint64_t, MZ_U64, u64)
MZ__SCALAR_OF(mz_f32, float, MZ_F32, f32)
MZ__SCALAR_OF(mz_f64, double, MZ_F64, f64)
mz_op *mz_zip(mz_graph *g, unsigned n, mz_op *const ops[]) { MZ__LOCKED(g, NULL, tuple(g, "mz_zip", n, ops)); }
mz_op *mz_join(mz_graph *g, unsigned n, mz_op *const ops[]) { MZ__LOCKED(g, NULL, tuple(g, "mz_join", n, ops)); }
mz_op *mz_unzip(mz_graph *g, mz_op *t, unsigned i) { MZ__LOCKED(g, NULL, unzip_locked(g, t, i)); }
mz_op *mz_apply(mz_graph *g, mz_kernel *k, mz_op *args, const mz_launch *launch) {
  MZ__LOCKED(g, NULL, apply_locked(g, k, args, launch));
}
mz_op *mz_host(mz_graph *g, mz_cpu_fn fn, void *user, mz_op *deps) {
  MZ__LOCKED(g, NULL, host_locked(g, "mz_host", NULL, fn, user, deps));
}
mz_op *mz_host_named(mz_graph *g, const char *name, mz_cpu_fn fn, void *user, mz_op *deps) {
  MZ__LOCKED(g, NULL, host_locked(g, "mz_host_named", name, fn, user, deps));
}
mz_op *mz_partition(mz_graph *g, mz_op *v, unsigned n) { MZ__LOCKED(g, NULL, partition_locked(g, v, n)); }
mz_op *mz_unpartition(mz_graph *g, mz_op *tiles) { MZ__LOCKED(g, NULL, unpartition_locked(g, tiles)); }
int mz_depend(mz_graph *g, mz_op *op, mz_op *after) { MZ__LOCKED(g, MZ_EINVAL, depend_locked(g, op, after)); }
