// IPC across processes, process exit with live work, fork.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "support.hpp"

using namespace emu_test;

namespace {

std::string to_hex(const CUipcMemHandle& h) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (char c : h.reserved) {
    auto b = static_cast<unsigned char>(c);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

bool from_hex(const std::string& s, CUipcMemHandle* h) {
  if (s.size() != 2 * sizeof h->reserved) return false;
  for (size_t i = 0; i < sizeof h->reserved; ++i)
    h->reserved[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

// Opens a handle in a context of `device`.
int open_child(int device, const std::string& hex, CUdeviceptr* p, CUcontext* ctx) {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(ctx, device));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(*ctx));
  CUipcMemHandle h{};
  CHILD_CHECK(from_hex(hex, &h));
  CHILD_CU(CUDA_SUCCESS, A.cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  return 0;
}

}  // namespace

// ipc_open <handle> <device> <size> <seed>: checks the exporter's bytes, then
// overwrites them with the pattern of seed + 1.
EMU_CHILD_MODE(ipc_open) {
  CHILD_CHECK(argc == 4);
  Api& A = api();
  int device = std::atoi(argv[1]);
  size_t size = std::stoull(argv[2]);
  unsigned seed = static_cast<unsigned>(std::atoi(argv[3]));
  CUdeviceptr p = 0;
  CUcontext ctx = nullptr;
  if (int r = open_child(device, argv[0], &p, &ctx)) return r;
  // A device address of this process, on the opening device.
  unsigned type = 0;
  int ordinal = -1;
  size_t range = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
  CHILD_CU(CUDA_SUCCESS, A.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  CHILD_CU(CUDA_SUCCESS, A.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
  CHILD_CHECK(type == CU_MEMORYTYPE_DEVICE && ordinal == device && range == size);
  std::vector<unsigned char> got(size);
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyDtoHAsync(got.data(), p, size, nullptr));
  CHILD_CHECK(got == pattern(size, seed));
  // Out of bounds is checked here as for any allocation.
  CHILD_CU(CUDA_ERROR_INVALID_VALUE, A.cuMemsetD8Async(p, 0, size + 1, nullptr));
  // Opening again in this context: the same pointer, reference counted.
  CUipcMemHandle h{};
  CHILD_CHECK(from_hex(argv[0], &h));
  CUdeviceptr again = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuIpcOpenMemHandle(&again, h, 0));
  CHILD_CHECK(again == p);
  CHILD_CHECK(A.ipc_mapping_count() == 1);
  // Write back through the mapping.
  auto next = pattern(size, seed + 1);
  CHILD_CU(CUDA_SUCCESS, A.cuMemcpyHtoDAsync(p, next.data(), size, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
  // An imported allocation cannot be exported again or freed.
  CUipcMemHandle re{};
  CHILD_CU(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(&re, p));
  CHILD_CU(CUDA_ERROR_INVALID_VALUE, A.cuMemFree(p));
  CHILD_CU(CUDA_SUCCESS, A.cuIpcCloseMemHandle(p));
  CHILD_CHECK(A.ipc_mapping_count() == 1);
  CHILD_CU(CUDA_SUCCESS, A.cuIpcCloseMemHandle(p));
  CHILD_CHECK(A.ipc_mapping_count() == 0);
  CHILD_CU(CUDA_ERROR_INVALID_VALUE, A.cuIpcCloseMemHandle(p));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPopCurrent(nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(device));
  return 0;
}

namespace {

void exchange_with_child(Api& A, int child_device, const std::map<std::string, std::optional<std::string>>& env) {
  // An allocation at an offset that is not page-aligned in device memory.
  CUdeviceptr pad = 0, p = 0;
  ASSERT_EQ(CUDA_SUCCESS, A.cuMemAlloc(&pad, 1000));
  const size_t size = (1 << 20) + 333;
  ASSERT_EQ(CUDA_SUCCESS, A.cuMemAlloc(&p, size));
  write_device(p, pattern(size, 40));
  CUipcMemHandle h{};
  ASSERT_EQ(CUDA_SUCCESS, A.cuIpcGetMemHandle(&h, p));
  ChildResult r = run_child("ipc_open", {to_hex(h), std::to_string(child_device), std::to_string(size), "40"}, env);
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
  EXPECT_EQ(pattern(size, 41), read_device(p, size)) << "the child's writes are visible to the exporter";
  EXPECT_EQ(CUDA_SUCCESS, A.cuMemFree(p));
  EXPECT_EQ(CUDA_SUCCESS, A.cuMemFree(pad));
}

}  // namespace

TEST_F(Emu, IpcHandleOpensInAnotherProcess) { exchange_with_child(A, 0, {}); }

TEST_F(Emu, IpcHandleOpensOnAnotherDeviceOfAnotherProcess) {
  exchange_with_child(A, 1, {{"CUARROW_EMULATED_DEVICES", "2"}});
}

TEST_F(Emu, IpcOpenInTheExportingProcessIsInvalidContext) {
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 4096));
  CUipcMemHandle h{};
  CU_ASSERT(A.cuIpcGetMemHandle(&h, p));
  CUdeviceptr q = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, A.cuIpcOpenMemHandle(&q, h, 0));
  // An interior pointer exports the whole allocation (the same handle).
  CUipcMemHandle inner{};
  CU_ASSERT(A.cuIpcGetMemHandle(&inner, p + 100));
  EXPECT_EQ(0, std::memcmp(&h, &inner, sizeof h));
  CU_ASSERT(A.cuMemFree(p));
}

TEST_F(Emu, MalformedIpcHandlesAreInvalidValue) {
  CUdeviceptr q = 0;
  CUipcMemHandle zero{};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(&q, zero, 0));
  CUipcMemHandle junk{};
  for (size_t i = 0; i < sizeof junk.reserved; ++i) junk.reserved[i] = static_cast<char>(i * 37 + 1);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(&q, junk, 0));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 4096));
  CUipcMemHandle h{};
  CU_ASSERT(A.cuIpcGetMemHandle(&h, p));
  for (size_t i = 8; i < sizeof h.reserved; ++i) {  // any corrupted byte
    CUipcMemHandle bad = h;
    bad.reserved[i] ^= 0x10;
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(&q, bad, 0)) << "byte " << i;
  }
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(&q, h, 0x8));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(nullptr, h, 0));
  CU_ASSERT(A.cuMemFree(p));
}

