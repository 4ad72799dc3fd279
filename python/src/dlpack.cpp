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
#include <nanobind/stl/pair.h>
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

// An entry of a CAI dictionary converted to T (ints: Python's and those
// with __index__, e.g. NumPy's), or a ValueError saying what it is not.
template <class T>
T cai_entry(nb::handle value, const char* what, const char* is_not) {
  T out{};
  if (!nb::try_cast(value, out)) {
    throw cuarrow::invalid_argument(std::string("__cuda_array_interface__: ") + what + " is not " + is_not + ": " +
                                    nb::repr(value).c_str());
  }
  return out;
}

// The fields of a __cuda_array_interface__ dictionary, converted; the core
// checks them (read_cuda_array_interface).  Absent optional entries and
// None are the spec's defaults.
cuarrow::cuda_array_interface cai_of(nb::handle desc) {
  if (!PyDict_Check(desc.ptr())) throw cuarrow::invalid_argument("__cuda_array_interface__ must be a dict");
  nb::dict d = nb::borrow<nb::dict>(desc);
  if (!d.contains("data") || !d.contains("shape") || !d.contains("typestr")) {
    throw cuarrow::invalid_argument("__cuda_array_interface__ needs data, shape and typestr");
  }
  auto given = [&](const char* key) { return d.contains(key) && !d[key].is_none(); };
  constexpr const char* kInt = "an int that fits 64 bits";
  constexpr const char* kInts = "a tuple of ints that fit 64 bits";
  cuarrow::cuda_array_interface c;
  if (given("version")) c.version = cai_entry<std::int64_t>(d["version"], "version", kInt);
  const auto data = cai_entry<std::pair<nb::object, nb::object>>(d["data"], "data", "a tuple (pointer, read_only)");
  c.data = cai_entry<std::uintptr_t>(data.first, "the data pointer", "an address (an int, 0 <= pointer < 2**64)");
  c.read_only = PyObject_IsTrue(data.second.ptr()) == 1;
  c.typestr = cai_entry<std::string>(d["typestr"], "typestr", "a str");
  c.shape = cai_entry<std::vector<std::int64_t>>(d["shape"], "shape", kInts);
  if (given("strides")) c.strides = cai_entry<std::vector<std::int64_t>>(d["strides"], "strides", kInts);
  c.has_mask = given("mask");
  if (given("stream")) c.stream = cai_entry<std::int64_t>(d["stream"], "stream", kInt);
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
