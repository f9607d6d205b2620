/* DAG generators (include/maize/daggen.h).  Graphs are built through the
 * public builders only, so what they exercise is what users get. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "maize.h"
#include "maize/daggen.h"

enum { K_IN0 = 0, K_POTRF = MZ_DAG_MAXIN + 1, K_TRSM, K_SYRK, K_GEMM, K_GETRF, K_COUNT };

struct gen {
  mz_runtime *rt;
  mz_graph *g;
  mz_kernel *k[K_COUNT];
  mz_dag *d;
};

/* Every generated kernel's first argument is its flops. */
static double arg_flops(const mz_call *call) { return call->nargs ? call->args[0].f64 : 0; }

static int gen_kernel(struct gen *G, unsigned slot) {
  if (G->k[slot]) return MZ_OK;
  char name[32], params[512];
  if (slot <= MZ_DAG_MAXIN) {
    snprintf(name, sizeof name, "dag_in%u", slot);
    int n = snprintf(params, sizeof params, "f64 flops, out u8[] o");
    for (unsigned i = 0; i < slot; i++) n += snprintf(params + n, sizeof params - (size_t)n, ", in u8[] i%u", i);
  } else {
    static const char *const names[] = {"potrf", "trsm", "syrk", "gemm", "getrf"};
    static const char *const plist[] = {"f64 flops, inout u8[] a", "f64 flops, in u8[] a, inout u8[] b",
                                        "f64 flops, in u8[] a, inout u8[] c",
                                        "f64 flops, in u8[] a, in u8[] b, inout u8[] c", "f64 flops, inout u8[] a"};
    snprintf(name, sizeof name, "%s", names[slot - K_POTRF]);
    snprintf(params, sizeof params, "%s", plist[slot - K_POTRF]);
  }
  mz_kernel_spec spec = {.name = name, .params = params, .cost = {.flops = arg_flops}};
  return mz_kernel_create(G->rt, &spec, &G->k[slot]);
}

/* One node: kernel slot with flops, then buffer arguments in order. */
static mz_op *gen_node(struct gen *G, unsigned slot, double flops, mz_buffer *const bufs[], unsigned nb) {
  if (gen_kernel(G, slot)) return NULL;
  mz_op *args[MZ_DAG_MAXIN + 2];
  args[0] = mz_f64(G->g, flops);
  for (unsigned i = 0; i < nb; i++) args[i + 1] = mz_value(G->g, bufs[i]);
  G->d->nodes++;
  G->d->total_flops += flops;
  return mz_apply(G->g, G->k[slot], mz_zip(G->g, nb + 1, args), NULL);
}

static int new_buf(struct gen *G, size_t bytes, mz_buffer **b) {
  size_t dims[1] = {bytes ? bytes : 1};
  return mz_buffer_create(G->rt, MZ_U8, 1, dims, NULL, b);
}

/* splitmix64: small, fast, and the same everywhere. */
static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double urand(uint64_t *s) { return (double)(rnd(s) >> 11) / 9007199254740992.0; }

/* ---- dataflow shapes: each node writes a fresh output ---- */

struct flow {
  mz_buffer **out;  /* per node */
  mz_op **op;
  double *cp;       /* longest path ending at the node, in flops */
  bool *has_succ;
  size_t n;
};

static int flow_init(struct flow *f, size_t n) {
  f->n = n;
  f->out = calloc(n, sizeof *f->out);
  f->op = calloc(n, sizeof *f->op);
  f->cp = calloc(n, sizeof *f->cp);
  f->has_succ = calloc(n, sizeof *f->has_succ);
  return f->out && f->op && f->cp && f->has_succ ? MZ_OK : MZ_ENOMEM;
}

static void flow_free(struct flow *f) {
  for (size_t i = 0; f->out && i < f->n; i++) mz_buffer_release(f->out[i]);
  free(f->out);
  free(f->op);
  free(f->cp);
  free(f->has_succ);
}

/* Node i reads the outputs of preds[0..np). */
static int flow_node(struct gen *G, struct flow *f, size_t i, double flops, const size_t *preds, unsigned np,
                     size_t bytes) {
  int rc = new_buf(G, bytes, &f->out[i]);
  if (rc) return rc;
  mz_buffer *bufs[MZ_DAG_MAXIN + 1];
  bufs[0] = f->out[i];
  double cp = 0;
  for (unsigned k = 0; k < np; k++) {
    bufs[k + 1] = f->out[preds[k]];
    f->has_succ[preds[k]] = true;
    if (f->cp[preds[k]] > cp) cp = f->cp[preds[k]];
  }
  f->cp[i] = cp + flops;
  if (f->cp[i] > G->d->cp_flops) G->d->cp_flops = f->cp[i];
  G->d->edges += np;
  f->op[i] = gen_node(G, K_IN0 + np, flops, bufs, np + 1);
  return f->op[i] ? MZ_OK : MZ_ENOMEM;
}

