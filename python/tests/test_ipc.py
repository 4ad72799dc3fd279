"""CUDA IPC between processes: export_for_ipc, IpcMemHandle, open_ipc_buffer.

pyarrow's test_IPC (sizes 0, 1, 1000) runs unchanged with cuarrow.cuda; the
other tests cover what pyarrow lacks (slices keep their offset, opening twice,
opening on another device, pyarrow's own handle format) and every error.
Children are started with multiprocessing's ``spawn`` method (a forked child
cannot use an initialised CUDA driver) and get the parent's driver choice
and import path (ipc_child.py)."""

import multiprocessing
import multiprocessing.reduction
import os
import pickle
import struct

import ipc_child
import numpy as np
import pyarrow as pa
import pytest
from conftest import make_random_buffer

from cuarrow import cuda


@pytest.fixture(scope="module")
def child_env():
    """What a child needs to use the same driver as this process."""
    if not cuda.is_emulated():
        return {}
    return {
        "CUARROW_CUDA_DRIVER": "emulated",
        "CUARROW_EMULATED_DEVICES": os.environ.get("CUARROW_EMULATED_DEVICES", "2"),
    }


def spawn(target, *args):
    """Runs target(*args) in a spawned process; returns its exit code."""
    mp = multiprocessing.get_context("spawn")
    p = mp.Process(target=target, args=args)
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        pytest.fail("the child process did not finish in 120 s")
    return p.exitcode


def run_child(target, env, *args):
    """Runs an ipc_child entry point that reports through a pipe; returns its report."""
    mp = multiprocessing.get_context("spawn")
    mine, theirs = mp.Pipe()
    p = mp.Process(target=target, args=(theirs, env) + args)
    p.start()
    theirs.close()
    if not mine.poll(120):
        p.kill()
        pytest.fail("the child process did not report in 120 s")
    status, value = mine.recv()
    p.join(60)
    assert status == "ok", value
    assert p.exitcode == 0
    return value


def wire_of(handle):
    return handle.serialize().to_pybytes()


def pyarrow_format(handle):
    """The handle as pyarrow.cuda serializes it: int64 size, then the driver's
    64-byte handle (bytes 40..104 of cuarrow's format)."""
    if handle.size == 0:
        return struct.pack("=q", 0)
    return struct.pack("=q", handle.size) + wire_of(handle)[40:104]


# ---------------------------------------------------------------------------
# pyarrow's test, and what it does not check


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_IPC(ctx, child_env, size):
    arr, cbuf = make_random_buffer(ctx, size=size, target="device")
    ipc_handle = cbuf.export_for_ipc()
    handle_buffer = ipc_handle.serialize()
    assert spawn(ipc_child.pyarrow_test_IPC, child_env, handle_buffer, arr) == 0


def test_child_writes_are_seen_by_the_exporter(ctx, child_env):
    arr, cbuf = make_random_buffer(ctx, size=1000, target="device")
    new = bytes(np.arange(1000, dtype=np.uint8)[::-1])
    report = run_child(ipc_child.open_and_check, child_env, wire_of(cbuf.export_for_ipc()), 0, 1, new)
    assert report["bytes"] == arr.tobytes()
    assert cbuf.to_pybytes() == new


def test_slice_keeps_its_offset_and_opens_twice(ctx, child_env):
    arr, cbuf = make_random_buffer(ctx, size=10000, target="device")
    view = cbuf.slice(1234, 5000)
    handle = view.export_for_ipc()
    assert (handle.size, handle.offset, handle.device_number) == (5000, 1234, 0)
    new = b"\x07" * 5000
    report = run_child(ipc_child.open_and_check, child_env, wire_of(handle), 0, 2, new)
    assert report["size"] == 5000
    assert report["bytes"] == arr[1234:6234].tobytes()  # pyarrow would give the whole allocation
    assert report["same_address"]
    assert report["reexported"] == (4999, 1235, 0)
    assert report["allocated_delta"] == 0  # opened memory is not allocated by the opener
    expected = arr.copy()
    expected[1234:6234] = 7
    assert cbuf.to_pybytes() == expected.tobytes()  # the slice only


