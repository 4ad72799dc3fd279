// Batched copies (copy_batch / copy_batch_async): every kind of piece in one
// batch, all-or-nothing checks, the staged gather and scatter of many small
// pageable pieces, gaps that must stay untouched, and buffers kept alive.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "fault_api.hpp"
#include "gather_args.h"
#include "test_support.hpp"

using namespace cuarrow_test;

namespace {

// Small chunks and threshold, so that a few hundred KiB exercise the
// pipeline's chunk boundaries, its ramp and several workers.
class BatchCopy : public small_staging_test {};

cuarrow::buffer host_copy(const std::vector<std::uint8_t>& v) {
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(v.size()));
  std::memcpy(b.mutable_host_data(), v.data(), v.size());
  return b;
}

// Pieces of odd sizes at odd offsets, with gaps of 0..300 bytes between
// them; returns the pieces' (offset, size) and the total span.
struct layout {
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  std::int64_t span = 0;
};

layout odd_layout(int count, unsigned seed) {
  layout l;
  std::int64_t at = 3;
  unsigned x = seed;
  for (int i = 0; i < count; ++i) {
    x = x * 1103515245u + 12345u;
    const std::int64_t size = 1 + static_cast<std::int64_t>((x >> 8) % 9000);
    const std::int64_t gap = static_cast<std::int64_t>((x >> 20) % 301);
    l.pieces.emplace_back(at, size);
    at += size + gap;
  }
  l.span = at + 7;
  return l;
}

}  // namespace

TEST_F(BatchCopy, EveryKindOfPieceInOneBatch) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 5000;
  auto a = pattern(n, 1), b = pattern(n, 2), c = pattern(n, 3);
  cuarrow::buffer pageable = host_copy(a);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  std::memcpy(pinned.mutable_host_data(), b.data(), n);
  cuarrow::buffer dev_c = cuarrow::copy_to_device(ctx, c.data(), n);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 3 * n, s);
  cuarrow::buffer back = cuarrow::allocate_host(3 * n);
  cuarrow::buffer host_to_host = cuarrow::allocate_host(n);
  std::vector<cuarrow::copy_piece> up = {
      {dev, 0, pageable, 0, n},           // pageable host -> device
      {dev, n, pinned, 0, n},             // pinned host -> device
      {dev, 2 * n, dev_c, 0, n},          // device -> device
      {host_to_host, 0, pageable, 0, n},  // host -> host
  };
  cuarrow::copy_batch(up, s);
  std::vector<cuarrow::copy_piece> down = {{back, 0, dev, 0, 3 * n}};
  cuarrow::copy_batch(down, s);
  EXPECT_EQ(0, std::memcmp(back.host_data(), a.data(), n));
  EXPECT_EQ(0, std::memcmp(back.host_data() + n, b.data(), n));
  EXPECT_EQ(0, std::memcmp(back.host_data() + 2 * n, c.data(), n));
  EXPECT_EQ(0, std::memcmp(host_to_host.host_data(), a.data(), n));
}

TEST_F(BatchCopy, ABadPieceRefusesTheWholeBatchAndSaysWhich) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 256;
  auto a = pattern(n, 4);
  cuarrow::buffer src = host_copy(a);
  cuarrow::buffer dst = cuarrow::allocate_host(2 * n);
  std::memset(dst.mutable_host_data(), 0x5a, 2 * n);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, n);
  std::vector<cuarrow::copy_piece> pieces = {{dst, 0, src, 0, n}, {dev, 0, src, 0, n}, {dst, n, dev, 1, n}};
  try {
    cuarrow::copy_batch(pieces);
    FAIL() << "an overrunning piece was accepted";
  } catch (const cuarrow::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("piece 2 of the batch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overruns the source buffer"), std::string::npos) << e.what();
  }
  // Nothing was copied, not even the good pieces before the bad one.
  for (std::int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(static_cast<unsigned>(dst.host_data()[i]), 0x5au);

  std::vector<cuarrow::copy_piece> read_only = {{dst.as_read_only(), 0, src, 0, n}};
  EXPECT_THROW(cuarrow::copy_batch(read_only), cuarrow::read_only);
  std::vector<cuarrow::copy_piece> negative = {{dst, 0, src, 0, -1}};
  EXPECT_THROW(cuarrow::copy_batch(negative), cuarrow::out_of_range);
}

TEST_F(BatchCopy, OverlappingDestinationsAreRefused) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer src = host_copy(pattern(100, 5));
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 100);
  std::vector<cuarrow::copy_piece> pieces = {{dev, 0, src, 0, 60}, {dev, 50, src, 0, 50}};
  try {
    cuarrow::copy_batch(pieces);
    FAIL() << "overlapping destinations were accepted";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("overlapping"), std::string::npos) << e.what();
  }
  // Touching is not overlapping; slices of one buffer are compared by address.
  std::vector<cuarrow::copy_piece> touching = {{dev.slice(0, 50), 0, src, 0, 50}, {dev, 50, src, 50, 50}};
  EXPECT_NO_THROW(cuarrow::copy_batch(touching));
}

TEST_F(BatchCopy, ManyPageablePiecesAreStagedTogetherAndGapsStayUntouched) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const layout l = odd_layout(300, 7);
  auto fill = pattern(static_cast<std::size_t>(l.span), 99);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, fill.data(), l.span);
  // One pageable source per piece, as the buffers of an Arrow table are.
  std::vector<cuarrow::buffer> sources;
  std::vector<cuarrow::copy_piece> pieces;
  std::vector<std::uint8_t> expected = fill;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < l.pieces.size(); ++i) {
    auto [offset, size] = l.pieces[i];
    auto data = pattern(static_cast<std::size_t>(size), static_cast<unsigned>(i + 1000));
    sources.push_back(host_copy(data));
    pieces.push_back({dev, offset, sources.back(), 0, size});
    std::memcpy(expected.data() + offset, data.data(), static_cast<std::size_t>(size));
    total += size;
  }
  ASSERT_GT(total, 1 << 20);  // several chunks of 64 KiB
  ctx.reset_transfer_stats();
  cuarrow::copy_batch(pieces);
  EXPECT_EQ(ctx.transfer_stats().staged_bytes, total);
  EXPECT_EQ(ctx.transfer_stats().host_to_device_bytes, total);
  EXPECT_EQ(to_vector(dev), expected) << "pieces land where asked, gaps keep their bytes";
}

