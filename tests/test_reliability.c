/* test_reliability: regressions for the classes of issue 15, one mechanism
 * each.  Kernel and host-function return codes: every nonzero value fails
 * the node with MZ_EKERNEL and keeps the code in the message, never read
 * as an instruction to the runtime (-1000 and below alias its internal
 * codes).  User-supplied paths: a FIFO, /dev/zero or a directory is
 * refused with MZ_EINVAL instead of blocking or reading without end.
 * Numeric inputs: the DAG generators refuse huge widths and degrees fast.
 * Every wait is bounded and every test has a timeout, so a hang fails the
 * test that hangs, by name. */
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <maize/daggen.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "device_ops.h"
#include "perfmodel.h"

#define WAIT_NS 20000000000ull /* a generous bound: reaching it is a hang */

TestSuite(reliability, .timeout = 60);

/* ---- 1. return codes ---- */

static int ret_fn(const mz_call *c) {
  return *(const int *)c->user;
}

static const int codes[] = {-1000, -1001, -1002, -1003, -5000, INT_MIN, -999, -64, -1, 1, 5, INT_MAX,
                            MZ_ETIMEDOUT, MZ_ENOMEM, MZ_ECANCELED, MZ_EKERNEL};

static void check_status(mz_runtime *rt, mz_graph *g, mz_op *root, int code, const char *what) {
  mz_future *f = NULL;
  int rc = mz_schedule(g, root, NULL, &f);
  cr_assert_eq(rc, MZ_OK, "%s %d: schedule: %s", what, code, mz_runtime_last_error(rt));
  rc = mz_future_wait_for(f, WAIT_NS);
  cr_assert_neq(mz_future_poll(f), MZ_EAGAIN, "HANG: %s returning %d: the future did not resolve", what, code);
  cr_expect_eq(rc, MZ_EKERNEL, "%s returning %d: got %s", what, code, mz_err_name(rc));
  cr_expect_eq(mz_future_status(f), MZ_EKERNEL, "%s returning %d", what, code);
  char num[32];
  snprintf(num, sizeof num, "%d", code);
  const char *msg = mz_future_message(f);
  cr_expect(msg && strstr(msg, num), "%s returning %d: message '%s' lacks the code", what, code, msg ? msg : "");
  mz_future_destroy(f);
}

Test(reliability, kernel_return_codes_fail_with_ekernel) {
  mz_runtime *rt = test_runtime("cpu:2");
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    mz_kernel *k = test_kernel(rt, "ret", "inout i32[] v", ret_fn, (void *)&codes[i]);
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){1, 2, 3, 4});
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *a = mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_value(g, b)}), NULL);
    check_status(rt, g, a, codes[i], "kernel");
    mz_graph_destroy(g);
    mz_buffer_release(b);
    mz_kernel_destroy(k);
  }
  mz_runtime_destroy(rt);
}

Test(reliability, host_return_codes_fail_with_ekernel) {
  mz_runtime *rt = test_runtime("cpu:2");
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *h = mz_host(g, ret_fn, (void *)&codes[i], NULL);
    check_status(rt, g, h, codes[i], "host function");
    mz_graph_destroy(g);
  }
  mz_runtime_destroy(rt);
}

/* A dependent of a node that returned an internal-looking code is
 * canceled, and an independent branch still finishes. */
Test(reliability, kernel_code_cancels_dependents_only) {
  mz_runtime *rt = test_runtime("cpu:2");
  static const int bad = -1002;
  mz_kernel *k = test_kernel(rt, "ret", "inout i32[] v", ret_fn, (void *)&bad);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){1, 2, 3, 4});
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_value(g, b)}), NULL);
  mz_op *dep = mz_host(g, ret_fn, (void *)&(const int){0}, a);
  static const int zero = 0;
  mz_op *free_branch = mz_host(g, ret_fn, (void *)&zero, NULL);
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, free_branch, NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK);
  mz_future_destroy(f);
  MZ_OK_OR_DIE(rt, mz_schedule(g, dep, NULL, &f));
  int st = mz_future_wait_for(f, WAIT_NS);
  cr_expect(st == MZ_EKERNEL || st == MZ_ECANCELED, "got %s", mz_err_name(st));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- 2. user-supplied paths ---- */

static char tmpdir[64];

