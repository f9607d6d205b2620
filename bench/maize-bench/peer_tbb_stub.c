/* The TBB peer where oneTBB or a C++ compiler was not found at build time:
 * it says so when asked for (see peer_tbb.cpp). */
#include <stdio.h>

#include "tb_systems.h"

static int tbt_create(const tb_app *app, const tb_sys_opts *opts, void **state, char *err, size_t errsz) {
  (void)app;
  (void)opts;
  *state = NULL;
  snprintf(err, errsz, "tbb: not built (oneTBB, libtbb-dev, or a C++ compiler was not found)");
  return -1;
}
static int tbt_run(void *state, double *seconds, char *err, size_t errsz) {
  (void)state;
  *seconds = 0;
  snprintf(err, errsz, "tbb: not built");
  return -1;
}
static void tbt_destroy(void *state) { (void)state; }

const tb_system tb_system_tbb = {
    .name = "tbb",
    .available = 0,
    .create = tbt_create,
    .run = tbt_run,
    .destroy = tbt_destroy,
};
