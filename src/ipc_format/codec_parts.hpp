// Internal: a compressed buffer decoded in parts, on several threads.
//
// A ZSTD buffer may hold several frames one after the other (ZSTD_decompress
// takes concatenated frames), an LZ4 frame independent blocks; cuarrow
// writes every buffer above 4 MiB so, one frame (block) per 4 MiB chunk
// (codec.hpp).  Frames that state their decompressed size decode each
// into its own place in the output; independent blocks, whose sizes only
// decoding them tells, likewise with their sizes taken on trust (full but
// the last), or else each into memory of its own, then copied into place:
// a large buffer no longer keeps one thread busy while the others wait
// (decompress_all, the file reader's pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cuarrow/ipc/format.hpp"

namespace cuarrow::ipc::detail {

/// One independently decodable part of a framed buffer: bytes [in_offset,
/// in_offset + in_size) of the framed buffer (its 8-byte prefix included in
/// the offsets) decode to bytes [out_offset, out_offset + out_size) of the
/// buffer: one frame, or neighbouring frames joined.  `most`: the most
/// one LZ4 block of it may decode to (the frame's block size).
struct frame_part {
  std::size_t in_offset = 0;
  std::size_t in_size = 0;
  std::size_t out_offset = 0;
  std::size_t out_size = 0;
  std::size_t most = 0;
};

/// One unit of a framed buffer that decodes on its own: a ZSTD frame, or
/// an LZ4 block with its 4-byte header: bytes [in_offset, in_offset +
/// in_size) of the framed buffer.  `out_size` is the bytes it decodes to,
/// or -1 until decode_unit decodes it (a compressed LZ4 block); `most` is
/// the most it may decode to (an LZ4 frame's block size).
struct frame_unit {
  std::size_t in_offset = 0;
  std::size_t in_size = 0;
  std::int64_t out_size = -1;
  std::size_t most = 0;
};

/// Parts smaller than this are joined to their neighbours.
inline constexpr std::size_t min_part_bytes = std::size_t{256} << 10;

/// The parts of a framed buffer, in three steps: the units of `framed`
/// from their headers alone (ZSTD frame and block headers, LZ4 block
/// headers), when it may decode in parts, nullopt otherwise: a ZSTD buffer
/// of two or more frames that all state their sizes, adding up to no more
/// than the declared `size`, or an LZ4 frame of independent blocks without
/// checksums or dictionary that ends the buffer, and its prefix declares
/// `size`; a buffer too small for two parts, one frame, linked blocks,
/// stored uncompressed, a unit that cannot be walked: decompress() decodes
/// those whole and reports what is wrong.  Reads headers only; never
/// throws for bad input.  Then, for an LZ4 block whose size is not known,
/// decode_unit: decodes unit `u` into `out` (at least u.most bytes) and
/// returns the bytes it decoded to, or -1 when the unit is corrupt or holds
/// more than u.most (or is no LZ4 block); never throws for bad input (its size is in its
/// sequences only, and reading them for the size alone costs about two
/// thirds of decoding them).  Then join_units: the parts, each but the last
/// decoding to at least `min_bytes` (neighbouring units joined), empty
/// unless there are two or more and the sizes add up to `size`.
std::optional<std::vector<frame_unit>> frame_units(compression_codec codec, std::span<const std::byte> framed,
                                                   std::size_t size);
std::int64_t decode_unit(compression_codec codec, std::span<const std::byte> framed, const frame_unit& u,
                         std::span<std::byte> out);
std::vector<frame_part> join_units(std::span<const frame_unit> units, std::size_t size,
                                   std::size_t min_bytes = min_part_bytes);

/// The sizes an LZ4 frame's encoder gives independent blocks, taken on
/// trust instead of decoding the blocks first: every block full (its
/// `most`) but the last, which holds the rest.  Applies (and returns true)
/// only when `units` (frame_units of an LZ4 buffer of `size` bytes) are
/// exactly as many as that needs, all of one block size, and each block
/// stored uncompressed has the size the rule gives it.  Parts joined from
/// such units then decode straight into place; decompress_part checks each
/// block against the size assumed (a block decodes to at most the room it
/// is given), so a valid frame with a short block (a flushing encoder's)
/// fails there, and its reader decodes the buffer again without the
/// assumption (decode_unit), never trusting a wrong result.
bool assume_full_blocks(std::span<frame_unit> units, std::size_t size);

/// The bytes each part of a framed buffer will likely decode to (all but
/// the last), from `head` alone: the buffer's prefix and its first frame's
/// header (frame_prefix_bytes + part_hint_head_bytes read suffice).  A ZSTD
/// buffer whose first frame states a size below the declared `size`; an
/// LZ4 frame of independent blocks without checksums or dictionary: its
/// block size; either joined as join_units joins them.  0 when
/// neither (one frame, linked blocks, a header cut short).  A hint for
/// cutting the staging chunks on the parts' bounds before the buffer is
/// read; frame_units and join_units decide.  Never throws for bad input.
std::size_t part_bytes_hint(compression_codec codec, std::span<const std::byte> head, std::size_t size,
                            std::size_t min_bytes = min_part_bytes);

/// The bytes after the prefix that part_bytes_hint may read: the longest
/// ZSTD frame header (18) or LZ4 frame header (19).
inline constexpr std::size_t part_hint_head_bytes = 19;

/// Decodes part `p` of `framed` into `out` (p.out_size bytes).  Throws
/// invalid_message naming `where` and the part's bytes when its frames
/// (blocks) are corrupt or hold another size than they state.
void decompress_part(compression_codec codec, std::span<const std::byte> framed, const frame_part& p,
                     std::span<std::byte> out, std::string_view where);

}  // namespace cuarrow::ipc::detail
