// Copies and fills: results, bounds checks, pageable/pinned semantics, and
// the asynchronous faults of operations that find their memory gone.
#include <cstring>
#include <thread>

#include "support.hpp"

using namespace emu_test;
using namespace std::chrono_literals;

namespace {

struct PinnedBuffer {
  void* p = nullptr;
  size_t n = 0;
  PinnedBuffer(size_t bytes) : n(bytes) { EXPECT_EQ(CUDA_SUCCESS, api().cuMemHostAlloc(&p, bytes, 0)); }
  ~PinnedBuffer() { api().cuMemFreeHost(p); }
  unsigned char* data() { return static_cast<unsigned char*>(p); }
  std::vector<unsigned char> vec() { return {data(), data() + n}; }
  CUdeviceptr dptr() { return reinterpret_cast<CUdeviceptr>(p); }
};

CUdeviceptr hp(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

TEST_F(Emu, CopiesAndFillsRoundTrip) {
  constexpr size_t n = 100000;
  CUstream s = stream();
  CUdeviceptr a = 0, b = 0;
  CU_ASSERT(A.cuMemAlloc(&a, n));
  CU_ASSERT(A.cuMemAlloc(&b, n));
  auto data = pattern(n, 11);
  PinnedBuffer pinned(n);
  CU_ASSERT(A.cuMemcpyHtoDAsync(a, data.data(), n, s));  // pageable source
  CU_ASSERT(A.cuMemcpyDtoDAsync(b, a, n, s));
  CU_ASSERT(A.cuMemcpyDtoHAsync(pinned.data(), b, n, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(data, pinned.vec());
  // Fills, then the unified copy in every direction.
  CU_ASSERT(A.cuMemsetD8Async(b + 10, 0x7f, 1000, s));
  std::vector<unsigned char> back(n);
  CU_ASSERT(A.cuMemcpyAsync(hp(back.data()), b, n, s));  // device -> pageable
  auto expect = data;
  std::memset(expect.data() + 10, 0x7f, 1000);
  EXPECT_EQ(expect, back);
  CU_ASSERT(A.cuMemcpyAsync(a, hp(pinned.data()), n, s));  // pinned -> device
  CU_ASSERT(A.cuMemcpyAsync(b, a, n, s));                  // device -> device
  CU_ASSERT(A.cuMemcpyAsync(hp(back.data()), b, n, s));
  EXPECT_EQ(data, back);
  std::vector<unsigned char> other(n);
  CU_ASSERT(A.cuMemcpyAsync(hp(other.data()), hp(pinned.data()), n, s));  // host -> host: synchronous
  EXPECT_EQ(data, other);
  // Copies inside one allocation, overlapping.
  CU_ASSERT(A.cuMemcpyDtoDAsync(a + 1, a, 1000, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  auto moved = read_device(a, 1001);
  EXPECT_EQ(data[0], moved[0]);
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 1000, moved.begin() + 1));
  // Zero bytes: nothing to do.
  CU_EXPECT(A.cuMemcpyAsync(a, b, 0, s));
  CU_EXPECT(A.cuMemsetD8Async(a, 0, 0, s));
  CU_ASSERT(A.cuMemFree(a));
  CU_ASSERT(A.cuMemFree(b));
}

TEST_F(Emu, CopiesOutsideALiveAllocationAreRejected) {
  CUstream s = stream();
  CUdeviceptr a = 0, b = 0;
  CU_ASSERT(A.cuMemAlloc(&a, 1000));
  CU_ASSERT(A.cuMemAlloc(&b, 1000));
  std::vector<unsigned char> host(4096);
  PinnedBuffer pinned(1000);
  const CUresult bad = CUDA_ERROR_INVALID_VALUE;
  // One byte past the end of the allocation (still inside its 256-byte granule).
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(a, host.data(), 1001, s));
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(a + 999, host.data(), 2, s));
  EXPECT_EQ(bad, A.cuMemcpyDtoHAsync(host.data(), a + 500, 501, s));
  EXPECT_EQ(bad, A.cuMemcpyDtoDAsync(b, a, 1001, s));
  EXPECT_EQ(bad, A.cuMemcpyDtoDAsync(b + 1, a, 1000, s));
  EXPECT_EQ(bad, A.cuMemsetD8Async(a, 0, 1001, s));
  EXPECT_EQ(bad, A.cuMemcpyAsync(a, hp(host.data()), 1001, s));
  // Padding after the allocation, and freed memory.
  EXPECT_EQ(bad, A.cuMemsetD8Async(a + 1000, 0, 1, s));
  CUdeviceptr freed = 0;
  CU_ASSERT(A.cuMemAlloc(&freed, 1000));
  CU_ASSERT(A.cuMemFree(freed));
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(freed, host.data(), 10, s));
  EXPECT_EQ(bad, A.cuMemcpyAsync(hp(host.data()), freed, 10, s));
  EXPECT_EQ(bad, A.cuMemsetD8Async(freed, 0, 10, s));
  // Pinned memory is checked against its allocation.
  EXPECT_EQ(bad, A.cuMemcpyDtoHAsync(pinned.data() + 1, b, 1000, s));
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(a, pinned.data() + 500, 600, s));
  // The device side of a typed copy must be device-accessible memory.
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(hp(host.data()), host.data() + 100, 10, s));
  EXPECT_EQ(bad, A.cuMemcpyDtoHAsync(host.data(), hp(host.data() + 100), 10, s));
  EXPECT_EQ(bad, A.cuMemsetD8Async(hp(host.data()), 0, 10, s));
  EXPECT_EQ(bad, A.cuMemcpyDtoDAsync(a, hp(host.data()), 10, s));
  EXPECT_EQ(bad, A.cuMemcpyHtoDAsync(0, host.data(), 10, s));
  // ... but pinned memory is device-accessible (same address, UVA).
  CU_EXPECT(A.cuMemcpyDtoDAsync(a, pinned.dptr(), 1000, s));
  CU_EXPECT(A.cuMemsetD8Async(pinned.dptr(), 0x11, 1000, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(0x11, pinned.data()[999]);
  // Rejected copies did nothing and left no fault behind.
  CU_ASSERT(A.cuMemFree(a));
  CU_ASSERT(A.cuMemFree(b));
}

TEST_F(Emu, CopiesBetweenDevices) {
  constexpr size_t n = 65536;
  CUstream s0 = stream();
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUdeviceptr d1 = 0;
  CU_ASSERT(A.cuMemAlloc(&d1, n));
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  CUdeviceptr d0 = 0, back = 0;
  CU_ASSERT(A.cuMemAlloc(&d0, n));
  CU_ASSERT(A.cuMemAlloc(&back, n));
  auto data = pattern(n, 5);
  write_device(d0, data);
  CU_ASSERT(A.cuMemcpyDtoDAsync(d1, d0, n, s0));  // unified addressing: across devices
  CU_ASSERT(A.cuMemcpyPeerAsync(back, ctx0, d1, c1, n, s0));
  CU_ASSERT(A.cuStreamSynchronize(s0));
  EXPECT_EQ(data, read_device(back, n));
  EXPECT_EQ(data, read_device(d1, n));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuMemcpyPeerAsync(back, ctx0, d1, reinterpret_cast<CUcontext>(0x77), n, s0));
  CU_ASSERT(A.cuMemFree(d0));
  CU_ASSERT(A.cuMemFree(back));
  CU_ASSERT(A.cuMemFree(d1));
}

