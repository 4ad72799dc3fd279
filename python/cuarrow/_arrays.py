"""Typed Arrow data on the GPU: arrays, chunked arrays, record batches and
tables in device memory, with their Arrow types.

Everything public here is re-exported by :mod:`cuarrow.cuda`; the objects
are made by :func:`cuarrow.cuda.to_device` and :func:`cuarrow.cuda.from_device`
(cuarrow/_convert.py).

Device data is never read by host code: ``to_host()`` copies it (one
batched transfer per array, batch or chunk) and hands pyarrow an ordinary
host array; ``repr`` copies only the few leading values it shows.  Kernels
reach fixed-width arrays through ``__cuda_array_interface__`` (v3) and
DLPack; an array with nulls refuses both (the protocols carry no validity)
and points to ``.values`` and ``.validity``.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Union

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import _device, _protocols
from cuarrow._args import _index
from cuarrow._device import CPU as _CPU
from cuarrow._device import CUDA as _CUDA
from cuarrow._memory import _SHARE_DOC, Context, CudaBuffer, Device, _share
from cuarrow._protocols import _storage

# Values shown by repr (copied to the host; nothing else is).
_REPR_VALUES = 8
_REPR_ROWS = 5


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


def _type_from(capsule: Any) -> pa.DataType | None:
    """The pyarrow type of a producer's schema capsule, which the C++ import
    only read (None when pyarrow cannot read it: the C++ view then rules)."""
    try:
        return _field_of(capsule).type
    except Exception:  # noqa: BLE001 - best effort; cuarrow's own reading already succeeded
        return None


def _schema_from(capsule: Any) -> pa.Schema | None:
    try:
        return pa.Schema._import_from_c_capsule(capsule)
    except Exception:  # noqa: BLE001
        return None


def _child_types(t: pa.DataType) -> list[pa.DataType] | None:
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


def _wrap_buffer(raw: Any) -> CudaBuffer | None:
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
    transfer, capsules = _lib.arrays_to_host_begin(datas, stream)
    arrays = [_import_array(type_, c) for c in capsules]
    transfer.wait()
    return arrays


def _batches_to_host(schema: pa.Schema, datas: list, stream: Any) -> list:
    """pyarrow RecordBatches of device BatchDatas, as _arrays_to_host."""
    transfer, capsules = _lib.batches_to_host_begin(datas, stream)
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
    def _make(cls, raw: Any, bit_offset: int, length: int) -> DeviceBitmap:
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

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buffer.__dlpack_device__()

    def __repr__(self) -> str:
        return (
            f"<cuarrow.cuda.DeviceBitmap length={self.length} offset={self.offset} "
            f"bytes={self.buffer.size} device={self.buffer._device_label()}>"
        )


def _row_range(offset: Any, length: Any, n: int) -> tuple[int, int]:
    """(offset, length) of a slice of `n` rows with pyarrow's argument rules:
    negatives refused, offset and length clamped to the rows there are."""
    offset = _index(offset, "offset")
    if offset < 0:
        raise IndexError("Offset must be non-negative")
    offset = min(offset, n)
    if length is None:
        return offset, n - offset
    length = _index(length, "length")
    if length < 0:
        raise ValueError("Length must be non-negative")
    return offset, min(length, n - offset)


def _rows(obj: Any, key: slice, what: str) -> Any:
    """obj[start:stop] as obj.slice (step 1 only)."""
    if (key.step or 1) != 1:
        raise IndexError(f"only slices with step 1 are supported on {what}")
    start, stop, _ = key.indices(len(obj))
    return obj.slice(start, max(stop - start, 0))


def _element(obj: Any, key: Any) -> Any:
    """obj[i] for an integer (negative from the end): a pyarrow Scalar, one
    element copied to the host."""
    index = operator.index(key)
    n = len(obj)
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError("index out of bounds")
    return obj.slice(index, 1).to_host()[0]


class _DeviceData:
    """What every device object shares: where it lives, and refusals of host access."""

    __slots__ = ()

    def _placement(self) -> tuple[int, int]:
        raise NotImplementedError

    def _raw_context(self) -> Any:
        """The binding's context of the memory (None for host memory)."""
        raise NotImplementedError

    @property
    def device_type(self) -> Any:
        """``pyarrow.DeviceAllocationType.CUDA`` (``CUDA_HOST`` / ``CUDA_MANAGED``
        for imported pinned or managed memory)."""
        return _device.device_type(self._placement()[0])

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
        return Device(*self._placement())

    @property
    def context(self) -> Context:
        """The Context the data's memory is in (data without memory: its device's primary context)."""
        raw = self._raw_context()
        return Context._wrap(raw if raw is not None else _lib.Context.get(0))

    def share(self, stream: Any = None, memory: str = "legacy") -> Any:
        return _share(self, stream, memory)

    share.__doc__ = _SHARE_DOC

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TypeError(
            f"a {type(self).__name__} holds device memory, which NumPy cannot read; use to_host() "
            "(then .to_numpy()) for a host copy, or cupy.asarray / numba.cuda.as_cuda_array for a device view"
        )

    def __reduce__(self) -> Any:
        # cuarrow.cuda registers the pickling (a host copy) with copyreg.
        raise TypeError(
            f"a {type(self).__name__} pickles (as a host copy) once cuarrow.cuda is imported; or pickle to_host()"
        )

    def __copy__(self) -> Any:
        raise TypeError(
            f"copy.copy of a {type(self).__name__} is refused: it would copy through the host; slices are "
            "zero-copy views, pickle makes a host copy, to_host() a pyarrow one"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(
            f"iterating a {type(self).__name__} would copy it to the host element by element; "
            "use to_host() (or to_pylist()) once"
        )

    def to_host(self, *, stream: Any = None) -> Any:
        raise NotImplementedError

    def to_pylist(self) -> list:
        """``to_host().to_pylist()``."""
        return self.to_host().to_pylist()

    def _equals(self, other: Any, host_type: type, **kwargs: Any) -> bool:
        """True when `other` (an object of this class, or its pyarrow
        counterpart `host_type`) holds the same data (compared on the host)."""
        if isinstance(other, type(self)):
            other = other.to_host()
        if not isinstance(other, host_type):
            raise TypeError(f"cannot compare a {type(self).__name__} with {type(other).__name__}")
        return self.to_host().equals(other, **kwargs)


_type_of = builtins.type


def _declared_placement(buffers: Sequence[Any], children: Sequence[Any]) -> tuple[int, int]:
    """Where data built from these buffers and children lives (what an array
    without any buffer reports): the first buffer's device, else the first
    child's, else device 0.  Mixed devices are the core's to refuse."""
    for b in buffers:
        if b is not None and b.size:
            return (b.raw_device_type, b.device_id)
    for c in children:
        return c._placement()
    return (_CUDA, 0)


def _core_layout(type_: pa.DataType, buffers: list[Any]) -> list[Any]:
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


def _device_arrays(values: Any, what: str) -> list[DeviceArray]:
    out = list(values)
    for i, v in enumerate(out):
        if not isinstance(v, DeviceArray):
            raise TypeError(
                f"{what}[{i}] must be a cuarrow.cuda.DeviceArray, not {type(v).__name__} "
                "(cuarrow.cuda.to_device copies a host array to the device)"
            )
    return out


def _batch_schema(
    arrays: Sequence[DeviceArray | DeviceChunkedArray], names: Any, schema: Any, metadata: Any
) -> pa.Schema:
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

    _data: _lib.ArrayData
    _type: pa.DataType | None  # read from _data when first asked

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Do not call DeviceArray's constructor directly: use cuarrow.cuda.to_device(array) to copy an Arrow "
            "array to the GPU, or cuarrow.cuda.from_device(obj) to import device data"
        )

    @classmethod
    def _wrap(cls, data: Any, type: pa.DataType | None = None) -> DeviceArray:
        obj = object.__new__(cls)
        obj._data = data
        obj._type = type
        return obj

    @staticmethod
    def from_buffers(
        type: pa.DataType,
        length: int,
        buffers: Sequence[CudaBuffer | None],
        null_count: int = -1,
        offset: int = 0,
        children: Sequence[DeviceArray] | None = None,
    ) -> DeviceArray:
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
        data = _lib.make_array(
            pa.field("", type).__arrow_c_schema__(),
            length,
            null_count,
            offset,
            buffers,
            [c._data for c in children],
            None,
            where,
        )
        return DeviceArray._wrap(data, type)

    def _placement(self) -> tuple[int, int]:
        return self._data.placement

    def _raw_context(self) -> Any:
        return self._data.raw_context

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
            n = self._data.null_count()
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

    def buffers(self) -> list[CudaBuffer | None]:
        """This array's buffers, then its children's, depth first (as
        pyarrow's ``Array.buffers()``; a dictionary array lists its indices'
        buffers only).  Device buffers are ``CudaBuffer`` objects; an absent buffer
        (no validity bitmap, an empty array's data) is None."""
        out: list[CudaBuffer | None] = []

        def walk(d: Any) -> None:
            out.extend(_wrap_buffer(b) for b in d.buffers())
            for c in d.children():
                walk(c)

        walk(self._data)
        return out

    @property
    def children(self) -> list[DeviceArray]:
        """The child arrays as stored (a struct's offset is not applied to them; see ``field``)."""
        kids = self._data.children()
        types = _child_types(self.type)
        if types is None or len(types) != len(kids):
            return [DeviceArray._wrap(k) for k in kids]
        return [DeviceArray._wrap(k, t) for k, t in zip(kids, types)]

    def field(self, index: int | str) -> DeviceArray:
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
    def dictionary(self) -> DeviceArray:
        """The dictionary (values) of a dictionary array."""
        d = self._data.dictionary()
        if d is None:
            raise TypeError(f"a {self.type} array has no dictionary")
        return DeviceArray._wrap(d, _storage(self.type).value_type)

    @property
    def indices(self) -> DeviceArray:
        """The indices of a dictionary array (an integer array over the same
        buffers, with the array's validity)."""
        st = _storage(self.type)
        if not pa.types.is_dictionary(st):
            raise TypeError(f"a {self.type} array has no indices (it is not dictionary-encoded)")
        return DeviceArray._wrap(self._data.indices(), st.index_type)

    @property
    def values(self) -> DeviceArray | DeviceBitmap:
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
    def validity(self) -> DeviceBitmap | None:
        """The validity bitmap on the device (a :class:`DeviceBitmap`, bit set =
        valid), or None when the array has none (no nulls, or a type without
        a bitmap: null, unions, run-end encoded)."""
        if not self._data.has_validity_buffer:
            return None
        return DeviceBitmap._make(self._data.buffers()[0], self.offset, len(self))

    # -- slicing ----------------------------------------------------------------
    def slice(self, offset: int = 0, length: int | None = None) -> DeviceArray:
        """A zero-copy slice (pyarrow's rules: offset past the end gives an empty array)."""
        offset, length = _row_range(offset, length, len(self))
        return DeviceArray._wrap(self._data.slice(offset, length), self._type)

    def __getitem__(self, key: Any) -> Any:
        """A slice (zero-copy) for a slice; a pyarrow Scalar (one element copied
        to the host) for an integer."""
        if isinstance(key, slice):
            return _rows(self, key, "device arrays")
        return _element(self, key)

    # -- host copies ------------------------------------------------------------
    def to_host(self, *, stream: Any = None) -> pa.Array:
        """A ``pyarrow.Array`` in host memory equal to this array (one batched
        copy; pinned memory from cuarrow's result pool when it has room,
        released when pyarrow frees the array).  Synchronous; with `stream`,
        the copies run on that stream after the work already queued there."""
        return _arrays_to_host(self.type, [self._data], stream)[0]

    def equals(self, other: Any) -> bool:
        """True when `other` (a DeviceArray or a pyarrow Array) holds the same
        values and type (compared on the host)."""
        return self._equals(other, pa.Array)

    def validate(self, *, full: bool = False) -> None:
        """Check the array's structure (``full``: every value too, which copies
        the array to the host).  Raises ``pyarrow.ArrowInvalid`` naming the
        problem and where."""
        self._data.validate(full)

    # -- interchange --------------------------------------------------------------
    def __arrow_c_device_array__(self, requested_schema: Any = None, **kwargs: Any) -> tuple[Any, Any]:
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
        return _lib.export_device_array_stream(field.__arrow_c_schema__(), [data], self._placement())

    def _requested(self, requested_schema: Any) -> tuple[Any, pa.Field]:
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
        tensor = _protocols._tensor_of(self, "__cuda_array_interface__", TypeError)
        address = tensor.buffer.address + tensor.byte_offset if tensor.nbytes else 0
        return _protocols.cuda_array_interface(address, tensor.shape, tensor.typestr, not tensor.buffer.is_mutable)

    def __dlpack_device__(self) -> tuple[int, int]:
        return _device.dlpack_device(self._placement())

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """DLPack export of a fixed-width array without nulls (as
        ``__cuda_array_interface__``; the capsule keeps the memory alive).
        `stream` is the consumer's stream, made to wait for cuarrow's work
        (DLPack's integers: 1 the legacy default stream, 2 the per-thread
        one, -1 none).  Raises BufferError for other arrays."""
        tensor = _protocols._tensor_of(self, "DLPack", BufferError)
        placement = self._placement()
        return _protocols.dlpack_export(
            tensor.buffer,
            tensor.byte_offset,
            tensor.shape,
            tensor.code,
            tensor.bits,
            placement,
            self.context._ctx,
            "an array",
            stream=stream,
            max_version=max_version,
            dl_device=dl_device,
            copy=copy,
        )

    # -- display ------------------------------------------------------------------------
    def _header(self) -> str:
        raw = self._data.raw_null_count
        nulls = f" null_count={raw}" if raw >= 0 else ""
        return (
            f"<cuarrow.cuda.DeviceArray type={self.type} length={len(self)}{nulls} "
            f"device={_device.label(self._placement())}>"
        )

    def __repr__(self) -> str:
        n = len(self)
        shown = _shown(lambda: _one_line(self.slice(0, min(n, _REPR_VALUES)).to_host(), n > _REPR_VALUES))
        return f"{self._header()}\n{shown}"

    __str__ = __repr__


