#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace cuarrow_test;

TEST(Copy, RoundTripsAtOddSizesAndOffsets) {
  cuarrow::context ctx = cuarrow::context::get(0);
  for (std::int64_t n : {1, 3, 7, 64, 4097, 100003, 1 << 22}) {
    auto src = pattern(static_cast<std::size_t>(n) + 13, static_cast<unsigned>(n));
    cuarrow::buffer dev = cuarrow::allocate_device(ctx, n + 20);
    cuarrow::copy_from_host(dev, 7, src.data() + 13, n);
    std::vector<std::uint8_t> back(static_cast<std::size_t>(n));
    cuarrow::copy_to_host(back.data(), dev, 7, n);
    ASSERT_EQ(0, std::memcmp(back.data(), src.data() + 13, static_cast<std::size_t>(n))) << "n=" << n;
    // device to device within one device, at other offsets
    cuarrow::buffer dev2 = cuarrow::allocate_device(ctx, n + 5);
    cuarrow::copy(dev2, 5, dev, 7, n);
    std::vector<std::uint8_t> back2(static_cast<std::size_t>(n));
    cuarrow::copy_to_host(back2.data(), dev2, 5, n);
    ASSERT_EQ(back2, back) << "n=" << n;
  }
}

TEST(Copy, EveryPositionIsCheckedOnBothSides) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto src = pattern(100, 7);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), 100);
  cuarrow::buffer small = cuarrow::allocate_device(ctx, 10);
  std::vector<std::uint8_t> host(200);
  // to host: past the end of the source, negative offset, negative size
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), dev, 90, 11), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), dev, 101, 0), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), dev, -1, 5), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), dev, 0, -5), cuarrow::out_of_range);
  // from host: past the end of the destination
  EXPECT_THROW(cuarrow::copy_from_host(small, 5, src.data(), 6), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_from_host(small, -1, src.data(), 1), cuarrow::out_of_range);
  // device to device: either side too small
  EXPECT_THROW(cuarrow::copy(small, 0, dev, 0, 11), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy(dev, 95, small, 0, 10), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy(dev, 0, small, 5, 6), cuarrow::out_of_range);
  // huge values do not overflow the checks
  EXPECT_THROW(cuarrow::copy(dev, 1, small, 0, INT64_MAX), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), dev, INT64_MAX, 1), cuarrow::out_of_range);
  try {
    cuarrow::copy_to_host(host.data(), dev, 90, 20);
  } catch (const cuarrow::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "copy of 20 bytes at offset 90 overruns the source buffer of 100 bytes");
  }
  // Nothing was written and both buffers are intact and usable.
  EXPECT_EQ(to_vector(dev), src);
  cuarrow::copy(small, 0, dev, 90, 10);
  EXPECT_EQ(to_vector(small), std::vector<std::uint8_t>(src.begin() + 90, src.end()));
}

TEST(Copy, ImmutableDestinationIsRefused) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer dev = cuarrow::copy_to_device(ctx, "abcd", 4);
  cuarrow::buffer ro = dev.as_read_only();
  EXPECT_THROW(cuarrow::copy_from_host(ro, 0, "zz", 2), cuarrow::read_only);
  EXPECT_THROW(cuarrow::copy(ro, 0, dev, 0, 1), cuarrow::read_only);
  EXPECT_THROW(cuarrow::fill_async(ro, 0, 1, 0, {}), cuarrow::read_only);
  // Reading from it is fine.
  std::vector<std::uint8_t> back(4);
  cuarrow::copy_to_host(back.data(), ro, 0, 4);
  EXPECT_EQ(back, (std::vector<std::uint8_t>{'a', 'b', 'c', 'd'}));
}

TEST(Copy, ZeroBytesIsANoOpAfterChecks) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 8);
  EXPECT_NO_THROW(cuarrow::copy_from_host(dev, 8, nullptr, 0));
  EXPECT_NO_THROW(cuarrow::copy_to_host(nullptr, dev, 8, 0));
  EXPECT_THROW(cuarrow::copy_from_host(dev, 9, nullptr, 0), cuarrow::out_of_range);
  EXPECT_THROW(cuarrow::copy_from_host(dev, 0, nullptr, 1), cuarrow::invalid_argument);
}

TEST(Copy, PinnedAndPageableHostSides) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 1 << 20;
  auto src = pattern(n, 8);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  cuarrow::buffer host = cuarrow::allocate_host(n);
  std::memcpy(host.mutable_host_data(), src.data(), n);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, n);
  cuarrow::copy(dev, 0, host, 0, n);    // pageable -> device
  cuarrow::copy(pinned, 0, dev, 0, n);  // device -> pinned
  EXPECT_EQ(0, std::memcmp(pinned.host_data(), src.data(), n));
  cuarrow::buffer host2 = cuarrow::allocate_host(n);
  cuarrow::copy(host2, 0, pinned, 0, n);  // pinned -> pageable: host to host
  EXPECT_EQ(0, std::memcmp(host2.host_data(), src.data(), n));
  cuarrow::buffer dev2 = cuarrow::copy_to_device(ctx, pinned);
  EXPECT_EQ(cuarrow::copy_to_new_host(dev2).size(), n);
  EXPECT_EQ(0, std::memcmp(cuarrow::copy_to_new_host(dev2).host_data(), src.data(), n));
}

