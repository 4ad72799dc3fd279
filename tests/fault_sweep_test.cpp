// Fault injection sweep (issue 12): for each representative workload, every
// driver entry point it calls and (a bounded sample of) every call index k,
// the k-th call fails once with a realistic CUresult (the emulation's
// cuarrow_emu_inject_fault).  Each faulted run must either complete with the
// right data or throw a typed cuarrow error; a clean run afterwards must
// succeed (the objects involved stay usable); the emulation's counts of live
// allocations, registrations, streams, events, IPC mappings, pushed contexts
// and primary-context retains must come back to the baseline (no leaks); and
// every run ends within a time bound (no hangs).
//
// A release the driver refuses (cuMemFree, cuEventDestroy ... failing) leaves
// its one object alive by necessity: that is accepted when cuarrow reported it
// through the warning handler and only that kind of object is left over.
//
// Environment: CUARROW_FAULT_SWEEP_MAX_K (call indices tried per entry point,
// default 24, 10 under sanitizers), CUARROW_FAULT_SWEEP_VERBOSE=1.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <cuarrow/arrow/arrow.hpp>
#include <cuarrow/ipc/codec.hpp>
#include <cuarrow/ipc/file.hpp>
#include <cuarrow/ipc/file_writer.hpp>
#include <cuarrow/ipc/share.hpp>
#include <cuarrow/ipc/stream.hpp>

#include "arrow/arrow_test_util.hpp"
#include "child_process.hpp"
#include "fault_api.hpp"
#include "fault_ipc_exporter.hpp"
#include "test_support.hpp"

