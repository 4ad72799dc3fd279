"""Numba (numba-cuda) interop for cuarrow.cuda, imported only when used.

numba-cuda has changed its handle types over time: contexts and pointers
were ctypes objects (``c_void_p`` with ``.value``), then NVIDIA
``cuda.bindings`` objects (``CUcontext``, ``CUdeviceptr``, read with
``int()``); some versions mix the two.  Everything here reads and makes
handles the way the installed numba does, so that the page's
``DeviceNDArray(..., gpu_data=cuda_buf.to_numba())`` keeps working.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cuarrow._memory import Context, CudaBuffer


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


def to_numba_context(ctx: Context) -> Any:
    """Numba's context object for a cuarrow Context."""
    import numba.cuda

    gpu = numba.cuda.gpus[ctx.device_number]
    primary = gpu.get_primary_context()
    if handle_value(primary.handle) == ctx.handle:
        # The usual case: both sides use the device's primary context, so
        # numba's own context object is the right one (its memory manager,
        # its streams, its kernels all apply).
        return primary
    # A non-primary context: wrap its handle the way numba wraps its own.
    driver = _driver_module()
    if isinstance(primary.handle, ctypes.c_void_p):
        handle = ctypes.c_void_p(ctx.handle)
    else:
        binding = _bindings()
        handle = binding.CUcontext(ctx.handle) if binding is not None else ctypes.c_void_p(ctx.handle)
    device = getattr(gpu, "_device", gpu)
    context = driver.Context(device, handle)
    context.deallocations = _NoDeallocations()
    return context


def from_numba_context(context: Any = None) -> Context:
    from cuarrow._memory import Context

    if context is None:
        import numba.cuda

        context = numba.cuda.current_context()
    return Context(device_number=int(context.device.id), handle=handle_value(context.handle))


def to_numba(buf: CudaBuffer) -> Any:
    """A numba MemoryPointer viewing the buffer; it keeps the buffer alive."""
    from numba.cuda.cudadrv.driver import MemoryPointer

    pointer = device_pointer(buf.address)
    context = buf.context.to_numba()
    try:
        mem = MemoryPointer(context, pointer, buf.size, owner=buf)
    except TypeError:
        # numba-cuda versions whose MemoryPointer takes no context.
        mem = MemoryPointer(pointer=pointer, size=buf.size, owner=buf)
    # Not every numba-cuda keeps `owner` referenced: hold the buffer here too,
    # so that device arrays built on this pointer (and their views, which
    # reference it) keep the memory alive.
    mem._cuarrow_buffer = buf
    return mem


def from_numba(mem: Any) -> CudaBuffer:
    """A CudaBuffer viewing numba device memory (a MemoryPointer, the
    ``gpu_data`` of a device array, or a device array itself)."""
    from cuarrow._memory import Context

    if not hasattr(mem, "device_pointer_value") and hasattr(mem, "gpu_data"):
        mem = mem.gpu_data
    ctx = Context.from_numba(mem.context)
    pointer = mem.device_pointer_value
    if not pointer and mem.size == 0:
        return ctx.new_buffer(0)
    return ctx.foreign_buffer(pointer, mem.size, base=mem)
