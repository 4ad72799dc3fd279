"""Arrow data on NVIDIA GPUs: ``pyarrow.cuda``'s API, built on cuarrow.

Code written for ``pyarrow.cuda`` runs unchanged with ``cuarrow.cuda``::

    >>> from cuarrow import cuda
    >>> ctx = cuda.Context(0)
    >>> cuda_buf = ctx.buffer_from_data(np.arange(4, dtype=np.int32))
    >>> np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32)
    array([0, 1, 2, 3], dtype=int32)

The names, argument names, defaults, exception classes and error messages
are pyarrow's.  Where pyarrow.cuda is wrong, this module is right instead:
every position and length is checked against both buffers, negative lengths
and writes into read-only memory are refused, ``BufferWriter`` is
bounds-checked, wrapped contexts report their real device, and device memory
can never be read by host code by accident: a ``CudaBuffer`` is not a
``pyarrow.Buffer`` and exports no buffer protocol, so ``memoryview``,
``bytes()``, ``np.frombuffer`` and pyarrow functions that need host memory
raise instead of crashing.

Beyond pyarrow.cuda: device buffers speak ``__cuda_array_interface__`` (v3)
and DLPack, so Numba, CuPy and PyTorch view them without a copy; copies take
a ``stream=`` (a :class:`Stream` or any object with ``__cuda_stream__``);
CUDA failures raise :class:`CudaError` (an ``OSError`` carrying the CUDA
error code and name), out of memory raises :class:`CudaOutOfMemoryError`
(also a ``MemoryError``).

Typed Arrow data, too: :func:`to_device` copies any Arrow array, chunked
array, record batch or table (anything speaking the Arrow PyCapsule
protocols) to the GPU with its type, :func:`from_device` imports device data
without a copy, and fixed-width device arrays without nulls speak
``__cuda_array_interface__`` and DLPack, so kernels run on them directly::

    >>> typed = cuda.to_device(pa.array(np.arange(4, dtype=np.int32)))
    >>> typed.to_host().equals(pa.array(np.arange(4, dtype=np.int32)))
    True

Importing this module needs no GPU and loads no driver; the first device
call does.  Without a GPU, :func:`use_emulation` (or the environment
variable ``CUARROW_CUDA_DRIVER=emulated``) selects cuarrow's host emulation
of the CUDA driver, a test tool that runs everything on host memory.
"""

from __future__ import annotations

import io
import operator
import os
from typing import Any, Dict, Optional, Tuple

import pyarrow as pa

from cuarrow import _cuarrow as _lib

__all__ = [
    "Context",
    "Device",
    "CudaBuffer",
    "HostBuffer",
    "BufferReader",
    "BufferWriter",
    "new_host_buffer",
    "Stream",
    "Event",
    "CudaError",
    "CudaOutOfMemoryError",
    "CudaDriverError",
    "use_emulation",
    "transfer_options",
    "set_transfer_options",
    "pinned_pool_stats",
    "trim_pinned_pool",
    "use_emulation_if_no_gpu",
    "is_emulated",
    "driver_info",
    "IpcMemHandle",
    "serialize_record_batch",
    "read_message",
    "read_record_batch",
    "to_device",
    "from_device",
    "DeviceArray",
    "DeviceChunkedArray",
    "DeviceRecordBatch",
    "DeviceTable",
    "DeviceBitmap",
]


# ---------------------------------------------------------------------------
# Errors (the C++ layer translates cuarrow's exceptions into these)
# ---------------------------------------------------------------------------


