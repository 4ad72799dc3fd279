// Copies between host and device memory, and between devices.
//
// Every copy in cuarrow goes through these functions (src/copy.cpp), so the
// strategy for a given pair of memory kinds lives in one place.
//
// Rules, for all of them:
// - every position and length is checked against both sides before any
//   driver call (out_of_range), negative values are refused, and a copy into
//   an immutable buffer is refused (read_only);
// - the stream must belong to the device of the device memory involved
//   (either side's for a copy between devices); default streams act on that
//   device's context (device_mismatch otherwise);
// - `*_async` functions queue the copy on `s` and return; buffers passed to
//   them stay alive until the stream has passed the copy, even if the caller
//   drops them.  Raw host pointers are the caller's to keep alive until the
//   stream is synchronized;
// - the synchronous forms queue on `s` (default: the legacy default stream)
//   and synchronize it before returning;
// - ordinary host memory read on the host (the staging pipeline, or small
//   pieces of a batch gathered into one pinned block and one DMA) is read
//   only after the work already queued on `s` is done, as the driver does
//   before staging pageable memory: such a call waits for earlier work, never
//   for its own DMAs to a device (the pipeline's excepted, see below);
// - a size of 0 is a no-op after the checks;
// - a driver call that fails is a cuda_error; a failure of a queued copy
//   surfaces at the next synchronization of `s`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cuarrow/buffer.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow {

/// How copies between ordinary (pageable) host memory and the device are
/// made.  Large copies go through a pipeline: a pool of host threads copies
/// chunks into or out of pinned staging buffers while the DMA engine moves
/// other chunks.  Pinned (cuda_host or registered) memory is copied
/// directly, with one exception: inside a batch whose pageable pieces are
/// staged, a piece of ordinary host memory smaller than the staging
/// threshold is staged with them without asking the driver whether it is
/// pinned (it moves as fast in the batch's chunks as in a DMA of its own).
struct transfer_options {
  /// Copies of at least this many bytes from or to pageable memory use the
  /// pipeline; smaller ones go to the driver directly.  0 disables the
  /// pipeline.  Environment: CUARROW_STAGING_THRESHOLD.
  std::int64_t staging_threshold_bytes = 4 << 20;
  /// The largest chunk (and the size of each pinned staging buffer).  A
  /// copy uses smaller chunks where that gives every thread several (at
  /// least 1 MiB each), and the last chunks of a copy to the host are
  /// smaller still, so that the pipeline drains quickly.  Environment:
  /// CUARROW_STAGING_CHUNK.
  std::int64_t staging_chunk_bytes = 4 << 20;
  /// Host threads that copy chunks out of the staging buffers (device to
  /// host; the caller's thread is one of them).  The default is 12, or the
  /// machine's hardware threads if fewer.  Environment:
  /// CUARROW_STAGING_THREADS.
  int staging_threads = 12;
  /// Host threads that copy chunks into the staging buffers (host to
  /// device).  Fewer than the other way: these copies compete with the DMA
  /// engine for host memory bandwidth, and on the H200 machine 8 threads
  /// moved 64 MiB faster than 12 or 16 (bench/staging_sweep.py).  The
  /// default is 8, or the machine's hardware threads if fewer.
  /// Environment: CUARROW_STAGING_THREADS_TO_DEVICE.
  int staging_threads_to_device = 8;
  /// Copies to the device of at most this many bytes fill the staging
  /// buffers with non-temporal (streaming) stores, which skip reading each
  /// cache line before writing it: on the H200 machine they moved 32-128 MiB
  /// 5-30% faster and 512 MiB-1 GiB 15-20% slower (bench/staging_sweep.py,
  /// bench/results/2026-12-02-1632-h200-sweep).  0: never.  Environment:
  /// CUARROW_STAGING_STREAMING_LIMIT.
  std::int64_t staging_streaming_store_limit_bytes = 128 << 20;
  /// Most pinned memory the result pool (try_allocate_pinned_pooled) holds,
  /// cached and in use.  Environment: CUARROW_PINNED_POOL_LIMIT.
  std::int64_t pinned_pool_limit_bytes = 4ll << 30;
  /// A batch of 8 or more copies within one device (after neighbours are
  /// merged) goes to cuarrow's gather kernel, one launch per 1,000 copies,
  /// where the GPU has it (a library built with nvcc; see
  /// context::gather_status()), instead of one driver copy each: on the
  /// H200 machine every driver copy cost about 5 us of host time, batched
  /// or not.  Small copies (up to 64 KiB) from the device into pinned host
  /// memory join them where the device can write pinned memory through its
  /// host pointer (unified addressing and CAN_USE_HOST_POINTER_FOR_
  /// REGISTERED_MEM): the batched reads of offsets and bitmaps that checks
  /// and IPC layouts make.  The kernel runs on the SMs, not the copy
  /// engines: work of yours running beside it on other streams shares the
  /// SMs with it.  false: driver copies always.  Environment:
  /// CUARROW_DEVICE_GATHER=0.
  bool device_gather = true;
  /// In a batch that the gather kernel takes, runs within the device of at
  /// least this many bytes (after neighbours are merged) still get one
  /// driver copy each, on the copy engines; 0 (the default): no limit, the
  /// kernel takes them all.  Measured on an H100 (bench/gather_probe.cu,
  /// 2.36 GB): 160 pieces of 15 MB took the kernel 1.88 ms (1.69 ms since
  /// 2026-12-05 16:30), and one driver copy each 2.47 ms of GPU time and
  /// 1-2 ms of the host's to queue; one piece of all the bytes, the kernel
  /// 1.62 ms against the copy engine's 1.57.  Environment:
  /// CUARROW_DEVICE_GATHER_MAX_RUN.
  std::int64_t device_gather_max_run_bytes = 0;
};

