// DLPack export (CudaBuffer.__dlpack__, DeviceArray.__dlpack__) and import
// (Context.buffer_from_object, from_device).
//
// Export: a 1-D uint8 tensor over a buffer's bytes, or a typed 1-D / 2-D
// tensor over part of it (a fixed-width Arrow array, its offset applied to
// the data pointer; byte_offset stays 0, which every consumer reads right).
// The capsule's manager
// holds a cuarrow::buffer handle, so the memory (and any Python owner behind
// it) stays alive until the consumer calls the deleter, whatever happens to
// the CudaBuffer object.  Stream synchronization is done by the facade
// before the capsule is made.
//
// Import: the capsule is renamed "used_*" (the protocol's way of taking
// ownership) only after every check passed; the tensor's deleter then runs
// when the last cuarrow::buffer handle of the view goes away.
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"
#include "dlpack.hpp"

namespace cuarrow_py {
namespace {

using namespace dlpack;

constexpr const char* kName = "dltensor";
constexpr const char* kUsedName = "used_dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";

struct export_state {
  cuarrow::buffer buf;
  std::uintptr_t data = 0;  // first element (buffer address + byte offset)
  DLDataType dtype{kDLUInt, 8, 1};
  std::int32_t ndim = 1;
  std::int64_t shape[2] = {0, 0};
  std::int64_t strides[2] = {1, 1};  // in elements, row-major
};

void fill_tensor(DLTensor& t, export_state* st) {
  const cuarrow::buffer& b = st->buf;
  t.data = reinterpret_cast<void*>(st->data);
  switch (b.type()) {
    case cuarrow::device_type::cuda: t.device = {kDLCUDA, b.device_id()}; break;
    case cuarrow::device_type::cuda_host: t.device = {kDLCUDAHost, 0}; break;
    case cuarrow::device_type::cuda_managed: t.device = {kDLCUDAManaged, b.device_id()}; break;
    default: t.device = {kDLCPU, 0}; break;
  }
  t.ndim = st->ndim;
  t.dtype = st->dtype;
  t.shape = st->shape;
  t.strides = st->strides;
  t.byte_offset = 0;
}

void delete_legacy(DLManagedTensor* self) {
  delete static_cast<export_state*>(self->manager_ctx);
  delete self;
}

void delete_versioned(DLManagedTensorVersioned* self) {
  delete static_cast<export_state*>(self->manager_ctx);
  delete self;
}

// Capsule destructors: free the tensor only if no consumer took it.
void capsule_legacy(PyObject* cap) noexcept {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyCapsule_IsValid(cap, kName)) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kName));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
  PyErr_Restore(type, value, tb);
}

void capsule_versioned(PyObject* cap) noexcept {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyCapsule_IsValid(cap, kVersionedName)) {
    auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kVersionedName));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
  PyErr_Restore(type, value, tb);
}

nb::object export_state_capsule(export_state* st, bool versioned, bool read_only, bool copied) {
  if (versioned) {
    auto* t = new DLManagedTensorVersioned{};
    t->version = {1, 0};
    t->manager_ctx = st;
    t->deleter = delete_versioned;
    t->flags = (read_only ? kFlagReadOnly : 0) | (copied ? kFlagIsCopied : 0);
    fill_tensor(t->dl_tensor, st);
    PyObject* cap = PyCapsule_New(t, kVersionedName, capsule_versioned);
    if (cap == nullptr) {
      delete_versioned(t);
      throw nb::python_error();
    }
    return nb::steal(cap);
  }
  auto* t = new DLManagedTensor{};
  t->manager_ctx = st;
  t->deleter = delete_legacy;
  fill_tensor(t->dl_tensor, st);
  PyObject* cap = PyCapsule_New(t, kName, capsule_legacy);
  if (cap == nullptr) {
    delete_legacy(t);
    throw nb::python_error();
  }
  return nb::steal(cap);
}

nb::object export_dlpack(const Buffer& b, bool versioned, bool copied) {
  auto* st = new export_state{};
  st->buf = b.buf;
  st->data = b.buf.address();
  st->shape[0] = b.buf.size();
  return export_state_capsule(st, versioned, !b.buf.is_mutable(), copied);
}

