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

constexpr std::size_t kMaxRun = 4096;  // batches in one read, at most

}  // namespace

struct batch_readahead::state {
  state(const device_file_reader& r, std::vector<int> i) : reader(r), indices(std::move(i)), reads(r.get_context()) {}

  const device_file_reader& reader;
  const std::vector<int> indices;
  cuarrow::stream reads;  // the reads' own stream: the caller's work on its streams does not delay them
  std::size_t next = 0;   // the first index not read; used by one thread at a time (the queue's)

  // The next indices whose bodies (as the footer states them) stay within
  // `limit`, in one read (one by one when that fails: make_run).
  arrow::detail::readahead_run produce(arrow::detail::run_limit limit) noexcept {
    arrow::detail::readahead_run r;
    std::vector<int> group;
    for (std::int64_t bytes = 0; next < indices.size() && group.size() < limit.batches; ++next) {
      const int i = indices[next];
      bytes += reader.footer().record_batches[static_cast<std::size_t>(i)].body_length;
      if (!group.empty() && bytes > limit.bytes) break;
      group.push_back(i);
    }
    r.last = next == indices.size();
    if (group.empty()) return r;
    arrow::detail::make_run(
        r, group.size(), [&] { return reader.read_batches(group, reads); },
        [&](std::size_t i) { return reader.read_batch(group[i], reads); });
    return r;
  }
};

batch_readahead::batch_readahead(const device_file_reader& reader, std::vector<int> indices, readahead_options options)
    : readahead(reader.placement()) {
  arrow::detail::check_readahead_options("readahead_options", "read", options.depth, options.read_bytes);
  for (const int i : indices) detail::check_batch_index(i, reader.num_record_batches());
  state_ = std::make_unique<state>(reader, std::move(indices));
  state* s = state_.get();
  start(std::make_unique<arrow::detail::readahead_queue>(
      [s](std::int64_t, arrow::detail::run_limit l) { return s->produce(l); }, options.depth,
      arrow::detail::run_limit{options.read_bytes, kMaxRun}));
}

batch_readahead::~batch_readahead() { close(); }

// ---- stream_readahead ------------------------------------------------------------------

struct stream_readahead::state {
  explicit state(device_stream_reader& r) : reader(r), reads(r.get_context()) {}

  device_stream_reader& reader;
  cuarrow::stream reads;  // the reads' own stream
  // Used by one thread at a time (the queue's, then close()'s):
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

  // The next run within `limit`, in one read (one by one when that fails:
  // make_run).  `handed_out`: the batches the caller has taken so far.
  arrow::detail::readahead_run produce(std::size_t handed_out, arrow::detail::run_limit limit) noexcept {
    arrow::detail::readahead_run r;
    std::size_t planned = 0;
    arrow::detail::make_run(
        r, planned,
        [&] {
          device_stream_reader::run got = reader.read_run(limit.bytes, limit.batches, reads, &planned);
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
  arrow::detail::check_readahead_options("readahead_options", "read", options.depth, options.read_bytes);
  state_ = std::make_unique<state>(reader);
  state* s = state_.get();
  start(std::make_unique<arrow::detail::readahead_queue>(
      [s](std::int64_t taken, arrow::detail::run_limit l) { return s->produce(static_cast<std::size_t>(taken), l); },
      options.depth, arrow::detail::run_limit{options.read_bytes, kMaxRun}));
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
