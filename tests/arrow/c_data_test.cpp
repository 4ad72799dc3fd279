// ArrowArray / ArrowDeviceArray export and import: round trips, ownership,
// sync events, malformed structs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "arrow_test_util.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

// ---- host: the C Data Interface ----------------------------------------------------------

TEST(ArrowCData, EverySampleRoundTripsOnTheHost) {
  for (auto& [name, a] : sample_arrays()) {
    for (const array_data& x : {a, a.length > 2 ? a.slice(1, a.length - 2) : a}) {
      SCOPED_TRACE(name + " offset " + std::to_string(x.offset));
      owned_array arr;
      owned_schema sch;
      export_array(x, arr.get(), sch.get());
      EXPECT_EQ(arr->offset, x.offset);
      array_data back = import_array(arr.get(), sch.get(), {validation_level::full});
      EXPECT_TRUE(arr.is_released());
      EXPECT_TRUE(sch.is_released());
      EXPECT_TRUE(same_values(x, back));
    }
  }
}

TEST(ArrowCData, RecordBatchRoundTripsWithItsSchema) {
  random_arrays gen(7);
  for (int i = 0; i < 20; ++i) {
    record_batch b = gen.batch(3, gen.uniform(0, 30), 3);
    owned_array arr;
    owned_schema sch;
    export_record_batch(b, arr.get(), sch.get());
    EXPECT_STREQ(sch->format, "+s");
    record_batch back = import_record_batch(arr.get(), sch.get(), {validation_level::full});
    EXPECT_EQ(back.schema, b.schema);
    EXPECT_TRUE(same_values(b, back));
  }
}

// is_struct_schema reads the format only: a batch's schema is a struct, a
// field of another type is not, nor is a NULL format (read_schema refuses
// both).
TEST(ArrowCData, OnlyAStructSchemaDescribesARecordBatch) {
  owned_schema sch;
  export_schema(cuarrow::arrow::schema{{field{"x", int32()}}, {}}, sch.get());
  EXPECT_TRUE(is_struct_schema(*sch.get()));
  owned_schema f;
  export_field(field{"x", int32()}, f.get());
  EXPECT_FALSE(is_struct_schema(*f.get()));
  EXPECT_THROW((void)read_schema(*f.get()), invalid_format);
  ArrowSchema null_format{};
  EXPECT_FALSE(is_struct_schema(null_format));
}

TEST(ArrowCData, ImportedBuffersKeepTheProducerAlive) {
  owned_array arr;
  array_data back;
  {
    array_data a = strings(utf8(), {"kept", "alive"});
    export_array(a, arr.get());
    back = import_array(arr.get(), utf8());
  }
  // Every handle of the original is gone; the import still reads its memory.
  EXPECT_TRUE(same_values(strings(utf8(), {"kept", "alive"}), back));
  EXPECT_FALSE(back.buffers[1].is_mutable());
}

TEST(ArrowCData, DeviceArraysCannotBeExportedAsHostArrays) {
  array_data d = to_device(sample("int32"), cuarrow::context::get(0));
  owned_array arr;
  EXPECT_THROW(export_array(d, arr.get()), cuarrow::host_access_error);
  EXPECT_TRUE(arr.is_released());
}

TEST(ArrowCData, RecordBatchExportChecksItsColumns) {
  record_batch b;
  for (const char* name : {"int32", "utf8", "int64"}) {
    b.schema.fields.push_back(field(std::string("col_") + name, sample(name).type));
    b.columns.push_back(sample(name).slice(0, 3));
  }
  b.num_rows = 3;
  // A batch in device memory is a host_access_error, nothing exported.
  record_batch d = to_device(b, cuarrow::context::get(0));
  owned_array arr;
  EXPECT_THROW(export_record_batch(d, arr.get()), cuarrow::host_access_error);
  EXPECT_TRUE(arr.is_released());
  // A column that does not fit its type is named by its field.
  record_batch bad = b;
  bad.columns[1].buffers.clear();
  const std::string msg = message_of([&] { export_record_batch(bad, arr.get()); });
  EXPECT_NE(msg.find("record batch \u2192 child 1 (\"" + b.schema.fields[1].name + "\")"), std::string::npos) << msg;
  EXPECT_NE(msg.find("buffers for type"), std::string::npos) << msg;
  EXPECT_TRUE(arr.is_released());
  // More columns than fields.
  record_batch extra = b;
  extra.columns.push_back(b.columns[0]);
  EXPECT_NE(message_of([&] { export_record_batch(extra, arr.get()); }).find("4 columns for 3 fields"),
            std::string::npos);
  // The export shares the columns' buffers (no copy) and outlives the batch.
  {
    record_batch temp = b;
    export_record_batch(temp, arr.get());
  }
  EXPECT_EQ(arr->n_children, 3);
  EXPECT_EQ(arr->length, b.num_rows);
  record_batch back = import_record_batch(arr.get(), b.schema, {validation_level::full});
  EXPECT_TRUE(same_values(b, back));
}

