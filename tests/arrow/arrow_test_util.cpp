#include <gtest/gtest.h>

#include "arrow_test_util.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>

namespace cuarrow_arrow_test {

using namespace cuarrow::arrow;  // NOLINT: test helpers

cuarrow::buffer host_bytes(const void* data, std::size_t n) {
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(n));
  if (n > 0) std::memcpy(b.mutable_host_data(), data, n);
  return b;
}

cuarrow::buffer bitmap(const std::vector<bool>& valid, std::int64_t bit_offset, bool force) {
  bool all = true;
  for (bool v : valid) all = all && v;
  if (all && !force) return cuarrow::buffer();
  const std::int64_t bits = bit_offset + static_cast<std::int64_t>(valid.size());
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>((bits + 7) / 8), 0);
  for (std::int64_t i = 0; i < bit_offset; ++i) {
    if ((i * 7 + 3) % 5 < 2) bytes[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
  }
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const std::int64_t b = bit_offset + static_cast<std::int64_t>(i);
    if (valid[i]) bytes[b / 8] |= static_cast<std::uint8_t>(1u << (b % 8));
  }
  return host_vector(bytes);
}

std::int64_t nulls_in(const std::vector<bool>& valid) {
  std::int64_t n = 0;
  for (bool v : valid) n += v ? 0 : 1;
  return n;
}

array_data booleans(const std::vector<std::optional<bool>>& v) {
  std::vector<bool> valid(v.size()), bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    valid[i] = v[i].has_value();
    bits[i] = v[i].value_or(false);
  }
  array_data a;
  a.type = boolean();
  a.length = static_cast<std::int64_t>(v.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid), bitmap(bits, 0, true)};
  return a;
}

namespace {

template <class O>
array_data strings_impl(data_type t, const std::vector<std::optional<std::string>>& v) {
  std::vector<O> offsets{0};
  std::string data;
  std::vector<bool> valid(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    valid[i] = v[i].has_value();
    data += v[i].value_or("");
    offsets.push_back(static_cast<O>(data.size()));
  }
  array_data a;
  a.type = std::move(t);
  a.length = static_cast<std::int64_t>(v.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid), host_vector(offsets), host_bytes(data.data(), data.size())};
  return a;
}

void put32(std::uint8_t* p, std::int32_t v) { std::memcpy(p, &v, 4); }

}  // namespace

array_data strings(data_type t, const std::vector<std::optional<std::string>>& v) {
  if (t.id == type_id::large_binary || t.id == type_id::large_utf8) return strings_impl<std::int64_t>(std::move(t), v);
  return strings_impl<std::int32_t>(std::move(t), v);
}

array_data string_views(data_type t, const std::vector<std::optional<std::string>>& v, std::size_t block) {
  std::vector<std::uint8_t> views(v.size() * 16, 0);
  std::vector<std::string> blocks;
  std::vector<bool> valid(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    valid[i] = v[i].has_value();
    if (!valid[i]) continue;
    const std::string& s = *v[i];
    std::uint8_t* view = &views[i * 16];
    put32(view, static_cast<std::int32_t>(s.size()));
    if (s.size() <= 12) {
      std::memcpy(view + 4, s.data(), s.size());
      continue;
    }
    if (blocks.empty() || blocks.back().size() + s.size() > block) blocks.emplace_back();
    std::memcpy(view + 4, s.data(), 4);
    put32(view + 8, static_cast<std::int32_t>(blocks.size() - 1));
    put32(view + 12, static_cast<std::int32_t>(blocks.back().size()));
    blocks.back() += s;
  }
  array_data a;
  a.type = std::move(t);
  a.length = static_cast<std::int64_t>(v.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid), host_vector(views)};
  for (const std::string& b : blocks) a.buffers.push_back(host_bytes(b.data(), b.size()));
  return a;
}

array_data list_array(data_type t, const std::vector<std::int64_t>& offsets, const std::vector<bool>& valid,
                      array_data child) {
  array_data a;
  a.length = static_cast<std::int64_t>(valid.size());
  a.null_count = nulls_in(valid);
  if (t.id == type_id::large_list) {
    a.buffers = {bitmap(valid), host_vector(offsets)};
  } else {
    std::vector<std::int32_t> o(offsets.begin(), offsets.end());
    a.buffers = {bitmap(valid), host_vector(o)};
  }
  a.type = std::move(t);
  a.children = {std::move(child)};
  return a;
}

