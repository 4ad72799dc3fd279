// Every copy cuarrow makes goes through this file (include/cuarrow/copy.hpp
// states the rules).  The strategy for each pair of memory kinds is chosen in
// one place, run_batch_group(): a single copy is a batch of one piece.
#include "cuarrow/copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "copy_sinks.hpp"
#include "cuarrow/error.hpp"
#include "device_gather.hpp"
#include "runtime/runtime.hpp"
#include "staging.hpp"

namespace cuarrow {
namespace {

// The buffers an asynchronous copy uses, kept alive until the stream has
// passed it (detail::release_when_passed).
struct keepalive final : detail::deferred_release {
  explicit keepalive(std::vector<buffer> b) : buffers(std::move(b)) {}
  std::vector<buffer> buffers;
};

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
  throw device_mismatch("the stream belongs to device " + std::to_string(sd) +
                        " but the copy's device memory is on device " + devices + "; use a stream of device " +
                        devices);
}

void synchronize_issued(stream_view s) { detail::synchronize_stream(s.handle()); }

// A buffer from allocate_device is valid in the order of the stream it was
// allocated on: make the copy's stream wait for that point first.
void order_after_allocation(const buffer* b, stream_view s) {
  if (b == nullptr || !b->is_stream_ordered() || b->size() == 0) return;
  detail::order_after(*b->get_context()->state(), b->free_stream().handle(), s.handle());
}

// Keeps `buffers` alive until the stream has passed the work queued on it
// so far (one host function); if that cannot be queued, waits instead.
void keep_alive_until_passed(std::vector<buffer> buffers, CUstream h) {
  auto* k = new keepalive(std::move(buffers));
  CUresult r = detail::release_when_passed(h, k);
  if (r != CUDA_SUCCESS) {
    // Could not queue the release: keep the promise by waiting instead.
    CUresult sr = detail::try_synchronize_stream(h);
    delete k;
    detail::check(r, "cuLaunchHostFunc");
    detail::check(sr, "cuStreamSynchronize");
  }
}

// After a failure with DMAs of an operation possibly queued on `h` (a driver
// call failed midway, or the final synchronization did): the operation's
// buffers must outlive them, but the caller drops them as the exception
// unwinds.  Waits for the stream (then nothing of the operation is pending),
// else hands the buffers to a host function queued behind the DMAs; if the
// stream cannot take that either, it is broken for good and the buffers are
// kept for good (reported), never freed under a DMA that might still run.
void settle_after_failure(std::vector<buffer> buffers, CUstream h) noexcept {
  if (detail::try_synchronize_stream(h) == CUDA_SUCCESS) return;
  keepalive* k = nullptr;
  try {
    k = new keepalive(std::move(buffers));
  } catch (...) {
    return;  // no memory left even for this: nothing better to do
  }
  if (detail::release_when_passed(h, k) == CUDA_SUCCESS) return;
  detail::warn("a failed copy left its stream unusable: keeping its " + std::to_string(k->buffers.size()) +
               " buffers for good, as DMAs may still use them");
  static auto* kept = new std::vector<keepalive*>;  // never destroyed
  static std::mutex kept_mutex;
  try {
    std::lock_guard lock(kept_mutex);
    kept->push_back(k);
  } catch (...) {
  }
}

// ---- the strategy for each pair of memory kinds ---------------------------------------

constexpr std::uintptr_t kMergeGap = 256;  // batch_copy_options::destination_gaps_writable
// Device-to-device runs of at least this many bytes are not put in the
// driver's batched call (see run_batch_group): 8 MiB take the H200 about
// 4 us to copy, more than a driver call costs.  The gather kernel's line is
// transfer_options::device_gather_max_run_bytes (none by default).
constexpr std::size_t kDirectDeviceCopyBytes = std::size_t{8} << 20;
// From this many runs within a device below the kernel's line on, the
// gather kernel takes them when it is ready: fewer cost the driver no more
// than a launch.
constexpr std::size_t kMinGatheredRuns = 8;
// Copies between the device and pinned memory up to this size go to the
// gather kernel with them (where it can reach pinned memory): the reads of
// offsets, bitmaps and run ends that checks and layouts make, a few bytes
// each, and the metadata an IPC stream writes.  Larger ones keep the copy
// engines, which move bulk data across the link faster than the SMs' loads
// and stores of host memory and cost a driver call that their bytes
// amortize.
constexpr std::int64_t kKernelReadBytes = 64 << 10;

struct planned_piece {
  endpoint dst;
  endpoint src;
  std::int64_t size = 0;
  const copy_piece* piece = nullptr;  // its buffers (empty for a raw host pointer): owners, ordering, keep-alive
  const context* ctx = nullptr;       // issuing context; null for ordinary host memory on both sides
};

const void* owner_of(const buffer& b) noexcept { return b.owner().get(); }
// Neighbours share a DMA only inside one allocation (buffer::allocation):
// buffers of one imported struct share an owner but not an allocation, and
// a DMA that spans two allocations fails (or reads bytes of neither).
const void* allocation_of(const buffer& b) noexcept { return b.allocation(); }

// May `next` travel in the same DMA as the run ending with `last`?  Both
// sides contiguous (or the same small gap on both sides), inside the same
// allocations, and the destination gap writable.
bool extends_run(const planned_piece& last, const planned_piece& next, bool gaps_writable) {
  const std::uintptr_t dst_end = last.dst.address + static_cast<std::uintptr_t>(last.size);
  const std::uintptr_t src_end = last.src.address + static_cast<std::uintptr_t>(last.size);
  if (next.dst.address < dst_end || next.src.address < src_end) return false;
  const std::uintptr_t gap = next.dst.address - dst_end;
  if (next.src.address - src_end != gap || gap > kMergeGap || (gap > 0 && !gaps_writable)) return false;
  const void* dst_allocation = allocation_of(last.piece->dst);
  const void* src_allocation = allocation_of(last.piece->src);
  return dst_allocation != nullptr && src_allocation != nullptr && dst_allocation == allocation_of(next.piece->dst) &&
         src_allocation == allocation_of(next.piece->src);
}

// `items` in destination order; often they are already (a writer's pieces
// come in the order of its output), and a check is cheaper than a sort.
template <class Piece>
void sort_by_destination(std::vector<Piece*>& items) {
  auto before = [](const planned_piece* a, const planned_piece* b) { return a->dst.address < b->dst.address; };
  if (!std::is_sorted(items.begin(), items.end(), before)) std::sort(items.begin(), items.end(), before);
}

// Issues `dma(dst, src, bytes)` once per run of `items` (sorted here by
// destination address).
template <class Dma>
void issue_runs(std::vector<planned_piece*>& items, bool gaps_writable, Dma dma) {
  sort_by_destination(items);
  std::size_t i = 0;
  while (i < items.size()) {
    const planned_piece* head = items[i];
    const planned_piece* last = head;
    std::size_t k = i + 1;
    while (k < items.size() && extends_run(*last, *items[k], gaps_writable)) last = items[k++];
    const std::uintptr_t end = last->dst.address + static_cast<std::uintptr_t>(last->size);
    dma(head->dst.address, head->src.address, static_cast<std::size_t>(end - head->dst.address));
    i = k;
  }
}

// Staged pieces sorted by their device side, neighbours in one allocation
// merged where allowed (`device_of` picks the device side).
std::vector<detail::staged_piece> staged_pieces(std::vector<planned_piece*>& items, bool to_device,
                                                bool gaps_writable) {
  auto device_address = [&](const planned_piece* p) { return to_device ? p->dst.address : p->src.address; };
  auto device_allocation = [&](const planned_piece* p) {
    return allocation_of(to_device ? p->piece->dst : p->piece->src);
  };
  std::sort(items.begin(), items.end(),
            [&](const planned_piece* a, const planned_piece* b) { return device_address(a) < device_address(b); });
  std::vector<detail::staged_piece> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const planned_piece* p = items[i];
    detail::staged_piece sp;
    if (to_device) sp.host_src = reinterpret_cast<const unsigned char*>(p->src.address);
    else sp.host_dst = reinterpret_cast<unsigned char*>(p->dst.address);
    sp.device = static_cast<CUdeviceptr>(device_address(p));
    sp.size = static_cast<std::size_t>(p->size);
    if (i > 0) {
      const planned_piece* q = items[i - 1];
      const std::uintptr_t end = device_address(q) + static_cast<std::uintptr_t>(q->size);
      // Reading a source gap is harmless; writing a destination gap needs
      // the caller's leave, unless there is no gap.
      const bool allowed = !to_device || gaps_writable || device_address(p) == end;
      sp.merge_with_previous = allowed && device_allocation(p) != nullptr &&
                               device_allocation(p) == device_allocation(q) && device_address(p) >= end &&
                               device_address(p) - end <= kMergeGap;
    }
    out.push_back(sp);
  }
  return out;
}

