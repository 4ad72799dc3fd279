// Whole device objects shared with another process on this machine, in one
// step (docs/sharing.md).
//
// share(schema, batches, ctx) packs the batches into ONE device allocation
// made with cuMemAlloc (plain_device_resource, which legacy CUDA IPC can
// export): an Arrow IPC stream assembled on the device by stream_writer,
// one batched device-to-device copy, synchronized.  The result owns that
// allocation and its IPC handle; descriptor() gives a small serializable
// descriptor (136 bytes) to send to another process through any channel.
// There open_shared(ctx, descriptor) opens the ONE handle (open_ipc) and
// reads the stream zero-copy over the mapping: the batches' buffers are
// slices of it and keep it open.
//
// A buffer shares as itself when CUDA IPC can export it (cuMemAlloc
// memory, or memory opened from another process), else as a cuMemAlloc
// copy of it (one device-to-device copy).
//
// Lifetimes: the exporter's shared_object keeps the packed allocation alive
// until release() or its destruction; descriptor bytes keep nothing alive.
// The data is complete when share() returns (the copy is synchronized):
// no event is needed.  Descriptors are untrusted input: damaged or forged
// ones are invalid_argument naming what is wrong; the stream inside is read
// by the checked stream reader (invalid_message); a descriptor still opens
// only memory another process of the same user exported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/memory_resource.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::ipc {

namespace detail {
struct share_access;  // src/ipc_format/share.cpp
}  // namespace detail

/// What a descriptor names, so that the importer rebuilds the same kind of
/// object (Python: DeviceTable, DeviceRecordBatch, DeviceArray,
/// DeviceChunkedArray, CudaBuffer).  Typed kinds travel as record batches:
/// a record batch is one batch, an array one batch of one column, a
/// chunked array batches of one column.
enum class shared_kind : std::uint8_t { table = 1, record_batch = 2, array = 3, chunked_array = 4, buffer = 5 };

/// "table", "record_batch", "array", "chunked_array", "buffer".
CUARROW_EXPORT const char* to_string(shared_kind k) noexcept;

/// The kind to_string names; throws invalid_argument for any other name.
CUARROW_EXPORT shared_kind shared_kind_of(std::string_view name);

/// Where share() packs what it shares.
enum class share_memory : std::uint8_t {
  /// One cuMemAlloc allocation, a legacy CUDA IPC handle (descriptor version
  /// 1): the importer needs nothing else, each open maps the allocation
  /// (cuIpcOpenMemHandle, milliseconds per GiB).
  legacy = 1,
  /// Memory of the process-wide ipc_pool_resource of the device
  /// (ipc_pool_resource::shared_for), a pool handle (descriptor version 2):
  /// the importer also needs the pool (shared_object::export_pool, once),
  /// then opens in microseconds.
  pool = 2,
};

/// "legacy", "pool".
CUARROW_EXPORT const char* to_string(share_memory m) noexcept;

/// The memory to_string names; throws invalid_argument for any other name.
CUARROW_EXPORT share_memory share_memory_of(std::string_view name);

/// How share() shares.
struct share_options {
  share_memory memory = share_memory::legacy;
};

/// The exporter's side of a share: owns the shared device memory and its
/// IPC handle.  Movable, not copyable.
class CUARROW_EXPORT shared_object {
 public:
  /// Released: holds nothing.
  shared_object() = default;
  /// Releases (release()).
  ~shared_object();
  /// The moved-from object is released (holds nothing).
  shared_object(shared_object&& other) noexcept;
  shared_object& operator=(shared_object&& other) noexcept;
  shared_object(const shared_object&) = delete;
  shared_object& operator=(const shared_object&) = delete;

  /// The descriptor another process opens with open_shared (wire format in
  /// docs/sharing.md: descriptor_size bytes for legacy memory,
  /// pool_descriptor_size for pool memory).  Throws invalid_argument once
  /// released.
  std::vector<std::byte> descriptor() const;
  shared_kind kind() const noexcept { return kind_; }
  /// Legacy (cuMemAlloc) or pool memory.
  share_memory memory() const noexcept { return memory_; }
  /// Pool memory: a new descriptor of the pool the data lies in (the
  /// process-wide ipc_pool_resource::shared_for of its device), to send to
  /// the importer once per process with its pool_id (import_shared_pool
  /// there).  Legacy memory: nothing.  Throws invalid_argument once
  /// released, cuda_error when the driver refuses the export.
  std::optional<shareable_pool> export_pool() const;
  /// The shared device memory: the packed stream, or the shared buffer.
  /// Empty once released.
  const buffer& data() const noexcept { return data_; }
  bool released() const noexcept { return released_; }
  /// Drops this process's hold on the shared memory (idempotent): it is
  /// freed once nothing else here uses it.  Importers that opened it before
  /// keep a mapping (docs/sharing.md says what they see); opening the
  /// descriptor afterwards fails.
  void release() noexcept;

  /// Size of descriptor()'s output for legacy memory (wire format version 1).
  static constexpr std::size_t descriptor_size = 136;
  /// The wire format version of legacy memory's descriptors.
  static constexpr std::uint16_t wire_version = 1;
  /// Size of descriptor()'s output for pool memory (wire format version 2:
  /// version 1's layout with a pool handle of 120 bytes).
  static constexpr std::size_t pool_descriptor_size = 144;
  /// The wire format version of pool memory's descriptors.
  static constexpr std::uint16_t pool_wire_version = 2;

