/* Chrome trace-event JSON (Perfetto and chrome://tracing open it): one
 * process per device, one thread (track) per queue, one complete event
 * ("X") per task, and flow arrows ("s"/"f") for edges between tasks.
 *
 * Transfers planned for a node on a device queue (exec->xfers) become "X"
 * events of category "transfer" named "copy <src>-><dst>" on that queue,
 * with args.bytes.  Backends time the kernel only, not each copy, so a
 * copy's length is the runtime's link model for its bytes (the one cost
 * policies use, mz_sched_link_ns), placed right before the kernel (the
 * queue is in order: the copies ran just before it) and shrunk to fit the
 * window in which they must have run: after the queue's previous node and
 * the node's predecessors ended.  args.timing says "modelled" and
 * args.window_us gives that window.  Reads back into host memory made by a CPU
 * worker before its task are not in exec->xfers and are not shown. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void mz__trace_task(mz_runtime *rt, mz_op *op) {
  struct mz__task *t = op->t;
  struct mz__trace_ev ev = {
      .t0 = t->exec.t_start, .t1 = t->exec.t_end ? t->exec.t_end : mz__now_ns(), .run = t->run->id, .id = op->id,
      .queue = (unsigned)t->queue, .name = op->name};
  if (!ev.t0) ev.t0 = t->t_submit ? t->t_submit : ev.t1;
  /* Edges as (pred queue << 32 | index) pairs are not needed: store the
   * predecessors' ids; the writer matches them within the run. */
  /* The name is copied behind the ids, in the same block (freed with
   * preds): the trace is written when the runtime is destroyed, after the
   * kernel that owns op->name may be gone. */
  size_t nl = strlen(op->name) + 1;
  const struct mz__exec *e = &t->exec;
  unsigned nx = e->nxfer;
  ev.preds = malloc(t->npreds * sizeof *ev.preds + nx * sizeof *ev.xfers + nl);
  if (ev.preds) {
    ev.xfers = (struct mz__trace_xfer *)(ev.preds + t->npreds);
    for (unsigned i = 0; i < nx; i++)
      ev.xfers[ev.nxfer++] = (struct mz__trace_xfer){
          .bytes = e->xfers[i].bytes, .src_dev = e->xfers[i].src_dev ? (int)e->xfers[i].src_dev->info.index : -1};
    char *name = (char *)(ev.xfers + nx);
    memcpy(name, op->name, nl);
    ev.name = name;
  } else {
    ev.name = "?";
  }
  for (unsigned i = 0; ev.preds && i < t->npreds; i++)
    if (t->preds[i]->t->run == t->run) ev.preds[ev.npred++] = t->preds[i]->id;
  pthread_mutex_lock(&rt->trace_lock);
  if (rt->ntev == rt->captev) {
    size_t cap = rt->captev ? rt->captev * 2 : 1024;
    struct mz__trace_ev *v = realloc(rt->tev, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&rt->trace_lock);
      free(ev.preds);
      return;
    }
    rt->tev = v;
    rt->captev = cap;
  }
  rt->tev[rt->ntev++] = ev;
  pthread_mutex_unlock(&rt->trace_lock);
}

static int by_key(const void *a, const void *b) {
  const struct mz__trace_ev *x = a, *y = b;
  if (x->run != y->run) return x->run < y->run ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static const struct mz__trace_ev *find(const struct mz__trace_ev *v, size_t n, uint64_t run, uint64_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].run < run || (v[mid].run == run && v[mid].id < id)) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && v[lo].run == run && v[lo].id == id ? &v[lo] : NULL;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* Events in order on their queue, for the transfer windows. */
