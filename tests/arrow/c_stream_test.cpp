// ArrowArrayStream / ArrowDeviceArrayStream: export, import, adapters.
#include <gtest/gtest.h>

#include <cerrno>

#include "arrow_test_util.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

std::vector<record_batch> some_batches(std::uint64_t seed, int n) {
  random_arrays gen(seed);
  record_batch first = gen.batch(3, 5, 2);
  std::vector<record_batch> out{first};
  for (int i = 1; i < n; ++i) {
    record_batch b;
    b.schema = first.schema;
    b.num_rows = gen.uniform(0, 20);
    for (const field& f : b.schema.fields) b.columns.push_back(gen.array(f.type, b.num_rows));
    out.push_back(b);
  }
  return out;
}

batch_source from_vector(std::vector<record_batch> v) {
  auto state = std::make_shared<std::pair<std::vector<record_batch>, std::size_t>>(std::move(v), 0);
  return [state]() -> std::optional<record_batch> {
    if (state->second == state->first.size()) return std::nullopt;
    return state->first[state->second++];
  };
}

TEST(ArrowCStream, HostStreamRoundTrips) {
  auto batches = some_batches(1, 4);
  owned_array_stream st;
  export_array_stream(batches[0].schema, from_vector(batches), st.get());
  array_stream_reader reader(st.get(), {validation_level::full});
  EXPECT_TRUE(st.is_released());
  EXPECT_EQ(reader.schema(), batches[0].schema);
  for (const record_batch& b : batches) {
    std::optional<record_batch> got = reader.next();
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(same_values(b, *got));
  }
  EXPECT_FALSE(reader.next().has_value());
}

TEST(ArrowCStream, ErrorsCarryErrnoAndMessage) {
  owned_array_stream st;
  schema s;
  s.fields = {field("x", int32())};
  int calls = 0;
  export_array_stream(s, [&]() -> std::optional<record_batch> {
    if (++calls == 2) throw cuarrow::invalid_argument("the source broke");
    record_batch b;
    b.schema = s;
    b.num_rows = 1;
    b.columns = {primitive<std::int32_t>(int32(), {1})};
    return b;
  }, st.get());
  owned_array a;
  EXPECT_EQ(st->get_next(st.get(), a.get()), 0);
  a.reset();
  EXPECT_EQ(st->get_next(st.get(), a.get()), EINVAL);
  EXPECT_STREQ(st->get_last_error(st.get()), "the source broke");

  array_stream_reader reader(st.get());
  try {
    reader.next();  // calls == 3: fine
    calls = 1;
    reader.next();
    FAIL();
  } catch (const cuarrow::error& e) {
    EXPECT_NE(std::string(e.what()).find("the source broke"), std::string::npos) << e.what();
  }
}

TEST(ArrowCStream, ReleasedStreamsAreRefused) {
  owned_array_stream st;
  EXPECT_THROW(array_stream_reader r(st.get()), invalid_data);
  owned_device_array_stream dst;
  EXPECT_THROW(device_array_stream_reader r(dst.get()), invalid_data);
}

TEST(ArrowCDeviceStream, DeviceStreamRoundTrips) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  auto batches = some_batches(2, 5);
  std::vector<record_batch> on_device;
  for (const record_batch& b : batches) on_device.push_back(to_device_async(b, ctx, producer));
  owned_device_array_stream st;
  export_device_array_stream(batches[0].schema, from_vector(on_device), cuarrow::device_type::cuda, producer, st.get());
  EXPECT_EQ(st->device_type, ARROW_DEVICE_CUDA);
  device_array_stream_reader reader(st.get());
  EXPECT_EQ(reader.type(), cuarrow::device_type::cuda);
  cuarrow::stream consumer(ctx);
  for (const record_batch& b : batches) {
    std::optional<record_batch> got = reader.next(consumer);
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(same_values(b, to_host(*got, consumer)));
  }
  EXPECT_FALSE(reader.next(consumer).has_value());
}

TEST(ArrowCDeviceStream, BatchesInOtherMemoryAreAStreamError) {
  record_batch b;
  b.schema.fields = {field("x", int32())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2})};
  record_batch empty = b;
  empty.num_rows = 0;
  empty.columns = {primitive<std::int32_t>(int32(), {})};
  owned_device_array_stream st;
  export_device_array_stream(b.schema, from_vector({empty, b}), cuarrow::device_type::cuda, {}, st.get());
  owned_device_array a;
  // A batch without any buffer is labelled with the stream's type.
  ASSERT_EQ(st->get_next(st.get(), a.get()), 0);
  EXPECT_EQ(a->device_type, ARROW_DEVICE_CUDA);
  a.reset();
  // A host batch with buffers cannot be labelled CUDA memory.
  EXPECT_EQ(st->get_next(st.get(), a.get()), EINVAL);
  EXPECT_NE(std::string(st->get_last_error(st.get())).find("the stream carries cuda arrays"), std::string::npos)
      << st->get_last_error(st.get());
}

TEST(ArrowCDeviceStream, HostToDeviceAndBackAdapters) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto batches = some_batches(4, 6);
  owned_array_stream host;
  export_array_stream(batches[0].schema, from_vector(batches), host.get());
  owned_device_array_stream dev;
  to_device(host.get(), ctx, dev.get());
  EXPECT_TRUE(host.is_released());
  EXPECT_EQ(dev->device_type, ARROW_DEVICE_CUDA);
  // Device batches really are on the device, with an event each.
  {
    owned_schema sc;
    ASSERT_EQ(dev->get_schema(dev.get(), sc.get()), 0);
    EXPECT_EQ(read_schema(*sc.get()), batches[0].schema);
  }
  owned_array_stream back;
  to_host(dev.get(), back.get());
  array_stream_reader reader(back.get(), {validation_level::full});
  for (const record_batch& b : batches) {
    std::optional<record_batch> got = reader.next();
    ASSERT_TRUE(got.has_value());
    for (const array_data& c : got->columns) EXPECT_TRUE(cuarrow::is_host_accessible(placement_of(c).type));
    EXPECT_TRUE(same_values(b, *got));
  }
  EXPECT_FALSE(reader.next().has_value());
}

TEST(ArrowCDeviceStream, EachDeviceBatchCarriesItsEvent) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto batches = some_batches(5, 3);
  owned_array_stream host;
  export_array_stream(batches[0].schema, from_vector(batches), host.get());
  owned_device_array_stream dev;
  to_device(host.get(), ctx, dev.get());
  owned_device_array a;
  ASSERT_EQ(dev->get_next(dev.get(), a.get()), 0);
  EXPECT_EQ(a->device_type, ARROW_DEVICE_CUDA);
  EXPECT_NE(a->sync_event, nullptr);
  record_batch b = import_device_record_batch(a.get(), batches[0].schema);
  EXPECT_TRUE(same_values(batches[0], b));
}

}  // namespace
}  // namespace cuarrow_arrow_test
