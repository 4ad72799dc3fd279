"""Kernels on typed arrays: __cuda_array_interface__ and DLPack on
DeviceArray (dtype, shape, offset, read-only flag, stream), the refusal of
arrays with nulls (pointing to .values and .validity), .values and
.validity themselves.  The dictionaries and capsules are checked
everywhere; Numba kernels, CuPy and PyTorch run on a GPU only."""

import numpy as np
import pyarrow as pa
import pytest
from arrow_samples import LabelType

from cuarrow import _cuarrow as lib
from cuarrow import cuda

NUMERIC = [
    (pa.int8(), "|i1", 0, 8),
    (pa.int16(), "<i2", 0, 16),
    (pa.int32(), "<i4", 0, 32),
    (pa.int64(), "<i8", 0, 64),
    (pa.uint8(), "|u1", 1, 8),
    (pa.uint16(), "<u2", 1, 16),
    (pa.uint32(), "<u4", 1, 32),
    (pa.uint64(), "<u8", 1, 64),
    (pa.float16(), "<f2", 2, 16),
    (pa.float32(), "<f4", 2, 32),
    (pa.float64(), "<f8", 2, 64),
    (pa.date32(), "<i4", 0, 32),
    (pa.date64(), "<i8", 0, 64),
    (pa.time32("ms"), "<i4", 0, 32),
    (pa.time64("ns"), "<i8", 0, 64),
    (pa.timestamp("us", tz="UTC"), "<i8", 0, 64),
    (pa.duration("s"), "<i8", 0, 64),
    (LabelType(), "<i4", 0, 32),
]


def _array(t, n=12):
    storage = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    if pa.types.is_floating(storage):
        values = pa.array(np.arange(n, dtype=storage.to_pandas_dtype()))
    else:
        width = storage.bit_width
        values = pa.array(np.arange(n, dtype=f"int{width}")).view(storage)
    if storage is not t:
        return pa.ExtensionArray.from_storage(t, values)
    return values


@pytest.mark.parametrize("t,typestr,code,bits", NUMERIC, ids=lambda v: str(v))
def test_cuda_array_interface(t, typestr, code, bits):
    x = _array(t).slice(3, 7)
    d = cuda.to_device(x)
    cai = d.__cuda_array_interface__
    values = d.buffers()[1]
    assert cai["version"] == 3 and cai["stream"] == 1 and cai["strides"] is None
    assert cai["shape"] == (7,)
    assert cai["typestr"] == typestr and cai["descr"] == [("", typestr)]
    assert cai["data"] == (values.address + d.offset * bits // 8, False)
    assert np.dtype(typestr).itemsize * 8 == bits


@pytest.mark.parametrize("t,typestr,code,bits", NUMERIC, ids=lambda v: str(v))
def test_dlpack(t, typestr, code, bits):
    x = _array(t).slice(5)
    d = cuda.to_device(x)
    assert d.__dlpack_device__() == (2, 0)
    for kwargs, name in (({"max_version": (1, 0)}, "dltensor_versioned"), ({}, "dltensor")):
        capsule = d.__dlpack__(**kwargs)
        assert name in repr(capsule)
        info = lib.dlpack_info(capsule)
        assert (info["code"], info["bits"], info["lanes"]) == (code, bits, 1)
        assert info["shape"] == (7,) and info["device"] == (2, 0)
        assert info["data"] == d.buffers()[1].address + d.offset * bits // 8  # byte_offset applied


def test_offset_is_applied_at_every_position():
    x = pa.array(np.arange(100, dtype=np.int32))
    d = cuda.to_device(x)
    base = d.__cuda_array_interface__["data"][0]
    for start in (1, 7, 8, 33, 99, 100):
        s = d.slice(start)
        assert s.__cuda_array_interface__["data"][0] == (base + 4 * start if start < 100 else 0)
        assert s.__cuda_array_interface__["shape"] == (100 - start,)
    # a sliced source keeps only what it references, the view still starts at its first element
    e = cuda.to_device(x.slice(37, 5))
    assert e.__cuda_array_interface__["data"][0] == e.buffers()[1].address + 4 * e.offset
    assert e.__cuda_array_interface__["shape"] == (5,)


def test_fixed_size_lists_are_two_dimensional():
    values = pa.array(np.arange(30, dtype=np.float64))
    x = pa.FixedSizeListArray.from_arrays(values, 3).slice(2, 5)
    d = cuda.to_device(x)
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (5, 3) and cai["typestr"] == "<f8"
    child = d.children[0]
    assert cai["data"][0] == child.buffers()[1].address + 8 * (child.offset + 3 * d.offset)
    info = lib.dlpack_info(d.__dlpack__())
    assert info["shape"] == (5, 3) and info["strides"] == (24, 8) and info["c_contiguous"]  # strides in bytes
    with pytest.raises(TypeError, match="list values"):
        _ = cuda.to_device(
            pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0]), 2)
        ).__cuda_array_interface__


