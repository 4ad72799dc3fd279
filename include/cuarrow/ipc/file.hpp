// Arrow IPC files (Feather v2) and streams read by path straight into device
// memory.
//
// The footer and every message's metadata are read with pread into host
// memory and parsed by the same code as the in-memory readers (stream.hpp,
// metadata.hpp).  The body buffers a batch needs (all of them, or those of
// the projected columns) are read through the staging pipeline: its host
// threads pread the file's bytes straight into its pinned slots, and each
// slot is copied by DMA into ONE device body per batch (a dictionary batch
// gets its own; the small bodies of one call share allocations,
// file_read_options::body_group_bytes).  The batch is then built by
// read_record_batch over that device body: its arrays are slices of it.
//
// read_all and read_batches read the metadata of every batch first, then
// every body through ONE staging job, so that the pipeline's threads read
// many batches at once and its fill and drain are paid once.
//
// Compressed bodies (LZ4_FRAME, ZSTD): only each buffer's 8-byte length
// prefix is read on the calling thread (it sizes the device body); the
// pipeline's threads read the framed buffers and decompress them buffer by
// buffer straight into the pinned slots; the device body holds the
// decompressed bytes.
//
// Files are untrusted as the in-memory readers take them: the footer's
// blocks are checked against the file size before anything is read, each
// message against its block, and every buffer range against its body.
// Errors are invalid_message (a malformed file), io_error (the file
// cannot be opened or read, naming the path, the offset and the system's
// reason), cuda_error (the copy), out_of_range (a batch index); the device
// memory of a failed read is released and the reader stays usable.
//
// GPUDirect Storage (cuFile, include/cuarrow/gds.hpp): when cuFile is
// available (gds_status().available, or file_read_options::path asks for
// it and it is usable), an uncompressed body is read with cuFileRead
// straight into its device allocation instead (a few threads, large parts).
// Compressed bodies always go through the pipeline (they are decompressed
// on the host).  Any cuFile failure, when the file is registered or at a
// read, makes that reader use the staging pipeline from then on (the read
// that failed is redone through it): GPUDirect Storage never fails a read.
// last_read_path() says which path moved the last body's bytes and
// last_read_path_reason() why.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cuarrow/arrow/array.hpp"
#include "cuarrow/arrow/readahead.hpp"
#include "cuarrow/context.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc/format.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::ipc {

/// Which path a reader is to take (file_read_options::path).
enum class read_path_preference {
  /// cuFile when gds_status().available (usable and, unless CUARROW_GDS=on,
  /// not in compatibility mode) and it takes the file, else the staging
  /// pipeline.
  automatic,
  /// Always the staging pipeline; libcufile is not even loaded.
  staging,
  /// cuFile: the reader's constructor throws driver_error, saying why, when
  /// gds_status().available is false (CUARROW_GDS=off, no libcufile, its
  /// driver does not open, compatibility mode without CUARROW_GDS=on) or
  /// cuFile refuses the file.  A failure at a later read still falls back
  /// to the staging pipeline.
  gds,
};

CUARROW_EXPORT const char* to_string(read_path_preference p) noexcept;

/// The preference named `name`: "auto" (or to_string's "automatic"),
/// "staging" or "gds".  Throws invalid_argument naming the choices for any
/// other name.
CUARROW_EXPORT read_path_preference read_path_preference_from(std::string_view name);

