// make_array / make_record_batch: arrays built over device buffers (a
// kernel's output) are checked before they are returned; refused arguments
// stay usable.
#include <gtest/gtest.h>

#include <cstring>

#include "arrow_test_util.hpp"
#include "cuarrow/copy.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

template <class T>
cuarrow::buffer device_vector(const cuarrow::context& ctx, const std::vector<T>& v) {
  return cuarrow::copy_to_device(ctx, v.data(), static_cast<std::int64_t>(v.size() * sizeof(T)));
}

template <class E>
void expect_throw_with(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "\"" << part << "\" not in: " << e.what();
  }
}

TEST(ArrowConstruct, PrimitiveOverDeviceBuffersRoundTrips) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer values = device_vector<std::int64_t>(ctx, {1, 2, 3, 4});
  cuarrow::buffer valid = device_vector<std::uint8_t>(ctx, {0b1101});
  array_data a = make_array(int64(), 3, {valid, values}, -1, 1);
  EXPECT_EQ(placement_of(a).type, cuarrow::device_type::cuda);
  array_data h = to_host(a);
  array_data want = primitive<std::int64_t>(int64(), {std::nullopt, 3, 4});
  std::string diff;
  EXPECT_TRUE(equals(h, want, &diff)) << diff;
  // No validity bitmap: an absent (empty) buffer.
  array_data b = make_array(int64(), 4, {cuarrow::buffer(), values});
  EXPECT_TRUE(equals(to_host(b), primitive<std::int64_t>(int64(), {1, 2, 3, 4}), &diff)) << diff;
}

TEST(ArrowConstruct, NestedAndStringsRoundTrip) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data strs = make_array(utf8(), 2,
                               {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 2, 5}),
                                device_vector<char>(ctx, {'a', 'b', 'c', 'd', 'e'})});
  array_data lst = make_array(list(field("item", utf8())), 1,
                              {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 2})}, 0, 0, {strs});
  std::string diff;
  array_data want_strs = strings(utf8(), {"ab", "cde"});
  EXPECT_TRUE(equals(to_host(strs), want_strs, &diff)) << diff;
  record_batch b = make_record_batch(schema{{field("s", utf8())}, {}}, {strs});
  EXPECT_EQ(b.num_rows, 2);
  EXPECT_EQ(to_host(lst).children[0].length, 2);
}

TEST(ArrowConstruct, RefusesBadShapesAndLeavesInputsUsable) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer values = device_vector<std::int64_t>(ctx, {1, 2, 3});
  expect_throw_with<cuarrow::invalid_argument>(
      [&] { make_array(int64(), 3, {values}); },
      "Type's expected number of buffers (2) did not match the passed number (1)");
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(int64(), -1, {cuarrow::buffer(), values});
      },
      "Array length is negative");
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(int64(), 1, {cuarrow::buffer(), values}, -1, -2);
      },
      "Array offset is negative");
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(int64(), 1, {cuarrow::buffer(), values}, 2);
      },
      "null_count 2");
  // Undersized: 3 values at offset 1 need 32 bytes.
  expect_throw_with<invalid_data>(
      [&] {
        make_array(int64(), 3, {cuarrow::buffer(), values}, 0, 1);
      },
      "values buffer too small: needs 32 bytes");
  expect_throw_with<invalid_data>(
      [&] {
        make_array(
            int64(), 9,
            {device_vector<std::uint8_t>(ctx, {0xff}), device_vector<std::int64_t>(ctx, std::vector<std::int64_t>(9))});
      },
      "validity buffer too small: needs 2 bytes");
  // Offsets past the data (read from the device by cheap validation).
  expect_throw_with<invalid_data>(
      [&] {
        make_array(utf8(), 1,
                   {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 9}), device_vector<char>(ctx, {'a'})});
      },
      "last offset 9 is past the end");
  // Children: count and type.
  array_data ints = make_array(int64(), 3, {cuarrow::buffer(), values});
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(list(field("item", int64())), 0, {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0})});
      },
      "Type's expected number of children (1) did not match the passed number (0)");
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(list(field("item", utf8())), 1, {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 1})}, 0, 0,
                   {ints});
      },
      "child 0 (\"item\") has type int64");
  // A child too short for its parent.
  expect_throw_with<invalid_data>(
      [&] {
        make_array(list(field("item", int64())), 1, {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 5})}, 0, 0,
                   {ints});
      },
      "past the end");
  // The inputs are intact.
  EXPECT_EQ(ints.length, 3);
  EXPECT_EQ(values.size(), 24);
  EXPECT_TRUE(equals(to_host(ints), primitive<std::int64_t>(int64(), {1, 2, 3})));
}

TEST(ArrowConstruct, NullCountIsKnownWithoutABitmap) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer values = device_vector<std::int64_t>(ctx, {1, 2, 3});
  EXPECT_EQ(make_array(int64(), 3, {cuarrow::buffer(), values}).null_count, 0);
  EXPECT_EQ(make_array(int64(), 3, {device_vector<std::uint8_t>(ctx, {0b101}), values}).null_count, -1);
  EXPECT_EQ(make_array(null(), 3, {}).null_count, 3);
  array_data ints = make_array(int32(), 2, {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {1, 2})});
  data_type u = sparse_union({field("a", int32())}, {0});
  EXPECT_EQ(make_array(u, 2, {device_vector<std::int8_t>(ctx, {0, 0})}, -1, 0, {ints}).null_count, 0);
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_array(u, 2, {device_vector<std::int8_t>(ctx, {0, 0})}, 1, 0, {ints});
      },
      "no validity bitmap");
}

