"""The Arrow IPC format over device memory: pyarrow.ipc's names and shapes,
with bodies that stay on the GPU.

    >>> from cuarrow import ipc                  # also cuarrow.cuda.ipc
    >>> reader = ipc.open_stream(dbuf)           # a CudaBuffer or cuda.BufferReader
    >>> table = reader.read_all()                # DeviceTable, zero-copy over dbuf

Readers take a stream or file already in device memory (a CudaBuffer, or a
cuda.BufferReader from its position): the metadata of each message is read
to the host, and every column of every batch is a zero-copy slice of the
device bytes.  Writers assemble a stream or file in one device allocation
with one batched copy; ``close()`` (or ``getvalue()``) gives it as a
CudaBuffer.  The bytes are what pyarrow writes for the same (uncompressed)
data, so either side reads the other's output.  Malformed bytes raise
pyarrow.ArrowInvalid naming the message and what is wrong.

It is ``cuarrow.ipc`` (a module of its own, as ``pyarrow.ipc`` is beside
``pyarrow.cuda``) and also reachable as ``cuarrow.cuda.ipc``.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from cuarrow import _cuarrow as _lib
from cuarrow._arrays import DeviceRecordBatch, DeviceTable, _refuse_cast
from cuarrow._convert import from_device, to_device
from cuarrow._device import CUDA as _CUDA
from cuarrow._io import BufferReader
from cuarrow._memory import Context, CudaBuffer

__all__ = [
    "DictionaryMemo",
    "Message",
    "RecordBatchFileReader",
    "RecordBatchFileWriter",
    "RecordBatchStreamReader",
    "RecordBatchStreamWriter",
    "gds_status",
    "new_file",
    "new_stream",
    "nvcomp_status",
    "open_file",
    "open_stream",
    "read_feather",
    "read_message",
    "read_record_batch",
    "read_schema",
    "serialize_record_batch",
    "write_feather",
]

# Message.fbs MessageHeader codes, by pyarrow's names (pyarrow.ipc.Message.type).
_KINDS = {0: "none", 1: "schema", 2: "dictionary", 3: "record batch", 4: "tensor", 5: "sparse tensor"}


def _type_name(obj: Any) -> str:
    return type(obj).__name__


def _decode_names(fields: list[pa.Field]) -> None:
    for f in fields:
        f.name  # noqa: B018 (decodes it)
        t = f.type
        while isinstance(t, (pa.DictionaryType, pa.BaseExtensionType)):
            t = t.value_type if isinstance(t, pa.DictionaryType) else t.storage_type
        _decode_names([t.field(i) for i in range(t.num_fields)])


def _schema_from(capsule: Any) -> pa.Schema:
    schema = pa.schema(_Capsule(capsule))
    try:
        # pyarrow decodes names when they are used: decode them all now.
        _decode_names(list(schema))
        return schema
    except UnicodeDecodeError as e:
        # IPC metadata is untrusted; pyarrow decodes field names to str.
        raise pa.ArrowInvalid(f"IPC schema: a field name is not UTF-8 ({e})") from None


class _Capsule:
    """Hands an "arrow_schema" capsule to pyarrow (which takes objects with
    ``__arrow_c_schema__``)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __arrow_c_schema__(self) -> Any:
        return self._capsule


def _pairs(metadata: Any) -> list[tuple[bytes, bytes]] | None:
    """Custom metadata (a dict or pyarrow KeyValueMetadata, str or bytes) as
    the binding's (bytes, bytes) pairs, in order."""
    if metadata is None:
        return None
    if not isinstance(metadata, pa.KeyValueMetadata):
        metadata = pa.KeyValueMetadata(metadata)
    return list(metadata.items())


def _with_metadata(batch: DeviceRecordBatch, pairs: list) -> Any:
    """pyarrow's RecordBatchWithMetadata of a device batch (custom_metadata
    None when the message has none, as pyarrow gives it)."""
    return pa.lib.RecordBatchWithMetadata(batch, pa.KeyValueMetadata(pairs) if pairs else None)


def _batch_from(schema: pa.Schema, data: Any) -> DeviceRecordBatch:
    """A DeviceRecordBatch of a BatchData a reader made (the core's batch as
    it is: zero-copy, validated by the reader, nothing read back from the
    device)."""
    return DeviceRecordBatch._wrap(data, schema)


def _device_batch(batch: Any, ctx: Context | None, what: str) -> DeviceRecordBatch:
    """A DeviceRecordBatch of `batch`: as it is, a pyarrow RecordBatch moved
    to `ctx`'s device first (one batched copy), or another library's device
    record batch (``__arrow_c_device_array__``) imported once, zero-copy."""
    if isinstance(batch, DeviceRecordBatch):
        return batch
    if isinstance(batch, pa.RecordBatch):
        out = to_device(batch, ctx)
        assert isinstance(out, DeviceRecordBatch)
        return out
    if hasattr(batch, "__arrow_c_device_array__"):
        imported = from_device(batch)
        if isinstance(imported, DeviceRecordBatch):
            return imported
    raise TypeError(
        f"{what}: expected a pyarrow.RecordBatch or cuarrow.cuda.DeviceRecordBatch, got {_type_name(batch)}"
    )


# What the writers derive from a schema, for the last schema objects they
# were made with (each kept, so that its id is not reused while it is
# here), so that a writer made for each write of the same schema object
# (ipc_bench's stream) does not derive it again.  Keyed by identity: another
# schema object, equal or not, has its own entry.
_PER_SCHEMA: dict[int, tuple[pa.Schema, dict[str, Any]]] = {}


def _per_schema(schema: pa.Schema, key: str, make: Callable[[pa.Schema], Any]) -> Any:
    hit = _PER_SCHEMA.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_PER_SCHEMA) >= 16:
            _PER_SCHEMA.clear()
        hit = _PER_SCHEMA[id(schema)] = (schema, {})
    out = hit[1].get(key)
    if out is None:
        out = hit[1][key] = make(schema)
    return out


