// Tests only a real GPU can answer: memory allocated by another library
// (through the real driver, behind cuarrow's back), real asynchrony, CUDA
// IPC between processes, and
// figures the emulation would fake (printed, not asserted: speed is the
// benchmark's business).  Run by scripts/gpu-suite.sh on the GPU machine; on
// a machine without a GPU every test skips, saying so.
#include <gtest/gtest.h>

#include <cuarrow/cuarrow.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../child_process.hpp"

namespace {

bool have_gpu() {
  try {
    return !cuarrow::driver_is_emulated() && (cuarrow::load_driver(), !cuarrow::driver_is_emulated()) &&
           cuarrow::device_count() > 0;
  } catch (const cuarrow::error&) {
    return false;
  }
}

#define REQUIRE_GPU()                                                                      \
  do {                                                                                     \
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
  // Mapped for the device at its host address though registered without
  // CU_MEMHOSTREGISTER_DEVICEMAP, as the emulation plays it: the gather
  // kernel writes small reads into such memory (copy.cpp asks this very
  // attribute before it does).
  EXPECT_EQ(ctx.get_device_address(page_locked.data()), reinterpret_cast<std::uintptr_t>(page_locked.data()));
  unreg(page_locked.data());
  std::vector<char> pageable(64);
  EXPECT_THROW((void)ctx.get_device_address(pageable.data()), cuarrow::cuda_error);
}

// Memory mapped by another library through the VMM API (as PyTorch's
// expandable segments map theirs): the driver states the whole reservation
// as one range however little of it is mapped, so the span check walks
// the mappings.  A view over mapped granules, one cuMemMap each, is taken
// and read; a view running into the reservation's unmapped part, or
// starting there, is refused before anything reads it (a read would
// fault and spoil the context).
TEST(Gpu, ViewsOfVmmMemoryStopWhereItsMappingsEnd) {
  REQUIRE_GPU();
  raw_driver raw;
  auto granularity = raw.get<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
  auto create = raw.get<PFN_cuMemCreate_v10020>("cuMemCreate");
  auto release = raw.get<PFN_cuMemRelease_v10020>("cuMemRelease");
  auto reserve = raw.get<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
  auto free_va = raw.get<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
  auto map = raw.get<PFN_cuMemMap_v10020>("cuMemMap");
  auto unmap = raw.get<PFN_cuMemUnmap_v10020>("cuMemUnmap");
  auto set_access = raw.get<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
  ASSERT_TRUE(granularity && create && release && reserve && free_va && map && unmap && set_access);
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::scoped_context guard(ctx);

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  std::size_t g = 0;
  ASSERT_EQ(granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(create(&handle, g, &prop, 0), CUDA_SUCCESS);
  constexpr int kMapped = 40;
  constexpr int kReserved = 48;
  CUdeviceptr base = 0;
  ASSERT_EQ(reserve(&base, kReserved * g, g, 0, 0), CUDA_SUCCESS);
  for (int i = 0; i < kMapped; ++i) ASSERT_EQ(map(base + i * g, g, 0, handle, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(set_access(base, kMapped * g, &access, 1), CUDA_SUCCESS);

  const auto n = static_cast<std::int64_t>(g);
  {
    cuarrow::buffer all = cuarrow::wrap_device(ctx, base + 100, kMapped * n - 100, nullptr);
    EXPECT_EQ(all.size(), kMapped * n - 100);
    std::uint8_t byte = 0x5a;
    cuarrow::copy_from_host(all, all.size() - 1, &byte, 1);
    byte = 0;
    cuarrow::copy_to_host(&byte, all, all.size() - 1, 1);
    EXPECT_EQ(byte, 0x5a);
  }
  try {
    (void)cuarrow::wrap_device(ctx, base, kMapped * n + 1, nullptr);
    ADD_FAILURE() << "a view one byte into the reservation's unmapped part was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("run past the memory the CUDA driver knows there"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(kMapped * n) + " bytes in"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)cuarrow::wrap_device(ctx, base + (kMapped + 2) * n, n, nullptr), cuarrow::invalid_argument)
      << "a view that starts in the reservation's unmapped part";
  // Still usable after the refusals.
  EXPECT_EQ(cuarrow::copy_to_device(ctx, "fine", 4).size(), 4);

  EXPECT_EQ(unmap(base, kMapped * g), CUDA_SUCCESS);
  EXPECT_EQ(free_va(base, kReserved * g), CUDA_SUCCESS);
  EXPECT_EQ(release(handle), CUDA_SUCCESS);
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
  std::printf("[figure] 512 MiB up + 512 MiB down: serial %.2f ms, on two streams %.2f ms (%.2fx)\n", serial * 1e3,
              overlapped * 1e3, serial / overlapped);
  EXPECT_EQ(h2.host_data()[n - 1], std::byte{5});
}

TEST(Gpu, DefaultPoolIsUsedAndCachesMemory) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  EXPECT_TRUE(ctx.properties().memory_pools_supported);
  EXPECT_EQ(ctx.memory_resource()->name(), "cuda_ipc_pool") << "the H200 has shareable pools";
  cuarrow::stream s(ctx);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 1 << 20, s);
  }
  s.synchronize();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
  std::printf("[figure] allocate + free 1 MiB from the pool on a stream: %.2f us per pair\n", us);
}

// ---------------------------------------------------------------------------
// CUDA IPC with the real driver: cuMemAlloc memory across processes (the
// binary runs itself again as the importer), and what the driver says about
// stream-ordered pool memory.

namespace {

std::vector<std::uint8_t> bytes_of(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<std::uint8_t>(rng());
  return v;
}

std::vector<std::uint8_t> read_back(const cuarrow::buffer& b) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(b.size()));
  cuarrow::copy_to_host(v.data(), b, 0, b.size());
  return v;
}

const char* result_name(int r) {
  raw_driver raw;
  auto name = raw.get<PFN_cuGetErrorName_v6000>("cuGetErrorName");
  const char* s = nullptr;
  if (name == nullptr || name(static_cast<CUresult>(r), &s) != CUDA_SUCCESS || s == nullptr) return "?";
  return s;
}

// Exports a slice at a non-zero offset of a cuMemAlloc allocation; a child
// opens it on `device` twice, checks it and writes it over.
void ipc_exchange(int device) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto plain = std::make_shared<cuarrow::plain_device_resource>();
  const std::int64_t total = (16 << 20) + 333, offset = (1 << 20) + 17, length = 1 << 20;
  cuarrow::buffer whole = cuarrow::allocate_device(ctx, total, {}, plain);
  auto background = bytes_of(static_cast<std::size_t>(total), 7);
  cuarrow::copy_from_host(whole, 0, background.data(), total);
  cuarrow::buffer slice = whole.slice(offset, length);
  auto inside = bytes_of(static_cast<std::size_t>(length), 40);
  cuarrow::copy_from_host(slice, 0, inside.data(), length);
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(slice);
  ASSERT_EQ(h.offset(), offset);
  ASSERT_EQ(h.size(), length);
  auto t0 = std::chrono::steady_clock::now();
  cuarrow_test::child_result r =
      cuarrow_test::run_self("gpu_ipc_open", {cuarrow_test::to_hex(h.serialize()), std::to_string(device), "40"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  std::printf("[figure] IPC: a child process opened a 1 MiB slice on GPU %d and wrote it over: %.0f ms in all\n",
              device, s * 1e3);
  EXPECT_EQ(read_back(slice), bytes_of(static_cast<std::size_t>(length), 41));
  auto expected = background;
  auto next = bytes_of(static_cast<std::size_t>(length), 41);
  std::copy(next.begin(), next.end(), expected.begin() + offset);
  EXPECT_TRUE(read_back(whole) == expected) << "bytes outside the slice changed";
}

}  // namespace

CUARROW_CHILD_MODE(gpu_ipc_open) {
  CHILD_CHECK(argc == 3);
  auto h = cuarrow::ipc_memory_handle::deserialize(cuarrow_test::from_hex(argv[0]));
  const int device = std::atoi(argv[1]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[2]));
  cuarrow::context ctx = cuarrow::context::get(device);
  cuarrow::buffer a = cuarrow::open_ipc(ctx, h);
  cuarrow::buffer b = cuarrow::open_ipc(ctx, h);  // the driver would once answer CUDA_ERROR_ALREADY_MAPPED
  CHILD_CHECK(a.address() == b.address());
  CHILD_CHECK(a.device_id() == device && a.size() == h.size());
  CHILD_CHECK(read_back(a) == bytes_of(static_cast<std::size_t>(a.size()), seed));
  auto next = bytes_of(static_cast<std::size_t>(a.size()), seed + 1);
  cuarrow::copy_from_host(b, 0, next.data(), b.size());
  ctx.synchronize();
  std::printf("CHILD OK\n");
  return 0;
}

