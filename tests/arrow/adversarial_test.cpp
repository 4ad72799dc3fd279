// What adversarial testing found (issue 12): valid data that failed, and
// malformed data that crashed later instead of failing early.  Each test
// names the case; every one failed (or crashed) before its fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <dlfcn.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "arrow_test_util.hpp"
#include "child_process.hpp"
#include "test_support.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

// Marks bytes no buffer owns, so that AddressSanitizer reports any read.
#if defined(__SANITIZE_ADDRESS__)
void poison_region(const void* p, std::size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
void unpoison_region(const void* p, std::size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
void poison_region(const void*, std::size_t) {}
void unpoison_region(const void*, std::size_t) {}
#endif

// ---- buffers of one producer in separate allocations ---------------------------------

// A valid int32 array of 1,600 elements with nulls whose bitmap and values
// are two allocations that lie close together: exported through the C
// Device Data Interface and imported, its buffers share one owner (the
// imported struct) but not an allocation.  The batched copy used to merge
// neighbours of one owner into one DMA, which then spanned both
// allocations: CUDA_ERROR_INVALID_VALUE on the emulation (and on a GPU).
TEST(ArrowAdversarial, BuffersOfOneImportInTwoAllocationsCopyApart) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::optional<std::int32_t>> values(1600);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i % 7 != 3) values[i] = static_cast<std::int32_t>(i * 3);
  }
  const array_data host = primitive<std::int32_t>(int32(), values);
  ASSERT_EQ(host.buffers[0].size(), 200);
  ASSERT_EQ(host.buffers[1].size(), 6400);

  // The two buffers, each its own device allocation, the bitmap first: from
  // a pool of their own where pools exist, so that where they land does
  // not depend on what the tests before left in the shared one.
  std::shared_ptr<cuarrow::device_memory_resource> fresh;
  if (ctx.properties().memory_pools_supported) fresh = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  cuarrow::buffer bits = cuarrow::allocate_device(ctx, 200, {}, fresh);
  cuarrow::buffer vals = cuarrow::allocate_device(ctx, 6400, {}, fresh);
  cuarrow::copy(bits, 0, host.buffers[0], 0, 200);
  cuarrow::copy(vals, 0, host.buffers[1], 0, 6400);
  const std::uintptr_t gap = vals.address() - (bits.address() + 200);
  // On the emulation the pool's allocations are 256-byte granules, first
  // fit: the values follow the bitmap 56 bytes after its end, exactly the
  // gap of the transfer's arena (the bitmap at 0, the values at 256), so
  // the old merge applied.  A GPU's pool may place them elsewhere.
  if (cuarrow::driver_is_emulated()) {
    ASSERT_EQ(gap, 56u);
  }

  array_data dev = host;
  dev.buffers = {bits, vals};
  owned_device_array out;
  export_device_array(dev, cuarrow::stream_view(), out.get());
  array_data imported = import_device_array(out.get(), int32());
  ASSERT_EQ(imported.buffers[0].allocation(), nullptr) << "imported memory is not one known allocation";

  EXPECT_TRUE(same_values(host, to_host(imported)));
  {  // memory the pool hands out again holds old bytes
    const cuarrow::buffer dirty = cuarrow::allocate_device(ctx, 256 + 6400);
    cuarrow::fill_async(dirty, 0, dirty.size(), 0xab, cuarrow::stream_view());
  }
  const array_data moved = to_device(imported, ctx);
  EXPECT_TRUE(same_values(host, to_host(moved)));

  // The new arena's padding between the two buffers was written by no
  // copy (each came from its own device allocation): it is zeroed, so that
  // later copies merging across it read defined bytes.
  const std::uintptr_t first = moved.buffers[0].address();
  const std::int64_t span = static_cast<std::int64_t>(moved.buffers[1].address() - first);
  ASSERT_GT(span, 200);
  const cuarrow::buffer arena = cuarrow::wrap_device(ctx, first, span, nullptr, false);
  std::vector<std::uint8_t> padding(static_cast<std::size_t>(span - 200), 0xff);
  cuarrow::copy_to_host(padding.data(), arena, 200, span - 200);
  EXPECT_EQ(padding, std::vector<std::uint8_t>(padding.size(), 0));
}

