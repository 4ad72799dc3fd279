// File -> device copies through cuFile (gds_copy.hpp).
#include "gds_copy.hpp"

#include <algorithm>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include "cuarrow/context.hpp"
#include "runtime/runtime.hpp"
#include "worker_pool.hpp"

namespace cuarrow::detail {
namespace {

// Threads of their own (not the staging pipeline's: a reader may fall back
// to the pipeline after a cuFile failure), one job at a time.
struct gds_threads {
  std::mutex mutex;
  worker_pool pool;
};

gds_threads& the_threads() {
  static auto* t = new gds_threads;
  return *t;
}

constexpr int kDefaultThreads = 4;
constexpr std::size_t kParallelMinBytes = std::size_t{1} << 20;

}  // namespace

void gds_read_to_device(const gds_file& file, CUcontext ctx, CUdeviceptr base, std::span<const gds_piece> pieces,
                        int threads, std::atomic<std::int64_t>* bytes_read) {
  std::vector<gds_piece> parts;
  std::size_t total = 0;
  for (const gds_piece& p : pieces) {
    const auto part = static_cast<std::int64_t>(gds_part_bytes);
    std::int64_t at = p.file_offset;
    const std::int64_t end = p.file_offset + static_cast<std::int64_t>(p.size);
    while (at < end) {
      const std::int64_t next = std::min(end, (at / part + 1) * part);
      parts.push_back(gds_piece{p.device_offset + static_cast<std::size_t>(at - p.file_offset),
                                static_cast<std::size_t>(next - at), at});
      at = next;
    }
    total += p.size;
  }
  if (parts.empty()) return;
  if (threads <= 0) threads = kDefaultThreads;
  if (total < kParallelMinBytes) threads = 1;
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), parts.size()));

  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> first_failed{std::numeric_limits<std::size_t>::max()};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  std::size_t failure_index = std::numeric_limits<std::size_t>::max();
  auto fail = [&](std::size_t i, std::exception_ptr e) {
    std::lock_guard lock(failure_mutex);
    if (i < failure_index) {
      failure_index = i;
      failure = std::move(e);
    }
    std::size_t seen = first_failed.load();
    while (i < seen && !first_failed.compare_exchange_weak(seen, i)) {
    }
  };
  const std::function<void(int)> work = [&](int) {
    std::unique_ptr<scoped_context> guard;
    try {
      guard = std::make_unique<scoped_context>(ctx);  // cuFile needs the memory's context current
    } catch (...) {
      fail(0, std::current_exception());
      return;
    }
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= parts.size() || i > first_failed.load()) return;  // later parts need not run after a failure
      try {
        file.read(base, parts[i].device_offset, parts[i].size, parts[i].file_offset);
        if (bytes_read != nullptr) bytes_read->fetch_add(static_cast<std::int64_t>(parts[i].size));
      } catch (...) {
        fail(i, std::current_exception());
      }
    }
  };
  if (threads == 1) {
    work(0);
  } else {
    gds_threads& t = the_threads();
    std::lock_guard lock(t.mutex);
    t.pool.run(threads, work);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace cuarrow::detail
