/* Distributed graphs over MPI (include/maize/mpi.h): run under mpirun with
 * any number of ranks, with one rank, or without mpirun at all.  Each case
 * checks its results against a serial reference that every rank computes
 * itself, on the values the rank owns, and all ranks agree on the verdict
 * (an MPI_Allreduce when MPI runs), so every rank exits with the same code.
 *
 *   stencil    a periodic 1D three-point stencil over tiles in blocks:
 *              halo values cross ranks every step
 *   gemm       tiled C += A B over 2D block-cyclic tiles (A and B tiles are
 *              sent once per rank that needs them, then kept)
 *   random     random DAGs: random owners, random inputs, some tasks pinned
 *              to a rank other than the owner, values sent home at the end
 *   failure    a task failing on rank 1 cancels its dependents on rank 0,
 *              an independent branch finishes, every rank's wait returns
 *              MZ_EKERNEL
 *   rerun      one stencil graph run three times: the same transfers each
 *              time, the result of three times the steps
 *   readers    a received value read by a task, then updated in place by
 *              one pinned to the receiving rank, then sent home: small and
 *              large (over the folded-send limit) buffers, and a reader
 *              whose kernel cannot be wrapped; run twice
 *   run-wait   mz_dgraph_run_wait: the stencil, the failure and the
 *              dropped large message with it (alone and between runs of
 *              mz_dgraph_run and mz_dgraph_wait on the same graph); where
 *              it is self-driven (MPI_THREAD_MULTIPLE, MZ_MPI_SELF not 0)
 *              the calling thread runs tasks of its run, else it never does
 *   api        bad arguments return errors, never crash
 *
 * Not a Criterion test: Criterion forks a process per test, and MPI may be
 * initialized once per process, by the process mpirun started. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <mpi.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maize.h"
#include "maize/mpi.h"
#include "threads.h"

static int failures;
static int myrank;
/* The thread that calls main, and the stencil tasks run on it. */
static pthread_t main_thread;
static atomic_int on_main;

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", myrank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
      failures++;                                                         \
    }                                                                     \
  } while (0)

/* Every rank's verdict: true only when all ranks passed. */
static bool all_ok(bool ok) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return ok;
  int mine = ok, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

static long long all_sum(long long v) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return v;
  long long s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

/* ---- kernels ---- */

/* o[j] = (c[j-1] + c[j] + c[j+1]) / 3 over the tile, with l's last and r's
 * first element beyond its ends. */
static int k_stencil(const mz_call *call) {
  const double *l = call->args[0].p, *c = call->args[1].p, *r = call->args[2].p;
  double *o = call->args[3].p;
  size_t w = call->shapes[1].count;
  if (pthread_equal(pthread_self(), main_thread)) atomic_fetch_add(&on_main, 1);
  for (size_t j = 0; j < w; j++) {
    double a = j ? c[j - 1] : l[w - 1], b = j + 1 < w ? c[j + 1] : r[0];
    o[j] = (a + c[j] + b) / 3.0;
  }
  return 0;
}

/* c += a b, n x n tiles. */
static int k_gemm(const mz_call *call) {
  const double *a = call->args[0].p, *b = call->args[1].p;
  double *c = call->args[2].p;
  size_t n = (size_t)call->args[3].u32;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < n; k++)
      for (size_t j = 0; j < n; j++) c[i * n + j] += a[i * n + k] * b[k * n + j];
  return 0;
}

/* o = 0.5 o + a + s b, elementwise. */
static int k_mix(const mz_call *call) {
  const double *a = call->args[0].p, *b = call->args[1].p;
  double *o = call->args[2].p;
  double s = call->args[3].f64;
  for (size_t j = 0; j < call->shapes[2].count; j++) o[j] = 0.5 * o[j] + a[j] + s * b[j];
  return 0;
}

/* o = a + 1; fails (returns 42) when f is not 0. */
static int k_maybe_fail(const mz_call *call) {
  const double *a = call->args[0].p;
  double *o = call->args[1].p;
  if (call->args[2].i32) return 42;
  for (size_t j = 0; j < call->shapes[1].count; j++) o[j] = a[j] + 1.0;
  return 0;
}

static mz_kernel *kern(mz_runtime *rt, const char *name, const char *params, mz_cpu_fn fn) {
  mz_kernel_spec s = {.name = name, .params = params, .cpu = {.fn = fn}};
  mz_kernel *k = NULL;
  int st = mz_kernel_create(rt, &s, &k);
  if (st != MZ_OK) {
    fprintf(stderr, "kernel %s: %s\n", name, mz_runtime_last_error(rt));
    exit(1);
  }
  return k;
}

static mz_darg B(mz_buffer *b) { return (mz_darg){.buf = b}; }
static mz_darg U32(uint32_t v) { return (mz_darg){.dtype = MZ_U32, .value.u32 = v}; }
static mz_darg F64(double v) { return (mz_darg){.dtype = MZ_F64, .value.f64 = v}; }
static mz_darg I32(int32_t v) { return (mz_darg){.dtype = MZ_I32, .value.i32 = v}; }

static mz_buffer *vec(mz_runtime *rt, size_t n, const double *init) {
  mz_buffer *b = NULL;
  int st = mz_buffer_create(rt, MZ_F64, 1, (size_t[]){n}, init, &b);
  if (st != MZ_OK) {
    fprintf(stderr, "buffer: %s\n", mz_runtime_last_error(rt));
    exit(1);
  }
  return b;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (1.0 + fabs(b)); }

/* Check the buffers this rank owns against ref (w doubles each). */
static bool check_owned(mz_mpi *m, mz_buffer **bufs, size_t nb, const double *ref, size_t w, const char *what) {
  bool ok = true;
  double *got = malloc(w * sizeof *got);
  for (size_t i = 0; i < nb; i++) {
    if (mz_mpi_owner(m, bufs[i]) != mz_mpi_rank(m)) continue;
    int st = mz_buffer_read(bufs[i], got, w * sizeof *got);
    CHECK(st == MZ_OK, "%s: read tile %zu: %s", what, i, mz_err_name(st));
    for (size_t j = 0; j < w && st == MZ_OK; j++)
      if (!close_to(got[j], ref[i * w + j])) {
        CHECK(0, "%s: tile %zu [%zu] = %.17g, reference %.17g", what, i, j, got[j], ref[i * w + j]);
        ok = false;
        break;
      }
    if (st != MZ_OK) ok = false;
  }
  free(got);
  return ok;
}

