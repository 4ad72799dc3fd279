"""The Arrow PyCapsule protocols on device data: what the device objects
export (capsule names, keyword rules, requested_schema), what to_device and
from_device accept from other producers and how they decide what to return,
and malformed input (bad capsules, released structs, hand-made broken
structs, failing streams) that must give a clear Python error, never a
crash."""

import ctypes
import gc

import numpy as np
import pyarrow as pa
import pytest
from arrow_samples import LabelType, sample
from c_structs import (
    ArrowDeviceArray,
    ArrowDeviceArrayStream,
    ArrowSchema,
    DeviceStreamRelease,
    Keeper,
    capsule_name,
    read_struct,
)

from cuarrow import _cuarrow as lib
from cuarrow import cuda

# ---- producers exposing one protocol each (stand-ins for other Arrow libraries) ------------


class ArrayProducer:
    def __init__(self, obj):
        self.obj = obj

    def __arrow_c_array__(self, requested_schema=None):
        return self.obj.__arrow_c_array__(requested_schema)


class BatchLikeProducer(ArrayProducer):
    """Looks like a record batch (num_columns, schema), as other libraries' batches do."""

    @property
    def num_columns(self):
        return self.obj.num_columns

    @property
    def schema(self):
        return self.obj.schema


class StreamProducer:
    def __init__(self, obj):
        self.obj = obj

    def __arrow_c_stream__(self, requested_schema=None):
        return self.obj.__arrow_c_stream__(requested_schema)


class DeviceArrayProducer:
    def __init__(self, obj):
        self.obj = obj

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self.obj.__arrow_c_device_array__(requested_schema, **kwargs)


class DeviceStreamProducer:
    def __init__(self, obj):
        self.obj = obj

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        return self.obj.__arrow_c_device_stream__(requested_schema, **kwargs)


class Returns:
    """A producer whose __arrow_c_array__ / __arrow_c_device_array__ return whatever it is given."""

    def __init__(self, value, device=False):
        self.value = value
        self.device = device

    def __getattr__(self, name):
        wanted = "__arrow_c_device_array__" if self.device else "__arrow_c_array__"
        if name == wanted:
            return lambda requested_schema=None, **kw: self.value() if callable(self.value) else self.value
        raise AttributeError(name)


# ---- exports -------------------------------------------------------------------------------------


def test_device_array_capsules(ctx):
    d = cuda.to_device(pa.array([1, None, 3], pa.int32()))
    schema, array = d.__arrow_c_device_array__()
    assert capsule_name(schema) == "arrow_schema" and capsule_name(array) == "arrow_device_array"
    s = read_struct(schema, ArrowSchema)
    assert s.format == b"i" and s.release
    a = read_struct(array, ArrowDeviceArray)
    assert a.device_type == 2 and a.device_id == 0
    assert a.sync_event  # a CUevent* recorded on the producing stream
    assert ctypes.c_void_p.from_address(a.sync_event).value  # ... pointing at a real event
    assert list(a.reserved) == [0, 0, 0]
    assert a.array.length == 3 and a.array.null_count == 1 and a.array.n_buffers == 2
    assert a.array.buffers[1] == d.buffers()[1].address
    assert pa.int32().equals(pa.DataType._import_from_c_capsule(schema))


def test_exported_capsules_keep_memory_alive():
    d = cuda.to_device(pa.array(["a", "bb", None]))
    capsules = d.__arrow_c_device_array__()
    del d
    gc.collect()
    assert cuda.from_device(DeviceArrayProducer(_Fixed(capsules))).to_host().equals(pa.array(["a", "bb", None]))
    # an unconsumed capsule releases its struct when dropped
    cuda.to_device(pa.array([1])).__arrow_c_device_array__()
    gc.collect()


class _Fixed:
    def __init__(self, capsules):
        self.capsules = capsules

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self.capsules


