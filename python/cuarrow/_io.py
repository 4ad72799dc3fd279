"""File interfaces over device buffers (BufferReader, BufferWriter).  The
Arrow IPC format over them is cuarrow.ipc."""

from __future__ import annotations

import io
import sys
import types
from typing import Any

from cuarrow import _cuarrow as _lib
from cuarrow._args import _index
from cuarrow._memory import CudaBuffer, HostBuffer, _host_nbytes, new_host_buffer


def _check_device_buffer(obj: Any) -> CudaBuffer:
    if not isinstance(obj, CudaBuffer):
        raise TypeError(f"expected CudaBuffer instance, got {type(obj).__name__}")
    return obj


class _DeviceFile(io.RawIOBase):
    """What BufferReader and BufferWriter share: a device buffer, a position
    in it, seeking (whence 0, 1, 2; positions outside the buffer raise
    OSError with `_seek_error`) and the closed check (`_closed_error`)."""

    _closed_error = ""
    _seek_error = ""

    buffer: CudaBuffer
    _position: int

    def __init__(self, buffer: Any) -> None:
        super().__init__()
        self.buffer = _check_device_buffer(buffer)
        self._position = 0

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(self._closed_error)

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self.buffer.size

    def tell(self) -> int:
        self._check_open()
        return self._position

    def _before_seek(self) -> None:
        """Called once a seek's target is known to be valid, before it moves."""

    def seek(self, position: int, whence: int = 0) -> int:
        self._check_open()
        position = _index(position, "position")
        if whence == 0:
            target = position
        elif whence == 1:
            target = self._position + position
        elif whence == 2:
            target = self.buffer.size + position
        else:
            raise ValueError(f"Invalid value of whence: {whence}")
        if target < 0 or target > self.buffer.size:
            raise OSError(self._seek_error)
        self._before_seek()
        self._position = target
        return target

    def __repr__(self) -> str:
        return f"<cuarrow.cuda.{type(self).__name__} size={self.buffer.size} position={self._position}>"


def _refuse_pyarrow_reader() -> None:
    """pyarrow's readers (pa.ipc.open_stream, open_file, ...) read a Python
    file through read_buffer() and then want host memory: a device slice
    would fail deep inside pyarrow with a BufferError.  When read_buffer is
    called from pyarrow's Python code, or from a thread with no Python code
    at all (pyarrow's I/O threads), say what to use instead."""
    try:
        caller: types.FrameType | None = sys._getframe(2)
    except ValueError:  # no Python caller: native code on a thread of its own
        caller = None
    module = caller.f_globals.get("__name__", "") if caller is not None else "pyarrow"
    if module == "pyarrow" or module.startswith("pyarrow."):
        raise TypeError(
            "pyarrow cannot read device memory through a cuarrow.cuda.BufferReader: use "
            "cuarrow.cuda.ipc.open_stream(reader) / open_file(reader) / read_message(reader), whose batches stay "
            "on the device, or give pyarrow host bytes (reader.read() or buffer.copy_to_host())"
        )


class BufferReader(_DeviceFile):
    """File interface for zero-copy read from CUDA buffers.

    ``read``/``readinto``/``read_at`` copy device bytes to host memory;
    ``read_buffer`` returns a zero-copy device slice.
    """

    _closed_error = "I/O operation on closed BufferReader"
    _seek_error = "Seek out of bounds"

    def __init__(self, obj: CudaBuffer) -> None:
        super().__init__(obj)

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    @property
    def mode(self) -> str:
        return "rb"

    def _count(self, nbytes: int | None) -> int:
        remaining = self.buffer.size - self._position
        if nbytes is None or nbytes == -1:
            return remaining
        nbytes = _index(nbytes, "nbytes")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative (or -1/None for all), got {nbytes}")
        return min(nbytes, remaining)

    def read(self, nbytes: int | None = None) -> bytes:
        """Read up to `nbytes` (default: all remaining) into host bytes."""
        self._check_open()
        n = self._count(nbytes)
        out = bytearray(n)
        if n:
            _lib.copy_to_host(out, 0, self.buffer, self._position, n)
        self._position += n
        return bytes(out)

    def readall(self) -> bytes:
        return self.read()

    def read_at(self, nbytes: int, offset: int) -> bytes:
        """Read `nbytes` at `offset` without moving the position (short at the end)."""
        self._check_open()
        offset = _index(offset, "offset")
        nbytes = _index(nbytes, "nbytes")
        if offset < 0 or offset > self.buffer.size:
            raise OSError("Read out of bounds")
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        n = min(nbytes, self.buffer.size - offset)
        out = bytearray(n)
        if n:
            _lib.copy_to_host(out, 0, self.buffer, offset, n)
        return bytes(out)

    def readinto(self, b: Any) -> int:
        """Read into writable host memory `b`; returns the number of bytes read."""
        self._check_open()
        bsize, read_only = _host_nbytes(b, "b")
        if read_only:
            raise ValueError("readinto needs a writable buffer")
        n = min(bsize, self.buffer.size - self._position)
        if n:
            _lib.copy_to_host(b, 0, self.buffer, self._position, n)
        self._position += n
        return n

    def read_buffer(self, nbytes: int | None = None) -> CudaBuffer:
        """A zero-copy device slice of up to `nbytes` (default: all remaining) from the position."""
        self._check_open()
        _refuse_pyarrow_reader()
        n = self._count(nbytes)
        out = CudaBuffer._wrap(self.buffer.raw_slice(self._position, n), parent=self.buffer)
        self._position += n
        return out


