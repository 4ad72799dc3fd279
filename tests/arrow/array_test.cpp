// array_data on the host: equality, slicing, placement, record batches,
// and the device views used on host memory.
#include <gtest/gtest.h>

#include <cuarrow/arrow/device_view.hpp>

#include "arrow_test_util.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

TEST(ArrowArray, SamplesAreValidAndEqualThemselves) {
  for (auto& [name, a] : sample_arrays()) {
    EXPECT_NO_THROW(validate(a, {validation_level::full, true})) << name;
    std::string diff;
    EXPECT_TRUE(equals(a, a, &diff)) << name << ": " << diff;
  }
}

TEST(ArrowArray, EqualityIsLogical) {
  // Same values, different physical layout: offset, garbage under nulls,
  // non-zero first offset.
  array_data a = strings(utf8(), {"ab", std::nullopt, "cde"});
  // Physical elements 2..4 hold "ab", null (over the bytes "GARB"), "cde".
  array_data b;
  b.type = utf8();
  b.length = 4;
  b.offset = 1;
  b.null_count = 2;
  b.buffers = {bitmap({false, false, true, false, true}), host_vector(std::vector<std::int32_t>{0, 0, 3, 5, 9, 12}),
               host_bytes("xyzabGARBcde", 12)};
  std::string diff;
  EXPECT_TRUE(equals(a, b.slice(1, 3), &diff)) << diff;

  array_data c = strings(utf8(), {"ab", std::nullopt, "cdf"});
  EXPECT_FALSE(equals(a, c, &diff));
  EXPECT_NE(diff.find("element 2"), std::string::npos) << diff;
  EXPECT_FALSE(equals(a, strings(utf8(), {"ab", "", "cde"}), &diff));
  EXPECT_NE(diff.find("element 1"), std::string::npos) << diff;
  EXPECT_FALSE(equals(a, strings(large_utf8(), {"ab", std::nullopt, "cde"}), &diff));
  EXPECT_NE(diff.find("types"), std::string::npos) << diff;

  // Run-end encoded arrays compare by logical values, not runs.
  auto samples = sample_arrays();
  for (auto& [name, x] : samples) {
    if (x.length < 2) continue;
    EXPECT_TRUE(equals(x.slice(1, x.length - 1), x.slice(1, x.length - 1))) << name;
  }
}

TEST(ArrowArray, EqualityFindsNestedDifferences) {
  array_data ints = primitive<std::int32_t>(int32(), {1, 2, 3, 4});
  array_data l1 = list_array(list(field("item", int32())), {0, 2, 4}, {true, true}, ints);
  array_data ints2 = primitive<std::int32_t>(int32(), {1, 2, 3, 5});
  array_data l2 = list_array(list(field("item", int32())), {0, 2, 4}, {true, true}, ints2);
  std::string diff;
  EXPECT_FALSE(equals(l1, l2, &diff));
  EXPECT_NE(diff.find("child 0 (\"item\")"), std::string::npos) << diff;
  EXPECT_NE(diff.find("element 3"), std::string::npos) << diff;
}

TEST(ArrowArray, SliceChecksBoundsAndNullCounts) {
  array_data a = primitive<std::int32_t>(int32(), {1, std::nullopt, 3});
  EXPECT_THROW(a.slice(2, 2), cuarrow::out_of_range);
  EXPECT_THROW(a.slice(-1, 1), cuarrow::out_of_range);
  array_data s = a.slice(1, 2);
  EXPECT_EQ(s.offset, 1);
  EXPECT_EQ(s.length, 2);
  EXPECT_EQ(s.null_count, -1);
  EXPECT_EQ(compute_null_count(s), 1);
  EXPECT_EQ(compute_null_count(a.slice(2, 1)), 0);
}

