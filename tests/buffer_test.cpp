#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>

#include "test_support.hpp"

using namespace cuarrow_test;

// Only cuarrow labels memory: no buffer from hand-filled fields (which
// could call host memory device memory, or the reverse).
static_assert(!std::is_constructible_v<cuarrow::buffer, cuarrow::buffer::fields>);

TEST(Buffer, DeviceBufferKnowsWhereItLives) {
  for (int d = 0; d < cuarrow::device_count(); ++d) {
    cuarrow::context ctx = cuarrow::context::get(d);
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 1000);
    EXPECT_EQ(b.size(), 1000);
    EXPECT_NE(b.address(), 0u);
    EXPECT_EQ(b.type(), cuarrow::device_type::cuda);
    EXPECT_EQ(static_cast<int>(b.type()), 2);  // ARROW_DEVICE_CUDA
    EXPECT_EQ(b.device_id(), d);
    EXPECT_TRUE(b.is_mutable());
    EXPECT_FALSE(b.is_cpu());
    EXPECT_FALSE(b.is_host_accessible());
    ASSERT_TRUE(b.get_context().has_value());
    EXPECT_EQ(b.get_context()->device_number(), d);
  }
}

TEST(Buffer, DeviceMemoryIsNeverHandedToHostCode) {
  cuarrow::buffer b = cuarrow::allocate_device(cuarrow::context::get(0), 64);
  try {
    (void)b.host_data();
    FAIL() << "host_data() returned a pointer to device memory";
  } catch (const cuarrow::host_access_error& e) {
    EXPECT_NE(std::string(e.what()).find("copy it to the host first"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)b.mutable_host_data(), cuarrow::host_access_error);
  EXPECT_THROW((void)b.host_span(), cuarrow::host_access_error);
  EXPECT_THROW((void)b.slice(8).host_data(), cuarrow::host_access_error);
}

TEST(Buffer, DescribeShowsAddressSizeDevice) {
  cuarrow::buffer b = cuarrow::allocate_device(cuarrow::context::get(0), 16);
  std::string s = b.describe();
  EXPECT_NE(s.find("size=16"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cuda:0"), std::string::npos) << s;
  EXPECT_NE(s.find("address=0x"), std::string::npos) << s;
  EXPECT_EQ(b.location(), "cuda:0");
  EXPECT_EQ(cuarrow::allocate_host(8).location(), "cpu");
}

TEST(Buffer, SlicesKeepTheParentAlive) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto data = pattern(1000, 4);
  const std::int64_t base = ctx.bytes_allocated();
  cuarrow::buffer slice;
  {
    cuarrow::buffer whole = cuarrow::copy_to_device(ctx, data.data(), 1000);
    slice = whole.slice(100, 50);
    ASSERT_TRUE(slice.parent());
    EXPECT_EQ(slice.parent()->address(), whole.address());
    EXPECT_EQ(slice.address(), whole.address() + 100);
  }
  // The parent handle is gone but its memory is not.
  EXPECT_EQ(ctx.bytes_allocated(), base + 1000);
  EXPECT_EQ(to_vector(slice), std::vector<std::uint8_t>(data.begin() + 100, data.begin() + 150));
  cuarrow::buffer nested = slice.slice(10);
  EXPECT_EQ(nested.size(), 40);
  slice = cuarrow::buffer();
  EXPECT_EQ(to_vector(nested), std::vector<std::uint8_t>(data.begin() + 110, data.begin() + 150));
  nested = cuarrow::buffer();
  EXPECT_EQ(ctx.bytes_allocated(), base);
}

TEST(Buffer, SliceBoundsAreChecked) {
  cuarrow::buffer b = cuarrow::allocate_device(cuarrow::context::get(0), 100);
  EXPECT_THROW((void)b.slice(-1), cuarrow::out_of_range);
  EXPECT_THROW((void)b.slice(101), cuarrow::out_of_range);
  EXPECT_THROW((void)b.slice(50, 51), cuarrow::out_of_range);
  EXPECT_THROW((void)b.slice(0, -2), cuarrow::out_of_range);
  EXPECT_EQ(b.slice(100).size(), 0);
  EXPECT_EQ(b.slice(0, 100).size(), 100);
}

TEST(Buffer, ZeroAndNegativeSizes) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer empty = cuarrow::allocate_device(ctx, 0);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(empty.type(), cuarrow::device_type::cuda);
  EXPECT_EQ(to_vector(empty).size(), 0u);
  EXPECT_THROW((void)cuarrow::allocate_device(ctx, -1), cuarrow::invalid_argument);
  EXPECT_THROW((void)cuarrow::allocate_pinned(ctx, -1), cuarrow::invalid_argument);
  EXPECT_THROW((void)cuarrow::allocate_host(-1), cuarrow::invalid_argument);
  EXPECT_EQ(cuarrow::allocate_pinned(ctx, 0).size(), 0);
}

TEST(Buffer, PinnedHostBuffer) {
  cuarrow::context ctx = cuarrow::context::get(0);
  // cuarrow pins by registering memory it maps itself (src/runtime/page_locked.hpp).
  const std::size_t host_allocs = emu().host_registration_count ? emu().host_registration_count() : 0;
  {
    cuarrow::buffer p = cuarrow::allocate_pinned(ctx, 4096);
    EXPECT_EQ(p.type(), cuarrow::device_type::cuda_host);
    EXPECT_EQ(static_cast<int>(p.type()), 3);  // ARROW_DEVICE_CUDA_HOST
    EXPECT_EQ(p.device_id(), 0);
    EXPECT_FALSE(p.is_cpu());
    EXPECT_TRUE(p.is_host_accessible());
    std::memset(p.mutable_host_data(), 0x5a, 4096);
    EXPECT_EQ(p.host_data()[4095], std::byte{0x5a});
    if (emu().host_registration_count) {
      EXPECT_EQ(emu().host_registration_count(), host_allocs + 1);
    }
  }
  if (emu().host_registration_count) {
    EXPECT_EQ(emu().host_registration_count(), host_allocs);
  }
}

TEST(Buffer, ReadOnlyViews) {
  cuarrow::buffer h = cuarrow::allocate_host(8);
  cuarrow::buffer ro = h.as_read_only();
  EXPECT_FALSE(ro.is_mutable());
  EXPECT_NO_THROW((void)ro.host_data());
  EXPECT_THROW((void)ro.mutable_host_data(), cuarrow::read_only);
  EXPECT_FALSE(ro.slice(2).is_mutable());
}

TEST(Buffer, OutOfMemoryIsAnErrorAndTheDeviceStaysUsable) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t base = ctx.bytes_allocated();
  const std::size_t live = emu().device_allocation_count ? emu().device_allocation_count(0) : 0;
  const std::int64_t too_much = ctx.properties().total_memory + (1ll << 30);
  for (auto resource : {ctx.memory_resource(), std::shared_ptr<cuarrow::device_memory_resource>(
                                                   std::make_shared<cuarrow::plain_device_resource>())}) {
    try {
      (void)cuarrow::allocate_device(ctx, too_much, {}, resource);
      FAIL() << "allocated more than the device has";
    } catch (const cuarrow::out_of_memory& e) {
      EXPECT_EQ(e.bytes(), too_much);
      EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
      std::string m = e.what();
      EXPECT_NE(m.find("(" + std::to_string(too_much) + " bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"),
                std::string::npos)
          << m;
    }
  }
  EXPECT_EQ(ctx.bytes_allocated(), base);
  if (emu().device_allocation_count) {
    EXPECT_EQ(emu().device_allocation_count(0), live);
  }
  cuarrow::buffer ok = cuarrow::copy_to_device(ctx, "still fine", 10);
  EXPECT_EQ(to_vector(ok).size(), 10u);
}