// An empty array of a type with an offsets buffer, with no buffers at all
// (what the model allows: an empty offsets buffer).
array_data empty_of(const data_type& t) {
  array_data a;
  a.type = t;
  a.buffers.assign(layout_of(t).buffers.size(), cuarrow::buffer());
  for (const field& f : t.children) a.children.push_back(empty_of(f.type));
  return a;
}

std::vector<data_type> offsets_types() {
  return {utf8(),
          large_utf8(),
          binary(),
          large_binary(),
          list(field("item", int32())),
          large_list(field("item", int32())),
          map(utf8(), int64())};
}

TEST(ArrowCData, EmptyArraysExportWhatArrowCppImports) {
  // An empty offsets buffer is exported as one zero offset, not NULL.
  for (const data_type& t : offsets_types()) {
    SCOPED_TRACE(t.to_string());
    owned_array arr;
    export_array(empty_of(t), arr.get());
    ASSERT_NE(arr->buffers[1], nullptr);
    const int w = layout_of(t).buffers[1].byte_width;
    std::int64_t first = -1;
    if (w == 4) {
      std::int32_t v;
      std::memcpy(&v, arr->buffers[1], 4);
      first = v;
    } else {
      std::memcpy(&first, arr->buffers[1], 8);
    }
    EXPECT_EQ(first, 0);
    EXPECT_TRUE(same_values(empty_of(t), import_array(arr.get(), t)));
  }
  // An empty cut keeps its slice's offset (and an unknown null count) over
  // buffers that may be empty: exported at offset 0 without nulls.
  for (auto& [name, a] : sample_arrays()) {
    if (a.length < 3) continue;
    SCOPED_TRACE(name);
    const array_data cut = a.slice(2, 0);
    owned_array arr;
    export_array(cut, arr.get());
    EXPECT_EQ(arr->offset, 0);
    EXPECT_EQ(arr->null_count, 0);
    EXPECT_TRUE(same_values(cut, import_array(arr.get(), a.type, {validation_level::full})));
  }
  // Batch columns too.
  record_batch b;
  b.schema.fields = {field("s", utf8()), field("l", list(field("item", int32())))};
  b.columns = {empty_of(utf8()), empty_of(list(field("item", int32())))};
  owned_array arr;
  export_record_batch(b, arr.get());
  EXPECT_NE(arr->children[0]->buffers[1], nullptr);
  EXPECT_NE(arr->children[1]->buffers[1], nullptr);
  EXPECT_TRUE(same_values(b, import_record_batch(arr.get(), b.schema, {validation_level::full})));
}

TEST(ArrowCData, ANonEmptyArrayNeedsItsOffsets) {
  array_data s = strings(utf8(), {"abc", "de"});
  s.buffers[1] = cuarrow::buffer();
  owned_array arr;
  const std::string m = message_of([&] { export_array(s, arr.get()); });
  EXPECT_NE(m.find("offsets buffer of 0 bytes for 2 values"), std::string::npos) << m;
  EXPECT_TRUE(arr.is_released());
}

TEST(ArrowCData, ChildrenCanBeMovedOut) {
  array_data s = sample("struct");
  owned_array arr;
  export_array(s, arr.get());
  owned_array child;
  *child.get() = *arr->children[1];
  arr->children[1]->release = nullptr;
  arr.reset();  // the parent goes first
  array_data b = import_array(child.get(), utf8());
  EXPECT_TRUE(same_values(s.children[1], b));
}

