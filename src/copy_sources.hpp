// Internal: where the bytes of a staged host -> device piece come from when
// they are not already in host memory (staging.hpp).
//
// The staging pipeline copies each chunk of a job into a pinned slot on one
// of its workers, then queues the chunk's DMA.  Normally a piece's bytes are
// pageable host memory (staged_piece::host_src); with a piece_source they
// are read from a file straight into the slot (pread), or written into the
// slot by a callback (a codec decompressing a buffer).  Same workers, same
// chunk plan, same DMA loop: only the filling of a slot differs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace cuarrow::detail {

/// Writes bytes [offset, offset + out.size()) of a piece into `out` (part
/// of a pinned slot).  Called on the pipeline's workers; the parts of one
/// piece may be asked for concurrently and in any order.  Throws to fail the
/// job.
using produce_fn = std::function<void(std::size_t offset, std::span<unsigned char> out)>;

struct piece_source {
  enum class kind { file, produce };
  kind what = kind::file;
  /// kind::file: the piece is `size` bytes of the open file `fd` from
  /// `file_offset`; `path` names the file in errors (it must outlive the
  /// piece: a reader has thousands of pieces and one path); `bytes_read`,
  /// when set, counts the bytes read.
  int fd = -1;
  std::int64_t file_offset = 0;
  const std::string* path = nullptr;
  std::atomic<std::int64_t>* bytes_read = nullptr;
  /// When set, adds the nanoseconds spent in pread (a reader's stats).
  std::atomic<std::int64_t>* read_ns = nullptr;
  /// kind::produce: the callback.  The planner keeps a produce piece no
  /// larger than a chunk inside one slot, so that it is produced in one
  /// call; a larger one is produced in parts (one call per chunk).
  produce_fn produce;
  /// kind::produce, when nonzero: the piece likely decodes in independent
  /// parts of this many bytes (the last one shorter; a compressed buffer
  /// cuarrow wrote).  A piece larger than a chunk then starts a new chunk and
  /// its chunks end on multiples of it, so that each part lies inside one
  /// slot (when a part fits in one).
  std::size_t part_bytes = 0;
};

/// Adds the nanoseconds of its life to `*into`; nothing (not even a clock
/// read) when `into` is null: the readers' opt-in timings cost nothing off.
class timed {
 public:
  /// `out_of`: the counter of a timed scope this one runs inside, whose
  /// phase this time is not (it is moved from there to `into`, so that the
  /// phases stay disjoint and sum to at most the wall time).
  explicit timed(std::atomic<std::int64_t>* into, std::atomic<std::int64_t>* out_of = nullptr) noexcept
      : into_(into), out_of_(out_of) {
    if (into_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~timed() {
    if (into_ != nullptr) {
      const std::int64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
      into_->fetch_add(ns);
      if (out_of_ != nullptr) out_of_->fetch_sub(ns);
    }
  }
  timed(const timed&) = delete;
  timed& operator=(const timed&) = delete;

 private:
  std::atomic<std::int64_t>* into_;
  std::atomic<std::int64_t>* out_of_;
  std::chrono::steady_clock::time_point start_{};
};

/// The seconds a `timed` counter holds (the readers' and writers' stats).
inline double seconds_of(const std::atomic<std::int64_t>& ns) noexcept { return static_cast<double>(ns.load()) * 1e-9; }

/// Reads exactly out.size() bytes at `offset` of `fd` (short reads and
/// EINTR are retried).  Throws cuarrow::error naming `path`, the offset and
/// the system's reason, or saying where the file ended.
void read_file_exactly(int fd, const std::string& path, std::int64_t offset, std::span<unsigned char> out,
                       std::atomic<std::int64_t>* bytes_read = nullptr);

/// Writes bytes [offset, offset + out.size()) of the piece `source`
/// describes into `out`.
void fill_from_source(const piece_source& source, std::size_t offset, std::span<unsigned char> out);

}  // namespace cuarrow::detail
