/* Small helpers the benchmark programs share (not part of maize). */
#ifndef MZ_BENCH_UTIL_H
#define MZ_BENCH_UTIL_H

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* The whole file as a NUL-terminated string (malloc'd), or NULL when it
 * cannot be read. */
static inline char *bench_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

/* Command lines: every benchmark parses with getopt_long, so "-r 5",
 * "--reps 5" and "--reps=5" are the same, --help exits 0, and a bad value,
 * an unknown option or a stray argument exits 2 with a message. */

/* s as one whole decimal integer in [lo, hi] into *out; false after a
 * message naming prog and opt otherwise. */
static inline bool bench_arg_long(const char *prog, const char *opt, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "%s: %s wants a whole number from %ld to %ld, not '%s'\n", prog, opt, lo, hi, s ? s : "");
    return false;
  }
  *out = v;
  return true;
}

/* s as a finite number in [lo, hi]. */
static inline bool bench_arg_double(const char *prog, const char *opt, const char *s, double lo, double hi,
                                    double *out) {
  char *end;
  errno = 0;
  double v = s ? strtod(s, &end) : 0;
  if (!s || errno || end == s || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "%s: %s wants a number from %g to %g, not '%s'\n", prog, opt, lo, hi, s ? s : "");
    return false;
  }
  *out = v;
  return true;
}

/* The message for getopt_long's error returns (optstring starting with
 * ':', opterr 0): ':' a missing value, anything else an unknown option.
 * Returns 2, the exit status. */
static inline int bench_arg_error(const char *prog, int c, char **argv) {
  if (c == ':') fprintf(stderr, "%s: %s needs a value (--help)\n", prog, argv[optind - 1]);
  else fprintf(stderr, "%s: unknown option '%s' (--help)\n", prog, argv[optind - 1]);
  return 2;
}

/* A stray argument after the options: a message and 2; 0 when none. */
static inline int bench_arg_rest(const char *prog, int argc, char **argv) {
  if (optind >= argc) return 0;
  fprintf(stderr, "%s: unexpected argument '%s' (--help)\n", prog, argv[optind]);
  return 2;
}

#endif
