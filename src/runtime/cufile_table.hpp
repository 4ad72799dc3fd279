// Internal to the runtime (src/runtime/): the entry points of libcufile
// (GPUDirect Storage) that cuarrow calls, loaded at run time.  The layers
// above use gds_file (runtime.hpp) and cuarrow::gds_status() (gds.hpp);
// tests/layering_check.cmake keeps this header inside this folder.
//
// The CUDA toolkit cuarrow builds with need not ship cufile.h, so the few
// types used are declared here from NVIDIA's documented C API (the GDS
// cuFile API reference), with cuarrow's own names and the same layout.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace cuarrow::detail {

/// CUfileError_t: the cuFile status (CUfileOpError, 0 = CU_FILE_SUCCESS)
/// and, when it is CU_FILE_CUDA_DRIVER_ERROR, the CUDA driver's CUresult.
struct cufile_status {
  int err = 0;
  int cu_err = 0;
};

/// CUfileDescr_t with type CU_FILE_HANDLE_TYPE_OPAQUE_FD (1).
struct cufile_descriptor {
  int type = 1;
  union {
    int fd;
    void* handle;
  } handle{};
  const void* fs_ops = nullptr;
};

/// CUfileDrvProps_t.
struct cufile_driver_properties {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    std::size_t poll_thresh_size;    // KiB
    std::size_t max_direct_io_size;  // KiB
    unsigned int dstatusflags;       // bit i: file system i (CUfileDriverStatusFlags) supported
    unsigned int dcontrolflags;      // bit 0: poll mode; bit 1: compatibility mode allowed
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
};

using cufile_handle = void*;

struct cufile_table {
  cufile_status (*driver_open)() = nullptr;
  cufile_status (*driver_close)() = nullptr;  // cuFileDriverClose_v2, else cuFileDriverClose
  cufile_status (*driver_get_properties)(cufile_driver_properties*) = nullptr;
  cufile_status (*handle_register)(cufile_handle*, cufile_descriptor*) = nullptr;
  void (*handle_deregister)(cufile_handle) = nullptr;
  // Bytes read; -1 with errno for a system error; -CUfileOpError for
  // cuFile's own.
  ssize_t (*read)(cufile_handle, void* base, std::size_t size, off_t file_offset, off_t base_offset) = nullptr;
  // Optional (null when absent); not called yet: bodies are read into
  // unregistered memory (docs/ipc-format.md says what that costs).
  cufile_status (*buf_register)(const void*, std::size_t, int) = nullptr;
  cufile_status (*buf_deregister)(const void*) = nullptr;
};

/// The loaded table when cuarrow::gds_status() found cuFile usable (its
/// driver open), else nullptr.  Computes the status on first call.
const cufile_table* cufile_if_usable() noexcept;

/// True when cuFile, from these properties and whether the nvidia-fs kernel
/// module is loaded, can only run in its compatibility mode (no direct
/// reads).  Pure: exposed for tests.
bool cufile_compat_mode(const cufile_driver_properties& p, bool nvidia_fs_loaded) noexcept;

/// "CU_FILE_..." for the cuFile status codes cuarrow explains, else the
/// number.
std::string cufile_error_name(int err);

}  // namespace cuarrow::detail
