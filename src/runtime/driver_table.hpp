// Internal: the table of CUDA driver entry points and error helpers.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace cuarrow::detail {

struct driver_table {
#define CUARROW_DRIVER_ENTRY(name, version, required) PFN_##name##_v##version name = nullptr;
#include "driver_entry_points.def"
#undef CUARROW_DRIVER_ENTRY

  int version = 0;
  bool emulated = false;
  bool no_device = false;  // cuInit answered CUDA_ERROR_NO_DEVICE
  std::string path;
  void* library = nullptr;
};

/// The loaded table; loads the driver on first call (thread-safe).  Throws
/// driver_error when no driver can be loaded; a failed load is retried on the
/// next call.
const driver_table& driver();

/// The table if already loaded, else nullptr.  Never loads.
const driver_table* driver_if_loaded() noexcept;

/// True once shutdown() began (process exit): destructors must not call the
/// driver any more.
bool shutting_down() noexcept;

/// "CUDA_ERROR_INVALID_VALUE (1): invalid argument"
std::string describe_result(CUresult r);

/// Throw cuda_error (out_of_memory for CUDA_ERROR_OUT_OF_MEMORY) for a failed
/// call: "<operation> failed: CUDA_ERROR_... (N): text".  `bytes` >= 0 adds
/// "(N bytes)" to the operation and is stored on out_of_memory.
[[noreturn]] void throw_cuda_error(CUresult r, const char* operation, std::int64_t bytes = -1);

inline void check(CUresult r, const char* operation) {
  if (r != CUDA_SUCCESS) throw_cuda_error(r, operation);
}
inline void check_alloc(CUresult r, const char* operation, std::int64_t bytes) {
  if (r != CUDA_SUCCESS) throw_cuda_error(r, operation, bytes);
}

/// Report a failure that cannot be thrown (destructors) through the warning handler.
void warn(const std::string& message) noexcept;
void warn_result(CUresult r, const char* operation) noexcept;

/// The runtime's work at exit (releasing the primary contexts it cached),
/// run by the loader's exit handler before it stops all driver calls.  That
/// handler is registered right after the driver library is loaded, so it
/// runs before the driver's own exit handlers.  The runtime sets it when it
/// first caches a context; the loader knows nothing of contexts.
void set_exit_hook(void (*hook)() noexcept) noexcept;

}  // namespace cuarrow::detail
