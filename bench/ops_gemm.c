/* mz-bench-ops-gemm: maize's canned gemm (mz_op_gemm) against calling the
 * library directly, on the same data: OpenBLAS on the CPU, CLBlast on the
 * first OpenCL device (PoCL in CI), cuBLAS on the first CUDA device (loaded
 * at run time as maize loads it; skipped without a GPU).  f32, square sizes 256 to 1024 (or the
 * sizes given).  Repetitions interleave maize and direct calls (the order
 * alternates), after one warm-up of each; a maize repetition counts the
 * whole user path: build the graph, schedule, wait.  The data stay on the
 * device between repetitions in both (maize's coherence keeps C there).
 *
 * Output, one line per device and size:
 *   BENCH ops.gemm device=<cpu|opencl|cuda> n=<n> reps=<r> maize_ms=<median> [min max]
 *         direct_ms=<median> [min max] ratio=<maize/direct medians>
 *
 * Usage: mz-bench-ops-gemm [-r reps] [n ...] */
#include <getopt.h>
#include <maize.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mz_config.h"
#if MZ_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if MZ_HAVE_CLBLAST
#define CL_TARGET_OPENCL_VERSION 120
#include <clblast_c.h>
#endif

#include "bench_util.h"
#if MZ_HAVE_CUDA && MZ_HAVE_CUBLAS
#include "devices/cuda/cuda_libs.h"
#include "devices/cuda/cuda_loader.h"
#define HAVE_CUDA_DIRECT 1
#else
#define HAVE_CUDA_DIRECT 0
#endif

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void report(const char *dev, size_t n, int reps, double *m, double *d) {
  qsort(m, (size_t)reps, sizeof *m, cmp);
  qsort(d, (size_t)reps, sizeof *d, cmp);
  double mm = m[reps / 2], dm = d[reps / 2];
  printf("BENCH ops.gemm device=%s n=%zu reps=%d maize_ms=%.3f [%.3f %.3f] direct_ms=%.3f [%.3f %.3f] ratio=%.3f\n", dev,
         n, reps, mm, m[0], m[reps - 1], dm, d[0], d[reps - 1], mm / dm);
  fflush(stdout);
}

/* One maize gemm: build, schedule, wait.  Returns ms, or -1 on failure. */
static double maize_gemm(mz_runtime *rt, mz_buffer *A, mz_buffer *B, mz_buffer *C) {
  double t0 = now_ms();
  mz_graph *g;
  if (mz_graph_create(rt, &g)) return -1;
  mz_op *r = mz_op_gemm(g, MZ_NO_TRANS, MZ_NO_TRANS, 1.0, mz_value(g, A), mz_value(g, B), 0.0, mz_value(g, C));
  mz_future *f = NULL;
  int rc = mz_schedule(g, r, "single", &f);
  if (rc == MZ_OK) rc = mz_future_wait(f);
  if (rc != MZ_OK) fprintf(stderr, "maize gemm: %s: %s\n", mz_err_name(rc), f ? mz_future_message(f) : mz_graph_message(g));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  return rc == MZ_OK ? now_ms() - t0 : -1;
}

