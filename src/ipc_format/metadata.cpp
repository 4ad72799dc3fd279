// The Arrow IPC metadata (format/Message.fbs, Schema.fbs, File.fbs) read
// with the verifying reader and written with the builder of
// flatbuffer.hpp.  Field ids, defaults and union codes are the .fbs files';
// the writer builds each table, vector and string in the order Arrow C++
// does (cpp/src/arrow/ipc/metadata_internal.cc; the generated Create*
// functions add fields largest first, later fields first among equals), so
// that its bytes are Arrow's.
#include "cuarrow/ipc/metadata.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "ipc_format/flatbuffer.hpp"

static_assert(std::endian::native == std::endian::little,
              "the IPC metadata reader and writer assume a little-endian host");

namespace cuarrow::ipc {

namespace {

using arrow::data_type;
using arrow::field;
using arrow::time_unit;
using arrow::type_id;

// ---- the .fbs files' numbers ---------------------------------------------------

namespace fbs {
// Schema.fbs Type (the union's codes).
enum type : std::uint8_t {
  NONE = 0,
  Null = 1,
  Int = 2,
  FloatingPoint = 3,
  Binary = 4,
  Utf8 = 5,
  Bool = 6,
  Decimal = 7,
  Date = 8,
  Time = 9,
  Timestamp = 10,
  Interval = 11,
  List = 12,
  Struct_ = 13,
  Union = 14,
  FixedSizeBinary = 15,
  FixedSizeList = 16,
  Map = 17,
  Duration = 18,
  LargeBinary = 19,
  LargeUtf8 = 20,
  LargeList = 21,
  RunEndEncoded = 22,
  BinaryView = 23,
  Utf8View = 24,
  ListView = 25,
  LargeListView = 26,
};
constexpr std::uint8_t type_count = 27;
const char* const type_names[type_count] = {"NONE",          "Null",      "Int",           "FloatingPoint",
                                            "Binary",        "Utf8",      "Bool",          "Decimal",
                                            "Date",          "Time",      "Timestamp",     "Interval",
                                            "List",          "Struct_",   "Union",         "FixedSizeBinary",
                                            "FixedSizeList", "Map",       "Duration",      "LargeBinary",
                                            "LargeUtf8",     "LargeList", "RunEndEncoded", "BinaryView",
                                            "Utf8View",      "ListView",  "LargeListView"};

// Field ids (a table's fields in declaration order, a union taking two).
namespace message {
constexpr int version = 0, header_type = 1, header = 2, body_length = 3, custom_metadata = 4;
}
namespace schema {
constexpr int endianness = 0, fields = 1, custom_metadata = 2, features = 3;
}
namespace field {
constexpr int name = 0, nullable = 1, type_type = 2, type = 3, dictionary = 4, children = 5, custom_metadata = 6;
}
namespace key_value {
constexpr int key = 0, value = 1;
}
namespace dictionary_encoding {
constexpr int id = 0, index_type = 1, is_ordered = 2, dictionary_kind = 3;
}
namespace record_batch {
constexpr int length = 0, nodes = 1, buffers = 2, compression = 3, variadic_buffer_counts = 4;
}
namespace body_compression {
constexpr int codec = 0, method = 1;
}
namespace dictionary_batch {
constexpr int id = 0, data = 1, is_delta = 2;
}
namespace footer {
constexpr int version = 0, schema = 1, dictionaries = 2, record_batches = 3, custom_metadata = 4;
}
// TimeUnit, DateUnit, IntervalUnit, Precision, UnionMode.
constexpr std::int16_t second = 0, millisecond = 1, nanosecond = 3;  // MICROSECOND = 2
constexpr std::int16_t day = 0;
constexpr std::int16_t year_month = 0, day_time = 1, month_day_nano = 2;
constexpr std::int16_t half = 0, single = 1, double_ = 2;
constexpr std::int16_t sparse = 0, dense = 1;
}  // namespace fbs

[[noreturn]] void fail(const std::string& where, const std::string& reason) { throw invalid_message(where, reason); }

const char* version_name(std::int16_t v) {
  static const char* const names[] = {"V1", "V2", "V3", "V4", "V5"};
  return v >= 0 && v <= 4 ? names[v] : "unknown";
}

// The version field `name` of `t`, checked (the path built only for an error).
metadata_version check_version(std::int16_t v, const fb::table& t, std::string_view name) {
  if (v < 0 || v > 4) fail(t.field_path(name), "unknown metadata version " + std::to_string(v) + " (V1..V5 are 0..4)");
  if (v < 3) {
    fail(t.field_path(name),
         std::string("metadata version ") + version_name(v) +
             " is not supported: cuarrow reads V4 (Arrow 0.8 to 0.17) and V5 (Arrow 1.0 and later)");
  }
  return static_cast<metadata_version>(v);
}

// ---- reading --------------------------------------------------------------------

arrow::key_value_metadata read_key_values(const fb::table& t, int id) {
  arrow::key_value_metadata out;
  const auto v = t.vec(id, "custom_metadata", 4, 4);
  if (!v) return out;
  out.reserve(v->size());
  for (std::uint32_t i = 0; i < v->size(); ++i) {
    const fb::table kv = v->table_at(i);
    out.emplace_back(std::string(kv.string(fbs::key_value::key, "key").value_or("")),
                     std::string(kv.string(fbs::key_value::value, "value").value_or("")));
  }
  return out;
}

type_id int_type(const fb::table& t) {
  const auto bits = t.scalar<std::int32_t>(0, "bitWidth", 0);
  const bool is_signed = t.boolean(1, "is_signed", false);
  switch (bits) {
    case 8: return is_signed ? type_id::int8 : type_id::uint8;
    case 16: return is_signed ? type_id::int16 : type_id::uint16;
    case 32: return is_signed ? type_id::int32 : type_id::uint32;
    case 64: return is_signed ? type_id::int64 : type_id::uint64;
    default: fail(t.field_path("bitWidth"), "integer width " + std::to_string(bits) + " is not 8, 16, 32 or 64");
  }
}

time_unit unit_of(const fb::table& t, std::int16_t def) {
  const auto u = t.scalar<std::int16_t>(0, "unit", def);
  if (u < fbs::second || u > fbs::nanosecond) {
    fail(t.field_path("unit"), "unknown time unit " + std::to_string(u) + " (SECOND..NANOSECOND are 0..3)");
  }
  return static_cast<time_unit>(u);
}

void expect_children(const fb::table& type_table, const std::vector<field>& children, std::size_t n, const char* name) {
  if (children.size() != n) {
    fail(type_table.path(), std::string(name) + " needs " + std::to_string(n) + " child field" + (n == 1 ? "" : "s") +
                                ", the field has " + std::to_string(children.size()));
  }
}

// A factory's invalid_argument becomes an invalid_message at `where`.
template <class F>
data_type checked(const std::string& where, F&& make) {
  try {
    return make();
  } catch (const invalid_message&) {
    throw;
  } catch (const invalid_argument& e) {
    fail(where, e.what());
  }
}

data_type read_type(std::uint8_t code, const fb::table& t, std::vector<field> children) {
  const std::string& where = t.path();
  const bool leaf = code != fbs::List && code != fbs::LargeList && code != fbs::ListView &&
                    code != fbs::LargeListView && code != fbs::FixedSizeList && code != fbs::Struct_ &&
                    code != fbs::Map && code != fbs::Union && code != fbs::RunEndEncoded;
  if (leaf && !children.empty()) {
    fail(where,
         std::string(fbs::type_names[code]) + " has no child fields, the field has " + std::to_string(children.size()));
  }
  switch (code) {
    case fbs::Null: return arrow::null();
    case fbs::Bool: return arrow::boolean();
    case fbs::Int: return data_type(int_type(t));
    case fbs::FloatingPoint: {
      const auto p = t.scalar<std::int16_t>(0, "precision", fbs::half);
      if (p == fbs::half) return arrow::float16();
      if (p == fbs::single) return arrow::float32();
      if (p == fbs::double_) return arrow::float64();
      fail(t.field_path("precision"),
           "unknown floating point precision " + std::to_string(p) + " (HALF..DOUBLE are 0..2)");
    }
    case fbs::Decimal: {
      const auto precision = t.scalar<std::int32_t>(0, "precision", 0);
      const auto scale = t.scalar<std::int32_t>(1, "scale", 0);
      const auto bits = t.scalar<std::int32_t>(2, "bitWidth", 128);
      if (bits != 32 && bits != 64 && bits != 128 && bits != 256) {
        fail(t.field_path("bitWidth"), "decimal width " + std::to_string(bits) + " is not 32, 64, 128 or 256");
      }
      return checked(where, [&] { return arrow::decimal(precision, scale, bits); });
    }
    case fbs::Date: {
      const auto u = t.scalar<std::int16_t>(0, "unit", fbs::millisecond);
      if (u == fbs::day) return arrow::date32();
      if (u == fbs::millisecond) return arrow::date64();
      fail(t.field_path("unit"), "unknown date unit " + std::to_string(u) + " (DAY, MILLISECOND are 0, 1)");
    }
    case fbs::Time: {
      const time_unit u = unit_of(t, fbs::millisecond);
      const auto bits = t.scalar<std::int32_t>(1, "bitWidth", 32);
      const bool small = u == time_unit::second || u == time_unit::milli;
      if (bits != (small ? 32 : 64)) {
        fail(t.field_path("bitWidth"), std::string("time in ") + arrow::to_string(u) + " is " + (small ? "32" : "64") +
                                           " bits wide, not " + std::to_string(bits));
      }
      return small ? arrow::time32(u) : arrow::time64(u);
    }
    case fbs::Timestamp:
      return arrow::timestamp(unit_of(t, fbs::second), std::string(t.string(1, "timezone").value_or("")));
    case fbs::Duration: return arrow::duration(unit_of(t, fbs::millisecond));
    case fbs::Interval: {
      const auto u = t.scalar<std::int16_t>(0, "unit", fbs::year_month);
      if (u == fbs::year_month) return arrow::interval_months();
      if (u == fbs::day_time) return arrow::interval_day_time();
      if (u == fbs::month_day_nano) return arrow::interval_month_day_nano();
      fail(t.field_path("unit"),
           "unknown interval unit " + std::to_string(u) + " (YEAR_MONTH..MONTH_DAY_NANO are 0..2)");
    }
    case fbs::FixedSizeBinary: {
      const auto w = t.scalar<std::int32_t>(0, "byteWidth", 0);
      return checked(t.field_path("byteWidth"), [&] { return arrow::fixed_size_binary(w); });
    }
    case fbs::Binary: return arrow::binary();
    case fbs::LargeBinary: return arrow::large_binary();
    case fbs::Utf8: return arrow::utf8();
    case fbs::LargeUtf8: return arrow::large_utf8();
    case fbs::BinaryView: return arrow::binary_view();
    case fbs::Utf8View: return arrow::utf8_view();
    case fbs::List: expect_children(t, children, 1, "List"); return arrow::list(std::move(children[0]));
    case fbs::LargeList: expect_children(t, children, 1, "LargeList"); return arrow::large_list(std::move(children[0]));
    case fbs::ListView: expect_children(t, children, 1, "ListView"); return arrow::list_view(std::move(children[0]));
    case fbs::LargeListView:
      expect_children(t, children, 1, "LargeListView");
      return arrow::large_list_view(std::move(children[0]));
    case fbs::FixedSizeList: {
      expect_children(t, children, 1, "FixedSizeList");
      const auto n = t.scalar<std::int32_t>(0, "listSize", 0);
      return checked(t.field_path("listSize"), [&] { return arrow::fixed_size_list(std::move(children[0]), n); });
    }
    case fbs::Struct_: return arrow::struct_(std::move(children));
    case fbs::Map: {
      expect_children(t, children, 1, "Map");
      const field& entries = children[0];
      if (entries.type.id != type_id::struct_ || entries.type.children.size() != 2) {
        fail(where, "a Map's child must be a struct of key and value, not " + entries.type.to_string());
      }
      if (entries.nullable) fail(where, "a Map's entries must not be nullable");
      if (entries.type.children[0].nullable) fail(where, "a Map's keys must not be nullable");
      data_type m(type_id::map);
      m.keys_sorted = t.boolean(0, "keysSorted", false);
      m.children = std::move(children);
      return m;
    }
    case fbs::Union: {
      const auto mode = t.scalar<std::int16_t>(0, "mode", fbs::sparse);
      if (mode != fbs::sparse && mode != fbs::dense) {
        fail(t.field_path("mode"), "unknown union mode " + std::to_string(mode) + " (Sparse, Dense are 0, 1)");
      }
      std::vector<std::int8_t> codes;
      if (const auto ids = t.vec(1, "typeIds", 4, 4)) {
        for (std::uint32_t i = 0; i < ids->size(); ++i) {
          const auto c = ids->scalar<std::int32_t>(i);
          if (c < 0 || c > 127) fail(ids->element_path(i), "union type code " + std::to_string(c) + " is not 0..127");
          codes.push_back(static_cast<std::int8_t>(c));
        }
        if (codes.size() != children.size()) {
          fail(t.field_path("typeIds"),
               std::to_string(codes.size()) + " type codes for " + std::to_string(children.size()) + " child fields");
        }
      }
      return checked(where, [&] {
        return mode == fbs::sparse ? arrow::sparse_union(std::move(children), std::move(codes))
                                   : arrow::dense_union(std::move(children), std::move(codes));
      });
    }
    case fbs::RunEndEncoded: {
      expect_children(t, children, 2, "RunEndEncoded");
      const type_id r = children[0].type.id;
      if (r != type_id::int16 && r != type_id::int32 && r != type_id::int64) {
        fail(where, "run ends must be int16, int32 or int64, not " + children[0].type.to_string());
      }
      data_type ree(type_id::run_end_encoded);
      ree.children = std::move(children);
      return ree;
    }
    default: fail(where, "unknown type code " + std::to_string(code));
  }
}

struct schema_reader {
  std::vector<dictionary_field>* dictionaries;
  std::map<std::int64_t, std::string> id_seen;  // dictionary id -> path of its first field

