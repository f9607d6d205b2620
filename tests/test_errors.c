/* test_errors: every error path of the public API.
 *
 * Checks that every MZ_E* code has a name and a text (and that unknown
 * codes get the fallbacks); that NULL arguments anywhere give MZ_EINVAL or a
 * safe NULL / no-op, never a crash; that bad parameter lists, bad device and
 * policy configuration, bad buffer shapes and sizes are refused with the
 * right code and a message naming the cause; that graph builder errors are
 * sticky (the first one wins and mz_schedule() reports it, running
 * nothing); and that foreign ops, wrong argument counts and types, and a
 * buffer passed twice with conflicting directions are refused by the
 * builders. */
#include "common.h"

static _Atomic int ran;

static int count_fn(const mz_call *c) {
  (void)c;
  atomic_fetch_add(&ran, 1);
  return 0;
}

/* ---- the error list ---- */

Test(errors, every_code_has_name_and_text, .timeout = 30) {
  unsigned n = 0;
#define CHECK_CODE(name, value, text)                                                 \
  do {                                                                                \
    cr_expect_str_eq(mz_err_name(value), "MZ_" #name);                                \
    cr_expect_str_eq(mz_strerror(value), text);                                       \
    cr_expect_str_neq(mz_strerror(value), "unknown error");                           \
    cr_expect(value == 0 || value < 0, "MZ_" #name " must be negative or zero");      \
    n++;                                                                              \
  } while (0);
  MZ_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
  cr_expect_geq(n, 20);
  /* Values are distinct: the name lookup of each one gives back its own. */
  int codes[] = {
#define LIST(name, value, text) value,
      MZ_ERRNO_MAP(LIST)
#undef LIST
  };
  for (unsigned i = 0; i < n; i++)
    for (unsigned j = 0; j < i; j++) cr_expect_neq(codes[i], codes[j], "two codes share the value %d", codes[i]);
  cr_expect_eq(MZ_OK, 0);
}

Test(errors, unknown_codes_get_fallbacks, .timeout = 30) {
  int unknown[] = {1, 42, -999, -20, 1 << 30, -(1 << 30)};
  for (unsigned i = 0; i < sizeof unknown / sizeof *unknown; i++) {
    cr_expect_str_eq(mz_err_name(unknown[i]), "MZ_EUNKNOWN");
    cr_expect_str_eq(mz_strerror(unknown[i]), "unknown error");
  }
  cr_expect_str_eq(mz_err_name(MZ_EINVAL), "MZ_EINVAL");
  cr_expect_str_eq(mz_strerror(MZ_OK), "success");
}

Test(errors, dtype_helpers, .timeout = 30) {
  cr_expect_eq(mz_dtype_size(MZ_F64), 8);
  cr_expect_eq(mz_dtype_size(MZ_I8), 1);
  cr_expect_str_eq(mz_dtype_name(MZ_U16), "u16");
  cr_expect_eq(mz_dtype_size(MZ_DTYPE_COUNT), 0);
  cr_expect_eq(mz_dtype_size((mz_dtype)-1), 0);
  cr_expect_null(mz_dtype_name(MZ_DTYPE_COUNT));
  cr_expect_str_eq(mz_device_kind_name(MZ_DEVICE_CPU), "cpu");
  cr_expect_str_eq(mz_device_kind_name((mz_device_kind)99), "unknown");
}

/* ---- NULL arguments ---- */

Test(errors, null_arguments_runtime_kernel_buffer, .timeout = 30) {
  cr_expect_eq(mz_runtime_create(NULL, NULL), MZ_EINVAL);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1"}, NULL), MZ_EINVAL);
  mz_runtime_destroy(NULL);
  cr_expect_not_null(mz_runtime_last_error(NULL));
  cr_expect_null(mz_runtime_policy(NULL));
  cr_expect_eq(mz_runtime_device_count(NULL), 0);
  cr_expect_null(mz_runtime_device(NULL, 0));
  cr_expect_eq(mz_runtime_queue_count(NULL), 0);
  cr_expect_eq(mz_runtime_wait_idle(NULL), MZ_EINVAL);
  mz_device_info info;
  cr_expect_eq(mz_device_get_info(NULL, &info), MZ_EINVAL);
  cr_expect(mz_device_is_dead(NULL));

  mz_runtime *rt = test_runtime("cpu:1");
  cr_expect_eq(mz_device_get_info(mz_runtime_device(rt, 0), NULL), MZ_EINVAL);
  cr_expect_null(mz_runtime_device(rt, 1000));

  mz_kernel *k = (mz_kernel *)1;
  mz_kernel_spec spec = {.name = "k", .params = "inout i32[] v", .cpu = {.fn = count_fn}};
  cr_expect_eq(mz_kernel_create(NULL, &spec, &k), MZ_EINVAL);
  cr_expect_null(k, "*out is cleared on failure");
  cr_expect_eq(mz_kernel_create(rt, NULL, &k), MZ_EINVAL);
  cr_expect_eq(mz_kernel_create(rt, &spec, NULL), MZ_EINVAL);
  cr_expect_eq(mz_kernel_create(rt, &(mz_kernel_spec){.params = "inout i32[] v"}, &k), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "name"), "message: %s", mz_runtime_last_error(rt));
  cr_expect_eq(mz_kernel_create(rt, &(mz_kernel_spec){.name = "", .params = "inout i32[] v"}, &k), MZ_EINVAL);
  cr_expect_eq(mz_kernel_create(rt, &(mz_kernel_spec){.name = "noparams"}, &k), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "noparams"), "message: %s", mz_runtime_last_error(rt));
  mz_kernel_destroy(NULL);
  cr_expect_null(mz_kernel_name(NULL));
  cr_expect_eq(mz_kernel_param_count(NULL), 0);

  mz_buffer *b = (mz_buffer *)1;
  cr_expect_eq(mz_buffer_create(NULL, MZ_F32, 1, (size_t[]){4}, NULL, &b), MZ_EINVAL);
  cr_expect_null(b);
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){4}, NULL, NULL), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 1, NULL, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 0, (size_t[]){4}, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 4, (size_t[]){4, 4, 4, 4}, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_DTYPE_COUNT, 1, (size_t[]){4}, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, (mz_dtype)-3, 1, (size_t[]){4}, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_F64, 2, (size_t[]){SIZE_MAX / 2, 4}, NULL, &b), MZ_EINVAL,
               "an overflowing size is refused");
  cr_expect_null(b);
  cr_expect_null(mz_buffer_retain(NULL));
  mz_buffer_release(NULL);
  int32_t tmp[4];
  cr_expect_eq(mz_buffer_read(NULL, tmp, sizeof tmp), MZ_EINVAL);
  cr_expect_eq(mz_buffer_write(NULL, tmp, sizeof tmp), MZ_EINVAL);
  cr_expect_null(mz_buffer_shape(NULL));
  cr_expect_eq(mz_buffer_bytes(NULL), 0);
  b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  cr_expect_eq(mz_buffer_read(b, NULL, sizeof tmp), MZ_EINVAL);
  cr_expect_eq(mz_buffer_write(b, NULL, sizeof tmp), MZ_EINVAL);
  mz_buffer_release(b);

  cr_expect_eq(mz_policy_register(NULL, NULL), MZ_EINVAL);
  cr_expect_eq(mz_policy_register(rt, NULL), MZ_EINVAL);
  cr_expect_null(mz_policy_name(NULL, 0));
  mz_runtime_destroy(rt);
}

