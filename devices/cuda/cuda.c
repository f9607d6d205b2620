/* maize: the CUDA backend, through the driver API loaded at run time.
 *
 * One maize device per CUDA device, using the device's primary context (so
 * maize shares memory and modules with any CUDA code of the application)
 * and several non-blocking streams as its in-order queues.  libcuda is
 * opened with dlopen by mz__cuda_load(): a machine without a driver or a
 * GPU simply has zero CUDA devices.
 *
 * Threads.  ops.inline_submit is false: the core gives each device one
 * submission thread, which makes every submit, prepare and mem_alloc call;
 * mem_read, mem_write and mem_free come from any non-callback thread.  A
 * context is current per thread, so every entry point makes the device's
 * primary context current first (cuCtxSetCurrent is a thread-local store).
 *
 * Completion.  A batch ends with exactly one cuLaunchHostFunc, whose
 * function makes no CUDA call (the API forbids it): it hands the batch
 * back to the core with mz__batch_done_callback(), which ends the nodes
 * there while the submission thread is busy launching (small kernels: the
 * launches are the bottleneck and the stream is about empty, so holding it
 * costs nothing), else on the submission thread (the stream waits for the
 * function; a lone op ends on the idle, polling thread).  The driver never runs host
 * functions once the context has a sticky error (a kernel fault), so each
 * device also has a monitor thread: while batches are in flight it checks
 * the device every few milliseconds, and when the context is broken it
 * marks the device dead and completes every batch still in flight with
 * MZ_EDEVICE.  A batch is completed exactly once: whoever unlinks it from
 * the in-flight list under the device lock completes it.
 *
 * Ordering between queues.  A node that waits for a node on another stream
 * waits for an event on the device (cuStreamWaitEvent), recorded on the
 * node's stream: right behind the node's launch when a node other than the
 * next one of its batch waits for it (mz__exec_waited_apart), else lazily,
 * the first time someone waits for the node.  Recording later than the
 * node captures the node and perhaps more of its stream (for the lazy
 * record, perhaps the rest of its batch: hence the early one), which is
 * conservative and cannot deadlock: an event only captures work submitted
 * before it, and that work never waits for work submitted after it.
 *
 * Copy engine.  Each device has one more non-blocking stream for the copies
 * into its memory that nodes need: a node's waits and copies go there, an
 * event recorded after its last copy is waited for on the node's own
 * stream, and the kernel follows, so the copies for the next nodes run on
 * the DMA engines while the kernels before them do.  MZ_COPY_ENGINE=0 puts
 * them back on the node's stream.
 *
 * Transfers from host memory go through pinned staging chunks (the source
 * is copied into them at submission, so the copy is truly asynchronous and
 * the submission thread never blocks), unless the source is already pinned.
 * Chunks return to a per-device pool when their batch completes. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_libs.h"
#include "cuda_loader.h"
#include "device_ops.h"
#include "maize.h"
#include "ops/native.h"

/* ------------------------------------------------------------------ */
/* The loader                                                          */
/* ------------------------------------------------------------------ */

/* The symbols to resolve, in the order of struct mz__cuda_api's fields. */
static const char *const cuda_symbols[] = {
#define MZ__CUDA_API_NAME(field, symbol) #symbol,
    MZ_CUDA_API_MAP(MZ__CUDA_API_NAME)
#undef MZ__CUDA_API_NAME
};
#define CUDA_NSYMBOLS (sizeof cuda_symbols / sizeof cuda_symbols[0])

#if CUDA_VERSION >= 12000
/* cuGetProcAddress as CUDA 12 and later declare it. */
typedef CUresult (*cuda_getproc_fn)(const char *symbol, void **pfn, int cuda_version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* Ask cuGetProcAddress for symbol, by its unversioned name ("cuMemAlloc"
 * for "cuMemAlloc_v2") and the CUDA version of our header, so the driver
 * returns the variant with the ABI cuda.h describes. */
static void *cuda_getproc(cuda_getproc_fn gpa, const char *symbol) {
  char base[64];
  size_t n = strlen(symbol);
  if (n >= sizeof base) return NULL;
  memcpy(base, symbol, n + 1);
  char *v = strstr(base, "_v");
  if (v && isdigit((unsigned char)v[2])) *v = 0;
  void *fn = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  if (gpa(base, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) != CUDA_SUCCESS ||
      st != CU_GET_PROC_ADDRESS_SUCCESS)
    return NULL;
  return fn;
}
#endif

int mz__cuda_load(const char *path, struct mz__cuda_api *api, char *err, size_t errlen) {
  if (!api) return MZ_EINVAL;
  memset(api, 0, sizeof *api);
  if (!path) path = getenv("MZ_CUDA_LIBRARY");
  if (!path || !*path) path = "libcuda.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    if (err && errlen) snprintf(err, errlen, "cannot load the CUDA driver '%s': %s", path, dlerror());
    return MZ_ELOAD;
  }
  /* The table is an array of function pointers in MZ_CUDA_API_MAP order;
   * fill it through a pointer array view built from the field addresses
   * rather than by casting the struct, so the layout is never assumed. */
  void **slots[] = {
#define MZ__CUDA_API_SLOT(field, symbol) (void **)&api->field,
      MZ_CUDA_API_MAP(MZ__CUDA_API_SLOT)
#undef MZ__CUDA_API_SLOT
  };
  /* dlsym returns an object pointer; POSIX guarantees it converts to a
   * function pointer, which memcpy below does without a cast warning. */
#if CUDA_VERSION >= 12000
  void *gpa_sym = dlsym(h, "cuGetProcAddress_v2");
  cuda_getproc_fn gpa = NULL;
  if (gpa_sym) memcpy(&gpa, &gpa_sym, sizeof gpa);
#endif
  for (size_t i = 0; i < CUDA_NSYMBOLS; i++) {
    void *sym = dlsym(h, cuda_symbols[i]);
#if CUDA_VERSION >= 12000
    if (!sym && gpa) sym = cuda_getproc(gpa, cuda_symbols[i]);
#endif
    if (!sym) {
      if (err && errlen)
        snprintf(err, errlen, "the CUDA driver '%s' lacks the symbol %s (driver too old?)", path,
                 cuda_symbols[i]);
      dlclose(h);
      memset(api, 0, sizeof *api);
      return MZ_ELOAD;
    }
    memcpy(slots[i], &sym, sizeof sym);
  }
  api->handle = h;
  return MZ_OK;
}

/* Open the first of names that loads (or $env_var's file alone) and
 * resolve syms into slots.  MZ_OK, or MZ_ELOAD with the reason in err. */
static int lib_load(const char *env_var, const char *const names[], const char *const syms[], void **const slots[],
                    size_t nsyms, void **handle, char *err, size_t errlen) {
  const char *path = getenv(env_var);
  void *h = NULL;
  if (path && *path) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(err, errlen, "cannot load '%s' ($%s): %s", path, env_var, dlerror());
  } else {
    for (unsigned i = 0; names[i] && !h; i++) {
      h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
      if (!h) snprintf(err, errlen, "cannot load %s%s%s: %s", i ? names[0] : names[i], i ? " or " : "",
                       i ? names[i] : "", dlerror());
    }
  }
  if (!h) return MZ_ELOAD;
  for (size_t i = 0; i < nsyms; i++) {
    void *sym = dlsym(h, syms[i]);
    if (!sym) {
      snprintf(err, errlen, "the library lacks the symbol %s (too old?)", syms[i]);
      dlclose(h);
      return MZ_ELOAD;
    }
    memcpy(slots[i], &sym, sizeof sym);
  }
  *handle = h;
  return MZ_OK;
}

#define MZ__STR2(x) #x
#define MZ__STR(x) MZ__STR2(x)

int mz__cublas_load(struct mz__cublas_api *api, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
#if MZ_HAVE_CUBLAS
  static const char *const names[] = {"libcublas.so." MZ__STR(CUBLAS_VER_MAJOR), "libcublas.so", NULL};
  static const char *const syms[] = {
#define MZ__LIB_NAME(field, symbol) #symbol,
      MZ_CUBLAS_API_MAP(MZ__LIB_NAME)};
  void **const slots[] = {
#define MZ__LIB_SLOT(field, symbol) (void **)&api->field,
      MZ_CUBLAS_API_MAP(MZ__LIB_SLOT)};
  int rc = lib_load("MZ_CUBLAS_LIBRARY", names, syms, slots, sizeof syms / sizeof syms[0], &api->handle, err, errlen);
  if (rc) memset(api, 0, sizeof *api);
  return rc;
#else
  snprintf(err, errlen, "maize was built without cublas_v2.h");
  return MZ_ENOTSUP;
#endif
}

