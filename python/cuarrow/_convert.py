"""to_device and from_device: Arrow data copied to the GPU, or device data
imported without a copy, as cuarrow's typed device objects."""

from __future__ import annotations

import atexit
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow import _protocols
from cuarrow._arrays import (
    DeviceArray,
    DeviceChunkedArray,
    DeviceObject,
    DeviceRecordBatch,
    DeviceTable,
    _field_of,
    _schema_from,
    _type_from,
)
from cuarrow._device import CPU as _CPU
from cuarrow._device import CUDA as _CUDA
from cuarrow._device import CUDA_MANAGED as _CUDA_MANAGED
from cuarrow._memory import Context, CudaBuffer, _as_context
from cuarrow._protocols import _DLPACK_NUMPY


def _mode_of(obj: Any) -> int:
    """How to read a C stream: 2 record batches (a table), 1 arrays (a chunked
    array), 0 decide by its schema (a struct is read as record batches)."""
    if isinstance(obj, (pa.Table, pa.RecordBatchReader, DeviceTable, DeviceRecordBatch)):
        return 2
    if isinstance(obj, (pa.ChunkedArray, pa.Array, DeviceChunkedArray, DeviceArray)):
        return 1
    return 0


def _capsule_pair(obj: Any, method: str) -> tuple[Any, Any]:
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
    return _lib.is_struct_schema(schema_capsule)


# Copies to the device are not validated again: every ArrayData and
# BatchData was checked when it was made (an import, make_array, an IPC
# read) or is cuarrow's own copy of one.
def _arrays_to(ctx: Context, arrays: list[Any], stream: Any) -> list[Any]:
    return _lib.arrays_to_device(arrays, ctx._ctx, stream, validate=False)


def _batches_to(ctx: Context, batches: list[Any], stream: Any) -> list[Any]:
    return _lib.batches_to_device(batches, ctx._ctx, stream, validate=False)


def _known_null_count(data: Any) -> Any:
    """Count the nulls of a host array before it moves (cheap on the host;
    on the device it would take a copy of the bitmap)."""
    if data.raw_null_count < 0:
        return data.with_null_count(data.null_count())
    return data


