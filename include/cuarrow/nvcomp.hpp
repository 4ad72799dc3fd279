// nvCOMP: whether cuarrow can decompress ZSTD bodies of Arrow IPC files on
// the GPU through NVIDIA's libnvcomp, and why not when it cannot.
//
// libnvcomp is never required: cuarrow loads it at run time (dlopen, like
// the CUDA driver and libcufile) the first time a file reader asks for GPU
// decompression (file_read_options::gpu_decompression) or nvcomp_status()
// is called.  Without it, or when it is refused, compressed bodies are
// decompressed on the host threads of the staging pipeline, as always.
//
// Environment, read once, at the first question:
//   CUARROW_NVCOMP=off|auto   off: never load libnvcomp.  auto (the
//                             default): load it when asked for.
//   CUARROW_NVCOMP_LIBRARY    the library to load instead of libnvcomp.so.6
//                             (a path or a soname).  The Python package sets
//                             a default when the nvidia-libnvcomp-cu13 wheel
//                             is installed.
//
// Only nvCOMP 6 is loaded: the entry points cuarrow calls are declared from
// its documented C API, whose signatures changed between major versions.
//
// Trust: nvCOMP's documentation says that corrupt compressed input is
// undefined behaviour (its checks are limited, for speed).  cuarrow checks
// each frame's header on the host (the ZSTD magic and the decompressed size,
// which must equal the size the IPC buffer declares) and each chunk's status
// and size afterwards, but a crafted frame could still make the GPU fault,
// which poisons the CUDA context.  GPU decompression is therefore off unless
// a reader asks for it: use it for files you trust (docs/ipc-format.md).
#pragma once

#include <string>

#include "cuarrow/export.hpp"

namespace cuarrow {

struct nvcomp_info {
  /// CUARROW_NVCOMP as understood: "off" or "auto".
  std::string mode;
  /// The library was loaded, is nvCOMP 6 and has every entry point cuarrow
  /// calls: file readers that ask for GPU decompression get it.
  bool available = false;
  /// nvCOMP's version ("6.0.0"), when loaded.
  std::string version;
  /// The library loaded, or the one that was tried.
  std::string library;
  /// What was found, in a sentence: why nvCOMP is not used, or that it is.
  std::string reason;
};

/// The answer for this process: computed once (loading libnvcomp unless
/// CUARROW_NVCOMP=off), then cached.  Thread-safe; never throws (a failure
/// is the answer's reason).  Loads the CUDA driver if it is not loaded yet:
/// nvCOMP runs kernels on the real driver, so with cuarrow's host emulation
/// of the driver libnvcomp is not loaded unless CUARROW_NVCOMP_LIBRARY names
/// a library explicitly (tests do, with a host stand-in).
CUARROW_EXPORT nvcomp_info nvcomp_status();

/// A libnvcomp to load when CUARROW_NVCOMP_LIBRARY is not set, in place of
/// the loader's libnvcomp.so.6: what a package that found nvCOMP's wheel
/// passes (cuarrow's Python package does, for nvidia-libnvcomp-cu13).
/// Unlike the variable it is not loaded on the host emulation of the driver,
/// and child processes do not inherit it.  It counts only if given before
/// nvCOMP is first examined (nvcomp_status, or a reader asking for GPU
/// decompression); returns whether it was taken.  Thread-safe.
CUARROW_EXPORT bool set_nvcomp_default_library(std::string path);

}  // namespace cuarrow
