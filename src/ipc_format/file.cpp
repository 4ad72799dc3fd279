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
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <utility>
#include <variant>

#include "copy_sources.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/gds.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "gds_copy.hpp"
#include "message_io.hpp"
#include "runtime/runtime.hpp"
#include "staging.hpp"

namespace cuarrow::ipc {
namespace {

std::string num(std::int64_t v) { return std::to_string(v); }
std::int64_t pad8(std::int64_t n) { return (n + 7) / 8 * 8; }

// Buffers of one body closer than this in the file are read as one range
// (the padding between them with them): fewer reads and DMAs.
constexpr std::int64_t kJoinGap = 64;

}  // namespace

const char* to_string(read_path_preference p) noexcept {
  switch (p) {
    case read_path_preference::automatic: return "automatic";
    case read_path_preference::staging: return "staging";
    case read_path_preference::gds: return "gds";
  }
  return "unknown";
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

// One compressed buffer decompressed into the pipeline's slots.  A buffer
// that fits in a slot is decompressed there in one call; a larger one is
// asked for in parts (one per chunk), decompressed once into host scratch
// memory and copied out part by part.
struct decoded_buffer {
  compression_codec codec{};
  std::span<const std::byte> framed;
  std::size_t size = 0;
  std::string where;
  std::once_flag once;
  std::vector<std::byte> scratch;
  std::atomic<std::size_t> left{0};

  void produce(std::size_t offset, std::span<unsigned char> out) {
    const std::span<std::byte> dst(reinterpret_cast<std::byte*>(out.data()), out.size());
    if (offset == 0 && out.size() == size) {
      decompress(codec, framed, dst, where);
      return;
    }
    std::call_once(once, [&] {
      scratch.resize(size);
      decompress(codec, framed, scratch, where);
    });
    std::memcpy(out.data(), scratch.data() + offset, out.size());
    if (left.fetch_sub(out.size()) == out.size()) std::vector<std::byte>().swap(scratch);  // the last part
  }
};

// What both readers share: the open file, the context, the options, the
// projection and the counters.
struct file_source {
  file_source(std::string path, context c, file_read_options o)
      : file(std::move(path)), ctx(std::move(c)), options(std::move(o)) {
    if (options.io_threads < 0) throw invalid_argument("file_read_options: io_threads must be >= 0");
    if (options.max_decompressed_buffer_bytes < 0) {
      throw invalid_argument("file_read_options: max_decompressed_buffer_bytes must be >= 0");
    }
    options.read.decompress = nullptr;  // decompressed in the pipeline, never by the body reader
    choose_path();
  }

  open_file file;
  context ctx;
  file_read_options options;
  std::atomic<std::int64_t> bytes_read{0};
  std::atomic<read_path> last_path{read_path::none};
  // GPUDirect Storage: the file registered with cuFile when this reader
  // uses it, how it runs; why the staging pipeline runs otherwise.  After a
  // cuFile failure `gds_failed` is set and `fallback` says what failed.
  std::unique_ptr<cuarrow::detail::gds_file> gds;
  std::string gds_reason;
  std::string staging_reason;
  std::atomic<bool> gds_failed{false};
  mutable std::mutex reason_mutex;  // guards the two below
  std::string fallback;
  std::string reason;  // last_read_path_reason()
  // Set by project(): the full schema, the one returned, the dictionary ids
  // the chosen columns need.
  schema_message full_schema;
  schema_message schema;
  std::set<std::int64_t> needed_dictionaries;

  stream_view stream_for(stream_view s) const { return s.is_default() ? options.read.stream : s; }

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
      return "the body is compressed: it is decompressed on the host, so it travels through the staging pipeline";
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

  std::optional<framed_metadata> metadata_at(std::int64_t offset, std::int64_t first_read = default_first_read) {
    return read_framed_metadata([this](std::int64_t at, std::int64_t n) { return read(at, n); }, offset, file.size(),
                                first_read);
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
        throw invalid_argument("file_read_options: column " + std::to_string(c) + " of a schema of " +
                               std::to_string(fields.size()) + " fields");
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

  // `h` restricted to the chosen columns (nodes, buffers, variadic counts of
  // each, in the chosen order).
  record_batch_header projected(const record_batch_header& h, metadata_version v) const {
    if (!options.columns) return h;
    const std::vector<column_span> spans = column_spans(h, full_schema, v);
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

  // Reads the buffers `h` names of the body at file offset `body_start`
  // (`body_length` bytes) into ONE device allocation, and rewrites `h` to
  // describe that allocation (uncompressed, packed, 8-byte aligned).
  buffer read_body(record_batch_header& h, std::int64_t body_start, std::int64_t body_length, stream_view s,
                   const std::string& where) {
    check_body_ranges(h, body_length);
    // Runs of the file: neighbouring buffers (in header order) read as one.
    struct run {
      std::int64_t file_start = 0, file_end = 0;  // in the body
      std::int64_t at = 0;                        // where it lands: the device body, or `framed` when compressed
    };
    std::vector<run> runs;
    std::vector<std::int64_t> run_of(h.buffers.size(), -1);
    std::int64_t length = 0;
    for (std::size_t i = 0; i < h.buffers.size(); ++i) {
      const body_range r = h.buffers[i];
      if (r.length == 0) continue;
      if (runs.empty() || r.offset < runs.back().file_end || r.offset - runs.back().file_end > kJoinGap) {
        runs.push_back(run{r.offset, r.offset, pad8(length)});
      }
      runs.back().file_end = r.offset + r.length;
      run_of[i] = static_cast<std::int64_t>(runs.size() - 1);
      length = runs.back().at + (runs.back().file_end - runs.back().file_start);
    }
    auto placed = [&](std::size_t i) {  // where buffer i lies in its run's destination
      const run& u = runs[static_cast<std::size_t>(run_of[i])];
      return u.at + (h.buffers[i].offset - u.file_start);
    };

    std::deque<piece_source> sources;  // stable addresses for the pieces
    std::vector<std::unique_ptr<decoded_buffer>> decoded;
    std::vector<std::byte> framed;  // compressed bodies: the framed buffers, on the host
    struct target {
      std::int64_t at = 0;
      std::int64_t size = 0;
      const piece_source* source = nullptr;
    };
    std::vector<target> targets;
    std::vector<body_range> out(h.buffers.size());
    if (!h.compression) {
      for (const run& u : runs) {
        piece_source& src = sources.emplace_back();
        src.fd = file.fd();
        src.path = file.path();
        src.file_offset = body_start + u.file_start;
        src.bytes_read = &bytes_read;
        targets.push_back(target{u.at, u.file_end - u.file_start, &src});
      }
      for (std::size_t i = 0; i < h.buffers.size(); ++i) {
        out[i] = run_of[i] < 0 ? body_range{} : body_range{placed(i), h.buffers[i].length};
      }
    } else {
      framed.resize(static_cast<std::size_t>(length));
      for (const run& u : runs) {
        read_file_exactly(file.fd(), file.path(), body_start + u.file_start,
                          {reinterpret_cast<unsigned char*>(framed.data() + u.at),
                           static_cast<std::size_t>(u.file_end - u.file_start)},
                          &bytes_read);
      }
      length = 0;
      for (std::size_t i = 0; i < h.buffers.size(); ++i) {
        if (run_of[i] < 0) continue;
        const std::string name = where + " buffers[" + std::to_string(i) + "]";
        const std::span<const std::byte> bytes(framed.data() + placed(i),
                                               static_cast<std::size_t>(h.buffers[i].length));
        const std::int64_t size = decompressed_size(bytes, options.max_decompressed_buffer_bytes, name);
        out[i] = body_range{pad8(length), size};
        if (size == 0) continue;
        auto d = std::make_unique<decoded_buffer>();
        d->codec = *h.compression;
        d->framed = bytes;
        d->size = static_cast<std::size_t>(size);
        d->left = d->size;
        d->where = name;
        piece_source& src = sources.emplace_back();
        src.what = piece_source::kind::produce;
        decoded_buffer* dp = d.get();
        src.produce = [dp](std::size_t offset, std::span<unsigned char> o) { dp->produce(offset, o); };
        decoded.push_back(std::move(d));
        targets.push_back(target{out[i].offset, size, &src});
        length = out[i].offset + size;
      }
    }

    const stream_view sv = stream_for(s);
    buffer body = allocate_device(ctx, length, sv);
    if (!h.compression && gds && !gds_failed.load() && !targets.empty()) {
      std::vector<cuarrow::detail::gds_piece> pieces;
      pieces.reserve(targets.size());
      for (std::size_t k = 0; k < targets.size(); ++k) {
        pieces.push_back({static_cast<std::size_t>(targets[k].at), static_cast<std::size_t>(targets[k].size),
                          targets[k].source->file_offset});
      }
      if (read_with_gds(body, pieces, sv)) {
        last_path.store(read_path::gds);
        set_reason(gds_reason);
        h.buffers = std::move(out);
        return body;
      }
    }
    if (!targets.empty()) {
      std::vector<staged_piece> pieces;
      pieces.reserve(targets.size());
      for (const target& t : targets) {
        staged_piece p;
        p.device = static_cast<CUdeviceptr>(body.address() + static_cast<std::uintptr_t>(t.at));
        p.size = static_cast<std::size_t>(t.size);
        p.merge_with_previous = !pieces.empty();  // the padding between them travels in the same DMA
        p.source = t.source;
        pieces.push_back(p);
      }
      scoped_context guard(ctx.handle());
      cuarrow::detail::staged_host_to_device(ctx.handle(), pieces, sv.handle(), options.io_threads);
    }
    last_path.store(read_path::staging);
    set_reason(why_staging(h.compression.has_value(), targets.empty()));
    h.buffers = std::move(out);
    h.compression.reset();
    return body;
  }

  read_options read_options_for(metadata_version v, stream_view s) const {
    read_options o = for_version(options.read, v);
    o.stream = stream_for(s);
    return o;
  }
};

}  // namespace detail

// ---- device_file_reader ---------------------------------------------------------------

struct device_file_reader::state : detail::file_source {
  using file_source::file_source;
  file_footer footer;
  dictionary_memo memo;

  // The metadata of the message a footer block points at, checked against
  // the block.
  detail::framed_metadata block(const file_block& b, const std::string& where, message_kind want) {
    // The footer's blocks lie inside the file (read_footer): read exactly
    // the metadata the block declares, nothing of the body.
    std::optional<detail::framed_metadata> m = metadata_at(b.offset, b.metadata_length);
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
const file_footer& device_file_reader::footer() const noexcept { return state_->footer; }
int device_file_reader::num_record_batches() const noexcept {
  return static_cast<int>(state_->footer.record_batches.size());
}
const dictionary_memo& device_file_reader::dictionaries() const noexcept { return state_->memo; }
std::int64_t device_file_reader::bytes_read() const noexcept { return state_->bytes_read.load(); }
read_path device_file_reader::last_read_path() const noexcept { return state_->last_path.load(); }
std::string device_file_reader::last_read_path_reason() const { return state_->last_reason(); }
const std::string& device_file_reader::path() const noexcept { return state_->file.path(); }

arrow::record_batch device_file_reader::read_batch(int i, stream_view s) const {
  return read_batch_with_custom_metadata(i, s).batch;
}

batch_with_metadata device_file_reader::read_batch_with_custom_metadata(int i, stream_view s) const {
  state& st = *state_;
  if (i < 0 || i >= num_record_batches()) {
    throw out_of_range("record batch " + std::to_string(i) + " of a file of " + std::to_string(num_record_batches()));
  }
  const file_block& b = st.footer.record_batches[static_cast<std::size_t>(i)];
  const std::string w = "file record batch block " + std::to_string(i);
  detail::framed_metadata m = st.block(b, w, message_kind::record_batch);
  record_batch_header h = st.projected(std::get<record_batch_header>(m.metadata.header), m.metadata.version);
  const buffer body = st.read_body(h, b.offset + m.metadata_size, m.metadata.body_length, s, w);
  return {read_record_batch(h, st.schema, body, st.memo, st.read_options_for(m.metadata.version, s)),
          std::move(m.metadata.custom_metadata)};
}

std::vector<arrow::record_batch> device_file_reader::read_all(stream_view s) const {
  std::vector<arrow::record_batch> out;
  for (int i = 0; i < num_record_batches(); ++i) out.push_back(read_batch(i, s));
  return out;
}

// ---- device_stream_reader ---------------------------------------------------------------

struct device_stream_reader::state : detail::file_source {
  using file_source::file_source;
  dictionary_memo memo;
  std::int64_t position = 0;
  bool done = false;
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
const dictionary_memo& device_stream_reader::dictionaries() const noexcept { return state_->memo; }
std::int64_t device_stream_reader::position() const noexcept { return state_->position; }
std::int64_t device_stream_reader::bytes_read() const noexcept { return state_->bytes_read.load(); }
read_path device_stream_reader::last_read_path() const noexcept { return state_->last_path.load(); }
std::string device_stream_reader::last_read_path_reason() const { return state_->last_reason(); }
const std::string& device_stream_reader::path() const noexcept { return state_->file.path(); }

std::optional<arrow::record_batch> device_stream_reader::read_next(stream_view s) {
  std::optional<batch_with_metadata> b = read_next_with_custom_metadata(s);
  if (!b) return std::nullopt;
  return std::move(b->batch);
}

std::optional<batch_with_metadata> device_stream_reader::read_next_with_custom_metadata(stream_view s) {
  state& st = *state_;
  while (!st.done) {
    const std::int64_t where = st.position;
    std::optional<detail::framed_metadata> m = st.metadata_at(where);
    if (!m) {
      st.done = true;
      return std::nullopt;
    }
    const std::int64_t body_start = where + m->metadata_size;
    const std::string w = detail::message_at(where);
    switch (m->metadata.kind()) {
      case message_kind::dictionary_batch: {
        auto& h = std::get<dictionary_batch_header>(m->metadata.header);
        if (!st.skips(st.memo, h.id)) {
          const buffer body = st.read_body(h.data, body_start, m->metadata.body_length, s, w);
          st.memo.read(h, body, st.read_options_for(m->metadata.version, s));
        }
        break;
      }
      case message_kind::record_batch: {
        record_batch_header h = st.projected(std::get<record_batch_header>(m->metadata.header), m->metadata.version);
        const buffer body = st.read_body(h, body_start, m->metadata.body_length, s, w);
        batch_with_metadata out{
            read_record_batch(h, st.schema, body, st.memo, st.read_options_for(m->metadata.version, s)),
            std::move(m->metadata.custom_metadata)};
        st.position = body_start + m->metadata.body_length;
        return out;
      }
      default:
        throw invalid_message(w, std::string("a ") + detail::kind_name(m->metadata.kind()) +
                                     " message inside a stream (only dictionary and record batches follow the schema)");
    }
    st.position = body_start + m->metadata.body_length;
  }
  return std::nullopt;
}

std::vector<arrow::record_batch> device_stream_reader::read_all(stream_view s) {
  std::vector<arrow::record_batch> out;
  while (std::optional<arrow::record_batch> b = read_next(s)) out.push_back(std::move(*b));
  return out;
}

}  // namespace cuarrow::ipc
