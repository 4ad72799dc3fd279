// Arrow logical types, fields and schemas.
//
// A data_type is a plain value: an id plus the parameters of that id
// (precision and scale, unit and time zone, fixed size, union type codes,
// children, dictionary index and value types).  Nested types hold their
// children as `field`s (name, type, nullability, metadata), exactly as the
// Arrow C Data Interface's ArrowSchema tree does, so a schema exported and
// imported again compares equal, field names, flags and metadata included.
// Extension types travel as their storage type plus the field metadata keys
// "ARROW:extension:name" and "ARROW:extension:metadata".
//
// Format strings (ArrowSchema.format) are the C Data Interface's:
// to_format / parse_format are in c_data.hpp; a bad one is an
// invalid_format (below) naming the format and the field path.
//
// layout_of gives the buffers an array of a type holds (array.hpp's
// array_data lists its buffers in that order).
//
// Every type here is a value type: copyable, comparable, thread-compatible.
// Nothing here touches memory, the driver or a stream; a factory given
// parameters outside what Arrow allows throws invalid_argument.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/export.hpp"

namespace cuarrow::arrow {

enum class type_id : std::int8_t {
  null,
  boolean,
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  float32,
  float64,
  decimal32,
  decimal64,
  decimal128,
  decimal256,
  date32,                   // days since the epoch, int32
  date64,                   // milliseconds since the epoch, int64
  time32,                   // unit second or milli
  time64,                   // unit micro or nano
  timestamp,                // int64, unit, optional time zone
  duration,                 // int64, unit
  interval_months,          // int32
  interval_day_time,        // 2 x int32
  interval_month_day_nano,  // int32, int32, int64
  fixed_size_binary,
  binary,
  large_binary,
  utf8,
  large_utf8,
  binary_view,
  utf8_view,
  list,
  large_list,
  list_view,
  large_list_view,
  fixed_size_list,
  struct_,
  map,
  sparse_union,
  dense_union,
  run_end_encoded,
  dictionary
};

enum class time_unit : std::int8_t { second, milli, micro, nano };

/// Key/value pairs in order (duplicates allowed, as in the C Data Interface).
using key_value_metadata = std::vector<std::pair<std::string, std::string>>;

struct field;

struct CUARROW_EXPORT data_type {
  type_id id = type_id::null;

  /// decimal*: precision and scale.
  std::int32_t precision = 0;
  std::int32_t scale = 0;
  /// fixed_size_binary: bytes per value; fixed_size_list: values per list.
  std::int32_t fixed_size = 0;
  /// time32, time64, timestamp, duration.
  time_unit unit = time_unit::second;
  /// timestamp: the time zone as written in the format ("" = none).
  std::string timezone;
  /// map: the keys of each entry are sorted.
  bool keys_sorted = false;
  /// sparse_union, dense_union: the type code of each child, in child order.
  std::vector<std::int8_t> type_codes;
  /// list*, fixed_size_list, map (one child: the entries struct), struct_,
  /// unions, run_end_encoded (run_ends, values).
  std::vector<field> children;
  /// dictionary: the integer type of the indices, the type of the values
  /// (never null for a dictionary) and the ordered flag.
  type_id index_type = type_id::int32;
  std::shared_ptr<const data_type> value_type;
  bool ordered = false;

  // Defined out of line: `children` holds the still incomplete `field` here.
  data_type();
  explicit data_type(type_id i);

  /// The dictionary's value type; throws invalid_argument for other types.
  const data_type& values() const;
  /// "list<item: int32>", "timestamp[us, tz=UTC]", ...
  std::string to_string() const;

  friend CUARROW_EXPORT bool operator==(const data_type& a, const data_type& b);
};

struct CUARROW_EXPORT field {
  std::string name;
  data_type type;
  bool nullable = true;
  key_value_metadata metadata;

  field() = default;
  field(std::string n, data_type t, bool is_nullable = true, key_value_metadata md = {})
      : name(std::move(n)), type(std::move(t)), nullable(is_nullable), metadata(std::move(md)) {}

  /// The value of the metadata key "ARROW:extension:name", if any.
  std::optional<std::string> extension_name() const;
  std::optional<std::string> extension_metadata() const;

  friend CUARROW_EXPORT bool operator==(const field& a, const field& b);
};

/// The columns of a record batch, and the batch's metadata.
struct CUARROW_EXPORT schema {
  std::vector<field> fields;
  key_value_metadata metadata;

