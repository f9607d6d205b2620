/* Chrome trace-event JSON (Perfetto and chrome://tracing open it): one
 * process per device, one thread (track) per queue, one complete event
 * ("X") per node, and flow arrows ("s"/"f") for edges between nodes.
 *
 * The trace is an observer (include/maize/observer.h) registered for
 * every run.  It keeps a run's records until the run ends, then appends
 * them to the file and rewrites the closing "]}", so the file is valid
 * JSON after every run: a program that fails later keeps what finished.
 * The write happens on the thread that ends the run, before its future
 * resolves, under the trace's lock (which nothing else takes).
 *
 * Copies are "X" events of category "transfer" with args.bytes, one per
 * transfer record, so they add up to the run's statistics
 * (mz_run_stats.transfers and bytes_moved): "copy <src>-><dst>" into a
 * device's memory and "read <src>->host" back into host memory.  A copy
 * the device measured (OpenCL profiling events, a CPU worker's read) is
 * drawn where it ran, with args.timing "measured"; one made by the host
 * while it planned a node goes on its device's "host reads" track, so it
 * does not cut into the queue's slices.  A copy the device does not
 * measure (CUDA, simulated devices) gets the runtime's link model's length
 * for its bytes (mz_sched_link_ns, the cost policies use), placed right
 * before its node (the queue is in order) and shrunk to fit the window in
 * which it must have run: after the queue's previous node and the node's
 * predecessors ended; args.timing says "modelled" and args.window_us gives
 * that window.  Copies made on a device's copy engine (a CUDA copy stream,
 * a second OpenCL queue, a simulated device with copy=1) go on the
 * device's "copy engine" track, beside its queues, since they overlap the
 * queues' kernels; their window starts when the node's predecessors ended.
 *
 * A node whose policy said when it expected it to run
 * (mz_task_set_expected_times: heft's plan, dmda's choice) carries that in
 * args.planned_ts and args.planned_dur, in the file's time line like ts
 * and dur, so the plan can be read beside what ran.
 *
 * Times are written in whole nanoseconds (as microseconds with three
 * decimals, exact), and a slice never starts before the previous slice of
 * its track ended: clocks mapped from a device's (OpenCL) can be off by a
 * callback's latency from batch to batch, and viewers mis-nest slices that
 * overlap without nesting. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "device_ops.h"
#include "objects/mz_runtime.h"
#include "trace.h"

struct tx {
  uint64_t run, bytes, t0, t1;
  uint32_t node;
  int queue, src, dst; /* device indices, -1 for host memory */
  bool measured, on_queue, on_ce;
};

struct tnode {
  uint64_t run, t0, t1;
  uint64_t p0, p1; /* the policy's expected start and end, 0: none */
  uint32_t id, npred;
  unsigned queue;
  uint32_t *preds; /* one block: preds, then the name */
  const char *name;
};

struct mz__trace {
  mz_runtime *rt;
  char *path;
  FILE *f;
  bool failed;           /* the file could not be written: warned once, no more tries */
  long tail;             /* where the closing "]}" starts */
  bool have_base;
  uint64_t base;         /* time 0 of the file: the first written run's first event */
  uint64_t flow;         /* flow arrow ids */
  struct tnode *nodes;
  size_t nnodes, capnodes;
  struct tx *xs;
  size_t nxs, capxs;
  unsigned ntracks;      /* queues, then one "host reads" and one "copy engine" track per device */
  uint64_t *last_start, *last_end; /* per track, over what was written */
  bool *named;           /* per device: its "host reads" track, then its "copy engine" track, is named in the file */
};

/* ---- collecting (any thread) ---- */

