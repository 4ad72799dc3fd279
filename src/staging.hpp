// Internal: moving pageable host memory through pinned staging buffers.
//
// The DMA engines read and write only page-locked memory; from ordinary
// (pageable) memory the driver stages copies itself, one buffer at a time,
// at a fraction of the link's speed.  The staging pipeline splits a large
// copy into chunks that a pool of host threads copies into (or out of)
// pinned buffers while the DMA engine moves other chunks.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "copy_sinks.hpp"
#include "cuarrow/copy.hpp"

namespace cuarrow::detail {

struct piece_source;  // copy_sources.hpp

/// The integer environment variable `name` (a K, M or G suffix multiplies
/// by 2^10, 2^20, 2^30), or `fallback` when it is unset or empty.
std::int64_t env_int(const char* name, std::int64_t fallback);

/// The options in force (set_transfer_options, else CUARROW_* environment
/// variables, else defaults).
transfer_options current_transfer_options();

/// True when `p` is memory the driver knows as page-locked (cuMemHostAlloc
/// or registered), which DMA reads directly.
bool is_page_locked(const void* p);

/// One piece of a staged copy: `size` bytes between pageable host memory at
/// `host` and device memory at `device`.  With `merge_with_previous`, the
/// device bytes between the previous piece's end and this piece's start (a
/// gap the caller knows to be small and inside one allocation) travel in the
/// same DMA: written as zeros to the device (host to device), read and
/// dropped (device to host).  Pieces are staged in the order given.  Host
/// to device, `source` (when set, instead of `host_src`) says where else the
/// bytes come from: a file or a callback (copy_sources.hpp); it must outlive
/// the call.
struct staged_piece {
  const unsigned char* host_src = nullptr;  // host to device
  unsigned char* host_dst = nullptr;        // device to host
  std::uint64_t file_offset = 0;            // device to a file (instead of host_dst)
  CUdeviceptr device = 0;
  std::size_t size = 0;
  bool merge_with_previous = false;
  const piece_source* source = nullptr;  // host to device
};

/// A few bytes to take from the host side of a staged copy: the `width`
/// (1 to 8) bytes that land at device address `device`, copied into `out`
/// from the pinned staging slot just before the slot's DMA, so that they
/// are the bytes the device gets (a reader checks them instead of reading
/// the device back; reading the source again could see other bytes).
struct staged_capture {
  CUdeviceptr device = 0;
  int width = 0;
  unsigned char* out = nullptr;
};

/// Pageable host -> device for every piece, queued on `s` (in context
/// `ctx`, which must be current) as ONE pipelined job: the pieces are packed
/// into the pipeline's chunks, so many small buffers move as fast as one
/// large one.  Returns once every source byte has been read and the staged
/// DMAs are done (the sources may then be reused).  `threads` > 0: that
/// many of the pipeline's workers at most, even above transfer_options::
/// staging_threads_to_device (the pipeline then pins two more slots for each
/// extra worker and keeps them).  `dma_wait_ns`, when set, adds the
/// nanoseconds the workers and the caller spend waiting for a slot's DMA
/// (the host side waiting on the link; a reader's stats).  `captures`,
/// sorted by device address: each one's bytes that lie inside a piece are
/// written to its `out` (by the workers, before this returns); the caller
/// asks only for bytes inside its pieces.  `dma_count`, when set, adds the
/// number of DMAs queued (a reader's stats).
void staged_host_to_device(CUcontext ctx, std::span<const staged_piece> pieces, CUstream s, int threads = 0,
                           std::atomic<std::int64_t>* dma_wait_ns = nullptr,
                           std::span<const staged_capture> captures = {},
                           std::atomic<std::int64_t>* dma_count = nullptr);
void staged_host_to_device(CUcontext ctx, CUdeviceptr dst, const void* src, std::size_t n, CUstream s);

/// Host -> device for every piece, through ONE pinned block instead of the
/// pipeline: the pieces (and the zeroed gaps of merged neighbours) are
/// copied into the block got from `block_for(bytes)`, then `dma(device,
/// host, bytes)` is called once per run of neighbours, for the caller to
/// queue (the block must stay alive until the stream has passed those
/// DMAs).  Returns false, having done nothing, when `block_for` gives null.
/// For small batches (below the threshold).
bool gathered_host_to_device(std::span<const staged_piece> pieces,
                             const std::function<unsigned char*(std::size_t)>& block_for,
                             const std::function<void(CUdeviceptr, const unsigned char*, std::size_t)>& dma);

/// Device -> pageable host for every piece, after the work queued on `s`.
/// Returns once every destination holds its data.  With `file`, each
/// piece goes to the file at its file_offset instead (host_dst unused): a
/// worker writes its chunk from the pinned slot the DMA filled (one worker,
/// CUARROW_FILE_WRITE_THREADS to change it: a file takes buffered writes
/// one at a time); without pinned memory, through a bounce buffer of one
/// chunk.
void staged_device_to_host(CUcontext ctx, std::span<const staged_piece> pieces, CUstream s,
                           const output_file* file = nullptr);
void staged_device_to_host(CUcontext ctx, void* dst, CUdeviceptr src, std::size_t n, CUstream s);

/// Host bytes into a file: `size` bytes at `src` land at `file_offset`.
struct host_file_piece {
  const unsigned char* src = nullptr;
  std::size_t size = 0;
  std::uint64_t file_offset = 0;
};

/// Writes every piece into `file` (pwrite at its offset), cut into
/// staging_chunk_bytes parts, by the calling thread (with
/// CUARROW_FILE_WRITE_THREADS > 1, that many of the pipeline's workers
/// write concurrently, one job on its pool; below two chunks in all, the
/// calling thread still).  For the
/// compressed bodies of the IPC file writer, which are host memory.  Throws
/// the first io_error; the other parts may or may not have been written.
void write_host_to_file(const output_file& file, std::span<const host_file_piece> pieces);

/// The chunk size a staged job of `total` bytes on `threads` threads uses:
/// small enough that every thread gets about eight chunks (the pipeline
/// fills and drains quickly: the first DMA waits for a whole chunk, and
/// the last round's DMAs run one after another), at most the configured
/// staging_chunk_bytes, at least 1 MiB (or the configured size, if
/// smaller).  On the H200 machine a 237 MB read of 16 threads staged in
/// 5.3 ms with 2 MiB chunks and 6.2 ms with 3.7 MiB ones
/// (bench/projection_probe.py); jobs of 1 GiB and more keep the
/// configured size.
std::size_t chunk_bytes_for(const transfer_options& o, std::size_t total, int threads);

}  // namespace cuarrow::detail
