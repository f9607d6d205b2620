/* mz-bench-hetero-gemm: a tiled GEMM on a CPU worker and an OpenCL device
 * together, maize under every policy and StarPU's dmda, same kernels, same
 * run.
 *
 * C += A x B on T x T tiles of S x S floats (default 4 x 4 tiles of 256 x
 * 256): T^3 tile updates c[i][j] += a[i][k] * b[k][j], each 2*S^3 flops,
 * chained on c[i][j] in k order (maize: buffer hazards in build order;
 * StarPU: sequential consistency), independent across (i, j).  Every tile
 * is its own buffer (maize) or registered matrix (StarPU).
 *
 * The kernels are shared: the CPU implementation is gemm_tile_cpu() below
 * (a loop blocked on k with a vectorizable inner j loop), the OpenCL one
 * the text of bench/hetero_gemm.cl (a 16 x 16 work-group tiled sgemm with
 * local memory), built from the same string by maize (MZ_CODE_SOURCE, in
 * memory) and by StarPU (starpu_opencl_load_opencl_from_string).
 *
 * Devices: one CPU worker and one OpenCL device for both.  maize:
 * MZ_DEVICES-style "cpu:1,opencl:0" (-d to change); StarPU: STARPU_NCPU=1,
 * STARPU_NOPENCL=1, STARPU_NCUDA=0, STARPU_OPENCL_ON_CPUS=1 (PoCL's device
 * is a CPU device), STARPU_SCHED=dmda.  Run it with POCL_DEVICES=pthread.
 *
 * Calibration.  Both need perf models to place work.  maize: -w warm-up
 * runs of every policy before its measured runs (dmda explores until each
 * device has MZ_PERFMODEL_MIN_SAMPLES samples); models go to a private
 * directory (MZ_PERFMODEL_DIR, default <this program's directory>/
 * hetero-gemm.models).  StarPU: a first starpu_init with calibrate = 1 runs
 * -w calibration iterations and shuts down (saving its history models
 * under STARPU_HOME, default <this program's directory>/hetero-gemm.starpu),
 * then a second starpu_init with calibrate = 0 runs the measured ones.
 * Both directories are emptied at start (--keep-models keeps them), so
 * both systems calibrate in the same run from nothing.
 *
 * Each measured run rewrites C with zeros from the host first; its time
 * runs from the first submission until C is back in host memory (maize:
 * mz_schedule() to mz_future_wait() and mz_buffer_read() of every tile;
 * StarPU: the first starpu_task_insert() to starpu_task_wait_for_all() and
 * a read acquire of every tile).  The per-policy table has the median of
 * -r runs per policy.  The BENCH ratio line comes from -r further runs in
 * which maize dmda and StarPU dmda alternate (both runtimes initialized,
 * idle workers parked), so that both see the same load on a shared
 * machine.  Every run checked is compared with dot products in double on
 * a sample of 512 entries of C.
 *
 * Output: a table of makespans per policy, then
 *   BENCH hetero.gemm policy=<p> makespan_s=<x>          (every maize policy)
 *   BENCH hetero.gemm maize_s=<x> starpu_dmda_s=<y|na> ratio=<x/y|na>
 * where maize_s is the dmda figure.  Target: ratio <= 0.8.
 *
 * --libs: the field's libraries instead of the shared kernels, on both
 * sides: maize runs its canned mz_op_gemm (OpenBLAS on the CPU, CLBlast on
 * OpenCL); StarPU's codelet calls cblas_sgemm and CLBlastSgemm on its
 * worker's queue.  OpenBLAS runs one thread per call (one CPU worker on
 * each side).  The BENCH lines then say kernels=libs (kernels=hand
 * otherwise).  Needs a build with OpenBLAS and CLBlast.
 *
 * --zero-copy: maize's tiles are MZ_BUFFER_ZERO_COPY buffers, which an
 * OpenCL device that shares host memory (PoCL's) uses in place instead of
 * copying (StarPU copies as always); the BENCH lines add mem=zero-copy.
 *
 * Options: -t tiles per side, -s tile size (a multiple of 16), -r reps,
 * -w warm-ups, -d maize devices, --quick (2 x 2 tiles of 64, 1 rep, 3
 * warm-ups: the smoke test), --no-starpu, --libs, --zero-copy. */