TEST(ArrowArray, NullCountsOfDeviceBitmapsAreCountedOnTheHost) {
  std::vector<std::optional<std::int32_t>> values(100);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i % 3 != 0) values[i] = static_cast<std::int32_t>(i);
  }
  const array_data host = primitive<std::int32_t>(int32(), values);
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const array_data dev = to_device(host, ctx, s);
  for (const auto& [off, len] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 100}, {3, 50}, {13, 0}, {99, 1}}) {
    SCOPED_TRACE(std::to_string(off) + "+" + std::to_string(len));
    const array_data cut = dev.slice(off, len);
    array_data unknown = cut;
    unknown.null_count = -1;
    std::int64_t expected = 0;
    for (std::int64_t i = off; i < off + len; ++i) expected += i % 3 == 0 ? 1 : 0;
    EXPECT_EQ(compute_null_count(unknown, s), expected);
  }
  array_data shrunk = dev;
  shrunk.null_count = -1;
  shrunk.buffers[0] = shrunk.buffers[0].slice(0, 5);
  EXPECT_THROW(compute_null_count(shrunk, s), invalid_data);
}

TEST(ArrowArray, PlacementIsSharedByTheWholeTree) {
  array_data a = list_array(list(field("item", int32())), {0, 1}, {true}, primitive<std::int32_t>(int32(), {7}));
  EXPECT_EQ(placement_of(a), (placement{cuarrow::device_type::cpu, -1}));
  array_data empty;
  empty.type = null();
  EXPECT_EQ(placement_of(empty).type, cuarrow::device_type::cpu);
}

TEST(ArrowArray, APlacementOfHostMemoryHasNoDevice) {
  EXPECT_EQ(placement::of(cuarrow::device_type::cpu, 3), (placement{cuarrow::device_type::cpu, -1}));
  EXPECT_EQ(placement::of(cuarrow::device_type::cpu, -1), placement{});
  EXPECT_EQ(placement::of(cuarrow::device_type::cuda, 1), (placement{cuarrow::device_type::cuda, 1}));
  EXPECT_EQ(placement::of(cuarrow::device_type::cuda_host, 0), (placement{cuarrow::device_type::cuda_host, 0}));
}

TEST(ArrowArray, RecordBatchAsStruct) {
  record_batch b;
  b.schema.fields = {field("x", int32()), field("y", utf8())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2}), strings(utf8(), {"a", "b"})};
  array_data s = b.to_struct();
  EXPECT_EQ(s.type, struct_(b.schema.fields));
  record_batch back = record_batch::from_struct(s, {{"m", "1"}});
  EXPECT_TRUE(equals(b, record_batch::from_struct(s)));
  EXPECT_EQ(back.schema.metadata.size(), 1u);
  // A struct at an offset: columns are sliced.
  array_data off = s.slice(1, 1);
  record_batch one = record_batch::from_struct(off);
  EXPECT_EQ(one.num_rows, 1);
  EXPECT_TRUE(equals(one.columns[1], strings(utf8(), {"b"})));
  // A struct with null rows is not a batch.
  array_data nulls = struct_array({field("x", int32())}, {primitive<std::int32_t>(int32(), {1, 2})}, {true, false});
  EXPECT_THROW(record_batch::from_struct(nulls), invalid_data);
  EXPECT_THROW(record_batch::from_struct(primitive<std::int32_t>(int32(), {1})), invalid_data);
}

