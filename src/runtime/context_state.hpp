// Internal: the state behind a cuarrow::context.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cuarrow/context.hpp"

namespace cuarrow::detail {

struct context_state {
  int device = 0;
  CUdevice cu_device = 0;  // the driver's handle of `device`, as retained
  CUcontext handle = nullptr;
  bool primary = false;      // a device's primary context
  bool owns_retain = false;  // cuarrow holds one cuDevicePrimaryCtxRetain on it
  device_properties properties;
  std::atomic<std::int64_t> bytes_allocated{0};

  // Transfer counters (context::transfer_stats); nanoseconds for time.
  std::atomic<std::int64_t> h2d_bytes{0}, d2h_bytes{0}, d2d_bytes{0}, staged_bytes{0}, copies{0};
  std::atomic<std::int64_t> h2d_ns{0}, d2h_ns{0}, d2d_ns{0};

  std::mutex mutex;  // guards the members below
  std::shared_ptr<device_memory_resource> resource;
  std::vector<int> peers_tried;    // devices enable_peer_access was attempted for
  std::vector<int> peers_enabled;  // ... and succeeded

  // One event for ordering a stream after work queued on another
  // (record, then cuStreamWaitEvent: the wait captures the event's state at
  // that moment, so the event can be re-recorded at once).
  std::mutex order_mutex;
  CUevent order_event = nullptr;

  // A stream of this context for the batched copies queued on behalf of
  // the legacy default stream, which cuMemcpyBatchAsync refuses
  // (copy_many_async): created at first use, used by one batch at a time,
  // destroyed with the state.  A stream per batch cost about ten driver
  // calls (a create, two events, their records and waits, destroys).
  std::mutex side_mutex;
  CUstream side_stream = nullptr;

  // cuarrow's gather kernel in this context (gather.cpp): loaded at first
  // use, unloaded with the state.
  std::mutex gather_mutex;
  bool gather_tried = false;
  bool gather_host_pointers = false;  // the kernel may write pinned host memory through its host pointer
  CUmodule gather_module = nullptr;
  CUfunction gather_function = nullptr;
  std::string gather_why_not;

  context_state() = default;
  context_state(const context_state&) = delete;
  context_state& operator=(const context_state&) = delete;
  ~context_state();
};

/// Unloads the gather kernel's module of `ctx`, if loaded (its destructor).
void unload_gather(context_state& ctx) noexcept;

/// Drop the process-wide cache of primary contexts (each is released when
/// the last context, buffer or stream using it is gone).
void release_cached_contexts() noexcept;

/// Have `fn` run by release_cached_contexts (at process exit and in
/// cuarrow::shutdown), before the contexts are dropped: process-wide caches
/// of memory registered in those contexts (the staging slots, the pinned
/// result pool) give it back there, while the contexts still exist, instead
/// of leaving it to the context's destruction (which leak checkers such as
/// compute-sanitizer's memcheck report).  Adding the same function twice
/// runs it once.  `fn` must not throw.
void on_release_contexts(void (*fn)() noexcept);

/// Streams cuarrow created and has not destroyed yet.  A buffer allocated
/// on a cuarrow stream is freed on it while it lives; once it is destroyed
/// (which first waits for its work) the free goes to the legacy default
/// stream instead, so a buffer may outlive the stream it was allocated on.
/// Foreign streams must outlive the buffers allocated on them.
void register_stream(CUstream s);
/// Synchronize `s` (a failed wait is reported, and waited once more), then
/// unregister and destroy it; no free can use it after.  Returns what
/// cuStreamDestroy answered.
CUresult retire_stream(CUstream s) noexcept;
/// Runs `free_on(stream)` with the stream a buffer allocated on `s` must be
/// freed on now: `s` itself, or the legacy default stream if `s` was a
/// cuarrow stream since destroyed.  `s` cannot be destroyed meanwhile.
template <class F>
void with_free_stream(CUstream s, bool cuarrow_stream, F free_on);
bool stream_is_live(CUstream s) noexcept;
std::shared_mutex& stream_registry_mutex() noexcept;

template <class F>
void with_free_stream(CUstream s, bool cuarrow_stream, F free_on) {
  if (!cuarrow_stream) {
    free_on(s);
    return;
  }
  std::shared_lock lock(stream_registry_mutex());
  free_on(stream_is_live(s) ? s : nullptr);
}

/// Make `waiter` wait (on the device, without blocking the host) for the
/// work queued so far on `producer`, both streams of `ctx`'s device or any
/// device.  No-op when they are the same stream, and, with
/// `producer_may_be_retired`, when the producer is a cuarrow stream destroyed
/// since (its work is done; any other non-default handle must be live).
void order_after(context_state& ctx, CUstream producer, CUstream waiter, bool producer_may_be_retired = true);

}  // namespace cuarrow::detail
