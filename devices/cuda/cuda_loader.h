/* maize internals: the CUDA driver API, loaded at run time.
 *
 * maize never links libcuda: one build must run on machines with and
 * without an NVIDIA driver.  mz__cuda_load() opens the driver library with
 * dlopen and fills a table of function pointers; the CUDA backend
 * (devices/cuda/cuda.c), its tests and bench/cuda_chain.c call the driver
 * only through such a table.  The table is plain data owned by its caller
 * (the backend keeps one per runtime), so there is no global mutable state.
 *
 * Each entry is typed with __typeof__ of the function cuda.h declares, so a
 * pointer can never disagree with the header it was compiled against.  The
 * names are the versioned symbols cuda.h maps the plain names to (for
 * example cuMemAlloc is cuMemAlloc_v2): those are what libcuda exports for
 * the ABI this header describes. */
#ifndef MZ_CUDA_LOADER_H
#define MZ_CUDA_LOADER_H

#include <cuda.h>
#include <stddef.h>

/* X(field, symbol): every driver call maize makes.  Adding a call is one
 * line here; the loader, the table and its error messages follow. */
#define MZ_CUDA_API_MAP(X)                                \
  X(Init, cuInit)                                         \
  X(DriverGetVersion, cuDriverGetVersion)                 \
  X(GetErrorString, cuGetErrorString)                     \
  X(GetErrorName, cuGetErrorName)                         \
  X(DeviceGetCount, cuDeviceGetCount)                     \
  X(DeviceGet, cuDeviceGet)                               \
  X(DeviceGetName, cuDeviceGetName)                       \
  X(DeviceGetAttribute, cuDeviceGetAttribute)             \
  X(DeviceTotalMem, cuDeviceTotalMem_v2)                  \
  X(DeviceGetPCIBusId, cuDeviceGetPCIBusId)               \
  X(DeviceCanAccessPeer, cuDeviceCanAccessPeer)           \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)     \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2) \
  X(CtxSetCurrent, cuCtxSetCurrent)                       \
  X(CtxGetCurrent, cuCtxGetCurrent)                       \
  X(CtxEnablePeerAccess, cuCtxEnablePeerAccess)           \
  X(StreamCreate, cuStreamCreate)                         \
  X(StreamDestroy, cuStreamDestroy_v2)                    \
  X(StreamQuery, cuStreamQuery)                           \
  X(StreamSynchronize, cuStreamSynchronize)               \
  X(StreamWaitEvent, cuStreamWaitEvent)                   \
  X(EventCreate, cuEventCreate)                           \
  X(EventDestroy, cuEventDestroy_v2)                      \
  X(EventRecord, cuEventRecord)                           \
  X(ModuleLoadDataEx, cuModuleLoadDataEx)                 \
  X(ModuleUnload, cuModuleUnload)                         \
  X(ModuleGetFunction, cuModuleGetFunction)               \
  X(LaunchKernel, cuLaunchKernel)                         \
  X(LaunchHostFunc, cuLaunchHostFunc)                     \
  X(MemAlloc, cuMemAlloc_v2)                              \
  X(MemFree, cuMemFree_v2)                                \
  X(MemHostAlloc, cuMemHostAlloc)                         \
  X(MemFreeHost, cuMemFreeHost)                           \
  X(MemAllocManaged, cuMemAllocManaged)                   \
  X(PointerGetAttribute, cuPointerGetAttribute)           \
  X(MemcpyHtoD, cuMemcpyHtoD_v2)                          \
  X(MemcpyDtoH, cuMemcpyDtoH_v2)                          \
  X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2)                \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)                \
  X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)                \
  X(MemcpyPeerAsync, cuMemcpyPeerAsync)

/* The loaded driver.  handle is dlopen's; every pointer is non-NULL after a
 * successful mz__cuda_load(). */
struct mz__cuda_api {
  void *handle;
#define MZ__CUDA_API_FIELD(field, symbol) __typeof__(symbol) *field;
  MZ_CUDA_API_MAP(MZ__CUDA_API_FIELD)
#undef MZ__CUDA_API_FIELD
};

/* Open the driver library at path (NULL: $MZ_CUDA_LIBRARY, else
 * "libcuda.so.1") and resolve every symbol of MZ_CUDA_API_MAP.  A symbol
 * dlsym cannot find is asked of cuGetProcAddress when the library has it.
 * cuInit is not called.  Returns MZ_OK with *api filled, or MZ_ELOAD with a
 * sentence in err (the library that failed to open, or the first missing
 * symbol) and *api zeroed, the library closed.  err may be NULL. */
int mz__cuda_load(const char *path, struct mz__cuda_api *api, char *err, size_t errlen);

/* Close the library and zero *api.  Only for a driver on which cuInit was
 * never called: libcuda starts threads at cuInit, and unmapping their code
 * would crash the process, so the backend keeps an initialized driver
 * loaded until exit (as the CUDA runtime itself does).  NULL is a no-op. */
void mz__cuda_unload(struct mz__cuda_api *api);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
 * or the number when the driver does not know the code.  Writes into buf
 * and returns it. */
const char *mz__cuda_strerror(const struct mz__cuda_api *api, CUresult r, char *buf, size_t len);

#endif
