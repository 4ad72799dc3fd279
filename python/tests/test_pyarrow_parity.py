"""What pyarrow's own CUDA tests check (python/pyarrow/tests/test_cuda.py),
against cuarrow.cuda: sizes 0, 1 and 1000, every documented error message,
views vs copies, parent links, base kept alive.  test_IPC is in test_ipc.py."""

import sys

import numpy as np
import pyarrow as pa
import pytest
from conftest import make_random_buffer

from cuarrow import cuda

SIZES = [0, 1, 1000]


def test_context(ctx, ctx1):
    n = cuda.Context.get_num_devices()
    assert n > 0
    assert ctx.device_number == 0
    assert ctx1.device_number == n - 1
    with pytest.raises(ValueError, match="device_number argument must be non-negative less than"):
        cuda.Context(n)
    with pytest.raises(ValueError, match="device_number argument must be non-negative less than"):
        cuda.Context(-1)


def test_context_is_primary_and_shared(ctx):
    # Every Context(0) is the same primary context (the one Numba/CuPy/PyTorch use).
    other = cuda.Context(0)
    assert other.handle == ctx.handle != 0
    assert other == ctx
    assert ctx.is_primary
    assert cuda.Context(handle=ctx.handle) == ctx


@pytest.mark.parametrize("size", SIZES)
def test_manage_allocate_free_host(size):
    buf = cuda.new_host_buffer(size)
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[size // 4 : 3 * size // 4] = 1
    arr_cp = arr.copy()
    arr2 = np.frombuffer(buf, dtype=np.uint8)
    np.testing.assert_equal(arr2, arr_cp)
    assert buf.size == size


def test_context_allocate_del(ctx):
    before = ctx.bytes_allocated
    cudabuf = ctx.new_buffer(128)
    assert ctx.bytes_allocated == before + 128
    del cudabuf
    assert ctx.bytes_allocated == before


def _host(cudabuf):
    return np.frombuffer(cudabuf.copy_to_host(), dtype=np.uint8)


@pytest.mark.parametrize("size", SIZES)
def test_context_device_buffer(ctx, size):
    arr, buf = make_random_buffer(ctx, size)
    cudabuf = ctx.buffer_from_data(buf)
    assert cudabuf.size == size
    np.testing.assert_equal(arr, _host(cudabuf))

    # A CudaBuffer does not support the buffer protocol.
    with pytest.raises(BufferError):
        memoryview(cudabuf)

    # From an array, from bytes.
    cudabuf = ctx.buffer_from_data(arr)
    assert cudabuf.size == size
    np.testing.assert_equal(arr, _host(cudabuf))
    cudabuf = ctx.buffer_from_data(arr.tobytes())
    np.testing.assert_equal(arr, _host(cudabuf))

    # A slice is a view: writes through it show in the parent.
    cudabuf2 = cudabuf.slice(0, cudabuf.size)
    assert cudabuf2.size == size
    np.testing.assert_equal(arr, _host(cudabuf2))
    if size > 1:
        cudabuf2.copy_from_host(arr[size // 2 :])
        np.testing.assert_equal(np.concatenate((arr[size // 2 :], arr[size // 2 :])), _host(cudabuf))
        cudabuf2.copy_from_host(arr[: size // 2])  # restore

    # buffer_from_data of a device buffer is a copy.
    cudabuf2 = ctx.buffer_from_data(cudabuf)
    assert cudabuf2.size == size
    np.testing.assert_equal(arr, _host(cudabuf2))
    cudabuf2.copy_from_host(arr[size // 2 :])
    np.testing.assert_equal(arr, _host(cudabuf))

    # Over-long slices are clamped.
    cudabuf2 = cudabuf.slice(0, cudabuf.size + 10)
    assert cudabuf2.size == size
    np.testing.assert_equal(arr, _host(cudabuf2))
    if size:
        cudabuf2 = cudabuf.slice(size // 4, size + 10)
        assert cudabuf2.size == size - size // 4
        np.testing.assert_equal(arr[size // 4 :], _host(cudabuf2))

    # From a part of host data.
    soffset, ssize = size // 4, 2 * size // 4
    for data in (buf, arr, arr.tobytes()):
        cudabuf = ctx.buffer_from_data(data, offset=soffset, size=ssize)
        assert cudabuf.size == ssize
        np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf))
    cudabuf = ctx.buffer_from_data(buf.slice(offset=soffset, length=ssize))
    np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf))
    cudabuf = ctx.buffer_from_data(arr[soffset : soffset + ssize])
    np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf))

    cudabuf = ctx.new_buffer(size)
    assert cudabuf.size == size

    # A slice of a device buffer.
    cudabuf = ctx.buffer_from_data(arr)
    cudabuf2 = cudabuf.slice(soffset, ssize)
    assert cudabuf2.size == ssize
    np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf2))

    # From a pinned HostBuffer, whole and in part.
    hbuf = cuda.new_host_buffer(size)
    np.frombuffer(hbuf, dtype=np.uint8)[:] = arr
    cudabuf = ctx.buffer_from_data(hbuf)
    assert cudabuf.size == size
    np.testing.assert_equal(arr, _host(cudabuf))
    cudabuf = ctx.buffer_from_data(hbuf, offset=soffset, size=ssize)
    np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf))
    cudabuf = ctx.buffer_from_data(hbuf.slice(offset=soffset, length=ssize))
    np.testing.assert_equal(arr[soffset : soffset + ssize], _host(cudabuf))


@pytest.mark.parametrize("size", SIZES)
def test_buffer_from_data_errors(ctx, size):
    arr, _ = make_random_buffer(ctx, size)
    with pytest.raises(ValueError, match="offset argument is out-of-range"):
        ctx.buffer_from_data(arr, offset=-1)
    with pytest.raises(ValueError, match="offset argument is out-of-range"):
        ctx.buffer_from_data(arr, offset=size + 1)
    if size:
        with pytest.raises(ValueError, match="offset argument is out-of-range"):
            ctx.buffer_from_data(arr, offset=size)
    with pytest.raises(ValueError, match="requested larger slice than available in device buffer"):
        ctx.buffer_from_data(arr, offset=0, size=size + 1)
    # Negative sizes other than -1 ("all") are refused, not turned into "all".
    with pytest.raises(ValueError, match="size argument must be non-negative"):
        ctx.buffer_from_data(arr, size=-2)


@pytest.mark.parametrize("size", SIZES)
def test_context_from_object(ctx, size):
    arr, cbuf = make_random_buffer(ctx, size, target="device")

    hbuf = cuda.new_host_buffer(size)
    np.frombuffer(hbuf, dtype=np.uint8)[:] = arr
    cbuf2 = ctx.buffer_from_object(hbuf)
    assert cbuf2.size == cbuf.size
    np.testing.assert_equal(arr, _host(cbuf2))
    # A view: writes to the pinned memory show through it.
    if size:
        np.frombuffer(hbuf, dtype=np.uint8)[0] = 0
        assert cbuf2[0] == 0

    cbuf3 = ctx.buffer_from_object(cbuf2)
    assert cbuf3 is cbuf2

    with pytest.raises(pa.ArrowTypeError, match="buffer is not backed by a CudaBuffer"):
        ctx.buffer_from_object(pa.py_buffer(b"123"))
    with pytest.raises(pa.ArrowTypeError, match="cannot create device buffer view from .* 'numpy.ndarray'"):
        ctx.buffer_from_object(np.array([1, 2, 3]))
    with pytest.raises(pa.ArrowTypeError, match="cannot create device buffer view from"):
        ctx.buffer_from_object(object())


def test_foreign_buffer(ctx):
    hbuf = cuda.new_host_buffer(10)
    np.frombuffer(hbuf, dtype=np.uint8)[:] = np.arange(10, dtype=np.uint8)

    rc = sys.getrefcount(hbuf)
    fbuf = ctx.foreign_buffer(hbuf.address, hbuf.size, hbuf)
    assert sys.getrefcount(hbuf) == rc + 1
    del fbuf
    assert sys.getrefcount(hbuf) == rc

    # The base keeps the memory alive after its last other reference is gone.
    fbuf = ctx.foreign_buffer(hbuf.address, hbuf.size, hbuf)
    del hbuf
    assert fbuf.to_pybytes() == bytes(range(10))

    # Slices keep the base alive too.
    piece = fbuf.slice(2, 3)
    del fbuf
    assert piece.to_pybytes() == bytes([2, 3, 4])

    # address == size == 0: a new empty buffer.
    assert ctx.foreign_buffer(0, 0).size == 0


def test_foreign_buffer_of_device_memory(ctx):
    owner = ctx.buffer_from_data(b"abcdef")
    view = ctx.foreign_buffer(owner.address + 1, 4, base=owner)
    assert view.address == owner.address + 1
    assert view.to_pybytes() == b"bcde"
    view.copy_from_host(b"XY")
    assert owner.to_pybytes() == b"aXYdef"


def test_foreign_buffer_errors(ctx):
    with pytest.raises(ValueError, match="size argument must be non-negative"):
        ctx.foreign_buffer(ctx.new_buffer(8).address, -1)
    # Ordinary host memory is not reachable by the device: a CUDA error (OSError).
    data = bytearray(16)
    arr = np.frombuffer(data, dtype=np.uint8)
    with pytest.raises(cuda.CudaError, match="Cuda error ") as info:
        ctx.foreign_buffer(arr.ctypes.data, 16)
    assert isinstance(info.value, OSError)
    assert info.value.code is not None and info.value.name.startswith("CUDA_ERROR_")


@pytest.mark.parametrize("size", SIZES)
def test_CudaBuffer(ctx, size):
    arr, buf = make_random_buffer(ctx, size)
    assert arr.tobytes() == buf.to_pybytes()
    cbuf = ctx.buffer_from_data(buf)
    assert cbuf.size == size
    assert len(cbuf) == size
    assert not cbuf.is_cpu
    assert cbuf.is_mutable
    assert arr.tobytes() == cbuf.to_pybytes()
    if size > 0:
        assert cbuf.address > 0

    for i in range(size):
        assert cbuf[i] == arr[i]
    if size:
        assert cbuf[-1] == arr[-1]
    for s in [slice(None), slice(size // 4, size // 2)]:
        assert cbuf[s].to_pybytes() == arr[s].tobytes()

    sbuf = cbuf.slice(size // 4, size // 2)
    assert sbuf.parent == cbuf
    assert sbuf.parent is cbuf
    assert cbuf.parent is None

    with pytest.raises(TypeError, match="Do not call CudaBuffer's constructor directly"):
        cuda.CudaBuffer()


@pytest.mark.parametrize("size", SIZES)
def test_CudaBuffer_indexing_errors(ctx, size):
    cbuf = ctx.new_buffer(size)
    with pytest.raises(IndexError, match="index out of bounds"):
        cbuf[size]
    with pytest.raises(IndexError, match="index out of bounds"):
        cbuf[-size - 1]
    with pytest.raises(IndexError, match="only slices with step 1 supported"):
        cbuf[::2]
    # Python slicing semantics: past the end gives an empty buffer.
    assert cbuf[size:].size == 0
    assert cbuf[size + 5 :].size == 0
    if size:
        with pytest.raises(ValueError, match="offset argument is out-of-range"):
            cbuf.slice(size)
    with pytest.raises(ValueError, match="offset argument is out-of-range"):
        cbuf.slice(-1)
    with pytest.raises(ValueError, match="length argument must be non-negative"):
        cbuf.slice(0, -1)


@pytest.mark.parametrize("size", SIZES)
def test_HostBuffer(ctx, size):
    arr, buf = make_random_buffer(ctx, size)
    hbuf = cuda.new_host_buffer(size)
    np.frombuffer(hbuf, dtype=np.uint8)[:] = arr
    assert hbuf.size == size
    assert hbuf.is_cpu
    assert hbuf.is_mutable
    assert arr.tobytes() == hbuf.to_pybytes()
    for i in range(size):
        assert hbuf[i] == arr[i]
    for s in [slice(None), slice(size // 4, size // 2)]:
        assert hbuf[s].to_pybytes() == arr[s].tobytes()

    sbuf = hbuf.slice(size // 4, size // 2)
    assert sbuf.parent == hbuf
    assert sbuf.parent is hbuf
    # pyarrow sees it as host memory, zero-copy.
    pbuf = pa.py_buffer(hbuf)
    if size:
        assert pbuf.address == hbuf.address
    assert pbuf.equals(buf)
    assert hbuf.equals(buf) and hbuf == buf

    del hbuf
    with pytest.raises(TypeError, match="Do not call HostBuffer's constructor directly"):
        cuda.HostBuffer()


def test_HostBuffer_slice_errors():
    hbuf = cuda.new_host_buffer(6)
    with pytest.raises(IndexError, match="Offset must be non-negative"):
        hbuf.slice(-1)
    with pytest.raises(IndexError, match="Negative buffer slice length"):
        hbuf.slice(2, -1)
    with pytest.raises(IndexError, match="buffer slice would exceed buffer length"):
        hbuf.slice(2, 10)


def test_new_host_buffer_errors():
    n = cuda.Context.get_num_devices()
    with pytest.raises(pa.ArrowInvalid, match=f"Invalid Cuda device number {n} "):
        cuda.new_host_buffer(8, device=n)
    with pytest.raises(ValueError, match="negative size"):
        cuda.new_host_buffer(-1)


@pytest.mark.parametrize("size", SIZES)
def test_copy_from_to_host(ctx, size):
    dt = np.dtype("uint16")
    nbytes = size * dt.itemsize
    buf = pa.allocate_buffer(nbytes, resizable=True)
    assert isinstance(buf, pa.Buffer)
    assert not isinstance(buf, cuda.CudaBuffer)
    arr = np.frombuffer(buf, dtype=dt)
    arr[:] = range(size)

    device_buffer = ctx.new_buffer(nbytes)
    assert isinstance(device_buffer, cuda.CudaBuffer)
    # Deliberately not a pyarrow.Buffer: pyarrow's C++ must never see device memory.
    assert not isinstance(device_buffer, pa.Buffer)
    assert device_buffer.size == nbytes
    assert not device_buffer.is_cpu
    assert device_buffer.copy_from_host(buf, position=0, nbytes=nbytes) == nbytes

    buf2 = device_buffer.copy_to_host(position=0, nbytes=nbytes)
    assert type(buf2) is pa.Buffer
    np.testing.assert_equal(arr, np.frombuffer(buf2, dtype=dt))


@pytest.mark.parametrize("size", SIZES)
def test_copy_to_host(ctx, size):
    arr, dbuf = make_random_buffer(ctx, size, target="device")

    buf = dbuf.copy_to_host()
    assert buf.is_cpu
    np.testing.assert_equal(arr, np.frombuffer(buf, dtype=np.uint8))

    buf = dbuf.copy_to_host(position=size // 4)
    np.testing.assert_equal(arr[size // 4 :], np.frombuffer(buf, dtype=np.uint8))

    buf = dbuf.copy_to_host(position=size // 4, nbytes=size // 8)
    np.testing.assert_equal(arr[size // 4 : size // 4 + size // 8], np.frombuffer(buf, dtype=np.uint8))

    buf = dbuf.copy_to_host(position=size // 4, nbytes=0)
    assert buf.is_cpu
    assert buf.size == 0

    for position, nbytes in [(size + 2, -1), (-2, -1), (size + 1, 0), (-3, 0)]:
        with pytest.raises(ValueError, match="position argument is out-of-range"):
            dbuf.copy_to_host(position=position, nbytes=nbytes)

    for position, nbytes in [(0, size + 1), (size // 2, (size + 1) // 2 + 1), (size, 1)]:
        with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
            dbuf.copy_to_host(position=position, nbytes=nbytes)

    buf = pa.allocate_buffer(size // 4)
    dbuf.copy_to_host(buf=buf)
    np.testing.assert_equal(arr[: size // 4], np.frombuffer(buf, dtype=np.uint8))

    if size < 12:
        return

    dbuf.copy_to_host(buf=buf, position=12)
    np.testing.assert_equal(arr[12 : 12 + size // 4], np.frombuffer(buf, dtype=np.uint8))
    dbuf.copy_to_host(buf=buf, nbytes=12)
    np.testing.assert_equal(arr[:12], np.frombuffer(buf, dtype=np.uint8)[:12])
    dbuf.copy_to_host(buf=buf, nbytes=12, position=6)
    np.testing.assert_equal(arr[6 : 6 + 12], np.frombuffer(buf, dtype=np.uint8)[:12])

    for position, nbytes in [(0, size + 10), (10, size - 5), (0, size // 2), (size // 4, size // 4 + 1)]:
        with pytest.raises(ValueError, match="requested copy does not fit into host buffer"):
            dbuf.copy_to_host(buf=buf, position=position, nbytes=nbytes)


def test_copy_to_host_checks_both_sides(ctx):
    # pyarrow checks nbytes only against `buf` and over-reads the device;
    # cuarrow checks the device side too.
    dbuf = ctx.buffer_from_data(bytes(range(16)))
    big = pa.allocate_buffer(64)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        dbuf.copy_to_host(buf=big, position=10, nbytes=8)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        dbuf.copy_to_host(buf=big, nbytes=17)
    # nbytes=-1 with a bigger buf copies what the device has.
    out = bytearray(64)
    dbuf.copy_to_host(buf=out, position=10)
    assert out[:6] == bytes(range(10, 16)) and out[6:] == bytes(58)


def test_copy_to_host_refuses_read_only_and_device_targets(ctx):
    dbuf = ctx.buffer_from_data(b"abcd")
    with pytest.raises(ValueError, match="read-only"):
        dbuf.copy_to_host(buf=pa.py_buffer(b"xxxx"))
    with pytest.raises(ValueError, match="read-only"):
        dbuf.copy_to_host(buf=b"xxxx")
    with pytest.raises(TypeError, match="device memory"):
        dbuf.copy_to_host(buf=ctx.new_buffer(4))
    with pytest.raises(TypeError, match="buffer protocol"):
        dbuf.copy_to_host(buf=object())
    with pytest.raises(ValueError, match="nbytes argument must be non-negative"):
        dbuf.copy_to_host(nbytes=-2)


def test_copy_to_host_memory_pool_and_resizable(ctx):
    dbuf = ctx.buffer_from_data(b"abcdefgh")
    pool = pa.system_memory_pool()
    out = dbuf.copy_to_host(memory_pool=pool, resizable=True)
    assert isinstance(out, pa.ResizableBuffer)
    assert out.to_pybytes() == b"abcdefgh"


def test_copy_to_host_into_other_host_objects(ctx):
    dbuf = ctx.buffer_from_data(bytes(range(8)))
    target = np.zeros(2, dtype=np.uint32)
    dbuf.copy_to_host(buf=target)
    assert target.tobytes() == bytes(range(8))
    hbuf = cuda.new_host_buffer(8)
    assert dbuf.copy_to_host(buf=hbuf) is hbuf
    assert hbuf.to_pybytes() == bytes(range(8))


@pytest.mark.parametrize("dest", ["same", "another"])
@pytest.mark.parametrize("size", SIZES)
def test_copy_from_device(ctx, ctx1, dest, size):
    arr, buf = make_random_buffer(ctx, size, target="device")
    lst = arr.tolist()
    if dest == "another":
        if ctx1.device_number == buf.context.device_number:
            pytest.skip("not a multi-GPU system")
        dest_ctx = ctx1
    else:
        dest_ctx = buf.context
    dbuf = dest_ctx.new_buffer(size)

    def put(*args, **kwargs):
        dbuf.copy_from_device(buf, *args, **kwargs)
        return np.frombuffer(dbuf.copy_to_host(), dtype=np.uint8).tolist()

    assert put() == lst
    if size > 4:
        assert put(position=size // 4) == lst[: size // 4] + lst[: -size // 4]
        assert put() == lst
        assert put(position=1, nbytes=size // 2) == lst[:1] + lst[: size // 2] + lst[-(size - size // 2 - 1) :]

    for position, nbytes in [(size + 2, -1), (-2, -1), (size + 1, 0), (-3, 0)]:
        with pytest.raises(ValueError, match="position argument is out-of-range"):
            put(position=position, nbytes=nbytes)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        put(position=0, nbytes=size + 1)
    if size >= 4:
        with pytest.raises(ValueError, match="requested more to copy than available in device buffer"):
            put(position=size // 2, nbytes=(size + 1) // 2 + 1)

    with pytest.raises(TypeError, match="expected CudaBuffer instance, got bytes"):
        dbuf.copy_from_device(b"abc")


@pytest.mark.parametrize("size", SIZES)
def test_copy_from_host(ctx, size):
    arr, buf = make_random_buffer(ctx, size, target="host")
    lst = arr.tolist()
    dbuf = ctx.new_buffer(size)

    def put(*args, **kwargs):
        dbuf.copy_from_host(buf, *args, **kwargs)
        return np.frombuffer(dbuf.copy_to_host(), dtype=np.uint8).tolist()

    assert put() == lst
    if size > 4:
        assert put(position=size // 4) == lst[: size // 4] + lst[: -size // 4]
        assert put() == lst
        assert put(position=1, nbytes=size // 2) == lst[:1] + lst[: size // 2] + lst[-(size - size // 2 - 1) :]

    for position, nbytes in [(size + 2, -1), (-2, -1), (size + 1, 0), (-3, 0)]:
        with pytest.raises(ValueError, match="position argument is out-of-range"):
            put(position=position, nbytes=nbytes)
    with pytest.raises(ValueError, match="requested more to copy than available from host buffer"):
        put(position=0, nbytes=size + 1)
    if size >= 4:
        with pytest.raises(ValueError, match="requested more to copy than available in device buffer"):
            put(position=size // 2, nbytes=(size + 1) // 2 + 1)
    with pytest.raises(ValueError, match="nbytes argument must be non-negative"):
        put(nbytes=-5)


def test_copy_from_host_refuses_device_data(ctx):
    dbuf = ctx.new_buffer(4)
    with pytest.raises(TypeError, match="use copy_from_device"):
        dbuf.copy_from_host(ctx.new_buffer(4))


def test_buffer_device(ctx):
    hbuf = cuda.new_host_buffer(10)
    assert hbuf.device_type == pa.DeviceAllocationType.CUDA_HOST
    assert isinstance(hbuf.device, pa.Device)
    assert isinstance(hbuf.memory_manager, pa.MemoryManager)
    assert hbuf.is_cpu
    assert hbuf.device.is_cpu
    assert hbuf.device == pa.default_cpu_memory_manager().device
    assert hbuf.memory_manager.is_cpu

    _, dbuf = make_random_buffer(ctx, 10, target="device")
    assert dbuf.device_type == pa.DeviceAllocationType.CUDA
    assert not dbuf.is_cpu
    assert dbuf.context == ctx


@pytest.mark.multi_device
def test_buffers_know_their_device(ctx, ctx1):
    buf = ctx1.new_buffer(16)
    assert buf.context.device_number == ctx1.device_number == 1
    assert buf.device_id == 1
    # Wrapped contexts report the right device (pyarrow reports 0).
    assert cuda.Context(handle=ctx1.handle).device_number == 1
    assert buf[2:4].context.device_number == 1
    h = cuda.new_host_buffer(8, device=1)
    assert h.context.device_number == 1


# pyarrow's test_print_array_host (python/pyarrow/tests/test_cuda.py), only the module name adapted.
@pytest.mark.parametrize("size", [0, 1, 1000])
def test_print_array_host(size):
    buf = cuda.new_host_buffer(size * 8)
    np_arr = np.frombuffer(buf, dtype=np.int64)
    np_arr[:] = range(size)

    arr = pa.array(range(size), pa.int64())
    carr = pa.Array.from_buffers(pa.int64(), size, [None, buf])
    assert str(carr) == str(arr)


def test_HostBuffer_is_a_pyarrow_buffer_and_keeps_memory_alive():
    import gc
    import weakref

    hbuf = cuda.new_host_buffer(8 * 4)
    assert isinstance(hbuf, pa.Buffer) and isinstance(hbuf, cuda.HostBuffer)
    np.frombuffer(hbuf, dtype=np.int64)[:] = [1, 2, 3, 4]
    arr = pa.Array.from_buffers(pa.int64(), 4, [None, hbuf])
    sliced = pa.Array.from_buffers(pa.int64(), 2, [None, hbuf.slice(8, 16)])
    assert arr.buffers()[1].address == hbuf.address
    owner = weakref.ref(hbuf.raw)
    del hbuf
    gc.collect()
    # The array holds the pinned memory (the binding's buffer) alive.
    assert owner() is not None
    assert arr.to_pylist() == [1, 2, 3, 4] and sliced.to_pylist() == [2, 3]
    del arr
    gc.collect()
    assert owner() is None
    # The slice's own binding buffer shares the mapping.
    assert sliced.to_pylist() == [2, 3]
    # pyarrow's other consumers take it too.
    hbuf = cuda.new_host_buffer(3)
    assert isinstance(hbuf[:], cuda.HostBuffer)
    np.frombuffer(hbuf, dtype=np.uint8)[:] = [7, 8, 9]
    assert pa.BufferReader(hbuf).read() == b"\x07\x08\x09"
    assert pa.array([7, 8, 9], pa.uint8()).buffers()[1].equals(hbuf)
    assert hbuf.device_type == pa.DeviceAllocationType.CUDA_HOST
    assert hbuf.context == cuda.Context(0)


def test_device_objects(ctx, ctx1):
    dev = ctx.device
    assert isinstance(dev, cuda.Device)
    assert dev.device_type == pa.DeviceAllocationType.CUDA
    assert dev.device_id == dev.device_number == 0
    assert not dev.is_cpu
    assert dev.type_name == "arrow::cuda"
    assert dev.context == ctx
    assert ctx1.device.device_id == ctx1.device_number
    assert hash(cuda.Context(0).device) == hash(dev) and cuda.Context(0).device == dev
    if ctx1.device_number != ctx.device_number:  # ctx1 is device 0 again on a one-GPU machine
        assert ctx1.device != dev
    cbuf = ctx1.new_buffer(16)
    assert cbuf.device == ctx1.device
    assert cbuf.device.device_type == cbuf.device_type
    # A view of pinned memory is on the device as CUDA_HOST, as its device_type says.
    hview = ctx.buffer_from_object(cuda.new_host_buffer(8))
    assert hview.device.device_type == hview.device_type == pa.DeviceAllocationType.CUDA_HOST
    darr = cuda.to_device(pa.array([1, 2, 3]), ctx1)
    assert darr.device == ctx1.device
    assert "cuda:" in repr(dev)


# ---------------------------------------------------------------------------
# Device data built on the device: pyarrow's constructor shapes
# ---------------------------------------------------------------------------


def _dev(ctx, data):
    return ctx.buffer_from_data(np.asarray(data).tobytes())


def test_DeviceArray_from_buffers_matches_pyarrow(ctx):
    values = np.arange(5, dtype=np.int64)
    bits = np.array([0b10111], dtype=np.uint8)
    host = pa.Array.from_buffers(pa.int64(), 4, [pa.py_buffer(bits), pa.py_buffer(values)], offset=1)
    darr = cuda.DeviceArray.from_buffers(pa.int64(), 4, [_dev(ctx, bits), _dev(ctx, values)], offset=1)
    assert darr.type == pa.int64() and len(darr) == 4 and darr.offset == 1
    assert darr.device == ctx.device
    assert darr.to_host().equals(host)
    assert darr.null_count == host.null_count == 1
    # No validity bitmap: None.
    darr = cuda.DeviceArray.from_buffers(pa.int64(), 5, [None, _dev(ctx, values)], null_count=0)
    assert darr.to_host().equals(pa.array(values))

    # Strings, and a list with a child DeviceArray.
    offsets = np.array([0, 2, 5], dtype=np.int32)
    data = np.frombuffer(b"abcde", dtype=np.uint8)
    strs = cuda.DeviceArray.from_buffers(pa.utf8(), 2, [None, _dev(ctx, offsets), _dev(ctx, data)])
    assert strs.to_host().equals(pa.array(["ab", "cde"]))
    lst = cuda.DeviceArray.from_buffers(
        pa.list_(pa.utf8()), 1, [None, _dev(ctx, np.array([0, 2], dtype=np.int32))], children=[strs]
    )
    assert lst.to_host().equals(pa.array([["ab", "cde"]]))
    st = cuda.DeviceArray.from_buffers(pa.struct([("s", pa.utf8())]), 2, [None], children=[strs])
    assert st.to_host().equals(pa.array([{"s": "ab"}, {"s": "cde"}]))
    # A kernel's output: a buffer filled on the device.
    out = ctx.new_buffer(3 * 4)
    out.copy_from_host(np.array([7, 8, 9], dtype=np.int32))
    assert cuda.DeviceArray.from_buffers(pa.int32(), 3, [None, out]).to_host().to_pylist() == [7, 8, 9]
    # An empty array needs no memory.
    assert cuda.DeviceArray.from_buffers(pa.int32(), 0, [None, None]).to_host().equals(pa.array([], pa.int32()))


def test_DeviceArray_from_buffers_errors(ctx, ctx1):
    values = _dev(ctx, np.arange(3, dtype=np.int64))
    with pytest.raises(
        ValueError, match=r"Type's expected number of buffers \(2\) did not match the passed number \(1\)"
    ):
        cuda.DeviceArray.from_buffers(pa.int64(), 3, [values])
    with pytest.raises(pa.ArrowInvalid, match="values buffer too small: needs 32 bytes"):
        cuda.DeviceArray.from_buffers(pa.int64(), 4, [None, values])
    with pytest.raises(pa.ArrowInvalid, match="values buffer too small"):
        cuda.DeviceArray.from_buffers(pa.int64(), 3, [None, values], offset=1)
    with pytest.raises(pa.ArrowInvalid, match="Array length is negative"):
        cuda.DeviceArray.from_buffers(pa.int64(), -1, [None, values])
    with pytest.raises(pa.ArrowInvalid, match="Array offset is negative"):
        cuda.DeviceArray.from_buffers(pa.int64(), 1, [None, values], offset=-1)
    with pytest.raises(ValueError, match="null_count 5"):
        cuda.DeviceArray.from_buffers(pa.int64(), 3, [None, values], null_count=5)
    with pytest.raises(pa.ArrowInvalid, match="validity buffer too small"):
        cuda.DeviceArray.from_buffers(
            pa.int64(), 9, [_dev(ctx, np.array([0xFF], np.uint8)), _dev(ctx, np.arange(9, dtype=np.int64))]
        )
    strs_offsets = _dev(ctx, np.array([0, 9], dtype=np.int32))
    with pytest.raises(pa.ArrowInvalid, match="last offset 9 is past the end"):
        cuda.DeviceArray.from_buffers(pa.utf8(), 1, [None, strs_offsets, _dev(ctx, np.zeros(1, np.uint8))])
    ints = cuda.DeviceArray.from_buffers(pa.int64(), 3, [None, values])
    with pytest.raises(
        ValueError, match=r"Type's expected number of children \(1\) did not match the passed number \(0\)"
    ):
        cuda.DeviceArray.from_buffers(pa.list_(pa.int64()), 0, [None, None])
    with pytest.raises(ValueError, match=r"child 0 \(\"item\"\) has type int64"):
        cuda.DeviceArray.from_buffers(
            pa.list_(pa.utf8()), 1, [None, _dev(ctx, np.array([0, 1], np.int32))], children=[ints]
        )
    with pytest.raises(pa.ArrowInvalid, match="past the end"):
        cuda.DeviceArray.from_buffers(
            pa.list_(pa.int64()), 1, [None, _dev(ctx, np.array([0, 5], np.int32))], children=[ints]
        )
    with pytest.raises(TypeError, match="buffers\\[1\\] must be a cuarrow.cuda.CudaBuffer or None"):
        cuda.DeviceArray.from_buffers(pa.int64(), 1, [None, pa.py_buffer(b"12345678")])
    with pytest.raises(TypeError, match="buffers\\[1\\] must be a cuarrow.cuda.CudaBuffer or None"):
        cuda.DeviceArray.from_buffers(pa.int64(), 1, [None, cuda.new_host_buffer(8)])
    with pytest.raises(TypeError, match="children\\[0\\] must be a cuarrow.cuda.DeviceArray"):
        cuda.DeviceArray.from_buffers(pa.list_(pa.int64()), 0, [None, None], children=[pa.array([1])])
    with pytest.raises(TypeError, match="type must be a pyarrow.DataType"):
        cuda.DeviceArray.from_buffers("int64", 1, [None, values])
    with pytest.raises(ValueError, match="needs its dictionary"):
        cuda.DeviceArray.from_buffers(pa.dictionary(pa.int32(), pa.utf8()), 0, [None, None])
    # Buffers on different devices.
    bits1 = _dev(ctx1, np.array([0b111], np.uint8))
    if ctx1.device_number != ctx.device_number:
        with pytest.raises(pa.ArrowInvalid, match="one device"):
            cuda.DeviceArray.from_buffers(pa.int64(), 3, [bits1, values])
        ints1 = cuda.DeviceArray.from_buffers(pa.int64(), 3, [None, _dev(ctx1, np.arange(3, dtype=np.int64))])
        with pytest.raises(pa.ArrowInvalid, match="one device"):
            cuda.DeviceArray.from_buffers(
                pa.list_(pa.int64()), 1, [None, _dev(ctx, np.array([0, 3], np.int32))], children=[ints1]
            )
    # The inputs are intact and usable.
    assert values.size == 24 and ints.to_host().to_pylist() == [0, 1, 2]
    assert cuda.DeviceArray.from_buffers(pa.int64(), 3, [None, values]).to_host().to_pylist() == [0, 1, 2]


def test_DeviceRecordBatch_from_arrays(ctx, ctx1):
    a = cuda.to_device(pa.array([1, 2, 3]), ctx)
    b = cuda.to_device(pa.array(["x", "y", None]), ctx)
    batch = cuda.DeviceRecordBatch.from_arrays([a, b], names=["a", "b"], metadata={"k": "v"})
    want = pa.RecordBatch.from_arrays([a.to_host(), b.to_host()], names=["a", "b"], metadata={"k": "v"})
    assert batch.schema.equals(want.schema, check_metadata=True)
    assert batch.to_host().equals(want)
    assert batch.device == ctx.device
    schema = pa.schema([("x", pa.int64()), ("y", pa.utf8())])
    assert (
        cuda.DeviceRecordBatch.from_arrays([a, b], schema=schema)
        .to_host()
        .equals(pa.RecordBatch.from_arrays([a.to_host(), b.to_host()], schema=schema))
    )
    short = cuda.to_device(pa.array([1, 2]), ctx)
    with pytest.raises(pa.ArrowInvalid, match="Column 1 named b expected length 3 but got length 2"):
        cuda.DeviceRecordBatch.from_arrays([a, short], names=["a", "b"])
    with pytest.raises(ValueError, match=r"Length of names \(2\) does not match length of arrays \(1\)"):
        cuda.DeviceRecordBatch.from_arrays([a], names=["a", "b"])
    with pytest.raises(ValueError, match="Schema and number of arrays unequal"):
        cuda.DeviceRecordBatch.from_arrays([a], schema=schema)
    with pytest.raises(ValueError, match="Cannot pass both schema and names"):
        cuda.DeviceRecordBatch.from_arrays([a, b], names=["a", "b"], schema=schema)
    with pytest.raises(ValueError, match="Must pass names or schema"):
        cuda.DeviceRecordBatch.from_arrays([a, b])
    with pytest.raises(pa.ArrowInvalid, match="Column 0 type not match schema: int64 vs string"):
        cuda.DeviceRecordBatch.from_arrays([a], schema=pa.schema([("a", pa.utf8())]))
    with pytest.raises(TypeError, match="arrays\\[0\\] must be a cuarrow.cuda.DeviceArray"):
        cuda.DeviceRecordBatch.from_arrays([pa.array([1])], names=["a"])
    if ctx1.device_number != ctx.device_number:
        with pytest.raises(pa.ArrowInvalid, match="one device"):
            cuda.DeviceRecordBatch.from_arrays([a, cuda.to_device(pa.array([1, 2, 3]), ctx1)], names=["a", "b"])
    # The inputs stay usable.
    assert a.to_host().to_pylist() == [1, 2, 3] and len(short) == 2
    empty = cuda.DeviceRecordBatch.from_arrays([], names=[])
    assert empty.num_rows == 0 and empty.to_host().equals(pa.RecordBatch.from_arrays([], names=[]))


def test_DeviceTable_from_arrays_and_batches(ctx, ctx1):
    a = cuda.to_device(pa.array([1, 2, 3]), ctx)
    s = cuda.to_device(pa.chunked_array([["x"], ["y", None]]), ctx)
    table = cuda.DeviceTable.from_arrays([a, s], names=["a", "s"])
    want = pa.Table.from_arrays([a.to_host(), s.to_host()], names=["a", "s"])
    assert table.to_host().equals(want)
    assert table.num_rows == 3 and table.device == ctx.device
    with pytest.raises(pa.ArrowInvalid, match="Column 1 named s expected length 3 but got length 2"):
        cuda.DeviceTable.from_arrays([a, cuda.to_device(pa.array(["x", "y"]), ctx)], names=["a", "s"])
    with pytest.raises(ValueError, match="Must pass names or schema"):
        cuda.DeviceTable.from_arrays([a])

    b1 = cuda.DeviceRecordBatch.from_arrays([a], names=["a"])
    b2 = cuda.to_device(pa.record_batch([pa.array([4, 5])], names=["a"]), ctx)
    table = cuda.DeviceTable.from_batches([b1, b2])
    assert table.to_host().equals(pa.Table.from_batches([b1.to_host(), b2.to_host()]))
    with pytest.raises(ValueError, match="Must pass schema, or at least one RecordBatch"):
        cuda.DeviceTable.from_batches([])
    empty = cuda.DeviceTable.from_batches([], schema=pa.schema([("a", pa.int64())]))
    assert empty.num_rows == 0 and empty.to_host().equals(pa.table({"a": pa.array([], pa.int64())}))
    other = cuda.to_device(pa.record_batch([pa.array([1])], names=["b"]), ctx)
    with pytest.raises(pa.ArrowInvalid, match="Schema at index 1 was different"):
        cuda.DeviceTable.from_batches([b1, other])
    with pytest.raises(TypeError, match="batches\\[0\\] must be a cuarrow.cuda.DeviceRecordBatch"):
        cuda.DeviceTable.from_batches([b1.to_host()])
    if ctx1.device_number != ctx.device_number:
        b3 = cuda.to_device(pa.record_batch([pa.array([6])], names=["a"]), ctx1)
        with pytest.raises(pa.ArrowInvalid, match="one device"):
            cuda.DeviceTable.from_batches([b1, b3])
    assert b1.to_host().column(0).to_pylist() == [1, 2, 3]


def test_DeviceArray_from_buffers_pyarrow_layouts(ctx):
    # Arrow C++'s leading absent buffer of null, union and run-end encoded arrays.
    assert cuda.DeviceArray.from_buffers(pa.null(), 3, [None]).to_host().equals(pa.nulls(3))
    ints = cuda.to_device(pa.array([1, 2, 3], pa.int32()), ctx)
    codes = np.array([0, 0, 0], np.int8)
    t = pa.sparse_union([pa.field("a", pa.int32())])
    host = pa.Array.from_buffers(t, 3, [None, pa.py_buffer(codes)], children=[ints.to_host()])
    dev = cuda.DeviceArray.from_buffers(t, 3, [None, _dev(ctx, codes)], children=[ints])
    assert dev.to_host().equals(host)
    with pytest.raises(
        ValueError, match=r"Type's expected number of buffers \(2\) did not match the passed number \(1\)"
    ):
        cuda.DeviceArray.from_buffers(t, 3, [_dev(ctx, codes)], children=[ints])
    with pytest.raises(ValueError, match="must be None"):
        cuda.DeviceArray.from_buffers(t, 3, [_dev(ctx, codes), _dev(ctx, codes)], children=[ints])
    ends = cuda.to_device(pa.array([2, 3], pa.int32()), ctx)
    vals = cuda.to_device(pa.array(["x", "y"]), ctx)
    ree = pa.run_end_encoded(pa.int32(), pa.utf8())
    assert cuda.DeviceArray.from_buffers(ree, 3, [None], children=[ends, vals]).to_host().to_pylist() == ["x", "x", "y"]
