// array_data helpers: slicing, placement, record batches, logical equality.
#include "cuarrow/arrow/array.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "arrow_internal.hpp"
#include "cuarrow/copy.hpp"

namespace cuarrow::arrow {

array_data array_data::slice(std::int64_t off, std::int64_t len) const {
  if (off < 0 || len < 0 || off > length || len > length - off) {
    throw out_of_range("array_data::slice(" + std::to_string(off) + ", " + std::to_string(len) +
                       ") is outside an array of " + std::to_string(length) + " elements");
  }
  array_data out = *this;
  out.offset = offset + off;
  out.length = len;
  if (type.id == type_id::null) {
    out.null_count = len;
  } else if (null_count != 0) {
    out.null_count = -1;
  }
  return out;
}

array_data array_data::without_validity() const {
  array_data out = *this;
  if (layout_of(type).has_validity && !out.buffers.empty()) out.buffers[0] = buffer();
  out.null_count = 0;
  return out;
}

bool array_data::has_validity_bitmap() const {
  return layout_of(type).has_validity && !buffers.empty() && buffers[0].size() > 0;
}

array_data array_data::dictionary_indices() const {
  if (type.id != type_id::dictionary) {
    throw invalid_argument("indices: not a dictionary array (" + type.to_string() + ")");
  }
  array_data out = *this;
  out.type = data_type(type.index_type);
  out.dictionary = nullptr;
  return out;
}

// ---- placement ---------------------------------------------------------------------

namespace {

std::string where(const placement& p) {
  std::string s = to_string(p.type);
  if (p.type != device_type::cpu) s += ":" + std::to_string(p.device_id);
  return s;
}

void collect_placement(const array_data& a, const std::string& path, std::optional<placement>& found,
                       std::string& found_at) {
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    const buffer& b = a.buffers[i];
    if (b.size() == 0) continue;
    const placement p = placement::of(b.type(), b.device_id());
    if (!found) {
      found = p;
      found_at = path + " buffer " + std::to_string(i);
    } else if (!(*found == p)) {
      throw invalid_data(path, "buffer " + std::to_string(i) + " is in " + where(p) + " memory but " + found_at +
                                   " is in " + where(*found) +
                                   " memory; an array must live on one device (copy it with to_device or to_host)");
    }
  }
  for (std::size_t i = 0; i < a.children.size(); ++i) {
    collect_placement(a.children[i], detail::child_path(path, i, a.type), found, found_at);
  }
  if (a.dictionary) collect_placement(*a.dictionary, detail::dictionary_path(path), found, found_at);
}

// collect_placement without the paths: false at the first buffer that
// lives elsewhere than those before it (then collect_placement says where).
// Every batch read or moved asks this of each column; the paths cost
// string allocations per buffer.
bool one_placement(const array_data& a, std::optional<placement>& found) {
  for (const buffer& b : a.buffers) {
    if (b.size() == 0) continue;
    const placement p = placement::of(b.type(), b.device_id());
    if (!found) found = p;
    else if (!(*found == p)) return false;
  }
  for (const array_data& c : a.children) {
    if (!one_placement(c, found)) return false;
  }
  return !a.dictionary || one_placement(*a.dictionary, found);
}

const context* find_context(const array_data& a) {
  for (const buffer& b : a.buffers) {
    if (b.size() > 0 && b.get_context()) return &*b.get_context();
  }
  for (const array_data& c : a.children) {
    if (const context* found = find_context(c)) return found;
  }
  return a.dictionary ? find_context(*a.dictionary) : nullptr;
}

}  // namespace

std::optional<context> context_of(const array_data& array, const placement& if_no_buffers) {
  if (const context* found = find_context(array)) return *found;
  const placement where = placement_of(array, if_no_buffers);
  if (where.type == device_type::cpu) return std::nullopt;
  return detail::device_context(where.device_id);
}

context detail::device_context(int device_id) { return context::get(device_id < 0 ? 0 : device_id); }

placement placement_of(const array_data& array) { return placement_of(array, placement{}); }

placement placement_of(const array_data& array, const placement& if_no_buffers) {
  std::optional<placement> found;
  if (one_placement(array, found)) return found.value_or(if_no_buffers);
  found.reset();
  std::string found_at;
  collect_placement(array, "array", found, found_at);  // throws, naming the buffers
  return found.value_or(if_no_buffers);
}