int mz__cufft_load(struct mz__cufft_api *api, char *err, size_t errlen) {
  memset(api, 0, sizeof *api);
#if MZ_HAVE_CUFFT
  static const char *const names[] = {"libcufft.so." MZ__STR(CUFFT_VER_MAJOR), "libcufft.so", NULL};
  static const char *const syms[] = {MZ_CUFFT_API_MAP(MZ__LIB_NAME)};
  void **const slots[] = {MZ_CUFFT_API_MAP(MZ__LIB_SLOT)};
  int rc = lib_load("MZ_CUFFT_LIBRARY", names, syms, slots, sizeof syms / sizeof syms[0], &api->handle, err, errlen);
  if (rc) memset(api, 0, sizeof *api);
  return rc;
#else
  snprintf(err, errlen, "maize was built without cufft.h");
  return MZ_ENOTSUP;
#endif
}

void mz__cuda_unload(struct mz__cuda_api *api) {
  if (!api) return;
  if (api->handle) dlclose(api->handle);
  memset(api, 0, sizeof *api);
}

const char *mz__cuda_strerror(const struct mz__cuda_api *api, CUresult r, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (api && api->GetErrorName) api->GetErrorName(r, &name);
  if (api && api->GetErrorString) api->GetErrorString(r, &text);
  if (name && text)
    snprintf(buf, len, "%s: %s", name, text);
  else
    snprintf(buf, len, "CUDA error %d", (int)r);
  return buf;
}

/* ------------------------------------------------------------------ */
/* Backend state                                                       */
/* ------------------------------------------------------------------ */

/* Pinned staging memory: chunks of at least this size, and at most this
 * much pinned memory per device (pinned pages are taken from the OS for
 * good; a transfer that does not fit goes from pageable memory). */
#define CU_CHUNK_MIN ((size_t)1 << 20)
#define CU_PINNED_MAX ((size_t)256 << 20)
#define CU_STAGE_ALIGN 256
/* How often the monitor checks a device with work in flight. */
#define CU_MONITOR_NS 5000000L
/* Launch parameters kept on the stack up to this many arguments. */
#define CU_STACK_ARGS 32

/* What the CUDA devices of one runtime share: the driver table.  Each
 * device holds a reference; the last device's destroy frees it. */
struct cu_shared {
  struct mz__cuda_api api;
  _Atomic unsigned refs;
  int driver_version;
  /* The canned ops' libraries, loaded at discovery; handle NULL when not
   * (the ops that need one are then not runnable here). */
  struct mz__cublas_api blas;
  struct mz__cufft_api fft;
  char blas_err[384], fft_err[384]; /* why one did not load; written before any device exists */
};

struct cu_chunk {
  struct cu_chunk *next;
  char *host;             /* cuMemHostAlloc'd */
  size_t cap, used;
};

/* One batch in flight, linked in its device's in-flight list. */
struct cu_batch {
  struct cu_batch *prev, *next;
  struct cu_dev *d;
  struct mz__batch *b;
  struct cu_queue *cq;
  uint64_t t_submit;       /* mz__now_ns() before its first call */
  struct cu_chunk *chunks; /* staging used by the batch's transfers */
  bool linked;             /* in the in-flight list; whoever clears it completes the batch */
};

struct cu_dev {
  struct cu_shared *sh;
  const struct mz__cuda_api *api;   /* &sh->api */
  struct mz_device *dev;
  CUdevice cudev;
  int ordinal;
  CUcontext ctx;                    /* the primary context, retained */
  CUstream copy;                    /* the copy engine's stream (submission thread), or NULL */
  uint64_t peers;                   /* bit i: peer access to CUDA ordinal i is enabled */
  bool managed;                     /* managed memory, usable by host and device at once */

  /* The in-flight batches and the monitor.  host functions take this lock,
   * so no CUDA call is ever made while holding it. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct cu_batch *inflight;
  bool stop;
  bool probing;                     /* the monitor is querying the streams (without lock) */
  pthread_t monitor;
  bool monitor_started;

  _Atomic bool failed;
  char fail_msg[256];               /* written once, before failed is set */

  /* Guards the lazy recording of exec->event for nodes on this device's
   * streams (waiters may be on other devices' submission threads). */
  pthread_mutex_t event_lock;

  /* Events whose release_exec ran in a host function of ours, where no
   * CUDA call is allowed: the monitor destroys them.  Guarded by lock. */
  struct cu_grave *graves;

  /* Pinned staging chunks not in use.  Host functions give chunks back, so
   * the pool has its own lock, never held across a CUDA call. */
  pthread_mutex_t pool_lock;
  struct cu_chunk *pool;
  size_t pinned_total;              /* submission thread only */
};

struct cu_queue {
  CUstream stream;
  void *blas; /* the stream's cuBLAS handle, made by the first cuBLAS op; submission thread */
  /* When the stream's last completed batch ended (mz__now_ns), written by
   * its host function: the next batch cannot have started earlier. */
  _Atomic uint64_t last_end;
};

struct cu_grave {
  struct cu_grave *next;
  CUevent ev;
};

/* True on a thread while it runs one of our host functions.  The core may
 * tear a run down from there (and call release_exec), but a host function
 * must make no CUDA call, so such work is deferred. */
static _Thread_local bool cu_in_host_fn;

/* A prepared kernel. */
struct cu_kernel {
  CUmodule module;
  CUfunction fn;
  const struct mz__cu_native *native; /* a canned op's library call (ops/native.h), or NULL */
  void *state;                        /* its own data (plans), or NULL */
};

/* What a canned op's library call may use (ops/native.h). */
static struct mz__cu_env cu_env(const struct cu_dev *d, struct cu_queue *cq) {
  return (struct mz__cu_env){.drv = d->api, .blas_api = &d->sh->blas, .fft_api = &d->sh->fft,
                             .stream = cq ? cq->stream : NULL, .blas = cq ? &cq->blas : NULL};
}

static bool native_loaded(const struct cu_dev *d, const struct mz__cu_native *nat) {
  return nat && (nat->lib == MZ__CU_CUBLAS ? d->sh->blas.handle : d->sh->fft.handle) != NULL;
}


static const struct mz__device_ops cuda_ops;

static struct cu_dev *cu_of(const struct mz_device *dev) { return dev->priv; }

const char *mz__cuda_lib_missing(const struct mz_device *dev, enum mz__cu_lib lib) {
  if (!dev || dev->ops != &cuda_ops) return NULL;
  const struct cu_dev *d = cu_of(dev);
  if (lib == MZ__CU_CUBLAS) return d->sh->blas.handle ? NULL : d->sh->blas_err;
  return d->sh->fft.handle ? NULL : d->sh->fft_err;
}

static void cu_current(struct cu_dev *d) { d->api->CtxSetCurrent(d->ctx); }

/* Errors after which the context is unusable: every later call fails, so
 * the device is dead.  (The driver documents these as leaving "the process
 * in an inconsistent state"; the list follows cuda.h.) */
static bool cu_sticky(CUresult r) {
  switch (r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_ECC_UNCORRECTABLE:
  case CUDA_ERROR_NVLINK_UNCORRECTABLE:
  case CUDA_ERROR_CONTAINED:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
  case CUDA_ERROR_DEINITIALIZED:
  case CUDA_ERROR_DEVICE_UNAVAILABLE:
  case CUDA_ERROR_EXTERNAL_DEVICE:
  case CUDA_ERROR_UNKNOWN:
    return true;
  default:
    return false;
  }
}

/* A malloc'd message, for exec->message and build logs. */
static char *cu_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *cu_msg(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  return s;
}

static void cu_exec_fail(struct mz__exec *e, int code, char *msg) {
  if (e->status == 0) {
    e->status = code;
    if (!mz__exec_message(e)) {
      mz__exec_set_message(e, msg);
      msg = NULL;
    }
  }
  free(msg);
}

