"""Numba interop, as pyarrow's test_cuda_numba_interop.py checks it, with
numba-cuda as users have it today (handles are cuda.bindings objects).
Needs a real GPU: the host emulation cannot run Numba."""

import numpy as np
import pytest
from conftest import EMULATED, GPU_SKIP_REASON

from cuarrow import cuda

if EMULATED:
    pytest.skip(GPU_SKIP_REASON, allow_module_level=True)

nb_cuda = pytest.importorskip("numba.cuda")
from numba.cuda.cudadrv.devicearray import DeviceNDArray  # noqa: E402

from cuarrow._numba import handle_value  # noqa: E402

pytestmark = pytest.mark.gpu

DTYPES = ["uint8", "int16", "float32"]
CONTEXT_IDS = ["cuarrow.cuda", "numba.cuda"]


@pytest.fixture(scope="module")
def context_choices():
    np.random.seed(1234)
    ctx1 = cuda.Context()
    nb_ctx1 = ctx1.to_numba()
    nb_ctx2 = nb_cuda.current_context()
    ctx2 = cuda.Context.from_numba(nb_ctx2)
    return [(ctx1, nb_ctx1), (ctx2, nb_ctx2)]


def make_random_buffer(size, target="host", dtype="uint8", ctx=None):
    dtype = np.dtype(dtype)
    if target == "host":
        arr = np.random.randint(low=0, high=255, size=size).astype(dtype)
        return arr, arr
    arr, _ = make_random_buffer(size, "host", dtype)
    dbuf = ctx.new_buffer(size * dtype.itemsize)
    dbuf.copy_from_host(arr, position=0, nbytes=arr.nbytes)
    return arr, dbuf


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
def test_context(context_choices, c):
    ctx, nb_ctx = context_choices[c]
    assert ctx.handle == handle_value(nb_ctx.handle)
    assert ctx.handle == handle_value(ctx.to_numba().handle)
    assert ctx.handle == cuda.Context.from_numba(nb_ctx).handle
    assert ctx.handle == cuda.Context.from_numba().handle
    buf = ctx.new_buffer(10)
    assert ctx.handle == buf.context.handle
    # Both sides use the primary context.
    assert cuda.Context(0).handle == handle_value(nb_cuda.current_context().handle)


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [0, 1, 8, 1000])
def test_from_object(context_choices, c, dtype, size):
    ctx, _ = context_choices[c]
    arr, cbuf = make_random_buffer(size, "device", dtype, ctx)

    darr = nb_cuda.to_device(arr)
    cbuf2 = ctx.buffer_from_object(darr)
    assert cbuf2.size == cbuf.size
    np.testing.assert_equal(arr, np.frombuffer(cbuf2.copy_to_host(), dtype=dtype))

    if size >= 8:
        for s in [slice(size // 4, None, None), slice(size // 4, -(size // 4), None)]:
            cbuf2 = ctx.buffer_from_object(darr[s])
            np.testing.assert_equal(arr[s], np.frombuffer(cbuf2.copy_to_host(), dtype=dtype))

        with pytest.raises(ValueError, match="array data is non-contiguous"):
            ctx.buffer_from_object(darr[::2])

        s1 = size // 4
        s2 = size // s1
        cbuf2 = ctx.buffer_from_object(darr.reshape(s1, s2))
        assert cbuf2.size == cbuf.size
        np.testing.assert_equal(arr, np.frombuffer(cbuf2.copy_to_host(), dtype=dtype))
        with pytest.raises(ValueError, match="array data is non-contiguous"):
            ctx.buffer_from_object(darr.reshape(s1, s2)[:, ::2])

        s1, s2 = 4, size // 8
        s3 = size // (s1 * s2)
        cbuf2 = ctx.buffer_from_object(darr.reshape(s1, s2, s3))
        assert cbuf2.size == cbuf.size
        np.testing.assert_equal(arr, np.frombuffer(cbuf2.copy_to_host(), dtype=dtype))
        with pytest.raises(ValueError, match="array data is non-contiguous"):
            ctx.buffer_from_object(darr.reshape(s1, s2, s3)[::2])

    class MyObj:
        def __init__(self, darr):
            self.darr = darr

        @property
        def __cuda_array_interface__(self):
            return self.darr.__cuda_array_interface__

    cbuf2 = ctx.buffer_from_object(MyObj(darr))
    assert cbuf2.size == cbuf.size
    np.testing.assert_equal(arr, np.frombuffer(cbuf2.copy_to_host(), dtype=dtype))


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numba_memalloc(context_choices, c, dtype):
    ctx, nb_ctx = context_choices[c]
    dtype = np.dtype(dtype)
    size = 10
    before = ctx.bytes_allocated
    mem = nb_ctx.memalloc(size * dtype.itemsize)
    darr = DeviceNDArray((size,), (dtype.itemsize,), dtype, gpu_data=mem)
    darr[:5] = 99
    darr[5:] = 88
    np.testing.assert_equal(darr.copy_to_host()[:5], 99)
    np.testing.assert_equal(darr.copy_to_host()[5:], 88)

    cbuf = cuda.CudaBuffer.from_numba(mem)
    np.testing.assert_equal(np.frombuffer(cbuf.copy_to_host(), dtype=dtype), darr.copy_to_host())
    assert ctx.bytes_allocated == before  # numba's memory, not cuarrow's


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pyarrow_memalloc(context_choices, c, dtype):
    ctx, _ = context_choices[c]
    arr, cbuf = make_random_buffer(10, "device", dtype, ctx)
    mem = cbuf.to_numba()
    darr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=mem)
    np.testing.assert_equal(darr.copy_to_host(), arr)


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_numba_context(context_choices, c, dtype):
    ctx, nb_ctx = context_choices[c]
    with nb_cuda.gpus[0]:
        arr, cbuf = make_random_buffer(10, "device", dtype, ctx)
        assert cbuf.context.handle == handle_value(nb_ctx.handle)
        darr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cbuf.to_numba())
        np.testing.assert_equal(darr.copy_to_host(), arr)
        darr[0] = 99
        cbuf.context.synchronize()
        assert np.frombuffer(cbuf.copy_to_host(), dtype=dtype)[0] == 99


