// Streams (asynchrony, order, legacy and per-thread default streams), host
// callbacks, events.
#include <deque>
#include <mutex>
#include <thread>

#include "support.hpp"

using namespace emu_test;
using namespace std::chrono_literals;

namespace {

// Appends its value to a shared log when its stream reaches it.
struct Mark {
  std::mutex* mu;
  std::vector<int>* log;
  int value;
  static void CUDA_CB fn(void* p) {
    auto* m = static_cast<Mark*>(p);
    std::lock_guard lk(*m->mu);
    m->log->push_back(m->value);
  }
};

struct Log {
  std::mutex mu;
  std::vector<int> entries;
  std::deque<Mark> marks;
  Mark* mark(int v) { return &marks.emplace_back(Mark{&mu, &entries, v}); }
  std::vector<int> get() {
    std::lock_guard lk(mu);
    return entries;
  }
};

}  // namespace

TEST_F(Emu, StreamCreateDestroyAndInvalidHandles) {
  size_t before = A.stream_count();
  CUstream s = nullptr;
  CU_ASSERT(A.cuStreamCreate(&s, 0));
  EXPECT_EQ(before + 1, A.stream_count());
  CU_EXPECT(A.cuStreamQuery(s));
  CU_ASSERT(A.cuStreamDestroy(s));
  EXPECT_EQ(before, A.stream_count());
  // Destroyed or never created: invalid handle, never a crash.
  for (CUstream bad : {s, reinterpret_cast<CUstream>(0x12345678), reinterpret_cast<CUstream>(0xdeadbeefull << 8)}) {
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamDestroy(bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamSynchronize(bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamQuery(bad));
    CUcontext c = nullptr;
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamGetCtx(bad, &c));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuLaunchHostFunc(
                                             bad, [](void*) {}, nullptr));
    CUdeviceptr p = 0;
    CU_ASSERT(A.cuMemAlloc(&p, 64));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuMemsetD8Async(p, 0, 64, bad));
    CU_ASSERT(A.cuMemFree(p));
  }
  // The default streams cannot be destroyed.
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamDestroy(nullptr));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamDestroy(CU_STREAM_LEGACY));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamDestroy(CU_STREAM_PER_THREAD));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuStreamCreate(&s, 0x8));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuStreamCreate(nullptr, 0));
}

TEST_F(Emu, StreamsRunAsynchronouslyOnAnotherThread) {
  CUstream s = stream();
  Gate& gate = new_gate();
  std::thread::id ran_on;
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuLaunchHostFunc(
      s, [](void* p) { *static_cast<std::thread::id*>(p) = std::this_thread::get_id(); }, &ran_on));
  ASSERT_TRUE(gate.wait_reached());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(s));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(s));
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(s));
  CU_EXPECT(A.cuStreamQuery(s));
  EXPECT_NE(std::thread::id(), ran_on);
  EXPECT_NE(std::this_thread::get_id(), ran_on);
}

TEST_F(Emu, OperationsRunInFifoOrder) {
  CUstream s = stream();
  Log log;
  A.set_op_delay_us(100);
  for (int i = 0; i < 50; ++i) CU_ASSERT(A.cuLaunchHostFunc(s, Mark::fn, log.mark(i)));
  CU_ASSERT(A.cuStreamSynchronize(s));
  std::vector<int> expect(50);
  for (int i = 0; i < 50; ++i) expect[i] = i;
  EXPECT_EQ(expect, log.get());
}

TEST_F(Emu, HostCallbacksMayNotCallTheDriver) {
  CUstream s = stream();
  struct Ctx {
    Api* A;
    CUstream s;
    CUresult query, alloc;
    const char* name;
  } c{&A, s, CUDA_SUCCESS, CUDA_SUCCESS, nullptr};
  CU_ASSERT(A.cuLaunchHostFunc(
      s,
      [](void* p) {
        auto* self = static_cast<Ctx*>(p);
        self->query = self->A->cuStreamQuery(self->s);
        CUdeviceptr d = 0;
        self->alloc = self->A->cuMemAlloc(&d, 64);
        self->A->cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &self->name);  // allowed
      },
      &c));
  CU_ASSERT(A.cuStreamSynchronize(s));
  EXPECT_EQ(CUDA_ERROR_NOT_PERMITTED, c.query);
  EXPECT_EQ(CUDA_ERROR_NOT_PERMITTED, c.alloc);
  EXPECT_STREQ("CUDA_ERROR_OUT_OF_MEMORY", c.name);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuLaunchHostFunc(s, nullptr, nullptr));
}

