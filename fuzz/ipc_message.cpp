// libFuzzer target: the Arrow IPC metadata reader (include/cuarrow/ipc/
// metadata.hpp) on raw bytes, three ways: as one FlatBuffers `Message`, as
// an encapsulated stream (prefixes, metadata, bodies skipped, end of
// stream), and as a whole IPC file (magic, trailer, footer).  The input is
// its own allocation under AddressSanitizer, so any read past it is found.
// Properties: only invalid_message escapes the readers; what is accepted
// writes without error and reads back to the same values (the writer
// rebuilds it as Arrow would, so the bytes may differ from the input's, but
// the second write is byte for byte the first).
#include <cstdint>
#include <span>

#include "cuarrow/ipc/metadata.hpp"
#include "fuzz_input.hpp"

namespace ipc = cuarrow::ipc;

namespace {

bool same(const ipc::message_metadata& a, const ipc::message_metadata& b) {
  return a.version == b.version && a.header == b.header && a.body_length == b.body_length &&
         a.custom_metadata == b.custom_metadata;
}

void check_message(const ipc::message_metadata& m) {
  const auto bytes = ipc::write_message_metadata(m);
  const ipc::message_metadata back = ipc::read_message_metadata(bytes);
  if (!same(m, back)) cuarrow_fuzz::property_failed("a message read, written and read again differs");
  if (ipc::write_message_metadata(back) != bytes) cuarrow_fuzz::property_failed("a message writes two ways");
}

void as_message(std::span<const std::byte> in) {
  ipc::message_metadata m;
  try {
    m = ipc::read_message_metadata(in);
  } catch (const ipc::invalid_message&) {
    return;
  }
  check_message(m);
}

void as_stream(std::span<const std::byte> in) {
  std::size_t pos = 0;
  for (int i = 0; i < 64; ++i) {
    ipc::message_metadata m;
    ipc::encapsulated_metadata e;
    try {
      e = ipc::read_encapsulated_metadata(in.subspan(pos));
      if (e.prefix.end_of_stream()) return;
      m = ipc::read_message_metadata(e.flatbuffer);
    } catch (const ipc::invalid_message&) {
      return;
    }
    if (e.flatbuffer.data() != in.data() + pos + e.prefix.prefix_length) {
      cuarrow_fuzz::property_failed("the metadata is not where the prefix says");
    }
    check_message(m);
    const auto encapsulated = ipc::write_encapsulated_metadata(m);
    if (encapsulated.size() % 8 != 0) cuarrow_fuzz::property_failed("encapsulated metadata not padded to 8");
    const std::size_t left = in.size() - pos - static_cast<std::size_t>(e.prefix.size());
    if (static_cast<std::uint64_t>(m.body_length) > left) return;  // the body is cut short
    pos += static_cast<std::size_t>(e.prefix.size() + m.body_length);
  }
}

void as_file(std::span<const std::byte> in) {
  ipc::file_footer f;
  try {
    f = ipc::read_file_footer(in);
  } catch (const ipc::invalid_message&) {
    return;
  }
  const auto end = static_cast<std::int64_t>(in.size()) - ipc::file_trailer_size;
  for (const auto* blocks : {&f.dictionaries, &f.record_batches}) {
    for (const auto& b : *blocks) {
      if (b.offset < ipc::file_header_size || b.offset + b.metadata_length + b.body_length > end) {
        cuarrow_fuzz::property_failed("a block accepted outside the file");
      }
    }
  }
  const auto trailer = ipc::write_file_trailer(f);
  ipc::file_footer back;
  try {
    // The rewritten footer, at the end of a file large enough for its blocks.
    std::vector<std::byte> file(in.begin(), in.end());
    file.insert(file.end(), trailer.begin(), trailer.end());
    back = ipc::read_file_footer(file);
  } catch (const ipc::invalid_message&) {
    cuarrow_fuzz::property_failed("a footer read and written is refused");
  }
  if (back.version != f.version || !(back.schema == f.schema) || back.dictionaries != f.dictionaries ||
      back.record_batches != f.record_batches || back.custom_metadata != f.custom_metadata) {
    cuarrow_fuzz::property_failed("a footer read, written and read again differs");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  as_message(in);
  as_stream(in);
  as_file(in);
  return 0;
}