TEST(ArrowArray, RecordBatchSliceAndSchema) {
  record_batch b;
  b.schema.fields = {field("x", int32()), field("y", utf8())};
  b.num_rows = 3;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2, 3}), strings(utf8(), {"a", std::nullopt, "c"})};
  record_batch s = b.slice(1, 2);
  EXPECT_EQ(s.num_rows, 2);
  EXPECT_TRUE(equals(s.columns[1], strings(utf8(), {std::nullopt, "c"})));
  EXPECT_EQ(b.slice(3, 0).num_rows, 0);
  EXPECT_THROW(b.slice(2, 2), cuarrow::out_of_range);
  EXPECT_THROW(b.slice(-1, 1), cuarrow::out_of_range);
  // Another schema of the same types: other names, nullability, metadata.
  schema other;
  other.fields = {field("a", int32(), false), field("b", utf8())};
  other.metadata = {{"k", "v"}};
  record_batch renamed = b.with_schema(other);
  EXPECT_EQ(renamed.schema.fields[0].name, "a");
  EXPECT_EQ(renamed.schema.metadata.size(), 1u);
  EXPECT_TRUE(equals(renamed.columns[1], b.columns[1]));
  other.fields.pop_back();
  EXPECT_THROW(b.with_schema(other), cuarrow::invalid_argument);
  other.fields = {field("x", int64()), field("y", utf8())};
  try {
    (void)b.with_schema(other);
    FAIL() << "a type change was accepted";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("column 0 (\"x\"): the requested type int64"), std::string::npos) << e.what();
  }
}

TEST(ArrowArray, AFieldLabelsAnArrayOfItsType) {
  const array_data a = primitive<std::int32_t>(int32(), {1, std::nullopt, 3});
  EXPECT_NO_THROW(check_field_of(field("renamed", int32(), false, {{"k", "v"}}), a));
  try {
    check_field_of(field("x", int64()), a);
    FAIL() << "a type change was accepted";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the requested type int64 is not the array's type int32"), std::string::npos)
        << e.what();
  }
}

TEST(ArrowArray, APlacedArrayLabelsWhatItHandsOut) {
  // A struct array of two children under a non-nullable field, declared on
  // device 0 (its buffers are host memory: where() says so).
  const placement gpu0 = placement::of(cuarrow::device_type::cuda, 0);
  const array_data kids =
      struct_array({field("i", int32(), false), field("s", utf8())},
                   {primitive<std::int32_t>(int32(), {1, 2, 3}), strings(utf8(), {"a", "b", "c"})}, {true, true, true});
  const placed_array a{field("rec", kids.type, false, {{"k", "v"}}), kids, gpu0};
  EXPECT_EQ(a.where(), placement{});
  EXPECT_FALSE(a.context().has_value());
  const std::vector<placed_array> children = a.children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].field.name, "i");
  EXPECT_FALSE(children[0].field.nullable);
  EXPECT_EQ(children[1].field.name, "s");
  EXPECT_EQ(children[1].declared, gpu0);
  EXPECT_TRUE(equals(children[1].data, kids.children[1]));
  EXPECT_FALSE(a.dictionary().has_value());
  EXPECT_THROW((void)a.indices(), cuarrow::invalid_argument);

  // A slice and a relabelling keep the field, or take the one asked for.
  const placed_array s = a.slice(1, 2);
  EXPECT_EQ(s.data.length, 2);
  EXPECT_EQ(s.field, a.field);
  EXPECT_THROW((void)a.slice(2, 2), cuarrow::out_of_range);
  const placed_array renamed = a.with_field(field("other", kids.type));
  EXPECT_EQ(renamed.field.name, "other");
  EXPECT_EQ(renamed.data.buffers.size(), a.data.buffers.size());
  EXPECT_THROW((void)a.with_field(field("x", int64())), cuarrow::invalid_argument);
  EXPECT_EQ(a.field.name, "rec");

  // An array without any buffer reports what was declared.
  array_data nulls;
  nulls.type = null();
  nulls.length = 4;
  nulls.null_count = 4;
  EXPECT_EQ((placed_array{field("n", null()), nulls, gpu0}.where()), gpu0);

  // A dictionary's values go under an unnamed field, its indices under the
  // array's name and nullability.
  for (auto& [name, d] : sample_arrays()) {
    if (d.type.id != type_id::dictionary) continue;
    const placed_array p{field("dict", d.type, false), d, gpu0};
    const std::optional<placed_array> values = p.dictionary();
    ASSERT_TRUE(values.has_value()) << name;
    EXPECT_EQ(values->field.name, "") << name;
    EXPECT_TRUE(values->field.nullable) << name;
    EXPECT_EQ(values->field.type, d.type.values()) << name;
    EXPECT_EQ(values->declared, gpu0) << name;
    const placed_array indices = p.indices();
    EXPECT_EQ(indices.field.name, "dict") << name;
    EXPECT_FALSE(indices.field.nullable) << name;
    EXPECT_EQ(indices.field.type, indices.data.type) << name;
    EXPECT_EQ(indices.data.type, data_type(d.type.index_type)) << name;
  }
}

