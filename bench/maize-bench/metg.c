/* maize-bench metg: not written yet (issue 6). */
#include <stdio.h>

#include "mzb.h"

int mzb_metg_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "maize-bench metg: not implemented yet\n");
  return 1;
}