def test_keyword_rules():
    d = cuda.to_device(pa.array([1, 2]))
    d.__arrow_c_device_array__(other=None)
    d.__arrow_c_device_stream__(other=None)
    with pytest.raises(NotImplementedError, match=r"Received unsupported keyword argument\(s\): \['other'\]"):
        d.__arrow_c_device_array__(other=1)
    with pytest.raises(NotImplementedError, match="unsupported keyword"):
        d.__arrow_c_device_stream__(stream=5)
    b = cuda.to_device(pa.record_batch({"a": [1]}))
    with pytest.raises(NotImplementedError, match="unsupported keyword"):
        b.__arrow_c_device_array__(foo="x")
    t = cuda.to_device(pa.table({"a": [1]}))
    with pytest.raises(NotImplementedError, match="unsupported keyword"):
        t.__arrow_c_device_stream__(foo=0)


def test_requested_schema_honoured_when_it_only_relabels():
    x = pa.array([1, None, 3], pa.int32())
    d = cuda.to_device(x)
    same = cuda.from_device(_Fixed(d.__arrow_c_device_array__(pa.int32().__arrow_c_schema__())))
    assert same.type == pa.int32()
    # storage <-> extension type: the same memory under another label
    label = cuda.from_device(_Fixed(d.__arrow_c_device_array__(LabelType("n").__arrow_c_schema__())))
    assert label.type == LabelType("n") and label.to_host().storage.equals(x)
    ext = cuda.to_device(pa.ExtensionArray.from_storage(LabelType("n"), x))
    plain = cuda.from_device(_Fixed(ext.__arrow_c_device_array__(pa.int32().__arrow_c_schema__())))
    assert plain.type == pa.int32() and plain.to_host().equals(x)
    # a batch's columns renamed
    b = cuda.to_device(pa.record_batch({"a": x, "b": pa.array(["x", "y", "z"])}))
    renamed = pa.schema([("first", pa.int32()), ("second", pa.string())])
    got = cuda.from_device(BatchLikeDevice(b.__arrow_c_device_array__(renamed.__arrow_c_schema__())))
    assert got.schema.names == ["first", "second"]


class BatchLikeDevice(_Fixed):
    num_columns = 2
    schema = None


def test_requested_schema_refused_when_it_needs_a_cast():
    d = cuda.to_device(pa.array([1, None, 3], pa.int32()))
    with pytest.raises(NotImplementedError, match="requested type int64 is not the array's type int32"):
        d.__arrow_c_device_array__(pa.int64().__arrow_c_schema__())
    with pytest.raises(NotImplementedError, match="casts are not implemented"):
        d.__arrow_c_device_stream__(pa.large_string().__arrow_c_schema__())
    with pytest.raises(NotImplementedError, match="non-nullable"):
        d.__arrow_c_device_array__(pa.field("x", pa.int32(), nullable=False).__arrow_c_schema__())
    s = cuda.to_device(pa.array(["a"]))
    with pytest.raises(NotImplementedError):
        s.__arrow_c_device_array__(pa.string_view().__arrow_c_schema__())
    b = cuda.to_device(pa.record_batch({"a": [1], "b": [2]}))
    with pytest.raises(NotImplementedError, match="1 fields, the batch has 2 columns"):
        b.__arrow_c_device_array__(pa.schema([("a", pa.int64())]).__arrow_c_schema__())
    t = cuda.to_device(pa.table({"a": [1]}))
    with pytest.raises(NotImplementedError):
        t.__arrow_c_device_stream__(pa.schema([("a", pa.int32())]).__arrow_c_schema__())
    with pytest.raises(TypeError, match="PyCapsule"):
        d.__arrow_c_device_array__(requested_schema=5)


