// Devices, primary contexts, the current-context stack, peer access.
#include <thread>

#include "support.hpp"

using namespace emu_test;

TEST_F(Emu, DeviceCountAndOrdinals) {
  int count = 0;
  CU_ASSERT(A.cuDeviceGetCount(&count));
  EXPECT_EQ(kDevices, count);
  CUdevice d = -1;
  CU_EXPECT(A.cuDeviceGet(&d, 1));
  EXPECT_EQ(1, d);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceGet(&d, kDevices));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceGet(&d, -1));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDeviceGet(nullptr, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDeviceGetCount(nullptr));
}

TEST_F(Emu, DeviceNameAndTotalMemory) {
  char name[64];
  CU_ASSERT(A.cuDeviceGetName(name, sizeof name, 0));
  EXPECT_STREQ("cuarrow emulated device 0", name);
  CU_ASSERT(A.cuDeviceGetName(name, sizeof name, 1));
  EXPECT_STREQ("cuarrow emulated device 1", name);
  char small[8];
  CU_ASSERT(A.cuDeviceGetName(small, sizeof small, 0));  // truncated, terminated
  EXPECT_STREQ("cuarrow", small);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceGetName(name, sizeof name, 7));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDeviceGetName(nullptr, 10, 0));
  size_t mem = 0;
  CU_ASSERT(A.cuDeviceTotalMem(&mem, 1));
  EXPECT_EQ(kMemory, mem);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceTotalMem(&mem, 2));
}

TEST_F(Emu, DeviceAttributes) {
  auto attr = [&](CUdevice_attribute a, CUdevice d = 0) {
    int v = -12345;
    EXPECT_EQ(CUDA_SUCCESS, A.cuDeviceGetAttribute(&v, a, d)) << a;
    return v;
  };
  EXPECT_EQ(9, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  EXPECT_EQ(0, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  EXPECT_EQ(1, attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING));
  EXPECT_EQ(1, attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED));
  EXPECT_EQ(1, attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM));
  EXPECT_EQ(1, attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY));
  EXPECT_EQ(32, attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  EXPECT_GT(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 0);
  EXPECT_GT(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 0);
  // PCI location: distinct per device, consistent with cuDeviceGetPCIBusId.
  EXPECT_NE(attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0), attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
  for (CUdevice d = 0; d < kDevices; ++d) {
    char bus[32];
    CU_ASSERT(A.cuDeviceGetPCIBusId(bus, sizeof bus, d));
    char expect[32];
    std::snprintf(expect, sizeof expect, "%04X:%02X:%02X.0", attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d),
                  attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d), attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d));
    EXPECT_STREQ(expect, bus);
  }
  char bus[32];
  CU_ASSERT(A.cuDeviceGetPCIBusId(bus, sizeof bus, 0));
  EXPECT_STREQ("0000:01:00.0", bus);
  // Attributes without meaning here answer 0; out-of-range ones are errors.
  EXPECT_EQ(0, attr(CU_DEVICE_ATTRIBUTE_INTEGRATED));
  EXPECT_EQ(0, attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY));
  EXPECT_EQ(0, attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  int v = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
}

TEST_F(Emu, CanAccessPeer) {
  int can = -1;
  CU_ASSERT(A.cuDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(1, can);
  CU_ASSERT(A.cuDeviceCanAccessPeer(&can, 1, 0));
  EXPECT_EQ(1, can);
  CU_ASSERT(A.cuDeviceCanAccessPeer(&can, 0, 0));
  EXPECT_EQ(0, can);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDeviceCanAccessPeer(&can, 0, 9));
}

