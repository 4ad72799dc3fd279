// Test support: loads libcuarrow_cuda_emulation.so exactly as cuarrow does
// (dlopen + cuGetProcAddress_v2 for every entry of driver_entry_points.def),
// a fixture with a current primary context, stream gates, and a runner for
// child processes (other configurations, IPC, process exit).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuarrow_emulation.h"

// gtest prints CUresult values by name.
void PrintTo(CUresult r, std::ostream* os);

namespace emu_test {

struct Api {
  void* lib = nullptr;
  PFN_cuGetProcAddress_v12000 getProcAddress = nullptr;  // dlsym("cuGetProcAddress_v2")
  // One member per entry point, named as the entry (through <cuda.h>'s
  // renaming macros, consistently), typed PFN_<name>_v<version>.
#define CUARROW_DRIVER_ENTRY(name, version, required) PFN_##name##_v##version name = nullptr;
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY
  // Control API (dlsym).
  decltype(&cuarrow_emu_primary_ctx_retain_count) retain_count = nullptr;
  decltype(&cuarrow_emu_device_allocation_count) device_allocation_count = nullptr;
  decltype(&cuarrow_emu_device_bytes_in_use) device_bytes_in_use = nullptr;
  decltype(&cuarrow_emu_host_allocation_count) host_allocation_count = nullptr;
  decltype(&cuarrow_emu_host_registration_count) host_registration_count = nullptr;
  decltype(&cuarrow_emu_ipc_mapping_count) ipc_mapping_count = nullptr;
  decltype(&cuarrow_emu_pool_count) pool_count = nullptr;
  decltype(&cuarrow_emu_stream_count) stream_count = nullptr;
  decltype(&cuarrow_emu_event_count) event_count = nullptr;
  decltype(&cuarrow_emu_async_fault_count) async_fault_count = nullptr;
  decltype(&cuarrow_emu_set_op_delay_us) set_op_delay_us = nullptr;
};

// Loads the library once per process; null (with a message on stderr) if it
// cannot be loaded or an entry point is missing.
Api* load_api();
Api& api();  // load_api() or abort

struct EntryInfo {
  const char* name;
  int version;
  bool required;
};
const std::vector<EntryInfo>& listed_entry_points();

const char* error_name(CUresult r);

// A point in a stream's queue that holds the stream until opened: what a
// long-running kernel would do.  Gates live until process exit (a stream
// worker may still touch one after a test ends); the fixture opens them all.
class Gate {
 public:
  static void CUDA_CB wait_fn(void* self);
  void open();
  bool wait_reached(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::atomic<int> reached{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};
Gate& new_gate();
void open_all_gates();

// Runs this test binary again as a child process in the given mode
// ("--emu-child=<mode>"), with the CUARROW_EMULATED_* environment replaced by
// `env` (absent value: unset).
struct ChildResult {
  bool exited = false;
  int code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;
};
ChildResult run_child(const std::string& mode, const std::vector<std::string>& args,
                      const std::map<std::string, std::optional<std::string>>& env = {},
                      std::chrono::seconds timeout = std::chrono::seconds(60));

// Child modes are functions returning the exit code; CHILD_CHECK fails one.
using ChildMain = int (*)(int argc, char** argv);
bool register_child_mode(const char* name, ChildMain fn);
int run_child_mode(const std::string& mode, int argc, char** argv);

#define EMU_CHILD_MODE(name)                                        \
  static int child_mode_##name(int argc, char** argv);              \
  [[maybe_unused]] static const bool child_mode_registered_##name = \
      ::emu_test::register_child_mode(#name, &child_mode_##name);   \
  static int child_mode_##name([[maybe_unused]] int argc, [[maybe_unused]] char** argv)

#define CHILD_CHECK(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "child check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

#define CHILD_CU(expected, expr)                                                                                    \
  do {                                                                                                              \
    CUresult child_r_ = (expr);                                                                                     \
    if (child_r_ != (expected)) {                                                                                   \
      std::fprintf(stderr, "child check failed at %s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr, \
                   ::emu_test::error_name(child_r_), ::emu_test::error_name(expected));                             \
      return 1;                                                                                                     \
    }                                                                                                               \
  } while (0)

// The machine the test process itself runs (set in main before cuInit).
inline constexpr int kDevices = 2;
inline constexpr size_t kMemory = size_t{256} << 20;

// A primary context of device 0 current on the test thread; everything the
// test retains is released at the end, so each test ends with the contexts
// destroyed (which frees all their resources).  Asynchronous faults are
// unexpected unless the test says how many it causes.
class Emu : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  CUcontext retain(int device);         // released in TearDown
  void release(int device);             // releases one retain made with retain()
  CUstream stream(unsigned flags = 0);  // created in the current context, destroyed in TearDown

  Api& A = api();
  CUcontext ctx0 = nullptr;
  size_t expected_faults = 0;

 private:
  std::vector<int> retained_;
  std::vector<std::pair<CUcontext, CUstream>> streams_;
  size_t faults_at_start_ = 0;
};

// Device-memory helpers for tests (synchronous, through the legacy stream).
std::vector<unsigned char> read_device(CUdeviceptr p, size_t n);
void write_device(CUdeviceptr p, const std::vector<unsigned char>& bytes);
std::vector<unsigned char> pattern(size_t n, unsigned seed);

}  // namespace emu_test

#define CU_ASSERT(expr) ASSERT_EQ(CUDA_SUCCESS, (expr))
#define CU_EXPECT(expr) EXPECT_EQ(CUDA_SUCCESS, (expr))
