// The Arrow IPC format's metadata, as plain values.
//
// The encapsulated message format (https://arrow.apache.org/docs/format/Columnar.html#ipc-streaming-format):
// every message is a continuation marker (0xFFFFFFFF), a little-endian int32
// metadata length, a FlatBuffers `Message` padded to 8 bytes, then the body
// of `body_length` bytes.  A stream is a schema message, dictionary batches
// and record batches, then an end-of-stream marker; a file is "ARROW1",
// padding, a stream, a `Footer` FlatBuffer, its int32 length and "ARROW1".
//
// These structs are what the metadata reader returns and the writer takes.
// They say where each buffer of a record batch lies in its body, never
// what the body holds: reading the body (zero-copy slices of a host or
// device buffer) and writing it are separate steps (record_batch.hpp).
//
// Metadata comes from other programs and is untrusted: the reader checks
// every offset, vtable, vector and length before use and throws
// invalid_message naming what is wrong and where, never reading past its
// input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cuarrow/arrow/type.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::ipc {

/// A malformed or unsupported IPC message, stream or file: `where` names the
/// place (e.g. "Message.header(RecordBatch).buffers[3]", "footer", "stream
/// message 2"), `reason` what is wrong.  pyarrow raises ArrowInvalid here.
class CUARROW_EXPORT invalid_message : public invalid_argument {
 public:
  invalid_message(std::string where, std::string reason);
  const std::string& where() const noexcept { return where_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string where_;
  std::string reason_;
};

/// Schema.fbs MetadataVersion.  Readers accept V4 and V5 (what Arrow has
/// written since 0.15 / 1.0); writers write V5.
enum class metadata_version : std::int16_t { v1 = 0, v2 = 1, v3 = 2, v4 = 3, v5 = 4 };

/// Message.fbs MessageHeader (the union's type codes).
enum class message_kind : std::uint8_t {
  none = 0,
  schema = 1,
  dictionary_batch = 2,
  record_batch = 3,
  tensor = 4,
  sparse_tensor = 5
};

/// Message.fbs CompressionType.
enum class compression_codec : std::int8_t { lz4_frame = 0, zstd = 1 };

/// Message.fbs FieldNode: one per array in the tree, depth first.
struct field_node {
  std::int64_t length = 0;
  std::int64_t null_count = 0;
  friend bool operator==(const field_node&, const field_node&) = default;
};

/// Schema.fbs Buffer: a byte range of the message body.
struct body_range {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  friend bool operator==(const body_range&, const body_range&) = default;
};

/// Message.fbs RecordBatch.
struct record_batch_header {
  std::int64_t length = 0;
  std::vector<field_node> nodes;
  std::vector<body_range> buffers;
  /// BodyCompression (method BUFFER: each buffer is an int64 uncompressed
  /// length, -1 for "stored uncompressed", then the compressed bytes).
  std::optional<compression_codec> compression;
  /// One per view-type array (utf8_view, binary_view), depth first.
  std::vector<std::int64_t> variadic_buffer_counts;
  friend bool operator==(const record_batch_header&, const record_batch_header&) = default;
};

/// Message.fbs DictionaryBatch.
struct dictionary_batch_header {
  std::int64_t id = 0;
  record_batch_header data;
  bool is_delta = false;
  friend bool operator==(const dictionary_batch_header&, const dictionary_batch_header&) = default;
};

/// A dictionary-encoded field of a schema: its dictionary id and where it is
/// (child indices from the schema's fields down, e.g. {2} for the third
/// field, {2, 0} for the first child of the third field).  Schema.fbs keeps
/// the id in the field's DictionaryEncoding; cuarrow's data_type has no
/// place for it, so the schema message carries them beside the schema.
struct dictionary_field {
  std::int64_t id = 0;
  std::vector<int> path;
  friend bool operator==(const dictionary_field&, const dictionary_field&) = default;
};

/// Message.fbs Schema (and the file footer's schema).
struct schema_message {
  arrow::schema schema;
  std::vector<dictionary_field> dictionaries;
  /// Schema.fbs Feature flags (dictionary replacement, compressed body).
  std::vector<std::int64_t> features;
  friend bool operator==(const schema_message&, const schema_message&) = default;
};

/// Message.fbs Message.
struct message_metadata {
  metadata_version version = metadata_version::v5;
  std::variant<std::monostate, schema_message, dictionary_batch_header, record_batch_header> header;
  std::int64_t body_length = 0;
  arrow::key_value_metadata custom_metadata;

  CUARROW_EXPORT message_kind kind() const noexcept;
  /// The header of a message of that kind; for another kind, throws
  /// invalid_argument "<who>: not a schema message" (likewise "dictionary
  /// batch", "record batch").
  CUARROW_EXPORT const schema_message& schema_header(std::string_view who) const;
  CUARROW_EXPORT const dictionary_batch_header& dictionary_batch(std::string_view who) const;
  CUARROW_EXPORT const record_batch_header& record_batch(std::string_view who) const;
};

/// File.fbs Block: where a message of a file lies.
struct file_block {
  std::int64_t offset = 0;
  std::int32_t metadata_length = 0;  // prefix, FlatBuffer and padding
  std::int64_t body_length = 0;
  friend bool operator==(const file_block&, const file_block&) = default;
};

/// File.fbs Footer.
struct file_footer {
  metadata_version version = metadata_version::v5;
  schema_message schema;
  std::vector<file_block> dictionaries;
  std::vector<file_block> record_batches;
  arrow::key_value_metadata custom_metadata;
};

}  // namespace cuarrow::ipc
