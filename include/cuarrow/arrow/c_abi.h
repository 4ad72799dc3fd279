/* The Apache Arrow C Data, C Stream, C Device Data and C Device Stream
 * interfaces (apache/arrow docs/source/format/CDataInterface.rst,
 * CStreamInterface.rst, CDeviceDataInterface.rst; canonical header
 * cpp/src/arrow/c/abi.h).
 *
 * The structs are ABI: member order and types are exactly the
 * specification's, and each group sits behind the specification's guard
 * macro, so this header coexists with arrow/c/abi.h, nanoarrow.h or any
 * other copy included before or after it in the same translation unit.
 *
 * Plain C; usable from C, C++ and CUDA code. */
#ifndef CUARROW_ARROW_C_ABI_H
#define CUARROW_ARROW_C_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  /* Array type description */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;

  /* Release callback */
  void (*release)(struct ArrowSchema*);
  /* Opaque producer-specific data */
  void* private_data;
};

struct ArrowArray {
  /* Array data description */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;

  /* Release callback */
  void (*release)(struct ArrowArray*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  /* Callbacks providing stream functionality */
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);

  /* Release callback */
  void (*release)(struct ArrowArrayStream*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

/* Spec and documentation: https://arrow.apache.org/docs/format/CDeviceDataInterface.html */

/* DeviceType for the allocated memory (values match DLPack's DLDeviceType). */
typedef int32_t ArrowDeviceType;

/* CPU device, same as using ArrowArray directly instead of with ArrowDeviceArray */
#define ARROW_DEVICE_CPU 1
/* CUDA GPU Device */
#define ARROW_DEVICE_CUDA 2
/* Pinned CUDA CPU memory by cudaMallocHost */
#define ARROW_DEVICE_CUDA_HOST 3
/* OpenCL Device */
#define ARROW_DEVICE_OPENCL 4
/* Vulkan buffer for next-gen graphics */
#define ARROW_DEVICE_VULKAN 7
/* Metal for Apple GPU */
#define ARROW_DEVICE_METAL 8
/* Verilog simulator buffer */
#define ARROW_DEVICE_VPI 9
/* ROCm GPUs for AMD GPUs */
#define ARROW_DEVICE_ROCM 10
/* Pinned ROCm CPU memory allocated by hipMallocHost */
#define ARROW_DEVICE_ROCM_HOST 11
/* Reserved for extension */
#define ARROW_DEVICE_EXT_DEV 12
/* CUDA managed/unified memory allocated by cudaMallocManaged */
#define ARROW_DEVICE_CUDA_MANAGED 13
/* unified shared memory allocated on a Intel oneAPI non-partitioned device. */
#define ARROW_DEVICE_ONEAPI 14
/* GPU support for next-gen WebGPU standard */
#define ARROW_DEVICE_WEBGPU 15
/* Qualcomm Hexagon DSP */
#define ARROW_DEVICE_HEXAGON 16

struct ArrowDeviceArray {
  /* the Allocated Array: buffers are device pointers, everything else is in CPU memory */
  struct ArrowArray array;
  /* The device id to identify a specific device */
  int64_t device_id;
  /* The type of device which can access this memory */
  ArrowDeviceType device_type;
  /* An event-like object to synchronize on if needed (for CUDA: a CUevent*) */
  void* sync_event;
  /* Reserved bytes for future expansion; producers must zero them */
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_STREAM_INTERFACE
#define ARROW_C_DEVICE_STREAM_INTERFACE

struct ArrowDeviceArrayStream {
  /* device type that all arrays will be accessible from */
  ArrowDeviceType device_type;
  /* callbacks */
  int (*get_schema)(struct ArrowDeviceArrayStream*, struct ArrowSchema*);
  int (*get_next)(struct ArrowDeviceArrayStream*, struct ArrowDeviceArray*);
  const char* (*get_last_error)(struct ArrowDeviceArrayStream*);

  /* release callback */
  void (*release)(struct ArrowDeviceArrayStream*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DEVICE_STREAM_INTERFACE */

#ifdef __cplusplus
}
#endif

#endif /* CUARROW_ARROW_C_ABI_H */