// Pinned memory seen as ordinary host memory (a pyarrow table built on a
// HostBuffer, say): pieces too small to be staged on their own travel with
// the batch's staged chunks without a driver call each; a piece large enough
// to be staged alone is asked about and, pinned, goes straight to the DMA.
TEST_F(BatchCopy, SmallPinnedPiecesTravelWithTheStagedBatchLargeOnesGoDirect) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t threshold = cuarrow::get_transfer_options().staging_threshold_bytes;
  const std::int64_t small = 5000, count = 40, large = threshold + 123;
  ASSERT_GE(small * count, threshold);  // the batch's host bytes are enough to stage
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, small * count + large);
  auto data = pattern(static_cast<std::size_t>(small * count + large), 31);
  std::memcpy(pinned.mutable_host_data(), data.data(), data.size());
  // Plain host views of the pinned memory: type cpu, as a foreign buffer is.
  cuarrow::buffer as_host = cuarrow::wrap_host(pinned.host_data(), pinned.size(), nullptr);
  ASSERT_EQ(as_host.type(), cuarrow::device_type::cpu);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, small * count + large + 64 * count);
  // The gaps between the pieces are read back below (the staged copy down
  // merges across them): give them defined contents (compute-sanitizer's
  // initcheck reports reads of never-written device memory).
  cuarrow::fill_async(dev, 0, dev.size(), 0, cuarrow::stream_view());
  std::vector<cuarrow::copy_piece> pieces;
  for (std::int64_t i = 0; i < count; ++i) pieces.push_back({dev, i * (small + 64), as_host, i * small, small});
  const std::int64_t large_at = count * (small + 64);
  pieces.push_back({dev, large_at, as_host, count * small, large});
  ctx.reset_transfer_stats();
  cuarrow::copy_batch(pieces);
  EXPECT_EQ(ctx.transfer_stats().staged_bytes, small * count) << "the small pieces staged, the large one direct";
  EXPECT_EQ(ctx.transfer_stats().host_to_device_bytes, small * count + large);
  const std::vector<std::uint8_t> got = to_vector(dev);
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(0, std::memcmp(got.data() + i * (small + 64), data.data() + i * small, static_cast<std::size_t>(small)))
        << "piece " << i;
  }
  EXPECT_EQ(0, std::memcmp(got.data() + large_at, data.data() + count * small, static_cast<std::size_t>(large)));

  // The same both ways: device to pinned destinations seen as host memory.
  cuarrow::buffer back_pinned = cuarrow::allocate_pinned(ctx, small * count + large);
  std::memset(back_pinned.mutable_host_data(), 0, static_cast<std::size_t>(back_pinned.size()));
  cuarrow::buffer back = cuarrow::wrap_host(back_pinned.host_data(), back_pinned.size(), nullptr);
  std::vector<cuarrow::copy_piece> down;
  for (std::int64_t i = 0; i < count; ++i) down.push_back({back, i * small, dev, i * (small + 64), small});
  down.push_back({back, count * small, dev, large_at, large});
  ctx.reset_transfer_stats();
  cuarrow::copy_batch(down);
  EXPECT_EQ(ctx.transfer_stats().staged_bytes, small * count);
  EXPECT_EQ(0, std::memcmp(back_pinned.host_data(), data.data(), data.size()));
}

TEST_F(BatchCopy, WritableGapsLetNeighboursShareADma) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const layout l = odd_layout(200, 8);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, l.span);
  cuarrow::buffer whole_src = host_copy(pattern(static_cast<std::size_t>(l.span), 55));
  std::vector<cuarrow::copy_piece> pieces;
  for (auto [offset, size] : l.pieces) pieces.push_back({dev, offset, whole_src, offset, size});
  cuarrow::batch_copy_options o;
  o.destination_gaps_writable = true;
  for (std::int64_t threshold : {std::int64_t{64} << 10, std::int64_t{0}}) {  // staged, then direct
    cuarrow::transfer_options t = cuarrow::get_transfer_options();
    t.staging_threshold_bytes = threshold;
    cuarrow::set_transfer_options(t);
    cuarrow::fill_async(dev, 0, l.span, 0, cuarrow::stream_view{});
    ctx.synchronize();
    cuarrow::copy_batch(pieces, {}, o);
    const std::vector<std::uint8_t> got = to_vector(dev);
    const std::uint8_t* want = reinterpret_cast<const std::uint8_t*>(whole_src.host_data());
    for (auto [offset, size] : l.pieces) {
      ASSERT_EQ(0, std::memcmp(got.data() + offset, want + offset, static_cast<std::size_t>(size)))
          << "threshold " << threshold << ", piece at " << offset;
    }
  }
}

TEST_F(BatchCopy, DeviceToScatteredPageableDestinations) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const layout l = odd_layout(250, 9);
  auto data = pattern(static_cast<std::size_t>(l.span), 77);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, data.data(), l.span);
  cuarrow::buffer host = cuarrow::allocate_host(l.span);
  std::memset(host.mutable_host_data(), 0xee, static_cast<std::size_t>(l.span));
  std::vector<cuarrow::copy_piece> pieces;
  std::vector<std::uint8_t> expected(static_cast<std::size_t>(l.span), 0xee);
  for (auto [offset, size] : l.pieces) {
    pieces.push_back({host, offset, dev, offset, size});
    std::memcpy(expected.data() + offset, data.data() + offset, static_cast<std::size_t>(size));
  }
  ctx.reset_transfer_stats();
  cuarrow::copy_batch(pieces);
  EXPECT_GT(ctx.transfer_stats().staged_bytes, 0);
  EXPECT_EQ(0, std::memcmp(host.host_data(), expected.data(), expected.size()))
      << "every piece arrived, host bytes between pieces untouched";
}

