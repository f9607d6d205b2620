/* mz-bench-cuda-chain: small CUDA kernels on one stream.
 *
 * N launches (default 10,000) of the example kernel `scale` on a buffer of
 * 1,024 floats, each depending on the one before, on one stream:
 *
 *  maize  a graph of N applies of "f32 a, inout f32[] y, u64 n = sizeof(y)"
 *         on one buffer (the hazards chain them), runtime devices "cuda:0"
 *         with one stream, policy "single".  The figure is mz_schedule()
 *         to the end of mz_future_wait(); building the graph is timed apart.
 *         The run's host callbacks and batches come from mz_future_stats().
 *  raw    the same N cuLaunchKernel calls written by hand on one
 *         non-blocking stream of the primary context, then
 *         cuStreamSynchronize, with the driver loaded by maize's loader.
 *
 * Each figure is the median over -r repetitions (default 5) of the run's
 * wall time divided by N, after an untimed warm-up; maize and raw
 * alternate within each repetition.  Without a CUDA driver or GPU it says
 * it is skipped and exits 0.
 *
 * Usage: mz-bench-cuda-chain [-n N] [-r reps] [--quick]
 * Last line: BENCH cuda.chain maize_ns=<x> raw_ns=<y> ratio=<x/y>
 *            callbacks=<c> batches=<b> ops=<N> build_ns=<per op> */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "devices/cuda/cuda_loader.h"
#include "maize.h"

