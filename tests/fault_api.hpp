// The emulation's fault-injection API (emulation/include/cuarrow_emulation.h),
// looked up in the loaded emulation library; empty on a real driver, and
// on the emulation when CUARROW_TEST_HIDE_FAULT_API is set (ctest's
// *.without_fault_api runs: a test that reaches for the counters without
// available() crashes there, in CI, as it would on a GPU).
// Shared by the fault sweep and the fault regression tests.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>

#include "cuarrow/driver.hpp"

namespace cuarrow_test {

struct fault_api {
  int (*inject)(const char*, unsigned long long, int) = nullptr;
  size_t (*calls)(const char*) = nullptr;
  void (*reset_calls)() = nullptr;
  size_t (*injected)() = nullptr;
  void (*clear)() = nullptr;
  const char* (*entry_name)(size_t) = nullptr;
  size_t (*pushes)() = nullptr;
  bool available() const { return inject != nullptr; }
};

inline const fault_api& faults() {
  static const fault_api api = [] {
    fault_api a;
    cuarrow::load_driver();
    if (!cuarrow::driver_is_emulated() || std::getenv("CUARROW_TEST_HIDE_FAULT_API") != nullptr) return a;
    void* h = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return a;
    a.inject = reinterpret_cast<int (*)(const char*, unsigned long long, int)>(dlsym(h, "cuarrow_emu_inject_fault"));
    a.calls = reinterpret_cast<size_t (*)(const char*)>(dlsym(h, "cuarrow_emu_call_count"));
    a.reset_calls = reinterpret_cast<void (*)()>(dlsym(h, "cuarrow_emu_reset_call_counts"));
    a.injected = reinterpret_cast<size_t (*)()>(dlsym(h, "cuarrow_emu_faults_injected"));
    a.clear = reinterpret_cast<void (*)()>(dlsym(h, "cuarrow_emu_clear_faults"));
    a.entry_name = reinterpret_cast<const char* (*)(size_t)>(dlsym(h, "cuarrow_emu_entry_point_name"));
    a.pushes = reinterpret_cast<size_t (*)()>(dlsym(h, "cuarrow_emu_context_push_count"));
    return a;
  }();
  return api;
}

}  // namespace cuarrow_test
