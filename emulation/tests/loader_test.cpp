// The loader (cuGetProcAddress), error names, cuInit and configuration.
#include <dlfcn.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "support.hpp"

using namespace emu_test;

namespace {

CUresult get_proc(const char* name, void** pfn, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                  CUdriverProcAddressQueryResult* status = nullptr) {
  return api().getProcAddress(name, pfn, version, flags, status);
}

}  // namespace

TEST(Loader, ExportsOnlyTheLoaderEntryPoints) {
  void* lib = api().lib;
  for (const char* name : {"cuGetProcAddress_v2", "cuGetProcAddress", "cuInit", "cuDriverGetVersion",
                           "cuarrow_emu_stream_count", "cuarrow_emu_ipc_mapping_count"})
    EXPECT_NE(nullptr, dlsym(lib, name)) << name;
  // Everything else is reached only through cuGetProcAddress.
  for (const char* name : {"cuMemAlloc", "cuMemAlloc_v2", "cuStreamCreate", "cuCtxPushCurrent_v2", "cuGetErrorName",
                           "cuIpcOpenMemHandle_v2", "cuDeviceGet"})
    EXPECT_EQ(nullptr, dlsym(lib, name)) << name;
}

TEST(Loader, EveryListedEntryPointResolvesAtItsVersion) {
  ASSERT_FALSE(listed_entry_points().empty());
  for (const EntryInfo& e : listed_entry_points()) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(CUDA_SUCCESS, get_proc(e.name, &pfn, e.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status)) << e.name;
    EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status) << e.name;
    EXPECT_NE(nullptr, pfn) << e.name;
    // Asking with 12000 (what a CUDA 12 build passes) gives the same ABI:
    // no listed symbol has a newer ABI at or below 12000.  A symbol newer
    // than 12.0 (cuMemcpyBatchAsync) is not found.
    void* at12 = nullptr;
    if (e.version > 12000) {
      EXPECT_EQ(CUDA_ERROR_NOT_FOUND, get_proc(e.name, &at12, 12000)) << e.name;
      EXPECT_EQ(nullptr, at12) << e.name;
      continue;
    }
    EXPECT_EQ(CUDA_SUCCESS, get_proc(e.name, &at12, 12000)) << e.name;
    EXPECT_EQ(pfn, at12) << e.name;
  }
}

TEST(Loader, UnknownSymbolIsNotFound) {
  void* pfn = reinterpret_cast<void*>(0x1234);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND,
            get_proc("cuNoSuchFunction", &pfn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  EXPECT_EQ(nullptr, pfn);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status);
  // Real names the emulation does not implement are unknown too.
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, get_proc("cuGraphLaunch", &pfn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  EXPECT_EQ(nullptr, pfn);
}

TEST(Loader, VersionTooOldIsReported) {
  void* pfn = reinterpret_cast<void*>(0x1234);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, get_proc("cuMemAllocAsync", &pfn, 11000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
  EXPECT_EQ(nullptr, pfn);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status);
}

TEST(Loader, NewerAbiIsSelectedByVersion) {
  // As with the real driver, the cudaVersion argument picks the ABI:
  // cuCtxSynchronize at 13000 is the CUDA 13 form taking a context.
  void* v2000 = nullptr;
  void* v13000 = nullptr;
  CU_ASSERT(get_proc("cuCtxSynchronize", &v2000, 12000));
  CU_ASSERT(get_proc("cuCtxSynchronize", &v13000, 13000));
  EXPECT_NE(v2000, v13000);
  CU_ASSERT(api().cuInit(0));
  CUcontext ctx = nullptr;
  CU_ASSERT(api().cuDevicePrimaryCtxRetain(&ctx, 0));
  EXPECT_EQ(CUDA_SUCCESS, reinterpret_cast<PFN_cuCtxSynchronize_v13000>(v13000)(ctx));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT,
            reinterpret_cast<PFN_cuCtxSynchronize_v13000>(v13000)(reinterpret_cast<CUcontext>(0x10)));
  void* get_device = nullptr;
  CU_ASSERT(get_proc("cuCtxGetDevice", &get_device, 13000));
  CUdevice dev = -1;
  EXPECT_EQ(CUDA_SUCCESS, reinterpret_cast<PFN_cuCtxGetDevice_v13000>(get_device)(&dev, ctx));
  EXPECT_EQ(0, dev);
  void* elapsed_old = nullptr;
  void* elapsed_new = nullptr;
  CU_ASSERT(get_proc("cuEventElapsedTime", &elapsed_old, 12000));
  CU_ASSERT(get_proc("cuEventElapsedTime", &elapsed_new, 12080));
  EXPECT_NE(elapsed_old, elapsed_new);
  CU_ASSERT(api().cuDevicePrimaryCtxRelease(0));
}

