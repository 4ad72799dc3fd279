#include "support.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>

extern char** environ;

void PrintTo(CUresult r, std::ostream* os) { *os << emu_test::error_name(r) << " (" << static_cast<int>(r) << ")"; }

namespace emu_test {

const std::vector<EntryInfo>& listed_entry_points() {
  static const std::vector<EntryInfo> list = {
#define CUARROW_DRIVER_ENTRY(name, version, required) {#name, version, required != 0},
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY
  };
  return list;
}

namespace {

Api* do_load() {
  auto* a = new Api();  // lives for the process (the library is never closed)
  a->lib = dlopen(CUARROW_EMU_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!a->lib) {
    std::fprintf(stderr, "dlopen(%s): %s\n", CUARROW_EMU_LIBRARY_PATH, dlerror());
    return nullptr;
  }
  a->getProcAddress = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(a->lib, "cuGetProcAddress_v2"));
  if (!a->getProcAddress) {
    std::fprintf(stderr, "no cuGetProcAddress_v2\n");
    return nullptr;
  }
  struct Slot {
    const char* name;
    int version;
    void** slot;
  };
  const Slot slots[] = {
#define CUARROW_DRIVER_ENTRY(name, version, required) {#name, version, reinterpret_cast<void**>(&a->name)},
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY
  };
  for (const Slot& s : slots) {
    // Asking for the entry's own ABI version yields exactly its PFN type.
    CUdriverProcAddressQueryResult status{};
    CUresult r = a->getProcAddress(s.name, s.slot, s.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    if (r != CUDA_SUCCESS || !*s.slot) {
      std::fprintf(stderr, "cuGetProcAddress_v2(%s, %d) failed: %d\n", s.name, s.version, r);
      return nullptr;
    }
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(a->lib, name));
    if (!fn) std::fprintf(stderr, "no %s\n", name);
    return fn != nullptr;
  };
  bool ok = sym(a->retain_count, "cuarrow_emu_primary_ctx_retain_count") &&
            sym(a->device_allocation_count, "cuarrow_emu_device_allocation_count") &&
            sym(a->device_bytes_in_use, "cuarrow_emu_device_bytes_in_use") &&
            sym(a->host_allocation_count, "cuarrow_emu_host_allocation_count") &&
            sym(a->host_registration_count, "cuarrow_emu_host_registration_count") &&
            sym(a->ipc_mapping_count, "cuarrow_emu_ipc_mapping_count") &&
            sym(a->pool_count, "cuarrow_emu_pool_count") && sym(a->stream_count, "cuarrow_emu_stream_count") &&
            sym(a->event_count, "cuarrow_emu_event_count") &&
            sym(a->async_fault_count, "cuarrow_emu_async_fault_count") &&
            sym(a->set_op_delay_us, "cuarrow_emu_set_op_delay_us");
  return ok ? a : nullptr;
}

}  // namespace

Api* load_api() {
  static Api* a = do_load();
  return a;
}

Api& api() {
  Api* a = load_api();
  if (!a) {
    std::fprintf(stderr, "cannot load the emulated driver\n");
    std::abort();
  }
  return *a;
}

const char* error_name(CUresult r) {
  Api* a = load_api();
  const char* s = nullptr;
  if (a && a->cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "(unknown CUresult)";
}

// ---------------------------------------------------------------------------
// Gates

void Gate::wait_fn(void* self) {
  auto* gate = static_cast<Gate*>(self);
  std::unique_lock lk(gate->mu_);
  gate->reached.fetch_add(1);
  gate->cv_.notify_all();
  gate->cv_.wait(lk, [&] { return gate->open_; });
}

void Gate::open() {
  std::lock_guard lk(mu_);
  open_ = true;
  cv_.notify_all();
}

bool Gate::wait_reached(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return reached.load() > 0; });
}

namespace {
std::mutex g_gates_mu;
std::deque<std::unique_ptr<Gate>>* g_gates = new std::deque<std::unique_ptr<Gate>>();  // never freed
}  // namespace

Gate& new_gate() {
  std::lock_guard lk(g_gates_mu);
  g_gates->push_back(std::make_unique<Gate>());
  return *g_gates->back();
}

void open_all_gates() {
  std::lock_guard lk(g_gates_mu);
  for (auto& g : *g_gates) g->open();
}

// ---------------------------------------------------------------------------
// Child processes

namespace {
std::map<std::string, ChildMain>& child_modes() {
  static std::map<std::string, ChildMain> m;
  return m;
}
}  // namespace

bool register_child_mode(const char* name, ChildMain fn) {
  child_modes()[name] = fn;
  return true;
}