#include <getopt.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "maize.h"
#include "maize/policy.h"

#ifdef MZ_HAVE_STARPU
#include <starpu.h>
#endif
#ifdef MZ_BENCH_LIBS
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <cblas.h>
#include <clblast_c.h>
#endif

/* --libs: the libraries (OpenBLAS, CLBlast) instead of the shared kernels. */
static bool use_libs;
/* --zero-copy: maize's tiles in host memory that PoCL uses in place. */
static bool zero_copy;

#ifndef MZ_HETERO_GEMM_CL
#error "MZ_HETERO_GEMM_CL must name bench/hetero_gemm.cl"
#endif

static void die(const char *what, int code) {
  fprintf(stderr, "hetero_gemm: %s (%d)\n", what, code);
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- the shared kernels ---- */

/* c += a * b on n x n row-major tiles. */
static void gemm_tile_cpu(const float *restrict a, const float *restrict b, float *restrict c, unsigned n) {
  enum { BK = 64 };
  for (unsigned kk = 0; kk < n; kk += BK) {
    unsigned ke = kk + BK < n ? kk + BK : n;
    for (unsigned i = 0; i < n; i++) {
      float *restrict ci = c + (size_t)i * n;
      for (unsigned k = kk; k < ke; k++) {
        float aik = a[(size_t)i * n + k];
        const float *restrict bk = b + (size_t)k * n;
        for (unsigned j = 0; j < n; j++) ci[j] += aik * bk[j];
      }
    }
  }
}

static char *cl_source; /* hetero_gemm.cl, read once */

/* ---- problem ---- */

struct problem {
  unsigned t, s;        /* tiles per side, tile size */
  float **a, **b, **c;  /* host tiles, [i * t + j] */
  float *zero;
};

static float val(unsigned seed, size_t r, size_t col) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(col * 40503u) ^ seed;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (float)(h % 2001) / 1000.0f - 1.0f;
}

static void problem_init(struct problem *p, unsigned t, unsigned s) {
  p->t = t;
  p->s = s;
  size_t nt = (size_t)t * t, ts = (size_t)s * s;
  p->a = calloc(nt, sizeof *p->a);
  p->b = calloc(nt, sizeof *p->b);
  p->c = calloc(nt, sizeof *p->c);
  p->zero = calloc(ts, sizeof *p->zero);
  if (!p->a || !p->b || !p->c || !p->zero) die("out of memory", -2);
  for (unsigned i = 0; i < t; i++)
    for (unsigned j = 0; j < t; j++) {
      size_t x = (size_t)i * t + j;
      p->a[x] = malloc(ts * sizeof(float));
      p->b[x] = malloc(ts * sizeof(float));
      p->c[x] = calloc(ts, sizeof(float));
      if (!p->a[x] || !p->b[x] || !p->c[x]) die("out of memory", -2);
      for (unsigned r = 0; r < s; r++)
        for (unsigned q = 0; q < s; q++) {
          p->a[x][(size_t)r * s + q] = val(1, (size_t)i * s + r, (size_t)j * s + q);
          p->b[x][(size_t)r * s + q] = val(2, (size_t)i * s + r, (size_t)j * s + q);
        }
    }
}

static void problem_free(struct problem *p) {
  for (size_t x = 0; x < (size_t)p->t * p->t; x++) {
    free(p->a[x]);
    free(p->b[x]);
    free(p->c[x]);
  }
  free(p->a);
  free(p->b);
  free(p->c);
  free(p->zero);
}

/* The largest relative error of the host tiles of C over a sample of
 * entries, against dot products in double. */