static int flow_root(struct gen *G, struct flow *f) {
  size_t ns = 0;
  for (size_t i = 0; i < f->n; i++) ns += f->op[i] && !f->has_succ[i];
  mz_op **sinks = malloc((ns ? ns : 1) * sizeof *sinks);
  if (!sinks) return MZ_ENOMEM;
  ns = 0;
  for (size_t i = 0; i < f->n; i++)
    if (f->op[i] && !f->has_succ[i]) sinks[ns++] = f->op[i];
  G->d->root = mz_join(G->g, (unsigned)ns, sinks);
  free(sinks);
  return MZ_OK;
}

static int gen_random(struct gen *G, const mz_dag_params *p) {
  uint64_t seed = p->seed;
  unsigned v = p->nodes ? p->nodes : 100;
  double alpha = p->alpha > 0 ? p->alpha : 1;
  unsigned deg = p->out_degree ? p->out_degree : 3;
  double ccr = p->ccr == 0 ? 1 : p->ccr < 0 ? 0 : p->ccr;
  double beta = p->beta == 0 ? 1 : p->beta < 0 ? 0 : p->beta > 2 ? 2 : p->beta;
  double mean = p->flops > 0 ? p->flops : 1e4;
  double rs = p->ref_speed > 0 ? p->ref_speed : 1, rl = p->ref_link > 0 ? p->ref_link : 1;
  size_t bytes = (size_t)llround(ccr * mean * rl / rs);
  double sq = sqrt((double)v);
  unsigned depth = (unsigned)llround(sq / alpha);
  if (depth < 1) depth = 1;
  if (depth > v) depth = v;
  double wmean = (double)v / depth;
  /* Level sizes: uniform around the mean width, adjusted to sum to v. */
  unsigned *lvl = calloc(depth + 1, sizeof *lvl);
  if (!lvl) return MZ_ENOMEM;
  unsigned total = 0;
  for (unsigned l = 0; l < depth; l++) {
    unsigned w = (unsigned)llround(wmean * (0.5 + urand(&seed)));
    lvl[l] = w ? w : 1;
    total += lvl[l];
  }
  while (total > v) {
    unsigned l = (unsigned)(rnd(&seed) % depth);
    if (lvl[l] > 1) lvl[l]--, total--; /* ends: total >= depth and depth <= v */
  }
  while (total < v) lvl[rnd(&seed) % depth]++, total++;
  /* start[l]: the first node of level l. */
  size_t *start = calloc(depth + 1, sizeof *start);
  struct flow f = {0};
  int rc = start ? flow_init(&f, total) : MZ_ENOMEM;
  size_t *preds = calloc((size_t)total * MZ_DAG_MAXIN, sizeof *preds);
  unsigned *np = calloc(total, sizeof *np);
  if (!rc && (!preds || !np)) rc = MZ_ENOMEM;
  for (unsigned l = 0; !rc && l < depth; l++) start[l + 1] = start[l] + lvl[l];
  /* Edges: each node picks about deg successors in the next two levels. */
  for (unsigned l = 0; !rc && l + 1 < depth; l++) {
    for (size_t i = start[l]; i < start[l + 1]; i++) {
      unsigned k = 1 + (unsigned)(rnd(&seed) % (2 * deg - 1));
      size_t lo = start[l + 1], hi = start[l + 2 < depth ? l + 3 : l + 2];
      for (unsigned e = 0; e < k; e++) {
        size_t j = lo + rnd(&seed) % (hi - lo);
        bool dup = np[j] >= MZ_DAG_MAXIN;
        for (unsigned x = 0; x < np[j] && !dup; x++) dup = preds[j * MZ_DAG_MAXIN + x] == i;
        if (!dup) preds[j * MZ_DAG_MAXIN + np[j]++] = i;
      }
    }
    /* Every node of the next level has a predecessor. */
    for (size_t j = start[l + 1]; j < start[l + 2]; j++)
      if (!np[j]) preds[j * MZ_DAG_MAXIN + np[j]++] = start[l] + rnd(&seed) % lvl[l];
  }
  for (size_t i = 0; !rc && i < total; i++) {
    double flops = mean * (1 - beta / 2 + beta * urand(&seed));
    rc = flow_node(G, &f, i, flops, &preds[i * MZ_DAG_MAXIN], np[i], bytes);
  }
  if (!rc) rc = flow_root(G, &f);
  flow_free(&f);
  free(preds);
  free(np);
  free(start);
  free(lvl);
  return rc;
}

