// Reading and writing the Arrow IPC format's metadata: the FlatBuffers
// `Message` of each encapsulated message, the encapsulation around it, and
// the file format's magic and footer (docs/ipc-format.md).
//
// Everything here works on host bytes and touches neither the driver nor a
// stream.  Readers take untrusted bytes: they never read outside the span
// they are given, and throw invalid_message naming the place (a path such
// as "Message.header(RecordBatch).buffers[3]") and what is wrong.  Writers
// produce the bytes Arrow C++ (pyarrow) writes for the same metadata.
//
// What is checked on reading: the FlatBuffers verifier's rules (offsets,
// vtables, vectors and strings inside the buffer and aligned, strings
// NUL-terminated) with Arrow C++'s limits (tables at most 128 deep, at most
// 8 tables per byte); then the metadata version (V4 or V5), known header,
// type and enum codes, little-endian schemas, type parameters Arrow allows
// (widths, units, precisions, union codes, child counts, map entries),
// unique dictionary ids, non-negative lengths, null counts at most the
// length, buffers inside the message body, file blocks inside the file.
// Node and buffer counts against the schema are the body reader's checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cuarrow/export.hpp"
#include "cuarrow/ipc/format.hpp"

namespace cuarrow::ipc {

// ---- messages -----------------------------------------------------------------

/// Parses a FlatBuffers `Message` (the bytes after the length prefix; any
/// trailing padding is ignored).  Tensor and sparse tensor messages are
/// refused (unsupported), as are metadata versions before V4.
CUARROW_EXPORT message_metadata read_message_metadata(std::span<const std::byte> flatbuffer);

/// The FlatBuffers `Message` for `m`, byte for byte what Arrow C++ writes
/// for the same schema, batch or dictionary (no prefix, no padding).
/// Throws invalid_argument for metadata Arrow cannot express (a negative
/// length, a dictionary field path that names no field, ...).
CUARROW_EXPORT std::vector<std::byte> write_message_metadata(const message_metadata& m);

// ---- encapsulation ------------------------------------------------------------

inline constexpr std::uint32_t continuation_marker = 0xFFFFFFFFu;

/// The prefix of an encapsulated message: 0xFFFFFFFF then the int32
/// metadata length (since Arrow 0.15), or the length alone (before).  A
/// length of 0 is the end-of-stream marker.
struct message_prefix {
  /// 8, or 4 for the pre-0.15 form without the continuation marker.
  std::int32_t prefix_length = 8;
  /// The FlatBuffer and its padding, in bytes (0 at the end of the stream).
  std::int32_t metadata_length = 0;
  bool end_of_stream() const noexcept { return metadata_length == 0; }
  /// Prefix and metadata: where the body starts.
  std::int64_t size() const noexcept { return std::int64_t{prefix_length} + metadata_length; }
};

/// Parses the prefix at the start of `bytes`.  A stream that ends cleanly
/// (no bytes left) reads as end of stream; fewer bytes than the prefix, or a
/// negative length, throw invalid_message naming `where`.
CUARROW_EXPORT message_prefix read_message_prefix(std::span<const std::byte> bytes, std::string_view where = "message");

/// Parses the prefix at the start of `bytes` and returns it with the
/// metadata FlatBuffer (padding included), which must lie inside `bytes`.
struct encapsulated_metadata {
  message_prefix prefix;
  std::span<const std::byte> flatbuffer;
};
CUARROW_EXPORT encapsulated_metadata read_encapsulated_metadata(std::span<const std::byte> bytes,
                                                                std::string_view where = "message");

/// Prefix (marker and length), `flatbuffer`, and zeros up to a multiple of
/// 8 bytes in all, as Arrow writes a message's metadata.
CUARROW_EXPORT std::vector<std::byte> encapsulate(std::span<const std::byte> flatbuffer);

/// write_message_metadata, encapsulated.
CUARROW_EXPORT std::vector<std::byte> write_encapsulated_metadata(const message_metadata& m);

/// The end-of-stream marker: 0xFFFFFFFF then a length of 0.
CUARROW_EXPORT std::vector<std::byte> end_of_stream_marker();

// ---- the file format ------------------------------------------------------------

/// "ARROW1": a file starts with it (then 2 bytes of padding) and ends with it.
inline constexpr std::string_view file_magic = "ARROW1";
/// Bytes before the first message of a file (magic and padding).
inline constexpr std::int64_t file_header_size = 8;
/// The footer length (int32) and the magic at the end of a file.
inline constexpr std::int64_t file_trailer_size = 10;

/// Throws invalid_message unless `head` (a file's first bytes) starts with
/// the magic.
CUARROW_EXPORT void check_file_magic(std::span<const std::byte> head);

/// The length of the footer FlatBuffer, from a file's last
/// file_trailer_size bytes (which must end in the magic).  `file_size`
/// bounds it: the footer lies after the header and before the trailer.
CUARROW_EXPORT std::int32_t read_footer_length(std::span<const std::byte> trailer, std::int64_t file_size);

/// Parses a `Footer` FlatBuffer.  Blocks are checked against `file_size`
/// (offset after the header, metadata a positive multiple of 8, body
/// non-negative, the whole inside the file before the footer).
CUARROW_EXPORT file_footer read_footer(std::span<const std::byte> flatbuffer, std::int64_t file_size);

/// The footer of a whole file in memory: checks both magics and reads the
/// footer at its end.
CUARROW_EXPORT file_footer read_file_footer(std::span<const std::byte> file);

/// The `Footer` FlatBuffer Arrow writes for `f`.
CUARROW_EXPORT std::vector<std::byte> write_footer(const file_footer& f);

/// What ends a file: the footer FlatBuffer, its int32 length and the magic.
CUARROW_EXPORT std::vector<std::byte> write_file_trailer(const file_footer& f);

}  // namespace cuarrow::ipc
