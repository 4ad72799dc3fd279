// The tensor reader (tensor.hpp): DLPack structs and __cuda_array_interface__
// descriptions checked in one place.
#include "cuarrow/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuarrow/error.hpp"

namespace cuarrow {
namespace {

[[noreturn]] void refuse(const char* what, const std::string& why) {
  throw invalid_argument(std::string(what) + ": " + why);
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what, const char* of) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) refuse(what, std::string(of) + " overflows 64 bits");
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what, const char* of) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) refuse(what, std::string(of) + " overflows 64 bits");
  return r;
}

// Fills elements, span, contiguity from shape, byte strides and itemsize;
// checks data + span against the address space.
// Compact row-major strides for a tensor that gave none, in checked
// arithmetic (extents may be huge).
void compact_strides(tensor_info& t, const char* what) {
  std::int64_t s = t.itemsize;
  bool empty = false;
  for (std::int64_t n : t.shape) empty = empty || n == 0;
  for (std::size_t i = t.shape.size(); i-- > 0;) {
    t.strides[i] = s;
    if (!empty && t.shape[i] > 0) s = checked_mul(s, t.shape[i], what, "the element count");
  }
}

void finish(tensor_info& t, const char* what) {
  const auto ndim = t.shape.size();
  t.elements = 1;
  bool empty = false;
  for (std::size_t i = 0; i < ndim; ++i) {
    if (t.shape[i] < 0)
      refuse(what, "extent " + std::to_string(t.shape[i]) + " of dimension " + std::to_string(i) + " is negative");
    if (t.shape[i] == 0) empty = true;
  }
  if (empty) {
    t.elements = 0;
  } else {
    for (std::size_t i = 0; i < ndim; ++i) t.elements = checked_mul(t.elements, t.shape[i], what, "the element count");
  }
  checked_mul(t.elements, t.itemsize, what, "the size in bytes");
  if (t.elements == 0) {
    t.span_offset = t.span_length = 0;
    t.c_contiguous = t.contiguous = true;
    return;
  }
  if (t.data == 0) refuse(what, "the data pointer is null for a tensor of " + std::to_string(t.elements) + " elements");

  std::int64_t lo = 0, hi = 0;
  for (std::size_t i = 0; i < ndim; ++i) {
    if (t.shape[i] == 1) continue;
    const std::int64_t reach = checked_mul(t.strides[i], t.shape[i] - 1, what, "a stride times its extent");
    if (reach < 0) {
      lo = checked_add(lo, reach, what, "the byte span");
    } else {
      hi = checked_add(hi, reach, what, "the byte span");
    }
  }
  t.span_offset = lo;
  t.span_length = checked_add(hi, t.itemsize, what, "the byte span");
  if (__builtin_sub_overflow(t.span_length, lo, &t.span_length)) refuse(what, "the byte span overflows 64 bits");
  const std::uint64_t below = lo < 0 ? 0 - static_cast<std::uint64_t>(lo) : 0;
  if (t.data < below) refuse(what, "negative strides reach below address 0");
  const std::uintptr_t first = t.data - below;
  if (static_cast<std::uint64_t>(t.span_length) > std::numeric_limits<std::uintptr_t>::max() - first) {
    refuse(what, "the tensor's bytes run past the end of the address space");
  }

  // C order: from the last dimension, each stride is the product of the
  // extents after it times the item size.  Dimensions of extent 1 are never
  // stepped over, so their stride does not matter (NumPy and DLPack agree).
  std::int64_t expected = t.itemsize;
  t.c_contiguous = true;
  for (std::size_t i = ndim; i-- > 0;) {
    if (t.shape[i] != 1 && t.strides[i] != expected) t.c_contiguous = false;
    expected *= t.shape[i];  // cannot overflow: bounded by elements * itemsize
  }
  // Any order: the |strides| of the stepped dimensions, sorted, must tile
  // the span exactly (a stride of 0 or two equal strides overlap).
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // |stride|, extent
  for (std::size_t i = 0; i < ndim; ++i) {
    if (t.shape[i] == 1) continue;
    const std::int64_t s = t.strides[i];
    dims.emplace_back(s < 0 ? -s : s, t.shape[i]);  // s > INT64_MIN: reach above did not overflow
  }
  std::sort(dims.begin(), dims.end());
  expected = t.itemsize;
  t.contiguous = true;
  for (const auto& [stride, extent] : dims) {
    if (stride != expected) {
      t.contiguous = false;
      break;
    }
    expected *= extent;
  }
}