static int gen_chain(struct gen *G, const mz_dag_params *p) {
  size_t n = p->tiles ? p->tiles : 8, bytes = p->tile_bytes ? p->tile_bytes : 4096;
  double flops = p->flops > 0 ? p->flops : 1e4;
  struct flow f = {0};
  int rc = flow_init(&f, n);
  for (size_t i = 0; !rc && i < n; i++) {
    size_t prev = i - 1;
    rc = flow_node(G, &f, i, flops, &prev, i ? 1 : 0, bytes);
  }
  if (!rc) rc = flow_root(G, &f);
  flow_free(&f);
  return rc;
}

static int gen_forkjoin(struct gen *G, const mz_dag_params *p) {
  size_t w = p->tiles ? p->tiles : 8, steps = p->steps ? p->steps : 4, bytes = p->tile_bytes ? p->tile_bytes : 4096;
  double flops = p->flops > 0 ? p->flops : 1e4;
  /* Per round: the fork, w workers, and a tree of joins of at most
   * MZ_DAG_MAXIN inputs (w - 1 joins at most). */
  size_t per = 1 + w + w, n = steps * per, next = 0;
  struct flow f = {0};
  size_t *level = malloc((w + 1) * sizeof *level);
  int rc = level ? flow_init(&f, n) : MZ_ENOMEM;
  size_t last = 0;
  bool have_last = false;
  for (size_t s = 0; !rc && s < steps; s++) {
    size_t fork = next++;
    rc = flow_node(G, &f, fork, flops, &last, have_last ? 1 : 0, bytes);
    size_t nl = 0;
    for (size_t i = 0; !rc && i < w; i++) {
      level[nl++] = next;
      rc = flow_node(G, &f, next++, flops, &fork, 1, bytes);
    }
    while (!rc && nl > 1) {
      size_t out = 0;
      for (size_t i = 0; !rc && i < nl; i += MZ_DAG_MAXIN) {
        unsigned k = (unsigned)(nl - i < MZ_DAG_MAXIN ? nl - i : MZ_DAG_MAXIN);
        rc = flow_node(G, &f, next, flops, &level[i], k, bytes);
        level[out++] = next++;
      }
      nl = out;
    }
    last = level[0];
    have_last = true;
  }
  f.n = next;
  if (!rc) rc = flow_root(G, &f);
  flow_free(&f);
  free(level);
  return rc;
}

static int gen_stencil(struct gen *G, const mz_dag_params *p) {
  size_t w = p->tiles ? p->tiles : 8, steps = p->steps ? p->steps : 4, bytes = p->tile_bytes ? p->tile_bytes : 4096;
  double flops = p->flops > 0 ? p->flops : 1e4;
  struct flow f = {0};
  int rc = flow_init(&f, w * steps);
  for (size_t s = 0; !rc && s < steps; s++)
    for (size_t x = 0; !rc && x < w; x++) {
      size_t preds[3];
      unsigned np = 0;
      if (s)
        for (size_t d = x ? x - 1 : 0; d <= x + 1 && d < w; d++) preds[np++] = (s - 1) * w + d;
      rc = flow_node(G, &f, s * w + x, flops, preds, np, bytes);
    }
  if (!rc) rc = flow_root(G, &f);
  flow_free(&f);
  return rc;
}

/* ---- tiled factorizations: tiles updated in place; edges from hazards ---- */

struct tiles {
  size_t t;
  mz_buffer **a;
  double *wcp, *rcp;  /* per tile: critical path of its last writer, of its readers since */
  mz_op **last;       /* per tile: its last writer */
};

/* Critical path bookkeeping for a node reading r[] and updating w. */
static void tile_cp(struct gen *G, struct tiles *T, const size_t *r, unsigned nr, size_t w, double flops) {
  double cp = T->wcp[w] > T->rcp[w] ? T->wcp[w] : T->rcp[w];
  for (unsigned i = 0; i < nr; i++)
    if (T->wcp[r[i]] > cp) cp = T->wcp[r[i]];
  cp += flops;
  for (unsigned i = 0; i < nr; i++)
    if (cp > T->rcp[r[i]]) T->rcp[r[i]] = cp;
  T->wcp[w] = cp;
  T->rcp[w] = 0;
  if (cp > G->d->cp_flops) G->d->cp_flops = cp;
  G->d->edges += nr;
}

