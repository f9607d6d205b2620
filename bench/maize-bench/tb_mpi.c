/* Task Bench across MPI ranks (built where maize has MPI):
 *
 *   maize-mpi         each task (timestep, point) one mz_dgraph_apply on
 *                     every rank; point p's outputs are owned by rank
 *                     block(p), so a task runs there and its inputs from
 *                     other ranks' points arrive by MPI (maize/mpi.h).  The
 *                     distributed graph is built inside the timed region,
 *                     as Task Bench times task creation.
 *   maize-mpi-rerun   the same graph built once (in the first run) and run
 *                     again: the plan is made once.  Both run and wait
 *                     with mz_dgraph_run_wait (the rank's thread runs its
 *                     part of the run: maize/mpi.h).
 *   maize-mpi-pair    as maize-mpi-rerun, with mz_dgraph_run then
 *                     mz_dgraph_wait (a CPU worker runs the rank's part).
 *   mpi               the peer: plain MPI as Task Bench's own MPI version
 *                     does it (one thread per rank; each timestep posts the
 *                     receives of its remote inputs and the sends of the
 *                     previous timestep's outputs to the ranks that read
 *                     them, waits for all, then runs its points).
 *
 * Points are dealt to ranks in blocks (mz_mpi_block) by all three.  Every
 * task checks its inputs with tb_execute_point.  A run is timed from a
 * barrier to the end of the last rank's work: the elapsed time is the
 * largest of the ranks' (MPI_Allreduce MAX), the same on every rank.
 *
 * Commands (under mpirun; each rank prints nothing but rank 0):
 *   maize-bench taskbench --system maize-mpi|maize-mpi-rerun|maize-mpi-pair|mpi ...
 *   maize-bench mpi-metg   METG(50%) of the four, BENCH mpi.taskbench
 *   maize-bench mpi-weak   weak scaling of a compute-bound stencil,
 *                          BENCH mpi.weak */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maize.h>
#include <maize/mpi.h>

#include "mzb.h"
#include "patterns.h"
#include "tb_systems.h"

_Static_assert(sizeof(mz_arg) == sizeof(void *), "mz_arg must be pointer-sized");

/* MPI is started once per process by whichever system or command needs it
 * first, with MPI_THREAD_MULTIPLE (maize's communication thread and the
 * bench's own barriers run at once), and finalized at exit. */
static void mpi_finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

int mzb_mpi_start(char *err, size_t errsz) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return 0;
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    snprintf(err, errsz, "MPI_Init_thread failed");
    return -1;
  }
  atexit(mpi_finalize_at_exit);
  if (provided < MPI_THREAD_MULTIPLE) {
    snprintf(err, errsz, "MPI gives thread level %d, the benchmark needs MPI_THREAD_MULTIPLE", provided);
    return -1;
  }
  return 0;
}

int mzb_mpi_rank(void) {
  int inited = 0, r = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

static double now_s(void) { return MPI_Wtime(); }

/* The largest of the ranks' values. */
static double max_all(double v) {
  double m = v;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static int owner_of(long p, long width, int size) { return mz_mpi_block((size_t)p, (size_t)width, size); }

/* ---- maize-mpi ---- */

struct tbd {
  const tb_app *app;
  mz_runtime *rt;
  mz_mpi *m;
  int rank, size;
  bool rerun;
  bool pair;                       /* mz_dgraph_run + mz_dgraph_wait, not mz_dgraph_run_wait */
  char *policy;
  unsigned maxin;
  mz_kernel **kernels;
  mz_buffer **bufs[TB_MAX_GRAPHS]; /* fields * max_width per graph */
  mz_dgraph *dg;                   /* rerun: the graph kept */
  mz_darg *args;
  long *in;
  char *scratch;
  size_t scratch_stride;
  atomic_int failed;
  char errmsg[512];
};

static int tbd_kernel(const mz_call *c) {
  struct tbd *d = c->user;
  long gi, t, p;
  tb_task_unpack(c->args[0].u64, &gi, &t, &p);
  const tb_graph *g = &d->app->graphs[gi];
  char *scratch = g->scratch_bytes ? d->scratch + (size_t)c->queue * d->scratch_stride : NULL;
  char err[320];
  if (tb_execute_point(g, t, p, c->args[1].p, c->shapes[1].count, (const void *const *)&c->args[2].p, NULL,
                       c->nargs - 2, scratch, g->scratch_bytes, err, sizeof err)) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&d->failed, &expected, 1)) snprintf(d->errmsg, sizeof d->errmsg, "%s", err);
    return MZ_EKERNEL;
  }
  return 0;
}

static void tbd_destroy(void *state) {
  struct tbd *d = state;
  if (!d) return;
  mz_dgraph_destroy(d->dg);
  for (int gi = 0; gi < TB_MAX_GRAPHS; gi++) {
    if (!d->bufs[gi]) continue;
    const tb_graph *g = &d->app->graphs[gi];
    for (long i = 0; i < g->fields * g->max_width; i++) mz_buffer_release(d->bufs[gi][i]);
    free(d->bufs[gi]);
  }
  if (d->kernels)
    for (unsigned k = 0; k <= d->maxin; k++) mz_kernel_destroy(d->kernels[k]);
  free(d->kernels);
  mz_mpi_destroy(d->m);
  mz_runtime_destroy(d->rt);
  free(d->args);
  free(d->in);
  free(d->scratch);
  free(d->policy);
  free(d);
}

