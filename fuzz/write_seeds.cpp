// Writes seed inputs for the fuzz targets into <dir>/<target>/, from
// cuarrow's own exporters (schemas, metadata blobs, IPC handles, IPC
// message metadata) and from
// arrays laid out as the C Data Interface wants them for every type of the
// array_import grammar.  (fuzz/seeds.py adds seeds from pyarrow.)
//   fuzz_write_seeds build/fuzz-corpus
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "array_types.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/ipc.hpp"
#include "cuarrow/ipc/codec.hpp"
#include "cuarrow/ipc/metadata.hpp"
#include "cuarrow/ipc/record_batch.hpp"
#include "cuarrow/tensor.hpp"
#include "ipc_body_cases.hpp"
#include "ipc_handle_factory.hpp"

using namespace cuarrow::arrow;  // NOLINT
namespace fs = std::filesystem;

namespace {

struct out {
  std::string b;
  out& u8(unsigned v) {
    b.push_back(static_cast<char>(v & 0xff));
    return *this;
  }
  out& u16(unsigned v) { return u8(v).u8(v >> 8); }
  out& u32(std::uint32_t v) { return u16(v & 0xffff).u16(v >> 16); }
  out& u64(std::uint64_t v) { return u32(static_cast<std::uint32_t>(v)).u32(static_cast<std::uint32_t>(v >> 32)); }
  out& str8(const std::string& s) {
    u8(static_cast<unsigned>(s.size()));
    b += s;
    return *this;
  }
  out& raw(const std::string& s) {
    b += s;
    return *this;
  }
};

void write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::size_t blob_size(const char* md) {
  if (md == nullptr) return 0;
  std::int32_t n;
  std::memcpy(&n, md, 4);
  std::size_t pos = 4;
  for (std::int32_t i = 0; i < n; ++i) {
    for (int kv = 0; kv < 2; ++kv) {
      std::int32_t l;
      std::memcpy(&l, md + pos, 4);
      pos += 4 + static_cast<std::size_t>(l);
    }
  }
  return pos;
}

// An exported ArrowSchema tree in schema_import's encoding.
std::string encode_schema(const ArrowSchema& root) {
  std::vector<const ArrowSchema*> nodes{&root};
  std::map<const ArrowSchema*, std::size_t> index{{&root, 0}};
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const ArrowSchema* s = nodes[i];
    for (std::int64_t c = 0; c < s->n_children; ++c) {
      index.emplace(s->children[c], nodes.size());
      nodes.push_back(s->children[c]);
    }
    if (s->dictionary != nullptr) {
      index.emplace(s->dictionary, nodes.size());
      nodes.push_back(s->dictionary);
    }
  }
  if (nodes.size() > 32) return {};
  out o;
  o.u8(static_cast<unsigned>(nodes.size() - 1));
  for (const ArrowSchema* s : nodes) {
    o.str8(s->format).str8(s->name ? s->name : "").u8(static_cast<unsigned>(s->flags & 7));
    if (s->metadata != nullptr) {
      const std::size_t n = blob_size(s->metadata);
      o.u8(1).u16(static_cast<unsigned>(n)).raw(std::string(s->metadata, n));
    } else {
      o.u8(0);
    }
    o.u8(static_cast<unsigned>(s->n_children));
    for (std::int64_t c = 0; c < s->n_children; ++c) o.u8(static_cast<unsigned>(index[s->children[c]]));
    o.u8(s->dictionary ? static_cast<unsigned>(index[s->dictionary]) : 0xff);
  }
  return o.b;
}