Test(errors, null_arguments_graph_future, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_graph *g = (mz_graph *)1;
  cr_expect_eq(mz_graph_create(NULL, &g), MZ_EINVAL);
  cr_expect_null(g);
  cr_expect_eq(mz_graph_create(rt, NULL), MZ_EINVAL);
  mz_graph_destroy(NULL);
  cr_expect_eq(mz_graph_status(NULL), MZ_EINVAL);
  cr_expect_not_null(mz_graph_message(NULL));
  cr_expect_eq(mz_graph_node_count(NULL), 0);

  /* Builders on a NULL graph return NULL and do not crash. */
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_kernel *k = test_kernel(rt, "k", "inout i32[] v", count_fn, NULL);
  cr_expect_null(mz_value(NULL, b));
  cr_expect_null(mz_scalar(NULL, MZ_I32, &(int32_t){1}));
  cr_expect_null(mz_i32(NULL, 1));
  cr_expect_null(mz_u32(NULL, 1));
  cr_expect_null(mz_i64(NULL, 1));
  cr_expect_null(mz_u64(NULL, 1));
  cr_expect_null(mz_f32(NULL, 1));
  cr_expect_null(mz_f64(NULL, 1));
  cr_expect_null(mz_zip(NULL, 0, NULL));
  cr_expect_null(mz_join(NULL, 0, NULL));
  cr_expect_null(mz_unzip(NULL, NULL, 0));
  cr_expect_null(mz_apply(NULL, k, NULL, NULL));
  cr_expect_null(mz_host(NULL, count_fn, NULL, NULL));
  cr_expect_null(mz_partition(NULL, NULL, 2));
  cr_expect_null(mz_unpartition(NULL, NULL));
  cr_expect_eq(mz_depend(NULL, NULL, NULL), MZ_EINVAL);

  /* NULL ops and functions on a real graph: sticky MZ_EINVAL. */
  const struct {
    const char *what;
    int code;
  } cases[] = {{"mz_value", MZ_EINVAL}, {"mz_scalar", MZ_EINVAL}, {"mz_zip", MZ_EINVAL}, {"mz_unzip", MZ_EINVAL},
               {"mz_apply", MZ_EINVAL}, {"mz_host", MZ_EINVAL},   {"mz_partition", MZ_EINVAL},
               {"mz_unpartition", MZ_EINVAL}, {"mz_join", MZ_EINVAL}, {"mz_apply", MZ_EINVAL}};
  for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *v = mz_value(g, b);
    mz_op *r = NULL;
    switch (i) {
      case 0: r = mz_value(g, NULL); break;
      case 1: r = mz_scalar(g, MZ_I32, NULL); break;
      case 2: r = mz_zip(g, 2, (mz_op *[]){v, NULL}); break;
      case 3: r = mz_unzip(g, NULL, 0); break;
      case 4: r = mz_apply(g, k, NULL, NULL); break;
      case 5: r = mz_host(g, NULL, NULL, v); break;
      case 6: r = mz_partition(g, NULL, 2); break;
      case 7: r = mz_unpartition(g, NULL); break;
      case 8: r = mz_join(g, 0, (mz_op *[]){v}); break;
      case 9: r = mz_apply(g, NULL, v, NULL); break;
    }
    cr_expect_not_null(r, "case %u: a builder on a real graph returns the error op, not NULL", i);
    cr_expect_eq(mz_graph_status(g), cases[i].code, "case %u (%s): %s", i, cases[i].what, mz_err_name(mz_graph_status(g)));
    cr_expect(strstr(mz_graph_message(g), cases[i].what), "case %u: message '%s' should name %s", i,
              mz_graph_message(g), cases[i].what);
    mz_future *f = (mz_future *)1;
    cr_expect_eq(mz_schedule(g, r, NULL, &f), cases[i].code);
    cr_expect_null(f);
    mz_graph_destroy(g);
  }
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_expect_eq(mz_scalar(g, MZ_DTYPE_COUNT, &(int){1}) != NULL, true);
  cr_expect_eq(mz_graph_status(g), MZ_EINVAL);
  mz_graph_destroy(g);

  /* mz_schedule. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *v = mz_value(g, b);
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(NULL, v, NULL, &f), MZ_EINVAL);
  cr_expect_null(f);
  cr_expect_eq(mz_schedule(g, v, NULL, NULL), MZ_EINVAL);
  cr_expect_eq(mz_schedule(g, NULL, NULL, &f), MZ_EINVAL);
  cr_expect_eq(mz_schedule(g, v, "no-such-policy", &f), MZ_ENOENT);
  cr_expect(strstr(mz_runtime_last_error(rt), "no-such-policy"), "message: %s", mz_runtime_last_error(rt));
  cr_expect_null(f);
  mz_graph_destroy(g);

  /* Futures. */
  cr_expect_eq(mz_future_wait(NULL), MZ_EINVAL);
  cr_expect_eq(mz_future_wait_for(NULL, 1000), MZ_EINVAL);
  cr_expect_eq(mz_future_poll(NULL), MZ_EINVAL);
  cr_expect_eq(mz_future_status(NULL), MZ_EINVAL);
  cr_expect_not_null(mz_future_message(NULL));
  cr_expect_eq(mz_future_then(NULL, NULL, NULL), MZ_EINVAL);
  cr_expect_lt(mz_future_fd(NULL), 0);
  cr_expect_eq(mz_future_result_count(NULL), 0);
  cr_expect_null(mz_future_result(NULL, 0));
  mz_run_stats st;
  cr_expect_eq(mz_future_stats(NULL, &st), MZ_EINVAL);
  mz_future_destroy(NULL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_value(g, b), NULL, &f));
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  cr_expect_eq(mz_future_then(f, NULL, NULL), MZ_EINVAL);
  cr_expect_eq(mz_future_stats(f, NULL), MZ_EINVAL);
  cr_expect_null(mz_future_result(f, 99));
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* ---- parameter lists ---- */

