// FlatBuffers, read and written without the FlatBuffers library
// (docs/ipc-format.md says why).
//
// The reader gives the FlatBuffers verifier's guarantees as it goes: every
// offset, vtable, vector, string and scalar it touches is checked to lie
// inside the buffer and to be aligned before it is read; strings end in
// their NUL; nesting is at most `max_depth` tables deep and a buffer holds
// at most `max_tables` tables (limits, below).  Unlike the verifier, it says what is wrong
// and where: errors are ipc::invalid_message whose `where` is the path to
// the value, e.g. "Message.header(RecordBatch).buffers[3]".
//
// The builder lays bytes out exactly as FlatBuffers' C++ FlatBufferBuilder
// does (back to front, vtables deduplicated, fields equal to their default
// omitted, the buffer aligned to its largest scalar), so that a message
// built in the order Arrow C++ builds it is byte for byte what Arrow
// writes.  Internal: not installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cuarrow::ipc::fb {

/// Arrow C++'s verifier settings (cpp/src/arrow/ipc/metadata_internal.h,
/// ARROW-11559), so that what Arrow reads is read and what it refuses is
/// refused: tables nested at most 128 deep (FlatBuffers' default is 64: a
/// schema nests two tables a level), and at most 8 tables per byte of the
/// buffer (each table visited counts, so offsets shared to make a buffer
/// that is small but slow to walk are refused).
struct limits {
  int max_depth = 128;
  /// -1: 8 x the buffer's size.
  std::int64_t max_tables = -1;
};

/// The largest FlatBuffer (FLATBUFFERS_MAX_BUFFER_SIZE): offsets are
/// signed 32-bit.
inline constexpr std::size_t max_buffer_size = 0x7FFFFFFF;

class table;
class vector;

/// The buffer being read and what has been counted so far.  Tables and
/// vectors refer to it: it outlives them.
class reader {
 public:
  reader(std::span<const std::byte> bytes, limits l = {});

  /// The root table, named `name` in paths ("Message", "Footer").
  table root(const char* name);

  [[noreturn]] static void fail(const std::string& where, const std::string& reason);

  // Low-level checks, with the error naming `where`.
  void check_range(const std::string& where, std::uint64_t pos, std::uint64_t len, const char* what) const;
  void check_aligned(const std::string& where, std::uint64_t pos, std::uint64_t align, const char* what) const;
  /// The target of the uoffset at `pos` (checked: aligned, non-zero, forward, inside).
  std::uint32_t follow(const std::string& where, std::uint64_t pos) const;
  /// follow's target when every check passes, else nullopt (follow then
  /// says why): the error's path is built only when there is an error.
  std::optional<std::uint32_t> try_follow(std::uint64_t pos) const noexcept;
  table table_at(std::string path, std::uint32_t pos, int depth);

  template <class T>
  T load(std::uint64_t pos) const {
    T v;
    std::memcpy(&v, data_ + pos, sizeof(T));  // little-endian hosts only (metadata.cpp checks)
    return v;
  }
  std::size_t size() const noexcept { return size_; }
  const std::byte* data() const noexcept { return data_; }

 private:
  const std::byte* data_;
  std::size_t size_;
  limits limits_;
  std::int64_t tables_ = 0;
};

/// A verified table: its inline part and its vtable lie inside the buffer.
class table {
 public:
  const std::string& path() const noexcept { return path_; }
  /// The path of field `name` of this table.
  std::string field_path(std::string_view name) const;

  /// Whether the vtable names field `id`.
  bool has(int id) const;

  /// Scalar field `id`, `def` when absent (what FlatBuffers' accessors do).
  template <class T>
  T scalar(int id, std::string_view name, T def) const {
    static_assert(std::is_arithmetic_v<T>);
    const std::uint32_t at = field_pos(id);
    if (at == 0) return def;
    if (at % sizeof(T) != 0 || at > r_->size() || sizeof(T) > r_->size() - at) {
      // The path is built only for the error (a message has many scalars).
      const std::string where = field_path(name);
      r_->check_aligned(where, at, sizeof(T), "scalar");
      r_->check_range(where, at, sizeof(T), "scalar");
    }
    return r_->load<T>(at);
  }
  bool boolean(int id, std::string_view name, bool def) const { return scalar<std::uint8_t>(id, name, def) != 0; }

  /// Table field `id` (nullopt when absent).
  std::optional<table> child(int id, std::string_view name) const;
  /// Table field `id` of a union whose type field is `type_id`; `label`
  /// names the member in paths ("header(RecordBatch)").
  std::optional<table> union_member(int value_id, std::string_view label) const;
  /// String field `id` (nullopt when absent).
  std::optional<std::string_view> string(int id, std::string_view name) const;
  /// Vector field `id` of elements of `elem_size` bytes aligned to `align`.
  std::optional<vector> vec(int id, std::string_view name, std::size_t elem_size, std::size_t align) const;

 private:
  friend class reader;
  table(reader* r, std::string path, std::uint32_t pos, std::uint32_t vtable, std::uint16_t vtable_size, int depth)
      : r_(r), path_(std::move(path)), pos_(pos), vtable_(vtable), vtable_size_(vtable_size), depth_(depth) {}
  /// The position of field `id` in the buffer, 0 when absent.
  std::uint32_t field_pos(int id) const;
  std::optional<std::uint32_t> offset_target(int id, std::string_view name) const;

