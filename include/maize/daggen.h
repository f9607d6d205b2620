/* maize: DAG generators, for studying policies (mostly on simulated
 * devices) and for tests and benchmarks.
 *
 * Each generator builds an ordinary maize graph of kernel nodes whose
 * kernels carry a cost for the simulator: every kernel takes its flops as
 * its first argument ("f64 flops, ...") and its mz_cost_spec reads it, so
 * nodes of one kernel may cost different amounts.  Data are u8 buffers:
 * a node writes its output (or updates tiles in place) and reads its
 * predecessors' outputs, so edges come from maize's own hazard analysis and
 * carry the bytes of the buffer they pass.  The kernels have no
 * implementation for real devices: run these graphs on "sim:" devices.
 *
 * Shapes:
 *  - MZ_DAG_RANDOM: layered random DAGs as in the HEFT paper (Topcuoglu et
 *    al. 2002): about `nodes` nodes in sqrt(nodes)/alpha levels of mean
 *    width alpha*sqrt(nodes); each node has about `out_degree` successors
 *    in the next two levels (every node below the first has at least one
 *    predecessor; in-degree at most MZ_DAG_MAXIN); node costs are uniform
 *    in flops*(1 +- beta/2); ccr sets the data size (below).
 *  - MZ_DAG_CHAIN: `tiles` nodes, each reading the previous one's output.
 *  - MZ_DAG_FORKJOIN: `steps` rounds of one node forking `tiles` nodes,
 *    joined by one node (through a tree of joins when tiles > MZ_DAG_MAXIN).
 *  - MZ_DAG_CHOLESKY: right-looking tiled Cholesky on tiles x tiles tiles
 *    (potrf flops/3, trsm flops, syrk flops, gemm 2*flops per tile).
 *  - MZ_DAG_LU: tiled LU without pivoting (getrf 2/3*flops, trsm flops,
 *    gemm 2*flops per tile).
 *  - MZ_DAG_STENCIL: a 1-D 3-point stencil, `tiles` wide, `steps` steps.
 *
 * Communication to computation ratio: relative to a reference device of
 * ref_speed GFLOP/s with a ref_link GB/s link (defaults 1 and 1), the
 * output size of a random-DAG node is ccr * flops * ref_link / ref_speed
 * bytes, so that moving it takes ccr times as long as the mean node runs.
 * Other shapes use tile_bytes. */
#ifndef MAIZE_DAGGEN_H
#define MAIZE_DAGGEN_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

#define MZ_DAG_MAXIN 12
/* Bounds mz_dag_generate checks before any work (MZ_EINVAL beyond them):
 * nodes a set of parameters may give, a random DAG's mean out-degree, and
 * the bytes of one tile or output. */
#define MZ_DAG_MAXNODES (1u << 24)
#define MZ_DAG_MAXDEGREE 1024u
#define MZ_DAG_MAXBYTES (1ull << 36)

typedef enum mz_dag_shape {
  MZ_DAG_RANDOM,
  MZ_DAG_CHAIN,
  MZ_DAG_FORKJOIN,
  MZ_DAG_CHOLESKY,
  MZ_DAG_LU,
  MZ_DAG_STENCIL,
} mz_dag_shape;

/* Zero fields take the defaults in brackets. */
typedef struct mz_dag_params {
  mz_dag_shape shape;
  unsigned nodes;       /* random: about this many nodes [100] */
  double alpha;         /* random: shape of the levels [1] */
  unsigned out_degree;  /* random: mean successors per node [3] */
  double ccr;           /* random: communication to computation ratio [1]; < 0: none */
  double beta;          /* random: spread of node costs, 0..2 [1]; < 0: none */
  unsigned tiles;       /* chain: length; fork-join, stencil: width; cholesky, lu: tiles per side [8] */
  unsigned steps;       /* fork-join: rounds; stencil: steps [4] */
  double flops;         /* the mean (random) or unit (tiled) flops of a node [1e4] */
  size_t tile_bytes;    /* bytes of a tile or output, except random DAGs [4096] */
  double ref_speed;     /* GFLOP/s of the reference device for ccr [1] */
  double ref_link;      /* GB/s of the reference link for ccr [1] */
  uint64_t seed;        /* random: the generator's seed (same seed, same DAG) */
} mz_dag_params;

/* A generated DAG: schedule root to run it all. */
typedef struct mz_dag {
  mz_graph *g;
  mz_op *root;          /* a join of the sinks */
  size_t nodes;         /* kernel nodes */
  size_t edges;         /* data edges the generator made (hazard edges not counted) */
  double total_flops;   /* sum over nodes */
  double cp_flops;      /* the longest path, in flops, ignoring transfers */
  void *priv;
} mz_dag;

/* Build a DAG on rt.  On success *out is freed by mz_dag_destroy() (which
 * also destroys the graph).  Errors: MZ_EINVAL (NULL or bad parameters),
 * MZ_ENOMEM, or a builder's error with mz_runtime_last_error() set. */
int mz_dag_generate(mz_runtime *rt, const mz_dag_params *p, mz_dag **out) MZ_WUR;

/* Free the DAG, its graph and kernels.  Runs scheduled from it finish
 * normally.  NULL is a no-op. */
void mz_dag_destroy(mz_dag *d);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
