/* The runtime: configuration, device discovery, queues, teardown. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "fault.h"
#include "handle.h"
#include "objects/mz_buffer.h"
#include "objects/mz_graph.h"
#include "objects/mz_kernel.h"
#include "objects/mz_runtime.h"
#include "perfmodel.h"
#include "policy_table.h"
#include "run.h"
#include "trace.h"
#include "watchdog.h"

static const char *env_or(const char *v, const char *name, const char *dflt) {
  if (v) return v;
  const char *e = getenv(name);
  return e && *e ? e : dflt;
}

/* A count from the environment.  A malformed one ("abc", "0",
 * "-1") is an error, kept in *rc with its message, not a silent default. */
static unsigned env_uint(mz_runtime *rt, int *rc, unsigned v, const char *name, unsigned dflt) {
  if (v) return v;
  const char *e = getenv(name);
  if (e && *e) {
    char *end;
    unsigned long x = strtoul(e, &end, 10);
    if (!*end && *e != '-' && x > 0 && x < 1u << 20) return (unsigned)x;
    if (!*rc)
      *rc = mz__set_error(rt, MZ_EINVAL, "%s: '%.64s' is not a count from 1 to %u", name, e, (1u << 20) - 1);
  }
  return dflt;
}

static const struct mz__devtype *find_type(const char *name, size_t len) {
  for (unsigned i = 0; mz__devtypes[i]; i++)
    if (strlen(mz__devtypes[i]->name) == len && !strncmp(mz__devtypes[i]->name, name, len)) return mz__devtypes[i];
  return NULL;
}

static unsigned queues_for(const mz_runtime *rt, const struct mz__devtype *t) {
  if (t->kind == MZ_DEVICE_OPENCL) return rt->cfg.opencl_queues;
  if (t->kind == MZ_DEVICE_CUDA) return rt->cfg.cuda_streams;
  return 0;
}

/* Parse the device selection and discover.  Items are separated by ';';
 * outside "sim:" items, ',' separates them too. */