// ---- record batches -------------------------------------------------------------------

array_data record_batch::to_struct() const {
  array_data a;
  a.type = struct_(schema.fields);
  a.length = num_rows;
  a.offset = 0;
  a.null_count = 0;
  a.buffers = {buffer()};
  a.children = columns;
  return a;
}

record_batch record_batch::from_struct(const array_data& array, key_value_metadata metadata) {
  return from_struct(array_data(array), std::move(metadata));
}

record_batch record_batch::from_struct(array_data&& array, key_value_metadata metadata) {
  if (array.type.id != type_id::struct_) {
    throw invalid_data("record batch", "a record batch travels as a struct array, not " + array.type.to_string());
  }
  if (array.null_count > 0) {
    throw invalid_data("record batch", "the struct array has " + std::to_string(array.null_count) +
                                           " null rows; a record batch has none");
  }
  if (array.null_count < 0 && array.has_validity_bitmap() &&
      (!array.buffers[0].is_host_accessible() || compute_null_count(array) > 0)) {
    throw invalid_data("record batch",
                       "the struct array may have null rows (unknown null count with a validity "
                       "bitmap); a record batch has none");
  }
  if (array.children.size() != array.type.children.size()) {
    throw invalid_data("record batch", std::to_string(array.children.size()) + " columns for " +
                                           std::to_string(array.type.children.size()) + " fields");
  }
  // The fields and columns move over: a batch of a thousand columns is not
  // copied on its way in.
  record_batch b;
  b.schema.fields = std::move(array.type.children);
  b.schema.metadata = std::move(metadata);
  b.num_rows = array.length;
  b.columns = std::move(array.children);
  for (std::size_t i = 0; i < b.columns.size(); ++i) {
    const std::int64_t need = array.offset + array.length;
    if (b.columns[i].length < need) {
      throw invalid_data(
          detail::column_path(b.schema.fields[i].name),
          "column has " + std::to_string(b.columns[i].length) + " rows, the batch needs " + std::to_string(need));
    }
    if (array.offset != 0 || b.columns[i].length != b.num_rows) {
      b.columns[i] = b.columns[i].slice(array.offset, b.num_rows);
    }
  }
  return b;
}

record_batch record_batch::slice(std::int64_t off, std::int64_t len) const {
  if (off < 0 || len < 0 || off > num_rows || len > num_rows - off) {
    throw out_of_range("slice(" + std::to_string(off) + ", " + std::to_string(len) + ") is outside a record batch of " +
                       std::to_string(num_rows) + " rows");
  }
  record_batch out = *this;
  out.num_rows = len;
  for (array_data& c : out.columns) c = c.slice(off, len);
  return out;
}

record_batch record_batch::with_schema(arrow::schema other) const {
  if (other.fields.size() != schema.fields.size()) {
    throw invalid_argument("the requested schema has " + std::to_string(other.fields.size()) +
                           " fields, the batch has " + std::to_string(schema.fields.size()) + " columns");
  }
  for (std::size_t i = 0; i < other.fields.size(); ++i) {
    if (!(other.fields[i].type == schema.fields[i].type)) {
      throw invalid_argument("column " + std::to_string(i) + " (\"" + schema.fields[i].name +
                             "\"): the requested type " + other.fields[i].type.to_string() +
                             " is not the column's type " + schema.fields[i].type.to_string());
    }
  }
  record_batch out = *this;
  out.schema = std::move(other);
  return out;
}

void check_field_of(const field& f, const array_data& a) {
  if (!(f.type == a.type)) {
    throw invalid_argument("the requested type " + f.type.to_string() + " is not the array's type " +
                           a.type.to_string());
  }
}

// ---- placed arrays and batches ---------------------------------------------------------------

namespace {

// Each of `arrays` under its field of `fields` (the same count), placed as `declared`.
std::vector<placed_array> placed_all(const std::vector<field>& fields, const std::vector<array_data>& arrays,
                                     const placement& declared) {
  std::vector<placed_array> out;
  out.reserve(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) out.push_back({fields.at(i), arrays[i], declared});
  return out;
}

}  // namespace

