// Arrow IPC streams and files held in memory (device or host): messages read
// with their bodies left where they are, record batches as zero-copy slices
// of those bodies, and writers that assemble a stream or file in device
// memory with batched copies.
//
// Reading a message costs one small copy to the host (the prefix and
// FlatBuffer metadata; a second only when the metadata is longer than
// 4 KiB); its body is a slice of the source.  Everything read is untrusted:
// metadata and bodies are checked (metadata.hpp, record_batch.hpp) before
// any array is built, each failure an invalid_message naming the message
// and what is wrong.
//
// Streams are what pyarrow.ipc.new_stream writes (schema, dictionary
// batches, record batches, end-of-stream marker); files what
// pyarrow.ipc.new_file / feather.write_feather (uncompressed) write.  The
// writers produce the bytes pyarrow writes for the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::ipc {

/// One encapsulated message: its metadata (read on the host), the
/// FlatBuffer it was read from, and its body, a zero-copy slice of the
/// memory it was read from (device or host).
struct message {
  message_metadata metadata;
  std::vector<std::byte> flatbuffer;
  buffer body;
  /// Where the message started in its source, and its size there (prefix,
  /// metadata with padding, body).
  std::int64_t offset = 0;
  std::int64_t size = 0;

  message_kind kind() const noexcept { return metadata.kind(); }
};

/// Reads the message at `offset` of `source`.  Returns nullopt at the
/// end-of-stream marker or at the end of `source`.  Throws invalid_message
/// (truncated prefix, metadata or body; malformed metadata; an offset
/// outside the source); cuda_error when the copy fails.  The copy runs on
/// `s`, which orders the source's producer.
CUARROW_EXPORT std::optional<message> read_message(const buffer& source, std::int64_t offset = 0, stream_view s = {});

/// The message as one encapsulated message in host memory (prefix,
/// metadata, padding, then the body copied to the host), as pyarrow's
/// Message.serialize() gives it.
CUARROW_EXPORT std::vector<std::byte> serialize_to_host(const message& m, stream_view s = {});

/// The record batch of a record batch message under `schema`, read as
/// read_record_batch reads a header and body, at the message's metadata
/// version (pyarrow.ipc.read_record_batch(message, schema, memo)).  Its
/// dictionary fields are those `dictionaries` was made for, filled with the
/// dictionaries it has read so far; without a memo the schema has none, so a
/// dictionary field is an invalid_message.  Throws invalid_argument ("IPC
/// read_record_batch: not a record batch message") for a message of another
/// kind, and as read_record_batch.
CUARROW_EXPORT arrow::record_batch read_record_batch(const message& m, arrow::schema schema,
                                                     const dictionary_memo* dictionaries = nullptr);

/// dictionary_memo::read of a dictionary batch message, at its metadata
/// version: sets the dictionary, or for a delta appends to it.  Throws
/// invalid_argument ("IPC dictionary memo: not a dictionary batch message")
/// for a message of another kind, and as dictionary_memo::read.
CUARROW_EXPORT void read_dictionary(dictionary_memo& dictionaries, const message& m);

/// A record batch with the custom metadata of its message (pyarrow's
/// RecordBatchWithMetadata).
struct batch_with_metadata {
  arrow::record_batch batch;
  arrow::key_value_metadata custom_metadata;
};

/// Reads the record batches of an IPC stream held in memory, in order.
class CUARROW_EXPORT stream_reader {
 public:
  /// Reads the schema message.  Throws invalid_message when the stream does
  /// not start with one.
  explicit stream_reader(buffer source, read_options options = {});

  const schema_message& schema() const noexcept { return schema_; }
  /// Where the batches read live: the source's memory (their buffers are
  /// slices of it).  A batch without any buffer is declared there.
  arrow::placement placement() const noexcept { return arrow::placement::of(source_); }
  /// The next record batch (dictionary batches before it are applied), or
  /// nullopt at the end of the stream.  Throws invalid_message.
  std::optional<arrow::record_batch> read_next();
  /// The same, with the message's custom metadata.
  std::optional<batch_with_metadata> read_next_with_custom_metadata();
  /// Every remaining batch.
  std::vector<arrow::record_batch> read_all();
  /// The dictionaries read so far.
  const dictionary_memo& dictionaries() const noexcept { return memo_; }
  /// Bytes of the source read so far.
  std::int64_t position() const noexcept { return position_; }

 private:
  buffer source_;
  read_options options_;
  schema_message schema_;
  dictionary_memo memo_;
  std::int64_t position_ = 0;
  bool done_ = false;
};

/// Reads an IPC file held in memory: footer first, then any batch by index.
class CUARROW_EXPORT file_reader {
 public:
  /// Reads the magic, the footer and the dictionaries.  Throws
  /// invalid_message.
  explicit file_reader(buffer source, read_options options = {});