class CudaError(OSError):
    """A CUDA driver call failed.

    An ``OSError``, as pyarrow.cuda's "Cuda error ..." errors are.
    ``code`` is the ``CUresult`` value, ``name`` its name (e.g.
    ``"CUDA_ERROR_INVALID_VALUE"``) and ``operation`` the driver call.
    """

    code: Optional[int]
    name: Optional[str]
    operation: Optional[str]

    def __init__(
        self,
        message: str,
        code: Optional[int] = None,
        name: Optional[str] = None,
        operation: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.operation = operation


class CudaOutOfMemoryError(CudaError, MemoryError):
    """The device (or pinned host memory) has no room for an allocation."""


class CudaDriverError(CudaError):
    """No usable CUDA driver: none installed, too old, or no device.

    ``code`` and ``name`` are None.  Without a GPU, use
    :func:`use_emulation` (or ``CUARROW_CUDA_DRIVER=emulated``) to run on
    cuarrow's host emulation of the driver.
    """


_lib._set_error_types(CudaError, CudaOutOfMemoryError, CudaDriverError, pa.ArrowInvalid)


# ---------------------------------------------------------------------------
# Driver selection
# ---------------------------------------------------------------------------


def use_emulation(devices: Optional[int] = None) -> None:
    """Run on cuarrow's host emulation of the CUDA driver instead of a GPU.

    Must be called before the first device call (it raises RuntimeError if a
    real driver is already in use).  ``devices`` sets how many emulated
    devices there are (default 1, or ``CUARROW_EMULATED_DEVICES``).  The
    emulation is a test and development tool: device memory is host memory
    and no kernel can run (so Numba kernels, CuPy and PyTorch need a GPU).
    """
    if devices is not None:
        os.environ["CUARROW_EMULATED_DEVICES"] = str(operator.index(devices))
    _lib.select_driver("emulated")


def _probe_real_gpus() -> Tuple[int, str]:
    """(number of devices, why none) of the real CUDA driver, asked apart
    from cuarrow's own driver choice, which stays open (the core's
    probe_real_driver)."""
    return _lib.probe_real_driver()


def use_emulation_if_no_gpu(devices: Optional[int] = None) -> Optional[str]:
    """Select the host emulation when this machine has no usable GPU.

    Returns the reason when the emulation was selected, None when the real
    driver will be used.  A driver already chosen by ``CUARROW_CUDA_DRIVER``
    (or loaded) is left alone; then the return value says whether it is the
    emulation.  Call it before the first device call.
    """
    chosen = os.environ.get("CUARROW_CUDA_DRIVER", "")
    if chosen:
        if chosen == "emulated":
            if devices is not None:
                os.environ.setdefault("CUARROW_EMULATED_DEVICES", str(operator.index(devices)))
            return "CUARROW_CUDA_DRIVER=emulated"
        return None
    count, why = _probe_real_gpus()
    if count > 0:
        return None
    use_emulation(devices)
    return why


def is_emulated() -> bool:
    """True when cuarrow runs on its host emulation of the driver (loads the driver)."""
    _lib.load_driver()
    return _lib.driver_is_emulated()


def driver_info() -> Dict[str, Any]:
    """The loaded driver: ``{"path", "version", "emulated", "devices"}`` (loads the driver)."""
    _lib.load_driver()
    return {
        "path": _lib.driver_path(),
        "version": _lib.driver_version(),
        "emulated": _lib.driver_is_emulated(),
        "devices": _device_count(),
    }


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

try:
    _DeviceAllocationType = pa.DeviceAllocationType
except AttributeError:  # pragma: no cover - pyarrow < 15
    _DeviceAllocationType = None


def _device_type(code: int) -> Any:
    return _DeviceAllocationType(code) if _DeviceAllocationType is not None else code


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

    def __init__(self, device_type: Any = 2, device_id: int = 0) -> None:
        self._code = int(device_type)
        self._id = _index(device_id, "device_id")

    @property
    def device_type(self) -> Any:
        return _device_type(self._code)

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
    def context(self) -> "Context":
        """The device's primary context."""
        return Context(self._id)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return (self._code, self._id) == (other._code, other._id)

    def __hash__(self) -> int:
        return hash((Device, self._code, self._id))

    def __repr__(self) -> str:
        kind = {2: "cuda", 3: "cuda_host", 13: "cuda_managed"}.get(self._code, str(self._code))
        return f"<cuarrow.cuda.Device: {kind}:{self._id}>"


def _index(value: Any, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


def _length_arg(value: Any, name: str) -> int:
    """A byte count where -1 means "all"; other negative values are refused."""
    value = _index(value, name)
    if value < -1:
        raise ValueError(f"{name} argument must be non-negative (or -1 for all), got {value}")
    return value


def _stream_arg(stream: Any) -> Tuple[int, int]:
    """(handle, device) of a stream argument; (0, -1) is the legacy default stream."""
    if stream is None:
        return 0, -1
    if isinstance(stream, Stream):
        return stream.handle, stream.device_number
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        try:
            _version, handle = value
            return int(handle), -1
        except (TypeError, ValueError):
            raise TypeError(
                f"{type(stream).__name__}.__cuda_stream__ must give a (version, handle) tuple, got {value!r}"
            ) from None
    if isinstance(stream, bool):
        pass
    elif isinstance(stream, int):
        return stream, -1
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream without __cuda_stream__
        return int(stream.cuda_stream), -1
    elif hasattr(type(stream), "__int__") and not isinstance(stream, float):  # numba-cuda streams
        return int(stream), -1
    raise TypeError(
        "stream must be a cuarrow.cuda.Stream, an object with __cuda_stream__ (CuPy, PyTorch, "
        f"numba-cuda, cuda.core streams), an integer CUstream handle or None, not {type(stream).__name__}"
    )


def _host_nbytes(obj: Any, what: str) -> Tuple[int, bool]:
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


def _device_count() -> int:
    """Number of devices; 0 when the driver's cuInit found none.

    (After cuInit reports CUDA_ERROR_NO_DEVICE, the driver answers every later
    call, cuDeviceGetCount included, with CUDA_ERROR_NOT_INITIALIZED, which
    cuarrow::device_count() does not turn into 0.)
    """
    try:
        return _lib.device_count()
    except CudaError as e:
        if e.name == "CUDA_ERROR_NOT_INITIALIZED":
            return 0
        raise


def _require_devices() -> int:
    n = _device_count()
    if n == 0:
        raise CudaDriverError(f"no CUDA device found (driver {_lib.driver_path()})")
    return n


def _as_context(context: Any) -> "Context":
    if context is None:
        return Context(0)
    if isinstance(context, Context):
        return context
    return Context(_index(context, "context"))


# ---------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------


def transfer_options() -> Dict[str, int]:
    """The options of host<->device transfers in force: ``staging_threshold_bytes``
    (copies from or to ordinary memory at least this large go through the
    pinned staging pipeline; 0 disables it), ``staging_chunk_bytes`` (the
    largest chunk), ``staging_threads`` (device to host),
    ``staging_threads_to_device``, ``pinned_pool_limit_bytes`` (the most pinned
    memory the pool for ``copy_to_host()`` results holds) and
    ``staging_streaming_store_limit_bytes`` (copies to the device up to this
    size fill the staging buffers with non-temporal stores; 0: never)."""
    return dict(_lib.get_transfer_options())


def set_transfer_options(**options: int) -> None:
    """Change some transfer options (names as in :func:`transfer_options`)
    for later copies.  Unknown names raise TypeError; bad values ValueError."""
    current = transfer_options()
    unknown = set(options) - set(current)
    if unknown:
        raise TypeError(f"unknown transfer option(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(current))}")
    current.update(options)
    _lib.set_transfer_options(**current)


def pinned_pool_stats() -> Dict[str, int]:
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
    def _wrap(cls, raw: _lib.Context) -> "Context":
        obj = object.__new__(cls)
        obj._ctx = raw
        return obj

    # -- numba --------------------------------------------------------------
    @staticmethod
    def from_numba(context: Any = None) -> "Context":
        """The Context of a Numba context (default: Numba's current context)."""
        from cuarrow import _numba

        return _numba.from_numba_context(context)

    def to_numba(self) -> Any:
        """Numba's context object for this context (its primary context object
        when this is a primary context)."""
        from cuarrow import _numba

        return _numba.to_numba_context(self)

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
        return Device(2, self.device_number)

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

    def transfer_stats(self) -> Dict[str, Any]:
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

    def synchronize(self) -> None:
        """Block until the device has completed all preceding requested tasks."""
        self._ctx.synchronize()

    def get_device_address(self, address: int) -> int:
        """The device address of memory reachable from this context: itself
        for device memory, the mapped address for pinned or registered host
        memory.  Raises CudaError for memory CUDA does not know."""
        return self._ctx.get_device_address(_index(address, "address"))

    # -- buffers ------------------------------------------------------------
    def new_buffer(self, nbytes: int) -> "CudaBuffer":
        """Return new device buffer of `nbytes` bytes (contents uninitialized).

        The memory comes from ``cuMemAlloc``, as in pyarrow, so that it can be
        shared with other processes (``export_for_ipc``); the buffers that
        copies make (``buffer_from_data``, ``to_device`` ...) come from the
        device's faster stream-ordered pool, which CUDA IPC cannot export.
        """
        nbytes = _index(nbytes, "nbytes")
        return CudaBuffer._wrap(_lib.allocate_device(self._ctx, nbytes, plain=True))

    def foreign_buffer(self, address: int, size: int, base: Any = None) -> "CudaBuffer":
        """A device buffer viewing memory someone else owns.

        The address may be device memory or pinned host memory (anything
        `get_device_address` maps).  `base` (the owner of the memory) is kept
        alive as long as the view, its slices and its DLPack exports are.
        When ``address == size == 0`` a new empty buffer is returned.
        """
        address = _index(address, "address")
        size = _index(size, "size")
        if not address and size == 0:
            return self.new_buffer(0)
        if size < 0:
            raise ValueError(f"size argument must be non-negative, got {size}")
        device_address = self.get_device_address(address)
        return CudaBuffer._wrap(_lib.wrap_device(self._ctx, device_address, size, base, True))

    def buffer_from_data(self, data: Any, offset: int = 0, size: int = -1, *, stream: Any = None) -> "CudaBuffer":
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
        offset = _index(offset, "offset")
        size = _length_arg(size, "size")
        if isinstance(data, CudaBuffer):
            bsize = data.size
        else:
            bsize, _ = _host_nbytes(data, "data")
        if offset < 0 or offset > bsize or (bsize and offset == bsize):
            raise ValueError("offset argument is out-of-range")
        if size == -1:
            size = bsize - offset
        elif offset + size > bsize:
            raise ValueError("requested larger slice than available in device buffer")
        handle, device = _stream_arg(stream)
        result = _lib.allocate_device(self._ctx, size)
        if handle:
            _lib.stream_wait_for_default(self._ctx, handle, device)
        if isinstance(data, CudaBuffer):
            _lib.copy(result, 0, data, offset, size, handle, device)
        else:
            _lib.copy_from_host(result, 0, data, offset, size, handle, device)
        return CudaBuffer._wrap(result)

    def buffer_from_object(self, obj: Any) -> "CudaBuffer":
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
            if int(device_type) in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
                return self._from_dlpack(obj)
        raise pa.ArrowTypeError("cannot create device buffer view from `%s` object" % (type(obj),))

    def _from_cuda_array_interface(self, obj: Any) -> "CudaBuffer":
        # The core's tensor reader checks every field (a mask is refused).
        info = _lib.read_cai(obj.__cuda_array_interface__)
        stream = info["stream"]
        if stream is not None:
            # The producer's work on its stream must be done before the data is used.
            _lib.stream_synchronize(self._ctx, int(stream))
        if info["span_length"] == 0:
            return self.new_buffer(0)
        if not info["contiguous"]:
            raise ValueError("array data is non-contiguous")
        device_address = self.get_device_address(info["data"] + info["span_offset"])
        return CudaBuffer._wrap(
            _lib.wrap_device(self._ctx, device_address, info["span_length"], obj, not info["read_only"])
        )

    def _from_dlpack(self, obj: Any) -> "CudaBuffer":
        # Ask the producer to order its work before our legacy default stream.
        try:
            capsule = obj.__dlpack__(stream=1, max_version=(1, 0))
        except TypeError:  # a producer without max_version (DLPack < 1.0)
            capsule = obj.__dlpack__(stream=1)
        return CudaBuffer._wrap(_lib.from_dlpack(capsule, self._ctx))

    # -- IPC ------------------------------------------------------------------
    def open_ipc_buffer(self, ipc_handle: "IpcMemHandle") -> "CudaBuffer":
        """Open device memory another process exported with ``export_for_ipc``.

        The buffer is memory of this context's device (whatever device the
        exporter used), of exactly the exported range (slices keep their
        offset), mutable; the mapping is closed when the last buffer and
        slice using it is gone, and opening the same handle again shares it.
        A handle of an empty buffer gives an empty buffer.  Opening a handle
        in the process that exported it raises ``ArrowInvalid`` (IPC handles
        are for other processes); a handle whose exporter has exited, or
        that is not a CUDA IPC handle, raises ``CudaError``.
        """
        if not isinstance(ipc_handle, IpcMemHandle):
            raise TypeError("expected IpcMemHandle instance, got %s" % (type(ipc_handle).__name__,))
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


# ---------------------------------------------------------------------------
# Device buffers
# ---------------------------------------------------------------------------


def _normalize_index(index: Any, length: int) -> int:
    index = operator.index(index)
    if index < 0:
        index += length
        if index < 0:
            raise IndexError("index out of bounds")
    elif index >= length:
        raise IndexError("index out of bounds")
    return index


def _slice_bounds(key: slice, length: int) -> Tuple[int, int]:
    if (key.step or 1) != 1:
        raise IndexError("only slices with step 1 supported")
    start, stop, _ = key.indices(length)
    return start, max(stop - start, 0)


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

    @classmethod
    def _wrap(cls, raw: _lib.Buffer, parent: Optional["CudaBuffer"] = None) -> "CudaBuffer":
        obj = cls.__new__(cls)
        _lib.Buffer.__init__(obj, raw, False)
        obj._parent = parent
        return obj

    # -- constructors ---------------------------------------------------------
    @staticmethod
    def from_buffer(buf: Any) -> "CudaBuffer":
        """Convert back generic buffer into CudaBuffer.

        A CudaBuffer is returned as is; a pyarrow.Buffer is always host memory
        here (cuarrow never hands device memory to pyarrow), so it raises
        ``ArrowTypeError('buffer is not backed by a CudaBuffer')``.
        """
        if isinstance(buf, CudaBuffer):
            return buf
        raise pa.ArrowTypeError("buffer is not backed by a CudaBuffer")

    @staticmethod
    def from_numba(mem: Any) -> "CudaBuffer":
        """A CudaBuffer view of Numba device memory (a MemoryPointer, e.g. a
        device array's ``gpu_data``); `mem` is kept alive by the view."""
        from cuarrow import _numba

        return _numba.from_numba(mem)

    def to_numba(self) -> Any:
        """A Numba MemoryPointer viewing this buffer (it keeps the buffer alive),
        for ``DeviceNDArray(shape, strides, dtype, gpu_data=buf.to_numba())``."""
        from cuarrow import _numba

        return _numba.to_numba(self)

    # -- properties -----------------------------------------------------------
    @property
    def context(self) -> Context:
        """Returns the CUDA driver context of this buffer."""
        return Context._wrap(self.raw_context)

    @property
    def parent(self) -> Optional["CudaBuffer"]:
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
        return _device_type(self.raw_device_type)

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
        kind = {2: "cuda", 3: "cuda_host", 13: "cuda_managed"}.get(self.raw_device_type, "cpu")
        return f"{kind}:{self.device_id}"

    # -- views ----------------------------------------------------------------
    def slice(self, offset: int = 0, length: Optional[int] = None) -> "CudaBuffer":
        """Zero-copy slice of device buffer.

        A `length` past the end is clamped to the available bytes (as in
        pyarrow); a negative one is refused.
        """
        offset = _index(offset, "offset")
        size = self.size
        if offset < 0 or (size and offset >= size) or (not size and offset):
            raise ValueError("offset argument is out-of-range")
        if length is None:
            length = size - offset
        else:
            length = _index(length, "length")
            if length < 0:
                raise ValueError(f"length argument must be non-negative, got {length}")
            length = min(length, size - offset)
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
        memory_pool: Optional[pa.MemoryPool] = None,
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
            return pa.py_buffer(_lib.copy_to_new_host(self, 0, -1, 0, -1))
        if buf is not None and position == 0 and nbytes == -1 and stream is None and not isinstance(buf, CudaBuffer):
            # The common case in one call; anything unusual (read-only or
            # non-contiguous memory ...) takes the checked path for its message.
            try:
                _lib.copy_into_host(buf, self)
                return buf
            except (TypeError, BufferError):
                pass
        size = self.size
        position = _index(position, "position")
        nbytes = _length_arg(nbytes, "nbytes")
        if position < 0 or (size and position > size) or (size == 0 and position != 0):
            raise ValueError("position argument is out-of-range")
        if buf is None:
            if nbytes == -1:
                n = size - position
            elif nbytes > size - position:
                raise ValueError("requested more to copy than available from device buffer")
            else:
                n = nbytes
            if memory_pool is None and not resizable:
                # Pinned memory from cuarrow's result pool (returned to the
                # pool when the pyarrow.Buffer is freed): the DMA engine
                # writes it at the link's speed.
                handle, device = _stream_arg(stream)
                return pa.py_buffer(_lib.copy_to_new_host(self, position, n, handle, device))
            out = pa.allocate_buffer(n, memory_pool=memory_pool, resizable=resizable)
        else:
            bsize, read_only = _host_nbytes(buf, "buf")
            if nbytes == -1:
                n = min(size - position, bsize)
            elif nbytes > bsize:
                raise ValueError("requested copy does not fit into host buffer")
            elif nbytes > size - position:
                raise ValueError("requested more to copy than available from device buffer")
            else:
                n = nbytes
            if read_only:
                raise ValueError("the host buffer (buf) is read-only; pass writable memory")
            out = buf
        handle, device = _stream_arg(stream)
        _lib.copy_to_host(out, 0, self, position, n, handle, device)
        return out

    def copy_from_host(self, data: Any, position: int = 0, nbytes: int = -1, *, stream: Any = None) -> int:
        """Copy data from host to device at `position`; returns the number of bytes copied.

        `data` is any object supporting the buffer protocol.  ``nbytes=-1``
        copies as much as fits.  Synchronous (see `copy_to_host` for `stream`).
        """
        size = self.size
        position = _index(position, "position")
        nbytes = _length_arg(nbytes, "nbytes")
        if position < 0 or position > size:
            raise ValueError("position argument is out-of-range")
        bsize, _ = _host_nbytes(data, "data")
        if nbytes == -1:
            n = min(size - position, bsize)
        elif nbytes > bsize:
            raise ValueError("requested more to copy than available from host buffer")
        elif nbytes > size - position:
            raise ValueError("requested more to copy than available in device buffer")
        else:
            n = nbytes
        handle, device = _stream_arg(stream)
        _lib.copy_from_host(self, position, data, 0, n, handle, device)
        return n

    def copy_from_device(self, buf: "CudaBuffer", position: int = 0, nbytes: int = -1, *, stream: Any = None) -> int:
        """Copy data from another device buffer (of any device) at `position`;
        returns the number of bytes copied.  Synchronous (see `copy_to_host`
        for `stream`)."""
        if not isinstance(buf, CudaBuffer):
            raise TypeError("expected CudaBuffer instance, got %s" % (type(buf).__name__,))
        size = self.size
        position = _index(position, "position")
        nbytes = _length_arg(nbytes, "nbytes")
        if position < 0 or position > size:
            raise ValueError("position argument is out-of-range")
        if nbytes == -1:
            n = min(size - position, buf.size)
        elif nbytes > buf.size:
            raise ValueError("requested more to copy than available from device buffer")
        elif nbytes > size - position:
            raise ValueError("requested more to copy than available in device buffer")
        else:
            n = nbytes
        handle, device = _stream_arg(stream)
        _lib.copy(self, position, buf, 0, n, handle, device)
        return n

    def to_pybytes(self) -> bytes:
        """Return device buffer content as Python bytes (a host copy)."""
        return self.copy_to_host().to_pybytes()

    def equals(self, other: "CudaBuffer") -> bool:
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
        raise TypeError("a CudaBuffer cannot be pickled (it holds device memory); pickle buf.copy_to_host() instead")

    def export_for_ipc(self) -> "IpcMemHandle":
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
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA Array Interface v3: a 1-D uint8 array over the buffer's bytes.

        ``stream`` is 1 (the legacy default stream, where cuarrow allocates
        and copies): consumers order their work after it.
        """
        return {
            "shape": (self.size,),
            "typestr": "|u1",
            "descr": [("", "|u1")],
            "data": (self.address, not self.is_mutable),
            "strides": None,
            "version": 3,
            "stream": 1,
        }

    def __dlpack_device__(self) -> Tuple[int, int]:
        kind = self.raw_device_type
        if kind == 3:  # kDLCUDAHost
            return (3, 0)
        return (kind, self.device_id)

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """DLPack export: a 1-D uint8 tensor over the buffer's bytes.

        `stream` is the consumer's stream (an integer, DLPack's convention:
        None or 1 the legacy default stream, 2 the per-thread default stream,
        -1 no synchronization); it is made to wait for cuarrow's work.  The
        capsule keeps the memory alive.  ``copy=True`` exports a device copy.
        """
        if dl_device is not None and tuple(int(x) for x in dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"cannot export a CudaBuffer on {self.__dlpack_device__()} to DLPack device {tuple(dl_device)} "
                "(cuarrow does not copy across devices in __dlpack__)"
            )
        source: _lib.Buffer = self
        copied = False
        if copy and self.size:
            source = _lib.allocate_device(self.raw_context, self.size)
            _lib.copy(source, 0, self, 0, self.size)
            copied = True
        if stream is not None and stream != -1:
            stream = _index(stream, "stream")
            if stream == 0:
                raise ValueError("stream 0 is ambiguous for CUDA in DLPack; pass 1 for the legacy default stream")
            if stream != 1 and self.raw_context is not None:
                _lib.stream_wait_for_default(self.raw_context, stream)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _lib.to_dlpack(source, versioned, copied)


def _describe_host(obj: Any) -> str:
    if isinstance(obj, (pa.Buffer, HostBuffer)) or hasattr(obj, "__buffer__"):
        return "cpu"
    return type(obj).__name__


# ---------------------------------------------------------------------------
# Pinned host buffers
# ---------------------------------------------------------------------------


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
    if not (
        d[3] == s[3] != 0
        and d[4] == d[5] == d[6] == d[7] == 0
        and s[4] != 0
        and s[6] == src.size
        and s[7] == 1
    ):
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
        raise TypeError(
            "Do not call HostBuffer's constructor directly, use `cuda.new_host_buffer` function instead."
        )

    @classmethod
    def _wrap(cls, raw: _lib.Buffer, parent: Optional["HostBuffer"] = None) -> "HostBuffer":
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
    def parent(self) -> Optional["HostBuffer"]:
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
        return _device_type(self._raw.raw_device_type)

    @property
    def device(self) -> Any:
        """The CPU device (as pyarrow.cuda's HostBuffer)."""
        return pa.default_cpu_memory_manager().device

    @property
    def memory_manager(self) -> Any:
        """The default CPU memory manager (as pyarrow.cuda's HostBuffer)."""
        return pa.default_cpu_memory_manager()

    @property
    def context(self) -> Optional[Context]:
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

    def slice(self, offset: int = 0, length: Optional[int] = None) -> "HostBuffer":
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

    def __reduce_ex__(self, protocol: int) -> Any:
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


# ---------------------------------------------------------------------------
# Streams and events
# ---------------------------------------------------------------------------


class Stream(_lib.Stream):
    """A CUDA stream of `context` (a Context, a device number, or None for device 0).

    Non-blocking by default (it does not synchronize with the legacy default
    stream).  Pass it as ``stream=`` to copies; other libraries take it
    through ``__cuda_stream__`` (e.g. ``cupy.cuda.ExternalStream(s.handle)``).
    """

    def __init__(self, context: Any = None, *, non_blocking: bool = True) -> None:
        super().__init__(_as_context(context)._ctx, non_blocking)

    @property
    def context(self) -> Context:
        return Context._wrap(self.raw_context)

    @property
    def device_number(self) -> int:
        return self.raw_context.device_number

    def __cuda_stream__(self) -> Tuple[int, int]:
        """The CUDA stream protocol: ``(version, handle)``."""
        return (0, self.handle)

    def wait_event(self, event: "Event") -> None:
        """Make work queued later on this stream wait for `event`."""
        self.wait(event)

    def record(self, event: Optional["Event"] = None) -> "Event":
        """Record an event (a new one by default) capturing the work queued so far."""
        if event is None:
            event = Event(self.context)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.Stream handle={self.handle:#x} device_number={self.device_number}>"


class Event(_lib.Event):
    """A CUDA event of `context` (timing disabled unless ``timing=True``)."""

    def __init__(self, context: Any = None, *, timing: bool = False) -> None:
        super().__init__(_as_context(context)._ctx, timing)

    def record(self, stream: Any = None) -> None:  # type: ignore[override]
        """Capture the work queued so far on `stream` (default: the legacy default stream)."""
        handle, device = _stream_arg(stream)
        super().record(handle, device)

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to `end` (both recorded, completed, with timing)."""
        return end.elapsed_ms_since(self)

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.Event handle={self.handle:#x}>"


# ---------------------------------------------------------------------------
# Reader and writer
# ---------------------------------------------------------------------------


def _check_device_buffer(obj: Any) -> "CudaBuffer":
    if not isinstance(obj, CudaBuffer):
        raise TypeError("expected CudaBuffer instance, got %s" % (type(obj).__name__,))
    return obj


class BufferReader(io.RawIOBase):
    """File interface for zero-copy read from CUDA buffers.

    ``read``/``readinto``/``read_at`` copy device bytes to host memory;
    ``read_buffer`` returns a zero-copy device slice.
    """

    def __init__(self, obj: CudaBuffer) -> None:
        super().__init__()
        self.buffer = _check_device_buffer(obj)
        self._position = 0

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed BufferReader")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    @property
    def mode(self) -> str:
        return "rb"

    def size(self) -> int:
        return self.buffer.size

    def tell(self) -> int:
        self._check_open()
        return self._position

    def seek(self, position: int, whence: int = 0) -> int:
        self._check_open()
        position = _index(position, "position")
        if whence == 0:
            target = position
        elif whence == 1:
            target = self._position + position
        elif whence == 2:
            target = self.buffer.size + position
        else:
            raise ValueError(f"Invalid value of whence: {whence}")
        if target < 0 or target > self.buffer.size:
            raise OSError("Seek out of bounds")
        self._position = target
        return target

    def _count(self, nbytes: Optional[int]) -> int:
        remaining = self.buffer.size - self._position
        if nbytes is None or nbytes == -1:
            return remaining
        nbytes = _index(nbytes, "nbytes")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative (or -1/None for all), got {nbytes}")
        return min(nbytes, remaining)

    def read(self, nbytes: Optional[int] = None) -> bytes:  # type: ignore[override]
        """Read up to `nbytes` (default: all remaining) into host bytes."""
        self._check_open()
        n = self._count(nbytes)
        out = bytearray(n)
        if n:
            _lib.copy_to_host(out, 0, self.buffer, self._position, n)
        self._position += n
        return bytes(out)

    def readall(self) -> bytes:
        return self.read()

    def read_at(self, nbytes: int, offset: int) -> bytes:
        """Read `nbytes` at `offset` without moving the position (short at the end)."""
        self._check_open()
        offset = _index(offset, "offset")
        nbytes = _index(nbytes, "nbytes")
        if offset < 0 or offset > self.buffer.size:
            raise OSError("Read out of bounds")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        n = min(nbytes, self.buffer.size - offset)
        out = bytearray(n)
        if n:
            _lib.copy_to_host(out, 0, self.buffer, offset, n)
        return bytes(out)

    def readinto(self, b: Any) -> int:  # type: ignore[override]
        """Read into writable host memory `b`; returns the number of bytes read."""
        self._check_open()
        bsize, read_only = _host_nbytes(b, "b")
        if read_only:
            raise ValueError("readinto needs a writable buffer")
        n = min(bsize, self.buffer.size - self._position)
        if n:
            _lib.copy_to_host(b, 0, self.buffer, self._position, n)
        self._position += n
        return n

    def read_buffer(self, nbytes: Optional[int] = None) -> CudaBuffer:
        """A zero-copy device slice of up to `nbytes` (default: all remaining) from the position."""
        self._check_open()
        n = self._count(nbytes)
        out = CudaBuffer._wrap(self.buffer.raw_slice(self._position, n), parent=self.buffer)
        self._position += n
        return out

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.BufferReader size={self.buffer.size} position={self._position}>"


class BufferWriter(io.RawIOBase):
    """File interface for writing to CUDA buffers.

    Unbuffered by default; set ``buffer_size`` to stage small writes in a
    pinned host buffer.  Writes past the end of the device buffer raise
    OSError (nothing is written).  The device buffer must be mutable.
    """

    def __init__(self, buffer: CudaBuffer) -> None:
        super().__init__()
        buffer = _check_device_buffer(buffer)
        if not buffer.is_mutable:
            raise ValueError("BufferWriter needs a mutable CudaBuffer; this one is read-only")
        self.buffer = buffer
        self._position = 0
        self._staging: Optional[HostBuffer] = None
        self._staged = 0  # bytes in the staging buffer, destined for position - staged

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("Operation on closed BufferWriter")

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    @property
    def mode(self) -> str:
        return "wb"

    def size(self) -> int:
        return self.buffer.size

    def tell(self) -> int:
        self._check_open()
        return self._position

    @property
    def buffer_size(self) -> int:
        """Size of the host (pinned) staging buffer; 0 for unbuffered."""
        return 0 if self._staging is None else self._staging.size

    @buffer_size.setter
    def buffer_size(self, buffer_size: int) -> None:
        buffer_size = _index(buffer_size, "buffer_size")
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be non-negative, got {buffer_size}")
        self.flush()
        if buffer_size == 0:
            self._staging = None
        else:
            self._staging = new_host_buffer(buffer_size, device=self.buffer.device_id)

    @property
    def num_bytes_buffered(self) -> int:
        """Bytes staged on the host, not yet on the device."""
        return self._staged

    def flush(self) -> None:
        """Copy staged bytes to the device."""
        if self.closed:
            return
        if self._staged:
            _lib.copy(self.buffer, self._position - self._staged, self._staging.raw, 0, self._staged)
            self._staged = 0

    def _check_room(self, position: int, nbytes: int) -> None:
        if position < 0 or nbytes > self.buffer.size - position:
            raise OSError(
                f"Write out of bounds (offset = {position}, size = {nbytes}) in device buffer of size "
                f"{self.buffer.size}"
            )

    def write(self, data: Any) -> int:  # type: ignore[override]
        """Write host data at the position; returns the number of bytes written."""
        self._check_open()
        nbytes, _ = _host_nbytes(data, "data")
        if nbytes == 0:
            return 0
        self._check_room(self._position, nbytes)
        staging = self._staging
        if staging is not None and self._staged + nbytes < staging.size:
            _lib.copy_from_host(staging.raw, self._staged, data, 0, nbytes)
            self._staged += nbytes
        else:
            self.flush()
            _lib.copy_from_host(self.buffer, self._position, data, 0, nbytes)
        self._position += nbytes
        return nbytes

    def writeat(self, position: int, data: Any) -> None:
        """Write data to buffer starting from position."""
        self._check_open()
        position = _index(position, "position")
        if position < 0 or position > self.buffer.size:
            raise OSError("position out of bounds")
        self.flush()
        self._position = position
        self.write(data)

    def seek(self, position: int, whence: int = 0) -> int:
        self._check_open()
        position = _index(position, "position")
        if whence == 0:
            target = position
        elif whence == 1:
            target = self._position + position
        elif whence == 2:
            target = self.buffer.size + position
        else:
            raise ValueError(f"Invalid value of whence: {whence}")
        if target < 0 or target > self.buffer.size:
            raise OSError("position out of bounds")
        self.flush()
        self._position = target
        return target

    def close(self) -> None:
        if not self.closed:
            self.flush()
        super().close()

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.BufferWriter size={self.buffer.size} position={self._position}>"


# ---------------------------------------------------------------------------
# IPC: memory handles between processes, Arrow IPC messages
# ---------------------------------------------------------------------------


class IpcMemHandle:
    """A CUDA IPC handle of device memory, made by ``CudaBuffer.export_for_ipc``
    or read by ``IpcMemHandle.from_buffer``.

    It names the allocation (the driver's handle), the buffer's ``offset`` in
    it, its ``size`` and the exporter's ``device_number``.  A handle made by
    ``export_for_ipc`` keeps the exported memory allocated while it lives; one
    read from bytes keeps nothing alive.  Pickling sends the serialized bytes.
    """

    __slots__ = ("_handle", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Do not call IpcMemHandle's constructor directly, use `CudaBuffer.export_for_ipc` or "
            "`IpcMemHandle.from_buffer` instead."
        )

    @classmethod
    def _wrap(cls, raw: Any) -> "IpcMemHandle":
        obj = object.__new__(cls)
        obj._handle = raw
        return obj

    @staticmethod
    def from_buffer(opaque_handle: Any) -> "IpcMemHandle":
        """Read a serialized handle from host bytes (a ``pyarrow.Buffer``,
        ``bytes`` or any buffer-protocol object): cuarrow's format
        (``serialize()``) or pyarrow.cuda's (72 bytes, 8 for an empty buffer;
        offset 0).  Malformed bytes raise ``ArrowInvalid`` saying what is
        wrong; only the given bytes are read."""
        if isinstance(opaque_handle, CudaBuffer):
            raise TypeError(
                "IpcMemHandle.from_buffer needs the serialized handle in host memory, but this CudaBuffer is device "
                "memory; copy it to the host first (copy_to_host())"
            )
        try:
            with memoryview(opaque_handle) as view:
                data = view.tobytes()
        except TypeError:
            raise TypeError(
                "IpcMemHandle.from_buffer needs the serialized handle as bytes-like host memory (pyarrow.Buffer, "
                f"bytes, bytearray ...), not {type(opaque_handle).__name__}"
            ) from None
        return IpcMemHandle._wrap(_lib.IpcMemoryHandle.deserialize(data))

    def serialize(self, pool: Optional[pa.MemoryPool] = None) -> pa.Buffer:
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
        return (
            f"<cuarrow.cuda.IpcMemHandle size={self.size} offset={self.offset} device_number={self.device_number}>"
        )


def _ipc_handle_from_bytes(data: bytes) -> IpcMemHandle:
    """Unpickles an IpcMemHandle."""
    return IpcMemHandle.from_buffer(data)


def _check_context(ctx: Any) -> Context:
    if not isinstance(ctx, Context):
        raise TypeError("expected Context instance, got %s" % (type(ctx).__name__,))
    return ctx


class _HostStream(io.RawIOBase):
    """A BufferReader seen by pyarrow as an ordinary host file: reads copy
    device bytes to the host.  (pyarrow's Python file wrapper would call
    BufferReader.read_buffer() and get device memory, which it must not
    read.)  Reading advances the underlying reader."""

    def __init__(self, reader: "BufferReader") -> None:
        super().__init__()
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, nbytes: Optional[int] = -1) -> bytes:  # type: ignore[override]
        return self._reader.read(nbytes)

    def readinto(self, b: Any) -> int:  # type: ignore[override]
        return self._reader.readinto(b)

    def seek(self, position: int, whence: int = 0) -> int:
        return self._reader.seek(position, whence)

    def tell(self) -> int:
        return self._reader.tell()

    def size(self) -> int:
        return self._reader.size()


def serialize_record_batch(batch: Any, ctx: Any) -> CudaBuffer:
    """Write a record batch as one Arrow IPC message into device memory of `ctx`."""
    ctx = _check_context(ctx)
    if not isinstance(batch, pa.RecordBatch):
        raise TypeError("expected RecordBatch instance, got %s" % (type(batch).__name__,))
    return ctx.buffer_from_data(batch.serialize())


def read_message(source: Any, pool: Any = None) -> Any:
    """Read one Arrow IPC message from a CudaBuffer or a BufferReader.

    The message's metadata and body are copied to host memory: the stock
    pyarrow wheel cannot hold buffers that stay on a CUDA device (pyarrow.cuda
    keeps the body on the device).  From a BufferReader, reading starts at
    the reader's position and advances it past the message.
    """
    if isinstance(source, CudaBuffer):
        source = BufferReader(source)
    elif not isinstance(source, BufferReader):
        raise TypeError("expected CudaBuffer or BufferReader instance, got %s" % (type(source).__name__,))
    return pa.ipc.read_message(_HostStream(source))


def read_record_batch(buffer: Any, schema: Any, *, dictionary_memo: Any = None, pool: Any = None) -> Any:
    """Read a record batch from an Arrow IPC message held in a CudaBuffer.

    The batch is returned in host memory (a copy), for the reason given in
    `read_message`.
    """
    if not isinstance(buffer, CudaBuffer):
        raise TypeError("expected CudaBuffer instance, got %s" % (type(buffer).__name__,))
    return pa.ipc.read_record_batch(buffer.copy_to_host(), schema, dictionary_memo=dictionary_memo)


# ---------------------------------------------------------------------------
# Typed Arrow data on the GPU (cuarrow/_arrays.py; imported last: it builds
# on the classes above)
# ---------------------------------------------------------------------------

from cuarrow._arrays import (  # noqa: E402
    DeviceArray,
    DeviceBitmap,
    DeviceChunkedArray,
    DeviceRecordBatch,
    DeviceTable,
    from_device,
    to_device,
)