int run_child_mode(const std::string& mode, int argc, char** argv) {
  auto it = child_modes().find(mode);
  if (it == child_modes().end()) {
    std::fprintf(stderr, "unknown child mode %s\n", mode.c_str());
    return 2;
  }
  if (!load_api()) return 3;
  return it->second(argc, argv);
}

ChildResult run_child(const std::string& mode, const std::vector<std::string>& args,
                      const std::map<std::string, std::optional<std::string>>& env, std::chrono::seconds timeout) {
  // Everything the child needs is prepared before fork: only async-signal-
  // safe calls happen between fork and exec in a multi-threaded parent.
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ChildResult res;
  if (n <= 0) return res;
  self[n] = '\0';
  std::vector<std::string> argv_s = {self, "--emu-child=" + mode};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "CUARROW_EMULATED_", 17) != 0) env_s.emplace_back(*e);
  for (auto& [k, v] : env)
    if (v) env_s.push_back(k + "=" + *v);
  std::vector<char*> argv_p, env_p;
  for (auto& s : argv_s) argv_p.push_back(s.data());
  argv_p.push_back(nullptr);
  for (auto& s : env_s) env_p.push_back(s.data());
  env_p.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return res;
  pid_t pid = fork();
  if (pid < 0) return res;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(self, argv_p.data(), env_p.data());
    _exit(127);
  }
  close(fds[1]);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    res.output.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.exited = WIFEXITED(status);
  res.code = res.exited ? WEXITSTATUS(status) : -1;
  res.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return res;
}

// ---------------------------------------------------------------------------
// Fixture

void Emu::SetUp() {
  CU_ASSERT(A.cuInit(0));
  int count = 0;
  size_t mem = 0;
  CU_ASSERT(A.cuDeviceGetCount(&count));
  CU_ASSERT(A.cuDeviceTotalMem(&mem, 0));
  if (count != kDevices || mem != kMemory)
    GTEST_SKIP() << "the emulated machine is not the one tests/main.cpp configures";
  faults_at_start_ = A.async_fault_count();
  ctx0 = retain(0);
  CU_ASSERT(A.cuCtxPushCurrent(ctx0));
}

void Emu::TearDown() {
  open_all_gates();
  A.set_op_delay_us(0);
  for (auto& [ctx, s] : streams_) {
    (void)ctx;
    A.cuStreamDestroy(s);
  }
  streams_.clear();
  // Let queued work finish, so faults it causes are counted here.
  for (int d : retained_) {
    CUcontext c = nullptr;
    if (A.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS) continue;
    A.cuCtxPushCurrent(c);
    A.cuCtxSynchronize();
    A.cuCtxPopCurrent(nullptr);
    A.cuDevicePrimaryCtxRelease(d);
  }
  EXPECT_EQ(expected_faults, A.async_fault_count() - faults_at_start_) << "unexpected asynchronous faults";
  while (A.cuCtxPopCurrent(nullptr) == CUDA_SUCCESS) {
  }
  for (int d : retained_) EXPECT_EQ(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(d));
  retained_.clear();
}

CUcontext Emu::retain(int device) {
  CUcontext c = nullptr;
  EXPECT_EQ(CUDA_SUCCESS, A.cuDevicePrimaryCtxRetain(&c, device));
  retained_.push_back(device);
  return c;
}

void Emu::release(int device) {
  for (auto it = retained_.begin(); it != retained_.end(); ++it) {
    if (*it == device) {
      retained_.erase(it);
      EXPECT_EQ(CUDA_SUCCESS, A.cuDevicePrimaryCtxRelease(device));
      return;
    }
  }
  ADD_FAILURE() << "device " << device << " was not retained";
}

CUstream Emu::stream(unsigned flags) {
  CUstream s = nullptr;
  EXPECT_EQ(CUDA_SUCCESS, A.cuStreamCreate(&s, flags));
  CUcontext c = nullptr;
  A.cuCtxGetCurrent(&c);
  streams_.emplace_back(c, s);
  return s;
}

std::vector<unsigned char> read_device(CUdeviceptr p, size_t n) {
  std::vector<unsigned char> out(n);
  Api& A = api();
  EXPECT_EQ(CUDA_SUCCESS, A.cuMemcpyDtoHAsync(out.data(), p, n, nullptr));  // pageable: synchronous
  return out;
}

void write_device(CUdeviceptr p, const std::vector<unsigned char>& bytes) {
  Api& A = api();
  EXPECT_EQ(CUDA_SUCCESS, A.cuMemcpyHtoDAsync(p, bytes.data(), bytes.size(), nullptr));
  EXPECT_EQ(CUDA_SUCCESS, A.cuStreamSynchronize(nullptr));
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  unsigned x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<unsigned char>(x >> 16);
  }
  return v;
}

}  // namespace emu_test
