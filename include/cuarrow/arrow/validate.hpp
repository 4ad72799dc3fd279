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

#include <string_view>

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
/// valid on), which is synchronized once for each batched read.
CUARROW_EXPORT void validate(const array_data& array, const validate_options& options = {}, stream_view s = {});
/// Each column, with root `column "name"`.
CUARROW_EXPORT void validate(const record_batch& batch, const validate_options& options = {}, stream_view s = {});

}  // namespace cuarrow::arrow
