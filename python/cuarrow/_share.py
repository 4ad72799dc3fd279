"""Sending device objects elsewhere: pickling (a host copy) and Dask's
serialization families.

Pickle: a DeviceArray, DeviceChunkedArray, DeviceRecordBatch, DeviceTable or
CudaBuffer pickles as a host copy of its data (packed on the device into one
Arrow IPC stream, then one device-to-host copy at the link's speed), which
with pickle protocol 5 travels as one out-of-band buffer (no further copy);
unpickling copies it to the same device number when the process has it,
else to device 0, and reads it there zero-copy.  The pickle holds
no device pointer and is safe to send anywhere.  The reducers are
registered with ``copyreg`` when ``cuarrow.cuda`` is imported (it is
imported by any use of the device objects' constructors).

Dask (``distributed``): the same classes are registered with its
serialization when ``distributed.protocol`` is imported, before or after
cuarrow (an import hook waits for it; cuarrow never imports distributed):

* the ``dask`` family (TCP and other host comms): a header and one host
  frame, the pickle's bytes above;
* the ``cuda`` family (UCX): the object packed into ONE device buffer (an
  Arrow IPC stream assembled on the device, or the CudaBuffer itself)
  exposing ``__cuda_array_interface__``; the receiver reads the stream
  zero-copy over whatever device frame the comm delivers (a CudaBuffer, an
  ``rmm.DeviceBuffer``, a CuPy array ...), which the result keeps alive.
"""

from __future__ import annotations

import copyreg
import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import ipc
from cuarrow._arrays import DeviceArray, DeviceChunkedArray, DeviceRecordBatch, DeviceTable
from cuarrow._memory import Context, CudaBuffer

_KINDS: dict[type, str] = {
    DeviceArray: "array",
    DeviceChunkedArray: "chunked_array",
    DeviceRecordBatch: "record_batch",
    DeviceTable: "table",
}


def _context_for(device_id: int) -> Context:
    """The device an unpickled object goes to: its own number when this
    process has that device, else device 0."""
    n = _lib.device_count()
    return Context(device_id if 0 <= device_id < n else 0)


# ---- packing: one device buffer ------------------------------------------------------------
#
# A typed object travels as an Arrow IPC stream (its schema, then its
# batches) assembled in ONE device allocation by cuarrow's writer (batched
# device-to-device copies), so every Arrow type keeps its exact type (the
# pyarrow pickle of a map type drops keys_sorted, for one) and the receiver
# reads it zero-copy.  A CudaBuffer travels as itself.


def _as_batches(obj: Any) -> tuple[pa.Schema, list[DeviceRecordBatch]]:
    """The record batches an object travels as."""
    if isinstance(obj, DeviceTable):
        return obj.schema, obj.to_batches()
    if isinstance(obj, DeviceRecordBatch):
        return obj.schema, [obj]
    if isinstance(obj, DeviceArray):
        batch = DeviceRecordBatch.from_arrays([obj], names=["values"])
        return batch.schema, [batch]
    table = DeviceTable.from_arrays([obj], names=["values"])
    return table.schema, table.to_batches()


def _pack(obj: Any) -> tuple[str, int, CudaBuffer]:
    """(kind, device number, the device bytes) of a device object."""
    if isinstance(obj, CudaBuffer):
        return "buffer", obj.context.device_number, obj
    schema, batches = _as_batches(obj)
    w = ipc.new_stream(obj.context, schema)
    for b in batches:
        w.write_batch(b)
    return _KINDS[type(obj)], obj.device_id, w.close()


def _unpack(kind: str, buf: CudaBuffer) -> Any:
    """The object `_pack` packed into `buf` (zero-copy over it)."""
    if kind == "buffer":
        return buf
    if kind not in _KINDS.values():
        raise ValueError(f"not a cuarrow device object: kind {kind!r}")
    table = ipc.open_stream(buf).read_all()
    if kind == "table":
        return table
    if kind == "record_batch":
        return table.to_batches()[0]
    column = table.column(0)
    return column if kind == "chunked_array" else column.chunk(0)


# ---- pickle: a host copy ---------------------------------------------------------------


def _rebuild(kind: str, device_id: int, host: Any) -> Any:
    """Unpickles a device object: its bytes copied to the device, read there."""
    return _unpack(kind, _context_for(device_id).buffer_from_data(host))


def _reduce(obj: Any) -> Any:
    kind, device_id, buf = _pack(obj)
    # pyarrow.Buffer pickles its bytes out of band with protocol 5.
    return _rebuild, (kind, device_id, buf.copy_to_host())


for _cls in (*_KINDS, CudaBuffer):
    copyreg.pickle(_cls, _reduce)


# ---- Dask ------------------------------------------------------------------------------


def _host_serialize(obj: Any) -> tuple[dict, list]:
    kind, device_id, buf = _pack(obj)
    return {"cuarrow": kind, "device": device_id}, [memoryview(buf.copy_to_host())]


def _host_deserialize(header: dict, frames: list) -> Any:
    if len(frames) != 1:
        raise ValueError(f"a cuarrow device object travels as one frame, got {len(frames)}")
    return _rebuild(header.get("cuarrow", ""), int(header.get("device", 0)), frames[0])


def _device_serialize(obj: Any) -> tuple[dict, list]:
    kind, device_id, buf = _pack(obj)
    return {"cuarrow": kind, "device": device_id}, [buf]


def _device_frame(frame: Any, device_id: int) -> CudaBuffer:
    """A CudaBuffer over the frame a comm delivered: device memory viewed
    zero-copy (kept alive), host bytes copied to the device."""
    if isinstance(frame, CudaBuffer):
        return frame
    ctx = _context_for(device_id)
    if hasattr(frame, "__cuda_array_interface__") or hasattr(frame, "__dlpack__"):
        return ctx.buffer_from_object(frame)
    return ctx.buffer_from_data(frame)


def _device_deserialize(header: dict, frames: list) -> Any:
    if len(frames) != 1:
        raise ValueError(f"a cuarrow device object travels as one frame, got {len(frames)}")
    device_id = int(header.get("device", 0))
    return _unpack(header.get("cuarrow", ""), _device_frame(frames[0], device_id))


_registered = False
_lock = threading.Lock()


def register_dask_serializers() -> None:
    """Registers the device objects with distributed's serialization
    (idempotent).  Called when ``distributed.protocol`` is imported; call
    it yourself only if that import happened in a way the hook missed."""
    global _registered
    with _lock:
        if _registered:
            return
        from distributed.protocol import cuda_deserialize, cuda_serialize, dask_deserialize, dask_serialize

        for cls in (*_KINDS, CudaBuffer):
            dask_serialize.register(cls)(_host_serialize)
            dask_deserialize.register(cls)(_host_deserialize)
            cuda_serialize.register(cls)(_device_serialize)
            cuda_deserialize.register(cls)(_device_deserialize)
        _registered = True


class _AfterDistributedProtocol(importlib.abc.MetaPathFinder):
    """Runs register_dask_serializers once ``distributed.protocol`` has been
    imported: finds the module's spec with the other finders and wraps its
    loader's exec_module.  Removes itself when done."""

    target = "distributed.protocol"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _remove_hook()
            register_dask_serializers()

        loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


_hook = _AfterDistributedProtocol()


def _remove_hook() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


if "distributed.protocol" in sys.modules:
    register_dask_serializers()
else:
    sys.meta_path.insert(0, _hook)
