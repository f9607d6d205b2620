/* Canned operations (include/maize/ops.h): every op on the CPU (OpenBLAS)
 * and on an OpenCL device (PoCL, CLBlast) against a double-precision
 * reference computed here (gemm against a naive product with transposes,
 * alpha and beta; sums against a Kahan sum), in f32 and f64; the RNG bit
 * for bit across the CPU, OpenCL and 1 vs 4 tiles; and the builders'
 * errors; the FFT (1-D batched and 2-D, forward and inverse) against a
 * naive double-precision DFT.  OpenCL tests are skipped, saying why, without an OpenCL device;
 * an op whose library this build lacks is skipped likewise.
 * The same checks run on a CUDA device (cuBLAS, cuFFT and maize's own PTX):
 * a GPU when there is one, else the CUDA driver emulator with its cuBLAS
 * and cuFFT test doubles (tests/cuda_emu/); there the RNG must match the
 * CPU bit for bit too, and an op whose CUDA library is missing fails with
 * MZ_ENODEV naming it. */
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "mz_config.h"
#if MZ_HAVE_CUDA
#include "cuda_emu/client.h"
#endif

static bool is_cuda(const char *devices) { return strncmp(devices, "cuda", 4) == 0; }

TestSuite(ops, .timeout = 300);

static mz_runtime *ops_runtime(const char *devices) {
  mz_runtime *rt = NULL;
#if MZ_HAVE_CUDA
  if (is_cuda(devices)) need_cuda();
#else
  if (is_cuda(devices)) cr_skip_test("this build has no CUDA backend");
#endif
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt);
  if (rc != MZ_OK && strncmp(devices, "opencl", 6) == 0)
    cr_skip_test("no OpenCL device (%s): install pocl-opencl-icd and set POCL_DEVICES=\"pthread pthread\"",
                 mz_err_name(rc));
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  return rt;
}

static bool have_blas(const char *devices) {
  if (is_cuda(devices)) return MZ_HAVE_CUBLAS;
  return strncmp(devices, "opencl", 6) == 0 ? MZ_HAVE_CLBLAST : MZ_HAVE_OPENBLAS;
}

/* On the emulator, after the runtime is gone: nothing left in the driver. */
static void cuda_clean(const char *devices) {
#if MZ_HAVE_CUDA
  if (is_cuda(devices)) emu_check_clean();
#endif
  (void)devices;
}

/* Run root to completion; the graph and future are freed. */
static void run(mz_runtime *rt, mz_graph *g, mz_op *root) {
  cr_assert_eq(mz_graph_status(g), MZ_OK, "graph: %s", mz_graph_message(g));
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, root, NULL, &f));
  int st = mz_future_wait(f);
  cr_assert_eq(st, MZ_OK, "run: %s: %s", mz_err_name(st), mz_future_message(f));
  mz_future_destroy(f);
  mz_graph_destroy(g);
}

static mz_buffer *buf_from(mz_runtime *rt, mz_dtype t, size_t w, size_t h, const double *v) {
  size_t n = w * h, es = mz_dtype_size(t);
  char *tmp = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    if (t == MZ_F32) ((float *)tmp)[i] = (float)v[i];
    else ((double *)tmp)[i] = v[i];
  }
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, h > 1 ? 2 : 1, (size_t[]){w, h}, tmp, &b));
  free(tmp);
  return b;
}

/* The buffer's contents as doubles (malloc'd). */
static double *buf_get(mz_buffer *b) {
  const mz_shape *s = mz_buffer_shape(b);
  size_t es = mz_dtype_size(s->dtype);
  char *tmp = malloc(s->count * es);
  int rc = mz_buffer_read(b, tmp, s->count * es);
  cr_assert_eq(rc, MZ_OK, "mz_buffer_read: %s", mz_err_name(rc));
  double *v = malloc(s->count * sizeof *v);
  for (size_t i = 0; i < s->count; i++) v[i] = s->dtype == MZ_F32 ? ((float *)tmp)[i] : ((double *)tmp)[i];
  free(tmp);
  return v;
}

static double *randv(size_t n, unsigned seed) {
  double *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = ((seed >> 8) & 0xffff) / 32768.0 - 1.0;
  }
  return v;
}

static double kahan(const double *v, size_t n) {
  double s = 0, c = 0;
  for (size_t i = 0; i < n; i++) {
    double y = v[i] - c, t = s + y;
    c = (t - s) - y;
    s = t;
  }
  return s;
}

static void near(double got, double want, double scale, mz_dtype t, const char *what, size_t i) {
  double tol = (t == MZ_F32 ? 2e-5 : 1e-12) * (scale > 1 ? scale : 1);
  cr_assert(fabs(got - want) <= tol, "%s (%s) [%zu]: %.17g, expected %.17g", what, mz_dtype_name(t), i, got, want);
}

