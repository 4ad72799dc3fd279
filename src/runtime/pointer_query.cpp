#include "pointer_query.hpp"

#include <cstdint>
#include <string>

#include "cuarrow/error.hpp"
#include "driver_result.hpp"
#include "driver_table.hpp"

namespace cuarrow::detail {

pointer_attributes query_pointer(std::uintptr_t address) {
  const driver_table& d = driver();
  // The mapping attributes last: a driver that refuses them (one that does
  // not know them answers CUDA_ERROR_INVALID_VALUE for the whole call) is
  // asked again without them.
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                 CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  unsigned int memory_type = 0;
  int ordinal = -1;
  // Booleans: zeroed 4-byte integers read right whether the driver writes
  // one byte or four.
  unsigned int managed = 0;
  CUmemoryPool pool = nullptr;
  unsigned int ipc_capable = 0;
  CUdeviceptr range_start = 0;
  std::size_t range_size = 0;
  unsigned int mapped = 0;
  void* mapping_base = nullptr;
  std::size_t mapping_size = 0;
  void* values[] = {&memory_type, &ordinal,    &managed, &pool,         &ipc_capable,
                    &range_start, &range_size, &mapped,  &mapping_base, &mapping_size};
  constexpr unsigned kAll = 10;
  constexpr unsigned kWithoutMapping = 7;
  const auto ptr = static_cast<CUdeviceptr>(address);
  unsigned asked = kAll;
  CUresult r = d.cuPointerGetAttributes(kAll, attrs, values, ptr);
  if (r != CUDA_SUCCESS) {
    asked = kWithoutMapping;
    r = d.cuPointerGetAttributes(kWithoutMapping, attrs, values, ptr);
  }
  pointer_attributes a;
  if (r != CUDA_SUCCESS) return a;
  // A reservation's hole: the driver states the range, nothing mapped (and
  // may state no memory type there).  VMM reservations are device memory:
  // host and managed memory are never called unmapped.
  const bool in_range = range_size > 0 && range_start <= address && address - range_start < range_size;
  a.unmapped = asked == kAll && in_range && mapped == 0 && memory_type != CU_MEMORYTYPE_HOST && managed == 0;
  if (memory_type == 0) return a;
  a.known = true;
  a.memory_type = static_cast<CUmemorytype>(memory_type);
  a.device = ordinal;
  a.managed = managed != 0;
  a.pool = pool;
  a.legacy_ipc_capable = ipc_capable != 0;
  if (in_range) {
    std::uintptr_t start = static_cast<std::uintptr_t>(range_start);
    std::uintptr_t end = start + range_size;
    if (asked == kAll) {
      const auto base = reinterpret_cast<std::uintptr_t>(mapping_base);
      if (mapping_size > 0 && base <= address && address - base < mapping_size) {
        if (base > start) start = base;
        if (mapping_size < end - base) end = base + mapping_size;
      }
    }
    a.range_start = start;
    a.range_size = end - start;
  }
  return a;
}

void check_known_span(const pointer_attributes& a, std::uintptr_t address, std::int64_t size, const char* what,
                      const char* role) {
  if (size <= 0) return;
  const auto name = [&] { return role ? std::string("the ") + role + " buffer of " + what : std::string(what); };
  if (a.unmapped) {
    throw invalid_argument(name() + ": nothing is mapped at " + hex_address(address) +
                           " (the CUDA driver knows it as reserved address space without memory behind it); the "
                           "producer describes memory it does not have");
  }
  if (!a.known || a.range_size == 0) return;
  const auto end_of = [](const pointer_attributes& r) { return r.range_start + r.range_size; };
  const auto n_bytes = static_cast<std::uintptr_t>(size);
  const std::uintptr_t end = n_bytes > UINTPTR_MAX - address ? UINTPTR_MAX : address + n_bytes;  // past: refused
  pointer_attributes at = a;
  // Mappings end to end (each its own piece, however the driver states the
  // reservation): a 2 MiB granule each at worst, so 512 GiB of them (more
  // than any one GPU holds) cross 256 Ki; a query takes about a
  // microsecond.  Past that the walk stops and says so, rather than
  // calling mapped memory unknown.
  constexpr int kMostRanges = 1 << 18;
  for (int n = 0; end > end_of(at); ++n) {
    const std::uintptr_t next = end_of(at);
    if (n == kMostRanges) {
      throw invalid_argument(name() + ": " + std::to_string(size) + " bytes from " + hex_address(address) +
                             " cross more than " + std::to_string(kMostRanges) +
                             " allocations placed end to end, more than cuarrow walks to check a view (it stopped " +
                             std::to_string(next - address) + " bytes in); view it in parts");
    }
    pointer_attributes b = query_pointer(next);
    if (!b.known || b.unmapped || b.range_size == 0 || b.memory_type != a.memory_type || b.device != a.device ||
        b.managed != a.managed) {
      throw invalid_argument(name() + ": " + std::to_string(size) + " bytes from " + hex_address(address) +
                             " run past the memory the CUDA driver knows there: it ends at " + hex_address(next) +
                             ", " + std::to_string(next - address) +
                             " bytes in; the producer describes more memory than it has");
    }
    at = b;
  }
}

bool kernel_reaches_host(std::uintptr_t address) {
  const driver_table& d = driver();
  CUdeviceptr mapped = 0;
  return d.cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, static_cast<CUdeviceptr>(address)) ==
             CUDA_SUCCESS &&
         mapped == static_cast<CUdeviceptr>(address);
}

}  // namespace cuarrow::detail
