"""Conversion of arguments: integers (``operator.index``, with the argument's
name in the TypeError), Python's negative indices and slices, and stream
arguments.  Range checks are the core's (its out_of_range errors carry
pyarrow's messages), not this module's."""

from __future__ import annotations

import operator
from typing import Any, Tuple

from cuarrow import _cuarrow as _lib


def _index(value: Any, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int64(value: Any, name: str) -> int:
    """An integer argument for the core, saturated to 64 bits: a position or
    count past that range is out of range of any buffer, which the core's
    range checks then say in pyarrow's words."""
    return min(max(_index(value, name), _INT64_MIN), _INT64_MAX)


def _normalize_index(index: Any, length: int) -> int:
    index = operator.index(index)
    if index < 0:
        index += length
        if index < 0:
            raise IndexError("index out of bounds")
    elif index >= length:
        raise IndexError("index out of bounds")
    return index


def _slice_bounds(key: slice, length: int) -> Tuple[int, int]:
    if (key.step or 1) != 1:
        raise IndexError("only slices with step 1 supported")
    start, stop, _ = key.indices(length)
    return start, max(stop - start, 0)


def _stream_arg(stream: Any) -> Tuple[int, int]:
    """(handle, device) of a stream argument; (0, -1) is the legacy default stream."""
    if stream is None:
        return 0, -1
    if isinstance(stream, _lib.Stream):  # cuarrow.cuda.Stream
        return stream.handle, stream.raw_context.device_number
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        try:
            _version, handle = value
            return int(handle), -1
        except (TypeError, ValueError):
            raise TypeError(
                f"{type(stream).__name__}.__cuda_stream__ must give a (version, handle) tuple, got {value!r}"
            ) from None
    if isinstance(stream, bool):
        pass
    elif isinstance(stream, int):
        return stream, -1
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream without __cuda_stream__
        return int(stream.cuda_stream), -1
    elif hasattr(type(stream), "__int__") and not isinstance(stream, float):  # numba-cuda streams
        return int(stream), -1
    raise TypeError(
        "stream must be a cuarrow.cuda.Stream, an object with __cuda_stream__ (CuPy, PyTorch, "
        f"numba-cuda, cuda.core streams), an integer CUstream handle or None, not {type(stream).__name__}"
    )
