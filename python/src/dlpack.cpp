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
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

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
                                std::to_string(byte_offset) + " overruns a buffer of " + std::to_string(b.buf.size()) +
                                " bytes");
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

// A tensor_info as a Python dict (the facade's view of a checked tensor).
nb::dict info_dict(const cuarrow::tensor_info& t) {
  nb::list shape, strides;
  for (std::int64_t n : t.shape) shape.append(n);
  for (std::int64_t n : t.strides) strides.append(n);
  nb::dict d;
  d["data"] = t.data;
  d["device"] = nb::make_tuple(t.device_type, t.device_id);
  d["kind"] = std::string(1, t.kind);
  d["code"] = t.code;
  d["bits"] = t.bits;
  d["lanes"] = t.lanes;
  d["typestr"] = t.typestr.empty() ? nb::object(nb::none()) : nb::object(nb::str(t.typestr.c_str()));
  d["itemsize"] = t.itemsize;
  d["shape"] = nb::tuple(shape);
  d["strides"] = nb::tuple(strides);  // in bytes
  d["strides_given"] = t.strides_given;
  d["read_only"] = t.read_only;
  d["elements"] = t.elements;
  d["span_offset"] = t.span_offset;
  d["span_length"] = t.span_length;
  d["c_contiguous"] = t.c_contiguous;
  d["contiguous"] = t.contiguous;
  return d;
}

const dlpack::DLTensor& tensor_of(void* managed, bool versioned, cuarrow::tensor_info& info) {
  if (versioned) {
    auto* v = static_cast<dlpack::DLManagedTensorVersioned*>(managed);
    info = cuarrow::read_dlpack(*v);
    return v->dl_tensor;
  }
  auto* m = static_cast<dlpack::DLManagedTensor*>(managed);
  info = cuarrow::read_dlpack(m->dl_tensor);
  return m->dl_tensor;
}

Buffer import_dlpack(nb::handle capsule, const cuarrow::context& ctx) {
  PyObject* cap = capsule.ptr();
  const bool versioned = PyCapsule_IsValid(cap, kVersionedName) != 0;
  if (!versioned && PyCapsule_IsValid(cap, kName) == 0) {
    throw nb::type_error("expected an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")");
  }
  void* managed = PyCapsule_GetPointer(cap, versioned ? kVersionedName : kName);
  if (managed == nullptr) throw nb::python_error();
  cuarrow::tensor_info info;
  tensor_of(managed, versioned, info);  // every field checked by the core's reader

  const std::int32_t type = info.device_type;
  if (type != kDLCUDA && type != kDLCUDAHost && type != kDLCUDAManaged) {
    throw nb::type_error(("cannot create device buffer view from a DLPack tensor on device type " +
                          std::to_string(type) + " (only CUDA, CUDA host and CUDA managed memory)")
                             .c_str());
  }
  if (type == kDLCUDA && info.device_id != ctx.device_number()) {
    throw cuarrow::device_mismatch("the DLPack tensor is on device " + std::to_string(info.device_id) +
                                   ", the context is for device " + std::to_string(ctx.device_number()) +
                                   "; use Context(" + std::to_string(info.device_id) + ")");
  }
  if (!info.contiguous) throw nb::value_error("array data is non-contiguous");
  const bool read_only = info.read_only;
  const std::int64_t size = info.span_length;
  const std::uintptr_t address = info.data - static_cast<std::uintptr_t>(-info.span_offset);

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
  cuarrow::tensor_info info;
  tensor_of(managed, versioned, info);
  return info_dict(info);
}

// An integer field of a CAI dictionary as an int64 (ValueError otherwise).
std::int64_t cai_int(nb::handle v, const char* what) {
  if (!PyLong_Check(v.ptr())) {
    throw cuarrow::invalid_argument(std::string("__cuda_array_interface__: ") + what + " must be an int");
  }
  int overflow = 0;
  const long long r = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0 || (r == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw cuarrow::invalid_argument(std::string("__cuda_array_interface__: ") + what + " does not fit 64 bits");
  }
  return r;
}

