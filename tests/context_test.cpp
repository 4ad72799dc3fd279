#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using namespace cuarrow_test;

// Contexts come from context::get and context::wrap only.
static_assert(!std::is_constructible_v<cuarrow::context, std::shared_ptr<cuarrow::detail::context_state>>);

TEST(Devices, CountMatchesTheDriver) {
  int n = cuarrow::device_count();
  if (cuarrow::driver_is_emulated()) {
    const char* env = std::getenv("CUARROW_EMULATED_DEVICES");
    EXPECT_EQ(n, env ? std::atoi(env) : 1);
  } else {
    EXPECT_GE(n, 1);
  }
}

TEST(Devices, Properties) {
  for (int i = 0; i < cuarrow::device_count(); ++i) {
    cuarrow::device_properties p = cuarrow::get_device_properties(i);
    EXPECT_EQ(p.ordinal, i);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, 0);
    EXPECT_GE(p.compute_capability_major, 5);
    EXPECT_TRUE(
        std::regex_match(p.pci_bus_id, std::regex("[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\\.[0-9A-Fa-f]")))
        << p.pci_bus_id;
    EXPECT_TRUE(p.unified_addressing);
  }
  if (cuarrow::device_count() >= 2) {
    EXPECT_NE(cuarrow::get_device_properties(0).pci_bus_id, cuarrow::get_device_properties(1).pci_bus_id);
  }
}

TEST(Devices, BadOrdinalIsAClearError) {
  const int n = cuarrow::device_count();
  for (int bad : {-1, n, 99}) {
    try {
      (void)cuarrow::context::get(bad);
      FAIL() << "context::get(" << bad << ") succeeded";
    } catch (const cuarrow::invalid_argument& e) {
      std::string expected = "Invalid CUDA device number " + std::to_string(bad) + " (should be between 0 and " +
                             std::to_string(n - 1) + ", inclusive)";
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  EXPECT_THROW(cuarrow::get_device_properties(n), cuarrow::invalid_argument);
}

TEST(Context, PrimaryContextIsSharedAndRetainedOnce) {
  cuarrow::context a = cuarrow::context::get(0);
  std::vector<cuarrow::context> many;
  for (int i = 0; i < 50; ++i) many.push_back(cuarrow::context::get(0));
  for (const auto& c : many) EXPECT_EQ(c.handle(), a.handle());
  EXPECT_TRUE(a.is_primary());
  EXPECT_EQ(a.device_number(), 0);
  CUARROW_REQUIRE_EMULATION();
  EXPECT_EQ(emu().primary_ctx_retain_count(0), 1);
}

TEST(Context, ShutdownReleasesTheRetainAndLaterUseRetainsAgain) {
  CUARROW_REQUIRE_EMULATION();
  {
    cuarrow::context c = cuarrow::context::get(0);
    cuarrow::buffer b = cuarrow::allocate_device(c, 256);
    cuarrow::shutdown();
    // Still referenced by c and b: not released yet.
    EXPECT_EQ(emu().primary_ctx_retain_count(0), 1);
  }
  EXPECT_EQ(emu().primary_ctx_retain_count(0), 0);
  cuarrow::context again = cuarrow::context::get(0);
  EXPECT_EQ(emu().primary_ctx_retain_count(0), 1);
  cuarrow::buffer b = cuarrow::copy_to_device(again, "abc", 3);
  EXPECT_EQ(to_vector(b), (std::vector<std::uint8_t>{'a', 'b', 'c'}));
}

TEST(Context, WrapKeepsTheDeviceNumber) {
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    cuarrow::context primary = cuarrow::context::get(d);
    cuarrow::context wrapped = cuarrow::context::wrap(primary.handle());
    EXPECT_EQ(wrapped.device_number(), d);
    EXPECT_EQ(wrapped.handle(), primary.handle());
    EXPECT_TRUE(wrapped.is_primary());
    // The same state: allocations through one show in the other.
    std::int64_t before = primary.bytes_allocated();
    cuarrow::buffer b = cuarrow::allocate_device(wrapped, 1000);
    EXPECT_EQ(primary.bytes_allocated(), before + 1000);
    EXPECT_EQ(b.device_id(), d);
  }
  EXPECT_THROW(cuarrow::context::wrap(nullptr), cuarrow::invalid_argument);
}

TEST(Context, BytesAllocatedCountsAllResourcesAndReturnsToBaseline) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t base = ctx.bytes_allocated();
  {
    cuarrow::buffer a = cuarrow::allocate_device(ctx, 4096);
    auto plain = std::make_shared<cuarrow::plain_device_resource>(ctx);
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 1 << 20, {}, plain);
    EXPECT_EQ(ctx.bytes_allocated(), base + 4096 + (1 << 20));
    cuarrow::buffer s = a.slice(100, 100);  // slices allocate nothing
    EXPECT_EQ(ctx.bytes_allocated(), base + 4096 + (1 << 20));
  }
  EXPECT_EQ(ctx.bytes_allocated(), base);
}

TEST(Context, OneSharedPlainResourceForEveryContext) {
  const std::shared_ptr<cuarrow::device_memory_resource>& plain = cuarrow::plain_device_resource::shared();
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain.get(), cuarrow::plain_device_resource::shared().get());
  EXPECT_EQ(plain->name(), "cuda_malloc");
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    cuarrow::context ctx = cuarrow::context::get(d);
    const std::int64_t base = ctx.bytes_allocated();
    {
      cuarrow::buffer b = cuarrow::allocate_device(ctx, 4096, {}, plain);
      EXPECT_EQ(b.device_id(), d);
      EXPECT_EQ(ctx.bytes_allocated(), base + 4096);
      EXPECT_NO_THROW((void)cuarrow::export_ipc(b)) << "cuMemAlloc memory is what CUDA IPC exports";
    }
    EXPECT_EQ(ctx.bytes_allocated(), base);
  }
}

TEST(Context, DeviceAddressOfPinnedMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 4096);
  std::uintptr_t dev = ctx.get_device_address(pinned.host_data());
  EXPECT_NE(dev, 0u);
  // With unified addressing the device address of pinned memory is its host address.
  EXPECT_EQ(dev, pinned.address());
  EXPECT_EQ(ctx.get_device_address(pinned.host_data() + 100), pinned.address() + 100);
  std::vector<char> pageable(64);
  EXPECT_THROW((void)ctx.get_device_address(pageable.data()), cuarrow::cuda_error);
}

TEST(Context, SynchronizeAndFreeMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  EXPECT_NO_THROW(ctx.synchronize());
  EXPECT_GT(ctx.free_memory(), 0);
  EXPECT_LE(ctx.free_memory(), ctx.properties().total_memory);
}

TEST(Context, ScopedContextRestoresTheCallersContext) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  cuarrow::scoped_context outer(c0);
  {
    cuarrow::scoped_context inner(c1);
    cuarrow::buffer b = cuarrow::allocate_device(c0, 64);  // pushes and pops c0 inside
    EXPECT_EQ(b.device_id(), 0);
  }
  // c0 is current again: a legacy-stream copy for device 0 memory needs no push.
  cuarrow::buffer b = cuarrow::copy_to_device(c0, "xy", 2);
  EXPECT_EQ(to_vector(b).size(), 2u);
}

TEST(Context, ManyThreadsGetTheSameContext) {
  std::vector<std::thread> threads;
  std::vector<CUcontext> handles(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { handles[i] = cuarrow::context::get(0).handle(); });
  }
  for (auto& t : threads) t.join();
  for (CUcontext h : handles) EXPECT_EQ(h, handles[0]);
}
