/* maize-bench taskbench: not written yet (issue 6). */
#include <stdio.h>

#include "mzb.h"

int mzb_taskbench_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "maize-bench taskbench: not implemented yet\n");
  return 1;
}