static int tile_op(struct gen *G, struct tiles *T, unsigned slot, double flops, const size_t *r, unsigned nr,
                   size_t w) {
  mz_buffer *bufs[4];
  for (unsigned i = 0; i < nr; i++) bufs[i] = T->a[r[i]];
  bufs[nr] = T->a[w];
  tile_cp(G, T, r, nr, w, flops);
  T->last[w] = gen_node(G, slot, flops, bufs, nr + 1);
  return T->last[w] ? MZ_OK : MZ_ENOMEM;
}

static int gen_tiled(struct gen *G, const mz_dag_params *p, bool lu) {
  size_t t = p->tiles ? p->tiles : 8, bytes = p->tile_bytes ? p->tile_bytes : 4096;
  double u = p->flops > 0 ? p->flops : 1e4;
  struct tiles T = {.t = t};
  T.a = calloc(t * t, sizeof *T.a);
  T.wcp = calloc(t * t, sizeof *T.wcp);
  T.rcp = calloc(t * t, sizeof *T.rcp);
  T.last = calloc(t * t, sizeof *T.last);
  int rc = T.a && T.wcp && T.rcp && T.last ? MZ_OK : MZ_ENOMEM;
  for (size_t i = 0; !rc && i < t * t; i++) rc = new_buf(G, bytes, &T.a[i]);
#define A(i, j) ((i) * t + (j))
  for (size_t k = 0; !rc && k < t; k++) {
    if (!lu) {
      rc = tile_op(G, &T, K_POTRF, u / 3, NULL, 0, A(k, k));
      for (size_t i = k + 1; !rc && i < t; i++) rc = tile_op(G, &T, K_TRSM, u, (size_t[]){A(k, k)}, 1, A(i, k));
      for (size_t i = k + 1; !rc && i < t; i++) {
        rc = tile_op(G, &T, K_SYRK, u, (size_t[]){A(i, k)}, 1, A(i, i));
        for (size_t j = k + 1; !rc && j < i; j++)
          rc = tile_op(G, &T, K_GEMM, 2 * u, (size_t[]){A(i, k), A(j, k)}, 2, A(i, j));
      }
    } else {
      rc = tile_op(G, &T, K_GETRF, 2 * u / 3, NULL, 0, A(k, k));
      for (size_t j = k + 1; !rc && j < t; j++) rc = tile_op(G, &T, K_TRSM, u, (size_t[]){A(k, k)}, 1, A(k, j));
      for (size_t i = k + 1; !rc && i < t; i++) rc = tile_op(G, &T, K_TRSM, u, (size_t[]){A(k, k)}, 1, A(i, k));
      for (size_t i = k + 1; !rc && i < t; i++)
        for (size_t j = k + 1; !rc && j < t; j++)
          rc = tile_op(G, &T, K_GEMM, 2 * u, (size_t[]){A(i, k), A(k, j)}, 2, A(i, j));
    }
  }
#undef A
  if (!rc) {
    /* The root: every tile's last writer (tiles never written stay out). */
    size_t n = 0;
    for (size_t i = 0; i < t * t; i++) n += T.last[i] != NULL;
    mz_op **v = malloc((n ? n : 1) * sizeof *v);
    if (!v) rc = MZ_ENOMEM;
    n = 0;
    for (size_t i = 0; v && i < t * t; i++)
      if (T.last[i]) v[n++] = T.last[i];
    if (v) G->d->root = mz_join(G->g, (unsigned)n, v);
    free(v);
  }
  for (size_t i = 0; T.a && i < t * t; i++) mz_buffer_release(T.a[i]);
  free(T.a);
  free(T.wcp);
  free(T.rcp);
  free(T.last);
  return rc;
}

/* Every numeric parameter is checked here, before any work: a
 * huge width or degree ran for minutes, and 2 * out_degree - 1 wrapped at
 * 2^31.  The bounds keep a DAG under MZ_DAG_MAXNODES nodes. */
