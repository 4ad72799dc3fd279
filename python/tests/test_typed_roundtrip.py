"""Typed Arrow data to the GPU and back: every type pyarrow can build
(primitives to unions, run-end encoded, dictionaries, extension types,
nested several levels deep), with and without nulls, empty, sliced at odd
offsets, chunked; arrays, record batches, tables and readers.

Each case checks both ways back: ``to_device(x).to_host().equals(x)``, and
the C Device Data Interface round trip ``from_device(to_device(x))``
(export, zero-copy import) then ``to_host()``."""

import numpy as np
import pyarrow as pa
import pytest
from arrow_samples import LabelType, all_types, nested_types, sample, type_id

from cuarrow import cuda

TYPES = all_types()


def check_roundtrip(x):
    d = cuda.to_device(x)
    back = d.to_host()
    back.validate(full=True)
    assert back.equals(x), f"to_host() differs:\n{back}\n!=\n{x}"
    imported = cuda.from_device(d)
    assert type(imported) is type(d)
    again = imported.to_host()
    again.validate(full=True)
    assert again.equals(x), f"from_device(to_device(x)).to_host() differs:\n{again}\n!=\n{x}"
    return d


# ---- arrays of every type ------------------------------------------------------------------


@pytest.mark.parametrize("t", TYPES, ids=type_id)
def test_array_with_nulls(t):
    x = sample(t, 29, seed=1, null_p=0.3)
    d = check_roundtrip(x)
    assert isinstance(d, cuda.DeviceArray)
    assert d.type == x.type
    assert len(d) == len(x)
    assert d.null_count == x.null_count


@pytest.mark.parametrize("t", TYPES, ids=type_id)
def test_array_without_nulls(t):
    x = sample(t, 17, seed=2, null_p=0)
    d = check_roundtrip(x)
    assert d.null_count == x.null_count
    if not pa.types.is_null(t):
        assert d.validity is None or d.null_count == 0


@pytest.mark.parametrize("t", TYPES, ids=type_id)
def test_empty_array(t):
    x = sample(t, 0, seed=3)
    d = check_roundtrip(x)
    assert len(d) == 0 and d.null_count == 0


@pytest.mark.parametrize("t", TYPES, ids=type_id)
@pytest.mark.parametrize("offset,length", [(1, 9), (3, 20), (7, 0), (13, 5), (29, 0)])
def test_sliced_array(t, offset, length):
    x = sample(t, 37, seed=4, null_p=0.25).slice(offset, length)
    d = check_roundtrip(x)
    assert d.null_count == x.null_count
    # the device copy holds only what the slice references, bit positions kept
    assert d.offset < 8 or pa.types.is_struct(t) or pa.types.is_fixed_size_list(t) or d.offset <= offset


@pytest.mark.parametrize("t", TYPES, ids=type_id)
def test_chunked_array(t):
    chunks = [sample(t, 11, seed=5, null_p=0.2), sample(t, 0, seed=6), sample(t, 23, seed=7).slice(5, 13)]
    x = pa.chunked_array(chunks, type=t)
    d = check_roundtrip(x)
    assert isinstance(d, cuda.DeviceChunkedArray)
    assert d.type == t and len(d) == len(x) and d.num_chunks == x.num_chunks
    assert d.null_count == x.null_count
    assert [len(c) for c in d.chunks] == [len(c) for c in x.chunks]


@pytest.mark.parametrize("t", [pa.int32(), pa.string(), pa.struct([("a", pa.int8())])], ids=type_id)
def test_chunked_array_without_chunks(t):
    x = pa.chunked_array([], type=t)
    d = check_roundtrip(x)
    assert d.num_chunks == 0 and len(d) == 0 and d.type == t


def test_struct_array_stays_an_array():
    """A StructArray is not a record batch, even though both travel as structs."""
    x = sample(pa.struct([("a", pa.int32()), ("b", pa.string())]), 9, null_p=0.3)
    d = check_roundtrip(x)
    assert isinstance(d, cuda.DeviceArray)
    assert isinstance(cuda.to_device(pa.chunked_array([x])), cuda.DeviceChunkedArray)


