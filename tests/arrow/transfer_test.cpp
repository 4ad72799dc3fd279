// to_device / to_host round trips over every type, sliced, nested, empty,
// on one and two devices, plus seeded random schemas and data.
#include <gtest/gtest.h>

#include "arrow_test_util.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

// Variants of `a`: itself, sliced at odd offsets, empty.
std::vector<std::pair<std::string, array_data>> variants(const array_data& a) {
  std::vector<std::pair<std::string, array_data>> v{{"whole", a}};
  if (a.length >= 2) v.emplace_back("slice(1, n-1)", a.slice(1, a.length - 1));
  if (a.length >= 5) v.emplace_back("slice(3, n-4)", a.slice(3, a.length - 4));
  if (a.length >= 3) v.emplace_back("slice(n-1, 1)", a.slice(a.length - 1, 1));
  v.emplace_back("slice(n/2, 0)", a.slice(a.length / 2, 0));
  return v;
}

bool on_device(const array_data& a, int device) {
  const placement p = placement_of(a);
  return p.type == cuarrow::device_type::cpu || (p.type == cuarrow::device_type::cuda && p.device_id == device);
}

TEST(ArrowTransfer, EverySampleRoundTrips) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (auto& [name, a] : sample_arrays()) {
    for (auto& [how, x] : variants(a)) {
      SCOPED_TRACE(name + " " + how);
      array_data d = to_device(x, ctx);
      EXPECT_TRUE(on_device(d, 0));
      if (x.length > 0 && x.type.id != type_id::null) {
        EXPECT_EQ(placement_of(d).type, cuarrow::device_type::cuda);
      }
      EXPECT_EQ(d.null_count, x.null_count);
      array_data h = to_host(d);
      EXPECT_TRUE(cuarrow::is_host_accessible(placement_of(h).type));
      EXPECT_TRUE(same_values(x, h));
      EXPECT_NO_THROW(validate(h, {validation_level::full}));
    }
  }
}

TEST(ArrowTransfer, OnAStreamOfItsOwn) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow_test::scoped_op_delay delay(50);  // the copies are still running when we look
  for (auto& [name, a] : sample_arrays()) {
    SCOPED_TRACE(name);
    array_data d = to_device_async(a, ctx, s);
    array_data h = to_host(d, s);
    EXPECT_TRUE(same_values(a, h));
  }
}

TEST(ArrowTransfer, TheSourceMayBeDroppedAtOnce) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  array_data expected = sample_arrays().back().second;
  array_data d;
  {
    cuarrow_test::scoped_op_delay delay(2000);
    auto samples = sample_arrays();
    for (auto& [name, a] : samples) {
      if (name == "deep") {
        expected = a;
        d = to_device_async(a, ctx, s);
      }
    }
    // Every host buffer of `samples` is dropped here, before the copies ran.
  }
  EXPECT_TRUE(same_values(expected, to_host(d, s)));
}

TEST(ArrowTransfer, RecordBatchesRoundTrip) {
  cuarrow::context ctx = cuarrow::context::get(0);
  record_batch b;
  for (auto& [name, a] : sample_arrays()) {
    if (a.length < 3) continue;
    b.schema.fields.push_back(field(name, a.type));
    b.columns.push_back(a.slice(0, 3));
  }
  b.num_rows = 3;
  b.schema.metadata = {{"k", "v"}};
  record_batch d = to_device(b, ctx);
  for (const array_data& c : d.columns) EXPECT_TRUE(on_device(c, 0));
  EXPECT_TRUE(same_values(b, to_host(d)));
}