static void check_gemm(mz_runtime *rt, mz_dtype t, mz_transpose ta, mz_transpose tb) {
  const size_t m = 37, n = 29, k = 23;
  const double alpha = 1.5, beta = -0.5;
  double *a = randv(m * k, 1), *bm = randv(k * n, 2), *c = randv(m * n, 3);
  /* Stored A is k x m when transposed (dims {m, k}), else m x k (dims {k, m}). */
  mz_buffer *A = ta ? buf_from(rt, t, m, k, a) : buf_from(rt, t, k, m, a);
  mz_buffer *B = tb ? buf_from(rt, t, k, n, bm) : buf_from(rt, t, n, k, bm);
  mz_buffer *C = buf_from(rt, t, n, m, c);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  run(rt, g, mz_op_gemm(g, ta, tb, alpha, mz_value(g, A), mz_value(g, B), beta, mz_value(g, C)));
  double *got = buf_get(C);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t l = 0; l < k; l++) s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? bm[j * k + l] : bm[l * n + j]);
      near(got[i * n + j], alpha * s + beta * c[i * n + j], (double)k, t, ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"), i * n + j);
    }
  free(got);
  free(a);
  free(bm);
  free(c);
  mz_buffer_release(A);
  mz_buffer_release(B);
  mz_buffer_release(C);
}

/* fill, copy, scal, axpy, dot and the reductions on one device set. */
static void check_vector_ops(mz_runtime *rt, mz_dtype t, bool blas) {
  const size_t n = 1000;
  double *x = randv(n, 7), *y = randv(n, 8);
  mz_buffer *X = buf_from(rt, t, n, 1, x), *Y = buf_from(rt, t, n, 1, y), *R = buf_from(rt, t, 1, 1, x);
  mz_graph *g;
  double *got;

  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_op_reduce(g, MZ_REDUCE_SUM, mz_value(g, X), mz_value(g, R));
  run(rt, g, r);
  got = buf_get(R);
  near(got[0], kahan(x, n), (double)n, t, "sum", 0);
  free(got);
  for (int kind = MZ_REDUCE_MIN; kind <= MZ_REDUCE_MAX; kind++) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    run(rt, g, mz_op_reduce(g, (mz_reduce_kind)kind, mz_value(g, X), mz_value(g, R)));
    got = buf_get(R);
    double want = x[0];
    for (size_t i = 1; i < n; i++) want = kind == MZ_REDUCE_MIN ? fmin(want, x[i]) : fmax(want, x[i]);
    near(got[0], want, 1, t, kind == MZ_REDUCE_MIN ? "min" : "max", 0);
    free(got);
  }

  if (blas) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    run(rt, g, mz_op_dot(g, mz_value(g, X), mz_value(g, Y), mz_value(g, R)));
    got = buf_get(R);
    double *xy = malloc(n * sizeof *xy);
    for (size_t i = 0; i < n; i++) xy[i] = x[i] * y[i];
    near(got[0], kahan(xy, n), (double)n, t, "dot", 0);
    free(xy);
    free(got);

    /* y = 2 x + y, then x = -3 x, then y <- copy of x: a chain ordered by hazards. */
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *y1 = mz_op_axpy(g, 2.0, mz_value(g, X), mz_value(g, Y));
    run(rt, g, y1);
    got = buf_get(Y);
    for (size_t i = 0; i < n; i++) near(got[i], 2.0 * x[i] + y[i], 2, t, "axpy", i);
    free(got);
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *x1 = mz_op_scal(g, -3.0, mz_value(g, X));
    mz_op *y2 = mz_op_copy(g, x1, mz_value(g, Y));
    run(rt, g, y2);
    got = buf_get(Y);
    for (size_t i = 0; i < n; i++) near(got[i], -3.0 * x[i], 3, t, "scal then copy", i);
    free(got);
  }

  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  run(rt, g, mz_op_fill(g, mz_value(g, X), 0.25));
  got = buf_get(X);
  for (size_t i = 0; i < n; i++) near(got[i], 0.25, 1, t, "fill", i);
  free(got);

  free(x);
  free(y);
  mz_buffer_release(X);
  mz_buffer_release(Y);
  mz_buffer_release(R);
}

static void check_all(const char *devices) {
  mz_runtime *rt = ops_runtime(devices);
  bool blas = have_blas(devices);
  for (int t = 0; t < 2; t++) {
    mz_dtype dt = t ? MZ_F64 : MZ_F32;
    check_vector_ops(rt, dt, blas);
    if (blas)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) check_gemm(rt, dt, (mz_transpose)ta, (mz_transpose)tb);
  }
  mz_runtime_destroy(rt);
  cuda_clean(devices);
  if (!blas)
    cr_skip_test("BLAS ops skipped on %s: this build has no %s", devices,
                 is_cuda(devices) ? "cublas_v2.h" : strncmp(devices, "opencl", 6) ? "OpenBLAS" : "CLBlast");
}