  field read_field(const fb::table& f, std::vector<int>& pos) {
    field out;
    out.name = std::string(f.string(fbs::field::name, "name").value_or(""));
    out.nullable = f.boolean(fbs::field::nullable, "nullable", false);
    std::vector<field> children;
    if (const auto kids = f.vec(fbs::field::children, "children", 4, 4)) {
      children.reserve(kids->size());
      for (std::uint32_t i = 0; i < kids->size(); ++i) {
        pos.push_back(static_cast<int>(i));
        children.push_back(read_field(kids->table_at(i), pos));
        pos.pop_back();
      }
    }
    const auto code = f.scalar<std::uint8_t>(fbs::field::type_type, "type_type", fbs::NONE);
    if (code == fbs::NONE) fail(f.field_path("type_type"), "the field has no type");
    if (code >= fbs::type_count) fail(f.field_path("type_type"), "unknown type code " + std::to_string(code));
    const std::string label = std::string("type(") + fbs::type_names[code] + ")";
    const auto type_table = f.union_member(fbs::field::type, label);
    if (!type_table) fail(f.field_path(label), "missing (the type code is set, its table is not)");
    out.type = read_type(code, *type_table, std::move(children));

    if (const auto enc = f.child(fbs::field::dictionary, "dictionary")) {
      const auto id = enc->scalar<std::int64_t>(fbs::dictionary_encoding::id, "id", 0);
      const auto index = enc->child(fbs::dictionary_encoding::index_type, "indexType");
      if (!index) fail(enc->field_path("indexType"), "missing: a dictionary needs its index type");
      const bool ordered = enc->boolean(fbs::dictionary_encoding::is_ordered, "isOrdered", false);
      const auto kind = enc->scalar<std::int16_t>(fbs::dictionary_encoding::dictionary_kind, "dictionaryKind", 0);
      if (kind != 0) fail(enc->field_path("dictionaryKind"), "unknown dictionary kind " + std::to_string(kind));
      const auto [it, fresh] = id_seen.emplace(id, f.path());
      if (!fresh) fail(enc->field_path("id"), "dictionary id " + std::to_string(id) + " is also that of " + it->second);
      out.type = arrow::dictionary(data_type(int_type(*index)), std::move(out.type), ordered);
      dictionaries->push_back({id, pos});
    }
    out.metadata = read_key_values(f, fbs::field::custom_metadata);
    return out;
  }
};

schema_message read_schema(const fb::table& s) {
  schema_message out;
  const auto endianness = s.scalar<std::int16_t>(fbs::schema::endianness, "endianness", 0);
  if (endianness == 1) {
    fail(s.field_path("endianness"), "big-endian data is not supported (cuarrow reads little-endian IPC data only)");
  }
  if (endianness != 0) fail(s.field_path("endianness"), "unknown endianness " + std::to_string(endianness));
  schema_reader r{&out.dictionaries, {}};
  if (const auto fields = s.vec(fbs::schema::fields, "fields", 4, 4)) {
    out.schema.fields.reserve(fields->size());
    std::vector<int> pos;
    for (std::uint32_t i = 0; i < fields->size(); ++i) {
      pos.assign(1, static_cast<int>(i));
      out.schema.fields.push_back(r.read_field(fields->table_at(i), pos));
    }
  }
  out.schema.metadata = read_key_values(s, fbs::schema::custom_metadata);
  if (const auto features = s.vec(fbs::schema::features, "features", 8, 8)) {
    for (std::uint32_t i = 0; i < features->size(); ++i) out.features.push_back(features->scalar<std::int64_t>(i));
  }
  return out;
}

// `where()` names the value in the error; it is called only then (a
// message's paths are strings: built for every batch, they were most of
// its parse).
template <class Where>
std::int64_t non_negative(std::int64_t v, const Where& where, const char* what) {
  if (v < 0) fail(where(), std::string(what) + " is negative (" + std::to_string(v) + ")");
  return v;
}

record_batch_header read_record_batch(const fb::table& t, std::int64_t body_length) {
  record_batch_header out;
  out.length = non_negative(
      t.scalar<std::int64_t>(fbs::record_batch::length, "length", 0), [&] { return t.field_path("length"); },
      "the length");
  if (const auto nodes = t.vec(fbs::record_batch::nodes, "nodes", 16, 8)) {
    out.nodes.reserve(nodes->size());
    for (std::uint32_t i = 0; i < nodes->size(); ++i) {
      const std::uint64_t at = nodes->element(i);
      field_node n{nodes->load<std::int64_t>(at), nodes->load<std::int64_t>(at + 8)};
      if (n.length < 0 || n.null_count < 0 || n.null_count > n.length) {
        fail(nodes->element_path(i), "length " + std::to_string(n.length) + " and null count " +
                                         std::to_string(n.null_count) +
                                         ": both must be non-negative and the null count at most the length");
      }
      out.nodes.push_back(n);
    }
  }
  if (const auto buffers = t.vec(fbs::record_batch::buffers, "buffers", 16, 8)) {
    out.buffers.reserve(buffers->size());
    for (std::uint32_t i = 0; i < buffers->size(); ++i) {
      const std::uint64_t at = buffers->element(i);
      body_range b{buffers->load<std::int64_t>(at), buffers->load<std::int64_t>(at + 8)};
      if (b.offset < 0 || b.length < 0 || b.length > body_length || b.offset > body_length - b.length) {
        fail(buffers->element_path(i), "offset " + std::to_string(b.offset) + " and length " +
                                           std::to_string(b.length) + " do not lie inside the " +
                                           std::to_string(body_length) + "-byte body");
      }
      out.buffers.push_back(b);
    }
  }
  if (const auto c = t.child(fbs::record_batch::compression, "compression")) {
    const auto codec = c->scalar<std::int8_t>(fbs::body_compression::codec, "codec", 0);
    if (codec != 0 && codec != 1) {
      fail(c->field_path("codec"),
           "unknown compression codec " + std::to_string(codec) + " (LZ4_FRAME, ZSTD are 0, 1)");
    }
    const auto method = c->scalar<std::int8_t>(fbs::body_compression::method, "method", 0);
    if (method != 0)
      fail(c->field_path("method"), "unknown compression method " + std::to_string(method) + " (BUFFER is 0)");
    out.compression = static_cast<compression_codec>(codec);
  }
  if (const auto counts = t.vec(fbs::record_batch::variadic_buffer_counts, "variadicBufferCounts", 8, 8)) {
    out.variadic_buffer_counts.reserve(counts->size());
    for (std::uint32_t i = 0; i < counts->size(); ++i) {
      out.variadic_buffer_counts.push_back(non_negative(
          counts->scalar<std::int64_t>(i), [&] { return counts->element_path(i); }, "the buffer count"));
    }
  }
  return out;
}

// ---- writing --------------------------------------------------------------------

using offset = fb::builder::offset;

offset write_key_values(fb::builder& b, const arrow::key_value_metadata& kvs) {
  std::vector<offset> items;
  items.reserve(kvs.size());
  for (const auto& [k, v] : kvs) {
    // CreateKeyValue(fbb, CreateString(key), CreateString(value)).
    const offset key = b.create_string(k);
    const offset value = b.create_string(v);
    b.start_table();
    b.add_offset(fbs::key_value::value, value);
    b.add_offset(fbs::key_value::key, key);
    items.push_back(b.end_table());
  }
  return b.create_offset_vector(items);
}

offset empty_table(fb::builder& b) {
  b.start_table();
  return b.end_table();
}

offset int_table(fb::builder& b, type_id id) {
  const int bits = arrow::bit_width(data_type(id));
  b.start_table();
  b.add_scalar<std::int32_t>(0, bits, 0);
  b.add_bool(1, arrow::is_signed_integer(id), false);
  return b.end_table();
}

offset unit_table(fb::builder& b, std::int16_t unit, std::int16_t def) {
  b.start_table();
  b.add_scalar<std::int16_t>(0, unit, def);
  return b.end_table();
}

offset int32_table(fb::builder& b, std::int32_t v) {
  b.start_table();
  b.add_scalar<std::int32_t>(0, v, 0);
  return b.end_table();
}

// The type's table (children are written before, by the caller) and its code.
std::pair<std::uint8_t, offset> write_type(fb::builder& b, const data_type& t) {
  const auto unit = static_cast<std::int16_t>(t.unit);
  switch (t.id) {
    case type_id::null: return {fbs::Null, empty_table(b)};
    case type_id::boolean: return {fbs::Bool, empty_table(b)};
    case type_id::int8:
    case type_id::uint8:
    case type_id::int16:
    case type_id::uint16:
    case type_id::int32:
    case type_id::uint32:
    case type_id::int64:
    case type_id::uint64: return {fbs::Int, int_table(b, t.id)};
    case type_id::float16: return {fbs::FloatingPoint, unit_table(b, fbs::half, fbs::half)};
    case type_id::float32: return {fbs::FloatingPoint, unit_table(b, fbs::single, fbs::half)};
    case type_id::float64: return {fbs::FloatingPoint, unit_table(b, fbs::double_, fbs::half)};
    case type_id::decimal32:
    case type_id::decimal64:
    case type_id::decimal128:
    case type_id::decimal256: {
      b.start_table();
      b.add_scalar<std::int32_t>(2, arrow::bit_width(t), 128);
      b.add_scalar<std::int32_t>(1, t.scale, 0);
      b.add_scalar<std::int32_t>(0, t.precision, 0);
      return {fbs::Decimal, b.end_table()};
    }
    case type_id::date32: return {fbs::Date, unit_table(b, fbs::day, fbs::millisecond)};
    case type_id::date64: return {fbs::Date, unit_table(b, fbs::millisecond, fbs::millisecond)};
    case type_id::time32:
    case type_id::time64:
      b.start_table();
      b.add_scalar<std::int32_t>(1, t.id == type_id::time32 ? 32 : 64, 32);
      b.add_scalar<std::int16_t>(0, unit, fbs::millisecond);
      return {fbs::Time, b.end_table()};
    case type_id::timestamp: {
      const offset tz = t.timezone.empty() ? 0 : b.create_string(t.timezone);
      b.start_table();
      b.add_offset(1, tz);
      b.add_scalar<std::int16_t>(0, unit, fbs::second);
      return {fbs::Timestamp, b.end_table()};
    }
    case type_id::duration: return {fbs::Duration, unit_table(b, unit, fbs::millisecond)};
    case type_id::interval_months: return {fbs::Interval, unit_table(b, fbs::year_month, fbs::year_month)};
    case type_id::interval_day_time: return {fbs::Interval, unit_table(b, fbs::day_time, fbs::year_month)};
    case type_id::interval_month_day_nano: return {fbs::Interval, unit_table(b, fbs::month_day_nano, fbs::year_month)};
    case type_id::fixed_size_binary: return {fbs::FixedSizeBinary, int32_table(b, t.fixed_size)};
    case type_id::binary: return {fbs::Binary, empty_table(b)};
    case type_id::large_binary: return {fbs::LargeBinary, empty_table(b)};
    case type_id::utf8: return {fbs::Utf8, empty_table(b)};
    case type_id::large_utf8: return {fbs::LargeUtf8, empty_table(b)};
    case type_id::binary_view: return {fbs::BinaryView, empty_table(b)};
    case type_id::utf8_view: return {fbs::Utf8View, empty_table(b)};
    case type_id::list: return {fbs::List, empty_table(b)};
    case type_id::large_list: return {fbs::LargeList, empty_table(b)};
    case type_id::list_view: return {fbs::ListView, empty_table(b)};
    case type_id::large_list_view: return {fbs::LargeListView, empty_table(b)};
    case type_id::fixed_size_list: return {fbs::FixedSizeList, int32_table(b, t.fixed_size)};
    case type_id::struct_: return {fbs::Struct_, empty_table(b)};
    case type_id::map:
      b.start_table();
      b.add_bool(0, t.keys_sorted, false);
      return {fbs::Map, b.end_table()};
    case type_id::sparse_union:
    case type_id::dense_union: {
      std::vector<std::int32_t> ids(t.type_codes.begin(), t.type_codes.end());
      const offset v = b.create_scalar_vector(ids.data(), ids.size(), 4);
      b.start_table();
      b.add_offset(1, v);
      b.add_scalar<std::int16_t>(0, t.id == type_id::sparse_union ? fbs::sparse : fbs::dense, fbs::sparse);
      return {fbs::Union, b.end_table()};
    }
    case type_id::run_end_encoded: return {fbs::RunEndEncoded, empty_table(b)};
    case type_id::dictionary: break;  // the caller writes the value type
  }
  throw invalid_argument(std::string("IPC metadata: no Arrow type for ") + t.to_string());
}

struct schema_writer {
  const std::vector<dictionary_field>& dictionaries;

