/* Device-level calls: the limits device info reports (work-group size,
 * largest allocation, local memory, fp64) on the CPU and PoCL; building a
 * kernel now (mz_kernel_build) with its build log, before any run; a
 * runtime with more than 64 OpenCL devices (PoCL "basic" devices, from
 * POCL_DEVICES set in the test's own process) building on the last one;
 * and a user policy as the runtime's default through the config and
 * MZ_POLICY.  OpenCL tests are skipped, saying why, without PoCL. */
#include "common.h"
#include "policy_table.h"

TestSuite(devices, .timeout = 300);

static mz_runtime *runtime_or_skip(const char *devices) {
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(&(mz_runtime_config){.devices = devices, .quiet = true, .opencl_queues = 1}, &rt);
  if (rc != MZ_OK && strstr(devices, "opencl"))
    cr_skip_test("no OpenCL device (%s): install pocl-opencl-icd", mz_err_name(rc));
  cr_assert_eq(rc, MZ_OK, "mz_runtime_create(%s): %s", devices, mz_err_name(rc));
  return rt;
}

static const char good_src[] =
    "__kernel void twice(__global float *y, ulong n) { size_t i = get_global_id(0); if (i < n) y[i] *= 2.0f; }\n";
static const char bad_src[] = "__kernel void twice(__global float *y, ulong n) { y[0] = undeclared_thing; }\n";

static mz_kernel *cl_kernel(mz_runtime *rt, const char *name, const char *src, const char *path) {
  mz_kernel_spec s = {.name = name,
                      .params = "inout f32[] y, u64 n = sizeof(y)",
                      .opencl = {.format = MZ_CODE_SOURCE, .data = src, .path = path, .entry = "twice"}};
  mz_kernel *k = NULL;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &s, &k));
  return k;
}

static int nop(const mz_call *c) {
  (void)c;
  return MZ_OK;
}

Test(devices, limits) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0");
  mz_device_info cpu, cl;
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 0), &cpu));
  MZ_OK_OR_DIE(rt, mz_device_get_info(mz_runtime_device(rt, 1), &cl));
  cr_assert_eq(cpu.kind, MZ_DEVICE_CPU);
  cr_assert(cpu.max_alloc > 0 && cpu.fp64);
  cr_assert_eq(cpu.max_work_group, 0, "the CPU has no work-groups");
  cr_assert_eq(cl.kind, MZ_DEVICE_OPENCL);
  cr_assert(cl.max_work_group >= 1, "max work-group %zu", cl.max_work_group);
  cr_assert(cl.max_alloc > 0 && cl.max_alloc <= cl.memory, "max alloc %llu of %llu", (unsigned long long)cl.max_alloc,
            (unsigned long long)cl.memory);
  cr_assert(cl.local_memory > 0, "PoCL has local memory");
  cr_assert(cl.fp64, "PoCL's CPU device has cl_khr_fp64");
  mz_runtime_destroy(rt);
}

