/* Task Bench's task graphs and kernels (see patterns.h).  Each function
 * follows the Task Bench function of the same role (core/core.cc,
 * core/core_kernel.cc, core/core_random.c); comments say where this code
 * departs from it and why. */
#include "patterns.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

static const char *const dep_names[TB_DEP_COUNT] = {
    "trivial", "no_comm", "stencil_1d", "stencil_1d_periodic", "dom",           "tree",
    "fft",     "all_to_all", "nearest", "spread",              "random_nearest",
};

static const char *const ktype_names[TB_K_COUNT] = {
    "empty", "busy_wait", "memory_bound", "compute_bound", "load_imbalance",
};

const char *tb_dep_name(tb_dep d) { return (unsigned)d < TB_DEP_COUNT ? dep_names[d] : "?"; }
const char *tb_ktype_name(tb_ktype k) { return (unsigned)k < TB_K_COUNT ? ktype_names[k] : "?"; }

int tb_dep_parse(const char *name, tb_dep *out) {
  for (int i = 0; i < TB_DEP_COUNT; i++)
    if (!strcmp(name, dep_names[i])) {
      *out = (tb_dep)i;
      return 0;
    }
  return -1;
}

int tb_ktype_parse(const char *name, tb_ktype *out) {
  for (int i = 0; i < TB_K_COUNT; i++)
    if (!strcmp(name, ktype_names[i])) {
      *out = (tb_ktype)i;
      return 0;
    }
  return -1;
}

void tb_graph_default(tb_graph *g, long index) {
  memset(g, 0, sizeof *g);
  g->graph_index = index;
  g->timesteps = 4;
  g->max_width = 4;
  g->dep = TB_TRIVIAL;
  g->radix = 3;
  g->period = -1;
  g->fraction = 0.25;
  g->kernel.type = TB_K_EMPTY;
  g->kernel.iterations = 0;
  g->kernel.samples = 16;
  g->kernel.imbalance = 0.0;
  g->output_bytes = 16;
  g->scratch_bytes = 0;
  g->fields = 0;
}

static long lmax(long a, long b) { return a > b ? a : b; }
static long lmin(long a, long b) { return a < b ? a : b; }

static int needs_period(tb_dep d) { return d == TB_SPREAD || d == TB_RANDOM_NEAREST; }

long tb_offset_at(const tb_graph *g, long t) {
  if (t < 0) return 0;
  if (g->dep == TB_DOM) return lmax(0, t + g->max_width - g->timesteps);
  return 0;
}

long tb_width_at(const tb_graph *g, long t) {
  if (t < 0) return 0;
  switch (g->dep) {
    case TB_DOM: return lmin(g->max_width, lmin(t + 1, g->timesteps - t));
    case TB_TREE: return lmin(g->max_width, 1L << lmin(t, 62));
    default: return g->max_width;
  }
}

/* ceil(log2(w)) for w >= 1, in integers (Task Bench uses the libm one). */
static long ceil_log2(long w) {
  long k = 0;
  while ((1L << k) < w) k++;
  return k;
}

long tb_max_dsets(const tb_graph *g) {
  switch (g->dep) {
    case TB_FFT: return ceil_log2(g->max_width);
    case TB_SPREAD:
    case TB_RANDOM_NEAREST: return g->period;
    default: return 1;
  }
}

long tb_dset_at(const tb_graph *g, long t) {
  long m = tb_max_dsets(g);
  /* Task Bench divides by zero for fft at width 1; one set there. */
  if (m <= 0) return 0;
  switch (g->dep) {
    case TB_FFT: return (t + m - 1) % m;
    case TB_SPREAD:
    case TB_RANDOM_NEAREST: return t % m;
    default: return 0;
  }
}

size_t tb_max_spans(const tb_graph *g) {
  switch (g->dep) {
    case TB_TRIVIAL: return 0;
    case TB_STENCIL_1D_PERIODIC:
    case TB_FFT: return 3;
    case TB_SPREAD:
    case TB_RANDOM_NEAREST: return (size_t)g->radix;
    case TB_NEAREST: return g->radix > 0 ? 1 : 0;
    default: return 1;
  }
}

/* random_nearest: the runs of included points among [lo, hi]; the hash
 * key is (graph, radix, dset, a, b), with (a, b) = (i, point) for
 * dependencies and (point, i) for reverse ones, as Task Bench does. */
static size_t random_runs(const tb_graph *g, long dset, long point, long lo, long hi, int reverse, tb_span *out) {
  size_t n = 0;
  long run = -1, i;
  for (i = lo; i <= hi; i++) {
    int64_t key[5] = {g->graph_index, g->radix, dset, reverse ? point : i, reverse ? i : point};
    double v = tb_random_uniform(key, sizeof key);
    int include = v < g->fraction || (g->radix > 0 && i == point);
    if (include) {
      if (run < 0) run = i;
    } else {
      if (run >= 0) out[n++] = (tb_span){run, i - 1};
      run = -1;
    }
  }
  if (run >= 0) out[n++] = (tb_span){run, i - 1};
  return n;
}