// Host memory the copy reads may still be written by work queued earlier on
// the stream (here a slow copy into pinned memory, seen as ordinary host
// memory): gathered and staged batches read it only after that work, as a
// DMA queued behind it would.
TEST_F(BatchCopy, HostReadsOfABatchComeAfterEarlierWorkOnTheStream) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t threshold = cuarrow::get_transfer_options().staging_threshold_bytes;
  for (const std::int64_t piece : {std::int64_t{1000}, threshold / 4}) {  // gathered, then staged (4 x 16 pieces)
    const std::int64_t count = 16, total = piece * count;
    auto fresh = pattern(static_cast<std::size_t>(total), static_cast<unsigned>(piece));
    cuarrow::buffer dev_fresh = cuarrow::copy_to_device(ctx, fresh.data(), total);
    cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, total);
    std::memset(pinned.mutable_host_data(), 0xab, static_cast<std::size_t>(total));  // stale bytes
    cuarrow::buffer as_host = cuarrow::wrap_host(pinned.host_data(), total, nullptr);
    cuarrow::buffer dev = cuarrow::allocate_device(ctx, total + 64 * count);
    cuarrow::fill_async(dev, 0, dev.size(), 0, s);  // the gaps are read back below (initcheck)
    std::vector<cuarrow::copy_piece> pieces;
    for (std::int64_t i = 0; i < count; ++i) pieces.push_back({dev, i * (piece + 64), as_host, i * piece, piece});
    {
      scoped_op_delay delay(20000);
      cuarrow::copy_async(pinned, 0, dev_fresh, 0, total, s);  // writes the sources, later
      cuarrow::copy_batch_async(pieces, s);
    }
    s.synchronize();
    const std::vector<std::uint8_t> got = to_vector(dev);
    for (std::int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(0,
                std::memcmp(got.data() + i * (piece + 64), fresh.data() + i * piece, static_cast<std::size_t>(piece)))
          << "pieces of " << piece << " bytes: piece " << i << " read before the earlier copy wrote it";
    }
  }
}

// Small pieces of ordinary memory, each its own allocation as a table's
// columns are, gathered into one DMA per destination run: right bytes,
// writable gaps zeroed between neighbours, other gaps untouched.
TEST_F(BatchCopy, SmallPiecesAreGatheredIntoOneDmaPerDestinationRun) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::transfer_options t = cuarrow::get_transfer_options();
  t.staging_threshold_bytes = 1 << 20;  // the fixture restores it
  cuarrow::set_transfer_options(t);
  const layout l = odd_layout(40, 21);
  auto fill = pattern(static_cast<std::size_t>(l.span), 5);
  ASSERT_LT(l.span, t.staging_threshold_bytes);  // the batch stays below the threshold
  for (const bool gaps_writable : {false, true}) {
    cuarrow::buffer dev = cuarrow::copy_to_device(ctx, fill.data(), l.span);
    std::vector<cuarrow::buffer> sources;
    std::vector<cuarrow::copy_piece> pieces;
    std::vector<std::uint8_t> expected = fill;
    for (std::size_t i = 0; i < l.pieces.size(); ++i) {
      auto [offset, size] = l.pieces[i];
      auto data = pattern(static_cast<std::size_t>(size), static_cast<unsigned>(i + 7));
      sources.push_back(host_copy(data));
      pieces.push_back({dev, offset, sources.back(), 0, size});
      std::memcpy(expected.data() + offset, data.data(), static_cast<std::size_t>(size));
    }
    cuarrow::batch_copy_options o;
    o.destination_gaps_writable = gaps_writable;
    ctx.reset_transfer_stats();
    cuarrow::copy_batch(pieces, {}, o);
    EXPECT_EQ(ctx.transfer_stats().staged_bytes, 0) << "below the threshold: no pipeline";
    const std::vector<std::uint8_t> got = to_vector(dev);
    std::int64_t previous_end = 0;
    for (auto [offset, size] : l.pieces) {
      ASSERT_EQ(0, std::memcmp(got.data() + offset, expected.data() + offset, static_cast<std::size_t>(size)))
          << "piece at " << offset;
      for (std::int64_t k = previous_end; k < offset; ++k) {
        // A writable gap of up to 256 bytes between neighbours travels as zeros; every other byte keeps its value.
        const bool zeroed = gaps_writable && previous_end > 0 && offset - previous_end <= 256;
        ASSERT_EQ(got[static_cast<std::size_t>(k)], zeroed ? 0 : expected[static_cast<std::size_t>(k)])
            << "gap byte " << k << (gaps_writable ? " (writable gaps)" : "");
      }
      previous_end = offset + size;
    }
  }
}

// With the pinned result pool at its limit there is no block to gather
// into: the small pieces go to the driver one by one, and arrive all the same.
TEST_F(BatchCopy, SmallPiecesStillArriveWhenThePinnedPoolIsFull) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::transfer_options t = cuarrow::get_transfer_options();
  t.staging_threshold_bytes = 1 << 20;
  t.pinned_pool_limit_bytes = 0;  // the fixture restores both
  cuarrow::set_transfer_options(t);
  cuarrow::trim_pinned_pool();  // no cached block to reuse either
  ASSERT_FALSE(cuarrow::try_allocate_pinned_pooled(ctx, 4096).has_value());
  const std::int64_t piece = 3000, count = 12;
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, piece * count);
  std::vector<cuarrow::buffer> sources;
  std::vector<cuarrow::copy_piece> pieces;
  std::vector<std::uint8_t> expected;
  for (std::int64_t i = 0; i < count; ++i) {
    auto data = pattern(static_cast<std::size_t>(piece), static_cast<unsigned>(i + 300));
    sources.push_back(host_copy(data));
    pieces.push_back({dev, i * piece, sources.back(), 0, piece});
    expected.insert(expected.end(), data.begin(), data.end());
  }
  cuarrow::copy_batch(pieces);
  EXPECT_EQ(to_vector(dev), expected);
}