namespace cuarrow_test {
namespace {

namespace ca = cuarrow::arrow;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// ---- what a realistic fault of each entry point is ---------------------------------------

bool one_of(const std::string& n, std::initializer_list<const char*> names) {
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

// Entry points that give something back, or that a release needs (the
// context push): a failure leaves that object alive.
bool is_release(const std::string& n) {
  return one_of(n, {"cuCtxPushCurrent", "cuMemFree", "cuMemFreeAsync", "cuMemFreeHost", "cuMemHostUnregister",
                    "cuEventDestroy", "cuStreamDestroy", "cuIpcCloseMemHandle", "cuDevicePrimaryCtxRelease",
                    "cuCtxPopCurrent", "cuMemPoolDestroy"});
}

CUresult fault_code(const std::string& n, std::uint64_t k) {
  const bool odd = (k % 2) == 1;
  if (one_of(n, {"cuMemAlloc", "cuMemAllocAsync", "cuMemHostAlloc", "cuMemHostRegister", "cuIpcOpenMemHandle",
                 "cuStreamCreate", "cuEventCreate", "cuDevicePrimaryCtxRetain", "cuMemPoolCreate",
                 "cuMemAllocFromPoolAsync", "cuMemPoolImportFromShareableHandle", "cuMemPoolImportPointer"})) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (one_of(n, {"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize", "cuStreamQuery", "cuEventQuery",
                 "cuMemcpyAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpyPeerAsync",
                 "cuMemcpyBatchAsync", "cuMemsetD8Async", "cuLaunchHostFunc", "cuStreamWaitEvent", "cuEventRecord",
                 "cuEventElapsedTime"})) {
    return odd ? CUDA_ERROR_LAUNCH_FAILED : CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (one_of(n, {"cuCtxPushCurrent", "cuCtxPopCurrent", "cuCtxGetCurrent", "cuCtxGetDevice", "cuStreamGetCtx"})) {
    return odd ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_PERMITTED;
  }
  if (is_release(n)) return odd ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_ERROR_NOT_PERMITTED;
  return odd ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_PERMITTED;
}

// ---- leak accounting ------------------------------------------------------------------------

struct counts {
  std::vector<size_t> device;  // per device
  std::vector<int> retains;    // per device
  size_t host = 0, registered = 0, streams = 0, events = 0, ipc = 0, pools = 0, pushes = 0, async_faults = 0;

  bool operator==(const counts&) const = default;
  std::string describe() const {
    std::ostringstream o;
    o << "device allocations [";
    for (size_t v : device) o << v << " ";
    o << "] primary retains [";
    for (int v : retains) o << v << " ";
    o << "] pinned " << host << " registered " << registered << " streams " << streams << " events " << events
      << " ipc " << ipc << " pools " << pools << " pushed contexts " << pushes << " async faults " << async_faults;
    return o.str();
  }
};

// Waits for the work of every device and drops what cuarrow caches (the
// pinned pool), so that counts compare.
void settle() {
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    try {
      cuarrow::context::get(d).synchronize();
    } catch (const cuarrow::error&) {
    }
  }
  cuarrow::trim_pinned_pool();
}

counts snapshot() {
  settle();
  const emulation_api& e = emu();
  counts c;
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    c.device.push_back(e.device_allocation_count(d));
    c.retains.push_back(e.primary_ctx_retain_count(d));
  }
  c.host = e.host_allocation_count();
  c.registered = e.host_registration_count();
  c.streams = e.stream_count();
  c.events = e.event_count();
  c.ipc = e.ipc_mapping_count();
  c.pools = e.pool_count ? e.pool_count() : 0;
  c.pushes = faults().pushes();
  c.async_faults = e.async_fault_count();
  return c;
}

// After a refused release: is the difference only objects of that kind?
bool only_released_kind_differs(const std::string& n, const counts& base, const counts& now) {
  counts b = base;
  if (one_of(n, {"cuMemFree", "cuMemFreeAsync"})) {
    // Device memory, or an imported pool pointer; either keeps its pool.
    b.device = now.device;
    b.ipc = now.ipc;
    b.pools = now.pools;
  }
  if (n == "cuMemPoolDestroy") b.pools = now.pools;
  if (n == "cuMemFreeHost") b.host = now.host;
  if (n == "cuMemHostUnregister") b.registered = now.registered;
  if (n == "cuEventDestroy") b.events = now.events;
  if (n == "cuStreamDestroy") b.streams = now.streams;
  if (n == "cuIpcCloseMemHandle") b.ipc = now.ipc;
  if (n == "cuDevicePrimaryCtxRelease") b.retains = now.retains;
  if (n == "cuCtxPopCurrent") b.pushes = now.pushes;
  if (n == "cuCtxPushCurrent") {
    // A release that needs its context current cannot run without it: any one
    // kind of object may be left (but no context left pushed).
    b.device = now.device;
    b.host = now.host;
    b.registered = now.registered;
    b.events = now.events;
    b.streams = now.streams;
    b.ipc = now.ipc;
    b.pools = now.pools;
  }
  return b == now;
}

// ---- running a workload, bounded ------------------------------------------------------------

struct wrong_data : std::logic_error {
  using std::logic_error::logic_error;
};

#define SWEEP_EXPECT(cond)                                                              \
  do {                                                                                  \
    if (!(cond)) throw ::cuarrow_test::wrong_data(std::string("wrong data: ") + #cond); \
  } while (0)

enum class outcome { completed, typed_error, wrong_result, untyped_error };

struct run_result {
  outcome what = outcome::completed;
  int code = 0;  // the CUresult of a cuda_error
  std::string message;
  bool oom_type = false;  // thrown as cuarrow::out_of_memory
};

std::atomic<int> g_warnings{0};
std::mutex g_warning_mu;
std::string g_last_warning;

constexpr auto kRunTimeout = std::chrono::seconds(kSanitized ? 120 : 60);

run_result run_bounded(const std::function<void()>& work, const std::string& what) {
  auto promise = std::make_shared<std::promise<run_result>>();
  std::future<run_result> future = promise->get_future();
  std::thread t([promise, &work] {
    run_result r;
    try {
      work();
    } catch (const cuarrow::out_of_memory& e) {
      r = {outcome::typed_error, e.code(), e.what()};
      r.oom_type = true;
    } catch (const cuarrow::cuda_error& e) {
      r = {outcome::typed_error, e.code(), e.what()};
    } catch (const cuarrow::error& e) {
      r = {outcome::typed_error, 0, e.what()};
    } catch (const wrong_data& e) {
      r = {outcome::wrong_result, 0, e.what()};
    } catch (const std::exception& e) {
      r = {outcome::untyped_error, 0, std::string(typeid(e).name()) + ": " + e.what()};
    } catch (...) {
      r = {outcome::untyped_error, 0, "unknown exception"};
    }
    promise->set_value(std::move(r));
  });
  if (future.wait_for(kRunTimeout) != std::future_status::ready) {
    std::fprintf(stderr, "[fault_sweep] HANG: %s did not finish within %lld s\n", what.c_str(),
                 static_cast<long long>(kRunTimeout.count()));
    std::fflush(stderr);
    std::_Exit(3);  // a hung thread cannot be joined or cancelled
  }
  t.join();
  return future.get();
}

// ---- the sweep ---------------------------------------------------------------------------------

struct totals {
  long workloads = 0, runs = 0, injected = 0, not_reached = 0, typed = 0, completed = 0, refused_release = 0, leaks = 0,
       hangs = 0, failures = 0, other_code = 0;
  void add(const totals& o) {
    workloads += o.workloads;
    runs += o.runs;
    injected += o.injected;
    not_reached += o.not_reached;
    typed += o.typed;
    completed += o.completed;
    refused_release += o.refused_release;
    leaks += o.leaks;
    hangs += o.hangs;
    failures += o.failures;
    other_code += o.other_code;
  }
  std::string line(const std::string& label) const {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "[fault_sweep] %s: workloads %ld, runs %ld, faults injected %ld (not reached %ld), survived %ld "
                  "(typed error %ld [%ld carrying another code], completed correctly %ld, refused release reported "
                  "%ld), leaks %ld, hangs %ld, failures %ld",
                  label.c_str(), workloads, runs, injected, not_reached, typed + completed + refused_release, typed,
                  other_code, completed, refused_release, leaks, hangs, failures);
    return buf;
  }
};

totals& grand_total() {
  static totals t;
  return t;
}

// Entry points some workload of this process called.
std::set<std::string>& reached() {
  static std::set<std::string> r;
  return r;
}

std::uint64_t max_k() {
  if (const char* s = std::getenv("CUARROW_FAULT_SWEEP_MAX_K"); s && *s) return std::strtoull(s, nullptr, 10);
  return kSanitized ? 12 : 64;
}

// Call indices to try out of n: all when few, else both ends and evenly
// spaced ones between.
std::vector<std::uint64_t> sample(std::uint64_t n, std::uint64_t limit) {
  std::vector<std::uint64_t> ks;
  if (n <= limit) {
    for (std::uint64_t k = 1; k <= n; ++k) ks.push_back(k);
    return ks;
  }
  ks = {1, 2, 3, n - 1, n};
  const std::uint64_t rest = limit > 5 ? limit - 5 : 0;
  for (std::uint64_t i = 1; i <= rest; ++i) ks.push_back(3 + (n - 4) * i / (rest + 1));
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  return ks;
}

void sweep(const std::string& workload_name, const std::function<void()>& work) {
  const fault_api& f = faults();
  const bool verbose = std::getenv("CUARROW_FAULT_SWEEP_VERBOSE") != nullptr;
  totals t;
  t.workloads = 1;
  cuarrow::set_warning_handler([](std::string_view m) {
    g_warnings.fetch_add(1);
    std::lock_guard lk(g_warning_mu);
    g_last_warning = std::string(m);
  });

  // Warm up (caches, pools, per-thread state), then the baseline and the
  // clean run's calls per entry point.
  f.clear();
  run_result warm = run_bounded(work, workload_name + " (warm-up)");
  ASSERT_EQ(warm.what, outcome::completed) << warm.message;
  counts base = snapshot();
  f.reset_calls();
  run_result clean = run_bounded(work, workload_name + " (clean)");
  ASSERT_EQ(clean.what, outcome::completed) << clean.message;
  std::vector<std::pair<std::string, std::uint64_t>> calls;
  for (size_t i = 0; const char* n = f.entry_name(i); ++i) {
    const size_t c = f.calls(n);
    if (c > 0) {
      calls.emplace_back(n, c);
      reached().insert(n);
    }
  }
  {
    counts after = snapshot();
    ASSERT_EQ(after, base) << "the clean workload itself leaks: before " << base.describe() << ", after "
                           << after.describe();
  }
  if (verbose) {
    for (auto& [n, c] : calls)
      std::printf("[fault_sweep] %s: %s called %" PRIu64 " times\n", workload_name.c_str(), n.c_str(), c);
  }

  for (auto& [name, n] : calls) {
    for (std::uint64_t k : sample(n, max_k())) {
      const CUresult code = fault_code(name, k);
      const std::string what = workload_name + ": " + name + " call " + std::to_string(k) + " of " + std::to_string(n) +
                               " fails with " + std::to_string(code);
      f.clear();
      ASSERT_EQ(f.inject(name.c_str(), k, code), 0) << what;
      const int warnings_before = g_warnings.load();
      run_result r = run_bounded(work, what);
      const bool fired = f.injected() > 0;
      f.clear();
      ++t.runs;
      if (!fired) {
        ++t.not_reached;
      } else {
        ++t.injected;
      }
      bool ok = true;
      switch (r.what) {
        case outcome::completed:
          if (fired) ++t.completed;
          break;
        case outcome::typed_error:
          if (fired) ++t.typed;
          if (fired && r.code == code && code == CUDA_ERROR_OUT_OF_MEMORY && !r.oom_type) {
            ADD_FAILURE() << what
                          << ": out of memory thrown as a cuda_error, not as cuarrow::out_of_memory: " << r.message;
            ok = false;
          }
          if (fired && r.code != 0 && r.code != code) ++t.other_code;
          if (!fired) {
            ADD_FAILURE() << what << ": the fault did not fire, yet the run failed: " << r.message;
            ok = false;
          }
          break;
        case outcome::wrong_result:
          ADD_FAILURE() << what << ": completed with wrong data: " << r.message;
          ok = false;
          break;
        case outcome::untyped_error:
          ADD_FAILURE() << what << ": threw an exception that is not a cuarrow error: " << r.message;
          ok = false;
          break;
      }
      // The objects stay usable: a clean run succeeds.
      run_result again = run_bounded(work, what + " (clean run after)");
      ++t.runs;
      if (again.what != outcome::completed) {
        ADD_FAILURE() << what << ": the clean run after it failed: " << again.message
                      << (r.what == outcome::typed_error ? " (the faulted run threw: " + r.message + ")" : "");
        ok = false;
      }
      counts now = snapshot();
      if (now != base) {
        const bool warned = g_warnings.load() > warnings_before;
        if (fired && is_release(name) && warned && only_released_kind_differs(name, base, now)) {
          ++t.refused_release;
          if (r.what == outcome::completed) --t.completed;
          if (r.what == outcome::typed_error) --t.typed;
        } else {
          ++t.leaks;
          ok = false;
          ADD_FAILURE() << what << ": leak: before " << base.describe() << ", after " << now.describe()
                        << (warned ? " (a warning was reported)" : " (nothing was reported)") << "; the run "
                        << (r.what == outcome::completed ? "completed" : "threw: " + r.message);
        }
        base = now;  // what is left over stays; measure the next run from here
      }
      if (!ok) ++t.failures;
      if (verbose) {
        std::printf("[fault_sweep] %s -> %s%s\n", what.c_str(),
                    !fired                           ? "not reached"
                    : r.what == outcome::completed   ? "completed"
                    : r.what == outcome::typed_error ? "typed error"
                                                     : "FAILED",
                    ok ? "" : " (failure)");
      }
      if (t.failures > 20) {
        ADD_FAILURE() << "too many failures, stopping the sweep of " << workload_name;
        break;
      }
    }
    if (t.failures > 20) break;
  }
  f.clear();
  cuarrow::set_warning_handler(nullptr);
  std::printf("%s\n", t.line(workload_name).c_str());
  grand_total().add(t);
}

// A printout of the figures of every workload this process swept.
class summary_printer : public ::testing::Environment {
 public:
  void TearDown() override {
    if (grand_total().workloads <= 1) return;
    std::printf("%s\n", grand_total().line("all workloads").c_str());
    std::string missing;
    for (size_t i = 0; const char* n = faults().entry_name(i); ++i) {
      if (!reached().count(n)) missing += std::string(missing.empty() ? "" : ", ") + n;
    }
    std::printf("[fault_sweep] entry points no workload called: %s\n", missing.empty() ? "none" : missing.c_str());
  }
};
const auto* const g_summary = ::testing::AddGlobalTestEnvironment(new summary_printer);

// ---- workloads ---------------------------------------------------------------------------------

// Small staging chunks (small_staging_test) so that the staging workloads
// cross chunk boundaries and workers with small copies.
class FaultSweep : public small_staging_test {
 protected:
  void SetUp() override {
    CUARROW_REQUIRE_EMULATION();
    if (!faults().available()) GTEST_SKIP() << "the emulation has no fault injection";
    small_staging_test::SetUp();
  }
  void TearDown() override {
    if (faults().available()) faults().clear();
    small_staging_test::TearDown();
  }
};

bool same(const std::vector<std::uint8_t>& v, const void* p, std::size_t n) {
  return v.size() == n && std::memcmp(v.data(), p, n) == 0;
}

TEST_F(FaultSweep, BufferCopiesOfEveryKind) {
  const int devices = cuarrow::device_count();
  sweep("buffer copies", [devices] {
    cuarrow::context c0 = cuarrow::context::get(0);
    const std::vector<std::uint8_t> src = pattern(20000, 1);
    // host -> device (small, direct), device -> device, fill, device -> host
    cuarrow::buffer d = cuarrow::copy_to_device(c0, src.data(), static_cast<std::int64_t>(src.size()));
    cuarrow::buffer d2 = cuarrow::allocate_device(c0, d.size());
    cuarrow::copy(d2, 0, d, 0, d.size());
    std::vector<std::uint8_t> back(src.size());
    cuarrow::copy_to_host(back.data(), d2, 0, d2.size());
    SWEEP_EXPECT(back == src);
    // pinned <-> device
    cuarrow::buffer p = cuarrow::allocate_pinned(c0, d.size());
    cuarrow::copy(p, 0, d2, 0, d2.size());
    SWEEP_EXPECT(same(src, p.host_data(), src.size()));
    cuarrow::fill_async(d2, 0, 100, 7, {});
    cuarrow::copy(d2, 100, p, 100, 100);
    cuarrow::copy_to_host(back.data(), d2, 0, 200);
    for (int i = 0; i < 100; ++i) SWEEP_EXPECT(back[i] == 7);
    SWEEP_EXPECT(std::memcmp(back.data() + 100, src.data() + 100, 100) == 0);
    // registered host memory
    auto owner = std::make_shared<std::vector<std::uint8_t>>(8192, 0);
    cuarrow::buffer r = cuarrow::register_host(c0, owner->data(), static_cast<std::int64_t>(owner->size()), owner);
    cuarrow::copy(r, 0, d, 0, 8192);
    SWEEP_EXPECT(std::memcmp(owner->data(), src.data(), 8192) == 0);
    // to a new host buffer
    cuarrow::buffer h = cuarrow::copy_to_new_host(d);
    SWEEP_EXPECT(same(src, h.host_data(), src.size()));
    // peer
    if (devices >= 2) {
      cuarrow::context c1 = cuarrow::context::get(1);
      cuarrow::buffer e = cuarrow::allocate_device(c1, d.size());
      cuarrow::copy(e, 0, d, 0, d.size());
      cuarrow::copy_to_host(back.data(), e, 0, e.size());
      SWEEP_EXPECT(back == src);
    }
  });
}

TEST_F(FaultSweep, BatchCopies) {
  sweep("batch copies", [] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::stream s(c0);
    std::vector<std::vector<std::uint8_t>> srcs;
    for (unsigned i = 0; i < 6; ++i) srcs.push_back(pattern(1000 + 300 * i, 10 + i));
    cuarrow::buffer dst = cuarrow::allocate_device(c0, 16384, s);
    std::vector<cuarrow::copy_piece> pieces;
    std::int64_t at = 0;
    for (auto& v : srcs) {
      pieces.push_back({dst, at, cuarrow::wrap_host(v.data(), static_cast<std::int64_t>(v.size()), nullptr), 0,
                        static_cast<std::int64_t>(v.size())});
      at += static_cast<std::int64_t>(v.size()) + 64;
    }
    cuarrow::copy_batch(pieces, s);
    // device -> host pieces, and device -> device
    cuarrow::buffer dst2 = cuarrow::allocate_device(c0, 16384, s);
    std::vector<std::uint8_t> out(16384);
    cuarrow::buffer hout = cuarrow::wrap_host(out.data(), 16384, nullptr);
    std::vector<cuarrow::copy_piece> back;
    at = 0;
    for (auto& v : srcs) {
      back.push_back({dst2, at, dst, at, static_cast<std::int64_t>(v.size())});
      back.push_back({hout, at, dst, at, static_cast<std::int64_t>(v.size())});
      at += static_cast<std::int64_t>(v.size()) + 64;
    }
    cuarrow::copy_batch(back, s);
    at = 0;
    for (auto& v : srcs) {
      SWEEP_EXPECT(std::memcmp(out.data() + at, v.data(), v.size()) == 0);
      at += static_cast<std::int64_t>(v.size()) + 64;
    }
    std::vector<std::uint8_t> out2(16384);
    cuarrow::copy_to_host(out2.data(), dst2, 0, 16384, s);
    SWEEP_EXPECT(std::memcmp(out2.data(), srcs[0].data(), srcs[0].size()) == 0);
    // Enough device-to-device pieces for more than one cuMemcpyBatchAsync
    // (a failure at the second leaves the first queued).
    cuarrow::buffer spread = cuarrow::allocate_device(c0, 2 * 5000, s);
    std::vector<cuarrow::copy_piece> many;
    for (std::int64_t i = 0; i < 5000; ++i) many.push_back({spread, 2 * i, dst, i % 1000, 1});
    cuarrow::copy_batch(many, s);
    std::vector<std::uint8_t> out3(2 * 5000);
    cuarrow::copy_to_host(out3.data(), spread, 0, 2 * 5000, s);
    SWEEP_EXPECT(out3[2 * 4999] == srcs[0][4999 % 1000]);
    // The same on the legacy default stream (the batch on a stream of its
    // own between two events).
    std::vector<cuarrow::copy_piece> legacy(many.begin(), many.begin() + 100);
    for (cuarrow::copy_piece& p : legacy) p.dst_offset += 1;
    cuarrow::copy_batch(legacy, cuarrow::stream_view());
    cuarrow::copy_to_host(out3.data(), spread, 0, 2 * 5000, cuarrow::stream_view());
    SWEEP_EXPECT(out3[2 * 99 + 1] == srcs[0][99]);
  });
}

TEST_F(FaultSweep, StagingPipeline) {
  sweep("staging pipeline", [] {
    cuarrow::context c0 = cuarrow::context::get(0);
    const std::vector<std::uint8_t> src = pattern(600 << 10, 3);
    cuarrow::buffer d = cuarrow::allocate_device(c0, static_cast<std::int64_t>(src.size()));
    cuarrow::copy_from_host(d, 0, src.data(), static_cast<std::int64_t>(src.size()));
    std::vector<std::uint8_t> back(src.size());
    cuarrow::copy_to_host(back.data(), d, 0, d.size());
    SWEEP_EXPECT(back == src);
    // and on a stream of its own, async then synchronized
    cuarrow::stream s(c0);
    std::vector<std::uint8_t> back2(src.size());
    cuarrow::copy_to_host_async(back2.data(), d, 0, d.size(), s);
    s.synchronize();
    SWEEP_EXPECT(back2 == src);
  });
}

ca::record_batch nested_batch() {
  cuarrow_arrow_test::random_arrays gen(1234);
  return gen.batch(4, 60, 3);
}

TEST_F(FaultSweep, NestedTableToDeviceAndBack) {
  const ca::record_batch b = nested_batch();
  sweep("to_device/to_host of a nested table", [&b] {
    cuarrow::context c0 = cuarrow::context::get(0);
    ca::record_batch d = ca::to_device(b, c0);
    ca::record_batch h = ca::to_host(d);
    SWEEP_EXPECT(ca::equals(b, h));
    cuarrow::stream s(c0);
    ca::record_batch d2 = ca::to_device_async(b, c0, s);
    ca::record_batch h2 = ca::to_host(d2, s);
    SWEEP_EXPECT(ca::equals(b, h2));
  });
}

// An Arrow IPC file read by path (ipc/file.hpp): footer and metadata by
// pread, bodies through the staging pipeline (pread into the pinned slots,
// DMA into one allocation per batch), random access and a projection.
TEST_F(FaultSweep, IpcFileByPath) {
  cuarrow_arrow_test::random_arrays gen(77);
  const ca::record_batch b1 = gen.batch(4, 1500, 2);
  const ca::record_batch& b2 = b1;
  const cuarrow::context c0 = cuarrow::context::get(0);
  std::vector<std::uint8_t> bytes;
  {
    cuarrow::ipc::stream_writer w(b1.schema, c0, cuarrow::ipc::stream_writer::format::file);
    w.write(ca::to_device(b1, c0));
    w.write(ca::to_device(b2, c0));
    const cuarrow::buffer f = w.finish();
    bytes.resize(static_cast<std::size_t>(f.size()));
    cuarrow::copy_to_host(bytes.data(), f, 0, f.size());
  }
  char dir[] = "/tmp/cuarrow_fault_file_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/batches.arrow";
  {
    FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), out), bytes.size());
    ASSERT_EQ(std::fclose(out), 0);
  }
  ASSERT_GT(bytes.size(), std::size_t{64 << 10}) << "larger than a staging chunk";
  sweep("IPC file by path", [&] {
    cuarrow::ipc::device_file_reader r(path, c0);
    SWEEP_EXPECT(ca::equals(b2, ca::to_host(r.read_batch(1))));
    SWEEP_EXPECT(ca::equals(b1, ca::to_host(r.read_batch(0))));
    // Both batches through one staging job.
    const std::vector<ca::record_batch> all = r.read_all();
    SWEEP_EXPECT(all.size() == 2 && ca::equals(b1, ca::to_host(all[0])) && ca::equals(b2, ca::to_host(all[1])));
    cuarrow::ipc::file_read_options o;
    o.columns = std::vector<int>{1};
    cuarrow::ipc::device_file_reader p(path, c0, o);
    const ca::record_batch got = ca::to_host(p.read_batch(0));
    SWEEP_EXPECT(got.columns.size() == 1 && ca::equals(b1.columns[1], got.columns[0]));
  });
  std::remove(path.c_str());
  ::rmdir(dir);
}

