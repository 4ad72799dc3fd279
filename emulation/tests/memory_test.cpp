// Device memory, pointer attributes, the memory pool, pinned and registered
// host memory.
#include <cstring>
#include <set>
#include <thread>

#include "support.hpp"

using namespace emu_test;

TEST_F(Emu, AllocAndFree) {
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 1000));
  EXPECT_NE(0u, p);
  EXPECT_EQ(0u, p % 256);
  EXPECT_EQ(1u, A.device_allocation_count(0));
  EXPECT_EQ(1000u, A.device_bytes_in_use(0));
  EXPECT_EQ(0u, A.device_allocation_count(1));
  CUdeviceptr q = 0;
  CU_ASSERT(A.cuMemAlloc(&q, 1));
  EXPECT_EQ(0u, q % 256);
  EXPECT_NE(p, q);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(p + 16));  // not the base
  CU_ASSERT(A.cuMemFree(p));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(p));  // double free
  CU_ASSERT(A.cuMemFree(q));
  EXPECT_EQ(0u, A.device_allocation_count(0));
  EXPECT_EQ(0u, A.device_bytes_in_use(0));
  // Like the real driver: zero bytes is an error, so is a null output.
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAlloc(&p, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAlloc(nullptr, 16));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(0));
  int on_stack = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(reinterpret_cast<CUdeviceptr>(&on_stack)));
}

TEST_F(Emu, AllocationsGoToTheCurrentContextsDevice) {
  CUdeviceptr p0 = 0, p1 = 0;
  CU_ASSERT(A.cuMemAlloc(&p0, 4096));
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CU_ASSERT(A.cuMemAlloc(&p1, 4096));
  int ordinal = -1;
  CU_ASSERT(A.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p1));
  EXPECT_EQ(1, ordinal);
  CU_ASSERT(A.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p0));
  EXPECT_EQ(0, ordinal);
  EXPECT_EQ(1u, A.device_allocation_count(1));
  // Any context may free it (the owner's work is waited for).
  CU_ASSERT(A.cuMemFree(p0));
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  CU_ASSERT(A.cuMemFree(p1));
}

using EmuDeathTest = Emu;

TEST_F(EmuDeathTest, DevicePointersAreNotHostDereferenceable) {
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 4096));
  write_device(p, pattern(4096, 1));
  // Host code reading device memory faults, as it would with a GPU.
  EXPECT_DEATH({ std::printf("%d\n", *reinterpret_cast<volatile int*>(p)); }, "");
  EXPECT_DEATH({ *reinterpret_cast<volatile char*>(p + 100) = 1; }, "");
  CU_ASSERT(A.cuMemFree(p));
}

TEST_F(Emu, OutOfMemoryThenRecovery) {
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAlloc(&p, kMemory + 1));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAlloc(&p, ~size_t{0}));
  std::vector<CUdeviceptr> chunks;
  const size_t chunk = 32 << 20;
  for (;;) {
    CUresult r = A.cuMemAlloc(&p, chunk);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
    ASSERT_EQ(CUDA_SUCCESS, r);
    chunks.push_back(p);
    ASSERT_LE(chunks.size(), kMemory / chunk);
  }
  EXPECT_EQ(kMemory / chunk, chunks.size());
  size_t free_mem = 1, total = 0;
  CU_ASSERT(A.cuMemGetInfo(&free_mem, &total));
  EXPECT_EQ(0u, free_mem);
  CUstream s = stream();
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAllocAsync(&p, 256, s));
  // The device stays usable: free one chunk, allocate again, copy.
  CU_ASSERT(A.cuMemFree(chunks.back()));
  chunks.pop_back();
  CU_ASSERT(A.cuMemAlloc(&p, 1 << 20));
  auto data = pattern(1 << 20, 7);
  write_device(p, data);
  EXPECT_EQ(data, read_device(p, data.size()));
  CU_ASSERT(A.cuMemFree(p));
  for (CUdeviceptr c : chunks) CU_ASSERT(A.cuMemFree(c));
  CU_ASSERT(A.cuMemGetInfo(&free_mem, &total));
  EXPECT_EQ(kMemory, free_mem);
  // Fragmentation: free space must be contiguous for one allocation.
  CUdeviceptr a = 0, b = 0, c = 0;
  CU_ASSERT(A.cuMemAlloc(&a, kMemory / 4));
  CU_ASSERT(A.cuMemAlloc(&b, kMemory / 2));
  CU_ASSERT(A.cuMemAlloc(&c, kMemory / 4));
  CU_ASSERT(A.cuMemFree(a));
  CU_ASSERT(A.cuMemFree(c));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAlloc(&p, kMemory / 2));
  CU_ASSERT(A.cuMemFree(b));
  CU_ASSERT(A.cuMemAlloc(&p, kMemory));  // coalesced again
  CU_ASSERT(A.cuMemFree(p));
}

