/* test_future: everything a future offers.
 *
 * Checks wait, wait_for with a timeout (a host node that sleeps 200 ms:
 * a 10 ms wait times out, then wait succeeds), poll and status (MZ_EAGAIN
 * while running), the completion callback (called once, also when
 * registered after completion, a second one refused with MZ_ESTATE), the
 * eventfd in an epoll loop (not readable before completion, readable
 * after), the results (count and buffers of the root), the statistics
 * (ops equal to the tasks that ran, busy time), destroying a future while
 * its run is in flight (the run finishes; ASan checks for leaks), that
 * blocking calls from inside a host node return MZ_EDEADLK instead of
 * deadlocking, and that with MZ_WAIT_HELP=1 the waiting thread runs nodes
 * while the workers sleep (and never with MZ_WAIT_HELP=0 or by default). */
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common.h"

static int sleep_200(const mz_call *c) {
  (void)c;
  test_sleep_ms(200);
  return 0;
}

/* A host node that waits (at most 20 s) until *gate is set. */
static int gated(const mz_call *c) {
  _Atomic int *gate = c->user;
  test_wait_flag(gate, 20000);
  return 0;
}

Test(future, wait_and_wait_for, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, sleep_200, NULL, NULL), NULL, &f));
  uint64_t t0 = test_now_ns();
  cr_expect_eq(mz_future_wait_for(f, 10 * 1000000ull), MZ_ETIMEDOUT);
  uint64_t waited = test_now_ns() - t0;
  cr_expect_geq(waited, 9 * 1000000ull, "wait_for returned early (%llu ns)", (unsigned long long)waited);
  cr_expect_eq(mz_future_poll(f), MZ_EAGAIN);
  cr_expect_eq(mz_future_status(f), MZ_EAGAIN);
  cr_expect_str_eq(mz_future_message(f), "");
  cr_expect_eq(mz_future_result_count(f), 0, "no results while running");
  mz_run_stats st;
  cr_expect_eq(mz_future_stats(f, &st), MZ_EAGAIN);
  cr_expect_eq(mz_future_wait_for(f, 0), MZ_ETIMEDOUT);
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  cr_expect_geq(test_now_ns() - t0, 150 * 1000000ull, "wait returned before the host node slept");
  cr_expect_eq(mz_future_poll(f), MZ_OK);
  cr_expect_eq(mz_future_status(f), MZ_OK);
  cr_expect_str_eq(mz_future_message(f), "");
  cr_expect_eq(mz_future_wait_for(f, 0), MZ_OK, "wait_for on a finished run");
  cr_expect_eq(mz_future_wait(f), MZ_OK, "waiting twice");
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* ---- callbacks ---- */

struct then_log {
  _Atomic int calls;
  _Atomic int status;
  mz_future *f;
  _Atomic bool same_future;
};

static void on_done(mz_future *f, int status, void *user) {
  struct then_log *l = user;
  atomic_store(&l->status, status);
  atomic_store(&l->same_future, f == l->f);
  atomic_fetch_add(&l->calls, 1);
}

static void other_cb(mz_future *f, int status, void *user) {
  (void)f;
  (void)status;
  (void)user;
  cr_log_error("the second callback must never run");
  abort();
}