/* gemm on partition tiles: C and A cut into 3 row tiles, one gemm per tile. */
static void check_gemm_tiles(const char *devices) {
  if (!have_blas(devices)) cr_skip_test("this build has no BLAS for %s", devices);
  mz_runtime *rt = ops_runtime(devices);
  const size_t m = 30, n = 17, k = 11;
  double *a = randv(m * k, 4), *bm = randv(k * n, 5), *c = randv(m * n, 6);
  mz_buffer *A = buf_from(rt, MZ_F64, k, m, a), *B = buf_from(rt, MZ_F64, n, k, bm), *C = buf_from(rt, MZ_F64, n, m, c);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *pa = mz_partition(g, mz_value(g, A), 3), *pc = mz_partition(g, mz_value(g, C), 3);
  mz_op *tiles[3];
  for (unsigned i = 0; i < 3; i++)
    tiles[i] = mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 2.0, mz_unzip(g, pa, i), mz_value(g, B), 1.0, mz_unzip(g, pc, i));
  mz_op *cc = mz_unpartition(g, mz_zip(g, 3, tiles));
  mz_op *aa = mz_unpartition(g, pa);
  run(rt, g, mz_join(g, 2, (mz_op *[]){cc, aa}));
  double *got = buf_get(C);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      for (size_t l = 0; l < k; l++) s += a[i * k + l] * bm[l * n + j];
      near(got[i * n + j], 2.0 * s + c[i * n + j], (double)k, MZ_F64, "tiled gemm", i * n + j);
    }
  free(got);
  free(a);
  free(bm);
  free(c);
  mz_buffer_release(A);
  mz_buffer_release(B);
  mz_buffer_release(C);
  mz_runtime_destroy(rt);
}

Test(ops, gemm_tiles_cpu) { check_gemm_tiles("cpu:2"); }
Test(ops, gemm_tiles_opencl, .timeout = 300) { check_gemm_tiles("opencl"); }

Test(ops, cpu) { check_all("cpu"); }
Test(ops, opencl, .timeout = 600) { check_all("opencl:0"); }
Test(ops, cuda) { check_all("cuda:0"); }
Test(ops, gemm_tiles_cuda) { check_gemm_tiles("cuda:0"); }

/* Without cuBLAS, the BLAS ops are not runnable on CUDA: on a runtime of
 * CUDA devices only, building one fails with MZ_ENODEV naming cuBLAS and
 * why it did not load, while an op of maize's own PTX still runs. */
Test(ops, cuda_without_cublas) {
#if MZ_HAVE_CUDA
  setenv("MZ_CUBLAS_LIBRARY", "/nonexistent/libcublas.so", 1);
  mz_runtime *rt = ops_runtime("cuda:0");
  mz_buffer *X = NULL, *Y = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){64}, NULL, &X));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){64}, NULL, &Y));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op_axpy(g, 2.0, mz_value(g, X), mz_value(g, Y));
  cr_assert_eq(mz_graph_status(g), MZ_ENODEV, "axpy without cuBLAS: %s", mz_err_name(mz_graph_status(g)));
  const char *msg = mz_graph_message(g);
  cr_assert(msg && strstr(msg, "cuBLAS") && strstr(msg, "not loaded") && strstr(msg, "/nonexistent/libcublas.so"),
            "the message names cuBLAS and why: %s", msg ? msg : "(none)");
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  run(rt, g, mz_op_fill(g, mz_value(g, X), 1.5));
  float got[64];
  MZ_OK_OR_DIE(rt, mz_buffer_read(X, got, sizeof got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], 1.5f);
  mz_buffer_release(X);
  mz_buffer_release(Y);
  mz_runtime_destroy(rt);
  cuda_clean("cuda");
#else
  cr_skip_test("this build has no CUDA backend");
#endif
}

/* ---- RNG ---- */

/* n values of dist into a fresh buffer, cut into tiles; raw bytes returned. */
/* A machine with PoCL but no Random123 headers (a build carried to a GPU
 * machine) cannot compile the OpenCL generators: the op says so up front
 * (rng_without_random123_headers checks that) and a comparison with OpenCL
 * has nothing to compare there, so the test is skipped, saying why. */
static void skip_without_rng_headers(mz_runtime *rt, mz_graph *g, mz_buffer *b) {
  if (mz_graph_status(g) != MZ_ENODEV || strstr(mz_graph_message(g), "Random123 headers") == NULL) return;
  char why[512];
  snprintf(why, sizeof why, "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
  cr_skip_test("no Random123 headers on this machine for the OpenCL generators: %s", why);
}

static void *rng_bytes(const char *devices, mz_dtype t, mz_rng_dist dist, size_t n, unsigned tiles) {
  mz_runtime *rt = ops_runtime(devices);
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, 1, (size_t[]){n}, NULL, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *root;
  if (tiles <= 1) {
    root = mz_op_rng(g, mz_value(g, b), 42, dist);
  } else {
    mz_op *p = mz_partition(g, mz_value(g, b), tiles);
    mz_op *parts[8];
    for (unsigned i = 0; i < tiles; i++) parts[i] = mz_op_rng(g, mz_unzip(g, p, i), 42, dist);
    root = mz_unpartition(g, mz_zip(g, tiles, parts));
  }
  if (strncmp(devices, "opencl", 6) == 0) skip_without_rng_headers(rt, g, b);
  run(rt, g, root);
  void *out = malloc(n * mz_dtype_size(t));
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, n * mz_dtype_size(t)));
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
  return out;
}

