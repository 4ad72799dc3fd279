// Internal: the runtime as the layers above it see it.
//
// The runtime (this folder) is the one layer that calls the CUDA driver.
// Buffers and the copy engine (src/buffer.cpp, src/copy.cpp,
// src/staging.cpp, src/pinned_pool.cpp), the typed Arrow layer (src/arrow/)
// and IPC (src/ipc.cpp) call the driver through the functions declared here
// (and the public classes context, scoped_context, stream, event), never
// through the driver table: tests/layering_check.cmake fails the build's
// tests if a file outside src/runtime/ includes driver_table.hpp or calls
// detail::driver().  CUDA's handle types (CUstream, CUevent, CUdeviceptr,
// CUresult ...) appear here; the table and its PFN types do not.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "context_state.hpp"   // contexts' state, stream registry, order_after
#include "cuarrow/stream.hpp"  // stream_view
#include "driver_result.hpp"   // errors (check, warn), the driver's lifetime
#include "page_locked.hpp"     // pinned host memory: the one way cuarrow pins
#include "pointer_query.hpp"   // what the driver knows of an address

namespace cuarrow::detail {

// ---- work queued on a stream, in the current context ----------------------------------
//
// Each throws cuda_error naming the driver call ("cuMemcpyHtoDAsync failed:
// ...") when the driver refuses it.

void copy_host_to_device_async(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream s);
void copy_device_to_host_async(void* dst, CUdeviceptr src, std::size_t bytes, CUstream s);
/// Within one device.
void copy_device_to_device_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream s);
/// Which way one copy of a batch goes (copy_many_async).
enum class copy_direction : unsigned char { device_to_device, host_to_device, device_to_host };
/// One copy of a batch (copy_many_async): device addresses, or the address
/// of PINNED host memory (page-locked or cuda_host) on the host side.
struct batched_copy {
  CUdeviceptr dst = 0;
  CUdeviceptr src = 0;
  std::size_t bytes = 0;
  copy_direction direction = copy_direction::device_to_device;
};
/// Many copies between device `device` (the current context's) and itself
/// or pinned host memory, queued in any order among themselves (their
/// destinations must be disjoint and no copy may read another's
/// destination), all in stream order after the work queued on `s` before.
/// With cuMemcpyBatchAsync (CUDA 13.0 drivers) a few thousand copies cost
/// one driver call, where one cuMemcpy*Async each costs about a
/// microsecond; without it (older drivers, or a driver that answers
/// NOT_SUPPORTED) one cuMemcpyDtoDAsync / HtoDAsync / DtoHAsync each.  On
/// the legacy default stream, which the batched call refuses, 16 or more
/// copies run on the context's side stream (context_state::side_stream),
/// ordered after and before the legacy stream's work (order_after); fewer
/// go one by one.  Throws cuda_error naming the call that failed; some of
/// the copies may be queued by then (on the side stream, which is then
/// synchronized before the error leaves).
/// `ctx` is the current context's state.  With `gather` (where the caller
/// found gather_ready), the copies within the device go to cuarrow's
/// gather kernel instead, one launch per 1,000 (gather_async); the others
/// as above.
void copy_many_async(std::span<const batched_copy> copies, context_state& ctx, CUstream s, bool gather = false);

/// True when cuarrow's gather kernel (kernels/gather.cu) can run in `ctx`
/// (loaded there at the first call): false when the library was built
/// without nvcc, the GPU has no image of it, or the driver lacks the
/// module entry points; gather_status says which.
bool gather_ready(context_state& ctx);
/// True when the gather kernel runs in `ctx` and may also write pinned
/// host memory through its host pointer (unified addressing and
/// CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM): small reads of device memory
/// into pinned memory can then be gathered too.
bool gather_reaches_host(context_state& ctx);
/// "ready", or why the gather kernel cannot run in `ctx`.
std::string gather_status(context_state& ctx);
/// Copies within `ctx`'s device (destinations disjoint, none reading
/// another's destination) by the gather kernel, one launch per 1,000
/// copies, on `s` in stream order.  Throws cuda_error when a launch fails
/// (launches before it may have been queued) or the kernel is not ready.
void gather_async(context_state& ctx, std::span<const batched_copy> copies, CUstream s);
/// Between devices, each side with its context.
void copy_peer_async(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t bytes,
                     CUstream s);