Test(future, then_callback, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int gate = 0;
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gated, &gate, NULL), NULL, &f));
  struct then_log l = {.status = 1, .f = f};
  MZ_OK_OR_DIE(rt, mz_future_then(f, on_done, &l));
  cr_expect_eq(mz_future_then(f, other_cb, NULL), MZ_ESTATE);
  cr_expect(strstr(mz_runtime_last_error(rt), "callback"), "%s", mz_runtime_last_error(rt));
  test_sleep_ms(20);
  cr_expect_eq(atomic_load(&l.calls), 0, "not called before the run finishes");
  atomic_store(&gate, 1);
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  /* The callback runs on a runtime thread, around the time waiters wake. */
  uint64_t end = test_now_ns() + 10000000000ull;
  while (atomic_load(&l.calls) == 0 && test_now_ns() < end) test_sleep_ms(1);
  test_sleep_ms(20);
  cr_expect_eq(atomic_load(&l.calls), 1, "called exactly once");
  cr_expect_eq(atomic_load(&l.status), MZ_OK);
  cr_expect(atomic_load(&l.same_future));
  cr_expect_eq(mz_future_then(f, other_cb, NULL), MZ_ESTATE, "still one callback per future");
  mz_future_destroy(f);

  /* Registered after completion: called at once, on this thread. */
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, sleep_200, NULL, NULL), NULL, &f));
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  struct then_log l2 = {.status = 1, .f = f};
  MZ_OK_OR_DIE(rt, mz_future_then(f, on_done, &l2));
  cr_expect_eq(atomic_load(&l2.calls), 1, "called before mz_future_then returned");
  cr_expect_eq(atomic_load(&l2.status), MZ_OK);
  cr_expect_eq(mz_future_then(f, other_cb, NULL), MZ_ESTATE);
  test_sleep_ms(20);
  cr_expect_eq(atomic_load(&l2.calls), 1);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* ---- the eventfd ---- */

Test(future, eventfd_with_epoll, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int gate = 0;
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gated, &gate, NULL), NULL, &f));
  int fd = mz_future_fd(f);
  cr_assert_geq(fd, 0, "mz_future_fd: %s", mz_err_name(fd));
  cr_expect_eq(mz_future_fd(f), fd, "the same fd every time");
  int ep = epoll_create1(EPOLL_CLOEXEC);
  cr_assert_geq(ep, 0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42};
  cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  struct epoll_event got[4];
  cr_expect_eq(epoll_wait(ep, got, 4, 0), 0, "not readable while the run is in flight");
  cr_expect_eq(epoll_wait(ep, got, 4, 50), 0, "not readable while the run is in flight");
  cr_expect_eq(mz_future_poll(f), MZ_EAGAIN);
  atomic_store(&gate, 1);
  int n = epoll_wait(ep, got, 4, 10000);
  cr_expect_eq(n, 1, "readable after completion");
  if (n == 1) {
    cr_expect_eq(got[0].data.u64, 42);
    cr_expect(got[0].events & EPOLLIN);
  }
  cr_expect_eq(mz_future_poll(f), MZ_OK, "the status is final when the fd is readable");
  cr_expect_eq(epoll_wait(ep, got, 4, 0), 1, "it stays readable");
  close(ep);
  mz_future_destroy(f);

  /* Asked for after completion: readable at once. */
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, sleep_200, NULL, NULL), NULL, &f));
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  fd = mz_future_fd(f);
  cr_assert_geq(fd, 0);
  ep = epoll_create1(EPOLL_CLOEXEC);
  ev.data.u64 = 7;
  cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  cr_expect_eq(epoll_wait(ep, got, 4, 1000), 1);
  close(ep);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_runtime_destroy(rt);
}

/* ---- results and statistics ---- */

static int busy_fn(const mz_call *c) {
  int32_t *v = c->args[0].p;
  test_sleep_ms(2);
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  atomic_fetch_add((_Atomic int *)c->user, 1);
  return 0;
}

