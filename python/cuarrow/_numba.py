"""Numba (numba-cuda) interop for cuarrow.cuda; numba is imported only when used.

numba-cuda has changed its handle types over time: contexts and pointers
were ctypes objects (``c_void_p`` with ``.value``), then NVIDIA
``cuda.bindings`` objects (``CUcontext``, ``CUdeviceptr``, read with
``int()``); some versions mix the two.  Everything here reads and makes
handles the way the installed numba does, so that the page's
``DeviceNDArray(..., gpu_data=cuda_buf.to_numba())`` keeps working.

It deals in numba's objects and plain values (device numbers, handles,
addresses) and imports no other cuarrow module: Context and CudaBuffer
(cuarrow._memory) build their own objects from what it returns.
"""

from __future__ import annotations

import ctypes
from typing import Any


def numpy_compat_for_numba() -> bool:
    """Work around numba-cuda releases (0.30 among them) that fail to compile
    any kernel under NumPy >= 2.5, which removed ``numpy.row_stack``: numba's
    array support registers an overload for it at import.  Aliases it to
    ``numpy.vstack`` (what it always was) if missing; returns True when it
    did.  Only programs call this (the demo, the tests), never the library."""
    import numpy as np

    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack  # type: ignore[attr-defined, unused-ignore]  # gone from some numpy versions
    return True


def handle_value(handle: Any) -> int:
    """The integer value of a numba handle (ctypes or cuda.bindings)."""
    if handle is None:
        return 0
    if isinstance(handle, ctypes.c_void_p):
        return int(handle.value or 0)
    value = getattr(handle, "value", None)
    if isinstance(value, int):
        return value
    return int(handle)


def _driver_module():
    from numba.cuda.cudadrv import driver

    return driver


def _bindings():
    driver = _driver_module()
    binding = getattr(driver, "binding", None)
    if binding is not None:
        return binding
    try:
        from cuda.bindings import driver as binding
    except ImportError:  # older cuda-python
        try:
            from cuda import cuda as binding  # type: ignore[no-redef, unused-ignore]  # redefined if cuda-python ships types
        except ImportError:
            return None
    return binding


def device_pointer(address: int) -> Any:
    """A device pointer of the type numba's own allocations carry."""
    driver = _driver_module()
    if getattr(driver, "USE_NV_BINDING", True):
        binding = _bindings()
        if binding is not None:
            return binding.CUdeviceptr(address)
    return ctypes.c_void_p(address)


class _NoDeallocations:
    """Stands in for a numba context's pending deallocations: cuarrow, not
    numba, owns a context wrapped by Context.to_numba()."""

    def add_item(self, *args: Any, **kwargs: Any) -> None:
        pass

    def clear(self) -> None:
        pass


def to_numba_context(device_number: int, handle: int) -> Any:
    """Numba's context object for the context `handle` of device `device_number`."""
    import numba.cuda

    gpu = numba.cuda.gpus[device_number]
    primary = gpu.get_primary_context()
    if handle_value(primary.handle) == handle:
        # The usual case: both sides use the device's primary context, so
        # numba's own context object is the right one (its memory manager,
        # its streams, its kernels all apply).
        return primary
    # A non-primary context: wrap its handle the way numba wraps its own.
    driver = _driver_module()
    if isinstance(primary.handle, ctypes.c_void_p):
        numba_handle = ctypes.c_void_p(handle)
    else:
        binding = _bindings()
        numba_handle = binding.CUcontext(handle) if binding is not None else ctypes.c_void_p(handle)
    device = getattr(gpu, "_device", gpu)
    context = driver.Context(device, numba_handle)
    context.deallocations = _NoDeallocations()
    return context


def from_numba_context(context: Any = None) -> tuple[int, int]:
    """(device number, context handle) of a numba context (default: numba's
    current context)."""
    if context is None:
        import numba.cuda

        context = numba.cuda.current_context()
    return int(context.device.id), handle_value(context.handle)


def memory_pointer(context: Any, address: int, size: int, owner: Any) -> Any:
    """A numba MemoryPointer in numba context `context` viewing `size` bytes
    at `address`; it keeps `owner` alive."""
    from numba.cuda.cudadrv.driver import MemoryPointer

    pointer = device_pointer(address)
    try:
        mem = MemoryPointer(context, pointer, size, owner=owner)
    except TypeError:
        # numba-cuda versions whose MemoryPointer takes no context.
        mem = MemoryPointer(pointer=pointer, size=size, owner=owner)
    # Not every numba-cuda keeps `owner` referenced: hold it here too, so
    # that device arrays built on this pointer (and their views, which
    # reference it) keep the memory alive.
    mem._cuarrow_buffer = owner
    return mem


def from_numba(mem: Any) -> tuple[Any, int, int, Any]:
    """(numba context, address, size, owner) of numba device memory (a
    MemoryPointer, the ``gpu_data`` of a device array, or a device array
    itself); the owner is what keeps the memory alive."""
    if not hasattr(mem, "device_pointer_value") and hasattr(mem, "gpu_data"):
        mem = mem.gpu_data
    return mem.context, mem.device_pointer_value, mem.size, mem