static void check_rng(mz_dtype t, mz_rng_dist dist) {
  if (!MZ_HAVE_RANDOM123) cr_skip_test("this build has no Random123");
  const size_t n = 4099; /* not a multiple of the tile count */
  size_t bytes = n * mz_dtype_size(t);
  void *cpu1 = rng_bytes("cpu", t, dist, n, 1);
  void *cpu4 = rng_bytes("cpu:2", t, dist, n, 4);
  cr_assert(memcmp(cpu1, cpu4, bytes) == 0, "CPU: 1 tile and 4 tiles differ");
  if (t != MZ_U32) { /* a sanity check of the distribution: the mean */
    double s = 0;
    for (size_t i = 0; i < n; i++) s += t == MZ_F32 ? ((float *)cpu1)[i] : ((double *)cpu1)[i];
    double want = dist == MZ_RNG_UNIFORM ? 0.5 : 0.0;
    cr_assert(fabs(s / n - want) < 0.05, "mean %g, expected about %g", s / n, want);
  }
  void *cl1 = rng_bytes("opencl:0", t, dist, n, 1);
  void *cl4 = rng_bytes("opencl:0", t, dist, n, 4);
  cr_assert(memcmp(cl1, cl4, bytes) == 0, "OpenCL: 1 tile and 4 tiles differ");
  if (dist != MZ_RNG_NORMAL) {
    cr_assert(memcmp(cpu1, cl1, bytes) == 0, "CPU and OpenCL differ");
  } else {
    for (size_t i = 0; i < n; i++) {
      double a = t == MZ_F32 ? ((float *)cpu1)[i] : ((double *)cpu1)[i];
      double b = t == MZ_F32 ? ((float *)cl1)[i] : ((double *)cl1)[i];
      cr_assert(fabs(a - b) <= (t == MZ_F32 ? 1e-5 : 1e-13) * (1 + fabs(a)), "normal [%zu]: CPU %.17g, OpenCL %.17g", i, a, b);
    }
  }
  free(cpu1);
  free(cpu4);
  free(cl1);
  free(cl4);
}

/* The same on a CUDA device: the same bits as the CPU, whatever the tiling
 * (the normal values within rounding: CUDA's log and cos are not glibc's). */
static void check_rng_cuda(mz_dtype t, mz_rng_dist dist) {
  if (!MZ_HAVE_RANDOM123) cr_skip_test("this build has no Random123 (the CPU reference)");
  const size_t n = 4099;
  size_t bytes = n * mz_dtype_size(t);
  void *cu1 = rng_bytes("cuda:0", t, dist, n, 1);
  void *cu4 = rng_bytes("cuda:0", t, dist, n, 4);
  void *cpu1 = rng_bytes("cpu", t, dist, n, 1);
  cr_assert(memcmp(cu1, cu4, bytes) == 0, "CUDA: 1 tile and 4 tiles differ");
  if (dist != MZ_RNG_NORMAL) {
    cr_assert(memcmp(cpu1, cu1, bytes) == 0, "CPU and CUDA differ");
  } else {
    for (size_t i = 0; i < n; i++) {
      double a = t == MZ_F32 ? ((float *)cpu1)[i] : ((double *)cpu1)[i];
      double b = t == MZ_F32 ? ((float *)cu1)[i] : ((double *)cu1)[i];
      cr_assert(fabs(a - b) <= (t == MZ_F32 ? 1e-5 : 1e-13) * (1 + fabs(a)), "normal [%zu]: CPU %.17g, CUDA %.17g", i, a, b);
    }
  }
  free(cu1);
  free(cu4);
  free(cpu1);
  cuda_clean("cuda");
}

Test(ops, rng_cuda_uniform_f32) { check_rng_cuda(MZ_F32, MZ_RNG_UNIFORM); }
Test(ops, rng_cuda_uniform_f64) { check_rng_cuda(MZ_F64, MZ_RNG_UNIFORM); }
Test(ops, rng_cuda_bits_u32) { check_rng_cuda(MZ_U32, MZ_RNG_BITS); }
Test(ops, rng_cuda_normal_f32) { check_rng_cuda(MZ_F32, MZ_RNG_NORMAL); }
Test(ops, rng_cuda_normal_f64) { check_rng_cuda(MZ_F64, MZ_RNG_NORMAL); }

/* Without the Random123 headers on the machine that runs it (a build moved
 * elsewhere), the generator is not offered to OpenCL: beside a CPU it runs
 * there, and on OpenCL alone the op says what is missing, up front. */