TEST_F(Emu, IpcGetMemHandleRefusesWhatItCannotExport) {
  CUipcMemHandle h{};
  CUstream s = stream();
  CUdeviceptr pooled = 0;
  CU_ASSERT(A.cuMemAllocAsync(&pooled, 4096, s));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(&h, pooled));  // pool memory
  CU_ASSERT(A.cuMemFreeAsync(pooled, s));
  void* pinned = nullptr;
  CU_ASSERT(A.cuMemHostAlloc(&pinned, 4096, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(pinned)));
  CU_ASSERT(A.cuMemFreeHost(pinned));
  CUdeviceptr p = 0;
  CU_ASSERT(A.cuMemAlloc(&p, 64));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(nullptr, p));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcCloseMemHandle(p));  // not an imported mapping
  CU_ASSERT(A.cuMemFree(p));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcGetMemHandle(&h, p));  // freed
}

EMU_CHILD_MODE(ipc_export_and_exit) {
  Api& A = api();
  CUcontext c = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c));
  CUdeviceptr p = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuMemAlloc(&p, 4096));
  CUipcMemHandle h{};
  CHILD_CU(CUDA_SUCCESS, A.cuIpcGetMemHandle(&h, p));
  std::printf("HANDLE=%s\n", to_hex(h).c_str());
  std::fflush(stdout);
  return 0;
}

TEST_F(Emu, IpcHandleOfAProcessThatExitedIsInvalidValue) {
  ChildResult r = run_child("ipc_export_and_exit", {});
  ASSERT_TRUE(r.exited && r.code == 0) << r.output;
  size_t at = r.output.find("HANDLE=");
  ASSERT_NE(std::string::npos, at) << r.output;
  CUipcMemHandle h{};
  ASSERT_TRUE(from_hex(r.output.substr(at + 7, 128), &h));
  CUdeviceptr q = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, A.cuIpcOpenMemHandle(&q, h, 0));
  EXPECT_EQ(0u, A.ipc_mapping_count());
}

