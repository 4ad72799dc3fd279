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

Another process on this machine (docs/sharing.md): ``obj.share()`` packs
the object into ONE ``cuMemAlloc`` allocation (an Arrow IPC stream
assembled on the device; a CudaBuffer CUDA IPC can export goes as it is)
and returns a :class:`SharedDeviceObject`, which owns that memory; its
``descriptor`` (136 bytes) opens in another process with
:func:`open_shared`: one CUDA IPC handle, the stream read zero-copy.
``obj.share(memory="pool")`` packs into this process's IPC pool of the
device instead (descriptor of 144 bytes): the importer also needs the pool
(``pool_fd()`` and ``pool_id``, sent once per process) and then opens in
microseconds rather than milliseconds per GiB.
:func:`enable_sharing_with_multiprocessing` makes ``multiprocessing``
(queues, pipes, ``ProcessPoolExecutor``) send device objects that way (pool
memory, the pool's descriptor with ``multiprocessing.reduction.DupFd``)
instead of as host copies.
"""

from __future__ import annotations

import copyreg
import importlib.abc
import importlib.machinery
import multiprocessing.reduction
import sys
import threading
from typing import Any

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import _memory, ipc
from cuarrow._arrays import DeviceArray, DeviceChunkedArray, DeviceRecordBatch, DeviceTable
from cuarrow._errors import CudaError
from cuarrow._ipc import _import_pool, _pool_fd_of
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


def _pack(obj: Any, cuda_malloc: bool = False) -> tuple[str, int, CudaBuffer]:
    """(kind, device number, the device bytes) of a device object; with
    `cuda_malloc`, the bytes in cuMemAlloc memory (a copy of a CudaBuffer
    that is not, or may not be)."""
    if isinstance(obj, CudaBuffer):
        if not cuda_malloc:
            return "buffer", obj.context.device_number, obj
        frame = obj.context.new_buffer(obj.size)
        frame.copy_from_device(obj)
        return "buffer", obj.context.device_number, frame
    schema, batches = _as_batches(obj)
    w = ipc.RecordBatchStreamWriter(obj.context, schema, _cuda_malloc=cuda_malloc)
    for b in batches:
        w.write_batch(b)
    return _KINDS[type(obj)], obj.device_id, w.getvalue()


def _unpack(kind: str, buf: CudaBuffer) -> Any:
    """The object `_pack` packed into `buf` (zero-copy over it)."""
    if kind == "buffer":
        return buf
    if kind not in _KINDS.values():
        raise ValueError(f"not a cuarrow device object: kind {kind!r}")
    return _from_table(kind, ipc.open_stream(buf).read_all())


def _from_table(kind: str, table: DeviceTable) -> Any:
    """The object of `kind` that travelled as `table` (see _as_batches)."""
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


# ---- another process on this machine: one CUDA IPC handle ---------------------------------


class SharedDeviceObject:
    """A device object shared with other processes on this machine, made by
    ``share()`` of a DeviceArray, DeviceChunkedArray, DeviceRecordBatch,
    DeviceTable or CudaBuffer.

    It owns the shared device memory (one ``cuMemAlloc`` allocation, or
    one allocation of the process's IPC pool with ``memory="pool"``) until
    :meth:`release` (or a ``with`` block's end, or garbage collection): keep
    it while other processes use the data.  :attr:`descriptor` is what
    another process opens with :func:`open_shared`; the descriptor keeps
    nothing alive.  Pickling sends the descriptor (and for pool memory the
    pool's descriptor, as ``multiprocessing.reduction.DupFd``: pickle it
    with multiprocessing), and unpickling opens it (in another process: a
    process cannot open what it shared itself).
    """

    __slots__ = ("_shared", "__weakref__")

    _shared: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("SharedDeviceObject is made by share() of a device object (e.g. DeviceTable.share())")

    @classmethod
    def _wrap(cls, raw: Any) -> SharedDeviceObject:
        obj = object.__new__(cls)
        obj._shared = raw
        return obj

    @property
    def descriptor(self) -> bytes:
        """The bytes another process opens with ``cuarrow.cuda.open_shared``
        (136 bytes: the kind, one CUDA IPC handle, a checksum; 144 bytes for
        pool memory, whose handle is longer).  Raises
        ``pyarrow.ArrowInvalid`` once released."""
        return self._shared.descriptor()

    @property
    def memory(self) -> str:
        """Where the data lies: "legacy" (``cuMemAlloc``) or "pool" (the process's IPC pool)."""
        return self._shared.memory

    @property
    def pool_id(self) -> int | None:
        """Pool memory: the id of the pool the importer needs
        (``open_shared(descriptor, pool=(pool_fd, pool_id))``); None for
        legacy memory.  Raises ``pyarrow.ArrowInvalid`` once released."""
        if self.memory != "pool":
            return None
        return int(_lib.ipc_read_shared_descriptor(self.descriptor)[4])  # in the descriptor: nothing exported

    def pool_fd(self) -> int | None:
        """Pool memory: a file descriptor of the pool the importer needs,
        to send to it (``socket.send_fds``, ``multiprocessing.reduction.DupFd``
        ...).  The descriptor is this process's, one per pool, open until
        the process exits: do not close it.  None for legacy memory.  Raises
        ``pyarrow.ArrowInvalid`` once released."""
        if self.memory != "pool":
            return None
        return _exported_pool(self)[0]

    @property
    def kind(self) -> str:
        """The kind of object shared: "table", "record_batch", "array", "chunked_array" or "buffer"."""
        return self._shared.kind

    @property
    def nbytes(self) -> int:
        """Bytes of the shared device memory (0 once released)."""
        return self._shared.data.size

    @property
    def released(self) -> bool:
        return self._shared.released

    def release(self) -> None:
        """Let the shared memory go (idempotent).  Processes that opened it
        before should be done with it (docs/sharing.md says what they see
        otherwise); opening the descriptor afterwards raises."""
        self._shared.release()

    def __enter__(self) -> SharedDeviceObject:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __reduce__(self) -> Any:
        if self.memory == "pool":
            fd, pool_id = _exported_pool(self)
            return _open_shared_with_sent_pool, (self.descriptor, multiprocessing.reduction.DupFd(fd), pool_id)
        return open_shared, (self.descriptor,)

    def __repr__(self) -> str:
        state = "released" if self.released else f"nbytes={self.nbytes}"
        return f"<cuarrow.cuda.SharedDeviceObject kind={self.kind} {state}>"


def _exported_pool(shared: SharedDeviceObject) -> tuple[int, int]:
    """(fd, pool id) of the pool a pool share lies in, exported once per pool."""
    if shared.memory != "pool":
        raise ValueError("this share is in legacy memory: it has no pool")
    pool_id = shared.pool_id
    assert pool_id is not None  # pool memory
    return _pool_fd_of(pool_id, shared._shared.export_pool)


def _share_object(obj: Any, stream: Any = None, memory: str = "legacy") -> SharedDeviceObject:
    """share() of every device class (installed into cuarrow._memory)."""
    if memory not in ("legacy", "pool"):
        raise ValueError(f'memory must be "legacy" or "pool", not {memory!r}')
    if isinstance(obj, CudaBuffer):
        return SharedDeviceObject._wrap(_lib.ipc_share_buffer(obj, stream, memory))
    schema, batches = _as_batches(obj)
    non_nullable = ipc._non_nullable(schema)
    data = [ipc._batch_data(b, schema, non_nullable) for b in batches]
    raw = _lib.ipc_share(schema.__arrow_c_schema__(), data, obj.context._ctx, _KINDS[type(obj)], stream, memory)
    return SharedDeviceObject._wrap(raw)


_memory._share_impl = _share_object


def _open_shared_with_sent_pool(descriptor: bytes, fd: Any, pool_id: int) -> Any:
    """Unpickles a pool share sent by multiprocessing: `fd` is a
    ``multiprocessing.reduction.DupFd`` of the exporter's pool."""
    return open_shared(descriptor, pool=(fd, pool_id))


def open_shared(descriptor: Any, context: Context | None = None, pool: Any = None) -> Any:
    """Opens what another process on this machine shared (``obj.share()``):
    the same kind of object (DeviceTable, DeviceRecordBatch, DeviceArray,
    DeviceChunkedArray or CudaBuffer), zero-copy over the exporter's memory
    (one CUDA IPC mapping, closed when the last object using it is gone).

    `descriptor`: the SharedDeviceObject's ``descriptor`` bytes (any
    bytes-like object).  `context`: where to map it; by default the
    exporter's device number when this process has it, else device 0.
    `pool`: for pool memory (``share(memory="pool")``), the exporter's pool
    as ``(fd, pool_id)``: its ``pool_fd()`` received in this process (an
    int, which stays yours, or a ``multiprocessing.reduction.DupFd``) and
    its ``pool_id``.  The pool is imported once per process and context
    (later calls reuse it: about a millisecond the first time, microseconds
    after).  Legacy descriptors ignore `pool`; a pool descriptor without it
    raises ``pyarrow.ArrowInvalid`` saying what to pass.
    A damaged or forged descriptor raises ``pyarrow.ArrowInvalid`` saying
    what is wrong, so does a descriptor this process made; memory the
    exporter released, or an exporter that exited, raises
    ``cuarrow.cuda.CudaError`` (or ``ArrowInvalid`` when the driver still
    maps the released memory: its stream was blanked on release)."""
    try:
        with memoryview(descriptor) as view:
            data = view.tobytes()
    except TypeError:
        raise TypeError(
            "open_shared needs the descriptor as bytes (SharedDeviceObject.descriptor), "
            f"not {type(descriptor).__name__}"
        ) from None
    kind, device_id, _, memory, _, made_here = _lib.ipc_read_shared_descriptor(data)
    ctx = _context_for(device_id) if context is None else context
    if not isinstance(ctx, Context):
        raise TypeError(f"context must be a cuarrow.cuda.Context, not {type(ctx).__name__}")
    # A descriptor this process made is refused by ipc_open_shared: no import of our own pool first.
    imported = _import_pool(ctx, pool) if pool is not None and memory == "pool" and not made_here else None
    kind, schema_capsule, batches, raw = _lib.ipc_open_shared(ctx._ctx, data, pool=imported)
    if kind == "buffer":
        return CudaBuffer._wrap(raw)
    schema = ipc._schema_from(schema_capsule)
    return _from_table(kind, DeviceTable.from_batches([ipc._batch_from(schema, b) for b in batches], schema))


# ---- multiprocessing: descriptors instead of host copies (opt-in) ---------------------------
#
# The exporter's side of every object sent must outlive the receiver's use
# of it, and a process cannot tell when another one is done.  The rule:
# what was sent stays shared until release_shared_objects() or this
# process's exit (each send is a share of its own).

_sent: list[SharedDeviceObject] = []
_sent_lock = threading.Lock()


def _reduce_for_multiprocessing(obj: Any) -> Any:
    # Pool memory: the receiver imports the pool once (its descriptor goes
    # as a DupFd, which works with every start method), then opens each
    # object in microseconds.  Legacy memory where the device has no pools.
    try:
        shared = _share_object(obj, memory="pool")
    except CudaError as e:
        if e.name != "CUDA_ERROR_NOT_SUPPORTED":
            raise
        shared = _share_object(obj)
    with _sent_lock:
        _sent.append(shared)
    return shared.__reduce__()


def enable_sharing_with_multiprocessing() -> None:
    """Opt-in: device objects sent through ``multiprocessing`` (queues,
    pipes, ``Pool``, ``concurrent.futures.ProcessPoolExecutor``; any start
    method) travel as descriptors of CUDA IPC shares, opened zero-copy by
    the receiving process on this machine, instead of host copies.  They
    are packed into this process's IPC pool of the device (legacy
    ``cuMemAlloc`` memory where the device has no shareable pools), the
    pool's descriptor sent along as a ``multiprocessing.reduction.DupFd``:
    the receiver imports the pool once and opens each object in
    microseconds.

    Applies to what this process sends; a worker that sends device objects
    back calls it too (e.g. ``ProcessPoolExecutor(initializer=
    cuarrow.cuda.enable_sharing_with_multiprocessing)``).  Every object sent
    stays shared (one packed copy in this process's device memory) until
    :func:`release_shared_objects` or this process's exit: call it once the
    receivers are done with what they got.  Plain ``pickle`` is unchanged
    (a host copy that can go anywhere).  Idempotent.  docs/sharing.md."""
    for cls in (*_KINDS, CudaBuffer):
        multiprocessing.reduction.ForkingPickler.register(cls, _reduce_for_multiprocessing)


def release_shared_objects() -> int:
    """Releases what multiprocessing sent as shares
    (:func:`enable_sharing_with_multiprocessing`) so far; returns how many.
    Receivers must be done with those objects."""
    with _sent_lock:
        sent = list(_sent)
        _sent.clear()
    for s in sent:
        s.release()
    return len(sent)


# ---- Dask ------------------------------------------------------------------------------


def _host_serialize(obj: Any) -> tuple[dict, list]:
    kind, device_id, buf = _pack(obj)
    return {"cuarrow": kind, "device": device_id}, [memoryview(buf.copy_to_host())]


def _host_deserialize(header: dict, frames: list) -> Any:
    if len(frames) != 1:
        raise ValueError(f"a cuarrow device object travels as one frame, got {len(frames)}")
    return _rebuild(header.get("cuarrow", ""), int(header.get("device", 0)), frames[0])


def _device_serialize(obj: Any) -> tuple[dict, list]:
    # The frame in cuMemAlloc memory: UCX (1.21) moves that with cuda_ipc,
    # but takes stream-ordered pool memory (cuarrow's default resource) for
    # managed memory and copies it through host staging over TCP: 2.5 s
    # instead of milliseconds for 1 GiB on the H200 (docs/sharing.md).  The
    # writer packs straight into it.
    kind, device_id, frame = _pack(obj, cuda_malloc=True)
    return {"cuarrow": kind, "device": device_id}, [frame]


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
