// Buffers that know where they live.
//
// A cuarrow::buffer is a cheap, copyable handle to a range of memory: its
// address, size, device type and id, mutability, and an owner that keeps the
// memory alive.  Copies of a handle share the memory; the memory is freed
// when the last handle (and every slice of it, and every pending asynchronous
// copy that uses it) is gone.
//
// Device memory can never be read through a host pointer by accident: a
// buffer has no data() member.  host_data() / mutable_host_data() return a
// pointer only for host-accessible memory (CPU and CUDA_HOST) and throw
// host_access_error for device memory; address() is an integer.
//
// Buffers are immutable values; all members are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow {

class device_memory_resource;

/// Where memory lives, with the Arrow C Device Data Interface's codes
/// (ARROW_DEVICE_CPU = 1, ARROW_DEVICE_CUDA = 2, ...).
enum class device_type : std::int32_t {
  cpu = 1,           // ordinary host memory
  cuda = 2,          // device memory
  cuda_host = 3,     // pinned host memory (cuMemHostAlloc / registered)
  cuda_managed = 13  // managed (unified) memory
};

CUARROW_EXPORT const char* to_string(device_type t) noexcept;

/// True for memory host code may dereference (cpu, cuda_host, cuda_managed).
constexpr bool is_host_accessible(device_type t) noexcept {
  return t == device_type::cpu || t == device_type::cuda_host || t == device_type::cuda_managed;
}

namespace detail {
struct buffer_factory;  // src/buffer_factory.hpp
}  // namespace detail

class CUARROW_EXPORT buffer {
 public:
  /// An empty CPU buffer of size 0.
  buffer() = default;

  std::uintptr_t address() const noexcept { return address_; }
  std::int64_t size() const noexcept { return size_; }
  device_type type() const noexcept { return type_; }
  /// The device ordinal; -1 for ordinary host memory.
  int device_id() const noexcept { return device_id_; }
  bool is_mutable() const noexcept { return mutable_; }
  /// True for ordinary host memory (Arrow's is_cpu()).
  bool is_cpu() const noexcept { return type_ == device_type::cpu; }
  bool is_host_accessible() const noexcept { return cuarrow::is_host_accessible(type_); }

  /// The context the memory belongs to; empty for ordinary host memory.
  const std::optional<context>& get_context() const noexcept { return context_; }

  /// The buffer this one is a slice of, if any.
  const std::shared_ptr<const buffer>& parent() const noexcept { return parent_; }

  /// A zero-copy slice [offset, offset + length) that keeps this buffer
  /// alive.  length = -1 means "to the end".  Throws out_of_range.
  buffer slice(std::int64_t offset, std::int64_t length = -1) const;

  /// The same memory, read-only.
  buffer as_read_only() const;

  /// Host pointer to the data.  Throws host_access_error for device memory.
  const std::byte* host_data() const;
  /// Host pointer for writing.  Throws host_access_error for device memory
  /// and read_only for an immutable buffer.
  std::byte* mutable_host_data() const;
  std::span<const std::byte> host_span() const { return {host_data(), static_cast<std::size_t>(size_)}; }

  /// The stream device memory of this buffer was allocated on and is freed
  /// on (for stream-ordered resources); the legacy default stream unless
  /// chosen at allocation.
  stream_view free_stream() const noexcept { return free_stream_; }
  /// True for memory from allocate_device: it is valid in the order of
  /// free_stream().  cuarrow's copies on another stream first make that
  /// stream wait for the allocation (an event, no host synchronization), so
  /// such a buffer can be used on any stream of any device.
  bool is_stream_ordered() const noexcept { return stream_ordered_; }

  /// The object keeping the memory alive (an allocation, a foreign owner).
  const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

  /// The identity of the one allocation this memory lies in, when cuarrow
  /// made that allocation (allocate_device, allocate_pinned, the pinned
  /// result pool, allocate_host, and slices of those); null for memory
  /// wrapped from elsewhere (wrap_device, wrap_host, imported C structs),
  /// whose buffers may share an owner while being separate allocations.
  /// Copies merge neighbouring pieces into one DMA only within one
  /// allocation: a DMA must not span two.
  const void* allocation() const noexcept { return owner_is_allocation_ ? owner_.get() : nullptr; }