// How many DMAs issue_runs would make of `items` (sorted here by destination).
std::size_t direct_runs(std::vector<planned_piece*>& items, bool gaps_writable) {
  sort_by_destination(items);
  std::size_t runs = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i == 0 || !extends_run(*items[i - 1], *items[i], gaps_writable)) ++runs;
  }
  return runs;
}

// Small pieces of ordinary host memory bound for the device, together below
// the staging threshold: gathered into one block from the pinned result
// pool, one DMA per run of neighbours (detail::gathered_host_to_device),
// added to `runs` for the batch's one batched call, where the driver would
// stage each piece on its own, a copy and a wait each.  Returns the block,
// which must stay alive until the stream has passed the DMAs; nullopt,
// having done nothing, when the pool has no room.
std::optional<buffer> gather_to_device(std::vector<planned_piece*>& items, const context& ctx, bool gaps_writable,
                                       std::vector<detail::batched_copy>& runs) {
  std::optional<buffer> block;
  const bool done = detail::gathered_host_to_device(
      staged_pieces(items, true, gaps_writable),
      [&](std::size_t bytes) -> unsigned char* {
        block = try_allocate_pinned_pooled(ctx, static_cast<std::int64_t>(bytes));
        return block ? reinterpret_cast<unsigned char*>(block->address()) : nullptr;
      },
      [&](CUdeviceptr dst, const unsigned char* src, std::size_t n) {
        runs.push_back({dst, reinterpret_cast<CUdeviceptr>(src), n, detail::copy_direction::host_to_device});
      });
  return done ? block : std::nullopt;
}

