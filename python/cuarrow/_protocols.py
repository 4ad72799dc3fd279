"""The tensor protocols: one ``__cuda_array_interface__`` (v3) and one DLPack
export for device buffers and typed arrays alike, and the mapping between
Arrow's fixed-width types and the protocols' element types."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import _device
from cuarrow._args import _index

# DLPack type codes.
_DL_INT, _DL_UINT, _DL_FLOAT = 0, 1, 2


def _storage(t: pa.DataType) -> pa.DataType:
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


class _NoTensor(Exception):
    """Why an array has no tensor view (the message completes "a <type> array ...")."""


def _element(t: pa.DataType) -> tuple[str, int, int]:
    """(NumPy typestr, DLPack code, bits) of one element of a fixed-width
    type; temporal types are their storage integers."""
    st = _storage(t)
    if pa.types.is_boolean(st):
        raise _NoTensor(
            "holds bit-packed booleans, which no __cuda_array_interface__ / DLPack dtype describes (they "
            "need a byte per element); use .values, a DeviceBitmap of the value bits"
        )
    if pa.types.is_integer(st):
        signed = pa.types.is_signed_integer(st)
        bits = st.bit_width
        return f"{'|' if bits == 8 else '<'}{'i' if signed else 'u'}{bits // 8}", _DL_INT if signed else _DL_UINT, bits
    if pa.types.is_floating(st):
        return f"<f{st.bit_width // 8}", _DL_FLOAT, st.bit_width
    if pa.types.is_date(st) or pa.types.is_time(st) or pa.types.is_timestamp(st) or pa.types.is_duration(st):
        bits = st.bit_width
        return f"<i{bits // 8}", _DL_INT, bits
    if pa.types.is_decimal(st):
        raise _NoTensor(
            f"holds {st.bit_width}-bit decimals (scaled integers), which have no standard dtype; "
            "use .buffers()[1] for the raw bytes"
        )
    if pa.types.is_fixed_size_binary(st):
        raise _NoTensor("holds fixed-size binary values, which have no dtype; use .buffers()[1] for the raw bytes")
    if pa.types.is_dictionary(st):
        raise _NoTensor("is dictionary-encoded; use .indices (integers, which have a tensor view) and .dictionary")
    if pa.types.is_null(st):
        raise _NoTensor("holds no values")
    raise _NoTensor(
        "is not a fixed-width array (integers, floats, dates, times, timestamps, durations, or fixed-size "
        "lists of those), so it has no single dtype; use .buffers() for its buffers"
    )


def _nulls_message(arr: Any, protocol: str, nulls: int, where: str = "") -> str:
    return (
        f"this {arr.type} array{where} has {nulls} null{'s' if nulls != 1 else ''}, and {protocol} carries no "
        "validity, so they would be silently lost. Use arr.values (a device view of the values, with "
        "unspecified values in null slots) together with arr.validity (the validity bitmap on the device, a "
        "DeviceBitmap), or fill the nulls on the host first"
    )


class _Tensor:
    """Where the elements of a fixed-width array live: a buffer, the byte
    offset of element 0, the shape, and the element type."""

    __slots__ = ("buffer", "byte_offset", "shape", "typestr", "code", "bits")

    def __init__(self, buffer: Any, byte_offset: int, shape: tuple[int, ...], typestr: str, code: int, bits: int):
        self.buffer = buffer
        self.byte_offset = byte_offset
        self.shape = shape
        self.typestr = typestr
        self.code = code
        self.bits = bits

    @property
    def nbytes(self) -> int:
        n = self.bits // 8
        for extent in self.shape:
            n *= extent
        return n


def _tensor_of(arr: Any, protocol: str, error: Callable[[str], Exception]) -> _Tensor:
    t = arr.type
    st = _storage(t)
    try:
        if pa.types.is_fixed_size_list(st):
            typestr, code, bits = _element(st.value_type)
        else:
            typestr, code, bits = _element(t)
    except _NoTensor as e:
        raise error(f"a {t} array has no {protocol}: it {e}") from None
    nulls = arr.null_count
    if nulls:
        raise error(_nulls_message(arr, protocol, nulls))
    if pa.types.is_fixed_size_list(st):
        k = st.list_size
        child = arr._data.children()[0]
        n = len(arr)
        child_nulls = child.slice(arr.offset * k, n * k).null_count()
        if child_nulls:
            raise error(_nulls_message(arr, protocol, child_nulls, " (its list values)"))
        buf = child.buffers()[1]
        return _Tensor(buf, (child.offset + arr.offset * k) * (bits // 8), (n, k), typestr, code, bits)
    buf = arr._data.buffers()[1]
    return _Tensor(buf, arr.offset * (bits // 8), (len(arr),), typestr, code, bits)


def cuda_array_interface(address: int, shape: tuple[int, ...], typestr: str, read_only: bool) -> dict[str, Any]:
    """CUDA Array Interface v3 of compact row-major memory.  ``stream`` is 1:
    the data is valid in the order of the legacy default stream, where
    cuarrow allocates and copies, so consumers order their work after it."""
    return {
        "shape": shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (address, read_only),
        "strides": None,
        "version": 3,
        "stream": 1,
    }


def dlpack_export(
    source: Any,
    byte_offset: int,
    shape: tuple[int, ...],
    code: int,
    bits: int,
    placement: tuple[int, int],
    ctx: Any,
    what: str,
    *,
    stream: int | None,
    max_version: tuple[int, int] | None,
    dl_device: tuple[int, int] | None,
    copy: bool | None,
) -> Any:
    """``__dlpack__``: a capsule of a compact row-major tensor of `shape`
    (elements of DLPack type `code`, `bits` wide) from byte `byte_offset` of
    `source` (a binding buffer), memory at `placement` of context `ctx` (None
    for memory without one).  `what` names the exporter in messages.

    `stream` is the consumer's stream (DLPack's integers: None or 1 the
    legacy default stream, 2 the per-thread default stream, -1 no
    synchronization); it is made to wait for cuarrow's work.  The capsule
    keeps the memory alive.  ``copy=True`` exports a device copy.
    """
    device = _device.dlpack_device(placement)
    if dl_device is not None and tuple(int(x) for x in dl_device) != device:
        raise BufferError(
            f"cannot export {what} on {device} to DLPack device {tuple(dl_device)} "
            "(cuarrow does not copy across devices in __dlpack__)"
        )
    nbytes = bits // 8
    for extent in shape:
        nbytes *= extent
    copied = False
    if source.raw_device_type == _device.CPU and ctx is not None:
        # An empty typed array has no buffer: give an empty device one.
        source, byte_offset = _lib.allocate_device(ctx, 0), 0
    elif copy and nbytes:
        fresh = _lib.allocate_device(ctx, nbytes)
        _lib.copy(fresh, 0, source, byte_offset, nbytes)
        source, byte_offset, copied = fresh, 0, True
    if stream is not None and stream != -1:
        stream = _index(stream, "stream")
        if stream == 0:
            raise ValueError("stream 0 is ambiguous for CUDA in DLPack; pass 1 for the legacy default stream")
        if stream != 1 and ctx is not None:
            _lib.stream_wait_for_default(ctx, stream)
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    return _lib.to_dlpack_typed(source, byte_offset, code, bits, list(shape), versioned, copied)


def dlpack_capsule(obj: Any) -> Any:
    """A DLPack capsule from a producer, asking it to order its work before
    the legacy default stream (where cuarrow works)."""
    try:
        return obj.__dlpack__(stream=1, max_version=(1, 0))
    except TypeError:  # a producer without max_version (DLPack < 1.0)
        return obj.__dlpack__(stream=1)


# NumPy typestrs of DLPack element types (code, bits) that map to Arrow types.
_DLPACK_NUMPY = {(_DL_INT, 8): "|i1", (_DL_INT, 16): "<i2", (_DL_INT, 32): "<i4", (_DL_INT, 64): "<i8",
                 (_DL_UINT, 8): "|u1", (_DL_UINT, 16): "<u2", (_DL_UINT, 32): "<u4", (_DL_UINT, 64): "<u8",
                 (_DL_FLOAT, 16): "<f2", (_DL_FLOAT, 32): "<f4", (_DL_FLOAT, 64): "<f8", (6, 8): "|b1"}  # fmt: skip
