/* test_reliability: regressions for the bad inputs an attacker found, one mechanism
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
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

static int nop_fn(const mz_call *c) {
  (void)c;
  return 0;
}

/* Scalars, given or computed, that do not fit the parameter's type are
 * refused instead of truncated. */
Test(reliability, narrowed_scalars_refused) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *big = test_buffer_1d(rt, MZ_U8, 300, NULL), *small = test_buffer_1d(rt, MZ_U8, 100, NULL);
  mz_buffer *b2 = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_U8, 2, (size_t[]){3, 70000}, NULL, &b2));
  struct {
    const char *params;
    mz_buffer *b;
    int want;
  } cases[] = {
      {"in u8[] x, i8 n = sizeof(x)", big, MZ_ESHAPE},     {"in u8[] x, u8 n = sizeof(x)", big, MZ_ESHAPE},
      {"in u8[] x, i8 n = sizeof(x)", small, MZ_OK},       {"in u8[] x, u16 n = heightof(x)", b2, MZ_ESHAPE},
      {"in u8[] x, i16 n = heightof(x)", b2, MZ_ESHAPE},   {"in u8[] x, i32 n = heightof(x)", b2, MZ_OK},
      {"in u8[] x, u8 n = widthof(x)", b2, MZ_OK},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mz_kernel *k = test_kernel(rt, "nop", cases[i].params, nop_fn, NULL);
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_value(g, cases[i].b)}), NULL);
    cr_expect_eq(mz_graph_status(g), cases[i].want, "'%s': got %s (%s)", cases[i].params,
                 mz_err_name(mz_graph_status(g)), mz_graph_message(g));
    if (cases[i].want) cr_expect(strstr(mz_graph_message(g), "does not fit"), "%s", mz_graph_message(g));
    mz_graph_destroy(g);
    mz_kernel_destroy(k);
  }
  /* Given scalars: out of the parameter's range, and negative to unsigned. */
  struct {
    const char *params;
    int64_t v;
    int want;
  } given[] = {{"i8 a", 128, MZ_ESHAPE}, {"i8 a", -129, MZ_ESHAPE}, {"i8 a", -128, MZ_OK},
               {"u8 a", -1, MZ_ESHAPE},  {"u16 a", 65536, MZ_ESHAPE}, {"u32 a", -5, MZ_ESHAPE},
               {"i32 a", INT64_MAX, MZ_ESHAPE}, {"u64 a", -1, MZ_ESHAPE}, {"i64 a", INT64_MIN, MZ_OK}};
  for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
    mz_kernel *k = test_kernel(rt, "nop", given[i].params, nop_fn, NULL);
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_i64(g, given[i].v)}), NULL);
    cr_expect_eq(mz_graph_status(g), given[i].want, "'%s' given %lld: got %s (%s)", given[i].params,
                 (long long)given[i].v, mz_err_name(mz_graph_status(g)), mz_graph_message(g));
    mz_graph_destroy(g);
    mz_kernel_destroy(k);
  }
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_kernel *k = test_kernel(rt, "nop", "u32 a", nop_fn, NULL);
  mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_u64(g, UINT64_MAX)}), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_ESHAPE);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(big);
  mz_buffer_release(small);
  mz_buffer_release(b2);
  mz_runtime_destroy(rt);
}

/* ---- 4. parameter strings and shapes ---- */

Test(reliability, param_syntax_errors_refused) {
  mz_runtime *rt = test_runtime("cpu:1");
  const char *bad[] = {"in f32[garbage] x", "in f32[4] x", "in f32[0] x", "in f32[ 1 2 ] x", "f32 a,",
                       "f32 a, ", "in f32[] x,", "in f32[-1] x", "in f32[[]] x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mz_kernel *k = NULL;
    int rc = mz_kernel_create(rt, &(mz_kernel_spec){.name = "k", .params = bad[i], .cpu = {.fn = nop_fn}}, &k);
    cr_expect_eq(rc, MZ_EINVAL, "'%s' accepted", bad[i]);
    cr_expect_null(k);
    cr_expect_gt(strlen(mz_runtime_last_error(rt)), 0);
    mz_kernel_destroy(k);
  }
  const char *good[] = {"in f32[] x", "in f32[ ] x", "in f32[2] x", "inout f32[3] y, u64 n = sizeof(y)"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    mz_kernel *k = NULL;
    int rc = mz_kernel_create(rt, &(mz_kernel_spec){.name = "k", .params = good[i], .cpu = {.fn = nop_fn}}, &k);
    cr_expect_eq(rc, MZ_OK, "'%s' refused: %s", good[i], mz_runtime_last_error(rt));
    mz_kernel_destroy(k);
  }
  mz_runtime_destroy(rt);
}

