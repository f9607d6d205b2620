/* mz-bench-opencl-chain: the cost maize adds to small OpenCL kernels.
 *
 * N small kernels (scale on 1,024 floats) run
 *  - on one in-order queue: maize (policy "single", one dependent chain on
 *    one buffer) against hand-written OpenCL host code that enqueues the
 *    same kernels with plain clEnqueueNDRangeKernel and one clFinish, and
 *    against raw code with one clSetEventCallback per kernel (what a
 *    runtime that does not batch its completions pays);
 *  - on 4 queues: 4 chains, one buffer each, and every 8th step of a chain
 *    reads the next chain's buffer (saxpy), an edge between queues.  maize
 *    places chain c on queue c with a four-line user policy ("affine": the
 *    kernels of chain c are named "scale.c" and "saxpy.c") and turns the
 *    edges into event waits; the raw code does the same with events in
 *    wait lists and one clFinish per queue.  The same graph under the
 *    shipped "round-robin" policy, which rotates every op over the queues
 *    (so every edge crosses queues and every op is its own batch), is
 *    printed as rr_ns.
 * Every figure is nanoseconds per kernel, the median of -r repetitions,
 * measured from mz_schedule() (or the first enqueue) to the end of the
 * wait; building the maize graph is timed apart (maize_build_ns, and
 * ratio_with_build counts it in, as the raw loop counts its
 * clSetKernelArg calls).  maize_rerun_ns is the same graph built once and
 * run again with mz_graph_run (its third run: the first lowers it, the
 * second is the first replay).  The last lines are
 *   BENCH opencl.chain maize_ns=<x> raw_ns=<y> ratio=<x/y> raw_cb_ns=<z>
 *         maize_build_ns=<b> ratio_with_build=<(x+b)/y> maize_rerun_ns=<r>
 *         ratio_rerun=<r/y>
 *   BENCH opencl.chain4 (the same, with rr_ns=<z> for raw_cb_ns)
 * Options: -n N (default 10,000), -r reps (default 5), --quick (N = 1,000,
 * 2 repetitions: the CI smoke test), --only ARM,... (only those arms, for
 * perf or strace: maize, raw, raw-cb, maize4, raw4, rr4, maize-rerun,
 * maize4-rerun; a BENCH line is
 * printed only when both its sides ran).  The repetition lines on stderr
 * also give the part of maize's time spent in mz_schedule ("schedule"),
 * and the "usage" lines each arm's CPU time (all threads, from getrusage)
 * and context switches per kernel. */
#define CL_TARGET_OPENCL_VERSION 300
#include <getopt.h>
#include <CL/cl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_util.h"
#include "maize.h"
#include "maize/policy.h"

#ifndef MZ_KERNELS_CL
#error "MZ_KERNELS_CL must name examples/kernels/kernels.cl"
#endif

#define ELEMS 1024
#define CHAINS 4
#define CROSS_EVERY 8

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The process's CPU time (all threads) and context switches, for the
 * per-arm figures on stderr: where the wall time is not CPU time, it is
 * waiting, and the switches count the hand-offs between threads. */
struct usage {
  double cpu_ns, vcsw, icsw;
};

