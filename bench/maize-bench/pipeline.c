/* maize-bench pipeline: the README's main job.  A multi-stage pipeline on
 * every device found, once per shipped policy, verified against a CPU
 * reference, with a table, a Perfetto trace, a Gantt chart and the graph as
 * Graphviz DOT (mz_graph_dump_dot, with the device of each task) per policy.
 *
 *   host fill:   x[i] = (i % 1000) / 1000, y[i] = 1 + (i % 7) / 4
 *   partition x, y and z into tiles; per tile, on any device:
 *     scale:   x_t = 2 x_t            mz_op_scal (canned: OpenBLAS, CLBlast, cuBLAS)
 *     square:  x_t = x_t^2            kernel written here, CPU/OpenCL/CUDA
 *     add:     z_t = x_t + y_t        kernel written here, CPU/OpenCL/CUDA
 *     axpy:    y_t = 0.5 z_t + y_t    mz_op_axpy (canned)
 *   unpartition; host verify: z and y against the reference
 *
 * The BLAS stages are canned ops, so the hand-written kernels are the ones
 * BLAS lacks.  On a CUDA device without cuBLAS, the policies place scale
 * and axpy on the other devices.
 *
 * Tiles of one stage may run on different devices than the stage before,
 * so the runtime moves tiles between devices (peer copies between OpenCL
 * devices, reads back to the host for the CPU and the host stages).
 *
 * Each policy runs in a runtime of its own, so its trace (the runtime
 * config's .trace, written as each run ends) holds only its runs; the
 * Gantt chart shows the last run, and its copies must add up to the
 * table's transfers and bytes (checked: a mismatch fails the command).  Hand-written kernels: the CPU
 * functions below, the OpenCL C of examples/kernels/kernels.cl (from the source tree
 * when it is readable, else the copy compiled in), and the PTX of
 * examples/kernels when it is readable (else CUDA devices get no kernels,
 * as the output says). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "maize.h"
#include "maize/ops.h"
#include "maize/policy.h"
#include "mzb.h"
#include "mzb_kernels_cl.h"

#ifndef MZB_KERNELS_CL
#define MZB_KERNELS_CL "examples/kernels/kernels.cl"
#endif
#ifndef MZ_KERNELS_PTX
#define MZ_KERNELS_PTX "examples/kernels/kernels.ptx"
#endif

#define MAX_DEV 64

#if MZB_HAVE_OPENBLAS
void openblas_set_num_threads(int n); /* OpenBLAS's own, not in the reference cblas.h */
#endif

/* The canned BLAS ops run OpenBLAS inside a CPU worker, and maize's CPU
 * device has a worker per core.  OpenBLAS's pthread build splits a call
 * over every core by default, so two workers each running an axpy put four
 * spinning threads on two cores: here a 1 MiB axpy took 2.7 ms in the mean
 * (up to 5.8 ms under ws) instead of 0.19 ms, and the perf models fed the
 * cost policies a CPU nine times slower than it is.  One thread per call,
 * unless the user chose a count (OPENBLAS_NUM_THREADS, read by OpenBLAS
 * when it loads).  Returns what the header line says. */
static const char *blas_one_thread(void) {
#if MZB_HAVE_OPENBLAS
  const char *env = getenv("OPENBLAS_NUM_THREADS");
  if (env && *env) return "OpenBLAS threads per call as OPENBLAS_NUM_THREADS says";
  openblas_set_num_threads(1);
  return "OpenBLAS: one thread per call (a CPU worker is one core)";
#else
  return "no OpenBLAS linked into maize-bench (the CPU's BLAS ops use what maize was built with)";
#endif
}

/* ---- kernels and host stages ---- */

static int k_square(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] = y[i] * y[i];
  return 0;
}
static int k_add(const mz_call *c) {
  const float *x = c->args[0].p, *y = c->args[1].p;
  float *z = c->args[2].p;
  for (uint64_t i = 0; i < c->args[3].u64; i++) z[i] = x[i] + y[i];
  return 0;
}