Test(reliability, buffer_dims_must_match_kernel) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k2 = test_kernel(rt, "k2", "inout f32[2] m", nop_fn, NULL);
  mz_buffer *v = test_buffer_1d(rt, MZ_F32, 16, NULL), *m = NULL;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){4, 4}, NULL, &m));
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k2, mz_zip(g, 1, (mz_op *[]){mz_value(g, v)}), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_ESHAPE);
  cr_expect(strstr(mz_graph_message(g), "dims"), "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_apply(g, k2, mz_zip(g, 1, (mz_op *[]){mz_value(g, m)}), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, a, NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(v);
  mz_buffer_release(m);
  mz_kernel_destroy(k2);
  mz_runtime_destroy(rt);
}

/* Launch sizes no device can take are refused when the op is built (a
 * huge global size ran for minutes on PoCL; CUDA truncated it). */
Test(reliability, bad_launch_sizes_refused) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "nop", "inout f32[] v", nop_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, 16, NULL);
  const mz_launch bad[] = {
      {.ndim = 1, .global = {SIZE_MAX}},
      {.ndim = 1, .global = {(size_t)1 << 32}},
      {.ndim = 2, .global = {16, 0}},
      {.ndim = 3, .global = {1 << 20, 1 << 20, 1}},
      {.ndim = 3, .global = {1 << 16, 1 << 16, 1 << 16}},
      {.ndim = 1, .global = {16}, .local = {SIZE_MAX}},
      {.ndim = 0, .global = {16}},
      {.ndim = 4, .global = {16}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_apply(g, k, mz_value(g, b), &bad[i]);
    cr_expect_eq(mz_graph_status(g), MZ_EINVAL, "case %zu: got %s", i, mz_err_name(mz_graph_status(g)));
    mz_graph_destroy(g);
  }
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_apply(g, k, mz_value(g, b), &(mz_launch){.ndim = 2, .global = {1 << 16, 1 << 16}, .local = {16, 16}});
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- 5. memory limits ---- */

static int inc32_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; v && i < c->shapes[0].count; i++) v[i] += 1;
  return 0;
}

/* A limit smaller than one buffer fails the op that needs it with
 * MZ_ENOMEM, under every policy, instead of waiting or running. */
Test(reliability, memlimit_below_one_buffer_fails_enomem) {
  const char *policies[] = {"eager", "dmda", "round-robin", "heft", "single", "ws", "dmdas"};
  const char *limits[] = {"1K", "4095", "1"};
  for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++)
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
      setenv("MZ_LIMIT_SIM_MEM", limits[l], 1);
      mz_runtime *rt = test_runtime("sim:dev*2");
      unsetenv("MZ_LIMIT_SIM_MEM");
      mz_kernel *k = test_kernel(rt, "inc", "inout i32[] v", inc32_fn, NULL);
      mz_buffer *b = test_buffer_1d(rt, MZ_I32, 1024, NULL); /* 4 KiB */
      mz_graph *g = NULL;
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
      mz_op *a = mz_apply(g, k, mz_value(g, b), NULL);
      mz_future *f = NULL;
      MZ_OK_OR_DIE(rt, mz_schedule(g, a, policies[p], &f));
      int st = mz_future_wait_for(f, WAIT_NS);
      cr_expect_eq(st, MZ_ENOMEM, "limit %s, %s: got %s (%s)", limits[l], policies[p], mz_err_name(st),
                   mz_future_message(f));
      mz_future_destroy(f);
      mz_graph_destroy(g);
      mz_buffer_release(b);
      mz_kernel_destroy(k);
      mz_runtime_destroy(rt);
    }
}

/* MZ_LIMIT_* as the README documents it: bytes with K, M or G; anything
 * else is refused by mz_runtime_create (a fraction read as no limit). */