// The same from ordinary host memory: two buffers of one owner placed as
// the transfer's arena places them (bitmap at 0, values at 256), with the
// 56 bytes between them belonging to neither (poisoned under
// AddressSanitizer).  The merged DMA used to read those bytes.
TEST(ArrowAdversarial, HostBuffersOfOneOwnerAreNotReadBetween) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::optional<std::int32_t>> values(1600);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i % 5 != 1) values[i] = static_cast<std::int32_t>(1000 - i);
  }
  const array_data host = primitive<std::int32_t>(int32(), values);
  cuarrow::buffer block = cuarrow::allocate_host(8192);
  std::byte* base = block.mutable_host_data();
  std::memcpy(base, host.buffers[0].host_data(), 200);
  std::memcpy(base + 256, host.buffers[1].host_data(), 6400);
  auto owner = std::make_shared<int>(0);  // one owner for both, as an imported struct is
  array_data src = host;
  src.buffers = {cuarrow::wrap_host(base, 200, owner, false), cuarrow::wrap_host(base + 256, 6400, owner, false)};
  poison_region(base + 200, 56);
  const array_data back = to_host(to_device(src, ctx));
  unpoison_region(base + 200, 56);
  EXPECT_TRUE(same_values(host, back));
}

// ---- what cheap validation lets through must not crash later ----------------------------
//
// Cheap validation (the default of to_device and of imports) checks
// structure and sizes, not every value.  Values a host reader indexes with
// are checked where host code is about to read them: to_host checks its
// results before returning them (and so repr and [i], which go through it).

// A copy of host buffer `b` whose bytes `edit` may change.
template <class T>
cuarrow::buffer edited(const cuarrow::buffer& b, const std::function<void(T*)>& edit) {
  cuarrow::buffer copy = cuarrow::allocate_host(b.size());
  std::memcpy(copy.mutable_host_data(), b.host_data(), static_cast<std::size_t>(b.size()));
  edit(reinterpret_cast<T*>(copy.mutable_host_data()));
  return copy;
}

// Passes cheap validation on its way to the device, and to_host refuses it
// with invalid_data whose message contains `expected`.
void expect_refused_on_the_way_back(const array_data& bad, const std::string& expected) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  array_data dev;
  ASSERT_NO_THROW(dev = to_device(bad, ctx)) << "cheap validation lets it through";
  const std::string m = message_of([&] { (void)to_host(dev); });
  EXPECT_NE(m.find(expected), std::string::npos) << m;
  EXPECT_THROW((void)to_host(dev), invalid_data);
  // Full validation refuses it too, on the host and on the device.
  validate_options full;
  full.level = validation_level::full;
  EXPECT_THROW(validate(bad, full), invalid_data);
  EXPECT_THROW(validate(dev, full), invalid_data);
  // The device array stays usable: it still moves between devices.
  EXPECT_NO_THROW((void)to_device(dev, ctx));
}

TEST(ArrowAdversarial, StringOffsetsDecreasingInTheMiddle) {
  array_data a = sample("utf8");  // offsets 0 1 1 1 12 15 15 18
  a.buffers[1] = edited<std::int32_t>(a.buffers[1], [](std::int32_t* o) { o[3] = 17; });
  expect_refused_on_the_way_back(a, "offsets decrease at element 3: 17 then 12");
}

TEST(ArrowAdversarial, StringOffsetOutOfRangeInTheMiddle) {
  array_data a = sample("large_utf8");
  a.buffers[1] = edited<std::int64_t>(a.buffers[1], [](std::int64_t* o) { o[2] = 1 << 20; });
  expect_refused_on_the_way_back(a, "offsets decrease at element 2: 1048576 then 1");
}

