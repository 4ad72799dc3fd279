// The codecs of compressed IPC bodies (include/cuarrow/ipc/codec.hpp):
// round trips, pyarrow's own output, and what untrusted framed bytes get.
#include <gtest/gtest.h>

#include <cuarrow/ipc/codec.hpp>

#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_data.hpp"

namespace {

using cuarrow::ipc::compression_codec;
using cuarrow::ipc::invalid_message;
using bytes = std::vector<std::byte>;

const compression_codec both[] = {compression_codec::lz4_frame, compression_codec::zstd};

bytes compressible(std::size_t n, unsigned seed = 1) {
  bytes b(n);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i / 16) % 7 + (rng() % 4 == 0 ? rng() % 3 : 0));
  return b;
}

bytes random_bytes(std::size_t n, unsigned seed = 2) {
  bytes b(n);
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

std::int64_t prefix_of(const bytes& framed) {
  std::int64_t v = 0;
  std::memcpy(&v, framed.data(), 8);  // little-endian host (x86-64, aarch64)
  return v;
}

bytes with_prefix(std::int64_t length, std::span<const std::byte> payload) {
  bytes out(8 + payload.size());
  std::memcpy(out.data(), &length, 8);
  if (!payload.empty()) std::memcpy(out.data() + 8, payload.data(), payload.size());
  return out;
}

bytes decompressed(compression_codec c, const bytes& framed) {
  bytes out(static_cast<std::size_t>(cuarrow::ipc::decompressed_size(framed, std::int64_t{1} << 40)));
  cuarrow::ipc::decompress(c, framed, out);
  return out;
}

std::span<const std::byte> data_file(const std::string& name) {
  const auto& files = test_data::files();
  auto it = files.find(name);
  if (it == files.end()) throw std::runtime_error("no test data " + name);
  return it->second;
}

// The invalid_message a call throws (fails the test if it throws nothing
// or something else).
template <class F>
invalid_message message_of(F&& f) {
  try {
    f();
  } catch (const invalid_message& e) {
    return e;
  }
  ADD_FAILURE() << "no invalid_message thrown";
  return invalid_message("", "");
}

class Codec : public ::testing::TestWithParam<compression_codec> {
 protected:
  void SetUp() override {
    if (!cuarrow::ipc::codec_available(GetParam())) {
      GTEST_FAIL() << "this build lacks " << cuarrow::ipc::to_string(GetParam())
                   << "; the test suite is built with liblz4-dev and libzstd-dev (scripts/install-deps.sh)";
    }
  }
  compression_codec codec() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Both, Codec, ::testing::ValuesIn(both),
                         [](const auto& p) { return std::string(cuarrow::ipc::to_string(p.param)); });

TEST(CodecNames, NamesAndAvailabilityAgree) {
  EXPECT_STREQ(cuarrow::ipc::to_string(compression_codec::lz4_frame), "lz4_frame");
  EXPECT_STREQ(cuarrow::ipc::to_string(compression_codec::zstd), "zstd");
  // Names as given in Python (pyarrow says "lz4" for the frame format).
  EXPECT_EQ(cuarrow::ipc::compression_codec_of("lz4"), compression_codec::lz4_frame);
  EXPECT_EQ(cuarrow::ipc::compression_codec_of("lz4_frame"), compression_codec::lz4_frame);
  EXPECT_EQ(cuarrow::ipc::compression_codec_of("zstd"), compression_codec::zstd);
  EXPECT_THROW(cuarrow::ipc::compression_codec_of("snappy"), cuarrow::invalid_argument);
  std::vector<compression_codec> expected;
  for (auto c : both)
    if (cuarrow::ipc::codec_available(c)) expected.push_back(c);
  EXPECT_EQ(cuarrow::ipc::available_codecs(), expected);
}

// What a build without liblz4 or libzstd says (scripts/install-deps.sh
// installs both, so in CI this checks the codecs work; a build with
// -DCUARROW_WITH_LZ4=OFF -DCUARROW_WITH_ZSTD=OFF checks the messages).
TEST(CodecNames, AMissingCodecSaysWhichPackageToBuildWith) {
  const bytes in = compressible(100);
  for (auto c : both) {
    // Stored uncompressed (-1) and empty buffers need no codec either way.
    EXPECT_EQ(decompressed(c, with_prefix(-1, in)), in);
    EXPECT_EQ(decompressed(c, bytes{}), bytes{});
    if (cuarrow::ipc::codec_available(c)) {
      EXPECT_EQ(decompressed(c, cuarrow::ipc::compress(c, in)), in);
      continue;
    }
    const std::string lib = c == compression_codec::zstd ? "without zstd (libzstd-dev)" : "without lz4 (liblz4-dev)";
    for (int call = 0; call < 3; ++call) {
      try {
        if (call == 0) cuarrow::ipc::compress(c, in);
        if (call == 1) decompressed(c, with_prefix(100, in));
        if (call == 2) cuarrow::ipc::max_framed_size(c, 100);
        ADD_FAILURE() << "no error without " << cuarrow::ipc::to_string(c);
      } catch (const cuarrow::invalid_argument& e) {
        ADD_FAILURE() << "not the caller's error: " << e.what();
      } catch (const cuarrow::error& e) {
        EXPECT_NE(std::string(e.what()).find("this cuarrow was built " + lib + "; rebuild with it"), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST_P(Codec, RoundTripsEverySize) {
  for (std::size_t n :
       {std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{65537}, std::size_t{3} * 1024 * 1024 + 5}) {
    for (const bytes& in : {compressible(n), random_bytes(n)}) {
      SCOPED_TRACE(n);
      const bytes framed = cuarrow::ipc::compress(codec(), in);
      ASSERT_GE(framed.size(), 8u);
      EXPECT_LE(static_cast<std::int64_t>(framed.size()), cuarrow::ipc::max_framed_size(codec(), n));
      EXPECT_EQ(prefix_of(framed), static_cast<std::int64_t>(n));  // Arrow always compresses by default
      EXPECT_EQ(cuarrow::ipc::decompressed_size(framed, n), static_cast<std::int64_t>(n));
      EXPECT_EQ(decompressed(codec(), framed), in);
    }
  }
  // Compressible data shrinks.
  EXPECT_LT(cuarrow::ipc::compress(codec(), compressible(1 << 20)).size(), std::size_t{1} << 19);
}

// Buffers above 4 MiB are compressed in 4 MiB chunks, in parallel: one
// LZ4 frame of independent 4 MiB blocks, or one ZSTD frame per chunk.  The
// same bytes whatever the thread count, and what a one-frame reader reads.
TEST_P(Codec, LargeBuffersCompressInChunksOnEveryThread) {
  constexpr std::size_t chunk = std::size_t{4} << 20;
  const std::size_t n = 2 * chunk + 12345;
  bytes mixed = compressible(n, 7);
  const bytes noise = random_bytes(chunk / 2, 9);  // one chunk half incompressible: LZ4 stores such a block raw
  std::memcpy(mixed.data() + chunk + chunk / 4, noise.data(), noise.size());
  for (const bytes& in : {mixed, random_bytes(n, 3)}) {
    const bytes framed = cuarrow::ipc::compress(codec(), in);
    EXPECT_LE(static_cast<std::int64_t>(framed.size()), cuarrow::ipc::max_framed_size(codec(), n));
    EXPECT_EQ(prefix_of(framed), static_cast<std::int64_t>(n));
    EXPECT_EQ(decompressed(codec(), framed), in);
    const std::span<const std::byte> frame = std::span(framed).subspan(8);
    if (codec() == compression_codec::lz4_frame) {
      // FLG: version 01, independent blocks; BD: 4 MiB blocks.  decompress
      // refuses bytes after the frame, so the frame is the whole buffer.
      EXPECT_EQ(std::to_integer<int>(frame[4]) & 0xE0, 0x60);
      EXPECT_EQ(std::to_integer<int>(frame[5]), 0x70);
    } else {
      EXPECT_EQ(cuarrow::ipc::zstd_frame_content_size(frame), static_cast<std::int64_t>(chunk));  // the first of 3
    }
    // compress_all on 4 threads writes the same bytes as compress().
    bytes out(static_cast<std::size_t>(cuarrow::ipc::max_framed_size(codec(), n)) + 100);
    const bytes small = compressible(1000);
    bytes small_out(static_cast<std::size_t>(cuarrow::ipc::max_framed_size(codec(), 1000)));
    std::vector<cuarrow::ipc::compress_job> jobs(2);
    jobs[0].in = in;
    jobs[0].out = out;
    jobs[1].in = small;
    jobs[1].out = small_out;
    cuarrow::ipc::compress_all(codec(), jobs, {}, 4);
    EXPECT_EQ(bytes(out.begin(), out.begin() + jobs[0].written), framed);
    EXPECT_EQ(bytes(small_out.begin(), small_out.begin() + jobs[1].written), cuarrow::ipc::compress(codec(), small));
  }
  // A buffer of at most one chunk keeps the one-frame form of Arrow C++
  // (LZ4: 64 KiB linked blocks; ZSTD: one frame stating the whole size).
  const bytes one = compressible(chunk, 5);
  const bytes framed = cuarrow::ipc::compress(codec(), one);
  const std::span<const std::byte> frame = std::span(framed).subspan(8);
  if (codec() == compression_codec::lz4_frame) {
    EXPECT_EQ(std::to_integer<int>(frame[5]), 0x40);
  } else {
    EXPECT_EQ(cuarrow::ipc::zstd_frame_content_size(frame), static_cast<std::int64_t>(chunk));
  }
  EXPECT_EQ(decompressed(codec(), framed), one);
  // Saving too little stores a chunked buffer as it is, too.
  cuarrow::ipc::compress_options o;
  o.min_space_savings = 0.1;
  const bytes random = random_bytes(n, 11);
  const bytes stored = cuarrow::ipc::compress(codec(), random, o);
  EXPECT_EQ(prefix_of(stored), -1);
  EXPECT_EQ(decompressed(codec(), stored), random);
}

TEST_P(Codec, EmptyBuffersStayEmpty) {
  // Arrow writes an empty buffer as no bytes at all, not a length and a frame.
  EXPECT_TRUE(cuarrow::ipc::compress(codec(), bytes{}).empty());
  EXPECT_EQ(cuarrow::ipc::max_framed_size(codec(), 0), 0);
  EXPECT_EQ(cuarrow::ipc::decompressed_size(bytes{}, 0), 0);
  EXPECT_NO_THROW(cuarrow::ipc::decompress(codec(), bytes{}, std::span<std::byte>{}));
  // Length -1 and nothing after it: an empty buffer stored uncompressed.
  EXPECT_EQ(decompressed(codec(), with_prefix(-1, {})), bytes{});
}

TEST_P(Codec, StoresUncompressedWhenCompressingDoesNotPay) {
  const bytes noise = random_bytes(10000);
  cuarrow::ipc::compress_options o;
  o.min_space_savings = 0.1;
  const bytes framed = cuarrow::ipc::compress(codec(), noise, o);
  EXPECT_EQ(prefix_of(framed), -1);
  EXPECT_EQ(framed.size(), 8 + noise.size());
  EXPECT_EQ(cuarrow::ipc::decompressed_size(framed, 10000), 10000);
  EXPECT_EQ(decompressed(codec(), framed), noise);
  // Compressible data still compresses under the same option.
  const bytes text = compressible(10000);
  const bytes packed = cuarrow::ipc::compress(codec(), text, o);
  EXPECT_EQ(prefix_of(packed), 10000);
  EXPECT_EQ(decompressed(codec(), packed), text);
  o.min_space_savings = 1.5;
  EXPECT_THROW(cuarrow::ipc::compress(codec(), text, o), cuarrow::invalid_argument);
}

TEST_P(Codec, LevelsRoundTrip) {
  const bytes text = compressible(200000);
  for (int level : {-1, 1, 3, 9}) {
    cuarrow::ipc::compress_options o;
    o.level = level;
    EXPECT_EQ(decompressed(codec(), cuarrow::ipc::compress(codec(), text, o)), text) << level;
  }
}

TEST_P(Codec, ReadsPyarrowsRawCodecOutput) {
  // pa.compress(sample, codec=...): the frame Arrow C++ writes, framed here.
  const auto sample = data_file("sample.bin");
  const auto raw = data_file(std::string("raw_") + (codec() == compression_codec::zstd ? "zstd" : "lz4") + ".bin");
  const bytes framed = with_prefix(static_cast<std::int64_t>(sample.size()), raw);
  EXPECT_EQ(decompressed(codec(), framed), bytes(sample.begin(), sample.end()));
}

TEST_P(Codec, ReadsPyarrowsCompressedIpcStream) {
  // A stream written by pa.ipc.new_stream(..., IpcWriteOptions(compression=...)):
  // every framed body buffer decompresses to the buffer pyarrow had.
  const std::string name = codec() == compression_codec::zstd ? "zstd" : "lz4";
  const auto stream = data_file("stream_" + name + ".arrows");
  const auto plain = data_file("stream_plain.bin");
  const auto index = data_file("stream_" + name + ".txt");
  std::istringstream lines(std::string(reinterpret_cast<const char*>(index.data()), index.size()));
  std::size_t offset, length, plain_offset, plain_length, count = 0;
  std::vector<cuarrow::ipc::decompress_job> jobs;
  std::vector<bytes> outs;
  outs.reserve(16);
  while (lines >> offset >> length >> plain_offset >> plain_length) {
    ASSERT_LE(offset + length, stream.size());
    ASSERT_LE(plain_offset + plain_length, plain.size());
    const auto framed = stream.subspan(offset, length);
    const auto expected = plain.subspan(plain_offset, plain_length);
    ASSERT_EQ(cuarrow::ipc::decompressed_size(framed, 1 << 20), static_cast<std::int64_t>(plain_length));
    bytes out(plain_length);
    cuarrow::ipc::decompress(codec(), framed, out);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), expected.begin(), expected.end())) << "buffer at " << offset;
    outs.emplace_back(plain_length);
    jobs.push_back({framed, outs.back()});
    ++count;
  }
  EXPECT_EQ(count, 4u);  // int64, float64, utf8 offsets and data (no validity: no nulls)
  cuarrow::ipc::decompress_all(codec(), jobs, 4);
  for (const auto& j : jobs)
    EXPECT_EQ(bytes(j.out.begin(), j.out.end()), decompressed(codec(), bytes(j.framed.begin(), j.framed.end())));
}

TEST(CodecLz4, AFrameThatFailedDoesNotSpoilTheNextOnTheThread) {
  // Frames of other LZ4 writers may carry their content size; one abandoned
  // half way left liblz4 (1.9.4) expecting the rest of it in the next frame
  // on the reused context, which then failed (found by fuzz/ipc_codec.cpp).
  if (!cuarrow::ipc::codec_available(compression_codec::lz4_frame)) GTEST_FAIL() << "this build lacks lz4_frame";
  const auto sample = data_file("sample.bin");
  const auto with_size = data_file("lz4_content_size.bin");
  const bytes expected(sample.begin(), sample.end());
  const auto n = static_cast<std::int64_t>(sample.size());
  EXPECT_EQ(decompressed(compression_codec::lz4_frame, with_prefix(n, with_size)), expected);
  const bytes normal = cuarrow::ipc::compress(compression_codec::lz4_frame, expected);
  for (std::size_t cut : {std::size_t{40}, with_size.size() / 2, with_size.size() - 4}) {
    EXPECT_THROW(decompressed(compression_codec::lz4_frame, with_prefix(n, with_size.first(cut))), invalid_message);
    EXPECT_EQ(decompressed(compression_codec::lz4_frame, normal), expected) << cut;
  }
  // A content size other than the declared length.
  const auto e = message_of([&] { decompressed(compression_codec::lz4_frame, with_prefix(n + 1, with_size)); });
  EXPECT_NE(e.reason().find("LZ4"), std::string::npos) << e.reason();
}

TEST(CodecFraming, ShortNegativeAndHugeLengthsAreInvalid) {
  for (std::size_t n = 1; n < 8; ++n) {
    const auto e = message_of([&] { cuarrow::ipc::decompressed_size(bytes(n), 100, "RecordBatch.buffers[2]"); });
    EXPECT_EQ(e.where(), "RecordBatch.buffers[2]");
    EXPECT_NE(e.reason().find("shorter than its 8-byte uncompressed length"), std::string::npos) << e.reason();
    EXPECT_NE(std::string(e.what()).find("RecordBatch.buffers[2]"), std::string::npos) << e.what();
  }
  for (std::int64_t length : {std::int64_t{-2}, std::numeric_limits<std::int64_t>::min()}) {
    const auto e = message_of([&] { cuarrow::ipc::decompressed_size(with_prefix(length, bytes(4)), 100); });
    EXPECT_NE(e.reason().find("negative"), std::string::npos) << e.reason();
    EXPECT_EQ(e.where(), "compressed buffer");
  }
  const auto e =
      message_of([&] { cuarrow::ipc::decompressed_size(with_prefix(std::int64_t{1} << 50, bytes(4)), 1 << 30); });
  EXPECT_NE(e.reason().find("above the limit of 1073741824"), std::string::npos) << e.reason();
  // Stored uncompressed: its size is what follows, under the limit too.
  EXPECT_EQ(cuarrow::ipc::decompressed_size(with_prefix(-1, bytes(5)), 5), 5);
  EXPECT_THROW(cuarrow::ipc::decompressed_size(with_prefix(-1, bytes(6)), 5), invalid_message);
}

TEST_P(Codec, WrongDeclaredLengthIsInvalid) {
  const bytes in = compressible(5000);
  const bytes framed = cuarrow::ipc::compress(codec(), in);
  const std::span<const std::byte> frame = std::span(framed).subspan(8);
  for (std::int64_t declared : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4999}}) {
    const auto e = message_of([&] { decompressed(codec(), with_prefix(declared, frame)); });
    EXPECT_NE(e.reason().find("holds more than the " + std::to_string(declared)), std::string::npos) << e.reason();
  }
  for (std::int64_t declared : {std::int64_t{5001}, std::int64_t{1} << 20}) {
    const auto e = message_of([&] { decompressed(codec(), with_prefix(declared, frame)); });
    EXPECT_NE(e.reason().find("holds 5000 bytes, the buffer declares " + std::to_string(declared)), std::string::npos)
        << e.reason();
  }
}

TEST_P(Codec, TruncatedFramesAreInvalid) {
  const bytes in = compressible(100000);
  const bytes framed = cuarrow::ipc::compress(codec(), in);
  for (std::size_t cut : {std::size_t{1}, std::size_t{4}, std::size_t{100}, framed.size() - 12, framed.size() - 9}) {
    SCOPED_TRACE(cut);
    const bytes shorter(framed.begin(), framed.end() - static_cast<std::ptrdiff_t>(cut));
    const auto e = message_of([&] { decompressed(codec(), shorter); });
    EXPECT_TRUE(e.reason().find("truncated") != std::string::npos || e.reason().find("corrupted") != std::string::npos)
        << e.reason();
  }
  // Only the length, no frame at all.
  EXPECT_THROW(decompressed(codec(), with_prefix(10, {})), invalid_message);
}

TEST_P(Codec, CorruptedFramesAreInvalid) {
  const bytes in = compressible(20000);
  bytes framed = cuarrow::ipc::compress(codec(), in);
  // A frame that does not start with the codec's magic number.
  bytes bad_magic = framed;
  bad_magic[8] ^= std::byte{0x5a};
  auto e = message_of([&] { decompressed(codec(), bad_magic); });
  EXPECT_NE(e.reason().find("corrupted"), std::string::npos) << e.reason();
  // The other codec's frame.
  const compression_codec other =
      codec() == compression_codec::zstd ? compression_codec::lz4_frame : compression_codec::zstd;
  e = message_of([&] { decompressed(codec(), cuarrow::ipc::compress(other, in)); });
  EXPECT_NE(e.reason().find("corrupted"), std::string::npos) << e.reason();
  // Bytes after the frame.
  bytes trailing = framed;
  trailing.push_back(std::byte{0});
  trailing.push_back(std::byte{1});
  EXPECT_THROW(decompressed(codec(), trailing), invalid_message);
  // Every single-byte change: an error or the declared size, never a crash
  // or a write past the output (the sanitizer builds check the latter).
  for (std::size_t i = 8; i < framed.size(); i += 3) {
    bytes flipped = framed;
    flipped[i] ^= std::byte{0xff};
    try {
      EXPECT_EQ(decompressed(codec(), flipped).size(), in.size());
    } catch (const invalid_message&) {
    }
  }
}

TEST_P(Codec, OutputOfTheWrongSizeIsTheCallersError) {
  const bytes framed = cuarrow::ipc::compress(codec(), compressible(100));
  bytes out(99);
  EXPECT_THROW(cuarrow::ipc::decompress(codec(), framed, out), cuarrow::invalid_argument);
  try {
    cuarrow::ipc::decompress(codec(), framed, out);
  } catch (const invalid_message&) {
    ADD_FAILURE() << "a short output is not a malformed message";
  } catch (const cuarrow::invalid_argument&) {
  }
  bytes small(10);
  EXPECT_THROW(cuarrow::ipc::compress(codec(), compressible(100), small), cuarrow::invalid_argument);
}

TEST_P(Codec, BatchesRunOnThreadsAndNameTheFailingBuffer) {
  std::vector<bytes> ins, framed, outs;
  for (unsigned i = 0; i < 40; ++i) ins.push_back(i % 3 ? compressible(20000 + i * 977, i) : random_bytes(i * 501, i));
  std::vector<cuarrow::ipc::compress_job> cjobs;
  for (const auto& in : ins) {
    framed.emplace_back(static_cast<std::size_t>(cuarrow::ipc::max_framed_size(codec(), in.size())));
    cjobs.push_back({in, framed.back(), 0});
  }
  cuarrow::ipc::compress_all(codec(), cjobs, {}, 4);
  std::vector<cuarrow::ipc::decompress_job> djobs;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    framed[i].resize(static_cast<std::size_t>(cjobs[i].written));
    EXPECT_EQ(framed[i], cuarrow::ipc::compress(codec(), ins[i])) << i;
    outs.emplace_back(ins[i].size());
  }
  for (std::size_t i = 0; i < ins.size(); ++i) djobs.push_back({framed[i], outs[i]});
  for (int threads : {0, 1, 3, 16}) {
    for (auto& o : outs) std::fill(o.begin(), o.end(), std::byte{0xee});
    cuarrow::ipc::decompress_all(codec(), djobs, threads);
    for (std::size_t i = 0; i < ins.size(); ++i) EXPECT_EQ(outs[i], ins[i]) << i << " on " << threads;
  }
  // Buffers 7 and 30 truncated: the error names the first.
  bytes cut7(framed[7].begin(), framed[7].end() - 3), cut30(framed[30].begin(), framed[30].end() - 3);
  djobs[7].framed = cut7;
  djobs[30].framed = cut30;
  const auto e = message_of([&] { cuarrow::ipc::decompress_all(codec(), djobs, 4, "RecordBatch.buffers"); });
  EXPECT_EQ(e.where(), "RecordBatch.buffers[7]");
  EXPECT_THROW(cuarrow::ipc::decompress_all(codec(), djobs, -1), cuarrow::invalid_argument);
}

