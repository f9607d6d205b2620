/* maize-perfmodel: print the perf models kept on disk as a table.
 *
 * Usage: maize-perfmodel [DIR]
 * DIR defaults to where the runtime keeps them: $MZ_PERFMODEL_DIR, else
 * $XDG_CACHE_HOME/maize, else ~/.cache/maize.  One line per model and
 * size bucket: kernel, device, mean footprint in bytes, sample count, mean
 * and standard deviation of the execution time; then one line per link
 * file (measured transfer costs): from, to, latency and bandwidth.  Files
 * that are corrupt or foreign are listed as ignored, with the reason. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "maize/version.h"
#include "perfmodel.h"

static void usage(FILE *f) {
  fprintf(f, "usage: maize-perfmodel [DIR]\n"
             "  print the perf models kept in DIR (default: $MZ_PERFMODEL_DIR, else\n"
             "  $XDG_CACHE_HOME/maize, else ~/.cache/maize)\n"
             "  -h, --help     this text\n"
             "  -V, --version  the maize version\n");
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return 0;
    case 'V': printf("maize-perfmodel %s\n", mz_version()); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (argc - optind > 1) {
    usage(stderr);
    return 2;
  }
  char dir[4096];
  if (optind < argc) snprintf(dir, sizeof dir, "%s", argv[optind]);
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
