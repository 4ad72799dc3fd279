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
// Legacy CUDA IPC shares cuMemAlloc memory only (plain_device_resource).
// The default memory resource, the device's IPC pool (cuda_ipc_pool), gives
// pool handles (below); where the device has no shareable pools the default
// is the device's default pool (cuda_async_pool), which cannot be exported.
// Legacy handles are for other processes: opening one in the process that
// exported it is refused.
//
// Pool memory (docs/ipc.md, "Pool memory"): an ipc_pool_resource is a
// stream-ordered pool created with POSIX file-descriptor handles.  The
// exporter sends the pool's descriptor once (export_pool; over a Unix socket
// with SCM_RIGHTS, or Python's multiprocessing.reduction), then a handle per
// buffer (export_ipc of its memory: a handle of kind pool, wire format
// version 2).  The importer makes an imported_pool of the descriptor
// (import_pool) and opens handles with open_ipc(pool, handle).
//   - in the exporter, the handle keeps the buffer alive, as for legacy
//     handles; CUDA requires the importers to free (drop every buffer opened
//     from it) before the exporter frees the memory: keep the handle until
//     they are done;
//   - in the importer, each exported allocation is imported once per pool
//     and freed when the last buffer (and slice) opened from it is gone; the
//     imported pool is destroyed when the imported_pool object and every
//     buffer opened through it are gone;
//   - if the exporter exits, CUDA does not say what becomes of memory still
//     imported elsewhere: do not rely on it (the emulation keeps it readable).
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

class ipc_pool_resource;  // cuarrow/memory_resource.hpp

/// What an ipc_memory_handle names.
enum class ipc_handle_kind : std::uint8_t {
  legacy = 1,  ///< cuMemAlloc memory (cuIpcGetMemHandle), wire format version 1
  pool = 2,    ///< memory of a shareable pool (cuMemPoolExportPointer), wire format version 2
};

/// "legacy" or "pool" (the names share_memory uses for the same memory).
CUARROW_EXPORT const char* to_string(ipc_handle_kind k) noexcept;

class CUARROW_EXPORT ipc_memory_handle {
 public:
  /// Size of the driver's CUipcMemHandle.
  static constexpr std::size_t driver_handle_size = 64;
  /// Size of serialize()'s output for legacy handles (wire format version 1,
  /// docs/ipc.md).
  static constexpr std::size_t serialized_size = 112;
  /// The wire format version of legacy handles.
  static constexpr std::uint16_t wire_version = 1;
  /// Size of serialize()'s output for pool handles (wire format version 2).
  static constexpr std::size_t pool_serialized_size = 120;
  /// The wire format version of pool handles.
  static constexpr std::uint16_t pool_wire_version = 2;

  /// The handle of an empty buffer (size 0): opens as an empty buffer.
  ipc_memory_handle() = default;

  /// The driver's 64 bytes naming the whole exported allocation (zeros for
  /// size 0): a CUipcMemHandle (legacy) or a CUmemPoolPtrExportData (pool).
  const std::array<std::byte, driver_handle_size>& driver_handle() const noexcept { return driver_handle_; }
  /// Legacy (cuMemAlloc) or pool memory.  Empty handles are legacy.
  ipc_handle_kind kind() const noexcept { return kind_; }
  /// Pool handles: the exporting pool's id (ipc_pool_resource::pool_id; 0
  /// when the pool is not an ipc_pool_resource).  0 for legacy handles.
  std::uint64_t pool_id() const noexcept { return pool_id_; }
  /// Offset of the exported buffer in that allocation (0 for pyarrow-format handles).
  std::int64_t offset() const noexcept { return offset_; }
  /// Size of the exported buffer in bytes.
  std::int64_t size() const noexcept { return size_; }
  /// The exporter's device ordinal; -1 when unknown (pyarrow-format handles).
  int device_id() const noexcept { return device_id_; }
  /// True when this process exported the handle (opening it here is refused).
  bool exported_by_this_process() const noexcept;

  /// The handle as bytes: wire format version 1 (serialized_size bytes) for
  /// legacy handles, version 2 (pool_serialized_size bytes) for pool handles.
  std::vector<std::byte> serialize() const;

  /// Reads serialize()'s bytes (either version), or pyarrow.cuda's format (int64 size, then
  /// the 64-byte driver handle when the size is not 0: 72 or 8 bytes), which
  /// has no offset (0) and no device (-1).  Reads only `bytes`; anything
  /// malformed (too short, wrong magic or version, a damaged checksum,
  /// negative or overflowing offset and size) throws invalid_argument
  /// saying what is wrong.  The result keeps no memory alive.
  static ipc_memory_handle deserialize(std::span<const std::byte> bytes);

  /// "cuarrow.ipc_memory_handle(size=16, offset=256, device=0)"; pool
  /// handles add ", pool=0x<pool id>".
  std::string describe() const;

