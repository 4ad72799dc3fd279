#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using namespace cuarrow_test;

// 0 and nullptr do not make a stream_view (they would silently mean the
// legacy default stream); a CUstream handle does, explicitly.
static_assert(!std::is_constructible_v<cuarrow::stream_view, int>);
static_assert(!std::is_constructible_v<cuarrow::stream_view, std::nullptr_t>);
static_assert(std::is_constructible_v<cuarrow::stream_view, CUstream>);
static_assert(!std::is_convertible_v<CUstream, cuarrow::stream_view>);

TEST(Stream, CreateSynchronizeQueryDestroy) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::size_t before = emu().stream_count ? emu().stream_count() : 0;
  {
    cuarrow::stream s(ctx);
    EXPECT_NE(s.handle(), nullptr);
    EXPECT_EQ(s.view().device_number(), 0);
    s.synchronize();
    EXPECT_TRUE(s.query());
    cuarrow::stream moved = std::move(s);
    EXPECT_EQ(s.handle(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    moved.synchronize();
  }
  if (emu().stream_count) {
    EXPECT_EQ(emu().stream_count(), before);
  }
}

TEST(Stream, ForeignStreamViewFindsItsDevice) {
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    cuarrow::stream s(cuarrow::context::get(d));
    cuarrow::stream_view foreign(s.handle());  // device unknown: asked from the driver
    EXPECT_EQ(foreign.device_number(), d);
  }
  EXPECT_TRUE(cuarrow::stream_view().is_default());
  EXPECT_TRUE(cuarrow::stream_view::per_thread_default().is_default());
  EXPECT_EQ(cuarrow::stream_view().device_number(), -1);
}

TEST(Event, RecordQuerySynchronize) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow::event e(ctx);
  EXPECT_TRUE(e.query());  // nothing recorded yet
  auto src = pattern(1 << 20, 1);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 1 << 20);
  std::memcpy(pinned.mutable_host_data(), src.data(), src.size());
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 1 << 20, s);
  {
    scoped_op_delay delay(20000);
    cuarrow::copy_async(dev, 0, pinned, 0, 1 << 20, s);
    e.record(s);
    if (cuarrow::driver_is_emulated()) {
      EXPECT_FALSE(e.query());  // the copy is still pending
    }
    e.synchronize();
  }
  EXPECT_TRUE(e.query());
  EXPECT_EQ(to_vector(dev), src);
}

TEST(Event, ElapsedTimeNeedsTimingEvents) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  cuarrow::event a(ctx, CU_EVENT_DEFAULT);
  cuarrow::event b(ctx, CU_EVENT_DEFAULT);
  a.record(s);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 1 << 20, s);
  cuarrow::fill_async(dev, 0, 1 << 20, 3, s);
  b.record(s);
  b.synchronize();
  EXPECT_GE(b.elapsed_ms_since(a), 0.0f);
  cuarrow::event untimed(ctx);  // timing disabled by default
  untimed.record(s);
  untimed.synchronize();
  EXPECT_THROW((void)untimed.elapsed_ms_since(a), cuarrow::cuda_error);
}

TEST(Event, StreamWaitOrdersWorkAcrossStreams) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  cuarrow::stream consumer(ctx);
  const std::int64_t n = 1 << 16;
  auto src = pattern(n, 2);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  std::memcpy(pinned.mutable_host_data(), src.data(), n);
  cuarrow::buffer stage = cuarrow::allocate_device(ctx, n, producer);
  cuarrow::buffer out = cuarrow::allocate_pinned(ctx, n);
  cuarrow::event ready(ctx);
  {
    scoped_op_delay delay(5000);
    cuarrow::copy_async(stage, 0, pinned, 0, n, producer);
    ready.record(producer);
    consumer.wait(ready);
    cuarrow::copy_async(out, 0, stage, 0, n, consumer);
    consumer.synchronize();
  }
  EXPECT_EQ(0, std::memcmp(out.host_data(), src.data(), n));
  producer.synchronize();
}

