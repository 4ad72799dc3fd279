"""The standard protocols: __cuda_array_interface__ (v3), DLPack
(__dlpack__ / __dlpack_device__, both directions), __cuda_stream__, and
cuarrow's own Stream and Event.  Third-party consumers (Numba, CuPy,
PyTorch) are in test_gpu_interop.py."""

import ctypes
import gc
import sys
import weakref

import numpy as np
import pyarrow as pa
import pytest
from conftest import CAIProducer

from cuarrow import cuda


class DLPackProducer:
    """Re-exports another object's DLPack (to test the consumer side)."""

    def __init__(self, obj, device=None):
        self.obj = obj
        self.device = device
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device or self.obj.__dlpack_device__()


# ---- __cuda_array_interface__ -------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_cuda_array_interface(ctx, size):
    buf = ctx.buffer_from_data(bytes(range(256)) * 4)[:size]
    desc = buf.__cuda_array_interface__
    assert desc["version"] == 3
    assert desc["shape"] == (size,)
    assert desc["typestr"] == "|u1"
    assert desc["data"] == (buf.address, False)
    assert desc["strides"] is None
    assert "stream" in desc and desc["stream"] == 1  # legacy default stream
    # Another consumer (cuarrow itself) views it without a copy.
    view = ctx.buffer_from_object(CAIProducer(desc, keep=buf))
    assert view.size == size
    if size:
        assert view.address == buf.address
    assert view.to_pybytes() == buf.to_pybytes()


def test_cuda_array_interface_views_are_views(ctx):
    owner = ctx.buffer_from_data(np.arange(8, dtype=np.int16))
    producer = CAIProducer(owner.__cuda_array_interface__, keep=owner)
    view = ctx.buffer_from_object(producer)
    view.copy_from_host(np.array([-1], dtype=np.int16))
    assert np.frombuffer(owner.copy_to_host(), dtype=np.int16)[0] == -1


def test_cuda_array_interface_keeps_producer_alive(ctx):
    owner = ctx.buffer_from_data(b"abcdefgh")
    producer = CAIProducer(owner.__cuda_array_interface__, keep=owner)
    ref = weakref.ref(producer)
    view = ctx.buffer_from_object(producer)
    del producer, owner
    gc.collect()
    assert ref() is not None
    assert view.to_pybytes() == b"abcdefgh"
    del view
    gc.collect()
    assert ref() is None


def test_cuda_array_interface_strides(ctx):
    owner = ctx.buffer_from_data(np.arange(24, dtype=np.int32))
    base = owner.address

    def view(shape, strides, typestr="<i4", offset=0):
        desc = {"shape": shape, "strides": strides, "typestr": typestr, "data": (base + offset, False), "version": 3}
        return ctx.buffer_from_object(CAIProducer(desc, keep=owner))

    assert view((24,), None).size == 96
    assert view((4, 6), (24, 4)).size == 96  # C order
    assert view((6, 4), (4, 24)).size == 96  # Fortran order
    assert view((2, 3, 4), (48, 16, 4)).size == 96
    assert view((3,), (4,), offset=8).to_pybytes() == np.arange(2, 5, dtype=np.int32).tobytes()
    # Negative strides: the span starts before the data pointer.
    rev = view((4,), (-4,), offset=12)
    assert rev.address == base and rev.size == 16
    assert view((0, 5), (20, 4)).size == 0
    assert view((1, 5), (999, 4)).size == 20  # a length-1 dimension's stride is irrelevant
    with pytest.raises(ValueError, match="array data is non-contiguous"):
        view((12,), (8,))
    with pytest.raises(ValueError, match="array data is non-contiguous"):
        view((4, 3), (24, 4))


def test_cuda_array_interface_null_pointer(ctx):
    desc = {"shape": (0,), "typestr": "|u1", "data": (0, False), "version": 3}
    assert ctx.buffer_from_object(CAIProducer(desc)).size == 0


def test_cuda_array_interface_stream_is_synchronized(ctx):
    owner = ctx.buffer_from_data(b"abcd")
    s = cuda.Stream(ctx)
    desc = dict(owner.__cuda_array_interface__, stream=s.handle)
    assert ctx.buffer_from_object(CAIProducer(desc, keep=owner)).to_pybytes() == b"abcd"
    desc["stream"] = 0
    with pytest.raises(ValueError, match="stream 0"):
        ctx.buffer_from_object(CAIProducer(desc, keep=owner))


