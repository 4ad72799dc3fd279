"""The Arrow IPC format over device memory (cuarrow.ipc, cuda.read_message,
read_record_batch, serialize_record_batch): pyarrow writes, cuarrow reads on
the device (zero-copy) and to_host() equals; cuarrow writes, pyarrow reads
equal, byte for byte what pyarrow writes; malformed bytes raise ArrowInvalid
and never crash."""

import io

import numpy as np
import pyarrow as pa
import pytest
from arrow_samples import all_types, sample, type_id

from cuarrow import cuda, ipc


def _stream_bytes(batches, schema, **options):
    sink = io.BytesIO()
    opts = pa.ipc.IpcWriteOptions(**options) if options else None
    with pa.ipc.new_stream(sink, schema, options=opts) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue()


def _file_bytes(batches, schema):
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, schema) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue()


def _batches_of(t, seed=0):
    schema = pa.schema([pa.field("x", t), pa.field("i", pa.int32())])
    out = []
    for k, n in enumerate([23, 0, 5]):
        out.append(
            pa.record_batch([sample(t, n, seed=seed + k), pa.array(np.arange(n, dtype=np.int32))], schema=schema)
        )
    return schema, out


def _has_dictionary(t):
    if pa.types.is_dictionary(t):
        return True
    if isinstance(t, pa.ExtensionType):
        return _has_dictionary(t.storage_type)
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


def _on_device(batch):
    assert isinstance(batch, cuda.DeviceRecordBatch)
    assert not batch.is_cpu


# ---- pyarrow writes, cuarrow reads on the device ------------------------------------------


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_stream_and_file_of_every_type(ctx, t):
    schema, batches = _batches_of(t)
    expected = pa.Table.from_batches(batches, schema)

    dbuf = ctx.buffer_from_data(_stream_bytes(batches, schema))
    reader = ipc.open_stream(dbuf)
    assert reader.schema.equals(schema, check_metadata=True)
    got = list(reader)
    assert [len(b) for b in got] == [23, 0, 5]
    for b in got:
        _on_device(b)
    assert pa.Table.from_batches([b.to_host() for b in got], schema).equals(expected)

    if _has_dictionary(t):
        return  # each batch has a dictionary of its own: no IPC file can hold them
    fbuf = ctx.buffer_from_data(_file_bytes(batches, schema))
    f = ipc.open_file(fbuf)
    assert f.num_record_batches == 3
    _on_device(f.get_batch(2))
    assert f.get_batch(2).to_host().equals(batches[2])
    table = f.read_all()
    assert isinstance(table, cuda.DeviceTable)
    assert table.to_host().equals(expected)


def _has_extension(t):
    if isinstance(t, pa.BaseExtensionType):
        return True
    if pa.types.is_dictionary(t):
        return _has_extension(t.value_type)
    return any(_has_extension(t.field(i).type) for i in range(t.num_fields))


