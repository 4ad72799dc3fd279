// Transfers are batched: counted at the driver boundary.
//
// This program loads cuarrow's driver through libcuarrow_arrow_driver_shim
// (driver_shim.cpp), which forwards to the real driver (the emulation when
// CUARROW_CUDA_DRIVER=emulated, else libcuda.so.1) and counts the calls:
// synchronizations, copies, allocations, event records and waits.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "arrow_test_util.hpp"

namespace cuarrow_arrow_test {
namespace {

using namespace cuarrow::arrow;  // NOLINT

unsigned long (*g_count)(const char*) = nullptr;
void (*g_reset)() = nullptr;

// Copies (htod, dtoh, dtod) count DMAs, whether each is a driver call of
// its own or one of a cuMemcpyBatchAsync (`batches` counts those calls).
struct calls {
  unsigned long syncs, htod, dtoh, dtoh_max_bytes, dtod, allocs, records, waits, syncs_after_copy, batches;
};

calls now() {
  return calls{g_count("cuStreamSynchronize") + g_count("cuCtxSynchronize") + g_count("cuEventSynchronize"),
               g_count("cuMemcpyHtoDAsync") + g_count("cuMemcpyBatchAsync.htod"),
               g_count("cuMemcpyDtoHAsync") + g_count("cuMemcpyBatchAsync.dtoh"),
               g_count("cuMemcpyDtoHAsync.max_bytes"),
               g_count("cuMemcpyDtoDAsync") + g_count("cuMemcpyAsync") + g_count("cuMemcpyPeerAsync") +
                   g_count("cuMemcpyBatchAsync.dtod"),
               g_count("cuMemAllocAsync") + g_count("cuMemAllocFromPoolAsync") + g_count("cuMemAlloc"),
               g_count("cuEventRecord"),
               g_count("cuStreamWaitEvent"),
               g_count("synchronizations.after_copy"),
               g_count("cuMemcpyBatchAsync")};
}

// Whether `reads` small reads of device memory into pinned memory go to
// cuarrow's gather kernel (one launch per 1,000), as where it runs they do
// from 8 on, instead of one driver copy each.
bool reads_by_kernel(std::int64_t reads, const cuarrow::context& ctx) {
  return reads >= 8 && ctx.gather_status() == "ready";
}

std::int64_t non_empty_buffers(const array_data& a) {
  std::int64_t n = 0;
  for (const cuarrow::buffer& b : a.buffers) n += b.size() > 0 ? 1 : 0;
  for (const array_data& c : a.children) n += non_empty_buffers(c);
  if (a.dictionary) n += non_empty_buffers(*a.dictionary);
  return n;
}

// Small reads cheap validation makes: first + last offset of each
// offset-based array, last run end of each run-end encoded array.
std::int64_t probes(const array_data& a) {
  std::int64_t n = 0;
  const type_id id = a.type.id;
  if (a.length > 0 &&
      (id == type_id::binary || id == type_id::utf8 || id == type_id::large_binary || id == type_id::large_utf8 ||
       id == type_id::list || id == type_id::large_list || id == type_id::map)) {
    n += 2;
  }
  if (a.length > 0 && id == type_id::run_end_encoded) n += 1;
  for (const array_data& c : a.children) n += probes(c);
  if (a.dictionary) n += probes(*a.dictionary);
  return n;
}

record_batch wide_batch() {
  record_batch b;
  for (auto& [name, a] : sample_arrays()) {
    if (a.length < 3) continue;
    b.schema.fields.push_back(field(name, a.type));
    b.columns.push_back(a.slice(1, 2));
  }
  b.num_rows = 2;
  return b;
}

// A batch of a hundred small buffers in ordinary memory: gathered into one
// pinned block laid out as the device arena is, so ONE DMA carries them all.
// Nothing waits for the copy; the only wait is for work queued on the stream
// before (which may still write host memory the copy reads), as the driver
// itself makes before staging pageable memory.
TEST(ArrowBatching, HostToDeviceGathersSmallBuffersIntoOneDmaAndNeverWaitsForIt) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  record_batch b = wide_batch();
  ctx.synchronize();
  g_reset();
  record_batch d = to_device_async(b, ctx, s);
  const calls c = now();
  std::int64_t copies = 0;
  for (const array_data& col : d.columns) copies += non_empty_buffers(col);
  EXPECT_GT(copies, 100);
  EXPECT_EQ(c.htod, 1u) << copies << " buffers in one DMA";
  EXPECT_EQ(c.syncs_after_copy, 0u) << "to_device_async must not wait for its copy";
  EXPECT_LE(c.syncs, 1u) << "at most one wait, for earlier work, before the sources are read";
  EXPECT_EQ(c.allocs, 1u);  // one allocation for the whole batch
  g_reset();
  s.synchronize();
  EXPECT_EQ(now().syncs, 1u);
  EXPECT_TRUE(same_values(b, d));
  // The synchronous form: the same, plus exactly one synchronization after the copy.
  g_reset();
  record_batch d2 = to_device(b, ctx, s);
  EXPECT_EQ(now().syncs_after_copy, 1u);
  EXPECT_EQ(now().htod, 1u);
  EXPECT_EQ(now().allocs, 1u);
  EXPECT_TRUE(same_values(b, d2));
}

// Many pageable columns (each below the staging threshold, together far
// above it) travel through the staging pipeline as one job: a DMA per chunk,
// not one driver-staged copy per buffer.
TEST(ArrowBatching, ManySmallPageableColumnsAreStagedTogether) {
  cuarrow::context ctx = cuarrow::context::get(0);
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.staging_threshold_bytes = 1 << 20;
  o.staging_chunk_bytes = 1 << 20;
  o.staging_threads = 2;
  cuarrow::set_transfer_options(o);
  record_batch b;
  const int columns = 64;
  const std::int64_t rows = 16384;  // 128 KiB of int64 per column
  for (int c = 0; c < columns; ++c) {
    std::vector<std::optional<std::int64_t>> v(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) v[static_cast<std::size_t>(i)] = c * 1000003LL + i;
    b.schema.fields.push_back(field("c" + std::to_string(c), int64()));
    b.columns.push_back(primitive<std::int64_t>(int64(), v));
  }
  b.num_rows = rows;
  ctx.reset_transfer_stats();
  g_reset();
  record_batch d = to_device(b, ctx);
  const calls c = now();
  EXPECT_EQ(ctx.transfer_stats().staged_bytes, columns * rows * 8);
  EXPECT_LE(c.htod, 16u) << "one DMA per chunk of about 1 MiB for 8 MiB of columns";
  EXPECT_EQ(c.allocs, 1u);
  EXPECT_TRUE(same_values(b, d));
  cuarrow::set_transfer_options(saved);
}

TEST(ArrowBatching, DeviceToHostIsOneBatchedReadThenOneSynchronization) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  record_batch b = wide_batch();
  record_batch d = to_device(b, ctx, s);
  std::int64_t copies = 0, reads = 0;
  for (const array_data& col : d.columns) {
    copies += non_empty_buffers(col);
    reads += probes(col);
  }
  EXPECT_GT(reads, 20);

