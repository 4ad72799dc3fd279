// The one place C++ exceptions become Python exceptions.
//
//   cuarrow::out_of_memory      -> cuarrow.cuda.CudaOutOfMemoryError (CudaError and MemoryError)
//   cuarrow::cuda_error         -> cuarrow.cuda.CudaError (an OSError, as pyarrow's "Cuda error ..." OSErrors)
//   cuarrow::driver_error       -> cuarrow.cuda.CudaDriverError (a CudaError without a code)
//   cuarrow::argument_out_of_range -> ValueError (pyarrow.cuda's argument ranges)
//   cuarrow::invalid_argument,
//     out_of_range, device_mismatch, read_only
//                               -> pyarrow.ArrowInvalid (a ValueError, as pyarrow's checks)
//   cuarrow::host_access_error,
//     memory_kind_error        -> TypeError
//   any other cuarrow::error    -> RuntimeError
//
// The Python classes are defined in cuarrow/_errors.py and handed over once at
// import (_set_error_types); until then the built-in bases are raised.
#include <nanobind/stl/string.h>

#include <string>

#include "common.hpp"

namespace cuarrow_py {
namespace {

struct error_types {
  PyObject* cuda_error = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* driver_error = nullptr;
  PyObject* invalid = nullptr;
};

// Never destroyed: the translator may run during interpreter shutdown.
error_types& types() {
  static auto* t = new error_types;
  return *t;
}

void set_type(PyObject*& slot, nb::handle cls) {
  Py_XINCREF(cls.ptr());
  PyObject* old = slot;  // Py_XSETREF is not in the limited API
  slot = cls.ptr();
  Py_XDECREF(old);
}

// Raise cls(message, code, name, operation), or `fallback(message)` when the
// facade has not registered its classes.
void raise_cuda(PyObject* cls, PyObject* fallback, const std::string& message, nb::object code, nb::object name,
                nb::object operation) {
  if (cls == nullptr) {
    PyErr_SetString(fallback, message.c_str());
    return;
  }
  try {
    nb::object exc = nb::handle(cls)(nb::str(message.c_str(), message.size()), code, name, operation);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (nb::python_error& e) {
    e.restore();
  }
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const cuarrow::cuda_error& e) {
    const bool oom = dynamic_cast<const cuarrow::out_of_memory*>(&e) != nullptr;
    raise_cuda(oom ? types().out_of_memory : types().cuda_error, oom ? PyExc_MemoryError : PyExc_OSError,
               "Cuda error " + std::to_string(e.code()) + ": " + e.what(), nb::int_(e.code()),
               nb::str(e.name().c_str()), nb::str(e.operation().c_str()));
  } catch (const cuarrow::driver_error& e) {
    raise_cuda(types().driver_error, PyExc_OSError, e.what(), nb::none(), nb::none(), nb::none());
  } catch (const cuarrow::argument_out_of_range& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const cuarrow::invalid_argument& e) {
    PyErr_SetString(types().invalid != nullptr ? types().invalid : PyExc_ValueError, e.what());
  } catch (const cuarrow::host_access_error& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const cuarrow::memory_kind_error& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const cuarrow::io_error& e) {
    // OSError(errno, message) is the errno's subclass (FileNotFoundError,
    // IsADirectoryError, PermissionError ...), as open() raises it.
    if (e.error_code() != 0) {
      nb::object exc = nb::handle(PyExc_OSError)(e.error_code(), nb::str(e.what()), nb::str(e.path().c_str()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } else {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  } catch (const cuarrow::error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  m.def(
      "_set_error_types",
      [](nb::handle cuda_error, nb::handle out_of_memory, nb::handle driver_error, nb::handle invalid) {
        set_type(types().cuda_error, cuda_error);
        set_type(types().out_of_memory, out_of_memory);
        set_type(types().driver_error, driver_error);
        set_type(types().invalid, invalid);
      },
      nb::arg("cuda_error"), nb::arg("out_of_memory"), nb::arg("driver_error"), nb::arg("invalid"));
}

}  // namespace cuarrow_py