// ---------------------------------------------------------------------------
// Pageable versus pinned host memory

TEST_F(Emu, PageableHostToDeviceWaitsThenSnapshotsTheSource) {
  constexpr size_t n = 4096;
  CUstream s = stream();
  CUdeviceptr d = 0;
  CU_ASSERT(A.cuMemAlloc(&d, n));
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  ASSERT_TRUE(gate.wait_reached());
  auto src = pattern(n, 21);
  const auto original = src;
  std::thread opener([&] {
    std::this_thread::sleep_for(60ms);
    A.set_op_delay_us(200000);  // the device write happens well after the call returns
    gate.open();
  });
  auto t0 = std::chrono::steady_clock::now();
  CU_ASSERT(A.cuMemcpyHtoDAsync(d, src.data(), n, s));
  auto waited = std::chrono::steady_clock::now() - t0;
  opener.join();
  EXPECT_GE(waited, 50ms) << "a copy from pageable memory waits for the stream's earlier work";
  std::fill(src.begin(), src.end(), 0);  // the caller may reuse its buffer at once
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  A.set_op_delay_us(0);
  EXPECT_EQ(original, read_device(d, n));
  CU_ASSERT(A.cuMemFree(d));
}

TEST_F(Emu, PinnedHostToDeviceIsAsynchronous) {
  constexpr size_t n = 4096;
  CUstream s = stream();
  CUdeviceptr d = 0;
  CU_ASSERT(A.cuMemAlloc(&d, n));
  PinnedBuffer pinned(n);
  std::memset(pinned.data(), 1, n);
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuMemcpyHtoDAsync(d, pinned.data(), n, s));  // returns although the stream is held
  std::memset(pinned.data(), 2, n);                        // the copy reads the buffer when it runs
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(std::vector<unsigned char>(n, 2), read_device(d, n));
  // Registered memory behaves like pinned memory.
  std::vector<unsigned char> reg(n, 3);
  CU_ASSERT(A.cuMemHostRegister(reg.data(), n, 0));
  Gate& gate2 = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate2));
  CU_ASSERT(A.cuMemcpyHtoDAsync(d, reg.data(), n, s));
  std::fill(reg.begin(), reg.end(), 4);
  gate2.open();
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(std::vector<unsigned char>(n, 4), read_device(d, n));
  CU_ASSERT(A.cuMemHostUnregister(reg.data()));
  CU_ASSERT(A.cuMemFree(d));
}