/* The inputs and the expected outputs, computed once on the host as the
 * CPU kernels and BLAS compute them, so that the host stages are copies and
 * comparisons (cheap next to the kernels). */
struct ref {
  size_t n;
  float *x0, *y0, *z, *y;
};

static int ref_make(struct ref *r, size_t n) {
  r->n = n;
  r->x0 = malloc(n * sizeof(float));
  r->y0 = malloc(n * sizeof(float));
  r->z = malloc(n * sizeof(float));
  r->y = malloc(n * sizeof(float));
  if (!r->x0 || !r->y0 || !r->z || !r->y) return MZ_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    r->x0[i] = (float)(i % 1000) * 0.001f;
    r->y0[i] = 1.0f + (float)(i % 7) * 0.25f;
    float s = 2.0f * r->x0[i];
    s = s * s;
    r->z[i] = s + r->y0[i];
    r->y[i] = 0.5f * r->z[i] + r->y0[i];
  }
  return 0;
}

static void ref_free(struct ref *r) {
  free(r->x0);
  free(r->y0);
  free(r->z);
  free(r->y);
}

static int h_fill(const mz_call *c) {
  const struct ref *r = c->user;
  memcpy(c->args[0].p, r->x0, r->n * sizeof(float));
  memcpy(c->args[1].p, r->y0, r->n * sizeof(float));
  return 0;
}

struct verdict {
  const struct ref *ref;
  size_t bad;
  size_t first;
  float got, want;
  char which;
};

/* BLAS and OpenCL may contract a * x + y into an fma: a relative tolerance. */
static bool close_enough(float got, float want) { return fabsf(got - want) <= 1e-5f * fmaxf(1.0f, fabsf(want)); }

static int h_verify(const mz_call *c) {
  const float *z = c->args[0].p, *y = c->args[1].p;
  struct verdict *v = c->user;
  const struct ref *r = v->ref;
  for (size_t i = 0; i < r->n; i++) {
    bool okz = close_enough(z[i], r->z[i]), oky = close_enough(y[i], r->y[i]);
    if ((!okz || !oky) && v->bad++ == 0) {
      v->first = i;
      v->which = okz ? 'y' : 'z';
      v->got = okz ? y[i] : z[i];
      v->want = okz ? r->y[i] : r->z[i];
    }
  }
  return 0;
}

/* ---- one policy ---- */

struct kernels {
  mz_kernel *k[2]; /* square, add */
};

static const char *cl_source; /* text, or NULL to use the path */
static bool have_ptx;

static int make_kernels(mz_runtime *rt, struct kernels *ks) {
  static const struct {
    const char *name, *params;
    mz_cpu_fn fn;
  } defs[2] = {
      {"square", "inout f32[] y, u64 n = sizeof(y)", k_square},
      {"add", "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)", k_add},
  };
  for (int i = 0; i < 2; i++) {
    mz_kernel_spec s = {
        .name = defs[i].name,
        .params = defs[i].params,
        .cpu = {.fn = defs[i].fn},
        .opencl = {.format = MZ_CODE_SOURCE, .data = cl_source, .path = cl_source ? NULL : MZB_KERNELS_CL},
        .cuda = {.format = have_ptx ? MZ_CODE_PTX : MZ_CODE_NONE, .path = have_ptx ? MZ_KERNELS_PTX : NULL},
        .cost = {.flops_per_elem = 1, .bytes_per_elem = 8},
    };
    int rc = mz_kernel_create(rt, &s, &ks->k[i]);
    if (rc) {
      fprintf(stderr, "maize-bench pipeline: kernel %s: %s\n", defs[i].name, mz_runtime_last_error(rt));
      return rc;
    }
  }
  return 0;
}

struct result {
  mz_run_stats st;
  uint64_t busy[MAX_DEV];
  int status;
  char message[512];
  struct verdict v;
};