Test(errors, bad_parameter_lists, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  const struct {
    const char *params;
    const char *word; /* the message must contain it */
  } bad[] = {
      {"in f33[] x", "f33"},                               /* unknown type */
      {"in f32[] x, blob y", "blob"},                      /* unknown type of a scalar */
      {"f32[] x", "direction"},                            /* buffer without a direction */
      {"in f32 x", "buffer"},                              /* direction on a scalar */
      {"in f32[] x, u64 n = sizeof(y)", "y"},              /* reference to no parameter */
      {"in f32[] x, u64 n = sizeof(7)", "7"},              /* index out of range */
      {"f32 a, u64 n = sizeof(a)", "a"},                   /* reference to a scalar */
      {"in f32[] x, u64 n = lengthof(x)", "lengthof"},     /* unknown function */
      {"in f32[] x, outlike(z) f32[] y", "z"},             /* outlike of nothing */
      {"in f32[] x, out f32[] x", "twice"},                /* duplicate names */
      {"f32 a, f32 a", "twice"},                           /* duplicate scalar names */
      {"", "empty"},                                       /* nothing */
      {"in f32[] x y", "','"},                             /* missing comma */
      {"in f32[ x", "]"},                                  /* unclosed bracket */
      {"inout", "type"},                                   /* direction without a type */
      {"in f32[] x, out f32[] y = sizeof(x)", "computed"}, /* computed buffer */
  };
  for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
    mz_kernel *k = (mz_kernel *)1;
    int rc = mz_kernel_create(rt, &(mz_kernel_spec){.name = "badk", .params = bad[i].params, .cpu = {.fn = count_fn}}, &k);
    cr_expect_eq(rc, MZ_EINVAL, "'%s' gave %s", bad[i].params, mz_err_name(rc));
    cr_expect_null(k, "'%s': *out is NULL on failure", bad[i].params);
    const char *msg = mz_runtime_last_error(rt);
    cr_expect(strstr(msg, bad[i].word) != NULL, "'%s': message '%s' should contain '%s'", bad[i].params, msg, bad[i].word);
    cr_expect(strstr(msg, "badk") != NULL, "'%s': message '%s' should name the kernel", bad[i].params, msg);
    if (rc == MZ_OK) mz_kernel_destroy(k);
  }
  /* And good ones parse, with computed and outlike parameters counted. */
  mz_kernel *k;
  MZ_OK_OR_DIE(rt, mz_kernel_create(rt, &(mz_kernel_spec){.name = "good", .params = " f32 a ,in f32[] x,inout f32[] y, u64 n = sizeof( x ), u32 w = widthof(1), u32 h = heightof(y), outlike(x) f64[] z", .cpu = {.fn = count_fn}}, &k));
  cr_expect_eq(mz_kernel_param_count(k), 7);
  cr_expect_str_eq(mz_kernel_name(k), "good");
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- configuration ---- */