static int tbd_fail(struct tbd *d, char *err, size_t errsz, const char *what, int rc) {
  snprintf(err, errsz, "maize-mpi: %s: %s (%s)", what, mz_err_name(rc), d->rt ? mz_runtime_last_error(d->rt) : "");
  return -1;
}

static int tbd_create_common(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz,
                             bool rerun, bool pair) {
  *state = NULL;
  if (mzb_mpi_start(err, errsz)) return -1;
  struct tbd *d = calloc(1, sizeof *d);
  if (!d) return snprintf(err, errsz, "out of memory"), -1;
  d->app = app;
  d->rerun = rerun;
  d->pair = pair;
  atomic_init(&d->failed, 0);
  char devices[32];
  mz_runtime_config cfg = {.devices = o->devices, .policy = o->policy, .quiet = true};
  if (!cfg.devices) {
    snprintf(devices, sizeof devices, "cpu:%ld", o->workers > 0 ? o->workers : 1);
    cfg.devices = devices;
  }
  int rc = mz_runtime_create(&cfg, &d->rt);
  if (rc) {
    free(d);
    snprintf(err, errsz, "maize-mpi: mz_runtime_create: %s", mz_err_name(rc));
    return rc == MZ_ENOENT || rc == MZ_ENODEV || rc == MZ_EINVAL ? -2 : -1;
  }
  if (o->policy && !(d->policy = strdup(o->policy))) goto oom;
  if ((rc = mz_mpi_create(d->rt, &d->m))) {
    tbd_fail(d, err, errsz, "mz_mpi_create", rc);
    tbd_destroy(d);
    return -1;
  }
  d->rank = mz_mpi_rank(d->m);
  d->size = mz_mpi_size(d->m);
  size_t maxscratch = 0;
  for (int gi = 0; gi < app->ngraphs; gi++) {
    long mi = tb_max_inputs(&app->graphs[gi]);
    if ((unsigned long)mi > d->maxin) d->maxin = (unsigned)mi;
    if (app->graphs[gi].scratch_bytes > maxscratch) maxscratch = app->graphs[gi].scratch_bytes;
  }
  if (!(d->kernels = calloc(d->maxin + 1, sizeof *d->kernels))) goto oom;
  for (unsigned k = 0; k <= d->maxin; k++) {
    char params[64 + 24 * 64], name[32];
    if (d->maxin > 64) {
      snprintf(err, errsz, "maize-mpi: more than 64 inputs per task");
      tbd_destroy(d);
      return -1;
    }
    size_t len = (size_t)snprintf(params, sizeof params, "u64 id, out u8[] o");
    for (unsigned i = 0; i < k; i++) len += (size_t)snprintf(params + len, sizeof params - len, ", in u8[] i%u", i);
    snprintf(name, sizeof name, "taskbench_%u", k);
    mz_kernel_spec ks = {.name = name, .params = params, .cpu = {.fn = tbd_kernel, .user = d}};
    if ((rc = mz_kernel_create(d->rt, &ks, &d->kernels[k]))) {
      tbd_fail(d, err, errsz, "mz_kernel_create", rc);
      tbd_destroy(d);
      return -1;
    }
  }
  /* Every rank makes every buffer; point p's are owned by block(p). */
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    size_t nb = (size_t)g->fields * (size_t)g->max_width;
    if (!(d->bufs[gi] = calloc(nb, sizeof *d->bufs[gi]))) goto oom;
    for (size_t i = 0; i < nb; i++) {
      if ((rc = mz_buffer_create(d->rt, MZ_U8, 1, (size_t[]){g->output_bytes}, NULL, &d->bufs[gi][i])) ||
          (rc = mz_mpi_register(d->m, d->bufs[gi][i], owner_of((long)(i % (size_t)g->max_width), g->max_width, d->size)))) {
        tbd_fail(d, err, errsz, "buffers", rc);
        tbd_destroy(d);
        return -1;
      }
    }
  }
  if (!(d->args = malloc((d->maxin + 2) * sizeof *d->args))) goto oom;
  if (!(d->in = malloc((d->maxin + 1) * sizeof *d->in))) goto oom;
  if (maxscratch) {
    unsigned nq = mz_runtime_queue_count(d->rt);
    d->scratch_stride = (maxscratch + 63) / 64 * 64;
    if (!(d->scratch = aligned_alloc(64, d->scratch_stride * nq))) goto oom;
    tb_prepare_scratch(d->scratch, d->scratch_stride * nq);
  }
  *state = d;
  return 0;
oom:
  snprintf(err, errsz, "maize-mpi: out of memory");
  tbd_destroy(d);
  return -1;
}

static int tbd_create(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  return tbd_create_common(app, o, state, err, errsz, false, false);
}
static int tbd_create_rerun(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  return tbd_create_common(app, o, state, err, errsz, true, false);
}
static int tbd_create_pair(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  return tbd_create_common(app, o, state, err, errsz, true, true);
}