def _same_bytes(mine, theirs, t):
    if not _has_extension(t):
        assert mine == theirs
        return
    # Arrow writes an extension type's two ARROW:extension keys in hash-map
    # order (docs/known-gaps.md): the schema is read equal, and the bytes
    # after it are equal.
    a, b = pa.BufferReader(mine), pa.BufferReader(theirs)
    if mine.startswith(b"ARROW1"):
        a.seek(8)
        b.seek(8)
    assert pa.ipc.read_schema(pa.ipc.read_message(a)).equals(pa.ipc.read_schema(pa.ipc.read_message(b)))
    assert mine[a.tell() :] == theirs[b.tell() :] or mine.startswith(b"ARROW1")
    if not mine.startswith(b"ARROW1"):
        return
    # A file's footer repeats the schema: compare the messages between.
    end = len(mine) - 10 - int.from_bytes(mine[-10:-6], "little")
    end_theirs = len(theirs) - 10 - int.from_bytes(theirs[-10:-6], "little")
    assert mine[a.tell() : end] == theirs[b.tell() : end_theirs]


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_cuarrow_writes_what_pyarrow_writes(ctx, t):
    schema, batches = _batches_of(t, seed=7)
    device = [cuda.to_device(b, ctx) for b in batches]
    with ipc.new_stream(ctx, schema) as w:
        for b in device:
            w.write_batch(b)
    out = w.getvalue()
    assert isinstance(out, cuda.CudaBuffer)
    host = out.copy_to_host()
    assert pa.ipc.open_stream(host).read_all().equals(pa.Table.from_batches(batches, schema))
    # Byte for byte, but for the empty batch: Arrow writes an empty binary or
    # list array's one offset (4 bytes), cuarrow none (docs/known-gaps.md).
    full = [batches[0], batches[2]]
    with ipc.new_stream(ctx, schema) as w:
        for b in full:
            w.write_batch(b)
    _same_bytes(w.getvalue().copy_to_host().to_pybytes(), _stream_bytes(full, schema), t)

    if _has_dictionary(t):
        return  # each batch has a dictionary of its own: no IPC file can hold them
    with ipc.new_file(ctx, schema) as w:
        w.write_table(cuda.DeviceTable.from_batches(device, schema))
    host = w.getvalue().copy_to_host()
    assert pa.ipc.open_file(host).read_all().equals(pa.Table.from_batches(batches, schema))
    with ipc.new_file(ctx, schema) as w:
        w.write_table(pa.Table.from_batches(full, schema))
    _same_bytes(w.getvalue().copy_to_host().to_pybytes(), _file_bytes(full, schema), t)


def test_each_schema_object_has_its_own_schema_message(ctx):
    # Writers remember each schema object's converted schema and encoded
    # message (ipc._encoded_schema): the same object again gives the same
    # bytes, and another object, equal or not (other metadata, a field's
    # metadata, a name), its own message, as pyarrow writes it.
    table = pa.table({"a": pa.array([1, None, 3], pa.int64()), "s": ["x", "yy", None]})
    schema = table.schema
    variants = [
        (schema, table),
        (schema, table),
        (pa.schema(list(schema)), table),
        (schema.with_metadata({"k": "v"}), table),
        (schema.with_metadata({"k": "w"}), table),
        (pa.schema([schema.field(0).with_metadata({"f": "1"}), schema.field(1)]), table),
        (pa.schema([pa.field("b", pa.int64()), schema.field(1)]), table.rename_columns(["b", "s"])),
    ]

    def check(sch, t):
        with ipc.new_stream(ctx, sch) as w:
            w.write_table(t)
        got = w.getvalue().copy_to_host().to_pybytes()
        assert got == _stream_bytes(t.to_batches(), sch)
        assert pa.ipc.open_stream(got).schema.equals(sch, check_metadata=True)

    for sch, t in variants:
        check(sch, t)
    # Fresh objects, each dropped after use, more than the writers
    # remember: their ids are reused.
    for i in range(40):
        check(schema.with_metadata({"i": str(i)}), table)


def test_pyarrow_batches_and_tables_are_moved_to_the_device(ctx):
    table = pa.table({"a": pa.array([1, None, 3], pa.int64()), "s": ["x", "yy", None]})
    with ipc.new_stream(ctx, table.schema) as w:
        w.write(table)  # pyarrow Table
        w.write(table.to_batches()[0])  # pyarrow RecordBatch
        w.write_table(table, max_chunksize=2)
    out = w.close()
    assert out.context == ctx
    back = pa.ipc.open_stream(out.copy_to_host()).read_all()
    assert back.num_rows == 3 * 3
    assert back.equals(pa.concat_tables([table] * 3))
    assert [b.num_rows for b in pa.ipc.open_stream(out.copy_to_host())] == [3, 3, 2, 1]


