/* Task Bench graphs on StarPU, when built with StarPU
 * (MZ_HAVE_STARPU).  As in Task Bench's StarPU implementation: one vector
 * data handle per (slot, point) (fields slots per point, slot t % fields),
 * registered once; one starpu_task_insert per task with STARPU_W on its
 * output and STARPU_R on each input (STARPU_DATA_MODE_ARRAY, so any
 * arity), and the task id by STARPU_VALUE.  StarPU's sequential
 * consistency turns the accesses into Task Bench's dependencies.  The
 * timed region is the first insert to starpu_task_wait_for_all().  StarPU
 * is initialized once per state with conf.ncpus = workers and no
 * accelerators; scratch memory is one block per worker.  Between runs
 * StarPU is paused (starpu_pause), outside the timed region. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MZ_HAVE_STARPU
#include <starpu.h>
#endif

#include "tb_systems.h"

#ifdef MZ_HAVE_STARPU

struct tbs {
  const tb_app *app;
  long workers;
  char *out[TB_MAX_GRAPHS];
  starpu_data_handle_t *h[TB_MAX_GRAPHS]; /* fields * max_width */
  char *scratch;
  size_t scratch_stride;
  long maxin;
  struct starpu_data_descr *descr; /* maxin + 1 */
  long *in;
  int initialized;
  atomic_int failed;
  char errmsg[512];
};

/* StarPU is initialized once per process at a time: one state at a time. */
static atomic_int starpu_in_use;

static void tbs_task(void *buffers[], void *cl_arg) {
  struct tbs *s;
  unsigned long long id;
  starpu_codelet_unpack_args(cl_arg, &s, &id);
  long gi, t, p;
  tb_task_unpack(id, &gi, &t, &p);
  const tb_graph *g = &s->app->graphs[gi];
  unsigned nb = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  const void *ptrb[64];
  const void **ptr = nb - 1 <= 64 ? ptrb : malloc((nb - 1) * sizeof *ptr);
  char err[320];
  int rc = -1;
  if (ptr) {
    for (unsigned k = 1; k < nb; k++) ptr[k - 1] = (const void *)STARPU_VECTOR_GET_PTR(buffers[k]);
    int w = starpu_worker_get_id();
    char *scratch = g->scratch_bytes ? s->scratch + (size_t)(w < 0 ? 0 : w) * s->scratch_stride : NULL;
    rc = tb_execute_point(g, t, p, (void *)STARPU_VECTOR_GET_PTR(buffers[0]), STARPU_VECTOR_GET_NX(buffers[0]), ptr,
                          NULL, nb - 1, scratch, g->scratch_bytes, err, sizeof err);
    if (ptr != ptrb) free(ptr);
  } else {
    snprintf(err, sizeof err, "out of memory");
  }
  if (rc) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&s->failed, &expected, 1)) snprintf(s->errmsg, sizeof s->errmsg, "%s", err);
  }
}

static struct starpu_codelet tbs_cl = {
    .where = STARPU_CPU,
    .cpu_funcs = {tbs_task},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "taskbench",
};

static void tbs_destroy(void *state) {
  struct tbs *s = state;
  if (!s) return;
  for (int gi = 0; gi < TB_MAX_GRAPHS; gi++) {
    if (s->h[gi]) {
      const tb_graph *g = &s->app->graphs[gi];
      for (long i = 0; i < g->fields * g->max_width; i++)
        if (s->h[gi][i]) starpu_data_unregister(s->h[gi][i]);
    }
    free(s->h[gi]);
    free(s->out[gi]);
  }
  if (s->initialized) {
    starpu_resume();
    starpu_shutdown();
  }
  free(s->scratch);
  free(s->descr);
  free(s->in);
  free(s);
  atomic_store(&starpu_in_use, 0);
}