static int tbd_build(struct tbd *d, mz_dgraph **out, char *err, size_t errsz) {
  int rc = mz_dgraph_create(d->m, out);
  if (rc) return tbd_fail(d, err, errsz, "mz_dgraph_create", rc);
  mz_dgraph *dg = *out;
  for (long t = 0;; t++) {
    bool any = false;
    for (int gi = 0; gi < d->app->ngraphs; gi++) {
      const tb_graph *g = &d->app->graphs[gi];
      if (t >= g->timesteps) continue;
      any = true;
      long off = tb_offset_at(g, t), w = tb_width_at(g, t);
      for (long p = off; p < off + w; p++) {
        size_t n = tb_inputs(g, t, p, d->in);
        d->args[0] = (mz_darg){.dtype = MZ_U64, .value.u64 = tb_task_id(gi, t, p)};
        d->args[1] = (mz_darg){.buf = d->bufs[gi][(size_t)(t % g->fields) * (size_t)g->max_width + (size_t)p]};
        for (size_t i = 0; i < n; i++)
          d->args[2 + i] =
              (mz_darg){.buf = d->bufs[gi][(size_t)((t - 1) % g->fields) * (size_t)g->max_width + (size_t)d->in[i]]};
        mz_dgraph_apply(dg, d->kernels[n], (unsigned)(n + 2), d->args, NULL, MZ_MPI_OWNER);
      }
    }
    if (!any) break;
  }
  rc = mz_dgraph_status(dg);
  if (rc) {
    snprintf(err, errsz, "maize-mpi: building: %s", mz_dgraph_message(dg));
    return -1;
  }
  return 0;
}

static int tbd_run(void *state, double *seconds, char *err, size_t errsz) {
  struct tbd *d = state;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  mz_dgraph *dg = d->dg;
  int rc = 0;
  if (!dg) {
    rc = tbd_build(d, &dg, err, errsz);
    if (d->rerun) d->dg = dg;
  }
  mz_future *f = NULL;
  int all = MZ_EINVAL;
  if (rc) {
    all = dg ? mz_dgraph_wait(dg, NULL) : MZ_EINVAL; /* the peers still agree on a status */
  } else if (d->pair) {
    int st = mz_dgraph_run(dg, d->policy, &f);
    all = mz_dgraph_wait(dg, f);
    (void)st; /* a failure here is this rank's status in the wait */
  } else {
    all = mz_dgraph_run_wait(dg, d->policy);
  }
  double t1 = now_s();
  mz_future_destroy(f);
  if (!d->rerun) mz_dgraph_destroy(dg);
  *seconds = max_all(t1 - t0);
  if (rc) return -1;
  if (all != MZ_OK) {
    snprintf(err, errsz, "maize-mpi: run: %s%s%s", mz_err_name(all), atomic_load(&d->failed) ? ": " : "",
             atomic_load(&d->failed) ? d->errmsg : "");
    return -1;
  }
  return 0;
}

const tb_system tb_system_maize_mpi = {"maize-mpi", 1, tbd_create, tbd_run, tbd_destroy};
const tb_system tb_system_maize_mpi_rerun = {"maize-mpi-rerun", 1, tbd_create_rerun, tbd_run, tbd_destroy};
const tb_system tb_system_maize_mpi_pair = {"maize-mpi-pair", 1, tbd_create_pair, tbd_run, tbd_destroy};

/* ---- the plain MPI peer ---- */

struct tbp_graph {
  char **cur, **prev; /* per point: this rank's outputs (NULL for others' points) */
  char **rbuf;        /* per point: the received output of another rank's point */
  long *posted;       /* per point: the timestep its receive was posted for, -1 */
};

struct tbp {
  const tb_app *app;
  int rank, size;
  struct tbp_graph g[TB_MAX_GRAPHS];
  MPI_Request *reqs;
  size_t capreq;
  long *in;
  const void **inp;
  tb_span *spans;
  char *sent;  /* per rank: a point's output already goes there this step */
  char *scratch;
};

static void tbp_destroy(void *state) {
  struct tbp *p = state;
  if (!p) return;
  for (int gi = 0; gi < TB_MAX_GRAPHS; gi++) {
    struct tbp_graph *tg = &p->g[gi];
    if (!tg->cur) continue;
    for (long i = 0; i < p->app->graphs[gi].max_width; i++) {
      free(tg->cur[i]);
      free(tg->prev[i]);
      free(tg->rbuf[i]);
    }
    free(tg->cur);
    free(tg->prev);
    free(tg->rbuf);
    free(tg->posted);
  }
  free(p->reqs);
  free(p->in);
  free(p->inp);
  free(p->spans);
  free(p->sent);
  free(p->scratch);
  free(p);
}

