/* The CUDA driver emulator (a test double; see mzemu.h for what it does
 * and why).
 *
 * A driver is process-wide, so the emulator is too: all of its state is in
 * the one object G, guarded by G.lock.  Stream threads take the lock to
 * pop work and drop it while they copy bytes, run a kernel or call a host
 * function.  Handles are not pointers: each is a never-reused number with
 * its kind in the low bits, looked up in G's table, so a handle used after
 * its object was destroyed is recognised rather than read from freed
 * memory. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/cuda/cuda_loader.h"
#include "mzemu.h"

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif
#endif

#define EXPORT __attribute__((visibility("default")))

#define MAXDEV 16
#define MAXINJ 32
#define MAXKERN 128
#define MAXPARAMS 64
/* One fake address range per device, far from any host mapping. */
#define DEV_SPAN ((CUdeviceptr)1 << 44)
#define DEV_BASE(i) (((CUdeviceptr)(i) + 1) * DEV_SPAN)
#define ALLOC_ALIGN 256
#define ALLOC_GAP 4096 /* unmapped bytes between allocations: an overrun is no neighbour's */

enum hkind { H_CTX = 1, H_STREAM, H_EVENT, H_MODULE, H_FUNC };
static const char *const hkind_name[] = {"?", "context", "stream", "event", "module", "function"};

/* Every entry point, for call counts and injected failures. */
enum sym {
#define EMU_SYM(field, symbol) SYM_##field,
  MZ_CUDA_API_MAP(EMU_SYM)
#undef EMU_SYM
      NSYM
};
static const char *const sym_name[] = {
#define EMU_SYMNAME(field, symbol) #symbol,
    MZ_CUDA_API_MAP(EMU_SYMNAME)
#undef EMU_SYMNAME
};

struct ctx;

struct hobj {
  enum hkind kind;
  uintptr_t handle;
  struct ctx *ctx;
};

struct alloc {
  CUdeviceptr base;
  size_t size;
  char *host;
  bool freed;
};

struct dev {
  size_t memory, used;
  CUdeviceptr next;
  struct alloc *allocs; /* sorted by base: addresses only grow */
  size_t nalloc, cap;
  struct ctx *ctx;      /* the primary context (kept across resets) */
};

struct ctx {
  struct hobj h;
  int dev;
  int refs;             /* 0: inactive (released) */
  CUresult sticky;
  uint64_t peers;       /* bit d: peer access to device d enabled */
  unsigned threads;     /* stream threads still running */
};

/* Pinned host memory, and managed memory (cuMemAllocManaged: host memory
 * whose address is also its device address, counted as an allocation). */
struct pinned {
  char *p;
  size_t size;
  struct ctx *ctx;
  bool managed;
};

struct func {
  struct hobj h;
  struct module *mod;
  char name[128];
  mzemu_kernel_fn fn;
  bool traps;
  unsigned nparams;
  unsigned psize[MAXPARAMS];
};

struct module {
  struct hobj h;
  struct func **funcs;
  unsigned nfuncs;
};

struct event {
  struct hobj h;
  unsigned long long recorded, done;
  unsigned refs;        /* the handle and each pending op */
};

enum opkind { OP_COPY, OP_KERNEL, OP_HOSTFN, OP_RECORD, OP_WAIT };
enum copykind { C_HTOD, C_DTOH, C_DTOD, C_PEER };

struct op {
  struct op *next;
  enum opkind kind;
  CUresult fault;                /* an injected fault raised when reached */
  /* copies */
  enum copykind ck;
  CUdeviceptr dst_d, src_d;
  void *dst_h;
  const void *src_h;
  size_t bytes;
  void *snapshot;                /* a pageable source, captured at the call */
  uint64_t src_hash;             /* a pinned source's bytes at the call */
  /* kernels */
  struct func *fn;
  unsigned grid[3], block[3];
  void *params[MAXPARAMS];
  char *pblob;
  /* host functions */
  CUhostFn hfn;
  void *user;
  /* events */
  struct event *ev;
  unsigned long long seq;
};

struct stream {
  struct hobj h;
  bool blocking;
  bool destroyed;
  struct op *head, *tail;        /* head is the op being performed */
  pthread_cond_t work;
  pthread_t thread;
  struct stream *sprev, *snext;  /* G.streams: every stream whose thread runs */
};

struct config {
  int ndev;
  size_t memory;
  int cc_major, cc_minor, sms;
  bool managed; /* managed memory with concurrent access (default 1) */
  bool peer[MAXDEV][MAXDEV];
  bool strict;
  unsigned hostfn_delay_us;
  struct inject {
    int sym;
    unsigned long long k;
    CUresult code;
  } inj[MAXINJ];
  unsigned ninj;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;        /* an op finished, an event completed, a context broke */
  bool inited;
  struct config cfg;
  bool cfg_set;
  struct dev devs[MAXDEV];
  struct hobj **objs;            /* by handle id; NULL once destroyed */
  struct stream *streams;        /* live and destroyed-but-draining */
  size_t nobj, capobj;
  struct pinned *pinned;
  size_t npinned, cappinned;
  struct {
    char name[128];
    mzemu_kernel_fn fn;
  } kern[MAXKERN];
  unsigned nkern;
  _Atomic unsigned long long calls[NSYM];
  mzemu_stats st;
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

static _Thread_local uintptr_t cur_ctx;     /* this thread's current context handle */
static _Thread_local bool in_hostfn;        /* inside a host function we called */
static _Thread_local struct ctx *exec_ctx;  /* the context of the kernel this thread runs */

/* The examples' kernels (emu_kernels.c). */
extern const struct mzemu_builtin {
  const char *name;
  mzemu_kernel_fn fn;
} mzemu_builtins[], mzemu_op_builtins[]; /* the examples' kernels; maize's canned ops' (emu_ops.c) */

/* ------------------------------------------------------------------ */
/* Rules, errors, injection                                            */
/* ------------------------------------------------------------------ */

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  __atomic_fetch_add(&G.st.violations, 1, __ATOMIC_RELAXED);
  fprintf(stderr, "mzemu: strict: the program broke a CUDA driver rule: %s\n", msg);
  if (G.cfg.strict) abort();
}

static bool sticky_code(CUresult r) {
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
    return true;
  default:
    return false;
  }
}

/* Start of every entry point: the host-function rule, the init check, the
 * call count and an injected failure (returned; CUDA_SUCCESS otherwise). */
static CUresult enter(enum sym s, bool needs_init) {
  if (in_hostfn) violation("%s called from inside a host function (cuLaunchHostFunc forbids any driver call there)", sym_name[s]);
  unsigned long long k = atomic_fetch_add(&G.calls[s], 1) + 1;
  if (needs_init && !__atomic_load_n(&G.inited, __ATOMIC_ACQUIRE)) return CUDA_ERROR_NOT_INITIALIZED;
  for (unsigned i = 0; i < G.cfg.ninj; i++)
    if (G.cfg.inj[i].sym == (int)s && G.cfg.inj[i].k == k) return G.cfg.inj[i].code;
  return CUDA_SUCCESS;
}

static void ctx_break(struct ctx *c, CUresult r) {
  if (!c->sticky) {
    c->sticky = r;
    G.st.faults++;
  }
  pthread_cond_broadcast(&G.changed);
}

/* An injected code from a synchronous call: a sticky one breaks the
 * current context, as a real fault would.  G.lock held. */
static CUresult injected(struct ctx *c, CUresult r) {
  if (c && sticky_code(r)) ctx_break(c, r);
  return r;
}

/* ------------------------------------------------------------------ */
/* Handles                                                             */
/* ------------------------------------------------------------------ */

static uintptr_t handle_new(struct hobj *o, enum hkind kind, struct ctx *c) {
  if (G.nobj == G.capobj) {
    size_t cap = G.capobj ? G.capobj * 2 : 256;
    struct hobj **n = realloc(G.objs, cap * sizeof *n);
    if (!n) return 0;
    G.objs = n;
    G.capobj = cap;
  }
  if (G.nobj == 0) G.objs[G.nobj++] = NULL; /* id 0 is never a handle */
  size_t id = G.nobj++;
  G.objs[id] = o;
  o->kind = kind;
  o->ctx = c;
  o->handle = (uintptr_t)id << 4 | (uintptr_t)kind;
  return o->handle;
}

