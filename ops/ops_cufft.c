/* The canned FFT on CUDA devices through cuFFT, loaded at run time
 * (devices/cuda/cuda_libs.h); see ops/native.h for the contract.
 *
 * Parameters (ops/ops.c): u32 inverse, u32 rank, u64 n0, u64 n1, u64
 * batch, in x, out y; complex numbers interleaved, n0 per row, rows of n1
 * for rank 2, transforms dist = n0 (x n1) apart.  cuFFT's layout is the
 * same (slowest dimension first), and its inverse is unscaled, so an
 * inverse is followed by the kernel mz_scale_<type> of ops_cuda.cu.
 *
 * State, per kernel and device: cuFFT plans by shape and stream (a plan
 * carries a work area, which two streams must not share while both run),
 * and the module holding the scaling kernel. */
#include <limits.h>
#include <stdlib.h>

#include "devices/cuda/cuda_libs.h"
#include "devices/cuda/cuda_loader.h"
#include "native.h"

/* Plans kept per kernel and device; past this, the oldest is dropped once
 * its stream has finished with it. */
#define MAX_PLANS 16

struct plan {
  struct plan *next;
  CUstream stream;
  unsigned rank;
  int n0, n1, batch;
  bool f64;
  cufftHandle h;
};

struct fft_state {
  struct plan *plans; /* most recent first */
  unsigned nplans;
  CUmodule mod;
  CUfunction scale[2]; /* f32, f64 */
};

static void state_free(const struct mz__cu_env *env, void *p) {
  struct fft_state *s = p;
  if (!s) return;
  for (struct plan *q = s->plans, *n; q; q = n) {
    n = q->next;
    env->fft_api->Destroy(q->h);
    free(q);
  }
  if (s->mod) env->drv->ModuleUnload(s->mod);
  free(s);
}

static int cufft_fail(cufftResult r, const char *what, char **why) {
  *why = mz__strdupf("%s failed with cuFFT status %d", what, (int)r);
  return r == CUFFT_ALLOC_FAILED ? MZ_ENOMEM : MZ_EKERNEL;
}

static int plan_for(const struct mz__cu_env *env, struct fft_state *s, unsigned rank, int n0, int n1, int batch,
                    bool f64, cufftHandle *out, char **why) {
  CUstream st = env->stream;
  struct plan **pp = &s->plans;
  for (; *pp; pp = &(*pp)->next) {
    struct plan *q = *pp;
    if (q->stream == st && q->rank == rank && q->n0 == n0 && q->n1 == n1 && q->batch == batch && q->f64 == f64) {
      *pp = q->next; /* to the front */
      q->next = s->plans;
      s->plans = q;
      *out = q->h;
      return 0;
    }
  }
  if (s->nplans >= MAX_PLANS) {
    struct plan **last = &s->plans;
    while ((*last)->next) last = &(*last)->next;
    struct plan *old = *last;
    *last = NULL;
    env->drv->StreamSynchronize(old->stream);
    env->fft_api->Destroy(old->h);
    free(old);
    s->nplans--;
  }
  struct plan *q = calloc(1, sizeof *q);
  if (!q) return MZ_ENOMEM;
  int dims[2] = {n1, n0};
  int dist = rank == 2 ? n0 * n1 : n0;
  cufftResult r = env->fft_api->PlanMany(&q->h, (int)rank, rank == 2 ? dims : dims + 1, NULL, 1, dist, NULL, 1, dist,
                                         f64 ? CUFFT_Z2Z : CUFFT_C2C, batch);
  if (r != CUFFT_SUCCESS) {
    free(q);
    return cufft_fail(r, "cufftPlanMany", why);
  }
  q->stream = st;
  q->rank = rank;
  q->n0 = n0;
  q->n1 = n1;
  q->batch = batch;
  q->f64 = f64;
  q->next = s->plans;
  s->plans = q;
  s->nplans++;
  *out = q->h;
  return 0;
}

static int enqueue(const struct mz__cu_env *env, void **state, const struct mz__xarg *args, unsigned nargs,
                   char **why) {
  const struct mz__cufft_api *f = env->fft_api;
  const struct mz__cuda_api *drv = env->drv;
  bool inv = args[0].value.u32 != 0, f64 = args[6].dtype == MZ_F64;
  unsigned rank = args[1].value.u32;
  uint64_t n0 = args[2].value.u64, n1 = args[3].value.u64, batch = args[4].value.u64;
  uint64_t dist = rank == 2 ? n0 * n1 : n0;
  if (n0 > INT_MAX || n1 > INT_MAX || batch > INT_MAX || dist > INT_MAX) {
    *why = mz__strdupf("cuFFT: a transform of %llu x %llu points, %llu of them, is beyond int sizes",
                       (unsigned long long)n0, (unsigned long long)n1, (unsigned long long)batch);
    return MZ_ESHAPE;
  }
  struct fft_state *s = *state;
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return MZ_ENOMEM;
    *state = s;
  }
  cufftHandle h;
  int rc = plan_for(env, s, rank, (int)n0, (int)n1, (int)batch, f64, &h, why);
  if (rc) return rc;
  cufftResult r = f->SetStream(h, (cudaStream_t)env->stream);
  if (r != CUFFT_SUCCESS) return cufft_fail(r, "cufftSetStream", why);
  int dir = inv ? CUFFT_INVERSE : CUFFT_FORWARD;
  if (f64) r = f->ExecZ2Z(h, args[5].mem, args[6].mem, dir);
  else r = f->ExecC2C(h, args[5].mem, args[6].mem, dir);
  if (r != CUFFT_SUCCESS) return cufft_fail(r, f64 ? "cufftExecZ2Z" : "cufftExecC2C", why);
  if (!inv) return 0;

  /* The inverse's 1/N, by a kernel of ops_cuda.cu on the same stream. */
  CUresult cr = CUDA_SUCCESS;
  if (!s->mod) {
    cr = drv->ModuleLoadDataEx(&s->mod, mz__ops_cuda_ptx, 0, NULL, NULL);
    if (cr == CUDA_SUCCESS) cr = drv->ModuleGetFunction(&s->scale[0], s->mod, "mz_scale_f32");
    if (cr == CUDA_SUCCESS) cr = drv->ModuleGetFunction(&s->scale[1], s->mod, "mz_scale_f64");
    if (cr != CUDA_SUCCESS && s->mod) {
      drv->ModuleUnload(s->mod);
      s->mod = NULL;
    }
  }
  uint64_t count = 2 * dist * batch;
  unsigned block = 256;
  uint64_t grid = (count + block - 1) / block;
  if (cr == CUDA_SUCCESS && grid > UINT_MAX) cr = CUDA_ERROR_INVALID_VALUE;
  if (cr == CUDA_SUCCESS) {
    float a32 = 1.0f / (float)dist;
    double a64 = 1.0 / (double)dist;
    CUdeviceptr y = (CUdeviceptr)(uintptr_t)args[6].mem;
    void *params[] = {f64 ? (void *)&a64 : (void *)&a32, &y, &count};
    cr = drv->LaunchKernel(s->scale[f64], (unsigned)grid, 1, 1, block, 1, 1, 0, env->stream, params, NULL);
  }
  if (cr != CUDA_SUCCESS) {
    char e[160];
    *why = mz__strdupf("scaling the inverse FFT: %s", mz__cuda_strerror(drv, cr, e, sizeof e));
    return MZ_EKERNEL;
  }
  return 0;
}

const struct mz__cu_native mz__cu_cufft = {.library = "cuFFT", .lib = MZ__CU_CUFFT, .enqueue = enqueue,
                                           .state_free = state_free};