  reader* r_;
  std::string path_;
  std::uint32_t pos_;
  std::uint32_t vtable_;
  std::uint16_t vtable_size_;
  int depth_;
};

/// A verified vector: its length and elements lie inside the buffer.
class vector {
 public:
  std::uint32_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  std::string element_path(std::uint32_t i) const;

  template <class T>
  T scalar(std::uint32_t i) const {
    static_assert(std::is_arithmetic_v<T>);
    return r_->load<T>(element(i));
  }
  /// The position of element `i` (structs: read its members with load()).
  std::uint64_t element(std::uint32_t i) const { return data_ + std::uint64_t{i} * elem_size_; }
  template <class T>
  T load(std::uint64_t pos) const {
    return r_->load<T>(pos);
  }
  /// Element `i` of a vector of tables.
  table table_at(std::uint32_t i) const;
  /// Element `i` of a vector of strings.
  std::string_view string_at(std::uint32_t i) const;

 private:
  friend class table;
  vector(reader* r, std::string path, std::uint32_t data, std::uint32_t size, std::size_t elem_size, int depth)
      : r_(r), path_(std::move(path)), data_(data), size_(size), elem_size_(elem_size), depth_(depth) {}
  reader* r_;
  std::string path_;
  std::uint32_t data_;
  std::uint32_t size_;
  std::size_t elem_size_;
  int depth_;
};

/// The string at `pos` (checked: aligned length, bytes and NUL inside).
std::string_view read_string(const reader& r, const std::string& where, std::uint32_t pos);

// ---- builder ----------------------------------------------------------------

/// FlatBufferBuilder's layout, rebuilt: the buffer grows from its end
/// towards its start; an offset is the buffer's size when the object was
/// finished (FlatBufferBuilder's Offset<T>::o).  As FlatBufferBuilder's
/// vector_downward, the bytes lie at the end of one block, in their final
/// order, so that scalars, strings and vectors go in with one memcpy each
/// (a schema message of 17 fields took about 60% of the writer's C++
/// setup when bytes went in one at a time onto a vector that started
/// empty: bench/stream_launch_probe.py).
class builder {
 public:
  using offset = std::uint32_t;

  /// `initial`: the block's first size in bytes (it doubles as needed).
  explicit builder(std::size_t initial = 2048)
      : block_(std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(initial, 64))),
        cap_(std::max<std::size_t>(initial, 64)) {}

  void start_table();
  /// A scalar field, omitted when equal to its default (force_defaults off).
  template <class T>
  void add_scalar(int id, T value, T def) {
    static_assert(std::is_arithmetic_v<T>);
    if (value == def) return;
    push_scalar(value);
    track_field(id, size());
  }
  void add_bool(int id, bool value, bool def) { add_scalar<std::uint8_t>(id, value ? 1 : 0, def ? 1 : 0); }
  /// An offset field, omitted when `o` is 0 (no object).
  void add_offset(int id, offset o);
  offset end_table();

  offset create_string(std::string_view s);
  /// A vector of scalars (`count` elements of `elem_size` bytes, little-endian).
  offset create_scalar_vector(const void* data, std::size_t count, std::size_t elem_size);
  /// A vector of structs (`count` structs of `elem_size` bytes aligned to `align`).
  offset create_struct_vector(const void* data, std::size_t count, std::size_t elem_size, std::size_t align);
  offset create_offset_vector(const std::vector<offset>& offsets);

  /// The finished buffer: the root offset, the whole aligned to the
  /// largest alignment used.
  std::vector<std::byte> finish(offset root);

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(size_); }

 private:
  template <class T>
  void push_scalar(T value) {
    align(sizeof(T));
    std::memcpy(make_space(sizeof(T)), &value, sizeof(T));
  }
  void align(std::size_t n);
  void pre_align(std::size_t len, std::size_t n);
  /// Prepends `n` zero bytes.
  void pad(std::size_t n);
  /// Prepends `n` bytes (in their buffer order).
  void push_bytes(const void* p, std::size_t n);
  /// Room for `n` more bytes at the front: where they go.
  std::byte* make_space(std::size_t n) {
    if (n > cap_ - size_) grow(n);
    size_ += n;
    return block_.get() + (cap_ - size_);
  }
  void grow(std::size_t n);
  /// The byte at `location` (what size() was just after it was prepended),
  /// the object that starts there read forwards.
  std::byte* at(std::uint32_t location) const noexcept { return block_.get() + (cap_ - location); }
  void track_field(int id, std::uint32_t location);
  offset refer_to(offset o);

  // The buffer: the last size_ bytes of block_ (cap_ bytes).
  std::unique_ptr<std::byte[]> block_;
  std::size_t cap_;
  std::size_t size_ = 0;
  std::size_t minalign_ = 1;
  bool nested_ = false;
  std::uint32_t table_start_ = 0;
  std::vector<std::pair<int, std::uint32_t>> fields_;  // (voffset, location)
  int max_voffset_ = 0;
  std::vector<std::uint32_t> vtables_;  // locations of the vtables written, oldest first
};

}  // namespace cuarrow::ipc::fb
