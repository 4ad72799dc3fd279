// The read-ahead queue (readahead.hpp) and the host stream read ahead onto
// the device (c_data.hpp, device_readahead).
#include "readahead.hpp"

#include <span>
#include <string>
#include <utility>

#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {

namespace detail {

void check_readahead_options(const char* options, const char* run, int depth, std::int64_t read_bytes) {
  if (depth < 0) {
    throw invalid_argument(std::string(options) + ": depth (the " + run + "s ahead) must be at least 0, not " +
                           std::to_string(depth));
  }
  if (read_bytes < 1) {
    throw invalid_argument(std::string(options) + ": read_bytes (the bytes of one " + run +
                           " ahead) must be at least 1, not " + std::to_string(read_bytes));
  }
}

readahead_queue::readahead_queue(producer produce, int depth, run_limit most)
    : produce_(std::move(produce)), depth_(depth), most_(most) {
  if (depth_ > 0) thread_ = std::thread([this] { run(); });
}

readahead_run readahead_queue::produce_next() {
  const bool one = std::exchange(first_, false) || depth_ == 0;
  return produce_(taken_.load(), one ? run_limit{} : most_);
}

readahead_queue::~readahead_queue() { close(); }

void readahead_queue::run() noexcept {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < depth_; });
      if (stop_) break;
    }
    readahead_run r = produce_next();
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
      readahead_run r = produce_next();
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

void make_run(readahead_run& r, const std::size_t& n, const std::function<std::vector<record_batch>()>& all,
              const std::function<record_batch(std::size_t)>& one) noexcept {
  try {
    std::vector<record_batch> made = all();
    for (record_batch& b : made) r.batches.push_back(std::move(b));
    return;
  } catch (...) {
    if (n <= 1) {
      r.error = std::current_exception();
      return;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    try {
      r.batches.push_back(one(i));
    } catch (...) {
      r.error = std::current_exception();
      return;
    }
  }
}

std::int64_t readahead_queue::position() const noexcept { return taken_.load(); }

}  // namespace detail

// ---- device_readahead ------------------------------------------------------------------

namespace {

// The bytes of a batch's buffers, whole (pyarrow's get_total_buffer_size):
// what grouping batches into transfers counts.
std::int64_t total_buffer_size(const array_data& a) {
  std::int64_t n = 0;
  for (const buffer& b : a.buffers) n += b.size();
  for (const array_data& c : a.children) n += total_buffer_size(c);
  if (a.dictionary) n += total_buffer_size(*a.dictionary);
  return n;
}

std::int64_t total_buffer_size(const record_batch& b) {
  std::int64_t n = 0;
  for (const array_data& c : b.columns) n += total_buffer_size(c);
  return n;
}

}  // namespace

struct device_readahead::state {
  state(ArrowArrayStream* in, context c, const device_readahead_options& o)
      : reader(in, import_options{o.validation}), c_schema(reader.take_c_schema()), ctx(std::move(c)), moves(ctx) {}

  array_stream_reader reader;  // read by one thread at a time (a C stream is not thread-safe)
  owned_schema c_schema;       // the producer's schema, taken before any read
  context ctx;
  cuarrow::stream moves;                         // the copies' own stream: the caller's work does not delay them
  static constexpr std::size_t max_group = 256;  // batches in one transfer (a stream of empty ones ends too)
  // Called by one thread at a time (the queue's):
  std::optional<record_batch> held;  // read, over the last group's bytes: the next group's first

  // The stream's next batches, within `limit`, on the device and complete
  // (the import validated them; the copy trusts that).  A batch that would
  // pass the limit is held for the next group.
  detail::readahead_run produce(detail::run_limit limit) noexcept {
    detail::readahead_run r;
    std::vector<record_batch> group;
    try {
      std::int64_t bytes = 0;
      while (bytes < limit.bytes && group.size() < limit.batches) {
        std::optional<record_batch> b = held ? std::exchange(held, std::nullopt) : reader.next();
        if (!b) {
          r.last = true;
          break;
        }
        const std::int64_t n = total_buffer_size(*b);
        if (!group.empty() && bytes + n > limit.bytes) {
          held = std::move(b);
          break;
        }
        bytes += n;
        group.push_back(std::move(*b));
      }
    } catch (...) {
      r.error = std::current_exception();  // after the batches read before it
    }
    if (group.empty()) return r;
    std::exception_ptr read_error = std::exchange(r.error, nullptr);
    const array_transfer_options trusted{validation_level::none};
    detail::make_run(
        r, group.size(), [&] { return to_device(std::span<const record_batch>(group), ctx, moves, trusted); },
        [&](std::size_t i) { return to_device(group[i], ctx, moves, trusted); });
    if (!r.error) r.error = read_error;  // a failed copy comes first: its batch came before
    return r;
  }
};

device_readahead::device_readahead(ArrowArrayStream* in, context ctx, device_readahead_options options)
    : readahead(arrow::placement::of(device_type::cuda, ctx.device_number())),
      state_(std::make_unique<state>(in, std::move(ctx), options)) {  // the reader takes `in` in every case
  detail::check_readahead_options("device_readahead_options", "transfer", options.depth, options.read_bytes);
  state* s = state_.get();
  start(std::make_unique<detail::readahead_queue>([s](std::int64_t, detail::run_limit l) { return s->produce(l); },
                                                  options.depth,
                                                  detail::run_limit{options.read_bytes, state::max_group}));
}

device_readahead::~device_readahead() { close(); }

const arrow::schema& device_readahead::schema() const noexcept { return state_->reader.schema(); }

owned_schema device_readahead::take_c_schema() { return std::move(state_->c_schema); }

// ---- readahead -------------------------------------------------------------------------

readahead::readahead(arrow::placement where) noexcept : where_(where) {}

readahead::~readahead() = default;

void readahead::start(std::unique_ptr<detail::readahead_queue> queue) noexcept { queue_ = std::move(queue); }

std::optional<record_batch> readahead::next() { return queue_->next(); }

void readahead::close() noexcept {
  if (queue_) queue_->close();
  closed();
}

std::int64_t readahead::position() const noexcept { return queue_->position(); }

arrow::placement readahead::placement() const noexcept { return where_; }

}  // namespace cuarrow::arrow