  std::int64_t dictionary_id(const std::vector<int>& pos) const {
    for (const auto& d : dictionaries) {
      if (d.path == pos) return d.id;
    }
    std::string p;
    for (const int i : pos) p += (p.empty() ? "" : ", ") + std::to_string(i);
    throw invalid_argument("IPC metadata: the dictionary field at path {" + p +
                           "} has no id in schema_message.dictionaries");
  }

  // FieldToFlatbufferVisitor::GetResult's order: children, the type table,
  // the dictionary encoding, the custom metadata, the name, the children
  // vector, the field.
  offset write_field(fb::builder& b, const field& f, std::vector<int>& pos) const {
    const bool is_dict = f.type.id == type_id::dictionary;
    const data_type& storage = is_dict ? f.type.values() : f.type;
    std::vector<offset> children;
    children.reserve(storage.children.size());
    for (std::size_t i = 0; i < storage.children.size(); ++i) {
      pos.push_back(static_cast<int>(i));
      children.push_back(write_field(b, storage.children[i], pos));
      pos.pop_back();
    }
    const auto [code, type_offset] = write_type(b, storage);
    offset dictionary = 0;
    if (is_dict) {
      const std::int64_t id = dictionary_id(pos);
      const offset index = int_table(b, f.type.index_type);
      b.start_table();
      b.add_scalar<std::int64_t>(fbs::dictionary_encoding::id, id, 0);
      b.add_offset(fbs::dictionary_encoding::index_type, index);
      b.add_bool(fbs::dictionary_encoding::is_ordered, f.type.ordered, false);
      dictionary = b.end_table();
    }
    const offset metadata = f.metadata.empty() ? 0 : write_key_values(b, f.metadata);
    const offset name = b.create_string(f.name);
    const offset kids = b.create_offset_vector(children);
    b.start_table();
    b.add_offset(fbs::field::custom_metadata, metadata);
    b.add_offset(fbs::field::children, kids);
    b.add_offset(fbs::field::dictionary, dictionary);
    b.add_offset(fbs::field::type, type_offset);
    b.add_offset(fbs::field::name, name);
    b.add_scalar<std::uint8_t>(fbs::field::type_type, code, fbs::NONE);
    b.add_bool(fbs::field::nullable, f.nullable, false);
    return b.end_table();
  }
};

// SchemaToFlatbuffer: the fields, their vector, the custom metadata, the schema.
offset write_schema(fb::builder& b, const schema_message& s) {
  const schema_writer w{s.dictionaries};
  std::vector<offset> fields;
  fields.reserve(s.schema.fields.size());
  std::vector<int> pos;
  for (std::size_t i = 0; i < s.schema.fields.size(); ++i) {
    pos.assign(1, static_cast<int>(i));
    fields.push_back(w.write_field(b, s.schema.fields[i], pos));
  }
  const offset fields_vector = b.create_offset_vector(fields);
  const offset metadata = s.schema.metadata.empty() ? 0 : write_key_values(b, s.schema.metadata);
  const offset features = s.features.empty() ? 0 : b.create_scalar_vector(s.features.data(), s.features.size(), 8);
  b.start_table();
  b.add_offset(fbs::schema::features, features);
  b.add_offset(fbs::schema::custom_metadata, metadata);
  b.add_offset(fbs::schema::fields, fields_vector);
  b.add_scalar<std::int16_t>(fbs::schema::endianness, 0, 0);
  return b.end_table();
}

void check_non_negative(std::int64_t v, const char* what) {
  if (v < 0) throw invalid_argument(std::string("IPC metadata: ") + what + " is negative (" + std::to_string(v) + ")");
}

// MakeRecordBatch: nodes, buffers, compression, variadic counts, the batch.
offset write_record_batch(fb::builder& b, const record_batch_header& h) {
  check_non_negative(h.length, "the record batch length");
  std::vector<std::int64_t> words;
  words.reserve(h.nodes.size() * 2);
  for (const auto& n : h.nodes) {
    check_non_negative(n.length, "a field node's length");
    check_non_negative(n.null_count, "a field node's null count");
    words.push_back(n.length);
    words.push_back(n.null_count);
  }
  const offset nodes = b.create_struct_vector(words.data(), h.nodes.size(), 16, 8);
  words.clear();
  for (const auto& r : h.buffers) {
    check_non_negative(r.offset, "a buffer's offset");
    check_non_negative(r.length, "a buffer's length");
    words.push_back(r.offset);
    words.push_back(r.length);
  }
  const offset buffers = b.create_struct_vector(words.data(), h.buffers.size(), 16, 8);
  offset compression = 0;
  if (h.compression) {
    b.start_table();
    b.add_scalar<std::int8_t>(fbs::body_compression::method, 0, 0);
    b.add_scalar<std::int8_t>(fbs::body_compression::codec, static_cast<std::int8_t>(*h.compression), 0);
    compression = b.end_table();
  }
  offset counts = 0;
  if (!h.variadic_buffer_counts.empty()) {
    for (const auto c : h.variadic_buffer_counts) check_non_negative(c, "a variadic buffer count");
    counts = b.create_scalar_vector(h.variadic_buffer_counts.data(), h.variadic_buffer_counts.size(), 8);
  }
  b.start_table();
  b.add_scalar<std::int64_t>(fbs::record_batch::length, h.length, 0);
  b.add_offset(fbs::record_batch::variadic_buffer_counts, counts);
  b.add_offset(fbs::record_batch::compression, compression);
  b.add_offset(fbs::record_batch::buffers, buffers);
  b.add_offset(fbs::record_batch::nodes, nodes);
  return b.end_table();
}

offset write_blocks(fb::builder& b, const std::vector<file_block>& blocks) {
  std::vector<std::byte> bytes(blocks.size() * 24);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const file_block& k = blocks[i];
    check_non_negative(k.offset, "a block's offset");
    check_non_negative(k.metadata_length, "a block's metadata length");
    check_non_negative(k.body_length, "a block's body length");
    std::memcpy(bytes.data() + 24 * i, &k.offset, 8);
    std::memcpy(bytes.data() + 24 * i + 8, &k.metadata_length, 4);
    std::memcpy(bytes.data() + 24 * i + 16, &k.body_length, 8);
  }
  return b.create_struct_vector(bytes.data(), blocks.size(), 24, 8);
}

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

void put_i32(std::vector<std::byte>& out, std::int32_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + 4);
}

