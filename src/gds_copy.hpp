// Internal: file -> device copies through GPUDirect Storage (cuFile), the
// counterpart of the staging pipeline's file sources (copy_sources.hpp) when
// cuarrow::gds_status() says cuFile is to be used.
//
// Each piece is cut into parts that end on file offsets that are multiples
// of the part size (large, so that each cuFileRead is one big request and
// every part after a piece's first starts 4 KiB-aligned in the file), and a
// few host threads of their own each issue one cuFileRead at a time.
// cuFileRead is synchronous: when the call returns the bytes are in device
// memory.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace cuarrow::detail {

class gds_file;  // runtime.hpp

struct gds_piece {
  std::size_t device_offset = 0;  // from the allocation's start
  std::size_t size = 0;
  std::int64_t file_offset = 0;
};

/// Parts of at most this many bytes.
inline constexpr std::size_t gds_part_bytes = std::size_t{8} << 20;

/// Reads every piece of `file` into the device allocation at `base` (of
/// context `ctx`, which each reading thread makes current), on up to
/// `threads` threads (0: 4; 1 below 1 MiB in all).  The allocation must be
/// idle (no stream work pending on it).  Returns when every byte is in
/// place; throws the failure of the lowest failing part (cuarrow::error
/// from gds_file::read), after every started part has ended.  Counts the
/// bytes read into `bytes_read` when set.
void gds_read_to_device(const gds_file& file, CUcontext ctx, CUdeviceptr base, std::span<const gds_piece> pieces,
                        int threads, std::atomic<std::int64_t>* bytes_read);

}  // namespace cuarrow::detail
