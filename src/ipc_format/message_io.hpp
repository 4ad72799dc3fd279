// Internal: what the IPC readers share, whatever holds the bytes (a buffer
// in memory for stream.cpp, a file read with pread for file.cpp): framing
// and parsing a message's metadata, the footer block checks, and where each
// column of a record batch lies in its header (body.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "arrow/arrow_internal.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/ipc/record_batch.hpp"

namespace cuarrow::arrow::detail {
class probe_cache;
}

namespace cuarrow::ipc::detail {

/// compress_bodies (record_batch.hpp), adding to `*copy_ns` (when not
/// null) the nanoseconds spent before compressing: the host block
/// allocated and the device buffers copied into it (the writers'
/// write_stats::compress_copy_seconds).
std::vector<body_layout> compress_bodies(std::span<const body_layout> layouts, compression_codec codec,
                                         const compress_options& options, int threads, stream_view s,
                                         std::atomic<std::int64_t>* copy_ns);

/// "RecordBatch", "Schema", ... (Message.fbs names).
const char* kind_name(message_kind k);

/// "message at offset N".
std::string message_at(std::int64_t offset);

/// Throws out_of_range (pyarrow's "Batch number i out of range") unless
/// 0 <= i < n: the one check of a record batch index of a file, for every
/// file reader and the read-ahead.
void check_batch_index(int i, int n);

/// Reads `size` bytes at `offset` of a source (both already checked to lie
/// inside it).
using read_bytes_fn = std::function<std::vector<std::byte>(std::int64_t offset, std::int64_t size)>;

/// A message's metadata without its body.
struct framed_metadata {
  message_metadata metadata;
  std::vector<std::byte> flatbuffer;
  /// Prefix and metadata with padding: the body starts this far after the
  /// message's offset.
  std::int64_t metadata_size = 0;
};

/// Reads and parses the prefix and metadata of the message at `offset` of a
/// source of `source_size` bytes (at most two reads: `first_read` bytes
/// first, the rest when the metadata is longer), and checks that the body
/// lies inside the source.  Nullopt at the end-of-stream marker or at the
/// end of the source.  Throws invalid_message; `file`, when not empty, is
/// the path of the file the source is, named in the errors.
inline constexpr std::int64_t default_first_read = 4096;
std::optional<framed_metadata> read_framed_metadata(const read_bytes_fn& read, std::int64_t offset,
                                                    std::int64_t source_size,
                                                    std::int64_t first_read = default_first_read,
                                                    std::string_view file = {});

/// Throws invalid_message (naming `where`) unless a file's footer block
/// agrees with the message found there.
void check_block(const file_block& b, std::int64_t metadata_size, std::int64_t body_size, const std::string& where);

/// Throws invalid_message (naming `where`) unless the message is of kind
/// `want`.
void expect_kind(message_kind got, message_kind want, const std::string& where);

/// `options` for a message of metadata version `v`.
read_options for_version(const read_options& options, metadata_version v);

/// Where one top-level column's field nodes, buffers and variadic buffer
/// counts lie in a record batch header: [first, end) of each.
struct column_span {
  std::size_t first_node = 0, end_node = 0;
  std::size_t first_buffer = 0, end_buffer = 0;
  std::size_t first_variadic = 0, end_variadic = 0;
};

/// One span per column of `schema`, walking the schema tree over the header
/// as read_record_batch does (the same walk, so the same counts and
/// checks, dictionaries aside).  Throws invalid_message when the header has
/// too few nodes, buffers or variadic counts for the schema.
std::vector<column_span> column_spans(const record_batch_header& h, const schema_message& schema, metadata_version v);

/// read_record_batch's checks of the header's buffer ranges against a body
/// of `body_size` bytes (inside it, not negative, 8-byte aligned offsets).
void check_body_ranges(const record_batch_header& h, std::int64_t body_size);

/// One record batch message to build: its header, its body, the options
/// it is read with (they differ in the metadata version only).
struct batch_body {
  const record_batch_header* header = nullptr;
  buffer body;
  read_options options;
};

/// read_record_batch of every item, the batches validated together (one
/// batched read of the offsets the checks need, one synchronization, for
/// all of them) at the first item's validation level, on its stream.
std::vector<arrow::record_batch> read_record_batches(std::span<const batch_body> batches, const schema_message& schema,
                                                     const dictionary_memo& dictionaries);

/// read_record_batches in three steps, for a reader that fills the bodies
/// itself and can see the bytes on their way (the file readers, through
/// staging): the batches built over the bodies, reading nothing of them;
/// the reads of device memory their cheap validation needs, queued in
/// `cache` (throws invalid_message for what the metadata alone shows
/// wrong); once the bodies are filled, and the caller has supply()d what
/// it could of those reads, the validation at the first item's level.
std::vector<arrow::record_batch> load_record_batches(std::span<const batch_body> batches, const schema_message& schema,
                                                     const dictionary_memo& dictionaries);
void request_validation_reads(std::span<const arrow::record_batch> batches, const schema_message& schema,
                              arrow::detail::probe_cache& cache);
void validate_record_batches(std::span<const arrow::record_batch> batches, const read_options& options,
                             const schema_message& schema, arrow::detail::probe_cache& cache);

/// body(k) for every k < n: on the calling thread for a few (or while
/// another caller, or a caller up the stack, uses the threads), else on up
/// to four threads of their own (not the staging pipeline's: a job may
/// hold it), each a contiguous range.  For the host work of many batches:
/// their metadata (a small pread and a parse each: 226 took 1 ms on one
/// thread, a tenth of a projected read) and building them (25-40 us each).
/// Throws what body threw for the lowest k, as a loop would.  A thread
/// takes at least `min_per_thread` indices (for small items, more).
void for_each_index(std::size_t n, const std::function<void(std::size_t)>& body, std::size_t min_per_thread = 48);

/// How many threads for_each_index(n, body, min_per_part) runs on when
/// they are free: 1 to 4, so that many items may be cut into that many
/// parts (for_each_index(parts, ..., 1) then runs each on its own thread).
std::size_t parts_for(std::size_t n, std::size_t min_per_part);

/// for_each_index's min_per_thread for building or checking batches of
/// `schema`: about 128 top-level arrays a thread, at least 8 batches (on
/// the H200 machine a 2-column projection of 226 batches took 0.5-0.8 ms
/// to build on one thread; a thread's wake-up costs tens of microseconds).
std::size_t batches_per_thread(const schema_message& schema);

/// An offset a layout took without reading it: `width` bytes at `pos` of
/// `buf`, taken to hold a value in [low, high] (any of which gives that
/// layout).
struct assumed_offset {
  buffer buf;
  std::int64_t pos = 0;
  int width = 0;
  std::int64_t low = 0, high = 0;
};

/// layout_bodies, each layout handed to `ready` (in the batches' order) as
/// soon as it and those before it are complete, not when every batch is:
/// a writer queues a batch's copies while the next ones are laid out.  An
/// exception from `ready` stops the layout.
///
/// With `assumed`, the offsets of unsliced arrays are not read first: each
/// is taken as an array that uses all its values has it (first 0, last
/// the size of its values) and noted in *assumed with the values that
/// give the same layout (a string array's last offset may fall short of
/// its values' size by what Arrow's 64-byte padding of a cut buffer
/// covers: pyarrow writes a slice's values so), so that the first layouts
/// are handed over without waiting for a read of the device.  Those
/// layouts are Arrow's only where assumptions_hold: the caller checks, and
/// lays the batches out again without `assumed` where not.  (Null counts,
/// slices and run ends are read as without it.)
using layout_ready = std::function<void(std::size_t index, body_layout&& layout)>;
/// Batches by address (the writers take them so from callers that hold
/// them apart, the Python binding's: no copy before the first copy is
/// queued).
using batch_refs = std::span<const arrow::record_batch* const>;
std::vector<const arrow::record_batch*> refs_of(std::span<const arrow::record_batch> batches);
void layout_bodies_each(batch_refs batches, stream_view s, const layout_ready& ready,
                        std::vector<assumed_offset>* assumed = nullptr);
/// layout_bodies of batches by address (every layout, in order).
std::vector<body_layout> layout_bodies(batch_refs batches, stream_view s);
/// Whether every assumed offset holds its value, read on `s` in one batched
/// copy (which waits for the work queued on `s` before it).
bool assumptions_hold(std::span<const assumed_offset> assumed, stream_view s);
/// The reads that check assumed offsets (their values, one after another),
/// for a caller that makes them with copies of its own
/// (arrow::detail::reads_into_pinned) ...
std::vector<arrow::detail::host_read> assumed_reads(std::span<const assumed_offset> assumed);
/// ... and whether every assumed offset holds, `read` the bytes those reads
/// gave.
bool assumptions_hold(std::span<const assumed_offset> assumed, const buffer& read);

/// An upper bound of what layout_bodies makes of some batches, from their
/// buffers' sizes alone (no device read): body bytes (`bytes` for arrays
/// outside any slice, `loose` for those in one, whose layout may take much
/// less than their buffers: a 10-row slice of a string column takes a few
/// bytes of its data), and `entries`, a bound of the nodes, buffers and
/// variadic counts their metadata lists.  Dictionaries not included.
struct group_bound {
  std::int64_t bytes = 0, loose = 0, entries = 0;
};
group_bound body_bound(batch_refs batches);

}  // namespace cuarrow::ipc::detail