// A slice's data buffer is cut at its last offset on the way back: an
// offset inside the slice beyond that cut would point past the copied
// data, where even pyarrow's validate() does not look.
TEST(ArrowAdversarial, SliceOffsetsNeverRunPastTheCopiedData) {
  array_data a = sample("utf8");
  a.buffers[1] = edited<std::int32_t>(a.buffers[1], [](std::int32_t* o) { o[5] = 17; });  // 15 -> 17 > 15 (o[6])
  const cuarrow::context ctx = cuarrow::context::get(0);
  const array_data dev = to_device(a, ctx);
  const std::string m = message_of([&] { (void)to_host(dev.slice(4, 2)); });  // offsets 12 17 15: cut at 15
  EXPECT_NE(m.find("offsets decrease at element 1: 17 then 15"), std::string::npos) << m;
  // A slice that does not reach the bad offset comes back.
  EXPECT_TRUE(same_values(sample("utf8").slice(0, 3), dev.slice(0, 3)));
}

// The device-to-host stream adapter hands each batch to host readers: it
// checks what they index with, as to_host does (it used to skip that check,
// so offsets cheap import validation lets through reached the consumer).
TEST(ArrowAdversarial, HostStreamAdapterChecksWhatHostReadersIndexWith) {
  array_data a = sample("utf8");  // offsets 0 1 1 1 12 15 15 18
  a.buffers[1] = edited<std::int32_t>(a.buffers[1], [](std::int32_t* o) { o[3] = 17; });
  const cuarrow::context ctx = cuarrow::context::get(0);
  record_batch b;
  b.schema.fields = {field("s", a.type)};
  b.num_rows = a.length;
  b.columns = {to_device(a, ctx)};
  owned_device_array_stream dev;
  bool given = false;
  export_device_array_stream(
      b.schema,
      [b, given]() mutable -> std::optional<record_batch> {
        if (given) return std::nullopt;
        given = true;
        return b;
      },
      cuarrow::device_type::cuda, {}, dev.get());
  owned_array_stream host;
  to_host(dev.get(), host.get());
  owned_array item;
  EXPECT_EQ(host->get_next(host.get(), item.get()), EINVAL);
  const std::string m = host->get_last_error(host.get());
  EXPECT_NE(m.find("offsets decrease at element 3: 17 then 12"), std::string::npos) << m;
}

// Large trees: to_host copies the buffers its check reads first (offsets,
// dictionary indices, run ends, ...) and checks them while the payload is
// still on its way.  A bad value anywhere in them is still refused, and good
// data still arrives whole, in every column, for arrays and batches.
namespace {

struct large_batch {
  array_data strings_column, ints_column, codes_column;
  record_batch batch;
};

// 2^21 strings of 0..7 characters (8 MiB of offsets) beside 2^21 int64s and
// 2^21 dictionary codes (8 MiB of int32 indices).
large_batch make_large_batch(const std::function<void(std::int32_t*)>& edit_offsets = {}) {
  const std::int64_t n = 1 << 21;
  std::vector<std::optional<std::string>> words(static_cast<std::size_t>(n));
  std::vector<std::optional<std::int64_t>> ints(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    words[static_cast<std::size_t>(i)] = std::string(static_cast<std::size_t>(i % 8), static_cast<char>('a' + i % 26));
    ints[static_cast<std::size_t>(i)] = i * 3;
  }
  large_batch l;
  l.strings_column = strings(utf8(), words);
  if (edit_offsets) l.strings_column.buffers[1] = edited<std::int32_t>(l.strings_column.buffers[1], edit_offsets);
  l.ints_column = primitive<std::int64_t>(int64(), ints);
  std::vector<std::optional<std::int32_t>> codes(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) codes[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 2);
  l.codes_column = primitive<std::int32_t>(int32(), codes);
  l.codes_column.type = dictionary(int32(), utf8());
  l.codes_column.dictionary = std::make_shared<array_data>(strings(utf8(), {"even", "odd"}));
  l.batch.schema.fields = {field("s", utf8()), field("i", int64()), field("c", l.codes_column.type)};
  l.batch.num_rows = n;
  l.batch.columns = {l.strings_column, l.ints_column, l.codes_column};
  return l;
}

}  // namespace