// ---- ZSTD buffers of several frames, decoded in parts -------------------------

// A ZSTD frame written by hand (RFC 8878): `n` bytes of `value` in RLE
// blocks of at most 128 KiB.  Its header states `states` as the content
// size (a 4-byte field, single segment) or, unset, no size (a 1 MiB
// window).  `bad_block`: a corrupt block first, which only decoding finds
// (walking the frame's block headers does not).
bytes zstd_rle_frame(std::size_t n, unsigned char value, std::optional<std::uint32_t> states, bool bad_block = false) {
  bytes f{std::byte{0x28}, std::byte{0xB5}, std::byte{0x2F}, std::byte{0xFD}};
  if (states) {
    f.push_back(std::byte{0xA0});
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>(*states >> (8 * i)));
  } else {
    f.push_back(std::byte{0x00});
    f.push_back(std::byte{0x50});
  }
  if (bad_block) {  // a 1-byte compressed block (type 2): treeless literals with no table before them
    for (const int b : {0x0C, 0x00, 0x00, 0xFF}) f.push_back(static_cast<std::byte>(b));
  }
  for (std::size_t left = n; left > 0;) {
    const std::size_t m = std::min<std::size_t>(left, 128 << 10);
    const auto h = static_cast<std::uint32_t>((m == left ? 1 : 0) | 1 << 1 | m << 3);
    for (int i = 0; i < 3; ++i) f.push_back(static_cast<std::byte>(h >> (8 * i)));
    f.push_back(static_cast<std::byte>(value));
    left -= m;
  }
  return f;
}