static struct usage usage_now(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (struct usage){ (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
                             (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3,
                         (double)ru.ru_nvcsw, (double)ru.ru_nivcsw };
}

/* Per-arm sums of CPU time and switches over the repetitions. */
enum { NARMS = 8 }; /* the measured arms (below) */
static struct usage arm_use[NARMS];

static void usage_add(int arm, struct usage a, struct usage b)
{
  arm_use[arm].cpu_ns += b.cpu_ns - a.cpu_ns;
  arm_use[arm].vcsw += b.vcsw - a.vcsw;
  arm_use[arm].icsw += b.icsw - a.icsw;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, int code)
{
  fprintf(stderr, "opencl_chain: %s failed: %d\n", what, code);
  exit(1);
}

/* ---- raw OpenCL ---- */

struct raw {
  cl_context ctx;
  cl_device_id dev;
  cl_command_queue q[CHAINS];
  cl_program prog;
  cl_kernel scale, saxpy;
  cl_mem buf[CHAINS];
};

static void raw_open(struct raw *r)
{
  cl_platform_id p;
  cl_int err;
  if (clGetPlatformIDs(1, &p, NULL) != CL_SUCCESS || clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &r->dev, NULL) != CL_SUCCESS)
    die("finding an OpenCL device", -1);
  r->ctx = clCreateContext(NULL, 1, &r->dev, NULL, NULL, &err);
  if (!r->ctx)
    die("clCreateContext", err);
  for (int i = 0; i < CHAINS; i++) {
    r->q[i] = clCreateCommandQueueWithProperties(r->ctx, r->dev, NULL, &err);
    if (!r->q[i])
      die("clCreateCommandQueue", err);
  }
  char *src = bench_read_file(MZ_KERNELS_CL);
  if (!src)
    die(MZ_KERNELS_CL, -1);
  const char *s = src;
  r->prog = clCreateProgramWithSource(r->ctx, 1, &s, NULL, &err);
  if ((err = clBuildProgram(r->prog, 1, &r->dev, "", NULL, NULL)) != CL_SUCCESS)
    die("clBuildProgram", err);
  free(src);
  r->scale = clCreateKernel(r->prog, "scale", &err);
  r->saxpy = clCreateKernel(r->prog, "saxpy", &err);
  float init[ELEMS];
  for (int i = 0; i < ELEMS; i++)
    init[i] = 1.0f;
  for (int i = 0; i < CHAINS; i++) {
    r->buf[i] = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof init, init, &err);
    if (!r->buf[i])
      die("clCreateBuffer", err);
  }
}

static void raw_close(struct raw *r)
{
  for (int i = 0; i < CHAINS; i++) {
    clReleaseMemObject(r->buf[i]);
    clReleaseCommandQueue(r->q[i]);
  }
  clReleaseKernel(r->scale);
  clReleaseKernel(r->saxpy);
  clReleaseProgram(r->prog);
  clReleaseContext(r->ctx);
}

/* Enqueue scale(1.0f, buf) on q, with an optional wait list and event. */
static void raw_scale(struct raw *r, cl_command_queue q, cl_mem buf, cl_uint nw, const cl_event *w, cl_event *ev)
{
  float a = 1.0f;
  cl_ulong n = ELEMS;
  size_t global = ELEMS;
  clSetKernelArg(r->scale, 0, sizeof a, &a);
  clSetKernelArg(r->scale, 1, sizeof buf, &buf);
  clSetKernelArg(r->scale, 2, sizeof n, &n);
  cl_int err = clEnqueueNDRangeKernel(q, r->scale, 1, NULL, &global, NULL, nw, w, ev);
  if (err != CL_SUCCESS)
    die("clEnqueueNDRangeKernel", err);
}

static double raw_chain(struct raw *r, int n)
{
  uint64_t t0 = now_ns();
  for (int i = 0; i < n; i++)
    raw_scale(r, r->q[0], r->buf[0], 0, NULL, NULL);
  clFinish(r->q[0]);
  return (double)(now_ns() - t0) / n;
}

static _Atomic int cb_count;

static void CL_CALLBACK count_cb(cl_event e, cl_int status, void *user)
{
  atomic_fetch_add_explicit(&cb_count, 1, memory_order_release);
}

static double raw_chain_cb(struct raw *r, int n)
{
  atomic_store(&cb_count, 0);
  uint64_t t0 = now_ns();
  for (int i = 0; i < n; i++) {
    cl_event ev;
    raw_scale(r, r->q[0], r->buf[0], 0, NULL, &ev);
    clSetEventCallback(ev, CL_COMPLETE, count_cb, NULL);
    clReleaseEvent(ev);
    if (i % 64 == 63)
      clFlush(r->q[0]);
  }
  clFinish(r->q[0]);
  while (atomic_load_explicit(&cb_count, memory_order_acquire) < n)
    ;
  return (double)(now_ns() - t0) / n;
}