  g_reset();
  record_batch h = to_host(d, s);  // cheap validation first
  calls c = now();
  EXPECT_EQ(c.syncs, 2u) << "one for the batched read of offsets, one at the end";
  // The device arena that to_device laid out comes back into a host arena
  // of the same layout: its buffers (and the padding between them) travel
  // in one DMA instead of one per buffer.
  EXPECT_GT(copies, 100);
  if (reads_by_kernel(reads, ctx)) {
    // The reads of offsets in one launch of the gather kernel, and the
    // arena's one copy.
    EXPECT_EQ(g_count("cuLaunchKernel"), 1u);
    EXPECT_EQ(c.dtoh, 1u);
    EXPECT_EQ(c.batches, 0u);
  } else {
    // The reads of offsets go to the driver together: one batched call, and
    // the arena's one copy.
    EXPECT_EQ(c.dtoh, static_cast<unsigned long>(reads + 1));
    EXPECT_EQ(c.batches, 1u);
  }
  EXPECT_EQ(g_count("cuMemcpyDtoHAsync"), 1u);
  EXPECT_TRUE(same_values(b, h));

  g_reset();
  record_batch t = to_host(d, s, {validation_level::none});
  c = now();
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_EQ(c.dtoh, 1u);
  EXPECT_TRUE(same_values(b, t));
}

