// libFuzzer target: ArrowArray import with full validation, host buffers.
//
// Input: a type (see read_type: a tag byte, nested types take more), then
// the array tree: per node u8 length, u8 offset, u8 null count (0xff: -1),
// u8 buffer count (0xff: what the type needs), then per buffer u8 mode (0:
// NULL, otherwise u16 length and bytes, zero-padded), u8 child count (0xff:
// what the type has), the children, u8 dictionary present and the
// dictionary.  The input ends in zeros.
//
// The C Data Interface carries no buffer sizes: an importer must trust
// that each buffer holds what length, offset and the last offset imply
// (docs/reliability.md).  So that the fuzzer only exercises what import can
// check, every buffer is a heap allocation of kBuffer bytes, lengths and
// offsets stay below 256 (fixed-width buffers of up to 32-byte values fit),
// and the offsets of binary and string arrays and the sizes of view data
// buffers are brought into 0..kBuffer (negative ones stay negative).
// Everything else (counts, null counts, offsets in lists, union codes and
// offsets, views, dictionary indices, run ends) is as the input says.
//
// Properties: import + full validation never crash or read outside the
// buffers; an accepted array copies to host (to_host's checks) and exports
// and imports again.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "array_types.hpp"
#include "cuarrow/arrow/c_data.hpp"
#include "cuarrow/arrow/transfer.hpp"
#include "cuarrow/arrow/validate.hpp"
#include "cuarrow/error.hpp"
#include "emulated_driver.hpp"
#include "fuzz_input.hpp"

using namespace cuarrow::arrow;  // NOLINT

namespace {

constexpr std::size_t kBuffer = 16384;
using cuarrow_fuzz::read_type;

void no_release(ArrowArray*) {}

// The buffers an array of `t` has in the C Data Interface (views: two data buffers).
std::int64_t buffers_for(const data_type& t) {
  switch (t.id) {
    case type_id::null:
    case type_id::run_end_encoded: return 0;
    case type_id::struct_:
    case type_id::fixed_size_list:
    case type_id::sparse_union: return 1;
    case type_id::binary:
    case type_id::utf8:
    case type_id::large_binary:
    case type_id::large_utf8:
    case type_id::list_view:
    case type_id::large_list_view: return 3;
    case type_id::binary_view:
    case type_id::utf8_view: return 5;
    default: return 2;
  }
}

// Owns the structs and buffers of one input's array tree.
struct arena {
  std::vector<std::unique_ptr<ArrowArray>> arrays;
  std::vector<std::unique_ptr<const void*[]>> pointer_arrays;
  std::vector<std::unique_ptr<ArrowArray*[]>> child_arrays;
  std::vector<std::unique_ptr<std::uint8_t[]>> buffers;

  const std::uint8_t* buffer(cuarrow_fuzz::input& in) {
    auto b = std::make_unique<std::uint8_t[]>(kBuffer);
    const std::string bytes = in.bytes(in.u16());
    std::memcpy(b.get(), bytes.data(), std::min(bytes.size(), kBuffer));
    std::memset(b.get() + std::min(bytes.size(), kBuffer), 0, kBuffer - std::min(bytes.size(), kBuffer));
    buffers.push_back(std::move(b));
    return buffers.back().get();
  }
};

// Brings each of `count` values of `width` bytes at `p` into 0..kBuffer
// (negative values stay negative: import must refuse them).
template <class T>
void clamp_values(std::uint8_t* p, std::size_t count) {
  for (std::size_t i = 0; i < count && (i + 1) * sizeof(T) <= kBuffer; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    if (v > static_cast<T>(kBuffer)) v = static_cast<T>(v % static_cast<T>(kBuffer + 1));
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
  }
}

ArrowArray* read_array(cuarrow_fuzz::input& in, const data_type* t, arena& a, int depth) {
  auto arr = std::make_unique<ArrowArray>();
  std::memset(arr.get(), 0, sizeof(ArrowArray));
  arr->length = in.u8();
  arr->offset = in.u8();
  const std::uint8_t nc = in.u8();
  arr->null_count = nc == 0xff ? -1 : nc;
  const std::uint8_t nb = in.u8();
  std::int64_t n_buffers = nb % 8;
  if (nb == 0xff && t != nullptr) n_buffers = buffers_for(*t);
  auto ptrs = std::make_unique<const void*[]>(static_cast<std::size_t>(n_buffers) + 1);
  for (std::int64_t i = 0; i < n_buffers; ++i) {
    const std::uint8_t mode = in.u8();
    ptrs[i] = mode == 0 ? nullptr : a.buffer(in);
  }
  if (t != nullptr) {
    auto* b1 = n_buffers > 1 ? const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(ptrs[1])) : nullptr;
    const std::size_t count = static_cast<std::size_t>(arr->offset + arr->length + 1);
    if (b1 != nullptr && (t->id == type_id::binary || t->id == type_id::utf8)) clamp_values<std::int32_t>(b1, count);
    if (b1 != nullptr && (t->id == type_id::large_binary || t->id == type_id::large_utf8))
      clamp_values<std::int64_t>(b1, count);
    if ((t->id == type_id::binary_view || t->id == type_id::utf8_view) && n_buffers > 2 &&
        ptrs[n_buffers - 1] != nullptr) {
      clamp_values<std::int64_t>(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(ptrs[n_buffers - 1])),
                                 static_cast<std::size_t>(n_buffers - 3));
    }
  }
  arr->n_buffers = n_buffers;
  arr->buffers = n_buffers > 0 ? ptrs.get() : nullptr;
  a.pointer_arrays.push_back(std::move(ptrs));

  const std::uint8_t cc = in.u8();
  const std::int64_t n_children =
      cc == 0xff || t == nullptr ? (t ? static_cast<std::int64_t>(t->children.size()) : 0) : cc % 5;
  auto kids = std::make_unique<ArrowArray*[]>(static_cast<std::size_t>(n_children) + 1);
  for (std::int64_t i = 0; i < n_children; ++i) {
    const data_type* ct =
        (t != nullptr && static_cast<std::size_t>(i) < t->children.size()) ? &t->children[i].type : nullptr;
    kids[i] = depth < 8 ? read_array(in, ct, a, depth + 1) : nullptr;
  }
  arr->n_children = n_children;
  arr->children = n_children > 0 ? kids.get() : nullptr;
  a.child_arrays.push_back(std::move(kids));
  if (in.u8() & 1) {
    const data_type* vt = (t != nullptr && t->id == type_id::dictionary) ? t->value_type.get() : nullptr;
    arr->dictionary = depth < 8 ? read_array(in, vt, a, depth + 1) : nullptr;
  }
  arr->release = no_release;
  a.arrays.push_back(std::move(arr));
  return a.arrays.back().get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuarrow_fuzz::input in(data, size);
  const data_type type = read_type(in, 0);
  arena a;
  ArrowArray* root = read_array(in, &type, a, 0);
  try {
    import_options opts;
    opts.validation = validation_level::full;
    const array_data arr = import_array(root, type, opts);
    validate_options v;
    v.level = validation_level::full;
    validate(arr, v);
    const array_data host = to_host(arr);
    owned_array out;
    export_array(host, out.get());
    const array_data again = import_array(out.get(), type, opts);
    if (again.length != arr.length || !(again.type == arr.type))
      cuarrow_fuzz::property_failed("export + import changed the array");
  } catch (const cuarrow::error& e) {
    if (std::getenv("CUARROW_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