def test_extension_types_keep_their_class():
    x = pa.ExtensionArray.from_storage(LabelType("fruit"), pa.array([1, None, 3], pa.int32()))
    d = check_roundtrip(x)
    assert d.type == LabelType("fruit")
    assert isinstance(d.to_host(), pa.ExtensionArray)
    assert d.to_host().type.__arrow_ext_serialize__() == b"fruit"
    if hasattr(pa, "uuid"):
        u = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([b"0123456789abcdef", None], pa.binary(16)))
        assert check_roundtrip(u).type == pa.uuid()


def test_dictionary_of_extension_values():
    """cuarrow's C++ model keeps a dictionary's value type without its field
    (so without extension metadata); pyarrow's own type rules on the way back."""
    values = pa.ExtensionArray.from_storage(LabelType("x"), pa.array([5, 6], pa.int32()))
    x = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int8()), values)
    d = check_roundtrip(x)
    assert d.type == x.type and d.dictionary.type == LabelType("x")
    b = pa.record_batch({"d": x})
    assert check_roundtrip(b).schema.equals(b.schema)


def test_deeply_nested():
    t = pa.list_(pa.struct([
        (
            "m",
            pa.map_(pa.string(), pa.large_list(pa.dense_union([pa.field("a", pa.int8()), pa.field("s", pa.string())]))),
        ),
        ("d", pa.dictionary(pa.int16(), pa.string())),
        ("r", pa.run_end_encoded(pa.int32(), pa.list_(pa.int64(), 2))),
    ]))  # fmt: skip
    for seed in range(5):
        check_roundtrip(sample(t, 15, seed=seed, null_p=0.3).slice(seed, 9))


# ---- record batches, tables, readers ---------------------------------------------------------


def _batch(n=21, seed=0):
    cols = {f"c{i}_{type_id(t)[:12]}": sample(t, n, seed=seed + i) for i, t in enumerate(TYPES)}
    return pa.RecordBatch.from_pydict(cols, metadata={"origin": "cuarrow-test"})


def test_record_batch_of_every_type():
    x = _batch()
    d = check_roundtrip(x)
    assert isinstance(d, cuda.DeviceRecordBatch)
    assert d.schema.equals(x.schema, check_metadata=True)
    assert d.to_host().schema.metadata == {b"origin": b"cuarrow-test"}
    assert d.num_rows == len(d) == x.num_rows and d.num_columns == x.num_columns
    assert d.column_names == x.column_names
    for i in (0, 7, len(TYPES) - 1):
        col = d.column(i)
        assert isinstance(col, cuda.DeviceArray)
        assert col.type == x.schema.field(i).type
        assert col.to_host().equals(x.column(i))
        assert d.column(x.column_names[i]).to_host().equals(x.column(i))
        assert d[i].to_host().equals(x.column(i))


@pytest.mark.parametrize("offset,length", [(0, 0), (3, 11), (20, 1)])
def test_sliced_record_batch(offset, length):
    x = _batch().slice(offset, length)
    check_roundtrip(x)
    assert cuda.to_device(_batch()).slice(offset, length).to_host().equals(x)


def test_table_and_reader():
    b = _batch()
    x = pa.Table.from_batches([b, b.slice(4, 9), _batch(seed=50)])
    d = check_roundtrip(x)
    assert isinstance(d, cuda.DeviceTable)
    assert d.schema.equals(x.schema) and d.num_rows == x.num_rows and d.num_columns == x.num_columns
    col = d.column(5)
    assert isinstance(col, cuda.DeviceChunkedArray) and col.to_host().equals(x.column(5))
    assert [len(batch) for batch in d.to_batches()] == [len(batch) for batch in x.to_batches()]
    reader = pa.RecordBatchReader.from_batches(b.schema, [b, b.slice(1, 2)])
    r = cuda.to_device(reader)
    assert isinstance(r, cuda.DeviceTable)
    assert r.to_host().equals(pa.Table.from_batches([b, b.slice(1, 2)]))
    empty = pa.Table.from_batches([], schema=b.schema)
    assert check_roundtrip(empty).num_rows == 0
    assert d.slice(15, 20).to_host().equals(x.slice(15, 20))