static int tbp_create(const tb_app *app, const tb_sys_opts *o, void **state, char *err, size_t errsz) {
  (void)o;
  *state = NULL;
  if (mzb_mpi_start(err, errsz)) return -1;
  struct tbp *p = calloc(1, sizeof *p);
  if (!p) return snprintf(err, errsz, "out of memory"), -1;
  p->app = app;
  MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p->size);
  long maxin = 1, maxw = 1;
  size_t maxspans = 1, maxscratch = 0;
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    struct tbp_graph *tg = &p->g[gi];
    if (tb_max_inputs(g) > maxin) maxin = tb_max_inputs(g);
    if (g->max_width > maxw) maxw = g->max_width;
    if (tb_max_spans(g) > maxspans) maxspans = tb_max_spans(g);
    if (g->scratch_bytes > maxscratch) maxscratch = g->scratch_bytes;
    size_t w = (size_t)g->max_width;
    if (!(tg->cur = calloc(w, sizeof *tg->cur)) || !(tg->prev = calloc(w, sizeof *tg->prev)) ||
        !(tg->rbuf = calloc(w, sizeof *tg->rbuf)) || !(tg->posted = malloc(w * sizeof *tg->posted)))
      goto oom;
    for (size_t i = 0; i < w; i++) {
      tg->posted[i] = -1;
      if (owner_of((long)i, g->max_width, p->size) == p->rank) {
        if (!(tg->cur[i] = calloc(1, g->output_bytes)) || !(tg->prev[i] = calloc(1, g->output_bytes))) goto oom;
      } else if (!(tg->rbuf[i] = calloc(1, g->output_bytes))) {
        goto oom;
      }
    }
  }
  p->capreq = 2 * (size_t)maxw * (size_t)(maxin + p->size) + 16;
  if (!(p->reqs = malloc(p->capreq * sizeof *p->reqs)) || !(p->in = malloc((size_t)maxin * sizeof *p->in)) ||
      !(p->inp = malloc((size_t)maxin * sizeof *p->inp)) || !(p->spans = malloc(maxspans * sizeof *p->spans)) ||
      !(p->sent = malloc((size_t)p->size)))
    goto oom;
  if (maxscratch) {
    if (!(p->scratch = aligned_alloc(64, (maxscratch + 63) / 64 * 64))) goto oom;
    tb_prepare_scratch(p->scratch, (maxscratch + 63) / 64 * 64);
  }
  *state = p;
  return 0;
oom:
  snprintf(err, errsz, "mpi: out of memory");
  tbp_destroy(p);
  return -1;
}

/* One graph's timestep t: receive remote inputs, send last step's outputs
 * to the ranks that read them, wait, run this rank's points. */
static int tbp_step(struct tbp *p, int gi, long t, char *err, size_t errsz) {
  const tb_graph *g = &p->app->graphs[gi];
  struct tbp_graph *tg = &p->g[gi];
  long off = tb_offset_at(g, t), w = tb_width_at(g, t);
  size_t nreq = 0;
  /* Tags: graph and point (widths are far below 2^20; Open MPI's
   * MPI_TAG_UB is 2^31 - 1). */
  const int tagg = 1 << 20;
  for (long q = off; q < off + w; q++) {
    if (owner_of(q, g->max_width, p->size) != p->rank) continue;
    size_t n = tb_inputs(g, t, q, p->in);
    for (size_t i = 0; i < n; i++) {
      long src = p->in[i];
      int o = owner_of(src, g->max_width, p->size);
      if (o == p->rank || tg->posted[src] == t) continue;
      tg->posted[src] = t;
      MPI_Irecv(tg->rbuf[src], (int)g->output_bytes, MPI_BYTE, o, gi * tagg + (int)src,
                MPI_COMM_WORLD, &p->reqs[nreq++]);
    }
  }
  if (t > 0) {
    long poff = tb_offset_at(g, t - 1), pw = tb_width_at(g, t - 1);
    long dset = tb_dset_at(g, t);
    for (long src = poff; src < poff + pw; src++) {
      if (owner_of(src, g->max_width, p->size) != p->rank) continue;
      memset(p->sent, 0, (size_t)p->size);
      size_t ns = tb_rdeps(g, dset, src, p->spans);
      for (size_t s = 0; s < ns; s++)
        for (long q = p->spans[s].first; q <= p->spans[s].last; q++) {
          if (q < off || q >= off + w) continue;
          int o = owner_of(q, g->max_width, p->size);
          if (o == p->rank || p->sent[o]) continue;
          p->sent[o] = 1;
          MPI_Isend(tg->prev[src], (int)g->output_bytes, MPI_BYTE, o, gi * tagg + (int)src,
                    MPI_COMM_WORLD, &p->reqs[nreq++]);
        }
    }
  }
  if (nreq > p->capreq) abort(); /* sized in create: never */
  MPI_Waitall((int)nreq, p->reqs, MPI_STATUSES_IGNORE);
  for (long q = off; q < off + w; q++) {
    if (owner_of(q, g->max_width, p->size) != p->rank) continue;
    size_t n = tb_inputs(g, t, q, p->in);
    for (size_t i = 0; i < n; i++) {
      long src = p->in[i];
      p->inp[i] = owner_of(src, g->max_width, p->size) == p->rank ? tg->prev[src] : tg->rbuf[src];
    }
    if (tb_execute_point(g, t, q, tg->cur[q], g->output_bytes, p->inp, NULL, n, p->scratch, g->scratch_bytes, err,
                         errsz))
      return -1;
  }
  for (long q = off; q < off + w; q++)
    if (tg->cur[q]) {
      char *x = tg->cur[q];
      tg->cur[q] = tg->prev[q];
      tg->prev[q] = x;
    }
  return 0;
}

static int tbp_run(void *state, double *seconds, char *err, size_t errsz) {
  struct tbp *p = state;
  for (int gi = 0; gi < p->app->ngraphs; gi++)
    for (long i = 0; i < p->app->graphs[gi].max_width; i++) p->g[gi].posted[i] = -1;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  int rc = 0;
  for (long t = 0; !rc; t++) {
    bool any = false;
    for (int gi = 0; gi < p->app->ngraphs && !rc; gi++)
      if (t < p->app->graphs[gi].timesteps) {
        any = true;
        rc = tbp_step(p, gi, t, err, errsz);
      }
    if (!any) break;
  }
  double t1 = now_s();
  /* A failed check on one rank fails every rank's run (and none waits). */
  int bad = rc != 0, anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  *seconds = max_all(t1 - t0);
  if (anybad && !rc) snprintf(err, errsz, "mpi: another rank's input check failed");
  return anybad ? -1 : 0;
}

