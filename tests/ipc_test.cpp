// CUDA IPC: the wire format of ipc_memory_handle, export_ipc's refusals, and
// export/open across processes (the test binary runs itself again as the
// importing process, tests/child_process.hpp).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../src/ipc_handle_factory.hpp"
#include "child_process.hpp"
#include "test_support.hpp"

using namespace cuarrow_test;

// Only cuarrow makes handles (export_ipc, deserialize): no handle from
// hand-filled fields, which could claim memory nobody exported.
static_assert(!std::is_constructible_v<cuarrow::ipc_memory_handle, cuarrow::ipc_memory_handle::fields>);

namespace {

std::shared_ptr<cuarrow::device_memory_resource> plain() { return std::make_shared<cuarrow::plain_device_resource>(); }

// Device memory IPC can export (cuMemAlloc), filled with `bytes`.
cuarrow::buffer plain_buffer(const cuarrow::context& ctx, const std::vector<std::uint8_t>& bytes) {
  cuarrow::buffer b = cuarrow::allocate_device(ctx, static_cast<std::int64_t>(bytes.size()), {}, plain());
  cuarrow::copy_from_host(b, 0, bytes.data(), b.size());
  return b;
}

std::vector<std::byte> as_bytes(const std::string& s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

cuarrow::ipc_memory_handle sample_handle(std::int64_t offset, std::int64_t size, int device) {
  cuarrow::ipc_memory_handle::fields f;
  for (std::size_t i = 0; i < f.driver_handle.size(); ++i) f.driver_handle[i] = static_cast<std::byte>(i * 7 + 3);
  f.offset = offset;
  f.size = size;
  f.device_id = device;
  f.exporter = 0x1234;
  return cuarrow::detail::ipc_handle_factory::make(std::move(f));
}

// Rewrites the checksum after a test edited a serialized handle.
void reseal(std::vector<std::byte>& wire) { cuarrow_test::reseal_checksum(wire, 104); }

template <class T>
void put_le(std::vector<std::byte>& wire, std::size_t at, T value) {
  auto u = static_cast<std::make_unsigned_t<T>>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) wire[at + i] = static_cast<std::byte>((u >> (8 * i)) & 0xff);
}

// pyarrow.cuda's format: int64 size, then the driver handle if size != 0.
std::vector<std::byte> pyarrow_wire(std::int64_t size, const cuarrow::ipc_memory_handle& h, bool with_handle = true) {
  std::vector<std::byte> v(with_handle ? 72 : 8);
  std::memcpy(v.data(), &size, sizeof size);
  if (with_handle) std::memcpy(v.data() + 8, h.driver_handle().data(), 64);
  return v;
}

// Deserializing `wire` (held in exactly wire.size() bytes of heap, so that a
// read past it is an AddressSanitizer error) throws invalid_argument with
// `fragment` in its message.
void expect_malformed(const std::vector<std::byte>& wire, const std::string& fragment) {
  auto exact = std::make_unique<std::byte[]>(wire.size() == 0 ? 1 : wire.size());
  if (!wire.empty()) std::memcpy(exact.get(), wire.data(), wire.size());
  try {
    (void)cuarrow::ipc_memory_handle::deserialize(std::span<const std::byte>(exact.get(), wire.size()));
    ADD_FAILURE() << "no error for " << wire.size() << " bytes; expected: " << fragment;
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot read an IPC memory handle from " + std::to_string(wire.size())),
              std::string::npos)
        << e.what();
  }
}