// The batches of a table (or chunks of a chunked array) move together: one
// batched copy and one synchronization for all of them, an allocation each.
TEST(ArrowBatching, ManyBatchesAreOneBatchedCopyEachWay) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  std::vector<record_batch> batches(5, wide_batch());
  ctx.synchronize();
  g_reset();
  std::vector<record_batch> d = to_device(batches, ctx, s);
  calls c = now();
  EXPECT_EQ(c.syncs_after_copy, 1u);
  EXPECT_EQ(c.htod, 5u) << "each batch's buffers gathered into one DMA to its arena";
  EXPECT_EQ(c.allocs, 5u);
  ASSERT_EQ(d.size(), 5u);
  g_reset();
  std::vector<record_batch> h = to_host(d, s, {validation_level::none});
  c = now();
  EXPECT_EQ(c.syncs, 1u);
  EXPECT_EQ(c.dtoh, 5u) << "one DMA per batch: each arena comes back whole";
  for (std::size_t b = 0; b < h.size(); ++b) EXPECT_TRUE(same_values(batches[b], h[b])) << "batch " << b;

  std::vector<array_data> chunks;
  for (auto& [name, a] : sample_arrays()) {
    if (name == "int64" || name == "utf8") chunks.push_back(a);
  }
  ASSERT_EQ(chunks.size(), 2u);
  std::vector<array_data> dc = to_device(chunks, ctx, s);
  g_reset();
  std::vector<array_data> hc = to_host(dc, s);
  EXPECT_EQ(now().syncs, 2u) << "one for the batched read of offsets, one at the end";
  for (std::size_t i = 0; i < hc.size(); ++i) EXPECT_TRUE(same_values(chunks[i], hc[i]));

  // A malformed batch is named.
  std::vector<record_batch> bad = batches;
  bad[3].num_rows = 7;
  try {
    to_device(bad, ctx, s);
    FAIL() << "a batch of the wrong shape was accepted";
  } catch (const invalid_data& e) {
    EXPECT_NE(std::string(e.what()).find("batch 3"), std::string::npos) << e.what();
  }
}

// to_host_async queues the batched copy and returns: its structure is final
// at once, nothing synchronizes until wait(), which synchronizes once.
TEST(ArrowBatching, ToHostAsyncSynchronizesOnlyInWait) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  std::vector<record_batch> batches(3, wide_batch());
  std::vector<record_batch> d = to_device(batches, ctx, s);
  g_reset();
  host_transfer<std::vector<record_batch>> t = to_host_async(d, s, {validation_level::none});
  calls c = now();
  EXPECT_EQ(c.syncs, 0u) << "to_host_async must not wait for the copies";
  EXPECT_EQ(c.dtoh, 3u) << "one DMA per batch, queued";
  ASSERT_EQ(t.data().size(), 3u);
  for (std::size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(t.data()[b].num_rows, batches[b].num_rows);
    for (const array_data& column : t.data()[b].columns) {
      if (non_empty_buffers(column) == 0) continue;  // a null column lives nowhere
      EXPECT_EQ(placement_of(column).type, cuarrow::device_type::cuda_host)
          << "the result lands in pinned memory from the pool";
    }
  }
  t.wait();
  EXPECT_EQ(now().syncs, 1u);
  t.wait();
  EXPECT_EQ(now().syncs, 1u) << "a second wait() returns at once";
  std::vector<record_batch> h = std::move(t).get();
  for (std::size_t b = 0; b < h.size(); ++b) EXPECT_TRUE(same_values(batches[b], h[b])) << "batch " << b;

  // Arrays too; dropped without waiting, the memory stays alive until the
  // copies have run (the keep-alive of copy_batch_async) and nothing leaks.
  std::vector<array_data> chunks;
  for (auto& [name, a] : sample_arrays()) {
    if (name == "int64" || name == "utf8") chunks.push_back(a);
  }
  std::vector<array_data> dc = to_device(chunks, ctx, s);
  { host_transfer<std::vector<array_data>> dropped = to_host_async(dc, s); }
  host_transfer<std::vector<array_data>> ta = to_host_async(dc, s);
  std::vector<array_data> hc = std::move(ta).get();
  ASSERT_EQ(hc.size(), chunks.size());
  for (std::size_t i = 0; i < hc.size(); ++i) EXPECT_TRUE(same_values(chunks[i], hc[i]));
  s.synchronize();
}