std::vector<field> sample_fields() {
  const key_value_metadata ext = {{"ARROW:extension:name", "arrow.uuid"}, {"ARROW:extension:metadata", ""}};
  return {
      field("i", int32()),
      field("s", utf8(), false),
      field("ts", timestamp(time_unit::micro, "Europe/Paris")),
      field("d", decimal(38, 10, 128)),
      field("fsb", fixed_size_binary(16), true, ext),
      field("l", list(field("item", int64()))),
      field("ll", large_list(field("item", utf8()))),
      field("lv", list_view(field("item", float32()))),
      field("fsl", fixed_size_list(field("item", int16()), 3)),
      field("st", struct_({field("a", boolean()), field("b", binary_view())}), true, {{"k", "v"}, {"", ""}}),
      field("m", map(utf8(), int32(), true)),
      field("su", sparse_union({field("x", int8()), field("y", utf8())}, {3, 7})),
      field("du", dense_union({field("x", float64()), field("y", large_binary())})),
      field("ree", run_end_encoded(int32(), utf8_view())),
      field("dict", dictionary(int16(), utf8(), true)),
      field("nested", list(field("item", struct_({field("k", dictionary(int8(), large_utf8())),
                                                  field("v", map(int64(), list(field("item", null()))))})))),
      field("times", struct_({field("t32", time32(time_unit::milli)), field("t64", time64(time_unit::nano)),
                              field("dur", duration(time_unit::second)), field("mdn", interval_month_day_nano()),
                              field("dt", interval_day_time()), field("ym", interval_months()), field("d64", date64()),
                              field("h", float16()), field("d256", decimal(70, 5, 256))})),
  };
}

// ---- arrays in array_import's encoding --------------------------------------------------