/* dot: where to write the graph as Graphviz DOT after the run, with the
 * device each task ran on (NULL: nowhere). */
static int run_once(mz_runtime *rt, const struct kernels *ks, const char *policy, const struct ref *ref,
                    unsigned tiles, struct result *res, const char *dot) {
  size_t n = ref->n;
  memset(res, 0, sizeof *res);
  res->v.ref = ref;
  mz_buffer *x = NULL, *y = NULL, *z = NULL;
  mz_graph *g = NULL;
  mz_future *f = NULL;
  mz_op **zs = calloc(tiles, sizeof *zs), **ys = calloc(tiles, sizeof *ys), **xs = calloc(tiles, sizeof *xs);
  int rc = MZ_ENOMEM;
  if (!zs || !ys || !xs) goto out;
  if ((rc = mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &x)) ||
      (rc = mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &y)) ||
      (rc = mz_buffer_create(rt, MZ_F32, 1, (size_t[]){n}, NULL, &z)) || (rc = mz_graph_create(rt, &g))) {
    snprintf(res->message, sizeof res->message, "setup: %s", mz_runtime_last_error(rt));
    goto out;
  }
  mz_op *filled = mz_host_named(g, "fill", h_fill, (void *)ref, mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, y)}));
  mz_op *px = mz_partition(g, mz_unzip(g, filled, 0), tiles);
  mz_op *py = mz_partition(g, mz_unzip(g, filled, 1), tiles);
  mz_op *pz = mz_partition(g, mz_value(g, z), tiles);
  for (unsigned t = 0; t < tiles; t++) {
    mz_op *xt = mz_unzip(g, px, t);
    xt = mz_op_scal(g, 2.0, xt);
    xt = mz_unzip(g, mz_apply(g, ks->k[0], xt, NULL), 0);
    mz_op *added = mz_apply(g, ks->k[1], mz_zip(g, 3, (mz_op *[]){xt, mz_unzip(g, py, t), mz_unzip(g, pz, t)}), NULL);
    mz_op *zt = mz_unzip(g, added, 2);
    /* axpy only reads z_t: the buffer hazards order its read before the
     * unpartition of z. */
    xs[t] = mz_unzip(g, added, 0);
    ys[t] = mz_op_axpy(g, 0.5, zt, mz_unzip(g, added, 1));
    zs[t] = zt;
  }
  mz_op *uz = mz_unpartition(g, mz_zip(g, tiles, zs));
  mz_op *uy = mz_unpartition(g, mz_zip(g, tiles, ys));
  mz_op *ux = mz_unpartition(g, mz_zip(g, tiles, xs));
  mz_op *checked = mz_host_named(g, "verify", h_verify, &res->v, mz_zip(g, 2, (mz_op *[]){uz, uy}));
  mz_op *root = mz_join(g, 2, (mz_op *[]){checked, ux});
  if ((rc = mz_schedule(g, root, policy, &f))) {
    snprintf(res->message, sizeof res->message, "%s", mz_runtime_last_error(rt));
    goto out;
  }
  res->status = mz_future_wait(f);
  if (res->status) snprintf(res->message, sizeof res->message, "%s", mz_future_message(f));
  if ((rc = mz_future_stats(f, &res->st)) == MZ_OK) {
    for (unsigned d = 0; d < res->st.ndevices && d < MAX_DEV; d++) res->busy[d] = res->st.busy_ns ? res->st.busy_ns[d] : 0;
    res->st.busy_ns = res->busy;
  }
  rc = res->status;
  if (dot && mz_graph_dump_dot_file(g, dot)) {
    snprintf(res->message, sizeof res->message, "%s", mz_runtime_last_error(rt));
    if (!rc) rc = MZ_EIO;
  }
