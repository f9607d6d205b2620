/* maize internals: small pieces the core shares (src/util.c): locks, a
 * bump allocator, an MPSC queue, a parking spot for one thread, thread
 * names, and the thread-local markers of runtime threads.  Nothing here
 * knows a graph, a run or a device.
 *
 * Threads and locks: each lock is for short sections and never held
 * across a blocking call; the queue and the parker say who may call what. */
#ifndef MZ_UTIL_H
#define MZ_UTIL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* MZ__TSAN: built with ThreadSanitizer (GCC's macro, clang's feature),
 * which does not model atomic_thread_fence: code that relies on a fence
 * uses an equivalent read-modify-write there. */
#if defined(__SANITIZE_THREAD__)
#define MZ__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MZ__TSAN 1
#endif
#endif

/* The longest message a graph, a run or the runtime keeps. */
#define MZ__ERRLEN 1024

struct mz_op;
struct mz_runtime;

/* The home slot of pointer p in an open-addressed table of cap slots (a
 * power of two, 2 to 2^63): the top bits of the product with 2^64 / phi
 * (Fibonacci hashing), which spread pointers at any fixed stride.  The
 * product's low bits depend only on the pointer's low bits, which
 * objects allocated at a power-of-two stride share: 600 pointers in 2,048
 * slots took up to 19 probes at a 1 KiB stride, 600 at 64 KiB.
 * mz__ptr_slot_shift takes 64 - log2(cap), kept by a hot table. */
static inline size_t mz__ptr_slot_shift(const void *p, unsigned shift) {
  return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> shift);
}
static inline size_t mz__ptr_slot(const void *p, size_t cap) {
  return mz__ptr_slot_shift(p, 64u - (unsigned)__builtin_ctzll((unsigned long long)cap));
}

/* A monotonic clock in nanoseconds. */
uint64_t mz__now_ns(void);

/* A cheap counter of the CPU's time-stamp ticks, for spans that a worker
 * measures per burst of nodes (struct mz__acct): a clock_gettime is tens of
 * nanoseconds in a virtual machine (kvm-clock), a tick read about 10.  Its
 * rate, where it is constant, is measured once per runtime
 * (mz__tick_ns_per_tick); 0 where there is no such counter. */
static inline uint64_t mz__ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return 0;
#endif
}
/* Nanoseconds per tick, from two readings of both clocks (ns0, t0: the
 * first; the second is taken here) at least 1 ms apart, where the CPU says
 * its tick rate is constant and goes on in sleep states (invariant TSC);
 * else 0: use mz__now_ns. */
double mz__tick_ns_per_tick(uint64_t ns0, uint64_t t0);

