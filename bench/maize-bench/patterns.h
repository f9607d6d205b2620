/* Task Bench's task graphs, without any runtime.
 *
 * This module describes Task Bench's dependence patterns and kernels as
 * Task Bench (StanfordLegion/task-bench, core/core.cc) defines them, so the
 * maize runner and its OpenMP and StarPU peers build the same graphs, run
 * the same kernels, count the same FLOPs and bytes, and check their inputs
 * the same way.  It has no maize dependency, so it is tested on its own.
 *
 * A graph has `timesteps` rows of at most `max_width` points.  At timestep
 * t the points offset_at(t) .. offset_at(t) + width_at(t) - 1 exist; point
 * p at t depends on the points of timestep t-1 listed by tb_deps() for the
 * dependence set dset_at(t), clipped to the points that exist at t-1
 * (tb_inputs() does both).  Each task writes output_bytes of (timestep,
 * point) pairs; a task verifies that each of its inputs holds the pairs of
 * the dependency it expects, so a runtime that wires a wrong edge fails
 * instead of being timed.
 *
 * Everything here is pure: no global state, safe from any thread. */
#ifndef MZB_PATTERNS_H
#define MZB_PATTERNS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Task Bench's dependence types (the ones maize-bench implements). */
typedef enum tb_dep {
  TB_TRIVIAL,
  TB_NO_COMM,
  TB_STENCIL_1D,
  TB_STENCIL_1D_PERIODIC,
  TB_DOM,
  TB_TREE,
  TB_FFT,
  TB_ALL_TO_ALL,
  TB_NEAREST,
  TB_SPREAD,
  TB_RANDOM_NEAREST,
  TB_DEP_COUNT
} tb_dep;

/* Task Bench's kernel types (the ones maize-bench implements). */
typedef enum tb_ktype {
  TB_K_EMPTY,
  TB_K_BUSY_WAIT,
  TB_K_MEMORY_BOUND,
  TB_K_COMPUTE_BOUND,
  TB_K_LOAD_IMBALANCE,
  TB_K_COUNT
} tb_ktype;

typedef struct tb_kernel {
  tb_ktype type;
  long iterations; /* -iter */
  long samples;    /* -sample (memory_bound) */
  double imbalance; /* -imbalance (load_imbalance), 0..2 */
} tb_kernel;

/* One task graph: Task Bench's TaskGraph, plus `fields`. */
typedef struct tb_graph {
  long graph_index;
  long timesteps;       /* -steps */
  long max_width;       /* -width */
  tb_dep dep;           /* -type */
  long radix;           /* -radix (nearest, spread, random_nearest) */
  long period;          /* -period (spread, random_nearest); -1: the default */
  double fraction;      /* -fraction (random_nearest) */
  tb_kernel kernel;
  size_t output_bytes;  /* -output, >= 16 */
  size_t scratch_bytes; /* -scratch, per worker (memory_bound) */
  long fields;          /* -field: output slots per point a runner may reuse; 0: timesteps */
} tb_graph;

/* An inclusive range of points. */
typedef struct tb_span {
  long first, last;
} tb_span;

#define TB_MAX_GRAPHS 16
/* Task Bench's App: the graphs of one run (several with -and) and the
 * worker count (-worker). */
typedef struct tb_app {
  tb_graph graphs[TB_MAX_GRAPHS];
  int ngraphs;
  long workers; /* -worker; 0: not given */
  int verbose;  /* -v */
} tb_app;

const char *tb_dep_name(tb_dep d);
const char *tb_ktype_name(tb_ktype k);
/* 0 and *out set, or -1 for an unknown name. */
int tb_dep_parse(const char *name, tb_dep *out);
int tb_ktype_parse(const char *name, tb_ktype *out);

/* Task Bench's defaults: 4 steps, width 4, trivial, radix 3, period -1,
 * fraction 0.25, kernel empty with 0 iterations and 16 samples, 16 output
 * bytes, no scratch. */
void tb_graph_default(tb_graph *g, long index);

/* Task Bench's TaskGraph methods.  Timesteps < 0 have width 0. */
long tb_offset_at(const tb_graph *g, long t);
long tb_width_at(const tb_graph *g, long t);
long tb_max_dsets(const tb_graph *g);
long tb_dset_at(const tb_graph *g, long t);
/* Upper bound on the spans tb_deps()/tb_rdeps() return. */
size_t tb_max_spans(const tb_graph *g);
/* The points (as spans) that point depends on / that depend on point, in
 * dependence set dset, before clipping to the previous timestep.  out has
 * room for tb_max_spans(g).  Returns the count. */
size_t tb_deps(const tb_graph *g, long dset, long point, tb_span *out);
size_t tb_rdeps(const tb_graph *g, long dset, long point, tb_span *out);

