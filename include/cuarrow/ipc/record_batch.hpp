// Arrow IPC record batch bodies: reading them as typed arrays, laying them
// out for writing.
//
// A record batch message is metadata (a record_batch_header: field nodes and
// buffer ranges, format.hpp) plus a body, one contiguous run of bytes.  The
// metadata reader turns the FlatBuffers message into the header; the code
// here turns header + body into arrow::record_batch and back:
//
//   read_record_batch  every array of the schema tree, depth first, takes its
//                      field node and its buffers in IPC order; its buffers
//                      become zero-copy slices of the body (a cuarrow::buffer:
//                      device memory or host, same code).  Nothing is copied
//                      and no kernel runs: a 1 GiB body on the device is read
//                      by reading the header and the few offsets cheap
//                      validation needs (one batched small copy).
//   dictionary_memo    the dictionaries a stream has sent so far: dictionary
//                      batches are read with the same function, replace or
//                      extend (deltas) what the memo holds.
//   layout_body        where each buffer of a batch goes in a body, as Arrow
//                      C++'s writer lays it out (8-byte padding, truncated
//                      slices, 0-length validity when there are no nulls).
//   write_body         that layout filled with ONE batched copy.
//
// Where the IPC layout differs from cuarrow's (layout_of, which follows the
// C Data Interface): null arrays have no buffers; unions have no validity
// bitmap (metadata V5; V4 unions have one, which must be unused); run-end
// encoded arrays have no buffers of their own; binary_view / utf8_view
// arrays take header.variadic_buffer_counts[k] data buffers (k counting
// view arrays depth first) and no sizes buffer; dictionary-encoded arrays
// are their indices, and their dictionary comes from the memo.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/validate.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::ipc {

/// Decompresses one buffer of a compressed body: `compressed` is the
/// buffer's whole range (the int64 uncompressed length, -1 for "stored
/// uncompressed", then the bytes), in the body's memory; the result is the
/// uncompressed buffer, in whatever memory the hook chooses (normally the
/// body's kind).  Throws invalid_message for bad input.
using decompress_fn = std::function<buffer(compression_codec codec, const buffer& compressed)>;

struct read_options {
  /// cheap (structure and sizes; the few offsets it needs are read from
  /// device memory in one batched copy) or full (every value; device data
  /// is copied to the host in one batch to be checked).  `none` is taken as
  /// cheap: bodies are untrusted.
  arrow::validation_level validation = arrow::validation_level::cheap;
  /// With full validation: utf8 values must be UTF-8.
  bool check_utf8 = false;
  /// The message's metadata version: V4 unions carry an (unused) validity
  /// buffer, V5 unions none.
  metadata_version version = metadata_version::v5;
  /// For a header with compression: turns each buffer's range into its
  /// uncompressed bytes.  Without one, a compressed header is refused with
  /// invalid_message ("compressed bodies are read by the file reader").
  decompress_fn decompress;
  /// Nesting deeper than this is refused (Arrow C++'s limit).
  int max_depth = 64;
  /// The stream that orders the body's producer: validation reads device
  /// memory on it (synchronized once per batched read).
  stream_view stream;
};

/// The dictionaries of a stream or file, by id, and what the schema says
/// each holds (value type, where its field is).
class CUARROW_EXPORT dictionary_memo {
 public:
  dictionary_memo() = default;
  /// The dictionary fields of `schema` (their ids and value types); no
  /// dictionary yet.  Throws invalid_message when a dictionary id is
  /// repeated, a path leads nowhere or to a field that is not
  /// dictionary-encoded, or a dictionary's values are themselves
  /// dictionary-encoded at the top (which IPC cannot say).
  explicit dictionary_memo(const schema_message& schema);

  /// True when the schema has a dictionary field with this id.
  bool knows(std::int64_t id) const noexcept;
  /// The value type of dictionary `id`; invalid_message for unknown ids.
  const arrow::data_type& value_type(std::int64_t id) const;
  /// The dictionary read so far for `id`, or null (none yet or unknown id).
  std::shared_ptr<const arrow::array_data> get(std::int64_t id) const;
  /// Sets (or replaces) dictionary `id`.  Throws invalid_message for an
  /// unknown id, invalid_argument when the array's type is not the value
  /// type.
  void set(std::int64_t id, arrow::array_data dictionary);

  /// Reads a dictionary batch (the data is a record batch of one column of
  /// the value type, read as read_record_batch reads one) and sets the
  /// dictionary, or for a delta appends to the one there is (append).
  void read(const dictionary_batch_header& header, const buffer& body, const read_options& options = {});

  /// Appends `delta` (of the value type) to dictionary `id`: a new
  /// array_data (offset 0) whose buffers hold both, in the existing
  /// dictionary's memory (device or host), filled with ONE batched copy on
  /// `s`, which is synchronized.  Byte ranges are copied device to device;
  /// what must be computed (validity and boolean bitmaps joined at a bit
  /// offset, the delta's offsets moved past the first's values) is computed
  /// on the host from the bitmaps and offsets read back, and travels in the
  /// same batch.  Supported value types: every fixed-width type, boolean,
  /// binary / utf8 (and large), list, large_list, map, fixed_size_list and
  /// struct of those; others (views, list views, unions, run-end encoded)
  /// are refused with invalid_message, as is a delta before any dictionary.
  void append(std::int64_t id, const arrow::array_data& delta, stream_view s = {});

  /// The dictionary fields of the schema the memo was made for: the id and
  /// path of each, in id order.
  std::vector<dictionary_field> fields() const;