def test_device_streams():
    x = pa.chunked_array([pa.array([1, 2]), pa.array([None, 4, 5])])
    d = cuda.to_device(x)
    capsule = d.__arrow_c_device_stream__()
    assert capsule_name(capsule) == "arrow_device_array_stream"
    stream = read_struct(capsule, ArrowDeviceArrayStream)
    assert stream.device_type == 2
    back = cuda.from_device(DeviceStreamProducer(d))
    assert isinstance(back, cuda.DeviceChunkedArray) and back.to_host().equals(x)
    # a chunked array of structs stays a chunked array when the producer says what it is
    sx = pa.chunked_array([pa.array([{"a": 1}, {"a": 2}])])
    assert isinstance(cuda.from_device(cuda.to_device(sx)), cuda.DeviceChunkedArray)
    t = pa.table({"a": [1, 2, 3], "b": ["x", None, "z"]})
    dt = cuda.to_device(t)
    assert cuda.from_device(DeviceStreamProducer(dt)).to_host().equals(t)
    # one array, one batch: streams of one item
    one = cuda.from_device(DeviceStreamProducer(cuda.to_device(pa.array([7, 8]))))
    assert isinstance(one, cuda.DeviceChunkedArray) and one.to_host().equals(pa.chunked_array([[7, 8]]))
    rb = pa.record_batch({"a": [1]})
    assert cuda.from_device(DeviceStreamProducer(cuda.to_device(rb))).to_host().equals(pa.table(rb))
    empty = cuda.to_device(pa.chunked_array([], pa.string()))
    assert cuda.from_device(empty).to_host().equals(pa.chunked_array([], pa.string()))


# ---- how other producers are read ---------------------------------------------------------------


def test_foreign_producers_by_protocol():
    arr = sample(pa.struct([("a", pa.int16()), ("b", pa.string())]), 10)
    got = cuda.to_device(ArrayProducer(arr))
    assert isinstance(got, cuda.DeviceArray) and got.to_host().equals(arr)
    rb = pa.RecordBatch.from_struct_array(arr)
    got = cuda.to_device(BatchLikeProducer(rb))
    assert isinstance(got, cuda.DeviceRecordBatch) and got.to_host().equals(rb)
    t = pa.table({"a": [1, 2], "b": ["x", "y"]})
    got = cuda.to_device(StreamProducer(t))
    assert isinstance(got, cuda.DeviceTable) and got.to_host().equals(t)
    c = pa.chunked_array([[1, 2], [3]])
    got = cuda.to_device(StreamProducer(c))
    assert isinstance(got, cuda.DeviceChunkedArray) and got.to_host().equals(c)
    # a device producer: to_device copies, from_device views
    d = cuda.to_device(pa.array([1.5, None]))
    copied = cuda.to_device(DeviceArrayProducer(d))
    assert copied.buffers()[1].address != d.buffers()[1].address and copied.to_host().equals(d.to_host())
    viewed = cuda.from_device(DeviceArrayProducer(d))
    assert viewed.buffers()[1].address == d.buffers()[1].address
    assert not viewed.buffers()[1].is_mutable  # imported memory is read-only
    assert isinstance(cuda.to_device(DeviceStreamProducer(cuda.to_device(t))), cuda.DeviceTable)
    # pyarrow's CPU arrays also speak __arrow_c_device_array__ (device CPU)
    assert cuda.to_device(DeviceArrayProducer(pa.array([1, 2]))).to_host().equals(pa.array([1, 2]))


def test_from_device_refuses_cpu_data():
    for obj in (pa.array([1]), pa.record_batch({"a": [1]}), pa.table({"a": [1]}), DeviceArrayProducer(pa.array([1]))):
        with pytest.raises(TypeError, match="CPU memory.*to_device"):
            cuda.from_device(obj)


def test_not_arrow_data():
    with pytest.raises(TypeError, match=r"to_device expects Arrow data.*pa.array\(ndarray\)"):
        cuda.to_device(np.arange(3))
    with pytest.raises(TypeError, match="to_device expects Arrow data"):
        cuda.to_device([1, 2, 3])
    with pytest.raises(TypeError, match="from_device expects device data"):
        cuda.from_device(object())