struct qkey {
  unsigned queue;
  uint64_t t0;
  size_t i;
};
static int by_queue(const void *a, const void *b) {
  const struct qkey *x = a, *y = b;
  if (x->queue != y->queue) return x->queue < y->queue ? -1 : 1;
  return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* A queue whose memory is memory node mem, or -1. */
static int queue_on_mem(const mz_runtime *rt, unsigned mem) {
  for (unsigned q = 0; q < rt->nq; q++)
    if (rt->queues[q]->dev->memnode == mem) return (int)q;
  return -1;
}

/* Write e's transfers (see the top of the file); prev_t1 is when the
 * previous node on e's queue ended, 0 when none. */
static void write_xfers(FILE *f, mz_runtime *rt, const struct mz__trace_ev *e, uint64_t prev_t1, uint64_t base) {
  uint64_t start = prev_t1;
  for (uint32_t k = 0; k < e->npred; k++) {
    const struct mz__trace_ev *p = find(rt->tev, rt->ntev, e->run, e->preds[k]);
    if (p && p->t1 > start) start = p->t1;
  }
  if (!start || start > e->t0) start = e->t0;
  const struct mz_device *dst = rt->queues[e->queue]->dev;
  double win = (double)(e->t0 - start), total = 0, est[64];
  uint32_t n = e->nxfer < 64 ? e->nxfer : 64; /* a node has few buffer arguments; more are not drawn */
  for (uint32_t i = 0; i < n; i++) {
    const struct mz__trace_xfer *x = &e->xfers[i];
    int sq = x->src_dev < 0 ? queue_on_mem(rt, 0) : (int)rt->devs[x->src_dev]->queues[0].index;
    est[i] = sq < 0 ? 0 : mz_sched_link_ns(&rt->sched, (unsigned)sq, e->queue, (size_t)x->bytes);
    if (!(est[i] > 0)) est[i] = 0;
    total += est[i];
  }
  double scale = total > win && total > 0 ? win / total : 1;
  double t = (double)(e->t0 - base) - total * scale;
  for (uint32_t i = 0; i < n; i++) {
    const struct mz__trace_xfer *x = &e->xfers[i];
    double d = est[i] * scale;
    char src[64];
    if (x->src_dev < 0) snprintf(src, sizeof src, "host");
    else snprintf(src, sizeof src, "%s %d", mz_device_kind_name(rt->devs[x->src_dev]->info.kind), x->src_dev);
    fprintf(f,
            ",\n{\"ph\":\"X\",\"cat\":\"transfer\",\"name\":\"copy %s\xe2\x86\x92%s %u\",\"pid\":%u,\"tid\":%u,"
            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%llu,\"run\":%llu,\"node\":%llu,\"timing\":\"modelled\","
            "\"window_us\":%.3f}}",
            src, mz_device_kind_name(dst->info.kind), dst->info.index, dst->info.index, e->queue, t / 1000.0,
            d / 1000.0, (unsigned long long)x->bytes, (unsigned long long)e->run, (unsigned long long)e->id,
            win / 1000.0);
    t += d;
  }
}

int mz__trace_write(mz_runtime *rt, const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return MZ_EIO;
  pthread_mutex_lock(&rt->trace_lock);
  if (rt->ntev) qsort(rt->tev, rt->ntev, sizeof *rt->tev, by_key); /* tev is NULL when empty */
  uint64_t base = ~0ull;
  for (size_t i = 0; i < rt->ntev; i++)
    if (rt->tev[i].t0 < base) base = rt->tev[i].t0;
  fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
  bool first = true;
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dev = rt->devs[d];
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%u,\"args\":{\"name\":", first ? "" : ",\n", d);
    char name[300];
    snprintf(name, sizeof name, "%s %u: %s", mz_device_kind_name(dev->info.kind), d, dev->info.name);
    json_str(f, name);
    fputs("}}", f);
    first = false;
    for (unsigned q = 0; q < dev->nqueues; q++)
      fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":\"queue %u\"}}", d,
              dev->queues[q].index, dev->queues[q].index);
  }
  /* prev[i]: when the node before event i on its queue ended (0: none or
   * unknown).  Only needed when some node made transfers. */
  uint64_t *prev = NULL;
  bool any_xfer = false;
  for (size_t i = 0; i < rt->ntev && !any_xfer; i++) any_xfer = rt->tev[i].nxfer > 0;
  struct qkey *ord = any_xfer ? malloc(rt->ntev * sizeof *ord) : NULL;
  if (ord && (prev = calloc(rt->ntev, sizeof *prev))) {
    for (size_t i = 0; i < rt->ntev; i++) ord[i] = (struct qkey){.queue = rt->tev[i].queue, .t0 = rt->tev[i].t0, .i = i};
    qsort(ord, rt->ntev, sizeof *ord, by_queue);
    for (size_t k = 1; k < rt->ntev; k++)
      if (ord[k].queue == ord[k - 1].queue) prev[ord[k].i] = rt->tev[ord[k - 1].i].t1;
  }
  free(ord);
  uint64_t flow = 0;
  for (size_t i = 0; i < rt->ntev; i++) {
    const struct mz__trace_ev *e = &rt->tev[i];
    if (e->nxfer) write_xfers(f, rt, e, prev ? prev[i] : 0, base);
    unsigned pid = rt->queues[e->queue]->dev->info.index;
    fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"task\",\"name\":");
    json_str(f, e->name);
    fprintf(f, ",\"pid\":%u,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"run\":%llu,\"node\":%llu}}", pid, e->queue,
            (double)(e->t0 - base) / 1000.0, (double)(e->t1 - e->t0) / 1000.0, (unsigned long long)e->run,
            (unsigned long long)e->id);
    for (uint32_t k = 0; k < e->npred; k++) {
      const struct mz__trace_ev *p = find(rt->tev, rt->ntev, e->run, e->preds[k]);
      if (!p) continue;
      unsigned ppid = rt->queues[p->queue]->dev->info.index;
      flow++;
      fprintf(f,
              ",\n{\"ph\":\"s\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":%llu,\"pid\":%u,\"tid\":%u,\"ts\":%.3f}"
              ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"edge\",\"name\":\"edge\",\"id\":%llu,\"pid\":%u,\"tid\":%u,\"ts\":%.3f}",
              (unsigned long long)flow, ppid, p->queue, (double)(p->t1 - base) / 1000.0 - 0.001,
              (unsigned long long)flow, pid, e->queue, (double)(e->t0 - base) / 1000.0);
    }
  }
  fputs("\n]}\n", f);
  pthread_mutex_unlock(&rt->trace_lock);
  free(prev);
  bool bad = ferror(f);
  if (fclose(f) || bad || rename(tmp, path)) {
    remove(tmp);
    return MZ_EIO;
  }
  return MZ_OK;
}
