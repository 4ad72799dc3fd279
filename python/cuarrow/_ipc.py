"""CUDA IPC memory handles: device memory shared between processes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cuarrow import _cuarrow as _lib


class IpcMemHandle:
    """A CUDA IPC handle of device memory, made by ``CudaBuffer.export_for_ipc``
    or read by ``IpcMemHandle.from_buffer``.

    It names the allocation (the driver's handle), the buffer's ``offset`` in
    it, its ``size`` and the exporter's ``device_number``.  A handle made by
    ``export_for_ipc`` keeps the exported memory allocated while it lives; one
    read from bytes keeps nothing alive.  Pickling sends the serialized bytes.
    """

    __slots__ = ("_handle", "__weakref__")

    _handle: _lib.IpcMemoryHandle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Do not call IpcMemHandle's constructor directly, use `CudaBuffer.export_for_ipc` or "
            "`IpcMemHandle.from_buffer` instead."
        )

    @classmethod
    def _wrap(cls, raw: Any) -> IpcMemHandle:
        obj = object.__new__(cls)
        obj._handle = raw
        return obj

    @staticmethod
    def from_buffer(opaque_handle: Any) -> IpcMemHandle:
        """Read a serialized handle from host bytes (a ``pyarrow.Buffer``,
        ``bytes`` or any buffer-protocol object): cuarrow's format
        (``serialize()``) or pyarrow.cuda's (72 bytes, 8 for an empty buffer;
        offset 0).  Malformed bytes raise ``ArrowInvalid`` saying what is
        wrong; only the given bytes are read."""
        try:
            with memoryview(opaque_handle) as view:
                data = view.tobytes()
        except TypeError:
            raise TypeError(
                "IpcMemHandle.from_buffer needs the serialized handle as bytes-like host memory (pyarrow.Buffer, "
                f"bytes, bytearray ...), not {type(opaque_handle).__name__}"
            ) from None
        except BufferError:
            if not isinstance(opaque_handle, _lib.Buffer):
                raise
            # A CudaBuffer: device memory never exports the buffer protocol.
            raise TypeError(
                "IpcMemHandle.from_buffer needs the serialized handle in host memory, but this CudaBuffer is device "
                "memory; copy it to the host first (copy_to_host())"
            ) from None
        return IpcMemHandle._wrap(_lib.IpcMemoryHandle.deserialize(data))

    def serialize(self, pool: pa.MemoryPool | None = None) -> pa.Buffer:
        """The handle as a ``pyarrow.Buffer`` of host bytes (from `pool` if
        given), to send to another process."""
        data = self._handle.serialize()
        if pool is None:
            return pa.py_buffer(data)
        out = pa.allocate_buffer(len(data), memory_pool=pool)
        with memoryview(out) as view, view.cast("B") as target:
            target[:] = data
        return out

    @property
    def size(self) -> int:
        """Size of the exported buffer in bytes."""
        return self._handle.size

    @property
    def offset(self) -> int:
        """Offset of the exported buffer in its allocation (0 for pyarrow-format handles)."""
        return self._handle.offset

    @property
    def device_number(self) -> int:
        """The exporter's device; -1 when unknown (pyarrow-format handles)."""
        return self._handle.device_id

    def __reduce__(self) -> Any:
        return (_ipc_handle_from_bytes, (self._handle.serialize(),))

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.IpcMemHandle size={self.size} offset={self.offset} device_number={self.device_number}>"


def _ipc_handle_from_bytes(data: bytes) -> IpcMemHandle:
    """Unpickles an IpcMemHandle."""
    return IpcMemHandle.from_buffer(data)