TEST(ArrowTransfer, SlicesCopyOnlyWhatTheyReference) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::optional<std::int32_t>> v;
  for (int i = 0; i < 1000; ++i) v.push_back(i % 7 == 0 ? std::nullopt : std::optional<std::int32_t>(i));
  array_data ints = primitive<std::int32_t>(int32(), v);
  array_data d = to_device(ints.slice(501, 10), ctx);
  EXPECT_EQ(d.offset, 501 % 8);
  EXPECT_EQ(d.buffers[1].size(), (10 + 501 % 8) * 4);
  EXPECT_EQ(d.buffers[0].size(), 2);  // bits 5..14 of the trimmed bitmap
  EXPECT_TRUE(same_values(ints.slice(501, 10), d));

  std::vector<std::optional<std::string>> words;
  for (int i = 0; i < 100; ++i) words.push_back(std::string(static_cast<std::size_t>(i % 5 + 1), 'x'));
  array_data s = strings(utf8(), words);
  array_data ds = to_device(s.slice(0, 10), ctx);
  EXPECT_EQ(ds.buffers[1].size(), 11 * 4);
  EXPECT_EQ(ds.buffers[2].size(), 30);  // cut at the last offset (1+2+3+4+5)*2
  EXPECT_TRUE(same_values(s.slice(0, 10), ds));
}

TEST(ArrowTransfer, OneAllocationPerTree) {
  CUARROW_REQUIRE_EMULATION();
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data deep;
  for (auto& [name, a] : sample_arrays()) {
    if (name == "deep") deep = a;
  }
  ctx.synchronize();
  const std::size_t before = cuarrow_test::emu().device_allocation_count(0);
  const std::int64_t bytes_before = ctx.bytes_allocated();
  {
    array_data d = to_device(deep, ctx);
    EXPECT_EQ(cuarrow_test::emu().device_allocation_count(0), before + 1);
    EXPECT_GT(ctx.bytes_allocated(), bytes_before);
  }
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), bytes_before);  // freed with the last slice
}

// Arrays and batches as their holders declare them: copies keep their
// fields (or schema) and are declared on the destination device, host
// copies for export are host data.
TEST(ArrowTransfer, PlacedItemsKeepTheirFieldsAndAreDeclaredWhereTheyGo) {
  const int last = cuarrow::device_count() - 1;
  cuarrow::context ctx = cuarrow::context::get(last);
  array_data nulls;
  nulls.type = null();
  nulls.length = 3;
  nulls.null_count = 3;
  const std::vector<placed_array> arrays{{field("a", int32(), false, {{"k", "v"}}), sample("int32"), {}},
                                         {field("n", null()), nulls, {}}};
  const std::vector<placed_array> moved = to_device(std::span<const placed_array>(arrays), ctx);
  ASSERT_EQ(moved.size(), 2u);
  const placement gpu{cuarrow::device_type::cuda, last};
  for (std::size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].field, arrays[i].field);
    EXPECT_EQ(moved[i].declared, gpu);
    EXPECT_EQ(moved[i].where(), gpu);  // the null array, which has no buffer, too
  }
  auto back = to_host_for_export(std::span<const placed_array>(moved));
  back.wait();
  EXPECT_TRUE(same_values(back.data()[0], sample("int32")));

  record_batch b;
  b.schema.fields = {field("x", int32())};
  b.num_rows = sample("int32").length;
  b.columns = {sample("int32")};
  const std::vector<placed_batch> batches{{b, {}}, {b.slice(1, 2), {}}};
  const std::vector<placed_batch> mb = to_device(std::span<const placed_batch>(batches), ctx);
  ASSERT_EQ(mb.size(), 2u);
  EXPECT_EQ(mb[1].batch.schema, b.schema);
  EXPECT_EQ(mb[1].where(), gpu);
  std::vector<record_batch> hb = to_host_for_export(std::span<const placed_batch>(mb)).get();
  EXPECT_TRUE(same_values(hb[1], b.slice(1, 2)));
  // Errors name the batch, as for plain batches.
  std::vector<placed_batch> bad = batches;
  bad[1].batch.columns[0].buffers.resize(1);
  const std::string m = message_of([&] { to_device(std::span<const placed_batch>(bad), ctx); });
  EXPECT_NE(m.find("batch 1"), std::string::npos) << m;
}