def test_tensors_from_other_libraries_are_viewed(ctx):
    """__cuda_array_interface__ and DLPack producers (CuPy, PyTorch, Numba
    stand in here as wrappers over cuarrow's own exports)."""
    x = pa.array(np.arange(10, dtype=np.float32)).slice(2, 6)
    d = cuda.to_device(x)

    class CAI:
        __cuda_array_interface__ = d.__cuda_array_interface__

    class DLPackOnly:
        def __dlpack__(self, **kw):
            return d.__dlpack__(**kw)

        def __dlpack_device__(self):
            return d.__dlpack_device__()

    for producer in (CAI(), DLPackOnly()):
        v = cuda.from_device(producer)
        assert v.type == pa.float32() and v.null_count == 0 and v.offset == 0
        assert v.buffers()[1].address == d.__cuda_array_interface__["data"][0]
        assert v.to_host().equals(x)
    m = cuda.to_device(pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.int64)), 4))
    grid = cuda.from_device(CAIOf(m))
    assert grid.type == pa.list_(pa.int64(), 4) and grid.to_host().equals(m.to_host())
    ts = cuda.from_device(CAIOf(cuda.to_device(pa.array(np.arange(3, dtype=np.int64))), typestr="<M8[us]"))
    assert ts.type == pa.timestamp("us")
    with pytest.raises(TypeError, match="one byte per element"):
        cuda.from_device(CAIOf(d, typestr="|b1"))
    with pytest.raises(TypeError, match="1-D tensors"):
        cuda.from_device(CAIOf(d, shape=(2, 2, 1)))
    with pytest.raises(ValueError, match="C-contiguous"):
        cuda.from_device(CAIOf(d, shape=(2,), strides=(8,)))


class CAIOf:
    def __init__(self, d, **changes):
        self.d = d
        self.changes = changes

    @property
    def __cuda_array_interface__(self):
        desc = dict(self.d.__cuda_array_interface__)
        desc.update(self.changes)
        desc["descr"] = [("", desc["typestr"])]
        return desc


# ---- malformed input: clear errors, never a crash ------------------------------------------------


def test_wrong_capsules():
    x = pa.array([1, 2, 3])
    schema, array = x.__arrow_c_array__()
    with pytest.raises(TypeError, match='named "arrow_schema", got one named "arrow_array"'):
        cuda.to_device(Returns((array, schema)))
    with pytest.raises(TypeError, match='PyCapsule named "arrow_array", not int'):
        cuda.to_device(Returns((x.__arrow_c_array__()[0], 7)))
    with pytest.raises(TypeError, match=r"must return a \(schema capsule, array capsule\) tuple"):
        cuda.to_device(Returns(lambda: x.__arrow_c_array__()[0]))
    with pytest.raises(TypeError, match="tuple"):
        cuda.to_device(Returns((1, 2, 3)))
    # a host array where a device array is expected
    with pytest.raises(TypeError, match='named "arrow_device_array", got one named "arrow_array"'):
        cuda.to_device(Returns(lambda: x.__arrow_c_array__(), device=True))


def test_released_capsules():
    x = pa.array([1, 2, 3])
    schema, array = x.__arrow_c_array__()
    pa.Array._import_from_c_capsule(schema, array)  # consumes both
    with pytest.raises(pa.ArrowInvalid, match="released.*imported once"):
        cuda.to_device(Returns((schema, array)))
    d = cuda.to_device(x)
    capsules = d.__arrow_c_device_array__()
    cuda.from_device(_Fixed(capsules))
    with pytest.raises(pa.ArrowInvalid, match="released"):
        cuda.from_device(_Fixed(capsules))


def test_schema_that_does_not_match_the_array():
    array = pa.array([1, 2, 3], pa.int32()).__arrow_c_array__()[1]
    with pytest.raises(pa.ArrowInvalid, match="buffers"):
        cuda.to_device(Returns((pa.string().__arrow_c_schema__(), array)))


def test_producer_that_raises():
    class Broken:
        def __arrow_c_array__(self, requested_schema=None):
            raise RuntimeError("the producer broke")

    with pytest.raises(RuntimeError, match="the producer broke"):
        cuda.to_device(Broken())


def _int32_buffer(keeper, values):
    data = np.asarray(values, dtype=np.int32)
    keeper.keep(data)
    return data.ctypes.data