Test(reliability, limit_and_devices_env_parsing) {
  const char *bad[] = {"0.5", "1e3", "0x10", " 64M", "+64M", "-1", "64Q", "0", "inf", "nan", "1.5K", "64M ",
                       "99999999999999999999G", "17179869184G"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("MZ_LIMIT_SIM_MEM", bad[i], 1);
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = "sim:dev*1", .quiet = true}, &rt);
    unsetenv("MZ_LIMIT_SIM_MEM");
    cr_expect_eq(rc, MZ_EINVAL, "MZ_LIMIT_SIM_MEM='%s': got %s", bad[i], mz_err_name(rc));
    mz_runtime_destroy(rt);
  }
  const char *good[] = {"64M", "64MB", "1", "16k", "2G"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("MZ_LIMIT_SIM_MEM", good[i], 1);
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = "sim:dev*1", .quiet = true}, &rt);
    unsetenv("MZ_LIMIT_SIM_MEM");
    cr_expect_eq(rc, MZ_OK, "MZ_LIMIT_SIM_MEM='%s': got %s", good[i], mz_err_name(rc));
    mz_runtime_destroy(rt);
  }
  const char *baddev[] = {"cpu:+2", "cpu: 2", "cpu:0", "cpu:1025", "cpu:2x", "cpu:"};
  for (size_t i = 0; i < sizeof baddev / sizeof baddev[0]; i++) {
    mz_runtime *rt = NULL;
    int rc = mz_runtime_create(&(mz_runtime_config){.devices = baddev[i], .quiet = true}, &rt);
    cr_expect_lt(rc, 0, "MZ_DEVICES='%s' accepted", baddev[i]);
    mz_runtime_destroy(rt);
  }
}

/* ---- poisoned buffers across graphs ---- */

static int mix32_fn(const mz_call *c) {
  const int32_t *x = c->args[0].p;
  int32_t *y = c->args[1].p;
  for (size_t i = 0; i < c->shapes[1].count; i++) y[i] += x[i];
  return 0;
}

/* A buffer whose last writer failed is not read by a later graph as if
 * fine: the reader is canceled (and poisons what it writes) until
 * mz_buffer_write replaces the data. */
Test(reliability, poisoned_buffer_cancels_later_readers) {
  mz_runtime *rt = test_runtime("cpu:2");
  static const int one = 1;
  mz_kernel *bad = test_kernel(rt, "bad", "inout i32[] v", ret_fn, (void *)&one);
  mz_kernel *mix = test_kernel(rt, "mix", "in i32[] x, inout i32[] y", mix32_fn, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){1, 2, 3, 4});
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){0, 0, 0, 0});
  mz_graph *g = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, bad, mz_value(g, a), NULL), NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_EKERNEL);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *m = mz_apply(g, mix, mz_zip(g, 2, (mz_op *[]){mz_value(g, a), mz_value(g, b)}), NULL);
  MZ_OK_OR_DIE(rt, mz_schedule(g, m, NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_ECANCELED, "a later graph read the poisoned buffer as fine");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  int32_t out[4];
  cr_expect_lt(mz_buffer_read(b, out, sizeof out), 0, "b was computed from poisoned data");
  /* mz_buffer_write clears it. */
  MZ_OK_OR_DIE(rt, mz_buffer_write(a, (int32_t[]){1, 1, 1, 1}, 16));
  MZ_OK_OR_DIE(rt, mz_buffer_write(b, (int32_t[]){0, 0, 0, 0}, 16));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  m = mz_apply(g, mix, mz_zip(g, 2, (mz_op *[]){mz_value(g, a), mz_value(g, b)}), NULL);
  MZ_OK_OR_DIE(rt, mz_schedule(g, m, NULL, &f));
  cr_expect_eq(mz_future_wait_for(f, WAIT_NS), MZ_OK);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  cr_expect_eq(out[3], 1);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(bad);
  mz_kernel_destroy(mix);
  mz_runtime_destroy(rt);
}

/* ---- failures across runs: the same whether the failed run is still in
 * flight or finished ---- */

static int gated_fail_fn(const mz_call *c) {
  _Atomic int *gate = c->user;
  (void)test_wait_flag(gate, 20000);
  return 1;
}

static int set7_fn(const mz_call *c) {
  int32_t *a = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) a[i] = 7;
  return 0;
}

enum cross_case { CROSS_WAR, CROSS_WAW, CROSS_RAW };

/* Run A: an op that reads x and writes a, and fails.  Run B, scheduled
 * while A is in flight or after it ended: overwrites x (write after read:
 * runs), writes a whole (write after write: runs), or reads a (read after
 * write: canceled, and what it writes is poisoned). */