/* Mark the device dead after a sticky error and let the monitor complete
 * every batch in flight (host functions will never run).  Callable from
 * any thread except a host function; safe to call more than once. */
static void cu_fail(struct cu_dev *d, CUresult r, const char *where) {
  pthread_mutex_lock(&d->lock);
  bool first = !atomic_load(&d->failed);
  if (first) {
    char e[160];
    snprintf(d->fail_msg, sizeof d->fail_msg, "cuda device %d (%s): %s failed: %s", d->ordinal,
             d->dev->info.name ? d->dev->info.name : "?", where,
             mz__cuda_strerror(d->api, r, e, sizeof e));
    /* Dead to the core before the monitor may complete a batch: a run
     * that fails here must find the device dead when it returns, or a new
     * run could still be placed on it (seen on the emulator, whose
     * monitor won that race). */
    mz__device_fail(d->dev, MZ_EDEVICE, d->fail_msg);
    atomic_store(&d->failed, true);
  }
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
}

/* The maize code for a CUDA error that is not a device failure. */
static int cu_code(CUresult r) {
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: return MZ_ENOMEM;
  case CUDA_ERROR_INVALID_VALUE: return MZ_EINVAL;
  default: return MZ_EDEVICE;
  }
}

/* Check a call's result: a sticky error fails the device. */
static CUresult cu_check(struct cu_dev *d, CUresult r, const char *where) {
  if (r != CUDA_SUCCESS && cu_sticky(r)) cu_fail(d, r, where);
  return r;
}

/* ------------------------------------------------------------------ */
/* Staging pool                                                        */
/* ------------------------------------------------------------------ */

static void pool_put(struct cu_dev *d, struct cu_chunk *list) {
  if (!list) return;
  struct cu_chunk *last = list;
  for (struct cu_chunk *c = list; c; c = c->next) {
    c->used = 0;
    last = c;
  }
  pthread_mutex_lock(&d->pool_lock);
  last->next = d->pool;
  d->pool = list;
  pthread_mutex_unlock(&d->pool_lock);
}

/* Free the chunks not in use (submission thread, or destroy). */
static void pool_trim(struct cu_dev *d) {
  pthread_mutex_lock(&d->pool_lock);
  struct cu_chunk *list = d->pool;
  d->pool = NULL;
  pthread_mutex_unlock(&d->pool_lock);
  while (list) {
    struct cu_chunk *n = list->next;
    d->api->MemFreeHost(list->host);
    d->pinned_total -= list->cap;
    free(list);
    list = n;
  }
}

/* A pinned chunk of at least bytes, from the pool or new; NULL when the
 * pinned budget is spent or the driver refuses. */
static struct cu_chunk *pool_get(struct cu_dev *d, size_t bytes) {
  pthread_mutex_lock(&d->pool_lock);
  for (struct cu_chunk **pp = &d->pool; *pp; pp = &(*pp)->next) {
    if ((*pp)->cap >= bytes) {
      struct cu_chunk *c = *pp;
      *pp = c->next;
      pthread_mutex_unlock(&d->pool_lock);
      c->next = NULL;
      return c;
    }
  }
  pthread_mutex_unlock(&d->pool_lock);
  size_t cap = CU_CHUNK_MIN;
  while (cap < bytes && cap < CU_PINNED_MAX) cap <<= 1;
  if (cap < bytes) return NULL;
  if (d->pinned_total + cap > CU_PINNED_MAX) pool_trim(d);
  if (d->pinned_total + cap > CU_PINNED_MAX) return NULL;
  struct cu_chunk *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  void *p = NULL;
  if (d->api->MemHostAlloc(&p, cap, 0) != CUDA_SUCCESS) {
    free(c);
    return NULL;
  }
  c->host = p;
  c->cap = cap;
  d->pinned_total += cap;
  return c;
}

/* Room for bytes of staging in the batch's chunks, or NULL. */
static void *stage(struct cu_dev *d, struct cu_batch *cb, size_t bytes) {
  struct cu_chunk *c = cb->chunks;
  if (c) {
    size_t off = (c->used + CU_STAGE_ALIGN - 1) & ~(size_t)(CU_STAGE_ALIGN - 1);
    if (off <= c->cap && c->cap - off >= bytes) {
      c->used = off + bytes;
      return c->host + off;
    }
  }
  c = pool_get(d, bytes);
  if (!c) return NULL;
  c->next = cb->chunks;
  cb->chunks = c;
  c->used = bytes;
  return c->host;
}

/* ------------------------------------------------------------------ */
/* Completion and the monitor                                          */
/* ------------------------------------------------------------------ */

/* Hand a batch back to the core.  fail: 0, or the code for every exec that
 * has no status yet.  Makes no CUDA call (runs in host functions). */
static void batch_finish(struct cu_batch *cb, int fail, const char *why) {
  struct cu_dev *d = cb->d;
  struct mz__batch *b = cb->b;
  if (fail)
    for (unsigned i = 0; i < b->n; i++) cu_exec_fail(b->execs[i], fail, why ? strdup(why) : NULL);
  pool_put(d, cb->chunks);
  b->priv = NULL;
  free(cb);
  /* A host function holds up its stream until it returns: the nodes are
   * ended here only while the submission thread is busy launching (then
   * the stream is about empty anyway), else on that thread. */
  mz__batch_done_callback(b);
}

/* Node times, measured at the host: a batch ran from the later of its
 * submission and the end of the stream's previous batch until its host
 * function; nodes of one batch share that time equally.  (cuEventElapsedTime
 * would be finer, but it is a driver call, which a host function may not
 * make.)  Without times the perf models would never learn a CUDA kernel,
 * and the policies' done() would see zero. */
static void batch_times(struct cu_batch *cb) {
  uint64_t t1 = mz__now_ns(), t0 = atomic_load_explicit(&cb->cq->last_end, memory_order_relaxed);
  if (t0 < cb->t_submit) t0 = cb->t_submit;
  if (t0 > t1) t0 = t1;
  atomic_store_explicit(&cb->cq->last_end, t1, memory_order_relaxed);
  struct mz__batch *b = cb->b;
  for (unsigned i = 0; i < b->n; i++) {
    mz__exec_xd(b->execs[i])->t_start = t0 + (t1 - t0) * i / b->n;
    mz__exec_xd(b->execs[i])->t_end = t0 + (t1 - t0) * (i + 1) / b->n;
  }
}

static void CUDA_CB host_done(void *user) {
  struct cu_batch *cb = user;
  struct cu_dev *d = cb->d;
  pthread_mutex_lock(&d->lock);
  bool mine = cb->linked;
  if (mine) {
    cb->linked = false;
    if (cb->prev) cb->prev->next = cb->next;
    else d->inflight = cb->next;
    if (cb->next) cb->next->prev = cb->prev;
  }
  pthread_mutex_unlock(&d->lock);
  /* When the monitor has already failed the batch, it owns it. */
  if (mine) {
    cu_in_host_fn = true;
    batch_times(cb);
    batch_finish(cb, 0, NULL);
    cu_in_host_fn = false;
  }
}

/* Link a batch before its host function is enqueued (the function may run
 * before cuLaunchHostFunc returns). */
static void inflight_add(struct cu_dev *d, struct cu_batch *cb) {
  pthread_mutex_lock(&d->lock);
  cb->prev = NULL;
  cb->next = d->inflight;
  if (d->inflight) d->inflight->prev = cb;
  d->inflight = cb;
  cb->linked = true;
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
}

/* Check the device for a sticky error: any call returns it, and
 * cuStreamQuery neither blocks nor has side effects. */
static void monitor_probe(struct cu_dev *d) {
  struct mz_device *dev = d->dev;
  for (unsigned i = 0; i < dev->nqueues; i++) {
    struct cu_queue *cq = dev->queues[i].priv;
    if (!cq) continue;
    CUresult r = d->api->StreamQuery(cq->stream);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY && cu_sticky(r)) {
      cu_fail(d, r, "a kernel or copy");
      return;
    }
  }
}

/* Destroy the events left by release_exec in host functions.  Called with
 * d->lock held; drops it around the CUDA calls. */