static double check(const struct problem *p) {
  size_t n = (size_t)p->t * p->s;
  double worst = 0;
  for (unsigned k = 0; k < 512; k++) {
    size_t r = (k * 7919u + 13) % n, col = (k * 104729u + 7) % n;
    double ref = 0, mag = 0;
    for (size_t m = 0; m < n; m++) {
      double x = val(1, r, m), y = val(2, m, col);
      ref += x * y;
      mag += fabs(x * y);
    }
    size_t ti = r / p->s, tj = col / p->s;
    double got = p->c[ti * p->t + tj][(r % p->s) * p->s + col % p->s];
    double e = fabs(got - ref) / (mag > 1 ? mag : 1);
    if (e > worst) worst = e;
  }
  return worst;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- maize ---- */

static int mz_gemm_cpu(const mz_call *c) {
  gemm_tile_cpu(c->args[0].p, c->args[1].p, c->args[2].p, c->args[3].u32);
  return 0;
}

struct mz_side {
  mz_runtime *rt;
  mz_kernel *k;
  mz_buffer **a, **b, **c;
};

/* Busy seconds per device in the last maize run (device 0 the CPU). */
static double last_busy[8];

/* One run: zero C, schedule the T^3 updates, wait, read C back.  Returns
 * seconds. */
static double maize_run(struct mz_side *m, struct problem *p, const char *policy) {
  unsigned t = p->t, s = p->s;
  size_t bytes = (size_t)s * s * sizeof(float);
  for (size_t x = 0; x < (size_t)t * t; x++)
    if (mz_buffer_write(m->c[x], p->zero, bytes)) die("mz_buffer_write", -1);
  mz_graph *g;
  if (mz_graph_create(m->rt, &g)) die("mz_graph_create", -1);
  mz_launch launch = {.ndim = 2, .global = {s, s, 1}, .local = {16, 16, 1}};
  mz_op **last = calloc((size_t)t * t, sizeof *last);
  if (!last) die("out of memory", -2);
  for (unsigned k = 0; k < t; k++)
    for (unsigned i = 0; i < t; i++)
      for (unsigned j = 0; j < t; j++) {
        if (use_libs) { /* the canned op: C += A B */
          last[i * t + j] = mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 1.0, mz_value(g, m->a[i * t + k]),
                                       mz_value(g, m->b[k * t + j]), 1.0, mz_value(g, m->c[i * t + j]));
          continue;
        }
        mz_op *args = mz_zip(g, 3, (mz_op *[]){mz_value(g, m->a[i * t + k]), mz_value(g, m->b[k * t + j]),
                                               mz_value(g, m->c[i * t + j])});
        last[i * t + j] = mz_apply(g, m->k, args, &launch);
      }
  mz_op *root = mz_join(g, t * t, last);
  if (mz_graph_status(g)) die(mz_graph_message(g), mz_graph_status(g));
  uint64_t t0 = now_ns();
  mz_future *f;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc) die(mz_runtime_last_error(m->rt), rc);
  if ((rc = mz_future_wait(f))) die(mz_future_message(f), rc);
  for (size_t x = 0; x < (size_t)t * t; x++)
    if (mz_buffer_read(m->c[x], p->c[x], bytes)) die("mz_buffer_read", -1);
  double sec = (double)(now_ns() - t0) / 1e9;
  mz_run_stats st;
  if (mz_future_stats(f, &st) == MZ_OK)
    for (unsigned d = 0; d < 8; d++) last_busy[d] = d < st.ndevices && st.busy_ns ? (double)st.busy_ns[d] / 1e9 : 0;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  free(last);
  return sec;
}

/* ---- StarPU ---- */

#ifdef MZ_HAVE_STARPU
static struct starpu_opencl_program sp_prog;

static void sp_gemm_cpu(void *buffers[], void *arg) {
  (void)arg;
  gemm_tile_cpu((const float *)STARPU_MATRIX_GET_PTR(buffers[0]), (const float *)STARPU_MATRIX_GET_PTR(buffers[1]),
                (float *)STARPU_MATRIX_GET_PTR(buffers[2]), STARPU_MATRIX_GET_NX(buffers[2]));
}