Test(ops, rng_without_random123_headers, .timeout = 120) {
  if (!MZ_HAVE_RANDOM123) cr_skip_test("this build has no Random123");
  const size_t n = 257;
  void *want = rng_bytes("cpu", MZ_F32, MZ_RNG_UNIFORM, n, 1);
  setenv("MZ_RANDOM123_INCLUDE", "/nonexistent/include", 1);
  void *got = rng_bytes("cpu,opencl:0", MZ_F32, MZ_RNG_UNIFORM, n, 1);
  cr_expect(memcmp(want, got, n * sizeof(float)) == 0, "CPU beside OpenCL without the headers: other numbers");
  mz_runtime *rt = ops_runtime("opencl:0");
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *op = mz_op_rng(g, mz_value(g, b), 42, MZ_RNG_UNIFORM);
  unsetenv("MZ_RANDOM123_INCLUDE");
  cr_expect_eq(mz_graph_status(g), MZ_ENODEV, "%s", mz_err_name(mz_graph_status(g)));
  cr_expect(strstr(mz_graph_message(g), "Random123") != NULL, "the message: %s", mz_graph_message(g));
  (void)op;
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
  free(want);
  free(got);
}

Test(ops, rng_uniform_f32, .timeout = 300) { check_rng(MZ_F32, MZ_RNG_UNIFORM); }
Test(ops, rng_uniform_f64, .timeout = 300) { check_rng(MZ_F64, MZ_RNG_UNIFORM); }
Test(ops, rng_bits_u32, .timeout = 300) { check_rng(MZ_U32, MZ_RNG_BITS); }
Test(ops, rng_normal_f32, .timeout = 300) { check_rng(MZ_F32, MZ_RNG_NORMAL); }
Test(ops, rng_normal_f64, .timeout = 300) { check_rng(MZ_F64, MZ_RNG_NORMAL); }

/* ---- FFT ---- */

/* The naive DFT of x (interleaved complex, batch transforms of rows x cols
 * points each) in double precision, the inverse scaled by 1/N. */
static double *naive_dft(const double *x, size_t cols, size_t rows, size_t batch, bool inverse) {
  size_t np = cols * rows;
  double *y = calloc(2 * np * batch, sizeof *y);
  double sg = inverse ? 1.0 : -1.0;
  for (size_t b = 0; b < batch; b++)
    for (size_t kr = 0; kr < rows; kr++)
      for (size_t kc = 0; kc < cols; kc++) {
        double re = 0, im = 0;
        for (size_t jr = 0; jr < rows; jr++)
          for (size_t jc = 0; jc < cols; jc++) {
            /* the phase reduced modulo 1 first, so it stays exact for large products */
            double ph = (double)((kr * jr) % rows) / (double)rows + (double)((kc * jc) % cols) / (double)cols;
            double a = sg * 2.0 * M_PI * ph, xr = x[2 * (b * np + jr * cols + jc)], xi = x[2 * (b * np + jr * cols + jc) + 1];
            re += xr * cos(a) - xi * sin(a);
            im += xr * sin(a) + xi * cos(a);
          }
        size_t o = 2 * (b * np + kr * cols + kc);
        y[o] = inverse ? re / (double)np : re;
        y[o + 1] = inverse ? im / (double)np : im;
      }
  return y;
}

/* A transform of a buffer of w x h x d elements (w even: w/2 complex
 * numbers per row) on devices, forward then inverse, each against the
 * naive DFT. */
static void check_fft_on(mz_runtime *rt, mz_dtype t, unsigned rank, size_t w, size_t h, size_t d) {
  size_t n = w * h * d, cols = w / 2, rows = rank == 2 ? h : 1, batch = n / 2 / (cols * rows);
  double *x = randv(n, 11 + (unsigned)rank);
  mz_buffer *X = NULL, *Y = NULL, *Z = NULL;
  char *tmp = malloc(n * 8);
  for (size_t i = 0; i < n; i++) {
    if (t == MZ_F32) ((float *)tmp)[i] = (float)x[i];
    else ((double *)tmp)[i] = x[i];
  }
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, 3, (size_t[]){w, h, d}, tmp, &X));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, 3, (size_t[]){w, h, d}, NULL, &Y));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, t, 3, (size_t[]){w, h, d}, NULL, &Z));
  free(tmp);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *y = mz_op_fft(g, rank, MZ_FFT_FORWARD, mz_value(g, X), mz_value(g, Y));
  mz_op *z = mz_op_fft(g, rank, MZ_FFT_INVERSE, y, mz_value(g, Z));
  run(rt, g, z);
  /* Forward against the DFT of x; inverse against the inverse DFT of what
   * the forward gave, and against x itself. */
  double *want = naive_dft(x, cols, rows, batch, false), *got = buf_get(Y);
  double scale = (double)(cols * rows);
  char what[64];
  snprintf(what, sizeof what, "fft rank %u %zu x %zu x %zu forward", rank, w, h, d);
  for (size_t i = 0; i < n; i++) near(got[i], want[i], 4 * scale, t, what, i);
  double *back = naive_dft(got, cols, rows, batch, true), *got2 = buf_get(Z);
  snprintf(what, sizeof what, "fft rank %u %zu x %zu x %zu inverse", rank, w, h, d);
  for (size_t i = 0; i < n; i++) {
    near(got2[i], back[i], 4, t, what, i);
    near(got2[i], t == MZ_F32 ? (double)(float)x[i] : x[i], 4, t, what, i);
  }
  free(want);
  free(got);
  free(back);
  free(got2);
  free(x);
  mz_buffer_release(X);
  mz_buffer_release(Y);
  mz_buffer_release(Z);
}

