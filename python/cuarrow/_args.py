"""Conversion of arguments: integers (``operator.index``, with the argument's
name in the TypeError), Python's negative indices and slices.  Range checks
are the core's (its out_of_range errors carry pyarrow's messages), not this
module's; stream arguments go to the binding as they are (its stream caster
converts them)."""

from __future__ import annotations

import operator
from typing import Any


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


def _slice_bounds(key: slice, length: int) -> tuple[int, int]:
    if (key.step or 1) != 1:
        raise IndexError("only slices with step 1 supported")
    start, stop, _ = key.indices(length)
    return start, max(stop - start, 0)