TEST_F(Emu, PageableDeviceToHostReturnsAfterTheCopy) {
  constexpr size_t n = 4096;
  CUstream s = stream();
  CUdeviceptr d = 0;
  CU_ASSERT(A.cuMemAlloc(&d, n));
  auto data = pattern(n, 8);
  write_device(d, data);
  A.set_op_delay_us(20000);
  std::vector<unsigned char> out(n);
  CU_ASSERT(A.cuMemcpyDtoHAsync(out.data(), d, n, s));
  EXPECT_EQ(data, out);  // no synchronisation needed
  A.set_op_delay_us(0);
  CU_ASSERT(A.cuMemFree(d));
}

TEST_F(Emu, PinnedDeviceToHostIsAsynchronous) {
  constexpr size_t n = 4096;
  CUstream s = stream();
  CUdeviceptr d = 0;
  CU_ASSERT(A.cuMemAlloc(&d, n));
  write_device(d, std::vector<unsigned char>(n, 9));
  PinnedBuffer pinned(n);
  std::memset(pinned.data(), 0, n);
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuMemcpyDtoHAsync(pinned.data(), d, n, s));
  EXPECT_EQ(0, pinned.data()[0]);  // not yet
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(std::vector<unsigned char>(n, 9), pinned.vec());
  CU_ASSERT(A.cuMemFree(d));
}

// ---------------------------------------------------------------------------
// Asynchronous faults

TEST_F(Emu, UseAfterStreamOrderedFreeOnAnotherStreamFaults) {
  constexpr size_t n = 4096;
  CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
  PinnedBuffer out(n);
  std::memset(out.data(), 0x33, n);
  Gate& gate = new_gate();
  CUevent freed = nullptr;
  CU_ASSERT(A.cuEventCreate(&freed, CU_EVENT_DISABLE_TIMING));
  CU_ASSERT(A.cuLaunchHostFunc(s1, Gate::wait_fn, &gate));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, n, s1));
  CU_ASSERT(A.cuMemsetD8Async(p, 0x44, n, s1));
  CU_ASSERT(A.cuMemFreeAsync(p, s1));
  CU_ASSERT(A.cuEventRecord(freed, s1));
  // The bug: s2 reads the buffer after (in stream order) it was freed.
  CU_ASSERT(A.cuStreamWaitEvent(s2, freed, 0));
  CU_ASSERT(A.cuMemcpyDtoHAsync(out.data(), p, n, s2));  // accepted: still allocated now
  size_t faults = A.async_fault_count();
  gate.open();
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuStreamSynchronize(s2));
  EXPECT_EQ(faults + 1, A.async_fault_count());
  EXPECT_EQ(std::vector<unsigned char>(n, 0x33), out.vec());  // the faulting copy did nothing
  // Reported once, not sticky.
  CU_EXPECT(A.cuStreamSynchronize(s2));
  CU_EXPECT(A.cuCtxSynchronize());
  CU_ASSERT(A.cuEventDestroy(freed));
  expected_faults = 1;
}

TEST_F(Emu, UseBeforeStreamOrderedAllocationFaults) {
  CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s1, Gate::wait_fn, &gate));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, 4096, s1));
  // The bug: s2 uses the memory without waiting for s1 to allocate it.
  CU_ASSERT(A.cuMemsetD8Async(p, 0, 4096, s2));
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuStreamSynchronize(s2));
  gate.open();
  CU_ASSERT(A.cuMemFreeAsync(p, s1));
  CU_EXPECT(A.cuStreamSynchronize(s1));
  expected_faults = 1;
}

