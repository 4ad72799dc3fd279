// Tests only a real GPU can answer: memory allocated by another library
// (through the real driver, behind cuarrow's back), real asynchrony, and
// figures the emulation would fake (printed, not asserted: speed is the
// benchmark's business).  Run by scripts/gpu-suite.sh on the GPU machine; on
// a machine without a GPU every test skips, saying so.
#include <gtest/gtest.h>

#include <cuarrow/cuarrow.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

bool have_gpu() {
  try {
    return !cuarrow::driver_is_emulated() && (cuarrow::load_driver(), !cuarrow::driver_is_emulated()) &&
           cuarrow::device_count() > 0;
  } catch (const cuarrow::error&) {
    return false;
  }
}

#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    if (!have_gpu()) GTEST_SKIP() << "needs a real CUDA GPU and driver (none found here)"; \
  } while (0)

// The real driver, reached directly as another library (CuPy, PyTorch) would.
struct raw_driver {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  template <class F>
  F get(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib, name));
  }
};

}  // namespace

TEST(Gpu, PrimaryContextIsTheOneOtherLibrariesUse) {
  REQUIRE_GPU();
  raw_driver raw;
  auto retain = raw.get<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain");
  auto release = raw.get<PFN_cuDevicePrimaryCtxRelease_v11000>("cuDevicePrimaryCtxRelease_v2");
  ASSERT_TRUE(retain && release);
  CUcontext theirs = nullptr;
  ASSERT_EQ(retain(&theirs, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuarrow::context::get(0).handle(), theirs);
  EXPECT_EQ(cuarrow::context::wrap(theirs).device_number(), 0);
  release(0);
}

TEST(Gpu, PointerAttributesOfForeignAllocations) {
  REQUIRE_GPU();
  raw_driver raw;
  auto alloc = raw.get<PFN_cuMemAlloc_v3020>("cuMemAlloc_v2");
  auto free_ = raw.get<PFN_cuMemFree_v3020>("cuMemFree_v2");
  auto host_alloc = raw.get<PFN_cuMemHostAlloc_v2020>("cuMemHostAlloc");
  auto host_free = raw.get<PFN_cuMemFreeHost_v2000>("cuMemFreeHost");
  auto reg = raw.get<PFN_cuMemHostRegister_v6050>("cuMemHostRegister_v2");
  auto unreg = raw.get<PFN_cuMemHostUnregister_v4000>("cuMemHostUnregister");
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::scoped_context guard(ctx);

  CUdeviceptr dptr = 0;
  ASSERT_EQ(alloc(&dptr, 1 << 20), CUDA_SUCCESS);
  cuarrow::buffer dev = cuarrow::wrap_device(ctx, dptr, 1 << 20, nullptr);
  EXPECT_EQ(dev.type(), cuarrow::device_type::cuda);
  std::vector<std::uint8_t> src(1 << 20, 0x3c), back(1 << 20);
  cuarrow::copy_from_host(dev, 0, src.data(), 1 << 20);
  cuarrow::copy_to_host(back.data(), dev, 0, 1 << 20);
  EXPECT_EQ(back, src);
  dev = cuarrow::buffer();
  free_(dptr);

  void* pinned = nullptr;
  ASSERT_EQ(host_alloc(&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  EXPECT_EQ(cuarrow::wrap_device(ctx, reinterpret_cast<std::uintptr_t>(pinned), 4096, nullptr).type(),
            cuarrow::device_type::cuda_host);
  EXPECT_EQ(ctx.get_device_address(pinned), reinterpret_cast<std::uintptr_t>(pinned));
  host_free(pinned);

  std::vector<std::uint8_t> page_locked(1 << 16);
  ASSERT_EQ(reg(page_locked.data(), page_locked.size(), CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  EXPECT_NE(ctx.get_device_address(page_locked.data()), 0u);
  unreg(page_locked.data());
  std::vector<char> pageable(64);
  EXPECT_THROW((void)ctx.get_device_address(pageable.data()), cuarrow::cuda_error);
}

TEST(Gpu, AsyncCopiesReturnBeforeTheyFinish) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 1ll << 30;
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  std::memset(pinned.mutable_host_data(), 1, n);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, n, s);
  cuarrow::event start(ctx, CU_EVENT_DEFAULT), stop(ctx, CU_EVENT_DEFAULT);
  s.synchronize();
  start.record(s);
  cuarrow::copy_async(dev, 0, pinned, 0, n, s);
  stop.record(s);
  EXPECT_FALSE(s.query()) << "a 1 GiB copy finished before copy_async returned";
  s.synchronize();
  float ms = stop.elapsed_ms_since(start);
  std::printf("[figure] 1 GiB H2D from pinned memory on a stream: %.2f ms = %.1f GB/s\n", ms, n / (ms * 1e6));
  EXPECT_GT(ms, 0.0f);
}

TEST(Gpu, CopiesInBothDirectionsOverlapOnTwoStreams) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 512ll << 20;
  cuarrow::stream up(ctx), down(ctx);
  cuarrow::buffer h1 = cuarrow::allocate_pinned(ctx, n), h2 = cuarrow::allocate_pinned(ctx, n);
  cuarrow::buffer d1 = cuarrow::allocate_device(ctx, n), d2 = cuarrow::allocate_device(ctx, n);
  std::memset(h1.mutable_host_data(), 5, n);
  cuarrow::copy(d2, 0, h1, 0, n);
  auto time = [&](auto&& f) {
    ctx.synchronize();
    auto t0 = std::chrono::steady_clock::now();
    f();
    ctx.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double serial = time([&] {
    cuarrow::copy_async(d1, 0, h1, 0, n, up);
    up.synchronize();
    cuarrow::copy_async(h2, 0, d2, 0, n, down);
  });
  double overlapped = time([&] {
    cuarrow::copy_async(d1, 0, h1, 0, n, up);
    cuarrow::copy_async(h2, 0, d2, 0, n, down);
  });
  std::printf("[figure] 512 MiB up + 512 MiB down: serial %.2f ms, on two streams %.2f ms (%.2fx)\n",
              serial * 1e3, overlapped * 1e3, serial / overlapped);
  EXPECT_EQ(h2.host_data()[n - 1], std::byte{5});
}

TEST(Gpu, DefaultPoolIsUsedAndCachesMemory) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  EXPECT_TRUE(ctx.properties().memory_pools_supported);
  EXPECT_EQ(ctx.memory_resource()->name(), "cuda_async_pool");
  cuarrow::stream s(ctx);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 1 << 20, s);
  }
  s.synchronize();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
  std::printf("[figure] allocate + free 1 MiB from the pool on a stream: %.2f us per pair\n", us);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (have_gpu()) {
    auto p = cuarrow::get_device_properties(0);
    std::printf("[cuarrow] GPU 0: %s, driver %d, %s\n", p.name.c_str(), cuarrow::driver_version(),
                cuarrow::driver_path().c_str());
  }
  return RUN_ALL_TESTS();
}