// The frames one after the other, after the prefix `declared` (their sizes'
// sum unless given); the bytes each frame's part starts at are `starts`.
bytes frames_of(const std::vector<bytes>& frames, std::int64_t declared, std::vector<std::size_t>* starts = nullptr) {
  bytes payload;
  for (const bytes& f : frames) {
    if (starts != nullptr) starts->push_back(8 + payload.size());
    payload.insert(payload.end(), f.begin(), f.end());
  }
  return with_prefix(declared, payload);
}

bytes rle_bytes(std::initializer_list<std::pair<std::size_t, unsigned char>> runs) {
  bytes out;
  for (const auto& [n, v] : runs) out.insert(out.end(), n, static_cast<std::byte>(v));
  return out;
}

// Decompresses `framed` with decompress_all on 3 threads; the
// invalid_message's `where` (empty when it decoded) and the output.
std::pair<std::string, bytes> in_parts(const bytes& framed, std::size_t size) {
  bytes out(size);
  const cuarrow::ipc::decompress_job job{framed, out};
  try {
    cuarrow::ipc::decompress_all(compression_codec::zstd, {&job, 1}, 3, "buffers");
  } catch (const invalid_message& e) {
    return {e.where(), out};
  }
  return {"", out};
}

TEST(CodecZstdParts, FramesThatStateTheirSizesDecodeAsPartsAndNameTheBadOne) {
  if (!cuarrow::ipc::codec_available(compression_codec::zstd)) GTEST_FAIL() << "this build lacks zstd";
  constexpr std::uint32_t k300 = 300 << 10;
  const bytes expect = rle_bytes({{k300, 'a'}, {k300, 'b'}, {k300, 'c'}});
  std::vector<std::size_t> at;
  const bytes good =
      frames_of({zstd_rle_frame(k300, 'a', k300), zstd_rle_frame(k300, 'b', k300), zstd_rle_frame(k300, 'c', k300)},
                3 * k300, &at);
  EXPECT_EQ(decompressed(compression_codec::zstd, good), expect);
  EXPECT_EQ(in_parts(good, expect.size()), std::pair(std::string(), expect));
  // The second frame is corrupt: decompress_all names its part.
  std::vector<std::size_t> bad_at;
  const bytes bad = frames_of(
      {zstd_rle_frame(k300, 'a', k300), zstd_rle_frame(k300, 'b', k300, true), zstd_rle_frame(k300, 'c', k300)},
      3 * k300, &bad_at);
  EXPECT_EQ(in_parts(bad, expect.size()).first,
            "buffers[0] (frames at bytes " + std::to_string(bad_at[1]) + " to " + std::to_string(bad_at[2]) + ")");
  EXPECT_THROW((void)decompressed(compression_codec::zstd, bad), invalid_message);
  // A frame that states less than it holds, the next more (the sum is
  // right): its part fails, as the whole buffer does.
  const bytes lying = frames_of(
      {zstd_rle_frame(k300, 'a', k300 - 1000), zstd_rle_frame(k300, 'b', k300 + 1000), zstd_rle_frame(k300, 'c', k300)},
      3 * k300);
  EXPECT_EQ(in_parts(lying, expect.size()).first, "buffers[0] (frames at bytes 8 to " + std::to_string(at[1]) + ")");
  EXPECT_THROW((void)decompressed(compression_codec::zstd, lying), invalid_message);
}