Test(future, results_and_stats, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int calls = 0;
  mz_kernel *k = test_kernel(rt, "busy", "inout i32[] v", busy_fn, &calls);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 32, NULL), *b = test_buffer_1d(rt, MZ_I32, 32, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *ra = mz_value(g, a), *rb = mz_value(g, b);
  for (int i = 0; i < 5; i++) ra = mz_unzip(g, mz_apply(g, k, ra, NULL), 0);
  for (int i = 0; i < 2; i++) rb = mz_unzip(g, mz_apply(g, k, rb, NULL), 0);
  mz_op *root = mz_zip(g, 3, (mz_op *[]){rb, mz_f32(g, 1.0f), ra});
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, root, NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  cr_expect_eq(mz_future_result_count(f), 3);
  cr_expect_eq(mz_future_result(f, 0), b);
  cr_expect_null(mz_future_result(f, 1), "a scalar appears as NULL");
  cr_expect_eq(mz_future_result(f, 2), a);
  cr_expect_null(mz_future_result(f, 3));
  int32_t out[32];
  MZ_OK_OR_DIE(rt, mz_buffer_read(mz_future_result(f, 2), out, sizeof out));
  cr_expect_eq(out[31], 5);
  mz_run_stats st;
  MZ_OK_OR_DIE(rt, mz_future_stats(f, &st));
  cr_expect_eq(st.ops, 7, "ops %llu", (unsigned long long)st.ops);
  cr_expect_eq(st.ops, (uint64_t)atomic_load(&calls), "ops equal the tasks that ran");
  cr_expect_eq(st.failed, 0);
  cr_expect_geq(st.batches, 1);
  cr_expect_eq(st.transfers, 0, "no copies on a CPU-only runtime");
  cr_expect_eq(st.bytes_moved, 0);
  cr_expect_eq(st.ndevices, mz_runtime_device_count(rt));
  cr_assert_not_null(st.busy_ns);
  cr_expect_geq(st.busy_ns[0], 7 * 2000000ull * 9 / 10, "busy %llu ns", (unsigned long long)st.busy_ns[0]);
  cr_expect_geq(st.elapsed_ns, 5 * 2000000ull, "elapsed %llu ns", (unsigned long long)st.elapsed_ns);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(a);
  mz_buffer_release(b);
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
}

/* ---- destroying in flight ---- */

static _Atomic int finished;

static int slow_inc(const mz_call *c) {
  test_sleep_ms(100);
  int32_t *v = c->args[0].p;
  for (size_t i = 0; i < c->shapes[0].count; i++) v[i] += 1;
  atomic_fetch_add(&finished, 1);
  return 0;
}

static void count_cb(mz_future *f, int status, void *user) {
  (void)f;
  if (status == MZ_OK) atomic_fetch_add((_Atomic int *)user, 1);
}

Test(future, destroy_in_flight, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  mz_kernel *k = test_kernel(rt, "slow_inc", "inout i32[] v", slow_inc, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 1000, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_op *r = mz_value(g, a);
  for (int i = 0; i < 3; i++) r = mz_unzip(g, mz_apply(g, k, r, NULL), 0);
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, r, NULL, &f));
  _Atomic int cb = 0;
  MZ_OK_OR_DIE(rt, mz_future_then(f, count_cb, &cb));
  (void)mz_future_fd(f); /* an eventfd to close too */
  mz_future_destroy(f);
  /* The graph, kernel and buffer handles go too: the run keeps what it needs. */
  mz_graph_destroy(g);
  mz_kernel_destroy(k);
  cr_expect_eq(atomic_load(&finished), 0, "destroy did not wait");
  int32_t out[1000];
  MZ_OK_OR_DIE(rt, mz_buffer_read(a, out, sizeof out));
  for (int i = 0; i < 1000; i++) cr_expect_eq(out[i], 3);
  MZ_OK_OR_DIE(rt, mz_runtime_wait_idle(rt));
  cr_expect_eq(atomic_load(&finished), 3, "the run finished");
  uint64_t end = test_now_ns() + 5000000000ull;
  while (!atomic_load(&cb) && test_now_ns() < end) test_sleep_ms(1);
  cr_expect_eq(atomic_load(&cb), 1, "its callback still ran");
  mz_buffer_release(a);
  mz_runtime_destroy(rt);
}

Test(future, runtime_destroy_waits_for_runs, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:1");
  mz_kernel *k = test_kernel(rt, "slow_inc", "inout i32[] v", slow_inc, NULL);
  mz_buffer *a = test_buffer_1d(rt, MZ_I32, 16, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_apply(g, k, mz_value(g, a), NULL), NULL, &f));
  mz_future_destroy(f);
  /* Everything else is left to mz_runtime_destroy. */
  mz_runtime_destroy(rt);
  cr_expect_eq(atomic_load(&finished), 1);
}

/* ---- blocking calls from runtime threads ---- */

struct inside {
  mz_future *other;
  mz_buffer *buf;
  mz_runtime *rt;
  int wait_rc, wait_for_rc, read_rc, write_rc, idle_rc;
  _Atomic int done;
};

