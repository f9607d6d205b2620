/* Task Bench graphs on OpenMP tasks, in the style of Task Bench's
 * own OpenMP implementation: one output array per (slot, point) with
 * fields slots per point (slot t % fields), one task per (timestep,
 * point) created by one thread inside `parallel` + `single`, with
 * depend(out:) on its output and depend(in:) on each input.  Task Bench's
 * implementation spells out fixed depend lists per arity; here the
 * OpenMP 5.0 iterator modifier gives one depend(in:) per input for any
 * arity.  The timed region is the parallel region: task creation to the
 * closing barrier.  Scratch memory is one block per thread. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tb_systems.h"

#ifdef _OPENMP

struct tbo {
  const tb_app *app;
  long workers;
  char *out[TB_MAX_GRAPHS]; /* fields * max_width * output_bytes */
  char *scratch;            /* workers * stride */
  size_t scratch_stride;
  long maxin;
  atomic_int failed;
  char errmsg[512];
};

static void tbo_destroy(void *state) {
  struct tbo *o = state;
  if (!o) return;
  for (int i = 0; i < TB_MAX_GRAPHS; i++) free(o->out[i]);
  free(o->scratch);
  free(o);
}

static int tbo_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  *state = NULL;
  struct tbo *o = calloc(1, sizeof *o);
  if (!o) return snprintf(err, errsz, "openmp: out of memory"), -1;
  o->app = app;
  o->workers = opts->workers > 0 ? opts->workers : omp_get_max_threads();
  atomic_init(&o->failed, 0);
  size_t maxscratch = 0;
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    size_t bytes = (size_t)g->fields * (size_t)g->max_width * g->output_bytes;
    if (!(o->out[gi] = calloc(bytes, 1))) goto oom;
    if (g->scratch_bytes > maxscratch) maxscratch = g->scratch_bytes;
    if (tb_max_inputs(g) > o->maxin) o->maxin = tb_max_inputs(g);
  }
  if (maxscratch) {
    o->scratch_stride = (maxscratch + 63) / 64 * 64;
    if (!(o->scratch = aligned_alloc(64, o->scratch_stride * (size_t)o->workers))) goto oom;
    tb_prepare_scratch(o->scratch, o->scratch_stride * (size_t)o->workers);
  }
  *state = o;
  return 0;
oom:
  tbo_destroy(o);
  snprintf(err, errsz, "openmp: out of memory");
  return -1;
}

static char *slot_of(struct tbo *o, int gi, long t, long p) {
  const tb_graph *g = &o->app->graphs[gi];
  return o->out[gi] + ((size_t)(t % g->fields) * (size_t)g->max_width + (size_t)p) * g->output_bytes;
}

/* The task body: find its inputs again (cheaper than capturing a list). */
static void tbo_task(struct tbo *o, int gi, long t, long p) {
  const tb_graph *g = &o->app->graphs[gi];
  long inb[64];
  const void *ptrb[64];
  long *in = inb;
  const void **ptr = ptrb;
  if (o->maxin > 64) {
    in = malloc((size_t)o->maxin * sizeof *in);
    ptr = malloc((size_t)o->maxin * sizeof *ptr);
  }
  char err[320];
  int rc = -1;
  if (in && ptr) {
    size_t n = tb_inputs(g, t, p, in);
    for (size_t k = 0; k < n; k++) ptr[k] = slot_of(o, gi, t - 1, in[k]);
    char *scratch = g->scratch_bytes ? o->scratch + (size_t)omp_get_thread_num() * o->scratch_stride : NULL;
    rc = tb_execute_point(g, t, p, slot_of(o, gi, t, p), g->output_bytes, ptr, NULL, n, scratch, g->scratch_bytes,
                          err, sizeof err);
  } else {
    snprintf(err, sizeof err, "out of memory");
  }
  if (in != inb) free(in);
  if (ptr != ptrb) free(ptr);
  if (rc) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&o->failed, &expected, 1)) snprintf(o->errmsg, sizeof o->errmsg, "%s", err);
  }
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int tbo_run(void *state, double *seconds, char *err, size_t errsz) {
  struct tbo *o = state;
  const tb_app *app = o->app;
  atomic_store(&o->failed, 0);
  long maxsteps = 0;
  for (int gi = 0; gi < app->ngraphs; gi++)
    if (app->graphs[gi].timesteps > maxsteps) maxsteps = app->graphs[gi].timesteps;
  char **deps = malloc((size_t)(o->maxin > 0 ? o->maxin : 1) * sizeof *deps);
  long *in = malloc((size_t)(o->maxin > 0 ? o->maxin : 1) * sizeof *in);
  if (!deps || !in) {
    free(deps);
    free(in);
    snprintf(err, errsz, "openmp: out of memory");
    return -1;
  }
  omp_set_dynamic(0);
  uint64_t t0 = now_ns();
#pragma omp parallel num_threads((int)o->workers)
#pragma omp single
  {
    for (long t = 0; t < maxsteps; t++)
      for (int gi = 0; gi < app->ngraphs; gi++) {
        const tb_graph *g = &app->graphs[gi];
        if (t >= g->timesteps) continue;
        long off = tb_offset_at(g, t), w = tb_width_at(g, t);
        for (long p = off; p < off + w; p++) {
          int n = (int)tb_inputs(g, t, p, in);
          for (int k = 0; k < n; k++) deps[k] = slot_of(o, gi, t - 1, in[k]);
          char *outp = slot_of(o, gi, t, p);
          /* GCC 12 reports n and outp as unused when they only appear in
           * depend clauses. */
          (void)n;
          (void)outp;
#pragma omp task firstprivate(gi, t, p) depend(out : outp[0]) depend(iterator(it = 0 : n), in : deps[it][0])
          tbo_task(o, gi, t, p);
        }
      }
  }
  uint64_t t1 = now_ns();
  free(deps);
  free(in);
  *seconds = (double)(t1 - t0) * 1e-9;
  if (atomic_load(&o->failed)) {
    snprintf(err, errsz, "input check failed: %s", o->errmsg);
    return -1;
  }
  return 0;
}

const tb_system tb_system_openmp = {
    .name = "openmp",
    .available = 1,
    .create = tbo_create,
    .run = tbo_run,
    .destroy = tbo_destroy,
};

#else /* !_OPENMP */

static int tbo_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  (void)app;
  (void)opts;
  *state = NULL;
  snprintf(err, errsz, "openmp: not built (no OpenMP compiler support)");
  return -1;
}
static int tbo_run(void *state, double *seconds, char *err, size_t errsz) {
  (void)state;
  *seconds = 0;
  snprintf(err, errsz, "openmp: not built");
  return -1;
}
static void tbo_destroy(void *state) { (void)state; }

const tb_system tb_system_openmp = {
    .name = "openmp",
    .available = 0,
    .create = tbo_create,
    .run = tbo_run,
    .destroy = tbo_destroy,
};
#endif