std::int32_t get_i32(std::span<const std::byte> bytes, std::size_t at) {
  std::int32_t v;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

}  // namespace

// ---- messages -------------------------------------------------------------------

message_metadata read_message_metadata(std::span<const std::byte> flatbuffer) {
  fb::reader r(flatbuffer);
  const fb::table m = r.root("Message");
  message_metadata out;
  out.version = check_version(m.scalar<std::int16_t>(fbs::message::version, "version", 0), m, "version");
  out.body_length = non_negative(
      m.scalar<std::int64_t>(fbs::message::body_length, "bodyLength", 0), [&] { return m.field_path("bodyLength"); },
      "the body length");
  const auto code = m.scalar<std::uint8_t>(fbs::message::header_type, "header_type", 0);
  const char* label = nullptr;
  switch (static_cast<message_kind>(code)) {
    case message_kind::schema: label = "header(Schema)"; break;
    case message_kind::dictionary_batch: label = "header(DictionaryBatch)"; break;
    case message_kind::record_batch: label = "header(RecordBatch)"; break;
    case message_kind::none: fail(m.field_path("header_type"), "the message has no header");
    case message_kind::tensor:
    case message_kind::sparse_tensor:
      fail(m.field_path("header_type"),
           std::string(code == 4 ? "Tensor" : "SparseTensor") +
               " messages are not supported (schema, dictionary and record batch messages are)");
    default: fail(m.field_path("header_type"), "unknown message header type " + std::to_string(code));
  }
  const auto header = m.union_member(fbs::message::header, label);
  if (!header) fail(m.field_path(label), "missing (the header type is set, its table is not)");
  switch (static_cast<message_kind>(code)) {
    case message_kind::schema: out.header = read_schema(*header); break;
    case message_kind::record_batch: out.header = read_record_batch(*header, out.body_length); break;
    default: {
      dictionary_batch_header d;
      d.id = header->scalar<std::int64_t>(fbs::dictionary_batch::id, "id", 0);
      const auto data = header->child(fbs::dictionary_batch::data, "data");
      if (!data) fail(header->field_path("data"), "missing: a dictionary batch needs its record batch");
      d.data = read_record_batch(*data, out.body_length);
      d.is_delta = header->boolean(fbs::dictionary_batch::is_delta, "isDelta", false);
      out.header = std::move(d);
      break;
    }
  }
  out.custom_metadata = read_key_values(m, fbs::message::custom_metadata);
  return out;
}