// A device batch written to an IPC file through the staging pipeline
// (uncompressed, then compressed through the pinned result pool) and read
// back; a failure removes the partial file.
TEST_F(FaultSweep, IpcFileWriter) {
  const ca::record_batch b = nested_batch();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("cuarrow_fault_sweep_" + std::to_string(::getpid()) + ".arrow"))
          .string();
  sweep("IPC file_writer of a nested device batch", [&b, &path] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::stream s(c0);
    const ca::record_batch d = ca::to_device(b, c0, s);
    try {
      {
        cuarrow::ipc::file_writer w(path, d.schema, cuarrow::ipc::file_writer::format::file, s);
        w.write(d);
        w.write(d);
        w.close();
      }
      std::ifstream in(path, std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      cuarrow::buffer h = cuarrow::allocate_host(static_cast<std::int64_t>(bytes.size()));
      std::memcpy(h.mutable_host_data(), bytes.data(), bytes.size());
      const std::vector<ca::record_batch> back = cuarrow::ipc::file_reader(h).read_all();
      SWEEP_EXPECT(back.size() == 2 && ca::equals(b, back[0]) && ca::equals(b, back[1]));
      const std::vector<cuarrow::ipc::compression_codec> codecs = cuarrow::ipc::available_codecs();
      if (!codecs.empty()) {
        cuarrow::ipc::write_options o;
        o.compression = codecs.front();
        cuarrow::ipc::file_writer w(path, d.schema, cuarrow::ipc::file_writer::format::stream, s, {}, o);
        w.write(d);
        w.close();
        SWEEP_EXPECT(w.bytes_written() > 0 &&
                     std::filesystem::file_size(path) == static_cast<std::uintmax_t>(w.bytes_written()));
      }
    } catch (const cuarrow::error&) {
      SWEEP_EXPECT(!std::filesystem::exists(path));  // a failed writer leaves no partial file
      throw;
    }
    std::filesystem::remove(path);
  });
  // Several batches in one write call: one staging-pipeline job for every
  // body (uncompressed), one batched copy and one compression for all
  // (compressed).
  sweep("IPC file_writer of many device batches in one job", [&b, &path] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::stream s(c0);
    const ca::record_batch d = ca::to_device(b, c0, s);
    const std::vector<ca::record_batch> batches = {d, b, d, d};
    try {
      {
        cuarrow::ipc::file_writer w(path, d.schema, cuarrow::ipc::file_writer::format::file, s);
        w.write(batches);
        w.close();
      }
      std::ifstream in(path, std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      cuarrow::buffer h = cuarrow::allocate_host(static_cast<std::int64_t>(bytes.size()));
      std::memcpy(h.mutable_host_data(), bytes.data(), bytes.size());
      const std::vector<ca::record_batch> back = cuarrow::ipc::file_reader(h).read_all();
      SWEEP_EXPECT(back.size() == 4 && ca::equals(b, back[0]) && ca::equals(b, back[1]) && ca::equals(b, back[3]));
      const std::vector<cuarrow::ipc::compression_codec> codecs = cuarrow::ipc::available_codecs();
      if (!codecs.empty()) {
        cuarrow::ipc::write_options o;
        o.compression = codecs.front();
        cuarrow::ipc::file_writer w(path, d.schema, cuarrow::ipc::file_writer::format::stream, s, {}, o);
        w.write(batches);
        w.close();
        SWEEP_EXPECT(w.bytes_written() > 0 &&
                     std::filesystem::file_size(path) == static_cast<std::uintmax_t>(w.bytes_written()));
      }
    } catch (const cuarrow::error&) {
      SWEEP_EXPECT(!std::filesystem::exists(path));  // a failed writer leaves no partial file
      throw;
    }
    std::filesystem::remove(path);
  });
}

