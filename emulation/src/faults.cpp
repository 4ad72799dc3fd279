// Fault injection and call counting: the check every guarded entry point
// makes first (ApiGuard in entry_points.cpp), and its control API.
#include "emu_internal.hpp"

#include <cstring>
#include <mutex>
#include <vector>

#pragma GCC visibility push(default)
#include "cuarrow_emulation.h"
#pragma GCC visibility pop

namespace cuemu {

namespace {

constexpr const char* kNames[] = {
#define CUARROW_DRIVER_ENTRY(name, version, required) #name,
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == kEntryPointCount);

struct Armed {
  int id;                        // -1: any entry point
  unsigned long long remaining;  // calls to go, this one included
  CUresult code;
};

std::atomic<unsigned long long> g_calls[kEntryPointCount];
std::atomic<size_t> g_injected{0};
std::atomic<size_t> g_armed_count{0};  // fast path: nothing armed, no lock
std::mutex g_fault_mu;
std::vector<Armed>* g_armed = nullptr;  // under g_fault_mu; never freed (used until exit)

int id_of(const char* name) {
  for (int i = 0; i < kEntryPointCount; ++i)
    if (std::strcmp(kNames[i], name) == 0) return i;
  return -1;
}

}  // namespace

CUresult fault_check(int id) noexcept {
  g_calls[id].fetch_add(1, std::memory_order_relaxed);
  if (g_armed_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  std::lock_guard lk(g_fault_mu);
  CUresult hit = CUDA_SUCCESS;
  std::vector<Armed>& armed = *g_armed;
  for (size_t i = 0; i < armed.size();) {
    if ((armed[i].id < 0 || armed[i].id == id) && --armed[i].remaining == 0) {
      if (hit == CUDA_SUCCESS) hit = armed[i].code;
      armed.erase(armed.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  g_armed_count.store(armed.size(), std::memory_order_release);
  if (hit != CUDA_SUCCESS) g_injected.fetch_add(1);
  return hit;
}

}  // namespace cuemu

extern "C" {

int cuarrow_emu_inject_fault(const char* name, unsigned long long k, int code) {
  using namespace cuemu;
  int id = -1;
  if (name && (id = id_of(name)) < 0) return -1;
  if (k == 0 || code == CUDA_SUCCESS) return -1;
  std::lock_guard lk(g_fault_mu);
  if (!g_armed) g_armed = new std::vector<Armed>();
  g_armed->push_back({id, k, static_cast<CUresult>(code)});
  g_armed_count.store(g_armed->size(), std::memory_order_release);
  return 0;
}

size_t cuarrow_emu_call_count(const char* name) {
  using namespace cuemu;
  if (!name) {
    size_t n = 0;
    for (auto& c : g_calls) n += c.load();
    return n;
  }
  int id = id_of(name);
  return id < 0 ? static_cast<size_t>(-1) : static_cast<size_t>(g_calls[id].load());
}

void cuarrow_emu_reset_call_counts(void) {
  for (auto& c : cuemu::g_calls) c.store(0);
}

size_t cuarrow_emu_faults_injected(void) { return cuemu::g_injected.load(); }

void cuarrow_emu_clear_faults(void) {
  using namespace cuemu;
  std::lock_guard lk(g_fault_mu);
  if (g_armed) g_armed->clear();
  g_armed_count.store(0, std::memory_order_release);
  g_injected.store(0);
}

const char* cuarrow_emu_entry_point_name(size_t i) {
  return i < static_cast<size_t>(cuemu::kEntryPointCount) ? cuemu::kNames[i] : nullptr;
}

}  // extern "C"
