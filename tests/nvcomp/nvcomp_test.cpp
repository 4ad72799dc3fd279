// nvCOMP (include/cuarrow/nvcomp.hpp, file_read_options::gpu_decompression):
// libnvcomp absent, switched off, of another major version, or replaced by
// the host stand-in of fake_nvcomp.cpp, which runs the readers' GPU
// decompression path over libzstd and the driver emulation.  nvcomp_status()
// is computed once a process, so each situation is a ctest entry of its own
// (tests/nvcomp/CMakeLists.txt sets the environment and the filter).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arrow/arrow_test_util.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/ipc/file.hpp"
#include "cuarrow/ipc/file_writer.hpp"
#include "cuarrow/nvcomp.hpp"
#include "temp_files.hpp"
#include "test_data.hpp"
#include "test_support.hpp"

namespace cuarrow_nvcomp_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
namespace ipc = cuarrow::ipc;
namespace fs = std::filesystem;

cuarrow::context ctx() { return cuarrow::context::get(0); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using test_data::load;

// Chunks the fake decompressed so far (fake_nvcomp.cpp), -1 when no fake
// is loaded (the real library on the GPU machine: scripts/gpu-suite.sh
// runs the Fake* ... cases over it, without the counts).
long long fake_chunks() {
  (void)cuarrow::nvcomp_status();  // loads it
  const char* path = std::getenv("CUARROW_NVCOMP_LIBRARY");
  void* h = path == nullptr ? nullptr : dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  auto* f = h == nullptr ? nullptr : reinterpret_cast<unsigned long long (*)()>(dlsym(h, "fake_nvcomp_chunks"));
  return f == nullptr ? -1 : static_cast<long long>(f());
}

ipc::file_read_options gpu(bool on = true) {
  ipc::file_read_options o;
  o.gpu_decompression = on;
  o.collect_stats = true;
  return o;
}

class Nvcomp : public cuarrow_test::temp_files_test {
 protected:
  // A ZSTD file of `batches` batches: an int64 column that compresses well,
  // a string column, and an int64 column of noise that does not compress
  // (min_space_savings stores it uncompressed: a -1 length prefix).
  std::string write_zstd(const std::string& name, int batches, std::int64_t rows) const {
    const std::string path = (dir_ / name).string();
    ipc::write_options wo;
    wo.compression = ipc::compression_codec::zstd;
    wo.compress.min_space_savings = 0.1;
    std::optional<ipc::file_writer> w;
    std::uint64_t x = 88172645463325252ull;
    for (int k = 0; k < batches; ++k) {
      std::vector<std::int64_t> a(static_cast<std::size_t>(rows)), noise(static_cast<std::size_t>(rows));
      std::vector<std::optional<std::string>> s(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) {
        a[static_cast<std::size_t>(i)] = i % 17 + k;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        noise[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(x);
        s[static_cast<std::size_t>(i)] = "value " + std::to_string(i % 29);
      }
      record_batch b;
      b.schema.fields = {field("a", int64()), field("s", utf8()), field("noise", int64())};
      b.num_rows = rows;
      array_data ca;
      ca.type = int64();
      ca.length = rows;
      ca.null_count = 0;
      ca.buffers = {cuarrow::buffer(), host_vector(a)};
      array_data cn = ca;
      cn.buffers = {cuarrow::buffer(), host_vector(noise)};
      b.columns = {ca, strings(utf8(), s), cn};
      if (!w)
        w.emplace(path, b.schema, ipc::file_writer::format::file, cuarrow::stream_view{},
                  cuarrow::arrow::key_value_metadata{}, wo);
      w->write(b);
    }
    w->close();
    return path;
  }
};

void expect_same(const std::vector<record_batch>& expected, const std::vector<record_batch>& got) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(same_values(to_host(expected[i]), to_host(got[i]))) << "batch " << i;
  }
}

std::vector<record_batch> read_all(const std::string& path, const ipc::file_read_options& o) {
  return ipc::device_file_reader(path, ctx(), o).read_all();
}

// ---- libnvcomp absent ----------------------------------------------------------------------

TEST_F(Nvcomp, AbsentLibraryIsReportedAndZstdIsDecompressedOnTheHost) {
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_EQ(n.mode, "auto");
  EXPECT_FALSE(n.available);
  EXPECT_EQ(n.library, std::getenv("CUARROW_NVCOMP_LIBRARY"));
  EXPECT_TRUE(contains(n.reason, "libnvcomp not found")) << n.reason;
  const std::string path = write("z.arrow", load("file_zstd.arrow"));
  ipc::device_file_reader r(path, ctx(), gpu());
  expect_same(read_all(path, gpu(false)), r.read_all());
  EXPECT_TRUE(contains(r.last_read_path_reason(), "not on the GPU as asked")) << r.last_read_path_reason();
  EXPECT_TRUE(contains(r.last_read_path_reason(), "libnvcomp not found")) << r.last_read_path_reason();
  EXPECT_EQ(r.stats().gpu_decompress_seconds, 0.0);
  EXPECT_GT(r.stats().decompress_seconds, 0.0);
}