TEST_F(FaultSweep, CDeviceInterface) {
  const ca::record_batch b = nested_batch();
  sweep("C device interface export/import", [&b] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::stream s(c0);
    ca::record_batch d = ca::to_device_async(b, c0, s);
    ArrowDeviceArray arr{};
    ArrowSchema schema{};
    ca::export_device_record_batch(d, s, &arr, &schema);
    struct guard {
      ArrowDeviceArray* a;
      ArrowSchema* s;
      ~guard() {
        if (a->array.release) a->array.release(&a->array);
        if (s->release) s->release(s);
      }
    } g{&arr, &schema};
    cuarrow::stream consumer(c0);
    ca::record_batch imported = ca::import_device_record_batch(&arr, &schema, consumer);
    ca::record_batch h = ca::to_host(imported, consumer);
    SWEEP_EXPECT(ca::equals(b, h));
  });
}

TEST_F(FaultSweep, CStream) {
  const ca::record_batch b = nested_batch();
  sweep("C stream to_device/to_host", [&b] {
    cuarrow::context c0 = cuarrow::context::get(0);
    auto left = std::make_shared<int>(2);
    ca::batch_source next = [left, &b]() -> std::optional<ca::record_batch> {
      if (*left == 0) return std::nullopt;
      --*left;
      return b;
    };
    ArrowArrayStream host{};
    ca::export_array_stream(b.schema, next, &host);
    ArrowDeviceArrayStream dev{};
    ca::to_device(&host, c0, &dev);
    ArrowArrayStream back{};
    ca::to_host(&dev, &back);
    ca::array_stream_reader reader(&back);
    int n = 0;
    while (std::optional<ca::record_batch> got = reader.next()) {
      SWEEP_EXPECT(ca::equals(b, *got));
      ++n;
    }
    SWEEP_EXPECT(n == 2);
  });
}