TEST_F(BatchCopy, AsyncBatchKeepsItsBuffersAlive) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 4096;
  auto a = pattern(n, 10);
  const std::int64_t base = ctx.bytes_allocated();
  cuarrow::buffer out = cuarrow::allocate_pinned(ctx, 2 * n);
  {
    scoped_op_delay delay(20000);
    {
      cuarrow::buffer dev1 = cuarrow::copy_to_device(ctx, a.data(), n);
      cuarrow::buffer dev2 = cuarrow::copy_to_device(ctx, a.data(), n);
      std::vector<cuarrow::copy_piece> pieces = {{out, 0, dev1, 0, n}, {out, n, dev2, 0, n}};
      cuarrow::copy_batch_async(pieces, s);
    }  // the device buffers are dropped while the copies are queued
    EXPECT_GE(ctx.bytes_allocated(), base + 2 * n);
    s.synchronize();
  }
  EXPECT_EQ(0, std::memcmp(out.host_data(), a.data(), n));
  EXPECT_EQ(0, std::memcmp(out.host_data() + n, a.data(), n));
  ctx.synchronize();
  cuarrow::copy_batch({}, s);  // an empty batch collects the deferred releases too
  EXPECT_EQ(ctx.bytes_allocated(), base);
}

TEST_F(BatchCopy, AStreamOfAnotherDeviceIsRefusedNamingThePiece) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  cuarrow::stream s1(c1);
  cuarrow::buffer src = host_copy(pattern(64, 11));
  cuarrow::buffer d0 = cuarrow::allocate_device(c0, 64);
  cuarrow::buffer d1 = cuarrow::allocate_device(c1, 64);
  std::vector<cuarrow::copy_piece> pieces = {{d1, 0, src, 0, 64}, {d0, 0, src, 0, 64}};
  try {
    cuarrow::copy_batch(pieces, s1);
    FAIL() << "a stream of device 1 was accepted for device 0's memory";
  } catch (const cuarrow::device_mismatch& e) {
    EXPECT_NE(std::string(e.what()).find("piece 1 of the batch"), std::string::npos) << e.what();
  }
  // Pieces on two devices with the default stream: each on its own device.
  cuarrow::copy_batch(pieces);
  EXPECT_EQ(to_vector(d0), to_vector(d1));
}

// ---- many device-to-device pieces: cuMemcpyBatchAsync, or one copy each ----------------

namespace {

// CUARROW_EMULATED_NO_BATCH_COPY: the emulation plays a driver without
// cuMemcpyBatchAsync (ctest runs BatchCopy.* both ways).
bool batch_entry_hidden() {
  const char* v = std::getenv("CUARROW_EMULATED_NO_BATCH_COPY");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// `count` small device-to-device pieces with gaps (so that none merge) from
// one allocation to another, copied with copy_batch on `s`; checks the
// result against the same pieces copied one cuarrow::copy at a time, gaps
// included (they must keep the destination's earlier bytes).
void many_small_device_pieces(int count, cuarrow::stream_view s, bool gather) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::transfer_options o = cuarrow::get_transfer_options();
  o.device_gather = gather;  // the fixture restores the options
  cuarrow::set_transfer_options(o);
  layout l;
  unsigned x = 99;
  for (std::int64_t at = 1; static_cast<int>(l.pieces.size()) < count;) {
    x = x * 1103515245u + 12345u;
    const std::int64_t size = 1 + static_cast<std::int64_t>((x >> 8) % 40);
    l.pieces.emplace_back(at, size);
    at += size + 1 + static_cast<std::int64_t>((x >> 20) % 7);
    l.span = at + 3;
  }
  const auto src_bytes = pattern(static_cast<std::size_t>(l.span), 7);
  const auto old_bytes = pattern(static_cast<std::size_t>(l.span), 8);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, src_bytes.data(), l.span);
  cuarrow::buffer batched = cuarrow::copy_to_device(ctx, old_bytes.data(), l.span);
  cuarrow::buffer one_by_one = cuarrow::copy_to_device(ctx, old_bytes.data(), l.span);
  std::vector<cuarrow::copy_piece> pieces;
  // Destinations shifted by one piece: sources and destinations differ.
  for (std::size_t i = 0; i < l.pieces.size(); ++i) {
    const auto [at, size] = l.pieces[i];
    const auto src_at = l.pieces[(i + 1) % l.pieces.size()].first;
    pieces.push_back({batched, at, src, src_at, std::min(size, l.pieces[(i + 1) % l.pieces.size()].second)});
  }
  const fault_api& f = faults();
  if (f.available()) f.reset_calls();
  cuarrow::copy_batch(pieces, s);
  const std::size_t batch_calls = f.available() ? f.calls("cuMemcpyBatchAsync") : 0;
  const std::size_t single_calls = f.available() ? f.calls("cuMemcpyDtoDAsync") : 0;
  const std::size_t launches = f.available() ? f.calls("cuLaunchKernel") : 0;
  for (const cuarrow::copy_piece& p : pieces) cuarrow::copy(one_by_one, p.dst_offset, src, p.src_offset, p.size, s);
  EXPECT_EQ(to_vector(one_by_one), to_vector(batched));
  // The batch wrote the pieces and nothing else.
  EXPECT_NE(to_vector(batched), old_bytes);
  if (!f.available()) return;
  if (gather) {
    // cuarrow's gather kernel: one launch per 1,000 pieces, no driver copy.
    EXPECT_EQ(ctx.gather_status(), "ready");
    EXPECT_EQ(launches, (static_cast<std::size_t>(count) + 999) / 1000);
    EXPECT_EQ(batch_calls, 0u);
    EXPECT_EQ(single_calls, 0u);
    return;
  }
  EXPECT_EQ(launches, 0u);
  const bool batched_call = !batch_entry_hidden();
  if (batched_call) {
    // One call per few thousand pieces, none one by one.
    EXPECT_GE(batch_calls, 1u);
    EXPECT_LE(batch_calls, static_cast<std::size_t>(count) / 1000 + 1);
    EXPECT_EQ(single_calls, 0u);
  } else {
    EXPECT_EQ(batch_calls, 0u);
    EXPECT_EQ(single_calls, static_cast<std::size_t>(count));
  }
}

}  // namespace

TEST_F(BatchCopy, ThousandsOfSmallDevicePiecesEqualCopyingEachAlone) {
  cuarrow::stream s(cuarrow::context::get(0));
  many_small_device_pieces(10000, s, false);
}

// The same pieces through cuarrow's gather kernel (transfer_options::
// device_gather, the default): ten launches of 1,000.
TEST_F(BatchCopy, ThousandsOfSmallDevicePiecesByTheGatherKernel) {
  cuarrow::stream s(cuarrow::context::get(0));
  many_small_device_pieces(10000, s, true);
}