array_data struct_array(std::vector<ca::field> fields, std::vector<array_data> children,
                        const std::vector<bool>& valid) {
  array_data a;
  a.type = struct_(std::move(fields));
  a.length = static_cast<std::int64_t>(valid.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid)};
  a.children = std::move(children);
  return a;
}

// ---- samples -----------------------------------------------------------------------------

namespace {

// Deterministic bytes for `n` values of `width` bytes.
array_data fixed_bytes(data_type t, int width, const std::vector<bool>& valid) {
  std::vector<std::uint8_t> bytes(valid.size() * static_cast<std::size_t>(width));
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  array_data a;
  a.type = std::move(t);
  a.length = static_cast<std::int64_t>(valid.size());
  a.null_count = nulls_in(valid);
  a.buffers = {bitmap(valid), host_vector(bytes)};
  return a;
}

array_data ree(data_type run_end_type, const std::vector<std::int64_t>& ends, array_data values) {
  array_data r;
  r.type = run_end_encoded(run_end_type, values.type);
  r.length = ends.empty() ? 0 : ends.back();
  r.null_count = 0;
  array_data e;
  e.type = run_end_type;
  e.length = static_cast<std::int64_t>(ends.size());
  e.null_count = 0;
  switch (run_end_type.id) {
    case type_id::int16:
      e.buffers = {cuarrow::buffer(), host_vector(std::vector<std::int16_t>(ends.begin(), ends.end()))};
      break;
    case type_id::int32:
      e.buffers = {cuarrow::buffer(), host_vector(std::vector<std::int32_t>(ends.begin(), ends.end()))};
      break;
    default: e.buffers = {cuarrow::buffer(), host_vector(ends)}; break;
  }
  r.children = {std::move(e), std::move(values)};
  return r;
}

template <class I>
array_data dict(data_type index, const std::vector<std::optional<I>>& indices, array_data values, bool ordered) {
  array_data a = primitive<I>(index, indices);
  a.type = dictionary(index, values.type, ordered);
  a.dictionary = std::make_shared<array_data>(std::move(values));
  return a;
}

}  // namespace

