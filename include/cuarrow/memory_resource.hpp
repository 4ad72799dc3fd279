// Where device memory comes from.
//
// Device buffers are allocated through a device_memory_resource, chosen per
// context (context::set_memory_resource).  The default is a stream-ordered
// pool whose memory can be shared with other processes (ipc_pool_resource,
// one per device for the process); the device's default pool
// (async_pool_resource) where the device has no shareable pools; cuMemAlloc
// where it has no pools at all.  CUARROW_MEMORY_RESOURCE chooses another
// (make_default_resource).  Adapters for RMM,
// CuPy or PyTorch pools implement this interface.
//
// A resource is shared: every buffer it allocated holds it alive until the
// buffer is freed.  Implementations must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow {

/// What a pooled resource holds: bytes of its allocations in use, and bytes
/// it has from the driver (in use and cached for reuse).
struct pool_statistics {
  std::int64_t used_bytes = 0;
  std::int64_t reserved_bytes = 0;
};

class CUARROW_EXPORT device_memory_resource {
 public:
  virtual ~device_memory_resource() = default;

  /// Allocate `bytes` (> 0) of device memory usable in the order of `s`
  /// (work on other streams must wait for `s` first).  Called with the
  /// resource's context current.  Throws out_of_memory (with the byte
  /// count) or cuda_error.
  virtual std::uintptr_t allocate(std::int64_t bytes, stream_view s) = 0;

  /// Free memory from allocate(), ordered after the work queued on `s`.
  /// Called with the resource's context current.  Must not throw: report
  /// failures through the warning handler.
  virtual void deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept = 0;

  /// A short name for messages and repr, e.g. "cuda_async_pool".
  virtual std::string name() const = 0;

  /// Pooled resources: what the pool holds (cuMemPoolGetAttribute); nullopt
  /// for others (the default).  Throws cuda_error.
  virtual std::optional<pool_statistics> statistics() const { return std::nullopt; }
  /// Pooled resources: return cached memory to the driver, keeping at most
  /// `keep_bytes` (after the frees queued on streams have run).  Others:
  /// nothing to do (the default).  Throws cuda_error.
  virtual void trim(std::int64_t keep_bytes = 0) { (void)keep_bytes; }
};

/// cuMemAllocAsync / cuMemFreeAsync on the device's default memory pool.
/// The pool's release threshold is raised so that freed memory is cached for
/// reuse instead of being returned to the driver at every synchronization.
class CUARROW_EXPORT async_pool_resource final : public device_memory_resource {
 public:
  /// Throws cuda_error (CUDA_ERROR_NOT_SUPPORTED) where pools are
  /// unsupported, cuda_error when the pool cannot be had.  No stream work.
  explicit async_pool_resource(const context& ctx);
  /// cuMemAllocAsync on `s`: returns at once; the memory is valid in the
  /// order of `s`.  Throws out_of_memory, cuda_error.
  std::uintptr_t allocate(std::int64_t bytes, stream_view s) override;
  /// cuMemFreeAsync on `s`; when `s` was destroyed since, cuMemFree (which
  /// waits for the context's work).
  void deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept override;
  std::string name() const override { return "cuda_async_pool"; }
  std::optional<pool_statistics> statistics() const override;
  void trim(std::int64_t keep_bytes = 0) override;

 private:
  // No context member: the context holds its resource, and a resource
  // holding the context back would keep both alive forever.
  CUmemoryPool pool_ = nullptr;
};

