"""Typed Arrow data on the GPU: arrays, chunked arrays, record batches and
tables in device memory, with their Arrow types.

Everything here is re-exported by :mod:`cuarrow.cuda`; see
:func:`cuarrow.cuda.to_device` and :func:`cuarrow.cuda.from_device`.

Device data is never read by host code: ``to_host()`` copies it (one
batched transfer per array, batch or chunk) and hands pyarrow an ordinary
host array; ``repr`` copies only the few leading values it shows.  Kernels
reach fixed-width arrays through ``__cuda_array_interface__`` (v3) and
DLPack; an array with nulls refuses both (the protocols carry no validity)
and points to ``.values`` and ``.validity``.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import builtins

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow.cuda import Context, CudaBuffer, _as_context, _device_type, _index, _stream_arg

__all__ = [
    "DeviceArray",
    "DeviceChunkedArray",
    "DeviceRecordBatch",
    "DeviceTable",
    "DeviceBitmap",
    "to_device",
    "from_device",
]

# ARROW_DEVICE_* codes (the same numbers as DLPack's device types).
_CPU, _CUDA, _CUDA_HOST, _CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_LABEL = {_CPU: "cpu", _CUDA: "cuda", _CUDA_HOST: "cuda_host", _CUDA_MANAGED: "cuda_managed"}

# DLPack type codes.
_DL_INT, _DL_UINT, _DL_FLOAT = 0, 1, 2

# Values shown by repr (copied to the host; nothing else is).
_REPR_VALUES = 8
_REPR_ROWS = 5


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _check_kwargs(kwargs: dict) -> None:
    """The PyCapsule protocol's rule: unknown keywords are accepted only as None."""
    bad = [name for name, value in kwargs.items() if value is not None]
    if bad:
        raise NotImplementedError(f"Received unsupported keyword argument(s): {bad}")


def _schema_capsule(requested: Any) -> Any:
    """A schema capsule from a capsule or from an object with __arrow_c_schema__."""
    method = getattr(requested, "__arrow_c_schema__", None)
    if method is not None:
        return method()
    return requested


def _field_of(capsule: Any) -> pa.Field:
    return pa.Field._import_from_c_capsule(capsule)


def _type_from(capsule: Any) -> Optional[pa.DataType]:
    """The pyarrow type of a producer's schema capsule, which the C++ import
    only read (None when pyarrow cannot read it: the C++ view then rules)."""
    try:
        return _field_of(capsule).type
    except Exception:  # noqa: BLE001 - best effort; cuarrow's own reading already succeeded
        return None


def _schema_from(capsule: Any) -> Optional[pa.Schema]:
    try:
        return pa.Schema._import_from_c_capsule(capsule)
    except Exception:  # noqa: BLE001
        return None


def _child_types(t: pa.DataType) -> Optional[List[pa.DataType]]:
    """The types of the children of an array of type `t`, as pyarrow knows them."""
    st = _storage(t)
    if pa.types.is_struct(st) or pa.types.is_union(st):
        return [st.field(i).type for i in range(st.num_fields)]
    if pa.types.is_map(st):
        return [pa.struct([st.key_field, st.item_field])]
    if pa.types.is_run_end_encoded(st):
        return [st.run_end_type, st.value_type]
    if hasattr(st, "value_type") and not pa.types.is_dictionary(st):
        return [st.value_type]  # lists of every kind
    return None


def _storage(t: pa.DataType) -> pa.DataType:
    while isinstance(t, pa.BaseExtensionType):
        t = t.storage_type
    return t


def _device_label(placement: Tuple[int, int]) -> str:
    kind, device_id = placement
    label = _DEVICE_LABEL.get(kind, str(kind))
    return label if kind == _CPU else f"{label}:{device_id}"


def _wrap_buffer(raw: Any) -> Optional[CudaBuffer]:
    """A CudaBuffer for a device buffer; None for an absent one (an empty host
    buffer, the C++ layer's "no buffer")."""
    if raw.size == 0 and raw.raw_device_type == _CPU:
        return None
    return CudaBuffer._wrap(raw)


def _shown(render: Callable[[], str]) -> str:
    """What repr shows of the values: `render()`, or why they cannot be shown
    (data that fails the host check to_host makes; repr never raises for it)."""
    try:
        return render()
    except pa.ArrowInvalid as e:
        return f"<values not shown: {e}>"


def _one_line(host: Any, more: bool) -> str:
    """A pyarrow array's values on one line, "..." when some were left out."""
    text = host.to_string(window=max(len(host), 1), container_window=2, skip_new_lines=True)
    text = " ".join(text.split("\n"))
    if not more:
        return text
    return text[:-1] + ",...]" if text.endswith("]") else text + " ..."


def _refuse_cast(what: str, error: Exception) -> NotImplementedError:
    return NotImplementedError(
        f"cuarrow cannot give this device {what} the requested schema: {error}. Only a relabelling is "
        "possible on the device (the same physical type under another field name, nullability or extension "
        "type); casts are not implemented there. Pass requested_schema=None for the data's own schema, or "
        "cast on the host after to_host()."
    )


def _mode_of(obj: Any) -> int:
    """How to read a C stream: 2 record batches (a table), 1 arrays (a chunked
    array), 0 decide by its schema (a struct is read as record batches)."""
    if isinstance(obj, (pa.Table, pa.RecordBatchReader, DeviceTable, DeviceRecordBatch)):
        return 2
    if isinstance(obj, (pa.ChunkedArray, pa.Array, DeviceChunkedArray, DeviceArray)):
        return 1
    return 0


def _capsule_pair(obj: Any, method: str) -> Tuple[Any, Any]:
    """Call obj.<method>() and check it gave the protocol's (schema, array) pair."""
    result = getattr(obj, method)()
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(
            f"{type(obj).__name__}.{method}() must return a (schema capsule, array capsule) tuple, "
            f"got {type(result).__name__}"
        )
    return result


def _looks_like_batch(obj: Any, schema_capsule: Any) -> bool:
    """A producer of one struct array is a record batch when it is one
    (pyarrow's or ours), or looks like one (has num_columns and schema)."""
    if isinstance(obj, (pa.RecordBatch, DeviceRecordBatch)):
        return True
    if isinstance(obj, (pa.Array, DeviceArray)):
        return False
    if not (hasattr(obj, "num_columns") and hasattr(obj, "schema")):
        return False
    return _lib.schema_capsule_format(schema_capsule) == "+s"


# ---------------------------------------------------------------------------
# The tensor view of fixed-width arrays (__cuda_array_interface__, DLPack)
# ---------------------------------------------------------------------------


class _NoTensor(Exception):
    """Why an array has no tensor view (the message completes "a <type> array ...")."""


def _element(t: pa.DataType) -> Tuple[str, int, int]:
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


def _nulls_message(arr: "DeviceArray", protocol: str, nulls: int, where: str = "") -> str:
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

    def __init__(self, buffer: Any, byte_offset: int, shape: Tuple[int, ...], typestr: str, code: int, bits: int):
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


