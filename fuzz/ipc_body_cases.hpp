// The ipc_body target's input (shared with the seed writer): a schema from
// a small fixed set, a record batch header, body bytes.
//
//   u8   schema index (bits 0-4, mod the set's size); bit 7: the body in
//        device memory, bit 6: full validation (and, when accepted, the
//        write-then-read property); bit 5: instead of the set, one column
//        of a type read next with array_import's grammar (array_types.hpp)
//   u8   metadata version: odd = V4 (unions carry a validity buffer), even = V5
//   u8   compression: 0 none, 1 LZ4_FRAME, 2 ZSTD (with a hook that takes
//        "stored uncompressed" buffers), else none
//   num  length
//   u8   node count, then per node: num length, num null count
//   u8   buffer count, then per buffer: num offset, num length
//   u8   variadic count count, then each: num
//   the rest: the body (at most 1 MiB)
//
// num: one byte b < 0xF0 is b; 0xF0 then an int16, 0xF1 then an int32,
// otherwise an int64 (so small values cost one byte, and huge or negative
// ones are reachable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "array_types.hpp"
#include "cuarrow/arrow/type.hpp"
#include "cuarrow/ipc/format.hpp"
#include "fuzz_input.hpp"

namespace cuarrow_fuzz::ipc_body {

using namespace cuarrow::arrow;  // NOLINT

// Every schema's dictionary fields take dictionary id 0 (utf8 values).
inline std::vector<cuarrow::ipc::schema_message> schemas() {
  auto s = [](std::vector<field> fields, std::vector<cuarrow::ipc::dictionary_field> dicts = {}) {
    cuarrow::ipc::schema_message m;
    m.schema.fields = std::move(fields);
    m.dictionaries = std::move(dicts);
    return m;
  };
  const data_type dict = dictionary(int16(), utf8());
  return {
      s({field("i", int32()), field("s", utf8())}),
      s({field("st", struct_({field("a", int32()), field("b", list(field("item", utf8())))}))}),
      s({field("v", utf8_view()), field("w", binary_view())}),
      s({field("su", sparse_union({field("a", int8()), field("b", utf8())})),
         field("du", dense_union({field("c", int32()), field("d", struct_({field("x", float64())}))}))}),
      s({field("r", run_end_encoded(int32(), utf8())), field("n", null()), field("b", boolean())}),
      s({field("d", dict), field("f", fixed_size_list(field("item", int16()), 3)),
         field("l", large_list(field("item", large_utf8())))},
        {{0, {0}}}),
      s({field("m", map(utf8(), int64())), field("lv", list_view(field("item", int32()))), field("dec", decimal(30, 2)),
         field("fb", fixed_size_binary(5))}),
      s({field("deep", list(field("item", struct_({field("l", list(field("item", int8()))), field("d", dict)}))))},
        {{0, {0, 0, 1}}}),
  };
}

struct encoded_case {
  std::uint8_t schema = 0;
  std::optional<data_type> type;  // bit 5: a type from the grammar
  bool device = false;
  bool full = false;
  bool v4 = false;
  std::uint8_t compression = 0;
  cuarrow::ipc::record_batch_header header;
  std::string body;
};

inline std::int64_t read_num(input& in) {
  const std::uint8_t b = in.u8();
  if (b < 0xF0) return b;
  if (b == 0xF0) return static_cast<std::int16_t>(in.u16());
  if (b == 0xF1) return static_cast<std::int32_t>(in.u32());
  return static_cast<std::int64_t>(in.u64());
}

inline void write_num(std::string& out, std::int64_t v) {
  auto le = [&](std::uint64_t x, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  };
  if (v >= 0 && v < 0xF0) {
    out.push_back(static_cast<char>(v));
  } else if (v >= INT16_MIN && v <= INT16_MAX) {
    out.push_back(static_cast<char>(0xF0));
    le(static_cast<std::uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out.push_back(static_cast<char>(0xF1));
    le(static_cast<std::uint64_t>(v), 4);
  } else {
    out.push_back(static_cast<char>(0xF2));
    le(static_cast<std::uint64_t>(v), 8);
  }
}

inline encoded_case decode(input& in) {
  encoded_case c;
  const std::uint8_t first = in.u8();
  c.schema = first & 0x1f;
  if ((first & 0x20) != 0) c.type = read_type(in, 0);
  c.device = (first & 0x80) != 0;
  c.full = (first & 0x40) != 0;
  c.v4 = (in.u8() & 1) != 0;
  c.compression = in.u8();
  c.header.length = read_num(in);
  for (unsigned n = in.u8(), i = 0; i < n; ++i) {
    const std::int64_t length = read_num(in);
    c.header.nodes.push_back({length, read_num(in)});
  }
  for (unsigned n = in.u8(), i = 0; i < n; ++i) {
    const std::int64_t offset = read_num(in);
    c.header.buffers.push_back({offset, read_num(in)});
  }
  for (unsigned n = in.u8(), i = 0; i < n; ++i) c.header.variadic_buffer_counts.push_back(read_num(in));
  c.body = in.bytes(1 << 20);
  return c;
}

// (Seeds use the fixed set: `type` is not written.)
inline std::string encode(const encoded_case& c) {
  std::string out;
  out.push_back(static_cast<char>(c.schema | (c.device ? 0x80 : 0) | (c.full ? 0x40 : 0)));
  out.push_back(static_cast<char>(c.v4 ? 1 : 0));
  out.push_back(static_cast<char>(c.compression));
  write_num(out, c.header.length);
  out.push_back(static_cast<char>(c.header.nodes.size()));
  for (const auto& n : c.header.nodes) {
    write_num(out, n.length);
    write_num(out, n.null_count);
  }
  out.push_back(static_cast<char>(c.header.buffers.size()));
  for (const auto& b : c.header.buffers) {
    write_num(out, b.offset);
    write_num(out, b.length);
  }
  out.push_back(static_cast<char>(c.header.variadic_buffer_counts.size()));
  for (std::int64_t v : c.header.variadic_buffer_counts) write_num(out, v);
  return out + c.body;
}

}  // namespace cuarrow_fuzz::ipc_body
