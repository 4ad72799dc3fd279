// libFuzzer target: ipc::read_record_batch over a fuzzed record batch
// header and body, against a schema from a small fixed set
// (ipc_body_cases.hpp) or of one column of a type from array_import's
// grammar, with a dictionary in the memo, the body in host or
// device memory, cheap or full validation, V4 or V5 unions, compressed
// headers with and without a decompress hook.
// Properties: no crash, no read outside the body (ASan; device memory in the
// emulation is host memory ASan sees), only cuarrow errors; a batch accepted
// with full validation lies within the body, and written again
// (layout_body + write_body) and read back it holds the same values.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/copy.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "ipc_body_cases.hpp"

namespace {

namespace ipc = cuarrow::ipc;
using namespace cuarrow::arrow;  // NOLINT

// The dictionary every case's dictionary fields point at: utf8 ["a", "bc", null].
array_data dictionary_values() {
  static const std::int32_t offsets[] = {0, 1, 3, 3};
  static const char data[] = "abc";
  static const std::uint8_t valid[] = {0x03};
  array_data d;
  d.type = utf8();
  d.length = 3;
  d.null_count = 1;
  d.buffers = {cuarrow::wrap_host(valid, 1, nullptr, false), cuarrow::wrap_host(offsets, 16, nullptr, false),
               cuarrow::wrap_host(data, 3, nullptr, false)};
  return d;
}

bool within(const array_data& a, const cuarrow::buffer& body) {
  for (const auto& b : a.buffers) {
    if (b.size() > 0 && (b.address() < body.address() || b.address() + b.size() > body.address() + body.size())) {
      return false;
    }
  }
  for (const auto& c : a.children) {
    if (!within(c, body)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<ipc::schema_message> schemas = cuarrow_fuzz::ipc_body::schemas();
  cuarrow_fuzz::input in(data, size);
  const cuarrow_fuzz::ipc_body::encoded_case c = cuarrow_fuzz::ipc_body::decode(in);
  ipc::schema_message grammar;
  if (c.type) grammar.schema.fields.emplace_back("g", *c.type);
  const ipc::schema_message& sm = c.type ? grammar : schemas[c.schema % schemas.size()];
  ipc::record_batch_header h = c.header;
  if (c.compression == 1) h.compression = ipc::compression_codec::lz4_frame;
  if (c.compression == 2) h.compression = ipc::compression_codec::zstd;
  try {
    static const cuarrow::context ctx = cuarrow::context::get(0);
    cuarrow::buffer body = cuarrow::allocate_host(static_cast<std::int64_t>(c.body.size()));
    if (!c.body.empty()) std::memcpy(body.mutable_host_data(), c.body.data(), c.body.size());
    ipc::dictionary_memo memo(sm);
    if (memo.knows(0)) {
      const array_data d = dictionary_values();
      memo.set(0, c.device ? to_device(d, ctx) : d);
    }
    if (c.device) body = cuarrow::copy_to_device(ctx, body);
    ipc::read_options o;
    o.validation = c.full ? validation_level::full : validation_level::cheap;
    o.version = c.v4 ? ipc::metadata_version::v4 : ipc::metadata_version::v5;
    if (c.compression == 2) {
      // ZSTD stands for a hook that takes only "stored uncompressed" buffers
      // (length -1): the prefix is read from wherever the body is.
      o.decompress = [](ipc::compression_codec, const cuarrow::buffer& b) {
        if (b.size() < 8) throw ipc::invalid_message("buffer", "shorter than its length prefix");
        std::int64_t n = 0;
        cuarrow::copy_to_host(&n, b, 0, 8);
        if (n != -1) throw ipc::invalid_message("buffer", "compressed");
        return b.slice(8);
      };
    }
    const record_batch batch = ipc::read_record_batch(h, sm, body, memo, o);
    if (c.compression != 2) {
      for (const auto& col : batch.columns) {
        if (!within(col, body)) cuarrow_fuzz::property_failed("a buffer read lies outside the body");
      }
    }
    if (c.full) {
      // Written again and read back: the same values.
      record_batch host = to_host(batch);
      ipc::body_layout l;
      try {
        l = ipc::layout_body(host);
      } catch (const cuarrow::invalid_argument& e) {
        if (std::strstr(e.what(), "not supported") != nullptr) return 0;  // said, not wrong
        std::fprintf(stderr, "%s\n", e.what());
        cuarrow_fuzz::property_failed("a valid batch could not be laid out");
      }
      try {
        cuarrow::buffer again = cuarrow::copy_to_new_host(ipc::write_body(l, ctx));
        cuarrow::buffer plain = cuarrow::allocate_host(again.size());
        if (again.size() > 0) std::memcpy(plain.mutable_host_data(), again.host_data(), again.size());
        ipc::dictionary_memo host_memo(sm);
        if (host_memo.knows(0)) host_memo.set(0, dictionary_values());
        ipc::read_options full;
        full.validation = validation_level::full;  // written as V5
        const record_batch back = ipc::read_record_batch(l.header, sm, plain, host_memo, full);
        std::string diff;
        if (!equals(host, back, &diff)) {
          std::fprintf(stderr, "%s\n", diff.c_str());
          cuarrow_fuzz::property_failed("a batch written and read again differs");
        }
      } catch (const cuarrow::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        cuarrow_fuzz::property_failed("a batch written could not be read again");
      }
    }
  } catch (const cuarrow::error& e) {
    if (std::getenv("CUARROW_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
