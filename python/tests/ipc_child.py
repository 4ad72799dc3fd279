"""What the other process does in test_ipc.py (started by multiprocessing
with the ``spawn`` method: a forked child cannot use the CUDA driver the
parent initialised).

Importing this module touches no driver.  Each entry point first applies the
environment the parent passes (``CUARROW_CUDA_DRIVER=emulated`` and the
emulated device count when the parent runs on the emulation), so that the
child talks to the same kind of driver, then reports through a pipe.
"""

import os
import traceback


def _setup(env):
    os.environ.update(env)
    from cuarrow import cuda

    return cuda


def pyarrow_test_IPC(env, handle_buffer, expected_arr):
    """pyarrow's own other_process_for_test_IPC, with cuarrow.cuda."""
    import numpy as np

    cuda = _setup(env)
    other_context = cuda.Context(0)
    ipc_handle = cuda.IpcMemHandle.from_buffer(handle_buffer)
    ipc_buf = other_context.open_ipc_buffer(ipc_handle)
    ipc_buf.context.synchronize()
    buf = ipc_buf.copy_to_host()
    assert buf.size == expected_arr.size, repr((buf.size, expected_arr.size))
    arr = np.frombuffer(buf, dtype=np.uint8)
    np.testing.assert_equal(arr, expected_arr)


def open_and_check(conn, env, wire, device, opens=1, write=None, pool=None):
    """Opens the serialized handle `opens` times on `device` (a pool handle
    through `pool`, (DupFd, pool_id), after checking that it will not open
    without it), reports what the buffer says about itself and its bytes,
    then writes `write` into it."""
    try:
        cuda = _setup(env)
        ctx = cuda.Context(device)
        allocated = ctx.bytes_allocated
        handle = cuda.IpcMemHandle.from_buffer(wire)
        refusal = None
        if pool is not None:
            try:
                ctx.open_ipc_buffer(handle)
            except Exception as e:  # noqa: BLE001 - reported to the parent
                refusal = f"{type(e).__name__}: {e}"
            pool = (pool[0].detach(), pool[1])  # an int the child owns, used by every open
        bufs = [ctx.open_ipc_buffer(handle, pool=pool) for _ in range(opens)]
        if pool is not None:
            os.close(pool[0])
        buf = bufs[0]
        buf.context.synchronize()
        report = {
            "size": buf.size,
            "device_id": buf.device_id,
            "context_device": buf.context.device_number,
            "dlpack_device": buf.__dlpack_device__(),
            "is_mutable": buf.is_mutable,
            "same_address": all(b.address == buf.address for b in bufs),
            "bytes": buf.to_pybytes(),
            "allocated_delta": ctx.bytes_allocated - allocated,
            "repr": repr(buf),
            "handle": (handle.size, handle.offset, handle.device_number),
            "memory": handle.memory,
            "refusal_without_pool": refusal,
        }
        if buf.size > 1:
            again = buf.slice(1).export_for_ipc()  # handed on: the original allocation, one byte further
            report["reexported"] = (again.size, again.offset, again.device_number)
        if write is not None:
            bufs[-1].copy_from_host(write)
        del bufs, buf
        conn.send(("ok", report))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def export_and_exit(conn, env):
    """Exports a new buffer, sends its serialized handle, and exits (the
    exported memory goes with the process)."""
    try:
        cuda = _setup(env)
        buf = cuda.Context(0).new_buffer(4096)
        buf.copy_from_host(bytes(range(256)) * 16)
        conn.send(("ok", buf.export_for_ipc().serialize().to_pybytes()))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def export_of_a_copy(conn, env):
    """Reports what export_for_ipc of a copy's buffer does under the
    environment's CUARROW_MEMORY_RESOURCE."""
    try:
        import numpy as np

        cuda = _setup(env)
        ctx = cuda.Context(0)
        buf = ctx.buffer_from_data(np.arange(100, dtype=np.uint8))
        try:
            handle = buf.slice(10).export_for_ipc()
            report = ("exported", handle.memory)
        except Exception as e:  # noqa: BLE001 - reported to the parent
            report = ("refused", f"{type(e).__name__}: {e}")
        conn.send(("ok", (ctx._ctx.memory_resource_name(), report)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