def _non_nullable(schema: pa.Schema) -> tuple[int, ...]:
    """The positions of `schema`'s non-nullable fields (looked up once per
    writer: iterating a schema's fields costs microseconds per batch;
    remembered per schema object, since a writer made for each write of
    the same schema, as ipc_bench's stream, paid about 8 us on the CI
    machine before its first copy)."""
    return _per_schema(schema, "non_nullable", lambda s: tuple(i for i, f in enumerate(s) if not f.nullable))


def _encoded_schema(schema: pa.Schema) -> Any:
    """`schema` converted and its IPC schema message encoded
    (cuarrow::ipc::encoded_schema), remembered per schema object: the
    export through the C data interface, the conversion and the encoding
    took a stream writer made per write about 100 us before its first copy
    (bench/stream_launch_probe.py, driver emulation)."""
    return _per_schema(schema, "encoded", lambda s: _lib.IpcEncodedSchema(s.__arrow_c_schema__()))


def _batch_data(device: DeviceRecordBatch, schema: pa.Schema, non_nullable: tuple[int, ...] | None = None) -> Any:
    """The BatchData of `device` under `schema` (a writer's), which its own
    schema must equal but for metadata (pyarrow's rule): the batch crosses
    the border as it is, no export and re-import.  A non-nullable field's
    column must hold no nulls (its null count is known for batches read
    from IPC; counted from the bitmap otherwise), as the export under a
    requested schema checked."""
    own = device.schema
    if not own.equals(schema, check_metadata=False):
        raise pa.ArrowInvalid(f"Tried to write record batch with different schema:\n{own}\nvs\n{schema}")
    for i in _non_nullable(schema) if non_nullable is None else non_nullable:
        if nulls := device.column(i).null_count:
            name = schema.field(i).name
            raise _refuse_cast("record batch", ValueError(f"field {name!r} is non-nullable but has {nulls} nulls"))
    if own.equals(schema, check_metadata=True):
        return device._data
    return device._data.with_schema(schema.__arrow_c_schema__())


def _is_path(source: Any) -> bool:
    return isinstance(source, (str, os.PathLike))


def _context_of(context: Any) -> Context:
    """The Context a reader of a path reads into: `context`, a device number, or device 0."""
    if context is None:
        return Context(0)
    if isinstance(context, Context):
        return context
    if isinstance(context, int) and not isinstance(context, bool):
        return Context(context)
    raise TypeError(f"context must be a cuarrow.cuda.Context or a device number, not {_type_name(context)}")


def _column_indices(schema: pa.Schema, columns: Any, path: str) -> list[int]:
    """Top-level field positions of `columns` (names or positions, in the order wanted)."""
    if isinstance(columns, (str, bytes)) or not hasattr(columns, "__iter__"):
        raise TypeError(f"columns must be a list of names or positions, not {_type_name(columns)}")
    out = []
    for c in columns:
        if isinstance(c, int) and not isinstance(c, bool):
            out.append(c)  # the reader checks the range (pyarrow's "Out of bounds field index")
        elif isinstance(c, str):
            i = schema.get_field_index(c)
            if i < 0:
                hits = schema.get_all_field_indices(c)
                reason = f"is not unique in {path}" if hits else f"is not a column of {path}"
                raise KeyError(f"column {c!r} {reason} (columns: {schema.names})")
            out.append(i)
        else:
            raise TypeError(f"columns must be names or positions, not {_type_name(c)}")
    return out


def _source_buffer(source: Any, what: str) -> CudaBuffer:
    """The device bytes a reader reads: a CudaBuffer, or a BufferReader's
    buffer from its position."""
    if isinstance(source, CudaBuffer):
        return source
    if isinstance(source, BufferReader):
        return source.buffer.slice(source.tell())
    raise TypeError(
        f"cuarrow.ipc.{what} reads device memory: expected a cuarrow.cuda.CudaBuffer or BufferReader, got "
        f"{_type_name(source)} (host data: use pyarrow.ipc.{what}, then cuarrow.cuda.to_device)"
    )


# ---- messages ------------------------------------------------------------------------


class Message:
    """One Arrow IPC message whose body stays where it was read (pyarrow.ipc.
    Message's attributes): ``type``, ``metadata`` (host bytes, a pyarrow
    Buffer), ``metadata_version``, ``body`` (a CudaBuffer slice of the
    source) and ``serialize()``."""

    __slots__ = ("_msg",)
    _msg: _lib.IpcMessage

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Do not call Message's constructor directly: use cuarrow.ipc.read_message")

    @classmethod
    def _wrap(cls, raw: Any) -> Message:
        obj = cls.__new__(cls)
        obj._msg = raw
        return obj

    @property
    def type(self) -> str:
        return _KINDS.get(self._msg.kind, "unknown")

    @property
    def metadata(self) -> pa.Buffer:
        return pa.py_buffer(self._msg.metadata)

    @property
    def metadata_version(self) -> pa.ipc.MetadataVersion:
        return pa.ipc.MetadataVersion(self._msg.version)

    @property
    def body(self) -> CudaBuffer:
        return CudaBuffer._wrap(self._msg.body)

    def serialize(self, memory_pool: Any = None) -> pa.Buffer:
        """The whole message in host memory (prefix, metadata, padding, body
        copied from the device), as pyarrow.ipc.Message.serialize()."""
        return pa.py_buffer(self._msg.serialize())

    def __repr__(self) -> str:
        return (
            f"<cuarrow.ipc.Message>\ntype: {self.type}\nmetadata length: {len(self._msg.metadata)}\n"
            f"body length: {self._msg.body.size} (device)"
        )


def _read_at(buf: CudaBuffer, offset: int) -> Any:
    return _lib.ipc_read_message(buf, offset)