Test(errors, bad_config, .timeout = 30) {
  mz_runtime *rt = (mz_runtime *)1;
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "gpu", .quiet = true}, &rt), MZ_ENOENT);
  cr_expect_null(rt);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu,quantum:3", .quiet = true}, &rt), MZ_ENOENT);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu", .policy = "fastest", .quiet = true}, &rt),
               MZ_ENOENT);
  cr_expect_null(rt);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:0", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_null(rt);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:two", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:-1", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1,cpu:2", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_null(rt);
}

Test(errors, bad_environment, .timeout = 30) {
  /* Criterion runs each test in its own process: the environment is ours. */
  mz_runtime *rt = (mz_runtime *)1;
  setenv("MZ_DEVICES", "warp-drive", 1);
  cr_expect_eq(mz_runtime_create(NULL, &rt), MZ_ENOENT);
  cr_expect_null(rt);
  setenv("MZ_DEVICES", "cpu:0", 1);
  cr_expect_eq(mz_runtime_create(NULL, &rt), MZ_EINVAL);
  setenv("MZ_DEVICES", "cpu:1", 1);
  setenv("MZ_POLICY", "nonesuch", 1);
  cr_expect_eq(mz_runtime_create(NULL, &rt), MZ_ENOENT);
  cr_expect_null(rt);
  /* The config overrides the environment. */
  MZ_OK_OR_DIE(NULL, mz_runtime_create(&(mz_runtime_config){.policy = "single"}, &rt));
  cr_expect_str_eq(mz_runtime_policy(rt), "single");
  cr_expect_eq(mz_runtime_queue_count(rt), 1);
  mz_runtime_destroy(rt);
  setenv("MZ_POLICY", "round-robin", 1);
  MZ_OK_OR_DIE(NULL, mz_runtime_create(NULL, &rt));
  cr_expect_str_eq(mz_runtime_policy(rt), "round-robin");
  mz_runtime_destroy(rt);
}