// stream_view::wait_for: a stream waits for another's work so far, the
// host not blocked.  `stage` comes from the default stream, so the copy
// engine has no allocation to order the consumer after: only wait_for does.
TEST(Stream, WaitForOrdersWorkAcrossStreams) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  cuarrow::stream consumer(ctx);
  const std::int64_t n = 1 << 16;
  auto src = pattern(n, 4);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, n);
  std::memcpy(pinned.mutable_host_data(), src.data(), n);
  cuarrow::buffer stage = cuarrow::allocate_device(ctx, n);
  cuarrow::buffer out = cuarrow::allocate_pinned(ctx, n);
  ctx.synchronize();
  {
    scoped_op_delay delay(5000);
    cuarrow::copy_async(stage, 0, pinned, 0, n, producer);
    consumer.view().wait_for(producer, ctx);
    cuarrow::copy_async(out, 0, stage, 0, n, consumer);
    consumer.synchronize();
  }
  EXPECT_EQ(0, std::memcmp(out.host_data(), src.data(), n));
  producer.synchronize();
  // Waiting for itself, or the legacy default stream for itself, does nothing.
  EXPECT_NO_THROW(consumer.view().wait_for(consumer, ctx));
  EXPECT_NO_THROW(cuarrow::stream_view().wait_for(cuarrow::stream_view(), ctx));
  // The per-thread default stream waits for the legacy one (the binding's
  // stream_wait_for_default).
  EXPECT_NO_THROW(cuarrow::stream_view::per_thread_default().wait_for(cuarrow::stream_view(), ctx));
}

TEST(Event, RecordingOnAnotherDevicesStreamIsRefused) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::event e(cuarrow::context::get(0));
  cuarrow::stream s1(cuarrow::context::get(1));
  try {
    e.record(s1);
    FAIL() << "recorded an event of device 0 on a stream of device 1";
  } catch (const cuarrow::device_mismatch& ex) {
    EXPECT_NE(std::string(ex.what()).find("device 0"), std::string::npos) << ex.what();
  }
  // The event is still usable.
  cuarrow::stream s0(cuarrow::context::get(0));
  e.record(s0);
  e.synchronize();
}

TEST(Stream, PerThreadDefaultStreamCopies) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::thread t([&] {
    auto src = pattern(4096, 3);
    cuarrow::buffer dev = cuarrow::allocate_device(ctx, 4096, cuarrow::stream_view::per_thread_default());
    cuarrow::copy_from_host(dev, 0, src.data(), 4096, cuarrow::stream_view::per_thread_default());
    std::vector<std::uint8_t> back(4096);
    cuarrow::copy_to_host(back.data(), dev, 0, 4096, cuarrow::stream_view::per_thread_default());
    EXPECT_EQ(back, src);
  });
  t.join();
}

TEST(Stream, NoStreamOrEventLeaks) {
  CUARROW_REQUIRE_EMULATION();
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::size_t streams = emu().stream_count();
  const std::size_t events = emu().event_count();
  for (int i = 0; i < 20; ++i) {
    cuarrow::stream s(ctx);
    cuarrow::event e(ctx);
    e.record(s);
  }
  EXPECT_EQ(emu().stream_count(), streams);
  EXPECT_EQ(emu().event_count(), events);
}

TEST(Stream, DefaultStreamSynchronizesInTheContextGiven) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 256);
  std::thread([&] {
    // No context current on this thread: the default stream names none.
    cuarrow::fill_async(dev, 0, 256, 0x11, cuarrow::stream_view());
    EXPECT_NO_THROW(cuarrow::stream_view().synchronize(ctx));
  }).join();
  std::vector<std::uint8_t> back(256);
  cuarrow::copy_to_host(back.data(), dev, 0, 256);
  EXPECT_EQ(back, std::vector<std::uint8_t>(256, 0x11));
}