def _slice_pieces(pieces: list[Any], offset: Any, length: Any) -> list[Any]:
    """Zero-copy slices of consecutive pieces (chunks or batches) covering
    rows [offset, offset + length) of their concatenation, with pyarrow's
    argument rules (offset and length clamped, negatives refused)."""
    offset, length = _row_range(offset, length, sum(len(p) for p in pieces))
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


class _DevicePieces(_DeviceData):
    """What DeviceChunkedArray and DeviceTable share: consecutive device
    pieces (chunks, or record batches) on one device, ``_where``; a slice is
    zero-copy slices of the pieces."""

    __slots__ = ()

    _where: tuple[int, int]

    def _pieces(self) -> list[Any]:
        raise NotImplementedError

    def _with_pieces(self, pieces: list[Any]) -> Any:
        """An object like this one over other pieces (on the same device)."""
        raise NotImplementedError

    def _placement(self) -> tuple[int, int]:
        return self._where

    def _raw_context(self) -> Any:
        pieces = self._pieces()
        return pieces[0]._raw_context() if pieces else _lib.Context.get(max(self._where[1], 0))

    def __len__(self) -> int:
        return sum(len(p) for p in self._pieces())

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self._pieces())

    def slice(self, offset: int = 0, length: int | None = None) -> Any:
        """A zero-copy slice across the pieces (pyarrow's rules)."""
        return self._with_pieces(_slice_pieces(self._pieces(), offset, length))