/* Dependencies (reverse = 0) and reverse dependencies (reverse = 1): the
 * two differ only for dom, tree, nearest (the asymmetric halves), spread
 * (the sign of the shift) and random_nearest (the hash key). */
static size_t deps_impl(const tb_graph *g, long dset, long point, int reverse, tb_span *out) {
  long w = g->max_width;
  switch (g->dep) {
    case TB_TRIVIAL: return 0;
    case TB_NO_COMM: out[0] = (tb_span){point, point}; return 1;
    case TB_STENCIL_1D: out[0] = (tb_span){lmax(0, point - 1), lmin(point + 1, w - 1)}; return 1;
    case TB_STENCIL_1D_PERIODIC: {
      size_t n = 0;
      out[n++] = (tb_span){lmax(0, point - 1), lmin(point + 1, w - 1)};
      if (point - 1 < 0) out[n++] = (tb_span){w - 1, w - 1};
      if (point + 1 >= w) out[n++] = (tb_span){0, 0};
      return n;
    }
    case TB_DOM:
      out[0] = reverse ? (tb_span){point, lmin(w - 1, point + 1)} : (tb_span){lmax(0, point - 1), point};
      return 1;
    case TB_TREE:
      if (!reverse) {
        out[0] = (tb_span){point / 2, point / 2};
        return 1;
      } else {
        long c1 = point * 2, c2 = point * 2 + 1;
        if (c1 < w && c2 < w) {
          out[0] = (tb_span){c1, c2};
          return 1;
        }
        if (c1 < w) {
          out[0] = (tb_span){c1, c1};
          return 1;
        }
        return 0;
      }
    case TB_FFT: {
      size_t n = 0;
      long d1 = point - (1L << dset), d2 = point + (1L << dset);
      if (d1 >= 0) out[n++] = (tb_span){d1, d1};
      out[n++] = (tb_span){point, point};
      if (d2 < w) out[n++] = (tb_span){d2, d2};
      return n;
    }
    case TB_ALL_TO_ALL: out[0] = (tb_span){0, w - 1}; return 1;
    case TB_NEAREST:
      if (g->radix <= 0) return 0;
      if (!reverse)
        out[0] = (tb_span){lmax(0, point - g->radix / 2), lmin(point + (g->radix - 1) / 2, w - 1)};
      else
        out[0] = (tb_span){lmax(0, point - (g->radix - 1) / 2), lmin(point + g->radix / 2, w - 1)};
      return 1;
    case TB_SPREAD:
      for (long i = 0; i < g->radix; i++) {
        long shift = i * w / g->radix + (i > 0 ? dset : 0);
        long d = reverse ? (point - shift) % w : (point + shift) % w;
        if (d < 0) d += w;
        out[i] = (tb_span){d, d};
      }
      return (size_t)g->radix;
    case TB_RANDOM_NEAREST:
      if (!reverse)
        return random_runs(g, dset, point, lmax(0, point - g->radix / 2), lmin(point + (g->radix - 1) / 2, w - 1), 0,
                           out);
      return random_runs(g, dset, point, lmax(0, point - (g->radix - 1) / 2), lmin(point + g->radix / 2, w - 1), 1,
                         out);
    default: return 0;
  }
}

size_t tb_deps(const tb_graph *g, long dset, long point, tb_span *out) { return deps_impl(g, dset, point, 0, out); }
size_t tb_rdeps(const tb_graph *g, long dset, long point, tb_span *out) { return deps_impl(g, dset, point, 1, out); }

long tb_max_inputs(const tb_graph *g) {
  switch (g->dep) {
    case TB_TRIVIAL: return 0;
    case TB_NO_COMM:
    case TB_TREE: return 1;
    case TB_DOM: return 2;
    case TB_STENCIL_1D:
    case TB_STENCIL_1D_PERIODIC:
    case TB_FFT: return lmin(3, g->max_width);
    case TB_ALL_TO_ALL: return g->max_width;
    default: return lmin(g->radix, g->max_width); /* nearest, spread, random_nearest */
  }
}

/* Spans kept on the stack by the per-task paths (no malloc per task below
 * a radix of 64). */
#define TB_STACK_SPANS 64

size_t tb_inputs(const tb_graph *g, long t, long point, long *out) {
  if (t <= 0) return 0;
  long lo = tb_offset_at(g, t - 1), hi = lo + tb_width_at(g, t - 1); /* [lo, hi) */
  tb_span sp[TB_STACK_SPANS];
  tb_span *spans = tb_max_spans(g) <= TB_STACK_SPANS ? sp : malloc(tb_max_spans(g) * sizeof *spans);
  if (!spans) return 0;
  size_t ns = tb_deps(g, tb_dset_at(g, t), point, spans), n = 0;
  for (size_t s = 0; s < ns; s++)
    for (long d = lmax(spans[s].first, lo); d <= spans[s].last && d < hi; d++) out[n++] = d;
  if (spans != sp) free(spans);
  return n;
}