std::vector<std::byte> write_message_metadata(const message_metadata& m) {
  check_non_negative(m.body_length, "the body length");
  fb::builder b;
  offset header = 0;
  std::uint8_t code = 0;
  if (const auto* s = std::get_if<schema_message>(&m.header)) {
    header = write_schema(b, *s);
    code = static_cast<std::uint8_t>(message_kind::schema);
  } else if (const auto* rb = std::get_if<record_batch_header>(&m.header)) {
    header = write_record_batch(b, *rb);
    code = static_cast<std::uint8_t>(message_kind::record_batch);
  } else if (const auto* d = std::get_if<dictionary_batch_header>(&m.header)) {
    const offset data = write_record_batch(b, d->data);
    b.start_table();
    b.add_scalar<std::int64_t>(fbs::dictionary_batch::id, d->id, 0);
    b.add_offset(fbs::dictionary_batch::data, data);
    b.add_bool(fbs::dictionary_batch::is_delta, d->is_delta, false);
    header = b.end_table();
    code = static_cast<std::uint8_t>(message_kind::dictionary_batch);
  } else {
    throw invalid_argument("IPC metadata: a message needs a header (schema, dictionary batch or record batch)");
  }
  const offset metadata = m.custom_metadata.empty() ? 0 : write_key_values(b, m.custom_metadata);
  b.start_table();
  b.add_scalar<std::int64_t>(fbs::message::body_length, m.body_length, 0);
  b.add_offset(fbs::message::custom_metadata, metadata);
  b.add_offset(fbs::message::header, header);
  b.add_scalar<std::int16_t>(fbs::message::version, static_cast<std::int16_t>(m.version), 0);
  b.add_scalar<std::uint8_t>(fbs::message::header_type, code, 0);
  return b.finish(b.end_table());
}