/// The options in force: those set last, else the environment, else the
/// defaults above.
CUARROW_EXPORT transfer_options get_transfer_options();
/// Change the options for later copies (thread-safe; copies in progress
/// finish with the options they started with).  Throws invalid_argument for
/// values out of range (chunk < 64 KiB, either thread count < 1 or > 256).
CUARROW_EXPORT void set_transfer_options(const transfer_options& options);

/// Copy `size` bytes from src[src_offset..] to dst[dst_offset..], whatever
/// the two buffers' device types (host, pinned, device, another device).
CUARROW_EXPORT void copy_async(const buffer& dst, std::int64_t dst_offset, const buffer& src, std::int64_t src_offset,
                               std::int64_t size, stream_view s);
CUARROW_EXPORT void copy(const buffer& dst, std::int64_t dst_offset, const buffer& src, std::int64_t src_offset,
                         std::int64_t size, stream_view s = {});

/// One piece of a batched copy: `size` bytes from src[src_offset..] to
/// dst[dst_offset..].
struct copy_piece {
  buffer dst;
  std::int64_t dst_offset = 0;
  buffer src;
  std::int64_t src_offset = 0;
  std::int64_t size = 0;
};

struct batch_copy_options {
  /// The bytes of a destination buffer that lie between two pieces of the
  /// batch (up to 256 bytes apart) may be overwritten, so that neighbouring
  /// pieces travel in one DMA.  For destinations the caller owns and lays
  /// out itself, such as one allocation holding every buffer of an Arrow
  /// array (the gaps are alignment padding; they are written as zeros or
  /// with the source's bytes between the pieces).
  bool destination_gaps_writable = false;
  /// The caller keeps every buffer of the batch alive until `s` has passed
  /// its copies (it synchronizes `s`, or hands the buffers to
  /// keep_alive_until_passed, before it drops them).  Then no host
  /// function is queued behind the batch to keep them: each costs the
  /// stream a wait for the driver's host thread (microseconds), which a
  /// caller queueing many batches back to back (an IPC stream written into
  /// device memory) pays once per batch.  A pinned block the copy makes
  /// itself (gathered host pieces) is still kept by one.
  bool caller_keeps_buffers = false;
};

/// Keeps `buffers` alive until `s` has passed the work queued on it so far
/// (one host function queued on `s`; they are released at a later cuarrow
/// call on a user thread).  Where the host function cannot be queued,
/// waits for `s` instead and throws cuda_error.
CUARROW_EXPORT void keep_alive_until_passed(std::vector<buffer> buffers, stream_view s);

