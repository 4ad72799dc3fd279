// Typed views of Arrow arrays for CUDA C++ kernels (and host code).
//
// The view structs are trivially copyable aggregates of pointers and
// lengths: pass them to a kernel by value.  Their members are
// `__host__ __device__` under nvcc (CUARROW_HD) and plain inline functions
// otherwise, so the same header serves kernels, host code and tests.
// Element i is the array's logical element i: the array offset is already
// applied (values, offsets) or carried as a bit offset (bitmaps).
//
//   primitive_view<T>        fixed-width values (int32_t, double, ...)
//   boolean_view             bit-packed booleans
//   binary_array_view<O>     binary / utf8 (O = int32_t) and large forms
//                            (O = int64_t): get(i) -> device_string_view
//   list_array_view<O>       list / map (int32_t), large list (int64_t):
//                            begin(i) / end(i) / size(i) index the child
//                            array's logical elements (make a view of
//                            array.children[0] for the values)
//
// The make_*_view factories are host functions taking an array_data: they
// check the type and the sizes of the buffers the view dereferences and
// throw invalid_argument (wrong type), invalid_data (buffers too small).
// They do not read memory, so they work on device arrays; dereference a
// view only where its memory is accessible (a device array's views in
// kernels).  The offsets' values are not checked here: validate untrusted
// arrays (to_device and the importers do) before running kernels on them.
//
// Unchecked accessors (operator[], get, begin, end) expect 0 <= i < length;
// value_or() and in_bounds() check.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CUARROW_HD __host__ __device__ __forceinline__
#else
#define CUARROW_HD inline
#endif

namespace cuarrow::arrow {

/// Bytes of a binary / utf8 value.
struct device_string_view {
  const char* data;
  std::int64_t size;
  CUARROW_HD std::int64_t length() const { return size; }
  CUARROW_HD char operator[](std::int64_t i) const { return data[i]; }
};

/// Validity of element i: bit (offset + i) of the bitmap; no bitmap = valid.
struct validity_view {
  const std::uint8_t* bits;  // null when the array has no nulls
  std::int64_t offset;       // bit offset (the array offset)
  CUARROW_HD bool is_valid(std::int64_t i) const {
    if (bits == nullptr) return true;
    const std::int64_t b = offset + i;
    return (bits[b >> 3] >> (b & 7)) & 1;
  }
};

template <class T>
struct primitive_view {
  const T* values;  // values[0] is element 0 (offset applied)
  validity_view validity;
  std::int64_t length;

  CUARROW_HD std::int64_t size() const { return length; }
  CUARROW_HD bool in_bounds(std::int64_t i) const { return i >= 0 && i < length; }
  CUARROW_HD bool is_valid(std::int64_t i) const { return validity.is_valid(i); }
  CUARROW_HD bool is_null(std::int64_t i) const { return !validity.is_valid(i); }
  CUARROW_HD const T& operator[](std::int64_t i) const { return values[i]; }
  /// The value, or `fallback` when i is out of bounds or the element is null.
  CUARROW_HD T value_or(std::int64_t i, T fallback) const { return in_bounds(i) && is_valid(i) ? values[i] : fallback; }
};

struct boolean_view {
  const std::uint8_t* bits;  // value bits
  std::int64_t offset;       // bit offset of element 0
  validity_view validity;
  std::int64_t length;

  CUARROW_HD std::int64_t size() const { return length; }
  CUARROW_HD bool in_bounds(std::int64_t i) const { return i >= 0 && i < length; }
  CUARROW_HD bool is_valid(std::int64_t i) const { return validity.is_valid(i); }
  CUARROW_HD bool operator[](std::int64_t i) const {
    const std::int64_t b = offset + i;
    return (bits[b >> 3] >> (b & 7)) & 1;
  }
  CUARROW_HD bool value_or(std::int64_t i, bool fallback) const {
    return in_bounds(i) && is_valid(i) ? (*this)[i] : fallback;
  }
};

template <class Offset>
struct binary_array_view {
  const Offset* offsets;  // offsets[0] is element 0's start (offset applied)
  const char* data;
  validity_view validity;
  std::int64_t length;

  CUARROW_HD std::int64_t size() const { return length; }
  CUARROW_HD bool in_bounds(std::int64_t i) const { return i >= 0 && i < length; }
  CUARROW_HD bool is_valid(std::int64_t i) const { return validity.is_valid(i); }
  CUARROW_HD std::int64_t value_length(std::int64_t i) const {
    return static_cast<std::int64_t>(offsets[i + 1] - offsets[i]);
  }
  CUARROW_HD device_string_view get(std::int64_t i) const {
    return device_string_view{data + offsets[i], static_cast<std::int64_t>(offsets[i + 1] - offsets[i])};
  }
  /// get(i), or an empty value when out of bounds or null.
  CUARROW_HD device_string_view value_or_empty(std::int64_t i) const {
    return in_bounds(i) && is_valid(i) ? get(i) : device_string_view{data, 0};
  }
};

template <class Offset>
struct list_array_view {
  const Offset* offsets;  // offsets[0] is element 0's start (offset applied)
  validity_view validity;
  std::int64_t length;

