#include <atomic>
// The pinned staging pipeline for pageable host memory: every boundary and
// odd size, concurrency, and the options.
#include <cstring>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace cuarrow_test;

namespace {
// Small chunks so that the boundaries are exercised with small copies.
class Staging : public small_staging_test {};
}  // namespace

TEST_F(Staging, RoundTripsAtChunkBoundariesAndOddAlignments) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t chunk = 64 << 10;
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  // Staging buffers filled with streaming stores (every size), and not.
  for (std::int64_t streaming_limit : {std::int64_t{1} << 40, std::int64_t{0}}) {
    cuarrow::transfer_options o = saved;
    o.staging_streaming_store_limit_bytes = streaming_limit;
    cuarrow::set_transfer_options(o);
    for (std::int64_t n : {chunk - 1, chunk, chunk + 1, 3 * chunk + 17, 7 * chunk, std::int64_t{(1 << 20) + 5}}) {
      for (std::int64_t misalign : {std::int64_t{0}, std::int64_t{3}, std::int64_t{9}}) {
        auto src = pattern(static_cast<std::size_t>(n + misalign), static_cast<unsigned>(n + misalign));
        cuarrow::buffer dev = cuarrow::allocate_device(ctx, n + 11);
        cuarrow::copy_from_host(dev, 11, src.data() + misalign, n);
        std::vector<std::uint8_t> back(static_cast<std::size_t>(n + misalign), 0);
        cuarrow::copy_to_host(back.data() + misalign, dev, 11, n);
        ASSERT_EQ(0, std::memcmp(back.data() + misalign, src.data() + misalign, static_cast<std::size_t>(n)))
            << "n=" << n << " misalign=" << misalign << " streaming limit=" << streaming_limit;
      }
    }
  }
  cuarrow::set_transfer_options(saved);
}

TEST_F(Staging, BuffersOfOrdinaryMemoryAndStreams) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = (5 << 16) + 123;
  auto src = pattern(n, 11);
  cuarrow::buffer host = cuarrow::allocate_host(n);
  std::memcpy(host.mutable_host_data(), src.data(), n);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, n, s);
  cuarrow::copy_async(dev, 0, host, 0, n, s);
  // The source was read before copy_async returned: changing it now is safe.
  std::memset(host.mutable_host_data(), 0, n);
  cuarrow::buffer back = cuarrow::allocate_host(n);
  cuarrow::copy_async(back, 0, dev, 0, n, s);
  s.synchronize();
  EXPECT_EQ(0, std::memcmp(back.host_data(), src.data(), n));
}

TEST_F(Staging, PinnedMemoryIsCopiedDirectly) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 1 << 20;
  auto src = pattern(n, 12);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  std::memcpy(pinned.mutable_host_data(), src.data(), n);
  // Pinned memory reached as a plain host pointer: detected as page-locked.
  ctx.reset_transfer_stats();
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, pinned.host_data(), n);
  EXPECT_EQ(ctx.transfer_stats().staged_bytes, 0) << "pinned memory goes straight to the DMA";
  EXPECT_EQ(ctx.transfer_stats().host_to_device_bytes, n);
  std::vector<std::uint8_t> back(n);
  cuarrow::copy_to_host(back.data(), dev, 0, n);
  EXPECT_EQ(back, src);
}

TEST_F(Staging, ConcurrentCallersAreSafe) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      cuarrow::stream s(ctx);
      for (int i = 0; i < 5; ++i) {
        const std::int64_t n = (3 << 16) + 1000 * t + i;
        auto src = pattern(n, 50 + 10 * t + i);
        cuarrow::buffer dev = cuarrow::allocate_device(ctx, n, s);
        cuarrow::copy_from_host(dev, 0, src.data(), n, s);
        std::vector<std::uint8_t> back(n);
        cuarrow::copy_to_host(back.data(), dev, 0, n, s);
        if (back != src) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(Staging, BetweenDevicesAndPipelineOff) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 300000;
  auto src = pattern(n, 13);
  cuarrow::transfer_options off = cuarrow::get_transfer_options();
  off.staging_threshold_bytes = 0;  // disabled: the driver copies directly
  cuarrow::set_transfer_options(off);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
  std::vector<std::uint8_t> back(n);
  cuarrow::copy_to_host(back.data(), dev, 0, n);
  EXPECT_EQ(back, src);
}

TEST(TransferOptions, AreValidated) {
  cuarrow::transfer_options o = cuarrow::get_transfer_options();
  cuarrow::transfer_options bad = o;
  bad.staging_chunk_bytes = 100;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  bad = o;
  bad.staging_threads = 0;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  bad = o;
  bad.staging_threads_to_device = 257;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  bad = o;
  bad.staging_threshold_bytes = -1;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  bad = o;
  bad.staging_streaming_store_limit_bytes = -1;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  bad = o;
  bad.device_gather_max_run_bytes = -1;
  EXPECT_THROW(cuarrow::set_transfer_options(bad), cuarrow::invalid_argument);
  EXPECT_EQ(cuarrow::get_transfer_options().staging_chunk_bytes, o.staging_chunk_bytes);
}