static int discover_all(mz_runtime *rt, const char *spec) {
  char *copy = strdup(spec);
  if (!copy) return MZ_ENOMEM;
  char *items[64];
  unsigned n = 0;
  for (char *s = copy; *s && n < 64;) {
    while (*s == ' ' || *s == ';' || *s == ',') s++;
    if (!*s) break;
    items[n++] = s;
    bool sim = !strncmp(s, "sim", 3);
    while (*s && *s != ';' && (sim || *s != ',')) s++;
    if (*s) *s++ = 0;
  }
  bool want_cpu = false, all = false;
  const char *cpu_arg = NULL;
  int rc = MZ_OK;
  for (unsigned i = 0; i < n && !rc; i++) {
    char *it = items[i];
    size_t len = strcspn(it, ":");
    while (len && it[len - 1] == ' ') len--;
    if (len == 3 && !strncmp(it, "all", 3)) {
      all = true;
      continue;
    }
    const struct mz__devtype *t = find_type(it, len);
    if (!t) {
      bool known = (len == 6 && !strncmp(it, "opencl", 6)) || (len == 4 && !strncmp(it, "cuda", 4)) ||
                   (len == 3 && !strncmp(it, "sim", 3));
      rc = known ? mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: this maize was built without '%.*s' support", (int)len, it)
                 : mz__set_error(rt, MZ_ENOENT, "MZ_DEVICES: unknown device kind '%.*s' (known: cpu, opencl, cuda, sim)",
                                 (int)len, it);
      break;
    }
    if (t == &mz__devtype_cpu) {
      if (want_cpu) {
        rc = mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: the cpu is named twice");
        break;
      }
      want_cpu = true;
      cpu_arg = it[len] == ':' ? it + len + 1 : NULL;
    }
  }
  if (!rc) {
    /* The CPU first; a host-only worker when no CPU is asked for. */
    struct mz__devsel sel = {.all = !cpu_arg, .arg = want_cpu || all ? cpu_arg : "host"};
    int got = mz__devtype_cpu.discover(rt, &mz__devtype_cpu, &sel);
    if (got < 0) rc = got;
  }
  for (unsigned i = 0; i < n && !rc; i++) {
    char *it = items[i];
    size_t len = strcspn(it, ":");
    while (len && it[len - 1] == ' ') len--;
    if (len == 3 && !strncmp(it, "all", 3)) continue;
    const struct mz__devtype *t = find_type(it, len);
    if (t == &mz__devtype_cpu) continue;
    struct mz__devsel sel = {.all = it[len] != ':', .arg = it[len] == ':' ? it + len + 1 : NULL,
                             .default_queues = queues_for(rt, t)};
    rt->errmsg[0] = 0;
    int got = t->discover(rt, t, &sel);
    if (got < 0) {
      rc = got;
    } else if (got == 0) {
      /* Keep the backend's reason (no driver, no platform) when it gave one. */
      char why[MZ__ERRLEN / 2];
      snprintf(why, sizeof why, "%.400s", rt->errmsg);
      rc = mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: '%.64s' was asked for, but no such device was found%s%.400s",
                         it, why[0] ? ": " : "", why);
    }
  }
  if (!rc && all) {
    for (unsigned i = 0; mz__devtypes[i] && !rc; i++) {
      const struct mz__devtype *t = mz__devtypes[i];
      if (t == &mz__devtype_cpu) continue;
      bool named = false;
      for (unsigned j = 0; j < n; j++) named |= !strncmp(items[j], t->name, strlen(t->name));
      if (named) continue;
      struct mz__devsel sel = {.all = true, .default_queues = queues_for(rt, t), .implicit = true};
      int got = t->discover(rt, t, &sel);
      if (got < 0) mz__warn(rt, "%s devices are skipped: %s", t->name, rt->errmsg);
    }
  }
  free(copy);
  return rc;
}

static void runtime_free(mz_runtime *rt) {
  mz__watchdog_stop(rt); /* first, it walks the runs */
  for (unsigned d = 0; d < rt->ndev; d++) mz__proxy_stop(rt->devs[d]);
  mz__reaper_stop(rt);
  mz__perfmodel_destroy(rt); /* saves what was learned; devices are still alive */
  /* What the user did not free: futures first (they hold graphs), then
   * graphs (they hold buffers and kernels).  No run is in flight. */
  while (rt->futures) {
    struct mz__run *r = rt->futures;
    atomic_store(&r->refs, 1);
    mz__run_unref(r);
  }
  /* What the user did not free: graphs first (they hold buffers and kernels). */
  while (rt->graphs) {
    mz_graph *g = rt->graphs;
    atomic_store(&g->refs, 1);
    mz__graph_unref(g);
  }
  while (rt->buffers) {
    /* Tiles hold their parent: free from the head until none is left. */
    mz_buffer *b = rt->buffers;
    atomic_store(&b->refs, 1);
    mz_buffer_release(b);
  }
  while (rt->kernels) {
    mz_kernel *k = rt->kernels;
    atomic_store(&k->refs, 1);
    mz__kernel_unref(k);
  }
  mz__fault_fini(rt); /* after the buffers, whose copies it accounts */
  mz__memlimit_fini(rt);
  /* The CPU (device 0) last, submission threads after it (found
   * by ThreadSanitizer): a thread that hands a node to another device (the
   * simulator's engine to a CPU worker, a CPU worker to a submission
   * thread) still wakes it after the node may have ended the last run. */
  for (unsigned d = rt->ndev; d-- > 0;) {
    struct mz_device *dev = rt->devs[d];
    for (unsigned q = 0; q < dev->nqueues; q++)
      if (dev->ops->queue_fini && (dev->queues[q].priv || dev->ops->queue_init)) dev->ops->queue_fini(&dev->queues[q]);
    if (dev->ops->destroy) dev->ops->destroy(dev);
  }
  for (unsigned d = 0; d < rt->ndev; d++) {
    struct mz_device *dev = rt->devs[d];
    mz__proxy_free(dev);
    for (unsigned q = 0; q < dev->nqueues; q++) free(dev->queues[q].pend);
    free(dev->queues);
    free(dev);
  }
  for (unsigned i = 0; i < rt->npol; i++)
    if (rt->pol_ready[i] && rt->pol[i]->fini) rt->pol[i]->fini(rt->pol_state[i]);
  mz__trace_close(rt); /* NULL-safe; a creation that failed wrote none */
  free(rt->devs);
  free(rt->queues);
  free(rt->mem_dev);
  pthread_mutex_destroy(&rt->lock);
  pthread_cond_destroy(&rt->idle);
  pthread_mutex_destroy(&rt->errlock);
  pthread_mutex_destroy(&rt->pol_lock);
  pthread_mutex_destroy(&rt->trace_lock);
  mz__chunk_pool_fini(&rt->chunks); /* after every graph and run gave its chunks back */
  rt->tag = MZ__TAG_DEAD;
  free(rt);
}

