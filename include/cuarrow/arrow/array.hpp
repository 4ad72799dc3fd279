// Arrow arrays made of cuarrow buffers: array_data, record batches.
//
// array_data is the owning model of one Arrow array, the same shape as the C
// Data Interface's ArrowArray: a type, a length, an offset (in elements,
// applied to every buffer of this array), a null count (-1 = unknown),
// buffers, children and a dictionary.  Its buffers are cuarrow::buffer
// handles, so an array_data keeps its memory alive and knows where it lives;
// the whole tree normally lives on one device (or on the host).
//
// Buffers are listed in the layout's order (layout_of); an absent buffer
// (a validity bitmap of an array without nulls, a buffer of size 0) is a
// default-constructed, empty buffer.  binary_view / utf8_view arrays hold
// [validity, views, data buffer 0, data buffer 1, ...]: the variadic sizes
// buffer of the C interface is not part of the model (each buffer knows its
// size) and is produced and consumed by export/import.
//
// array_data is a value: copying one copies handles, not memory.  Nothing
// here reads device memory but compute_null_count (which copies the bits
// it counts); equals() reads host-accessible memory only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuarrow/arrow/type.hpp"
#include "cuarrow/buffer.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::arrow {

// ---- arrays ---------------------------------------------------------------

struct CUARROW_EXPORT array_data {
  data_type type;
  std::int64_t length = 0;
  std::int64_t offset = 0;
  /// Number of null elements; -1 when unknown.
  std::int64_t null_count = 0;
  std::vector<buffer> buffers;
  /// One per child field of the type: children[i] is the array of
  /// type.children[i] (its name, nullability and metadata).
  std::vector<array_data> children;
  /// dictionary arrays: the values (of type.values()); null otherwise.
  std::shared_ptr<const array_data> dictionary;

  /// A zero-copy slice of `len` elements from `off` (relative to this
  /// array's offset).  The null count becomes unknown (-1) unless it was 0.
  /// Throws out_of_range.
  array_data slice(std::int64_t off, std::int64_t len) const;
  /// The same array over the same buffers without its validity bitmap (null
  /// count 0): null slots show whatever values they hold.
  array_data without_validity() const;
  /// Whether the array has a validity bitmap: its type has one (not null,
  /// unions, run-end encoded) and buffers[0] is not empty (an absent bitmap
  /// means no nulls).
  bool has_validity_bitmap() const;
  /// The indices of a dictionary array: an integer array over the same
  /// buffers.  Throws invalid_argument for other arrays.
  array_data dictionary_indices() const;
};

/// Where the memory of an array tree lives.
struct placement {
  device_type type = device_type::cpu;
  int device_id = -1;
  /// Memory of `type` on device `device_id`; host (cpu) memory belongs to
  /// no device, so its id is -1 whatever is given (the C Device Data
  /// Interface's convention), and equal placements compare equal.
  static constexpr placement of(device_type type, int device_id) noexcept {
    return {type, type == device_type::cpu ? -1 : device_id};
  }
  /// Where `b`'s memory is.
  static placement of(const buffer& b) noexcept { return of(b.type(), b.device_id()); }
  friend bool operator==(const placement&, const placement&) = default;
};

/// The placement shared by every non-empty buffer of the tree (children,
/// dictionaries and variadic buffers included); cpu/-1 when there is none.
/// Throws invalid_data naming the first buffer that lives elsewhere.
CUARROW_EXPORT placement placement_of(const array_data& array);
/// The same, or `if_no_buffers` for a tree without any non-empty buffer (a
/// null array, an empty one), which has no memory to say where it lives.
CUARROW_EXPORT placement placement_of(const array_data& array, const placement& if_no_buffers);
/// The context to work on the tree's memory in: that of its first
/// non-empty buffer that has one (device, pinned or managed memory), primary
/// or not.  For a tree without any non-empty buffer, the primary context of
/// the device of `if_no_buffers` (where its holder declares it to be).
/// nullopt for host memory.
CUARROW_EXPORT std::optional<context> context_of(const array_data& array, const placement& if_no_buffers = {});

/// A record batch: a schema and one array per field, all of num_rows rows.
struct CUARROW_EXPORT record_batch {
  arrow::schema schema;
  std::int64_t num_rows = 0;
  std::vector<array_data> columns;

  /// The batch as a non-null struct array (how the C interfaces carry it).
  array_data to_struct() const;
  /// Throws invalid_data when `array` is not a struct array without nulls
  /// at offset 0 whose children all have `length` elements.
  static record_batch from_struct(const array_data& array, key_value_metadata metadata = {});
  /// The same, taking the columns and fields over from `array` (left valid
  /// but unspecified).
  static record_batch from_struct(array_data&& array, key_value_metadata metadata = {});