namespace {

// Driver calls and launches of one batch within the device.
struct device_batch_calls {
  std::size_t launches = 0, singles = 0, batched = 0;
};

// Runs of the given sizes, 64 bytes apart (so that none merge), from one
// allocation to another under device_gather_max_run_bytes = `max_run`; checks
// the bytes, and returns the calls the batch made.
device_batch_calls copy_runs(const std::vector<std::int64_t>& sizes, std::int64_t max_run) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow::transfer_options o = cuarrow::get_transfer_options();
  o.device_gather_max_run_bytes = max_run;  // the fixture restores the options
  cuarrow::set_transfer_options(o);
  std::int64_t span = 0;
  for (std::int64_t n : sizes) span += n + 64;
  const auto src_bytes = pattern(static_cast<std::size_t>(span), 21);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, src_bytes.data(), span);
  cuarrow::buffer dst = cuarrow::allocate_device(ctx, span, s);
  std::vector<cuarrow::copy_piece> pieces;
  std::int64_t at = 0;
  for (std::int64_t n : sizes) {
    pieces.push_back({dst, at, src, at, n});
    at += n + 64;
  }
  const fault_api& f = faults();
  if (f.available()) f.reset_calls();
  cuarrow::copy_batch(pieces, s);
  device_batch_calls calls;
  if (f.available()) calls = {f.calls("cuLaunchKernel"), f.calls("cuMemcpyDtoDAsync"), f.calls("cuMemcpyBatchAsync")};
  std::vector<std::uint8_t> back(static_cast<std::size_t>(span));
  cuarrow::copy_to_host(back.data(), dst, 0, span);
  for (const cuarrow::copy_piece& p : pieces) {
    EXPECT_EQ(
        0, std::memcmp(back.data() + p.dst_offset, src_bytes.data() + p.src_offset, static_cast<std::size_t>(p.size)))
        << "the run at " << p.dst_offset;
  }
  return calls;
}

}  // namespace

// The gather kernel's largest run is a transfer option: runs from it on get
// one driver copy each (the copy engines), the smaller ones one launch; 0
// lets the kernel take every run.  A batch with too few runs below the line
// for a launch keeps the driver's copies.
TEST_F(BatchCopy, GatherKernelTakesRunsBelowItsLine) {
  // The bytes are checked everywhere; the calls are counted on the emulation.
  const bool counted = faults().available();
  if (counted) {
    ASSERT_EQ(cuarrow::context::get(0).gather_status(), "ready");
  }
  const std::int64_t kib = 1 << 10;
  const std::int64_t default_line = cuarrow::transfer_options{}.device_gather_max_run_bytes;
  const std::int64_t eight_mib = 8 << 20;
  std::vector<std::int64_t> mixed(8, 3 * kib);  // 8 small runs: a launch
  mixed.insert(mixed.end(), 4, 600 * kib);      // 4 above a 512 KiB line
  device_batch_calls c = copy_runs(mixed, 512 * kib);
  if (counted) {
    EXPECT_EQ(c.launches, 1u);
    EXPECT_EQ(c.singles, 4u);
  }
  // Under the default (no line) the kernel takes all twelve.
  EXPECT_EQ(default_line, 0);
  c = copy_runs(mixed, default_line);
  if (counted) {
    EXPECT_EQ(c.launches, 1u);
    EXPECT_EQ(c.singles, 0u);
  }
  // Eight runs above a 512 KiB line: none for the kernel, so the driver's
  // batch takes them all (its own line is 8 MiB).
  c = copy_runs(std::vector<std::int64_t>(8, 600 * kib), 512 * kib);
  if (counted) {
    EXPECT_EQ(c.launches, 0u);
    EXPECT_EQ(c.singles + c.batched, batch_entry_hidden() ? 8u : 1u);
  }
  // Runs an 8 MiB line sends to the copy engines, one driver copy each;
  // with no line (0) the kernel takes them.
  const std::vector<std::int64_t> huge(8, 9 << 20);
  c = copy_runs(huge, eight_mib);
  if (counted) {
    EXPECT_EQ(c.launches, 0u);
    EXPECT_EQ(c.singles, 8u);
  }
  c = copy_runs(huge, 0);
  if (counted) {
    EXPECT_EQ(c.launches, 1u);
    EXPECT_EQ(c.singles, 0u);
  }
}

// Every alignment the kernel tells apart (both sides 16-, 8-, 4-byte
// aligned alike, or not at all), pieces of one byte to several tiles
// (16 KiB, gather_args.h's CUARROW_GATHER_TILE) with ends on and off tile
// boundaries, and about the line (128
// bytes) past a tile where, for a destination off a line, the next tile
// starts: the bytes of one copy each.
TEST_F(BatchCopy, GatherKernelCopiesEveryAlignmentAndTileBoundary) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t tile = CUARROW_GATHER_TILE;
  const std::vector<std::int64_t> sizes = {
      1,        3,        7,         16,         31,         100,        tile - 1,      tile,
      tile + 1, tile + 9, tile + 24, tile + 127, tile + 128, tile + 129, 2 * tile + 64, 3 * tile + 5};
  const std::vector<std::int64_t> shifts = {0, 1, 4, 8, 12, 15, 16, 33};
  struct planned {
    std::int64_t dst, src, size;
  };
  std::vector<planned> plan;
  std::int64_t dst_at = 0, src_at = 0;
  for (std::size_t k = 0; k < sizes.size() * shifts.size(); ++k) {
    const std::int64_t size = sizes[k % sizes.size()];
    const std::int64_t shift = shifts[(k / sizes.size() + k) % shifts.size()];
    dst_at = (dst_at + 63) / 64 * 64 + shifts[k % shifts.size()];
    src_at = (src_at + 63) / 64 * 64 + shift;
    plan.push_back({dst_at, src_at, size});
    dst_at += size + 1;
    src_at += size + 3;
  }
  const auto src_bytes = pattern(static_cast<std::size_t>(src_at), 5);
  const auto old_bytes = pattern(static_cast<std::size_t>(dst_at), 6);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, src_bytes.data(), src_at);
  cuarrow::buffer gathered = cuarrow::copy_to_device(ctx, old_bytes.data(), dst_at);
  cuarrow::buffer one_by_one = cuarrow::copy_to_device(ctx, old_bytes.data(), dst_at);
  std::vector<cuarrow::copy_piece> pieces;
  for (const planned& p : plan) pieces.push_back({gathered, p.dst, src, p.src, p.size});
  const fault_api& f = faults();
  if (f.available()) f.reset_calls();
  cuarrow::stream s(ctx);
  cuarrow::copy_batch(pieces, s);
  if (f.available()) {
    EXPECT_EQ(f.calls("cuLaunchKernel"), 1u);
    EXPECT_EQ(f.calls("cuMemcpyDtoDAsync") + f.calls("cuMemcpyBatchAsync"), 0u);
  }
  for (const planned& p : plan) cuarrow::copy(one_by_one, p.dst, src, p.src, p.size, s);
  EXPECT_EQ(to_vector(one_by_one), to_vector(gathered));
  EXPECT_NE(to_vector(gathered), old_bytes);
}

