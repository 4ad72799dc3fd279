// Arrow IPC files and streams read by path into device memory
// (include/cuarrow/ipc/file.hpp).
//
// Metadata is read with pread on the calling thread and parsed by the
// in-memory readers' code (message_io.hpp); bodies go through the staging
// pipeline (staging.hpp) with file or decompressing sources
// (copy_sources.hpp), or, uncompressed and when the reader chose GPUDirect
// Storage, through cuFile (gds_copy.hpp), one device allocation per message
// body.
#include "cuarrow/ipc/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <variant>

#include "arrow/arrow_internal.hpp"
#include "codec_parts.hpp"
#include "copy_sources.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/gds.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "cuarrow/nvcomp.hpp"
#include "gds_copy.hpp"
#include "message_io.hpp"
#include "runtime/runtime.hpp"
#include "staging.hpp"
#include "wire.hpp"
#include "worker_pool.hpp"

namespace cuarrow::ipc {
namespace {

std::string num(std::int64_t v) { return std::to_string(v); }
std::int64_t pad8(std::int64_t n) { return (n + 7) / 8 * 8; }

// A stream's read_all reads the bodies of the record batches between two
// dictionary batches in staging jobs of about this many bytes: a stream is
// walked message by message, and the metadata of a job is read before it
// (the pinned state of a job does not grow with its size; this bounds the
// metadata held and lets a long stream's first jobs run before its end is
// read).
constexpr std::int64_t kStreamJobBytes = std::int64_t{256} << 20;

// Buffers of one body closer than this in the file are read as one range
// (the padding between them with them): fewer reads and DMAs.
constexpr std::int64_t kJoinGap = 64;

// file_read_options::body_group_bytes when left at -1.
constexpr std::int64_t kBodyGroupBytes = std::int64_t{32} << 20;

// Where the bodies that share an allocation start in it: Arrow's
// recommended buffer alignment (the buffers inside a body are 8-byte
// aligned, as the format lays them out).
constexpr std::int64_t kBodyAlignment = 64;

}  // namespace

const char* to_string(read_path_preference p) noexcept {
  switch (p) {
    case read_path_preference::automatic: return "automatic";
    case read_path_preference::staging: return "staging";
    case read_path_preference::gds: return "gds";
  }
  return "unknown";
}

read_path_preference read_path_preference_from(std::string_view name) {
  if (name == "auto" || name == "automatic") return read_path_preference::automatic;
  if (name == "staging") return read_path_preference::staging;
  if (name == "gds") return read_path_preference::gds;
  throw invalid_argument(
      "read_path must be \"auto\" (GPUDirect Storage where it reads directly, else the "
      "staging pipeline), \"staging\" or \"gds\", not \"" +
      std::string(name) + "\"");
}

const char* to_string(read_path p) noexcept {
  switch (p) {
    case read_path::none: return "none";
    case read_path::staging: return "staging";
    case read_path::gds: return "gds";
  }
  return "unknown";
}

namespace detail {

using cuarrow::detail::piece_source;
using cuarrow::detail::read_file_exactly;
using cuarrow::detail::staged_piece;

// An open file, closed on destruction.
class open_file {
 public:
  explicit open_file(std::string path) : path_(std::move(path)) {
    do {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) {
      const int e = errno;
      throw io_error(path_, e, "cannot open \"" + path_ + "\" for reading: " + std::strerror(e));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw io_error(path_, e, "cannot stat \"" + path_ + "\": " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw io_error(path_, S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                     "\"" + path_ + "\" is " + (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                         ": an Arrow IPC file or stream is read from a regular file");
    }
    size_ = static_cast<std::int64_t>(st.st_size);
  }
  ~open_file() {
    if (fd_ >= 0) ::close(fd_);
  }
  open_file(const open_file&) = delete;
  open_file& operator=(const open_file&) = delete;

  int fd() const noexcept { return fd_; }
  std::int64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

// Work that the workers which need one buffer do together, in steps: each
// step is a number of tasks, any worker takes any of them, and the worker
// that ends a step's last task runs the step's finish, which sets up the
// next step and returns its number of tasks (0: all is done).  A worker
// that arrives takes the tasks left and then waits for the end; the first
// failure fails every worker that waits or arrives.
class joint_steps {
 public:
  void run(std::size_t first_tasks, const std::function<void(std::size_t)>& task,
           const std::function<std::size_t()>& finish) {
    std::unique_lock lock(mutex_);
    if (!started_) {
      started_ = true;
      tasks_ = first_tasks;
    }
    for (;;) {
      if (error_) std::rethrow_exception(error_);
      if (done_) return;
      if (next_ == tasks_) {
        done_ = tasks_ == 0;  // a first step of no tasks: nothing to do
        if (!done_) wake_.wait(lock);
        continue;
      }
      const std::size_t i = next_++;
      lock.unlock();
      std::exception_ptr failed;
      std::size_t after = 0;
      bool last = false;
      try {
        task(i);
      } catch (...) {
        failed = std::current_exception();
      }
      if (!failed) {
        lock.lock();
        last = ++ended_ == tasks_;
        lock.unlock();
        if (last) {
          try {
            after = finish();
          } catch (...) {
            failed = std::current_exception();
          }
        }
      }
      lock.lock();
      if (failed) {
        if (!error_) error_ = failed;
      } else if (last) {
        tasks_ = after;
        next_ = ended_ = 0;
        done_ = after == 0;
      }
      if (failed || last) wake_.notify_all();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool started_ = false, done_ = false;
  std::size_t tasks_ = 0, next_ = 0, ended_ = 0;
  std::exception_ptr error_;
};

// One compressed buffer, read from the file and decompressed by the
// pipeline's workers straight into their slots: the calling thread reads
// only its 8-byte length prefix.  A buffer that fits in a slot is read into
// the worker's scratch memory and decompressed into the slot in one call; a
// larger one is asked for in parts (one per chunk) and read once.  When its
// parts decode independently (several ZSTD frames or an LZ4 frame of
// independent blocks, as cuarrow writes buffers above 4 MiB:
// codec_parts.hpp), each chunk decodes the parts that lie inside it
// straight into its slot: the buffer is decoded on as many workers as it
// has chunks.  The planner cuts such a buffer's chunks on its parts' bounds
// (piece_source::part_bytes, from its first frame's header), so a part
// straddles chunks only when it is larger than a slot or the hint was
// wrong; it is then decoded once, into scratch memory of its own, on
// whichever worker asks first.  Otherwise the buffer is decompressed once
// into host scratch memory and copied out part by part.  Bytes decoded
// into scratch memory are counted (read_stats::scratch_decoded_bytes).
//
// An LZ4 frame of independent blocks is first taken on trust: every block
// full but the last, as encoders write them (assume_full_blocks), each
// decoded straight into its slot.  A block that decodes to another size
// sets `distrusted` instead of failing the read; the reader then stages
// the job again with trust_blocks off (decoded_buffer_source is what a
// new attempt copies), which decodes the blocks into memory of their own
// first and reports a corrupt one.
struct decoded_buffer_source {
  compression_codec codec{};
  int fd = -1;
  const std::string* path = nullptr;
  std::atomic<std::int64_t>* bytes_read = nullptr;
  std::atomic<std::int64_t>* read_ns = nullptr;        // the reader's timings, when on
  std::atomic<std::int64_t>* decompress_ns = nullptr;  // likewise
  std::atomic<std::int64_t>* scratch_bytes = nullptr;  // read_stats::scratch_decoded_bytes
  std::int64_t file_offset = 0;                        // the framed bytes in the file
  std::size_t framed_size = 0;
  std::size_t size = 0;  // decompressed
  std::string where;
  bool trust_blocks = true;                 // LZ4 block sizes taken on trust first
  std::atomic<bool>* distrusted = nullptr;  // set when a block so sized decodes to another size
};

struct decoded_buffer : decoded_buffer_source {
  explicit decoded_buffer(decoded_buffer_source in) : decoded_buffer_source(std::move(in)), left(size) {}

  // Asked for in parts: the framed bytes, read once, in slices, by the
  // workers that ask together (`prepared`); then the units whose sizes
  // only their sequences tell (compressed LZ4 blocks) decoded into scratch
  // memory of their own, one task each (reading the sequences for their
  // sizes alone costs about two thirds of decoding them); the independent
  // parts, and each one's scratch memory (a part so decoded, or one that
  // straddles chunks), or else the whole buffer decompressed into
  // `scratch`.
  joint_steps prepared;
  enum class step { read, decode, whole } next_step = step::read;
  std::once_flag allocated;
  std::unique_ptr<std::byte[]> framed_store;  // not zeroed: the slices' reads touch it first
  std::span<std::byte> framed;
  std::vector<cuarrow::ipc::detail::frame_unit> units;
  std::vector<std::size_t> to_decode;  // indexes into units
  std::vector<std::unique_ptr<std::byte[]>> decoded_units;
  std::atomic<bool> decode_failed{false};
  std::vector<cuarrow::ipc::detail::frame_part> parts;
  struct part_scratch {
    std::once_flag once;
    std::unique_ptr<std::byte[]> bytes;  // the part, when decoded into scratch memory
    bool ready = false;                  // decoded while preparing (before any chunk asked)
    std::atomic<std::size_t> left{0};
  };
  std::unique_ptr<part_scratch[]> part_scratches;
  std::vector<std::byte> scratch;
  std::atomic<std::size_t> left;  // bytes not yet produced
  bool trusted = false;           // the parts' sizes assumed (assume_full_blocks)

  static constexpr std::size_t read_slice_bytes = std::size_t{1} << 20;

  void read_framed(std::vector<std::byte>& into) const {
    into.resize(framed_size);
    const cuarrow::detail::timed t(read_ns);
    read_file_exactly(fd, *path, file_offset, {reinterpret_cast<unsigned char*>(into.data()), framed_size}, bytes_read);
  }

  void produce(std::size_t offset, std::span<unsigned char> out) {
    const std::span<std::byte> dst(reinterpret_cast<std::byte*>(out.data()), out.size());
    if (offset == 0 && out.size() == size) {
      // Each worker keeps its framed scratch between buffers (at most a
      // chunk's worth, as the planner keeps such a buffer in one slot;
      // framing can add a little).
      thread_local std::vector<std::byte> framed_here;
      read_framed(framed_here);
      {
        const cuarrow::detail::timed t(decompress_ns);
        decompress(codec, framed_here, dst, where);
      }
      if (framed_here.capacity() > (std::size_t{64} << 20)) std::vector<std::byte>().swap(framed_here);
      return;
    }
    prepare();
    if (parts.empty()) {
      std::memcpy(out.data(), scratch.data() + offset, out.size());
    } else {
      produce_from_parts(offset, dst);
    }
    if (left.fetch_sub(out.size()) == out.size()) {  // the last part
      std::vector<std::byte>().swap(scratch);
      release_framed();
    }
  }

  void release_framed() noexcept {
    framed = {};
    framed_store.reset();
  }

  // The framed bytes read and the parts found (or the whole buffer
  // decoded into scratch memory), by the workers that ask together.
  void prepare() {
    namespace d = cuarrow::ipc::detail;
    const std::size_t slices = (framed_size + read_slice_bytes - 1) / read_slice_bytes;
    prepared.run(
        slices,
        [&](std::size_t i) {
          switch (next_step) {
            case step::read: {
              std::call_once(allocated, [&] {
                framed_store.reset(new std::byte[framed_size]);
                framed = {framed_store.get(), framed_size};
              });
              const std::size_t at = i * read_slice_bytes, n = std::min(read_slice_bytes, framed_size - at);
              const cuarrow::detail::timed t(read_ns);
              read_file_exactly(fd, *path, file_offset + static_cast<std::int64_t>(at),
                                {reinterpret_cast<unsigned char*>(framed.data() + at), n}, bytes_read);
              return;
            }
            case step::decode: {
              d::frame_unit& u = units[to_decode[i]];
              std::unique_ptr<std::byte[]>& into = decoded_units[to_decode[i]];
              into.reset(new std::byte[u.most]);
              const cuarrow::detail::timed t(decompress_ns);
              u.out_size = d::decode_unit(codec, framed, u, {into.get(), u.most});
              if (u.out_size < 0) {
                decode_failed = true;
              } else {
                scratch_bytes->fetch_add(u.out_size);
              }
              return;
            }
            case step::whole: {
              scratch.resize(size);
              const cuarrow::detail::timed t(decompress_ns);
              decompress(codec, framed, scratch, where);
              scratch_bytes->fetch_add(static_cast<std::int64_t>(size));
              release_framed();
              return;
            }
          }
        },
        [&]() -> std::size_t {
          switch (next_step) {
            case step::read: {
              std::optional<std::vector<d::frame_unit>> found = d::frame_units(codec, framed, size);
              if (found) {
                units = std::move(*found);
                trusted = trust_blocks && codec == compression_codec::lz4_frame && d::assume_full_blocks(units, size);
                for (std::size_t k = 0; k < units.size(); ++k) {
                  if (units[k].out_size < 0) to_decode.push_back(k);
                }
                if (!to_decode.empty()) {
                  decoded_units.resize(units.size());
                  next_step = step::decode;
                  return to_decode.size();
                }
              }
              break;
            }
            case step::decode: break;
            case step::whole: return 0;
          }
          // Units decoded into scratch memory stay parts of their own (one
          // scratch each); the others are joined into parts of at least
          // min_part_bytes.
          const bool any_decoded = !decoded_units.empty();
          if (!units.empty() && !decode_failed) parts = d::join_units(units, size, any_decoded ? 0 : d::min_part_bytes);
          std::vector<d::frame_unit>().swap(units);
          if (parts.empty()) {
            std::vector<std::unique_ptr<std::byte[]>>().swap(decoded_units);
            next_step = step::whole;
            return 1;
          }
          part_scratches = std::make_unique<part_scratch[]>(parts.size());
          for (std::size_t k = 0; k < parts.size(); ++k) {
            part_scratch& ps = part_scratches[k];
            ps.left = parts[k].out_size;
            if (any_decoded && decoded_units[k] != nullptr) {
              ps.bytes = std::move(decoded_units[k]);
              ps.ready = true;
            }
          }
          std::vector<std::unique_ptr<std::byte[]>>().swap(decoded_units);
          return 0;
        });
  }

  // Part `p` decoded into `out`; a trusted part that decodes to another
  // size than assumed only says so (the job is staged again).
  void decode_part(const cuarrow::ipc::detail::frame_part& p, std::span<std::byte> out) {
    const cuarrow::detail::timed t(decompress_ns);
    try {
      cuarrow::ipc::detail::decompress_part(codec, framed, p, out, where);
    } catch (const invalid_message&) {
      if (!trusted) throw;
      distrusted->store(true);
    }
  }

  // Bytes [offset, offset + out.size()) from the parts that overlap them.
  void produce_from_parts(std::size_t offset, std::span<std::byte> out) {
    const std::size_t end = offset + out.size();
    auto k = static_cast<std::size_t>(
        std::upper_bound(parts.begin(), parts.end(), offset,
                         [](std::size_t at, const cuarrow::ipc::detail::frame_part& p) { return at < p.out_offset; }) -
        parts.begin() - 1);
    for (; k < parts.size() && parts[k].out_offset < end; ++k) {
      const cuarrow::ipc::detail::frame_part& p = parts[k];
      const std::size_t from = std::max(p.out_offset, offset), to = std::min(p.out_offset + p.out_size, end);
      const std::span<std::byte> here = out.subspan(from - offset, to - from);
      part_scratch& ps = part_scratches[k];
      if (!ps.ready && from == p.out_offset && to == p.out_offset + p.out_size) {  // all of it lies in this chunk
        decode_part(p, here);
        continue;
      }
      if (!ps.ready) {
        std::call_once(ps.once, [&] {
          ps.bytes.reset(new std::byte[p.out_size]);
          decode_part(p, {ps.bytes.get(), p.out_size});
          scratch_bytes->fetch_add(static_cast<std::int64_t>(p.out_size));
        });
      }
      std::memcpy(here.data(), ps.bytes.get() + (from - p.out_offset), here.size());
      if (ps.left.fetch_sub(here.size()) == here.size()) ps.bytes.reset();
    }
  }
};

// One message body to read: its header (rewritten by read_bodies to
// describe the device allocation) and where the body lies in the file.
struct body_request {
  record_batch_header* header = nullptr;
  std::int64_t body_start = 0;
  std::int64_t body_length = 0;
  const std::string* where = nullptr;
};

// What both readers share: the open file, the context, the options, the
// projection and the counters.
struct file_source {
  file_source(std::string path, context c, file_read_options o)
      : file(std::move(path)), ctx(std::move(c)), options(std::move(o)) {
    if (options.io_threads < 0 || options.io_threads > 256) {
      throw invalid_argument("file_read_options: io_threads must be between 0 (the default) and 256");
    }
    if (options.max_decompressed_buffer_bytes < 0) {
      throw invalid_argument("file_read_options: max_decompressed_buffer_bytes must be >= 0");
    }
    if (options.body_group_bytes < -1) {
      throw invalid_argument("file_read_options: body_group_bytes must be >= 0, or -1 for the default");
    }
    if (options.body_group_bytes == -1) {
      options.body_group_bytes =
          std::max<std::int64_t>(0, cuarrow::detail::env_int("CUARROW_BODY_GROUP_BYTES", kBodyGroupBytes));
    }
    options.read.decompress = nullptr;  // decompressed in the pipeline, never by the body reader
    choose_path();
  }

  open_file file;
  context ctx;
  file_read_options options;
  std::atomic<std::int64_t> bytes_read{0};
  std::atomic<read_path> last_path{read_path::none};
  // read_stats: counts always, nanoseconds when options.collect_stats.
  std::atomic<std::int64_t> batches{0}, staging_jobs{0}, dmas{0}, scratch_decoded_bytes{0};
  std::atomic<std::int64_t> metadata_ns{0}, allocate_ns{0}, staging_ns{0}, gds_ns{0}, build_ns{0}, pread_ns{0},
      decompress_ns{0}, dma_wait_ns{0}, gpu_decompress_ns{0};
  // GPU decompression (gpu_zstd()): decided once, at the first ZSTD body.
  std::once_flag gpu_once;
  bool gpu_on = false;
  std::string gpu_version;
  std::string gpu_why_not;
  // GPUDirect Storage: the file registered with cuFile when this reader
  // uses it, how it runs; why the staging pipeline runs otherwise.  After a
  // cuFile failure `gds_failed` is set and `fallback` says what failed.
  std::unique_ptr<cuarrow::detail::gds_file> gds;
  std::string gds_reason;
  std::string staging_reason;
  std::atomic<bool> gds_failed{false};
  std::atomic<bool> trust_blocks{true};  // LZ4 block sizes taken on trust (decoded_buffer)
  mutable std::mutex reason_mutex;       // guards the two below
  std::string fallback;
  std::string reason;  // last_read_path_reason()
  // Set by project(): the full schema, the one returned, the dictionary ids
  // the chosen columns need.
  schema_message full_schema;
  schema_message schema;
  std::set<std::int64_t> needed_dictionaries;
  // The column spans of headers without variadic buffer counts, by
  // metadata version: a function of the schema alone (only view arrays'
  // variadic counts vary from batch to batch), walked once, not once a
  // batch (226 walks of 17 columns were most of a projected read's
  // metadata time on the H200).
  mutable std::mutex spans_mutex;
  mutable std::vector<std::pair<metadata_version, std::vector<column_span>>> fixed_spans;

  stream_view stream_for(stream_view s) const { return s.is_default() ? options.read.stream : s; }

  // Where a phase's nanoseconds go: null (nothing timed) unless asked for.
  std::atomic<std::int64_t>* timer(std::atomic<std::int64_t>& ns) noexcept {
    return options.collect_stats ? &ns : nullptr;
  }

  read_stats stats() const noexcept {
    using cuarrow::detail::seconds_of;
    read_stats r;
    r.bytes_read = bytes_read.load();
    r.batches = batches.load();
    r.staging_jobs = staging_jobs.load();
    r.dmas = dmas.load();
    r.scratch_decoded_bytes = scratch_decoded_bytes.load();
    r.metadata_seconds = seconds_of(metadata_ns);
    r.allocate_seconds = seconds_of(allocate_ns);
    r.staging_seconds = seconds_of(staging_ns);
    r.gds_seconds = seconds_of(gds_ns);
    r.build_seconds = seconds_of(build_ns);
    r.pread_seconds = seconds_of(pread_ns);
    r.decompress_seconds = seconds_of(decompress_ns);
    r.dma_wait_seconds = seconds_of(dma_wait_ns);
    r.gpu_decompress_seconds = seconds_of(gpu_decompress_ns);
    return r;
  }

  void set_reason(std::string r) {
    std::lock_guard lock(reason_mutex);
    reason = std::move(r);
  }
  std::string last_reason() const {
    std::lock_guard lock(reason_mutex);
    return reason;
  }

  // The path options.path and gds_status() choose, the file registered
  // with cuFile when it is GPUDirect Storage.
  void choose_path() {
    if (options.path == read_path_preference::staging) {
      staging_reason = "file_read_options asked for the staging path";
      reason = staging_reason;
      return;
    }
    const bool insist = options.path == read_path_preference::gds;
    const gds_info g = gds_status();
    if (!g.available) {
      if (insist) {
        throw driver_error("file_read_options asked for the gds read path, but GPUDirect Storage is not available: " +
                           g.reason);
      }
      staging_reason = g.reason;
      reason = staging_reason;
      return;
    }
    std::string why;
    gds = cuarrow::detail::gds_file::open(file.path(), why);
    if (!gds) {
      if (insist) throw driver_error("file_read_options asked for the gds read path: " + why);
      staging_reason = why + "; the staging pipeline reads it";
      reason = staging_reason;
      return;
    }
    gds_reason = std::string("cuFile (") + g.library + ") " +
                 (g.compat_mode ? "in compatibility mode (POSIX reads through cuFile's own bounce buffers)"
                                : "reading directly into device memory") +
                 (gds->direct() ? "" : "; the file is not opened with O_DIRECT (its file system refuses it)");
    reason = gds_reason;
  }

  // Reads the body's runs (`targets`: where each lands, its size, its
  // file offset) with cuFile into `body`.  Returns false, the reason
  // recorded and this reader switched to the staging pipeline for good,
  // when cuFile fails.  Driver failures around it (the gaps' fill, the
  // stream's synchronization) throw as on the staging path.
  bool read_with_gds(const buffer& body, std::span<const cuarrow::detail::gds_piece> targets, stream_view sv) {
    const auto base = static_cast<CUdeviceptr>(body.address());
    {
      scoped_context guard(ctx.handle());
      // The padding between runs is zeros, as the staging path writes it.
      for (std::size_t k = 1; k < targets.size(); ++k) {
        const std::size_t end = targets[k - 1].device_offset + targets[k - 1].size;
        if (targets[k].device_offset > end) {
          cuarrow::detail::memset_async(base + end, 0, targets[k].device_offset - end, sv.handle());
        }
      }
      // cuFileRead is ordered with no stream: the allocation (stream
      // ordered) and the fills must be done first.
      cuarrow::detail::synchronize_in(&ctx, sv);
    }
    try {
      cuarrow::detail::gds_read_to_device(*gds, ctx.handle(), base, targets, options.io_threads, &bytes_read);
      return true;
    } catch (const std::exception& e) {
      gds_failed.store(true);
      std::lock_guard lock(reason_mutex);
      fallback = std::string(e.what()) + "; this reader uses the staging pipeline from now on";
      return false;
    }
  }

  // Why a body is read through the staging pipeline.
  std::string why_staging(bool compressed, bool empty) const {
    if (gds && empty) return "the body is empty: nothing was read";
    if (gds && gds_failed.load()) {
      std::lock_guard lock(reason_mutex);
      return fallback;
    }
    if (gds && compressed) {
      return "the body is compressed: it travels through the staging pipeline (cuFile reads only uncompressed "
             "bodies)";
    }
    return staging_reason;
  }

  // `size` bytes at `offset` on the calling thread.
  std::vector<std::byte> read(std::int64_t offset, std::int64_t size) {
    if (offset < 0 || size < 0 || offset > file.size() || size > file.size() - offset) {
      throw invalid_message("file \"" + file.path() + "\"", "bytes " + num(offset) + ".." + num(offset + size) +
                                                                " lie outside the file of " + num(file.size()) +
                                                                " bytes");
    }
    std::vector<std::byte> out(static_cast<std::size_t>(size));
    read_file_exactly(file.fd(), file.path(), offset, {reinterpret_cast<unsigned char*>(out.data()), out.size()},
                      &bytes_read);
    return out;
  }

  // The metadata of the message at `offset`, timed in metadata_ns unless
  // `on_worker` (a caller reading many on for_each_index's threads times
  // the whole: read_stats are the calling thread's).
  std::optional<framed_metadata> metadata_at(std::int64_t offset, std::int64_t first_read = default_first_read,
                                             bool on_worker = false) {
    const cuarrow::detail::timed t(on_worker ? nullptr : timer(metadata_ns));
    return read_framed_metadata([this](std::int64_t at, std::int64_t n) { return read(at, n); }, offset, file.size(),
                                first_read, file.path());
  }

  // The schema returned and the dictionaries needed, from the file's schema
  // and options.columns.
  void project(const schema_message& full) {
    full_schema = full;
    if (!options.columns) {
      schema = full;
      for (const dictionary_field& d : full.dictionaries) needed_dictionaries.insert(d.id);
      return;
    }
    const auto& fields = full.schema.fields;
    std::vector<int> position(fields.size(), -1);
    schema = schema_message{};
    schema.features = full.features;
    schema.schema.metadata = full.schema.metadata;
    for (std::size_t k = 0; k < options.columns->size(); ++k) {
      const int c = (*options.columns)[k];
      if (c < 0 || static_cast<std::size_t>(c) >= fields.size()) {
        throw invalid_argument("Out of bounds field index: " + std::to_string(c) + " (file_read_options::columns: " +
                               file.path() + " has " + std::to_string(fields.size()) + " top-level fields)");
      }
      if (position[static_cast<std::size_t>(c)] >= 0) {
        throw invalid_argument("file_read_options: column " + std::to_string(c) + " chosen twice");
      }
      position[static_cast<std::size_t>(c)] = static_cast<int>(k);
      schema.schema.fields.push_back(fields[static_cast<std::size_t>(c)]);
    }
    for (const dictionary_field& d : full.dictionaries) {
      if (d.path.empty() || d.path[0] < 0 || static_cast<std::size_t>(d.path[0]) >= fields.size()) continue;
      const int p = position[static_cast<std::size_t>(d.path[0])];
      if (p < 0) continue;
      dictionary_field moved = d;
      moved.path[0] = p;
      schema.dictionaries.push_back(std::move(moved));
      needed_dictionaries.insert(d.id);
    }
  }

  // A dictionary batch is skipped when the chosen columns do not use it;
  // one the schema does not know is read (and refused by the memo).
  bool skips(const dictionary_memo& memo, std::int64_t id) const {
    return memo.knows(id) && needed_dictionaries.count(id) == 0;
  }

  // The column spans of `h` (column_spans), walked once a version when
  // they cannot vary.  A header whose counts differ from the spans' totals
  // is refused by the caller, as after a walk of its own.
  std::vector<column_span> spans_of(const record_batch_header& h, metadata_version v) const {
    if (!h.variadic_buffer_counts.empty()) return column_spans(h, full_schema, v);
    {
      std::lock_guard lock(spans_mutex);
      for (const auto& [version, spans] : fixed_spans) {
        if (version == v) return spans;
      }
    }
    std::vector<column_span> spans = column_spans(h, full_schema, v);
    std::lock_guard lock(spans_mutex);
    fixed_spans.emplace_back(v, spans);
    return spans;
  }

  // `h` restricted to the chosen columns (nodes, buffers, variadic counts of
  // each, in the chosen order).
  record_batch_header projected(const record_batch_header& h, metadata_version v) const {
    if (!options.columns) return h;
    const std::vector<column_span> spans = spans_of(h, v);
    if (!spans.empty()) {
      const column_span& last = spans.back();
      if (last.end_node != h.nodes.size() || last.end_buffer != h.buffers.size() ||
          last.end_variadic != h.variadic_buffer_counts.size()) {
        throw invalid_message("record batch header",
                              num(static_cast<std::int64_t>(h.nodes.size())) + " field nodes, " +
                                  num(static_cast<std::int64_t>(h.buffers.size())) + " buffers and " +
                                  num(static_cast<std::int64_t>(h.variadic_buffer_counts.size())) +
                                  " variadic counts; the schema's columns take " +
                                  num(static_cast<std::int64_t>(last.end_node)) + ", " +
                                  num(static_cast<std::int64_t>(last.end_buffer)) + " and " +
                                  num(static_cast<std::int64_t>(last.end_variadic)));
      }
    }
    record_batch_header out;
    out.length = h.length;
    out.compression = h.compression;
    for (const int c : *options.columns) {
      const column_span& sp = spans[static_cast<std::size_t>(c)];
      out.nodes.insert(out.nodes.end(), h.nodes.begin() + static_cast<std::ptrdiff_t>(sp.first_node),
                       h.nodes.begin() + static_cast<std::ptrdiff_t>(sp.end_node));
      out.buffers.insert(out.buffers.end(), h.buffers.begin() + static_cast<std::ptrdiff_t>(sp.first_buffer),
                         h.buffers.begin() + static_cast<std::ptrdiff_t>(sp.end_buffer));
      out.variadic_buffer_counts.insert(
          out.variadic_buffer_counts.end(),
          h.variadic_buffer_counts.begin() + static_cast<std::ptrdiff_t>(sp.first_variadic),
          h.variadic_buffer_counts.begin() + static_cast<std::ptrdiff_t>(sp.end_variadic));
    }
    return out;
  }

  // The host threads a body read uses: io_threads, else at least the
  // pipeline's count and up to one per core (16 at most): pread from the
  // page cache and decompression scale further than the memcpy the
  // pipeline's default count is tuned for.
  int threads() const {
    if (options.io_threads > 0) return options.io_threads;
    const int hardware = std::clamp(cuarrow::detail::host_cores(), 1, 16);
    return std::max(hardware, cuarrow::detail::current_transfer_options().staging_threads_to_device);
  }

  // The decompressed size of the compressed buffer of `length` bytes whose
  // first bytes (its 8-byte prefix, and more) are `head`.
  std::int64_t compressed_buffer_size(std::span<const std::byte> head, std::int64_t length, const std::string& where) {
    if (length <= frame_prefix_bytes) {
      return decompressed_size(head, options.max_decompressed_buffer_bytes, where);  // checks the short ones
    }
    if (load_prefix(head) == -1) {  // stored uncompressed: its size is the rest of the buffer
      // decompressed_size checks the limit over the whole buffer; with the
      // prefix alone, the same check is made on the length the rest gives.
      const std::int64_t size = length - frame_prefix_bytes;
      if (size > options.max_decompressed_buffer_bytes) {
        throw invalid_message(where, "uncompressed length " + num(size) + " is above the limit of " +
                                         num(options.max_decompressed_buffer_bytes));
      }
      return size;
    }
    return decompressed_size(head.first(frame_prefix_bytes), options.max_decompressed_buffer_bytes, where);
  }

  static std::int64_t load_prefix(std::span<const std::byte> head) {
    return cuarrow::detail::get_le<std::int64_t>(head.data());
  }

  // Whether ZSTD bodies go to the GPU (nvCOMP): asked for, available, and
  // at an alignment the body layout (8-byte) gives.  Decided once a reader.
  bool gpu_zstd() {
    std::call_once(gpu_once, [&] {
      if (!options.gpu_decompression) return;
      const nvcomp_info n = nvcomp_status();
      if (!n.available) {
        gpu_why_not = n.reason;
      } else if (!codec_available(compression_codec::zstd)) {
        gpu_why_not = "this cuarrow was built without libzstd, which checks each frame's header on the host";
      } else if (cuarrow::detail::gpu_zstd_alignment() > 8) {
        gpu_why_not = "nvCOMP " + n.version + " asks for " + std::to_string(cuarrow::detail::gpu_zstd_alignment()) +
                      "-byte aligned buffers; Arrow bodies are 8-byte aligned";
      } else {
        gpu_version = n.version;
        gpu_on = true;
      }
    });
    return gpu_on;
  }

  // Reads the buffers each request's header names (of the body at file
  // offset body_start, body_length bytes) into ONE device body per request
  // (allocate_bodies: neighbouring small ones share an allocation), all
  // through ONE staging job, and rewrites each header to
  // describe its allocation (uncompressed, packed, 8-byte aligned).  Every
  // body is checked and planned before anything is allocated; a failure
  // releases every allocation and leaves the headers as they were.
  // Bodies allocated (and those GPUDirect Storage read, read), the rest
  // planned as one staging job; the headers' buffers already point into
  // the bodies.
  struct planned_bodies {
    std::vector<buffer> bodies;
    std::vector<staged_piece> pieces;
    std::deque<piece_source> sources;                                 // stable addresses for the pieces
    std::deque<decoded_buffer> decoded;                               // likewise
    std::vector<std::pair<piece_source*, decoded_buffer*>> produced;  // each source of a decoded buffer
    std::unique_ptr<std::atomic<bool>> distrusted = std::make_unique<std::atomic<bool>>(false);
    // ZSTD buffers nvCOMP decompresses after the staging job: their framed
    // bytes are staged into `scratch`, then decompressed into the bodies.
    buffer scratch;
    std::vector<cuarrow::detail::gpu_zstd_chunk> gpu_chunks;
    std::vector<std::string> gpu_names;
    bool any_gds = false, any_staged = false, any_compressed = false, all_empty = true;
  };

  // The bodies' device memory, in request order: one allocation each, or
  // (options.body_group_bytes) runs of neighbouring bodies as 64-byte
  // aligned slices of one allocation of at most that many bytes (an empty
  // body an empty slice).  group[q] numbers the allocation body q lies in.
  // A body larger than the bound gets its own.
  void allocate_bodies(std::span<const std::int64_t> lengths, stream_view sv, std::vector<buffer>& bodies,
                       std::vector<std::size_t>& group) {
    const auto aligned = [](std::int64_t n) { return (n + kBodyAlignment - 1) / kBodyAlignment * kBodyAlignment; };
    const std::int64_t most = options.body_group_bytes;
    std::size_t g = 0;
    for (std::size_t q = 0; q < lengths.size(); ++g) {
      // Bodies [q, e) share one allocation of `length` bytes.
      std::int64_t length = lengths[q];
      std::size_t e = q + 1;
      if (most > 0 && length <= most) {
        while (e < lengths.size() && aligned(length) + lengths[e] <= most) {
          length = aligned(length) + lengths[e];
          ++e;
        }
      }
      if (e == q + 1) {
        bodies.push_back(allocate_device(ctx, lengths[q], sv));
        group[q++] = g;
        continue;
      }
      const buffer shared = allocate_device(ctx, length, sv);
      for (std::int64_t at = 0; q < e; ++q) {
        bodies.push_back(shared.slice(at, lengths[q]));
        group[q] = g;
        at = aligned(at + lengths[q]);
      }
    }
  }

  planned_bodies plan_bodies(std::span<const body_request> requests, stream_view s) {
    struct target {
      std::int64_t at = 0;
      std::int64_t size = 0;
      const piece_source* source = nullptr;
    };
    struct planned {
      std::int64_t length = 0;
      std::vector<body_range> out;
      std::vector<target> targets;
    };
    planned_bodies pb;
    std::deque<piece_source>& sources = pb.sources;
    std::deque<decoded_buffer>& decoded = pb.decoded;
    std::vector<planned> plans(requests.size());
    // The ZSTD frames nvCOMP decompresses: request, buffer, where the frame
    // lies in the file (after its prefix), its name for errors.
    struct gpu_frame {
      std::size_t request = 0, buffer = 0;
      std::int64_t file_offset = 0, size = 0;
      std::string name;
    };
    std::vector<gpu_frame> gpu;
    // A source of bytes read from this file at `offset`.
    auto file_piece = [&](std::int64_t offset) -> piece_source& {
      piece_source& src = sources.emplace_back();
      src.fd = file.fd();
      src.path = &file.path();
      src.file_offset = offset;
      src.bytes_read = &bytes_read;
      src.read_ns = timer(pread_ns);
      return src;
    };
    for (std::size_t q = 0; q < requests.size(); ++q) {
      const body_request& rq = requests[q];
      const record_batch_header& h = *rq.header;
      check_body_ranges(h, rq.body_length);
      planned& pl = plans[q];
      pl.out.resize(h.buffers.size());
      if (!h.compression) {
        // Runs of the file: neighbouring buffers (in header order) read as one.
        std::int64_t file_start = 0, file_end = 0, at = 0;
        const piece_source* current = nullptr;
        for (std::size_t i = 0; i < h.buffers.size(); ++i) {
          const body_range r = h.buffers[i];
          if (r.length == 0) continue;
          if (current == nullptr || r.offset < file_end || r.offset - file_end > kJoinGap) {
            at = pad8(pl.length);
            file_start = r.offset;
            piece_source& src = file_piece(rq.body_start + r.offset);
            current = &src;
            pl.targets.push_back(target{at, 0, &src});
          }
          file_end = r.offset + r.length;
          pl.targets.back().size = file_end - file_start;
          pl.out[i] = body_range{at + (r.offset - file_start), r.length};
          pl.length = at + (file_end - file_start);
        }
      } else {
        const bool to_gpu = *h.compression == compression_codec::zstd && gpu_zstd();
        for (std::size_t i = 0; i < h.buffers.size(); ++i) {
          const body_range r = h.buffers[i];
          if (r.length == 0) continue;
          const std::string name = *rq.where + " buffers[" + std::to_string(i) + "]";
          const std::int64_t at = rq.body_start + r.offset;
          // With nvCOMP, the frame's header too: it must declare the size
          // the prefix does before a GPU kernel sees the frame.
          const std::vector<std::byte> head =
              read(at, std::min<std::int64_t>(r.length, to_gpu ? frame_prefix_bytes + 18 : frame_prefix_bytes));
          const std::int64_t size = compressed_buffer_size(head, r.length, name);
          pl.out[i] = body_range{pad8(pl.length), size};
          if (size == 0) continue;
          pl.length = pl.out[i].offset + size;
          if (to_gpu && r.length > frame_prefix_bytes) {
            if (load_prefix(head) == -1) {
              // Stored uncompressed: its bytes go straight into the body.
              pl.targets.push_back(target{pl.out[i].offset, size, &file_piece(at + frame_prefix_bytes)});
              continue;
            }
            if (zstd_frame_content_size(std::span(head).subspan(frame_prefix_bytes)) == size) {
              gpu.push_back({q, i, at + frame_prefix_bytes, r.length - frame_prefix_bytes, name});
              continue;
            }
            // A frame that does not state its size, or states another (the
            // first of several frames, or a lie): the host decides.
          }
          decoded_buffer_source in;
          in.codec = *h.compression;
          in.fd = file.fd();
          in.path = &file.path();
          in.bytes_read = &bytes_read;
          in.read_ns = timer(pread_ns);
          in.decompress_ns = timer(decompress_ns);
          in.scratch_bytes = &scratch_decoded_bytes;
          in.file_offset = at;
          in.framed_size = static_cast<std::size_t>(r.length);
          in.size = static_cast<std::size_t>(size);
          in.where = name;
          in.trust_blocks = trust_blocks.load();
          in.distrusted = pb.distrusted.get();
          decoded_buffer& d = decoded.emplace_back(std::move(in));
          piece_source& src = sources.emplace_back();
          src.what = piece_source::kind::produce;
          produce_from(src, d);
          pb.produced.emplace_back(&src, &d);
          // A buffer above two parts' worth may be staged in chunks cut on
          // the bounds of the parts it decodes in: its first frame's header
          // tells their size (a second read of a few bytes, for the few
          // such buffers).
          if (size > static_cast<std::int64_t>(2 * cuarrow::ipc::detail::min_part_bytes)) {
            const std::vector<std::byte> frame_head =
                read(at, std::min<std::int64_t>(
                             r.length, frame_prefix_bytes +
                                           static_cast<std::int64_t>(cuarrow::ipc::detail::part_hint_head_bytes)));
            src.part_bytes = cuarrow::ipc::detail::part_bytes_hint(d.codec, frame_head, d.size);
          }
          pl.targets.push_back(target{pl.out[i].offset, size, &src});
        }
      }
    }

    const stream_view sv = stream_for(s);
    std::vector<buffer>& bodies = pb.bodies;
    bodies.reserve(requests.size());
    std::vector<staged_piece>& pieces = pb.pieces;
    bool &any_gds = pb.any_gds, &any_staged = pb.any_staged, &any_compressed = pb.any_compressed,
         &all_empty = pb.all_empty;
    std::vector<std::size_t> group(plans.size());
    {
      const cuarrow::detail::timed t(timer(allocate_ns));
      std::vector<std::int64_t> lengths(plans.size());
      for (std::size_t q = 0; q < plans.size(); ++q) lengths[q] = plans[q].length;
      allocate_bodies(lengths, sv, bodies, group);
    }
    // The end of the last staged piece, when the next body's first piece
    // may join its DMA: the same shared allocation, both uncompressed (never
    // across a buffer nvCOMP writes later: only padding travels in the same
    // DMA), nothing read by GPUDirect Storage between them.
    struct staged_end {
      bool joinable = false;
      std::size_t group = 0;
      CUdeviceptr end = 0;
    } tail;
    for (std::size_t q = 0; q < plans.size(); ++q) {
      const planned& pl = plans[q];
      const buffer& body = bodies[q];
      const bool compressed = requests[q].header->compression.has_value();
      any_compressed = any_compressed || compressed;
      all_empty = all_empty && pl.targets.empty();
      // GPUDirect Storage, when chosen, reads an uncompressed body straight
      // into its allocation; anything it does not read (compressed bodies,
      // a failed cuFile read) goes through the one staging job below.
      if (!compressed && gds && !gds_failed.load() && !pl.targets.empty()) {
        std::vector<cuarrow::detail::gds_piece> parts;
        parts.reserve(pl.targets.size());
        for (const target& t : pl.targets) {
          parts.push_back({static_cast<std::size_t>(t.at), static_cast<std::size_t>(t.size), t.source->file_offset});
        }
        const bool by_gds = [&] {
          const cuarrow::detail::timed t(timer(gds_ns));
          return read_with_gds(body, parts, sv);
        }();
        if (by_gds) {
          any_gds = true;
          tail.joinable = false;
          continue;
        }
      }
      any_staged = any_staged || !pl.targets.empty();
      // Merged with the previous piece across the 8-byte padding of one
      // body, or the alignment between two bodies of one allocation (above).
      std::int64_t end = -1;
      for (const target& t : pl.targets) {
        staged_piece p;
        p.device = static_cast<CUdeviceptr>(body.address() + static_cast<std::uintptr_t>(t.at));
        p.size = static_cast<std::size_t>(t.size);
        if (end >= 0) {
          p.merge_with_previous = t.at - end < 8;
        } else {
          p.merge_with_previous = !compressed && tail.joinable && tail.group == group[q] && p.device >= tail.end &&
                                  p.device - tail.end < static_cast<CUdeviceptr>(kBodyAlignment);
        }
        p.source = t.source;
        pieces.push_back(p);
        end = t.at + t.size;
      }
      if (compressed) {
        tail.joinable = false;
      } else if (end >= 0) {
        tail = {true, group[q], static_cast<CUdeviceptr>(body.address() + static_cast<std::uintptr_t>(end))};
      }
    }
    if (!gpu.empty()) {
      // The frames, packed 8-byte aligned into one scratch allocation and
      // staged there by the same job as the rest.
      std::vector<std::int64_t> at(gpu.size());
      std::int64_t length = 0;
      for (std::size_t k = 0; k < gpu.size(); ++k) {
        at[k] = pad8(length);
        length = at[k] + gpu[k].size;
      }
      {
        const cuarrow::detail::timed t(timer(allocate_ns));
        pb.scratch = allocate_device(ctx, length, sv);
      }
      const auto base = static_cast<CUdeviceptr>(pb.scratch.address());
      any_staged = true;
      all_empty = false;
      {
        // Bodies nvCOMP writes into are zeroed first, as the staging path
        // zeroes the padding between buffers (queued before the staging
        // job's DMAs, on the same stream).
        scoped_context guard(ctx.handle());
        std::size_t last = requests.size();
        for (const gpu_frame& g : gpu) {
          if (g.request == last) continue;
          last = g.request;
          const buffer& b = bodies[g.request];
          cuarrow::detail::memset_async(static_cast<CUdeviceptr>(b.address()), 0, static_cast<std::size_t>(b.size()),
                                        sv.handle());
        }
      }
      for (std::size_t k = 0; k < gpu.size(); ++k) {
        const gpu_frame& g = gpu[k];
        staged_piece p;
        p.device = base + static_cast<CUdeviceptr>(at[k]);
        p.size = static_cast<std::size_t>(g.size);
        p.merge_with_previous = k > 0;
        p.source = &file_piece(g.file_offset);
        pieces.push_back(p);
        const body_range out = plans[g.request].out[g.buffer];
        pb.gpu_chunks.push_back(
            {p.device, p.size,
             static_cast<CUdeviceptr>(bodies[g.request].address() + static_cast<std::uintptr_t>(out.offset)),
             static_cast<std::size_t>(out.length)});
        pb.gpu_names.push_back(g.name);
      }
    }
    for (std::size_t q = 0; q < requests.size(); ++q) {
      requests[q].header->buffers = std::move(plans[q].out);
      requests[q].header->compression.reset();
    }
    return pb;
  }

  static void produce_from(piece_source& src, decoded_buffer& d) {
    decoded_buffer* dp = &d;
    src.produce = [dp](std::size_t offset, std::span<unsigned char> o) { dp->produce(offset, o); };
  }

  // The staging job of `pb`, `captures` taken on the way (staging.hpp);
  // staged again, every buffer decoded anew without trusting LZ4 block
  // sizes, when one so trusted decoded to another size (this reader then
  // stops trusting them).
  void stage(planned_bodies& pb, std::span<const cuarrow::detail::staged_capture> captures, stream_view s) {
    if (!pb.pieces.empty()) {
      scoped_context guard(ctx.handle());
      const cuarrow::detail::timed t(timer(staging_ns));
      for (bool again = false;; again = true) {
        cuarrow::detail::staged_host_to_device(ctx.handle(), pb.pieces, stream_for(s).handle(), threads(),
                                               timer(dma_wait_ns), captures, &dmas);
        staging_jobs.fetch_add(1);
        if (again || !pb.distrusted->load()) break;
        trust_blocks.store(false);
        for (auto& [src, d] : pb.produced) {
          decoded_buffer_source in = *d;
          in.trust_blocks = false;
          produce_from(*src, pb.decoded.emplace_back(std::move(in)));
        }
      }
    }
    if (!pb.gpu_chunks.empty()) {
      const cuarrow::detail::timed t(timer(gpu_decompress_ns));
      const std::vector<std::string> failed =
          cuarrow::detail::gpu_zstd_decompress(ctx.handle(), pb.gpu_chunks, stream_for(s).handle());
      for (std::size_t k = 0; k < failed.size(); ++k) {
        if (!failed[k].empty()) throw invalid_message(pb.gpu_names[k], failed[k]);
      }
    }
    if (pb.any_gds && !pb.any_staged) {
      last_path.store(read_path::gds);
      set_reason(gds_reason);
    } else {
      last_path.store(read_path::staging);
      std::string why = why_staging(pb.any_compressed, pb.all_empty);
      if (!pb.gpu_chunks.empty()) {
        why += "; its ZSTD buffers were decompressed on the GPU by nvCOMP " + gpu_version;
      } else if (pb.any_compressed && options.gpu_decompression && !gpu_why_not.empty()) {
        why += "; decompressed on the host, not on the GPU as asked: " + gpu_why_not;
      }
      set_reason(std::move(why));
    }
  }

  std::vector<buffer> read_bodies(std::span<const body_request> requests, stream_view s) {
    planned_bodies pb = plan_bodies(requests, s);
    stage(pb, {}, s);
    return std::move(pb.bodies);
  }

  // Record batches read into device memory and validated, their bodies
  // through ONE staging job.  The batches are built over the allocations
  // first (nothing read); the offsets their cheap validation checks are
  // taken from the staging slots on their way to the device, so that the
  // checks read no device memory and see the very bytes the device got
  // (reading them from the file again could see other bytes, in a file
  // changed meanwhile).  What the slots did not carry (bodies GPUDirect
  // Storage read) is read from the device as before.
  std::vector<arrow::record_batch> read_batches(std::span<const body_request> requests,
                                                std::span<const framed_metadata> metas, const dictionary_memo& memo,
                                                stream_view s) {
    planned_bodies pb = plan_bodies(requests, s);
    std::vector<batch_body> items;
    items.reserve(requests.size());
    for (std::size_t k = 0; k < requests.size(); ++k) {
      items.push_back({requests[k].header, pb.bodies[k], read_options_for(metas[k].metadata.version, s)});
    }
    // The checks of many batches run on several threads as their building
    // does: the batches in parts, a probe cache each (one part, one cache,
    // for a few batches).
    const std::size_t parts = parts_for(requests.size(), batches_per_thread(schema));
    std::vector<arrow::detail::probe_cache> caches(parts);
    std::vector<arrow::record_batch> out;
    const auto part = [&](std::size_t p) {
      const std::size_t n = out.size();
      return std::span<const arrow::record_batch>(out).subspan(n * p / parts, n * (p + 1) / parts - n * p / parts);
    };
    {
      const cuarrow::detail::timed t(timer(build_ns));
      out = load_record_batches(items, schema, memo);
      for_each_index(
          parts, [&](std::size_t p) { request_validation_reads(part(p), schema, caches[p]); }, 1);
    }
    struct pending_read {
      std::size_t part;
      arrow::detail::probe_cache::request read;
    };
    std::vector<pending_read> reads;
    for (std::size_t p = 0; p < parts; ++p) {
      for (auto& r : caches[p].take_pending()) reads.push_back({p, std::move(r)});
    }
    std::vector<std::uint64_t> raw(reads.size(), 0);
    std::vector<std::size_t> taken;  // the reads the staging job carries
    std::vector<cuarrow::detail::staged_capture> captures;
    {
      // The pieces' device ranges, in address order, to find each read in.
      std::vector<std::pair<CUdeviceptr, CUdeviceptr>> ranges;
      ranges.reserve(pb.pieces.size());
      for (const staged_piece& p : pb.pieces) ranges.emplace_back(p.device, p.device + p.size);
      std::sort(ranges.begin(), ranges.end());
      for (std::size_t k = 0; k < reads.size(); ++k) {
        const auto& r = reads[k].read;
        if (r.buf.type() != device_type::cuda) continue;
        const CUdeviceptr at = static_cast<CUdeviceptr>(r.buf.address() + static_cast<std::uintptr_t>(r.pos));
        auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(at, ~CUdeviceptr{0}));
        if (it == ranges.begin()) continue;
        --it;
        if (at < it->first || at + static_cast<CUdeviceptr>(r.width) > it->second) continue;
        taken.push_back(k);
        captures.push_back({at, r.width, reinterpret_cast<unsigned char*>(&raw[k])});
      }
      std::sort(captures.begin(), captures.end(),
                [](const cuarrow::detail::staged_capture& a, const cuarrow::detail::staged_capture& b) {
                  return a.device < b.device;
                });
    }
    stage(pb, captures, s);
    const cuarrow::detail::timed t(timer(build_ns));
    if (!items.empty()) {
      const read_options& o = items.front().options;
      if (taken.size() == reads.size() && o.validation != arrow::validation_level::full) {
        // Every read came through the slots: no cheap check reads the
        // device.  (Full validation copies every tree to the host, in one
        // batch for all of them: below.)
        for (const std::size_t k : taken) caches[reads[k].part].supply(reads[k].read, raw[k]);
        for_each_index(
            parts, [&](std::size_t p) { validate_record_batches(part(p), o, schema, caches[p]); }, 1);
      } else {
        // Full validation, or bodies that did not pass through the slots
        // (GPUDirect Storage): one cache, so that what the checks still
        // need from the device is ONE batched read.
        arrow::detail::probe_cache cache;
        for (const std::size_t k : taken) cache.supply(reads[k].read, raw[k]);
        validate_record_batches(out, o, schema, cache);
      }
    }
    batches.fetch_add(static_cast<std::int64_t>(out.size()));
    return out;
  }

  buffer read_body(record_batch_header& h, std::int64_t body_start, std::int64_t body_length, stream_view s,
                   const std::string& where) {
    const body_request rq{&h, body_start, body_length, &where};
    return std::move(read_bodies({&rq, 1}, s).front());
  }

  read_options read_options_for(metadata_version v, stream_view s) const {
    read_options o = for_version(options.read, v);
    o.stream = stream_for(s);
    return o;
  }
};

}  // namespace detail

// ---- device_file_reader ---------------------------------------------------------------

namespace {

// Threads of their own for the metadata of many batches (not the staging
// pipeline's: another reader's job may hold it), one job at a time.
struct metadata_threads {
  std::mutex mutex;
  cuarrow::detail::worker_pool pool;
};

metadata_threads& the_metadata_threads() {
  static auto* t = new metadata_threads;
  return *t;
}

}  // namespace

namespace detail {

std::size_t parts_for(std::size_t n, std::size_t min_per_part) {
  const auto hardware = static_cast<std::size_t>(cuarrow::detail::host_cores());
  return std::max<std::size_t>(1, std::min({std::size_t{4}, hardware, n / std::max<std::size_t>(min_per_part, 1)}));
}

void for_each_index(std::size_t n, const std::function<void(std::size_t)>& body, std::size_t min_per_thread) {
  const std::size_t threads = parts_for(n, min_per_thread);
  metadata_threads& mt = the_metadata_threads();
  std::unique_lock lock(mt.mutex, std::defer_lock);
  if (threads <= 1 || !lock.try_lock()) {
    for (std::size_t k = 0; k < n; ++k) body(k);
    return;
  }
  std::vector<std::exception_ptr> error(threads);
  std::vector<std::size_t> failed_at(threads, n);
  mt.pool.run(static_cast<int>(threads), [&](int w) {
    const auto t = static_cast<std::size_t>(w);
    for (std::size_t k = n * t / threads; k < n * (t + 1) / threads; ++k) {
      try {
        body(k);
      } catch (...) {
        error[t] = std::current_exception();
        failed_at[t] = k;
        return;
      }
    }
  });
  const auto first = std::min_element(failed_at.begin(), failed_at.end());
  if (*first < n) std::rethrow_exception(error[static_cast<std::size_t>(first - failed_at.begin())]);
}

}  // namespace detail

struct device_file_reader::state : detail::file_source {
  using file_source::file_source;
  file_footer footer;
  dictionary_memo memo;

  // The metadata of the message a footer block points at, checked against
  // the block.
  detail::framed_metadata block(const file_block& b, const std::string& where, message_kind want,
                                bool on_worker = false) {
    // The footer's blocks lie inside the file (read_footer): read exactly
    // the metadata the block declares, nothing of the body.
    std::optional<detail::framed_metadata> m = metadata_at(b.offset, b.metadata_length, on_worker);
    if (!m) throw invalid_message(where, "holds the end-of-stream marker, not a message");
    detail::check_block(b, m->metadata_size, m->metadata.body_length, where);
    detail::expect_kind(m->metadata.kind(), want, where);
    return std::move(*m);
  }
};

device_file_reader::device_file_reader(std::string path, context ctx, file_read_options options)
    : state_(std::make_unique<state>(std::move(path), std::move(ctx), std::move(options))) {
  state& st = *state_;
  const std::int64_t size = st.file.size();
  const std::string where = "file \"" + st.file.path() + "\"";
  if (size < file_header_size + file_trailer_size) {
    throw invalid_message(where, num(size) + " bytes: too short for an Arrow IPC file (magic, footer)");
  }
  check_file_magic(st.read(0, file_header_size));
  const std::int32_t footer_length = read_footer_length(st.read(size - file_trailer_size, file_trailer_size), size);
  st.footer = read_footer(st.read(size - file_trailer_size - footer_length, footer_length), size);
  st.memo = dictionary_memo(st.footer.schema);
  st.project(st.footer.schema);
  for (std::size_t i = 0; i < st.footer.dictionaries.size(); ++i) {
    const file_block& b = st.footer.dictionaries[i];
    const std::string w = "file dictionary block " + std::to_string(i);
    detail::framed_metadata m = st.block(b, w, message_kind::dictionary_batch);
    auto& h = std::get<dictionary_batch_header>(m.metadata.header);
    if (st.skips(st.memo, h.id)) continue;
    const buffer body = st.read_body(h.data, b.offset + m.metadata_size, m.metadata.body_length, {}, w);
    st.memo.read(h, body, st.read_options_for(m.metadata.version, {}));
  }
}

device_file_reader::~device_file_reader() = default;
device_file_reader::device_file_reader(device_file_reader&&) noexcept = default;
device_file_reader& device_file_reader::operator=(device_file_reader&&) noexcept = default;

const schema_message& device_file_reader::schema() const noexcept { return state_->schema; }
arrow::placement device_file_reader::placement() const noexcept {
  return arrow::placement::of(device_type::cuda, state_->ctx.device_number());
}
const file_footer& device_file_reader::footer() const noexcept { return state_->footer; }
int device_file_reader::num_record_batches() const noexcept {
  return static_cast<int>(state_->footer.record_batches.size());
}
const dictionary_memo& device_file_reader::dictionaries() const noexcept { return state_->memo; }
const context& device_file_reader::get_context() const noexcept { return state_->ctx; }
std::int64_t device_file_reader::bytes_read() const noexcept { return state_->bytes_read.load(); }
read_stats device_file_reader::stats() const noexcept { return state_->stats(); }
read_path device_file_reader::last_read_path() const noexcept { return state_->last_path.load(); }
std::string device_file_reader::last_read_path_reason() const { return state_->last_reason(); }
const std::string& device_file_reader::path() const noexcept { return state_->file.path(); }

arrow::record_batch device_file_reader::read_batch(int i, stream_view s) const {
  return read_batch_with_custom_metadata(i, s).batch;
}

batch_with_metadata device_file_reader::read_batch_with_custom_metadata(int i, stream_view s) const {
  state& st = *state_;
  detail::check_batch_index(i, num_record_batches());
  const file_block& b = st.footer.record_batches[static_cast<std::size_t>(i)];
  const std::string w = "file record batch block " + std::to_string(i);
  detail::framed_metadata m = st.block(b, w, message_kind::record_batch);
  record_batch_header h = st.projected(std::get<record_batch_header>(m.metadata.header), m.metadata.version);
  const detail::body_request rq{&h, b.offset + m.metadata_size, m.metadata.body_length, &w};
  arrow::record_batch batch = std::move(st.read_batches({&rq, 1}, {&m, 1}, st.memo, s).front());
  return {std::move(batch), std::move(m.metadata.custom_metadata)};
}

std::vector<arrow::record_batch> device_file_reader::read_all(stream_view s) const {
  std::vector<int> all(static_cast<std::size_t>(num_record_batches()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return read_batches(all, s);
}

std::vector<arrow::record_batch> device_file_reader::read_batches(std::span<const int> indices, stream_view s) const {
  state& st = *state_;
  for (const int i : indices) detail::check_batch_index(i, num_record_batches());
  // Every batch's metadata first (small preads), then every body through
  // ONE staging job, then the batches built over their allocations.
  std::vector<detail::framed_metadata> metas(indices.size());
  std::vector<record_batch_header> headers(indices.size());
  std::vector<std::string> names(indices.size());
  std::vector<detail::body_request> requests;
  requests.reserve(indices.size());
  {
    const cuarrow::detail::timed t(st.timer(st.metadata_ns));
    detail::for_each_index(indices.size(), [&](std::size_t k) {
      const file_block& b = st.footer.record_batches[static_cast<std::size_t>(indices[k])];
      names[k] = "file record batch block " + std::to_string(indices[k]);
      metas[k] = st.block(b, names[k], message_kind::record_batch, /*on_worker=*/true);
      // Only the version of metas[k] is used from here on: the header is
      // moved out whole, or projected and the full one freed here, on these
      // threads, with the flatbuffer (not on the calling thread at the end).
      auto& full = std::get<record_batch_header>(metas[k].metadata.header);
      if (st.options.columns) {
        headers[k] = st.projected(full, metas[k].metadata.version);
        full = {};
      } else {
        headers[k] = std::move(full);
      }
      std::vector<std::byte>().swap(metas[k].flatbuffer);
    });
  }
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const file_block& b = st.footer.record_batches[static_cast<std::size_t>(indices[k])];
    requests.push_back({&headers[k], b.offset + metas[k].metadata_size, metas[k].metadata.body_length, &names[k]});
  }
  return st.read_batches(requests, metas, st.memo, s);
}

// ---- device_stream_reader ---------------------------------------------------------------

struct device_stream_reader::state : detail::file_source {
  using file_source::file_source;
  dictionary_memo memo;
  std::uint64_t memo_version = 0;  // bumped by every dictionary batch applied
  std::int64_t position = 0;
  bool done = false;

  // The next record batch (the dictionary batches before it applied), with
  // its message's offset in `*at`; nullopt at the end.
  std::optional<batch_with_metadata> next_batch(stream_view s, std::int64_t* at);
  // The record batches ahead, up to the next dictionary batch that is
  // applied (the batches before it are built with the dictionaries as they
  // were), the end of the stream, `most` batches, or until their bodies
  // would pass `bytes` (one batch at least): their metadata read first,
  // their bodies through ONE staging job.  The position moves past them
  // only once they are read.  When the next message is a dictionary batch
  // to apply, it is applied and the one batch after it read (next_batch).
  // A message whose metadata cannot be read ends the run before it (the
  // next run starts with it, and throws).  Empty at the end.  `*planned`:
  // the batches this run is reading, set before its reads (when they
  // fail, position() is still before them).
  run read_run(std::int64_t bytes, std::size_t most, stream_view s, std::size_t* planned);
};

device_stream_reader::device_stream_reader(std::string path, context ctx, file_read_options options)
    : state_(std::make_unique<state>(std::move(path), std::move(ctx), std::move(options))) {
  state& st = *state_;
  std::optional<detail::framed_metadata> m = st.metadata_at(0);
  if (!m) throw invalid_message("stream", "empty: no schema message");
  if (m->metadata.kind() != message_kind::schema) {
    throw invalid_message("stream", std::string("starts with a ") + detail::kind_name(m->metadata.kind()) +
                                        " message; a stream starts with its Schema");
  }
  const auto& schema = std::get<schema_message>(m->metadata.header);
  st.memo = dictionary_memo(schema);
  st.project(schema);
  st.position = m->metadata_size + m->metadata.body_length;
}

device_stream_reader::~device_stream_reader() = default;
device_stream_reader::device_stream_reader(device_stream_reader&&) noexcept = default;
device_stream_reader& device_stream_reader::operator=(device_stream_reader&&) noexcept = default;

const schema_message& device_stream_reader::schema() const noexcept { return state_->schema; }
arrow::placement device_stream_reader::placement() const noexcept {
  return arrow::placement::of(device_type::cuda, state_->ctx.device_number());
}
const dictionary_memo& device_stream_reader::dictionaries() const noexcept { return state_->memo; }
const context& device_stream_reader::get_context() const noexcept { return state_->ctx; }
std::int64_t device_stream_reader::position() const noexcept { return state_->position; }
std::int64_t device_stream_reader::bytes_read() const noexcept { return state_->bytes_read.load(); }
read_stats device_stream_reader::stats() const noexcept { return state_->stats(); }
read_path device_stream_reader::last_read_path() const noexcept { return state_->last_path.load(); }
std::string device_stream_reader::last_read_path_reason() const { return state_->last_reason(); }
const std::string& device_stream_reader::path() const noexcept { return state_->file.path(); }

std::optional<arrow::record_batch> device_stream_reader::read_next(stream_view s) {
  std::optional<batch_with_metadata> b = read_next_with_custom_metadata(s);
  if (!b) return std::nullopt;
  return std::move(b->batch);
}

std::optional<batch_with_metadata> device_stream_reader::read_next_with_custom_metadata(stream_view s) {
  std::int64_t at = 0;
  return state_->next_batch(s, &at);
}

std::optional<batch_with_metadata> device_stream_reader::state::next_batch(stream_view s, std::int64_t* at) {
  while (!done) {
    const std::int64_t where = position;
    std::optional<detail::framed_metadata> m = metadata_at(where);
    if (!m) {
      done = true;
      return std::nullopt;
    }
    const std::int64_t body_start = where + m->metadata_size;
    const std::string w = detail::message_at(where);
    switch (m->metadata.kind()) {
      case message_kind::dictionary_batch: {
        auto& h = std::get<dictionary_batch_header>(m->metadata.header);
        if (!skips(memo, h.id)) {
          const buffer body = read_body(h.data, body_start, m->metadata.body_length, s, w);
          memo.read(h, body, read_options_for(m->metadata.version, s));
          ++memo_version;
        }
        break;
      }
      case message_kind::record_batch: {
        record_batch_header h = projected(std::get<record_batch_header>(m->metadata.header), m->metadata.version);
        const detail::body_request rq{&h, body_start, m->metadata.body_length, &w};
        arrow::record_batch batch = std::move(read_batches({&rq, 1}, {&*m, 1}, memo, s).front());
        batch_with_metadata out{std::move(batch), std::move(m->metadata.custom_metadata)};
        position = body_start + m->metadata.body_length;
        *at = where;
        return out;
      }
      default:
        throw invalid_message(w, std::string("a ") + detail::kind_name(m->metadata.kind()) +
                                     " message inside a stream (only dictionary and record batches follow the schema)");
    }
    position = body_start + m->metadata.body_length;
  }
  return std::nullopt;
}

device_stream_reader::run device_stream_reader::state::read_run(std::int64_t bytes, std::size_t most, stream_view s,
                                                                std::size_t* planned) {
  run out;
  *planned = 0;
  if (done) return out;
  std::vector<detail::framed_metadata> metas;
  std::int64_t at = position;
  std::int64_t in_run = 0;
  bool ended = false;
  while (metas.size() < most) {
    std::optional<detail::framed_metadata> m;
    try {
      m = metadata_at(at);
    } catch (const error&) {
      if (metas.empty()) throw;
      break;  // the run ends before it: the next run meets this message first, and its error
    }
    if (!m) {
      ended = true;
      break;
    }
    const message_kind k = m->metadata.kind();
    if (k == message_kind::dictionary_batch && skips(memo, std::get<dictionary_batch_header>(m->metadata.header).id)) {
      at += m->metadata_size + m->metadata.body_length;  // not needed by the chosen columns
      continue;
    }
    if (k != message_kind::record_batch) break;  // a dictionary, or a message next_batch refuses
    if (!metas.empty() && in_run + m->metadata.body_length > bytes) break;
    out.offsets.push_back(at);
    at += m->metadata_size + m->metadata.body_length;
    in_run += m->metadata.body_length;
    metas.push_back(std::move(*m));
  }
  if (metas.empty()) {
    if (ended) {
      done = true;
      return out;
    }
    // One message at a time: a dictionary applied, then the batch after it.
    *planned = 1;
    std::int64_t where = 0;
    std::optional<batch_with_metadata> b = next_batch(s, &where);
    if (b) {
      out.batches.push_back(std::move(b->batch));
      out.offsets.push_back(where);
    }
    return out;
  }
  *planned = metas.size();
  std::vector<record_batch_header> headers;
  std::vector<std::string> names;
  headers.reserve(metas.size());
  names.reserve(metas.size());
  std::vector<detail::body_request> requests;
  for (std::size_t k = 0; k < metas.size(); ++k) {
    headers.push_back(projected(std::get<record_batch_header>(metas[k].metadata.header), metas[k].metadata.version));
    names.push_back(detail::message_at(out.offsets[k]));
  }
  for (std::size_t k = 0; k < metas.size(); ++k) {
    requests.push_back(
        {&headers[k], out.offsets[k] + metas[k].metadata_size, metas[k].metadata.body_length, &names[k]});
  }
  out.batches = read_batches(requests, metas, memo, s);
  position = at;
  if (ended) done = true;
  return out;
}

std::vector<arrow::record_batch> device_stream_reader::read_all(stream_view s) {
  std::vector<arrow::record_batch> out;
  std::size_t planned = 0;
  for (;;) {
    run r = state_->read_run(kStreamJobBytes, std::numeric_limits<std::size_t>::max(), s, &planned);
    if (r.batches.empty()) break;  // the end (read_run set done)
    for (arrow::record_batch& b : r.batches) out.push_back(std::move(b));
  }
  return out;
}

device_stream_reader::run device_stream_reader::read_run(std::int64_t bytes, std::size_t most, stream_view s,
                                                         std::size_t* planned) {
  return state_->read_run(bytes, most, s, planned);
}

std::uint64_t device_stream_reader::dictionaries_version() const noexcept { return state_->memo_version; }

void device_stream_reader::rewind(std::int64_t position, dictionary_memo memo) {
  state_->position = position;
  state_->memo = std::move(memo);
  ++state_->memo_version;
  state_->done = false;
}

}  // namespace cuarrow::ipc
