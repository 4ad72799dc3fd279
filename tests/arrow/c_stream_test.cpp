// ArrowArrayStream / ArrowDeviceArrayStream: export, import, adapters.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "../fault_api.hpp"
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

TEST(ArrowCStream, HostStreamRoundTrips) {
  auto batches = some_batches(1, 4);
  owned_array_stream st;
  export_array_stream(batches[0].schema, source_of(batches), st.get());
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
  export_array_stream(
      s,
      [&]() -> std::optional<record_batch> {
        if (++calls == 2) throw cuarrow::invalid_argument("the source broke");
        record_batch b;
        b.schema = s;
        b.num_rows = 1;
        b.columns = {primitive<std::int32_t>(int32(), {1})};
        return b;
      },
      st.get());
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
  export_device_array_stream(batches[0].schema, source_of(on_device), cuarrow::device_type::cuda, producer, st.get());
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
  export_device_array_stream(b.schema, source_of({empty, b}), cuarrow::device_type::cuda, {}, st.get());
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
  export_array_stream(batches[0].schema, source_of(batches), host.get());
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
  export_array_stream(batches[0].schema, source_of(batches), host.get());
  owned_device_array_stream dev;
  to_device(host.get(), ctx, dev.get());
  owned_device_array a;
  ASSERT_EQ(dev->get_next(dev.get(), a.get()), 0);
  EXPECT_EQ(a->device_type, ARROW_DEVICE_CUDA);
  EXPECT_NE(a->sync_event, nullptr);
  record_batch b = import_device_record_batch(a.get(), batches[0].schema);
  EXPECT_TRUE(same_values(batches[0], b));
}

TEST(ArrowCStream, StreamsOfArraysOfAnyType) {
  random_arrays gen(7);
  for (int round = 0; round < 20; ++round) {
    const field f("chunks", gen.type(2), true, {{"k", "v"}});
    SCOPED_TRACE(f.type.to_string());
    std::vector<array_data> chunks;
    for (int i = 0; i < 3; ++i) chunks.push_back(gen.array(f.type, gen.uniform(0, 12)));
    owned_array_stream st;
    export_array_stream(f, source_of(chunks), st.get());
    // Read as arrays whatever the type; by_schema reads a struct as batches.
    const stream_items items = round % 2 == 0 ? stream_items::arrays : stream_items::by_schema;
    array_stream_reader reader(st.get(), {validation_level::full}, items);
    const bool batches = items == stream_items::by_schema && f.type.id == type_id::struct_;
    ASSERT_EQ(reader.reads_batches(), batches);
    owned_schema original = reader.take_c_schema();
    ASSERT_FALSE(original.is_released());
    EXPECT_EQ(read_field(*original.get()), f);
    EXPECT_TRUE(reader.take_c_schema().is_released());
    if (batches) continue;
    EXPECT_EQ(reader.root_field(), f);
    EXPECT_THROW(reader.next(), cuarrow::invalid_argument);
    for (const array_data& c : chunks) {
      std::optional<array_data> got = reader.next_array();
      ASSERT_TRUE(got.has_value());
      EXPECT_TRUE(same_values(c, *got));
    }
    EXPECT_FALSE(reader.next_array().has_value());
  }
}

