// Driver state: configuration, cuInit, devices, primary contexts, the
// device-memory layout, the allocation registry, the control API and teardown.
#include "emu_internal.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#pragma GCC visibility push(default)
#include "cuarrow_emulation.h"
#pragma GCC visibility pop

namespace cuemu {

std::atomic<int> g_state{static_cast<int>(State::Uninitialized)};
Driver* g = nullptr;
std::atomic<unsigned> g_op_delay_us{0};
std::atomic<size_t> g_fault_count{0};
CUARROW_EMU_STATIC_TLS thread_local bool t_in_stream_worker = false;

namespace {

std::mutex g_init_mu;       // serialises cuInit and teardown
std::mutex g_lifecycle_mu;  // serialises primary context retain/release
// The thread's current-context stack.  Trivially destructible on purpose:
// the main thread's thread_local destructors run before the process's
// exit handlers, and those may still push and pop (the real driver allows
// it: cuarrow unpins its caches there).
struct ContextStack {
  static constexpr int kCapacity = 64;  // static TLS is small; deeper nesting fails as out of memory
  Context* items[kCapacity];
  int size;
  bool empty() const { return size == 0; }
  Context* back() const { return items[size - 1]; }
  bool push_back(Context* c) {
    if (size == kCapacity) return false;
    items[size++] = c;
    return true;
  }
  void pop_back() { --size; }
};
CUARROW_EMU_STATIC_TLS thread_local ContextStack t_ctx_stack;
std::atomic<size_t> g_ctx_pushed{0};  // pushes not yet popped, all threads

// ---------------------------------------------------------------------------
// Configuration

bool parse_uint(const char* s, unsigned long long* out, const char** end) {
  if (!s || !std::isdigit(static_cast<unsigned char>(*s))) return false;
  errno = 0;
  char* e = nullptr;
  *out = std::strtoull(s, &e, 10);
  if (errno != 0) return false;
  *end = e;
  return true;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// CUARROW_EMULATED_DRIVER_VERSION as a CUDA version number (12000 for
// 12.0), or 0 when unset or not a version from 10000 to 13000.
int driver_version_from_env() {
  const char* s = std::getenv("CUARROW_EMULATED_DRIVER_VERSION");
  unsigned long long v = 0;
  const char* e = nullptr;
  if (!s || !*s || !parse_uint(s, &v, &e) || *e != '\0' || v < 10000 || v > kEmulatedDriverVersion) return 0;
  return static_cast<int>(v);
}

CUresult read_config(Config* cfg) {
  const char* e = nullptr;
  unsigned long long v = 0;
  if (const char* s = std::getenv("CUARROW_EMULATED_DRIVER_VERSION"); s && *s && driver_version_from_env() == 0) {
    std::fprintf(stderr,
                 "cuarrow emulation: CUARROW_EMULATED_DRIVER_VERSION='%s' is not a CUDA version from 10000 to %d "
                 "(12000 for 12.0)\n",
                 s, kEmulatedDriverVersion);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (const char* s = std::getenv("CUARROW_EMULATED_DEVICES"); s && *s) {
    if (!parse_uint(s, &v, &e) || *e != '\0' || v > 64) {
      std::fprintf(stderr, "cuarrow emulation: CUARROW_EMULATED_DEVICES='%s' is not a count from 0 to 64\n", s);
      return CUDA_ERROR_INVALID_VALUE;
    }
    cfg->devices = static_cast<int>(v);
  }
  if (const char* s = std::getenv("CUARROW_EMULATED_MEMORY"); s && *s) {
    unsigned long long mult = 1;
    bool ok = parse_uint(s, &v, &e);
    if (ok && *e) {
      switch (std::toupper(static_cast<unsigned char>(*e))) {
        case 'K': mult = 1ull << 10; break;
        case 'M': mult = 1ull << 20; break;
        case 'G': mult = 1ull << 30; break;
        default: ok = false;
      }
      ++e;
      if (ok && (*e == 'B' || *e == 'b')) ++e;  // "64MB" reads as 64 MiB
      if (*e) ok = false;
    }
    constexpr unsigned long long kMin = 1ull << 20, kMax = 1ull << 40;
    if (!ok || v == 0 || v > kMax / mult || v * mult < kMin) {
      std::fprintf(stderr,
                   "cuarrow emulation: CUARROW_EMULATED_MEMORY='%s' is not a size from 1M to 1024G "
                   "(bytes, or a number with suffix K, M or G)\n",
                   s);
      return CUDA_ERROR_INVALID_VALUE;
    }
    cfg->memory = round_up(static_cast<size_t>(v * mult), page_size());
  }
  if (const char* s = std::getenv("CUARROW_EMULATED_OP_DELAY_US"); s && *s) {
    if (!parse_uint(s, &v, &e) || *e != '\0' || v > 10'000'000) {
      std::fprintf(stderr, "cuarrow emulation: CUARROW_EMULATED_OP_DELAY_US='%s' is not a delay up to 10 s\n", s);
      return CUDA_ERROR_INVALID_VALUE;
    }
    cfg->op_delay_us = static_cast<unsigned>(v);
  }
  cfg->no_pools = env_flag("CUARROW_EMULATED_NO_POOLS");
  cfg->no_peer = env_flag("CUARROW_EMULATED_NO_PEER");
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Devices

void unmap_device(Device& d) {
  if (d.shadow) munmap(d.shadow, d.mem_size);
  if (d.va_base) munmap(d.va_base, d.mem_size);
  if (d.memfd >= 0) close(d.memfd);
  d.shadow = d.va_base = nullptr;
  d.memfd = -1;
}

// A created or imported pool's memfd and mapping (ipc pools).
void unmap_pool(Pool& p) {
  if (p.shadow) munmap(p.shadow, p.shadow_len);
  if (p.memfd >= 0) close(p.memfd);
  p.shadow = nullptr;
  p.memfd = -1;
}

// Device addresses are a PROT_NONE reservation, so host code that dereferences
// a device pointer faults as it would with a real GPU.  The bytes live in a
// memfd (shareable with other processes for IPC) mapped read/write elsewhere.
CUresult map_device(Device& d) {
  void* va = mmap(nullptr, d.mem_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  d.va_base = static_cast<char*>(va);
  char name[64];
  std::snprintf(name, sizeof name, "cuarrow-emu-dev%d", d.ordinal);
  d.memfd = memfd_create(name, MFD_CLOEXEC);
  if (d.memfd < 0 || ftruncate(d.memfd, static_cast<off_t>(d.mem_size)) != 0) {
    std::fprintf(stderr, "cuarrow emulation: memfd for device %d failed: %s\n", d.ordinal, std::strerror(errno));
    unmap_device(d);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  void* sh = mmap(nullptr, d.mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d.memfd, 0);
  if (sh == MAP_FAILED) {
    unmap_device(d);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d.shadow = static_cast<char*>(sh);
  return CUDA_SUCCESS;
}

void on_fork_child() {
  // Stream workers do not exist in the child and locks may be held: the
  // inherited driver is unusable, as CUDA is after fork.  Calls answer
  // CUDA_ERROR_NOT_INITIALIZED; exec gives a fresh driver.
  if (g_state.load() == static_cast<int>(State::Ready)) g_state.store(static_cast<int>(State::ForkedChild));
}

void teardown() {
  std::lock_guard init_lk(g_init_mu);
  if (g_state.load() != static_cast<int>(State::Ready)) return;
  g_state.store(static_cast<int>(State::Dead));
  shutdown_streams();
  // Pinned host memory stays mapped: code running later in the exit (static
  // destructors) may still read its buffers; the process ends anyway.
  for (auto& [base, a] : g->allocs)
    if (a->kind != AllocKind::HostAlloc) unmap_allocation(*a);
  g->allocs.clear();
  g->allocs_by_id.clear();
  g->events.clear();
  for (auto& [h, p] : g->pools) unmap_pool(*p);
  g->pools.clear();
  for (auto& d : g->devices) {
    d->ctx.legacy.reset();
    d->ctx.per_thread.clear();
    unmap_device(*d);
  }
  delete g;
  g = nullptr;
}

// Joins the stream workers and unmaps everything when the library is unloaded
// or the process exits.  Calls made after this point (say, from the static
// destructors of an object created before the driver was loaded) answer
// CUDA_ERROR_DEINITIALIZED, as the real driver does during shutdown.
struct Teardown {
  ~Teardown() { teardown(); }
} g_teardown;

// Per-thread default streams end with their thread.
struct PerThreadStreamCleanup {
  bool armed = false;
  ~PerThreadStreamCleanup() {
    if (!armed || g_state.load() != static_cast<int>(State::Ready)) return;
    std::lock_guard lk(g->mu);
    auto id = std::this_thread::get_id();
    for (auto& d : g->devices) {
      auto it = d->ctx.per_thread.find(id);
      if (it == d->ctx.per_thread.end()) continue;
      stop_stream(*it->second);
      g->zombies.push_back(std::move(it->second));
      d->ctx.per_thread.erase(it);
    }
  }
};
CUARROW_EMU_STATIC_TLS thread_local PerThreadStreamCleanup t_pts_cleanup;

}  // namespace

int emulated_driver_version() {
  const int v = driver_version_from_env();
  return v != 0 ? v : kEmulatedDriverVersion;
}

void arm_per_thread_stream_cleanup() { t_pts_cleanup.armed = true; }

// ---------------------------------------------------------------------------
// Helpers

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t page_size() {
  static const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}

CUresult check_init() {
  switch (static_cast<State>(g_state.load(std::memory_order_acquire))) {
    case State::Ready: return CUDA_SUCCESS;
    case State::Dead: return CUDA_ERROR_DEINITIALIZED;
    default: return CUDA_ERROR_NOT_INITIALIZED;
  }
}

Device* device_at(CUdevice d) {
  if (d < 0 || static_cast<size_t>(d) >= g->devices.size()) return nullptr;
  return g->devices[static_cast<size_t>(d)].get();
}

Context* context_from_handle(CUcontext h) {
  if (!h) return nullptr;
  for (auto& d : g->devices)
    if (d->ctx.handle() == h) return &d->ctx;
  return nullptr;
}

CUresult current_context(Context** out) {
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = t_ctx_stack.back();
  if (!c->active.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

Context* current_context_or_null() {
  Context* c = nullptr;
  return current_context(&c) == CUDA_SUCCESS ? c : nullptr;
}

// ---------------------------------------------------------------------------
// RangeAllocator

void RangeAllocator::reset(size_t size) {
  free_.clear();
  if (size) free_[0] = size;
  size_ = size;
  used_ = 0;
}

std::optional<size_t> RangeAllocator::allocate(size_t size) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    size_t off = it->first, rest = it->second - size;
    free_.erase(it);
    if (rest) free_[off + size] = rest;
    used_ += size;
    return off;
  }
  return std::nullopt;
}

void RangeAllocator::release(size_t offset, size_t size) {
  used_ -= size;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    free_.erase(next);
  }
  free_[offset] = size;
}

// ---------------------------------------------------------------------------
// Allocation registry

Allocation* find_alloc_locked(uintptr_t p) {
  auto it = g->allocs.upper_bound(p);
  if (it == g->allocs.begin()) return nullptr;
  --it;
  Allocation* a = it->second.get();
  return p - a->base < a->size ? a : nullptr;
}

Allocation* alloc_by_id_locked(uint64_t id) {
  auto it = g->allocs_by_id.find(id);
  return it == g->allocs_by_id.end() ? nullptr : it->second;
}

bool in_device_va_locked(uintptr_t p) {
  for (auto& d : g->devices)
    if (d->contains(p)) return true;
  return false;
}

Allocation* insert_alloc_locked(std::unique_ptr<Allocation> a) {
  a->id = g->next_id++;
  Allocation* raw = a.get();
  g->allocs_by_id[raw->id] = raw;
  g->allocs[raw->base] = std::move(a);
  return raw;
}

std::unique_ptr<Allocation> remove_alloc_locked(Allocation* a) {
  g->allocs_by_id.erase(a->id);
  auto it = g->allocs.find(a->base);
  std::unique_ptr<Allocation> owned = std::move(it->second);
  g->allocs.erase(it);
  return owned;
}

void punch_hole(int fd, size_t offset, size_t len) {
  // Give freed memory back to the system so large tests do not accumulate
  // resident pages; only whole pages inside the block.
  size_t ps = page_size();
  size_t start = round_up(offset, ps);
  size_t end = (offset + len) / ps * ps;
  if (fd >= 0 && end > start) {
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(start),
                    static_cast<off_t>(end - start));
  }
}

void release_block_locked(Allocation& a) {
  Device& d = *g->devices[static_cast<size_t>(a.device)];
  if (a.kind == AllocKind::Pool) {
    Pool* p = a.pool;
    p->used -= a.block;
    p->cached.emplace(a.block, a.offset);  // stays reserved until trimmed
    --p->live;
    release_pool_if_done_locked(p);
  } else if (a.kind == AllocKind::Device) {
    d.allocator.release(a.offset, a.block);
    punch_hole(d.memfd, a.offset, a.block);
  }
}

void trim_pool_locked(Pool& pool, uint64_t keep) {
  if (pool.kind == Pool::Kind::Imported) return;  // owns no blocks of this process
  Device& d = *g->devices[static_cast<size_t>(pool.device)];
  while (pool.reserved > keep && !pool.cached.empty()) {
    auto it = std::prev(pool.cached.end());  // largest first
    d.allocator.release(it->second, it->first);
    punch_hole(pool.memfd >= 0 ? pool.memfd : d.memfd, it->second, it->first);
    pool.reserved -= it->first;
    pool.cached.erase(it);
  }
}

Pool* pool_from_handle_locked(CUmemoryPool h) {
  if (!h) return nullptr;
  for (auto& d : g->devices)
    if (reinterpret_cast<CUmemoryPool>(&d->pool) == h) return &d->pool;
  auto it = g->pools.find(h);
  if (it == g->pools.end() || it->second->destroyed) return nullptr;
  return it->second.get();
}

void release_pool_if_done_locked(Pool* p) {
  if (p->kind == Pool::Kind::Default || !p->destroyed || p->live > 0) return;
  trim_pool_locked(*p, 0);
  unmap_pool(*p);
  g->pools.erase(reinterpret_cast<CUmemoryPool>(p));
}

void free_pool_import_locked(Allocation* a) {
  if (--a->ipc_refs > 0) return;
  auto owned = remove_alloc_locked(a);
  unmap_allocation(*owned);  // the address reservation; the pool's mapping stays
  Pool* p = owned->pool;
  --p->live;
  release_pool_if_done_locked(p);
}

void unmap_allocation(Allocation& a) {
  if (a.map_base) munmap(a.map_base, a.map_len);
  if (a.reserve_base) munmap(a.reserve_base, a.reserve_len);
  a.map_base = a.reserve_base = nullptr;
}

// ---------------------------------------------------------------------------
// cuInit

CUresult emu_cuInit_v2000(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g_init_mu);
  switch (static_cast<State>(g_state.load())) {
    case State::Ready: return CUDA_SUCCESS;
    case State::Dead: return CUDA_ERROR_DEINITIALIZED;
    case State::ForkedChild: return CUDA_ERROR_NOT_INITIALIZED;
    case State::Uninitialized: break;
  }
  Config cfg;
  if (CUresult r = read_config(&cfg); r != CUDA_SUCCESS) return r;
  // A machine with the driver but no GPU: cuInit fails and the driver stays
  // uninitialised, as the real one does.
  if (cfg.devices == 0) return CUDA_ERROR_NO_DEVICE;

  auto drv = std::make_unique<Driver>();
  drv->cfg = cfg;
  for (int i = 0; i < cfg.devices; ++i) {
    auto d = std::make_unique<Device>();
    d->ordinal = i;
    d->mem_size = cfg.memory;
    d->pool.device = i;
    d->ctx.device = i;
    if (CUresult r = map_device(*d); r != CUDA_SUCCESS) {
      for (auto& prev : drv->devices) unmap_device(*prev);
      return r;
    }
    d->allocator.reset(cfg.memory);
    drv->devices.push_back(std::move(d));
  }
  g_op_delay_us.store(cfg.op_delay_us);
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
  g = drv.release();
  g_state.store(static_cast<int>(State::Ready), std::memory_order_release);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Devices

CUresult emu_cuDeviceGetCount_v2000(int* count) {
  if (CUresult r = check_init()) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(g->devices.size());
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGet_v2000(CUdevice* device, int ordinal) {
  if (CUresult r = check_init()) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

namespace {
CUresult copy_string(char* dst, int len, const char* src) {
  if (!dst || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(dst, static_cast<size_t>(len), "%s", src);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult emu_cuDeviceGetName_v2000(char* name, int len, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!device_at(dev)) return CUDA_ERROR_INVALID_DEVICE;
  char buf[64];
  std::snprintf(buf, sizeof buf, "cuarrow emulated device %d", dev);
  return copy_string(name, len, buf);
}

CUresult emu_cuDeviceTotalMem_v3020(size_t* bytes, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = d->mem_size;
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetPCIBusId_v4010(char* pciBusId, int len, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!device_at(dev)) return CUDA_ERROR_INVALID_DEVICE;
  char buf[32];
  // domain:bus:device.function, as the real driver formats it; the bus
  // matches CU_DEVICE_ATTRIBUTE_PCI_BUS_ID.
  std::snprintf(buf, sizeof buf, "%04X:%02X:%02X.0", 0, dev + 1, 0);
  return copy_string(pciBusId, len, buf);
}

CUresult emu_cuDeviceGetAttribute_v2000(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  const Config& c = g->cfg;
  int v = 0;  // attributes not listed: 0 (feature absent)
  switch (attrib) {
    // A Hopper-class device (compute capability 9.0).
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = c.no_pools ? 0 : 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      v = c.no_pools ? 0 : int{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = dev + 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: v = 0; break;
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceCanAccessPeer_v4000(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (CUresult r = check_init()) return r;
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(dev) || !device_at(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = (dev != peerDev && !g->cfg.no_peer) ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Primary contexts

CUresult emu_cuDevicePrimaryCtxRetain_v7000(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard life(g_lifecycle_mu);
  std::lock_guard lk(g->mu);
  reap_zombies_locked();
  Context& c = d->ctx;
  if (c.retain++ == 0) {
    c.generation++;
    c.pending_faults.store(0);
    c.peers.clear();
    c.active.store(true);
  }
  *pctx = c.handle();
  return CUDA_SUCCESS;
}

// Destroying a context frees what the real driver frees with it: its streams
// (after their work completes), its events, and all memory allocated,
// registered or mapped in it.
static void destroy_context(Context& c) {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard lk(g->mu);
    c.active.store(false);
    for (auto it = g->streams.begin(); it != g->streams.end();) {
      if (it->second->ctx == &c) {
        streams.push_back(std::move(it->second));
        it = g->streams.erase(it);
      } else {
        ++it;
      }
    }
    if (c.legacy) streams.push_back(std::move(c.legacy));
    for (auto& [tid, s] : c.per_thread) streams.push_back(std::move(s));
    c.legacy.reset();
    c.per_thread.clear();
    for (auto& s : streams) stop_stream(*s);
  }
  for (auto& s : streams) wait_stream_idle(*s);
  std::unique_lock mem(g->mem_mu);
  std::lock_guard lk(g->mu);
  for (auto& s : streams) g->zombies.push_back(std::move(s));
  for (auto it = g->events.begin(); it != g->events.end();) {
    if (it->second->ctx == &c) it = g->events.erase(it);
    else ++it;
  }
  std::vector<Allocation*> owned;
  for (auto& [base, a] : g->allocs)
    if (a->ctx == &c) owned.push_back(a.get());
  for (Allocation* a : owned) {
    if (a->kind == AllocKind::PoolImport) {
      a->ipc_refs = 1;  // every import of it goes with the context
      free_pool_import_locked(a);
      continue;
    }
    auto up = remove_alloc_locked(a);
    release_block_locked(*up);
    unmap_allocation(*up);
  }
  // Everything of the pool went back to the device; a re-created context
  // starts with a default pool in its default state.
  Device& d = *g->devices[static_cast<size_t>(c.device)];
  trim_pool_locked(d.pool, 0);
  d.pool = Pool{};
  d.pool.device = d.ordinal;
  c.peers.clear();
  for (auto& other : g->devices) {
    auto& p = other->ctx.peers;
    p.erase(std::remove(p.begin(), p.end(), c.device), p.end());
  }
  c.pending_faults.store(0);
}

CUresult emu_cuDevicePrimaryCtxRelease_v11000(CUdevice dev) {
  if (CUresult r = check_init()) return r;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard life(g_lifecycle_mu);
  {
    std::lock_guard lk(g->mu);
    if (d->ctx.retain == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d->ctx.retain > 0) return CUDA_SUCCESS;
  }
  destroy_context(d->ctx);
  return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxGetState_v7000(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = check_init()) return r;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(g->mu);
  *flags = 0;
  *active = d->ctx.retain > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// The thread's current-context stack

CUresult emu_cuCtxPushCurrent_v4000(CUcontext ctx) {
  if (CUresult r = check_init()) return r;
  Context* c = context_from_handle(ctx);
  if (!c || !c->active.load()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!t_ctx_stack.push_back(c)) return CUDA_ERROR_OUT_OF_MEMORY;
  g_ctx_pushed.fetch_add(1);
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxPopCurrent_v4000(CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  g_ctx_pushed.fetch_sub(1);
  if (pctx) *pctx = c->handle();
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetCurrent_v4000(CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_ctx_stack.empty() ? nullptr : t_ctx_stack.back()->handle();
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetDevice_v2000(CUdevice* device) {
  if (CUresult r = check_init()) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  *device = c->device;
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxGetDevice_v13000(CUdevice* device, CUcontext ctx) {
  if (!ctx) return emu_cuCtxGetDevice_v2000(device);
  if (CUresult r = check_init()) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Context* c = context_from_handle(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = c->device;
  return CUDA_SUCCESS;
}

CUresult emu_cuCtxEnablePeerAccess_v4000(CUcontext peerContext, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Context* peer = context_from_handle(peerContext);
  if (!peer || !peer->active.load()) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == c->device) return CUDA_ERROR_INVALID_DEVICE;
  if (g->cfg.no_peer) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  std::lock_guard lk(g->mu);
  if (std::find(c->peers.begin(), c->peers.end(), peer->device) != c->peers.end())
    return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  c->peers.push_back(peer->device);
  return CUDA_SUCCESS;
}

CUresult emu_cuMemGetInfo_v3020(size_t* free, size_t* total) {
  if (CUresult r = check_init()) return r;
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard lk(g->mu);
  Device& d = *g->devices[static_cast<size_t>(c->device)];
  *total = d.mem_size;
  *free = d.mem_size - d.allocator.used();
  return CUDA_SUCCESS;
}

}  // namespace cuemu

// ---------------------------------------------------------------------------
// Control API (cuarrow_emulation.h)

using namespace cuemu;

namespace {
bool ready() { return g_state.load() == static_cast<int>(State::Ready); }

template <typename F>
size_t count_allocs(F pred) {
  if (!ready()) return 0;
  std::lock_guard lk(g->mu);
  size_t n = 0;
  for (auto& [base, a] : g->allocs)
    if (pred(*a)) ++n;
  return n;
}
}  // namespace

extern "C" {

int cuarrow_emu_primary_ctx_retain_count(int device) {
  if (!ready()) return -1;
  Device* d = device_at(device);
  if (!d) return -1;
  std::lock_guard lk(g->mu);
  return d->ctx.retain;
}

size_t cuarrow_emu_device_allocation_count(int device) {
  return count_allocs([device](const Allocation& a) {
    return a.device == device && (a.kind == AllocKind::Device || a.kind == AllocKind::Pool);
  });
}

size_t cuarrow_emu_device_bytes_in_use(int device) {
  if (!ready()) return 0;
  std::lock_guard lk(g->mu);
  size_t n = 0;
  for (auto& [base, a] : g->allocs)
    if (a->device == device && (a->kind == AllocKind::Device || a->kind == AllocKind::Pool)) n += a->size;
  return n;
}

size_t cuarrow_emu_host_allocation_count(void) {
  return count_allocs([](const Allocation& a) { return a.kind == AllocKind::HostAlloc; });
}

size_t cuarrow_emu_host_registration_count(void) {
  return count_allocs([](const Allocation& a) { return a.kind == AllocKind::HostRegister; });
}

size_t cuarrow_emu_ipc_mapping_count(void) {
  return count_allocs(
      [](const Allocation& a) { return a.kind == AllocKind::IpcImport || a.kind == AllocKind::PoolImport; });
}

size_t cuarrow_emu_pool_count(void) {
  if (!ready()) return 0;
  std::lock_guard lk(g->mu);
  return g->pools.size();
}

size_t cuarrow_emu_stream_count(void) {
  if (!ready()) return 0;
  std::lock_guard lk(g->mu);
  return g->streams.size();
}

size_t cuarrow_emu_event_count(void) {
  if (!ready()) return 0;
  std::lock_guard lk(g->mu);
  return g->events.size();
}

size_t cuarrow_emu_async_fault_count(void) { return g_fault_count.load(); }

void cuarrow_emu_set_op_delay_us(unsigned int microseconds) { g_op_delay_us.store(microseconds); }

size_t cuarrow_emu_context_push_count(void) { return g_ctx_pushed.load(); }

}  // extern "C"