TEST(Copy, AsyncCopyKeepsItsBuffersAliveUntilTheStreamPassesIt) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  const std::int64_t n = 1 << 16;
  auto src = pattern(n, 9);
  cuarrow::buffer out = cuarrow::allocate_pinned(ctx, n);
  expect_kept_until_passed(ctx, s, 2 * n, [&] {
    // Allocated and freed on the legacy stream, used on `s`: without the
    // keep-alive the free would overtake the copies.
    cuarrow::buffer dev = cuarrow::copy_to_device(ctx, src.data(), n);
    cuarrow::buffer dev2 = cuarrow::allocate_device(ctx, n);
    cuarrow::copy_async(dev2, 0, dev, 0, n, s);
    cuarrow::copy_async(out, 0, dev2, 0, n, s);
  });  // both handles dropped while the copies are queued
  EXPECT_EQ(0, std::memcmp(out.host_data(), src.data(), n));
}

TEST(Copy, FillAsync) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 100, s);
  cuarrow::fill_async(dev, 0, 100, 0xab, s);
  cuarrow::fill_async(dev, 10, 5, 0x01, s);
  EXPECT_THROW(cuarrow::fill_async(dev, 99, 2, 0, s), cuarrow::out_of_range);
  s.synchronize();
  auto v = to_vector(dev);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(v[i], (i >= 10 && i < 15) ? 0x01 : 0xab) << i;
}

TEST(Copy, FillIsCompleteOnReturn) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 4096, s);
  if (emu().set_op_delay_us) emu().set_op_delay_us(2000);  // a queued memset would still be running
  cuarrow::fill(dev, 0, 4096, 0x5a, s);
  const bool done = s.query();
  if (emu().set_op_delay_us) emu().set_op_delay_us(0);
  EXPECT_TRUE(done);
  EXPECT_THROW(cuarrow::fill(dev, 4000, 100, 0, s), cuarrow::out_of_range);
  // On the default stream from a thread with no context current: the
  // buffer's context is the one synchronized.
  std::thread([&] { cuarrow::fill(dev, 0, 16, 0x01); }).join();
  auto v = to_vector(dev);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(v[i], i < 16 ? 0x01 : 0x5a) << i;
}

TEST(Copy, ConcurrentCallersOnTheirOwnStreams) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      cuarrow::stream s(ctx);
      for (int i = 0; i < 25; ++i) {
        const std::int64_t n = 1000 + 977 * i + t;
        auto src = pattern(n, 100 * t + i);
        cuarrow::buffer dev = cuarrow::allocate_device(ctx, n, s);
        cuarrow::copy_from_host_async(dev, 0, src.data(), n, s);
        cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
        cuarrow::copy_async(pinned, 0, dev, 0, n, s);
        s.synchronize();
        if (std::memcmp(pinned.host_data(), src.data(), n) != 0) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Copy, BetweenDevices) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::context c1 = cuarrow::context::get(1);
  const std::int64_t n = (1 << 20) + 3;
  auto src = pattern(n, 10);
  cuarrow::buffer on0 = cuarrow::copy_to_device(c0, src.data(), n);
  cuarrow::buffer on1 = cuarrow::allocate_device(c1, n + 1);
  cuarrow::copy(on1, 1, on0, 0, n);  // synchronous, legacy stream
  EXPECT_EQ(on1.device_id(), 1);
  std::vector<std::uint8_t> back(n);
  cuarrow::copy_to_host(back.data(), on1, 1, n);
  EXPECT_EQ(back, src);
  // Asynchronous on a stream of either device.
  for (int d = 0; d < 2; ++d) {
    cuarrow::stream s(cuarrow::context::get(d));
    cuarrow::buffer again = cuarrow::allocate_device(c0, n);
    cuarrow::copy_async(again, 0, on1, 1, n, s);
    s.synchronize();
    EXPECT_EQ(to_vector(again), src) << "stream of device " << d;
  }
  cuarrow::buffer to1 = cuarrow::copy_to_device(c1, on0);
  EXPECT_EQ(to1.device_id(), 1);
  EXPECT_EQ(to_vector(to1), src);
}

TEST(Copy, AStreamOfAnotherDeviceIsRefused) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::context c0 = cuarrow::context::get(0);
  cuarrow::stream s1(cuarrow::context::get(1));
  cuarrow::buffer on0 = cuarrow::allocate_device(c0, 64);
  std::vector<std::uint8_t> host(64);
  try {
    cuarrow::copy_from_host(on0, 0, host.data(), 64, s1);
    FAIL() << "copied into device 0 memory on a stream of device 1";
  } catch (const cuarrow::device_mismatch& e) {
    EXPECT_NE(std::string(e.what()).find("stream belongs to device 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuarrow::copy_to_host(host.data(), on0, 0, 64, s1), cuarrow::device_mismatch);
  EXPECT_THROW(cuarrow::fill_async(on0, 0, 64, 0, s1), cuarrow::device_mismatch);
  EXPECT_THROW((void)cuarrow::allocate_device(c0, 64, s1), cuarrow::device_mismatch);
  // Still usable with the right stream.
  cuarrow::stream s0(c0);
  cuarrow::copy_from_host(on0, 0, host.data(), 64, s0);
}
