// cuarrow._cuarrow.Buffer, allocation, wrapping and copies.
//
// Host memory that Python objects expose (bytes, NumPy arrays, pyarrow
// buffers ...) is reached only through the buffer protocol, held for the
// whole copy: the copy runs with the GIL released and the exporter cannot
// free or resize the memory meanwhile.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common.hpp"

namespace cuarrow_py {
namespace {

// A buffer-protocol view of a Python object, released (with the GIL held)
// when this goes out of scope.
class host_view {
 public:
  host_view(nb::handle obj, bool writable) {
    const int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    // Keep the exporter's own error (e.g. the CudaBuffer's "use copy_to_host()").
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw nb::python_error();
    held_ = true;
  }
  ~host_view() {
    if (held_) PyBuffer_Release(&view_);
  }
  host_view(const host_view&) = delete;
  host_view& operator=(const host_view&) = delete;

  void* data() const { return view_.buf; }
  std::int64_t size() const { return static_cast<std::int64_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// The memory of a host view as a buffer: the core checks ranges in it.
cuarrow::buffer host_range(const host_view& v, std::int64_t offset, std::int64_t size) {
  return cuarrow::wrap_host(v.data(), v.size(), nullptr).slice(offset, size);
}

// ---- buffer protocol --------------------------------------------------------

char empty_bytes[1] = {0};

int buffer_getbuffer(PyObject* self, Py_buffer* view, int flags) noexcept {
  view->obj = nullptr;
  if (!nb::inst_ready(self)) {
    PyErr_SetString(PyExc_BufferError, "uninitialized cuarrow buffer");
    return -1;
  }
  const Buffer* b = nb::inst_ptr<Buffer>(self);
  if (!b->host_view || !b->buf.is_host_accessible()) {
    const std::string message =
        "buffer protocol for device buffer not supported: this buffer is in " + b->buf.location() +
        " memory, which host code cannot read; use copy_to_host() (or to_pybytes()) to get a host copy";
    PyErr_SetString(PyExc_BufferError, message.c_str());
    return -1;
  }
  const bool readonly = !b->buf.is_mutable();
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && readonly) {
    PyErr_SetString(PyExc_BufferError, "this buffer is read-only");
    return -1;
  }
  void* data = b->buf.size() == 0 ? static_cast<void*>(empty_bytes) : reinterpret_cast<void*>(b->buf.address());
  return PyBuffer_FillInfo(view, self, data, static_cast<Py_ssize_t>(b->buf.size()), readonly ? 1 : 0, flags);
}

void buffer_releasebuffer(PyObject*, Py_buffer*) noexcept {}

PyType_Slot buffer_slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(buffer_getbuffer)},
                              {Py_bf_releasebuffer, reinterpret_cast<void*>(buffer_releasebuffer)},
                              {0, nullptr}};

}  // namespace

// ---- owners of Python objects ---------------------------------------------------

