#include "cuarrow/stream.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "context_state.hpp"
#include "cuarrow/error.hpp"
#include "driver_table.hpp"
#include "runtime.hpp"

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

// ---- work queued on a stream (runtime.hpp) ----------------------------------------------

void copy_host_to_device_async(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream s) {
  check(driver().cuMemcpyHtoDAsync(dst, src, bytes, s), "cuMemcpyHtoDAsync");
}

void copy_device_to_host_async(void* dst, CUdeviceptr src, std::size_t bytes, CUstream s) {
  check(driver().cuMemcpyDtoHAsync(dst, src, bytes, s), "cuMemcpyDtoHAsync");
}

void copy_device_to_device_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream s) {
  check(driver().cuMemcpyDtoDAsync(dst, src, bytes, s), "cuMemcpyDtoDAsync");
}

namespace {
// Copies per cuMemcpyBatchAsync call: the driver documents no limit, and
// a few thousand already make the call's cost per copy negligible next to
// cuMemcpyDtoDAsync's, while keeping the arrays it reads small.
constexpr std::size_t kMaxBatchCopies = 4096;

void copy_one(const batched_copy& c, CUstream s) {
  switch (c.direction) {
    case copy_direction::device_to_device: return copy_device_to_device_async(c.dst, c.src, c.bytes, s);
    case copy_direction::host_to_device:
      return copy_host_to_device_async(c.dst, reinterpret_cast<const void*>(c.src), c.bytes, s);
    case copy_direction::device_to_host:
      return copy_device_to_host_async(reinterpret_cast<void*>(c.dst), c.src, c.bytes, s);
  }
}

void copy_each(std::span<const batched_copy> copies, CUstream s) {
  for (const batched_copy& c : copies) copy_one(c, s);
}

// Where a copy's side lies, for its attributes.
CUmemLocation location(bool on_host, int device) {
  CUmemLocation l{};
  l.type = on_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  l.id = on_host ? 0 : device;
  return l;
}

// The copies on `s`, not the legacy default stream, in batches.
void batch_on(std::span<const batched_copy> copies, int device, CUstream s) {
  const driver_table& d = driver();
  // The copies of each direction together (their order among themselves
  // is free), so that each direction is one entry of attributes: the
  // sources are read in stream order (a copy's sources may be written by
  // earlier work on the stream); the location hints name the device and
  // the host (pinned memory) sides.
  auto by_direction = [](const batched_copy& a, const batched_copy& b) {
    return static_cast<int>(a.direction) < static_cast<int>(b.direction);
  };
  std::vector<batched_copy> reordered;
  std::span<const batched_copy> sorted = copies;
  if (!std::is_sorted(copies.begin(), copies.end(), by_direction)) {
    reordered.assign(copies.begin(), copies.end());
    std::stable_sort(reordered.begin(), reordered.end(), by_direction);
    sorted = reordered;
  }
  auto attributes_of = [device](copy_direction dir) {
    CUmemcpyAttributes a{};
    a.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    a.srcLocHint = location(dir == copy_direction::host_to_device, device);
    a.dstLocHint = location(dir == copy_direction::device_to_host, device);
    a.flags = CU_MEMCPY_FLAG_DEFAULT;
    return a;
  };
  const std::size_t n = std::min(sorted.size(), kMaxBatchCopies);
  std::vector<CUdeviceptr> dsts(n), srcs(n);
  std::vector<std::size_t> sizes(n);
  std::vector<CUmemcpyAttributes> attrs;
  std::vector<std::size_t> attrs_index;
  for (std::size_t at = 0; at < sorted.size(); at += n) {
    const std::span<const batched_copy> part = sorted.subspan(at, std::min(n, sorted.size() - at));
    if (part.size() < 2) {
      copy_each(part, s);
      continue;
    }
    attrs.clear();
    attrs_index.clear();
    for (std::size_t i = 0; i < part.size(); ++i) {
      dsts[i] = part[i].dst;
      srcs[i] = part[i].src;
      sizes[i] = part[i].bytes;
      if (i == 0 || part[i].direction != part[i - 1].direction) {
        attrs.push_back(attributes_of(part[i].direction));
        attrs_index.push_back(i);
      }
    }
    const CUresult r = d.cuMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), part.size(), attrs.data(),
                                            attrs_index.data(), attrs.size(), s);
    const bool with_host = part.back().direction != copy_direction::device_to_device;  // sorted: host ones last
    if (r == CUDA_ERROR_NOT_SUPPORTED || (r == CUDA_ERROR_INVALID_VALUE && with_host)) {
      // Nothing of this call was queued: the rest goes one copy at a time
      // (a driver that refuses host memory in a batch, which the copies
      // of their own take).  Not remembered: a refusal costs one call per
      // batch, and a driver may refuse one kind of memory and take another.
      copy_each(sorted.subspan(at), s);
      return;
    }
    check(r, "cuMemcpyBatchAsync");
  }
}