// ---- the emulated driver without a library named: not loaded ------------------------------

TEST_F(Nvcomp, EmulatedDriverDoesNotLoadTheRealLibrary) {
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_FALSE(n.available);
  EXPECT_TRUE(contains(n.reason, "host emulation")) << n.reason;
}

// A default library (what the Python package passes for nvCOMP's wheel) is
// not loaded on the emulation either, unlike the variable, and counts only
// before nvCOMP was examined.
TEST_F(Nvcomp, DefaultLibraryIsNotLoadedOnTheEmulation) {
  const char* fake = std::getenv("CUARROW_TEST_FAKE_NVCOMP");
  ASSERT_NE(fake, nullptr) << "CMake passes the host stand-in's path";
  ASSERT_EQ(std::getenv("CUARROW_NVCOMP_LIBRARY"), nullptr);
  EXPECT_TRUE(cuarrow::set_nvcomp_default_library(fake));
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_FALSE(n.available);
  EXPECT_EQ(n.library, fake);
  EXPECT_TRUE(contains(n.reason, "host emulation")) << n.reason;
  EXPECT_FALSE(cuarrow::set_nvcomp_default_library("/elsewhere/libnvcomp.so.6"));
  EXPECT_EQ(cuarrow::nvcomp_status().library, fake);
  void* loaded = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(loaded, nullptr) << "the stand-in was loaded";
  if (loaded != nullptr) dlclose(loaded);
}

// ---- CUARROW_NVCOMP=off, with the fake named -------------------------------------------------

TEST_F(Nvcomp, OffLoadsNothing) {
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_EQ(n.mode, "off");
  EXPECT_FALSE(n.available);
  EXPECT_TRUE(contains(n.reason, "CUARROW_NVCOMP=off")) << n.reason;
  EXPECT_EQ(fake_chunks(), -1);  // never loaded
  const std::string path = write("z.arrow", load("file_zstd.arrow"));
  expect_same(read_all(path, gpu(false)), read_all(path, gpu()));
}

TEST_F(Nvcomp, AnotherMajorVersionIsNotUsed) {
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_FALSE(n.available);
  EXPECT_EQ(n.version, "5.1.0");
  EXPECT_TRUE(contains(n.reason, "nvCOMP 5.1.0")) << n.reason;
  EXPECT_TRUE(contains(n.reason, "signatures differ")) << n.reason;
}

// ---- the fake: the GPU path runs -------------------------------------------------------------

TEST_F(Nvcomp, FakeIsAvailable) {
  const cuarrow::nvcomp_info n = cuarrow::nvcomp_status();
  EXPECT_TRUE(n.available) << n.reason;
  EXPECT_EQ(n.version.rfind("6.", 0), 0u) << n.version;
  EXPECT_TRUE(contains(n.reason, "nvCOMP " + n.version)) << n.reason;
}

TEST_F(Nvcomp, PyarrowZstdFileReadOnTheGpuEqualsTheHostRead) {
  const std::string path = write("z.arrow", load("file_zstd.arrow"));
  const std::vector<record_batch> host = read_all(path, gpu(false));
  const long long before = fake_chunks();
  ipc::device_file_reader r(path, ctx(), gpu());
  const std::vector<record_batch> got = r.read_all();
  expect_same(host, got);
  if (before >= 0) {
    EXPECT_GT(fake_chunks(), before);
  }
  EXPECT_TRUE(contains(r.last_read_path_reason(), "decompressed on the GPU by nvCOMP 6.")) << r.last_read_path_reason();
  EXPECT_GT(r.stats().gpu_decompress_seconds, 0.0);
  // One batch at a time, and the host path untouched when not asked for.
  for (int i = 0; i < r.num_record_batches(); ++i) {
    EXPECT_TRUE(same_values(to_host(host[static_cast<std::size_t>(i)]), to_host(r.read_batch(i)))) << i;
  }
  const long long after = fake_chunks();
  (void)read_all(path, gpu(false));
  EXPECT_EQ(fake_chunks(), after);
}

TEST_F(Nvcomp, ManyBatchesWithStoredUncompressedBuffersAndProjection) {
  const std::string path = write_zstd("many.arrow", 40, 3000);
  const std::vector<record_batch> host = read_all(path, gpu(false));
  ASSERT_EQ(host.size(), 40u);
  const long long before = fake_chunks();
  expect_same(host, read_all(path, gpu()));
  // Most noise buffers are stored (-1 prefix), staged straight into the
  // body; the int column, the string offsets and values go to nvCOMP.
  if (before >= 0) {
    EXPECT_GE(fake_chunks() - before, 40 * 3);
    EXPECT_LT(fake_chunks() - before, 40 * 4);
  }
  ipc::file_read_options o = gpu();
  o.columns = std::vector<int>{2, 0};
  const std::vector<record_batch> projected_host = [&] {
    ipc::file_read_options h = o;
    h.gpu_decompression = false;
    return read_all(path, h);
  }();
  expect_same(projected_host, read_all(path, o));
  // Every scratch allocation is gone once the read returns.
  if (!cuarrow_test::emu().available()) return;  // only the emulation counts them
  const std::vector<record_batch> kept = read_all(path, gpu());
  ctx().synchronize();  // the earlier reads' stream-ordered frees are done
  const std::size_t live = cuarrow_test::emu().device_allocation_count(0);
  (void)read_all(path, gpu());
  ctx().synchronize();  // frees are stream ordered
  EXPECT_EQ(cuarrow_test::emu().device_allocation_count(0), live);
}

