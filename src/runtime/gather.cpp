// cuarrow's gather kernel: many copies within one device in one launch
// (kernels/gather.cu, kernels/gather_args.h).
//
// On the H200 machine each driver copy, batched by cuMemcpyBatchAsync or
// not, cost about 5 us of host time (bench/batch_copy_probe.py), so a copy
// of thousands of pieces (an IPC stream of a table's buffers) took the host
// longer than the device took to move the bytes.  One launch moves up to
// 1,000 pieces, its arguments in the launch's parameters.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "context_state.hpp"
#include "driver_table.hpp"
#include "kernels/gather_args.h"
#include "runtime.hpp"

namespace cuarrow::detail {

namespace {

#ifdef CUARROW_GATHER_FATBIN
#include CUARROW_GATHER_FATBIN
const void* fatbin_image() { return cuarrow_gather_fatbin_image; }
#else
const void* fatbin_image() { return nullptr; }
#endif

// Loads the module into ctx (current): the state says whether it can run, and why not.
void load(context_state& ctx) {
  const driver_table& d = driver();
  if (fatbin_image() == nullptr) {
    ctx.gather_why_not = "this cuarrow was built without nvcc: it has no gather kernel";
    return;
  }
  if (d.cuModuleLoadData == nullptr || d.cuModuleGetFunction == nullptr || d.cuLaunchKernel == nullptr ||
      d.cuModuleUnload == nullptr) {
    ctx.gather_why_not = "the driver lacks the module entry points";
    return;
  }
  // The arguments (32 KB) travel as launch parameters, which drivers take
  // above 4 KB from CUDA 12.1 on.
  if (d.version < 12010) {
    ctx.gather_why_not = "the driver is older than CUDA 12.1 (launches take its 32 KB of arguments from 12.1 on)";
    return;
  }
  CUmodule module = nullptr;
  if (const CUresult r = d.cuModuleLoadData(&module, fatbin_image()); r != CUDA_SUCCESS) {
    ctx.gather_why_not = "cuModuleLoadData: " + describe_result(r) + " (no image of the kernel for this GPU?)";
    return;
  }
  CUfunction fn = nullptr;
  if (const CUresult r = d.cuModuleGetFunction(&fn, module, CUARROW_GATHER_KERNEL_NAME); r != CUDA_SUCCESS) {
    ctx.gather_why_not = "cuModuleGetFunction: " + describe_result(r);
    if (const CUresult u = d.cuModuleUnload(module); u != CUDA_SUCCESS) warn_result(u, "cuModuleUnload");
    return;
  }
  ctx.gather_module = module;
  ctx.gather_function = fn;
  // Pinned host memory is mapped under unified addressing; where the device
  // can use the host pointer of registered memory, the kernel can write it
  // (gather_reaches_host).
  int unified = 0, host_pointer = 0;
  if (d.cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, ctx.cu_device) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&host_pointer, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                             ctx.cu_device) == CUDA_SUCCESS) {
    ctx.gather_host_pointers = unified != 0 && host_pointer != 0;
  }
}

// Launches the kernel once for `items`.
void launch(const driver_table& d, CUfunction fn, cuarrow_gather_args& args, std::uint32_t tiles, CUstream s) {
  void* params[] = {&args};
  check(d.cuLaunchKernel(fn, tiles, 1, 1, CUARROW_GATHER_THREADS, 1, 1, 0, s, params, nullptr),
        "cuLaunchKernel (cuarrow_gather)");
}

}  // namespace

bool gather_ready(context_state& ctx) {
  std::lock_guard lock(ctx.gather_mutex);
  if (!ctx.gather_tried) {
    ctx.gather_tried = true;
    scoped_context guard(ctx.handle);
    load(ctx);
  }
  return ctx.gather_function != nullptr;
}

bool gather_reaches_host(context_state& ctx) {
  if (!gather_ready(ctx)) return false;
  std::lock_guard lock(ctx.gather_mutex);
  return ctx.gather_host_pointers;
}

std::string gather_status(context_state& ctx) {
  if (gather_ready(ctx)) return "ready";
  std::lock_guard lock(ctx.gather_mutex);
  return ctx.gather_why_not;
}

void gather_async(context_state& ctx, std::span<const batched_copy> copies, CUstream s) {
  if (!gather_ready(ctx)) throw_cuda_error(CUDA_ERROR_NOT_FOUND, "cuarrow_gather (not loaded)");
  const driver_table& d = driver();
  // The arguments are copied by the driver at each launch: one buffer serves all.
  auto args = std::make_unique<cuarrow_gather_args>();
  std::uint32_t tiles = 0;
  auto flush = [&] {
    if (args->count == 0) return;
    launch(d, ctx.gather_function, *args, tiles, s);
    args->count = 0;
    tiles = 0;
  };
  constexpr std::uint64_t kMaxTiles = 0x7fffffffu;  // gridDim.x
  for (const batched_copy& c : copies) {
    if (c.bytes == 0) continue;
    const std::uint64_t n = (c.bytes + CUARROW_GATHER_TILE - 1) / CUARROW_GATHER_TILE;
    if (n > kMaxTiles) throw_cuda_error(CUDA_ERROR_INVALID_VALUE, "cuarrow_gather (a copy of more than 2^31 tiles)");
    if (args->count == CUARROW_GATHER_MAX_ITEMS || tiles + n > kMaxTiles) flush();
    cuarrow_gather_item& it = args->items[args->count++];
    it.dst = c.dst;
    it.src = c.src;
    it.size = c.bytes;
    it.first_tile = tiles;
    it.reserved = 0;
    tiles += static_cast<std::uint32_t>(n);
  }
  flush();
}

void unload_gather(context_state& ctx) noexcept {
  if (ctx.gather_module == nullptr) return;
  const driver_table* d = driver_if_loaded();
  if (d == nullptr || shutting_down()) return;
  const bool pushed = d->cuCtxPushCurrent(ctx.handle) == CUDA_SUCCESS;
  if (const CUresult r = d->cuModuleUnload(ctx.gather_module); r != CUDA_SUCCESS) warn_result(r, "cuModuleUnload");
  if (pushed) {
    CUcontext popped = nullptr;
    (void)d->cuCtxPopCurrent(&popped);
  }
  ctx.gather_module = nullptr;
  ctx.gather_function = nullptr;
}

}  // namespace cuarrow::detail