def read_message(source: Any, pool: Any = None) -> Message:
    """Read one Arrow IPC message from a CudaBuffer (at its start) or a
    BufferReader (at its position, which moves past the message).

    The metadata is copied to the host; the body stays on the device (a
    zero-copy slice of the source).  Raises EOFError at an end-of-stream
    marker or at the end of the source; ArrowInvalid for malformed bytes.
    """
    if isinstance(source, CudaBuffer):
        raw = _read_at(source, 0)
        if raw is None:
            raise EOFError("end of the IPC stream: no message")
        return Message._wrap(raw)
    if not isinstance(source, BufferReader):
        raise TypeError(f"expected CudaBuffer or BufferReader instance, got {_type_name(source)}")
    position = source.tell()
    raw = _read_at(source.buffer, position)
    if raw is None:
        # At the end-of-stream marker, the reader moves past it (8 bytes, 4
        # in the form before Arrow 0.15 without the continuation marker).
        if position < source.size():
            marker = source.read_at(4, position)
            source.seek(min(source.size(), position + (8 if marker == b"\xff\xff\xff\xff" else 4)))
        raise EOFError("end of the IPC stream: no message")
    source.seek(position + raw.size)
    return Message._wrap(raw)


class DictionaryMemo:
    """The dictionaries of an IPC stream for :func:`read_record_batch`
    (pyarrow.ipc.DictionaryMemo's role, over device memory): bound to a
    schema by :func:`read_schema`, then given the stream's dictionary
    messages with :meth:`add`."""

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: Any = None

    def _bind(self, message: Message) -> None:
        self._memo = _lib.IpcDictionaryMemo(message._msg)

    def add(self, message: Message) -> None:
        """Read a dictionary message (a delta extends the dictionary there is);
        the dictionary stays on the device."""
        if not isinstance(message, Message):
            raise TypeError(f"expected a cuarrow.ipc.Message, got {_type_name(message)}")
        if self._memo is None:
            raise pa.ArrowInvalid("DictionaryMemo: no schema yet (pass it to cuarrow.ipc.read_schema first)")
        self._memo.read(message._msg)


def _message_of(obj: Any, what: str) -> Message:
    if isinstance(obj, Message):
        return obj
    if isinstance(obj, CudaBuffer):
        return read_message(obj)
    raise TypeError(f"expected CudaBuffer instance (or a cuarrow.ipc.Message), got {_type_name(obj)}")


def read_schema(obj: Any, dictionary_memo: DictionaryMemo | None = None) -> pa.Schema:
    """The schema of a schema message (a Message or a CudaBuffer holding one),
    as a pyarrow Schema; `dictionary_memo` learns its dictionary fields."""
    message = _message_of(obj, "read_schema")
    schema = _schema_from(message._msg.schema_capsule())
    if dictionary_memo is not None:
        if not isinstance(dictionary_memo, DictionaryMemo):
            raise TypeError(f"dictionary_memo must be a cuarrow.ipc.DictionaryMemo, not {_type_name(dictionary_memo)}")
        dictionary_memo._bind(message)
    return schema


def read_record_batch(
    obj: Any, schema: Any, dictionary_memo: DictionaryMemo | None = None, pool: Any = None
) -> DeviceRecordBatch:
    """The record batch of one IPC message in device memory (a CudaBuffer
    holding the message, or a Message from :func:`read_message`) under
    `schema`, as a DeviceRecordBatch whose buffers are zero-copy slices of
    the message body.  Dictionary-encoded columns need `dictionary_memo`."""
    message = _message_of(obj, "read_record_batch")
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, not {_type_name(schema)}")
    memo = None
    if dictionary_memo is not None:
        if not isinstance(dictionary_memo, DictionaryMemo):
            raise TypeError(
                f"dictionary_memo must be a cuarrow.ipc.DictionaryMemo, not {_type_name(dictionary_memo)} "
                "(a pyarrow DictionaryMemo holds host dictionaries)"
            )
        memo = dictionary_memo._memo
    capsule = _lib.ipc_read_record_batch(message._msg, schema.__arrow_c_schema__(), memo)
    return _batch_from(schema, capsule)


def serialize_record_batch(batch: Any, ctx: Any) -> CudaBuffer:
    """One record batch as an Arrow IPC message in device memory of `ctx`
    (pyarrow's bytes for the same batch).  A DeviceRecordBatch is written
    device to device; a pyarrow RecordBatch is moved to `ctx` first.
    Batches with dictionary columns are refused (write a stream)."""
    if not isinstance(ctx, Context):
        raise TypeError(f"expected Context instance, got {_type_name(ctx)}")
    if not isinstance(batch, (pa.RecordBatch, DeviceRecordBatch)):
        raise TypeError(f"expected RecordBatch instance, got {_type_name(batch)}")
    device = _device_batch(batch, ctx, "serialize_record_batch")
    return CudaBuffer._wrap(_lib.ipc_serialize_record_batch(device._data, ctx._ctx))


# ---- readers -------------------------------------------------------------------------