  // Construction is through export_ipc and deserialize.
  struct fields {
    std::array<std::byte, driver_handle_size> driver_handle{};
    std::int64_t offset = 0;
    std::int64_t size = 0;
    int device_id = -1;
    std::uint64_t exporter = 0;  // random id of the exporting process; 0 unknown
    ipc_handle_kind kind = ipc_handle_kind::legacy;
    std::uint64_t pool_id = 0;
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
  ipc_handle_kind kind_ = ipc_handle_kind::legacy;
  std::uint64_t pool_id_ = 0;
  // The exported buffer's owner, in the exporting process only.
  std::shared_ptr<const void> keep_alive_;
};

/// Exports device memory for other processes.  `b` must be device memory
/// (type cuda) allocated with cuMemAlloc (plain_device_resource, or a
/// foreign cuMemAlloc allocation: a legacy handle), or memory of a shareable
/// pool (ipc_pool_resource, or a foreign pool created with a POSIX
/// file-descriptor handle type: a pool handle), or a slice of such a buffer,
/// or a buffer opened with open_ipc (its original handle is re-exported,
/// with the offset of `b`).  An empty buffer gives an empty handle without a
/// driver call.  Pinned or host memory and memory of a pool that cannot be
/// shared (the default pool) throw invalid_argument saying why and what to
/// do; driver failures cuda_error.
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
/// opened memory does not count in ctx.bytes_allocated().  A pool handle
/// throws invalid_argument: open it with open_ipc(imported_pool, handle).
CUARROW_EXPORT buffer open_ipc(const context& ctx, const ipc_memory_handle& handle);

/// A shareable pool's POSIX file descriptor, owned: closed on destruction.
/// Send fd() to the importing process (SCM_RIGHTS over a Unix socket, or
/// Python's multiprocessing.reduction.send_handle) together with pool_id();
/// once sent, this object may go.  The descriptor is close-on-exec.
class CUARROW_EXPORT shareable_pool {
 public:
  shareable_pool() = default;
  ~shareable_pool();
  shareable_pool(shareable_pool&& other) noexcept;
  shareable_pool& operator=(shareable_pool&& other) noexcept;
  shareable_pool(const shareable_pool&) = delete;
  shareable_pool& operator=(const shareable_pool&) = delete;

  /// The descriptor (-1 when empty or released).
  int fd() const noexcept { return fd_; }
  /// Gives the descriptor up: the caller closes it.
  int release() noexcept;
  /// The pool's id (ipc_pool_resource::pool_id), for import_pool.
  std::uint64_t pool_id() const noexcept { return pool_id_; }
  /// The exporter's device ordinal.
  int device_id() const noexcept { return device_id_; }

 private:
  friend CUARROW_EXPORT shareable_pool export_pool(const ipc_pool_resource& pool);
  friend CUARROW_EXPORT shareable_pool export_pool(const ipc_memory_handle& handle);
  shareable_pool(int fd, std::uint64_t pool_id, int device_id) noexcept
      : fd_(fd), pool_id_(pool_id), device_id_(device_id) {}
  int fd_ = -1;
  std::uint64_t pool_id_ = 0;
  int device_id_ = -1;
};

/// The pool's shareable descriptor (cuMemPoolExportToShareableHandle), a new
/// one per call.  Throws cuda_error when the driver refuses.
CUARROW_EXPORT shareable_pool export_pool(const ipc_pool_resource& pool);

/// The descriptor of the pool a pool handle of this process's memory comes
/// from (export_ipc of an ipc_pool_resource's memory, e.g. of the default
/// resource), a new one per call: what the importer needs beside the
/// handle.  Throws invalid_argument for a legacy or empty handle, a handle
/// another process exported, or one whose pool is gone; cuda_error when the
/// driver refuses.
CUARROW_EXPORT shareable_pool export_pool(const ipc_memory_handle& handle);

/// Another process's pool, imported (cuMemPoolImportFromShareableHandle).
/// Copies share one import; the driver's pool is destroyed when the last
/// copy and the last buffer opened through it are gone.
class CUARROW_EXPORT imported_pool {
 public:
  /// The context it was imported into: buffers opened from it are of it.
  const context& get_context() const;
  /// The id given to import_pool (0: unknown, handles are not checked).
  std::uint64_t pool_id() const noexcept;
  /// The driver's imported pool.
  CUmemoryPool native_handle() const noexcept;

  struct state;  // src/ipc.cpp

 private:
  friend CUARROW_EXPORT imported_pool import_pool(const context& ctx, int fd, std::uint64_t pool_id);
  friend CUARROW_EXPORT buffer open_ipc(const imported_pool& pool, const ipc_memory_handle& handle);
  explicit imported_pool(std::shared_ptr<state> s) : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

/// Imports the pool behind `fd` (a descriptor another process's export_pool
/// gave, received here) into `ctx`, giving `ctx`'s device read/write access
/// to it when it is not the pool's own device.  `fd` stays the caller's: it
/// may be closed once this returns.  `pool_id` (the exporter's
/// shareable_pool::pool_id; 0: unknown) lets open_ipc refuse handles of
/// another pool with a clear message.  Throws invalid_argument for a
/// negative fd, cuda_error when the driver refuses (not a shareable pool's
/// descriptor: CUDA_ERROR_INVALID_VALUE).
CUARROW_EXPORT imported_pool import_pool(const context& ctx, int fd, std::uint64_t pool_id = 0);

/// Opens a pool handle of the pool `pool` was imported from, as a device
/// buffer of `pool`'s context at the exported offset, of the exported size,
/// mutable (cuMemPoolImportPointer, once per exported allocation; the
/// import is freed when the last buffer opened from it is gone).  The buffer
/// keeps the imported pool alive.  Size 0 gives an empty buffer without a
/// driver call.  A legacy handle, a handle of another pool (when both ids
/// are known) or a range outside the exported allocation throw
/// invalid_argument; driver failures cuda_error (data of another pool or
/// damaged: CUDA_ERROR_INVALID_VALUE).  Synchronous, no stream: the bytes
/// are whatever the exporter had written when it synchronized.
CUARROW_EXPORT buffer open_ipc(const imported_pool& pool, const ipc_memory_handle& handle);

}  // namespace cuarrow