TEST_F(Emu, StreamGetCtx) {
  CUcontext c = nullptr;
  CUstream s0 = stream();
  CU_ASSERT(A.cuStreamGetCtx(s0, &c));
  EXPECT_EQ(ctx0, c);
  CU_ASSERT(A.cuStreamGetCtx(nullptr, &c));
  EXPECT_EQ(ctx0, c);
  CU_ASSERT(A.cuStreamGetCtx(CU_STREAM_PER_THREAD, &c));
  EXPECT_EQ(ctx0, c);
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUstream s1 = stream();
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  // A stream belongs to the context current when it was created.
  CU_ASSERT(A.cuStreamGetCtx(s1, &c));
  EXPECT_EQ(c1, c);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuStreamGetCtx(s1, nullptr));
}

TEST_F(Emu, LegacyStreamWaitsForBlockingStreamsOnly) {
  CUstream blocking = stream(0);
  CUstream nonblocking = stream(CU_STREAM_NON_BLOCKING);
  Gate& g_blocking = new_gate();
  Gate& g_nonblocking = new_gate();
  Log log;
  CU_ASSERT(A.cuLaunchHostFunc(blocking, Gate::wait_fn, &g_blocking));
  CU_ASSERT(A.cuLaunchHostFunc(nonblocking, Gate::wait_fn, &g_nonblocking));
  ASSERT_TRUE(g_blocking.wait_reached());
  CU_ASSERT(A.cuLaunchHostFunc(nullptr, Mark::fn, log.mark(1)));  // legacy stream
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(log.get().empty()) << "the legacy stream ran before earlier work of a blocking stream";
  g_blocking.open();
  CU_ASSERT(A.cuStreamSynchronize(nullptr));  // does not need the non-blocking stream
  EXPECT_EQ(std::vector<int>{1}, log.get());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(nonblocking));
  g_nonblocking.open();
  CU_ASSERT(A.cuStreamSynchronize(nonblocking));
}

TEST_F(Emu, BlockingStreamsWaitForTheLegacyStream) {
  CUstream blocking = stream(0);
  CUstream nonblocking = stream(CU_STREAM_NON_BLOCKING);
  Gate& gate = new_gate();
  Log log;
  CU_ASSERT(A.cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::wait_fn, &gate));
  ASSERT_TRUE(gate.wait_reached());
  CU_ASSERT(A.cuLaunchHostFunc(blocking, Mark::fn, log.mark(1)));
  CU_ASSERT(A.cuLaunchHostFunc(nonblocking, Mark::fn, log.mark(2)));
  CU_ASSERT(A.cuStreamSynchronize(nonblocking));  // not held by the legacy stream
  EXPECT_EQ(std::vector<int>{2}, log.get());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(blocking));
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(blocking));
  EXPECT_EQ((std::vector<int>{2, 1}), log.get());
}

TEST_F(Emu, LegacyStreamSynchronisationIsPerContext) {
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUstream other = stream(0);  // a blocking stream of device 1
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(other, Gate::wait_fn, &gate));
  ASSERT_TRUE(gate.wait_reached());
  bool ran = false;
  CU_ASSERT(A.cuLaunchHostFunc(
      nullptr, [](void* p) { *static_cast<bool*>(p) = true; }, &ran));
  CU_ASSERT(A.cuStreamSynchronize(nullptr));  // device 0's legacy stream
  EXPECT_TRUE(ran);
  gate.open();
}

TEST_F(Emu, PerThreadDefaultStreamIsOnePerThreadAndBlocking) {
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Gate::wait_fn, &gate));
  ASSERT_TRUE(gate.wait_reached());
  // Another thread's per-thread stream is independent.
  std::thread([&] {
    EXPECT_EQ(CUDA_SUCCESS, A.cuCtxPushCurrent(ctx0));
    bool ran = false;
    EXPECT_EQ(CUDA_SUCCESS, A.cuLaunchHostFunc(
                                CU_STREAM_PER_THREAD, [](void* p) { *static_cast<bool*>(p) = true; }, &ran));
    EXPECT_EQ(CUDA_SUCCESS, A.cuStreamSynchronize(CU_STREAM_PER_THREAD));
    EXPECT_TRUE(ran);
    EXPECT_EQ(CUDA_SUCCESS, A.cuCtxPopCurrent(nullptr));
  }).join();
  // It synchronises with the legacy stream like any blocking stream.
  Log log;
  CU_ASSERT(A.cuLaunchHostFunc(CU_STREAM_LEGACY, Mark::fn, log.mark(1)));
  std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(log.get().empty());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(CU_STREAM_PER_THREAD));
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(CU_STREAM_LEGACY));
  EXPECT_EQ(std::vector<int>{1}, log.get());
}