static float *matrix(size_t n, unsigned seed) {
  float *v = malloc(n * n * sizeof *v);
  for (size_t i = 0; i < n * n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return v;
}

#if HAVE_CUDA_DIRECT
/* cuBLAS called by hand on the primary context of device 0, through the
 * same loaders maize uses; the matrices stay on the device. */
struct cu_direct {
  struct mz__cuda_api api;
  struct mz__cublas_api bl;
  CUdevice dev;
  CUcontext ctx;
  CUstream st;
  cublasHandle_t h;
  CUdeviceptr a, b, c;
};

static bool cu_direct_init(struct cu_direct *w, const float *a, const float *b, const float *c, size_t n) {
  char why[256];
  memset(w, 0, sizeof *w);
  size_t bytes = n * n * sizeof(float);
  if (mz__cuda_load(NULL, &w->api, why, sizeof why) || mz__cublas_load(&w->bl, why, sizeof why)) {
    fprintf(stderr, "cuda direct: %s\n", why);
    return false;
  }
  const struct mz__cuda_api *A = &w->api;
  return A->Init(0) == CUDA_SUCCESS && A->DeviceGet(&w->dev, 0) == CUDA_SUCCESS &&
         A->DevicePrimaryCtxRetain(&w->ctx, w->dev) == CUDA_SUCCESS && A->CtxSetCurrent(w->ctx) == CUDA_SUCCESS &&
         A->StreamCreate(&w->st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS && A->MemAlloc(&w->a, bytes) == CUDA_SUCCESS &&
         A->MemAlloc(&w->b, bytes) == CUDA_SUCCESS && A->MemAlloc(&w->c, bytes) == CUDA_SUCCESS &&
         A->MemcpyHtoD(w->a, a, bytes) == CUDA_SUCCESS && A->MemcpyHtoD(w->b, b, bytes) == CUDA_SUCCESS &&
         A->MemcpyHtoD(w->c, c, bytes) == CUDA_SUCCESS && w->bl.Create(&w->h) == CUBLAS_STATUS_SUCCESS &&
         w->bl.SetStream(w->h, w->st) == CUBLAS_STATUS_SUCCESS;
}

/* Row-major C = A B is column-major C^T = B^T A^T: the operands swap. */
static bool cu_direct_gemm(struct cu_direct *w, size_t n) {
  const float one = 1.0f, zero = 0.0f;
  int k = (int)n;
  w->api.CtxSetCurrent(w->ctx);
  return w->bl.Sgemm(w->h, CUBLAS_OP_N, CUBLAS_OP_N, k, k, k, &one, (const float *)(uintptr_t)w->b, k,
                     (const float *)(uintptr_t)w->a, k, &zero, (float *)(uintptr_t)w->c, k) == CUBLAS_STATUS_SUCCESS &&
         w->api.StreamSynchronize(w->st) == CUDA_SUCCESS;
}

static void cu_direct_fini(struct cu_direct *w) {
  if (!w->api.handle) return;
  w->api.CtxSetCurrent(w->ctx);
  if (w->h) w->bl.Destroy(w->h);
  if (w->a) w->api.MemFree(w->a);
  if (w->b) w->api.MemFree(w->b);
  if (w->c) w->api.MemFree(w->c);
  if (w->st) w->api.StreamDestroy(w->st);
  if (w->ctx) w->api.DevicePrimaryCtxRelease(w->dev);
  /* cuBLAS stays loaded (cuda_libs.h: a loaded library is never closed). */
  mz__cuda_unload(&w->api);
}
#endif

static void bench_size(const char *devices, size_t n, int reps) {
  bool cl = strncmp(devices, "opencl", 6) == 0, cu = strncmp(devices, "cuda", 4) == 0;
  const char *name = cl ? "opencl" : cu ? "cuda" : "cpu";
  mz_runtime *rt = NULL;
  if (mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true}, &rt)) {
    printf("BENCH ops.gemm device=%s n=%zu skipped=1 (no such device)\n", name, n);
    return;
  }
  float *a = matrix(n, 1), *b = matrix(n, 2), *c = matrix(n, 3);
  mz_buffer *A, *B, *C;
  size_t dims[2] = {n, n};
  if (mz_buffer_create(rt, MZ_F32, 2, dims, a, &A) || mz_buffer_create(rt, MZ_F32, 2, dims, b, &B) ||
      mz_buffer_create(rt, MZ_F32, 2, dims, c, &C)) {
    fprintf(stderr, "cannot create buffers\n");
    exit(1);
  }
  double *tm = calloc((size_t)reps, sizeof *tm), *td = calloc((size_t)reps, sizeof *td);
  bool ok = true;
#if MZ_HAVE_CLBLAST
  cl_context ctx = NULL;
  cl_command_queue q = NULL;
  cl_mem ma = NULL, mb = NULL, mc = NULL;
  if (cl) {
    cl_platform_id p;
    cl_device_id d;
    cl_int err;
    clGetPlatformIDs(1, &p, NULL);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, NULL);
    ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
    q = clCreateCommandQueue(ctx, d, 0, &err);
    size_t bytes = n * n * sizeof(float);
    ma = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, a, &err);
    mb = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, b, &err);
    mc = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, c, &err);
  }