TEST(Gpu, IpcSliceOfCuMemAllocOpensInAnotherProcess) {
  REQUIRE_GPU();
  ipc_exchange(0);
}

TEST(Gpu, IpcHandleOfGpu0OpensOnGpu1OfAnotherProcess) {
  REQUIRE_GPU();
  if (cuarrow::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << cuarrow::device_count();
  ipc_exchange(1);
}

TEST(Gpu, IpcExportOfPoolMemoryIsATypedError) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer pooled =
      cuarrow::allocate_device(ctx, 1 << 20, {}, std::make_shared<cuarrow::async_pool_resource>(ctx));
  ctx.synchronize();
  try {
    (void)cuarrow::export_ipc(pooled);
    ADD_FAILURE() << "pool memory was exported";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stream-ordered pool"), std::string::npos) << e.what();
  }
  // What the driver itself says, for the record (cuarrow refuses before asking).
  raw_driver raw;
  auto get_handle = raw.get<PFN_cuIpcGetMemHandle_v4010>("cuIpcGetMemHandle");
  auto attribute = raw.get<PFN_cuPointerGetAttribute_v4000>("cuPointerGetAttribute");
  ASSERT_TRUE(get_handle && attribute);
  cuarrow::scoped_context guard(ctx);
  CUipcMemHandle h{};
  CUresult r = get_handle(&h, static_cast<CUdeviceptr>(pooled.address()));
  unsigned int capable_pool = 7, capable_plain = 7;
  attribute(&capable_pool, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, static_cast<CUdeviceptr>(pooled.address()));
  cuarrow::buffer plain =
      cuarrow::allocate_device(ctx, 1 << 20, {}, std::make_shared<cuarrow::plain_device_resource>());
  attribute(&capable_plain, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, static_cast<CUdeviceptr>(plain.address()));
  std::printf(
      "[figure] IPC: cuIpcGetMemHandle on pool memory answers %s (%d); IS_LEGACY_CUDA_IPC_CAPABLE: pool %u, "
      "cuMemAlloc %u\n",
      result_name(r), static_cast<int>(r), capable_pool, capable_plain);
  EXPECT_NE(r, CUDA_SUCCESS);
  EXPECT_NO_THROW((void)cuarrow::export_ipc(plain));
}

