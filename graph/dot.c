/* mz_graph_dump_dot: a graph as Graphviz DOT, as Taskflow's dump and
 * StarPU's dag.dot do, so that a user can look at what was built.
 *
 * Nodes are the tasks (apply, host, partition, unpartition), filled with
 * one colour per kernel.  Edges have three kinds: data (a task uses a value
 * another produced), hazard (the buffer orderings mz_schedule adds:
 * read-after-write, write-after-read, write-after-write, in build order)
 * and explicit (mz_depend).  When no run of the graph is in flight, each
 * task that ran says on which device and queue, and how it ended.
 *
 * The text is made in memory under the graph's lock (so builders on other
 * threads wait only for that, never for the file) and written after. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "objects/mz_graph.h"
#include "objects/mz_runtime.h"

/* ColorBrewer's Set3: pale enough for black text, distinct enough to tell
 * a dozen kernels apart; more kernels reuse them in order. */
static const char *const palette[] = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
                                      "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
#define NPALETTE (sizeof palette / sizeof palette[0])

/* A DOT double-quoted string: quotes and backslashes escaped, control
 * characters (a newline in a kernel name) made blanks, so the output
 * always parses whatever the user named things. */
static void put_escaped(FILE *f, const char *s) {
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fputc('\\', f);
    fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
  }
}

/* Per buffer, while walking the tasks in build order: the last writer
 * and the readers since it, as lower.c keeps them for a run. */
struct hz {
  mz_buffer *buf;
  mz_op *writer;
  mz_op **readers;
  size_t nreaders, capreaders;
};

struct hzmap {
  struct hz *v;
  size_t cap; /* a power of two, at least twice the buffers */
};

static struct hz *hz_get(struct hzmap *m, mz_buffer *b) {
  size_t i = mz__ptr_slot(b, m->cap);
  while (m->v[i].buf && m->v[i].buf != b) i = (i + 1) & (m->cap - 1);
  m->v[i].buf = b;
  return &m->v[i];
}

/* The edges drawn into one task, kept to draw each pair once: a hazard
 * is drawn only where no data or explicit edge already orders the pair.
 * mark[p->id] holds the id of the task whose edges are being drawn. */
struct edges {
  FILE *f;
  uint32_t *mark;
};

static void edge(struct edges *e, const mz_op *from, const mz_op *to, const char *attrs) {
  fprintf(e->f, "  t%u -> t%u [%s];\n", (unsigned)from->id, (unsigned)to->id, attrs);
}

static void hazard(struct edges *e, const mz_op *from, const mz_op *to, const char *kind) {
  if (!from || from == to || e->mark[from->id] == to->id) return;
  e->mark[from->id] = to->id;
  fprintf(e->f, "  t%u -> t%u [style=dashed, color=\"#d62728\", fontcolor=\"#d62728\", fontsize=9, label=\"%s\"];\n",
          (unsigned)from->id, (unsigned)to->id, kind);
}

static const char *kind_shape(const mz_op *op) {
  switch (op->kind) {
    case MZ__K_HOST: return "shape=box, style=\"filled\"";
    case MZ__K_PARTITION: return "shape=invtrapezium, style=\"filled\"";
    case MZ__K_UNPARTITION: return "shape=trapezium, style=\"filled\"";
    default: return "shape=box, style=\"rounded,filled\"";
  }
}

/* Write the digraph to f.  g->lock is held; placed says whether the tasks'
 * placement and status may be read (no run of g in flight). */