void check_ndim(const char* what, std::int64_t ndim) {
  if (ndim < 0) refuse(what, "negative number of dimensions (" + std::to_string(ndim) + ")");
  if (ndim > max_tensor_ndim) {
    refuse(what, std::to_string(ndim) + " dimensions (at most " + std::to_string(max_tensor_ndim) + ")");
  }
}

std::string dlpack_typestr(int code, int bits, int lanes) {
  if (lanes != 1) return {};
  const char order = bits == 8 ? '|' : '<';
  const std::string n = std::to_string(bits / 8);
  switch (code) {
    case dlpack::kDLInt: return std::string(1, order) + "i" + n;
    case dlpack::kDLUInt: return std::string(1, order) + "u" + n;
    case dlpack::kDLFloat: return bits >= 16 && bits <= 128 ? std::string(1, order) + "f" + n : std::string();
    case dlpack::kDLComplex: return std::string(1, order) + "c" + n;
    case dlpack::kDLBool: return bits == 8 ? "|b1" : std::string();
    default: return {};
  }
}

}  // namespace

tensor_info read_dlpack(const dlpack::DLTensor& d, bool read_only) {
  const char* what = "DLPack tensor";
  tensor_info t;
  t.read_only = read_only;
  t.device_type = d.device.device_type;
  t.device_id = d.device.device_id;
  check_ndim(what, d.ndim);
  // Codes: int, uint, float, bfloat, complex, bool and the float8/float6/
  // float4 codes of DLPack 1.1 (7 to 17); 3 is an opaque handle.
  const int code = d.dtype.code;
  if (code > 17 || code == 3) refuse(what, "unknown dtype code " + std::to_string(code));
  if (d.dtype.bits == 0) refuse(what, "dtype of 0 bits");
  if (d.dtype.lanes == 0) refuse(what, "dtype of 0 lanes");
  const std::int64_t bits = static_cast<std::int64_t>(d.dtype.bits) * d.dtype.lanes;
  if (bits % 8 != 0) refuse(what, "elements of " + std::to_string(bits) + " bits are not whole bytes");
  t.code = code;
  t.bits = d.dtype.bits;
  t.lanes = d.dtype.lanes;
  t.itemsize = bits / 8;
  t.typestr = dlpack_typestr(code, t.bits, t.lanes);
  t.kind = t.typestr.empty() ? 'V' : t.typestr[1];
  if (d.ndim > 0 && d.shape == nullptr) refuse(what, "shape is NULL for " + std::to_string(d.ndim) + " dimensions");
  t.shape.assign(d.shape, d.shape + d.ndim);
  t.strides_given = d.strides != nullptr && d.ndim > 0;
  t.strides.resize(t.shape.size());
  if (t.strides_given) {
    for (int i = 0; i < d.ndim; ++i) t.strides[i] = checked_mul(d.strides[i], t.itemsize, what, "a stride in bytes");
  }
  if (d.byte_offset > std::numeric_limits<std::uintptr_t>::max() - reinterpret_cast<std::uintptr_t>(d.data)) {
    refuse(what, "data + byte_offset overflows the address space");
  }
  t.data = reinterpret_cast<std::uintptr_t>(d.data) + static_cast<std::uintptr_t>(d.byte_offset);
  if (!t.strides_given) compact_strides(t, what);
  finish(t, what);
  return t;
}

