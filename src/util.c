/* Small pieces the core shares: arena, MPSC queue, work-stealing deque,
 * parking, clock, errors, and reading code specs. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deque.h"
#include "handle.h"
#include "objects/mz_op.h"
#include "objects/mz_runtime.h"

_Thread_local int mz__in_runtime_thread MZ__TLS;
_Thread_local int mz__cur_queue MZ__TLS = -1;
_Thread_local const struct mz_runtime *mz__cur_rt MZ__TLS;

uint64_t mz__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double mz__tick_ns_per_tick(uint64_t ns0, uint64_t t0) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  /* CPUID 0x80000007, EDX bit 8: the invariant TSC. */
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return 0;
  uint64_t t1 = mz__ticks(), ns1 = mz__now_ns();
  if (ns1 < ns0 + 1000000u || t1 <= t0) return 0;
  double r = (double)(ns1 - ns0) / (double)(t1 - t0);
  return r > 0.01 && r < 100 ? r : 0; /* 10 MHz to 100 GHz */
#else
  (void)ns0;
  (void)t0;
  return 0;
#endif
}

/* ---- arena ---- */

/* A standard chunk's bytes for blocks: its header and they fill one span. */
enum { MZ__CHUNK = MZ__SPAN - (int)sizeof(struct mz__chunk) };

_Static_assert(sizeof(struct mz__chunk) % 16 == 0, "a chunk's blocks are 16-byte aligned");

/* A chunk with room for cap bytes, at a span boundary (mz__span_owner),
 * not zeroed; NULL on ENOMEM. */
static struct mz__chunk *chunk_new(size_t cap) {
  size_t bytes = (sizeof(struct mz__chunk) + cap + MZ__SPAN - 1) & ~(size_t)(MZ__SPAN - 1);
  struct mz__chunk *c = aligned_alloc(MZ__SPAN, bytes);
  if (c) c->cap = cap;
  return c;
}

/* The piece of a chunk zeroed at a time ahead of its blocks: small enough
 * that a memset of it stays in vector stores (no string instruction) and
 * that a small graph zeroes little of its chunk, large enough that its
 * call is shared by several nodes' blocks. */
enum { MZ__ZERO_PIECE = 1024 };

/* A kept larger chunk of p with room for cap bytes and at most twice
 * that (the smallest such), or NULL. */
static struct mz__chunk *big_take(struct mz__chunk_pool *p, size_t cap) {
  mz__spin_lock(&p->lock);
  struct mz__chunk **best = NULL;
  for (struct mz__chunk **pc = &p->big; *pc; pc = &(*pc)->next)
    if ((*pc)->cap >= cap && (*pc)->cap / 2 <= cap && (!best || (*pc)->cap < (*best)->cap)) best = pc;
  struct mz__chunk *c = NULL;
  if (best) {
    c = *best;
    *best = c->next;
    p->bigbytes -= c->cap;
  }
  mz__spin_unlock(&p->lock);
  return c;
}

/* Keep the larger chunks of list big while the pool's stay within max
 * standard chunks' bytes; free the rest. */
static void big_give(struct mz__chunk_pool *p, struct mz__chunk *big) {
  mz__spin_lock(&p->lock);
  size_t budget = p->max * (size_t)MZ__CHUNK;
  while (big && p->bigbytes + big->cap <= budget) {
    struct mz__chunk *n = big->next;
    big->next = p->big;
    p->big = big;
    p->bigbytes += big->cap;
    big = n;
  }
  mz__spin_unlock(&p->lock);
  while (big) {
    struct mz__chunk *n = big->next;
    free(big);
    big = n;
  }
}

void *mz__chunk_pool_get(struct mz__chunk_pool *p, size_t bytes) {
  struct mz__chunk *c = bytes > MZ__CHUNK ? big_take(p, bytes) : NULL;
  if (!c && (c = malloc(sizeof *c + bytes))) c->cap = bytes; /* (no span: not an arena's) */
  return c ? c->data : NULL;
}

void mz__chunk_pool_put(struct mz__chunk_pool *p, void *block) {
  if (!block) return;
  struct mz__chunk *c = (struct mz__chunk *)(void *)((unsigned char *)block - offsetof(struct mz__chunk, data));
  if (c->cap <= MZ__CHUNK) {
    free(c);
    return;
  }
  c->next = NULL;
  big_give(p, c);
}

