// libFuzzer target: ArrowSchema import (format strings, names, flags, the
// metadata blob, children and dictionaries) from bytes.
//
// Input: u8 node count N (1..32), then per node: format (u8 length, bytes),
// name (u8 length, bytes), u8 flags, u8 metadata mode (0: none, 1: a blob
// of u16 length and bytes, 2: the same node released), u8 child count then
// one u8 per child (0xff: NULL, otherwise a node index mod N, so children
// may be shared or cyclic), u8 dictionary (0xff: none, otherwise an index).
// Node 0 is the root.
//
// A metadata blob is decoded first with its length known
// (detail::decode_metadata never reads past it); only a blob that decodes
// is attached to the node, since the C interface gives import no length
// and a shorter blob than claimed is outside what any importer can check.
// Properties: import never crashes, hangs or reads outside the nodes;
// what it accepts exports and reads back equal.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "arrow/c_internal.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/error.hpp"
#include "fuzz_input.hpp"

using namespace cuarrow::arrow;  // NOLINT

namespace {

struct node_storage {
  std::string format, name, metadata;
  bool has_metadata = false;
  std::vector<ArrowSchema*> children;
};

void no_release(ArrowSchema*) {}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuarrow_fuzz::input in(data, size);
  const std::size_t n = 1 + in.u8() % 32;
  std::vector<ArrowSchema> nodes(n);
  std::vector<node_storage> store(n);
  for (std::size_t i = 0; i < n; ++i) {
    node_storage& s = store[i];
    s.format = in.bytes(in.u8());
    s.name = in.bytes(in.u8());
    const std::uint8_t flags = in.u8();
    const std::uint8_t md_mode = in.u8() % 3;
    bool released = false;
    if (md_mode == 1) {
      s.metadata = in.bytes(in.u16());
      try {
        detail::decode_metadata(s.metadata.data(), s.metadata.size(), "fuzz");
        s.has_metadata = true;
      } catch (const cuarrow::error&) {
      }
    } else if (md_mode == 2) {
      released = true;
    }
    const std::size_t nc = in.u8() % 8;
    for (std::size_t c = 0; c < nc; ++c) {
      const std::uint8_t k = in.u8();
      s.children.push_back(k == 0xff ? nullptr : &nodes[k % n]);
    }
    const std::uint8_t d = in.u8();
    ArrowSchema& a = nodes[i];
    a.format = s.format.c_str();
    a.name = s.name.c_str();
    a.metadata = s.has_metadata ? s.metadata.data() : nullptr;
    // Flags: nullable, dictionary ordered, map keys sorted, and sometimes a stray bit.
    a.flags = static_cast<std::int64_t>(flags & 7) | (flags & 0x80 ? std::int64_t{1} << 40 : 0);
    a.n_children = static_cast<std::int64_t>(s.children.size());
    a.children = s.children.empty() ? nullptr : s.children.data();
    a.dictionary = d == 0xff ? nullptr : &nodes[d % n];
    a.release = released ? nullptr : no_release;
    a.private_data = nullptr;
  }

  try {
    const field f = read_field(nodes[0]);
    owned_schema back;
    export_field(f, back.get());
    if (!(read_field(*back.get()) == f)) cuarrow_fuzz::property_failed("a field read back differs");
  } catch (const cuarrow::error& e) {
    if (std::getenv("CUARROW_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  try {
    const schema s = read_schema(nodes[0]);
    owned_schema back;
    export_schema(s, back.get());
    if (!(read_schema(*back.get()) == s)) cuarrow_fuzz::property_failed("a schema read back differs");
  } catch (const cuarrow::error& e) {
    if (std::getenv("CUARROW_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
