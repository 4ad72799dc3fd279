"""What adversarial testing found (issue 12), as a user and as a hostile
producer would meet it: each case raised a clear error, lost no data, or
crashed the process before its fix.  (The C++ side: tests/arrow/adversarial_test.cpp.)"""

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from c_structs import POINTER, ArrowArray, ArrowDeviceArrayStream, ArrowSchema, Keeper, read_struct
from conftest import CAIProducer

from cuarrow import cuda

ARROW_DEVICE_CPU, ARROW_DEVICE_CUDA, ARROW_DEVICE_CUDA_HOST = 1, 2, 3


def strings_over(offsets: np.ndarray, data: bytes) -> pa.Array:
    """A string array over a NumPy offsets array, zero-copy: writes to
    `offsets` after pyarrow validated the array change the array."""
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# ---- over-reads of the source --------------------------------------------------------------


@pytest.mark.parametrize("past", [1, 1 << 20], ids=["a byte past", "a MiB past"])
def test_last_offset_raised_after_validation_is_refused(ctx, past):
    offsets = np.array([0, 1, 2], dtype=np.int32)
    arr = strings_over(offsets, b"ab")
    table, chunked, batch = pa.table({"s": arr}), pa.chunked_array([arr]), pa.record_batch({"s": arr})
    arr.validate(full=True)
    offsets[2] = 2 + past  # now it points past the 2-byte data buffer, in all four objects
    for obj in (arr, table, chunked, batch):
        with pytest.raises(pa.ArrowInvalid, match="does not hold together"):
            cuda.to_device(obj, ctx)


# ---- what cheap validation lets through must not crash later ----------------------------------


def test_offsets_decreasing_in_the_middle_fail_on_the_way_back(ctx):
    offsets = np.array([0, 1, 2, 3, 4], dtype=np.int32)
    arr = strings_over(offsets, b"abcd")
    offsets[2] = 4  # 0 1 4 3 4: first and last are fine, element 2 runs backwards
    dev = cuda.to_device(arr, ctx)  # cheap validation: structure and sizes only
    with pytest.raises(pa.ArrowInvalid, match="offsets decrease at element 2: 4 then 3"):
        dev.to_host()
    with pytest.raises(pa.ArrowInvalid, match="last offset 3 is before the first offset 4"):
        dev[2]
    assert dev[0].as_py() == "a"  # the elements before it are readable
    with pytest.raises(pa.ArrowInvalid):
        dev.validate(full=True)
    text = repr(dev)  # never raises, never crashes
    assert "values not shown" in text and "offsets decrease" in text
    table = cuda.to_device(pa.table({"s": arr}), ctx)
    assert "values not shown" in repr(table)
    with pytest.raises(pa.ArrowInvalid, match='column "s": offsets decrease'):
        table.to_host()


def test_slice_offsets_never_point_past_the_copied_data(ctx):
    offsets = np.array([0, 1, 2, 3, 4, 5, 6], dtype=np.int32)
    arr = strings_over(offsets, b"abcdef")
    offsets[4] = 6  # within the data buffer, but after the last offset of the slice below
    dev = cuda.to_device(arr, ctx)
    # The slice's data is cut at its last offset (5): offset 6 would point
    # past it, where even pyarrow's validate() does not look.
    with pytest.raises(pa.ArrowInvalid, match="offsets decrease at element 1: 6 then 5"):
        dev.slice(3, 2).to_host()
    assert dev.slice(0, 3).to_host().to_pylist() == ["a", "b", "c"]


# ---- maps: Arrow C++ aborts the process on null keys or entries ---------------------------------


def _map_with_null(which: str) -> "Producer":
    keys = pa.array(["a", "b", "c"])
    items = pa.array([1, 2, 3], pa.int64())
    keep = []
    valid = np.packbits(np.array([1, 0, 1], dtype=bool), bitorder="little")
    keep.append(valid)
    k = Keeper()
    kv = k.array(
        3, [valid.ctypes.data if which == "key" else None] + _pointers(keys)[1:], null_count=-1 if which == "key" else 0
    )
    iv = k.array(3, _pointers(items))
    entries = k.array(
        3,
        [valid.ctypes.data if which == "entry" else None],
        children=[kv, iv],
        null_count=-1 if which == "entry" else 0,
    )
    offsets = np.array([0, 2, 3], dtype=np.int32)
    keep += [keys, items, offsets]
    m = k.array(2, [None, offsets.ctypes.data], children=[entries])
    schema = k.schema("+m", [k.schema("+s", [k.schema("u", flags=0), k.schema("l")])])
    return Producer(k, schema, m, keep)