static void cross_run_case(bool in_flight, enum cross_case which) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int gate = 0;
  mz_kernel *fail = test_kernel(rt, "gated_fail", "in i32[] x, inout i32[] a", gated_fail_fn, (void *)&gate);
  mz_kernel *inc = test_kernel(rt, "inc", "inout i32[] v", inc32_fn, NULL);
  mz_kernel *set = test_kernel(rt, "set7", "out i32[] v", set7_fn, NULL);
  mz_kernel *mix = test_kernel(rt, "mix", "in i32[] x, inout i32[] y", mix32_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){1, 2, 3, 4});
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){0, 0, 0, 0});
  mz_buffer *y = test_buffer_1d(rt, MZ_I32, 4, (int32_t[]){0, 0, 0, 0});
  mz_graph *ga = NULL, *gb = NULL;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &ga));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &gb));
  mz_future *fa = NULL, *fb = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(ga, mz_apply(ga, fail, mz_zip(ga, 2, (mz_op *[]){mz_value(ga, x), mz_value(ga, a)}), NULL),
                               NULL, &fa));
  if (!in_flight) {
    atomic_store(&gate, 1);
    cr_assert_eq(mz_future_wait_for(fa, WAIT_NS), MZ_EKERNEL);
  }
  mz_op *b = which == CROSS_WAR   ? mz_apply(gb, inc, mz_value(gb, x), NULL)
             : which == CROSS_WAW ? mz_apply(gb, set, mz_value(gb, a), NULL)
                                  : mz_apply(gb, mix, mz_zip(gb, 2, (mz_op *[]){mz_value(gb, a), mz_value(gb, y)}), NULL);
  MZ_OK_OR_DIE(rt, mz_schedule(gb, b, NULL, &fb));
  atomic_store(&gate, 1);
  const char *order = in_flight ? "run A in flight" : "run A finished";
  cr_expect_eq(mz_future_wait_for(fa, WAIT_NS), MZ_EKERNEL, "%s", order);
  int st = mz_future_wait_for(fb, WAIT_NS);
  int32_t out[4];
  if (which == CROSS_WAR) {
    cr_expect_eq(st, MZ_OK, "%s: overwriting what a failed op read: %s", order, mz_err_name(st));
    MZ_OK_OR_DIE(rt, mz_buffer_read(x, out, sizeof out));
    cr_expect_eq(out[3], 5, "%s", order);
    cr_expect_lt(mz_buffer_read(a, out, sizeof out), 0, "%s", order);
  } else if (which == CROSS_WAW) {
    cr_expect_eq(st, MZ_OK, "%s: writing whole what a failed op wrote: %s", order, mz_err_name(st));
    MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
    cr_expect_eq(out[0], 7, "%s", order);
  } else {
    cr_expect_eq(st, MZ_ECANCELED, "%s: reading what a failed op wrote: %s", order, mz_err_name(st));
    cr_expect_eq(mz_buffer_read(y, out, sizeof out), MZ_ECANCELED, "%s", order);
  }
  mz_future_destroy(fa);
  mz_future_destroy(fb);
  mz_graph_destroy(ga);
  mz_graph_destroy(gb);
  mz_buffer_release(x);
  mz_buffer_release(a);
  mz_buffer_release(y);
  mz_kernel_destroy(fail);
  mz_kernel_destroy(inc);
  mz_kernel_destroy(set);
  mz_kernel_destroy(mix);
  mz_runtime_destroy(rt);
}

Test(reliability, cross_run_war_in_flight) { cross_run_case(true, CROSS_WAR); }
Test(reliability, cross_run_war_finished) { cross_run_case(false, CROSS_WAR); }
Test(reliability, cross_run_waw_in_flight) { cross_run_case(true, CROSS_WAW); }
Test(reliability, cross_run_waw_finished) { cross_run_case(false, CROSS_WAW); }
Test(reliability, cross_run_raw_in_flight) { cross_run_case(true, CROSS_RAW); }
Test(reliability, cross_run_raw_finished) { cross_run_case(false, CROSS_RAW); }

/* ---- a policy whose init or plan fails ---- */

static int pol_select0(void *st, const mz_sched *s, mz_task *t, bool ready) {
  (void)st, (void)s, (void)t, (void)ready;
  return 0;
}
#define INIT_RETURNING(fn, v)                        \
  static int fn(const mz_sched *s, void **state) {   \
    (void)s, (void)state;                            \
    return (v);                                      \
  }
INIT_RETURNING(init_enomem, MZ_ENOMEM)
INIT_RETURNING(init_one, 1)
INIT_RETURNING(init_defer, MZ_POLICY_DEFER)
INIT_RETURNING(init_intmin, INT_MIN)
#define PLAN_RETURNING(fn, v)                                                      \
  static int fn(void *st, const mz_sched *s, mz_task *const tasks[], size_t n) { \
    (void)st, (void)s, (void)tasks, (void)n;                                       \
    return (v);                                                                    \
  }
