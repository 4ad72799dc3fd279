// A counting shim in front of a CUDA driver, for the batching tests.
//
// libcuarrow_arrow_driver_shim.so is loaded by cuarrow as its driver
// (select_driver(path)).  It opens the real driver named by
// CUARROW_SHIM_TARGET ("emulated": the host emulation beside this library;
// a path; unset: libcuda.so.1), forwards every entry point to it, and counts
// the calls that matter for batching: synchronizations, copies,
// allocations, event records and waits, pointer-attribute queries, kernel launches.  The counts are read through
// cuarrow_shim_count(name); they are exact on the emulation and on a GPU.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

enum counter : int {
  k_stream_sync,
  k_ctx_sync,
  k_event_sync,
  k_htod,
  k_dtoh,
  k_dtod,
  k_memcpy,
  k_peer,
  k_alloc_async,
  k_alloc_from_pool,
  k_alloc,
  k_host_alloc,
  k_event_record,
  k_wait_event,
  k_pointer_attribute,
  k_pointer_attributes,
  k_batch,       // cuMemcpyBatchAsync calls
  k_batch_htod,  // copies to the device from the host inside them
  k_batch_dtoh,  // copies to the host inside them
  k_batch_dtod,  // copies within the device inside them
  k_launch,      // kernel launches (cuarrow's gather kernel: many small copies in one)
  k_count
};

std::atomic<unsigned long> g_counts[k_count];
void* g_real[k_count];
void* g_lib = nullptr;
std::once_flag g_once;

void open_target() {
  const char* target = std::getenv("CUARROW_SHIM_TARGET");
  std::string path = "libcuda.so.1";
  if (target != nullptr && std::strcmp(target, "emulated") == 0) {
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&open_target), &info);
    std::string self = info.dli_fname != nullptr ? info.dli_fname : "";
    const auto slash = self.rfind('/');
    path = (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/libcuarrow_cuda_emulation.so";
  } else if (target != nullptr && target[0] != '\0') {
    path = target;
  }
  g_lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
}

void* target_symbol(const char* name) {
  std::call_once(g_once, open_target);
  return g_lib != nullptr ? dlsym(g_lib, name) : nullptr;
}

// Synchronizations made after a copy was queued since the last reset: a
// transfer that only waits for earlier work before reading host memory
// makes none.
std::atomic<unsigned long> g_syncs_after_copy{0};

bool any_copy_queued() {
  for (int c : {k_htod, k_dtoh, k_dtod, k_memcpy, k_peer, k_batch, k_launch}) {
    if (g_counts[c].load() > 0) return true;
  }
  return false;
}

template <int C, class F>
struct wrap;
template <int C, class R, class... A>
struct wrap<C, R (*)(A...)> {
  static R CUDAAPI call(A... a) {
    if constexpr (C == k_stream_sync || C == k_ctx_sync || C == k_event_sync) {
      if (any_copy_queued()) g_syncs_after_copy.fetch_add(1);
    }
    g_counts[C].fetch_add(1);
    return reinterpret_cast<R(CUDAAPI*)(A...)>(g_real[C])(a...);
  }
};

// Copies to the host also record their largest size (probes must stay small).
std::atomic<unsigned long> g_dtoh_max_bytes{0};
CUresult CUDAAPI dtoh_wrapper(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  g_counts[k_dtoh].fetch_add(1);
  unsigned long seen = g_dtoh_max_bytes.load();
  while (bytes > seen && !g_dtoh_max_bytes.compare_exchange_weak(seen, bytes)) {
  }
  return reinterpret_cast<PFN_cuMemcpyDtoHAsync_v3020>(g_real[k_dtoh])(dst, src, bytes, stream);
}

// Batched copies count the call and, by their attributes' location hints,
// the copies of each direction inside it; copies to the host record their
// largest size as the single ones do.
CUresult CUDAAPI batch_wrapper(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs, CUstream stream) {
  g_counts[k_batch].fetch_add(1);
  for (size_t k = 0; k < num_attrs && attrs != nullptr && attrs_idxs != nullptr; ++k) {
    const size_t end = k + 1 < num_attrs ? attrs_idxs[k + 1] : count;
    const bool from_host = attrs[k].srcLocHint.type == CU_MEM_LOCATION_TYPE_HOST;
    const bool to_host = attrs[k].dstLocHint.type == CU_MEM_LOCATION_TYPE_HOST;
    const int c = to_host ? k_batch_dtoh : from_host ? k_batch_htod : k_batch_dtod;
    for (size_t i = attrs_idxs[k]; i < end && i < count; ++i) {
      g_counts[c].fetch_add(1);
      if (!to_host) continue;
      unsigned long seen = g_dtoh_max_bytes.load();
      while (sizes[i] > seen && !g_dtoh_max_bytes.compare_exchange_weak(seen, sizes[i])) {
      }
    }
  }
  return reinterpret_cast<PFN_cuMemcpyBatchAsync_v13000>(g_real[k_batch])(dsts, srcs, sizes, count, attrs, attrs_idxs,
                                                                          num_attrs, stream);
}