/// Any two addresses the driver knows (unified addressing: managed memory).
void copy_unified_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream s);
/// `bytes` bytes of device memory set to `value`.
void memset_async(CUdeviceptr dst, std::uint8_t value, std::size_t bytes, CUstream s);

/// Something kept until a stream has passed the work queued on it so far
/// (the buffers an asynchronous copy reads and writes), then destroyed on a
/// user thread: destroying it may call the driver (free device memory),
/// which the host function that learns the stream has passed must not.
struct deferred_release {
  deferred_release() = default;
  deferred_release(const deferred_release&) = delete;
  deferred_release& operator=(const deferred_release&) = delete;
  virtual ~deferred_release() = default;
};

/// Queue a host function on `s` that, once the work queued before it is
/// done, hands `item` to the process-wide list of deferred releases; the next
/// collect_deferred_releases() destroys it.  Returns the driver's answer:
/// on success the list owns `item`, on failure it stays the caller's.
CUresult release_when_passed(CUstream s, deferred_release* item) noexcept;

/// Destroy the deferred releases whose streams have passed them, on the
/// calling thread.  Cheap when there are none.  Public calls that may wait
/// or allocate run it (stream and event synchronization, allocation,
/// copies).
void collect_deferred_releases() noexcept;

/// Block until the work queued on `s` is done.  Throws cuda_error
/// ("cuStreamSynchronize failed: ...").  Unlike stream_view::synchronize it
/// runs no deferred releases (the copy engine calls it in the middle of an
/// operation).
void synchronize_stream(CUstream s);
/// The same, answering instead of throwing (cleanup after a failure).
CUresult try_synchronize_stream(CUstream s) noexcept;
/// Block until the work queued on `s` is done, with `ctx` made current for
/// the wait when given: a legacy default stream acts on the current
/// context.  With no context a default stream is not waited (nothing cuarrow
/// queued can be pending on it).  Throws cuda_error; runs no deferred
/// releases, as synchronize_stream.
void synchronize_in(const context* ctx, stream_view s);

/// Make later work on `s` wait for `e` (cuStreamWaitEvent): the one stream
/// wait for an event (stream_view::wait and order_after use it).  Throws
/// cuda_error.
void stream_wait_event(CUstream s, CUevent e);

/// An event owned by cuarrow's own code, created in the context current at
/// construction, without timing.  cuarrow::event is the public one: it needs
/// a cuarrow::context and checks every recording stream's device, which the
/// copy engine's workers (one context, their own stream) do not need.
class runtime_event {
 public:
  /// Throws cuda_error (out_of_memory when the driver has no room).
  runtime_event();
  /// Destroys the event; a failure is reported through the warning handler.
  ~runtime_event();
  runtime_event(runtime_event&& other) noexcept;
  runtime_event& operator=(runtime_event&&) = delete;
  runtime_event(const runtime_event&) = delete;
  runtime_event& operator=(const runtime_event&) = delete;

  /// Capture the work queued on `s` so far.  Throws cuda_error.
  void record(CUstream s);
  /// Block until the recorded work is done.  Throws cuda_error.
  void synchronize() const;
  /// The same, answering instead of throwing.
  CUresult try_synchronize() const noexcept;
  CUevent handle() const noexcept { return handle_; }

 private:
  CUevent handle_ = nullptr;
};

// ---- IPC (src/ipc.cpp decides what each answer means) ----------------------------------

/// The allocation that holds `address`: its start and size.
CUresult address_range(CUdeviceptr address, CUdeviceptr* base, std::size_t* size) noexcept;
/// The driver's IPC handle of the allocation starting at `base`.
CUresult ipc_get_mem_handle(CUipcMemHandle* out, CUdeviceptr base) noexcept;
/// Map another process's allocation into the current context (peer access
/// enabled lazily).
CUresult ipc_open_mem_handle(CUdeviceptr* mapped, const CUipcMemHandle& handle) noexcept;
/// Unmap what ipc_open_mem_handle mapped.
CUresult ipc_close_mem_handle(CUdeviceptr mapped) noexcept;

// Pool IPC (shareable pools, ipc_pool_resource).  Each answers
// CUDA_ERROR_NOT_SUPPORTED when the driver lacks the entry point.