void *mz__arena_alloc_slow(struct mz__arena *a, size_t bytes) {
  if ((size_t)(a->cend - a->ptr) >= bytes) { /* the chunk has room: zero the next piece */
    size_t z = (size_t)(a->ptr + bytes - a->end); /* what the block needs zeroed, > 0 */
    size_t more = z > MZ__ZERO_PIECE ? z : MZ__ZERO_PIECE;
    if (more > (size_t)(a->cend - a->end)) more = (size_t)(a->cend - a->end);
    memset(a->end, 0, more);
    a->end += more;
    void *p = a->ptr;
    a->ptr += bytes;
    return p;
  }
  size_t cap = bytes > MZ__CHUNK ? bytes : MZ__CHUNK;
  struct mz__chunk *c = NULL;
  if (cap == MZ__CHUNK && a->pool) {
    mz__spin_lock(&a->pool->lock);
    c = a->pool->free;
    if (c) {
      a->pool->free = c->next;
      a->pool->n--;
    }
    mz__spin_unlock(&a->pool->lock);
  }
  if (!c) c = chunk_new(cap);
  if (!c) return NULL;
  c->next = a->head;
  c->owner = a->owner;
  c->aux = a->aux;
  a->head = c;
  /* Zeroed ahead: the block, and the rest of the first piece. */
  size_t z = bytes > MZ__ZERO_PIECE ? bytes : MZ__ZERO_PIECE;
  if (z > cap) z = cap;
  memset(c->data, 0, z);
  a->ptr = c->data + bytes;
  a->end = c->data + z;
  a->cend = c->data + cap;
  return c->data;
}

void mz__arena_free(struct mz__arena *a) {
  struct mz__chunk_pool *p = a->pool;
  /* Outside the lock: the chunks to keep (at most max of them), the rest
   * freed; under it, only a splice (and a cut of at most max steps). */
  struct mz__chunk *keep = NULL, *tail = NULL, *c = a->head;
  size_t k = 0;
  while (c) {
    struct mz__chunk *n = c->next;
    if (p && c->cap == MZ__CHUNK && k < p->max) {
      c->next = keep;
      keep = c;
      if (!tail) tail = c;
      k++;
    } else {
      free(c);
    }
    c = n;
  }
  struct mz__chunk *extra = NULL;
  if (keep) {
    mz__spin_lock(&p->lock);
    size_t room = p->n < p->max ? p->max - p->n : 0;
    if (k > room) { /* keep the first room chunks of the list */
      struct mz__chunk *last = NULL;
      extra = keep;
      for (size_t i = 0; i < room; i++) {
        last = extra;
        extra = extra->next;
      }
      if (last) last->next = NULL;
      tail = last;
      keep = room ? keep : NULL;
      k = room;
    }
    if (keep) {
      tail->next = p->free;
      p->free = keep;
      p->n += k;
    }
    mz__spin_unlock(&p->lock);
  }
  while (extra) {
    struct mz__chunk *n = extra->next;
    free(extra);
    extra = n;
  }
  a->head = NULL;
  a->ptr = a->end = a->cend = NULL;
}

void mz__chunk_pool_fini(struct mz__chunk_pool *p) {
  while (p->free) {
    struct mz__chunk *n = p->free->next;
    free(p->free);
    p->free = n;
  }
  p->n = 0;
  while (p->big) {
    struct mz__chunk *n = p->big->next;
    free(p->big);
    p->big = n;
  }
  p->bigbytes = 0;
}

/* ---- MPSC queue (Dmitry Vyukov's intrusive design) ---- */

void mz__mpsc_init(struct mz__mpsc *q, struct mz_op *stub) {
  atomic_store_explicit(mz__op_next(stub), NULL, memory_order_relaxed);
  q->stub = stub;
  q->head = stub;
  atomic_store_explicit(&q->tail, stub, memory_order_relaxed);
}

bool mz__mpsc_push(struct mz__mpsc *q, struct mz_op *n) {
  atomic_store_explicit(mz__op_next(n), NULL, memory_order_relaxed);
  struct mz_op *prev = atomic_exchange_explicit(&q->tail, n, memory_order_acq_rel);
  atomic_store_explicit(mz__op_next(prev), n, memory_order_release);
  return prev == q->stub;
}

struct mz_op *mz__mpsc_pop(struct mz__mpsc *q) {
  struct mz_op *head = q->head;
  struct mz_op *next = atomic_load_explicit(mz__op_next(head), memory_order_acquire);
  if (head == q->stub) {
    if (!next) return NULL;
    q->head = next;
    head = next;
    next = atomic_load_explicit(mz__op_next(next), memory_order_acquire);
  }
  if (next) {
    q->head = next;
    return head;
  }
  struct mz_op *tail = atomic_load_explicit(&q->tail, memory_order_acquire);
  if (tail != head) return NULL; /* a push is half done: try again later */
  mz__mpsc_push(q, q->stub);
  next = atomic_load_explicit(mz__op_next(head), memory_order_acquire);
  if (next) {
    q->head = next;
    return head;
  }
  return NULL;
}