class _Reader:
    _schema: pa.Schema
    # What a subclass reads: the function named in errors, the binding's
    # readers of a path and of device memory.
    _WHAT: str
    _PATH_READER: Any
    _MEMORY_READER: Any

    @staticmethod
    def _names(path: str, ctx: Context) -> pa.Schema:
        """The schema whose field names `columns` may use, read cheaply."""
        raise NotImplementedError

    def __init__(
        self,
        source: Any,
        *,
        columns: Any = None,
        context: Any = None,
        collect_stats: bool = False,
        gpu_decompression: bool = False,
        body_group_bytes: int | None = None,
        read_path: str = "auto",
    ) -> None:
        """A reader of a path (into device memory of `context`; `columns`
        mapped to field positions through `_names`) or of device memory."""
        what, path_reader, memory_reader, names = self._WHAT, self._PATH_READER, self._MEMORY_READER, self._names
        if _is_path(source):
            path = os.fspath(source)
            ctx = _context_of(context)
            indices = None if columns is None else _column_indices(names(path, ctx), columns, path)
            self._source: CudaBuffer | None = None
            _nvcomp_wheel_default()
            self._reader: Any = path_reader(
                path, ctx._ctx, indices, bool(collect_stats), bool(gpu_decompression), body_group_bytes, read_path
            )
            # Every batch read by path lies in device memory of `ctx`.
            self._where: tuple[int, int] | None = (_CUDA, ctx.device_number)
        else:
            if columns is not None:
                raise NotImplementedError(
                    f"cuarrow.ipc.{what} of device memory reads every column (columns / included_fields select "
                    "columns of files read by path)"
                )
            if read_path != "auto":
                raise ValueError(
                    f"cuarrow.ipc.{what}: read_path={read_path!r} chooses how a file read by path reaches the "
                    "device; this source is in device memory already"
                )
            self._source = _source_buffer(source, what)
            self._reader = memory_reader(self._source)
            self._where = None
        self._schema = _schema_from(self._reader.schema_capsule())

    @property
    def read_path(self) -> str | None:
        """How a file read by path moved its bytes ("staging": pread into
        pinned staging memory, then DMA; "gds": GPUDirect Storage; "none"
        before the first batch); None for one in device memory."""
        return getattr(self._reader, "read_path", None)

    @property
    def read_path_reason(self) -> str | None:
        """Why the last read took its path, in a sentence (whether ZSTD
        bodies were decompressed on the GPU among it); None for a reader of
        device memory."""
        return getattr(self._reader, "read_path_reason", None)

    @property
    def bytes_read(self) -> int | None:
        """Bytes read from the file so far (None for one in device memory)."""
        return getattr(self._reader, "bytes_read", None)

    def stats(self) -> dict[str, Any] | None:
        """Where the time of a path reader's reads went (opened with
        ``collect_stats=True``; the counts always): ``bytes_read``,
        ``batches``, ``staging_jobs``, ``dmas`` (host-to-device copies the
        staging jobs queued: neighbouring small bodies share one); seconds of the calling thread in
        ``metadata_seconds`` (message metadata read and parsed),
        ``allocate_seconds``, ``staging_seconds`` (in staging jobs, start to
        end), ``gds_seconds``, ``build_seconds`` (batches built and
        checked); seconds summed over the staging pipeline's threads in
        ``pread_seconds``, ``decompress_seconds`` and ``dma_wait_seconds``
        (waiting for a pinned slot's copy to the device); nvCOMP's
        decompression, waited for, in ``gpu_decompress_seconds``;
        ``scratch_decoded_bytes``, decompressed bytes that went through host
        scratch memory and were copied again (a large buffer written as one
        frame, as Arrow C++ writes it, or a part that straddles two staging
        chunks; 0 when every buffer was decoded straight into the pinned
        slots).  None for a reader of device memory."""
        get = getattr(self._reader, "stats", None)
        return None if get is None else dict(get())

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the batches keep the source alive."""


class RecordBatchStreamReader(_Reader):
    """Reads an IPC stream in device memory (:func:`open_stream`)."""

    _WHAT = "open_stream"
    _PATH_READER = _lib.IpcPathStreamReader
    _MEMORY_READER = _lib.IpcStreamReader

    @staticmethod
    def _names(path: str, ctx: Context) -> pa.Schema:
        # A stream starts with its schema: nothing else is read.
        return _schema_from(_lib.IpcPathStreamReader(path, ctx._ctx).schema_capsule())

    # A weak reference to a path's read-ahead in progress (iter_batches; its
    # loop holds it), or None.  Every other read stops it first: stopping
    # puts the reader back at the first batch the loop did not take.  A
    # loop dropped unfinished drops it, which stops it the same way.
    _ahead: Any = None

    def _reading_ahead(self) -> Any:
        return None if self._ahead is None else self._ahead()

    def _stop_reading_ahead(self) -> None:
        ahead, self._ahead = self._reading_ahead(), None
        if ahead is not None:
            ahead.close()

    def _next(self) -> Any:
        self._stop_reading_ahead()
        return self._reader.read_next_with_metadata()

    def read_next_batch(self) -> DeviceRecordBatch:
        """The next batch; StopIteration at the end of the stream."""
        got: Any = self._next()
        if got is None:
            raise StopIteration
        return _batch_from(self._schema, got[0])

    def __iter__(self) -> Iterator[DeviceRecordBatch]:
        return self.iter_batches()

    def iter_batches(self, *, readahead: int = 2, readahead_bytes: int = 64 << 20) -> Iterator[DeviceRecordBatch]:
        """The batches from here to the end of the stream.  From a path,
        read on a thread of their own ahead of the loop, so that reading
        the stream overlaps what the loop does with the batches before: up
        to `readahead` reads ahead of the batch in hand, each one staging
        job of consecutive batches whose bodies stay within
        `readahead_bytes` (the first read takes one batch; a dictionary
        batch ends a read).  About ``readahead * readahead_bytes`` of device
        memory is held ahead.  ``readahead=0`` reads each batch when it is
        asked for, on the calling thread.  Each batch is on the device when
        it is handed out.  A loop left early, or any other read of this
        reader, stops the reading ahead and puts the reader back at the
        first batch the loop did not take, so nothing is skipped:
        ``read_next_batch()`` after ``break`` gives the batch after the last
        one the loop had (the batches read ahead are read again).  A read
        that fails still yields the batches before the failing one, then
        raises its error.
        ``readahead < 0`` or ``readahead_bytes < 1`` raise ValueError.  In
        device memory every batch is already there: `readahead` and
        `readahead_bytes` are ignored."""
        if self._where is None:
            return self._each()
        self._stop_reading_ahead()
        ahead = _lib.IpcStreamReadahead(self._reader, readahead, readahead_bytes)
        self._ahead = weakref.ref(ahead)
        return self._read_ahead(ahead)

    def _each(self) -> Iterator[DeviceRecordBatch]:
        while True:
            got: Any = self._next()
            if got is None:
                return
            yield _batch_from(self._schema, got[0])

    def _read_ahead(self, ahead: Any) -> Iterator[DeviceRecordBatch]:
        try:
            while True:
                got = ahead.next()
                if got is None:
                    if self._reading_ahead() is not ahead:
                        # Another read of this reader stopped it (and put the
                        # reader back): go on from there, a batch at a time.
                        yield from self._each()
                    return
                yield _batch_from(self._schema, got)
        finally:
            if self._reading_ahead() is ahead:
                self._stop_reading_ahead()

    def read_next_batch_with_custom_metadata(self) -> Any:
        """(batch, custom_metadata) of the next batch (pyarrow's
        RecordBatchWithMetadata); StopIteration at the end of the stream."""
        got: Any = self._next()
        if got is None:
            raise StopIteration
        return _with_metadata(_batch_from(self._schema, got[0]), got[1])

    def iter_batches_with_custom_metadata(self) -> Iterator[Any]:
        while True:
            got: Any = self._next()
            if got is None:
                return
            yield _with_metadata(_batch_from(self._schema, got[0]), got[1])

    def read_all(self) -> DeviceTable:
        """The remaining batches as a DeviceTable (zero-copy; the batches
        between dictionaries validated together; from a path, read through
        staging jobs of many batches each)."""
        self._stop_reading_ahead()
        if hasattr(self._reader, "read_all"):
            return DeviceTable.from_batches(
                [_batch_from(self._schema, b) for b in self._reader.read_all()], self._schema
            )
        return DeviceTable.from_batches(list(self._each()), self._schema)

    def close(self) -> None:
        """Stops a loop's reading ahead (the reader is put back at the first
        batch the loop did not take)."""
        self._stop_reading_ahead()


class RecordBatchFileReader(_Reader):
    """Reads an IPC file (Feather v2, uncompressed) in device memory (:func:`open_file`)."""

    _WHAT = "open_file"
    _PATH_READER = _lib.IpcPathFileReader
    _MEMORY_READER = _lib.IpcFileReader

    @staticmethod
    def _names(path: str, ctx: Context) -> pa.Schema:
        # The footer alone (no column, so no dictionary, is read) names the fields.
        return _schema_from(_lib.IpcPathFileReader(path, ctx._ctx, []).footer_schema_capsule())

    @property
    def num_record_batches(self) -> int:
        return int(self._reader.num_record_batches)

    def get_batch(self, i: int) -> DeviceRecordBatch:
        """Batch `i`; outside ``0 <= i < num_record_batches`` (negative
        too, as in pyarrow) a ValueError, "Batch number i out of range"."""
        return _batch_from(self._schema, self._reader.read_batch(i))

    get_record_batch = get_batch

    def get_batch_with_custom_metadata(self, i: int) -> Any:
        """(batch, custom_metadata) of batch `i` (pyarrow's RecordBatchWithMetadata)."""
        capsule, pairs = self._reader.read_batch_with_metadata(i)
        return _with_metadata(_batch_from(self._schema, capsule), pairs)

    @property
    def metadata(self) -> pa.KeyValueMetadata | None:
        """The footer's custom metadata (new_file(metadata=...)), or None."""
        pairs = self._reader.footer_metadata
        return pa.KeyValueMetadata(pairs) if pairs else None

    def __iter__(self) -> Iterator[DeviceRecordBatch]:
        return self.iter_batches()

    def iter_batches(
        self, indices: Any = None, *, readahead: int = 2, readahead_bytes: int = 64 << 20
    ) -> Iterator[DeviceRecordBatch]:
        """The batches `indices` names (default: every batch, in order).
        From a path, read on a thread of their own ahead of the loop, so
        that reading the file overlaps what the loop does with the batches
        before: up to `readahead` reads ahead of the batch in hand, each one
        staging job of consecutive batches whose bodies stay within
        `readahead_bytes` (the first read takes one batch, so the first
        batch comes at once).  About ``readahead * readahead_bytes`` of
        device memory is held ahead.  ``readahead=0`` reads each batch when
        it is asked for, on the calling thread.  Each batch is on the device
        when it is handed out (nothing to wait for).  A read that fails
        still yields the batches before the failing one, then raises its
        error.  From a path, an index outside the file, ``readahead < 0``
        or ``readahead_bytes < 1`` raise ValueError before anything is
        read.  In device memory every batch is already there: `readahead`
        and `readahead_bytes` are ignored, and a bad index raises when the
        loop reaches it."""
        order = list(range(self.num_record_batches)) if indices is None else [int(i) for i in indices]
        if not hasattr(self._reader, "read_batches"):
            return (self.get_batch(i) for i in order)
        return self._read_ahead(_lib.IpcBatchReadahead(self._reader, order, readahead, readahead_bytes))

    def _read_ahead(self, ahead: Any) -> Iterator[DeviceRecordBatch]:
        try:
            while True:
                got = ahead.next()
                if got is None:
                    return
                yield _batch_from(self._schema, got)
        finally:
            # A loop left early: stop reading and free what was read ahead now.
            ahead.close()

    def _read_batches(self, indices: list[int]) -> list[DeviceRecordBatch]:
        """The batches `indices` names; from a path, through one staging job
        (every body read at once by the pipeline's threads)."""
        if hasattr(self._reader, "read_batches"):
            return [_batch_from(self._schema, c) for c in self._reader.read_batches(indices)]
        return [self.get_batch(i) for i in indices]

    def read_all(self) -> DeviceTable:
        if not hasattr(self._reader, "read_batches") and hasattr(self._reader, "read_all"):
            # In device memory: every batch validated together (one read of their offsets).
            return DeviceTable.from_batches(
                [_batch_from(self._schema, b) for b in self._reader.read_all()], self._schema
            )
        return DeviceTable.from_batches(self._read_batches(list(range(self.num_record_batches))), self._schema)


def _included_fields(options: Any) -> list[int] | None:
    """The columns pyarrow.ipc.IpcReadOptions selects (included_fields), or None."""
    if options is None:
        return None
    if not isinstance(options, pa.ipc.IpcReadOptions):
        raise TypeError(f"options must be a pyarrow.ipc.IpcReadOptions, not {_type_name(options)}")
    return list(options.included_fields) or None


def open_stream(
    source: Any,
    *,
    options: Any = None,
    memory_pool: Any = None,
    context: Any = None,
    collect_stats: bool = False,
    gpu_decompression: bool = False,
    body_group_bytes: int | None = None,
    read_path: str = "auto",
) -> RecordBatchStreamReader:
    """A reader of the IPC stream in `source`: a CudaBuffer or a
    cuda.BufferReader from its position (batches are DeviceRecordBatches
    over the device bytes), or a path (str or os.PathLike: the file is read
    straight into device memory of `context`, default device 0, through
    pinned staging buffers; compressed streams included).
    `options.included_fields` (pyarrow.ipc.IpcReadOptions) selects the
    columns of a stream read by path (only their bytes are read);
    `memory_pool` is pyarrow's and unused.  `collect_stats`: time the
    phases of a path's reads (``reader.stats()``).  `gpu_decompression`:
    decompress the ZSTD bodies of a path on the GPU with nvCOMP when it is
    installed (:func:`nvcomp_status`; ``pip install
    nvidia-libnvcomp-cu13``), else on the host.  Only for files you trust:
    nvCOMP does not promise a clean error for corrupt data, and a GPU fault
    ends the process's use of the device (``reader.read_path_reason`` says
    what ran).  `body_group_bytes`: the batch bodies one call reads (by
    path) share device allocations of up to this many bytes, so that
    neighbouring small bodies move in one DMA; a shared allocation is freed
    when every batch over it is gone; 0 gives every batch its own; None:
    32 MiB (``CUARROW_BODY_GROUP_BYTES`` to change).  `read_path`, for a
    path: "auto" (GPUDirect Storage where cuFile reads directly:
    :func:`gds_status`; else the staging pipeline), "staging" (libcufile
    is not even loaded) or "gds" (cuFile, or an error saying why it cannot:
    compatibility mode needs ``CUARROW_GDS=on``); ``reader.read_path`` says
    which ran."""
    return RecordBatchStreamReader(
        source,
        columns=_included_fields(options),
        context=context,
        collect_stats=collect_stats,
        gpu_decompression=gpu_decompression,
        body_group_bytes=body_group_bytes,
        read_path=read_path,
    )


def open_file(
    source: Any,
    footer_offset: Any = None,
    *,
    options: Any = None,
    memory_pool: Any = None,
    context: Any = None,
    collect_stats: bool = False,
    gpu_decompression: bool = False,
    body_group_bytes: int | None = None,
    read_path: str = "auto",
) -> RecordBatchFileReader:
    """A reader of the IPC file (Feather v2) in `source`: a CudaBuffer or
    cuda.BufferReader, or a path (read straight into device memory of
    `context`; `get_batch(i)` reads only batch i's bytes, compressed files
    included); arguments as open_stream's (`footer_offset` must be None:
    the file ends where the source ends)."""
    if footer_offset is not None:
        raise NotImplementedError("cuarrow.ipc.open_file: footer_offset is not supported (slice the buffer instead)")
    return RecordBatchFileReader(
        source,
        columns=_included_fields(options),
        context=context,
        collect_stats=collect_stats,
        gpu_decompression=gpu_decompression,
        body_group_bytes=body_group_bytes,
        read_path=read_path,
    )


def read_feather(
    source: Any,
    columns: Any = None,
    *,
    context: Any = None,
    progress: Any = None,
    stats: dict | None = None,
    gpu_decompression: bool = False,
    body_group_bytes: int | None = None,
    read_path: str = "auto",
) -> DeviceTable:
    """The Arrow IPC file (Feather v2) at path `source` as a DeviceTable in
    device memory of `context` (default device 0), read straight to the GPU
    (pyarrow.feather.read_table's shape; compressed files included).
    `columns`: names or positions of the columns to read (only their bytes
    are read from the file).  `progress`: None or False (default) for none,
    True for a progress bar on stderr (tqdm when installed), or a callable
    ``progress(batches_done, batches_total, bytes_read)`` called after each
    group of batches.  Every batch is read through one staging job (the
    pipeline's threads read many batches at once); with `progress`, through
    about 16 jobs, one per report.  `stats`: a dict to fill with where
    the read's time went (the phases timed; keys as
    ``RecordBatchFileReader.stats()``).  `gpu_decompression`: ZSTD bodies
    decompressed on the GPU by nvCOMP, for files you trust, and
    `body_group_bytes` (shared body allocations): see :func:`open_stream`.
    An IPC stream: ``open_stream(path).read_all()``."""
    if not _is_path(source):
        raise TypeError(f"read_feather reads a path (str or os.PathLike), got {_type_name(source)}")
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be None or a dict to fill, not {_type_name(stats)}")
    reader = RecordBatchFileReader(
        source,
        columns=columns,
        context=context,
        collect_stats=stats is not None,
        gpu_decompression=gpu_decompression,
        body_group_bytes=body_group_bytes,
        read_path=read_path,
    )
    n = reader.num_record_batches
    report = _progress(progress, n, os.fspath(source))
    group = n if progress is None or progress is False else max(1, -(-n // 16))
    batches: list[DeviceRecordBatch] = []
    for start in range(0, n, max(group, 1)):
        batches.extend(reader._read_batches(list(range(start, min(n, start + group)))))
        report(len(batches), reader.bytes_read or 0)
    report(None, reader.bytes_read or 0)
    if stats is not None:
        stats.update(reader.stats() or {})
    # The reader's own batches: of its schema, on its device (what
    # from_batches would check batch by batch, a binding call each).
    return DeviceTable._make(batches, reader.schema, reader._where or (_CUDA, 0))


def gds_status() -> dict[str, Any]:
    """Whether readers by path can use GPUDirect Storage (``read_path=
    "auto"`` uses it when ``available``): the ``mode`` (CUARROW_GDS: off,
    auto, on), whether libcufile is ``loaded`` and ``usable`` (its driver
    opened), ``compat_mode`` (cuFile copying through host memory itself,
    used only with CUARROW_GDS=on), ``available``, the ``library`` and, in a
    sentence, the ``reason``.  Loads libcufile on first call; computed once
    a process."""
    return dict(_lib.gds_status())


def nvcomp_status() -> dict[str, Any]:
    """Whether readers asked for ``gpu_decompression`` get it: nvCOMP's
    ``mode`` (CUARROW_NVCOMP), ``available``, ``version``, ``library`` and,
    in a sentence, the ``reason``.  Loads libnvcomp on first call
    (CUARROW_NVCOMP_LIBRARY when set, else the nvidia-libnvcomp-cu13 wheel's
    when it is installed, else the loader's libnvcomp.so.6; not on the
    driver's emulation unless the variable names one); computed once a
    process."""
    _nvcomp_wheel_default()
    return dict(_lib.nvcomp_status())


@functools.cache
def _nvcomp_wheel_default() -> None:
    """Offer the core the nvidia-libnvcomp-cu13 wheel's libnvcomp.so.6 when
    that wheel is installed (set_nvcomp_default_library: used where
    CUARROW_NVCOMP_LIBRARY is not set, never on the driver's emulation, and
    not inherited by child processes, as a variable would be): looked for
    once a process, not at each reader opened."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.libnvcomp")
    except (ImportError, ValueError):
        return
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        candidate = os.path.join(root, "lib64", "libnvcomp.so.6")
        if os.path.isfile(candidate):
            _lib.set_nvcomp_default_library(candidate)
            return


def _progress(progress: Any, total: int | None, what: str) -> Callable[[int | None, int], None]:
    """A function called after each batch (and with None at the end)."""
    if progress is None or progress is False:
        return lambda done, nbytes: None
    if callable(progress):

        def call(done: int | None, nbytes: int) -> None:
            if done is not None:
                progress(done, total, nbytes)

        return call
    if progress is not True:
        raise TypeError(f"progress must be None, a bool or a callable, not {_type_name(progress)}")
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=total, unit="batch", desc=os.path.basename(what), file=sys.stderr)

        def tick(done: int | None, nbytes: int) -> None:
            if done is None:
                bar.close()
            else:
                bar.update(1)
                bar.set_postfix_str(f"{nbytes / 1e9:.2f} GB")

        return tick

    def line(done: int | None, nbytes: int) -> None:
        shown = "done" if done is None else f"{done}/{total if total is not None else '?'} batches"
        print(
            f"\r{os.path.basename(what)}: {shown}, {nbytes / 1e9:.2f} GB",
            end="\n" if done is None else "",
            file=sys.stderr,
            flush=True,
        )

    return line


# ---- writers -------------------------------------------------------------------------


class _Writer:
    _file = False

    def __init__(
        self,
        sink: Any,
        schema: Any,
        *,
        options: Any = None,
        metadata: Any = None,
        compression_level: Any = None,
        _cuda_malloc: bool = False,
    ) -> None:
        if not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, not {_type_name(schema)}")
        codec = _codec_of(options)
        self._schema = schema
        self._non_nullable = _non_nullable(schema)
        self._result: CudaBuffer | None = None
        self._closed = False
        if _is_path(sink):
            # Batches go to the file as they are written (device bodies through
            # pinned staging memory); pyarrow batches are moved to device 0 first.
            self._ctx: Context | None = None
            self._path: str | None = os.fspath(sink)
            self._writer: Any = _lib.IpcPathWriter(
                self._path, schema.__arrow_c_schema__(), self._file, _pairs(metadata), None, codec, compression_level
            )
            return
        if not isinstance(sink, Context):
            raise TypeError(
                "cuarrow.ipc writers write into device memory of a cuarrow.cuda.Context (close() gives the "
                f"CudaBuffer) or to a path (str or os.PathLike), got {_type_name(sink)}"
            )
        if codec is not None:
            raise NotImplementedError(
                "cuarrow.ipc writes compressed IPC to a path only (a stream in device memory is uncompressed)"
            )
        self._ctx = sink
        self._path = None
        # _cuda_malloc (cuarrow's own use: Dask's cuda frames): the result in
        # cuMemAlloc memory, which UCX moves with cuda_ipc.
        self._writer = _lib.IpcWriter(
            _encoded_schema(schema), sink._ctx, self._file, _pairs(metadata), cuda_malloc=_cuda_malloc
        )

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def _check_open(self) -> None:
        if self._closed:
            raise pa.ArrowInvalid("the IPC writer is closed")

    @property
    def bytes_written(self) -> int | None:
        """Bytes written to the path so far (None for a writer into device memory)."""
        return int(self._writer.bytes_written) if self._path is not None else None

    def stats(self) -> dict[str, Any]:
        """Where the writer's time went so far, on the calling thread
        (always collected): ``batches``, ``messages`` (schema, dictionary
        and record batches) and ``body_pieces`` (byte ranges of buffers the
        bodies take); seconds in ``layout_seconds`` (bodies laid out, with
        the reads of device memory that Arrow's rules for sliced data
        need), ``compress_seconds`` (of which ``compress_copy_seconds``
        before compressing: the bodies copied to host memory),
        ``metadata_seconds`` (message metadata
        encoded); for a writer into device memory, ``allocate_seconds``,
        ``queue_seconds`` (copies planned and queued) and ``wait_seconds``
        (waiting for them), in ``close()`` or, where the writer copies as
        it writes, in the writes too (a write queues its copies without
        waiting; ``close()``, or the next write, then reads the offsets it
        took as given), and ``early_messages`` (messages
        whose copies were queued when they were written, not at
        ``close()``: uncompressed batches without dictionaries, where the
        gather kernel runs; see docs/ipc-format.md); for one to a path,
        ``file_write_seconds`` (bytes into the file, the device-to-host
        copies of the bodies included)."""
        return dict(self._writer.stats())

    def write_batch(self, batch: Any, custom_metadata: Any = None) -> None:
        """Add a record batch (device, or pyarrow moved to the writer's
        device), with the custom metadata of its message.  A device batch's
        memory must not change until ``close()``: the writer may copy it
        as late as then."""
        self._check_open()
        device = _device_batch(batch, self._ctx, "write_batch")
        self._writer.write(_batch_data(device, self._schema, self._non_nullable), _pairs(custom_metadata))

    def write_table(self, table: Any, max_chunksize: int | None = None) -> None:
        """Add a table's batches (a DeviceTable, or a pyarrow Table moved to the writer's device)."""
        self._check_open()
        if isinstance(table, pa.Table):
            table = to_device(table, self._ctx)
        if not isinstance(table, DeviceTable):
            raise TypeError(
                f"write_table: expected a pyarrow.Table or cuarrow.cuda.DeviceTable, got {_type_name(table)}"
            )
        batches = []
        for b in table.to_batches():
            if max_chunksize is None or max_chunksize <= 0:
                batches.append(b)
            else:
                batches.extend(b.slice(start, max_chunksize) for start in range(0, max(len(b), 1), max_chunksize))
        self._write_batches(batches)

    def _write_batches(self, batches: list[Any]) -> None:
        """Every batch, in order, in ONE call: the C++ writer lays all the
        messages out together (their offsets read from the device in one
        round trip); to a path, every body then moves in one staging job,
        its workers writing the file in parallel."""
        self._check_open()
        schema, non_nullable = self._schema, self._non_nullable
        data = [_batch_data(_device_batch(b, self._ctx, "write_table"), schema, non_nullable) for b in batches]
        self._writer.write_batches(data)

    def write(self, table_or_batch: Any) -> None:
        """write_batch for batches, write_table for tables."""
        if isinstance(table_or_batch, (pa.RecordBatch, DeviceRecordBatch)):
            self.write_batch(table_or_batch)
        else:
            self.write_table(table_or_batch)

    def close(self) -> CudaBuffer | None:
        """Finish the stream or file: in device memory, returns it (also
        ``getvalue()``); at a path, writes its end and closes the file
        (returns None, as pyarrow's writers do)."""
        if self._path is not None:
            if not self._closed:
                self._writer.close()
                self._closed = True
            return None
        if self._result is None:
            self._result = CudaBuffer._wrap(self._writer.finish())
            self._closed = True
        return self._result

    def getvalue(self) -> CudaBuffer:
        if self._path is not None:
            raise TypeError(f"getvalue(): this writer writes to {self._path!r}, not to device memory")
        out = self.close()
        assert out is not None
        return out

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        # On an exception a writer of a path is dropped unclosed, which
        # removes its file (an IPC stream without its end is not one).
        if exc[0] is None:
            self.close()


class RecordBatchStreamWriter(_Writer):
    """Writes an IPC stream into device memory (:func:`new_stream`)."""


class RecordBatchFileWriter(_Writer):
    """Writes an IPC file into device memory (:func:`new_file`)."""

    _file = True


def _codec_of(options: Any) -> str | None:
    """The codec pyarrow.ipc.IpcWriteOptions(compression=...) asks for, or None."""
    if options is None:
        return None
    if not isinstance(options, pa.ipc.IpcWriteOptions):
        raise TypeError(f"options must be a pyarrow.ipc.IpcWriteOptions, not {_type_name(options)}")
    codec = options.compression
    return None if codec is None or codec == "uncompressed" else str(codec)


def new_stream(sink: Any, schema: Any, *, options: Any = None) -> RecordBatchStreamWriter:
    """A writer of an IPC stream into device memory of `sink` (a Context),
    or to the file at path `sink` (`options`: pyarrow.ipc.IpcWriteOptions,
    whose compression "lz4" / "zstd" is written to paths)."""
    return RecordBatchStreamWriter(sink, schema, options=options)


def new_file(sink: Any, schema: Any, *, options: Any = None, metadata: Any = None) -> RecordBatchFileWriter:
    """A writer of an IPC file (Feather v2) into device memory of `sink` (a
    Context) or to the file at path `sink`; `metadata` goes into the
    footer; `options` as new_stream's."""
    return RecordBatchFileWriter(sink, schema, options=options, metadata=metadata)


# write_feather with progress: the batches go in groups of about this many
# bytes, one writer call each (a report after each).
_PROGRESS_GROUP_BYTES = 1 << 30


def write_feather(
    table: Any,
    dest: Any,
    compression: str | None = None,
    compression_level: int | None = None,
    chunksize: int | None = None,
    version: int = 2,
    *,
    progress: Any = None,
    stats: dict | None = None,
) -> None:
    """Writes a DeviceTable (or DeviceRecordBatch; a pyarrow Table is moved
    to device 0 first) to the Feather v2 file (Arrow IPC file) at path
    `dest`, straight from device memory: pyarrow.feather.write_feather's
    shape.  `compression`: "lz4" (what pyarrow writes by default, so also
    None), "zstd" or "uncompressed"; `compression_level` the codec's level;
    `chunksize` the most rows a record batch holds (default: the table's
    own batches); `progress` as read_feather's; `stats`: a dict to fill
    with where the write's time went (keys as
    ``RecordBatchFileWriter.stats()``)."""
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be None or a dict to fill, not {_type_name(stats)}")
    if version != 2:
        raise ValueError("cuarrow writes Feather version 2 (the Arrow IPC file format) only")
    if not _is_path(dest):
        raise TypeError(f"write_feather writes to a path (str or os.PathLike), got {_type_name(dest)}")
    if isinstance(table, pa.Table):
        table = to_device(table)
    if isinstance(table, DeviceRecordBatch):
        table = DeviceTable.from_batches([table])
    if not isinstance(table, DeviceTable):
        raise TypeError(f"write_feather: expected a DeviceTable or DeviceRecordBatch, got {_type_name(table)}")
    codec = "lz4" if compression is None else compression
    if codec not in ("lz4", "zstd", "uncompressed"):
        raise ValueError(f'compression must be "lz4", "zstd", "uncompressed" or None, not {compression!r}')
    options = pa.ipc.IpcWriteOptions(compression=None if codec == "uncompressed" else codec)
    batches = []
    for b in table.to_batches():
        if chunksize is None or chunksize <= 0 or len(b) <= chunksize:
            batches.append(b)
        else:
            batches.extend(b.slice(start, chunksize) for start in range(0, len(b), chunksize))
    report = _progress(progress, len(batches), os.fspath(dest))
    writer = RecordBatchFileWriter(dest, table.schema, options=options, compression_level=compression_level)
    if progress is None or progress is False:
        # Every batch in one call: one staging job for all the bodies.
        writer._write_batches(batches)
    else:
        # Progress is reported per group of batches (about 1 GiB each), each
        # group written in one call.
        group: list[Any] = []
        group_bytes = 0
        done = 0
        for b in batches:
            group.append(b)
            group_bytes += b.nbytes
            if group_bytes >= _PROGRESS_GROUP_BYTES:
                writer._write_batches(group)
                done += len(group)
                report(done, writer.bytes_written or 0)
                group, group_bytes = [], 0
        if group:
            writer._write_batches(group)
            done += len(group)
            report(done, writer.bytes_written or 0)
    writer.close()
    report(None, writer.bytes_written or 0)
    if stats is not None:
        stats.update(writer.stats())
