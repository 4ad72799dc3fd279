// libFuzzer target: ipc::read_shared_descriptor, the descriptor of a shared
// object that another process sends (include/cuarrow/ipc/share.hpp).  The
// first input byte picks a mode: bit 0 rewrites the checksum of the IPC
// handle inside (version 1: bytes 16-127, its checksum at 120; version 2,
// pool memory, 144 bytes: bytes 16-135, its checksum at 128), bit 1 the
// descriptor's own (the last 8 bytes), so that the fields behind each check
// are reached; the rest of the input is the descriptor.  Properties: never reads past the
// bytes; what it accepts has a known kind and a handle with a sane range
// whose serialization is the descriptor's handle bytes (for an empty buffer,
// the canonical empty handle's).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/ipc/share.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if (bytes.size() == cuarrow::ipc::shared_object::descriptor_size) {
    if ((mode & 1) != 0) cuarrow_fuzz::put_checksum(bytes.data() + 16 + 104, bytes.data() + 16, 104);
    if ((mode & 2) != 0) cuarrow_fuzz::put_checksum(bytes.data() + 128, bytes.data(), 128);
  } else if (bytes.size() == cuarrow::ipc::shared_object::pool_descriptor_size) {
    if ((mode & 1) != 0) cuarrow_fuzz::put_checksum(bytes.data() + 16 + 112, bytes.data() + 16, 112);
    if ((mode & 2) != 0) cuarrow_fuzz::put_checksum(bytes.data() + 136, bytes.data(), 136);
  }
  try {
    const cuarrow::ipc::shared_descriptor d = cuarrow::ipc::read_shared_descriptor(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
    const auto kind = static_cast<int>(d.kind);
    if (kind < 1 || kind > 5) cuarrow_fuzz::property_failed("an accepted descriptor has an unknown kind");
    const cuarrow::ipc_memory_handle& h = d.handle;
    if (h.size() < 0 || h.offset() < 0 || h.offset() > INT64_MAX - h.size()) {
      cuarrow_fuzz::property_failed("an accepted descriptor's handle has a bad range");
    }
    (void)cuarrow::ipc::to_string(d.kind);
    const std::vector<std::byte> again = h.serialize();
    const bool pool = d.memory == cuarrow::ipc::share_memory::pool;
    if (pool != (h.kind() == cuarrow::ipc_handle_kind::pool) ||
        bytes.size() !=
            (pool ? cuarrow::ipc::shared_object::pool_descriptor_size : cuarrow::ipc::shared_object::descriptor_size)) {
      cuarrow_fuzz::property_failed("an accepted descriptor's version, size and handle kind disagree");
    }
    if (again.size() !=
        (pool ? cuarrow::ipc_memory_handle::pool_serialized_size : cuarrow::ipc_memory_handle::serialized_size)) {
      cuarrow_fuzz::property_failed("an accepted descriptor's handle serializes to the wrong size");
    }
    if (h.size() > 0) {
      if (std::memcmp(again.data(), bytes.data() + 16, again.size()) != 0) {
        cuarrow_fuzz::property_failed("an accepted descriptor's handle does not serialize to its bytes");
      }
    } else {
      // An empty buffer's handle is read as the one empty handle, whatever
      // offset and driver bytes came with it: its bytes are canonical.
      const cuarrow::ipc_memory_handle empty = cuarrow::ipc_memory_handle::deserialize(again);
      if (h.offset() != 0 || empty.serialize() != again) {
        cuarrow_fuzz::property_failed("an accepted empty handle does not serialize to the canonical empty handle");
      }
    }
  } catch (const cuarrow::error&) {
  }
  return 0;
}