void le(std::string& s, std::uint64_t v, int width) {
  for (int i = 0; i < width; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void buf(out& o, const std::string& bytes) { o.u8(1).u16(static_cast<unsigned>(bytes.size())).raw(bytes); }

// Bytes per value of a fixed-width type (0 for the others, boolean included).
int width_of(const data_type& t) { return bit_width(t) / 8; }

// A valid array of `t` with `n` elements (no nulls), buffer count and child
// count as the type needs (0xff).
void gen(out& o, const data_type& t, unsigned n) {
  o.u8(n).u8(0).u8(0).u8(0xff);
  auto seq = [&](int w, unsigned count, unsigned step) {
    std::string s;
    for (unsigned i = 0; i < count; ++i) le(s, static_cast<std::uint64_t>(i) * step, w);
    return s;
  };
  const std::string nothing;
  switch (t.id) {
    case type_id::null: break;
    case type_id::boolean:
      o.u8(0);
      buf(o, std::string((n + 7) / 8, '\x55'));
      break;
    case type_id::binary:
    case type_id::utf8:
      o.u8(0);
      buf(o, seq(4, n + 1, 1));
      buf(o, std::string(n, 'a'));
      break;
    case type_id::large_binary:
    case type_id::large_utf8:
      o.u8(0);
      buf(o, seq(8, n + 1, 1));
      buf(o, std::string(n, 'b'));
      break;
    case type_id::binary_view:
    case type_id::utf8_view: {
      std::string views;
      for (unsigned i = 0; i < n; ++i) {
        le(views, 1, 4);
        views += "c";
        views += std::string(11, '\0');
      }
      o.u8(0);
      buf(o, views);
      buf(o, nothing);
      buf(o, nothing);
      buf(o, std::string(16, '\0'));
      break;
    }
    case type_id::list:
    case type_id::map:
      o.u8(0);
      buf(o, seq(4, n + 1, 1));
      break;
    case type_id::large_list:
      o.u8(0);
      buf(o, seq(8, n + 1, 1));
      break;
    case type_id::list_view:
      o.u8(0);
      buf(o, seq(4, n, 1));
      {
        std::string s;
        for (unsigned i = 0; i < n; ++i) le(s, 1, 4);
        buf(o, s);
      }
      break;
    case type_id::large_list_view:
      o.u8(0);
      buf(o, seq(8, n, 1));
      {
        std::string s;
        for (unsigned i = 0; i < n; ++i) le(s, 1, 8);
        buf(o, s);
      }
      break;
    case type_id::struct_:
    case type_id::fixed_size_list: o.u8(0); break;
    case type_id::sparse_union:
      buf(o, std::string(n, static_cast<char>(t.type_codes.empty() ? 0 : t.type_codes[0])));
      break;
    case type_id::dense_union:
      buf(o, std::string(n, static_cast<char>(t.type_codes.empty() ? 0 : t.type_codes[0])));
      buf(o, seq(4, n, 1));
      break;
    case type_id::run_end_encoded: break;
    case type_id::dictionary:
      o.u8(0);
      buf(o,
          std::string(static_cast<std::size_t>(n) * static_cast<std::size_t>(width_of(data_type(t.index_type))), '\0'));
      break;
    default:
      o.u8(0);
      buf(o, std::string(static_cast<std::size_t>(n) * static_cast<std::size_t>(width_of(t)), '\x01'));
      break;
  }
  o.u8(0xff);
  for (std::size_t i = 0; i < t.children.size(); ++i) {
    const data_type& c = t.children[i].type;
    unsigned cn = n;
    if (t.id == type_id::fixed_size_list) cn = n * static_cast<unsigned>(t.fixed_size);
    if (t.id == type_id::dense_union && i > 0) cn = 0;
    if (t.id == type_id::run_end_encoded && i == 0) {
      // run ends 1..n
      o.u8(n).u8(0).u8(0).u8(0xff).u8(0);
      buf(o, [&] {
        std::string s;
        for (unsigned k = 1; k <= n; ++k) le(s, k, width_of(c));
        return s;
      }());
      o.u8(0xff).u8(0);
      continue;
    }
    gen(o, c, cn);
  }
  if (t.id == type_id::dictionary) {
    o.u8(1);
    gen(o, *t.value_type, 1);
  } else {
    o.u8(0);
  }
}

// The dictionary fields of `fields` under `path`, numbered in Arrow's order
// (depth first, a dictionary before the dictionaries in its values).
void number_dictionaries(const std::vector<field>& fields, std::vector<int>& path,
                         std::vector<cuarrow::ipc::dictionary_field>& out) {
  for (std::size_t i = 0; i < fields.size(); ++i) {
    path.push_back(static_cast<int>(i));
    const data_type& t = fields[i].type;
    if (t.id == type_id::dictionary) {
      out.push_back({static_cast<std::int64_t>(out.size()), path});
      number_dictionaries(t.values().children, path, out);
    } else {
      number_dictionaries(t.children, path, out);
    }
    path.pop_back();
  }
}

}  // namespace

// The header of an empty batch of `t`'s tree: one node per array, each
// buffer an empty range, no data buffers for views (V5 layout).
void empty_header(const data_type& t, cuarrow::ipc::record_batch_header& h) {
  h.nodes.push_back({0, 0});
  const type_layout l = layout_of(t);
  for (std::size_t i = 0; i < l.buffers.size(); ++i) h.buffers.push_back({0, 0});
  if (l.variadic) h.variadic_buffer_counts.push_back(0);
  for (const field& c : t.children) empty_header(c.type, h);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  int count = 0;

  // Schemas and metadata blobs, from the exporter.
  int i = 0;
  for (const field& f : sample_fields()) {
    owned_schema c;
    export_field(f, c.get());
    const std::string enc = encode_schema(*c.get());
    if (!enc.empty()) write(root / "schema_import", "export_" + std::to_string(i), enc), ++count;
    if (c->metadata != nullptr) {
      write(root / "metadata_blob", "export_" + std::to_string(i), std::string(c->metadata, blob_size(c->metadata)));
      ++count;
    }
    ++i;
  }
  {
    schema s;
    s.fields = sample_fields();
    s.fields.resize(6);
    s.metadata = {{"pandas", "{\"columns\": []}"}, {"origin", "cuarrow"}};
    owned_schema c;
    export_schema(s, c.get());
    write(root / "schema_import", "export_schema", encode_schema(*c.get()));
    write(root / "metadata_blob", "export_schema", std::string(c->metadata, blob_size(c->metadata)));
    count += 2;
  }

  // IPC handles: serialize() of handles of several shapes, and pyarrow's format.
  {
    int k = 0;
    for (auto [off, size, dev] : {std::tuple{0, 0, -1}, {256, 16, 0}, {0, 1 << 20, 1}, {4096, 7, 3}}) {
      cuarrow::ipc_memory_handle::fields f;
      f.offset = off;
      f.size = size;
      f.device_id = dev;
      f.exporter = 0x1234567890abcdefull;
      for (std::size_t b = 0; b < f.driver_handle.size(); ++b) f.driver_handle[b] = static_cast<std::byte>(b * 7);
      const auto bytes = cuarrow::detail::ipc_handle_factory::make(f).serialize();
      write(root / "ipc_handle", "cuarrow_" + std::to_string(k++),
            std::string(1, '\0') + std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      ++count;
      // The same range as a pool handle (wire format version 2).
      if (size > 0) {
        f.kind = cuarrow::ipc_handle_kind::pool;
        f.pool_id = 0xfeedfacecafebeefull;
        const auto pooled = cuarrow::detail::ipc_handle_factory::make(f).serialize();
        write(root / "ipc_handle", "cuarrow_pool_" + std::to_string(k),
              std::string(1, '\0') + std::string(reinterpret_cast<const char*>(pooled.data()), pooled.size()));
        ++count;
      }
    }
    std::string py(1, '\0');
    le(py, 4096, 8);
    py += std::string(64, '\x11');
    write(root / "ipc_handle", "pyarrow_72", py);
    write(root / "ipc_handle", "pyarrow_empty", std::string(9, '\0'));
    count += 2;
  }

  // Shared object descriptors (ipc/share.hpp): each kind around a handle,
  // the checksum left for the target to fill in (first byte 2).
  {
    cuarrow::ipc_memory_handle::fields f;
    f.offset = 0;
    f.size = 1 << 20;
    f.device_id = 0;
    f.exporter = 0x1234567890abcdefull;
    for (std::size_t b = 0; b < f.driver_handle.size(); ++b) f.driver_handle[b] = static_cast<std::byte>(b * 5);
    const auto handle = cuarrow::detail::ipc_handle_factory::make(f).serialize();
    for (int kind = 1; kind <= 5; ++kind) {
      std::string d(1, '\2');
      d += std::string("CUARSHR\0", 8);
      le(d, 1, 2);     // version
      le(d, kind, 1);  // kind
      le(d, 0, 1);     // reserved
      le(d, handle.size(), 4);
      d += std::string(reinterpret_cast<const char*>(handle.data()), handle.size());
      d += std::string(8, '\0');  // checksum: the target computes it
      write(root / "share_descriptor", "kind_" + std::to_string(kind), d);
      ++count;
    }
    // Version 2: pool memory, a pool handle.
    f.kind = cuarrow::ipc_handle_kind::pool;
    f.pool_id = 0xfeedfacecafebeefull;
    const auto pooled = cuarrow::detail::ipc_handle_factory::make(f).serialize();
    for (int kind = 1; kind <= 5; ++kind) {
      std::string d(1, '\2');
      d += std::string("CUARSHR\0", 8);
      le(d, 2, 2);     // version
      le(d, kind, 1);  // kind
      le(d, 0, 1);     // reserved
      le(d, pooled.size(), 4);
      d += std::string(reinterpret_cast<const char*>(pooled.data()), pooled.size());
      d += std::string(8, '\0');  // checksum: the target computes it
      write(root / "share_descriptor", "pool_kind_" + std::to_string(kind), d);
      ++count;
    }
  }

  // IPC record batch bodies: an empty batch of every schema (host and
  // device body, cheap and full validation), and a batch of int32 and utf8
  // laid out by layout_body.
  {
    const auto schemas = cuarrow_fuzz::ipc_body::schemas();
    for (std::size_t k = 0; k < schemas.size(); ++k) {
      for (int flags = 0; flags < 4; ++flags) {
        cuarrow_fuzz::ipc_body::encoded_case c;
        c.schema = static_cast<std::uint8_t>(k);
        c.device = (flags & 1) != 0;
        c.full = (flags & 2) != 0;
        for (const field& f : schemas[k].schema.fields) empty_header(f.type, c.header);
        write(root / "ipc_body", "empty_" + std::to_string(k) + "_" + std::to_string(flags),
              cuarrow_fuzz::ipc_body::encode(c));
        ++count;
      }
    }
    static const std::int32_t ints[] = {7, -1, 3, 42};
    static const std::uint8_t valid[] = {0x0d};
    static const std::int32_t offsets[] = {0, 2, 2, 5, 9};
    static const char text[] = "hiabcdefg";
    array_data ic;
    ic.type = int32();
    ic.length = 4;
    ic.null_count = 1;
    ic.buffers = {cuarrow::wrap_host(valid, 1, nullptr, false), cuarrow::wrap_host(ints, 16, nullptr, false)};
    array_data tc;
    tc.type = utf8();
    tc.length = 4;
    tc.null_count = 0;
    tc.buffers = {cuarrow::buffer(), cuarrow::wrap_host(offsets, 20, nullptr, false),
                  cuarrow::wrap_host(text, 9, nullptr, false)};
    record_batch b;
    b.schema = schemas[0].schema;
    b.num_rows = 4;
    b.columns = {ic, tc};
    const cuarrow::ipc::body_layout l = cuarrow::ipc::layout_body(b);
    std::string body(static_cast<std::size_t>(l.body_length), '\0');
    for (const auto& p : l.pieces) {
      std::memcpy(body.data() + p.body_offset, p.source.host_data() + p.source_offset,
                  static_cast<std::size_t>(p.size));
    }
    for (int flags = 0; flags < 4; ++flags) {
      cuarrow_fuzz::ipc_body::encoded_case c;
      c.device = (flags & 1) != 0;
      c.full = (flags & 2) != 0;
      c.header = l.header;
      c.body = body;
      write(root / "ipc_body", "int32_utf8_" + std::to_string(flags), cuarrow_fuzz::ipc_body::encode(c));
      ++count;
    }
  }

  // Tensors: DLPack (mode 0) and CAI (mode 1) of a few shapes.
  {
    out a;  // DLPack float32 3x4 compact
    a.u8(0).u32(2).u8(2).u8(32).u16(1).u64(0x10000).u8(0).u8(0).u8(3 * 8).u8(4 * 8);
    write(root / "tensor_reader", "dlpack_f32_3x4", a.b);
    out b;  // DLPack int64 4x5 strided (Fortran)
    b.u8(8).u32(2).u8(0).u8(64).u16(1).u64(0x20000).u8(16).u8(1).u8(4 * 8).u8(5 * 8).u8(1 * 8).u8(4 * 8);
    write(root / "tensor_reader", "dlpack_i64_fortran", b.b);
    out c;  // CAI <f8 (2, 3) with strides
    c.u8(1).u8(3).u8(0).u8(0).str8("<f8").u64(0x30000).u8(2).u8(2 * 8).u8(3 * 8).u8(1).u8(3 * 8).u8(1 * 8);
    write(root / "tensor_reader", "cai_f8_2x3", c.b);
    out d;  // CAI <M8[ns] (5,) no strides
    d.u8(1).u8(2).u8(0).u8(0).str8("<M8[ns]").u64(0x40000).u8(1).u8(5 * 8).u8(0);
    write(root / "tensor_reader", "cai_datetime", d.b);
    count += 4;
  }

  // Arrays: every type of the grammar, valid, 3 elements.
  for (unsigned tag = 0; tag < 40; ++tag) {
    out o;
    o.u8(tag);
    for (int k = 0; k < 16; ++k) o.u8(k == 0 ? 1 : 0);  // nested types: small parameters, int32 leaves
    std::string bytes = o.b;
    cuarrow_fuzz::input in(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const data_type t = cuarrow_fuzz::read_type(in, 0);
    const std::size_t used = in.position();
    out arr;
    arr.raw(bytes.substr(0, used));
    gen(arr, t, 3);
    write(root / "array_import", "type_" + std::to_string(tag), arr.b);
    ++count;
  }
  // Framed IPC body buffers: each codec's frames of a few contents (from
  // cuarrow's compressor), stored uncompressed (-1), through the batch path.
  for (auto codec : cuarrow::ipc::available_codecs()) {
    const char tag = codec == cuarrow::ipc::compression_codec::zstd ? 1 : 0;
    const std::string name = cuarrow::ipc::to_string(codec);
    std::string text;
    for (int k = 0; k < 300; ++k) text += "value " + std::to_string(k % 17) + ", ";
    std::string ints;
    for (std::uint32_t k = 0; k < 512; ++k) le(ints, k * 3, 4);
    int k = 0;
    for (const std::string& content : {std::string("x"), text, ints}) {
      const auto* p = reinterpret_cast<const std::byte*>(content.data());
      for (const bool raw : {false, true}) {
        cuarrow::ipc::compress_options o;
        if (raw) o.min_space_savings = 1.0;
        const auto framed = cuarrow::ipc::compress(codec, {p, content.size()}, o);
        const std::string bytes(reinterpret_cast<const char*>(framed.data()), framed.size());
        write(root / "ipc_codec", name + "_" + std::to_string(k++), std::string(1, tag) + bytes);
        write(root / "ipc_codec", name + "_batch_" + std::to_string(k++), std::string(1, tag | 2) + bytes);
        count += 2;
      }
    }
    {
      // Above 4 MiB: one ZSTD frame or one independent LZ4 block per 4 MiB
      // chunk, which decompress_all decodes as parts (here 4 MiB and 300 KiB).
      std::string big;
      for (std::uint32_t i = 0; big.size() < (std::size_t{4} << 20) + (300 << 10); ++i) le(big, (i / 7) % 5000, 4);
      const auto* p = reinterpret_cast<const std::byte*>(big.data());
      const auto framed = cuarrow::ipc::compress(codec, {p, big.size()});
      const std::string bytes(reinterpret_cast<const char*>(framed.data()), framed.size());
      write(root / "ipc_codec", name + "_chunked", std::string(1, tag) + bytes);
      write(root / "ipc_codec", name + "_batch_chunked", std::string(1, tag | 2) + bytes);
      count += 2;
      if (codec == cuarrow::ipc::compression_codec::lz4_frame) {
        // Its two blocks swapped (300 KiB, then 4 MiB): a valid frame whose
        // blocks are not all full but the last, so decompress_all's sizes
        // taken on trust fail and the job is decoded again.
        const std::size_t first = 8 + 7;  // prefix, frame descriptor (no content size)
        std::uint32_t h = 0;
        std::memcpy(&h, bytes.data() + first, 4);
        const std::size_t second = first + 4 + (h & 0x7FFFFFFFU);
        std::memcpy(&h, bytes.data() + second, 4);
        const std::size_t end = second + 4 + (h & 0x7FFFFFFFU);
        const std::string swapped = bytes.substr(0, first) + bytes.substr(second, end - second) +
                                    bytes.substr(first, second - first) + bytes.substr(end);
        write(root / "ipc_codec", name + "_batch_short_first_block", std::string(1, tag | 2) + swapped);
        ++count;
      }
    }
    if (codec == cuarrow::ipc::compression_codec::zstd) {
      // Two ZSTD frames of 300 KiB one after the other, each stating its
      // size: decompress_all decodes them as two parts.
      std::string part;
      for (std::uint32_t i = 0; part.size() < (300 << 10); ++i) le(part, i % 1000, 4);
      const auto* p = reinterpret_cast<const std::byte*>(part.data());
      const auto one = cuarrow::ipc::compress(codec, {p, part.size()});
      std::string framed;
      le(framed, 2 * part.size(), 8);
      for (int i = 0; i < 2; ++i) framed.append(reinterpret_cast<const char*>(one.data()) + 8, one.size() - 8);
      write(root / "ipc_codec", name + "_two_frames", std::string(1, tag) + framed);
      write(root / "ipc_codec", name + "_batch_two_frames", std::string(1, tag | 2) + framed);
      count += 2;
    }
  }

  // IPC message metadata (ipc_message): a schema message of every sample
  // field, a record batch and a dictionary batch header, bare and
  // encapsulated (tests/ipc/data/ adds pyarrow's streams and files).
  {
    namespace ipc = cuarrow::ipc;
    ipc::schema_message sm;
    sm.schema.fields = sample_fields();
    sm.schema.metadata = {{"origin", "cuarrow"}};
    std::vector<int> path;
    number_dictionaries(sm.schema.fields, path, sm.dictionaries);
    ipc::message_metadata schema_msg;
    schema_msg.header = sm;
    ipc::record_batch_header rb;
    rb.length = 3;
    rb.nodes = {{3, 1}, {3, 0}};
    rb.buffers = {{0, 8}, {8, 24}, {32, 0}};
    rb.variadic_buffer_counts = {1};
    rb.compression = ipc::compression_codec::zstd;
    ipc::message_metadata batch_msg;
    batch_msg.header = rb;
    batch_msg.body_length = 32;
    batch_msg.custom_metadata = {{"k", "v"}};
    ipc::message_metadata dict_msg;
    dict_msg.header = ipc::dictionary_batch_header{0, rb, true};
    dict_msg.body_length = 32;
    int k = 0;
    for (const auto* m : {&schema_msg, &batch_msg, &dict_msg}) {
      const auto bare = ipc::write_message_metadata(*m);
      const auto enc = ipc::write_encapsulated_metadata(*m);
      write(root / "ipc_message", "cuarrow_" + std::to_string(k),
            std::string(reinterpret_cast<const char*>(bare.data()), bare.size()));
      write(root / "ipc_message", "cuarrow_encapsulated_" + std::to_string(k),
            std::string(reinterpret_cast<const char*>(enc.data()), enc.size()));
      count += 2;
      ++k;
    }
  }
  std::printf("wrote %d seeds under %s\n", count, root.c_str());
  return 0;
}