@nb_cuda.jit
def increment_by_one(an_array):
    pos = nb_cuda.grid(1)
    if pos < an_array.size:
        an_array[pos] += 1


@pytest.mark.parametrize("c", range(2), ids=CONTEXT_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pyarrow_jit(context_choices, c, dtype):
    ctx, _ = context_choices[c]
    arr, cbuf = make_random_buffer(10, "device", dtype, ctx)
    threads = 32
    blocks = (arr.size + threads - 1) // threads
    darr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cbuf.to_numba())
    increment_by_one[blocks, threads](darr)
    cbuf.context.synchronize()
    np.testing.assert_equal(np.frombuffer(cbuf.copy_to_host(), dtype=arr.dtype), arr + 1)


def test_page_numba_steps():
    """The page's Numba section, verbatim apart from the module name."""
    ctx = cuda.Context(0)
    arr = np.arange(4, dtype=np.int32)
    cuda_buf = ctx.buffer_from_data(arr)
    device_arr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cuda_buf.to_numba())
    increment_by_one[16, 16](device_arr)
    assert np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32).tolist() == [1, 2, 3, 4]

    arr = np.arange(10, 14, dtype=np.int32)
    device_arr = nb_cuda.to_device(arr)
    cuda_buf = cuda.CudaBuffer.from_numba(device_arr.gpu_data)
    assert cuda_buf.size == 16
    assert cuda_buf.address == device_arr.__cuda_array_interface__["data"][0]
    assert cuda_buf.context.device_number == 0
    assert np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32).tolist() == [10, 11, 12, 13]


def test_to_numba_keeps_buffer_alive():
    import gc
    import weakref

    ctx = cuda.Context(0)
    cbuf = ctx.buffer_from_data(np.arange(4, dtype=np.int32))
    darr = DeviceNDArray((4,), (4,), np.int32, gpu_data=cbuf.to_numba())
    ref = weakref.ref(cbuf)
    del cbuf
    gc.collect()
    assert ref() is not None  # the device array keeps the buffer alive
    increment_by_one[1, 4](darr)
    assert darr.copy_to_host().tolist() == [1, 2, 3, 4]


def test_numba_views_through_cuda_array_interface():
    ctx = cuda.Context(0)
    cbuf = ctx.buffer_from_data(np.arange(8, dtype=np.uint8))
    view = nb_cuda.as_cuda_array(cbuf)
    assert view.shape == (8,) and view.dtype == np.uint8
    assert view.__cuda_array_interface__["data"][0] == cbuf.address
    increment_by_one[1, 8](view)
    nb_cuda.synchronize()
    assert cbuf.to_pybytes() == bytes(range(1, 9))


def test_numba_stream_as_stream_argument():
    ctx = cuda.Context(0)
    stream = nb_cuda.stream()
    cbuf = ctx.buffer_from_data(b"abcdefgh", stream=stream)
    assert cbuf.copy_to_host(stream=stream).to_pybytes() == b"abcdefgh"
