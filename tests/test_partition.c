/* test_partition: splitting a buffer into tiles and putting it back.
 *
 * Checks tile shapes (the first tiles get one more row when the size does
 * not divide; 1D and 2D buffers), that ops on different tiles write their
 * own part of the parent, that they run in parallel on 2 workers (two
 * tile kernels meet at a barrier), that unpartition gives the whole
 * buffer with every tile's result (compared with a serial reference), that
 * the buffer can be used whole again afterwards, and the error cases:
 * n = 0 or n > rows (MZ_ERANGE), using the whole buffer while partitioned
 * (MZ_ESTATE), unpartition with a missing or duplicated tile or tiles of
 * another buffer (MZ_EINVAL). */
#include <pthread.h>

#include "common.h"

enum { MAXT = 16 };

static _Atomic int tile_rows[MAXT], tile_width[MAXT], tile_calls[MAXT];

/* "inout i32[] t, i32 id, u64 w = widthof(t), u64 h = heightof(t)" for 2D,
 * where a 1D buffer has w = count and h = 1.  t[y][x] = t*... */
static int tile_fn(const mz_call *c) {
  int32_t *t = c->args[0].p;
  int id = c->args[1].i32;
  uint64_t w = c->args[2].u64, h = c->args[3].u64;
  atomic_store(&tile_rows[id], (int)(c->shapes[0].ndim == 1 ? c->shapes[0].dims[0] : h));
  atomic_store(&tile_width[id], (int)w);
  atomic_fetch_add(&tile_calls[id], 1);
  for (uint64_t i = 0; i < w * h; i++) t[i] = t[i] * 10 + id + 1;
  return 0;
}

#define TILE_PARAMS "inout i32[] t, i32 id, u64 w = widthof(t), u64 h = heightof(t)"

/* The serial reference: element e of a buffer of `rows` rows of `rowlen`
 * elements, split into n tiles, ends as init*10 + tile + 1. */
static int tile_of_row(size_t row, size_t rows, unsigned n) {
  size_t start = 0;
  for (unsigned i = 0; i < n; i++) {
    size_t r = rows / n + (i < rows % n ? 1 : 0);
    if (row < start + r) return (int)i;
    start += r;
  }
  return -1;
}

static void run_tiles(const char *devices, const char *policy, unsigned ndim, size_t width, size_t rows, unsigned n) {
  for (int i = 0; i < MAXT; i++) {
    atomic_store(&tile_rows[i], 0);
    atomic_store(&tile_width[i], 0);
    atomic_store(&tile_calls[i], 0);
  }
  mz_runtime *rt = test_runtime(devices);
  mz_kernel *k = test_kernel(rt, "tile", TILE_PARAMS, tile_fn, NULL);
  size_t count = width * rows;
  int32_t *init = malloc(count * sizeof *init), *out = malloc(count * sizeof *out);
  for (size_t i = 0; i < count; i++) init[i] = (int32_t)i;
  mz_buffer *b;
  size_t dims[2] = {ndim == 1 ? rows : width, rows};
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_I32, ndim, dims, init, &b));
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *parts = mz_partition(g, mz_value(g, b), n);
  mz_op *outs[MAXT];
  for (unsigned i = 0; i < n; i++) {
    mz_op *t = mz_unzip(g, parts, i);
    outs[i] = mz_unzip(g, mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){t, mz_i32(g, (int32_t)i)}), NULL), 0);
  }
  mz_op *whole = mz_unpartition(g, mz_zip(g, n, outs));
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_future *f;
  cr_assert_eq(test_run(g, whole, policy, &f), MZ_OK, "%s", mz_future_message(f));
  cr_assert_eq(mz_future_result_count(f), 1);
  cr_expect_eq(mz_future_result(f, 0), b, "unpartition gives the whole buffer");
  for (unsigned i = 0; i < n; i++) {
    size_t want = rows / n + (i < rows % n ? 1 : 0);
    cr_expect_eq(atomic_load(&tile_calls[i]), 1, "tile %u ran once", i);
    cr_expect_eq((size_t)atomic_load(&tile_rows[i]), want, "tile %u of %zu rows in %u: rows", i, rows, n);
    if (ndim == 2) cr_expect_eq((size_t)atomic_load(&tile_width[i]), width, "tile %u keeps the width", i);
  }
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, count * sizeof *out));
  size_t bad = 0;
  for (size_t e = 0; e < count; e++) {
    int32_t ref = init[e] * 10 + tile_of_row(e / width, rows, n) + 1;
    bad += out[e] != ref;
  }
  cr_expect_eq(bad, 0, "%zu elements differ from the serial reference (%u dims, %zu rows, %u tiles)", bad, ndim, rows, n);
  /* The whole buffer is usable again, in this graph, after unpartition. */
  mz_op *again = mz_apply(g, k, mz_zip(g, 2, (mz_op *[]){mz_unzip(g, whole, 0), mz_i32(g, 0)}), NULL);
  cr_assert_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_expect_eq(test_run(g, again, policy, NULL), MZ_OK);
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, count * sizeof *out));
  for (size_t e = 0; e < count; e++) {
    int32_t ref = (init[e] * 10 + tile_of_row(e / width, rows, n) + 1) * 10 + 1;
    if (out[e] != ref) {
      cr_expect_eq(out[e], ref, "element %zu after the whole-buffer op", e);
      break;
    }
  }
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  free(init);
  free(out);
}

