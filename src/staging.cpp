// The pinned staging pipeline for pageable host memory (staging.hpp).
#include "staging.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuarrow/error.hpp"
#include "driver_table.hpp"

namespace cuarrow {
namespace detail {
namespace {

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end != nullptr) {
    if (*end == 'K' || *end == 'k') x <<= 10;
    if (*end == 'M' || *end == 'm') x <<= 20;
    if (*end == 'G' || *end == 'g') x <<= 30;
  }
  return x;
}

void validate(const transfer_options& o) {
  if (o.staging_threshold_bytes < 0) throw invalid_argument("staging_threshold_bytes must be >= 0");
  if (o.pinned_pool_limit_bytes < 0) throw invalid_argument("pinned_pool_limit_bytes must be >= 0");
  if (o.staging_chunk_bytes < (64 << 10)) throw invalid_argument("staging_chunk_bytes must be at least 64 KiB");
  if (o.staging_threads < 1 || o.staging_threads > 256) {
    throw invalid_argument("staging_threads must be between 1 and 256");
  }
}

struct options_state {
  std::mutex mutex;
  transfer_options options;
  options_state() {
    options.staging_threshold_bytes = env_int("CUARROW_STAGING_THRESHOLD", options.staging_threshold_bytes);
    options.staging_chunk_bytes = env_int("CUARROW_STAGING_CHUNK", options.staging_chunk_bytes);
    options.staging_threads = static_cast<int>(env_int("CUARROW_STAGING_THREADS", options.staging_threads));
    options.pinned_pool_limit_bytes = env_int("CUARROW_PINNED_POOL_LIMIT", options.pinned_pool_limit_bytes);
    try {
      validate(options);
    } catch (const error& e) {
      warn(std::string("ignoring the CUARROW_STAGING_* environment: ") + e.what());
      options = transfer_options{};
    }
  }
};

options_state& options() {
  static auto* s = new options_state;
  return *s;
}

// Threads that run one job at a time; the caller is worker 0.  The pool
// object is never destroyed; its threads sleep on a condition variable and
// are stopped and joined by an exit handler (threads left running at exit
// upset leak checkers and, on some C libraries, exit itself).
class worker_pool {
 public:
  void run(int workers, const std::function<void(int)>& fn) {
    std::unique_lock lock(mutex_);
    if (threads_.empty() && workers > 1) std::atexit(stop_all);
    while (static_cast<int>(threads_.size()) < workers - 1) {
      const int index = static_cast<int>(threads_.size()) + 1;
      threads_.emplace_back([this, index] { loop(index); });
    }
    task_ = &fn;
    wanted_ = workers;
    pending_ = workers - 1;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    fn(0);
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  static void stop_all() noexcept;

  void stop() noexcept {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      threads.swap(threads_);
    }
    wake_.notify_all();
    for (auto& t : threads) t.join();
  }

  void loop(int index) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen || stopping_; });
      if (stopping_) return;
      seen = generation_;
      if (index >= wanted_) continue;
      const std::function<void(int)>* fn = task_;
      lock.unlock();
      (*fn)(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  std::uint64_t generation_ = 0;
  int wanted_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

// Pinned staging buffers, two per worker, kept for the process's life (the
// memory is portable: usable from every context).
struct pipeline {
  std::mutex mutex;  // one staged copy at a time; concurrent callers queue
  worker_pool pool;
  std::vector<void*> slots;
  std::size_t slot_bytes = 0;

  // Called with `mutex` held and a context current.  Returns false when
  // pinned memory cannot be had (the caller then copies directly).
  bool ensure_slots(std::size_t count, std::size_t bytes) {
    const driver_table& d = driver();
    if (slot_bytes != bytes) {
      for (void* p : slots) d.cuMemFreeHost(p);
      slots.clear();
      slot_bytes = bytes;
    }
    while (slots.size() < count) {
      void* p = nullptr;
      if (d.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return false;
      slots.push_back(p);
    }
    return true;
  }
};

pipeline& the_pipeline() {
  static auto* p = new pipeline;
  return *p;
}

void worker_pool::stop_all() noexcept { the_pipeline().pool.stop(); }

// One staged copy, split into chunks taken by the workers in turn.
struct job {
  job(std::size_t n, std::size_t chunk_bytes) : chunks((n + chunk_bytes - 1) / chunk_bytes) {}
  std::size_t chunks;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  void fail(std::exception_ptr e) {
    std::lock_guard lock(error_mutex);
    if (!error) error = e;
    failed.store(true);
  }
};

// Runs `per_chunk(worker, slot, event, chunk_index)` for every chunk on the
// pool, with the job's context current in each worker and one event per
// slot (created here, destroyed after).  Throws the first failure.
template <class PerChunk>
void run_job(CUcontext ctx, job& j, int workers, PerChunk per_chunk) {
  pipeline& p = the_pipeline();
  const driver_table& d = driver();
  std::vector<CUevent> events(static_cast<std::size_t>(workers) * 2, nullptr);
  for (CUevent& e : events) check(d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  std::vector<char> recorded(events.size(), 0);
  std::function<void(int)> body = [&](int w) {
    CUresult r = d.cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS) {
      j.fail(std::make_exception_ptr(cuda_error(r, "", "cuCtxPushCurrent", "cuCtxPushCurrent failed in a staging worker")));
      return;
    }
    int turn = 0;
    try {
      for (;;) {
        if (j.failed.load()) break;
        const std::size_t i = j.next.fetch_add(1);
        if (i >= j.chunks) break;
        const std::size_t s = static_cast<std::size_t>(w) * 2 + static_cast<std::size_t>(turn);
        turn ^= 1;
        per_chunk(p.slots[s], events[s], recorded[s], i);
      }
    } catch (...) {
      j.fail(std::current_exception());
    }
    CUcontext popped = nullptr;
    d.cuCtxPopCurrent(&popped);
  };
  p.pool.run(workers, body);
  // Every DMA to or from a slot must be over before the slots are reused.
  CUresult first = CUDA_SUCCESS;
  for (std::size_t s = 0; s < events.size(); ++s) {
    if (recorded[s]) {
      CUresult r = d.cuEventSynchronize(events[s]);
      if (first == CUDA_SUCCESS) first = r;
    }
    d.cuEventDestroy(events[s]);
  }
  if (j.error) std::rethrow_exception(j.error);
  check(first, "cuEventSynchronize");
}

int workers_for(const transfer_options& o, std::size_t chunks) {
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(o.staging_threads), chunks));
}

}  // namespace

