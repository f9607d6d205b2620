/* For tests that use CUDA devices: a real GPU when there is one, else the
 * CUDA driver emulator (tests/cuda_emu/, a test double for the absent
 * hardware) with its cuBLAS and cuFFT doubles.  Header-only, for Criterion tests; each test runs in its own
 * process, so the one `emu` table per test process is that process's. */
#ifndef MZ_TEST_CUDA_EMU_CLIENT_H
#define MZ_TEST_CUDA_EMU_CLIENT_H

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "devices/cuda/cuda_loader.h"
#include "maize.h"
#include "mzemu.h"

/* Whether the default CUDA driver (or the one MZ_CUDA_LIBRARY names) has
 * at least one GPU.  Loading the driver in the test process itself is
 * fine: each Criterion test runs in its own process. */
static inline bool have_gpu(char *why, size_t len) {
  struct mz__cuda_api api;
  if (mz__cuda_load(NULL, &api, why, len) < 0) return false;
  int n = 0;
  CUresult r = api.Init(0);
  if (r == CUDA_SUCCESS) r = api.DeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n == 0) {
    char e[160];
    snprintf(why, len, "%s", r != CUDA_SUCCESS ? mz__cuda_strerror(&api, r, e, sizeof e) : "no device");
    return false;
  }
  return true;
}

/* The emulator's own calls (tests/cuda_emu/mzemu.h), found in the same
 * instance of the library that the backend opens (dlopen of one path
 * returns one handle).  emu.h is NULL when the tests run on a real GPU. */
static struct {
  void *h;
  int (*register_kernel)(const char *, mzemu_kernel_fn);
  void *(*device_ptr)(CUdeviceptr, size_t);
  void (*get_stats)(mzemu_stats *);
} emu;

static inline void emu_open(void) {
#ifdef MZ_CUDA_EMU_LIB
  setenv("MZ_CUDA_LIBRARY", MZ_CUDA_EMU_LIB, 1);
  /* The library doubles beside it, unless a test chose otherwise. */
#ifdef MZ_CUBLAS_EMU_LIB
  setenv("MZ_CUBLAS_LIBRARY", MZ_CUBLAS_EMU_LIB, 0);
#endif
#ifdef MZ_CUFFT_EMU_LIB
  setenv("MZ_CUFFT_LIBRARY", MZ_CUFFT_EMU_LIB, 0);
#endif
  emu.h = dlopen(MZ_CUDA_EMU_LIB, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(emu.h, "the CUDA emulator %s: %s", MZ_CUDA_EMU_LIB, dlerror());
  void *p;
#define EMU_SYM(field, name)                                   \
  p = dlsym(emu.h, name);                                      \
  cr_assert_not_null(p, "the emulator lacks %s", name);        \
  memcpy(&emu.field, &p, sizeof p);
  EMU_SYM(register_kernel, "mzemu_register_kernel")
  EMU_SYM(device_ptr, "mzemu_device_ptr")
  EMU_SYM(get_stats, "mzemu_get_stats")
#undef EMU_SYM
#endif
}

/* Make a CUDA driver ready for the runtimes this test creates: a real
 * GPU when there is one (or the driver MZ_CUDA_LIBRARY names), else the
 * emulator.  False, with the reason in why, when neither is there.  The
 * emulator's configuration (MZ_CUDA_EMU) is read at the runtime's cuInit,
 * so a test may set it after this. */
static inline bool cuda_driver_here(char *why, size_t len) {
  const char *lib = getenv("MZ_CUDA_LIBRARY");
#ifdef MZ_CUDA_EMU_LIB
  if ((lib && !strcmp(lib, MZ_CUDA_EMU_LIB)) || (!lib && !have_gpu(why, len))) {
    emu_open();
    return true;
  }
#endif
  (void)lib;
  return have_gpu(why, len);
}

/* The same for a test that needs CUDA: skips, saying why, without it. */
static inline void need_cuda(void) {
  char why[512] = "";
  if (!cuda_driver_here(why, sizeof why)) cr_skip("no CUDA driver or GPU on this machine (%s)", why);
}

/* Tests of what only the emulator can do (injected driver failures, its
 * counts): always on the emulator, on a GPU machine too. */
static inline void need_emu(void) {
#ifdef MZ_CUDA_EMU_LIB
  emu_open();
#else
  cr_skip("the CUDA driver emulator is not built");
#endif
}

/* On the emulator: nothing leaked into the driver and no rule broken,
 * once the runtime is destroyed (the primary contexts are released). */
static inline void emu_check_clean(void) {
  if (!emu.h) return;
  mzemu_stats s;
  emu.get_stats(&s);
  cr_log_info("emulator: %llu launches, %llu host functions (%llu dropped), copies %llu htod %llu dtoh %llu dtod "
              "%llu peer, %llu event waits, %llu faults",
              s.launches, s.host_funcs, s.host_funcs_dropped, s.copies_htod, s.copies_dtoh, s.copies_dtod,
              s.copies_peer, s.event_waits, s.faults);
  cr_expect_eq(s.violations, 0, "driver rules broken: %llu", s.violations);
  cr_expect_eq(s.leaked_at_reset, 0, "objects left in a released context: %llu", s.leaked_at_reset);
  cr_expect_eq(s.live_streams + s.live_events + s.live_modules + s.live_allocs + s.live_pinned, 0,
               "alive after destroy: %llu streams, %llu events, %llu modules, %llu allocations, %llu pinned",
               s.live_streams, s.live_events, s.live_modules, s.live_allocs, s.live_pinned);
}

/* After a fault: the context's objects die with it (a real driver frees
 * nothing after a sticky error), so only the rules are checked. */
static inline void emu_check_rules(void) {
  if (!emu.h) return;
  mzemu_stats s;
  emu.get_stats(&s);
  cr_expect_eq(s.violations, 0, "driver rules broken: %llu", s.violations);
}
#endif
