// Fault injection (cuarrow_emu_inject_fault and friends): the chosen call of
// the chosen entry point fails with the chosen code and does nothing else;
// calls are counted per entry point, variants under their base name.
#include <dlfcn.h>

#include <cstring>
#include <thread>
#include <vector>

#include "support.hpp"

using namespace emu_test;

namespace {

template <class F>
F sym(const char* name) {
  return reinterpret_cast<F>(dlsym(api().lib, name));
}

struct Faults {
  decltype(&cuarrow_emu_inject_fault) inject = sym<decltype(&cuarrow_emu_inject_fault)>("cuarrow_emu_inject_fault");
  decltype(&cuarrow_emu_call_count) calls = sym<decltype(&cuarrow_emu_call_count)>("cuarrow_emu_call_count");
  decltype(&cuarrow_emu_reset_call_counts) reset =
      sym<decltype(&cuarrow_emu_reset_call_counts)>("cuarrow_emu_reset_call_counts");
  decltype(&cuarrow_emu_faults_injected) injected =
      sym<decltype(&cuarrow_emu_faults_injected)>("cuarrow_emu_faults_injected");
  decltype(&cuarrow_emu_clear_faults) clear = sym<decltype(&cuarrow_emu_clear_faults)>("cuarrow_emu_clear_faults");
  decltype(&cuarrow_emu_entry_point_name) name =
      sym<decltype(&cuarrow_emu_entry_point_name)>("cuarrow_emu_entry_point_name");
  decltype(&cuarrow_emu_context_push_count) pushes =
      sym<decltype(&cuarrow_emu_context_push_count)>("cuarrow_emu_context_push_count");
};

class EmuFaults : public Emu {
 protected:
  void SetUp() override {
    Emu::SetUp();
    ASSERT_NE(F.inject, nullptr);
    F.clear();
  }
  void TearDown() override {
    F.clear();
    Emu::TearDown();
  }
  Faults F;
};

TEST_F(EmuFaults, TheKthCallFailsWithoutSideEffects) {
  ASSERT_EQ(0, F.inject("cuMemAlloc", 2, CUDA_ERROR_OUT_OF_MEMORY));
  CUdeviceptr p = 0, q = 0x1234;
  CU_ASSERT(A.cuMemAlloc(&p, 4096));  // the first call succeeds
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, A.cuMemAlloc(&q, 4096));
  EXPECT_EQ(0x1234u, q) << "the output was written";
  EXPECT_EQ(1u, A.device_allocation_count(0)) << "the failed call allocated";
  EXPECT_EQ(1u, F.injected());
  CU_ASSERT(A.cuMemAlloc(&q, 4096));  // fired once only
  CU_ASSERT(A.cuMemFree(p));
  CU_ASSERT(A.cuMemFree(q));
}

TEST_F(EmuFaults, AnyEntryPointAndSeveralFaults) {
  ASSERT_EQ(0, F.inject(nullptr, 1, CUDA_ERROR_LAUNCH_FAILED));
  ASSERT_EQ(0, F.inject("cuStreamQuery", 2, CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_EQ(CUDA_ERROR_LAUNCH_FAILED, A.cuStreamQuery(nullptr));  // any: the next call
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, A.cuStreamQuery(nullptr));
  CU_EXPECT(A.cuStreamQuery(nullptr));
  EXPECT_EQ(2u, F.injected());
}

TEST_F(EmuFaults, RefusesWhatItCannotDo) {
  EXPECT_EQ(-1, F.inject("cuNoSuchThing", 1, CUDA_ERROR_UNKNOWN));
  EXPECT_EQ(-1, F.inject("cuMemAlloc", 0, CUDA_ERROR_UNKNOWN));
  EXPECT_EQ(-1, F.inject("cuMemAlloc", 1, CUDA_SUCCESS));
  EXPECT_EQ(static_cast<size_t>(-1), F.calls("cuNoSuchThing"));
}

TEST_F(EmuFaults, ClearDisarms) {
  ASSERT_EQ(0, F.inject("cuCtxSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED));
  F.clear();
  CU_EXPECT(A.cuCtxSynchronize());
  EXPECT_EQ(0u, F.injected());
}

TEST_F(EmuFaults, CallsAreCountedPerEntryPoint) {
  size_t listed = 0;
  while (F.name(listed) != nullptr) ++listed;
  EXPECT_EQ(listed_entry_points().size(), listed);
  F.reset();
  EXPECT_EQ(0u, F.calls(nullptr));
  CU_EXPECT(A.cuStreamSynchronize(nullptr));
  CU_EXPECT(A.cuStreamSynchronize(nullptr));
  CUcontext c = nullptr;
  CU_EXPECT(A.cuCtxGetCurrent(&c));
  EXPECT_EQ(2u, F.calls("cuStreamSynchronize"));
  EXPECT_EQ(1u, F.calls("cuCtxGetCurrent"));
  EXPECT_EQ(3u, F.calls(nullptr));
}

TEST_F(EmuFaults, FaultsFireFromAnyThread) {
  ASSERT_EQ(0, F.inject("cuEventCreate", 1, CUDA_ERROR_OUT_OF_MEMORY));
  CUresult r = CUDA_SUCCESS;
  std::thread t([&] {
    CU_EXPECT(A.cuCtxPushCurrent(ctx0));
    CUevent e = nullptr;
    r = A.cuEventCreate(&e, 0);
    CUcontext popped = nullptr;
    CU_EXPECT(A.cuCtxPopCurrent(&popped));
  });
  t.join();
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, r);
  EXPECT_EQ(0u, A.event_count());
}

TEST_F(EmuFaults, PushesAreCountedUntilPopped) {
  const size_t base = F.pushes();
  CU_ASSERT(A.cuCtxPushCurrent(ctx0));
  EXPECT_EQ(base + 1, F.pushes());
  CUcontext popped = nullptr;
  CU_ASSERT(A.cuCtxPopCurrent(&popped));
  EXPECT_EQ(base, F.pushes());
}

}  // namespace