TEST(Loader, InvalidArguments) {
  void* pfn = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, get_proc(nullptr, &pfn, 12000));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().getProcAddress("cuInit", nullptr, 12000, 0, nullptr));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, get_proc("cuInit", &pfn, 12000, 0x10));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            get_proc("cuInit", &pfn, 12000,
                     CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  // CU_GET_PROC_ADDRESS_DEFAULT (0) means the legacy stream for the driver API.
  void* legacy = nullptr;
  CU_ASSERT(get_proc("cuMemcpyAsync", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT));
  CU_ASSERT(get_proc("cuMemcpyAsync", &legacy, 12000));
  EXPECT_EQ(legacy, pfn);
}

TEST(Loader, OldFourArgumentFormAndSelfLookup) {
  using Old = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto old = reinterpret_cast<Old>(dlsym(api().lib, "cuGetProcAddress"));
  ASSERT_NE(nullptr, old);
  void* a = nullptr;
  void* b = nullptr;
  CU_ASSERT(old("cuMemAlloc", &a, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM));
  CU_ASSERT(get_proc("cuMemAlloc", &b, 12000));
  EXPECT_EQ(a, b);
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, old("cuNothing", &a, 12000, 0));
  // cuGetProcAddress finds itself, in both forms.
  void* self_v2 = nullptr;
  void* self_v1 = nullptr;
  CU_ASSERT(get_proc("cuGetProcAddress", &self_v2, 12000));
  CU_ASSERT(get_proc("cuGetProcAddress", &self_v1, 11030));
  ASSERT_NE(nullptr, self_v2);
  EXPECT_NE(self_v1, self_v2);
  void* again = nullptr;
  CU_EXPECT(reinterpret_cast<PFN_cuGetProcAddress_v12000>(self_v2)("cuMemAlloc", &again, 12000, 0, nullptr));
  EXPECT_EQ(b, again);
}

TEST(Loader, DriverVersionWorksBeforeInit) {
  int v = 0;
  CU_ASSERT(api().cuDriverGetVersion(&v));
  EXPECT_EQ(13000, v);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().cuDriverGetVersion(nullptr));
  using DriverGetVersion = CUresult (*)(int*);
  auto exported = reinterpret_cast<DriverGetVersion>(dlsym(api().lib, "cuDriverGetVersion"));
  ASSERT_NE(nullptr, exported);
  v = 0;
  CU_ASSERT(exported(&v));
  EXPECT_EQ(13000, v);
}