  const schema_message& schema() const noexcept { return footer_.schema; }
  /// Where the batches read live, as stream_reader::placement.
  arrow::placement placement() const noexcept { return arrow::placement::of(source_); }
  const file_footer& footer() const noexcept { return footer_; }
  int num_record_batches() const noexcept { return static_cast<int>(footer_.record_batches.size()); }
  /// Record batch `i` (0 <= i < num_record_batches(), else out_of_range:
  /// "Batch number i out of range", pyarrow's words).
  arrow::record_batch read_batch(int i) const;
  /// The same, with the message's custom metadata.
  batch_with_metadata read_batch_with_custom_metadata(int i) const;
  std::vector<arrow::record_batch> read_all() const;

 private:
  message read_block(const file_block& b, const char* what, std::size_t index) const;

  buffer source_;
  read_options options_;
  file_footer footer_;
  dictionary_memo memo_;
};

/// How a writer encodes record batch and dictionary bodies (pyarrow's
/// IpcWriteOptions).
struct write_options {
  /// Compress every body buffer with this codec (BodyCompression, method
  /// BUFFER: IpcWriteOptions(compression="lz4" / "zstd")); unset:
  /// uncompressed, the bytes pyarrow writes by default.
  std::optional<compression_codec> compression;
  /// The codec's level and min_space_savings (codec.hpp); the defaults are
  /// Arrow C++'s.
  compress_options compress;
  /// Host threads that compress a batch's buffers (0: as many as the
  /// machine has, at most 16).
  int compress_threads = 0;
  /// With a codec, the batches of one write() call are copied to the host
  /// and compressed in groups of at most this many bytes of uncompressed
  /// body (a larger batch alone); into a file, a group is written while the
  /// next one compresses.  Bounds the host memory a compressed write holds
  /// (about three groups' worth).  0: 512 MiB.  The bytes written do not
  /// depend on it.
  std::int64_t compress_group_bytes = 0;
};

/// Where a writer's time went, on the calling thread (stream_writer::stats,
/// file_writer::stats), for benchmarks and logs.  Always collected: a few
/// clock reads per write() and per finish, none per buffer.
struct write_stats {
  std::int64_t batches = 0;      ///< record batches written (dictionary batches not included)
  std::int64_t messages = 0;     ///< messages: the schema, dictionary batches, record batches
  std::int64_t body_pieces = 0;  ///< byte ranges of buffers that the bodies take (none for an empty buffer)
  /// stream_writer: messages whose copies were queued when they were
  /// written, while the next batches were laid out, not at finish() (see
  /// stream_writer::write).
  std::int64_t early_messages = 0;
  /// Bodies laid out: Arrow's rules for sliced data on the host, with the
  /// reads of device memory they need (offsets, bitmaps, run ends).
  double layout_seconds = 0;
  double compress_seconds = 0;  ///< bodies copied to the host and compressed (write_options::compression)
  /// Of compress_seconds, before compressing: the host block allocated and
  /// the bodies' device buffers copied into it.
  double compress_copy_seconds = 0;
  double metadata_seconds = 0;  ///< message metadata encoded (FlatBuffers)
  /// stream_writer: the output's device allocation and the metadata's
  /// (in write() where it copies early, else in finish()).
  double allocate_seconds = 0;
  double queue_seconds = 0;  ///< stream_writer: the copies planned and queued
  /// stream_writer: waiting for the copies to end (finish(), which also
  /// reads the offsets the writes that copied early assumed; a write()
  /// after such a write reads them first).
  double wait_seconds = 0;
  /// file_writer: bytes into the file (metadata by pwrite, bodies through
  /// the staging pipeline, their device-to-host DMAs included).
  double file_write_seconds = 0;
};

namespace internal {
class message_writer;
}

/// A schema with its IPC schema message encoded once: writers made from it
/// (stream_writer) copy the message's bytes instead of converting and
/// encoding the schema again, which a writer made per write of one schema
/// pays before its first copy (cuarrow.ipc keeps one per pyarrow schema
/// object).  Immutable; copies share it.
class CUARROW_EXPORT encoded_schema {
 public:
  /// Throws invalid_argument for a schema IPC cannot carry (as the
  /// writers do).
  explicit encoded_schema(arrow::schema schema);
  const arrow::schema& schema() const noexcept;

 private:
  friend class internal::message_writer;
  struct state;
  std::shared_ptr<const state> state_;
};

/// Writes record batches as an IPC stream or file into one device
/// allocation.  Dictionary-encoded columns send their dictionaries before
/// the first batch that uses them; in a stream, a batch with another
/// dictionary sends a replacement; a file refuses it (as pyarrow does).
class CUARROW_EXPORT stream_writer {
 public:
  enum class format { stream, file };
  /// Writes the schema message (into host memory; copied with the rest).
  /// `footer_metadata`: a file's
  /// footer custom metadata (pyarrow's new_file(metadata=...)).  With
  /// options.compression, each batch's buffers are copied to the host and
  /// compressed there when it is written (the writer then keeps the
  /// compressed bytes, not the batch).  `resource`: where finish()
  /// allocates the output (null: the context's resource; a
  /// plain_device_resource gives memory CUDA IPC can export).  `s` orders
  /// the batches' producers and carries the copies: it must stay valid
  /// until finish() returns or the writer is destroyed (a writer dropped
  /// before finish() queues on it the release of what its copies use, as
  /// RMM's device_buffer frees on its stream).  Throws
  /// invalid_argument for a schema IPC cannot carry, cuarrow::error when
  /// this build lacks the codec.
  stream_writer(arrow::schema schema, context ctx, format f = format::stream, stream_view s = {},
                arrow::key_value_metadata footer_metadata = {}, write_options options = {},
                std::shared_ptr<device_memory_resource> resource = nullptr);
  /// The same, the schema message's bytes taken from `schema`.
  stream_writer(encoded_schema schema, context ctx, format f = format::stream, stream_view s = {},
                arrow::key_value_metadata footer_metadata = {}, write_options options = {},
                std::shared_ptr<device_memory_resource> resource = nullptr);
  ~stream_writer();
  stream_writer(const stream_writer&) = delete;
  stream_writer& operator=(const stream_writer&) = delete;