// cuMemPoolExportPointer wants an allocation's start; what the driver's
// cuMemGetAddressRange answers for pool memory (the allocation, or the
// pool's range) decides whether it can be asked.  export_ipc takes the start
// from the ipc_pool_resource's own record, so slices of later allocations
// export too.
TEST(Gpu, PoolAllocationsExportFromTheirStart) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  std::shared_ptr<cuarrow::ipc_pool_resource> pool;
  try {
    pool = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  } catch (const cuarrow::cuda_error& e) {
    GTEST_SKIP() << "no shareable pools here: " << e.what();
  }
  cuarrow::buffer first = cuarrow::allocate_device(ctx, 1 << 20, {}, pool);
  cuarrow::buffer second = cuarrow::allocate_device(ctx, 3 << 20, {}, pool);
  ctx.synchronize();
  raw_driver raw;
  auto range = raw.get<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange_v2");
  ASSERT_TRUE(range);
  cuarrow::scoped_context guard(ctx);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(range(&base, &size, static_cast<CUdeviceptr>(second.address() + 100)), CUDA_SUCCESS);
  std::printf(
      "[figure] pool memory: cuMemGetAddressRange of an address in a 3 MiB allocation answers %s (offset %lld, "
      "%zu bytes)\n",
      base == static_cast<CUdeviceptr>(second.address()) && size == (3u << 20) ? "the allocation" : "another range",
      static_cast<long long>(static_cast<CUdeviceptr>(second.address()) - base), size);
  EXPECT_NO_THROW((void)cuarrow::export_ipc(second.slice(100, 1000)));
  EXPECT_NO_THROW((void)cuarrow::export_ipc(first));
}

