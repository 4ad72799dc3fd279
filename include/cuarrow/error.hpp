// cuarrow's one error model: exceptions, all derived from cuarrow::error.
//
//   error                       base of everything cuarrow throws
//   ├─ cuda_error               a CUDA driver call failed; carries the CUresult
//   │   └─ out_of_memory        CUDA_ERROR_OUT_OF_MEMORY; carries the byte count
//   ├─ driver_error             no usable driver: missing library, too old, no device
//   ├─ invalid_argument         the caller passed something wrong
//   │   ├─ out_of_range         a position or length outside a buffer
//   │   │   └─ argument_out_of_range  an argument outside pyarrow.cuda's ranges (cuarrow::ranges)
//   │   ├─ device_mismatch      memory, stream or event of the wrong device
//   │   └─ read_only            a write into an immutable buffer
//   ├─ host_access_error        host code asked for a host pointer to device memory
//   ├─ memory_kind_error        memory of a kind the operation cannot use (host memory for a device view)
//   └─ io_error                 a file could not be opened, read, created or written; carries path and errno
//
// Messages follow one recipe, e.g.
//   cuMemAlloc(1048576 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory
// An operation that throws leaves every object it touched usable.
// Destructors never throw: failures there go to the warning handler.
//
// How the headers state errors and streams: each constructor, allocator,
// export and import names what it throws by the types above (docs/errors.md
// says which driver results become which).  Not repeated there: any call
// that needs the driver throws driver_error when none can be loaded (the
// first such call loads it), and failures of work queued earlier on a
// stream surface as cuda_error at the next call that synchronizes it.  Each
// also says which stream its work is ordered on, whether it synchronizes,
// and what the caller must do before reading the result.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "cuarrow/export.hpp"

namespace cuarrow {

class CUARROW_EXPORT error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA driver call returned an error.  code() is the CUresult value.
class CUARROW_EXPORT cuda_error : public error {
 public:
  cuda_error(int code, std::string name, std::string operation, const std::string& message);
  int code() const noexcept { return code_; }
  /// The CUresult's name, e.g. "CUDA_ERROR_INVALID_VALUE".
  const std::string& name() const noexcept { return name_; }
  /// The driver call that failed, e.g. "cuMemcpyDtoHAsync".
  const std::string& operation() const noexcept { return operation_; }

 private:
  int code_;
  std::string name_;
  std::string operation_;
};

/// The device (or pinned host memory) has no room for an allocation.
class CUARROW_EXPORT out_of_memory : public cuda_error {
 public:
  out_of_memory(int code, std::string name, std::string operation, const std::string& message, std::int64_t bytes);
  std::int64_t bytes() const noexcept { return bytes_; }

 private:
  std::int64_t bytes_;
};

/// No usable CUDA driver: the library is missing, too old, or there is no device.
class CUARROW_EXPORT driver_error : public error {
 public:
  using error::error;
};

class CUARROW_EXPORT invalid_argument : public error {
 public:
  using error::error;
};

class CUARROW_EXPORT out_of_range : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

/// An argument outside the range a call takes, by pyarrow.cuda's rules
/// (cuarrow::ranges), with pyarrow's message.  pyarrow.cuda raises these as
/// a plain ValueError, not as invalid data: the Python layer does the same.
class CUARROW_EXPORT argument_out_of_range : public out_of_range {
 public:
  using out_of_range::out_of_range;
};

class CUARROW_EXPORT device_mismatch : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

class CUARROW_EXPORT read_only : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

/// Host code asked to read or write device memory through a host pointer.
class CUARROW_EXPORT host_access_error : public error {
 public:
  using error::error;
};

/// Memory of a kind the operation cannot use: e.g. a tensor in ordinary host
/// memory given where memory the device can reach is needed.
class CUARROW_EXPORT memory_kind_error : public error {
 public:
  using error::error;
};

/// A file could not be opened, read, created or written (the IPC format's
/// readers and writers of paths).  path() names the file, error_code() is
/// the errno value (ENOENT: no such file or directory; EISDIR: a directory;
/// ENOSPC: the disk is full; EACCES: no permission; 0 when the failure has
/// none, e.g. a file that ends before the bytes its metadata promises); the
/// message also says the offset where one applies and the system's reason.
class CUARROW_EXPORT io_error : public error {
 public:
  io_error(std::string path, int error_code, const std::string& message);
  const std::string& path() const noexcept { return path_; }
  int error_code() const noexcept { return error_code_; }

 private:
  std::string path_;
  int error_code_;
};

/// Where failures that cannot be thrown (in destructors, release callbacks)
/// are reported.  The default handler writes one line to stderr.  The handler
/// must not throw and must not call into cuarrow.  Thread-safe.
using warning_handler = std::function<void(std::string_view message)>;
CUARROW_EXPORT void set_warning_handler(warning_handler handler);

}  // namespace cuarrow