// Small reads of device memory into pinned memory (what a layout's or a
// check's batched reads are): with the gather kernel running they are
// gathered by it, written through the pinned memory's host pointer, one
// launch and no driver copy; into pageable memory, which no kernel can
// reach, they stay the driver's.  The same bytes either way, at every
// alignment.
TEST_F(BatchCopy, SmallReadsIntoPinnedMemoryByTheGatherKernel) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 300;
  const auto bytes = pattern(static_cast<std::size_t>(4 * n), 8);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, bytes.data(), 4 * n);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 2 * n);
  std::vector<std::uint8_t> pageable_bytes(static_cast<std::size_t>(2 * n), 0);
  cuarrow::buffer pageable = cuarrow::wrap_host(pageable_bytes.data(), 2 * n, nullptr);
  std::memset(pinned.mutable_host_data(), 0, static_cast<std::size_t>(2 * n));
  const fault_api& f = faults();
  ctx.reset_transfer_stats();
  for (const cuarrow::buffer* dst : {&pinned, &pageable}) {
    SCOPED_TRACE(dst == &pinned ? "into pinned memory" : "into pageable memory");
    // Reads of 1 or 2 bytes from every fourth byte, side by side in the
    // destination.
    std::vector<cuarrow::copy_piece> pieces;
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < n && at < 2 * n - 1; ++i) {
      const std::int64_t size = 1 + i % 2;
      pieces.push_back({*dst, at, src, 4 * i + i % 3, size});
      at += size;
    }
    if (f.available()) f.reset_calls();
    cuarrow::stream s(ctx);
    cuarrow::copy_batch(pieces, s);
    const auto* got = reinterpret_cast<const std::uint8_t*>(dst->host_data());
    for (const cuarrow::copy_piece& p : pieces) {
      for (std::int64_t k = 0; k < p.size; ++k) {
        ASSERT_EQ(got[p.dst_offset + k], bytes[static_cast<std::size_t>(p.src_offset + k)]) << p.dst_offset + k;
      }
    }
    if (f.available()) {
      const std::size_t launches = f.calls("cuLaunchKernel");
      const std::size_t driver_copies =
          f.calls("cuMemcpyDtoHAsync") + f.calls("cuMemcpyAsync") + f.calls("cuMemcpyBatchAsync");
      if (dst == &pinned && ctx.gather_status() == "ready") {
        EXPECT_EQ(launches, 1u);
        EXPECT_EQ(driver_copies, 0u);
      } else {
        EXPECT_EQ(launches, 0u);
        EXPECT_GE(driver_copies, 1u);
      }
    }
  }
  EXPECT_EQ(ctx.transfer_stats().device_to_device_bytes, 0) << "reads count as reads";

  // Bulk reads (over 64 KiB each) keep the copy engines.
  if (f.available()) {
    const std::int64_t piece = 128 << 10, count = 8;
    cuarrow::buffer big = cuarrow::allocate_device(ctx, piece * count * 2);
    cuarrow::buffer into = cuarrow::allocate_pinned(ctx, piece * count);
    std::vector<cuarrow::copy_piece> bulk;
    for (std::int64_t i = 0; i < count; ++i) bulk.push_back({into, i * piece, big, 2 * i * piece, piece});
    f.reset_calls();
    cuarrow::copy_batch(bulk);
    EXPECT_EQ(f.calls("cuLaunchKernel"), 0u);
  }
}

// Small copies from pinned memory into device memory (an IPC stream's
// metadata and end marker) go the other way through the kernel: it reads
// the pinned memory through its host pointer, in the launch of the copies
// within the device, instead of a driver copy each that the GPU would run
// between launches.  From pageable memory they stay the driver's.  The
// same bytes either way, at every alignment, counted as host-to-device.
TEST_F(BatchCopy, SmallCopiesFromPinnedMemoryByTheGatherKernel) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 300;
  const auto bytes = pattern(static_cast<std::size_t>(2 * n), 9);
  const auto old_bytes = pattern(static_cast<std::size_t>(4 * n), 10);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 2 * n);
  std::memcpy(pinned.mutable_host_data(), bytes.data(), bytes.size());
  std::vector<std::uint8_t> pageable_bytes(bytes);
  cuarrow::buffer pageable = cuarrow::wrap_host(pageable_bytes.data(), 2 * n, nullptr);
  const fault_api& f = faults();
  for (const cuarrow::buffer* src : {&pinned, &pageable}) {
    SCOPED_TRACE(src == &pinned ? "from pinned memory" : "from pageable memory");
    cuarrow::buffer dst = cuarrow::copy_to_device(ctx, old_bytes.data(), 4 * n);
    // Copies of 1 or 2 bytes, side by side in the source, to every fourth
    // byte of the destination.
    std::vector<cuarrow::copy_piece> pieces;
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < n && at < 2 * n - 1; ++i) {
      const std::int64_t size = 1 + i % 2;
      pieces.push_back({dst, 4 * i + i % 3, *src, at, size});
      at += size;
    }
    std::vector<std::uint8_t> expect(old_bytes);
    for (const cuarrow::copy_piece& p : pieces) {
      std::memcpy(expect.data() + p.dst_offset, bytes.data() + p.src_offset, static_cast<std::size_t>(p.size));
    }
    if (f.available()) f.reset_calls();
    ctx.reset_transfer_stats();
    cuarrow::stream s(ctx);
    cuarrow::copy_batch(pieces, s);
    const cuarrow::transfer_statistics stats = ctx.transfer_stats();
    if (f.available()) {
      const std::size_t launches = f.calls("cuLaunchKernel");
      const std::size_t driver_copies =
          f.calls("cuMemcpyHtoDAsync") + f.calls("cuMemcpyAsync") + f.calls("cuMemcpyBatchAsync");
      if (src == &pinned && ctx.gather_status() == "ready") {
        EXPECT_EQ(launches, 1u);
        EXPECT_EQ(driver_copies, 0u);
      } else {
        EXPECT_EQ(launches, 0u);
        EXPECT_GE(driver_copies, 1u);
      }
    }
    EXPECT_EQ(to_vector(dst), expect);
    EXPECT_EQ(stats.device_to_device_bytes, 0) << "writes count as writes";
    EXPECT_EQ(stats.host_to_device_bytes, at);
  }
}