/* ---- sticky graph errors ---- */

Test(errors, sticky_graph_error, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "count", "inout i32[] v", count_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *v = mz_value(g, b);
  mz_op *good = mz_apply(g, k, v, NULL);
  size_t nodes = mz_graph_node_count(g);
  cr_expect_gt(nodes, 0);
  mz_op *z = mz_zip(g, 2, (mz_op *[]){v, mz_i32(g, 3)});
  mz_op *bad = mz_unzip(g, z, 7); /* the first error: MZ_ERANGE */
  cr_expect_eq(mz_graph_status(g), MZ_ERANGE);
  char first[1024];
  snprintf(first, sizeof first, "%s", mz_graph_message(g));
  cr_expect(strstr(first, "mz_unzip"), "message: %s", first);
  cr_expect(strstr(first, "7"), "message names the index: %s", first);
  /* More builders, some of which would fail differently, return the error
   * op and do not replace the first error. */
  mz_op *e1 = mz_apply(g, k, bad, NULL);
  mz_op *e2 = mz_value(g, NULL);
  mz_op *e3 = mz_zip(g, 0, NULL);
  mz_op *e4 = mz_apply(g, k, v, NULL);
  cr_expect_eq(e1, bad);
  cr_expect_eq(e2, bad);
  cr_expect_eq(e3, bad);
  cr_expect_eq(e4, bad, "a valid builder after the error returns the error op too");
  cr_expect_eq(mz_graph_node_count(g), nodes + 2, "no node is built after the error");
  cr_expect_eq(mz_graph_status(g), MZ_ERANGE);
  cr_expect_str_eq(mz_graph_message(g), first);
  cr_expect_eq(mz_depend(g, good, v), MZ_ERANGE);
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(g, good, NULL, &f), MZ_ERANGE, "the valid op cannot be scheduled either");
  cr_expect_null(f);
  cr_expect_str_eq(mz_runtime_last_error(rt), first);
  cr_expect_eq(mz_schedule(g, e4, NULL, &f), MZ_ERANGE);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&ran), 0, "nothing ran");
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