const tb_system tb_system_mpi = {"mpi", 1, tbp_create, tbp_run, tbp_destroy};

/* ---- maize-bench mpi-metg ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sort v (n values, n >= 1) and return its median. */
static double sort_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MPI_NSYS 4
#define MPI_MAXPTS 40

/* A METG for a BENCH line: "na" where none was found (tb_metg < 0). */
static void fmt_metg(char *out, size_t n, double metg) {
  if (metg >= 0) snprintf(out, n, "%.2f", metg);
  else snprintf(out, n, "na");
}

/* The ratio of two METGs, or "na". */
static void fmt_ratio(char *out, size_t n, double a, double b) {
  if (a > 0 && b > 0) snprintf(out, n, "%.2f", a / b);
  else snprintf(out, n, "na");
}

static int parse_long(const char *cmd, const char *name, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi) {
    fprintf(stderr, "maize-bench %s: %s must be %ld..%ld, not '%s'\n", cmd, name, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

/* The median of reps timed runs of sys on app.  Each system starts on
 * quiet cores: a maize runtime's workers spin for up to $MZ_SPIN_US after
 * its run and its communication thread may poll for up to
 * $MZ_MPI_SPIN_US, which on a machine with a core per rank would take
 * part of the core from the next system's first run (a fine run of the
 * peer is a few hundred microseconds).  ns: when not NULL, the kernel's
 * nanoseconds per iteration just before the runs, the slowest rank's
 * (tb_compute_ns_per_iter).  busy: when not NULL, the median over the
 * runs of the share of the cores' time (cores of them) that the tasks
 * themselves took (tb_busy_ns, summed over the ranks). */
static int timed(const tb_system *sys, void *st, int reps, double *median, double *ns, double *busy, int cores,
                 char *err, size_t errsz) {
  double t[101], b[101];
  struct timespec settle = {0, 5 * 1000 * 1000};
  nanosleep(&settle, NULL);
  if (ns) *ns = max_all(tb_compute_ns_per_iter());
  for (int r = 0; r < reps; r++) {
    double b0 = tb_busy_ns();
    if (sys->run(st, &t[r], err, errsz)) return -1;
    double mine = tb_busy_ns() - b0, all = mine;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    b[r] = t[r] > 0 ? all * 1e-9 / (t[r] * (double)cores) : 0;
  }
  *median = sort_median(t, reps);
  if (busy) *busy = sort_median(b, reps);
  return 0;
}

int mzb_mpi_metg_main(int argc, char **argv) {
  long steps = 200, workers = 1, reps = 3, maxk = -1;
  double coarse_us = 2000;
  const char *pattern = "stencil_1d";
  int quick = 0;
  static const struct option lo[] = {{"steps", required_argument, NULL, 's'}, {"workers", required_argument, NULL, 'w'},
                                     {"reps", required_argument, NULL, 'r'},  {"pattern", required_argument, NULL, 'p'},
                                     {"max-iter-log2", required_argument, NULL, 'k'},
                                     {"quick", no_argument, NULL, 'q'},        {"help", no_argument, NULL, 'h'},
                                     {NULL, 0, NULL, 0}};
  char err[640];
  /* Options are parsed before MPI starts: --help and usage errors need no
   * MPI (every rank prints them). */
  int rank = 0, size = 1;
  int c;
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "r:h", lo, NULL)) != -1) {
    switch (c) {
    case 's': if (parse_long("mpi-metg", "--steps", optarg, 2, 1000000, &steps)) return 2; break;
    case 'w': if (parse_long("mpi-metg", "--workers", optarg, 1, 256, &workers)) return 2; break;
    case 'r': if (parse_long("mpi-metg", "-r", optarg, 1, 101, &reps)) return 2; break;
    case 'k': if (parse_long("mpi-metg", "--max-iter-log2", optarg, 0, 30, &maxk)) return 2; break;
    case 'p': pattern = optarg; break;
    case 'q': quick = 1; break;
    case 'h':
      printf("usage: mpirun -np N maize-bench mpi-metg [--pattern P] [--steps N] [--workers W] [-r N]\n"
               "                                         [--max-iter-log2 K] [--quick]\n"
               "METG(50%%) of maize-mpi, maize-mpi-rerun, plain MPI and maize-mpi-pair on the same Task Bench graph\n"
               "(compute_bound, width = ranks x workers), then BENCH mpi.taskbench.\n");
      return 0;
    default:
      fprintf(stderr, "maize-bench mpi-metg: bad option '%s'\n", argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "maize-bench mpi-metg: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (mzb_mpi_start(err, sizeof err)) {
    fprintf(stderr, "maize-bench mpi-metg: %s\n", err);
    return 1;
  }
  rank = mzb_mpi_rank();
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (quick) {
    steps = steps > 40 ? 40 : steps;
    reps = 1;
  }
  tb_app app;
  memset(&app, 0, sizeof app);
  app.ngraphs = 1;
  tb_graph_default(&app.graphs[0], 0);
  tb_graph *g = &app.graphs[0];
  if (tb_dep_parse(pattern, &g->dep)) {
    fprintf(stderr, "maize-bench mpi-metg: unknown pattern '%s'\n", pattern);
    return 2;
  }
  g->timesteps = steps;
  g->max_width = (long)size * workers;
  g->kernel.type = TB_K_COMPUTE_BOUND;
  g->kernel.iterations = 1;
  if (tb_graph_finish(g, err, sizeof err)) {
    if (rank == 0) fprintf(stderr, "maize-bench mpi-metg: %s\n", err);
    return 2;
  }
  tb_sys_opts opts = {.workers = workers};
  /* The peer third: it calibrates. */
  const tb_system *sys[MPI_NSYS] = {&tb_system_maize_mpi, &tb_system_maize_mpi_rerun, &tb_system_mpi,
                                    &tb_system_maize_mpi_pair};
  void *st[MPI_NSYS] = {0};
  for (int s = 0; s < MPI_NSYS; s++)
    if (sys[s]->create(&app, &opts, &st[s], err, sizeof err)) {
      fprintf(stderr, "maize-bench mpi-metg: %s: %s\n", sys[s]->name, err);
      return 1;
    }
  /* Calibrate on the peer: the coarsest point has tasks of about coarse_us. */
  if (maxk < 0) {
    g->kernel.iterations = 1 << 12;
    double e;
    if (timed(sys[2], st[2], 1, &e, NULL, NULL, size * (int)workers, err, sizeof err)) goto fail;
    double per_iter_us = e * 1e6 * (double)(size * workers) / (double)(steps * g->max_width) / (double)(1 << 12);
    maxk = (long)ceil(log2(coarse_us / (per_iter_us > 0 ? per_iter_us : 1e-3)));
    if (maxk > 26) maxk = 26;
    if (maxk < 4) maxk = 4;
    if (quick && maxk > 14) maxk = 14;
  }
  tb_totals tot;
  int npts = (int)maxk + 1;
  double el[MPI_NSYS][MPI_MAXPTS], fl[MPI_NSYS][MPI_MAXPTS], gr[MPI_NSYS][MPI_MAXPTS], ef[MPI_NSYS][MPI_MAXPTS];
  /* Efficiency two ways.  Task Bench's: FLOP/s over the sweep's best
   * (peak, below).  And against the kernel's speed read just before each
   * system's runs (ec): this machine's speed moves by 2x for seconds at a
   * time, and a sweep's peak read in a fast spell puts every point read in
   * a slow one under 50% (a sweep of several minutes then gave "na"
   * for all but one system), while a system's runs and the reading just
   * before them nearly always fall in one spell.  ec is the time the
   * ranks' tasks take alone at that speed (a core's share of the tasks, of
   * iterations x ns each) over the elapsed time.  drift: the slowest
   * reading of the sweep over the fastest. */
  double ec[MPI_NSYS][MPI_MAXPTS], ns_lo = 1e30, ns_hi = 0;
  /* And a third way, which no speed spell moves: the share of the cores'
   * time spent in the tasks themselves (eb: each task timed where it
   * runs, the same call in every system), the runtime's overhead and the
   * waits for messages being the rest.  Where the speed holds, it equals
   * ec; where a spell slows both the tasks and the runtime, it stays. */
  double eb[MPI_NSYS][MPI_MAXPTS];
  tb_busy_on();
  double peak = 0;
  for (int k = (int)maxk, i = 0; k >= 0 && i < MPI_MAXPTS; k--, i++) {
    g->kernel.iterations = 1L << k;
    tb_app_totals(&app, &tot);
    for (int s = 0; s < MPI_NSYS; s++) {
      double ns = 0;
      if (timed(sys[s], st[s], (int)reps, &el[s][i], &ns, &eb[s][i], size * (int)workers, err, sizeof err)) goto fail;
      fl[s][i] = (double)tot.flops / el[s][i];
      gr[s][i] = el[s][i] * 1e6 * (double)(size * workers) / (double)tot.tasks;
      ec[s][i] = (double)tot.tasks / (double)(size * workers) * (double)g->kernel.iterations * ns * 1e-9 / el[s][i];
      if (ns < ns_lo) ns_lo = ns;
      if (ns > ns_hi) ns_hi = ns;
      if (fl[s][i] > peak) peak = fl[s][i];
    }
  }
  double metg[MPI_NSYS], metgc[MPI_NSYS], metgb[MPI_NSYS];
  for (int s = 0; s < MPI_NSYS; s++) {
    for (int i = 0; i < npts; i++) ef[s][i] = fl[s][i] / peak;
    metg[s] = tb_metg(gr[s], ef[s], (size_t)npts, 0.5);
    metgc[s] = tb_metg(gr[s], ec[s], (size_t)npts, 0.5);
    metgb[s] = tb_metg(gr[s], eb[s], (size_t)npts, 0.5);
  }
  if (rank == 0) {
    printf("mpi-metg: %s, %ld steps, width %ld, %d ranks x %ld workers, compute_bound, median of %ld\n", pattern, steps,
           g->max_width, size, workers, reps);
    printf("%10s", "iter");
    for (int s = 0; s < MPI_NSYS; s++) printf(" %16s %6s %6s %6s", sys[s]->name, "eff", "ceff", "beff");
    printf("\n");
    for (int i = 0; i < npts; i++) {
      printf("%10ld", 1L << (maxk - i));
      for (int s = 0; s < MPI_NSYS; s++) printf(" %13.2f us %6.3f %6.3f %6.3f", gr[s][i], ef[s][i], ec[s][i], eb[s][i]);
      printf("\n");
    }
    printf("(eff: FLOP/s over the sweep's best; ceff: against the kernel's speed read before each system's runs, "
           "which moved %.2fx over the sweep; beff: the tasks' own share of the cores' time)\n", ns_hi / ns_lo);
    char b[MPI_NSYS][32], bc[MPI_NSYS][32], bb[MPI_NSYS][32];
    for (int s = 0; s < MPI_NSYS; s++) {
      fmt_metg(b[s], sizeof b[s], metg[s]);
      fmt_metg(bc[s], sizeof bc[s], metgc[s]);
      fmt_metg(bb[s], sizeof bb[s], metgb[s]);
    }
    char r1[32], r2[32], r3[32], rc2[32], rb1[32], rb2[32];
    fmt_ratio(r1, sizeof r1, metg[0], metg[2]);
    fmt_ratio(r2, sizeof r2, metg[1], metg[2]);
    fmt_ratio(r3, sizeof r3, metg[3], metg[2]);
    fmt_ratio(rc2, sizeof rc2, metgc[1], metgc[2]);
    fmt_ratio(rb1, sizeof rb1, metgb[0], metgb[2]);
    fmt_ratio(rb2, sizeof rb2, metgb[1], metgb[2]);
    printf("BENCH mpi.taskbench pattern=%s ranks=%d workers=%ld maize_us=%s maize_rerun_us=%s mpi_us=%s "
           "ratio=%s rerun_ratio=%s maize_pair_us=%s pair_ratio=%s maize_rerun_cal_us=%s mpi_cal_us=%s "
           "rerun_ratio_cal=%s drift=%.2f maize_busy_us=%s maize_rerun_busy_us=%s mpi_busy_us=%s "
           "ratio_busy=%s rerun_ratio_busy=%s\n",
           pattern, size, workers, b[0], b[1], b[2], r1, r2, b[3], r3, bc[1], bc[2], rc2, ns_hi / ns_lo, bb[0], bb[1],
           bb[2], rb1, rb2);
  }
  for (int s = 0; s < MPI_NSYS; s++) sys[s]->destroy(st[s]);
  return 0;
fail:
  fprintf(stderr, "maize-bench mpi-metg: %s\n", err);
  for (int s = 0; s < MPI_NSYS; s++) sys[s]->destroy(st[s]);
  return 1;
}

/* ---- maize-bench mpi-weak ---- */

int mzb_mpi_weak_main(int argc, char **argv) {
  /* 21 repetitions by default: a pair's ratio ranges from 0.8 to 1.9 on
   * a 2-core virtual machine, and the median of 5 moved by 0.1 from one
   * command to the next (of 21: 1.04-1.05); about 2 s in all. */
  long steps = 40, iter = 1L << 16, reps = 21;
  static const struct option lo[] = {{"steps", required_argument, NULL, 's'}, {"iter", required_argument, NULL, 'i'},
                                     {"reps", required_argument, NULL, 'r'},  {"help", no_argument, NULL, 'h'},
                                     {NULL, 0, NULL, 0}};
  char err[640];
  /* Options are parsed before MPI starts: --help and usage errors need no
   * MPI (every rank prints them). */
  int rank = 0, size = 1;
  int c;
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "r:h", lo, NULL)) != -1) {
    switch (c) {
    case 's': if (parse_long("mpi-weak", "--steps", optarg, 2, 1000000, &steps)) return 2; break;
    case 'i': if (parse_long("mpi-weak", "--iter", optarg, 1, 1L << 30, &iter)) return 2; break;
    case 'r': if (parse_long("mpi-weak", "-r", optarg, 1, 101, &reps)) return 2; break;
    case 'h':
      printf("usage: mpirun -np N maize-bench mpi-weak [--steps N] [--iter N] [-r N]\n"
               "Weak scaling: a compute-bound stencil_1d with one point per rank on N ranks (maize-mpi),\n"
               "against the same work per rank on one rank (each rank runs a one-point graph on maize alone,\n"
               "one worker, all at once), and against the plain MPI peer on the same N-rank graph, the three\n"
               "run in turn each repetition (-r, default 21), then BENCH mpi.weak.\n");
      return 0;
    default:
      fprintf(stderr, "maize-bench mpi-weak: bad option '%s'\n", argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "maize-bench mpi-weak: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (mzb_mpi_start(err, sizeof err)) {
    fprintf(stderr, "maize-bench mpi-weak: %s\n", err);
    return 1;
  }
  rank = mzb_mpi_rank();
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tb_app one, all;
  memset(&one, 0, sizeof one);
  one.ngraphs = 1;
  tb_graph_default(&one.graphs[0], 0);
  one.graphs[0].dep = TB_STENCIL_1D;
  one.graphs[0].timesteps = steps;
  one.graphs[0].max_width = 1;
  one.graphs[0].kernel.type = TB_K_COMPUTE_BOUND;
  one.graphs[0].kernel.iterations = iter;
  all = one;
  all.graphs[0].max_width = size;
  if (tb_graph_finish(&one.graphs[0], err, sizeof err) || tb_graph_finish(&all.graphs[0], err, sizeof err)) {
    if (rank == 0) fprintf(stderr, "maize-bench mpi-weak: %s\n", err);
    return 2;
  }
  tb_sys_opts opts = {.workers = 1};
  /* The same work per rank on one rank: every rank runs its own one-point
   * graph on maize alone (built once and run again, as the distributed
   * graph is) at the same time (so the machine is as loaded as in the
   * distributed run), timed between barriers; the slowest counts.  The
   * two are run in turn (one, all, one, all, ...), so that a drift of the
   * machine's speed moves both alike. */
  void *st1 = NULL, *st = NULL;
  int bad = 0;
  if (tb_system_maize_rerun.create(&one, &opts, &st1, err, sizeof err)) {
    fprintf(stderr, "maize-bench mpi-weak: one rank: %s\n", err);
    bad = 1;
  }
  int anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anybad) {
    tb_system_maize_rerun.destroy(st1);
    return 1;
  }
  if (tb_system_maize_mpi_rerun.create(&all, &opts, &st, err, sizeof err)) {
    fprintf(stderr, "maize-bench mpi-weak: %d ranks: %s\n", size, err);
    tb_system_maize_rerun.destroy(st1);
    return 1;
  }
  /* The plain MPI peer on the same N-rank graph, timed in the same
   * repetitions: what the machine (and oversubscription) costs any MPI
   * program, apart from what maize adds. */
  void *sp = NULL;
  if (tb_system_mpi.create(&all, &opts, &sp, err, sizeof err)) {
    fprintf(stderr, "maize-bench mpi-weak: plain MPI: %s\n", err);
    tb_system_maize_mpi_rerun.destroy(st);
    tb_system_maize_rerun.destroy(st1);
    return 1;
  }
  double tr[101], tn[101], ratio[101], tp[101], pratio[101], mratio[101];
  for (int r = 0; r < reps && !bad; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double a = MPI_Wtime(), dummy;
    if (tb_system_maize_rerun.run(st1, &dummy, err, sizeof err)) {
      fprintf(stderr, "maize-bench mpi-weak: one rank: %s\n", err);
      bad = 1;
    }
    tr[r] = max_all(MPI_Wtime() - a);
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) break;
    if (tb_system_maize_mpi_rerun.run(st, &tn[r], err, sizeof err)) {
      fprintf(stderr, "maize-bench mpi-weak: %d ranks: %s\n", size, err);
      bad = 1;
    }
    ratio[r] = tn[r] / tr[r];
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) break;
    if (tb_system_mpi.run(sp, &tp[r], err, sizeof err)) {
      fprintf(stderr, "maize-bench mpi-weak: plain MPI: %s\n", err);
      bad = 1;
    }
    pratio[r] = tp[r] / tr[r];
    mratio[r] = tn[r] / tp[r];
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) break;
  }
  tb_system_mpi.destroy(sp);
  tb_system_maize_mpi_rerun.destroy(st);
  tb_system_maize_rerun.destroy(st1);
  if (anybad) return 1;
  /* Each sorted in place: the ranges below are its ends. */
  double t1 = sort_median(tr, (int)reps), tnm = sort_median(tn, (int)reps), rm = sort_median(ratio, (int)reps);
  double tpm = sort_median(tp, (int)reps), prm = sort_median(pratio, (int)reps), mrm = sort_median(mratio, (int)reps);
  if (rank == 0) {
    printf("mpi-weak: stencil_1d, %ld steps, compute_bound %ld iterations, one point per rank, median of %ld\n", steps,
           iter, reps);
    printf("  1 rank (each rank alone, at once):  %.4f s (%.1f us per task), %.4f to %.4f\n", t1, t1 * 1e6 / (double)steps,
           tr[0], tr[reps - 1]);
    printf("  %d ranks: %.4f s (%.1f us per task per rank), %.4f to %.4f\n", size, tnm, tnm * 1e6 / (double)steps, tn[0],
           tn[reps - 1]);
    printf("  ratio of each pair: median %.3f, %.3f to %.3f\n", rm, ratio[0], ratio[reps - 1]);
    printf("  plain MPI, %d ranks: %.4f s, %.4f to %.4f; its ratio to 1 rank: median %.3f, %.3f to %.3f\n", size, tpm,
           tp[0], tp[reps - 1], prm, pratio[0], pratio[reps - 1]);
    printf("  maize / plain MPI at %d ranks, each repetition: median %.3f, %.3f to %.3f\n", size, mrm, mratio[0],
           mratio[reps - 1]);
    printf("BENCH mpi.weak ranks=%d one_s=%.4f all_s=%.4f ratio=%.3f pair_ratio=%.3f pair_min=%.3f pair_max=%.3f "
           "mpi_s=%.4f mpi_pair_ratio=%.3f mpi_pair_min=%.3f mpi_pair_max=%.3f vs_mpi=%.3f vs_mpi_min=%.3f "
           "vs_mpi_max=%.3f\n",
           size, t1, tnm, tnm / t1, rm, ratio[0], ratio[reps - 1], tpm, prm, pratio[0], pratio[reps - 1], mrm, mratio[0],
           mratio[reps - 1]);
  }
  return 0;
}