static void graves_empty(struct cu_dev *d) {
  while (d->graves) {
    struct cu_grave *g = d->graves;
    d->graves = NULL;
    pthread_mutex_unlock(&d->lock);
    while (g) {
      struct cu_grave *n = g->next;
      d->api->EventDestroy(g->ev);
      free(g);
      g = n;
    }
    pthread_mutex_lock(&d->lock);
  }
}

static void *monitor_main(void *arg) {
  struct cu_dev *d = arg;
  cu_current(d);
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stop && !d->inflight && !d->graves) pthread_cond_wait(&d->cond, &d->lock);
    graves_empty(d);
    if (d->inflight && (atomic_load(&d->failed) || d->stop)) {
      /* Take every batch in flight: their host functions will not run. */
      struct cu_batch *list = d->inflight;
      d->inflight = NULL;
      for (struct cu_batch *c = list; c; c = c->next) c->linked = false;
      pthread_mutex_unlock(&d->lock);
      while (list) {
        struct cu_batch *n = list->next;
        batch_finish(list, MZ_EDEVICE, d->fail_msg[0] ? d->fail_msg : "cuda device stopped");
        list = n;
      }
      pthread_mutex_lock(&d->lock);
      continue;
    }
    if (d->stop) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += CU_MONITOR_NS;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&d->cond, &d->lock, &ts);
    if (d->inflight && !d->stop && !atomic_load(&d->failed)) {
      /* The last batch may complete and its queues be torn down while the
       * streams are queried: cuda_queue_fini waits for the probe to end. */
      d->probing = true;
      pthread_mutex_unlock(&d->lock);
      monitor_probe(d);
      pthread_mutex_lock(&d->lock);
      d->probing = false;
      pthread_cond_broadcast(&d->cond);
    }
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Discovery and teardown                                              */
/* ------------------------------------------------------------------ */

static void shared_unref(struct cu_shared *sh) {
  if (atomic_fetch_sub(&sh->refs, 1) != 1) return;
  /* The driver stays loaded: see mz__cuda_unload(). */
  free(sh);
}

/* The device's NUMA node, as the kernel reports it for its PCI function
 * (hwloc reads the same file; opening a topology with I/O devices here
 * would cost tens of milliseconds at every runtime creation). */
static int numa_of(const char *busid) {
  char path[128];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", busid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int node = -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node < 0 ? -1 : node;
}

static void cu_dev_free(struct cu_dev *d) {
  if (!d) return;
  if (d->monitor_started) {
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->monitor, NULL);
  }
  if (d->ctx) {
    cu_current(d);
    if (d->copy) d->api->StreamDestroy(d->copy);
    pthread_mutex_lock(&d->lock);
    graves_empty(d);
    pthread_mutex_unlock(&d->lock);
    pool_trim(d);
    d->api->CtxSetCurrent(NULL);
    d->api->DevicePrimaryCtxRelease(d->cudev);
  }
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->cond);
  pthread_mutex_destroy(&d->event_lock);
  pthread_mutex_destroy(&d->pool_lock);
  shared_unref(d->sh);
  free(d);
}

static void cuda_destroy(struct mz_device *dev) {
  cu_dev_free(cu_of(dev));
  dev->priv = NULL;
}

/* Parse "I" strictly: digits only. */
static bool parse_index(const char *s, int *out) {
  if (!s || !*s) return false;
  long v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p)) return false;
    v = v * 10 + (*p - '0');
    if (v > 1000000) return false;
  }
  *out = (int)v;
  return true;
}

/* No CUDA device is usable: 0 for "all" and "cuda", MZ_ENODEV for
 * "cuda:I".  The reason is recorded either way, so a caller that insists
 * on CUDA devices can say why there are none. */
static int no_devices(mz_runtime *rt, const struct mz__devsel *sel, const char *why) {
  if (sel->arg)
    return mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: no device 'cuda:%s': %s", sel->arg, why);
  mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: no CUDA device: %s", why);
  return 0;
}

static int cuda_discover(mz_runtime *rt, const struct mz__devtype *type,
                         const struct mz__devsel *sel) {
  char why[512], e[160];
  int want = -1;
  if (sel->arg && !parse_index(sel->arg, &want))
    return mz__set_error(rt, MZ_EINVAL, "MZ_DEVICES: 'cuda:%s': expected a device index", sel->arg);

  struct cu_shared *sh = calloc(1, sizeof *sh);
  if (!sh) return mz__set_error(rt, MZ_ENOMEM, "cuda: out of memory");
  struct mz__cuda_api *api = &sh->api;
  /* Discovery holds one reference until it returns; each device another. */
  atomic_init(&sh->refs, 1);
  if (mz__cuda_load(NULL, api, why, sizeof why) < 0) {
    free(sh);
    return no_devices(rt, sel, why);
  }
  /* From here on the driver stays loaded (see mz__cuda_unload). */
  CUresult r = api->Init(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = api->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    if (r != CUDA_SUCCESS)
      snprintf(why, sizeof why, "cuInit: %s", mz__cuda_strerror(api, r, e, sizeof e));
    else
      snprintf(why, sizeof why, "the CUDA driver reports no device");
    free(sh);
    return no_devices(rt, sel, why);
  }
  if (want >= count) {
    free(sh);
    return mz__set_error(rt, MZ_ENODEV, "MZ_DEVICES: no device 'cuda:%s' (%d CUDA device%s)",
                         sel->arg, count, count == 1 ? "" : "s");
  }
  api->DriverGetVersion(&sh->driver_version);
  /* The canned ops' libraries.  A missing one only makes its ops
   * unrunnable here; the reason is kept for the ops' error messages. */
  mz__cublas_load(&sh->blas, sh->blas_err, sizeof sh->blas_err);
  mz__cufft_load(&sh->fft, sh->fft_err, sizeof sh->fft_err);

  unsigned nq = sel->default_queues ? sel->default_queues : 4;
  int first = want >= 0 ? want : 0, last = want >= 0 ? want : count - 1;
  struct cu_dev *found[64];
  int nfound = 0, added = 0;
  for (int i = first; i <= last && nfound < 64; i++) {
    struct cu_dev *d = calloc(1, sizeof *d);
    if (!d) break;
    d->sh = sh;
    d->api = api;
    d->ordinal = i;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    pthread_mutex_init(&d->event_lock, NULL);
    pthread_mutex_init(&d->pool_lock, NULL);
    atomic_fetch_add(&sh->refs, 1);
    r = api->DeviceGet(&d->cudev, i);
    if (r == CUDA_SUCCESS) r = api->DevicePrimaryCtxRetain(&d->ctx, d->cudev);
    if (r != CUDA_SUCCESS) {
      /* A device we cannot open (another process owns it in exclusive
       * mode, for example) is skipped, not fatal. */
      mz__warn(rt, "cuda: device %d skipped: %s", i, mz__cuda_strerror(api, r, e, sizeof e));
      d->ctx = NULL;
      cu_dev_free(d);
      continue;
    }
    found[nfound++] = d;
  }
  if (nfound == 0) {
    shared_unref(sh);
    snprintf(why, sizeof why, "no CUDA device could be opened");
    return no_devices(rt, sel, why);
  }

  /* Peer access between every pair that allows it, so cuMemcpyPeerAsync
   * goes over NVLink or PCIe directly instead of through the host. */
  for (int a = 0; a < nfound; a++) {
    for (int b = 0; b < nfound; b++) {
      if (a == b || found[b]->ordinal >= 64) continue;
      int can = 0;
      if (api->DeviceCanAccessPeer(&can, found[a]->cudev, found[b]->cudev) != CUDA_SUCCESS || !can)
        continue;
      api->CtxSetCurrent(found[a]->ctx);
      r = api->CtxEnablePeerAccess(found[b]->ctx, 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        found[a]->peers |= (uint64_t)1 << found[b]->ordinal;
    }
  }

  for (int k = 0; k < nfound; k++) {
    struct cu_dev *d = found[k];
    struct mz_device *dev = mz__device_add(rt, type, nq, d);
    if (!dev) {
      for (int j = k; j < nfound; j++) cu_dev_free(found[j]);
      nfound = k;
      break;
    }
    d->dev = dev;
    mz_device_info *info = &dev->info;
    api->DeviceGetName(dev->name_buf, (int)sizeof dev->name_buf, d->cudev);
    snprintf(dev->vendor_buf, sizeof dev->vendor_buf, "NVIDIA");
    snprintf(dev->version_buf, sizeof dev->version_buf, "CUDA driver %d.%d",
             sh->driver_version / 1000, sh->driver_version % 1000 / 10);
    info->name = dev->name_buf;
    info->vendor = dev->vendor_buf;
    info->version = dev->version_buf;
    size_t mem = 0;
    api->DeviceTotalMem(&mem, d->cudev);
    info->memory = mem;
    int v = 0;
    api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->cudev);
    info->compute_units = (unsigned)v;
    api->DeviceGetAttribute(&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cudev);
    api->DeviceGetAttribute(&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cudev);
    v = 0;
    api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_INTEGRATED, d->cudev);
    info->unified_memory = v != 0;
    v = 0;
    api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d->cudev);
    info->max_work_group = v > 0 ? (size_t)v : 0;
    v = 0;
    api->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, d->cudev);
    info->local_memory = v > 0 ? (uint64_t)v : 0;
    info->max_alloc = mem; /* one cuMemAlloc may take all of the device's memory */
    /* Managed memory only where the host may touch it while kernels run
     * (concurrent managed access: Linux, Pascal and later); elsewhere a
     * host stage beside a running kernel would fault. */
    int mm = 0, cma = 0;
    api->DeviceGetAttribute(&mm, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, d->cudev);
    api->DeviceGetAttribute(&cma, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, d->cudev);
    d->managed = mm && cma;
    info->fp64 = true;     /* every CUDA device since compute capability 1.3 */
    char bus[64] = "";
    unsigned dom = 0, b = 0, s = 0, f = 0;
    info->numa_node = -1;
    if (api->DeviceGetPCIBusId(bus, (int)sizeof bus, d->cudev) == CUDA_SUCCESS &&
        sscanf(bus, "%x:%x:%x.%x", &dom, &b, &s, &f) == 4) {
      /* The driver may print an 8-digit domain in upper case; sysfs and
       * hwloc spell it "0000:17:00.0". */
      snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%04x:%02x:%02x.%x", dom & 0xffff,
               b & 0xff, s & 0x1f, f & 0x7);
      info->numa_node = numa_of(info->pci_bus_id);
    }
    dev->kernels = true;
    added++;
  }
  shared_unref(sh);
  if (added == 0) return mz__set_error(rt, MZ_ENOMEM, "cuda: out of memory");
  /* Monitors start once the devices exist; each sleeps until a batch is in
   * flight. */
  for (int k = 0; k < added; k++) {
    struct cu_dev *d = found[k];
    if (pthread_create(&d->monitor, NULL, monitor_main, d) == 0) {
      d->monitor_started = true;
      mz__thread_name(d->monitor, "cuda-mon");
    } else {
      mz__warn(rt, "cuda: device %d: cannot start its monitor thread; a kernel fault will not be "
                   "noticed until the next call", d->ordinal);
    }
  }
  return added;
}