Test(errors, foreign_ops, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "count", "inout i32[] v", count_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g1, *g2;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_op *v1 = mz_value(g1, b);
  mz_op *a1 = mz_apply(g1, k, v1, NULL);
  /* mz_schedule with a root from another graph. */
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(g2, a1, NULL, &f), MZ_EINVAL);
  cr_expect_null(f);
  cr_expect(strstr(mz_runtime_last_error(rt), "another graph"), "message: %s", mz_runtime_last_error(rt));
  /* A builder given an op of another graph. */
  mz_op *z = mz_zip(g2, 2, (mz_op *[]){mz_i32(g2, 1), v1});
  cr_expect_eq(mz_graph_status(g2), MZ_EINVAL);
  cr_expect(strstr(mz_graph_message(g2), "another graph"), "message: %s", mz_graph_message(g2));
  cr_expect_eq(mz_schedule(g2, z, NULL, &f), MZ_EINVAL);
  mz_graph_destroy(g2);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_apply(g2, k, v1, NULL);
  cr_expect_eq(mz_graph_status(g2), MZ_EINVAL);
  mz_graph_destroy(g2);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  cr_expect_eq(mz_depend(g2, a1, a1), MZ_EINVAL);
  mz_graph_destroy(g2);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_unzip(g2, a1, 0);
  cr_expect_eq(mz_graph_status(g2), MZ_EINVAL);
  mz_graph_destroy(g2);
  /* g1 is unaffected and still runs. */
  cr_expect_eq(mz_graph_status(g1), MZ_OK);
  cr_expect_eq(test_run(g1, a1, NULL, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&ran), 1);
  /* A buffer or kernel of another runtime. */
  mz_runtime *rt2 = test_runtime("cpu:1");
  mz_graph *g3;
  MZ_OK_OR_DIE(rt2, mz_graph_create(rt2, &g3));
  mz_value(g3, b);
  cr_expect_eq(mz_graph_status(g3), MZ_EINVAL);
  cr_expect(strstr(mz_graph_message(g3), "another runtime"), "message: %s", mz_graph_message(g3));
  mz_graph_destroy(g3);
  mz_buffer *b2 = test_buffer_1d(rt2, MZ_I32, 8, NULL);
  MZ_OK_OR_DIE(rt2, mz_graph_create(rt2, &g3));
  mz_apply(g3, k, mz_value(g3, b2), NULL);
  cr_expect_eq(mz_graph_status(g3), MZ_EINVAL);
  cr_expect(strstr(mz_graph_message(g3), "another runtime"), "message: %s", mz_graph_message(g3));
  mz_graph_destroy(g3);
  mz_buffer_release(b2);
  mz_runtime_destroy(rt2);
  mz_graph_destroy(g1);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- mz_apply argument checks ---- */

static int saxpy_fn(const mz_call *c) {
  (void)c;
  atomic_fetch_add(&ran, 1);
  return 0;
}