/// The id of an ipc_pool_resource's pool of this process; 0 for any other pool.
std::uint64_t ipc_pool_id(CUmemoryPool pool) noexcept;
/// A new POSIX file descriptor of this process's ipc_pool_resource pool
/// with id `pool_id` (the caller's to close, close-on-exec), exported while
/// the pool cannot be destroyed; CUDA_ERROR_NOT_FOUND when no live pool has
/// that id.
CUresult ipc_pool_export_fd_by_id(int* fd, std::uint64_t pool_id) noexcept;
/// The export data of the pool allocation starting at `base`.
CUresult pool_export_pointer(CUmemPoolPtrExportData* out, CUdeviceptr base) noexcept;
/// A new POSIX file descriptor of `pool` (the caller's to close, close-on-exec).
CUresult pool_export_fd(int* fd, CUmemoryPool pool) noexcept;
/// Import a pool from a descriptor another process exported (the descriptor
/// stays the caller's).
CUresult pool_import(CUmemoryPool* out, int fd) noexcept;
/// Give `device` read/write access to `pool` unless it has it already.
CUresult pool_grant_access(CUmemoryPool pool, int device) noexcept;
/// Import a pointer of an imported pool into the current context.
CUresult pool_import_pointer(CUdeviceptr* out, CUmemoryPool pool, const CUmemPoolPtrExportData& data) noexcept;
/// Free an imported pointer (cuMemFree: waits for the context's work).
CUresult pool_free_imported(CUdeviceptr p) noexcept;
/// Destroy a created or imported pool (released once nothing of it is live).
CUresult pool_destroy(CUmemoryPool pool) noexcept;

// ---- GPUDirect Storage (cufile.cpp; cuarrow::gds_status() says whether) ---------------

/// A file registered with cuFile: read straight into device memory.
class gds_file {
 public:
  /// Opens `path` again for cuFile (with O_DIRECT where its file system
  /// allows) and registers it.  Returns null, saying why in `why`, when
  /// cuFile is not usable (gds_status()) or refuses the file.  Never
  /// throws for a cuFile failure (std::bad_alloc only).
  static std::unique_ptr<gds_file> open(const std::string& path, std::string& why);
  /// Deregisters the handle and closes the file.
  ~gds_file();
  gds_file(const gds_file&) = delete;
  gds_file& operator=(const gds_file&) = delete;

  /// Reads exactly `size` bytes at `file_offset` into the device memory
  /// at `base` + `base_offset` (cuFileRead: synchronous, ordered with no
  /// stream; the memory must be allocated and idle).  Needs the memory's
  /// context current.  Throws cuarrow::error naming the path, the offset
  /// and cuFile's answer (a file that ends early is an error too).  Thread
  /// safe: parts of one file may be read concurrently.
  void read(CUdeviceptr base, std::size_t base_offset, std::size_t size, std::int64_t file_offset) const;

  /// Whether the file was opened with O_DIRECT.
  bool direct() const noexcept { return direct_; }
  /// Whether cuFile runs in its compatibility mode (gds_info::compat_mode).
  bool compat_mode() const noexcept { return compat_mode_; }

 private:
  gds_file() = default;
  std::string path_;
  int fd_ = -1;
  void* handle_ = nullptr;
  bool direct_ = false;
  bool compat_mode_ = false;
};

// ---- nvCOMP (nvcomp.cpp; cuarrow::nvcomp_status() says whether) -----------------------

/// One ZSTD frame in device memory and where it decompresses to.
struct gpu_zstd_chunk {
  CUdeviceptr compressed = 0;
  std::size_t compressed_size = 0;
  CUdeviceptr out = 0;
  std::size_t size = 0;  ///< the size it must decompress to, exactly
};

/// The alignment nvCOMP needs of compressed inputs and of outputs (the
/// larger of the two), or 0 when nvcomp_status() is not available.
std::size_t gpu_zstd_alignment() noexcept;

/// Decompresses every chunk on the GPU with nvCOMP (one batched call on
/// stream `s` of context `ctx`, after the stream's earlier work) and waits
/// for it.  Returns, per chunk, an empty string, or what went wrong (nvCOMP's
/// status, or a size other than `size`).  Throws cuarrow::error when nvCOMP
/// is not available or refuses the call, the CUDA error when the device
/// faults, out_of_memory for its scratch memory.
std::vector<std::string> gpu_zstd_decompress(CUcontext ctx, std::span<const gpu_zstd_chunk> chunks, CUstream s);

}  // namespace cuarrow::detail