/* ------------------------------------------------------------------ */
/* Queues                                                              */
/* ------------------------------------------------------------------ */

static int cuda_queue_init(struct mz__queue *q) {
  struct cu_dev *d = cu_of(q->dev);
  struct cu_queue *cq = calloc(1, sizeof *cq);
  if (!cq) return MZ_ENOMEM;
  cu_current(d);
  /* Non-blocking: our streams never synchronize implicitly with the legacy
   * default stream, which the synchronous mem_read/mem_write use; the core
   * orders those explicitly. */
  CUresult r = d->api->StreamCreate(&cq->stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    free(cq);
    char e[160];
    return mz__set_error(q->dev->rt, cu_code(r), "cuda device %d: cuStreamCreate: %s", d->ordinal,
                         mz__cuda_strerror(d->api, r, e, sizeof e));
  }
  q->priv = cq;
  /* The copy engine's stream, with the first queue. */
  const char *ce = getenv("MZ_COPY_ENGINE");
  if (q->local == 0 && !d->copy && !(ce && ce[0] == '0' && !ce[1])) {
    r = d->api->StreamCreate(&d->copy, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
      d->copy = NULL;
      mz__warn(q->dev->rt, "cuda device %d: no copy stream: copies run on the nodes' streams", d->ordinal);
    }
    q->dev->copy_engine = d->copy != NULL;
  }
  return MZ_OK;
}

static void cuda_queue_fini(struct mz__queue *q) {
  struct cu_dev *d = cu_of(q->dev);
  /* Not while the monitor queries this queue's stream (monitor_probe). */
  pthread_mutex_lock(&d->lock);
  while (d->probing) pthread_cond_wait(&d->cond, &d->lock);
  struct cu_queue *cq = q->priv;
  q->priv = NULL;
  pthread_mutex_unlock(&d->lock);
  if (!cq) return;
  cu_current(d);
#if MZ_HAVE_CUBLAS
  /* cublasDestroy synchronizes with the handle's work, then frees it. */
  if (cq->blas) d->sh->blas.Destroy(cq->blas);
#endif
  d->api->StreamDestroy(cq->stream);
  free(cq);
}

/* ------------------------------------------------------------------ */
/* Kernels                                                             */
/* ------------------------------------------------------------------ */

static bool cuda_can_run(const struct mz_device *dev, const mz_kernel *k) {
  const mz_kernel_spec *spec = mz__kernel_spec(k);
  if (spec && spec->cuda.format == MZ__CODE_NATIVE)
    return native_loaded(cu_of(dev), spec->cuda.data) && !atomic_load(&cu_of(dev)->failed);
  return spec && (spec->cuda.format == MZ_CODE_PTX || spec->cuda.format == MZ_CODE_CUBIN) &&
         !atomic_load(&cu_of(dev)->failed);
}

static int cuda_prepare(struct mz_device *dev, const mz_kernel *k, void **kdev, char **log) {
  struct cu_dev *d = cu_of(dev);
  const mz_kernel_spec *spec = mz__kernel_spec(k);
  const mz_code_spec *cs = &spec->cuda;
  const char *what = cs->format == MZ_CODE_PTX ? "PTX" : "cubin";
  *kdev = NULL;
  if (cs->format == MZ__CODE_NATIVE) { /* a library call: nothing to build */
    const struct mz__cu_native *nat = cs->data;
    if (!native_loaded(d, nat)) {
      *log = cu_msg("kernel '%s' needs %s, which is not loaded", mz_kernel_name(k), nat ? nat->library : "?");
      return MZ_ENOTSUP;
    }
    struct cu_kernel *ck = calloc(1, sizeof *ck);
    if (!ck) return MZ_ENOMEM;
    ck->native = nat;
    *kdev = ck;
    return MZ_OK;
  }
  if (cs->format != MZ_CODE_PTX && cs->format != MZ_CODE_CUBIN) {
    *log = cu_msg("kernel '%s' has no CUDA implementation", mz_kernel_name(k));
    return MZ_ENOTSUP;
  }
  char *data = NULL, *err = NULL;
  size_t size = 0;
  int rc = mz__code_load(cs, &data, &size, &err);
  if (rc < 0) {
    *log = err ? err : cu_msg("kernel '%s': cannot read its %s", mz_kernel_name(k), what);
    return rc;
  }
  /* The JIT writes its diagnostics into these buffers; their sizes go in
   * and come back as the lengths written. */
  char errlog[16384] = "", infolog[4096] = "";
  CUjit_option opt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                        CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *val[] = {errlog, (void *)(uintptr_t)sizeof errlog, infolog, (void *)(uintptr_t)sizeof infolog};
  cu_current(d);
  struct cu_kernel *ck = calloc(1, sizeof *ck);
  if (!ck) {
    free(data);
    return MZ_ENOMEM;
  }
  CUresult r = d->api->ModuleLoadDataEx(&ck->module, data, 4, opt, val);
  free(data);
  char e[160];
  if (r != CUDA_SUCCESS) {
    cu_check(d, r, "cuModuleLoadDataEx");
    *log = cu_msg("cuda device %d: loading the %s of kernel '%s' failed: %s%s%s", d->ordinal, what,
                  mz_kernel_name(k), mz__cuda_strerror(d->api, r, e, sizeof e),
                  errlog[0] ? "\n" : "", errlog);
    free(ck);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? MZ_ENOMEM : MZ_EBUILD;
  }
  const char *entry = cs->entry ? cs->entry : mz_kernel_name(k);
  r = d->api->ModuleGetFunction(&ck->fn, ck->module, entry);
  if (r != CUDA_SUCCESS) {
    *log = cu_msg("cuda device %d: no function '%s' in the %s of kernel '%s': %s", d->ordinal, entry,
                  what, mz_kernel_name(k), mz__cuda_strerror(d->api, r, e, sizeof e));
    d->api->ModuleUnload(ck->module);
    free(ck);
    return MZ_EBUILD;
  }
  *kdev = ck;
  return MZ_OK;
}