// c_release calls a struct's release callback once and leaves it released
// (a device array: its array's); c_owned releases what it holds, once,
// wherever it was moved.
TEST(ArrowCData, StructsAreReleasedOnce) {
  static int releases = 0;
  releases = 0;
  ArrowArray a{};
  a.release = [](ArrowArray* self) {
    ++releases;
    self->release = nullptr;
  };
  EXPECT_FALSE(c_released(a));
  c_release(a);
  c_release(a);
  EXPECT_TRUE(c_released(a));
  EXPECT_EQ(releases, 1);

  ArrowDeviceArray d{};
  d.array.release = [](ArrowArray*) { ++releases; };  // leaves release set: c_release clears it
  EXPECT_FALSE(c_released(d));
  c_release(d);
  c_release(d);
  EXPECT_TRUE(c_released(d));
  EXPECT_EQ(releases, 2);

  owned_device_array first;
  first->array.release = [](ArrowArray*) { ++releases; };
  owned_device_array second(std::move(first));
  EXPECT_TRUE(first.is_released());
  EXPECT_FALSE(second.is_released());
  first = std::move(second);
  first.reset();
  EXPECT_EQ(releases, 3);
}

// ---- malformed structs -----------------------------------------------------------------------

TEST(ArrowCData, ReleasedStructsAreRefused) {
  owned_array arr;
  export_array(sample("int32"), arr.get());
  array_data first = import_array(arr.get(), int32());
  const std::string m = message_of([&] { import_array(arr.get(), int32()); });
  EXPECT_NE(m.find("released"), std::string::npos) << m;
  EXPECT_THROW(import_array(arr.get(), int32()), invalid_data);

  owned_device_array darr;
  EXPECT_THROW(import_device_array(darr.get(), int32()), invalid_data);

  // The imports that take an ArrowSchema consume it even when they refuse
  // the array: the caller's schema is released, not leaked.
  owned_schema sch;
  export_field(field{"x", int32()}, sch.get());
  EXPECT_THROW(import_device_array(darr.get(), sch.get()), invalid_data);
  EXPECT_EQ(sch->release, nullptr);
  export_schema(cuarrow::arrow::schema{{field{"x", int32()}}, {}}, sch.get());
  EXPECT_THROW(import_device_record_batch(darr.get(), sch.get()), invalid_data);
  EXPECT_EQ(sch->release, nullptr);
}

TEST(ArrowCData, WrongCountsAndPointers) {
  struct mutation {
    std::string what;
    std::function<void(ArrowArray*)> apply;
    std::vector<std::string> expect;
    std::string name = "list";
    data_type type = list(field("item", int32()));
  };
  const std::vector<mutation> cases = {
      {"n_buffers", [](ArrowArray* a) { a->n_buffers = 3; }, {"n_buffers is 3", "expected 2"}},
      {"n_children", [](ArrowArray* a) { a->n_children = 0; }, {"n_children is 0", "expected 1"}},
      {"null offsets", [](ArrowArray* a) { a->buffers[1] = nullptr; }, {"offsets buffer is NULL"}},
      {"negative length", [](ArrowArray* a) { a->length = -1; }, {"negative length"}},
      {"negative offset", [](ArrowArray* a) { a->offset = -2; }, {"negative offset"}},
      {"null count", [](ArrowArray* a) { a->null_count = 99; }, {"null count 99"}},
      {"validity", [](ArrowArray* a) { a->buffers[0] = nullptr; }, {"validity buffer is NULL"}},
      {"child released",
       [](ArrowArray* a) {
         // Release the child properly, as a consumer that moved it out would.
         a->children[0]->release(a->children[0]);
       },
       {"child 0 (\"item\")", "released"}},
      {"child too short",
       [](ArrowArray* a) { a->children[0]->length = 3; },
       {"array: last offset 7 is past the end of the child (3 values)"}},
      {"child values NULL",
       [](ArrowArray* a) { a->children[0]->buffers[1] = nullptr; },
       {"child 0 (\"item\")", "values buffer is NULL"}},
  };
  for (const mutation& m : cases) {
    SCOPED_TRACE(m.what);
    owned_array arr;
    export_array(sample(m.name), arr.get());
    m.apply(arr.get());
    const std::string msg = message_of([&] { import_array(arr.get(), m.type); });
    for (const std::string& e : m.expect) EXPECT_NE(msg.find(e), std::string::npos) << msg;
    EXPECT_TRUE(arr.is_released());  // consumed even when refused
  }
}