TEST(Buffer, ForeignDeviceMemoryViewKeepsItsOwnerAlive) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto data = pattern(256, 5);
  auto backing = std::make_shared<cuarrow::buffer>(cuarrow::copy_to_device(ctx, data.data(), 256));
  std::weak_ptr<cuarrow::buffer> watch = backing;
  cuarrow::buffer view = cuarrow::wrap_device(ctx, backing->address() + 16, 64, backing);
  backing.reset();
  EXPECT_FALSE(watch.expired());  // the view holds the owner
  EXPECT_EQ(view.type(), cuarrow::device_type::cuda);
  EXPECT_EQ(to_vector(view), std::vector<std::uint8_t>(data.begin() + 16, data.begin() + 80));
  view = cuarrow::buffer();
  EXPECT_TRUE(watch.expired());
}

TEST(Buffer, WrappingMemoryOfAnotherDeviceIsRefused) {
  CUARROW_REQUIRE_DEVICES(2);
  cuarrow::buffer on1 = cuarrow::allocate_device(cuarrow::context::get(1), 64);
  EXPECT_THROW((void)cuarrow::wrap_device(cuarrow::context::get(0), on1.address(), 64, nullptr),
               cuarrow::device_mismatch);
  cuarrow::buffer ok = cuarrow::wrap_device(cuarrow::context::get(1), on1.address(), 64, nullptr);
  EXPECT_EQ(ok.device_id(), 1);
}

