// Compressed IPC bodies: the BUFFER framing over liblz4's frame API and
// libzstd (include/cuarrow/ipc/codec.hpp).  What Arrow C++ does, read from
// cpp/src/arrow/ipc/writer.cc and cpp/src/arrow/util/compression_*.cc:
// empty buffers are left empty; every other buffer is compressed (level 1
// for both codecs, LZ4 frame preferences all defaults: 64 KiB blocks, no
// checksums, no content size) unless min_space_savings says to store it
// with length -1; its reader takes exactly one LZ4 frame per buffer, and
// any number of ZSTD frames (ZSTD_decompress).  Buffers above 4 MiB are
// compressed here in chunks, in parallel (compress_all): one LZ4 frame of
// independent 4 MiB blocks, or one ZSTD frame per chunk.
#include "cuarrow/ipc/codec.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#if CUARROW_HAVE_LZ4
#include <lz4.h>
#include <lz4frame.h>
#endif
#if CUARROW_HAVE_ZSTD
#include <zstd.h>
#include <zstd_errors.h>
#endif

#include "codec_parts.hpp"
#include "worker_pool.hpp"

namespace cuarrow::ipc {
namespace {

constexpr int default_level = 1;

[[noreturn]] void bad(std::string_view where, std::string reason) {
  throw invalid_message(std::string(where), std::move(reason));
}

[[noreturn]] void missing(compression_codec codec) {
  if (codec == compression_codec::zstd) {
    throw error("this cuarrow was built without zstd (libzstd-dev); rebuild with it to read or write ZSTD bodies");
  }
  throw error("this cuarrow was built without lz4 (liblz4-dev); rebuild with it to read or write LZ4_FRAME bodies");
}

void check_codec(compression_codec codec) {
  if (codec != compression_codec::lz4_frame && codec != compression_codec::zstd) {
    throw invalid_argument("unknown compression codec " + std::to_string(static_cast<int>(codec)));
  }
  if (!codec_available(codec)) missing(codec);
}

std::int64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return static_cast<std::int64_t>(v);
}

void store_le64(std::byte* p, std::int64_t value) {
  auto v = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i, v >>= 8) p[i] = static_cast<std::byte>(v & 0xff);
}

std::string size_text(std::size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// A one-byte place for codecs that want a valid pointer even for an empty
// output (zstd before 1.4.1 did).
[[maybe_unused]] std::byte* nonnull(std::span<std::byte> out) {
  static thread_local std::byte scratch;
  return out.empty() ? &scratch : out.data();
}

// ---- LZ4 frame ---------------------------------------------------------------

#if CUARROW_HAVE_LZ4
// One decompression context per thread, reset before each buffer and
// dropped after a failure: liblz4 1.9.4's LZ4F_resetDecompressionContext
// keeps the bytes still expected of an abandoned frame that declared its
// content size, and the next frame without one then fails with
// ERROR_frameSize_wrong (found by fuzz/ipc_codec.cpp).
struct lz4_dctx {
  LZ4F_dctx* ctx = nullptr;
  ~lz4_dctx() { drop(); }
  void drop() noexcept {
    if (ctx) LZ4F_freeDecompressionContext(ctx);
    ctx = nullptr;
  }
  LZ4F_dctx* get() {
    if (!ctx) {
      const LZ4F_errorCode_t rc = LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION);
      if (LZ4F_isError(rc)) {
        ctx = nullptr;
        throw error(std::string("LZ4F_createDecompressionContext failed: ") + LZ4F_getErrorName(rc));
      }
    } else {
      LZ4F_resetDecompressionContext(ctx);
    }
    return ctx;
  }
};

void lz4_decode(LZ4F_dctx* ctx, std::span<const std::byte> in, std::span<std::byte> out, std::string_view where) {
  LZ4F_decompressOptions_t options{};
  options.stableDst = 1;  // one output buffer, never moved: no internal copies
  std::size_t in_pos = 0;
  std::size_t out_pos = 0;
  for (;;) {
    std::size_t src_size = in.size() - in_pos;
    std::size_t dst_size = out.size() - out_pos;
    const std::size_t hint =
        LZ4F_decompress(ctx, nonnull(out) + out_pos, &dst_size, in.data() + in_pos, &src_size, &options);
    if (LZ4F_isError(hint)) {
      bad(where, "corrupted LZ4 frame (" + std::to_string(in_pos) + " of its " + size_text(in.size()) +
                     " read before the error): " + LZ4F_getErrorName(hint));
    }
    in_pos += src_size;
    out_pos += dst_size;
    if (hint == 0) break;  // the frame is complete
    if (src_size == 0 && dst_size == 0) {
      if (out_pos == out.size()) {
        // Full: does the frame hold more than declared, or does it end early?
        std::byte probe[64];
        std::size_t probe_size = sizeof probe;
        std::size_t rest = in.size() - in_pos;
        LZ4F_decompressOptions_t moving{};
        const std::size_t more = LZ4F_decompress(ctx, probe, &probe_size, in.data() + in_pos, &rest, &moving);
        if (!LZ4F_isError(more) && probe_size > 0) {
          bad(where, "the LZ4 frame holds more than the " + size_text(out.size()) + " the buffer declares");
        }
      }
      bad(where, "the LZ4 frame is truncated: it ends after " + size_text(in.size()) + ", " + std::to_string(out_pos) +
                     " of the declared " + size_text(out.size()) + " decompressed");
    }
  }
  if (in_pos != in.size()) {
    bad(where, std::to_string(in.size() - in_pos) + " trailing bytes after the LZ4 frame (one frame per buffer)");
  }
  if (out_pos != out.size()) {
    bad(where, "the LZ4 frame holds " + size_text(out_pos) + ", the buffer declares " + size_text(out.size()));
  }
}