template <class E, class F>
std::string expect_error(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another error than expected: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no error";
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// ---------------------------------------------------------------------------
// Child processes (the importing side)

// ipc_open <handle hex> <device> <seed> <opens>: opens the handle on `device`
// (`opens` times: the mapping is shared), checks the bytes are
// pattern(size, seed), re-exports a slice of it, writes pattern(size, seed+1).
CUARROW_CHILD_MODE(ipc_open) {
  CHILD_CHECK(argc == 4);
  auto handle = cuarrow::ipc_memory_handle::deserialize(from_hex(argv[0]));
  const int device = std::atoi(argv[1]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[2]));
  const int opens = std::atoi(argv[3]);
  cuarrow::context ctx = cuarrow::context::get(device);
  const std::int64_t allocated = ctx.bytes_allocated();
  const std::size_t mappings = emu().ipc_mapping_count ? emu().ipc_mapping_count() : 0;
  {
    std::vector<cuarrow::buffer> opened;
    for (int i = 0; i < opens; ++i) opened.push_back(cuarrow::open_ipc(ctx, handle));
    cuarrow::buffer& b = opened.front();
    for (auto& o : opened) CHILD_CHECK(o.address() == b.address());  // one mapping
    if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == mappings + 1);
    CHILD_CHECK(b.type() == cuarrow::device_type::cuda);
    CHILD_CHECK(b.device_id() == device);  // the opening device, whatever the exporter's was
    CHILD_CHECK(b.get_context() && *b.get_context() == ctx);
    CHILD_CHECK(b.size() == handle.size());
    CHILD_CHECK(b.is_mutable());
    CHILD_CHECK(to_vector(b) == pattern(static_cast<std::size_t>(b.size()), seed));
    CHILD_CHECK(ctx.bytes_allocated() == allocated);  // opened memory is not allocated here
    if (b.size() > 1) {
      // Memory opened here can be handed on: the same allocation, this offset.
      cuarrow::ipc_memory_handle again = cuarrow::export_ipc(b.slice(1));
      CHILD_CHECK(again.driver_handle() == handle.driver_handle());
      CHILD_CHECK(again.offset() == handle.offset() + 1);
      CHILD_CHECK(again.size() == handle.size() - 1);
      CHILD_CHECK(again.device_id() == handle.device_id());
      CHILD_CHECK(!again.exported_by_this_process());
    }
    auto next = pattern(static_cast<std::size_t>(b.size()), seed + 1);
    cuarrow::copy_from_host(opened.back(), 0, next.data(), b.size());
    opened.pop_back();
    if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == mappings + (opens > 1 ? 1 : 0));
  }
  if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == mappings);  // closed with the last buffer
  std::printf("CHILD OK\n");
  return 0;
}

// ipc_open_refused <handle hex>: the handle's range lies outside the exported
// allocation; opening must say so and leave nothing mapped.
CUARROW_CHILD_MODE(ipc_open_refused) {
  CHILD_CHECK(argc == 1);
  auto handle = cuarrow::ipc_memory_handle::deserialize(from_hex(argv[0]));
  cuarrow::context ctx = cuarrow::context::get(0);
  try {
    (void)cuarrow::open_ipc(ctx, handle);
    CHILD_CHECK(false);
  } catch (const cuarrow::invalid_argument& e) {
    std::printf("REFUSED: %s\n", e.what());
    CHILD_CHECK(contains(e.what(), "runs past the exported allocation"));
  }
  if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == 0);
  std::printf("CHILD OK\n");
  return 0;
}

// ipc_export_and_exit: exports a buffer, prints its handle, exits.
CUARROW_CHILD_MODE(ipc_export_and_exit) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer b = plain_buffer(ctx, pattern(4096, 5));
  std::printf("HANDLE=%s\n", to_hex(cuarrow::export_ipc(b).serialize()).c_str());
  return 0;
}

// ---------------------------------------------------------------------------
// Wire format