def _pointers(arr: pa.Array) -> list:
    return [b.address if b is not None else None for b in arr.buffers()]


class Producer:
    """A hand-made host array (__arrow_c_array__), built afresh per call."""

    def __init__(self, keeper, schema, array, keep=()):
        self.k, self.schema, self.array, self.keep = keeper, schema, array, list(keep)

    def __arrow_c_array__(self, requested_schema=None):
        return self.k.capsule(self.schema, "arrow_schema"), self.k.capsule(self.array, "arrow_array")


@pytest.mark.parametrize("which", ["key", "entry"])
def test_map_with_a_null_key_or_entry_never_aborts(ctx, which):
    dev = cuda.to_device(_map_with_null(which), ctx)  # null counts unknown: cheap validation cannot see it
    what = {"key": "keys", "entry": "entries"}[which]
    with pytest.raises(pa.ArrowInvalid, match=f"a map's {what} must not be null"):
        dev.validate(full=True)
    with pytest.raises(pa.ArrowInvalid, match=f"a map's {what} must not be null"):
        dev.to_host()
    assert "values not shown" in repr(dev)


# ---- structure before pointers -------------------------------------------------------------------


def _struct_with(mode: str):
    k = Keeper()
    vals = np.arange(4, dtype=np.int32)
    child = k.array(4, [None, vals.ctypes.data])
    if mode == "more children":
        return Producer(k, k.schema("+s", [k.schema("i")]), k.array(4, [None], children=[child, child]), [vals])
    if mode == "fewer children":
        return Producer(k, k.schema("+s", [k.schema("i"), k.schema("i")]), k.array(4, [None], children=[child]), [vals])
    a = k.array(4, [None], children=[child])
    a.children = ctypes.cast(None, POINTER(POINTER(ArrowArray)))
    return Producer(k, k.schema("+s", [k.schema("i")]), a, [vals])


@pytest.mark.parametrize("mode", ["more children", "fewer children", "children NULL"])
def test_children_that_disagree_with_the_type_are_refused(ctx, mode):
    with pytest.raises(pa.ArrowInvalid, match="n_children is|children is NULL"):
        cuda.to_device(_struct_with(mode), ctx)


class DeviceProducer:
    """__arrow_c_device_array__ over hand-made structs."""

    def __init__(self, k, schema, array, device_type, device_id, keep=()):
        self.k, self.schema, self.array = k, schema, array
        self.device_type, self.device_id, self.keep = device_type, device_id, list(keep)

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        d = self.k.device_array(self.array, self.device_type, self.device_id)
        return self.k.capsule(self.schema, "arrow_schema"), self.k.capsule(d, "arrow_device_array")


def _device_int32(ctx, n=1600, device_type=ARROW_DEVICE_CUDA, device_id=0):
    """A valid int32 device array with nulls, its bitmap and values in two
    separate device allocations, and the host array it holds."""
    values = np.arange(n, dtype=np.int32) * 3
    valid = np.arange(n) % 7 != 3
    host = pa.array(values, mask=~valid)
    bits = ctx.buffer_from_data(np.packbits(valid, bitorder="little"))
    data = ctx.buffer_from_data(values)
    k = Keeper()
    array = k.array(n, [bits.address, data.address], null_count=int((~valid).sum()))
    return DeviceProducer(k, k.schema("i"), array, device_type, device_id, [bits, data]), host


def test_buffers_of_one_import_in_two_allocations_copy_apart(ctx):
    producer, host = _device_int32(ctx)
    dev = cuda.from_device(producer)
    assert dev.to_host().equals(host)
    assert cuda.to_device(dev, ctx).to_host().equals(host)


def test_device_memory_labelled_pinned_host_memory_is_refused(ctx):
    producer, _ = _device_int32(ctx, device_type=ARROW_DEVICE_CUDA_HOST)
    with pytest.raises(pa.ArrowInvalid, match="the driver knows this buffer as device memory"):
        cuda.from_device(producer)


