// Record batches made ahead of their caller on a thread of their own: what
// the read-aheads share.  ipc::batch_readahead (cuarrow/ipc/file.hpp) reads
// a file's batches ahead; arrow::device_readahead (cuarrow/arrow/c_data.hpp)
// moves a host stream's batches to the device ahead.  Code that only takes
// batches can hold either as an arrow::readahead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/export.hpp"

namespace cuarrow::arrow {

namespace detail {
class readahead_queue;  // src/arrow/readahead.hpp
}  // namespace detail

/// Record batches made on a thread of its own ahead of the caller, so that
/// making the next ones overlaps what the caller does with the ones before
/// (a training step, a kernel).  Each batch is complete when handed out:
/// it needs no wait on any stream.  next() and close() may be called from
/// any thread (one at a time is served).
class CUARROW_EXPORT readahead {
 public:
  /// A derived class calls close() in its destructor, before the state its
  /// producer uses goes.
  virtual ~readahead();
  readahead(const readahead&) = delete;
  readahead& operator=(const readahead&) = delete;

  /// The next batch, or nullopt after the last one (or after close()).
  /// Blocks while it is made.  When making a batch fails, every batch
  /// before is still returned; then that error is thrown, by this call and
  /// every later one, and nothing more is made.
  std::optional<record_batch> next();
  /// Stops making batches: waits for the work in progress and frees the
  /// batches made and not yet taken.  next() then returns nullopt.  Never
  /// throws; idempotent.
  void close() noexcept;
  /// Batches returned by next() so far.
  std::int64_t position() const noexcept;
  /// Where the batches live.
  arrow::placement placement() const noexcept;

 protected:
  explicit readahead(arrow::placement where) noexcept;
  /// Starts making batches: `queue` calls the derived class's producer.
  void start(std::unique_ptr<detail::readahead_queue> queue) noexcept;
  /// Called by every close() once the work in progress has ended.
  virtual void closed() noexcept {}

 private:
  std::unique_ptr<detail::readahead_queue> queue_;
  arrow::placement where_;
};

}  // namespace cuarrow::arrow