/* A test-and-set spinlock: one flag, for short critical sections. */
typedef struct { atomic_flag f; } mz__spin;
static inline void mz__spin_lock(mz__spin *s) {
  while (atomic_flag_test_and_set_explicit(&s->f, memory_order_acquire)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
static inline void mz__spin_unlock(mz__spin *s) { atomic_flag_clear_explicit(&s->f, memory_order_release); }

/* One round of a wait for something another thread is about to do: the
 * first `pauses` rounds (counted in *spins) a pause, then a yield of the
 * CPU, in case that thread was preempted on it. */
static inline void mz__spin_or_yield(unsigned *spins, unsigned pauses) {
  if (++*spins < pauses) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

/* A lock for sections that are short and rarely contended, but may now
 * and then be long (a graph's builders against the scheduling of a large
 * graph): one atomic exchange to take it; a waiter spins briefly, then
 * yields the CPU until the holder is done. */
typedef struct { _Atomic bool held; } mz__ylock;
static inline void mz__ylock_lock(mz__ylock *l) {
  unsigned spins = 0;
  while (atomic_exchange_explicit(&l->held, true, memory_order_acquire)) {
    while (atomic_load_explicit(&l->held, memory_order_relaxed)) mz__spin_or_yield(&spins, 128);
  }
}
static inline void mz__ylock_unlock(mz__ylock *l) { atomic_store_explicit(&l->held, false, memory_order_release); }

/* A bump allocator: many small blocks, freed together.  Its chunks start
 * at a span boundary (MZ__SPAN bytes), with their owner's address (the
 * arena's: a graph, or NULL) and a word the owner gives its blocks (aux)
 * at its start, and every block of a chunk starts in its first span (a
 * block larger than a standard chunk has a chunk of its own): so a
 * block's owner is found from its address alone (mz__span_owner), and a
 * graph's nodes need not store their graph. */
enum { MZ__SPAN = 1 << 20 };
struct mz__chunk {
  void *owner;
  struct mz__chunk *next;
  size_t cap;
  void *aux;
  unsigned char data[];
};
static inline const struct mz__chunk *mz__span_chunk(const void *p) {
  return (const struct mz__chunk *)(uintptr_t)((uintptr_t)p & ~(uintptr_t)(MZ__SPAN - 1));
}
/* The owner of the arena whose block holds p (see struct mz__chunk). */
static inline void *mz__span_owner(const void *p) { return mz__span_chunk(p)->owner; }
/* The aux word of the arena whose block holds p (a graph's: its table of
 * cold records, so that a node finds it without the graph's layout). */
static inline void *mz__span_aux(const void *p) { return mz__span_chunk(p)->aux; }
/* Chunks of the standard size that arenas gave back, kept for the next
 * arenas of the same owner (a runtime), so that a graph built after
 * another reuses its memory instead of faulting fresh pages in.  Up to max
 * chunks are kept; the rest go back to malloc.  Thread: any (its lock). */
struct mz__chunk_pool {
  mz__spin lock;
  struct mz__chunk *free;
  size_t n, max;
  /* Blocks larger than a standard chunk given back (mz__chunk_pool_put:
   * a replay's task list), kept up to max standard chunks' bytes in all:
   * glibc unmaps a freed block that large, or trims its heap, and each
   * re-run of a large graph faulted its list in again (mz-bench-overhead,
   * independent re-run on one worker: 62-76 -> 34-47 ns a task on a
   * 2-core virtual machine). */
  struct mz__chunk *big;
  size_t bigbytes;
};
void mz__chunk_pool_fini(struct mz__chunk_pool *p); /* frees the kept chunks */
/* A block of bytes (not zeroed; NULL on ENOMEM) for an array that lives
 * apart from any arena (a run's task list, which outlives the run's
 * arena), from p's kept larger chunks where one fits; given back with
 * mz__chunk_pool_put, which keeps it as the arenas' larger chunks are. */
void *mz__chunk_pool_get(struct mz__chunk_pool *p, size_t bytes);
void mz__chunk_pool_put(struct mz__chunk_pool *p, void *block);

/* Bump allocation, freed all at once.  pool: where chunks come from and go
 * back to (NULL: malloc and free). */
struct mz__arena {
  struct mz__chunk *head;
  /* The free part of head's chunk that is zeroed already [ptr, end), and
   * the chunk's end (cend >= end): a chunk is zeroed ahead of the blocks
   * in pieces (mz__arena_alloc_slow), not block by block, so that a block
   * costs no memset call (a graph makes several per node). */
  unsigned char *ptr, *end, *cend;
  struct mz__chunk_pool *pool;
  void *owner;                /* written into each chunk it takes: mz__span_owner */
  void *aux;                  /* and this: mz__span_aux */
};
/* Zeroes the next piece of head's chunk, or takes a new chunk, for bytes
 * (rounded already); NULL on ENOMEM. */
void *mz__arena_alloc_slow(struct mz__arena *a, size_t bytes);
/* zeroed, 8-aligned; NULL on ENOMEM.  Inline: a bump of a pointer over
 * memory zeroed ahead. */
static inline void *mz__arena_alloc(struct mz__arena *a, size_t bytes) {
  /* 8-byte steps: nothing kept in an arena needs more alignment than a
   * pointer or a uint64_t, and a graph's tuples (32 bytes and a pointer
   * per element) and tasks' blocks would round up in 16-byte steps. */
  bytes = (bytes + 7) & ~(size_t)7;
  if (!bytes) bytes = 8; /* a distinct, non-NULL block even then */
  if (__builtin_expect((size_t)(a->end - a->ptr) < bytes, 0)) return mz__arena_alloc_slow(a, bytes);
  void *p = a->ptr;
  a->ptr += bytes;
  return p;
}
void mz__arena_free(struct mz__arena *a); /* keeps a->pool */

/* An intrusive multi-producer single-consumer queue (Vyukov): push from any
 * thread, pop from the owner only.  Items are tasks linked through
 * the task (mz__op_next). */
struct mz__mpsc {
  _Atomic(struct mz_op *) tail;
  struct mz_op *head;
  struct mz_op *stub;
};
void mz__mpsc_init(struct mz__mpsc *q, struct mz_op *stub);
/* Returns true when the queue was empty before the push. */
bool mz__mpsc_push(struct mz__mpsc *q, struct mz_op *n);
struct mz_op *mz__mpsc_pop(struct mz__mpsc *q);

/* A parking spot for one consumer thread: spin, then sleep until woken. */
struct mz__parker {
  _Atomic int state; /* 0 running, 1 about to sleep / sleeping */
  pthread_mutex_t m;
  pthread_cond_t c;
  _Atomic bool wake;
};
void mz__parker_init(struct mz__parker *p);
void mz__parker_fini(struct mz__parker *p);
void mz__parker_wake(struct mz__parker *p);
/* Sleep unless woken since the last call; returns after a wake. */
void mz__parker_park(struct mz__parker *p);

/* The thread-locals below are read on every node's path.  In the shared
 * library the default model for them reaches each through a call to
 * __tls_get_addr; initial-exec reads them at a fixed offset from the
 * thread pointer.  The cost: 16 bytes of the static TLS that glibc keeps
 * for libraries loaded later with dlopen, which is far larger. */
#define MZ__TLS __attribute__((tls_model("initial-exec")))

/* The thread-local marker of runtime threads (workers, submission threads,
 * callbacks) used to refuse blocking calls that would deadlock. */
extern _Thread_local int mz__in_runtime_thread MZ__TLS;
/* The queue whose CPU worker this thread is, or -1, and that queue's
 * runtime (mz_sched_current_queue, and completion accounting in exec.c). */
extern _Thread_local int mz__cur_queue MZ__TLS;
extern _Thread_local const struct mz_runtime *mz__cur_rt MZ__TLS;

/* A malloc'd printf-formatted message (NULL when out of memory). */
char *mz__strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Name thread t (as top -H, ps -L, gdb and /proc/PID/task/TID/comm show
 * it) "mz-" followed by the formatted text, cut to the kernel's 15
 * characters, so that a user can tell maize's threads (and what each
 * costs) from the program's own.  Best effort: a failure changes nothing. */
void mz__thread_name(pthread_t t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
