// Arrow types: factories, names, equality, layouts.
#include "cuarrow/arrow/type.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arrow_internal.hpp"

namespace cuarrow::arrow {

// ---- errors -----------------------------------------------------------------

invalid_format::invalid_format(std::string format, std::string path, std::string reason)
    : invalid_argument("invalid format string \"" + format + "\" at " + path + ": " + reason),
      format_(std::move(format)),
      path_(std::move(path)),
      reason_(std::move(reason)) {}

invalid_data::invalid_data(std::string path, std::string reason)
    : invalid_argument(path + ": " + reason), path_(std::move(path)), reason_(std::move(reason)) {}

// ---- names ------------------------------------------------------------------

const char* to_string(type_id id) noexcept {
  switch (id) {
    case type_id::null: return "null";
    case type_id::boolean: return "bool";
    case type_id::int8: return "int8";
    case type_id::uint8: return "uint8";
    case type_id::int16: return "int16";
    case type_id::uint16: return "uint16";
    case type_id::int32: return "int32";
    case type_id::uint32: return "uint32";
    case type_id::int64: return "int64";
    case type_id::uint64: return "uint64";
    case type_id::float16: return "halffloat";
    case type_id::float32: return "float";
    case type_id::float64: return "double";
    case type_id::decimal32: return "decimal32";
    case type_id::decimal64: return "decimal64";
    case type_id::decimal128: return "decimal128";
    case type_id::decimal256: return "decimal256";
    case type_id::date32: return "date32";
    case type_id::date64: return "date64";
    case type_id::time32: return "time32";
    case type_id::time64: return "time64";
    case type_id::timestamp: return "timestamp";
    case type_id::duration: return "duration";
    case type_id::interval_months: return "month_interval";
    case type_id::interval_day_time: return "day_time_interval";
    case type_id::interval_month_day_nano: return "month_day_nano_interval";
    case type_id::fixed_size_binary: return "fixed_size_binary";
    case type_id::binary: return "binary";
    case type_id::large_binary: return "large_binary";
    case type_id::utf8: return "string";
    case type_id::large_utf8: return "large_string";
    case type_id::binary_view: return "binary_view";
    case type_id::utf8_view: return "string_view";
    case type_id::list: return "list";
    case type_id::large_list: return "large_list";
    case type_id::list_view: return "list_view";
    case type_id::large_list_view: return "large_list_view";
    case type_id::fixed_size_list: return "fixed_size_list";
    case type_id::struct_: return "struct";
    case type_id::map: return "map";
    case type_id::sparse_union: return "sparse_union";
    case type_id::dense_union: return "dense_union";
    case type_id::run_end_encoded: return "run_end_encoded";
    case type_id::dictionary: return "dictionary";
  }
  return "unknown";
}

const char* to_string(time_unit unit) noexcept {
  switch (unit) {
    case time_unit::second: return "s";
    case time_unit::milli: return "ms";
    case time_unit::micro: return "us";
    case time_unit::nano: return "ns";
  }
  return "?";
}

const char* to_string(buffer_role role) noexcept {
  switch (role) {
    case buffer_role::validity: return "validity";
    case buffer_role::bitmap: return "values bitmap";
    case buffer_role::values: return "values";
    case buffer_role::offsets: return "offsets";
    case buffer_role::data: return "data";
    case buffer_role::list_offsets: return "offsets";
    case buffer_role::list_sizes: return "sizes";
    case buffer_role::views: return "views";
    case buffer_role::variadic: return "variadic data";
    case buffer_role::type_ids: return "type ids";
    case buffer_role::union_offsets: return "offsets";
  }
  return "?";
}

bool is_integer(type_id id) noexcept {
  return id == type_id::int8 || id == type_id::uint8 || id == type_id::int16 || id == type_id::uint16 ||
         id == type_id::int32 || id == type_id::uint32 || id == type_id::int64 || id == type_id::uint64;
}

bool is_signed_integer(type_id id) noexcept {
  return id == type_id::int8 || id == type_id::int16 || id == type_id::int32 || id == type_id::int64;
}

namespace {

int id_bit_width(type_id id) noexcept {
  switch (id) {
    case type_id::boolean: return 1;
    case type_id::int8:
    case type_id::uint8: return 8;
    case type_id::int16:
    case type_id::uint16:
    case type_id::float16: return 16;
    case type_id::int32:
    case type_id::uint32:
    case type_id::float32:
    case type_id::date32:
    case type_id::time32:
    case type_id::interval_months:
    case type_id::decimal32: return 32;
    case type_id::int64:
    case type_id::uint64:
    case type_id::float64:
    case type_id::date64:
    case type_id::time64:
    case type_id::timestamp:
    case type_id::duration:
    case type_id::interval_day_time:
    case type_id::decimal64: return 64;
    case type_id::interval_month_day_nano:
    case type_id::decimal128: return 128;
    case type_id::decimal256: return 256;
    default: return 0;
  }
}

}  // namespace

int bit_width(const data_type& type) noexcept {
  if (type.id == type_id::fixed_size_binary) return type.fixed_size * 8;
  if (type.id == type_id::dictionary) return id_bit_width(type.index_type);
  return id_bit_width(type.id);
}

int required_children(type_id id) noexcept {
  switch (id) {
    case type_id::list:
    case type_id::large_list:
    case type_id::list_view:
    case type_id::large_list_view:
    case type_id::fixed_size_list:
    case type_id::map: return 1;
    case type_id::run_end_encoded: return 2;
    case type_id::struct_:
    case type_id::sparse_union:
    case type_id::dense_union: return -1;
    default: return 0;
  }
}

// ---- data_type, field, schema --------------------------------------------------

data_type::data_type() = default;
data_type::data_type(type_id i) : id(i) {}

const data_type& data_type::values() const {
  if (id != type_id::dictionary || !value_type) {
    throw invalid_argument("data_type::values(): " + to_string() + " is not a dictionary type with values");
  }
  return *value_type;
}

namespace {

std::string field_to_string(const field& f) {
  std::string s = f.name + ": " + f.type.to_string();
  if (!f.nullable) s += " not null";
  return s;
}

}  // namespace

std::string data_type::to_string() const {
  const std::string name = arrow::to_string(id);
  switch (id) {
    case type_id::decimal32:
    case type_id::decimal64:
    case type_id::decimal128:
    case type_id::decimal256: return name + "(" + std::to_string(precision) + ", " + std::to_string(scale) + ")";
    case type_id::time32:
    case type_id::time64:
    case type_id::duration: return name + "[" + arrow::to_string(unit) + "]";
    case type_id::timestamp:
      return name + "[" + arrow::to_string(unit) + (timezone.empty() ? "" : ", tz=" + timezone) + "]";
    case type_id::fixed_size_binary: return name + "[" + std::to_string(fixed_size) + "]";
    case type_id::list:
    case type_id::large_list:
    case type_id::list_view:
    case type_id::large_list_view:
    case type_id::fixed_size_list: {
      std::string s = name + "<" + (children.empty() ? std::string("?") : field_to_string(children[0])) + ">";
      if (id == type_id::fixed_size_list) s += "[" + std::to_string(fixed_size) + "]";
      return s;
    }
    case type_id::struct_:
    case type_id::sparse_union:
    case type_id::dense_union:
    case type_id::run_end_encoded: {
      std::string s = name + "<";
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (i) s += ", ";
        s += field_to_string(children[i]);
        if ((id == type_id::sparse_union || id == type_id::dense_union) && i < type_codes.size()) {
          s += "=" + std::to_string(type_codes[i]);
        }
      }
      return s + ">";
    }
    case type_id::map: {
      if (children.size() == 1 && children[0].type.children.size() == 2) {
        const auto& kv = children[0].type.children;
        return name + "<" + kv[0].type.to_string() + ", " + kv[1].type.to_string() +
               (keys_sorted ? ", keys_sorted" : "") + ">";
      }
      return name + "<?>";
    }
    case type_id::dictionary:
      return name + "<values=" + (value_type ? value_type->to_string() : std::string("?")) +
             ", indices=" + arrow::to_string(index_type) + ", ordered=" + (ordered ? "1" : "0") + ">";
    default: return name;
  }
}

