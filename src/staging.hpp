// Internal: moving pageable host memory through pinned staging buffers.
//
// The DMA engines read and write only page-locked memory; from ordinary
// (pageable) memory the driver stages copies itself, one buffer at a time,
// at a fraction of the link's speed.  The staging pipeline splits a large
// copy into chunks that a pool of host threads copies into (or out of)
// pinned buffers while the DMA engine moves other chunks.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "cuarrow/copy.hpp"

namespace cuarrow::detail {

/// The options in force (set_transfer_options, else CUARROW_* environment
/// variables, else defaults).
transfer_options current_transfer_options();

/// True when `p` is memory the driver knows as page-locked (cuMemHostAlloc
/// or registered), which DMA reads directly.
bool is_page_locked(const void* p);

/// Whether a copy of `n` bytes from or to pageable memory goes through the
/// pipeline (large enough, pipeline enabled).
bool use_staging(std::size_t n);

/// Pageable host `src` -> device `dst`, queued on `s` (in context `ctx`,
/// which must be current).  Returns once every byte of `src` has been read
/// (the source may then be reused); the device writes complete in the order
/// of `s`.
void staged_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t n, CUstream s);

/// Device `src` -> pageable host `dst` after the work queued on `s`.
/// Returns once `dst` holds the data.
void staged_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t n, CUstream s);

}  // namespace cuarrow::detail