static void sp_gemm_opencl(void *buffers[], void *arg) {
  (void)arg;
  cl_mem a = (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[0]);
  cl_mem b = (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[1]);
  cl_mem c = (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[2]);
  cl_uint n = STARPU_MATRIX_GET_NX(buffers[2]);
  int devid = starpu_worker_get_devid(starpu_worker_get_id());
  cl_kernel kernel;
  cl_command_queue queue;
  int rc = starpu_opencl_load_kernel(&kernel, &queue, &sp_prog, "gemm_tile", devid);
  if (rc != CL_SUCCESS) STARPU_OPENCL_REPORT_ERROR(rc);
  int err = clSetKernelArg(kernel, 0, sizeof a, &a);
  err |= clSetKernelArg(kernel, 1, sizeof b, &b);
  err |= clSetKernelArg(kernel, 2, sizeof c, &c);
  err |= clSetKernelArg(kernel, 3, sizeof n, &n);
  if (err != CL_SUCCESS) STARPU_OPENCL_REPORT_ERROR(err);
  size_t global[2] = {n, n}, local[2] = {16, 16};
  err = clEnqueueNDRangeKernel(queue, kernel, 2, NULL, global, local, 0, NULL, NULL);
  if (err != CL_SUCCESS) STARPU_OPENCL_REPORT_ERROR(err);
  clFinish(queue);
  starpu_opencl_release_kernel(kernel);
}

static struct starpu_perfmodel sp_model = {.type = STARPU_HISTORY_BASED, .symbol = "mz_hetero_gemm"};

#ifdef MZ_BENCH_LIBS
/* --libs: the same libraries maize's canned gemm calls. */
static void sp_blas_cpu(void *buffers[], void *arg) {
  (void)arg;
  int n = (int)STARPU_MATRIX_GET_NX(buffers[2]);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
              (const float *)STARPU_MATRIX_GET_PTR(buffers[0]), (int)STARPU_MATRIX_GET_LD(buffers[0]),
              (const float *)STARPU_MATRIX_GET_PTR(buffers[1]), (int)STARPU_MATRIX_GET_LD(buffers[1]), 1.0f,
              (float *)STARPU_MATRIX_GET_PTR(buffers[2]), (int)STARPU_MATRIX_GET_LD(buffers[2]));
}

static void sp_blas_opencl(void *buffers[], void *arg) {
  (void)arg;
  size_t n = STARPU_MATRIX_GET_NX(buffers[2]);
  cl_command_queue queue;
  starpu_opencl_get_current_queue(&queue);
  cl_event ev = NULL;
  CLBlastStatusCode st = CLBlastSgemm(
      CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, n, n, n, 1.0f,
      (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[0]), STARPU_MATRIX_GET_OFFSET(buffers[0]) / sizeof(float),
      STARPU_MATRIX_GET_LD(buffers[0]), (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[1]),
      STARPU_MATRIX_GET_OFFSET(buffers[1]) / sizeof(float), STARPU_MATRIX_GET_LD(buffers[1]), 1.0f,
      (cl_mem)STARPU_MATRIX_GET_DEV_HANDLE(buffers[2]), STARPU_MATRIX_GET_OFFSET(buffers[2]) / sizeof(float),
      STARPU_MATRIX_GET_LD(buffers[2]), &queue, &ev);
  if (st != CLBlastSuccess) die("CLBlastSgemm", st);
  clWaitForEvents(1, &ev);
  clReleaseEvent(ev);
}

static struct starpu_perfmodel sp_blas_model = {.type = STARPU_HISTORY_BASED, .symbol = "mz_hetero_gemm_libs"};

static struct starpu_codelet sp_blas_cl = {
    .cpu_funcs = {sp_blas_cpu},
    .opencl_funcs = {sp_blas_opencl},
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_RW},
    .model = &sp_blas_model,
    .name = "gemm_tile_libs",
};
#endif

static struct starpu_codelet sp_cl = {
    .cpu_funcs = {sp_gemm_cpu},
    .opencl_funcs = {sp_gemm_opencl},
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_RW},
    .model = &sp_model,
    .name = "gemm_tile",
};

