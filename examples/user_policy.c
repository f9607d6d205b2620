/* user_policy: a scheduling policy written by a user, in one file and one
 * register call.  "least-loaded" sends each node, once it is ready, to the
 * queue with the fewest unfinished nodes among those that can run it,
 * preferring a queue whose device already holds the node's data. */
#include <maize.h>
#include <maize/policy.h>
#include <stdio.h>

static int least_loaded_select(void *state, const mz_sched *s, mz_task *t, bool ready) {
  (void)state;
  if (!ready) return MZ_POLICY_DEFER;
  int best = -1;
  double best_cost = 0;
  for (unsigned q = 0; q < mz_sched_queue_count(s); q++) {
    if (!mz_task_can_run(s, t, q)) continue;
    /* Backlog in nodes, minus a bonus for data already there. */
    double cost = (double)mz_sched_queue_backlog(s, q) -
                  (double)mz_task_bytes_on(s, t, q) / (double)(mz_task_bytes(t) + 1);
    if (best < 0 || cost < best_cost) {
      best = (int)q;
      best_cost = cost;
    }
  }
  return best < 0 ? 0 : best;
}

static const struct mz_policy_ops least_loaded = {
    .abi = MZ_POLICY_ABI,
    .name = "least-loaded",
    .description = "a ready node goes to the queue with the fewest unfinished nodes",
    .select = least_loaded_select,
};

static int inc(const mz_call *c) {
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  return 0;
}

int main(void) {
  mz_runtime *rt;
  if (mz_runtime_create(&(mz_runtime_config){.devices = "cpu"}, &rt)) return 1;
  if (mz_policy_register(rt, &least_loaded)) {
    fprintf(stderr, "register: %s\n", mz_runtime_last_error(rt));
    return 1;
  }
  mz_kernel *k;
  if (mz_kernel_create(rt, &(mz_kernel_spec){.name = "inc", .params = "inout i32[] v", .cpu = {.fn = inc}}, &k)) return 1;
  enum { B = 16, STEPS = 100 };
  mz_buffer *bufs[B];
  mz_graph *g;
  if (mz_graph_create(rt, &g)) return 1;
  mz_op *last[B];
  for (int b = 0; b < B; b++) {
    if (mz_buffer_create(rt, MZ_I32, 1, (size_t[]){1024}, NULL, &bufs[b])) return 1;
    last[b] = mz_value(g, bufs[b]);
    for (int s = 0; s < STEPS; s++) last[b] = mz_unzip(g, mz_apply(g, k, last[b], NULL), 0);
  }
  mz_future *f;
  if (mz_schedule(g, mz_join(g, B, last), "least-loaded", &f)) {
    fprintf(stderr, "schedule: %s\n", mz_runtime_last_error(rt));
    return 1;
  }
  int rc = mz_future_wait(f);
  int32_t out[1024];
  int bad = 0;
  for (int b = 0; b < B; b++) {
    if (mz_buffer_read(bufs[b], out, sizeof out)) return 1;
    for (int i = 0; i < 1024; i++) bad += out[i] != STEPS;
  }
  mz_run_stats st;
  mz_future_stats(f, &st);
  printf("least-loaded: %d chains of %d increments, status %s, %s, %llu ops\n", B, STEPS, mz_err_name(rc),
         bad ? "WRONG" : "correct", (unsigned long long)st.ops);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  for (int b = 0; b < B; b++) mz_buffer_release(bufs[b]);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  return rc || bad;
}