def test_dictionaries_with_a_delta(ctx):
    schema = pa.schema([pa.field("d", pa.dictionary(pa.int32(), pa.string())), pa.field("n", pa.int64())])

    def batch(values, indices):
        d = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))
        return pa.record_batch([d, pa.array(range(len(indices)), pa.int64())], schema=schema)

    batches = [batch(["a", "b"], [0, 1, None, 1]), batch(["a", "b", "c", "dd"], [3, 2, 0]), batch(["z"], [0, 0])]
    data = _stream_bytes(batches, schema, emit_dictionary_deltas=True)
    kinds = [m.type for m in _messages(pa.BufferReader(data))]
    # the second batch's dictionary is sent as a delta, the third replaces it
    assert kinds == ["schema", "dictionary", "record batch", "dictionary", "record batch", "dictionary", "record batch"]
    expected = pa.ipc.open_stream(data).read_all()

    got = ipc.open_stream(ctx.buffer_from_data(data)).read_all()
    assert got.to_host().equals(expected)
    for b in got.to_batches():
        _on_device(b)
        assert not b.column(0).dictionary.is_cpu


def _messages(reader):
    out = []
    while True:
        try:
            out.append(pa.ipc.read_message(reader))
        except (StopIteration, EOFError):
            return out


def test_nested_dictionaries_and_many_batches(ctx):
    inner = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None], pa.int8()), pa.array(["p", "q"]))
    struct = pa.StructArray.from_arrays([inner, pa.array([1.5, 2.5, None, 4.0])], names=["k", "v"])
    lists = pa.array([[1], [], None, [2, 3]], pa.list_(pa.int16()))
    batch = pa.record_batch([struct, lists], names=["s", "l"])
    batches = [batch.slice(i % 4, 4 - i % 4) for i in range(200)]
    data = _stream_bytes(batches, batch.schema)
    reader = ipc.open_stream(ctx.buffer_from_data(data))
    table = reader.read_all()
    assert len(table.to_batches()) == 200
    assert table.to_host().equals(pa.ipc.open_stream(data).read_all())


def test_empty_stream_and_file(ctx):
    schema = pa.schema([("a", pa.int32())])
    table = ipc.open_stream(ctx.buffer_from_data(_stream_bytes([], schema))).read_all()
    assert table.num_rows == 0 and table.schema.equals(schema)
    f = ipc.open_file(ctx.buffer_from_data(_file_bytes([], schema)))
    assert f.num_record_batches == 0
    with pytest.raises(ValueError, match="Batch number 0 out of range: the file has 0 record batches"):
        f.get_batch(0)
    w = ipc.new_stream(ctx, schema)
    assert w.close().copy_to_host().to_pybytes() == _stream_bytes([], schema)


def test_readers_from_a_buffer_reader_and_their_shapes(ctx):
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int32())], names=["a"])
    data = _stream_bytes([batch, batch], batch.schema)
    dbuf = ctx.buffer_from_data(b"\0" * 8 + data)
    reader = cuda.BufferReader(dbuf)
    reader.seek(8)
    with cuda.ipc.open_stream(reader) as r:
        first = r.read_next_batch()
        _on_device(first)
        assert first.to_host().equals(batch)
        assert r.read_next_batch().to_host().equals(batch)
        with pytest.raises(StopIteration):
            r.read_next_batch()
    assert cuda.ipc is ipc
    # pyarrow's read options, as far as they apply
    assert ipc.open_stream(dbuf.slice(8), options=pa.ipc.IpcReadOptions(use_threads=False)).read_all().num_rows == 6
    with pytest.raises(NotImplementedError, match="included_fields"):
        ipc.open_stream(dbuf.slice(8), options=pa.ipc.IpcReadOptions(included_fields=[0]))
    # Not a device source: a clear TypeError naming what to use.
    with pytest.raises(TypeError, match="pyarrow.ipc.open_stream"):
        ipc.open_stream(data)


@pytest.mark.multi_device
def test_other_devices(ctx, ctx1):
    table = pa.table({"a": [1, 2, None], "s": ["x", None, "yz"]})
    data = _stream_bytes(table.to_batches(), table.schema)
    got = ipc.open_stream(ctx1.buffer_from_data(data)).read_all()
    assert got.device_id == 1
    assert got.to_host().equals(table)
    # a writer on device 1 takes batches of device 0
    with ipc.new_stream(ctx1, table.schema) as w:
        w.write_table(cuda.to_device(table, ctx))
    assert w.getvalue().context == ctx1
    assert w.getvalue().copy_to_host().to_pybytes() == data


