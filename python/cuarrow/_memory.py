"""Contexts and memory: Device, Context, CudaBuffer (device memory),
HostBuffer (pinned host memory), and the options of transfers between them."""

from __future__ import annotations

from typing import Any, Callable, SupportsIndex

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import _device, _numba, _protocols
from cuarrow._args import _index, _int64, _normalize_index, _slice_bounds
from cuarrow._driver import _device_count, _require_devices
from cuarrow._ipc import IpcMemHandle, _import_pool


class Device:
    """Where memory is, with pyarrow.Device's attribute names.

    Stock pyarrow (built without CUDA) has no CUDA device object and no way
    to make one, so cuarrow's is its own class: ``device_type`` (a
    ``pyarrow.DeviceAllocationType``: CUDA, or CUDA_HOST / CUDA_MANAGED for
    pinned or managed memory), ``device_id``, ``is_cpu`` (False) and
    ``type_name`` (``"arrow::cuda"``, as Arrow's CudaDevice) as
    pyarrow.Device has them, plus ``device_number`` (pyarrow.cuda's name for
    the id) and ``context``.  Equal devices compare and hash equal.
    """

    __slots__ = ("_code", "_id")

    def __init__(self, device_type: Any = _device.CUDA, device_id: int = 0) -> None:
        self._code = int(device_type)
        self._id = _index(device_id, "device_id")

    @property
    def device_type(self) -> Any:
        return _device.device_type(self._code)

    @property
    def device_id(self) -> int:
        return self._id

    @property
    def device_number(self) -> int:
        return self._id

    @property
    def is_cpu(self) -> bool:
        return False

    @property
    def type_name(self) -> str:
        return "arrow::cuda"

    @property
    def context(self) -> Context:
        """The device's primary context."""
        return Context(self._id)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return (self._code, self._id) == (other._code, other._id)

    def __hash__(self) -> int:
        return hash((Device, self._code, self._id))

    def __repr__(self) -> str:
        kind = _device.name(self._code, str(self._code))
        return f"<cuarrow.cuda.Device: {kind}:{self._id}>"


# share() of CudaBuffer and the typed device objects is implemented by
# cuarrow._share, a layer above this one, which installs it here when it is
# imported (importing cuarrow.cuda imports it).
_share_impl: Callable[[Any, Any, str], Any] | None = None


def _share(obj: Any, stream: Any, memory: str = "legacy") -> Any:
    if _share_impl is None:
        raise RuntimeError("share() needs cuarrow.cuda: import it first (from cuarrow import cuda)")
    return _share_impl(obj, stream, memory)


_SHARE_DOC = """Share this object with another process on this machine, without
        a copy there: returns a ``cuarrow.cuda.SharedDeviceObject`` whose
        ``descriptor`` (136 bytes, 144 for pool memory; the object itself
        pickles as it) the other process opens with
        ``cuarrow.cuda.open_shared``.  The data is packed into one allocation
        (one device-to-device copy on `stream`, synchronized; a CudaBuffer
        already in memory of that kind is shared as it is) that lives until
        the SharedDeviceObject is released or collected: keep it while the
        other process uses the data.  `memory`: ``"legacy"`` (default), one
        ``cuMemAlloc`` allocation, opened with the descriptor alone;
        ``"pool"``, memory of this process's IPC pool of the device, opened
        with the descriptor and the pool (``pool_fd()``, ``pool_id``; sent
        once per process), much faster to open.  docs/sharing.md."""


def _host_nbytes(obj: Any, what: str) -> tuple[int, bool]:
    """(size in bytes, read-only) of host memory exposed through the buffer protocol."""
    if isinstance(obj, CudaBuffer):
        raise TypeError(
            f"{what} must be host memory, but this CudaBuffer is device memory; "
            "use copy_from_device() between device buffers, or copy_to_host() first"
        )
    try:
        with memoryview(obj) as view:
            return view.nbytes, view.readonly
    except TypeError:
        raise TypeError(
            f"{what} must support the buffer protocol (bytes, bytearray, numpy.ndarray, pyarrow.Buffer, "
            f"HostBuffer ...), not {type(obj).__name__}"
        ) from None


def _as_context(context: Any) -> Context:
    if context is None:
        return Context(0)
    if isinstance(context, Context):
        return context
    return Context(_index(context, "context"))


