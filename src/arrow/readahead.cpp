// The read-ahead queue (readahead.hpp) and the host stream read ahead onto
// the device (c_data.hpp, device_readahead).
#include "readahead.hpp"

#include <string>
#include <utility>

#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {

namespace detail {

readahead_queue::readahead_queue(std::function<readahead_run()> produce, int depth)
    : produce_(std::move(produce)), depth_(depth) {
  if (depth_ > 0) thread_ = std::thread([this] { run(); });
}

readahead_queue::~readahead_queue() { close(); }

void readahead_queue::run() noexcept {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < depth_; });
      if (stop_) break;
    }
    readahead_run r = produce_();
    std::lock_guard lock(mu_);  // released before `r` (declared first) is destroyed
    if (!r.batches.empty() && !stop_) ready_.push_back(std::move(r.batches));
    changed_.notify_all();
    if (r.error) {
      error_ = r.error;
      break;
    }
    if (r.last) break;
  }
  std::lock_guard lock(mu_);
  finished_ = true;
  changed_.notify_all();
}

bool readahead_queue::refill(std::unique_lock<std::mutex>& lock) {
  if (depth_ == 0) {
    // No thread: make the next run here, under the lock (one caller at a time).
    while (ready_.empty() && !finished_ && !stop_) {
      readahead_run r = produce_();
      if (!r.batches.empty()) ready_.push_back(std::move(r.batches));
      if (r.error) error_ = r.error;
      if (r.error || r.last) finished_ = true;
    }
  } else {
    changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
  }
  if (ready_.empty()) return false;
  current_ = std::move(ready_.front());
  ready_.pop_front();
  current_next_ = 0;
  changed_.notify_all();  // room for one more run ahead
  return true;
}

std::optional<record_batch> readahead_queue::next() {
  std::unique_lock lock(mu_);
  if (current_next_ == current_.size() && !refill(lock)) {
    if (error_ && !stop_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  ++taken_;
  return std::move(current_[current_next_++]);
}

void readahead_queue::close() noexcept {
  std::lock_guard join(join_mu_);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::deque<std::vector<record_batch>> dropped;
  std::vector<record_batch> rest;
  {
    std::lock_guard lock(mu_);
    dropped.swap(ready_);
    rest.swap(current_);
    current_next_ = 0;
  }
  // Freed here, outside the lock.
}

std::int64_t readahead_queue::position() const noexcept {
  std::lock_guard lock(mu_);
  return taken_;
}

}  // namespace detail

// ---- device_readahead ------------------------------------------------------------------

struct device_readahead::state {
  state(ArrowArrayStream* in, context c, const device_readahead_options& o)
      : reader(in, import_options{o.validation}), c_schema(reader.take_c_schema()), ctx(std::move(c)), moves(ctx) {}

  array_stream_reader reader;  // read by one thread at a time (a C stream is not thread-safe)
  owned_schema c_schema;       // the producer's schema, taken before any read
  context ctx;
  cuarrow::stream moves;  // the copies' own stream: the caller's work does not delay them
  std::optional<detail::readahead_queue> queue;

  // The stream's next batch, on the device and complete (the import
  // validated it; the copy trusts that).
  detail::readahead_run produce() noexcept {
    detail::readahead_run r;
    try {
      std::optional<record_batch> b = reader.next();
      if (!b) {
        r.last = true;
        return r;
      }
      r.batches.push_back(to_device(*b, ctx, moves, array_transfer_options{validation_level::none}));
    } catch (...) {
      r.error = std::current_exception();
    }
    return r;
  }
};

device_readahead::device_readahead(ArrowArrayStream* in, context ctx, device_readahead_options options)
    : state_(std::make_unique<state>(in, std::move(ctx), options)) {  // the reader takes `in` in every case
  if (options.depth < 0) {
    throw invalid_argument("device_readahead_options: depth (the batches moved ahead) must be at least 0, not " +
                           std::to_string(options.depth));
  }
  state* s = state_.get();
  state_->queue.emplace([s] { return s->produce(); }, options.depth);
}

device_readahead::~device_readahead() { close(); }

const arrow::schema& device_readahead::schema() const noexcept { return state_->reader.schema(); }

owned_schema device_readahead::take_c_schema() { return std::move(state_->c_schema); }

std::optional<record_batch> device_readahead::next() { return state_->queue->next(); }

void device_readahead::close() noexcept { state_->queue->close(); }

std::int64_t device_readahead::position() const noexcept { return state_->queue->position(); }

arrow::placement device_readahead::placement() const noexcept {
  return arrow::placement::of(device_type::cuda, state_->ctx.device_number());
}

}  // namespace cuarrow::arrow