TEST_F(Nvcomp, Lz4IsDecompressedOnTheHost) {
  const std::string path = write("l.arrow", load("file_lz4.arrow"));
  const long long before = fake_chunks();
  ipc::device_file_reader r(path, ctx(), gpu());
  expect_same(read_all(path, gpu(false)), r.read_all());
  EXPECT_EQ(fake_chunks(), before);
  EXPECT_FALSE(contains(r.last_read_path_reason(), "nvCOMP")) << r.last_read_path_reason();
}

// The offset of the first ZSTD frame (its magic number) in a file.
std::size_t first_frame(const std::vector<std::byte>& bytes) {
  const std::byte magic[4] = {std::byte{0x28}, std::byte{0xb5}, std::byte{0x2f}, std::byte{0xfd}};
  for (std::size_t i = 8; i + 32 < bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, magic, 4) == 0) return i;
  }
  throw std::runtime_error("no ZSTD frame in the file");
}

TEST_F(Nvcomp, CorruptFrameIsAnInvalidMessageNamingTheBuffer) {
  std::vector<std::byte> bytes;
  {
    const std::string good = write_zstd("good.arrow", 2, 5000);
    std::ifstream in(good, std::ios::binary);
    const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.resize(raw.size());
    std::memcpy(bytes.data(), raw.data(), raw.size());
  }
  // Past the frame header: its blocks are garbled, the header intact (the
  // host's check passes it on to nvCOMP, which must say no).
  const std::size_t f = first_frame(bytes);
  for (std::size_t i = f + 20; i < f + 60; ++i) bytes[i] = std::byte{0xff};
  const std::string path = write("bad.arrow", bytes);
  ipc::device_file_reader r(path, ctx(), gpu());
  ctx().synchronize();
  const bool counted = cuarrow_test::emu().available();  // only the emulation counts allocations
  const std::size_t live = counted ? cuarrow_test::emu().device_allocation_count(0) : 0;
  std::string m;
  try {
    (void)r.read_all();
  } catch (const ipc::invalid_message& e) {
    m = e.what();
  }
  EXPECT_TRUE(contains(m, "buffers[")) << m;
  EXPECT_TRUE(contains(m, "nvCOMP cannot decompress it")) << m;
  ctx().synchronize();
  if (counted) {
    EXPECT_EQ(cuarrow_test::emu().device_allocation_count(0), live);  // nothing kept
  }
  // The reader and the context stay usable: the second batch is intact.
  EXPECT_EQ(r.read_batch(1).num_rows, 5000);
}

// ---- the fake told to fail -------------------------------------------------------------------

TEST_F(Nvcomp, ChunkStatusIsAnInvalidMessage) {
  // The file's dictionaries are read when it is opened: the first failure.
  const std::string path = write("z.arrow", load("file_zstd.arrow"));
  const std::string m = message_of([&] { ipc::device_file_reader r(path, ctx(), gpu()); });
  EXPECT_TRUE(contains(m, "dictionary block 0 buffers[")) << m;
  EXPECT_TRUE(contains(m, "nvCOMP cannot decompress it: nvcompErrorCannotDecompress")) << m;
  EXPECT_TRUE(contains(m, "the fake could not decompress the chunk")) << m;
  EXPECT_THROW(ipc::device_file_reader(path, ctx(), gpu()), ipc::invalid_message);
  // Not asked to use the GPU, a reader reads it.
  ipc::device_file_reader host(path, ctx(), gpu(false));
  EXPECT_GT(host.read_all().size(), 0u);
}

TEST_F(Nvcomp, WrongDecompressedSizeIsAnInvalidMessage) {
  const std::string path = write_zstd("z.arrow", 2, 1000);
  ipc::device_file_reader r(path, ctx(), gpu());
  EXPECT_THROW((void)r.read_all(), ipc::invalid_message);
  const std::string m = message_of([&] { (void)r.read_batch(1); });
  EXPECT_TRUE(contains(m, "record batch block 1 buffers[")) << m;
  EXPECT_TRUE(contains(m, "not the")) << m;
  EXPECT_TRUE(contains(m, "its length prefix declares")) << m;
}

TEST_F(Nvcomp, RefusedLaunchIsAnError) {
  const std::string path = write_zstd("z.arrow", 1, 1000);
  ipc::device_file_reader r(path, ctx(), gpu());
  const std::string m = message_of([&] { (void)r.read_all(); });
  EXPECT_TRUE(contains(m, "nvcompBatchedZstdDecompressAsync refused")) << m;
  EXPECT_TRUE(contains(m, "nvcompErrorInvalidValue")) << m;
}

}  // namespace
}  // namespace cuarrow_nvcomp_test
