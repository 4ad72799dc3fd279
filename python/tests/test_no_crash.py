"""Host code can never read device memory by accident: every path that
would raises a clear Python exception instead of crashing."""

import copy
import pickle
import re

import numpy as np
import pyarrow as pa
import pytest

from cuarrow import cuda

HINT = re.compile("copy_to_host")


@pytest.fixture
def cuda_buf(ctx):
    return ctx.buffer_from_data(np.arange(4, dtype=np.int32))


def test_page_warning_example_raises(cuda_buf):
    # The page: `pa.py_buffer(b"x" * 16).equals(cuda_buf)` -> Segmentation fault.
    with pytest.raises(TypeError):
        pa.py_buffer(b"x" * 16).equals(cuda_buf)
    # pyarrow's Buffer.__eq__ converts the other side with py_buffer(): refused.
    with pytest.raises(BufferError, match="copy_to_host"):
        pa.py_buffer(b"x" * 16) == cuda_buf  # noqa: B015


@pytest.mark.parametrize(
    "read",
    [
        memoryview,
        bytes,
        bytearray,
        lambda b: np.frombuffer(b, dtype=np.uint8),
        pa.py_buffer,
    ],
    ids=["memoryview", "bytes", "bytearray", "np.frombuffer", "pa.py_buffer"],
)
def test_buffer_protocol_refused(cuda_buf, read):
    with pytest.raises(BufferError, match=r"this buffer is in cuda:\d+ memory.*copy_to_host"):
        read(cuda_buf)


def test_numpy_conversion_refused(cuda_buf):
    with pytest.raises(TypeError, match="copy_to_host"):
        np.asarray(cuda_buf)
    with pytest.raises(TypeError, match="copy_to_host"):
        np.array(cuda_buf)


def test_pyarrow_host_functions_raise(cuda_buf):
    with pytest.raises((TypeError, BufferError, pa.ArrowInvalid)):
        pa.Array.from_buffers(pa.int32(), 4, [None, cuda_buf])
    with pytest.raises((TypeError, BufferError)):
        pa.BufferReader(cuda_buf)
    with pytest.raises((TypeError, BufferError)):
        pa.ipc.read_message(cuda_buf)
    with pytest.raises((TypeError, BufferError)):
        pa.py_buffer(b"abcd").equals(cuda_buf)
    # pa.array() sees a sequence of bytes: each one is an explicit device-to-host copy.
    assert pa.array(cuda_buf).to_pylist() == list(cuda_buf.to_pybytes())
    with pytest.raises((TypeError, BufferError)):
        pa.compress(cuda_buf)
    with pytest.raises((TypeError, BufferError)):
        pa.BufferOutputStream().write(cuda_buf)


def test_pyarrow_readers_of_device_reader_raise_cleanly(ctx):
    # pyarrow's Python-file wrapper asks the reader for read_buffer(), which
    # would give it device memory: read_buffer refuses pyarrow with a clear
    # error naming what to use, never a BufferError from inside pyarrow.
    table = pa.table({"a": [1, 2, 3]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    dbuf = ctx.buffer_from_data(sink.getvalue())
    with pytest.raises(TypeError, match=r"cuarrow\.cuda\.ipc\.open_stream\(reader\).*copy_to_host"):
        pa.ipc.open_stream(cuda.BufferReader(dbuf)).read_all()


def test_repr_does_not_read_device_memory(cuda_buf):
    text = repr(cuda_buf)
    assert text.startswith("<cuarrow.cuda.CudaBuffer address=0x")
    assert "size=16" in text and "device=cuda:0" in text and "is_mutable=True" in text
    assert str(cuda_buf) == text
    empty = cuda_buf.context.new_buffer(0)
    assert "size=0" in repr(empty)
    assert "cuda_buf" not in repr(cuda_buf)
    assert "(address=" in cuda_buf.describe()


def test_pickle_is_a_host_copy_and_copy_is_refused(cuda_buf):
    back = pickle.loads(pickle.dumps(cuda_buf))
    assert back.address != cuda_buf.address and back.equals(cuda_buf)
    with pytest.raises(TypeError, match="through the host"):
        copy.copy(cuda_buf)


def test_hashing_refused(cuda_buf):
    with pytest.raises(TypeError):
        hash(cuda_buf)


def test_equals(ctx, cuda_buf):
    same = ctx.buffer_from_data(np.arange(4, dtype=np.int32))
    other = ctx.buffer_from_data(np.arange(1, 5, dtype=np.int32))
    assert cuda_buf.equals(same) and cuda_buf == same
    assert not cuda_buf.equals(other) and cuda_buf != other
    assert cuda_buf.equals(cuda_buf[:])
    assert not cuda_buf.equals(cuda_buf[:8])
    with pytest.raises(ValueError, match="Device on which the data resides differs between buffers"):
        cuda_buf.equals(pa.py_buffer(np.arange(4, dtype=np.int32)))
    assert (cuda_buf == b"abc") is False


def test_host_view_of_device_memory_impossible_even_for_pinned_views(ctx):
    # A CudaBuffer viewing pinned host memory is still a device buffer: no
    # buffer protocol (as in pyarrow), whatever memory it points at.
    hbuf = cuda.new_host_buffer(8)
    view = ctx.buffer_from_object(hbuf)
    with pytest.raises(BufferError):
        memoryview(view)
    assert view.device_type == pa.DeviceAllocationType.CUDA_HOST
    assert not view.is_cpu


def test_negative_and_huge_arguments(ctx, cuda_buf):
    with pytest.raises(ValueError, match="negative size"):
        ctx.new_buffer(-1)
    with pytest.raises((OverflowError, TypeError)):
        ctx.new_buffer(1 << 70)
    with pytest.raises(TypeError):
        ctx.new_buffer(1.5)
    with pytest.raises(TypeError):
        cuda_buf.copy_to_host(position="0")
    with pytest.raises(ValueError):
        cuda_buf.copy_to_host(position=1 << 62)


def test_closed_reader_writer(cuda_buf):
    r = cuda.BufferReader(cuda_buf)
    r.close()
    with pytest.raises(ValueError):
        r.read()
    w = cuda.BufferWriter(cuda_buf)
    w.close()
    with pytest.raises(ValueError):
        w.write(b"x")
