// A stand-in for libcufile, for tests only: the handful of cuFile entry
// points cuarrow calls (declared in src/runtime/, the cuFile table), over pread and the
// CUDA driver emulation, so that the GPUDirect Storage path of the file
// readers runs in CI, where there is neither libcufile nor a GPU.
//
// cuFileRead preads into host memory, then copies to the device with the
// emulated driver's cuMemcpyHtoDAsync + cuStreamSynchronize on the legacy
// stream (in the calling thread's current context, as cuFile needs one):
// the emulation checks that the destination lies inside one live
// allocation.  Each call moves at most kMaxCall bytes (an odd size), so
// that callers must handle short reads.
//
// Configuration (read at cuFileDriverOpen): CUARROW_FAKE_CUFILE_OPEN_ERROR
// (a CUfileOpError cuFileDriverOpen answers), CUARROW_FAKE_CUFILE_NVFS
// ("major.minor", the nvidia-fs version reported; default 2.20).  Control
// functions for the tests: fake_cufile_*, below.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>

namespace {

struct status {
  int err;
  int cu_err;
};
struct descriptor {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct properties {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    std::size_t poll_thresh_size;
    std::size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int fflags;
  unsigned int max_device_cache_size;
  unsigned int per_buffer_cache_size;
  unsigned int max_device_pinned_mem_size;
  unsigned int max_batch_io_size;
  unsigned int max_batch_io_timeout_msecs;
};
struct file {
  int fd;
};

constexpr int kDriverNotInitialized = 5001;
constexpr int kCudaDriverError = 5011;
constexpr std::size_t kMaxCall = (std::size_t{1} << 20) + 7;

using memcpy_t = CUresult (*)(CUdeviceptr, const void*, std::size_t, CUstream);
using sync_t = CUresult (*)(CUstream);

std::mutex g_mutex;
bool g_open = false;
std::set<file*> g_handles;
memcpy_t g_memcpy = nullptr;
sync_t g_sync = nullptr;
std::atomic<unsigned long long> g_reads{0};
std::atomic<unsigned long long> g_fail_read_at{0};  // 1-based index of g_reads to fail; 0: none
std::atomic<long long> g_fail_read_ret{0};
std::atomic<int> g_fail_read_errno{0};
std::atomic<int> g_fail_register{0};
std::atomic<int> g_opens{0};

bool find_driver() {
  // The emulation cuarrow loaded (RTLD_LOCAL: found by its soname, not
  // loaded again).
  void* lib = dlopen("libcuarrow_cuda_emulation.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  using get_proc_t = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<get_proc_t>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return false;
  void* a = nullptr;
  void* b = nullptr;
  CUdriverProcAddressQueryResult q{};
  if (get_proc("cuMemcpyHtoDAsync", &a, 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS) return false;
  if (get_proc("cuStreamSynchronize", &b, 2000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS) return false;
  g_memcpy = reinterpret_cast<memcpy_t>(a);
  g_sync = reinterpret_cast<sync_t>(b);
  return g_memcpy != nullptr && g_sync != nullptr;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) status cuFileDriverOpen() {
  std::lock_guard lock(g_mutex);
  g_opens.fetch_add(1);
  if (const char* e = std::getenv("CUARROW_FAKE_CUFILE_OPEN_ERROR"); e != nullptr && *e != '\0') {
    return {std::atoi(e), 0};
  }
  if (!find_driver()) return {kCudaDriverError, 0};
  g_open = true;
  return {0, 0};
}

__attribute__((visibility("default"))) status cuFileDriverClose_v2() {
  std::lock_guard lock(g_mutex);
  if (!g_open) return {kDriverNotInitialized, 0};
  g_open = false;
  return {0, 0};
}

__attribute__((visibility("default"))) status cuFileDriverGetProperties(properties* p) {
  std::lock_guard lock(g_mutex);
  if (!g_open) return {kDriverNotInitialized, 0};
  *p = properties{};
  p->nvfs.major_version = 2;
  p->nvfs.minor_version = 20;
  if (const char* e = std::getenv("CUARROW_FAKE_CUFILE_NVFS"); e != nullptr) {
    unsigned major = 0, minor = 0;
    if (std::sscanf(e, "%u.%u", &major, &minor) == 2) {
      p->nvfs.major_version = major;
      p->nvfs.minor_version = minor;
    }
  }
  p->nvfs.dcontrolflags = 1u << 1;  // compatibility mode allowed
  return {0, 0};
}

__attribute__((visibility("default"))) status cuFileHandleRegister(void** out, descriptor* d) {
  std::lock_guard lock(g_mutex);
  if (!g_open) return {kDriverNotInitialized, 0};
  if (const int e = g_fail_register.exchange(0); e != 0) return {e, 0};
  if (d == nullptr || out == nullptr || d->type != 1 || fcntl(d->handle.fd, F_GETFL) < 0) return {5008, 0};
  auto* f = new file{d->handle.fd};
  g_handles.insert(f);
  *out = f;
  return {0, 0};
}

__attribute__((visibility("default"))) void cuFileHandleDeregister(void* h) {
  std::lock_guard lock(g_mutex);
  auto* f = static_cast<file*>(h);
  if (g_handles.erase(f) == 1) delete f;
}

__attribute__((visibility("default"))) ssize_t cuFileRead(void* h, void* base, std::size_t size, off_t file_offset,
                                                          off_t base_offset) {
  int fd = -1;
  {
    std::lock_guard lock(g_mutex);
    auto* f = static_cast<file*>(h);
    if (!g_open || g_handles.count(f) == 0) return -kDriverNotInitialized;
    fd = f->fd;
  }
  const unsigned long long n = g_reads.fetch_add(1) + 1;
  unsigned long long at = n;
  if (g_fail_read_at.compare_exchange_strong(at, 0)) {
    errno = g_fail_read_errno.load();
    return static_cast<ssize_t>(g_fail_read_ret.load());
  }
  if (size > kMaxCall) size = kMaxCall;
  // The file is opened with O_DIRECT where its file system allows (as
  // cuFile wants it): read whole aligned blocks into aligned memory, as
  // cuFile's compatibility mode does, and keep the part asked for.
  constexpr off_t kBlock = 4096;
  const off_t start = file_offset / kBlock * kBlock;
  const off_t end = (file_offset + static_cast<off_t>(size) + kBlock - 1) / kBlock * kBlock;
  const auto span = static_cast<std::size_t>(end - start);
  void* raw = nullptr;
  if (posix_memalign(&raw, kBlock, span) != 0) return -1;
  std::unique_ptr<unsigned char, decltype(&std::free)> host(static_cast<unsigned char*>(raw), &std::free);
  std::size_t have = 0;
  while (have < span) {
    const ssize_t r = ::pread(fd, host.get() + have, span - have, start + static_cast<off_t>(have));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    have += static_cast<std::size_t>(r);
    if (have % kBlock != 0) break;  // the end of the file
  }
  const auto skip = static_cast<std::size_t>(file_offset - start);
  if (have <= skip) return 0;
  const std::size_t got = std::min(size, have - skip);
  const CUdeviceptr dst = reinterpret_cast<CUdeviceptr>(base) + static_cast<CUdeviceptr>(base_offset);
  if (g_memcpy(dst, host.get() + skip, got, nullptr) != CUDA_SUCCESS || g_sync(nullptr) != CUDA_SUCCESS) {
    return -kCudaDriverError;
  }
  return static_cast<ssize_t>(got);
}

__attribute__((visibility("default"))) status cuFileBufRegister(const void*, std::size_t, int) { return {0, 0}; }
__attribute__((visibility("default"))) status cuFileBufDeregister(const void*) { return {0, 0}; }

// ---- control, for the tests --------------------------------------------------------------

/// The k-th cuFileRead from now (k >= 1) returns `ret` with errno `err`.
__attribute__((visibility("default"))) void fake_cufile_fail_read(unsigned long long k, long long ret, int err) {
  g_fail_read_ret.store(ret);
  g_fail_read_errno.store(err);
  g_fail_read_at.store(g_reads.load() + k);
}
/// The next cuFileHandleRegister answers `err`.
__attribute__((visibility("default"))) void fake_cufile_fail_register(int err) { g_fail_register.store(err); }
/// cuFileRead calls so far.
__attribute__((visibility("default"))) unsigned long long fake_cufile_reads() { return g_reads.load(); }
/// Handles registered and not deregistered.
__attribute__((visibility("default"))) std::size_t fake_cufile_live_handles() {
  std::lock_guard lock(g_mutex);
  return g_handles.size();
}
/// cuFileDriverOpen calls so far.
__attribute__((visibility("default"))) int fake_cufile_opens() { return g_opens.load(); }
}