static void handle_drop(struct hobj *o) {
  size_t id = o->handle >> 4;
  if (id < G.nobj) G.objs[id] = NULL;
}

/* The live object of kind behind h, or NULL with the driver's error in *r
 * (and a strict violation for a destroyed one).  G.lock held. */
static struct hobj *lookup(uintptr_t h, enum hkind kind, const char *call, CUresult *r) {
  size_t id = h >> 4;
  if (!h || (h & 15) != kind || id >= G.nobj) {
    *r = kind == H_CTX ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_HANDLE;
    return NULL;
  }
  struct hobj *o = G.objs[id];
  if (!o) {
    violation("%s: a %s used after it was destroyed", call, hkind_name[kind]);
    *r = kind == H_CTX ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_HANDLE;
    return NULL;
  }
  return o;
}

/* The current context, active; NULL with an error otherwise. */
static struct ctx *current(const char *call, CUresult *r) {
  if (!cur_ctx) {
    violation("%s with no context current", call);
    *r = CUDA_ERROR_INVALID_CONTEXT;
    return NULL;
  }
  struct ctx *c = (struct ctx *)lookup(cur_ctx, H_CTX, call, r);
  if (!c) return NULL;
  if (c->refs == 0) {
    violation("%s in a primary context that has been released", call);
    *r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return NULL;
  }
  if (c->sticky) {
    *r = c->sticky;
    return NULL;
  }
  return c;
}

/* A live stream, in an intact context; work for it must come while its
 * context is current. */
