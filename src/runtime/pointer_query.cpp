#include "pointer_query.hpp"

#include "driver_table.hpp"

namespace cuarrow::detail {

pointer_attributes query_pointer(std::uintptr_t address) {
  const driver_table& d = driver();
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  unsigned int memory_type = 0;
  int ordinal = -1;
  // Booleans: zeroed 4-byte integers read right whether the driver writes
  // one byte or four.
  unsigned int managed = 0;
  CUmemoryPool pool = nullptr;
  unsigned int ipc_capable = 0;
  void* values[] = {&memory_type, &ordinal, &managed, &pool, &ipc_capable};
  pointer_attributes a;
  if (d.cuPointerGetAttributes(5, attrs, values, static_cast<CUdeviceptr>(address)) != CUDA_SUCCESS ||
      memory_type == 0) {
    return a;
  }
  a.known = true;
  a.memory_type = static_cast<CUmemorytype>(memory_type);
  a.device = ordinal;
  a.managed = managed != 0;
  a.pool = pool;
  a.legacy_ipc_capable = ipc_capable != 0;
  return a;
}

bool kernel_reaches_host(std::uintptr_t address) {
  const driver_table& d = driver();
  CUdeviceptr mapped = 0;
  return d.cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, static_cast<CUdeviceptr>(address)) ==
             CUDA_SUCCESS &&
         mapped == static_cast<CUdeviceptr>(address);
}

}  // namespace cuarrow::detail
