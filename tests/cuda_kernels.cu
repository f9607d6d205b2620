typedef unsigned long long u64;
typedef unsigned int u32;
static __device__ u64 gid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
extern "C" __global__ void mixk(u32 id, const u32 *a, const u32 *b, u32 *o, u64 n) {
  u64 i = gid(); if (i < n) o[i] = a[i] * 31u + b[i] * 17u + id + (u32)i; }
extern "C" __global__ void inc(u32 *v, u64 n) { u64 i = gid(); if (i < n) v[i] += 1u; }
extern "C" __global__ void wr(u32 *v, u64 n) { u64 i = gid(); if (i < n) v[i] = (u32)i + 7u; }
