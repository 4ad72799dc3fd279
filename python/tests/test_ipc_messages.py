"""Arrow IPC messages in device memory: serialize_record_batch, read_message
(also from a BufferReader, which pyarrow.cuda gets wrong), read_record_batch,
and IPC streams written through a BufferWriter.  As in pyarrow.cuda, what is
read stays on the device: read_record_batch gives a DeviceRecordBatch and
read_message a cuarrow Message whose body is a CudaBuffer (pyarrow's own
functions cannot take device messages; test_ipc_format.py has the rest)."""

import numpy as np
import pyarrow as pa
import pytest

from cuarrow import cuda


def make_recordbatch(length):
    schema = pa.schema([pa.field("f0", pa.int16()), pa.field("f1", pa.int16())])
    a0 = pa.array(np.random.randint(0, 255, size=length, dtype=np.int16))
    a1 = pa.array(np.random.randint(0, 255, size=length, dtype=np.int16))
    return pa.record_batch([a0, a1], schema=schema)


def make_table():
    a0 = pa.array([0, 1, 42, None], type=pa.int16())
    a1 = pa.array([[0, 1], [2], [], None], type=pa.list_(pa.int32()))
    a2 = pa.array(
        [("ab", True), ("cde", False), (None, None), None],
        type=pa.struct([("strs", pa.utf8()), ("bools", pa.bool_())]),
    )
    a3 = pa.DictionaryArray.from_arrays(indices=[0, 1, 1, None], dictionary=pa.array(["foo", "bar"]))
    arrays = [a0, a1, a2, a3]
    schema = pa.schema([(f"f{i}", arr.type) for i, arr in enumerate(arrays)])
    return pa.Table.from_batches([pa.record_batch(arrays, schema=schema)])


def test_batch_serialize(ctx):
    batch = make_recordbatch(10)
    hbuf = batch.serialize()
    cbuf = cuda.serialize_record_batch(batch, ctx)
    assert isinstance(cbuf, cuda.CudaBuffer)
    assert cbuf.context == ctx

    cbatch = cuda.read_record_batch(cbuf, batch.schema)
    assert isinstance(cbatch, cuda.DeviceRecordBatch)
    assert cbatch.schema == batch.schema
    assert cbatch.num_columns == batch.num_columns
    assert cbatch.num_rows == batch.num_rows
    assert cbatch.equals(batch)

    buf = cbuf.copy_to_host()
    assert hbuf.equals(buf)
    batch2 = pa.ipc.read_record_batch(buf, batch.schema)
    assert batch2.equals(batch)

    with pytest.raises(TypeError, match="expected Context instance"):
        cuda.serialize_record_batch(batch, 0)
    with pytest.raises(TypeError, match="expected CudaBuffer instance"):
        cuda.read_record_batch(hbuf, batch.schema)


def test_read_message(ctx):
    batch = make_recordbatch(5)
    cbuf = cuda.serialize_record_batch(batch, ctx)
    message = cuda.read_message(cbuf)
    assert isinstance(message, cuda.ipc.Message)
    assert isinstance(message.body, cuda.CudaBuffer)
    assert message.type == "record batch"
    assert cuda.read_record_batch(message, batch.schema).equals(batch)
    assert pa.ipc.read_record_batch(message.serialize(), batch.schema).equals(batch)


def test_read_message_from_buffer_reader(ctx):
    # pyarrow.cuda's read_message(BufferReader) fails (unbound local).
    table = make_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    dbuf = ctx.buffer_from_data(sink.getvalue())

    reader = cuda.BufferReader(dbuf)
    schema_message = cuda.read_message(reader)
    assert schema_message.type == "schema"
    position = reader.tell()
    assert position > 0
    kinds = []
    while True:
        try:
            message = cuda.read_message(reader)
        except EOFError:  # the end-of-stream marker
            break
        assert reader.tell() > position
        position = reader.tell()
        kinds.append(message.type)
    assert kinds == ["dictionary", "record batch"]
    assert reader.tell() == reader.size()

    # The whole stream, read from the host copy.
    assert pa.ipc.open_stream(dbuf.copy_to_host()).read_all().equals(table)


def test_table_through_device_memory(ctx):
    table = make_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    size = sink.getvalue().size

    dbuf = ctx.new_buffer(size)
    writer = cuda.BufferWriter(dbuf)
    with pa.ipc.new_stream(writer, table.schema) as out:
        out.write_table(table)
    writer.close()
    assert pa.ipc.open_stream(dbuf.copy_to_host()).read_all().equals(table)


def test_read_message_errors(ctx):
    with pytest.raises(TypeError, match="expected CudaBuffer or BufferReader"):
        cuda.read_message(b"abc")
    empty = ctx.buffer_from_data(bytes(8))
    with pytest.raises((EOFError, pa.ArrowInvalid, OSError)):
        cuda.read_message(empty)