Test(partition, one_d_dividing, .timeout = 30) { run_tiles("cpu:2", "eager", 1, 1, 12, 4); }
Test(partition, one_d_not_dividing, .timeout = 30) { run_tiles("cpu:2", "round-robin", 1, 1, 10, 3); }
Test(partition, one_d_one_tile_and_one_row_each, .timeout = 30) {
  run_tiles("cpu:2", "eager", 1, 1, 5, 1);
  run_tiles("cpu:1", "single", 1, 1, 5, 5);
}
Test(partition, two_d_not_dividing, .timeout = 30) { run_tiles("cpu:2", "round-robin", 2, 5, 7, 3); }
Test(partition, two_d_many_tiles, .timeout = 30) { run_tiles("cpu:2", "eager", 2, 3, 16, 16); }

/* ---- parallel tiles ---- */

static _Atomic int arrived;
static _Atomic int arrived_on[2]; /* the queue of each arrival, + 1 (for the message) */

/* Both tiles must be inside the kernel at the same time: each waits (at
 * most 60 s: valgrind runs one thread at a time, slowly) for the other. */
static int barrier_fn(const mz_call *c) {
  int32_t *t = c->args[0].p;
  int n = atomic_fetch_add(&arrived, 1);
  if (n < 2) atomic_store(&arrived_on[n], (int)c->queue + 1);
  uint64_t end = test_now_ns() + 60000000000ull;
  while (atomic_load(&arrived) < 2 && test_now_ns() < end) test_sleep_ms(1);
  int met = atomic_load(&arrived) >= 2;
  for (size_t i = 0; i < c->shapes[0].count; i++) t[i] = met ? 1 : -1;
  return met ? 0 : MZ_ETIMEDOUT;
}

Test(partition, tiles_run_in_parallel, .timeout = 150) {
  const char *pols[] = {"eager", "round-robin"};
  for (int p = 0; p < 2; p++) {
    atomic_store(&arrived, 0);
    atomic_store(&arrived_on[0], 0);
    atomic_store(&arrived_on[1], 0);
    mz_runtime *rt = test_runtime("cpu:2");
    mz_kernel *k = test_kernel(rt, "barrier", "inout i32[] t", barrier_fn, NULL);
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 64, NULL);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *parts = mz_partition(g, mz_value(g, b), 2);
    mz_op *t0 = mz_unzip(g, mz_apply(g, k, mz_unzip(g, parts, 0), NULL), 0);
    mz_op *t1 = mz_unzip(g, mz_apply(g, k, mz_unzip(g, parts, 1), NULL), 0);
    mz_op *whole = mz_unpartition(g, mz_zip(g, 2, (mz_op *[]){t1, t0}));
    mz_future *f;
    cr_assert_eq(test_run(g, whole, pols[p], &f), MZ_OK,
                 "%s: the two tiles did not run at the same time (arrivals on queues %d and %d; -1: none): %s", pols[p],
                 atomic_load(&arrived_on[0]) - 1, atomic_load(&arrived_on[1]) - 1, mz_future_message(f));
    int32_t out[64];
    MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
    for (int i = 0; i < 64; i++) cr_expect_eq(out[i], 1);
    mz_future_destroy(f);
    mz_graph_destroy(g);
    mz_buffer_release(b);
    mz_kernel_destroy(k);
    mz_runtime_destroy(rt);
  }
}

/* ---- errors ---- */

static int nop_fn(const mz_call *c) {
  (void)c;
  return 0;
}

