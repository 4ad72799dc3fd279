// Which CUDA driver cuarrow talks to.
//
// cuarrow never links libcuda: the driver library is opened on first use and
// every entry point it calls is fetched once, through cuGetProcAddress, into
// one table (docs/driver-loading.md).  Loading the cuarrow library therefore
// works on machines without a GPU or driver; the first call that needs the
// driver throws cuarrow::driver_error if there is none.
//
// The driver library is, in order of precedence:
//   1. the one named by select_driver(), if called before first use;
//   2. the environment variable CUARROW_CUDA_DRIVER: a path to a driver
//      library, or the word "emulated" for the host emulation;
//   3. libcuda.so.1, found by the dynamic loader.
//
// "emulated" is cuarrow's host emulation of the CUDA driver (emulation/): a
// test and development tool that runs everything on host memory.  It is never
// selected silently.
#pragma once

#include <string>
#include <string_view>

#include "cuarrow/export.hpp"

namespace cuarrow {

/// Choose the driver library before first use: a path, "emulated", or "" for
/// the default.  Throws cuarrow::error if a different driver is already loaded.
CUARROW_EXPORT void select_driver(std::string_view path_or_emulated);

/// Load the driver now (normally done on first use).  Throws driver_error.
CUARROW_EXPORT void load_driver();

/// True once a driver is loaded and it is the host emulation.
CUARROW_EXPORT bool driver_is_emulated();

/// The loaded driver's version as CUDA encodes it (12080 = 12.8).  Loads the driver.
CUARROW_EXPORT int driver_version();

/// The path the driver was loaded from.  Loads the driver.
CUARROW_EXPORT std::string driver_path();

/// What the real CUDA driver says of this machine, asked apart from the
/// driver cuarrow uses: libcuda.so.1 is opened on its own (whatever
/// select_driver or CUARROW_CUDA_DRIVER say), initialised and asked for its
/// device count; cuarrow's choice of driver stays open and nothing is loaded
/// for it.  For deciding whether to run on the emulation (Python's
/// cuda.use_emulation_if_no_gpu).  Never throws for a missing or failing
/// driver: `reason` says why there is no device.
struct driver_probe {
  int devices = 0;
  std::string reason;  // empty when devices > 0
};
CUARROW_EXPORT driver_probe probe_real_driver();

/// Release every primary context cuarrow retained.  Runs automatically at
/// process exit; after it, objects still alive no longer call the driver when
/// destroyed.  Calling it early is allowed (tests do): contexts obtained later
/// are retained again.
CUARROW_EXPORT void shutdown() noexcept;

}  // namespace cuarrow