TEST_F(FaultSweep, EventsAndStreams) {
  sweep("events and streams", [] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::stream a(c0);
    cuarrow::stream b(c0, CU_STREAM_DEFAULT);
    cuarrow::event start(c0, CU_EVENT_DEFAULT);
    cuarrow::event done(c0, CU_EVENT_DEFAULT);
    const std::vector<std::uint8_t> src = pattern(4096, 5);
    start.record(a);
    cuarrow::buffer d = cuarrow::allocate_device(c0, 4096, a);
    cuarrow::copy_from_host_async(d, 0, src.data(), 4096, a);
    done.record(a);
    b.wait(done);
    std::vector<std::uint8_t> back(4096);
    cuarrow::copy_to_host_async(back.data(), d, 0, 4096, b);
    b.synchronize();
    SWEEP_EXPECT(back == src);
    done.synchronize();
    SWEEP_EXPECT(done.query());
    a.synchronize();
    SWEEP_EXPECT(a.query());
    SWEEP_EXPECT(done.elapsed_ms_since(start) >= 0.0f);
    {
      cuarrow::scoped_context current(c0);
      cuarrow::stream_view::per_thread_default().synchronize();
    }
    // A stream and a context known only by their handles.
    SWEEP_EXPECT(cuarrow::stream_view(a.handle()).device_number() == 0);
    cuarrow::context wrapped = cuarrow::context::wrap(c0.handle());
    SWEEP_EXPECT(wrapped.device_number() == 0);
    c0.synchronize();
    SWEEP_EXPECT(c0.free_memory() > 0);
  });
}