TEST_F(Emu, DestroyedStreamFinishesItsWork) {
  CUstream s = nullptr;
  CU_ASSERT(A.cuStreamCreate(&s, 0));
  Gate& gate = new_gate();
  std::atomic<bool> ran{false};
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuLaunchHostFunc(
      s, [](void* p) { static_cast<std::atomic<bool>*>(p)->store(true); }, &ran));
  CU_ASSERT(A.cuStreamDestroy(s));  // returns at once
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamQuery(s));
  EXPECT_FALSE(ran.load());
  gate.open();
  CU_ASSERT(A.cuCtxSynchronize());  // includes the destroyed stream's remaining work
  EXPECT_TRUE(ran.load());
}

TEST_F(Emu, CtxSynchronizeWaitsForEveryStream) {
  CUstream a = stream(0), b = stream(CU_STREAM_NON_BLOCKING);
  std::atomic<int> done{0};
  auto inc = [](void* p) {
    std::this_thread::sleep_for(10ms);
    static_cast<std::atomic<int>*>(p)->fetch_add(1);
  };
  for (CUstream s : {a, b, static_cast<CUstream>(nullptr), CU_STREAM_PER_THREAD})
    CU_ASSERT(A.cuLaunchHostFunc(s, inc, &done));
  CU_ASSERT(A.cuCtxSynchronize());
  EXPECT_EQ(4, done.load());
}

TEST_F(Emu, ConcurrentThreadsAndStreams) {
  constexpr int kThreads = 4, kIters = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto check = [&](CUresult r) {
        if (r != CUDA_SUCCESS) failures.fetch_add(1);
      };
      check(A.cuCtxPushCurrent(ctx0));
      CUstream s = nullptr;
      check(A.cuStreamCreate(&s, t % 2 ? CU_STREAM_NON_BLOCKING : 0));
      for (int i = 0; i < kIters; ++i) {
        size_t n = 1000 + 37 * i;
        auto in = pattern(n, t * 1000 + i);
        std::vector<unsigned char> out(n);
        CUdeviceptr a = 0, b = 0;
        check(A.cuMemAlloc(&a, n));
        check(A.cuMemAllocAsync(&b, n, s));
        check(A.cuMemcpyHtoDAsync(a, in.data(), n, s));
        check(A.cuMemcpyDtoDAsync(b, a, n, s));
        check(A.cuMemcpyDtoHAsync(out.data(), b, n, s));
        check(A.cuMemFreeAsync(b, s));
        check(A.cuStreamSynchronize(s));
        check(A.cuMemFree(a));
        if (in != out) failures.fetch_add(1);
      }
      check(A.cuStreamDestroy(s));
      check(A.cuCtxPopCurrent(nullptr));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_EQ(0u, A.device_allocation_count(0));
}

// ---------------------------------------------------------------------------
// Events

TEST_F(Emu, EventNeverRecordedIsComplete) {
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, 0));
  CU_EXPECT(A.cuEventQuery(e));
  CU_EXPECT(A.cuEventSynchronize(e));
  float ms = 0;
  CUevent e2 = nullptr;
  CU_ASSERT(A.cuEventCreate(&e2, 0));
  CU_ASSERT(A.cuEventRecord(e2, nullptr));
  CU_ASSERT(A.cuEventSynchronize(e2));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventElapsedTime(&ms, e, e2));
  // Waiting on it is a no-op.
  CUstream s = stream();
  CU_EXPECT(A.cuStreamWaitEvent(s, e, 0));
  CU_EXPECT(A.cuStreamSynchronize(s));
  CU_ASSERT(A.cuEventDestroy(e));
  CU_ASSERT(A.cuEventDestroy(e2));
}

TEST_F(Emu, EventRecordCapturesTheStreamPosition) {
  CUstream s = stream();
  Gate& gate = new_gate();
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuEventRecord(e, s));
  Gate& later = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &later));  // after the record
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuEventQuery(e));
  gate.open();
  CU_ASSERT(A.cuEventSynchronize(e));
  CU_EXPECT(A.cuEventQuery(e));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(s));  // the later work is still held
  // Recording again captures the new position.
  CU_ASSERT(A.cuEventRecord(e, s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuEventQuery(e));
  later.open();
  CU_ASSERT(A.cuEventSynchronize(e));
  CU_ASSERT(A.cuEventDestroy(e));
}