placement placed_array::where() const { return placement_of(data, declared); }

std::optional<cuarrow::context> placed_array::context() const { return context_of(data, declared); }

std::vector<placed_array> placed_array::children() const {
  return placed_all(data.type.children, data.children, declared);
}

std::optional<placed_array> placed_array::dictionary() const {
  if (!data.dictionary) return std::nullopt;
  return placed_array{arrow::field("", data.dictionary->type), *data.dictionary, declared};
}

placed_array placed_array::indices() const {
  array_data d = data.dictionary_indices();
  arrow::field f(field.name, d.type, field.nullable);
  return {std::move(f), std::move(d), declared};
}

placed_array placed_array::slice(std::int64_t off, std::int64_t len) const {
  return {field, data.slice(off, len), declared};
}

placed_array placed_array::without_validity() const { return {field, data.without_validity(), declared}; }

placed_array placed_array::with_field(arrow::field f) const {
  check_field_of(f, data);
  return {std::move(f), data, declared};
}

placement placed_batch::where() const { return placement_of(batch.to_struct(), declared); }

std::optional<cuarrow::context> placed_batch::context() const { return context_of(batch.to_struct(), declared); }

std::vector<placed_array> placed_batch::columns() const {
  return placed_all(batch.schema.fields, batch.columns, declared);
}

placed_batch placed_batch::slice(std::int64_t off, std::int64_t len) const { return {batch.slice(off, len), declared}; }

placed_batch placed_batch::with_schema(arrow::schema other) const {
  return {batch.with_schema(std::move(other)), declared};
}

// ---- null counts ---------------------------------------------------------------------------

namespace detail {

std::pair<std::int64_t, std::int64_t> validity_bytes(const array_data& a) {
  const std::int64_t first = a.offset / 8;
  const std::int64_t last = (a.offset + a.length + 7) / 8;
  if (last > a.buffers[0].size()) {
    throw invalid_data("array", "validity bitmap too small: needs " + std::to_string(last) + " bytes, has " +
                                    std::to_string(a.buffers[0].size()));
  }
  return {first, last - first};
}

}  // namespace detail

std::int64_t compute_null_count(const array_data& a, stream_view s) {
  if (a.type.id == type_id::null) return a.length;
  const type_layout l = layout_of(a.type);
  if (!l.has_validity) return 0;
  if (a.null_count >= 0) return a.null_count;
  if (!a.has_validity_bitmap() || a.length == 0) return 0;
  const buffer& bits = a.buffers[0];
  if (bits.is_host_accessible()) {
    (void)detail::validity_bytes(a);  // the size check
    return a.length -
           detail::count_set_bits(reinterpret_cast<const std::uint8_t*>(bits.host_data()), a.offset, a.length);
  }
  const auto [first, count] = detail::validity_bytes(a);
  std::vector<std::uint8_t> host(static_cast<std::size_t>(count));
  copy_to_host(host.data(), bits, first, count, s);
  return detail::nulls_in_validity_bytes(a, host.data());
}

std::int64_t compute_null_count(const array_data& a) { return compute_null_count(a, stream_view()); }

// ---- equality ------------------------------------------------------------------------------

namespace {

using detail::get_bit;
using detail::load_int;

const std::uint8_t* host_ptr(const array_data& a, std::size_t i) {
  if (i >= a.buffers.size() || a.buffers[i].size() == 0) return nullptr;
  return reinterpret_cast<const std::uint8_t*>(a.buffers[i].host_data());
}

class comparer {
 public:
  explicit comparer(std::string* diff) : diff_(diff) {}

  bool differ(const std::string& path, const std::string& what) {
    if (diff_ != nullptr) *diff_ = path + ": " + what;
    return false;
  }

  bool is_valid(const array_data& a, std::int64_t i) {
    switch (a.type.id) {
      case type_id::null: return false;
      case type_id::sparse_union:
      case type_id::dense_union:
      case type_id::run_end_encoded: return true;  // no validity bitmap of their own
      default: break;
    }
    const std::uint8_t* v = host_ptr(a, 0);
    return v == nullptr || get_bit(v, a.offset + i);
  }