struct file_read_options {
  /// Validation and limits, as for the in-memory readers.  read.stream is
  /// the stream the metadata-free reads run on when a call gives none;
  /// read.decompress is ignored (the reader decompresses in the pipeline).
  read_options read;
  /// Top-level field indices to read, in the order wanted (projection):
  /// the batches returned have only these columns, and only their byte
  /// ranges (and their dictionaries) are read from the file.  Unset: every
  /// column.  An index outside the schema, or one given twice, is
  /// invalid_argument.
  std::optional<std::vector<int>> columns;
  /// Host threads of the staging pipeline that read the file (and
  /// decompress); 0: one per core, 16 at most, and never fewer than
  /// transfer_options::staging_threads_to_device.  May exceed that count:
  /// the pipeline then pins two more slots (of staging_chunk_bytes) for
  /// each extra thread, and keeps them for later jobs.  At most 256.
  int io_threads = 0;
  /// A compressed buffer that says it decompresses to more than this is
  /// refused (invalid_message) before anything is allocated.
  std::int64_t max_decompressed_buffer_bytes = std::int64_t{1} << 36;
  /// Which path reads uncompressed bodies (see read_path_preference).
  read_path_preference path = read_path_preference::automatic;
  /// Decompress ZSTD bodies on the GPU with nvCOMP (include/cuarrow/
  /// nvcomp.hpp) when nvcomp_status().available: the framed bytes are
  /// staged to the device and decompressed there in one batched call per
  /// read, instead of on the host threads.  Off by default: nvCOMP does not
  /// promise a clean error for corrupt input (a crafted frame could make
  /// the GPU fault), so use it for files you trust.  The host still checks
  /// each frame's header (the decompressed size it declares must be the
  /// buffer's) and each chunk's status and size afterwards.  A frame that
  /// does not state its size, and LZ4 bodies, are decompressed on the host;
  /// without nvCOMP everything is, and last_read_path_reason() says why.
  bool gpu_decompression = false;
  /// Time the phases of every read (stats()).  Off, nothing is timed: no
  /// clock is read.
  bool collect_stats = false;
  /// The record-batch bodies one call reads (read_all, read_batches, a
  /// stream's read_all) share device allocations of up to this many bytes:
  /// each body a 64-byte aligned slice, next to the one before it, so that
  /// the staging pipeline moves neighbouring bodies in one DMA instead of
  /// one (or more) each (many small DMAs leave the link idle between them:
  /// a column projection's bodies are often well under a MiB).  A body
  /// larger than this gets its own allocation; the memory of a shared one
  /// is released when every batch over it is gone.  0: one allocation per
  /// batch.  -1 (the default): 32 MiB, or CUARROW_BODY_GROUP_BYTES when
  /// set (a tuning knob).  Below -1 is invalid_argument.
  std::int64_t body_group_bytes = -1;
};

/// Where a reader's time went, since it was made (file_read_options::
/// collect_stats; zeros otherwise, but for the counts).  "Calling thread":
/// wall time of the thread that called the reader.  "Workers": summed over
/// the staging pipeline's threads, so it may exceed the wall time.
struct read_stats {
  std::int64_t bytes_read = 0;  ///< as bytes_read()
  std::int64_t batches = 0;     ///< record batches returned
  /// Staging-pipeline jobs run: one per read_batch, one per read_batches,
  /// and one more when a job is staged again because an LZ4 block decoded
  /// to another size than trusted (every block full but the last).
  std::int64_t staging_jobs = 0;
  double metadata_seconds = 0;        ///< calling thread: message metadata read (pread) and parsed
  double allocate_seconds = 0;        ///< calling thread: device allocations of the bodies
  double staging_seconds = 0;         ///< calling thread: in staging jobs, start to end
  double gds_seconds = 0;             ///< calling thread: in cuFile reads
  double build_seconds = 0;           ///< calling thread: batches built over their bodies (checks, validation)
  double pread_seconds = 0;           ///< workers: pread of body bytes (compressed ones included)
  double decompress_seconds = 0;      ///< workers: decompression
  double dma_wait_seconds = 0;        ///< workers and caller: waiting for a slot's host-to-device DMA
  double gpu_decompress_seconds = 0;  ///< calling thread: nvCOMP decompression (gpu_decompression), waited for
  std::int64_t dmas = 0;              ///< host-to-device DMAs the staging jobs queued
  /// Decompressed bytes that went through host scratch memory and were
  /// copied again (workers): a buffer larger than a staging chunk that does
  /// not decode in parts (one frame, as Arrow C++ writes), a part that
  /// straddles two chunks, or the LZ4 blocks of a job staged again.  0
  /// when every compressed buffer was decoded
  /// straight into the pinned staging slots.
  std::int64_t scratch_decoded_bytes = 0;
};

/// How a read moved the file's bytes to the device.
enum class read_path {
  none,     ///< nothing read yet
  staging,  ///< pread into pinned staging slots, then DMA
  gds,      ///< GPUDirect Storage: cuFileRead into device memory
};

CUARROW_EXPORT const char* to_string(read_path p) noexcept;

/// Reads an Arrow IPC file by path: footer first, then any batch by index.
class CUARROW_EXPORT device_file_reader {
 public:
  /// Opens `path`, reads the magic, the footer and the dictionaries (those
  /// the projected columns need) into `ctx`'s memory.  Throws io_error
  /// when the file cannot be opened or is not a regular file;
  /// invalid_message for a malformed file; invalid_argument for bad options;
  /// driver_error when options.path is gds and cuFile cannot read the file.
  device_file_reader(std::string path, context ctx, file_read_options options = {});
  ~device_file_reader();
  device_file_reader(const device_file_reader&) = delete;
  device_file_reader& operator=(const device_file_reader&) = delete;
  device_file_reader(device_file_reader&&) noexcept;
  device_file_reader& operator=(device_file_reader&&) noexcept;

