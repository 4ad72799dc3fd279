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

# This module is the public entry point only: each name lives in a private
# module with one job, listed here bottom up (a module imports only modules
# above it in this list; tests/test_module_layers.py checks it):
#
#   _errors      the exception classes, registered with the binding
#   _driver      driver choice (real or emulated) and what it reports
#   _device      device-type codes (the one place they are defined)
#   _args        argument conversion (integers, indices, streams)
#   _protocols   __cuda_array_interface__ and DLPack, for buffers and arrays
#   _ipc         CUDA IPC memory handles
#   _numba       Numba interop in numba's objects and plain values (numba loaded on use only)
#   _memory      Device, Context, CudaBuffer, HostBuffer, transfer options
#   _streams     Stream, Event
#   _io          BufferReader, BufferWriter
#   _arrays      typed device data (DeviceArray ... DeviceTable)
#   _convert     to_device, from_device, prefetch_to_device
#   ipc          the Arrow IPC format over device memory (public: cuarrow.ipc, also cuda.ipc)
#   _share       sending device objects elsewhere: pickling (a host copy), Dask's serialization,
#                share() / open_shared (another process, zero-copy), the multiprocessing opt-in
#
# Above cuarrow.cuda (importing it, never imported by it): demo (python -m
# cuarrow.demo), _cli (the `cuarrow` command) and __main__ (python -m cuarrow).

# _share registers pickling and (when distributed is imported) Dask's
# serializers; ipc is cuarrow.cuda.ipc, the Arrow IPC format over device memory.
from cuarrow import _share, ipc  # noqa: F401
from cuarrow._arrays import DeviceArray, DeviceBitmap, DeviceChunkedArray, DeviceRecordBatch, DeviceTable
from cuarrow._convert import from_device, prefetch_to_device, to_device
from cuarrow._driver import driver_info, is_emulated, use_emulation, use_emulation_if_no_gpu
from cuarrow._errors import CudaDriverError, CudaError, CudaOutOfMemoryError
from cuarrow._io import BufferReader, BufferWriter
from cuarrow._ipc import IpcMemHandle, _ipc_handle_from_bytes
from cuarrow._memory import (
    Context,
    CudaBuffer,
    Device,
    HostBuffer,
    new_host_buffer,
    pinned_pool_stats,
    set_transfer_options,
    transfer_options,
    trim_pinned_pool,
)
from cuarrow._share import (
    SharedDeviceObject,
    enable_sharing_with_multiprocessing,
    open_shared,
    release_shared_objects,
)
from cuarrow._streams import Event, Stream
from cuarrow.ipc import read_message, read_record_batch, serialize_record_batch

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
    "prefetch_to_device",
    "to_device",
    "from_device",
    "DeviceArray",
    "DeviceChunkedArray",
    "DeviceRecordBatch",
    "DeviceTable",
    "DeviceBitmap",
    "SharedDeviceObject",
    "open_shared",
    "enable_sharing_with_multiprocessing",
    "release_shared_objects",
]

# Public objects say they are cuarrow.cuda's (reprs, help(), pickles by
# reference): where they are defined is an implementation detail.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(("cuarrow._", "cuarrow.ipc")):
        _obj.__module__ = __name__
_ipc_handle_from_bytes.__module__ = __name__  # IpcMemHandle pickles through it
del _name, _obj
