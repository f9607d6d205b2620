/* The CUDA driver emulator: a test double for machines without a GPU.
 *
 * libmzcudaemu.so exports the CUDA driver API entry points that maize's
 * CUDA backend loads (devices/cuda/cuda_loader.h), under the same versioned
 * names, so the backend runs unchanged against it when MZ_CUDA_LIBRARY
 * names the library.  It stands in for hardware that is absent here; it is
 * built only for the tests and benchmarks and never installed.
 *
 * What it does, where maize depends on it:
 * - devices: a configurable count, memory size, compute capability,
 *   multiprocessor count and peer-access matrix;
 * - primary contexts (retain/release; the last release resets the context
 *   and frees what it still owns), a current context per thread;
 * - streams: in-order queues, each served by its own thread; events,
 *   cuStreamWaitEvent across streams, contexts and devices; host functions
 *   run on the stream's thread after the stream's prior work, and later
 *   work waits for them;
 * - memory: device memory is host memory behind fake device addresses
 *   (one 16 TiB range per device, never reused, so a freed address stays
 *   recognisable); pinned host memory; asynchronous copies host to device
 *   (a pageable source is captured at the call, as the driver stages it),
 *   device to host, device to device and between devices, all moving real
 *   bytes in stream order; managed memory, host memory whose address
 *   kernels use as a device address (CU_POINTER_ATTRIBUTE_IS_MANAGED);
 * - modules: PTX text is checked line by line (directives, labels,
 *   predicates and a list of PTX opcodes); a bad line gives
 *   CUDA_ERROR_INVALID_PTX and a JIT error log.  Each .entry runs the C
 *   function registered under its name (the examples' kernels are built
 *   in); an entry whose body traps, with no function registered, faults
 *   with CUDA_ERROR_LAUNCH_FAILED.  Kernels compute over the grid and block
 *   they are launched with, so a wrong launch shape gives wrong results;
 * - errors as the driver gives them: invalid values and handles, out of
 *   memory, and sticky errors: after a fault every later call in that
 *   context returns the fault's code, no host function of the context runs
 *   again, and only the release of the last reference to the primary
 *   context clears it.  Any entry point can be made to fail at its k-th
 *   call; a sticky code injected into an asynchronous call (a launch or a
 *   copy) is returned as success and faults when the stream reaches it, as
 *   a real fault does.
 *
 * Strict mode (on by default) checks the rules of the driver API that a
 * real driver does not always catch, and aborts the process with a
 * message naming the rule when the program breaks one:
 * - a driver call from inside a host function;
 * - a stream, event, module or function used after it was destroyed (this
 *   covers an event recorded on a destroyed stream);
 * - device memory used after cuMemFree, or freed twice; pinned host memory
 *   used by a pending copy after cuMemFreeHost;
 * - a pinned source changed between an asynchronous copy's call and the
 *   moment the stream performs it (the bytes would differ on a GPU);
 * - a call that needs a context with none current, or work enqueued on a
 *   stream while another context is current.
 *
 * Configuration: the environment variable MZ_CUDA_EMU, read at cuInit, or
 * mzemu_configure() before cuInit.  Keys separated by ';':
 *   devices=N        number of devices (default 1; 0 is allowed)
 *   memory=SIZE      memory per device, with K/M/G suffixes (default 1G)
 *   managed=1|0      managed memory (cuMemAllocManaged) with concurrent
 *                    access by host and device (default 1)
 *   cc=M.m           compute capability (default 8.0)
 *   sms=N            multiprocessors (default 4)
 *   peer=all|none|A>B,C>D   which device may access which (default all)
 *   strict=1|0       abort on a broken rule (default 1), or only count
 *                    it and print it
 *   fail=SYMBOL@K:CODE      the K-th call of SYMBOL (its exported name, as
 *                    cuMemAlloc_v2) returns CODE (a number, or a name
 *                    without its CUDA_ERROR_ prefix, as OUT_OF_MEMORY);
 *                    may be given more than once
 *   hostfn_delay_us=N       each host function starts N microseconds after
 *                    its stream reaches it (default 0), so that a test can
 *                    make a driver call overlap a host function: a
 *                    synchronizing call (cuMemFree) then waits for it
 * A bad configuration makes cuInit fail with CUDA_ERROR_INVALID_VALUE and
 * a message on stderr.
 *
 * Threads: every function here may be called from any thread. */
#ifndef MZEMU_H
#define MZEMU_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One launch, as a kernel sees it.  params[i] points to a copy of the
 * i-th parameter's bytes, sized as the entry's PTX .param declares. */
typedef struct mzemu_launch {
  unsigned grid[3], block[3];
  unsigned nparams;
  void *const *params;
} mzemu_launch;

/* A kernel: computes the whole launch and returns CUDA_SUCCESS, or an
 * error; a sticky error (CUDA_ERROR_ILLEGAL_ADDRESS for an access outside
 * device memory) breaks the context. */
typedef CUresult (*mzemu_kernel_fn)(const mzemu_launch *l);

/* The host view of bytes of device memory at p, for a kernel: NULL when
 * [p, p + bytes) is not inside one live allocation the launching device
 * may access (the kernel then returns CUDA_ERROR_ILLEGAL_ADDRESS).  Only
 * meaningful inside a kernel. */
void *mzemu_device_ptr(CUdeviceptr p, size_t bytes);

/* The parameter i of a launch as a value of type T (no bounds check). */
#define MZEMU_PARAM(l, i, T) (*(const T *)(l)->params[i])
/* Threads in the launch along x. */
#define MZEMU_THREADS_X(l) ((unsigned long long)(l)->grid[0] * (l)->block[0])

/* Register fn as the implementation of PTX entries called name (replacing
 * a built-in one).  Returns 0, or -1 when the table is full or name is too
 * long. */
int mzemu_register_kernel(const char *name, mzemu_kernel_fn fn);

/* Apply a configuration string (the syntax of MZ_CUDA_EMU) before cuInit;
 * later keys override earlier ones, and MZ_CUDA_EMU is read after it.
 * Returns 0, or -1 after cuInit or on a bad string (printed on stderr). */
int mzemu_configure(const char *spec);

/* What the emulator has seen since cuInit. */
typedef struct mzemu_stats {
  unsigned long long launches, host_funcs, host_funcs_dropped;
  unsigned long long copies_htod, copies_dtoh, copies_dtod, copies_peer;
  unsigned long long event_records, event_waits;
  unsigned long long live_allocs, live_pinned, live_streams, live_events, live_modules;
  unsigned long long contexts_reset, leaked_at_reset, violations, faults;
} mzemu_stats;

void mzemu_get_stats(mzemu_stats *out);

#ifdef __cplusplus
}
#endif
#endif