// One context's share of a batch.
void run_batch_group(std::vector<planned_piece*>& items, const context* ctx, stream_view s, bool wait,
                     const batch_copy_options& options) {
  std::vector<planned_piece*> host_only, managed, d2d, peer, h2d, d2h, h2d_staged, d2h_staged;
  std::vector<planned_piece*> h2d_small;  // ordinary memory to the device, the batch below the threshold
  // Ordinary host memory that might be pageable.  Below the staging
  // threshold a copy goes to the driver directly whatever its memory is, so
  // the driver is asked whether it is pinned (one cuPointerGetAttribute)
  // only when the pipeline may take it: a small copy costs one driver call
  // less.  Inside a batch that stages, a piece smaller than the threshold
  // is staged without asking: pinned or not, it moves with the batch's
  // chunks at least as fast as in a DMA of its own (small DMAs fall short
  // of the link), and a batch of a thousand columns makes a thousand driver
  // calls less.  Only pieces large enough to be staged on their own are
  // asked, so that large pinned memory still goes straight to the DMA.
  // One reading of the options for the whole batch.
  const transfer_options settings = detail::current_transfer_options();
  const std::int64_t threshold = settings.staging_threshold_bytes;
  auto stages = [threshold](std::int64_t n) { return threshold > 0 && n >= threshold; };
  std::int64_t h2d_host = 0, d2h_host = 0;
  for (const planned_piece* p : items) {
    if (p->dst.on_device() && p->src.type == device_type::cpu) h2d_host += p->size;
    if (p->src.on_device() && p->dst.type == device_type::cpu) d2h_host += p->size;
  }
  const bool ask_h2d = stages(h2d_host);
  const bool ask_d2h = stages(d2h_host);
  auto pageable = [&](const planned_piece* p, const endpoint& host) {
    return host.type == device_type::cpu &&
           (!stages(p->size) || !detail::is_page_locked(reinterpret_cast<const void*>(host.address)));
  };
  for (planned_piece* p : items) {
    const bool dst_managed = p->dst.type == device_type::cuda_managed;
    const bool src_managed = p->src.type == device_type::cuda_managed;
    if (!p->dst.on_device() && !p->src.on_device() && !dst_managed && !src_managed) host_only.push_back(p);
    else if (dst_managed || src_managed) managed.push_back(p);
    else if (p->dst.on_device() && p->src.on_device()) (p->dst.device == p->src.device ? d2d : peer).push_back(p);
    else if (p->dst.on_device()) {
      if (p->src.type != device_type::cpu) h2d.push_back(p);
      else if (!ask_h2d) h2d_small.push_back(p);
      else (pageable(p, p->src) ? h2d_staged : h2d).push_back(p);
    } else (ask_d2h && pageable(p, p->dst) ? d2h_staged : d2h).push_back(p);
  }
  if (!host_only.empty()) {
    // Earlier work on the stream may still write either side.
    detail::synchronize_in(ctx, s);
    for (const planned_piece* p : host_only) {
      std::memmove(reinterpret_cast<void*>(p->dst.address), reinterpret_cast<const void*>(p->src.address),
                   static_cast<std::size_t>(p->size));
    }
  }
  if (host_only.size() == items.size()) return;

  scoped_context guard(*ctx);
  detail::context_state& stats = *ctx->state();
  const auto started = std::chrono::steady_clock::now();
  // Order after each stream-ordered allocation once (a hash set: a batch
  // of a table's buffers has hundreds of allocations and thousands of pieces).
  // Most pieces share each side's allocation with the piece before: the
  // last owner of each side is remembered.
  std::unordered_set<const void*> ordered;
  auto order = [&](const buffer& b, const void*& last) {
    if (!b.is_stream_ordered() || b.size() == 0) return;
    const void* owner = owner_of(b);
    if (owner == last) return;
    last = owner;
    if (ordered.insert(owner).second) order_after_allocation(&b, s);
  };
  const void* last_dst = nullptr;
  const void* last_src = nullptr;
  for (const planned_piece* p : items) {
    order(p->piece->dst, last_dst);
    order(p->piece->src, last_src);
  }
  std::int64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0;
  auto add = [](const std::vector<planned_piece*>& v, std::int64_t& total) {
    for (const planned_piece* p : v) total += p->size;
  };
  // Pageable pieces go through the pipeline together when they are enough.
  std::int64_t h2d_pageable = 0, d2h_pageable = 0;
  add(h2d_staged, h2d_pageable);
  add(d2h_staged, d2h_pageable);
  if (!stages(h2d_pageable)) {
    h2d_small.insert(h2d_small.end(), h2d_staged.begin(), h2d_staged.end());
    h2d_staged.clear();
  }
  const bool gaps = options.destination_gaps_writable;
  // Several small pieces that would each be a DMA of their own are
  // gathered into one pinned block instead (gather_to_device).
  std::vector<planned_piece*> h2d_gathered;
  if (h2d_small.size() >= 2 && direct_runs(h2d_small, gaps) >= 2) h2d_gathered.swap(h2d_small);
  h2d.insert(h2d.end(), h2d_small.begin(), h2d_small.end());
  if (!stages(d2h_pageable)) {
    d2h.insert(d2h.end(), d2h_staged.begin(), d2h_staged.end());
    d2h_staged.clear();
  }
  CUstream h = s.handle();
  if (!h2d_staged.empty() || !h2d_gathered.empty()) {
    // Host code is about to read the sources: earlier work on the stream
    // may still write them (a copy into pinned memory, a kernel through a
    // mapped pointer), so it must be over first, as the driver makes sure
    // before it stages pageable memory itself.  Before this batch's own
    // copies are queued, so that the wait does not include them.
    synchronize_issued(s);
  }
  std::optional<buffer> gather_block;
  // Every buffer of the batch (and the gathered pieces' pinned block), for
  // the keep-alive after the last DMA or after a failure midway.
  auto batch_buffers = [&] {
    std::vector<buffer> keep;
    if (gather_block) keep.push_back(*gather_block);
    std::unordered_set<const void*> kept;
    auto hold = [&](const buffer& b) {
      const void* key = owner_of(b);
      if (key != nullptr && !kept.insert(key).second) return;
      keep.push_back(b);
    };
    for (const planned_piece* p : items) {
      hold(p->piece->dst);
      hold(p->piece->src);
    }
    return keep;
  };
  std::int64_t staged_bytes = 0;
  try {
    // The runs within one device and between it and pinned memory go to
    // the driver together (one cuMemcpyBatchAsync per few thousand where
    // the driver has it): their destinations are disjoint, so their order
    // among themselves is free.  Pageable memory goes one DMA each.
    std::vector<detail::batched_copy> runs;
    runs.reserve(items.size());
    // In the order the batched call groups them (within the device, to it,
    // from it), so that they need no sorting there.
    // Runs within the device: many (kMinGatheredRuns) go to cuarrow's
    // gather kernel when it is ready (copy_many_async), one launch for up
    // to 1,000 runs, where every driver copy costs the host 5-12 us; large
    // runs too, unless transfer_options::device_gather_max_run_bytes draws
    // a line (those from it on keep the copy engines, queued after the
    // launch so that the kernel runs while the host queues them).  On an
    // H100 the kernel moved 160 pieces of 15 MB in 1.69 ms, the copy
    // engines in 2.47 ms plus 1-2 ms of the host's time to queue them
    // (bench/gather_probe.cu).  Without the kernel, runs from
    // kDirectDeviceCopyBytes on go one cuMemcpyDtoDAsync each and the
    // smaller ones in the driver's batched call.
    auto pinned_apart = [](std::vector<planned_piece*>& v, bool host_is_dst) {
      std::vector<planned_piece*> pinned;
      std::erase_if(v, [&](planned_piece* p) {
        const bool is_pinned = (host_is_dst ? p->dst : p->src).type == device_type::cuda_host;
        if (is_pinned) pinned.push_back(p);
        return is_pinned;
      });
      return pinned;
    };
    std::vector<planned_piece*> h2d_pinned = pinned_apart(h2d, false), d2h_pinned = pinned_apart(d2h, true);
    // Small reads of this context's device memory into pinned memory (a
    // layout's offsets, bitmaps to count nulls in; kKernelReadBytes) join
    // the runs within the device where the gather kernel can reach pinned
    // memory through its host pointer: each would otherwise be a driver
    // copy of its own.  So do small copies the other way, from pinned
    // memory into this context's device memory (an IPC stream's metadata
    // and end marker): as driver copies, the GPU ran them one after
    // another between the kernel's launches, 2-5 us each on an H100 (the
    // gaps between an 8-batch stream's parts, 36 us of its 1.75 ms;
    // bench/stream_launch_probe.py --gpu-timing).
    std::vector<planned_piece*> d2p, p2d;
    if ((!d2h_pinned.empty() || !h2d_pinned.empty()) && detail::gathers_device_copies(*ctx) &&
        detail::gather_reaches_host(*ctx->state())) {
      auto small_on_this_context = [&](const planned_piece* p, const endpoint& device_side) {
        return p->size <= kKernelReadBytes && device_side.ctx != nullptr && device_side.ctx->handle() == ctx->handle();
      };
      std::erase_if(d2h_pinned, [&](planned_piece* p) {
        const bool small = small_on_this_context(p, p->src);
        if (small) d2p.push_back(p);
        return small;
      });
      std::erase_if(h2d_pinned, [&](planned_piece* p) {
        const bool small = small_on_this_context(p, p->dst);
        if (small) p2d.push_back(p);
        return small;
      });
      // The kernel reads and writes through the host pointer, so the
      // memory must be mapped for the device now (kernel_reaches_host):
      // the driver copies memory whose registration ended with its
      // context, or one CUDA does not promise to map (registered by
      // another library without CU_MEMHOSTREGISTER_DEVICEMAP), where a
      // kernel could fault.  Asked once per pinned buffer, and only when
      // there may be copies enough for a launch (else `gathered` below is
      // false, and they go back with the other pinned copies there).
      if (d2p.size() + p2d.size() + d2d.size() >= kMinGatheredRuns) {
        std::unordered_map<const void*, bool> registered;
        auto unmapped = [&](const buffer& pinned, const endpoint& host) {
          auto [it, fresh] = registered.try_emplace(owner_of(pinned), false);
          if (fresh) it->second = detail::kernel_reaches_host(host.address);
          return !it->second;
        };
        std::erase_if(d2p, [&](planned_piece* p) {
          const bool back = unmapped(p->piece->dst, p->dst);
          if (back) d2h_pinned.push_back(p);
          return back;
        });
        std::erase_if(p2d, [&](planned_piece* p) {
          const bool back = unmapped(p->piece->src, p->src);
          if (back) h2d_pinned.push_back(p);
          return back;
        });
      }
    }
    std::vector<detail::batched_copy> to_pinned, from_pinned;
    issue_runs(d2p, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      to_pinned.push_back({static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n});
    });
    issue_runs(p2d, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      from_pinned.push_back({static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n});
    });
    std::vector<detail::batched_copy> d2d_runs;
    d2d_runs.reserve(d2d.size());
    issue_runs(d2d, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      d2d_runs.push_back({static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n});
    });
    // The kernel's largest run (transfer_options::device_gather_max_run_bytes;
    // 0: no limit), and the runs below it.
    const std::size_t kernel_limit = settings.device_gather_max_run_bytes > 0
                                         ? static_cast<std::size_t>(settings.device_gather_max_run_bytes)
                                         : SIZE_MAX;
    const auto for_kernel = static_cast<std::size_t>(std::count_if(
        d2d_runs.begin(), d2d_runs.end(), [&](const detail::batched_copy& c) { return c.bytes < kernel_limit; }));
    // A kernel reaches only memory of the context it runs in (cuMemcpy
    // reaches any context's on the device): memory of a context wrapped
    // from elsewhere keeps the driver's copies.
    auto one_context = [&] {
      const CUcontext handle = ctx->handle();
      auto same = [&](const context* c) {
        return c == ctx || (c != nullptr && (c->state() == ctx->state() || c->handle() == handle));
      };
      return std::all_of(d2d.begin(), d2d.end(),
                         [&](const planned_piece* p) { return same(p->dst.ctx) && same(p->src.ctx); });
    };
    const bool gathered = for_kernel + to_pinned.size() + from_pinned.size() >= kMinGatheredRuns &&
                          detail::gathers_device_copies(*ctx) && one_context();
    // Runs below the line stay in the batch (the kernel's or the driver's);
    // the others get one driver copy each.
    std::vector<detail::batched_copy> large;
    const std::size_t line = gathered ? kernel_limit : kDirectDeviceCopyBytes;
    for (const detail::batched_copy& c : d2d_runs) (c.bytes < line ? runs : large).push_back(c);
    // Gathered, the reads into pinned memory are copies within the device's
    // address space for the kernel (the host pointer is the device's);
    // otherwise they are the driver's device-to-host copies, as the other
    // pinned ones.
    // The copies from pinned memory go first in the launch, so that their
    // blocks, which wait on the link, run beside the bulk rather than
    // after it.
    if (gathered) {
      runs.insert(runs.begin(), from_pinned.begin(), from_pinned.end());
      runs.insert(runs.end(), to_pinned.begin(), to_pinned.end());
    } else {
      d2h_pinned.insert(d2h_pinned.end(), d2p.begin(), d2p.end());
      d2p.clear();
      h2d_pinned.insert(h2d_pinned.end(), p2d.begin(), p2d.end());
      p2d.clear();
    }
    auto issue_large = [&] {
      for (const detail::batched_copy& c : large) detail::copy_device_to_device_async(c.dst, c.src, c.bytes, h);
    };
    if (!gathered) issue_large();
    if (!h2d_gathered.empty()) {
      gather_block = gather_to_device(h2d_gathered, *ctx, gaps, runs);
      if (!gather_block) {  // the pinned pool is at its limit: direct copies, the driver staging each
        h2d.insert(h2d.end(), h2d_gathered.begin(), h2d_gathered.end());
        h2d_gathered.clear();
      }
    }
    // Direct copies first: their DMAs run while the pipeline copies on the host.
    issue_runs(managed, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      detail::copy_unified_async(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n, h);
    });
    issue_runs(h2d_pinned, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      runs.push_back(
          {static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n, detail::copy_direction::host_to_device});
    });
    issue_runs(d2h_pinned, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      runs.push_back(
          {static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), n, detail::copy_direction::device_to_host});
    });
    detail::copy_many_async(runs, *ctx->state(), h, gathered);
    if (gathered) issue_large();
    for (const planned_piece* p : peer) {
      p->dst.ctx->enable_peer_access(*p->src.ctx);
      p->src.ctx->enable_peer_access(*p->dst.ctx);
      detail::copy_peer_async(static_cast<CUdeviceptr>(p->dst.address), p->dst.ctx->handle(),
                              static_cast<CUdeviceptr>(p->src.address), p->src.ctx->handle(),
                              static_cast<std::size_t>(p->size), h);
    }
    issue_runs(h2d, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      detail::copy_host_to_device_async(static_cast<CUdeviceptr>(dst), reinterpret_cast<const void*>(src), n, h);
    });
    issue_runs(d2h, gaps, [&](std::uintptr_t dst, std::uintptr_t src, std::size_t n) {
      detail::copy_device_to_host_async(reinterpret_cast<void*>(dst), static_cast<CUdeviceptr>(src), n, h);
    });
    h2d.insert(h2d.end(), h2d_pinned.begin(), h2d_pinned.end());  // for the byte counts below
    h2d.insert(h2d.end(), p2d.begin(), p2d.end());
    d2h.insert(d2h.end(), d2h_pinned.begin(), d2h_pinned.end());
    d2h.insert(d2h.end(), d2p.begin(), d2p.end());
    if (!h2d_staged.empty()) {
      const auto pieces = staged_pieces(h2d_staged, true, gaps);
      detail::staged_host_to_device(ctx->handle(), pieces, h);
    }
    if (!d2h_staged.empty()) {
      const auto pieces = staged_pieces(d2h_staged, false, gaps);
      detail::staged_device_to_host(ctx->handle(), pieces, h);
    }
    add(managed, d2d_bytes);
    add(d2d, d2d_bytes);
    add(peer, d2d_bytes);
    add(h2d, h2d_bytes);
    add(h2d_gathered, h2d_bytes);
    add(h2d_staged, h2d_bytes);
    add(d2h, d2h_bytes);
    add(d2h_staged, d2h_bytes);
    staged_bytes = (h2d_staged.empty() ? 0 : h2d_pageable) + (d2h_staged.empty() ? 0 : d2h_pageable);

    if (wait) {
      synchronize_issued(s);
    } else if (options.caller_keeps_buffers) {
      if (gather_block) keep_alive_until_passed({*gather_block}, h);  // the copy's own block
    } else if (!(h2d.empty() && h2d_gathered.empty() && d2h.empty() && d2d.empty() && peer.empty() &&
                 managed.empty())) {
      // One host function keeps every buffer alive until the stream passes
      // the batch, the gathered pieces' pinned block with them.
      keep_alive_until_passed(batch_buffers(), h);
    }
  } catch (...) {
    // Some of the batch's DMAs may be queued: its buffers must outlive them.
    settle_after_failure(batch_buffers(), h);
    throw;
  }
  stats.h2d_bytes.fetch_add(h2d_bytes);
  stats.d2h_bytes.fetch_add(d2h_bytes);
  stats.d2d_bytes.fetch_add(d2d_bytes);
  stats.staged_bytes.fetch_add(staged_bytes);
  stats.copies.fetch_add(static_cast<std::int64_t>(items.size() - host_only.size()));
  if (wait || !h2d_staged.empty() || !d2h_staged.empty()) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
    // Time is shared out by bytes between the directions the batch moved.
    const std::int64_t all = h2d_bytes + d2h_bytes + d2d_bytes;
    if (all > 0) {
      stats.h2d_ns.fetch_add(ns * h2d_bytes / all);
      stats.d2h_ns.fetch_add(ns * d2h_bytes / all);
      stats.d2d_ns.fetch_add(ns * d2d_bytes / all);
    }
  }
}

