// Driver selection, devices, contexts, streams and events.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <string>
#include <utility>

#include "common.hpp"

namespace cuarrow_py {
namespace {

std::uintptr_t handle_int(const void* h) { return reinterpret_cast<std::uintptr_t>(h); }

nb::dict properties_dict(const cuarrow::device_properties& p) {
  using P = cuarrow::device_properties;
  nb::dict d = fields_dict(p, "ordinal", &P::ordinal, "name", &P::name, "total_memory", &P::total_memory, "pci_bus_id",
                           &P::pci_bus_id, "memory_pools_supported", &P::memory_pools_supported, "unified_addressing",
                           &P::unified_addressing);
  d["compute_capability"] = nb::make_tuple(p.compute_capability_major, p.compute_capability_minor);
  return d;
}

// The transfer options' fields, as fields_dict's (name, member) pairs, for
// get_transfer_options and set_transfer_options.
template <class F>
auto transfer_option_fields(F&& f) {
  using O = cuarrow::transfer_options;
  return f("staging_threshold_bytes", &O::staging_threshold_bytes, "staging_chunk_bytes", &O::staging_chunk_bytes,
           "staging_threads", &O::staging_threads, "staging_threads_to_device", &O::staging_threads_to_device,
           "pinned_pool_limit_bytes", &O::pinned_pool_limit_bytes, "staging_streaming_store_limit_bytes",
           &O::staging_streaming_store_limit_bytes, "device_gather", &O::device_gather, "device_gather_max_run_bytes",
           &O::device_gather_max_run_bytes);
}

// getattr(obj, name), or nullopt when it raises AttributeError (hasattr's
// rule: any other error propagates).
std::optional<nb::object> attr_of(nb::handle obj, const char* name) {
  PyObject* v = PyObject_GetAttrString(obj.ptr(), name);
  if (v != nullptr) return nb::steal(v);
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
  PyErr_Clear();
  return std::nullopt;
}

// int(obj), raising as Python does.
nb::object to_int(nb::handle obj) {
  PyObject* i = PyNumber_Long(obj.ptr());
  if (i == nullptr) throw nb::python_error();
  return nb::steal(i);
}

// The stream of a CUstream handle int(obj), which must be an address.
cuarrow::stream_view handle_stream(nb::handle obj) {
  nb::object i = to_int(obj);
  const unsigned long long h = PyLong_AsUnsignedLongLong(i.ptr());
  if (PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    throw nb::type_error(
        ("a CUstream handle is an address (0 <= handle < 2**64), not " + std::string(nb::repr(i).c_str())).c_str());
  }
  if (h == 0) return cuarrow::stream_view();
  return cuarrow::stream_view(reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(h)));
}

// The handle of a __cuda_stream__ value: a (version, handle) pair, then
// int(handle); nullopt when it is no pair or int() raises TypeError or
// ValueError.
std::optional<nb::object> protocol_handle(nb::handle value) {
  std::pair<nb::object, nb::object> version_handle;
  if (!nb::try_cast(value, version_handle)) return std::nullopt;
  try {
    return to_int(version_handle.second);
  } catch (const nb::python_error& e) {
    if (e.matches(PyExc_TypeError) || e.matches(PyExc_ValueError)) return std::nullopt;
    throw;
  }
}

// __init__ of an owning stream or event of a context, made with the GIL
// released: the driver flags `On` when the bool argument is set, else `Off`.
template <class T, unsigned On, unsigned Off>
void init_owning(T* self, const cuarrow::context& ctx, bool flag) {
  nb::gil_scoped_release r;
  new (self) T(ctx, flag ? On : Off);
}

std::string type_name_of(nb::handle obj) { return nb::cast<std::string>(obj.type().attr("__name__")); }

}  // namespace