def test_device_id_outside_an_int_is_refused(ctx):
    producer, _ = _device_int32(ctx, device_id=(1 << 32) + 1)
    with pytest.raises(pa.ArrowInvalid, match="device_id 4294967297 is not a device ordinal"):
        cuda.from_device(producer)


def test_stream_callbacks_after_release_are_refused(ctx):
    table = cuda.to_device(pa.table({"x": [1, 2, 3]}), ctx)
    capsule = table.__arrow_c_device_stream__()
    st = read_struct(capsule, ArrowDeviceArrayStream)
    release, get_next, get_schema = st.release, st.get_next, st.get_schema
    release(ctypes.pointer(st))  # as a consumer does; the callbacks stay in the struct
    from c_structs import ArrowDeviceArray

    out = ArrowDeviceArray()
    assert get_next(ctypes.pointer(st), ctypes.pointer(out)) == 22  # EINVAL
    assert get_schema(ctypes.pointer(st), ctypes.pointer(ArrowSchema())) == 22


# ---- lifetimes: results outlive a context destroyed under them ------------------------------------


def test_host_results_outlive_a_context_released_by_someone_else(tmp_path):
    # In a child process: another component releases the primary context
    # once too often (as cudaDeviceReset would destroy it); the pyarrow
    # objects to_host() and copy_to_host() returned must stay readable.
    script = textwrap.dedent(
        """
        import ctypes, sys
        import numpy as np, pyarrow as pa
        from cuarrow import cuda
        cuda.use_emulation_if_no_gpu()
        ctx = cuda.Context(0)
        table = pa.table({"s": ["results", None, "outlive"], "i": [1, 2, 3]})
        back = cuda.to_device(table, ctx).to_host()
        raw = ctx.buffer_from_data(np.arange(1024, dtype=np.int64)).copy_to_host()
        lib = ctypes.CDLL(cuda.driver_info()["path"])
        get_proc = lib.cuGetProcAddress_v2
        get_proc.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                             ctypes.c_void_p]
        fn = ctypes.c_void_p()
        assert get_proc(b"cuDevicePrimaryCtxRelease", ctypes.byref(fn), 11000, 0, None) == 0
        release = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(fn.value)
        assert get_proc(b"cuDevicePrimaryCtxGetState", ctypes.byref(fn), 7000, 0, None) == 0
        get_state = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint),
                                     ctypes.POINTER(ctypes.c_int))(fn.value)
        flags, active = ctypes.c_uint(), ctypes.c_int(1)
        for _ in range(64):
            assert get_state(0, ctypes.byref(flags), ctypes.byref(active)) == 0
            if not active.value:
                break
            assert release(0) == 0
        assert active.value == 0, "the primary context is still alive"
        assert back.equals(table), back
        assert np.frombuffer(raw, dtype=np.int64).tolist() == list(range(1024))
        print("CHILD OK", flush=True)
        import os
        os._exit(0)  # cuarrow still believes it holds its retain
        """
    )
    path = tmp_path / "child.py"
    path.write_text(script)
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "CHILD OK" in r.stdout, (r.returncode, r.stdout, r.stderr)


# ---- tensors from outside (the core's reader: include/cuarrow/tensor.hpp) ------------------


def _int32_cai(ctx, values):
    d = cuda.to_device(pa.array(values, pa.int32()), ctx)
    return d, dict(d.__cuda_array_interface__)


