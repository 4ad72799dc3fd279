// libFuzzer target: the IPC file and stream readers by path
// (include/cuarrow/ipc/file.hpp) on raw bytes written to a file: footer
// and metadata by pread, bodies through the staging pipeline in 64 KiB
// chunks (so that buffers straddle chunks), LZ4 and ZSTD decompressed by
// its workers, and the offsets the cheap validation checks taken from the
// staging slots on their way to the (emulated) device.  The first byte
// picks a projection to the first column (bit 0) and GPU decompression of
// ZSTD bodies (bit 1: file_read_options::gpu_decompression, over the host
// stand-in for libnvcomp that scripts/fuzz.sh names in
// CUARROW_NVCOMP_LIBRARY; without it the host decompresses, as asked).
// Properties: only cuarrow's invalid_argument family escapes (no io_error:
// every read is checked against the file's size first); unprojected, what
// the reader by path accepts, the in-memory reader over the same bytes
// accepts too, with as many batches of as many rows (a value taken wrongly
// from the slots would let through what the in-memory reader refuses; a
// projection reads, and checks, only its columns); every batch accepted
// copies to the host, which checks what host readers index with; a stream
// read ahead (stream_readahead, in runs) gives the batches read_next gives,
// and fails after them where read_next fails.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/file.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "emulated_driver.hpp"
#include "fuzz_input.hpp"

namespace ipc = cuarrow::ipc;