TEST(ArrowAdversarial, LargeTreesComeBackWholeWhileTheirOffsetsAreChecked) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const large_batch l = make_large_batch();
  // On the emulation every copy is slowed down, so the payload is still on
  // its way while the offsets are checked.
  cuarrow_test::scoped_op_delay delay(20000);
  const record_batch back = to_host(to_device(l.batch, ctx));
  ASSERT_EQ(back.columns.size(), 3u);
  EXPECT_TRUE(same_values(l.strings_column, back.columns[0]));
  EXPECT_TRUE(same_values(l.ints_column, back.columns[1]));
  EXPECT_TRUE(same_values(l.codes_column, back.columns[2]));
  const std::vector<array_data> arrays{to_device(l.strings_column, ctx), to_device(l.ints_column, ctx)};
  const std::vector<array_data> host = to_host(std::span<const array_data>(arrays));
  EXPECT_TRUE(same_values(l.strings_column, host[0]));
  EXPECT_TRUE(same_values(l.ints_column, host[1]));
}

TEST(ArrowAdversarial, LargeTreesWithABadOffsetNearTheEndAreRefused) {
  const std::int64_t at = (1 << 21) - 3;
  const large_batch l = make_large_batch([at](std::int32_t* o) { o[at] = 1 << 30; });
  const cuarrow::context ctx = cuarrow::context::get(0);
  record_batch dev;
  ASSERT_NO_THROW(dev = to_device(l.batch, ctx)) << "cheap validation lets it through";
  // The check must read the offsets that arrived, not what was there before:
  // copies slowed down (the emulation), the bad one is still found.
  cuarrow_test::scoped_op_delay delay(20000);
  const std::string m = message_of([&] { (void)to_host(dev); });
  EXPECT_NE(m.find("column \"s\""), std::string::npos) << m;
  EXPECT_NE(m.find("offsets decrease at element " + std::to_string(at) + ": 1073741824 then "), std::string::npos) << m;
  // Refused again, and the device batch stays usable.
  EXPECT_THROW((void)to_host(dev), invalid_data);
  record_batch good = dev;
  good.columns = {to_device(make_large_batch().strings_column, ctx), dev.columns[1], dev.columns[2]};
  const record_batch back = to_host(good);
  EXPECT_TRUE(same_values(l.ints_column, back.columns[1]));
}

TEST(ArrowAdversarial, LargeDictionaryIndicesAreCheckedBeforeUse) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 1 << 21;  // 8 MiB of int32 indices / run ends
  std::vector<std::optional<std::int32_t>> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 3);
  array_data dict = primitive<std::int32_t>(int32(), idx);
  dict.type = dictionary(int32(), utf8());
  dict.dictionary = std::make_shared<array_data>(strings(utf8(), {"x", "yy", "zzz"}));
  std::vector<std::optional<std::int64_t>> payload(static_cast<std::size_t>(n), std::int64_t{7});
  const array_data ints = primitive<std::int64_t>(int64(), payload);
  const std::vector<array_data> good{to_device(dict, ctx), to_device(ints, ctx)};
  const std::vector<array_data> back = to_host(std::span<const array_data>(good));
  EXPECT_TRUE(same_values(dict, back[0]));
  EXPECT_TRUE(same_values(ints, back[1]));

  array_data bad = dict;
  bad.buffers[1] = edited<std::int32_t>(dict.buffers[1], [n](std::int32_t* i) { i[n - 2] = 3; });
  const std::vector<array_data> bad_dev{to_device(bad, ctx), to_device(ints, ctx)};
  const std::string m = message_of([&] { (void)to_host(std::span<const array_data>(bad_dev)); });
  EXPECT_NE(m.find("element " + std::to_string(n - 2) + ": dictionary index 3 is outside the dictionary of 3 values"),
            std::string::npos)
      << m;
}

TEST(ArrowAdversarial, ListOffsetsDecreasingInTheMiddle) {
  array_data a = sample("list");  // offsets 0 2 2 2 3 7 over 7 ints
  a.buffers[1] = edited<std::int32_t>(a.buffers[1], [](std::int32_t* o) { o[2] = 6; });
  expect_refused_on_the_way_back(a, "offsets decrease at element 2: 6 then 2");
}

TEST(ArrowAdversarial, ListViewOutsideItsChild) {
  array_data a = sample("list_view");  // offsets 4 0 9 1, sizes 3 2 0 5 over 7 ints
  a.buffers[2] = edited<std::int32_t>(a.buffers[2], [](std::int32_t* s) { s[1] = 100; });
  expect_refused_on_the_way_back(a, "element 1: list view [0, +100) is outside the child of 7 values");
}