Test(partition, errors, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "nop", "inout i32[] t", nop_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL), *other = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_buffer *b2;
  MZ_OK_OR_DIE(rt, mz_buffer_create(rt, MZ_I32, 2, (size_t[]){8, 3}, NULL, &b2));
  mz_graph *g;
  mz_future *f;

  /* n = 0, n > rows (1D: rows are elements; 2D: dims[1]). */
  const struct {
    mz_buffer *buf;
    unsigned n;
  } range[] = {{b, 0}, {b, 5}, {b2, 4}, {b2, 0}};
  for (unsigned i = 0; i < 4; i++) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *p = mz_partition(g, mz_value(g, range[i].buf), range[i].n);
    cr_expect_eq(mz_graph_status(g), MZ_ERANGE, "case %u: %s", i, mz_err_name(mz_graph_status(g)));
    cr_expect(strstr(mz_graph_message(g), "mz_partition"), "%s", mz_graph_message(g));
    cr_expect_eq(mz_schedule(g, p, NULL, &f), MZ_ERANGE);
    mz_graph_destroy(g);
  }
  /* 2D with n = rows is fine. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_partition(g, mz_value(g, b2), 3);
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  mz_graph_destroy(g);

  /* Not a buffer value. */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_partition(g, mz_i32(g, 3), 2);
  cr_expect_eq(mz_graph_status(g), MZ_EINVAL);
  mz_graph_destroy(g);

  /* The whole buffer while partitioned: apply, host, partition again. */
  for (int i = 0; i < 3; i++) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *p = mz_partition(g, mz_value(g, b), 2);
    cr_assert_eq(mz_graph_status(g), MZ_OK);
    if (i == 0) mz_apply(g, k, mz_value(g, b), NULL);
    else if (i == 1) mz_host(g, nop_fn, NULL, mz_value(g, b));
    else mz_partition(g, mz_value(g, b), 2);
    cr_expect_eq(mz_graph_status(g), MZ_ESTATE, "case %d: %s", i, mz_err_name(mz_graph_status(g)));
    cr_expect(strstr(mz_graph_message(g), "partitioned"), "%s", mz_graph_message(g));
    cr_expect_eq(mz_schedule(g, p, NULL, &f), MZ_ESTATE);
    mz_graph_destroy(g);
  }

  /* Unpartition: a missing tile, a duplicated tile, a foreign buffer, not
   * tiles at all, tiles of two partitions. */
  for (int i = 0; i < 5; i++) {
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *p = mz_partition(g, mz_value(g, b), 3);
    mz_op *t0 = mz_unzip(g, p, 0), *t1 = mz_unzip(g, p, 1), *t2 = mz_unzip(g, p, 2);
    mz_op *u = NULL;
    switch (i) {
      case 0: u = mz_unpartition(g, mz_zip(g, 2, (mz_op *[]){t0, t2})); break;
      case 1: u = mz_unpartition(g, mz_zip(g, 3, (mz_op *[]){t0, t1, t1})); break;
      case 2: u = mz_unpartition(g, mz_zip(g, 4, (mz_op *[]){t0, t1, t2, mz_value(g, other)})); break;
      case 3: u = mz_unpartition(g, mz_value(g, other)); break;
      case 4: {
        mz_op *q = mz_partition(g, mz_value(g, other), 3);
        u = mz_unpartition(g, mz_zip(g, 3, (mz_op *[]){t0, t1, mz_unzip(g, q, 2)}));
        break;
      }
    }
    cr_expect_eq(mz_graph_status(g), MZ_EINVAL, "case %d: %s (%s)", i, mz_err_name(mz_graph_status(g)),
                 mz_graph_message(g));
    cr_expect(strstr(mz_graph_message(g), "mz_unpartition"), "%s", mz_graph_message(g));
    cr_expect_eq(mz_schedule(g, u, NULL, &f), MZ_EINVAL);
    mz_graph_destroy(g);
  }
  /* Whole tiles given in any order are fine (the partition above is
   * unaffected by refused unpartitions). */
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *p = mz_partition(g, mz_value(g, b), 3);
  mz_op *u = mz_unpartition(g, mz_zip(g, 3, (mz_op *[]){mz_unzip(g, p, 2), mz_unzip(g, p, 0), mz_unzip(g, p, 1)}));
  cr_expect_eq(mz_graph_status(g), MZ_OK, "%s", mz_graph_message(g));
  cr_expect_eq(test_run(g, u, NULL, NULL), MZ_OK);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_buffer_release(b2);
  mz_buffer_release(other);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- the parent used while its tiles are written by a run in flight ---- */

static int gated_inc_fn(const mz_call *c) {
  _Atomic int *gate = c->user;
  (void)test_wait_flag(gate, 20000);
  int32_t *t = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) t[i] += 1;
  return 0;
}

static int copy_out_fn(const mz_call *c) {
  memcpy(c->user, c->args[0].p, c->shapes[0].count * sizeof(int32_t));
  return 0;
}

static void *open_gate_soon(void *arg) {
  test_sleep_ms(100);
  atomic_store((_Atomic int *)arg, 1);
  return NULL;
}

/* The partition ran in an earlier run; a later run of the same graph
 * writes a tile and is still in flight when the parent is read, through
 * mz_buffer_read or by a node of another graph: both wait for the tile's
 * writer and see its data (they used to read the parent at once, before
 * the tile was written: the parent's hazards did not name its tiles'). */
