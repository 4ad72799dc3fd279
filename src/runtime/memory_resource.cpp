#include "cuarrow/memory_resource.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include <unistd.h>

#include "cuarrow/error.hpp"
#include "driver_table.hpp"
#include "runtime.hpp"

namespace cuarrow {
namespace {

// A pool returns all freed memory to the driver at every synchronization
// (release threshold 0), which makes the next allocation map fresh pages.
// Keep up to 1/16 of the device cached, unless someone already raised the
// threshold.  Best effort: a pool works without it.
void raise_release_threshold(CUmemoryPool pool, const context& ctx) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemPoolGetAttribute == nullptr || d.cuMemPoolSetAttribute == nullptr) return;
  cuuint64_t threshold = 0;
  if (d.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS) {
    cuuint64_t wanted = static_cast<cuuint64_t>(ctx.properties().total_memory / 16);
    if (threshold < wanted) d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &wanted);
  }
}

// Stream-ordered allocation and free from a pool (null: the current
// device's default pool), shared by both pool resources.
std::uintptr_t pool_allocate(CUmemoryPool pool, std::int64_t bytes, stream_view s) {
  const detail::driver_table& d = detail::driver();
  CUdeviceptr p = 0;
  if (pool == nullptr) {
    detail::check_alloc(d.cuMemAllocAsync(&p, static_cast<size_t>(bytes), s.handle()), "cuMemAllocAsync", bytes);
  } else {
    detail::check_alloc(d.cuMemAllocFromPoolAsync(&p, static_cast<size_t>(bytes), pool, s.handle()),
                        "cuMemAllocFromPoolAsync", bytes);
  }
  return static_cast<std::uintptr_t>(p);
}

void pool_deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept {
  const detail::driver_table& d = detail::driver();
  CUresult r = d.cuMemFreeAsync(static_cast<CUdeviceptr>(address), s.handle());
  if (r == CUDA_ERROR_INVALID_HANDLE && !s.is_default()) {
    // The stream the buffer was to be freed on has been destroyed: free with
    // cuMemFree, which first waits for all work on the context.
    r = d.cuMemFree(static_cast<CUdeviceptr>(address));
  }
  if (r != CUDA_SUCCESS) {
    detail::warn_result(r, ("cuMemFreeAsync(" + std::to_string(bytes) + " bytes)").c_str());
  }
}

std::optional<pool_statistics> pool_stats(CUmemoryPool pool) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemPoolGetAttribute == nullptr) return std::nullopt;
  cuuint64_t used = 0, reserved = 0;
  detail::check(d.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
                "cuMemPoolGetAttribute(USED_MEM_CURRENT)");
  detail::check(d.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
                "cuMemPoolGetAttribute(RESERVED_MEM_CURRENT)");
  return pool_statistics{static_cast<std::int64_t>(used), static_cast<std::int64_t>(reserved)};
}

void pool_trim(CUmemoryPool pool, std::int64_t keep_bytes) {
  if (keep_bytes < 0) {
    throw invalid_argument("trim: keep_bytes must be 0 or more, not " + std::to_string(keep_bytes));
  }
  const detail::driver_table& d = detail::driver();
  if (d.cuMemPoolTrimTo == nullptr) return;
  detail::check(d.cuMemPoolTrimTo(pool, static_cast<size_t>(keep_bytes)), "cuMemPoolTrimTo");
}

// This process's ipc_pool_resource pools and their ids, for export_ipc
// (which sees a buffer's pool handle only) to write the pool's id into its
// handles.  The allocation a buffer lies in is the driver's to say
// (cuMemGetAddressRange answers the pool allocation itself, on driver 580 as
// on the emulation: Gpu.PoolAllocationsExportFromTheirStart), so nothing is
// recorded per allocation.
struct ipc_pool_registry {
  std::mutex mutex;
  std::map<CUmemoryPool, std::uint64_t> pools;
};

ipc_pool_registry& ipc_pools() {
  static auto* r = new ipc_pool_registry;  // never destroyed: pools may outlive main()
  return *r;
}

std::uint64_t random_pool_id() {
  std::random_device rd;
  std::uint64_t id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  id ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

}  // namespace

