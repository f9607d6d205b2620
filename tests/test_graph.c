/* test_graph: every graph combinator, laziness and cycle rejection.
 *
 * Checks value, the scalar builders of every type (as a kernel receives
 * them), zip and unzip (identity, out of range -> MZ_ERANGE), apply with
 * computed parameters (sizeof, widthof, heightof) and an outlike parameter
 * whose new buffer appears in the results, join, host nodes (up-to-date
 * buffers in, writes visible after, chained with applies before and
 * after), laziness (only what the root needs runs, later schedules run
 * the rest exactly once, nothing reruns), cycles made with mz_depend
 * (self edge, 2-cycle, a 100,000-node ring) rejected with MZ_ECYCLE before
 * anything runs, mz_depend on tasks that write no buffer (scalar-only or
 * read-only applies, and a join of them) pulling them into the run, and
 * 2D and 3D buffers; values read through every kind of producer, tuples
 * around the length their head holds, and one-shot joins of every new
 * task (the closure taken without a walk, and each fallback). */
#include "common.h"
#include "util.h" /* the arena and its chunk pool */

/* ---- kernels ---- */

static _Atomic int count_a, count_b;

/* v[i] += 1, counting calls in *user. */
static int inc_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) v[i] += 1;
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

#define INC_PARAMS "inout i32[] v, u64 n = sizeof(v)"

/* ---- value, scalars, zip, unzip ---- */

struct scalars_seen {
  int8_t i8;
  uint8_t u8;
  int16_t i16;
  uint16_t u16;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
  unsigned nargs;
  unsigned nonempty_shapes;
};

static int scalars_fn(const mz_call *c) {
  struct scalars_seen *s = c->user;
  s->nargs = c->nargs;
  s->i8 = c->args[0].i8;
  s->u8 = c->args[1].u8;
  s->i16 = c->args[2].i16;
  s->u16 = c->args[3].u16;
  s->i32 = c->args[4].i32;
  s->u32 = c->args[5].u32;
  s->i64 = c->args[6].i64;
  s->u64 = c->args[7].u64;
  s->f32 = c->args[8].f32;
  s->f64 = c->args[9].f64;
  for (unsigned i = 0; i < 10; i++) s->nonempty_shapes += c->shapes[i].count != 0;
  double *o = c->args[10].p;
  o[0] = (double)s->i8 + s->u8 + s->i16 + s->u16 + s->i32 + s->u32 + (double)s->i64 + (double)s->u64 + s->f32 + s->f64;
  return 0;
}

