// A caching pool of pinned host memory for the results of device-to-host
// copies (copy_to_new_host): the DMA engine writes pinned memory at the
// link's speed, and pinning fresh memory for every result would cost more
// than the copy.  Blocks come in size classes (1/8 steps between powers of
// two); freed blocks are cached for reuse; the pool never holds more than
// transfer_options::pinned_pool_limit_bytes, cached and in use together.
#include <bit>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "buffer_factory.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "runtime/runtime.hpp"
#include "staging.hpp"

namespace cuarrow {
namespace {

constexpr std::size_t kMinClass = 64 << 10;

std::size_t size_class(std::size_t n) {
  if (n <= kMinClass) return kMinClass;
  const std::size_t step = std::max(kMinClass, std::bit_ceil(n) / 8);
  return (n + step - 1) / step * step;
}

struct pool_state {
  std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> cached;  // size class -> free blocks
  std::int64_t held = 0;                             // bytes pinned by the pool (cached + in use)
  std::int64_t in_use = 0;

  // Free cached blocks (largest first) until `bytes` more fit under `limit`.
  // Called with the mutex held.
  void make_room(std::int64_t bytes, std::int64_t limit) {
    for (auto it = cached.rbegin(); it != cached.rend() && held + bytes > limit; ++it) {
      while (!it->second.empty() && held + bytes > limit) {
        detail::free_page_locked(it->second.back(), it->first, nullptr);
        it->second.pop_back();
        held -= static_cast<std::int64_t>(it->first);
      }
    }
  }
};

pool_state& pool() {
  static auto* p = new pool_state;  // never destroyed: blocks may come back at exit
  return *p;
}

struct pooled_block {
  pooled_block(void* p, std::size_t c) : data(p), size_class(c) {}
  pooled_block(const pooled_block&) = delete;
  pooled_block& operator=(const pooled_block&) = delete;
  ~pooled_block() {
    pool_state& s = pool();
    std::lock_guard lock(s.mutex);
    s.cached[size_class].push_back(data);
    s.in_use -= static_cast<std::int64_t>(size_class);
  }
  void* data;
  std::size_t size_class;
};

void release_pool_at_exit() noexcept;  // below: it trims the pool

}  // namespace

std::optional<buffer> try_allocate_pinned_pooled(const context& ctx, std::int64_t size) {
  if (size < 0) throw invalid_argument("try_allocate_pinned_pooled: negative size " + std::to_string(size));
  const std::int64_t limit = detail::current_transfer_options().pinned_pool_limit_bytes;
  const std::size_t cls = size_class(static_cast<std::size_t>(size));
  void* p = nullptr;
  {
    pool_state& s = pool();
    std::lock_guard lock(s.mutex);
    auto& list = s.cached[cls];
    // The limit holds for a cached block too: after the limit was lowered
    // (to 0: no pinned results), blocks cached before are not handed out.
    if (s.in_use + static_cast<std::int64_t>(cls) > limit) return std::nullopt;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    } else {
      scoped_context guard(ctx);
      detail::on_release_contexts(release_pool_at_exit);
      s.make_room(static_cast<std::int64_t>(cls), limit);
      try {
        // Mapped for the device (CU_MEMHOSTREGISTER_DEVICEMAP): cuarrow's
        // gather kernel writes small reads of device memory into results
        // through their host pointer (copy.cpp), which CUDA promises only
        // for mapped memory.
        p = detail::allocate_page_locked(cls, /*mapped=*/true);
      } catch (const std::exception&) {
        return std::nullopt;  // no pinned memory to be had: the caller copies into ordinary memory
      }
      s.held += static_cast<std::int64_t>(cls);
    }
    s.in_use += static_cast<std::int64_t>(cls);
  }
  buffer::fields f = detail::buffer_factory::fields_of(ctx, device_type::cuda_host, size);
  f.address = reinterpret_cast<std::uintptr_t>(p);
  f.owner = std::make_shared<pooled_block>(p, cls);
  f.owner_is_allocation = true;
  return detail::buffer_factory::make(std::move(f));
}

pinned_pool_statistics pinned_pool_stats() {
  pool_state& s = pool();
  std::lock_guard lock(s.mutex);
  return pinned_pool_statistics{s.held, s.in_use};
}

namespace {
// Before the runtime drops its contexts (exit, cuarrow::shutdown): the
// cached blocks are unpinned while their context exists.  Blocks in use
// stay (their buffers may outlive this).
void release_pool_at_exit() noexcept {
  try {
    trim_pinned_pool();
  } catch (...) {  // nothing to report to at exit: the blocks stay pinned
  }
}
}  // namespace

void trim_pinned_pool() {
  if (!detail::driver_loaded() || device_count() == 0) return;
  scoped_context guard(context::get(0));  // the blocks are portable: any context will do
  pool_state& s = pool();
  std::lock_guard lock(s.mutex);
  s.make_room(0, s.in_use);  // free every cached block
}

}  // namespace cuarrow