/* 4 chains, issued in the order the maize graph is built (step by step,
 * chain 0 to 3).  Step s of chain c is a saxpy reading chain c+1's buffer
 * every CROSS_EVERY steps, a scale otherwise.  The edges are the ones
 * maize derives from the buffer hazards, as events in wait lists:
 *  - read-after-write: a cross step of chain c < 3 reads what chain c+1
 *    wrote at step s-1; chain 3 reads what chain 0 wrote at step s;
 *  - write-after-read: a cross step of chain c >= 1 overwrites the buffer
 *    chain c-1 read at step s; chain 0's next step overwrites the buffer
 *    chain 3 read.
 * Edges within one queue are implied by the in-order queue. */
static void saxpy_on(struct raw *r, cl_command_queue q, cl_mem x, cl_mem y, cl_uint nw, const cl_event *w,
                     cl_event *ev)
{
  float a = 0.5f;
  cl_ulong ne = ELEMS;
  size_t global = ELEMS;
  clSetKernelArg(r->saxpy, 0, sizeof a, &a);
  clSetKernelArg(r->saxpy, 1, sizeof x, &x);
  clSetKernelArg(r->saxpy, 2, sizeof y, &y);
  clSetKernelArg(r->saxpy, 3, sizeof ne, &ne);
  cl_int err = clEnqueueNDRangeKernel(q, r->saxpy, 1, NULL, &global, NULL, nw, nw ? w : NULL, ev);
  if (err != CL_SUCCESS)
    die("clEnqueueNDRangeKernel", err);
}

static double raw_chain4(struct raw *r, int n)
{
  int steps = n / CHAINS;
  cl_event before[CHAINS] = { 0 }, cross_ev[CHAINS] = { 0 }, last3 = NULL;
  uint64_t t0 = now_ns();
  for (int s = 0; s < steps; s++) {
    bool cross = s % CROSS_EVERY == CROSS_EVERY - 1, pre = s % CROSS_EVERY == CROSS_EVERY - 2;
    for (int c = 0; c < CHAINS; c++) {
      cl_event w[3];
      cl_uint nw = 0;
      if (cross) {
        if (c < CHAINS - 1 && before[c + 1])
          w[nw++] = before[c + 1];
        if (c == CHAINS - 1)
          w[nw++] = cross_ev[0];
        if (c >= 1)
          w[nw++] = cross_ev[c - 1];
      }
      if (c == 0 && last3)
        w[nw++] = last3;
      cl_event *ev = cross ? &cross_ev[c] : pre ? &before[c] : NULL;
      if (cross)
        saxpy_on(r, r->q[c], r->buf[(c + 1) % CHAINS], r->buf[c], nw, w, ev);
      else
        raw_scale(r, r->q[c], r->buf[c], nw, w, ev);
      if (c == 0 && last3) {
        clReleaseEvent(last3);
        last3 = NULL;
      }
    }
    if (cross) {
      for (int c = 0; c < CHAINS; c++) {
        if (before[c])
          clReleaseEvent(before[c]);
        before[c] = NULL;
        if (c < CHAINS - 1)
          clReleaseEvent(cross_ev[c]);
      }
      last3 = cross_ev[CHAINS - 1];
    }
  }
  for (int c = 0; c < CHAINS; c++)
    clFlush(r->q[c]);
  for (int c = 0; c < CHAINS; c++)
    clFinish(r->q[c]);
  double ns = (double)(now_ns() - t0) / (steps * CHAINS);
  for (int c = 0; c < CHAINS; c++)
    if (before[c])
      clReleaseEvent(before[c]);
  if (last3)
    clReleaseEvent(last3);
  return ns;
}

/* ---- maize ---- */

static mz_kernel *mk(mz_runtime *rt, const char *name, const char *entry, const char *params)
{
  mz_kernel_spec s = { .name = name,
                       .params = params,
                       .opencl = { .format = MZ_CODE_SOURCE, .path = MZ_KERNELS_CL, .entry = entry } };
  mz_kernel *k;
  int rc = mz_kernel_create(rt, &s, &k);
  if (rc)
    die("mz_kernel_create", rc);
  return k;
}