class DeviceChunkedArray(_DevicePieces):
    """A chunked Arrow array in GPU memory: device chunks of one type.

    ``to_host()`` gives back a ``pyarrow.ChunkedArray`` equal to the original.
    """

    __slots__ = ("_chunks", "_type", "_where", "__weakref__")

    _chunks: list[DeviceArray]
    _type: pa.DataType

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(chunked_array) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _make(cls, chunks: Sequence[DeviceArray], type: pa.DataType, where: tuple[int, int]) -> DeviceChunkedArray:
        obj = object.__new__(cls)
        obj._chunks = list(chunks)
        obj._type = type
        obj._where = where
        return obj

    def _pieces(self) -> list[Any]:
        return self._chunks

    def _with_pieces(self, pieces: list[Any]) -> DeviceChunkedArray:
        return DeviceChunkedArray._make(pieces, self._type, self._where)

    @property
    def type(self) -> pa.DataType:
        return self._type

    @property
    def chunks(self) -> list[DeviceArray]:
        return list(self._chunks)

    @property
    def num_chunks(self) -> int:
        return len(self._chunks)

    def chunk(self, i: int) -> DeviceArray:
        return self._chunks[_index(i, "i")]

    def iterchunks(self) -> Iterator[DeviceArray]:
        return iter(self._chunks)

    def length(self) -> int:
        return len(self)

    @property
    def null_count(self) -> int:
        return sum(c.null_count for c in self._chunks)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _rows(self, key, "device arrays")
        return _element(self, key)

    def to_host(self, *, stream: Any = None) -> pa.ChunkedArray:
        """A ``pyarrow.ChunkedArray`` in host memory: one batched copy and one
        synchronization for all the chunks."""
        if not self._chunks:
            return pa.chunked_array([], type=self._type)
        return pa.chunked_array(_arrays_to_host(self._type, [c._data for c in self._chunks], stream), type=self._type)

    def equals(self, other: Any) -> bool:
        return self._equals(other, pa.ChunkedArray)

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
        return _lib.export_device_array_stream(schema, chunks, self._where)

    def __repr__(self) -> str:
        head = self.slice(0, _REPR_VALUES)
        shown = _shown(lambda: ",".join(_one_line(c.to_host(), False) for c in head._chunks))
        more = ",..." if len(self) > _REPR_VALUES else ""
        return (
            f"<cuarrow.cuda.DeviceChunkedArray type={self._type} length={len(self)} chunks={self.num_chunks} "
            f"device={_device.label(self._where)}>\n[{shown}{more}]"
        )

    __str__ = __repr__