PLAN_RETURNING(plan_einval, MZ_EINVAL)
PLAN_RETURNING(plan_defer, MZ_POLICY_DEFER)
PLAN_RETURNING(plan_intmin, INT_MIN)
PLAN_RETURNING(plan_minus_one_thousand_and_two, -1002)

static const struct {
  struct mz_policy_ops ops;
  int returned, want; /* what init or plan returns, what the caller gets */
} bad_policies[] = {
    {{MZ_POLICY_ABI, "init-enomem", NULL, init_enomem, NULL, NULL, pol_select0, NULL, NULL}, MZ_ENOMEM, MZ_ENOMEM},
    {{MZ_POLICY_ABI, "init-one", NULL, init_one, NULL, NULL, pol_select0, NULL, NULL}, 1, MZ_EPOLICY},
    {{MZ_POLICY_ABI, "init-defer", NULL, init_defer, NULL, NULL, pol_select0, NULL, NULL}, MZ_POLICY_DEFER, MZ_EPOLICY},
    {{MZ_POLICY_ABI, "init-intmin", NULL, init_intmin, NULL, NULL, pol_select0, NULL, NULL}, INT_MIN, MZ_EPOLICY},
    {{MZ_POLICY_ABI, "plan-einval", NULL, NULL, NULL, plan_einval, pol_select0, NULL, NULL}, MZ_EINVAL, MZ_EINVAL},
    {{MZ_POLICY_ABI, "plan-defer", NULL, NULL, NULL, plan_defer, pol_select0, NULL, NULL}, MZ_POLICY_DEFER, MZ_EPOLICY},
    {{MZ_POLICY_ABI, "plan-intmin", NULL, NULL, NULL, plan_intmin, pol_select0, NULL, NULL}, INT_MIN, MZ_EPOLICY},
    {{MZ_POLICY_ABI, "plan-m1002", NULL, NULL, NULL, plan_minus_one_thousand_and_two, pol_select0, NULL, NULL}, -1002,
     MZ_EPOLICY},
};