 private:
  // Made by share() only.
  friend struct detail::share_access;

  shared_kind kind_ = shared_kind::table;
  share_memory memory_ = share_memory::legacy;
  std::shared_ptr<ipc_pool_resource> pool_;  // pool memory: the pool it lies in
  buffer data_;
  ipc_memory_handle handle_;
  bool packed_ = false;  // data_ is a copy made for the share (not the caller's buffer)
  bool released_ = true;
};

/// Packs `batches` (each of `schema`; any device or the host) into one
/// allocation of `ctx`'s device as an IPC stream and exports it: cuMemAlloc
/// memory (legacy, the default), or memory of the device's process-wide
/// ipc_pool_resource (options.memory = pool; cuda_error
/// CUDA_ERROR_NOT_SUPPORTED where the device has no shareable pools).
/// `kind` records what the batches stand for; record_batch and array need
/// exactly one batch, array and chunked_array exactly one column, buffer is
/// refused (share the buffer itself): invalid_argument.  The copy runs on
/// `s` and is synchronized: the data is complete on return.  Throws as
/// stream_writer and export_ipc do (invalid_argument for a schema IPC
/// cannot carry, out_of_memory, cuda_error).
CUARROW_EXPORT shared_object share(const arrow::schema& schema, std::span<const arrow::record_batch> batches,
                                   const context& ctx, stream_view s = {}, shared_kind kind = shared_kind::table,
                                   const share_options& options = {});

/// Shares a buffer: itself when it is memory of the kind asked for (legacy:
/// memory export_ipc gives a legacy handle of; pool: memory of the device's
/// process-wide ipc_pool_resource), no copy; else a copy in memory of that
/// kind on its context's device (one copy on `s`, synchronized).  Host
/// memory without a context is refused (invalid_argument).
CUARROW_EXPORT shared_object share(const buffer& b, stream_view s = {}, const share_options& options = {});

/// A descriptor's fields, read and checked without opening anything.
struct shared_descriptor {
  shared_kind kind = shared_kind::table;
  /// pool when the handle is a pool handle (handle.pool_id() names the pool).
  share_memory memory = share_memory::legacy;
  ipc_memory_handle handle;
};

/// Reads descriptor bytes (either version).  Throws invalid_argument naming
/// the problem (a wrong length, magic, version or kind, a nonzero reserved
/// field, a checksum that does not match, a malformed handle or one of the
/// other memory kind).  Reads only `bytes`, calls no driver.
CUARROW_EXPORT shared_descriptor read_shared_descriptor(std::span<const std::byte> bytes);

/// What open_shared gives: the kind, and for typed kinds the schema and
/// batches (zero-copy slices of `data`); `data` is the opened memory (the
/// stream, or the shared buffer itself).
struct opened_shared {
  shared_kind kind = shared_kind::table;
  arrow::schema schema;
  std::vector<arrow::record_batch> batches;
  buffer data;
};

/// Opens a descriptor another process made, on `ctx`'s device: one
/// open_ipc, then the stream is read zero-copy (`options`; its validation
/// reads a few small pieces of metadata).  Throws what
/// read_shared_descriptor and open_ipc throw (a descriptor made by this
/// process: invalid_argument; the exporter released or exited: cuda_error
/// from cuIpcOpenMemHandle), invalid_message for a stream that is not what
/// the descriptor says.
///
/// A descriptor of pool memory throws invalid_argument saying to pass the
/// exporter's pool (the overload below).
CUARROW_EXPORT opened_shared open_shared(const context& ctx, std::span<const std::byte> descriptor,
                                         const read_options& options = {});

/// Opens a descriptor of pool memory through `pool`, the exporter's pool
/// imported here (import_shared_pool; its context is where the data opens,
/// it must be `ctx`'s device: device_mismatch otherwise): one open_ipc(pool,
/// handle), microseconds, then the stream is read zero-copy.  A legacy
/// descriptor ignores `pool` and opens as open_shared(ctx, descriptor).  A
/// handle of another pool throws invalid_argument (from open_ipc); otherwise
/// throws as open_shared above.
CUARROW_EXPORT opened_shared open_shared(const context& ctx, std::span<const std::byte> descriptor,
                                         const imported_pool& pool, const read_options& options = {});

/// The exporter's pool (`fd` and `pool_id` of shared_object::export_pool,
/// received here) imported into `ctx`, once per process: the first call for
/// a (context, pool_id) imports it (import_pool), later calls return that
/// import without a driver call (`fd` is not read then).  `fd` stays the
/// caller's.  The import is kept for the process's life (the exporter's
/// pool lives for its process too).  Throws invalid_argument for pool_id 0
/// (an unknown pool cannot be cached) or a negative fd, cuda_error as
/// import_pool does.  Thread-safe.
CUARROW_EXPORT imported_pool import_shared_pool(const context& ctx, int fd, std::uint64_t pool_id);

}  // namespace cuarrow::ipc
