// GPUDirect Storage (cuFile): whether cuarrow can read files straight into
// device memory through NVIDIA's libcufile, and why not when it cannot.
//
// libcufile is never required: cuarrow loads it at run time (dlopen, like
// the CUDA driver) the first time a file reader or gds_status() asks, and
// reads files through its staging pipeline (pread into pinned memory, then
// DMA) whenever cuFile is absent, refused, or not worth using.
//
// Environment, read once, at the first question:
//   CUARROW_GDS=off|auto|on   off: never load libcufile.  auto (the
//                             default): file readers use cuFile only when it
//                             moves bytes directly (nvidia-fs loaded), not
//                             in its compatibility mode; without nvidia-fs
//                             libcufile is not even loaded.  on: cuFile is
//                             used in compatibility mode too.
//   CUARROW_CUFILE_LIBRARY    the library to load instead of libcufile.so.0
//                             (a path or a soname).
//
// Compatibility mode: without the nvidia-fs kernel module cuFile still
// answers, but reads with POSIX pread into its own host bounce buffers and
// copies them to the device: not direct, and in general no faster than
// cuarrow's own pipeline.  cuarrow counts cuFile as being in compatibility
// mode when /proc/driver/nvidia-fs/version does not exist (the module is not
// loaded) or when cuFileDriverGetProperties reports nvidia-fs version 0.0.
// A direct path without nvidia-fs (the kernel's PCI P2PDMA, newer cuFile
// releases) is therefore counted as compatibility mode too: CUARROW_GDS=on
// uses it anyway.  docs/ipc-format.md ("Files by path") has the details.
#pragma once

#include <string>

#include "cuarrow/export.hpp"

namespace cuarrow {

struct gds_info {
  /// CUARROW_GDS as understood: "off", "auto" or "on".
  std::string mode;
  /// The library was loaded and has every entry point cuarrow calls.
  bool loaded = false;
  /// cuFileDriverOpen succeeded: cuFile can read into device memory.
  bool usable = false;
  /// cuFile runs, or would run, in its compatibility mode (see above).
  bool compat_mode = false;
  /// File readers use cuFile: usable, and either not in compatibility mode
  /// or CUARROW_GDS=on.
  bool available = false;
  /// The library loaded, or the one that was tried.
  std::string library;
  /// What was found, in a sentence: why cuFile is not used, or how it runs.
  std::string reason;
};

/// The answer for this process: computed once (loading libcufile and
/// opening its driver unless CUARROW_GDS=off), then cached.  Thread-safe;
/// never throws (a failure is the answer's reason).  Loads the CUDA driver
/// if it is not loaded yet: cuFile reads the real driver's device memory,
/// so with cuarrow's host emulation of the driver cuFile is not used unless
/// CUARROW_CUFILE_LIBRARY names a library explicitly (tests do).
CUARROW_EXPORT gds_info gds_status();

}  // namespace cuarrow