@pytest.mark.multi_device
def test_handle_of_device_0_opens_on_device_1(ctx, ctx1, child_env):
    arr, cbuf = make_random_buffer(ctx, size=4096, target="device")
    report = run_child(ipc_child.open_and_check, child_env, wire_of(cbuf.slice(96).export_for_ipc()), 1, 2)
    # The opened buffer is memory of the opening context's device, everywhere.
    assert report["device_id"] == 1
    assert report["context_device"] == 1
    assert report["dlpack_device"] == (2, 1)
    assert "device=cuda:1" in report["repr"]
    assert report["handle"] == (4000, 96, 0)
    assert report["bytes"] == arr[96:].tobytes()
    assert report["is_mutable"]


def test_pyarrow_format_handles_open(ctx, child_env):
    arr, cbuf = make_random_buffer(ctx, size=1000, target="device")
    blob = pyarrow_format(cbuf.export_for_ipc())
    assert len(blob) == 72
    for data in (blob, pa.py_buffer(blob), bytearray(blob), memoryview(blob), np.frombuffer(blob, np.uint8)):
        handle = cuda.IpcMemHandle.from_buffer(data)
        assert (handle.size, handle.offset, handle.device_number) == (1000, 0, -1)
    report = run_child(ipc_child.open_and_check, child_env, blob, 0)
    assert report["bytes"] == arr.tobytes()
    empty = cuda.IpcMemHandle.from_buffer(struct.pack("=q", 0))
    assert empty.size == 0
    assert ctx.open_ipc_buffer(empty).size == 0


def test_empty_handles_open_anywhere_without_the_driver(ctx, ctx1):
    handle = ctx.new_buffer(0).export_for_ipc()
    assert handle.size == 0
    for c in (ctx, ctx1):  # this process included: nothing to map
        buf = c.open_ipc_buffer(handle)
        assert buf.size == 0 and buf.device_id == c.device_number


# ---------------------------------------------------------------------------
# The handle object


def test_serialize_pickle_and_repr(ctx):
    handle = ctx.new_buffer(300).slice(44, 200).export_for_ipc()
    wire = handle.serialize()
    assert isinstance(wire, pa.Buffer) and wire.size == 112
    assert wire.to_pybytes()[:8] == b"CUARIPC\0"
    pooled = handle.serialize(pool=pa.default_memory_pool())
    assert pooled.equals(wire)
    back = pickle.loads(pickle.dumps(handle))
    assert isinstance(back, cuda.IpcMemHandle)
    assert wire_of(back) == wire.to_pybytes()
    assert repr(handle) == "<cuarrow.cuda.IpcMemHandle size=200 offset=44 device_number=0>"


def test_handle_keeps_the_exported_memory_allocated(ctx):
    before = ctx.bytes_allocated
    buf = ctx.new_buffer(1 << 16)
    assert ctx.bytes_allocated == before + (1 << 16)  # new_buffer memory (cuMemAlloc) is counted
    handle = buf.slice(8).export_for_ipc()
    del buf
    assert ctx.bytes_allocated == before + (1 << 16)
    del handle
    assert ctx.bytes_allocated == before


def test_new_buffer_gives_legacy_handles_and_copies_use_the_ipc_pool(ctx):
    legacy = ctx.new_buffer(64).export_for_ipc()
    assert (legacy.size, legacy.memory, legacy.pool_id) == (64, "legacy", None)
    with pytest.raises(pa.ArrowInvalid, match="legacy"):
        legacy.pool_fd()
    assert ctx._ctx.properties["memory_pools_supported"]
    assert ctx._ctx.memory_resource_name() == "cuda_ipc_pool"
    pooled = ctx.buffer_from_data(b"abcd").export_for_ipc()
    assert pooled.memory == "pool" and pooled.size == 4
    assert pooled.pool_id == ctx.buffer_from_data(b"efgh").export_for_ipc().pool_id != 0, "one pool per device"
    fd = pooled.pool_fd()
    assert fd >= 0 and pooled.pool_fd() == fd, "one descriptor per pool for the process"
    assert cuda.IpcMemHandle.from_buffer(pooled.serialize()).memory == "pool"


