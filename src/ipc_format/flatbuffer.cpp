#include "ipc_format/flatbuffer.hpp"

#include <algorithm>

#include "cuarrow/ipc/format.hpp"

namespace cuarrow::ipc::fb {

namespace {

std::string num(std::uint64_t v) { return std::to_string(v); }

}  // namespace

// ---- reader -----------------------------------------------------------------

reader::reader(std::span<const std::byte> bytes, limits l) : data_(bytes.data()), size_(bytes.size()), limits_(l) {
  if (limits_.max_tables < 0) limits_.max_tables = 8 * static_cast<std::int64_t>(size_);
}

void reader::fail(const std::string& where, const std::string& reason) { throw invalid_message(where, reason); }

void reader::check_range(const std::string& where, std::uint64_t pos, std::uint64_t len, const char* what) const {
  if (pos > size_ || len > size_ - pos) {
    fail(where, std::string(what) + " at byte " + num(pos) + " (" + num(len) + " bytes) runs past the end of the " +
                    num(size_) + "-byte FlatBuffer");
  }
}

void reader::check_aligned(const std::string& where, std::uint64_t pos, std::uint64_t align, const char* what) const {
  if (pos % align != 0)
    fail(where, std::string(what) + " at byte " + num(pos) + " is not aligned to " + num(align) + " bytes");
}

std::uint32_t reader::follow(const std::string& where, std::uint64_t pos) const {
  check_aligned(where, pos, 4, "offset");
  check_range(where, pos, 4, "offset");
  const auto o = load<std::uint32_t>(pos);
  if (o == 0) fail(where, "offset at byte " + num(pos) + " is 0");
  if (o > max_buffer_size) fail(where, "offset at byte " + num(pos) + " is negative (" + num(o) + ")");
  const std::uint64_t target = pos + o;
  if (target >= size_) {
    fail(where, "offset at byte " + num(pos) + " points to byte " + num(target) + ", past the end of the " +
                    num(size_) + "-byte FlatBuffer");
  }
  return static_cast<std::uint32_t>(target);
}

std::optional<std::uint32_t> reader::try_follow(std::uint64_t pos) const noexcept {
  if (pos % 4 != 0 || pos > size_ || 4 > size_ - pos) return std::nullopt;
  const auto o = load<std::uint32_t>(pos);
  if (o == 0 || o > max_buffer_size || pos + o >= size_) return std::nullopt;
  return static_cast<std::uint32_t>(pos + o);
}

table reader::root(const char* name) {
  if (size_ > max_buffer_size) {
    fail(name, num(size_) + " bytes: larger than any FlatBuffer (at most " + num(max_buffer_size) + ")");
  }
  if (size_ < 4) fail(name, "truncated: " + num(size_) + " bytes, a FlatBuffer starts with a 4-byte root offset");
  return table_at(name, follow(name, 0), 1);
}

table reader::table_at(std::string path, std::uint32_t pos, int depth) {
  if (depth > limits_.max_depth) fail(path, "tables nested deeper than " + num(limits_.max_depth));
  if (++tables_ > limits_.max_tables) fail(path, "more than " + num(limits_.max_tables) + " tables in one FlatBuffer");
  check_aligned(path, pos, 4, "table");
  check_range(path, pos, 4, "table");
  const std::int64_t vtable = std::int64_t{pos} - load<std::int32_t>(pos);
  if (vtable < 0 || static_cast<std::uint64_t>(vtable) + 2 > size_) {
    fail(path, "the vtable of the table at byte " + num(pos) + " would be at byte " + std::to_string(vtable) +
                   ", outside the " + num(size_) + "-byte FlatBuffer");
  }
  const auto vt = static_cast<std::uint32_t>(vtable);
  check_aligned(path, vt, 2, "vtable");
  const auto vt_size = load<std::uint16_t>(vt);
  if (vt_size % 2 != 0) fail(path, "vtable at byte " + num(vt) + " has an odd size (" + num(vt_size) + ")");
  check_range(path, vt, vt_size, "vtable");
  return table(this, std::move(path), pos, vt, vt_size, depth);
}

std::string_view read_string(const reader& r, const std::string& where, std::uint32_t pos) {
  r.check_aligned(where, pos, 4, "string");
  r.check_range(where, pos, 4, "string length");
  const auto n = r.load<std::uint32_t>(pos);
  if (n >= max_buffer_size) reader::fail(where, "string of " + num(n) + " bytes is larger than any FlatBuffer");
  r.check_range(where, std::uint64_t{pos} + 4, std::uint64_t{n} + 1, "string and its NUL");
  if (r.load<std::uint8_t>(std::uint64_t{pos} + 4 + n) != 0) {
    reader::fail(where, "string of " + num(n) + " bytes at byte " + num(pos) + " does not end in a NUL");
  }
  return {reinterpret_cast<const char*>(r.data() + pos + 4), n};
}

// ---- table ------------------------------------------------------------------

std::string table::field_path(std::string_view name) const {
  std::string p = path_;
  p += '.';
  p += name;
  return p;
}

std::uint32_t table::field_pos(int id) const {
  const std::uint32_t vo = 4 + 2 * static_cast<std::uint32_t>(id);
  if (vo + 2 > vtable_size_) return 0;
  const auto off = r_->load<std::uint16_t>(std::uint64_t{vtable_} + vo);
  return off == 0 ? 0 : pos_ + off;
}

bool table::has(int id) const { return field_pos(id) != 0; }

std::optional<std::uint32_t> table::offset_target(int id, std::string_view name) const {
  const std::uint32_t at = field_pos(id);
  if (at == 0) return std::nullopt;
  if (const auto target = r_->try_follow(at)) return target;
  return r_->follow(field_path(name), at);  // throws, naming the field
}

std::optional<table> table::child(int id, std::string_view name) const {
  const auto t = offset_target(id, name);
  if (!t) return std::nullopt;
  return r_->table_at(field_path(name), *t, depth_ + 1);
}

std::optional<table> table::union_member(int value_id, std::string_view label) const { return child(value_id, label); }

std::optional<std::string_view> table::string(int id, std::string_view name) const {
  const auto t = offset_target(id, name);
  if (!t) return std::nullopt;
  return read_string(*r_, field_path(name), *t);
}

std::optional<vector> table::vec(int id, std::string_view name, std::size_t elem_size, std::size_t align) const {
  const auto t = offset_target(id, name);
  if (!t) return std::nullopt;
  std::string where = field_path(name);
  r_->check_aligned(where, *t, 4, "vector");
  r_->check_range(where, *t, 4, "vector length");
  const auto n = r_->load<std::uint32_t>(*t);
  if (n >= max_buffer_size / elem_size) {
    reader::fail(where,
                 "vector of " + num(n) + " elements of " + num(elem_size) + " bytes is larger than any FlatBuffer");
  }
  const std::uint64_t data = std::uint64_t{*t} + 4;
  r_->check_range(where, data, std::uint64_t{n} * elem_size, ("vector of " + num(n) + " elements").c_str());
  if (n > 0 && align > 4) r_->check_aligned(where, data, align, "vector data");
  return vector(r_, std::move(where), static_cast<std::uint32_t>(data), n, elem_size, depth_);
}

// ---- vector -----------------------------------------------------------------

std::string vector::element_path(std::uint32_t i) const { return path_ + "[" + num(i) + "]"; }

table vector::table_at(std::uint32_t i) const {
  std::string where = element_path(i);
  const std::uint32_t target = r_->follow(where, element(i));
  return r_->table_at(std::move(where), target, depth_ + 1);
}

std::string_view vector::string_at(std::uint32_t i) const {
  const std::string where = element_path(i);
  return read_string(*r_, where, r_->follow(where, element(i)));
}

// ---- builder ----------------------------------------------------------------

namespace {

std::size_t padding_bytes(std::size_t size, std::size_t align) { return (~size + 1) & (align - 1); }

}  // namespace

void builder::grow(std::size_t n) {
  std::size_t cap = cap_ * 2;  // as vector_downward's
  while (cap - size_ < n) cap *= 2;
  auto block = std::make_unique_for_overwrite<std::byte[]>(cap);
  if (size_ > 0) std::memcpy(block.get() + (cap - size_), block_.get() + (cap_ - size_), size_);
  block_ = std::move(block);
  cap_ = cap;
}

void builder::pad(std::size_t n) {
  if (n > 0) std::memset(make_space(n), 0, n);
}

void builder::align(std::size_t n) {
  minalign_ = std::max(minalign_, n);
  pad(padding_bytes(size_, n));
}

void builder::pre_align(std::size_t len, std::size_t n) {
  if (len == 0) return;
  minalign_ = std::max(minalign_, n);
  pad(padding_bytes(size_ + len, n));
}

void builder::push_bytes(const void* p, std::size_t n) {
  if (n > 0) std::memcpy(make_space(n), p, n);
}

void builder::track_field(int id, std::uint32_t location) {
  const int vo = 4 + 2 * id;
  fields_.emplace_back(vo, location);
  max_voffset_ = std::max(max_voffset_, vo);
}

builder::offset builder::refer_to(offset o) {
  align(4);
  return size() - o + 4;
}

void builder::start_table() {
  nested_ = true;
  table_start_ = size();
  fields_.clear();
  max_voffset_ = 0;
}

void builder::add_offset(int id, offset o) {
  if (o == 0) return;
  const offset rel = refer_to(o);
  push_scalar<std::uint32_t>(rel);
  track_field(id, size());
}

builder::offset builder::end_table() {
  push_scalar<std::int32_t>(0);
  const std::uint32_t table_loc = size();
  // The vtable: its size, the table's inline size, one voffset per field
  // up to the largest used (at least the two header entries).
  const int vt_size = std::max(max_voffset_ + 2, 4);
  pad(static_cast<std::size_t>(vt_size));
  const std::uint32_t vt_loc = size();
  std::byte* const vt = at(vt_loc);
  auto put16 = [&](int k, std::uint16_t v) { std::memcpy(vt + k, &v, 2); };
  put16(0, static_cast<std::uint16_t>(vt_size));
  put16(2, static_cast<std::uint16_t>(table_loc - table_start_));
  for (const auto& [vo, loc] : fields_) put16(vo, static_cast<std::uint16_t>(table_loc - loc));
  fields_.clear();
  max_voffset_ = 0;

  std::uint32_t vt_use = vt_loc;
  for (const std::uint32_t old : vtables_) {
    std::uint16_t old_size;
    std::memcpy(&old_size, at(old), 2);
    if (old_size != vt_size || std::memcmp(at(old), vt, static_cast<std::size_t>(vt_size)) != 0) continue;
    vt_use = old;
    size_ = table_loc;  // drop the new vtable
    break;
  }
  if (vt_use == size()) vtables_.push_back(vt_use);
  const std::int32_t soffset = static_cast<std::int32_t>(vt_use) - static_cast<std::int32_t>(table_loc);
  std::memcpy(at(table_loc), &soffset, 4);
  nested_ = false;
  return table_loc;
}

builder::offset builder::create_string(std::string_view s) {
  pre_align(s.size() + 1, 4);
  pad(1);
  push_bytes(s.data(), s.size());
  push_scalar<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
  return size();
}

builder::offset builder::create_scalar_vector(const void* data, std::size_t count, std::size_t elem_size) {
  pre_align(count * elem_size, 4);
  pre_align(count * elem_size, elem_size);
  if (count > 0) push_bytes(data, count * elem_size);
  push_scalar<std::uint32_t>(static_cast<std::uint32_t>(count));
  return size();
}

builder::offset builder::create_struct_vector(const void* data, std::size_t count, std::size_t elem_size,
                                              std::size_t align_to) {
  pre_align(count * elem_size, 4);
  pre_align(count * elem_size, align_to);
  if (count > 0) push_bytes(data, count * elem_size);
  push_scalar<std::uint32_t>(static_cast<std::uint32_t>(count));
  return size();
}

builder::offset builder::create_offset_vector(const std::vector<offset>& offsets) {
  pre_align(offsets.size() * 4, 4);
  for (std::size_t i = offsets.size(); i > 0; --i) push_scalar<std::uint32_t>(refer_to(offsets[i - 1]));
  push_scalar<std::uint32_t>(static_cast<std::uint32_t>(offsets.size()));
  return size();
}

std::vector<std::byte> builder::finish(offset root) {
  pre_align(4, minalign_);
  push_scalar<std::uint32_t>(refer_to(root));
  return std::vector<std::byte>(at(size()), at(size()) + size_);
}

}  // namespace cuarrow::ipc::fb
