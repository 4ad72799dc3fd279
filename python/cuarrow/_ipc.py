"""CUDA IPC memory handles: device memory shared between processes."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import pyarrow as pa

from cuarrow import _cuarrow as _lib


class IpcMemHandle:
    """A CUDA IPC handle of device memory, made by ``CudaBuffer.export_for_ipc``
    or read by ``IpcMemHandle.from_buffer``.

    It names the allocation (the driver's handle), the buffer's ``offset`` in
    it, its ``size`` and the exporter's ``device_number``.  A handle made by
    ``export_for_ipc`` keeps the exported memory allocated while it lives; one
    read from bytes keeps nothing alive.  Pickling sends the serialized bytes.

    ``memory`` says which CUDA IPC it is: ``"legacy"`` (``cuMemAlloc``
    memory, e.g. ``Context.new_buffer``: the bytes alone open it, as in
    pyarrow) or ``"pool"`` (memory of cuarrow's default resource, the
    device's IPC-capable pool: the importer also needs the pool,
    ``pool_fd()`` sent once per process, and ``pool_id``).
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

    @property
    def memory(self) -> str:
        """``"legacy"`` (``cuMemAlloc`` memory) or ``"pool"`` (memory of a
        shareable pool, opened with ``Context.open_ipc_buffer(handle,
        pool=(fd, pool_id))``)."""
        return str(self._handle.memory)

    @property
    def pool_id(self) -> int | None:
        """Pool handles: the id of the exporter's pool; None for legacy handles."""
        return int(self._handle.pool_id) if self.memory == "pool" else None

    def pool_fd(self) -> int:
        """Pool handles, in the exporting process: a file descriptor of the
        pool, to send to the importer once (over a Unix socket with
        ``SCM_RIGHTS``: ``multiprocessing.reduction.send_handle``, or as a
        ``multiprocessing.reduction.DupFd`` to a process being spawned).  The
        descriptor is this process's, one per pool, open until the process
        ends: do not close it.  Raises ``ArrowInvalid`` for legacy handles
        (which open without a pool) and for handles another process made."""
        if self.memory != "pool":  # the core says so, in its words, when asked
            _lib.export_ipc_pool(self._handle)
        return _pool_fd_of(int(self._handle.pool_id), lambda: _lib.export_ipc_pool(self._handle))[0]

    def __reduce__(self) -> Any:
        return (_ipc_handle_from_bytes, (self._handle.serialize(),))

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.IpcMemHandle size={self.size} offset={self.offset} device_number={self.device_number}>"


# The pools this process exported: pool id -> one descriptor of it, kept open
# for the process (the pool lives as long; a DupFd of it handed to a spawning
# Process must stay valid until the child is started).
_pool_fds: dict[int, int] = {}
_pool_fds_lock = threading.Lock()


def _pool_fd_of(pool_id: int, export: Callable[[], Any]) -> tuple[int, int]:
    """(fd, pool id) of the pool `pool_id` this process exports: one
    descriptor per pool for the process, exported by `export()` (a new
    descriptor and the pool's id) the first time only."""
    with _pool_fds_lock:
        if pool_id not in _pool_fds:
            fd, exported_id = export()
            if exported_id != pool_id:  # not expected: the handle names its pool
                os.close(fd)
                raise ValueError(f"the pool exported is {exported_id:#x}, not {pool_id:#x}")
            _pool_fds[pool_id] = fd
        return _pool_fds[pool_id], pool_id


def _import_pool(ctx: Any, pool: Any) -> Any:
    """The ImportedPool of `pool` ((fd, pool_id), fd an int that stays the
    caller's or a DupFd-like object with detach(), whose descriptor is closed
    here) in the Context `ctx`, imported once per process."""
    try:
        fd, pool_id = pool
    except (TypeError, ValueError):
        raise TypeError(
            "pool must be (fd, pool_id): the exporter's pool_fd() (sent to this process) "
            f"and its pool_id, not {type(pool).__name__}"
        ) from None
    if hasattr(fd, "detach"):
        owned = fd.detach()
        try:
            return _lib.ipc_import_shared_pool(ctx._ctx, owned, int(pool_id))
        finally:
            os.close(owned)
    if not isinstance(fd, int):
        raise TypeError(f"pool's fd must be an int file descriptor (or a DupFd), not {type(fd).__name__}")
    return _lib.ipc_import_shared_pool(ctx._ctx, fd, int(pool_id))


def _ipc_handle_from_bytes(data: bytes) -> IpcMemHandle:
    """Unpickles an IpcMemHandle."""
    return IpcMemHandle.from_buffer(data)