TEST(ArrowCStream, ReadAllReadsEveryItemAsTheReaderReads) {
  random_arrays gen(11);
  const field f("chunks", gen.type(2), true);
  std::vector<array_data> chunks;
  for (int i = 0; i < 3; ++i) chunks.push_back(gen.array(f.type, gen.uniform(0, 12)));
  owned_array_stream st;
  export_array_stream(f, source_of(chunks), st.get());
  array_stream_reader reader(st.get(), {validation_level::full}, stream_items::arrays);
  ASSERT_TRUE(reader.next_array().has_value());  // read_all reads what is left
  stream_contents all = reader.read_all();
  EXPECT_TRUE(all.batches.empty());
  ASSERT_EQ(all.arrays.size(), 2U);
  for (const placed_array& a : all.arrays) {
    EXPECT_EQ(a.declared, placement{}) << "host items: cpu, no device";
    EXPECT_EQ(a.field.name, "chunks") << "each under the stream's field";
  }
  EXPECT_TRUE(same_values(chunks[1], all.arrays[0].data));
  EXPECT_TRUE(same_values(chunks[2], all.arrays[1].data));
  EXPECT_TRUE(reader.read_all().arrays.empty());

  array_stream_reader moved(std::move(reader));
  EXPECT_THROW(reader.read_all(), cuarrow::invalid_argument);  // NOLINT(bugprone-use-after-move)
}

TEST(ArrowCDeviceStream, ReadAllGivesEachItemsPlacement) {
  const int last = cuarrow::device_count() - 1;
  cuarrow::context ctx = cuarrow::context::get(last);
  cuarrow::stream producer(ctx);
  array_data strings_chunk = strings(utf8(), {"a", std::nullopt, "ccc"});
  array_data empty;  // no buffers at all: labelled where the stream says
  empty.type = utf8();
  empty.buffers.resize(3);
  const field f("s", utf8());
  std::vector<array_data> on_device{to_device_async(strings_chunk, ctx, producer), empty};
  owned_device_array_stream st;
  const placement where{cuarrow::device_type::cuda, last};
  export_device_array_stream(f, source_of(on_device), where, producer, st.get());
  device_array_stream_reader reader(st.get(), {}, stream_items::by_schema);
  cuarrow::stream consumer(ctx);
  stream_contents all = reader.read_all(consumer);
  EXPECT_TRUE(all.batches.empty());
  ASSERT_EQ(all.arrays.size(), 2U);
  EXPECT_EQ(all.arrays[0].declared, where);
  EXPECT_EQ(all.arrays[1].declared, where);
  EXPECT_EQ(all.arrays[1].where(), where) << "an item without buffers is where its device array said";
  EXPECT_TRUE(same_values(strings_chunk, to_host(all.arrays[0].data, consumer)));
  EXPECT_EQ(all.arrays[1].data.length, 0);
}

TEST(ArrowCDeviceStream, DeviceStreamsOfArraysOfAnyType) {
  const int last = cuarrow::device_count() - 1;
  cuarrow::context ctx = cuarrow::context::get(last);
  cuarrow::stream producer(ctx);
  array_data strings_chunk = strings(utf8(), {"a", std::nullopt, "ccc"});
  array_data empty;  // no buffers at all: labelled where the stream says
  empty.type = utf8();
  empty.buffers.resize(3);
  const field f("s", utf8());
  std::vector<array_data> on_device{to_device_async(strings_chunk, ctx, producer), empty};
  owned_device_array_stream st;
  const placement where{cuarrow::device_type::cuda, last};
  export_device_array_stream(f, source_of(on_device), where, producer, st.get());
  EXPECT_EQ(st->device_type, ARROW_DEVICE_CUDA);
  device_array_stream_reader reader(st.get(), {}, stream_items::by_schema);
  EXPECT_FALSE(reader.reads_batches());
  EXPECT_EQ(reader.root_field(), f);
  cuarrow::stream consumer(ctx);
  placement p;
  std::optional<array_data> a = reader.next_array(consumer, &p);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(p, where);
  EXPECT_TRUE(same_values(strings_chunk, to_host(*a, consumer)));
  p = placement{};
  a = reader.next_array(consumer, &p);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(p, where);
  EXPECT_EQ(a->length, 0);
  EXPECT_FALSE(reader.next_array(consumer).has_value());

  // A host chunk with buffers in a CUDA stream is the stream's error.
  owned_device_array_stream bad;
  export_device_array_stream(f, source_of({strings_chunk}), where, producer, bad.get());
  owned_device_array out;
  EXPECT_EQ(bad->get_next(bad.get(), out.get()), EINVAL);
  EXPECT_NE(std::string(bad->get_last_error(bad.get())).find("this array is in cpu memory"), std::string::npos);
}