// to_host_for_export waits at once only for what pyarrow's importer reads
// (binary and string offsets ...): fixed-width data is exported while the
// DMA runs.
TEST(ArrowBatching, ToHostForExportWaitsOnlyForWhatTheImporterReads) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream s(ctx);
  std::vector<array_data> ints, strings;
  for (auto& [name, a] : sample_arrays()) {
    if (name == "int64") ints.push_back(a);
    if (name == "utf8") strings.push_back(a);
  }
  ASSERT_EQ(ints.size(), 1u);
  ASSERT_EQ(strings.size(), 1u);
  std::vector<array_data> di = to_device(ints, ctx, s), ds = to_device(strings, ctx, s);
  g_reset();
  const array_transfer_options unchecked{validation_level::none};  // cheap checks of device data may synchronize
  host_transfer<std::vector<array_data>> ti = to_host_for_export(di, s, unchecked);
  EXPECT_EQ(now().syncs, 0u) << "int64 values are not read by the importer";
  host_transfer<std::vector<array_data>> ts = to_host_for_export(ds, s, unchecked);
  EXPECT_EQ(now().syncs, 1u) << "utf8 offsets are read by the importer: waited for";
  ts.wait();
  EXPECT_EQ(now().syncs, 1u) << "already waited";
  EXPECT_TRUE(same_values(strings[0], std::move(ts).get()[0]));
  EXPECT_TRUE(same_values(ints[0], std::move(ti).get()[0]));

  // A batch as soon as one column is read.
  const std::int64_t n = std::min(di[0].length, ds[0].length);
  record_batch mixed = make_record_batch(schema{{field("i", ints[0].type), field("s", strings[0].type)}, {}},
                                         {di[0].slice(0, n), ds[0].slice(0, n)});
  g_reset();
  host_transfer<std::vector<record_batch>> tb =
      to_host_for_export(std::span<const record_batch>(&mixed, 1), s, unchecked);
  EXPECT_EQ(now().syncs, 1u);
  s.synchronize();
}

// Pointer queries of either form (cuarrow asks with cuPointerGetAttributes,
// detail::query_pointer; the single-attribute call counts too).
unsigned long pointer_queries() { return g_count("cuPointerGetAttribute") + g_count("cuPointerGetAttributes"); }

// Below the staging threshold ordinary memory goes to the driver directly,
// pinned or not: a small copy does not ask the driver what its host side is.
TEST(ArrowBatching, SmallHostCopiesDoNotQueryPointerAttributes) {
  cuarrow::context ctx = cuarrow::context::get(0);
  std::int32_t value = 7;
  std::int32_t back = 0;
  cuarrow::buffer dev = cuarrow::allocate_device(ctx, 4);
  g_reset();
  cuarrow::copy_from_host(dev, 0, &value, 4);
  cuarrow::copy_to_host(&back, dev, 0, 4);
  EXPECT_EQ(back, 7);
  EXPECT_EQ(pointer_queries(), 0u);
  EXPECT_EQ(now().htod, 1u);
  EXPECT_EQ(now().dtoh, 1u);
  // At the threshold the driver is asked, once per piece.
  const cuarrow::transfer_options saved = cuarrow::get_transfer_options();
  cuarrow::transfer_options o = saved;
  o.staging_threshold_bytes = 4;
  cuarrow::set_transfer_options(o);
  g_reset();
  cuarrow::copy_from_host(dev, 0, &value, 4);
  EXPECT_EQ(pointer_queries(), 1u);
  cuarrow::set_transfer_options(saved);
}