struct entry {
  const char* name;
  int version;
  int counter;
  void* wrapper;
};

#define SHIM_ENTRY(name, version, c) \
  { #name, version, c, reinterpret_cast < void*>(&wrap <c, PFN_##name##_v##version>::call) }

const entry k_entries[] = {
    SHIM_ENTRY(cuStreamSynchronize, 2000, k_stream_sync),
    SHIM_ENTRY(cuCtxSynchronize, 2000, k_ctx_sync),
    SHIM_ENTRY(cuEventSynchronize, 2000, k_event_sync),
    SHIM_ENTRY(cuMemcpyHtoDAsync, 3020, k_htod),
    {"cuMemcpyDtoHAsync", 3020, k_dtoh, reinterpret_cast<void*>(&dtoh_wrapper)},
    SHIM_ENTRY(cuMemcpyDtoDAsync, 3020, k_dtod),
    SHIM_ENTRY(cuMemcpyAsync, 4000, k_memcpy),
    SHIM_ENTRY(cuMemcpyPeerAsync, 4000, k_peer),
    SHIM_ENTRY(cuMemAllocAsync, 11020, k_alloc_async),
    SHIM_ENTRY(cuMemAllocFromPoolAsync, 11020, k_alloc_from_pool),
    SHIM_ENTRY(cuMemAlloc, 3020, k_alloc),
    SHIM_ENTRY(cuMemHostAlloc, 2020, k_host_alloc),
    SHIM_ENTRY(cuEventRecord, 2000, k_event_record),
    SHIM_ENTRY(cuStreamWaitEvent, 3020, k_wait_event),
    SHIM_ENTRY(cuPointerGetAttribute, 4000, k_pointer_attribute),
    SHIM_ENTRY(cuPointerGetAttributes, 7000, k_pointer_attributes),
    {"cuMemcpyBatchAsync", 13000, k_batch, reinterpret_cast<void*>(&batch_wrapper)},
    SHIM_ENTRY(cuLaunchKernel, 4000, k_launch),
};

const char* const k_names[k_count] = {"cuStreamSynchronize",
                                      "cuCtxSynchronize",
                                      "cuEventSynchronize",
                                      "cuMemcpyHtoDAsync",
                                      "cuMemcpyDtoHAsync",
                                      "cuMemcpyDtoDAsync",
                                      "cuMemcpyAsync",
                                      "cuMemcpyPeerAsync",
                                      "cuMemAllocAsync",
                                      "cuMemAllocFromPoolAsync",
                                      "cuMemAlloc",
                                      "cuMemHostAlloc",
                                      "cuEventRecord",
                                      "cuStreamWaitEvent",
                                      "cuPointerGetAttribute",
                                      "cuPointerGetAttributes",
                                      "cuMemcpyBatchAsync",
                                      "cuMemcpyBatchAsync.htod",
                                      "cuMemcpyBatchAsync.dtoh",
                                      "cuMemcpyBatchAsync.dtod",
                                      "cuLaunchKernel"};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult CUDAAPI cuDriverGetVersion(int* version) {
  auto f = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(target_symbol("cuDriverGetVersion"));
  return f != nullptr ? f(version) : CUDA_ERROR_NOT_INITIALIZED;
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuInit(unsigned int flags) {
  auto f = reinterpret_cast<PFN_cuInit_v2000>(target_symbol("cuInit"));
  return f != nullptr ? f(flags) : CUDA_ERROR_NOT_INITIALIZED;
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                                            int cuda_version, cuuint64_t flags,
                                                                            CUdriverProcAddressQueryResult* status) {
  auto f = reinterpret_cast<PFN_cuGetProcAddress_v12000>(target_symbol("cuGetProcAddress_v2"));
  if (f == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = f(symbol, pfn, cuda_version, flags, status);
  if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return r;
  for (const entry& e : k_entries) {
    if (cuda_version == e.version && std::strcmp(symbol, e.name) == 0) {
      g_real[e.counter] = *pfn;
      *pfn = e.wrapper;
      break;
    }
  }
  return r;
}

/// Calls of the named entry point since the last reset (~0ul for an unknown name).
__attribute__((visibility("default"))) unsigned long cuarrow_shim_count(const char* name) {
  if (std::strcmp(name, "cuMemcpyDtoHAsync.max_bytes") == 0) return g_dtoh_max_bytes.load();
  if (std::strcmp(name, "synchronizations.after_copy") == 0) return g_syncs_after_copy.load();
  for (int i = 0; i < k_count; ++i) {
    if (std::strcmp(name, k_names[i]) == 0) return g_counts[i].load();
  }
  return ~0ul;
}

__attribute__((visibility("default"))) void cuarrow_shim_reset(void) {
  for (auto& c : g_counts) c.store(0);
  g_dtoh_max_bytes.store(0);
  g_syncs_after_copy.store(0);
}

}  // extern "C"