// A stream whose callbacks are what a test sets.
struct hand_made {
  static inline int schema_rc = 0;
  static inline bool released_schema = false;
  static inline const char* message = nullptr;
  static inline int releases = 0;
  static int get_schema(ArrowArrayStream*, ArrowSchema* out) {
    if (schema_rc != 0) return schema_rc;
    if (released_schema) {
      *out = ArrowSchema{};
      return 0;
    }
    export_type(int32(), out);
    return 0;
  }
  static int get_next(ArrowArrayStream*, ArrowArray*) { return EIO; }
  static const char* get_last_error(ArrowArrayStream*) { return message; }
  static void release(ArrowArrayStream* s) {
    ++releases;
    s->release = nullptr;
  }
  static ArrowArrayStream make() {
    ArrowArrayStream s{};
    s.get_schema = get_schema;
    s.get_next = get_next;
    s.get_last_error = get_last_error;
    s.release = release;
    return s;
  }
};

TEST(ArrowCStream, HostileStreamsAreRefusedAndReleasedOnce) {
  hand_made::releases = 0;
  {
    ArrowArrayStream s = hand_made::make();
    s.get_next = nullptr;
    const std::string m = message_of([&] { array_stream_reader r(&s); });
    EXPECT_NE(m.find("ArrowArrayStream: the stream has a NULL get_schema or get_next callback"), std::string::npos)
        << m;
    EXPECT_THROW(array_stream_reader r(&s), invalid_data);  // taken: released now
  }
  {
    ArrowArrayStream s = hand_made::make();
    s.get_last_error = nullptr;
    hand_made::schema_rc = EINVAL;
    const std::string m = message_of([&] { array_stream_reader r(&s); });
    hand_made::schema_rc = 0;
    EXPECT_NE(m.find("ArrowArrayStream.get_schema failed (errno " + std::to_string(EINVAL) +
                     ", EINVAL): the producer gave no message"),
              std::string::npos)
        << m;
  }
  {
    ArrowArrayStream s = hand_made::make();
    hand_made::released_schema = true;
    EXPECT_THROW(array_stream_reader r(&s), invalid_data);
    hand_made::released_schema = false;
  }
  {
    ArrowArrayStream s = hand_made::make();
    const std::string m = message_of([&] { array_stream_reader r(&s, {}, stream_items::batches); });
    EXPECT_NE(m.find("a stream of record batches needs a struct schema, got int32"), std::string::npos) << m;
  }
  {
    ArrowArrayStream s = hand_made::make();
    hand_made::message = "the producer's own words";
    array_stream_reader r(&s, {}, stream_items::by_schema);
    const std::string m = message_of([&] { r.next_array(); });
    hand_made::message = nullptr;
    EXPECT_NE(
        m.find("ArrowArrayStream.get_next failed (errno " + std::to_string(EIO) + ", EIO): the producer's own words"),
        std::string::npos)
        << m;
  }
  EXPECT_EQ(hand_made::releases, 5);
}

TEST(ArrowCDeviceStream, ItemsOfUndeclaredMemoryAreRefused) {
  record_batch b;
  b.schema.fields = {field("x", int32())};
  b.num_rows = 2;
  b.columns = {primitive<std::int32_t>(int32(), {1, 2})};
  owned_device_array_stream st;
  export_device_array_stream(b.schema, source_of({b}), cuarrow::device_type::cpu, {}, st.get());
  st->device_type = ARROW_DEVICE_CUDA;  // a producer that says one thing and does another
  device_array_stream_reader reader(st.get());
  const std::string m = message_of([&] { reader.next(); });
  EXPECT_NE(m.find("the stream declared cuda arrays but produced a cpu array"), std::string::npos) << m;
}

// ---- device_readahead -------------------------------------------------------------------