Test(graph, scalars_of_every_type, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  struct scalars_seen seen = {0};
  mz_kernel *k = test_kernel(rt, "scalars",
                             "i8 a, u8 b, i16 c, u16 d, i32 e, u32 f, i64 g, u64 h, f32 i, f64 j, out f64[] o",
                             scalars_fn, &seen);
  mz_buffer *o = test_buffer_1d(rt, MZ_F64, 1, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  int8_t i8 = -5;
  uint8_t u8 = 250;
  int16_t i16 = -30000;
  uint16_t u16 = 60000;
  mz_op *args[11] = {
      mz_scalar(g, MZ_I8, &i8),         mz_scalar(g, MZ_U8, &u8),      mz_scalar(g, MZ_I16, &i16),
      mz_scalar(g, MZ_U16, &u16),       mz_i32(g, -2000000000),        mz_u32(g, 4000000000u),
      mz_i64(g, -((int64_t)1 << 40)),     mz_u64(g, (uint64_t)1 << 63),  mz_f32(g, 1.5f),
      mz_f64(g, 3.0e100),               mz_value(g, o),
  };
  mz_op *r = mz_apply(g, k, mz_zip(g, 11, args), NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  /* The result tuple holds scalar nodes of the values the kernel gets (one
   * node per element, the same each time it is unzipped); fed to a second
   * apply, they give it the same values (checked below, after both ran). */
  mz_op *again[11];
  for (unsigned i = 0; i < 10; i++) {
    again[i] = mz_unzip(g, r, i);
    cr_assert_not_null(again[i]);
    cr_expect_eq(mz_unzip(g, r, i), again[i]);
  }
  again[10] = mz_unzip(g, r, 10);
  mz_op *r2 = mz_apply(g, k, mz_zip(g, 11, again), NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  cr_assert_eq(test_run(g, r, NULL, &f), MZ_OK);
  struct scalars_seen first = seen;
  mz_future *f2;
  cr_assert_eq(test_run(g, r2, NULL, &f2), MZ_OK);
  /* (Field by field: the struct has padding.) */
  cr_expect(first.i8 == seen.i8 && first.u8 == seen.u8 && first.i16 == seen.i16 && first.u16 == seen.u16 &&
                first.i32 == seen.i32 && first.u32 == seen.u32 && first.i64 == seen.i64 && first.u64 == seen.u64 &&
                first.f32 == seen.f32 && first.f64 == seen.f64 && first.nargs == seen.nargs,
            "the unzipped scalars give the kernel the same values");
  mz_future_destroy(f2);
  cr_expect_eq(seen.nargs, 11);
  cr_expect_eq(seen.nonempty_shapes, 0, "scalars have an empty shape");
  cr_expect_eq(seen.i8, -5);
  cr_expect_eq(seen.u8, 250);
  cr_expect_eq(seen.i16, -30000);
  cr_expect_eq(seen.u16, 60000);
  cr_expect_eq(seen.i32, -2000000000);
  cr_expect_eq(seen.u32, 4000000000u);
  cr_expect_eq(seen.i64, -((int64_t)1 << 40));
  cr_expect_eq(seen.u64, (uint64_t)1 << 63);
  cr_expect_eq(seen.f32, 1.5f);
  cr_expect_eq(seen.f64, 3.0e100);
  /* Results: 10 scalars (NULL) and the buffer. */
  cr_expect_eq(mz_future_result_count(f), 11);
  for (unsigned i = 0; i < 10; i++) cr_expect_null(mz_future_result(f, i));
  cr_expect_eq(mz_future_result(f, 10), o);
  double out;
  MZ_OK_OR_DIE(rt, mz_buffer_read(o, &out, sizeof out));
  double ref = -5.0 + 250 + -30000 + 60000 + -2000000000.0 + 4000000000.0 + (double)(-((int64_t)1 << 40)) +
               (double)((uint64_t)1 << 63) + 1.5 + 3.0e100;
  cr_expect_eq(out, ref);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(o);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* Adds its i64 scalar into the buffer's one element. */
static int add_scalar_fn(const mz_call *c) {
  ((int64_t *)c->args[1].p)[0] += c->args[0].i64;
  return 0;
}

Test(graph, an_equal_scalar_is_the_same_node, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *a = mz_i64(g, 7), *b = mz_i64(g, 7);
  cr_expect_eq(a, b, "the same type and value as the last scalar: the same node");
  cr_expect_eq(mz_graph_node_count(g), 1);
  mz_op *c = mz_i32(g, 7);
  cr_expect_neq(c, a, "another type is another node");
  mz_op *d = mz_i32(g, 8);
  cr_expect_neq(d, c, "another value is another node");
  cr_expect_neq(mz_i32(g, 7), c, "only the last scalar is shared");
  double z = 0.0, nz = -0.0;
  mz_op *fz = mz_f64(g, z);
  cr_expect_neq(mz_f64(g, nz), fz, "equal as numbers but not in bits: another node");
  cr_expect_eq(mz_graph_node_count(g), 6);
  /* Tasks that share one scalar node each get its value. */
  int64_t zero = 0;
  mz_buffer *o = test_buffer_1d(rt, MZ_I64, 1, &zero);
  mz_kernel *k = test_kernel(rt, "add", "i64 v, inout i64[] o", add_scalar_fn, NULL);
  mz_op *last = NULL;
  for (int i = 0; i < 3; i++) last = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_i64(g, 5), mz_value(g, o)}), NULL);
  mz_future *f;
  cr_assert_eq(test_run(g, last, NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  int64_t out = 0;
  MZ_OK_OR_DIE(rt, mz_buffer_read(o, &out, sizeof out));
  cr_expect_eq(out, 15);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(o);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* Adds its i64 scalar into the element given by its u32 index. */
static int add_at_fn(const mz_call *c) {
  int64_t *out = c->user;
  __atomic_fetch_add(&out[c->args[1].u32], c->args[0].i64, __ATOMIC_RELAXED);
  return 0;
}

/* Applies of one kernel on one argument op, over and over (the builders'
 * repeat path): each task gets the argument's value, converted to the
 * parameter's type; another argument op, a launch or another kernel in
 * between changes nothing; a wrong argument is refused as ever. */
Test(graph, repeated_applies_of_one_argument_get_its_value, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  int64_t out[3] = {0};
  mz_kernel *k = test_kernel(rt, "add", "i64 v, u32 at", add_at_fn, out);
  mz_kernel *k2 = test_kernel(rt, "add2", "i64 v, u32 at", add_at_fn, out);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ops[12];
  unsigned n = 0;
  /* An i32 scalar for an i64 parameter: converted on every repeat. */
  mz_op *args0 = mz_zip(g, 2, (mz_op *[]){mz_i32(g, -7), mz_u32(g, 0)});
  mz_op *args1 = mz_zip(g, 2, (mz_op *[]){mz_i64(g, 40), mz_u32(g, 1)});
  mz_op *args2 = mz_zip(g, 2, (mz_op *[]){mz_i64(g, 41), mz_u32(g, 2)});
  mz_launch l = {.ndim = 1, .global = {1}};
  ops[n++] = mz_apply(g, k, args0, NULL);
  ops[n++] = mz_apply(g, k, args0, NULL);
  ops[n++] = mz_apply(g, k, args1, NULL);  /* another argument op */
  ops[n++] = mz_apply(g, k, args1, NULL);
  ops[n++] = mz_apply(g, k2, args1, NULL); /* another kernel */
  ops[n++] = mz_apply(g, k, args2, &l);    /* a launch: checked and kept */
  ops[n++] = mz_apply(g, k, args2, NULL);
  ops[n++] = mz_apply(g, k, args2, NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  /* Every task adds into its index's slot: run them all and read the sums. */
  mz_op *all = mz_join(g, n, ops);
  mz_future *f;
  cr_assert_eq(test_run(g, all, NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  mz_future_destroy(f);
  cr_expect_eq(out[0], -14);
  cr_expect_eq(out[1], 120);
  cr_expect_eq(out[2], 123);
  /* A wrong argument after repeats is still refused, with its message. */
  mz_op *bad = mz_zip(g, 2, (mz_op *[]){mz_f64(g, 1.5), mz_u32(g, 3)});
  mz_op *err = mz_apply(g, k, bad, NULL);
  cr_expect_eq(mz_graph_status(g), MZ_ESHAPE);
  cr_expect(strstr(mz_graph_message(g), "cannot be converted"), "%s", mz_graph_message(g));
  cr_expect_eq(mz_apply(g, k, args2, NULL), err, "a failed graph's builders return its error op");
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_kernel_destroy(k2);
  mz_runtime_destroy(rt);
}

Test(graph, value_zip_unzip, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  int32_t init[4] = {1, 2, 3, 4};
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, init), *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cr_expect_eq(mz_graph_node_count(g), 0);
  mz_op *va = mz_value(g, a), *vb = mz_value(g, b), *s = mz_i32(g, 9);
  cr_expect_eq(mz_graph_node_count(g), 3);
  mz_op *z = mz_zip(g, 3, (mz_op *[]){va, s, vb});
  cr_expect_eq(mz_unzip(g, z, 0), va);
  cr_expect_eq(mz_unzip(g, z, 1), s);
  cr_expect_eq(mz_unzip(g, z, 2), vb);
  /* Nested tuples flatten into the results in order. */
  mz_op *nested = mz_zip(g, 2, (mz_op *[]){z, va});
  cr_expect_eq(mz_unzip(g, mz_unzip(g, nested, 0), 2), vb);
  cr_assert_eq(mz_graph_status(g), MZ_OK);
  mz_future *f;
  cr_assert_eq(test_run(g, nested, NULL, &f), MZ_OK);
  cr_expect_eq(mz_future_result_count(f), 4);
  cr_expect_eq(mz_future_result(f, 0), a);
  cr_expect_null(mz_future_result(f, 1));
  cr_expect_eq(mz_future_result(f, 2), b);
  cr_expect_eq(mz_future_result(f, 3), a);
  mz_future_destroy(f);
  /* Out of range. */
  mz_op *e = mz_unzip(g, z, 3);
  cr_expect_not_null(e);
  cr_expect_eq(mz_graph_status(g), MZ_ERANGE);
  cr_expect(strstr(mz_graph_message(g), "3"), "%s", mz_graph_message(g));
  mz_graph_destroy(g);
  /* Unzip of something that is not a tuple. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_unzip(g, mz_value(g, a), 0);
  cr_expect_eq(mz_graph_status(g), MZ_EINVAL);
  mz_graph_destroy(g);
  /* Out of range on an apply's results. */
  static _Atomic int unused;
  mz_kernel *k = test_kernel(rt, "inc", INC_PARAMS, inc_fn, &unused);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, k, mz_value(g, a), NULL);
  cr_expect_neq(mz_unzip(g, r, 1), NULL);
  cr_expect_eq(mz_graph_status(g), MZ_OK);
  mz_unzip(g, r, 2);
  cr_expect_eq(mz_graph_status(g), MZ_ERANGE);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* c[i] += a[i] + b[i]. */
static int addto_fn(const mz_call *c) {
  const int32_t *a = c->args[0].p, *b = c->args[1].p;
  int32_t *o = c->args[2].p;
  for (size_t i = 0; i < c->shapes[2].count; i++) o[i] += a[i] + b[i];
  return 0;
}
/* Every buffer argument += 100. */
static int host_add100(const mz_call *c) {
  for (unsigned k = 0; k < c->nargs; k++)
    if (c->shapes[k].count)
      for (size_t i = 0; i < c->shapes[k].count; i++) ((int32_t *)c->args[k].p)[i] += 100;
  return 0;
}

/* A value names its buffer through whatever wrote it last: an apply (one
 * buffer passed twice, so its accesses are not its parameters), a host
 * node, a partition's tiles, an unpartition; and a tuple's elements are
 * found at every length, below, at and past the count its head holds
 * (65,535). */
Test(graph, values_of_every_producer_and_tuples_of_every_length, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  int32_t one[6] = {1, 1, 1, 1, 1, 1}, zero[6] = {0};
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 6, one), *y = test_buffer_1d(rt, MZ_I32, 6, zero),
            *z = test_buffer_1d(rt, MZ_I32, 6, zero);
  mz_kernel *addto = test_kernel(rt, "addto", "in i32[] a, in i32[] b, inout i32[] c", addto_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *vx = mz_value(g, x);
  mz_op *r = mz_apply(g, addto, mz_zip(g, 3, (mz_op *[]){vx, vx, mz_value(g, y)}), NULL); /* y = 2 */
  mz_op *y_after_apply = mz_value(g, y);
  cr_expect_eq(mz_unzip(g, r, 2), y_after_apply, "while the apply is y's last writer, its result is y's value node");
  cr_expect_eq(mz_unzip(g, r, 2), mz_unzip(g, r, 2));
  mz_op *h = mz_host(g, host_add100, NULL, mz_zip(g, 2, (mz_op *[]){mz_value(g, z), y_after_apply})); /* z = 100, y = 102 */
  mz_op *z_after_host = mz_value(g, z), *y_after_host = mz_unzip(g, h, 1);
  mz_op *tiles = mz_partition(g, y_after_host, 3);
  mz_op *t2 = mz_unzip(g, tiles, 2), *t0 = mz_unzip(g, tiles, 0), *t1 = mz_unzip(g, tiles, 1);
  mz_op *ht = mz_host(g, host_add100, NULL, t1); /* the middle tile: 202 */
  mz_op *whole = mz_unpartition(g, mz_zip(g, 3, (mz_op *[]){t2, mz_unzip(g, ht, 0), t0}));
  mz_op *y_after_unpartition = mz_value(g, y);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  /* Results (made by the task) and values (made by mz_value) of each. */
  mz_op *all = mz_zip(g, 10, (mz_op *[]){mz_unzip(g, r, 0), mz_unzip(g, r, 1), mz_unzip(g, r, 2), y_after_apply,
                                         mz_unzip(g, h, 0), z_after_host, y_after_host, t1, mz_unzip(g, whole, 0),
                                         y_after_unpartition});
  cr_assert_eq(test_run(g, all, "eager", &f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(mz_future_result_count(f), 10);
  mz_buffer *want[10] = {x, x, y, y, z, z, y, NULL, y, y};
  for (unsigned i = 0; i < 10; i++)
    if (want[i]) cr_expect_eq(mz_future_result(f, i), want[i], "result %u", i);
  mz_buffer *tile = mz_future_result(f, 7);
  cr_expect(tile && tile != x && tile != y && tile != z, "a tile is a buffer of its own");
  int32_t out[6];
  MZ_OK_OR_DIE(rt, mz_buffer_read(y, out, sizeof out));
  for (int i = 0; i < 6; i++) cr_expect_eq(out[i], i == 2 || i == 3 ? 202 : 102, "y[%d]", i);
  MZ_OK_OR_DIE(rt, mz_buffer_read(z, out, sizeof out));
  for (int i = 0; i < 6; i++) cr_expect_eq(out[i], 100, "z[%d]", i);
  mz_future_destroy(f);
  /* Tuples of 65,534 (the longest whose count is in its head), 65,535 and
   * 70,000 scalars: each element where it was put, each length told. */
  static const unsigned lens[] = {1, 65534, 65535, 70000};
  mz_op **el = malloc(70000 * sizeof *el);
  cr_assert(el);
  for (unsigned i = 0; i < 70000; i++) el[i] = mz_i32(g, (int32_t)i);
  for (size_t L = 0; L < sizeof lens / sizeof lens[0]; L++) {
    unsigned n = lens[L];
    mz_op *t = mz_zip(g, n, el);
    cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
    cr_expect_eq(mz_unzip(g, t, 0), el[0]);
    cr_expect_eq(mz_unzip(g, t, n - 1), el[n - 1], "the last of %u", n);
    cr_expect_eq(mz_unzip(g, t, n / 2), el[n / 2], "the middle of %u", n);
    mz_op *nested = mz_zip(g, 2, (mz_op *[]){t, vx});
    cr_expect_eq(mz_unzip(g, mz_unzip(g, nested, 0), n - 1), el[n - 1]);
    cr_assert_eq(test_run(g, nested, NULL, &f), MZ_OK, "%s", mz_future_message(f));
    cr_expect_eq(mz_future_result_count(f), n + 1, "a tuple of %u flattened", n);
    cr_expect_eq(mz_future_result(f, n), x);
    mz_future_destroy(f);
    mz_unzip(g, t, n);
    cr_expect_eq(mz_graph_status(g), MZ_ERANGE, "index %u of a tuple of %u", n, n);
    char msg[48];
    snprintf(msg, sizeof msg, "of a tuple of %u", n);
    cr_expect(strstr(mz_graph_message(g), msg), "%s", mz_graph_message(g));
    mz_graph_destroy(g);
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    vx = mz_value(g, x);
    for (unsigned i = 0; i < 70000; i++) el[i] = mz_i32(g, (int32_t)i);
  }
  free(el);
  mz_graph_destroy(g);
  mz_kernel_destroy(addto);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_buffer_release(z);
  mz_runtime_destroy(rt);
}

/* Counts its calls; k marks which task ran (alln_seen[k]). */
static _Atomic int alln_count;
static _Atomic unsigned char alln_seen[400];
static int alln_fn(const mz_call *c) {
  atomic_fetch_add(&alln_count, 1);
  if (c->args[0].i32 >= 0 && c->args[0].i32 < 400) atomic_fetch_add(&alln_seen[c->args[0].i32], 1);
  return 0;
}

/* A one-shot run of a join of every task the graph has not run yet, in
 * build order, takes the closure from the graph's list without a walk,
 * and so does the first mz_graph_run of a graph never run; where one of
 * them ran already, or the join is in another order, or the tasks have
 * edges and buffers, each still runs exactly once (a re-run: every task
 * of the closure, also the one that ran before). */
static int first_run(mz_graph *g, mz_op *root, bool rerun, mz_future **fout) {
  if (!rerun) return test_run(g, root, "eager", fout);
  mz_future *f = NULL;
  int rc = mz_graph_run(g, root, "eager", &f);
  if (rc) return rc;
  int st = mz_future_wait(f);
  if (fout) *fout = f;
  else mz_future_destroy(f);
  return st;
}

Test(graph, a_join_of_every_new_task, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "alln", "i32 k", alln_fn, NULL);
  static _Atomic int incs;
  mz_kernel *inc = test_kernel(rt, "inc", INC_PARAMS, inc_fn, &incs);
  mz_buffer *v = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_op *ops[400], *rev[400];
  mz_future *f;
  mz_run_stats st;
  /* Rounds: 0 all new and bare; 1 one in the middle ran alone first; 2
   * some with a buffer; 3 the join reversed; 4 the first ran alone first;
   * 5 to 9 the same with mz_graph_run for every run. */
  int32_t want = 0;
  for (int rr = 0; rr < 10; rr++) {
    int round = rr % 5;
    bool rerun = rr >= 5;
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    atomic_store(&alln_count, 0);
    atomic_store(&incs, 0);
    for (int i = 0; i < 400; i++) atomic_store(&alln_seen[i], 0);
    int n = 400, ninc = 0;
    for (int i = 0; i < n; i++) {
      /* round 2: every fourth task increments v (a chain through v among
       * tasks without edges). */
      if (round == 2 && i % 4 == 3) {
        ops[i] = mz_apply(g, inc, mz_value(g, v), NULL);
        ninc++;
      } else {
        ops[i] = mz_apply(g, k, mz_i32(g, i), NULL);
      }
    }
    int ran_before = 0;
    if (round == 1 || round == 4) {
      cr_assert_eq(first_run(g, ops[round == 1 ? 200 : 0], rerun, NULL), MZ_OK);
      ran_before = 1;
      cr_expect_eq(atomic_load(&alln_count), 1);
    }
    mz_op *root;
    if (round == 3) {
      for (int i = 0; i < n; i++) rev[i] = ops[n - 1 - i];
      root = mz_join(g, (unsigned)n, rev);
    } else {
      root = mz_join(g, (unsigned)n, ops);
    }
    cr_assert_eq(first_run(g, root, rerun, &f), MZ_OK, "round %d: %s", rr, f ? mz_future_message(f) : mz_graph_message(g));
    cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
    /* (A re-run runs the one that ran alone again.) */
    int again = rerun ? ran_before : 0;
    cr_expect_eq(st.ops, (uint64_t)(n - ran_before + again), "round %d: the run's tasks", rr);
    mz_future_destroy(f);
    cr_expect_eq(atomic_load(&alln_count), n - ninc + again, "round %d", rr);
    cr_expect_eq(atomic_load(&incs), ninc, "round %d", rr);
    for (int i = 0; i < n; i++)
      if (!(round == 2 && i % 4 == 3))
        cr_expect_eq(atomic_load(&alln_seen[i]), 1 + (again && i == (round == 1 ? 200 : 0)), "round %d: task %d's runs", rr, i);
    /* And again, re-run as built. */
    cr_assert_eq(mz_graph_run(g, root, "eager", &f), MZ_OK);
    cr_expect_eq(mz_future_wait(f), MZ_OK);
    cr_assert_eq(mz_future_stats(f, &st), MZ_OK);
    cr_expect_eq(st.ops, (uint64_t)n, "round %d: a re-run runs the whole closure", rr);
    mz_future_destroy(f);
    cr_expect_eq(atomic_load(&alln_count), 2 * (n - ninc) + again, "round %d", rr);
    want += 2 * ninc;
    mz_graph_destroy(g);
  }
  int32_t out[4];
  MZ_OK_OR_DIE(rt, mz_buffer_read(v, out, sizeof out));
  for (int i = 0; i < 4; i++) cr_expect_eq(out[i], want, "v[%d]: 100 increments, run twice, in two rounds", i);
  mz_buffer_release(v);
  mz_kernel_destroy(k);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

/* The graph's messages name an op by its kind, its kernel or its host
 * name (an op stores no name of its own: they are derived). */
static int host_nothing(const mz_call *c) {
  (void)c;
  return 0;
}

static void expect_message(mz_graph *g, int code, const char *part) {
  cr_expect_eq(mz_graph_status(g), code, "%s", mz_graph_message(g));
  cr_expect(strstr(mz_graph_message(g), part) != NULL, "'%s' not in '%s'", part, mz_graph_message(g));
}

Test(graph, messages_name_the_op, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, NULL);
  static _Atomic int unused;
  mz_kernel *k = test_kernel(rt, "inc", INC_PARAMS, inc_fn, &unused);
  struct {
    int what;
    int code;
    const char *part;
  } cases[] = {
      {0, MZ_EINVAL, "a value is not a tuple"},
      {1, MZ_EINVAL, "a scalar is not a tuple"},
      {2, MZ_EINVAL, "a zip is not a buffer value"},
      {3, MZ_EINVAL, "a join is not a buffer value"},
      {4, MZ_EINVAL, "is a join; unzip it first"},
      {5, MZ_ERANGE, "index 5 of inc's 2 results"},
      {6, MZ_ERANGE, "index 0 of host's 0 results"},
      {7, MZ_ERANGE, "index 0 of my step's 0 results"},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *v = mz_value(g, a);
    switch (cases[i].what) {
      case 0: mz_unzip(g, v, 0); break;
      case 1: mz_unzip(g, mz_i32(g, 1), 0); break;
      case 2: mz_partition(g, mz_zip(g, 1, &v), 2); break;
      case 3: mz_partition(g, mz_join(g, 1, &v), 2); break;
      case 4: mz_apply(g, k, mz_zip(g, 1, (mz_op *[]){mz_join(g, 1, &v)}), NULL); break;
      case 5: mz_unzip(g, mz_apply(g, k, v, NULL), 5); break;
      case 6: mz_unzip(g, mz_host(g, host_nothing, NULL, NULL), 0); break;
      default: mz_unzip(g, mz_host_named(g, "my step", host_nothing, NULL, NULL), 0); break;
    }
    expect_message(g, cases[i].code, cases[i].part);
    mz_graph_destroy(g);
  }
  mz_kernel_destroy(k);
  mz_buffer_release(a);
  mz_runtime_destroy(rt);
}

/* ---- apply with computed and outlike parameters ---- */

struct shape_seen {
  uint64_t n;
  uint32_t w, h;
  double wf;
  unsigned nargs;
  mz_shape yshape;
};

/* y = 2x, recording the computed parameters. */
static int shape_fn(const mz_call *c) {
  struct shape_seen *s = c->user;
  const float *x = c->args[0].p;
  s->n = c->args[1].u64;
  s->w = c->args[2].u32;
  s->h = c->args[3].u32;
  float *y = c->args[4].p;
  s->wf = c->args[5].f64;
  s->nargs = c->nargs;
  s->yshape = c->shapes[4];
  for (uint64_t i = 0; i < s->n; i++) y[i] = 2.0f * x[i];
  return 0;
}

Test(graph, apply_computed_and_outlike, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct shape_seen seen = {0};
  mz_kernel *k = test_kernel(rt, "double",
                             "in f32[] x, u64 n = sizeof(x), u32 w = widthof(x), u32 h = heightof(0), "
                             "outlike(x) f32[] y, f64 wf = widthof(y)",
                             shape_fn, &seen);
  cr_expect_eq(mz_kernel_param_count(k), 6);
  enum { W = 6, H = 4 };
  float xs[W * H];
  for (int i = 0; i < W * H; i++) xs[i] = (float)i * 0.5f;
  mz_buffer *x;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_F32, 2, (size_t[]){W, H}, xs, &x));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, k, mz_value(g, x), NULL); /* one argument, no zip */
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  cr_assert_eq(test_run(g, r, "round-robin", &f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(seen.nargs, 6);
  cr_expect_eq(seen.n, W * H);
  cr_expect_eq(seen.w, W);
  cr_expect_eq(seen.h, H);
  cr_expect_eq(seen.wf, (double)W);
  cr_expect_eq(seen.yshape.ndim, 2);
  cr_expect_eq(seen.yshape.dims[0], W);
  cr_expect_eq(seen.yshape.dims[1], H);
  /* Results: x, n, w, h, the new y, wf. */
  cr_assert_eq(mz_future_result_count(f), 6);
  cr_expect_eq(mz_future_result(f, 0), x);
  for (unsigned i = 1; i < 4; i++) cr_expect_null(mz_future_result(f, i));
  cr_expect_null(mz_future_result(f, 5));
  mz_buffer *y = mz_future_result(f, 4);
  cr_assert_not_null(y, "the outlike buffer is a result");
  cr_expect_neq(y, x);
  const mz_shape *ys = mz_buffer_shape(y);
  cr_expect_eq(ys->dtype, MZ_F32);
  cr_expect_eq(ys->ndim, 2);
  cr_expect_eq(ys->dims[0], W);
  cr_expect_eq(ys->dims[1], H);
  float out[W * H];
  MZ_OK_OR_DIE(rt, mz_buffer_read(y, out, sizeof out));
  for (int i = 0; i < W * H; i++) cr_expect_eq(out[i], 2.0f * xs[i], "y[%d]", i);
  /* The result outlives the graph and the future when retained. */
  mz_buffer_retain(y);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  memset(out, 0, sizeof out);
  MZ_OK_OR_DIE(rt, mz_buffer_read(y, out, sizeof out));
  cr_expect_eq(out[W * H - 1], 2.0f * xs[W * H - 1]);
  mz_buffer_release(y);
  mz_buffer_release(x);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* An outlike buffer feeds a later apply through its result value. */
static int copy_plus_fn(const mz_call *c) {
  const int32_t *x = c->args[0].p;
  int32_t *y = c->args[1].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) y[i] = x[i] + 100;
  return 0;
}

Test(graph, outlike_chain, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  static _Atomic int incs;
  mz_kernel *cp = test_kernel(rt, "copy_plus", "in i32[] x, outlike(x) i32[] y", copy_plus_fn, NULL);
  mz_kernel *inc = test_kernel(rt, "inc", INC_PARAMS, inc_fn, &incs);
  int32_t xs[5] = {1, 2, 3, 4, 5};
  mz_buffer *x = test_buffer_1d(rt, MZ_I32, 5, xs);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *y = mz_unzip(g, mz_apply(g, cp, mz_value(g, x), NULL), 1);
  mz_op *y2 = mz_unzip(g, mz_apply(g, inc, y, NULL), 0);
  mz_future *f;
  cr_assert_eq(test_run(g, y2, NULL, &f), MZ_OK);
  cr_assert_eq(mz_future_result_count(f), 1);
  int32_t out[5];
  MZ_OK_OR_DIE(rt, mz_buffer_read(mz_future_result(f, 0), out, sizeof out));
  for (int i = 0; i < 5; i++) cr_expect_eq(out[i], xs[i] + 101);
  MZ_OK_OR_DIE(rt, mz_buffer_read(x, out, sizeof out));
  cr_expect_arr_eq(out, xs, sizeof xs, "x is only read");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_kernel_destroy(cp);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

/* ---- join ---- */

Test(graph, join_completes_all, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_kernel *kb = test_kernel(rt, "inc_b", INC_PARAMS, inc_fn, &count_b);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 64, NULL), *b = test_buffer_1d(rt, MZ_I32, 64, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_value(g, a), *rb = mz_value(g, b);
  for (int i = 0; i < 3; i++) ra = mz_unzip(g, mz_apply(g, ka, ra, NULL), 0);
  for (int i = 0; i < 5; i++) rb = mz_unzip(g, mz_apply(g, kb, rb, NULL), 0);
  mz_op *j = mz_join(g, 2, (mz_op *[]){ra, rb});
  cr_expect_eq(mz_unzip(g, j, 1), rb);
  mz_future *f;
  cr_assert_eq(test_run(g, j, "eager", &f), MZ_OK);
  cr_expect_eq(atomic_load(&count_a), 3);
  cr_expect_eq(atomic_load(&count_b), 5);
  cr_expect_eq(mz_future_result_count(f), 2);
  cr_expect_eq(mz_future_result(f, 0), a);
  cr_expect_eq(mz_future_result(f, 1), b);
  int32_t out[64];
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  for (int i = 0; i < 64; i++) cr_expect_eq(out[i], 3);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 64; i++) cr_expect_eq(out[i], 5);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(ka);
  mz_kernel_destroy(kb);
  mz_runtime_destroy(rt);
}

/* ---- host nodes ---- */

struct host_log {
  _Atomic int calls;
  int32_t seen[8];
  int32_t scalar;
  unsigned nargs;
  bool kernel_null;
};

/* Writes v[i] = i * 10 (v is args[0]). */
static int host_fill(const mz_call *c) {
  struct host_log *h = c->user;
  h->kernel_null = c->kernel == NULL;
  h->nargs = c->nargs;
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] = (int32_t)i * 10;
  if (c->nargs > 1) h->scalar = c->args[1].i32;
  atomic_fetch_add(&h->calls, 1);
  return 0;
}

/* Copies what it sees, then doubles it. */
static int host_look(const mz_call *c) {
  struct host_log *h = c->user;
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count && i < 8; i++) {
    h->seen[i] = v[i];
    v[i] *= 2;
  }
  atomic_fetch_add(&h->calls, 1);
  return 0;
}

Test(graph, host_nodes_chained_with_applies, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *inc = test_kernel(rt, "inc", INC_PARAMS, inc_fn, &count_a);
  mz_buffer *v = test_buffer_1d(rt, MZ_I32, 8, NULL);
  struct host_log fill = {0}, look = {0};
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  /* host fill -> inc -> host look (doubles) -> inc */
  mz_op *h1 = mz_host(g, host_fill, &fill, mz_zip(g, 2, (mz_op *[]){mz_value(g, v), mz_i32(g, 77)}));
  mz_op *a1 = mz_apply(g, inc, mz_unzip(g, h1, 0), NULL);
  mz_op *h2 = mz_host(g, host_look, &look, mz_unzip(g, a1, 0));
  mz_op *a2 = mz_apply(g, inc, mz_unzip(g, h2, 0), NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  cr_assert_eq(test_run(g, mz_unzip(g, a2, 0), "round-robin", &f), MZ_OK, "%s", mz_future_message(f));
  cr_expect_eq(atomic_load(&fill.calls), 1);
  cr_expect_eq(atomic_load(&look.calls), 1);
  cr_expect_eq(atomic_load(&count_a), 2);
  cr_expect(fill.kernel_null, "a host call has no kernel");
  cr_expect_eq(fill.nargs, 2);
  cr_expect_eq(fill.scalar, 77);
  for (int i = 0; i < 8; i++) cr_expect_eq(look.seen[i], i * 10 + 1, "the host node sees the apply's write");
  int32_t out[8];
  MZ_OK_OR_DIE(rt, mz_buffer_read(v, out, sizeof out));
  for (int i = 0; i < 8; i++) cr_expect_eq(out[i], (i * 10 + 1) * 2 + 1, "out[%d]", i);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(v);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

static int host_noargs(const mz_call *c) {
  struct host_log *h = c->user;
  h->nargs = c->nargs;
  atomic_fetch_add(&h->calls, 1);
  return 0;
}

Test(graph, host_without_deps_and_edges_to_it, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  struct host_log h = {.nargs = 99};
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *n = mz_host(g, host_noargs, &h, NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  cr_assert_eq(test_run(g, n, NULL, &f), MZ_OK);
  cr_expect_eq(atomic_load(&h.calls), 1);
  cr_expect_eq(h.nargs, 0);
  cr_expect_eq(mz_future_result_count(f), 0, "a host node without deps gives an empty tuple");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* A task keeps its rare fields (a host node's call and name, explicit
 * edges, a failure's message) in its graph's table of cold records, found
 * through a flag in its op.  3,000 named host nodes among 3,000 applies,
 * every tenth after the tenth before it by mz_depend: each runs once, in
 * that order, under its name.  Then 2,000 applies on two workers, half of
 * which fail: the workers record failures side by side while the table
 * grows, and a re-run of the same graph does it again over the records
 * the first run left. */
struct cold_host { _Atomic int calls, seq; };
static _Atomic int cold_order;
static int cold_host_fn(const mz_call *c) {
  struct cold_host *h = c->user;
  atomic_fetch_add(&h->calls, 1);
  atomic_store(&h->seq, atomic_fetch_add(&cold_order, 1));
  return 0;
}
static int cold_nop(const mz_call *c) {
  (void)c;
  return 0;
}
static int cold_odd_fails(const mz_call *c) { return c->args[0].i32 % 2 ? -1 : 0; }
Test(graph, cold_records_of_thousands_of_tasks_made_by_two_workers, .timeout = 60) {
  enum { NH = 3000, NF = 2000 };
  mz_runtime *rt = test_runtime_timed("cpu:2"); /* (for mz_future_timings) */
  mz_kernel *nop = test_kernel(rt, "nop", "i32 k", cold_nop, NULL);
  mz_kernel *odd = test_kernel(rt, "odd", "i32 k", cold_odd_fails, NULL);
  static struct cold_host hs[NH];
  mz_op **ops = calloc(2 * NH, sizeof *ops);
  cr_assert(ops);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  for (int i = 0; i < NH; i++) {
    char name[16];
    snprintf(name, sizeof name, "h%d", i);
    ops[2 * i] = mz_host_named(g, name, cold_host_fn, &hs[i], NULL);
    ops[2 * i + 1] = mz_apply(g, nop, mz_i32(g, i), NULL);
    if (i >= 10 && i % 10 == 0) cr_assert_eq(mz_depend(g, ops[2 * i], ops[2 * (i - 10)]), MZ_OK, "%s", mz_graph_message(g));
  }
  mz_future *f = NULL;
  cr_assert_eq(test_run(g, mz_join(g, 2 * NH, ops), "eager", &f), MZ_OK, "%s", f ? mz_future_message(f) : mz_graph_message(g));
  const mz_node_timing *tm = NULL;
  size_t nt = 0;
  cr_assert_eq(mz_future_timings(f, &tm, &nt), MZ_OK);
  cr_expect_eq(nt, 2 * NH);
  static unsigned char named[NH];
  size_t nnop = 0;
  for (size_t i = 0; i < nt; i++) {
    int k = -1;
    if (!strcmp(tm[i].name, "nop")) nnop++;
    else if (sscanf(tm[i].name, "h%d", &k) == 1 && k >= 0 && k < NH) named[k]++;
    else cr_expect_fail("a node named '%s'", tm[i].name);
  }
  cr_expect_eq(nnop, NH);
  for (int i = 0; i < NH; i++) {
    cr_expect_eq(named[i], 1, "host node h%d is listed once under its name", i);
    cr_expect_eq(atomic_load(&hs[i].calls), 1, "host node h%d ran once", i);
    if (i >= 10 && i % 10 == 0)
      cr_expect_gt(atomic_load(&hs[i].seq), atomic_load(&hs[i - 10].seq), "h%d ran after h%d (mz_depend)", i, i - 10);
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);

  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  for (int i = 0; i < NF; i++) ops[i] = mz_apply(g, odd, mz_i32(g, i), NULL);
  mz_op *root = mz_join(g, NF, ops);
  for (int pass = 0; pass < 2; pass++) {
    f = NULL;
    int rc = pass ? mz_graph_run(g, root, "eager", &f) : mz_schedule(g, root, "eager", &f);
    cr_assert_eq(rc, MZ_OK, "%s", mz_graph_message(g));
    cr_expect_lt(mz_future_wait(f), 0, "half of the applies fail");
    cr_assert_eq(mz_future_timings(f, &tm, &nt), MZ_OK);
    cr_expect_eq(nt, NF);
    size_t failed = 0;
    for (size_t i = 0; i < nt; i++) failed += tm[i].status != MZ_OK;
    cr_expect_eq(failed, NF / 2, "pass %d: every odd apply failed, no even one", pass);
    cr_expect(strstr(mz_future_message(f), "odd") != NULL, "the run's message names the kernel: %s", mz_future_message(f));
    mz_future_destroy(f);
  }
  mz_graph_destroy(g);
  free(ops);
  mz_kernel_destroy(nop);
  mz_kernel_destroy(odd);
  mz_runtime_destroy(rt);
}

/* A one-shot run that takes every new task of its graph reads the graph's
 * own task list; building on while it is in flight grows that list many
 * times over, and a second run takes the new tasks: both runs' lists stay
 * whole (ASan and valgrind would see a read of a moved list), every task
 * runs once, and the graph's end frees every block of the list. */
struct gate { _Atomic int open, count; };
static int gate_wait(const mz_call *c) {
  struct gate *gt = c->user;
  while (!atomic_load(&gt->open)) nanosleep(&(struct timespec){0, 100000}, NULL);
  return 0;
}
static int gate_count(const mz_call *c) {
  atomic_fetch_add(&((struct gate *)c->user)->count, 1);
  return 0;
}
Test(graph, a_run_keeps_its_task_list_while_the_graph_grows, .timeout = 60) {
  enum { N1 = 100, N2 = 5000 };
  mz_runtime *rt = test_runtime("cpu:2");
  struct gate gt = {0};
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *gate = mz_host(g, gate_wait, &gt, NULL);
  mz_op **ops = malloc((N2 + 1) * sizeof *ops);
  cr_assert_not_null(ops);
  for (int i = 0; i < N1; i++) ops[i] = mz_host(g, gate_count, &gt, gate);
  ops[N1] = gate;
  mz_future *f1 = NULL, *f2 = NULL;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, N1 + 1, ops), "eager", &f1));
  /* Run 1 waits on the gate while the list grows from 64 to 8,192. */
  for (int i = 0; i < N2; i++) ops[i] = mz_host(g, gate_count, &gt, NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_join(g, N2, ops), "eager", &f2));
  MZ_OK_OR_DIE(rt, mz_future_wait(f2));
  cr_expect_eq(mz_future_poll(f1), MZ_EAGAIN, "run 1 waits on its gate");
  atomic_store(&gt.open, 1);
  MZ_OK_OR_DIE(rt, mz_future_wait(f1));
  mz_run_stats s1, s2;
  MZ_OK_OR_DIE(rt, mz_future_stats(f1, &s1));
  MZ_OK_OR_DIE(rt, mz_future_stats(f2, &s2));
  cr_expect_eq(s1.ops, (uint64_t)N1 + 1);
  cr_expect_eq(s2.ops, (uint64_t)N2);
  cr_expect_eq(atomic_load(&gt.count), N1 + N2, "every task ran once");
  /* The graph goes first, its runs' futures after it. */
  mz_graph_destroy(g);
  mz_future_destroy(f1);
  mz_future_destroy(f2);
  free(ops);
  mz_runtime_destroy(rt);
}

/* ---- laziness ---- */

Test(graph, laziness, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_kernel *kb = test_kernel(rt, "inc_b", INC_PARAMS, inc_fn, &count_b);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 16, NULL), *b = test_buffer_1d(rt, MZ_I32, 16, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_apply(g, ka, mz_value(g, a), NULL);
  mz_op *rb = mz_apply(g, kb, mz_value(g, b), NULL);
  cr_expect_eq(atomic_load(&count_a), 0, "building runs nothing");
  cr_assert_eq(test_run(g, ra, NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 1);
  cr_expect_eq(atomic_load(&count_b), 0, "the other apply did not run");
  int32_t out[16];
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 16; i++) cr_expect_eq(out[i], 0, "b is unchanged");
  /* Now the other one: it runs exactly once, a's does not run again. */
  cr_assert_eq(test_run(g, mz_join(g, 2, (mz_op *[]){ra, rb}), NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 1);
  cr_expect_eq(atomic_load(&count_b), 1);
  /* Scheduling an op that already ran does not rerun it. */
  mz_future *f;
  cr_assert_eq(test_run(g, rb, NULL, &f), MZ_OK);
  cr_expect_eq(mz_future_result_count(f), 2);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, 0);
  mz_future_destroy(f);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_b), 1);
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  for (int i = 0; i < 16; i++) cr_expect_eq(out[i], 1);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 16; i++) cr_expect_eq(out[i], 1);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(ka);
  mz_kernel_destroy(kb);
  mz_runtime_destroy(rt);
}

Test(graph, laziness_runs_only_the_needed_prefix, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *chain[10];
  mz_op *cur = mz_value(g, a);
  for (int i = 0; i < 10; i++) cur = chain[i] = mz_unzip(g, mz_apply(g, ka, cur, NULL), 0);
  /* The value after step 4 needs steps 0..4 only. */
  cr_assert_eq(test_run(g, chain[4], NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 5);
  int32_t out[4];
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  cr_expect_eq(out[0], 5);
  cr_assert_eq(test_run(g, chain[9], NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 10);
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  cr_expect_eq(out[3], 10);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_kernel_destroy(ka);
  mz_runtime_destroy(rt);
}

/* ---- cycles ---- */

Test(graph, cycle_self_edge, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_apply(g, ka, mz_value(g, a), NULL);
  cr_expect_eq(mz_depend(g, r, r), MZ_OK);
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(g, r, NULL, &f), MZ_ECYCLE);
  cr_expect_null(f);
  cr_expect(strstr(mz_runtime_last_error(rt), "cycle"), "%s", mz_runtime_last_error(rt));
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 0);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_kernel_destroy(ka);
  mz_runtime_destroy(rt);
}

Test(graph, cycle_of_two, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_kernel *kb = test_kernel(rt, "inc_b", INC_PARAMS, inc_fn, &count_b);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, NULL), *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_apply(g, ka, mz_value(g, a), NULL);
  mz_op *rb = mz_apply(g, kb, mz_value(g, b), NULL);
  cr_expect_eq(mz_depend(g, ra, rb), MZ_OK);
  cr_expect_eq(mz_depend(g, mz_unzip(g, rb, 0), ra), MZ_OK, "a value a task produced stands for its task");
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(g, mz_join(g, 2, (mz_op *[]){ra, rb}), NULL, &f), MZ_ECYCLE);
  cr_expect_null(f);
  cr_expect_eq(mz_schedule(g, ra, NULL, &f), MZ_ECYCLE, "either root reaches the cycle");
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 0);
  cr_expect_eq(atomic_load(&count_b), 0);
  int32_t out[4];
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  cr_expect_eq(out[0], 0);
  mz_graph_destroy(g);
  /* A one-way explicit edge orders two independent applies. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  ra = mz_apply(g, ka, mz_value(g, a), NULL);
  rb = mz_apply(g, kb, mz_value(g, b), NULL);
  cr_expect_eq(mz_depend(g, rb, ra), MZ_OK);
  cr_expect_eq(test_run(g, rb, NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 1, "scheduling rb ran ra, which it was made to depend on");
  cr_expect_eq(atomic_load(&count_b), 1);
  cr_expect_eq(mz_depend(g, rb, ra), MZ_ESTATE, "an edge to a scheduled op is refused");
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(ka);
  mz_kernel_destroy(kb);
  mz_runtime_destroy(rt);
}

Test(graph, cycle_ring_of_100000, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *ka = test_kernel(rt, "inc_a", INC_PARAMS, inc_fn, &count_a);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  enum { N = 100000 };
  mz_op *first = mz_apply(g, ka, mz_value(g, a), NULL);
  mz_op *cur = mz_unzip(g, first, 0);
  for (int i = 1; i < N; i++) cur = mz_unzip(g, mz_apply(g, ka, cur, NULL), 0);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_expect_eq(mz_depend(g, first, cur), MZ_OK);
  mz_future *f = (mz_future *)1;
  cr_expect_eq(mz_schedule(g, cur, NULL, &f), MZ_ECYCLE);
  cr_expect_null(f);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&count_a), 0, "nothing ran");
  int32_t out;
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, &out, sizeof out));
  cr_expect_eq(out, 0);
  /* A second attempt is refused the same way (the failure left no state). */
  cr_expect_eq(mz_schedule(g, first, NULL, &f), MZ_ECYCLE);
  mz_graph_destroy(g);
  /* The same chain without the closing edge runs, all 100,000 of it. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  cur = mz_value(g, a);
  for (int i = 0; i < N; i++) cur = mz_unzip(g, mz_apply(g, ka, cur, NULL), 0);
  cr_expect_eq(test_run(g, cur, NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, &out, sizeof out));
  cr_expect_eq(out, N);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_kernel_destroy(ka);
  mz_runtime_destroy(rt);
}

/* ---- 2D and 3D ---- */