TEST(ArrowArray, APlacedBatchHandsOutItsColumnsUnderTheirFields) {
  const placement gpu0 = placement::of(cuarrow::device_type::cuda, 0);
  record_batch b;
  b.schema.fields = {field("x", int32(), false), field("y", utf8())};
  b.num_rows = 3;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2, 3}), strings(utf8(), {"a", std::nullopt, "c"})};
  const placed_batch p{b, gpu0};
  EXPECT_EQ(p.where(), placement{});
  const std::vector<placed_array> columns = p.columns();
  ASSERT_EQ(columns.size(), 2u);
  EXPECT_EQ(columns[0].field, b.schema.fields[0]);
  EXPECT_EQ(columns[1].field.name, "y");
  EXPECT_EQ(columns[1].declared, gpu0);
  EXPECT_EQ(p.slice(1, 2).batch.num_rows, 2);
  EXPECT_EQ(p.slice(1, 2).declared, gpu0);
  EXPECT_THROW((void)p.slice(2, 2), cuarrow::out_of_range);
  schema other;
  other.fields = {field("a", int32()), field("b", utf8())};
  EXPECT_EQ(p.with_schema(other).columns()[0].field.name, "a");
  other.fields[0] = field("a", int64());
  EXPECT_THROW((void)p.with_schema(other), cuarrow::invalid_argument);
  EXPECT_EQ(p.batch.schema.fields[0].name, "x");
  // A batch of no rows and no buffers reports what was declared.
  record_batch empty;
  empty.schema.fields = {field("n", null())};
  array_data n;
  n.type = null();
  empty.columns = {n};
  EXPECT_EQ((placed_batch{empty, gpu0}.where()), gpu0);
}

TEST(ArrowArray, ValidityAndDictionaryIndicesOverTheSameBuffers) {
  array_data a = primitive<std::int32_t>(int32(), {1, std::nullopt, 3});
  array_data bare = a.without_validity();
  EXPECT_TRUE(a.has_validity_bitmap());
  EXPECT_FALSE(bare.has_validity_bitmap());
  EXPECT_FALSE(primitive<std::int32_t>(int32(), {1, 2}).has_validity_bitmap());
  EXPECT_EQ(bare.null_count, 0);
  EXPECT_EQ(bare.buffers[0].size(), 0);
  EXPECT_EQ(bare.buffers[1].address(), a.buffers[1].address());
  EXPECT_NO_THROW(validate(bare, {validation_level::full, true}));
  for (auto& [name, d] : sample_arrays()) {
    if (d.type.id != type_id::dictionary) {
      EXPECT_THROW((void)d.dictionary_indices(), cuarrow::invalid_argument) << name;
      continue;
    }
    array_data i = d.dictionary_indices();
    EXPECT_EQ(i.type, data_type(d.type.index_type)) << name;
    EXPECT_EQ(i.dictionary, nullptr) << name;
    EXPECT_EQ(i.buffers[1].address(), d.buffers[1].address()) << name;
    EXPECT_NO_THROW(validate(i, {validation_level::full, true})) << name;
  }
}