/* ---- parking ---- */

void mz__parker_init(struct mz__parker *p) {
  atomic_init(&p->state, 0);
  atomic_init(&p->wake, false);
  pthread_mutex_init(&p->m, NULL);
  pthread_cond_init(&p->c, NULL);
}

void mz__parker_fini(struct mz__parker *p) {
  pthread_mutex_destroy(&p->m);
  pthread_cond_destroy(&p->c);
}

/* Wakers set the flag first, then signal only if the owner said it might
 * sleep: a wake between the owner's last check and its sleep is never lost
 * because both sides go through the mutex for the sleeping case. */
void mz__parker_wake(struct mz__parker *p) {
  atomic_store_explicit(&p->wake, true, memory_order_seq_cst);
  if (atomic_load_explicit(&p->state, memory_order_seq_cst) == 1) {
    pthread_mutex_lock(&p->m);
    pthread_cond_signal(&p->c);
    pthread_mutex_unlock(&p->m);
  }
}

void mz__parker_park(struct mz__parker *p) {
  pthread_mutex_lock(&p->m);
  atomic_store_explicit(&p->state, 1, memory_order_seq_cst);
  while (!atomic_load_explicit(&p->wake, memory_order_seq_cst)) pthread_cond_wait(&p->c, &p->m);
  atomic_store_explicit(&p->state, 0, memory_order_seq_cst);
  atomic_store_explicit(&p->wake, false, memory_order_seq_cst);
  pthread_mutex_unlock(&p->m);
}

/* ---- threads ---- */

void mz__thread_name(pthread_t t, const char *fmt, ...) {
  char name[16] = "mz-";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name + 3, sizeof name - 3, fmt, ap);
  va_end(ap);
  (void)pthread_setname_np(t, name);
}

/* ---- errors ---- */

char *mz__strdupf(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return strdup(buf);
}

int mz__set_error(const mz_runtime *crt, int code, const char *fmt, ...) {
  mz_runtime *rt = (mz_runtime *)crt; /* the message buffer is the runtime's to change */
  if (!MZ__LIVE(rt, MZ__TAG_RUNTIME)) return code; /* no runtime to hold the message */
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&rt->errlock);
  vsnprintf(rt->errmsg, sizeof rt->errmsg, fmt, ap);
  pthread_mutex_unlock(&rt->errlock);
  va_end(ap);
  return code;
}

static void log_v(const mz_runtime *rt, int level, const char *fmt, va_list ap) {
  static const char *const prefix[] = {"error", "warning", "info", "debug"};
  if (rt && (rt->quiet || level > rt->log_level)) return;
  if (!rt && level > MZ__LOG_WARN) return;
  fprintf(stderr, "maize: %s: ", prefix[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void mz__log(const mz_runtime *rt, int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(rt, level, fmt, ap);
  va_end(ap);
}

void mz__warn(const mz_runtime *rt, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(rt, MZ__LOG_WARN, fmt, ap);
  va_end(ap);
}

/* ---- sizes from the environment ---- */

/* "64M": decimal digits only (no sign, space, fraction, exponent or hex:
 * strtod read "0.5" as a limit of 0, that is none), then K, M or G (powers
 * of 1024, either case) and an optional B.  1 to 2^60 bytes. */
bool mz__parse_bytes(const char *s, uint64_t *out) {
  uint64_t v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > ((1ull << 60) - 9) / 10) return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  if (p == s) return false;
  unsigned shift = 0;
  switch (*p) {
    case 'K': case 'k': shift = 10; p++; break;
    case 'M': case 'm': shift = 20; p++; break;
    case 'G': case 'g': shift = 30; p++; break;
    default: break;
  }
  if (*p == 'B' || *p == 'b') p++;
  if (*p || v == 0 || v > (1ull << 60) >> shift) return false;
  *out = v << shift;
  return true;
}

/* ---- launches ---- */

/* Work sizes every device can take: a zero or huge global size
 * made PoCL run for minutes, and CUDA's grid truncated it silently. */
bool mz__launch_ok(const mz_launch *l) {
  uint64_t items = 1;
  for (unsigned d = 0; d < l->ndim; d++) {
    if (!l->global[d] || l->global[d] > UINT32_MAX || l->local[d] > UINT32_MAX) return false;
    if (items > (1ull << 36) / l->global[d]) return false; /* (no overflow) */
    items *= l->global[d];
  }
  return true;
}

/* ---- user-supplied paths ---- */

/* Every read of a path a user gave (code specs, perf models) opens it here
 *.  O_NONBLOCK keeps a FIFO with no writer from blocking the
 * open; fstat then refuses anything but a regular file (a FIFO, a device
 * such as /dev/zero that reads without end, a directory).  The flag is
 * cleared before reading so that reads of the regular file behave as
 * usual.  On failure returns NULL with *rc set (MZ_ENOENT, MZ_EINVAL for
 * not a regular file, MZ_EIO) and a message in err. */
FILE *mz__fopen_regular(const char *path, int *rc, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    *rc = errno == ENOENT ? MZ_ENOENT : MZ_EIO;
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(err, errlen, "cannot stat '%s': %s", path, strerror(errno));
    close(fd);
    *rc = MZ_EIO;
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "'%s' is not a regular file (%s)", path,
             S_ISDIR(st.st_mode)    ? "a directory"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
             : S_ISCHR(st.st_mode)  ? "a character device"
             : S_ISBLK(st.st_mode)  ? "a block device"
             : S_ISSOCK(st.st_mode) ? "a socket"
                                    : "not readable as a file");
    close(fd);
    *rc = MZ_EINVAL;
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    close(fd);
    *rc = MZ_ENOMEM;
    return NULL;
  }
  *rc = MZ_OK;
  return f;
}

