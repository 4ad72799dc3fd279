"""Test configuration: run on the GPU when there is one, else on cuarrow's
host emulation of the CUDA driver (with two emulated devices, so the
multi-device tests run too).

CUARROW_CUDA_DRIVER, when set, decides (e.g. ``emulated``).  Tests that need
a real GPU (kernels, Numba, CuPy, PyTorch) carry the ``gpu`` marker and are
skipped on the emulation with a reason that says so.
"""

import os

import pytest

# Before anything touches the driver.
os.environ.setdefault("CUARROW_EMULATED_DEVICES", "2")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from cuarrow import _numba, cuda  # noqa: E402

# numba-cuda 0.30 cannot compile kernels under NumPy >= 2.5 (numpy.row_stack
# is gone); alias it before any test imports numba.cuda.
_numba.numpy_compat_for_numba()

EMULATION_REASON = cuda.use_emulation_if_no_gpu()
EMULATED = cuda.is_emulated()
NUM_DEVICES = cuda.Context.get_num_devices()

GPU_SKIP_REASON = (
    "needs a real NVIDIA GPU: this run uses cuarrow's host emulation of the CUDA driver, "
    "which cannot run kernels or host other CUDA libraries"
)


def pytest_report_header(config):
    info = cuda.driver_info()
    kind = "host emulation" if info["emulated"] else "real GPU driver"
    why = f" ({EMULATION_REASON})" if EMULATION_REASON else ""
    return f"cuarrow driver: {kind}{why}, {info['devices']} device(s), {info['path']}"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason=GPU_SKIP_REASON)
    skip_multi = pytest.mark.skip(reason=f"needs two or more CUDA devices (this machine has {NUM_DEVICES})")
    for item in items:
        if EMULATED and "gpu" in item.keywords:
            item.add_marker(skip_gpu)
        if NUM_DEVICES < 2 and "multi_device" in item.keywords:
            item.add_marker(skip_multi)


@pytest.fixture(scope="session")
def ctx():
    return cuda.Context(0)


@pytest.fixture(scope="session")
def ctx1():
    """The last device's context (device 1 on the two-device emulation)."""
    return cuda.Context(cuda.Context.get_num_devices() - 1)


@pytest.fixture(scope="session")
def emulated():
    return EMULATED


def make_random_buffer(ctx, size, target="host"):
    """(array, buffer) with random non-zero bytes, on the host or the device."""
    if target == "host":
        buf = pa.allocate_buffer(size)
        arr = np.frombuffer(buf, dtype=np.uint8)
        arr[:] = np.random.randint(low=1, high=255, size=size, dtype=np.uint8)
        return arr, buf
    if target == "device":
        arr, buf = make_random_buffer(ctx, size, "host")
        dbuf = ctx.new_buffer(size)
        assert dbuf.size == size
        dbuf.copy_from_host(buf, position=0, nbytes=size)
        return arr, dbuf
    raise ValueError("invalid target value")


class CAIProducer:
    """Exposes an arbitrary __cuda_array_interface__ dict (keeping `keep`
    alive): a foreign producer, well-behaved or not."""

    def __init__(self, desc, keep=None):
        self.desc = desc
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return self.desc