/// Many copies as one operation on `s`.  Every piece is checked (as
/// copy_async checks it) before anything is queued; destinations must not
/// overlap (invalid_argument).  Pieces from or to ordinary pageable host
/// memory travel together through the staging pipeline when their total
/// reaches staging_threshold_bytes (many small buffers then move as fast as
/// one large one).  Below it, two or more pieces from ordinary host memory
/// to the device that would each need a DMA of their own are gathered into
/// one pinned block (from the result pool; laid out as their destinations,
/// so that neighbours share a DMA) that is released when `s` has passed.
/// Other pieces are queued directly, neighbours merged into
/// one DMA where both sides are contiguous in the same allocations; the
/// DMAs within one device go to the driver a few thousand at a time in one
/// cuMemcpyBatchAsync (CUDA 13.0 drivers; one driver call costs about a
/// microsecond, so a batch of 10,000 buffers would otherwise spend 10 ms
/// issuing; on the legacy default stream, which that call refuses, on a
/// stream of their own ordered after and before the legacy stream's work by
/// two events), and on older drivers one cuMemcpyDtoDAsync each.  The
/// buffers are kept alive until `s` has passed the last copy, by one host
/// function for the whole batch.  Staged pieces are complete when
/// copy_batch_async returns (the pipeline waits for its own DMAs).
CUARROW_EXPORT void copy_batch_async(std::span<const copy_piece> pieces, stream_view s,
                                     const batch_copy_options& options = {});
/// copy_batch_async, then one synchronization of `s`.
CUARROW_EXPORT void copy_batch(std::span<const copy_piece> pieces, stream_view s = {},
                               const batch_copy_options& options = {});

/// Host memory at `src` (ordinary or pinned) into a buffer.
CUARROW_EXPORT void copy_from_host_async(const buffer& dst, std::int64_t dst_offset, const void* src, std::int64_t size,
                                         stream_view s);
CUARROW_EXPORT void copy_from_host(const buffer& dst, std::int64_t dst_offset, const void* src, std::int64_t size,
                                   stream_view s = {});

/// A buffer's bytes into host memory at `dst`.
CUARROW_EXPORT void copy_to_host_async(void* dst, const buffer& src, std::int64_t src_offset, std::int64_t size,
                                       stream_view s);
CUARROW_EXPORT void copy_to_host(void* dst, const buffer& src, std::int64_t src_offset, std::int64_t size,
                                 stream_view s = {});

/// Set `size` bytes of dst from dst_offset to `value`: device and managed
/// memory with a memset queued on `s`; host memory (cpu, cuda_host) by the
/// host at once, after synchronizing `s`, so the call then returns complete.
CUARROW_EXPORT void fill_async(const buffer& dst, std::int64_t dst_offset, std::int64_t size, std::uint8_t value,
                               stream_view s);
/// fill_async, complete on return: `s` is synchronized (in dst's context,
/// which a default stream stands for).  Throws as fill_async, cuda_error.
CUARROW_EXPORT void fill(const buffer& dst, std::int64_t dst_offset, std::int64_t size, std::uint8_t value,
                         stream_view s = {});

/// A new device buffer on `ctx` holding a copy of `size` bytes at `src`:
/// allocated and copied on `s`, which is synchronized before returning.
/// Throws as allocate_device and copy do.
CUARROW_EXPORT buffer copy_to_device(const context& ctx, const void* src, std::int64_t size, stream_view s = {});
/// A new device buffer on `ctx` holding a copy of `src` (any device type),
/// complete on return (as above).
CUARROW_EXPORT buffer copy_to_device(const context& ctx, const buffer& src, stream_view s = {});
/// A new host buffer holding a copy of `src`: pinned memory from the result
/// pool (type cuda_host) when `src` is device memory and the pool has room,
/// else ordinary memory (type cpu) filled through the staging pipeline.
/// Copied on `s`, which is synchronized before returning.  Throws as copy
/// does, std::bad_alloc for ordinary memory.
CUARROW_EXPORT buffer copy_to_new_host(const buffer& src, stream_view s = {});

}  // namespace cuarrow
