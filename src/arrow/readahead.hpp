// Internal: the one read-ahead queue.  A producer makes runs of record
// batches (a file's consecutive batches read in one staging job, a host
// stream's next batch moved to the device); a thread of the queue's own
// calls it while fewer than `depth` runs wait ahead of the one the caller
// takes batches from, and next() hands the batches over in order.  With
// depth 0 there is no thread: next() calls the producer itself.
//
// A run may end in an error, after some batches or instead of them: its
// batches are handed over, then the error is thrown by next() and every
// later call, and the producer is not called again.  close() (and the
// destructor) waits for the run in progress and frees the batches not
// taken.  Used by ipc::batch_readahead, ipc::stream_readahead and
// arrow::device_readahead.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cuarrow/arrow/array.hpp"

namespace cuarrow::arrow::detail {

/// What one run may hold.  The queue sets it for every producer: the first
/// run, and with depth 0 every run (next() waits for it), is one batch, so
/// that the caller has a batch as soon as one is ready; later runs hold
/// batches up to `bytes` (as the producer counts them; one batch at least,
/// whatever its size) and `batches` at most.
struct run_limit {
  std::int64_t bytes = 1;
  std::size_t batches = 1;
};

/// Throws invalid_argument unless depth >= 0 and read_bytes >= 1, naming
/// `options` (the options struct) and what one run is (`run`: "read",
/// "transfer").
void check_readahead_options(const char* options, const char* run, int depth, std::int64_t read_bytes);

/// What one call of a producer made.
struct readahead_run {
  std::vector<record_batch> batches;  // handed over before `error`
  std::exception_ptr error;           // the producer failed (after `batches`)
  bool last = false;                  // nothing follows
};

/// A run of `n` batches made at once by `all` (one read, one transfer);
/// when that fails, they are made again one by one by `one(i)`, so that
/// every batch before a failing one is still delivered (a group may fail
/// where its batches alone do not: device memory for all of them at once).
/// The error of the first failing batch ends the run.  `n` is read after
/// `all` failed (`all` may set it: a stream's run knows its batches once
/// their metadata is read).  Never throws.
void make_run(readahead_run& r, const std::size_t& n, const std::function<std::vector<record_batch>()>& all,
              const std::function<record_batch(std::size_t)>& one) noexcept;

class readahead_queue {
 public:
  using producer = std::function<readahead_run(std::int64_t taken, run_limit limit)>;

  /// Starts the thread (depth >= 1) or not (depth 0).  `produce` is called
  /// by one thread at a time, with the batches next() has handed out so
  /// far and what its run may hold (one batch, or `most`), and must not
  /// throw (it reports its error in the run); it must stay callable until
  /// close() returns.
  readahead_queue(producer produce, int depth, run_limit most);
  ~readahead_queue();
  readahead_queue(const readahead_queue&) = delete;
  readahead_queue& operator=(const readahead_queue&) = delete;

  std::optional<record_batch> next();
  void close() noexcept;
  std::int64_t position() const noexcept;

 private:
  void run() noexcept;
  // The next run, with the lock held (depth 0: produced here).
  bool refill(std::unique_lock<std::mutex>& lock);

  // The producer's next run, under the queue's run_limit rule.
  readahead_run produce_next();

  const producer produce_;
  const int depth_;
  const run_limit most_;
  bool first_ = true;  // used by the one thread that produces

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable changed_;
  std::deque<std::vector<record_batch>> ready_;  // runs made, not yet taken
  std::vector<record_batch> current_;            // the run batches are taken from
  std::size_t current_next_ = 0;
  std::exception_ptr error_;             // thrown once `ready_` is drained
  bool stop_ = false;                    // close(): make nothing more
  bool finished_ = false;                // the last run was made, failed or stopped
  std::atomic<std::int64_t> taken_ = 0;  // read without the lock: a producer may ask (under it)
  std::mutex join_mu_;                   // one close() joins the thread
  std::thread thread_;
};

}  // namespace cuarrow::arrow::detail
