/* maize example kernels in OpenCL C.  The CUDA versions in kernels.cu and
 * the C versions in the examples compute the same.  Their maize parameter
 * lists:
 *   saxpy  "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)"
 *   scale  "f32 a, inout f32[] y, u64 n = sizeof(y)"
 *   add    "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)"
 *   square "inout f32[] y, u64 n = sizeof(y)"
 * They are element-wise over the flat index, so they take either a 1-D
 * launch over n elements or the default launch, which is the first written
 * buffer's own 1-, 2- or 3-D shape (a tile of a 2-D buffer is 2-D).  maize
 * launches exactly the global size it is given; each kernel still guards
 * i < n, so that a 1-D launch rounded up to a work-group multiple is
 * harmless. */

/* The work-item's index in row-major order over the whole launch. */
#define FLAT_ID() \
  (get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2)))

/* y = a * x + y */
__kernel void saxpy(float a, __global const float *x, __global float *y, ulong n)
{
  size_t i = FLAT_ID();
  if (i < n)
    y[i] = a * x[i] + y[i];
}

/* y = a * y */
__kernel void scale(float a, __global float *y, ulong n)
{
  size_t i = FLAT_ID();
  if (i < n)
    y[i] = a * y[i];
}

/* z = x + y */
__kernel void add(__global const float *x, __global const float *y, __global float *z, ulong n)
{
  size_t i = FLAT_ID();
  if (i < n)
    z[i] = x[i] + y[i];
}

/* y = y * y */
__kernel void square(__global float *y, ulong n)
{
  size_t i = FLAT_ID();
  if (i < n)
    y[i] = y[i] * y[i];
}