std::vector<std::int64_t> cai_ints(nb::handle v, const char* what) {
  if (!PyTuple_Check(v.ptr()) && !PyList_Check(v.ptr())) {
    throw cuarrow::invalid_argument(std::string("__cuda_array_interface__: ") + what + " must be a tuple");
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(v.ptr());
  if (n > cuarrow::max_tensor_ndim) {
    throw cuarrow::invalid_argument("__cuda_array_interface__: " + std::to_string(n) + " entries in " + what +
                                    " (at most " + std::to_string(cuarrow::max_tensor_ndim) + " dimensions)");
  }
  std::vector<std::int64_t> out;
  for (Py_ssize_t i = 0; i < n; ++i) out.push_back(cai_int(PySequence_Fast_GET_ITEM(v.ptr(), i), what));
  return out;
}

// Reads a __cuda_array_interface__ dictionary through the core's reader.
nb::dict read_cai(nb::handle desc) {
  if (!PyDict_Check(desc.ptr())) throw cuarrow::invalid_argument("__cuda_array_interface__ must be a dict");
  nb::dict d = nb::borrow<nb::dict>(desc);
  cuarrow::cuda_array_interface c;
  if (d.contains("version")) c.version = cai_int(d["version"], "version");
  if (!d.contains("data") || !d.contains("shape") || !d.contains("typestr")) {
    throw cuarrow::invalid_argument("__cuda_array_interface__ needs data, shape and typestr");
  }
  nb::handle data = d["data"];
  if (!PyTuple_Check(data.ptr()) || PyTuple_GET_SIZE(data.ptr()) != 2) {
    throw cuarrow::invalid_argument("__cuda_array_interface__: data must be a tuple (pointer, read_only)");
  }
  nb::handle ptr = PyTuple_GET_ITEM(data.ptr(), 0);
  if (!PyLong_Check(ptr.ptr()))
    throw cuarrow::invalid_argument("__cuda_array_interface__: the data pointer must be an int");
  const unsigned long long address = PyLong_AsUnsignedLongLong(ptr.ptr());
  if (address == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw cuarrow::invalid_argument("__cuda_array_interface__: the data pointer is not an address");
  }
  c.data = static_cast<std::uintptr_t>(address);
  c.read_only = PyObject_IsTrue(PyTuple_GET_ITEM(data.ptr(), 1)) == 1;
  nb::handle typestr = d["typestr"];
  if (!PyUnicode_Check(typestr.ptr()))
    throw cuarrow::invalid_argument("__cuda_array_interface__: typestr must be a str");
  c.typestr = nb::cast<std::string>(typestr);
  c.shape = cai_ints(d["shape"], "shape");
  if (d.contains("strides") && !d["strides"].is_none()) c.strides = cai_ints(d["strides"], "strides");
  c.has_mask = d.contains("mask") && !d["mask"].is_none();
  if (d.contains("stream") && !d["stream"].is_none()) c.stream = cai_int(d["stream"], "stream");
  nb::dict out = info_dict(cuarrow::read_cuda_array_interface(c));
  out["stream"] = c.stream ? nb::object(nb::int_(*c.stream)) : nb::object(nb::none());
  return out;
}

}  // namespace

void bind_dlpack(nb::module_& m) {
  m.def("to_dlpack_typed", &export_dlpack_typed, nb::arg("buffer"), nb::arg("byte_offset"), nb::arg("code"),
        nb::arg("bits"), nb::arg("shape"), nb::arg("versioned") = true, nb::arg("copied") = false,
        "A DLPack capsule of a typed, compact row-major tensor over part of a buffer; keeps the memory alive.");
  m.def("dlpack_info", &dlpack_info, nb::arg("capsule"),
        "The checked description of an unconsumed DLPack capsule (cuarrow::read_dlpack): dtype, shape, strides "
        "in bytes, device, data (byte_offset applied), span and contiguity.");
  m.def("read_cai", &read_cai, nb::arg("desc"),
        "The checked description of a __cuda_array_interface__ dict (cuarrow::read_cuda_array_interface); "
        "a mask is refused.");
  m.def("from_dlpack", &import_dlpack, nb::arg("capsule"), nb::arg("context"),
        "A view of the contiguous bytes of a DLPack tensor in CUDA memory; takes ownership of the capsule.");
}

}  // namespace cuarrow_py