TEST(CodecZstdParts, FramesWithoutSizesOrWhoseSizesDoNotAddUpDecodeWhole) {
  if (!cuarrow::ipc::codec_available(compression_codec::zstd)) GTEST_FAIL() << "this build lacks zstd";
  constexpr std::uint32_t k300 = 300 << 10;
  const bytes expect = rle_bytes({{k300, 'a'}, {k300, 'b'}});
  // No sizes in the headers: one task, decoded whole (the error names the buffer only).
  const bytes unsized =
      frames_of({zstd_rle_frame(k300, 'a', std::nullopt), zstd_rle_frame(k300, 'b', std::nullopt)}, 2 * k300);
  EXPECT_EQ(in_parts(unsized, expect.size()), std::pair(std::string(), expect));
  const bytes unsized_bad =
      frames_of({zstd_rle_frame(k300, 'a', std::nullopt), zstd_rle_frame(k300, 'b', std::nullopt, true)}, 2 * k300);
  EXPECT_EQ(in_parts(unsized_bad, expect.size()).first, "buffers[0]");
  // Sizes that add up to more than the prefix declares: decoded whole, and refused.
  const bytes over = frames_of({zstd_rle_frame(k300, 'a', k300), zstd_rle_frame(k300, 'b', k300 + 1)}, 2 * k300);
  EXPECT_EQ(in_parts(over, expect.size()).first, "buffers[0]");
  // Bytes after the last frame that are no frame: decoded whole, and refused.
  bytes trailing = frames_of({zstd_rle_frame(k300, 'a', k300), zstd_rle_frame(k300, 'b', k300)}, 2 * k300);
  trailing.insert(trailing.end(), 5, std::byte{0x11});
  EXPECT_EQ(in_parts(trailing, expect.size()).first, "buffers[0]");
}