/// A stream-ordered pool of its own on `ctx`'s device, created with POSIX
/// file-descriptor shareable handles (cuMemPoolCreate with
/// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), so that its memory can be
/// shared with other processes: export_pool (cuarrow/ipc.hpp) gives the
/// pool's descriptor to send once, export_ipc then a handle per buffer.
/// Allocation and free are stream-ordered as with async_pool_resource
/// (cuMemAllocFromPoolAsync / cuMemFreeAsync), and the release threshold is
/// raised the same way.
///
/// A class of its own rather than an option of async_pool_resource: that one
/// borrows the device's default pool (shared with every library of the
/// process, never destroyed, not IPC-capable), this one creates a pool, owns
/// it and destroys it with the last buffer allocated from it.  The
/// process-wide one of each device (shared_for) is cuarrow's default
/// resource: on the H200 it costs nothing over the default pool
/// (bench/pool_ipc_probe, docs/ipc.md "Pool memory").
class CUARROW_EXPORT ipc_pool_resource final : public device_memory_resource {
 public:
  /// Creates the pool and exports it once (the driver shares an allocation
  /// only from an already shared pool); the resource holds that descriptor
  /// (close-on-exec) until it is destroyed.  Throws cuda_error
  /// (CUDA_ERROR_NOT_SUPPORTED) where the driver or device has no pools or no
  /// POSIX file-descriptor pools, cuda_error when the pool cannot be created
  /// or exported.  No stream work.
  explicit ipc_pool_resource(const context& ctx);
  /// cuMemPoolDestroy: the driver releases the pool once the frees queued on
  /// streams have run (buffers hold their resource, so none is left).
  ~ipc_pool_resource() override;
  ipc_pool_resource(const ipc_pool_resource&) = delete;
  ipc_pool_resource& operator=(const ipc_pool_resource&) = delete;

  /// cuMemAllocFromPoolAsync on `s`: returns at once; the memory is valid in
  /// the order of `s`.  Throws out_of_memory, cuda_error.
  std::uintptr_t allocate(std::int64_t bytes, stream_view s) override;
  /// cuMemFreeAsync on `s`; when `s` was destroyed since, cuMemFree.
  void deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept override;
  std::string name() const override { return "cuda_ipc_pool"; }
  std::optional<pool_statistics> statistics() const override;
  void trim(std::int64_t keep_bytes = 0) override;

  /// The driver's pool.
  CUmemoryPool native_handle() const noexcept { return pool_; }
  /// The device the pool's memory is on.
  int device_id() const noexcept { return device_; }
  /// A random id of this pool (never 0), written into the handles of its
  /// memory and given with its descriptor, so that an importer can tell a
  /// handle of another pool.
  std::uint64_t pool_id() const noexcept { return id_; }

  /// The process-wide pool of `ctx`'s device that ipc::share packs into
  /// (share_memory::pool): created on the first call for the device, then
  /// the same one, kept for the process (never destroyed: its memory may be
  /// freed after static destructors ran).  Thread-safe.  Throws as the
  /// constructor does (cuda_error CUDA_ERROR_NOT_SUPPORTED without
  /// shareable pools); a failed creation is tried again by the next call.
  static std::shared_ptr<ipc_pool_resource> shared_for(const context& ctx);

 private:
  CUmemoryPool pool_ = nullptr;
  int device_ = 0;
  std::uint64_t id_ = 0;
  int shared_fd_ = -1;  // the pool's descriptor from its first export, closed with it
};

/// cuMemAlloc / cuMemFree: synchronous, unpooled.
class CUARROW_EXPORT plain_device_resource final : public device_memory_resource {
 public:
  plain_device_resource() = default;
  explicit plain_device_resource(const context&) {}
  /// One instance for every context (the resource is stateless), never
  /// destroyed: buffers allocated from it may be freed after static
  /// destructors ran.
  static const std::shared_ptr<device_memory_resource>& shared();
  /// cuMemAlloc: synchronous, `s` is not used.  Throws out_of_memory,
  /// cuda_error.
  std::uintptr_t allocate(std::int64_t bytes, stream_view s) override;
  /// cuMemFree: synchronous, `s` is not used.
  void deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept override;
  std::string name() const override { return "cuda_malloc"; }
};

/// The resource a context starts with: ipc_pool_resource::shared_for(ctx)
/// ("cuda_ipc_pool"); where the device or driver has no shareable pools,
/// async_pool_resource ("cuda_async_pool"; a failure other than
/// CUDA_ERROR_NOT_SUPPORTED is reported through the warning handler); where
/// it has no pools, plain_device_resource ("cuda_malloc").  The environment
/// variable CUARROW_MEMORY_RESOURCE (read at each call), set to one of those
/// three names, chooses another (cuda_ipc_pool still falls back as above);
/// any other value throws invalid_argument.  Throws cuda_error when the
/// chosen pool cannot be had.
CUARROW_EXPORT std::shared_ptr<device_memory_resource> make_default_resource(const context& ctx);

}  // namespace cuarrow
