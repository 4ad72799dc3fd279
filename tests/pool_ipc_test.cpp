// Pool IPC: ipc_pool_resource, export_pool / import_pool, pool handles
// (wire format version 2) and open_ipc(imported_pool, handle) across
// processes; the pool's descriptor goes to the child over a socketpair with
// SCM_RIGHTS (tests/fd_passing.hpp), the handle with it.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "fd_passing.hpp"
#include "test_support.hpp"

using namespace cuarrow_test;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

// A buffer of an ipc_pool_resource holding `bytes`, written and synchronized.
cuarrow::buffer pool_buffer(const cuarrow::context& ctx, const std::shared_ptr<cuarrow::device_memory_resource>& pool,
                            const std::vector<std::uint8_t>& bytes) {
  cuarrow::buffer b = cuarrow::allocate_device(ctx, static_cast<std::int64_t>(bytes.size()), {}, pool);
  cuarrow::copy_from_host(b, 0, bytes.data(), b.size());
  return b;
}

// The message that carries a pool's descriptor: its id, then a serialized
// handle.
std::vector<std::byte> pool_message(std::uint64_t pool_id, const std::vector<std::byte>& handle) {
  std::vector<std::byte> m(8 + handle.size());
  std::memcpy(m.data(), &pool_id, 8);
  std::copy(handle.begin(), handle.end(), m.begin() + 8);
  return m;
}

struct received {
  int fd = -1;
  std::uint64_t pool_id = 0;
  std::vector<std::byte> handle;
};

received receive_pool(int sock) {
  received r;
  std::vector<std::byte> payload;
  r.fd = receive_fd(sock, &payload);
  if (payload.size() >= 8) {
    std::memcpy(&r.pool_id, payload.data(), 8);
    r.handle.assign(payload.begin() + 8, payload.end());
  }
  return r;
}

// Rewrites the checksum of a version-2 handle after a test edited it.
void reseal_v2(std::vector<std::byte>& wire) { cuarrow_test::reseal_checksum(wire, 112); }

}  // namespace

// ---------------------------------------------------------------------------
// Child processes (the importing side)

// pool_open <socket> <seed> <opens> <device>: receives the pool's descriptor
// and a handle, imports the pool into a context of `device`, opens the handle `opens` times (one import),
// checks the bytes are pattern(size, seed), re-exports a slice, writes
// pattern(size, seed + 1); everything imported is released at the end.
CUARROW_CHILD_MODE(pool_open) {
  CHILD_CHECK(argc == 4);
  const int sock = std::atoi(argv[0]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[1]));
  const int opens = std::atoi(argv[2]);
  const int device = std::atoi(argv[3]);
  received msg = receive_pool(sock);
  CHILD_CHECK(msg.fd >= 0);
  auto handle = cuarrow::ipc_memory_handle::deserialize(msg.handle);
  CHILD_CHECK(handle.kind() == cuarrow::ipc_handle_kind::pool);
  CHILD_CHECK(handle.pool_id() == msg.pool_id);
  cuarrow::context ctx = cuarrow::context::get(device);
  const std::int64_t allocated = ctx.bytes_allocated();
  const std::size_t mappings = emu().ipc_mapping_count ? emu().ipc_mapping_count() : 0;
  const std::size_t pools = emu().pool_count ? emu().pool_count() : 0;
  {
    std::vector<cuarrow::buffer> opened;
    {
      cuarrow::imported_pool pool = cuarrow::import_pool(ctx, msg.fd, msg.pool_id);
      close(msg.fd);  // not needed once imported
      CHILD_CHECK(pool.pool_id() == msg.pool_id);
      if (emu().pool_count) CHILD_CHECK(emu().pool_count() == pools + 1);
      for (int i = 0; i < opens; ++i) opened.push_back(cuarrow::open_ipc(pool, handle));
      // Legacy opening of a pool handle is refused, saying what to do.
      std::string m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::open_ipc(ctx, handle); });
      CHILD_CHECK(contains(m, "import_pool"));
    }  // the imported_pool object goes: the buffers keep the pool
    cuarrow::buffer& b = opened.front();
    for (auto& o : opened) CHILD_CHECK(o.address() == b.address());  // one import
    if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == mappings + 1);
    if (emu().pool_count) CHILD_CHECK(emu().pool_count() == pools + 1);
    CHILD_CHECK(b.type() == cuarrow::device_type::cuda);
    CHILD_CHECK(b.device_id() == device);  // the importing context's, whatever the pool's device
    CHILD_CHECK(b.get_context() && *b.get_context() == ctx);
    CHILD_CHECK(b.size() == handle.size());
    CHILD_CHECK(b.is_mutable());
    CHILD_CHECK(to_vector(b) == pattern(static_cast<std::size_t>(b.size()), seed));
    CHILD_CHECK(ctx.bytes_allocated() == allocated);  // imported memory is not allocated here
    // Memory opened here can be handed on: the same allocation, this offset.
    cuarrow::ipc_memory_handle again = cuarrow::export_ipc(b.slice(1));
    CHILD_CHECK(again.kind() == cuarrow::ipc_handle_kind::pool);
    CHILD_CHECK(again.driver_handle() == handle.driver_handle());
    CHILD_CHECK(again.pool_id() == handle.pool_id());
    CHILD_CHECK(again.offset() == handle.offset() + 1);
    CHILD_CHECK(again.size() == handle.size() - 1);
    CHILD_CHECK(again.serialize().size() == cuarrow::ipc_memory_handle::pool_serialized_size);
    auto next = pattern(static_cast<std::size_t>(b.size()), seed + 1);
    cuarrow::copy_from_host(opened.back(), 0, next.data(), b.size());
    opened.pop_back();
  }
  // Freed with the last buffer, and the imported pool destroyed with it.
  if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == mappings);
  if (emu().pool_count) CHILD_CHECK(emu().pool_count() == pools);
  std::printf("CHILD OK\n");
  return 0;
}

