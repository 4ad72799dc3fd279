// Host threads that run one job at a time (worker_pool.hpp).
#include "worker_pool.hpp"

#include <algorithm>
#include <cstdlib>

namespace cuarrow::detail {
namespace {

// Every pool that started threads, stopped by one exit handler.
struct pool_registry {
  std::mutex mutex;
  std::vector<worker_pool*> pools;
};

pool_registry& registry() {
  static auto* r = new pool_registry;
  return *r;
}

void stop_all() noexcept {
  std::vector<worker_pool*> pools;
  {
    std::lock_guard lock(registry().mutex);
    pools = registry().pools;
  }
  for (worker_pool* p : pools) p->stop();
}

void register_pool(worker_pool* pool) {
  std::lock_guard lock(registry().mutex);
  if (registry().pools.empty()) std::atexit(stop_all);
  registry().pools.push_back(pool);
}

}  // namespace

int host_cores() noexcept {
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return n;
}

void worker_pool::run(int workers, const std::function<void(int)>& fn) {
  std::unique_lock lock(mutex_);
  if (stopping_) {
    // After the exit handler: no threads any more, the caller runs each part.
    lock.unlock();
    for (int i = 0; i < workers; ++i) fn(i);
    return;
  }
  if (threads_.empty() && workers > 1) register_pool(this);
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

void worker_pool::stop() noexcept {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (auto& t : threads) t.join();
}

void worker_pool::loop(int index) {
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

}  // namespace cuarrow::detail