// The child modes' copy: 64 one-byte pieces within the device into every
// other byte of a zeroed buffer, in one copy_batch whose driver calls are
// counted from a reset.  0 when no kernel was launched and every byte is
// where it belongs (the calls stay counted for the caller).
int spread_without_the_kernel(const cuarrow::context& ctx, int seed) {
  const fault_api& f = faults();
  const std::int64_t n = 64;
  const auto bytes = pattern(static_cast<std::size_t>(n), seed);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, bytes.data(), n);
  cuarrow::buffer dst = cuarrow::allocate_device(ctx, 2 * n);
  cuarrow::fill(dst, 0, 2 * n, 0);
  std::vector<cuarrow::copy_piece> pieces;
  for (std::int64_t i = 0; i < n; ++i) pieces.push_back({dst, 2 * i, src, i, 1});
  f.reset_calls();
  cuarrow::stream s(ctx);
  cuarrow::copy_batch(pieces, s);
  CHILD_CHECK(f.calls("cuLaunchKernel") == 0);
  const auto got = to_vector(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    CHILD_CHECK(got[static_cast<std::size_t>(2 * i)] == bytes[static_cast<std::size_t>(i)]);
    CHILD_CHECK(got[static_cast<std::size_t>(2 * i + 1)] == 0);
  }
  return 0;
}

// A gather kernel that cannot be loaded (here: cuModuleLoadData refused,
// in a child process whose context has not loaded it yet): copies go to
// the driver, the same bytes, and gather_status() says why.
CUARROW_CHILD_MODE(gather_load_refused) {
  const fault_api& f = faults();
  CHILD_CHECK(f.available());
  CHILD_CHECK(f.inject("cuModuleLoadData", 1, CUDA_ERROR_INVALID_IMAGE) == 0);
  cuarrow::context ctx = cuarrow::context::get(0);
  CHILD_CHECK(spread_without_the_kernel(ctx, 3) == 0);
  const std::string why = ctx.gather_status();
  std::printf("STATUS: %s\n", why.c_str());
  CHILD_CHECK(why.find("cuModuleLoadData") != std::string::npos);
  CHILD_CHECK(why.find("CUDA_ERROR_INVALID_IMAGE") != std::string::npos);
  std::printf("CHILD OK\n");
  return 0;
}

TEST_F(BatchCopy, GatherKernelThatCannotLoadLeavesCopiesToTheDriver) {
  if (!faults().available()) GTEST_SKIP() << "needs the emulation's fault injection (no GPU involved)";
  const cuarrow_test::child_result r = cuarrow_test::run_self("gather_load_refused", {});
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  EXPECT_NE(r.output.find("CHILD OK"), std::string::npos) << r.output;
}

// A driver older than CUDA 12.1 (the emulation playing 12.0), which takes
// no 32 KB launch parameters: the kernel is not used, gather_status() says
// why, and the copies go to the driver one by one (12.0 has no
// cuMemcpyBatchAsync either), the same bytes.
CUARROW_CHILD_MODE(gather_old_driver) {
  const fault_api& f = faults();
  CHILD_CHECK(f.available());
  CHILD_CHECK(cuarrow::driver_version() == 12000);
  cuarrow::context ctx = cuarrow::context::get(0);
  CHILD_CHECK(spread_without_the_kernel(ctx, 4) == 0);
  CHILD_CHECK(f.calls("cuModuleLoadData") == 0);
  CHILD_CHECK(f.calls("cuMemcpyBatchAsync") == 0);
  CHILD_CHECK(f.calls("cuMemcpyDtoDAsync") + f.calls("cuMemcpyAsync") == 64);
  const std::string why = ctx.gather_status();
  std::printf("STATUS: %s\n", why.c_str());
  CHILD_CHECK(why.find("older than CUDA 12.1") != std::string::npos);
  std::printf("CHILD OK\n");
  return 0;
}

TEST_F(BatchCopy, GatherKernelIsNotUsedUnderADriverOlderThan12_1) {
  if (!faults().available()) GTEST_SKIP() << "needs the emulation playing an older driver (no GPU involved)";
  const cuarrow_test::child_result r =
      cuarrow_test::run_self("gather_old_driver", {}, {{"CUARROW_EMULATED_DRIVER_VERSION", "12000"}});
  ASSERT_TRUE(r.ok()) << "exit " << r.code << " signal " << r.signal << "\n" << r.output;
  EXPECT_NE(r.output.find("CHILD OK"), std::string::npos) << r.output;
}