/* ---- stencil (also the re-run case) ---- */

static void stencil_ref(double *x, size_t nt, size_t w, unsigned steps) {
  size_t n = nt * w;
  double *y = malloc(n * sizeof *y);
  for (unsigned s = 0; s < steps; s++) {
    for (size_t j = 0; j < n; j++) y[j] = (x[(j + n - 1) % n] + x[j] + x[(j + 1) % n]) / 3.0;
    memcpy(x, y, n * sizeof *y);
  }
  free(y);
}

/* How the runs of a case are made: mz_dgraph_run then mz_dgraph_wait, or
 * mz_dgraph_run_wait every other run (the first with the pair), or every
 * run. */
enum runs { PAIR, MIXED, RUN_WAIT };
static bool use_run_wait(enum runs how, unsigned run) { return how == RUN_WAIT || (how == MIXED && run % 2); }

/* Whether mz_dgraph_run_wait runs the rank's part on the calling thread
 * here: with MPI_THREAD_MULTIPLE (not MZ_MPI_THREAD=serialized) or
 * without MPI, unless MZ_MPI_SELF=0. */
static bool self_driven(void) {
  const char *s = getenv("MZ_MPI_SELF"), *t = getenv("MZ_MPI_THREAD");
  return !(s && !strcmp(s, "0")) && !(t && !strcmp(t, "serialized"));
}

/* A run of dg made as how says for run number run: the status of the
 * run's start (MZ_OK for mz_dgraph_run_wait) in *st, the collective one
 * returned. */
static int drun(mz_dgraph *dg, const char *policy, enum runs how, unsigned run, int *st) {
  if (use_run_wait(how, run)) {
    *st = MZ_OK;
    return mz_dgraph_run_wait(dg, policy);
  }
  mz_future *f = NULL;
  *st = mz_dgraph_run(dg, policy, &f);
  int ws = mz_dgraph_wait(dg, f);
  if (ws != MZ_OK && f) fprintf(stderr, "rank %d: run %u: %s\n", myrank, run, mz_future_message(f));
  mz_future_destroy(f);
  return ws;
}

static bool case_stencil(mz_runtime *rt, mz_mpi *m, size_t nt, size_t w, unsigned steps, unsigned runs, enum runs how) {
  int size = mz_mpi_size(m);
  mz_kernel *k = kern(rt, "stencil", "in f64[] l, in f64[] c, in f64[] r, out f64[] o", k_stencil);
  double *init = malloc(nt * w * sizeof *init);
  for (size_t j = 0; j < nt * w; j++) init[j] = sin(0.1 * (double)j) + (double)(j % 7);
  mz_buffer **a = malloc(nt * sizeof *a), **b = malloc(nt * sizeof *b);
  for (size_t i = 0; i < nt; i++) {
    a[i] = vec(rt, w, init + i * w);
    b[i] = vec(rt, w, NULL);
    int o = mz_mpi_block(i, nt, size);
    CHECK(mz_mpi_register(m, a[i], o) == MZ_OK && mz_mpi_register(m, b[i], o) == MZ_OK, "register");
  }
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  /* An even number of steps ends in a, so a run can be run again. */
  for (unsigned s = 0; s < steps; s++) {
    mz_buffer **src = s % 2 ? b : a, **dst = s % 2 ? a : b;
    for (size_t i = 0; i < nt; i++) {
      mz_darg args[] = {B(src[(i + nt - 1) % nt]), B(src[i]), B(src[(i + 1) % nt]), B(dst[i])};
      mz_dgraph_apply(dg, k, 4, args, NULL, MZ_MPI_OWNER);
    }
  }
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  size_t s0 = 0, r0 = 0;
  bool ok = true;
  /* Staging: a receive of up to 64 KiB keeps its own (w doubles), a larger
   * one none (it lands in the buffer); the values sent from the tasks'
   * completions (up to 64 KiB) share blocks taken as they go out, so none
   * is held before the first run, and after any number of runs no more
   * than one block (w doubles rounded up to a power of two) per send of one
   * run: blocks not given back once sent would grow with the runs. */
  bool staged = w * sizeof(double) <= 65536;
  size_t blk = 1, sb = 0, rb = 0;
  while (blk < w * sizeof(double)) blk *= 2;
  mz_dgraph_staging(dg, &sb, &rb);
  CHECK(sb == 0, "%zu bytes of send staging before any run", sb);
  for (unsigned run = 0; run < runs; run++) {
    int st;
    bool rw = use_run_wait(how, run);
    /* RUN_WAIT: the worker parks meanwhile (it spins MZ_SPIN_US, 50 us,
     * idle), and mz_dgraph_run_wait takes its place.  MIXED: right after a
     * run of the pair, it asks the worker, still spinning, to park first
     * (no check below: on a loaded machine that may take longer than the
     * spin time, and the worker then runs the run). */
    if (rw && how == RUN_WAIT) nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    atomic_store(&on_main, 0);
    int ws = drun(dg, NULL, how, run, &st);
    CHECK(st == MZ_OK, "run %u: %s", run, mz_err_name(st));
    CHECK(ws == MZ_OK, "wait %u: %s", run, mz_err_name(ws));
    ok = ok && st == MZ_OK && ws == MZ_OK;
    /* Self-driven, the calling thread runs at least the tasks that need no
     * message (each rank's interior tiles, ready at the start, which it
     * takes before it waits on anything); else the worker runs them all. */
    int here = atomic_load(&on_main);
    if (rw && how == RUN_WAIT && self_driven() && nt >= 3 * (size_t)size) {
      CHECK(here > 0, "run %u: mz_dgraph_run_wait ran none of this rank's tasks on the calling thread", run);
      ok = ok && here > 0;
    } else if (!rw || !self_driven()) {
      CHECK(here == 0, "run %u: %d tasks ran on the calling thread", run, here);
      ok = ok && here == 0;
    }
    size_t s1, r1;
    mz_dgraph_transfers(dg, &s1, &r1);
    if (run == 0) {
      s0 = s1;
      r0 = r1;
    }
    CHECK(s1 == s0 && r1 == r0, "the plan changed between runs");
    mz_dgraph_staging(dg, &sb, &rb);
    CHECK(rb == (staged ? r1 * w * sizeof(double) : 0), "%zu bytes of receive staging for %zu receives of %zu bytes", rb,
          r1, w * sizeof(double));
    if (!staged) CHECK(sb == 0, "%zu bytes of send staging for values over 64 KiB", sb);
    CHECK(sb <= s1 * blk, "run %u: %zu bytes of send staging for %zu sends of %zu bytes", run, sb, s1, w * sizeof(double));
    if (size == 1) CHECK(sb == 0 && rb == 0, "staging with one rank");
  }
  /* Halos cross ranks: 2 per boundary per step (each way), sent as whole tiles. */
  long long nx = all_sum((long long)(s0 + r0));
  if (size > 1) CHECK(nx > 0, "no transfers with %d ranks", size);
  else CHECK(nx == 0, "transfers with one rank");
  stencil_ref(init, nt, w, steps * runs);
  mz_buffer **fin = steps % 2 ? b : a;
  ok = check_owned(m, fin, nt, init, w, "stencil") && ok;
  mz_dgraph_destroy(dg);
  for (size_t i = 0; i < nt; i++) {
    mz_buffer_release(a[i]);
    mz_buffer_release(b[i]);
  }
  free(a);
  free(b);
  free(init);
  mz_kernel_destroy(k);
  return ok;
}