Test(devices, kernel_build_now) {
  mz_runtime *rt = runtime_or_skip("cpu,opencl:0");
  mz_device *cl = mz_runtime_device(rt, 1);
  char *log = (char *)1;
  mz_kernel *good = cl_kernel(rt, "good", good_src, NULL);
  cr_assert_eq(mz_kernel_build(good, cl, &log), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_assert_null(log);
  cr_assert_eq(mz_kernel_build(good, NULL, NULL), MZ_OK);

  /* A compile error: MZ_EBUILD now, with the device's name and its log. */
  mz_kernel *bad = cl_kernel(rt, "bad", bad_src, NULL);
  cr_assert_eq(mz_kernel_build(bad, NULL, &log), MZ_EBUILD);
  cr_assert_not_null(log);
  cr_assert(strstr(log, "undeclared_thing"), "the build log names the error: %s", log);
  mz_device_info info;
  MZ_OK_OR_DIE(rt, mz_device_get_info(cl, &info));
  cr_assert(strstr(log, info.name), "the log names the device: %s", log);
  free(log);
  /* A run of it fails the same way. */
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, 16, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_assert_eq(test_run(g, mz_unzip(g, mz_apply(g, bad, mz_value(g, b), NULL), 0), NULL, NULL), MZ_EBUILD);
  mz_graph_destroy(g);

  /* A missing file: MZ_EIO. */
  mz_kernel *gone = cl_kernel(rt, "gone", NULL, "/nonexistent/maize-kernel.cl");
  cr_assert_eq(mz_kernel_build(gone, cl, &log), MZ_EIO);
  cr_assert(log && strstr(log, "maize-kernel.cl"), "%s", log ? log : "(null)");
  free(log);

  /* A CPU-only kernel: nothing to build on the CPU; no code for OpenCL. */
  mz_kernel *c = test_kernel(rt, "cpu_only", "inout f32[] y", nop, NULL);
  cr_assert_eq(mz_kernel_build(c, NULL, &log), MZ_OK);
  cr_assert_eq(mz_kernel_build(c, mz_runtime_device(rt, 0), NULL), MZ_OK);
  cr_assert_eq(mz_kernel_build(c, cl, &log), MZ_ENOTSUP);
  cr_assert_null(log);
  cr_assert_eq(mz_kernel_build(NULL, cl, &log), MZ_EINVAL);

  /* A device of another runtime. */
  mz_runtime *rt2 = runtime_or_skip("cpu");
  cr_assert_eq(mz_kernel_build(good, mz_runtime_device(rt2, 0), NULL), MZ_EINVAL);
  mz_runtime_destroy(rt2);

  mz_buffer_release(b);
  mz_kernel_destroy(good);
  mz_kernel_destroy(bad);
  mz_kernel_destroy(gone);
  mz_kernel_destroy(c);
  mz_runtime_destroy(rt);
}

/* 66 OpenCL devices: a kernel builds and runs on the last one (it used to
 * fail with MZ_ERANGE past a fixed table of 64). */
Test(devices, more_than_64_opencl_devices, .timeout = 300) {
  char env[66 * 6 + 1] = "";
  for (int i = 0; i < 66; i++) strcat(env, i ? " basic" : "basic");
  setenv("POCL_DEVICES", env, 1);
  mz_runtime *rt = runtime_or_skip("opencl");
  unsigned n = mz_runtime_device_count(rt);
  if (n < 66) cr_skip_test("PoCL gave %u devices for 66 \"basic\" entries", n);
  mz_kernel *k = cl_kernel(rt, "good", good_src, NULL);
  mz_device *last = mz_runtime_device(rt, n - 1);
  char *log = NULL;
  cr_assert_eq(mz_kernel_build(k, last, &log), MZ_OK, "device %u: %s", n - 1, log ? log : "");
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* A user policy (here the shipped eager under another name) as the
 * default: through mz_runtime_config.policy and through MZ_POLICY. */
Test(devices, user_policy_as_default) {
  struct mz_policy_ops mine = *mz__builtin_policies[0];
  mine.name = "mine";
  const struct mz_policy_ops *const list[] = {&mine, NULL};
  mz_runtime *rt = NULL;
  MZ_OK_OR_DIE(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true, .policy = "mine",
                                                          .policies = list},
                                     &rt));
  cr_assert_str_eq(mz_runtime_policy(rt), "mine");
  mz_kernel *k = test_kernel(rt, "nop", "inout f32[] y", nop, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_F32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_assert_eq(test_run(g, mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0), NULL, NULL), MZ_OK);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);

  setenv("MZ_POLICY", "mine", 1);
  MZ_OK_OR_DIE(rt, mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true, .policies = list}, &rt));
  cr_assert_str_eq(mz_runtime_policy(rt), "mine");
  mz_runtime_destroy(rt);
  /* Without the table, MZ_POLICY=mine names nothing. */
  rt = NULL;
  cr_assert_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true}, &rt), MZ_ENOENT);
  cr_assert_null(rt);
  unsetenv("MZ_POLICY");

  /* A table the registry refuses fails creation. */
  struct mz_policy_ops bad = mine;
  bad.abi = 0;
  const struct mz_policy_ops *const badlist[] = {&bad, NULL};
  cr_assert_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .quiet = true, .policies = badlist}, &rt),
               MZ_EINVAL);
  cr_assert_null(rt);
}