TEST(ArrowAdversarial, UnionTypeIdThatIsNoCode) {
  array_data a = sample("sparse_union");  // codes 5, 7
  a.buffers[0] = edited<std::int8_t>(a.buffers[0], [](std::int8_t* ids) { ids[2] = 9; });
  expect_refused_on_the_way_back(a, "element 2: type id 9 is not one of the union's type codes");
}

TEST(ArrowAdversarial, DenseUnionOffsetOutsideItsChild) {
  array_data a = sample("dense_union");
  a.buffers[1] = edited<std::int32_t>(a.buffers[1], [](std::int32_t* o) { o[4] = 2; });  // child "s" has 2 values
  expect_refused_on_the_way_back(a, "element 4: offset 2 is outside child 1 of 2 values");
}

TEST(ArrowAdversarial, ViewRefersToAMissingDataBuffer) {
  array_data a = sample("utf8_view");  // element 2 is a long string in data buffer 0
  a.buffers[1] = edited<std::uint8_t>(a.buffers[1], [](std::uint8_t* v) { v[2 * 16 + 8] = 7; });
  expect_refused_on_the_way_back(a, "element 2: view refers to data buffer 7");
}

TEST(ArrowAdversarial, ViewLengthPastItsDataBuffer) {
  array_data a = sample("binary_view");
  a.buffers[1] = edited<std::uint8_t>(a.buffers[1], [](std::uint8_t* v) {
    const std::int32_t len = 1 << 20;
    std::memcpy(v + 2 * 16, &len, 4);
  });
  expect_refused_on_the_way_back(a, "element 2: view [");
}

TEST(ArrowAdversarial, DictionaryIndexOutsideTheDictionary) {
  array_data a = sample("dictionary_int8_utf8");  // indices 0 1 _ 2 0 over 3 values
  a.buffers[1] = edited<std::int8_t>(a.buffers[1], [](std::int8_t* i) { i[3] = 3; });
  expect_refused_on_the_way_back(a, "element 3: dictionary index 3 is outside the dictionary of 3 values");
}

TEST(ArrowAdversarial, RunEndsThatDoNotIncrease) {
  array_data a = sample("ree_int64");  // run ends 3 4 9
  array_data& ends = a.children[0];
  ends.buffers[1] = edited<std::int64_t>(ends.buffers[1], [](std::int64_t* e) { e[1] = 2; });
  expect_refused_on_the_way_back(a, "run end 1 is 2 after 3");
}

// A map's keys and entries are never null; Arrow C++ aborts the process
// when it builds a map array that has some (pyarrow's to_host result, repr).
TEST(ArrowAdversarial, MapWithANullKey) {
  array_data a = sample("map");  // entries: keys a b c a z
  array_data& keys = a.children[0].children[0];
  keys.buffers[0] = bitmap({true, false, true, true, true}, 0, true);
  keys.null_count = -1;  // unknown: only counting the bits shows it
  expect_refused_on_the_way_back(a, "a map's keys must not be null, and 1 are");
  // A declared null count is refused by cheap validation already.
  keys.null_count = 1;
  const std::string m = message_of([&] { validate(a); });
  EXPECT_NE(m.find("a map's keys must not be null"), std::string::npos) << m;
}

TEST(ArrowAdversarial, MapWithANullEntry) {
  array_data a = sample("map");
  array_data& entries = a.children[0];
  entries.buffers[0] = bitmap({true, true, false, true, true}, 0, true);
  entries.null_count = -1;
  expect_refused_on_the_way_back(a, "a map's entries must not be null, and 1 are");
}

// ---- structure before pointers --------------------------------------------------------

// An int64 device id that does not fit an int must not wrap to another
// device (2^32 + 1 became device 1).
TEST(ArrowAdversarial, DeviceIdOutsideAnIntIsRefused) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (std::int64_t id : {std::int64_t{1} << 32 | 1, std::int64_t{-5}, std::int64_t{1} << 40}) {
    SCOPED_TRACE(id);
    owned_device_array out;
    export_device_array(to_device(sample("int32"), ctx), cuarrow::stream_view(), out.get());
    out->device_id = id;
    const std::string m = message_of([&] { (void)import_device_array(out.get(), int32()); });
    EXPECT_NE(m.find("device_id " + std::to_string(id) + " is not a device ordinal"), std::string::npos) << m;
    EXPECT_TRUE(out.is_released()) << "the import took the struct and released it";
  }
}