TEST(Ipc, WireFormatRoundTrips) {
  cuarrow::ipc_memory_handle h = sample_handle(4096 + 17, 1000, 1);
  std::vector<std::byte> wire = h.serialize();
  ASSERT_EQ(wire.size(), cuarrow::ipc_memory_handle::serialized_size);
  EXPECT_EQ(0, std::memcmp(wire.data(), "CUARIPC\0", 8));
  EXPECT_EQ(wire[8], std::byte{1});  // version 1, little-endian
  EXPECT_EQ(wire[9], std::byte{0});
  EXPECT_EQ(0, std::memcmp(wire.data() + 40, h.driver_handle().data(), 64));
  cuarrow::ipc_memory_handle back = cuarrow::ipc_memory_handle::deserialize(wire);
  EXPECT_EQ(back.driver_handle(), h.driver_handle());
  EXPECT_EQ(back.offset(), 4096 + 17);
  EXPECT_EQ(back.size(), 1000);
  EXPECT_EQ(back.device_id(), 1);
  EXPECT_EQ(back.exporter_token(), 0x1234u);
  EXPECT_EQ(back.serialize(), wire);
  EXPECT_EQ(back.describe(), "cuarrow.ipc_memory_handle(size=1000, offset=4113, device=1)");

  cuarrow::ipc_memory_handle empty;
  cuarrow::ipc_memory_handle empty_back = cuarrow::ipc_memory_handle::deserialize(empty.serialize());
  EXPECT_EQ(empty_back.size(), 0);
  EXPECT_EQ(empty_back.offset(), 0);
  EXPECT_EQ(empty_back.device_id(), -1);
  EXPECT_EQ(empty_back.describe(), "cuarrow.ipc_memory_handle(size=0, offset=0, device=unknown)");
}

TEST(Ipc, ReadsPyarrowFormat) {
  cuarrow::ipc_memory_handle h = sample_handle(0, 0, 0);
  cuarrow::ipc_memory_handle p = cuarrow::ipc_memory_handle::deserialize(pyarrow_wire(1000, h));
  EXPECT_EQ(p.size(), 1000);
  EXPECT_EQ(p.offset(), 0);
  EXPECT_EQ(p.device_id(), -1);  // pyarrow does not say
  EXPECT_EQ(p.driver_handle(), h.driver_handle());
  EXPECT_FALSE(p.exported_by_this_process());
  // An empty buffer: 8 bytes; 72 bytes with size 0 read as empty too.
  EXPECT_EQ(cuarrow::ipc_memory_handle::deserialize(pyarrow_wire(0, h, false)).size(), 0);
  cuarrow::ipc_memory_handle z = cuarrow::ipc_memory_handle::deserialize(pyarrow_wire(0, h));
  EXPECT_EQ(z.size(), 0);
  EXPECT_EQ(z.driver_handle(), (std::array<std::byte, 64>{}));
  // Written back in cuarrow's format, it keeps what it knows.
  cuarrow::ipc_memory_handle again = cuarrow::ipc_memory_handle::deserialize(p.serialize());
  EXPECT_EQ(again.size(), 1000);
  EXPECT_EQ(again.device_id(), -1);
}