TEST_F(Emu, FaultIsReportedByTheNextSynchronisingCallOfTheContext) {
  CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s1, Gate::wait_fn, &gate));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAllocAsync(&p, 256, s1));
  CU_ASSERT(A.cuMemsetD8Async(p, 0, 256, s2));  // before s1 allocated it
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, 0));
  CU_ASSERT(A.cuEventRecord(e, s2));
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuEventSynchronize(e));
  CU_EXPECT(A.cuEventSynchronize(e));
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(s1));
  // And through cuCtxSynchronize: a fill queued while the memory was live,
  // run after another stream freed it.
  Gate& gate2 = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s2, Gate::wait_fn, &gate2));
  CU_ASSERT(A.cuMemsetD8Async(p, 0, 256, s2));
  CU_ASSERT(A.cuMemFreeAsync(p, s1));
  CU_ASSERT(A.cuStreamSynchronize(s1));
  gate2.open();
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuCtxSynchronize());
  CU_EXPECT(A.cuCtxSynchronize());
  CU_ASSERT(A.cuEventDestroy(e));
  expected_faults = 2;
}

TEST_F(Emu, FreeingMemoryAnotherDevicesStreamStillUsesFaults) {
  constexpr size_t n = 4096;
  CUdeviceptr src = 0;
  CU_ASSERT(A.cuMemAlloc(&src, n));
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUstream s1 = stream();
  CUdeviceptr dst = 0;
  CU_ASSERT(A.cuMemAlloc(&dst, n));
  CU_ASSERT(A.cuMemsetD8Async(dst, 0x66, n, s1));
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s1, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuMemcpyDtoDAsync(dst, src, n, s1));
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  // cuMemFree waits for its own context's work only.
  CU_ASSERT(A.cuMemFree(src));
  gate.open();
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuStreamSynchronize(s1));
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  EXPECT_EQ(std::vector<unsigned char>(n, 0x66), read_device(dst, n));
  CU_ASSERT(A.cuMemFree(dst));
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  expected_faults = 1;
}

TEST_F(Emu, MemFreeWaitsForTheContextsQueuedWork) {
  constexpr size_t n = 1 << 20;
  CUstream s = stream();
  CUdeviceptr d = 0;
  CU_ASSERT(A.cuMemAlloc(&d, n));
  PinnedBuffer out(n);
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuMemsetD8Async(d, 0x21, n, s));
  CU_ASSERT(A.cuMemcpyDtoHAsync(out.data(), d, n, s));
  std::thread opener([&] {
    std::this_thread::sleep_for(30ms);
    gate.open();
  });
  CU_ASSERT(A.cuMemFree(d));  // like cudaFree: synchronises first, so no fault
  opener.join();
  EXPECT_EQ(0x21, out.data()[n - 1]);
  CU_EXPECT(A.cuStreamSynchronize(s));
}

