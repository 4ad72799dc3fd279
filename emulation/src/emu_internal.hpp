// Internal state of the host emulation of the CUDA driver.
//
// Everything here has hidden visibility (the library is built with
// -fvisibility=hidden); only the loader entry points and the control API of
// cuarrow_emulation.h are exported.
//
// Locking, in the order they may be taken:
//   Driver::mem_mu   (shared_mutex) held shared by a stream worker while it
//                    copies bytes, exclusively by anything that unmaps or
//                    frees memory, so bytes never vanish under a running copy;
//   Driver::mu       all registries (allocations, streams, events, contexts,
//                    allocators, pools);
//   Stream::mu       one stream's queue;
//   Driver::prog_mu  progress notifications (stream completion, markers).
// Nobody waits for stream progress while holding mem_mu or mu, and stream
// workers never hold a lock while they wait for a dependency or run a host
// callback, so the graph of waits stays acyclic.
#pragma once

// The library is dlopen'ed: its thread_local variables would live in dynamic
// TLS, which LeakSanitizer's tracer (GCC 12, glibc 2.36) walks and crashes on
// at exit.  Static TLS for these few small variables only (a global
// -ftls-model would also bind libstdc++'s TLS that way, and dlopen then fails
// once the static TLS reserve is used up, e.g. after importing pyarrow).
#define CUARROW_EMU_STATIC_TLS __attribute__((tls_model("initial-exec")))

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cuemu {

using Clock = std::chrono::steady_clock;

// The CUDA version the emulation is a driver of (its entry points' newest
// ABIs), unless CUARROW_EMULATED_DRIVER_VERSION names an older one.
inline constexpr int kEmulatedDriverVersion = 13000;

// The driver version the emulation reports and answers cuGetProcAddress as
// (read at each call: lookups come before cuInit).
int emulated_driver_version();

// Device allocations are aligned (and their reserved blocks rounded) to this.
inline constexpr size_t kAllocAlignment = 256;

// FNV-1a 64: the checksum of the emulation's IPC handles and pool pointer
// exports, which rejects garbage (not forgeries).
inline uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const unsigned char*>(p)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Config {
  int devices = 1;
  size_t memory = size_t{1} << 30;
  unsigned op_delay_us = 0;
  bool no_pools = false;
  bool no_peer = false;
};

// First-fit allocator over [0, size) with coalescing frees.  Offsets and sizes
// handed to it are multiples of kAllocAlignment.
class RangeAllocator {
 public:
  void reset(size_t size);
  std::optional<size_t> allocate(size_t size);
  void release(size_t offset, size_t size);
  size_t used() const { return used_; }
  size_t size() const { return size_; }

 private:
  std::map<size_t, size_t> free_;  // offset -> length
  size_t size_ = 0;
  size_t used_ = 0;
};

struct Context;
struct Stream;
struct Pool;

// PoolImport: a pointer of another process's pool, imported with
// cuMemPoolImportPointer into an imported pool.
enum class AllocKind { Device, Pool, IpcImport, PoolImport, HostAlloc, HostRegister };

inline bool is_device_kind(AllocKind k) {
  return k == AllocKind::Device || k == AllocKind::Pool || k == AllocKind::IpcImport || k == AllocKind::PoolImport;
}

// One live range of the unified address space that the driver knows about.
struct Allocation {
  uint64_t id = 0;  // process-unique, never reused (CU_POINTER_ATTRIBUTE_BUFFER_ID)
  AllocKind kind = AllocKind::Device;
  uintptr_t base = 0;
  size_t size = 0;         // as requested; copies are checked against this
  Context* ctx = nullptr;  // owning context
  int device = 0;
  char* host_view = nullptr;  // where the bytes really live (shadow, host memory, ipc map)

  // Device / Pool: the block in the device's memory (PoolImport: the
  // exporter's block in the imported pool's memfd).
  size_t offset = 0;
  size_t block = 0;
  Pool* pool = nullptr;      // Pool: the pool allocated from; PoolImport: the imported pool
  bool ready = true;         // false until the stream reaches a cuMemAllocAsync
  bool free_queued = false;  // a cuMemFreeAsync is pending

  unsigned flags = 0;  // host alloc / register flags

  // HostAlloc: the mmap.  IpcImport: the reservation and the shared map.
  void* map_base = nullptr;
  size_t map_len = 0;
  void* reserve_base = nullptr;
  size_t reserve_len = 0;
  int ipc_pid = 0;
  uint64_t ipc_remote_id = 0;  // IpcImport, PoolImport: the exporter's buffer id
  int ipc_refs = 0;            // IpcImport, PoolImport: opens not yet closed / freed
};

// A memory pool: the default pool of a device (cuMemAllocAsync), a pool made
// with cuMemPoolCreate (cuMemAllocFromPoolAsync), or a pool imported from
// another process.  Freed blocks stay cached in the pool (reserved) until a
// synchronisation trims the pool to its release threshold, as the real driver
// does.
//
// A pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR keeps its
// bytes in a memfd of its own (named "cuarrow-emu-pool-<token>-dev<N>", as
// large as the device, sparse) at the same offsets as the device allocator
// hands out, so that the descriptor is the shareable handle: another process
// maps it and finds every allocation at its offset.  Imported pools map that
// memfd and allocate nothing.
struct Pool {
  enum class Kind { Default, Created, Imported };
  Kind kind = Kind::Default;
  int device = 0;
  bool ipc = false;        // created with the POSIX file descriptor handle type
  bool shared = false;     // ipc pools: exported at least once (cuMemPoolExportPointer needs it)
  int memfd = -1;          // ipc pools: the bytes
  char* shadow = nullptr;  // ipc and imported pools: read/write map of the memfd
  size_t shadow_len = 0;
  uint64_t token = 0;                    // ipc and imported pools: the pool's identity (memfd name, export data)
  size_t max_size = 0;                   // created pools: CUmemPoolProps::maxSize (0: the device)
  size_t live = 0;                       // allocations (created) or imported pointers (imported) not yet freed
  bool destroyed = false;                // cuMemPoolDestroy called; released when `live` reaches 0
  std::vector<int> access;               // devices given access with cuMemPoolSetAccess (besides its own)
  std::multimap<size_t, size_t> cached;  // block size -> offset
  uint64_t release_threshold = 0;
  uint64_t reserved = 0, reserved_high = 0;
  uint64_t used = 0, used_high = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
};

// Completion of one cuEventRecord.  Guarded by Driver::prog_mu.
struct Marker {
  bool done = false;
  Clock::time_point when{};
};

// Something an operation waits for before it runs: a stream position or a
// recorded event.
struct Dep {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
  std::shared_ptr<Marker> marker;
};

struct Op {
  const char* what = "";
  std::vector<Dep> deps;
  std::function<void(Stream&)> body;
};

enum class StreamKind { User, Legacy, PerThread };

struct Stream {
  uint64_t id = 0;
  CUstream handle = nullptr;
  Context* ctx = nullptr;
  unsigned flags = 0;
  StreamKind kind = StreamKind::User;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> queue;   // front: the operation running or about to run
  uint64_t enqueued = 0;  // guarded by mu
  std::atomic<uint64_t> completed{0};
  bool stop = false;  // guarded by mu: drain the queue, then exit
  std::atomic<bool> exited{false};
  std::thread worker;

  // Synchronises with the legacy default stream.
  bool blocking() const { return kind != StreamKind::User || !(flags & CU_STREAM_NON_BLOCKING); }
};

struct Event {
  uint64_t id = 0;
  CUevent handle = nullptr;
  Context* ctx = nullptr;
  unsigned flags = 0;
  std::shared_ptr<Marker> last;  // latest record; null: never recorded
};

// A primary context.  There is exactly one object per device for the life of
// the driver, so a stale handle never dangles: it answers "destroyed" until a
// later retain re-creates the context (with the same handle).
struct Context {
  int device = 0;
  int retain = 0;  // guarded by Driver::mu
  std::atomic<bool> active{false};
  uint64_t generation = 0;
  std::shared_ptr<Stream> legacy;
  std::map<std::thread::id, std::shared_ptr<Stream>> per_thread;
  std::atomic<int> pending_faults{0};
  std::vector<int> peers;  // devices whose memory this context may access
  CUcontext handle() { return reinterpret_cast<CUcontext>(this); }
};

struct Device {
  int ordinal = 0;
  size_t mem_size = 0;
  char* va_base = nullptr;  // PROT_NONE reservation: the device addresses
  char* shadow = nullptr;   // read/write mapping of the memfd: the bytes
  int memfd = -1;
  RangeAllocator allocator;
  Pool pool;
  Context ctx;
  bool contains(uintptr_t p) const {
    return p >= reinterpret_cast<uintptr_t>(va_base) && p < reinterpret_cast<uintptr_t>(va_base) + mem_size;
  }
};

struct Driver {
  Config cfg;
  std::vector<std::unique_ptr<Device>> devices;

  std::shared_mutex mem_mu;
  std::mutex mu;
  std::map<uintptr_t, std::unique_ptr<Allocation>> allocs;  // by base address
  std::unordered_map<uint64_t, Allocation*> allocs_by_id;
  std::unordered_map<CUstream, std::shared_ptr<Stream>> streams;  // user streams
  std::unordered_map<CUevent, std::shared_ptr<Event>> events;
  std::map<CUmemoryPool, std::unique_ptr<Pool>> pools;  // created and imported pools
  std::vector<std::shared_ptr<Stream>> zombies;         // stopped, not yet joined
  uint64_t next_id = 1;

  std::mutex prog_mu;
  std::condition_variable prog_cv;
  std::atomic<bool> shutting_down{false};
};

// ---------------------------------------------------------------------------
// Global state (state.cpp)

enum class State : int { Uninitialized = 0, Ready = 1, Dead = 2, ForkedChild = 3 };
extern std::atomic<int> g_state;
extern Driver* g;
extern std::atomic<unsigned> g_op_delay_us;
extern std::atomic<size_t> g_fault_count;
CUARROW_EMU_STATIC_TLS extern thread_local bool t_in_stream_worker;

// CUDA_SUCCESS when the driver may be used; NOT_INITIALIZED before cuInit or
// in a forked child, DEINITIALIZED once process exit has begun.
CUresult check_init();

size_t round_up(size_t v, size_t a);
size_t page_size();

Device* device_at(CUdevice d);              // null for a bad ordinal (needs init)
Context* context_from_handle(CUcontext h);  // null if not one of ours
CUresult current_context(Context** out);    // INVALID_CONTEXT / CONTEXT_IS_DESTROYED
Context* current_context_or_null();

// Allocation registry; callers hold g->mu.
Allocation* find_alloc_locked(uintptr_t p);  // containing p
Allocation* alloc_by_id_locked(uint64_t id);
bool in_device_va_locked(uintptr_t p);
Allocation* insert_alloc_locked(std::unique_ptr<Allocation> a);
std::unique_ptr<Allocation> remove_alloc_locked(Allocation* a);
// Gives a Device/Pool allocation's block back (to the pool cache or the
// device), after remove_alloc_locked.  Caller holds mem_mu exclusively.
void release_block_locked(Allocation& a);
// Returns cached pool blocks to the device until reserved <= keep.
void trim_pool_locked(Pool& pool, uint64_t keep);
// The pool behind a handle (a device's default pool, a created or an imported
// one), or null.  Caller holds g->mu.
Pool* pool_from_handle_locked(CUmemoryPool h);
// Releases a destroyed pool once nothing of it is live (its cached blocks go
// back to the device, its memfd and mapping are closed).  Caller holds mem_mu
// exclusively and g->mu.
void release_pool_if_done_locked(Pool* pool);
// Removes and unmaps an imported pointer (PoolImport) whose last reference
// went.  Caller holds mem_mu exclusively and g->mu.
void free_pool_import_locked(Allocation* a);
// Gives the bytes [offset, offset+len) of a memfd back to the system.
void punch_hole(int fd, size_t offset, size_t len);
// Frees everything an Allocation maps (host memory, ipc mappings).
void unmap_allocation(Allocation& a);

// Makes the calling thread's exit stop its per-thread default streams.
void arm_per_thread_stream_cleanup();

// ---------------------------------------------------------------------------
// Streams (streams.cpp)

// Resolves a stream handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a
// created stream).  Takes g->mu.
CUresult resolve_stream(CUstream h, std::shared_ptr<Stream>* out);
// Appends an operation, adding the implicit dependencies of the legacy
// default stream.  *seq receives the position that marks its completion.
CUresult enqueue(const std::shared_ptr<Stream>& s, Op op, uint64_t* seq = nullptr);
void wait_stream_pos(Stream& s, uint64_t seq);
void wait_stream_idle(Stream& s);
// Waits for every stream of the context (snapshot of their positions).
void wait_context_idle(Context& ctx);
// Waits for every stream of every context.
void wait_all_idle();
// Reports (once) faults of the context's stream operations, then trims the
// device pool: what every synchronising call does after waiting.
CUresult finish_sync(Context& ctx);
void report_fault(Stream& s, const char* what, const char* why);
void notify_progress();
std::shared_ptr<Stream> make_stream_locked(Context* ctx, StreamKind kind, unsigned flags);
void stop_stream(Stream& s);  // drain then exit; caller moves it to zombies
void reap_zombies_locked();
void shutdown_streams();

// ---------------------------------------------------------------------------
// Fault injection and call counting (faults.cpp; control API in
// cuarrow_emulation.h).  One index per entry point of
// src/runtime/driver_entry_points.def (ep_<name>: pasting keeps <cuda.h>'s name
// macros such as cuMemAlloc -> cuMemAlloc_v2 out of it).

enum EntryPointId : int {
#define CUARROW_DRIVER_ENTRY(name, version, required) ep_##name,
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY
  kEntryPointCount
};

// Counts a call of entry point `id` and answers the fault armed for it, if
// one fires now (CUDA_SUCCESS otherwise).  Every guarded entry calls it first.
CUresult fault_check(int id) noexcept;

// ---------------------------------------------------------------------------
// Entry points (each *_vNNNN matches PFN_<name>_vNNNN exactly; checked where
// the cuGetProcAddress table is built).

// errors and version (entry_points.cpp)
CUresult emu_cuGetErrorName_v6000(CUresult error, const char** pStr);
CUresult emu_cuGetErrorString_v6000(CUresult error, const char** pStr);
CUresult emu_cuDriverGetVersion_v2020(int* driverVersion);

// init, devices and contexts (state.cpp)
CUresult emu_cuInit_v2000(unsigned int Flags);
CUresult emu_cuDeviceGetCount_v2000(int* count);
CUresult emu_cuDeviceGet_v2000(CUdevice* device, int ordinal);
CUresult emu_cuDeviceGetName_v2000(char* name, int len, CUdevice dev);
CUresult emu_cuDeviceTotalMem_v3020(size_t* bytes, CUdevice dev);
CUresult emu_cuDeviceGetAttribute_v2000(int* pi, CUdevice_attribute attrib, CUdevice dev);
CUresult emu_cuDeviceGetPCIBusId_v4010(char* pciBusId, int len, CUdevice dev);
CUresult emu_cuDeviceCanAccessPeer_v4000(int* canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult emu_cuDevicePrimaryCtxRetain_v7000(CUcontext* pctx, CUdevice dev);
CUresult emu_cuDevicePrimaryCtxRelease_v11000(CUdevice dev);
CUresult emu_cuDevicePrimaryCtxGetState_v7000(CUdevice dev, unsigned int* flags, int* active);
CUresult emu_cuCtxPushCurrent_v4000(CUcontext ctx);
CUresult emu_cuCtxPopCurrent_v4000(CUcontext* pctx);
CUresult emu_cuCtxGetCurrent_v4000(CUcontext* pctx);
CUresult emu_cuCtxGetDevice_v2000(CUdevice* device);
CUresult emu_cuCtxGetDevice_v13000(CUdevice* device, CUcontext ctx);
CUresult emu_cuCtxEnablePeerAccess_v4000(CUcontext peerContext, unsigned int Flags);
CUresult emu_cuMemGetInfo_v3020(size_t* free, size_t* total);

// streams and events (streams.cpp)
CUresult emu_cuCtxSynchronize_v2000();
CUresult emu_cuCtxSynchronize_v13000(CUcontext ctx);
CUresult emu_cuStreamCreate_v2000(CUstream* phStream, unsigned int Flags);
CUresult emu_cuStreamDestroy_v4000(CUstream hStream);
CUresult emu_cuStreamSynchronize_v2000(CUstream hStream);
CUresult emu_cuStreamQuery_v2000(CUstream hStream);
CUresult emu_cuStreamWaitEvent_v3020(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult emu_cuStreamGetCtx_v9020(CUstream hStream, CUcontext* pctx);
CUresult emu_cuStreamGetCtx_v12050(CUstream hStream, CUcontext* pctx, CUgreenCtx* pGreenCtx);
CUresult emu_cuEventCreate_v2000(CUevent* phEvent, unsigned int Flags);
CUresult emu_cuEventDestroy_v4000(CUevent hEvent);
CUresult emu_cuEventRecord_v2000(CUevent hEvent, CUstream hStream);
CUresult emu_cuEventQuery_v2000(CUevent hEvent);
CUresult emu_cuEventSynchronize_v2000(CUevent hEvent);
CUresult emu_cuEventElapsedTime_v2000(float* pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult emu_cuLaunchHostFunc_v10000(CUstream hStream, CUhostFn fn, void* userData);

// memory (memory.cpp)
CUresult emu_cuMemAlloc_v3020(CUdeviceptr* dptr, size_t bytesize);
CUresult emu_cuMemFree_v3020(CUdeviceptr dptr);
CUresult emu_cuMemGetAddressRange_v3020(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr);
CUresult emu_cuMemAllocAsync_v11020(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult emu_cuMemFreeAsync_v11020(CUdeviceptr dptr, CUstream hStream);
CUresult emu_cuDeviceGetDefaultMemPool_v11020(CUmemoryPool* pool_out, CUdevice dev);
CUresult emu_cuMemPoolSetAttribute_v11020(CUmemoryPool pool, CUmemPool_attribute attr, void* value);
CUresult emu_cuMemPoolGetAttribute_v11020(CUmemoryPool pool, CUmemPool_attribute attr, void* value);
CUresult emu_cuMemPoolTrimTo_v11020(CUmemoryPool pool, size_t minBytesToKeep);
CUresult emu_cuMemAllocFromPoolAsync_v11020(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult emu_cuMemHostAlloc_v2020(void** pp, size_t bytesize, unsigned int Flags);
CUresult emu_cuMemFreeHost_v2000(void* p);
CUresult emu_cuMemHostGetDevicePointer_v3020(CUdeviceptr* pdptr, void* p, unsigned int Flags);
CUresult emu_cuMemHostRegister_v6050(void* p, size_t bytesize, unsigned int Flags);
CUresult emu_cuMemHostUnregister_v4000(void* p);
CUresult emu_cuPointerGetAttribute_v4000(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult emu_cuPointerGetAttributes_v7000(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                          CUdeviceptr ptr);
CUresult emu_cuMemcpyAsync_v4000(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult emu_cuMemcpyHtoDAsync_v3020(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream);
CUresult emu_cuMemcpyDtoHAsync_v3020(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult emu_cuMemcpyDtoDAsync_v3020(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult emu_cuMemcpyPeerAsync_v4000(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                     CUcontext srcContext, size_t ByteCount, CUstream hStream);
CUresult emu_cuMemsetD8Async_v3020(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
// Both ABIs of cuMemcpyBatchAsync: `fail_index` is 12.8's failIdx (null for 13.0's).
CUresult memcpy_batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
                      size_t* attrsIdxs, size_t numAttrs, size_t* fail_index, CUstream hStream);
CUresult emu_cuMemcpyBatchAsync_v13000(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream);

// modules and kernel launches (memory.cpp): cuarrow's gather kernel, run on the host
CUresult emu_cuModuleLoadData_v2000(CUmodule* module, const void* image);
CUresult emu_cuModuleUnload_v2000(CUmodule hmod);
CUresult emu_cuModuleGetFunction_v2000(CUfunction* hfunc, CUmodule hmod, const char* name);
CUresult emu_cuLaunchKernel_v4000(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra);

// IPC (ipc.cpp)
CUresult emu_cuIpcGetMemHandle_v4010(CUipcMemHandle* pHandle, CUdeviceptr dptr);
CUresult emu_cuIpcOpenMemHandle_v11000(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult emu_cuIpcCloseMemHandle_v4010(CUdeviceptr dptr);

// memory pools that can be shared between processes (pool_ipc.cpp)
CUresult emu_cuMemPoolCreate_v11020(CUmemoryPool* pool, const CUmemPoolProps* poolProps);
CUresult emu_cuMemPoolDestroy_v11020(CUmemoryPool pool);
CUresult emu_cuMemPoolSetAccess_v11020(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count);
CUresult emu_cuMemPoolGetAccess_v11020(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation* location);
CUresult emu_cuMemPoolExportToShareableHandle_v11020(void* handle_out, CUmemoryPool pool,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags);
CUresult emu_cuMemPoolImportFromShareableHandle_v11020(CUmemoryPool* pool_out, void* handle,
                                                       CUmemAllocationHandleType handleType, unsigned long long flags);
CUresult emu_cuMemPoolExportPointer_v11020(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr);
CUresult emu_cuMemPoolImportPointer_v11020(CUdeviceptr* ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData* shareData);

}  // namespace cuemu