# ---- what the device objects report ------------------------------------------------------------


def test_device_array_attributes(ctx):
    x = pa.array([1, None, 3, 4, None, 6], pa.int64()).slice(1)
    d = cuda.to_device(x)
    assert d.device_type == pa.DeviceAllocationType.CUDA
    assert d.device_id == 0 and d.context == ctx and d.is_cpu is False
    assert d.null_count == 2 and len(d) == 5
    validity, values = d.buffers()
    assert isinstance(validity, cuda.CudaBuffer) and isinstance(values, cuda.CudaBuffer)
    assert values.size >= (d.offset + len(d)) * 8
    assert values.device_id == 0 and values.context == ctx
    assert d.nbytes == validity.size + values.size
    assert cuda.to_device(pa.array([1, 2, 3])).buffers()[0] is None  # no nulls, no bitmap
    s = cuda.to_device(pa.array(["a", None, "ccc"]))
    assert [b is None for b in s.buffers()] == [False, False, False]


def test_buffers_of_nested_arrays_are_flattened_like_pyarrow():
    x = pa.array([[1, 2], None, [3]], pa.list_(pa.int32()))
    d = cuda.to_device(x)
    assert len(d.buffers()) == len(x.buffers()) == 4
    assert isinstance(d.children[0], cuda.DeviceArray) and d.children[0].type == pa.int32()
    assert d.values.to_host().equals(x.values)


def test_struct_field_applies_the_offset():
    x = pa.array([{"a": i, "b": str(i)} for i in range(10)]).slice(3, 4)
    d = cuda.to_device(x)
    assert d.field(0).to_host().equals(x.field(0))
    assert d.field("b").to_host().equals(x.field("b"))
    with pytest.raises(KeyError):
        d.field("nope")
    with pytest.raises(TypeError, match="struct or union"):
        cuda.to_device(pa.array([1])).field(0)


def test_dictionary_parts():
    x = pa.array(["x", "y", None, "x"]).dictionary_encode()
    d = cuda.to_device(x)
    assert d.dictionary.to_host().equals(x.dictionary)
    assert d.indices.to_host().equals(x.indices)
    assert d.indices.type == x.indices.type


def test_indexing_and_slicing():
    x = pa.array(list(range(20)), pa.int16())
    d = cuda.to_device(x)
    assert d[3].as_py() == 3 and d[-1].as_py() == 19
    assert d[2:5].to_host().equals(x[2:5])
    assert d.slice(18).to_host().equals(x.slice(18))
    assert d.slice(25).to_host().equals(x.slice(25))
    assert d.to_pylist() == x.to_pylist()
    with pytest.raises(IndexError):
        d[20]
    with pytest.raises(IndexError):
        d.slice(-1)
    with pytest.raises(ValueError):
        d.slice(0, -1)
    with pytest.raises(IndexError, match="step"):
        d[::2]
    c = cuda.to_device(pa.chunked_array([x, x]))
    assert c[25].as_py() == 5 and c.slice(15, 10).to_host().equals(pa.chunked_array([x, x]).slice(15, 10))
    t = pa.Table.from_batches([pa.record_batch({"x": x})] * 3)
    dt = cuda.to_device(t)
    assert dt.slice(15, 30).to_host().equals(t.slice(15, 30))
    assert dt.slice(55).to_host().equals(t.slice(55))
    assert len(dt.slice(70)) == 0


def test_repr_shows_leading_values_only(ctx):
    x = pa.array(np.arange(1000, dtype=np.int32))
    d = cuda.to_device(x)
    before = ctx.transfer_stats()["device_to_host_bytes"]
    text = repr(d)
    copied = ctx.transfer_stats()["device_to_host_bytes"] - before
    assert text.startswith("<cuarrow.cuda.DeviceArray type=int32 length=1000 null_count=0 device=cuda:0>")
    assert "[0,1,2,3,4,5,6,7,...]" in text
    assert copied < 100  # the few values shown, not the 4000-byte array
    assert "null" in repr(cuda.to_device(pa.array([None, 1])))
    assert "DeviceRecordBatch num_rows=2" in repr(cuda.to_device(pa.record_batch({"a": [1, 2]})))
    assert "DeviceTable num_rows=1" in repr(cuda.to_device(pa.table({"a": ["z"]})))
    assert "DeviceChunkedArray type=int64 length=3" in repr(cuda.to_device(pa.chunked_array([[1], [2, 3]])))
    # a bitmap names its buffer's device (mypy found the facade split calling a name the buffer lacks)
    bitmap = cuda.to_device(pa.array([1, None, 3])).validity
    assert repr(bitmap) == "<cuarrow.cuda.DeviceBitmap length=3 offset=0 bytes=1 device=cuda:0>"