static int blocking_host(const mz_call *c) {
  struct inside *in = c->user;
  int32_t tmp[4];
  in->wait_rc = mz_future_wait(in->other);
  in->wait_for_rc = mz_future_wait_for(in->other, 1000000000ull);
  in->read_rc = mz_buffer_read(in->buf, tmp, sizeof tmp);
  in->write_rc = mz_buffer_write(in->buf, tmp, sizeof tmp);
  in->idle_rc = mz_runtime_wait_idle(in->rt);
  atomic_store(&in->done, 1);
  return 0;
}

static void blocking_cb(mz_future *f, int status, void *user) {
  (void)status;
  struct inside *in = user;
  in->wait_rc = mz_future_wait(in->other);
  in->idle_rc = mz_runtime_wait_idle(in->rt);
  (void)f;
  atomic_store(&in->done, 1);
}

Test(future, blocking_calls_from_runtime_threads, .timeout = 30) {
  mz_runtime *rt = test_runtime("cpu:2");
  _Atomic int gate = 0;
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  /* A run that stays in flight until the gate opens. */
  mz_future *blocked;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gated, &gate, NULL), NULL, &blocked));
  struct inside in = {.other = blocked, .buf = b, .rt = rt};
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, blocking_host, &in, NULL), NULL, &f));
  int rc = mz_future_wait_for(f, 10000000000ull);
  atomic_store(&gate, 1); /* whatever happened, let the first run end */
  cr_assert_eq(rc, MZ_OK, "the host node deadlocked or failed: %s", mz_err_name(rc));
  cr_expect(atomic_load(&in.done));
  cr_expect_eq(in.wait_rc, MZ_EDEADLK, "mz_future_wait: %s", mz_err_name(in.wait_rc));
  cr_expect_eq(in.wait_for_rc, MZ_EDEADLK, "mz_future_wait_for: %s", mz_err_name(in.wait_for_rc));
  cr_expect_eq(in.read_rc, MZ_EDEADLK, "mz_buffer_read: %s", mz_err_name(in.read_rc));
  cr_expect_eq(in.write_rc, MZ_EDEADLK, "mz_buffer_write: %s", mz_err_name(in.write_rc));
  cr_expect_eq(in.idle_rc, MZ_EDEADLK, "mz_runtime_wait_idle: %s", mz_err_name(in.idle_rc));
  cr_expect_eq(mz_future_wait(blocked), MZ_OK);
  mz_future_destroy(f);
  mz_future_destroy(blocked);

  /* From a completion callback too. */
  atomic_store(&gate, 0);
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, gated, &gate, NULL), NULL, &blocked));
  struct inside in2 = {.other = blocked, .buf = b, .rt = rt};
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, sleep_200, NULL, NULL), NULL, &f));
  MZ_OK_OR_DIE(rt, mz_future_then(f, blocking_cb, &in2));
  cr_expect_eq(mz_future_wait(f), MZ_OK);
  bool met = test_wait_flag(&in2.done, 10000);
  atomic_store(&gate, 1);
  cr_assert(met, "the callback deadlocked");
  cr_expect_eq(in2.wait_rc, MZ_EDEADLK, "mz_future_wait in a callback: %s", mz_err_name(in2.wait_rc));
  cr_expect_eq(in2.idle_rc, MZ_EDEADLK, "mz_runtime_wait_idle in a callback: %s", mz_err_name(in2.idle_rc));
  cr_expect_eq(mz_future_wait(blocked), MZ_OK);
  mz_future_destroy(f);
  mz_future_destroy(blocked);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

Test(future, wait_on_finished_future_from_host_node, .timeout = 30) {
  /* Waiting on a run that has already finished never blocks, so it is
   * allowed from a host node. */
  mz_runtime *rt = test_runtime("cpu:2");
  mz_graph *g;
  MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
  mz_future *first;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, sleep_200, NULL, NULL), NULL, &first));
  cr_assert_eq(mz_future_wait(first), MZ_OK);
  mz_buffer *b = test_buffer_1d(rt, MZ_I32, 4, NULL);
  struct inside in = {.other = first, .buf = b, .rt = rt};
  mz_future *f;
  MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, blocking_host, &in, NULL), NULL, &f));
  cr_assert_eq(mz_future_wait(f), MZ_OK);
  cr_expect_eq(in.wait_rc, MZ_OK);
  cr_expect_eq(in.wait_for_rc, MZ_OK);
  cr_expect_eq(in.read_rc, MZ_EDEADLK);
  mz_future_destroy(f);
  mz_future_destroy(first);
  mz_graph_destroy(g);
  mz_buffer_release(b);
  mz_runtime_destroy(rt);
}