def test_batches_are_zero_copy_slices_of_the_source(ctx):
    batch = pa.record_batch([pa.array(np.arange(1000, dtype=np.int64))], names=["a"])
    dbuf = ctx.buffer_from_data(_stream_bytes([batch], batch.schema))
    got = ipc.open_stream(dbuf).read_next_batch()
    values = got.column(0).buffers()[1]
    assert dbuf.address <= values.address < dbuf.address + dbuf.size


def test_one_reader_and_one_writer_shared_by_threads(ctx):
    # The binding reads and writes with the GIL released: threads sharing a
    # reader each get distinct batches (every batch once), and a shared
    # writer takes every batch.
    from concurrent.futures import ThreadPoolExecutor

    batches = [pa.record_batch([pa.array(np.full(50, i, dtype=np.int64))], names=["i"]) for i in range(64)]
    reader = ipc.open_stream(ctx.buffer_from_data(_stream_bytes(batches, batches[0].schema)))
    writer = ipc.new_stream(ctx, batches[0].schema)

    def work(_):
        seen = []
        while True:
            try:
                b = reader.read_next_batch()
            except StopIteration:
                return seen
            writer.write_batch(b)
            seen.append(b.column(0).to_host()[0].as_py())

    with ThreadPoolExecutor(4) as pool:
        seen = sorted(sum(pool.map(work, range(4)), []))
    assert seen == list(range(64))
    back = pa.ipc.open_stream(writer.close().copy_to_host()).read_all()
    assert sorted(back.column(0).to_pylist()[::50]) == list(range(64))


# ---- pa.ipc over a cuda.BufferReader ----------------------------------------------------


@pytest.mark.parametrize("open_", [pa.ipc.open_stream, pa.ipc.open_file, pa.ipc.RecordBatchStreamReader])
def test_pyarrow_reader_over_a_buffer_reader_says_what_to_use(ctx, open_):
    batch = pa.record_batch([pa.array([1, 2, 3])], names=["a"])
    writer = _file_bytes if open_ is pa.ipc.open_file else _stream_bytes
    dbuf = ctx.buffer_from_data(writer([batch], batch.schema))
    with pytest.raises(TypeError, match=r"cuarrow\.cuda\.ipc\.open_stream"):
        open_(cuda.BufferReader(dbuf))
    # read_buffer itself still gives device slices to everyone else
    assert isinstance(cuda.BufferReader(dbuf).read_buffer(8), cuda.CudaBuffer)


# ---- messages ---------------------------------------------------------------------------


def test_read_message_keeps_the_body_on_the_device_and_serializes(ctx):
    table = pa.table({"a": pa.array([1, None, 3], pa.int64()), "d": pa.array(["x", "y", "x"]).dictionary_encode()})
    data = _stream_bytes(table.to_batches(), table.schema)
    expected = _messages(pa.BufferReader(data))
    reader = cuda.BufferReader(ctx.buffer_from_data(data))
    got = []
    while True:
        try:
            got.append(cuda.read_message(reader))
        except EOFError:
            break
    assert reader.tell() == reader.size()
    assert [m.type for m in got] == [m.type for m in expected] == ["schema", "dictionary", "record batch"]
    for mine, theirs in zip(got, expected):
        assert isinstance(mine, ipc.Message)
        assert isinstance(mine.body, cuda.CudaBuffer)
        assert mine.body.copy_to_host().equals(theirs.body)
        assert mine.metadata.equals(theirs.metadata)
        assert mine.metadata_version == theirs.metadata_version
        assert mine.serialize().equals(theirs.serialize())
        assert pa.ipc.read_message(mine.serialize()).equals(theirs)

    schema_msg, dict_msg, batch_msg = got
    memo = ipc.DictionaryMemo()
    schema = ipc.read_schema(schema_msg, memo)
    assert schema.equals(table.schema)
    memo.add(dict_msg)
    batch = cuda.read_record_batch(batch_msg, schema, dictionary_memo=memo)
    _on_device(batch)
    assert batch.to_host().equals(table.to_batches()[0])
    # without the dictionaries: refused, not guessed
    with pytest.raises(pa.ArrowInvalid):
        cuda.read_record_batch(batch_msg, schema)
    with pytest.raises(TypeError, match="cuarrow.ipc.DictionaryMemo"):
        cuda.read_record_batch(batch_msg, schema, dictionary_memo=pa.DictionaryMemo())