  /// The schema message of a one-column batch that holds dictionary `id`
  /// (field "dictionary" of the value type, with the dictionary fields
  /// nested in the values renumbered under it).
  const schema_message& dictionary_schema(std::int64_t id) const;

 private:
  struct entry {
    std::vector<int> path;
    schema_message values;  // one field: the value type
    std::shared_ptr<const arrow::array_data> dictionary;
  };
  const entry& find(std::int64_t id) const;
  std::map<std::int64_t, entry> entries_;
};

/// Reads a record batch from its header and body.  Every check on the
/// header against the schema, and of every buffer range against the body,
/// runs before any array is built, each failure an invalid_message naming
/// the field path and the buffer:
///  - one field node per array of the schema tree and no more, lengths and
///    null counts not negative, null count <= length, the batch length equal
///    to every column's;
///  - as many buffers as the tree's IPC layout takes, each range inside the
///    body (offset and length not negative, offset 8-byte aligned unless the
///    range is empty, end within body.size() without overflow);
///  - one variadic buffer count per view array, none negative;
///  - every dictionary field has an id in the schema message and a
///    dictionary in the memo.
/// Then the batch is validated (read_options::validation).  The arrays'
/// buffers are slices of `body` (or the hook's output for compressed
/// bodies) and keep it alive.
CUARROW_EXPORT arrow::record_batch read_record_batch(const record_batch_header& header, const schema_message& schema,
                                                     const buffer& body, const dictionary_memo& dictionaries,
                                                     const read_options& options = {});

// ---- writing ----------------------------------------------------------------

/// One piece of a body: `size` bytes of `source` from `source_offset`
/// land at `body_offset`.  `source` is a buffer of the batch, or host
/// memory layout_body computed (a bitmap shifted to bit 0, offsets rebased
/// to 0).
struct body_piece {
  buffer source;
  std::int64_t source_offset = 0;
  std::int64_t size = 0;
  std::int64_t body_offset = 0;
};

struct body_layout {
  /// Nodes, buffer ranges and variadic counts; length = the batch's rows.
  /// No compression.
  record_batch_header header;
  std::vector<body_piece> pieces;
  /// A multiple of 8: every buffer is padded to 8 bytes.
  std::int64_t body_length = 0;
};

/// Lays out `batch` as Arrow C++'s writer (RecordBatchSerializer) does for
/// the same data, uncompressed: buffers in IPC order, each padded to 8
/// bytes; a 0-length validity buffer where the null count is 0; sliced
/// arrays truncated: value, type id, list view size and view buffers as
/// byte slices (with the padding that follows them, where the buffer has
/// it); what Arrow computes is computed on the host from the buffers read
/// back (bitmaps at a bit offset shifted to bit 0, offsets not starting at
/// 0 rebased, list view offsets less their smallest, dense union offsets
/// less each child's first, run ends of a sliced run-end encoded array
/// rebased and clipped); children sliced as Arrow slices them; dictionary
/// arrays as their indices.  Null counts that are unknown are counted
/// (compute_null_count).  The batch must be valid (validate it first if it
/// is not yours): offsets outside their buffers are invalid_argument, but
/// values are not checked.  Device memory is read on `s` (offsets, in one
/// batched copy per level of nesting; the buffers computed from, one copy
/// each), which is synchronized.
CUARROW_EXPORT body_layout layout_body(const arrow::record_batch& batch, stream_view s = {});
/// layout_body of every batch, their offsets in device memory read together:
/// one batched copy per level of nesting for all the batches (a writer of a
/// table of many batches makes one round trip, not one per batch).
CUARROW_EXPORT std::vector<body_layout> layout_bodies(std::span<const arrow::record_batch> batches, stream_view s = {});

/// The layout with every non-empty buffer compressed as Arrow C++'s writer
/// compresses it (IpcWriteOptions(compression=...)): the buffer's bytes
/// framed by compress() (an int64 uncompressed length, or -1 and the bytes
/// when compressing does not save options.min_space_savings), each framed
/// buffer padded to 8 bytes; empty buffers stay empty.  The header gets the
/// new ranges and `compression` = codec; the pieces are host memory holding
/// the framed bytes.  Device buffers are copied to the host first (pinned
/// memory from the result pool where it has room; one batched copy on `s`,
/// which is synchronized); host buffers are compressed where they are.
/// Compression runs on up to `threads` host threads (compress_all).
/// Throws as compress_all and copy_batch do.
CUARROW_EXPORT body_layout compress_body(const body_layout& layout, compression_codec codec,
                                         const compress_options& options = {}, int threads = 0, stream_view s = {});

/// compress_body of every layout at once: ONE batched copy of all their
/// device buffers to the host and ONE compress_all over all their buffers,
/// so that the host threads share the buffers of many bodies (the IPC file
/// writer compresses a group of batches this way).  The results, in the
/// order of `layouts`, are what compress_body gives for each; they share
/// one host allocation.
CUARROW_EXPORT std::vector<body_layout> compress_bodies(std::span<const body_layout> layouts, compression_codec codec,
                                                        const compress_options& options = {}, int threads = 0,
                                                        stream_view s = {});

/// One device allocation on `ctx` of layout.body_length bytes, filled with
/// ONE batched copy (copy_batch_async) of every piece, the padding between
/// them zeroed; queued on `s`, not synchronized (the pieces the layout
/// computed on the host are kept alive by the copy).  `layout` must come
/// from layout_body of the same batch.
CUARROW_EXPORT buffer write_body(const body_layout& layout, const context& ctx, stream_view s = {});
/// layout_body, then write_body.
CUARROW_EXPORT buffer write_body(const arrow::record_batch& batch, const context& ctx, stream_view s = {});

}  // namespace cuarrow::ipc