  /// A zero-copy slice of `len` rows from `off` (every column sliced).
  /// Throws out_of_range.
  record_batch slice(std::int64_t off, std::int64_t len) const;
  /// The same columns under `other`, whose fields have the columns' types
  /// (other names, nullability or metadata).  Throws invalid_argument.
  record_batch with_schema(arrow::schema other) const;
};

/// Throws invalid_argument unless `f` can label `a`: its type is a's type
/// (another name, nullability or metadata), what with_schema asks of each
/// column.
CUARROW_EXPORT void check_field_of(const field& f, const array_data& a);

// ---- arrays and batches as their holders declare them --------------------

/// An array with the field it is a value of (name, nullability, metadata:
/// an extension type lives there; field.type is data.type) and the
/// placement its holder declared, which an array without any non-empty
/// buffer (a null array, an empty one) has no memory to say: what such an
/// array reports and exports.  A device array, or a column of a batch, as
/// the Python package holds it.  A value: copying one copies handles.
struct CUARROW_EXPORT placed_array {
  arrow::field field;
  array_data data;
  placement declared;

  /// Where the data lives: placement_of(data, declared).  Throws
  /// invalid_data for a tree whose buffers live in different places.
  placement where() const;
  /// The context to work on the data in (context_of(data, declared));
  /// nullopt for host memory.
  std::optional<cuarrow::context> context() const;
  /// The children, each under its field of the type.
  std::vector<placed_array> children() const;
  /// A dictionary array's values under an unnamed nullable field of the
  /// value type; nullopt for other arrays.
  std::optional<placed_array> dictionary() const;
  /// A dictionary array's indices (array_data::dictionary_indices) under
  /// the array's name and nullability.  Throws invalid_argument for other
  /// arrays.
  placed_array indices() const;
  /// A zero-copy slice (array_data::slice) under the same field.  Throws
  /// out_of_range.
  placed_array slice(std::int64_t off, std::int64_t len) const;
  /// The same buffers without the validity bitmap (array_data::without_validity).
  placed_array without_validity() const;
  /// The same data under `f` (another name, nullability or metadata).
  /// Throws invalid_argument unless f's type is the array's
  /// (check_field_of).
  placed_array with_field(arrow::field f) const;
};

/// A record batch with the placement its holder declared (what a batch
/// without any non-empty buffer reports).
struct CUARROW_EXPORT placed_batch {
  record_batch batch;
  placement declared;

  /// Where the columns live (placement_of their struct, or `declared`).
  /// Throws invalid_data for columns that live in different places.
  placement where() const;
  /// The context to work on the columns in; nullopt for host memory.
  std::optional<cuarrow::context> context() const;
  /// The columns, each under its field of the schema.
  std::vector<placed_array> columns() const;
  /// record_batch::slice.  Throws out_of_range.
  placed_batch slice(std::int64_t off, std::int64_t len) const;
  /// record_batch::with_schema.  Throws invalid_argument.
  placed_batch with_schema(arrow::schema other) const;
};

// ---- comparison -----------------------------------------------------------

/// True when `a` and `b` hold the same logical values: equal types, lengths,
/// validity and values with offsets applied, whatever the physical layout
/// (offsets, padding, bytes under null slots, dictionary layout aside from
/// the dictionary type, run lengths).  Both must be in host-accessible memory
/// (host_access_error otherwise); a malformed array may be read out of
/// bounds, so validate untrusted input first.  When they differ and
/// `difference` is given it receives where ("child 0 ("item"), element 3:
/// 7 != 8").
CUARROW_EXPORT bool equals(const array_data& a, const array_data& b, std::string* difference = nullptr);
CUARROW_EXPORT bool equals(const record_batch& a, const record_batch& b, std::string* difference = nullptr);

/// Number of null elements, counting from the validity bitmap when
/// null_count is unknown.  Types without a validity bitmap (null, unions,
/// run-end encoded) report their own rule: null arrays are all null, the
/// others 0.  A bitmap in device memory is counted on the host: the bytes
/// holding the array's bits are copied on `s` (synchronously).  A pinned or
/// managed bitmap is read at once, without waiting for `s`: work writing it
/// must be complete.  A bitmap too small for offset + length is
/// invalid_data; copy failures cuda_error.
CUARROW_EXPORT std::int64_t compute_null_count(const array_data& array, stream_view s);
/// The same on the legacy default stream.
CUARROW_EXPORT std::int64_t compute_null_count(const array_data& array);

}  // namespace cuarrow::arrow
