// Internal: page-locked (pinned) host memory, the one way cuarrow pins.
//
// Pinned memory is ordinary memory that cuarrow maps itself (mmap) and
// registers with the driver (cuMemHostRegister, portable to every context),
// never memory the driver allocates (cuMemHostAlloc).  The difference
// matters when a context goes away under cuarrow: another component's extra
// cuDevicePrimaryCtxRelease, or cudaDeviceReset, destroys the primary
// context and everything the driver allocated in it.  Memory the driver
// allocated would then be unmapped while pyarrow objects (results of
// to_host, copy_to_host) still point into it; a registration only ends,
// and the memory stays valid for host code.  Copies through memory whose
// registration ended are still correct: the driver then stages them.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace cuarrow::detail {

/// `bytes` of zeroed, page-aligned host memory, page-locked for DMA and,
/// with `mapped`, mapped into the device address space of every context
/// (cuMemHostRegister with PORTABLE [| DEVICEMAP]).  Needs a context
/// current.  Throws out_of_memory ("cuMemHostRegister(N bytes) failed: ...")
/// when the driver cannot pin it, cuda_error for other driver failures,
/// std::bad_alloc when the host has no memory to map.
void* allocate_page_locked(std::size_t bytes, bool mapped);

/// Unregisters and unmaps memory from allocate_page_locked, with `ctx`
/// pushed (null: whatever context is current).  Never throws; a
/// registration already gone with its context is not an error.  If the
/// driver refuses to unregister for another reason, the memory is reported
/// and left mapped (unmapping pages the driver still has pinned is unsafe).
void free_page_locked(void* p, std::size_t bytes, CUcontext ctx) noexcept;

/// Registers `bytes` of caller-owned host memory at `p` (the primitive of
/// allocate_page_locked and of register_host).  Needs a context current.
/// Throws like allocate_page_locked.
void register_page_locked(void* p, std::size_t bytes, bool mapped);

/// Ends a registration, with `ctx` pushed (null: the current context);
/// true when the memory may be released (it is no longer registered, or
/// its registration went with its context).  Never throws.
bool unregister_page_locked(void* p, CUcontext ctx) noexcept;

}  // namespace cuarrow::detail