Test(errors, apply_argument_checks, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "saxpy", "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)", saxpy_fn, NULL);
  mz_kernel *ki = test_kernel(rt, "iscale", "i32 a, inout i32[] y", saxpy_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F32, 8, NULL), *y = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_buffer *xi = test_buffer_1d(rt, MZ_I32, 8, NULL);
  struct {
    int code;
    const char *word;
  } want[] = {
      {MZ_EINVAL, "arguments"}, /* 0: two arguments for three */
      {MZ_EINVAL, "arguments"}, /* 1: four arguments for three */
      {MZ_ESHAPE, "'a'"},       /* 2: buffer for the scalar a */
      {MZ_ESHAPE, "'x'"},       /* 3: scalar for the buffer x */
      {MZ_ESHAPE, "i32"},       /* 4: i32 buffer for f32[] x */
      {MZ_ESHAPE, "'a'"},       /* 5: f64 scalar for i32 a (no float to int) */
      {MZ_EINVAL, "unzip"},     /* 6: a tuple as one argument */
      {MZ_EINVAL, "zip"},       /* 7: a task's result tuple as the arguments */
      {MZ_EINVAL, "launch"},    /* 8: a bad launch */
  };
  for (unsigned i = 0; i < sizeof want / sizeof *want; i++) {
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *vx = mz_value(g, x), *vy = mz_value(g, y), *a = mz_f32(g, 2.0f);
    mz_op *r = NULL;
    switch (i) {
      case 0: r = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){a, vx}), NULL); break;
      case 1: r = mz_apply(g, k, mz_zip(g, 4, (mz_op *[]){a, vx, vy, vy}), NULL); break;
      case 2: r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, vx, vy}), NULL); break;
      case 3: r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){a, a, vy}), NULL); break;
      case 4: r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){a, mz_value(g, xi), vy}), NULL); break;
      case 5: r = mz_apply(g, ki, mz_zip(g, 2, (mz_op *[]){mz_f64(g, 1.5), mz_value(g, xi)}), NULL); break;
      case 6: r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){a, mz_zip(g, 1, (mz_op *[]){vx}), vy}), NULL); break;
      case 7: {
        mz_op *first = mz_apply(g, ki, mz_zip(g, 2, (mz_op *[]){mz_i32(g, 1), mz_value(g, xi)}), NULL);
        r = mz_apply(g, ki, first, NULL);
        break;
      }
      case 8:
        r = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){a, vx, vy}), &(mz_launch){.ndim = 4, .global = {8, 1, 1}});
        break;
    }
    cr_expect_eq(mz_graph_status(g), want[i].code, "case %u: %s (%s)", i, mz_err_name(mz_graph_status(g)),
                 mz_graph_message(g));
    cr_expect(strstr(mz_graph_message(g), want[i].word), "case %u: message '%s' should contain %s", i,
              mz_graph_message(g), want[i].word);
    cr_expect(strstr(mz_graph_message(g), "mz_apply"), "case %u: message '%s' names the builder", i, mz_graph_message(g));
    mz_future *f;
    cr_expect_eq(mz_schedule(g, r, NULL, &f), want[i].code);
    mz_graph_destroy(g);
  }
  /* Integer scalars widen and narrow to integer parameters; integers go to
   * floats. */
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r1 = mz_apply(g, ki, mz_zip(g, 2, (mz_op *[]){mz_i64(g, 3), mz_value(g, xi)}), NULL);
  mz_op *r2 = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_i32(g, 3), mz_value(g, x), mz_value(g, y)}), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_expect_eq(test_run(g, mz_join(g, 2, (mz_op *[]){r1, r2}), NULL, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&ran), 2);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_buffer_release(xi);
  mz_kernel_destroy(k);
  mz_kernel_destroy(ki);
  mz_runtime_destroy(rt);
}