def transfer_options() -> dict[str, int | bool]:
    """The options of host<->device transfers in force: ``staging_threshold_bytes``
    (copies from or to ordinary memory at least this large go through the
    pinned staging pipeline; 0 disables it), ``staging_chunk_bytes`` (the
    largest chunk), ``staging_threads`` (device to host),
    ``staging_threads_to_device``, ``pinned_pool_limit_bytes`` (the most pinned
    memory the pool for ``copy_to_host()`` results holds) and
    ``staging_streaming_store_limit_bytes`` (copies to the device up to this
    size fill the staging buffers with non-temporal stores; 0: never) and
    ``device_gather`` (a bool: batches of 8 or more copies within a device,
    such as an IPC stream written into device memory, and small reads of
    device memory into pinned memory, such as the offsets an IPC writer or a
    check reads, go to cuarrow's gather kernel, one launch per 1,000, instead
    of a driver copy each;
    ``Context.gather_status()`` says whether it runs) and
    ``device_gather_max_run_bytes`` (in such a batch, runs of at least this
    many bytes still get one driver copy each, on the copy engines; 0, the
    default: the kernel takes every run)."""
    return dict(_lib.get_transfer_options())


def set_transfer_options(**options: int | bool) -> None:
    """Change some transfer options (names as in :func:`transfer_options`)
    for later copies.  Unknown names raise TypeError; bad values ValueError."""
    current = transfer_options()
    unknown = set(options) - set(current)
    if unknown:
        raise TypeError(
            f"unknown transfer option(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(current))}"
        )
    current.update(options)
    _lib.set_transfer_options(**current)


def pinned_pool_stats() -> dict[str, int]:
    """``pinned_bytes`` (pinned memory the result pool holds, cached and in
    use) and ``in_use_bytes`` (held by live ``copy_to_host()`` results)."""
    return dict(_lib.pinned_pool_stats())


def trim_pinned_pool() -> None:
    """Unpin and free the blocks the result pool caches."""
    _lib.trim_pinned_pool()


