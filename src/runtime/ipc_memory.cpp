// The driver's IPC calls (legacy and pool), for src/ipc.cpp (which decides what each
// answer means: its messages depend on the exact result).
#include <fcntl.h>

#include "driver_table.hpp"
#include "runtime.hpp"

namespace cuarrow::detail {

CUresult address_range(CUdeviceptr address, CUdeviceptr* base, std::size_t* size) noexcept {
  return driver().cuMemGetAddressRange(base, size, address);
}

CUresult ipc_get_mem_handle(CUipcMemHandle* out, CUdeviceptr base) noexcept {
  return driver().cuIpcGetMemHandle(out, base);
}

CUresult ipc_open_mem_handle(CUdeviceptr* mapped, const CUipcMemHandle& handle) noexcept {
  return driver().cuIpcOpenMemHandle(mapped, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

CUresult ipc_close_mem_handle(CUdeviceptr mapped) noexcept { return driver().cuIpcCloseMemHandle(mapped); }

CUresult pool_export_pointer(CUmemPoolPtrExportData* out, CUdeviceptr base) noexcept {
  if (driver().cuMemPoolExportPointer == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver().cuMemPoolExportPointer(out, base);
}

CUresult pool_export_fd(int* fd, CUmemoryPool pool) noexcept {
  if (driver().cuMemPoolExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult r = driver().cuMemPoolExportToShareableHandle(fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  // Close-on-exec, as every descriptor cuarrow holds: sending it does not
  // need it, and a child started by another thread must not inherit it.
  if (r == CUDA_SUCCESS) {
    if (const int flags = fcntl(*fd, F_GETFD); flags >= 0) fcntl(*fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return r;
}

CUresult pool_import(CUmemoryPool* out, int fd) noexcept {
  if (driver().cuMemPoolImportFromShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  // The descriptor goes by value in the pointer argument.
  return driver().cuMemPoolImportFromShareableHandle(out, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}

CUresult pool_grant_access(CUmemoryPool pool, int device) noexcept {
  const driver_table& d = driver();
  if (d.cuMemPoolGetAccess == nullptr || d.cuMemPoolSetAccess == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  // An imported pool is accessible from its own device only; the importer
  // must grant any other device it uses.  Asked first, so that the pool's own
  // device is never "granted" what it has.
  CUmemLocation where{};
  where.type = CU_MEM_LOCATION_TYPE_DEVICE;
  where.id = device;
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  if (CUresult r = d.cuMemPoolGetAccess(&flags, pool, &where); r != CUDA_SUCCESS) return r;
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_SUCCESS;
  CUmemAccessDesc desc{};
  desc.location = where;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d.cuMemPoolSetAccess(pool, &desc, 1);
}

CUresult pool_import_pointer(CUdeviceptr* out, CUmemoryPool pool, const CUmemPoolPtrExportData& data) noexcept {
  if (driver().cuMemPoolImportPointer == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUmemPoolPtrExportData copy = data;  // the driver's prototype takes it non-const
  return driver().cuMemPoolImportPointer(out, pool, &copy);
}

CUresult pool_free_imported(CUdeviceptr p) noexcept { return driver().cuMemFree(p); }

CUresult pool_destroy(CUmemoryPool pool) noexcept {
  if (driver().cuMemPoolDestroy == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver().cuMemPoolDestroy(pool);
}

}  // namespace cuarrow::detail