TEST(Buffer, WrapDeviceRecognisesPinnedMemory) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::buffer pinned = cuarrow::allocate_pinned(ctx, 128);
  cuarrow::buffer view = cuarrow::wrap_device(ctx, pinned.address(), 128, pinned.owner());
  EXPECT_EQ(view.type(), cuarrow::device_type::cuda_host);
}

// A foreign producer that describes more memory than there is: wrap_device
// refuses the view, naming its span and where the memory the driver knows
// ends, before anything reads it (a fault, or a crash of host code reading
// pinned memory, otherwise).  Views up to the end of an allocation (pool,
// cuMemAlloc, pinned) are taken.  (Allocations placed end to end read as
// one span: a view past the end of one into its neighbour is taken.)
TEST(Buffer, WrappingPastTheEndOfTheMemoryTheDriverKnowsIsRefused) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 4096;
  std::vector<cuarrow::buffer> owners;
  owners.push_back(cuarrow::allocate_device(ctx, n));
  owners.push_back(cuarrow::allocate_device(ctx, n, {}, cuarrow::plain_device_resource::shared()));
  owners.push_back(cuarrow::allocate_pinned(ctx, n));
  for (const cuarrow::buffer& b : owners) {
    SCOPED_TRACE(cuarrow::to_string(b.type()));
    EXPECT_EQ(cuarrow::wrap_device(ctx, b.address(), n, nullptr).size(), n);
    EXPECT_EQ(cuarrow::wrap_device(ctx, b.address() + 1000, n - 1000, nullptr).size(), n - 1000);
    try {
      (void)cuarrow::wrap_device(ctx, b.address() + 16, std::int64_t{1} << 40, nullptr);
      ADD_FAILURE() << "a view of 1 TiB was taken";
    } catch (const cuarrow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("wrap_device: 1099511627776 bytes from "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("run past the memory the CUDA driver knows there"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW((void)cuarrow::wrap_device(ctx, b.address(), INT64_MAX, nullptr), cuarrow::invalid_argument);
  }
  // The buffers stay usable.
  EXPECT_EQ(to_vector(cuarrow::copy_to_device(ctx, "still fine", 10)).size(), 10u);
}

// n cuMemAlloc allocations of `bytes` each, placed end to end by the
// driver (allocating on past the holes earlier tests left), or none.
std::vector<cuarrow::buffer> allocations_end_to_end(const cuarrow::context& ctx, int n, std::int64_t bytes) {
  std::vector<cuarrow::buffer> run;
  std::vector<cuarrow::buffer> held;  // kept until the run is found: freed, they would be handed out again
  run.reserve(static_cast<std::size_t>(n));
  bool adjacent = false;  // any two so far: a driver that places none so is not asked 2n times
  for (int tries = 0; tries < 2 * n + 4096 && static_cast<int>(run.size()) < n && (adjacent || tries < 4096); ++tries) {
    cuarrow::buffer b = cuarrow::allocate_device(ctx, bytes, {}, cuarrow::plain_device_resource::shared());
    const bool next_to = !run.empty() && b.address() == run.back().address() + static_cast<std::uintptr_t>(bytes);
    adjacent = adjacent || next_to;
    if (!next_to) {
      for (cuarrow::buffer& r : run) held.push_back(std::move(r));
      run.clear();
    }
    run.push_back(std::move(b));
  }
  if (static_cast<int>(run.size()) < n) run.clear();
  return run;
}

// A view across allocations placed end to end (as PyTorch's expandable
// segments place their mappings) is walked range by range: taken up to
// the last one's end, refused one byte past it.
TEST(Buffer, ViewsAcrossAllocationsPlacedEndToEndAreWalked) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t n = 4096;
  const std::vector<cuarrow::buffer> run = allocations_end_to_end(ctx, 8, n);
  if (run.empty()) GTEST_SKIP() << "the driver did not place 4 KiB cuMemAlloc allocations end to end here";
  const std::uintptr_t start = run.front().address() + 100;
  const std::int64_t span = 8 * n - 100;
  EXPECT_EQ(cuarrow::wrap_device(ctx, start, span, nullptr).size(), span);
  try {
    (void)cuarrow::wrap_device(ctx, start, span + 1, nullptr);
    ADD_FAILURE() << "a view one byte past 8 allocations end to end was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("run past the memory the CUDA driver knows there"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(span) + " bytes in"), std::string::npos) << e.what();
  }
}

// The walk stops after 262,144 ranges with an error of its own, not the
// one for a producer that describes more memory than it has.
TEST(Buffer, AViewAcrossMoreRangesThanTheWalkTakesSaysSo) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const int ranges = (1 << 18) + 2;
  const std::int64_t n = 256;
  const std::vector<cuarrow::buffer> run = allocations_end_to_end(ctx, ranges, n);
  if (run.empty())
    GTEST_SKIP() << "the driver did not place 262,146 256-byte cuMemAlloc allocations end to end here (the real "
                    "driver sub-allocates small ones from chunks of its own)";
  const std::int64_t span = std::int64_t{ranges} * n;
  try {
    (void)cuarrow::wrap_device(ctx, run.front().address(), span, nullptr);
    ADD_FAILURE() << "a view over " << ranges << " ranges was taken";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cross more than 262144 allocations placed end to end"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("view it in parts"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuarrow::wrap_device(ctx, run.front().address(), std::int64_t{1 << 18} * n, nullptr).size(),
            std::int64_t{1 << 18} * n)
      << "a view over as many ranges as the walk takes";
}