TEST(ArrowConstruct, RefusesMixedDevices) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  cuarrow::buffer v0 = device_vector<std::int64_t>(c0, {1, 2});
  cuarrow::buffer bits1 = device_vector<std::uint8_t>(c1, {0b11});
  expect_throw_with<cuarrow::device_mismatch>([&] { make_array(int64(), 2, {bits1, v0}); }, "one device");
  array_data a0 = make_array(int64(), 2, {cuarrow::buffer(), v0});
  array_data a1 = make_array(int64(), 2, {cuarrow::buffer(), device_vector<std::int64_t>(c1, {1, 2})});
  expect_throw_with<cuarrow::device_mismatch>(
      [&] {
        make_record_batch(schema{{field("a", int64()), field("b", int64())}, {}}, {a0, a1});
      },
      "one device");
}

TEST(ArrowConstruct, RecordBatchShapes) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data a = make_array(int64(), 3, {cuarrow::buffer(), device_vector<std::int64_t>(ctx, {1, 2, 3})});
  array_data b = make_array(int64(), 2, {cuarrow::buffer(), device_vector<std::int64_t>(ctx, {1, 2})});
  schema two{{field("a", int64()), field("b", int64())}, {}};
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_record_batch(two, {a, b});
      },
      "Column 1 named b expected length 3 but got length 2");
  expect_throw_with<cuarrow::invalid_argument>([&] { make_record_batch(two, {a}); },
                                               "Schema and number of arrays unequal");
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_record_batch(schema{{field("a", utf8())}, {}}, {a});
      },
      "Column 0 type not match schema: int64 vs string");
  record_batch ok = make_record_batch(two, {a, a});
  EXPECT_EQ(ok.num_rows, 3);
  EXPECT_TRUE(equals(to_host(ok.columns[1]), primitive<std::int64_t>(int64(), {1, 2, 3})));
}

// The placed variants label what they build with the field, the schema
// and the declared placement (what an array without memory reports), and
// take their children's and dictionary's data.
TEST(ArrowConstruct, PlacedArraysAndBatchesKeepTheirFieldAndPlacement) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const placement on_device{cuarrow::device_type::cuda, 0};
  const placement pinned{cuarrow::device_type::cuda_host, 0};
  field ext("ext", int64(), false, {{"ARROW:extension:name", "my.ext"}});
  placed_array a = make_placed_array(ext, 3, {cuarrow::buffer(), device_vector<std::int64_t>(ctx, {1, 2, 3})}, -1, 0,
                                     {}, std::nullopt, pinned);
  EXPECT_EQ(a.field.metadata, ext.metadata) << "the field (extension metadata) labels the array";
  EXPECT_EQ(a.where(), on_device) << "its memory says where it is, not the declaration";
  placed_array empty = make_placed_array(field("e", int64()), 0, {cuarrow::buffer(), cuarrow::buffer()}, -1, 0, {},
                                         std::nullopt, pinned);
  EXPECT_EQ(empty.where(), pinned) << "no memory: where it was declared";

  placed_array values = make_placed_array(
      field("", utf8()), 2,
      {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 1, 3}), device_vector<char>(ctx, {'a', 'b', 'c'})}, -1,
      0, {}, std::nullopt, on_device);
  placed_array dict =
      make_placed_array(field("d", dictionary(int8(), utf8())), 3,
                        {cuarrow::buffer(), device_vector<std::int8_t>(ctx, {1, 0, 1})}, -1, 0, {}, values, on_device);
  std::string diff;
  EXPECT_TRUE(equals(to_host(*dict.data.dictionary), strings(utf8(), {"a", "bc"}), &diff)) << diff;
  placed_array lst = make_placed_array(field("l", list(field("item", utf8()))), 1,
                                       {cuarrow::buffer(), device_vector<std::int32_t>(ctx, {0, 2})}, 0, 0, {values},
                                       std::nullopt, on_device);
  EXPECT_EQ(lst.children().at(0).data.length, 2);
  expect_throw_with<cuarrow::invalid_argument>(
      [&] {
        make_placed_array(field("d", dictionary(int8(), utf8())), 3,
                          {cuarrow::buffer(), device_vector<std::int8_t>(ctx, {1, 0, 1})}, -1, 0, {}, std::nullopt,
                          on_device);
      },
      "needs its dictionary");

  schema sc{{field("ext", int64(), false, ext.metadata), field("d", dictionary(int8(), utf8()))}, {}};
  placed_batch b = make_placed_batch(sc, {a, dict}, pinned);
  EXPECT_EQ(b.batch.num_rows, 3);
  EXPECT_EQ(b.where(), on_device);
  EXPECT_EQ(b.columns().at(0).field.metadata, ext.metadata) << "the schema's fields label the columns";
  placed_batch none = make_placed_batch(schema{}, {}, pinned);
  EXPECT_EQ(none.where(), pinned);
  expect_throw_with<cuarrow::invalid_argument>([&] { make_placed_batch(sc, {a}, on_device); },
                                               "Schema and number of arrays unequal");
}

}  // namespace
}  // namespace cuarrow_arrow_test
