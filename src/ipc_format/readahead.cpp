// Batches of an IPC file read ahead of the caller (include/cuarrow/ipc/file.hpp,
// batch_readahead): one thread of its own calls the reader's read_batches
// for groups of consecutive batches, at most `depth` groups ahead of the
// one the caller is taking batches from, and hands them over through a
// queue.  With depth 0 there is no thread: next() reads its batch itself.  The reads themselves are the reader's (the
// staging pipeline or cuFile); nothing here touches the file, the driver or device memory.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cuarrow/error.hpp"
#include "cuarrow/ipc/file.hpp"
#include "cuarrow/stream.hpp"
#include "message_io.hpp"

namespace cuarrow::ipc {

namespace {

// Consecutive runs of `indices` whose bodies (as the footer states them)
// stay within `bytes`, one batch at least; the first run is one batch.
// With depth 0, every batch is a run of its own (read by next()).
std::vector<std::vector<int>> groups_of(const device_file_reader& reader, const std::vector<int>& indices,
                                        readahead_options o) {
  const std::int64_t bytes = o.depth == 0 ? 1 : o.read_bytes;
  std::vector<std::vector<int>> groups;
  std::vector<int> group;
  std::int64_t in_group = 0;
  for (const int i : indices) {
    const std::int64_t body = reader.footer().record_batches[static_cast<std::size_t>(i)].body_length;
    if (!group.empty() && (groups.empty() || in_group + body > bytes)) {
      groups.push_back(std::move(group));
      group.clear();
      in_group = 0;
    }
    group.push_back(i);
    in_group += body;
  }
  if (!group.empty()) groups.push_back(std::move(group));
  return groups;
}

}  // namespace

struct batch_readahead::state {
  state(const device_file_reader& r, std::vector<std::vector<int>> g, readahead_options o)
      : reader(r), groups(std::move(g)), options(o), reads(r.get_context()) {}

  const device_file_reader& reader;
  const std::vector<std::vector<int>> groups;
  const readahead_options options;
  cuarrow::stream reads;  // the reads' own stream: the caller's work on its streams does not delay them

  std::mutex mu;  // guards everything below
  std::condition_variable changed;
  std::deque<std::vector<arrow::record_batch>> ready;  // groups read, not yet taken
  std::vector<arrow::record_batch> current;            // the group batches are taken from
  std::size_t current_next = 0;
  std::exception_ptr error;  // thrown once `ready` is drained
  bool stop = false;         // close(): read nothing more
  bool finished = false;     // the thread read its last group, failed or stopped
  std::int64_t taken = 0;
  std::size_t next_group = 0;  // depth 0: the group next() reads next
  std::mutex join_mu;          // one close() joins the thread
  std::thread thread;

  // The thread's loop: read a group once fewer than `depth` wait ahead.
  void run() noexcept {
    for (const std::vector<int>& group : groups) {
      {
        std::unique_lock lock(mu);
        changed.wait(lock, [&] { return stop || static_cast<int>(ready.size()) < options.depth; });
        if (stop) break;
      }
      std::vector<arrow::record_batch> got;
      std::exception_ptr failed;
      try {
        got = reader.read_batches(group, reads);
      } catch (...) {
        // Read one at a time: the batches before the failing one are
        // still delivered (a group may also fail where its batches alone
        // do not: device memory for all of them at once).
        got.clear();
        for (const int i : group) {
          try {
            got.push_back(reader.read_batch(i, reads));
          } catch (...) {
            failed = std::current_exception();
            break;
          }
        }
      }
      std::lock_guard lock(mu);
      if (!got.empty() && !stop) ready.push_back(std::move(got));
      if (failed) {
        error = failed;
        break;
      }
      changed.notify_all();
    }
    std::lock_guard lock(mu);
    finished = true;
    changed.notify_all();
  }
};

batch_readahead::batch_readahead(const device_file_reader& reader, std::vector<int> indices,
                                 readahead_options options) {
  if (options.depth < 0) {
    throw invalid_argument("readahead_options: depth (the reads ahead) must be at least 0, not " +
                           std::to_string(options.depth));
  }
  if (options.read_bytes < 1) {
    throw invalid_argument("readahead_options: read_bytes (the bytes of one read ahead) must be at least 1, not " +
                           std::to_string(options.read_bytes));
  }
  for (const int i : indices) detail::check_batch_index(i, reader.num_record_batches());
  state_ = std::make_unique<state>(reader, groups_of(reader, indices, options), options);
  if (options.depth > 0) state_->thread = std::thread([s = state_.get()] { s->run(); });
}

batch_readahead::~batch_readahead() { close(); }

std::optional<arrow::record_batch> batch_readahead::next() {
  state& st = *state_;
  std::unique_lock lock(st.mu);
  if (st.options.depth == 0) {
    // No thread: this call reads its batch (under the lock, one call at a time).
    if (st.error && !st.stop) std::rethrow_exception(st.error);
    if (st.stop || st.next_group == st.groups.size()) return std::nullopt;
    try {
      arrow::record_batch b = st.reader.read_batch(st.groups[st.next_group].front(), st.reads);
      ++st.next_group;
      ++st.taken;
      return b;
    } catch (...) {
      st.error = std::current_exception();
      throw;
    }
  }
  if (st.current_next == st.current.size()) {
    st.changed.wait(lock, [&] { return !st.ready.empty() || st.finished; });
    if (st.ready.empty()) {
      if (st.error && !st.stop) std::rethrow_exception(st.error);
      return std::nullopt;
    }
    st.current = std::move(st.ready.front());
    st.ready.pop_front();
    st.current_next = 0;
    st.changed.notify_all();  // room for one more group ahead
  }
  ++st.taken;
  return std::move(st.current[st.current_next++]);
}

void batch_readahead::close() noexcept {
  state& st = *state_;
  std::lock_guard join(st.join_mu);
  {
    std::lock_guard lock(st.mu);
    st.stop = true;
    st.changed.notify_all();
  }
  if (st.thread.joinable()) st.thread.join();
  std::deque<std::vector<arrow::record_batch>> dropped;
  std::vector<arrow::record_batch> rest;
  {
    std::lock_guard lock(st.mu);
    dropped.swap(st.ready);
    rest.swap(st.current);
    st.current_next = 0;
  }
  // Freed here, outside the lock.
}

std::int64_t batch_readahead::position() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->taken;
}

arrow::placement batch_readahead::placement() const noexcept { return state_->reader.placement(); }

}  // namespace cuarrow::ipc