TEST(CodecZstdParts, SmallFramesAreJoinedIntoPartsOfAtLeast256KiB) {
  if (!cuarrow::ipc::codec_available(compression_codec::zstd)) GTEST_FAIL() << "this build lacks zstd";
  constexpr std::uint32_t k100 = 100 << 10;
  // Ten 100 KiB frames: parts of frames 0-2, 3-5, 6-8 and 9 (the last is
  // left small).  Frame 7 bad: the part of 6-8 fails.
  std::vector<bytes> frames;
  bytes expect;
  for (int k = 0; k < 10; ++k) {
    frames.push_back(zstd_rle_frame(k100, static_cast<unsigned char>('a' + k), k100));
    expect.insert(expect.end(), k100, static_cast<std::byte>('a' + k));
  }
  std::vector<std::size_t> at;
  const bytes good = frames_of(frames, 10 * k100, &at);
  EXPECT_EQ(in_parts(good, expect.size()), std::pair(std::string(), expect));
  frames[7] = zstd_rle_frame(k100, 'h', k100, true);
  std::vector<std::size_t> bad7_at;
  const bytes bad = frames_of(frames, 10 * k100, &bad7_at);
  EXPECT_EQ(in_parts(bad, expect.size()).first,
            "buffers[0] (frames at bytes " + std::to_string(at[6]) + " to " + std::to_string(bad7_at[9]) + ")");
  frames[7] = zstd_rle_frame(k100, 'h', k100);
  frames[1] = zstd_rle_frame(k100, 'b', k100, true);
  std::vector<std::size_t> bad_at;
  const bytes bad_early = frames_of(frames, 10 * k100, &bad_at);
  EXPECT_EQ(in_parts(bad_early, expect.size()).first,
            "buffers[0] (frames at bytes 8 to " + std::to_string(bad_at[3]) + ")");
}