// Rethrows the invalid_argument being handled, of the same type, with the
// piece's index in front of its message.
[[noreturn]] void rethrow_for_piece(std::size_t i) {
  const std::string prefix = "piece " + std::to_string(i) + " of the batch: ";
  try {
    throw;
  } catch (const out_of_range& e) {
    throw out_of_range(prefix + e.what());
  } catch (const read_only& e) {
    throw read_only(prefix + e.what());
  } catch (const device_mismatch& e) {
    throw device_mismatch(prefix + e.what());
  } catch (const invalid_argument& e) {
    throw invalid_argument(prefix + e.what());
  }
}

void run_batch(std::span<const copy_piece> pieces, stream_view s, bool wait, const batch_copy_options& options) {
  detail::collect_deferred_releases();
  std::vector<planned_piece> planned;
  planned.reserve(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const copy_piece& p = pieces[i];
    try {
      planned_piece q;
      q.dst = checked_side(p.dst, p.dst_offset, p.size, "destination", true);
      q.src = checked_side(p.src, p.src_offset, p.size, "source", false);
      q.size = p.size;
      q.piece = &p;
      q.ctx = issuing_context(q.dst, q.src, s);
      if (q.size > 0) planned.push_back(q);
    } catch (const invalid_argument&) {
      rethrow_for_piece(i);  // the batch is refused as a whole, saying which piece
    }
  }
  // Destinations must not overlap (the pieces run in no particular order).
  std::vector<const planned_piece*> by_dst;
  by_dst.reserve(planned.size());
  for (const planned_piece& p : planned) by_dst.push_back(&p);
  sort_by_destination(by_dst);
  for (std::size_t i = 1; i < by_dst.size(); ++i) {
    const planned_piece* a = by_dst[i - 1];
    const planned_piece* b = by_dst[i];
    if (a->dst.address + static_cast<std::uintptr_t>(a->size) > b->dst.address) {
      throw invalid_argument(
          "pieces " + std::to_string(a->piece - pieces.data()) + " and " + std::to_string(b->piece - pieces.data()) +
          " of the batch write overlapping destination bytes; a batch's destinations must be disjoint");
    }
  }
  // One group per issuing context, in the order they first appear.
  std::vector<const context*> contexts;
  std::vector<std::vector<planned_piece*>> groups;
  for (planned_piece& p : planned) {
    const detail::context_state* key = p.ctx != nullptr ? p.ctx->state().get() : nullptr;
    std::size_t g = 0;
    while (g < contexts.size() && (contexts[g] != nullptr ? contexts[g]->state().get() : nullptr) != key) ++g;
    if (g == contexts.size()) {
      contexts.push_back(p.ctx);
      groups.emplace_back();
    }
    groups[g].push_back(&p);
  }
  for (std::size_t g = 0; g < groups.size(); ++g) run_batch_group(groups[g], contexts[g], s, wait, options);
}