/* v[z][y][x] = z*10000 + y*100 + x, from the shape the call sees; w and h
 * computed from the buffer. */
static int index_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  uint64_t w = c->args[1].u64, h = c->args[2].u64;
  const mz_shape *s = &c->shapes[0];
  if (s->dims[0] != w || s->dims[1] != h) return MZ_EKERNEL;
  for (size_t z = 0; z < s->dims[2]; z++)
    for (size_t y = 0; y < h; y++)
      for (size_t x = 0; x < w; x++) v[(z * h + y) * w + x] += (int32_t)(z * 10000 + y * 100 + x);
  return 0;
}

Test(graph, buffers_2d_and_3d, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "index", "inout i32[] v, u64 w = widthof(v), u64 h = heightof(v)", index_fn, NULL);
  const size_t shapes[3][3] = {{7, 1, 1}, {5, 3, 1}, {4, 3, 2}};
  for (unsigned nd = 1; nd <= 3; nd++) {
    const size_t *d = shapes[nd - 1];
    size_t n = d[0] * d[1] * d[2];
    mz_buffer *b;
    MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_I32, nd, d, NULL, &b));
    cr_expect_eq(mz_buffer_shape(b)->ndim, nd);
    cr_expect_eq(mz_buffer_shape(b)->count, n);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *r = mz_apply(g, k, mz_value(g, b), NULL);
    r = mz_apply(g, k, mz_unzip(g, r, 0), NULL); /* twice: values double */
    cr_assert_eq(test_run(g, r, NULL, NULL), MZ_OK, "%u dims", nd);
    int32_t *out = calloc(n, sizeof *out);
    MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, n * sizeof *out));
    for (size_t z = 0; z < d[2]; z++)
      for (size_t y = 0; y < d[1]; y++)
        for (size_t x = 0; x < d[0]; x++)
          cr_expect_eq(out[(z * d[1] + y) * d[0] + x], 2 * (int32_t)(z * 10000 + y * 100 + x), "%u dims at %zu,%zu,%zu",
                       nd, x, y, z);
    free(out);
    mz_graph_destroy(g);
    mz_buffer_release(b);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- mz_depend on tasks that write no buffer ---- */

