/* The device registry: every backend built into this maize, in discovery
 * order.  Adding a backend is one line here and one folder in devices/. */
#include "device_ops.h"
#include "mz_config.h"

#if MZ_HAVE_OPENCL
extern const struct mz__devtype mz__devtype_opencl;
#endif
#if MZ_HAVE_CUDA
extern const struct mz__devtype mz__devtype_cuda;
#endif

const struct mz__devtype *const mz__devtypes[] = {
    &mz__devtype_cpu,
#if MZ_HAVE_OPENCL
    &mz__devtype_opencl,
#endif
#if MZ_HAVE_CUDA
    &mz__devtype_cuda,
#endif
    &mz__devtype_sim, /* simulated devices: only when MZ_DEVICES names them */
    NULL,
};