static struct stream *stream_of(CUstream hs, const char *call, CUresult *r, bool same_ctx) {
  if (!hs) {
    fprintf(stderr, "mzemu: %s: the emulator has no legacy default stream queue; use a created stream\n", call);
    *r = CUDA_ERROR_NOT_SUPPORTED;
    return NULL;
  }
  struct stream *s = (struct stream *)lookup((uintptr_t)hs, H_STREAM, call, r);
  if (!s) return NULL;
  if (s->h.ctx->sticky) {
    *r = s->h.ctx->sticky;
    return NULL;
  }
  if (same_ctx && s->h.ctx->h.handle != cur_ctx) {
    violation("%s: work for a stream of device %d while another context is current", call, s->h.ctx->dev);
    *r = CUDA_ERROR_INVALID_CONTEXT;
    return NULL;
  }
  return s;
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

static int dev_of_addr(CUdeviceptr p) {
  if (p < DEV_BASE(0)) return -1;
  CUdeviceptr d = p / DEV_SPAN - 1;
  return d < (CUdeviceptr)G.cfg.ndev ? (int)d : -1;
}

/* The allocation holding p (live or freed), or NULL. */
static struct alloc *alloc_find(CUdeviceptr p) {
  int d = dev_of_addr(p);
  if (d < 0) return NULL;
  struct dev *dv = &G.devs[d];
  size_t lo = 0, hi = dv->nalloc;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (dv->allocs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return NULL;
  struct alloc *a = &dv->allocs[lo - 1];
  return p < a->base + (a->size ? a->size : 1) ? a : NULL;
}

/* The host view of [p, p + n) in device memory, or NULL: out of bounds
 * is an invalid value, a freed allocation a broken rule. */
static char *dmem(CUdeviceptr p, size_t n, const char *call) {
  struct alloc *a = alloc_find(p);
  if (!a) return NULL;
  if (a->freed) {
    violation("%s: device memory 0x%" PRIx64 " used after cuMemFree", call, (uint64_t)p);
    return NULL;
  }
  if (n > a->size || p - a->base > a->size - n) return NULL;
  return a->host + (p - a->base);
}

static struct pinned *pinned_find(const void *p, size_t n) {
  const char *c = p;
  for (size_t i = 0; i < G.npinned; i++)
    if (c >= G.pinned[i].p && (size_t)(c - G.pinned[i].p) < G.pinned[i].size) {
      if (n > G.pinned[i].size - (size_t)(c - G.pinned[i].p)) return NULL;
      return &G.pinned[i];
    }
  return NULL;
}

static uint64_t hash_raw(const unsigned char *c, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, c + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* A checksum of the bytes at p.  A program may copy bytes it never wrote
 * (a buffer created without data); under valgrind the sum is taken of a
 * copy marked defined, so the check itself reports nothing while the
 * program's own memory keeps its state. */
static uint64_t hash_bytes(const void *p, size_t n) {
#ifdef VALGRIND_MAKE_MEM_DEFINED
  if (RUNNING_ON_VALGRIND) {
    unsigned char *tmp = malloc(n ? n : 1);
    if (tmp) {
      memcpy(tmp, p, n);
      VALGRIND_MAKE_MEM_DEFINED(tmp, n);
      uint64_t h = hash_raw(tmp, n);
      free(tmp);
      return h;
    }
  }
#endif
  return hash_raw(p, n);
}

/* Whether an op still queued or running uses [base, base + size): a copy
 * endpoint, or a kernel parameter pointing into it. */
static bool op_uses(const struct op *o, uintptr_t base, size_t size) {
  uintptr_t lim = base + (size ? size : 1);
#define IN(x) ((uintptr_t)(x) >= base && (uintptr_t)(x) < lim)
  if (o->kind == OP_COPY)
    return IN(o->dst_d) || IN(o->src_d) || IN(o->dst_h) || (!o->snapshot && IN(o->src_h));
  if (o->kind == OP_KERNEL)
    for (unsigned i = 0; i < o->fn->nparams; i++)
      if (o->fn->psize[i] == 8) {
        uint64_t v;
        memcpy(&v, o->params[i], 8);
        if (IN(v)) return true;
      }
  return false;
#undef IN
}

static bool any_op_uses(uintptr_t base, size_t size) {
  for (struct stream *st = G.streams; st; st = st->snext)
    for (struct op *p = st->head; p; p = p->next)
      if (op_uses(p, base, size)) return true;
  return false;
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

static void op_free(struct op *o) {
  if (o->ev && --o->ev->refs == 0) free(o->ev);
  free(o->snapshot);
  free(o->pblob);
  free(o);
}

/* Perform a copy; G.lock held on entry and exit, dropped for the bytes. */
static CUresult do_copy(struct stream *s, struct op *o) {
  const char *what = o->ck == C_HTOD ? "cuMemcpyHtoDAsync" : o->ck == C_DTOH ? "cuMemcpyDtoHAsync"
                   : o->ck == C_DTOD ? "cuMemcpyDtoDAsync" : "cuMemcpyPeerAsync";
  void *dst = o->dst_h;
  const void *src = o->snapshot ? o->snapshot : o->src_h;
  if (o->ck != C_DTOH) dst = dmem(o->dst_d, o->bytes, what);
  if (o->ck == C_DTOH || o->ck == C_DTOD || o->ck == C_PEER) src = dmem(o->src_d, o->bytes, what);
  if (!dst || !src) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (o->ck == C_HTOD && !o->snapshot) {
    if (!pinned_find(o->src_h, o->bytes)) {
      violation("%s: its pinned source was freed with cuMemFreeHost before the stream copied it", what);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  pthread_mutex_unlock(&G.lock);
  if (o->ck == C_HTOD && !o->snapshot && hash_bytes(src, o->bytes) != o->src_hash) {
    pthread_mutex_lock(&G.lock);
    violation("cuMemcpyHtoDAsync of %zu bytes on a stream of device %d: its pinned source changed between the call and the copy",
              o->bytes, s->h.ctx->dev);
    return CUDA_SUCCESS;
  }
  memmove(dst, src, o->bytes);
  pthread_mutex_lock(&G.lock);
  switch (o->ck) {
  case C_HTOD: G.st.copies_htod++; break;
  case C_DTOH: G.st.copies_dtoh++; break;
  case C_DTOD: G.st.copies_dtod++; break;
  case C_PEER: G.st.copies_peer++; break;
  }
  return CUDA_SUCCESS;
}

static CUresult do_kernel(struct stream *s, struct op *o) {
  struct func *f = o->fn;
  G.st.launches++;
  if (!f->fn) return CUDA_ERROR_LAUNCH_FAILED; /* an entry that traps */
  mzemu_launch l = {.nparams = f->nparams, .params = o->params};
  memcpy(l.grid, o->grid, sizeof l.grid);
  memcpy(l.block, o->block, sizeof l.block);
  pthread_mutex_unlock(&G.lock);
  exec_ctx = s->h.ctx;
  CUresult r = f->fn(&l);
  exec_ctx = NULL;
  pthread_mutex_lock(&G.lock);
  return r;
}

static void *stream_main(void *arg) {
  struct stream *s = arg;
  struct ctx *c = s->h.ctx;
  pthread_mutex_lock(&G.lock);
  for (;;) {
    while (!s->head && !s->destroyed) pthread_cond_wait(&s->work, &G.lock);
    if (!s->head) break;
    struct op *o = s->head;
    if (c->sticky) {
      /* A broken context runs nothing more; events complete so that
       * waiters elsewhere are not left hanging. */
      if (o->kind == OP_RECORD && o->ev->done < o->seq) o->ev->done = o->seq;
      if (o->kind == OP_HOSTFN) G.st.host_funcs_dropped++;
    } else if (o->fault) {
      ctx_break(c, o->fault);
    } else {
      CUresult r = CUDA_SUCCESS;
      switch (o->kind) {
      case OP_COPY: r = do_copy(s, o); break;
      case OP_KERNEL: r = do_kernel(s, o); break;
      case OP_HOSTFN:
        pthread_mutex_unlock(&G.lock);
        if (G.cfg.hostfn_delay_us) { /* the stream stays busy meanwhile */
          struct timespec d = {G.cfg.hostfn_delay_us / 1000000u, (long)(G.cfg.hostfn_delay_us % 1000000u) * 1000};
          nanosleep(&d, NULL);
        }
        in_hostfn = true;
        o->hfn(o->user);
        in_hostfn = false;
        pthread_mutex_lock(&G.lock);
        G.st.host_funcs++;
        break;
      case OP_RECORD:
        if (o->ev->done < o->seq) o->ev->done = o->seq;
        break;
      case OP_WAIT:
        while (o->ev->done < o->seq && !c->sticky && !(o->ev->h.ctx && o->ev->h.ctx->sticky))
          pthread_cond_wait(&G.changed, &G.lock);
        break;
      }
      if (r != CUDA_SUCCESS) ctx_break(c, r);
    }
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    op_free(o);
    pthread_cond_broadcast(&G.changed);
  }
  c->threads--;
  if (s->sprev) s->sprev->snext = s->snext;
  else G.streams = s->snext;
  if (s->snext) s->snext->sprev = s->sprev;
  pthread_cond_broadcast(&G.changed);
  pthread_cond_destroy(&s->work);
  free(s);
  pthread_mutex_unlock(&G.lock);
  return NULL;
}

static void stream_push(struct stream *s, struct op *o) {
  o->next = NULL;
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  pthread_cond_signal(&s->work);
}

/* Mark a stream destroyed: its thread finishes what is queued and frees
 * it.  G.lock held. */
static void stream_destroy(struct stream *s) {
  handle_drop(&s->h);
  s->destroyed = true;
  G.st.live_streams--;
  pthread_cond_signal(&s->work);
}

/* Wait until the stream has nothing queued (G.lock held). */
static void stream_drain(struct stream *s) {
  while (s->head) pthread_cond_wait(&G.changed, &G.lock);
}

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

static void module_free(struct module *m) {
  for (unsigned i = 0; i < m->nfuncs; i++) {
    handle_drop(&m->funcs[i]->h);
    free(m->funcs[i]);
  }
  free(m->funcs);
  handle_drop(&m->h);
  free(m);
}

/* The last release of a primary context: everything it still owns goes,
 * counted as leaked (the program should have freed it). */
static void ctx_reset(struct ctx *c) {
  unsigned long long leaked = 0;
  for (size_t i = 1; i < G.nobj; i++) {
    struct hobj *o = G.objs[i];
    if (!o || o->ctx != c) continue;
    if (o->kind == H_STREAM) {
      stream_destroy((struct stream *)o);
      leaked++;
    }
  }
  while (c->threads) pthread_cond_wait(&G.changed, &G.lock);
  for (size_t i = 1; i < G.nobj; i++) {
    struct hobj *o = G.objs[i];
    if (!o || o->ctx != c) continue;
    if (o->kind == H_EVENT) {
      struct event *e = (struct event *)o;
      handle_drop(o);
      G.st.live_events--;
      if (--e->refs == 0) free(e);
      leaked++;
    } else if (o->kind == H_MODULE) {
      module_free((struct module *)o);
      G.st.live_modules--;
      leaked++;
    }
  }
  struct dev *dv = &G.devs[c->dev];
  for (size_t i = 0; i < dv->nalloc; i++)
    if (!dv->allocs[i].freed) {
      free(dv->allocs[i].host);
      dv->allocs[i].host = NULL;
      dv->allocs[i].freed = true;
      G.st.live_allocs--;
      leaked++;
    }
  dv->used = 0;
  for (size_t i = 0; i < G.npinned;) {
    if (G.pinned[i].ctx == c) {
      free(G.pinned[i].p);
      if (G.pinned[i].managed) G.st.live_allocs--;
      else G.st.live_pinned--;
      G.pinned[i] = G.pinned[--G.npinned];
      leaked++;
    } else {
      i++;
    }
  }
  if (leaked) fprintf(stderr, "mzemu: device %d: its primary context was released with %llu object%s still alive (leaked by the program)\n",
                      c->dev, leaked, leaked == 1 ? "" : "s");
  G.st.leaked_at_reset += leaked;
  G.st.contexts_reset++;
  c->sticky = CUDA_SUCCESS;
  c->peers = 0;
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

static const struct {
  CUresult code;
  const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
#define NERRORS (sizeof errors / sizeof errors[0])

static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (*end) return false;
  if (shift && v > (~0ull >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

static bool parse_code(const char *s, CUresult *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end != s && !*end && v > 0) {
    *out = (CUresult)v;
    return true;
  }
  for (size_t i = 0; i < NERRORS; i++)
    if (!strcmp(errors[i].name + strlen("CUDA_ERROR_"), s) || !strcmp(errors[i].name, s)) {
      *out = errors[i].code;
      return errors[i].code != CUDA_SUCCESS;
    }
  return false;
}

/* Apply "key=value;..." to cfg; false with a message on a bad string. */
static bool parse_config(struct config *cfg, const char *spec) {
  char *copy = strdup(spec), *save = NULL;
  if (!copy) return false;
  bool ok = true;
  for (char *kv = strtok_r(copy, ";", &save); kv && ok; kv = strtok_r(NULL, ";", &save)) {
    while (isspace((unsigned char)*kv)) kv++;
    if (!*kv) continue;
    char *val = strchr(kv, '=');
    if (!val) {
      ok = false;
      fprintf(stderr, "mzemu: MZ_CUDA_EMU: '%s' is not key=value\n", kv);
      break;
    }
    *val++ = 0;
    char *end;
    if (!strcmp(kv, "devices")) {
      long n = strtol(val, &end, 10);
      ok = end != val && !*end && n >= 0 && n <= MAXDEV;
      if (ok) cfg->ndev = (int)n;
    } else if (!strcmp(kv, "memory")) {
      ok = parse_size(val, &cfg->memory) && cfg->memory > 0;
    } else if (!strcmp(kv, "cc")) {
      ok = sscanf(val, "%d.%d", &cfg->cc_major, &cfg->cc_minor) == 2 && cfg->cc_major > 0;
    } else if (!strcmp(kv, "sms")) {
      long n = strtol(val, &end, 10);
      ok = end != val && !*end && n > 0 && n < 100000;
      if (ok) cfg->sms = (int)n;
    } else if (!strcmp(kv, "managed")) {
      ok = !strcmp(val, "0") || !strcmp(val, "1");
      cfg->managed = !strcmp(val, "1");
    } else if (!strcmp(kv, "hostfn_delay_us")) {
      long n = strtol(val, &end, 10);
      ok = end != val && !*end && n >= 0 && n <= 10000000;
      if (ok) cfg->hostfn_delay_us = (unsigned)n;
    } else if (!strcmp(kv, "strict")) {
      ok = !strcmp(val, "0") || !strcmp(val, "1");
      cfg->strict = !strcmp(val, "1");
    } else if (!strcmp(kv, "peer")) {
      bool all = !strcmp(val, "all");
      for (int a = 0; a < MAXDEV; a++)
        for (int b = 0; b < MAXDEV; b++) cfg->peer[a][b] = all && a != b;
      if (!all && strcmp(val, "none")) {
        char *s2 = NULL;
        for (char *pr = strtok_r(val, ",", &s2); pr && ok; pr = strtok_r(NULL, ",", &s2)) {
          int a, b;
          char tail;
          ok = sscanf(pr, "%d>%d%c", &a, &b, &tail) == 2 && a >= 0 && b >= 0 && a < MAXDEV && b < MAXDEV && a != b;
          if (ok) cfg->peer[a][b] = true;
        }
      }
    } else if (!strcmp(kv, "fail")) {
      char *at = strchr(val, '@'), *colon = at ? strchr(at, ':') : NULL;
      ok = at && colon && cfg->ninj < MAXINJ;
      if (ok) {
        *at = 0;
        *colon = 0;
        struct inject *in = &cfg->inj[cfg->ninj];
        in->sym = -1;
        for (int s = 0; s < NSYM; s++)
          if (!strcmp(sym_name[s], val)) in->sym = s;
        in->k = strtoull(at + 1, &end, 10);
        ok = in->sym >= 0 && end != at + 1 && !*end && in->k > 0 && parse_code(colon + 1, &in->code);
        if (ok) cfg->ninj++;
      }
    } else {
      ok = false;
    }
    if (!ok) fprintf(stderr, "mzemu: MZ_CUDA_EMU: bad setting '%s=%s'\n", kv, val);
  }
  free(copy);
  return ok;
}

static void config_default(struct config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->ndev = 1;
  cfg->memory = (size_t)1 << 30;
  cfg->cc_major = 8;
  cfg->cc_minor = 0;
  cfg->sms = 4;
  cfg->managed = true;
  cfg->strict = true;
  for (int a = 0; a < MAXDEV; a++)
    for (int b = 0; b < MAXDEV; b++) cfg->peer[a][b] = a != b;
}

EXPORT int mzemu_configure(const char *spec) {
  pthread_mutex_lock(&G.lock);
  int rc = -1;
  if (!G.inited && spec) {
    if (!G.cfg_set) config_default(&G.cfg);
    G.cfg_set = true;
    rc = parse_config(&G.cfg, spec) ? 0 : -1;
  }
  pthread_mutex_unlock(&G.lock);
  return rc;
}

EXPORT int mzemu_register_kernel(const char *name, mzemu_kernel_fn fn) {
  if (!name || !fn || strlen(name) >= sizeof G.kern[0].name) return -1;
  pthread_mutex_lock(&G.lock);
  int rc = -1;
  for (unsigned i = 0; i < G.nkern; i++)
    if (!strcmp(G.kern[i].name, name)) {
      G.kern[i].fn = fn;
      rc = 0;
    }
  if (rc < 0 && G.nkern < MAXKERN) {
    strcpy(G.kern[G.nkern].name, name);
    G.kern[G.nkern++].fn = fn;
    rc = 0;
  }
  pthread_mutex_unlock(&G.lock);
  return rc;
}

EXPORT void mzemu_get_stats(mzemu_stats *out) {
  pthread_mutex_lock(&G.lock);
  *out = G.st;
  out->violations = __atomic_load_n(&G.st.violations, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&G.lock);
}

EXPORT void *mzemu_device_ptr(CUdeviceptr p, size_t bytes) {
  struct ctx *c = exec_ctx;
  if (!c) return NULL;
  pthread_mutex_lock(&G.lock);
  int d = dev_of_addr(p);
  char *h = NULL;
  if (d >= 0 && (d == c->dev || (c->peers >> d & 1))) h = dmem(p, bytes, "a kernel");
  if (d < 0) { /* managed memory is where its address says */
    struct pinned *m = pinned_find((const void *)(uintptr_t)p, bytes);
    if (m && m->managed) h = (char *)(uintptr_t)p;
  }
  pthread_mutex_unlock(&G.lock);
  return h;
}

/* ------------------------------------------------------------------ */
/* Initialization, versions, errors                                    */
/* ------------------------------------------------------------------ */

EXPORT CUresult cuInit(unsigned int flags) {
  CUresult r = enter(SYM_Init, false);
  if (r) return r;
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&G.lock);
  if (!G.inited) {
    if (!G.cfg_set) config_default(&G.cfg);
    const char *env = getenv("MZ_CUDA_EMU");
    if (env && !parse_config(&G.cfg, env)) {
      pthread_mutex_unlock(&G.lock);
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < G.cfg.ndev; i++) {
      G.devs[i].memory = G.cfg.memory;
      G.devs[i].next = DEV_BASE(i);
    }
    __atomic_store_n(&G.inited, true, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&G.lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
  CUresult r = enter(SYM_DriverGetVersion, false);
  if (r) return r;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < NERRORS; i++)
    if (errors[i].code == e) {
      *s = errors[i].text;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < NERRORS; i++)
    if (errors[i].code == e) {
      *s = errors[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

static bool dev_ok(CUdevice d) { return d >= 0 && d < G.cfg.ndev; }

EXPORT CUresult cuDeviceGetCount(int *n) {
  CUresult r = enter(SYM_DeviceGetCount, true);
  if (r) return r;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = G.cfg.ndev;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  CUresult r = enter(SYM_DeviceGet, true);
  if (r) return r;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  CUresult r = enter(SYM_DeviceGetName, true);
  if (r) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "maize CUDA emulator %d", d);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  CUresult r = enter(SYM_DeviceGetAttribute, true);
  if (r) return r;
  if (!v || a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = G.cfg.sms; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = G.cfg.cc_major; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = G.cfg.cc_minor; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *v = G.cfg.managed; break;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = 0x10 + d; break;
  default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  CUresult r = enter(SYM_DeviceTotalMem, true);
  if (r) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = G.cfg.memory;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) {
  CUresult r = enter(SYM_DeviceGetPCIBusId, true);
  if (r) return r;
  if (!bus || len < 13) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  /* As the driver prints it: an 8-digit domain, upper-case hex. */
  snprintf(bus, (size_t)len, "00000000:%02X:00.0", 0x1A + d);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
  CUresult r = enter(SYM_DeviceCanAccessPeer, true);
  if (r) return r;
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(a) || !dev_ok(b)) return CUDA_ERROR_INVALID_DEVICE;
  *can = a != b && G.cfg.peer[a][b];
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice d) {
  CUresult r = enter(SYM_DevicePrimaryCtxRetain, true);
  if (r) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&G.lock);
  struct dev *dv = &G.devs[d];
  if (!dv->ctx) {
    struct ctx *c = calloc(1, sizeof *c);
    if (!c || !handle_new(&c->h, H_CTX, NULL)) {
      free(c);
      pthread_mutex_unlock(&G.lock);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->h.ctx = c;
    c->dev = d;
    dv->ctx = c;
  }
  dv->ctx->refs++;
  *out = (CUcontext)dv->ctx->h.handle;
  pthread_mutex_unlock(&G.lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  CUresult r = enter(SYM_DevicePrimaryCtxRelease, true);
  if (r) return r;
  if (!dev_ok(d)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&G.lock);
  struct ctx *c = G.devs[d].ctx;
  if (!c || c->refs == 0) {
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (--c->refs == 0) ctx_reset(c);
  pthread_mutex_unlock(&G.lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext hc) {
  CUresult r = enter(SYM_CtxSetCurrent, true);
  if (r) return r;
  if (!hc) {
    cur_ctx = 0;
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&G.lock);
  struct ctx *c = (struct ctx *)lookup((uintptr_t)hc, H_CTX, "cuCtxSetCurrent", &r);
  if (c && c->refs == 0) {
    violation("cuCtxSetCurrent: the primary context of device %d after its last release", c->dev);
    r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    c = NULL;
  }
  if (c) cur_ctx = (uintptr_t)hc;
  pthread_mutex_unlock(&G.lock);
  return c ? CUDA_SUCCESS : r;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *out) {
  CUresult r = enter(SYM_CtxGetCurrent, true);
  if (r) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = (CUcontext)cur_ctx;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

/* The context for a call that needs one: the injected failure, or the
 * current context's problem.  Takes G.lock and returns the context, or
 * NULL with the lock released and the error in *r.  fault: for an
 * asynchronous call, where an injected sticky code is accepted now and
 * raised when the stream reaches the work (as a real fault is); NULL for
 * a synchronous one. */
static struct ctx *begin(enum sym s, const char *call, CUresult *r, CUresult *fault) {
  *r = enter(s, true);
  if (*r == CUDA_ERROR_NOT_INITIALIZED) return NULL;
  pthread_mutex_lock(&G.lock);
  CUresult inj = *r;
  struct ctx *c = current(call, r);
  if (c && inj) {
    if (fault && sticky_code(inj)) {
      *fault = inj;
      *r = CUDA_SUCCESS;
    } else {
      *r = injected(c, inj);
      c = NULL;
    }
  }
  if (!c) pthread_mutex_unlock(&G.lock);
  return c;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  CUresult r;
  struct ctx *c = begin(SYM_CtxEnablePeerAccess, "cuCtxEnablePeerAccess", &r, NULL);
  if (!c) return r;
  struct ctx *p = (struct ctx *)lookup((uintptr_t)peer, H_CTX, "cuCtxEnablePeerAccess", &r);
  if (p) {
    if (flags) r = CUDA_ERROR_INVALID_VALUE;
    else if (p == c) r = CUDA_ERROR_INVALID_DEVICE;
    else if (!G.cfg.peer[c->dev][p->dev]) r = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    else if (c->peers >> p->dev & 1) r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else c->peers |= (uint64_t)1 << p->dev;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
  CUresult r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_StreamCreate, "cuStreamCreate", &r, NULL);
  if (!c) return r;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) {
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct stream *s = calloc(1, sizeof *s);
  if (!s || !handle_new(&s->h, H_STREAM, c)) {
    free(s);
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->blocking = !(flags & CU_STREAM_NON_BLOCKING);
  pthread_cond_init(&s->work, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    handle_drop(&s->h);
    pthread_cond_destroy(&s->work);
    free(s);
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_detach(s->thread);
  s->snext = G.streams;
  if (G.streams) G.streams->sprev = s;
  G.streams = s;
  c->threads++;
  G.st.live_streams++;
  *out = (CUstream)s->h.handle;
  pthread_mutex_unlock(&G.lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hs) {
  CUresult r = enter(SYM_StreamDestroy, true);
  if (r) return r;
  pthread_mutex_lock(&G.lock);
  struct stream *s = (struct stream *)lookup((uintptr_t)hs, H_STREAM, "cuStreamDestroy", &r);
  if (s) {
    /* As the driver: returns at once; queued work still completes. */
    r = s->h.ctx->sticky;
    stream_destroy(s);
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuStreamQuery(CUstream hs) {
  CUresult r = enter(SYM_StreamQuery, true);
  if (r) return r;
  pthread_mutex_lock(&G.lock);
  struct stream *s = stream_of(hs, "cuStreamQuery", &r, false);
  if (s) r = s->head ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* The legacy stream's work is done at each call, so waiting for it means
 * waiting for the blocking streams it synchronizes with. */
static void legacy_sync(struct ctx *c) {
  for (bool busy = true; busy;) {
    busy = false;
    for (struct stream *st = G.streams; st && !busy; st = st->snext) busy = st->h.ctx == c && st->blocking && st->head;
    if (busy) pthread_cond_wait(&G.changed, &G.lock);
  }
}

/* cuMemFree and cuMemFreeHost synchronize the whole context on a real
 * driver: they return once every stream's work, host functions included,
 * has finished (seen on an H200 with driver 580: a cuMemFree waited for a
 * host function that waited for a lock the freeing thread held).  So here
 * too, not only for the work that uses the memory freed. */
static void ctx_idle(struct ctx *c) {
  for (bool busy = true; busy;) {
    busy = false;
    for (struct stream *st = G.streams; st && !busy; st = st->snext) busy = st->h.ctx == c && st->head;
    if (busy) pthread_cond_wait(&G.changed, &G.lock);
  }
}

EXPORT CUresult cuStreamSynchronize(CUstream hs) {
  CUresult r;
  struct ctx *c = begin(SYM_StreamSynchronize, "cuStreamSynchronize", &r, NULL);
  if (!c) return r;
  if (!hs) {
    legacy_sync(c);
  } else {
    struct stream *s = stream_of(hs, "cuStreamSynchronize", &r, false);
    if (s) stream_drain(s);
  }
  if (!r) r = c->sticky;
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags) {
  CUresult r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_EventCreate, "cuEventCreate", &r, NULL);
  if (!c) return r;
  if (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) {
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct event *e = calloc(1, sizeof *e);
  if (!e || !handle_new(&e->h, H_EVENT, c)) {
    free(e);
    pthread_mutex_unlock(&G.lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e->refs = 1;
  G.st.live_events++;
  *out = (CUevent)e->h.handle;
  pthread_mutex_unlock(&G.lock);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent he) {
  CUresult r = enter(SYM_EventDestroy, true);
  if (r) return r;
  pthread_mutex_lock(&G.lock);
  struct event *e = (struct event *)lookup((uintptr_t)he, H_EVENT, "cuEventDestroy", &r);
  if (e) {
    /* A pending record still completes; the event goes with its last op. */
    handle_drop(&e->h);
    G.st.live_events--;
    if (--e->refs == 0) free(e);
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

static struct op *op_new(void) { return calloc(1, sizeof(struct op)); }

EXPORT CUresult cuEventRecord(CUevent he, CUstream hs) {
  CUresult r;
  struct ctx *c = begin(SYM_EventRecord, "cuEventRecord", &r, NULL);
  if (!c) return r;
  struct event *e = (struct event *)lookup((uintptr_t)he, H_EVENT, "cuEventRecord", &r);
  struct stream *s = e ? stream_of(hs, "cuEventRecord", &r, true) : NULL;
  struct op *o = s ? op_new() : NULL;
  if (s && e->h.ctx != s->h.ctx) r = CUDA_ERROR_INVALID_HANDLE; /* one context for both, says the API */
  else if (s && !o) r = CUDA_ERROR_OUT_OF_MEMORY;
  else if (s) {
    o->kind = OP_RECORD;
    o->ev = e;
    e->refs++;
    o->seq = ++e->recorded;
    G.st.event_records++;
    stream_push(s, o);
    o = NULL;
  }
  free(o);
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuStreamWaitEvent(CUstream hs, CUevent he, unsigned int flags) {
  CUresult r;
  struct ctx *c = begin(SYM_StreamWaitEvent, "cuStreamWaitEvent", &r, NULL);
  if (!c) return r;
  /* The event may belong to another context or device. */
  struct event *e = (struct event *)lookup((uintptr_t)he, H_EVENT, "cuStreamWaitEvent", &r);
  struct stream *s = e ? stream_of(hs, "cuStreamWaitEvent", &r, true) : NULL;
  if (s && flags) r = CUDA_ERROR_INVALID_VALUE;
  else if (s && e->recorded > e->done) {
    struct op *o = op_new();
    if (!o) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      o->kind = OP_WAIT;
      o->ev = e;
      e->refs++;
      o->seq = e->recorded;
      G.st.event_waits++;
      stream_push(s, o);
    }
  } else if (s) {
    G.st.event_waits++; /* already complete (or never recorded): nothing to wait for */
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuLaunchHostFunc(CUstream hs, CUhostFn fn, void *user) {
  CUresult r;
  struct ctx *c = begin(SYM_LaunchHostFunc, "cuLaunchHostFunc", &r, NULL);
  if (!c) return r;
  struct stream *s = stream_of(hs, "cuLaunchHostFunc", &r, true);
  if (s && !fn) r = CUDA_ERROR_INVALID_VALUE;
  else if (s) {
    struct op *o = op_new();
    if (!o) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      o->kind = OP_HOSTFN;
      o->hfn = fn;
      o->user = user;
      stream_push(s, o);
    }
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */
/* ------------------------------------------------------------------ */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t bytes) {
  CUresult r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_MemAlloc, "cuMemAlloc", &r, NULL);
  if (!c) return r;
  struct dev *dv = &G.devs[c->dev];
  if (bytes == 0) r = CUDA_ERROR_INVALID_VALUE;
  else if (bytes > dv->memory - dv->used) r = CUDA_ERROR_OUT_OF_MEMORY;
  else if (dv->nalloc == dv->cap) {
    size_t cap = dv->cap ? dv->cap * 2 : 64;
    struct alloc *n = realloc(dv->allocs, cap * sizeof *n);
    if (!n) r = CUDA_ERROR_OUT_OF_MEMORY;
    else dv->allocs = n, dv->cap = cap;
  }
  char *host = r ? NULL : calloc(1, bytes);
  if (!r && !host) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    struct alloc *a = &dv->allocs[dv->nalloc++];
    *a = (struct alloc){.base = dv->next, .size = bytes, .host = host};
    dv->next += (bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN + ALLOC_GAP;
    dv->used += bytes;
    G.st.live_allocs++;
    *out = a->base;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* Managed memory: host memory at an address the kernels use as is. */
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *out, size_t bytes, unsigned int flags) {
  CUresult r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_MemAllocManaged, "cuMemAllocManaged", &r, NULL);
  if (!c) return r;
  void *p = NULL;
  if (!G.cfg.managed) r = CUDA_ERROR_NOT_SUPPORTED;
  else if (bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) r = CUDA_ERROR_INVALID_VALUE;
  else if (G.npinned == G.cappinned) {
    size_t cap = G.cappinned ? G.cappinned * 2 : 16;
    struct pinned *n = realloc(G.pinned, cap * sizeof *n);
    if (!n) r = CUDA_ERROR_OUT_OF_MEMORY;
    else G.pinned = n, G.cappinned = cap;
  }
  if (!r && posix_memalign(&p, 4096, bytes) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (!r) {
    memset(p, 0, bytes);
    G.pinned[G.npinned++] = (struct pinned){.p = p, .size = bytes, .ctx = c, .managed = true};
    G.st.live_allocs++;
    *out = (CUdeviceptr)(uintptr_t)p;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* cuMemFree of managed memory; G.lock held. */
static CUresult free_managed(CUdeviceptr p) {
  size_t i = 0;
  while (i < G.npinned && !(G.pinned[i].managed && (uintptr_t)G.pinned[i].p == p)) i++;
  if (i == G.npinned) return CUDA_ERROR_INVALID_VALUE;
  while (any_op_uses(p, G.pinned[i].size)) {
    pthread_cond_wait(&G.changed, &G.lock);
    for (i = 0; i < G.npinned && !(G.pinned[i].managed && (uintptr_t)G.pinned[i].p == p);) i++;
    if (i == G.npinned) return CUDA_ERROR_INVALID_VALUE; /* freed meanwhile */
  }
  free(G.pinned[i].p);
  G.pinned[i] = G.pinned[--G.npinned];
  G.st.live_allocs--;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  CUresult r;
  struct ctx *c = begin(SYM_MemFree, "cuMemFree", &r, NULL);
  if (!c) return r;
  struct alloc *a = alloc_find(p);
  if (!a && dev_of_addr(p) < 0) {
    r = free_managed(p);
  } else if (!a || a->base != p) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (a->freed) {
    violation("cuMemFree: device memory 0x%" PRIx64 " freed twice", (uint64_t)p);
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    /* cuMemFree synchronizes the context (ctx_idle), so work still using
     * the memory finishes first. */
    ctx_idle(c);
    a = alloc_find(p);
    free(a->host);
    a->host = NULL;
    a->freed = true;
    G.devs[dev_of_addr(p)].used -= a->size;
    G.st.live_allocs--;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuMemHostAlloc(void **out, size_t bytes, unsigned int flags) {
  CUresult r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_MemHostAlloc, "cuMemHostAlloc", &r, NULL);
  if (!c) return r;
  void *p = NULL;
  if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    r = CUDA_ERROR_INVALID_VALUE;
  else if (G.npinned == G.cappinned) {
    size_t cap = G.cappinned ? G.cappinned * 2 : 16;
    struct pinned *n = realloc(G.pinned, cap * sizeof *n);
    if (!n) r = CUDA_ERROR_OUT_OF_MEMORY;
    else G.pinned = n, G.cappinned = cap;
  }
  if (!r && (bytes == 0 || posix_memalign(&p, 4096, bytes) != 0)) r = bytes ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
  if (!r) {
    G.pinned[G.npinned++] = (struct pinned){.p = p, .size = bytes, .ctx = c};
    G.st.live_pinned++;
    *out = p;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuMemFreeHost(void *p) {
  CUresult r;
  struct ctx *c = begin(SYM_MemFreeHost, "cuMemFreeHost", &r, NULL);
  if (!c) return r;
  size_t i = 0;
  while (i < G.npinned && G.pinned[i].p != p) i++;
  if (i == G.npinned || G.pinned[i].managed) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    /* Synchronizing, like cuMemFree. */
    ctx_idle(c);
    for (i = 0; i < G.npinned && G.pinned[i].p != p;) i++;
    while (i < G.npinned && any_op_uses((uintptr_t)p, G.pinned[i].size)) {
      pthread_cond_wait(&G.changed, &G.lock);
      for (i = 0; i < G.npinned && G.pinned[i].p != p;) i++;
    }
    if (i == G.npinned) { /* freed meanwhile by another thread */
      r = CUDA_ERROR_INVALID_VALUE;
    } else {
      free(p);
      G.pinned[i] = G.pinned[--G.npinned];
      G.st.live_pinned--;
    }
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p) {
  CUresult r = enter(SYM_PointerGetAttribute, true);
  if (r) return r;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&G.lock);
  int d = dev_of_addr(p);
  struct alloc *a = d >= 0 ? alloc_find(p) : NULL;
  struct pinned *pn = d < 0 ? pinned_find((const void *)(uintptr_t)p, 1) : NULL;
  bool pin = pn != NULL, managed = pn && pn->managed;
  if (a && a->freed) {
    violation("cuPointerGetAttribute: device memory 0x%" PRIx64 " after cuMemFree", (uint64_t)p);
    a = NULL;
  }
  if (!a && !pin) {
    r = CUDA_ERROR_INVALID_VALUE; /* pageable host memory is unknown to the driver */
  } else if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
    *(unsigned int *)data = a || managed ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
  } else if (attr == CU_POINTER_ATTRIBUTE_IS_MANAGED) {
    *(unsigned int *)data = managed;
  } else if (attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
    *(int *)data = a ? d : 0;
  } else {
    r = CUDA_ERROR_NOT_SUPPORTED;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* Synchronous copies go on the legacy stream, whose earlier work is done,
 * after the blocking streams. */
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  CUresult r;
  struct ctx *c = begin(SYM_MemcpyHtoD, "cuMemcpyHtoD", &r, NULL);
  if (!c) return r;
  legacy_sync(c);
  char *d = dmem(dst, bytes, "cuMemcpyHtoD");
  if (!d || (!src && bytes)) r = CUDA_ERROR_INVALID_VALUE;
  else memcpy(d, src, bytes), G.st.copies_htod++;
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  CUresult r;
  struct ctx *c = begin(SYM_MemcpyDtoH, "cuMemcpyDtoH", &r, NULL);
  if (!c) return r;
  legacy_sync(c);
  char *s = dmem(src, bytes, "cuMemcpyDtoH");
  if (!s || (!dst && bytes)) r = CUDA_ERROR_INVALID_VALUE;
  else memcpy(dst, s, bytes), G.st.copies_dtoh++;
  pthread_mutex_unlock(&G.lock);
  return r;
}

/* An asynchronous copy: endpoints checked at the call (as the driver
 * does), bytes moved when the stream reaches it. */
static CUresult copy_async(enum sym sym, const char *call, enum copykind ck, CUdeviceptr dst_d, void *dst_h,
                           CUdeviceptr src_d, const void *src_h, size_t bytes, CUstream hs,
                           CUcontext dctx, CUcontext sctx) {
  CUresult r;
  CUresult fault = CUDA_SUCCESS;
  struct ctx *c = begin(sym, call, &r, &fault);
  if (!c) return r;
  struct stream *s = stream_of(hs, call, &r, true);
  if (s) {
    if ((ck != C_DTOH && !dmem(dst_d, bytes, call)) || ((ck != C_HTOD) && !dmem(src_d, bytes, call)) ||
        (ck == C_HTOD && !src_h) || (ck == C_DTOH && !dst_h))
      r = CUDA_ERROR_INVALID_VALUE;
    if (!r && ck == C_PEER) {
      CUresult r2 = CUDA_SUCCESS;
      struct ctx *dc = (struct ctx *)lookup((uintptr_t)dctx, H_CTX, call, &r2);
      struct ctx *sc = dc ? (struct ctx *)lookup((uintptr_t)sctx, H_CTX, call, &r2) : NULL;
      if (!sc) r = r2;
      else if (dev_of_addr(dst_d) != dc->dev || dev_of_addr(src_d) != sc->dev) r = CUDA_ERROR_INVALID_VALUE;
    }
  }
  struct op *o = s && !r ? op_new() : NULL;
  if (s && !r && !o) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (o) {
    *o = (struct op){.kind = OP_COPY, .fault = fault, .ck = ck, .dst_d = dst_d, .dst_h = dst_h, .src_d = src_d,
                     .src_h = src_h, .bytes = bytes};
    if (ck == C_HTOD) {
      if (pinned_find(src_h, bytes)) {
        o->src_hash = hash_bytes(src_h, bytes);
      } else if (bytes) {
        /* The driver stages pageable memory before returning. */
        o->snapshot = malloc(bytes);
        if (!o->snapshot) r = CUDA_ERROR_OUT_OF_MEMORY;
        else memcpy(o->snapshot, src_h, bytes);
      }
    }
    if (r) free(o);
    else stream_push(s, o);
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream hs) {
  return copy_async(SYM_MemcpyHtoDAsync, "cuMemcpyHtoDAsync", C_HTOD, dst, NULL, 0, src, bytes, hs, NULL, NULL);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream hs) {
  return copy_async(SYM_MemcpyDtoHAsync, "cuMemcpyDtoHAsync", C_DTOH, 0, dst, src, NULL, bytes, hs, NULL, NULL);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream hs) {
  return copy_async(SYM_MemcpyDtoDAsync, "cuMemcpyDtoDAsync", C_DTOD, dst, NULL, src, NULL, bytes, hs, NULL, NULL);
}

EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t bytes,
                                  CUstream hs) {
  return copy_async(SYM_MemcpyPeerAsync, "cuMemcpyPeerAsync", C_PEER, dst, NULL, src, NULL, bytes, hs, dctx, sctx);
}

/* ------------------------------------------------------------------ */
/* Modules and launches                                                */
/* ------------------------------------------------------------------ */

static const char *const ptx_ops[] = {
    "abs", "activemask", "add", "addc", "alloca", "and", "atom", "bar", "barrier", "bfe", "bfi", "bfind",
    "bmsk", "bra", "brev", "brkpt", "brx", "call", "clz", "cnot", "copysign", "cos", "cp", "createpolicy",
    "cvt", "cvta", "discard", "div", "dp2a", "dp4a", "elect", "ex2", "exit", "fence", "fma", "fns",
    "getctarank", "griddepcontrol", "isspacep", "istypep", "ld", "ldmatrix", "ldu", "lg2", "lop3", "mad",
    "mad24", "madc", "mapa", "match", "max", "mbarrier", "membar", "min", "mma", "mov", "mul", "mul24",
    "nanosleep", "neg", "not", "or", "pmevent", "popc", "prefetch", "prefetchu", "prmt", "rcp", "red",
    "redux", "rem", "ret", "rsqrt", "sad", "selp", "set", "setp", "shf", "shfl", "shl", "shr", "sin",
    "slct", "sqrt", "st", "stackrestore", "stacksave", "stmatrix", "sub", "subc", "suld", "suq", "sured",
    "sust", "szext", "tanh", "testp", "tex", "tld4", "trap", "txq", "vabsdiff", "vadd", "vmad", "vmax",
    "vmin", "vote", "vset", "vshl", "vshr", "vsub", "wmma", "xor", NULL};

static bool known_op(const char *s, size_t n) {
  for (unsigned i = 0; ptx_ops[i]; i++)
    if (strlen(ptx_ops[i]) == n && !strncmp(ptx_ops[i], s, n)) return true;
  return false;
}

static unsigned line_of(const char *text, const char *p) {
  unsigned n = 1;
  for (const char *q = text; q < p; q++) n += *q == '\n';
  return n;
}

static unsigned param_size(const char *decl) {
  const char *br = strchr(decl, '[');
  static const struct {
    const char *t;
    unsigned n;
  } types[] = {{".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8}, {".u32", 4}, {".s32", 4}, {".b32", 4},
               {".f32", 4}, {".u16", 2}, {".s16", 2}, {".b16", 2}, {".f16", 2}, {".u8", 1},  {".s8", 1},
               {".b8", 1}};
  for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
    const char *t = strstr(decl, types[i].t);
    if (t && !isalnum((unsigned char)t[strlen(types[i].t)])) {
      unsigned n = types[i].n;
      if (br) n *= (unsigned)strtoul(br + 1, NULL, 10);
      return n;
    }
  }
  return 0;
}

/* Check PTX text and collect its entries.  On an error, a JIT-style log
 * goes into log and CUDA_ERROR_INVALID_PTX comes back. */
static CUresult ptx_parse(const char *text, struct module *m, char *log, size_t loglen) {
  if (!strstr(text, ".version") || !strstr(text, ".target")) {
    snprintf(log, loglen, "ptxas fatal   : the PTX has no .version or .target directive");
    return CUDA_ERROR_INVALID_PTX;
  }
  for (const char *p = text; (p = strstr(p, ".entry")) != NULL;) {
    p += 6;
    while (isspace((unsigned char)*p)) p++;
    const char *name = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '$') p++;
    size_t nlen = (size_t)(p - name);
    const char *open = strchr(p, '('), *close = open ? strchr(open, ')') : NULL;
    const char *body = close ? strchr(close, '{') : NULL;
    if (!nlen || nlen >= sizeof m->funcs[0]->name || !body) {
      snprintf(log, loglen, "ptxas application ptx input, line %u; error   : malformed .entry", line_of(text, name));
      return CUDA_ERROR_INVALID_PTX;
    }
    struct func *f = calloc(1, sizeof *f);
    struct func **nf = f ? realloc(m->funcs, (m->nfuncs + 1) * sizeof *nf) : NULL;
    if (!nf) {
      free(f);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->funcs = nf;
    m->funcs[m->nfuncs++] = f;
    f->mod = m;
    memcpy(f->name, name, nlen);
    for (const char *q = open + 1; q < close;) {
      const char *pe = q;
      while (pe < close && *pe != ',') pe++;
      char decl[256];
      size_t dl = (size_t)(pe - q) < sizeof decl - 1 ? (size_t)(pe - q) : sizeof decl - 1;
      memcpy(decl, q, dl);
      decl[dl] = 0;
      if (strstr(decl, ".param")) {
        unsigned sz = param_size(decl);
        if (!sz || f->nparams == MAXPARAMS) {
          snprintf(log, loglen, "ptxas application ptx input, line %u; error   : unsupported parameter '%s'",
                   line_of(text, q), decl);
          return CUDA_ERROR_INVALID_PTX;
        }
        f->psize[f->nparams++] = sz;
      }
      q = pe + 1;
    }
    /* The body: statements end with ';'; labels, predicates, directives
     * and braces aside, each starts with a PTX opcode. */
    int depth = 0;
    const char *q = body;
    do {
      if (*q == '{') depth++, q++;
      else if (*q == '}') depth--, q++;
      else if (*q == '/' && q[1] == '/') {
        while (*q && *q != '\n') q++;
      } else if (isspace((unsigned char)*q)) {
        q++;
      } else if (!*q) {
        snprintf(log, loglen, "ptxas application ptx input, line %u; error   : unexpected end of file in '%s'",
                 line_of(text, q), f->name);
        return CUDA_ERROR_INVALID_PTX;
      } else {
        const char *st = q;
        /* A brace inside a statement is a vector operand ("mov.b64 {%r1,
         * %r2}, %fd1;"), not a block. */
        while (*q && *q != ';' && *q != '}') {
          if (*q == '{') {
            while (*q && *q != '}' && *q != ';') q++;
            if (*q == '}') q++;
            continue;
          }
          q++;
        }
        /* Labels ("$L__BB0_2:") and a predicate ("@%p1", "@!%p1"). */
        const char *w = st;
        for (;;) {
          const char *e = w;
          while (isalnum((unsigned char)*e) || *e == '_' || *e == '$') e++;
          if (e > w && *e == ':') {
            w = e + 1;
            while (isspace((unsigned char)*w)) w++;
          } else {
            break;
          }
        }
        if (*w == '@') {
          while (w < q && !isspace((unsigned char)*w)) w++;
          while (w < q && isspace((unsigned char)*w)) w++;
        }
        if (w < q && *w != '.') {
          const char *e = w;
          while (isalnum((unsigned char)*e) || *e == '_') e++;
          if (!known_op(w, (size_t)(e - w))) {
            snprintf(log, loglen, "ptxas application ptx input, line %u; error   : Unknown instruction '%.*s' in '%s'\n"
                     "ptxas fatal   : Ptx assembly aborted due to errors", line_of(text, w), (int)(e - w), w, f->name);
            return CUDA_ERROR_INVALID_PTX;
          }
          if ((size_t)(e - w) == 4 && !strncmp(w, "trap", 4)) f->traps = true;
        }
        if (*q == ';') q++;
      }
    } while (depth > 0);
    p = q;
  }
  return CUDA_SUCCESS;
}

static void jit_log(unsigned n, const CUjit_option *opt, void **val, const char *msg) {
  for (unsigned i = 0; i < n; i++) {
    if (opt[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
    for (unsigned j = 0; j < n; j++)
      if (opt[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
        size_t cap = (size_t)(uintptr_t)val[j];
        char *buf = val[i];
        if (buf && cap) {
          snprintf(buf, cap, "%s", msg);
          val[j] = (void *)(uintptr_t)strlen(buf);
        }
      }
  }
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned int nopt, CUjit_option *opt,
                                   void **val) {
  CUresult r;
  if (!out || !image || (nopt && (!opt || !val))) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = begin(SYM_ModuleLoadDataEx, "cuModuleLoadDataEx", &r, NULL);
  if (!c) return r;
  char log[1024] = "";
  if (!memcmp(image, "\177ELF", 4)) {
    snprintf(log, sizeof log, "the CUDA emulator runs PTX only, not cubin");
    r = CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  struct module *m = r ? NULL : calloc(1, sizeof *m);
  if (!r && !m) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (m) {
    r = ptx_parse(image, m, log, sizeof log);
    if (!r && !handle_new(&m->h, H_MODULE, c)) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
      for (unsigned i = 0; i < m->nfuncs; i++) free(m->funcs[i]);
      free(m->funcs);
      free(m);
    } else {
      G.st.live_modules++;
      *out = (CUmodule)m->h.handle;
    }
  }
  if (r && log[0]) jit_log(nopt, opt, val, log);
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuModuleUnload(CUmodule hm) {
  CUresult r = enter(SYM_ModuleUnload, true);
  if (r) return r;
  pthread_mutex_lock(&G.lock);
  struct module *m = (struct module *)lookup((uintptr_t)hm, H_MODULE, "cuModuleUnload", &r);
  if (m) {
    /* Synchronizing, like cuMemFree: launches of its functions finish first. */
    for (bool busy = true; busy;) {
      busy = false;
      for (struct stream *st = G.streams; st && !busy; st = st->snext)
        for (struct op *p = st->head; p && !busy; p = p->next) busy = p->kind == OP_KERNEL && p->fn->mod == m;
      if (busy) pthread_cond_wait(&G.changed, &G.lock);
    }
    module_free(m);
    G.st.live_modules--;
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *out, CUmodule hm, const char *name) {
  CUresult r = enter(SYM_ModuleGetFunction, true);
  if (r) return r;
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&G.lock);
  struct module *m = (struct module *)lookup((uintptr_t)hm, H_MODULE, "cuModuleGetFunction", &r);
  struct func *f = NULL;
  for (unsigned i = 0; m && i < m->nfuncs; i++)
    if (!strcmp(m->funcs[i]->name, name)) f = m->funcs[i];
  if (m && !f) r = CUDA_ERROR_NOT_FOUND;
  if (f && !f->fn) {
    for (unsigned i = 0; i < G.nkern; i++)
      if (!strcmp(G.kern[i].name, name)) f->fn = G.kern[i].fn;
    for (unsigned i = 0; !f->fn && mzemu_builtins[i].name; i++)
      if (!strcmp(mzemu_builtins[i].name, name)) f->fn = mzemu_builtins[i].fn;
    for (unsigned i = 0; !f->fn && mzemu_op_builtins[i].name; i++)
      if (!strcmp(mzemu_op_builtins[i].name, name)) f->fn = mzemu_op_builtins[i].fn;
    if (!f->fn && !f->traps) {
      fprintf(stderr, "mzemu: the PTX entry '%s' has no C implementation registered with the emulator\n", name);
      r = CUDA_ERROR_NOT_FOUND;
      f = NULL;
    }
  }
  if (f && !f->h.handle && !handle_new(&f->h, H_FUNC, m->h.ctx)) r = CUDA_ERROR_OUT_OF_MEMORY;
  else if (f) *out = (CUfunction)f->h.handle;
  pthread_mutex_unlock(&G.lock);
  return r;
}

EXPORT CUresult cuLaunchKernel(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream hs, void **params, void **extra) {
  CUresult r;
  CUresult fault = CUDA_SUCCESS;
  struct ctx *c = begin(SYM_LaunchKernel, "cuLaunchKernel", &r, &fault);
  if (!c) return r;
  struct func *f = (struct func *)lookup((uintptr_t)hf, H_FUNC, "cuLaunchKernel", &r);
  struct stream *s = f ? stream_of(hs, "cuLaunchKernel", &r, true) : NULL;
  if (s) {
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (f->h.ctx != s->h.ctx) r = CUDA_ERROR_INVALID_HANDLE;
    else if (!gx || !gy || !gz || !bx || !by || !bz || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64)
      r = CUDA_ERROR_INVALID_VALUE;
    else if (threads > 1024 || shmem > 48 * 1024) r = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    else if (extra) {
      fprintf(stderr, "mzemu: cuLaunchKernel: the emulator takes parameters through kernelParams only\n");
      r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (f->nparams && !params) r = CUDA_ERROR_INVALID_VALUE;
  }
  struct op *o = s && !r ? op_new() : NULL;
  if (s && !r && !o) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (o) {
    size_t total = 0;
    for (unsigned i = 0; i < f->nparams; i++) total += (f->psize[i] + 7) & ~7u;
    o->pblob = malloc(total ? total : 1);
    if (!o->pblob) {
      free(o);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      /* The driver copies the values before returning. */
      o->kind = OP_KERNEL;
      o->fault = fault;
      o->fn = f;
      unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
      memcpy(o->grid, grid, sizeof grid);
      memcpy(o->block, block, sizeof block);
      size_t off = 0;
      for (unsigned i = 0; i < f->nparams; i++) {
        o->params[i] = o->pblob + off;
        memcpy(o->params[i], params[i], f->psize[i]);
        off += (f->psize[i] + 7) & ~7u;
      }
      stream_push(s, o);
    }
  }
  pthread_mutex_unlock(&G.lock);
  return r;
}
