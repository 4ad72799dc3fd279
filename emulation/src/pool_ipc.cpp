// Memory pools made with cuMemPoolCreate, and sharing them with other
// processes (cuMemPoolExportToShareableHandle / cuMemPoolImportFromShareableHandle,
// cuMemPoolExportPointer / cuMemPoolImportPointer) with POSIX file descriptors.
//
// A pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR keeps its bytes
// in a memfd of its own, at the offsets the device allocator hands out; the
// memfd's name carries the pool's random identity and device
// ("cuarrow-emu-pool-<token>-dev<N>").  Exporting the pool gives a dup of
// that memfd: a real descriptor that survives fork/exec and SCM_RIGHTS.  The
// importer checks the name, maps the memfd and makes an imported pool; the
// 64 bytes of a pointer's export data name the pool's identity, the
// allocation's offset and size, and the importer gives the imported pointer a
// device address of its own over those bytes.
#include "emu_internal.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>

namespace cuemu {

namespace {

constexpr char kPtrMagic[8] = {'C', 'U', 'A', 'E', 'M', 'U', 'P', '1'};
constexpr const char* kPoolPrefix = "cuarrow-emu-pool-";

// The 64 bytes of a CUmemPoolPtrExportData made by this emulation.
struct PtrExport {
  char magic[8];
  uint64_t token;     // the pool's identity
  uint64_t offset;    // of the allocation in the pool's memfd
  uint64_t size;      // of the allocation
  uint64_t alloc_id;  // exporter's buffer id: repeated imports share a pointer
  int32_t device;     // the pool's device
  int32_t pid;        // exporting process (informational)
  uint64_t reserved;
  uint64_t checksum;  // FNV-1a of the bytes above: rejects garbage
};
static_assert(sizeof(PtrExport) == sizeof(CUmemPoolPtrExportData), "pool pointer export layout");

uint64_t checksum(const PtrExport& e) { return fnv1a(&e, offsetof(PtrExport, checksum)); }

uint64_t random_token() {
  std::random_device rd;
  uint64_t t = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  t ^= static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull;
  t ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return t == 0 ? 1 : t;
}

// Reads the identity of a pool memfd from its name; false if `fd` is not one.
bool read_pool_fd(int fd, uint64_t* token, int* device) {
  if (fd < 0) return false;
  char path[64], target[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  unsigned long long t = 0;
  int dev = -1, used = 0;
  char fmt[96];
  std::snprintf(fmt, sizeof fmt, "/memfd:%s%%16llx-dev%%d%%n", kPoolPrefix);
  if (std::sscanf(target, fmt, &t, &dev, &used) != 2 || t == 0 || dev < 0) return false;
  // Nothing may follow but the kernel's " (deleted)".
  if (target[used] != '\0' && std::strcmp(target + used, " (deleted)") != 0) return false;
  *token = t;
  *device = dev;
  return true;
}

// The memfd and read/write map of a new shareable pool.
CUresult make_pool_memfd(Pool& p, size_t size) {
  char name[96];
  std::snprintf(name, sizeof name, "%s%016" PRIx64 "-dev%d", kPoolPrefix, p.token, p.device);
  p.memfd = memfd_create(name, MFD_CLOEXEC);
  if (p.memfd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  if (ftruncate(p.memfd, static_cast<off_t>(size)) != 0) {
    close(p.memfd);
    p.memfd = -1;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, p.memfd, 0);
  if (m == MAP_FAILED) {
    close(p.memfd);
    p.memfd = -1;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p.shadow = static_cast<char*>(m);
  p.shadow_len = size;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult emu_cuMemPoolCreate_v11020(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (CUresult r = check_init()) return r;
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (g->cfg.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->win32SecurityAttributes != nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  // Host (NUMA) pools are not emulated: device memory only.
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  Device* d = device_at(props->location.id);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE && props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;  // Win32, fabric: not on this (Linux, single-node) machine
  auto p = std::make_unique<Pool>();
  p->kind = Pool::Kind::Created;
  p->device = d->ordinal;
  p->max_size = props->maxSize;
  if (props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    p->ipc = true;
    p->token = random_token();
    if (CUresult r = make_pool_memfd(*p, d->mem_size)) return r;
  }
  std::lock_guard lk(g->mu);
  CUmemoryPool h = reinterpret_cast<CUmemoryPool>(p.get());
  g->pools[h] = std::move(p);
  *pool = h;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolDestroy_v11020(CUmemoryPool pool) {
  if (CUresult r = check_init()) return r;
  std::unique_lock mem(g->mem_mu);
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  // A device's default pool cannot be destroyed.
  if (!p || p->kind == Pool::Kind::Default) return CUDA_ERROR_INVALID_VALUE;
  // As the real driver: returns at once; the pool's resources go when its
  // last allocation (or imported pointer) is freed.
  p->destroyed = true;
  release_pool_if_done_locked(p);
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolSetAccess_v11020(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  if (CUresult r = check_init()) return r;
  if (!map || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!device_at(map[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    // A pool's own device always has access.
    if (map[i].location.id == p->device && map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
      return CUDA_ERROR_INVALID_DEVICE;
  }
  for (size_t i = 0; i < count; ++i) {
    const int dev = map[i].location.id;
    if (dev == p->device) continue;
    auto it = std::find(p->access.begin(), p->access.end(), dev);
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && it == p->access.end()) p->access.push_back(dev);
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE && it != p->access.end()) p->access.erase(it);
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolGetAccess_v11020(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation* location) {
  if (CUresult r = check_init()) return r;
  if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!device_at(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(memPool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  const bool rw =
      location->id == p->device || std::find(p->access.begin(), p->access.end(), location->id) != p->access.end();
  *flags = rw ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolExportToShareableHandle_v11020(void* handle_out, CUmemoryPool pool,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (!handle_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  // Only a pool created with this handle type is IPC-capable (the default
  // pool and pools created without a handle type are not; nor is an
  // imported pool, which is not this process's to share).
  if (!p || p->kind != Pool::Kind::Created || !p->ipc) return CUDA_ERROR_INVALID_VALUE;
  // A new descriptor of the pool's memfd, the caller's to close; without
  // close-on-exec, so it may be handed to a child across exec.
  int fd = dup(p->memfd);
  if (fd < 0) return errno == EMFILE || errno == ENFILE ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
  p->shared = true;
  std::memcpy(handle_out, &fd, sizeof fd);
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolImportFromShareableHandle_v11020(CUmemoryPool* pool_out, void* handle,
                                                       CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult r = check_init()) return r;
  if (!pool_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  // The descriptor is passed by value in the pointer, as with the real
  // driver; the caller keeps it (and may close it once imported).
  const intptr_t raw = reinterpret_cast<intptr_t>(handle);
  if (raw < 0 || raw > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(raw);
  uint64_t token = 0;
  int device = -1;
  if (!read_pool_fd(fd, &token, &device)) return CUDA_ERROR_INVALID_VALUE;  // not a shareable pool's descriptor
  if (!device_at(device)) return CUDA_ERROR_INVALID_VALUE;                  // a device this process does not have
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t len = static_cast<size_t>(st.st_size);
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto p = std::make_unique<Pool>();
  p->kind = Pool::Kind::Imported;
  p->device = device;
  p->token = token;
  p->shadow = static_cast<char*>(m);
  p->shadow_len = len;
  std::lock_guard lk(g->mu);
  CUmemoryPool h = reinterpret_cast<CUmemoryPool>(p.get());
  g->pools[h] = std::move(p);
  *pool_out = h;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolExportPointer_v11020(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  if (CUresult r = check_init()) return r;
  if (!shareData_out) return CUDA_ERROR_INVALID_VALUE;
  PtrExport e{};
  {
    std::lock_guard lk(g->mu);
    Allocation* a = find_alloc_locked(ptr);
    // Memory of a shareable pool only (an interior pointer exports the whole
    // allocation; the importer gets its start), and "from an already shared
    // memory pool": before the pool's first cuMemPoolExportToShareableHandle
    // the driver answers CUDA_ERROR_INVALID_VALUE (driver 580, H200).
    if (!a || a->kind != AllocKind::Pool || !a->pool->ipc || !a->pool->shared) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(e.magic, kPtrMagic, sizeof kPtrMagic);
    e.token = a->pool->token;
    e.offset = a->offset;
    e.size = a->size;
    e.alloc_id = a->id;
    e.device = a->device;
    e.pid = static_cast<int32_t>(getpid());
  }
  e.checksum = checksum(e);
  std::memcpy(shareData_out->reserved, &e, sizeof e);
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolImportPointer_v11020(CUdeviceptr* ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData* shareData) {
  if (CUresult r = check_init()) return r;
  if (!ptr_out || !shareData) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  PtrExport e;
  std::memcpy(&e, shareData->reserved, sizeof e);
  if (std::memcmp(e.magic, kPtrMagic, sizeof kPtrMagic) != 0 || e.checksum != checksum(e) || e.size == 0 ||
      e.offset % kAllocAlignment != 0 || e.offset + e.size < e.offset)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  // Into an imported pool, of that very pool's memory.
  if (!p || p->kind != Pool::Kind::Imported || e.token != p->token || e.offset + e.size > p->shadow_len)
    return CUDA_ERROR_INVALID_VALUE;
  for (auto& [base, a] : g->allocs) {
    if (a->kind == AllocKind::PoolImport && a->pool == p && a->ipc_remote_id == e.alloc_id && a->ctx == c &&
        a->ipc_refs > 0 && !a->free_queued) {
      ++a->ipc_refs;  // imported again: the same pointer, counted
      *ptr_out = a->base;
      return CUDA_SUCCESS;
    }
  }
  // A device address of its own, not host-dereferenceable.
  const size_t reserve_len = round_up(e.size, page_size());
  void* reserve = mmap(nullptr, reserve_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = std::make_unique<Allocation>();
  a->kind = AllocKind::PoolImport;
  a->base = reinterpret_cast<uintptr_t>(reserve);
  a->size = e.size;
  a->ctx = c;
  a->device = p->device;
  a->host_view = p->shadow + e.offset;
  a->offset = e.offset;
  a->pool = p;
  a->reserve_base = reserve;
  a->reserve_len = reserve_len;
  a->ipc_pid = e.pid;
  a->ipc_remote_id = e.alloc_id;
  a->ipc_refs = 1;
  ++p->live;
  *ptr_out = insert_alloc_locked(std::move(a))->base;
  return CUDA_SUCCESS;
}

}  // namespace cuemu
