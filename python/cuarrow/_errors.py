"""The exceptions of cuarrow.cuda, and their registration with the binding.

The binding (python/src/errors.cpp) translates the core's typed errors into
these classes; they are handed over once, here, at import.
"""

from __future__ import annotations

import pyarrow as pa

from cuarrow import _cuarrow as _lib


class CudaError(OSError):
    """A CUDA driver call failed.

    An ``OSError``, as pyarrow.cuda's "Cuda error ..." errors are.
    ``code`` is the ``CUresult`` value, ``name`` its name (e.g.
    ``"CUDA_ERROR_INVALID_VALUE"``) and ``operation`` the driver call.
    """

    code: int | None
    name: str | None
    operation: str | None

    def __init__(
        self,
        message: str,
        code: int | None = None,
        name: str | None = None,
        operation: str | None = None,
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
