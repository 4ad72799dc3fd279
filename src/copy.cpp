// Every copy cuarrow makes goes through this file (include/cuarrow/copy.hpp
// states the rules).  The strategy for each pair of memory kinds is chosen in
// enqueue(); a later change can route pageable host memory through a pinned
// staging pipeline here without touching callers.
#include "cuarrow/copy.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "context_state.hpp"
#include "cuarrow/error.hpp"
#include "driver_table.hpp"
#include "staging.hpp"

namespace cuarrow {
namespace detail {
namespace {

// Buffers used by an asynchronous copy are kept alive until the stream has
// passed it: a host function queued after the copy hands them to this list,
// and they are dropped on a user thread at the next cuarrow call that
// collects (the host function itself must not call the driver, and dropping
// a buffer may free device memory).
struct keepalive {
  buffer first;
  buffer second;
};

struct deferred_list {
  std::mutex mutex;
  std::vector<keepalive*> items;
  std::atomic<bool> nonempty{false};
};

deferred_list& deferred() {
  static auto* d = new deferred_list;  // never destroyed: host functions may still run at exit
  return *d;
}

void CUDA_CB on_stream_passed(void* user_data) {
  deferred_list& d = deferred();
  std::lock_guard lock(d.mutex);
  d.items.push_back(static_cast<keepalive*>(user_data));
  d.nonempty.store(true, std::memory_order_release);
}

}  // namespace

void collect_deferred_releases() noexcept {
  deferred_list& d = deferred();
  if (!d.nonempty.load(std::memory_order_acquire)) return;
  std::vector<keepalive*> items;
  {
    std::lock_guard lock(d.mutex);
    items.swap(d.items);
    d.nonempty.store(false, std::memory_order_release);
  }
  for (keepalive* k : items) delete k;
}

}  // namespace detail

namespace {

// One side of a copy.
struct endpoint {
  std::uintptr_t address = 0;
  device_type type = device_type::cpu;
  int device = -1;
  const context* ctx = nullptr;  // null for ordinary host memory
  const char* role = "";         // "source" / "destination", for messages

