/* Task Bench graphs on maize.
 *
 * One mz_apply per task (timestep, point).  The kernel for a task with n
 * inputs takes "u64 id, out u8[] o, in u8[] i0, ..., in u8[] i{n-1}"; one
 * kernel per arity is created once.  The id scalar carries (graph,
 * timestep, point) for the input check.
 *
 * Outputs: point p of timestep t writes buffer slot t % fields of p (one
 * buffer per (slot, point), made once per state).  With fields =
 * timesteps, Task Bench's default (its nb_fields), no buffer is written
 * twice in a run, so maize's hazard tracking adds no edge beyond Task
 * Bench's dependencies: every edge is the read-after-write of an input.
 * Reusing one buffer per point instead would add write-after-read edges
 * (a task would wait for every reader of its point's previous output) and,
 * worse, would order readers after the new write within a timestep; double
 * buffering removes the latter but keeps the former, which serializes
 * patterns whose reverse dependencies differ from their dependencies
 * (tree, spread, fft, dom).  -field K < timesteps trades memory for those
 * edges, as Task Bench's -field does.
 *
 * Inputs are the result values of the producing applies (mz_unzip of the
 * apply), so a dependency costs no extra node.  The root is a join of the
 * sinks, the tasks whose output no task reads (the last timestep, and
 * every task in trivial); the rest are needed by them.  The timed region
 * is graph creation to mz_future_wait(), as Task Bench times task creation
 * and execution for OpenMP and StarPU.
 *
 * maize-rerun builds the graph once, in its first run (one run, no
 * chunks), and from then on times mz_graph_run() of it to the end of the
 * run: iterative programs build once.  Kernel iterations are read from the
 * app when a task runs, so a re-run sees the caller's change of them.
 *
 * The kernel does no allocation: inputs are passed to tb_execute_point()
 * straight from the call's argument array, and scratch memory
 * (memory_bound) is one block per runtime queue, since a CPU queue runs
 * one task at a time. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maize.h>

#include "tb_systems.h"

/* The input pointers are read in place from the call's mz_arg array. */
_Static_assert(sizeof(mz_arg) == sizeof(void *), "mz_arg must be pointer-sized");

struct tbm_graph {
  mz_buffer **bufs; /* fields * max_width: slot s of point p at [s * max_width + p] */
  mz_op **prev;     /* per point: the value timestep t-1 produced (during a build) */
  mz_op **cur;
  size_t *prev_task; /* per point: the index in ops of the task that produced prev */
  size_t *cur_task;
};

struct tbm {
  const tb_app *app;
  mz_runtime *rt;
  char *policy; /* NULL: the runtime's default */
  long inject;
  int breakdown;
  size_t chunk;        /* tasks per run while building; 0: one run at the end */
  mz_future **futs;    /* the runs of one build */
  size_t nfuts, capfuts;
  unsigned maxin;      /* largest arity */
  mz_kernel **kernels; /* [0..maxin] */
  struct tbm_graph g[TB_MAX_GRAPHS];
  size_t ntasks;
  mz_op **ops;  /* ntasks, in build order */
  mz_op **outs; /* ntasks: each task's output value (chunked runs join these) */
  unsigned char *consumed; /* ntasks: some later task reads its output */
  mz_op **args; /* maxin + 2, one task's zip */
  long *in;     /* maxin, one task's input points */
  char *scratch; /* nqueues * scratch_stride */
  size_t scratch_stride;
  unsigned nqueues;
  atomic_int failed;
  char errmsg[512]; /* written by the first failing task only */
  /* maize-rerun: the graph built by the first run and its root, kept. */
  bool rerun;
  mz_graph *G;
  mz_op *root;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int tbm_kernel(const mz_call *c) {
  struct tbm *m = c->user;
  long gi, t, p;
  tb_task_unpack(c->args[0].u64, &gi, &t, &p);
  const tb_graph *g = &m->app->graphs[gi];
  char *scratch = g->scratch_bytes ? m->scratch + (size_t)c->queue * m->scratch_stride : NULL;
  char err[320];
  if (tb_execute_point(g, t, p, c->args[1].p, c->shapes[1].count, (const void *const *)&c->args[2].p, NULL,
                       c->nargs - 2, scratch, g->scratch_bytes, err, sizeof err)) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&m->failed, &expected, 1)) snprintf(m->errmsg, sizeof m->errmsg, "%s", err);
    return MZ_EKERNEL;
  }
  return 0;
}