Test(errors, buffer_twice_conflicting_directions, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *rw = test_kernel(rt, "rw", "in f32[] x, inout f32[] y", saxpy_fn, NULL);
  mz_kernel *ww = test_kernel(rt, "ww", "out f32[] x, out f32[] y", saxpy_fn, NULL);
  mz_kernel *rr = test_kernel(rt, "rr", "in f32[] x, in f32[] y, out f32[] z", saxpy_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_F32, 8, NULL), *z = test_buffer_1d(rt, MZ_F32, 8, NULL);
  mz_kernel *ks[2] = {rw, ww};
  for (int i = 0; i < 2; i++) {
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *r = mz_apply(g, ks[i], mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, x)}), NULL);
    cr_expect_eq(mz_graph_status(g), MZ_EINVAL, "%s", mz_kernel_name(ks[i]));
    cr_expect(strstr(mz_graph_message(g), "twice"), "message: %s", mz_graph_message(g));
    mz_future *f;
    cr_expect_eq(mz_schedule(g, r, NULL, &f), MZ_EINVAL);
    mz_graph_destroy(g);
  }
  /* Reading one buffer through two parameters is fine. */
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, rr, mz_zip(g, 3, (mz_op *[]){mz_value(g, x), mz_value(g, x), mz_value(g, z)}), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_expect_eq(test_run(g, r, NULL, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&ran), 1);
  mz_graph_destroy(g);
  /* A host node given the same buffer twice. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_host(g, count_fn, NULL, mz_zip(g, 2, (mz_op *[]){mz_value(g, x), mz_value(g, x)}));
  cr_expect_eq(mz_graph_status(g), MZ_EINVAL);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(z);
  mz_kernel_destroy(rw);
  mz_kernel_destroy(ww);
  mz_kernel_destroy(rr);
  mz_runtime_destroy(rt);
}

/* ---- buffers ---- */

Test(errors, buffer_shapes_and_sizes, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *b = (mz_buffer *)1;
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){0}, NULL, &b), MZ_EINVAL);
  cr_expect_null(b);
  cr_expect(strstr(mz_runtime_last_error(rt), "zero"), "message: %s", mz_runtime_last_error(rt));
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 2, (size_t[]){4, 0}, NULL, &b), MZ_EINVAL);
  cr_expect_eq(mz_buffer_create(rt, MZ_F32, 3, (size_t[]){4, 4, 0}, NULL, &b), MZ_EINVAL);
  cr_expect_null(b);
  int32_t data[6] = {1, 2, 3, 4, 5, 6};
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_I32, 2, (size_t[]){3, 2}, data, &b));
  cr_expect_eq(mz_buffer_bytes(b), sizeof data);
  const mz_shape *sh = mz_buffer_shape(b);
  cr_expect_eq(sh->ndim, 2);
  cr_expect_eq(sh->count, 6);
  cr_expect_eq(sh->dims[0], 3);
  cr_expect_eq(sh->dims[1], 2);
  cr_expect_eq(sh->dims[2], 1);
  cr_expect_eq(sh->dtype, MZ_I32);
  int32_t out[7] = {0};
  cr_expect_eq(mz_buffer_read(b, out, sizeof out), MZ_EINVAL);
  cr_expect(strstr(mz_runtime_last_error(rt), "bytes"), "message: %s", mz_runtime_last_error(rt));
  cr_expect_eq(mz_buffer_read(b, out, sizeof data - 4), MZ_EINVAL);
  cr_expect_eq(mz_buffer_read(b, out, 0), MZ_EINVAL);
  cr_expect_eq(mz_buffer_write(b, out, sizeof out), MZ_EINVAL);
  cr_expect_eq(out[0], 0, "a refused read writes nothing");
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof data));
  cr_expect_arr_eq(out, data, sizeof data);
  /* Created empty: zeroed. */
  mz_buffer *z = test_buffer_1d(rt, MZ_F64, 5, NULL);
  double zd[5] = {1, 1, 1, 1, 1};
  MZ_OK_OR_DIE(rt, mz_buffer_read(z, zd, sizeof zd));
  for (int i = 0; i < 5; i++) cr_expect_eq(zd[i], 0.0);
  /* Retain and release count. */
  cr_expect_eq(mz_buffer_retain(z), z);
  mz_buffer_release(z);
  MZ_OK_OR_DIE(rt, mz_buffer_read(z, zd, sizeof zd));
  mz_buffer_release(z);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}