// ---- LZ4 frames of independent blocks, decoded in parts -----------------------

// The offset of each block header of the LZ4 frame cuarrow writes for a
// buffer above 4 MiB (a 7-byte descriptor: no content size), in `framed`,
// and the end mark's.
std::vector<std::size_t> lz4_blocks(const bytes& framed) {
  std::vector<std::size_t> at;
  std::size_t pos = 8 + 7;
  for (;;) {
    at.push_back(pos);
    std::uint32_t h = 0;
    std::memcpy(&h, framed.data() + pos, 4);
    if (h == 0) return at;
    pos += 4 + (h & 0x7FFFFFFFU);
  }
}

// The frame `framed` (a buffer cuarrow wrote as blocks full but the last)
// with its last block moved first: still a valid frame, of a short first
// block and a longer last one, whose decoded bytes are `in` turned the same
// way: its last `tail` bytes first.
bytes last_block_first(const bytes& framed, const bytes& in, std::size_t tail, bytes* rotated) {
  const std::vector<std::size_t> at = lz4_blocks(framed);
  const std::size_t last = at[at.size() - 2], end = at.back();
  bytes out(framed.begin(), framed.begin() + static_cast<std::ptrdiff_t>(at.front()));
  out.insert(out.end(), framed.begin() + static_cast<std::ptrdiff_t>(last),
             framed.begin() + static_cast<std::ptrdiff_t>(end));
  out.insert(out.end(), framed.begin() + static_cast<std::ptrdiff_t>(at.front()),
             framed.begin() + static_cast<std::ptrdiff_t>(last));
  out.insert(out.end(), framed.begin() + static_cast<std::ptrdiff_t>(end), framed.end());
  rotated->assign(in.end() - static_cast<std::ptrdiff_t>(tail), in.end());
  rotated->insert(rotated->end(), in.begin(), in.end() - static_cast<std::ptrdiff_t>(tail));
  return out;
}