// pool_open_refused <socket> <handle of another pool> <damaged handle>
// <handle past the allocation>: each is refused with a typed error, and
// nothing stays imported.
CUARROW_CHILD_MODE(pool_open_refused) {
  CHILD_CHECK(argc == 4);
  received msg = receive_pool(std::atoi(argv[0]));
  CHILD_CHECK(msg.fd >= 0);
  cuarrow::context ctx = cuarrow::context::get(0);
  {
    cuarrow::imported_pool pool = cuarrow::import_pool(ctx, msg.fd, msg.pool_id);
    cuarrow::imported_pool anonymous = cuarrow::import_pool(ctx, msg.fd);  // without the pool's id
    close(msg.fd);
    CHILD_CHECK(anonymous.pool_id() == 0);
    if (emu().pool_count) CHILD_CHECK(emu().pool_count() == 2);
    auto other = cuarrow::ipc_memory_handle::deserialize(from_hex(argv[1]));
    std::string m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::open_ipc(pool, other); });
    std::printf("OTHER POOL: %s\n", m.c_str());
    CHILD_CHECK(contains(m, "is memory of pool"));
    // Without the pool's id, the driver itself refuses another pool's data
    // (the emulation checks it; what the real driver does with the opaque
    // export data of another pool or damaged data is not documented, so
    // those two are asked of the emulation only).
    if (emu().available()) {
      try {
        (void)cuarrow::open_ipc(anonymous, other);
        CHILD_CHECK(false);
      } catch (const cuarrow::cuda_error& e) {
        std::printf("OTHER POOL, NO ID: %s\n", e.what());
        CHILD_CHECK(e.code() == CUDA_ERROR_INVALID_VALUE);
      }
    }
    auto damaged = cuarrow::ipc_memory_handle::deserialize(from_hex(argv[2]));
    if (emu().available()) {
      try {
        (void)cuarrow::open_ipc(pool, damaged);
        CHILD_CHECK(false);
      } catch (const cuarrow::cuda_error& e) {
        std::printf("DAMAGED: %s\n", e.what());
        CHILD_CHECK(e.code() == CUDA_ERROR_INVALID_VALUE);
        CHILD_CHECK(contains(e.what(), "cuMemPoolImportPointer"));
      }
    }
    auto past = cuarrow::ipc_memory_handle::deserialize(from_hex(argv[3]));
    m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::open_ipc(pool, past); });
    std::printf("PAST: %s\n", m.c_str());
    CHILD_CHECK(contains(m, "runs past the exported allocation"));
  }
  if (emu().ipc_mapping_count) CHILD_CHECK(emu().ipc_mapping_count() == 0);
  if (emu().pool_count) CHILD_CHECK(emu().pool_count() == 0);
  std::printf("CHILD OK\n");
  return 0;
}

// ---------------------------------------------------------------------------
// In this process