/* StarPU with its handles on the problem's tiles. */
struct sp_side {
  starpu_data_handle_t *ha, *hb, *hc;
  size_t nt;
};

/* Init StarPU (calibrating or not) and register the tiles.  Returns 0, or
 * -1 when StarPU has no CPU + OpenCL worker pair here. */
static int sp_open(struct sp_side *sp, struct problem *p, int calibrate) {
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 1;
  conf.nopencl = 1;
  conf.ncuda = 0;
  conf.sched_policy_name = "dmda";
  conf.calibrate = calibrate;
  int rc = starpu_init(&conf);
  if (rc) {
    fprintf(stderr, "hetero_gemm: starpu_init: %d (StarPU skipped)\n", rc);
    return -1;
  }
  if (starpu_cpu_worker_get_count() != 1 || starpu_opencl_worker_get_count() != 1) {
    fprintf(stderr, "hetero_gemm: StarPU has %u CPU and %u OpenCL workers, not 1 and 1 (StarPU skipped)\n",
            starpu_cpu_worker_get_count(), starpu_opencl_worker_get_count());
    starpu_shutdown();
    return -1;
  }
  if (starpu_opencl_load_opencl_from_string(cl_source, &sp_prog, NULL)) die("starpu_opencl_load_opencl_from_string", -1);
  unsigned s = p->s;
  sp->nt = (size_t)p->t * p->t;
  sp->ha = calloc(sp->nt, sizeof *sp->ha);
  sp->hb = calloc(sp->nt, sizeof *sp->hb);
  sp->hc = calloc(sp->nt, sizeof *sp->hc);
  if (!sp->ha || !sp->hb || !sp->hc) die("out of memory", -2);
  for (size_t x = 0; x < sp->nt; x++) {
    starpu_matrix_data_register(&sp->ha[x], STARPU_MAIN_RAM, (uintptr_t)p->a[x], s, s, s, sizeof(float));
    starpu_matrix_data_register(&sp->hb[x], STARPU_MAIN_RAM, (uintptr_t)p->b[x], s, s, s, sizeof(float));
    starpu_matrix_data_register(&sp->hc[x], STARPU_MAIN_RAM, (uintptr_t)p->c[x], s, s, s, sizeof(float));
  }
  return 0;
}

/* One run: C back to zeros in host memory, submit, wait, acquire C in host
 * memory.  Returns seconds. */
static double sp_run(struct sp_side *sp, struct problem *p) {
  unsigned t = p->t;
  size_t bytes = (size_t)p->s * p->s * sizeof(float);
  for (size_t x = 0; x < sp->nt; x++) {
    starpu_data_acquire(sp->hc[x], STARPU_W);
    memcpy(p->c[x], p->zero, bytes);
    starpu_data_release(sp->hc[x]);
  }
  uint64_t t0 = now_ns();
  for (unsigned k = 0; k < t; k++)
    for (unsigned i = 0; i < t; i++)
      for (unsigned j = 0; j < t; j++) {
        struct starpu_codelet *cl = &sp_cl;
#ifdef MZ_BENCH_LIBS
        if (use_libs) cl = &sp_blas_cl;
#endif
        int e = starpu_task_insert(cl, STARPU_R, sp->ha[i * t + k], STARPU_R, sp->hb[k * t + j], STARPU_RW,
                                   sp->hc[i * t + j], 0);
        if (e) die("starpu_task_insert", e);
      }
  starpu_task_wait_for_all();
  for (size_t x = 0; x < sp->nt; x++) {
    starpu_data_acquire(sp->hc[x], STARPU_R);
    starpu_data_release(sp->hc[x]);
  }
  return (double)(now_ns() - t0) / 1e9;
}

