// CUDA IPC: cuarrow._cuarrow.IpcMemoryHandle, export_ipc, open_ipc, and for
// pool handles export_ipc_pool and open_ipc_pool.
// (cuarrow.cuda.IpcMemHandle, pyarrow's name and behaviour, wraps these.)
#include <nanobind/stl/string.h>

#include "common.hpp"

namespace cuarrow_py {

void bind_ipc(nb::module_& m) {
  nb::class_<cuarrow::ipc_memory_handle>(
      m, "IpcMemoryHandle",
      "A CUDA IPC handle of device memory: the driver's handle of the allocation, the buffer's offset in it, its "
      "size and the exporter's device (cuarrow::ipc_memory_handle).  One made by export_ipc keeps the exported "
      "memory alive.")
      .def_prop_ro("size", &cuarrow::ipc_memory_handle::size)
      .def_prop_ro("offset", &cuarrow::ipc_memory_handle::offset)
      .def_prop_ro("device_id", &cuarrow::ipc_memory_handle::device_id)
      .def_prop_ro("memory", [](const cuarrow::ipc_memory_handle& h) { return cuarrow::to_string(h.kind()); })
      .def_prop_ro("pool_id", &cuarrow::ipc_memory_handle::pool_id)
      .def("serialize", [](const cuarrow::ipc_memory_handle& h) { return bytes_of(h.serialize()); })
      .def("describe", &cuarrow::ipc_memory_handle::describe)
      .def_static(
          "deserialize", [](nb::bytes data) { return cuarrow::ipc_memory_handle::deserialize(span_of(data)); },
          nb::arg("data"));

  m.def("export_ipc", &cuarrow::export_ipc, nb::arg("buffer"), release_gil());
  m.def(
      "export_ipc_pool",
      [](const cuarrow::ipc_memory_handle& h) {
        cuarrow::shareable_pool p = released([&] { return cuarrow::export_pool(h); });
        return pool_descriptor(p);
      },
      nb::arg("handle"));
  m.def("open_ipc_pool",
        nb::overload_cast<const cuarrow::imported_pool&, const cuarrow::ipc_memory_handle&>(&cuarrow::open_ipc),
        nb::arg("pool"), nb::arg("handle"), release_gil());
  m.def("open_ipc", nb::overload_cast<const cuarrow::context&, const cuarrow::ipc_memory_handle&>(&cuarrow::open_ipc),
        nb::arg("context"), nb::arg("handle"), release_gil());
}

}  // namespace cuarrow_py