TEST_F(Emu, BatchedCopiesCheckTheBatchThenEveryCopyBeforeQueuingAny) {
  ASSERT_NE(nullptr, A.cuMemcpyBatchAsync);
  CUstream s = stream();
  constexpr size_t n = 3000;
  CUdeviceptr a = 0, b = 0;
  CU_ASSERT(A.cuMemAlloc(&a, n));
  CU_ASSERT(A.cuMemAlloc(&b, n));
  auto data = pattern(n, 5);
  CU_ASSERT(A.cuMemcpyHtoDAsync(a, data.data(), n, s));
  CU_ASSERT(A.cuMemsetD8Async(b, 0, n, s));
  PinnedBuffer pinned(n);
  // Three copies, b[0..1000) <- a[1000..2000), b[1000..1000) (none),
  // pinned[0..500) <- a[0..500), with two sets of attributes.
  CUdeviceptr dsts[3] = {b, b + 1000, pinned.dptr()};
  CUdeviceptr srcs[3] = {a + 1000, a, a};
  size_t sizes[3] = {1000, 0, 500};
  CUmemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  attrs[1].flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
  size_t idx[2] = {0, 2};
  CU_ASSERT(A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  auto got = read_device(b, n);
  EXPECT_TRUE(std::equal(data.begin() + 1000, data.begin() + 2000, got.begin()));
  EXPECT_EQ(0, got[1000]);
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 500, pinned.data()));

  // Refused, each with nothing queued: the legacy default stream, bad
  // arrays, attribute indices that do not start at 0 / do not increase /
  // reach count, an invalid source order, unknown flags, and one copy
  // outside its allocation.
  const CUresult bad = CUDA_ERROR_INVALID_VALUE;
  CU_ASSERT(A.cuMemsetD8Async(b, 0, n, s));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, nullptr));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 2, CU_STREAM_LEGACY));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 0, attrs, idx, 1, s));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(nullptr, srcs, sizes, 3, attrs, idx, 2, s));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, nullptr, idx, 2, s));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, idx, 0, s));
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 1, attrs, idx, 2, s));  // numAttrs > count
  size_t not_first[2] = {1, 2};
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, not_first, 2, s));
  size_t not_increasing[2] = {0, 0};
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, not_increasing, 2, s));
  size_t past_count[2] = {0, 3};
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, past_count, 2, s));
  CUmemcpyAttributes invalid_order = {};
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &invalid_order, idx, 1, s));
  CUmemcpyAttributes unknown_flags = attrs[0];
  unknown_flags.flags = 0x10;
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, &unknown_flags, idx, 1, s));
  size_t too_long[3] = {1000, 0, n + 1};
  EXPECT_EQ(bad, A.cuMemcpyBatchAsync(dsts, srcs, too_long, 3, attrs, idx, 2, s));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(std::vector<unsigned char>(n, 0), read_device(b, n));  // the first copy did not run either

  // CUDA 12.8's ABI names the copy that was refused, or SIZE_MAX.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  CU_ASSERT(A.getProcAddress("cuMemcpyBatchAsync", &fn, 12080, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  auto batch_v12080 = reinterpret_cast<PFN_cuMemcpyBatchAsync_v12080>(fn);
  size_t fail = 0;
  EXPECT_EQ(bad, batch_v12080(dsts, srcs, too_long, 3, attrs, idx, 2, &fail, s));
  EXPECT_EQ(2u, fail);
  EXPECT_EQ(bad, batch_v12080(dsts, srcs, sizes, 3, attrs, not_first, 2, &fail, s));
  EXPECT_EQ(SIZE_MAX, fail);
  CU_EXPECT(batch_v12080(dsts, srcs, sizes, 3, attrs, idx, 2, &fail, s));
  EXPECT_EQ(SIZE_MAX, fail);
  // Older than 12.8: no such symbol.
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND,
            A.getProcAddress("cuMemcpyBatchAsync", &fn, 12060, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  CU_ASSERT(A.cuStreamSynchronize(s));
  CU_ASSERT(A.cuMemFree(a));
  CU_ASSERT(A.cuMemFree(b));
}

TEST_F(Emu, BatchedCopyOfMemoryFreedBeforeItRunsFaults) {
  CUstream s1 = stream(CU_STREAM_NON_BLOCKING), s2 = stream(CU_STREAM_NON_BLOCKING);
  CUdeviceptr a = 0, b = 0;
  CU_ASSERT(A.cuMemAlloc(&b, 1000));
  CU_ASSERT(A.cuMemsetD8Async(b, 0x33, 1000, s2));
  CU_ASSERT(A.cuStreamSynchronize(s2));
  CU_ASSERT(A.cuMemAllocAsync(&a, 1000, s1));
  CU_ASSERT(A.cuStreamSynchronize(s1));
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s2, Gate::wait_fn, &gate));
  CUdeviceptr dsts[2] = {b, b + 500};
  CUdeviceptr srcs[2] = {a, a + 500};
  size_t sizes[2] = {500, 500};
  CUmemcpyAttributes attrs = {};
  attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t idx = 0;
  CU_ASSERT(A.cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &idx, 1, s2));  // accepted: a is live now
  // The bug: another stream frees the source before the batch runs.
  CU_ASSERT(A.cuMemFreeAsync(a, s1));
  CU_ASSERT(A.cuStreamSynchronize(s1));
  size_t faults = A.async_fault_count();
  gate.open();
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuStreamSynchronize(s2));
  EXPECT_EQ(faults + 1, A.async_fault_count());                             // one fault for the batch
  EXPECT_EQ(std::vector<unsigned char>(1000, 0x33), read_device(b, 1000));  // nothing copied
  CU_ASSERT(A.cuMemFree(b));
  expected_faults = 1;
}