void lz4_decompress(std::span<const std::byte> in, std::span<std::byte> out, std::string_view where) {
  static thread_local lz4_dctx dctx;
  try {
    lz4_decode(dctx.get(), in, out, where);
  } catch (...) {
    dctx.drop();
    throw;
  }
}

LZ4F_preferences_t lz4_preferences(int level) {
  LZ4F_preferences_t prefs;
  std::memset(&prefs, 0, sizeof prefs);
  prefs.compressionLevel = level;
  return prefs;
}

// A buffer larger than one chunk: one frame of independent 4 MiB blocks
// (one chunk each), no checksums, no content size.
LZ4F_preferences_t lz4_chunked_preferences(int level) {
  LZ4F_preferences_t prefs = lz4_preferences(level);
  prefs.frameInfo.blockSizeID = LZ4F_max4MB;
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  return prefs;
}
#endif

// A chunk's LZ4 frame as LZ4F_compressFrame writes it with
// lz4_chunked_preferences: the 7-byte header (magic, FLG, BD, header
// checksum), the chunk's one block, the 4-byte end mark.
constexpr std::size_t lz4_chunk_header = 7;
constexpr std::size_t lz4_end_mark = 4;

// ---- ZSTD --------------------------------------------------------------------

#if CUARROW_HAVE_ZSTD
struct zstd_dctx {
  ZSTD_DCtx* ctx = nullptr;
  ~zstd_dctx() { ZSTD_freeDCtx(ctx); }
  ZSTD_DCtx* get() {
    if (!ctx && !(ctx = ZSTD_createDCtx())) throw error("ZSTD_createDCtx failed");
    return ctx;
  }
};

struct zstd_cctx {
  ZSTD_CCtx* ctx = nullptr;
  ~zstd_cctx() { ZSTD_freeCCtx(ctx); }
  ZSTD_CCtx* get() {
    if (!ctx && !(ctx = ZSTD_createCCtx())) throw error("ZSTD_createCCtx failed");
    return ctx;
  }
};

void zstd_decompress(std::span<const std::byte> in, std::span<std::byte> out, std::string_view where) {
  static thread_local zstd_dctx dctx;
  const std::size_t n = ZSTD_decompressDCtx(dctx.get(), nonnull(out), out.size(), in.data(), in.size());
  if (ZSTD_isError(n)) {
    switch (ZSTD_getErrorCode(n)) {
      case ZSTD_error_dstSize_tooSmall:
        bad(where, "the ZSTD frame holds more than the " + size_text(out.size()) + " the buffer declares");
      case ZSTD_error_srcSize_wrong:
        bad(where, "the ZSTD frame is truncated (" + size_text(in.size()) + "): " + ZSTD_getErrorName(n));
      default: bad(where, std::string("corrupted ZSTD frame: ") + ZSTD_getErrorName(n));
    }
  }
  if (n != out.size()) {
    bad(where, "the ZSTD frame holds " + size_text(n) + ", the buffer declares " + size_text(out.size()));
  }
}
#endif

// ---- threads -----------------------------------------------------------------

// The codecs' own pool (not the staging pipeline's: the file pipeline may
// call decompress_all from a staging job), one batch at a time.
struct codec_threads {
  std::mutex mutex;
  cuarrow::detail::worker_pool pool;
};

codec_threads& the_threads() {
  static auto* t = new codec_threads;
  return *t;
}

// Below this many bytes in all a batch runs on the caller: waking threads
// costs more than it saves.
constexpr std::size_t parallel_min_bytes = std::size_t{1} << 20;

// Runs one(i) for i in [0, count) on up to `threads` threads; returns the
// exception of the lowest failing index (null if none).
template <class One>
std::pair<std::size_t, std::exception_ptr> run_jobs(std::size_t count, std::size_t bytes, int threads, One one) {
  if (threads < 0) throw invalid_argument("threads must be 0 (automatic) or more, not " + std::to_string(threads));
  if (threads == 0) {
    threads = std::clamp(cuarrow::detail::host_cores(), 1, 16);
  }
  threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(threads), count));
  if (bytes < parallel_min_bytes) threads = 1;

  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> first_failed{std::numeric_limits<std::size_t>::max()};
  std::mutex error_mutex;
  std::exception_ptr failure;
  std::size_t error_index = std::numeric_limits<std::size_t>::max();
  const std::function<void(int)> work = [&](int) {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      // Jobs after a failure in order need not run.
      if (i >= count || i > first_failed.load()) return;
      try {
        one(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (i < error_index) {
          error_index = i;
          failure = std::current_exception();
          first_failed.store(i);
        }
      }
    }
  };
  if (threads <= 1) {
    work(0);
  } else {
    codec_threads& t = the_threads();
    std::lock_guard lock(t.mutex);
    t.pool.run(threads, work);
  }
  return {error_index, failure};
}

}  // namespace