static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...) {
  if (err && errsz) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* App::check's materialized-dependency checks, for one dependence set. */
static int check_dset(const tb_graph *g, long dset, char *err, size_t errsz) {
  long w = g->max_width;
  size_t ms = tb_max_spans(g) ? tb_max_spans(g) : 1;
  tb_span *spans = malloc(ms * sizeof *spans);
  unsigned char *seen = calloc((size_t)w, 1);
  /* deps[p] as a bitmap row is w*w bits; rebuild each row when needed. */
  int rc = -1;
  if (!spans || !seen) {
    fail(err, errsz, "out of memory checking the graph");
    goto out;
  }
  for (long p = 0; p < w; p++) {
    memset(seen, 0, (size_t)w);
    size_t n = tb_deps(g, dset, p, spans);
    for (size_t s = 0; s < n; s++)
      for (long d = spans[s].first; d <= spans[s].last; d++) {
        if (d < 0 || d >= w) {
          fail(err, errsz, "%s: point %ld depends on point %ld, outside the width %ld", tb_dep_name(g->dep), p, d, w);
          goto out;
        }
        if (seen[d]) {
          fail(err, errsz, "%s (radix %ld, width %ld): point %ld depends on point %ld twice", tb_dep_name(g->dep),
               g->radix, w, p, d);
          goto out;
        }
        seen[d] = 1;
      }
  }
  /* Reverse dependencies mirror dependencies: r in rdeps(p) => p in deps(r). */
  for (long p = 0; p < w; p++) {
    size_t n = tb_rdeps(g, dset, p, spans);
    for (size_t s = 0; s < n; s++)
      for (long r = spans[s].first; r <= spans[s].last; r++) {
        tb_span *ds = malloc(ms * sizeof *ds);
        if (!ds) {
          fail(err, errsz, "out of memory checking the graph");
          goto out;
        }
        size_t nd = tb_deps(g, dset, r, ds);
        int found = 0;
        for (size_t k = 0; k < nd && !found; k++) found = ds[k].first <= p && p <= ds[k].last;
        free(ds);
        if (!found) {
          fail(err, errsz, "%s: point %ld lists %ld as a reverse dependency, but %ld does not depend on %ld",
               tb_dep_name(g->dep), p, r, r, p);
          goto out;
        }
      }
  }
  rc = 0;
out:
  free(spans);
  free(seen);
  return rc;
}

/* Limits of this implementation: task ids pack (graph, timestep, point)
 * into 64 bits (8 + 28 + 28). */
#define TB_MAX_STEPS (1L << 28)
#define TB_MAX_WIDTH (1L << 28)

int tb_graph_finish(tb_graph *g, char *err, size_t errsz) {
  if (g->period < 0) g->period = needs_period(g->dep) ? 3 : 0;
  if (g->timesteps <= 0 || g->timesteps >= TB_MAX_STEPS)
    return fail(err, errsz, "-steps %ld: must be 1..%ld", g->timesteps, TB_MAX_STEPS - 1);
  if (g->max_width <= 0 || g->max_width >= TB_MAX_WIDTH)
    return fail(err, errsz, "-width %ld: must be 1..%ld", g->max_width, TB_MAX_WIDTH - 1);
  if (needs_period(g->dep) && g->period == 0)
    return fail(err, errsz, "graph type \"%s\" requires a non-zero period (specify with -period)",
                tb_dep_name(g->dep));
  if (!needs_period(g->dep) && g->period != 0)
    return fail(err, errsz, "graph type \"%s\" does not support user-configurable period", tb_dep_name(g->dep));
  if ((g->dep == TB_SPREAD || g->dep == TB_RANDOM_NEAREST) && g->radix <= 0)
    return fail(err, errsz, "graph type \"%s\" needs -radix > 0", tb_dep_name(g->dep));
  if (g->dep == TB_SPREAD) {
    long spread = (g->max_width + g->radix - 1) / g->radix;
    if (g->period > spread)
      return fail(err, errsz, "graph type \"%s\" requires a period that is at most %ld", tb_dep_name(g->dep), spread);
  }
  if (g->kernel.type == TB_K_MEMORY_BOUND) {
    if (g->scratch_bytes == 0) return fail(err, errsz, "kernel memory_bound needs -scratch > 0");
    if (g->kernel.samples <= 0) return fail(err, errsz, "kernel memory_bound needs -sample > 0");
    if (g->scratch_bytes % ((size_t)g->kernel.samples * 16))
      return fail(err, errsz, "-scratch %zu must be a multiple of 16 * -sample (%ld)", g->scratch_bytes,
                  g->kernel.samples);
  }
  if (g->scratch_bytes % 8) return fail(err, errsz, "-scratch %zu must be a multiple of 8", g->scratch_bytes);
  if (g->output_bytes < 16 || g->output_bytes % 16)
    return fail(err, errsz, "-output %zu: must be a multiple of 16 (one or more (timestep, point) pairs)",
                g->output_bytes);
  if (g->fields == 0 || g->fields > g->timesteps) g->fields = g->timesteps;
  /* App::check: dependencies are within the width, have no duplicates,
   * and reverse dependencies mirror them.  Quadratic in the width for
   * all_to_all; skipped for huge widths. */
  if (g->max_width <= 4096) {
    long m = tb_max_dsets(g);
    if (m < 1) m = 1;
    for (long d = 0; d < m; d++)
      if (check_dset(g, d, err, errsz)) return -1;
  }
  return 0;
}

/* ------------------------------------------------------------- counting */

long tb_imbalance_iterations(const tb_kernel *k, long graph_index, long t, long point) {
  int64_t seed[3] = {graph_index, t, point};
  double v = tb_random_uniform(seed, sizeof seed);
  long it = (long)round((1 + (v - 0.5) * k->imbalance) * (double)k->iterations);
  return it < 0 ? 0 : it;
}

long long tb_task_flops(const tb_graph *g, long t, long point) {
  switch (g->kernel.type) {
    case TB_K_COMPUTE_BOUND: return 2LL * 64 * g->kernel.iterations + 64;
    case TB_K_LOAD_IMBALANCE:
      return 2LL * 64 * tb_imbalance_iterations(&g->kernel, g->graph_index, t, point) + 64;
    default: return 0;
  }
}

long long tb_task_bytes(const tb_graph *g, long t, long point) {
  (void)t;
  (void)point;
  if (g->kernel.type == TB_K_MEMORY_BOUND)
    return (long long)g->scratch_bytes * g->kernel.iterations / g->kernel.samples;
  return 0;
}

/* report_timing's clamp(): an empty range is (min, min-1) or (max, max-1). */
static void clamp(long s, long e, long lo, long hi, long *os, long *oe) {
  if (e < lo) {
    *os = lo;
    *oe = lo - 1;
  } else if (s > hi) {
    *os = hi;
    *oe = hi - 1;
  } else {
    *os = lmax(s, lo);
    *oe = lmin(e, hi);
  }
}

void tb_app_totals(const tb_app *app, tb_totals *out) {
  memset(out, 0, sizeof *out);
  for (int gi = 0; gi < app->ngraphs; gi++) {
    const tb_graph *g = &app->graphs[gi];
    size_t ms = tb_max_spans(g) ? tb_max_spans(g) : 1;
    tb_span *spans = malloc(ms * sizeof *spans);
    if (!spans) return;
    for (long t = 0; t < g->timesteps; t++) {
      long off = tb_offset_at(g, t), w = tb_width_at(g, t);
      long loff = tb_offset_at(g, t - 1), lw = tb_width_at(g, t - 1);
      long dset = tb_dset_at(g, t);
      out->tasks += w;
      for (long p = off; p < off + w; p++) {
        size_t n = tb_deps(g, dset, p, spans);
        for (size_t s = 0; s < n; s++) {
          long a, b;
          clamp(spans[s].first, spans[s].last, loff, loff + lw - 1, &a, &b);
          out->deps += b - a + 1;
        }
        out->flops += tb_task_flops(g, t, p);
        out->bytes += tb_task_bytes(g, t, p);
      }
    }
    free(spans);
  }
}

void tb_app_display(FILE *f, const tb_app *app) {
  fprintf(f, "Running Task Benchmark\n");
  fprintf(f, "  Configuration:\n");
  for (int i = 0; i < app->ngraphs; i++) {
    const tb_graph *g = &app->graphs[i];
    fprintf(f, "    Task Graph %d:\n", i + 1);
    fprintf(f, "      Time Steps: %ld\n", g->timesteps);
    fprintf(f, "      Max Width: %ld\n", g->max_width);
    fprintf(f, "      Dependence Type: %s\n", tb_dep_name(g->dep));
    fprintf(f, "      Radix: %ld\n", g->radix);
    fprintf(f, "      Period: %ld\n", g->period);
    fprintf(f, "      Fraction Connected: %f\n", g->fraction);
    fprintf(f, "      Kernel:\n");
    fprintf(f, "        Type: %s\n", tb_ktype_name(g->kernel.type));
    fprintf(f, "        Iterations: %ld\n", g->kernel.iterations);
    fprintf(f, "        Samples: %ld\n", g->kernel.samples);
    fprintf(f, "        Imbalance: %f\n", g->kernel.imbalance);
    fprintf(f, "      Output Bytes: %zu\n", g->output_bytes);
    fprintf(f, "      Scratch Bytes: %zu\n", g->scratch_bytes);
    if (app->verbose > 0) {
      long *in = malloc((size_t)(tb_max_inputs(g) > 0 ? tb_max_inputs(g) : 1) * sizeof *in);
      if (!in) continue;
      for (long t = 0; t < g->timesteps; t++) {
        long off = tb_offset_at(g, t), w = tb_width_at(g, t);
        fprintf(f, "      Timestep %ld (offset %ld, width %ld, last offset %ld, last width %ld):\n", t, off, w,
                tb_offset_at(g, t - 1), tb_width_at(g, t - 1));
        fprintf(f, "        Points:");
        for (long p = off; p < off + w; p++) fprintf(f, " %ld", p);
        fprintf(f, "\n        Dependencies:\n");
        for (long p = off; p < off + w; p++) {
          fprintf(f, "          Point %ld:", p);
          size_t n = tb_inputs(g, t, p, in);
          for (size_t k = 0; k < n; k++) fprintf(f, " %ld", in[k]);
          fprintf(f, "\n");
        }
      }
      free(in);
    }
  }
}

void tb_app_report(FILE *f, const tb_app *app, double elapsed) {
  tb_totals t;
  tb_app_totals(app, &t);
  fprintf(f, "Total Tasks %lld\n", t.tasks);
  fprintf(f, "Total Dependencies %lld\n", t.deps);
  fprintf(f, "  Unable to estimate local/nonlocal dependencies\n");
  fprintf(f, "Total FLOPs %lld\n", t.flops);
  fprintf(f, "Total Bytes %lld\n", t.bytes);
  fprintf(f, "Elapsed Time %e seconds\n", elapsed);
  fprintf(f, "FLOP/s %e\n", (double)t.flops / elapsed);
  fprintf(f, "B/s %e\n", (double)t.bytes / elapsed);
  fprintf(f, "Transfer (estimated):\n");
  fprintf(f, "  Unable to estimate local/nonlocal transfer\n");
}

/* --------------------------------------------------------------- random */

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

/* MurmurHash3_x64_128 (Austin Appleby's public-domain algorithm), little
 * endian, as Task Bench's gen_bits() uses it. */
void tb_murmur3_x64_128(const void *key, size_t len, uint32_t seed, uint64_t out[2]) {
  const uint8_t *data = key;
  size_t nblocks = len / 16;
  uint64_t h1 = seed, h2 = seed;
  const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
  for (size_t i = 0; i < nblocks; i++) {
    uint64_t k1, k2;
    memcpy(&k1, data + i * 16, 8);
    memcpy(&k2, data + i * 16 + 8, 8);
    k1 *= c1;
    k1 = rotl64(k1, 31);
    k1 *= c2;
    h1 ^= k1;
    h1 = rotl64(h1, 27);
    h1 += h2;
    h1 = h1 * 5 + 0x52dce729;
    k2 *= c2;
    k2 = rotl64(k2, 33);
    k2 *= c1;
    h2 ^= k2;
    h2 = rotl64(h2, 31);
    h2 += h1;
    h2 = h2 * 5 + 0x38495ab5;
  }
  const uint8_t *tail = data + nblocks * 16;
  uint64_t k1 = 0, k2 = 0;
  size_t rem = len & 15;
  for (size_t i = rem; i > 8; i--) k2 ^= (uint64_t)tail[i - 1] << ((i - 9) * 8);
  if (rem > 8) {
    k2 *= c2;
    k2 = rotl64(k2, 33);
    k2 *= c1;
    h2 ^= k2;
  }
  for (size_t i = rem < 8 ? rem : 8; i > 0; i--) k1 ^= (uint64_t)tail[i - 1] << ((i - 1) * 8);
  if (rem > 0) {
    k1 *= c1;
    k1 = rotl64(k1, 31);
    k1 *= c2;
    h1 ^= k1;
  }
  h1 ^= (uint64_t)len;
  h2 ^= (uint64_t)len;
  h1 += h2;
  h2 += h1;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 += h2;
  h2 += h1;
  out[0] = h1;
  out[1] = h2;
}

double tb_random_uniform(const void *bytes, size_t n) {
  uint64_t h[2];
  tb_murmur3_x64_128(bytes, n, 1234567u, h);
  return (double)h[0] * 0x1.p-64;
}

/* -------------------------------------------------------------- kernels */

#define TB_MAGIC UINT64_C(0x5C4A7C8B)

void tb_prepare_scratch(void *scratch, size_t bytes) {
  uint64_t *p = scratch;
  for (size_t i = 0; i < bytes / 8; i++) p[i] = TB_MAGIC;
}

/* Keep a value alive without a store the threads would race on. */
#define TB_SINK(x) __asm__ volatile("" : : "g"(x) : "memory")

static void kernel_busy_wait(long iterations) {
  long long acc = 113;
  for (long i = 0; i < iterations; i++) acc = acc * 139 % 2147483647;
  TB_SINK(acc);
}

/* Task Bench's portable compute kernel: 64 doubles, A = A*A + A, so 2*64
 * FLOPs per iteration (the + 64 of its count is the final product). */
static void kernel_compute(long iterations) {
  double a[64];
  for (int i = 0; i < 64; i++) a[i] = 1.2345;
  for (long it = 0; it < iterations; it++)
    for (int i = 0; i < 64; i++) a[i] = a[i] * a[i] + a[i];
  double dot = 1.0;
  for (int i = 0; i < 64; i++) dot *= a[i];
  TB_SINK(dot);
}

/* Task Bench's memory kernel: scratch is `samples` samples; iteration i
 * of timestep t copies the first half of sample (t*iterations + i) %
 * samples onto its second half. */
static void kernel_memory(const tb_kernel *k, char *scratch, size_t bytes, long t) {
  size_t sb = bytes / (size_t)k->samples;
  for (long i = 0; i < k->iterations; i++) {
    long idx = (long)(((unsigned long)t * (unsigned long)k->iterations + (unsigned long)i) % (unsigned long)k->samples);
    char *s = scratch + (size_t)idx * sb;
    memcpy(s + sb / 2, s, sb / 2);
  }
  TB_SINK(scratch);
}

/* ---- busy time ---- */

/* The counter: the time-stamp counter where there is one (a read is
 * 11 ns on this project's 2-core virtual machine, a clock_gettime 26),
 * else the monotonic clock in nanoseconds. */
static uint64_t busy_tick(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

static _Atomic bool busy_enabled;
static double busy_ns_per_tick;
/* Per thread (slot taken at a thread's first task), each on a line of its
 * own: a counter every worker added to would move between their cores at
 * every task, a cost the one-thread peer does not pay.  Threads past the
 * last slot share it. */
#define BUSY_SLOTS 64
static struct {
  _Alignas(64) _Atomic uint64_t ticks;
} busy_slot[BUSY_SLOTS];
static _Atomic unsigned busy_nslots;
static _Thread_local int busy_mine = -1;

static double mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

void tb_busy_on(void) {
  if (busy_ns_per_tick == 0) {
    double a = mono_ns();
    uint64_t x = busy_tick();
    struct timespec d = {0, 20 * 1000 * 1000};
    nanosleep(&d, NULL);
    double b = mono_ns();
    uint64_t y = busy_tick();
    busy_ns_per_tick = y > x ? (b - a) / (double)(y - x) : 1;
  }
  atomic_store(&busy_enabled, true);
}

double tb_busy_ns(void) {
  uint64_t t = 0;
  for (unsigned i = 0; i < BUSY_SLOTS; i++) t += atomic_load_explicit(&busy_slot[i].ticks, memory_order_relaxed);
  return (double)t * busy_ns_per_tick;
}

static int execute_point(const tb_graph *g, long t, long point, void *output, size_t output_bytes,
                         const void *const *inputs, const size_t *input_bytes, size_t ninputs, void *scratch,
                         size_t scratch_bytes, char *err, size_t errsz);

int tb_execute_point(const tb_graph *g, long t, long point, void *output, size_t output_bytes,
                     const void *const *inputs, const size_t *input_bytes, size_t ninputs, void *scratch,
                     size_t scratch_bytes, char *err, size_t errsz) {
  if (!atomic_load_explicit(&busy_enabled, memory_order_relaxed))
    return execute_point(g, t, point, output, output_bytes, inputs, input_bytes, ninputs, scratch, scratch_bytes, err,
                         errsz);
  uint64_t t0 = busy_tick();
  int r = execute_point(g, t, point, output, output_bytes, inputs, input_bytes, ninputs, scratch, scratch_bytes, err,
                        errsz);
  if (busy_mine < 0) {
    unsigned k = atomic_fetch_add(&busy_nslots, 1);
    busy_mine = (int)(k < BUSY_SLOTS ? k : BUSY_SLOTS - 1);
  }
  atomic_fetch_add_explicit(&busy_slot[busy_mine].ticks, busy_tick() - t0, memory_order_relaxed);
  return r;
}

static int execute_point(const tb_graph *g, long t, long point, void *output, size_t output_bytes,
                         const void *const *inputs, const size_t *input_bytes, size_t ninputs, void *scratch,
                         size_t scratch_bytes, char *err, size_t errsz) {
  if (t < 0 || t >= g->timesteps)
    return fail(err, errsz, "graph %ld: timestep %ld out of range", g->graph_index, t);
  long off = tb_offset_at(g, t), w = tb_width_at(g, t);
  if (point < off || point >= off + w)
    return fail(err, errsz, "graph %ld timestep %ld: point %ld does not exist", g->graph_index, t, point);
  long lo = tb_offset_at(g, t - 1), hi = lo + tb_width_at(g, t - 1);
  long dset = tb_dset_at(g, t);
  tb_span sp[TB_STACK_SPANS];
  size_t ms = tb_max_spans(g);
  tb_span *spans = ms <= TB_STACK_SPANS ? sp : malloc(ms * sizeof *spans);
  if (!spans) return fail(err, errsz, "out of memory");
  size_t ns = t > 0 ? tb_deps(g, dset, point, spans) : 0, idx = 0;
  int rc = 0;
  for (size_t s = 0; s < ns && !rc; s++)
    for (long d = lmax(spans[s].first, lo); d <= spans[s].last && d < hi && !rc; d++) {
      if (idx >= ninputs) {
        rc = fail(err, errsz,
                  "graph %ld timestep %ld point %ld: got %zu inputs, expected more (missing point %ld of timestep "
                  "%ld)",
                  g->graph_index, t, point, ninputs, d, t - 1);
        break;
      }
      size_t ib = input_bytes ? input_bytes[idx] : g->output_bytes;
      if (ib != g->output_bytes) {
        rc = fail(err, errsz, "graph %ld timestep %ld point %ld: input %zu has %zu bytes, expected %zu",
                  g->graph_index, t, point, idx, ib, g->output_bytes);
        break;
      }
      const int64_t *in = inputs[idx];
      for (size_t i = 0; i < ib / 16; i++)
        if (in[2 * i] != t - 1 || in[2 * i + 1] != d) {
          rc = fail(err, errsz,
                    "graph %ld timestep %ld point %ld: input %zu at position %zu holds (timestep %lld point %lld), "
                    "expected (timestep %ld point %ld)",
                    g->graph_index, t, point, idx, i, (long long)in[2 * i], (long long)in[2 * i + 1], t - 1, d);
          break;
        }
      idx++;
    }
  if (spans != sp) free(spans);
  if (rc) return rc;
  if (idx != ninputs)
    return fail(err, errsz, "graph %ld timestep %ld point %ld: got %zu inputs, expected %zu", g->graph_index, t, point,
                ninputs, idx);
  if (output_bytes != g->output_bytes)
    return fail(err, errsz, "graph %ld timestep %ld point %ld: output has %zu bytes, expected %zu", g->graph_index, t,
                point, output_bytes, g->output_bytes);
  if (scratch_bytes != g->scratch_bytes)
    return fail(err, errsz, "graph %ld: scratch has %zu bytes, expected %zu", g->graph_index, scratch_bytes,
                g->scratch_bytes);
  if (scratch_bytes > 0 && *(const uint64_t *)scratch != TB_MAGIC)
    return fail(err, errsz, "graph %ld timestep %ld point %ld: scratch memory lost its magic value", g->graph_index,
                t, point);
  int64_t *out = output;
  for (size_t i = 0; i < output_bytes / 16; i++) {
    out[2 * i] = t;
    out[2 * i + 1] = point;
  }
  switch (g->kernel.type) {
    case TB_K_EMPTY: break;
    case TB_K_BUSY_WAIT: kernel_busy_wait(g->kernel.iterations); break;
    case TB_K_MEMORY_BOUND: kernel_memory(&g->kernel, scratch, scratch_bytes, t); break;
    case TB_K_COMPUTE_BOUND: kernel_compute(g->kernel.iterations); break;
    case TB_K_LOAD_IMBALANCE:
      kernel_compute(tb_imbalance_iterations(&g->kernel, g->graph_index, t, point));
      break;
    default: return fail(err, errsz, "unknown kernel type %d", (int)g->kernel.type);
  }
  return 0;
}

/* -------------------------------------------------------------- parsing */

static int parse_long(const char *flag, const char *s, long min, long *out, char *err, size_t errsz) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end) return fail(err, errsz, "invalid flag \"%s %s\": not an integer", flag, s);
  if (v < min) return fail(err, errsz, "invalid flag \"%s %ld\": must be >= %ld", flag, v, min);
  *out = v;
  return 0;
}