/* ---- tiled GEMM over 2D block-cyclic tiles ---- */

static bool case_gemm(mz_runtime *rt, mz_mpi *m, size_t nt, size_t n) {
  int size = mz_mpi_size(m);
  int p = 1;
  while ((p + 1) * (p + 1) <= size && size % (p + 1) == 0) p++;
  int q = size / p;
  mz_kernel *k = kern(rt, "gemm", "in f64[] a, in f64[] b, inout f64[] c, u32 n", k_gemm);
  size_t tn = n * n;
  mz_buffer **A = malloc(nt * nt * sizeof *A), **Bm = malloc(nt * nt * sizeof *Bm), **C = malloc(nt * nt * sizeof *C);
  double *a0 = malloc(nt * nt * tn * sizeof *a0), *b0 = malloc(nt * nt * tn * sizeof *b0), *c0 = malloc(nt * nt * tn * sizeof *c0);
  for (size_t t = 0; t < nt * nt; t++)
    for (size_t e = 0; e < tn; e++) {
      a0[t * tn + e] = (double)((t * 7 + e * 3) % 11) - 5.0;
      b0[t * tn + e] = (double)((t * 5 + e * 13) % 9) * 0.25;
      c0[t * tn + e] = (double)(e % 4);
    }
  for (size_t i = 0; i < nt; i++)
    for (size_t j = 0; j < nt; j++) {
      size_t t = i * nt + j;
      A[t] = vec(rt, tn, a0 + t * tn);
      Bm[t] = vec(rt, tn, b0 + t * tn);
      C[t] = vec(rt, tn, c0 + t * tn);
      int o = mz_mpi_cyclic2d(i, j, p, q);
      CHECK(mz_mpi_register(m, A[t], o) == MZ_OK, "register A");
      CHECK(mz_mpi_register(m, Bm[t], o) == MZ_OK, "register B");
      CHECK(mz_mpi_register(m, C[t], o) == MZ_OK, "register C");
    }
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  for (size_t kk = 0; kk < nt; kk++)
    for (size_t i = 0; i < nt; i++)
      for (size_t j = 0; j < nt; j++) {
        mz_darg args[] = {B(A[i * nt + kk]), B(Bm[kk * nt + j]), B(C[i * nt + j]), U32((uint32_t)n)};
        mz_dgraph_apply(dg, k, 4, args, NULL, MZ_MPI_OWNER);
      }
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  mz_future *f = NULL;
  int st = mz_dgraph_run(dg, NULL, &f);
  int ws = mz_dgraph_wait(dg, f);
  CHECK(st == MZ_OK && ws == MZ_OK, "gemm run %s wait %s", mz_err_name(st), mz_err_name(ws));
  mz_future_destroy(f);
  /* Serial reference, tile by tile. */
  for (size_t i = 0; i < nt; i++)
    for (size_t j = 0; j < nt; j++)
      for (size_t kk = 0; kk < nt; kk++) {
        const double *a = a0 + (i * nt + kk) * tn, *b = b0 + (kk * nt + j) * tn;
        double *c = c0 + (i * nt + j) * tn;
        for (size_t r = 0; r < n; r++)
          for (size_t x = 0; x < n; x++)
            for (size_t y = 0; y < n; y++) c[r * n + y] += a[r * n + x] * b[x * n + y];
      }
  /* Each A tile goes at most once to each other rank of its grid row (cached). */
  size_t sends = 0, recvs = 0;
  mz_dgraph_transfers(dg, &sends, &recvs);
  CHECK(recvs <= 2 * nt * nt, "%zu receives: the cache does not work", recvs);
  bool ok = check_owned(m, C, nt * nt, c0, tn, "gemm") && st == MZ_OK && ws == MZ_OK;
  mz_dgraph_destroy(dg);
  for (size_t t = 0; t < nt * nt; t++) {
    mz_buffer_release(A[t]);
    mz_buffer_release(Bm[t]);
    mz_buffer_release(C[t]);
  }
  free(A);
  free(Bm);
  free(C);
  free(a0);
  free(b0);
  free(c0);
  mz_kernel_destroy(k);
  return ok;
}

