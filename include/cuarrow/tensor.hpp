// Tensors from outside: DLPack structs and __cuda_array_interface__
// descriptions, read and checked in one place before anyone uses them.
//
// A tensor is untrusted input (docs/reliability.md): its dimension count,
// extents, strides, element type, device and data pointer are checked here,
// and the byte span it covers is computed with overflow checks, so that the
// bindings (Context.buffer_from_object, from_device) never do arithmetic on
// what a producer claims.  Throws cuarrow::invalid_argument with a message
// naming the field.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuarrow/buffer.hpp"
#include "cuarrow/export.hpp"

namespace cuarrow {

/// The DLPack ABI (https://github.com/dmlc/dlpack, version 1.x), the parts
/// cuarrow exchanges.  Layouts are fixed by the standard.
namespace dlpack {

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

enum DLDataTypeCode : std::uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6
};

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

}  // namespace dlpack

/// The most dimensions a tensor may have (DLPack and NumPy allow 64 at most
/// in practice; anything beyond is refused before shape is read further).
inline constexpr int max_tensor_ndim = 64;

/// A checked tensor description.
struct tensor_info {
  std::uintptr_t data = 0;                     ///< address of element [0, ..., 0] (byte_offset applied)
  std::int32_t device_type = dlpack::kDLCUDA;  ///< a DLPack device type
  std::int32_t device_id = 0;
  /// Element type: NumPy kind ('i', 'u', 'f', 'c', 'b', 'm', 'M', 'V' for
  /// types NumPy has no name for, e.g. bfloat16), the DLPack code where there
  /// is one (-1 for datetime64 / timedelta64), bits and lanes.
  char kind = 'u';
  int code = dlpack::kDLUInt;
  int bits = 8;
  int lanes = 1;
  std::string typestr;        ///< the NumPy typestr as given (CAI) or derived (DLPack, "" if none)
  std::int64_t itemsize = 1;  ///< bytes per element (bits * lanes / 8)
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  ///< in bytes, always filled (compact row-major if none were given)
  bool strides_given = false;
  bool read_only = false;
  std::int64_t elements = 0;  ///< product of the extents
  /// The bytes the elements cover: from data + span_offset (<= 0 with
  /// negative strides), span_length bytes; both 0 for an empty tensor.
  std::int64_t span_offset = 0;
  std::int64_t span_length = 0;
  bool c_contiguous = false;  ///< compact row-major (dimensions of extent 1 may have any stride)
  bool contiguous = false;    ///< the span has no gaps and no overlaps, in some dimension order
};

/// Reads a DLTensor (legacy or inside a versioned managed tensor): ndim
/// within [0, max_tensor_ndim], shape (and strides, if any) present, extents
/// non-negative, a whole number of bytes per element, a known dtype code, no
/// overflow in element count, strides or byte span, data + byte_offset + span
/// inside the address space.  Device type and id are reported, not judged.
CUARROW_EXPORT tensor_info read_dlpack(const dlpack::DLTensor& t, bool read_only = false);

/// Checks the version of a versioned DLPack tensor (major 1), then reads it.
CUARROW_EXPORT tensor_info read_dlpack(const dlpack::DLManagedTensorVersioned& t);
/// Reads the tensor of a legacy (unversioned) managed tensor.
CUARROW_EXPORT tensor_info read_dlpack(const dlpack::DLManagedTensor& t);

/// The fields of a __cuda_array_interface__ dictionary (v0 to v3), as a
/// binding extracts them (integers that do not fit an int64 are refused
/// there).
struct cuda_array_interface {
  std::optional<std::int64_t> version;
  std::uintptr_t data = 0;
  bool read_only = false;
  std::string typestr;
  std::vector<std::int64_t> shape;
  std::optional<std::vector<std::int64_t>> strides;  ///< in bytes; none: C-contiguous
  bool has_mask = false;                             ///< a "mask" that is not None
  std::optional<std::int64_t> stream;
};

/// Reads a CAI description: version 0 to 3, a typestr NumPy would read as a
/// fixed-size little-endian or byte-order-free element (<, | or =; i, u, f,
/// c, b, m, M), shape and strides as for DLPack (strides in bytes, as many
/// as the dimensions), a non-null data pointer unless the tensor is empty,
/// stream a handle (not 0, which the v3 spec calls ambiguous, nor
/// negative).  A mask is refused: cuarrow has no way to carry it and would
/// return masked elements as valid.  The device is not judged (a CAI does
/// not say it): see locate_cuda_array_interface.
CUARROW_EXPORT tensor_info read_cuda_array_interface(const cuda_array_interface& cai);