// The legacy default stream, which cuMemcpyBatchAsync refuses: the batch
// runs on a stream of its own, ordered after and before the legacy
// stream's work by events.  The reads back on the legacy stream see it.
// A batch that succeeded warns of nothing (the side stream's destroy once
// warned "cuStreamDestroy failed: CUDA_SUCCESS" after every such batch).
TEST_F(BatchCopy, ManySmallDevicePiecesOnTheDefaultStream) {
  cuarrow::context::get(0);
  std::vector<std::string> warnings;
  cuarrow::set_warning_handler([&](std::string_view m) { warnings.emplace_back(m); });
  many_small_device_pieces(3000, cuarrow::stream_view(), false);
  many_small_device_pieces(3000, cuarrow::stream_view(), true);
  cuarrow::set_warning_handler(nullptr);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

// Batches on the legacy default stream share the context's side stream:
// after the first, none creates or destroys a stream or an event, and each
// makes one batched call between two orderings (an event record and a
// wait each way).  Every batch's bytes arrive, read back on the legacy
// stream.
TEST_F(BatchCopy, BatchesOnTheDefaultStreamReuseOneSideStream) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const fault_api& f = faults();
  if (!f.available() || batch_entry_hidden()) GTEST_SKIP() << "counts the emulation's driver calls";
  cuarrow::transfer_options o = cuarrow::get_transfer_options();
  o.device_gather = false;  // driver copies (the fixture restores the options)
  cuarrow::set_transfer_options(o);
  const std::int64_t n = 64;
  const auto bytes = pattern(static_cast<std::size_t>(n), 5);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, bytes.data(), n);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    cuarrow::buffer dst = cuarrow::allocate_device(ctx, 2 * n);
    cuarrow::fill(dst, 0, 2 * n, 0);
    std::vector<cuarrow::copy_piece> pieces;
    for (std::int64_t i = 0; i < n; ++i) pieces.push_back({dst, 2 * i + round % 2, src, i, 1});
    f.reset_calls();
    cuarrow::copy_batch_async(pieces, cuarrow::stream_view());
    if (round > 0) {
      EXPECT_EQ(f.calls("cuStreamCreate"), 0u);
      EXPECT_EQ(f.calls("cuStreamDestroy"), 0u);
      EXPECT_EQ(f.calls("cuEventCreate"), 0u);
      EXPECT_EQ(f.calls("cuEventDestroy"), 0u);
    }
    EXPECT_EQ(f.calls("cuMemcpyBatchAsync"), 1u);
    EXPECT_EQ(f.calls("cuEventRecord"), 2u);
    EXPECT_EQ(f.calls("cuStreamWaitEvent"), 2u);
    const auto got = to_vector(dst);  // on the legacy stream: after the batch
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bytes[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(2 * i + round % 2)]) << i;
    }
  }
}

// A driver that answers CUDA_ERROR_NOT_SUPPORTED: the pieces go one by one.
TEST_F(BatchCopy, ManySmallDevicePiecesWhenTheBatchedCallIsNotSupported) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const fault_api& f = faults();
  if (!f.available() || batch_entry_hidden()) GTEST_SKIP() << "needs the emulation with cuMemcpyBatchAsync";
  cuarrow::transfer_options o = cuarrow::get_transfer_options();
  o.device_gather = false;  // driver copies (the fixture restores the options)
  cuarrow::set_transfer_options(o);
  cuarrow::stream s(ctx);
  const std::int64_t n = 64;
  const auto bytes = pattern(static_cast<std::size_t>(n), 3);
  cuarrow::buffer src = cuarrow::copy_to_device(ctx, bytes.data(), n);
  cuarrow::buffer dst = cuarrow::allocate_device(ctx, 2 * n, s);
  cuarrow::fill(dst, 0, 2 * n, 0, s);
  std::vector<cuarrow::copy_piece> pieces;
  for (std::int64_t i = 0; i < n; ++i) pieces.push_back({dst, 2 * i, src, i, 1});
  f.clear();
  f.reset_calls();
  ASSERT_EQ(0, f.inject("cuMemcpyBatchAsync", 1, CUDA_ERROR_NOT_SUPPORTED));
  cuarrow::copy_batch(pieces, s);
  EXPECT_EQ(1u, f.injected());
  f.clear();
  EXPECT_EQ(1u, f.calls("cuMemcpyBatchAsync"));
  EXPECT_EQ(static_cast<std::size_t>(n), f.calls("cuMemcpyDtoDAsync"));
  const auto got = to_vector(dst);
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(bytes[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(2 * i)]) << i;
    EXPECT_EQ(0, got[static_cast<std::size_t>(2 * i + 1)]) << i;
  }
  // Any other refusal is the batch's error, naming the call.
  ASSERT_EQ(0, f.inject("cuMemcpyBatchAsync", 1, CUDA_ERROR_INVALID_VALUE));
  try {
    cuarrow::copy_batch(pieces, s);
    ADD_FAILURE() << "copy_batch succeeded despite the injected failure";
  } catch (const cuarrow::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuMemcpyBatchAsync"), std::string::npos) << e.what();
  }
  f.clear();
  s.synchronize();
}

// A caller that keeps the buffers itself (caller_keeps_buffers) queues no
// host function behind its batch; keep_alive_until_passed then holds them
// when it drops its handles before the stream has passed the copies.
TEST_F(BatchCopy, ACallerKeepingTheBuffersQueuesNoHostFunctionAndCanHandThemOver) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 1 << 16;
  auto src = pattern(n, 11);
  cuarrow::buffer out = cuarrow::allocate_pinned(ctx, n);
  const fault_api& f = faults();
  expect_kept_until_passed(ctx, s, 2 * n, [&] {
    cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
    cuarrow::buffer dev2 = cuarrow::allocate_device(ctx, n);
    ctx.synchronize();
    const cuarrow::copy_piece pieces[] = {{dev2, 0, dev, 0, n / 2}, {dev2, n / 2, dev, n / 2, n / 2}};
    const cuarrow::copy_piece back{out, 0, dev2, 0, n};
    if (f.available()) f.reset_calls();
    cuarrow::copy_batch_async(pieces, s, {.caller_keeps_buffers = true});
    cuarrow::copy_batch_async({&back, 1}, s, {.caller_keeps_buffers = true});
    if (f.available()) {
      EXPECT_EQ(f.calls("cuLaunchHostFunc"), 0U);
    }
    cuarrow::keep_alive_until_passed({dev, dev2, out}, s);
    if (f.available()) {
      EXPECT_EQ(f.calls("cuLaunchHostFunc"), 1U);
    }
  });  // the handles dropped while the copies are queued
  EXPECT_EQ(0, std::memcmp(out.host_data(), src.data(), n));
}