static int mfail(char *err, size_t errsz, struct tbm *m, const char *what, int rc) {
  snprintf(err, errsz, "maize: %s: %s (%s)%s%s", what, mz_err_name(rc), mz_strerror(rc), m && m->rt ? ": " : "",
           m && m->rt ? mz_runtime_last_error(m->rt) : "");
  return -1;
}

static void tbm_destroy(void *state) {
  struct tbm *m = state;
  if (!m) return;
  for (int gi = 0; gi < TB_MAX_GRAPHS; gi++) {
    struct tbm_graph *tg = &m->g[gi];
    if (tg->bufs) {
      const tb_graph *g = &m->app->graphs[gi];
      for (long i = 0; i < g->fields * g->max_width; i++) mz_buffer_release(tg->bufs[i]);
    }
    free(tg->bufs);
    free(tg->prev);
    free(tg->cur);
    free(tg->prev_task);
    free(tg->cur_task);
  }
  mz_graph_destroy(m->G);
  if (m->kernels)
    for (unsigned k = 0; k <= m->maxin; k++) mz_kernel_destroy(m->kernels[k]);
  free(m->kernels);
  free(m->ops);
  free(m->outs);
  free(m->futs);
  free(m->consumed);
  free(m->args);
  free(m->in);
  free(m->scratch);
  free(m->policy);
  mz_runtime_destroy(m->rt);
  free(m);
}