// ---- encapsulation --------------------------------------------------------------

message_prefix read_message_prefix(std::span<const std::byte> bytes, std::string_view where) {
  const std::string w(where);
  if (bytes.empty()) return message_prefix{0, 0};
  if (bytes.size() < 4) {
    fail(w, "truncated: " + std::to_string(bytes.size()) + " bytes, a message starts with a 4- or 8-byte prefix");
  }
  message_prefix p;
  std::int32_t first = get_i32(bytes, 0);
  if (static_cast<std::uint32_t>(first) == continuation_marker) {
    if (bytes.size() < 8) {
      fail(w, "truncated: " + std::to_string(bytes.size()) +
                  " bytes, the continuation marker is followed by a 4-byte metadata length");
    }
    p.prefix_length = 8;
    p.metadata_length = get_i32(bytes, 4);
  } else {
    p.prefix_length = 4;  // before Arrow 0.15: the length alone
    p.metadata_length = first;
  }
  if (p.metadata_length < 0) fail(w, "metadata length is negative (" + std::to_string(p.metadata_length) + ")");
  return p;
}

encapsulated_metadata read_encapsulated_metadata(std::span<const std::byte> bytes, std::string_view where) {
  const message_prefix p = read_message_prefix(bytes, where);
  if (p.end_of_stream()) return {p, {}};
  const auto available = bytes.size() - static_cast<std::size_t>(p.prefix_length);
  if (static_cast<std::size_t>(p.metadata_length) > available) {
    fail(std::string(where), "truncated: the metadata is " + std::to_string(p.metadata_length) + " bytes, " +
                                 std::to_string(available) + " follow the prefix");
  }
  return {p, bytes.subspan(static_cast<std::size_t>(p.prefix_length), static_cast<std::size_t>(p.metadata_length))};
}