// cuMemPoolExportPointer shares an allocation "from an already shared memory
// pool".  What the driver answers before the pool's first export decides
// whether ipc_pool_resource must share its pool when it is created (it
// does); the emulation answers CUDA_ERROR_INVALID_VALUE, as driver 580 did.
TEST(Gpu, PoolPointerExportBeforeAndAfterThePoolIsShared) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  raw_driver raw;
  auto create = raw.get<PFN_cuMemPoolCreate_v11020>("cuMemPoolCreate");
  auto destroy = raw.get<PFN_cuMemPoolDestroy_v11020>("cuMemPoolDestroy");
  auto alloc = raw.get<PFN_cuMemAllocFromPoolAsync_v11020>("cuMemAllocFromPoolAsync");
  auto free_async = raw.get<PFN_cuMemFreeAsync_v11020>("cuMemFreeAsync");
  auto export_pool = raw.get<PFN_cuMemPoolExportToShareableHandle_v11020>("cuMemPoolExportToShareableHandle");
  auto export_ptr = raw.get<PFN_cuMemPoolExportPointer_v11020>("cuMemPoolExportPointer");
  auto sync = raw.get<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize");
  ASSERT_TRUE(create && destroy && alloc && free_async && export_pool && export_ptr && sync);
  cuarrow::scoped_context guard(ctx);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  if (create(&pool, &props) != CUDA_SUCCESS) GTEST_SKIP() << "no shareable pools here";
  CUdeviceptr p = 0;
  ASSERT_EQ(alloc(&p, 1 << 20, pool, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(sync(), CUDA_SUCCESS);
  CUmemPoolPtrExportData data{};
  const CUresult before = export_ptr(&data, p);
  int fd = -1;
  ASSERT_EQ(export_pool(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  const CUresult after = export_ptr(&data, p);
  close(fd);
  const CUresult after_close = export_ptr(&data, p);
  std::printf(
      "[figure] cuMemPoolExportPointer of a shareable pool's allocation: before the pool's first export %d, "
      "after it %d, after its descriptor was closed %d\n",
      static_cast<int>(before), static_cast<int>(after), static_cast<int>(after_close));
  EXPECT_EQ(after, CUDA_SUCCESS);
  EXPECT_EQ(after_close, CUDA_SUCCESS);
  free_async(p, nullptr);
  sync();
  destroy(pool);
  // Through cuarrow: a new resource's memory exports with no export_pool.
  auto resource = std::make_shared<cuarrow::ipc_pool_resource>(ctx);
  cuarrow::buffer b = cuarrow::allocate_device(ctx, 4096, {}, resource);
  EXPECT_NO_THROW((void)cuarrow::export_ipc(b.slice(8, 64)));
}

TEST(Gpu, IpcOpenInTheExportingProcessIsAClearError) {
  REQUIRE_GPU();
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer b = cuarrow::allocate_device(ctx, 4096, {}, std::make_shared<cuarrow::plain_device_resource>());
  cuarrow::ipc_memory_handle h = cuarrow::export_ipc(b);
  // A pyarrow-format handle does not say who exported it: the driver answers.
  std::vector<std::byte> wire(72);
  std::int64_t size = 4096;
  std::memcpy(wire.data(), &size, 8);
  std::memcpy(wire.data() + 8, h.driver_handle().data(), 64);
  try {
    (void)cuarrow::open_ipc(ctx, cuarrow::ipc_memory_handle::deserialize(wire));
    ADD_FAILURE() << "the driver opened a handle in the process that exported it";
  } catch (const cuarrow::cuda_error& e) {
    std::printf("[figure] IPC: opening a handle in its own process: the driver answers %s\n", e.name().c_str());
    EXPECT_NE(std::string(e.what()).find("IPC handles are for other processes"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)cuarrow::open_ipc(ctx, h), cuarrow::invalid_argument);  // cuarrow's own format knows
}

int main(int argc, char** argv) {
  bool child = false;
  int child_rc = cuarrow_test::run_child_mode_if_asked(argc, argv, &child);
  if (child) return child_rc;
  ::testing::InitGoogleTest(&argc, argv);
  if (have_gpu()) {
    auto p = cuarrow::get_device_properties(0);
    std::printf("[cuarrow] GPU 0: %s, driver %d, %s\n", p.name.c_str(), cuarrow::driver_version(),
                cuarrow::driver_path().c_str());
  }
  return RUN_ALL_TESTS();
}