std::vector<std::pair<std::string, array_data>> sample_arrays() {
  using opt_s = std::optional<std::string>;
  std::vector<std::pair<std::string, array_data>> out;
  const std::vector<bool> v5{true, false, true, true, false};

  array_data n;
  n.type = null();
  n.length = 4;
  n.null_count = 4;
  out.emplace_back("null", n);
  out.emplace_back("bool", booleans({true, std::nullopt, false, true, true, std::nullopt, false, true, false}));
  out.emplace_back("int8", primitive<std::int8_t>(int8(), {1, std::nullopt, -3, 127}));
  out.emplace_back("uint8", primitive<std::uint8_t>(uint8(), {1, 255, std::nullopt}));
  out.emplace_back("int16", primitive<std::int16_t>(int16(), {-1, 2, 3, std::nullopt, 5}));
  out.emplace_back("uint16", primitive<std::uint16_t>(uint16(), {65535, std::nullopt}));
  out.emplace_back("int32", primitive<std::int32_t>(int32(), {1, std::nullopt, 3, 4, std::nullopt, 6, 7, 8, 9, 10}));
  out.emplace_back("uint32", primitive<std::uint32_t>(uint32(), {4000000000u, 1, std::nullopt}));
  out.emplace_back("int64", primitive<std::int64_t>(int64(), {-9000000000LL, std::nullopt, 3}));
  out.emplace_back("uint64", primitive<std::uint64_t>(uint64(), {18000000000000000000ULL, 0, std::nullopt}));
  out.emplace_back("float16", primitive<std::uint16_t>(float16(), {0x3C00, std::nullopt, 0xC000}));
  out.emplace_back("float32", primitive<float>(float32(), {1.5f, std::nullopt, -2.25f}));
  out.emplace_back("float64", primitive<double>(float64(), {3.25, -0.0, std::nullopt, 1e300}));
  out.emplace_back("decimal32", fixed_bytes(decimal(9, 2, 32), 4, v5));
  out.emplace_back("decimal64", fixed_bytes(decimal(18, -3, 64), 8, v5));
  out.emplace_back("decimal128", fixed_bytes(decimal(38, 10), 16, v5));
  out.emplace_back("decimal256", fixed_bytes(decimal(76, 0, 256), 32, v5));
  out.emplace_back("date32", primitive<std::int32_t>(date32(), {19000, std::nullopt}));
  out.emplace_back("date64", primitive<std::int64_t>(date64(), {1700000000000LL, std::nullopt}));
  out.emplace_back("time32s", primitive<std::int32_t>(time32(time_unit::second), {3600, std::nullopt}));
  out.emplace_back("time32ms", primitive<std::int32_t>(time32(time_unit::milli), {3600000}));
  out.emplace_back("time64us", primitive<std::int64_t>(time64(time_unit::micro), {1, std::nullopt, 2}));
  out.emplace_back("time64ns", primitive<std::int64_t>(time64(time_unit::nano), {1, 2}));
  out.emplace_back("timestamp_s", primitive<std::int64_t>(timestamp(time_unit::second), {0, std::nullopt}));
  out.emplace_back("timestamp_ms_utc", primitive<std::int64_t>(timestamp(time_unit::milli, "UTC"), {1, 2, 3}));
  out.emplace_back("timestamp_us_ny",
                   primitive<std::int64_t>(timestamp(time_unit::micro, "America/New_York"), {std::nullopt, 5}));
  out.emplace_back("timestamp_ns_offset", primitive<std::int64_t>(timestamp(time_unit::nano, "+07:00"), {7}));
  out.emplace_back("duration_s", primitive<std::int64_t>(duration(time_unit::second), {1, std::nullopt}));
  out.emplace_back("duration_ms", primitive<std::int64_t>(duration(time_unit::milli), {2}));
  out.emplace_back("duration_us", primitive<std::int64_t>(duration(time_unit::micro), {3}));
  out.emplace_back("duration_ns", primitive<std::int64_t>(duration(time_unit::nano), {4, 5}));
  out.emplace_back("interval_months", primitive<std::int32_t>(interval_months(), {12, std::nullopt, -1}));
  out.emplace_back("interval_day_time", fixed_bytes(interval_day_time(), 8, v5));
  out.emplace_back("interval_month_day_nano", fixed_bytes(interval_month_day_nano(), 16, v5));
  out.emplace_back("fixed_size_binary3", fixed_bytes(fixed_size_binary(3), 3, v5));
  out.emplace_back("fixed_size_binary0", fixed_bytes(fixed_size_binary(0), 0, v5));
  const std::vector<opt_s> words{"a", std::nullopt, "", "hello world", "xyz", std::nullopt, "end"};
  out.emplace_back("binary", strings(binary(), words));
  out.emplace_back("utf8", strings(utf8(), words));
  out.emplace_back("large_binary", strings(large_binary(), words));
  out.emplace_back("large_utf8", strings(large_utf8(), words));
  const std::vector<opt_s> long_words{"short", std::nullopt,   "a string longer than twelve bytes",
                                      "",      "exactly12byt", "another long string value, in a second block",
                                      "tiny",  std::nullopt,   "thirteen byte"};
  out.emplace_back("binary_view", string_views(binary_view(), long_words));
  out.emplace_back("utf8_view", string_views(utf8_view(), long_words));
  out.emplace_back("utf8_view_inline_only", string_views(utf8_view(), {"a", "bc", std::nullopt}));

  array_data ints = primitive<std::int32_t>(int32(), {1, 2, std::nullopt, 3, 4, 5, 6});
  out.emplace_back(
      "list", list_array(list(ca::field("item", int32())), {0, 2, 2, 2, 3, 7}, {true, false, true, true, true}, ints));
  out.emplace_back("large_list", list_array(large_list(ca::field("item", utf8())), {0, 1, 3, 3, 7},
                                            {true, true, false, true}, strings(utf8(), words)));
  {
    array_data lv;
    lv.type = list_view(ca::field("item", int32()));
    lv.length = 4;
    lv.null_count = 1;
    lv.buffers = {bitmap({true, true, false, true}), host_vector(std::vector<std::int32_t>{4, 0, 9, 1}),
                  host_vector(std::vector<std::int32_t>{3, 2, 0, 5})};
    lv.children = {ints};
    out.emplace_back("list_view", lv);
    array_data llv = lv;
    llv.type = large_list_view(ca::field("item", int32()));
    llv.buffers = {bitmap({true, true, false, true}), host_vector(std::vector<std::int64_t>{4, 0, 9, 1}),
                   host_vector(std::vector<std::int64_t>{3, 2, 0, 5})};
    out.emplace_back("large_list_view", llv);
  }
  {
    array_data fsl;
    fsl.type = fixed_size_list(ca::field("item", int32()), 2);
    fsl.length = 3;
    fsl.null_count = 1;
    fsl.buffers = {bitmap({true, false, true})};
    fsl.children = {ints.slice(0, 6)};
    out.emplace_back("fixed_size_list", fsl);
  }
  out.emplace_back("struct", struct_array({ca::field("a", int32()), ca::field("b", utf8(), false)},
                                          {ints.slice(0, 5), strings(utf8(), {"p", "q", "r", "s", "t"})},
                                          {true, false, true, true, true}));
  {
    array_data keys = strings(utf8(), {"a", "b", "c", "a", "z"});
    array_data items = primitive<std::int32_t>(int32(), {1, std::nullopt, 3, 4, 5});
    data_type mt = map(utf8(), int32(), true);
    array_data entries = struct_array(mt.children[0].type.children, {keys, items}, {true, true, true, true, true});
    entries.type = mt.children[0].type;
    out.emplace_back("map", list_array(mt, {0, 3, 3, 5}, {true, false, true}, entries));
  }
  {
    array_data su;
    su.type = sparse_union({ca::field("i", int32()), ca::field("s", utf8())}, {5, 7});
    su.length = 4;
    su.null_count = 0;
    su.buffers = {host_vector(std::vector<std::int8_t>{5, 7, 7, 5})};
    su.children = {ints.slice(0, 4), strings(utf8(), {"w", std::nullopt, "y", "z"})};
    out.emplace_back("sparse_union", su);
    array_data du;
    du.type = dense_union(
        {ca::field("i", int32()), ca::field("s", utf8()), ca::field("t", struct_({ca::field("x", float64())}))},
        {0, 1, 2});
    du.length = 5;
    du.null_count = 0;
    du.buffers = {host_vector(std::vector<std::int8_t>{0, 1, 2, 0, 1}),
                  host_vector(std::vector<std::int32_t>{0, 0, 0, 2, 1})};
    du.children = {ints, strings(utf8(), {"first", std::nullopt}),
                   struct_array({ca::field("x", float64())}, {primitive<double>(float64(), {2.5})}, {true})};
    out.emplace_back("dense_union", du);
  }
  out.emplace_back("ree_int32", ree(int32(), {2, 3, 6}, strings(utf8(), {"a", std::nullopt, "b"})));
  out.emplace_back("ree_int16", ree(int16(), {1, 5}, primitive<double>(float64(), {1.0, std::nullopt})));
  out.emplace_back("ree_int64", ree(int64(), {3, 4, 9}, primitive<std::int8_t>(int8(), {1, 2, 3})));
  out.emplace_back("dictionary_int8_utf8", dict<std::int8_t>(int8(), {0, 1, std::nullopt, 2, 0},
                                                             strings(utf8(), {"x", "y", std::nullopt}), false));
  out.emplace_back(
      "dictionary_uint32_list_ordered",
      dict<std::uint32_t>(uint32(), {1, 1, 0, std::nullopt},
                          list_array(list(ca::field("item", int32())), {0, 2, 5}, {true, true}, ints), true));
  {
    // list<struct<a: list<utf8_view>, b: dictionary<int16, large_utf8>, c: map<int32, fixed_size_list<float32>[2]>>>
    array_data sv = string_views(utf8_view(), {"one", "a long string for the views", std::nullopt, "four"});
    array_data a = list_array(list(ca::field("item", utf8_view())), {0, 2, 2, 4}, {true, false, true}, sv);
    array_data b = dict<std::int16_t>(int16(), {1, 0, std::nullopt}, strings(large_utf8(), {"p", "q"}), false);
    array_data fl;
    fl.type = fixed_size_list(ca::field("item", float32()), 2);
    fl.length = 2;
    fl.null_count = 0;
    fl.buffers = {cuarrow::buffer()};
    fl.children = {primitive<float>(float32(), {1, 2, 3, std::nullopt})};
    data_type mt = map(int32(), fl.type);
    array_data entries =
        struct_array(mt.children[0].type.children, {primitive<std::int32_t>(int32(), {7, 8}), fl}, {true, true});
    entries.type = mt.children[0].type;
    array_data c = list_array(mt, {0, 1, 2, 2}, {true, true, false}, entries);
    array_data st = struct_array({ca::field("a", a.type), ca::field("b", b.type), ca::field("c", c.type)}, {a, b, c},
                                 {true, true, false});
    out.emplace_back("deep", list_array(list(ca::field("item", st.type)), {0, 1, 3}, {true, true}, st));
  }
  {
    // An extension type: storage fixed_size_binary(16), name in field metadata.
    ca::field uuid("id", fixed_size_binary(16), true,
                   {{"ARROW:extension:name", "arrow.uuid"}, {"ARROW:extension:metadata", ""}});
    out.emplace_back("extension_in_struct",
                     struct_array({uuid}, {fixed_bytes(fixed_size_binary(16), 16, {true, false})}, {true, true}));
  }
  array_data e32 = primitive<std::int32_t>(int32(), {});
  out.emplace_back("empty_int32", e32);
  array_data es = strings(utf8(), {});
  es.buffers[1] = cuarrow::buffer();  // an empty array may omit its offsets
  out.emplace_back("empty_utf8", es);
  out.emplace_back("empty_list", list_array(list(ca::field("item", int32())), {0}, {}, e32));
  return out;
}