def test_serialize_record_batch_of_device_and_pyarrow_batches(ctx, ctx1):
    batch = pa.record_batch([pa.array([1.5, None, 3.0]), pa.array(["a", "bc", None])], names=["f", "s"])
    for source in [batch, cuda.to_device(batch, ctx), cuda.to_device(batch, ctx1)]:
        dbuf = cuda.serialize_record_batch(source, ctx)
        assert isinstance(dbuf, cuda.CudaBuffer)
        assert dbuf.context == ctx
        assert dbuf.copy_to_host().equals(batch.serialize())
        back = cuda.read_record_batch(dbuf, batch.schema)
        _on_device(back)
        assert back.to_host().equals(batch)
    with pytest.raises(pa.ArrowInvalid):
        cuda.serialize_record_batch(pa.record_batch([pa.array(["a"]).dictionary_encode()], names=["d"]), ctx)


def test_custom_metadata_both_ways(ctx):
    batch = pa.record_batch([pa.array([1, 2], pa.int16())], names=["a"])
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, batch.schema, metadata={"footer": "f"}) as w:
        w.write_batch(batch, custom_metadata={"k": "v1"})
        w.write_batch(batch)
    theirs = sink.getvalue()
    f = ipc.open_file(ctx.buffer_from_data(theirs))
    assert f.metadata == pa.KeyValueMetadata({"footer": "f"})
    first, md = f.get_batch_with_custom_metadata(0)
    _on_device(first)
    assert md == pa.KeyValueMetadata({"k": "v1"})
    assert f.get_batch_with_custom_metadata(1).custom_metadata is None

    with ipc.new_file(ctx, batch.schema, metadata={"footer": "f"}) as w:
        w.write_batch(batch, custom_metadata={"k": "v1"})
        w.write_batch(cuda.to_device(batch, ctx))
    assert w.getvalue().copy_to_host().to_pybytes() == theirs

    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch, custom_metadata={b"x": b"\xff"})
    r = ipc.open_stream(ctx.buffer_from_data(sink.getvalue()))
    got = list(r.iter_batches_with_custom_metadata())
    assert [m for _, m in got] == [pa.KeyValueMetadata({b"x": b"\xff"})]
    with pytest.raises(StopIteration):
        r.read_next_batch_with_custom_metadata()


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_sliced_batches_round_trip(ctx, t):
    schema, batches = _batches_of(t, seed=3)
    sliced = [batches[0].slice(3, 11), batches[0].slice(20), batches[2].slice(1, 0)]
    with ipc.new_stream(ctx, schema) as w:
        for b in sliced:
            w.write_batch(cuda.to_device(b, ctx))
    back = pa.ipc.open_stream(w.getvalue().copy_to_host()).read_all()
    assert back.equals(pa.Table.from_batches(sliced, schema))
    again = ipc.open_stream(w.getvalue()).read_all()
    assert again.to_host().equals(back)


