// Streams and events.
//
//   stream_view  a non-owning CUstream: the legacy default stream (the
//                default-constructed view), the per-thread default stream, or
//                a foreign stream (CuPy, PyTorch, Numba...).
//   stream       an owning CUstream on one context; destroyed with it.
//   event        an owning CUevent on one context.
//
// Asynchronous cuarrow operations take a stream_view and end in `_async`;
// their synchronous forms run on a stream and synchronize it before
// returning.  A stream_view remembers the device it belongs to when cuarrow
// knows it (streams it created); for foreign streams the device is looked up
// from the driver when an operation needs to check it.
#pragma once

#include <cuda.h>
#include <cstddef>

#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"

namespace cuarrow {

class event;

class CUARROW_EXPORT stream_view {
 public:
  /// The legacy default stream (handle 0), which synchronizes with all
  /// blocking streams of its context.
  constexpr stream_view() noexcept = default;
  /// A foreign stream, not owned.  `device_number` may be given when known.
  constexpr explicit stream_view(CUstream handle, int device_number = -1) noexcept
      : handle_(handle), device_(device_number) {}
  /// No stream from an integer or a null pointer (as RMM's cuda_stream_view):
  /// `0` or `nullptr` would silently mean the legacy default stream; say
  /// stream_view() or stream_view::legacy_default().
  stream_view(int) = delete;
  stream_view(std::nullptr_t) = delete;

  static stream_view legacy_default() noexcept { return stream_view(CU_STREAM_LEGACY); }
  static stream_view per_thread_default() noexcept { return stream_view(CU_STREAM_PER_THREAD); }

  CUstream handle() const noexcept { return handle_; }
  /// True for the legacy or per-thread default stream (they act on the
  /// context current when an operation runs).
  bool is_default() const noexcept;
  /// The device this stream belongs to; -1 for default streams (they belong
  /// to whatever context is current).  May ask the driver (cuStreamGetCtx).
  int device_number() const;

  /// Block until all work queued so far is done.  Throws cuda_error.
  void synchronize() const;
  /// The same with `ctx` current while it waits: the default streams then
  /// stand for ctx's (a default stream alone names no context).
  void synchronize(const context& ctx) const;
  /// True when all queued work is done.
  bool query() const;
  /// Make later work on this stream wait for `e` (cuStreamWaitEvent);
  /// returns at once.  Throws invalid_argument (moved-from event), cuda_error.
  void wait(const event& e) const;
  /// The same for an event cuarrow does not own (the sync event of an
  /// imported C Device Data Interface array); it must stay valid for the
  /// call.  A default stream acts on the current context.  Throws
  /// invalid_argument for a null event, cuda_error.
  void wait(CUevent e) const;
  /// Make later work on this stream wait for the work queued so far on
  /// `producer`, without blocking the host (an event of `ctx` recorded on
  /// `producer`, then waited for here).  The default streams act on `ctx`;
  /// waiting for the same stream does nothing.  Both streams must be live.
  /// Throws cuda_error.
  void wait_for(stream_view producer, const context& ctx) const;

  friend bool operator==(stream_view a, stream_view b) noexcept { return a.handle_ == b.handle_; }

 private:
  CUstream handle_ = nullptr;
  int device_ = -1;
};

class CUARROW_EXPORT stream {
 public:
  /// A new stream on `ctx`.  Non-blocking by default: it does not
  /// synchronize with the legacy default stream.  Throws cuda_error
  /// (cuStreamCreate).  The destructor waits for the stream's work before
  /// destroying it (its buffers are then freed on the legacy default
  /// stream); failures there go to the warning handler.
  explicit stream(const context& ctx, unsigned int flags = CU_STREAM_NON_BLOCKING);
  ~stream();
  stream(stream&& other) noexcept;
  stream& operator=(stream&& other) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  stream_view view() const noexcept { return stream_view(handle_, ctx_.device_number()); }
  operator stream_view() const noexcept { return view(); }  // NOLINT: a view of it is always safe
  CUstream handle() const noexcept { return handle_; }
  const context& get_context() const noexcept { return ctx_; }

  void synchronize() const { view().synchronize(); }
  bool query() const { return view().query(); }
  void wait(const event& e) const;

 private:
  void reset() noexcept;
  context ctx_;
  CUstream handle_ = nullptr;
};

class CUARROW_EXPORT event {
 public:
  /// A new event on `ctx`; timing is disabled by default (cheapest, and what
  /// the Arrow C Device Data Interface asks of sync events).  Throws
  /// cuda_error (cuEventCreate).
  explicit event(const context& ctx, unsigned int flags = CU_EVENT_DISABLE_TIMING);
  ~event();
  event(event&& other) noexcept;
  event& operator=(event&& other) noexcept;
  event(const event&) = delete;
  event& operator=(const event&) = delete;

  /// Capture the work queued on `s` so far; returns at once.  `s` must
  /// belong to this event's device (device_mismatch otherwise); throws
  /// invalid_argument (moved-from event), cuda_error.
  void record(stream_view s);
  /// True when the recorded work is done (or nothing was recorded).
  bool query() const;
  /// Block until the recorded work is done.
  void synchronize() const;
  /// Milliseconds between `start` and this event; both must have been
  /// created with timing enabled (flags = CU_EVENT_DEFAULT) and completed.
  float elapsed_ms_since(const event& start) const;

  CUevent handle() const noexcept { return handle_; }
  const context& get_context() const noexcept { return ctx_; }

 private:
  void reset() noexcept;
  context ctx_;
  CUevent handle_ = nullptr;
};

}  // namespace cuarrow