TEST_F(Emu, PerThreadFlagSelectsPerThreadStreamVariants) {
  void* legacy_query = nullptr;
  void* ptsz_query = nullptr;
  CU_ASSERT(api().getProcAddress("cuStreamQuery", &legacy_query, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr));
  CU_ASSERT(api().getProcAddress("cuStreamQuery", &ptsz_query, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                 nullptr));
  EXPECT_NE(legacy_query, ptsz_query);
  void* init_a = nullptr;
  void* init_b = nullptr;
  CU_ASSERT(api().getProcAddress("cuInit", &init_a, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr));
  CU_ASSERT(api().getProcAddress("cuInit", &init_b, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  EXPECT_EQ(init_a, init_b);  // no stream argument: one variant

  // In the _ptsz variant, stream 0 is the thread's per-thread stream.
  Gate& gate = new_gate();
  CU_ASSERT(A.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Gate::wait_fn, &gate));
  ASSERT_TRUE(gate.wait_reached());
  EXPECT_EQ(CUDA_ERROR_NOT_READY, reinterpret_cast<PFN_cuStreamQuery_v7000_ptsz>(ptsz_query)(nullptr));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, A.cuStreamQuery(CU_STREAM_PER_THREAD));
  gate.open();
  CU_EXPECT(A.cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_EQ(CUDA_SUCCESS, reinterpret_cast<PFN_cuStreamQuery_v7000_ptsz>(ptsz_query)(nullptr));
}

// ---------------------------------------------------------------------------
// Error names and texts

TEST(Errors, EveryCuresultOfCudaHHasItsNameAndAText) {
  std::ifstream in(CUARROW_EMU_CUDA_H);
  ASSERT_TRUE(in) << CUARROW_EMU_CUDA_H;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t begin = text.find("typedef enum cudaError_enum {");
  size_t end = text.find("} CUresult;", begin);
  ASSERT_NE(std::string::npos, begin);
  ASSERT_NE(std::string::npos, end);
  std::string body = text.substr(begin, end - begin);
  std::regex entry(R"(\n\s*(CUDA_[A-Z0-9_]+)\s*=\s*([0-9]+))");
  int n = 0;
  for (std::sregex_iterator it(body.begin(), body.end(), entry), last; it != last; ++it, ++n) {
    std::string name = (*it)[1];
    auto code = static_cast<CUresult>(std::stoi((*it)[2]));
    const char* got_name = nullptr;
    const char* got_text = nullptr;
    EXPECT_EQ(CUDA_SUCCESS, api().cuGetErrorName(code, &got_name)) << name;
    EXPECT_EQ(CUDA_SUCCESS, api().cuGetErrorString(code, &got_text)) << name;
    ASSERT_NE(nullptr, got_name) << name;
    ASSERT_NE(nullptr, got_text) << name;
    EXPECT_EQ(name, got_name);
    EXPECT_GT(std::strlen(got_text), 0u) << name;
  }
  EXPECT_GT(n, 90);
}

TEST(Errors, RealTexts) {
  auto text = [](CUresult r) {
    const char* s = nullptr;
    api().cuGetErrorString(r, &s);
    return std::string(s ? s : "");
  };
  EXPECT_EQ("no error", text(CUDA_SUCCESS));
  EXPECT_EQ("invalid argument", text(CUDA_ERROR_INVALID_VALUE));
  EXPECT_EQ("out of memory", text(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ("initialization error", text(CUDA_ERROR_NOT_INITIALIZED));
  EXPECT_EQ("invalid device context", text(CUDA_ERROR_INVALID_CONTEXT));
  EXPECT_EQ("invalid resource handle", text(CUDA_ERROR_INVALID_HANDLE));
  EXPECT_EQ("device not ready", text(CUDA_ERROR_NOT_READY));
  EXPECT_EQ("an illegal memory access was encountered", text(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_EQ("named symbol not found", text(CUDA_ERROR_NOT_FOUND));
  const char* name = nullptr;
  CU_ASSERT(api().cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name));
  EXPECT_STREQ("CUDA_ERROR_OUT_OF_MEMORY", name);
}

TEST(Errors, UnknownCodeIsInvalidValueWithNullString) {
  const char* s = "stale";
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().cuGetErrorName(static_cast<CUresult>(1000), &s));
  EXPECT_EQ(nullptr, s);
  s = "stale";
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().cuGetErrorString(static_cast<CUresult>(1000), &s));
  EXPECT_EQ(nullptr, s);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().cuGetErrorName(CUDA_SUCCESS, nullptr));
}

// ---------------------------------------------------------------------------
// cuInit and configuration (other configurations run in child processes)

TEST(Init, FlagsMustBeZeroAndInitIsIdempotent) {
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, api().cuInit(1));
  CU_EXPECT(api().cuInit(0));
  CU_EXPECT(api().cuInit(0));
  using Init = CUresult (*)(unsigned);
  auto exported = reinterpret_cast<Init>(dlsym(api().lib, "cuInit"));
  ASSERT_NE(nullptr, exported);
  CU_EXPECT(exported(0));
}

EMU_CHILD_MODE(pre_init) {
  Api& A = api();
  // Before cuInit: the loader, versions and error strings work; nothing else.
  int v = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuDriverGetVersion(&v));
  const char* s = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  int count = -1;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuDeviceGetCount(&count));
  CUdevice dev = -1;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuDevicePrimaryCtxRetain(&ctx, 0));
  CUdeviceptr p = 0;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuMemAlloc(&p, 16));
  CUstream st = nullptr;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuStreamCreate(&st, 0));
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuCtxGetCurrent(&ctx));
  CHILD_CHECK(A.stream_count() == 0 && A.retain_count(0) == -1);
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CHILD_CU(CUDA_SUCCESS, A.cuDeviceGetCount(&count));
  CHILD_CHECK(count == 1);  // the default
  return 0;
}

TEST(Init, NothingButLoaderAndErrorsBeforeCuInit) {
  ChildResult r = run_child("pre_init", {});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

// config_check <devices> <memory bytes> <pools 0/1> <peer 0/1>
EMU_CHILD_MODE(config_check) {
  CHILD_CHECK(argc == 4);
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  int count = 0;
  CHILD_CU(CUDA_SUCCESS, A.cuDeviceGetCount(&count));
  CHILD_CHECK(count == std::atoi(argv[0]));
  for (int d = 0; d < count; ++d) {
    size_t mem = 0;
    CHILD_CU(CUDA_SUCCESS, A.cuDeviceTotalMem(&mem, d));
    CHILD_CHECK(mem == std::stoull(argv[1]));
    int pools = -1;
    CHILD_CU(CUDA_SUCCESS, A.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d));
    CHILD_CHECK(pools == std::atoi(argv[2]));
  }
  if (count >= 2) {
    int peer = -1;
    CHILD_CU(CUDA_SUCCESS, A.cuDeviceCanAccessPeer(&peer, 0, 1));
    CHILD_CHECK(peer == std::atoi(argv[3]));
  }
  return 0;
}