/* ---- random DAGs ---- */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static bool case_random(mz_runtime *rt, mz_mpi *m, uint64_t seed, size_t nbuf, size_t ntask, size_t w) {
  int size = mz_mpi_size(m);
  mz_kernel *k = kern(rt, "mix", "in f64[] a, in f64[] b, inout f64[] o, f64 s", k_mix);
  uint64_t s = seed;
  double *ref = malloc(nbuf * w * sizeof *ref);
  mz_buffer **bufs = malloc(nbuf * sizeof *bufs);
  for (size_t i = 0; i < nbuf; i++) {
    for (size_t j = 0; j < w; j++) ref[i * w + j] = (double)(rng_next(&s) % 1000) / 100.0;
    bufs[i] = vec(rt, w, ref + i * w);
    CHECK(mz_mpi_register(m, bufs[i], (int)(rng_next(&s) % (uint64_t)size)) == MZ_OK, "register");
  }
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  for (size_t t = 0; t < ntask; t++) {
    size_t a = rng_next(&s) % nbuf, b = rng_next(&s) % nbuf, o = rng_next(&s) % nbuf;
    while (o == a || o == b) o = (o + 1) % nbuf;
    double sc = (double)(rng_next(&s) % 5) - 2.0;
    /* One task in four runs away from its output's owner. */
    int rank = rng_next(&s) % 4 == 0 ? (int)(rng_next(&s) % (uint64_t)size) : MZ_MPI_OWNER;
    mz_darg args[] = {B(bufs[a]), B(bufs[b]), B(bufs[o]), F64(sc)};
    mz_dgraph_apply(dg, k, 4, args, NULL, rank);
    for (size_t j = 0; j < w; j++) ref[o * w + j] = 0.5 * ref[o * w + j] + ref[a * w + j] + sc * ref[b * w + j];
  }
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  mz_future *f = NULL;
  int st = mz_dgraph_run(dg, "eager", &f);
  int ws = mz_dgraph_wait(dg, f);
  CHECK(st == MZ_OK && ws == MZ_OK, "random run %s wait %s", mz_err_name(st), mz_err_name(ws));
  mz_future_destroy(f);
  bool ok = check_owned(m, bufs, nbuf, ref, w, "random") && st == MZ_OK && ws == MZ_OK;
  mz_dgraph_destroy(dg);
  for (size_t i = 0; i < nbuf; i++) mz_buffer_release(bufs[i]);
  free(bufs);
  free(ref);
  mz_kernel_destroy(k);
  return ok;
}

/* ---- a failure on rank 1 cancels its dependents on rank 0 ---- */

/* W doubles a buffer: 8, or over 64 KiB (the receive lands in the buffer,
 * and the canceled one on rank 0 still takes its message). */
static bool case_failure(mz_runtime *rt, mz_mpi *m, size_t W, bool rw) {
  int size = mz_mpi_size(m), rank = mz_mpi_rank(m);
  int r1 = size > 1 ? 1 : 0;
  mz_kernel *kf = kern(rt, "maybe_fail", "in f64[] a, out f64[] o, i32 fail", k_maybe_fail);
  double *one = malloc(W * sizeof *one), *got = malloc(W * sizeof *got);
  if (!one || !got) exit(1);
  for (size_t j = 0; j < W; j++) one[j] = 1.0;
  /* x (rank 1) -fail-> y (rank 1) -> z (rank 0) -> v (rank 0); u (rank 0) independent. */
  mz_buffer *x = vec(rt, W, one), *y = vec(rt, W, one), *z = vec(rt, W, one), *v = vec(rt, W, one);
  mz_buffer *u = vec(rt, W, one), *u2 = vec(rt, W, one);
  CHECK(mz_mpi_register(m, x, r1) == MZ_OK && mz_mpi_register(m, y, r1) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, z, 0) == MZ_OK && mz_mpi_register(m, v, 0) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, u, 0) == MZ_OK && mz_mpi_register(m, u2, 0) == MZ_OK, "register");
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(x), B(y), I32(1)}, NULL, MZ_MPI_OWNER);  /* fails on r1 */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(y), B(z), I32(0)}, NULL, MZ_MPI_OWNER);  /* canceled on 0 */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(z), B(v), I32(0)}, NULL, MZ_MPI_OWNER);  /* canceled on 0 */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(u), B(u2), I32(0)}, NULL, MZ_MPI_OWNER); /* runs on 0 */
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  mz_future *f = NULL;
  int st = MZ_OK, ws;
  if (rw) {
    ws = mz_dgraph_run_wait(dg, NULL);
  } else {
    st = mz_dgraph_run(dg, NULL, &f);
    ws = mz_dgraph_wait(dg, f);
  }
  CHECK(st == MZ_OK, "run: %s", mz_err_name(st));
  int local = f ? mz_future_status(f) : st;
  bool ok = true;
  CHECK(ws == MZ_EKERNEL, "collective status %s, expected MZ_EKERNEL", mz_err_name(ws));
  ok = ok && ws == MZ_EKERNEL;
  if (rw) {
    /* No future: the collective status says it all. */
  } else if (rank == r1) {
    CHECK(local == MZ_EKERNEL, "rank %d's own status %s", rank, mz_err_name(local));
    ok = ok && local == MZ_EKERNEL;
  } else if (rank == 0) {
    CHECK(local == MZ_ECANCELED, "rank 0's own status %s, expected MZ_ECANCELED", mz_err_name(local));
    ok = ok && local == MZ_ECANCELED;
  }
  if (rank == 0) {
    /* The independent branch ran; the canceled ones left v unreadable. */
    CHECK(mz_buffer_read(u2, got, W * sizeof *got) == MZ_OK && got[0] == 2.0 && got[W - 1] == 2.0,
          "independent branch: %g", got[0]);
    int rs = mz_buffer_read(v, got, W * sizeof *got);
    CHECK(rs < 0, "v readable after its writer was canceled: %s", mz_err_name(rs));
    ok = ok && rs < 0;
  }
  mz_future_destroy(f);
  mz_dgraph_destroy(dg);
  mz_buffer *all[] = {x, y, z, v, u, u2};
  for (int i = 0; i < 6; i++) mz_buffer_release(all[i]);
  mz_kernel_destroy(kf);
  free(one);
  free(got);
  return ok;
}

/* ---- a receive over 64 KiB whose node is canceled still takes its message ----
 * Rank 0's first writer of y fails in the first run only; the receive node
 * of y's next value (computed on r1) writes y after it, so it is canceled
 * and never runs.  The message must still be taken and dropped: else r1's
 * send (too large to go eagerly) never completes, or the second run's
 * receive is matched with the first run's message.  r1's writer adds the
 * count of its calls, so the second run's value differs. */