  /// "cuarrow.buffer(address=0x7f.., size=16, device=cuda:0, mutable)".
  /// Never reads the memory.
  std::string describe() const;
  /// Where the memory is, as describe() and messages name it: the memory
  /// type, and the device when there is one ("cuda:0", "cuda_host:0",
  /// "cpu").
  std::string location() const;

  // Construction is through the factories below.
  struct fields {
    std::uintptr_t address = 0;
    std::int64_t size = 0;
    device_type type = device_type::cpu;
    int device_id = -1;
    bool is_mutable = true;
    std::optional<context> ctx;
    std::shared_ptr<const void> owner;
    std::shared_ptr<const buffer> parent;
    stream_view free_stream;
    bool stream_ordered = false;
    /// `owner` is the one allocation the memory lies in (see allocation()).
    bool owner_is_allocation = false;
  };

 private:
  // Only cuarrow makes buffers from fields (the factories below, imports):
  // a public constructor would let anyone label host memory as device
  // memory, or the reverse.
  friend struct detail::buffer_factory;
  explicit buffer(fields f);

  std::uintptr_t address_ = 0;
  std::int64_t size_ = 0;
  device_type type_ = device_type::cpu;
  int device_id_ = -1;
  bool mutable_ = true;
  std::optional<context> context_;
  std::shared_ptr<const void> owner_;
  std::shared_ptr<const buffer> parent_;
  stream_view free_stream_;
  bool stream_ordered_ = false;
  bool owner_is_allocation_ = false;
};

/// pyarrow.cuda's argument rules for byte positions and counts, in one place:
/// each resolves the arguments of one kind of call against the sizes
/// involved, or throws argument_out_of_range with pyarrow's message (the
/// text pyarrow.cuda users match on).  A count of -1 means "all there is" (or
/// "as much as fits" when the other side's size is given); other negative
/// counts are refused.
namespace ranges {

/// Bytes to copy out of a buffer of `size` bytes from `position`
/// (CudaBuffer.copy_to_host): into new memory when `dst_size` is -1, else
/// into a destination of `dst_size` bytes.
CUARROW_EXPORT std::int64_t read_count(std::int64_t size, std::int64_t position, std::int64_t nbytes,
                                       std::int64_t dst_size = -1);

/// Bytes to copy into a buffer of `size` bytes at `position` from a source
/// of `src_size` bytes in host (copy_from_host) or device
/// (copy_from_device) memory.
CUARROW_EXPORT std::int64_t write_count(std::int64_t size, std::int64_t position, std::int64_t nbytes,
                                        std::int64_t src_size, bool src_is_host);

/// Bytes to take from a source of `src_size` bytes at `offset` (`size` -1:
/// to the end) for a new buffer (Context.buffer_from_data).
CUARROW_EXPORT std::int64_t source_count(std::int64_t src_size, std::int64_t offset, std::int64_t size);

/// The length of a slice of a buffer of `size` bytes at `offset`
/// (CudaBuffer.slice): to the end without `length`, else `length` clamped
/// to the bytes there are.
CUARROW_EXPORT std::int64_t slice_length(std::int64_t size, std::int64_t offset, std::optional<std::int64_t> length);

}  // namespace ranges

/// Device memory of `size` bytes from the context's memory resource (or
/// `resource` if given), usable in the order of `s` and freed on `s`.  The
/// buffer may outlive `s`: when a cuarrow `stream` is destroyed (which waits
/// for its work) its buffers are freed on the legacy default stream, and a
/// buffer allocated on a foreign stream is moved to the legacy default stream
/// right after the allocation (free_stream() tells which).
/// Contents are uninitialized.  size 0 gives an empty device buffer without
/// calling the driver.  Returns once the allocation is queued on `s` (no
/// synchronization); cuarrow's copies on other streams wait for it
/// (is_stream_ordered), other code must order its work after `s` itself.
/// Throws out_of_memory, cuda_error, invalid_argument (negative size),
/// device_mismatch (a stream of another device).
CUARROW_EXPORT buffer allocate_device(const context& ctx, std::int64_t size, stream_view s = {},
                                      std::shared_ptr<device_memory_resource> resource = nullptr);