TEST(PoolIpc, ResourceAllocatesInStreamOrderFromAPoolOfItsOwn) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::size_t pools = emu().pool_count ? emu().pool_count() : 0;
  {
    auto pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
    EXPECT_EQ(pool->name(), "cuda_ipc_pool");
    EXPECT_NE(pool->pool_id(), 0u);
    EXPECT_EQ(pool->device_id(), 0);
    EXPECT_NE(pool->native_handle(), nullptr);
    if (emu().pool_count) {
      EXPECT_EQ(emu().pool_count(), pools + 1);
    }
    cuarrow::stream s(ctx);
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 100000, s, pool);
    cuarrow::copy_from_host(b, 0, pattern(100000, 4).data(), b.size(), s);
    s.synchronize();
    EXPECT_EQ(to_vector(b), pattern(100000, 4));
    pool->trim(0);
    cuarrow::ipc_pool_resource other(ctx);
    EXPECT_NE(other.pool_id(), pool->pool_id());
  }
  ctx.synchronize();
  // Destroyed with its last buffer.
  if (emu().pool_count) {
    EXPECT_EQ(emu().pool_count(), pools);
  }
}

TEST(PoolIpc, HandlesAreWireFormatVersion2AndDamageIsRefused) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  auto pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  cuarrow::buffer b = pool_buffer(ctx, pool, pattern(5000, 1));
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b.slice(300, 1000));
  EXPECT_EQ(h.kind(), cuarrow::ipc_handle_kind::pool);
  EXPECT_STREQ(cuarrow::to_string(h.kind()), "pool");
  EXPECT_STREQ(cuarrow::to_string(cuarrow::ipc_handle_kind::legacy), "legacy");
  EXPECT_EQ(h.pool_id(), pool->pool_id());
  EXPECT_EQ(h.offset(), 300);
  EXPECT_EQ(h.size(), 1000);
  EXPECT_EQ(h.device_id(), 0);
  EXPECT_TRUE(contains(h.describe(), ", pool=0x")) << h.describe();
  const std::vector<std::byte> wire = h.serialize();
  ASSERT_EQ(wire.size(), cuarrow::ipc_memory_handle::pool_serialized_size);
  EXPECT_EQ(wire[8], std::byte{2});
  auto back = cuarrow::ipc_memory_handle::deserialize(wire);
  EXPECT_EQ(back.kind(), cuarrow::ipc_handle_kind::pool);
  EXPECT_EQ(back.pool_id(), h.pool_id());
  EXPECT_EQ(back.driver_handle(), h.driver_handle());
  EXPECT_EQ(back.offset(), 300);
  EXPECT_EQ(back.size(), 1000);
  EXPECT_EQ(back.exporter_token(), h.exporter_token());
  EXPECT_EQ(back.serialize(), wire);
  for (std::size_t at = 12; at < wire.size(); at += 7) {  // any damaged byte
    std::vector<std::byte> damaged = wire;
    damaged[at] ^= std::byte{0x04};
    std::string m =
        expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::ipc_memory_handle::deserialize(damaged); });
    EXPECT_TRUE(contains(m, "checksum")) << at << ": " << m;
  }
  std::vector<std::byte> cut(wire.begin(), wire.end() - 8);
  EXPECT_TRUE(
      contains(expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::ipc_memory_handle::deserialize(cut); }),
               "version 2 is 120 bytes long (it was cut short)"));
  // Legacy handles keep version 1.
  cuarrow::buffer plain = cuarrow::allocate_device(ctx, 64, {}, std::make_shared<cuarrow::plain_device_resource>());
  auto legacy = cuarrow::export_ipc(plain);
  EXPECT_EQ(legacy.kind(), cuarrow::ipc_handle_kind::legacy);
  EXPECT_EQ(legacy.serialize().size(), cuarrow::ipc_memory_handle::serialized_size);
  // Empty buffers give the one empty handle.
  auto empty = cuarrow::export_ipc(b.slice(0, 0));
  EXPECT_EQ(empty.kind(), cuarrow::ipc_handle_kind::legacy);
  EXPECT_EQ(empty.size(), 0);
}

TEST(PoolIpc, HandleKeepsTheExportedMemoryAlive) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  auto pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  const std::int64_t before = ctx.bytes_allocated();
  std::optional<cuarrow::ipc_memory_handle> h;
  {
    cuarrow::buffer b = pool_buffer(ctx, pool, pattern(4096, 2));
    h = cuarrow::export_ipc(b.slice(10, 100));
  }
  EXPECT_EQ(ctx.bytes_allocated(), before + 4096) << "the handle holds the buffer";
  h.reset();
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), before);
}