static void cuda_unprepare(struct mz_device *dev, void *kdev) {
  struct cu_kernel *ck = kdev;
  if (!ck) return;
  struct cu_dev *d = cu_of(dev);
  cu_current(d);
  if (ck->native) {
    struct mz__cu_env env = cu_env(d, NULL);
    if (ck->native->state_free) ck->native->state_free(&env, ck->state);
  } else {
    d->api->ModuleUnload(ck->module);
  }
  free(ck);
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

/* A handle is the CUdeviceptr itself.  cuMemAlloc never returns 0, so a
 * NULL handle still means "none". */
static CUdeviceptr dptr_of(const void *mem) { return (CUdeviceptr)(uintptr_t)mem; }

static int cuda_mem_alloc(struct mz_device *dev, size_t bytes, void **mem) {
  struct cu_dev *d = cu_of(dev);
  if (atomic_load(&d->failed)) return MZ_EDEVICE;
  cu_current(d);
  CUdeviceptr p = 0;
  /* cuMemAlloc refuses 0 bytes; an empty buffer still needs a handle. */
  CUresult r = d->api->MemAlloc(&p, bytes ? bytes : 1);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return MZ_ENOMEM; /* the core evicts and retries */
  if (r != CUDA_SUCCESS) {
    cu_check(d, r, "cuMemAlloc");
    return cu_code(r);
  }
  *mem = (void *)(uintptr_t)p;
  return MZ_OK;
}

/* Whether p is in managed memory (a buffer's shared host copy). */
static bool is_managed(struct cu_dev *d, const void *p) {
  unsigned v = 0;
  return d->api->PointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)(uintptr_t)p) ==
             CUDA_SUCCESS && v;
}

/* MZ_BUFFER_MANAGED: managed memory, attached to every stream (the host
 * and any device may use it; coherent once the work that wrote it is
 * done).  The handle is unused: host_free knows managed memory by its
 * address. */
static int cuda_shared_alloc(struct mz_device *dev, size_t bytes, void **host, void **handle) {
  struct cu_dev *d = cu_of(dev);
  if (!d->managed || !bytes || atomic_load(&d->failed)) return MZ_ENOTSUP;
  cu_current(d);
  CUdeviceptr p = 0;
  CUresult r = d->api->MemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
  if (r != CUDA_SUCCESS) return r == CUDA_ERROR_OUT_OF_MEMORY ? MZ_ENOMEM : MZ_ENOTSUP;
  *host = (void *)(uintptr_t)p;
  *handle = NULL;
  return MZ_OK;
}

static void cuda_host_free(struct mz_device *dev, void *host, void *handle) {
  struct cu_dev *d = cu_of(dev);
  cu_current(d);
  /* cuMemFree waits for work using the memory; after a sticky error it
   * fails, and the memory goes with the context. */
  d->api->MemFree((CUdeviceptr)(uintptr_t)host);
}

/* A zero-copy buffer in managed memory is used in place: its device
 * address is its host address.  Any other memory is copied as usual. */
static int cuda_mem_wrap(struct mz_device *dev, void *host, size_t bytes, void **mem) {
  struct cu_dev *d = cu_of(dev);
  if (!d->managed || !bytes || atomic_load(&d->failed)) return MZ_ENOTSUP;
  cu_current(d);
  if (!is_managed(d, host)) return MZ_ENOTSUP;
  *mem = host;
  return MZ_OK;
}

/* Nothing to do: with concurrent managed access the host sees what a
 * finished kernel wrote, and a kernel sees what the host wrote before its
 * launch (the core calls this only while no command uses the buffer). */
static int cuda_mem_sync(struct mz_device *dev, void *mem, size_t bytes, bool to_host) {
  return atomic_load(&cu_of(dev)->failed) ? MZ_EDEVICE : MZ_OK;
}

static void cuda_mem_free(struct mz_device *dev, void *mem) {
  if (!mem) return;
  struct cu_dev *d = cu_of(dev);
  cu_current(d);
  /* A wrapped copy is the buffer's own managed host memory, freed with
   * the buffer (host_free), never here. */
  if (d->managed && is_managed(d, mem)) return;
  /* After a sticky error this fails too; the memory goes with the context. */
  d->api->MemFree(dptr_of(mem));
}

static int cuda_mem_read(struct mz_device *dev, void *mem, void *host, size_t bytes) {
  struct cu_dev *d = cu_of(dev);
  if (atomic_load(&d->failed)) return MZ_EDEVICE;
  if (!bytes) return MZ_OK;
  cu_current(d);
  /* To pageable memory, cuMemcpyDtoH returns once the data is there. */
  CUresult r = d->api->MemcpyDtoH(host, dptr_of(mem), bytes);
  if (r != CUDA_SUCCESS) return cu_check(d, r, "cuMemcpyDtoH"), cu_code(r);
  return MZ_OK;
}

static int cuda_mem_write(struct mz_device *dev, void *mem, const void *host, size_t bytes) {
  struct cu_dev *d = cu_of(dev);
  if (atomic_load(&d->failed)) return MZ_EDEVICE;
  if (!bytes) return MZ_OK;
  cu_current(d);
  /* From pageable memory, cuMemcpyHtoD may return once the data is staged,
   * before it reaches the device; our streams do not synchronize with the
   * legacy stream the copy went to, so wait for it here. */
  CUresult r = d->api->MemcpyHtoD(dptr_of(mem), host, bytes);
  if (r == CUDA_SUCCESS) r = d->api->StreamSynchronize(NULL);
  if (r != CUDA_SUCCESS) return cu_check(d, r, "cuMemcpyHtoD"), cu_code(r);
  return MZ_OK;
}

static bool cuda_can_wait(const struct mz__queue *q, const struct mz__queue *p) {
  /* Events work across streams, contexts and devices of one driver. */
  return q->dev->type == p->dev->type && q->dev->ops == &cuda_ops && !atomic_load(&cu_of(p->dev)->failed);
}

static bool cuda_can_copy_peer(const struct mz_device *dst, const struct mz_device *src) {
  if (dst->ops != &cuda_ops || src->ops != &cuda_ops) return false;
  const struct cu_dev *a = cu_of(dst), *b = cu_of(src);
  if (a == b) return true;
  return b->ordinal < 64 && (a->peers >> b->ordinal & 1) && (b->peers >> a->ordinal & 1);
}

/* ------------------------------------------------------------------ */
/* Submission                                                          */
/* ------------------------------------------------------------------ */

/* The event that marks w done, recorded on w's stream the first time
 * anyone waits for w.  Runs on the waiter's submission thread, which may
 * belong to another device: the event is made in w's context (cuEventRecord
 * wants the event and the stream in one context) and the waiter's context
 * is made current again afterwards. */
static CUresult waited_event(struct cu_dev *cur, struct mz__exec *w, CUevent *out) {
  struct mz__queue *wQ = mz__exec_queue(w);
  struct cu_dev *wd = cu_of(wQ->dev);
  struct cu_queue *wq = wQ->priv;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&wd->event_lock);
  if (!mz__exec_xd(w)->event) {
    if (wd != cur) cu_current(wd);
    CUevent ev = NULL;
    r = wd->api->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) {
      r = wd->api->EventRecord(ev, wq->stream);
      if (r != CUDA_SUCCESS) wd->api->EventDestroy(ev);
      else mz__exec_xd(w)->event = ev;
    }
    if (wd != cur) cu_current(cur);
    /* A sticky error here is the waited device's, not the waiter's. */
    cu_check(wd, r, "cuEventRecord");
  }
  *out = mz__exec_xd(w)->event;
  pthread_mutex_unlock(&wd->event_lock);
  return r;
}

