/* maize-perfmodel: print the perf models kept on disk as a table.
 *
 * Usage: maize-perfmodel [-k KERNEL] [-d DEVICE] [DIR]
 * DIR defaults to where the runtime keeps them: $MZ_PERFMODEL_DIR, else
 * $XDG_CACHE_HOME/maize, else ~/.cache/maize.  One line per model and
 * size bucket: kernel, device, mean footprint in bytes, sample count, mean
 * and standard deviation of the execution time; then one line per link
 * file (measured transfer costs): from, to, latency and bandwidth.  Files
 * that are corrupt or foreign are listed as ignored, with the reason.
 * -k and -d keep the models whose kernel and device names contain the
 * given text (as StarPU's starpu_perfmodel_display -s picks a symbol). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "maize/version.h"
#include "perfmodel.h"

static void usage(FILE *f) {
  fprintf(f, "usage: maize-perfmodel [-k KERNEL] [-d DEVICE] [DIR]\n"
             "  print the perf models kept in DIR (default: $MZ_PERFMODEL_DIR, else\n"
             "  $XDG_CACHE_HOME/maize, else ~/.cache/maize)\n"
             "  -k, --kernel K  only kernels whose name contains K\n"
             "  -d, --device D  only devices whose name contains D (and their links)\n"
             "  -h, --help     this text\n"
             "  -V, --version  the maize version\n");
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},           {"version", no_argument, NULL, 'V'},
      {"kernel", required_argument, NULL, 'k'},   {"device", required_argument, NULL, 'd'},
      {NULL, 0, NULL, 0}};
  const char *kernel = NULL, *device = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "hVk:d:", longopts, NULL)) != -1) {
    switch (c) {
    case 'k': kernel = optarg; break;
    case 'd': device = optarg; break;
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
  if (kernel || device)
    printf("# only kernels matching '%s' and devices matching '%s'\n", kernel ? kernel : "*", device ? device : "*");
  int n = mz__pm_print_filtered(stdout, dir, kernel, device);
  if (n < 0) {
    fprintf(stderr, "maize-perfmodel: cannot read %s\n", dir);
    return 1;
  }
  printf("# %d model%s\n", n, n == 1 ? "" : "s");
  return 0;
}
