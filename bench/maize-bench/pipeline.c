/* maize-bench pipeline: not written yet (issue 6). */
#include <stdio.h>

#include "mzb.h"

int mzb_pipeline_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "maize-bench pipeline: not implemented yet\n");
  return 1;
}