#endif
#if HAVE_CUDA_DIRECT
  struct cu_direct cw;
  memset(&cw, 0, sizeof cw);
  if (cu && !cu_direct_init(&cw, a, b, c, n)) ok = false;
#endif
  for (int r = -1; r < reps && ok; r++) { /* r == -1: warm-up (CLBlast compiles its kernels) */
    for (int k = 0; k < 2; k++) {
      bool do_maize = (k == 0) == (r % 2 == 0);
      double t;
      if (do_maize) {
        t = maize_gemm(rt, A, B, C);
        if (t < 0) ok = false;
        if (r >= 0) tm[r] = t;
      } else {
        double t0 = now_ms();
        if (cu) {
#if HAVE_CUDA_DIRECT
          if (!cu_direct_gemm(&cw, n)) ok = false;
#endif
        } else if (cl) {
#if MZ_HAVE_CLBLAST
          cl_event ev = NULL;
          if (CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, n, n, n, 1.0f, ma, 0, n, mb, 0,
                           n, 0.0f, mc, 0, n, &q, &ev) != CLBlastSuccess)
            ok = false;
          clFinish(q);
          if (ev) clReleaseEvent(ev);
#endif
        } else {
#if MZ_HAVE_OPENBLAS
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f,
                      c, (int)n);
#endif
        }
        t = now_ms() - t0;
        if (r >= 0) td[r] = t;
      }
    }
  }
  if (ok) report(name, n, reps, tm, td);
  else printf("BENCH ops.gemm device=%s n=%zu failed=1\n", name, n);
#if HAVE_CUDA_DIRECT
  if (cu) cu_direct_fini(&cw);
#endif
#if MZ_HAVE_CLBLAST
  if (cl) {
    clReleaseMemObject(ma);
    clReleaseMemObject(mb);
    clReleaseMemObject(mc);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
  }
#endif
  free(tm);
  free(td);
  free(a);
  free(b);
  free(c);
  mz_buffer_release(A);
  mz_buffer_release(B);
  mz_buffer_release(C);
  mz_runtime_destroy(rt);
}

int main(int argc, char **argv) {
  int reps = 7;
  size_t sizes[16] = {256, 512, 1024};
  int ns = 3, given = 0;
  static const struct option longopts[] = {{"reps", required_argument, NULL, 'r'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-ops-gemm";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":r:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, 1000, &num)) return 2;
      reps = (int)num;
      break;
    case 'h': printf("usage: %s [-r|--reps R] [N ...]   (square sizes, at most 16; default 256 512 1024)\n", prog);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  for (; optind < argc; optind++) {
    if (given == 16) return bench_arg_rest(prog, argc, argv);
    if (!bench_arg_long(prog, "a size", argv[optind], 1, 16384, &num)) return 2;
    sizes[given++] = (size_t)num;
  }
  if (given) ns = given;
  for (int i = 0; i < ns; i++) {
    if (MZ_HAVE_OPENBLAS) bench_size("cpu", sizes[i], reps);
    else printf("BENCH ops.gemm device=cpu skipped=1 (built without OpenBLAS)\n");
    if (MZ_HAVE_CLBLAST) bench_size("opencl:0", sizes[i], reps);
    else printf("BENCH ops.gemm device=opencl skipped=1 (built without CLBlast)\n");
    if (HAVE_CUDA_DIRECT) bench_size("cuda:0", sizes[i], reps);
    else printf("BENCH ops.gemm device=cuda skipped=1 (built without cuda.h or cublas_v2.h)\n");
  }
  return 0;
}