// invalid_message is declared with the metadata (format.hpp).

const char* to_string(compression_codec codec) noexcept {
  switch (codec) {
    case compression_codec::lz4_frame: return "lz4_frame";
    case compression_codec::zstd: return "zstd";
  }
  return "unknown";
}

compression_codec compression_codec_of(std::string_view name) {
  if (name == "lz4" || name == "lz4_frame") return compression_codec::lz4_frame;
  if (name == "zstd") return compression_codec::zstd;
  throw invalid_argument("compression must be \"lz4\" (or \"lz4_frame\") or \"zstd\", not \"" + std::string(name) +
                         "\"");
}

bool codec_available(compression_codec codec) noexcept {
  switch (codec) {
    case compression_codec::lz4_frame: return CUARROW_HAVE_LZ4 != 0;
    case compression_codec::zstd: return CUARROW_HAVE_ZSTD != 0;
  }
  return false;
}

std::vector<compression_codec> available_codecs() {
  std::vector<compression_codec> out;
  for (auto c : {compression_codec::lz4_frame, compression_codec::zstd}) {
    if (codec_available(c)) out.push_back(c);
  }
  return out;
}

std::int64_t decompressed_size(std::span<const std::byte> framed, std::int64_t limit, std::string_view where) {
  if (framed.empty()) return 0;
  if (framed.size() < static_cast<std::size_t>(frame_prefix_bytes)) {
    bad(where,
        "a compressed buffer of " + size_text(framed.size()) + " is shorter than its 8-byte uncompressed length");
  }
  std::int64_t size = load_le64(framed.data());
  if (size == stored_uncompressed) {
    size = static_cast<std::int64_t>(framed.size()) - frame_prefix_bytes;
  } else if (size < 0) {
    bad(where, "uncompressed length " + std::to_string(size) + " is negative (only -1, stored uncompressed, is)");
  }
  if (size > limit) {
    bad(where, "uncompressed length " + std::to_string(size) + " is above the limit of " + std::to_string(limit));
  }
  return size;
}

std::int64_t zstd_frame_content_size(std::span<const std::byte> frame) noexcept {
#if CUARROW_HAVE_ZSTD
  if (frame.empty()) return -1;
  const unsigned long long n = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR ||
      n > static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max())) {
    return -1;
  }
  return static_cast<std::int64_t>(n);
#else
  (void)frame;
  return -1;
#endif
}

namespace {

#if CUARROW_HAVE_ZSTD
// The frames of a ZSTD buffer's bytes [pos, end), each stating its size,
// adding up to no more than `total`; false when they do not.
bool zstd_units(std::span<const std::byte> framed, std::size_t pos, std::uint64_t total,
                std::vector<detail::frame_unit>& units) {
  std::uint64_t out = 0;
  while (pos < framed.size()) {
    const std::size_t left = framed.size() - pos;
    const std::size_t in = ZSTD_findFrameCompressedSize(framed.data() + pos, left);
    if (ZSTD_isError(in) || in == 0 || in > left) return false;
    const unsigned long long n = ZSTD_getFrameContentSize(framed.data() + pos, left);
    if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || n > total - out) return false;
    units.push_back(detail::frame_unit{pos, in, static_cast<std::int64_t>(n), static_cast<std::size_t>(n)});
    pos += in;
    out += n;
  }
  return true;
}
#endif

#if CUARROW_HAVE_LZ4
// LZ4 frame descriptor bits (the FLG byte) and the end mark.
constexpr unsigned lz4_independent = 0x20, lz4_block_checksum = 0x10, lz4_content_checksum = 0x04, lz4_dict_id = 0x01;
constexpr std::uint32_t lz4_uncompressed_block = 0x80000000U;

std::uint32_t load_le32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint32_t>(p[i]);
  return v;
}