// Below this many copies the legacy default stream's copies go one by one:
// the side stream costs five driver calls (two records, two waits, and the
// batch's own).
constexpr std::size_t kMinSideStreamCopies = 16;
}  // namespace

void copy_many_async(std::span<const batched_copy> copies, context_state& ctx, CUstream s, bool gather) {
  const driver_table& d = driver();
  const int device = ctx.device;
  if (gather) {
    std::vector<batched_copy> within, rest;
    for (const batched_copy& c : copies) {
      (c.direction == copy_direction::device_to_device ? within : rest).push_back(c);
    }
    gather_async(ctx, within, s);
    if (!rest.empty()) copy_many_async(rest, ctx, s, false);
    return;
  }
  if (copies.size() < 2 || d.cuMemcpyBatchAsync == nullptr) {
    copy_each(copies, s);
    return;
  }
  // The batched call refuses the legacy default stream (a null handle here:
  // the table is loaded with CU_GET_PROC_ADDRESS_LEGACY_STREAM).  There the
  // batch runs on the context's side stream: it starts after the work
  // queued on the legacy stream so far (an event recorded there also waits
  // for the blocking streams, as a copy queued there would), and the legacy
  // stream's later work waits for it, as for a copy queued there.
  const bool legacy = s == nullptr || s == CU_STREAM_LEGACY;
  if (!legacy) {
    batch_on(copies, device, s);
    return;
  }
  if (copies.size() < kMinSideStreamCopies) {
    copy_each(copies, s);
    return;
  }
  std::lock_guard lock(ctx.side_mutex);  // one batch at a time on it
  if (ctx.side_stream == nullptr) {
    scoped_context guard(ctx.handle);
    CUstream made = nullptr;  // kept only once made: a failed create leaves none behind
    check(d.cuStreamCreate(&made, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    ctx.side_stream = made;
  }
  const CUstream side = ctx.side_stream;
  order_after(ctx, s, side, /*producer_may_be_retired=*/false);
  try {
    batch_on(copies, device, side);
    order_after(ctx, side, s, /*producer_may_be_retired=*/false);
  } catch (...) {
    // Copies may be queued on the side stream that the legacy stream does
    // not wait for: they end before the error leaves, and with it the
    // caller's hold on their buffers.
    (void)d.cuStreamSynchronize(side);
    throw;
  }
}

void copy_peer_async(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t bytes,
                     CUstream s) {
  check(driver().cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, bytes, s), "cuMemcpyPeerAsync");
}

void copy_unified_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream s) {
  check(driver().cuMemcpyAsync(dst, src, bytes, s), "cuMemcpyAsync");
}

void memset_async(CUdeviceptr dst, std::uint8_t value, std::size_t bytes, CUstream s) {
  check(driver().cuMemsetD8Async(dst, value, bytes, s), "cuMemsetD8Async");
}