static void check_fft(const char *devices) {
  bool cl = strncmp(devices, "opencl", 6) == 0;
  if (is_cuda(devices) && !MZ_HAVE_CUFFT) cr_skip_test("this build has no cufft.h");
  if (!is_cuda(devices) && (cl ? !MZ_HAVE_CLFFT : !MZ_HAVE_FFTW)) cr_skip_test("this build has no %s", cl ? "clFFT" : "FFTW");
  mz_runtime *rt = ops_runtime(devices);
  for (int f = 0; f < 2; f++) {
    mz_dtype t = f ? MZ_F64 : MZ_F32;
    check_fft_on(rt, t, 1, 2 * 48, 3, 1);  /* 3 transforms of 48 = 2^4 * 3 points */
    check_fft_on(rt, t, 1, 2 * 7, 1, 1);   /* one of 7 */
    check_fft_on(rt, t, 2, 2 * 20, 12, 1); /* 12 x 20 */
    check_fft_on(rt, t, 2, 2 * 8, 6, 2);   /* two planes of 6 x 8 */
  }
  mz_runtime_destroy(rt);
}

Test(ops, fft_cpu) { check_fft("cpu"); }
Test(ops, fft_opencl, .timeout = 600) { check_fft("opencl:0"); }
Test(ops, fft_cuda) {
  check_fft("cuda:0");
  cuda_clean("cuda");
}

/* The FFT's builder refuses a bad shape, rank, direction and overlap. */
Test(ops, fft_builder_errors) {
  mz_runtime *rt = test_runtime("cpu");
  mz_buffer *a = NULL, *b = NULL, *odd = NULL, *odd2 = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){8, 4}, NULL, &a));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){8, 4}, NULL, &b));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){7, 4}, NULL, &odd));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){7, 4}, NULL, &odd2));
  struct {
    unsigned rank;
    int dir;
    mz_buffer *x, *y;
    int want;
  } cases[] = {
      {1, MZ_FFT_FORWARD, a, a, MZ_EINVAL},   {3, MZ_FFT_FORWARD, a, b, MZ_EINVAL}, {0, MZ_FFT_FORWARD, a, b, MZ_EINVAL},
      {1, 0, a, b, MZ_EINVAL},                {1, MZ_FFT_FORWARD, odd, odd2, MZ_ESHAPE},
      {1, MZ_FFT_FORWARD, a, odd, MZ_ESHAPE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *r = mz_op_fft(g, cases[i].rank, (mz_fft_direction)cases[i].dir, mz_value(g, cases[i].x), mz_value(g, cases[i].y));
    cr_assert_not_null(r);
    cr_assert_eq(mz_graph_status(g), cases[i].want, "case %zu: %s: %s", i, mz_err_name(mz_graph_status(g)),
                 mz_graph_message(g));
    mz_graph_destroy(g);
  }
  cr_assert_null(mz_op_fft(NULL, 1, MZ_FFT_FORWARD, NULL, NULL));
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_buffer_release(odd);
  mz_buffer_release(odd2);
  mz_runtime_destroy(rt);
}

/* Builders keep a sticky error instead of crashing. */
Test(ops, builder_errors) {
  mz_runtime *rt = test_runtime("cpu");
  mz_buffer *a = NULL, *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){3, 4}, NULL, &a));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){5, 4}, NULL, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 1, mz_value(g, a), mz_value(g, b), 0, mz_value(g, a));
  cr_assert_not_null(r);
  cr_assert_eq(mz_graph_status(g), MZ_ESHAPE, "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op_rng(g, mz_value(g, a), 1, MZ_RNG_BITS);
  cr_assert_eq(mz_graph_status(g), MZ_ESHAPE, "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op_fill(g, NULL, 1);
  cr_assert_eq(mz_graph_status(g), MZ_EINVAL);
  mz_graph_destroy(g);
  cr_assert_null(mz_op_fill(NULL, NULL, 1));
  if (!MZ_HAVE_OPENBLAS && !MZ_HAVE_CLBLAST) { /* no device can run gemm: says which libraries are missing */
    mz_buffer *sq = NULL;
    MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){4, 4}, NULL, &sq));
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 1, mz_value(g, sq), mz_value(g, sq), 0, mz_value(g, sq));
    mz_buffer_release(sq);
    cr_assert_eq(mz_graph_status(g), MZ_ENODEV, "%s", mz_graph_message(g));
    cr_assert(strstr(mz_graph_message(g), "OpenBLAS") && strstr(mz_graph_message(g), "CLBlast"), "%s",
              mz_graph_message(g));
    mz_graph_destroy(g);
  }
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* Every registered policy places a chain of canned ops on the CPU and an
 * OpenCL device together (an op goes only where its library is). */