static void on_node(const mz_node_record *rec, void *user) {
  struct mz__trace *tr = user;
  size_t nl = strlen(rec->name ? rec->name : "?") + 1;
  struct tnode n = {.run = rec->run, .id = rec->node, .queue = (unsigned)rec->queue, .t0 = rec->start_ns,
                    .t1 = rec->end_ns, .p0 = rec->planned_start_ns, .p1 = rec->planned_end_ns};
  /* A node the device reported no time for (it never ran): a mark where
   * it ended. */
  if (!n.t1) n.t0 = n.t1 = mz__now_ns();
  /* The name is copied: the kernel that owns it may be gone when the run
   * ends (a graph's last run can outlive mz_kernel_destroy). */
  n.preds = malloc(rec->npreds * sizeof *n.preds + nl);
  if (!n.preds) return;
  memcpy(n.preds, rec->preds, rec->npreds * sizeof *n.preds);
  n.npred = rec->npreds;
  char *name = (char *)(n.preds + rec->npreds);
  memcpy(name, rec->name ? rec->name : "?", nl);
  n.name = name;
  pthread_mutex_lock(&tr->rt->trace_lock);
  if (tr->nnodes == tr->capnodes) {
    size_t cap = tr->capnodes ? tr->capnodes * 2 : 256;
    struct tnode *v = realloc(tr->nodes, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&tr->rt->trace_lock);
      free(n.preds);
      return;
    }
    tr->nodes = v;
    tr->capnodes = cap;
  }
  tr->nodes[tr->nnodes++] = n;
  pthread_mutex_unlock(&tr->rt->trace_lock);
}

static void on_transfer(const mz_transfer_record *rec, void *user) {
  struct mz__trace *tr = user;
  struct tx x = {.run = rec->run, .node = rec->node, .queue = rec->queue, .src = rec->src_device,
                 .dst = rec->dst_device, .bytes = rec->bytes, .t0 = rec->start_ns, .t1 = rec->end_ns,
                 .measured = rec->measured, .on_queue = rec->on_queue,
                 .on_ce = rec->on_copy_engine};
  pthread_mutex_lock(&tr->rt->trace_lock);
  if (tr->nxs == tr->capxs) {
    size_t cap = tr->capxs ? tr->capxs * 2 : 256;
    struct tx *v = realloc(tr->xs, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&tr->rt->trace_lock);
      return;
    }
    tr->xs = v;
    tr->capxs = cap;
  }
  tr->xs[tr->nxs++] = x;
  pthread_mutex_unlock(&tr->rt->trace_lock);
}

/* ---- writing one run ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* ns as microseconds with three decimals, exactly. */
static void put_us(FILE *f, int64_t ns) {
  uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  fprintf(f, "%s%" PRIu64 ".%03u", ns < 0 ? "-" : "", a / 1000, (unsigned)(a % 1000));
}

static void write_header(struct mz__trace *tr) {
  mz_runtime *rt = tr->rt;
  FILE *f = tr->f;
  fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dev = rt->devs[d];
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%u,\"args\":{\"name\":", d ? ",\n" : "", d);
    char name[300];
    snprintf(name, sizeof name, "%s %u: %s", mz_device_kind_name(dev->info.kind), d, dev->info.name);
    json_str(f, name);
    fputs("}}", f);
    for (unsigned q = 0; q < dev->nqueues; q++)
      fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"queue %u\"}}", d,
              dev->queues[q].index, dev->queues[q].index);
  }
}

static int by_id(const void *a, const void *b) {
  const struct tnode *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

static const struct tnode *find(const struct tnode *v, size_t n, uint32_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && v[lo].id == id ? &v[lo] : NULL;
}

/* One slice to draw: a node (x < 0) or a copy (x: index in the run's copies). */
struct slice {
  unsigned pid, tid;
  uint64_t t0, t1;
  long node, x;
};

static int by_track(const void *a, const void *b) {
  const struct slice *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1) return x->t1 < y->t1 ? -1 : 1;
  return (x->x >= 0) > (y->x >= 0) ? -1 : (x->x >= 0) < (y->x >= 0); /* a copy before its node */
}

static int by_tx_node(const void *a, const void *b) {
  const struct tx *x = a, *y = b;
  return x->node < y->node ? -1 : x->node > y->node;
}