namespace {

// Whether the interpreter is shutting down.  Py_IsFinalizing is public from
// Python 3.13 (3.12 has it as _Py_IsFinalizing); the stable-ABI build
// (cp312-abi3, Py_LIMITED_API) sees neither, so it asks the running
// interpreter for whichever it exports.
bool interpreter_finalizing() noexcept {
#if defined(Py_LIMITED_API) && Py_LIMITED_API < 0x030D0000
  using fn = int (*)();
  static const fn is_finalizing = [] {
    void* f = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    if (f == nullptr) f = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    return reinterpret_cast<fn>(f);
  }();
  return is_finalizing != nullptr && is_finalizing() != 0;
#elif PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

cleanup_gil::cleanup_gil() noexcept {
  const bool finalizing = interpreter_finalizing();
  if (Py_IsInitialized() && !finalizing) {
    state_ = PyGILState_Ensure();
    held_ = true;
  }
}

cleanup_gil::~cleanup_gil() {
  if (held_) PyGILState_Release(state_);
}

std::shared_ptr<const void> python_owner(nb::handle obj) {
  if (!obj.is_valid() || obj.is_none()) return nullptr;
  obj.inc_ref();
  return std::shared_ptr<const void>(obj.ptr(), [](const void* p) {
    cleanup_gil gil;
    if (gil) Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
  });
}

void bind_buffer(nb::module_& m) {
  nb::class_<Buffer>(m, "Buffer", nb::type_slots(buffer_slots), nb::is_weak_referenceable(),
                     "A handle to memory that knows where it lives (cuarrow::buffer).  Exports the buffer "
                     "protocol only when made for host memory.")
      .def(
          "__init__",
          [](Buffer* self, const Buffer& other, bool host_view) {
            new (self) Buffer{other.buf, host_view};
          },
          nb::arg("other"), nb::arg("host_view") = false)
      .def_prop_ro("address", [](const Buffer& b) { return b.buf.address(); })
      .def_prop_ro("size", [](const Buffer& b) { return b.buf.size(); })
      .def_prop_ro("raw_device_type", [](const Buffer& b) { return static_cast<int>(b.buf.type()); })
      .def_prop_ro("device_id", [](const Buffer& b) { return b.buf.device_id(); })
      .def_prop_ro("is_mutable", [](const Buffer& b) { return b.buf.is_mutable(); })
      .def_prop_ro("raw_context", [](const Buffer& b) { return b.buf.get_context(); })
      .def("describe", [](const Buffer& b) { return b.buf.describe(); })
      .def(
          "raw_slice",
          [](const Buffer& b, std::int64_t offset, std::int64_t length, bool host_view) {
            return Buffer{b.buf.slice(offset, length), host_view};
          },
          nb::arg("offset"), nb::arg("length"), nb::arg("host_view") = false);

  // ---- allocation and wrapping ---------------------------------------------
  m.def(
      "allocate_device",
      [](const cuarrow::context& ctx, std::int64_t size, cuarrow::stream_view stream, bool plain) {
        auto resource = plain ? cuarrow::plain_device_resource::shared() : nullptr;
        return cuarrow::allocate_device(ctx, size, stream, std::move(resource));
      },
      nb::arg("context"), nb::arg("size"), nb::arg("stream") = nb::none(), nb::arg("plain") = false, release_gil());
  m.def(
      "buffer_from_host",
      [](const cuarrow::context& ctx, nb::handle src) {
        host_view v(src, false);
        const void* data = v.data();
        const std::int64_t n = v.size();
        nb::gil_scoped_release r;
        return cuarrow::copy_to_device(ctx, data, n);
      },
      nb::arg("context"), nb::arg("src"));
  m.def(
      "copy_into_host",
      [](nb::handle dst, const cuarrow::buffer& src) {
        host_view v(dst, true);
        void* data = v.data();
        const std::int64_t n = cuarrow::ranges::read_count(src.size(), 0, -1, v.size());  // as much as fits
        nb::gil_scoped_release r;
        cuarrow::copy_to_host(data, src, 0, n);
      },
      nb::arg("dst"), nb::arg("src"));
  m.def(
      "allocate_pinned",
      [](const cuarrow::context& ctx, std::int64_t size) {
        return Buffer{cuarrow::allocate_pinned(ctx, size), true};
      },
      nb::arg("context"), nb::arg("size"), release_gil());
  m.def(
      "wrap_device",
      [](const cuarrow::context& ctx, std::uintptr_t address, std::int64_t size, nb::handle owner, bool is_mutable) {
        auto keep = python_owner(owner);
        nb::gil_scoped_release r;
        return cuarrow::wrap_device(ctx, address, size, std::move(keep), is_mutable);
      },
      nb::arg("context"), nb::arg("address"), nb::arg("size"), nb::arg("owner").none(), nb::arg("is_mutable") = true);

  // ---- pyarrow.cuda's argument ranges (cuarrow::ranges) ----------------------
  m.def("read_count", &cuarrow::ranges::read_count, nb::arg("size"), nb::arg("position"), nb::arg("nbytes"),
        nb::arg("dst_size") = -1);
  m.def("write_count", &cuarrow::ranges::write_count, nb::arg("size"), nb::arg("position"), nb::arg("nbytes"),
        nb::arg("src_size"), nb::arg("src_is_host"));
  m.def("source_count", &cuarrow::ranges::source_count, nb::arg("src_size"), nb::arg("offset"), nb::arg("size"));
  m.def("slice_length", &cuarrow::ranges::slice_length, nb::arg("size"), nb::arg("offset"), nb::arg("length").none());

  // ---- copies ---------------------------------------------------------------
  m.def("copy", &cuarrow::copy, nb::arg("dst"), nb::arg("dst_offset"), nb::arg("src"), nb::arg("src_offset"),
        nb::arg("size"), nb::arg("stream") = nb::none(), release_gil());
  m.def(
      "copy_from_host",
      [](const cuarrow::buffer& dst, std::int64_t dst_offset, nb::handle src, std::int64_t src_offset,
         std::int64_t size, cuarrow::stream_view stream) {
        host_view v(src, false);
        const auto* from = host_range(v, src_offset, size).host_data();
        nb::gil_scoped_release r;
        cuarrow::copy_from_host(dst, dst_offset, from, size, stream);
      },
      nb::arg("dst"), nb::arg("dst_offset"), nb::arg("src"), nb::arg("src_offset"), nb::arg("size"),
      nb::arg("stream") = nb::none());
  m.def(
      "copy_to_host",
      [](nb::handle dst, std::int64_t dst_offset, const cuarrow::buffer& src, std::int64_t src_offset,
         std::int64_t size, cuarrow::stream_view stream) {
        host_view v(dst, true);
        auto* to = host_range(v, dst_offset, size).mutable_host_data();
        nb::gil_scoped_release r;
        cuarrow::copy_to_host(to, src, src_offset, size, stream);
      },
      nb::arg("dst"), nb::arg("dst_offset"), nb::arg("src"), nb::arg("src_offset"), nb::arg("size"),
      nb::arg("stream") = nb::none());
  m.def(
      "copy_to_new_host",
      [](const cuarrow::buffer& src, std::int64_t src_offset, std::int64_t size, cuarrow::stream_view stream) {
        cuarrow::buffer part = src.slice(src_offset, size);
        return Buffer{released([&] { return cuarrow::copy_to_new_host(part, stream); }), true};
      },
      nb::arg("src"), nb::arg("src_offset"), nb::arg("size"), nb::arg("stream") = nb::none());
  m.def("fill", &cuarrow::fill, nb::arg("dst"), nb::arg("offset"), nb::arg("size"), nb::arg("value"),
        nb::arg("stream") = nb::none(), release_gil());
}

}  // namespace cuarrow_py