TEST(ArrowBatching, ValidationOfADeviceArrayReadsOnlyOffsets) {
  cuarrow::context ctx = cuarrow::context::get(0);
  array_data deep;
  for (auto& [name, a] : sample_arrays()) {
    if (name == "deep") deep = a;
  }
  array_data d = to_device(deep, ctx);
  g_reset();
  validate(d);
  const calls c = now();
  EXPECT_EQ(c.syncs, 1u);
  if (reads_by_kernel(probes(d), ctx)) {
    EXPECT_EQ(g_count("cuLaunchKernel"), 1u);
    EXPECT_EQ(c.dtoh, 0u);
  } else {
    EXPECT_EQ(c.dtoh, static_cast<unsigned long>(probes(d)));
  }
  EXPECT_LE(c.dtoh_max_bytes, 8u) << "never whole offset buffers";
}

TEST(ArrowBatching, ImportReadsEveryLastOffsetInOneBatch) {
  cuarrow::context ctx = cuarrow::context::get(0);
  cuarrow::stream producer(ctx);
  cuarrow::stream consumer(ctx);
  record_batch b = wide_batch();
  record_batch d = to_device_async(b, ctx, producer);
  owned_device_array arr;
  owned_schema sch;
  g_reset();
  export_device_record_batch(d, producer, arr.get(), sch.get());
  EXPECT_EQ(now().records, 1u);
  EXPECT_EQ(now().syncs, 0u);

  std::int64_t reads = 0;
  for (const array_data& col : d.columns) reads += probes(col);
  g_reset();
  record_batch back = import_device_record_batch(arr.get(), sch.get(), consumer);
  const calls c = now();
  EXPECT_EQ(c.waits, 1u);  // the consumer waits on the producer's event
  EXPECT_EQ(c.syncs, 1u);  // one batched read sizes and validates the whole batch
  if (reads_by_kernel(reads, ctx)) {
    EXPECT_EQ(g_count("cuLaunchKernel"), 1u);
    EXPECT_EQ(c.dtoh, 0u);
  } else {
    EXPECT_EQ(c.dtoh, static_cast<unsigned long>(reads));
  }
  EXPECT_LE(c.dtoh_max_bytes, 8u);
  EXPECT_EQ(c.allocs, 0u);  // buffers are views of the producer's memory
  EXPECT_TRUE(same_values(b, back));
}

}  // namespace
}  // namespace cuarrow_arrow_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // --env=NAME=VALUE: set before the driver is loaded (as test_main.cpp does).
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--env=", 6) == 0) putenv(argv[i] + 6);
  }
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();  // test discovery: no driver needed
  // The shim lives beside libcuarrow (or in ../lib of a static test binary).
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&cuarrow::load_driver), &info);
  std::string dir = info.dli_fname != nullptr ? info.dli_fname : ".";
  dir = dir.substr(0, dir.rfind('/'));
  std::string shim = dir + "/libcuarrow_arrow_driver_shim.so";
  if (FILE* f = std::fopen(shim.c_str(), "r")) {
    std::fclose(f);
  } else {
    shim = dir + "/../lib/libcuarrow_arrow_driver_shim.so";
  }
  const char* target = std::getenv("CUARROW_CUDA_DRIVER");
  setenv("CUARROW_SHIM_TARGET", target != nullptr ? target : "", 1);
  try {
    cuarrow::select_driver(shim);
    cuarrow::load_driver();
  } catch (const cuarrow::error& e) {
    std::fprintf(stderr, "[cuarrow] cannot load the counting shim %s: %s\n", shim.c_str(), e.what());
    return 1;
  }
  void* h = dlopen(cuarrow::driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  using namespace cuarrow_arrow_test;
  g_count = h != nullptr ? reinterpret_cast<unsigned long (*)(const char*)>(dlsym(h, "cuarrow_shim_count")) : nullptr;
  g_reset = h != nullptr ? reinterpret_cast<void (*)()>(dlsym(h, "cuarrow_shim_reset")) : nullptr;
  if (g_count == nullptr || g_reset == nullptr) {
    std::fprintf(stderr, "[cuarrow] the driver %s is not the counting shim\n", cuarrow::driver_path().c_str());
    return 1;
  }
  std::printf("[cuarrow] counting shim %s in front of %s, %d device(s)\n", shim.c_str(),
              target != nullptr && target[0] ? target : "libcuda.so.1", cuarrow::device_count());
  return RUN_ALL_TESTS();
}