def test_copies_open_in_another_process_through_the_pool(ctx, child_env):
    arr, cbuf = make_random_buffer(ctx, size=10000, target="device")
    pooled = ctx.buffer_from_data(cbuf)  # a copy: memory of the default resource
    view = pooled.slice(1234, 5000)
    handle = view.export_for_ipc()
    assert (handle.memory, handle.size, handle.offset) == ("pool", 5000, 1234)
    new = b"\x09" * 5000
    pool = (multiprocessing.reduction.DupFd(handle.pool_fd()), handle.pool_id)
    report = run_child(ipc_child.open_and_check, child_env, wire_of(handle), 0, 2, new, pool)
    assert report["memory"] == "pool"
    assert report["bytes"] == arr[1234:6234].tobytes()
    assert report["same_address"], "the pool allocation is imported once"
    assert report["reexported"] == (4999, 1235, 0)
    assert report["refusal_without_pool"].startswith("ArrowInvalid: this IPC handle is of pool memory")
    assert "pool=(fd, pool_id)" in report["refusal_without_pool"]
    expected = arr.copy()
    expected[1234:6234] = 9
    assert pooled.to_pybytes() == expected.tobytes()


def test_memory_pool_stats_follow_allocations_and_trim(ctx):
    ctx.synchronize()
    before = ctx.memory_pool_stats()
    assert before["resource"] == "cuda_ipc_pool"
    buf = ctx.buffer_from_data(bytes(3 << 20))
    ctx.synchronize()
    during = ctx.memory_pool_stats()
    assert during["used_bytes"] >= before["used_bytes"] + (3 << 20)
    assert during["reserved_bytes"] >= during["used_bytes"]
    del buf
    ctx.synchronize()
    after = ctx.memory_pool_stats()
    assert after["used_bytes"] == before["used_bytes"]
    ctx.trim_memory_pool()
    assert ctx.memory_pool_stats()["reserved_bytes"] <= after["reserved_bytes"]
    with pytest.raises(pa.ArrowInvalid, match="keep_bytes must be 0 or more, not -1"):
        ctx.trim_memory_pool(-1)
    with pytest.raises(TypeError, match="keep_bytes must be an integer"):
        ctx.trim_memory_pool(1.5)


@pytest.mark.parametrize(
    "resource, memory",
    [("cuda_ipc_pool", "pool"), ("cuda_async_pool", None), ("cuda_malloc", "legacy")],
)
def test_CUARROW_MEMORY_RESOURCE_chooses_what_copies_allocate(child_env, resource, memory):
    name, (outcome, detail) = run_child(ipc_child.export_of_a_copy, dict(child_env, CUARROW_MEMORY_RESOURCE=resource))
    assert name == resource
    if memory is None:  # the device's default pool: refused, saying what to do
        assert outcome == "refused"
        assert "stream-ordered pool" in detail and "legacy CUDA IPC cannot export" in detail
        assert "Context.new_buffer(n)" in detail and "copy_from_device" in detail
    else:
        assert (outcome, detail) == ("exported", memory)


# ---------------------------------------------------------------------------
# Errors


def test_open_ipc_buffer_wants_an_IpcMemHandle(ctx):
    for wrong in (None, b"x" * 72, ctx.new_buffer(8)):
        with pytest.raises(TypeError, match=f"^expected IpcMemHandle instance, got {type(wrong).__name__}$"):
            ctx.open_ipc_buffer(wrong)


def test_IpcMemHandle_constructor_is_refused():
    with pytest.raises(TypeError, match="Do not call IpcMemHandle's constructor directly"):
        cuda.IpcMemHandle()


def test_from_buffer_wants_host_bytes(ctx):
    with pytest.raises(TypeError, match="not NoneType"):
        cuda.IpcMemHandle.from_buffer(None)
    with pytest.raises(TypeError, match="not int"):
        cuda.IpcMemHandle.from_buffer(72)
    with pytest.raises(TypeError, match="this CudaBuffer is device memory; copy it to the host first"):
        cuda.IpcMemHandle.from_buffer(ctx.buffer_from_data(b"x" * 72))


