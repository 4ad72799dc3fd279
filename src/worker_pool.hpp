// Internal: host threads that run one job at a time, the caller taking part.
//
// The staging pipeline (staging.cpp) and the IPC codecs (ipc_format/codec.cpp)
// each keep one pool for the process's life.  A pool is never destroyed; its
// threads sleep on a condition variable between jobs and are stopped and
// joined by an exit handler (threads left running at exit upset leak
// checkers and, on some C libraries, exit itself).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cuarrow::detail {

/// The host's logical cores (std::thread::hardware_concurrency, at least 1),
/// read once: glibc reads sysfs at every call of hardware_concurrency (an
/// open, read and close: about 6% of the calling thread's time in a
/// projected file read of 142 batches on the CI machine).
int host_cores() noexcept;

class worker_pool {
 public:
  /// Runs fn(0) .. fn(workers - 1) at once, fn(0) on the calling thread,
  /// and returns when all have returned.  One job at a time: callers that
  /// may run concurrently serialize themselves (a second run() while one is
  /// in progress is a bug); fn must not call run() on the same pool.  fn
  /// must not throw.
  void run(int workers, const std::function<void(int)>& fn);

  /// Stops and joins the threads (the exit handler calls it).
  void stop() noexcept;

 private:
  void loop(int index);

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

}  // namespace cuarrow::detail
