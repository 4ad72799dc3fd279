// The loader entry points (the only exported cu* symbols), error names and
// texts, and the cuGetProcAddress table.
//
// The table is built from src/runtime/driver_entry_points.def, the list cuarrow calls:
// for each CUARROW_DRIVER_ENTRY(name, version, required) the emulated function
// emu_<name>_v<version> is cast to PFN_<name>_v<version> from
// <cudaTypedefs.h>, so a missing entry or a signature that differs from the
// real driver's by one bit fails to compile.

// cuInit, cuDriverGetVersion and cuGetProcAddress_v2 are defined below with
// the prototypes of <cuda.h>; give those prototypes default visibility so the
// definitions are exported despite -fvisibility=hidden.
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include <cudaTypedefs.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "emu_internal.hpp"

#ifndef CUARROW_EMU_ENTRY_POINTS_DEF
#error "CUARROW_EMU_ENTRY_POINTS_DEF must name src/runtime/driver_entry_points.def"
#endif

namespace cuemu {

namespace {

// ---------------------------------------------------------------------------
// Error names and texts: every CUresult of cuda.h (CUDA 13.0), with the real
// driver's strings.

struct ErrorInfo {
  CUresult code;
  const char* name;
  const char* text;
};

#define CUEMU_ERR(code, text) \
  { code, #code, text }
constexpr ErrorInfo kErrors[] = {
    CUEMU_ERR(CUDA_SUCCESS, "no error"),
    CUEMU_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    CUEMU_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    CUEMU_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    CUEMU_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    CUEMU_ERR(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    CUEMU_ERR(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized: call cudaProfilerInitialize()"),
    CUEMU_ERR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    CUEMU_ERR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    CUEMU_ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    CUEMU_ERR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "API call is not supported in the installed CUDA driver"),
    CUEMU_ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    CUEMU_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    CUEMU_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    CUEMU_ERR(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    CUEMU_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    CUEMU_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    CUEMU_ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    CUEMU_ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    CUEMU_ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    CUEMU_ERR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    CUEMU_ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    CUEMU_ERR(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    CUEMU_ERR(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    CUEMU_ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    CUEMU_ERR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    CUEMU_ERR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    CUEMU_ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    CUEMU_ERR(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    CUEMU_ERR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
    CUEMU_ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    CUEMU_ERR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    CUEMU_ERR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
    CUEMU_ERR(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
    CUEMU_ERR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    CUEMU_ERR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
    CUEMU_ERR(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
    CUEMU_ERR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
    CUEMU_ERR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
              "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    CUEMU_ERR(CUDA_ERROR_CONTAINED, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    CUEMU_ERR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    CUEMU_ERR(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    CUEMU_ERR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    CUEMU_ERR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    CUEMU_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    CUEMU_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    CUEMU_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    CUEMU_ERR(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
    CUEMU_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    CUEMU_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    CUEMU_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    CUEMU_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    CUEMU_ERR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    CUEMU_ERR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
    CUEMU_ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    CUEMU_ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    CUEMU_ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    CUEMU_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    CUEMU_ERR(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    CUEMU_ERR(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    CUEMU_ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    CUEMU_ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    CUEMU_ERR(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    CUEMU_ERR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    CUEMU_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    CUEMU_ERR(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    CUEMU_ERR(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    CUEMU_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    CUEMU_ERR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    CUEMU_ERR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    CUEMU_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    CUEMU_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    CUEMU_ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    CUEMU_ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
    CUEMU_ERR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "forward compatibility was attempted on non supported HW"),
    CUEMU_ERR(CUDA_ERROR_MPS_CONNECTION_FAILED,
              "MPS client failed to connect to the MPS control daemon or the MPS server"),
    CUEMU_ERR(CUDA_ERROR_MPS_RPC_FAILURE,
              "the remote procedural call between the MPS server and the MPS client failed"),
    CUEMU_ERR(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    CUEMU_ERR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
              "the hardware resources required to create MPS client have been exhausted"),
    CUEMU_ERR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
              "the hardware resources required to support device connections have been exhausted"),
    CUEMU_ERR(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    CUEMU_ERR(CUDA_ERROR_CDP_NOT_SUPPORTED,
              "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"),
    CUEMU_ERR(CUDA_ERROR_CDP_VERSION_MISMATCH,
              "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
              "operation would make the legacy stream depend on a capturing blocking stream"),
    CUEMU_ERR(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    CUEMU_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
              "attempt to terminate a thread-local capture sequence from another thread"),
    CUEMU_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    CUEMU_ERR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
              "the graph update was not performed because it included changes which violated constraints "
              "specific to instantiated graph update"),
    CUEMU_ERR(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
    CUEMU_ERR(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
    CUEMU_ERR(CUDA_ERROR_FUNCTION_NOT_LOADED,
              "the function handle is not loaded when calling an API that requires a loaded function"),
    CUEMU_ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE,
              "one or more resources passed in are not valid resource types for the operation"),
    CUEMU_ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
              "one or more resources are insufficient or non-applicable for the operation"),
    CUEMU_ERR(CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"),
    CUEMU_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef CUEMU_ERR

const ErrorInfo* find_error(CUresult e) {
  for (const ErrorInfo& i : kErrors)
    if (i.code == e) return &i;
  return nullptr;
}

// ---------------------------------------------------------------------------
// Every function handed out by cuGetProcAddress runs through this guard:
// driver calls from a host callback (cuLaunchHostFunc) are refused with
// CUDA_ERROR_NOT_PERMITTED, as the real driver may do (they would deadlock),
// and no C++ exception ever crosses the C ABI.

template <auto F>
inline constexpr bool kAllowedInCallback = false;
template <>
inline constexpr bool kAllowedInCallback<&emu_cuGetErrorName_v6000> = true;
template <>
inline constexpr bool kAllowedInCallback<&emu_cuGetErrorString_v6000> = true;

// It is also the one place where calls are counted and injected faults fire
// (faults.cpp): Id names the entry point of driver_entry_points.def a
// function belongs to (newer ABIs and _ptsz variants count as their base).

template <auto F, int Id>
struct ApiGuard;

template <typename... Args, CUresult (*F)(Args...), int Id>
struct ApiGuard<F, Id> {
  static CUresult call(Args... args) noexcept {
    if (!kAllowedInCallback<F> && t_in_stream_worker) return CUDA_ERROR_NOT_PERMITTED;
    if (CUresult r = fault_check(Id)) return r;
    try {
      return F(args...);
    } catch (const std::bad_alloc&) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    } catch (...) {
      return CUDA_ERROR_UNKNOWN;
    }
  }
};

// ---------------------------------------------------------------------------
// Newer ABI versions and per-thread-default-stream (_ptsz) variants of listed
// entry points, so that cuGetProcAddress answers what the real driver would
// for the cudaVersion and flags a caller passes.

CUresult emu_cuEventElapsedTime_v12080(float* ms, CUevent a, CUevent b) {
  return emu_cuEventElapsedTime_v2000(ms, a, b);
}

// In the _ptsz variants the stream handle 0 means the per-thread stream.
CUstream ptsz(CUstream s) { return s ? s : CU_STREAM_PER_THREAD; }

CUresult ptsz_cuStreamSynchronize(CUstream s) { return emu_cuStreamSynchronize_v2000(ptsz(s)); }
CUresult ptsz_cuStreamQuery(CUstream s) { return emu_cuStreamQuery_v2000(ptsz(s)); }
CUresult ptsz_cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) {
  return emu_cuStreamWaitEvent_v3020(ptsz(s), e, f);
}
CUresult ptsz_cuStreamGetCtx(CUstream s, CUcontext* c) { return emu_cuStreamGetCtx_v9020(ptsz(s), c); }
CUresult ptsz_cuStreamGetCtx_v2(CUstream s, CUcontext* c, CUgreenCtx* gc) {
  return emu_cuStreamGetCtx_v12050(ptsz(s), c, gc);
}
CUresult ptsz_cuEventRecord(CUevent e, CUstream s) { return emu_cuEventRecord_v2000(e, ptsz(s)); }
CUresult ptsz_cuLaunchHostFunc(CUstream s, CUhostFn fn, void* u) { return emu_cuLaunchHostFunc_v10000(ptsz(s), fn, u); }
CUresult ptsz_cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream s) {
  return emu_cuMemAllocAsync_v11020(p, n, ptsz(s));
}
CUresult ptsz_cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t n, CUmemoryPool pool, CUstream s) {
  return emu_cuMemAllocFromPoolAsync_v11020(p, n, pool, ptsz(s));
}
CUresult ptsz_cuMemFreeAsync(CUdeviceptr p, CUstream s) { return emu_cuMemFreeAsync_v11020(p, ptsz(s)); }
CUresult ptsz_cuMemcpyAsync(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
  return emu_cuMemcpyAsync_v4000(d, src, n, ptsz(s));
}
CUresult ptsz_cuMemcpyHtoDAsync(CUdeviceptr d, const void* src, size_t n, CUstream s) {
  return emu_cuMemcpyHtoDAsync_v3020(d, src, n, ptsz(s));
}
CUresult ptsz_cuMemcpyDtoHAsync(void* d, CUdeviceptr src, size_t n, CUstream s) {
  return emu_cuMemcpyDtoHAsync_v3020(d, src, n, ptsz(s));
}
CUresult ptsz_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
  return emu_cuMemcpyDtoDAsync_v3020(d, src, n, ptsz(s));
}
CUresult ptsz_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s) {
  return emu_cuMemcpyPeerAsync_v4000(d, dc, src, sc, n, ptsz(s));
}
CUresult ptsz_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, CUstream s, void** params, void** extra) {
  return emu_cuLaunchKernel_v4000(f, gx, gy, gz, bx, by, bz, shmem, ptsz(s), params, extra);
}
CUresult ptsz_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return emu_cuMemsetD8Async_v3020(d, v, n, ptsz(s));
}

CUresult ptsz_cuMemcpyBatchAsync(CUdeviceptr* d, CUdeviceptr* src, size_t* n, size_t count, CUmemcpyAttributes* a,
                                 size_t* ai, size_t na, CUstream s) {
  return memcpy_batch(d, src, n, count, a, ai, na, nullptr, ptsz(s));
}
// CUDA 12.8's ABI: the same, with the index of the copy that failed.
CUresult emu_cuMemcpyBatchAsync_v12080(CUdeviceptr* d, CUdeviceptr* src, size_t* n, size_t count, CUmemcpyAttributes* a,
                                       size_t* ai, size_t na, size_t* failIdx, CUstream s) {
  return memcpy_batch(d, src, n, count, a, ai, na, failIdx, s);
}
CUresult ptsz_cuMemcpyBatchAsync_v12080(CUdeviceptr* d, CUdeviceptr* src, size_t* n, size_t count,
                                        CUmemcpyAttributes* a, size_t* ai, size_t na, size_t* failIdx, CUstream s) {
  return memcpy_batch(d, src, n, count, a, ai, na, failIdx, ptsz(s));
}

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* symbolStatus);
CUresult get_proc_address_v1(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

struct EntryPoint {
  const char* name;
  int version;  // the CUDA version that introduced this ABI of the symbol
  bool ptsz;    // per-thread default stream variant
  void* fn;
};

#define CUEMU_FN(pfn_type, fn, id) reinterpret_cast<void*>(static_cast<pfn_type>(&ApiGuard<&fn, id>::call))

const EntryPoint kEntryPoints[] = {
// The list cuarrow uses (static_cast: the signature must match the PFN type).
#define CUARROW_DRIVER_ENTRY(name, version, required) \
  {#name, version, false, CUEMU_FN(PFN_##name##_v##version, emu_##name##_v##version, ep_##name)},
#include CUARROW_EMU_ENTRY_POINTS_DEF
#undef CUARROW_DRIVER_ENTRY

    // Newer ABIs of listed symbols, returned when the caller asks for a
    // CUDA version at or above their introduction, as the real driver does.
    {"cuCtxSynchronize", 13000, false,
     CUEMU_FN(PFN_cuCtxSynchronize_v13000, emu_cuCtxSynchronize_v13000, ep_cuCtxSynchronize)},
    {"cuCtxGetDevice", 13000, false, CUEMU_FN(PFN_cuCtxGetDevice_v13000, emu_cuCtxGetDevice_v13000, ep_cuCtxGetDevice)},
    {"cuStreamGetCtx", 12050, false, CUEMU_FN(PFN_cuStreamGetCtx_v12050, emu_cuStreamGetCtx_v12050, ep_cuStreamGetCtx)},
    {"cuEventElapsedTime", 12080, false,
     CUEMU_FN(PFN_cuEventElapsedTime_v12080, emu_cuEventElapsedTime_v12080, ep_cuEventElapsedTime)},
    // (and an older one, which a caller asking for 12.8 or 12.9 gets)
    {"cuMemcpyBatchAsync", 12080, false,
     CUEMU_FN(PFN_cuMemcpyBatchAsync_v12080, emu_cuMemcpyBatchAsync_v12080, ep_cuMemcpyBatchAsync)},

    // Per-thread default stream variants (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
    {"cuStreamSynchronize", 7000, true,
     CUEMU_FN(PFN_cuStreamSynchronize_v7000_ptsz, ptsz_cuStreamSynchronize, ep_cuStreamSynchronize)},
    {"cuStreamQuery", 7000, true, CUEMU_FN(PFN_cuStreamQuery_v7000_ptsz, ptsz_cuStreamQuery, ep_cuStreamQuery)},
    {"cuStreamWaitEvent", 7000, true,
     CUEMU_FN(PFN_cuStreamWaitEvent_v7000_ptsz, ptsz_cuStreamWaitEvent, ep_cuStreamWaitEvent)},
    {"cuStreamGetCtx", 9020, true, CUEMU_FN(PFN_cuStreamGetCtx_v9020_ptsz, ptsz_cuStreamGetCtx, ep_cuStreamGetCtx)},
    {"cuStreamGetCtx", 12050, true,
     CUEMU_FN(PFN_cuStreamGetCtx_v12050_ptsz, ptsz_cuStreamGetCtx_v2, ep_cuStreamGetCtx)},
    {"cuEventRecord", 7000, true, CUEMU_FN(PFN_cuEventRecord_v7000_ptsz, ptsz_cuEventRecord, ep_cuEventRecord)},
    {"cuLaunchHostFunc", 10000, true,
     CUEMU_FN(PFN_cuLaunchHostFunc_v10000_ptsz, ptsz_cuLaunchHostFunc, ep_cuLaunchHostFunc)},
    {"cuMemAllocAsync", 11020, true,
     CUEMU_FN(PFN_cuMemAllocAsync_v11020_ptsz, ptsz_cuMemAllocAsync, ep_cuMemAllocAsync)},
    {"cuMemAllocFromPoolAsync", 11020, true,
     CUEMU_FN(PFN_cuMemAllocFromPoolAsync_v11020_ptsz, ptsz_cuMemAllocFromPoolAsync, ep_cuMemAllocFromPoolAsync)},
    {"cuMemFreeAsync", 11020, true, CUEMU_FN(PFN_cuMemFreeAsync_v11020_ptsz, ptsz_cuMemFreeAsync, ep_cuMemFreeAsync)},
    {"cuMemcpyAsync", 7000, true, CUEMU_FN(PFN_cuMemcpyAsync_v7000_ptsz, ptsz_cuMemcpyAsync, ep_cuMemcpyAsync)},
    {"cuMemcpyHtoDAsync", 7000, true,
     CUEMU_FN(PFN_cuMemcpyHtoDAsync_v7000_ptsz, ptsz_cuMemcpyHtoDAsync, ep_cuMemcpyHtoDAsync)},
    {"cuMemcpyDtoHAsync", 7000, true,
     CUEMU_FN(PFN_cuMemcpyDtoHAsync_v7000_ptsz, ptsz_cuMemcpyDtoHAsync, ep_cuMemcpyDtoHAsync)},
    {"cuMemcpyDtoDAsync", 7000, true,
     CUEMU_FN(PFN_cuMemcpyDtoDAsync_v7000_ptsz, ptsz_cuMemcpyDtoDAsync, ep_cuMemcpyDtoDAsync)},
    {"cuMemcpyPeerAsync", 7000, true,
     CUEMU_FN(PFN_cuMemcpyPeerAsync_v7000_ptsz, ptsz_cuMemcpyPeerAsync, ep_cuMemcpyPeerAsync)},
    {"cuMemsetD8Async", 7000, true, CUEMU_FN(PFN_cuMemsetD8Async_v7000_ptsz, ptsz_cuMemsetD8Async, ep_cuMemsetD8Async)},
    {"cuLaunchKernel", 7000, true, CUEMU_FN(PFN_cuLaunchKernel_v7000_ptsz, ptsz_cuLaunchKernel, ep_cuLaunchKernel)},
    {"cuMemcpyBatchAsync", 12080, true,
     CUEMU_FN(PFN_cuMemcpyBatchAsync_v12080_ptsz, ptsz_cuMemcpyBatchAsync_v12080, ep_cuMemcpyBatchAsync)},
    {"cuMemcpyBatchAsync", 13000, true,
     CUEMU_FN(PFN_cuMemcpyBatchAsync_v13000_ptsz, ptsz_cuMemcpyBatchAsync, ep_cuMemcpyBatchAsync)},

    // The loader itself.
    {"cuGetProcAddress", 11030, false,
     reinterpret_cast<void*>(static_cast<PFN_cuGetProcAddress_v11030>(&get_proc_address_v1))},
    {"cuGetProcAddress", 12000, false,
     reinterpret_cast<void*>(static_cast<PFN_cuGetProcAddress_v12000>(&get_proc_address))},
};
#undef CUEMU_FN

CUresult get_proc_address(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~(kLegacy | kPerThread)) || flags == (kLegacy | kPerThread)) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = flags & kPerThread;
  // CUARROW_EMULATED_NO_BATCH_COPY=1: a driver older than CUDA 12.8, which
  // does not know cuMemcpyBatchAsync (read here: cuGetProcAddress needs no cuInit).
  if (std::strcmp(symbol, "cuMemcpyBatchAsync") == 0) {
    const char* no_batch = std::getenv("CUARROW_EMULATED_NO_BATCH_COPY");
    if (no_batch && *no_batch && std::strcmp(no_batch, "0") != 0) {
      if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      return CUDA_ERROR_NOT_FOUND;
    }
  }
  // The newest ABI of the symbol not newer than cudaVersion nor the
  // driver; with the per-thread flag, the _ptsz variant where one exists.
  // A symbol every ABI of which is newer than the driver is unknown to it
  // (CUARROW_EMULATED_DRIVER_VERSION plays an older driver).
  const int driver = emulated_driver_version();
  const EntryPoint* best = nullptr;
  bool known = false;
  for (const EntryPoint& e : kEntryPoints) {
    if (std::strcmp(e.name, symbol) != 0 || (e.ptsz && !per_thread) || e.version > driver) continue;
    known = true;
    if (e.version > cudaVersion) continue;
    if (!best || e.version > best->version || (e.version == best->version && e.ptsz)) best = &e;
  }
  if (!best) {
    if (symbolStatus)
      *symbolStatus = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->fn;
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

// ---------------------------------------------------------------------------
// Errors and version (need no cuInit)

CUresult emu_cuGetErrorName_v6000(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorInfo* e = find_error(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuGetErrorString_v6000(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorInfo* e = find_error(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuDriverGetVersion_v2020(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = emulated_driver_version();
  return CUDA_SUCCESS;
}

}  // namespace cuemu

// ---------------------------------------------------------------------------
// Exported symbols, with the real driver's names and signatures.

using cuemu::ApiGuard;

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  return ApiGuard<&cuemu::emu_cuInit_v2000, cuemu::ep_cuInit>::call(Flags);
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  return ApiGuard<&cuemu::emu_cuDriverGetVersion_v2020, cuemu::ep_cuDriverGetVersion>::call(driverVersion);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  return cuemu::get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

// The CUDA 11.3 form, without the status argument.  <cuda.h> maps the name
// to cuGetProcAddress_v2, so it is declared here under its own name.
#undef cuGetProcAddress
__attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn,
                                                                         int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuemu::get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
