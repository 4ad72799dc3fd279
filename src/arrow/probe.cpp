// Batched small reads of array metadata that lives outside host memory.
//
// nanoarrow's approach (ArrowDeviceArrayViewCopyAsync): each needed value is
// gathered with one small device-to-host copy into one scratch buffer, all
// of them one batched copy, then the stream is synchronized once for the
// whole tree.  Arrow
// C++ instead copies whole offset buffers to the host; we never do.
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "arrow_internal.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "runtime/runtime.hpp"

namespace cuarrow::arrow::detail {

namespace {

std::int64_t decode(std::uint64_t raw, int width, bool is_signed) {
  std::uint8_t bytes[8];
  std::memcpy(bytes, &raw, 8);
  return load_int(bytes, 0, width, is_signed);
}

}  // namespace

std::optional<std::int64_t> probe_cache::get(const buffer& b, std::int64_t byte_pos, int width, bool is_signed) const {
  if (b.type() == device_type::cpu) {
    return load_int(reinterpret_cast<const std::uint8_t*>(b.host_data()) + byte_pos, 0, width, is_signed);
  }
  auto it = values_.find({b.address() + static_cast<std::uintptr_t>(byte_pos), width});
  if (it == values_.end()) return std::nullopt;
  return decode(it->second, width, is_signed);
}

std::optional<std::int64_t> probe_cache::get_or_request(const buffer& b, std::int64_t byte_pos, int width,
                                                        bool is_signed) {
  if (auto v = get(b, byte_pos, width, is_signed)) return v;
  // Each value is read once however often it is asked for (a hash set: a
  // file of 226 batches asks for ~2,700).
  if (!pending_keys_.insert({b.address() + static_cast<std::uintptr_t>(byte_pos), width}).second) return std::nullopt;
  pending_.push_back(request{b, byte_pos, width});
  return std::nullopt;
}

void probe_cache::supply(const request& r, std::uint64_t raw) {
  values_[{r.buf.address() + static_cast<std::uintptr_t>(r.pos), r.width}] = raw;
}

void synchronize(stream_view s, int device) {
  std::optional<context> ctx;
  if (s.is_default()) ctx = device_context(device);
  // Deferred releases run around the wait, as in stream_view::synchronize.
  cuarrow::detail::collect_deferred_releases();
  cuarrow::detail::synchronize_in(ctx ? &*ctx : nullptr, s);
  cuarrow::detail::collect_deferred_releases();
}

stream_view stream_for_device(stream_view s, int device) {
  if (s.is_default()) return s;
  const int sd = s.device_number();
  if (sd < 0 || sd == device) return s;
  // The caller's stream orders the data but cannot read this device's
  // memory: let it finish, then read on the device's own default stream.
  s.synchronize();
  return stream_view();
}

void probe_cache::fetch(stream_view s) {
  if (pending_.empty()) return;
  std::vector<request> todo = take_pending();
  std::vector<std::uint64_t> scratch(todo.size(), 0);
  // Device values land in PINNED scratch (from the result pool) where it can
  // be had: a device-to-host copy into pageable memory returns only once it
  // has completed, so each one was a whole round trip (2,300 of them when a
  // writer laid out a table of 227 batches); into pinned memory the copies
  // queue and the batch's one synchronization waits for them all.  Pinned
  // memory of the first device's context serves that device's reads; others
  // (and a pool at its limit) use the pageable scratch as before.
  std::optional<buffer> pinned;
  int pinned_device = -1;
  for (const request& r : todo) {
    if (r.buf.type() == device_type::cuda && r.buf.get_context()) {
      pinned = try_allocate_pinned_pooled(*r.buf.get_context(),
                                          static_cast<std::int64_t>(todo.size() * sizeof(std::uint64_t)));
      pinned_device = r.buf.device_id();
      break;
    }
  }
  auto* pin = pinned ? reinterpret_cast<std::uint64_t*>(pinned->mutable_host_data()) : nullptr;
  auto in_pinned = [&](const request& r) { return pin != nullptr && r.buf.device_id() == pinned_device; };

  // The device reads, per stream they are read on: ONE batched copy each,
  // synchronized (copy_batch), so that the copies need no host function to
  // keep their buffers alive (a copy_to_host_async per value queued one
  // cuLaunchHostFunc each): the sources are held by `todo` and the
  // destinations by `pinned` / `scratch`, all of which outlive the
  // synchronization, and a copy_batch that fails midway settles its own
  // queued copies (copy.cpp settle_after_failure) before it throws.  Pinned
  // or managed memory is read directly once the stream that orders it has
  // caught up (one synchronization per such stream).
  const buffer pageable =
      wrap_host(scratch.data(), static_cast<std::int64_t>(scratch.size() * sizeof(std::uint64_t)), nullptr, true);
  std::vector<std::pair<stream_view, int>> reads;    // (stream, device) of the device reads, in order
  std::vector<std::vector<copy_piece>> pieces;       // one batch per entry of `reads`
  std::vector<std::pair<stream_view, int>> to_sync;  // streams ordering the pinned and managed reads
  auto index_of = [](std::vector<std::pair<stream_view, int>>& list, stream_view v, int device) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].first == v && (!v.is_default() || list[i].second == device)) return i;
    }
    list.emplace_back(v, device);
    return list.size() - 1;
  };
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const request& r = todo[k];
    const auto at = static_cast<std::int64_t>(k * sizeof(std::uint64_t));
    if (r.buf.type() == device_type::cuda) {
      const stream_view rs = stream_for_device(s, r.buf.device_id());
      const std::size_t i = index_of(reads, rs, r.buf.device_id());
      if (pieces.size() <= i) {
        pieces.resize(i + 1);
        pieces[i].reserve(todo.size() - k);
      }
      pieces[i].push_back(copy_piece{in_pinned(r) ? *pinned : pageable, at, r.buf, r.pos, r.width});
    } else {
      index_of(to_sync, s, r.buf.device_id());
    }
  }
  for (std::size_t i = 0; i < reads.size(); ++i) {
    // In the sources' context (copy_batch pushes it), where a default
    // stream is synchronized.
    copy_batch(pieces[i], reads[i].first);
    cuarrow::detail::collect_deferred_releases();
  }
  for (const auto& [v, device] : to_sync) synchronize(v, device);

  for (std::size_t k = 0; k < todo.size(); ++k) {
    const request& r = todo[k];
    if (r.buf.type() != device_type::cuda) {
      std::memcpy(&scratch[k], r.buf.host_data() + r.pos, static_cast<std::size_t>(r.width));
    } else if (in_pinned(r)) {
      scratch[k] = 0;
      std::memcpy(&scratch[k], &pin[k], static_cast<std::size_t>(r.width));
    }
    values_[{r.buf.address() + static_cast<std::uintptr_t>(r.pos), r.width}] = scratch[k];
  }
}

}  // namespace cuarrow::arrow::detail