/// Pinned (page-locked) host memory, zeroed, portable to all contexts and
/// mapped for device access.  Type cuda_host, device id of `ctx`.  cuarrow
/// maps the memory itself and registers it with the driver
/// (cuMemHostRegister), so it stays valid for host code even if the context
/// is destroyed under cuarrow (another component's extra primary-context
/// release, cudaDeviceReset): only the pinning ends.  Synchronous, no
/// stream: ready on return.  Throws out_of_memory when the driver cannot
/// pin that much, std::bad_alloc when the host cannot map it, cuda_error,
/// invalid_argument (negative size).
CUARROW_EXPORT buffer allocate_pinned(const context& ctx, std::int64_t size);

/// Pins (page-locks) `size` bytes of ordinary host memory at `data` that the
/// caller owns, for the lifetime of the returned buffer (type cuda_host,
/// mapped for device access, portable to all contexts): copies from and to
/// it then run at the link's speed, without staging.  The registration ends
/// (cuMemHostUnregister) when the last handle goes, before `owner` is
/// released.  Throws invalid_argument (null data with a size, negative
/// size), cuda_error (e.g. CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when
/// the range overlaps a registered one), out_of_memory.  Synchronous, no
/// stream.
CUARROW_EXPORT buffer register_host(const context& ctx, void* data, std::int64_t size,
                                    std::shared_ptr<const void> owner, bool is_mutable = true);

/// Pinned host memory from cuarrow's caching pool (type cuda_host), or
/// nullopt when the pool is at its limit (transfer_options::
/// pinned_pool_limit_bytes) or no pinned memory can be had.  The block goes
/// back to the pool, still pinned, when the last handle is gone.  Used for
/// the results of device-to-host copies, which the DMA engine then writes at
/// the link's speed.  Contents are whatever the block held (not zeroed);
/// mapped for device access as allocate_pinned's is (cuarrow's gather
/// kernel writes small reads of device memory into it).
/// Synchronous, no stream.  Throws invalid_argument (negative size),
/// cuda_error (making `ctx` current); a failure to pin is nullopt.
CUARROW_EXPORT std::optional<buffer> try_allocate_pinned_pooled(const context& ctx, std::int64_t size);

struct pinned_pool_statistics {
  std::int64_t pinned_bytes = 0;  // held by the pool: cached and in use
  std::int64_t in_use_bytes = 0;  // handed out and not yet returned
};
CUARROW_EXPORT pinned_pool_statistics pinned_pool_stats();
/// Unpin and free every cached block of the pool.
CUARROW_EXPORT void trim_pinned_pool();

/// Ordinary host memory, 64-byte aligned, uninitialized.  Type cpu.  No
/// driver call.  Throws invalid_argument (negative size), std::bad_alloc.
CUARROW_EXPORT buffer allocate_host(std::int64_t size);

/// A view of device memory someone else owns.  `owner` is kept alive as long
/// as the view and its slices are; pass nullptr when the caller guarantees
/// the lifetime.  The memory must belong to `ctx`'s device; this is checked
/// against the driver's pointer attributes where the driver can tell
/// (device_mismatch), and memory the driver knows as managed or pinned host
/// memory is labelled cuda_managed or cuda_host instead of cuda.  Where the
/// driver knows the memory at `address`, every byte of the view must lie in
/// memory it knows of the same kind and device (the allocation `address`
/// lies in, or allocations and mappings placed end to end after it): a
/// size running past it is refused here rather than read as a fault later.
/// Throws invalid_argument (negative size, a view past the memory the
/// driver knows), cuda_error.  No stream: the buffer is
/// not stream-ordered, so work that wrote the memory must be ordered before
/// cuarrow's copies by the caller (copy on that stream, or synchronize it).
CUARROW_EXPORT buffer wrap_device(const context& ctx, std::uintptr_t address, std::int64_t size,
                                  std::shared_ptr<const void> owner, bool is_mutable = true);

/// A view of host memory someone else owns (type cpu, or cuda_host when
/// `pinned_ctx` names the context it is pinned or registered with; that is
/// not checked).  No driver call, no stream.  Throws invalid_argument
/// (negative size, null data with a size).
CUARROW_EXPORT buffer wrap_host(const void* data, std::int64_t size, std::shared_ptr<const void> owner,
                                bool is_mutable = true, std::optional<context> pinned_ctx = std::nullopt);

}  // namespace cuarrow
