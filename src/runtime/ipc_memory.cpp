// The driver's legacy IPC calls, for src/ipc.cpp (which decides what each
// answer means: its messages depend on the exact result).
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

}  // namespace cuarrow::detail