def _reseal(wire):
    """Recomputes the checksum (FNV-1a 64 of bytes 0..104) after an edit."""
    h = 0xCBF29CE484222325
    for b in wire[:104]:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    wire[104:112] = struct.pack("<Q", h)
    return bytes(wire)


def test_malformed_handles_say_what_is_wrong(ctx):
    good = bytearray(wire_of(ctx.new_buffer(1000).slice(24).export_for_ipc()))
    h = cuda.IpcMemHandle.from_buffer(bytes(good))
    assert (h.size, h.offset) == (976, 24)

    def edited(at, fmt, value):
        w = bytearray(good)
        struct.pack_into(fmt, w, at, value)
        return _reseal(w)

    damaged = bytearray(good)
    damaged[50] ^= 1
    cases = [
        (b"", r"expected a cuarrow IPC handle \(112 or 120 bytes, starting with \"CUARIPC\"\) or a pyarrow"),
        (b"abc", r"expected a cuarrow IPC handle"),
        (bytes(good[:9]), r"a cuarrow IPC handle is cut short before its version"),
        (bytes(good[:100]), r"a cuarrow IPC handle of version 1 is 112 bytes long \(it was cut short\)"),
        (bytes(good) + b"\0", r"extra bytes follow it"),
        (b"XUARIPC\0" + bytes(good[8:]), r"expected a cuarrow IPC handle"),
        (edited(8, "<H", 3), r"unsupported cuarrow IPC handle version 3 \(this cuarrow reads versions 1 and 2\)"),
        (edited(8, "<H", 2), r"a cuarrow IPC handle of version 2 is 120 bytes long \(it was cut short\)"),
        (bytes(damaged), r"the checksum does not match: the handle was damaged on its way"),
        (edited(24, "<q", -1), r"negative size -1"),
        (edited(16, "<q", -8), r"negative offset -8"),
        (edited(24, "<q", 2**63 - 1), r"offset 24 \+ size 9223372036854775807 overflows"),
        (struct.pack("=q", 1000), r"a pyarrow.cuda IPC handle of a 1000-byte buffer is 72 bytes long"),
        (struct.pack("=q", -3) + bytes(64), r"negative size -3"),
    ]
    for data, message in cases:
        with pytest.raises(pa.ArrowInvalid, match=message) as info:
            cuda.IpcMemHandle.from_buffer(data)
        assert str(info.value).startswith(f"cannot read an IPC memory handle from {len(data)} bytes: ")


def test_export_refuses_pinned_memory(ctx):
    host = cuda.new_host_buffer(64)
    view = ctx.foreign_buffer(host.address, host.size, base=host)  # a CudaBuffer over pinned memory
    with pytest.raises(pa.ArrowInvalid, match=r"pinned host memory \(cuda_host\); CUDA IPC shares device memory only"):
        view.export_for_ipc()


def test_opening_in_the_exporting_process_is_refused(ctx):
    handle = ctx.new_buffer(64).export_for_ipc()
    for h in (handle, cuda.IpcMemHandle.from_buffer(handle.serialize())):
        with pytest.raises(pa.ArrowInvalid, match="IPC handles are for other processes"):
            ctx.open_ipc_buffer(h)
    # pyarrow's format does not say who exported it: the driver refuses.
    with pytest.raises(cuda.CudaError, match="IPC handles are for other processes") as info:
        ctx.open_ipc_buffer(cuda.IpcMemHandle.from_buffer(pyarrow_format(handle)))
    assert info.value.operation == "cuIpcOpenMemHandle"


def test_handle_of_an_exited_process_is_a_CudaError(ctx, child_env):
    wire = run_child(ipc_child.export_and_exit, child_env)
    handle = cuda.IpcMemHandle.from_buffer(wire)
    assert handle.size == 4096
    with pytest.raises(cuda.CudaError, match="the exporting process may have exited") as info:
        ctx.open_ipc_buffer(handle)
    assert info.value.operation == "cuIpcOpenMemHandle"