  /// The schema of the batches returned (projected when columns are set).
  const schema_message& schema() const noexcept;
  /// Where the batches read live: device memory of the reader's context.
  /// A batch without any buffer is declared there.
  arrow::placement placement() const noexcept;
  /// The file's footer as written (its schema unprojected).
  const file_footer& footer() const noexcept;
  int num_record_batches() const noexcept;
  /// Record batch `i` (0 <= i < num_record_batches(), else out_of_range:
  /// "Batch number i out of range", pyarrow's words), in any order, its
  /// body ONE allocation on the reader's context, filled on `s` (default:
  /// options.read.stream), which is synchronized.
  arrow::record_batch read_batch(int i, stream_view s = {}) const;
  batch_with_metadata read_batch_with_custom_metadata(int i, stream_view s = {}) const;
  /// Every record batch, as read_batches over 0 .. num_record_batches() - 1.
  std::vector<arrow::record_batch> read_all(stream_view s = {}) const;
  /// The record batches `indices` names (any order, duplicates allowed:
  /// each its own allocation), all read through ONE staging job: their
  /// metadata first, then every body, so that the pipeline's threads read
  /// (and decompress) many batches at once.  out_of_range for an index
  /// outside the file, before anything is read; a failure releases every
  /// allocation of the call.
  std::vector<arrow::record_batch> read_batches(std::span<const int> indices, stream_view s = {}) const;
  /// The dictionaries read (by the constructor).
  const dictionary_memo& dictionaries() const noexcept;
  /// The context whose memory the batches are read into.
  const context& get_context() const noexcept;

  /// Bytes read from the file so far (metadata and bodies).
  std::int64_t bytes_read() const noexcept;
  /// Where the time of the reads so far went (timed when
  /// options.collect_stats).
  read_stats stats() const noexcept;
  /// The path the last body read took (none before the first).
  read_path last_read_path() const noexcept;
  /// Why: how cuFile runs, or why the staging pipeline ran (the options
  /// asked for it, gds_status()'s reason, a compressed body, the cuFile
  /// failure that made this reader fall back).  Before the first read, the
  /// path the reader means to take and why.
  std::string last_read_path_reason() const;
  const std::string& path() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// How a batch_readahead reads ahead of its caller.
struct readahead_options {
  /// Reads done or in progress ahead of the batch the caller holds, each
  /// ONE read_batches call (one staging job) of consecutive batches; the
  /// device memory held ahead is about depth * read_bytes.  0: nothing is
  /// read ahead and no thread started; next() reads its batch itself, on
  /// the calling thread (a loop of read_batch calls).  At least 0.
  int depth = 2;
  /// A read takes batches until their bodies (as the footer states them,
  /// before any projection; a stream's as its metadata states them) would
  /// pass this many bytes, one batch at least and 4,096 at most; the first
  /// read, and every read with depth 0, takes one batch, so that the first
  /// next() returns as soon as one batch is on the device.  At least 1.  On an H100 a loop
  /// over 2.2 GiB in 226 batches read them alone in 101 ms with runs of
  /// 64 MiB, 66 ms with 256 MiB and 59 ms with 1 GiB (read_all: 54 ms;
  /// each run is a staging job that fills and drains the pipeline); but
  /// with work in the loop, 64 MiB gave the shortest loops (295 ms
  /// against 298 and 314, work of 254 ms), since the loop waits for the
  /// first run and larger runs hide less of the read.
  std::int64_t read_bytes = std::int64_t{64} << 20;
};

/// Batches of a device_file_reader read on a thread of its own, ahead of
/// the caller (arrow::readahead), so that reading the file overlaps what
/// the caller does with the batches before: a loop of read_batch calls
/// reads and computes in turn.  The reads run on a stream of their own
/// (non-blocking) and each is synchronized before its batches are handed
/// out.  The reader must outlive this object; its stats() and
/// bytes_read() count these reads.  next(): when a read fails, its batches
/// are read again one at a time, so that every batch before the failing
/// one is still returned; then the failing batch's error
/// (invalid_message, io_error, cuda_error, out_of_memory ...) is thrown.
/// close() waits for the read in progress (a staging job cannot be cut
/// short).  placement(): the reader's.
class CUARROW_EXPORT batch_readahead : public arrow::readahead {
 public:
  /// Starts reading batches `indices` of `reader`, in that order
  /// (duplicates allowed).  Throws out_of_range for an index outside the
  /// file (the file readers' read_batch message) and invalid_argument for
  /// options out of range, before anything is read; cuda_error when the
  /// reads' stream cannot be made.
  batch_readahead(const device_file_reader& reader, std::vector<int> indices, readahead_options options = {});
  /// close().
  ~batch_readahead();

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// Reads an Arrow IPC stream held in a file by path, in order.
class CUARROW_EXPORT device_stream_reader {
 public:
  /// Opens `path` and reads the schema message.  Throws as
  /// device_file_reader does; invalid_message when the stream does not
  /// start with a schema.
  device_stream_reader(std::string path, context ctx, file_read_options options = {});
  ~device_stream_reader();
  device_stream_reader(const device_stream_reader&) = delete;
  device_stream_reader& operator=(const device_stream_reader&) = delete;
  device_stream_reader(device_stream_reader&&) noexcept;
  device_stream_reader& operator=(device_stream_reader&&) noexcept;