/* The "affine" policy: a kernel named "name.c" runs on the c-th queue
 * that can run it (the runtime's host CPU queue comes first and cannot). */
static int affine_select(void *state, const mz_sched *s, mz_task *t, bool ready)
{
  const char *dot = strrchr(mz_task_name(t), '.');
  unsigned want = dot ? (unsigned)atoi(dot + 1) : 0, nq = mz_sched_queue_count(s), first = 0, count = 0;
  for (unsigned q = 0; q < nq; q++)
    if (mz_task_can_run(s, t, q) && count++ == 0)
      first = q;
  for (unsigned q = 0, i = 0; q < nq && count; q++)
    if (mz_task_can_run(s, t, q) && i++ == want % count)
      return (int)q;
  return (int)first;
}

static const struct mz_policy_ops affine_policy = {
  .abi = MZ_POLICY_ABI,
  .name = "affine",
  .description = "a kernel named name.q runs on queue q",
  .select = affine_select,
};

/* Build the graph: chains chains of n / chains steps; scale[c] and
 * saxpy[c] are chain c's kernels.  Returns its root. */
static mz_op *build_graph(mz_graph *g, mz_kernel *const *scale, mz_kernel *const *saxpy, mz_buffer **bufs, int chains,
                          int steps)
{
  mz_op *a = mz_f32(g, 1.0f), *half = mz_f32(g, 0.5f);
  mz_op *vals[CHAINS], *ends[CHAINS];
  for (int c = 0; c < chains; c++)
    vals[c] = mz_value(g, bufs[c]);
  for (int s = 0; s < steps; s++)
    for (int c = 0; c < chains; c++) {
      if (chains > 1 && s % CROSS_EVERY == CROSS_EVERY - 1)
        ends[c] = mz_apply(g, saxpy[c], mz_zip(g, 3, (mz_op *[]){ half, vals[(c + 1) % chains], vals[c] }), NULL);
      else
        ends[c] = mz_apply(g, scale[c], mz_zip(g, 2, (mz_op *[]){ a, vals[c] }), NULL);
    }
  mz_op *root = chains > 1 ? mz_join(g, chains, ends) : ends[0];
  if (mz_graph_status(g))
    die(mz_graph_message(g), mz_graph_status(g));
  return root;
}

/* Run one graph; returns ns per op and adds the build time to *build. */
static double maize_run(mz_runtime *rt, mz_kernel *const *scale, mz_kernel *const *saxpy, mz_buffer **bufs,
                        int chains, int n, const char *policy, double *build, uint64_t *callbacks, double *sched)
{
  int steps = n / chains;
  uint64_t t0 = now_ns();
  mz_graph *g;
  if (mz_graph_create(rt, &g))
    die("mz_graph_create", -1);
  mz_op *root = build_graph(g, scale, saxpy, bufs, chains, steps);
  uint64_t t1 = now_ns();
  mz_future *f;
  int rc = mz_schedule(g, root, policy, &f);
  if (rc)
    die(mz_runtime_last_error(rt), rc);
  uint64_t ts = now_ns();
  rc = mz_future_wait(f);
  uint64_t t2 = now_ns();
  if (sched)
    *sched = (double)(ts - t1) / (steps * chains);
  if (rc)
    die(mz_future_message(f), rc);
  mz_run_stats st;
  if (mz_future_stats(f, &st) == MZ_OK)
    *callbacks = st.callbacks;
  mz_future_destroy(f);
  mz_graph_destroy(g);
  *build += (double)(t1 - t0) / (steps * chains);
  return (double)(t2 - t1) / (steps * chains);
}

/* The same graph built once and run with mz_graph_run: the first run
 * lowers it for re-runs and the second replays it (both untimed); returns
 * ns per op of the third, from mz_graph_run to the end of the wait. */