  // Logical elements a[ai, ai + n) and b[bi, bi + n) (offsets not yet applied).
  bool range(const array_data& a, std::int64_t ai, const array_data& b, std::int64_t bi, std::int64_t n,
             const std::string& path) {
    for (std::int64_t k = 0; k < n; ++k) {
      if (!element(a, ai + k, b, bi + k, path)) return false;
    }
    return true;
  }

  bool element(const array_data& a, std::int64_t i, const array_data& b, std::int64_t j, const std::string& path) {
    const bool va = is_valid(a, i);
    const bool vb = is_valid(b, j);
    auto at = [&](const std::string& what) {
      return differ(path,
                    "element " + std::to_string(i) + (i == j ? "" : " (vs " + std::to_string(j) + ")") + ": " + what);
    };
    if (va != vb) return at(va ? "valid != null" : "null != valid");
    if (!va) return true;
    const std::int64_t pi = a.offset + i;
    const std::int64_t pj = b.offset + j;
    const data_type& t = a.type;
    switch (t.id) {
      case type_id::null: return true;
      case type_id::boolean: {
        bool x = get_bit(host_ptr(a, 1), pi), y = get_bit(host_ptr(b, 1), pj);
        return x == y ? true : at(std::string(x ? "true" : "false") + " != " + (y ? "true" : "false"));
      }
      case type_id::binary:
      case type_id::utf8:
      case type_id::large_binary:
      case type_id::large_utf8: {
        const int w = (t.id == type_id::binary || t.id == type_id::utf8) ? 4 : 8;
        auto sa = load_int(host_ptr(a, 1), pi, w, true), ea = load_int(host_ptr(a, 1), pi + 1, w, true);
        auto sb = load_int(host_ptr(b, 1), pj, w, true), eb = load_int(host_ptr(b, 1), pj + 1, w, true);
        if (ea - sa != eb - sb) {
          return at("lengths " + std::to_string(ea - sa) + " != " + std::to_string(eb - sb));
        }
        if (ea == sa) return true;
        if (std::memcmp(host_ptr(a, 2) + sa, host_ptr(b, 2) + sb, static_cast<std::size_t>(ea - sa)) != 0) {
          return at("bytes differ");
        }
        return true;
      }
      case type_id::binary_view:
      case type_id::utf8_view: {
        auto va_bytes = view_bytes(a, pi), vb_bytes = view_bytes(b, pj);
        if (va_bytes.second != vb_bytes.second) {
          return at("lengths " + std::to_string(va_bytes.second) + " != " + std::to_string(vb_bytes.second));
        }
        if (va_bytes.second > 0 &&
            std::memcmp(va_bytes.first, vb_bytes.first, static_cast<std::size_t>(va_bytes.second)) != 0) {
          return at("bytes differ");
        }
        return true;
      }
      case type_id::list:
      case type_id::large_list:
      case type_id::map: {
        const int w = t.id == type_id::large_list ? 8 : 4;
        auto sa = load_int(host_ptr(a, 1), pi, w, true), ea = load_int(host_ptr(a, 1), pi + 1, w, true);
        auto sb = load_int(host_ptr(b, 1), pj, w, true), eb = load_int(host_ptr(b, 1), pj + 1, w, true);
        if (ea - sa != eb - sb) return at("list sizes " + std::to_string(ea - sa) + " != " + std::to_string(eb - sb));
        return range(a.children[0], sa, b.children[0], sb, ea - sa, detail::child_path(path, 0, t));
      }
      case type_id::list_view:
      case type_id::large_list_view: {
        const int w = t.id == type_id::list_view ? 4 : 8;
        auto sa = load_int(host_ptr(a, 1), pi, w, true), na = load_int(host_ptr(a, 2), pi, w, true);
        auto sb = load_int(host_ptr(b, 1), pj, w, true), nb = load_int(host_ptr(b, 2), pj, w, true);
        if (na != nb) return at("list sizes " + std::to_string(na) + " != " + std::to_string(nb));
        return range(a.children[0], sa, b.children[0], sb, na, detail::child_path(path, 0, t));
      }
      case type_id::fixed_size_list: {
        const std::int64_t n = t.fixed_size;
        return range(a.children[0], pi * n, b.children[0], pj * n, n, detail::child_path(path, 0, t));
      }
      case type_id::struct_:
        for (std::size_t c = 0; c < t.children.size(); ++c) {
          if (!element(a.children[c], pi, b.children[c], pj, detail::child_path(path, c, t))) return false;
        }
        return true;
      case type_id::sparse_union:
      case type_id::dense_union: {
        const auto ca = static_cast<std::int8_t>(host_ptr(a, 0)[pi]);
        const auto cb = static_cast<std::int8_t>(host_ptr(b, 0)[pj]);
        if (ca != cb) return at("type codes " + std::to_string(ca) + " != " + std::to_string(cb));
        const std::size_t c = child_for_code(t, ca);
        std::int64_t ia = pi, ib = pj;
        if (t.id == type_id::dense_union) {
          ia = load_int(host_ptr(a, 1), pi, 4, true);
          ib = load_int(host_ptr(b, 1), pj, 4, true);
        }
        return element(a.children[c], ia, b.children[c], ib, detail::child_path(path, c, t));
      }
      case type_id::run_end_encoded: {
        const std::int64_t ia = physical_index(a, pi), ib = physical_index(b, pj);
        return element(a.children[1], ia, b.children[1], ib, detail::child_path(path, 1, t));
      }
      case type_id::dictionary: {
        const bool s = is_signed_integer(t.index_type);
        const int w = bit_width(t) / 8;
        const std::int64_t ia = load_int(host_ptr(a, 1), pi, w, s), ib = load_int(host_ptr(b, 1), pj, w, s);
        return element(*a.dictionary, ia, *b.dictionary, ib, detail::dictionary_path(path));
      }
      default: {
        const int w = bit_width(t) / 8;
        if (w == 0) return true;
        if (std::memcmp(host_ptr(a, 1) + pi * w, host_ptr(b, 1) + pj * w, static_cast<std::size_t>(w)) != 0) {
          return at("values differ");
        }
        return true;
      }
    }
  }