/* ---- code specs ---- */

int mz__code_load(const mz_code_spec *spec, char **data, size_t *size, char **err) {
  *data = NULL;
  *size = 0;
  if (err) *err = NULL;
  if (spec->data) {
    size_t n = spec->size ? spec->size : strlen(spec->data);
    char *d = malloc(n + 1);
    if (!d) return MZ_ENOMEM;
    memcpy(d, spec->data, n);
    d[n] = 0;
    *data = d;
    *size = n;
    return MZ_OK;
  }
  if (!spec->path) {
    if (err) *err = strdup("code spec has neither data nor path");
    return MZ_EINVAL;
  }
  char why[512];
  int orc = MZ_OK;
  FILE *f = mz__fopen_regular(spec->path, &orc, why, sizeof why);
  if (!f) {
    if (err) *err = strdup(why);
    return orc == MZ_ENOENT ? MZ_EIO : orc; /* a missing file stays MZ_EIO, as before */
  }
  size_t cap = 65536, n = 0;
  char *d = malloc(cap + 1);
  while (d) {
    size_t got = fread(d + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *nd = realloc(d, cap * 2 + 1);
    if (!nd) {
      free(d);
      d = NULL;
      break;
    }
    d = nd;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!d) return MZ_ENOMEM;
  if (bad) {
    free(d);
    if (err) *err = strdup("read error");
    return MZ_EIO;
  }
  d[n] = 0;
  *data = d;
  *size = n;
  return MZ_OK;
}

/* ---- dtypes ---- */

size_t mz_dtype_size(mz_dtype t) {
  static const unsigned char sz[MZ_DTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8};
  return (unsigned)t < MZ_DTYPE_COUNT ? sz[t] : 0;
}

const char *mz_dtype_name(mz_dtype t) {
  static const char *const names[MZ_DTYPE_COUNT] = {"i8",  "u8",  "i16", "u16", "i32",
                                                    "u32", "i64", "u64", "f32", "f64"};
  return (unsigned)t < MZ_DTYPE_COUNT ? names[t] : NULL;
}

/* ---- the work-stealing deque (src/deque.h) ---- */

static struct mz__deque_array *deque_array(size_t capacity) {
  struct mz__deque_array *a = malloc(sizeof *a + capacity * sizeof a->slot[0]);
  if (!a) return NULL;
  a->mask = capacity - 1;
  a->older = NULL;
  for (size_t i = 0; i < capacity; i++) atomic_init(&a->slot[i], NULL);
  return a;
}

bool mz__deque_init(struct mz__deque *d, size_t capacity) {
  atomic_init(&d->top, 0);
  atomic_init(&d->bottom, 0);
  struct mz__deque_array *a = deque_array(capacity);
  atomic_init(&d->array, a);
  return a != NULL;
}

void mz__deque_fini(struct mz__deque *d) {
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
  while (a) {
    struct mz__deque_array *o = a->older;
    free(a);
    a = o;
  }
  atomic_store_explicit(&d->array, NULL, memory_order_relaxed);
}

bool mz__deque_grow(struct mz__deque *d) {
  struct mz__deque_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  struct mz__deque_array *n = deque_array(2 * (a->mask + 1));
  if (!n) return false;
  for (int64_t i = t; i < b; i++)
    atomic_store_explicit(&n->slot[(size_t)i & n->mask],
                          atomic_load_explicit(&a->slot[(size_t)i & a->mask], memory_order_relaxed),
                          memory_order_relaxed);
  n->older = a; /* a thief may still read it */
  atomic_store_explicit(&d->array, n, memory_order_release);
  return true;
}
