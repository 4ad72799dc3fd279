"""Which CUDA driver cuarrow uses (the real one or the host emulation), and
what it reports (devices, version)."""

from __future__ import annotations

import operator
import os
from typing import Any

from cuarrow import _cuarrow as _lib
from cuarrow._errors import CudaDriverError, CudaError


def use_emulation(devices: int | None = None) -> None:
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


def _probe_real_gpus() -> tuple[int, str]:
    """(number of devices, why none) of the real CUDA driver, asked apart
    from cuarrow's own driver choice, which stays open (the core's
    probe_real_driver)."""
    return _lib.probe_real_driver()


def use_emulation_if_no_gpu(devices: int | None = None) -> str | None:
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


def driver_info() -> dict[str, Any]:
    """The loaded driver: ``{"path", "version", "emulated", "devices"}`` (loads the driver)."""
    _lib.load_driver()
    return {
        "path": _lib.driver_path(),
        "version": _lib.driver_version(),
        "emulated": _lib.driver_is_emulated(),
        "devices": _device_count(),
    }


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