TEST_F(Emu, GetAddressRangeFindsInteriorPointers) {
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 1000));
  CUdeviceptr base = 0;
  size_t size = 0;
  CU_ASSERT(A.cuMemGetAddressRange(&base, &size, p + 999));
  EXPECT_EQ(p, base);
  EXPECT_EQ(1000u, size);
  CU_ASSERT(A.cuMemGetAddressRange(nullptr, &size, p));
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, A.cuMemGetAddressRange(&base, &size, p + 1000));  // padding
  CU_ASSERT(A.cuMemFree(p));
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, A.cuMemGetAddressRange(&base, &size, p));
  int x = 0;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, A.cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(&x)));
}

// ---------------------------------------------------------------------------
// Pointer attributes

TEST_F(Emu, PointerAttributesOfDeviceMemory) {
  CUdeviceptr p = 0, q = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 5000));
  CU_ASSERT(A.cuMemAlloc(&q, 16));
  CUdeviceptr inner = p + 1234;
  CUcontext ctx = nullptr;
  CU_ASSERT(A.cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, inner));
  EXPECT_EQ(ctx0, ctx);
  unsigned type = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inner));
  EXPECT_EQ(unsigned{CU_MEMORYTYPE_DEVICE}, type);
  CUdeviceptr dp = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, inner));
  EXPECT_EQ(inner, dp);
  void* hp = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, inner));
  CUdeviceptr start = 0;
  size_t size = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inner));
  CU_ASSERT(A.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner));
  EXPECT_EQ(p, start);
  EXPECT_EQ(5000u, size);
  unsigned long long id_p = 0, id_q = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&id_p, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  CU_ASSERT(A.cuPointerGetAttribute(&id_q, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
  EXPECT_NE(id_p, id_q);
  // Booleans are written as one byte; a zeroed 4-byte integer reads right
  // whichever width the driver writes.
  unsigned managed = 0, mapped = 0, ipc = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  CU_ASSERT(A.cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, p));
  CU_ASSERT(A.cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
  EXPECT_EQ(0u, managed);
  EXPECT_EQ(1u, mapped);
  EXPECT_EQ(1u, ipc);
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(1);
  CU_ASSERT(A.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(nullptr, pool);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuPointerGetAttribute(&type, static_cast<CUpointer_attribute>(30), p));
  // A freed buffer gets a new id when its address is reused.
  CU_ASSERT(A.cuMemFree(q));
  CUdeviceptr r = 0;
  CU_ASSERT(A.cuMemAlloc(&r, 16));
  unsigned long long id_r = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&id_r, CU_POINTER_ATTRIBUTE_BUFFER_ID, r));
  EXPECT_NE(id_q, id_r);
  CU_ASSERT(A.cuMemFree(r));
  CU_ASSERT(A.cuMemFree(p));
}

