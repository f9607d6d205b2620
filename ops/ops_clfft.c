/* The canned FFT on OpenCL devices through clFFT; see ops/native.h for the
 * contract of a native implementation.
 *
 * A clFFT plan is bound to a context and compiles OpenCL kernels when it is
 * baked, which takes long (hundreds of ms on PoCL), so baked plans are kept
 * per kernel and device in the native state (ops/native.h: only that
 * device's submission thread touches it) and reused for the same lengths,
 * batch and direction.  The plans are destroyed with the state, when the
 * kernel is freed (before its device). */
#define CL_TARGET_OPENCL_VERSION 120
#include <clFFT.h>
#include <pthread.h>
#include <stdlib.h>

#include "native.h"

/* A handful of plans per kernel and device: a program usually transforms
 * one or two shapes. */
#define FFT_PLANS 8

struct fft_plan {
  clfftPlanHandle plan;
  cl_context ctx;
  size_t len[2], batch;
  unsigned rank;
  bool used;
};

struct fft_state {
  struct fft_plan plans[FFT_PLANS];
  unsigned next; /* the slot replaced next when all are used */
};

/* clfftSetup initialises clFFT's process-wide plan repository and must
 * come before any other call; clfftTeardown frees it (and every plan in it;
 * without it clFFT complains on stderr at exit).  Both are clFFT's global
 * state, so they are counted here process-wide, the one global of this
 * file: the first state of any runtime sets clFFT up, the last one freed
 * tears it down.  (A program that also calls clFFT itself should set it up
 * itself first: its own clfftSetup keeps the repository alive.)
 *
 * The same lock serializes every clFFT call maize makes: clFFT takes its
 * repository lock and a plan's lock in opposite orders in clfftBakePlan
 * and clfftDestroyPlan, so two devices' submission threads baking and
 * freeing plans at once could deadlock inside the library.  The calls
 * under it only enqueue (or compile a plan once), so holding it costs
 * little. */
static pthread_mutex_t clfft_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned users; /* guarded by clfft_lock */

/* Called with clfft_lock held. */
static clfftStatus user_add(void) {
  clfftStatus st = CLFFT_SUCCESS;
  if (users == 0) {
    clfftSetupData d = {.major = clfftVersionMajor, .minor = clfftVersionMinor, .patch = clfftVersionPatch};
    st = clfftSetup(&d);
  }
  if (st == CLFFT_SUCCESS) users++;
  return st;
}

/* Called with clfft_lock held. */
static void user_drop(void) {
  if (--users == 0) clfftTeardown();
}

static int fail(clfftStatus st, const char *what, char **why) {
  *why = mz__strdupf("clFFT: %s failed with status %d", what, (int)st);
  return MZ_EKERNEL;
}

static void state_free(void *p) {
  struct fft_state *s = p;
  if (!s) return;
  pthread_mutex_lock(&clfft_lock);
  for (unsigned i = 0; i < FFT_PLANS; i++)
    if (s->plans[i].used) clfftDestroyPlan(&s->plans[i].plan);
  user_drop();
  pthread_mutex_unlock(&clfft_lock);
  free(s);
}

/* A baked plan for these lengths in ctx, from the cache or made now.
 * Called with clfft_lock held. */
static int plan_for(struct fft_state *s, cl_context ctx, cl_command_queue cq, bool f64, unsigned rank,
                    const size_t len[2], size_t batch, clfftPlanHandle *out, char **why) {
  for (unsigned i = 0; i < FFT_PLANS; i++) {
    struct fft_plan *p = &s->plans[i];
    if (p->used && p->ctx == ctx && p->rank == rank && p->len[0] == len[0] && p->len[1] == len[1] &&
        p->batch == batch) {
      *out = p->plan;
      return 0;
    }
  }
  clfftPlanHandle h;
  clfftStatus st = clfftCreateDefaultPlan(&h, ctx, rank == 2 ? CLFFT_2D : CLFFT_1D, len);
  if (st != CLFFT_SUCCESS) return fail(st, "clfftCreateDefaultPlan", why);
  /* Interleaved complex, out of place, contiguous transforms one after the
   * other; the inverse is scaled by 1/N (clFFT's default, as documented in
   * ops.h). */
  size_t dist = len[0] * (rank == 2 ? len[1] : 1);
  if ((st = clfftSetPlanPrecision(h, f64 ? CLFFT_DOUBLE : CLFFT_SINGLE)) != CLFFT_SUCCESS ||
      (st = clfftSetLayout(h, CLFFT_COMPLEX_INTERLEAVED, CLFFT_COMPLEX_INTERLEAVED)) != CLFFT_SUCCESS ||
      (st = clfftSetResultLocation(h, CLFFT_OUTOFPLACE)) != CLFFT_SUCCESS ||
      (st = clfftSetPlanBatchSize(h, batch)) != CLFFT_SUCCESS ||
      (st = clfftSetPlanDistance(h, dist, dist)) != CLFFT_SUCCESS ||
      (st = clfftBakePlan(h, 1, &cq, NULL, NULL)) != CLFFT_SUCCESS) {
    clfftDestroyPlan(&h);
    return fail(st, "setting up a plan", why);
  }
  struct fft_plan *p = &s->plans[s->next];
  s->next = (s->next + 1) % FFT_PLANS;
  if (p->used) clfftDestroyPlan(&p->plan);
  *p = (struct fft_plan){.plan = h, .ctx = ctx, .len = {len[0], len[1]}, .batch = batch, .rank = rank, .used = true};
  *out = h;
  return 0;
}

/* u32 inverse, u32 rank, u64 n0, u64 n1, u64 batch, in x, out y; with
 * clfft_lock held. */
static int fft_locked(void *q, void **state, const struct mz__xarg *args, void **ev, char **why) {
  cl_command_queue cq = q;
  if (!*state) {
    clfftStatus st = user_add();
    if (st != CLFFT_SUCCESS) return fail(st, "clfftSetup", why);
    if (!(*state = calloc(1, sizeof(struct fft_state)))) {
      user_drop();
      *why = mz__strdupf("clFFT: out of memory");
      return MZ_ENOMEM;
    }
  }
  cl_context ctx;
  if (clGetCommandQueueInfo(cq, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS) {
    *why = mz__strdupf("clFFT: cannot read the queue's context");
    return MZ_EKERNEL;
  }
  unsigned rank = args[1].value.u32;
  size_t len[2] = {args[2].value.u64, args[3].value.u64};
  clfftPlanHandle h;
  int rc = plan_for(*state, ctx, cq, args[5].dtype == MZ_F64, rank, len, args[4].value.u64, &h, why);
  if (rc) return rc;
  cl_mem in = args[5].mem, out = args[6].mem;
  clfftStatus st = clfftEnqueueTransform(h, args[0].value.u32 ? CLFFT_BACKWARD : CLFFT_FORWARD, 1, &cq, 0, NULL,
                                         (cl_event *)ev, &in, &out, NULL);
  return st == CLFFT_SUCCESS ? 0 : fail(st, "clfftEnqueueTransform", why);
}

static int fft(void *q, void **state, const struct mz__xarg *args, unsigned n, void **ev, char **why) {
  pthread_mutex_lock(&clfft_lock);
  int rc = fft_locked(q, state, args, ev, why);
  pthread_mutex_unlock(&clfft_lock);
  return rc;
}

const struct mz__ocl_native mz__ocl_clfft = {.library = "clFFT", .enqueue = fft, .state_free = state_free};
