// libFuzzer target: the IPC stream and file readers over memory
// (include/cuarrow/ipc/stream.hpp) on raw bytes: the input as a stream and
// as a file, in host memory and, for the first byte odd, in (emulated)
// device memory.  Every batch read is validated (cheap) and copied to the
// host, which checks what host readers index with.
// Properties: only cuarrow's invalid_argument family escapes (invalid
// messages, invalid data, out of range); an accepted stream written again
// by stream_writer and read back has as many batches with as many rows.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/stream.hpp"
#include "emulated_driver.hpp"
#include "fuzz_input.hpp"

namespace ipc = cuarrow::ipc;

namespace {

cuarrow::buffer source_of(const std::uint8_t* data, std::size_t size, bool device) {
  if (device && size > 0) {
    return cuarrow::copy_to_device(cuarrow::context::get(0), data, static_cast<std::int64_t>(size));
  }
  cuarrow::buffer b = cuarrow::allocate_host(static_cast<std::int64_t>(size));
  if (size > 0) std::memcpy(b.mutable_host_data(), data, size);
  return b;
}

void as_stream(const cuarrow::buffer& src) {
  std::vector<cuarrow::arrow::record_batch> batches;
  ipc::schema_message schema;
  try {
    ipc::stream_reader r(src);
    schema = r.schema();
    for (int i = 0; i < 64; ++i) {
      std::optional<cuarrow::arrow::record_batch> b = r.read_next();
      if (!b) break;
      (void)cuarrow::arrow::to_host(*b);
      batches.push_back(std::move(*b));
    }
  } catch (const cuarrow::invalid_argument&) {
    return;
  }
  // Written again (in device memory) and read back: the same shape.
  std::vector<cuarrow::arrow::record_batch> back;
  try {
    ipc::stream_writer w(schema.schema, cuarrow::context::get(0));
    for (const auto& b : batches) w.write(b);
    back = ipc::stream_reader(w.finish()).read_all();
  } catch (const cuarrow::invalid_argument&) {
    // A stream read from elsewhere may hold what this writer does not write
    // (e.g. a dictionary replaced between batches of a file).
    return;
  }
  if (back.size() != batches.size()) cuarrow_fuzz::property_failed("a stream written again has other batches");
  for (std::size_t i = 0; i < back.size(); ++i) {
    if (back[i].num_rows != batches[i].num_rows) cuarrow_fuzz::property_failed("a batch written again has other rows");
  }
}

void as_file(const cuarrow::buffer& src) {
  try {
    ipc::file_reader r(src);
    for (int i = 0; i < r.num_record_batches() && i < 64; ++i) (void)cuarrow::arrow::to_host(r.read_batch(i));
  } catch (const cuarrow::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool device = (data[0] & 1) != 0;
  const cuarrow::buffer src = source_of(data + 1, size - 1, device);
  as_stream(src);
  as_file(src);
  return 0;
}