TEST(Ipc, MalformedInputsAreInvalidArguments) {
  const std::vector<std::byte> good = sample_handle(256, 1000, 0).serialize();
  expect_malformed({}, "expected a cuarrow IPC handle (112 or 120 bytes");
  expect_malformed(as_bytes("abc"), "or a pyarrow.cuda one (72 bytes, or 8 for an empty buffer)");
  expect_malformed(std::vector<std::byte>(50, std::byte{0x5a}), "expected a cuarrow IPC handle");
  expect_malformed(std::vector<std::byte>(good.begin(), good.begin() + 8), "cut short before its version");
  expect_malformed(std::vector<std::byte>(good.begin(), good.begin() + 9), "cut short before its version");
  expect_malformed(std::vector<std::byte>(good.begin(), good.begin() + 72), "is 112 bytes long (it was cut short)");
  expect_malformed(std::vector<std::byte>(good.begin(), good.end() - 1), "is 112 bytes long (it was cut short)");
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  expect_malformed(longer, "(extra bytes follow it)");

  std::vector<std::byte> bad_magic = good;
  bad_magic[3] = std::byte{'X'};
  expect_malformed(bad_magic, "expected a cuarrow IPC handle");  // 112 bytes, not a pyarrow length either

  std::vector<std::byte> v3 = good;
  put_le<std::uint16_t>(v3, 8, 3);
  reseal(v3);
  expect_malformed(v3, "unsupported cuarrow IPC handle version 3 (this cuarrow reads versions 1 and 2)");
  // Version 2 (pool handles) is 120 bytes: the version decides the length.
  std::vector<std::byte> v2 = good;
  put_le<std::uint16_t>(v2, 8, 2);
  reseal(v2);
  expect_malformed(v2, "a cuarrow IPC handle of version 2 is 120 bytes long (it was cut short)");
  // A later version may be longer: the version is what is reported.
  std::vector<std::byte> v7_short(good.begin(), good.begin() + 20);
  put_le<std::uint16_t>(v7_short, 8, 7);
  expect_malformed(v7_short, "unsupported cuarrow IPC handle version 7");

  for (std::size_t at : {std::size_t{12}, std::size_t{20}, std::size_t{50}, std::size_t{110}}) {
    std::vector<std::byte> damaged = good;
    damaged[at] ^= std::byte{0x10};
    expect_malformed(damaged, "the checksum does not match");
  }
  std::vector<std::byte> reserved = good;
  put_le<std::uint16_t>(reserved, 10, 1);
  reseal(reserved);
  expect_malformed(reserved, "reserved field is not 0");

  auto with = [&](std::size_t at, std::int64_t value) {
    std::vector<std::byte> w = good;
    put_le<std::int64_t>(w, at, value);
    reseal(w);
    return w;
  };
  expect_malformed(with(24, -1), "negative size -1");
  expect_malformed(with(16, -4096), "negative offset -4096");
  expect_malformed(with(24, std::numeric_limits<std::int64_t>::max()),
                   "offset 256 + size 9223372036854775807 overflows");
  std::vector<std::byte> device = good;
  put_le<std::int32_t>(device, 12, -7);
  reseal(device);
  expect_malformed(device, "negative device ordinal -7");

  // pyarrow's format: the size decides the length.
  const cuarrow::ipc_memory_handle h = sample_handle(0, 0, 0);
  expect_malformed(pyarrow_wire(1000, h, false), "of a 1000-byte buffer is 72 bytes long (it was cut short)");
  expect_malformed(pyarrow_wire(-5, h), "negative size -5");
  expect_malformed(pyarrow_wire(std::numeric_limits<std::int64_t>::min(), h, false), "negative size");
  std::vector<std::byte> pa_long = pyarrow_wire(1000, h);
  pa_long.push_back(std::byte{0});
  expect_malformed(pa_long, "expected a cuarrow IPC handle");
}

// ---------------------------------------------------------------------------
// Export

TEST(Ipc, ExportRefusesHostAndPinnedMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::string m =
      expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_ipc(cuarrow::allocate_host(64)); });
  EXPECT_TRUE(contains(m, "ordinary host memory (cpu); CUDA IPC shares device memory only")) << m;
  m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_ipc(cuarrow::allocate_pinned(ctx, 64)); });
  EXPECT_TRUE(contains(m, "pinned host memory (cuda_host)")) << m;
  // Pinned memory seen as a device buffer (wrap_device labels it cuda_host).
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 64);
  cuarrow::buffer view = cuarrow::wrap_device(ctx, ctx.get_device_address(pinned.host_data()), 64, pinned.owner());
  m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_ipc(view); });
  EXPECT_TRUE(contains(m, "pinned host memory")) << m;
}

TEST(Ipc, ExportRefusesPoolMemorySayingWhatToDo) {
  cuarrow::context ctx = cuarrow::context::get(0);
  if (!ctx.properties().memory_pools_supported) GTEST_SKIP() << "this device has no stream-ordered memory pools";
  // The device's default pool (the default resource where shareable pools are not supported).
  cuarrow::buffer pooled = cuarrow::allocate_device(ctx, 4096, {}, std::make_shared<cuarrow::async_pool_resource>(ctx));
  for (const cuarrow::buffer& b : {pooled, pooled.slice(256, 100)}) {
    std::string m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_ipc(b); });
    EXPECT_TRUE(contains(m, "stream-ordered pool")) << m;
    EXPECT_TRUE(contains(m, "ipc_pool_resource")) << m;
    EXPECT_TRUE(contains(m, "plain_device_resource")) << m;
    EXPECT_TRUE(contains(m, "Context.new_buffer")) << m;
  }
}

