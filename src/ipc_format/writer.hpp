// Internal: what the IPC writers share.  stream_writer (stream.cpp) lays a
// stream or file out in one device allocation; file_writer (file_writer.cpp)
// writes it into a file as it goes.  The messages, their order and their
// bytes are the same: message_writer makes them, a message_sink says where
// they go.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "message_io.hpp"

namespace cuarrow::ipc::internal {

/// A writer's write_stats as it counts them: the times in nanoseconds,
/// which cuarrow::detail::timed (copy_sources.hpp) adds into.
struct write_counters {
  std::int64_t batches = 0, messages = 0, body_pieces = 0, early_messages = 0;
  std::atomic<std::int64_t> layout_ns{0}, compress_ns{0}, compress_copy_ns{0}, metadata_ns{0}, allocate_ns{0},
      queue_ns{0}, wait_ns{0}, file_write_ns{0};
  write_stats snapshot() const noexcept;
};

/// Where a writer's bytes go, one after another.
class message_sink {
 public:
  virtual ~message_sink() = default;
  /// Host bytes at the end.
  virtual void add_host(const std::vector<std::byte>& bytes) = 0;
  /// A message body at the end: each piece at its body offset, zeros
  /// between them (the padding); body.body_length bytes in all.  Taken
  /// over (its pieces' buffers move into the sink, no copy per piece).
  virtual void add_body(body_layout&& body) = 0;
  /// The end of a group of messages: a sink that defers bodies (the file
  /// sink gathers them into one staging-pipeline job) writes them now.
  virtual void flush() {}
  /// Whether flush() may run on another thread while the writer compresses
  /// the next group (nothing else touches the sink meanwhile): the file
  /// sink's writes of host bytes can.  Default: false.
  virtual bool concurrent_flush() const noexcept { return false; }
  /// flush(), with `reads` of device memory made by the same batched copy
  /// as the sink's last copies, and then one wait for them all: the bytes
  /// read (laid out as arrow::detail::read_to_host lays them).  nullopt,
  /// with nothing flushed and nothing read, where the sink cannot (it
  /// queues nothing as it goes: the caller flushes and reads apart).
  virtual std::optional<buffer> flush_and_read(std::span<const arrow::detail::host_read> reads) {
    (void)reads;
    return std::nullopt;
  }
  /// Messages of at most `bound` bytes follow, `loose` of them from sliced
  /// arrays (detail::body_bound).  A sink that can queue each message's
  /// copies as soon as it is appended makes room for them and says true:
  /// the writer then appends each batch as soon as its layout is known.
  /// Default: false (the sink waits for flush() or its end).
  virtual bool reserve(std::int64_t bound, std::int64_t loose) {
    (void)bound;
    (void)loose;
    return false;
  }
  /// Forgets what was appended from `length` on: a write that failed
  /// midway after reserve() said true leaves the sink as it was before it.
  virtual void truncate(std::int64_t length);

  /// One encapsulated message at the end (metadata, then the body if any,
  /// taken over); where it lies, for a file's footer.
  file_block append(const message_metadata& m, body_layout* body);
  /// The same for a message whose metadata is encapsulated already
  /// (write_encapsulated_metadata's bytes).
  file_block append_encoded(const std::vector<std::byte>& metadata, body_layout* body);
  /// Bytes so far.
  std::int64_t length() const noexcept { return length_; }
  /// What the writer and this sink counted (message_writer adds its own).
  write_counters counters;

 protected:
  /// After append() added a message (its metadata and body).
  virtual void appended() {}
  std::int64_t length_ = 0;
};

/// The messages of a stream or file: the magic (file), the schema, then per
/// batch the dictionaries it needs and the batch, then the end-of-stream
/// marker and the footer (file).  Bodies are laid out by layout_body and,
/// with a codec, compressed by compress_body.
class message_writer {
 public:
  /// Writes the magic and the schema message.  Throws invalid_argument for
  /// a schema IPC cannot carry, cuarrow::error when this build lacks the
  /// codec asked for.
  message_writer(encoded_schema schema, stream_writer::format f, stream_view s, arrow::key_value_metadata footer,
                 write_options options, message_sink& sink);