TEST_F(Emu, EventElapsedTime) {
  CUstream s = stream();
  CUevent start = nullptr, end = nullptr, untimed = nullptr;
  CU_ASSERT(A.cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU_ASSERT(A.cuEventCreate(&end, CU_EVENT_BLOCKING_SYNC));
  CU_ASSERT(A.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  float ms = -1;
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventElapsedTime(&ms, start, end));  // not recorded
  Gate& gate = new_gate();
  CU_ASSERT(A.cuEventRecord(start, s));
  CU_ASSERT(A.cuLaunchHostFunc(
      s, [](void*) { std::this_thread::sleep_for(25ms); }, nullptr));
  CU_ASSERT(A.cuLaunchHostFunc(s, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuEventRecord(end, s));
  CU_ASSERT(A.cuEventRecord(untimed, s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuEventElapsedTime(&ms, start, end));
  gate.open();
  CU_ASSERT(A.cuEventSynchronize(end));
  CU_ASSERT(A.cuEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 20.0f);
  EXPECT_LT(ms, 10000.0f);
  float back = 0;
  CU_ASSERT(A.cuEventElapsedTime(&back, end, start));
  EXPECT_LT(back, 0.0f);
  CU_ASSERT(A.cuEventSynchronize(untimed));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventElapsedTime(&ms, start, untimed));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuEventElapsedTime(nullptr, start, end));
  for (CUevent e : {start, end, untimed}) CU_ASSERT(A.cuEventDestroy(e));
}

TEST_F(Emu, StreamWaitEventOrdersStreamsAcrossContexts) {
  CUstream producer = stream(CU_STREAM_NON_BLOCKING);
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUstream consumer = stream(CU_STREAM_NON_BLOCKING);  // device 1
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  Gate& gate = new_gate();
  Log log;
  CU_ASSERT(A.cuLaunchHostFunc(producer, Gate::wait_fn, &gate));
  CU_ASSERT(A.cuLaunchHostFunc(producer, Mark::fn, log.mark(1)));
  CU_ASSERT(A.cuEventRecord(e, producer));
  // Waiting on an event of another context is allowed.
  CU_ASSERT(A.cuStreamWaitEvent(consumer, e, 0));
  CU_ASSERT(A.cuLaunchHostFunc(consumer, Mark::fn, log.mark(2)));
  // The event may be destroyed; the wait still refers to the recorded work.
  CU_ASSERT(A.cuEventDestroy(e));
  std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(log.get().empty());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(consumer));
  gate.open();
  CU_ASSERT(A.cuStreamSynchronize(consumer));
  EXPECT_EQ((std::vector<int>{1, 2}), log.get());
}

TEST_F(Emu, EventRecordAcrossContextsIsInvalidHandle) {
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, 0));  // context 0
  CUcontext c1 = retain(1);
  CU_ASSERT(A.cuCtxPushCurrent(c1));
  CUstream s1 = stream();
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventRecord(e, s1));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventRecord(e, nullptr));  // context 1's legacy stream
  CU_ASSERT(A.cuCtxPopCurrent(nullptr));
  CU_EXPECT(A.cuEventRecord(e, nullptr));
  CU_ASSERT(A.cuEventSynchronize(e));
  CU_ASSERT(A.cuEventDestroy(e));
}

TEST_F(Emu, EventHandlesAndFlags) {
  size_t before = A.event_count();
  CUevent e = nullptr;
  CU_ASSERT(A.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
  EXPECT_EQ(before + 1, A.event_count());
  CU_ASSERT(A.cuEventDestroy(e));
  EXPECT_EQ(before, A.event_count());
  float ms = 0;
  for (CUevent bad : {e, reinterpret_cast<CUevent>(0x4242), static_cast<CUevent>(nullptr)}) {
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventDestroy(bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventQuery(bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventSynchronize(bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventRecord(bad, nullptr));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuEventElapsedTime(&ms, bad, bad));
    EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, A.cuStreamWaitEvent(nullptr, bad, 0));
  }
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuEventCreate(&e, CU_EVENT_INTERPROCESS));  // needs DISABLE_TIMING
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuEventCreate(&e, 0x100));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuEventCreate(nullptr, 0));
  CU_ASSERT(A.cuEventCreate(&e, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuStreamWaitEvent(nullptr, e, 0x4));
  CU_ASSERT(A.cuEventDestroy(e));
}
