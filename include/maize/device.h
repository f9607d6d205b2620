/* maize: device inspection.
 *
 * Devices are found by mz_runtime_create() and belong to the runtime.  This
 * header only inspects them; backends plug in behind the runtime. */
#ifndef MAIZE_DEVICE_H
#define MAIZE_DEVICE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

typedef enum mz_device_kind {
  MZ_DEVICE_CPU,
  MZ_DEVICE_OPENCL,
  MZ_DEVICE_CUDA,
  MZ_DEVICE_SIM,
} mz_device_kind;

/* What a device is.  Strings are owned by the runtime and live as long as
 * it does. */
typedef struct mz_device_info {
  mz_device_kind kind;
  unsigned index;          /* position in the runtime's device list */
  const char *name;        /* e.g. "cpu", "pthread-skylake", "NVIDIA H100" */
  const char *vendor;
  const char *version;     /* driver or platform version, "" if unknown */
  uint64_t memory;         /* bytes of device memory (host memory for cpu) */
  unsigned compute_units;  /* cores, OpenCL compute units, CUDA SMs */
  int numa_node;           /* -1 when unknown */
  unsigned queues;         /* in-order queues the runtime opened on it */
  unsigned first_queue;    /* runtime-wide number of its first queue */
  bool unified_memory;     /* shares host memory (CPU, PoCL, integrated GPUs) */
  int cc_major, cc_minor;  /* CUDA compute capability, 0 elsewhere */
  char pci_bus_id[32];     /* "0000:17:00.0", "" if unknown */
  /* Limits for kernel writers; 0 where unknown or not meaningful (the CPU
   * has no work-groups; the CUDA backend does not report them yet). */
  size_t max_work_group;   /* work items per work-group (OpenCL CL_DEVICE_MAX_WORK_GROUP_SIZE) */
  uint64_t max_alloc;      /* bytes of the largest single buffer */
  uint64_t local_memory;   /* bytes of local memory per work-group (OpenCL __local) */
  bool fp64;               /* device code may use double precision */
  /* Added after fp64 (fields are only ever appended; this one sits in
   * what was the struct's tail padding, so its size is unchanged on LP64
   * and a program built against the older header still gets a struct
   * that fits).  The host's CPU
   * cores one node of the device keeps busy, when it runs its kernels on
   * them: 1 on the CPU device (a worker per core), the compute units on an
   * OpenCL device of type CPU such as PoCL's (a kernel spreads over every
   * core), host=N on a simulated class; 0 for a device with processors of
   * its own.  Every device with host_cores > 0 shares the same cores, so
   * their capacity is not additive: work given to one slows the others.
   * Policies read it through mz_sched_device_host_cores(). */
  unsigned host_cores;
} mz_device_info;

/* Fill *info for dev.  Returns MZ_OK or MZ_EINVAL on NULL arguments. */
int mz_device_get_info(const mz_device *dev, mz_device_info *info);

/* The kind's spelling in MZ_DEVICES: "cpu", "opencl", "cuda" or "sim". */
const char *mz_device_kind_name(mz_device_kind kind);

/* True when the device has failed and takes no more work. */
bool mz_device_is_dead(const mz_device *dev);

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
