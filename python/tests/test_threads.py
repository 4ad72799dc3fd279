"""The GIL is released around copies and synchronization, and buffers are
safe to use from several threads."""

import ctypes
import threading
import time

import numpy as np
import pytest
from conftest import EMULATED

from cuarrow import cuda


def test_concurrent_copies(ctx):
    errors = []

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                data = rng.integers(0, 255, size=int(rng.integers(0, 5000)), dtype=np.uint8)
                dbuf = ctx.buffer_from_data(data)
                other = ctx.new_buffer(dbuf.size)
                other.copy_from_device(dbuf)
                assert other.to_pybytes() == data.tobytes()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.skipif(not EMULATED, reason="slows the emulated device down; a real GPU has no such knob")
def test_gil_released_during_copies(ctx):
    info = cuda.driver_info()
    emu = ctypes.CDLL(info["path"])
    emu.cuarrow_emu_set_op_delay_us.argtypes = [ctypes.c_uint]
    dbuf = ctx.buffer_from_data(bytes(1024))
    emu.cuarrow_emu_set_op_delay_us(300_000)  # each stream operation waits 0.3 s
    try:
        done = threading.Event()

        def copy():
            dbuf.copy_to_host()
            done.set()

        t = threading.Thread(target=copy)
        start = time.monotonic()
        t.start()
        ticks = 0
        while not done.is_set() and time.monotonic() - start < 10:
            ticks += 1  # Python code runs while the other thread waits in the driver
            time.sleep(0.001)
        t.join()
        assert done.is_set()
        assert ticks > 20
    finally:
        emu.cuarrow_emu_set_op_delay_us(0)