def test_nulls_are_refused_with_a_pointer_to_values_and_validity():
    x = pa.array([1, None, 3, 4], pa.int32())
    d = cuda.to_device(x)
    with pytest.raises(
        TypeError, match=r"1 null, and __cuda_array_interface__ carries no validity.*\.values.*\.validity"
    ):
        _ = d.__cuda_array_interface__
    with pytest.raises(BufferError, match=r"DLPack carries no validity.*arr\.values.*arr\.validity"):
        d.__dlpack__()
    assert not _has_cai(d)
    # a slice without the null is fine
    assert _has_cai(d.slice(2))
    # the values, nulls' slots unspecified, and the validity bitmap
    v = d.values
    assert isinstance(v, cuda.DeviceArray) and v.null_count == 0
    assert v.__cuda_array_interface__["data"][0] == d.buffers()[1].address + 4 * d.offset
    host = v.to_host().to_numpy()
    assert host[0] == 1 and host[2] == 3 and host[3] == 4
    bitmap = d.validity
    assert isinstance(bitmap, cuda.DeviceBitmap)
    assert bitmap.to_numpy().tolist() == [True, False, True, True]
    assert bitmap.__cuda_array_interface__["typestr"] == "|u1"
    assert bitmap.__dlpack_device__() == (2, 0)


def _has_cai(d):
    try:
        _ = d.__cuda_array_interface__
    except TypeError:
        return False
    return True


def test_validity_bit_offset():
    x = pa.array([None if i % 3 == 0 else i for i in range(40)], pa.int64()).slice(13, 20)
    d = cuda.to_device(x)
    bitmap = d.validity
    assert bitmap.length == 20 and 0 <= bitmap.offset < 8
    assert bitmap.buffer.size == (bitmap.offset + 20 + 7) // 8
    assert bitmap.to_numpy().tolist() == [v.is_valid for v in x]
    assert d.slice(3, 9).validity.to_numpy().tolist() == [v.is_valid for v in x.slice(3, 9)]
    assert cuda.to_device(pa.array([1, 2])).validity is None


def test_booleans_have_a_bitmap_not_a_dtype():
    x = pa.array([True, False, None, True, True]).slice(1)
    d = cuda.to_device(x)
    with pytest.raises(TypeError, match="bit-packed booleans.*DeviceBitmap"):
        _ = d.__cuda_array_interface__
    with pytest.raises(BufferError, match="bit-packed"):
        d.__dlpack__()
    assert d.values.to_numpy().tolist()[:1] == [False]
    assert d.values.to_numpy()[2:].tolist() == [True, True]
    assert d.validity.to_numpy().tolist() == [True, False, True, True]