TEST(Ipc, EmptyBuffersNeedNoDriver) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer empty = cuarrow::allocate_device(ctx, 0);
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(empty);
  EXPECT_EQ(h.size(), 0);
  EXPECT_EQ(h.device_id(), 0);
  // The empty slice at the end of a real buffer, too.
  EXPECT_EQ(cuarrow::export_ipc(plain_buffer(ctx, pattern(16, 1)).slice(16)).size(), 0);
  // Opened anywhere, this process included: an empty buffer of that context.
  cuarrow::context last = cuarrow::context::get(cuarrow::device_count() - 1);
  for (const auto& handle : {h, cuarrow::ipc_memory_handle::deserialize(h.serialize())}) {
    cuarrow::buffer b = cuarrow::open_ipc(last, handle);
    EXPECT_EQ(b.size(), 0);
    EXPECT_EQ(b.type(), cuarrow::device_type::cuda);
    EXPECT_EQ(b.device_id(), last.device_number());
  }
  if (emu().ipc_mapping_count) {
    EXPECT_EQ(emu().ipc_mapping_count(), 0u);
  }
}

TEST(Ipc, HandleKeepsTheExportedMemoryAlive) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t before = ctx.bytes_allocated();
  std::optional<cuarrow::ipc_memory_handle> h;
  {
    cuarrow::buffer b = plain_buffer(ctx, pattern(1000, 2));
    EXPECT_EQ(ctx.bytes_allocated(), before + 1000);  // plain_device_resource memory is counted
    h = cuarrow::export_ipc(b.slice(100, 10));
    EXPECT_EQ(h->offset(), 100);
    EXPECT_EQ(h->size(), 10);
    EXPECT_TRUE(h->exported_by_this_process());
  }
  EXPECT_EQ(ctx.bytes_allocated(), before + 1000) << "the handle holds the exported memory";
  cuarrow::ipc_memory_handle wire_copy = cuarrow::ipc_memory_handle::deserialize(h->serialize());
  h.reset();
  EXPECT_EQ(ctx.bytes_allocated(), before) << "serialized bytes do not";
  (void)wire_copy;
}

TEST(Ipc, OpeningInTheExportingProcessIsRefused) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer b = plain_buffer(ctx, pattern(4096, 3));
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b);
  std::string m = expect_error<cuarrow::invalid_argument>(
      [&] { (void)cuarrow::open_ipc(ctx, cuarrow::ipc_memory_handle::deserialize(h.serialize())); });
  EXPECT_TRUE(contains(m, "IPC handles are for other processes")) << m;
  // pyarrow's format does not name the exporter: the driver refuses, and the
  // error says why that may be.
  m = expect_error<cuarrow::cuda_error>(
      [&] { (void)cuarrow::open_ipc(ctx, cuarrow::ipc_memory_handle::deserialize(pyarrow_wire(4096, h))); });
  EXPECT_TRUE(contains(m, "cuIpcOpenMemHandle failed: CUDA_ERROR_")) << m;
  EXPECT_TRUE(contains(m, "IPC handles are for other processes")) << m;
  if (emu().ipc_mapping_count) {
    EXPECT_EQ(emu().ipc_mapping_count(), 0u);
  }
}

// ---------------------------------------------------------------------------
// Across processes