def test_host_access_is_refused():
    d = cuda.to_device(pa.array([1, 2, 3]))
    with pytest.raises(TypeError, match="NumPy cannot read"):
        np.asarray(d)
    with pytest.raises(TypeError, match="element by element"):
        list(d)
    with pytest.raises(TypeError, match="through the host"):
        import copy

        copy.copy(d)
    with pytest.raises(TypeError, match="to_device"):
        cuda.DeviceArray()
    # pyarrow itself cannot import CUDA memory: it says so, it does not crash
    with pytest.raises(pa.ArrowException):
        pa.array(d)


def test_host_copies_are_pyarrow_arrays_that_outlive_the_device_array():
    x = pa.array(np.arange(50000, dtype=np.float64))
    d = cuda.to_device(x)
    back = d.to_host()
    del d
    import gc

    gc.collect()
    assert back.equals(x)
    assert np.array_equal(back.to_numpy(), np.arange(50000, dtype=np.float64))
    assert back.buffers()[1].is_cpu  # host memory pyarrow reads directly (pinned, from the result pool)


# ---- contexts, devices, streams ----------------------------------------------------------------


def test_stream_argument(ctx):
    s = cuda.Stream(ctx)
    x = sample(pa.list_(pa.string()), 40, seed=9)
    d = cuda.to_device(x, stream=s)
    assert d.to_host(stream=s).equals(x)
    t = pa.table({"a": x})
    assert cuda.to_device(t, ctx, stream=s).to_host(stream=s).equals(t)
    assert cuda.from_device(d, stream=s).to_host().equals(x)


@pytest.mark.multi_device
def test_context_is_that_of_the_memory(ctx1):
    x = pa.array([1, 2, None])
    d = cuda.to_device(x, ctx1)
    assert d.context == ctx1
    assert cuda.to_device(pa.table({"x": x}), ctx1).context == ctx1
    assert cuda.to_device(pa.chunked_array([x]), ctx1).context == ctx1
    assert cuda.to_device(pa.nulls(3), ctx1).context == ctx1  # no memory: its device's


@pytest.mark.multi_device
def test_other_device_and_device_to_device_copies(ctx1):
    x = sample(pa.struct([("a", pa.string()), ("b", pa.list_(pa.float64()))]), 25, seed=11)
    d1 = cuda.to_device(x, ctx1)
    assert d1.device_id == ctx1.device_number and d1.context == ctx1
    assert all(b is None or b.device_id == ctx1.device_number for b in d1.buffers())
    assert d1.to_host().equals(x)
    d0 = cuda.to_device(d1, 0)  # device to device
    assert d0.device_id == 0 and d0.to_host().equals(x)
    batch = cuda.to_device(pa.record_batch({"x": x}), ctx1)
    assert cuda.to_device(batch, 0).to_host().equals(pa.record_batch({"x": x}))
    imported = cuda.from_device(d1)
    assert imported.device_id == ctx1.device_number


def test_null_array_keeps_its_device(ctx1):
    """An array with no buffers at all still reports (and exports) the device it was put on."""
    d = cuda.to_device(pa.nulls(5), ctx1)
    assert d.device_id == ctx1.device_number
    assert cuda.from_device(d).device_id == ctx1.device_number
    assert d.to_host().equals(pa.nulls(5))


@pytest.mark.parametrize("t", nested_types()[:6], ids=type_id)
def test_validate(t):
    d = cuda.to_device(sample(t, 12))
    d.validate()
    d.validate(full=True)
