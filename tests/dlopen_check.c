/* A program that loads libmaize.so with dlopen, after it started: the
 * library's thread-locals use the initial-exec TLS model (src/util.h), which
 * takes its room from the static TLS glibc keeps for such late loads.  It
 * creates a CPU runtime, runs one host node on it, and unloads the library.
 * Usage: dlopen_check PATH_TO_LIBMAIZE_SO.  Exit 0 on success. */
#include <dlfcn.h>
#include <stdio.h>

#include "maize.h"

static int count(const mz_call *call) {
  ++*(int *)call->user;
  return 0;
}

/* Each call through a pointer of the header's own type. */
#define SYM(name)                                                         \
  __typeof__(&name) name##_p = (__typeof__(&name))dlsym(h, #name);        \
  if (!name##_p) {                                                        \
    fprintf(stderr, "dlopen_check: %s not found: %s\n", #name, dlerror()); \
    return 1;                                                             \
  }

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_check LIBMAIZE_SO\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen_check: %s\n", dlerror());
    return 1;
  }
  SYM(mz_runtime_create)
  SYM(mz_runtime_destroy)
  SYM(mz_graph_create)
  SYM(mz_graph_destroy)
  SYM(mz_host)
  SYM(mz_schedule)
  SYM(mz_future_wait)
  SYM(mz_future_destroy)
  mz_runtime *rt = NULL;
  mz_graph *g = NULL;
  mz_future *f = NULL;
  int ran = 0;
  int rc = mz_runtime_create_p(NULL, &rt);
  if (!rc) rc = mz_graph_create_p(rt, &g);
  if (!rc) rc = mz_schedule_p(g, mz_host_p(g, count, &ran, NULL), NULL, &f);
  if (!rc) rc = mz_future_wait_p(f);
  if (f) mz_future_destroy_p(f);
  if (g) mz_graph_destroy_p(g);
  if (rt) mz_runtime_destroy_p(rt);
  dlclose(h);
  if (rc || ran != 1) {
    fprintf(stderr, "dlopen_check: status %d, the host node ran %d times\n", rc, ran);
    return 1;
  }
  printf("ok: libmaize.so loaded with dlopen ran a node\n");
  return 0;
}