#define MAX_REPS 51
#define ELEMS 1024

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define CK(call)                                                                       \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                          \
      char e_[160];                                                                    \
      fprintf(stderr, "cuda_chain: %s: %s\n", #call, mz__cuda_strerror(api, r_, e_, sizeof e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* The hand-written baseline's state. */
struct raw {
  const struct mz__cuda_api *api;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  CUstream st;
  CUdeviceptr y;
};

static void raw_init(struct raw *w, const struct mz__cuda_api *api, const char *ptx) {
  w->api = api;
  CK(api->DeviceGet(&w->dev, 0));
  CK(api->DevicePrimaryCtxRetain(&w->ctx, w->dev));
  CK(api->CtxSetCurrent(w->ctx));
  CK(api->ModuleLoadDataEx(&w->mod, ptx, 0, NULL, NULL));
  CK(api->ModuleGetFunction(&w->fn, w->mod, "scale"));
  CK(api->StreamCreate(&w->st, CU_STREAM_NON_BLOCKING));
  CK(api->MemAlloc(&w->y, ELEMS * sizeof(float)));
  float h[ELEMS];
  for (int i = 0; i < ELEMS; i++) h[i] = 1.0f;
  CK(api->MemcpyHtoD(w->y, h, sizeof h));
}

/* n launches and one synchronization; ns per launch. */
static double raw_run(struct raw *w, int n) {
  const struct mz__cuda_api *api = w->api;
  CK(api->CtxSetCurrent(w->ctx));
  float a = 1.0f;
  unsigned long long cnt = ELEMS;
  void *params[] = {&a, &w->y, &cnt};
  uint64_t t0 = now_ns();
  for (int i = 0; i < n; i++)
    CK(api->LaunchKernel(w->fn, (ELEMS + 255) / 256, 1, 1, 256, 1, 1, 0, w->st, params, NULL));
  CK(api->StreamSynchronize(w->st));
  return (double)(now_ns() - t0) / n;
}

static void raw_fini(struct raw *w) {
  const struct mz__cuda_api *api = w->api;
  api->CtxSetCurrent(w->ctx);
  api->MemFree(w->y);
  api->StreamDestroy(w->st);
  api->ModuleUnload(w->mod);
  api->DevicePrimaryCtxRelease(w->dev);
}

struct mz_side {
  mz_runtime *rt;
  mz_kernel *k;
  mz_buffer *y;
};

/* One run of n chained applies; ns per op, with the build time and the
 * run's statistics. */
static double maize_run(struct mz_side *m, int n, double *build_ns, mz_run_stats *st) {
  mz_graph *g = NULL;
  uint64_t b0 = now_ns();
  if (mz_graph_create(m->rt, &g) != MZ_OK) exit(1);
  mz_op *a = mz_f32(g, 1.0f), *last = NULL;
  for (int i = 0; i < n; i++) last = mz_apply(g, m->k, mz_zip(g, 2, (mz_op *[]){a, mz_value(g, m->y)}), NULL);
  uint64_t t0 = now_ns();
  mz_future *f = NULL;
  int rc = mz_schedule(g, last, "single", &f);
  if (rc == MZ_OK) rc = mz_future_wait(f);
  uint64_t t1 = now_ns();
  if (rc != MZ_OK) {
    fprintf(stderr, "cuda_chain: maize run failed: %s: %s\n", mz_err_name(rc),
            f ? mz_future_message(f) : mz_runtime_last_error(m->rt));
    exit(1);
  }
  if (st) mz_future_stats(f, st);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  if (build_ns) *build_ns = (double)(t0 - b0) / n;
  return (double)(t1 - t0) / n;
}

int main(int argc, char **argv) {
  int n = 10000, reps = 5;
  static const struct option longopts[] = {{"kernels", required_argument, NULL, 'n'},
                                            {"reps", required_argument, NULL, 'r'},
                                            {"quick", no_argument, NULL, 'q'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-cuda-chain";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":n:r:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'n':
      if (!bench_arg_long(prog, "-n", optarg, 1, 10000000, &num)) return 2;
      n = (int)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, MAX_REPS, &num)) return 2;
      reps = (int)num;
      break;
    case 'q': n = 1000, reps = 1; break;
    case 'h': printf("usage: %s [-n|--kernels N] [-r|--reps R] [--quick]\n", prog); return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;

  struct mz__cuda_api api_s, *api = &api_s;
  char why[512];
  int count = 0;
  CUresult r = CUDA_ERROR_NO_DEVICE;
  if (mz__cuda_load(NULL, api, why, sizeof why) == MZ_OK) {
    r = api->Init(0);
    if (r == CUDA_SUCCESS) r = api->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS) mz__cuda_strerror(api, r, why, sizeof why);
    else if (count == 0) snprintf(why, sizeof why, "no device");
  }
  if (count == 0) {
    printf("cuda_chain: skipped: no CUDA driver or GPU on this machine (%s)\n", why);
    printf("BENCH cuda.chain skipped=1\n");
    return 0;
  }

  const char *ptx_path = getenv("MZ_KERNELS_PTX");
  if (!ptx_path || !*ptx_path) ptx_path = MZ_KERNELS_PTX;
  char *ptx = bench_read_file(ptx_path);
  if (!ptx) {
    fprintf(stderr, "cuda_chain: cannot read %s\n", ptx_path);
    return 1;
  }

  struct raw w;
  raw_init(&w, api, ptx);

  struct mz_side m = {0};
  mz_runtime_config cfg = {.devices = "cuda:0", .policy = "single", .cuda_streams = 1};
  int rc = mz_runtime_create(&cfg, &m.rt);
  if (rc != MZ_OK) {
    fprintf(stderr, "cuda_chain: mz_runtime_create: %s\n", mz_err_name(rc));
    return 1;
  }
  mz_kernel_spec spec = {
      .name = "scale",
      .params = "f32 a, inout f32[] y, u64 n = sizeof(y)",
      .cuda = {.format = MZ_CODE_PTX, .path = ptx_path},
  };
  float h[ELEMS];
  for (int i = 0; i < ELEMS; i++) h[i] = 1.0f;
  if (mz_kernel_create(m.rt, &spec, &m.k) != MZ_OK ||
      mz_buffer_create(m.rt, MZ_F32, 1, (size_t[]){ELEMS}, h, &m.y) != MZ_OK) {
    fprintf(stderr, "cuda_chain: setup: %s\n", mz_runtime_last_error(m.rt));
    return 1;
  }

  mz_device_info info = {.name = "?"};
  for (unsigned i = 0; i < mz_runtime_device_count(m.rt); i++) {
    mz_device_get_info(mz_runtime_device(m.rt, i), &info);
    if (info.kind == MZ_DEVICE_CUDA) break;
  }
  int drv = 0;
  api->DriverGetVersion(&drv);
  printf("cuda_chain: %s (cc %d.%d, %u SMs), driver %d.%d, %d kernels of %d floats, %d reps\n",
         info.name, info.cc_major, info.cc_minor, info.compute_units, drv / 1000, drv % 1000 / 10, n,
         ELEMS, reps);

  /* Warm-up: module JIT, first allocations, the copy of y to the device. */
  raw_run(&w, n / 10 + 1);
  maize_run(&m, n / 10 + 1, NULL, NULL);

  double vm[MAX_REPS], vr[MAX_REPS], vb[MAX_REPS];
  mz_run_stats st = {0};
  for (int i = 0; i < reps; i++) {
    vr[i] = raw_run(&w, n);
    vm[i] = maize_run(&m, n, &vb[i], &st);
    printf("  rep %d: maize %.0f ns/op, raw %.0f ns/op, build %.0f ns/op, %llu callbacks, %llu batches\n",
           i, vm[i], vr[i], vb[i], (unsigned long long)st.callbacks, (unsigned long long)st.batches);
  }
  double mm = median(vm, reps), mr = median(vr, reps), mb = median(vb, reps);
  printf("BENCH cuda.chain maize_ns=%.0f raw_ns=%.0f ratio=%.3f callbacks=%llu batches=%llu ops=%d "
         "build_ns=%.0f\n",
         mm, mr, mm / mr, (unsigned long long)st.callbacks, (unsigned long long)st.batches, n, mb);

  mz_buffer_release(m.y);
  mz_kernel_destroy(m.k);
  mz_runtime_destroy(m.rt);
  raw_fini(&w);
  free(ptx);
  /* The driver stays loaded, as the runtime's does (see cuda_loader.h). */
  return 0;
}