TEST(ArrowCData, DictionaryAndUnionContents) {
  {
    owned_array arr;
    owned_schema sch;
    export_array(sample("dictionary_int8_utf8"), arr.get(), sch.get());
    field f = read_field(*sch.get());
    const_cast<std::int8_t*>(static_cast<const std::int8_t*>(arr->buffers[1]))[3] = 9;  // our own export
    EXPECT_NO_THROW(import_array(arr.get(), f.type, {validation_level::cheap}));
  }
  {
    owned_array arr;
    export_array(sample("dictionary_int8_utf8"), arr.get());
    const_cast<std::int8_t*>(static_cast<const std::int8_t*>(arr->buffers[1]))[3] = 9;
    const std::string m =
        message_of([&] { import_array(arr.get(), sample("dictionary_int8_utf8").type, {validation_level::full}); });
    EXPECT_NE(m.find("dictionary index 9 is outside the dictionary of 3 values"), std::string::npos) << m;
  }
  {
    owned_array arr;
    export_array(sample("dictionary_int8_utf8"), arr.get());
    arr->dictionary = nullptr;  // (the export's private data still frees it)
    const std::string m = message_of([&] { import_array(arr.get(), sample("dictionary_int8_utf8").type); });
    EXPECT_NE(m.find("without a dictionary"), std::string::npos) << m;
  }
  {
    owned_array arr;
    export_array(sample("sparse_union"), arr.get());
    const_cast<std::int8_t*>(static_cast<const std::int8_t*>(arr->buffers[0]))[1] = 6;
    const std::string m =
        message_of([&] { import_array(arr.get(), sample("sparse_union").type, {validation_level::full}); });
    EXPECT_NE(m.find("type id 6 is not one of the union's type codes"), std::string::npos) << m;
  }
  {
    owned_array arr;
    owned_schema sch;
    const array_data v = sample("utf8_view");
    export_array(v, arr.get(), sch.get());
    const std::int64_t n_data = static_cast<std::int64_t>(v.buffers.size()) - 2;
    ASSERT_GE(n_data, 2);
    ASSERT_EQ(arr->n_buffers, 2 + n_data + 1);  // validity, views, data buffers, sizes
    const auto* sizes = static_cast<const std::int64_t*>(arr->buffers[2 + n_data]);
    for (std::int64_t k = 0; k < n_data; ++k) EXPECT_EQ(sizes[k], v.buffers[static_cast<std::size_t>(2 + k)].size());
    arr->n_buffers = 1;
    const std::string m = message_of([&] { import_array(arr.get(), sch.get()); });
    EXPECT_NE(m.find("expected at least 3"), std::string::npos) << m;
  }
}

// ---- device: the C Device Data Interface ------------------------------------------------------

TEST(ArrowCDeviceData, EverySampleRoundTripsThroughTheDevice) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  cuarrow::stream consumer(ctx);
  for (auto& [name, a] : sample_arrays()) {
    for (const array_data& x : {a, a.length > 3 ? a.slice(3, a.length - 3) : a}) {
      SCOPED_TRACE(name + " offset " + std::to_string(x.offset));
      array_data d = to_device_async(x, ctx, producer);
      owned_device_array arr;
      owned_schema sch;
      export_device_array(d, producer, arr.get(), sch.get());
      if (placement_of(d).type == cuarrow::device_type::cuda) {
        EXPECT_EQ(arr->device_type, ARROW_DEVICE_CUDA);
        EXPECT_EQ(arr->device_id, 0);
        EXPECT_NE(arr->sync_event, nullptr);
      } else {
        EXPECT_EQ(arr->device_type, ARROW_DEVICE_CPU);
        EXPECT_EQ(arr->device_id, -1);
        EXPECT_EQ(arr->sync_event, nullptr);
      }
      EXPECT_EQ(arr->reserved[0] | arr->reserved[1] | arr->reserved[2], 0);
      d = array_data();  // the export alone keeps the memory alive
      array_data back = import_device_array(arr.get(), sch.get(), consumer);
      EXPECT_TRUE(arr.is_released());
      EXPECT_TRUE(same_values(x, to_host(back, consumer)));
    }
  }
}