static int k_fail_first(const mz_call *call) {
  atomic_int *n = call->user;
  double *o = call->args[1].p;
  if (atomic_fetch_add(n, 1) == 0) return 42;
  for (size_t j = 0; j < call->shapes[1].count; j++) o[j] = 7.0;
  return 0;
}

static int k_plus_calls(const mz_call *call) {
  atomic_int *n = call->user;
  const double *a = call->args[0].p;
  double *o = call->args[1].p;
  double c = (double)(atomic_fetch_add(n, 1) + 1);
  for (size_t j = 0; j < call->shapes[1].count; j++) o[j] = a[j] + c;
  return 0;
}

static bool case_drain(mz_runtime *rt, mz_mpi *m, size_t W, enum runs how) {
  int size = mz_mpi_size(m), rank = mz_mpi_rank(m);
  if (size < 2) return true;
  atomic_int nfail = 0, ncalls = 0;
  mz_kernel *kff = NULL, *kpc = NULL;
  mz_kernel_spec s1 = {.name = "fail_first", .params = "in f64[] a, out f64[] o", .cpu = {.fn = k_fail_first, .user = &nfail}};
  mz_kernel_spec s2 = {.name = "plus_calls", .params = "in f64[] a, out f64[] o", .cpu = {.fn = k_plus_calls, .user = &ncalls}};
  CHECK(mz_kernel_create(rt, &s1, &kff) == MZ_OK && mz_kernel_create(rt, &s2, &kpc) == MZ_OK, "kernels");
  mz_kernel *kf = kern(rt, "maybe_fail3", "in f64[] a, out f64[] o, i32 fail", k_maybe_fail);
  double *one = malloc(W * sizeof *one), *got = malloc(W * sizeof *got);
  if (!one || !got || !kff || !kpc) exit(1);
  for (size_t j = 0; j < W; j++) one[j] = 1.0;
  mz_buffer *u = vec(rt, W, one), *x = vec(rt, W, one), *y = vec(rt, W, one), *z = vec(rt, W, one);
  CHECK(mz_mpi_register(m, u, 0) == MZ_OK && mz_mpi_register(m, x, 1) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, y, 1) == MZ_OK && mz_mpi_register(m, z, 0) == MZ_OK, "register");
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  mz_dgraph_apply(dg, kff, 2, (mz_darg[]){B(u), B(y)}, NULL, 0);                    /* 0: fails in run 1 */
  mz_dgraph_apply(dg, kpc, 2, (mz_darg[]){B(x), B(y)}, NULL, MZ_MPI_OWNER);          /* 1: y = 1 + calls */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(y), B(z), I32(0)}, NULL, MZ_MPI_OWNER); /* 0: z = y + 1 */
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  size_t sends = 0, recvs = 0, rb = 1;
  mz_dgraph_transfers(dg, &sends, &recvs);
  mz_dgraph_staging(dg, NULL, &rb);
  bool ok = true;
  if (rank == 0) {
    CHECK(recvs > 0 && rb == 0, "rank 0: %zu receives, %zu bytes of receive staging", recvs, rb);
    ok = ok && recvs > 0 && rb == 0;
  }
  for (int run = 0; run < 2; run++) {
    int st;
    int ws = drun(dg, NULL, how, (unsigned)run, &st);
    int want = run == 0 ? MZ_EKERNEL : MZ_OK;
    CHECK(st == MZ_OK && ws == want, "run %d: %s, wait %s, expected %s", run, mz_err_name(st), mz_err_name(ws),
          mz_err_name(want));
    ok = ok && st == MZ_OK && ws == want;
  }
  if (rank == 0) {
    /* Run 2's value: x + 2 + 1 (run 1's message, x + 1, would give 3). */
    int rs = mz_buffer_read(z, got, W * sizeof *got);
    CHECK(rs == MZ_OK && got[0] == 4.0 && got[W - 1] == 4.0, "z %s %g, expected 4", mz_err_name(rs), got[0]);
    ok = ok && rs == MZ_OK && got[0] == 4.0;
  }
  mz_dgraph_destroy(dg);
  mz_buffer *all[] = {u, x, y, z};
  for (int i = 0; i < 4; i++) mz_buffer_release(all[i]);
  mz_kernel_destroy(kff);
  mz_kernel_destroy(kpc);
  mz_kernel_destroy(kf);
  free(one);
  free(got);
  return ok;
}

/* mz_mpi_create(rt, out) with the environment variable name set to value
 * (the setting is read when a context is created), then put back as it
 * was. */
static int mpi_create_with(mz_runtime *rt, const char *name, const char *value, mz_mpi **out) {
  const char *was = getenv(name);
  char *keep = was ? strdup(was) : NULL;
  setenv(name, value, 1);
  int rc = mz_mpi_create(rt, out);
  if (keep) setenv(name, keep, 1);
  else unsetenv(name);
  free(keep);
  return rc;
}

/* ---- no staging memory for a value sent from a task ----
 * With MZ_MPI_STAGING_MAX=0 a task on r1 whose output rank 0 reads cannot
 * stage it: the task fails with MZ_ENOMEM (the message says why), rank 0
 * gets a mark and cancels the reader, every rank's wait agrees, and an
 * independent task on rank 0 still runs.  The context has a runtime of
 * its own (the setting is read when a context is created).  The values
 * (2 KiB) are over MZ_MPI_DIRECT_MAX's default (1 KiB, sent from the
 * buffer).  With MZ_MPI_FOLD=0 a send node sends from the buffer, with no
 * staging: the runs succeed. */