// A host stream of `batches` that counts its get_next calls (and the
// threads they came from), failing at call `fail_at` (1-based) if set.
struct counted_source {
  explicit counted_source(std::vector<record_batch> b, int fail = 0) : batches(std::move(b)), fail_at(fail) {}

  std::vector<record_batch> batches;
  int fail_at = 0;
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<std::thread::id> threads;

  void export_to(ArrowArrayStream* out) {
    export_array_stream(
        batches[0].schema,
        [this]() -> std::optional<record_batch> {
          const int call = ++calls;
          {
            std::lock_guard lock(mu);
            threads.push_back(std::this_thread::get_id());
          }
          if (call == fail_at) throw cuarrow::invalid_argument("the source broke at call " + std::to_string(call));
          if (call > static_cast<int>(batches.size())) return std::nullopt;
          return batches[static_cast<std::size_t>(call - 1)];
        },
        out);
  }
};

// The bytes of every buffer of the tree, whole (how device_readahead
// counts a batch).
std::int64_t buffer_bytes(const array_data& a) {
  std::int64_t n = 0;
  for (const cuarrow::buffer& b : a.buffers) n += b.size();
  for (const array_data& c : a.children) n += buffer_bytes(c);
  return n + (a.dictionary ? buffer_bytes(*a.dictionary) : 0);
}

std::int64_t buffer_bytes(const record_batch& b) {
  std::int64_t n = 0;
  for (const array_data& c : b.columns) n += buffer_bytes(c);
  return n;
}

bool on_device(const record_batch& b) {
  for (const array_data& c : b.columns) {
    const placement p = placement_of(c, placement::of(cuarrow::device_type::cuda, 0));
    if (p.type != cuarrow::device_type::cuda) return false;
  }
  return true;
}

// Every batch of the stream, in order, in device memory and complete;
// then the end, for good.  With depth 0 the stream is read on the calling
// thread, otherwise on the read-ahead's own.
TEST(ArrowDeviceReadahead, MovesEveryBatchInOrder) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (const int depth : {0, 1, 3}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    counted_source src{some_batches(11, 7)};
    owned_array_stream host;
    src.export_to(host.get());
    device_readahead moves(host.get(), ctx, {depth});
    EXPECT_TRUE(host.is_released()) << "the stream is taken";
    EXPECT_EQ(moves.schema(), src.batches[0].schema);
    readahead& ahead = moves;  // taken through the interface both read-aheads share
    EXPECT_EQ(ahead.placement(), placement::of(cuarrow::device_type::cuda, 0));
    for (std::size_t k = 0; k < src.batches.size(); ++k) {
      std::optional<record_batch> b = ahead.next();
      ASSERT_TRUE(b.has_value()) << k;
      EXPECT_TRUE(on_device(*b)) << k;
      EXPECT_TRUE(same_values(src.batches[k], to_host(*b))) << k;
    }
    EXPECT_FALSE(ahead.next().has_value());
    EXPECT_FALSE(ahead.next().has_value());
    EXPECT_EQ(ahead.position(), 7);
    std::lock_guard lock(src.mu);
    for (const std::thread::id t : src.threads) {
      EXPECT_EQ(t == std::this_thread::get_id(), depth == 0) << "get_next on the calling thread iff depth 0";
    }
  }
}

// At most `depth` transfers are made ahead of the batch taken; depth 0
// makes none before it is asked for.  One batch a transfer (read_bytes 1):
// `depth` batches ahead.
TEST(ArrowDeviceReadahead, StaysWithinItsDepth) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (const int depth : {0, 1, 2}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    counted_source src{some_batches(12, 10)};
    owned_array_stream host;
    src.export_to(host.get());
    device_readahead ahead(host.get(), ctx, {depth, 1});
    ASSERT_TRUE(ahead.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(src.calls.load(), 1 + depth) << "the batch taken and `depth` ahead";
    for (int i = 1; i < 10; ++i) ASSERT_TRUE(ahead.next().has_value()) << i;
    EXPECT_FALSE(ahead.next().has_value());
  }
}

