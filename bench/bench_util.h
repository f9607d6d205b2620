/* Small helpers the benchmark programs share (not part of maize). */
#ifndef MZ_BENCH_UTIL_H
#define MZ_BENCH_UTIL_H

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

#endif