/* Upper bound on the inputs of one task (points tb_inputs() returns). */
long tb_max_inputs(const tb_graph *g);
/* The inputs of task (t, point): the points of timestep t-1 it reads, in
 * Task Bench's order (the order execute_point() checks them in).  out has
 * room for tb_max_inputs(g).  Returns the count (0 at t = 0). */
size_t tb_inputs(const tb_graph *g, long t, long point, long *out);

/* Fill in the defaults that depend on other flags (period, fields) and
 * check the graph as Task Bench's App::check does (period rules, spread's
 * period bound, no duplicate dependencies, reverse dependencies mirror
 * dependencies) plus this implementation's limits.  Returns 0, or -1 with
 * a message in err. */
int tb_graph_finish(tb_graph *g, char *err, size_t errsz);

/* Task Bench's per-task FLOP and byte counts (count_flops_per_task,
 * count_bytes_per_task) and the load_imbalance iteration count. */
long long tb_task_flops(const tb_graph *g, long t, long point);
long long tb_task_bytes(const tb_graph *g, long t, long point);
long tb_imbalance_iterations(const tb_kernel *k, long graph_index, long t, long point);

/* Task Bench's random_uniform(): MurmurHash3 x64 128 of the bytes with
 * seed 1234567, the first 64 bits scaled to [0, 1). */
double tb_random_uniform(const void *bytes, size_t n);
/* MurmurHash3_x64_128 itself (exposed for its test vectors). */
void tb_murmur3_x64_128(const void *key, size_t len, uint32_t seed, uint64_t out[2]);

/* Fill scratch memory with Task Bench's magic value (bytes % 8 == 0). */
void tb_prepare_scratch(void *scratch, size_t bytes);

/* Task Bench's execute_point(): check that input i holds (t-1, dep_i)
 * pairs for the i-th point tb_inputs() returns and that there are exactly
 * that many inputs, check the output and scratch sizes and the scratch's
 * magic value, write (t, point) pairs to the output, run the kernel.
 * input_bytes may be NULL (every input is g->output_bytes).  Returns 0, or
 * -1 with a message in err (nothing is run then). */
int tb_execute_point(const tb_graph *g, long t, long point, void *output, size_t output_bytes,
                     const void *const *inputs, const size_t *input_bytes, size_t ninputs, void *scratch,
                     size_t scratch_bytes, char *err, size_t errsz);

/* Busy time: while on, every tb_execute_point adds its own duration to
 * its thread's count (two time-stamp counter reads and an add a task:
 * about 25 ns on a 2-core virtual machine), whichever system calls it, so
 * a sweep can read how much of a run the ranks spent in the tasks
 * themselves.  tb_busy_on converts the counter's ticks to nanoseconds (a
 * 20 ms reading, the first time); tb_busy_ns is the process's sum so far. */
void tb_busy_on(void);
double tb_busy_ns(void);

/* Nanoseconds per compute_bound iteration on this core now: the best of
 * five tasks of 2^14 iterations (about a millisecond in all).  The METG
 * sweeps read it to see how far the machine's speed moved meanwhile. */
double tb_compute_ns_per_iter(void);

/* Totals over all graphs, as Task Bench's report_timing() counts them. */
typedef struct tb_totals {
  long long tasks, deps, flops, bytes;
} tb_totals;
void tb_app_totals(const tb_app *app, tb_totals *out);

/* Task Bench's configuration printout (App::display) and its summary
 * (App::report_timing), in Task Bench's exact format. */
void tb_app_display(FILE *f, const tb_app *app);
void tb_app_report(FILE *f, const tb_app *app, double elapsed_seconds);

/* Parse Task Bench's flags: -steps -width -type -radix -period -fraction
 * -and -kernel -iter -output -scratch -sample -imbalance -field -worker -v
 * (-h is the caller's).  Arguments that are not Task Bench flags are
 * copied, in order, to rest[] (room for argc entries), their count to
 * *nrest; the caller parses those.  Every graph is finished
 * (tb_graph_finish).  Returns 0, or -1 with a message in err for a bad
 * flag or value. */
int tb_app_parse(tb_app *app, int argc, char **argv, char **rest, int *nrest, char *err, size_t errsz);

/* METG: the task granularity at which efficiency crosses `threshold`
 * (0.5 for METG(50%)).  gran[] and eff[] are n points of one sweep, in
 * any order.  Sorting by granularity from coarse to fine, the answer is
 * found between the finest point at or above the threshold and the next
 * finer point, interpolating efficiency linearly in log(granularity) (a
 * dip below the threshold at a coarser point is ignored: METG is the
 * smallest granularity that is still efficient).  Returns the
 * granularity; a negative
 * value when efficiency never reaches the threshold (-1) or never drops
 * below it (-2: the finest point is still efficient; no crossing). */
double tb_metg(const double *gran, const double *eff, size_t n, double threshold);

#endif
