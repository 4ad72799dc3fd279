// Internal: what the driver knows of an address, asked in one place.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace cuarrow::detail {

/// The answer of one cuPointerGetAttributes.
struct pointer_attributes {
  /// The driver knows the memory: device, pinned/registered host, managed.
  /// Ordinary (pageable) host memory and invented addresses are not known.
  bool known = false;
  CUmemorytype memory_type = CU_MEMORYTYPE_HOST;  // when known
  int device = -1;                                // the device it belongs to, when known
  bool managed = false;
  CUmemoryPool pool = nullptr;  // the stream-ordered pool it came from, if any
  bool legacy_ipc_capable = false;
  /// The memory `address` lies in: the allocation the driver states
  /// (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / _SIZE), cut to the mapping
  /// that backs the address (_MAPPING_BASE_ADDR / _SIZE) where the driver
  /// states one: a VMM reservation is one range however little of it is
  /// mapped.  Size 0 when the driver does not say.
  std::uintptr_t range_start = 0;
  std::size_t range_size = 0;
  /// The driver states a range at the address with nothing mapped there (a
  /// VMM reservation's hole; `known` may be false): reading it faults.
  bool unmapped = false;

  /// Device memory host code must not read (managed memory excepted).
  bool is_device() const noexcept { return known && memory_type == CU_MEMORYTYPE_DEVICE && !managed; }
  /// Host memory the driver has pinned or registered (DMA reads it directly).
  bool is_page_locked() const noexcept { return known && memory_type == CU_MEMORYTYPE_HOST && !managed; }
};

/// Asks the driver about `address` (any thread, any current context).  A
/// failed query reads as unknown memory.  Throws driver_error when no
/// driver can be loaded.
pointer_attributes query_pointer(std::uintptr_t address);

/// Throws invalid_argument, naming `what` (or, with `role`, "the <role>
/// buffer of <what>": the name is only made when thrown), unless every
/// byte of [address, address + size) lies in memory the driver knows as it
/// knows `address` (`a`, its query: the same kind and device), walking
/// from the allocation `address` lies in to the ones after it (a view may
/// span mappings placed end to end, as PyTorch's expandable segments place
/// them).  Memory the driver does not know, or whose range it does not
/// state, is not checked.  So a foreign producer that describes more
/// memory than it has gets an error here, not a fault (or a crash of host
/// code) when the bytes are read.
void check_known_span(const pointer_attributes& a, std::uintptr_t address, std::int64_t size, const char* what,
                      const char* role = nullptr);

/// Whether kernels of the current context reach the host memory at
/// `address` through that very address (CU_POINTER_ATTRIBUTE_DEVICE_POINTER
/// equal to it).  CUDA promises this for memory from cuMemHostAlloc and for
/// registrations with CU_MEMHOSTREGISTER_DEVICEMAP on devices that can use
/// the host pointer of registered memory; for a registration without
/// DEVICEMAP it promises nothing (driver 580 on the H200 maps those too:
/// tests/gpu), and a kernel writing unmapped memory would fault, where a
/// driver copy works.  False for memory the driver does not know (a
/// registration that ended with its context), and when the query fails.
bool kernel_reaches_host(std::uintptr_t address);

}  // namespace cuarrow::detail
