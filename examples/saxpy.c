/* saxpy: y = a*x + y on whatever devices the runtime finds, in the shape
 * the README shows.  Run it with MZ_DEVICES=cpu, =opencl or =cpu,opencl.
 *
 * This is the example of writing a kernel by hand for every device kind: a
 * CPU function, OpenCL C and CUDA (examples/kernels/).  saxpy is BLAS, so a
 * program that only needs it calls the canned mz_op_axpy (maize/ops.h),
 * as the pipeline does; here it is simply the smallest kernel there is. */
#include <maize.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef MZ_EXAMPLES_DIR
#define MZ_EXAMPLES_DIR "examples"
#endif
/* The PTX the build generated with nvcc, else the checked-in copy. */
#ifndef MZ_KERNELS_PTX
#define MZ_KERNELS_PTX MZ_EXAMPLES_DIR "/kernels/kernels.ptx"
#endif

static int saxpy_cpu(const mz_call *c) {
  float a = c->args[0].f32;
  const float *x = c->args[1].p;
  float *y = c->args[2].p;
  uint64_t n = c->args[3].u64;
  for (uint64_t i = 0; i < n; i++) y[i] = a * x[i] + y[i];
  return 0;
}

#define CHECK(call)                                                                          \
  do {                                                                                       \
    int rc_ = (call);                                                                        \
    if (rc_ < 0) {                                                                           \
      fprintf(stderr, "%s failed: %s: %s\n", #call, mz_err_name(rc_), mz_runtime_last_error(rt)); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

int main(void) {
  enum { N = 1 << 20 };
  mz_runtime *rt = NULL;
  CHECK(mz_runtime_create(NULL, &rt));

  const mz_kernel_spec saxpy_spec = {
      .name = "saxpy",
      .params = "f32 a, in f32[] x, inout f32[] y, u64 n = sizeof(y)",
      .cpu = {.fn = saxpy_cpu},
      .opencl = {.format = MZ_CODE_SOURCE, .path = MZ_EXAMPLES_DIR "/kernels/kernels.cl"},
      .cuda = {.format = MZ_CODE_PTX, .path = MZ_KERNELS_PTX},
  };
  mz_kernel *saxpy;
  CHECK(mz_kernel_create(rt, &saxpy_spec, &saxpy));

  float *hx = malloc(N * sizeof *hx), *hy = malloc(N * sizeof *hy);
  for (size_t i = 0; i < N; i++) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  mz_buffer *x, *y;
  CHECK(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, hx, &x));
  CHECK(mz_buffer_create(rt, MZ_F32, 1, (size_t[]){N}, hy, &y));

  mz_graph *g;
  CHECK(mz_graph_create(rt, &g));
  mz_op *args = mz_zip(g, 3, (mz_op *[]){mz_f32(g, 2.0f), mz_value(g, x), mz_value(g, y)});
  mz_op *out = mz_apply(g, saxpy, args, NULL);
  mz_op *y1 = mz_unzip(g, out, 2); /* a and x are dropped: only y is awaited */

  mz_future *f;
  CHECK(mz_schedule(g, y1, NULL, &f));
  int status = mz_future_wait(f);
  if (status) {
    fprintf(stderr, "saxpy failed: %s\n", mz_future_message(f));
    return 1;
  }
  CHECK(mz_buffer_read(mz_future_result(f, 0), hy, N * sizeof *hy));
  size_t bad = 0;
  for (size_t i = 0; i < N; i++) bad += fabsf(hy[i] - (2.0f * (float)i + 1.0f)) > 1e-3f * (2.0f * (float)i + 1.0f);
  mz_run_stats st;
  mz_future_stats(f, &st);
  mz_device_info info;
  for (unsigned d = 0; d < mz_runtime_device_count(rt); d++) {
    mz_device_get_info(mz_runtime_device(rt, d), &info);
    printf("device %u: %-6s %s (%u queues)\n", d, mz_device_kind_name(info.kind), info.name, info.queues);
  }
  printf("saxpy on %d elements: %s (%zu wrong), %llu ops, %llu transfers, %.3f ms\n", N, bad ? "WRONG" : "correct",
         bad, (unsigned long long)st.ops, (unsigned long long)st.transfers, (double)st.elapsed_ns / 1e6);
  mz_future_destroy(f);
  mz_graph_destroy(g);
  mz_buffer_release(x);
  mz_buffer_release(y);
  mz_kernel_destroy(saxpy);
  mz_runtime_destroy(rt);
  free(hx);
  free(hy);
  return bad ? 1 : 0;
}