tensor_info read_dlpack(const dlpack::DLManagedTensorVersioned& v) {
  if (v.version.major != 1) {
    refuse("DLPack tensor", "unsupported DLPack version " + std::to_string(v.version.major) + "." +
                                std::to_string(v.version.minor) + " (cuarrow reads 1.x)");
  }
  return read_dlpack(v.dl_tensor, (v.flags & dlpack::kFlagReadOnly) != 0);
}

tensor_info read_dlpack(const dlpack::DLManagedTensor& t) { return read_dlpack(t.dl_tensor); }

tensor_info read_cuda_array_interface(const cuda_array_interface& cai) {
  const char* what = "__cuda_array_interface__";
  if (cai.version && (*cai.version < 0 || *cai.version > 3)) {
    refuse(what, "unsupported version " + std::to_string(*cai.version) + " (cuarrow reads 0 to 3)");
  }
  if (cai.has_mask) {
    refuse(what,
           "a mask is not supported: cuarrow would return the masked elements as valid (apply the mask, "
           "or import the data and a validity bitmap as an Arrow array)");
  }
  if (cai.stream && *cai.stream == 0) refuse(what, "stream 0 is invalid (ambiguous); see the CAI v3 spec");
  if (cai.stream && *cai.stream < 0) {
    refuse(what, "stream " + std::to_string(*cai.stream) +
                     " is not a stream handle (1: legacy default, 2: per-thread "
                     "default, or a CUstream)");
  }
  tensor_info t;
  t.read_only = cai.read_only;
  t.data = cai.data;
  t.typestr = cai.typestr;
  // typestr: byte order, kind, item size in bytes, and for m / M a unit.
  const std::string& s = cai.typestr;
  const auto bad_typestr = [&](const std::string& why) { refuse(what, "typestr \"" + s + "\": " + why); };
  if (s.size() < 3) bad_typestr("too short (e.g. \"<f4\")");
  if (s[0] != '<' && s[0] != '>' && s[0] != '|' && s[0] != '=') bad_typestr("unknown byte order");
  const char kind = s[1];
  if (std::string_view("iufcbmMV").find(kind) == std::string_view::npos) bad_typestr("unknown kind");
  std::size_t pos = 2;
  std::int64_t size = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    size = size * 10 + (s[pos] - '0');
    if (size > (1 << 20)) bad_typestr("item size too large");
    ++pos;
  }
  if (pos == 2 || size == 0) bad_typestr("no item size");
  if (pos < s.size()) {
    if ((kind != 'm' && kind != 'M') || s[pos] != '[' || s.back() != ']' || s.size() - pos < 3) {
      bad_typestr("trailing characters");
    }
    for (std::size_t i = pos + 1; i + 1 < s.size(); ++i) {
      const char c = s[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) bad_typestr("bad unit");
    }
  }
  if ((kind == 'm' || kind == 'M') && size != 8) bad_typestr("datetimes are 8 bytes");
  if (kind == 'b' && size != 1) bad_typestr("booleans are 1 byte");
  t.kind = kind;
  t.itemsize = size;
  t.bits = static_cast<int>(std::min<std::int64_t>(size * 8, 255));
  switch (kind) {
    case 'i': t.code = dlpack::kDLInt; break;
    case 'u': t.code = dlpack::kDLUInt; break;
    case 'f': t.code = dlpack::kDLFloat; break;
    case 'c': t.code = dlpack::kDLComplex; break;
    case 'b': t.code = dlpack::kDLBool; break;
    default: t.code = -1; break;
  }
  check_ndim(what, static_cast<std::int64_t>(cai.shape.size()));
  t.shape = cai.shape;
  t.strides.resize(t.shape.size());
  if (cai.strides) {
    if (cai.strides->size() != cai.shape.size()) {
      refuse(what,
             std::to_string(cai.strides->size()) + " strides for " + std::to_string(cai.shape.size()) + " dimensions");
    }
    t.strides = *cai.strides;
    t.strides_given = true;
  } else {
    compact_strides(t, what);
  }
  finish(t, what);
  return t;
}

}  // namespace cuarrow