static bool case_staging_limit(void) {
  mz_runtime_config cfg = {.devices = "cpu:1", .quiet = true};
  mz_runtime *rt = NULL;
  CHECK(mz_runtime_create(&cfg, &rt) == MZ_OK, "runtime");
  if (!rt) exit(1);
  mz_mpi *m = NULL;
  int cs = mpi_create_with(rt, "MZ_MPI_STAGING_MAX", "0", &m);
  CHECK(cs == MZ_OK, "mz_mpi_create with MZ_MPI_STAGING_MAX=0: %s", mz_runtime_last_error(rt));
  if (cs != MZ_OK) exit(1);
  int size = mz_mpi_size(m), rank = mz_mpi_rank(m);
  int r1 = size > 1 ? 1 : 0;
  const char *fold = getenv("MZ_MPI_FOLD");
  bool fails = size > 1 && !(fold && !strcmp(fold, "0"));
  mz_kernel *kf = kern(rt, "maybe_fail", "in f64[] a, out f64[] o, i32 fail", k_maybe_fail);
  double one[256], got[256];
  for (int j = 0; j < 256; j++) one[j] = 1.0;
  mz_buffer *x = vec(rt, 256, one), *y = vec(rt, 256, one), *z = vec(rt, 256, one), *u = vec(rt, 256, one),
            *u2 = vec(rt, 256, one);
  CHECK(mz_mpi_register(m, x, r1) == MZ_OK && mz_mpi_register(m, y, r1) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, z, 0) == MZ_OK && mz_mpi_register(m, u, 0) == MZ_OK && mz_mpi_register(m, u2, 0) == MZ_OK,
        "register");
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(x), B(y), I32(0)}, NULL, MZ_MPI_OWNER);  /* r1: y = 2, sent to 0 */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(y), B(z), I32(0)}, NULL, MZ_MPI_OWNER);  /* 0: z = 3 */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(u), B(u2), I32(0)}, NULL, MZ_MPI_OWNER); /* 0: u2 = 2 */
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  bool ok = true;
  for (int run = 0; run < 2; run++) {
    mz_future *f = NULL;
    int st = mz_dgraph_run(dg, NULL, &f);
    CHECK(st == MZ_OK, "run: %s", mz_err_name(st));
    int ws = mz_dgraph_wait(dg, f);
    int local = f ? mz_future_status(f) : st;
    int want = fails ? MZ_ENOMEM : MZ_OK;
    CHECK(ws == want, "run %d: collective status %s, expected %s", run, mz_err_name(ws), mz_err_name(want));
    ok = ok && ws == want;
    if (fails && rank == r1) {
      const char *msg = f ? mz_future_message(f) : "";
      CHECK(local == MZ_ENOMEM && strstr(msg, "MZ_MPI_STAGING_MAX"), "rank %d: %s (%s)", rank, mz_err_name(local), msg);
      ok = ok && local == MZ_ENOMEM;
    } else if (fails && rank == 0) {
      CHECK(local == MZ_ECANCELED, "rank 0's own status %s, expected MZ_ECANCELED", mz_err_name(local));
      ok = ok && local == MZ_ECANCELED;
    }
    if (rank == 0) {
      int rs = mz_buffer_read(u2, got, sizeof got);
      CHECK(rs == MZ_OK && got[0] == 2.0, "independent branch: %s %g", mz_err_name(rs), got[0]);
      ok = ok && rs == MZ_OK && got[0] == 2.0;
      rs = mz_buffer_read(z, got, sizeof got);
      if (fails) CHECK(rs < 0, "z readable after its writer was canceled: %s", mz_err_name(rs));
      else CHECK(rs == MZ_OK && got[0] == 3.0, "z %g, expected 3", got[0]);
    }
    size_t sb = 1, rb = 1;
    mz_dgraph_staging(dg, &sb, &rb);
    CHECK(sb == 0, "%zu bytes of send staging past a limit of 0", sb);
    ok = ok && sb == 0;
    mz_future_destroy(f);
  }
  mz_dgraph_destroy(dg);
  mz_buffer *all[] = {x, y, z, u, u2};
  for (int i = 0; i < 5; i++) mz_buffer_release(all[i]);
  mz_kernel_destroy(kf);
  mz_mpi_destroy(m);
  mz_runtime_destroy(rt);
  return ok;
}

/* ---- values sent from their buffers, past the eager size ----
 * With MZ_MPI_DIRECT_MAX=65536 the stencil's 32 KiB halos go from the
 * producers' buffers (no staging): past the shared memory transport's
 * eager size a send completes only once the peer takes it, and its
 * producer ends then (before that, its buffer may not change).  The
 * results are checked against the serial reference. */
static bool case_direct(void) {
  mz_runtime_config cfg = {.devices = "cpu:1", .quiet = true};
  mz_runtime *rt = NULL;
  CHECK(mz_runtime_create(&cfg, &rt) == MZ_OK, "runtime");
  if (!rt) exit(1);
  mz_mpi *m = NULL;
  int cs = mpi_create_with(rt, "MZ_MPI_DIRECT_MAX", "65536", &m);
  CHECK(cs == MZ_OK, "mz_mpi_create with MZ_MPI_DIRECT_MAX=65536: %s", mz_runtime_last_error(rt));
  if (cs != MZ_OK) exit(1);
  bool ok = case_stencil(rt, m, 2 * (size_t)mz_mpi_size(m), 4096, 6, 2, MIXED);
  mz_mpi_destroy(m);
  mz_runtime_destroy(rt);
  return ok;
}

/* ---- one received value, several readers ---- */

/* o += a, elementwise. */
static int k_addto(const mz_call *call) {
  const double *a = call->args[0].p;
  double *o = call->args[1].p;
  for (size_t j = 0; j < call->shapes[1].count; j++) o[j] += a[j];
  return 0;
}

/* clash: the reader on r1 has a parameter named as the one maize adds to
 * wrap a task (it then runs unwrapped, its receive a node). */