TEST_F(Emu, PointerAttributesOfUnknownPointers) {
  int on_stack = 0;
  CUdeviceptr freed = 0;
  CU_ASSERT(A.cuMemAlloc(&freed, 64));
  CU_ASSERT(A.cuMemFree(freed));
  for (CUdeviceptr ptr : {reinterpret_cast<CUdeviceptr>(&on_stack), freed, CUdeviceptr{0}}) {
    unsigned type = 77;
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr));
    // The batch form succeeds with null values, as documented.
    CUcontext ctx = reinterpret_cast<CUcontext>(1);
    CUdeviceptr dp = 1;
    void* hp = reinterpret_cast<void*>(1);
    int ordinal = 5;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void* data[] = {&type, &ctx, &dp, &hp, &ordinal};
    CU_ASSERT(A.cuPointerGetAttributes(5, attrs, data, ptr));
    EXPECT_EQ(0u, type);
    EXPECT_EQ(nullptr, ctx);
    EXPECT_EQ(0u, dp);
    EXPECT_EQ(nullptr, hp);
  }
}

TEST_F(Emu, PointerGetAttributesOfDeviceAndHostMemory) {
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 100));
  void* h = nullptr;
  CU_ASSERT(A.cuMemHostAlloc(&h, 100, CU_MEMHOSTALLOC_PORTABLE));
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  unsigned type = 0;
  void* hp = reinterpret_cast<void*>(1);
  CUdeviceptr dp = 0;
  CUcontext ctx = nullptr;
  size_t size = 0;
  void* data[] = {&type, &hp, &dp, &ctx, &size};
  CU_ASSERT(A.cuPointerGetAttributes(5, attrs, data, p + 10));
  EXPECT_EQ(unsigned{CU_MEMORYTYPE_DEVICE}, type);
  EXPECT_EQ(nullptr, hp);  // no host address: null rather than an error here
  EXPECT_EQ(p + 10, dp);
  EXPECT_EQ(ctx0, ctx);
  EXPECT_EQ(100u, size);
  CU_ASSERT(A.cuPointerGetAttributes(5, attrs, data, reinterpret_cast<CUdeviceptr>(h) + 10));
  EXPECT_EQ(unsigned{CU_MEMORYTYPE_HOST}, type);
  EXPECT_EQ(static_cast<char*>(h) + 10, hp);
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(h) + 10, dp);
  EXPECT_EQ(ctx0, ctx);
  CUpointer_attribute bad[] = {static_cast<CUpointer_attribute>(30)};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuPointerGetAttributes(1, bad, data, p));
  CU_ASSERT(A.cuMemFree(p));
  CU_ASSERT(A.cuMemFreeHost(h));
}

// ---------------------------------------------------------------------------
// Stream-ordered allocation and the default pool

TEST_F(Emu, AllocAsyncAndFreeAsync) {
  CUstream s = stream();
  CUmemoryPool pool = nullptr;
  CU_ASSERT(A.cuDeviceGetDefaultMemPool(&pool, 0));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, 3000, s));
  EXPECT_EQ(0u, p % 256);
  EXPECT_EQ(1u, A.device_allocation_count(0));
  EXPECT_EQ(3000u, A.device_bytes_in_use(0));
  auto data = pattern(3000, 3);
  std::vector<unsigned char> back(3000);
  CU_ASSERT(A.cuMemcpyHtoDAsync(p, data.data(), data.size(), s));
  CU_ASSERT(A.cuMemcpyDtoHAsync(back.data(), p, back.size(), s));
  EXPECT_EQ(data, back);
  CUmemoryPool got = nullptr;
  CU_ASSERT(A.cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(pool, got);
  unsigned ipc = 1;
  CU_ASSERT(A.cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
  EXPECT_EQ(0u, ipc);
  cuuint64_t used = 0, reserved = 0;
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_GE(used, 3000u);
  EXPECT_GE(reserved, used);
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFreeAsync(p, s));  // already being freed
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(p));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(0u, A.device_allocation_count(0));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(0u, used);
  EXPECT_EQ(0u, reserved);  // release threshold 0: released at the synchronisation
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAllocAsync(&p, 0, s));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemAllocAsync(nullptr, 16, s));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuMemAllocAsync(&p, 16, reinterpret_cast<CUstream>(0x99)));
}