int mz_runtime_create(const mz_runtime_config *cfg, mz_runtime **out) {
  if (!out) return MZ_EINVAL;
  *out = NULL;
  /* The first reading of both clocks for the tick rate (measured over
   * device discovery, which takes milliseconds: mz__tick_ns_per_tick). */
  uint64_t cal_ns = mz__now_ns(), cal_ticks = mz__ticks();
  mz_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return MZ_ENOMEM;
  rt->tag = MZ__TAG_RUNTIME;
  rt->touch_stamp = 1; /* stamps are odd: mz__stamp_next */
  rt->chunks.max = 64; /* up to 64 MiB of graph and run memory kept for reuse (chunks of a span, MZ__SPAN), and as much in task lists */
  if (cfg) rt->cfg = *cfg;
  pthread_mutex_init(&rt->lock, NULL);
  pthread_cond_init(&rt->idle, NULL);
  pthread_mutex_init(&rt->errlock, NULL);
  pthread_mutex_init(&rt->pol_lock, NULL);
  pthread_mutex_init(&rt->trace_lock, NULL);
  rt->sched.rt = rt;
  const char *q = getenv("MZ_QUIET");
  rt->quiet = rt->cfg.quiet || (q && *q && strcmp(q, "0"));
  int rc = MZ_OK;
  rt->spin = rt->cfg.spin ? rt->cfg.spin : env_uint(rt, &rc, 0, "MZ_SPIN_US", 50);
  /* How long a waiter on a run with at most two nodes left spins before it
   * sleeps (src/run.c); 0 turns it off. */
  const char *ws = getenv("MZ_WAIT_SPIN_US");
  rt->wait_spin = MZ__WAIT_SPIN_US;
  if (ws && *ws) {
    char *end;
    unsigned long x = strtoul(ws, &end, 10);
    if (!*end && *ws != '-' && x < 1u << 20) rt->wait_spin = (unsigned)x;
    else if (!rc) rc = mz__set_error(rt, MZ_EINVAL, "MZ_WAIT_SPIN_US: '%.64s' is not a count from 0 to %u", ws, (1u << 20) - 1);
  }
  /* Off by default: METG stencil_1d on 2 cores is no better with it (see
   * devices/cpu/cpu.c, "Lending", and bench/README.md). */
  const char *wh = getenv("MZ_WAIT_HELP");
  rt->wait_help = false;
  if (wh && *wh) {
    if (!strcmp(wh, "1")) rt->wait_help = true;
    else if (strcmp(wh, "0") && !rc) rc = mz__set_error(rt, MZ_EINVAL, "MZ_WAIT_HELP must be 0 or 1, not '%.64s'", wh);
  }
  rt->timings = rt->cfg.timings;
  const char *tm = getenv("MZ_TIMINGS");
  if (!rt->timings && tm && *tm) {
    if (!strcmp(tm, "1")) rt->timings = true;
    else if (strcmp(tm, "0") && !rc) rc = mz__set_error(rt, MZ_EINVAL, "MZ_TIMINGS must be 0 or 1, not '%.64s'", tm);
  }
  rt->cfg.opencl_queues = env_uint(rt, &rc, rt->cfg.opencl_queues, "MZ_OPENCL_QUEUES", 4);
  rt->cfg.cuda_streams = env_uint(rt, &rc, rt->cfg.cuda_streams, "MZ_CUDA_STREAMS", 4);
  /* MZ_LOG=error|warn|info|debug; MZ_QUIET still silences everything. */
  rt->log_level = MZ__LOG_WARN;
  const char *lv = getenv("MZ_LOG");
  if (lv && *lv) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    int found = -1;
    for (int i = 0; i < 4; i++)
      if (!strcmp(lv, names[i])) found = i;
    if (found < 0 && !rc) rc = mz__set_error(rt, MZ_EINVAL, "MZ_LOG must be error, warn, info or debug, not '%s'", lv);
    else if (found >= 0) rt->log_level = found;
  }
  for (unsigned i = 0; mz__builtin_policies[i] && !rc; i++) rc = mz_policy_register(rt, mz__builtin_policies[i]);
  for (unsigned i = 0; rt->cfg.policies && rt->cfg.policies[i] && !rc; i++)
    rc = mz_policy_register(rt, rt->cfg.policies[i]);
  double watchdog_s = 0;
  if (!rc) rc = mz__watchdog_config(rt, &watchdog_s);
  const char *pname = env_or(rt->cfg.policy, "MZ_POLICY", "eager");
  if (!rc && mz__policy_find(rt, pname, &rt->default_pol))
    rc = mz__set_error(rt, MZ_ENOENT,
                       "MZ_POLICY: no policy named '%s' (shipped: single, round-robin, eager, ws, dmda, dmdas, heft; a policy of "
                       "your own must be in mz_runtime_config.policies)",
                       pname);
  if (!rc) snprintf(rt->policy_name, sizeof rt->policy_name, "%s", pname);
  const char *tp = env_or(rt->cfg.trace, "MZ_TRACE", NULL);
  if (!rc) rc = discover_all(rt, env_or(rt->cfg.devices, "MZ_DEVICES", "all"));
  /* Memory nodes and the runtime-wide queue numbering. */
  if (!rc) {
    rt->mem_dev = calloc(rt->ndev + 1, sizeof *rt->mem_dev);
    unsigned nq = 0;
    for (unsigned d = 0; d < rt->ndev; d++) nq += rt->devs[d]->nqueues;
    rt->queues = calloc(nq ? nq : 1, sizeof *rt->queues);
    if (!rt->mem_dev || !rt->queues) rc = MZ_ENOMEM;
    rt->nmem = 1;
    for (unsigned d = 0; d < rt->ndev && !rc; d++) {
      struct mz_device *dev = rt->devs[d];
      if (dev->ops->host_memory) {
        dev->memnode = 0;
      } else {
        dev->memnode = rt->nmem;
        rt->mem_dev[rt->nmem++] = dev;
      }
      if (dev->ops->share && !rt->share_dev) rt->share_dev = dev;
      if (!dev->ops->host_memory || !dev->ops->inline_submit || dev->ops->clock) atomic_store(&rt->xrec_always, true);
      dev->info.first_queue = rt->nq;
      for (unsigned i = 0; i < dev->nqueues; i++) {
        dev->queues[i].index = rt->nq;
        rt->queues[rt->nq++] = &dev->queues[i];
      }
    }
  }
  /* The watchdog, when asked for, before the queues' threads
   * start, so they see rt->watchdog without a race (it has no runs to
   * watch yet). */
  if (!rc) rc = mz__watchdog_start(rt, watchdog_s);
  if (!rc) rc = mz__fault_init(rt);    /* MZ_FAULTS */
  if (!rc) rc = mz__memlimit_init(rt); /* MZ_LIMIT_<KIND>_MEM */
  double tick_ns = rc ? 0 : mz__tick_ns_per_tick(cal_ns, cal_ticks);
  for (unsigned d = 0; d < rt->ndev && !rc; d++) {
    struct mz_device *dev = rt->devs[d];
    for (unsigned i = 0; i < dev->nqueues; i++) dev->queues[i].acct.tick_ns = tick_ns;
    for (unsigned i = 0; i < dev->nqueues && !rc && dev->ops->queue_init; i++) {
      rc = dev->ops->queue_init(&dev->queues[i]);
      if (rc) mz__set_error(rt, rc, "%s: cannot open queue %u", dev->info.name, i);
    }
    if (!rc && !dev->ops->inline_submit) rc = mz__proxy_start(dev);
  }
  if (!rc) rc = mz__reaper_start(rt);
  if (!rc) rc = mz__perfmodel_create(rt);
  if (!rc && tp && *tp) rc = mz__trace_open(rt, tp);
  if (rc) {
    if (!rt->quiet) fprintf(stderr, "maize: mz_runtime_create: %s (%s)\n", rt->errmsg, mz_err_name(rc));
    runtime_free(rt);
    return rc;
  }
  mz__log(rt, MZ__LOG_INFO, "runtime: %u device(s), %u queue(s), default policy %s", rt->ndev, rt->nq,
          rt->policy_name);
  *out = rt;
  return MZ_OK;
}