static int write_dot(mz_graph *g, FILE *f, bool placed) {
  mz_runtime *rt = g->rt;
  size_t nt = g->ntasks_all, nacc = 0;
  for (size_t i = 0; i < nt; i++) nacc += mz__op_t(g->tasks_all[i])->nacc;
  struct hzmap m = {NULL, 16};
  while (m.cap < 2 * nacc + 1) m.cap *= 2;
  m.v = calloc(m.cap, sizeof *m.v);
  struct edges e = {f, calloc((size_t)g->nops + 1, sizeof *e.mark)};
  int rc = m.v && e.mark ? MZ_OK : MZ_ENOMEM;

  fprintf(f, "digraph maize {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n"
             "  edge [fontname=\"Helvetica\"];\n");
  fprintf(f, "  labelloc=b;\n  label=\"maize graph: %zu task(s), %u node(s). Edges: solid = data, dashed red = "
             "hazard (RAW, WAR, WAW), dotted blue = explicit (mz_depend)",
          nt, (unsigned)g->nops);
  if (g->status) {
    fputs(". Sticky error: ", f);
    put_escaped(f, g->message);
  }
  if (!placed) fputs(". Dumped from a runtime thread with a run in flight: placements left out", f);
  fputs("\";\n", f);

  for (size_t i = 0; !rc && i < nt; i++) {
    mz_op *op = g->tasks_all[i];
    struct mz__task *t = mz__op_t(op);
    const char *fill = "#ffffff";
    if (op->kind == MZ__K_APPLY && mz__task_kernel(t)) {
      /* g->kheld lists the kernels in the order of their first use. */
      for (size_t k = 0; k < g->nkheld; k++)
        if (g->kheld[k] == mz__task_kernel(t)) fill = palette[k % NPALETTE];
    } else if (op->kind == MZ__K_HOST) {
      fill = "#eeeeee";
    }
    fprintf(f, "  t%u [%s, fillcolor=\"%s\", label=\"", (unsigned)op->id, kind_shape(op), fill);
    put_escaped(f, mz__op_name(op));
    fprintf(f, " #%u", (unsigned)op->id);
    uint8_t st = atomic_load_explicit(&t->state, memory_order_relaxed);
    bool ran = placed && st == MZ__T_DONE;
    if (ran && t->exec.queue >= 0 && (unsigned)t->exec.queue < rt->nq) {
      const struct mz__queue *q = rt->queues[t->exec.queue];
      /* The device's index too: two PoCL devices share one name. */
      fprintf(f, "\\ndev %u %s: ", q->dev->info.index, mz_device_kind_name(q->dev->info.kind));
      put_escaped(f, q->dev->info.name);
      fprintf(f, ", queue %u", q->local);
    }
    if (ran && t->exec.status) fprintf(f, "\\n%s", mz_err_name(t->exec.status));
    fputc('"', f);
    if (ran && t->exec.status) fputs(", color=\"#d62728\", penwidth=2", f);
    else if (placed && st == MZ__T_NEW) fputs(", color=\"#999999\"", f); /* never scheduled */
    fputs("];\n", f);
  }

  for (size_t i = 0; !rc && i < nt; i++) {
    mz_op *op = g->tasks_all[i];
    struct mz__task *t = mz__op_t(op);
    for (uint32_t k = 0; k < mz__task_nbdata(t) && k < mz__task_nbpreds(t); k++) {
      edge(&e, op->u.bpreds[k], op, "color=\"#333333\"");
      e.mark[op->u.bpreds[k]->id] = op->id;
    }
    for (unsigned k = 0; k < mz__task_nxpreds(t); k++) {
      edge(&e, mz__task_xpreds(t)[k], op, "style=dotted, color=\"#1f77b4\", penwidth=1.5");
      e.mark[mz__task_xpreds(t)[k]->id] = op->id;
    }
    /* Hazards in build order, as mz_schedule derives them when every
     * task runs (a run of part of the graph orders only what it runs). */
    for (unsigned a = 0; !rc && a < t->nacc; a++) {
      struct hz *h = hz_get(&m, mz__acc_buf(mz__task_access(t, a)));
      uint8_t mode = mz__acc_mode(mz__task_access(t, a));
      if (mode & 1) hazard(&e, h->writer, op, "RAW");
      if (mode & 2) {
        if (!(mode & 1)) hazard(&e, h->writer, op, "WAW");
        for (size_t r = 0; r < h->nreaders; r++) hazard(&e, h->readers[r], op, "WAR");
        h->writer = op;
        h->nreaders = 0;
      } else {
        if (h->nreaders == h->capreaders) {
          size_t cap = h->capreaders ? 2 * h->capreaders : 4;
          mz_op **v = realloc(h->readers, cap * sizeof *v);
          if (!v) {
            rc = MZ_ENOMEM;
            break;
          }
          h->readers = v;
          h->capreaders = cap;
        }
        h->readers[h->nreaders++] = op;
      }
    }
  }
  fputs("}\n", f);
  for (size_t i = 0; m.v && i < m.cap; i++) free(m.v[i].readers);
  free(m.v);
  free(e.mark);
  return rc;
}

int mz_graph_dump_dot(mz_graph *g, FILE *f) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return MZ_EINVAL; /* no runtime to hold a message */
  mz_runtime *rt = g->rt;
  if (!f) return mz__set_error(rt, MZ_EINVAL, "mz_graph_dump_dot: NULL file");
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return mz__set_error(rt, MZ_ENOMEM, "mz_graph_dump_dot: out of memory");
  mz__ylock_lock(&g->lock);
  /* A run of g holds g->lock while it starts, so none starts now; one that
   * started earlier is done with its tasks once g->active is 0 (a little
   * after its future resolved), and rt->lock orders its last writes before
   * these reads.  Wait for that as mz_graph_run does, except on a runtime
   * thread, where waiting could deadlock: there placements are left out. */
  pthread_mutex_lock(&rt->lock);
  while (g->active && !mz__in_runtime_thread) pthread_cond_wait(&rt->idle, &rt->lock);
  bool placed = g->active == 0;
  pthread_mutex_unlock(&rt->lock);
  int rc = write_dot(g, mem, placed);
  mz__ylock_unlock(&g->lock);
  if (fclose(mem) && !rc) rc = MZ_ENOMEM;
  if (rc) {
    free(text);
    return mz__set_error(rt, rc, "mz_graph_dump_dot: out of memory");
  }
  size_t put = fwrite(text, 1, len, f);
  free(text);
  if (put != len || fflush(f)) return mz__set_error(rt, MZ_EIO, "mz_graph_dump_dot: write failed: %s", strerror(errno));
  return MZ_OK;
}

int mz_graph_dump_dot_file(mz_graph *g, const char *path) {
  if (!MZ__LIVE(g, MZ__TAG_GRAPH)) return MZ_EINVAL;
  if (!path) return mz__set_error(g->rt, MZ_EINVAL, "mz_graph_dump_dot_file: NULL path");
  FILE *f = fopen(path, "w");
  if (!f) return mz__set_error(g->rt, MZ_EIO, "mz_graph_dump_dot_file: cannot open '%s': %s", path, strerror(errno));
  int rc = mz_graph_dump_dot(g, f);
  if (fclose(f) && !rc) rc = mz__set_error(g->rt, MZ_EIO, "mz_graph_dump_dot_file: cannot write '%s': %s", path,
                                           strerror(errno));
  return rc;
}
