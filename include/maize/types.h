/* maize: element types, shapes and the opaque handles every header shares. */
#ifndef MAIZE_TYPES_H
#define MAIZE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "export.h"

#ifdef __cplusplus
extern "C" {
#endif

MZ_API_BEGIN

#if defined(__GNUC__) || defined(__clang__)
#define MZ_WUR __attribute__((warn_unused_result))
#else
#define MZ_WUR
#endif

typedef struct mz_runtime mz_runtime; /* one set of devices, workers, policies */
typedef struct mz_device mz_device;   /* a device, owned by its runtime */
typedef struct mz_kernel mz_kernel;   /* one computation, several implementations */
typedef struct mz_buffer mz_buffer;   /* typed, reference-counted, coherent memory */
typedef struct mz_graph mz_graph;     /* a DAG of operations under construction */
typedef struct mz_op mz_op;           /* one node of a graph, owned by the graph */
typedef struct mz_future mz_future;   /* one scheduled run */

/* Element types of buffers and scalars. */
typedef enum mz_dtype {
  MZ_I8,
  MZ_U8,
  MZ_I16,
  MZ_U16,
  MZ_I32,
  MZ_U32,
  MZ_I64,
  MZ_U64,
  MZ_F32,
  MZ_F64,
  MZ_DTYPE_COUNT
} mz_dtype;

/* Bytes per element of t, or 0 when t is not a dtype. */
size_t mz_dtype_size(mz_dtype t);
/* The spelling used in parameter lists ("f32"), or NULL when t is not a dtype. */
const char *mz_dtype_name(mz_dtype t);

/* A shape: 1 to 3 dimensions.  dims[0] is the fastest-varying one (width,
 * like OpenCL's global size 0), dims[1] the height, dims[2] the depth.
 * Unused dimensions are 1.  count is the product of the dims. */
typedef struct mz_shape {
  mz_dtype dtype;
  unsigned ndim;
  size_t dims[3];
  size_t count;
} mz_shape;

/* One argument as an implementation sees it: a pointer for a buffer (host
 * memory for CPU and host functions), or the value of a scalar. */
typedef union mz_arg {
  void *p;
  int8_t i8;
  uint8_t u8;
  int16_t i16;
  uint16_t u16;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
} mz_arg;

MZ_API_END

#ifdef __cplusplus
}
#endif
#endif
