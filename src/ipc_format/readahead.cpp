// Batches of an IPC file read ahead of the caller (include/cuarrow/ipc/file.hpp,
// batch_readahead): the read-ahead queue (src/arrow/readahead.hpp) calls
// the reader's read_batches for groups of consecutive batches, at most
// `depth` groups ahead of the one the caller is taking batches from.  With
// depth 0 next() reads its batch itself.  The reads themselves are the
// reader's (the staging pipeline or cuFile); nothing here touches the
// file, the driver or device memory.
#include <exception>
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
  if (options.depth < 0) {
    throw invalid_argument("readahead_options: depth (the reads ahead) must be at least 0, not " +
                           std::to_string(options.depth));
  }
  if (options.read_bytes < 1) {
    throw invalid_argument("readahead_options: read_bytes (the bytes of one read ahead) must be at least 1, not " +
                           std::to_string(options.read_bytes));
  }
  for (const int i : indices) detail::check_batch_index(i, reader.num_record_batches());
  state_ = std::make_unique<state>(reader, groups_of(reader, indices, options));
  state* s = state_.get();
  start(std::make_unique<arrow::detail::readahead_queue>([s] { return s->produce(); }, options.depth));
}

batch_readahead::~batch_readahead() { close(); }

}  // namespace cuarrow::ipc