transfer_options current_transfer_options() {
  options_state& s = options();
  std::lock_guard lock(s.mutex);
  return s.options;
}

bool is_page_locked(const void* p) {
  unsigned int type = 0;
  CUresult r = driver().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                              reinterpret_cast<CUdeviceptr>(p));
  return r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST;
}

bool use_staging(std::size_t n) {
  const transfer_options o = current_transfer_options();
  return o.staging_threshold_bytes > 0 && n >= static_cast<std::size_t>(o.staging_threshold_bytes);
}

namespace {

// Runs `per_chunk(slot, event, recorded, offset, len)` over the chunks of an
// n-byte copy on the pool, one staged copy at a time; returns false (having
// done nothing) when no pinned staging memory can be had.
template <class PerChunk>
bool staged(CUcontext ctx, std::size_t n, PerChunk per_chunk) {
  const transfer_options o = current_transfer_options();
  const std::size_t chunk = static_cast<std::size_t>(o.staging_chunk_bytes);
  pipeline& p = the_pipeline();
  std::lock_guard lock(p.mutex);
  job j(n, chunk);
  const int workers = workers_for(o, j.chunks);
  if (!p.ensure_slots(static_cast<std::size_t>(workers) * 2, chunk)) return false;
  run_job(ctx, j, workers, [&](void* slot, CUevent ev, char& recorded, std::size_t i) {
    const std::size_t offset = i * chunk;
    per_chunk(slot, ev, recorded, offset, std::min(chunk, n - offset));
  });
  return true;
}

}  // namespace

void staged_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t n, CUstream s) {
  const driver_table& d = driver();
  const auto* from = static_cast<const unsigned char*>(src);
  const bool done = staged(ctx, n, [&](void* slot, CUevent ev, char& recorded, std::size_t offset, std::size_t len) {
    if (recorded) check(d.cuEventSynchronize(ev), "cuEventSynchronize");  // the slot's last DMA is done
    std::memcpy(slot, from + offset, len);
    check(d.cuMemcpyHtoDAsync(dst + offset, slot, len, s), "cuMemcpyHtoDAsync");
    check(d.cuEventRecord(ev, s), "cuEventRecord");
    recorded = 1;
  });
  if (!done) {  // no pinned memory for staging: let the driver copy
    check(d.cuMemcpyHtoDAsync(dst, src, n, s), "cuMemcpyHtoDAsync");
    check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
  }
}

void staged_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t n, CUstream s) {
  const driver_table& d = driver();
  auto* to = static_cast<unsigned char*>(dst);
  const bool done = staged(ctx, n, [&](void* slot, CUevent ev, char& recorded, std::size_t offset, std::size_t len) {
    check(d.cuMemcpyDtoHAsync(slot, src + offset, len, s), "cuMemcpyDtoHAsync");
    check(d.cuEventRecord(ev, s), "cuEventRecord");
    recorded = 1;
    check(d.cuEventSynchronize(ev), "cuEventSynchronize");
    std::memcpy(to + offset, slot, len);
  });
  if (!done) {
    check(d.cuMemcpyDtoHAsync(dst, src, n, s), "cuMemcpyDtoHAsync");
    check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
  }
}

}  // namespace detail

transfer_options get_transfer_options() { return detail::current_transfer_options(); }

void set_transfer_options(const transfer_options& o) {
  detail::validate(o);
  detail::options_state& s = detail::options();
  std::lock_guard lock(s.mutex);
  s.options = o;
}

}  // namespace cuarrow