bool operator==(const data_type& a, const data_type& b) {
  if (a.id != b.id) return false;
  switch (a.id) {
    case type_id::decimal32:
    case type_id::decimal64:
    case type_id::decimal128:
    case type_id::decimal256: return a.precision == b.precision && a.scale == b.scale;
    case type_id::time32:
    case type_id::time64:
    case type_id::duration: return a.unit == b.unit;
    case type_id::timestamp: return a.unit == b.unit && a.timezone == b.timezone;
    case type_id::fixed_size_binary: return a.fixed_size == b.fixed_size;
    case type_id::fixed_size_list: return a.fixed_size == b.fixed_size && a.children == b.children;
    case type_id::map: return a.keys_sorted == b.keys_sorted && a.children == b.children;
    case type_id::sparse_union:
    case type_id::dense_union: return a.type_codes == b.type_codes && a.children == b.children;
    case type_id::list:
    case type_id::large_list:
    case type_id::list_view:
    case type_id::large_list_view:
    case type_id::struct_:
    case type_id::run_end_encoded: return a.children == b.children;
    case type_id::dictionary:
      if (a.index_type != b.index_type || a.ordered != b.ordered) return false;
      if (!a.value_type || !b.value_type) return a.value_type == b.value_type;
      return *a.value_type == *b.value_type;
    default: return true;
  }
}