static void xfer_name(char *buf, size_t cap, const mz_runtime *rt, const struct tx *x) {
  char src[64], dst[64];
  if (x->src < 0) snprintf(src, sizeof src, "host");
  else snprintf(src, sizeof src, "%s %d", mz_device_kind_name(rt->devs[x->src]->info.kind), x->src);
  if (x->dst < 0) snprintf(dst, sizeof dst, "host");
  else snprintf(dst, sizeof dst, "%s %d", mz_device_kind_name(rt->devs[x->dst]->info.kind), x->dst);
  snprintf(buf, cap, "%s %s\xe2\x86\x92%s", x->dst < 0 ? "read" : "copy", src, dst);
}

/* Write nodes v[0..n) and copies xs[0..nx) of one run (trace_lock held). */
static void write_run(struct mz__trace *tr, struct tnode *v, size_t n, struct tx *xs, size_t nx) {
  mz_runtime *rt = tr->rt;
  FILE *f = tr->f;
  qsort(v, n, sizeof *v, by_id);
  if (nx) qsort(xs, nx, sizeof *xs, by_tx_node);
  struct slice *s = malloc((n + nx) * sizeof *s);
  double *win = nx ? calloc(nx, sizeof *win) : NULL;
  if (!s || (nx && !win)) {
    free(s);
    free(win);
    return;
  }
  size_t ns = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tnode *e = &v[i];
    s[ns++] = (struct slice){.pid = rt->queues[e->queue]->dev->info.index, .tid = e->queue, .t0 = e->t0, .t1 = e->t1,
                             .node = (long)i, .x = -1};
  }
  /* The previous node's end on each queue, for the modelled copies'
   * windows: nodes in start order per queue. */
  struct slice *ord = malloc(n * sizeof *ord);
  uint64_t *prev = calloc(n ? n : 1, sizeof *prev);
  if (ord && prev) {
    memcpy(ord, s, n * sizeof *ord);
    qsort(ord, n, sizeof *ord, by_track);
    for (size_t k = 0; k < n; k++) {
      if (k && ord[k].tid == ord[k - 1].tid) prev[ord[k].node] = v[ord[k - 1].node].t1;
      else if (tr->last_end[ord[k].tid] <= ord[k].t0) prev[ord[k].node] = tr->last_end[ord[k].tid];
    }
  }
  free(ord);
  for (size_t i = 0, j; i < nx; i = j) {
    for (j = i; j < nx && xs[j].node == xs[i].node; j++) {
    }
    const struct tnode *e = find(v, n, xs[i].node);
    if (!e) continue; /* its node's record was lost (no memory): not drawn */
    long ni = (long)(e - v);
    /* Measured copies where they ran; the others packed before the first
     * measured one on the queue, or before the node. */
    uint64_t end = e->t0;
    for (size_t k = i; k < j; k++)
      if (xs[k].measured && xs[k].on_queue && xs[k].t0 < end) end = xs[k].t0;
    /* On a copy engine, copies may overlap the queue's previous node. */
    uint64_t start = prev && !xs[i].on_ce ? prev[ni] : 0;
    for (uint32_t k = 0; k < e->npred; k++) {
      const struct tnode *p = find(v, n, e->preds[k]);
      if (p && p->t1 > start) start = p->t1;
    }
    if (!start || start > end) start = end;
    double total = 0, est[64] = {0};
    for (size_t k = i; k < j && k - i < 64; k++) {
      if (xs[k].measured) continue;
      int sq = xs[k].src < 0 ? -1 : (int)rt->devs[xs[k].src]->queues[0].index;
      if (sq < 0) /* host memory: a queue of a device whose memory is host memory */
        for (unsigned q = 0; q < rt->nq && sq < 0; q++)
          if (!rt->queues[q]->dev->memnode) sq = (int)q;
      est[k - i] = sq < 0 ? 0 : mz_sched_link_ns(&rt->sched, (unsigned)sq, (unsigned)xs[k].queue, (size_t)xs[k].bytes);
      if (!(est[k - i] > 0)) est[k - i] = 0;
      total += est[k - i];
    }
    double w = (double)(end - start), scale = total > w && total > 0 ? w / total : 1, t = (double)end - total * scale;
    for (size_t k = i; k < j; k++) {
      struct tx *x = &xs[k];
      struct slice sl = {.pid = rt->queues[x->queue]->dev->info.index, .tid = (unsigned)x->queue, .node = ni,
                         .x = (long)k};
      if (x->on_ce) sl.tid = rt->nq + rt->ndev + sl.pid; /* the device's copy engine track */
      if (x->measured) {
        sl.t0 = x->t0;
        sl.t1 = x->t1;
        if (!x->on_queue && !x->on_ce) sl.tid = rt->nq + sl.pid;
      } else {
        sl.t0 = (uint64_t)t;
        t += k - i < 64 ? est[k - i] * scale : 0;
        sl.t1 = (uint64_t)t;
        if (sl.t1 > end) sl.t1 = end;
        if (sl.t0 > sl.t1) sl.t0 = sl.t1;
        win[k] = w;
      }
      s[ns++] = sl;
    }
  }
  free(prev);
  if (!tr->have_base) {
    tr->have_base = true;
    tr->base = ~0ull;
    for (size_t i = 0; i < ns; i++)
      if (s[i].t0 < tr->base) tr->base = s[i].t0;
  }
  /* No slice starts inside the previous one of its track (see the top). */
  qsort(s, ns, sizeof *s, by_track);
  for (size_t i = 0; i < ns; i++) {
    uint64_t *ls = &tr->last_start[s[i].tid], *le = &tr->last_end[s[i].tid];
    if (s[i].t0 < *ls) continue; /* an earlier stretch of the track (another run): left as it is */
    if (s[i].t0 < *le) {
      s[i].t0 = *le;
      if (s[i].t1 < s[i].t0) s[i].t1 = s[i].t0;
    }
    *ls = s[i].t0;
    if (s[i].t1 > *le) *le = s[i].t1;
  }
  /* Where each node was drawn, for the flow arrows. */
  size_t *at = malloc((n ? n : 1) * sizeof *at);
  for (size_t i = 0; at && i < ns; i++)
    if (s[i].x < 0) at[s[i].node] = i;
  for (size_t i = 0; i < ns; i++) {
    const struct slice *sl = &s[i];
    const struct tnode *e = &v[sl->node];
    if (sl->tid >= rt->nq && !tr->named[sl->tid - rt->nq]) {
      /* The device's "host reads" track (reads the host made while it
       * planned this device's nodes) or its "copy engine" track, named
       * when first used so that charts of runs without any show no empty
       * track. */
      tr->named[sl->tid - rt->nq] = true;
      fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"%s\"}}",
              sl->pid, sl->tid, sl->tid >= rt->nq + rt->ndev ? "copy engine" : "host reads");
    }
    if (sl->x >= 0) {
      const struct tx *x = &xs[sl->x];
      char name[160];
      xfer_name(name, sizeof name, rt, x);
      fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"transfer\",\"name\":\"%s\",\"pid\":%u,\"tid\":%u,\"ts\":", name, sl->pid,
              sl->tid);
      put_us(f, (int64_t)(sl->t0 - tr->base));
      fputs(",\"dur\":", f);
      put_us(f, (int64_t)(sl->t1 - sl->t0));
      fprintf(f, ",\"args\":{\"bytes\":%" PRIu64 ",\"run\":%" PRIu64 ",\"node\":%u,\"timing\":\"%s\"", x->bytes, x->run,
              x->node, x->measured ? "measured" : "modelled");
      if (!x->measured) fprintf(f, ",\"window_us\":%.3f", win[sl->x] / 1000.0);
      fputs("}}", f);
      continue;
    }
    fputs(",\n{\"ph\":\"X\",\"cat\":\"task\",\"name\":", f);
    json_str(f, e->name);
    fprintf(f, ",\"pid\":%u,\"tid\":%u,\"ts\":", sl->pid, sl->tid);
    put_us(f, (int64_t)(sl->t0 - tr->base));
    fputs(",\"dur\":", f);
    put_us(f, (int64_t)(sl->t1 - sl->t0));
    fprintf(f, ",\"args\":{\"run\":%" PRIu64 ",\"node\":%u", e->run, e->id);
    if (e->p1) { /* the plan, on the file's time line (may be before its start) */
      fputs(",\"planned_ts\":", f);
      put_us(f, (int64_t)(e->p0 - tr->base));
      fputs(",\"planned_dur\":", f);
      put_us(f, (int64_t)(e->p1 - e->p0));
    }
    fputs("}}", f);
    for (uint32_t k = 0; at && k < e->npred; k++) {
      const struct tnode *p = find(v, n, e->preds[k]);
      if (!p) continue;
      const struct slice *ps = &s[at[p - v]];
      tr->flow++;
      /* The start 1 ns inside the predecessor's slice, so that viewers
       * bind it to that slice. */
      uint64_t st = ps->t1 > ps->t0 ? ps->t1 - 1 : ps->t1;
      fprintf(f, ",\n{\"ph\":\"s\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":%" PRIu64 ",\"pid\":%u,\"tid\":%u,\"ts\":",
              tr->flow, ps->pid, ps->tid);
      put_us(f, (int64_t)(st - tr->base));
      fprintf(f, "},\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":%" PRIu64
                 ",\"pid\":%u,\"tid\":%u,\"ts\":",
              tr->flow, sl->pid, sl->tid);
      put_us(f, (int64_t)(sl->t0 - tr->base));
      fputs("}", f);
    }
  }
  free(at);
  free(s);
  free(win);
}