TEST_F(Emu, PoolKeepsMemoryUpToTheReleaseThreshold) {
  CUstream s = stream();
  CUmemoryPool pool = nullptr;
  CU_ASSERT(A.cuDeviceGetDefaultMemPool(&pool, 0));
  cuuint64_t threshold = 64 << 20;
  CU_ASSERT(A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, 1 << 20, s));
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  cuuint64_t reserved = 0, used = 1;
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(cuuint64_t{1} << 20, reserved);
  EXPECT_EQ(0u, used);
  size_t free_mem = 0, total = 0;
  CU_ASSERT(A.cuMemGetInfo(&free_mem, &total));
  EXPECT_EQ(total - (1 << 20), free_mem);  // held by the pool
  // The cached block is reused.
  CUdeviceptr q = 0;
  CU_ASSERT(A.cuMemAllocAsync(&q, 1 << 20, s));
  EXPECT_EQ(p, q);
  CU_ASSERT(A.cuMemFreeAsync(q, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  CU_ASSERT(A.cuMemPoolTrimTo(pool, 0));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(0u, reserved);
  cuuint64_t high = 0;
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
  EXPECT_EQ(cuuint64_t{1} << 20, high);
  cuuint64_t zero = 0;
  CU_ASSERT(A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high));
  EXPECT_EQ(0u, high);
  // Memory cached by the pool does not make cuMemAlloc fail.
  threshold = kMemory;
  CU_ASSERT(A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CU_ASSERT(A.cuMemAllocAsync(&p, kMemory / 2, s));
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(kMemory / 2, reserved);
  CU_ASSERT(A.cuMemAlloc(&q, kMemory));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(0u, reserved);
  CU_ASSERT(A.cuMemFree(q));
}

TEST_F(Emu, PoolAttributesAndHandles) {
  CUmemoryPool pool = nullptr;
  CU_ASSERT(A.cuDeviceGetDefaultMemPool(&pool, 0));
  CUmemoryPool pool1 = nullptr;
  CU_ASSERT(A.cuDeviceGetDefaultMemPool(&pool1, 1));
  EXPECT_NE(pool, pool1);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceGetDefaultMemPool(&pool1, 4));
  int flag = -1;
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &flag));
  EXPECT_EQ(1, flag);
  flag = 0;
  CU_ASSERT(A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &flag));
  CU_ASSERT(A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &flag));
  EXPECT_EQ(0, flag);
  cuuint64_t v = 5;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, nullptr));
  auto bogus = reinterpret_cast<CUmemoryPool>(0x5000);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolGetAttribute(bogus, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemPoolTrimTo(bogus, 0));
}

TEST_F(Emu, MemFreeReleasesAPoolAllocation) {
  CUstream s = stream();
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, 4096, s));
  CU_ASSERT(A.cuMemFree(p));  // waits for the stream, then frees
  EXPECT_EQ(0u, A.device_allocation_count(0));
  // cuMemFreeAsync also accepts cuMemAlloc memory.
  CU_ASSERT(A.cuMemAlloc(&p, 4096));
  CU_ASSERT(A.cuMemFreeAsync(p, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(0u, A.device_allocation_count(0));
}

EMU_CHILD_MODE(no_pools) {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CUcontext c = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c));
  int pools = -1;
  CHILD_CU(CUDA_SUCCESS, A.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
  CHILD_CHECK(pools == 0);
  CUdeviceptr p = 0;
  CHILD_CU(CUDA_ERROR_NOT_SUPPORTED, A.cuMemAllocAsync(&p, 64, nullptr));
  CUmemoryPool pool = nullptr;
  CHILD_CU(CUDA_ERROR_NOT_SUPPORTED, A.cuDeviceGetDefaultMemPool(&pool, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuMemAlloc(&p, 64));  // the ordinary allocator works
  CHILD_CU(CUDA_SUCCESS, A.cuMemFree(p));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(0));
  return 0;
}