def test_cuda_array_interface_of_host_memory_refused(ctx):
    data = np.zeros(16, dtype=np.uint8)
    desc = {"shape": (16,), "typestr": "|u1", "data": (data.ctypes.data, False), "version": 3}
    with pytest.raises(cuda.CudaError, match="Cuda error "):
        ctx.buffer_from_object(CAIProducer(desc, keep=data))


@pytest.mark.multi_device
def test_cuda_array_interface_wrong_device(ctx, ctx1):
    owner = ctx1.buffer_from_data(b"abcd")
    with pytest.raises(ValueError, match="memory of device 1"):
        ctx.buffer_from_object(CAIProducer(owner.__cuda_array_interface__, keep=owner))
    assert ctx1.buffer_from_object(CAIProducer(owner.__cuda_array_interface__, keep=owner)).size == 4


@pytest.mark.multi_device
def test_from_device_views_a_cuda_array_interface_on_its_device(ctx, ctx1):
    # A CAI does not say its device: the core asks the driver where the memory is.
    d = cuda.to_device(pa.array([1, 2, 3], pa.int32()), ctx1)
    v = cuda.from_device(CAIProducer(dict(d.__cuda_array_interface__), keep=d))
    assert v.context == ctx1 and v.to_host().equals(pa.array([1, 2, 3], pa.int32()))
    with pytest.raises(ValueError, match=r"memory of device 1, the context is for device 0; use Context\(1\)"):
        cuda.from_device(CAIProducer(dict(d.__cuda_array_interface__), keep=d), ctx)


def test_cuda_array_interface_of_pinned_memory(ctx):
    host = cuda.new_host_buffer(16)
    desc = {"shape": (4,), "typestr": "<i4", "data": (host.address, False), "version": 3}
    view = ctx.buffer_from_object(CAIProducer(desc, keep=host))
    assert view.size == 16 and view.device_type == pa.DeviceAllocationType.CUDA_HOST


def test_cuda_array_interface_stream_orders_from_device(ctx):
    d = cuda.to_device(pa.array(np.arange(4, dtype=np.int32)), ctx)
    s = cuda.Stream(ctx)
    desc = dict(d.__cuda_array_interface__, stream=s.handle)
    v = cuda.from_device(CAIProducer(desc, keep=d), stream=s)
    assert v.to_host().equals(pa.array(np.arange(4, dtype=np.int32)))
    desc["stream"] = -1
    with pytest.raises(ValueError, match="not a stream handle"):
        cuda.from_device(CAIProducer(desc, keep=d))


# ---- DLPack -------------------------------------------------------------------


def _capsule_name(capsule):
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    return get_name(capsule).decode()


def test_dlpack_device(ctx):
    buf = ctx.new_buffer(4)
    assert buf.__dlpack_device__() == (2, 0)  # kDLCUDA, device 0
    pinned_view = ctx.buffer_from_object(cuda.new_host_buffer(4))
    assert pinned_view.__dlpack_device__() == (3, 0)  # kDLCUDAHost


@pytest.mark.parametrize("max_version", [None, (1, 0), (1, 1), (2, 0)])
def test_dlpack_export_capsules(ctx, max_version):
    buf = ctx.buffer_from_data(b"abcd")
    capsule = buf.__dlpack__(max_version=max_version)
    versioned = max_version is not None
    assert _capsule_name(capsule) == ("dltensor_versioned" if versioned else "dltensor")
    del capsule  # an unconsumed capsule frees its tensor
    gc.collect()


@pytest.mark.parametrize("size", [0, 1, 1000])
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_dlpack_round_trip(ctx, size, max_version):
    buf = ctx.buffer_from_data(bytes(range(250)) * 4)[:size]
    producer = DLPackProducer(buf)
    view = ctx.buffer_from_object(producer)
    assert view.size == size
    assert view.to_pybytes() == buf.to_pybytes()
    if size:
        assert view.address == buf.address  # zero copy
    # cuarrow, as a consumer, asks for a versioned capsule on the legacy stream.
    assert producer.calls[0]["stream"] == 1
    assert producer.calls[0]["max_version"] == (1, 0)


