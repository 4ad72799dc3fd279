// Internal to the runtime (src/runtime/): the table of CUDA driver entry
// points.  The layers above call the runtime (runtime.hpp) instead;
// tests/layering_check.cmake keeps this header inside this folder.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "driver_result.hpp"  // check, warn, shutting_down()

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

/// The runtime's work at exit (releasing the primary contexts it cached),
/// run by the loader's exit handler before it stops all driver calls.  That
/// handler is registered right after the driver library is loaded, so it
/// runs before the driver's own exit handlers.  The runtime sets it when it
/// first caches a context; the loader knows nothing of contexts.
void set_exit_hook(void (*hook)() noexcept) noexcept;

}  // namespace cuarrow::detail