def _column_index(schema: pa.Schema, key: int | str) -> int:
    if isinstance(key, str):
        index = schema.get_field_index(key)
        if index < 0:
            raise KeyError(f'Field "{key}" does not exist in schema')
        return index
    index = _index(key, "i")
    n = len(schema)
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError(f"column index {key} out of bounds for {n} columns")
    return index


def _table_text(host_batches: list[pa.RecordBatch], schema: pa.Schema) -> str:
    text = pa.Table.from_batches(host_batches, schema=schema).to_string(preview_cols=_REPR_VALUES)
    return text.split("\n", 1)[1] if "\n" in text else ""


class DeviceRecordBatch(_DeviceData):
    """A record batch in GPU memory: a schema and one device array per column.

    ``to_host()`` gives back a ``pyarrow.RecordBatch`` equal to the original.
    """

    __slots__ = ("_data", "_schema", "__weakref__")

    _data: _lib.BatchData
    _schema: pa.Schema | None  # read from _data when first asked

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(record_batch) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _wrap(cls, data: Any, schema: pa.Schema | None = None) -> DeviceRecordBatch:
        obj = object.__new__(cls)
        obj._data = data
        obj._schema = schema
        return obj

    @staticmethod
    def from_arrays(
        arrays: Sequence[DeviceArray],
        names: Sequence[str] | None = None,
        schema: pa.Schema | None = None,
        metadata: Any = None,
    ) -> DeviceRecordBatch:
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
        data = _lib.batch_from_arrays(schema.__arrow_c_schema__(), [a._data for a in arrays], where)
        return DeviceRecordBatch._wrap(data, schema)

    def _placement(self) -> tuple[int, int]:
        return self._data.placement

    def _raw_context(self) -> Any:
        return self._data.raw_context

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
    def column_names(self) -> list[str]:
        return self.schema.names

    @property
    def columns(self) -> list[DeviceArray]:
        schema = self.schema
        return [DeviceArray._wrap(c, f.type) for c, f in zip(self._data.columns(), schema)]

    def column(self, i: int | str) -> DeviceArray:
        """Column `i` (a position or a name)."""
        index = _column_index(self.schema, i)
        return DeviceArray._wrap(self._data.columns()[index], self.schema.field(index).type)

    def field(self, i: int | str) -> pa.Field:
        return self.schema.field(_column_index(self.schema, i))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.columns)

    def slice(self, offset: int = 0, length: int | None = None) -> DeviceRecordBatch:
        offset, length = _row_range(offset, length, len(self))
        return DeviceRecordBatch._wrap(self._data.slice(offset, length), self._schema)

    def __getitem__(self, key: Any) -> Any:
        """A column for a name or position; a zero-copy slice of rows for a slice."""
        if isinstance(key, slice):
            return _rows(self, key, "device record batches")
        return self.column(key)

    def to_host(self, *, stream: Any = None) -> pa.RecordBatch:
        """A ``pyarrow.RecordBatch`` in host memory (one batched copy for all columns)."""
        return _batches_to_host(self.schema, [self._data], stream)[0]

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        return self._equals(other, pa.RecordBatch, check_metadata=check_metadata)

    def _requested(self, requested_schema: Any) -> tuple[Any, pa.Schema]:
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

    def __arrow_c_device_array__(self, requested_schema: Any = None, **kwargs: Any) -> tuple[Any, Any]:
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
        return _lib.export_device_batch_stream(schema.__arrow_c_schema__(), [data], self._placement())

    def __repr__(self) -> str:
        n = len(self)
        text = _shown(lambda: _table_text([self.slice(0, _REPR_ROWS).to_host()], self.schema))
        more = f"\n(first {_REPR_ROWS} of {n} rows)" if n > _REPR_ROWS else ""
        return (
            f"<cuarrow.cuda.DeviceRecordBatch num_rows={n} num_columns={self.num_columns} "
            f"device={_device.label(self._placement())}>\n{text}{more}"
        )

    __str__ = __repr__