// The header of an LZ4 frame at `pos` when the frame is one of independent
// blocks without checksums or dictionary, stating no other size than
// `total` (when it states one): its length and its largest block's size.
struct lz4_header {
  std::size_t length = 0;
  std::size_t block_bytes = 0;
};
std::optional<lz4_header> lz4_independent_header(std::span<const std::byte> framed, std::size_t pos,
                                                 std::uint64_t total) {
  if (pos > framed.size() || framed.size() - pos < 7 || load_le32(framed.data() + pos) != 0x184D2204U) {
    return std::nullopt;
  }
  const auto flg = std::to_integer<unsigned>(framed[pos + 4]);
  if ((flg & lz4_independent) == 0 || (flg & (lz4_block_checksum | lz4_content_checksum | lz4_dict_id)) != 0) {
    return std::nullopt;
  }
  // The descriptor, checked (its header checksum too) by liblz4 itself.
  LZ4F_dctx* ctx = nullptr;
  if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return std::nullopt;
  LZ4F_frameInfo_t info{};
  std::size_t header = framed.size() - pos;
  const std::size_t got = LZ4F_getFrameInfo(ctx, &info, framed.data() + pos, &header);
  LZ4F_freeDecompressionContext(ctx);
  if (LZ4F_isError(got) || header == 0 || header > framed.size() - pos) return std::nullopt;
  if (info.contentSize != 0 && info.contentSize != total) return std::nullopt;
  switch (info.blockSizeID) {
    case LZ4F_max64KB: return lz4_header{header, std::size_t{64} << 10};
    case LZ4F_max256KB: return lz4_header{header, std::size_t{256} << 10};
    case LZ4F_max1MB: return lz4_header{header, std::size_t{1} << 20};
    case LZ4F_max4MB: return lz4_header{header, std::size_t{4} << 20};
    default: return std::nullopt;
  }
}

// The blocks of an LZ4 frame of independent blocks without checksums or
// dictionary, from `pos` to the frame's end mark, which must end the
// buffer; false for any other frame.  Stored blocks' sizes are known; the
// others' only decoding them tells (decode_unit).
bool lz4_units(std::span<const std::byte> framed, std::size_t pos, std::uint64_t total,
               std::vector<detail::frame_unit>& units) {
  const std::optional<lz4_header> head = lz4_independent_header(framed, pos, total);
  if (!head) return false;
  const std::size_t most = head->block_bytes;
  pos += head->length;
  for (;;) {
    if (framed.size() - pos < 4) return false;
    const std::uint32_t h = load_le32(framed.data() + pos);
    if (h == 0) return pos + 4 == framed.size();  // the end mark: the buffer's last bytes
    const std::size_t in = h & ~lz4_uncompressed_block;
    if (in > most || in > framed.size() - pos - 4) return false;
    const std::int64_t n = (h & lz4_uncompressed_block) != 0 ? static_cast<std::int64_t>(in) : -1;
    units.push_back(detail::frame_unit{pos, 4 + in, n, most});
    pos += 4 + in;
  }
}

// Decodes the whole blocks (each with its 4-byte header) of `in` into
// exactly `out`; each block at most `most` bytes (the frame's block size),
// as the frame's decoder allows.
void lz4_decode_blocks(std::span<const std::byte> in, std::span<std::byte> out, std::size_t most,
                       std::string_view where) {
  std::size_t pos = 0, at = 0;
  while (pos < in.size()) {
    if (in.size() - pos < 4) bad(where, "an LZ4 block header is cut short");
    const std::uint32_t h = load_le32(in.data() + pos);
    const std::size_t n = h & ~lz4_uncompressed_block;
    pos += 4;
    if (n > in.size() - pos) bad(where, "an LZ4 block runs past its part");
    const std::size_t room = std::min(most, out.size() - at);
    if ((h & lz4_uncompressed_block) != 0) {
      if (n > room) bad(where, "an uncompressed LZ4 block holds more than its part declares");
      if (n > 0) std::memcpy(out.data() + at, in.data() + pos, n);
      at += n;
    } else {
      const int got =
          LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + pos), reinterpret_cast<char*>(out.data() + at),
                              static_cast<int>(n), static_cast<int>(room));
      if (got < 0) bad(where, "corrupted LZ4 block (LZ4_decompress_safe failed)");
      at += static_cast<std::size_t>(got);
    }
    pos += n;
  }
  if (at != out.size()) {
    bad(where, "the LZ4 blocks hold " + size_text(at) + ", their sequences add up to " + size_text(out.size()));
  }
}
#endif

}  // namespace

namespace detail {

std::optional<std::vector<frame_unit>> frame_units(compression_codec codec, std::span<const std::byte> framed,
                                                   std::size_t size) {
  constexpr auto prefix = static_cast<std::size_t>(frame_prefix_bytes);
  // Too little for two parts, or a prefix that declares another size
  // (-1, stored uncompressed, included): decompress() takes those whole.
  if (size < 2 * min_part_bytes || framed.size() <= prefix ||
      load_le64(framed.data()) != static_cast<std::int64_t>(size)) {
    return std::nullopt;
  }
  const auto total = static_cast<std::uint64_t>(size);
  std::vector<frame_unit> units;
  bool ok = false;
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) ok = zstd_units(framed, prefix, total, units);
#endif
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) ok = lz4_units(framed, prefix, total, units);
#endif
  if (!ok || units.size() < 2) return std::nullopt;
  return units;
}