  /// The schema of the batches returned (projected when columns are set).
  const schema_message& schema() const noexcept;
  /// Where the batches read live, as device_file_reader::placement.
  arrow::placement placement() const noexcept;
  /// The next record batch (dictionary batches before it are applied, deltas
  /// appended), or nullopt at the end of the stream.
  std::optional<arrow::record_batch> read_next(stream_view s = {});
  std::optional<batch_with_metadata> read_next_with_custom_metadata(stream_view s = {});
  /// The rest of the stream.  The record batches between two dictionary
  /// batches are read through staging jobs of many batches (about 256 MiB
  /// of bodies each); a failure releases the allocations of its job and
  /// leaves position() before that job's batches.
  std::vector<arrow::record_batch> read_all(stream_view s = {});
  const dictionary_memo& dictionaries() const noexcept;
  /// The context whose memory the batches are read into.
  const context& get_context() const noexcept;
  /// Bytes of the file consumed so far (the next message's offset).
  std::int64_t position() const noexcept;

  std::int64_t bytes_read() const noexcept;
  read_stats stats() const noexcept;
  read_path last_read_path() const noexcept;
  std::string last_read_path_reason() const;
  const std::string& path() const noexcept;

 private:
  friend class stream_readahead;
  // For stream_readahead: runs of batches with their messages' offsets,
  // and a way back to the first batch it did not hand out.
  struct run {
    std::vector<arrow::record_batch> batches;
    std::vector<std::int64_t> offsets;
  };
  run read_run(std::int64_t bytes, std::size_t most, stream_view s, std::size_t* planned);
  std::uint64_t dictionaries_version() const noexcept;
  void rewind(std::int64_t position, dictionary_memo memo);

  struct state;
  std::unique_ptr<state> state_;
};

/// Batches of a device_stream_reader read on a thread of their own, ahead
/// of the caller (arrow::readahead), so that reading the stream overlaps
/// what the caller does with the batches before.  Each read is one staging
/// job of consecutive record batches (up to options.read_bytes of bodies;
/// a dictionary batch to apply ends a run and is read with the batch after
/// it), on a stream of its own, synchronized before its batches are handed
/// out.  The reader must outlive this object and is not to be used until
/// close(); close() (and the destructor) puts the reader back at the first
/// batch not handed out, with the dictionaries that batch was read
/// with, so that reading the reader on reads every batch not handed out,
/// once (their bytes are read again and counted again in bytes_read()).
/// next(): when a read fails, its batches are read again one at a time, so
/// that every batch before the failing one is still returned; then the
/// failing batch's error (invalid_message, io_error, cuda_error,
/// out_of_memory ...) is thrown.  placement(): the reader's.
class CUARROW_EXPORT stream_readahead : public arrow::readahead {
 public:
  /// Starts reading `reader`'s next batches.  Throws invalid_argument for
  /// options out of range, before anything is read; cuda_error when the
  /// reads' stream cannot be made.
  explicit stream_readahead(device_stream_reader& reader, readahead_options options = {});
  /// close().
  ~stream_readahead();

 private:
  void closed() noexcept override;  // puts the reader back, the first time

  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace cuarrow::ipc