  CUARROW_HD std::int64_t size() const { return length; }
  CUARROW_HD bool in_bounds(std::int64_t i) const { return i >= 0 && i < length; }
  CUARROW_HD bool is_valid(std::int64_t i) const { return validity.is_valid(i); }
  /// Child elements [begin(i), end(i)) of list i.
  CUARROW_HD std::int64_t begin(std::int64_t i) const { return static_cast<std::int64_t>(offsets[i]); }
  CUARROW_HD std::int64_t end(std::int64_t i) const { return static_cast<std::int64_t>(offsets[i + 1]); }
  CUARROW_HD std::int64_t list_size(std::int64_t i) const { return end(i) - begin(i); }
};

using string_array_view = binary_array_view<std::int32_t>;
using large_string_array_view = binary_array_view<std::int64_t>;

}  // namespace cuarrow::arrow

// ---- host-side factories --------------------------------------------------------
#include <string>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/error.hpp"

namespace cuarrow::arrow {
namespace view_detail {

inline validity_view validity_of(const array_data& a) {
  if (a.buffers.empty() || a.buffers[0].size() == 0) return validity_view{nullptr, 0};
  return validity_view{reinterpret_cast<const std::uint8_t*>(a.buffers[0].address()), a.offset};
}

inline void need_bytes(const array_data& a, std::size_t i, std::int64_t bytes, const char* what) {
  if (a.length == 0) return;
  if (a.buffers.size() <= i || a.buffers[i].size() < bytes) {
    throw invalid_data("array", std::string(what) + " buffer too small for a view: needs " + std::to_string(bytes) +
                                    " bytes for " + std::to_string(a.length) + " values at offset " +
                                    std::to_string(a.offset) + ", has " +
                                    std::to_string(a.buffers.size() > i ? a.buffers[i].size() : 0));
  }
  if (a.buffers.size() > 0 && a.buffers[0].size() > 0 && a.buffers[0].size() * 8 < a.offset + a.length) {
    throw invalid_data("array", "validity buffer too small for a view");
  }
}

[[noreturn]] inline void wrong_type(const array_data& a, const char* view, const std::string& want) {
  throw invalid_argument(std::string(view) + " needs " + want + ", not " + a.type.to_string());
}

}  // namespace view_detail

/// A view of a fixed-width array whose values are sizeof(T) bytes (integers,
/// floats, dates, times, timestamps, durations, decimals with a matching T,
/// dictionary indices).  Throws invalid_argument when sizeof(T) does not
/// match the type's width.
template <class T>
primitive_view<T> make_primitive_view(const array_data& a) {
  const int bits = bit_width(a.type);
  if (a.type.id == type_id::boolean || bits == 0 || a.type.id == type_id::fixed_size_binary ||
      static_cast<std::size_t>(bits) != sizeof(T) * 8) {
    view_detail::wrong_type(a, "make_primitive_view<T>",
                            "a fixed-width type of " + std::to_string(sizeof(T)) + " bytes");
  }
  view_detail::need_bytes(a, 1, (a.offset + a.length) * static_cast<std::int64_t>(sizeof(T)), "values");
  const T* values = a.buffers[1].size() > 0 ? reinterpret_cast<const T*>(a.buffers[1].address()) + a.offset : nullptr;
  return primitive_view<T>{values, view_detail::validity_of(a), a.length};
}

inline boolean_view make_boolean_view(const array_data& a) {
  if (a.type.id != type_id::boolean) view_detail::wrong_type(a, "make_boolean_view", "a boolean array");
  view_detail::need_bytes(a, 1, (a.offset + a.length + 7) / 8, "values");
  return boolean_view{reinterpret_cast<const std::uint8_t*>(a.buffers[1].address()), a.offset,
                      view_detail::validity_of(a), a.length};
}

/// binary / utf8 with Offset = int32_t; large_binary / large_utf8 with int64_t.
template <class Offset = std::int32_t>
binary_array_view<Offset> make_binary_view(const array_data& a) {
  const bool small = a.type.id == type_id::binary || a.type.id == type_id::utf8;
  const bool large = a.type.id == type_id::large_binary || a.type.id == type_id::large_utf8;
  if (!(sizeof(Offset) == 4 ? small : large)) {
    view_detail::wrong_type(
        a, "make_binary_view<Offset>",
        sizeof(Offset) == 4 ? "binary or utf8 (int32_t offsets)" : "large_binary or large_utf8 (int64_t offsets)");
  }
  view_detail::need_bytes(a, 1, (a.offset + a.length + 1) * static_cast<std::int64_t>(sizeof(Offset)), "offsets");
  const Offset* offsets = a.length > 0 ? reinterpret_cast<const Offset*>(a.buffers[1].address()) + a.offset : nullptr;
  const char* data = a.buffers.size() > 2 ? reinterpret_cast<const char*>(a.buffers[2].address()) : nullptr;
  return binary_array_view<Offset>{offsets, data, view_detail::validity_of(a), a.length};
}

/// list / map with Offset = int32_t; large_list with int64_t.
template <class Offset = std::int32_t>
list_array_view<Offset> make_list_view(const array_data& a) {
  const bool small = a.type.id == type_id::list || a.type.id == type_id::map;
  const bool large = a.type.id == type_id::large_list;
  if (!(sizeof(Offset) == 4 ? small : large)) {
    view_detail::wrong_type(a, "make_list_view<Offset>",
                            sizeof(Offset) == 4 ? "list or map (int32_t offsets)" : "large_list (int64_t offsets)");
  }
  view_detail::need_bytes(a, 1, (a.offset + a.length + 1) * static_cast<std::int64_t>(sizeof(Offset)), "offsets");
  const Offset* offsets = a.length > 0 ? reinterpret_cast<const Offset*>(a.buffers[1].address()) + a.offset : nullptr;
  return list_array_view<Offset>{offsets, view_detail::validity_of(a), a.length};
}

}  // namespace cuarrow::arrow
