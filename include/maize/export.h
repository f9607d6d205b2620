/* maize: symbol export.  The library is built with -fvisibility=hidden, so
 * only what the public headers declare is exported from libmaize.so; the
 * internal mz__ names stay inside it (the static library, which the tests
 * and benchmarks link, still has them).  Each public header opens its
 * declarations with MZ_API_BEGIN and closes them with MZ_API_END; MZ_API
 * marks a single declaration outside such a block. */
#ifndef MAIZE_EXPORT_H
#define MAIZE_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define MZ_API __attribute__((visibility("default")))
#define MZ_API_BEGIN _Pragma("GCC visibility push(default)")
#define MZ_API_END _Pragma("GCC visibility pop")
#else
#define MZ_API
#define MZ_API_BEGIN
#define MZ_API_END
#endif

#endif
