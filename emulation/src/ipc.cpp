// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) across processes.
//
// Device memory lives in a per-device memfd, so another process can map the
// very same bytes: the handle names the exporter's pid, the memfd's descriptor
// number and the allocation's offset and size, and the importer opens
// /proc/<pid>/fd/<fd> (same user, the exporter still alive), maps the range
// and gives it a fresh device address on its current device.
#include "emu_internal.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace cuemu {

namespace {

constexpr char kMagic[8] = {'C', 'U', 'A', 'E', 'M', 'U', 'I', '1'};

// The 64 bytes of a CUipcMemHandle made by this emulation.
struct HandleData {
  char magic[8];
  int32_t pid;     // exporting process
  int32_t fd;      // its memfd holding the device's memory
  int32_t device;  // exporting device (informational)
  uint32_t reserved0;
  uint64_t offset;    // of the allocation in the memfd
  uint64_t size;      // of the allocation
  uint64_t alloc_id;  // exporter's buffer id: repeated opens share a mapping
  uint64_t reserved1;
  uint64_t checksum;  // FNV-1a of the bytes above: rejects garbage handles
};
static_assert(sizeof(HandleData) == CU_IPC_HANDLE_SIZE, "IPC handle layout");

uint64_t checksum(const HandleData& h) { return fnv1a(&h, offsetof(HandleData, checksum)); }

// The exporter's descriptor must still be one of our device memfds.
bool is_device_memfd(int pid, int fd) {
  char path[64], target[256];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strncmp(target, "/memfd:cuarrow-emu-dev", 22) == 0;
}

}  // namespace

CUresult emu_cuIpcGetMemHandle_v4010(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (CUresult r = check_init()) return r;
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  HandleData h{};
  {
    std::lock_guard lk(g->mu);
    Allocation* a = find_alloc_locked(dptr);
    // Only cuMemAlloc memory: pool (cuMemAllocAsync) memory is refused, as
    // by the real driver, and so is memory that was itself imported.
    // An interior pointer exports the whole allocation, as the real
    // driver does; the importer gets the allocation's base.
    if (!a || a->kind != AllocKind::Device) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.pid = static_cast<int32_t>(getpid());
    h.fd = g->devices[static_cast<size_t>(a->device)]->memfd;
    h.device = a->device;
    h.offset = a->offset;
    h.size = a->size;
    h.alloc_id = a->id;
  }
  h.checksum = checksum(h);
  static_assert(sizeof pHandle->reserved == sizeof h);
  std::memcpy(pHandle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult emu_cuIpcOpenMemHandle_v11000(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (!pdptr || (Flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  HandleData h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.checksum != checksum(h) || h.pid <= 0 || h.fd < 0 ||
      h.size == 0 || h.offset % kAllocAlignment != 0 || h.offset + h.size < h.offset)
    return CUDA_ERROR_INVALID_VALUE;
  // The real driver refuses to open a handle in the process that made it.
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;

  std::lock_guard lk(g->mu);
  for (auto& [base, a] : g->allocs) {
    if (a->kind == AllocKind::IpcImport && a->ipc_pid == h.pid && a->ipc_remote_id == h.alloc_id &&
        a->device == c->device && a->ipc_refs > 0) {
      ++a->ipc_refs;  // opened again by this process: same pointer, counted
      *pdptr = a->base;
      return CUDA_SUCCESS;
    }
  }
  if (!is_device_memfd(h.pid, h.fd)) return CUDA_ERROR_INVALID_VALUE;  // exporter gone, or not ours
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < h.offset + h.size) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t ps = page_size();
  const size_t map_off = h.offset / ps * ps;
  const size_t delta = h.offset - map_off;
  const size_t map_len = round_up(delta + h.size, ps);
  void* map = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_off));
  close(fd);
  if (map == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  // A device address of its own on the importing device, not
  // host-dereferenceable, like every device address here.
  const size_t reserve_len = round_up(h.size, ps);
  void* reserve = mmap(nullptr, reserve_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) {
    munmap(map, map_len);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto a = std::make_unique<Allocation>();
  a->kind = AllocKind::IpcImport;
  a->base = reinterpret_cast<uintptr_t>(reserve);
  a->size = h.size;
  a->ctx = c;
  a->device = c->device;
  a->host_view = static_cast<char*>(map) + delta;
  a->map_base = map;
  a->map_len = map_len;
  a->reserve_base = reserve;
  a->reserve_len = reserve_len;
  a->ipc_pid = h.pid;
  a->ipc_remote_id = h.alloc_id;
  a->ipc_refs = 1;
  *pdptr = insert_alloc_locked(std::move(a))->base;
  return CUDA_SUCCESS;
}

CUresult emu_cuIpcCloseMemHandle_v4010(CUdeviceptr dptr) {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Context* owner = nullptr;
  uint64_t id = 0;
  {
    std::lock_guard lk(g->mu);
    auto it = g->allocs.find(dptr);
    if (it == g->allocs.end() || it->second->kind != AllocKind::IpcImport) return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = *it->second;
    if (--a.ipc_refs > 0) return CUDA_SUCCESS;
    owner = a.ctx;
    id = a.id;
  }
  wait_context_idle(*owner);  // queued copies may still use the mapping
  std::unique_lock mem(g->mem_mu);
  std::lock_guard lk(g->mu);
  if (Allocation* a = alloc_by_id_locked(id)) {
    auto owned = remove_alloc_locked(a);
    unmap_allocation(*owned);
  }
  return CUDA_SUCCESS;
}

}  // namespace cuemu