TEST(ArrowCDeviceData, RandomBatchesRoundTrip) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  for (std::uint64_t seed = 100; seed < 140; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_arrays gen(seed);
    record_batch b = gen.batch(static_cast<int>(gen.uniform(1, 3)), gen.uniform(0, 30), 3);
    record_batch d = to_device_async(b, ctx, s);
    owned_device_array arr;
    owned_schema sch;
    export_device_record_batch(d, s, arr.get(), sch.get());
    record_batch back = import_device_record_batch(arr.get(), sch.get(), s, {validation_level::full});
    ASSERT_TRUE(same_values(b, back));
  }
}

TEST(ArrowCDeviceData, SyncEventIsRecordedAndDestroyedByRelease) {
  CUARROW_REQUIRE_EMULATION();
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  array_data d = to_device(sample("deep"), ctx);
  const std::size_t baseline = cuarrow_test::emu().event_count();
  {
    owned_device_array arr;
    export_device_array(d, s, arr.get());
    EXPECT_EQ(cuarrow_test::emu().event_count(), baseline + 1);
    ASSERT_NE(arr->sync_event, nullptr);
    CUevent ev = *static_cast<CUevent*>(arr->sync_event);
    EXPECT_NE(ev, nullptr);
    // The event lives outside the struct: a bitwise move keeps it valid.
    owned_device_array moved;
    *moved.get() = *arr.get();
    arr->array.release = nullptr;
    EXPECT_EQ(*static_cast<CUevent*>(moved->sync_event), ev);
  }
  EXPECT_EQ(cuarrow_test::emu().event_count(), baseline);
  // Imported, then dropped: the release runs when the last buffer goes.
  {
    owned_device_array arr;
    export_device_array(d, s, arr.get());
    array_data back = import_device_array(arr.get(), d.type, s);
    EXPECT_EQ(cuarrow_test::emu().event_count(), baseline + 1);
    array_data child = back.children[0];
    back = array_data();
    EXPECT_EQ(cuarrow_test::emu().event_count(), baseline + 1);  // `child` still holds the import
    child = array_data();
    EXPECT_EQ(cuarrow_test::emu().event_count(), baseline);
  }
  // synchronize = true: no event at all.
  owned_device_array arr;
  export_device_array(d, s, arr.get(), nullptr, {true});
  EXPECT_EQ(arr->sync_event, nullptr);
  EXPECT_EQ(cuarrow_test::emu().event_count(), baseline);
}

TEST(ArrowCDeviceData, TheConsumerStreamWaitsForTheProducerEvent) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  cuarrow::stream consumer(ctx);  // non-blocking: nothing orders it but the event
  array_data x = sample("deep");
  cuarrow_test::scoped_op_delay delay(1000);  // every stream operation is slow
  for (int round = 0; round < 3; ++round) {
    owned_device_array arr;
    {
      array_data d = to_device_async(x, ctx, producer);
      export_device_array(d, producer, arr.get());
    }
    array_data back = import_device_array(arr.get(), x.type, consumer);
    EXPECT_TRUE(same_values(x, to_host(back, consumer)));
  }
}

TEST(ArrowCDeviceData, ViewsExportTheirSizesInHostMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data x = sample("binary_view");
  array_data d = to_device(x, ctx);
  owned_device_array arr;
  export_device_array(d, {}, arr.get());
  const std::int64_t n_data = static_cast<std::int64_t>(d.buffers.size()) - 2;
  ASSERT_EQ(arr->array.n_buffers, 2 + n_data + 1);
  const auto* sizes = static_cast<const std::int64_t*>(arr->array.buffers[2 + n_data]);
  for (std::int64_t k = 0; k < n_data; ++k) EXPECT_EQ(sizes[k], d.buffers[static_cast<std::size_t>(2 + k)].size());
  // A producer that keeps the sizes in device memory is understood too.
  cuarrow::buffer dev_sizes = cuarrow::copy_to_device(ctx, sizes, n_data * 8);
  arr->array.buffers[2 + n_data] = reinterpret_cast<const void*>(dev_sizes.address());
  array_data back = import_device_array(arr.get(), x.type);
  EXPECT_TRUE(same_values(x, to_host(back)));
}