array_data sample(const std::string& name) {
  for (auto& [n, a] : sample_arrays()) {
    if (n == name) return a;
  }
  throw std::runtime_error("no sample " + name);
}

std::vector<data_type> sample_types() {
  std::vector<data_type> out;
  for (auto& [name, a] : sample_arrays()) out.push_back(a.type);
  out.push_back(time32(time_unit::milli));
  out.push_back(timestamp(time_unit::second, ""));
  out.push_back(timestamp(time_unit::nano, "Europe/Paris"));
  out.push_back(dictionary(uint64(), struct_({ca::field("k", utf8(), false, {{"key", "value"}})}), true));
  out.push_back(map(large_utf8(), list(ca::field("item", int8())), false, false));
  out.push_back(dense_union({}, {}));
  out.push_back(sparse_union({ca::field("a", null()), ca::field("b", boolean())}, {127, 0}));
  out.push_back(fixed_size_list(ca::field("element", decimal(5, 2, 32), false), 0));
  out.push_back(run_end_encoded(int16(), dictionary(int8(), utf8())));
  return out;
}

// ---- random ---------------------------------------------------------------------------------

ca::field random_arrays::field(const std::string& name, int depth) {
  ca::field f(name, type(depth), chance(0.8));
  if (chance(0.1)) f.metadata = {{"key", "value"}, {"empty", ""}};
  if (chance(0.05)) f.metadata = {{"ARROW:extension:name", "cuarrow.test"}, {"ARROW:extension:metadata", "{\"v\":1}"}};
  return f;
}