/* Open the trace file for this runtime alone.  The file is written in
 * place, run after run, so two runtimes writing one path at the same time
 * (MZ_TRACE set for a program with several) would interleave into garbage:
 * the first takes an advisory lock on the path and truncates it only then;
 * a runtime that finds it locked writes "<name>-2.json" (or -3, ...) and
 * says so.  The lock goes with the file at mz_runtime_destroy or exit. */
static FILE *open_locked(struct mz__trace *tr) {
  char alt[4096];
  const char *base = tr->path, *path = base;
  size_t len = strlen(base);
  bool json = len > 5 && !strcmp(base + len - 5, ".json");
  for (unsigned k = 1; k <= 64; k++) {
    if (k > 1) {
      snprintf(alt, sizeof alt, "%.*s-%u%s", (int)(json ? len - 5 : len), base, k, json ? ".json" : "");
      path = alt;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return NULL;
    if (flock(fd, LOCK_EX | LOCK_NB)) {
      close(fd);
      continue;
    }
    FILE *f = ftruncate(fd, 0) ? NULL : fdopen(fd, "w");
    if (!f) {
      close(fd);
      return NULL;
    }
    if (k > 1) {
      mz__warn(tr->rt, "the trace '%s' is being written by another runtime; this one writes '%s'", tr->path, path);
      char *p = strdup(path);
      if (p) {
        free(tr->path);
        tr->path = p;
      }
    }
    return f;
  }
  return NULL;
}

/* Append what is kept of run `run` (all runs: 0) and close the JSON again.
 * trace_lock held. */
static void flush(struct mz__trace *tr, uint64_t run) {
  if (tr->failed) return;
  if (!tr->f) {
    tr->f = open_locked(tr);
    if (!tr->f) {
      tr->failed = true;
      mz__warn(tr->rt, "cannot write the trace to '%s'", tr->path);
      return;
    }
    write_header(tr);
  } else if (fseek(tr->f, tr->tail, SEEK_SET)) {
    tr->failed = true;
  }
  /* The run's records, moved out of the lists. */
  size_t n = 0, nx = 0;
  for (size_t i = 0; i < tr->nnodes; i++) n += !run || tr->nodes[i].run == run;
  for (size_t i = 0; i < tr->nxs; i++) nx += !run || tr->xs[i].run == run;
  struct tnode *v = malloc((n ? n : 1) * sizeof *v);
  struct tx *xs = malloc((nx ? nx : 1) * sizeof *xs);
  if (v && xs && !tr->failed) {
    size_t a = 0, k = 0;
    for (size_t i = 0; i < tr->nnodes; i++) {
      if (!run || tr->nodes[i].run == run) v[a++] = tr->nodes[i];
      else tr->nodes[k++] = tr->nodes[i];
    }
    tr->nnodes = k;
    a = k = 0;
    for (size_t i = 0; i < tr->nxs; i++) {
      if (!run || tr->xs[i].run == run) xs[a++] = tr->xs[i];
      else tr->xs[k++] = tr->xs[i];
    }
    tr->nxs = k;
    write_run(tr, v, n, xs, nx);
    for (size_t i = 0; i < n; i++) free(v[i].preds);
  }
  free(v);
  free(xs);
  if (tr->failed) return;
  tr->tail = ftell(tr->f);
  fputs("\n]}\n", tr->f);
  if (fflush(tr->f) || ferror(tr->f) || tr->tail < 0) {
    tr->failed = true;
    mz__warn(tr->rt, "could not write the trace to '%s'", tr->path);
  }
}

static void on_run_end(const mz_run_record *rec, void *user) {
  struct mz__trace *tr = user;
  pthread_mutex_lock(&tr->rt->trace_lock);
  flush(tr, rec->run);
  pthread_mutex_unlock(&tr->rt->trace_lock);
}

/* ---- the runtime's side ---- */

int mz__trace_open(mz_runtime *rt, const char *path) {
  struct mz__trace *tr = calloc(1, sizeof *tr);
  if (!tr) return MZ_ENOMEM;
  tr->rt = rt;
  tr->path = strdup(path);
  tr->ntracks = rt->nq + 2 * rt->ndev; /* queues, then per device its host reads and its copy engine */
  tr->last_start = calloc(tr->ntracks ? tr->ntracks : 1, sizeof *tr->last_start);
  tr->last_end = calloc(tr->ntracks ? tr->ntracks : 1, sizeof *tr->last_end);
  tr->named = calloc(rt->ndev ? 2 * rt->ndev : 1, sizeof *tr->named);
  if (!tr->path || !tr->last_start || !tr->last_end || !tr->named) {
    free(tr->path);
    free(tr->last_start);
    free(tr->last_end);
    free(tr->named);
    free(tr);
    return MZ_ENOMEM;
  }
  rt->trace = tr;
  rt->tracing = true;
  return MZ_OK;
}

mz_observer mz__trace_observer(mz_runtime *rt) {
  return (mz_observer){.node = on_node, .transfer = on_transfer, .run_end = on_run_end, .user = rt->trace};
}

void mz__trace_close(mz_runtime *rt) {
  struct mz__trace *tr = rt->trace;
  if (!tr) return;
  pthread_mutex_lock(&rt->trace_lock);
  /* Records of runs that never ended cannot exist here (every run has
   * ended); a runtime that ran nothing still leaves a valid file. */
  if (!tr->f || tr->nnodes || tr->nxs) flush(tr, 0);
  pthread_mutex_unlock(&rt->trace_lock);
  if (tr->f && fclose(tr->f) && !tr->failed) mz__warn(rt, "could not write the trace to '%s'", tr->path);
  for (size_t i = 0; i < tr->nnodes; i++) free(tr->nodes[i].preds);
  free(tr->nodes);
  free(tr->xs);
  free(tr->last_start);
  free(tr->last_end);
  free(tr->named);
  free(tr->path);
  free(tr);
  rt->trace = NULL;
  rt->tracing = false;
}
