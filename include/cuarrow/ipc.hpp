// CUDA IPC: sharing device memory with other processes.
//
// export_ipc(buffer) gives an ipc_memory_handle: the driver's 64-byte
// CUipcMemHandle of the allocation the buffer lies in, plus what the driver
// handle does not carry: the buffer's offset in that allocation, its size
// and the exporter's device.  serialize() turns it into bytes to send to
// another process (a pipe, a socket, a file); there
// ipc_memory_handle::deserialize() reads them back and open_ipc(ctx, handle)
// maps the memory into ctx's device (which may differ from the exporter's)
// as a device buffer of exactly the exported range.  Slices and
// sub-allocations round-trip.
//
// Lifetimes (docs/ipc.md):
//   - the exporter's memory must stay allocated while other processes use
//     it: an exported handle keeps the buffer's memory alive in the
//     exporting process (as long as the handle object or a copy of it lives),
//     serialized bytes do not;
//   - in the importing process, the mapping is closed (cuIpcCloseMemHandle)
//     when the last buffer opened from it, and every slice of one, is gone.
//     Opening the same allocation again in one context reuses the mapping.
//
// Legacy CUDA IPC shares cuMemAlloc memory only.  The default memory
// resource, the stream-ordered pool (cuda_async_pool), cannot be exported:
// allocate memory to share with a plain_device_resource.  Handles are for
// other processes: opening one in the process that exported it is refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"

namespace cuarrow {

namespace detail {
struct ipc_handle_factory;  // src/ipc_handle_factory.hpp
}  // namespace detail

class CUARROW_EXPORT ipc_memory_handle {
 public:
  /// Size of the driver's CUipcMemHandle.
  static constexpr std::size_t driver_handle_size = 64;
  /// Size of serialize()'s output (wire format version 1, docs/ipc.md).
  static constexpr std::size_t serialized_size = 112;
  /// The wire format version serialize() writes and deserialize() reads.
  static constexpr std::uint16_t wire_version = 1;

  /// The handle of an empty buffer (size 0): opens as an empty buffer.
  ipc_memory_handle() = default;

  /// The driver's handle of the whole exported allocation (zeros for size 0).
  const std::array<std::byte, driver_handle_size>& driver_handle() const noexcept { return driver_handle_; }
  /// Offset of the exported buffer in that allocation (0 for pyarrow-format handles).
  std::int64_t offset() const noexcept { return offset_; }
  /// Size of the exported buffer in bytes.
  std::int64_t size() const noexcept { return size_; }
  /// The exporter's device ordinal; -1 when unknown (pyarrow-format handles).
  int device_id() const noexcept { return device_id_; }
  /// True when this process exported the handle (opening it here is refused).
  bool exported_by_this_process() const noexcept;

  /// The handle as bytes (wire format version 1, serialized_size bytes).
  std::vector<std::byte> serialize() const;

  /// Reads serialize()'s bytes, or pyarrow.cuda's format (int64 size, then
  /// the 64-byte driver handle when the size is not 0: 72 or 8 bytes), which
  /// has no offset (0) and no device (-1).  Reads only `bytes`; anything
  /// malformed (too short, wrong magic or version, a damaged checksum,
  /// negative or overflowing offset and size) throws invalid_argument
  /// saying what is wrong.  The result keeps no memory alive.
  static ipc_memory_handle deserialize(std::span<const std::byte> bytes);

  /// "cuarrow.ipc_memory_handle(size=16, offset=256, device=0)".
  std::string describe() const;

  // Construction is through export_ipc and deserialize.
  struct fields {
    std::array<std::byte, driver_handle_size> driver_handle{};
    std::int64_t offset = 0;
    std::int64_t size = 0;
    int device_id = -1;
    std::uint64_t exporter = 0;  // random id of the exporting process; 0 unknown
    std::shared_ptr<const void> keep_alive;
  };
  /// The exporting process's random id (0: unknown, e.g. pyarrow's format).
  std::uint64_t exporter_token() const noexcept { return exporter_; }

 private:
  // Only cuarrow makes handles from fields (export_ipc, deserialize): a
  // public constructor would let anyone forge a handle that keeps nothing
  // alive or claims another process's export.
  friend struct detail::ipc_handle_factory;
  explicit ipc_memory_handle(fields f);

  std::array<std::byte, driver_handle_size> driver_handle_{};
  std::int64_t offset_ = 0;
  std::int64_t size_ = 0;
  int device_id_ = -1;
  std::uint64_t exporter_ = 0;
  // The exported buffer's owner, in the exporting process only.
  std::shared_ptr<const void> keep_alive_;
};

/// Exports device memory for other processes.  `b` must be device memory
/// (type cuda) allocated with cuMemAlloc (plain_device_resource, or a
/// foreign cuMemAlloc allocation), or a slice of such a buffer, or a buffer
/// opened with open_ipc (its original handle is re-exported, with the
/// offset of `b`).  An empty buffer gives an empty handle without a driver
/// call.  Pinned or host memory and stream-ordered pool memory throw
/// invalid_argument saying why and what to do; driver failures cuda_error.
/// The handle keeps `b`'s memory alive (in this process) while it lives.
/// No stream: export neither waits for nor orders anything, so finish
/// writing the buffer (synchronize its stream) before another process reads
/// it.
CUARROW_EXPORT ipc_memory_handle export_ipc(const buffer& b);

/// Opens a handle another process exported, as a device buffer of `ctx`'s
/// device (device id and context are ctx's, whatever the exporter's device
/// was: cuIpcOpenMemHandle with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) at the
/// exported offset, of the exported size, mutable.  Opening the same
/// allocation again in `ctx` reuses the mapping; it is closed when the last
/// buffer (and slice) using it is gone.  Size 0 gives an empty buffer
/// without a driver call.  A handle exported by this process, or one whose
/// range is not inside the exported allocation, throws invalid_argument;
/// driver failures (exporter gone, not a handle) cuda_error, out_of_memory
/// when the mapping finds no address space.  Synchronous, no stream: the
/// bytes are whatever the exporter had written when it synchronized.  The
/// opened memory does not count in ctx.bytes_allocated().
CUARROW_EXPORT buffer open_ipc(const context& ctx, const ipc_memory_handle& handle);

}  // namespace cuarrow