TEST(ArrowCDeviceData, PinnedAndManagedMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (const char* n : {"deep", "utf8_view", "dense_union", "large_list"}) {
    SCOPED_TRACE(n);
    array_data x = sample(n);
    array_data p = to_pinned(x, ctx);
    owned_device_array arr;
    owned_schema sch;
    export_device_array(p, {}, arr.get(), sch.get());
    EXPECT_EQ(arr->device_type, ARROW_DEVICE_CUDA_HOST);
    EXPECT_EQ(arr->device_id, 0);
    EXPECT_NE(arr->sync_event, nullptr);
    array_data back = import_device_array(arr.get(), sch.get());
    EXPECT_EQ(placement_of(back).type, cuarrow::device_type::cuda_host);
    EXPECT_TRUE(same_values(x, back));

    // Managed memory is host-accessible like pinned memory; relabel a
    // pinned export as a producer of managed memory would label it.
    owned_device_array m;
    export_device_array(p, {}, m.get());
    m->device_type = ARROW_DEVICE_CUDA_MANAGED;
    array_data managed = import_device_array(m.get(), x.type);
    EXPECT_EQ(placement_of(managed).type, cuarrow::device_type::cuda_managed);
    EXPECT_TRUE(equals(x, managed));  // read directly on the host
  }
}

TEST(ArrowCDeviceData, HostArraysExportAsCpu) {
  owned_device_array arr;
  export_device_array(sample("utf8"), {}, arr.get());
  EXPECT_EQ(arr->device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(arr->device_id, -1);
  EXPECT_EQ(arr->sync_event, nullptr);
  EXPECT_TRUE(same_values(sample("utf8"), import_device_array(arr.get(), utf8())));
}

TEST(ArrowCDeviceData, EmptyArraysGetZeroedOffsetsWhereTheyLive) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  for (const data_type& t : offsets_types()) {
    SCOPED_TRACE(t.to_string());
    const int w = layout_of(t).buffers[1].byte_width;
    // Without buffers an array lives where its holder says.
    export_options o;
    o.if_no_buffers = placement{cuarrow::device_type::cuda, 0};
    owned_device_array arr;
    export_device_array(empty_of(t), s, arr.get(), nullptr, o);
    EXPECT_EQ(arr->device_type, ARROW_DEVICE_CUDA);
    EXPECT_EQ(arr->device_id, 0);
    ASSERT_NE(arr->sync_event, nullptr);  // the zeroed offsets were filled on `s`
    ASSERT_NE(arr->array.buffers[1], nullptr);
    const auto address = reinterpret_cast<std::uintptr_t>(arr->array.buffers[1]);
    cuarrow::buffer offsets = cuarrow::wrap_device(ctx, address, w, nullptr);
    std::int64_t first = -1;
    cuarrow::copy_to_host(&first, offsets, 0, w, s);
    EXPECT_EQ(w == 4 ? static_cast<std::int32_t>(first) : first, 0);
    // (The import of an empty array keeps no buffers.)
    array_data back = import_device_array(arr.get(), t, s, {validation_level::full});
    EXPECT_TRUE(same_values(empty_of(t), to_host(back, s)));

    // Pinned memory gets pinned offsets.
    o.if_no_buffers = placement{cuarrow::device_type::cuda_host, 0};
    owned_device_array pinned;
    export_device_array(empty_of(t), s, pinned.get(), nullptr, o);
    EXPECT_EQ(pinned->device_type, ARROW_DEVICE_CUDA_HOST);
    EXPECT_EQ(std::memcmp(pinned->array.buffers[1], "\0\0\0\0\0\0\0\0", static_cast<std::size_t>(w)), 0);
    back = import_device_array(pinned.get(), t, s, {validation_level::full});
    EXPECT_TRUE(same_values(empty_of(t), back));
  }
  // A cut device array: offset 0 over the buffers it has.
  array_data d = to_device(sample("utf8"), ctx, s);
  owned_device_array arr;
  export_device_array(d.slice(1, 0), s, arr.get());
  EXPECT_EQ(arr->array.offset, 0);
  EXPECT_EQ(arr->device_type, ARROW_DEVICE_CUDA);
  EXPECT_TRUE(same_values(empty_of(utf8()), to_host(import_device_array(arr.get(), utf8(), s), s)));
}