TEST(PinnedPool, DeviceResultsLandInPooledPinnedMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = (1 << 20) + 7;
  auto src = pattern(n, 14);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
  const auto before = cuarrow::pinned_pool_stats();
  std::int64_t pinned_after_first = 0;
  {
    cuarrow::buffer host = cuarrow::copy_to_new_host(dev);
    EXPECT_EQ(host.type(), cuarrow::device_type::cuda_host);
    EXPECT_EQ(host.size(), n);
    EXPECT_EQ(0, std::memcmp(host.host_data(), src.data(), n));
    EXPECT_GE(cuarrow::pinned_pool_stats().in_use_bytes, before.in_use_bytes + n);
    pinned_after_first = cuarrow::pinned_pool_stats().pinned_bytes;
  }
  EXPECT_EQ(cuarrow::pinned_pool_stats().in_use_bytes,
            before.in_use_bytes);  // returned to the pool
  {
    cuarrow::buffer again = cuarrow::copy_to_new_host(dev);  // reuses the cached block
    EXPECT_EQ(cuarrow::pinned_pool_stats().pinned_bytes, pinned_after_first);
    EXPECT_EQ(0, std::memcmp(again.host_data(), src.data(), n));
  }
  cuarrow::trim_pinned_pool();
  EXPECT_EQ(cuarrow::pinned_pool_stats().pinned_bytes, cuarrow::pinned_pool_stats().in_use_bytes);
}

TEST(PinnedPool, FullPoolFallsBackToOrdinaryMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.pinned_pool_limit_bytes = 1 << 20;
  cuarrow::set_transfer_options(o);
  const std::int64_t n = 3 << 20;
  auto src = pattern(n, 15);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
  cuarrow::buffer host = cuarrow::copy_to_new_host(dev);
  EXPECT_EQ(host.type(), cuarrow::device_type::cpu);
  EXPECT_EQ(0, std::memcmp(host.host_data(), src.data(), n));
  EXPECT_FALSE(cuarrow::try_allocate_pinned_pooled(ctx, 2 << 20).has_value());
  cuarrow::set_transfer_options(saved);
}

// A limit lowered below what the pool caches: the cached blocks are not
// handed out either (a limit of 0 means no pinned results).
TEST(PinnedPool, ALoweredLimitHoldsForCachedBlocks) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  {
    std::optional<cuarrow::buffer> b = cuarrow::try_allocate_pinned_pooled(ctx, 1 << 16);
    ASSERT_TRUE(b.has_value());
  }
  cuarrow::transfer_options o = saved;
  o.pinned_pool_limit_bytes = 0;
  cuarrow::set_transfer_options(o);
  EXPECT_FALSE(cuarrow::try_allocate_pinned_pooled(ctx, 1 << 16).has_value()) << "the cached block is not reused";
  cuarrow::set_transfer_options(saved);
  EXPECT_TRUE(cuarrow::try_allocate_pinned_pooled(ctx, 1 << 16).has_value());
  cuarrow::trim_pinned_pool();
}

TEST(TransferStats, CountBytesTimeAndStagedBytesPerContext) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.staging_threshold_bytes = 1 << 20;
  cuarrow::set_transfer_options(o);
  ctx.reset_transfer_stats();
  const std::int64_t big = 3 << 20;
  auto src = pattern(big, 16);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), big);  // staged
  cuarrow::buffer dev2 = cuarrow::allocate_device(ctx, 100);
  cuarrow::copy(dev2, 0, dev, 0, 100);  // device to device
  std::vector<std::uint8_t> back(100);
  cuarrow::copy_to_host(back.data(), dev, 0, 100);  // small: direct
  cuarrow::transfer_statistics t = ctx.transfer_stats();
  EXPECT_EQ(t.host_to_device_bytes, big);
  EXPECT_EQ(t.device_to_device_bytes, 100);
  EXPECT_EQ(t.device_to_host_bytes, 100);
  EXPECT_EQ(t.staged_bytes, big);
  EXPECT_EQ(t.copies, 3);
  EXPECT_GT(t.host_to_device_seconds, 0.0);
  EXPECT_GT(t.device_to_host_seconds, 0.0);
  // A refused copy counts nothing.
  EXPECT_THROW(cuarrow::copy_to_host(back.data(), dev, big, 1), cuarrow::out_of_range);
  EXPECT_EQ(ctx.transfer_stats().copies, 3);
  ctx.reset_transfer_stats();
  EXPECT_EQ(ctx.transfer_stats().host_to_device_bytes, 0);
  cuarrow::set_transfer_options(saved);
}

// At exit (and in cuarrow::shutdown) the process-wide caches of pinned
// memory -- the staging slots and the result pool's free blocks -- are
// unpinned while their contexts still exist: left to the contexts'
// destruction, compute-sanitizer's memcheck reported every one as a leak.
// Memory a live buffer holds stays pinned.
TEST_F(Staging, ShutdownUnpinsTheCachedPinnedMemory) {
  CUARROW_REQUIRE_EMULATION();
  cuarrow::shutdown();  // what earlier tests left cached
  const std::size_t before = emu().host_registration_count();
  {
    cuarrow::context ctx = cuarrow::context::get(0);
    const std::int64_t n = 1 << 20;  // above this fixture's staging threshold: staged
    auto src = pattern(n, 5);
    cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
    EXPECT_GT(ctx.transfer_stats().staged_bytes, 0);
    cuarrow::buffer result = cuarrow::copy_to_new_host(dev);  // from the pinned result pool
    EXPECT_EQ(result.type(), cuarrow::device_type::cuda_host);
  }
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer kept = cuarrow::allocate_pinned(ctx, 4096);
  EXPECT_GT(emu().host_registration_count(), before + 1) << "slots and a cached pool block are pinned";
  cuarrow::shutdown();
  EXPECT_EQ(emu().host_registration_count(), before + 1) << "only the live buffer's memory stays pinned";
  // Everything works after a shutdown: the caches fill again.
  auto src = pattern(1 << 20, 6);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), 1 << 20);
  std::vector<std::uint8_t> back(1 << 20);
  cuarrow::copy_to_host(back.data(), dev, 0, 1 << 20);
  EXPECT_EQ(back, src);
}