TEST_F(Emu, EnablePeerAccess) {
  CUcontext ctx1 = retain(1);
  CU_EXPECT(A.cuCtxEnablePeerAccess(ctx1, 0));
  EXPECT_EQ(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, A.cuCtxEnablePeerAccess(ctx1, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuCtxEnablePeerAccess(ctx0, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuCtxEnablePeerAccess(ctx1, 1));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxEnablePeerAccess(reinterpret_cast<CUcontext>(0x40), 0));
  // The other direction is separate.
  CU_ASSERT(A.cuCtxPushCurrent(ctx1));
  CU_EXPECT(A.cuCtxEnablePeerAccess(ctx0, 0));
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  // Destroying the peer context ends the mapping.
  release(1);
  CUcontext again = retain(1);
  CU_EXPECT(A.cuCtxEnablePeerAccess(again, 0));
}

EMU_CHILD_MODE(no_peer) {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CUcontext c0 = nullptr, c1 = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c0, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c1, 1));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c0));
  int can = -1;
  CHILD_CU(CUDA_SUCCESS, A.cuDeviceCanAccessPeer(&can, 0, 1));
  CHILD_CHECK(can == 0);
  CHILD_CU(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, A.cuCtxEnablePeerAccess(c1, 0));
  // Copies between devices still work (staged through the host).
  CUdeviceptr a = 0, b = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuMemAlloc(&a, 4096));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c1));
  CHILD_CU(CUDA_SUCCESS, A.cuMemAlloc(&b, 4096));
  CHILD_CU(CUDA_SUCCESS, A.cuMemsetD8Async(a, 0x5a, 4096, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyPeerAsync(b, c1, a, c0, 4096, nullptr));
  unsigned char host[4096];
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyDtoHAsync(host, b, sizeof host, nullptr));
  CHILD_CHECK(host[0] == 0x5a && host[4095] == 0x5a);
  return 0;
}

TEST(Config, NoPeerRefusesPeerAccessButCopies) {
  ChildResult r = run_child("no_peer", {}, {{"CUARROW_EMULATED_DEVICES", "2"}, {"CUARROW_EMULATED_NO_PEER", "1"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

TEST_F(Emu, PrimaryContextRetainCounts) {
  EXPECT_EQ(1, A.retain_count(0));
  EXPECT_EQ(0, A.retain_count(1));
  EXPECT_EQ(-1, A.retain_count(9));
  unsigned flags = 99;
  int active = -1;
  CU_ASSERT(A.cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(0, active);
  CUcontext c1 = retain(1);
  CUcontext c1b = retain(1);
  EXPECT_EQ(c1, c1b);
  EXPECT_NE(ctx0, c1);
  EXPECT_EQ(2, A.retain_count(1));
  CU_ASSERT(A.cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(1, active);
  EXPECT_EQ(0u, flags);
  release(1);
  EXPECT_EQ(1, A.retain_count(1));
  release(1);
  EXPECT_EQ(0, A.retain_count(1));
  CU_ASSERT(A.cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(0, active);
  // Releasing more than retained.
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuDevicePrimaryCtxRelease(1));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDevicePrimaryCtxRelease(7));
  CUcontext c = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, A.cuDevicePrimaryCtxRetain(&c, 7));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDevicePrimaryCtxRetain(nullptr, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuDevicePrimaryCtxGetState(0, nullptr, &active));
}

TEST_F(Emu, DestroyedContextIsReportedAndRecreated) {
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  release(1);  // destroyed: still on this thread's stack
  CUdevice dev = -1;
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, A.cuCtxGetDevice(&dev));
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, A.cuMemAlloc(&p, 64));
  CUstream s = nullptr;
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, A.cuStreamCreate(&s, 0));
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, A.cuCtxSynchronize());
  CUcontext popped = nullptr;
  CU_ASSERT(A.cuCtxPopCurrent(&popped));
  EXPECT_EQ(c1, popped);
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxPushCurrent(c1));
  // A later retain re-creates it; here with the same handle.
  CUcontext again = retain(1);
  EXPECT_EQ(c1, again);
  CU_ASSERT(A.cuCtxPushCurrent(again));
  CU_EXPECT(A.cuCtxGetDevice(&dev));
  EXPECT_EQ(1, dev);
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
}