TEST_F(FaultSweep, PinnedPoolGrowth) {
  sweep("pinned pool growth", [] {
    cuarrow::context c0 = cuarrow::context::get(0);
    std::vector<cuarrow::buffer> held;
    for (std::int64_t size : {4096, 65536, 300000, 1 << 20}) {
      std::optional<cuarrow::buffer> b = cuarrow::try_allocate_pinned_pooled(c0, size);
      if (!b) continue;  // the pool may say no: that is its contract
      SWEEP_EXPECT(b->size() == size);
      std::memset(b->mutable_host_data(), 1, static_cast<std::size_t>(size));
      held.push_back(*b);
    }
    // a device -> host copy whose result comes from the pool
    const std::vector<std::uint8_t> src = pattern(100000, 9);
    cuarrow::buffer d = cuarrow::copy_to_device(c0, src.data(), static_cast<std::int64_t>(src.size()));
    cuarrow::buffer h = cuarrow::copy_to_new_host(d);
    SWEEP_EXPECT(same(src, h.host_data(), src.size()));
  });
}

TEST_F(FaultSweep, ContextCreateDestroy) {
  sweep("context create/destroy", [] {
    cuarrow::shutdown();  // drops the cached primary contexts
    for (int dev = 0; dev < cuarrow::device_count(); ++dev) {
      cuarrow::context c = cuarrow::context::get(dev);
      SWEEP_EXPECT(c.device_number() == dev);
      SWEEP_EXPECT(!c.properties().name.empty());
      cuarrow::buffer b = cuarrow::allocate_device(c, 1024);
      c.synchronize();
    }
    if (cuarrow::device_count() >= 2) {
      (void)cuarrow::context::get(0).enable_peer_access(cuarrow::context::get(1));
    }
    auto pool = std::dynamic_pointer_cast<cuarrow::ipc_pool_resource>(cuarrow::context::get(0).memory_resource());
    if (pool) pool->trim();
  });
}

