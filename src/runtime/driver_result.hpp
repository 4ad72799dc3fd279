// Internal: driver results made errors and warnings, and the driver's
// lifetime as the runtime's users see it (included by runtime.hpp for the
// layers above, and by driver_table.hpp inside the runtime).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace cuarrow::detail {

/// "CUDA_ERROR_INVALID_VALUE (1): invalid argument"
std::string describe_result(CUresult r);

/// An address as messages name it: "0x7f3a00000000".
std::string hex_address(std::uintptr_t address);

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

// ---- the driver's lifetime ---------------------------------------------------------------

/// True once a driver is loaded (never loads one).
bool driver_loaded() noexcept;

/// True once shutdown() began (process exit): destructors must not call the
/// driver any more.
bool shutting_down() noexcept;

}  // namespace cuarrow::detail