static int count_fn(const mz_call *c) {
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

/* policy.h: a failing init fails the mz_schedule that first uses the
 * policy (no future); a failing plan fails the run (the future resolves
 * with the code) and no node starts.  Either way the code is the one
 * returned when it is an MZ_E* code, MZ_EPOLICY otherwise, and the message
 * names the policy and the value. */
Test(reliability, policy_init_and_plan_errors_reported) {
  for (size_t i = 0; i < sizeof bad_policies / sizeof bad_policies[0]; i++) {
    const struct mz_policy_ops *ops = &bad_policies[i].ops;
    int want = bad_policies[i].want;
    mz_runtime *rt = test_runtime("cpu:2");
    MZ_OK_OR_DIE(rt, mz_policy_register(rt, ops));
    _Atomic int ran = 0;
    mz_kernel *k = test_kernel(rt, "count", "inout i32[] v", count_fn, (void *)&ran);
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
    mz_graph *g = NULL;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *root = mz_apply(g, k, mz_value(g, b), NULL);
    char num[32];
    snprintf(num, sizeof num, "%d", bad_policies[i].returned);
    for (int round = 0; round < 2; round++) { /* and again: init is retried, plan runs each time */
      mz_future *f = NULL;
      int rc = mz_schedule(g, root, ops->name, &f);
      const char *msg;
      if (ops->init) {
        cr_expect_eq(rc, want, "%s: mz_schedule gave %s", ops->name, mz_err_name(rc));
        cr_expect_null(f, "%s: a future after a failed init", ops->name);
        msg = mz_runtime_last_error(rt);
      } else {
        cr_assert_eq(rc, MZ_OK, "%s: %s", ops->name, mz_runtime_last_error(rt));
        rc = mz_future_wait_for(f, WAIT_NS);
        cr_expect_eq(rc, want, "%s: the run gave %s", ops->name, mz_err_name(rc));
        msg = mz_future_message(f);
      }
      cr_expect(msg && strstr(msg, ops->name), "%s: the message '%s' does not name the policy", ops->name,
                msg ? msg : "");
      cr_expect(msg && strstr(msg, num), "%s: the message '%s' lacks the value %s", ops->name, msg ? msg : "", num);
      mz_future_destroy(f);
      if (round == 0) {
        mz_graph_destroy(g);
        MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
        root = mz_apply(g, k, mz_value(g, b), NULL);
      }
    }
    cr_expect_eq(atomic_load(&ran), 0, "%s: a node ran", ops->name);
    /* The runtime still works with another policy (on data written anew:
     * a failed plan cancels the nodes, and b's canceled writer poisons it). */
    MZ_OK_OR_DIE(rt, mz_buffer_write(b, (int32_t[]){0, 0, 0, 0}, 16));
    mz_graph_destroy(g);
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    MZ_OK_OR_DIE(rt, test_run(g, mz_apply(g, k, mz_value(g, b), NULL), "eager", NULL));
    cr_expect_eq(atomic_load(&ran), 1);
    mz_graph_destroy(g);
    mz_buffer_release(b);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* ---- runtime creation never moves the calling thread ---- */

/* hwloc binds threads through sched_setaffinity: this definition stands in
 * for libc's (the executable's symbol comes first), counts the calls that
 * move the watched thread, and does the call. */
static _Atomic pid_t watched_tid;
static _Atomic int watched_moves;

int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *mask) {
  pid_t self = (pid_t)syscall(SYS_gettid), target = pid ? pid : self;
  if (target == atomic_load(&watched_tid)) atomic_fetch_add(&watched_moves, 1);
  return (int)syscall(SYS_sched_setaffinity, pid, size, mask);
}

static _Atomic int spin_stop;

static void *spin_main(void *arg) {
  (void)arg;
  volatile unsigned long x = 0;
  while (!atomic_load_explicit(&spin_stop, memory_order_relaxed)) x++;
  return NULL;
}

struct create_job {
  _Atomic int done;
  int rc;
  mz_runtime *rt;
  cpu_set_t before, after;
  int moves;
};

static void *create_main(void *arg) {
  struct create_job *j = arg;
  sched_getaffinity(0, sizeof j->before, &j->before);
  atomic_store(&watched_moves, 0);
  atomic_store(&watched_tid, (pid_t)syscall(SYS_gettid));
  j->rc = mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true}, &j->rt);
  atomic_store(&watched_tid, 0);
  j->moves = atomic_load(&watched_moves);
  sched_getaffinity(0, sizeof j->after, &j->after);
  atomic_store(&j->done, 1);
  return NULL;
}

/* mz_runtime_create with every CPU kept busy by spinning threads: it must
 * not bind the calling thread (hwloc, unless told not to, moves it across
 * every core to read them, which stalled creation for 17 to 123 s on a
 * busy machine), its affinity mask is the same after, and it completes
 * within a bound that only a stall reaches.  Twice: with the caller free
 * to run anywhere, and pinned to one CPU. */
Test(reliability, runtime_create_leaves_the_caller_in_place, .timeout = 120) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  pthread_t spin[64];
  long nspin = ncpu < 64 ? ncpu : 64;
  atomic_store(&spin_stop, 0);
  for (long i = 0; i < nspin; i++) cr_assert_eq(pthread_create(&spin[i], NULL, spin_main, NULL), 0);
  for (int pinned = 0; pinned < 2; pinned++) {
    struct create_job j = {0};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pinned) {
      cpu_set_t all, one;
      sched_getaffinity(0, sizeof all, &all);
      CPU_ZERO(&one);
      for (int c = CPU_SETSIZE - 1; c >= 0; c--)
        if (CPU_ISSET(c, &all)) {
          CPU_SET(c, &one); /* the last allowed CPU: not where worker 0 goes */
          break;
        }
      pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    pthread_t th;
    cr_assert_eq(pthread_create(&th, &attr, create_main, &j), 0);
    pthread_attr_destroy(&attr);
    bool done = test_wait_flag(&j.done, 60000);
    cr_assert(done, "HANG: mz_runtime_create did not return in 60 s with the CPUs busy (pinned %d)", pinned);
    pthread_join(th, NULL);
    cr_expect_eq(j.rc, MZ_OK, "%s", mz_err_name(j.rc));
    cr_expect_eq(j.moves, 0, "mz_runtime_create bound the calling thread %d times (pinned %d)", j.moves, pinned);
    cr_expect(CPU_EQUAL(&j.before, &j.after), "the calling thread's affinity changed (pinned %d)", pinned);
    mz_runtime_destroy(j.rt);
  }
  atomic_store(&spin_stop, 1);
  for (long i = 0; i < nspin; i++) pthread_join(spin[i], NULL);
}