static int tbs_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  *state = NULL;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&starpu_in_use, &expected, 1))
    return snprintf(err, errsz, "starpu: one StarPU state at a time"), -1;
  struct tbs *s = calloc(1, sizeof *s);
  if (!s) {
    atomic_store(&starpu_in_use, 0);
    return snprintf(err, errsz, "starpu: out of memory"), -1;
  }
  s->app = app;
  atomic_init(&s->failed, 0);
  setenv("STARPU_SILENT", "1", 0);
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  if (opts->workers > 0) conf.ncpus = (int)opts->workers;
  conf.ncuda = 0;
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  int rc = starpu_init(&conf);
  if (rc) {
    free(s);
    atomic_store(&starpu_in_use, 0);
    snprintf(err, errsz, "starpu: starpu_init: %d", rc);
    return -1;
  }
  s->initialized = 1;
  /* Paused between runs: idle StarPU workers keep polling for tasks, which
   * would take CPU time from the other systems metg runs in turn. */
  starpu_pause();
  s->workers = (long)starpu_worker_get_count();
  size_t maxscratch = 0;
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    size_t nb = (size_t)g->fields * (size_t)g->max_width;
    if (!(s->out[gi] = calloc(nb, g->output_bytes))) goto oom;
    if (!(s->h[gi] = calloc(nb, sizeof *s->h[gi]))) goto oom;
    for (size_t i = 0; i < nb; i++)
      starpu_vector_data_register(&s->h[gi][i], STARPU_MAIN_RAM, (uintptr_t)(s->out[gi] + i * g->output_bytes),
                                  (uint32_t)g->output_bytes, 1);
    if (g->scratch_bytes > maxscratch) maxscratch = g->scratch_bytes;
    if (tb_max_inputs(g) > s->maxin) s->maxin = tb_max_inputs(g);
  }
  if (!(s->descr = malloc((size_t)(s->maxin + 1) * sizeof *s->descr))) goto oom;
  if (!(s->in = malloc((size_t)(s->maxin + 1) * sizeof *s->in))) goto oom;
  if (maxscratch) {
    s->scratch_stride = (maxscratch + 63) / 64 * 64;
    if (!(s->scratch = aligned_alloc(64, s->scratch_stride * (size_t)s->workers))) goto oom;
    tb_prepare_scratch(s->scratch, s->scratch_stride * (size_t)s->workers);
  }
  *state = s;
  return 0;
oom:
  tbs_destroy(s);
  snprintf(err, errsz, "starpu: out of memory");
  return -1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int tbs_run(void *state, double *seconds, char *err, size_t errsz) {
  struct tbs *s = state;
  const tb_app *app = s->app;
  atomic_store(&s->failed, 0);
  long maxsteps = 0;
  for (int gi = 0; gi < app->ngraphs; gi++)
    if (app->graphs[gi].timesteps > maxsteps) maxsteps = app->graphs[gi].timesteps;
  int irc = 0;
  starpu_resume();
  uint64_t t0 = now_ns();
  for (long t = 0; t < maxsteps && !irc; t++)
    for (int gi = 0; gi < app->ngraphs && !irc; gi++) {
      const tb_graph *g = &app->graphs[gi];
      if (t >= g->timesteps) continue;
      long off = tb_offset_at(g, t), w = tb_width_at(g, t);
      starpu_data_handle_t *cur = s->h[gi] + (size_t)(t % g->fields) * (size_t)g->max_width;
      starpu_data_handle_t *prev = s->h[gi] + (size_t)((t + g->fields - 1) % g->fields) * (size_t)g->max_width;
      for (long p = off; p < off + w && !irc; p++) {
        size_t n = tb_inputs(g, t, p, s->in);
        s->descr[0].handle = cur[p];
        s->descr[0].mode = STARPU_W;
        for (size_t k = 0; k < n; k++) {
          s->descr[1 + k].handle = prev[s->in[k]];
          s->descr[1 + k].mode = STARPU_R;
        }
        unsigned long long id = tb_task_id(gi, t, p);
        irc = starpu_task_insert(&tbs_cl, STARPU_VALUE, &s, sizeof s, STARPU_VALUE, &id, sizeof id,
                                 STARPU_DATA_MODE_ARRAY, s->descr,
                                 (int)(n + 1), 0);
      }
    }
  starpu_task_wait_for_all();
  uint64_t t1 = now_ns();
  starpu_pause();
  *seconds = (double)(t1 - t0) * 1e-9;
  if (irc) {
    snprintf(err, errsz, "starpu: starpu_task_insert: %d", irc);
    return -1;
  }
  if (atomic_load(&s->failed)) {
    snprintf(err, errsz, "input check failed: %s", s->errmsg);
    return -1;
  }
  return 0;
}

const tb_system tb_system_starpu = {
    .name = "starpu",
    .available = 1,
    .create = tbs_create,
    .run = tbs_run,
    .destroy = tbs_destroy,
};

#else /* !MZ_HAVE_STARPU */

static int tbs_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  (void)app;
  (void)opts;
  *state = NULL;
  snprintf(err, errsz, "starpu: not built (configure with StarPU found)");
  return -1;
}
static int tbs_run(void *state, double *seconds, char *err, size_t errsz) {
  (void)state;
  *seconds = 0;
  snprintf(err, errsz, "starpu: not built");
  return -1;
}
static void tbs_destroy(void *state) { (void)state; }

const tb_system tb_system_starpu = {
    .name = "starpu",
    .available = 0,
    .create = tbs_create,
    .run = tbs_run,
    .destroy = tbs_destroy,
};
#endif
