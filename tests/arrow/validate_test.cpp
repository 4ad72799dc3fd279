// Validation: malformed arrays are refused with a message naming the path,
// never read out of bounds (the suite runs under ASan+UBSan too).
#include <gtest/gtest.h>

#include "arrow_test_util.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

// Expects validate() at `level` to throw invalid_data whose message contains
// every one of `parts`.
void expect_invalid(const array_data& a, validation_level level, const std::vector<std::string>& parts,
                    cuarrow::stream_view s = {}) {
  try {
    validate(a, {level, false, "column \"b\""}, s);
    ADD_FAILURE() << "accepted: " << a.type.to_string();
  } catch (const invalid_data& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "\"" << p << "\" not in: " << what;
  }
}

array_data list_of_strings() {
  array_data words = strings(utf8(), {"a", "bb", "ccc", "dddd", "e", "f", "g", "h", "i", "j", "k"});
  std::vector<std::int64_t> offsets;
  for (int i = 0; i <= 11; ++i) offsets.push_back(i);
  array_data l = list_array(list(field("item", utf8())), {0, 3, 5, 11}, {true, true, true}, words);
  return l;
}

TEST(ArrowValidate, TruncatedOffsetsNameTheChildPath) {
  array_data l = list_of_strings();
  // Child of 10 values at offset 1 needs 12 offsets = 48 bytes; give 40.
  array_data child = l.children[0].slice(1, 10);
  child.buffers[1] = child.buffers[1].slice(0, 40);
  l.children[0] = child;
  l.children[0].length = 10;
  l.buffers[1] = host_vector(std::vector<std::int32_t>{0, 3, 5, 10});
  expect_invalid(l, validation_level::cheap,
                 {"column \"b\" \u2192 child 0 (\"item\")", "offsets buffer too small", "needs 48 bytes",
                  "10 values at offset 1", "has 40"});
}

TEST(ArrowValidate, BuffersTooSmallForLengthAndOffset) {
  array_data ints = primitive<std::int32_t>(int32(), {1, 2, 3, 4});
  array_data a = ints;
  a.buffers[1] = a.buffers[1].slice(0, 12);
  expect_invalid(a, validation_level::cheap, {"values buffer too small", "needs 16 bytes"});
  a = ints;
  a.length = 5;
  expect_invalid(a, validation_level::cheap, {"values buffer too small", "5 values at offset 0"});
  a = primitive<std::int32_t>(int32(), {1, std::nullopt, 3, 4, 5, 6, 7, 8, 9});
  a.buffers[0] = a.buffers[0].slice(0, 1);
  expect_invalid(a, validation_level::cheap, {"validity buffer too small", "needs 2 bytes"});
  a = ints;
  a.null_count = 2;
  expect_invalid(a, validation_level::cheap, {"null count 2 but there is no validity buffer"});
  a = ints;
  a.offset = -1;
  expect_invalid(a, validation_level::cheap, {"negative offset"});
  a = ints;
  a.length = -3;
  expect_invalid(a, validation_level::cheap, {"negative length"});
  a = ints;
  a.offset = std::numeric_limits<std::int64_t>::max() - 1;
  expect_invalid(a, validation_level::cheap, {"overflows"});
  a = ints;
  a.null_count = 7;
  expect_invalid(a, validation_level::cheap, {"null count 7"});
  a = booleans({true, false, true});
  a.buffers[1] = cuarrow::buffer();
  expect_invalid(a, validation_level::cheap, {"values bitmap buffer too small"});
}

TEST(ArrowValidate, WrongBufferAndChildCounts) {
  array_data a = primitive<std::int32_t>(int32(), {1});
  a.buffers.push_back(cuarrow::buffer());
  expect_invalid(a, validation_level::cheap, {"3 buffers for type int32 (expected 2)"});
  array_data l = list_of_strings();
  l.children.clear();
  expect_invalid(l, validation_level::cheap, {"0 children", "expected 1"});
  array_data v = string_views(utf8_view(), {"x"});
  v.buffers.resize(1);
  expect_invalid(v, validation_level::cheap, {"expected at least 2"});
  array_data d = primitive<std::int8_t>(int8(), {0});
  d.type = dictionary(int8(), utf8());
  expect_invalid(d, validation_level::cheap, {"dictionary array without a dictionary"});
  d.dictionary = std::make_shared<array_data>(primitive<std::int32_t>(int32(), {1}));
  expect_invalid(d, validation_level::cheap, {"dictionary of type int32 for value type string"});
}