def _stream_result(
    ctx: Context, result: tuple[Any, ...], stream: Any, source: Any = None
) -> DeviceChunkedArray | DeviceTable:
    """The device object for a stream read by the C++ layer; `source` (a
    pyarrow object) supplies pyarrow's own schema or type."""
    is_batches, schema_capsule, items = result[0], result[1], result[2]
    where = (_CUDA, ctx.device_number)
    if is_batches:
        schema = getattr(source, "schema", None)
        if not isinstance(schema, pa.Schema):
            schema = pa.Schema._import_from_c_capsule(schema_capsule)
        moved = _batches_to(ctx, items, stream)
        return DeviceTable._make([DeviceRecordBatch._wrap(b, schema) for b in moved], schema, where)
    t = source.type if isinstance(source, pa.ChunkedArray) else _field_of(schema_capsule).type
    moved = _arrays_to(ctx, [_known_null_count(a) if a.placement[0] == _CPU else a for a in items], stream)
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
    _lib.check_stream(stream)  # a bad one is refused before any work
    where = (_CUDA, ctx.device_number)

    # cuarrow's own device objects: a device-to-device (or peer) copy.
    if isinstance(obj, DeviceArray):
        return DeviceArray._wrap(_arrays_to(ctx, [obj._data], stream)[0], obj._type)
    if isinstance(obj, DeviceRecordBatch):
        return DeviceRecordBatch._wrap(_batches_to(ctx, [obj._data], stream)[0], obj._schema)
    if isinstance(obj, DeviceChunkedArray):
        moved = _arrays_to(ctx, [c._data for c in obj._chunks], stream)
        return DeviceChunkedArray._make([DeviceArray._wrap(a, obj.type) for a in moved], obj.type, where)
    if isinstance(obj, DeviceTable):
        moved = _batches_to(ctx, [b._data for b in obj._batches], stream)
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
        return DeviceRecordBatch._wrap(_batches_to(ctx, [batch], stream)[0], obj.schema)
    if isinstance(obj, pa.Array):
        data = _known_null_count(_lib.import_array(*obj.__arrow_c_array__()))
        return DeviceArray._wrap(_arrays_to(ctx, [data], stream)[0], obj.type)
    if isinstance(obj, (pa.Table, pa.RecordBatchReader, pa.ChunkedArray)):
        result = _lib.read_stream(obj.__arrow_c_stream__(), _mode_of(obj))
        return _stream_result(ctx, result, stream, obj)

    # Other producers, by protocol: device arrays first (they may be anywhere).
    if hasattr(obj, "__arrow_c_device_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_device_array__")
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_device_batch(schema_capsule, array_capsule, stream)
            moved = _batches_to(ctx, [batch], stream)[0]
            return DeviceRecordBatch._wrap(moved, _schema_from(schema_capsule))
        data = _lib.import_device_array(schema_capsule, array_capsule, stream)
        if data.placement[0] == _CPU:
            data = _known_null_count(data)
        return DeviceArray._wrap(_arrays_to(ctx, [data], stream)[0], _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_array__")
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_batch(schema_capsule, array_capsule)
            moved = _batches_to(ctx, [batch], stream)[0]
            return DeviceRecordBatch._wrap(moved, _schema_from(schema_capsule))
        data = _known_null_count(_lib.import_array(schema_capsule, array_capsule))
        return DeviceArray._wrap(_arrays_to(ctx, [data], stream)[0], _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_device_stream__"):
        result = _lib.read_device_stream(obj.__arrow_c_device_stream__(), _mode_of(obj), stream)
        return _stream_result(ctx, result, stream)
    if hasattr(obj, "__arrow_c_stream__"):
        return _stream_result(ctx, _lib.read_stream(obj.__arrow_c_stream__(), _mode_of(obj)), stream)

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


def prefetch_to_device(
    source: Any,
    context: Any = None,
    *,
    readahead: int = 2,
    readahead_bytes: int = 64 << 20,
    validate: bool = True,
) -> Iterator[DeviceRecordBatch]:
    """Iterate over the record batches of `source` in GPU memory, moved
    ahead of the loop so that copying the next batches overlaps what the
    loop does with the batches before (a training step, a kernel).

    `source` is a stream of record batches: an object with
    ``__arrow_c_stream__`` (a pyarrow RecordBatchReader or Table, a dataset
    scanner's ``to_reader()``, a Parquet file's ``iter_batches`` wrapped in
    ``pa.RecordBatchReader.from_batches``, another library's reader) or any
    iterable of ``pyarrow.RecordBatch`` of one schema.  A thread of
    cuarrow's own takes the stream's batches one after another and moves
    them to `context`'s device (a :class:`Context` or a device number,
    default 0) on a stream of its own, consecutive batches up to
    `readahead_bytes` (their buffers' sizes) in one batched transfer (the
    first batch alone, so that it comes at once), up to `readahead`
    transfers ahead of the batch in hand (about ``readahead *
    readahead_bytes`` of device memory held ahead); ``readahead=0`` moves
    each batch when it is asked for.  Each :class:`DeviceRecordBatch` is on the device
    when it is handed out (nothing to wait for).  Each batch is validated
    (structure and sizes) unless ``validate=False``.  When the stream (or
    a copy) fails, the batches before still come, then the error is raised.
    Leaving the loop early (or dropping the iterator) stops the reading and
    frees the batches moved ahead.  The stream is consumed.
    """
    ctx = _as_context(context)
    if hasattr(source, "__arrow_c_stream__"):
        capsule = source.__arrow_c_stream__()
    elif hasattr(source, "__iter__") and not isinstance(source, (str, bytes, dict)):
        items = iter(source)
        first = next(items, None)
        if first is None:
            return iter(())
        if not isinstance(first, pa.RecordBatch):
            raise TypeError(
                "prefetch_to_device: an iterable source must give pyarrow.RecordBatch objects, not "
                f"{type(first).__name__}"
            )
        reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], items))
        capsule = reader.__arrow_c_stream__()
    else:
        raise TypeError(
            "prefetch_to_device expects a stream of record batches: an object with __arrow_c_stream__ (pyarrow "
            f"RecordBatchReader or Table ...) or an iterable of pyarrow.RecordBatch, not {type(source).__name__}"
        )
    ahead = _lib.DeviceReadahead(capsule, ctx._ctx, readahead, readahead_bytes, bool(validate))
    _live_readaheads.add(ahead)
    return _prefetched(ahead, _schema_from(ahead.schema_capsule()))


# Read-aheads still running when the interpreter exits (an iterator left in
# a global, a loop never finished): stopped at exit, while their thread can
# still take the GIL for a Python producer.  Left to finalization, that
# thread would wait for a GIL that is never given back.
_live_readaheads: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _close_live_readaheads() -> None:
    for ahead in list(_live_readaheads):
        ahead.close()


