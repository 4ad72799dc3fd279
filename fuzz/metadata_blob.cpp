// libFuzzer target: the ArrowSchema metadata blob decoder, on raw bytes of
// known length.  Properties: never reads past the bytes it is given (the
// input is its own allocation under AddressSanitizer); what it accepts
// encodes back to the same bytes it consumed.
#include <cstdint>
#include <string>

#include "arrow/c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"
#include "fuzz_input.hpp"

using namespace cuarrow::arrow;  // NOLINT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* blob = reinterpret_cast<const char*>(data);
  try {
    const key_value_metadata md = detail::decode_metadata(blob, size, "fuzz");
    // Re-encode through the exporter and compare with the consumed prefix.
    owned_schema c;
    export_field(field("m", int32(), true, md), c.get());
    std::size_t used = 4;
    for (const auto& [k, v] : md) used += 8 + k.size() + v.size();
    if (used > size) cuarrow_fuzz::property_failed("decoded more than the blob holds");
    if (md.empty()) {
      if (c->metadata != nullptr) cuarrow_fuzz::property_failed("empty metadata exported as a blob");
    } else if (std::string(c->metadata, used) != std::string(blob, used)) {
      cuarrow_fuzz::property_failed("metadata re-encodes differently");
    }
  } catch (const cuarrow::error&) {
  }
  return 0;
}