namespace {
// A user-supplied resource: counts calls and delegates to cuMemAlloc.
class counting_resource final : public cuarrow::device_memory_resource {
 public:
  std::uintptr_t allocate(std::int64_t bytes, cuarrow::stream_view s) override {
    ++allocations;
    return inner.allocate(bytes, s);
  }
  void deallocate(std::uintptr_t p, std::int64_t bytes, cuarrow::stream_view s) noexcept override {
    ++deallocations;
    inner.deallocate(p, bytes, s);
  }
  std::string name() const override { return "counting"; }
  std::atomic<int> allocations{0};
  std::atomic<int> deallocations{0};
  cuarrow::plain_device_resource inner;
};
}  // namespace

TEST(MemoryResource, DefaultIsTheIpcPoolWhereSupported) {
  cuarrow::context ctx = cuarrow::context::get(0);
  if (!ctx.properties().memory_pools_supported) {
    EXPECT_EQ(ctx.memory_resource()->name(), "cuda_malloc");
    return;
  }
  EXPECT_EQ(ctx.memory_resource()->name(), "cuda_ipc_pool");
  EXPECT_EQ(ctx.memory_resource(), cuarrow::ipc_pool_resource::shared_for(ctx))
      << "the process-wide pool of the device";
}

TEST(MemoryResource, PoolsReportWhatTheyHoldAndTrimTheirCache) {
  cuarrow::context ctx = cuarrow::context::get(0);
  EXPECT_FALSE(std::make_shared<cuarrow::plain_device_resource>()->statistics().has_value());
  if (!ctx.properties().memory_pools_supported) GTEST_SKIP() << "no memory pools on this device";
  for (std::shared_ptr<cuarrow::device_memory_resource> r :
       {ctx.memory_resource(),
        std::shared_ptr<cuarrow::device_memory_resource>(std::make_shared<cuarrow::async_pool_resource>(ctx))}) {
    SCOPED_TRACE(r->name());
    ctx.synchronize();
    const cuarrow::pool_statistics before = r->statistics().value();
    {
      cuarrow::buffer b = cuarrow::allocate_device(ctx, 3 << 20, {}, r);
      ctx.synchronize();
      const cuarrow::pool_statistics during = r->statistics().value();
      EXPECT_GE(during.used_bytes, before.used_bytes + (3 << 20));
      EXPECT_GE(during.reserved_bytes, during.used_bytes);
    }
    ctx.synchronize();
    const cuarrow::pool_statistics after = r->statistics().value();
    EXPECT_EQ(after.used_bytes, before.used_bytes) << "the buffer went back to the pool";
    r->trim(0);
    EXPECT_LE(r->statistics().value().reserved_bytes, after.reserved_bytes);
    try {
      r->trim(-1);
      ADD_FAILURE() << "a negative keep_bytes was accepted";
    } catch (const cuarrow::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("keep_bytes must be 0 or more, not -1"), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryResource, EnvironmentChoosesTheDefaultResource) {
  cuarrow::context ctx = cuarrow::context::get(0);
  struct restore {
    ~restore() { unsetenv("CUARROW_MEMORY_RESOURCE"); }
  } r;
  for (const char* name : {"cuda_ipc_pool", "cuda_async_pool", "cuda_malloc"}) {
    setenv("CUARROW_MEMORY_RESOURCE", name, 1);
    std::shared_ptr<cuarrow::device_memory_resource> chosen = cuarrow::make_default_resource(ctx);
    EXPECT_EQ(chosen->name(), ctx.properties().memory_pools_supported ? name : "cuda_malloc");
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 64, {}, chosen);
    EXPECT_EQ(b.size(), 64);
  }
  setenv("CUARROW_MEMORY_RESOURCE", "rmm", 1);
  try {
    (void)cuarrow::make_default_resource(ctx);
    ADD_FAILURE() << "an unknown resource name was accepted";
  } catch (const cuarrow::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CUARROW_MEMORY_RESOURCE=rmm is not one of cuda_ipc_pool"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryResource, UserResourceIsUsedAndKeptAliveByItsBuffers) {
  cuarrow::context ctx = cuarrow::context::get(0);
  auto mine = std::make_shared<counting_resource>();
  ctx.set_memory_resource(mine);
  cuarrow::buffer b = cuarrow::allocate_device(ctx, 512);
  EXPECT_EQ(mine->allocations.load(), 1);
  ctx.set_memory_resource(nullptr);  // back to the default
  EXPECT_NE(ctx.memory_resource()->name(), "counting");
  std::weak_ptr<counting_resource> watch = mine;
  counting_resource* raw = mine.get();
  mine.reset();
  EXPECT_FALSE(watch.expired());  // b still needs it to free its memory
  b = cuarrow::buffer();
  EXPECT_TRUE(watch.expired());
  (void)raw;
}

TEST(MemoryResource, StreamOrderedAllocationOnAStream) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  auto src = pattern(10000, 6);
  for (int i = 0; i < 20; ++i) {
    cuarrow::buffer b = cuarrow::allocate_device(ctx, 10000, s);
    EXPECT_EQ(b.free_stream(), s.view());
    cuarrow::copy_from_host(b, 0, src.data(), 10000, s);
    std::vector<std::uint8_t> back(10000);
    cuarrow::copy_to_host(back.data(), b, 0, 10000, s);
    ASSERT_EQ(back, src);
  }
}

TEST(Buffer, OutlivesTheStreamItWasAllocatedOn) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t base = ctx.bytes_allocated();
  auto src = pattern(5000, 21);
  cuarrow::buffer b;
  {
    cuarrow::stream s(ctx);
    b = cuarrow::allocate_device(ctx, 5000, s);
    EXPECT_EQ(b.free_stream(), s.view());
    cuarrow::copy_from_host_async(b, 0, src.data(), 5000, s);
  }  // the stream is destroyed first (after its work is done)
  EXPECT_EQ(to_vector(b), src);
  b = cuarrow::buffer();  // freed on the legacy default stream, not the destroyed one
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), base);
}