  /// Adds a batch (its schema must equal the writer's; invalid_argument):
  /// write(batches) of one.  The writer keeps the batch's buffers and may
  /// read them until finish() returns: their bytes must not change before
  /// then.
  void write(const arrow::record_batch& batch, const arrow::key_value_metadata& custom_metadata = {});
  /// Adds every batch, in order, as write(batch) one by one would, their
  /// layouts made together (layout_bodies: the offsets read from the device
  /// in one round trip per level of nesting, not one per batch).
  /// `custom_metadata`: empty, or one per batch.  The schemas and the
  /// metadata count are checked first (invalid_argument, nothing added);
  /// a write that fails later adds nothing either.
  ///
  /// Copied early, where the gather kernel takes the copies (context::
  /// gather_status() "ready"), the batches hold no dictionary and no codec
  /// is set: the output is allocated here, sized by an upper bound of the
  /// messages from the buffers' sizes (where the batches' sliced arrays
  /// hold at most as many bytes as the rest, or 64 MiB), and each message's
  /// copies are queued on the writer's stream as soon as its layout is
  /// known (in parts: the first of 64 MiB or more, each next at least twice
  /// what is queued, the rest at the end of the call), while the next
  /// batches are laid out.  The offsets of unsliced arrays are not read
  /// before: each is taken to use all its values (first offset 0, last the
  /// size of its values, or short of it by what Arrow's 64-byte padding
  /// covers).  write() then returns without waiting for its copies: the
  /// assumed offsets are read back in one copy by finish() (after the
  /// end-of-stream marker is queued, one wait for everything) or by the
  /// next write(), before it adds anything; where one does not hold, the
  /// batches from that write() on are written again from the offsets read
  /// (their first copies wasted, the bytes Arrow's).  The writer keeps the
  /// batches' buffers until then, and the buffers its copies use until
  /// finish() has waited for them (a writer destroyed before that hands
  /// them to keep_alive_until_passed).  A later write() that does not fit
  /// the room goes on as a
  /// writer that copies at finish(), the bytes so far one piece of it: one
  /// more copy within the device of what the first write queued (write a
  /// table's batches in one call to avoid it).
  /// Otherwise the buffers are kept (uncompressed) and copied by finish().
  void write(std::span<const arrow::record_batch> batches,
             std::span<const arrow::key_value_metadata> custom_metadata = {});
  /// write(batches) taking them over: where the writer keeps them (copied
  /// early, until their assumed offsets are read), they are moved in, not
  /// copied (a table of 226 batches of 17 columns: about 0.2 ms of host
  /// time).  `batches` is left empty or as it was.
  void write(std::vector<arrow::record_batch>&& batches,
             std::span<const arrow::key_value_metadata> custom_metadata = {});
  /// write(batches) of the batches at these addresses, for a caller that
  /// holds them apart (the Python binding): where the writer keeps them,
  /// it copies them after it has queued their copies (copied before, the
  /// 8 batches of 17 columns of bench/ipc_bench.py's stream delayed the
  /// first copy by about 35 us on the driver emulation's machine).
  void write(std::span<const arrow::record_batch* const> batches,
             std::span<const arrow::key_value_metadata> custom_metadata = {});
  /// The stream or file: one device allocation filled by batched copies
  /// on the writer's stream (the padding from a small zeroed allocation),
  /// which is synchronized once.  Copied early, what is left queued into
  /// the allocation write() made, the assumed offsets checked, one wait,
  /// and the stream's bytes of it (a
  /// slice; copied into an allocation of its own size where the room
  /// overshot the stream by more than an eighth of it and 1 MiB, so that it
  /// does not hold memory it does not use).  The writer is then
  /// done: write() and finish() throw invalid_argument.
  buffer finish();
  /// Where the writer's time went so far (finish() included once run).
  write_stats stats() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// One record batch (without dictionaries) as an encapsulated message in a
/// device allocation on `ctx`: metadata then body (pyarrow.cuda's
/// serialize_record_batch).  Throws invalid_argument for a batch with a
/// dictionary column (write a stream instead).
CUARROW_EXPORT buffer serialize_record_batch(const arrow::record_batch& batch, const context& ctx, stream_view s = {});

}  // namespace cuarrow::ipc
