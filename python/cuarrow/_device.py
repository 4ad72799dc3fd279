"""Where memory is: the device-type codes, defined here and nowhere else.

The codes are the Arrow C Device Data Interface's ``ARROW_DEVICE_*`` values,
which are also DLPack's ``DLDeviceType`` values and
``pyarrow.DeviceAllocationType``'s (and the core's ``cuarrow::device_type``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

CPU = 1  # ordinary host memory
CUDA = 2  # device memory
CUDA_HOST = 3  # pinned host memory
CUDA_MANAGED = 13  # managed (unified) memory

# The device-type codes of memory a CUDA device reaches (DLPack's kDLCUDA,
# kDLCUDAHost, kDLCUDAManaged).
CUDA_CODES = (CUDA, CUDA_HOST, CUDA_MANAGED)

_NAMES = {CPU: "cpu", CUDA: "cuda", CUDA_HOST: "cuda_host", CUDA_MANAGED: "cuda_managed"}

try:
    _DeviceAllocationType = pa.DeviceAllocationType
except AttributeError:  # pragma: no cover - pyarrow < 15
    _DeviceAllocationType = None


def device_type(code: int) -> Any:
    """The ``pyarrow.DeviceAllocationType`` of a code (the code itself for a
    pyarrow without it)."""
    return _DeviceAllocationType(code) if _DeviceAllocationType is not None else code


def name(code: int, unknown: str) -> str:
    """ "cuda", "cuda_host", ... for a code; `unknown` for a code without a name."""
    return _NAMES.get(code, unknown)


def label(placement: tuple[int, int]) -> str:
    """ "cuda:0", "cuda_host:1", "cpu" for a (code, device id) pair."""
    kind, device_id = placement
    text = name(kind, str(kind))
    return text if kind == CPU else f"{text}:{device_id}"


def dlpack_device(placement: tuple[int, int]) -> tuple[int, int]:
    """``__dlpack_device__`` of memory at a (code, device id) pair: pinned host
    memory is device 0 (DLPack's rule for kDLCUDAHost)."""
    kind, device_id = placement
    if kind == CUDA_HOST:
        return (CUDA_HOST, 0)
    return (kind, device_id)