// A typed tensor over part of a buffer: elements of `bits` bits of DLPack
// type `code`, `shape` (1 or 2 dimensions, row-major, compact) from byte
// `byte_offset` of the buffer.
nb::object export_dlpack_typed(const Buffer& b, std::int64_t byte_offset, int code, int bits,
                               std::vector<std::int64_t> shape, bool versioned, bool copied) {
  if (shape.empty() || shape.size() > 2) throw nb::value_error("a typed DLPack export has 1 or 2 dimensions");
  if (bits <= 0 || bits % 8 != 0 || code < 0 || code > 255) throw nb::value_error("bad DLPack element type");
  std::int64_t count = 1;
  for (std::int64_t n : shape) {
    if (n < 0) throw nb::value_error("negative extent");
    count *= n;
  }
  const std::int64_t nbytes = count * (bits / 8);
  if (byte_offset < 0 || (count > 0 && (byte_offset > b.buf.size() || nbytes > b.buf.size() - byte_offset))) {
    throw cuarrow::out_of_range("a DLPack tensor of " + std::to_string(nbytes) + " bytes at offset " +
                                std::to_string(byte_offset) + " overruns a buffer of " +
                                std::to_string(b.buf.size()) + " bytes");
  }
  auto* st = new export_state{};
  st->buf = b.buf;
  st->data = count > 0 ? b.buf.address() + static_cast<std::uintptr_t>(byte_offset) : b.buf.address();
  st->dtype = DLDataType{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  st->ndim = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) st->shape[i] = shape[i];
  if (shape.size() == 2) {
    st->strides[0] = shape[1];
    st->strides[1] = 1;
  }
  return export_state_capsule(st, versioned, !b.buf.is_mutable(), copied);
}

// The bytes a tensor spans, if they are contiguous (in any dimension order,
// strides of either sign): {offset of the first byte from data, length}.
std::pair<std::int64_t, std::int64_t> contiguous_span(const DLTensor& t) {
  const std::int64_t bits = static_cast<std::int64_t>(t.dtype.bits) * t.dtype.lanes;
  if (bits % 8 != 0) throw nb::value_error("DLPack tensors of sub-byte element types cannot be viewed as bytes");
  const std::int64_t itemsize = bits / 8;
  if (t.ndim < 0) throw nb::value_error("DLPack tensor with a negative number of dimensions");
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) throw nb::value_error("DLPack tensor with a negative extent");
    if (t.shape[i] == 0) return {0, 0};
  }
  std::int64_t elements = 1;
  for (int i = 0; i < t.ndim; ++i) elements *= t.shape[i];
  if (t.strides == nullptr) return {0, elements * itemsize};
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // |stride|, extent
  std::int64_t start = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 1) continue;
    const std::int64_t s = t.strides[i];
    dims.emplace_back(s < 0 ? -s : s, t.shape[i]);
    if (s < 0) start += s * (t.shape[i] - 1);
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t expected = 1;
  for (const auto& [stride, extent] : dims) {
    if (stride != expected) throw nb::value_error("array data is non-contiguous");
    expected *= extent;
  }
  return {start * itemsize, expected * itemsize};
}

