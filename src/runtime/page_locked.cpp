// Page-locked host memory (page_locked.hpp says why cuarrow registers its
// own mappings instead of letting the driver allocate).
#include "page_locked.hpp"

#include <sys/mman.h>

#include <new>
#include <string>

#include "driver_table.hpp"

namespace cuarrow::detail {

void register_page_locked(void* p, std::size_t bytes, bool mapped) {
  const unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (mapped ? CU_MEMHOSTREGISTER_DEVICEMAP : 0u);
  check_alloc(driver().cuMemHostRegister(p, bytes, flags), "cuMemHostRegister", static_cast<std::int64_t>(bytes));
}

bool unregister_page_locked(void* p, CUcontext ctx) noexcept {
  if (shutting_down()) return true;  // the driver is going away with the process
  const driver_table* d = driver_if_loaded();
  if (d == nullptr) return true;
  // With `ctx` current if it can be made current.  If it cannot, it may have
  // been destroyed (and the registration with it), or the push failed for
  // another reason with the pages still pinned: the registration is
  // portable, so ask the driver to end it anyway, and let its answer tell
  // (never assume it is gone: unmapping pages still registered is unsafe).
  const bool pushed = ctx != nullptr && d->cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  const CUresult r = d->cuMemHostUnregister(p);
  if (pushed) {
    CUcontext popped = nullptr;
    const CUresult pr = d->cuCtxPopCurrent(&popped);
    if (pr != CUDA_SUCCESS) warn_result(pr, "cuCtxPopCurrent");
  }
  switch (r) {
    case CUDA_SUCCESS:
    // The registration ended with its context (destroyed by someone else),
    // or the driver is shutting down: nothing is pinned any more.
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_DEINITIALIZED: return true;
    default: warn_result(r, "cuMemHostUnregister"); return false;
  }
}

void* allocate_page_locked(std::size_t bytes, bool mapped) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  try {
    register_page_locked(p, bytes, mapped);
  } catch (...) {
    munmap(p, bytes);
    throw;
  }
  return p;
}

void free_page_locked(void* p, std::size_t bytes, CUcontext ctx) noexcept {
  if (p == nullptr) return;
  if (!unregister_page_locked(p, ctx)) {
    warn("leaving " + std::to_string(bytes) +
         " bytes of pinned host memory mapped: the driver still has them registered");
    return;
  }
  munmap(p, bytes);
}

}  // namespace cuarrow::detail