def test_a_write_takes_batches_whose_schemas_have_other_metadata(ctx):
    # One write's batches under schema objects of their own: equal ones with
    # other metadata take the writer's schema, and a batch of another
    # schema among them is refused with nothing written.
    schema = pa.schema([("a", pa.int32())], metadata={"w": "1"})
    plain = pa.record_batch([pa.array([1, 2], pa.int32())], names=["a"])
    tagged = plain.replace_schema_metadata({"b": "2"})
    other = pa.record_batch([pa.array([1], pa.int64())], names=["a"])
    batches = [plain, tagged, plain, tagged]
    device = [cuda.to_device(b, ctx) for b in batches]
    device.append(device[0].slice(1))  # another DeviceRecordBatch, the same schema object
    with ipc.new_stream(ctx, schema) as w:
        w.write_table(cuda.DeviceTable.from_batches(device))
    expected = [*batches, plain.slice(1)]
    assert w.getvalue().copy_to_host().to_pybytes() == _stream_bytes(expected, schema)
    w = ipc.new_stream(ctx, schema)
    with pytest.raises(pa.ArrowInvalid, match="different schema"):
        w._write_batches([device[0], device[1], cuda.to_device(other, ctx)])
    w.write_table(cuda.DeviceTable.from_batches(device[:2]))
    assert w.close().copy_to_host().to_pybytes() == _stream_bytes(batches[:2], schema)


# ---- writers refuse misuse -------------------------------------------------------------------


def test_writer_errors(ctx):
    schema = pa.schema([("a", pa.int32())])
    w = ipc.new_stream(ctx, schema)
    with pytest.raises(pa.ArrowInvalid, match="different schema"):
        w.write_batch(pa.record_batch([pa.array([1], pa.int64())], names=["a"]))
    with pytest.raises(TypeError, match="Context"):
        ipc.new_stream(io.BytesIO(), schema)
    w.close()
    with pytest.raises(pa.ArrowInvalid, match="closed"):
        w.write_batch(pa.record_batch([pa.array([1], pa.int32())], names=["a"]))
    with pytest.raises(NotImplementedError, match="uncompressed"):
        ipc.new_stream(ctx, schema, options=pa.ipc.IpcWriteOptions(compression="zstd"))


# ---- hostile bytes -----------------------------------------------------------------------


def _read_everything(data, ctx, file):
    dbuf = ctx.buffer_from_data(data)
    reader = ipc.open_file(dbuf) if file else ipc.open_stream(dbuf)
    table = reader.read_all()
    for b in table.to_batches():
        b.validate(full=True) if hasattr(b, "validate") else b.to_host().validate(full=True)
    return table


@pytest.mark.parametrize("file", [False, True], ids=["stream", "file"])
def test_truncated_and_flipped_bytes_raise_arrow_invalid(ctx, file):
    batch = pa.record_batch(
        [pa.array(["ab", None, "cde"]), pa.array([[1, 2], None, []], pa.list_(pa.int32()))], names=["s", "l"]
    )
    data = (_file_bytes if file else _stream_bytes)([batch, batch], batch.schema)
    refused = 0
    for cut in range(0, len(data), 3):
        try:
            _read_everything(data[:cut], ctx, file)
        except (pa.ArrowInvalid, EOFError):
            refused += 1
    assert refused > 0
    rng = np.random.default_rng(3)
    for pos in range(len(data)):
        flipped = bytearray(data)
        flipped[pos] ^= int(rng.integers(1, 256))
        try:
            table = _read_everything(bytes(flipped), ctx, file)
        except (pa.ArrowInvalid, EOFError):
            continue
        table.to_host().validate(full=True)
    with pytest.raises(pa.ArrowInvalid):
        cuda.read_message(ctx.buffer_from_data(data[:12] if not file else data[8:20]))


