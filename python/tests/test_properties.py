"""Property tests: every copy either does exactly what a NumPy model says
or raises ValueError, leaving both sides untouched."""

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cuarrow import cuda  # noqa: E402

positions = st.integers(min_value=-3, max_value=40)
counts = st.integers(min_value=-3, max_value=40)
sizes = st.integers(min_value=0, max_value=32)

SETTINGS = settings(max_examples=150, deadline=None)


@pytest.fixture(scope="module")
def context():
    return cuda.Context(0)


def _device(ctx, data):
    buf = ctx.new_buffer(len(data))
    buf.copy_from_host(data)
    return buf


@SETTINGS
@given(size=sizes, host_size=sizes, position=positions, nbytes=counts)
def test_copy_from_host_model(context, size, host_size, position, nbytes):
    device = bytearray(np.random.randint(0, 255, size, dtype=np.uint8).tobytes())
    host = np.random.randint(0, 255, host_size, dtype=np.uint8).tobytes()
    dbuf = _device(context, bytes(device))
    valid_position = 0 <= position <= size
    if nbytes == -1:
        n = min(size - position, host_size) if valid_position else None
    else:
        n = nbytes if valid_position and 0 <= nbytes <= host_size and nbytes <= size - position else None
    if n is None:
        with pytest.raises(ValueError):
            dbuf.copy_from_host(host, position=position, nbytes=nbytes)
    else:
        assert dbuf.copy_from_host(host, position=position, nbytes=nbytes) == n
        device[position : position + n] = host[:n]
    assert dbuf.to_pybytes() == bytes(device)


@SETTINGS
@given(size=sizes, position=positions, nbytes=counts, into=st.one_of(st.none(), sizes))
def test_copy_to_host_model(context, size, position, nbytes, into):
    device = np.random.randint(0, 255, size, dtype=np.uint8).tobytes()
    dbuf = _device(context, device)
    valid_position = 0 <= position <= size
    if into is None:
        if nbytes == -1:
            n = size - position if valid_position else None
        else:
            n = nbytes if valid_position and 0 <= nbytes <= size - position else None
        if n is None:
            with pytest.raises(ValueError):
                dbuf.copy_to_host(position=position, nbytes=nbytes)
        else:
            assert dbuf.copy_to_host(position=position, nbytes=nbytes).to_pybytes() == device[position : position + n]
        return
    out = bytearray(b"\xee" * into)
    if nbytes == -1:
        n = min(size - position, into) if valid_position else None
    else:
        n = nbytes if valid_position and 0 <= nbytes <= into and nbytes <= size - position else None
    if n is None:
        with pytest.raises(ValueError):
            dbuf.copy_to_host(position=position, nbytes=nbytes, buf=out)
        assert out == bytearray(b"\xee" * into)
    else:
        dbuf.copy_to_host(position=position, nbytes=nbytes, buf=out)
        assert out[:n] == device[position : position + n]
        assert out[n:] == b"\xee" * (into - n)


@SETTINGS
@given(size=sizes, src_size=sizes, position=positions, nbytes=counts)
def test_copy_from_device_model(context, size, src_size, position, nbytes):
    device = bytearray(np.random.randint(0, 255, size, dtype=np.uint8).tobytes())
    source = np.random.randint(0, 255, src_size, dtype=np.uint8).tobytes()
    dbuf = _device(context, bytes(device))
    sbuf = _device(context, source)
    valid_position = 0 <= position <= size
    if nbytes == -1:
        n = min(size - position, src_size) if valid_position else None
    else:
        n = nbytes if valid_position and 0 <= nbytes <= src_size and nbytes <= size - position else None
    if n is None:
        with pytest.raises(ValueError):
            dbuf.copy_from_device(sbuf, position=position, nbytes=nbytes)
    else:
        assert dbuf.copy_from_device(sbuf, position=position, nbytes=nbytes) == n
        device[position : position + n] = source[:n]
    assert dbuf.to_pybytes() == bytes(device)


@SETTINGS
@given(size=sizes, offset=positions, length=st.one_of(st.none(), counts))
def test_slice_model(context, size, offset, length):
    data = bytes(range(size))
    dbuf = _device(context, data)
    valid_offset = 0 <= offset < size or offset == 0
    if not valid_offset or (length is not None and length < 0):
        with pytest.raises(ValueError):
            dbuf.slice(offset, length)
        return
    end = size if length is None else min(size, offset + length)
    piece = dbuf.slice(offset, length)
    assert piece.to_pybytes() == data[offset:end]
    assert piece.parent is dbuf
    # Python slicing never raises and agrees with bytes.
    stop = None if length is None else offset + length
    assert dbuf[offset:stop].to_pybytes() == data[offset:stop]
