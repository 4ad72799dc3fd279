// Arrow IPC streams and files written into a file at a path
// (include/cuarrow/ipc/file_writer.hpp): stream_writer's messages
// (writer.hpp): metadata written as it comes, the bodies of all the batches
// of one write() call in one staging-pipeline job.
#include "cuarrow/ipc/file_writer.hpp"

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "copy_sinks.hpp"
#include "copy_sources.hpp"
#include "cuarrow/error.hpp"
#include "ipc_format/writer.hpp"

namespace cuarrow::ipc {
namespace {

// Messages written into the file at their offsets: metadata from the host
// at once (pwrite by the calling thread), bodies gathered until the
// writer's group ends (flush), then written by ONE copy-engine call: one
// staging-pipeline job for all the device pieces of every body of the
// group, whose workers write their chunks from the pinned slots in
// parallel, each at its offset.  The padding between a body's buffers is
// never written: the file was created empty, and bytes below its end that
// were never written read as zeros.
class file_sink final : public internal::message_sink {
 public:
  file_sink(cuarrow::detail::output_file& file, stream_view s) : file_(file), s_(s) {}

  void add_host(const std::vector<std::byte>& bytes) override {
    if (bytes.empty()) return;
    const cuarrow::detail::timed t(&counters.file_write_ns);
    file_.write_at(bytes.data(), bytes.size(), static_cast<std::uint64_t>(length_));
    length_ += static_cast<std::int64_t>(bytes.size());
  }

  void add_body(body_layout&& body) override {
    for (body_piece& p : body.pieces) {
      if (p.size > 0) pending_.push_back({std::move(p.source), p.source_offset, p.size, length_ + p.body_offset});
    }
    length_ += body.body_length;
  }

  void flush() override {
    // Taken first: after a failure the pieces (and the buffers they keep
    // alive) are dropped with the writer's file.
    const std::vector<cuarrow::detail::file_piece> pieces = std::move(pending_);
    pending_.clear();
    if (pieces.empty()) return;
    const cuarrow::detail::timed t(&counters.file_write_ns);
    cuarrow::detail::write_to_file(file_, pieces, s_);
  }
  bool concurrent_flush() const noexcept override { return true; }

 private:
  cuarrow::detail::output_file& file_;
  stream_view s_;
  std::vector<cuarrow::detail::file_piece> pending_;
};

}  // namespace

struct file_writer::state {
  state(std::string path, arrow::schema schema, format f, write_options options, stream_view s,
        arrow::key_value_metadata footer)
      : file(std::move(path)), sink(file, s) {
    try {
      writer = std::make_unique<internal::message_writer>(encoded_schema(std::move(schema)), f, s, std::move(footer),
                                                          std::move(options), sink);
    } catch (...) {
      file.discard();
      throw;
    }
  }

  cuarrow::detail::output_file file;
  file_sink sink;
  std::unique_ptr<internal::message_writer> writer;
  bool closed = false;
  bool failed = false;

  void check_open() const {
    if (failed) {
      throw invalid_argument("file_writer: an earlier write to \"" + file.path() +
                             "\" failed and the file was removed; start a new writer");
    }
    if (closed) throw invalid_argument("file_writer: \"" + file.path() + "\" is already closed");
  }
  // After a failure midway the file holds part of a message: it is removed
  // and the writer ends.
  void fail() noexcept {
    failed = true;
    file.discard();
  }
};

file_writer::file_writer(std::string path, arrow::schema schema, format f, stream_view s,
                         arrow::key_value_metadata footer_metadata, write_options options)
    : state_(std::make_unique<state>(std::move(path), std::move(schema), f, std::move(options), s,
                                     std::move(footer_metadata))) {}

file_writer::~file_writer() {
  if (!state_->closed && !state_->failed) state_->file.discard();
}

void file_writer::write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata) {
  write(std::span<const arrow::record_batch>(&batch, 1),
        std::span<const arrow::key_value_metadata>(&custom_metadata, 1));
}

void file_writer::write(std::span<const arrow::record_batch> batches,
                        std::span<const arrow::key_value_metadata> custom_metadata) {
  write(detail::refs_of(batches), custom_metadata);
}

void file_writer::write(std::span<const arrow::record_batch* const> batches,
                        std::span<const arrow::key_value_metadata> custom_metadata) {
  state& st = *state_;
  st.check_open();
  // Checked before anything is written: a mistake here leaves the writer
  // usable.
  st.writer->check(batches, custom_metadata, "file_writer");
  try {
    st.writer->write(batches, custom_metadata, "file_writer");
  } catch (...) {
    st.fail();
    throw;
  }
}

void file_writer::close() {
  state& st = *state_;
  if (st.closed) return;
  st.check_open();
  try {
    st.writer->finish();
    st.sink.flush();
    st.file.resize(static_cast<std::uint64_t>(st.sink.length()));
    st.file.close();
  } catch (...) {
    st.fail();
    throw;
  }
  st.closed = true;
}

const std::string& file_writer::path() const noexcept { return state_->file.path(); }

std::int64_t file_writer::bytes_written() const noexcept { return state_->sink.length(); }

write_stats file_writer::stats() const noexcept { return state_->sink.counters.snapshot(); }

}  // namespace cuarrow::ipc
