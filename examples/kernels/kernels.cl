/* maize example kernels in OpenCL C.  The CUDA versions in kernels.cu and
 * the C versions in the examples compute the same.  Their maize parameter
 * lists:
 *   saxpy  "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)"
 *   scale  "f32 a, inout f32[] y, u64 n = sizeof(y)"
 *   add    "in f32[] x, in f32[] y, out f32[] z, u64 n = sizeof(z)"
 *   square "inout f32[] y, u64 n = sizeof(y)"
 * Each guards i < n, so a launch rounded up to a work-group multiple is
 * harmless. */

/* y = a * x + y */
__kernel void saxpy(float a, __global const float *x, __global float *y, ulong n)
{
  size_t i = get_global_id(0);
  if (i < n)
    y[i] = a * x[i] + y[i];
}

/* y = a * y */
__kernel void scale(float a, __global float *y, ulong n)
{
  size_t i = get_global_id(0);
  if (i < n)
    y[i] = a * y[i];
}

/* z = x + y */
__kernel void add(__global const float *x, __global const float *y, __global float *z, ulong n)
{
  size_t i = get_global_id(0);
  if (i < n)
    z[i] = x[i] + y[i];
}

/* y = y * y */
__kernel void square(__global float *y, ulong n)
{
  size_t i = get_global_id(0);
  if (i < n)
    y[i] = y[i] * y[i];
}
