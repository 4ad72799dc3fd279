// Shared pieces of the cuarrow Python extension (cuarrow._cuarrow).
//
// The extension is a thin layer over the C++ library: it converts arguments,
// releases the GIL around anything that can block (driver calls, copies,
// synchronization) and translates cuarrow's exceptions in one place
// (errors.cpp).  Everything pyarrow-shaped (argument names, defaults, the
// exact error messages pyarrow users match on) lives in the pure-Python
// facade (cuarrow/cuda.py and its private modules), except the argument
// range checks, which are the core's (cuarrow::ranges, with pyarrow's
// messages and exception: argument_out_of_range, a ValueError).
//
// Locking: the GIL is always the outermost lock.  Code here never takes the
// GIL while holding a cuarrow lock; the only place the GIL is taken from C++
// without Python calling us is python_owner()'s release (and the DLPack
// deleters), which run when the last cuarrow::buffer handle of foreign
// memory goes away, outside cuarrow's locks.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cuarrow/cuarrow.hpp>

namespace nb = nanobind;

namespace cuarrow_py {

/// The object behind cuarrow._cuarrow.Buffer: a buffer handle, and whether
/// this Python object exports the buffer protocol.  Only host-accessible
/// memory can ever be exported, and only by objects made for it (HostBuffer,
/// host copies); a CudaBuffer never exports it, whatever memory it views.
struct Buffer {
  cuarrow::buffer buf;
  bool host_view = false;
};

/// The stream a Python stream argument names: None (the legacy default
/// stream), a cuarrow Stream (its view, device known), an object with
/// __cuda_stream__ (a method or an attribute giving (version, handle): CuPy,
/// PyTorch, numba-cuda, cuda.core), an int (not a bool) CUstream handle, an
/// object with .cuda_stream (older PyTorch) or __int__ (numba-cuda; not a
/// float).  Throws nb::type_error saying what a stream argument may be.
cuarrow::stream_view stream_of(nb::handle obj);

/// An owner that keeps a Python object alive for as long as a C++ buffer
/// (and every copy of its handle: slices, DLPack exports, pending copies)
/// uses its memory.  Releasing it takes the GIL; after interpreter shutdown
/// has begun the reference is leaked instead.  Null for None.
std::shared_ptr<const void> python_owner(nb::handle obj);

/// Takes the GIL for cleanup work that may run on any thread; false (and
/// nothing taken) once the interpreter is finalizing.
class cleanup_gil {
 public:
  cleanup_gil() noexcept;
  ~cleanup_gil();
  cleanup_gil(const cleanup_gil&) = delete;
  cleanup_gil& operator=(const cleanup_gil&) = delete;
  explicit operator bool() const noexcept { return held_; }