TEST(ArrowCDeviceData, ArraysWithoutBuffersAreLabelledWhereTheirHolderSays) {
  array_data nulls;
  nulls.type = null();
  nulls.length = 5;
  nulls.null_count = 5;
  // Nothing said: CPU, as before.
  owned_device_array cpu;
  export_device_array(nulls, {}, cpu.get());
  EXPECT_EQ(cpu->device_type, ARROW_DEVICE_CPU);
  EXPECT_EQ(cpu->device_id, -1);
  EXPECT_EQ(placement_of(nulls, placement{cuarrow::device_type::cuda, 0}).type, cuarrow::device_type::cuda);
  const int last = cuarrow::device_count() - 1;
  export_options o;
  o.if_no_buffers = placement{cuarrow::device_type::cuda, last};
  owned_device_array dev;
  export_device_array(nulls, cuarrow::stream(cuarrow::context::get(last)), dev.get(), nullptr, o);
  EXPECT_EQ(dev->device_type, ARROW_DEVICE_CUDA);
  EXPECT_EQ(dev->device_id, last);
  // Arrays with buffers are labelled by them, whatever is said.
  owned_device_array host;
  export_device_array(sample("int32"), {}, host.get(), nullptr, o);
  EXPECT_EQ(host->device_type, ARROW_DEVICE_CPU);
  // Record batches too.
  record_batch b;
  b.schema.fields = {field("n", null())};
  b.num_rows = 5;
  b.columns = {nulls};
  owned_device_array batch;
  export_device_record_batch(b, cuarrow::stream(cuarrow::context::get(last)), batch.get(), nullptr, o);
  EXPECT_EQ(batch->device_type, ARROW_DEVICE_CUDA);
  EXPECT_EQ(batch->device_id, last);
}

// Arrays and batches as their holders declare them: the field (metadata
// included) travels in the schema, and an import is declared where its
// struct says, which is what an array without buffers reports.
TEST(ArrowCDeviceData, PlacedArraysKeepTheirFieldAndPlacement) {
  const int last = cuarrow::device_count() - 1;
  const placement gpu{cuarrow::device_type::cuda, last};
  cuarrow::stream s(cuarrow::context::get(last));
  array_data nulls;
  nulls.type = null();
  nulls.length = 5;
  nulls.null_count = 5;
  const placed_array a{field("n", null(), true, {{"ARROW:extension:name", "x.y"}}), nulls, gpu};
  owned_device_array arr;
  owned_schema sch;
  export_device_array(a, s, arr.get(), sch.get());
  EXPECT_EQ(arr->device_type, ARROW_DEVICE_CUDA);
  EXPECT_EQ(arr->device_id, last);
  EXPECT_STREQ(sch->name, "n");
  const placed_array back = import_placed_device_array(arr.get(), *sch.get(), s);
  EXPECT_TRUE(arr.is_released());
  EXPECT_FALSE(sch.is_released());  // read, not released
  EXPECT_EQ(back.field, a.field);
  EXPECT_EQ(back.declared, gpu);
  EXPECT_EQ(back.where(), gpu);
  EXPECT_TRUE(same_values(back.data, nulls));

  // A batch: its schema, and where its columns live.
  cuarrow::context ctx = cuarrow::context::get(0);
  record_batch b;
  b.schema.fields = {field("i", int32(), false), field("s", utf8())};
  b.schema.metadata = {{"k", "v"}};
  b.num_rows = std::min(sample("int32").length, sample("utf8").length);
  b.columns = {sample("int32").slice(0, b.num_rows), sample("utf8").slice(0, b.num_rows)};
  const placed_batch pb{to_device(b, ctx), {}};
  owned_device_array barr;
  owned_schema bsch;
  export_device_array(pb, {}, barr.get(), bsch.get());
  const placed_batch bback = import_placed_device_batch(barr.get(), *bsch.get());
  EXPECT_EQ(bback.batch.schema, b.schema);
  EXPECT_EQ(bback.declared, (placement{cuarrow::device_type::cuda, 0}));
  EXPECT_TRUE(same_values(to_host(bback.batch), b));

  // On the host: declared in host memory, the field kept.
  owned_array harr;
  owned_schema hsch;
  export_field(a.field, hsch.get());
  export_array(nulls, harr.get());
  const placed_array host = import_placed_array(harr.get(), *hsch.get());
  EXPECT_EQ(host.field, a.field);
  EXPECT_EQ(host.where().type, cuarrow::device_type::cpu);
  owned_array hbarr;
  export_record_batch(b, hbarr.get());
  owned_schema hbsch;
  export_schema(b.schema, hbsch.get());
  EXPECT_TRUE(same_values(import_placed_batch(hbarr.get(), *hbsch.get()).batch, b));

  // A refused struct is still consumed; the schema stays the caller's.
  owned_array released;
  EXPECT_THROW(import_placed_array(released.get(), *hsch.get()), invalid_data);
  EXPECT_FALSE(hsch.is_released());
}