// ---- deferred releases ----------------------------------------------------------------
//
// A host function queued behind the work hands its item to this list, and
// the item is destroyed on a user thread at the next cuarrow call that
// collects (the host function itself must not call the driver).
namespace {

struct deferred_list {
  std::mutex mutex;
  std::vector<deferred_release*> items;
  std::atomic<bool> nonempty{false};
};

deferred_list& deferred() {
  static auto* d = new deferred_list;  // never destroyed: host functions may still run at exit
  return *d;
}

void CUDA_CB on_stream_passed(void* user_data) {
  deferred_list& d = deferred();
  std::lock_guard lock(d.mutex);
  d.items.push_back(static_cast<deferred_release*>(user_data));
  d.nonempty.store(true, std::memory_order_release);
}

}  // namespace

CUresult release_when_passed(CUstream s, deferred_release* item) noexcept {
  return driver().cuLaunchHostFunc(s, on_stream_passed, item);
}

void collect_deferred_releases() noexcept {
  deferred_list& d = deferred();
  if (!d.nonempty.load(std::memory_order_acquire)) return;
  std::vector<deferred_release*> items;
  {
    std::lock_guard lock(d.mutex);
    items.swap(d.items);
    d.nonempty.store(false, std::memory_order_release);
  }
  for (deferred_release* item : items) delete item;
}

void synchronize_stream(CUstream s) { check(driver().cuStreamSynchronize(s), "cuStreamSynchronize"); }

CUresult try_synchronize_stream(CUstream s) noexcept { return driver().cuStreamSynchronize(s); }

void synchronize_in(const context* ctx, stream_view s) {
  if (ctx != nullptr) {
    scoped_context guard(*ctx);
    synchronize_stream(s.handle());
  } else if (!s.is_default()) {
    synchronize_stream(s.handle());
  }
}

void stream_wait_event(CUstream s, CUevent e) { check(driver().cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent"); }

// ---- events: created and destroyed here for cuarrow::event and runtime_event -----------------

namespace {
CUevent create_event(unsigned int flags) {
  CUevent e = nullptr;
  check(driver().cuEventCreate(&e, flags), "cuEventCreate");
  return e;
}

void destroy_event(CUevent e) noexcept {
  if (e == nullptr || shutting_down()) return;
  CUresult r = driver().cuEventDestroy(e);
  if (r != CUDA_SUCCESS) warn_result(r, "cuEventDestroy");
}

void record_event(CUevent e, CUstream s) { check(driver().cuEventRecord(e, s), "cuEventRecord"); }

CUresult try_synchronize_event(CUevent e) noexcept { return driver().cuEventSynchronize(e); }
}  // namespace

runtime_event::runtime_event() : handle_(create_event(CU_EVENT_DISABLE_TIMING)) {}

runtime_event::~runtime_event() { destroy_event(handle_); }

runtime_event::runtime_event(runtime_event&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

void runtime_event::record(CUstream s) { record_event(handle_, s); }

void runtime_event::synchronize() const { check(try_synchronize_event(handle_), "cuEventSynchronize"); }

CUresult runtime_event::try_synchronize() const noexcept { return try_synchronize_event(handle_); }

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
  detail::synchronize_stream(handle_);
  detail::collect_deferred_releases();
}

void stream_view::synchronize(const context& ctx) const {
  scoped_context guard(ctx);
  synchronize();
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
  detail::stream_wait_event(handle_, e);
}

void stream_view::wait_for(stream_view producer, const context& ctx) const {
  detail::order_after(*ctx.state(), producer.handle(), handle_, /*producer_may_be_retired=*/false);
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
  handle_ = detail::create_event(flags);
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

void event::reset() noexcept { detail::destroy_event(std::exchange(handle_, nullptr)); }

void event::record(stream_view s) {
  if (handle_ == nullptr) throw invalid_argument("event::record: the event was moved from");
  const int sd = s.device_number();
  if (sd >= 0 && sd != ctx_.device_number()) {
    throw device_mismatch("event::record: the event belongs to device " + std::to_string(ctx_.device_number()) +
                          " but the stream to device " + std::to_string(sd) + "; record it on a stream of device " +
                          std::to_string(ctx_.device_number()));
  }
  scoped_context guard(ctx_);
  detail::record_event(handle_, s.handle());
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
  detail::check(detail::try_synchronize_event(handle_), "cuEventSynchronize");
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
