"""CuPy and PyTorch view cuarrow buffers without a copy (and the other way
round), through __cuda_array_interface__ and DLPack, and their streams work
as ``stream=``.  Needs a real GPU."""

import numpy as np
import pytest
from conftest import EMULATED, GPU_SKIP_REASON

from cuarrow import cuda

if EMULATED:
    pytest.skip(GPU_SKIP_REASON, allow_module_level=True)

pytestmark = pytest.mark.gpu


class DLPackOnly:
    def __init__(self, obj):
        self.obj = obj

    def __dlpack__(self, **kwargs):
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch was built without CUDA")
    return torch


# ---- CuPy -------------------------------------------------------------------------


def test_cupy_asarray_is_a_view(cupy, ctx):
    cbuf = ctx.buffer_from_data(np.arange(16, dtype=np.uint8))
    arr = cupy.asarray(cbuf)
    assert arr.dtype == cupy.uint8 and arr.shape == (16,)
    assert arr.data.ptr == cbuf.address
    arr += 1
    cupy.cuda.runtime.deviceSynchronize()
    assert cbuf.to_pybytes() == bytes(range(1, 17))


def test_cupy_from_dlpack_is_a_view(cupy, ctx):
    cbuf = ctx.buffer_from_data(np.arange(16, dtype=np.uint8))
    arr = cupy.from_dlpack(cbuf)
    assert arr.data.ptr == cbuf.address
    assert cupy.asnumpy(arr).tolist() == list(range(16))
    view = arr.view(cupy.int32)
    view[0] = -1
    cupy.cuda.runtime.deviceSynchronize()
    assert np.frombuffer(cbuf.copy_to_host(), dtype=np.int32)[0] == -1
    del cbuf  # the capsule keeps the memory alive
    assert cupy.asnumpy(arr)[4:].tolist() == list(range(4, 16))


def test_buffer_from_cupy(cupy, ctx):
    arr = cupy.arange(10, dtype=cupy.float32)
    for source in (arr, DLPackOnly(arr)):
        cbuf = ctx.buffer_from_object(source)
        assert cbuf.address == arr.data.ptr and cbuf.size == 40
        assert np.frombuffer(cbuf.copy_to_host(), dtype=np.float32).tolist() == list(range(10))
    with pytest.raises(ValueError, match="non-contiguous"):
        ctx.buffer_from_object(arr[::2])
    with pytest.raises(ValueError, match="non-contiguous"):
        ctx.buffer_from_object(DLPackOnly(arr[::2]))
    assert ctx.buffer_from_object(arr.reshape(2, 5).T).size == 40  # Fortran order is contiguous


def test_cupy_stream_as_stream_argument(cupy, ctx):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        arr = cupy.arange(1000, dtype=cupy.int32)
        arr *= 3
    cbuf = ctx.buffer_from_object(arr)  # synchronizes CuPy's stream (CAI v3 "stream")
    host = cbuf.copy_to_host(stream=stream)
    assert np.frombuffer(host, dtype=np.int32)[-1] == 2997
    out = ctx.buffer_from_data(np.ones(4, dtype=np.int32), stream=stream)
    assert out.copy_to_host(stream=stream).to_pybytes() == np.ones(4, dtype=np.int32).tobytes()


def test_cuarrow_stream_for_cupy(cupy, ctx):
    s = cuda.Stream(ctx)
    with cupy.cuda.ExternalStream(s.handle):
        arr = cupy.full(8, 7, dtype=cupy.uint8)
    cbuf = ctx.buffer_from_object(arr)
    assert cbuf.copy_to_host(stream=s).to_pybytes() == bytes([7] * 8)


# ---- PyTorch ------------------------------------------------------------------------


def test_torch_from_dlpack_is_a_view(torch, ctx):
    cbuf = ctx.buffer_from_data(np.arange(16, dtype=np.uint8))
    t = torch.from_dlpack(cbuf)
    assert t.device.type == "cuda" and t.device.index == 0
    assert t.dtype == torch.uint8 and t.shape == (16,)
    assert t.data_ptr() == cbuf.address
    t += 1
    torch.cuda.synchronize()
    assert cbuf.to_pybytes() == bytes(range(1, 17))


def test_torch_as_tensor_through_cuda_array_interface(torch, ctx):
    cbuf = ctx.buffer_from_data(np.arange(16, dtype=np.uint8))
    t = torch.as_tensor(cbuf, device="cuda")
    assert t.data_ptr() == cbuf.address
    assert t.cpu().tolist() == list(range(16))


def test_buffer_from_torch(torch, ctx):
    t = torch.arange(10, dtype=torch.float32, device="cuda")
    for source in (t, DLPackOnly(t)):
        cbuf = ctx.buffer_from_object(source)
        assert cbuf.address == t.data_ptr() and cbuf.size == 40
        assert np.frombuffer(cbuf.copy_to_host(), dtype=np.float32).tolist() == list(range(10))
    with pytest.raises(ValueError, match="non-contiguous"):
        ctx.buffer_from_object(DLPackOnly(t[::2]))


def test_torch_stream_as_stream_argument(torch, ctx):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        t = torch.full((1000,), 5, dtype=torch.int32, device="cuda")
    cbuf = ctx.buffer_from_object(DLPackOnly(t))
    host = cbuf.copy_to_host(stream=stream)
    assert np.frombuffer(host, dtype=np.int32)[-1] == 5


def test_context_shared_with_torch(torch, ctx):
    torch.zeros(1, device="cuda")  # initialise PyTorch's context
    driver = pytest.importorskip("cuda.bindings.driver")
    err, current = driver.cuCtxGetCurrent()
    assert int(current) == ctx.handle
