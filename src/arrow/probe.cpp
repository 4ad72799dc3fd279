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

buffer read_to_host(std::span<const host_read> reads, stream_view s) {
  std::int64_t total = 0;
  for (const host_read& r : reads) total += r.size;
  if (total == 0) return allocate_host(0);
  std::optional<buffer> pinned;
  for (const host_read& r : reads) {
    if (r.size > 0 && r.buf.type() == device_type::cuda && r.buf.get_context()) {
      pinned = try_allocate_pinned_pooled(*r.buf.get_context(), total);
      break;
    }
  }
  buffer out = pinned ? std::move(*pinned) : allocate_host(total);

  std::vector<std::pair<stream_view, int>> streams;  // (stream, device) of the device reads, in order
  std::vector<std::vector<copy_piece>> pieces;       // one batch per entry of `streams`
  std::vector<std::pair<stream_view, int>> to_sync;  // streams ordering the pinned and managed reads
  auto index_of = [](std::vector<std::pair<stream_view, int>>& list, stream_view v, int device) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].first == v && (!v.is_default() || list[i].second == device)) return i;
    }
    list.emplace_back(v, device);
    return list.size() - 1;
  };
  std::int64_t at = 0;
  for (const host_read& r : reads) {
    if (r.size > 0 && r.buf.type() == device_type::cuda) {
      const std::size_t i = index_of(streams, stream_for_device(s, r.buf.device_id()), r.buf.device_id());
      if (pieces.size() <= i) pieces.resize(i + 1);
      pieces[i].push_back(copy_piece{out, at, r.buf, r.pos, r.size});
    } else if (r.size > 0 && r.buf.type() != device_type::cpu) {
      index_of(to_sync, s, r.buf.device_id());
    }
    at += r.size;
  }
  for (std::size_t i = 0; i < streams.size(); ++i) {
    // In the sources' context (copy_batch pushes it), where a default
    // stream is synchronized.  A copy_batch that fails midway settles its
    // own queued copies (copy.cpp settle_after_failure) before it throws.
    copy_batch(pieces[i], streams[i].first);
    cuarrow::detail::collect_deferred_releases();
  }
  for (const auto& [v, device] : to_sync) synchronize(v, device);
  at = 0;
  for (const host_read& r : reads) {
    if (r.size > 0 && r.buf.type() != device_type::cuda) {
      std::memcpy(out.mutable_host_data() + at, r.buf.host_data() + r.pos, static_cast<std::size_t>(r.size));
    }
    at += r.size;
  }
  return out;
}

std::optional<queued_reads> reads_into_pinned(std::span<const host_read> reads, const context& ctx) {
  std::int64_t total = 0;
  for (const host_read& r : reads) {
    if (r.size == 0) continue;
    if (r.buf.type() != device_type::cuda || !r.buf.get_context() || *r.buf.get_context() != ctx) return std::nullopt;
    total += r.size;
  }
  if (total == 0) return std::nullopt;
  std::optional<buffer> pinned = try_allocate_pinned_pooled(ctx, total);
  if (!pinned) return std::nullopt;
  queued_reads out{std::move(*pinned), {}};
  out.pieces.reserve(reads.size());
  std::int64_t at = 0;
  for (const host_read& r : reads) {
    if (r.size > 0) out.pieces.push_back(copy_piece{out.bytes, at, r.buf, r.pos, r.size});
    at += r.size;
  }
  return out;
}

void probe_cache::add_reads(std::vector<host_read>& reads) const {
  for (const request& r : pending_) reads.push_back({r.buf, r.pos, r.width});
}

const std::uint8_t* probe_cache::take(const std::uint8_t* at) {
  for (const request& r : pending_) {
    std::uint64_t raw = 0;
    std::memcpy(&raw, at, static_cast<std::size_t>(r.width));
    values_[{r.buf.address() + static_cast<std::uintptr_t>(r.pos), r.width}] = raw;
    at += r.width;
  }
  pending_.clear();
  pending_keys_.clear();
  return at;
}

void probe_cache::fetch(stream_view s) {
  if (pending_.empty()) return;
  std::vector<host_read> reads;
  reads.reserve(pending_.size());
  add_reads(reads);
  const buffer bytes = read_to_host(reads, s);
  take(reinterpret_cast<const std::uint8_t*>(bytes.host_data()));
}

}  // namespace cuarrow::arrow::detail
