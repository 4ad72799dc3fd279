// libFuzzer target: the tensor reader (cuarrow/tensor.hpp), DLPack structs
// and __cuda_array_interface__ fields.
//
// Input: u8 mode (even: DLPack, odd: CAI), then for DLPack: int32 ndim,
// u8 code, u8 bits, u16 lanes, u64 data, u64 byte_offset, u8 strides
// present, then min(|ndim|, 128) int64 extents and as many strides (the
// arrays hold only that many, so a reader that trusts a large ndim reads
// past them); for CAI: u8 version (0xff none), u8 mask, u8 stream mode,
// typestr (u8 length, bytes), u64 data, u8 ndim (<= 80), extents, u8
// strides mode (0: none, otherwise a count and strides).
// Extents and strides are int64 from the input, sometimes narrowed to
// small values so that real tensors are common.
//
// Properties: never reads outside the given arrays; a CAI stream that is
// no handle (0 or negative) is refused; for what it accepts
// with at most 4096 elements, walking every element gives exactly the
// reported span, `contiguous` holds exactly when the elements tile the span
// without gaps or overlaps, and c_contiguous exactly when element offsets
// are row-major compact.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "cuarrow/error.hpp"
#include "cuarrow/tensor.hpp"
#include "fuzz_input.hpp"

using cuarrow::tensor_info;

namespace {

std::int64_t value(cuarrow_fuzz::input& in) {
  const std::uint8_t how = in.u8();
  if (how < 200) return static_cast<std::int8_t>(how) / 8;  // -16..15, mostly small
  return static_cast<std::int64_t>(in.u64());
}

void check(const tensor_info& t) {
  if (t.elements < 0 || t.itemsize <= 0) cuarrow_fuzz::property_failed("negative count or item size");
  if (t.shape.size() != t.strides.size()) cuarrow_fuzz::property_failed("shape and strides differ in length");
  if (t.elements == 0) {
    if (t.span_length != 0 || !t.contiguous || !t.c_contiguous) cuarrow_fuzz::property_failed("empty tensor span");
    return;
  }
  if (t.elements > 4096) return;
  // Walk every element: its byte offset from data.
  std::vector<std::int64_t> offs;
  std::vector<std::int64_t> idx(t.shape.size(), 0);
  for (std::int64_t e = 0; e < t.elements; ++e) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    offs.push_back(off);
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  const std::int64_t lo = *std::min_element(offs.begin(), offs.end());
  const std::int64_t hi = *std::max_element(offs.begin(), offs.end()) + t.itemsize;
  if (lo != t.span_offset || hi - lo != t.span_length) cuarrow_fuzz::property_failed("span differs from the elements'");
  std::vector<std::int64_t> sorted = offs;
  std::sort(sorted.begin(), sorted.end());
  bool tiles = true;
  for (std::size_t i = 0; i < sorted.size(); ++i)
    tiles = tiles && sorted[i] == lo + static_cast<std::int64_t>(i) * t.itemsize;
  if (tiles != t.contiguous) cuarrow_fuzz::property_failed("contiguous differs from the elements'");
  bool row_major = true;
  for (std::size_t i = 0; i < offs.size(); ++i)
    row_major = row_major && offs[i] == static_cast<std::int64_t>(i) * t.itemsize;
  if (row_major != t.c_contiguous) cuarrow_fuzz::property_failed("c_contiguous differs from the elements'");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuarrow_fuzz::input in(data, size);
  const std::uint8_t mode = in.u8();
  try {
    if ((mode & 1) == 0) {
      cuarrow::dlpack::DLTensor t{};
      t.ndim = static_cast<std::int32_t>(in.u32());
      if ((mode & 2) == 0) t.ndim = static_cast<std::int8_t>(t.ndim & 0xff);  // mostly small
      t.dtype.code = in.u8();
      t.dtype.bits = in.u8();
      t.dtype.lanes = in.u16();
      t.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(in.u64()));
      t.byte_offset = (mode & 4) ? in.u64() : in.u8();
      const bool strided = in.u8() & 1;
      const std::size_t k =
          static_cast<std::size_t>(std::min<std::int64_t>(t.ndim < 0 ? -std::int64_t{t.ndim} : t.ndim, 128));
      std::vector<std::int64_t> shape, strides;
      for (std::size_t i = 0; i < k; ++i) shape.push_back(value(in));
      for (std::size_t i = 0; strided && i < k; ++i) strides.push_back(value(in));
      // Exactly-sized heap arrays (empty vectors have no storage to read).
      std::unique_ptr<std::int64_t[]> sh(k ? new std::int64_t[k] : nullptr),
          st(k && strided ? new std::int64_t[k] : nullptr);
      std::copy(shape.begin(), shape.end(), sh.get());
      std::copy(strides.begin(), strides.end(), st.get());
      t.shape = sh.get();
      t.strides = st.get();
      if (mode & 8) {
        cuarrow::dlpack::DLManagedTensorVersioned v{};
        v.version = {static_cast<std::uint32_t>(1 + ((mode >> 4) & 1)), 0};
        v.flags = mode >> 5;
        v.dl_tensor = t;
        check(cuarrow::read_dlpack(v));
      } else {
        check(cuarrow::read_dlpack(t));
      }
    } else {
      cuarrow::cuda_array_interface c;
      const std::uint8_t version = in.u8();
      if (version != 0xff) c.version = static_cast<std::int8_t>(version);
      c.has_mask = (in.u8() & 7) == 7;
      const std::uint8_t stream = in.u8();
      if (stream & 1) c.stream = static_cast<std::int64_t>(in.u64());
      c.typestr = in.bytes(in.u8() % 16);
      c.data = static_cast<std::uintptr_t>(in.u64());
      c.read_only = mode & 2;
      const std::size_t ndim = in.u8() % 80;
      for (std::size_t i = 0; i < ndim; ++i) c.shape.push_back(value(in));
      const std::uint8_t smode = in.u8();
      if (smode != 0) {
        std::vector<std::int64_t> s;
        const std::size_t ns = (smode & 0x80) ? smode % 80 : ndim;
        for (std::size_t i = 0; i < ns; ++i) s.push_back(value(in));
        c.strides = std::move(s);
      }
      const tensor_info t = cuarrow::read_cuda_array_interface(c);
      if (c.stream && *c.stream <= 0) cuarrow_fuzz::property_failed("stream 0 or a negative stream accepted");
      check(t);
    }
  } catch (const cuarrow::error&) {
  }
  return 0;
}
