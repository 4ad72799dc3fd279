// Device memory, the default memory pool, pinned/registered host memory,
// pointer queries, copies and fills.
#include "emu_internal.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "gather_args.h"

namespace cuemu {

namespace {

// ---------------------------------------------------------------------------
// Address checks

// What a copy or fill may touch on one side.
enum class Need {
  DeviceAccessible,  // device memory, or pinned/registered host memory (UVA)
  Any,               // the above, or pageable host memory the driver cannot check
};

// One side of a copy or fill, as validated at enqueue time.
struct Side {
  uintptr_t addr = 0;
  bool tracked = false;  // inside a live allocation (else: pageable host memory)
  uint64_t id = 0;       // that allocation, re-checked when the operation runs
  AllocKind kind = AllocKind::Device;
  bool device() const { return tracked && is_device_kind(kind); }
};

// The bytes [p, p+n) must lie inside one live allocation, or (Need::Any)
// entirely outside the driver's knowledge.  Caller holds g->mu.
CUresult check_side_locked(uintptr_t p, size_t n, Need need, Side* out) {
  if (p == 0 || p + n < p) return CUDA_ERROR_INVALID_VALUE;
  if (Allocation* a = find_alloc_locked(p)) {
    if (n > a->size - (p - a->base)) return CUDA_ERROR_INVALID_VALUE;  // runs past the end
    *out = Side{p, true, a->id, a->kind};
    return CUDA_SUCCESS;
  }
  // Inside a device's address range but in no allocation: freed, never
  // allocated, or the padding after an allocation.
  if (in_device_va_locked(p) || in_device_va_locked(p + n - 1)) return CUDA_ERROR_INVALID_VALUE;
  if (need == Need::DeviceAccessible) return CUDA_ERROR_INVALID_VALUE;
  *out = Side{p, false, 0, AllocKind::HostAlloc};
  return CUDA_SUCCESS;
}

// Where a side's bytes are when the operation runs, or null if its memory is
// gone.  Caller holds mem_mu (shared) and g->mu.
char* resolve_locked(const Side& s, const char** why) {
  if (!s.tracked) return reinterpret_cast<char*>(s.addr);
  Allocation* a = alloc_by_id_locked(s.id);
  if (!a) {
    *why = "touched memory that was freed before the operation ran";
    return nullptr;
  }
  if (!a->ready) {
    *why = "touched a cuMemAllocAsync allocation before its stream reached the allocation";
    return nullptr;
  }
  return a->host_view + (s.addr - a->base);
}

void fault(Stream& s, const char* op, const Side& dst, const Side* src, size_t n, const char* why) {
  char what[192];
  if (src)
    std::snprintf(what, sizeof what, "%s of %zu bytes from 0x%" PRIxPTR " to 0x%" PRIxPTR, op, n, src->addr, dst.addr);
  else std::snprintf(what, sizeof what, "%s of %zu bytes at 0x%" PRIxPTR, op, n, dst.addr);
  report_fault(s, what, why);
}

// ---------------------------------------------------------------------------
// Copies

using Staging = std::shared_ptr<char[]>;

Op make_copy_op(const char* name, Side dst, Side src, size_t n, Staging staging,
                std::shared_ptr<std::atomic<bool>> faulted) {
  Op op;
  op.what = name;
  op.body = [name, dst, src, n, staging, faulted](Stream& s) {
    std::shared_lock mem(g->mem_mu);  // bytes cannot be unmapped while we copy
    const char* why = nullptr;
    char* d = nullptr;
    const char* from = nullptr;
    {
      std::lock_guard lk(g->mu);
      d = resolve_locked(dst, &why);
      from = staging ? staging.get() : (d ? resolve_locked(src, &why) : nullptr);
    }
    if (!d || !from) {
      fault(s, name, dst, &src, n, why);
      if (faulted) faulted->store(true);
      return;
    }
    std::memmove(d, from, n);
  };
  return op;
}

CUresult copy(const char* name, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream, Need dneed, Need sneed) {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Side d, sr;
  {
    std::lock_guard lk(g->mu);
    if (CUresult r = check_side_locked(dst, n, dneed, &d)) return r;
    if (CUresult r = check_side_locked(src, n, sneed, &sr)) return r;
  }
  if (!sr.tracked && d.device()) {
    // Pageable host -> device, as the real driver does it: wait for the
    // stream's earlier work, copy the source into staging memory, return;
    // the transfer to the device happens in stream order.
    wait_stream_idle(*s);
    Staging staging(new char[n]);
    std::memcpy(staging.get(), reinterpret_cast<const void*>(src), n);
    return enqueue(s, make_copy_op(name, d, sr, n, std::move(staging), nullptr));
  }
  if (d.tracked && sr.tracked) {
    // Device and pinned memory: fully asynchronous.
    return enqueue(s, make_copy_op(name, d, sr, n, nullptr, nullptr));
  }
  // Into pageable memory, or host to host: returns once the copy is done.
  auto faulted = std::make_shared<std::atomic<bool>>(false);
  uint64_t seq = 0;
  if (CUresult r = enqueue(s, make_copy_op(name, d, sr, n, nullptr, faulted), &seq)) return r;
  wait_stream_pos(*s, seq);
  if (faulted->load()) {
    s->ctx->pending_faults.store(0);  // reported here
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Allocation helpers

// A block from the device allocator; on failure the pool's cached blocks are
// released first, so memory held by the pool does not cause a spurious OOM.
std::optional<size_t> device_block_locked(Device& d, size_t block) {
  auto off = d.allocator.allocate(block);
  if (!off && !d.pool.cached.empty()) {
    trim_pool_locked(d.pool, 0);
    off = d.allocator.allocate(block);
  }
  return off;
}

Allocation* new_device_alloc_locked(Device& d, Context* ctx, AllocKind kind, size_t size, size_t offset, size_t block) {
  auto a = std::make_unique<Allocation>();
  a->kind = kind;
  a->base = reinterpret_cast<uintptr_t>(d.va_base) + offset;
  a->size = size;
  a->ctx = ctx;
  a->device = d.ordinal;
  a->host_view = d.shadow + offset;
  a->offset = offset;
  a->block = block;
  return insert_alloc_locked(std::move(a));
}

// The live allocation that starts exactly at p, or null.
Allocation* alloc_at_locked(uintptr_t p) {
  auto it = g->allocs.find(p);
  return it == g->allocs.end() ? nullptr : it->second.get();
}

// Frees a Device/Pool allocation now (caller already synchronised).
CUresult free_device_now(uint64_t id) {
  std::unique_lock mem(g->mem_mu);
  std::lock_guard lk(g->mu);
  Allocation* a = alloc_by_id_locked(id);
  if (!a || a->free_queued) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
  if (a->kind == AllocKind::PoolImport) {
    free_pool_import_locked(a);
    return CUDA_SUCCESS;
  }
  auto owned = remove_alloc_locked(a);
  release_block_locked(*owned);
  return CUDA_SUCCESS;
}

// Removes a host allocation or registration after synchronising its context.
CUresult free_host_range(void* p, AllocKind kind, CUresult not_found) {
  if (CUresult r = check_init()) return r;
  Context* owner = nullptr;
  uint64_t id = 0;
  {
    std::lock_guard lk(g->mu);
    Allocation* a = alloc_at_locked(reinterpret_cast<uintptr_t>(p));
    if (!a || a->kind != kind) return not_found;
    owner = a->ctx;
    id = a->id;
  }
  // Pinned memory may be in use by queued copies: wait for them, as the real
  // driver does before it unpins.
  wait_context_idle(*owner);
  std::unique_lock mem(g->mem_mu);
  std::lock_guard lk(g->mu);
  Allocation* a = alloc_by_id_locked(id);
  if (!a) return not_found;
  auto owned = remove_alloc_locked(a);
  unmap_allocation(*owned);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Pointer attributes

template <typename T>
void put(void* data, T v) {
  std::memcpy(data, &v, sizeof v);
}

// Writes one attribute of ptr.  a == null: the pointer is unknown to the
// driver.  strict (cuPointerGetAttribute): unknown pointers and attributes
// that do not apply are errors; otherwise (cuPointerGetAttributes) they read
// as zero/null.  Boolean attributes are written as one byte (bool), the
// integer-valued ones as unsigned int, as NVIDIA's own bindings read them.
CUresult write_attribute(void* data, int attr, uintptr_t ptr, const Allocation* a, bool strict) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (!a && strict) return CUDA_ERROR_INVALID_VALUE;
  const bool dev = a && is_device_kind(a->kind);
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: put<CUcontext>(data, a ? a->ctx->handle() : nullptr); break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put<unsigned>(data, !a ? 0u : dev ? unsigned{CU_MEMORYTYPE_DEVICE} : unsigned{CU_MEMORYTYPE_HOST});
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put<CUdeviceptr>(data, a ? CUdeviceptr{ptr} : 0); break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (dev && strict) return CUDA_ERROR_INVALID_VALUE;  // device memory has no host address
      put<void*>(data, a && !dev ? reinterpret_cast<void*>(ptr) : nullptr);
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put<bool>(data, false); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: put<unsigned long long>(data, a ? a->id : 0); break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put<bool>(data, false); break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put<int>(data, a ? a->device : 0); break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: put<bool>(data, a && a->kind == AllocKind::Device); break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: put<CUdeviceptr>(data, a ? CUdeviceptr{a->base} : 0); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: put<size_t>(data, a ? a->size : 0); break;
    case CU_POINTER_ATTRIBUTE_MAPPED: put<bool>(data, a != nullptr); break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put<unsigned>(data, a && a->kind == AllocKind::Pool && a->pool->ipc
                              ? unsigned{CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}
                              : 0u);
      break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: put<unsigned>(data, 0u); break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put<unsigned>(data, a ? unsigned{CU_MEM_ACCESS_FLAGS_PROT_READWRITE} : 0u);
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      put<CUmemoryPool>(data, a && a->pool ? reinterpret_cast<CUmemoryPool>(a->pool) : nullptr);
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: put<size_t>(data, a ? a->size : 0); break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put<void*>(data, a ? reinterpret_cast<void*>(a->base) : nullptr);
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: put<unsigned long long>(data, a ? a->id : 0); break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: put<bool>(data, false); break;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return CUDA_ERROR_NOT_SUPPORTED;  // no nv-p2p here
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// ---------------------------------------------------------------------------
// Device memory

CUresult emu_cuMemAlloc_v3020(CUdeviceptr* dptr, size_t bytesize) {
  if (CUresult r = check_init()) return r;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;  // as the real driver
  Device& d = *g->devices[static_cast<size_t>(c->device)];
  if (bytesize > d.mem_size) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t block = round_up(bytesize, kAllocAlignment);
  std::lock_guard lk(g->mu);
  auto off = device_block_locked(d, block);
  if (!off) return CUDA_ERROR_OUT_OF_MEMORY;
  *dptr = new_device_alloc_locked(d, c, AllocKind::Device, bytesize, *off, block)->base;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemFree_v3020(CUdeviceptr dptr) {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Context* owner = nullptr;
  uint64_t id = 0;
  {
    std::lock_guard lk(g->mu);
    Allocation* a = alloc_at_locked(dptr);
    if (!a || (a->kind != AllocKind::Device && a->kind != AllocKind::Pool && a->kind != AllocKind::PoolImport) ||
        a->free_queued)
      return CUDA_ERROR_INVALID_VALUE;
    owner = a->ctx;
    id = a->id;
  }
  // Like cudaFree: wait for the context's queued work, then free.
  wait_context_idle(*owner);
  return free_device_now(id);
}

CUresult emu_cuMemGetAddressRange_v3020(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g->mu);
  Allocation* a = find_alloc_locked(dptr);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = a->base;
  if (psize) *psize = a->size;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Stream-ordered allocation

namespace {

// cuMemAllocAsync and cuMemAllocFromPoolAsync: a block of `p` (reused from
// its cache or taken from the device), usable once `s` reaches the
// allocation.
// `pool` null: the default pool of the stream's device.
CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t block = round_up(bytesize, kAllocAlignment);
  uint64_t id = 0;
  CUdeviceptr base = 0;
  {
    std::lock_guard lk(g->mu);
    Pool* found = pool ? pool_from_handle_locked(pool) : &g->devices[static_cast<size_t>(s->ctx->device)]->pool;
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    Pool& p = *found;
    // An imported pool cannot allocate; a destroyed one is gone (its handle
    // only stays valid until its last allocation is freed).
    if (p.kind == Pool::Kind::Imported || p.destroyed) return CUDA_ERROR_INVALID_VALUE;
    Device& d = *g->devices[static_cast<size_t>(p.device)];
    if (bytesize > d.mem_size) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t off = 0, blk = block;
    // Reuse a block whose free has already executed (never one still
    // pending in some stream), without wasting more than half of it.
    auto it = p.cached.lower_bound(block);
    if (it != p.cached.end() && it->first / 2 <= block) {
      blk = it->first;
      off = it->second;
      p.cached.erase(it);
    } else {
      if (p.max_size != 0 && p.reserved + blk > p.max_size) return CUDA_ERROR_OUT_OF_MEMORY;
      auto o = device_block_locked(d, block);
      if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
      off = *o;
      p.reserved += blk;
      p.reserved_high = std::max(p.reserved_high, p.reserved);
    }
    p.used += blk;
    p.used_high = std::max(p.used_high, p.used);
    ++p.live;
    Allocation* a = new_device_alloc_locked(d, s->ctx, AllocKind::Pool, bytesize, off, blk);
    if (p.shadow) a->host_view = p.shadow + off;  // a shareable pool's bytes live in its own memfd
    a->pool = &p;
    a->ready = false;  // usable once the stream reaches the allocation
    id = a->id;
    base = a->base;
  }
  Op op;
  op.what = "cuMemAllocAsync";
  op.body = [id](Stream&) {
    std::lock_guard lk(g->mu);
    if (Allocation* a = alloc_by_id_locked(id)) a->ready = true;
  };
  if (CUresult r = enqueue(s, std::move(op))) {
    free_device_now(id);
    return r;
  }
  *dptr = base;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult emu_cuMemAllocAsync_v11020(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (g->cfg.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  return alloc_from_pool(dptr, bytesize, nullptr, hStream);
}

CUresult emu_cuMemAllocFromPoolAsync_v11020(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (g->cfg.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from_pool(dptr, bytesize, pool, hStream);
}

CUresult emu_cuMemFreeAsync_v11020(CUdeviceptr dptr, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  if (g->cfg.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  uint64_t id = 0;
  {
    std::lock_guard lk(g->mu);
    Allocation* a = alloc_at_locked(dptr);
    if (!a || (a->kind != AllocKind::Device && a->kind != AllocKind::Pool && a->kind != AllocKind::PoolImport) ||
        a->free_queued)
      return CUDA_ERROR_INVALID_VALUE;
    // An imported pointer opened more than once is freed once per import.
    if (a->kind == AllocKind::PoolImport && a->ipc_refs > 1) {
      --a->ipc_refs;
      return CUDA_SUCCESS;
    }
    a->free_queued = true;
    id = a->id;
  }
  // The memory stays valid until the stream reaches this point; work of
  // other streams that runs afterwards and touches it faults.
  Op op;
  op.what = "cuMemFreeAsync";
  op.body = [id](Stream&) {
    std::unique_lock mem(g->mem_mu);
    std::lock_guard lk(g->mu);
    Allocation* a = alloc_by_id_locked(id);
    if (!a) return;  // its context was destroyed meanwhile
    if (a->kind == AllocKind::PoolImport) return free_pool_import_locked(a);
    auto owned = remove_alloc_locked(a);
    release_block_locked(*owned);
  };
  if (CUresult r = enqueue(s, std::move(op))) {
    std::lock_guard lk(g->mu);
    if (Allocation* a = alloc_by_id_locked(id)) a->free_queued = false;
    return r;
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetDefaultMemPool_v11020(CUmemoryPool* pool_out, CUdevice dev) {
  if (CUresult r = check_init()) return r;
  if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
  Device* d = device_at(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  if (g->cfg.no_pools) return CUDA_ERROR_NOT_SUPPORTED;
  *pool_out = reinterpret_cast<CUmemoryPool>(&d->pool);
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolSetAttribute_v11020(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = check_init()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  auto u64 = [&] {
    cuuint64_t v;
    std::memcpy(&v, value, sizeof v);
    return v;
  };
  auto i32 = [&] {
    int v;
    std::memcpy(&v, value, sizeof v);
    return v;
  };
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->reuse_follow_event_dependencies = i32(); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: p->reuse_allow_opportunistic = i32(); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse_allow_internal_dependencies = i32(); break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = u64(); break;
    // High watermarks can only be reset, to zero; current values are read-only.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (u64() != 0) return CUDA_ERROR_INVALID_VALUE;
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (u64() != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolGetAttribute_v11020(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = check_init()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: put<int>(value, p->reuse_follow_event_dependencies); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: put<int>(value, p->reuse_allow_opportunistic); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      put<int>(value, p->reuse_allow_internal_dependencies);
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: put<cuuint64_t>(value, p->release_threshold); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: put<cuuint64_t>(value, p->reserved); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: put<cuuint64_t>(value, p->reserved_high); break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: put<cuuint64_t>(value, p->used); break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: put<cuuint64_t>(value, p->used_high); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuMemPoolTrimTo_v11020(CUmemoryPool pool, size_t minBytesToKeep) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g->mu);
  Pool* p = pool_from_handle_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  trim_pool_locked(*p, minBytesToKeep);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Pinned and registered host memory

CUresult emu_cuMemHostAlloc_v2020(void** pp, size_t bytesize, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  constexpr unsigned kAll = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (!pp || (Flags & ~kAll)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t len = round_up(bytesize, page_size());
  if (len < bytesize) return CUDA_ERROR_OUT_OF_MEMORY;
  // Its own mapping, so a use after cuMemFreeHost faults on the host.
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = std::make_unique<Allocation>();
  a->kind = AllocKind::HostAlloc;
  a->base = reinterpret_cast<uintptr_t>(p);
  a->size = bytesize;
  a->ctx = c;
  a->device = c->device;
  a->host_view = static_cast<char*>(p);
  a->flags = Flags;
  a->map_base = p;
  a->map_len = len;
  std::lock_guard lk(g->mu);
  insert_alloc_locked(std::move(a));
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult emu_cuMemFreeHost_v2000(void* p) { return free_host_range(p, AllocKind::HostAlloc, CUDA_ERROR_INVALID_VALUE); }

CUresult emu_cuMemHostGetDevicePointer_v3020(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard lk(g->mu);
  Allocation* a = find_alloc_locked(reinterpret_cast<uintptr_t>(p));
  if (!a || is_device_kind(a->kind)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

CUresult emu_cuMemHostRegister_v6050(void* p, size_t bytesize, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  constexpr unsigned kAll = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                            CU_MEMHOSTREGISTER_READ_ONLY;
  uintptr_t b = reinterpret_cast<uintptr_t>(p);
  if (!p || bytesize == 0 || b + bytesize < b || (Flags & ~kAll)) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard lk(g->mu);
  for (auto& d : g->devices) {
    uintptr_t va = reinterpret_cast<uintptr_t>(d->va_base);
    if (b < va + d->mem_size && va < b + bytesize) return CUDA_ERROR_INVALID_VALUE;
  }
  // Allocations never overlap, so only the last one starting before the end
  // of the range can overlap it.
  auto it = g->allocs.lower_bound(b + bytesize);
  if (it != g->allocs.begin()) {
    Allocation* prev = std::prev(it)->second.get();
    if (prev->base + prev->size > b) {
      return is_device_kind(prev->kind) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  auto a = std::make_unique<Allocation>();
  a->kind = AllocKind::HostRegister;
  a->base = b;
  a->size = bytesize;
  a->ctx = c;
  a->device = c->device;
  a->host_view = static_cast<char*>(p);
  a->flags = Flags;
  insert_alloc_locked(std::move(a));
  return CUDA_SUCCESS;
}

CUresult emu_cuMemHostUnregister_v4000(void* p) {
  return free_host_range(p, AllocKind::HostRegister, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

// ---------------------------------------------------------------------------
// Pointer queries

CUresult emu_cuPointerGetAttribute_v4000(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g->mu);
  return write_attribute(data, static_cast<int>(attribute), ptr, find_alloc_locked(ptr), true);
}

CUresult emu_cuPointerGetAttributes_v7000(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                          CUdeviceptr ptr) {
  if (CUresult r = check_init()) return r;
  if (numAttributes == 0 || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lk(g->mu);
  const Allocation* a = find_alloc_locked(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    static_assert(sizeof(CUpointer_attribute) == sizeof(int));
    // Read as a plain integer: callers (C code) may pass any value, which
    // must answer CUDA_ERROR_INVALID_VALUE rather than be undefined.
    int raw = 0;
    std::memcpy(&raw, &attributes[i], sizeof raw);
    if (CUresult r = write_attribute(data[i], raw, ptr, a, false)) return r;
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Copies and fills

CUresult emu_cuMemcpyAsync_v4000(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return copy("cuMemcpyAsync", dst, src, ByteCount, hStream, Need::Any, Need::Any);
}

CUresult emu_cuMemcpyHtoDAsync_v3020(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  return copy("cuMemcpyHtoDAsync", dstDevice, reinterpret_cast<CUdeviceptr>(srcHost), ByteCount, hStream,
              Need::DeviceAccessible, Need::Any);
}

CUresult emu_cuMemcpyDtoHAsync_v3020(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return copy("cuMemcpyDtoHAsync", reinterpret_cast<CUdeviceptr>(dstHost), srcDevice, ByteCount, hStream, Need::Any,
              Need::DeviceAccessible);
}

CUresult emu_cuMemcpyDtoDAsync_v3020(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return copy("cuMemcpyDtoDAsync", dstDevice, srcDevice, ByteCount, hStream, Need::DeviceAccessible,
              Need::DeviceAccessible);
}

CUresult emu_cuMemcpyPeerAsync_v4000(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                     CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  Context* dc = context_from_handle(dstContext);
  Context* sc = context_from_handle(srcContext);
  if (!dc || !sc || !dc->active.load() || !sc->active.load()) return CUDA_ERROR_INVALID_CONTEXT;
  // No peer access needed: without it the driver stages through the host.
  return copy("cuMemcpyPeerAsync", dstDevice, srcDevice, ByteCount, hStream, Need::DeviceAccessible,
              Need::DeviceAccessible);
}

// cuMemcpyBatchAsync (12.8 and 13.0 ABIs; `fail_index` is 12.8's failIdx,
// null for 13.0).  The batch's arrays and attributes, then every copy with
// cuMemcpyAsync's checks, are validated before anything is queued; the
// copies then run as one operation in stream order.
CUresult memcpy_batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
                      size_t* attrsIdxs, size_t numAttrs, size_t* fail_index, CUstream hStream) {
  if (fail_index) *fail_index = SIZE_MAX;  // no copy in particular
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  // "Must not be legacy NULL stream."
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  if (!dsts || !srcs || !sizes || count == 0) return CUDA_ERROR_INVALID_VALUE;
  // attrsIdxs: starts at 0, strictly increasing, each below count.
  if (!attrs || !attrsIdxs || numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < numAttrs; ++k) {
    if (attrsIdxs[k] >= count || (k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1])) return CUDA_ERROR_INVALID_VALUE;
    const CUmemcpyAttributes& a = attrs[k];
    if (a.srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
        a.srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        a.srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.flags & ~static_cast<unsigned>(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)) return CUDA_ERROR_INVALID_VALUE;
  }
  struct Piece {
    Side dst, src;
    size_t n;
  };
  std::vector<Piece> pieces;
  pieces.reserve(count);
  bool pageable = false;
  {
    std::lock_guard lk(g->mu);
    for (size_t i = 0; i < count; ++i) {
      if (sizes[i] == 0) continue;
      Piece p{{}, {}, sizes[i]};
      CUresult r = check_side_locked(dsts[i], p.n, Need::Any, &p.dst);
      if (r == CUDA_SUCCESS) r = check_side_locked(srcs[i], p.n, Need::Any, &p.src);
      if (r != CUDA_SUCCESS) {
        if (fail_index) *fail_index = i;
        return r;
      }
      pageable = pageable || !p.dst.tracked || !p.src.tracked;
      pieces.push_back(p);
    }
  }
  if (pieces.empty()) return CUDA_SUCCESS;
  auto faulted = std::make_shared<std::atomic<bool>>(false);
  Op op;
  op.what = "cuMemcpyBatchAsync";
  op.body = [pieces = std::move(pieces), faulted](Stream& st) {
    std::shared_lock mem(g->mem_mu);  // bytes cannot be unmapped while we copy
    for (const Piece& p : pieces) {
      const char* why = nullptr;
      char* d = nullptr;
      const char* from = nullptr;
      {
        std::lock_guard lk(g->mu);
        d = resolve_locked(p.dst, &why);
        from = d ? resolve_locked(p.src, &why) : nullptr;
      }
      if (!d || !from) {
        fault(st, "cuMemcpyBatchAsync", p.dst, &p.src, p.n, why);
        faulted->store(true);
        return;  // the rest of the batch does not run
      }
      std::memmove(d, from, p.n);
    }
  };
  if (!pageable) return enqueue(s, std::move(op));  // device and pinned memory: fully asynchronous
  // Pageable memory on either side, which the driver cannot reach from the
  // stream later: as cuMemcpyAsync does, the call returns once the batch ran.
  uint64_t seq = 0;
  if (CUresult r = enqueue(s, std::move(op), &seq)) return r;
  wait_stream_pos(*s, seq);
  if (faulted->load()) {
    s->ctx->pending_faults.store(0);  // reported here
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return CUDA_SUCCESS;
}

CUresult emu_cuMemcpyBatchAsync_v13000(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                       CUstream hStream) {
  return memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream);
}

CUresult emu_cuMemsetD8Async_v3020(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  if (N == 0) return CUDA_SUCCESS;
  Side d;
  {
    std::lock_guard lk(g->mu);
    if (CUresult r = check_side_locked(dstDevice, N, Need::DeviceAccessible, &d)) return r;
  }
  Op op;
  op.what = "cuMemsetD8Async";
  op.body = [d, uc, N](Stream& st) {
    std::shared_lock mem(g->mem_mu);
    const char* why = nullptr;
    char* p = nullptr;
    {
      std::lock_guard lk(g->mu);
      p = resolve_locked(d, &why);
    }
    if (!p) return fault(st, "cuMemsetD8Async", d, nullptr, N, why);
    std::memset(p, uc, N);
  };
  return enqueue(s, std::move(op));
}

// ---------------------------------------------------------------------------
// Modules and kernel launches
//
// The emulation cannot run device code.  It loads any fatbin image (by its
// magic) as a module of the current context and knows one function by
// name: cuarrow's gather kernel (src/runtime/kernels/gather_args.h), which
// a launch runs on the host in stream order, block by block as the GPU
// would: the tiles the grid names, no more, an address outside the
// allocations an illegal-address fault of the context.  Any other name is
// CUDA_ERROR_NOT_FOUND.

namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;

struct Module {
  Context* ctx = nullptr;
  uint64_t generation = 0;
};

struct Function {
  Module* module = nullptr;
};

struct Modules {
  std::mutex mu;
  std::unordered_map<const void*, std::unique_ptr<Module>> modules;
  std::unordered_map<const void*, std::unique_ptr<Function>> functions;
};

Modules& modules() {
  static auto* m = new Modules;  // handles may be used until the process ends
  return *m;
}

// The gather kernel's work for block `tile`, by the kernel's own rule
// (cuarrow_gather_tile): the item whose tiles hold it, that tile's bytes.  False, with a fault
// reported, when its memory is not there.
bool run_gather_tile(Stream& st, const cuarrow_gather_args& a, uint32_t tile) {
  uint64_t begin = 0, end = 0;
  const cuarrow_gather_item& it = a.items[cuarrow_gather_tile(&a, tile, &begin, &end)];
  if (begin == end) return true;
  const uint64_t n = end - begin;
  const char* why = "touched memory outside every allocation of the device";
  Side d, sr;
  char* to = nullptr;
  const char* from = nullptr;
  {
    std::lock_guard lk(g->mu);
    if (check_side_locked(it.dst + begin, n, Need::DeviceAccessible, &d) == CUDA_SUCCESS &&
        check_side_locked(it.src + begin, n, Need::DeviceAccessible, &sr) == CUDA_SUCCESS) {
      to = resolve_locked(d, &why);
      from = to ? resolve_locked(sr, &why) : nullptr;
    }
  }
  if (!to || !from) {
    d.addr = it.dst + begin;
    sr.addr = it.src + begin;
    fault(st, CUARROW_GATHER_KERNEL_NAME, d, &sr, n, why);
    return false;
  }
  std::memmove(to, from, n);
  return true;
}

}  // namespace

CUresult emu_cuModuleLoadData_v2000(CUmodule* module, const void* image) {
  if (CUresult r = check_init()) return r;
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic != kFatbinMagic) return CUDA_ERROR_INVALID_IMAGE;
  auto m = std::make_unique<Module>();
  m->ctx = c;
  m->generation = c->generation;
  Modules& all = modules();
  std::lock_guard lk(all.mu);
  *module = reinterpret_cast<CUmodule>(m.get());
  all.modules.emplace(m.get(), std::move(m));
  return CUDA_SUCCESS;
}

CUresult emu_cuModuleUnload_v2000(CUmodule hmod) {
  if (CUresult r = check_init()) return r;
  Modules& all = modules();
  std::lock_guard lk(all.mu);
  auto it = all.modules.find(hmod);
  if (it == all.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::erase_if(all.functions, [&](const auto& f) { return f.second->module == it->second.get(); });
  all.modules.erase(it);
  return CUDA_SUCCESS;
}

CUresult emu_cuModuleGetFunction_v2000(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (CUresult r = check_init()) return r;
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  Modules& all = modules();
  std::lock_guard lk(all.mu);
  auto it = all.modules.find(hmod);
  if (it == all.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strcmp(name, CUARROW_GATHER_KERNEL_NAME) != 0) return CUDA_ERROR_NOT_FOUND;
  for (const auto& [h, f] : all.functions) {
    if (f->module == it->second.get()) {
      *hfunc = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  }
  auto f = std::make_unique<Function>();
  f->module = it->second.get();
  *hfunc = reinterpret_cast<CUfunction>(f.get());
  all.functions.emplace(f.get(), std::move(f));
  return CUDA_SUCCESS;
}

CUresult emu_cuLaunchKernel_v4000(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  {
    Modules& all = modules();
    std::lock_guard lk(all.mu);
    auto it = all.functions.find(f);
    if (it == all.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
    const Module& m = *it->second->module;
    // A function of another context, or of one reset since it was loaded.
    if (m.ctx != c || m.generation != c->generation) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (gridDimX == 0 || gridDimY == 0 || gridDimZ == 0 || blockDimX == 0 || blockDimY == 0 || blockDimZ == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (gridDimX > 0x7fffffffu || gridDimY > 65535 || gridDimZ > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t{blockDimX} * blockDimY * blockDimZ > CUARROW_GATHER_THREADS) return CUDA_ERROR_INVALID_VALUE;
  if (sharedMemBytes > 48 * 1024) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr || kernelParams == nullptr || kernelParams[0] == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  // The parameters are copied at the launch, as the driver does.
  auto args = std::make_shared<cuarrow_gather_args>();
  std::memcpy(args.get(), kernelParams[0], sizeof(cuarrow_gather_args));
  if (args->count == 0 || args->count > CUARROW_GATHER_MAX_ITEMS) {
    // The kernel would read items outside the parameters: a fault when it runs.
    Op op;
    op.what = CUARROW_GATHER_KERNEL_NAME;
    op.body = [](Stream& st) { report_fault(st, CUARROW_GATHER_KERNEL_NAME, "item count outside 1..1000"); };
    return enqueue(s, std::move(op));
  }
  const uint64_t blocks = uint64_t{gridDimX} * gridDimY * gridDimZ;
  Op op;
  op.what = CUARROW_GATHER_KERNEL_NAME;
  op.body = [args, blocks](Stream& st) {
    std::shared_lock mem(g->mem_mu);  // bytes cannot be unmapped while we copy
    for (uint64_t b = 0; b < blocks; ++b) {
      // blockIdx.x alone names the tile (a grid of more dimensions repeats it).
      if (!run_gather_tile(st, *args, static_cast<uint32_t>(b % 0x80000000u))) return;
    }
  };
  return enqueue(s, std::move(op));
}

}  // namespace cuemu
