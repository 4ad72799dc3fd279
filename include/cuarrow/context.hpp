// Devices and contexts.
//
// A cuarrow::context is a shared handle to one CUDA context.  context::get(n)
// returns the primary context of device n (the one CuPy, Numba and PyTorch
// use), retained once per process however often it is asked for, and released
// at shutdown() or exit.  context::wrap(handle) adopts a context created by
// someone else: if it is a device's primary context, the result is the same
// as context::get(device); otherwise the caller keeps the foreign context
// alive for as long as cuarrow objects use it.
//
// Copies of a context share state (bytes_allocated, memory resource).  All
// members are thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cuarrow/export.hpp"

namespace cuarrow {

class device_memory_resource;
namespace detail {
struct context_state;
}

/// Number of CUDA devices visible (0 when there is none).  Throws
/// driver_error when no driver can be loaded.
CUARROW_EXPORT int device_count();

struct device_properties {
  int ordinal = 0;
  std::string name;
  std::int64_t total_memory = 0;  // bytes
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  std::string pci_bus_id;  // "0000:41:00.0"
  bool memory_pools_supported = false;
  bool unified_addressing = false;
};

/// Properties of device `ordinal`; throws invalid_argument for a bad ordinal.
CUARROW_EXPORT device_properties get_device_properties(int ordinal);

/// Data moved by cuarrow's copies, per context (the context the copy was
/// issued in: the device side's).  Seconds are wall-clock time spent in
/// synchronous copies (queueing to completion); asynchronous copies count
/// their bytes only.
struct transfer_statistics {
  std::int64_t host_to_device_bytes = 0;
  std::int64_t device_to_host_bytes = 0;
  std::int64_t device_to_device_bytes = 0;  // same device and between devices
  double host_to_device_seconds = 0;
  double device_to_host_seconds = 0;
  double device_to_device_seconds = 0;
  std::int64_t staged_bytes = 0;  // of the above, bytes moved through the pinned staging pipeline
  std::int64_t copies = 0;
};

class CUARROW_EXPORT context {
 public:
  /// The primary context of device `device_number`.  Throws invalid_argument
  /// for a bad number ("Invalid CUDA device number 3 (should be between 0 and
  /// 1, inclusive)"), driver_error when there is no driver or no device,
  /// cuda_error when the retain or a property query fails.  No stream work.
  static context get(int device_number = 0);

  /// Adopt a foreign CUcontext (not retained, not destroyed by cuarrow).
  /// The device number is read from the context itself.  Throws
  /// invalid_argument for a null handle, cuda_error when the driver cannot
  /// use it (e.g. a destroyed context).  No stream work.
  static context wrap(CUcontext handle);

  int device_number() const noexcept;
  CUcontext handle() const noexcept;
  /// True for a device's primary context.
  bool is_primary() const noexcept;
  const device_properties& properties() const noexcept;

  /// Wait until all work on this context is done (cuCtxSynchronize).
  /// Throws cuda_error, also for a failure of earlier queued work.
  void synchronize() const;

  /// Bytes of device memory currently allocated through cuarrow on this
  /// context (every memory resource included).
  std::int64_t bytes_allocated() const noexcept;

  /// Bytes and time moved by copies issued in this context.
  transfer_statistics transfer_stats() const noexcept;
  void reset_transfer_stats() const noexcept;

  /// Free and total device memory (cuMemGetInfo).
  std::int64_t free_memory() const;

  /// The device address of host memory that is pinned or registered with
  /// CUDA (cuPointerGetAttribute(DEVICE_POINTER)).  Throws cuda_error for
  /// ordinary host memory.
  std::uintptr_t get_device_address(const void* host_pointer) const;

  /// The memory resource device buffers of this context are allocated from
  /// (default: the device's stream-ordered pool, or cuMemAlloc where pools
  /// are unsupported).  The default is made on first use: cuda_error if the
  /// pool cannot be had.
  std::shared_ptr<device_memory_resource> memory_resource() const;
  /// Install another resource (an RMM, CuPy or PyTorch pool adapter, ...).
  /// Buffers allocated before keep the resource that allocated them.
  /// nullptr restores the default (cuda_error as above).
  void set_memory_resource(std::shared_ptr<device_memory_resource> resource) const;

  /// Enable direct access from this context to `peer`'s memory, once; returns
  /// false where the hardware cannot (then copies are staged by the driver).
  /// A failed probe is reported (warning handler) and taken as false; a
  /// failure of cuCtxEnablePeerAccess other than "unsupported" is cuda_error.
  bool enable_peer_access(const context& peer) const;

  /// "ready" when cuarrow's gather kernel runs in this context (batches of
  /// many copies within the device go to it: transfer_options::
  /// device_gather), else why not: a library built without nvcc, no image
  /// of the kernel for this GPU, a driver without module entry points.
  /// Loads the kernel at the first call (cuModuleLoadData); no stream work.
  std::string gather_status() const;

  friend bool operator==(const context& a, const context& b) noexcept { return a.handle() == b.handle(); }

  // Internal: the runtime's state of this context (src/runtime/context_state.hpp).
  const std::shared_ptr<detail::context_state>& state() const noexcept { return state_; }

 private:
  // Contexts come from get() and wrap() only.
  explicit context(std::shared_ptr<detail::context_state> state) noexcept;
  std::shared_ptr<detail::context_state> state_;
};

/// Makes a context current on this thread for its lifetime, restoring the
/// previous one after (cuCtxPushCurrent / cuCtxPopCurrent; nothing is pushed
/// when the context is already current).  Not movable.  The constructors
/// throw cuda_error when the push fails; a failed pop is reported through
/// the warning handler.
class CUARROW_EXPORT scoped_context {
 public:
  explicit scoped_context(const context& ctx);
  explicit scoped_context(CUcontext ctx);
  ~scoped_context();
  scoped_context(const scoped_context&) = delete;
  scoped_context& operator=(const scoped_context&) = delete;

 private:
  CUcontext pushed_ = nullptr;
};

}  // namespace cuarrow