TEST(ArrowTransfer, MalformedSourcesAreRefusedBeforeAnyCopy) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data s = strings(utf8(), {"ab", "cd"});
  s.buffers[1] = host_vector(std::vector<std::int32_t>{0, 2, 50});
  const std::int64_t before = ctx.bytes_allocated();
  EXPECT_THROW(to_device(s, ctx), invalid_data);
  EXPECT_EQ(ctx.bytes_allocated(), before);
  // Trusting the producer does not turn into an out-of-bounds read either:
  // the planned copy is checked against the buffer.
  EXPECT_THROW(to_device(s, ctx, {}, {validation_level::none}), invalid_data);
}

TEST(ArrowTransfer, ToHostOfHostDataSharesIt) {
  array_data a = strings(utf8(), {"x"});
  array_data h = to_host(a);
  EXPECT_EQ(h.buffers[2].address(), a.buffers[2].address());
}

TEST(ArrowTransfer, PinnedMemoryRoundTrips) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (auto& [name, a] : sample_arrays()) {
    SCOPED_TRACE(name);
    array_data p = to_pinned(a, ctx);
    if (a.length > 0 && a.type.id != type_id::null) {
      EXPECT_EQ(placement_of(p).type, cuarrow::device_type::cuda_host);
    }
    EXPECT_TRUE(same_values(a, p));
    EXPECT_TRUE(same_values(a, to_device(p, ctx)));
  }
}

TEST(ArrowTransfer, BetweenTwoDevices) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  cuarrow::stream s1(c1);
  for (auto& [name, a] : sample_arrays()) {
    SCOPED_TRACE(name);
    array_data d0 = to_device(a.length > 2 ? a.slice(1, a.length - 2) : a, c0);
    array_data d1 = to_device(d0, c1, s1);  // a peer copy, ordered on device 1's stream
    EXPECT_TRUE(on_device(d1, 1));
    EXPECT_TRUE(same_values(a.length > 2 ? a.slice(1, a.length - 2) : a, to_host(d1, s1)));
  }
  // A stream of neither device is refused.
  cuarrow::stream s0(c0);
  array_data h = primitive<std::int32_t>(int32(), {1, 2});
  EXPECT_THROW(to_device(h, c1, s0), cuarrow::device_mismatch);
}

TEST(ArrowTransfer, LargeArraysRoundTrip) {
  // Buffers above the core's staging threshold (4 MiB): pageable sources go
  // through the staging pipeline, results land in pinned memory.
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 3 << 20;
  std::vector<std::optional<std::int64_t>> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = i % 5 == 0 ? std::nullopt : std::optional(i * 7);
  array_data ints = primitive<std::int64_t>(int64(), v);
  std::vector<std::optional<std::string>> words(200000);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = std::string(i % 40, static_cast<char>('a' + i % 26));
  array_data strs = strings(large_utf8(), words);
  for (const array_data& x : {ints, ints.slice(12345, n - 20000), strs, strs.slice(3, 150000)}) {
    array_data d = to_device(x, ctx, s);
    EXPECT_TRUE(same_values(x, to_host(d, s)));
  }
}

TEST(ArrowTransfer, RandomBatchesRoundTrip) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_arrays gen(seed);
    record_batch b = gen.batch(static_cast<int>(gen.uniform(1, 4)), gen.uniform(0, 40), 3);
    ASSERT_NO_THROW(validate(b, {validation_level::full})) << "the generator made an invalid batch";
    record_batch d = to_device_async(b, ctx, s);
    record_batch h = to_host(d, s);
    ASSERT_TRUE(same_values(b, h));
    for (std::size_t c = 0; c < b.columns.size(); ++c) {
      array_data x = gen.slice(b.columns[c]);
      ASSERT_TRUE(same_values(x, to_host(to_device(x, ctx))));
    }
  }
}

}  // namespace
}  // namespace cuarrow_arrow_test