data_type random_arrays::type(int depth) {
  const bool nest = depth > 0 && chance(0.45);
  if (!nest) {
    static const std::vector<data_type> leaves = [] {
      std::vector<data_type> l{null(),
                               boolean(),
                               int8(),
                               uint8(),
                               int16(),
                               uint16(),
                               int32(),
                               uint32(),
                               int64(),
                               uint64(),
                               float16(),
                               float32(),
                               float64(),
                               decimal(7, 2, 32),
                               decimal(15, 3, 64),
                               decimal(30, 5),
                               decimal(60, 10, 256),
                               date32(),
                               date64(),
                               time32(time_unit::second),
                               time32(time_unit::milli),
                               time64(time_unit::micro),
                               time64(time_unit::nano),
                               timestamp(time_unit::second),
                               timestamp(time_unit::milli, "UTC"),
                               timestamp(time_unit::micro, "Asia/Tokyo"),
                               timestamp(time_unit::nano),
                               duration(time_unit::second),
                               duration(time_unit::nano),
                               interval_months(),
                               interval_day_time(),
                               interval_month_day_nano(),
                               fixed_size_binary(0),
                               fixed_size_binary(5),
                               binary(),
                               large_binary(),
                               utf8(),
                               large_utf8(),
                               binary_view(),
                               utf8_view()};
      return l;
    }();
    return leaves[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(leaves.size()) - 1))];
  }
  switch (uniform(0, 10)) {
    case 0: return list(field("item", depth - 1));
    case 1: return large_list(field("item", depth - 1));
    case 2: return list_view(field("item", depth - 1));
    case 3: return large_list_view(field("item", depth - 1));
    case 4: return fixed_size_list(field("item", depth - 1), static_cast<std::int32_t>(uniform(0, 3)));
    case 5: {
      std::vector<ca::field> fs;
      const auto n = uniform(1, 3);
      for (std::int64_t i = 0; i < n; ++i) fs.push_back(field("f" + std::to_string(i), depth - 1));
      return struct_(std::move(fs));
    }
    case 6: return map(chance(0.5) ? int32() : utf8(), type(depth - 1), chance(0.5), chance(0.7));
    case 7:
    case 8: {
      std::vector<ca::field> fs;
      std::vector<std::int8_t> codes;
      const auto n = uniform(1, 3);
      for (std::int64_t i = 0; i < n; ++i) {
        fs.push_back(field("u" + std::to_string(i), depth - 1));
        std::int8_t c;
        do {
          c = static_cast<std::int8_t>(uniform(0, 127));
        } while (std::find(codes.begin(), codes.end(), c) != codes.end());
        codes.push_back(c);
      }
      return uniform(0, 1) ? sparse_union(std::move(fs), std::move(codes))
                           : dense_union(std::move(fs), std::move(codes));
    }
    case 9: {
      data_type v = type(depth - 1);
      while (v.id == type_id::run_end_encoded) v = type(depth - 1);
      const data_type ends[] = {int16(), int32(), int64()};
      return run_end_encoded(ends[uniform(0, 2)], std::move(v));
    }
    default: {
      data_type v = type(depth - 1);
      const data_type idx[] = {int8(), uint8(), int16(), uint16(), int32(), uint32(), int64(), uint64()};
      return dictionary(idx[uniform(0, 7)], std::move(v), chance(0.5));
    }
  }
}