def _prefetched(ahead: Any, schema: pa.Schema) -> Iterator[DeviceRecordBatch]:
    try:
        while True:
            got = ahead.next()
            if got is None:
                return
            yield DeviceRecordBatch._wrap(got, schema)
    finally:
        # A loop left early: stop reading and free what was moved ahead now.
        ahead.close()


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


def _from_tensor(obj: Any, context: Any, stream: Any) -> DeviceArray:
    """A zero-copy DeviceArray over a 1-D (primitive) or 2-D (fixed-size
    list) C-contiguous tensor exposing __cuda_array_interface__ or DLPack."""
    # The core's tensor reader checks shape, strides, dtype and span (and
    # refuses a CAI mask, whose masked elements would come back valid).
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        info = _lib.read_cai(cai)
        typestr = info["typestr"]
    else:
        capsule = _protocols.dlpack_capsule(obj)
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
        raise ValueError(
            "the tensor is not C-contiguous; Arrow arrays are (copy it first, e.g. cupy.ascontiguousarray)"
        )
    ctx = None if context is None else _as_context(context)
    if cai is not None:
        # The core locates the memory: the context is its device's unless one was given.
        buf = CudaBuffer._wrap(_lib.from_cai(cai, None if ctx is None else ctx._ctx, obj, stream))
        ctx = buf.context
    else:
        if ctx is None:
            dl_device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
            on_cuda = dl_device is not None and int(dl_device[0]) in (_CUDA, _CUDA_MANAGED)
            ctx = Context(int(dl_device[1]) if dl_device is not None and on_cuda else 0)
        buf = ctx.buffer_from_object(obj)
    where = (buf.raw_device_type if buf.size else _CUDA, ctx.device_number)
    n = shape[0]
    if len(shape) == 1:
        data = _lib.make_array(pa.field("", value_type).__arrow_c_schema__(), n, 0, 0, [None, buf], [], None, where)
        return DeviceArray._wrap(data, value_type)
    k = shape[1]
    list_type = pa.list_(value_type, k)
    values = _lib.make_array(
        pa.field("item", value_type).__arrow_c_schema__(), n * k, 0, 0, [None, buf], [], None, where
    )
    data = _lib.make_array(pa.field("", list_type).__arrow_c_schema__(), n, 0, 0, [None], [values], None, where)
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
      device (default: the device of a CAI's memory, DLPack's device, else
      0); memory of another device than `context`'s is refused.

    The producer's sync event (a CAI's ``stream``) is waited for on `stream`
    (default: the legacy default stream, where cuarrow works); the result is
    valid in that stream's order.  The imported structure is validated (structure and
    sizes, reading the last offsets from the device in one batch); a
    malformed one raises ``pyarrow.ArrowInvalid``.  Imported buffers are
    read-only.  Data in CPU memory is refused: use :func:`to_device`.
    cuarrow's own device objects go through the same protocols (a new,
    read-only view of the same memory).
    """
    _lib.check_stream(stream)  # a bad one is refused before any work
    if hasattr(obj, "__arrow_c_device_array__"):
        schema_capsule, array_capsule = _capsule_pair(obj, "__arrow_c_device_array__")
        kind, _device_id = _lib.device_array_placement(array_capsule)
        if kind == _CPU:
            raise _refuse_cpu(obj)
        if _looks_like_batch(obj, schema_capsule):
            batch = _lib.import_device_batch(schema_capsule, array_capsule, stream)
            return DeviceRecordBatch._wrap(batch, _schema_from(schema_capsule))
        data = _lib.import_device_array(schema_capsule, array_capsule, stream)
        return DeviceArray._wrap(data, _type_from(schema_capsule))
    if hasattr(obj, "__arrow_c_device_stream__"):
        is_batches, schema_capsule, items, kind = _lib.read_device_stream(
            obj.__arrow_c_device_stream__(), _mode_of(obj), stream
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
        return _from_tensor(obj, context, stream)
    if hasattr(obj, "__arrow_c_array__") or hasattr(obj, "__arrow_c_stream__"):
        raise _refuse_cpu(obj)
    raise TypeError(
        "from_device expects device data: an object with __arrow_c_device_array__, __arrow_c_device_stream__, "
        f"__cuda_array_interface__ or __dlpack__, not {type(obj).__name__}"
    )
