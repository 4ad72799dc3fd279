// Validation of arrays from untrusted producers.
//
// Two levels:
//   cheap  structure only: buffer and child counts, lengths, offsets and null
//          counts in range, every buffer large enough for what the layout
//          implies from length + offset, children long enough for their
//          parent, union type codes declared, dictionary present.  The only
//          values read are those sizing needs: the first and last offset of
//          offset-based arrays (binary, lists, map) and the last run end of
//          run-end encoded arrays.  For an array in device memory these are
//          gathered with ONE batched small device-to-host copy for the whole
//          tree and one stream synchronization; nothing else is read.
//   full   cheap, plus every value that can make a reader go out of bounds:
//          offsets non-decreasing and within the data, list view ranges,
//          every union type id and dense union offset, every dictionary
//          index, run ends strictly increasing, view references within their
//          buffers; optionally UTF-8 of utf8 arrays.  An array in device
//          memory is first copied to the host in one batch.
//
// Validation never reads out of bounds: every read is preceded by the size
// check that makes it safe.  Failures throw invalid_data naming the path
// from `root` down (e.g. `column "b" → child 0 ("item")`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::arrow {

enum class validation_level : std::uint8_t {
  none,   // trust the producer
  cheap,  // structure and sizes
  full    // every value
};

struct validate_options {
  validation_level level = validation_level::cheap;
  /// full only: check that utf8 / large_utf8 / utf8_view values are UTF-8.
  bool check_utf8 = false;
  /// The name of the root in error paths ("array", `column "x"`, ...).
  std::string_view root = "array";
};

/// Validate `array`.  Device memory is read on `s` (the stream the array is
/// valid on), which is synchronized once for each batched read; nothing is
/// pending on return.  Throws invalid_data, cuda_error.
CUARROW_EXPORT void validate(const array_data& array, const validate_options& options = {}, stream_view s = {});
/// Each column, with root `column "name"`.
CUARROW_EXPORT void validate(const record_batch& batch, const validate_options& options = {}, stream_view s = {});

// ---- construction from buffers -------------------------------------------------
//
// Arrays and batches built from buffers someone filled (a kernel's output,
// pinned host memory ...), pyarrow's Array.from_buffers / RecordBatch.
// from_arrays shapes.  What they are given is checked before anything is
// returned: the argument shapes first (invalid_argument, pyarrow's wording:
// buffer and child counts against the type, lengths and offsets not
// negative), then one placement for the whole tree (device_mismatch naming
// the buffer that lives elsewhere), then validate() at options.level, never
// less than cheap (cheap by default: every buffer large enough for length + offset, offsets read
// with one batched copy; invalid_data naming the buffer).  An argument that
// is refused is left as it was: buffers and children are handles, nothing is
// written.

/// An array of `type` and `length` elements over `buffers` in layout order
/// (layout_of; an empty buffer is an absent one, e.g. no validity bitmap),
/// `null_count` (-1: unknown), `offset` (elements, applied to every buffer),
/// `children` (one per child of the type) and, for a dictionary type, its
/// `dictionary`.  Device memory is read on `s` (cheap validation reads the
/// first and last offsets of offset-based arrays), synchronized once for
/// the batched read: `s` must order the writes of the buffers' producers.
/// The result shares the buffers (handles, not copies).
CUARROW_EXPORT array_data make_array(const data_type& type, std::int64_t length, std::vector<buffer> buffers,
                                     std::int64_t null_count = -1, std::int64_t offset = 0,
                                     std::vector<array_data> children = {},
                                     std::shared_ptr<const array_data> dictionary = nullptr,
                                     const validate_options& options = {}, stream_view s = {});

/// A record batch of `schema` over `columns`: as many columns as fields,
/// each of its field's type, all of one length (ArrowInvalid's "Column 1
/// named b expected length 3 but got length 2"), all on one device; then
/// validated as make_array does.
CUARROW_EXPORT record_batch make_record_batch(arrow::schema schema, std::vector<array_data> columns,
                                              const validate_options& options = {}, stream_view s = {});

/// make_array under the field `f` (its type is the array's; its name,
/// nullability and metadata, where an extension type lives, label the
/// result) over placed children and dictionary, declared in `where` (what
/// an array without any non-empty buffer reports).  Throws as make_array.
CUARROW_EXPORT placed_array make_placed_array(field f, std::int64_t length, std::vector<buffer> buffers,
                                              std::int64_t null_count, std::int64_t offset,
                                              std::vector<placed_array> children,
                                              std::optional<placed_array> dictionary, placement where,
                                              const validate_options& options = {}, stream_view s = {});

/// make_record_batch over placed columns (their data; the schema's fields
/// label them), declared in `where`.  Throws as make_record_batch.
CUARROW_EXPORT placed_batch make_placed_batch(arrow::schema schema, const std::vector<placed_array>& columns,
                                              placement where, const validate_options& options = {},
                                              stream_view s = {});

}  // namespace cuarrow::arrow