static int tbm_create(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  *state = NULL;
  struct tbm *m = calloc(1, sizeof *m);
  if (!m) return snprintf(err, errsz, "maize: out of memory"), -1;
  m->app = app;
  m->inject = o->inject_wrong_dep;
  m->breakdown = o->breakdown;
  m->chunk = o->chunk < 0 ? 0 : o->chunk == 0 ? 64 : (size_t)o->chunk;
  atomic_init(&m->failed, 0);
  char devices[32];
  mz_runtime_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.devices = o->devices;
  if (!cfg.devices && o->workers > 0) {
    snprintf(devices, sizeof devices, "cpu:%ld", o->workers);
    cfg.devices = devices;
  }
  cfg.policy = o->policy;
  cfg.quiet = getenv("MZ_QUIET") && !strcmp(getenv("MZ_QUIET"), "1");
  int rc = mz_runtime_create(&cfg, &m->rt);
  if (rc) {
    snprintf(err, errsz, "maize: mz_runtime_create(devices %s, policy %s): %s (%s)",
             cfg.devices ? cfg.devices : "$MZ_DEVICES", cfg.policy ? cfg.policy : "$MZ_POLICY", mz_err_name(rc),
             mz_strerror(rc));
    free(m);
    /* An unknown device kind or policy, a device that is not there: the
     * caller's options are wrong. */
    return rc == MZ_ENOENT || rc == MZ_ENODEV || rc == MZ_EINVAL ? -2 : -1;
  }
  if (o->policy && !(m->policy = strdup(o->policy))) goto oom;

  size_t maxscratch = 0;
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    long mi = tb_max_inputs(g);
    if ((unsigned long)mi > m->maxin) m->maxin = (unsigned)mi;
    if (g->scratch_bytes > maxscratch) maxscratch = g->scratch_bytes;
    for (long t = 0; t < g->timesteps; t++) m->ntasks += (size_t)tb_width_at(g, t);
  }

  /* One kernel per arity. */
  if (!(m->kernels = calloc(m->maxin + 1, sizeof *m->kernels))) goto oom;
  size_t plen = 64 + 24 * (size_t)m->maxin;
  char *params = malloc(plen);
  if (!params) goto oom;
  for (unsigned k = 0; k <= m->maxin; k++) {
    size_t len = (size_t)snprintf(params, plen, "u64 id, out u8[] o");
    for (unsigned i = 0; i < k; i++) len += (size_t)snprintf(params + len, plen - len, ", in u8[] i%u", i);
    char name[32];
    snprintf(name, sizeof name, "taskbench_%u", k);
    mz_kernel_spec ks;
    memset(&ks, 0, sizeof ks);
    ks.name = name;
    ks.params = params;
    ks.cpu.fn = tbm_kernel;
    ks.cpu.user = m;
    if ((rc = mz_kernel_create(m->rt, &ks, &m->kernels[k]))) {
      free(params);
      mfail(err, errsz, m, "mz_kernel_create", rc);
      tbm_destroy(m);
      return -1;
    }
  }
  free(params);

  /* Output buffers, made once: slot s of point p. */
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    struct tbm_graph *tg = &m->g[gi];
    size_t nb = (size_t)g->fields * (size_t)g->max_width;
    if (!(tg->bufs = calloc(nb, sizeof *tg->bufs))) goto oom;
    if (!(tg->prev = calloc((size_t)g->max_width, sizeof *tg->prev))) goto oom;
    if (!(tg->cur = calloc((size_t)g->max_width, sizeof *tg->cur))) goto oom;
    if (!(tg->prev_task = calloc((size_t)g->max_width, sizeof *tg->prev_task))) goto oom;
    if (!(tg->cur_task = calloc((size_t)g->max_width, sizeof *tg->cur_task))) goto oom;
    size_t dims[1] = {g->output_bytes};
    for (size_t i = 0; i < nb; i++)
      if ((rc = mz_buffer_create(m->rt, MZ_U8, 1, dims, NULL, &tg->bufs[i]))) {
        mfail(err, errsz, m, "mz_buffer_create", rc);
        tbm_destroy(m);
        return -1;
      }
  }
  if (!(m->ops = malloc((m->ntasks ? m->ntasks : 1) * sizeof *m->ops))) goto oom;
  if (!(m->outs = malloc((m->ntasks ? m->ntasks : 1) * sizeof *m->outs))) goto oom;
  if (!(m->consumed = malloc(m->ntasks ? m->ntasks : 1))) goto oom;
  if (!(m->args = malloc((m->maxin + 2) * sizeof *m->args))) goto oom;
  if (!(m->in = malloc((m->maxin + 1) * sizeof *m->in))) goto oom;
  m->nqueues = mz_runtime_queue_count(m->rt);
  if (maxscratch) {
    m->scratch_stride = (maxscratch + 63) / 64 * 64;
    if (!(m->scratch = aligned_alloc(64, m->scratch_stride * m->nqueues))) goto oom;
    tb_prepare_scratch(m->scratch, m->scratch_stride * m->nqueues);
  }
  *state = m;
  return 0;
oom:
  snprintf(err, errsz, "maize: out of memory");
  tbm_destroy(m);
  return -1;
}

/* Schedule ops[from, to) as one run (their join), keeping its future. */
static int tbm_schedule(struct tbm *m, mz_graph *G, size_t from, size_t to, char *err, size_t errsz) {
  if (from == to) return 0;
  if (m->nfuts == m->capfuts) {
    size_t cap = m->capfuts ? m->capfuts * 2 : 64;
    mz_future **v = realloc(m->futs, cap * sizeof *v);
    if (!v) {
      snprintf(err, errsz, "maize: out of memory");
      return -1;
    }
    m->futs = v;
    m->capfuts = cap;
  }
  mz_future *f;
  mz_op *root = mz_join(G, (unsigned)(to - from), m->outs + from);
  if (m->rerun) m->root = root;
  int rc = mz_schedule(G, root, m->policy, &f);
  if (rc) {
    snprintf(err, errsz, "maize: mz_schedule: %s: %s", mz_err_name(rc), mz_runtime_last_error(m->rt));
    return -1;
  }
  m->futs[m->nfuts++] = f;
  return 0;
}

