/* The simulated device: modelled speed, memory and link, on a virtual clock.
 *
 * MZ_DEVICES describes a platform with one or more "sim:" items, each a
 * class of identical devices:
 *
 *   sim:gpu*4@speed=20,mem=16G,link=12G/s;sim:cpu*8@speed=1
 *
 *   class      a name ([A-Za-z0-9_-]); the devices are named "sim-<class>"
 *   *N         N devices (default 1)
 *   speed=S    compute speed in GFLOP/s: a node of F flops runs F/S ns
 *              (default 1; the units are relative, only ratios matter)
 *   bw=B       device memory bandwidth in GB/s (= bytes per ns), for
 *              kernels costed in bytes (default 10 x speed)
 *   mem=M      device memory in bytes, with K, M, G or T (powers of 1024);
 *              an allocation beyond it fails with MZ_ENOMEM (default: none)
 *   link=L     bandwidth of the link to host memory, B/s with K, M or G
 *              (powers of 1000) and an optional "/s" (default 16G/s)
 *   lat=T      latency of one transfer: ns, or with us, ms or s (default 1us)
 *   queues=Q   in-order queues per device (default 1)
 *   copy=C     1: the device has a copy engine (as GPUs have), so a node's
 *              input copies overlap the kernels of its queues; 0: copies
 *              run on the receiving queue (default 0)
 *   nodes=K    a network: the class's devices are dealt in blocks to K
 *              simulated machines, numbered 0..K-1 (the same numbers for
 *              every class: "sim:cpu*64@nodes=64;sim:gpu*128@nodes=64"
 *              puts one cpu and two gpus on each node); host memory is on
 *              node 0 (default: no network)
 *   netlat=T   latency of one message between nodes (default 1us)
 *   netbw=B    bandwidth of a node's network link, B/s as link (default
 *              12.5G/s, 100 Gb/s)
 *   host=N     the class runs on the simulated host's cores, which every
 *              class with host=N shares, one node keeping N of them busy
 *              (mz_device_info.host_cores; default 0: processors of its
 *              own).  host=1 plays the CPU device (a queue per core);
 *              host=N with N > 1 plays an OpenCL CPU device such as
 *              PoCL's, whose kernel spreads over all the cores: one of its
 *              nodes starts once every host queue has done what it was
 *              given, and they start their later nodes after it ends
 *              (the node holds the host, as a gang)
 *
 * A class named twice must be described the same way.  "sim" alone is
 * "sim:dev*4".  Sim devices answer only when named: "all" never adds them.
 *
 * What a node costs: a kernel with a cost (mz_cost_spec) runs
 * max(flops / speed, bytes / bw), where flops and bytes come from the
 * per-element figures times the element count of the first written buffer,
 * or from the kernel's flops function.  A kernel without a cost runs one
 * flop per element, and the simulator does not tell policies so: they have
 * to learn it through the perf models, as on real devices.  Transfers into
 * a device take lat + bytes / link, between two sim devices the slower
 * link and the larger latency.  Without a copy engine they occupy the
 * receiving queue before the node, and a node whose predecessors ran on
 * other devices is submitted once they have finished.  With one (copy=1),
 * the device also waits on the device for other sim devices' nodes (as
 * CUDA and OpenCL devices wait for events), so a node is submitted as soon
 * as its predecessors are; its copies run on the device's copy engine, in
 * submission order, each from the later of its submission and its
 * source's producer's end: the engine is one in-order lane per device, so
 * a device's copies wait for each other (and one waiting for a late
 * producer holds back those behind it, as on a CUDA copy stream), and the
 * node starts once its queue is free, its last copy is in and the nodes it
 * waits for have ended.  Copies for the next node thus overlap the current
 * node's kernel (prefetch).  Copies into one device contend only on its
 * engine: links are not shared.  With a network,
 * a copy between devices of different nodes takes netlat + bytes / netbw
 * (the larger latency and the smaller bandwidth of the two classes; the
 * devices' own links are taken to overlap the network), and one between
 * host memory and a device off node 0 adds that to the device's link.
 *
 * There is no data.  mem_alloc returns a token that only records the size,
 * mem_read and mem_write do nothing, and kernels never run: buffers that a
 * simulated node writes keep whatever the host copy held.  Everything
 * else is the real runtime: the same core, coherence (which copies are
 * valid, which transfers are needed) and policies.
 *
 * The engine.  One per runtime, shared by its sim devices: a virtual clock
 * and a heap of completion events ordered by (virtual time, submission
 * sequence).  submit (inline, from any runtime thread) computes each node's
 * virtual start and end from its queue's virtual free time, pushes one
 * event per batch, and returns.  The engine thread pops the earliest event,
 * sets the clock to its time and calls mz__batch_done on it synchronously:
 * the cascade (successors placed by the policy, submitted inline to sim
 * queues) happens on the engine thread before the next event is popped, so
 * virtual time never moves while the submissions an event causes are being
 * made, and a run on sim devices only is deterministic.  The core holds the
 * engine (the devtype's hold hook) while mz_schedule submits a run's first
 * nodes, for the same reason.  Work on real devices in the same runtime
 * (host nodes on the CPU worker) completes in wall time: the sim stamps
 * what it causes with the virtual time of that moment, so such mixed runs
 * are valid but not deterministic.
 *
 * Each event costs O(log n) in the heap; the engine never scans. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "objects/mz_buffer.h"
#include "objects/mz_kernel.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"

struct sim_class {
  char name[48];
  double speed;   /* flops per ns (GFLOP/s) */
  double bw;      /* device memory bytes per ns (GB/s) */
  double link;    /* link bytes per ns */
  double lat;     /* ns per transfer */
  uint64_t mem;   /* bytes, 0: unlimited */
  unsigned queues;
  bool copy;      /* a copy engine: input copies overlap the queues' kernels */
  unsigned nodes; /* simulated machines the class is dealt to; 0: no network */
  double netlat;  /* ns per message between nodes */
  double netbw;   /* network bytes per ns */
  unsigned host;  /* host cores a node keeps busy; 0: processors of its own */
};