def test_dlpack_capsule_keeps_memory_alive(ctx):
    before = ctx.bytes_allocated
    buf = ctx.buffer_from_data(b"0123456789abcdef")
    capsule = buf.__dlpack__(max_version=(1, 0))
    del buf
    gc.collect()
    assert ctx.bytes_allocated == before + 16  # still held by the capsule

    class Once:
        def __dlpack__(self, **kwargs):
            return capsule  # noqa: F821 - deleted below only after the last call

        def __dlpack_device__(self):
            return (2, 0)

    view = ctx.buffer_from_object(Once())
    assert _capsule_name(capsule) == "used_dltensor_versioned"
    assert view.to_pybytes() == b"0123456789abcdef"
    # A consumed capsule cannot be imported twice.
    with pytest.raises(TypeError, match="unconsumed DLPack capsule"):
        ctx.buffer_from_object(Once())
    del view
    gc.collect()
    assert ctx.bytes_allocated == before  # the deleter ran when the view went away
    del capsule, Once
    gc.collect()
    assert ctx.bytes_allocated == before  # and only once


def test_dlpack_read_only_flag(ctx):
    owner = ctx.buffer_from_data(b"abcd")

    class ReadOnly:
        @property
        def __cuda_array_interface__(self):
            return dict(owner.__cuda_array_interface__, data=(owner.address, True))

    ro = ctx.buffer_from_object(ReadOnly())
    assert not ro.is_mutable
    # The versioned export carries DLPACK_FLAG_BITMASK_READ_ONLY, which cuarrow reads back.
    back = ctx.buffer_from_object(DLPackProducer(ro))
    assert not back.is_mutable
    with pytest.raises(ValueError, match="read-only"):
        back.copy_from_host(b"x")


def test_dlpack_copy_and_device_arguments(ctx):
    buf = ctx.buffer_from_data(b"abcd")
    copied = ctx.buffer_from_object(DLPackProducer(_Copying(buf)))
    assert copied.address != buf.address and copied.to_pybytes() == b"abcd"
    with pytest.raises(BufferError, match="cannot export"):
        buf.__dlpack__(dl_device=(1, 0))
    assert buf.__dlpack__(dl_device=(2, 0)) is not None
    with pytest.raises(ValueError, match="stream 0"):
        buf.__dlpack__(stream=0)
    own = cuda.Stream(ctx)
    for stream in (None, -1, 1, 2, own.handle):
        assert buf.__dlpack__(stream=stream, max_version=(1, 0)) is not None


class _Copying:
    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, **kwargs):
        return self.buf.__dlpack__(copy=True, **kwargs)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


def test_dlpack_of_cpu_tensors_refused(ctx):
    with pytest.raises(pa.ArrowTypeError, match="cannot create device buffer view from .*numpy.ndarray"):
        ctx.buffer_from_object(np.arange(4))
    # Even when a producer lies about the device, the capsule says CPU.

    class Liar:
        def __dlpack__(self, **kwargs):
            return np.arange(4).__dlpack__()

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="device type 1"):
        ctx.buffer_from_object(Liar())


@pytest.mark.multi_device
def test_dlpack_wrong_device(ctx, ctx1):
    buf = ctx1.buffer_from_data(b"abcd")
    assert buf.__dlpack_device__() == (2, 1)
    with pytest.raises(ValueError, match="on device 1"):
        ctx.buffer_from_object(DLPackProducer(buf))
    assert ctx1.buffer_from_object(DLPackProducer(buf)).to_pybytes() == b"abcd"


# ---- streams --------------------------------------------------------------------