TEST(ArrowArray, WhatArrowCppsImporterReads) {
  EXPECT_FALSE(importer_reads_values(int32()));
  EXPECT_FALSE(importer_reads_values(list(field("item", float64()))));
  EXPECT_FALSE(importer_reads_values(struct_({field("a", int8()), field("b", boolean())})));
  EXPECT_TRUE(importer_reads_values(utf8()));
  EXPECT_TRUE(importer_reads_values(large_binary()));
  EXPECT_TRUE(importer_reads_values(list(field("item", utf8()))));
  EXPECT_TRUE(importer_reads_values(struct_({field("a", int8()), field("s", utf8())})));
  EXPECT_TRUE(importer_reads_values(map(int32(), int32())));
  EXPECT_TRUE(importer_reads_values(dictionary(int8(), utf8())));
  EXPECT_FALSE(importer_reads_values(dictionary(int8(), int64())));
  // A record batch, exported as its struct: as soon as one column is read.
  EXPECT_FALSE(importer_reads_values(schema{{field("a", int8()), field("l", list(field("item", float64())))}, {}}));
  EXPECT_TRUE(importer_reads_values(schema{{field("a", int8()), field("s", utf8())}, {}}));
  EXPECT_FALSE(importer_reads_values(schema{}));
}

TEST(ArrowDeviceView, ViewsApplyOffsetsAndValidity) {
  array_data ints = primitive<std::int32_t>(int32(), {1, std::nullopt, 3, 4, std::nullopt, 6, 7, 8, 9, 10});
  auto v = make_primitive_view<std::int32_t>(ints.slice(3, 5));
  EXPECT_EQ(v.size(), 5);
  EXPECT_EQ(v[0], 4);
  EXPECT_TRUE(v.is_null(1));
  EXPECT_EQ(v.value_or(1, -1), -1);
  EXPECT_EQ(v.value_or(4, -1), 8);
  EXPECT_EQ(v.value_or(5, -1), -1);  // out of bounds
  EXPECT_EQ(v.value_or(-1, -1), -1);
  static_assert(std::is_trivially_copyable_v<primitive_view<std::int32_t>>);
  static_assert(std::is_trivially_copyable_v<string_array_view>);
  static_assert(std::is_trivially_copyable_v<list_array_view<std::int32_t>>);

  EXPECT_THROW(make_primitive_view<std::int64_t>(ints), cuarrow::invalid_argument);
  EXPECT_THROW(make_primitive_view<std::int32_t>(strings(utf8(), {"a"})), cuarrow::invalid_argument);

  array_data s = strings(large_utf8(), {"ab", std::nullopt, "", "xyz"}).slice(1, 3);
  auto sv = make_binary_view<std::int64_t>(s);
  EXPECT_FALSE(sv.is_valid(0));
  EXPECT_EQ(sv.get(2).size, 3);
  EXPECT_EQ(std::string(sv.get(2).data, 3), "xyz");
  EXPECT_EQ(sv.value_or_empty(9).size, 0);
  EXPECT_THROW(make_binary_view<std::int32_t>(s), cuarrow::invalid_argument);

  array_data l = list_array(list(field("item", int32())), {0, 2, 2, 5}, {true, false, true},
                            primitive<std::int32_t>(int32(), {1, 2, 3, 4, 5}));
  auto lv = make_list_view<std::int32_t>(l.slice(1, 2));
  EXPECT_EQ(lv.list_size(0), 0);
  EXPECT_EQ(lv.begin(1), 2);
  EXPECT_EQ(lv.end(1), 5);
  EXPECT_FALSE(lv.is_valid(0));

  array_data bools = booleans({true, false, std::nullopt, true});
  auto bv = make_boolean_view(bools.slice(1, 3));
  EXPECT_FALSE(bv[0]);
  EXPECT_FALSE(bv.is_valid(1));
  EXPECT_TRUE(bv[2]);

  // A truncated buffer is refused before any kernel could read past it.
  array_data bad = ints;
  bad.buffers[1] = bad.buffers[1].slice(0, 8);
  EXPECT_THROW(make_primitive_view<std::int32_t>(bad), invalid_data);
}

}  // namespace
}  // namespace cuarrow_arrow_test