std::int64_t decode_unit(compression_codec codec, std::span<const std::byte> framed, const frame_unit& u,
                         std::span<std::byte> out) {
  if (u.in_offset > framed.size() || u.in_size > framed.size() - u.in_offset || out.size() < u.most) return -1;
  const auto in = framed.subspan(u.in_offset, u.in_size);
  const auto room = static_cast<int>(std::min<std::size_t>(u.most, std::numeric_limits<int>::max()));
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) {
    if (in.size() < 4) return -1;
    const std::uint32_t h = load_le32(in.data());
    const std::size_t n = h & ~lz4_uncompressed_block;
    if (n != in.size() - 4) return -1;
    if ((h & lz4_uncompressed_block) != 0) {
      if (n > u.most) return -1;
      if (n > 0) std::memcpy(out.data(), in.data() + 4, n);
      return static_cast<std::int64_t>(n);
    }
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + 4),
                                        reinterpret_cast<char*>(out.data()), static_cast<int>(n), room);
    return got < 0 ? -1 : got;
  }
#endif
  (void)codec;  // ZSTD frames state their sizes: nothing else needs decoding to learn one
  (void)room;
  return -1;
}

bool assume_full_blocks(std::span<frame_unit> units, std::size_t size) {
  if (units.empty()) return false;
  const std::size_t most = units.front().most;
  if (most == 0 || (size + most - 1) / most != units.size()) return false;
  for (std::size_t k = 0; k < units.size(); ++k) {
    const std::size_t n = k + 1 < units.size() ? most : size - most * k;
    if (units[k].most != most || (units[k].out_size >= 0 && static_cast<std::size_t>(units[k].out_size) != n)) {
      return false;
    }
  }
  for (std::size_t k = 0; k < units.size(); ++k) {
    units[k].out_size = static_cast<std::int64_t>(k + 1 < units.size() ? most : size - most * k);
  }
  return true;
}

std::vector<frame_part> join_units(std::span<const frame_unit> units, std::size_t size, std::size_t min_bytes) {
  std::vector<frame_part> parts;
  std::size_t out = 0;
  for (const frame_unit& u : units) {
    if (u.out_size < 0 || static_cast<std::uint64_t>(u.out_size) > size - out) return {};
    const auto n = static_cast<std::size_t>(u.out_size);
    if (!parts.empty() && parts.back().out_size < min_bytes) {  // joined to the part before
      parts.back().in_size += u.in_size;
      parts.back().out_size += n;
      parts.back().most = std::max(parts.back().most, u.most);
    } else {
      parts.push_back(frame_part{u.in_offset, u.in_size, out, n, u.most});
    }
    out += n;
  }
  // A small last part stays on its own (a short task): joined to the one
  // before, it would no longer fit in the staging slot that part fits in.
  if (out != size || parts.size() < 2) return {};
  return parts;
}

std::size_t part_bytes_hint(compression_codec codec, std::span<const std::byte> head, std::size_t size,
                            std::size_t min_bytes) {
  constexpr auto prefix = static_cast<std::size_t>(frame_prefix_bytes);
  if (size < 2 * min_bytes || head.size() <= prefix || load_le64(head.data()) != static_cast<std::int64_t>(size)) {
    return 0;
  }
  std::size_t unit = 0;
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) {
    const std::int64_t n = zstd_frame_content_size(head.subspan(prefix));
    if (n > 0) unit = static_cast<std::size_t>(n);
  }
#endif
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) {
    const std::optional<lz4_header> h = lz4_independent_header(head, prefix, size);
    if (h) unit = h->block_bytes;
  }
#endif
  if (unit == 0 || unit >= size) return 0;
  // join_units joins units until a part holds at least min_bytes.
  const std::size_t part = unit * ((std::max(unit, min_bytes) + unit - 1) / unit);
  return part < size ? part : 0;
}

void decompress_part(compression_codec codec, std::span<const std::byte> framed, const frame_part& p,
                     std::span<std::byte> out, std::string_view where) {
  if (p.in_offset < static_cast<std::size_t>(frame_prefix_bytes) || p.in_offset > framed.size() ||
      p.in_size > framed.size() - p.in_offset || out.size() != p.out_size) {
    throw invalid_argument("decompress_part: the part lies outside the framed buffer or the output");
  }
  check_codec(codec);
  const std::string name = std::string(where) + (codec == compression_codec::zstd ? " (frames" : " (blocks") +
                           " at bytes " + std::to_string(p.in_offset) + " to " +
                           std::to_string(p.in_offset + p.in_size) + ")";
  const auto in = framed.subspan(p.in_offset, p.in_size);
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) return zstd_decompress(in, out, name);
#endif
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) return lz4_decode_blocks(in, out, p.most, name);
#endif
  missing(codec);
}

}  // namespace detail