namespace {

// Exports a slice at a non-zero offset of a cuMemAlloc allocation (which
// itself lies after another one), lets a child open it on `child_device`
// `opens` times, and checks the child's writes landed in the slice only.
void exchange_slice(int child_device, int opens) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer pad = plain_buffer(ctx, pattern(1000, 9));
  const std::size_t total = (1 << 20) + 333;
  cuarrow::buffer whole = plain_buffer(ctx, pattern(total, 10));
  const std::int64_t offset = 4096 + 17, length = 10000;
  cuarrow::buffer slice = whole.slice(offset, length);
  auto inside = pattern(static_cast<std::size_t>(length), 40);
  cuarrow::copy_from_host(slice, 0, inside.data(), length);
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(slice);
  ASSERT_EQ(h.offset(), offset);
  ASSERT_EQ(h.size(), length);
  ASSERT_EQ(h.device_id(), 0);

  child_result r =
      run_self("ipc_open", {to_hex(h.serialize()), std::to_string(child_device), "40", std::to_string(opens)});
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, "CHILD OK")) << r.output;

  EXPECT_EQ(to_vector(slice), pattern(static_cast<std::size_t>(length), 41)) << "the child's writes are seen here";
  std::vector<std::uint8_t> all = to_vector(whole), expected = pattern(total, 10);
  std::vector<std::uint8_t> next = pattern(static_cast<std::size_t>(length), 41);
  std::copy(next.begin(), next.end(), expected.begin() + offset);
  EXPECT_TRUE(all == expected) << "bytes outside the slice changed";
  EXPECT_EQ(to_vector(pad), pattern(1000, 9));
}

}  // namespace

TEST(Ipc, SliceOpensInAnotherProcess) { exchange_slice(0, 1); }

TEST(Ipc, OpeningTwiceInOneProcessSharesTheMapping) { exchange_slice(0, 3); }

TEST(Ipc, HandleOfDevice0OpensOnDevice1OfAnotherProcess) {
  CUARROW_REQUIRE_DEVICES(2);
  exchange_slice(1, 2);
}

TEST(Ipc, WholeBufferAndPyarrowFormatOpenInAnotherProcess) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer b = plain_buffer(ctx, pattern(1000, 40));
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b);
  EXPECT_EQ(h.offset(), 0);
  // As pyarrow.cuda would send it: the child reads it as offset 0.
  cuarrow::ipc_memory_handle as_pyarrow = cuarrow::ipc_memory_handle::deserialize(pyarrow_wire(1000, h));
  child_result r = run_self("ipc_open", {to_hex(as_pyarrow.serialize()), "0", "40", "1"});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_EQ(to_vector(b), pattern(1000, 41));
}

TEST(Ipc, RangesOutsideTheAllocationAreRefusedByTheImporter) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer b = plain_buffer(ctx, pattern(4096, 6));
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b.slice(4000));
  // The handle's bytes, edited on their way to claim more than was exported.
  std::vector<std::byte> wire = h.serialize();
  put_le<std::int64_t>(wire, 24, 1000);  // size: 4000 + 1000 > 4096
  reseal(wire);
  child_result r = run_self("ipc_open_refused", {to_hex(wire)});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "runs past the exported allocation of 4096 bytes")) << r.output;
}

TEST(Ipc, HandleOfAProcessThatExitedIsACudaError) {
  child_result r = run_self("ipc_export_and_exit", {});
  ASSERT_TRUE(r.ok()) << r.output;
  std::size_t at = r.output.find("HANDLE=");
  ASSERT_NE(at, std::string::npos) << r.output;
  cuarrow::ipc_memory_handle h = cuarrow::ipc_memory_handle::deserialize(from_hex(r.output.substr(at + 7, 224)));
  EXPECT_EQ(h.size(), 4096);
  EXPECT_FALSE(h.exported_by_this_process());
  std::string m = expect_error<cuarrow::cuda_error>([&] { (void)cuarrow::open_ipc(cuarrow::context::get(0), h); });
  EXPECT_TRUE(contains(m, "cuIpcOpenMemHandle failed")) << m;
  EXPECT_TRUE(contains(m, "the exporting process may have exited")) << m;
  if (emu().ipc_mapping_count) {
    EXPECT_EQ(emu().ipc_mapping_count(), 0u);
  }
}