static void sp_close(struct sp_side *sp) {
  for (size_t x = 0; x < sp->nt; x++) {
    starpu_data_unregister(sp->ha[x]);
    starpu_data_unregister(sp->hb[x]);
    starpu_data_unregister(sp->hc[x]); /* brings C home */
  }
  free(sp->ha);
  free(sp->hb);
  free(sp->hc);
  starpu_opencl_unload_opencl(&sp_prog);
  starpu_shutdown(); /* saves the history models under STARPU_HOME */
}
#endif

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/* A directory beside this program, for private perf models. */
static void beside_exe(char *buf, size_t cap, const char *name) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(buf, cap, "%s", name);
    return;
  }
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(buf, cap, "%s/%s", exe, name);
}

int main(int argc, char **argv) {
  unsigned t = 4, s = 256;
  int reps = 5, warm = 6;
  bool use_starpu = true, keep = false;
  const char *devices = "cpu:1,opencl:0";
  static const struct option longopts[] = {
      {"tiles", required_argument, NULL, 't'},  {"tile-size", required_argument, NULL, 's'},
      {"reps", required_argument, NULL, 'r'},   {"warmups", required_argument, NULL, 'w'},
      {"devices", required_argument, NULL, 'd'}, {"no-starpu", no_argument, NULL, 'S'},
      {"keep-models", no_argument, NULL, 'K'},  {"quick", no_argument, NULL, 'q'},
      {"libs", no_argument, NULL, 'L'},         {"zero-copy", no_argument, NULL, 'Z'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-hetero-gemm";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":t:s:r:w:d:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 't':
      if (!bench_arg_long(prog, "-t", optarg, 1, 64, &num)) return 2;
      t = (unsigned)num;
      break;
    case 's':
      if (!bench_arg_long(prog, "-s", optarg, 16, 1 << 14, &num)) return 2;
      s = (unsigned)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, 1000, &num)) return 2;
      reps = (int)num;
      break;
    case 'w':
      if (!bench_arg_long(prog, "-w", optarg, 0, 1000, &num)) return 2;
      warm = (int)num;
      break;
    case 'd': devices = optarg; break;
    case 'S': use_starpu = false; break;
    case 'K': keep = true; break;
    case 'L': use_libs = true; break;
    case 'Z': zero_copy = true; break;
    case 'q':
      t = 2;
      s = 64;
      reps = 1;
      warm = 3;
      break;
    case 'h':
      printf("usage: %s [-t|--tiles T] [-s|--tile-size S] [-r|--reps R] [-w|--warmups W] [-d|--devices S]\n"
             "       [--quick] [--no-starpu] [--keep-models] [--libs] [--zero-copy]\n", prog);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  if (t < 1 || t > 64 || s < 16 || s % 16 || reps < 1 || warm < 0) {
    fprintf(stderr, "hetero_gemm: tiles 1..64, tile size a multiple of 16, reps >= 1\n");
    return 2;
  }
#ifdef MZ_BENCH_LIBS
  if (use_libs) openblas_set_num_threads(1); /* one CPU worker on each side */
#else
  if (use_libs) {
    printf("hetero_gemm: --libs needs a build with OpenBLAS and CLBlast; skipped\n");
    return 0;
  }
#endif
  cl_source = bench_read_file(MZ_HETERO_GEMM_CL);
  if (!cl_source) die("cannot read " MZ_HETERO_GEMM_CL, -1);
  /* Private model directories, emptied first (unless --keep-models) so
   * that both systems calibrate in this run, from the same start. */
  char dir[PATH_MAX + 64];
  if (!getenv("MZ_PERFMODEL_DIR")) {
    beside_exe(dir, sizeof dir, "hetero-gemm.models");
    if (!keep) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    setenv("MZ_PERFMODEL_DIR", dir, 1);
  }
  if (!getenv("STARPU_HOME")) {
    beside_exe(dir, sizeof dir, "hetero-gemm.starpu");
    if (!keep) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(dir, 0755);
    setenv("STARPU_HOME", dir, 1);
  }
  setenv("STARPU_NCPU", "1", 1);
  setenv("STARPU_NOPENCL", "1", 1);
  setenv("STARPU_NCUDA", "0", 1);
  setenv("STARPU_OPENCL_ON_CPUS", "1", 1);
  setenv("STARPU_SCHED", "dmda", 1);
  setenv("STARPU_SILENT", "1", 0);

  struct problem p;
  problem_init(&p, t, s);
  double gflop = 2.0 * (double)t * s * (double)t * s * (double)t * s / 1e9;
  char kernels[48];
  snprintf(kernels, sizeof kernels, "%s%s", use_libs ? "libs" : "hand", zero_copy ? " mem=zero-copy" : "");
  printf("kernels: %s\n", use_libs ? "OpenBLAS (CPU) and CLBlast (OpenCL): maize's mz_op_gemm, StarPU's codelet calling them"
                                     : "the shared hand-written CPU loop and OpenCL C kernel");
  printf("heterogeneous GEMM: %u x %u tiles of %u x %u floats (%u tile updates, %.2f GFLOP), median of %d after %d "
         "warm-ups\n",
         t, t, s, s, t * t * t, gflop, reps, warm);

  /* maize, every policy. */
  struct mz_side m = {0};
  double maize_dmda = NAN;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &m.rt);
  if (rc) {
    printf("maize devices \"%s\" unavailable (%s): nothing to measure\n", devices, mz_err_name(rc));
    m.rt = NULL;
    rc = 0; /* no device is not a failure */
  } else {
    for (unsigned d = 0; d < mz_runtime_device_count(m.rt); d++) {
      mz_device_info info;
      mz_device_get_info(mz_runtime_device(m.rt, d), &info);
      printf("  maize device %u: %s %s (%u queues)\n", d, mz_device_kind_name(info.kind), info.name, info.queues);
    }
    mz_kernel_spec spec = {
        .name = "hetero_gemm_tile",
        .params = "in f32[] a, in f32[] b, inout f32[] c, u32 n = widthof(c)",
        .cpu = {.fn = mz_gemm_cpu},
        .opencl = {.format = MZ_CODE_SOURCE, .data = cl_source, .entry = "gemm_tile"},
    };
    if ((rc = mz_kernel_create(m.rt, &spec, &m.k))) die(mz_runtime_last_error(m.rt), rc);
    size_t nt = (size_t)t * t;
    m.a = calloc(nt, sizeof *m.a);
    m.b = calloc(nt, sizeof *m.b);
    m.c = calloc(nt, sizeof *m.c);
    if (!m.a || !m.b || !m.c) die("out of memory", -2);
    unsigned fl = zero_copy ? MZ_BUFFER_ZERO_COPY : 0;
    for (size_t x = 0; x < nt; x++)
      if (mz_buffer_create_ex(m.rt, MZ_F32, 2, (size_t[]){s, s}, p.a[x], fl, &m.a[x]) ||
          mz_buffer_create_ex(m.rt, MZ_F32, 2, (size_t[]){s, s}, p.b[x], fl, &m.b[x]) ||
          mz_buffer_create_ex(m.rt, MZ_F32, 2, (size_t[]){s, s}, p.zero, fl, &m.c[x]))
        die("mz_buffer_create", -1);
    printf("%-14s %12s %10s %12s  %s\n", "system", "makespan_s", "GFLOP/s", "max_rel_err",
           "busy_s per maize device (last run)");
    /* dmda calibrates first, alone, as StarPU's dmda does below. */
    for (int w = 0; w < warm; w++) maize_run(&m, &p, "dmda");
  }

  /* StarPU dmda, same kernels, one CPU and one OpenCL worker: calibrate,
   * then measured runs alternating with maize dmda runs, so that both see
   * the same load on a shared machine.  StarPU is started for each of its
   * runs (one untimed run first, for its allocations) and shut down after,
   * because its idle driver threads poll and would slow maize's runs down;
   * maize's idle workers park.  The BENCH line's figures are the medians
   * of these paired runs. */
  double sp = NAN;