TEST(ArrowValidate, OffsetsOutOfRange) {
  array_data s = strings(utf8(), {"ab", "cd"});
  s.buffers[1] = host_vector(std::vector<std::int32_t>{0, 2, 9});
  expect_invalid(s, validation_level::cheap, {"last offset 9 is past the end of the data buffer (4 bytes)"});
  s.buffers[1] = host_vector(std::vector<std::int32_t>{-1, 2, 4});
  expect_invalid(s, validation_level::cheap, {"first offset -1 is negative"});
  s.buffers[1] = host_vector(std::vector<std::int32_t>{3, 2, 1});
  expect_invalid(s, validation_level::cheap, {"before the first offset"});
  // Decreasing in the middle: only full validation reads every offset.
  s.buffers[1] = host_vector(std::vector<std::int32_t>{0, 3, 2, 4});
  s.length = 3;
  EXPECT_NO_THROW(validate(s, {validation_level::cheap}));
  expect_invalid(s, validation_level::full, {"offsets decrease at element 1: 3 then 2"});

  array_data l = list_of_strings();
  l.buffers[1] = host_vector(std::vector<std::int32_t>{0, 3, 5, 12});
  expect_invalid(l, validation_level::cheap, {"last offset 12 is past the end of the child (11 values)"});
}

TEST(ArrowValidate, UnionTypeIdsAndOffsets) {
  auto samples = sample_arrays();
  auto find = [&](const std::string& n) {
    for (auto& [name, a] : samples) {
      if (name == n) return a;
    }
    throw std::runtime_error(n);
  };
  array_data su = find("sparse_union");
  su.buffers[0] = host_vector(std::vector<std::int8_t>{5, 7, 6, 5});
  EXPECT_NO_THROW(validate(su));
  expect_invalid(su, validation_level::full, {"element 2: type id 6 is not one of the union's type codes"});
  su = find("sparse_union");
  su.children[1] = su.children[1].slice(0, 3);
  expect_invalid(su, validation_level::cheap, {"child 1 (\"s\")", "child has 3 values, the parent needs 4"});

  array_data du = find("dense_union");
  du.buffers[1] = host_vector(std::vector<std::int32_t>{0, 0, 0, 2, 5});
  expect_invalid(du, validation_level::full, {"element 4: offset 5 is outside child 1 of 2 values"});
}

// A map's keys are counted as Arrow C++ counts them: a union has no
// validity bitmap (its first buffer holds type ids), so union keys have no
// nulls, whatever bits their type ids make.
TEST(ArrowValidate, UnionMapKeysHaveNoValidityBitmap) {
  array_data keys;
  keys.type = sparse_union({field("i", int32())}, {0});
  keys.length = 5;
  keys.null_count = -1;                                                   // unknown: full validation counts
  keys.buffers = {host_vector(std::vector<std::int8_t>{0, 0, 0, 0, 0})};  // as bits: five "nulls"
  keys.children = {primitive<std::int32_t>(int32(), {1, 2, 3, 4, 5})};
  const data_type mt = map(keys.type, int32(), false);
  array_data entries =
      struct_array(mt.children[0].type.children, {keys, primitive<std::int32_t>(int32(), {1, 2, 3, 4, 5})},
                   {true, true, true, true, true});
  entries.type = mt.children[0].type;
  const array_data m = list_array(mt, {0, 3, 5}, {true, true}, entries);
  EXPECT_NO_THROW(validate(m, {validation_level::full}));
}

TEST(ArrowValidate, DictionaryIndicesOutOfRange) {
  array_data d = primitive<std::int16_t>(int16(), {0, 1, std::nullopt, 3});
  d.type = dictionary(int16(), utf8());
  d.dictionary = std::make_shared<array_data>(strings(utf8(), {"a", "b"}));
  EXPECT_NO_THROW(validate(d));
  expect_invalid(d, validation_level::full, {"element 3: dictionary index 3 is outside the dictionary of 2 values"});
  // Nulls may hold any index.
  array_data ok = primitive<std::int16_t>(int16(), {0, 1, std::nullopt});
  ok.type = d.type;
  ok.dictionary = d.dictionary;
  EXPECT_NO_THROW(validate(ok, {validation_level::full}));
}