TEST(Config, NoPoolsRefusesStreamOrderedAllocation) {
  ChildResult r = run_child("no_pools", {}, {{"CUARROW_EMULATED_NO_POOLS", "1"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

// ---------------------------------------------------------------------------
// Pinned and registered host memory

TEST_F(Emu, HostAllocAndFree) {
  void* h = nullptr;
  CU_ASSERT(A.cuMemHostAlloc(&h, 10000, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  ASSERT_NE(nullptr, h);
  std::memset(h, 0xab, 10000);  // host accessible
  EXPECT_EQ(1u, A.host_allocation_count());
  CUdeviceptr dp = 0;
  CU_ASSERT(A.cuMemHostGetDevicePointer(&dp, h, 0));
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(h), dp);  // unified addressing
  CU_ASSERT(A.cuMemHostGetDevicePointer(&dp, static_cast<char*>(h) + 500, 0));
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(h) + 500, dp);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostGetDevicePointer(&dp, h, 1));
  int x = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostGetDevicePointer(&dp, &x, 0));
  unsigned type = 0;
  CU_ASSERT(A.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(h)));
  EXPECT_EQ(unsigned{CU_MEMORYTYPE_HOST}, type);
  void* hp = nullptr;
  CU_ASSERT(A.cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, reinterpret_cast<CUdeviceptr>(h)));
  EXPECT_EQ(h, hp);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFreeHost(static_cast<char*>(h) + 1));
  CU_ASSERT(A.cuMemFreeHost(h));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemFreeHost(h));
  EXPECT_EQ(0u, A.host_allocation_count());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostAlloc(&h, 64, 0x80));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostAlloc(nullptr, 64, 0));
  CU_ASSERT(A.cuMemHostAlloc(&h, 64, CU_MEMHOSTALLOC_WRITECOMBINED));
  CU_ASSERT(A.cuMemFreeHost(h));
}

TEST_F(Emu, HostRegisterAndUnregister) {
  std::vector<char> buf(1 << 16);
  CU_ASSERT(A.cuMemHostRegister(buf.data(), buf.size(), CU_MEMHOSTREGISTER_PORTABLE));
  EXPECT_EQ(1u, A.host_registration_count());
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, A.cuMemHostRegister(buf.data(), buf.size(), 0));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, A.cuMemHostRegister(buf.data() + 100, 10, 0));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, A.cuMemHostRegister(buf.data() - 4, 8, 0));
  CUdeviceptr dp = 0;
  CU_ASSERT(A.cuMemHostGetDevicePointer(&dp, buf.data() + 8, 0));
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(buf.data() + 8), dp);
  CUcontext ctx = nullptr;
  CU_ASSERT(A.cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, dp));
  EXPECT_EQ(ctx0, ctx);
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, A.cuMemHostUnregister(buf.data() + 8));  // not the base
  int other = 0;
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, A.cuMemHostUnregister(&other));
  CU_ASSERT(A.cuMemHostUnregister(buf.data()));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, A.cuMemHostUnregister(buf.data()));
  EXPECT_EQ(0u, A.host_registration_count());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostRegister(nullptr, 16, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostRegister(buf.data(), 0, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostRegister(buf.data(), 16, 0x100));
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, A.cuMemHostRegister(buf.data(), 16, CU_MEMHOSTREGISTER_IOMEMORY));
  // Device memory cannot be registered.
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 4096));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemHostRegister(reinterpret_cast<void*>(p), 4096, 0));
  CU_ASSERT(A.cuMemFree(p));
  // Pinned memory is already registered.
  void* h = nullptr;
  CU_ASSERT(A.cuMemHostAlloc(&h, 4096, 0));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, A.cuMemHostRegister(h, 4096, 0));
  CU_ASSERT(A.cuMemFreeHost(h));
}
