"""BufferReader and BufferWriter (the IPC-free parts of pyarrow's tests),
plus the bounds checks pyarrow lacks."""

import io

import numpy as np
import pyarrow as pa
import pytest
from conftest import make_random_buffer

from cuarrow import cuda


def _writes(ctx, total_size, chunksize, buffer_size=0):
    cbuf = ctx.new_buffer(total_size)
    writer = cuda.BufferWriter(cbuf)
    arr, buf = make_random_buffer(ctx, total_size, "host")
    if buffer_size > 0:
        writer.buffer_size = buffer_size

    assert writer.tell() == 0
    writer.write(buf.slice(length=chunksize))
    assert writer.tell() == chunksize
    writer.seek(0)
    assert writer.tell() == 0

    position = 0
    while position < total_size:
        n = min(chunksize, total_size - position)
        writer.write(buf.slice(offset=position, length=n))
        position += n
    writer.flush()
    assert cbuf.size == total_size
    cbuf.context.synchronize()
    buf2 = cbuf.copy_to_host()
    assert buf2.size == total_size
    np.testing.assert_equal(arr, np.frombuffer(buf2, dtype=np.uint8))


def test_BufferWriter(ctx):
    total_size, chunk_size = 1 << 16, 1000
    _writes(ctx, total_size, chunk_size)
    _writes(ctx, total_size, chunk_size, total_size // 16)

    cbuf = ctx.new_buffer(100)
    writer = cuda.BufferWriter(cbuf)
    writer.write(np.arange(100, dtype=np.uint8))
    writer.writeat(50, np.arange(25, dtype=np.uint8))
    writer.write(np.arange(25, dtype=np.uint8))
    writer.flush()
    arr = np.frombuffer(cbuf.copy_to_host(), np.uint8)
    np.testing.assert_equal(arr[:50], np.arange(50, dtype=np.uint8))
    np.testing.assert_equal(arr[50:75], np.arange(25, dtype=np.uint8))
    np.testing.assert_equal(arr[75:], np.arange(25, dtype=np.uint8))


def test_BufferWriter_edge_cases(ctx):
    size = 1000
    cbuf = ctx.new_buffer(size)
    writer = cuda.BufferWriter(cbuf)
    arr, buf = make_random_buffer(ctx, size, "host")

    assert writer.buffer_size == 0
    writer.buffer_size = 100
    assert writer.buffer_size == 100

    writer.write(buf.slice(length=0))
    assert writer.tell() == 0

    writer.write(buf.slice(length=10))
    assert writer.num_bytes_buffered == 10
    writer.buffer_size = 200  # flushes
    assert writer.buffer_size == 200
    assert writer.num_bytes_buffered == 0

    writer.write(buf.slice(offset=10, length=300))  # bigger than the staging buffer: straight through
    assert writer.num_bytes_buffered == 0
    writer.write(buf.slice(offset=310, length=200))  # fills it: straight through
    assert writer.num_bytes_buffered == 0
    writer.write(buf.slice(offset=510, length=390))
    writer.write(buf.slice(offset=900, length=100))
    assert writer.num_bytes_buffered == 100
    writer.flush()
    assert writer.num_bytes_buffered == 0

    buf2 = cbuf.copy_to_host()
    assert buf2.size == size
    np.testing.assert_equal(arr, np.frombuffer(buf2, dtype=np.uint8))


def test_BufferWriter_close_flushes(ctx):
    cbuf = ctx.new_buffer(8)
    with cuda.BufferWriter(cbuf) as writer:
        writer.buffer_size = 64
        writer.write(b"abcd")
        assert writer.num_bytes_buffered == 4
    assert writer.closed
    # Only the written bytes: the rest of new_buffer's memory is uninitialized
    # (compute-sanitizer's initcheck reports reading it).
    assert cbuf.slice(0, 4).to_pybytes() == b"abcd"


@pytest.mark.parametrize("buffer_size", [0, 16])
def test_BufferWriter_bounds_checked(ctx, buffer_size):
    # pyarrow's CudaBufferWriter writes past the end of the device buffer.
    cbuf = ctx.buffer_from_data(bytes(10))
    writer = cuda.BufferWriter(cbuf)
    writer.buffer_size = buffer_size
    writer.write(b"12345678")
    with pytest.raises(OSError, match="Write out of bounds"):
        writer.write(b"abc")
    assert writer.tell() == 8
    writer.write(b"90")
    writer.flush()
    assert cbuf.to_pybytes() == b"1234567890"
    with pytest.raises(OSError, match="position out of bounds"):
        writer.seek(11)
    with pytest.raises(OSError, match="position out of bounds"):
        writer.seek(-1)
    with pytest.raises(OSError, match="position out of bounds"):
        writer.writeat(11, b"x")
    with pytest.raises(OSError, match="Write out of bounds"):
        writer.writeat(9, b"xy")
    with pytest.raises(ValueError, match="Invalid value of whence: 3"):
        writer.seek(0, 3)
    # Seeking to the end is allowed (pyarrow refuses it); writing there is not.
    assert writer.seek(10) == 10
    assert writer.seek(-2, 1) == 8
    assert writer.seek(0, 2) == 10


def test_BufferWriter_refuses_read_only_and_host_buffers(ctx):
    read_only = ctx.buffer_from_object(_ReadOnlyView(ctx.buffer_from_data(b"abcd")))
    assert not read_only.is_mutable
    with pytest.raises(ValueError, match="read-only"):
        cuda.BufferWriter(read_only)
    with pytest.raises(TypeError, match="expected CudaBuffer instance, got bytes"):
        cuda.BufferWriter(b"abcd")
    with pytest.raises(TypeError, match="expected CudaBuffer instance"):
        cuda.BufferReader(pa.py_buffer(b"abcd"))


def test_BufferWriter_whose_init_raised_closes_quietly():
    # What io.IOBase's finalizer does to the object a refused BufferWriter(...)
    # left behind (Python 3.13 reports an exception raised there).
    w = cuda.BufferWriter.__new__(cuda.BufferWriter)
    w.close()
    assert w.closed


class _ReadOnlyView:
    """A CUDA Array Interface producer that says its memory is read-only."""

    def __init__(self, buf):
        self.buf = buf

    @property
    def __cuda_array_interface__(self):
        desc = dict(self.buf.__cuda_array_interface__)
        desc["data"] = (self.buf.address, True)
        return desc


def test_read_only_buffers_refuse_writes(ctx):
    owner = ctx.buffer_from_data(b"abcd")
    ro = ctx.buffer_from_object(_ReadOnlyView(owner))
    assert not ro.is_mutable
    assert ro.to_pybytes() == b"abcd"
    with pytest.raises(ValueError, match="read-only"):
        ro.copy_from_host(b"xy")
    with pytest.raises(ValueError, match="read-only"):
        ro.copy_from_device(owner)
    assert not ro.slice(1).is_mutable
    assert ro.__cuda_array_interface__["data"][1] is True
    assert owner.to_pybytes() == b"abcd"


def test_BufferWriter_pyarrow_ipc_into_device_memory(ctx):
    # pyarrow writes an IPC stream through the writer (host -> device), and
    # the bytes on the device are exactly the stream.
    table = pa.table({"a": pa.array([1, 2, 3, None], pa.int16()), "b": ["x", "yy", None, "zzz"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    expected = sink.getvalue()

    cbuf = ctx.new_buffer(expected.size)
    writer = cuda.BufferWriter(cbuf)
    writer.buffer_size = 256
    with pa.ipc.new_stream(writer, table.schema) as out:
        out.write_table(table)
    writer.flush()
    host = cbuf.copy_to_host()
    assert host.equals(expected)
    assert pa.ipc.open_stream(host).read_all().equals(table)


def test_BufferReader(ctx):
    size = 1000
    arr, cbuf = make_random_buffer(ctx, size, target="device")

    reader = cuda.BufferReader(cbuf)
    assert isinstance(reader, io.RawIOBase)
    assert reader.readable() and reader.seekable() and not reader.writable()
    assert reader.size() == size
    reader.seek(950)
    assert reader.tell() == 950

    data = reader.read(100)
    assert isinstance(data, bytes)
    assert len(data) == 50
    assert data == arr[950:].tobytes()
    assert reader.tell() == 1000

    reader.seek(925)
    arr2 = np.zeros(100, dtype=np.uint8)
    n = reader.readinto(arr2)
    assert n == 75
    assert reader.tell() == 1000
    np.testing.assert_equal(arr[925:], arr2[:75])

    reader.seek(0)
    assert reader.tell() == 0
    buf2 = reader.read_buffer()
    assert isinstance(buf2, cuda.CudaBuffer)
    assert buf2.parent is cbuf
    np.testing.assert_equal(arr, np.frombuffer(buf2.copy_to_host(), dtype=np.uint8))
    assert reader.tell() == size

    # read_at does not move the position; reads are short at the end.
    assert reader.read_at(30, 980) == arr[980:].tobytes()
    assert reader.tell() == size
    reader.seek(-10, 2)
    assert reader.read() == arr[-10:].tobytes()
    reader.seek(100)
    piece = reader.read_buffer(25)
    assert piece.size == 25 and piece.address == cbuf.address + 100
    assert reader.tell() == 125


def test_BufferReader_zero_size(ctx):
    arr, cbuf = make_random_buffer(ctx, 0, target="device")
    reader = cuda.BufferReader(cbuf)
    reader.seek(0)
    data = reader.read()
    assert len(data) == 0
    assert reader.tell() == 0
    buf2 = reader.read_buffer()
    np.testing.assert_equal(arr, np.frombuffer(buf2.copy_to_host(), dtype=np.uint8))


def test_BufferReader_errors(ctx):
    reader = cuda.BufferReader(ctx.buffer_from_data(b"0123456789"))
    with pytest.raises(OSError, match="Seek out of bounds"):
        reader.seek(11)
    with pytest.raises(OSError, match="Seek out of bounds"):
        reader.seek(-1)
    with pytest.raises(ValueError, match="nbytes must be non-negative"):
        reader.read(-2)
    with pytest.raises(OSError, match="Read out of bounds"):
        reader.read_at(1, 11)
    with pytest.raises(ValueError, match="writable"):
        reader.readinto(b"xx")
    assert reader.read(-1) == b"0123456789"


def test_BufferReader_as_python_file(ctx):
    # Standard library helpers work on it (it is an io.RawIOBase).
    cbuf = ctx.buffer_from_data(b"line one\nline two\n")
    reader = cuda.BufferReader(cbuf)
    assert reader.readline() == b"line one\n"
    assert list(reader) == [b"line two\n"]
    buffered = io.BufferedReader(cuda.BufferReader(cbuf))
    assert buffered.read() == b"line one\nline two\n"