static bool case_readers(mz_runtime *rt, mz_mpi *m, size_t w, bool clash) {
  int size = mz_mpi_size(m), rank = mz_mpi_rank(m);
  int r1 = size > 1 ? 1 : 0;
  mz_kernel *kf = kern(rt, "plus_one", "in f64[] a, out f64[] o, i32 fail", k_maybe_fail);
  mz_kernel *ka = kern(rt, "addto", "in f64[] a, inout f64[] o", k_addto);
  mz_kernel *kr = clash ? kern(rt, "plus_one_clash", "in f64[] a, out f64[] mz_mpi_task, i32 fail", k_maybe_fail) : kf;
  double *one = malloc(w * sizeof *one), *got = malloc(w * sizeof *got);
  if (!one || !got) exit(1);
  for (size_t j = 0; j < w; j++) one[j] = 1.0;
  mz_buffer *x = vec(rt, w, one), *y = vec(rt, w, one), *a = vec(rt, w, one), *c = vec(rt, w, one);
  CHECK(mz_mpi_register(m, x, 0) == MZ_OK && mz_mpi_register(m, y, 0) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, a, r1) == MZ_OK && mz_mpi_register(m, c, r1) == MZ_OK, "register");
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(x), B(y), I32(0)}, NULL, MZ_MPI_OWNER); /* y = 2 on 0 */
  mz_dgraph_apply(dg, kr, 3, (mz_darg[]){B(y), B(a), I32(0)}, NULL, MZ_MPI_OWNER); /* a = 3 on r1: y comes */
  mz_dgraph_apply(dg, ka, 2, (mz_darg[]){B(a), B(y)}, NULL, r1);                   /* y = 5 on r1, in place */
  mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(y), B(c), I32(0)}, NULL, MZ_MPI_OWNER); /* c = 6 on r1 */
  CHECK(mz_dgraph_status(dg) == MZ_OK, "build: %s", mz_dgraph_message(dg));
  bool ok = true;
  for (int run = 0; run < 2; run++) {
    mz_future *f = NULL;
    int st = mz_dgraph_run(dg, NULL, &f);
    CHECK(st == MZ_OK, "run: %s", mz_err_name(st));
    int ws = mz_dgraph_wait(dg, f);
    CHECK(ws == MZ_OK, "run %d: %s", run, mz_err_name(ws));
    ok = ok && st == MZ_OK && ws == MZ_OK;
    mz_future_destroy(f);
    /* y went home to rank 0; a and c stay on r1. */
    struct { mz_buffer *b; int owner; double want; const char *name; } chk[] = {
        {y, 0, 5.0, "y"}, {a, r1, 3.0, "a"}, {c, r1, 6.0, "c"}};
    for (int i = 0; i < 3; i++) {
      if (rank != chk[i].owner) continue;
      int rs = mz_buffer_read(chk[i].b, got, w * sizeof *got);
      bool good = rs == MZ_OK;
      for (size_t j = 0; good && j < w; j++) good = got[j] == chk[i].want;
      CHECK(good, "run %d, %zu elements: %s is %g, expected %g (%s)", run, w, chk[i].name, got[0], chk[i].want,
            mz_err_name(rs));
      ok = ok && good;
    }
  }
  mz_dgraph_destroy(dg);
  mz_buffer *all[] = {x, y, a, c};
  for (int i = 0; i < 4; i++) mz_buffer_release(all[i]);
  mz_kernel_destroy(kf);
  mz_kernel_destroy(ka);
  if (clash) mz_kernel_destroy(kr);
  free(one);
  free(got);
  return ok;
}

/* ---- bad arguments ---- */

static bool case_api(mz_runtime *rt, mz_mpi *m) {
  int f0 = failures;
  mz_kernel *kf = kern(rt, "maybe_fail2", "in f64[] a, out f64[] o, i32 fail", k_maybe_fail);
  mz_buffer *x = vec(rt, 4, NULL), *y = vec(rt, 4, NULL);
  /* The communication thread, where there is one (under a launcher). */
  int want = getenv("OMPI_COMM_WORLD_SIZE") ? 1 : 0;
  CHECK(test_threads_named("mz-mpi") == want, "%d threads named mz-mpi, not %d", test_threads_named("mz-mpi"), want);
  CHECK(mz_mpi_register(NULL, x, 0) == MZ_EINVAL, "NULL context");
  CHECK(mz_mpi_register(m, NULL, 0) == MZ_EINVAL, "NULL buffer");
  CHECK(mz_mpi_register(m, x, mz_mpi_size(m)) == MZ_ERANGE, "owner past the ranks");
  CHECK(mz_mpi_register(m, x, -1) == MZ_ERANGE, "negative owner");
  CHECK(mz_mpi_register(m, x, 0) == MZ_OK, "register");
  CHECK(mz_mpi_register(m, x, 0) == MZ_EINVAL, "registered twice");
  CHECK(mz_mpi_owner(m, y) == MZ_EINVAL, "owner of an unregistered buffer");
  CHECK(mz_mpi_block(0, 0, 2) == MZ_EINVAL && mz_mpi_block(3, 3, 2) == MZ_EINVAL, "block bounds");
  CHECK(mz_mpi_block(0, 5, 2) == 0 && mz_mpi_block(2, 5, 2) == 0 && mz_mpi_block(3, 5, 2) == 1, "block split");
  CHECK(mz_mpi_cyclic(5, 2) == 1 && mz_mpi_cyclic(1, 0) == MZ_EINVAL, "cyclic");
  CHECK(mz_mpi_cyclic2d(3, 5, 2, 2) == 3 && mz_mpi_cyclic2d(0, 0, 0, 1) == MZ_EINVAL, "cyclic2d");
  mz_dgraph *dg = NULL;
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  CHECK(mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(x), B(y), I32(0)}, NULL, MZ_MPI_OWNER) == NULL &&
            mz_dgraph_status(dg) == MZ_EINVAL,
        "unregistered buffer: %s", mz_err_name(mz_dgraph_status(dg)));
  mz_dgraph_destroy(dg);
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  CHECK(mz_dgraph_apply(dg, kf, 2, (mz_darg[]){B(x), B(x)}, NULL, MZ_MPI_OWNER) == NULL &&
            mz_dgraph_status(dg) == MZ_EINVAL,
        "wrong argument count");
  mz_dgraph_destroy(dg);
  CHECK(mz_dgraph_create(m, &dg) == MZ_OK, "dgraph_create");
  CHECK(mz_dgraph_apply(dg, kf, 3, (mz_darg[]){B(x), B(x), I32(0)}, NULL, 99) == NULL &&
            mz_dgraph_status(dg) == MZ_ERANGE,
        "rank out of range");
  /* A graph with a sticky error does not run, and the wait agrees. */
  mz_future *f = NULL;
  CHECK(mz_dgraph_run(dg, NULL, &f) == MZ_ERANGE && f == NULL, "run of a failed graph");
  CHECK(mz_dgraph_wait(dg, NULL) == MZ_ERANGE, "wait after a failed run");
  /* So does one made with mz_dgraph_run_wait, on every rank. */
  CHECK(mz_dgraph_run_wait(dg, NULL) == MZ_ERANGE, "run_wait of a failed graph");
  mz_dgraph_destroy(dg);
  CHECK(mz_dgraph_run_wait(NULL, NULL) == MZ_EINVAL, "NULL graph run_wait");
  CHECK(mz_dgraph_run(NULL, NULL, &f) == MZ_EINVAL, "NULL graph");
  CHECK(mz_dgraph_wait(NULL, NULL) == MZ_EINVAL, "NULL graph wait");
  CHECK(mz_mpi_create(NULL, NULL) == MZ_EINVAL, "NULL runtime");
  /* Bad settings fail before MPI is touched (a second context is refused
   * then, not created). */
  static const char *const bad[][2] = {{"MZ_MPI_FOLD", "2"}, {"MZ_MPI_FOLD", "yes"}, {"MZ_MPI_THREAD", "funneled"},
                                       {"MZ_MPI_SPIN_US", "-1"}, {"MZ_MPI_STAGING_MAX", "-1"},
                                       {"MZ_MPI_STAGING_MAX", "4k"}, {"MZ_MPI_DIRECT_MAX", "65537"},
                                       {"MZ_MPI_DIRECT_MAX", "-1"},       {"MZ_MPI_RECV_WINDOW", "0"},
                                       {"MZ_MPI_RECV_WINDOW", "-3"},      {"MZ_MPI_RECV_WINDOW", "8x"},
                                       {"MZ_MPI_SELF", "2"},              {"MZ_MPI_SELF", "on"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *was = getenv(bad[i][0]);
    char *keep = was ? strdup(was) : NULL;
    setenv(bad[i][0], bad[i][1], 1);
    mz_mpi *m2 = NULL;
    CHECK(mz_mpi_create(rt, &m2) == MZ_EINVAL && m2 == NULL, "%s=%s accepted", bad[i][0], bad[i][1]);
    CHECK(strstr(mz_runtime_last_error(rt), bad[i][0]) != NULL, "message: %s", mz_runtime_last_error(rt));
    if (keep) setenv(bad[i][0], keep, 1);
    else unsetenv(bad[i][0]);
    free(keep);
  }
  mz_dgraph_destroy(NULL);
  mz_mpi_destroy(NULL);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_kernel_destroy(kf);
  return failures == f0;
}