TEST(ArrowCDeviceData, UnsupportedDeviceTypesAreRefusedAndReleased) {
  owned_device_array arr;
  export_device_array(sample("int32"), {}, arr.get());
  arr->device_type = ARROW_DEVICE_ROCM;
  const std::string m = message_of([&] { import_device_array(arr.get(), int32()); });
  EXPECT_NE(m.find("ARROW_DEVICE_ROCM (10)"), std::string::npos) << m;
  EXPECT_TRUE(arr.is_released());
}

TEST(ArrowCDeviceData, MalformedDeviceArraysNameThePath) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data d = to_device(sample("deep"), ctx);
  {
    owned_device_array arr;
    export_device_array(d, {}, arr.get());
    // deep: list<struct<a: list<utf8_view>, ...>>; shorten the inner list's child.
    arr->array.children[0]->children[0]->children[0]->length = 1;
    const std::string m = message_of([&] { import_device_array(arr.get(), d.type); });
    EXPECT_NE(m.find("array \u2192 child 0 (\"item\") \u2192 child 0 (\"a\")"), std::string::npos) << m;
    EXPECT_NE(m.find("past the end of the child (1 values)"), std::string::npos) << m;
  }
  {
    owned_device_array arr;
    export_device_array(d, {}, arr.get());
    arr->array.children[0]->n_buffers = 7;
    const std::string m = message_of([&] { import_device_array(arr.get(), d.type); });
    EXPECT_NE(m.find("array \u2192 child 0 (\"item\"): n_buffers is 7 for type struct"), std::string::npos) << m;
  }
  {
    // A string array whose last offset points past its data: the import
    // sizes the data from that offset, and the device refuses the read.
    array_data s = to_device(strings(utf8(), {"abc", "de"}), ctx);
    owned_device_array arr;
    export_device_array(s, {}, arr.get());
    arr->array.length = 1;  // still consistent: fine
    array_data one = import_device_array(arr.get(), utf8());
    EXPECT_TRUE(same_values(strings(utf8(), {"abc"}), one));
  }
}

TEST(ArrowCDeviceData, TwoDevices) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c1 = cuarrow::context::get(1);
  cuarrow::stream s1(c1);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::stream s0(c0);
  array_data x = sample("deep");
  array_data d = to_device_async(x, c1, s1);
  owned_device_array arr;
  export_device_array(d, s1, arr.get());
  EXPECT_EQ(arr->device_id, 1);
  // Imported on a stream of device 0: it waits on device 1's event.
  array_data back = import_device_array(arr.get(), x.type, s0);
  EXPECT_EQ(placement_of(back).device_id, 1);
  EXPECT_TRUE(same_values(x, to_device(back, c0, s0)));
}

TEST(ArrowCDeviceData, WorkGoesToTheContextOfTheMemory) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c1 = cuarrow::context::get(1);
  array_data x = sample("deep");
  EXPECT_FALSE(context_of(x).has_value());  // host memory
  array_data d = to_device(x, c1);
  ASSERT_TRUE(context_of(d).has_value());
  EXPECT_EQ(*context_of(d), c1);
  array_data nulls;  // no buffers: the context of where it is declared to be
  nulls.type = null();
  nulls.length = 3;
  nulls.null_count = 3;
  EXPECT_FALSE(context_of(nulls).has_value());
  EXPECT_EQ(context_of(nulls, placement{cuarrow::device_type::cuda, 1}), c1);
  // The export's sync event is one of the memory's context (device 1),
  // whatever context is current.
  cuarrow::scoped_context current(cuarrow::context::get(0));
  owned_device_array arr;
  export_device_array(d, cuarrow::stream_view(), arr.get());
  ASSERT_NE(arr->sync_event, nullptr);
  EXPECT_EQ(arr->device_id, 1);
  EXPECT_TRUE(same_values(x, to_host(d)));
}

}  // namespace
}  // namespace cuarrow_arrow_test