TEST(Config, DefaultsAreOneDeviceOfOneGiBWithPools) {
  ChildResult r = run_child("config_check", {"1", std::to_string(1ull << 30), "1", "0"});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

TEST(Config, DevicesAndMemoryFromTheEnvironment) {
  struct Case {
    const char* memory;
    unsigned long long bytes;
  };
  for (Case c : {Case{"64M", 64ull << 20}, Case{"2G", 2ull << 30}, Case{"524288K", 512ull << 20},
                 Case{"1048576", 1ull << 20}, Case{"3m", 3ull << 20}}) {
    ChildResult r = run_child("config_check", {"3", std::to_string(c.bytes), "1", "1"},
                              {{"CUARROW_EMULATED_DEVICES", "3"}, {"CUARROW_EMULATED_MEMORY", c.memory}});
    EXPECT_TRUE(r.exited && r.code == 0) << c.memory << ": " << r.output;
  }
}

TEST(Config, NoPoolsAndNoPeerSwitches) {
  ChildResult r = run_child(
      "config_check", {"2", std::to_string(1ull << 30), "0", "0"},
      {{"CUARROW_EMULATED_DEVICES", "2"}, {"CUARROW_EMULATED_NO_POOLS", "1"}, {"CUARROW_EMULATED_NO_PEER", "1"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
  r = run_child("config_check", {"2", std::to_string(1ull << 30), "1", "1"},
                {{"CUARROW_EMULATED_DEVICES", "2"}, {"CUARROW_EMULATED_NO_POOLS", "0"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

EMU_CHILD_MODE(zero_devices) {
  Api& A = api();
  // The real driver on a machine without GPUs: cuInit fails.
  CHILD_CU(CUDA_ERROR_NO_DEVICE, A.cuInit(0));
  int count = -1;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuDeviceGetCount(&count));
  CHILD_CU(CUDA_ERROR_NO_DEVICE, A.cuInit(0));
  return 0;
}

TEST(Config, ZeroDevicesFailsCuInitWithNoDevice) {
  ChildResult r = run_child("zero_devices", {}, {{"CUARROW_EMULATED_DEVICES", "0"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}

EMU_CHILD_MODE(bad_config) {
  Api& A = api();
  CHILD_CU(CUDA_ERROR_INVALID_VALUE, A.cuInit(0));
  int count = -1;
  CHILD_CU(CUDA_ERROR_NOT_INITIALIZED, A.cuDeviceGetCount(&count));
  return 0;
}

TEST(Config, InvalidValuesFailCuInitLoudly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"CUARROW_EMULATED_DEVICES", "two"},  {"CUARROW_EMULATED_DEVICES", "65"},
      {"CUARROW_EMULATED_DEVICES", "-1"},   {"CUARROW_EMULATED_MEMORY", "12Q"},
      {"CUARROW_EMULATED_MEMORY", "0"},     {"CUARROW_EMULATED_MEMORY", "1000"},
      {"CUARROW_EMULATED_MEMORY", "4096G"}, {"CUARROW_EMULATED_OP_DELAY_US", "soon"},
  };
  for (auto& [k, v] : cases) {
    ChildResult r = run_child("bad_config", {}, {{k, v}});
    EXPECT_TRUE(r.exited && r.code == 0) << k << "=" << v << ": " << r.output;
    EXPECT_NE(std::string::npos, r.output.find(k)) << "the message names the variable: " << r.output;
  }
}

EMU_CHILD_MODE(op_delay) {
  Api& A = api();
  CHILD_CU(CUDA_SUCCESS, A.cuInit(0));
  CUcontext ctx = nullptr;
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&ctx, 0));
  CHILD_CU(CUDA_SUCCESS, A.cuCtxPushCurrent(ctx));
  auto noop = [](void*) {};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) CHILD_CU(CUDA_SUCCESS, A.cuLaunchHostFunc(nullptr, noop, nullptr));
  auto queued = std::chrono::steady_clock::now() - t0;
  CHILD_CHECK(A.cuStreamQuery(nullptr) == CUDA_ERROR_NOT_READY);
  CHILD_CU(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
  auto total = std::chrono::steady_clock::now() - t0;
  CHILD_CHECK(queued < std::chrono::milliseconds(100));     // enqueueing does not wait
  CHILD_CHECK(total >= std::chrono::milliseconds(5 * 50));  // each operation waited 50 ms
  // The control API overrides the environment.
  A.set_op_delay_us(0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) CHILD_CU(CUDA_SUCCESS, A.cuLaunchHostFunc(nullptr, noop, nullptr));
  CHILD_CU(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
  CHILD_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(150));
  CHILD_CU(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(0));
  return 0;
}

TEST(Config, OpDelayFromTheEnvironment) {
  ChildResult r = run_child("op_delay", {}, {{"CUARROW_EMULATED_OP_DELAY_US", "50000"}});
  EXPECT_TRUE(r.exited && r.code == 0) << r.output;
}