static int check_params(mz_runtime *rt, const mz_dag_params *p) {
  const double d[] = {p->alpha, p->ccr, p->beta, p->flops, p->ref_speed, p->ref_link};
  static const char *const dn[] = {"alpha", "ccr", "beta", "flops", "ref_speed", "ref_link"};
  for (unsigned i = 0; i < sizeof d / sizeof d[0]; i++)
    if (!isfinite(d[i]) || fabs(d[i]) > 1e15)
      return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: %s = %g is not a finite value in range", dn[i], d[i]);
  if (p->alpha < 0 || p->flops < 0 || p->ref_speed < 0 || p->ref_link < 0)
    return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: alpha, flops, ref_speed and ref_link must not be negative");
  size_t bytes = p->tile_bytes ? p->tile_bytes : 4096;
  if (bytes > MZ_DAG_MAXBYTES)
    return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: tile_bytes %zu is over %llu", p->tile_bytes,
                         (unsigned long long)MZ_DAG_MAXBYTES);
  uint64_t t = p->tiles ? p->tiles : 8, steps = p->steps ? p->steps : 4, n = 0;
  switch (p->shape) {
    case MZ_DAG_RANDOM:
      n = p->nodes ? p->nodes : 100;
      if (p->out_degree > MZ_DAG_MAXDEGREE)
        return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: out_degree %u is over %u", p->out_degree,
                             (unsigned)MZ_DAG_MAXDEGREE);
      if (p->alpha > 0 && p->alpha < 1e-6)
        return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: alpha %g is under 1e-6", p->alpha);
      if (p->ccr > 0 && p->ccr * (p->flops > 0 ? p->flops : 1e4) * (p->ref_link > 0 ? p->ref_link : 1) /
                                (p->ref_speed > 0 ? p->ref_speed : 1) > (double)MZ_DAG_MAXBYTES)
        return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: ccr %g gives outputs over %llu bytes", p->ccr,
                             (unsigned long long)MZ_DAG_MAXBYTES);
      break;
    case MZ_DAG_CHAIN: n = t; break;
    case MZ_DAG_FORKJOIN: n = t > MZ_DAG_MAXNODES ? t : steps * (1 + 2 * t); break;
    case MZ_DAG_STENCIL: n = t > MZ_DAG_MAXNODES ? t : steps * t; break;
    case MZ_DAG_CHOLESKY:
    case MZ_DAG_LU: n = t > MZ_DAG_MAXNODES ? t : t * t * t; break; /* an upper bound on t^3/3 + O(t^2) */
    default: return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: unknown shape %d", (int)p->shape);
  }
  if (steps > MZ_DAG_MAXNODES || n > MZ_DAG_MAXNODES)
    return mz__set_error(rt, MZ_EINVAL, "mz_dag_generate: the parameters give over %u nodes (nodes %u, tiles %u, steps %u)",
                         (unsigned)MZ_DAG_MAXNODES, p->nodes, p->tiles, p->steps);
  return MZ_OK;
}

int mz_dag_generate(mz_runtime *rt, const mz_dag_params *p, mz_dag **out) {
  if (out) *out = NULL;
  if (!rt || !p || !out) return MZ_EINVAL;
  int bad = check_params(rt, p);
  if (bad) return bad;
  struct gen *G = calloc(1, sizeof *G);
  mz_dag *d = calloc(1, sizeof *d);
  if (!G || !d) {
    free(G);
    free(d);
    return MZ_ENOMEM;
  }
  G->rt = rt;
  G->d = d;
  d->priv = G;
  int rc = mz_graph_create(rt, &G->g);
  d->g = G->g;
  if (!rc) {
    switch (p->shape) {
      case MZ_DAG_RANDOM: rc = gen_random(G, p); break;
      case MZ_DAG_CHAIN: rc = gen_chain(G, p); break;
      case MZ_DAG_FORKJOIN: rc = gen_forkjoin(G, p); break;
      case MZ_DAG_CHOLESKY: rc = gen_tiled(G, p, false); break;
      case MZ_DAG_LU: rc = gen_tiled(G, p, true); break;
      case MZ_DAG_STENCIL: rc = gen_stencil(G, p); break;
      default: rc = MZ_EINVAL;
    }
  }
  if (!rc && mz_graph_status(G->g)) rc = mz_graph_status(G->g);
  if (rc) {
    mz_dag_destroy(d);
    return rc;
  }
  *out = d;
  return MZ_OK;
}

void mz_dag_destroy(mz_dag *d) {
  if (!d) return;
  struct gen *G = d->priv;
  mz_graph_destroy(d->g);
  for (unsigned i = 0; G && i < K_COUNT; i++) mz_kernel_destroy(G->k[i]);
  free(G);
  free(d);
}