#ifdef MZ_HAVE_STARPU
  struct sp_side sps = {0};
  if (use_starpu && sp_open(&sps, &p, 1) == 0) {
    for (int w = 0; w < (warm > 0 ? warm : 1); w++) sp_run(&sps, &p);
    sp_close(&sps);
    double *vs = calloc((size_t)reps, sizeof *vs), *vm = calloc((size_t)reps, sizeof *vm);
    if (!vs || !vm) die("out of memory", -2);
    double err = 0, merr = 0;
    int got = 0;
    for (int r = 0; r < reps; r++) {
      if (m.rt) {
        vm[r] = maize_run(&m, &p, "dmda");
        double e = check(&p);
        if (e > merr) merr = e;
      }
      if (sp_open(&sps, &p, 0)) break;
      sp_run(&sps, &p);
      vs[r] = sp_run(&sps, &p);
      sp_close(&sps);
      double e = check(&p);
      if (e > err) err = e;
      got++;
    }
    if (got == reps) {
      qsort(vs, (size_t)reps, sizeof *vs, cmp_d);
      qsort(vm, (size_t)reps, sizeof *vm, cmp_d);
      sp = vs[reps / 2];
      printf("%-14s %12.4f %10.2f %12.2e%s\n", "starpu-dmda", sp, gflop / sp, err, err > 1e-4 ? "  WRONG" : "");
      if (m.rt) {
        maize_dmda = vm[reps / 2];
        printf("%-14s %12.4f %10.2f %12.2e%s   (runs paired with StarPU's)\n", "dmda", maize_dmda,
               gflop / maize_dmda, merr, merr > 1e-4 ? "  WRONG" : "");
      }
      if (err > 1e-4 || merr > 1e-4) rc = 1;
    }
    free(vs);
    free(vm);
  }