static double maize_rerun(mz_runtime *rt, mz_kernel *const *scale, mz_kernel *const *saxpy, mz_buffer **bufs,
                          int chains, int n, const char *policy)
{
  int steps = n / chains;
  mz_graph *g;
  if (mz_graph_create(rt, &g))
    die("mz_graph_create", -1);
  mz_op *root = build_graph(g, scale, saxpy, bufs, chains, steps);
  uint64_t t1 = 0, t2 = 0;
  for (int r = 0; r < 3; r++) {
    mz_future *f;
    t1 = now_ns();
    int rc = mz_graph_run(g, root, policy, &f);
    if (rc)
      die(mz_runtime_last_error(rt), rc);
    rc = mz_future_wait(f);
    t2 = now_ns();
    if (rc)
      die(mz_future_message(f), rc);
    mz_future_destroy(f);
  }
  mz_graph_destroy(g);
  return (double)(t2 - t1) / (steps * chains);
}

/* v printed with fmt into buf (32 bytes), or "na" when its arm did not run. */
static const char *fmt_or_na(unsigned on, double v, const char *fmt, char *buf)
{
  if (!on)
    return "na";
  snprintf(buf, 32, fmt, v);
  return buf;
}

/* The measured arms, for --only (one arm alone under perf or strace). */
enum { ARM_M1 = 1, ARM_R1 = 2, ARM_RC1 = 4, ARM_M4 = 8, ARM_R4 = 16, ARM_RR4 = 32, ARM_MR1 = 64, ARM_MR4 = 128,
       ARM_ALL = 255 };
#define ARM_LIST "maize, raw, raw-cb, maize4, raw4, rr4, maize-rerun, maize4-rerun"
/* In bit order: arm_names[i] is the arm of bit 1 << i. */
static const char *const arm_names[NARMS] = { "maize", "raw", "raw-cb", "maize4", "raw4", "rr4", "maize-rerun", "maize4-rerun" };

static bool parse_only(const char *arg, unsigned *mask)
{
  unsigned m = 0;
  const char *p = arg;
  while (*p) {
    size_t len = strcspn(p, ",");
    unsigned i = 0;
    while (i < NARMS && !(strlen(arm_names[i]) == len && strncmp(p, arm_names[i], len) == 0))
      i++;
    if (i == NARMS)
      return false;
    m |= 1u << i;
    p += len;
    if (*p == ',' && *++p == 0)
      return false;
  }
  if (!m)
    return false;
  *mask = m;
  return true;
}