// Blocks are sized on trust (every one full but the last) and decoded in
// place; a valid frame whose blocks are sized otherwise (a short block
// first, as a flushing encoder writes one) fails the assumption and is
// decoded again the careful way: the bytes are right either way.
TEST(CodecLz4Parts, BlocksSizedOtherwiseThanFullAreDecodedAgain) {
  if (!cuarrow::ipc::codec_available(compression_codec::lz4_frame)) GTEST_FAIL() << "this build lacks lz4";
  constexpr std::size_t chunk = std::size_t{4} << 20, tail = std::size_t{1} << 20;
  const bytes in = compressible(2 * chunk + tail, 23);
  const bytes framed = cuarrow::ipc::compress(compression_codec::lz4_frame, in);
  ASSERT_EQ(lz4_blocks(framed).size(), 4U) << "three blocks and the end mark";
  bytes rotated;
  const bytes moved = last_block_first(framed, in, tail, &rotated);
  ASSERT_EQ(moved.size(), framed.size());
  ASSERT_NE(rotated, in);
  EXPECT_EQ(decompressed(compression_codec::lz4_frame, moved), rotated) << "the whole-frame decoder";
  // With a good frame beside it, in one call, both ways round.
  for (const bool first : {true, false}) {
    bytes a(in.size()), b(in.size());
    const cuarrow::ipc::decompress_job jobs[] = {{first ? moved : framed, a}, {first ? framed : moved, b}};
    cuarrow::ipc::decompress_all(compression_codec::lz4_frame, jobs, 3, "buffers");
    EXPECT_EQ(a, first ? rotated : in);
    EXPECT_EQ(b, first ? in : rotated);
  }
}

