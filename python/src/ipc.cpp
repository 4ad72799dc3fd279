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
      .def_prop_ro(
          "memory",
          [](const cuarrow::ipc_memory_handle& h) {
            return h.kind() == cuarrow::ipc_handle_kind::pool ? "pool" : "legacy";
          },
          "\"legacy\" (cuMemAlloc memory) or \"pool\" (memory of a shareable pool: opened through the pool).")
      .def_prop_ro("pool_id", &cuarrow::ipc_memory_handle::pool_id)
      .def(
          "serialize", [](const cuarrow::ipc_memory_handle& h) { return bytes_of(h.serialize()); },
          "The handle as bytes (cuarrow's wire format: version 1 for legacy handles, 2 for pool handles).")
      .def("describe", &cuarrow::ipc_memory_handle::describe)
      .def_static(
          "deserialize", [](nb::bytes data) { return cuarrow::ipc_memory_handle::deserialize(span_of(data)); },
          nb::arg("data"), "Read serialize()'s bytes or pyarrow.cuda's format (72 bytes, 8 for an empty buffer).");

  m.def(
      "export_ipc", [](const Buffer& b) { return cuarrow::export_ipc(b.buf); }, nb::arg("buffer"), release_gil(),
      "An IPC handle of device memory (cuMemAlloc memory, or a shareable pool's) for other processes.");
  m.def(
      "export_ipc_pool",
      [](const cuarrow::ipc_memory_handle& h) {
        cuarrow::shareable_pool p = released([&] { return cuarrow::export_pool(h); });
        return pool_descriptor(p);
      },
      nb::arg("handle"),
      "(a new descriptor of the pool of a pool handle this process exported, owned by the caller; the pool's id).");
  m.def(
      "open_ipc_pool",
      [](const cuarrow::imported_pool& pool, const cuarrow::ipc_memory_handle& h) {
        return Buffer{cuarrow::open_ipc(pool, h), false};
      },
      nb::arg("pool"), nb::arg("handle"), release_gil(),
      "Open a pool handle another process exported, through its pool imported here (an ImportedPool).");
  m.def(
      "open_ipc",
      [](const cuarrow::context& ctx, const cuarrow::ipc_memory_handle& h) {
        return Buffer{cuarrow::open_ipc(ctx, h), false};
      },
      nb::arg("context"), nb::arg("handle"), release_gil(),
      "Open a handle another process exported, as device memory of `context`'s device.");
}

}  // namespace cuarrow_py