out:
  if (rc && !res->message[0]) snprintf(res->message, sizeof res->message, "%s", mz_strerror(rc));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_buffer_release(z);
  free(zs);
  free(ys);
  free(xs);
  return rc;
}

/* ---- the command ---- */

static int make_dir(const char *d) {
  if (mkdir(d, 0777) == 0 || errno == EEXIST) {
    struct stat sb;
    if (stat(d, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
    errno = ENOTDIR;
  }
  return -1;
}

static void device_line(FILE *out, mz_runtime *rt) {
  unsigned ndev = mz_runtime_device_count(rt);
  for (unsigned d = 0; d < ndev; d++) {
    mz_device_info info;
    if (mz_device_get_info(mz_runtime_device(rt, d), &info)) continue;
    fprintf(out, "  device %u: %-6s %-44.44s %u queue(s)\n", d, mz_device_kind_name(info.kind), info.name, info.queues);
  }
}

static int pipeline_body(const mzb_pipeline_opts *o, FILE *out, const char *outdir, const struct ref *refp);

int mzb_pipeline_run(const mzb_pipeline_opts *o, FILE *out) {
  const char *outdir = o->outdir ? o->outdir : "maize-out";
  size_t n = o->elements;
  unsigned tiles = o->tiles;
  if (!n || !tiles || tiles > n) {
    fprintf(stderr, "maize-bench pipeline: need 1 <= tiles <= elements (got %u tiles, %zu elements)\n", tiles, n);
    return 1;
  }
  if (make_dir(outdir)) {
    fprintf(stderr, "maize-bench pipeline: cannot create the output folder '%s': %s\n", outdir, strerror(errno));
    return 1;
  }
  struct ref ref;
  if (ref_make(&ref, n)) {
    ref_free(&ref);
    fprintf(stderr, "maize-bench pipeline: out of memory for %zu elements\n", n);
    return 1;
  }
  int ret = pipeline_body(o, out, outdir, &ref);
  ref_free(&ref);
  return ret;
}

static int pipeline_body(const mzb_pipeline_opts *o, FILE *out, const char *outdir, const struct ref *refp) {
  const struct ref ref = *refp;
  size_t n = ref.n;
  unsigned tiles = o->tiles, reps = o->reps ? o->reps : 1;
  cl_source = access(MZB_KERNELS_CL, R_OK) == 0 ? NULL : mzb_kernels_cl;
  const char *blas = blas_one_thread();
  have_ptx = access(MZ_KERNELS_PTX, R_OK) == 0;
  /* A first runtime lists the devices and the policies. */
  mz_runtime_config cfg = {.devices = o->devices};
  mz_runtime *rt;
  int rc = mz_runtime_create(&cfg, &rt);
  if (rc) {
    fprintf(stderr, "maize-bench pipeline: cannot start a runtime on devices '%s': %s\n",
            o->devices ? o->devices : getenv("MZ_DEVICES") ? getenv("MZ_DEVICES") : "all", mz_strerror(rc));
    return 1;
  }
  unsigned ndev = mz_runtime_device_count(rt);
  char **policies = NULL;
  unsigned npol = 0;
  for (unsigned p = 0; mz_policy_name(rt, p); p++) npol++;
  policies = calloc(npol ? npol : 1, sizeof *policies);
  if (!policies) {
    mz_runtime_destroy(rt);
    return 1;
  }
  bool found = !o->policy;
  const char *warm_policy = NULL;
  for (unsigned p = 0; p < npol; p++) {
    policies[p] = strdup(mz_policy_name(rt, p));
    if (o->policy && policies[p] && !strcmp(policies[p], o->policy)) found = true;
    if (policies[p] && !strcmp(policies[p], "round-robin")) warm_policy = policies[p];
  }
  if (!o->quiet) {
    fprintf(out, "maize pipeline: %zu floats x 3 buffers, %u tiles, 4 ops per tile (2 canned, 2 hand-written) + 2 host stages, %u run(s) per policy\n",
            n, tiles, reps);
    device_line(out, rt);
    fprintf(out, "  %s\n", blas);
    if (!have_ptx) fprintf(out, "  (no PTX at %s: CUDA devices, if any, get no kernels)\n", MZ_KERNELS_PTX);
    fprintf(out, "  OpenCL kernels: %s\n", cl_source ? "the copy of examples/kernels/kernels.cl built into maize-bench"
                                                     : MZB_KERNELS_CL);
  }
  mz_runtime_destroy(rt);
  if (!found) {
    fprintf(stderr, "maize-bench pipeline: no policy '%s'; the policies are:", o->policy);
    for (unsigned p = 0; p < npol; p++) fprintf(stderr, " %s", policies[p] ? policies[p] : "?");
    fprintf(stderr, "\n");
    for (unsigned p = 0; p < npol; p++) free(policies[p]);
    free(policies);
    return 1;
  }
  fprintf(out, "\n%-12s %11s %6s %9s %9s %9s %10s  %s\n", "policy", "makespan", "ops", "transfers", "MB moved",
          "callbacks", "result", "busy ms per device");
  int failures = 0;
  char (*paths)[3][4096] = calloc(npol ? npol : 1, sizeof *paths);
  char (*bench)[512] = calloc(npol ? npol : 1, sizeof *bench); /* the BENCH lines, printed last */
  if (!paths || !bench) failures++;
  for (unsigned p = 0; paths && bench && p < npol; p++) {
    const char *pol = policies[p];
    if (!pol || (o->policy && strcmp(pol, o->policy))) continue;
    snprintf(paths[p][0], sizeof paths[p][0], "%s/pipeline-%s.json", outdir, pol);
    snprintf(paths[p][1], sizeof paths[p][1], "%s/pipeline-%s.svg", outdir, pol);
    snprintf(paths[p][2], sizeof paths[p][2], "%s/pipeline-%s.dot", outdir, pol);
    cfg.trace = paths[p][0];
    cfg.quiet = true;
    if ((rc = mz_runtime_create(&cfg, &rt))) {
      fprintf(stderr, "maize-bench pipeline: %s: cannot start a runtime: %s\n", pol, mz_strerror(rc));
      failures++;
      continue;
    }
    struct kernels ks = {{NULL}};
    struct result res = {0};
    rc = make_kernels(rt, &ks);
    /* OpenCL and CUDA build a kernel for a device the first time a node
     * of it runs there, which takes a good part of a second with PoCL.
     * A warm-up under round-robin, which visits every queue, builds them
     * (nearly) everywhere, so the measured run shows the policy rather
     * than compilers. */
    if (!rc && warm_policy) {
      rc = run_once(rt, &ks, warm_policy, &ref, tiles, &res, NULL);
      if (!rc && res.v.bad) rc = MZ_EKERNEL;
    }
    for (unsigned r = 0; !rc && r < reps; r++) {
      rc = run_once(rt, &ks, pol, &ref, tiles, &res, r + 1 == reps ? paths[p][2] : NULL);
      if (!rc && res.v.bad) rc = MZ_EKERNEL;
    }
    for (int i = 0; i < 2; i++) mz_kernel_destroy(ks.k[i]);
    mz_runtime_destroy(rt); /* writes the trace */
    if (rc) {
      failures++;
      if (res.v.bad)
        fprintf(stderr,
                "maize-bench pipeline: WRONG RESULT under policy %s: %zu element(s) differ from the CPU reference; "
                "first: %c[%zu] = %.9g, want %.9g\n",
                pol, res.v.bad, res.v.which, res.v.first, (double)res.v.got, (double)res.v.want);
      else
        fprintf(stderr, "maize-bench pipeline: policy %s failed: %s (%s)\n", pol, res.message, mz_err_name(rc));
      fprintf(out, "%-12s %11s %6s %9s %9s %9s %10s\n", pol, "-", "-", "-", "-", "-", res.v.bad ? "WRONG" : "FAILED");
      continue;
    }
    fprintf(out, "%-12s %9.2fms %6llu %9llu %9.2f %9llu %10s ", pol, (double)res.st.elapsed_ns / 1e6,
            (unsigned long long)res.st.ops, (unsigned long long)res.st.transfers, (double)res.st.bytes_moved / 1e6,
            (unsigned long long)res.st.callbacks, "ok");
    int bl = snprintf(bench[p], sizeof bench[p],
                      "BENCH pipeline policy=%s elements=%zu tiles=%u makespan_ns=%llu transfers=%llu bytes=%llu "
                      "callbacks=%llu busy_ns=",
                      pol, n, tiles, (unsigned long long)res.st.elapsed_ns, (unsigned long long)res.st.transfers,
                      (unsigned long long)res.st.bytes_moved, (unsigned long long)res.st.callbacks);
    for (unsigned d = 0; d < res.st.ndevices && d < MAX_DEV; d++) {
      fprintf(out, " %7.2f", (double)res.busy[d] / 1e6);
      if (bl > 0 && (size_t)bl < sizeof bench[p])
        bl += snprintf(bench[p] + bl, sizeof bench[p] - (size_t)bl, "%s%llu", d ? "," : "",
                       (unsigned long long)res.busy[d]);
    }
    fprintf(out, "\n");
    fflush(out);
    /* The Gantt chart of the measured run, from the trace just written. */
    mzb_trace t;
    char err[600];
    if (mzb_trace_load(paths[p][0], &t, err, sizeof err)) {
      fprintf(stderr, "maize-bench pipeline: %s: the trace cannot be read back: %s\n", pol, err);
      failures++;
      paths[p][0][0] = 0;
      continue;
    }
    if (t.negative_dur || t.flow_unmatched || t.unnamed_pids || t.unnamed_tids) {
      fprintf(stderr, "maize-bench pipeline: %s: the trace breaks Perfetto's rules (%zu negative durations, "
                      "%zu unmatched flows, %zu unnamed pids, %zu unnamed tids)\n",
              pol, t.negative_dur, t.flow_unmatched, t.unnamed_pids, t.unnamed_tids);
      failures++;
    }
    /* The trace shows each copy the statistics count, with its bytes: the
     * table and the chart must tell the same story. */
    size_t tx = 0;
    uint64_t tb = 0;
    for (size_t i = 0; i < t.nslices; i++)
      if (t.slices[i].transfer && t.slices[i].run == t.last_run) tx++, tb += t.slices[i].bytes;
    if (tx != res.st.transfers || tb != res.st.bytes_moved) {
      fprintf(stderr,
              "maize-bench pipeline: %s: the trace shows %zu transfers, %llu bytes in run %lld; the statistics count "
              "%llu, %llu bytes\n",
              pol, tx, (unsigned long long)tb, (long long)t.last_run, (unsigned long long)res.st.transfers,
              (unsigned long long)res.st.bytes_moved);
      failures++;
    }
    char title[256];
    snprintf(title, sizeof title, "maize pipeline, policy %s: %zu floats, %u tiles, %u device(s), run %lld", pol, n,
             tiles, ndev, (long long)t.last_run);
    if ((rc = mzb_trace_svg(&t, t.last_run, title, paths[p][1]))) {
      fprintf(stderr, "maize-bench pipeline: cannot write '%s': %s\n", paths[p][1], mz_strerror(rc));
      paths[p][1][0] = 0;
      failures++;
    }
    mzb_trace_free(&t);
  }
  if (paths) {
    fprintf(out, "\nPerfetto traces (open at https://ui.perfetto.dev), Gantt charts of the last run, and its graph "
                 "(Graphviz: dot -Tsvg FILE.dot):\n");
    for (unsigned p = 0; p < npol; p++)
      if (paths[p][0][0])
        fprintf(out, "  %s  %s  %s\n", paths[p][0], paths[p][1][0] ? paths[p][1] : "(no chart)", paths[p][2]);
    fprintf(out, "Summary of one: maize-bench trace %s/pipeline-<policy>.json --run last\n", outdir);
  }
  fprintf(out, "%s\n", failures ? "SOME POLICIES FAILED" : "every policy matched the CPU reference");
  for (unsigned p = 0; bench && p < npol; p++)
    if (bench[p][0]) fprintf(out, "%s\n", bench[p]);
  free(bench);
  for (unsigned p = 0; p < npol; p++) free(policies[p]);
  free(policies);
  free(paths);
  return failures ? 1 : 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: maize-bench pipeline [--devices S] [--policy P] [--elements N] [--tiles T]\n"
          "                            [--reps R] [--outdir DIR] [--quick]\n"
          "  Runs a tiled multi-device pipeline (4 ops per tile, 2 host stages)\n"
          "  once per policy, checks it against a CPU reference, prints a table and\n"
          "  writes DIR/pipeline-<policy>.json (Perfetto), .svg (Gantt chart) and\n"
          "  .dot (the graph, each task with the device it ran on; dot -Tsvg).\n"
          "  --devices   MZ_DEVICES syntax (default: $MZ_DEVICES, else all)\n"
          "  --policy    one policy (default: every registered policy)\n"
          "  --elements  floats per buffer (default 4194304)\n"
          "  --tiles     tiles per buffer (default 16)\n"
          "  --reps      runs per policy after a round-robin warm-up, the last\n"
          "              measured and drawn (default 2)\n"
          "  --outdir    where the files go (default ./maize-out)\n"
          "  --quick     262144 floats, 8 tiles, 1 run (CI), unless given\n");
}

static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (!s || *s == '-') return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0 || v > (1ull << 34)) return false;
  *out = (size_t)v;
  return true;
}