// Device memory labelled pinned host memory (CUDA_HOST) or managed memory
// is read by host code (null counts, to_host returns it as it is): the label
// is checked against the driver before any such read.
TEST(ArrowAdversarial, DeviceMemoryLabelledHostMemoryIsRefused) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (ArrowDeviceType label : {ARROW_DEVICE_CUDA_HOST, ARROW_DEVICE_CUDA_MANAGED}) {
    SCOPED_TRACE(static_cast<int>(label));
    owned_device_array out;
    export_device_array(to_device(sample("int32"), ctx), cuarrow::stream_view(), out.get());
    out->device_type = label;
    const std::string m = message_of([&] { (void)import_device_array(out.get(), int32()); });
    EXPECT_NE(m.find("the driver knows this buffer as device memory of device 0"), std::string::npos) << m;
  }
  // Real pinned memory labelled CUDA_HOST imports, and reads.
  owned_device_array pinned;
  export_device_array(to_pinned(sample("int32"), ctx), cuarrow::stream_view(), pinned.get());
  ASSERT_EQ(pinned->device_type, ARROW_DEVICE_CUDA_HOST);
  EXPECT_TRUE(same_values(sample("int32"), import_device_array(pinned.get(), int32())));
}

// A producer whose length describes more memory than its buffers have
// (device memory, or pinned memory host code would read): refused at import,
// naming the buffer and its node, before anything reads past the memory (a device fault,
// or a crash of host code, otherwise).
TEST(ArrowAdversarial, BuffersLongerThanTheMemoryTheDriverKnowsAreRefused) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  for (const bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "pinned" : "device");
    owned_device_array out;
    export_device_array(pinned ? to_pinned(sample("int32"), ctx) : to_device(sample("int32"), ctx),
                        cuarrow::stream_view(), out.get());
    out->array.length = std::int64_t{1} << 36;  // 256 GiB of int32
    out->array.null_count = 0;
    const std::string m = message_of([&] { (void)import_device_array(out.get(), int32()); });
    EXPECT_NE(m.find("the validity buffer of array: 8589934592 bytes from 0x"), std::string::npos) << m;
    EXPECT_NE(m.find("run past the memory the CUDA driver knows there"), std::string::npos) << m;
    EXPECT_TRUE(out.is_released()) << "the import took the struct and released it";
  }
}

// A large_utf8 array whose last offset is INT64_MAX: a valid int64, and the
// data buffer's size as the C Data Interface implies it.  Summing the
// transfer's arena overflowed (undefined behaviour, caught by UBSan).
TEST(ArrowAdversarial, LastOffsetOfInt64MaxIsTooLargeToCopy) {
  const std::int64_t offsets[2] = {0, std::numeric_limits<std::int64_t>::max()};
  const char data[2] = {'a', 'b'};
  const void* buffers[3] = {nullptr, offsets, data};
  ArrowArray in{};
  in.length = 1;
  in.null_count = 0;
  in.n_buffers = 3;
  in.buffers = buffers;
  in.release = [](ArrowArray* a) { a->release = nullptr; };
  const array_data a = import_array(&in, large_utf8());
  const std::string m = message_of([&] { (void)to_device(a, cuarrow::context::get(0)); });
  EXPECT_NE(m.find("makes the array too large to copy"), std::string::npos) << m;
}

