// Regression tests for the bugs the fault sweep (fault_sweep_test.cpp) found:
// each injects the one fault that exposed a bug and checks the fix.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace cuarrow_test {
namespace {

struct injector {
  int (*inject)(const char*, unsigned long long, int) = nullptr;
  size_t (*injected)() = nullptr;
  void (*clear)() = nullptr;
  size_t (*pushes)() = nullptr;
};

const injector& inj() {
  static const injector api = [] {
    injector a;
    cuarrow::load_driver();
    if (!cuarrow::driver_is_emulated()) return a;
    void* h = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return a;
    a.inject = reinterpret_cast<int (*)(const char*, unsigned long long, int)>(dlsym(h, "cuarrow_emu_inject_fault"));
    a.injected = reinterpret_cast<size_t (*)()>(dlsym(h, "cuarrow_emu_faults_injected"));
    a.clear = reinterpret_cast<void (*)()>(dlsym(h, "cuarrow_emu_clear_faults"));
    a.pushes = reinterpret_cast<size_t (*)()>(dlsym(h, "cuarrow_emu_context_push_count"));
    return a;
  }();
  return api;
}

// Captures warnings for a scope.
class warnings {
 public:
  warnings() {
    cuarrow::set_warning_handler([this](std::string_view m) { messages.emplace_back(m); });
  }
  ~warnings() { cuarrow::set_warning_handler(nullptr); }
  std::vector<std::string> messages;
};

class FaultRegression : public ::testing::Test {
 protected:
  void SetUp() override {
    CUARROW_REQUIRE_EMULATION();
    if (!inj().inject) GTEST_SKIP() << "the emulation has no fault injection";
    inj().clear();
  }
  void TearDown() override {
    if (inj().clear) inj().clear();
  }
  void fail_next(const char* entry, int code, unsigned long long k = 1) { ASSERT_EQ(inj().inject(entry, k, code), 0); }
};

TEST_F(FaultRegression, InjectionFailsTheChosenCallOnly) {
  cuarrow::context c0 = cuarrow::context::get(0);
  fail_next("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  fail_next("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY);
  const size_t before = emu().device_allocation_count(0);
  try {
    (void)cuarrow::allocate_device(c0, 4096);
    FAIL() << "the allocation should have failed";
  } catch (const cuarrow::out_of_memory& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
  }
  EXPECT_EQ(inj().injected(), 1u);
  inj().clear();
  EXPECT_EQ(emu().device_allocation_count(0), before);
  EXPECT_NO_THROW((void)cuarrow::allocate_device(c0, 4096));
}

}  // namespace
}  // namespace cuarrow_test