namespace {

std::optional<std::string> metadata_value(const key_value_metadata& md, std::string_view key) {
  for (const auto& [k, v] : md) {
    if (k == key) return v;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> field::extension_name() const { return metadata_value(metadata, "ARROW:extension:name"); }

std::optional<std::string> field::extension_metadata() const {
  return metadata_value(metadata, "ARROW:extension:metadata");
}

bool operator==(const field& a, const field& b) {
  return a.name == b.name && a.nullable == b.nullable && a.metadata == b.metadata && a.type == b.type;
}

int schema::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool operator==(const schema& a, const schema& b) { return a.fields == b.fields && a.metadata == b.metadata; }

// ---- factories ------------------------------------------------------------------

data_type null() { return data_type(type_id::null); }
data_type boolean() { return data_type(type_id::boolean); }
data_type int8() { return data_type(type_id::int8); }
data_type uint8() { return data_type(type_id::uint8); }
data_type int16() { return data_type(type_id::int16); }
data_type uint16() { return data_type(type_id::uint16); }
data_type int32() { return data_type(type_id::int32); }
data_type uint32() { return data_type(type_id::uint32); }
data_type int64() { return data_type(type_id::int64); }
data_type uint64() { return data_type(type_id::uint64); }
data_type float16() { return data_type(type_id::float16); }
data_type float32() { return data_type(type_id::float32); }
data_type float64() { return data_type(type_id::float64); }

namespace {

int max_decimal_precision(int bits) {
  switch (bits) {
    case 32: return 9;
    case 64: return 18;
    case 128: return 38;
    case 256: return 76;
    default: return 0;
  }
}

}  // namespace

// ---- parameter checks (shared with the format-string codec) --------------------

namespace detail {

std::string decimal_problem(std::int32_t precision, int bits) {
  const int max = max_decimal_precision(bits);
  if (max == 0) return "decimal bit width must be 32, 64, 128 or 256, not " + std::to_string(bits);
  if (precision < 1 || precision > max) {
    return "decimal" + std::to_string(bits) + " precision must be between 1 and " + std::to_string(max) + ", not " +
           std::to_string(precision);
  }
  return {};
}

std::string union_codes_problem(const std::vector<std::int8_t>& codes, std::size_t n_children) {
  if (codes.size() != n_children) {
    return std::to_string(codes.size()) + " type codes for " + std::to_string(n_children) + " children";
  }
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < 0) return "type code " + std::to_string(codes[i]) + " is negative (must be 0..127)";
    for (std::size_t j = 0; j < i; ++j) {
      if (codes[j] == codes[i]) return "type code " + std::to_string(codes[i]) + " appears twice";
    }
  }
  return {};
}

}  // namespace detail

namespace {

data_type with_unit(type_id id, time_unit unit) {
  data_type t(id);
  t.unit = unit;
  return t;
}

data_type nested(type_id id, std::vector<field> children) {
  data_type t(id);
  t.children = std::move(children);
  return t;
}

}  // namespace

data_type decimal(std::int32_t precision, std::int32_t scale, int bit_width) {
  if (std::string why = detail::decimal_problem(precision, bit_width); !why.empty()) throw invalid_argument(why);
  data_type t(bit_width == 32    ? type_id::decimal32
              : bit_width == 64  ? type_id::decimal64
              : bit_width == 128 ? type_id::decimal128
                                 : type_id::decimal256);
  t.precision = precision;
  t.scale = scale;
  return t;
}

data_type date32() { return data_type(type_id::date32); }
data_type date64() { return data_type(type_id::date64); }

data_type time32(time_unit unit) {
  if (unit != time_unit::second && unit != time_unit::milli) {
    throw invalid_argument(std::string("time32 takes seconds or milliseconds, not ") + to_string(unit));
  }
  return with_unit(type_id::time32, unit);
}

data_type time64(time_unit unit) {
  if (unit != time_unit::micro && unit != time_unit::nano) {
    throw invalid_argument(std::string("time64 takes microseconds or nanoseconds, not ") + to_string(unit));
  }
  return with_unit(type_id::time64, unit);
}

data_type timestamp(time_unit unit, std::string timezone) {
  data_type t = with_unit(type_id::timestamp, unit);
  t.timezone = std::move(timezone);
  return t;
}

data_type duration(time_unit unit) { return with_unit(type_id::duration, unit); }
data_type interval_months() { return data_type(type_id::interval_months); }
data_type interval_day_time() { return data_type(type_id::interval_day_time); }
data_type interval_month_day_nano() { return data_type(type_id::interval_month_day_nano); }

data_type fixed_size_binary(std::int32_t byte_width) {
  if (byte_width < 0)
    throw invalid_argument("fixed_size_binary width must not be negative: " + std::to_string(byte_width));
  data_type t(type_id::fixed_size_binary);
  t.fixed_size = byte_width;
  return t;
}

data_type binary() { return data_type(type_id::binary); }
data_type large_binary() { return data_type(type_id::large_binary); }
data_type utf8() { return data_type(type_id::utf8); }
data_type large_utf8() { return data_type(type_id::large_utf8); }
data_type binary_view() { return data_type(type_id::binary_view); }
data_type utf8_view() { return data_type(type_id::utf8_view); }
data_type list(field value) { return nested(type_id::list, {std::move(value)}); }
data_type large_list(field value) { return nested(type_id::large_list, {std::move(value)}); }
data_type list_view(field value) { return nested(type_id::list_view, {std::move(value)}); }
data_type large_list_view(field value) { return nested(type_id::large_list_view, {std::move(value)}); }

data_type fixed_size_list(field value, std::int32_t list_size) {
  if (list_size < 0) throw invalid_argument("fixed_size_list size must not be negative: " + std::to_string(list_size));
  data_type t = nested(type_id::fixed_size_list, {std::move(value)});
  t.fixed_size = list_size;
  return t;
}

data_type struct_(std::vector<field> fields) { return nested(type_id::struct_, std::move(fields)); }

data_type map(data_type key, data_type item, bool keys_sorted, bool item_nullable) {
  data_type entries = struct_({field("key", std::move(key), false), field("value", std::move(item), item_nullable)});
  data_type t = nested(type_id::map, {field("entries", std::move(entries), false)});
  t.keys_sorted = keys_sorted;
  return t;
}

namespace {

data_type make_union(type_id id, std::vector<field> fields, std::vector<std::int8_t> codes) {
  if (codes.empty()) {
    for (std::size_t i = 0; i < fields.size(); ++i) codes.push_back(static_cast<std::int8_t>(i));
  }
  if (std::string why = detail::union_codes_problem(codes, fields.size()); !why.empty()) {
    throw invalid_argument(std::string(to_string(id)) + ": " + why);
  }
  data_type t = nested(id, std::move(fields));
  t.type_codes = std::move(codes);
  return t;
}

}  // namespace

data_type sparse_union(std::vector<field> fields, std::vector<std::int8_t> type_codes) {
  return make_union(type_id::sparse_union, std::move(fields), std::move(type_codes));
}

data_type dense_union(std::vector<field> fields, std::vector<std::int8_t> type_codes) {
  return make_union(type_id::dense_union, std::move(fields), std::move(type_codes));
}

data_type run_end_encoded(data_type run_end_type, data_type value_type) {
  if (run_end_type.id != type_id::int16 && run_end_type.id != type_id::int32 && run_end_type.id != type_id::int64) {
    throw invalid_argument("run end type must be int16, int32 or int64, not " + run_end_type.to_string());
  }
  return nested(type_id::run_end_encoded,
                {field("run_ends", std::move(run_end_type), false), field("values", std::move(value_type), true)});
}

data_type dictionary(data_type index_type, data_type value_type, bool ordered) {
  if (!is_integer(index_type.id)) {
    throw invalid_argument("dictionary index type must be an integer type, not " + index_type.to_string());
  }
  data_type t(type_id::dictionary);
  t.index_type = index_type.id;
  t.value_type = std::make_shared<const data_type>(std::move(value_type));
  t.ordered = ordered;
  return t;
}

// ---- layouts -------------------------------------------------------------------------

type_layout layout_of(const data_type& type) {
  type_layout l;
  l.buffers.reserve(3);  // one allocation: no layout has more (writers ask once per array of every batch)
  auto validity = [&] {
    l.buffers.push_back({buffer_role::validity, 0});
    l.has_validity = true;
  };
  const type_id id = type.id == type_id::dictionary ? type.index_type : type.id;
  switch (id) {
    case type_id::null:
    case type_id::run_end_encoded: break;
    case type_id::boolean:
      validity();
      l.buffers.push_back({buffer_role::bitmap, 0});
      break;
    case type_id::binary:
    case type_id::utf8:
      validity();
      l.buffers.push_back({buffer_role::offsets, 4});
      l.buffers.push_back({buffer_role::data, 0});
      break;
    case type_id::large_binary:
    case type_id::large_utf8:
      validity();
      l.buffers.push_back({buffer_role::offsets, 8});
      l.buffers.push_back({buffer_role::data, 0});
      break;
    case type_id::binary_view:
    case type_id::utf8_view:
      validity();
      l.buffers.push_back({buffer_role::views, 16});
      l.variadic = true;
      break;
    case type_id::list:
    case type_id::map:
      validity();
      l.buffers.push_back({buffer_role::offsets, 4});
      break;
    case type_id::large_list:
      validity();
      l.buffers.push_back({buffer_role::offsets, 8});
      break;
    case type_id::list_view:
      validity();
      l.buffers.push_back({buffer_role::list_offsets, 4});
      l.buffers.push_back({buffer_role::list_sizes, 4});
      break;
    case type_id::large_list_view:
      validity();
      l.buffers.push_back({buffer_role::list_offsets, 8});
      l.buffers.push_back({buffer_role::list_sizes, 8});
      break;
    case type_id::fixed_size_list:
    case type_id::struct_: validity(); break;
    case type_id::sparse_union: l.buffers.push_back({buffer_role::type_ids, 1}); break;
    case type_id::dense_union:
      l.buffers.push_back({buffer_role::type_ids, 1});
      l.buffers.push_back({buffer_role::union_offsets, 4});
      break;
    case type_id::fixed_size_binary:
      validity();
      l.buffers.push_back({buffer_role::values, type.fixed_size});
      break;
    default:
      validity();
      l.buffers.push_back({buffer_role::values, id_bit_width(id) / 8});
      break;
  }
  return l;
}

}  // namespace cuarrow::arrow
