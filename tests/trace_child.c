/* A program that runs two small graphs with a trace and then aborts,
 * without mz_runtime_destroy: test_observe checks that the trace it leaves
 * holds both runs (the trace is written at each run's end).  A separate
 * program rather than a fork of the test, since ThreadSanitizer does not
 * let a forked child of a threaded process start threads.
 *
 *   trace_child FILE.json */
#include <maize.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static int k_inc(const mz_call *c) {
  float *y = c->args[0].p;
  for (uint64_t i = 0; i < c->args[1].u64; i++) y[i] += 1.0f;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: trace_child FILE.json\n");
    return 2;
  }
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core); /* the abort below is expected */
  mz_runtime *rt = NULL;
  if (mz_runtime_create(&(mz_runtime_config){.devices = "cpu:2", .quiet = true, .trace = argv[1]}, &rt)) return 3;
  mz_kernel *k = NULL;
  if (mz_kernel_create(rt, &(mz_kernel_spec){.name = "inc", .params = "inout f32[] y, u64 n = sizeof(y)", .cpu = {.fn = k_inc}},
                       &k))
    return 4;
  mz_buffer *b = NULL;
  mz_graph *g = NULL;
  if (mz_buffer_create(rt, MZ_F32, 1, (size_t[]){64}, NULL, &b) || mz_graph_create(rt, &g)) return 5;
  mz_op *root = mz_apply(g, k, mz_unzip(g, mz_apply(g, k, mz_value(g, b), NULL), 0), NULL);
  for (int i = 0; i < 2; i++) {
    mz_future *f = NULL;
    if (mz_graph_run(g, root, NULL, &f) || mz_future_wait(f)) return 6;
    mz_future_destroy(f);
  }
  abort(); /* what the trace holds was written at each run's end */
}