static _Atomic int ran[4];

/* "i32 id": a task whose results are all scalars. */
static int mark_fn(const mz_call *c) {
  atomic_fetch_add(&ran[c->args[0].i32], 1);
  return 0;
}

/* "i32 id, in i32[] v": a task that only reads its buffer. */
static int mark_read_fn(const mz_call *c) {
  atomic_fetch_add(&ran[c->args[0].i32], 1);
  return 0;
}

Test(graph, depend_on_tasks_that_write_nothing, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *km = test_kernel(rt, "mark", "i32 id", mark_fn, NULL);
  mz_kernel *kr = test_kernel(rt, "mark_read", "i32 id, in i32[] v", mark_read_fn, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 4, NULL);
  for (int i = 0; i < 4; i++) atomic_store(&ran[i], 0);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *scalar_only = mz_apply(g, km, mz_i32(g, 0), NULL);
  mz_op *read_only = mz_apply(g, kr, mz_zip(g, 2, (mz_op *[]){mz_i32(g, 1), mz_value(g, a)}), NULL);
  mz_op *joined = mz_apply(g, km, mz_i32(g, 2), NULL);
  mz_op *last = mz_apply(g, km, mz_i32(g, 3), NULL);
  MZ_OK_OR_DIE(rt, mz_depend(g, last, scalar_only));
  MZ_OK_OR_DIE(rt, mz_depend(g, last, mz_join(g, 2, (mz_op *[]){read_only, joined})));
  /* Scheduling only the last task runs the three it was made to follow. */
  cr_expect_eq(test_run(g, last, NULL, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  for (int i = 0; i < 4; i++) cr_expect_eq(atomic_load(&ran[i]), 1, "task %d ran %d times", i, atomic_load(&ran[i]));
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_kernel_destroy(km);
  mz_kernel_destroy(kr);
  mz_runtime_destroy(rt);
}

/* The runtime's pool of arena chunks: an arena takes chunks back from it,
 * and an arena freed into a pool with less room than it has chunks keeps
 * as many as fit and frees the rest (ASan and valgrind see no leak, the
 * count never passes max). */
/* Blocks of every size are handed out zeroed, also from a reused chunk
 * (dirtied by its last arena) and across the pieces that an arena zeroes
 * ahead of its blocks, at 8-byte-aligned addresses that never overlap. */
Test(graph, arena_blocks_are_zeroed_across_pieces_and_reused_chunks, .timeout = 30) {
  struct mz__chunk_pool pool = {.max = 4};
  for (int round = 0; round < 3; round++) {
    struct mz__arena a = {.pool = &pool};
    unsigned char *prev = NULL;
    size_t prev_len = 0, total = 0;
    for (size_t i = 0; total < 2 * MZ__SPAN + 300000; i++) { /* across chunks */
      size_t len = 1 + (i * 37) % 700 + (i % 97 == 0 ? 3000 : 0); /* some past a piece */
      unsigned char *p = mz__arena_alloc(&a, len);
      cr_assert_not_null(p);
      cr_assert_eq((uintptr_t)p % 8, 0);
      size_t j = 0;
      while (j < len && p[j] == 0) j++;
      cr_assert_eq(j, len, "round %d block %zu byte %zu is not zero", round, i, j);
      if (prev && p > prev) cr_assert_geq((size_t)(p - prev), prev_len, "blocks overlap");
      memset(p, 0xA5, len); /* dirty it for the next round's reuse */
      prev = p;
      prev_len = len;
      total += len;
    }
    mz__arena_free(&a);
    cr_assert_gt(pool.n, 0, "chunks kept for the next round");
  }
  mz__chunk_pool_fini(&pool);
}

Test(graph, arena_chunks_come_back_up_to_the_pool_size, .timeout = 30) {
  /* A block of more than half a span takes a standard chunk of its own. */
  const size_t half = MZ__SPAN / 2 + 8;
  struct mz__chunk_pool pool = {.max = 5};
  struct mz__arena a = {.pool = &pool}, b = {.pool = &pool};
  for (int i = 0; i < 3; i++) cr_assert_not_null(mz__arena_alloc(&a, half)); /* 3 standard chunks */
  cr_assert_not_null(mz__arena_alloc(&a, 2 * MZ__SPAN));                   /* one larger: never kept */
  mz__arena_free(&a);
  cr_assert_eq(pool.n, 3);
  for (int i = 0; i < 4; i++) {
    unsigned char *p = mz__arena_alloc(&b, half);
    cr_assert_not_null(p);
    for (size_t j = 0; j < half; j += 4096) cr_assert_eq(p[j], 0, "a reused chunk is handed out zeroed");
  }
  cr_assert_eq(pool.n, 0, "the 3 kept chunks were taken before any new one");
  mz__arena_free(&b);
  cr_assert_eq(pool.n, 4);
  for (int i = 0; i < 8; i++) cr_assert_not_null(mz__arena_alloc(&a, half)); /* 4 reused, 4 new */
  mz__arena_free(&a); /* room for 5 of its 8 */
  cr_assert_eq(pool.n, 5);
  mz__chunk_pool_fini(&pool);
  cr_assert_eq(pool.n, 0);
  cr_assert_null(pool.free);
}

/* An arena's blocks name its owner and its aux word through their span
 * (mz__span_owner, mz__span_aux), the first and last block of a standard
 * chunk as a block of a chunk of its own, also after the chunk went back
 * to the pool and came to another arena. */
Test(graph, arena_blocks_name_their_owner, .timeout = 30) {
  struct mz__chunk_pool pool = {.max = 4};
  int o1, o2, x1;
  struct mz__arena a = {.pool = &pool, .owner = &o1, .aux = &x1}, b = {.pool = &pool, .owner = &o2};
  unsigned char *first = mz__arena_alloc(&a, 24), *last = first;
  for (size_t used = 24; used + 4096 <= MZ__SPAN - 64; used += 4096) last = mz__arena_alloc(&a, 4096);
  unsigned char *big = mz__arena_alloc(&a, 3 * MZ__SPAN);
  cr_assert(first && last && big);
  cr_assert_eq(mz__span_owner(first), &o1);
  cr_assert_eq(mz__span_owner(last), &o1);
  cr_assert_eq(mz__span_owner(last + 4095), &o1);
  cr_assert_eq(mz__span_owner(big), &o1);
  cr_assert_eq(mz__span_aux(last + 4095), &x1, "the owner's aux word too");
  cr_assert_eq(mz__span_aux(big), &x1);
  mz__arena_free(&a);
  cr_assert_eq(pool.n, 1);
  unsigned char *again = mz__arena_alloc(&b, 24);
  cr_assert_eq(again, first, "the kept chunk is reused");
  cr_assert_eq(mz__span_owner(again), &o2);
  cr_assert_null(mz__span_aux(again), "a reused chunk takes its new arena's aux word");
  mz__arena_free(&b);
  mz__chunk_pool_fini(&pool);
}

/* Blocks apart from arenas (a replay's task list): a large one given back
 * is the next one of a size it fits, up to twice as large; a small one
 * is malloc's; the pool frees what it kept at its end (ASan and valgrind
 * see no leak).  (Large: more than a standard chunk, MZ__SPAN.) */
Test(graph, pool_blocks_are_kept_for_the_next_of_their_size, .timeout = 30) {
  const size_t S = MZ__SPAN;
  struct mz__chunk_pool pool = {.max = 64};
  unsigned char *a = mz__chunk_pool_get(&pool, S * 3 / 2);
  cr_assert_not_null(a);
  memset(a, 0x5A, S * 3 / 2);
  mz__chunk_pool_put(&pool, a);
  unsigned char *b = mz__chunk_pool_get(&pool, S * 9 / 2); /* the kept one is too small: a new one */
  cr_assert_not_null(b);
  cr_assert_neq(b, a);
  unsigned char *c = mz__chunk_pool_get(&pool, S * 4 / 3);
  cr_assert_eq(c, a, "the kept block is taken again");
  cr_assert_eq(c[S * 4 / 3 - 1], 0x5A, "and is not cleared (its user fills it)");
  mz__chunk_pool_put(&pool, b);
  unsigned char *e = mz__chunk_pool_get(&pool, S * 7 / 4);
  cr_assert_not_null(e);
  cr_assert_neq(e, b, "a kept block more than twice as large is left");
  unsigned char *d = mz__chunk_pool_get(&pool, 16);
  cr_assert_not_null(d);
  d[15] = 1;
  mz__chunk_pool_put(&pool, d);
  mz__chunk_pool_put(&pool, e);
  mz__chunk_pool_put(&pool, c);
  mz__chunk_pool_put(&pool, NULL);
  cr_assert_eq(pool.bigbytes, S * 9 / 2 + S * 7 / 4 + S * 3 / 2);
  mz__chunk_pool_fini(&pool);
  cr_assert_eq(pool.bigbytes, 0);
  cr_assert_null(pool.big);
}

/* Pointers at a fixed stride (buffers allocated one after another)
 * spread over a table's slots: 600 of them in 2,048 slots, as a graph's
 * buffer map holds them, at strides of 320 bytes to 64 KiB, each find a
 * free slot within 4 probes of their home (the product's low bits, used
 * before, took up to 19 probes at 1 KiB, 75 at 4 KiB and 600 at 64 KiB),
 * and every slot is in the table. */
Test(graph, pointer_slots_spread_strided_addresses, .timeout = 30) {
  enum { N = 600, CAP = 2048 };
  static const uintptr_t strides[] = {320, 1024, 4096, 65536};
  static unsigned char used[CAP];
  for (size_t k = 0; k < sizeof strides / sizeof *strides; k++) {
    memset(used, 0, sizeof used);
    unsigned longest = 0;
    for (uintptr_t i = 0; i < N; i++) {
      const void *p = (const void *)(uintptr_t)(0x7f0000001000u + i * strides[k]);
      size_t h = mz__ptr_slot(p, CAP);
      cr_assert_lt(h, (size_t)CAP);
      cr_assert_eq(h, mz__ptr_slot_shift(p, 64 - 11));
      unsigned probes = 1;
      while (used[h]) {
        h = (h + 1) & (CAP - 1);
        probes++;
      }
      used[h] = 1;
      if (probes > longest) longest = probes;
    }
    cr_assert_leq(longest, 4, "stride %zu: a pointer took %u probes", (size_t)strides[k], longest);
  }
}

/* ---- one-shot closures (mz_schedule's sweep down the build order) ---- */

static _Atomic int stencil_runs;

/* o = a + b + 1 (one i64 each). */
static int stencil_fn(const mz_call *c) {
  const int64_t *a = c->args[0].p, *b = c->args[1].p;
  int64_t *o = c->args[2].p;
  o[0] = a[0] + b[0] + 1;
  atomic_fetch_add(&stencil_runs, 1);
  return 0;
}

/* A 1D stencil of width W over two rows of buffers, built in two parts:
 * a root in the middle of the first part runs its cone only; the last
 * row after the second part runs every other task once, in order (the
 * reads of a row wait for its writes, and the writes for the reads of
 * the row before), and the values are the host's. */
Test(graph, one_shot_closure_extended_and_scheduled_again, .timeout = 60) {
  enum { W = 16, S1 = 6, S2 = 14 };
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "stencil", "in i64[] a, in i64[] b, out i64[] o", stencil_fn, NULL);
  mz_buffer *row[2][W];
  int64_t host[2][W];
  for (int p = 0; p < W; p++) {
    host[0][p] = p;
    host[1][p] = 0;
    row[0][p] = test_buffer_1d(rt, MZ_I64, 1, &host[0][p]);
    row[1][p] = test_buffer_1d(rt, MZ_I64, 1, &host[1][p]);
  }
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *last[W];
  atomic_store(&stencil_runs, 0);
  for (int t = 0; t < S2; t++) {
    if (t == S1) {
      /* The cone of point W/2 at step S1-1. */
      mz_future *f;
      cr_assert_eq(test_run(g, last[W / 2], NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
      mz_run_stats st;
      MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
      mz_future_destroy(f);
      /* Task (s, p) needs the writers of what it is given: (s-1, l),
       * (s-1, r) and (s-2, p), the last writer of its output. */
      bool need[S1][W] = {{false}};
      need[S1 - 1][W / 2] = true;
      int cone = 0;
      for (int s = S1 - 1; s >= 0; s--)
        for (int p = 0; p < W; p++) {
          if (!need[s][p]) continue;
          cone++;
          if (s >= 1) need[s - 1][p ? p - 1 : p] = need[s - 1][p + 1 < W ? p + 1 : p] = true;
          if (s >= 2) need[s - 2][p] = true;
        }
      cr_expect_eq(st.ops, (uint64_t)cone);
      cr_expect_eq(atomic_load(&stencil_runs), cone);
    }
    mz_buffer **in = row[t % 2], **out = row[(t + 1) % 2];
    for (int p = 0; p < W; p++) {
      int l = p ? p - 1 : p, r = p + 1 < W ? p + 1 : p;
      last[p] = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, in[l]), mz_value(g, in[r]), mz_value(g, out[p])}), NULL);
    }
  }
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_assert_eq(test_run(g, mz_join(g, W, last), NULL, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_expect_eq(atomic_load(&stencil_runs), W * S2, "every task ran once");
  for (int t = 0; t < S2; t++) {
    int64_t *in = host[t % 2], *out = host[(t + 1) % 2];
    for (int p = 0; p < W; p++) out[p] = in[p ? p - 1 : p] + in[p + 1 < W ? p + 1 : p] + 1;
  }
  for (int p = 0; p < W; p++) {
    int64_t v;
    MZ_OK_OR_DIE(rt, mz_buffer_read(row[S2 % 2][p], &v, sizeof v));
    cr_expect_eq(v, host[S2 % 2][p], "point %d", p);
  }
  /* Scheduled again: nothing is left to run. */
  mz_future *f;
  cr_assert_eq(test_run(g, mz_join(g, W, last), NULL, &f), MZ_OK);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, 0);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int p = 0; p < W; p++) {
    mz_buffer_release(row[0][p]);
    mz_buffer_release(row[1][p]);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

static _Atomic int order_log[8], order_n;

static int log_fn(const mz_call *c) {
  int i = atomic_fetch_add(&order_n, 1);
  if (i < 8) atomic_store(&order_log[i], (int)c->args[0].i32);
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

/* A root whose tasks are far apart in the build (the sweep gives up and
 * the depth-first closure runs), then the rest; and an explicit edge to
 * a task built later (no sweep on such a graph): it runs first. */
Test(graph, one_shot_closure_far_apart_and_forward_edges, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:1");
  _Atomic int runs = 0;
  mz_kernel *k = test_kernel(rt, "log", "i32 id", log_fn, &runs);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  enum { N = 3000 };
  mz_op **t = malloc(N * sizeof *t);
  cr_assert(t);
  for (int i = 0; i < N; i++) t[i] = mz_apply(g, k, mz_i32(g, i), NULL);
  mz_future *f;
  cr_assert_eq(test_run(g, mz_join(g, 2, (mz_op *[]){t[0], t[N - 1]}), NULL, &f), MZ_OK, "%s", mz_runtime_last_error(rt));
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  mz_future_destroy(f);
  cr_expect_eq(st.ops, 2);
  cr_expect_eq(atomic_load(&runs), 2);
  /* Then a root in the middle, and all of them: each task once. */
  cr_assert_eq(test_run(g, t[N / 2], NULL, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&runs), 3);
  cr_assert_eq(test_run(g, mz_join(g, N, t), NULL, NULL), MZ_OK);
  cr_expect_eq(atomic_load(&runs), N);
  mz_graph_destroy(g);
  free(t);

  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  atomic_store(&order_n, 0);
  mz_op *a = mz_apply(g, k, mz_i32(g, 1), NULL);
  mz_op *b = mz_apply(g, k, mz_i32(g, 2), NULL);
  cr_assert_eq(mz_depend(g, a, b), MZ_OK); /* a, built first, after b */
  cr_assert_eq(test_run(g, a, NULL, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_expect_eq(atomic_load(&order_n), 2, "the root's explicit predecessor ran too");
  cr_expect_eq(atomic_load(&order_log[0]), 2);
  cr_expect_eq(atomic_load(&order_log[1]), 1);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* Errors in the middle of a build: each builder's bad input is refused
 * with its code and message, the first one sticks, later builders return
 * the error op, and mz_schedule refuses the graph with that error. */
Test(graph, errors_in_the_middle_of_a_build, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "stencil", "in i64[] a, in i64[] b, out i64[] o", stencil_fn, NULL);
  mz_buffer *x = test_buffer_1d(rt, MZ_I64, 1, NULL), *y = test_buffer_1d(rt, MZ_I64, 1, NULL);
  mz_buffer *f32 = test_buffer_1d(rt, MZ_F32, 1, NULL);
  struct {
    int code;
    const char *msg;
  } want[] = {
      {MZ_EINVAL, "mz_zip: NULL op"},
      {MZ_EINVAL, "another graph"},
      {MZ_EINVAL, "unzip it first"},
      {MZ_ESHAPE, "a scalar was given"},
      {MZ_ESHAPE, "wants i64[], the buffer holds f32"},
      {MZ_EINVAL, "conflicting directions"},
  };
  for (unsigned c = 0; c < sizeof want / sizeof want[0]; c++) {
    mz_graph *g, *other;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &other));
    /* A few good tasks first. */
    mz_op *good = NULL;
    for (int i = 0; i < 3; i++)
      good = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){mz_value(g, x), mz_value(g, x), mz_value(g, y)}), NULL);
    cr_assert_eq(mz_graph_status(g), MZ_OK);
    mz_op *vx = mz_value(g, x), *vy = mz_value(g, y), *bad = NULL;
    switch (c) {
      case 0: bad = mz_zip(g, 3, (mz_op *[]){vx, NULL, vy}); break;
      case 1: bad = mz_zip(g, 3, (mz_op *[]){vx, mz_value(other, x), vy}); break;
      case 2: bad = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, mz_zip(g, 1, &vx), vy}), NULL); break;
      case 3: bad = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, mz_i64(g, 3), vy}), NULL); break;
      case 4: bad = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, mz_value(g, f32), vy}), NULL); break;
      case 5: bad = mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, vy, vy}), NULL); break;
    }
    cr_expect_eq(mz_graph_status(g), want[c].code, "case %u: %s", c, mz_graph_message(g));
    cr_expect(strstr(mz_graph_message(g), want[c].msg), "case %u: %s", c, mz_graph_message(g));
    /* Sticky: later builders return the same error op, and the first
     * message stays. */
    cr_expect_eq(mz_apply(g, k, mz_zip(g, 3, (mz_op *[]){vx, vx, vy}), NULL), bad);
    cr_expect_eq(mz_value(g, x), bad);
    cr_expect_eq(mz_zip(g, 1, &good), bad);
    cr_expect(strstr(mz_graph_message(g), want[c].msg), "case %u: %s", c, mz_graph_message(g));
    mz_future *f = NULL;
    cr_expect_eq(mz_schedule(g, good, NULL, &f), want[c].code);
    cr_expect_null(f);
    mz_graph_destroy(other);
    mz_graph_destroy(g);
  }
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_buffer_release(f32);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

static _Atomic int64_t six_sum;

static int six_fn(const mz_call *c) {
  int64_t s = 0;
  for (unsigned i = 0; i < c->nargs; i++) s += c->args[i].i64;
  atomic_fetch_add(&six_sum, s);
  return 0;
}

/* The repeat path (an apply of the last kernel on the last argument op)
 * copies the parameter slots of a kernel with more than four. */
Test(graph, repeated_applies_of_six_scalars, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "six", "i64 a, i64 b, i64 c, i64 d, i64 e, i64 f", six_fn, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *args = mz_zip(g, 6, (mz_op *[]){mz_i64(g, 1), mz_i64(g, 2), mz_i64(g, 3), mz_i64(g, 4), mz_i64(g, 5), mz_i32(g, 6)});
  mz_op *ops[3];
  for (int i = 0; i < 3; i++) ops[i] = mz_apply(g, k, args, NULL);
  atomic_store(&six_sum, 0);
  cr_assert_eq(test_run(g, mz_join(g, 3, ops), NULL, NULL), MZ_OK, "%s", mz_runtime_last_error(rt));
  cr_expect_eq(atomic_load(&six_sum), 3 * 21);
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}
