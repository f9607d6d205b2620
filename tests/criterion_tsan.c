/* Lets Criterion start under ThreadSanitizer (linked into the tests of
 * sanitizer builds; empty otherwise).
 *
 * Criterion's sandbox (BoxFort) maps its shared arena at a random address
 * between 0x2000'0000'0000 and 0x7f00'0000'0000, drawn with rand_r(), and
 * retries 10 times when the pages there are taken.  Under TSan nearly all
 * of that range is TSan's shadow, meta or protected memory, so every try
 * fails and Criterion aborts with "Could not initialize inheritable arena:
 * Resource temporarily unavailable" (Criterion issue #274).  Defining
 * rand_r here interposes on the C library's for every caller in the test
 * process (Criterion calls it only for this): it returns offsets that put
 * the arenas in 0x5600'0000'0000.., inside TSan's application range for
 * PIE binaries and above where they are loaded, 256 MiB apart so each
 * arena can grow in place.  Nothing in maize calls rand_r. */
#if defined(__SANITIZE_THREAD__)
#include <stdlib.h>

int rand_r(unsigned int *seed) {
  /* BoxFort: base = 0x2000'0000'0000 + (r & 0x3fffff) << 24. */
  static _Atomic unsigned next = 0;
  (void)seed;
  return (int)(0x360000u + 16u * (next++ % 0x1000u));
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int mz__criterion_tsan_unused;
#endif
