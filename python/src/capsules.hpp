// The PyCapsules of the Arrow C Data / C Device Data / C Stream interfaces,
// made and read in one place for the typed-data binding (arrow.cpp) and the
// IPC-format binding (ipc_format.cpp).  A capsule made here releases its
// struct in its destructor unless a consumer moved it out (release NULL).
// One given to us is checked (exact type, name, not released) before
// anything reads it; an import moves the struct out, so the capsule's
// destructor then only frees its memory.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include <cuarrow/arrow/arrow.hpp>

#include "common.hpp"

namespace cuarrow_py {

namespace ca = cuarrow::arrow;

inline constexpr const char* kSchema = "arrow_schema";
inline constexpr const char* kArray = "arrow_array";
inline constexpr const char* kDeviceArray = "arrow_device_array";
inline constexpr const char* kStream = "arrow_array_stream";
inline constexpr const char* kDeviceStream = "arrow_device_array_stream";

// ---- capsules -------------------------------------------------------------------

template <class T>
const char* capsule_name() {
  if constexpr (std::is_same_v<T, ArrowSchema>) return kSchema;
  if constexpr (std::is_same_v<T, ArrowArray>) return kArray;
  if constexpr (std::is_same_v<T, ArrowDeviceArray>) return kDeviceArray;
  if constexpr (std::is_same_v<T, ArrowArrayStream>) return kStream;
  if constexpr (std::is_same_v<T, ArrowDeviceArrayStream>) return kDeviceStream;
}

template <class T>
void capsule_destructor(PyObject* cap) noexcept {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  auto* p = static_cast<T*>(PyCapsule_GetPointer(cap, capsule_name<T>()));
  if (p != nullptr) {
    ca::c_release(*p);
    delete p;
  }
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

// A capsule owning a new, unfilled struct; fill it through `fill` (which
// may throw: the capsule then holds a released struct and is dropped).
template <class T, class Fill>
nb::object make_capsule(Fill&& fill) {
  auto owned = std::make_unique<T>();
  std::memset(static_cast<void*>(owned.get()), 0, sizeof(T));
  fill(owned.get());
  PyObject* cap = PyCapsule_New(owned.get(), capsule_name<T>(), capsule_destructor<T>);
  if (cap == nullptr) {
    ca::c_release(*owned);
    throw nb::python_error();
  }
  owned.release();
  return nb::steal(cap);
}

// The struct inside a capsule handed to us, checked: a PyCapsule, of the
// expected name, with a non-null pointer to an unreleased struct.
template <class T>
T* capsule_struct(nb::handle obj, const char* what) {
  const char* name = capsule_name<T>();
  if (!PyCapsule_CheckExact(obj.ptr())) {
    throw nb::type_error(
        (std::string(what) + " must be a PyCapsule named \"" + name + "\", not " + nb::type_name(obj.type()).c_str())
            .c_str());
  }
  const char* got = PyCapsule_GetName(obj.ptr());
  if (got == nullptr) PyErr_Clear();
  if (got == nullptr || std::strcmp(got, name) != 0) {
    throw nb::type_error((std::string(what) + " must be a PyCapsule named \"" + name + "\", got one named " +
                          (got == nullptr ? std::string("NULL") : "\"" + std::string(got) + "\""))
                             .c_str());
  }
  auto* p = static_cast<T*>(PyCapsule_GetPointer(obj.ptr(), name));
  if (p == nullptr) {
    PyErr_Clear();
    throw nb::value_error((std::string(what) + ": the \"" + name + "\" capsule holds a NULL pointer").c_str());
  }
  if (ca::c_released(*p)) {
    throw ca::invalid_data(what, std::string("the ") + name +
                                     " capsule's struct is released (release == NULL): it was already consumed; "
                                     "PyCapsules of the Arrow C interfaces can be imported once");
  }
  return p;
}

// What an "arrow_schema" capsule describes: a schema (a struct's fields and
// metadata), or a field; and a schema as a new capsule.
inline ca::schema schema_of(nb::handle cap, const char* what = "the schema capsule") {
  return ca::read_schema(*capsule_struct<ArrowSchema>(cap, what));
}
inline ca::field field_of(nb::handle cap, const char* what = "the schema capsule") {
  return ca::read_field(*capsule_struct<ArrowSchema>(cap, what));
}
inline nb::object schema_capsule(const ca::schema& s) {
  return make_capsule<ArrowSchema>([&](ArrowSchema* out) { ca::export_schema(s, out); });
}

}  // namespace cuarrow_py