// Batches are moved together up to read_bytes: the first one alone (it
// comes at once), then the rest in transfers of several.  A batch that
// would pass read_bytes waits for the next transfer.
TEST(ArrowDeviceReadahead, MovesSmallBatchesTogetherUpToReadBytes) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::vector<record_batch> batches = some_batches(18, 10);
  {
    counted_source src{batches};
    owned_array_stream host;
    src.export_to(host.get());
    device_readahead ahead(host.get(), ctx, {1, std::int64_t{1} << 40});
    ASSERT_TRUE(ahead.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(src.calls.load(), 11) << "the first batch, then the other nine and the end in one transfer ahead";
    for (std::size_t k = 1; k < batches.size(); ++k) {
      std::optional<record_batch> b = ahead.next();
      ASSERT_TRUE(b.has_value()) << k;
      EXPECT_TRUE(on_device(*b)) << k;
      EXPECT_TRUE(same_values(batches[k], to_host(*b))) << k;
    }
    EXPECT_FALSE(ahead.next().has_value());
  }
  // read_bytes of one byte less than batches 2 and 3 together: the second
  // transfer takes batch 2 alone and holds batch 3, read, for the next.
  {
    counted_source src{batches};
    owned_array_stream host;
    src.export_to(host.get());
    // Counted as the read-ahead sees them: imported from the stream.
    std::vector<record_batch> imported;
    {
      owned_array_stream st;
      export_array_stream(batches[0].schema, source_of(batches), st.get());
      array_stream_reader reader(st.get());
      while (std::optional<record_batch> b = reader.next()) imported.push_back(std::move(*b));
    }
    ASSERT_EQ(imported.size(), batches.size());
    const std::int64_t two = buffer_bytes(imported[1]) + buffer_bytes(imported[2]);
    device_readahead ahead(host.get(), ctx, {1, two - 1});
    ASSERT_TRUE(ahead.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(src.calls.load(), 3) << "batch 2 moved ahead, batch 3 read and held";
    for (std::size_t k = 1; k < batches.size(); ++k) {
      std::optional<record_batch> b = ahead.next();
      ASSERT_TRUE(b.has_value()) << k;
      EXPECT_TRUE(same_values(batches[k], to_host(*b))) << k;
    }
    EXPECT_FALSE(ahead.next().has_value());
  }
}

// A transfer of several batches that fails (here its one allocation: the
// device is out of memory for all of them at once) is done again batch by
// batch: every batch still comes, in order, and nothing is left allocated.
TEST(ArrowDeviceReadahead, MovesAFailedTransferAgainBatchByBatch) {
  const cuarrow_test::fault_api& f = cuarrow_test::faults();
  if (!f.available()) GTEST_SKIP() << "fails one allocation: needs the host emulation's fault injection";
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t before = ctx.bytes_allocated();
  const std::vector<record_batch> batches = some_batches(19, 6);
  {
    counted_source src{batches};
    owned_array_stream host;
    src.export_to(host.get());
    f.clear();
    // The second transfer's allocation (batches 2 to 6), from the pool or not.
    ASSERT_EQ(f.inject("cuMemAllocFromPoolAsync", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
    ASSERT_EQ(f.inject("cuMemAllocAsync", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
    device_readahead ahead(host.get(), ctx, {1, std::int64_t{1} << 40});
    std::vector<record_batch> taken;
    while (std::optional<record_batch> b = ahead.next()) taken.push_back(std::move(*b));
    EXPECT_EQ(f.injected(), 1u) << "the second transfer's allocation failed";
    f.clear();
    ASSERT_EQ(taken.size(), batches.size());
    for (std::size_t k = 0; k < batches.size(); ++k) EXPECT_TRUE(same_values(batches[k], to_host(taken[k]))) << k;
  }
  EXPECT_EQ(ctx.bytes_allocated(), before) << "every allocation released";
}

// The producer fails: every batch before still comes, then its error (with
// the producer's message), for good; nothing is left allocated once the
// batches taken are gone.
TEST(ArrowDeviceReadahead, GivesTheBatchesBeforeAFailureThenTheError) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (const int depth : {0, 2}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    const std::int64_t before = ctx.bytes_allocated();
    {
      counted_source src{some_batches(13, 6), 4};
      owned_array_stream host;
      src.export_to(host.get());
      device_readahead ahead(host.get(), ctx, {depth});
      std::vector<record_batch> taken;
      for (std::size_t k = 0; k < 3; ++k) {
        std::optional<record_batch> b = ahead.next();
        ASSERT_TRUE(b.has_value()) << k;
        EXPECT_TRUE(same_values(src.batches[k], to_host(*b))) << k;
        taken.push_back(std::move(*b));
      }
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          (void)ahead.next();
          ADD_FAILURE() << "the fourth get_next failed";
        } catch (const cuarrow::error& e) {
          EXPECT_NE(std::string(e.what()).find("the source broke at call 4"), std::string::npos) << e.what();
        }
      }
      EXPECT_EQ(src.calls.load(), 4) << "nothing read after the failure";
      EXPECT_EQ(ahead.position(), 3);
    }
    EXPECT_EQ(ctx.bytes_allocated(), before) << "every allocation released";
  }
}

// Closed or destroyed early, with batches ahead and one in progress: it
// returns, frees what it moved ahead, and next() ends.
TEST(ArrowDeviceReadahead, ClosedEarlyFreesWhatItMovedAhead) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t before = ctx.bytes_allocated();
  {
    counted_source src{some_batches(14, 8)};
    owned_array_stream host;
    src.export_to(host.get());
    device_readahead ahead(host.get(), ctx, {3});
    std::optional<record_batch> first = ahead.next();
    ASSERT_TRUE(first.has_value());
    ahead.close();
    ahead.close();
    EXPECT_FALSE(ahead.next().has_value());
    EXPECT_EQ(ahead.position(), 1);
    EXPECT_TRUE(same_values(src.batches[0], to_host(*first)));
  }
  EXPECT_EQ(ctx.bytes_allocated(), before);
  for (int k = 0; k < 5; ++k) {
    counted_source src{some_batches(15, 8)};
    owned_array_stream host;
    src.export_to(host.get());
    device_readahead ahead(host.get(), ctx, {2});  // destroyed as it reads
  }
  EXPECT_EQ(ctx.bytes_allocated(), before);
}

TEST(ArrowDeviceReadahead, RefusesBadArgumentsAndStreamsOfArrays) {
  cuarrow::context ctx = cuarrow::context::get(0);
  counted_source src{some_batches(16, 2)};
  owned_array_stream host;
  src.export_to(host.get());
  try {
    device_readahead ahead(host.get(), ctx, {-1});
    ADD_FAILURE() << "depth -1 was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("depth"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(host.is_released()) << "the stream is taken, even when refused";
  EXPECT_EQ(src.calls.load(), 0);
  owned_array_stream host2;
  src.export_to(host2.get());
  try {
    device_readahead ahead(host2.get(), ctx, {2, 0});
    ADD_FAILURE() << "read_bytes 0 was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("read_bytes"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(host2.is_released());
  EXPECT_EQ(src.calls.load(), 0);

  // Arrays of a non-struct type are not record batches.
  random_arrays gen(17);
  const field f("x", int32());
  owned_array_stream arrays;
  export_array_stream(f, source_of(std::vector<array_data>{gen.array(f.type, 3)}), arrays.get());
  EXPECT_THROW(device_readahead(arrays.get(), ctx), cuarrow::error);
  EXPECT_TRUE(arrays.is_released());
}

}  // namespace
}  // namespace cuarrow_arrow_test