#else
  (void)use_starpu;
#endif
  if (m.rt) {
    double *v = calloc((size_t)reps, sizeof *v);
    /* Every policy, dmda first (its models are calibrated); the others
     * learn on top of dmda's models. */
    const char *order[16] = {"dmda"};
    unsigned npol = 1;
    for (unsigned pi = 0; mz_policy_name(m.rt, pi) && npol < 16; pi++)
      if (strcmp(mz_policy_name(m.rt, pi), "dmda")) order[npol++] = mz_policy_name(m.rt, pi);
    for (unsigned pi = 0; pi < npol; pi++) {
      const char *pol = order[pi];
      for (int w = 0; w < warm; w++) maize_run(&m, &p, pol);
      for (int r = 0; r < reps; r++) v[r] = maize_run(&m, &p, pol);
      double err = check(&p);
      qsort(v, (size_t)reps, sizeof *v, cmp_d);
      double med = v[reps / 2];
      printf("%-14s %12.4f %10.2f %12.2e  %.3f,%.3f%s\n", pol, med, gflop / med, err, last_busy[0], last_busy[1],
         err > 1e-4 ? "  WRONG" : "");
      printf("BENCH hetero.gemm kernels=%s policy=%s makespan_s=%.4f\n", kernels, pol, med);
      if (err > 1e-4) rc = 1;
      if (!strcmp(pol, "dmda") && isnan(maize_dmda)) maize_dmda = med;
    }
    free(v);
  }
  if (m.rt) {
    for (size_t x = 0; x < (size_t)t * t; x++) {
      mz_buffer_release(m.a[x]);
      mz_buffer_release(m.b[x]);
      mz_buffer_release(m.c[x]);
    }
    free(m.a);
    free(m.b);
    free(m.c);
    mz_kernel_destroy(m.k);
    mz_runtime_destroy(m.rt);
  }
  char ms[32] = "na", ss[32] = "na", rs[32] = "na";
  if (!isnan(maize_dmda)) snprintf(ms, sizeof ms, "%.4f", maize_dmda);
  if (!isnan(sp)) snprintf(ss, sizeof ss, "%.4f", sp);
  if (!isnan(maize_dmda) && !isnan(sp)) snprintf(rs, sizeof rs, "%.3f", maize_dmda / sp);
  printf("BENCH hetero.gemm kernels=%s maize_s=%s starpu_dmda_s=%s ratio=%s\n", kernels, ms, ss, rs);
  problem_free(&p);
  free(cl_source);
  return rc ? 1 : 0;
}