class BufferWriter(_DeviceFile):
    """File interface for writing to CUDA buffers.

    Unbuffered by default; set ``buffer_size`` to stage small writes in a
    pinned host buffer.  Writes past the end of the device buffer raise
    OSError (nothing is written).  The device buffer must be mutable.
    """

    _closed_error = "Operation on closed BufferWriter"
    _seek_error = "position out of bounds"

    # Also class defaults: io.IOBase's finalizer closes (so flushes) a writer
    # whose __init__ raised, and Python 3.13 reports what that close raises.
    _staging: HostBuffer | None = None
    _staged = 0

    def __init__(self, buffer: CudaBuffer) -> None:
        super().__init__(buffer)
        if not self.buffer.is_mutable:
            raise ValueError("BufferWriter needs a mutable CudaBuffer; this one is read-only")
        self._staging = None
        self._staged = 0  # bytes in the staging buffer, destined for position - staged

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def mode(self) -> str:
        return "wb"

    @property
    def buffer_size(self) -> int:
        """Size of the host (pinned) staging buffer; 0 for unbuffered."""
        return 0 if self._staging is None else self._staging.size

    @buffer_size.setter
    def buffer_size(self, buffer_size: int) -> None:
        buffer_size = _index(buffer_size, "buffer_size")
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be non-negative, got {buffer_size}")
        self.flush()
        if buffer_size == 0:
            self._staging = None
        else:
            self._staging = new_host_buffer(buffer_size, device=self.buffer.device_id)

    @property
    def num_bytes_buffered(self) -> int:
        """Bytes staged on the host, not yet on the device."""
        return self._staged

    def flush(self) -> None:
        """Copy staged bytes to the device."""
        if self.closed:
            return
        if self._staged:
            assert self._staging is not None  # bytes are staged only in a staging buffer
            _lib.copy(self.buffer, self._position - self._staged, self._staging.raw, 0, self._staged)
            self._staged = 0

    def _check_room(self, position: int, nbytes: int) -> None:
        if position < 0 or nbytes > self.buffer.size - position:
            raise OSError(
                f"Write out of bounds (offset = {position}, size = {nbytes}) in device buffer of size "
                f"{self.buffer.size}"
            )

    def write(self, data: Any) -> int:
        """Write host data at the position; returns the number of bytes written."""
        self._check_open()
        nbytes, _ = _host_nbytes(data, "data")
        if nbytes == 0:
            return 0
        self._check_room(self._position, nbytes)
        staging = self._staging
        if staging is not None and self._staged + nbytes < staging.size:
            _lib.copy_from_host(staging.raw, self._staged, data, 0, nbytes)
            self._staged += nbytes
        else:
            self.flush()
            _lib.copy_from_host(self.buffer, self._position, data, 0, nbytes)
        self._position += nbytes
        return nbytes

    def writeat(self, position: int, data: Any) -> None:
        """Write data to buffer starting from position."""
        self._check_open()
        position = _index(position, "position")
        if position < 0 or position > self.buffer.size:
            raise OSError("position out of bounds")
        self.flush()
        self._position = position
        self.write(data)

    def _before_seek(self) -> None:
        self.flush()

    def close(self) -> None:
        if not self.closed:
            self.flush()
        super().close()