// One copy: a batch of one piece.  `dst_buffer` / `src_buffer` are null for
// raw host pointers (nothing to keep alive or order after).
void enqueue(const endpoint& dst, const endpoint& src, std::int64_t n, stream_view s, bool wait,
             const buffer* dst_buffer, const buffer* src_buffer) {
  detail::collect_deferred_releases();
  const context* ctx = issuing_context(dst, src, s);
  if (n == 0) return;
  const copy_piece piece{dst_buffer != nullptr ? *dst_buffer : buffer(), 0,
                         src_buffer != nullptr ? *src_buffer : buffer(), 0, n};
  planned_piece p{dst, src, n, &piece, ctx};
  std::vector<planned_piece*> items{&p};
  run_batch_group(items, ctx, s, wait, {});
}

}  // namespace

namespace detail {

bool gathers_device_copies(const context& ctx) {
  return current_transfer_options().device_gather && gather_ready(*ctx.state());
}

void write_to_file(const output_file& file, std::span<const file_piece> pieces, stream_view s) {
  collect_deferred_releases();
  struct item {
    endpoint src;
    const file_piece* piece;
    const context* ctx;  // issuing context; null for host memory
  };
  std::vector<item> host, device;
  std::vector<const context*> contexts;  // of the device items, in the order they first appear
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const file_piece& p = pieces[i];
    try {
      if (p.file_offset < 0) throw out_of_range("negative file offset " + std::to_string(p.file_offset));
      const endpoint src = checked_side(p.src, p.src_offset, p.size, "source", false);
      if (p.size == 0) continue;
      if (src.on_device() || src.type == device_type::cuda_managed) {
        const endpoint to_file{};  // host memory without a context
        const context* ctx = issuing_context(to_file, src, s);
        device.push_back({src, &p, ctx});
        if (std::find_if(contexts.begin(), contexts.end(),
                         [&](const context* c) { return c->state().get() == ctx->state().get(); }) == contexts.end()) {
          contexts.push_back(ctx);
        }
      } else {
        host.push_back({src, &p, src.ctx});
      }
    } catch (const invalid_argument&) {
      rethrow_for_piece(i);
    }
  }
  // Host memory is read by the host: earlier work on the stream may still
  // write it (a copy into pinned memory).
  if (!host.empty()) {
    synchronize_in(host.front().ctx != nullptr ? host.front().ctx : (contexts.empty() ? nullptr : contexts.front()), s);
    // Many or large host pieces (compressed bodies) are written by the
    // pipeline's workers in parallel.
    std::vector<host_file_piece> writes;
    writes.reserve(host.size());
    for (const item& it : host) {
      writes.push_back({reinterpret_cast<const unsigned char*>(it.src.address),
                        static_cast<std::size_t>(it.piece->size), static_cast<std::uint64_t>(it.piece->file_offset)});
    }
    write_host_to_file(file, writes);
  }
  CUstream h = s.handle();
  for (const context* ctx : contexts) {
    std::vector<const item*> group;
    for (const item& it : device) {
      if (it.ctx->state().get() == ctx->state().get()) group.push_back(&it);
    }
    // By device address: neighbours inside one allocation share a DMA
    // (the source bytes between them are read and dropped).
    std::sort(group.begin(), group.end(), [](const item* a, const item* b) { return a->src.address < b->src.address; });
    std::vector<staged_piece> staged;
    staged.reserve(group.size());
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < group.size(); ++i) {
      const item* it = group[i];
      staged_piece sp;
      sp.device = static_cast<CUdeviceptr>(it->src.address);
      sp.size = static_cast<std::size_t>(it->piece->size);
      sp.file_offset = static_cast<std::uint64_t>(it->piece->file_offset);
      if (i > 0) {
        const item* q = group[i - 1];
        const std::uintptr_t end = q->src.address + static_cast<std::uintptr_t>(q->piece->size);
        const void* a = allocation_of(it->piece->src);
        sp.merge_with_previous = a != nullptr && a == allocation_of(q->piece->src) && it->src.address >= end &&
                                 it->src.address - end <= kMergeGap;
      }
      bytes += it->piece->size;
      staged.push_back(sp);
    }
    scoped_context guard(*ctx);
    std::vector<const void*> ordered;
    for (const item* it : group) {
      const buffer& b = it->piece->src;
      if (std::find(ordered.begin(), ordered.end(), owner_of(b)) != ordered.end()) continue;
      ordered.push_back(owner_of(b));
      order_after_allocation(&b, s);
    }
    const auto started = std::chrono::steady_clock::now();
    try {
      staged_device_to_host(ctx->handle(), staged, h, &file);
    } catch (...) {
      // DMAs of the failed job may still be queued: the sources outlive them.
      std::vector<buffer> keep;
      for (const item* it : group) keep.push_back(it->piece->src);
      settle_after_failure(std::move(keep), h);
      throw;
    }
    context_state& stats = *ctx->state();
    stats.d2h_bytes.fetch_add(bytes);
    stats.staged_bytes.fetch_add(bytes);
    stats.copies.fetch_add(static_cast<std::int64_t>(group.size()));
    stats.d2h_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
  }
}

}  // namespace detail

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
  enqueue(raw_host(dst, size, "destination"), from, size, s, false, nullptr, &src);
}