// ---------------------------------------------------------------------------
// Process exit and fork

namespace {

// Queues work everywhere and leaves it all behind.
int leave_work_behind() {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CUcontext c = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(c));
  auto slow = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  CUdeviceptr d = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuMemAlloc(&d, 1 << 20));
  void* pinned = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuMemHostAlloc(&pinned, 1 << 20, 0));
  for (int i = 0; i < 4; ++i) {
    CUstream s = nullptr;
    CHILD_CU(CUDA_SUCCESS, A.cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0));
    CUevent e = nullptr;
    CHILD_CU(CUDA_SUCCESS, A.cuEventCreate(&e, 0));
    for (int j = 0; j < 5; ++j) {
      CHILD_CU(CUDA_SUCCESS, A.cuLaunchHostFunc(s, slow, nullptr));
      CHILD_CU(CUDA_SUCCESS, A.cuMemcpyDtoHAsync(pinned, d, 1 << 20, s));
      CHILD_CU(CUDA_SUCCESS, A.cuEventRecord(e, s));
    }
    CUdeviceptr pooled = 0;
    CHILD_CU(CUDA_SUCCESS, A.cuMemAllocAsync(&pooled, 4096, s));
  }
  CHILD_CU(CUDA_SUCCESS, A.cuLaunchHostFunc(nullptr, slow, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuLaunchHostFunc(CU_STREAM_PER_THREAD, slow, nullptr));
  std::thread([&] {
    A.cuCtxPushCurrent(c);
    A.cuLaunchHostFunc(CU_STREAM_PER_THREAD, slow, nullptr);  // the thread ends first
  }).join();
  return 0;
}

}  // namespace

EMU_CHILD_MODE(exit_with_live_work) { return leave_work_behind(); }

TEST(Process, ExitWithLiveStreamsNeitherCrashesNorHangs) {
  ChildResult r = run_child("exit_with_live_work", {}, {}, std::chrono::seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

EMU_CHILD_MODE(dlclose_with_live_work) {
  if (int r = leave_work_behind()) return r;
  return dlclose(api().lib) == 0 ? 0 : 1;  // unloads the driver: its teardown runs now
}

TEST(Process, DlcloseWithLiveStreamsNeitherCrashesNorHangs) {
  ChildResult r = run_child("dlclose_with_live_work", {}, {}, std::chrono::seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

namespace {
// Constructed before main, so destroyed after the driver's own teardown (the
// driver is loaded later, in main): a call from here is one made during
// process shutdown.
struct ShutdownProbe {
  bool armed = false;
  ~ShutdownProbe() {
    if (!armed) return;
    int n = 0;
    std::printf("AT_EXIT=%d\n", static_cast<int>(api().cuDeviceGetCount(&n)));
    std::fflush(stdout);
  }
} g_shutdown_probe;
}  // namespace

EMU_CHILD_MODE(call_during_shutdown) {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  g_shutdown_probe.armed = true;
  return 0;
}

TEST(Process, CallsDuringShutdownAnswerDeinitialized) {
  ChildResult r = run_child("call_during_shutdown", {});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
  EXPECT_NE(std::string::npos, r.output.find("AT_EXIT=" + std::to_string(CUDA_ERROR_DEINITIALIZED))) << r.output;
}

TEST_F(Emu, ForkedChildCannotUseTheInheritedDriver) {
  CUstream s = stream();
  CU_ASSERT(A.cuLaunchHostFunc(
      s, [](void*) {}, nullptr));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // As with CUDA: the parent's driver state is unusable after fork.
    int n = 0;
    int code = 0;
    if (A.cuInit(0) != CUDA_ERROR_NOT_INITIALIZED) code |= 1;
    if (A.cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED) code |= 2;
    if (A.cuStreamQuery(s) != CUDA_ERROR_NOT_INITIALIZED) code |= 4;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(0, WEXITSTATUS(status));
  CU_EXPECT(A.cuStreamSynchronize(s));  // the parent is unaffected
}