std::vector<std::byte> encapsulate(std::span<const std::byte> flatbuffer) {
  const std::size_t padded = (flatbuffer.size() + 8 + 7) / 8 * 8 - 8;
  if (padded > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw invalid_argument("IPC metadata: a FlatBuffer of " + std::to_string(flatbuffer.size()) +
                           " bytes does not fit an int32 length");
  }
  std::vector<std::byte> out;
  out.reserve(8 + padded);
  put_i32(out, static_cast<std::int32_t>(continuation_marker));
  put_i32(out, static_cast<std::int32_t>(padded));
  out.insert(out.end(), flatbuffer.begin(), flatbuffer.end());
  out.resize(8 + padded, std::byte{0});
  return out;
}

std::vector<std::byte> write_encapsulated_metadata(const message_metadata& m) {
  return encapsulate(write_message_metadata(m));
}

std::vector<std::byte> end_of_stream_marker() {
  std::vector<std::byte> out;
  put_i32(out, static_cast<std::int32_t>(continuation_marker));
  put_i32(out, 0);
  return out;
}

// ---- the file format --------------------------------------------------------------

void check_file_magic(std::span<const std::byte> head) {
  if (head.size() < file_magic.size() || std::memcmp(head.data(), file_magic.data(), file_magic.size()) != 0) {
    fail("file header", "not an Arrow IPC file: it does not start with \"ARROW1\"");
  }
}

