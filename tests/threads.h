/* test_threads_named: how many of this process's threads carry a name
 * (/proc/self/task/TID/comm), for the tests of maize's thread names; -1
 * where /proc cannot be read.  No test framework: the MPI test, which has
 * none, uses it too. */
#ifndef MZ_TEST_THREADS_H
#define MZ_TEST_THREADS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

static inline int test_threads_named(const char *name) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* a thread that just ended */
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    n += !strcmp(comm, name);
  }
  closedir(d);
  return n;
}

#endif