TEST_F(Emu, DestroyingAContextFreesItsResources) {
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUdeviceptr p = 0, q = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 1 << 20));
  CU_ASSERT(A.cuMemAllocAsync(&q, 4096, nullptr));
  void* pinned = nullptr;
  CU_ASSERT(A.cuMemHostAlloc(&pinned, 4096, 0));
  std::vector<char> reg(8192);
  CU_ASSERT(A.cuMemHostRegister(reg.data(), reg.size(), 0));
  CUstream s = nullptr;
  CU_ASSERT(A.cuStreamCreate(&s, 0));
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, 0));
  CU_ASSERT(A.cuEventRecord(e, s));
  EXPECT_EQ(2u, A.device_allocation_count(1));
  EXPECT_EQ(1u, A.host_allocation_count());
  EXPECT_EQ(1u, A.host_registration_count());
  EXPECT_EQ(1u, A.stream_count());
  EXPECT_EQ(1u, A.event_count());
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  release(1);
  EXPECT_EQ(0u, A.device_allocation_count(1));
  EXPECT_EQ(0u, A.device_bytes_in_use(1));
  EXPECT_EQ(0u, A.host_allocation_count());
  EXPECT_EQ(0u, A.host_registration_count());
  EXPECT_EQ(0u, A.stream_count());
  EXPECT_EQ(0u, A.event_count());
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamQuery(s));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventQuery(e));
  size_t free_mem = 0, total = 0;
  CUcontext again = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(again));
  CU_ASSERT(A.cuMemGetInfo(&free_mem, &total));
  EXPECT_EQ(total, free_mem);  // the pool's memory went back too
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
}

TEST(Contexts, CallsWithoutACurrentContext) {
  Api& A = api();
  CU_ASSERT(A.cuInit(0));
  CUcontext cur = reinterpret_cast<CUcontext>(1);
  CU_ASSERT(A.cuCtxGetCurrent(&cur));
  EXPECT_EQ(nullptr, cur);
  CUdevice dev = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxGetDevice(&dev));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxPopCurrent(&cur));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxSynchronize());
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuMemAlloc(&p, 64));
  void* h = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuMemHostAlloc(&h, 64, 0));
  CUstream s = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuStreamCreate(&s, 0));
  CUevent e = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuEventCreate(&e, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuStreamSynchronize(nullptr));  // the legacy stream needs one
  size_t f = 0, t = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuMemGetInfo(&f, &t));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxPushCurrent(nullptr));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuCtxPushCurrent(reinterpret_cast<CUcontext>(0x1000)));
}

TEST_F(Emu, CurrentContextStackIsPerThread) {
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUdevice dev = -1;
  CU_ASSERT(A.cuCtxGetDevice(&dev));
  EXPECT_EQ(1, dev);
  std::thread([&] {
    CUcontext cur = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(CUDA_SUCCESS, A.cuCtxGetCurrent(&cur));
    EXPECT_EQ(nullptr, cur);
    EXPECT_EQ(CUDA_SUCCESS, A.cuCtxPushCurrent(c1));
    CUdevice d = -1;
    EXPECT_EQ(CUDA_SUCCESS, A.cuCtxGetDevice(&d));
    EXPECT_EQ(1, d);
  }).join();
  CUcontext popped = nullptr;
  CU_ASSERT(A.cuCtxPopCurrent(&popped));
  EXPECT_EQ(c1, popped);
  CU_ASSERT(A.cuCtxGetDevice(&dev));
  EXPECT_EQ(0, dev);
  CUcontext cur = nullptr;
  CU_ASSERT(A.cuCtxGetCurrent(&cur));
  EXPECT_EQ(ctx0, cur);
}

TEST_F(Emu, MemGetInfoFollowsAllocations) {
  size_t free0 = 0, total = 0;
  CU_ASSERT(A.cuMemGetInfo(&free0, &total));
  EXPECT_EQ(kMemory, total);
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 1000));  // rounded to the 256-byte granule
  size_t free1 = 0;
  CU_ASSERT(A.cuMemGetInfo(&free1, &total));
  EXPECT_EQ(free0 - 1024, free1);
  CU_ASSERT(A.cuMemFree(p));
  CU_ASSERT(A.cuMemGetInfo(&free1, &total));
  EXPECT_EQ(free0, free1);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuMemGetInfo(nullptr, &total));
}