void decompress(compression_codec codec, std::span<const std::byte> framed, std::span<std::byte> out,
                std::string_view where) {
  const std::int64_t size = decompressed_size(framed, std::numeric_limits<std::int64_t>::max(), where);
  if (static_cast<std::uint64_t>(size) != out.size()) {
    throw invalid_argument("decompress: the output has " + size_text(out.size()) + ", " + std::string(where) +
                           " decompresses to " + size_text(static_cast<std::size_t>(size)));
  }
  if (framed.empty()) return;
  const auto body = framed.subspan(frame_prefix_bytes);
  if (load_le64(framed.data()) == stored_uncompressed) {
    if (!body.empty()) std::memcpy(out.data(), body.data(), body.size());
    return;
  }
  check_codec(codec);
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) return lz4_decompress(body, out, where);
#endif
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) return zstd_decompress(body, out, where);
#endif
  missing(codec);
}

namespace {

// Buffers above this size are compressed in chunks of it, on as many
// threads as there are chunks: a batch's largest buffer (a string column's
// data, tens of MB) no longer keeps one thread busy while the others wait.
// LZ4: one frame whose independent blocks are the chunks (LZ4F_max4MB);
// ZSTD: one frame per chunk, one after the other (a reader's
// ZSTD_decompress, Arrow C++'s included, takes concatenated frames).
constexpr std::size_t chunk_bytes = std::size_t{4} << 20;

std::size_t chunks_of(std::size_t size) { return size <= chunk_bytes ? 1 : (size + chunk_bytes - 1) / chunk_bytes; }

// The most bytes one frame of `size` input bytes takes: a whole buffer's
// frame, or (chunked) one chunk's frame.
std::size_t frame_bound(compression_codec codec, std::size_t size, bool chunked) {
  std::size_t bound = 0;
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) {
    const LZ4F_preferences_t prefs = chunked ? lz4_chunked_preferences(default_level) : lz4_preferences(default_level);
    bound = LZ4F_compressFrameBound(size, &prefs);
  }
#endif
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) bound = ZSTD_compressBound(size);
#endif
  (void)chunked;
  return bound;
}

// Where chunk k's frame is written before the chunks are joined: each in a
// room of its own, after the 8-byte prefix.
std::size_t chunk_room(compression_codec codec) { return frame_bound(codec, chunk_bytes, true); }

// One frame of `in` (a whole buffer, or one chunk of a larger one) into
// `out`; the bytes written.
std::size_t compress_frame(compression_codec codec, std::span<const std::byte> in, std::span<std::byte> out, int level,
                           bool chunked) {
  std::size_t n = 0;
#if CUARROW_HAVE_LZ4
  if (codec == compression_codec::lz4_frame) {
    const LZ4F_preferences_t prefs = chunked ? lz4_chunked_preferences(level) : lz4_preferences(level);
    n = LZ4F_compressFrame(out.data(), out.size(), in.data(), in.size(), &prefs);
    if (LZ4F_isError(n)) throw error(std::string("LZ4F_compressFrame failed: ") + LZ4F_getErrorName(n));
    if (chunked && n <= lz4_chunk_header + lz4_end_mark) {
      throw error("LZ4F_compressFrame wrote " + std::to_string(n) + " bytes for a chunk of " +
                  std::to_string(in.size()) + " (a header, a block and an end mark expected)");
    }
  }
#endif
#if CUARROW_HAVE_ZSTD
  if (codec == compression_codec::zstd) {
    static thread_local zstd_cctx cctx;
    n = ZSTD_compressCCtx(cctx.get(), out.data(), out.size(), in.data(), in.size(), level);
    if (ZSTD_isError(n)) throw error(std::string("ZSTD_compressCCtx failed: ") + ZSTD_getErrorName(n));
  }
#endif
  (void)level;
  (void)chunked;
  return n;
}

}  // namespace

std::int64_t max_framed_size(compression_codec codec, std::int64_t size) {
  check_codec(codec);
  if (size < 0) throw invalid_argument("max_framed_size: negative size " + std::to_string(size));
  if (size == 0) return 0;
  const auto n = static_cast<std::size_t>(size);
  const std::size_t chunks = chunks_of(n);
  const std::size_t room = chunks == 1 ? frame_bound(codec, n, false) : chunk_room(codec);
  // Every chunk but the last has a full room; the last needs at most one.
  constexpr std::size_t limit = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max() - frame_prefix_bytes);
  if (room == 0 || room > limit / chunks) {
    throw invalid_argument("max_framed_size: " + std::to_string(size) + " bytes is too large for " + to_string(codec));
  }
  // Both bounds exceed the input, so the -1 fallback fits too.
  return frame_prefix_bytes + static_cast<std::int64_t>(std::max(room * chunks, n));
}

std::int64_t compress(compression_codec codec, std::span<const std::byte> in, std::span<std::byte> out,
                      const compress_options& options) {
  compress_job job{in, out};
  compress_all(codec, std::span<compress_job>(&job, 1), options, 1);
  return job.written;
}

std::vector<std::byte> compress(compression_codec codec, std::span<const std::byte> in,
                                const compress_options& options) {
  std::vector<std::byte> out(static_cast<std::size_t>(max_framed_size(codec, static_cast<std::int64_t>(in.size()))));
  out.resize(static_cast<std::size_t>(compress(codec, in, out, options)));
  return out;
}

