// Batches of an IPC file read ahead of the caller (include/cuarrow/ipc/file.hpp,
// batch_readahead): the read-ahead queue (src/arrow/readahead.hpp) calls
// the reader's read_batches for groups of consecutive batches, at most
// `depth` groups ahead of the one the caller is taking batches from.  With
// depth 0 next() reads its batch itself.  The reads themselves are the
// reader's (the staging pipeline or cuFile); nothing here touches the
// file, the driver or device memory.
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrow/readahead.hpp"

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

void check(const readahead_options& options) {
  if (options.depth < 0) {
    throw invalid_argument("readahead_options: depth (the reads ahead) must be at least 0, not " +
                           std::to_string(options.depth));
  }
  if (options.read_bytes < 1) {
    throw invalid_argument("readahead_options: read_bytes (the bytes of one read ahead) must be at least 1, not " +
                           std::to_string(options.read_bytes));
  }
}

}  // namespace

struct batch_readahead::state {
  state(const device_file_reader& r, std::vector<std::vector<int>> g)
      : reader(r), groups(std::move(g)), reads(r.get_context()) {}

  const device_file_reader& reader;
  const std::vector<std::vector<int>> groups;
  cuarrow::stream reads;       // the reads' own stream: the caller's work on its streams does not delay them
  std::size_t next_group = 0;  // called by one thread at a time (the queue's)

  // The next group, in one read (one by one when that fails: make_run).
  arrow::detail::readahead_run produce() noexcept {
    arrow::detail::readahead_run r;
    if (next_group == groups.size()) {
      r.last = true;
      return r;
    }
    const std::vector<int>& group = groups[next_group++];
    r.last = next_group == groups.size();
    arrow::detail::make_run(
        r, group.size(), [&] { return reader.read_batches(group, reads); },
        [&](std::size_t i) { return reader.read_batch(group[i], reads); });
    return r;
  }
};

batch_readahead::batch_readahead(const device_file_reader& reader, std::vector<int> indices, readahead_options options)
    : readahead(reader.placement()) {
  check(options);
  for (const int i : indices) detail::check_batch_index(i, reader.num_record_batches());
  state_ = std::make_unique<state>(reader, groups_of(reader, indices, options));
  state* s = state_.get();
  start(std::make_unique<arrow::detail::readahead_queue>([s](std::int64_t) { return s->produce(); }, options.depth));
}

batch_readahead::~batch_readahead() { close(); }

// ---- stream_readahead ------------------------------------------------------------------

struct stream_readahead::state {
  state(device_stream_reader& r, readahead_options o)
      : reader(r), reads(r.get_context()), run_bytes(o.read_bytes), one_each(o.depth == 0) {}

  static constexpr std::size_t kMaxRun = 4096;  // batches in one read, at most

  device_stream_reader& reader;
  cuarrow::stream reads;  // the reads' own stream
  const std::int64_t run_bytes;
  const bool one_each;  // depth 0: next() reads one batch
  // Used by one thread at a time (the queue's, then close()'s):
  bool first = true;
  // Each batch made and not yet handed out, in order, from batch number
  // `dropped` on: its message's offset and the dictionaries it was read
  // with (shared while they do not change; the ones of batches handed out
  // are let go, so a stream that replaces its dictionaries does not keep
  // them all).
  std::deque<std::int64_t> offsets;
  std::deque<std::shared_ptr<const dictionary_memo>> memos;
  std::size_t dropped = 0;
  std::shared_ptr<const dictionary_memo> memo;
  std::uint64_t memo_version = 0;
  std::mutex closing;  // close(): the reader is put back once
  bool put_back = false;

  void made(const std::vector<std::int64_t>& at, std::size_t handed_out) {
    for (; dropped < handed_out && !offsets.empty(); ++dropped) {
      offsets.pop_front();
      memos.pop_front();
    }
    if (!memo || memo_version != reader.dictionaries_version()) {
      memo = std::make_shared<const dictionary_memo>(reader.dictionaries());
      memo_version = reader.dictionaries_version();
    }
    for (const std::int64_t a : at) {
      offsets.push_back(a);
      memos.push_back(memo);
    }
  }

  // The next run, in one read (one by one when that fails: make_run).
  // `handed_out`: the batches the caller has taken so far.
  arrow::detail::readahead_run produce(std::size_t handed_out) noexcept {
    arrow::detail::readahead_run r;
    const bool one = std::exchange(first, false) || one_each;
    std::size_t planned = 0;
    arrow::detail::make_run(
        r, planned,
        [&] {
          device_stream_reader::run got = reader.read_run(one ? 1 : run_bytes, one ? 1 : kMaxRun, reads, &planned);
          made(got.offsets, handed_out);
          return std::move(got.batches);
        },
        [&](std::size_t) {
          std::size_t p = 0;
          device_stream_reader::run got = reader.read_run(1, 1, reads, &p);
          if (got.batches.empty()) {
            throw invalid_message(reader.path(), "the stream ended where a batch's metadata was read before");
          }
          made(got.offsets, handed_out);
          return std::move(got.batches.front());
        });
    if (r.batches.empty() && !r.error) r.last = true;
    return r;
  }
};

stream_readahead::stream_readahead(device_stream_reader& reader, readahead_options options)
    : readahead(reader.placement()) {
  check(options);
  state_ = std::make_unique<state>(reader, options);
  state* s = state_.get();
  start(std::make_unique<arrow::detail::readahead_queue>(
      [s](std::int64_t taken) { return s->produce(static_cast<std::size_t>(taken)); }, options.depth));
}

stream_readahead::~stream_readahead() { close(); }

void stream_readahead::closed() noexcept {
  if (!state_) return;
  state& st = *state_;
  std::lock_guard lock(st.closing);
  if (st.put_back) return;
  st.put_back = true;
  const auto taken = static_cast<std::size_t>(position());
  if (taken >= st.dropped && taken - st.dropped < st.offsets.size()) {
    st.reader.rewind(st.offsets[taken - st.dropped], *st.memos[taken - st.dropped]);
  }
}

}  // namespace cuarrow::ipc