// Calling a stream's callbacks after its release is the consumer's error;
// cuarrow's streams refuse (EINVAL) instead of reading freed memory.
TEST(ArrowAdversarial, StreamCallbacksAfterReleaseAreRefused) {
  owned_device_array_stream st;
  record_batch b;
  b.schema.fields = {field("x", int32())};
  b.num_rows = 10;
  b.columns = {sample("int32")};
  export_device_array_stream(
      b.schema,
      [b, done = false]() mutable -> std::optional<record_batch> {
        if (done) return std::nullopt;
        done = true;
        return b;
      },
      cuarrow::device_type::cpu, cuarrow::stream_view(), st.get());
  ArrowDeviceArrayStream* raw = st.get();
  raw->release(raw);  // as a consumer does; the callbacks stay in the struct
  ArrowDeviceArray out{};
  ArrowSchema schema{};
  EXPECT_EQ(raw->get_next(raw, &out), EINVAL);
  EXPECT_EQ(raw->get_schema(raw, &schema), EINVAL);
  EXPECT_NE(raw->get_last_error(raw), nullptr);

  owned_array_stream host;
  export_array_stream(
      b.schema, []() -> std::optional<record_batch> { return std::nullopt; }, host.get());
  ArrowArrayStream* raw_host = host.get();
  raw_host->release(raw_host);
  ArrowArray arr{};
  EXPECT_EQ(raw_host->get_next(raw_host, &arr), EINVAL);
}

// ---- results outlive the context --------------------------------------------------

// Another component releases the primary context once more than it
// retained it (or calls cudaDeviceReset): the driver destroys the context
// and everything it allocated in it.  Host results cuarrow handed out
// (to_host's pinned arrays, allocate_pinned) must stay readable: cuarrow's
// pinned memory is its own mapping, only registered with the driver.
CUARROW_CHILD_MODE(context_destroyed_under_results) {
  const cuarrow::context ctx = cuarrow::context::get(0);
  const array_data host = strings(utf8(), {"results", std::nullopt, "outlive", "their context"});
  const array_data back = to_host(to_device(host, ctx));
  CHILD_CHECK(back.buffers[1].type() == cuarrow::device_type::cuda_host);  // from the pinned result pool
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 4096);
  std::memset(pinned.mutable_host_data(), 0x5a, 4096);

  // As another component would, through the driver itself.
  void* lib = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  CHILD_CHECK(lib != nullptr);
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  CHILD_CHECK(get_proc != nullptr);
  void* release_fn = nullptr;
  void* state_fn = nullptr;
  CHILD_CHECK(get_proc("cuDevicePrimaryCtxRelease", &release_fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) ==
              CUDA_SUCCESS);
  CHILD_CHECK(get_proc("cuDevicePrimaryCtxGetState", &state_fn, 7000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) ==
              CUDA_SUCCESS);
  auto release = reinterpret_cast<PFN_cuDevicePrimaryCtxRelease_v11000>(release_fn);
  auto get_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(state_fn);
  for (int i = 0; i < 64; ++i) {
    unsigned flags = 0;
    int active = 1;
    CHILD_CHECK(get_state(0, &flags, &active) == CUDA_SUCCESS);
    if (active == 0) break;
    CHILD_CHECK(release(0) == CUDA_SUCCESS);
  }
  unsigned flags = 0;
  int active = 1;
  CHILD_CHECK(get_state(0, &flags, &active) == CUDA_SUCCESS && active == 0);

  // The context, its device memory and its registrations are gone; the
  // host results are not.
  CHILD_CHECK(equals(host, back));  // reads the host memory only; no driver call
  CHILD_CHECK(pinned.host_data()[0] == std::byte{0x5a} && pinned.host_data()[4095] == std::byte{0x5a});
  std::printf("CHILD OK\n");
  std::fflush(stdout);
  // cuarrow still believes it holds its retain; do not let exit handlers
  // talk to a driver whose state another component broke.
  std::_Exit(0);
}

TEST(ArrowAdversarial, HostResultsOutliveAContextDestroyedUnderThem) {
  cuarrow_test::child_result r = cuarrow_test::run_self("context_destroyed_under_results", {});
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  EXPECT_NE(r.output.find("CHILD OK"), std::string::npos) << r.output;
}

// ---- schemas whose nodes are shared --------------------------------------------------

// Hand-made ArrowSchema nodes (the release callback does nothing: the test
// owns them), so that children may point anywhere.
struct schema_nodes {
  std::vector<std::unique_ptr<ArrowSchema>> nodes;
  std::vector<std::unique_ptr<ArrowSchema*[]>> child_arrays;