int main(int argc, char **argv)
{
  int n = 10000, reps = 5;
  unsigned only = ARM_ALL;
  static const struct option longopts[] = {{"kernels", required_argument, NULL, 'n'},
                                            {"reps", required_argument, NULL, 'r'},
                                            {"quick", no_argument, NULL, 'q'},
                                            {"only", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  const char *prog = "mz-bench-opencl-chain";
  int opt;
  long num;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":n:r:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'n':
      if (!bench_arg_long(prog, "-n", optarg, 64, 10000000, &num)) return 2;
      n = (int)num;
      break;
    case 'r':
      if (!bench_arg_long(prog, "-r", optarg, 1, 1000, &num)) return 2;
      reps = (int)num;
      break;
    case 'q':
      n = 1000;
      reps = 2;
      break;
    case 'o':
      if (!parse_only(optarg, &only)) {
        fprintf(stderr, "%s: --only wants a comma-separated list of %s, not '%s'\n", prog, ARM_LIST, optarg);
        return 2;
      }
      break;
    case 'h':
      printf("usage: %s [-n|--kernels N] [-r|--reps R] [--quick] [--only ARM,...]\n  arms: %s (default: all)\n", prog,
             ARM_LIST);
      return 0;
    default: return bench_arg_error(prog, opt, argv);
    }
  }
  if (bench_arg_rest(prog, argc, argv)) return 2;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) {
    printf("no OpenCL platform: nothing to measure\n");
    printf("BENCH opencl.chain maize_ns=na raw_ns=na ratio=na\n");
    return 0;
  }

  struct raw r;
  raw_open(&r);
  mz_runtime_config cfg = { .devices = "opencl:0", .opencl_queues = CHAINS };
  mz_runtime *rt;
  int rc = mz_runtime_create(&cfg, &rt);
  if (rc)
    die("mz_runtime_create", rc);
  if ((rc = mz_policy_register(rt, &affine_policy)))
    die("mz_policy_register", rc);
  mz_kernel *scale[CHAINS], *saxpy[CHAINS];
  for (int c = 0; c < CHAINS; c++) {
    char name[32];
    snprintf(name, sizeof name, "scale.%d", c);
    scale[c] = mk(rt, name, "scale", "f32 a, inout f32[] y, u64 n = sizeof(y)");
    snprintf(name, sizeof name, "saxpy.%d", c);
    saxpy[c] = mk(rt, name, "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)");
  }
  float init[ELEMS];
  for (int i = 0; i < ELEMS; i++)
    init[i] = 1.0f;
  mz_buffer *bufs[CHAINS];
  for (int c = 0; c < CHAINS; c++)
    if (mz_buffer_create(rt, MZ_F32, 1, (size_t[]){ ELEMS }, init, &bufs[c]))
      die("mz_buffer_create", -1);

  /* Warm up: builds, first allocations and transfers, PoCL's kernel cache. */
  double build = 0;
  uint64_t cbs = 0;
  maize_run(rt, scale, saxpy, bufs, 1, n / 10, "single", &build, &cbs, NULL);
  maize_run(rt, scale, saxpy, bufs, CHAINS, n / 10, "affine", &build, &cbs, NULL);
  maize_run(rt, scale, saxpy, bufs, CHAINS, n / 10, "round-robin", &build, &cbs, NULL);
  raw_chain(&r, n / 10);
  raw_chain4(&r, n / 10);

  double *m1 = calloc((size_t)reps, sizeof(double)), *r1 = calloc((size_t)reps, sizeof(double));
  double *rc1 = calloc((size_t)reps, sizeof(double)), *m4 = calloc((size_t)reps, sizeof(double));
  double *r4 = calloc((size_t)reps, sizeof(double)), *rr4 = calloc((size_t)reps, sizeof(double));
  double *mr1 = calloc((size_t)reps, sizeof(double)), *mr4 = calloc((size_t)reps, sizeof(double));
  double build1 = 0, build4 = 0, buildrr = 0;
  uint64_t cb1 = 0, cb4 = 0, cbrr = 0;
  double *s1 = calloc((size_t)reps, sizeof(double)), *s4 = calloc((size_t)reps, sizeof(double));
  for (int i = 0; i < reps; i++) {
    /* Interleaved, so that drift of the machine hits all alike. */
    struct usage u0 = usage_now(), u;
#define ARM(bit, idx, expr) \
  if (only & (bit)) {       \
    expr;                   \
    u = usage_now();        \
    usage_add(idx, u0, u);  \
    u0 = u;                 \
  }
    ARM(ARM_M1, 0, m1[i] = maize_run(rt, scale, saxpy, bufs, 1, n, "single", &build1, &cb1, &s1[i]))
    ARM(ARM_R1, 1, r1[i] = raw_chain(&r, n))
    ARM(ARM_RC1, 2, rc1[i] = raw_chain_cb(&r, n))
    ARM(ARM_M4, 3, m4[i] = maize_run(rt, scale, saxpy, bufs, CHAINS, n, "affine", &build4, &cb4, &s4[i]))
    ARM(ARM_R4, 4, r4[i] = raw_chain4(&r, n))
    ARM(ARM_RR4, 5, rr4[i] = maize_run(rt, scale, saxpy, bufs, CHAINS, n, "round-robin", &buildrr, &cbrr, NULL))
    ARM(ARM_MR1, 6, mr1[i] = maize_rerun(rt, scale, saxpy, bufs, 1, n, "single"))
    ARM(ARM_MR4, 7, mr4[i] = maize_rerun(rt, scale, saxpy, bufs, CHAINS, n, "affine"))
#undef ARM
    fprintf(stderr,
            "rep %d: 1 queue maize %.0f (schedule %.0f) raw %.0f raw+cb %.0f | 4 queues maize %.0f (schedule %.0f) "
            "raw %.0f round-robin %.0f | re-run 1 queue %.0f 4 queues %.0f ns/op\n",
            i, m1[i], s1[i], r1[i], rc1[i], m4[i], s4[i], r4[i], rr4[i], mr1[i], mr4[i]);
  }
  free(s1);
  free(s4);
  {
    for (int a = 0; a < NARMS; a++) {
      /* The re-run arms run their graph three times a repetition. */
      double ops = (double)reps * n * (a >= 6 ? 3 : 1);
      if (only & (1u << a))
        fprintf(stderr, "usage %-7s cpu %.0f ns/op, voluntary switches %.3f/op, involuntary %.3f/op\n", arm_names[a],
                arm_use[a].cpu_ns / ops, arm_use[a].vcsw / ops, arm_use[a].icsw / ops);
    }
  }
  double M1 = median(m1, reps), R1 = median(r1, reps), RC1 = median(rc1, reps);
  double M4 = median(m4, reps), R4 = median(r4, reps), RR4 = median(rr4, reps);
  double MR1 = median(mr1, reps), MR4 = median(mr4, reps);
  printf("OpenCL chain, %d kernels of scale on %d floats, median of %d (ns per kernel)\n", n, ELEMS, reps);
  printf("  1 queue : maize %8.0f  raw %8.0f  raw+callback/op %8.0f  (maize build %.0f, callbacks/run %llu)\n",
         M1, R1, RC1, build1 / reps, (unsigned long long)cb1);
  printf("  4 queues: maize %8.0f  raw %8.0f  (maize build %.0f, callbacks/run %llu)\n", M4, R4, build4 / reps,
         (unsigned long long)cb4);
  printf("  4 queues, round-robin: maize %8.0f  (callbacks/run %llu)\n", RR4, (unsigned long long)cbrr);
  char b1[32], b2[32], b3[32], b4[32];
  if (only & (ARM_MR1 | ARM_MR4))
    printf("  re-run of a built graph (mz_graph_run): 1 queue %8.0f  4 queues %8.0f\n", MR1, MR4);
  if ((only & (ARM_M1 | ARM_R1)) == (ARM_M1 | ARM_R1))
    printf("BENCH opencl.chain maize_ns=%.0f raw_ns=%.0f ratio=%.3f raw_cb_ns=%.0f maize_build_ns=%.0f ratio_with_build=%.3f"
           " maize_rerun_ns=%s ratio_rerun=%s\n",
           M1, R1, M1 / R1, RC1, build1 / reps, (M1 + build1 / reps) / R1, fmt_or_na(only & ARM_MR1, MR1, "%.0f", b1),
           fmt_or_na(only & ARM_MR1, MR1 / R1, "%.3f", b2));
  if ((only & (ARM_M4 | ARM_R4)) == (ARM_M4 | ARM_R4))
    printf("BENCH opencl.chain4 maize_ns=%.0f raw_ns=%.0f ratio=%.3f rr_ns=%.0f maize_build_ns=%.0f ratio_with_build=%.3f"
           " maize_rerun_ns=%s ratio_rerun=%s\n",
           M4, R4, M4 / R4, RR4, build4 / reps, (M4 + build4 / reps) / R4, fmt_or_na(only & ARM_MR4, MR4, "%.0f", b3),
           fmt_or_na(only & ARM_MR4, MR4 / R4, "%.3f", b4));

  free(m1);
  free(r1);
  free(rc1);
  free(m4);
  free(r4);
  free(rr4);
  free(mr1);
  free(mr4);
  for (int c = 0; c < CHAINS; c++) {
    mz_buffer_release(bufs[c]);
    mz_kernel_destroy(scale[c]);
    mz_kernel_destroy(saxpy[c]);
  }
  mz_runtime_destroy(rt);
  raw_close(&r);
  return 0;
}