Buffer import_dlpack(nb::handle capsule, const cuarrow::context& ctx) {
  PyObject* cap = capsule.ptr();
  const bool versioned = PyCapsule_IsValid(cap, kVersionedName) != 0;
  if (!versioned && PyCapsule_IsValid(cap, kName) == 0) {
    throw nb::type_error("expected an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")");
  }
  DLTensor* t = nullptr;
  bool read_only = false;
  void* managed = PyCapsule_GetPointer(cap, versioned ? kVersionedName : kName);
  if (managed == nullptr) throw nb::python_error();
  if (versioned) {
    auto* v = static_cast<DLManagedTensorVersioned*>(managed);
    if (v->version.major != 1) {
      throw nb::buffer_error(("unsupported DLPack version " + std::to_string(v->version.major) + "." +
                              std::to_string(v->version.minor) + " (cuarrow reads 1.x)")
                                 .c_str());
    }
    t = &v->dl_tensor;
    read_only = (v->flags & kFlagReadOnly) != 0;
  } else {
    t = &static_cast<DLManagedTensor*>(managed)->dl_tensor;
  }

  const std::int32_t type = t->device.device_type;
  if (type != kDLCUDA && type != kDLCUDAHost && type != kDLCUDAManaged) {
    throw nb::type_error(("cannot create device buffer view from a DLPack tensor on device type " +
                          std::to_string(type) + " (only CUDA, CUDA host and CUDA managed memory)")
                             .c_str());
  }
  if (type == kDLCUDA && t->device.device_id != ctx.device_number()) {
    throw cuarrow::device_mismatch("the DLPack tensor is on device " + std::to_string(t->device.device_id) +
                                   ", the context is for device " + std::to_string(ctx.device_number()) +
                                   "; use Context(" + std::to_string(t->device.device_id) + ")");
  }
  const auto [start, size] = contiguous_span(*t);
  const std::uintptr_t address =
      reinterpret_cast<std::uintptr_t>(t->data) + static_cast<std::uintptr_t>(t->byte_offset) + start;

  // Every check passed: take ownership.
  if (PyCapsule_SetName(cap, versioned ? kUsedVersionedName : kUsedName) != 0) throw nb::python_error();
  std::shared_ptr<const void> owner;
  if (versioned) {
    owner = std::shared_ptr<const void>(managed, [](const void* p) {
      auto* m = static_cast<DLManagedTensorVersioned*>(const_cast<void*>(p));
      if (m->deleter == nullptr) return;
      cleanup_gil gil;  // producers' deleters may touch Python objects
      if (gil) m->deleter(m);
    });
  } else {
    owner = std::shared_ptr<const void>(managed, [](const void* p) {
      auto* m = static_cast<DLManagedTensor*>(const_cast<void*>(p));
      if (m->deleter == nullptr) return;
      cleanup_gil gil;
      if (gil) m->deleter(m);
    });
  }

  nb::gil_scoped_release r;
  if (size == 0) return Buffer{cuarrow::allocate_device(ctx, 0), false};
  std::uintptr_t device_address = address;
  if (type == kDLCUDAHost) device_address = ctx.get_device_address(reinterpret_cast<const void*>(address));
  return Buffer{cuarrow::wrap_device(ctx, device_address, size, std::move(owner), !read_only), false};
}

// dtype, shape, strides and device of an unconsumed DLPack capsule.
nb::dict dlpack_info(nb::handle capsule) {
  PyObject* cap = capsule.ptr();
  const bool versioned = PyCapsule_IsValid(cap, kVersionedName) != 0;
  if (!versioned && PyCapsule_IsValid(cap, kName) == 0) {
    throw nb::type_error("expected an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")");
  }
  void* managed = PyCapsule_GetPointer(cap, versioned ? kVersionedName : kName);
  if (managed == nullptr) throw nb::python_error();
  const DLTensor& t = versioned ? static_cast<DLManagedTensorVersioned*>(managed)->dl_tensor
                                : static_cast<DLManagedTensor*>(managed)->dl_tensor;
  if (t.ndim < 0 || t.ndim > 32) throw nb::value_error("DLPack tensor with a bad number of dimensions");
  nb::list shape, strides;
  for (int i = 0; i < t.ndim; ++i) {
    shape.append(t.shape[i]);
    if (t.strides != nullptr) strides.append(t.strides[i]);
  }
  nb::dict d;
  d["code"] = static_cast<int>(t.dtype.code);
  d["bits"] = static_cast<int>(t.dtype.bits);
  d["lanes"] = static_cast<int>(t.dtype.lanes);
  d["shape"] = nb::tuple(shape);
  d["strides"] = t.strides != nullptr ? nb::object(nb::tuple(strides)) : nb::none();
  d["device"] = nb::make_tuple(t.device.device_type, t.device.device_id);
  d["data"] = reinterpret_cast<std::uintptr_t>(t.data);
  d["byte_offset"] = t.byte_offset;
  return d;
}

}  // namespace

void bind_dlpack(nb::module_& m) {
  m.def("to_dlpack", &export_dlpack, nb::arg("buffer"), nb::arg("versioned") = true, nb::arg("copied") = false,
        "A DLPack capsule (1-D uint8) over the buffer's bytes; the capsule keeps the memory alive.");
  m.def("to_dlpack_typed", &export_dlpack_typed, nb::arg("buffer"), nb::arg("byte_offset"), nb::arg("code"),
        nb::arg("bits"), nb::arg("shape"), nb::arg("versioned") = true, nb::arg("copied") = false,
        "A DLPack capsule of a typed, compact row-major tensor over part of a buffer; keeps the memory alive.");
  m.def("dlpack_info", &dlpack_info, nb::arg("capsule"),
        "dtype (code, bits, lanes), shape, strides, device, data and byte_offset of an unconsumed DLPack capsule.");
  m.def("from_dlpack", &import_dlpack, nb::arg("capsule"), nb::arg("context"),
        "A view of the contiguous bytes of a DLPack tensor in CUDA memory; takes ownership of the capsule.");
}

}  // namespace cuarrow_py