struct sim_event {
  uint64_t t, seq;
  struct mz__batch *b;
};

struct engine {
  pthread_mutex_t m;
  pthread_cond_t c;
  struct sim_event *heap;
  size_t n, cap;
  _Atomic uint64_t now;   /* virtual ns; written by the engine thread under m */
  uint64_t seq;
  int hold;
  bool stop;
  unsigned refs;          /* sim devices sharing it */
  pthread_t thread;
  bool started;
};

struct sim_dev {
  struct engine *eng;
  struct sim_class cls;
  unsigned node;  /* its machine (cls.nodes > 0); host memory is on node 0 */
  _Atomic uint64_t mem_used;
  /* With a copy engine: the virtual time when it has made every copy
   * given to it (written under the engine's lock, read by policies). */
  _Atomic uint64_t copy_free_at;
};

struct sim_queue {
  _Atomic uint64_t free_at; /* virtual time when the queue has done all it was given */
};

/* ---- the event heap (engine->m held) ---- */

static bool ev_less(const struct sim_event *a, const struct sim_event *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(struct engine *e, struct sim_event ev) {
  if (e->n == e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 1024;
    struct sim_event *v = realloc(e->heap, cap * sizeof *v);
    if (!v) return MZ_ENOMEM;
    e->heap = v;
    e->cap = cap;
  }
  size_t i = e->n++;
  while (i) {
    size_t p = (i - 1) / 2;
    if (!ev_less(&ev, &e->heap[p])) break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = ev;
  return MZ_OK;
}

static struct sim_event heap_pop(struct engine *e) {
  struct sim_event top = e->heap[0], last = e->heap[--e->n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const struct sim_event *best = &last;
    if (l < e->n && ev_less(&e->heap[l], best)) {
      m = l;
      best = &e->heap[l];
    }
    if (r < e->n && ev_less(&e->heap[r], best)) m = r;
    if (m == i) break;
    e->heap[i] = e->heap[m];
    i = m;
  }
  if (e->n) e->heap[i] = last;
  return top;
}

/* ---- the engine thread ---- */

static void *engine_main(void *arg) {
  struct engine *e = arg;
  mz__in_runtime_thread = 1;
  pthread_mutex_lock(&e->m);
  for (;;) {
    while (!e->stop && (!e->n || e->hold > 0)) pthread_cond_wait(&e->c, &e->m);
    if (e->stop && (!e->n || e->hold > 0)) break;
    struct sim_event ev = heap_pop(e);
    if (ev.t > atomic_load_explicit(&e->now, memory_order_relaxed))
      atomic_store_explicit(&e->now, ev.t, memory_order_relaxed);
    pthread_mutex_unlock(&e->m);
    /* Completion and its whole cascade, on this thread, at time ev.t. */
    mz__batch_done(ev.b);
    pthread_mutex_lock(&e->m);
  }
  pthread_mutex_unlock(&e->m);
  return NULL;
}

static struct engine *engine_of(mz_runtime *rt, const struct mz__devtype *type) {
  for (unsigned d = 0; d < rt->ndev; d++)
    if (rt->devs[d]->type == type) return ((struct sim_dev *)rt->devs[d]->priv)->eng;
  return NULL;
}

static void sim_hold(mz_runtime *rt, bool on) {
  struct engine *e = engine_of(rt, &mz__devtype_sim);
  if (!e) return;
  pthread_mutex_lock(&e->m);
  e->hold += on ? 1 : -1;
  if (!e->hold) pthread_cond_signal(&e->c);
  pthread_mutex_unlock(&e->m);
}

/* ---- costs ---- */

static bool has_cost(const mz_kernel *k) {
  const mz_cost_spec *c = &mz__kernel_spec(k)->cost;
  return c->flops_per_elem > 0 || c->bytes_per_elem > 0 || c->flops;
}

/* The modelled time of op on a device of class c. */
static double cost_ns(const struct sim_class *c, const mz_op *op) {
  const struct mz__task *t = mz__op_t(op);
  const mz_kernel *k = mz__task_kernel(t);
  if (!k) return 0;
  const mz_cost_spec *cs = &mz__kernel_spec(k)->cost;
  /* Elements of the first written buffer, else of the first buffer. */
  double elems = 0;
  for (unsigned i = 0; i < t->nparams && !elems; i++) {
    enum mz__dir d = k->params[i].dir;
    if (mz__task_buf(t, i) && (d == MZ__OUT || d == MZ__INOUT || d == MZ__OUTLIKE)) elems = (double)mz__task_buf(t, i)->shape.count;
  }
  for (unsigned i = 0; i < t->nparams && !elems; i++)
    if (mz__task_buf(t, i)) elems = (double)mz__task_buf(t, i)->shape.count;
  double flops, bytes = cs->bytes_per_elem * elems;
  if (cs->flops) {
    mz_arg argv[16];
    mz_shape shv[16];
    unsigned n = t->nparams <= 16 ? t->nparams : 16;
    for (unsigned i = 0; i < n; i++) {
      if (mz__task_buf(t, i)) {
        argv[i].p = NULL;
        shv[i] = mz__task_buf(t, i)->shape;
      } else {
        argv[i] = mz__task_values(t)[i];
        memset(&shv[i], 0, sizeof shv[i]);
      }
    }
    mz_call call = {.kernel = k, .nargs = n, .args = argv, .shapes = shv};
    flops = cs->flops(&call);
  } else if (has_cost(k)) {
    flops = cs->flops_per_elem * elems;
  } else {
    flops = elems; /* one flop per element: a kernel the policies must learn */
  }
  if (!(flops >= 0)) flops = 0;
  if (!(bytes >= 0)) bytes = 0;
  double a = flops / c->speed, b = bytes / c->bw;
  return a > b ? a : b;
}

static double link_ns_cls(const struct sim_class *dst, const struct sim_class *src, size_t bytes) {
  double lat = 0, bw = INFINITY;
  if (dst) {
    lat = dst->lat;
    bw = dst->link;
  }
  if (src) {
    if (src->lat > lat) lat = src->lat;
    if (src->link < bw) bw = src->link;
  }
  if (!isfinite(bw)) return 0;
  return lat + (double)bytes / bw;
}

static const struct sim_class *cls_of(const struct mz_device *d) {
  return d && d->type == &mz__devtype_sim ? &((const struct sim_dev *)d->priv)->cls : NULL;
}

static const struct sim_dev *sim_of(const struct mz_device *d) {
  return d && d->type == &mz__devtype_sim ? (const struct sim_dev *)d->priv : NULL;
}

/* A copy into dst from src (NULL: host memory, on node 0), network included. */
static double link_ns_dev(const struct sim_dev *dst, const struct sim_dev *src, size_t bytes) {
  double t = link_ns_cls(dst ? &dst->cls : NULL, src ? &src->cls : NULL, bytes);
  bool dnet = dst && dst->cls.nodes, snet = src && src->cls.nodes;
  if (!dnet && !snet) return t;
  unsigned nd = dnet ? dst->node : 0, ns = snet ? src->node : 0;
  if (nd == ns) return t;
  double lat = 0, bw = INFINITY;
  if (dnet) {
    lat = dst->cls.netlat;
    bw = dst->cls.netbw;
  }
  if (snet) {
    if (src->cls.netlat > lat) lat = src->cls.netlat;
    if (src->cls.netbw < bw) bw = src->cls.netbw;
  }
  double net = lat + (double)bytes / bw;
  return dst && src ? net : t + net;
}

static double sim_estimate_ns(const struct mz_device *dev, const mz_op *op) {
  const mz_kernel *k = op->kind == MZ__K_APPLY ? op->u.kernel : NULL; /* (host work has none) */
  if (!k || !has_cost(k)) return -1;
  return cost_ns(cls_of(dev), op);
}

static double sim_link_ns(const struct mz_device *dst, const struct mz_device *src, size_t bytes) {
  const struct sim_dev *d = sim_of(dst), *s = sim_of(src);
  if ((dst && !d) || (src && !s)) return -1; /* a real device's side: not ours */
  return link_ns_dev(d, s, bytes);
}

static uint64_t sim_clock(const struct mz_device *dev) {
  return atomic_load_explicit(&((const struct sim_dev *)dev->priv)->eng->now, memory_order_relaxed);
}

static uint64_t sim_queue_ready_ns(const struct mz__queue *q) {
  return atomic_load_explicit(&((const struct sim_queue *)q->priv)->free_at, memory_order_relaxed);
}

static uint64_t sim_copy_ready_ns(const struct mz_device *dev) {
  const struct sim_dev *sd = dev->priv;
  return sd->cls.copy ? atomic_load_explicit(&sd->copy_free_at, memory_order_relaxed) : 0;
}

/* ---- device operations ---- */

static bool sim_can_run(const struct mz_device *dev, const mz_kernel *k) {
  (void)dev;
  (void)k;
  return true; /* nothing runs: every kernel can be simulated */
}

/* A device with a copy engine waits on the device for nodes of other sim
 * devices (as CUDA and OpenCL devices wait for events), so a node is
 * submitted, and its copies queued, as soon as its predecessors are:
 * each copy starts once its source's producer ends (prefetch).  Devices
 * without one keep the host-side wait. */
static bool sim_can_wait(const struct mz__queue *q, const struct mz__queue *p) {
  return q->dev->type == &mz__devtype_sim && p->dev->type == &mz__devtype_sim &&
         ((const struct sim_dev *)q->dev->priv)->cls.copy;
}

static bool sim_can_copy_peer(const struct mz_device *dst, const struct mz_device *src) {
  return dst->type == &mz__devtype_sim && src->type == &mz__devtype_sim;
}

static int sim_mem_alloc(struct mz_device *dev, size_t bytes, void **mem) {
  struct sim_dev *sd = dev->priv;
  uint64_t used = atomic_fetch_add(&sd->mem_used, bytes) + bytes;
  if (sd->cls.mem && used > sd->cls.mem) {
    atomic_fetch_sub(&sd->mem_used, bytes);
    return MZ_ENOMEM;
  }
  /* A token that remembers the size, so mem_free can account for it. */
  size_t *tok = malloc(sizeof *tok);
  if (!tok) {
    atomic_fetch_sub(&sd->mem_used, bytes);
    return MZ_ENOMEM;
  }
  *tok = bytes;
  *mem = tok;
  return MZ_OK;
}

static void sim_mem_free(struct mz_device *dev, void *mem) {
  if (!mem) return;
  struct sim_dev *sd = dev->priv;
  atomic_fetch_sub(&sd->mem_used, *(size_t *)mem);
  free(mem);
}

static int sim_mem_read(struct mz_device *dev, void *mem, void *host, size_t bytes) {
  (void)dev, (void)mem, (void)host, (void)bytes;
  return MZ_OK; /* no data: see the top of this file */
}

static int sim_mem_write(struct mz_device *dev, void *mem, const void *host, size_t bytes) {
  (void)dev, (void)mem, (void)host, (void)bytes;
  return MZ_OK;
}

/* The host's cores (classes with host=N): when every host queue has done
 * what it was given, and holding them all until t.  Free times are
 * written under the engine's lock, which the caller holds. */
static uint64_t host_free_at(const mz_runtime *rt) {
  uint64_t h = 0;
  for (unsigned d = 0; d < rt->ndev; d++) {
    const struct sim_dev *o = sim_of(rt->devs[d]);
    if (!o || !o->cls.host) continue;
    for (unsigned k = 0; k < rt->devs[d]->nqueues; k++) {
      const struct sim_queue *oq = rt->devs[d]->queues[k].priv;
      uint64_t f = oq ? atomic_load_explicit(&oq->free_at, memory_order_relaxed) : 0;
      if (f > h) h = f;
    }
  }
  return h;
}

static void host_hold_until(mz_runtime *rt, uint64_t t) {
  for (unsigned d = 0; d < rt->ndev; d++) {
    const struct sim_dev *o = sim_of(rt->devs[d]);
    if (!o || !o->cls.host) continue;
    for (unsigned k = 0; k < rt->devs[d]->nqueues; k++) {
      struct sim_queue *oq = rt->devs[d]->queues[k].priv;
      if (oq && atomic_load_explicit(&oq->free_at, memory_order_relaxed) < t)
        atomic_store_explicit(&oq->free_at, t, memory_order_relaxed);
    }
  }
}

static int sim_submit(struct mz__queue *q, struct mz__batch *b) {
  struct sim_dev *sd = q->dev->priv;
  struct sim_queue *sq = q->priv;
  struct engine *e = sd->eng;
  pthread_mutex_lock(&e->m);
  uint64_t now = atomic_load_explicit(&e->now, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&sq->free_at, memory_order_relaxed);
  if (t < now) t = now;
  /* The copy engine's lane, when the device has one: a copy starts once
   * it is submitted, the engine is done with earlier ones, and the nodes
   * on its source's device that the node waits for have ended (the source
   * was planned with them: see sim_can_wait). */
  uint64_t c = atomic_load_explicit(&sd->copy_free_at, memory_order_relaxed);
  if (c < now) c = now;
  /* A node that holds the host's cores waits for every host queue. */
  bool gang = sd->cls.host > 1;
  if (gang) {
    uint64_t h = host_free_at(q->dev->rt);
    if (t < h) t = h;
  }
  for (unsigned i = 0; i < b->n; i++) {
    struct mz__exec *x = b->execs[i];
    /* Waits on the device (sim_can_wait): the nodes waited for were
     * submitted before, so their ends are known.  A copy waits for the
     * nodes on its source's device (it reads what they wrote), the node
     * for all of them. */
    uint64_t after = 0;
    struct mz__xdev *xd = mz__exec_xd(x);
    for (unsigned j = 0; j < mz__exec_nwait(x); j++)
      if (xd->waits[j] && mz__exec_t_end(xd->waits[j]) > after) after = mz__exec_t_end(xd->waits[j]);
    if (t < after) t = after;
    double xfer = 0;
    for (unsigned j = 0; j < mz__exec_nxfer(x); j++) {
      struct mz__xfer *xf = &xd->xfers[j];
      double l = link_ns_dev(sd, xf->src_dev ? sim_of(xf->src_dev) : NULL, xf->bytes);
      if (sd->cls.copy) {
        for (unsigned k = 0; xf->src_dev && k < mz__exec_nwait(x); k++)
          if (xd->waits[k] && mz__exec_queue(xd->waits[k])->dev == xf->src_dev && mz__exec_t_end(xd->waits[k]) > c)
            c = mz__exec_t_end(xd->waits[k]);
        /* Stamped in the virtual clock, as the nodes are: the trace draws
         * them on the device's copy engine track. */
        xf->t_start = c;
        c += (uint64_t)llround(l);
        xf->t_end = c;
      }
      xfer += l;
    }
    if (sd->cls.copy) {
      if (mz__exec_nxfer(x) && t < c) t = c;
    } else {
      t += (uint64_t)llround(xfer);
    }
    mz__exec_xd(x)->t_start = t;
    t += (uint64_t)llround(cost_ns(&sd->cls, mz__exec_node(x)));
    mz__exec_xd(x)->t_end = t;
    x->status = MZ_OK;
  }
  atomic_store_explicit(&sq->free_at, t, memory_order_relaxed);
  if (gang) host_hold_until(q->dev->rt, t);
  if (sd->cls.copy) atomic_store_explicit(&sd->copy_free_at, c, memory_order_relaxed);
  int rc = heap_push(e, (struct sim_event){.t = t, .seq = e->seq++, .b = b});
  if (rc == MZ_OK) pthread_cond_signal(&e->c);
  pthread_mutex_unlock(&e->m);
  return rc;
}

static int sim_queue_init(struct mz__queue *q) {
  struct sim_queue *sq = calloc(1, sizeof *sq);
  if (!sq) return MZ_ENOMEM;
  q->priv = sq;
  return MZ_OK;
}

static void sim_queue_fini(struct mz__queue *q) {
  free(q->priv);
  q->priv = NULL;
}

static void engine_release(struct engine *e) {
  pthread_mutex_lock(&e->m);
  bool last = --e->refs == 0;
  if (last) {
    e->stop = true;
    pthread_cond_signal(&e->c);
  }
  pthread_mutex_unlock(&e->m);
  if (!last) return;
  if (e->started) pthread_join(e->thread, NULL);
  pthread_mutex_destroy(&e->m);
  pthread_cond_destroy(&e->c);
  free(e->heap);
  free(e);
}

static void sim_destroy(struct mz_device *dev) {
  struct sim_dev *sd = dev->priv;
  if (!sd) return;
  engine_release(sd->eng);
  free(sd);
  dev->priv = NULL;
}

static const struct mz__device_ops sim_ops = {
    .inline_submit = true,
    .host_memory = false,
    .destroy = sim_destroy,
    .can_run = sim_can_run,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .mem_read = sim_mem_read,
    .mem_write = sim_mem_write,
    .can_copy_peer = sim_can_copy_peer,
    .can_wait = sim_can_wait,
    .submit = sim_submit,
    .queue_init = sim_queue_init,
    .queue_fini = sim_queue_fini,
    .clock = sim_clock,
    .estimate_ns = sim_estimate_ns,
    .link_ns = sim_link_ns,
    .queue_ready_ns = sim_queue_ready_ns,
    .copy_ready_ns = sim_copy_ready_ns,
};

/* ---- the platform description ---- */

static bool parse_num(const char *s, const char **end, double *v) {
  char *e;
  *v = strtod(s, &e);
  *end = e;
  return e != s && isfinite(*v) && *v > 0;
}

/* "16G" (powers of 1024) into bytes. */
static bool parse_mem(const char *s, const char *stop, uint64_t *out) {
  double v;
  const char *e;
  if (!parse_num(s, &e, &v)) return false;
  double m = 1;
  if (e < stop) {
    switch (*e) {
      case 'K': case 'k': m = 1024.0; break;
      case 'M': case 'm': m = 1024.0 * 1024; break;
      case 'G': case 'g': m = 1024.0 * 1024 * 1024; break;
      case 'T': case 't': m = 1024.0 * 1024 * 1024 * 1024; break;
      default: return false;
    }
    e++;
    if (e < stop && (*e == 'B' || *e == 'i')) e += *e == 'i' ? (e + 1 < stop && e[1] == 'B' ? 2 : 1) : 1;
  }
  *out = (uint64_t)(v * m);
  return e == stop;
}

/* "12G/s" (powers of 1000, bytes per second) into bytes per ns. */
static bool parse_bw(const char *s, const char *stop, double *out) {
  double v;
  const char *e;
  if (!parse_num(s, &e, &v)) return false;
  double m = 1;
  if (e < stop && strchr("KkMmGgTt", *e)) {
    m = (*e == 'K' || *e == 'k') ? 1e3 : (*e == 'M' || *e == 'm') ? 1e6 : (*e == 'G' || *e == 'g') ? 1e9 : 1e12;
    e++;
  }
  if (e < stop && *e == 'B') e++;
  if (stop - e == 2 && !strncmp(e, "/s", 2)) e += 2;
  *out = v * m / 1e9;
  return e == stop;
}

/* "5us" into ns. */
static bool parse_time(const char *s, const char *stop, double *out) {
  char *e;
  double v = strtod(s, &e);
  if ((const char *)e == s || !isfinite(v) || v < 0) return false;
  size_t n = (size_t)(stop - e);
  double m = 1;
  if (n == 0 || (n == 2 && !strncmp(e, "ns", 2))) m = 1;
  else if (n == 2 && !strncmp(e, "us", 2)) m = 1e3;
  else if (n == 2 && !strncmp(e, "ms", 2)) m = 1e6;
  else if (n == 1 && *e == 's') m = 1e9;
  else return false;
  *out = v * m;
  return true;
}

static int parse_item(mz_runtime *rt, const char *arg, struct sim_class *c, unsigned *count) {
  memset(c, 0, sizeof *c);
  c->speed = 1;
  c->link = 16;
  c->lat = 1000;
  c->queues = 1;
  c->netlat = 1000;
  c->netbw = 12.5;
  *count = 1;
  size_t n = strcspn(arg, "*@");
  if (!n || n >= sizeof c->name) return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'sim:%s' needs a class name", arg);
  for (size_t i = 0; i < n; i++) {
    char ch = arg[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
      return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'sim:%s': the class name may use letters, digits, '_', '-'", arg);
  }
  memcpy(c->name, arg, n);
  const char *s = arg + n;
  if (*s == '*') {
    char *e;
    long v = strtol(s + 1, &e, 10);
    if (e == s + 1 || v < 1 || v > 1024 || (*e && *e != '@'))
      return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'sim:%s': '*N' takes a count from 1 to 1024", arg);
    *count = (unsigned)v;
    s = e;
  }
  bool bw_set = false;
  if (*s == '@') {
    s++;
    while (*s) {
      const char *end = s + strcspn(s, ",");
      const char *eq = memchr(s, '=', (size_t)(end - s));
      bool ok = eq != NULL;
      size_t kl = ok ? (size_t)(eq - s) : 0;
      const char *v = ok ? eq + 1 : NULL;
      double d;
      if (!ok) {
      } else if (kl == 5 && !strncmp(s, "speed", 5)) {
        const char *e;
        ok = parse_num(v, &e, &d) && e == end;
        c->speed = d;
      } else if (kl == 2 && !strncmp(s, "bw", 2)) {
        ok = parse_bw(v, end, &c->bw);
        bw_set = true;
      } else if (kl == 3 && !strncmp(s, "mem", 3)) {
        ok = parse_mem(v, end, &c->mem);
      } else if (kl == 4 && !strncmp(s, "link", 4)) {
        ok = parse_bw(v, end, &c->link);
      } else if ((kl == 3 && !strncmp(s, "lat", 3)) || (kl == 7 && !strncmp(s, "latency", 7))) {
        ok = parse_time(v, end, &c->lat);
      } else if (kl == 5 && !strncmp(s, "nodes", 5)) {
        char *e;
        long k = strtol(v, &e, 10);
        ok = (const char *)e == end && k >= 1 && k <= 1024;
        c->nodes = (unsigned)k;
      } else if (kl == 6 && !strncmp(s, "netlat", 6)) {
        ok = parse_time(v, end, &c->netlat);
      } else if (kl == 5 && !strncmp(s, "netbw", 5)) {
        ok = parse_bw(v, end, &c->netbw) && c->netbw > 0;
      } else if (kl == 4 && !strncmp(s, "host", 4)) {
        char *e;
        long k = strtol(v, &e, 10);
        ok = e != v && (const char *)e == end && k >= 0 && k <= 1024;
        c->host = (unsigned)k;
      } else if (kl == 4 && !strncmp(s, "copy", 4)) {
        ok = end - v == 1 && (*v == '0' || *v == '1');
        c->copy = ok && *v == '1';
      } else if (kl == 6 && !strncmp(s, "queues", 6)) {
        char *e;
        long q = strtol(v, &e, 10);
        ok = (const char *)e == end && q >= 1 && q <= 64;
        c->queues = (unsigned)q;
      } else {
        ok = false;
      }
      if (!ok)
        return mz__set_error(rt, MZ_EINVAL,
                             "MZ_DEVICES: 'sim:%s': cannot read '%.*s' (keys: speed=GFLOP/s, bw=GB/s, mem=16G, "
                             "link=12G/s, lat=1us, queues=N, copy=0|1, nodes=K, netlat=1us, netbw=12.5G/s, host=N)",
                             arg, (int)(end - s), s);
      s = *end ? end + 1 : end;
    }
  } else if (*s) {
    return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'sim:%s': expected '*N' or '@key=value,...'", arg);
  }
  if (!bw_set) c->bw = 10 * c->speed;
  return MZ_OK;
}

static int sim_discover(mz_runtime *rt, const struct mz__devtype *type, const struct mz__devsel *sel) {
  if (sel->implicit) return 0; /* simulated devices only when asked for */
  struct sim_class c;
  unsigned count;
  int rc = parse_item(rt, sel->arg && *sel->arg ? sel->arg : "dev*4", &c, &count);
  if (rc) return rc;
  struct engine *e = engine_of(rt, type);
  /* A class named again must be the same class: perf models and policies
   * treat devices of one name as equal. */
  for (unsigned d = 0; d < rt->ndev; d++) {
    const struct sim_class *o = cls_of(rt->devs[d]);
    if (o && !strcmp(o->name, c.name) && memcmp(o, &c, sizeof c))
      return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: sim class '%s' is described twice, differently", c.name);
  }
  bool fresh = !e;
  if (fresh) {
    e = calloc(1, sizeof *e);
    if (!e) return MZ_ENOMEM;
    pthread_mutex_init(&e->m, NULL);
    pthread_cond_init(&e->c, NULL);
  }
  unsigned added = 0;
  for (unsigned i = 0; i < count; i++) {
    struct sim_dev *sd = calloc(1, sizeof *sd);
    struct mz_device *dev = sd ? mz__device_add(rt, type, c.queues, sd) : NULL;
    if (!dev) {
      free(sd);
      rc = mz__set_error(rt, MZ_ENOMEM, "MZ_DEVICES: cannot add sim device %u of class '%s' (at most 1024 devices and 32767 queues)", i,
                         c.name);
      break;
    }
    sd->eng = e;
    sd->cls = c;
    dev->copy_engine = c.copy;
    /* Blocks: device i of count on node i * nodes / count. */
    sd->node = c.nodes ? (unsigned)((uint64_t)i * c.nodes / count) : 0;
    pthread_mutex_lock(&e->m);
    e->refs++;
    pthread_mutex_unlock(&e->m);
    snprintf(dev->name_buf, sizeof dev->name_buf, "sim-%s", c.name);
    snprintf(dev->vendor_buf, sizeof dev->vendor_buf, "maize");
    snprintf(dev->version_buf, sizeof dev->version_buf, "sim speed=%g GFLOP/s link=%g GB/s%s", c.speed, c.link,
             c.copy ? " copy engine" : "");
    dev->info.name = dev->name_buf;
    dev->info.vendor = dev->vendor_buf;
    dev->info.version = dev->version_buf;
    dev->info.memory = c.mem;
    dev->info.max_alloc = c.mem;
    dev->info.fp64 = true;
    dev->info.compute_units = c.host > 1 ? c.host : 1;
    dev->info.host_cores = c.host;
    added++;
  }
  if (fresh && !added) {
    pthread_mutex_destroy(&e->m);
    pthread_cond_destroy(&e->c);
    free(e);
    return rc;
  }
  if (fresh) {
    if (pthread_create(&e->thread, NULL, engine_main, e))
      return mz__set_error(rt, MZ_ENOMEM, "sim: cannot start the engine thread");
    e->started = true;
    mz__thread_name(e->thread, "sim");
  }
  return rc ? rc : (int)added;
}

const struct mz__devtype mz__devtype_sim = {
    .name = "sim",
    .kind = MZ_DEVICE_SIM,
    .ops = &sim_ops,
    .discover = sim_discover,
    .hold = sim_hold,
};
