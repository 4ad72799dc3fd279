// Internal: destinations of copies to the host other than host memory.
//
// A file is the one so far: the IPC file writers (src/ipc_format/) write
// record batch bodies from device memory into a file.  Device bytes reach a
// file only through host memory; the staging pipeline already DMAs them
// chunk by chunk into pinned slots, so each chunk is written to the file
// from its slot (pwrite) instead of being copied into pageable memory first.
// The pipeline stays one pipeline: the sink changes what a worker does when
// it drains a slot (staging.cpp), nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cuarrow/buffer.hpp"
#include "cuarrow/stream.hpp"

namespace cuarrow::detail {

/// A file open for writing.  Every write names its offset (pwrite), so
/// that the pipeline's workers write their chunks concurrently, each at its
/// place; bytes never written below the end read as zeros (POSIX), which is
/// what a body's padding must hold.
class output_file {
 public:
  /// Creates `path`, or truncates it if it exists (mode 0666 less the
  /// umask).  Throws io_error naming the path and the reason (no such
  /// directory, permission denied, ...).
  explicit output_file(std::string path);
  /// Closes the file if close() was not called; errors are reported as
  /// warnings.  The file is kept (discard() removes it).
  ~output_file();
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  const std::string& path() const noexcept { return path_; }

  /// Writes `n` bytes at `offset`, resumed after short writes and EINTR.
  /// Thread-safe.  Throws io_error naming the path, the offset and the
  /// reason (ENOSPC: the disk is full); the file stays open, so the
  /// caller may still discard() it.
  void write_at(const void* data, std::size_t n, std::uint64_t offset) const;

  /// Sets the file's size to `size` (ftruncate): the zeros after the last
  /// byte written, if any.  Throws io_error.
  void resize(std::uint64_t size) const;

  /// Closes the file.  Throws io_error when close() reports a failure (a
  /// file system may report a failed write only then); the descriptor is
  /// released either way.
  void close();

  /// Closes the file, ignoring errors, and removes it: what a writer does
  /// with a file it could not complete.  Never throws.
  void discard() noexcept;

 private:
  std::string path_;
  int fd_ = -1;
};

/// One piece of a copy into a file: `size` bytes of `src` from
/// `src_offset` land at `file_offset`.
struct file_piece {
  buffer src;
  std::int64_t src_offset = 0;
  std::int64_t size = 0;
  std::int64_t file_offset = 0;
};

/// Writes every piece into `file`, after the work already queued on `s`
/// (copy.cpp, the one copy engine): device and managed memory through the
/// staging pipeline, each chunk written from its pinned slot whatever the
/// staging threshold (file bytes pass through the host in any case); host
/// memory (ordinary or pinned) written from where it is.  The DMAs run on
/// `s`; the call returns once every byte is written.  Every piece is
/// checked first (out_of_range; the stream's device, device_mismatch).
/// Throws cuda_error, io_error; the sources are kept alive until any DMA
/// queued before a failure has passed.
void write_to_file(const output_file& file, std::span<const file_piece> pieces, stream_view s);

}  // namespace cuarrow::detail
