/* The OpenCL kernel of mz-bench-hetero-gemm (bench/hetero_gemm.c), built
 * from this same text by maize and by StarPU.
 *
 * c += a * b on n x n row-major tiles, n a multiple of TS.  One work-item
 * per element of c, in TS x TS work-groups; each group walks the k
 * dimension in TS-wide strips of a and b staged in local memory. */
#define TS 16

__kernel void gemm_tile(__global const float *a, __global const float *b, __global float *c, uint n)
{
  const int lc = get_local_id(0), lr = get_local_id(1);
  const int col = get_group_id(0) * TS + lc, row = get_group_id(1) * TS + lr;
  __local float as[TS][TS], bs[TS][TS];
  float acc = 0.0f;
  for (uint t = 0; t < n / TS; t++) {
    as[lr][lc] = a[row * n + t * TS + lc];
    bs[lr][lc] = b[(t * TS + lr) * n + col];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; k++)
      acc += as[lr][k] * bs[k][lc];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  c[row * n + col] += acc;
}