def test_hand_made_structs():
    k = Keeper()
    good_array = k.array(3, [None, _int32_buffer(k, [4, 5, 6])])
    good = cuda.to_device(Returns((k.capsule(k.schema("i"), "arrow_schema"), k.capsule(good_array, "arrow_array"))))
    assert good.to_host().equals(pa.array([4, 5, 6], pa.int32()))
    cases = [
        ("?", dict(length=3, buffers=[None, _int32_buffer(k, [1, 2, 3])]), "format"),
        ("i", dict(length=3, buffers=[None, _int32_buffer(k, [1, 2, 3])], n_buffers=1), "buffers"),
        ("i", dict(length=-1, buffers=[None, _int32_buffer(k, [1])]), "length"),
        ("i", dict(length=3, buffers=[None, None]), "buffer"),
        ("i", dict(length=3, buffers=[None, _int32_buffer(k, [1, 2, 3])], offset=-2), "offset"),
        ("i", dict(length=3, buffers=[None, _int32_buffer(k, [1, 2, 3])], null_count=9), "null"),
        ("u", dict(length=2, buffers=[None, None, None]), "offsets"),
        ("+l", dict(length=1, buffers=[None, _int32_buffer(k, [0, 1])]), "child"),
        ("d:99", dict(length=1, buffers=[None, _int32_buffer(k, [0] * 4)]), "decimal"),
    ]
    for fmt, array_args, match in cases:
        schema = k.schema(fmt)
        array = k.array(**array_args)
        before = k.releases
        with pytest.raises((pa.ArrowInvalid, ValueError), match=match):
            cuda.to_device(Returns((k.capsule(schema, "arrow_schema"), k.capsule(array, "arrow_array"))))
        gc.collect()
        # The array was taken and released once, as Arrow C++'s importer
        # does on failure; the schema stays with its capsule.
        assert k.releases == before + 1, (fmt, match)
        assert not array.release
        assert schema.release


def test_hand_made_device_arrays():
    k = Keeper()
    rocm = k.device_array(k.array(1, [None, _int32_buffer(k, [1])]), device_type=10)
    with pytest.raises(pa.ArrowInvalid, match="ARROW_DEVICE_ROCM"):
        cuda.from_device(
            Returns((k.capsule(k.schema("i"), "arrow_schema"), k.capsule(rocm, "arrow_device_array")), True)
        )
    released = k.device_array(k.array(1, [None, _int32_buffer(k, [1])]), device_type=2)
    released.array.release = type(released.array.release)()
    with pytest.raises(pa.ArrowInvalid, match="released"):
        cuda.from_device(
            Returns((k.capsule(k.schema("i"), "arrow_schema"), k.capsule(released, "arrow_device_array")), True)
        )  # noqa: E501


def test_broken_streams():
    def batches():
        yield pa.record_batch({"a": [1, 2]})
        raise ValueError("the source dried up")

    reader = pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]), batches())
    with pytest.raises(RuntimeError, match="get_next failed.*the source dried up"):
        cuda.to_device(reader)
    k = Keeper()
    stream = ArrowDeviceArrayStream()
    stream.device_type = 2
    calls = []
    stream.release = k.keep(
        DeviceStreamRelease(lambda p: calls.append(1) or setattr(p.contents, "release", DeviceStreamRelease()))
    )
    with pytest.raises(pa.ArrowInvalid, match="NULL get_schema"):
        cuda.from_device(DeviceStreamFixed(k.capsule(stream, "arrow_device_array_stream")))
    assert calls == [1]  # taken, then released once
    with pytest.raises(TypeError, match='named "arrow_device_array_stream"'):
        cuda.from_device(DeviceStreamFixed(pa.table({"a": [1]}).__arrow_c_stream__()))


class DeviceStreamFixed:
    def __init__(self, capsule):
        self.capsule = capsule

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        return self.capsule


def test_library_level_capsule_checks():
    with pytest.raises(TypeError, match="PyCapsule"):
        lib.import_array(1, 2)
    with pytest.raises(TypeError, match="PyCapsule"):
        lib.read_stream(b"not a capsule")