/* Two OpenCL devices whose submission threads make their first CLBlast
 * calls at the same moment: CLBlast 1.5 fills its caches unsafely then
 * (it crashed the pipeline benchmark in one process in six), so maize
 * serializes its calls.  The race is at a process's first calls, so each
 * try is a child process of its own (the parent never starts OpenCL). */
static int clblast_race_child(void) {
  mz_runtime *rt = NULL;
  if (mz_runtime_create(&(mz_runtime_config){.devices = "opencl", .policy = "round-robin", .quiet = true}, &rt))
    return 2;
  enum { NB = 8 };
  mz_buffer *b[NB];
  float v[256];
  for (int i = 0; i < 256; i++) v[i] = (float)i;
  mz_graph *g = NULL;
  if (mz_graph_create(rt, &g)) return 3;
  mz_op *outs[NB / 2];
  for (int i = 0; i < NB; i++)
    if (mz_buffer_create(rt, MZ_F32, 1, (size_t[]){256}, v, &b[i])) return 4;
  /* independent pairs (round-robin spreads them over both devices), each
   * a scal then an axpy: several CLBlast routines start at once */
  for (int i = 0; i < NB / 2; i++)
    outs[i] = mz_op_axpy(g, 0.5, mz_op_scal(g, 2.0, mz_value(g, b[2 * i])), mz_value(g, b[2 * i + 1]));
  mz_future *f = NULL;
  if (mz_graph_status(g) || mz_schedule(g, mz_join(g, NB / 2, outs), NULL, &f)) return 5;
  int st = mz_future_wait(f);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int i = 0; i < NB; i++) mz_buffer_release(b[i]);
  mz_runtime_destroy(rt);
  return st ? 6 : 0;
}

Test(ops, clblast_from_two_devices_at_once, .timeout = 300) {
  if (!MZ_HAVE_CLBLAST) cr_skip_test("this build has no CLBlast");
  mz_runtime *probe = NULL;
  /* whether there are two OpenCL devices, asked in a child too */
  pid_t p0 = fork();
  if (p0 == 0) _exit(mz_runtime_create(&(mz_runtime_config){.devices = "opencl:1", .quiet = true}, &probe) ? 1 : 0);
  int ws = 0;
  waitpid(p0, &ws, 0);
  if (!WIFEXITED(ws) || WEXITSTATUS(ws))
    cr_skip_test("fewer than two OpenCL devices (POCL_DEVICES=\"pthread pthread\" gives two)");
  for (int i = 0; i < 12; i++) {
    pid_t p = fork();
    cr_assert_geq(p, 0, "fork");
    if (p == 0) _exit(clblast_race_child());
    waitpid(p, &ws, 0);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "try %d: %s %d", i, WIFEXITED(ws) ? "exit status" : "signal",
              WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
  }
}

Test(ops, every_policy_cpu_and_opencl, .timeout = 600) {
  mz_runtime *rt = ops_runtime("cpu,opencl:0");
  const size_t n = 64;
  double *x = randv(n * n, 9);
  for (unsigned p = 0; mz_policy_name(rt, p); p++) {
    const char *name = mz_policy_name(rt, p);
    mz_buffer *X = buf_from(rt, MZ_F32, n, n, x), *Y = buf_from(rt, MZ_F32, n, n, x), *R = buf_from(rt, MZ_F32, 1, 1, x);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    /* y = 1; x = 2 x + y; y = x x^T (gemm, beta 0); r = sum(y). */
    mz_op *y = mz_op_fill(g, mz_value(g, Y), 1.0);
    mz_op *x1 = MZ_HAVE_OPENBLAS || MZ_HAVE_CLBLAST ? mz_op_axpy(g, 2.0, y, mz_value(g, X)) : mz_value(g, X);
    mz_op *y2 = MZ_HAVE_OPENBLAS || MZ_HAVE_CLBLAST ? mz_op_gemm(g, MZ_NO_TRANS, MZ_TRANS, 1.0, x1, x1, 0.0, y) : y;
    mz_op *r = mz_op_reduce(g, MZ_REDUCE_SUM, y2, mz_value(g, R));
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s: %s", name, mz_graph_message(g));
    mz_future *f = NULL;
    MZ_OK_OR_DIE(rt, mz_schedule(g, r, name, &f));
    int st = mz_future_wait(f);
    cr_assert_eq(st, MZ_OK, "policy %s: %s: %s", name, mz_err_name(st), mz_future_message(f));
    mz_future_destroy(f);
    mz_graph_destroy(g);
    double *got = buf_get(R), want = 0;
    if (MZ_HAVE_OPENBLAS || MZ_HAVE_CLBLAST) {
      double *xs = malloc(n * n * sizeof *xs), *ys = malloc(n * n * sizeof *ys);
      for (size_t i = 0; i < n * n; i++) xs[i] = 2.0 * 1.0 + (float)x[i];
      for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
          double s = 0;
          for (size_t l = 0; l < n; l++) s += xs[i * n + l] * xs[j * n + l];
          ys[i * n + j] = s;
        }
      want = kahan(ys, n * n);
      free(xs);
      free(ys);
    } else {
      want = (double)(n * n);
    }
    cr_expect(fabs(got[0] - want) <= 1e-4 * fabs(want), "policy %s: sum %.9g, expected %.9g", name, got[0], want);
    free(got);
    mz_buffer_release(X);
    mz_buffer_release(Y);
    mz_buffer_release(R);
  }
  free(x);
  mz_runtime_destroy(rt);
}