void decompress_all(compression_codec codec, std::span<const decompress_job> jobs, int threads,
                    std::string_view where) {
  // First, tasks of three kinds: a job that is not in parts (or whose
  // output is not its declared size, which decompress() reports) decoded
  // whole; a part of frames that state their sizes (ZSTD), or of LZ4
  // blocks sized on trust (assume_full_blocks), decoded in place; an LZ4
  // block whose size only decoding it tells decoded into memory of its
  // own.  A job whose trusted blocks decode to other sizes is planned
  // again without trust and decoded so.  Then each job of LZ4 blocks so
  // decoded is copied into place (or, when its blocks do not add up to its
  // size, decoded whole for the error).
  enum class kind { whole, part, unit };
  struct task {
    std::size_t job;
    kind what;
    std::size_t index;
  };
  const std::size_t n = jobs.size();
  std::vector<std::vector<detail::frame_part>> parts(n);
  std::vector<std::vector<detail::frame_unit>> units(n);
  std::vector<std::vector<std::unique_ptr<std::byte[]>>> decoded(n);
  std::vector<char> trusted(n, 0);
  const std::unique_ptr<std::atomic<bool>[]> distrusted(new std::atomic<bool>[n]());
  std::size_t bytes = 0;
  for (const decompress_job& j : jobs) bytes += j.out.size();
  const auto plan = [&](std::size_t i, bool trust, std::vector<task>& tasks) {
    const decompress_job& j = jobs[i];
    std::optional<std::vector<detail::frame_unit>> found = detail::frame_units(codec, j.framed, j.out.size());
    if (found && codec == compression_codec::lz4_frame) {
      trusted[i] = trust && detail::assume_full_blocks(*found, j.out.size()) ? 1 : 0;
      if (trusted[i] == 0) {
        units[i] = std::move(*found);
        decoded[i].resize(units[i].size());
        for (std::size_t k = 0; k < units[i].size(); ++k) tasks.push_back({i, kind::unit, k});
        return;
      }
    }
    parts[i] = found ? detail::join_units(*found, j.out.size()) : std::vector<detail::frame_part>();
    if (parts[i].empty()) tasks.push_back({i, kind::whole, 0});
    for (std::size_t k = 0; k < parts[i].size(); ++k) tasks.push_back({i, kind::part, k});
  };
  const auto decode = [&](const std::vector<task>& tasks) {
    return run_jobs(tasks.size(), bytes, threads, [&](std::size_t t) {
      const task& k = tasks[t];
      const decompress_job& j = jobs[k.job];
      switch (k.what) {
        case kind::whole: return decompress(codec, j.framed, j.out, "");
        case kind::part: {
          const detail::frame_part& p = parts[k.job][k.index];
          try {
            return detail::decompress_part(codec, j.framed, p, j.out.subspan(p.out_offset, p.out_size), "");
          } catch (const invalid_message&) {
            if (trusted[k.job] == 0) throw;
            distrusted[k.job].store(true);
            return;
          }
        }
        case kind::unit: {
          detail::frame_unit& u = units[k.job][k.index];
          std::unique_ptr<std::byte[]>& into = decoded[k.job][k.index];
          into.reset(new std::byte[u.most]);
          u.out_size = detail::decode_unit(codec, j.framed, u, {into.get(), u.most});
          if (u.out_size < 0) {
            bad(" (blocks at bytes " + std::to_string(u.in_offset) + " to " + std::to_string(u.in_offset + u.in_size) +
                    ")",
                "corrupted LZ4 block (LZ4_decompress_safe failed)");
          }
          return;
        }
      }
    });
  };
  std::vector<task> tasks;
  for (std::size_t i = 0; i < n; ++i) plan(i, true, tasks);
  // (Not a structured binding: clang's C++20 does not let lambdas capture one.)
  std::size_t index = 0;
  std::exception_ptr failure;
  std::tie(index, failure) = decode(tasks);
  // A later phase's failure lies before the first one's (it runs jobs
  // before that one): it is the one reported.
  const auto lower = [&](const std::vector<task>& ts, std::pair<std::size_t, std::exception_ptr> r) {
    if (!r.second) return;
    index = 0;
    tasks = {ts[r.first]};
    failure = r.second;
  };
  std::size_t failed_job = failure ? tasks[index].job : n;
  std::vector<task> again;
  for (std::size_t i = 0; i < failed_job; ++i) {
    if (distrusted[i].load()) plan(i, false, again);
  }
  if (!again.empty()) lower(again, decode(again));
  // The jobs of LZ4 blocks before the first failure (all when none):
  // copied into place, one task a block (each block its own part), or
  // decoded whole when the blocks do not add up to the job's size.
  failed_job = failure ? tasks[index].job : n;
  std::vector<task> copies;
  for (std::size_t i = 0; i < failed_job; ++i) {
    if (units[i].empty()) continue;
    parts[i] = detail::join_units(units[i], jobs[i].out.size(), 0);
    if (parts[i].empty()) copies.push_back({i, kind::whole, 0});
    for (std::size_t k = 0; k < parts[i].size(); ++k) copies.push_back({i, kind::unit, k});
  }
  if (!copies.empty()) {
    lower(copies, run_jobs(copies.size(), bytes, threads, [&](std::size_t t) {
            const task& k = copies[t];
            const decompress_job& j = jobs[k.job];
            if (k.what == kind::whole) return decompress(codec, j.framed, j.out, "");
            const detail::frame_part& p = parts[k.job][k.index];
            if (p.out_size > 0) std::memcpy(j.out.data() + p.out_offset, decoded[k.job][k.index].get(), p.out_size);
            decoded[k.job][k.index].reset();
          }));
  }
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const invalid_message& e) {
    bad(std::string(where) + "[" + std::to_string(tasks[index].job) + "]" + e.where(), e.reason());
  }
}