TEST(PoolIpc, MismatchedHandlesAndDescriptorsAreTypedErrors) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  // Not descriptors of a shareable pool.
  std::string m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::import_pool(ctx, -1); });
  EXPECT_TRUE(contains(m, "not a file descriptor")) << m;
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  try {
    (void)cuarrow::import_pool(ctx, fds[0]);
    ADD_FAILURE() << "a pipe imported as a pool";
  } catch (const cuarrow::cuda_error& e) {
    // The driver's answer is its own: CUDA_ERROR_INVALID_VALUE on the
    // emulation, CUDA_ERROR_UNKNOWN on the H200's driver (580).
    EXPECT_NE(e.code(), 0);
    EXPECT_TRUE(contains(e.what(), "export_pool")) << e.what();
  }
  close(fds[0]);
  close(fds[1]);
  // The device's default pool's memory is still refused, saying what to do.
  {
    cuarrow::buffer pooled =
        cuarrow::allocate_device(ctx, 256, {}, std::make_shared<cuarrow::async_pool_resource>(ctx));
    m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_ipc(pooled); });
    EXPECT_TRUE(contains(m, "ipc_pool_resource")) << m;
  }
  // export_pool gives an owned, close-on-exec descriptor, a new one per call.
  cuarrow::ipc_pool_resource pool(ctx);
  cuarrow::shareable_pool a = cuarrow::export_pool(pool);
  cuarrow::shareable_pool b = cuarrow::export_pool(pool);
  ASSERT_GE(a.fd(), 0);
  EXPECT_NE(a.fd(), b.fd());
  EXPECT_EQ(a.pool_id(), pool.pool_id());
  EXPECT_EQ(a.device_id(), 0);
  EXPECT_NE(fcntl(a.fd(), F_GETFD) & FD_CLOEXEC, 0);
  const int fd = a.fd();
  cuarrow::shareable_pool moved = std::move(a);
  EXPECT_EQ(a.fd(), -1);
  EXPECT_EQ(moved.fd(), fd);
  { cuarrow::shareable_pool gone = std::move(moved); }
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "closed with its owner";
  const int kept = b.release();
  EXPECT_EQ(b.fd(), -1);
  EXPECT_NE(fcntl(kept, F_GETFD), -1);
  close(kept);
}

// ---------------------------------------------------------------------------
// Across processes

namespace {

// Exports a slice of pool memory (at an offset, after another allocation),
// sends the pool's descriptor and the handle to a child that opens it
// `opens` times, and checks the child's writes landed in the slice only.
// `drop_buffer`: the exporter lets its buffer go before the child runs (the
// handle keeps the memory).  `default_resource`: the memory is the
// context's default resource's (the process-wide IPC pool), whose pool the
// exporter finds from the handle (export_pool(handle)); otherwise a pool
// resource of its own, exported with export_pool(resource).
void exchange_slice(int opens, bool drop_buffer, int child_device = 0, bool default_resource = false) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto own = default_resource ? nullptr : std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  std::shared_ptr<cuarrow::device_memory_resource> pool = own;
  if (default_resource) pool = ctx.memory_resource();
  cuarrow::buffer pad = pool_buffer(ctx, pool, pattern(1000, 1));
  std::optional<cuarrow::buffer> whole = pool_buffer(ctx, pool, pattern(300000, 2));
  const std::int64_t offset = 4097, length = 100000;
  cuarrow::buffer slice = whole->slice(offset, length);
  auto src = pattern(static_cast<std::size_t>(length), 40);
  cuarrow::copy_from_host(slice, 0, src.data(), length);
  std::optional<cuarrow::ipc_memory_handle> h = cuarrow::export_ipc(slice);
  const std::int64_t allocated = ctx.bytes_allocated();
  if (drop_buffer) {
    whole.reset();
    slice = cuarrow::buffer();
  }
  EXPECT_EQ(ctx.bytes_allocated(), allocated) << "the handle keeps the exported memory";
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  {
    cuarrow::shareable_pool shared = default_resource ? cuarrow::export_pool(*h) : cuarrow::export_pool(*own);
    EXPECT_EQ(shared.pool_id(), h->pool_id());
    ASSERT_TRUE(send_fd(sp.parent, shared.fd(), pool_message(shared.pool_id(), h->serialize())));
  }  // sent: our descriptor may go
  child_result r =
      run_self("pool_open", {std::to_string(sp.child), "40", std::to_string(opens), std::to_string(child_device)});
  EXPECT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "CHILD OK")) << r.output;
  if (!drop_buffer) {
    EXPECT_EQ(to_vector(slice), pattern(static_cast<std::size_t>(length), 41)) << "the child's writes are seen here";
    auto all = to_vector(*whole);
    auto before = pattern(300000, 2);
    EXPECT_TRUE(std::equal(all.begin(), all.begin() + offset, before.begin())) << "nothing before the slice changed";
    EXPECT_TRUE(std::equal(all.begin() + offset + length, all.end(), before.begin() + offset + length))
        << "nothing after it changed";
  }
  // The importer is done: the exporter may let the memory go.
  h.reset();
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), allocated - (drop_buffer ? 300000 : 0));
}

}  // namespace

