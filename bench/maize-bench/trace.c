/* maize-bench trace: not written yet (issue 6). */
#include <stdio.h>

#include "mzb.h"

int mzb_trace_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "maize-bench trace: not implemented yet\n");
  return 1;
}
