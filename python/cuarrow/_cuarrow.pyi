"""
Bindings of the cuarrow C++ library (use cuarrow.cuda, the pyarrow.cuda-compatible API).
"""

from collections.abc import Sequence


def _set_error_types(cuda_error: object, out_of_memory: object, driver_error: object, invalid: object) -> None:
    """
    Install the Python exception classes C++ errors are translated to (called once by cuarrow.cuda).
    """

def select_driver(path_or_emulated: str) -> None:
    """
    Choose the driver library before first use: a path, "emulated", or "" for libcuda.so.1.
    """

def load_driver() -> None:
    """Load the CUDA driver now (normally done on first use)."""

def driver_is_emulated() -> bool:
    """True once a driver is loaded and it is cuarrow's host emulation."""

def driver_version() -> int:
    """The loaded driver's CUDA version as CUDA encodes it (13000 = 13.0)."""

def driver_path() -> str:
    """The path the driver was loaded from."""

def probe_real_driver() -> tuple[int, str]:
    """
    (number of devices, why none) of the real CUDA driver (libcuda.so.1), asked apart from cuarrow's own driver choice, which stays open.
    """

def device_count() -> int:
    """Number of CUDA devices (loads the driver)."""

def get_device_properties(ordinal: int) -> dict:
    """Properties of device `ordinal` as a dict."""

def pinned_pool_stats() -> dict:
    """
    Bytes the pinned result pool holds (cached and in use) and has handed out.
    """

def gds_status() -> dict:
    """
    Whether file readers use GPUDirect Storage (cuFile), and why not: the core's gds_status() as a dict (loads libcufile unless CUARROW_GDS=off).
    """

def nvcomp_status() -> dict:
    """
    Whether file readers can decompress ZSTD on the GPU (nvCOMP), and why not: the core's nvcomp_status() as a dict (loads libnvcomp unless CUARROW_NVCOMP=off).
    """

def trim_pinned_pool() -> None:
    """Unpin and free the pool's cached blocks."""

def get_transfer_options() -> dict:
    """The transfer options in force."""

def set_transfer_options(**kwargs) -> None:
    """
    Change the transfer options for later copies (every field of get_transfer_options, by name).
    """

class Context:
    """A CUDA context (a device's primary context unless wrapped)."""

    @staticmethod
    def get(device_number: int = 0) -> Context:
        """The primary context of a device."""

    @staticmethod
    def wrap(handle: int) -> Context:
        """
        Adopt a CUcontext created elsewhere (the same as get(n) for a primary context).
        """

    @property
    def device_number(self) -> int: ...

    @property
    def handle(self) -> int: ...

    @property
    def is_primary(self) -> bool: ...

    @property
    def bytes_allocated(self) -> int: ...

    def transfer_stats(self) -> dict:
        """
        Bytes (and, for synchronous copies, seconds) moved by copies issued in this context.
        """

    def reset_transfer_stats(self) -> None: ...

    @property
    def properties(self) -> dict: ...

    def synchronize(self) -> None: ...

    def free_memory(self) -> int: ...

    def get_device_address(self, address: int) -> int: ...

    def memory_resource_name(self) -> str: ...

    def memory_pool_stats(self) -> tuple[int, int] | None:
        """
        (used bytes, reserved bytes) of the context's memory resource when it is a pool, else None.
        """

    def trim_memory_pool(self, keep_bytes: int) -> None: ...

    def __eq__(self, arg: Context, /) -> bool: ...

    def __hash__(self) -> int: ...

class Stream:
    """An owning CUDA stream on one context."""

    def __init__(self, context: Context, non_blocking: bool = True) -> None: ...

    @property
    def handle(self) -> int: ...

    @property
    def raw_context(self) -> Context: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool: ...

    def wait(self, event: Event) -> None: ...