TEST(ArrowValidate, RunEnds) {
  auto samples = sample_arrays();
  array_data r;
  for (auto& [name, a] : samples) {
    if (name == "ree_int32") r = a;
  }
  array_data bad = r;
  bad.length = 7;
  expect_invalid(bad, validation_level::cheap, {"last run end 6 does not cover 7 values at offset 0"});
  bad = r;
  bad.children[0].buffers[1] = host_vector(std::vector<std::int32_t>{2, 2, 6});
  EXPECT_NO_THROW(validate(bad));
  expect_invalid(bad, validation_level::full, {"strictly increasing", "run end 1 is 2 after 2"});
  bad = r;
  bad.children[1] = bad.children[1].slice(0, 2);
  expect_invalid(bad, validation_level::cheap, {"values have 2 entries for 3 run ends"});
}

TEST(ArrowValidate, ViewsAndListViews) {
  array_data v = string_views(utf8_view(), {"short", "a string longer than twelve bytes"});
  array_data bad = v;
  bad.buffers[2] = bad.buffers[2].slice(0, 10);
  expect_invalid(bad, validation_level::full, {"element 1", "overruns data buffer 0"});
  bad = v;
  bad.buffers.resize(2);
  expect_invalid(bad, validation_level::full, {"element 1: view refers to data buffer 0 of 0"});

  array_data lv;
  lv.type = list_view(field("item", int8()));
  lv.length = 2;
  lv.null_count = 0;
  lv.buffers = {cuarrow::buffer(), host_vector(std::vector<std::int32_t>{0, 2}),
                host_vector(std::vector<std::int32_t>{2, 5})};
  lv.children = {primitive<std::int8_t>(int8(), {1, 2, 3})};
  EXPECT_NO_THROW(validate(lv));
  expect_invalid(lv, validation_level::full, {"element 1: list view [2, +5) is outside the child of 3 values"});
}

TEST(ArrowValidate, Utf8IsCheckedOnRequest) {
  array_data s = strings(utf8(), {"ok", "\xff\xfe"});
  EXPECT_NO_THROW(validate(s, {validation_level::full}));
  try {
    validate(s, {validation_level::full, true});
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_NE(std::string(e.what()).find("element 1 is not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(validate(strings(utf8(), {"h\xc3\xa9llo", "\xe2\x82\xac"}), {validation_level::full, true}));
}

TEST(ArrowValidate, FullNullCountMustMatchTheBitmap) {
  array_data a = primitive<std::int32_t>(int32(), {1, std::nullopt, 3});
  a.null_count = 2;
  EXPECT_NO_THROW(validate(a));
  expect_invalid(a, validation_level::full, {"null count 2 but the validity bitmap has 1 nulls"});
}

TEST(ArrowValidate, RecordBatchColumnsAreNamed) {
  record_batch b;
  b.schema.fields = {field("a", int32()), field("b", list(field("item", utf8())))};
  b.num_rows = 3;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2, 3}), list_of_strings()};
  EXPECT_NO_THROW(validate(b));
  b.columns[1].children[0].buffers[1] = b.columns[1].children[0].buffers[1].slice(0, 8);
  try {
    validate(b);
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_EQ(e.path(), "column \"b\" \u2192 child 0 (\"item\")");
  }
  b.columns[0] = primitive<std::int32_t>(int32(), {1});
  EXPECT_THROW(validate(b), invalid_data);
}

// Cheap validation of device arrays: only the batched read of offsets.
TEST(ArrowValidate, DeviceArraysAreValidatedWithoutHostPointers) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data l = list_of_strings();
  array_data d = to_device(l, ctx);
  EXPECT_NO_THROW(validate(d));
  EXPECT_NO_THROW(validate(d, {validation_level::full, true}));
  // Corrupt the last offset on the device: the batched read finds it.
  array_data bad = d;
  const std::int32_t big = 99;
  cuarrow::buffer offsets = cuarrow::allocate_device(ctx, d.buffers[1].size());
  cuarrow::copy(offsets, 0, d.buffers[1], 0, d.buffers[1].size());
  cuarrow::copy_from_host(offsets, 12, &big, 4);
  bad.buffers[1] = offsets;
  expect_invalid(bad, validation_level::cheap, {"last offset 99 is past the end of the child (11 values)"});
  // A decreasing offset inside: full validation reads it from a host copy.
  const std::int32_t small = 1;
  cuarrow::copy(offsets, 0, d.buffers[1], 0, d.buffers[1].size());
  cuarrow::copy_from_host(offsets, 8, &small, 4);
  EXPECT_NO_THROW(validate(bad));
  expect_invalid(bad, validation_level::full, {"offsets decrease at element 1: 3 then 1"});
}

}  // namespace
}  // namespace cuarrow_arrow_test
