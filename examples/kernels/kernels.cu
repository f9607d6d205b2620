// maize example kernels for CUDA devices.
//
// The same computations as the examples' CPU functions and OpenCL C, with
// C linkage so that their PTX names are the plain kernel names maize looks
// up (cuModuleGetFunction).  Every kernel guards its index against n: the
// runtime rounds the grid up to whole blocks.  Element counts are 64-bit
// (maize's "u64 n = sizeof(y)").
//
// kernels.ptx beside this file is generated from it and checked in, so a
// build without nvcc still has the PTX:
//   nvcc -ptx -arch=compute_80 kernels.cu -o kernels.ptx
// then the ".version" line is lowered to 7.0 (see meson.build here).

typedef unsigned long long u64;

static __device__ u64 gid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }

// y = a * x + y
extern "C" __global__ void saxpy(float a, const float *x, float *y, u64 n) {
  u64 i = gid();
  if (i < n) y[i] = a * x[i] + y[i];
}

// y = a * y
extern "C" __global__ void scale(float a, float *y, u64 n) {
  u64 i = gid();
  if (i < n) y[i] = a * y[i];
}

// z = x + y
extern "C" __global__ void add(const float *x, const float *y, float *z, u64 n) {
  u64 i = gid();
  if (i < n) z[i] = x[i] + y[i];
}

// y = y * y
extern "C" __global__ void square(float *y, u64 n) {
  u64 i = gid();
  if (i < n) y[i] = y[i] * y[i];
}