@pytest.mark.parametrize(
    "x,match",
    [
        (pa.array(["a", "b"]), "not a fixed-width array"),
        (pa.array([[1], [2]]), "not a fixed-width array"),
        (pa.array([1, 2]).dictionary_encode(), r"\.indices"),
        (pa.array([b"ab", b"cd"], pa.binary(2)), "fixed-size binary"),
        (pa.array([1, 2], pa.decimal128(5, 2)), "decimals"),
        (pa.nulls(3), "holds no values"),
        (pa.array([{"a": 1}]), "not a fixed-width array"),
        (pa.array([(1, 2, 3)], pa.month_day_nano_interval()), "not a fixed-width array"),
    ],
)
def test_types_without_a_dtype_are_refused(x, match):
    d = cuda.to_device(x)
    with pytest.raises(TypeError, match=match):
        _ = d.__cuda_array_interface__
    with pytest.raises(BufferError, match=match):
        d.__dlpack__()


def test_dictionary_indices_have_a_dtype():
    d = cuda.to_device(pa.array(["x", "y", "x"]).dictionary_encode())
    assert d.indices.__cuda_array_interface__["typestr"] == "<i4"


def test_dlpack_arguments():
    d = cuda.to_device(pa.array(np.arange(8, dtype=np.int32))).slice(2)
    with pytest.raises(BufferError, match="DLPack device"):
        d.__dlpack__(dl_device=(1, 0))
    with pytest.raises(ValueError, match="stream 0 is ambiguous"):
        d.__dlpack__(stream=0)
    d.__dlpack__(stream=-1)
    d.__dlpack__(stream=1, dl_device=(2, 0))
    s = cuda.Stream()
    d.__dlpack__(stream=s.handle)  # that stream waits for cuarrow's work
    copied = d.__dlpack__(copy=True, max_version=(1, 0))
    info = lib.dlpack_info(copied)
    assert info["data"] != d.__cuda_array_interface__["data"][0] and info["shape"] == (6,)
    assert cuda.from_device(DL(copied)).to_host().equals(pa.array(np.arange(2, 8, dtype=np.int32)))
    empty = cuda.to_device(pa.array([], pa.float32()))
    assert empty.__cuda_array_interface__["data"] == (0, False) and empty.__cuda_array_interface__["shape"] == (0,)
    assert lib.dlpack_info(empty.__dlpack__())["shape"] == (0,)


class DL:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (2, 0)


def test_imported_arrays_are_read_only():
    d = cuda.from_device(cuda.to_device(pa.array([1, 2, 3], pa.int64())))
    assert d.__cuda_array_interface__["data"][1] is True
    capsule = d.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)


def test_pyarrow_reads_the_host_copy():
    """to_host() hands pyarrow an ordinary host array (pinned memory from
    cuarrow's pool, kept alive by the array's release callback)."""
    x = pa.array(np.arange(1000, dtype=np.int64))
    stats = cuda.pinned_pool_stats()
    back = cuda.to_device(x).to_host()
    assert back.equals(x) and back.to_numpy()[999] == 999
    held = cuda.pinned_pool_stats()["in_use_bytes"]
    assert held >= stats["in_use_bytes"]
    del back
    import gc

    gc.collect()
    assert cuda.pinned_pool_stats()["in_use_bytes"] <= held


# ---- on a GPU: Numba, CuPy, PyTorch ------------------------------------------------------------


@pytest.fixture(scope="module")
def numba_cuda():
    return pytest.importorskip("numba.cuda")


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch was built without CUDA")
    return torch


@pytest.fixture(scope="module")
def increment_by_one(numba_cuda):
    @numba_cuda.jit
    def increment_by_one(an_array):
        pos = numba_cuda.grid(1)
        if pos < an_array.size:
            an_array[pos] += 1

    return increment_by_one


@pytest.mark.gpu
def test_the_page_example_as_written(increment_by_one):
    """The page's wish: a typed Arrow array copied to the device, and a Numba
    kernel run on it directly, without a hand-built DeviceNDArray."""
    import cuarrow

    increment_by_one[1, 32](cuarrow.cuda.to_device(pa.array(np.arange(4, dtype=np.int32))))
    typed = cuarrow.cuda.to_device(pa.array(np.arange(4, dtype=np.int32)))
    increment_by_one[1, 32](typed)
    assert typed.to_host().to_pylist() == [1, 2, 3, 4]
    assert typed.to_host().type == pa.int32()


