#include "cuarrow/memory_resource.hpp"

#include <cstdint>
#include <limits>

#include "cuarrow/error.hpp"
#include "driver_table.hpp"

namespace cuarrow {

async_pool_resource::async_pool_resource(const context& ctx) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemAllocAsync == nullptr || d.cuDeviceGetDefaultMemPool == nullptr || d.cuMemFreeAsync == nullptr) {
    detail::throw_cuda_error(CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocAsync (this driver has no memory pools)");
  }
  CUdevice dev = 0;
  detail::check(d.cuDeviceGet(&dev, ctx.device_number()), "cuDeviceGet");
  detail::check(d.cuDeviceGetDefaultMemPool(&pool_, dev), "cuDeviceGetDefaultMemPool");
  // The default pool returns all freed memory to the driver at every
  // synchronization (release threshold 0), which makes the next allocation
  // map fresh pages.  Keep up to 1/16 of the device cached, unless someone
  // already raised the threshold.
  if (d.cuMemPoolGetAttribute != nullptr && d.cuMemPoolSetAttribute != nullptr) {
    cuuint64_t threshold = 0;
    if (d.cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS) {
      cuuint64_t wanted = static_cast<cuuint64_t>(ctx.properties().total_memory / 16);
      if (threshold < wanted) {
        d.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &wanted);
      }
    }
  }
}

std::uintptr_t async_pool_resource::allocate(std::int64_t bytes, stream_view s) {
  CUdeviceptr p = 0;
  detail::check_alloc(detail::driver().cuMemAllocAsync(&p, static_cast<size_t>(bytes), s.handle()), "cuMemAllocAsync",
                      bytes);
  return static_cast<std::uintptr_t>(p);
}

void async_pool_resource::deallocate(std::uintptr_t address, std::int64_t bytes, stream_view s) noexcept {
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

void async_pool_resource::trim(std::int64_t keep_bytes) {
  const detail::driver_table& d = detail::driver();
  if (d.cuMemPoolTrimTo == nullptr) return;
  detail::check(d.cuMemPoolTrimTo(pool_, static_cast<size_t>(keep_bytes)), "cuMemPoolTrimTo");
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
  if (ctx.properties().memory_pools_supported) return std::make_shared<async_pool_resource>(ctx);
  return std::make_shared<plain_device_resource>(ctx);
}

}  // namespace cuarrow