void copy_to_host(void* dst, const buffer& src, std::int64_t src_offset, std::int64_t size, stream_view s) {
  endpoint from = checked_side(src, src_offset, size, "source", false);
  enqueue(raw_host(dst, size, "destination"), from, size, s, true, nullptr, &src);
}

void copy_batch_async(std::span<const copy_piece> pieces, stream_view s, const batch_copy_options& options) {
  run_batch(pieces, s, false, options);
}

void copy_batch(std::span<const copy_piece> pieces, stream_view s, const batch_copy_options& options) {
  run_batch(pieces, s, true, options);
}

void keep_alive_until_passed(std::vector<buffer> buffers, stream_view s) {
  detail::collect_deferred_releases();
  if (buffers.empty()) return;
  // A default stream acts on the current context: the first device
  // buffer's (the host function then follows the work cuarrow queued
  // there for it).
  const auto with_context =
      std::find_if(buffers.begin(), buffers.end(), [](const buffer& b) { return b.get_context().has_value(); });
  if (with_context == buffers.end()) {
    // Ordinary host memory only: a stream of its own still orders it (a
    // created stream carries its context); the default stream of no
    // context cannot have cuarrow's work for it.
    if (!s.is_default()) keep_alive_until_passed(std::move(buffers), s.handle());
    return;
  }
  const context ctx = *with_context->get_context();
  scoped_context guard(ctx);
  keep_alive_until_passed(std::move(buffers), s.handle());
}

void fill_async(const buffer& dst, std::int64_t dst_offset, std::int64_t size, std::uint8_t value, stream_view s) {
  endpoint to = checked_side(dst, dst_offset, size, "destination", true);
  detail::collect_deferred_releases();
  if (size == 0) return;
  if (!to.on_device() && to.type != device_type::cuda_managed) {
    detail::synchronize_in(to.ctx, s);  // earlier work on the stream may still write it
    std::memset(reinterpret_cast<void*>(to.address), value, static_cast<std::size_t>(size));
    return;
  }
  endpoint none{};
  const context* ctx = issuing_context(to, none, s);
  scoped_context guard(*ctx);
  order_after_allocation(&dst, s);
  detail::memset_async(static_cast<CUdeviceptr>(to.address), value, static_cast<std::size_t>(size), s.handle());
  keep_alive_until_passed({dst}, s.handle());
}

void fill(const buffer& dst, std::int64_t dst_offset, std::int64_t size, std::uint8_t value, stream_view s) {
  fill_async(dst, dst_offset, size, value, s);
  // Host memory without a context is set by the host, complete already.
  if (size > 0 && dst.get_context()) s.synchronize(*dst.get_context());
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