cuarrow::stream_view stream_of(nb::handle obj) {
  if (obj.is_none()) return cuarrow::stream_view();
  if (nb::isinstance<cuarrow::stream>(obj)) return nb::cast<const cuarrow::stream&>(obj).view();
  if (std::optional<nb::object> protocol = attr_of(obj, "__cuda_stream__"); protocol && !protocol->is_none()) {
    nb::object value = PyCallable_Check(protocol->ptr()) ? (*protocol)() : *protocol;
    std::optional<nb::object> handle = protocol_handle(value);
    if (!handle) {
      throw nb::type_error(
          (type_name_of(obj) + ".__cuda_stream__ must give a (version, handle) tuple, got " + nb::repr(value).c_str())
              .c_str());
    }
    return handle_stream(*handle);
  }
  if (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr())) return handle_stream(obj);
  if (!PyBool_Check(obj.ptr())) {
    if (std::optional<nb::object> torch = attr_of(obj, "cuda_stream")) return handle_stream(*torch);
    if (attr_of(obj.type(), "__int__") && !PyFloat_Check(obj.ptr())) return handle_stream(obj);  // numba-cuda
  }
  throw nb::type_error(("stream must be a cuarrow.cuda.Stream, an object with __cuda_stream__ (CuPy, PyTorch, "
                        "numba-cuda, cuda.core streams), an integer CUstream handle or None, not " +
                        type_name_of(obj))
                           .c_str());
}