TEST(CodecLz4Parts, IndependentBlocksDecodeAsPartsAndNameTheBadOne) {
  if (!cuarrow::ipc::codec_available(compression_codec::lz4_frame)) GTEST_FAIL() << "this build lacks lz4";
  constexpr std::size_t chunk = std::size_t{4} << 20;
  // Three blocks: compressible, incompressible (stored raw), and 300 KiB.
  bytes in = compressible(2 * chunk + (300 << 10), 21);
  const bytes noise = random_bytes(chunk, 22);
  std::memcpy(in.data() + chunk, noise.data(), chunk);
  const bytes framed = cuarrow::ipc::compress(compression_codec::lz4_frame, in);
  const std::vector<std::size_t> at = lz4_blocks(framed);
  ASSERT_EQ(at.size(), 4U) << "three blocks and the end mark";
  std::uint32_t raw = 0;
  std::memcpy(&raw, framed.data() + at[1], 4);
  EXPECT_NE(raw & 0x80000000U, 0U) << "the incompressible block is stored as it is";
  bytes out(in.size());
  const cuarrow::ipc::decompress_job job{framed, out};
  cuarrow::ipc::decompress_all(compression_codec::lz4_frame, {&job, 1}, 3, "buffers");
  EXPECT_EQ(out, in);
  // The third block's first match points before the block's start (its
  // offset made 65535): an independent block cannot reach back, so its part
  // fails, and names its bytes; the whole frame's decoder fails too.
  bytes bad = framed;
  std::size_t pos = at[2] + 4;
  const auto token = std::to_integer<unsigned>(bad[pos++]);
  std::size_t literals = token >> 4;
  if (literals == 15) {
    for (unsigned c = 255; c == 255; literals += c) c = std::to_integer<unsigned>(bad[pos++]);
  }
  pos += literals;
  bad[pos] = std::byte{0xFF};
  bad[pos + 1] = std::byte{0xFF};
  const cuarrow::ipc::decompress_job bad_job{bad, out};
  const auto e = message_of([&] { cuarrow::ipc::decompress_all(compression_codec::lz4_frame, {&bad_job, 1}, 3, "b"); });
  EXPECT_EQ(e.where(), "b[0] (blocks at bytes " + std::to_string(at[2]) + " to " + std::to_string(at[3]) + ")");
  EXPECT_THROW((void)decompressed(compression_codec::lz4_frame, bad), invalid_message);
  // A frame that does not end at the buffer's end is decoded whole (and refused).
  bytes trailing = framed;
  trailing.push_back(std::byte{0});
  const cuarrow::ipc::decompress_job trailing_job{trailing, out};
  const auto t = message_of([&] {
    cuarrow::ipc::decompress_all(compression_codec::lz4_frame, {&trailing_job, 1}, 3, "b");
  });
  EXPECT_EQ(t.where(), "b[0]");
}

}  // namespace