/* ceil(g / bl) for bl >= 1, without a division for the power-of-two
 * block sizes that are the rule (and without the overflow of g + bl - 1). */
static inline size_t blocks_of(size_t g, size_t bl) {
  if (!(bl & (bl - 1))) return (g >> __builtin_ctzll((unsigned long long)bl)) + ((g & (bl - 1)) != 0);
  return g / bl + (g % bl != 0);
}

/* Default block shapes: 256 threads, spread over the dimensions used. */
static void launch_dims(const mz_launch *l, unsigned grid[3], unsigned block[3]) {
  static const unsigned dflt[3][3] = {{256, 1, 1}, {16, 16, 1}, {8, 8, 4}};
  if (l->ndim == 1 && !l->local[0]) {
    /* The common case, as the loop below computes it: 256 threads, fewer
     * for a tiny launch. */
    size_t g = l->global[0];
    size_t n = (g >> 8) + ((g & 255) != 0);
    block[0] = g && g < 256 ? (unsigned)g : 256;
    grid[0] = n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
    block[1] = block[2] = grid[1] = grid[2] = 1;
    return;
  }
  unsigned nd = l->ndim >= 1 && l->ndim <= 3 ? l->ndim : 1;
  for (unsigned i = 0; i < 3; i++) {
    size_t g = i < nd ? l->global[i] : 1;
    size_t bl = i < nd && l->local[i] ? l->local[i] : dflt[nd - 1][i];
    if (bl > g && g > 0 && !(i < nd && l->local[i])) bl = g; /* a tiny launch needs no idle threads */
    size_t n = g ? blocks_of(g, bl) : 0;
    block[i] = bl > UINT32_MAX ? UINT32_MAX : (unsigned)bl;
    grid[i] = n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
  }
}

/* Make stream ws wait for e's waits on other streams.  Returns 0, or 1
 * when it cannot: then either *sticky is the sticky error to return from
 * submission, or the exec has failed (its status and message set). */
static int wait_preds(struct cu_dev *d, struct mz__queue *q, struct mz__exec *e, CUstream ws, CUresult *sticky) {
  const struct mz__cuda_api *api = d->api;
  char ebuf[160];
  *sticky = CUDA_SUCCESS;
  for (unsigned i = 0; i < mz__exec_nwait(e); i++) {
    struct mz__exec *w = mz__exec_xd(e)->waits[i];
    struct mz__queue *wQ = w ? mz__exec_queue(w) : NULL;
    if (!w || wQ == q) continue; /* the stream orders its own work */
    if (wQ->dev->ops != &cuda_ops) {
      cu_exec_fail(e, MZ_EINVAL, cu_msg("cuda: cannot wait on the device for a %s node",
                                        wQ->dev->type->name));
      return 1;
    }
    CUevent ev;
    CUresult r = waited_event(d, w, &ev);
    bool theirs = r != CUDA_SUCCESS && cu_of(wQ->dev) != d;
    if (r == CUDA_SUCCESS) r = api->StreamWaitEvent(ws, ev, 0);
    if (r != CUDA_SUCCESS) {
      if (cu_sticky(r) && !theirs) {
        *sticky = r;
        return 1;
      }
      cu_exec_fail(e, cu_code(r), cu_msg("cuda: waiting for a node on another stream: %s",
                                         mz__cuda_strerror(api, r, ebuf, sizeof ebuf)));
      return 1;
    }
  }
  return 0;
}

/* Enqueue one exec's waits, transfers and kernel on the stream.  A
 * problem with this exec alone is recorded in its status and the batch
 * goes on; the return value is a sticky error, after which nothing more
 * can be enqueued. */
static CUresult submit_exec(struct cu_dev *d, struct mz__queue *q, struct cu_batch *cb,
                            struct mz__exec *e) {
  const struct mz__cuda_api *api = d->api;
  CUstream st = ((struct cu_queue *)q->priv)->stream;
  char ebuf[160];
  CUresult r;
  /* With copies to make and a copy engine, the waits and the copies go on
   * its stream, and the node's stream waits for them (below). */
  bool ce = d->copy && mz__exec_nxfer(e);
  CUstream xs = ce ? d->copy : st;
  /* On the copy stream, copies from host memory go first and wait for
   * nothing (a valid host copy was written by nodes that have finished,
   * and the destination is a copy no queued node reads); the waits go
   * before the copies from other devices, which read what the waited
   * nodes wrote, or on the node's own stream when there are none, so a
   * node whose predecessors are late holds back the copy stream only when
   * it reads their output. */
  unsigned npeer = 0;
  for (unsigned i = 0; ce && i < mz__exec_nxfer(e); i++) npeer += mz__exec_xd(e)->xfers[i].src_host == NULL;
  bool split = ce && npeer;
  CUresult sr = CUDA_SUCCESS;
  /* Most nodes wait only for nodes on their own stream, which orders them:
   * then there is nothing for wait_preds to do. */
  bool other = false;
  for (unsigned i = 0; i < mz__exec_nwait(e) && !other; i++) other = mz__exec_xd(e)->waits[i] && mz__exec_queue(mz__exec_xd(e)->waits[i]) != q;
  if (!split && other && wait_preds(d, q, e, st, &sr)) return sr;

  r = CUDA_SUCCESS;
  int xfail = 0;
  bool wfail = false;
  char *xmsg = NULL;
  for (unsigned pass = 0; pass < (split ? 2u : 1u) && r == CUDA_SUCCESS && !xfail && !wfail; pass++) {
    if (split && pass == 1 && other && wait_preds(d, q, e, xs, &sr)) {
      if (sr != CUDA_SUCCESS) return sr;
      wfail = true; /* the node failed; its stream still waits for the copies made */
      break;
    }
    for (unsigned i = 0; i < mz__exec_nxfer(e) && r == CUDA_SUCCESS && !xfail; i++) {
      const struct mz__xfer *x = &mz__exec_xd(e)->xfers[i];
      CUdeviceptr dst = dptr_of(x->dst);
      const char *what;
      if (x->bytes == 0) continue;
      if (split && (pass == 0) != (x->src_host != NULL)) continue;
      if (x->src_host) {
        what = "cuMemcpyHtoDAsync";
        const void *src = x->src_host;
        CUmemorytype mt = 0;
        bool pinned = api->PointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               (CUdeviceptr)(uintptr_t)src) == CUDA_SUCCESS &&
                      mt == CU_MEMORYTYPE_HOST;
        if (!pinned) {
          /* The host copy is final now (its producers finished before this
           * node was submitted), so snapshot it into pinned memory.  Without
           * room, copy from pageable memory: correct, but the driver may
           * stall this thread. */
          void *s = stage(d, cb, x->bytes);
          if (s) {
            memcpy(s, src, x->bytes);
            src = s;
          }
        }
        r = api->MemcpyHtoDAsync(dst, src, x->bytes, xs);
      } else if (x->src_dev && x->src_dev->ops == &cuda_ops) {
        struct cu_dev *sd = cu_of(x->src_dev);
        if (sd == d) {
          what = "cuMemcpyDtoDAsync";
          r = api->MemcpyDtoDAsync(dst, dptr_of(x->src), x->bytes, xs);
        } else {
          what = "cuMemcpyPeerAsync";
          r = api->MemcpyPeerAsync(dst, d->ctx, dptr_of(x->src), sd->ctx, x->bytes, xs);
        }
      } else {
        xfail = MZ_EINVAL;
        xmsg = cu_msg("cuda: a transfer with no source the CUDA device can read");
        break;
      }
      if (r != CUDA_SUCCESS && !cu_sticky(r)) {
        xfail = cu_code(r);
        xmsg = cu_msg("cuda device %d: %s of %zu bytes: %s", d->ordinal, what, x->bytes,
                      mz__cuda_strerror(api, r, ebuf, sizeof ebuf));
        r = CUDA_SUCCESS;
      }
    }
  }
  if (r != CUDA_SUCCESS) return r; /* sticky */
  if (ce) {
    /* The node's stream waits for the copies, also for those made before
     * one failed: nothing after the node may run while they write.  The
     * event may go at once: the wait holds what it needs (cuEventDestroy
     * on a pending record). */
    CUevent done = NULL;
    r = api->EventCreate(&done, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) {
      r = api->EventRecord(done, xs);
      if (r == CUDA_SUCCESS) r = api->StreamWaitEvent(st, done, 0);
      api->EventDestroy(done);
    }
    if (r != CUDA_SUCCESS) {
      free(xmsg);
      if (cu_sticky(r)) return r;
      cu_exec_fail(e, cu_code(r), cu_msg("cuda device %d: ordering a node after its copies: %s", d->ordinal,
                                         mz__cuda_strerror(api, r, ebuf, sizeof ebuf)));
      return CUDA_SUCCESS;
    }
  }
  if (wfail) return CUDA_SUCCESS;
  if (xfail) {
    cu_exec_fail(e, xfail, xmsg);
    return CUDA_SUCCESS;
  }

  /* Host work (host nodes, partition bookkeeping) has no kernel: on a
   * device it is only its transfers. */
  const struct cu_kernel *ck = mz__exec_xd(e)->kernel_dev;
  if (!mz__exec_kernel(e)) return CUDA_SUCCESS;
  if (!ck) {
    cu_exec_fail(e, MZ_EBUILD, cu_msg("cuda: kernel '%s' was not prepared", mz_kernel_name(mz__exec_kernel(e))));
    return CUDA_SUCCESS;
  }
  if (ck->native) {
    /* A canned op: its library enqueues on the stream (ops/native.h).  A
     * sticky error in there shows at the next call or to the monitor. */
    struct mz__cu_env env = cu_env(d, q->priv);
    char *why = NULL;
    int rc = ck->native->enqueue(&env, &((struct cu_kernel *)ck)->state, mz__exec_xd(e)->args, mz__exec_nargs(e), &why);
    if (rc < 0)
      cu_exec_fail(e, rc, cu_msg("cuda device %d: %s (%s): %s", d->ordinal, mz_kernel_name(mz__exec_kernel(e)),
                                 ck->native->library, why ? why : "failed"));
    free(why);
    return CUDA_SUCCESS;
  }
  unsigned grid[3], block[3];
  launch_dims(mz__exec_launch(e), grid, block);
  if (!grid[0] || !grid[1] || !grid[2]) return CUDA_SUCCESS; /* nothing to compute */

  /* cuLaunchKernel copies the argument values before it returns, so the
   * storage may be this frame's.  A scalar's value starts at the union's
   * address, whatever its type. */
  void *pstack[CU_STACK_ARGS];
  CUdeviceptr dstack[CU_STACK_ARGS];
  void **params = pstack;
  CUdeviceptr *ptrs = dstack;
  if (mz__exec_nargs(e) > CU_STACK_ARGS) {
    params = malloc(mz__exec_nargs(e) * sizeof *params);
    ptrs = malloc(mz__exec_nargs(e) * sizeof *ptrs);
    if (!params || !ptrs) {
      free(params);
      free(ptrs);
      cu_exec_fail(e, MZ_ENOMEM, NULL);
      return CUDA_SUCCESS;
    }
  }
  for (unsigned i = 0; i < mz__exec_nargs(e); i++) {
    struct mz__xarg *a = &mz__exec_xd(e)->args[i];
    if (a->is_buffer) {
      ptrs[i] = dptr_of(a->mem);
      params[i] = &ptrs[i];
    } else {
      params[i] = &a->value;
    }
  }
  r = api->LaunchKernel(ck->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, st,
                        params, NULL);
  if (params != pstack) {
    free(params);
    free(ptrs);
  }
  if (r != CUDA_SUCCESS) {
    if (cu_sticky(r)) return r;
    cu_exec_fail(e, r == CUDA_ERROR_OUT_OF_MEMORY ? MZ_ENOMEM : MZ_EKERNEL,
                 cu_msg("cuda device %d: cuLaunchKernel of '%s' (grid %ux%ux%u, block %ux%ux%u): %s",
                        d->ordinal, mz_kernel_name(mz__exec_kernel(e)), grid[0], grid[1], grid[2], block[0],
                        block[1], block[2], mz__cuda_strerror(api, r, ebuf, sizeof ebuf)));
  }
  return CUDA_SUCCESS;
}