/* A run of the graph the first run built (maize-rerun). */
static int tbm_rerun(struct tbm *m, double *seconds, char *err, size_t errsz) {
  uint64_t t0 = now_ns();
  mz_future *f;
  int rc = mz_graph_run(m->G, m->root, m->policy, &f);
  if (rc) return mfail(err, errsz, m, "mz_graph_run", rc);
  int st = mz_future_wait(f);
  uint64_t t1 = now_ns();
  mz_run_stats rs;
  uint64_t ran = mz_future_stats(f, &rs) == MZ_OK ? rs.ops : 0;
  int ret = 0;
  if (atomic_load(&m->failed)) {
    snprintf(err, errsz, "input check failed: %s", m->errmsg);
    ret = -1;
  } else if (st) {
    snprintf(err, errsz, "maize: run failed: %s: %s", mz_err_name(st), mz_future_message(f));
    ret = -1;
  } else if (ran != m->ntasks) {
    snprintf(err, errsz, "maize: re-ran %" PRIu64 " tasks, expected %zu", ran, m->ntasks);
    ret = -1;
  }
  mz_future_destroy(f);
  *seconds = (double)(t1 - t0) * 1e-9;
  return ret;
}

static int tbm_run(void *state, double *seconds, char *err, size_t errsz) {
  struct tbm *m = state;
  const tb_app *app = m->app;
  atomic_store(&m->failed, 0);
  m->errmsg[0] = 0;
  if (m->G) return tbm_rerun(m, seconds, err, errsz);
  long maxsteps = 0;
  for (int gi = 0; gi < app->ngraphs; gi++)
    if (app->graphs[gi].timesteps > maxsteps) maxsteps = app->graphs[gi].timesteps;

  uint64_t t0 = now_ns();
  mz_graph *G;
  int rc = mz_graph_create(m->rt, &G);
  if (rc) return mfail(err, errsz, m, "mz_graph_create", rc);
  size_t n = 0, scheduled = 0;
  long with_inputs = 0;
  m->nfuts = 0;
  memset(m->consumed, 0, m->ntasks);
  for (long t = 0; t < maxsteps; t++) {
    for (int gi = 0; gi < app->ngraphs; gi++) {
      const tb_graph *g = &app->graphs[gi];
      if (t >= g->timesteps) continue;
      struct tbm_graph *tg = &m->g[gi];
      long off = tb_offset_at(g, t), w = tb_width_at(g, t);
      mz_buffer **slot = tg->bufs + (size_t)(t % g->fields) * (size_t)g->max_width;
      for (long p = off; p < off + w; p++) {
        size_t nin = tb_inputs(g, t, p, m->in);
        m->args[0] = mz_u64(G, tb_task_id(gi, t, p));
        m->args[1] = mz_value(G, slot[p]);
        for (size_t k = 0; k < nin; k++) {
          m->args[2 + k] = tg->prev[m->in[k]];
          m->consumed[tg->prev_task[m->in[k]]] = 1;
        }
        if (nin && m->inject && ++with_inputs == m->inject) {
          /* Tests: a wrong producer for the first input. */
          long lo = tb_offset_at(g, t - 1), lw = tb_width_at(g, t - 1);
          m->args[2] = tg->prev[lo + (m->in[0] - lo + 1) % lw];
        }
        mz_op *op = mz_apply(G, m->kernels[nin], mz_zip(G, (unsigned)(2 + nin), m->args), NULL);
        tg->cur_task[p] = n;
        tg->cur[p] = mz_unzip(G, op, 1);
        m->outs[n] = tg->cur[p];
        m->ops[n++] = op;
      }
      mz_op **sw = tg->prev;
      tg->prev = tg->cur;
      tg->cur = sw;
      size_t *sx = tg->prev_task;
      tg->prev_task = tg->cur_task;
      tg->cur_task = sx;
    }
    /* Chunked: hand the tasks built so far to the workers now. */
    if (m->chunk && n - scheduled >= m->chunk && !mz_graph_status(G)) {
      if (tbm_schedule(m, G, scheduled, n, err, errsz)) goto fail;
      scheduled = n;
    }
  }
  if ((rc = mz_graph_status(G))) {
    snprintf(err, errsz, "maize: building the graph: %s: %s", mz_err_name(rc), mz_graph_message(G));
    goto fail;
  }
  uint64_t tb = now_ns();
  if (m->chunk) {
    if (tbm_schedule(m, G, scheduled, n, err, errsz)) goto fail;
  } else {
    /* The root joins the sinks only (tasks whose output no task reads):
     * every other task is needed by one of them.  Compacted in place. */
    size_t nsinks = 0;
    for (size_t i = 0; i < n; i++)
      if (!m->consumed[i]) m->ops[nsinks++] = m->outs[i];
    memcpy(m->outs, m->ops, nsinks * sizeof *m->ops);
    if (tbm_schedule(m, G, 0, nsinks, err, errsz)) goto fail;
  }
  uint64_t ts = now_ns();
  rc = MZ_OK;
  mz_future *bad = NULL;
  uint64_t ran = 0;
  for (size_t i = 0; i < m->nfuts; i++) {
    int st = mz_future_wait(m->futs[i]);
    mz_run_stats rs;
    if (mz_future_stats(m->futs[i], &rs) == MZ_OK) ran += rs.ops;
    if (st && !rc) {
      rc = st;
      bad = m->futs[i];
    }
  }
  uint64_t t1 = now_ns();
  if (m->breakdown)
    fprintf(stderr, "maize: %zu tasks in %zu runs, %zu graph nodes: build %.0f ns/task, last mz_schedule %.0f ns/task, wait %.0f ns/task\n",
            n, m->nfuts, mz_graph_node_count(G), (double)(tb - t0) / (double)n, (double)(ts - tb) / (double)n,
            (double)(t1 - ts) / (double)n);
  int ret = 0;
  if (atomic_load(&m->failed)) {
    snprintf(err, errsz, "input check failed: %s", m->errmsg);
    ret = -1;
  } else if (rc) {
    snprintf(err, errsz, "maize: run failed: %s: %s", mz_err_name(rc), mz_future_message(bad));
    ret = -1;
  } else if (ran != n) {
    snprintf(err, errsz, "maize: ran %" PRIu64 " tasks, expected %zu", ran, n);
    ret = -1;
  }
  for (size_t i = 0; i < m->nfuts; i++) mz_future_destroy(m->futs[i]);
  m->nfuts = 0;
  if (m->rerun && ret == 0) m->G = G; /* kept for the next runs */
  else mz_graph_destroy(G);
  *seconds = (double)(t1 - t0) * 1e-9;
  return ret;
fail:
  for (size_t i = 0; i < m->nfuts; i++) {
    (void)mz_future_wait(m->futs[i]);
    mz_future_destroy(m->futs[i]);
  }
  m->nfuts = 0;
  mz_graph_destroy(G);
  return -1;
}

const tb_system tb_system_maize = {
    .name = "maize",
    .available = 1,
    .create = tbm_create,
    .run = tbm_run,
    .destroy = tbm_destroy,
};

static int tbm_create_rerun(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  tb_sys_opts one = *o;
  one.chunk = -1; /* one run, one root */
  int rc = tbm_create(app, &one, state, err, errsz);
  if (rc == 0) ((struct tbm *)*state)->rerun = true;
  return rc;
}

const tb_system tb_system_maize_rerun = {
    .name = "maize-rerun",
    .available = 1,
    .create = tbm_create_rerun,
    .run = tbm_run,
    .destroy = tbm_destroy,
};
