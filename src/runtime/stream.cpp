#include "cuarrow/stream.hpp"

#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "context_state.hpp"
#include "cuarrow/error.hpp"
#include "driver_table.hpp"

namespace cuarrow {
namespace detail {
namespace {
struct stream_registry {
  std::shared_mutex mutex;
  std::unordered_set<CUstream> live;
};
stream_registry& registry() {
  static auto* r = new stream_registry;  // never destroyed: buffers may be freed at exit
  return *r;
}
}  // namespace

std::shared_mutex& stream_registry_mutex() noexcept { return registry().mutex; }

bool stream_is_live(CUstream s) noexcept { return registry().live.count(s) != 0; }

void register_stream(CUstream s) {
  std::unique_lock lock(registry().mutex);
  registry().live.insert(s);
}

CUresult retire_stream(CUstream s) noexcept {
  const driver_table& d = driver();
  CUresult sync = d.cuStreamSynchronize(s);
  // A failed wait may report an earlier asynchronous error while later work
  // still runs; buffers of this stream are freed on the legacy default
  // stream once it is unregistered, which does not wait for this one.  Wait
  // once more: after a lasting (sticky) error it returns at once.
  if (sync != CUDA_SUCCESS) {
    warn_result(sync, "cuStreamSynchronize (before cuStreamDestroy)");
    (void)d.cuStreamSynchronize(s);
  }
  std::unique_lock lock(registry().mutex);
  registry().live.erase(s);
  return d.cuStreamDestroy(s);  // a failed wait is reported above
}

}  // namespace detail

bool stream_view::is_default() const noexcept {
  return handle_ == nullptr || handle_ == CU_STREAM_LEGACY || handle_ == CU_STREAM_PER_THREAD;
}

int stream_view::device_number() const {
  if (device_ >= 0 || is_default()) return device_;
  const detail::driver_table& d = detail::driver();
  CUcontext ctx = nullptr;
  detail::check(d.cuStreamGetCtx(handle_, &ctx), "cuStreamGetCtx");
  scoped_context guard(ctx);
  CUdevice dev = 0;
  detail::check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return static_cast<int>(dev);
}

void stream_view::synchronize() const {
  detail::collect_deferred_releases();
  detail::check(detail::driver().cuStreamSynchronize(handle_), "cuStreamSynchronize");
  detail::collect_deferred_releases();
}

bool stream_view::query() const {
  CUresult r = detail::driver().cuStreamQuery(handle_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::check(r, "cuStreamQuery");
  return true;
}

void stream_view::wait(const event& e) const {
  if (e.handle() == nullptr) throw invalid_argument("stream_view::wait: the event was moved from");
  wait(e.handle());
}

void stream_view::wait(CUevent e) const {
  if (e == nullptr) throw invalid_argument("stream_view::wait: null event");
  detail::check(detail::driver().cuStreamWaitEvent(handle_, e, 0), "cuStreamWaitEvent");
}

stream::stream(const context& ctx, unsigned int flags) : ctx_(ctx) {
  scoped_context guard(ctx_);
  detail::check(detail::driver().cuStreamCreate(&handle_, flags), "cuStreamCreate");
  detail::register_stream(handle_);
}

stream::~stream() { reset(); }

stream::stream(stream&& other) noexcept : ctx_(other.ctx_), handle_(std::exchange(other.handle_, nullptr)) {}

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    reset();
    ctx_ = other.ctx_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void stream::wait(const event& e) const { view().wait(e); }

void stream::reset() noexcept {
  if (handle_ == nullptr || detail::shutting_down()) return;
  // Waits for the stream's work first: buffers allocated on it may outlive
  // it, and are then freed on the legacy default stream (detail::retire_stream).
  CUresult r = detail::retire_stream(std::exchange(handle_, nullptr));
  if (r != CUDA_SUCCESS) detail::warn_result(r, "cuStreamDestroy");
}

event::event(const context& ctx, unsigned int flags) : ctx_(ctx) {
  scoped_context guard(ctx_);
  detail::check(detail::driver().cuEventCreate(&handle_, flags), "cuEventCreate");
}

event::~event() { reset(); }

event::event(event&& other) noexcept : ctx_(other.ctx_), handle_(std::exchange(other.handle_, nullptr)) {}

event& event::operator=(event&& other) noexcept {
  if (this != &other) {
    reset();
    ctx_ = other.ctx_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void event::reset() noexcept {
  if (handle_ == nullptr || detail::shutting_down()) return;
  CUresult r = detail::driver().cuEventDestroy(std::exchange(handle_, nullptr));
  if (r != CUDA_SUCCESS) detail::warn_result(r, "cuEventDestroy");
}

void event::record(stream_view s) {
  if (handle_ == nullptr) throw invalid_argument("event::record: the event was moved from");
  const int sd = s.device_number();
  if (sd >= 0 && sd != ctx_.device_number()) {
    throw device_mismatch("event::record: the event belongs to device " + std::to_string(ctx_.device_number()) +
                          " but the stream to device " + std::to_string(sd) +
                          "; record it on a stream of device " + std::to_string(ctx_.device_number()));
  }
  scoped_context guard(ctx_);
  detail::check(detail::driver().cuEventRecord(handle_, s.handle()), "cuEventRecord");
}

bool event::query() const {
  if (handle_ == nullptr) throw invalid_argument("event::query: the event was moved from");
  CUresult r = detail::driver().cuEventQuery(handle_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::check(r, "cuEventQuery");
  return true;
}

void event::synchronize() const {
  if (handle_ == nullptr) throw invalid_argument("event::synchronize: the event was moved from");
  detail::check(detail::driver().cuEventSynchronize(handle_), "cuEventSynchronize");
  detail::collect_deferred_releases();
}

float event::elapsed_ms_since(const event& start) const {
  if (handle_ == nullptr || start.handle_ == nullptr) {
    throw invalid_argument("event::elapsed_ms_since: an event was moved from");
  }
  float ms = 0;
  detail::check(detail::driver().cuEventElapsedTime(&ms, start.handle_, handle_), "cuEventElapsedTime");
  return ms;
}

}  // namespace cuarrow