 private:
  bool held_ = false;
  PyGILState_STATE state_{};
};

using release_gil = nb::call_guard<nb::gil_scoped_release>;

/// fn() with the GIL released: for a call that can block, whose result (a
/// C++ value) is converted afterwards, with the GIL held again.
template <class F>
auto released(F&& fn) {
  nb::gil_scoped_release r;
  return fn();
}

/// A core struct's fields as a dict: fields_dict(v, "name", &T::name, ...)
/// sets d["name"] = v.name for each (name, member) pair.
template <class T>
void put_fields(nb::dict&, const T&) {}
template <class T, class M, class... Rest>
void put_fields(nb::dict& d, const T& v, const char* name, M T::*member, Rest... rest) {
  d[name] = v.*member;
  put_fields(d, v, rest...);
}
template <class T, class... Fields>
nb::dict fields_dict(const T& v, Fields... fields) {
  nb::dict d;
  put_fields(d, v, fields...);
  return d;
}

/// The reverse, for options given by name: v.name = options["name"] for
/// each pair (TypeError for a missing name or a value of another type).
template <class T>
void take_fields(T&, const nb::dict&) {}
template <class T, class M, class... Rest>
void take_fields(T& v, const nb::dict& options, const char* name, M T::*member, Rest... rest) {
  if (!options.contains(name) || !nb::try_cast(options[name], v.*member)) {
    throw nb::type_error((std::string(name) + ": missing, or not of the option's type").c_str());
  }
  take_fields(v, options, rest...);
}

/// Host bytes as Python bytes, and Python bytes as a span of bytes.
inline nb::bytes bytes_of(const std::vector<std::byte>& v) {
  return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}
inline std::span<const std::byte> span_of(const nb::bytes& b) {
  return {reinterpret_cast<const std::byte*>(b.c_str()), b.size()};
}

/// (a new descriptor of the pool, now the caller's; the pool's id).
inline nb::tuple pool_descriptor(cuarrow::shareable_pool& p) {
  const std::uint64_t id = p.pool_id();
  return nb::make_tuple(p.release(), id);
}

void bind_errors(nb::module_& m);
void bind_context(nb::module_& m);
void bind_buffer(nb::module_& m);
void bind_dlpack(nb::module_& m);
void bind_arrow(nb::module_& m);
void bind_ipc(nb::module_& m);
void bind_ipc_format(nb::module_& m);

}  // namespace cuarrow_py

NAMESPACE_BEGIN(NB_NAMESPACE)
NAMESPACE_BEGIN(detail)

/// Binding functions take stream arguments as cuarrow::stream_view.  The
/// caster accepts every object and converts it (stream_of) when the function
/// is called, with the GIL held: a bad stream raises stream_of's TypeError,
/// which says what a stream may be, rather than nanobind's "incompatible
/// function arguments" (from_python cannot raise an error of its own).
template <>
struct type_caster<cuarrow::stream_view> {
  static constexpr auto Name = const_name("object");
  template <typename T>
  using Cast = cuarrow::stream_view;
  template <typename T>
  static constexpr bool can_cast() {
    return true;
  }
  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    src_ = src;
    return true;
  }
  explicit operator cuarrow::stream_view() { return cuarrow_py::stream_of(src_); }

 private:
  handle src_;
};

/// Binding functions take and return memory as cuarrow::buffer: in, the
/// handle of a Buffer; out, a new Buffer that does not export the buffer
/// protocol (a function whose result may returns a Buffer).
template <>
struct type_caster<cuarrow::buffer> {
  NB_TYPE_CASTER(cuarrow::buffer, make_caster<cuarrow_py::Buffer>::Name)
  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    make_caster<cuarrow_py::Buffer> b;
    if (!b.from_python(src, flags, cleanup)) return false;
    value = b.operator cuarrow_py::Buffer&().buf;
    return true;
  }
  static handle from_cpp(const cuarrow::buffer& b, rv_policy, cleanup_list* cleanup) noexcept {
    return make_caster<cuarrow_py::Buffer>::from_cpp(cuarrow_py::Buffer{b, false}, rv_policy::move, cleanup);
  }
};

/// A placement crosses as a (device type code, device id) tuple.
template <>
struct type_caster<cuarrow::arrow::placement> {
  NB_TYPE_CASTER(cuarrow::arrow::placement, const_name("tuple[int, int]"))
  bool from_python(handle src, uint32_t flags, cleanup_list* cleanup) noexcept {
    make_caster<std::pair<int, int>> pair;
    if (!pair.from_python(src, flags, cleanup)) return false;
    const auto [type, id] = pair.operator cast_t<std::pair<int, int>>();
    value = cuarrow::arrow::placement::of(static_cast<cuarrow::device_type>(type), id);
    return true;
  }
  static handle from_cpp(const cuarrow::arrow::placement& p, rv_policy, cleanup_list*) noexcept {
    return Py_BuildValue("(ii)", static_cast<int>(p.type), p.device_id);
  }
};

NAMESPACE_END(detail)
NAMESPACE_END(NB_NAMESPACE)
