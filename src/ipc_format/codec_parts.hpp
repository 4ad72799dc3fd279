// Internal: a compressed buffer decoded in parts, on several threads.
//
// A ZSTD buffer may hold several frames one after the other (ZSTD_decompress
// takes concatenated frames), an LZ4 frame independent blocks; cuarrow
// writes every buffer above 4 MiB so, one frame (block) per 4 MiB chunk
// (codec.hpp).  Frames that state their decompressed size, and
// independent blocks whose size their sequences give, decode each into
// its own place in the output: a large buffer no longer keeps one thread
// busy while the others wait (decompress_all, the file reader's pipeline).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "cuarrow/ipc/format.hpp"

namespace cuarrow::ipc::detail {

/// One independently decodable part of a framed buffer: bytes [in_offset,
/// in_offset + in_size) of the framed buffer (its 8-byte prefix included in
/// the offsets) decode to bytes [out_offset, out_offset + out_size) of the
/// buffer: one frame, or neighbouring frames joined.
struct frame_part {
  std::size_t in_offset = 0;
  std::size_t in_size = 0;
  std::size_t out_offset = 0;
  std::size_t out_size = 0;
};

/// Parts smaller than this are joined to their neighbours.
inline constexpr std::size_t min_part_bytes = std::size_t{256} << 10;

/// The parts of `framed`, in order, each decoding to at least `min_bytes`
/// (neighbouring units joined), when there are two or more and its prefix
/// declares `size` (the output's size) bytes: a ZSTD buffer
/// whose concatenated frames all state their sizes and add up to the
/// declared length, or an LZ4 frame of independent blocks (no checksums,
/// no dictionary) that ends the buffer and whose blocks' sequences add up
/// to it.  Empty otherwise (one ZSTD frame, linked LZ4 blocks, stored
/// uncompressed, a unit that cannot be walked, sizes that do not add up):
/// decompress() then decodes the buffer whole and reports what is wrong
/// with it.  Reads ZSTD frame and block headers, LZ4 block headers and
/// sequence lengths; never throws for bad input.
std::vector<frame_part> independent_parts(compression_codec codec, std::span<const std::byte> framed, std::size_t size,
                                          std::size_t min_bytes = min_part_bytes);

/// Decodes part `p` of `framed` into `out` (p.out_size bytes).  Throws
/// invalid_message naming `where` and the part's bytes when its frames
/// (blocks) are corrupt or hold another size than they state.
void decompress_part(compression_codec codec, std::span<const std::byte> framed, const frame_part& p,
                     std::span<std::byte> out, std::string_view where);

}  // namespace cuarrow::ipc::detail