static const char *make_fifo(void) {
  static char path[128];
  snprintf(tmpdir, sizeof tmpdir, "/tmp/mz-rel-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
  snprintf(path, sizeof path, "%s/fifo", tmpdir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  return path;
}

static void drop_fifo(const char *path) {
  unlink(path);
  rmdir(tmpdir);
}

Test(reliability, code_paths_refuse_non_regular_files) {
  const char *fifo = make_fifo();
  const char *bad[] = {fifo, "/dev/zero", "/tmp"};
  for (size_t i = 0; i < 3; i++) {
    char *data = NULL, *err = NULL;
    size_t size = 0;
    int rc = mz__code_load(&(mz_code_spec){.path = bad[i]}, &data, &size, &err);
    cr_expect_eq(rc, MZ_EINVAL, "%s: got %s", bad[i], mz_err_name(rc));
    cr_expect(err && strstr(err, "not a regular file"), "%s: message '%s'", bad[i], err ? err : "");
    cr_expect_null(data);
    free(err);
    free(data);
  }
  drop_fifo(fifo);
}

/* The same refusal through the public API: a CPU-only runtime never
 * builds OpenCL code, so the kernel is built on an OpenCL device when
 * there is one; the internal loader above covers the rest. */
Test(reliability, perfmodel_paths_refuse_non_regular_files) {
  const char *fifo = make_fifo();
  const char *bad[] = {fifo, "/dev/zero", "/tmp"};
  for (size_t i = 0; i < 3; i++) {
    struct mz__pm_file f;
    char err[256] = "";
    int rc = mz__pm_read(bad[i], &f, err, sizeof err);
    cr_expect_eq(rc, MZ_EINVAL, "%s: got %s", bad[i], mz_err_name(rc));
    cr_expect(strstr(err, "not a regular file"), "%s: message '%s'", bad[i], err);
    char src[64], dst[64];
    double lat, pb;
    rc = mz__link_read(bad[i], src, dst, sizeof src, &lat, &pb, err, sizeof err);
    cr_expect_eq(rc, MZ_EINVAL, "link %s: got %s", bad[i], mz_err_name(rc));
  }
  drop_fifo(fifo);
}

/* ---- 3. numeric inputs ---- */

/* Huge widths and degrees are refused before any work: each case used to
 * run for minutes (2 * out_degree - 1 wrapped at 2^31). */
Test(reliability, daggen_refuses_huge_parameters, .timeout = 20) {
  mz_runtime *rt = test_runtime("cpu:1");
  const mz_dag_params bad[] = {
      {.shape = MZ_DAG_RANDOM, .out_degree = 1u << 31},
      {.shape = MZ_DAG_RANDOM, .out_degree = UINT_MAX},
      {.shape = MZ_DAG_RANDOM, .nodes = UINT_MAX},
      {.shape = MZ_DAG_RANDOM, .nodes = 1000, .ccr = INFINITY},
      {.shape = MZ_DAG_RANDOM, .nodes = 1000, .ccr = NAN},
      {.shape = MZ_DAG_RANDOM, .nodes = 1000, .alpha = 1e-300},
      {.shape = MZ_DAG_CHAIN, .tiles = 1u << 31},
      {.shape = MZ_DAG_FORKJOIN, .tiles = 1u << 31},
      {.shape = MZ_DAG_FORKJOIN, .tiles = 1u << 20, .steps = 1u << 20},
      {.shape = MZ_DAG_STENCIL, .tiles = UINT_MAX, .steps = UINT_MAX},
      {.shape = MZ_DAG_CHOLESKY, .tiles = 1u << 31},
      {.shape = MZ_DAG_LU, .tiles = 100000},
      {.shape = MZ_DAG_CHAIN, .tile_bytes = SIZE_MAX},
      {.shape = (mz_dag_shape)99},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mz_dag *d = (mz_dag *)1;
    int rc = mz_dag_generate(rt, &bad[i], &d);
    cr_expect_eq(rc, MZ_EINVAL, "case %zu: got %s", i, mz_err_name(rc));
    cr_expect_null(d, "case %zu", i);
    cr_expect(strstr(mz_runtime_last_error(rt), "mz_dag_generate"), "case %zu: message '%s'", i,
              mz_runtime_last_error(rt));
    if (rc == MZ_OK) mz_dag_destroy(d);
  }
  /* In range still works. */
  mz_dag *d = NULL;
  MZ_OK_OR_DIE(rt, mz_dag_generate(rt, &(mz_dag_params){.shape = MZ_DAG_RANDOM, .nodes = 50, .out_degree = 1024}, &d));
  mz_dag_destroy(d);
  mz_runtime_destroy(rt);
}