@pytest.mark.gpu
def test_numba_kernel_on_slices_and_values(increment_by_one, numba_cuda):
    x = pa.array(np.arange(40, dtype=np.float32))
    d = cuda.to_device(x)
    increment_by_one[2, 32](d.slice(10, 5))
    assert d.to_host().to_numpy()[8:17].tolist() == [8, 9, 11, 12, 13, 14, 15, 15, 16]
    n = cuda.to_device(pa.array([1, None, 3], pa.int64()))
    with pytest.raises(Exception) as refused:  # noqa: B017 - numba may wrap our TypeError
        increment_by_one[1, 32](n)
    assert _mentions(refused.value, ".validity")
    increment_by_one[1, 32](n.values)
    assert n.to_host().to_pylist() == [2, None, 4]
    view = numba_cuda.as_cuda_array(d)
    assert view.shape == (40,) and view.dtype == np.float32
    assert view.__cuda_array_interface__["data"][0] == d.__cuda_array_interface__["data"][0]
    bits = numba_cuda.as_cuda_array(n.validity)
    assert bits.dtype == np.uint8 and bits.copy_to_host()[0] & 0b111 == 0b101


def _mentions(error, text):
    """True when `error` or an exception it was raised from says `text`."""
    while error is not None:
        if text in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.mark.gpu
def test_cupy_views_typed_arrays(cupy):
    x = pa.array(np.arange(20, dtype=np.int64)).slice(3, 9)
    d = cuda.to_device(x)
    c = cupy.asarray(d)
    assert c.dtype == cupy.int64 and c.shape == (9,)
    assert c.data.ptr == d.buffers()[1].address + 8 * d.offset  # zero-copy
    c *= 2
    cupy.cuda.runtime.deviceSynchronize()
    assert d.to_host().to_pylist() == [2 * v for v in range(3, 12)]
    f = cupy.from_dlpack(d)
    assert f.data.ptr == c.data.ptr
    grid = cupy.asarray(cuda.to_device(pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3)))
    assert grid.shape == (2, 3) and float(grid[1, 2]) == 5.0
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        g = cupy.from_dlpack(d)  # the consumer's stream waits for cuarrow's work
        g += 1
    s.synchronize()
    assert d.to_host().to_pylist()[0] == 7
    back = cuda.from_device(cupy.arange(5, dtype=cupy.float32))
    assert back.type == pa.float32() and back.to_host().to_pylist() == [0, 1, 2, 3, 4]
    m = cupy.arange(6, dtype=cupy.int16).reshape(2, 3)
    assert cuda.from_device(m).to_host().to_pylist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.gpu
def test_torch_views_typed_arrays(torch):
    x = pa.array(np.arange(16, dtype=np.float32)).slice(4)
    d = cuda.to_device(x)
    t = torch.from_dlpack(d)
    assert t.dtype == torch.float32 and tuple(t.shape) == (12,)
    assert t.data_ptr() == d.buffers()[1].address + 4 * d.offset  # zero-copy
    t.add_(1)
    torch.cuda.synchronize()
    assert d.to_host().to_pylist() == [float(v + 1) for v in range(4, 16)]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        u = torch.from_dlpack(d)  # s is made to wait for cuarrow's work
        u.mul_(2)
    s.synchronize()
    assert d.to_host().to_pylist()[0] == 10.0
    h = torch.from_dlpack(cuda.to_device(pa.array(np.arange(3, dtype=np.float16))))
    assert h.dtype == torch.float16
    with pytest.raises(BufferError, match="validity"):
        torch.from_dlpack(cuda.to_device(pa.array([1.0, None])))
    back = cuda.from_device(torch.arange(4, device="cuda", dtype=torch.int32))
    assert back.type == pa.int32() and back.to_host().to_pylist() == [0, 1, 2, 3]
