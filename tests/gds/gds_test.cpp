// GPUDirect Storage (include/cuarrow/gds.hpp, the file readers' cuFile
// path): libcufile absent, switched off, or replaced by the fake of
// fake_cufile.cpp, which runs the cuFile path over pread and the driver
// emulation.  gds_status() is computed once a process, so each situation is
// a ctest entry of its own (tests/gds/CMakeLists.txt sets the environment
// and picks the suite with --gtest_filter).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arrow/arrow_test_util.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/error.hpp"
#include "cuarrow/gds.hpp"
#include "cuarrow/ipc/file.hpp"
#include "cuarrow/ipc/file_writer.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "fault_api.hpp"
#include "temp_files.hpp"
#include "test_data.hpp"
#include "test_support.hpp"

namespace cuarrow_gds_test {
namespace {

using namespace cuarrow::arrow;      // NOLINT
using namespace cuarrow_arrow_test;  // NOLINT
namespace ipc = cuarrow::ipc;
namespace fs = std::filesystem;
using pref = ipc::read_path_preference;

const char* const kFiles[] = {"file_primitives.arrow", "file_dictionaries.arrow", "file_wide.arrow"};
const char* const kStreams[] = {"primitives.arrows",   "binaries.arrows",         "nested.arrows",
                                "metadata.arrows",     "empty_batch.arrows",      "empty_schema.arrows",
                                "dictionaries.arrows", "dictionary_deltas.arrows"};
const char* const kCompressedFiles[] = {"file_lz4.arrow", "file_zstd.arrow"};

using test_data::load;

cuarrow::context ctx() { return cuarrow::context::get(0); }

ipc::file_read_options with_path(pref p) {
  ipc::file_read_options o;
  o.path = p;
  return o;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The fake's control functions (fake_cufile.cpp), found in the library
// cuarrow loaded.
struct fake_api {
  void (*fail_read)(unsigned long long, long long, int) = nullptr;
  void (*fail_register)(int) = nullptr;
  unsigned long long (*reads)() = nullptr;
  std::size_t (*live_handles)() = nullptr;
  int (*opens)() = nullptr;
};

const fake_api& fake() {
  static const fake_api api = [] {
    fake_api a;
    (void)cuarrow::gds_status();  // loads it
    const char* path = std::getenv("CUARROW_CUFILE_LIBRARY");
    void* h = path == nullptr ? nullptr : dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return a;
    a.fail_read = reinterpret_cast<void (*)(unsigned long long, long long, int)>(dlsym(h, "fake_cufile_fail_read"));
    a.fail_register = reinterpret_cast<void (*)(int)>(dlsym(h, "fake_cufile_fail_register"));
    a.reads = reinterpret_cast<unsigned long long (*)()>(dlsym(h, "fake_cufile_reads"));
    a.live_handles = reinterpret_cast<std::size_t (*)()>(dlsym(h, "fake_cufile_live_handles"));
    a.opens = reinterpret_cast<int (*)()>(dlsym(h, "fake_cufile_opens"));
    return a;
  }();
  return api;
}

class Gds : public cuarrow_test::temp_files_test {
 protected:
  std::string write_golden(const std::string& name) const { return write(name, load(name)); }

  // A file of `batches` batches of three int64 columns of `rows` rows (24
  // bytes a row), values depending on the batch.
  std::string write_large(const std::string& name, int batches, std::int64_t rows) const {
    const std::string path = (dir_ / name).string();
    record_batch b;
    b.schema.fields = {field("a", int64()), field("b", int64()), field("c", int64())};
    b.num_rows = rows;
    std::optional<ipc::file_writer> w;
    for (int k = 0; k < batches; ++k) {
      b.columns.clear();
      for (int c = 0; c < 3; ++c) {
        std::vector<std::int64_t> v(static_cast<std::size_t>(rows));
        for (std::int64_t i = 0; i < rows; ++i) v[static_cast<std::size_t>(i)] = i * 7 + c * 1000003 + k * 31;
        array_data a;
        a.type = int64();
        a.length = rows;
        a.null_count = 0;
        a.buffers = {cuarrow::buffer(), host_vector(v)};
        b.columns.push_back(a);
      }
      if (!w) w.emplace(path, b.schema);
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

std::vector<record_batch> read_stream(const std::string& path, pref p, std::vector<ipc::read_path>* paths = nullptr) {
  ipc::device_stream_reader r(path, ctx(), with_path(p));
  std::vector<record_batch> out;
  while (std::optional<record_batch> b = r.read_next()) {
    out.push_back(std::move(*b));
    if (paths) paths->push_back(r.last_read_path());
  }
  return out;
}

// ---- libcufile absent (CUARROW_CUFILE_LIBRARY names no library, CUARROW_GDS=on) ----------

TEST_F(Gds, AbsentLibraryIsReportedAndReadersUseStaging) {
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_EQ(g.mode, "on");
  EXPECT_FALSE(g.loaded);
  EXPECT_FALSE(g.usable);
  EXPECT_FALSE(g.available);
  EXPECT_EQ(g.library, std::getenv("CUARROW_CUFILE_LIBRARY"));
  EXPECT_TRUE(contains(g.reason, "libcufile not found")) << g.reason;

  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::device_file_reader r(path, ctx());
    EXPECT_EQ(r.last_read_path_reason(), g.reason);
    const std::vector<record_batch> got = r.read_all();
    const std::vector<record_batch> mem = ipc::file_reader([&] {
                                            const std::vector<std::byte> bytes = load(name);
                                            cuarrow::buffer b =
                                                cuarrow::allocate_host(static_cast<std::int64_t>(bytes.size()));
                                            std::memcpy(b.mutable_host_data(), bytes.data(), bytes.size());
                                            return b;
                                          }())
                                              .read_all();
    expect_same(mem, got);
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
    EXPECT_EQ(r.last_read_path_reason(), g.reason);
  }
}

TEST_F(Gds, AbsentLibraryAndGdsAskedForIsADriverError) {
  const std::string path = write_golden("file_primitives.arrow");
  const std::string m = message_of([&] { ipc::device_file_reader r(path, ctx(), with_path(pref::gds)); });
  EXPECT_TRUE(contains(m, "asked for the gds read path")) << m;
  EXPECT_TRUE(contains(m, "libcufile not found")) << m;
  EXPECT_THROW(ipc::device_stream_reader(write_golden("primitives.arrows"), ctx(), with_path(pref::gds)),
               cuarrow::driver_error);
  ipc::device_file_reader staged(path, ctx(), with_path(pref::staging));
  (void)staged.read_batch(0);
  EXPECT_EQ(staged.last_read_path(), ipc::read_path::staging);
  EXPECT_EQ(staged.last_read_path_reason(), "file_read_options asked for the staging path");
}

// The names a caller (the Python package's read_path=) gives the preferences.
TEST_F(Gds, PreferencesByName) {
  EXPECT_EQ(ipc::read_path_preference_from("auto"), pref::automatic);
  EXPECT_EQ(ipc::read_path_preference_from("staging"), pref::staging);
  EXPECT_EQ(ipc::read_path_preference_from("gds"), pref::gds);
  for (const pref p : {pref::automatic, pref::staging, pref::gds}) {
    EXPECT_EQ(ipc::read_path_preference_from(ipc::to_string(p)), p) << ipc::to_string(p);
  }
  for (const char* bad : {"", "GDS", "direct", "staging "}) {
    const std::string m = message_of([&] { (void)ipc::read_path_preference_from(bad); });
    EXPECT_TRUE(contains(m, "\"auto\"") && contains(m, "\"staging\" or \"gds\"")) << m;
    EXPECT_TRUE(contains(m, std::string("not \"") + bad + "\"")) << m;
  }
  EXPECT_THROW((void)ipc::read_path_preference_from("cufile"), cuarrow::invalid_argument);
}

// ---- the emulated driver and no library named: libcufile is not loaded ---------------------

TEST_F(Gds, EmulatedDriverLoadsNoLibcufile) {
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_EQ(g.mode, "auto");
  EXPECT_FALSE(g.loaded);
  EXPECT_FALSE(g.available);
  EXPECT_EQ(g.library, "libcufile.so.0");
  EXPECT_TRUE(contains(g.reason, "host emulation")) << g.reason;
  EXPECT_EQ(dlopen("libcufile.so.0", RTLD_NOW | RTLD_NOLOAD), nullptr);
  ipc::device_file_reader r(write_golden("file_primitives.arrow"), ctx());
  (void)r.read_batch(0);
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
}

// ---- CUARROW_GDS=off with the fake named: never loaded ----------------------------------

TEST_F(Gds, OffLoadsNothing) {
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_EQ(g.mode, "off");
  EXPECT_FALSE(g.loaded);
  EXPECT_FALSE(g.usable);
  EXPECT_TRUE(contains(g.reason, "CUARROW_GDS=off")) << g.reason;
  EXPECT_EQ(dlopen(std::getenv("CUARROW_CUFILE_LIBRARY"), RTLD_NOW | RTLD_NOLOAD), nullptr);
  const std::string path = write_golden("file_primitives.arrow");
  ipc::device_file_reader r(path, ctx());
  (void)r.read_batch(0);
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  const std::string m = message_of([&] { ipc::device_file_reader x(path, ctx(), with_path(pref::gds)); });
  EXPECT_TRUE(contains(m, "CUARROW_GDS=off")) << m;
  EXPECT_EQ(dlopen(std::getenv("CUARROW_CUFILE_LIBRARY"), RTLD_NOW | RTLD_NOLOAD), nullptr);
}

// ---- the fake whose driver does not open ------------------------------------------------

TEST_F(Gds, DriverThatDoesNotOpenIsReported) {
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_TRUE(g.loaded);
  EXPECT_FALSE(g.usable);
  EXPECT_FALSE(g.available);
  EXPECT_TRUE(contains(g.reason, "cuFileDriverOpen failed: CU_FILE_DRIVER_NOT_INITIALIZED (5001)")) << g.reason;
  ipc::device_file_reader r(write_golden("file_wide.arrow"), ctx());
  (void)r.read_all();
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  EXPECT_EQ(r.last_read_path_reason(), g.reason);
  EXPECT_THROW(ipc::device_file_reader(write_golden("file_primitives.arrow"), ctx(), with_path(pref::gds)),
               cuarrow::driver_error);
}

// ---- the fake named, CUARROW_GDS=auto, no nvidia-fs: libcufile is not loaded -------------

TEST_F(Gds, AutoWithoutNvidiaFsLoadsNothing) {
  if (::access("/proc/driver/nvidia-fs/version", F_OK) == 0) GTEST_SKIP() << "nvidia-fs is loaded on this machine";
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_EQ(g.mode, "auto");
  EXPECT_FALSE(g.loaded);
  EXPECT_FALSE(g.available);
  EXPECT_TRUE(g.compat_mode);
  EXPECT_TRUE(contains(g.reason, "nvidia-fs kernel module is not loaded")) << g.reason;
  EXPECT_TRUE(contains(g.reason, "CUARROW_GDS=on")) << g.reason;
  EXPECT_EQ(dlopen(std::getenv("CUARROW_CUFILE_LIBRARY"), RTLD_NOW | RTLD_NOLOAD), nullptr);
  const std::string path = write_golden("file_wide.arrow");
  ipc::device_file_reader r(path, ctx());
  (void)r.read_all();
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  EXPECT_EQ(r.last_read_path_reason(), g.reason);
  const std::string m = message_of([&] { ipc::device_file_reader x(path, ctx(), with_path(pref::gds)); });
  EXPECT_TRUE(contains(m, "asked for the gds read path")) << m;
  EXPECT_TRUE(contains(m, "CUARROW_GDS=on")) << m;
}

// ---- the fake, CUARROW_GDS=on: compatibility mode is reported and used ------------------

TEST_F(Gds, OnUsesCompatibilityMode) {
  if (::access("/proc/driver/nvidia-fs/version", F_OK) == 0) GTEST_SKIP() << "nvidia-fs is loaded on this machine";
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_EQ(g.mode, "on");
  EXPECT_TRUE(g.loaded);
  EXPECT_TRUE(g.usable);
  EXPECT_TRUE(g.compat_mode);
  EXPECT_TRUE(g.available);
  EXPECT_TRUE(contains(g.reason, "compatibility mode")) << g.reason;
  EXPECT_TRUE(contains(g.reason, "used because CUARROW_GDS=on")) << g.reason;
  ipc::device_file_reader r(write_golden("file_wide.arrow"), ctx(), with_path(pref::gds));
  (void)r.read_all();
  EXPECT_EQ(r.last_read_path(), ipc::read_path::gds);
  EXPECT_TRUE(contains(r.last_read_path_reason(), "compatibility mode")) << r.last_read_path_reason();
}

// ---- the fake reporting nvidia-fs version 0.0: compatibility mode even with nvidia-fs --------

TEST_F(Gds, NvidiaFsVersionZeroIsCompatibilityMode) {
  const cuarrow::gds_info g = cuarrow::gds_status();
  EXPECT_TRUE(g.usable) << g.reason;
  EXPECT_TRUE(g.compat_mode);
  EXPECT_TRUE(contains(g.reason, "nvidia-fs version 0.0")) << g.reason;
}

// ---- the fake, CUARROW_GDS=on: the cuFile path reads everything -------------------------

class GdsFake : public Gds {
 protected:
  void SetUp() override {
    Gds::SetUp();
    const cuarrow::gds_info g = cuarrow::gds_status();
    ASSERT_TRUE(g.available) << g.reason;
    ASSERT_NE(fake().reads, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(fake().live_handles(), 0u) << "every reader deregistered its file";
    Gds::TearDown();
  }
};

TEST_F(GdsFake, GoldenFilesReadThroughCuFileAsThroughStaging) {
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::device_file_reader staged(path, ctx(), with_path(pref::staging));
    const unsigned long long before = fake().reads();
    ipc::device_file_reader r(path, ctx());
    EXPECT_EQ(fake().live_handles(), 1u);
    ASSERT_EQ(r.num_record_batches(), staged.num_record_batches());
    const std::vector<record_batch> got = r.read_all();
    EXPECT_EQ(r.last_read_path(), ipc::read_path::gds) << r.last_read_path_reason();
    EXPECT_TRUE(contains(r.last_read_path_reason(), "cuFile")) << r.last_read_path_reason();
    EXPECT_GE(fake().reads() - before, static_cast<unsigned long long>(r.num_record_batches()));
    expect_same(staged.read_all(), got);
    EXPECT_EQ(staged.last_read_path(), ipc::read_path::staging);
    // Same bytes read (metadata and bodies) either way.
    EXPECT_EQ(r.bytes_read(), staged.bytes_read());
  }
}

TEST_F(GdsFake, GoldenStreamsReadThroughCuFileAsThroughStaging) {
  for (const char* name : kStreams) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    std::vector<ipc::read_path> paths;
    const std::vector<record_batch> got = read_stream(path, pref::automatic, &paths);
    expect_same(read_stream(path, pref::staging), got);
    for (const ipc::read_path p : paths) EXPECT_NE(p, ipc::read_path::none);
  }
  // A stream with bodies: each batch came through cuFile.
  std::vector<ipc::read_path> paths;
  (void)read_stream(write_golden("primitives.arrows"), pref::automatic, &paths);
  ASSERT_FALSE(paths.empty());
  for (const ipc::read_path p : paths) EXPECT_EQ(p, ipc::read_path::gds);
}

TEST_F(GdsFake, CompressedBodiesGoThroughStaging) {
  for (const char* name : kCompressedFiles) {
    SCOPED_TRACE(name);
    const std::string path = write_golden(name);
    ipc::device_file_reader staged(path, ctx(), with_path(pref::staging));
    ipc::device_file_reader r(path, ctx());
    const unsigned long long before = fake().reads();
    const std::vector<record_batch> got = r.read_all();
    EXPECT_EQ(fake().reads(), before);
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
    EXPECT_TRUE(contains(r.last_read_path_reason(), "compressed")) << r.last_read_path_reason();
    expect_same(staged.read_all(), got);
  }
}

// The span of device memory from a batch's first buffer to the end of its
// last (its buffers are slices of its one body allocation).
cuarrow::buffer body_span(const record_batch& b) {
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  const std::function<void(const array_data&)> visit = [&](const array_data& a) {
    for (const cuarrow::buffer& x : a.buffers) {
      if (x.size() == 0) continue;
      lo = std::min(lo, x.address());
      hi = std::max(hi, x.address() + static_cast<std::uintptr_t>(x.size()));
    }
    for (const array_data& c : a.children) visit(c);
  };
  for (const array_data& c : b.columns) visit(c);
  if (hi <= lo) throw std::runtime_error("a batch without bytes");
  return cuarrow::wrap_device(ctx(), lo, static_cast<std::int64_t>(hi - lo), nullptr);
}

std::vector<std::byte> bytes_of(const cuarrow::buffer& b) {
  std::vector<std::byte> out(static_cast<std::size_t>(b.size()));
  cuarrow::copy_to_host(out.data(), b, 0, b.size());
  return out;
}

TEST_F(GdsFake, ProjectionReadsTheChosenRangesWithTheirPaddingZeroed) {
  const std::string path = write_golden("file_wide.arrow");
  ipc::file_read_options o;
  // bool (125 bytes of values at 1000 rows), a string column's data, then
  // an int64 column: runs whose ends are not 8-byte multiples, each
  // followed by padding in the device body.
  o.columns = std::vector<int>{15, 10, 0};
  ipc::device_file_reader r(path, ctx(), o);
  o.path = pref::staging;
  ipc::device_file_reader staged(path, ctx(), o);
  {
    // Bodies of the same sizes, filled with 0xEE and freed: the memory
    // pool keeps the blocks (with their bytes) and gives them to the next
    // allocations of those sizes, the cuFile reads below.
    const std::vector<record_batch> scratch = staged.read_all();
    for (const record_batch& b : scratch) {
      if (b.num_rows > 0) cuarrow::fill_async(body_span(b), 0, body_span(b).size(), 0xEE, {});
    }
    ctx().synchronize();
  }
  ctx().synchronize();
  const std::vector<record_batch> got = r.read_all();
  EXPECT_EQ(r.last_read_path(), ipc::read_path::gds);
  const std::vector<record_batch> want = staged.read_all();
  expect_same(want, got);
  // The whole device body, the padding between the runs included: zeros,
  // byte for byte as the staging path writes it.
  int compared = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].num_rows == 0) continue;  // file_wide.arrow has an empty batch
    ++compared;
    EXPECT_EQ(bytes_of(body_span(got[i])), bytes_of(body_span(want[i]))) << "batch " << i;
  }
  EXPECT_GE(compared, 2);
}

TEST_F(GdsFake, LargeBodiesAreReadInPartsOnSeveralThreads) {
  const std::int64_t rows = (std::int64_t{1} << 20) + 3;  // 24 MiB and a bit a batch: several 8 MiB parts
  const std::string path = write_large("large.arrow", 2, rows);
  for (const int threads : {0, 1, 3}) {
    SCOPED_TRACE(threads);
    ipc::file_read_options o;
    o.io_threads = threads;
    ipc::device_file_reader r(path, ctx(), o);
    const unsigned long long before = fake().reads();
    const std::vector<record_batch> got = r.read_all();
    EXPECT_EQ(r.last_read_path(), ipc::read_path::gds) << r.last_read_path_reason();
    // Each batch's body: 3 parts at least (24 MiB in 8 MiB parts), each
    // part several calls (the fake moves ~1 MiB a call).
    EXPECT_GE(fake().reads() - before, 2u * 24u);
    o.path = pref::staging;
    ipc::device_file_reader staged(path, ctx(), o);
    expect_same(staged.read_all(), got);
  }
}

TEST_F(GdsFake, AReadFailureFallsBackToStagingForGood) {
  const std::int64_t rows = (std::int64_t{1} << 19) + 5;
  const std::string path = write_large("fallback.arrow", 3, rows);
  ipc::file_read_options o;
  o.path = pref::staging;
  const std::vector<record_batch> expected = ipc::device_file_reader(path, ctx(), o).read_all();
  struct failure {
    long long ret;
    int err;
    const char* says;
  };
  for (const failure f : {failure{-1, EIO, std::strerror(EIO)}, failure{-5011, 0, "CU_FILE_CUDA_DRIVER_ERROR"},
                          failure{0, 0, "the file ends before"}}) {
    SCOPED_TRACE(f.says);
    ipc::device_file_reader r(path, ctx());
    const record_batch first = r.read_batch(0);
    EXPECT_EQ(r.last_read_path(), ipc::read_path::gds);
    fake().fail_read(2, f.ret, f.err);  // inside batch 1
    const unsigned long long before = fake().reads();
    const record_batch second = r.read_batch(1);
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
    const std::string why = r.last_read_path_reason();
    EXPECT_TRUE(contains(why, "cuFileRead")) << why;
    EXPECT_TRUE(contains(why, f.says)) << why;
    EXPECT_TRUE(contains(why, "staging pipeline from now on")) << why;
    const unsigned long long after = fake().reads();
    EXPECT_GE(after - before, 2u);
    const record_batch third = r.read_batch(2);
    EXPECT_EQ(fake().reads(), after) << "no cuFile read after the failure";
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
    EXPECT_EQ(r.last_read_path_reason(), why);
    expect_same(expected, {first, second, third});
  }
}

TEST_F(GdsFake, ARefusedFileFallsBackUnlessGdsIsInsistedOn) {
  const std::string path = write_golden("file_primitives.arrow");
  fake().fail_register(5008);
  ipc::device_file_reader r(path, ctx());
  EXPECT_TRUE(contains(r.last_read_path_reason(), "cuFileHandleRegister refused")) << r.last_read_path_reason();
  EXPECT_TRUE(contains(r.last_read_path_reason(), "CU_FILE_IO_NOT_SUPPORTED (5008)")) << r.last_read_path_reason();
  (void)r.read_all();
  EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  fake().fail_register(5008);
  const std::string m = message_of([&] { ipc::device_file_reader x(path, ctx(), with_path(pref::gds)); });
  EXPECT_TRUE(contains(m, "cuFileHandleRegister refused")) << m;
  ipc::device_file_reader again(path, ctx(), with_path(pref::gds));
  (void)again.read_all();
  EXPECT_EQ(again.last_read_path(), ipc::read_path::gds);
}

TEST_F(GdsFake, NoDeviceMemoryIsLeftBehind) {
  CUARROW_REQUIRE_EMULATION();
  const std::string path = write_golden("file_dictionaries.arrow");
  // Frees the earlier tests queued on their streams run first: counted
  // before they ran, they made the count look like this read freed memory.
  ctx().synchronize();
  const std::size_t before = cuarrow_test::emu().device_allocation_count(0);
  {
    ipc::device_file_reader r(path, ctx());
    (void)r.read_all();
    fake().fail_read(1, -1, EIO);
    (void)r.read_all();
    EXPECT_EQ(r.last_read_path(), ipc::read_path::staging);
  }
  ctx().synchronize();
  EXPECT_EQ(cuarrow_test::emu().device_allocation_count(0), before);
}

// Every driver call of a cuFile read (the padding fill, the stream's
// synchronization, the context pushes of the reading threads, the fake's
// own copies) failing once in turn: the read then returns the right batch
// (through the pipeline when cuFile failed) or throws a typed error, the
// reader stays usable, and nothing is left behind.
TEST_F(GdsFake, DriverFaultsDuringACuFileReadAreTypedErrorsOrFallBacks) {
  CUARROW_REQUIRE_EMULATION();
  ASSERT_TRUE(cuarrow_test::faults().available());
  const auto& f = cuarrow_test::faults();
  const std::string path = write_large("sweep.arrow", 2, (std::int64_t{1} << 18) + 3);  // 6 MiB bodies, 4 threads
  ipc::file_read_options o;
  o.columns = std::vector<int>{2, 0};  // two runs: a padding fill between them
  o.path = pref::staging;
  const record_batch expected = to_host(ipc::device_file_reader(path, ctx(), o).read_batch(1));
  o.path = pref::automatic;
  ctx().synchronize();
  const std::size_t allocations = cuarrow_test::emu().device_allocation_count(0);
  const std::size_t pushes = f.pushes();

  // The entry points one cuFile read calls, and how often.
  std::vector<std::pair<std::string, std::size_t>> calls;
  {
    ipc::device_file_reader r(path, ctx(), o);
    f.reset_calls();
    (void)r.read_batch(1);
    ASSERT_EQ(r.last_read_path(), ipc::read_path::gds);
    for (std::size_t i = 0; const char* name = f.entry_name(i); ++i) {
      if (const std::size_t n = f.calls(name); n > 0) calls.emplace_back(name, n);
    }
  }
  ASSERT_FALSE(calls.empty());
  int failed = 0, fell_back = 0;
  bool pop_failed = false;  // a context left pushed on a worker thread (reported, as the fault sweep accepts)
  for (const auto& [name, n] : calls) {
    for (std::size_t k = 1; k <= n; ++k) {
      SCOPED_TRACE(name + " call " + std::to_string(k));
      ipc::device_file_reader r(path, ctx(), o);
      f.clear();
      ASSERT_EQ(f.inject(name.c_str(), k, 999 /* CUDA_ERROR_UNKNOWN */), 0);
      try {
        const record_batch b = r.read_batch(1);
        if (f.injected() > 0 && name == "cuCtxPopCurrent") pop_failed = true;
        f.clear();
        EXPECT_TRUE(same_values(expected, to_host(b)));
        if (r.last_read_path() == ipc::read_path::staging) ++fell_back;
      } catch (const cuarrow::error&) {
        f.clear();
        ++failed;
      }
      EXPECT_TRUE(same_values(expected, to_host(r.read_batch(1)))) << "the reader stays usable";
    }
  }
  f.clear();
  ctx().synchronize();
  EXPECT_GT(fell_back, 0) << "some faults hit cuFile's reads (the fake's copies)";
  EXPECT_GT(failed, 0) << "some faults hit cuarrow's own calls";
  EXPECT_EQ(cuarrow_test::emu().device_allocation_count(0), allocations);
  if (!pop_failed) {
    EXPECT_EQ(f.pushes(), pushes);
  }
}

}  // namespace
}  // namespace cuarrow_gds_test