 private:
  static std::size_t child_for_code(const data_type& t, std::int8_t code) {
    for (std::size_t c = 0; c < t.type_codes.size(); ++c) {
      if (t.type_codes[c] == code) return c;
    }
    return 0;
  }

  // The run holding logical position `p` (offset applied): the first run end > p.
  static std::int64_t physical_index(const array_data& a, std::int64_t p) {
    const array_data& ends = a.children[0];
    const int w = bit_width(ends.type) / 8;
    const std::uint8_t* e = host_ptr(ends, 1);
    std::int64_t lo = 0, hi = ends.length;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (load_int(e, ends.offset + mid, w, true) > p) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  static std::pair<const std::uint8_t*, std::int64_t> view_bytes(const array_data& a, std::int64_t p) {
    const std::uint8_t* v = host_ptr(a, 1) + p * 16;
    const std::int64_t len = load_int(v, 0, 4, true);
    if (len <= 12) return {v + 4, len};
    const std::int64_t index = load_int(v + 8, 0, 4, true);
    const std::int64_t off = load_int(v + 12, 0, 4, true);
    return {host_ptr(a, static_cast<std::size_t>(2 + index)) + off, len};
  }

  std::string* diff_;
};

}  // namespace

bool equals(const array_data& a, const array_data& b, std::string* difference) {
  comparer c(difference);
  if (!(a.type == b.type)) return c.differ("array", "types " + a.type.to_string() + " != " + b.type.to_string());
  if (a.length != b.length) {
    return c.differ("array", "lengths " + std::to_string(a.length) + " != " + std::to_string(b.length));
  }
  return c.range(a, 0, b, 0, a.length, "array");
}

bool equals(const record_batch& a, const record_batch& b, std::string* difference) {
  comparer c(difference);
  if (!(a.schema == b.schema)) return c.differ("record batch", "schemas differ");
  if (a.num_rows != b.num_rows) {
    return c.differ("record batch", "row counts " + std::to_string(a.num_rows) + " != " + std::to_string(b.num_rows));
  }
  if (a.columns.size() != b.columns.size()) return c.differ("record batch", "column counts differ");
  for (std::size_t i = 0; i < a.columns.size(); ++i) {
    if (!c.range(a.columns[i], 0, b.columns[i], 0, a.num_rows, detail::column_path(a.schema.fields[i].name))) {
      return false;
    }
  }
  return true;
}

}  // namespace cuarrow::arrow