  /// The index of the field named `name`, or -1.
  int index_of(std::string_view name) const;
  friend CUARROW_EXPORT bool operator==(const schema& a, const schema& b);
};

// ---- errors ---------------------------------------------------------------

/// A format string that is not one of the C Data Interface's.  The message
/// names the format and the field path, e.g.
///   invalid format string "d:38" at column "price": decimal needs "d:precision,scale[,bitwidth]"
class CUARROW_EXPORT invalid_format : public invalid_argument {
 public:
  invalid_format(std::string format, std::string path, std::string reason);
  const std::string& format() const noexcept { return format_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string format_;
  std::string path_;
  std::string reason_;
};

/// An array (or schema) that does not hold together: wrong buffer or child
/// counts, buffers too small, offsets out of range, released C structs...
/// The message names the path, e.g.
///   column "b" → child 0 ("item"): offsets buffer too small: needs 48 bytes for 10 values at offset 1, has 40
class CUARROW_EXPORT invalid_data : public invalid_argument {
 public:
  invalid_data(std::string path, std::string reason);
  const std::string& path() const noexcept { return path_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string path_;
  std::string reason_;
};

// ---- type factories -------------------------------------------------------

CUARROW_EXPORT data_type null();
CUARROW_EXPORT data_type boolean();
CUARROW_EXPORT data_type int8();
CUARROW_EXPORT data_type uint8();
CUARROW_EXPORT data_type int16();
CUARROW_EXPORT data_type uint16();
CUARROW_EXPORT data_type int32();
CUARROW_EXPORT data_type uint32();
CUARROW_EXPORT data_type int64();
CUARROW_EXPORT data_type uint64();
CUARROW_EXPORT data_type float16();
CUARROW_EXPORT data_type float32();
CUARROW_EXPORT data_type float64();
/// Decimal of `bit_width` 32, 64, 128 or 256 bits.  Throws invalid_argument
/// for a precision outside 1..max for the width (9, 18, 38, 76).
CUARROW_EXPORT data_type decimal(std::int32_t precision, std::int32_t scale, int bit_width = 128);
CUARROW_EXPORT data_type date32();
CUARROW_EXPORT data_type date64();
/// time32 takes second or milli; time64 micro or nano (invalid_argument
/// otherwise).
CUARROW_EXPORT data_type time32(time_unit unit);
CUARROW_EXPORT data_type time64(time_unit unit);
CUARROW_EXPORT data_type timestamp(time_unit unit, std::string timezone = {});
CUARROW_EXPORT data_type duration(time_unit unit);
CUARROW_EXPORT data_type interval_months();
CUARROW_EXPORT data_type interval_day_time();
CUARROW_EXPORT data_type interval_month_day_nano();
/// Throws invalid_argument for a negative width.
CUARROW_EXPORT data_type fixed_size_binary(std::int32_t byte_width);
CUARROW_EXPORT data_type binary();
CUARROW_EXPORT data_type large_binary();
CUARROW_EXPORT data_type utf8();
CUARROW_EXPORT data_type large_utf8();
CUARROW_EXPORT data_type binary_view();
CUARROW_EXPORT data_type utf8_view();
/// List types take their value field (conventionally named "item");
/// fixed_size_list throws invalid_argument for a negative size.
CUARROW_EXPORT data_type list(field value);
CUARROW_EXPORT data_type large_list(field value);
CUARROW_EXPORT data_type list_view(field value);
CUARROW_EXPORT data_type large_list_view(field value);
CUARROW_EXPORT data_type fixed_size_list(field value, std::int32_t list_size);
CUARROW_EXPORT data_type struct_(std::vector<field> fields);
/// map<key, item>: one child "entries" = struct<key (non-nullable), value>.
CUARROW_EXPORT data_type map(data_type key, data_type item, bool keys_sorted = false, bool item_nullable = true);
/// Unions; `type_codes` defaults to 0..n-1.  Codes must be distinct, 0..127,
/// one per field (invalid_argument otherwise).
CUARROW_EXPORT data_type sparse_union(std::vector<field> fields, std::vector<std::int8_t> type_codes = {});
CUARROW_EXPORT data_type dense_union(std::vector<field> fields, std::vector<std::int8_t> type_codes = {});
/// `run_end_type` is int16, int32 or int64 (invalid_argument otherwise).
CUARROW_EXPORT data_type run_end_encoded(data_type run_end_type, data_type value_type);
/// `index_type` must be an integer type (invalid_argument otherwise).
CUARROW_EXPORT data_type dictionary(data_type index_type, data_type value_type, bool ordered = false);

// ---- type properties ------------------------------------------------------

CUARROW_EXPORT const char* to_string(type_id id) noexcept;
CUARROW_EXPORT const char* to_string(time_unit unit) noexcept;
/// True for the integer types int8..uint64.
CUARROW_EXPORT bool is_integer(type_id id) noexcept;
CUARROW_EXPORT bool is_signed_integer(type_id id) noexcept;
/// Bits per value of fixed-width types (boolean: 1, fixed_size_binary: 8 x
/// byte width, decimal: its width, dictionary: the index width); 0 for the others.
CUARROW_EXPORT int bit_width(const data_type& type) noexcept;
/// Number of children the type requires, or -1 when the type says (struct, unions).
CUARROW_EXPORT int required_children(type_id id) noexcept;

// ---- layouts --------------------------------------------------------------

/// What one buffer of an array holds.
enum class buffer_role : std::uint8_t {
  validity,      // bitmap, 1 bit per element (bit offset = array offset)
  bitmap,        // boolean values, 1 bit per element
  values,        // fixed-width values, byte_width bytes per element
  offsets,       // length + 1 offsets (binary, lists, map), byte_width 4 or 8
  data,          // the bytes the offsets point into (binary / utf8 and large forms)
  list_offsets,  // list view: one offset per element
  list_sizes,    // list view: one size per element
  views,         // binary / utf8 view: 16 bytes per element
  variadic,      // binary / utf8 view: the data buffers (any number)
  type_ids,      // union: int8 type code per element
  union_offsets  // dense union: int32 offset into the selected child per element
};

CUARROW_EXPORT const char* to_string(buffer_role role) noexcept;

struct buffer_spec {
  buffer_role role;
  std::int32_t byte_width;  // bytes per element; 0 for bitmaps, data and variadic buffers
};

struct type_layout {
  /// The fixed buffers, in order (view types: validity and views; their
  /// variadic buffers follow).
  std::vector<buffer_spec> buffers;
  /// binary_view / utf8_view: any number of variadic buffers follow.
  bool variadic = false;
  /// The first buffer is a validity bitmap.
  bool has_validity = false;
};

/// The buffer layout of `type` (a dictionary: its indices').
CUARROW_EXPORT type_layout layout_of(const data_type& type);

}  // namespace cuarrow::arrow
