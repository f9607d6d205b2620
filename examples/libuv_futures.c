/* libuv_futures: wait for several maize runs inside a libuv event loop.
 *
 * mz_future_fd() gives each future an eventfd that becomes readable when
 * its run finishes, so an event loop watches it like a socket: here one
 * uv_poll_t per future, while a uv_timer_t keeps ticking to show that the
 * loop never blocks on maize.  Each run sums the squares of its own
 * buffer (a different size per run, so they need not finish in order);
 * the poll callback checks the run's status and its result, then closes
 * its handle.  The loop ends when every handle is closed; a 60 s timer
 * fails the program if a run never finishes.
 *
 * Run: ./build/examples/libuv_futures [RUNS]   (default 6; MZ_DEVICES
 * picks devices as usual; the kernel has a CPU implementation only, so
 * its nodes run on the CPU).  Exit status 0 when every run finished
 * with the right sum. */
#include <inttypes.h>
#include <maize.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define MAX_RUNS 64

/* "in f64[] x, out f64[] s, u64 n = sizeof(x)": s[0] = sum of x[i]^2. */
static int sumsq_cpu(const mz_call *c) {
  const double *x = c->args[0].p;
  double *s = c->args[1].p, acc = 0;
  for (uint64_t i = 0; i < c->args[2].u64; i++) acc += x[i] * x[i];
  s[0] = acc;
  return 0;
}

struct run {
  unsigned index;
  size_t n;
  mz_graph *g;
  mz_buffer *x, *s;
  mz_future *f;
  uv_poll_t poll;
  int status;   /* MZ_EAGAIN until the poll callback saw it finish */
  bool correct;
};

struct app {
  struct run runs[MAX_RUNS];
  unsigned nruns, finished, ticks;
  uv_timer_t tick, deadline;
  bool timed_out;
};

static void closed(uv_handle_t *h) { (void)h; }

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, closed);
}

static void close_timers_when_done(struct app *a) {
  if (a->finished < a->nruns) return;
  uv_timer_stop(&a->tick);
  uv_timer_stop(&a->deadline);
  uv_close((uv_handle_t *)&a->tick, closed);
  uv_close((uv_handle_t *)&a->deadline, closed);
}

/* The run's eventfd is readable: the run has finished.  Level-triggered,
 * so stop watching first; the fd belongs to the future (never read or
 * close it). */
static void on_ready(uv_poll_t *p, int uvstatus, int events) {
  (void)events;
  struct run *r = p->data;
  struct app *a = p->loop->data;
  uv_poll_stop(p);
  uv_close((uv_handle_t *)p, closed);
  if (uvstatus < 0) {
    fprintf(stderr, "run %u: poll error: %s\n", r->index, uv_strerror(uvstatus));
    r->status = MZ_EIO;
  } else {
    r->status = mz_future_poll(r->f); /* finished: never MZ_EAGAIN here */
  }
  double got = 0, want = 0;
  /* The run is over, so reading its result does not block the loop. */
  if (r->status == MZ_OK && mz_buffer_read(r->s, &got, sizeof got) == MZ_OK) {
    for (size_t i = 0; i < r->n; i++) want += (double)(i % 10) * (double)(i % 10);
    r->correct = got == want;
  }
  printf("run %u (%zu elements) finished after %u tick(s): %s, sum %.0f%s\n", r->index, r->n, a->ticks,
         r->status == MZ_OK ? "ok" : mz_err_name(r->status), got,
         r->status == MZ_OK ? (r->correct ? " (correct)" : " (WRONG)") : "");
  if (r->status != MZ_OK) fprintf(stderr, "run %u: %s\n", r->index, mz_future_message(r->f));
  a->finished++;
  close_timers_when_done(a);
}

static void on_tick(uv_timer_t *t) {
  struct app *a = t->loop->data;
  a->ticks++;
}

static void on_deadline(uv_timer_t *t) {
  struct app *a = t->loop->data;
  fprintf(stderr, "libuv_futures: %u of %u runs still unfinished after 60 s\n", a->nruns - a->finished, a->nruns);
  a->timed_out = true;
  uv_stop(t->loop);
}