std::vector<bool> random_arrays::validity(std::int64_t n) {
  std::vector<bool> v(static_cast<std::size_t>(n), true);
  if (chance(0.3)) return v;
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = chance(0.75);
  return v;
}

void random_arrays::set_validity(array_data& a, const std::vector<bool>& valid) {
  a.buffers[0] = bitmap(valid, 0, chance(0.2));
  a.null_count = nulls_in(valid);
  if (a.buffers[0].size() > 0 && chance(0.2)) a.null_count = -1;
}

std::string random_arrays::text(std::int64_t max_len) {
  std::string s(static_cast<std::size_t>(uniform(0, max_len)), ' ');
  for (char& c : s) c = static_cast<char>('a' + uniform(0, 25));
  return s;
}

array_data random_arrays::array(const data_type& t, std::int64_t length) {
  if (chance(0.35)) {
    const std::int64_t front = uniform(0, 13);
    const std::int64_t back = uniform(0, 3);
    return generate(t, length + front + back).slice(front, length);
  }
  return generate(t, length);
}

array_data random_arrays::slice(const array_data& a) {
  const std::int64_t off = uniform(0, a.length);
  const std::int64_t len = uniform(0, a.length - off);
  return a.slice(off, len);
}

record_batch random_arrays::batch(int columns, std::int64_t rows, int depth) {
  record_batch b;
  b.num_rows = rows;
  for (int i = 0; i < columns; ++i) {
    b.schema.fields.push_back(field("c" + std::to_string(i), depth));
    b.columns.push_back(array(b.schema.fields.back().type, rows));
  }
  if (chance(0.5)) b.schema.metadata = {{"batch", "metadata"}};
  return b;
}