static int parse_double(const char *flag, const char *s, double min, double max, double *out, char *err,
                        size_t errsz) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || v != v) return fail(err, errsz, "invalid flag \"%s %s\": not a number", flag, s);
  if (v < min || v > max)
    return fail(err, errsz, "invalid flag \"%s %g\": must be >= %g and <= %g", flag, v, min, max);
  *out = v;
  return 0;
}

int tb_app_parse(tb_app *app, int argc, char **argv, char **rest, int *nrest, char *err, size_t errsz) {
  memset(app, 0, sizeof *app);
  tb_graph *g = &app->graphs[0];
  tb_graph_default(g, 0);
  app->ngraphs = 1;
  *nrest = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    long v;
    if (!strcmp(a, "-v")) {
      app->verbose++;
      continue;
    }
    if (!strcmp(a, "-and")) {
      if (app->ngraphs == TB_MAX_GRAPHS) return fail(err, errsz, "at most %d graphs (-and)", TB_MAX_GRAPHS);
      g = &app->graphs[app->ngraphs];
      tb_graph_default(g, app->ngraphs);
      app->ngraphs++;
      continue;
    }
    static const char *const valued[] = {"-steps", "-width",  "-type",   "-radix",     "-period",
                                         "-fraction", "-kernel", "-iter", "-output",  "-scratch",
                                         "-sample", "-imbalance", "-field", "-worker"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
    if (!known) {
      rest[(*nrest)++] = argv[i];
      continue;
    }
    if (i + 1 >= argc) return fail(err, errsz, "flag \"%s\" requires an argument", a);
    const char *s = argv[++i];
    int rc = 0;
    if (!strcmp(a, "-steps")) {
      if (!(rc = parse_long(a, s, 1, &v, err, errsz))) g->timesteps = v;
    } else if (!strcmp(a, "-width")) {
      if (!(rc = parse_long(a, s, 1, &v, err, errsz))) g->max_width = v;
    } else if (!strcmp(a, "-type")) {
      if (tb_dep_parse(s, &g->dep)) {
        char names[256] = "";
        for (int d = 0; d < TB_DEP_COUNT; d++) {
          strncat(names, " ", sizeof names - strlen(names) - 1);
          strncat(names, tb_dep_name((tb_dep)d), sizeof names - strlen(names) - 1);
        }
        rc = fail(err, errsz, "invalid flag \"-type %s\" (known:%s)", s, names);
      }
    } else if (!strcmp(a, "-radix")) {
      if (!(rc = parse_long(a, s, 0, &v, err, errsz))) g->radix = v;
    } else if (!strcmp(a, "-period")) {
      if (!(rc = parse_long(a, s, 0, &v, err, errsz))) g->period = v;
    } else if (!strcmp(a, "-fraction")) {
      rc = parse_double(a, s, 0, 1, &g->fraction, err, errsz);
    } else if (!strcmp(a, "-kernel")) {
      if (tb_ktype_parse(s, &g->kernel.type)) {
        char names[256] = "";
        for (int k = 0; k < TB_K_COUNT; k++) {
          strncat(names, " ", sizeof names - strlen(names) - 1);
          strncat(names, tb_ktype_name((tb_ktype)k), sizeof names - strlen(names) - 1);
        }
        rc = fail(err, errsz, "invalid flag \"-kernel %s\" (known:%s)", s, names);
      }
    } else if (!strcmp(a, "-iter")) {
      if (!(rc = parse_long(a, s, 0, &v, err, errsz))) g->kernel.iterations = v;
    } else if (!strcmp(a, "-output")) {
      if (!(rc = parse_long(a, s, 16, &v, err, errsz))) g->output_bytes = (size_t)v;
    } else if (!strcmp(a, "-scratch")) {
      if (!(rc = parse_long(a, s, 0, &v, err, errsz))) g->scratch_bytes = (size_t)v;
    } else if (!strcmp(a, "-sample")) {
      if (!(rc = parse_long(a, s, 0, &v, err, errsz))) g->kernel.samples = v;
    } else if (!strcmp(a, "-imbalance")) {
      rc = parse_double(a, s, 0, 2, &g->kernel.imbalance, err, errsz);
    } else if (!strcmp(a, "-field")) {
      if (!(rc = parse_long(a, s, 1, &v, err, errsz))) g->fields = v;
    } else if (!strcmp(a, "-worker")) {
      if (!(rc = parse_long(a, s, 1, &v, err, errsz))) app->workers = v;
    }
    if (rc) return rc;
  }
  for (int k = 0; k < app->ngraphs; k++) {
    char e2[512];
    if (tb_graph_finish(&app->graphs[k], e2, sizeof e2))
      return fail(err, errsz, "%s%s", app->ngraphs > 1 ? (k == 0 ? "graph 1: " : "a later graph: ") : "", e2);
  }
  return 0;
}