/* Build and schedule run i: x[j] = j % 10, s = sumsq(x). */
static int start_run(mz_runtime *rt, mz_kernel *k, struct run *r) {
  double *host = malloc(r->n * sizeof *host);
  if (!host) return MZ_ENOMEM;
  for (size_t j = 0; j < r->n; j++) host[j] = (double)(j % 10);
  int rc = mz_buffer_create(rt, MZ_F64, 1, (size_t[]){r->n}, host, &r->x);
  free(host);
  if (rc || (rc = mz_buffer_create(rt, MZ_F64, 1, (size_t[]){1}, NULL, &r->s)) || (rc = mz_graph_create(rt, &r->g)))
    return rc;
  mz_op *out = mz_apply(r->g, k, mz_zip(r->g, 2, (mz_op *[]){mz_value(r->g, r->x), mz_value(r->g, r->s)}), NULL);
  return mz_schedule(r->g, mz_unzip(r->g, out, 1), NULL, &r->f);
}

int main(int argc, char **argv) {
  unsigned nruns = 6;
  if (argc > 1) {
    char *end;
    unsigned long v = strtoul(argv[1], &end, 10);
    if (*end || v < 1 || v > MAX_RUNS) {
      fprintf(stderr, "usage: %s [RUNS]   (1 to %d, default 6)\n", argv[0], MAX_RUNS);
      return 2;
    }
    nruns = (unsigned)v;
  }
  static struct app a; /* large: keep it off the stack */
  a.nruns = nruns;
  mz_runtime *rt = NULL;
  int rc = mz_runtime_create(NULL, &rt);
  if (rc) {
    fprintf(stderr, "mz_runtime_create: %s: %s\n", mz_err_name(rc), mz_runtime_last_error(NULL));
    return 1;
  }
  mz_kernel *k = NULL;
  rc = mz_kernel_create(rt,
                        &(mz_kernel_spec){.name = "sumsq",
                                          .params = "in f64[] x, out f64[] s, u64 n = sizeof(x)",
                                          .cpu = {.fn = sumsq_cpu}},
                        &k);
  uv_loop_t *loop = uv_default_loop();
  loop->data = &a;
  for (unsigned i = 0; !rc && i < nruns; i++) {
    struct run *r = &a.runs[i];
    r->index = i;
    r->status = MZ_EAGAIN;
    /* Sizes that do not grow with i, so the runs finish out of order. */
    r->n = (size_t)1 << (14 + (i * 5) % 7);
    if ((rc = start_run(rt, k, r))) break;
    int fd = mz_future_fd(r->f);
    if (fd < 0) {
      rc = fd;
      break;
    }
    r->poll.data = r;
    int uvrc = uv_poll_init(loop, &r->poll, fd);
    if (!uvrc) uvrc = uv_poll_start(&r->poll, UV_READABLE, on_ready);
    if (uvrc) {
      fprintf(stderr, "uv_poll on run %u's fd %d: %s\n", i, fd, uv_strerror(uvrc));
      rc = MZ_EIO;
    }
  }
  bool ok = false;
  if (rc) {
    fprintf(stderr, "libuv_futures: %s: %s\n", mz_err_name(rc), mz_runtime_last_error(rt));
  } else {
    uv_timer_init(loop, &a.tick);
    uv_timer_start(&a.tick, on_tick, 1, 1);
    uv_timer_init(loop, &a.deadline);
    uv_timer_start(&a.deadline, on_deadline, 60000, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    ok = !a.timed_out && a.finished == nruns;
    for (unsigned i = 0; i < nruns; i++) ok = ok && a.runs[i].status == MZ_OK && a.runs[i].correct;
    printf("%u of %u runs finished inside the event loop, the loop ticked %u time(s) meanwhile: %s\n", a.finished,
           nruns, a.ticks, ok ? "all correct" : "FAILED");
  }
  /* Every run is finished or given up on; the runtime waits for stragglers. */
  for (unsigned i = 0; i < nruns; i++) {
    if (a.runs[i].f && a.runs[i].status == MZ_EAGAIN) mz_future_wait(a.runs[i].f);
    mz_future_destroy(a.runs[i].f);
    mz_graph_destroy(a.runs[i].g);
    mz_buffer_release(a.runs[i].x);
    mz_buffer_release(a.runs[i].s);
  }
  mz_kernel_destroy(k);
  mz_runtime_destroy(rt);
  /* Handles left by an early stop (a timeout) are closed before the loop goes. */
  if (uv_loop_close(loop) == UV_EBUSY) {
    uv_walk(loop, close_walk, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
  }
  return ok ? 0 : 1;
}