def _ends(pieces: Sequence[Any]) -> list[int]:
    out, n = [], 0
    for p in pieces:
        n += len(p)
        out.append(n)
    return out


def _one_piece(pieces: list[Any]) -> DeviceArray:
    # _slice_pieces of a range that no chunk boundary cuts gives one slice.
    if len(pieces) != 1:
        raise AssertionError("a table piece spans a chunk boundary")
    return pieces[0]


def _table_placement(batches: Sequence[DeviceRecordBatch], columns: Sequence[Any]) -> tuple[int, int]:
    """The one device of a table's batches; pyarrow.ArrowInvalid when they are on several."""
    where = None
    for i, b in enumerate(batches):
        p = b._placement()
        if where is None:
            where = p
        elif p != where:
            raise pa.ArrowInvalid(
                f"record batch {i} is in {_device.label(p)} memory but batch 0 is in {_device.label(where)} "
                "memory; a table must live on one device (copy it with to_device)"
            )
    if where is None:
        where = columns[0]._placement() if columns else (_CUDA, 0)
    return where


class DeviceTable(_DevicePieces):
    """A table in GPU memory: a schema and device record batches.

    ``to_host()`` gives back a ``pyarrow.Table`` equal to the original;
    ``column(i)`` is a :class:`DeviceChunkedArray` (one chunk per batch).
    """

    __slots__ = ("_batches", "_schema", "_where", "__weakref__")

    _batches: list[DeviceRecordBatch]
    _schema: pa.Schema

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use cuarrow.cuda.to_device(table) or cuarrow.cuda.from_device(obj)")

    @classmethod
    def _make(cls, batches: Sequence[DeviceRecordBatch], schema: pa.Schema, where: tuple[int, int]) -> DeviceTable:
        obj = object.__new__(cls)
        obj._batches = list(batches)
        obj._schema = schema
        obj._where = where
        return obj

    @staticmethod
    def from_arrays(
        arrays: Sequence[DeviceArray | DeviceChunkedArray],
        names: Sequence[str] | None = None,
        schema: pa.Schema | None = None,
        metadata: Any = None,
    ) -> DeviceTable:
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
        if not batches:
            plain = [c for c in columns if isinstance(c, DeviceArray)]
            if len(plain) == len(columns):
                batches.append(DeviceRecordBatch.from_arrays(plain, schema=schema))
        where = _table_placement(batches, columns)
        return DeviceTable._make(batches, schema, where)

    @staticmethod
    def from_batches(batches: Sequence[DeviceRecordBatch], schema: pa.Schema | None = None) -> DeviceTable:
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

    def _pieces(self) -> list[Any]:
        return self._batches

    def _with_pieces(self, pieces: list[Any]) -> DeviceTable:
        return DeviceTable._make(pieces, self._schema, self._where)

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def num_rows(self) -> int:
        return len(self)

    @property
    def num_columns(self) -> int:
        return len(self._schema)

    @property
    def column_names(self) -> list[str]:
        return self._schema.names

    def to_batches(self) -> list[DeviceRecordBatch]:
        return list(self._batches)

    def column(self, i: int | str) -> DeviceChunkedArray:
        """Column `i` (a position or a name): one chunk per batch."""
        index = _column_index(self._schema, i)
        chunks = [b.column(index) for b in self._batches]
        return DeviceChunkedArray._make(chunks, self._schema.field(index).type, self._where)

    @property
    def columns(self) -> list[DeviceChunkedArray]:
        return [self.column(i) for i in range(self.num_columns)]

    def field(self, i: int | str) -> pa.Field:
        return self._schema.field(_column_index(self._schema, i))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _rows(self, key, "device tables")
        return self.column(key)

    def to_host(self, *, stream: Any = None) -> pa.Table:
        """A ``pyarrow.Table`` in host memory: one batched copy and one
        synchronization for all the batches."""
        batches = _batches_to_host(self._schema, [b._data for b in self._batches], stream) if self._batches else []
        return pa.Table.from_batches(batches, schema=self._schema)

    def equals(self, other: Any, check_metadata: bool = False) -> bool:
        return self._equals(other, pa.Table, check_metadata=check_metadata)

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
        return _lib.export_device_batch_stream(schema, batches, self._where)

    def __repr__(self) -> str:
        n = len(self)
        head = self.slice(0, _REPR_ROWS)
        more = f"\n(first {_REPR_ROWS} of {n} rows)" if n > _REPR_ROWS else ""
        return (
            f"<cuarrow.cuda.DeviceTable num_rows={n} num_columns={self.num_columns} batches={len(self._batches)} "
            f"device={_device.label(self._where)}>\n"
            f"{_shown(lambda: _table_text([b.to_host() for b in head._batches], self._schema))}{more}"
        )

    __str__ = __repr__


DeviceObject = Union[DeviceArray, DeviceChunkedArray, DeviceRecordBatch, DeviceTable]
