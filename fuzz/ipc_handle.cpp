// libFuzzer target: ipc_memory_handle::deserialize, the bytes another
// process sends.  The first input byte picks a mode: odd values rewrite the
// checksum of a cuarrow-format handle of either version (so the fields
// behind it are reached, not only the checksum test); the rest of the input
// is the handle.
// Properties: never reads past the bytes; what it accepts has size >= 0,
// offset >= 0, offset + size without overflow, and serializes to bytes that
// deserialize to the same handle.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/ipc.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool fix_checksum = (data[0] & 1) != 0;
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if (fix_checksum && (bytes.size() == cuarrow::ipc_memory_handle::serialized_size ||
                       bytes.size() == cuarrow::ipc_memory_handle::pool_serialized_size)) {
    const std::size_t at = bytes.size() - 8;
    cuarrow_fuzz::put_checksum(bytes.data() + at, bytes.data(), at);
  }
  try {
    const auto h = cuarrow::ipc_memory_handle::deserialize(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
    if (h.size() < 0 || h.offset() < 0 || h.offset() > INT64_MAX - h.size()) {
      cuarrow_fuzz::property_failed("an accepted handle has a bad range");
    }
    (void)h.describe();
    (void)h.exported_by_this_process();
    const std::vector<std::byte> again = h.serialize();
    const auto h2 = cuarrow::ipc_memory_handle::deserialize(again);
    if (h2.size() != h.size() || h2.offset() != h.offset() || h2.device_id() != h.device_id() ||
        h2.driver_handle() != h.driver_handle() || h2.kind() != h.kind() || h2.pool_id() != h.pool_id() ||
        h2.serialize() != again) {
      cuarrow_fuzz::property_failed("a handle does not survive serialize + deserialize");
    }
  } catch (const cuarrow::error&) {
  }
  return 0;
}
