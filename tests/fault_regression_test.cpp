// Regression tests for the bugs the fault sweep (fault_sweep_test.cpp) found:
// each injects the one fault that exposed a bug and checks the fix.
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fault_api.hpp"
#include "fault_ipc_exporter.hpp"
#include "test_support.hpp"

namespace cuarrow_test {
namespace {

// Captures warnings for a scope.
class warnings {
 public:
  warnings() {
    cuarrow::set_warning_handler([this](std::string_view m) { messages.emplace_back(m); });
  }
  ~warnings() { cuarrow::set_warning_handler(nullptr); }
  std::vector<std::string> messages;
};

// The k-th call from now of `entry` fails with `code`.
void fail_next(const char* entry, int code, unsigned long long k = 1) { ASSERT_EQ(faults().inject(entry, k, code), 0); }

class FaultRegression : public ::testing::Test {
 protected:
  void SetUp() override {
    CUARROW_REQUIRE_EMULATION();
    if (!faults().inject) GTEST_SKIP() << "the emulation has no fault injection";
    faults().clear();
  }
  void TearDown() override {
    if (faults().clear) faults().clear();
  }
};

TEST_F(FaultRegression, InjectionFailsTheChosenCallOnly) {
  cuarrow::context c0 = cuarrow::context::get(0);
  fail_next("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  fail_next("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY);
  fail_next("cuMemAllocFromPoolAsync", CUDA_ERROR_OUT_OF_MEMORY);  // the default resource's pool
  const size_t before = emu().device_allocation_count(0);
  try {
    (void)cuarrow::allocate_device(c0, 4096);
    FAIL() << "the allocation should have failed";
  } catch (const cuarrow::out_of_memory& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
  }
  EXPECT_EQ(faults().injected(), 1u);
  faults().clear();
  EXPECT_EQ(emu().device_allocation_count(0), before);
  EXPECT_NO_THROW((void)cuarrow::allocate_device(c0, 4096));
}

// A thread of its own, so that a context left pushed by a failed pop goes
// with the thread's context stack.
template <class F>
void on_own_thread(F f) {
  std::thread t(f);
  t.join();
}

// src/runtime/page_locked.cpp: when the context push before cuMemHostUnregister
// failed, the registration was taken as gone with its context and the
// memory released (or unmapped) while the driver still had it pinned; the
// next registration of the range then failed.
TEST_F(FaultRegression, UnregisterStillHappensWhenThePushFails) {
  cuarrow::context c0 = cuarrow::context::get(0);
  const size_t registered = emu().host_registration_count();
  auto owner = std::make_shared<std::vector<std::uint8_t>>(8192);
  {
    cuarrow::buffer r = cuarrow::register_host(c0, owner->data(), 8192, owner);
    EXPECT_EQ(emu().host_registration_count(), registered + 1);
    fail_next("cuCtxPushCurrent", CUDA_ERROR_INVALID_CONTEXT);
  }
  EXPECT_EQ(faults().injected(), 1u);
  EXPECT_EQ(emu().host_registration_count(), registered);
  // The same range registers again.
  EXPECT_NO_THROW((void)cuarrow::register_host(c0, owner->data(), 8192, owner));
}

// src/buffer.cpp: register_host released the caller's owner even when the
// driver refused to unregister its pages.
TEST_F(FaultRegression, RegisterHostKeepsTheOwnerWhenUnregisterFails) {
  cuarrow::context c0 = cuarrow::context::get(0);
  auto released = std::make_shared<bool>(false);
  auto* data = new std::uint8_t[8192];
  std::shared_ptr<const void> owner(data, [released](const void* p) {
    *released = true;
    delete[] static_cast<const std::uint8_t*>(p);
  });
  warnings w;
  {
    cuarrow::buffer r = cuarrow::register_host(c0, data, 8192, std::move(owner));
    fail_next("cuMemHostUnregister", CUDA_ERROR_NOT_PERMITTED);
  }
  EXPECT_EQ(faults().injected(), 1u);
  EXPECT_FALSE(*released) << "the owner of pages still registered was released";
  EXPECT_FALSE(w.messages.empty());
}

// src/copy.cpp: a synchronous copy whose final wait failed returned with its
// DMA still queued, and the caller's buffers were freed under it (here the
// source, freed on its own device's stream, which does not wait for the
// copy queued on the other device's).
TEST_F(FaultRegression, FailedCopyKeepsItsBuffersUntilTheDmaPassed) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  const size_t async_faults = emu().async_fault_count();
  {
    scoped_op_delay delay(20000);
    // cuMemFree waits for its own device's work only.
    cuarrow::buffer a = cuarrow::allocate_device(c0, 1 << 16, {}, std::make_shared<cuarrow::plain_device_resource>());
    cuarrow::buffer b = cuarrow::allocate_device(c1, 1 << 16);
    c0.synchronize();
    fail_next("cuStreamSynchronize", CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_THROW(cuarrow::copy(b, 0, a, 0, 1 << 16), cuarrow::cuda_error);
    EXPECT_EQ(faults().injected(), 1u);
  }  // a and b dropped at once
  EXPECT_NO_THROW(c0.synchronize());
  EXPECT_NO_THROW(c1.synchronize());
  EXPECT_EQ(emu().async_fault_count(), async_faults) << "a DMA ran on memory freed under it";
}

// The same for a batch that fails midway (a later piece's DMA).
TEST_F(FaultRegression, BatchFailingMidwayKeepsItsBuffers) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  const size_t async_faults = emu().async_fault_count();
  {
    scoped_op_delay delay(20000);
    // cuMemFree waits for its own device's work only.
    cuarrow::buffer a = cuarrow::allocate_device(c0, 1 << 16, {}, std::make_shared<cuarrow::plain_device_resource>());
    cuarrow::buffer b = cuarrow::allocate_device(c1, 1 << 16, {}, std::make_shared<cuarrow::plain_device_resource>());
    cuarrow::buffer p = cuarrow::allocate_pinned(c1, 4096);
    c0.synchronize();
    c1.synchronize();
    std::vector<cuarrow::copy_piece> pieces{
        {b, 0, a, 0, 1 << 15},  // between the devices, queued first
        {p, 0, b, 0, 4096},     // device to pinned host, fails
    };
    fail_next("cuMemcpyDtoHAsync", CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_THROW(cuarrow::copy_batch_async(pieces, {}), cuarrow::cuda_error);
    EXPECT_EQ(faults().injected(), 1u);
  }
  EXPECT_NO_THROW(c0.synchronize());
  EXPECT_NO_THROW(c1.synchronize());
  EXPECT_EQ(emu().async_fault_count(), async_faults) << "a DMA ran on memory freed under it";
}

class StagingFaultRegression : public small_staging_test {
 protected:
  void SetUp() override {
    CUARROW_REQUIRE_EMULATION();
    if (!faults().inject) GTEST_SKIP() << "the emulation has no fault injection";
    small_staging_test::SetUp();
    faults().clear();
  }
  void TearDown() override {
    faults().clear();
    small_staging_test::TearDown();
  }
};

// src/staging.cpp: a staging worker whose context pop failed said nothing,
// and failed event destroys went unreported.
TEST_F(StagingFaultRegression, FailedPopsAndEventDestroysAreReported) {
  cuarrow::context c0 = cuarrow::context::get(0);
  const std::vector<std::uint8_t> src = pattern(512 << 10, 4);
  cuarrow::buffer d = cuarrow::allocate_device(c0, static_cast<std::int64_t>(src.size()));
  for (const char* entry : {"cuCtxPopCurrent", "cuEventDestroy"}) {
    SCOPED_TRACE(entry);
    warnings w;
    const size_t events = emu().event_count();
    ASSERT_EQ(faults().inject(entry, 1, CUDA_ERROR_NOT_PERMITTED), 0);
    on_own_thread([&] { cuarrow::copy_from_host(d, 0, src.data(), static_cast<std::int64_t>(src.size())); });
    EXPECT_EQ(faults().injected(), 1u);
    EXPECT_FALSE(w.messages.empty()) << "nothing was reported";
    EXPECT_EQ(to_vector(d), src);
    (void)events;
    faults().clear();
  }
}

// src/staging.cpp: after a failed job, its slots (with DMAs possibly still
// queued that no event tracks) went to the next job.
TEST_F(StagingFaultRegression, NoSlotIsReusedAfterAFailedJob) {
  cuarrow::context c0 = cuarrow::context::get(0);
  const std::vector<std::uint8_t> src = pattern(512 << 10, 5);
  const std::vector<std::uint8_t> other = pattern(512 << 10, 6);
  cuarrow::buffer d = cuarrow::allocate_device(c0, static_cast<std::int64_t>(src.size()));
  cuarrow::copy_from_host(d, 0, other.data(), static_cast<std::int64_t>(other.size()));  // slots pinned
  const size_t async_faults = emu().async_fault_count();
  {
    scoped_op_delay delay(2000);
    fail_next("cuEventRecord", CUDA_ERROR_LAUNCH_FAILED, 2);
    EXPECT_THROW(cuarrow::copy_from_host(d, 0, src.data(), static_cast<std::int64_t>(src.size())), cuarrow::cuda_error);
    EXPECT_EQ(faults().injected(), 1u);
    cuarrow::copy_from_host(d, 0, other.data(), static_cast<std::int64_t>(other.size()));
  }
  c0.synchronize();
  EXPECT_EQ(to_vector(d), other);
  EXPECT_EQ(emu().async_fault_count(), async_faults);
}

// src/runtime/context.cpp: the primary context's release asked cuDeviceGet for the
// device again; when that failed, the retain was never released.
TEST_F(FaultRegression, PrimaryContextReleaseNeedsNoDeviceQuery) {
  (void)cuarrow::context::get(0);
  cuarrow::shutdown();
  const int retains = emu().primary_ctx_retain_count(0);  // 0, unless an earlier test leaked one on purpose
  (void)cuarrow::context::get(0);
  ASSERT_EQ(emu().primary_ctx_retain_count(0), retains + 1);
  fail_next("cuDeviceGet", CUDA_ERROR_INVALID_VALUE);
  cuarrow::shutdown();
  EXPECT_EQ(emu().primary_ctx_retain_count(0), retains) << "the primary context's retain leaked";
  faults().clear();
  EXPECT_NO_THROW((void)cuarrow::context::get(0));
}

// src/runtime/stream.cpp: a stream whose final wait failed was destroyed at once,
// and its buffers, freed on the legacy stream from then on, went under its
// still-running work.
TEST_F(FaultRegression, DestroyedStreamWaitsForItsWorkFirst) {
  cuarrow::context c0 = cuarrow::context::get(0);
  const size_t async_faults = emu().async_fault_count();
  {
    cuarrow::buffer src = cuarrow::allocate_device(c0, 1 << 16);
    cuarrow::buffer dst;
    {
      scoped_op_delay delay(20000);
      cuarrow::stream s(c0);
      dst = cuarrow::allocate_device(c0, 1 << 16, s);
      cuarrow::copy_async(dst, 0, src, 0, 1 << 16, s);
      fail_next("cuStreamSynchronize", CUDA_ERROR_LAUNCH_FAILED);
    }  // s destroyed
  }    // dst freed on the legacy stream, src with it
  EXPECT_NO_THROW(c0.synchronize());
  EXPECT_EQ(emu().async_fault_count(), async_faults) << "memory was freed under the destroyed stream's work";
}

// src/runtime/context.cpp: a failed peer-access probe failed the copy that wanted
// peer access; it is now remembered as "no peer access" and reported.
TEST_F(FaultRegression, FailedPeerProbeMeansNoPeerAccess) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::shutdown();  // fresh context states: nothing probed yet
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  warnings w;
  fail_next("cuDeviceCanAccessPeer", CUDA_ERROR_INVALID_VALUE);
  bool enabled = true;
  EXPECT_NO_THROW(enabled = c0.enable_peer_access(c1));
  EXPECT_FALSE(enabled);
  EXPECT_FALSE(w.messages.empty());
  EXPECT_FALSE(c0.enable_peer_access(c1));  // remembered
  // Copies between the devices still work (staged by the driver).
  const std::vector<std::uint8_t> v = pattern(10000, 8);
  cuarrow::buffer a = cuarrow::copy_to_device(c0, v.data(), 10000);
  cuarrow::buffer b = cuarrow::allocate_device(c1, 10000);
  cuarrow::copy(b, 0, a, 0, 10000);
  EXPECT_EQ(to_vector(b), v);
  cuarrow::shutdown();  // later tests get fresh states again
}

// src/runtime/context.cpp: scoped_context threw when cuCtxGetCurrent failed, which in
// a release path (a buffer's free) leaked the memory.
TEST_F(FaultRegression, FreeSurvivesAFailedContextQuery) {
  cuarrow::context c0 = cuarrow::context::get(0);
  c0.synchronize();
  const size_t before = emu().device_allocation_count(0);
  const size_t pushes = faults().pushes();
  on_own_thread([&] {
    cuarrow::buffer b = cuarrow::allocate_device(c0, 4096, {}, std::make_shared<cuarrow::plain_device_resource>());
    fail_next("cuCtxGetCurrent", CUDA_ERROR_INVALID_CONTEXT);
  });
  EXPECT_EQ(faults().injected(), 1u);
  EXPECT_EQ(emu().device_allocation_count(0), before);
  EXPECT_EQ(faults().pushes(), pushes);
}

// A failed pop (here in the unregistration of pinned pages) is reported.
TEST_F(FaultRegression, FailedPopIsReported) {
  cuarrow::context c0 = cuarrow::context::get(0);
  warnings w;
  const size_t pushes = faults().pushes();
  on_own_thread([&] {
    auto owner = std::make_shared<std::vector<std::uint8_t>>(8192);
    cuarrow::buffer r = cuarrow::register_host(c0, owner->data(), 8192, owner);
    fail_next("cuCtxPopCurrent", CUDA_ERROR_INVALID_CONTEXT);
  });
  EXPECT_EQ(faults().injected(), 1u);
  EXPECT_FALSE(w.messages.empty()) << "the failed pop was not reported";
  (void)pushes;
}

// src/ipc.cpp: open_ipc turned CUDA_ERROR_OUT_OF_MEMORY into a plain
// cuda_error (with a hint about the handle's origin) instead of
// cuarrow::out_of_memory.
TEST_F(FaultRegression, OpenIpcOutOfMemoryIsOutOfMemory) {
  ipc_exporter_child exporter;
  ASSERT_TRUE(exporter.handle().has_value()) << "the exporting child did not write its handle";
  cuarrow::context c0 = cuarrow::context::get(0);
  fail_next("cuIpcOpenMemHandle", CUDA_ERROR_OUT_OF_MEMORY);
  try {
    (void)cuarrow::open_ipc(c0, *exporter.handle());
    FAIL() << "open_ipc should have failed";
  } catch (const cuarrow::out_of_memory& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
  } catch (const cuarrow::cuda_error& e) {
    FAIL() << "out of memory thrown as a plain cuda_error: " << e.what();
  }
  faults().clear();
  cuarrow::buffer b = cuarrow::open_ipc(c0, *exporter.handle());
  EXPECT_EQ(to_vector(b), pattern(10000, 77));
}

// Clean work leaves no context pushed on any thread (the emulation's count
// of pushes not popped).
TEST_F(FaultRegression, NoContextIsLeftPushed) {
  const size_t pushes = faults().pushes();
  on_own_thread([] {
    cuarrow::context c0 = cuarrow::context::get(0);
    const std::vector<std::uint8_t> v = pattern(100000, 2);
    cuarrow::buffer d = cuarrow::copy_to_device(c0, v.data(), 100000);
    cuarrow::stream s(c0);
    cuarrow::event e(c0);
    e.record(s);
    e.synchronize();
    (void)cuarrow::copy_to_new_host(d);
  });
  EXPECT_EQ(faults().pushes(), pushes);
}

}  // namespace
}  // namespace cuarrow_test