  bool on_device() const { return type == device_type::cuda; }
};

std::string bytes_at(std::int64_t n, std::int64_t offset) {
  return std::to_string(n) + " bytes at offset " + std::to_string(offset);
}

endpoint checked_side(const buffer& b, std::int64_t offset, std::int64_t size, const char* role, bool writing) {
  if (offset < 0) throw out_of_range(std::string("negative ") + role + " offset " + std::to_string(offset));
  if (size < 0) throw out_of_range("negative copy size " + std::to_string(size));
  if (offset > b.size() || size > b.size() - offset) {
    throw out_of_range("copy of " + bytes_at(size, offset) + " overruns the " + role + " buffer of " +
                       std::to_string(b.size()) + " bytes");
  }
  if (writing && !b.is_mutable()) {
    throw read_only(std::string("the ") + role + " buffer is read-only; copy into a mutable buffer");
  }
  return endpoint{b.address() + static_cast<std::uintptr_t>(offset), b.type(), b.device_id(),
                  b.get_context() ? &*b.get_context() : nullptr, role};
}

endpoint raw_host(const void* p, std::int64_t size, const char* role) {
  if (size < 0) throw out_of_range("negative copy size " + std::to_string(size));
  if (p == nullptr && size > 0) throw invalid_argument(std::string("null ") + role + " pointer");
  return endpoint{reinterpret_cast<std::uintptr_t>(p), device_type::cpu, -1, nullptr, role};
}

// The context the copy is issued in: the stream's device when it is one of
// the device sides, else the device side's (destination first).  Throws
// device_mismatch when the stream belongs to no device of the copy.
const context* issuing_context(const endpoint& dst, const endpoint& src, stream_view s) {
  const context* device_side = dst.on_device() ? dst.ctx : (src.on_device() ? src.ctx : nullptr);
  if (device_side == nullptr) {
    // Host to host, possibly pinned: any context of a pinned side will do.
    return dst.ctx != nullptr ? dst.ctx : src.ctx;
  }
  if (s.is_default()) return device_side;
  const int sd = s.device_number();
  if (dst.on_device() && sd == dst.device) return dst.ctx;
  if (src.on_device() && sd == src.device) return src.ctx;
  std::string devices = dst.on_device() ? std::to_string(dst.device) : std::string();
  if (src.on_device() && !(dst.on_device() && src.device == dst.device)) {
    devices += (devices.empty() ? "" : " or ") + std::to_string(src.device);
  }
  throw device_mismatch("the stream belongs to device " + std::to_string(sd) + " but the copy's device memory is on device " +
                        devices + "; use a stream of device " + devices);
}

void synchronize_issued(stream_view s) {
  detail::check(detail::driver().cuStreamSynchronize(s.handle()), "cuStreamSynchronize");
}

// Before host code touches host memory a stream may still be writing: wait
// for the stream (a default stream needs a context to act on; with none,
// nothing cuarrow knows of can be pending there).
void wait_before_host_access(const context* ctx, stream_view s) {
  if (ctx != nullptr) {
    scoped_context guard(*ctx);
    synchronize_issued(s);
  } else if (!s.is_default()) {
    synchronize_issued(s);
  }
}

// A buffer from allocate_device is valid in the order of the stream it was
// allocated on: make the copy's stream wait for that point first.
void order_after_allocation(const buffer* b, stream_view s) {
  if (b == nullptr || !b->is_stream_ordered() || b->size() == 0) return;
  detail::order_after(*b->get_context()->state(), b->free_stream().handle(), s.handle());
}

// Queue the copy; with `wait`, synchronize the stream before returning.
// Without, the buffers (null for raw host pointers) are kept alive until the
// stream passes the copy.
void enqueue(const endpoint& dst, const endpoint& src, std::int64_t n, stream_view s, bool wait,
             const buffer* dst_buffer, const buffer* src_buffer) {
  detail::collect_deferred_releases();
  const context* ctx = issuing_context(dst, src, s);
  if (n == 0) return;

  if (!dst.on_device() && !src.on_device() && dst.type != device_type::cuda_managed &&
      src.type != device_type::cuda_managed) {
    // Host to host: earlier work on the stream may still write either side.
    wait_before_host_access(ctx, s);
    std::memmove(reinterpret_cast<void*>(dst.address), reinterpret_cast<const void*>(src.address),
                 static_cast<std::size_t>(n));
    return;
  }

  const detail::driver_table& d = detail::driver();
  scoped_context guard(*ctx);
  // Counted in the issuing context, whichever way the copy ends.
  detail::context_state& stats = *ctx->state();
  const bool to_device = dst.on_device() || dst.type == device_type::cuda_managed;
  const bool from_device = src.on_device() || src.type == device_type::cuda_managed;
  auto& bytes_counter = to_device ? (from_device ? stats.d2d_bytes : stats.h2d_bytes) : stats.d2h_bytes;
  auto& ns_counter = to_device ? (from_device ? stats.d2d_ns : stats.h2d_ns) : stats.d2h_ns;
  const auto started = std::chrono::steady_clock::now();
  struct count_on_exit {
    std::atomic<std::int64_t>& bytes;
    std::atomic<std::int64_t>& ns;
    std::atomic<std::int64_t>& copies;
    std::int64_t n;
    bool timed;
    std::chrono::steady_clock::time_point t0;
    ~count_on_exit() {
      if (std::uncaught_exceptions() > 0) return;
      bytes.fetch_add(n);
      copies.fetch_add(1);
      if (timed) {
        ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  };
  count_on_exit counter{bytes_counter, ns_counter, stats.copies, n, wait, started};
  order_after_allocation(dst_buffer, s);
  order_after_allocation(src_buffer, s);
  const auto dptr = static_cast<CUdeviceptr>(dst.address);
  const auto sptr = static_cast<CUdeviceptr>(src.address);
  const auto bytes = static_cast<size_t>(n);
  CUstream h = s.handle();
  if (dst.type == device_type::cuda_managed || src.type == device_type::cuda_managed) {
    detail::check(d.cuMemcpyAsync(dptr, sptr, bytes, h), "cuMemcpyAsync");
  } else if (dst.on_device() && src.on_device()) {
    if (dst.device == src.device) {
      detail::check(d.cuMemcpyDtoDAsync(dptr, sptr, bytes, h), "cuMemcpyDtoDAsync");
    } else {
      // Direct peer copy where the hardware allows it (enabled once per pair);
      // otherwise the driver stages it through host memory.
      dst.ctx->enable_peer_access(*src.ctx);
      src.ctx->enable_peer_access(*dst.ctx);
      detail::check(d.cuMemcpyPeerAsync(dptr, dst.ctx->handle(), sptr, src.ctx->handle(), bytes, h),
                    "cuMemcpyPeerAsync");
    }
  } else if (dst.on_device()) {
    const void* host = reinterpret_cast<const void*>(src.address);
    if (src.type == device_type::cpu && detail::use_staging(bytes) && !detail::is_page_locked(host)) {
      // Returns with the data on the device: nothing left to wait for or keep alive.
      detail::staged_host_to_device(ctx->handle(), dptr, host, bytes, h);
      stats.staged_bytes.fetch_add(n);
      counter.timed = true;
      return;
    }
    detail::check(d.cuMemcpyHtoDAsync(dptr, host, bytes, h), "cuMemcpyHtoDAsync");
  } else {
    void* host = reinterpret_cast<void*>(dst.address);
    if (dst.type == device_type::cpu && detail::use_staging(bytes) && !detail::is_page_locked(host)) {
      detail::staged_device_to_host(ctx->handle(), host, sptr, bytes, h);
      stats.staged_bytes.fetch_add(n);
      counter.timed = true;
      return;
    }
    detail::check(d.cuMemcpyDtoHAsync(host, sptr, bytes, h), "cuMemcpyDtoHAsync");
  }

  if (wait) {
    synchronize_issued(s);
    return;
  }
  if (dst_buffer == nullptr && src_buffer == nullptr) return;
  auto* k = new detail::keepalive{dst_buffer ? *dst_buffer : buffer(), src_buffer ? *src_buffer : buffer()};
  CUresult r = d.cuLaunchHostFunc(h, detail::on_stream_passed, k);
  if (r != CUDA_SUCCESS) {
    // Could not queue the release: keep the promise by waiting instead.
    CUresult sr = d.cuStreamSynchronize(h);
    delete k;
    detail::check(r, "cuLaunchHostFunc");
    detail::check(sr, "cuStreamSynchronize");
  }
}

}  // namespace

void copy_async(const buffer& dst, std::int64_t dst_offset, const buffer& src, std::int64_t src_offset,
                std::int64_t size, stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  endpoint from = checked_side(src, src_offset, size, "source", false);
  enqueue(to, from, size, s, false, &dst, &src);
}

void copy(const buffer& dst, std::int64_t dst_offset, const buffer& src, std::int64_t src_offset, std::int64_t size,
          stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  endpoint from = checked_side(src, src_offset, size, "source", false);
  enqueue(to, from, size, s, true, &dst, &src);
}

void copy_from_host_async(const buffer& dst, std::int64_t dst_offset, const void* src, std::int64_t size,
                          stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  enqueue(to, raw_host(src, size, "source"), size, s, false, &dst, nullptr);
}

void copy_from_host(const buffer& dst, std::int64_t dst_offset, const void* src, std::int64_t size, stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  enqueue(to, raw_host(src, size, "source"), size, s, true, &dst, nullptr);
}

void copy_to_host_async(void* dst, const buffer& src, std::int64_t src_offset, std::int64_t size, stream_view s) {
  endpoint from = checked_side(src, src_offset, size, "source", false);
  enqueue(raw_host(dst, size, "destination"), from, size, s, false, &src, nullptr);
}

void copy_to_host(void* dst, const buffer& src, std::int64_t src_offset, std::int64_t size, stream_view s) {
  endpoint from = checked_side(src, src_offset, size, "source", false);
  enqueue(raw_host(dst, size, "destination"), from, size, s, true, nullptr, &src);
}

void fill_async(const buffer& dst, std::int64_t dst_offset, std::int64_t size, std::uint8_t value, stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  detail::collect_deferred_releases();
  if (size == 0) return;
  if (!to.on_device() && to.type != device_type::cuda_managed) {
    wait_before_host_access(to.ctx, s);
    std::memset(reinterpret_cast<void*>(to.address), value, static_cast<std::size_t>(size));
    return;
  }
  endpoint none{};
  const context* ctx = issuing_context(to, none, s);
  scoped_context guard(*ctx);
  order_after_allocation(&dst, s);
  const detail::driver_table& d = detail::driver();
  detail::check(d.cuMemsetD8Async(static_cast<CUdeviceptr>(to.address), value, static_cast<size_t>(size), s.handle()),
                "cuMemsetD8Async");
  auto* k = new detail::keepalive{dst, buffer()};
  CUresult r = d.cuLaunchHostFunc(s.handle(), detail::on_stream_passed, k);
  if (r != CUDA_SUCCESS) {
    d.cuStreamSynchronize(s.handle());
    delete k;
    detail::check(r, "cuLaunchHostFunc");
  }
}

buffer copy_to_device(const context& ctx, const void* src, std::int64_t size, stream_view s) {
  endpoint from = raw_host(src, size, "source");
  buffer out = allocate_device(ctx, size, s);
  endpoint to = checked_side(out, 0, size, "destination", true);
  enqueue(to, from, size, s, true, &out, nullptr);
  return out;
}

buffer copy_to_device(const context& ctx, const buffer& src, stream_view s) {
  buffer out = allocate_device(ctx, src.size(), s);
  copy(out, 0, src, 0, src.size(), s);
  return out;
}

buffer copy_to_new_host(const buffer& src, stream_view s) {
  std::optional<buffer> pinned;
  if ((src.type() == device_type::cuda || src.type() == device_type::cuda_managed) && src.size() > 0) {
    pinned = try_allocate_pinned_pooled(*src.get_context(), src.size());
  }
  buffer out = pinned ? *pinned : allocate_host(src.size());
  copy(out, 0, src, 0, src.size(), s);
  return out;
}

}  // namespace cuarrow