int main(void) {
  mz_runtime_config cfg = {.devices = "cpu:1", .quiet = true};
  mz_runtime *rt = NULL;
  if (mz_runtime_create(&cfg, &rt) != MZ_OK) {
    fprintf(stderr, "runtime: %s\n", mz_runtime_last_error(NULL));
    return 1;
  }
  mz_mpi *m = NULL;
  int st = mz_mpi_create(rt, &m);
  if (st != MZ_OK) {
    fprintf(stderr, "mz_mpi_create: %s\n", mz_runtime_last_error(rt));
    return 1;
  }
  myrank = mz_mpi_rank(m);
  main_thread = pthread_self();
  int size = mz_mpi_size(m);
  struct { const char *name; bool ok; } res[16];
  int nres = 0;
  res[nres].name = "stencil";
  res[nres++].ok = all_ok(case_stencil(rt, m, 4 * (size_t)size, 16, 6, 1, PAIR));
  res[nres].name = "gemm";
  res[nres++].ok = all_ok(case_gemm(rt, m, 4, 8));
  bool rnd = true;
  for (uint64_t seed = 1; seed <= 4; seed++) rnd = case_random(rt, m, seed * 0x9E3779B97F4A7C15ull, 12, 80, 4) && rnd;
  res[nres].name = "random";
  res[nres++].ok = all_ok(rnd);
  res[nres].name = "failure";
  res[nres++].ok = all_ok(case_failure(rt, m, 8, false) && case_failure(rt, m, 9000, false));
  res[nres].name = "rerun";
  res[nres++].ok = all_ok(case_stencil(rt, m, 2 * (size_t)size + 1, 8, 4, 3, PAIR));
  res[nres].name = "readers";
  res[nres++].ok = all_ok(case_readers(rt, m, 8, false) && case_readers(rt, m, 16384, false) && case_readers(rt, m, 8, true));
  /* Tiles over 64 KiB: the receives land in the buffers, no staging. */
  res[nres].name = "large";
  res[nres++].ok = all_ok(case_stencil(rt, m, 2 * (size_t)size, 9000, 4, 2, PAIR));
  res[nres].name = "drain";
  res[nres++].ok = all_ok(case_drain(rt, m, 9000, PAIR));
  res[nres].name = "run-wait";
  res[nres++].ok = all_ok(case_stencil(rt, m, 4 * (size_t)size, 16, 6, 3, RUN_WAIT) &&
                          case_stencil(rt, m, 4 * (size_t)size, 16, 4, 4, MIXED) &&
                          case_stencil(rt, m, 2 * (size_t)size, 9000, 4, 2, MIXED) &&
                          case_failure(rt, m, 8, true) && case_failure(rt, m, 9000, true) &&
                          case_drain(rt, m, 9000, RUN_WAIT) && case_drain(rt, m, 9000, MIXED));
  res[nres].name = "staging-limit";
  res[nres++].ok = all_ok(case_staging_limit());
  res[nres].name = "direct";
  res[nres++].ok = all_ok(case_direct());
  res[nres].name = "api";
  res[nres++].ok = all_ok(case_api(rt, m));
  bool ok = true;
  for (int i = 0; i < nres; i++) {
    if (myrank == 0) printf("%s %s (%d ranks)\n", res[i].ok ? "PASS" : "FAIL", res[i].name, size);
    ok = ok && res[i].ok;
  }
  mz_mpi_destroy(m);
  mz_runtime_destroy(rt);
  return ok && failures == 0 ? 0 : 1;
}