class Event:
    """An owning CUDA event on one context."""

    def __init__(self, context: Context, timing: bool = False) -> None: ...

    @property
    def handle(self) -> int: ...

    @property
    def raw_context(self) -> Context: ...

    def record(self, stream: object | None = None) -> None:
        """
        Capture the work queued so far on `stream` (default: the legacy default stream).
        """

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...

    def elapsed_ms_since(self, start: Event) -> float: ...

def check_stream(stream: object | None) -> None:
    """
    Raise the TypeError a stream argument that names no stream gets (for callers that refuse it before any work).
    """

def stream_wait_for_default(context: Context, stream: object) -> None:
    """
    Make a stream wait for the work queued so far on the legacy default stream of a context.
    """

class Buffer:
    """
    A handle to memory that knows where it lives (cuarrow::buffer).  Exports the buffer protocol only when made for host memory.
    """

    def __init__(self, other: Buffer, host_view: bool = False) -> None:
        """
        Another handle to the same memory (host_view: export the buffer protocol, host memory only).
        """

    @property
    def address(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def raw_device_type(self) -> int: ...

    @property
    def device_id(self) -> int: ...

    @property
    def is_mutable(self) -> bool: ...

    @property
    def raw_context(self) -> Context | None: ...

    def describe(self) -> str:
        """Where and what the memory is; never reads it."""

    def raw_slice(self, offset: int, length: int, host_view: bool = False) -> Buffer:
        """A zero-copy slice [offset, offset + length); out_of_range checked."""

def allocate_device(context: Context, size: int, stream: object | None = None, plain: bool = False) -> Buffer:
    """
    Device memory (uninitialized) from the context's memory resource, or, with plain=True, from cuMemAlloc (plain_device_resource): memory CUDA IPC can export, which pool memory is not.
    """

def buffer_from_host(context: Context, src: object) -> Buffer:
    """
    A new device buffer holding a copy of a whole host object (buffer protocol, contiguous); synchronous. One call for buffer_from_data's common case: what a small copy costs is mostly calls.
    """

def copy_into_host(dst: object, src: Buffer) -> None:
    """
    Copy as much of a buffer as fits into writable host memory (buffer protocol, contiguous); synchronous. One call for copy_to_host(buf=...)'s common case.
    """

def allocate_pinned(context: Context, size: int) -> Buffer:
    """Pinned (page-locked) host memory, mapped for the device."""

def wrap_device(context: Context, address: int, size: int, owner: object | None, is_mutable: bool = True) -> Buffer:
    """
    A view of memory someone else owns; `owner` is kept alive while the view (or any slice) lives.
    """

def read_count(size: int, position: int, nbytes: int, dst_size: int = -1) -> int:
    """Bytes CudaBuffer.copy_to_host copies (cuarrow::ranges::read_count)."""

def write_count(size: int, position: int, nbytes: int, src_size: int, src_is_host: bool) -> int:
    """
    Bytes copy_from_host / copy_from_device copy (cuarrow::ranges::write_count).
    """

def source_count(src_size: int, offset: int, size: int) -> int:
    """Bytes Context.buffer_from_data takes (cuarrow::ranges::source_count)."""

def slice_length(size: int, offset: int, length: int | None) -> int:
    """The length of CudaBuffer.slice (cuarrow::ranges::slice_length)."""

def copy(dst: Buffer, dst_offset: int, src: Buffer, src_offset: int, size: int, stream: object | None = None) -> None:
    """
    Copy between any two buffers, queued on the stream, which is synchronized before returning.
    """

def copy_from_host(dst: Buffer, dst_offset: int, src: object, src_offset: int, size: int, stream: object | None = None) -> None:
    """
    Copy `size` bytes of a host object (buffer protocol) into a buffer; synchronous.
    """

def copy_to_host(dst: object, dst_offset: int, src: Buffer, src_offset: int, size: int, stream: object | None = None) -> None:
    """
    Copy `size` bytes of a buffer into a writable host object; synchronous.
    """

def copy_to_new_host(src: Buffer, src_offset: int, size: int, stream: object | None = None) -> Buffer:
    """
    A new host buffer (exposing the buffer protocol) holding `size` bytes of `src` from `src_offset`: pinned memory from cuarrow's result pool when there is room, so the DMA writes at the link's speed; synchronous.
    """

def fill(dst: Buffer, offset: int, size: int, value: int, stream: object | None = None) -> None:
    """Set bytes to a value; synchronous."""

def to_dlpack_typed(buffer: Buffer, byte_offset: int, code: int, bits: int, shape: Sequence[int], versioned: bool = True, copied: bool = False) -> object:
    """
    A DLPack capsule of a typed, compact row-major tensor over part of a buffer; keeps the memory alive.
    """

def dlpack_info(capsule: object) -> dict:
    """
    The checked description of an unconsumed DLPack capsule (cuarrow::read_dlpack): dtype, shape, strides in bytes, device, data (byte_offset applied), C contiguity.
    """

def read_cai(desc: object) -> dict:
    """
    The checked description of a __cuda_array_interface__ dict (cuarrow::read_cuda_array_interface); a mask is refused; device None (a CAI does not say).
    """

def from_cai(desc: object, context: Context | None, owner: object | None, stream: object | None = None) -> Buffer:
    """
    A view of the contiguous bytes a __cuda_array_interface__ dict describes, keeping `owner` alive (cuarrow::wrap_cuda_array_interface): in `context`, or None for the device the memory is on; `stream` waits for the CAI's stream (None: the host waits for it).
    """

def from_dlpack(capsule: object, context: Context) -> Buffer:
    """
    A view of the contiguous bytes of a DLPack tensor in CUDA memory; takes ownership of the capsule.
    """

class ArrayData:
    """
    An Arrow array (cuarrow::arrow::array_data) with its field and declared placement.
    """

    @property
    def length(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def raw_null_count(self) -> int:
        """The null count as stored: -1 when unknown."""

    @property
    def placement(self) -> tuple[int, int]:
        """
        (device type code, device id) of the memory; the declared placement for an array without buffers.
        """

    @property
    def raw_context(self) -> Context | None:
        """
        The context of the memory (cuarrow::arrow::context_of); None for host memory.
        """

    @property
    def has_validity_buffer(self) -> bool: ...

    def buffers(self) -> list[Buffer]:
        """
        This node's buffers in layout order (view types: validity, views, then the data buffers); absent buffers are empty.
        """

    def children(self) -> list[ArrayData]:
        """
        The child arrays as stored (their own offsets; a struct's offset is not applied).
        """

    def dictionary(self) -> ArrayData | None:
        """The dictionary of a dictionary array; None otherwise."""

    def indices(self) -> ArrayData:
        """
        The indices of a dictionary array, as an integer array over the same buffers.
        """

    def slice(self, offset: int, length: int) -> ArrayData:
        """A zero-copy slice (out_of_range checked)."""

    def without_validity(self) -> ArrayData:
        """
        The same array over the same buffers with the validity bitmap dropped (null slots show whatever values they hold).
        """

    def null_count(self, stream: object | None = None) -> int:
        """
        The number of nulls; when unknown, counted from the validity bitmap (a device bitmap is copied to the host for that, once per call).
        """

    def with_null_count(self, null_count: int) -> ArrayData: ...

    def with_field(self, schema_capsule: object) -> ArrayData:
        """
        The same array under another field of the same physical type (another name, nullability or extension metadata); invalid_argument otherwise.
        """

    def schema_capsule(self) -> object:
        """
        An "arrow_schema" capsule of the array's field (type, name, nullability, metadata).
        """

    def validate(self, full: bool = False, stream: object | None = None) -> None:
        """
        cuarrow::arrow::validate: cheaply (structure and sizes), or `full` (every value).
        """

class BatchData:
    """
    A record batch (cuarrow::arrow::record_batch) with its declared placement.
    """

    @property
    def num_rows(self) -> int: ...

    @property
    def num_columns(self) -> int: ...

    @property
    def placement(self) -> tuple[int, int]: ...

    @property
    def raw_context(self) -> Context | None: ...

    def columns(self) -> list[ArrayData]: ...

    def slice(self, offset: int, length: int) -> BatchData: ...

    def with_schema(self, schema_capsule: object) -> BatchData:
        """
        The same batch under another schema whose fields have the columns' physical types.
        """

    def schema_capsule(self) -> object:
        """
        An "arrow_schema" capsule of the batch's schema (a struct, with the schema's metadata).
        """

def import_array(schema_capsule: object, array_capsule: object) -> ArrayData:
    """
    Import a host array from "arrow_schema" and "arrow_array" capsules (the array is moved out of its capsule; the schema is read and left to its capsule).
    """

def import_batch(schema_capsule: object, array_capsule: object) -> BatchData:
    """
    Import a host record batch (a struct array without nulls) from capsules.
    """

def schema_capsule_format(schema_capsule: object) -> str:
    """The format string of an unconsumed schema capsule ("+s" for a struct)."""

def device_array_placement(device_array_capsule: object) -> tuple[int, int]:
    """
    (ARROW_DEVICE_* code, device id) of an unconsumed device array capsule.
    """

def import_device_array(schema_capsule: object, device_array_capsule: object, stream: object | None = None) -> ArrayData:
    """
    Import a device array; `stream` waits for its sync event and orders the reads of its offsets.
    """

def import_device_batch(schema_capsule: object, device_array_capsule: object, stream: object | None = None) -> BatchData:
    """Import a device record batch."""

def read_stream(capsule: object, mode: int = 0) -> tuple:
    """
    Read a host stream ("arrow_array_stream") to its end: (is_batches, schema capsule, [ArrayData or BatchData]).  mode 0 decides by the schema (struct: batches), 1 arrays, 2 batches.
    """

def read_device_stream(capsule: object, mode: int = 0, stream: object | None = None) -> tuple:
    """
    Read a device stream to its end: (is_batches, schema capsule, [ArrayData or BatchData], device type).
    """

def make_array(schema_capsule: object, length: int, null_count: int, offset: int, buffers: Sequence[Buffer | None], children: Sequence[ArrayData], dictionary: ArrayData | None, device_type: int, device_id: int, stream: object | None = None) -> ArrayData:
    """
    cuarrow::arrow::make_array over buffers (None: absent), children and a dictionary, validated cheaply.  The placement is declared for an array without buffers.
    """

def batch_from_arrays(schema_capsule: object, columns: Sequence[ArrayData], device_type: int, device_id: int, stream: object | None = None) -> BatchData:
    """
    cuarrow::arrow::make_record_batch: a batch of the schema over the columns, checked before it is returned.
    """

def arrays_to_device(arrays: object, context: Context, stream: object | None = None) -> list[ArrayData]:
    """
    Copies of the arrays on the context's device: one batched copy on `stream` for all of them, which is synchronized once at the end.
    """

def batches_to_device(batches: object, context: Context, stream: object | None = None) -> list[BatchData]:
    """Record batches on the context's device, as arrays_to_device."""

class HostTransfer:
    """Host copies in flight: wait() before reading the data."""

    def wait(self) -> None:
        """Waits for the copies (once; later calls return at once)."""

def batches_to_host_begin(batches: object, stream: object | None = None) -> tuple:
    """
    (HostTransfer, ["arrow_array" capsule]) for record batches (of one device) copied to host memory in one batched copy: the capsules describe the host data, whose bytes are valid after HostTransfer.wait().  Types pyarrow's importer reads (binary and string offsets, ...) have been waited for already.
    """

def arrays_to_host_begin(arrays: object, stream: object | None = None) -> tuple:
    """
    (HostTransfer, ["arrow_array" capsule]) for arrays (of one device) copied to host memory in one batched copy: the capsules describe the host data, whose bytes are valid after HostTransfer.wait() (already, for types pyarrow's importer reads).
    """

def capsule_address(capsule: object) -> int:
    """
    The address of the unreleased ArrowArray in an "arrow_array" capsule (for pyarrow's _import_from_c, which takes the schema as a pyarrow object; the capsule must outlive the import).
    """

def export_device_array(array: ArrayData, stream: object | None = None) -> tuple:
    """
    ("arrow_schema", "arrow_device_array") capsules; the sync event is recorded on `stream`.
    """

def export_device_batch(batch: BatchData, stream: object | None = None) -> tuple:
    """Device capsules of a record batch."""

def export_device_array_stream(schema_capsule: object, chunks: Sequence[ArrayData], device_type: int, device_id: int) -> object:
    """
    An "arrow_device_array_stream" capsule yielding the chunks (each with its sync event).
    """

def export_device_batch_stream(schema_capsule: object, batches: Sequence[BatchData], device_type: int, device_id: int) -> object:
    """An "arrow_device_array_stream" capsule yielding the record batches."""

class IpcMemoryHandle:
    """
    A CUDA IPC handle of device memory: the driver's handle of the allocation, the buffer's offset in it, its size and the exporter's device (cuarrow::ipc_memory_handle).  One made by export_ipc keeps the exported memory alive.
    """

    @property
    def size(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def device_id(self) -> int: ...

    @property
    def memory(self) -> str:
        """
        "legacy" (cuMemAlloc memory) or "pool" (memory of a shareable pool: opened through the pool).
        """

    @property
    def pool_id(self) -> int: ...

    def serialize(self) -> bytes:
        """
        The handle as bytes (cuarrow's wire format: version 1 for legacy handles, 2 for pool handles).
        """

    def describe(self) -> str: ...

    @staticmethod
    def deserialize(data: bytes) -> IpcMemoryHandle:
        """
        Read serialize()'s bytes or pyarrow.cuda's format (72 bytes, 8 for an empty buffer).
        """

def export_ipc(buffer: Buffer) -> IpcMemoryHandle:
    """
    An IPC handle of device memory (cuMemAlloc memory, or a shareable pool's) for other processes.
    """

def export_ipc_pool(handle: IpcMemoryHandle) -> tuple:
    """
    (a new descriptor of the pool of a pool handle this process exported, owned by the caller; the pool's id).
    """

def open_ipc_pool(pool: ImportedPool, handle: IpcMemoryHandle) -> Buffer:
    """
    Open a pool handle another process exported, through its pool imported here (an ImportedPool).
    """

def open_ipc(context: Context, handle: IpcMemoryHandle) -> Buffer:
    """
    Open a handle another process exported, as device memory of `context`'s device.
    """

class IpcMessage:
    """
    One encapsulated Arrow IPC message (cuarrow::ipc::message): metadata read on the host, the body a zero-copy slice of its source.
    """

    @property
    def kind(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def metadata(self) -> bytes:
        """The FlatBuffers Message (with its padding), host bytes."""

    @property
    def body(self) -> Buffer: ...

    @property
    def offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    def serialize(self, stream: object | None = None) -> bytes:
        """The message as host bytes (prefix, metadata, padding, body)."""

    def schema_capsule(self) -> object:
        """An "arrow_schema" capsule of a schema message's schema."""

def ipc_read_message(source: Buffer, offset: int = 0, stream: object | None = None) -> IpcMessage | None:
    """
    The message at `offset` of `source`; None at the end-of-stream marker or the end of `source`.
    """

class IpcDictionaryMemo:
    """The dictionaries of a stream, by id."""

    def __init__(self, schema_message: IpcMessage) -> None:
        """The dictionary fields of a schema message, no dictionary yet."""

    def read(self, message: IpcMessage) -> None:
        """Read a dictionary batch message (a delta appends)."""

def ipc_read_record_batch(message: IpcMessage, schema_capsule: object, dictionary_memo: IpcDictionaryMemo | None = None) -> object:
    """
    The record batch of a message under a schema, as a BatchData (buffers are slices of the body).
    """

class IpcStreamReader:
    """An IPC stream held in a buffer (cuarrow::ipc::stream_reader)."""

    def __init__(self, source: Buffer) -> None: ...

    def schema_capsule(self) -> object: ...

    def read_next_with_metadata(self) -> object:
        """
        (BatchData, [(key, value)]) of the next batch and its message's custom metadata, or None at the end.
        """

    @property
    def position(self) -> int: ...

    def read_all(self) -> list:
        """
        The rest of the stream as BatchData (the batches between dictionaries validated together).
        """

class IpcFileReader:
    """An IPC file held in a buffer (cuarrow::ipc::file_reader)."""

    def __init__(self, source: Buffer) -> None: ...

    def schema_capsule(self) -> object: ...

    @property
    def num_record_batches(self) -> int: ...

    def read_batch(self, i: int) -> object:
        """Batch i as a BatchData."""

    def read_batch_with_metadata(self, i: int) -> tuple:
        """
        (BatchData, [(key, value)]) of batch i and its message's custom metadata.
        """

    @property
    def footer_metadata(self) -> list: ...

    def read_all(self) -> list:
        """Every batch as BatchData (validated together)."""

class IpcPathFileReader:
    """
    An IPC file read by path into device memory (cuarrow::ipc::device_file_reader).
    """

    def __init__(self, path: str, context: Context, columns: Sequence[int] | None = None, collect_stats: bool = False, gpu_decompression: bool = False) -> None: ...

    def schema_capsule(self) -> object: ...

    @property
    def num_record_batches(self) -> int: ...

    def read_batch(self, i: int) -> object:
        """Batch i as a BatchData."""

    def read_batch_with_metadata(self, i: int) -> tuple:
        """
        (BatchData, [(key, value)]) of batch i and its message's custom metadata.
        """

    @property
    def footer_metadata(self) -> list: ...

    @property
    def bytes_read(self) -> int: ...

    def stats(self) -> dict:
        """
        Where the reads' time went (cuarrow::ipc::read_stats, timed when made with collect_stats=True): bytes_read, batches, staging_jobs; calling thread: metadata_seconds, allocate_seconds, staging_seconds, gds_seconds, build_seconds, gpu_decompress_seconds; summed over the pipeline's workers: pread_seconds, decompress_seconds, dma_wait_seconds.
        """

    @property
    def read_path(self) -> str: ...

    @property
    def read_path_reason(self) -> str: ...

    def footer_schema_capsule(self) -> object: ...

    def read_batches(self, indices: Sequence[int]) -> list:
        """
        The batches `indices` names, read through one staging job, as BatchData.
        """

class IpcPathStreamReader:
    """
    An IPC stream read by path into device memory (cuarrow::ipc::device_stream_reader).
    """

    def __init__(self, path: str, context: Context, columns: Sequence[int] | None = None, collect_stats: bool = False, gpu_decompression: bool = False) -> None: ...

    def schema_capsule(self) -> object: ...

    def read_next_with_metadata(self) -> object:
        """
        (BatchData, [(key, value)]) of the next batch and its message's custom metadata, or None at the end.
        """

    @property
    def position(self) -> int: ...

    def read_all(self) -> list:
        """
        The rest of the stream as BatchData, read through staging jobs of many batches.
        """

    @property
    def bytes_read(self) -> int: ...

    def stats(self) -> dict:
        """
        Where the reads' time went (cuarrow::ipc::read_stats, timed when made with collect_stats=True): bytes_read, batches, staging_jobs; calling thread: metadata_seconds, allocate_seconds, staging_seconds, gds_seconds, build_seconds, gpu_decompress_seconds; summed over the pipeline's workers: pread_seconds, decompress_seconds, dma_wait_seconds.
        """

    @property
    def read_path(self) -> str: ...

    @property
    def read_path_reason(self) -> str: ...

class IpcPathWriter:
    """
    Writes an IPC stream or file to a path (cuarrow::ipc::file_writer), batch by batch.
    """

    def __init__(self, path: str, schema_capsule: object, file: bool = True, footer_metadata: object | None = None, stream: object | None = None, compression: str | None = None, level: int | None = None, min_space_savings: float | None = None) -> None:
        """
        compression: "lz4", "zstd" or None; level and min_space_savings: the codec's, or None.
        """

    def close(self) -> None:
        """Write the end (a file's footer) and close the file."""

    @property
    def bytes_written(self) -> int: ...

    def write(self, batch: BatchData, custom_metadata: object | None = None) -> None:
        """Write a batch (a BatchData under the writer's schema)."""

    def write_batches(self, batches: Sequence[BatchData], custom_metadata: object | None = None) -> None:
        """
        Write batches given as a list of BatchData in one call (file_writer::write of a span: one staging-pipeline job for all the bodies); custom_metadata: None or a list of one [(key, value)] per batch.
        """

class IpcWriter:
    """
    Writes an IPC stream or file into device memory (cuarrow::ipc::stream_writer).
    """

    def __init__(self, schema_capsule: object, context: Context, file: bool = False, footer_metadata: object | None = None, stream: object | None = None, cuda_malloc: bool = False) -> None:
        """
        cuda_malloc: finish() allocates with cuMemAlloc (legacy CUDA IPC can export it) instead of the context's resource.
        """

    def finish(self) -> Buffer:
        """The stream or file, one device allocation."""

    def write(self, batch: BatchData, custom_metadata: object | None = None) -> None:
        """Add a batch (a BatchData under the writer's schema)."""

    def write_batches(self, batches: Sequence[BatchData], custom_metadata: object | None = None) -> None:
        """
        Add batches given as a list of BatchData in one call (stream_writer::write of a span: their layouts made together); custom_metadata: None or a list of one [(key, value)] per batch.
        """

def ipc_serialize_record_batch(batch: BatchData, context: Context, stream: object | None = None) -> Buffer:
    """
    One record batch as an encapsulated IPC message in device memory of `context`.
    """

class SharedObject:
    """
    The exporter's side of a shared object (cuarrow::ipc::shared_object): owns the shared device memory until released.
    """

    def descriptor(self) -> bytes:
        """The descriptor another process opens (136 bytes)."""

    @property
    def kind(self) -> str: ...

    @property
    def memory(self) -> str: ...

    def export_pool(self) -> object:
        """
        Pool memory: (a new descriptor of the pool, owned by the caller; the pool's id).  Legacy: None.
        """

    @property
    def released(self) -> bool: ...

    @property
    def data(self) -> Buffer: ...

    def release(self) -> None:
        """Drop this process's hold on the shared memory."""

class ImportedPool:
    """
    Another process's pool imported here (cuarrow::imported_pool), from ipc_import_shared_pool.
    """

    @property
    def pool_id(self) -> int: ...

    @property
    def device_number(self) -> int: ...

def ipc_share(schema_capsule: object, batches: Sequence[BatchData], context: Context, kind: str, stream: object | None = None, memory: str = 'legacy') -> SharedObject:
    """
    Share record batches (BatchData under the schema), packed into one allocation of `context`'s device: cuMemAlloc memory (memory="legacy") or the process-wide IPC pool's (memory="pool").
    """

def ipc_share_buffer(buffer: Buffer, stream: object | None = None, memory: str = 'legacy') -> SharedObject:
    """
    Share device memory: itself, or a copy in memory of the kind asked for.
    """

def ipc_import_shared_pool(context: Context, fd: int, pool_id: int) -> ImportedPool:
    """
    The exporter's pool imported into `context`, once per process (cached by context and pool id); `fd` stays the caller's.
    """

def ipc_read_shared_descriptor(descriptor: bytes) -> tuple:
    """
    (kind, exporter's device, bytes, memory, pool id, made by this process) of a descriptor, checked; opens nothing.
    """

def ipc_open_shared(context: Context, descriptor: bytes, pool: ImportedPool | None = None) -> tuple:
    """
    Open a descriptor another process made (pool memory: through `pool`, an ImportedPool): (kind, schema capsule or None, [BatchData], the opened memory as a Buffer).
    """

__version__: str