void mz__idle_set(mz_runtime *rt, const struct mz__idle_ops *ops, void *ctx) {
  if (ops) {
    atomic_store(&rt->idle_ctx, ctx);
    atomic_store(&rt->idle_ops, ops);
    return;
  }
  atomic_store(&rt->idle_ops, NULL);
  /* A worker that read the old ops before the store is counted (seq_cst
   * both sides); it holds them for one spell of spinning at most. */
  while (atomic_load(&rt->idle_users)) sched_yield();
}

void mz_runtime_destroy(mz_runtime *rt) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME)) return;
  if (mz__in_runtime_thread) {
    mz__set_error(rt, MZ_EDEADLK, "mz_runtime_destroy: called from a runtime thread; refused (it would deadlock)");
    if (!rt->quiet) fprintf(stderr, "maize: mz_runtime_destroy called from a runtime thread; refused\n");
    return;
  }
  pthread_mutex_lock(&rt->lock);
  rt->destroying = true;
  while (rt->nruns) pthread_cond_wait(&rt->idle, &rt->lock);
  pthread_mutex_unlock(&rt->lock);
  mz__trace_close(rt); /* each run was written when it ended; a runtime that ran nothing writes an empty trace */
  runtime_free(rt);
}

const char *mz_runtime_last_error(const mz_runtime *rt) {
  return MZ__LIVE(rt, MZ__TAG_RUNTIME) ? rt->errmsg : rt ? "not a live runtime (NULL, destroyed, or another kind of handle)" : "NULL runtime";
}
const char *mz_runtime_policy(const mz_runtime *rt) { return MZ__LIVE(rt, MZ__TAG_RUNTIME) ? rt->policy_name : NULL; }

int mz_runtime_wait_idle(mz_runtime *rt) {
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME)) return MZ_EINVAL;
  if (mz__in_runtime_thread) return mz__set_error(rt, MZ_EDEADLK, "mz_runtime_wait_idle: called from a runtime thread");
  pthread_mutex_lock(&rt->lock);
  while (rt->nruns) pthread_cond_wait(&rt->idle, &rt->lock);
  pthread_mutex_unlock(&rt->lock);
  return MZ_OK;
}