/* The OpenCL C kernels cover a 2-D buffer whole (a 1-D launch over its
 * elements, not the default 2-D one). */
Test(ops, fill_and_rng_2d_opencl, .timeout = 300) {
  mz_runtime *rt = ops_runtime("opencl:0");
  const size_t w = 33, h = 7;
  mz_buffer *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){w, h}, NULL, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  run(rt, g, mz_op_fill(g, mz_value(g, b), 3.0));
  double *got = buf_get(b);
  for (size_t i = 0; i < w * h; i++) near(got[i], 3.0, 1, MZ_F32, "2-D fill", i);
  free(got);
  if (MZ_HAVE_RANDOM123) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *rng = mz_op_rng(g, mz_value(g, b), 5, MZ_RNG_UNIFORM);
    skip_without_rng_headers(rt, g, b);
    run(rt, g, rng);
    got = buf_get(b);
    for (size_t i = 0; i < w * h; i++) cr_assert(got[i] > 0 && got[i] < 1, "2-D rng [%zu] = %g", i, got[i]);
    free(got);
  }
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* An op that no device of the runtime can run fails at build time with
 * MZ_ENODEV, naming the library: here gemm on OpenCL alone in a build
 * without CLBlast (skipped where CLBlast is built: every op runs there). */
Test(ops, enodev_names_the_library) {
  if (MZ_HAVE_CLBLAST) cr_skip_test("this build has CLBlast: every op runs on OpenCL");
  mz_runtime *rt = ops_runtime("opencl:0");
  mz_buffer *sq = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){4, 4}, NULL, &sq));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 1, mz_value(g, sq), mz_value(g, sq), 0, mz_value(g, sq));
  cr_assert_eq(mz_graph_status(g), MZ_ENODEV, "%s", mz_graph_message(g));
  cr_assert(strstr(mz_graph_message(g), "CLBlast"), "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  mz_buffer_release(sq);
  mz_runtime_destroy(rt);
}

/* Canned ops carry cost hints: simulated devices place and "run" them like
 * any kernel (nothing computes there). */
Test(ops, simulated_devices) {
  if (!(MZ_HAVE_OPENBLAS || MZ_HAVE_CLBLAST) || !MZ_HAVE_RANDOM123) cr_skip_test("this build lacks BLAS or Random123");
  mz_runtime *rt = test_runtime("sim:gpu*2@speed=20");
  mz_buffer *a = NULL, *cb = NULL, *r = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F64, 2, (size_t[]){64, 64}, NULL, &a));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F64, 2, (size_t[]){64, 64}, NULL, &cb));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F64, 1, (size_t[]){1}, NULL, &r));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *x = mz_op_rng(g, mz_value(g, a), 1, MZ_RNG_NORMAL);
  mz_op *c = mz_op_gemm(g, MZ_NO_TRANS, MZ_TRANS, 1, x, x, 0, mz_value(g, cb));
  run(rt, g, mz_op_reduce(g, MZ_REDUCE_MAX, c, mz_value(g, r)));
  mz_buffer_release(a);
  mz_buffer_release(cb);
  mz_buffer_release(r);
  mz_runtime_destroy(rt);
}

/* The FFT on OpenCL alone in a build without clFFT: MZ_ENODEV naming it
 * (skipped where clFFT is built). */
Test(ops, fft_enodev_names_the_library) {
  if (MZ_HAVE_CLFFT) cr_skip_test("this build has clFFT: the FFT runs on OpenCL");
  mz_runtime *rt = ops_runtime("opencl:0");
  mz_buffer *a = NULL, *b = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){8}, NULL, &a));
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 1, (size_t[]){8}, NULL, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op_fft(g, 1, MZ_FFT_FORWARD, mz_value(g, a), mz_value(g, b));
  cr_assert_eq(mz_graph_status(g), MZ_ENODEV, "%s", mz_graph_message(g));
  cr_assert(strstr(mz_graph_message(g), "clFFT"), "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}