def test_messages_under_the_wrong_schema_or_kind_raise_arrow_invalid(ctx):
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int32()), pa.array(["a", "b", None])], names=["i", "s"])
    data = _stream_bytes([batch], batch.schema)
    reader = cuda.BufferReader(ctx.buffer_from_data(data))
    schema_msg, batch_msg = cuda.read_message(reader), cuda.read_message(reader)
    with pytest.raises(pa.ArrowInvalid):  # one column too few
        cuda.read_record_batch(batch_msg, pa.schema([("i", pa.int32())]))
    with pytest.raises(pa.ArrowInvalid):  # a string column read as lists
        cuda.read_record_batch(batch_msg, pa.schema([("i", pa.int32()), ("s", pa.list_(pa.int8()))]))
    with pytest.raises(pa.ArrowInvalid, match="record batch"):
        cuda.read_record_batch(schema_msg, batch.schema)
    with pytest.raises(pa.ArrowInvalid, match="schema"):
        ipc.read_schema(batch_msg)
    memo = ipc.DictionaryMemo()
    with pytest.raises(pa.ArrowInvalid, match="no schema"):
        memo.add(batch_msg)
    ipc.read_schema(schema_msg, memo)
    with pytest.raises(pa.ArrowInvalid, match="dictionary"):
        memo.add(batch_msg)
    with pytest.raises(pa.ArrowInvalid):  # a stream is not a file
        ipc.open_file(ctx.buffer_from_data(data))
    with pytest.raises(TypeError, match="Do not call"):
        ipc.Message()


def test_a_non_nullable_field_with_nulls_is_refused_naming_it(ctx):
    """The writers check every batch's non-nullable columns for nulls (the
    positions looked up once per writer), whether the batch comes alone or
    in a table, and write those without nulls."""
    schema = pa.schema([pa.field("ok", pa.int64()), pa.field("strict", pa.int32(), nullable=False)])
    good = pa.record_batch([pa.array([1, None, 3]), pa.array([1, 2, 3], pa.int32())], schema=schema)
    bad = pa.record_batch([pa.array([1, 2, 3]), pa.array([1, None, 3], pa.int32())], schema=schema)
    table = cuda.to_device(pa.Table.from_batches([good, bad]), ctx)
    w = ipc.new_stream(ctx, schema)
    w.write_batch(cuda.to_device(good, ctx))
    with pytest.raises(NotImplementedError, match="field 'strict' is non-nullable but has 1 nulls"):
        w.write_batch(cuda.to_device(bad, ctx))
    with pytest.raises(NotImplementedError, match="field 'strict' is non-nullable but has 1 nulls"):
        w.write_table(table)
    got = ipc.open_stream(w.close()).read_all().to_host()
    assert got.equals(pa.Table.from_batches([good]))


@pytest.mark.parametrize(
    ("gather", "max_run"),
    [(True, None), (True, 0), (True, 256), (False, None)],
    ids=["gather-kernel", "gather-kernel-no-line", "gather-kernel-256-byte-line", "driver-copies"],
)
def test_a_stream_of_many_pieces_is_pyarrows_bytes_with_and_without_the_gather_kernel(ctx, gather, max_run):
    """A device table of 40 batches of 5 columns (hundreds of buffers, their
    padding and metadata between them) written into device memory: through
    cuarrow's gather kernel (one launch, gaps and metadata included), with
    the runs from the kernel's line on (device_gather_max_run_bytes) left
    to the copy engines, or one driver copy each, the bytes are pyarrow's."""

    def batch(k: int) -> pa.RecordBatch:
        rows = range(100 * k, 100 * k + 100)
        return pa.record_batch(
            {
                "i": pa.array(rows, pa.int64()),
                "f": pa.array([x / 7 for x in rows], pa.float64()),
                "s": pa.array([None if x % 11 == 0 else "v" * (x % 13) for x in rows]),
                "b": pa.array([x % 3 == 0 for x in rows]),
                "l": pa.array([[x] * (x % 4) for x in rows], pa.list_(pa.int16())),
            }
        )

    batches = [batch(k) for k in range(40)]
    table = pa.Table.from_batches(batches)
    device = ipc.DeviceTable.from_batches([cuda.to_device(b, ctx) for b in batches])
    saved = cuda.transfer_options()
    cuda.set_transfer_options(device_gather=gather)
    if max_run is not None:
        cuda.set_transfer_options(device_gather_max_run_bytes=max_run)
    try:
        with ipc.new_stream(ctx, table.schema) as w:
            w.write_table(device)
        out = w.close()
    finally:
        cuda.set_transfer_options(**saved)
    assert ctx.gather_status() == "ready"
    assert out.copy_to_host().to_pybytes() == _stream_bytes(batches, table.schema)