class ForeignStream:
    """A stream object as CuPy, PyTorch or numba-cuda present it."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_stream_and_event_basics(ctx):
    s = cuda.Stream(ctx)
    assert s.handle != 0
    assert s.context == ctx
    assert s.device_number == 0
    assert s.__cuda_stream__() == (0, s.handle)
    s.synchronize()
    assert s.query() in (True, False)
    e = s.record()
    e.synchronize()
    assert e.query()
    s.wait_event(e)
    assert cuda.Stream().context == cuda.Context(0)
    assert cuda.Stream(0, non_blocking=False).handle != 0
    assert "Stream" in repr(s) and "Event" in repr(e)


def test_event_timing(ctx):
    start = cuda.Event(ctx, timing=True)
    end = cuda.Event(ctx, timing=True)
    start.record()
    ctx.new_buffer(64).copy_from_host(bytes(64))
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


@pytest.mark.parametrize("kind", ["cuarrow", "protocol", "int", "none"])
def test_copies_take_streams(ctx, kind):
    own = cuda.Stream(ctx)
    stream = {"cuarrow": own, "protocol": ForeignStream(own.handle), "int": own.handle, "none": None}[kind]
    dbuf = ctx.buffer_from_data(b"abcdefgh", stream=stream)
    assert dbuf.copy_to_host(stream=stream).to_pybytes() == b"abcdefgh"
    assert dbuf.copy_from_host(b"XY", position=2, stream=stream) == 2
    other = ctx.new_buffer(8)
    assert other.copy_from_device(dbuf, stream=stream) == 8
    assert other.to_pybytes() == b"abXYefgh"
    out = bytearray(8)
    other.copy_to_host(buf=out, stream=stream)
    assert bytes(out) == b"abXYefgh"


def test_stream_argument_errors(ctx):
    dbuf = ctx.new_buffer(4)
    with pytest.raises(TypeError, match="stream must be"):
        dbuf.copy_to_host(stream="default")
    with pytest.raises(TypeError, match="stream must be"):
        dbuf.copy_to_host(stream=1.5)

    class Bad:
        def __cuda_stream__(self):
            return 7

    with pytest.raises(TypeError, match="__cuda_stream__"):
        dbuf.copy_to_host(stream=Bad())


def test_stream_argument_shapes(ctx):
    # Every shape the binding's stream caster takes: __cuda_stream__ as an
    # attribute, .cuda_stream (older PyTorch), __int__ (numba-cuda), an int subclass.
    own = cuda.Stream(ctx)

    class Attribute:
        __cuda_stream__ = (0, own.handle)

    class Torch:
        cuda_stream = own.handle

    class Numba:
        def __int__(self):
            return own.handle

    class Handle(int):
        pass

    dbuf = ctx.buffer_from_data(b"abcd")
    for stream in (Attribute(), Torch(), Numba(), Handle(own.handle), 0):
        assert dbuf.copy_to_host(stream=stream).to_pybytes() == b"abcd"
        event = cuda.Event(ctx)
        event.record(stream)
        event.synchronize()


def test_stream_argument_refusals(ctx):
    dbuf = ctx.new_buffer(4)
    for bad in (True, 1.0, object()):
        with pytest.raises(TypeError, match=f"stream must be .* not {type(bad).__name__}"):
            dbuf.copy_to_host(stream=bad)
    with pytest.raises(TypeError, match="stream must be"):
        cuda.Event(ctx).record("default")

    class Three:
        def __cuda_stream__(self):
            return (0, 1, 2)

    class NotAnInteger:
        __cuda_stream__ = (0, "abc")

    for bad in (Three(), NotAnInteger()):
        expected = f"{type(bad).__name__}.__cuda_stream__ must give a .version, handle. tuple"
        with pytest.raises(TypeError, match=expected):
            dbuf.copy_to_host(stream=bad)
    with pytest.raises(TypeError, match="CUstream handle is an address"):
        dbuf.copy_to_host(stream=-1)
    with pytest.raises(TypeError, match="stream must be"):
        cuda.to_device(pa.array([1]), stream="default")
    with pytest.raises(TypeError, match="stream must be"):
        cuda.from_device(ctx.buffer_from_data(b"abcd"), stream="default")


@pytest.mark.multi_device
def test_stream_of_another_device_refused(ctx, ctx1):
    s1 = cuda.Stream(ctx1)
    dbuf = ctx.new_buffer(4)
    with pytest.raises(ValueError, match="stream belongs to device 1"):
        dbuf.copy_to_host(stream=s1)
    with pytest.raises(ValueError, match="stream belongs to device 1"):
        dbuf.copy_from_host(b"abcd", stream=ForeignStream(s1.handle))
    # A copy between the two devices may run on either device's stream.
    dbuf1 = ctx1.buffer_from_data(b"wxyz")
    assert dbuf.copy_from_device(dbuf1, stream=s1) == 4
    assert dbuf.to_pybytes() == b"wxyz"


def test_refcounts_do_not_leak(ctx):
    data = bytes(1000)
    rc = sys.getrefcount(data)
    for _ in range(10):
        ctx.buffer_from_data(data)
        dbuf = ctx.new_buffer(1000)
        dbuf.copy_from_host(data)
        dbuf.copy_to_host()
    assert sys.getrefcount(data) == rc