static int cuda_submit(struct mz__queue *q, struct mz__batch *b) {
  struct cu_dev *d = cu_of(q->dev);
  if (atomic_load(&d->failed)) return MZ_EDEVICE;
  struct cu_batch *cb = calloc(1, sizeof *cb);
  if (!cb) return MZ_ENOMEM;
  cb->d = d;
  cb->b = b;
  cb->cq = q->priv;
  cb->t_submit = mz__now_ns();
  b->priv = cb;
  cu_current(d);
  CUresult r = CUDA_SUCCESS;
  unsigned i;
  for (i = 0; i < b->n; i++) {
    r = submit_exec(d, q, cb, b->execs[i]);
    if (r != CUDA_SUCCESS) break;
    /* A node that another stream (or a later batch) waits for gets its
     * event now, right behind its own command: recorded when the waiter
     * is submitted, it would mark the end of whatever this stream holds
     * then, the rest of this batch included, and the waiter would wait for
     * all of it.  The batch's last node keeps the lazy record (nothing of
     * the batch is behind it).  A failure here leaves the lazy record to
     * try again (a sticky one fails the next call on the stream). */
    if (i + 1 < b->n && mz__exec_waited_apart(b->execs[i], b->execs[i + 1])) {
      CUevent ev;
      (void)waited_event(d, b->execs[i], &ev);
    }
  }
  if (r != CUDA_SUCCESS && i == 0) {
    /* Nothing reached the stream: the core fails the batch. */
    cu_fail(d, r, "submission");
    pool_put(d, cb->chunks);
    b->priv = NULL;
    free(cb);
    return MZ_EDEVICE;
  }
  /* Link before enqueuing the host function, which may run at once. */
  inflight_add(d, cb);
  if (r == CUDA_SUCCESS) {
    r = d->api->LaunchHostFunc(((struct cu_queue *)q->priv)->stream, host_done, cb);
    if (r == CUDA_SUCCESS) return MZ_OK;
  }
  /* Part of the batch is on the stream but its completion cannot be
   * arranged: the device is beyond use.  The monitor completes the batch
   * (with the others in flight), so the core must not. */
  cu_fail(d, r, r == CUDA_SUCCESS ? "submission" : "cuLaunchHostFunc");
  return MZ_OK;
}

static void cuda_release_exec(struct mz__exec *e) {
  if (!mz__exec_xd(e)->event) return;
  struct cu_dev *d = cu_of(mz__exec_queue(e)->dev);
  if (cu_in_host_fn) {
    struct cu_grave *g = malloc(sizeof *g);
    if (!g) return; /* an event leaks rather than a forbidden call */
    g->ev = (CUevent)mz__exec_xd(e)->event;
    mz__exec_xd(e)->event = NULL;
    pthread_mutex_lock(&d->lock);
    g->next = d->graves;
    d->graves = g;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    return;
  }
  cu_current(d);
  d->api->EventDestroy((CUevent)mz__exec_xd(e)->event);
  mz__exec_xd(e)->event = NULL;
}

static const struct mz__device_ops cuda_ops = {
    .inline_submit = false,
    .host_memory = false,
    .destroy = cuda_destroy,
    .can_run = cuda_can_run,
    .prepare = cuda_prepare,
    .unprepare = cuda_unprepare,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_read = cuda_mem_read,
    .mem_write = cuda_mem_write,
    .mem_wrap = cuda_mem_wrap,
    .mem_sync = cuda_mem_sync,
    .host_free = cuda_host_free,
    .shared_alloc = cuda_shared_alloc,
    .can_wait = cuda_can_wait,
    .can_copy_peer = cuda_can_copy_peer,
    .submit = cuda_submit,
    .release_exec = cuda_release_exec,
    .queue_init = cuda_queue_init,
    .queue_fini = cuda_queue_fini,
};

const struct mz__devtype mz__devtype_cuda = {
    .name = "cuda",
    .kind = MZ_DEVICE_CUDA,
    .ops = &cuda_ops,
    .discover = cuda_discover,
};
