/* Chrome trace-event JSON (Perfetto and chrome://tracing open it): one
 * process per device, one thread (track) per queue, one complete event
 * ("X") per task, and flow arrows ("s"/"f") for edges between tasks. */
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
  ev.preds = malloc(t->npreds * sizeof *ev.preds + nl);
  if (ev.preds) {
    char *name = (char *)(ev.preds + t->npreds);
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
  uint64_t flow = 0;
  for (size_t i = 0; i < rt->ntev; i++) {
    const struct mz__trace_ev *e = &rt->tev[i];
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
  bool bad = ferror(f);
  if (fclose(f) || bad || rename(tmp, path)) {
    remove(tmp);
    return MZ_EIO;
  }
  return MZ_OK;
}