void bind_context(nb::module_& m) {
  // ---- driver -------------------------------------------------------------
  m.def("select_driver", &cuarrow::select_driver, nb::arg("path_or_emulated"));
  m.def("load_driver", &cuarrow::load_driver, release_gil());
  m.def("driver_is_emulated", &cuarrow::driver_is_emulated);
  m.def("driver_version", &cuarrow::driver_version, release_gil());
  m.def("driver_path", &cuarrow::driver_path, release_gil());
  m.def(
      "probe_real_driver",
      [] {
        const cuarrow::driver_probe p = cuarrow::probe_real_driver();
        return std::make_tuple(p.devices, p.reason);
      },
      release_gil());
  m.def("device_count", &cuarrow::device_count, release_gil());
  m.def(
      "get_device_properties",
      [](int ordinal) { return properties_dict(released([&] { return cuarrow::get_device_properties(ordinal); })); },
      nb::arg("ordinal"));
  m.def("pinned_pool_stats", [] {
    using P = cuarrow::pinned_pool_statistics;
    return fields_dict(cuarrow::pinned_pool_stats(), "pinned_bytes", &P::pinned_bytes, "in_use_bytes",
                       &P::in_use_bytes);
  });
  m.def("gds_status", [] {
    using G = cuarrow::gds_info;
    return fields_dict(released(cuarrow::gds_status), "mode", &G::mode, "loaded", &G::loaded, "usable", &G::usable,
                       "compat_mode", &G::compat_mode, "available", &G::available, "library", &G::library, "reason",
                       &G::reason);
  });
  m.def("nvcomp_status", [] {
    using N = cuarrow::nvcomp_info;
    return fields_dict(released(cuarrow::nvcomp_status), "mode", &N::mode, "available", &N::available, "version",
                       &N::version, "library", &N::library, "reason", &N::reason);
  });
  m.def("set_nvcomp_default_library", &cuarrow::set_nvcomp_default_library, nb::arg("path"));
  m.def("trim_pinned_pool", &cuarrow::trim_pinned_pool, release_gil());
  m.def("get_transfer_options", [] {
    return transfer_option_fields([](auto... f) { return fields_dict(cuarrow::get_transfer_options(), f...); });
  });
  m.def("set_transfer_options", [](const nb::kwargs& options) {
    cuarrow::transfer_options o;
    transfer_option_fields([&](auto... f) { take_fields(o, options, f...); });
    cuarrow::set_transfer_options(o);
  });

  // ---- contexts -----------------------------------------------------------
  nb::class_<cuarrow::context>(m, "Context", "A CUDA context (a device's primary context unless wrapped).")
      .def_static("get", &cuarrow::context::get, nb::arg("device_number") = 0, release_gil())
      .def_static(
          "wrap", [](std::uintptr_t handle) { return cuarrow::context::wrap(reinterpret_cast<CUcontext>(handle)); },
          nb::arg("handle"), release_gil())
      .def_prop_ro("device_number", &cuarrow::context::device_number)
      .def_prop_ro("handle", [](const cuarrow::context& c) { return handle_int(c.handle()); })
      .def_prop_ro("is_primary", &cuarrow::context::is_primary)
      .def_prop_ro("bytes_allocated", &cuarrow::context::bytes_allocated)
      .def("transfer_stats",
           [](const cuarrow::context& c) {
             using T = cuarrow::transfer_statistics;
             return fields_dict(c.transfer_stats(), "host_to_device_bytes", &T::host_to_device_bytes,
                                "device_to_host_bytes", &T::device_to_host_bytes, "device_to_device_bytes",
                                &T::device_to_device_bytes, "host_to_device_seconds", &T::host_to_device_seconds,
                                "device_to_host_seconds", &T::device_to_host_seconds, "device_to_device_seconds",
                                &T::device_to_device_seconds, "staged_bytes", &T::staged_bytes, "copies", &T::copies);
           })
      .def("reset_transfer_stats", &cuarrow::context::reset_transfer_stats)
      .def_prop_ro("properties", [](const cuarrow::context& c) { return properties_dict(c.properties()); })
      .def("synchronize", &cuarrow::context::synchronize, release_gil())
      .def("gather_status", &cuarrow::context::gather_status, release_gil())
      .def("free_memory", &cuarrow::context::free_memory, release_gil())
      .def(
          "get_device_address",
          [](const cuarrow::context& c, std::uintptr_t address) {
            return c.get_device_address(reinterpret_cast<const void*>(address));
          },
          nb::arg("address"), release_gil())
      .def(
          "memory_resource_name", [](const cuarrow::context& c) { return c.memory_resource()->name(); }, release_gil())
      .def(
          "memory_pool_stats",
          [](const cuarrow::context& c) -> std::optional<std::pair<std::int64_t, std::int64_t>> {
            const std::optional<cuarrow::pool_statistics> st = c.memory_resource()->statistics();
            if (!st) return std::nullopt;
            return std::pair{st->used_bytes, st->reserved_bytes};
          },
          release_gil())
      .def(
          "trim_memory_pool", [](const cuarrow::context& c, std::int64_t keep) { c.memory_resource()->trim(keep); },
          nb::arg("keep_bytes"), release_gil())
      .def("__eq__", [](const cuarrow::context& a, const cuarrow::context& b) { return a == b; })
      .def("__hash__", [](const cuarrow::context& c) { return std::hash<const void*>()(c.handle()); });

  // ---- streams and events -------------------------------------------------
  nb::class_<cuarrow::stream>(m, "Stream", "An owning CUDA stream on one context.")
      .def("__init__", &init_owning<cuarrow::stream, CU_STREAM_NON_BLOCKING, CU_STREAM_DEFAULT>, nb::arg("context"),
           nb::arg("non_blocking") = true)
      .def_prop_ro("handle", [](const cuarrow::stream& s) { return handle_int(s.handle()); })
      .def_prop_ro("raw_context", &cuarrow::stream::get_context)
      .def("synchronize", &cuarrow::stream::synchronize, release_gil())
      .def("query", &cuarrow::stream::query, release_gil())
      .def("wait", &cuarrow::stream::wait, nb::arg("event"), release_gil());

  nb::class_<cuarrow::event>(m, "Event", "An owning CUDA event on one context.")
      .def("__init__", &init_owning<cuarrow::event, CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING>, nb::arg("context"),
           nb::arg("timing") = false)
      .def_prop_ro("handle", [](const cuarrow::event& e) { return handle_int(e.handle()); })
      .def_prop_ro("raw_context", &cuarrow::event::get_context)
      .def("record", &cuarrow::event::record, nb::arg("stream") = nb::none(), release_gil())
      .def("query", &cuarrow::event::query, release_gil())
      .def("synchronize", &cuarrow::event::synchronize, release_gil())
      .def("elapsed_ms_since", &cuarrow::event::elapsed_ms_since, nb::arg("start"), release_gil());

  // Streams of any kind (cuarrow's, CuPy, PyTorch, Numba ... or a handle).
  m.def(
      "check_stream", [](cuarrow::stream_view) {}, nb::arg("stream").none());
  m.def(
      "stream_wait_for_default",
      [](const cuarrow::context& ctx, cuarrow::stream_view stream) {
        // Order `stream` after everything queued so far on the context's
        // legacy default stream, where cuarrow's synchronous operations
        // (allocations included) run, without blocking the host.
        stream.wait_for(cuarrow::stream_view(), ctx);
      },
      nb::arg("context"), nb::arg("stream"), release_gil());
}

}  // namespace cuarrow_py