TEST(PoolIpc, SliceOpensInAnotherProcessThroughScmRights) {
  REQUIRE_SHAREABLE_POOLS();
  exchange_slice(1, false);
}

TEST(PoolIpc, OpeningTwiceInOneProcessImportsOnce) {
  REQUIRE_SHAREABLE_POOLS();
  exchange_slice(3, false);
}

TEST(PoolIpc, PoolOfDevice0OpensOnDevice1OfAnotherProcess) {
  REQUIRE_SHAREABLE_POOLS();
  CUARROW_REQUIRE_DEVICES(2);
  exchange_slice(1, false, 1);
}

TEST(PoolIpc, ExporterMayDropItsBufferWhileTheHandleLives) {
  REQUIRE_SHAREABLE_POOLS();
  exchange_slice(1, true);
}

TEST(PoolIpc, DefaultResourceMemoryOpensInAnotherProcessWithThePoolOfItsHandle) {
  REQUIRE_SHAREABLE_POOLS();
  ASSERT_EQ(cuarrow::context::get(0).memory_resource()->name(), "cuda_ipc_pool");
  exchange_slice(1, false, 0, true);
}

TEST(PoolIpc, ExportPoolOfAHandleRefusesWhatHasNoPoolOfThisProcess) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  std::string m =
      expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_pool(cuarrow::ipc_memory_handle()); });
  EXPECT_TRUE(contains(m, "empty buffer")) << m;
  cuarrow::buffer plain = cuarrow::allocate_device(ctx, 64, {}, std::make_shared<cuarrow::plain_device_resource>());
  m = expect_error<cuarrow::invalid_argument>([&] { (void)cuarrow::export_pool(cuarrow::export_ipc(plain)); });
  EXPECT_TRUE(contains(m, "legacy (cuMemAlloc) handle")) << m;
  // A handle whose pool is gone: its pool resource destroyed with its last buffer.
  std::vector<std::byte> wire;
  {
    auto pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
    cuarrow::buffer b = pool_buffer(ctx, pool, pattern(64, 3));
    wire = cuarrow::export_ipc(b).serialize();
    EXPECT_GE(cuarrow::export_pool(cuarrow::ipc_memory_handle::deserialize(wire)).fd(), 0)
        << "a deserialized handle of this process finds its live pool";
  }
  ctx.synchronize();
  m = expect_error<cuarrow::invalid_argument>(
      [&] { (void)cuarrow::export_pool(cuarrow::ipc_memory_handle::deserialize(wire)); });
  EXPECT_TRUE(contains(m, "is gone")) << m;
}

TEST(PoolIpc, ForgedAndDamagedHandlesAreRefusedByTheImporter) {
  REQUIRE_SHAREABLE_POOLS();
  cuarrow::context ctx = cuarrow::context::get(0);
  auto pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  auto other_pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  cuarrow::buffer b = pool_buffer(ctx, pool, pattern(4096, 3));
  cuarrow::buffer o = pool_buffer(ctx, other_pool, pattern(4096, 3));
  const std::vector<std::byte> other = cuarrow::export_ipc(o).serialize();
  std::vector<std::byte> damaged = cuarrow::export_ipc(b).serialize();
  damaged[48 + 20] ^= std::byte{0x01};  // inside the driver's export data
  reseal_v2(damaged);
  std::vector<std::byte> past = cuarrow::export_ipc(b.slice(100)).serialize();
  const std::int64_t far = 4000;  // offset 4000 + 3996 bytes runs past the 4096-byte allocation
  for (int i = 0; i < 8; ++i) past[16 + i] = static_cast<std::byte>((far >> (8 * i)) & 0xff);
  reseal_v2(past);
  socket_pair sp;
  ASSERT_GE(sp.parent, 0);
  cuarrow::shareable_pool shared = cuarrow::export_pool(*pool);
  ASSERT_TRUE(send_fd(sp.parent, shared.fd(), pool_message(shared.pool_id(), {std::byte{0}})));
  child_result r =
      run_self("pool_open_refused", {std::to_string(sp.child), to_hex(other), to_hex(damaged), to_hex(past)});
  EXPECT_TRUE(r.ok()) << r.output;
  EXPECT_TRUE(contains(r.output, "CHILD OK")) << r.output;
}