Test(partition, parent_waits_for_tiles_in_flight, .timeout = 60) {
  for (int through_graph = 0; through_graph < 2; through_graph++) {
    mz_runtime *rt = test_runtime("cpu:2");
    _Atomic int gate = 0;
    mz_kernel *inc = test_kernel(rt, "gated_inc", "inout i32[] t", gated_inc_fn, (void *)&gate);
    int32_t init[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, init);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    mz_op *tiles = mz_partition(g, mz_value(g, b), 2);
    MZ_OK_OR_DIE(rt, test_run(g, mz_unzip(g, tiles, 0), NULL, NULL)); /* the partition only */
    mz_future *f;
    MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, inc, mz_unzip(g, tiles, 1), NULL), NULL, &f));
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_gate_soon, (void *)&gate), 0);
    int32_t out[8] = {0};
    if (!through_graph) {
      MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
    } else {
      mz_graph *g2;
      MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
      MZ_OK_OR_DIE(rt, test_run(g2, mz_host(g2, copy_out_fn, out, mz_value(g2, b)), NULL, NULL));
      mz_graph_destroy(g2);
    }
    pthread_join(th, NULL);
    cr_expect_eq(mz_future_wait_for(f, 20000000000ull), MZ_OK);
    for (int i = 0; i < 8; i++)
      cr_expect_eq(out[i], init[i] + (i >= 4), "%s: element %d is %d", through_graph ? "another graph" : "mz_buffer_read",
                   i, out[i]);
    mz_future_destroy(f);
    mz_graph_destroy(g);
    mz_buffer_release(b);
    mz_kernel_destroy(inc);
    mz_runtime_destroy(rt);
  }
}

/* A run planned while the buffer had another graph's tiles (planning
 * orders the whole buffer's writer after them) outlives those tiles: the
 * other graph is destroyed, and its tiles freed, while the run is in
 * flight.  The run's end must not touch them (it clears the hazard
 * records of its own buffers only; run under ASan and valgrind, a touch
 * of a freed tile is an error), and the run writes the buffer. */
Test(partition, run_outlives_another_graphs_tiles, .timeout = 60) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int gate = 0;
  mz_kernel *inc = test_kernel(rt, "gated_inc", "inout i32[] t", gated_inc_fn, (void *)&gate);
  int32_t init[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, init);
  mz_graph *g1, *g2;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g1));
  MZ_OK_OR_DIE(rt, test_run(g1, mz_partition(g1, mz_value(g1, b), 4), NULL, NULL));
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g2, mz_apply(g2, inc, mz_value(g2, b), NULL), NULL, &f));
  mz_graph_destroy(g1); /* its tiles go while g2's run waits at the gate */
  atomic_store(&gate, 1);
  cr_expect_eq(mz_future_wait_for(f, 20000000000ull), MZ_OK);
  cr_expect_eq(mz_future_result_count(f), 1u);
  cr_expect_eq(mz_future_result(f, 0), b, "the root's result is the buffer it wrote");
  int32_t out[8] = {0};
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 8; i++) cr_expect_eq(out[i], init[i] + 1, "element %d is %d", i, out[i]);
  mz_future_destroy(f);
  mz_graph_destroy(g2);
  mz_buffer_release(b);
  mz_kernel_destroy(inc);
  mz_runtime_destroy(rt);
}

static int fail_tile_fn(const mz_call *c) {
  (void)c;
  return 1;
}

static int set9_fn(const mz_call *c) {
  int32_t *t = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) t[i] = 9;
  return 0;
}

/* A tile's failed writer shows through the parent (mz_buffer_read gives
 * its error) until the parent is written whole. */
Test(partition, failed_tile_writer_shows_through_the_parent, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *bad = test_kernel(rt, "fail_tile", "inout i32[] t", fail_tile_fn, NULL);
  mz_kernel *set = test_kernel(rt, "set9", "out i32[] t", set9_fn, NULL);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 8, NULL);
  mz_graph *g, *g2;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *tiles = mz_partition(g, mz_value(g, b), 2);
  cr_expect_eq(test_run(g, mz_apply(g, bad, mz_unzip(g, tiles, 0), NULL), NULL, NULL), MZ_EKERNEL);
  int32_t out[8];
  cr_expect_eq(mz_buffer_read(b, out, sizeof out), MZ_EKERNEL);
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g2));
  MZ_OK_OR_DIE(rt, test_run(g2, mz_apply(g2, set, mz_value(g2, b), NULL), NULL, NULL));
  MZ_OK_OR_DIE(rt, mz_buffer_read(b, out, sizeof out));
  for (int i = 0; i < 8; i++) cr_expect_eq(out[i], 9);
  mz_graph_destroy(g2);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_kernel_destroy(bad);
  mz_kernel_destroy(set);
  mz_runtime_destroy(rt);
}
