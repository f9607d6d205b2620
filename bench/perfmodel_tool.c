/* maize-perfmodel: print the perf models kept on disk as a table.
 *
 * Usage: maize-perfmodel [DIR]
 * DIR defaults to where the runtime keeps them: $MZ_PERFMODEL_DIR, else
 * $XDG_CACHE_HOME/maize, else ~/.cache/maize.  One line per model and
 * size bucket: kernel, device, mean footprint in bytes, sample count, mean
 * and standard deviation of the execution time; then one line per link
 * file (measured transfer costs): from, to, latency and bandwidth.  Files
 * that are corrupt or foreign are listed as ignored, with the reason. */
#include <stdio.h>
#include <string.h>

#include "perfmodel.h"

int main(int argc, char **argv) {
  if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
    fprintf(stderr, "usage: %s [DIR]\n", argv[0]);
    return 2;
  }
  char dir[4096];
  if (argc == 2) snprintf(dir, sizeof dir, "%s", argv[1]);
  else mz__pm_dir(dir, sizeof dir);
  if (!dir[0]) {
    fprintf(stderr, "maize-perfmodel: perf models are not kept on disk (MZ_PERFMODEL_DIR=off)\n");
    return 1;
  }
  printf("# perf models in %s\n", dir);
  int n = mz__pm_print(stdout, dir);
  if (n < 0) {
    fprintf(stderr, "maize-perfmodel: cannot read %s\n", dir);
    return 1;
  }
  printf("# %d model%s\n", n, n == 1 ? "" : "s");
  return 0;
}