namespace {

constexpr std::int64_t kMaxDecompressed = std::int64_t{16} << 20;
constexpr std::size_t kMaxBatches = 64;

// The file the input is written to, one per process, removed at exit.
struct scratch_file {
  std::string path;
  int fd = -1;
  scratch_file() {
    const char* dir = std::getenv("TMPDIR");
    path = std::string(dir != nullptr ? dir : "/tmp") + "/cuarrow_fuzz_ipc_file_XXXXXX";
    fd = ::mkstemp(path.data());
    if (fd < 0) std::abort();
  }
  ~scratch_file() {
    ::close(fd);
    ::unlink(path.c_str());
  }
  void write(const std::uint8_t* data, std::size_t size) const {
    if (::ftruncate(fd, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
  }
};

const scratch_file& scratch() {
  static const scratch_file f;
  return f;
}

// Host decompression for the in-memory readers (they take a hook), with
// the reader by path's limit.
ipc::read_options host_decompress() {
  ipc::read_options o;
  o.decompress = [](ipc::compression_codec c, const cuarrow::buffer& framed) {
    const std::span<const std::byte> in(static_cast<const std::byte*>(framed.host_data()),
                                        static_cast<std::size_t>(framed.size()));
    const std::int64_t n = ipc::decompressed_size(in, kMaxDecompressed);
    cuarrow::buffer out = cuarrow::allocate_host(n);
    ipc::decompress(c, in, {static_cast<std::byte*>(out.mutable_host_data()), static_cast<std::size_t>(n)});
    return out;
  };
  return o;
}

ipc::file_read_options path_options(bool project, bool gpu) {
  ipc::file_read_options o;
  o.gpu_decompression = gpu;
  o.io_threads = 2;
  o.max_decompressed_buffer_bytes = kMaxDecompressed;
  if (project) o.columns = std::vector<int>{0};
  return o;
}

std::vector<std::int64_t> rows_of(const std::vector<cuarrow::arrow::record_batch>& batches) {
  std::vector<std::int64_t> rows;
  for (const auto& b : batches) rows.push_back(b.num_rows);
  return rows;
}

void as_file(const cuarrow::buffer& bytes, bool project, bool gpu) {
  std::vector<cuarrow::arrow::record_batch> got;
  try {
    ipc::device_file_reader r(scratch().path, cuarrow::context::get(0), path_options(project, gpu));
    if (static_cast<std::size_t>(r.num_record_batches()) > kMaxBatches) return;
    got = r.read_all();
    for (const auto& b : got) (void)cuarrow::arrow::to_host(b);
  } catch (const cuarrow::invalid_argument&) {
    return;
  }
  if (project) return;
  std::vector<std::int64_t> expected;
  try {
    ipc::file_reader mem(bytes, host_decompress());
    for (int i = 0; i < mem.num_record_batches(); ++i) expected.push_back(mem.read_batch(i).num_rows);
  } catch (const cuarrow::invalid_argument&) {
    cuarrow_fuzz::property_failed("a file read by path was accepted, the same bytes in memory refused");
  }
  if (rows_of(got) != expected) cuarrow_fuzz::property_failed("a file read by path has other batches or rows");
}

// The rows of the batches a stream_readahead (runs of up to 64 KiB of
// bodies, one run ahead) hands out, up to kMaxBatches; `*failed` when it
// then threw.
std::vector<std::int64_t> rows_read_ahead(bool project, bool gpu, bool* failed) {
  std::vector<std::int64_t> rows;
  *failed = false;
  try {
    ipc::device_stream_reader r(scratch().path, cuarrow::context::get(0), path_options(project, gpu));
    ipc::stream_readahead ahead(r, {1, 64 << 10});
    while (rows.size() < kMaxBatches) {
      std::optional<cuarrow::arrow::record_batch> b = ahead.next();
      if (!b) break;
      (void)cuarrow::arrow::to_host(*b);  // as the read_next loop does
      rows.push_back(b->num_rows);
    }
  } catch (const cuarrow::invalid_argument&) {
    *failed = true;
  }
  return rows;
}

void as_stream(const cuarrow::buffer& bytes, bool project, bool gpu) {
  std::vector<cuarrow::arrow::record_batch> got;
  bool failed = false;
  try {
    ipc::device_stream_reader r(scratch().path, cuarrow::context::get(0), path_options(project, gpu));
    while (got.size() < kMaxBatches) {
      std::optional<cuarrow::arrow::record_batch> b = r.read_next();
      if (!b) break;
      (void)cuarrow::arrow::to_host(*b);
      got.push_back(std::move(*b));
    }
  } catch (const cuarrow::invalid_argument&) {
    failed = true;
  }
  // Read ahead in runs, the same batches come, and the same failure after them.
  bool ahead_failed = false;
  const std::vector<std::int64_t> ahead = rows_read_ahead(project, gpu, &ahead_failed);
  if (ahead != rows_of(got) || (got.size() < kMaxBatches && ahead_failed != failed)) {
    cuarrow_fuzz::property_failed("a stream read ahead has other batches, rows or failure than read_next");
  }
  if (failed || project) return;
  std::vector<std::int64_t> expected;
  try {
    ipc::stream_reader mem(bytes, host_decompress());
    while (expected.size() < got.size()) {
      std::optional<cuarrow::arrow::record_batch> b = mem.read_next();
      if (!b) break;
      expected.push_back(b->num_rows);
    }
  } catch (const cuarrow::invalid_argument&) {
    cuarrow_fuzz::property_failed("a stream read by path was accepted, the same bytes in memory refused");
  }
  if (rows_of(got) != expected) cuarrow_fuzz::property_failed("a stream read by path has other batches or rows");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool configured = [] {
    cuarrow::transfer_options o = cuarrow::get_transfer_options();
    o.staging_chunk_bytes = 64 << 10;
    o.staging_threads_to_device = 2;
    cuarrow::set_transfer_options(o);
    return true;
  }();
  (void)configured;
  if (size < 1) return 0;
  const bool project = (data[0] & 1) != 0;
  const bool gpu = (data[0] & 2) != 0;
  scratch().write(data + 1, size - 1);
  cuarrow::buffer bytes = cuarrow::allocate_host(static_cast<std::int64_t>(size - 1));
  if (size > 1) std::memcpy(bytes.mutable_host_data(), data + 1, size - 1);
  as_file(bytes, project, gpu);
  as_stream(bytes, project, gpu);
  return 0;
}