TEST(Buffer, AllocationOnAForeignStreamOutlivesThatStream) {
  // A stream created behind cuarrow's back, as CuPy or PyTorch would, through
  // the same driver library (emulated or real).
  void* lib = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  ASSERT_NE(get_proc, nullptr);
  void* create = nullptr;
  void* destroy = nullptr;
  ASSERT_EQ(get_proc("cuStreamCreate", &create, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(get_proc("cuStreamDestroy", &destroy, 4000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS);
  cuarrow::context ctx = cuarrow::context::get(0);
  const std::int64_t base = ctx.bytes_allocated();
  auto src = pattern(4096, 22);
  cuarrow::buffer b;
  {
    cuarrow::scoped_context guard(ctx);
    CUstream raw = nullptr;
    ASSERT_EQ(reinterpret_cast<PFN_cuStreamCreate_v2000>(create)(&raw, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    cuarrow::stream_view foreign(raw);
    b = cuarrow::allocate_device(ctx, 4096, foreign);
    EXPECT_TRUE(b.free_stream().is_default());  // re-homed: the foreign stream may die first
    cuarrow::copy_from_host(b, 0, src.data(), 4096, foreign);
    ASSERT_EQ(reinterpret_cast<PFN_cuStreamDestroy_v4000>(destroy)(raw), CUDA_SUCCESS);
  }
  EXPECT_EQ(to_vector(b), src);
  b = cuarrow::buffer();
  ctx.synchronize();
  EXPECT_EQ(ctx.bytes_allocated(), base);
}

// pyarrow.cuda's argument rules (cuarrow::ranges): the counts, and the
// messages pyarrow users match on, thrown as argument_out_of_range (which
// the Python layer raises as pyarrow.cuda does, a plain ValueError).
namespace {
template <class F>
std::string range_error(F&& f) {
  try {
    f();
  } catch (const cuarrow::argument_out_of_range& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(BufferRanges, ReadCount) {
  namespace r = cuarrow::ranges;
  EXPECT_EQ(r::read_count(10, 0, -1), 10);
  EXPECT_EQ(r::read_count(10, 4, -1), 6);
  EXPECT_EQ(r::read_count(10, 10, -1), 0);
  EXPECT_EQ(r::read_count(10, 4, 6), 6);
  EXPECT_EQ(r::read_count(10, 4, -1, 3), 3);  // as much as fits
  EXPECT_EQ(r::read_count(10, 4, 3, 3), 3);
  EXPECT_EQ(range_error([] { r::read_count(10, 11, -1); }), "position argument is out-of-range");
  EXPECT_EQ(range_error([] { r::read_count(0, 1, -1); }), "position argument is out-of-range");
  EXPECT_EQ(range_error([] { r::read_count(10, -1, -1); }), "position argument is out-of-range");
  EXPECT_EQ(range_error([] { r::read_count(10, 4, 7); }), "requested more to copy than available from device buffer");
  EXPECT_EQ(range_error([] { r::read_count(10, 4, 4, 3); }), "requested copy does not fit into host buffer");
  EXPECT_EQ(range_error([] { r::read_count(10, 4, 7, 8); }),
            "requested more to copy than available from device buffer");
  EXPECT_EQ(range_error([] { r::read_count(10, 0, -2); }),
            "nbytes argument must be non-negative (or -1 for all), got -2");
}

TEST(BufferRanges, WriteCount) {
  namespace r = cuarrow::ranges;
  EXPECT_EQ(r::write_count(10, 0, -1, 4, true), 4);
  EXPECT_EQ(r::write_count(10, 8, -1, 4, true), 2);  // as much as fits
  EXPECT_EQ(r::write_count(10, 10, -1, 4, false), 0);
  EXPECT_EQ(range_error([] { r::write_count(10, 11, -1, 4, true); }), "position argument is out-of-range");
  EXPECT_EQ(range_error([] { r::write_count(10, 0, 5, 4, true); }),
            "requested more to copy than available from host buffer");
  EXPECT_EQ(range_error([] { r::write_count(10, 0, 5, 4, false); }),
            "requested more to copy than available from device buffer");
  EXPECT_EQ(range_error([] { r::write_count(10, 8, 3, 4, true); }),
            "requested more to copy than available in device buffer");
}

TEST(BufferRanges, SourceCountAndSliceLength) {
  namespace r = cuarrow::ranges;
  EXPECT_EQ(r::source_count(10, 2, -1), 8);
  EXPECT_EQ(r::source_count(10, 2, 8), 8);
  EXPECT_EQ(r::source_count(0, 0, -1), 0);
  EXPECT_EQ(range_error([] { r::source_count(10, 10, -1); }), "offset argument is out-of-range");
  EXPECT_EQ(range_error([] { r::source_count(10, 2, 9); }), "requested larger slice than available in device buffer");
  EXPECT_EQ(range_error([] { r::source_count(10, 0, -3); }),
            "size argument must be non-negative (or -1 for all), got -3");
  EXPECT_EQ(r::slice_length(10, 2, std::nullopt), 8);
  EXPECT_EQ(r::slice_length(10, 2, 100), 8);  // clamped, as pyarrow
  EXPECT_EQ(r::slice_length(0, 0, std::nullopt), 0);
  EXPECT_EQ(range_error([] { r::slice_length(10, 10, std::nullopt); }), "offset argument is out-of-range");
  EXPECT_EQ(range_error([] { r::slice_length(0, 1, std::nullopt); }), "offset argument is out-of-range");
  EXPECT_EQ(range_error([] { r::slice_length(10, 0, -1); }), "length argument must be non-negative, got -1");
}
