// DLPack export (CudaBuffer.__dlpack__, DeviceArray.__dlpack__) and import
// (Context.buffer_from_object, from_device): the core makes and takes the
// managed tensors (cuarrow::export_dlpack, cuarrow::from_dlpack); here they
// are wrapped in, and taken out of, PyCapsules.  Stream synchronization is
// done by the facade before an export.
//
// Export: the tensor's manager holds a cuarrow::buffer handle, so the memory
// (and any Python owner behind it) stays alive until the consumer calls the
// deleter, whatever happens to the CudaBuffer object.  Import: the capsule
// is renamed "used_*" (the protocol's way of taking ownership) once the core
// has taken the tensor; its deleter then runs, with the GIL held, when the
// last cuarrow::buffer handle of the view goes away.  A
// __cuda_array_interface__ dict is only converted here: the core reads it,
// locates its memory, views it and waits for its stream
// (cuarrow::wrap_cuda_array_interface).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuarrow/tensor.hpp>

#include "common.hpp"

namespace cuarrow_py {
namespace {

using namespace cuarrow::dlpack;

// The capsule name of a managed tensor, unconsumed and consumed.
template <class Managed>
const char* name_of(bool used = false) {
  if (std::is_same_v<Managed, DLManagedTensorVersioned>) return used ? "used_dltensor_versioned" : "dltensor_versioned";
  return used ? "used_dltensor" : "dltensor";
}

// Capsule destructor: frees the tensor only if no consumer took it.
template <class Managed>
void capsule_destructor(PyObject* cap) noexcept {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyCapsule_IsValid(cap, name_of<Managed>())) {
    auto* m = static_cast<Managed*>(PyCapsule_GetPointer(cap, name_of<Managed>()));
    if (m->deleter != nullptr) m->deleter(m);
  }
  PyErr_Restore(type, value, tb);
}

template <class Managed>
nb::object capsule_of(Managed* t) {
  PyObject* cap = PyCapsule_New(t, name_of<Managed>(), capsule_destructor<Managed>);
  if (cap == nullptr) {
    t->deleter(t);
    throw nb::python_error();
  }
  return nb::steal(cap);
}

// A typed, compact row-major tensor over part of a buffer (export_dlpack).
nb::object export_dlpack_typed(const cuarrow::buffer& b, std::int64_t byte_offset, std::uint8_t code, std::uint8_t bits,
                               std::vector<std::int64_t> shape, bool versioned, bool copied) {
  const DLDataType dtype{code, bits, 1};
  if (versioned) return capsule_of(cuarrow::export_dlpack_versioned(b, byte_offset, dtype, shape, copied));
  return capsule_of(cuarrow::export_dlpack(b, byte_offset, dtype, shape));
}

// What the facade reads of a checked tensor (tensor_info), as a dict.
nb::dict info_dict(const cuarrow::tensor_info& t) {
  using T = cuarrow::tensor_info;
  nb::dict d = fields_dict(t, "data", &T::data, "code", &T::code, "bits", &T::bits, "lanes", &T::lanes, "c_contiguous",
                           &T::c_contiguous);
  d["device"] = nb::make_tuple(t.device_type, t.device_id);
  d["typestr"] = t.typestr.empty() ? nb::object(nb::none()) : nb::object(nb::str(t.typestr.c_str()));
  d["shape"] = nb::tuple(nb::cast(t.shape));
  d["strides"] = nb::tuple(nb::cast(t.strides));  // in bytes
  return d;
}

// fn(the managed tensor of an unconsumed DLPack capsule, versioned or not).
template <class F>
auto with_tensor(nb::handle capsule, F&& fn) {
  PyObject* cap = capsule.ptr();
  using V = DLManagedTensorVersioned;
  if (PyCapsule_IsValid(cap, name_of<V>())) return fn(static_cast<V*>(PyCapsule_GetPointer(cap, name_of<V>())));
  using L = DLManagedTensor;
  if (PyCapsule_IsValid(cap, name_of<L>())) return fn(static_cast<L*>(PyCapsule_GetPointer(cap, name_of<L>())));
  throw nb::type_error("expected an unconsumed DLPack capsule (\"dltensor\" or \"dltensor_versioned\")");
}

// The producer's deleter, called with the GIL held (deleters may touch
// Python objects) on whichever thread drops the view's last handle.
void call_with_gil(const std::function<void()>& deleter) {
  cleanup_gil gil;
  if (gil) deleter();
}

// A view of the tensor (cuarrow::from_dlpack takes it over once every check
// passed); then the capsule says so (one just found valid can be renamed).
cuarrow::buffer import_dlpack(nb::handle capsule, const cuarrow::context& ctx) {
  return with_tensor(capsule, [&](auto* managed) {
    cuarrow::buffer view = released([&] { return cuarrow::from_dlpack(ctx, managed, call_with_gil); });
    using Managed = std::remove_pointer_t<decltype(managed)>;
    if (PyCapsule_SetName(capsule.ptr(), name_of<Managed>(true)) != 0) throw nb::python_error();
    return view;
  });
}

// dtype, shape, strides and device of an unconsumed DLPack capsule.
nb::dict dlpack_info(nb::handle capsule) {
  return with_tensor(capsule, [](auto* managed) { return info_dict(cuarrow::read_dlpack(*managed)); });
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
  // Limited-API calls only (the stable-ABI wheel): no PySequence_Fast_* macros.
  const Py_ssize_t n = PySequence_Size(v.ptr());
  if (n < 0) throw nb::python_error();
  std::vector<std::int64_t> out;
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object item = nb::steal(PySequence_GetItem(v.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    out.push_back(cai_int(item, what));
  }
  return out;
}

// The fields of a __cuda_array_interface__ dictionary, converted; the core
// checks them (read_cuda_array_interface).
cuarrow::cuda_array_interface cai_of(nb::handle desc) {
  if (!PyDict_Check(desc.ptr())) throw cuarrow::invalid_argument("__cuda_array_interface__ must be a dict");
  nb::dict d = nb::borrow<nb::dict>(desc);
  cuarrow::cuda_array_interface c;
  if (d.contains("version")) c.version = cai_int(d["version"], "version");
  if (!d.contains("data") || !d.contains("shape") || !d.contains("typestr")) {
    throw cuarrow::invalid_argument("__cuda_array_interface__ needs data, shape and typestr");
  }
  nb::handle data = d["data"];
  if (!PyTuple_Check(data.ptr()) || PyTuple_Size(data.ptr()) != 2) {
    throw cuarrow::invalid_argument("__cuda_array_interface__: data must be a tuple (pointer, read_only)");
  }
  nb::handle ptr = PyTuple_GetItem(data.ptr(), 0);
  if (!PyLong_Check(ptr.ptr()))
    throw cuarrow::invalid_argument("__cuda_array_interface__: the data pointer must be an int");
  const unsigned long long address = PyLong_AsUnsignedLongLong(ptr.ptr());
  if (address == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw cuarrow::invalid_argument("__cuda_array_interface__: the data pointer is not an address");
  }
  c.data = static_cast<std::uintptr_t>(address);
  c.read_only = PyObject_IsTrue(PyTuple_GetItem(data.ptr(), 1)) == 1;
  nb::handle typestr = d["typestr"];
  if (!PyUnicode_Check(typestr.ptr()))
    throw cuarrow::invalid_argument("__cuda_array_interface__: typestr must be a str");
  c.typestr = nb::cast<std::string>(typestr);
  c.shape = cai_ints(d["shape"], "shape");
  if (d.contains("strides") && !d["strides"].is_none()) c.strides = cai_ints(d["strides"], "strides");
  c.has_mask = d.contains("mask") && !d["mask"].is_none();
  if (d.contains("stream") && !d["stream"].is_none()) c.stream = cai_int(d["stream"], "stream");
  return c;
}

// The checked description of a CAI dictionary (no device: a CAI does not
// say; from_cai locates the memory).
nb::dict read_cai(nb::handle desc) {
  nb::dict out = info_dict(cuarrow::read_cuda_array_interface(cai_of(desc)));
  out["device"] = nb::none();
  return out;
}

// A view of the memory a CAI dictionary describes (cuarrow::wrap_cuda_array_interface).
cuarrow::buffer import_cai(nb::handle desc, std::optional<cuarrow::context> ctx, nb::handle owner,
                           std::optional<cuarrow::stream_view> stream) {
  const cuarrow::cuda_array_interface c = cai_of(desc);
  auto keep = python_owner(owner);
  nb::gil_scoped_release r;
  return cuarrow::wrap_cuda_array_interface(c, std::move(keep), ctx, stream);
}

}  // namespace

void bind_dlpack(nb::module_& m) {
  m.def("to_dlpack_typed", &export_dlpack_typed, nb::arg("buffer"), nb::arg("byte_offset"), nb::arg("code"),
        nb::arg("bits"), nb::arg("shape"), nb::arg("versioned") = true, nb::arg("copied") = false);
  m.def("dlpack_info", &dlpack_info, nb::arg("capsule"));
  m.def("read_cai", &read_cai, nb::arg("desc"));
  m.def("from_cai", &import_cai, nb::arg("desc"), nb::arg("context").none(), nb::arg("owner").none(),
        nb::arg("stream").none() = nb::none());
  m.def("from_dlpack", &import_dlpack, nb::arg("capsule"), nb::arg("context"));
}

}  // namespace cuarrow_py
