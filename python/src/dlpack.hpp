// The DLPack ABI (https://github.com/dmlc/dlpack, version 1.x), the parts
// cuarrow exchanges: tensors, the legacy DLManagedTensor and the versioned
// DLManagedTensorVersioned.  Layouts are fixed by the standard.
#pragma once

#include <cstdint>

namespace cuarrow_py::dlpack {

struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};

enum DLDeviceType : std::int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
};

struct DLDevice {
  std::int32_t device_type;  // a DLDeviceType (an enum of int size in C)
  std::int32_t device_id;
};

enum DLDataTypeCode : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null means compact row-major
  std::uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr std::uint64_t kFlagReadOnly = 1ULL << 0;
constexpr std::uint64_t kFlagIsCopied = 1ULL << 1;

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};

}  // namespace cuarrow_py::dlpack
