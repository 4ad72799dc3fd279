// libFuzzer target: decompressing a framed IPC body buffer (BodyCompression
// method BUFFER: int64 uncompressed length, then one LZ4 or ZSTD frame, or
// -1 and the bytes as they are).  Input: one byte whose low bit picks the
// codec (0 LZ4_FRAME, 1 ZSTD) and whose second bit sends the buffer through
// decompress_all too (which decodes several ZSTD frames in parts, on
// threads: it must accept what decompress does, with the same bytes, and
// refuse what it refuses), then the framed buffer.  Properties:
// never reads past the framed bytes (their own allocation under ASan) nor
// writes past the output; refuses lengths above the 16 MiB limit before
// allocating; what it accepts is exactly the declared size, and compresses
// and decompresses back to itself.  The part size the file reader guesses
// from the buffer's first bytes (part_bytes_hint) reads only those bytes
// and is 0 or a size below the declared one.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "fuzz_input.hpp"
#include "ipc_format/codec_parts.hpp"

using cuarrow::ipc::compression_codec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const compression_codec codec = (data[0] & 1) ? compression_codec::zstd : compression_codec::lz4_frame;
  const bool batch = (data[0] & 2) != 0;
  // The framed bytes in an allocation of exactly their size.
  const std::vector<std::byte> framed(reinterpret_cast<const std::byte*>(data + 1),
                                      reinterpret_cast<const std::byte*>(data + size));
  // Above 4 MiB: cuarrow's writer frames such buffers in 4 MiB chunks
  // (several ZSTD frames, LZ4 frames of independent blocks), which
  // decompress_all decodes in parts.
  constexpr std::int64_t limit = std::int64_t{16} << 20;
  std::int64_t n = 0;
  try {
    n = cuarrow::ipc::decompressed_size(framed, limit, "fuzz");
  } catch (const cuarrow::ipc::invalid_message&) {
    return 0;
  }
  if (n < 0 || n > limit) cuarrow_fuzz::property_failed("decompressed_size outside [0, limit]");
  {
    namespace d = cuarrow::ipc::detail;
    const std::size_t head_size =
        std::min(framed.size(), static_cast<std::size_t>(cuarrow::ipc::frame_prefix_bytes) + d::part_hint_head_bytes);
    const std::vector<std::byte> head(framed.begin(), framed.begin() + static_cast<std::ptrdiff_t>(head_size));
    const std::size_t hint = d::part_bytes_hint(codec, head, static_cast<std::size_t>(n));
    if (hint != 0 && (hint >= static_cast<std::size_t>(n) || hint < d::min_part_bytes)) {
      cuarrow_fuzz::property_failed("part_bytes_hint outside [min_part_bytes, size)");
    }
  }
  std::vector<std::byte> out(static_cast<std::size_t>(n));
  bool accepted = true;
  try {
    cuarrow::ipc::decompress(codec, framed, out, "fuzz");
  } catch (const cuarrow::ipc::invalid_message&) {
    accepted = false;
  }
  if (batch) {
    // decompress_all decodes a buffer of several ZSTD frames in parts, on
    // threads: it accepts exactly what decompress() does, with its bytes.
    std::vector<std::byte> parts(out.size());
    bool parts_accepted = true;
    try {
      const cuarrow::ipc::decompress_job job{framed, parts};
      cuarrow::ipc::decompress_all(codec, {&job, 1}, 2, "fuzz");
    } catch (const cuarrow::ipc::invalid_message&) {
      parts_accepted = false;
    }
    if (parts_accepted != accepted) cuarrow_fuzz::property_failed("decompress_all and decompress disagree");
    if (accepted && parts != out) cuarrow_fuzz::property_failed("decompress_all decoded other bytes");
  }
  if (!accepted) return 0;
  // Accepted: the output round-trips through the writer's side.
  const auto again = cuarrow::ipc::compress(codec, out);
  std::vector<std::byte> back(out.size());
  cuarrow::ipc::decompress(codec, again, back);
  if (back != out) cuarrow_fuzz::property_failed("accepted output does not round-trip through compress");
  return 0;
}