/// Where a checked tensor's memory is, asked of the driver (one query of the
/// data pointer), as a DLPack device: a __cuda_array_interface__ does not
/// say, and the device must be known before a context is chosen.  Device
/// memory gives kDLCUDA and its device, managed memory kDLCUDAManaged and
/// the device the driver names (0 if none), pinned or registered host memory
/// kDLCUDAHost and 0.  An empty tensor covers no memory: nullopt (any device
/// will do).  Throws cuda_error (CUDA_ERROR_INVALID_VALUE) when the driver
/// does not know the address (ordinary pageable host memory, or no memory
/// at all): the device cannot reach it.
CUARROW_EXPORT std::optional<dlpack::DLDevice> locate_cuda_array_interface(const tensor_info& t);

/// A view, as a buffer of `ctx`, of the bytes a checked DLPack tensor covers
/// (from data + span_offset, span_length bytes), with `owner` kept alive as
/// long as the view or any slice of it (the producer's deleter, typically).
/// Memory in CUDA host (pinned) memory is viewed at its device address; an
/// empty tensor gives an empty device buffer of `ctx` (owner released).
/// Read-only if the tensor is.  Throws memory_kind_error if the tensor is
/// not in CUDA, CUDA host or CUDA managed memory, device_mismatch if it is
/// device memory of another device than ctx's, invalid_argument if its
/// elements leave gaps or overlap ("array data is non-contiguous"),
/// cuda_error from the address query.
CUARROW_EXPORT buffer wrap_tensor(const context& ctx, const tensor_info& t, std::shared_ptr<const void> owner);

/// Calls a producer's deleter for from_dlpack (given the call to make).
using deleter_call = std::function<void(const std::function<void()>& deleter)>;

/// DLPack import: a view, as wrap_tensor makes it, of the bytes a managed
/// tensor covers (read_dlpack; for a versioned one, its version checked
/// first), which takes the tensor over once every check has passed: its
/// deleter runs when the last handle of the view, or of any slice of it,
/// goes away (at once for an empty tensor).  When it throws, the tensor
/// stays the caller's.  `run`, when given, is called with the deleter's call
/// instead of making it directly, on whichever thread drops the last handle
/// (a binding takes its interpreter's lock there).  Throws invalid_argument
/// for a null tensor, and as read_dlpack and wrap_tensor.
CUARROW_EXPORT buffer from_dlpack(const context& ctx, dlpack::DLManagedTensorVersioned* t, deleter_call run = {});
CUARROW_EXPORT buffer from_dlpack(const context& ctx, dlpack::DLManagedTensor* t, deleter_call run = {});

/// A view of the bytes a __cuda_array_interface__ covers: read
/// (read_cuda_array_interface), located (locate_cuda_array_interface) and
/// viewed as wrap_tensor does, as a buffer of `ctx`, or when none is given of
/// the device the memory is on (device 0 for pinned memory or an empty
/// tensor).  When the CAI names a stream (v3), the producer's work queued
/// on it so far must be done before the data is read (the spec asks the
/// consumer to synchronize at the point of consumption): with a `consumer`
/// stream, that stream is made to wait for it without blocking the host;
/// without one, the host waits for it, so that the view is safe to use on
/// any stream (a buffer has no stream of its own to order).
/// Throws as read_cuda_array_interface, locate_cuda_array_interface and
/// wrap_tensor (device_mismatch: "__cuda_array_interface__: the data is
/// memory of device 1, the context is for device 0; use Context(1)"), and
/// cuda_error from the stream wait.
CUARROW_EXPORT buffer wrap_cuda_array_interface(const cuda_array_interface& cai, std::shared_ptr<const void> owner,
                                                const std::optional<context>& ctx = std::nullopt,
                                                std::optional<stream_view> consumer = std::nullopt);

/// DLPack managed tensors over part of a buffer, for export (__dlpack__): a
/// compact row-major tensor of `shape` (1 to max_tensor_ndim dimensions)
/// with elements of `dtype` (whole bytes, one lane), starting `byte_offset`
/// bytes into `b`, on b's device (cuda, cuda_host and cuda_managed as
/// DLPack's CUDA codes, anything else as kDLCPU).  The tensor holds a handle
/// of `b`, so the memory stays alive until the consumer calls the deleter,
/// which frees the tensor too.  The versioned one (DLPack 1.0) is flagged
/// read-only when `b` is, and copied when `copied`.  Throws invalid_argument
/// (dimensions, a negative extent, the element type, a size that overflows
/// 64 bits), out_of_range (the tensor overruns `b`), std::bad_alloc.
CUARROW_EXPORT dlpack::DLManagedTensorVersioned* export_dlpack_versioned(const buffer& b, std::int64_t byte_offset,
                                                                         dlpack::DLDataType dtype,
                                                                         std::span<const std::int64_t> shape,
                                                                         bool copied = false);
CUARROW_EXPORT dlpack::DLManagedTensor* export_dlpack(const buffer& b, std::int64_t byte_offset,
                                                      dlpack::DLDataType dtype, std::span<const std::int64_t> shape);

}  // namespace cuarrow