namespace {

template <class O>
cuarrow::buffer offsets_buffer(const std::vector<std::int64_t>& v) {
  return host_vector(std::vector<O>(v.begin(), v.end()));
}

cuarrow::buffer typed_ints(const data_type& t, const std::vector<std::int64_t>& v) {
  switch (bit_width(t)) {
    case 8: return host_vector(std::vector<std::int8_t>(v.begin(), v.end()));
    case 16: return host_vector(std::vector<std::int16_t>(v.begin(), v.end()));
    case 32: return host_vector(std::vector<std::int32_t>(v.begin(), v.end()));
    default: return host_vector(v);
  }
}

}  // namespace

array_data random_arrays::generate(const data_type& t, std::int64_t n) {
  array_data a;
  a.type = t;
  a.length = n;
  a.null_count = 0;
  const type_layout l = layout_of(t);
  a.buffers.assign(l.buffers.size(), cuarrow::buffer());
  std::vector<bool> valid = l.has_validity ? validity(n) : std::vector<bool>(static_cast<std::size_t>(n), true);
  if (l.has_validity) set_validity(a, valid);

  switch (t.id) {
    case type_id::null: a.null_count = n; return a;
    case type_id::boolean: {
      std::vector<bool> bits(static_cast<std::size_t>(n));
      for (auto&& b : bits) b = chance(0.5);
      a.buffers[1] = bitmap(bits, 0, true);
      return a;
    }
    case type_id::binary:
    case type_id::utf8:
    case type_id::large_binary:
    case type_id::large_utf8: {
      std::vector<std::int64_t> offsets;
      std::string data = text(chance(0.3) ? 4 : 0);  // bytes before the first offset
      offsets.push_back(static_cast<std::int64_t>(data.size()));
      for (std::int64_t i = 0; i < n; ++i) {
        data += valid[static_cast<std::size_t>(i)] || chance(0.2) ? text(9) : "";
        offsets.push_back(static_cast<std::int64_t>(data.size()));
      }
      data += text(2);
      const bool large = t.id == type_id::large_binary || t.id == type_id::large_utf8;
      a.buffers[1] = large ? offsets_buffer<std::int64_t>(offsets) : offsets_buffer<std::int32_t>(offsets);
      a.buffers[2] = host_bytes(data.data(), data.size());
      if (n == 0 && chance(0.5)) a.buffers[1] = cuarrow::buffer();
      return a;
    }
    case type_id::binary_view:
    case type_id::utf8_view: {
      std::vector<std::optional<std::string>> v;
      for (std::int64_t i = 0; i < n; ++i) {
        v.push_back(valid[static_cast<std::size_t>(i)] ? std::optional<std::string>(text(chance(0.5) ? 30 : 12))
                                                       : std::nullopt);
      }
      array_data s = string_views(t, v, static_cast<std::size_t>(uniform(30, 80)));
      s.buffers[0] = a.buffers[0];
      s.null_count = a.null_count;
      return s;
    }
    case type_id::list:
    case type_id::large_list:
    case type_id::map: {
      std::vector<std::int64_t> offsets{uniform(0, 2)};
      for (std::int64_t i = 0; i < n; ++i) {
        const bool ok = valid[static_cast<std::size_t>(i)];
        offsets.push_back(offsets.back() + (ok ? uniform(0, 3) : (chance(0.2) ? 1 : 0)));
      }
      const std::int64_t child_len = offsets.back() + uniform(0, 2);
      a.buffers[1] =
          t.id == type_id::large_list ? offsets_buffer<std::int64_t>(offsets) : offsets_buffer<std::int32_t>(offsets);
      if (t.id == type_id::map) {
        const data_type& et = t.children[0].type;
        array_data keys = array(et.children[0].type, child_len);
        keys.buffers[0] = cuarrow::buffer();
        keys.null_count = 0;
        array_data entries;
        entries.type = et;
        entries.length = child_len;
        entries.null_count = 0;
        entries.buffers = {cuarrow::buffer()};
        entries.children = {keys, array(et.children[1].type, child_len)};
        a.children = {entries};
      } else {
        a.children = {array(t.children[0].type, child_len)};
      }
      return a;
    }
    case type_id::list_view:
    case type_id::large_list_view: {
      const std::int64_t child_len = uniform(0, 2 * n + 2);
      std::vector<std::int64_t> offs, sizes;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t o = uniform(0, child_len);
        offs.push_back(o);
        sizes.push_back(uniform(0, std::min<std::int64_t>(3, child_len - o)));
      }
      const bool large = t.id == type_id::large_list_view;
      a.buffers[1] = large ? offsets_buffer<std::int64_t>(offs) : offsets_buffer<std::int32_t>(offs);
      a.buffers[2] = large ? offsets_buffer<std::int64_t>(sizes) : offsets_buffer<std::int32_t>(sizes);
      a.children = {array(t.children[0].type, child_len)};
      return a;
    }
    case type_id::fixed_size_list: a.children = {array(t.children[0].type, n * t.fixed_size)}; return a;
    case type_id::struct_:
      for (const ca::field& f : t.children) a.children.push_back(array(f.type, n));
      return a;
    case type_id::sparse_union:
    case type_id::dense_union: {
      std::vector<std::int8_t> ids;
      std::vector<std::int64_t> offs;
      std::vector<std::int64_t> counts(t.children.size());
      for (auto& c : counts) c = uniform(0, 2);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto c = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(t.children.size()) - 1));
        ids.push_back(t.type_codes[c]);
        offs.push_back(counts[c]++);
      }
      a.buffers[0] = host_vector(ids);
      if (t.id == type_id::dense_union) {
        a.buffers[1] = offsets_buffer<std::int32_t>(offs);
        for (std::size_t c = 0; c < t.children.size(); ++c)
          a.children.push_back(array(t.children[c].type, counts[c] + uniform(0, 1)));
      } else {
        for (const ca::field& f : t.children) a.children.push_back(array(f.type, n));
      }
      return a;
    }
    case type_id::run_end_encoded: {
      std::vector<std::int64_t> ends;
      std::int64_t covered = 0;
      while (covered < n) {
        covered += uniform(1, 3);
        ends.push_back(covered);
      }
      array_data e;
      e.type = t.children[0].type;
      e.length = static_cast<std::int64_t>(ends.size());
      e.null_count = 0;
      e.buffers = {cuarrow::buffer(), typed_ints(e.type, ends)};
      a.children = {e, array(t.children[1].type, e.length + uniform(0, 1))};
      return a;
    }
    case type_id::dictionary: {
      const std::int64_t d = uniform(1, 6);
      a.dictionary = std::make_shared<array_data>(array(*t.value_type, d));
      std::vector<std::int64_t> idx;
      for (std::int64_t i = 0; i < n; ++i) idx.push_back(uniform(0, d - 1));
      data_type it(t.index_type);
      a.buffers[1] = typed_ints(it, idx);
      return a;
    }
    default: {
      const int w = bit_width(t) / 8;
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n * w));
      for (auto& b : bytes) b = static_cast<std::uint8_t>(uniform(0, 255));
      a.buffers[1] = host_vector(bytes);
      return a;
    }
  }
}

::testing::AssertionResult same_values(const array_data& expected, const array_data& actual) {
  array_data h = cuarrow::arrow::to_host(actual);
  std::string diff;
  if (equals(expected, h, &diff)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "arrays differ: " << diff << " (type " << expected.type.to_string() << ")";
}

::testing::AssertionResult same_values(const record_batch& expected, const record_batch& actual) {
  record_batch h = cuarrow::arrow::to_host(actual);
  std::string diff;
  if (equals(expected, h, &diff)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "batches differ: " << diff;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace cuarrow_arrow_test