def _tensor_of(arr: "DeviceArray", protocol: str, error: Callable[[str], Exception]) -> _Tensor:
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
        child_nulls = child.slice(arr.offset * k, n * k).null_count(0, -1)
        if child_nulls:
            raise error(_nulls_message(arr, protocol, child_nulls, " (its list values)"))
        buf = child.buffers()[1]
        return _Tensor(buf, (child.offset + arr.offset * k) * (bits // 8), (n, k), typestr, code, bits)
    buf = arr._data.buffers()[1]
    return _Tensor(buf, arr.offset * (bits // 8), (len(arr),), typestr, code, bits)


def _dlpack_device_of(placement: Tuple[int, int]) -> Tuple[int, int]:
    kind, device_id = placement
    if kind == _CUDA_HOST:
        return (_CUDA_HOST, 0)
    return (kind, device_id)


def _dlpack_export(
    tensor: _Tensor,
    placement: Tuple[int, int],
    *,
    stream: Optional[int],
    max_version: Optional[Tuple[int, int]],
    dl_device: Optional[Tuple[int, int]],
    copy: Optional[bool],
) -> Any:
    device = _dlpack_device_of(placement)
    if dl_device is not None and tuple(int(x) for x in dl_device) != device:
        raise BufferError(
            f"cannot export an array on {device} to DLPack device {tuple(dl_device)} "
            "(cuarrow does not copy across devices in __dlpack__)"
        )
    ctx = _lib.Context.get(max(placement[1], 0))
    source = tensor.buffer
    offset = tensor.byte_offset
    copied = False
    if source.raw_device_type == _CPU:  # an empty array has no buffer: give an empty device one
        source, offset = _lib.allocate_device(ctx, 0), 0
    elif copy and tensor.nbytes:
        fresh = _lib.allocate_device(ctx, tensor.nbytes)
        _lib.copy(fresh, 0, source, offset, tensor.nbytes)
        source, offset, copied = fresh, 0, True
    if stream is not None and stream != -1:
        stream = _index(stream, "stream")
        if stream == 0:
            raise ValueError("stream 0 is ambiguous for CUDA in DLPack; pass 1 for the legacy default stream")
        if stream != 1:
            _lib.stream_wait_for_default(ctx, stream)
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    return _lib.to_dlpack_typed(source, offset, tensor.code, tensor.bits, list(tensor.shape), versioned, copied)


# ---------------------------------------------------------------------------
# Bitmaps
# ---------------------------------------------------------------------------


# pyarrow's own type and schema objects describe the data: cuarrow's model
# keeps a dictionary's value type without its field (an extension value type
# would be lost), and importing against the schema object skips exporting
# and parsing a schema per call (most of the cost for wide batches) and makes
# the batches' schema the very object Table.from_batches compares with.
def _import_array(type_: pa.DataType, capsule: Any) -> pa.Array:
    return pa.Array._import_from_c(_lib.capsule_address(capsule), type_)


def _import_batch(schema: pa.Schema, capsule: Any) -> pa.RecordBatch:
    return pa.RecordBatch._import_from_c(_lib.capsule_address(capsule), schema)


def _arrays_to_host(type_: pa.DataType, datas: list, stream: Any) -> list:
    """pyarrow Arrays of device ArrayDatas: one batched copy; the arrays are
    built while it runs and handed over once it is done."""
    handle, device = _stream_arg(stream)
    transfer, capsules = _lib.arrays_to_host_begin(datas, handle, device)
    arrays = [_import_array(type_, c) for c in capsules]
    transfer.wait()
    return arrays


def _batches_to_host(schema: pa.Schema, datas: list, stream: Any) -> list:
    """pyarrow RecordBatches of device BatchDatas, as _arrays_to_host."""
    handle, device = _stream_arg(stream)
    transfer, capsules = _lib.batches_to_host_begin(datas, handle, device)
    batches = [_import_batch(schema, c) for c in capsules]
    transfer.wait()
    return batches


class DeviceBitmap:
    """A bit-packed bitmap in device memory: a validity bitmap (bit set =
    valid) or a boolean array's values.

    Element i is bit ``offset + i`` of ``buffer``, least significant bit
    first (Arrow's layout).  ``buffer`` starts at the byte holding element
    0 and spans ``ceil((offset + length) / 8)`` bytes; ``offset`` is 0..7.
    Its ``__cuda_array_interface__`` and DLPack are those of ``buffer``: the
    packed bytes as uint8 (apply ``offset`` yourself).  ``to_numpy()`` copies
    the bits to the host, unpacked.
    """

    __slots__ = ("buffer", "offset", "length")

    buffer: CudaBuffer
    offset: int
    length: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("DeviceBitmap objects come from DeviceArray.validity and DeviceArray.values")

    @classmethod
    def _make(cls, raw: Any, bit_offset: int, length: int) -> "DeviceBitmap":
        obj = object.__new__(cls)
        start = bit_offset // 8
        nbytes = (bit_offset % 8 + length + 7) // 8
        if raw.raw_device_type == _CPU:  # no bitmap memory at all (an empty array)
            raw, start, nbytes = raw, 0, 0
        obj.buffer = CudaBuffer._wrap(raw.raw_slice(start, nbytes))
        obj.offset = bit_offset % 8
        obj.length = length
        return obj

    def __len__(self) -> int:
        return self.length

    def to_numpy(self) -> Any:
        """The bits as a NumPy bool array on the host (a copy)."""
        import numpy as np

        if self.length == 0:
            return np.zeros(0, dtype=bool)
        raw = np.frombuffer(self.buffer.copy_to_host(), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[self.offset : self.offset + self.length].astype(bool)

    @property
    def __cuda_array_interface__(self) -> dict:
        """The packed bytes (1-D uint8): see the class documentation for the bit order and ``offset``."""
        return self.buffer.__cuda_array_interface__

    def __dlpack__(self, **kwargs: Any) -> Any:
        """The packed bytes as a 1-D uint8 DLPack tensor (as CudaBuffer.__dlpack__)."""
        return self.buffer.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.buffer.__dlpack_device__()

    def __repr__(self) -> str:
        return (
            f"<cuarrow.cuda.DeviceBitmap length={self.length} offset={self.offset} "
            f"bytes={self.buffer.size} device={self.buffer._device_label()}>"
        )


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------


class _DeviceData:
    """What every device object shares: where it lives, and refusals of host access."""

    __slots__ = ()

    def _placement(self) -> Tuple[int, int]:
        raise NotImplementedError

    @property
    def device_type(self) -> Any:
        """``pyarrow.DeviceAllocationType.CUDA`` (``CUDA_HOST`` / ``CUDA_MANAGED``
        for imported pinned or managed memory)."""
        return _device_type(self._placement()[0])

    @property
    def device_id(self) -> int:
        """The CUDA device ordinal."""
        return self._placement()[1]

    @property
    def is_cpu(self) -> bool:
        """Always False: the data is in GPU-accessible memory that host code does not read."""
        return False

    @property
    def device(self) -> Any:
        """The device the data is on (a cuarrow.cuda.Device: pyarrow.Device's attributes)."""
        from cuarrow.cuda import Device

        return Device(*self._placement())

    @property
    def context(self) -> Context:
        """The Context (primary context) of the device the data is on."""
        return Context._wrap(_lib.Context.get(max(self.device_id, 0)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TypeError(
            f"a {type(self).__name__} holds device memory, which NumPy cannot read; use to_host() "
            "(then .to_numpy()) for a host copy, or cupy.asarray / numba.cuda.as_cuda_array for a device view"
        )

    def __reduce__(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled (it holds device memory); pickle to_host()")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(
            f"iterating a {type(self).__name__} would copy it to the host element by element; "
            "use to_host() (or to_pylist()) once"
        )


_type_of = builtins.type


def _declared_placement(buffers: Sequence[Any], children: Sequence[Any]) -> Tuple[int, int]:
    """Where data built from these buffers and children lives (what an array
    without any buffer reports): the first buffer's device, else the first
    child's, else device 0.  Mixed devices are the core's to refuse."""
    for b in buffers:
        if b is not None and b.size:
            return (b.raw_device_type, b.device_id)
    for c in children:
        return c._placement()
    return (_CUDA, 0)


def _core_layout(type_: pa.DataType, buffers: List[Any]) -> List[Any]:
    """pyarrow's buffer list converted to the core's (the C Data Interface's):
    Arrow C++ gives null, union and run-end encoded arrays a leading buffer
    that is always absent, which the C interface (and cuarrow) do not have."""
    st = _storage(type_)
    if not (pa.types.is_null(st) or pa.types.is_union(st) or pa.types.is_run_end_encoded(st)):
        return buffers
    if len(buffers) != st.num_buffers:
        raise ValueError(
            f"Type's expected number of buffers ({st.num_buffers}) did not match the passed number ({len(buffers)})."
        )
    if buffers[0] is not None:
        raise ValueError(f"buffers[0] of a {st} array must be None (it has no validity bitmap)")
    return buffers[1:]


def _device_arrays(values: Any, what: str) -> List["DeviceArray"]:
    out = list(values)
    for i, v in enumerate(out):
        if not isinstance(v, DeviceArray):
            raise TypeError(
                f"{what}[{i}] must be a cuarrow.cuda.DeviceArray, not {type(v).__name__} "
                "(cuarrow.cuda.to_device copies a host array to the device)"
            )
    return out


def _batch_schema(arrays: List["DeviceArray"], names: Any, schema: Any, metadata: Any) -> pa.Schema:
    """The schema of a batch (or table) from_arrays builds, with pyarrow's argument rules."""
    if schema is not None:
        if names is not None:
            raise ValueError("Cannot pass both schema and names")
        if not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
        return schema if metadata is None else schema.with_metadata(metadata)
    if names is None:
        raise ValueError("Must pass names or schema when constructing Table or RecordBatch.")
    names = list(names)
    if len(names) != len(arrays):
        raise ValueError(f"Length of names ({len(names)}) does not match length of arrays ({len(arrays)})")
    return pa.schema([pa.field(str(n), a.type) for n, a in zip(names, arrays)], metadata=metadata)


class DeviceArray(_DeviceData):
    """An Arrow array in GPU memory, with its Arrow type.

    Made by :func:`to_device` (a copy of a host array) or :func:`from_device`
    (a zero-copy import of device data).  ``type`` is a pyarrow type;
    ``to_host()`` gives back a ``pyarrow.Array`` equal to the original.

    A fixed-width array without nulls (integers, floats, float16, temporal
    types as their storage integers, fixed-size lists of those as 2-D)
    exposes ``__cuda_array_interface__`` (v3) and DLPack with its offset
    applied, so Numba kernels, ``cupy.asarray`` and ``torch.from_dlpack``
    use it in place, without a copy; writes they make show in ``to_host()``.
    An array with nulls refuses both, pointing to ``.values`` and
    ``.validity``.
    """

    __slots__ = ("_data", "_type", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Do not call DeviceArray's constructor directly: use cuarrow.cuda.to_device(array) to copy an Arrow "
            "array to the GPU, or cuarrow.cuda.from_device(obj) to import device data"
        )

    @classmethod
    def _wrap(cls, data: Any, type: Optional[pa.DataType] = None) -> "DeviceArray":
        obj = object.__new__(cls)
        obj._data = data
        obj._type = type
        return obj

    @staticmethod
    def from_buffers(
        type: pa.DataType,
        length: int,
        buffers: Sequence[Optional[CudaBuffer]],
        null_count: int = -1,
        offset: int = 0,
        children: Optional[Sequence["DeviceArray"]] = None,
    ) -> "DeviceArray":
        """An array of `type` over device buffers someone filled (a kernel's
        output, ...), zero-copy: pyarrow.Array.from_buffers's arguments.

        `buffers` are CudaBuffers (or None for an absent one, e.g. no
        validity bitmap) in the type's layout order; `children` are
        DeviceArrays (nested types).  Before it is returned the array is
        checked cheaply: buffer and child counts against the type
        (ValueError, pyarrow's wording), one device for everything, each
        buffer large enough for `length` + `offset` and the first and last
        offsets of offset-based types (read from the device in one copy);
        pyarrow.ArrowInvalid names the buffer that is wrong.  The buffers stay
        alive as long as the array.
        """
        if not isinstance(type, pa.DataType):
            raise TypeError(f"type must be a pyarrow.DataType, not {_type_of(type).__name__}")
        length = _index(length, "length")
        null_count = _index(null_count, "null_count")
        offset = _index(offset, "offset")
        buffers = list(buffers)
        for i, b in enumerate(buffers):
            if b is not None and not isinstance(b, CudaBuffer):
                raise TypeError(
                    f"buffers[{i}] must be a cuarrow.cuda.CudaBuffer or None, not {_type_of(b).__name__} "
                    "(Context.buffer_from_object(host_buffer) views pinned memory from the device)"
                )
        children = [] if children is None else _device_arrays(children, "children")
        buffers = _core_layout(type, buffers)
        where = _declared_placement(buffers, children)
        data = _lib.array_from_buffers(
            pa.field("", type).__arrow_c_schema__(),
            length,
            buffers,
            null_count,
            offset,
            [c._data for c in children],
            *where,
        )
        return DeviceArray._wrap(data, type)

    def _placement(self) -> Tuple[int, int]:
        return self._data.placement

    # -- metadata ---------------------------------------------------------------
    @property
    def type(self) -> pa.DataType:
        """The pyarrow type (extension types included)."""
        if self._type is None:
            self._type = _field_of(self._data.schema_capsule()).type
        return self._type

    def __len__(self) -> int:
        return self._data.length

    @property
    def offset(self) -> int:
        """The offset, in elements, into this array's buffers (its own; a struct's
        offset also applies to its children, as in Arrow)."""
        return self._data.offset

    @property
    def null_count(self) -> int:
        """The number of nulls.  When the producer did not know it (slices), it
        is counted once from the validity bitmap (a device-to-host copy of the
        bitmap's bytes) and remembered."""
        n = self._data.raw_null_count
        if n < 0:
            n = self._data.null_count(0, -1)
            self._data = self._data.with_null_count(n)
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of device memory referenced by the array's buffers (children
        and dictionary included), whatever part of them the array uses."""

        def walk(d: Any) -> int:
            total = sum(b.size for b in d.buffers())
            total += sum(walk(c) for c in d.children())
            dictionary = d.dictionary()
            return total + (walk(dictionary) if dictionary is not None else 0)

        return walk(self._data)

    def buffers(self) -> List[Optional[CudaBuffer]]:
        """This array's buffers, then its children's, depth first (as
        pyarrow's ``Array.buffers()``; a dictionary array lists its indices'
        buffers only).  Device buffers are ``CudaBuffer``s; an absent buffer
        (no validity bitmap, an empty array's data) is None."""
        out: List[Optional[CudaBuffer]] = []

        def walk(d: Any) -> None:
            out.extend(_wrap_buffer(b) for b in d.buffers())
            for c in d.children():
                walk(c)

        walk(self._data)
        return out

    @property
    def children(self) -> List["DeviceArray"]:
        """The child arrays as stored (a struct's offset is not applied to them; see ``field``)."""
        kids = self._data.children()
        types = _child_types(self.type)
        if types is None or len(types) != len(kids):
            return [DeviceArray._wrap(k) for k in kids]
        return [DeviceArray._wrap(k, t) for k, t in zip(kids, types)]

    def field(self, index: Union[int, str]) -> "DeviceArray":
        """Child `index` (a position or a name) of a struct or union array.
        A struct's child comes with the struct's offset and length applied, as
        pyarrow's ``StructArray.field``."""
        st = _storage(self.type)
        if not (pa.types.is_struct(st) or pa.types.is_union(st)):
            raise TypeError(f"field() needs a struct or union array, not {self.type}")
        if isinstance(index, str):
            position = st.get_field_index(index)
            if position < 0:
                raise KeyError(index)
            index = position
        index = _index(index, "index")
        kids = self._data.children()
        if not -len(kids) <= index < len(kids):
            raise IndexError(f"field index {index} out of range for {len(kids)} fields")
        child = kids[index]
        if pa.types.is_struct(st):
            child = child.slice(self.offset, len(self))
        return DeviceArray._wrap(child, st.field(index).type)

    @property
    def dictionary(self) -> "DeviceArray":
        """The dictionary (values) of a dictionary array."""
        d = self._data.dictionary()
        if d is None:
            raise TypeError(f"a {self.type} array has no dictionary")
        return DeviceArray._wrap(d, _storage(self.type).value_type)

    @property
    def indices(self) -> "DeviceArray":
        """The indices of a dictionary array (an integer array over the same
        buffers, with the array's validity)."""
        st = _storage(self.type)
        if not pa.types.is_dictionary(st):
            raise TypeError(f"a {self.type} array has no indices (it is not dictionary-encoded)")
        return DeviceArray._wrap(self._data.indices(), st.index_type)

    @property
    def values(self) -> Union["DeviceArray", DeviceBitmap]:
        """A device view of the values.

        - fixed-width types: this array without its validity bitmap (the same
          memory; null slots hold unspecified values), which has a tensor view
          (``__cuda_array_interface__``, DLPack) when its type has a dtype;
        - boolean: a :class:`DeviceBitmap` of the value bits;
        - lists, large lists, list views, fixed-size lists, maps: the child
          array as stored (as pyarrow's ``.values``);
        - run-end encoded: the values child.
        Other types raise TypeError saying what to use instead.
        """
        t = self.type
        st = _storage(t)
        if pa.types.is_boolean(st):
            return DeviceBitmap._make(self._data.buffers()[1], self.offset, len(self))
        if (
            pa.types.is_list(st)
            or pa.types.is_large_list(st)
            or pa.types.is_fixed_size_list(st)
            or pa.types.is_map(st)
            or pa.types.is_list_view(st)
            or pa.types.is_large_list_view(st)
        ):
            return self.children[0]
        if pa.types.is_run_end_encoded(st):
            return DeviceArray._wrap(self._data.children()[1], st.value_type)
        if pa.types.is_dictionary(st):
            raise TypeError("a dictionary array's values are .dictionary, indexed by .indices")
        if pa.types.is_struct(st) or pa.types.is_union(st):
            raise TypeError(f"a {t} array has one child per field: use .field(i)")
        if pa.types.is_null(st):
            raise TypeError("a null array holds no values")
        if st.num_buffers == 2:  # fixed width: validity + values
            return DeviceArray._wrap(self._data.without_validity(), t)
        raise TypeError(f"a {t} array has no single values buffer; use .buffers()")

    @property
    def validity(self) -> Optional[DeviceBitmap]:
        """The validity bitmap on the device (a :class:`DeviceBitmap`, bit set =
        valid), or None when the array has none (no nulls, or a type without
        a bitmap: null, unions, run-end encoded)."""
        if not self._data.has_validity_buffer:
            return None
        return DeviceBitmap._make(self._data.buffers()[0], self.offset, len(self))

    # -- slicing ----------------------------------------------------------------
    def slice(self, offset: int = 0, length: Optional[int] = None) -> "DeviceArray":
        """A zero-copy slice (pyarrow's rules: offset past the end gives an empty array)."""
        offset = _index(offset, "offset")
        if offset < 0:
            raise IndexError("Offset must be non-negative")
        n = len(self)
        offset = min(offset, n)
        if length is None:
            length = n - offset
        else:
            length = _index(length, "length")
            if length < 0:
                raise ValueError("Length must be non-negative")
            length = min(length, n - offset)
        return DeviceArray._wrap(self._data.slice(offset, length), self._type)

    def __getitem__(self, key: Any) -> Any:
        """A slice (zero-copy) for a slice; a pyarrow Scalar (one element copied
        to the host) for an integer."""
        if isinstance(key, slice):
            if (key.step or 1) != 1:
                raise IndexError("only slices with step 1 are supported on device arrays")
            start, stop, _ = key.indices(len(self))
            return self.slice(start, max(stop - start, 0))
        index = operator.index(key)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("index out of bounds")
        return self.slice(index, 1).to_host()[0]

    # -- host copies ------------------------------------------------------------
    def to_host(self, *, stream: Any = None) -> pa.Array:
        """A ``pyarrow.Array`` in host memory equal to this array (one batched
        copy; pinned memory from cuarrow's result pool when it has room,
        released when pyarrow frees the array).  Synchronous; with `stream`,
        the copies run on that stream after the work already queued there."""
        return _arrays_to_host(self.type, [self._data], stream)[0]

    def to_pylist(self) -> list:
        """``to_host().to_pylist()``."""
        return self.to_host().to_pylist()

    def equals(self, other: Any) -> bool:
        """True when `other` (a DeviceArray or a pyarrow Array) holds the same
        values and type (compared on the host)."""
        if isinstance(other, DeviceArray):
            other = other.to_host()
        if not isinstance(other, pa.Array):
            raise TypeError(f"cannot compare a DeviceArray with {type(other).__name__}")
        return self.to_host().equals(other)

    def validate(self, *, full: bool = False) -> None:
        """Check the array's structure (``full``: every value too, which copies
        the array to the host).  Raises ``pyarrow.ArrowInvalid`` naming the
        problem and where."""
        self._data.validate(2 if full else 1)

    # -- interchange --------------------------------------------------------------
    def __arrow_c_device_array__(self, requested_schema: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
        """The C Device Data Interface: ``(arrow_schema, arrow_device_array)``
        capsules.  The array's sync event is recorded on the legacy default
        stream.  `requested_schema` is honoured when it only relabels (the
        same physical type under another field name, nullability or
        extension type); anything that would need a cast raises
        NotImplementedError.  Other keywords must be None."""
        _check_kwargs(kwargs)
        data, field = self._requested(requested_schema)
        _, array_capsule = _lib.export_device_array(data)
        return field.__arrow_c_schema__(), array_capsule

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A device stream (``arrow_device_array_stream`` capsule) of this one array."""
        _check_kwargs(kwargs)
        data, field = self._requested(requested_schema)
        kind, device_id = self._placement()
        return _lib.export_device_array_stream(field.__arrow_c_schema__(), [data], kind, device_id)

    def _requested(self, requested_schema: Any) -> Tuple[Any, pa.Field]:
        """(the data, the field to announce) for a requested schema."""
        if requested_schema is None:
            return self._data, pa.field("", self.type)
        capsule = _schema_capsule(requested_schema)
        try:
            data = self._data.with_field(capsule)
        except pa.ArrowInvalid as e:
            raise _refuse_cast("array", e) from None
        wanted = _field_of(capsule)
        if not wanted.nullable and self.null_count:
            raise _refuse_cast("array", ValueError(f"a non-nullable field was requested for {self.null_count} nulls"))
        return data, wanted

    # -- tensor view ------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3 of a fixed-width array without nulls: the
        elements from the array's offset, with their dtype (temporal types as
        their storage integers; a fixed-size list as a 2-D array).  ``stream``
        is 1: the data is valid in the order of the legacy default stream.
        Raises TypeError for other arrays (with nulls: see ``.values``)."""
        tensor = _tensor_of(self, "__cuda_array_interface__", TypeError)
        address = tensor.buffer.address + tensor.byte_offset if tensor.nbytes else 0
        return {
            "shape": tensor.shape,
            "typestr": tensor.typestr,
            "descr": [("", tensor.typestr)],
            "data": (address, not tensor.buffer.is_mutable),
            "strides": None,
            "version": 3,
            "stream": 1,
        }

    def __dlpack_device__(self) -> Tuple[int, int]:
        return _dlpack_device_of(self._placement())

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """DLPack export of a fixed-width array without nulls (as
        ``__cuda_array_interface__``; the capsule keeps the memory alive).
        `stream` is the consumer's stream, made to wait for cuarrow's work
        (DLPack's integers: 1 the legacy default stream, 2 the per-thread
        one, -1 none).  Raises BufferError for other arrays."""
        tensor = _tensor_of(self, "DLPack", BufferError)
        return _dlpack_export(
            tensor, self._placement(), stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )

    # -- display ------------------------------------------------------------------------
    def _header(self) -> str:
        raw = self._data.raw_null_count
        nulls = f" null_count={raw}" if raw >= 0 else ""
        return (
            f"<cuarrow.cuda.DeviceArray type={self.type} length={len(self)}{nulls} "
            f"device={_device_label(self._placement())}>"
        )

    def __repr__(self) -> str:
        n = len(self)
        shown = _shown(lambda: _one_line(self.slice(0, min(n, _REPR_VALUES)).to_host(), n > _REPR_VALUES))
        return f"{self._header()}\n{shown}"

    __str__ = __repr__


# ---------------------------------------------------------------------------
# Chunked arrays
# ---------------------------------------------------------------------------



def _slice_pieces(pieces: List[Any], offset: Any, length: Any) -> List[Any]:
    """Zero-copy slices of consecutive pieces (chunks or batches) covering
    rows [offset, offset + length) of their concatenation, with pyarrow's
    argument rules (offset and length clamped, negatives refused)."""
    offset = _index(offset, "offset")
    if offset < 0:
        raise IndexError("Offset must be non-negative")
    n = sum(len(p) for p in pieces)
    offset = min(offset, n)
    if length is None:
        length = n - offset
    else:
        length = _index(length, "length")
        if length < 0:
            raise ValueError("Length must be non-negative")
        length = min(length, n - offset)
    out = []
    for piece in pieces:
        size = len(piece)
        if offset >= size:
            offset -= size
            continue
        take = min(size - offset, length)
        if take == 0:
            break
        out.append(piece.slice(offset, take))
        length -= take
        offset = 0
    return out

class DeviceChunkedArray(_DeviceData):
    """A chunked Arrow array in GPU memory: device chunks of one type.

    ``to_host()`` gives back a ``pyarrow.ChunkedArray`` equal to the original.
    """

    __slots__ = ("_chunks", "_type", "_where", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(chunked_array) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _make(cls, chunks: Sequence[DeviceArray], type: pa.DataType, where: Tuple[int, int]) -> "DeviceChunkedArray":
        obj = object.__new__(cls)
        obj._chunks = list(chunks)
        obj._type = type
        obj._where = where
        return obj

    def _placement(self) -> Tuple[int, int]:
        return self._where

    @property
    def type(self) -> pa.DataType:
        return self._type

    @property
    def chunks(self) -> List[DeviceArray]:
        return list(self._chunks)

    @property
    def num_chunks(self) -> int:
        return len(self._chunks)

    def chunk(self, i: int) -> DeviceArray:
        return self._chunks[_index(i, "i")]

    def iterchunks(self) -> Iterator[DeviceArray]:
        return iter(self._chunks)

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks)

    def length(self) -> int:
        return len(self)

    @property
    def null_count(self) -> int:
        return sum(c.null_count for c in self._chunks)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._chunks)

    def slice(self, offset: int = 0, length: Optional[int] = None) -> "DeviceChunkedArray":
        """A zero-copy slice across chunks (pyarrow's rules)."""
        return DeviceChunkedArray._make(_slice_pieces(self._chunks, offset, length), self._type, self._where)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            if (key.step or 1) != 1:
                raise IndexError("only slices with step 1 are supported on device arrays")
            start, stop, _ = key.indices(len(self))
            return self.slice(start, max(stop - start, 0))
        index = operator.index(key)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("index out of bounds")
        return self.slice(index, 1).to_host()[0]

    def to_host(self, *, stream: Any = None) -> pa.ChunkedArray:
        """A ``pyarrow.ChunkedArray`` in host memory: one batched copy and one
        synchronization for all the chunks."""
        if not self._chunks:
            return pa.chunked_array([], type=self._type)
        return pa.chunked_array(_arrays_to_host(self._type, [c._data for c in self._chunks], stream), type=self._type)

    def to_pylist(self) -> list:
        return self.to_host().to_pylist()

    def equals(self, other: Any) -> bool:
        if isinstance(other, DeviceChunkedArray):
            other = other.to_host()
        if not isinstance(other, pa.ChunkedArray):
            raise TypeError(f"cannot compare a DeviceChunkedArray with {type(other).__name__}")
        return self.to_host().equals(other)

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A device stream (``arrow_device_array_stream`` capsule) of the
        chunks, each with its sync event; its schema is the chunks' type.
        `requested_schema` as for DeviceArray."""
        _check_kwargs(kwargs)
        requested = [c._requested(requested_schema) for c in self._chunks]
        chunks = [data for data, _ in requested]
        if requested:
            schema = requested[0][1].__arrow_c_schema__()
        elif requested_schema is not None:
            wanted = _field_of(_schema_capsule(requested_schema))
            if not wanted.type.equals(self._type):
                raise _refuse_cast("chunked array", ValueError(f"{wanted.type} requested, the chunks are {self._type}"))
            schema = wanted.__arrow_c_schema__()
        else:
            schema = pa.field("", self._type).__arrow_c_schema__()
        kind, device_id = self._where
        return _lib.export_device_array_stream(schema, chunks, kind, device_id)

    def __repr__(self) -> str:
        head = self.slice(0, _REPR_VALUES)
        shown = _shown(lambda: ",".join(_one_line(c.to_host(), False) for c in head._chunks))
        more = ",..." if len(self) > _REPR_VALUES else ""
        return (
            f"<cuarrow.cuda.DeviceChunkedArray type={self._type} length={len(self)} chunks={self.num_chunks} "
            f"device={_device_label(self._where)}>\n[{shown}{more}]"
        )

    __str__ = __repr__


# ---------------------------------------------------------------------------
# Record batches and tables
# ---------------------------------------------------------------------------


def _column_index(schema: pa.Schema, key: Union[int, str]) -> int:
    if isinstance(key, str):
        index = schema.get_field_index(key)
        if index < 0:
            raise KeyError(f"Field \"{key}\" does not exist in schema")
        return index
    index = _index(key, "i")
    n = len(schema)
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError(f"column index {key} out of bounds for {n} columns")
    return index


def _table_text(host_batches: List[pa.RecordBatch], schema: pa.Schema) -> str:
    text = pa.Table.from_batches(host_batches, schema=schema).to_string(preview_cols=_REPR_VALUES)
    return text.split("\n", 1)[1] if "\n" in text else ""


class DeviceRecordBatch(_DeviceData):
    """A record batch in GPU memory: a schema and one device array per column.

    ``to_host()`` gives back a ``pyarrow.RecordBatch`` equal to the original.
    """

    __slots__ = ("_data", "_schema", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(record_batch) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _wrap(cls, data: Any, schema: Optional[pa.Schema] = None) -> "DeviceRecordBatch":
        obj = object.__new__(cls)
        obj._data = data
        obj._schema = schema
        return obj

    @staticmethod
    def from_arrays(
        arrays: Sequence[DeviceArray],
        names: Optional[Sequence[str]] = None,
        schema: Optional[pa.Schema] = None,
        metadata: Any = None,
    ) -> "DeviceRecordBatch":
        """A record batch of device arrays, zero-copy: pyarrow.RecordBatch.
        from_arrays's arguments and errors (names or schema, not both;
        ``Schema and number of arrays unequal``; columns of different
        lengths: ArrowInvalid ``Column 1 named b expected length 3 but got
        length 2``).  The columns must be on one device and have their
        fields' types (there is no cast on the device); the batch is
        validated cheaply before it is returned."""
        arrays = _device_arrays(arrays, "arrays")
        schema = _batch_schema(arrays, names, schema, metadata)
        where = arrays[0]._placement() if arrays else (_CUDA, 0)
        data = _lib.batch_from_arrays(schema.__arrow_c_schema__(), [a._data for a in arrays], *where)
        return DeviceRecordBatch._wrap(data, schema)

    def _placement(self) -> Tuple[int, int]:
        return self._data.placement

    @property
    def schema(self) -> pa.Schema:
        if self._schema is None:
            self._schema = pa.Schema._import_from_c_capsule(self._data.schema_capsule())
        return self._schema

    @property
    def num_rows(self) -> int:
        return self._data.num_rows

    def __len__(self) -> int:
        return self._data.num_rows

    @property
    def num_columns(self) -> int:
        return self._data.num_columns

    @property
    def column_names(self) -> List[str]:
        return self.schema.names

    @property
    def columns(self) -> List[DeviceArray]:
        schema = self.schema
        return [DeviceArray._wrap(c, f.type) for c, f in zip(self._data.columns(), schema)]

    def column(self, i: Union[int, str]) -> DeviceArray:
        """Column `i` (a position or a name)."""
        index = _column_index(self.schema, i)
        return DeviceArray._wrap(self._data.columns()[index], self.schema.field(index).type)

    def field(self, i: Union[int, str]) -> pa.Field:
        return self.schema.field(_column_index(self.schema, i))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.columns)

    def slice(self, offset: int = 0, length: Optional[int] = None) -> "DeviceRecordBatch":
        offset = _index(offset, "offset")
        if offset < 0:
            raise IndexError("Offset must be non-negative")
        n = len(self)
        offset = min(offset, n)
        if length is None:
            length = n - offset
        else:
            length = _index(length, "length")
            if length < 0:
                raise ValueError("Length must be non-negative")
            length = min(length, n - offset)
        return DeviceRecordBatch._wrap(self._data.slice(offset, length), self._schema)

    def __getitem__(self, key: Any) -> Any:
        """A column for a name or position; a zero-copy slice of rows for a slice."""
        if isinstance(key, slice):
            if (key.step or 1) != 1:
                raise IndexError("only slices with step 1 are supported on device record batches")
            start, stop, _ = key.indices(len(self))
            return self.slice(start, max(stop - start, 0))
        return self.column(key)

    def to_host(self, *, stream: Any = None) -> pa.RecordBatch:
        """A ``pyarrow.RecordBatch`` in host memory (one batched copy for all columns)."""
        return _batches_to_host(self.schema, [self._data], stream)[0]

    def to_pylist(self) -> list:
        return self.to_host().to_pylist()

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        if isinstance(other, DeviceRecordBatch):
            other = other.to_host()
        if not isinstance(other, pa.RecordBatch):
            raise TypeError(f"cannot compare a DeviceRecordBatch with {type(other).__name__}")
        return self.to_host().equals(other, check_metadata=check_metadata)

    def _requested(self, requested_schema: Any) -> Tuple[Any, pa.Schema]:
        """(the data, the schema to announce) for a requested schema."""
        if requested_schema is None:
            return self._data, self.schema
        capsule = _schema_capsule(requested_schema)
        try:
            data = self._data.with_schema(capsule)
        except pa.ArrowInvalid as e:
            raise _refuse_cast("record batch", e) from None
        wanted = pa.Schema._import_from_c_capsule(capsule)
        for f, column in zip(wanted, self.columns):
            if not f.nullable and column.null_count:
                raise _refuse_cast(
                    "record batch", ValueError(f"field {f.name!r} is non-nullable but has {column.null_count} nulls")
                )
        return data, wanted

    def __arrow_c_device_array__(self, requested_schema: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
        """``(arrow_schema, arrow_device_array)`` capsules of the batch (a
        struct array); rules as DeviceArray's."""
        _check_kwargs(kwargs)
        data, schema = self._requested(requested_schema)
        _, array_capsule = _lib.export_device_batch(data)
        return schema.__arrow_c_schema__(), array_capsule

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A device stream of this one batch."""
        _check_kwargs(kwargs)
        data, schema = self._requested(requested_schema)
        kind, device_id = self._placement()
        return _lib.export_device_batch_stream(schema.__arrow_c_schema__(), [data], kind, device_id)

    def __repr__(self) -> str:
        n = len(self)
        text = _shown(lambda: _table_text([self.slice(0, _REPR_ROWS).to_host()], self.schema))
        more = f"\n(first {_REPR_ROWS} of {n} rows)" if n > _REPR_ROWS else ""
        return (
            f"<cuarrow.cuda.DeviceRecordBatch num_rows={n} num_columns={self.num_columns} "
            f"device={_device_label(self._placement())}>\n{text}{more}"
        )

    __str__ = __repr__


def _ends(pieces: Sequence[Any]) -> List[int]:
    out, n = [], 0
    for p in pieces:
        n += len(p)
        out.append(n)
    return out


def _one_piece(pieces: List[Any]) -> "DeviceArray":
    # _slice_pieces of a range that no chunk boundary cuts gives one slice.
    if len(pieces) != 1:
        raise AssertionError("a table piece spans a chunk boundary")
    return pieces[0]


def _table_placement(batches: Sequence["DeviceRecordBatch"], columns: Sequence[Any]) -> Tuple[int, int]:
    """The one device of a table's batches; pyarrow.ArrowInvalid when they are on several."""
    where = None
    for i, b in enumerate(batches):
        p = b._placement()
        if where is None:
            where = p
        elif p != where:
            raise pa.ArrowInvalid(
                f"record batch {i} is in {_device_label(p)} memory but batch 0 is in {_device_label(where)} "
                "memory; a table must live on one device (copy it with to_device)"
            )
    if where is None:
        where = columns[0]._placement() if columns else (_CUDA, 0)
    return where


class DeviceTable(_DeviceData):
    """A table in GPU memory: a schema and device record batches.

    ``to_host()`` gives back a ``pyarrow.Table`` equal to the original;
    ``column(i)`` is a :class:`DeviceChunkedArray` (one chunk per batch).
    """

    __slots__ = ("_batches", "_schema", "_where", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(table) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _make(cls, batches: Sequence[DeviceRecordBatch], schema: pa.Schema, where: Tuple[int, int]) -> "DeviceTable":
        obj = object.__new__(cls)
        obj._batches = list(batches)
        obj._schema = schema
        obj._where = where
        return obj

    @staticmethod
    def from_arrays(
        arrays: Sequence[Union[DeviceArray, "DeviceChunkedArray"]],
        names: Optional[Sequence[str]] = None,
        schema: Optional[pa.Schema] = None,
        metadata: Any = None,
    ) -> "DeviceTable":
        """A table of device arrays or chunked arrays, zero-copy: pyarrow.
        Table.from_arrays's arguments and errors.  Chunked columns are cut
        (zero-copy slices) where any column's chunk ends, one record batch
        per piece, each checked as DeviceRecordBatch.from_arrays checks."""
        columns = list(arrays)
        for i, c in enumerate(columns):
            if not isinstance(c, (DeviceArray, DeviceChunkedArray)):
                raise TypeError(
                    f"arrays[{i}] must be a cuarrow.cuda.DeviceArray or DeviceChunkedArray, not {_type_of(c).__name__}"
                )
        schema = _batch_schema(columns, names, schema, metadata)
        if len(columns) != len(schema):
            raise ValueError("Schema and number of arrays unequal")
        pieces = [c.chunks if isinstance(c, DeviceChunkedArray) else [c] for c in columns]
        rows = [sum(len(p) for p in ps) for ps in pieces]
        for i, n in enumerate(rows):
            if n != rows[0]:
                raise pa.ArrowInvalid(
                    f"Column {i} named {schema.field(i).name} expected length {rows[0]} but got length {n}"
                )
        cuts = sorted({0, *rows[:1], *(end for ps in pieces for end in _ends(ps))})
        batches = []
        for start, stop in zip(cuts, cuts[1:]):
            cols = [_one_piece(_slice_pieces(ps, start, stop - start)) for ps in pieces]
            batches.append(DeviceRecordBatch.from_arrays(cols, schema=schema))
        if not batches and all(isinstance(c, DeviceArray) for c in columns):
            batches.append(DeviceRecordBatch.from_arrays(columns, schema=schema))
        where = _table_placement(batches, columns)
        return DeviceTable._make(batches, schema, where)

    @staticmethod
    def from_batches(batches: Sequence[DeviceRecordBatch], schema: Optional[pa.Schema] = None) -> "DeviceTable":
        """A table of device record batches, zero-copy: pyarrow.Table.
        from_batches's arguments and errors (``Must pass schema, or at least
        one RecordBatch``; ArrowInvalid ``Schema at index 1 was different``).
        All batches must be on one device."""
        batches = list(batches)
        for i, b in enumerate(batches):
            if not isinstance(b, DeviceRecordBatch):
                raise TypeError(f"batches[{i}] must be a cuarrow.cuda.DeviceRecordBatch, not {_type_of(b).__name__}")
        if schema is None:
            if not batches:
                raise ValueError("Must pass schema, or at least one RecordBatch")
            schema = batches[0].schema
        elif not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, not {_type_of(schema).__name__}")
        for i, b in enumerate(batches):
            if not b.schema.equals(schema, check_metadata=False):
                raise pa.ArrowInvalid(f"Schema at index {i} was different: \n{schema}\nvs\n{b.schema}")
        return DeviceTable._make(batches, schema, _table_placement(batches, []))

    def _placement(self) -> Tuple[int, int]:
        return self._where

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def num_rows(self) -> int:
        return sum(len(b) for b in self._batches)

    def __len__(self) -> int:
        return self.num_rows

    @property
    def num_columns(self) -> int:
        return len(self._schema)

    @property
    def column_names(self) -> List[str]:
        return self._schema.names

    def to_batches(self) -> List[DeviceRecordBatch]:
        return list(self._batches)

    def column(self, i: Union[int, str]) -> DeviceChunkedArray:
        """Column `i` (a position or a name): one chunk per batch."""
        index = _column_index(self._schema, i)
        chunks = [b.column(index) for b in self._batches]
        return DeviceChunkedArray._make(chunks, self._schema.field(index).type, self._where)

    @property
    def columns(self) -> List[DeviceChunkedArray]:
        return [self.column(i) for i in range(self.num_columns)]

    def field(self, i: Union[int, str]) -> pa.Field:
        return self._schema.field(_column_index(self._schema, i))

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._batches)

    def slice(self, offset: int = 0, length: Optional[int] = None) -> "DeviceTable":
        return DeviceTable._make(_slice_pieces(self._batches, offset, length), self._schema, self._where)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            if (key.step or 1) != 1:
                raise IndexError("only slices with step 1 are supported on device tables")
            start, stop, _ = key.indices(len(self))
            return self.slice(start, max(stop - start, 0))
        return self.column(key)

    def to_host(self, *, stream: Any = None) -> pa.Table:
        """A ``pyarrow.Table`` in host memory: one batched copy and one
        synchronization for all the batches."""
        batches = _batches_to_host(self._schema, [b._data for b in self._batches], stream) if self._batches else []
        return pa.Table.from_batches(batches, schema=self._schema)

    def to_pylist(self) -> list:
        return self.to_host().to_pylist()

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        if isinstance(other, DeviceTable):
            other = other.to_host()
        if not isinstance(other, pa.Table):
            raise TypeError(f"cannot compare a DeviceTable with {type(other).__name__}")
        return self.to_host().equals(other, check_metadata=check_metadata)

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A device stream of the batches (a struct schema, as pyarrow's
        tables), each with its sync event."""
        _check_kwargs(kwargs)
        requested = [b._requested(requested_schema) for b in self._batches]
        batches = [data for data, _ in requested]
        if requested:
            schema = requested[0][1].__arrow_c_schema__()
        elif requested_schema is not None:
            wanted = pa.Schema._import_from_c_capsule(_schema_capsule(requested_schema))
            if not wanted.equals(self._schema):
                raise _refuse_cast("table", ValueError(f"the requested schema is not the table's ({self._schema})"))
            schema = wanted.__arrow_c_schema__()
        else:
            schema = self._schema.__arrow_c_schema__()
        kind, device_id = self._where
        return _lib.export_device_batch_stream(schema, batches, kind, device_id)

    def __repr__(self) -> str:
        n = len(self)
        head = self.slice(0, _REPR_ROWS)
        more = f"\n(first {_REPR_ROWS} of {n} rows)" if n > _REPR_ROWS else ""
        return (
            f"<cuarrow.cuda.DeviceTable num_rows={n} num_columns={self.num_columns} batches={len(self._batches)} "
            f"device={_device_label(self._where)}>\n"
            f"{_shown(lambda: _table_text([b.to_host() for b in head._batches], self._schema))}{more}"
        )

    __str__ = __repr__


DeviceObject = Union[DeviceArray, DeviceChunkedArray, DeviceRecordBatch, DeviceTable]


# ---------------------------------------------------------------------------
# to_device / from_device
# ---------------------------------------------------------------------------


def _arrays_to(ctx: Context, arrays: List[Any], handle: int, device: int) -> List[Any]:
    return _lib.arrays_to_device(arrays, ctx._ctx, handle, device)


def _batches_to(ctx: Context, batches: List[Any], handle: int, device: int) -> List[Any]:
    return _lib.batches_to_device(batches, ctx._ctx, handle, device)


def _known_null_count(data: Any) -> Any:
    """Count the nulls of a host array before it moves (cheap on the host;
    on the device it would take a copy of the bitmap)."""
    if data.raw_null_count < 0:
        return data.with_null_count(data.null_count(0, -1))
    return data


def _stream_result(
    ctx: Context, result: Tuple[Any, ...], handle: int, device: int, source: Any = None
) -> Union[DeviceChunkedArray, DeviceTable]:
    """The device object for a stream read by the C++ layer; `source` (a
    pyarrow object) supplies pyarrow's own schema or type."""
    is_batches, schema_capsule, items = result[0], result[1], result[2]
    where = (_CUDA, ctx.device_number)
    if is_batches:
        schema = getattr(source, "schema", None)
        if not isinstance(schema, pa.Schema):
            schema = pa.Schema._import_from_c_capsule(schema_capsule)
        moved = _batches_to(ctx, items, handle, device)
        return DeviceTable._make([DeviceRecordBatch._wrap(b, schema) for b in moved], schema, where)
    t = source.type if isinstance(source, pa.ChunkedArray) else _field_of(schema_capsule).type
    moved = _arrays_to(ctx, [_known_null_count(a) if a.placement[0] == _CPU else a for a in items], handle, device)
    return DeviceChunkedArray._make([DeviceArray._wrap(a, t) for a in moved], t, where)


def _validate_pyarrow(obj: Any) -> None:
    try:
        obj.validate()
    except pa.ArrowInvalid as e:
        raise pa.ArrowInvalid(
            f"to_device: this pyarrow {type(obj).__name__} does not hold together ({e}); its buffers are smaller "
            "than its lengths or offsets say, so copying it would read host memory that is not its own"
        ) from e


def to_device(obj: Any, context: Any = None, *, stream: Any = None) -> DeviceObject:
    """Copy Arrow data to GPU memory, keeping its Arrow type.

    `obj` is any Arrow object: one with ``__arrow_c_array__``,
    ``__arrow_c_device_array__`` or ``__arrow_c_stream__`` /
    ``__arrow_c_device_stream__`` (pyarrow's Array, ChunkedArray,
    RecordBatch, Table and RecordBatchReader, and other Arrow libraries'
    objects), or one of cuarrow's device objects (copied to `context`'s
    device).  Returns a :class:`DeviceArray`, :class:`DeviceChunkedArray`,
    :class:`DeviceRecordBatch` or :class:`DeviceTable`:

    - pyarrow objects map by their class (a RecordBatchReader gives a table);
    - other producers of one array give a DeviceArray, or a
      DeviceRecordBatch when they look like a record batch (a struct array
      from an object with ``num_columns`` and ``schema``);
    - other producers of a stream give a DeviceTable when the stream's schema
      is a struct (how tables and readers export themselves) and a
      DeviceChunkedArray otherwise.

    `context` is a :class:`Context` or a device number (default 0).  Each
    array, batch or chunk moves in one batched transfer (one allocation, every
    buffer copied on `stream`), sliced arrays copy only what they reference,
    and `stream` (default: the legacy default stream) is synchronized once at
    the end: the result is complete on return.  Input from another producer
    is validated (structure and sizes) before anything is copied; a
    malformed one raises ``pyarrow.ArrowInvalid``.
    """
    ctx = _as_context(context)
    handle, device = _stream_arg(stream)
    where = (_CUDA, ctx.device_number)

    # cuarrow's own device objects: a device-to-device (or peer) copy.
    if isinstance(obj, DeviceArray):
        return DeviceArray._wrap(_arrays_to(ctx, [obj._data], handle, device)[0], obj._type)
    if isinstance(obj, DeviceRecordBatch):
        return DeviceRecordBatch._wrap(_batches_to(ctx, [obj._data], handle, device)[0], obj._schema)
    if isinstance(obj, DeviceChunkedArray):
        moved = _arrays_to(ctx, [c._data for c in obj._chunks], handle, device)
        return DeviceChunkedArray._make([DeviceArray._wrap(a, obj.type) for a in moved], obj.type, where)
    if isinstance(obj, DeviceTable):
        moved = _batches_to(ctx, [b._data for b in obj._batches], handle, device)
        return DeviceTable._make([DeviceRecordBatch._wrap(b, obj.schema) for b in moved], obj.schema, where)

    # pyarrow's host objects, by class.  The C Data Interface carries no
    # buffer sizes, so cuarrow sizes buffers from lengths and offsets; pyarrow
    # knows the real sizes: its cheap validate() (no value is read, about
    # 0.1 us a buffer) refuses an object whose offsets or lengths were
    # changed to point past its buffers (e.g. through a zero-copy NumPy
    # view), which would otherwise copy stray host bytes, or crash.
    if isinstance(obj, (pa.RecordBatch, pa.Array, pa.Table, pa.ChunkedArray)):
        _validate_pyarrow(obj)
    if isinstance(obj, pa.RecordBatch):
        batch = _lib.import_batch(*obj.__arrow_c_array__())
        return DeviceRecordBatch._wrap(_batches_to(ctx, [batch], handle, device)[0], obj.schema)
    if isinstance(obj, pa.Array):
        data = _known_null_count(_lib.import_array(*obj.__arrow_c_array__()))
        return DeviceArray._wrap(_arrays_to(ctx, [data], handle, device)[0], obj.type)
    if isinstance(obj, (pa.Table, pa.RecordBatchReader, pa.ChunkedArray)):
        result = _lib.read_stream(obj.__arrow_c_stream__(), _mode_of(obj))
        return _stream_result(ctx, result, handle, device, obj)

    # Other producers, by protocol: device arrays first (they may be anywhere).
    if hasattr(obj, "__arrow_c_device_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_device_array__")
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_device_batch(schema_capsule, array_capsule, handle, device)
            moved = _batches_to(ctx, [batch], handle, device)[0]
            return DeviceRecordBatch._wrap(moved, _schema_from(schema_capsule))
        data = _lib.import_device_array(schema_capsule, array_capsule, handle, device)
        if data.placement[0] == _CPU:
            data = _known_null_count(data)
        return DeviceArray._wrap(_arrays_to(ctx, [data], handle, device)[0], _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_array__")
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_batch(schema_capsule, array_capsule)
            moved = _batches_to(ctx, [batch], handle, device)[0]
            return DeviceRecordBatch._wrap(moved, _schema_from(schema_capsule))
        data = _known_null_count(_lib.import_array(schema_capsule, array_capsule))
        return DeviceArray._wrap(_arrays_to(ctx, [data], handle, device)[0], _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_device_stream__"):
        result = _lib.read_device_stream(obj.__arrow_c_device_stream__(), _mode_of(obj), handle, device)
        return _stream_result(ctx, result, handle, device)
    if hasattr(obj, "__arrow_c_stream__"):
        return _stream_result(ctx, _lib.read_stream(obj.__arrow_c_stream__(), _mode_of(obj)), handle, device)

    hint = ""
    if hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__") or hasattr(obj, "__array__"):
        hint = (
            "; for a tensor already on the GPU use cuarrow.cuda.from_device(obj) (zero-copy), for a NumPy array "
            "wrap it first: to_device(pa.array(ndarray))"
        )
    raise TypeError(
        "to_device expects Arrow data: an object with __arrow_c_array__, __arrow_c_device_array__, "
        f"__arrow_c_stream__ or __arrow_c_device_stream__ (pyarrow, nanoarrow, polars ...), not {type(obj).__name__}"
        + hint
    )


def _refuse_cpu(obj: Any) -> TypeError:
    return TypeError(
        f"from_device imports data already in GPU memory, but this {type(obj).__name__} is in CPU memory; "
        "use cuarrow.cuda.to_device(obj) to copy it to a GPU"
    )


# NumPy kinds of tensors that map to Arrow types: signed, unsigned, float,
# datetime64, timedelta64.
def _arrow_type_of_typestr(typestr: str) -> pa.DataType:
    import numpy as np

    dtype = np.dtype(typestr)
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        raise TypeError(f"big-endian tensors ({typestr}) have no Arrow layout; Arrow data is little-endian")
    if dtype.kind == "b":
        raise TypeError(
            "a bool tensor holds one byte per element, Arrow booleans one bit: view it as uint8 "
            "(e.g. cupy_array.view(cupy.uint8), tensor.to(torch.uint8)) before importing"
        )
    if dtype.kind in "iuf":
        return pa.from_numpy_dtype(dtype)
    if dtype.kind in "mM":
        unit, count = np.datetime_data(dtype)
        if count != 1 or unit not in ("s", "ms", "us", "ns"):
            raise TypeError(f"{dtype} has no Arrow equivalent (units s, ms, us, ns only)")
        return pa.timestamp(unit) if dtype.kind == "M" else pa.duration(unit)
    raise TypeError(f"tensors of dtype {dtype} have no Arrow equivalent (integers, floats, datetime64, timedelta64)")


_DLPACK_NUMPY = {(_DL_INT, 8): "|i1", (_DL_INT, 16): "<i2", (_DL_INT, 32): "<i4", (_DL_INT, 64): "<i8",
                 (_DL_UINT, 8): "|u1", (_DL_UINT, 16): "<u2", (_DL_UINT, 32): "<u4", (_DL_UINT, 64): "<u8",
                 (_DL_FLOAT, 16): "<f2", (_DL_FLOAT, 32): "<f4", (_DL_FLOAT, 64): "<f8", (6, 8): "|b1"}  # fmt: skip


def _from_tensor(obj: Any, context: Any, handle: int, device: int) -> DeviceArray:
    """A zero-copy DeviceArray over a 1-D (primitive) or 2-D (fixed-size
    list) C-contiguous tensor exposing __cuda_array_interface__ or DLPack."""
    dl_device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
    # The core's tensor reader checks shape, strides, dtype and span (and
    # refuses a CAI mask, whose masked elements would come back valid).
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        info = _lib.read_cai(cai)
        typestr = info["typestr"]
    else:
        try:
            capsule = obj.__dlpack__(stream=1, max_version=(1, 0))
        except TypeError:  # a producer without max_version (DLPack < 1.0)
            capsule = obj.__dlpack__(stream=1)
        info = _lib.dlpack_info(capsule)
        del capsule
        if info["lanes"] != 1 or (info["code"], info["bits"]) not in _DLPACK_NUMPY:
            raise TypeError(f"DLPack dtype (code {info['code']}, {info['bits']} bits) has no Arrow equivalent")
        typestr = _DLPACK_NUMPY[(info["code"], info["bits"])]
    shape = info["shape"]
    value_type = _arrow_type_of_typestr(typestr)
    if len(shape) not in (1, 2):
        raise TypeError(
            f"from_device takes 1-D tensors (Arrow arrays) and 2-D ones (fixed-size lists), not {len(shape)}-D"
        )
    if not info["c_contiguous"]:
        raise ValueError("the tensor is not C-contiguous; Arrow arrays are (copy it first, e.g. cupy.ascontiguousarray)")
    if context is not None:
        ctx = _as_context(context)
    elif dl_device is not None and int(dl_device[0]) in (_CUDA, _CUDA_MANAGED):
        ctx = Context(int(dl_device[1]))
    else:
        ctx = Context(0)
    buf = ctx.buffer_from_object(obj)
    where = (buf.raw_device_type if buf.size else _CUDA, ctx.device_number)
    n = shape[0]
    if len(shape) == 1:
        data = _lib.make_array(
            pa.field("", value_type).__arrow_c_schema__(), n, 0, 0, [None, buf], [], None, *where
        )
        return DeviceArray._wrap(data, value_type)
    k = shape[1]
    list_type = pa.list_(value_type, k)
    values = _lib.make_array(
        pa.field("item", value_type).__arrow_c_schema__(), n * k, 0, 0, [None, buf], [], None, *where
    )
    data = _lib.make_array(pa.field("", list_type).__arrow_c_schema__(), n, 0, 0, [None], [values], None, *where)
    return DeviceArray._wrap(data, list_type)


def from_device(obj: Any, context: Any = None, *, stream: Any = None) -> DeviceObject:
    """Import data already in GPU memory, without copying it.

    `obj` exposes one of:

    - ``__arrow_c_device_array__`` (the C Device Data Interface): a
      :class:`DeviceArray`, or a :class:`DeviceRecordBatch` for a record
      batch (cuarrow's, pyarrow's, or a struct array from an object with
      ``num_columns`` and ``schema``);
    - ``__arrow_c_device_stream__``: a :class:`DeviceTable` for a struct
      schema (or a table-like producer), else a :class:`DeviceChunkedArray`;
    - ``__cuda_array_interface__`` or DLPack (CuPy, PyTorch, Numba ...): a
      1-D C-contiguous tensor becomes a primitive DeviceArray without nulls
      (datetime64 / timedelta64 give timestamps / durations), a 2-D one a
      fixed-size list array (one list per row).  `context` chooses the
      device for tensors that do not say (default: DLPack's device, else 0).

    The producer's sync event is waited for on `stream` (default: the legacy
    default stream, where cuarrow works); the result is valid in that
    stream's order.  The imported structure is validated (structure and
    sizes, reading the last offsets from the device in one batch); a
    malformed one raises ``pyarrow.ArrowInvalid``.  Imported buffers are
    read-only.  Data in CPU memory is refused: use :func:`to_device`.
    cuarrow's own device objects go through the same protocols (a new,
    read-only view of the same memory).
    """
    handle, device = _stream_arg(stream)
    if hasattr(obj, "__arrow_c_device_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_device_array__")
        kind, _device_id = _lib.device_array_placement(array_capsule)
        if kind == _CPU:
            raise _refuse_cpu(obj)
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_device_batch(schema_capsule, array_capsule, handle, device)
            return DeviceRecordBatch._wrap(batch, _schema_from(schema_capsule))
        data = _lib.import_device_array(schema_capsule, array_capsule, handle, device)
        return DeviceArray._wrap(data, _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_device_stream__"):
        is_batches, schema_capsule, items, kind = _lib.read_device_stream(
            obj.__arrow_c_device_stream__(), _mode_of(obj), handle, device
        )
        if kind == _CPU:
            raise _refuse_cpu(obj)
        where = items[0].placement if items else (kind, 0)
        if is_batches:
            schema = pa.Schema._import_from_c_capsule(schema_capsule)
            return DeviceTable._make([DeviceRecordBatch._wrap(b, schema) for b in items], schema, where)
        field = _field_of(schema_capsule)
        return DeviceChunkedArray._make([DeviceArray._wrap(a, field.type) for a in items], field.type, where)
    if hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"):
        return _from_tensor(obj, context, handle, device)
    if hasattr(obj, "__arrow_c_array__") or hasattr(obj, "__arrow_c_stream__"):
        raise _refuse_cpu(obj)
    raise TypeError(
        "from_device expects device data: an object with __arrow_c_device_array__, __arrow_c_device_stream__, "
        f"__cuda_array_interface__ or __dlpack__, not {type(obj).__name__}"
    )