/* ---- the waiting thread helps ---- */

struct where {
  pthread_t self;
  int ncpus; /* the processors the node's thread may run on */
  _Atomic int ran;
};

static int record_thread(const mz_call *c) {
  struct where *w = c->user;
  w->self = pthread_self();
  cpu_set_t set;
  w->ncpus = sched_getaffinity(0, sizeof set, &set) ? -1 : CPU_COUNT(&set);
  atomic_store(&w->ran, 1);
  return 0;
}

/* n one-node runs, each scheduled once the workers have gone to sleep
 * (they spin 50 us, then park): how many ran on this, the waiting, thread. */
static unsigned ran_on_waiter(const char *help, unsigned n) {
  if (help) setenv("MZ_WAIT_HELP", help, 1);
  else unsetenv("MZ_WAIT_HELP");
  mz_runtime *rt = test_runtime("cpu:2");
  unsetenv("MZ_WAIT_HELP");
  unsigned mine = 0;
  cpu_set_t before, after;
  cr_assert_eq(sched_getaffinity(0, sizeof before, &before), 0);
  const char *bind = getenv("MZ_BIND");
  bool bound = (!bind || !strcmp(bind, "core")) && CPU_COUNT(&before) >= 2 &&
               CPU_COUNT(&before) == sysconf(_SC_NPROCESSORS_ONLN);
  for (unsigned i = 0; i < n; i++) {
    test_sleep_ms(1);
    mz_graph *g;
    MZ_OK_OR_DIE(rt, mz_graph_create(rt, &g));
    struct where w = {.ran = 0};
    mz_future *f;
    MZ_OK_OR_DIE(rt, mz_schedule(g, mz_host(g, record_thread, &w, NULL), NULL, &f));
    cr_assert_eq(mz_future_wait(f), MZ_OK);
    cr_assert(atomic_load(&w.ran), "run %u: the node did not run", i);
    bool here = pthread_equal(w.self, pthread_self()) != 0;
    mine += here;
    /* Standing in for a worker, the waiter was bound to its core (the
     * workers are bound to one core each when MZ_BIND is core, the
     * default, and this process may use every processor), and its own
     * binding is back once the wait returns. */
    if (here && bound)
      cr_expect_lt(w.ncpus, CPU_COUNT(&before), "run %u: the waiter ran the node unbound (%d processors)", i, w.ncpus);
    cr_assert_eq(sched_getaffinity(0, sizeof after, &after), 0);
    cr_expect(CPU_EQUAL(&before, &after), "run %u: the waiting thread's binding was not restored", i);
    mz_future_destroy(f);
    mz_graph_destroy(g);
  }
  mz_runtime_destroy(rt);
  return mine;
}

/* A parked worker's node costs a wake-up of 16-76 us here; the waiting
 * thread borrows the sleeping worker instead.  Which thread wins each
 * race is not fixed, so the test asks for at least one of 100. */
Test(future, waiting_thread_runs_nodes, .timeout = 60) {
  unsigned mine = ran_on_waiter("1", 100);
  cr_log_info("%u of 100 one-node runs ran on the waiting thread", mine);
  cr_expect_gt(mine, 0, "no node ran on the waiting thread");
  cr_expect_eq(ran_on_waiter("0", 30), 0, "MZ_WAIT_HELP=0: a node ran on the waiting thread");
  cr_expect_eq(ran_on_waiter(NULL, 30), 0, "by default a node ran on the waiting thread");
  setenv("MZ_WAIT_HELP", "2", 1);
  mz_runtime *rt = NULL;
  cr_expect_eq(mz_runtime_create(&(mz_runtime_config){.devices = "cpu:1", .quiet = true}, &rt), MZ_EINVAL);
  cr_expect_null(rt);
  unsetenv("MZ_WAIT_HELP");
}
