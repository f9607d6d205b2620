/* A distributed 1D heat stencil: the same program on every rank.
 *
 *   mpirun -np 2 ./build/examples/mpi_stencil [tiles] [width] [steps]
 *   ./build/examples/mpi_stencil             (one rank, no MPI at all)
 *
 * The rod is cut into tiles, owned by the ranks in blocks; each step
 * computes every tile from itself and its neighbours' edges.  A task runs
 * on the rank that owns the tile it writes, and the neighbour tiles it
 * reads from another rank arrive by MPI (sent as soon as they are
 * computed).  The graph is built once and run twice (the second time with
 * mz_dgraph_run_wait, which runs the rank's part on this thread).  Each rank then
 * checks the tiles it owns against a serial computation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <maize.h>
#include <maize/mpi.h>

static int heat(const mz_call *c) {
  const double *l = c->args[0].p, *x = c->args[1].p, *r = c->args[2].p;
  double *y = c->args[3].p;
  size_t w = c->shapes[1].count;
  for (size_t j = 0; j < w; j++) {
    double a = j ? x[j - 1] : l[w - 1], b = j + 1 < w ? x[j + 1] : r[0];
    y[j] = x[j] + 0.25 * (a - 2 * x[j] + b);
  }
  return 0;
}

#define TRY(call)                                                                 \
  do {                                                                            \
    int st_ = (call);                                                             \
    if (st_ != MZ_OK) {                                                           \
      fprintf(stderr, "%s: %s (%s)\n", #call, mz_err_name(st_), mz_runtime_last_error(rt)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main(int argc, char **argv) {
  size_t nt = argc > 1 ? strtoul(argv[1], NULL, 10) : 8, w = argc > 2 ? strtoul(argv[2], NULL, 10) : 1024;
  unsigned steps = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 20;
  if (nt < 1 || w < 1 || steps < 1 || steps % 2) {
    fprintf(stderr, "usage: mpi_stencil [tiles] [width] [steps, even]\n");
    return 2;
  }
  mz_runtime *rt = NULL;
  TRY(mz_runtime_create(NULL, &rt));
  mz_mpi *m = NULL;
  TRY(mz_mpi_create(rt, &m)); /* MPI_Init_thread under mpirun */
  int rank = mz_mpi_rank(m), size = mz_mpi_size(m);

  /* Every rank creates every tile and registers it with its owner. */
  double *x0 = malloc(nt * w * sizeof *x0);
  for (size_t j = 0; j < nt * w; j++) x0[j] = j < nt * w / 2 ? 1.0 : 0.0;
  mz_buffer **a = malloc(nt * sizeof *a), **b = malloc(nt * sizeof *b);
  for (size_t i = 0; i < nt; i++) {
    TRY(mz_buffer_create(rt, MZ_F64, 1, (size_t[]){w}, x0 + i * w, &a[i]));
    TRY(mz_buffer_create(rt, MZ_F64, 1, (size_t[]){w}, NULL, &b[i]));
    TRY(mz_mpi_register(m, a[i], mz_mpi_block(i, nt, size)));
    TRY(mz_mpi_register(m, b[i], mz_mpi_block(i, nt, size)));
  }
  mz_kernel *k = NULL;
  mz_kernel_spec spec = {.name = "heat", .params = "in f64[] l, in f64[] x, in f64[] r, out f64[] y", .cpu = {.fn = heat}};
  TRY(mz_kernel_create(rt, &spec, &k));

  /* The same calls on every rank; each keeps its own tasks and transfers. */
  mz_dgraph *dg = NULL;
  TRY(mz_dgraph_create(m, &dg));
  for (unsigned s = 0; s < steps; s++) {
    mz_buffer **src = s % 2 ? b : a, **dst = s % 2 ? a : b;
    for (size_t i = 0; i < nt; i++) {
      mz_darg args[] = {{.buf = src[(i + nt - 1) % nt]}, {.buf = src[i]}, {.buf = src[(i + 1) % nt]}, {.buf = dst[i]}};
      mz_dgraph_apply(dg, k, 4, args, NULL, MZ_MPI_OWNER);
    }
  }
  TRY(mz_dgraph_status(dg));
  for (int run = 0; run < 2; run++) {
    mz_future *f = NULL;
    int st = MZ_OK, all;
    if (run == 0) {
      st = mz_dgraph_run(dg, NULL, &f); /* this rank's future: other work may go on meanwhile */
      all = mz_dgraph_wait(dg, f);      /* the same status on every rank */
      mz_future_destroy(f);
    } else {
      all = mz_dgraph_run_wait(dg, NULL); /* the same, this thread running the rank's part */
    }
    if (st != MZ_OK || all != MZ_OK) {
      fprintf(stderr, "rank %d: run %d: %s\n", rank, run, mz_err_name(all));
      return 1;
    }
  }
  size_t sends, recvs;
  mz_dgraph_transfers(dg, &sends, &recvs);

  /* Serial reference for 2 * steps steps; check the tiles this rank owns. */
  double *y = malloc(nt * w * sizeof *y), *got = malloc(w * sizeof *got);
  size_t n = nt * w;
  for (unsigned s = 0; s < 2 * steps; s++) {
    for (size_t j = 0; j < n; j++) y[j] = x0[j] + 0.25 * (x0[(j + n - 1) % n] - 2 * x0[j] + x0[(j + 1) % n]);
    for (size_t j = 0; j < n; j++) x0[j] = y[j];
  }
  double err = 0;
  for (size_t i = 0; i < nt; i++) {
    if (mz_mpi_owner(m, a[i]) != rank) continue;
    TRY(mz_buffer_read(a[i], got, w * sizeof *got));
    for (size_t j = 0; j < w; j++) err = fmax(err, fabs(got[j] - x0[i * w + j]));
  }
  printf("rank %d of %d: %zu sends, %zu receives per run, max error %.3g\n", rank, size, sends, recvs, err);

  mz_dgraph_destroy(dg);
  for (size_t i = 0; i < nt; i++) {
    mz_buffer_release(a[i]);
    mz_buffer_release(b[i]);
  }
  mz_kernel_destroy(k);
  mz_mpi_destroy(m); /* MPI_Finalize: it was initialized here */
  mz_runtime_destroy(rt);
  free(a);
  free(b);
  free(x0);
  free(y);
  free(got);
  return err < 1e-12 ? 0 : 1;
}