  ArrowSchema* node(const char* format, std::vector<ArrowSchema*> children = {}) {
    auto s = std::make_unique<ArrowSchema>();
    std::memset(s.get(), 0, sizeof(ArrowSchema));
    s->format = format;
    s->name = "n";
    s->flags = ARROW_FLAG_NULLABLE;
    s->n_children = static_cast<std::int64_t>(children.size());
    if (!children.empty()) {
      child_arrays.push_back(std::make_unique<ArrowSchema*[]>(children.size()));
      std::copy(children.begin(), children.end(), child_arrays.back().get());
      s->children = child_arrays.back().get();
    }
    s->release = [](ArrowSchema*) {};
    nodes.push_back(std::move(s));
    return nodes.back().get();
  }
};

std::string schema_refusal(const ArrowSchema& s) {
  try {
    read_field(s);
  } catch (const invalid_data& e) {
    return e.reason();
  }
  return "(accepted)";
}

// A struct of two children that are one node, 48 levels of them: a tree of
// 2^48 leaves described by 49 nodes.  Import used to expand it (it hung,
// allocating hundreds of MB and more); every node is now read once, and one
// reached twice is refused.
TEST(ArrowAdversarial, SchemaWhoseChildrenShareNodesIsRefused) {
  schema_nodes n;
  ArrowSchema* top = n.node("i");
  for (int level = 0; level < 48; ++level) top = n.node("+s", {top, top});
  EXPECT_EQ(schema_refusal(*top),
            "this ArrowSchema node is reached a second time: children and dictionaries must form a tree "
            "(shared or cyclic nodes are refused)");
  // The same node as a child and as a dictionary, and in two columns of a
  // record batch schema.
  ArrowSchema* leaf = n.node("u");
  ArrowSchema* idx = n.node("i");
  idx->dictionary = leaf;
  EXPECT_EQ(schema_refusal(*n.node("+s", {leaf, idx})).substr(0, 43), "this ArrowSchema node is reached a second t");
  ArrowSchema* batch = n.node("+s", {leaf, leaf});
  EXPECT_THROW(read_schema(*batch), invalid_data);
  // Distinct nodes of the same shape are a tree, and read.
  EXPECT_EQ(read_field(*n.node("+s", {n.node("i"), n.node("i")})).type,
            struct_({field("n", int32()), field("n", int32())}));
}

TEST(ArrowAdversarial, SchemaCyclesAreRefusedAtTheirFirstRepeat) {
  schema_nodes n;
  ArrowSchema* list = n.node("+l", {nullptr});
  list->children[0] = list;  // a list of itself
  try {
    read_field(*list);
    FAIL();
  } catch (const invalid_data& e) {
    EXPECT_EQ(e.path(), "field \"n\" \u2192 child 0 (\"n\")");  // refused at once, not 64 levels down
  }
  ArrowSchema* dict = n.node("i");
  dict->dictionary = dict;  // a dictionary of itself
  EXPECT_THROW(read_field(*dict), invalid_data);
  ArrowSchema* batch = n.node("+s", {nullptr});
  batch->children[0] = batch;  // a record batch schema that contains itself
  EXPECT_THROW(read_schema(*batch), invalid_data);
}

TEST(ArrowAdversarial, SchemaNodeCountAndDepthAreBounded) {
  schema_nodes n;
  // A child count beyond the bound is refused before any child pointer is read.
  ArrowSchema* wide = n.node("+s");
  wide->n_children = max_schema_nodes + 1;
  ArrowSchema* one = nullptr;
  wide->children = &one;
  EXPECT_EQ(schema_refusal(*wide), "n_children 1048577 is more than the 1048576 nodes a schema may have");
  EXPECT_THROW(read_schema(*wide), invalid_data);
  // Depth: 64 levels below the root are read, 65 are not.
  ArrowSchema* deep = n.node("i");
  for (int level = 0; level < max_schema_depth; ++level) deep = n.node("+l", {deep});
  EXPECT_NO_THROW(read_field(*deep));
  EXPECT_EQ(schema_refusal(*n.node("+l", {deep})), "schema nested more than 64 levels deep");
}

}  // namespace
}  // namespace cuarrow_arrow_test