  const arrow::schema& schema() const noexcept;
  /// `who` names the writer in messages ("stream_writer", "file_writer").
  void write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata, const char* who);
  /// Every batch, in order, each with its dictionaries first.  The schemas
  /// (and the number of metadata: none, or one per batch) are checked
  /// before anything is written.  The batches are written in groups, the
  /// sink flushed after each: uncompressed, one group (every body's layout
  /// is known before any byte moves); with a codec, groups of at most
  /// compressed_group_bytes of uncompressed body (a larger batch alone),
  /// each compressed at once (compress_bodies), which bounds the host
  /// memory the copies and framed buffers take.
  /// `owned`, when given, holds the batches `batches` views: a write that
  /// keeps them (copied early, its offsets not checked yet) takes them
  /// over instead of copying them.
  void write(std::span<const arrow::record_batch> batches, std::span<const arrow::key_value_metadata> custom_metadata,
             const char* who, std::vector<arrow::record_batch>* owned = nullptr);
  /// The same for batches by address (a write that keeps them copies
  /// them, after its copies are queued).
  void write(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata, const char* who,
             std::vector<arrow::record_batch>* owned = nullptr);
  /// What write() checks before it writes anything: every schema equals
  /// the writer's, and `custom_metadata` is empty or one per batch
  /// (invalid_argument).
  void check(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
             const char* who) const;
  // 512 MiB: groups of about 1 GiB took blocks of the pinned pool's
  // 1.34 GiB class, more than its default 4 GiB limit holds in the two or
  // three at once a write needs, so the pool unpinned and pinned them
  // again at every group and the compressing threads wrote fresh pages
  // (bench/compressed_write_probe.py on an H100: LZ4 0.93 GB/s, 1.85 with
  // a 16 GiB limit; pyarrow's path 0.86-1.06).
  static constexpr std::int64_t compressed_group_bytes = std::int64_t{512} << 20;
  /// The end-of-stream marker and, for a file, the footer.
  void finish();

 private:
  body_layout layout(const arrow::record_batch& batch) const;
  void send_dictionaries(const arrow::record_batch& batch);
  /// The batches' messages (metadata and body) for a sink that queues
  /// each as it comes (message_sink::reserve), each appended as soon as
  /// its layout is known; false when the sink did not reserve.
  bool write_early(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
                   std::vector<arrow::record_batch>* owned);
  /// An early write whose assumed offsets are not checked yet: where the
  /// sink and the counts stood before it, and what it wrote (kept to write
  /// it again where an offset does not hold).
  struct unchecked_write {
    std::int64_t length = 0;       // the sink's
    std::size_t blocks = 0;        // batch_blocks_'s size
    std::int64_t counted[4] = {};  // batches, messages, body_pieces, early_messages
    // The batches' columns and row counts, for a rewrite under the
    // writer's schema (every batch has it: check()); not whole batches, so
    // that keeping them copies no schema (17 fields a batch cost the
    // host's close() more, destroying them, than the check they wait for).
    std::vector<std::vector<arrow::array_data>> columns;
    std::vector<std::int64_t> rows;
    std::vector<arrow::key_value_metadata> custom_metadata;
  };
  unchecked_write mark() const;
  /// Forgets every message appended since `w` was marked.
  void take_back(const unchecked_write& w);
  /// The batches' messages appended as their layouts come (layout_bodies_each,
  /// with `assumed` where offsets may be assumed), then the sink flushed.
  void append_early(detail::batch_refs batches, std::span<const arrow::key_value_metadata> custom_metadata,
                    std::vector<detail::assumed_offset>* assumed);
  /// Whether the unchecked writes' assumed offsets hold (one batched read,
  /// which waits for the copies queued before it): then the writes are
  /// checked; else they are to be written again (retaking_).
  bool assumptions_held();
  /// The same, with the sink's flush: the offsets read by the sink's last
  /// batched copy where it can (flush_and_read: one launch and one wait
  /// for the end of a stream and the check), else flushed and read apart.
  bool flushed_and_held();
  /// What a check found, recorded: `held` clears the unchecked writes,
  /// else marks them to be written again.
  bool checked(bool held);
  /// The unchecked writes checked (assumptions_held) or, where an offset
  /// does not hold, their messages taken back and written again from
  /// offsets read.
  void settle();
  /// The end-of-stream marker and a file's footer, appended.
  void add_end();

  /// The schema, its dictionaries' ids and its message's bytes.
  const schema_message& message_schema() const noexcept;
  encoded_schema schema_;
  stream_writer::format format_;
  stream_view s_;
  arrow::key_value_metadata footer_metadata_;
  write_options options_;
  message_sink& sink_;
  std::vector<file_block> dictionary_blocks_, batch_blocks_;
  std::int64_t schema_bytes_ = 0;                // the schema message's size (a file's footer repeats the schema)
  std::vector<unchecked_write> unchecked_;       // in order, all after any checked message
  std::vector<detail::assumed_offset> assumed_;  // the unchecked writes' assumed offsets
  bool retaking_ = false;                        // an offset did not hold: the unchecked writes are to be written again
  std::map<std::int64_t, std::shared_ptr<const arrow::array_data>> sent_;  // dictionary id -> last sent
};

}  // namespace cuarrow::ipc::internal