/* ----------------------------------------------------------------- METG */

static int cmp_gran_desc(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] < y[0]) - (x[0] > y[0]);
}

double tb_compute_ns_per_iter(void) {
  tb_graph g;
  tb_graph_default(&g, 0);
  g.kernel.type = TB_K_COMPUTE_BOUND;
  g.kernel.iterations = 1 << 14;
  int64_t out[2];
  char err[256];
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (tb_execute_point(&g, 0, 0, out, sizeof out, NULL, NULL, 0, NULL, 0, err, sizeof err)) return 1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)g.kernel.iterations;
    if (ns < best) best = ns;
  }
  return best > 0 ? best : 1;
}

double tb_metg(const double *gran, const double *eff, size_t n, double threshold) {
  if (n == 0) return -1;
  double (*pt)[2] = malloc(n * sizeof *pt);
  if (!pt) return -1;
  for (size_t i = 0; i < n; i++) {
    pt[i][0] = gran[i];
    pt[i][1] = eff[i];
  }
  qsort(pt, n, sizeof *pt, cmp_gran_desc); /* coarse to fine */
  double r = -1;
  /* The finest efficient point: METG is the smallest granularity that
   * still reaches the threshold, so a noisy dip at a coarser point does
   * not move it. */
  size_t i = n;
  for (size_t j = 0; j < n; j++)
    if (pt[j][1] >= threshold) i = j;
  if (i == n) goto out; /* never efficient */
  if (i + 1 == n) {
    r = -2; /* still efficient at the finest point */
    goto out;
  }
  /* pt[i] efficient, pt[i+1] not: interpolate in log(granularity). */
  double g0 = pt[i][0], e0 = pt[i][1], g1 = pt[i + 1][0], e1 = pt[i + 1][1];
  if (g0 <= 0 || g1 <= 0 || e0 == e1) {
    r = g0;
    goto out;
  }
  double f = (e0 - threshold) / (e0 - e1);
  r = exp(log(g0) + f * (log(g1) - log(g0)));
out:
  free(pt);
  return r;
}