async_pool_resource::async_pool_resource(const context& ctx) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemAllocAsync == nullptr || d.cuDeviceGetDefaultMemPool == nullptr || d.cuMemFreeAsync == nullptr) {
    detail::throw_cuda_error(CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocAsync (this driver has no memory pools)");
  }
  CUdevice dev = 0;
  detail::check(d.cuDeviceGet(&dev, ctx.device_number()), "cuDeviceGet");
  detail::check(d.cuDeviceGetDefaultMemPool(&pool_, dev), "cuDeviceGetDefaultMemPool");
  raise_release_threshold(pool_, ctx);
}

std::uintptr_t async_pool_resource::allocate(std::int64_t bytes, stream_view s) {
  return pool_allocate(nullptr, bytes, s);
}

void async_pool_resource::deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept {
  pool_deallocate(address, bytes, s);
}

void async_pool_resource::trim(std::int64_t keep_bytes) { pool_trim(pool_, keep_bytes); }

std::optional<pool_statistics> async_pool_resource::statistics() const { return pool_stats(pool_); }

ipc_pool_resource::ipc_pool_resource(const context& ctx) : device_(ctx.device_number()) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemPoolCreate == nullptr || d.cuMemPoolDestroy == nullptr || d.cuMemAllocFromPoolAsync == nullptr ||
      d.cuMemFreeAsync == nullptr || d.cuMemPoolExportToShareableHandle == nullptr ||
      d.cuMemPoolExportPointer == nullptr) {
    detail::throw_cuda_error(CUDA_ERROR_NOT_SUPPORTED, "cuMemPoolCreate (this driver has no shareable memory pools)");
  }
  CUdevice dev = 0;
  detail::check(d.cuDeviceGet(&dev, device_), "cuDeviceGet");
  int handle_types = 0;
  detail::check(d.cuDeviceGetAttribute(&handle_types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev),
                "cuDeviceGetAttribute(MEMPOOL_SUPPORTED_HANDLE_TYPES)");
  if ((handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    detail::throw_cuda_error(CUDA_ERROR_NOT_SUPPORTED,
                             ("cuMemPoolCreate (device " + std::to_string(device_) +
                              " has no memory pools with POSIX file-descriptor handles; use plain_device_resource "
                              "and legacy IPC)")
                                 .c_str());
  }
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  detail::check(d.cuMemPoolCreate(&pool_, &props), "cuMemPoolCreate");
  // cuMemPoolExportPointer shares an allocation "from an already shared
  // memory pool": until the pool has been exported once, the driver answers
  // CUDA_ERROR_INVALID_VALUE (driver 580 on the H200 does).  So the pool is
  // shared here, once, and the descriptor kept until the pool is destroyed:
  // export_ipc works whether or not export_pool was called first.
  if (CUresult r = detail::pool_export_fd(&shared_fd_, pool_); r != CUDA_SUCCESS) {
    shared_fd_ = -1;
    d.cuMemPoolDestroy(pool_);
    detail::throw_cuda_error(r, "cuMemPoolExportToShareableHandle (sharing a new ipc_pool_resource's pool)");
  }
  raise_release_threshold(pool_, ctx);
  id_ = random_pool_id();
  try {
    ipc_pool_registry& r = ipc_pools();
    std::lock_guard lock(r.mutex);
    r.pools[pool_] = id_;
  } catch (...) {
    d.cuMemPoolDestroy(pool_);
    close(shared_fd_);
    throw;
  }
}

ipc_pool_resource::~ipc_pool_resource() {
  {
    ipc_pool_registry& r = ipc_pools();
    std::lock_guard lock(r.mutex);
    r.pools.erase(pool_);
  }
  if (shared_fd_ >= 0) close(shared_fd_);
  if (detail::shutting_down()) return;  // the driver releases everything at exit
  CUresult r = detail::driver().cuMemPoolDestroy(pool_);
  if (r != CUDA_SUCCESS) detail::warn_result(r, "cuMemPoolDestroy");
}

std::uintptr_t ipc_pool_resource::allocate(std::int64_t bytes, stream_view s) { return pool_allocate(pool_, bytes, s); }

void ipc_pool_resource::deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept {
  pool_deallocate(address, bytes, s);
}

void ipc_pool_resource::trim(std::int64_t keep_bytes) { pool_trim(pool_, keep_bytes); }