/* getopt_long: "--tiles 4" and "--tiles=4" both work; --quick gives the
 * sizes that were not given explicitly, in whatever order the options come. */
int mzb_pipeline_main(int argc, char **argv) {
  mzb_pipeline_opts o = {.elements = (size_t)1 << 22, .tiles = 16, .reps = 2};
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},         {"quick", no_argument, NULL, 'q'},
      {"devices", required_argument, NULL, 'd'}, {"policy", required_argument, NULL, 'p'},
      {"outdir", required_argument, NULL, 'o'},  {"elements", required_argument, NULL, 'e'},
      {"tiles", required_argument, NULL, 't'},   {"reps", required_argument, NULL, 'r'},
      {NULL, 0, NULL, 0}};
  bool quick = false, set_e = false, set_t = false, set_r = false;
  int c;
  optind = 0; /* glibc: 0 re-initialises getopt fully, so tests may call this again */
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    size_t num;
    switch (c) {
    case 'h': usage(stdout); return 0;
    case 'q': quick = true; break;
    case 'd': o.devices = optarg; break;
    case 'p': o.policy = optarg; break;
    case 'o': o.outdir = optarg; break;
    case 'e': case 't': case 'r':
      if (!parse_size(optarg, &num) || (c != 'e' && num > 65536)) {
        fprintf(stderr, "maize-bench pipeline: --%s wants a positive number%s, not '%s'\n",
                c == 'e' ? "elements" : c == 't' ? "tiles" : "reps", c != 'e' ? " up to 65536" : "", optarg);
        return 2;
      }
      if (c == 'e') o.elements = num, set_e = true;
      else if (c == 't') o.tiles = (unsigned)num, set_t = true;
      else o.reps = (unsigned)num, set_r = true;
      break;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "maize-bench pipeline: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (quick) {
    if (!set_e) o.elements = (size_t)1 << 18;
    if (!set_t) o.tiles = 8;
    if (!set_r) o.reps = 1;
  }
  return mzb_pipeline_run(&o, stdout);
}