class Context:
    """CUDA driver context.

    ``Context(n)`` is device n's primary context, the one CuPy, Numba and
    PyTorch use, so ``Context(0).handle`` equals their context handle.
    ``Context(handle=h)`` wraps a context created by another library (its
    device number is read from the context itself).
    """

    __slots__ = ("_ctx", "__weakref__")

    def __init__(self, device_number: int = 0, handle: int = 0) -> None:
        device_number = _index(device_number, "device_number")
        handle = _index(handle, "handle")
        if handle:
            self._ctx = _lib.Context.wrap(handle)
            return
        n = _require_devices()
        if not 0 <= device_number < n:
            raise ValueError(f"device_number argument must be non-negative less than {n}")
        self._ctx = _lib.Context.get(device_number)

    @classmethod
    def _wrap(cls, raw: _lib.Context) -> Context:
        obj = object.__new__(cls)
        obj._ctx = raw
        return obj

    # -- numba --------------------------------------------------------------
    @staticmethod
    def from_numba(context: Any = None) -> Context:
        """The Context of a Numba context (default: Numba's current context)."""
        device_number, handle = _numba.from_numba_context(context)
        return Context(device_number=device_number, handle=handle)

    def to_numba(self) -> Any:
        """Numba's context object for this context (its primary context object
        when this is a primary context)."""
        return _numba.to_numba_context(self.device_number, self.handle)

    # -- properties ---------------------------------------------------------
    @staticmethod
    def get_num_devices() -> int:
        """Return the number of GPU devices."""
        return _device_count()

    @property
    def device_number(self) -> int:
        """Return context device number."""
        return self._ctx.device_number

    @property
    def device(self) -> Device:
        """The context's device (pyarrow.Device's attributes: device_type CUDA, device_id ...)."""
        return Device(_device.CUDA, self.device_number)

    @property
    def handle(self) -> int:
        """Return pointer to context handle."""
        return self._ctx.handle

    @property
    def is_primary(self) -> bool:
        """True for a device's primary context."""
        return self._ctx.is_primary

    @property
    def bytes_allocated(self) -> int:
        """Bytes of device memory currently allocated through cuarrow on this context."""
        return self._ctx.bytes_allocated

    def memory_pool_stats(self) -> dict[str, Any]:
        """The context's device memory resource: ``resource`` (its name:
        ``"cuda_ipc_pool"`` by default, ``"cuda_async_pool"``, ``"cuda_malloc"``;
        see ``CUARROW_MEMORY_RESOURCE``), and for pools ``used_bytes`` (in
        allocations) and ``reserved_bytes`` (held from the driver: in use and
        cached for reuse; None for resources that are not pools)."""
        stats = self._ctx.memory_pool_stats()
        used, reserved = stats if stats is not None else (None, None)
        return {"resource": self._ctx.memory_resource_name(), "used_bytes": used, "reserved_bytes": reserved}

    def trim_memory_pool(self, keep_bytes: int = 0) -> None:
        """Give the memory the pool caches back to the driver, keeping at most
        `keep_bytes` (once the frees queued on streams have run).  The pool
        keeps up to 1/16 of the device for reuse otherwise.  Nothing to do
        for resources that are not pools."""
        self._ctx.trim_memory_pool(_index(keep_bytes, "keep_bytes"))

    def transfer_stats(self) -> dict[str, Any]:
        """Data moved by copies issued in this context: bytes host-to-device,
        device-to-host and device-to-device, wall-clock seconds of the
        synchronous ones, bytes that went through the staging pipeline, and
        the number of copies."""
        return dict(self._ctx.transfer_stats())

    def reset_transfer_stats(self) -> None:
        """Set this context's transfer statistics back to zero."""
        self._ctx.reset_transfer_stats()

    @property
    def device_name(self) -> str:
        """The device's name, e.g. "NVIDIA H200"."""
        return self._ctx.properties["name"]

    def gather_status(self) -> str:
        """``"ready"`` when cuarrow's gather kernel runs in this context
        (batches of many copies within the device go to it: the
        ``device_gather`` transfer option), else why not (a build without
        nvcc, no image of the kernel for this GPU)."""
        return self._ctx.gather_status()

    def synchronize(self) -> None:
        """Block until the device has completed all preceding requested tasks."""
        self._ctx.synchronize()

    def get_device_address(self, address: int) -> int:
        """The device address of memory reachable from this context: itself
        for device memory, the mapped address for pinned or registered host
        memory.  Raises CudaError for memory CUDA does not know."""
        return self._ctx.get_device_address(_index(address, "address"))

    # -- buffers ------------------------------------------------------------
    def new_buffer(self, nbytes: int) -> CudaBuffer:
        """Return new device buffer of `nbytes` bytes (contents uninitialized).

        The memory comes from ``cuMemAlloc``, as in pyarrow, so that its
        ``export_for_ipc`` handle opens in another process from its bytes
        alone (legacy CUDA IPC); the buffers that copies make
        (``buffer_from_data``, ``to_device`` ...) come from the device's
        faster stream-ordered pool, cuarrow's default resource, whose handles
        open with the pool (``IpcMemHandle.pool_fd()``).
        """
        nbytes = _index(nbytes, "nbytes")
        return CudaBuffer._wrap(_lib.allocate_device(self._ctx, nbytes, plain=True))

    def foreign_buffer(self, address: int, size: int, base: Any = None) -> CudaBuffer:
        """A device buffer viewing memory someone else owns.

        The address may be device memory or pinned host memory (anything
        `get_device_address` maps).  `base` (the owner of the memory) is kept
        alive as long as the view, its slices and its DLPack exports are.
        When ``address == size == 0`` a new empty buffer is returned.  Where
        the driver knows the memory at `address`, the `size` bytes must lie
        in memory it knows there (the allocation, or allocations placed end
        to end after it): a size past it raises ``pyarrow.ArrowInvalid`` (a
        ValueError) instead of a fault when the bytes are read; the same
        holds for ``__cuda_array_interface__``, DLPack and C Device imports.
        """
        address = _index(address, "address")
        size = _index(size, "size")
        if not address and size == 0:
            return self.new_buffer(0)
        if size < 0:
            raise ValueError(f"size argument must be non-negative, got {size}")
        device_address = self.get_device_address(address)
        return CudaBuffer._wrap(_lib.wrap_device(self._ctx, device_address, size, base, True))

    def buffer_from_data(self, data: Any, offset: int = 0, size: int = -1, *, stream: Any = None) -> CudaBuffer:
        """Create device buffer and initialize with data.

        `data` is a CudaBuffer (copied on the device) or host memory: any
        object supporting the buffer protocol (bytes, NumPy arrays,
        pyarrow.Buffer, HostBuffer ...).  `size` -1 means up to the end.
        """
        if offset == 0 and size == -1 and stream is None and not isinstance(data, CudaBuffer):
            # The common case in one call (a 4-byte copy costs mostly calls);
            # anything unusual takes the checked path below for its message.
            try:
                return CudaBuffer._wrap(_lib.buffer_from_host(self._ctx, data))
            except (TypeError, BufferError):
                pass
        offset = _int64(offset, "offset")
        size = _int64(size, "size")
        if isinstance(data, CudaBuffer):
            bsize = data.size
        else:
            bsize, _ = _host_nbytes(data, "data")
        size = _lib.source_count(bsize, offset, size)
        _lib.check_stream(stream)
        result = _lib.allocate_device(self._ctx, size)
        if stream is not None:
            _lib.stream_wait_for_default(self._ctx, stream)
        if isinstance(data, CudaBuffer):
            _lib.copy(result, 0, data, offset, size, stream)
        else:
            _lib.copy_from_host(result, 0, data, offset, size, stream)
        return CudaBuffer._wrap(result)

    def buffer_from_object(self, obj: Any) -> CudaBuffer:
        """A device buffer viewing (not copying) device-accessible memory.

        `obj` may be a HostBuffer (pinned memory), a CudaBuffer (returned as
        is), or any object exposing ``__cuda_array_interface__`` (Numba,
        CuPy, PyTorch arrays ...) or DLPack (``__dlpack__`` on a CUDA
        device).  The object is kept alive as long as the view.  For a
        non-contiguous array the view spans its memory (``ValueError('array
        data is non-contiguous')`` if that memory has gaps).
        """
        if isinstance(obj, HostBuffer):
            return self.foreign_buffer(obj.address, obj.size, base=obj)
        if isinstance(obj, CudaBuffer):
            return obj
        if isinstance(obj, pa.Buffer):
            raise pa.ArrowTypeError("buffer is not backed by a CudaBuffer")
        if hasattr(obj, "__cuda_array_interface__"):
            return self._from_cuda_array_interface(obj)
        if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
            device_type, _device_id = obj.__dlpack_device__()
            if int(device_type) in _device.CUDA_CODES:
                return self._from_dlpack(obj)
        raise pa.ArrowTypeError(f"cannot create device buffer view from `{type(obj)}` object")

    def _from_cuda_array_interface(self, obj: Any) -> CudaBuffer:
        # The core reads the fields (a mask is refused), locates the memory,
        # views its span and orders cuarrow's work after the CAI's stream.
        return CudaBuffer._wrap(_lib.from_cai(obj.__cuda_array_interface__, self._ctx, obj))

    def _from_dlpack(self, obj: Any) -> CudaBuffer:
        return CudaBuffer._wrap(_lib.from_dlpack(_protocols.dlpack_capsule(obj), self._ctx))

    # -- IPC ------------------------------------------------------------------
    def open_ipc_buffer(self, ipc_handle: IpcMemHandle, pool: Any = None) -> CudaBuffer:
        """Open device memory another process exported with ``export_for_ipc``.

        The buffer is memory of this context's device (whatever device the
        exporter used), of exactly the exported range (slices keep their
        offset), mutable; the mapping is closed when the last buffer and
        slice using it is gone, and opening the same handle again shares it.
        A handle of an empty buffer gives an empty buffer.  Opening a handle
        in the process that exported it raises ``ArrowInvalid`` (IPC handles
        are for other processes); a handle whose exporter has exited, or
        that is not a CUDA IPC handle, raises ``CudaError``.

        `pool`: for a pool handle (``ipc_handle.memory == "pool"``: memory of
        the exporter's default resource), the exporter's pool as ``(fd,
        pool_id)``: its ``IpcMemHandle.pool_fd()`` received in this process
        (an int, which stays yours, or a ``multiprocessing.reduction.DupFd``)
        and its ``pool_id``; imported once per process and context.  A pool
        handle without it raises ``ArrowInvalid`` saying so; legacy handles
        ignore it.
        """
        if not isinstance(ipc_handle, IpcMemHandle):
            raise TypeError(f"expected IpcMemHandle instance, got {type(ipc_handle).__name__}")
        if ipc_handle.memory == "pool" and ipc_handle.size > 0:
            if pool is None:
                raise pa.ArrowInvalid(
                    "this IPC handle is of pool memory (the exporter's default memory resource): open it with "
                    "open_ipc_buffer(handle, pool=(fd, pool_id)), where fd is the exporter's handle.pool_fd() "
                    "received in this process (multiprocessing.reduction.send_handle / DupFd) and pool_id its "
                    "handle.pool_id; or have the exporter copy the data into a Context.new_buffer (cuMemAlloc) "
                    "and export that"
                )
            return CudaBuffer._wrap(_lib.open_ipc_pool(_import_pool(self, pool), ipc_handle._handle))
        return CudaBuffer._wrap(_lib.open_ipc(self._ctx, ipc_handle._handle))

    # -- misc ---------------------------------------------------------------
    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Context):
            return self._ctx == other._ctx
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._ctx)

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.Context device_number={self.device_number} handle={self.handle:#x}>"


class CudaBuffer(_lib.Buffer):
    """An Arrow buffer with data located in a GPU device.

    Create one with ``Context.new_buffer``, ``Context.buffer_from_data``,
    ``Context.foreign_buffer``, ``Context.buffer_from_object`` or
    ``CudaBuffer.from_numba``.  Allocated memory is freed when the last
    reference (the buffer, its slices, its DLPack exports) goes away.

    Device memory is never read by host code through a CudaBuffer: it has no
    buffer protocol; use ``copy_to_host()`` (or ``to_pybytes()``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Do not call CudaBuffer's constructor directly, use "
            "`<cuarrow.cuda.Context instance>.new_buffer` (or buffer_from_data, "
            "foreign_buffer, buffer_from_object) method instead."
        )

    _parent: CudaBuffer | None

    @classmethod
    def _wrap(cls, raw: _lib.Buffer, parent: CudaBuffer | None = None) -> CudaBuffer:
        obj = cls.__new__(cls)
        _lib.Buffer.__init__(obj, raw, False)
        obj._parent = parent
        return obj

    # -- constructors ---------------------------------------------------------
    @staticmethod
    def from_buffer(buf: Any) -> CudaBuffer:
        """Convert back generic buffer into CudaBuffer.

        A CudaBuffer is returned as is; a pyarrow.Buffer is always host memory
        here (cuarrow never hands device memory to pyarrow), so it raises
        ``ArrowTypeError('buffer is not backed by a CudaBuffer')``.
        """
        if isinstance(buf, CudaBuffer):
            return buf
        raise pa.ArrowTypeError("buffer is not backed by a CudaBuffer")

    @staticmethod
    def from_numba(mem: Any) -> CudaBuffer:
        """A CudaBuffer view of Numba device memory (a MemoryPointer, e.g. a
        device array's ``gpu_data``); `mem` is kept alive by the view."""
        context, pointer, size, owner = _numba.from_numba(mem)
        ctx = Context.from_numba(context)
        if not pointer and size == 0:
            return ctx.new_buffer(0)
        return ctx.foreign_buffer(pointer, size, base=owner)

    def share(self, stream: Any = None, memory: str = "legacy") -> Any:
        return _share(self, stream, memory)

    share.__doc__ = _SHARE_DOC

    def to_numba(self) -> Any:
        """A Numba MemoryPointer viewing this buffer (it keeps the buffer alive),
        for ``DeviceNDArray(shape, strides, dtype, gpu_data=buf.to_numba())``."""
        return _numba.memory_pointer(self.context.to_numba(), self.address, self.size, self)

    # -- properties -----------------------------------------------------------
    @property
    def context(self) -> Context:
        """Returns the CUDA driver context of this buffer."""
        raw = self.raw_context
        assert raw is not None  # only ordinary host memory has none, and a CudaBuffer never holds it
        return Context._wrap(raw)

    @property
    def parent(self) -> CudaBuffer | None:
        """The buffer this one is a slice of, or None."""
        return self._parent

    @property
    def is_cpu(self) -> bool:
        """Always False: device memory is not CPU memory."""
        return False

    @property
    def device_type(self) -> Any:
        """``pyarrow.DeviceAllocationType.CUDA`` (``CUDA_HOST`` or ``CUDA_MANAGED``
        for views of pinned or managed memory)."""
        return _device.device_type(self.raw_device_type)

    @property
    def device(self) -> Device:
        """The device the memory is on; ``device.device_type == self.device_type``."""
        return Device(self.raw_device_type, self.device_id)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"<cuarrow.cuda.CudaBuffer address={self.address:#x} size={self.size} "
            f"device={self._device_label()} is_cpu=False is_mutable={self.is_mutable}>"
        )

    def _device_label(self) -> str:
        kind = _device.name(self.raw_device_type, "cpu")
        return f"{kind}:{self.device_id}"

    # -- views ----------------------------------------------------------------
    def slice(self, offset: int = 0, length: int | None = None) -> CudaBuffer:
        """Zero-copy slice of device buffer.

        A `length` past the end is clamped to the available bytes (as in
        pyarrow); a negative one is refused.
        """
        offset = _int64(offset, "offset")
        if length is not None:
            length = _int64(length, "length")
        length = _lib.slice_length(self.size, offset, length)
        return CudaBuffer._wrap(self.raw_slice(offset, length), parent=self)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, length = _slice_bounds(key, self.size)
            return CudaBuffer._wrap(self.raw_slice(start, length), parent=self)
        index = _normalize_index(key, self.size)
        return self.copy_to_host(position=index, nbytes=1)[0]

    # -- copies ---------------------------------------------------------------
    def copy_to_host(
        self,
        position: int = 0,
        nbytes: int = -1,
        buf: Any = None,
        memory_pool: pa.MemoryPool | None = None,
        resizable: bool = False,
        *,
        stream: Any = None,
    ) -> Any:
        """Copy memory from GPU device to CPU host.

        Without `buf`, returns a new ``pyarrow.Buffer``: pinned memory from
        cuarrow's result pool (given back when the Buffer is freed), or, when
        `memory_pool` or `resizable` is given, memory from that pool,
        holding bytes ``[position, position + nbytes)`` (``nbytes=-1``: to the
        end).  With `buf` (any writable host memory: pyarrow.Buffer,
        bytearray, NumPy array, HostBuffer ...), fills it and returns it;
        ``nbytes=-1`` then copies as much as fits.  Both sides are checked.

        Synchronous.  With `stream`, the copy runs on that stream (after the
        work already queued there) and the stream is synchronized before
        returning.
        """
        if buf is None and position == 0 and nbytes == -1 and memory_pool is None and not resizable and stream is None:
            # The whole buffer into the pinned result pool, in one call (what
            # a small copy costs is mostly calls); -1: to the end.
            return pa.py_buffer(_lib.copy_to_new_host(self, 0, -1))
        if buf is not None and position == 0 and nbytes == -1 and stream is None and not isinstance(buf, CudaBuffer):
            # The common case in one call; anything unusual (read-only or
            # non-contiguous memory ...) takes the checked path for its message.
            try:
                _lib.copy_into_host(buf, self)
                return buf
            except (TypeError, BufferError):
                pass
        position = _int64(position, "position")
        nbytes = _int64(nbytes, "nbytes")
        if buf is None:
            n = _lib.read_count(self.size, position, nbytes)
            if memory_pool is None and not resizable:
                # Pinned memory from cuarrow's result pool (returned to the
                # pool when the pyarrow.Buffer is freed): the DMA engine
                # writes it at the link's speed.
                return pa.py_buffer(_lib.copy_to_new_host(self, position, n, stream))
            out = pa.allocate_buffer(n, memory_pool=memory_pool, resizable=resizable)
        else:
            bsize, read_only = _host_nbytes(buf, "buf")
            n = _lib.read_count(self.size, position, nbytes, bsize)
            if read_only:
                raise ValueError("the host buffer (buf) is read-only; pass writable memory")
            out = buf
        _lib.copy_to_host(out, 0, self, position, n, stream)
        return out

    def copy_from_host(self, data: Any, position: int = 0, nbytes: int = -1, *, stream: Any = None) -> int:
        """Copy data from host to device at `position`; returns the number of bytes copied.

        `data` is any object supporting the buffer protocol.  ``nbytes=-1``
        copies as much as fits.  Synchronous (see `copy_to_host` for `stream`).
        """
        position = _int64(position, "position")
        nbytes = _int64(nbytes, "nbytes")
        bsize, _ = _host_nbytes(data, "data")
        n = _lib.write_count(self.size, position, nbytes, bsize, True)
        _lib.copy_from_host(self, position, data, 0, n, stream)
        return n

    def copy_from_device(self, buf: CudaBuffer, position: int = 0, nbytes: int = -1, *, stream: Any = None) -> int:
        """Copy data from another device buffer (of any device) at `position`;
        returns the number of bytes copied.  Synchronous (see `copy_to_host`
        for `stream`)."""
        if not isinstance(buf, CudaBuffer):
            raise TypeError(f"expected CudaBuffer instance, got {type(buf).__name__}")
        position = _int64(position, "position")
        nbytes = _int64(nbytes, "nbytes")
        n = _lib.write_count(self.size, position, nbytes, buf.size, False)
        _lib.copy(self, position, buf, 0, n, stream)
        return n

    def to_pybytes(self) -> bytes:
        """Return device buffer content as Python bytes (a host copy)."""
        return self.copy_to_host().to_pybytes()

    def equals(self, other: CudaBuffer) -> bool:
        """True if both device buffers hold the same bytes (compared through host copies)."""
        if not isinstance(other, CudaBuffer):
            raise ValueError(
                "Device on which the data resides differs between buffers: "
                f"{self._device_label()} and {_describe_host(other)}; copy the device buffer to the host "
                "with copy_to_host() to compare it with host data"
            )
        if self.size != other.size:
            return False
        if self.size == 0 or (self.address == other.address and self.device_id == other.device_id):
            return True
        return self.to_pybytes() == other.to_pybytes()

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, CudaBuffer):
            return self.equals(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # -- refusals ---------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TypeError(
            "a CudaBuffer holds device memory, which NumPy cannot read; use "
            "np.frombuffer(buf.copy_to_host(), dtype) for a host copy"
        )

    def __reduce__(self) -> Any:
        # cuarrow.cuda registers the pickling (a host copy) with copyreg.
        raise TypeError("a CudaBuffer pickles (as a host copy) once cuarrow.cuda is imported; or pickle copy_to_host()")

    def __copy__(self) -> Any:
        raise TypeError(
            "copy.copy of a CudaBuffer is refused: it would copy through the host; use "
            "ctx.buffer_from_data(buf) for a device copy, buf.slice() for a view"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def export_for_ipc(self) -> IpcMemHandle:
        """Expose this device buffer to other processes: a handle to send
        (``handle.serialize()``) to a process that opens it with
        ``Context.open_ipc_buffer(IpcMemHandle.from_buffer(data))``.

        The handle carries the buffer's offset in its allocation, so slices
        round-trip (pyarrow loses the offset).  The memory must come from
        ``cuMemAlloc``: ``Context.new_buffer`` (or a foreign cuMemAlloc
        allocation); buffers made by copies (``buffer_from_data``,
        ``to_device``) are stream-ordered pool memory, which CUDA IPC cannot
        export (``ArrowInvalid`` saying so: copy them into a ``new_buffer``
        with ``copy_from_device``).  The handle keeps the memory allocated in
        this process while it lives; keep it (or the buffer) until the other
        processes are done.  Finish writing the buffer before sending the
        handle (cuarrow's copies are synchronous unless given a stream).
        """
        return IpcMemHandle._wrap(_lib.export_ipc(self))

    # -- interop protocols ------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3: a 1-D uint8 array over the buffer's bytes.

        ``stream`` is 1 (the legacy default stream, where cuarrow allocates
        and copies): consumers order their work after it.
        """
        return _protocols.cuda_array_interface(self.address, (self.size,), "|u1", not self.is_mutable)

    def __dlpack_device__(self) -> tuple[int, int]:
        return _device.dlpack_device((self.raw_device_type, self.device_id))

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """DLPack export: a 1-D uint8 tensor over the buffer's bytes.

        `stream` is the consumer's stream (an integer, DLPack's convention:
        None or 1 the legacy default stream, 2 the per-thread default stream,
        -1 no synchronization); it is made to wait for cuarrow's work.  The
        capsule keeps the memory alive.  ``copy=True`` exports a device copy.
        """
        return _protocols.dlpack_export(
            self,
            0,
            (self.size,),
            _protocols._DL_UINT,
            8,
            (self.raw_device_type, self.device_id),
            self.raw_context,
            "a CudaBuffer",
            stream=stream,
            max_version=max_version,
            dl_device=dl_device,
            copy=copy,
        )


def _describe_host(obj: Any) -> str:
    if isinstance(obj, (pa.Buffer, HostBuffer)) or hasattr(obj, "__buffer__"):
        return "cpu"
    return type(obj).__name__


def _adopt_pyarrow_buffer(dst: pa.Buffer, src: pa.Buffer) -> None:
    """Move `src`'s arrow::Buffer into `dst`, a fresh ``pa.Buffer.__new__``
    instance of a Python subclass of pyarrow.Buffer.

    pyarrow fills a Buffer's C++ pointer only from Cython (there is no Python
    way to make an instance of a pyarrow.Buffer subclass hold memory), while
    pyarrow's consumers (pa.Array.from_buffers, ...) accept only objects whose
    C type is pyarrow.Buffer.  So the pointer is *moved*, as std::swap would:
    `src` (fresh from pa.py_buffer, referenced nowhere else) gives its
    ``shared_ptr<arrow::Buffer>`` and buffer-protocol shape to `dst` (whose own
    are null, as Buffer's __cinit__ leaves them) and keeps the nulls, so no
    reference count changes and nothing is shared.  The layout is checked
    against what both objects must hold before a byte moves: same vtable,
    `dst` all null, `src`'s shape and stride the size and 1; a pyarrow whose
    layout differs gets an ImportError-like TypeError here, never a crash.
    """
    import ctypes

    words = pa.Buffer.__basicsize__ // 8
    if pa.Buffer.__basicsize__ != 64 or pa.Buffer.__weakrefoffset__ != 16:
        raise TypeError("this pyarrow's Buffer layout is not the one cuarrow knows")
    d = (ctypes.c_uint64 * words).from_address(id(dst))
    s = (ctypes.c_uint64 * words).from_address(id(src))
    # [refcnt, type, __weakref__, vtable, shared_ptr.ptr, shared_ptr.ctrl, shape[0], strides[0]]
    if not (d[3] == s[3] != 0 and d[4] == d[5] == d[6] == d[7] == 0 and s[4] != 0 and s[6] == src.size and s[7] == 1):
        raise TypeError("this pyarrow's Buffer layout is not the one cuarrow knows")
    for i in range(4, 8):
        d[i], s[i] = s[i], 0


class HostBuffer(pa.Buffer):
    """Device-accessible CPU memory (pinned, from cuMemHostAlloc).

    A pyarrow.Buffer (as pyarrow.cuda's HostBuffer is): pa.Array.from_buffers,
    pa.py_buffer, pyarrow IPC and every other consumer of pyarrow.Buffer
    take it as is, zero-copy; the pinned memory stays alive as long as any
    pyarrow object (array, slice, ...) uses it.  Host memory: it supports the
    buffer protocol (``np.frombuffer``, ``memoryview``), and copies between
    it and the device run at the link's full speed.  Create one with
    :func:`new_host_buffer`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Do not call HostBuffer's constructor directly, use `cuda.new_host_buffer` function instead.")

    @classmethod
    def _wrap(cls, raw: _lib.Buffer, parent: HostBuffer | None = None) -> HostBuffer:
        # The arrow::Buffer is pyarrow's view (buffer protocol, mutable as
        # `raw` is) of `raw`, the binding's owner of the pinned mapping: the
        # view holds `raw`, so arrays built on this buffer keep the memory alive.
        obj = pa.Buffer.__new__(cls)
        _adopt_pyarrow_buffer(obj, pa.py_buffer(raw))
        obj._raw = raw
        obj._parent = parent
        return obj

    @property
    def raw(self) -> _lib.Buffer:
        """The binding's buffer (what cuarrow's copies take)."""
        return self._raw

    @property
    def parent(self) -> HostBuffer | None:
        return self._parent

    @property
    def address(self) -> int:
        """The pinned memory's address (also for size 0, where pyarrow's view
        of an empty buffer may point elsewhere)."""
        return self._raw.address

    @property
    def is_mutable(self) -> bool:
        return self._raw.is_mutable

    @property
    def is_cpu(self) -> bool:
        """True: pinned memory is CPU memory."""
        return True

    @property
    def device_type(self) -> Any:
        """``pyarrow.DeviceAllocationType.CUDA_HOST``."""
        return _device.device_type(self._raw.raw_device_type)

    @property
    def device(self) -> Any:
        """The CPU device (as pyarrow.cuda's HostBuffer)."""
        return pa.default_cpu_memory_manager().device

    @property
    def memory_manager(self) -> Any:
        """The default CPU memory manager (as pyarrow.cuda's HostBuffer)."""
        return pa.default_cpu_memory_manager()

    @property
    def context(self) -> Context | None:
        """The context the memory was pinned with."""
        raw = self._raw.raw_context
        return None if raw is None else Context._wrap(raw)

    def raw_slice(self, offset: int, length: int, host_view: bool = True) -> _lib.Buffer:
        return self._raw.raw_slice(offset, length, host_view)

    def describe(self) -> str:
        return self._raw.describe()

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"<cuarrow.cuda.HostBuffer address={self.address:#x} size={self.size} "
            f"is_cpu=True is_mutable={self.is_mutable}>"
        )

    def slice(self, offset: int = 0, length: int | None = None) -> HostBuffer:
        """Zero-copy slice (pyarrow.Buffer.slice's rules)."""
        offset = _index(offset, "offset")
        if offset < 0:
            raise IndexError("Offset must be non-negative")
        if length is None:
            if offset > self.size:
                raise pa.ArrowIndexError("Negative buffer slice length")
            length = self.size - offset
        else:
            length = _index(length, "length")
            if length < 0:
                raise pa.ArrowIndexError("Negative buffer slice length")
            if offset > self.size or length > self.size - offset:
                raise pa.ArrowIndexError("buffer slice would exceed buffer length")
        return HostBuffer._wrap(self.raw_slice(offset, length, True), parent=self)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, length = _slice_bounds(key, self.size)
            return HostBuffer._wrap(self.raw_slice(start, length, True), parent=self)
        index = _normalize_index(key, self.size)
        with memoryview(self) as view, view.cast("B") as octets:
            return octets[index]

    def to_pybytes(self) -> bytes:
        """Return buffer content as Python bytes."""
        return bytes(self)

    def hex(self) -> bytes:
        """Hexadecimal representation of the bytes."""
        return self.to_pybytes().hex().encode()

    def equals(self, other: Any) -> bool:
        """True if `other` (any host buffer-like) holds the same bytes."""
        if isinstance(other, CudaBuffer):
            raise ValueError(
                f"Device on which the data resides differs between buffers: cpu and {other._device_label()}"
            )
        with memoryview(self) as a, memoryview(other) as b:
            return a.nbytes == b.nbytes and a.cast("B") == b.cast("B")

    def __eq__(self, other: Any) -> bool:
        try:
            return self.equals(other)
        except (TypeError, ValueError):
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # Pickles as pyarrow.Buffer's bytes would: pinned memory does not travel.
        return pa.py_buffer, (self.to_pybytes(),)


def new_host_buffer(size: int, device: int = 0) -> HostBuffer:
    """Return buffer with CUDA-accessible memory on CPU host.

    Pinned (page-locked) memory, portable to all contexts and mapped for the
    device, allocated under device `device`'s primary context.
    """
    size = _index(size, "size")
    device = _index(device, "device")
    n = _require_devices()
    if not 0 <= device < n:
        raise pa.ArrowInvalid(f"Invalid Cuda device number {device} (should be between 0 and {n - 1}, inclusive)")
    return HostBuffer._wrap(_lib.allocate_pinned(_lib.Context.get(device), size))