def test_a_cuda_array_interface_mask_is_refused(ctx):
    # from_device used to ignore the mask: masked elements came back valid.
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    mask = cuda.to_device(pa.array([1, 0, 1, 1], pa.uint8()), ctx)
    desc["mask"] = mask
    with pytest.raises(ValueError, match="mask is not supported"):
        cuda.from_device(CAIProducer(desc, keep=(d, mask)))
    with pytest.raises(ValueError, match="mask is not supported"):
        ctx.buffer_from_object(CAIProducer(desc, keep=(d, mask)))
    desc["mask"] = None  # the spec's "no mask"
    assert cuda.from_device(CAIProducer(desc, keep=d)).to_host().equals(pa.array([1, 2, 3, 4], pa.int32()))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"shape": (-1,)}, "negative"),
        ({"shape": (1 << 40, 1 << 40)}, "overflows"),
        ({"shape": (4,), "strides": (4, 4)}, "2 strides for 1 dimensions"),
        ({"shape": (4,), "strides": (1 << 62,)}, "overflows|address space"),
        ({"shape": (4,), "strides": (-(1 << 62),)}, "overflows|below address 0"),
        ({"shape": (1 << 70,)}, "fit 64 bits"),
        ({"shape": tuple([1] * 65)}, "at most 64"),
        ({"typestr": "<q4"}, "unknown kind"),
        ({"typestr": "<i4x"}, "trailing"),
        ({"version": 99}, "unsupported version"),
        ({"stream": 0}, "stream 0"),
        ({"data": (0, False)}, "data pointer is null"),
        ({"data": (-5, False)}, "not an address"),
    ],
)
def test_bad_cuda_array_interfaces_are_refused_by_the_core(ctx, change, match):
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    desc.update(change)
    with pytest.raises(ValueError, match=match):
        ctx.buffer_from_object(CAIProducer(desc, keep=d))
    with pytest.raises(ValueError, match=match):
        cuda.from_device(CAIProducer(desc, keep=d))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"shape": (4.0,)}, r"shape is not a tuple of ints that fit 64 bits: \(4\.0,\)"),
        ({"typestr": b"<i4"}, "typestr is not a str"),
        ({"stream": 1.5}, "stream is not an int"),
        ({"data": (1,)}, r"data is not a tuple \(pointer, read_only\)"),
        ({"data": ("1", False)}, "the data pointer is not an address"),
    ],
)
def test_cuda_array_interface_entries_of_other_types_are_refused(ctx, change, match):
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    desc.update(change)
    with pytest.raises(ValueError, match=match):
        cuda.from_device(CAIProducer(desc, keep=d))


def test_cuda_array_interface_takes_numpy_integers(ctx):
    # Producers that compute a shape or pointer with NumPy give NumPy
    # integers (they have __index__): they are ints to the protocol.
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    desc.update(shape=(np.int64(4),), strides=(np.int32(4),), data=(np.uint64(desc["data"][0]), False))
    assert cuda.from_device(CAIProducer(desc, keep=d)).to_host().equals(pa.array([1, 2, 3, 4], pa.int32()))
    assert ctx.buffer_from_object(CAIProducer(desc, keep=d)).size == 16


def test_memory_described_past_what_the_driver_knows_is_refused(ctx):
    # A producer that describes more bytes than its allocation holds: the
    # view is refused (reading it would fault on the device, or crash host
    # code reading pinned memory), and every object stays usable.
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    desc.update(shape=(1 << 38,))  # 1 TiB of int32 from a 16-byte array
    for take in (ctx.buffer_from_object, cuda.from_device):
        with pytest.raises(ValueError, match=r"__cuda_array_interface__: 1099511627776 bytes from 0x\w+ run past"):
            take(CAIProducer(desc, keep=d))
    buf = ctx.new_buffer(64)
    with pytest.raises(ValueError, match=r"wrap_device: 1099511627776 bytes from 0x[0-9a-f]+ run past"):
        ctx.foreign_buffer(buf.address, 1 << 40, base=buf)
    pinned = cuda.new_host_buffer(64)
    with pytest.raises(ValueError, match="run past the memory the CUDA driver knows there"):
        ctx.foreign_buffer(pinned.address, 1 << 40, base=pinned)
    assert ctx.foreign_buffer(buf.address + 8, 56, base=buf).size == 56, "up to the end is taken"
    assert d.to_host().equals(pa.array([1, 2, 3, 4], pa.int32()))
    buf.copy_from_host(bytes(range(64)))
    assert buf.copy_to_host().to_pybytes() == bytes(range(64))


def test_extent_one_dimensions_do_not_break_c_contiguity(ctx):
    # A (4, 1) tensor whose last stride is arbitrary (PyTorch gives size-1
    # dimensions any stride) is C-contiguous: it imports as fixed-size lists.
    d, desc = _int32_cai(ctx, [1, 2, 3, 4])
    desc.update(shape=(4, 1), strides=(4, 1234))
    back = cuda.from_device(CAIProducer(desc, keep=d)).to_host()
    assert back.equals(pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 3, 4], pa.int32()), 1))
    desc.update(shape=(2, 2), strides=(4, 8))  # Fortran order: contiguous bytes, not C order
    with pytest.raises(ValueError, match="not C-contiguous"):
        cuda.from_device(CAIProducer(desc, keep=d))
    assert ctx.buffer_from_object(CAIProducer(desc, keep=d)).size == 16