void compress_all(compression_codec codec, std::span<compress_job> jobs, const compress_options& options, int threads) {
  check_codec(codec);
  if (options.min_space_savings && !(*options.min_space_savings >= 0.0 && *options.min_space_savings <= 1.0)) {
    throw invalid_argument("min_space_savings must be between 0 and 1, not " +
                           std::to_string(*options.min_space_savings));
  }
  const int level = options.level.value_or(default_level);
  // Every chunk of every job is one task: (job, chunk index).
  std::vector<std::pair<std::size_t, std::size_t>> tasks;
  std::vector<std::vector<std::size_t>> written(jobs.size());  // each chunk's frame size
  std::size_t bytes = 0;
  std::size_t chunked_bytes = 0;  // of the jobs whose frames are joined after
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    compress_job& j = jobs[i];
    j.written = 0;
    if (j.in.empty()) continue;
    const std::int64_t needed = max_framed_size(codec, static_cast<std::int64_t>(j.in.size()));
    if (static_cast<std::uint64_t>(needed) > j.out.size()) {
      throw invalid_argument("compress: the output has " + size_text(j.out.size()) + ", " + std::to_string(needed) +
                             " may be needed (max_framed_size)");
    }
    const std::size_t chunks = chunks_of(j.in.size());
    written[i].resize(chunks);
    for (std::size_t k = 0; k < chunks; ++k) tasks.emplace_back(i, k);
    bytes += j.in.size();
    if (chunks > 1) chunked_bytes += j.in.size();
  }
  const std::size_t room = chunk_room(codec);
  auto [index, failure] = run_jobs(tasks.size(), bytes, threads, [&](std::size_t t) {
    const auto [i, k] = tasks[t];
    const compress_job& j = jobs[i];
    std::byte* frames = j.out.data() + frame_prefix_bytes;
    if (written[i].size() == 1) {
      written[i][0] = compress_frame(codec, j.in, {frames, j.out.size() - frame_prefix_bytes}, level, false);
    } else {
      const std::size_t at = k * chunk_bytes;
      written[i][k] = compress_frame(codec, j.in.subspan(at, std::min(chunk_bytes, j.in.size() - at)),
                                     {frames + k * room, room}, level, true);
    }
  });
  (void)index;
  if (failure) std::rethrow_exception(failure);

  // Each chunked job's frames joined, in order, left to right (a frame
  // never moves right: it is at most its room): ZSTD frames whole; of LZ4
  // frames, chunk 0's header and every chunk's block, then one end mark.
  // Then the prefix, or the input stored as it is when compressing saved
  // too little; a job a task (threads only for the jobs with joins).
  const bool lz4 = codec == compression_codec::lz4_frame;
  const std::size_t skip = lz4 ? lz4_chunk_header : 0, trail = lz4 ? lz4_end_mark : 0;
  const auto finish = [&](std::size_t i) {
    compress_job& j = jobs[i];
    if (j.in.empty()) return;
    std::byte* frames = j.out.data() + frame_prefix_bytes;
    std::size_t n = written[i][0];
    if (written[i].size() > 1) {
      n -= trail;
      for (std::size_t k = 1; k < written[i].size(); ++k) {
        const std::size_t part = written[i][k] - skip - trail;
        std::memmove(frames + n, frames + k * room + skip, part);
        n += part;
      }
      std::memset(frames + n, 0, trail);
      n += trail;
    }
    if (options.min_space_savings) {
      const double savings = 1.0 - static_cast<double>(n) / static_cast<double>(j.in.size());
      if (savings < *options.min_space_savings) {
        std::memcpy(frames, j.in.data(), j.in.size());
        store_le64(j.out.data(), stored_uncompressed);
        j.written = frame_prefix_bytes + static_cast<std::int64_t>(j.in.size());
        return;
      }
    }
    store_le64(j.out.data(), static_cast<std::int64_t>(j.in.size()));
    j.written = frame_prefix_bytes + static_cast<std::int64_t>(n);
  };
  const auto [unused, no_failure] = run_jobs(jobs.size(), chunked_bytes, threads, finish);
  (void)unused;
  if (no_failure) std::rethrow_exception(no_failure);
}

}  // namespace cuarrow::ipc