std::optional<pool_statistics> ipc_pool_resource::statistics() const { return pool_stats(pool_); }

namespace detail {

std::uint64_t ipc_pool_id(CUmemoryPool pool) noexcept {
  ipc_pool_registry& r = ipc_pools();
  std::lock_guard lock(r.mutex);
  auto it = r.pools.find(pool);
  return it == r.pools.end() ? 0 : it->second;
}

CUresult ipc_pool_export_fd_by_id(int* fd, std::uint64_t pool_id) noexcept {
  ipc_pool_registry& r = ipc_pools();
  std::lock_guard lock(r.mutex);  // the pool's destructor leaves the registry first
  for (const auto& [pool, id] : r.pools) {
    if (id != pool_id) continue;
    return pool_export_fd(fd, pool);
  }
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace detail

std::shared_ptr<ipc_pool_resource> ipc_pool_resource::shared_for(const context& ctx) {
  // One pool per device for the process, never destroyed (a leaked map):
  // buffers of it may be freed after static destructors ran, and importers
  // in other processes keep using the pool's descriptor.
  static auto* pools = new std::map<int, std::shared_ptr<ipc_pool_resource>>;
  static auto* mutex = new std::mutex;
  const std::lock_guard<std::mutex> lock(*mutex);
  std::shared_ptr<ipc_pool_resource>& p = (*pools)[ctx.device_number()];
  if (!p) p = std::make_shared<ipc_pool_resource>(ctx);  // a failure leaves it empty: tried again next time
  return p;
}

const std::shared_ptr<device_memory_resource>& plain_device_resource::shared() {
  static const auto* one = new std::shared_ptr<device_memory_resource>(std::make_shared<plain_device_resource>());
  return *one;
}

std::uintptr_t plain_device_resource::allocate(std::int64_t bytes, stream_view) {
  CUdeviceptr p = 0;
  detail::check_alloc(detail::driver().cuMemAlloc(&p, static_cast<size_t>(bytes)), "cuMemAlloc", bytes);
  return static_cast<std::uintptr_t>(p);
}

void plain_device_resource::deallocate(std::uintptr_t address, std::int64_t bytes, stream_view) noexcept {
  CUresult r = detail::driver().cuMemFree(static_cast<CUdeviceptr>(address));
  if (r != CUDA_SUCCESS) detail::warn_result(r, ("cuMemFree(" + std::to_string(bytes) + " bytes)").c_str());
}

std::shared_ptr<device_memory_resource> make_default_resource(const context& ctx) {
  std::string wanted = "cuda_ipc_pool";
  if (const char* env = std::getenv("CUARROW_MEMORY_RESOURCE"); env != nullptr && *env != '\0') wanted = env;
  if (wanted != "cuda_ipc_pool" && wanted != "cuda_async_pool" && wanted != "cuda_malloc") {
    throw invalid_argument("CUARROW_MEMORY_RESOURCE=" + wanted +
                           " is not one of cuda_ipc_pool (the default: a stream-ordered pool whose memory can be "
                           "shared with other processes), cuda_async_pool (the device's default pool) or "
                           "cuda_malloc (cuMemAlloc); set one of them or unset it");
  }
  if (wanted == "cuda_malloc" || !ctx.properties().memory_pools_supported) {
    return std::make_shared<plain_device_resource>(ctx);
  }
  if (wanted == "cuda_ipc_pool") {
    // The process-wide IPC pool of the device: as fast as the device's
    // default pool on the H200 (bench/pool_ipc_probe), and its memory can be
    // exported (export_ipc gives pool handles).  Where the device or driver
    // has no shareable pools, the device's default pool.
    try {
      return ipc_pool_resource::shared_for(ctx);
    } catch (const cuda_error& e) {
      if (e.code() != CUDA_ERROR_NOT_SUPPORTED) {
        detail::warn(std::string("the IPC-capable memory pool could not be created (") + e.what() + "); device " +
                     std::to_string(ctx.device_number()) +
                     " uses its default pool (cuda_async_pool), whose memory CUDA IPC cannot export");
      }
    }
  }
  return std::make_shared<async_pool_resource>(ctx);
}

}  // namespace cuarrow