// Error reporting: a driver call that fails by itself (registering a range
// twice), so that the error path (cuGetErrorName, cuGetErrorString) is
// called and can be faulted too.  The workload expects that one error.
TEST_F(FaultSweep, ErrorReporting) {
  sweep("error reporting", [] {
    cuarrow::context c0 = cuarrow::context::get(0);
    auto owner = std::make_shared<std::vector<std::uint8_t>>(8192);
    cuarrow::buffer r = cuarrow::register_host(c0, owner->data(), 8192, owner);
    try {
      (void)cuarrow::register_host(c0, owner->data(), 8192, owner);
    } catch (const cuarrow::cuda_error& e) {
      if (e.code() != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) throw;  // an injected fault: a typed error
      SWEEP_EXPECT(std::string(e.what()).find("cuMemHostRegister") != std::string::npos);
      return;
    }
    throw wrong_data("registering a range twice did not fail");
  });
}

// IPC: a child process exports device memory and stays alive while the
// sweep opens the handle here.
CUARROW_CHILD_MODE(fault_sweep_ipc_exporter) {
  // args: <file to write the handle to>
  if (argc < 1) return 2;
  cuarrow::context c0 = cuarrow::context::get(0);
  const std::vector<std::uint8_t> src = pattern(10000, 77);
  cuarrow::buffer d = cuarrow::allocate_device(c0, static_cast<std::int64_t>(src.size()), {},
                                               std::make_shared<cuarrow::plain_device_resource>());
  cuarrow::copy_from_host(d, 0, src.data(), static_cast<std::int64_t>(src.size()));
  std::vector<std::byte> h = cuarrow::export_ipc(d).serialize();
  const std::string tmp = std::string(argv[0]) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return 3;
  std::fwrite(h.data(), 1, h.size(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), argv[0]);
  // Stay until the parent is gone or removes the file.
  for (int i = 0; i < 6000; ++i) {
    if (access(argv[0], F_OK) != 0 || getppid() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

TEST_F(FaultSweep, IpcExportAndOpen) {
  ipc_exporter_child exporter;
  ASSERT_TRUE(exporter.handle().has_value()) << "the exporting child did not write its handle";
  const cuarrow::ipc_memory_handle h = *exporter.handle();
  const std::vector<std::uint8_t> expected = pattern(10000, 77);
  sweep("IPC export/open", [&h, &expected] {
    cuarrow::context c0 = cuarrow::context::get(0);
    cuarrow::buffer opened = cuarrow::open_ipc(c0, h);
    std::vector<std::uint8_t> back(expected.size());
    cuarrow::copy_to_host(back.data(), opened, 0, opened.size());
    SWEEP_EXPECT(back == expected);
    // and an export here
    cuarrow::buffer d = cuarrow::allocate_device(c0, 4096, {}, std::make_shared<cuarrow::plain_device_resource>());
    cuarrow::ipc_memory_handle mine = cuarrow::export_ipc(d);
    SWEEP_EXPECT(mine.exported_by_this_process());
    if (cuarrow::device_count() >= 2) {
      cuarrow::buffer on1 = cuarrow::open_ipc(cuarrow::context::get(1), h);
      std::vector<std::uint8_t> back1(expected.size());
      cuarrow::copy_to_host(back1.data(), on1, 0, on1.size());
      SWEEP_EXPECT(back1 == expected);
    }
  });
}

// Pool IPC: a shareable pool is created, its memory exported and the pool
// imported and opened again (the emulation allows importing in the exporting
// process, so one process covers create, export, import and open).
TEST_F(FaultSweep, PoolIpcCreateExportImportOpen) {
  cuarrow::context c0 = cuarrow::context::get(0);
  if (!c0.properties().memory_pools_supported) GTEST_SKIP() << "no memory pools";
  const std::vector<std::uint8_t> expected = pattern(10000, 78);
  sweep("pool IPC create/export/import/open", [&expected] {
    cuarrow::context c = cuarrow::context::get(0);
    auto pool = std::make_shared<cuarrow::ipc_pool_resource>(c);
    cuarrow::buffer d = cuarrow::allocate_device(c, static_cast<std::int64_t>(expected.size()), {}, pool);
    cuarrow::copy_from_host(d, 0, expected.data(), d.size());
    cuarrow::ipc_memory_handle h = cuarrow::export_ipc(d.slice(100));
    SWEEP_EXPECT(h.kind() == cuarrow::ipc_handle_kind::pool);
    cuarrow::shareable_pool shared = cuarrow::export_pool(*pool);
    cuarrow::imported_pool imported = cuarrow::import_pool(c, shared.fd(), shared.pool_id());
    cuarrow::buffer opened = cuarrow::open_ipc(imported, h);
    std::vector<std::uint8_t> back(expected.size() - 100);
    cuarrow::copy_to_host(back.data(), opened, 0, opened.size());
    SWEEP_EXPECT(std::equal(back.begin(), back.end(), expected.begin() + 100));
    if (cuarrow::device_count() >= 2) {
      cuarrow::imported_pool on1 = cuarrow::import_pool(cuarrow::context::get(1), shared.fd());
      cuarrow::buffer o1 = cuarrow::open_ipc(on1, h);
      std::vector<std::uint8_t> back1(back.size());
      cuarrow::copy_to_host(back1.data(), o1, 0, o1.size());
      SWEEP_EXPECT(back1 == back);
    }
  });
}

// Sharing a whole table (ipc/share.hpp): a child shares nested_batch() and
// stays alive while the sweep opens the descriptor here (one IPC open, the
// stream's metadata reads, the mapping's close), and shares one here
// (stream writer into cuMemAlloc memory, export, release).
CUARROW_CHILD_MODE(fault_sweep_share_exporter) {
  // args: <file to write the descriptor to>
  if (argc < 1) return 2;
  const cuarrow::context c0 = cuarrow::context::get(0);
  const ca::record_batch d = ca::to_device(nested_batch(), c0);
  cuarrow::ipc::shared_object shared = cuarrow::ipc::share(d.schema, std::span(&d, 1), c0);
  const std::vector<std::byte> desc = shared.descriptor();
  const std::string tmp = std::string(argv[0]) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return 3;
  std::fwrite(desc.data(), 1, desc.size(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), argv[0]);
  for (int i = 0; i < 6000; ++i) {
    if (access(argv[0], F_OK) != 0 || getppid() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

TEST_F(FaultSweep, ShareAndOpenShared) {
  char dir[] = "/tmp/cuarrow_fault_share_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/descriptor";
  child_result exporter;
  std::thread child([&] { exporter = run_self("fault_sweep_share_exporter", {file}); });
  std::vector<std::byte> desc(cuarrow::ipc::shared_object::descriptor_size);
  bool got = false;
  for (int i = 0; i < 600 && !got; ++i) {
    if (FILE* f = std::fopen(file.c_str(), "rb")) {
      got = std::fread(desc.data(), 1, desc.size(), f) == desc.size();
      std::fclose(f);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (got) {
    const ca::record_batch expected = nested_batch();
    sweep("share / open_shared", [&desc, &expected] {
      const cuarrow::context c0 = cuarrow::context::get(0);
      const cuarrow::ipc::opened_shared o = cuarrow::ipc::open_shared(c0, desc);
      SWEEP_EXPECT(o.batches.size() == 1 && ca::equals(expected, ca::to_host(o.batches[0])));
      const ca::record_batch d = ca::to_device(expected, c0);
      cuarrow::ipc::shared_object mine = cuarrow::ipc::share(d.schema, std::span(&d, 1), c0);
      SWEEP_EXPECT(cuarrow::ipc::read_shared_descriptor(mine.descriptor()).handle.size() == mine.data().size());
      mine.release();
    });
  }
  std::remove(file.c_str());  // the child's signal to go
  child.join();
  ::rmdir(dir);
  ASSERT_TRUE(got) << "the sharing child wrote no descriptor: " << exporter.output;
  EXPECT_TRUE(exporter.ok()) << exporter.output;
}

}  // namespace

ipc_exporter_child::ipc_exporter_child() {
  char path[] = "/tmp/cuarrow_fault_ipc_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return;
  close(fd);
  unlink(path);
  file_ = path;
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return;
  child_ = fork();
  if (child_ < 0) return;
  if (child_ == 0) {
    execl(self, self, "--cuarrow-child=fault_sweep_ipc_exporter", file_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<std::byte> bytes;
  for (int i = 0; i < 600 && bytes.empty(); ++i) {
    if (FILE* f = std::fopen(file_.c_str(), "rb")) {
      bytes.resize(cuarrow::ipc_memory_handle::serialized_size);
      size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
      std::fclose(f);
      if (n != bytes.size()) bytes.clear();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (!bytes.empty()) handle_ = cuarrow::ipc_memory_handle::deserialize(bytes);
}

ipc_exporter_child::~ipc_exporter_child() {
  if (!file_.empty()) unlink(file_.c_str());  // the child's signal to go
  if (child_ > 0) {
    int st = 0;
    waitpid(child_, &st, 0);
  }
}

}  // namespace cuarrow_test
