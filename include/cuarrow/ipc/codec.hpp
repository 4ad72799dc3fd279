// Compressed IPC bodies: Arrow's BodyCompression, method BUFFER.
//
// With a record batch's `compression` set (format.hpp), each of its body
// buffers is framed on its own: a little-endian int64 uncompressed length,
// then the bytes compressed as one LZ4 frame or one ZSTD frame.  A length of
// -1 says the bytes that follow are stored uncompressed (what a writer does
// when compressing does not pay); an empty buffer stays empty (0 bytes, no
// length), as Arrow C++ writes it.  These functions are what the IPC reader
// and writer call per buffer; they are public so that a program holding
// framed buffers from elsewhere (another Arrow implementation, a transport
// of its own) can use them too, and so that a caller can ask which codecs
// this build of cuarrow has.
//
// Framed input is untrusted: a length that is neither -1 nor a size, a
// length above the caller's limit, bytes that are not a valid frame, a
// frame that ends early or holds more or less than the length it declares
// are each an invalid_message naming `where` and what is wrong; nothing is
// read past the input nor written past the output.
//
// liblz4 and libzstd are found when cuarrow is built (Debian: liblz4-dev,
// libzstd-dev); a build without one still reads and writes uncompressed and
// -1 buffers, and throws cuarrow::error naming the missing library for the
// rest.  Host memory only; every call is synchronous and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/export.hpp"
#include "cuarrow/ipc/format.hpp"

namespace cuarrow::ipc {

/// "lz4_frame" or "zstd" (Message.fbs names, lower case).
CUARROW_EXPORT const char* to_string(compression_codec codec) noexcept;

/// The codec a name asks for: "lz4" or "lz4_frame" (pyarrow's names of the
/// LZ4 frame format), "zstd".  Throws invalid_argument for any other name.
CUARROW_EXPORT compression_codec compression_codec_of(std::string_view name);

/// Whether this build of cuarrow was built with the codec's library.
CUARROW_EXPORT bool codec_available(compression_codec codec) noexcept;

/// The codecs this build has, in Message.fbs order.
CUARROW_EXPORT std::vector<compression_codec> available_codecs();

/// The framing's length prefix and its "stored uncompressed" value.
inline constexpr std::int64_t frame_prefix_bytes = 8;
inline constexpr std::int64_t stored_uncompressed = -1;

/// The size `framed` decompresses to: 0 for an empty buffer, the bytes
/// after the prefix for length -1, else the declared length.  Throws
/// invalid_message when the buffer is 1 to 7 bytes long, the length is
/// negative other than -1, or the size is above `limit` (what the caller is
/// prepared to allocate for this buffer).
CUARROW_EXPORT std::int64_t decompressed_size(std::span<const std::byte> framed, std::int64_t limit,
                                              std::string_view where = "compressed buffer");

/// Decompresses `framed` into `out`, whose size must be
/// decompressed_size(framed) (invalid_argument otherwise).  Length -1 and
/// empty buffers need no codec.  Throws invalid_message for a corrupted or
/// truncated frame, trailing bytes after it, or one that holds more or
/// fewer bytes than declared (`out` may then hold some of them); cuarrow::
/// error when this build lacks the codec.
CUARROW_EXPORT void decompress(compression_codec codec, std::span<const std::byte> framed, std::span<std::byte> out,
                               std::string_view where = "compressed buffer");

/// The decompressed size a ZSTD frame's header declares, from the frame's
/// first bytes (18 are always enough; fewer may be): -1 when they do not
/// start a ZSTD frame, the header does not state its size (it may not), or
/// libzstd was not built in.  Reads nothing beyond `frame`; never throws.
CUARROW_EXPORT std::int64_t zstd_frame_content_size(std::span<const std::byte> frame) noexcept;

/// How to compress.  The defaults are Arrow C++'s (pyarrow's
/// IpcWriteOptions(compression=...)): level 1 for both codecs, every
/// non-empty buffer compressed.
struct compress_options {
  /// The codec's level; unset: 1 (LZ4 fast mode, ZSTD level 1).
  std::optional<int> level;
  /// Store a buffer uncompressed (length -1) when compressing saves less
  /// than this fraction of its size (0 to 1; IpcWriteOptions
  /// min_space_savings).  Unset: always compress.
  std::optional<double> min_space_savings;
};

/// The most bytes compress() writes for `size` input bytes.
CUARROW_EXPORT std::int64_t max_framed_size(compression_codec codec, std::int64_t size);

/// Frames `in` into `out` (at least max_framed_size(codec, in.size())
/// bytes) as Arrow C++ does and returns the bytes written: 0 for empty
/// input, else 8 + the frame (or + the input, length -1).  Input above
/// 4 MiB is compressed in 4 MiB chunks (compress_all runs them in
/// parallel): one LZ4 frame of independent 4 MiB blocks, or one ZSTD frame
/// per chunk, one after the other; what Arrow C++ reads.  Throws
/// invalid_argument for a short `out` or options out of range,
/// cuarrow::error when this build lacks the codec.
CUARROW_EXPORT std::int64_t compress(compression_codec codec, std::span<const std::byte> in, std::span<std::byte> out,
                                     const compress_options& options = {});
CUARROW_EXPORT std::vector<std::byte> compress(compression_codec codec, std::span<const std::byte> in,
                                               const compress_options& options = {});

/// Many buffers at once (a record batch's), spread over host threads.
struct decompress_job {
  std::span<const std::byte> framed;
  std::span<std::byte> out;  // decompressed_size(framed) bytes
};
struct compress_job {
  std::span<const std::byte> in;
  std::span<std::byte> out;  // max_framed_size(codec, in.size()) bytes
  std::int64_t written = 0;  // set by compress_all
};

/// Runs decompress() for every job on up to `threads` host threads (0: as
/// many as the machine has, at most 16; small batches run on the caller).
/// Concurrent calls queue for the threads.  On failure throws the error of
/// the first failing job in order, an invalid_message's `where` being
/// `where` + "[index]"; other jobs may or may not have run.
CUARROW_EXPORT void decompress_all(compression_codec codec, std::span<const decompress_job> jobs, int threads = 0,
                                   std::string_view where = "buffers");

/// Runs compress() for every job likewise, setting each job's `written`
/// (the same bytes as compress()): every 4 MiB chunk of every job is a task
/// of its own on the threads.
CUARROW_EXPORT void compress_all(compression_codec codec, std::span<compress_job> jobs,
                                 const compress_options& options = {}, int threads = 0);

}  // namespace cuarrow::ipc