std::int32_t read_footer_length(std::span<const std::byte> trailer, std::int64_t file_size) {
  if (trailer.size() < static_cast<std::size_t>(file_trailer_size) ||
      file_size < file_header_size + file_trailer_size) {
    fail("file trailer",
         "truncated: an Arrow IPC file is at least " + std::to_string(file_header_size + file_trailer_size) + " bytes");
  }
  const auto tail = trailer.last(static_cast<std::size_t>(file_trailer_size));
  if (std::memcmp(tail.data() + 4, file_magic.data(), file_magic.size()) != 0) {
    fail("file trailer", "not an Arrow IPC file: it does not end with \"ARROW1\"");
  }
  const std::int32_t n = get_i32(tail, 0);
  const std::int64_t room = file_size - file_header_size - file_trailer_size;
  if (n <= 0 || n > room) {
    fail("file trailer", "footer length " + std::to_string(n) + " does not fit the " + std::to_string(file_size) +
                             "-byte file (at most " + std::to_string(room) + ")");
  }
  return n;
}

file_footer read_footer(std::span<const std::byte> flatbuffer, std::int64_t file_size) {
  fb::reader r(flatbuffer);
  const fb::table f = r.root("Footer");
  file_footer out;
  out.version = check_version(f.scalar<std::int16_t>(fbs::footer::version, "version", 0), f, "version");
  const auto schema = f.child(fbs::footer::schema, "schema");
  if (!schema) fail(f.field_path("schema"), "missing: a file footer needs the schema");
  out.schema = read_schema(*schema);
  // Messages lie between the header and the footer.
  const std::int64_t end = file_size - file_trailer_size - static_cast<std::int64_t>(flatbuffer.size());
  auto blocks = [&](int id, const char* name, std::vector<file_block>& into) {
    const auto v = f.vec(id, name, 24, 8);
    if (!v) return;
    into.reserve(v->size());
    for (std::uint32_t i = 0; i < v->size(); ++i) {
      const std::uint64_t at = v->element(i);
      file_block k{v->load<std::int64_t>(at), v->load<std::int32_t>(at + 8), v->load<std::int64_t>(at + 16)};
      const std::string where = v->element_path(i);
      if (k.offset < file_header_size || k.metadata_length <= 0 || k.metadata_length % 8 != 0 || k.body_length < 0) {
        fail(where, "offset " + std::to_string(k.offset) + ", metadata length " + std::to_string(k.metadata_length) +
                        ", body length " + std::to_string(k.body_length) +
                        ": the offset must be past the file header, the metadata length a positive multiple of 8, "
                        "the body length non-negative");
      }
      if (k.offset > end || k.metadata_length > end - k.offset || k.body_length > end - k.offset - k.metadata_length) {
        fail(where, "the message at bytes " + std::to_string(k.offset) + " + " + std::to_string(k.metadata_length) +
                        " + " + std::to_string(k.body_length) + " runs past the footer at byte " + std::to_string(end));
      }
      into.push_back(k);
    }
  };
  blocks(fbs::footer::dictionaries, "dictionaries", out.dictionaries);
  blocks(fbs::footer::record_batches, "recordBatches", out.record_batches);
  out.custom_metadata = read_key_values(f, fbs::footer::custom_metadata);
  return out;
}

file_footer read_file_footer(std::span<const std::byte> file) {
  const auto size = static_cast<std::int64_t>(file.size());
  check_file_magic(file);
  const std::int32_t n = read_footer_length(file, size);
  return read_footer(
      file.subspan(file.size() - static_cast<std::size_t>(file_trailer_size) - static_cast<std::size_t>(n),
                   static_cast<std::size_t>(n)),
      size);
}

std::vector<std::byte> write_footer(const file_footer& f) {
  fb::builder b;
  const offset schema = write_schema(b, f.schema);
  const offset dictionaries = write_blocks(b, f.dictionaries);
  const offset batches = write_blocks(b, f.record_batches);
  const offset metadata = f.custom_metadata.empty() ? 0 : write_key_values(b, f.custom_metadata);
  b.start_table();
  b.add_offset(fbs::footer::custom_metadata, metadata);
  b.add_offset(fbs::footer::record_batches, batches);
  b.add_offset(fbs::footer::dictionaries, dictionaries);
  b.add_offset(fbs::footer::schema, schema);
  b.add_scalar<std::int16_t>(fbs::footer::version, static_cast<std::int16_t>(f.version), 0);
  return b.finish(b.end_table());
}

std::vector<std::byte> write_file_trailer(const file_footer& f) {
  std::vector<std::byte> out = write_footer(f);
  put_i32(out, static_cast<std::int32_t>(out.size()));
  const auto magic = as_bytes(file_magic);
  out.insert(out.end(), magic.begin(), magic.end());
  return out;
}

}  // namespace cuarrow::ipc
