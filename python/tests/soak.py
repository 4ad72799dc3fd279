"""Soak test: many threads doing random cuarrow operations for a long time,
every result checked exactly, and no resource left behind.

    python3 python/tests/soak.py --seconds 600 --threads 16 --seed 1 --json out.json

A warm-up phase runs the same workload (so that pools, staging threads,
caches and the IPC child exist), then the measured phase runs `--threads`
threads, each picking random operations:

- ``copy_h2d_d2h``: host <-> device copies of random sizes (0 B to
  ``--max-bytes``, with the staging threshold and chunk edges) at random
  offsets, from bytes / bytearray / NumPy / pyarrow / pinned memory, read
  back into pinned results, pyarrow pools, bytearrays, NumPy arrays, slices;
  the bytes around the copied range are checked untouched;
- ``copy_d2d``: device -> device copies, between slices, across devices
  (peer copies) when there are several;
- ``pinned``: ``cuda.new_host_buffer`` pinned buffers, as sources and targets;
- ``reader_writer``: ``BufferWriter`` (buffered, seeks, ``writeat``) and
  ``BufferReader`` (``read``, ``read_at``, ``readinto``, ``read_buffer``);
- ``typed_roundtrip``: ``cuda.to_device`` / ``to_host`` of random arrays of
  every type in arrow_samples.py (nested, dictionary, strings, views,
  unions, run-end encoded, extension ...), as arrays, chunked arrays,
  record batches and tables, sliced or not, on any device, compared with
  ``equals``;
- ``typed_slice``: slices of device arrays, chunked arrays, batches and
  tables, device -> device ``to_device`` of slices, ``from_device`` views;
- ``ipc_message``: ``serialize_record_batch`` / ``read_message`` /
  ``read_record_batch``;
- ``streams_events``: copies ordered by ``Stream`` s and ``Event`` s
  (``wait_event``, timing events, ``query``, ``synchronize``), typed copies
  on streams;
- ``ipc``: ``export_for_ipc`` of (slices of) buffers, opened by a long-lived
  child process (one, served over a pipe) on any device, which checks the
  bytes and writes some back;
- ``numba``: Numba kernels over cuarrow buffers and typed arrays (real GPU
  only: skipped on the emulation, which runs no kernel, with the reason);
- ``transfer_options``: the staging pipeline's threshold and chunk changed
  while other threads copy;
- ``errors``: deliberate misuse (out-of-range positions and slices, too
  large copies, bad devices, opening a pool handle without its pool, non-Arrow input ...),
  each expecting its typed error.

Pass criteria: no failed check, and the resources after warm-up equal
those at the end, exactly: device bytes allocated through cuarrow (every
context), the pinned pool's in-use bytes, pyarrow's allocated bytes, live
cuarrow objects (gc), the emulation's live allocations / registrations /
IPC mappings / streams / events (on the emulation), the IPC child's device
bytes and IPC mappings; host RSS growth at most ``--rss-mib`` MiB plus 5 %.
The pools' cached bytes (the pinned result pool caches blocks; the device's
stream-ordered pool keeps freed memory on a real GPU) are reported, then the
pinned pool is trimmed and must hold exactly what it held after warm-up.

Writes a JSON report (``--json``) and prints a summary; exits 0 on pass, 1
on a failure or drift, 2 when a thread hangs.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import faulthandler
import gc
import json
import math
import multiprocessing
import os
import platform
import sys
import threading
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

MiB = 1 << 20


# ---------------------------------------------------------------------------
# The IPC child: one long-lived process, served over a pipe
# ---------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _emulation_lib(cuda):
    info = cuda.driver_info()
    if not info["emulated"]:
        return None
    lib = ctypes.CDLL(info["path"])
    for name in (
        "cuarrow_emu_device_allocation_count",
        "cuarrow_emu_device_bytes_in_use",
        "cuarrow_emu_host_allocation_count",
        "cuarrow_emu_host_registration_count",
        "cuarrow_emu_ipc_mapping_count",
        "cuarrow_emu_stream_count",
        "cuarrow_emu_event_count",
        "cuarrow_emu_async_fault_count",
    ):
        getattr(lib, name).restype = ctypes.c_size_t
    lib.cuarrow_emu_device_allocation_count.argtypes = [ctypes.c_int]
    lib.cuarrow_emu_device_bytes_in_use.argtypes = [ctypes.c_int]
    lib.cuarrow_emu_primary_ctx_retain_count.argtypes = [ctypes.c_int]
    lib.cuarrow_emu_primary_ctx_retain_count.restype = ctypes.c_int
    return lib


def _ipc_open(cuda, ctxs, wire, device, opens, write):
    """The child's side of one "open" (a function: nothing it opens outlives it)."""
    handle = cuda.IpcMemHandle.from_buffer(wire)
    bufs = [ctxs[device].open_ipc_buffer(handle) for _ in range(opens)]
    if any(b.size != handle.size or b.address != bufs[0].address for b in bufs):
        raise AssertionError(f"openings differ: {bufs!r}")
    data = bufs[0].to_pybytes()
    if write is not None:
        bufs[-1].copy_from_host(write[1], position=write[0])
    return len(data), zlib.crc32(data), handle.size, handle.offset, handle.device_number


def ipc_serve(conn, env):
    """The child: opens the handles it is sent and answers, until "exit".

    Requests: ("open", wire, device, opens, write) -> (size, crc32, handle
    size, handle offset, handle device); `write` is None or (position,
    bytes) written through the last opening.  ("stats",) -> its device bytes
    allocated, live IPC mappings (emulation) and RSS.
    """
    import ipc_child

    try:
        cuda = ipc_child._setup(env)
        ndev = cuda.Context.get_num_devices()
        ctxs = [cuda.Context(d) for d in range(ndev)]
        emu = _emulation_lib(cuda)
        conn.send(("ok", os.getpid()))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        try:
            if msg[0] == "exit":
                conn.send(("ok", None))
                return
            if msg[0] == "open":
                conn.send(("ok", _ipc_open(cuda, ctxs, *msg[1:])))
            elif msg[0] == "stats":
                gc.collect()
                conn.send(
                    (
                        "ok",
                        {
                            "bytes_allocated": [c.bytes_allocated for c in ctxs],
                            "ipc_mappings": None if emu is None else int(emu.cuarrow_emu_ipc_mapping_count()),
                            "rss": _rss_bytes(),
                        },
                    )
                )
            else:
                conn.send(("error", f"unknown request {msg[0]!r}"))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class IpcChild:
    """The parent's side of the child: one request at a time."""

    def __init__(self, env):
        mp = multiprocessing.get_context("spawn")
        self.conn, theirs = mp.Pipe()
        self.proc = mp.Process(target=ipc_serve, args=(theirs, env), daemon=True)
        self.proc.start()
        theirs.close()
        self.lock = threading.Lock()
        self.pid = self._reply(120)

    def _reply(self, timeout):
        if not self.conn.poll(timeout):
            raise TimeoutError(f"the IPC child (alive: {self.proc.is_alive()}) did not answer in {timeout} s")
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"the IPC child failed:\n{value}")
        return value

    def request(self, *msg, timeout=120):
        with self.lock:
            self.conn.send(msg)
            return self._reply(timeout)

    def close(self):
        try:
            self.request("exit", timeout=30)
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
        return self.proc.exitcode


# ---------------------------------------------------------------------------
# Shared state
# ---------------------------------------------------------------------------


class Soak:
    def __init__(self, args):
        from cuarrow import _numba, cuda

        _numba.numpy_compat_for_numba()  # before numba.cuda is imported
        self.cuda = cuda
        self.args = args
        self.emulation_reason = cuda.use_emulation_if_no_gpu(2)
        self.emulated = cuda.is_emulated()
        self.ndev = cuda.Context.get_num_devices()
        self.ctxs = [cuda.Context(d) for d in range(self.ndev)]
        self.emu = _emulation_lib(cuda)
        self.defaults = cuda.transfer_options()
        t = self.defaults["staging_threshold_bytes"]
        c = self.defaults["staging_chunk_bytes"]
        self.max_bytes = args.max_bytes
        edges = [0, 1, 2, 3, 7, 8, 63, 64, 65, 255, 4095, 4096, 4097, 65535, 65536, 65537,
                 t - 1, t, t + 1, c - 1, c, c + 1, 2 * c + 3, 3 * c - 1]  # fmt: skip
        self.edges = sorted({e for e in edges if 0 <= e <= self.max_bytes})
        # Random bytes to take copy sources from (at random offsets).
        self.noise = np.random.default_rng(args.seed).bytes(self.max_bytes + 4 * MiB)
        self.child_env = (
            {"CUARROW_CUDA_DRIVER": "emulated", "CUARROW_EMULATED_DEVICES": str(self.ndev)} if self.emulated else {}
        )
        self.child = None
        self.numba = None
        self.skipped = {}
        self._setup_numba()
        self._setup_samples()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.expected = collections.Counter()
        self.failures = collections.Counter()
        self.failure_details = []
        self.progress = {}  # thread -> (ops, last op time)
        self.options_lock = threading.Lock()
        self.leaked = []  # --inject-leak

    # -- setup ------------------------------------------------------------------
    def _setup_numba(self):
        if self.emulated:
            self.skipped["numba"] = "the host emulation of the CUDA driver runs no kernel (Numba needs a real GPU)"
            return
        try:
            from numba import cuda as nb_cuda
        except Exception as e:  # noqa: BLE001
            self.skipped["numba"] = f"numba.cuda is not importable: {e}"
            return
        if not nb_cuda.is_available():
            self.skipped["numba"] = "numba.cuda reports no usable GPU"
            return
        import warnings

        # one NumbaPerformanceWarning a launch ("Grid size N will likely
        # result in GPU under-utilization"): small grids are the point here
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")

        @nb_cuda.jit("void(uint8[:], uint8)")
        def add_u8(a, k):
            i = nb_cuda.grid(1)
            if i < a.size:
                a[i] = a[i] + k

        @nb_cuda.jit("void(int64[:], int64[:])")
        def times_three(src, dst):
            i = nb_cuda.grid(1)
            if i < src.size:
                dst[i] = src[i] * 3

        # Launch each kernel once here, so that no worker thread compiles or
        # loads a module; launches are serialized (numba's dispatchers are
        # not what this soak tests), cuarrow's copies around them are not.
        probe = self.ctxs[0].buffer_from_data(np.zeros(8, dtype=np.int64))
        add_u8[1, 8](nb_cuda.as_cuda_array(probe), np.uint8(1))
        times_three[1, 8](nb_cuda.as_cuda_array(probe).view(np.int64), nb_cuda.as_cuda_array(probe).view(np.int64))
        nb_cuda.synchronize()
        del probe
        self.numba = (nb_cuda, add_u8, times_three)
        self.numba_lock = threading.Lock()

    def _setup_samples(self):
        import arrow_samples

        self.samples_mod = arrow_samples
        self.types = arrow_samples.all_types()
        rng = np.random.default_rng(self.args.seed + 1)
        # A fixed set of ready arrays (made before the warm-up, so that the
        # memory they hold is the same at the start and at the end).
        self.cached = []
        for t in self.types:
            n = int(rng.choice([0, 1, 5, 33, 200]))
            arr = arrow_samples.random_array(t, n, rng)
            arr.validate(full=True)
            self.cached.append(arr)

    def start_child(self):
        self.child = IpcChild(self.child_env)

    # -- random choices -----------------------------------------------------------
    def size(self, rng, limit=None):
        limit = self.max_bytes if limit is None else min(limit, self.max_bytes)
        r = rng.random()
        if r < 0.2:
            edges = [e for e in self.edges if e <= limit]
            return int(edges[int(rng.integers(len(edges)))])
        if r < 0.6:
            return int(rng.integers(0, min(limit, 65536) + 1))
        return int(min(limit, 2 ** rng.uniform(0, math.log2(max(limit, 2)))))

    def data(self, rng, n):
        if n <= 64 * 1024 and rng.random() < 0.5:
            return rng.bytes(n)
        start = int(rng.integers(0, len(self.noise) - n + 1))
        return memoryview(self.noise)[start : start + n]

    def ctx(self, rng):
        return self.ctxs[int(rng.integers(self.ndev))]

    def array(self, rng):
        """(type, array): a fresh random array, or a cached one."""
        if rng.random() < 0.5:
            arr = self.cached[int(rng.integers(len(self.cached)))]
            return arr.type, arr
        t = self.types[int(rng.integers(len(self.types)))]
        n = int(rng.choice([0, 1, 2, 17, 64, 300]))
        return t, self.samples_mod.random_array(t, n, rng)

    # -- metrics --------------------------------------------------------------------
    def quiesce(self):
        for _ in range(3):
            gc.collect()
        for c in self.ctxs:
            c.synchronize()
        gc.collect()

    def live_objects(self):
        counts = collections.Counter()
        for o in gc.get_objects():
            mod = getattr(type(o), "__module__", None)
            if isinstance(mod, str) and mod.startswith("cuarrow"):
                counts[f"{mod}.{type(o).__name__}"] += 1
        return counts

    def measure(self, trim=False):
        """(exact, reported): what must not drift, what is only reported."""
        cuda = self.cuda
        self.quiesce()
        exact, reported = {}, {}
        pool = cuda.pinned_pool_stats()
        reported["pinned_pool.pinned_bytes"] = pool["pinned_bytes"]
        reported["pinned_pool.cached_bytes"] = pool["pinned_bytes"] - pool["in_use_bytes"]
        if trim:
            cuda.trim_pinned_pool()
            pool = cuda.pinned_pool_stats()
            exact["pinned_pool.pinned_bytes_after_trim"] = pool["pinned_bytes"]
        exact["pinned_pool.in_use_bytes"] = pool["in_use_bytes"]
        for d, c in enumerate(self.ctxs):
            exact[f"device{d}.bytes_allocated"] = c.bytes_allocated
            if not self.emulated:
                reported[f"device{d}.driver_used_bytes"] = c._ctx.properties["total_memory"] - c._ctx.free_memory()
        for d, c in enumerate(self.ctxs):
            # The context's memory pool (cuarrow's IPC pool by default),
            # as the library reports it.
            pool = c.memory_pool_stats()
            if pool["used_bytes"] is None:
                continue
            exact[f"device{d}.pool_used_bytes"] = pool["used_bytes"]
            reported[f"device{d}.pool_reserved_bytes"] = pool["reserved_bytes"]
            reported[f"device{d}.pool_cached_bytes"] = pool["reserved_bytes"] - pool["used_bytes"]
            if trim:
                c.trim_memory_pool()
                reported[f"device{d}.pool_reserved_bytes_after_trim"] = c.memory_pool_stats()["reserved_bytes"]
        exact["pyarrow.total_allocated_bytes"] = pa.total_allocated_bytes()
        if trim:
            pa.default_memory_pool().release_unused()
        for name, n in sorted(self.live_objects().items()):
            exact[f"live.{name}"] = n
        if self.emu is not None:
            e = self.emu
            for d in range(self.ndev):
                exact[f"emulation.device{d}.allocations"] = int(e.cuarrow_emu_device_allocation_count(d))
                exact[f"emulation.device{d}.bytes_in_use"] = int(e.cuarrow_emu_device_bytes_in_use(d))
                exact[f"emulation.device{d}.primary_ctx_retains"] = int(e.cuarrow_emu_primary_ctx_retain_count(d))
            exact["emulation.host_allocations"] = int(e.cuarrow_emu_host_allocation_count())
            exact["emulation.host_registrations"] = int(e.cuarrow_emu_host_registration_count())
            exact["emulation.ipc_mappings"] = int(e.cuarrow_emu_ipc_mapping_count())
            exact["emulation.streams"] = int(e.cuarrow_emu_stream_count())
            exact["emulation.events"] = int(e.cuarrow_emu_event_count())
            exact["emulation.async_faults"] = int(e.cuarrow_emu_async_fault_count())
        if self.child is not None:
            st = self.child.request("stats")
            for d, b in enumerate(st["bytes_allocated"]):
                exact[f"ipc_child.device{d}.bytes_allocated"] = b
            if st["ipc_mappings"] is not None:
                exact["ipc_child.emulation.ipc_mappings"] = st["ipc_mappings"]
            reported["ipc_child.rss_bytes"] = st["rss"]
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # the same heap trimming at both ends
        except OSError:
            pass
        reported["host.rss_bytes"] = _rss_bytes()
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    reported[f"host.{line.split(':')[0]}_bytes"] = int(line.split()[1]) * 1024
        return exact, reported

    # -- bookkeeping --------------------------------------------------------------------
    def record_failure(self, kind, thread, index, note, exc_text):
        with self.lock:
            self.failures[kind] += 1
            if len(self.failure_details) < 50:
                self.failure_details.append(
                    {"kind": kind, "thread": thread, "op": index, "params": note, "error": exc_text}
                )
        print(f"[soak] FAILURE {kind} (thread {thread}, op {index}, {note}):\n{exc_text}", file=sys.stderr, flush=True)


class Check(AssertionError):
    pass


def same(got, want, what):
    """Exact byte equality of two host buffers (anything with the buffer protocol)."""
    g = np.frombuffer(got, dtype=np.uint8) if len(memoryview(got).cast("B")) else np.empty(0, np.uint8)
    w = np.frombuffer(want, dtype=np.uint8) if len(memoryview(want).cast("B")) else np.empty(0, np.uint8)
    if g.size != w.size:
        raise Check(f"{what}: {g.size} bytes, expected {w.size}")
    if not np.array_equal(g, w):
        first = int(np.argmax(g != w))
        raise Check(f"{what}: bytes differ from offset {first} of {g.size} (got {g[first]}, expected {w[first]})")


def expect(cond, what):
    if not cond:
        raise Check(what)


def arrow_equal(got, want, what):
    if not got.equals(want):
        raise Check(f"{what}: {type(want).__name__} of {want.type if hasattr(want, 'type') else want.schema} differs")


# ---------------------------------------------------------------------------
# Operations: each checks its results exactly; `note` records its parameters
# ---------------------------------------------------------------------------


def op_copy_h2d_d2h(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    n = s.size(rng)
    off = int(rng.choice([0, 0, 1, 7, 64, int(rng.integers(0, 4097))]))
    tail = int(rng.choice([0, 1, 13]))
    note.update(device=ctx.device_number, n=n, off=off, tail=tail)
    data = s.data(rng, n)
    kind = int(rng.integers(5))
    note["source"] = ["bytes", "bytearray", "numpy", "pyarrow", "pinned"][kind]
    if kind == 0:
        src = bytes(data)
    elif kind == 1:
        src = bytearray(data)
    elif kind == 2:
        src = np.frombuffer(data, dtype=np.uint8).copy()
    elif kind == 3:
        src = pa.py_buffer(bytes(data))
    else:
        src = cuda.new_host_buffer(n, device=int(rng.integers(s.ndev)))
        np.frombuffer(src, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    total = off + n + tail
    prefill = total <= 8 * MiB and rng.random() < 0.5
    if prefill:
        background = s.data(rng, total)
        dbuf = ctx.buffer_from_data(background)
    else:
        dbuf = ctx.new_buffer(total)
    expect(dbuf.size == total, f"new buffer has size {dbuf.size}, expected {total}")
    copied = dbuf.copy_from_host(src, position=off, nbytes=n)
    expect(copied == n, f"copy_from_host returned {copied}, expected {n}")
    how = int(rng.integers(6))
    note["readback"] = ["pinned", "pool", "bytearray", "numpy", "slice", "to_pybytes"][how]
    if how == 0:
        out = dbuf.copy_to_host(position=off, nbytes=n)
    elif how == 1:
        out = dbuf.copy_to_host(position=off, nbytes=n, memory_pool=pa.default_memory_pool())
    elif how == 2:
        out = bytearray(n + 3)
        dbuf.copy_to_host(position=off, nbytes=n, buf=out)
        expect(out[n:] == b"\0\0\0", "copy_to_host wrote past nbytes")
        out = memoryview(out)[:n]
    elif how == 3:
        out = np.zeros(n, dtype=np.uint8)
        res = dbuf.copy_to_host(position=off, buf=out)  # nbytes=-1: as much as fits
        expect(res is out, "copy_to_host(buf=) did not return buf")
    elif how == 4:
        view = dbuf.slice(off, n) if off < total else dbuf.slice(0, 0)
        expect(view.size == n, f"slice has size {view.size}, expected {n}")
        expect(view.address == dbuf.address + (off if off < total else 0) or n == 0, "slice address")
        out = view.copy_to_host()
    else:
        out = dbuf.to_pybytes()[off : off + n]
    same(out, data, "device copy read back")
    if prefill:
        whole = dbuf.copy_to_host()
        expected = bytearray(background)
        expected[off : off + n] = data
        same(whole, expected, "bytes around the copied range")


def op_copy_d2d(s, rng, note):
    a, b = s.ctx(rng), s.ctx(rng)
    n = s.size(rng)
    o1, o2 = int(rng.integers(0, 100)), int(rng.integers(0, 100))
    note.update(src_device=a.device_number, dst_device=b.device_number, n=n, o1=o1, o2=o2)
    data = s.data(rng, n)
    src_full = a.buffer_from_data(bytes(o1) + bytes(data))
    src = src_full.slice(o1) if n else src_full.slice(0, 0)
    expect(src.size == n, f"source slice has {src.size} bytes, expected {n}")
    dst = b.new_buffer(o2 + n)
    if rng.random() < 0.5:
        copied = dst.copy_from_device(src, position=o2, nbytes=n)
    else:
        copied = dst.copy_from_device(src, position=o2)  # -1: all that fits
    expect(copied == n, f"copy_from_device returned {copied}, expected {n}")
    same(dst.copy_to_host(position=o2, nbytes=n), data, "device-to-device copy")
    if rng.random() < 0.3:
        # and back, into a buffer of the first device, through another slice
        back = a.new_buffer(n)
        back.copy_from_device(dst[o2:])
        expect(back.equals(src), "round trip through two devices")


def op_pinned(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    n = s.size(rng, 16 * MiB)
    pdev = int(rng.integers(s.ndev))
    note.update(device=ctx.device_number, n=n, pinned_device=pdev)
    data = s.data(rng, n)
    hb = cuda.new_host_buffer(n, device=pdev)
    expect(hb.size == n and hb.is_cpu, f"new_host_buffer: {hb!r}")
    np.frombuffer(hb, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    if rng.random() < 0.5:
        dbuf = ctx.buffer_from_data(hb)
    else:
        dbuf = ctx.new_buffer(n)
        dbuf.copy_from_host(hb)
    out = cuda.new_host_buffer(n + 8, device=int(rng.integers(s.ndev)))
    np.frombuffer(out, dtype=np.uint8)[:] = 0xAB
    dbuf.copy_to_host(buf=out, nbytes=n)
    same(out.slice(0, n), data, "pinned round trip")
    expect(out.slice(n).to_pybytes() == b"\xab" * 8, "copy into pinned memory wrote past nbytes")
    if n > 2:
        k = int(rng.integers(1, n))
        same(hb.slice(k), bytes(data)[k:], "pinned slice")
        part = dbuf.copy_to_host(position=k, buf=out.slice(0, n - k))
        same(part, bytes(data)[k:], "copy into a pinned slice")


def op_reader_writer(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    n = s.size(rng, 4 * MiB)
    note.update(device=ctx.device_number, n=n)
    data = bytes(s.data(rng, n))
    dbuf = ctx.new_buffer(n)
    w = cuda.BufferWriter(dbuf)
    bsize = int(rng.choice([0, 1, 100, 4096, 1 << 16]))
    w.buffer_size = bsize
    note["buffer_size"] = bsize
    pos = 0
    while pos < n:
        k = int(min(n - pos, rng.integers(1, max(2, n // 3 + 2))))
        if rng.random() < 0.2:
            w.writeat(pos, data[pos : pos + k])
            w.seek(pos + k)
        else:
            expect(w.write(data[pos : pos + k]) == k, "write count")
        pos += k
        expect(w.tell() == pos, f"writer at {w.tell()}, expected {pos}")
    w.flush()
    expect(w.num_bytes_buffered == 0, "bytes still buffered after flush")
    if n and rng.random() < 0.3:
        # rewrite a piece through seek + write
        p = int(rng.integers(0, n))
        piece = bytes(s.data(rng, min(n - p, 1000)))
        w.seek(p)
        w.write(piece)
        data = data[:p] + piece + data[p + len(piece) :]
    w.close()
    r = cuda.BufferReader(dbuf)
    expect(r.size() == n, "reader size")
    got = bytearray()
    while True:
        k = int(rng.integers(1, max(2, n // 2 + 2)))
        chunk = r.read(k)
        if not chunk:
            break
        got += chunk
    same(got, data, "BufferReader.read")
    if n:
        o = int(rng.integers(0, n))
        k = int(rng.integers(0, n - o + 1))
        same(r.read_at(k, o), data[o : o + k], "read_at")
        r.seek(o)
        into = bytearray(k)
        expect(r.readinto(into) == k, "readinto count")
        same(into, data[o : o + k], "readinto")
        r.seek(-k if k else 0, 2)
        view = r.read_buffer(k)
        expect(isinstance(view, cuda.CudaBuffer), "read_buffer gives a CudaBuffer")
        same(view.copy_to_host(), data[n - k :], "read_buffer")
    r.close()


def _typed_object(s, rng, arr, note):
    """arr as an array, a sliced array, a chunked array, a batch or a table."""
    shape = int(rng.integers(5))
    note["shape"] = ["array", "sliced", "chunked", "batch", "table"][shape]
    if shape == 0:
        return arr
    if shape == 1:
        o = int(rng.integers(0, len(arr) + 1))
        return arr.slice(o, int(rng.integers(0, len(arr) - o + 1)))
    if shape == 2:
        cut = int(rng.integers(0, len(arr) + 1))
        return pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], type=arr.type)
    _, other = s.array(rng)
    m = min(len(arr), len(other))
    cols = [arr.slice(0, m), other.slice(0, m), pa.array(np.arange(m, dtype=np.int64))]
    batch = pa.record_batch(cols, names=["a", "b", "i"])
    if shape == 3:
        return batch
    cut = int(rng.integers(0, m + 1))
    return pa.Table.from_batches([batch.slice(0, cut), batch.slice(cut)])


def op_typed_roundtrip(s, rng, note):
    cuda = s.cuda
    t, arr = s.array(rng)
    ctx = s.ctx(rng)
    note.update(type=str(t), length=len(arr), device=ctx.device_number)
    obj = _typed_object(s, rng, arr, note)
    stream = cuda.Stream(ctx) if rng.random() < 0.3 else None
    dev = cuda.to_device(obj, context=ctx if rng.random() < 0.5 else ctx.device_number, stream=stream)
    expect(dev.device_id == ctx.device_number, f"on device {dev.device_id}, expected {ctx.device_number}")
    expect(len(dev) == len(obj), f"length {len(dev)}, expected {len(obj)}")
    host = dev.to_host(stream=stream if rng.random() < 0.5 else None)
    arrow_equal(host, obj, "to_device/to_host")
    if isinstance(obj, pa.Array):
        expect(dev.type == obj.type, f"type {dev.type}, expected {obj.type}")
        expect(dev.null_count == obj.null_count, f"null_count {dev.null_count}, expected {obj.null_count}")
        host.validate(full=True)
    if rng.random() < 0.3:
        other = s.ctx(rng)
        note["then_device"] = other.device_number
        moved = cuda.to_device(dev, context=other)
        expect(moved.device_id == other.device_number, "device-to-device to_device")
        arrow_equal(moved.to_host(), obj, "to_device of device data")


def op_typed_slice(s, rng, note):
    cuda = s.cuda
    t, arr = s.array(rng)
    ctx = s.ctx(rng)
    note.update(type=str(t), length=len(arr), device=ctx.device_number)
    obj = _typed_object(s, rng, arr, note)
    dev = cuda.to_device(obj, context=ctx)
    n = len(obj)
    for _ in range(int(rng.integers(1, 4))):
        o = int(rng.integers(0, n + 1))
        k = int(rng.integers(0, n - o + 1))
        note["slice"] = (o, k)
        if rng.random() < 0.5:
            part = dev.slice(o, k)
        else:
            part = dev[o : o + k]
        want = obj.slice(o, k)
        expect(len(part) == k, f"slice length {len(part)}, expected {k}")
        arrow_equal(part.to_host(), want, "device slice")
        if rng.random() < 0.3:
            moved = cuda.to_device(part, context=s.ctx(rng))
            arrow_equal(moved.to_host(), want, "to_device of a device slice")
        dev = part if rng.random() < 0.3 else dev  # slices of slices
        if dev is part:
            obj, n = want, k
    if isinstance(obj, (pa.Array, pa.RecordBatch)) and rng.random() < 0.5:
        view = cuda.from_device(dev)
        arrow_equal(view.to_host(), obj, "from_device view")


def op_ipc_message(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    _, a = s.array(rng)
    _, b = s.array(rng)
    m = min(len(a), len(b))
    batch = pa.record_batch([a.slice(0, m), b.slice(0, m)], names=["a", "b"])
    note.update(device=ctx.device_number, schema=str(batch.schema).replace("\n", "; "), rows=m)
    has_dict = any(pa.types.is_dictionary(f.type) for f in batch.schema) or "dictionary" in str(batch.schema)
    if has_dict:
        batch = pa.record_batch([pa.array(np.arange(m, dtype=np.int32))], names=["i"])
    dbuf = cuda.serialize_record_batch(batch, ctx)
    # Equal bytes only for unsliced data: Arrow pads a slice's buffers from
    # the array's own memory, cuarrow writes the slice (docs/known-gaps.md).
    arrow_equal(pa.ipc.read_record_batch(dbuf.copy_to_host(), batch.schema), batch, "serialize_record_batch")
    if rng.random() < 0.5:
        back = cuda.read_record_batch(dbuf, batch.schema)
    else:
        msg = cuda.read_message(cuda.BufferReader(dbuf))
        back = cuda.read_record_batch(msg, batch.schema)
    arrow_equal(back.to_host(), batch, "IPC message through device memory")


def op_streams_events(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    n = s.size(rng, 8 * MiB)
    note.update(device=ctx.device_number, n=n)
    data = s.data(rng, n)
    s1 = cuda.Stream(ctx)
    s2 = cuda.Stream(ctx, non_blocking=bool(rng.random() < 0.5))
    timing = rng.random() < 0.5
    start = cuda.Event(ctx, timing=timing)
    start.record(s1)
    dbuf = ctx.buffer_from_data(data, stream=s1)
    if rng.random() < 0.5:
        done = s1.record()  # a new event, without timing
        timing = False
    else:
        done = cuda.Event(ctx, timing=timing)
        done.record(s1)
    s2.wait_event(done)
    dst = ctx.new_buffer(n)
    dst.copy_from_device(dbuf, stream=s2)
    out = dst.copy_to_host(stream=s2)
    same(out, data, "copies ordered by streams and events")
    done.synchronize()
    expect(done.query(), "a synchronized event reports not done")
    if timing:
        ms = start.elapsed_time(done)
        expect(ms >= 0 and math.isfinite(ms), f"elapsed_time {ms}")
    if rng.random() < 0.5:
        _, arr = s.array(rng)
        dev = cuda.to_device(arr, context=ctx, stream=s1)
        s2.wait_event(s1.record())
        arrow_equal(dev.to_host(stream=s2), arr, "typed copy on streams")
    s1.synchronize()
    s2.synchronize()


def op_ipc(s, rng, note):
    ctx = s.ctx(rng)
    n = s.size(rng, 4 * MiB)
    off = int(rng.choice([0, 0, 1, 100, 4096]))
    open_dev = int(rng.integers(s.ndev))
    opens = int(rng.choice([1, 1, 2, 3]))
    note.update(device=ctx.device_number, n=n, off=off, open_device=open_dev, opens=opens)
    data = bytes(s.data(rng, n))
    full = ctx.new_buffer(off + n)
    full.copy_from_host(data, position=off)
    buf = full.slice(off, n) if n else full.slice(0, 0)
    handle = buf.export_for_ipc()
    wire = handle.serialize().to_pybytes()
    again = s.cuda.IpcMemHandle.from_buffer(wire)
    expect((again.size, again.offset, again.device_number) == (handle.size, handle.offset, handle.device_number),
           "serialized handle does not round-trip")  # fmt: skip
    write = None
    if n and rng.random() < 0.5:
        p = int(rng.integers(0, n))
        write = (p, bytes(s.data(rng, min(n - p, 512))))
    size, crc, hsize, hoff, hdev = s.child.request("open", wire, open_dev, opens, write)
    expect(size == n and crc == zlib.crc32(data), f"the child read {size} bytes (crc {crc:#x}), expected {n}")
    expect((hsize, hoff, hdev) == (handle.size, handle.offset, handle.device_number), "the child's handle")
    if write is not None:
        p, w = write
        data = data[:p] + w + data[p + len(w) :]
    same(buf.copy_to_host(), data, "the buffer after the child wrote into it")
    del handle, again


def op_numba(s, rng, note):
    nb_cuda, add_u8, times_three = s.numba
    ctx = s.ctxs[0]
    n = int(rng.integers(1, 1 << 20))
    k = int(rng.integers(1, 200))
    note.update(n=n, k=k)
    data = np.frombuffer(s.data(rng, n), dtype=np.uint8)
    cbuf = ctx.buffer_from_data(data)
    view = nb_cuda.as_cuda_array(cbuf)
    threads = 256
    with s.numba_lock:
        add_u8[(n + threads - 1) // threads, threads](view, np.uint8(k))
        nb_cuda.synchronize()
    same(cbuf.copy_to_host(), (data + np.uint8(k)).astype(np.uint8), "Numba kernel over a CudaBuffer")
    m = int(rng.integers(1, 100000))
    values = np.arange(m, dtype=np.int64) - m // 2
    dev = s.cuda.to_device(pa.array(values))
    out = ctx.new_buffer(8 * m)
    src = nb_cuda.as_cuda_array(dev)
    dst = nb_cuda.as_cuda_array(out).view(np.int64)
    with s.numba_lock:
        times_three[(m + threads - 1) // threads, threads](src, dst)
        nb_cuda.synchronize()
    same(out.copy_to_host(), values * 3, "Numba kernel over a typed device array")


def op_transfer_options(s, rng, note):
    cuda = s.cuda
    d = s.defaults
    choice = {
        "staging_threshold_bytes": int(rng.choice([d["staging_threshold_bytes"], 64 * 1024, 0, 1 << 30])),
        "staging_chunk_bytes": int(rng.choice([d["staging_chunk_bytes"], 1 * MiB, 256 * 1024])),
    }
    note.update(choice)
    with s.options_lock:
        cuda.set_transfer_options(**choice)
        now = cuda.transfer_options()
    for k in choice:
        # another thread may have changed them since; only a sane value is asked for
        expect(isinstance(now[k], int) and now[k] >= 0, f"{k} = {now[k]!r}")


def _expect_error(exc_types, fn, what):
    try:
        fn()
    except exc_types:
        return
    except Exception as e:  # noqa: BLE001
        raise Check(f"{what}: raised {type(e).__name__}: {e}, expected {exc_types}") from e
    raise Check(f"{what}: no error, expected {exc_types}")


def op_errors(s, rng, note):
    cuda = s.cuda
    ctx = s.ctx(rng)
    n = int(rng.integers(1, 5000))
    dbuf = ctx.buffer_from_data(bytes(s.data(rng, n)))
    cases = {
        "copy_to_host position past end": (
            ValueError,
            lambda: dbuf.copy_to_host(position=n + 1 + int(rng.integers(1000))),
        ),
        "copy_to_host nbytes past end": (ValueError, lambda: dbuf.copy_to_host(position=1, nbytes=n)),
        "copy_to_host into a too small buf": (ValueError, lambda: dbuf.copy_to_host(nbytes=n, buf=bytearray(n - 1))),
        "copy_to_host into read-only memory": (ValueError, lambda: dbuf.copy_to_host(nbytes=1, buf=b"x" * n)),
        "copy_from_host past end": (ValueError, lambda: dbuf.copy_from_host(bytes(n + 1), nbytes=n + 1)),
        "copy_from_host position past end": (ValueError, lambda: dbuf.copy_from_host(b"x", position=n + 1)),
        "copy_from_host negative nbytes": (ValueError, lambda: dbuf.copy_from_host(b"x", nbytes=-5)),
        "copy_from_host of device memory": (TypeError, lambda: dbuf.copy_from_host(dbuf)),
        "copy_from_device of host memory": (TypeError, lambda: dbuf.copy_from_device(b"abc")),
        "copy_from_device past end": (ValueError, lambda: dbuf.copy_from_device(dbuf, position=1, nbytes=n)),
        "slice offset past end": (ValueError, lambda: dbuf.slice(n + int(rng.integers(0, 100)))),
        "slice negative length": (ValueError, lambda: dbuf.slice(0, -1)),
        "index past end": (IndexError, lambda: dbuf[n]),
        "step slice": (IndexError, lambda: dbuf[::2]),
        "new_host_buffer on a missing device": (pa.ArrowInvalid, lambda: cuda.new_host_buffer(8, device=s.ndev + 3)),
        "open_ipc_buffer of a pool handle without its pool": (
            pa.ArrowInvalid,
            lambda: ctx.open_ipc_buffer(cuda.IpcMemHandle.from_buffer(dbuf.export_for_ipc().serialize())),
        ),
        "to_device of a NumPy array": (TypeError, lambda: cuda.to_device(np.arange(3))),
        "from_device of host data": (TypeError, lambda: cuda.from_device(pa.array([1, 2]))),
        "BufferWriter past end": (OSError, lambda: cuda.BufferWriter(dbuf).write(bytes(n + 1))),
        "BufferWriter writeat past end": (OSError, lambda: cuda.BufferWriter(dbuf).writeat(n + 1, b"x")),
        "BufferReader read_at past end": (OSError, lambda: cuda.BufferReader(dbuf).read_at(1, n + 1)),
        "BufferReader seek past end": (OSError, lambda: cuda.BufferReader(dbuf).seek(n + 1)),
        "numpy view of device memory": (TypeError, lambda: np.asarray(dbuf)),
        "bytes of device memory": (BufferError, lambda: bytes(dbuf)),
        "Context on a missing device": (ValueError, lambda: cuda.Context(s.ndev + 5)),
        "device slice past end": (IndexError, lambda: cuda.to_device(pa.array([1, 2, 3]), context=ctx)[7]),
        "device array with nulls as a tensor": (
            TypeError,
            lambda: cuda.to_device(pa.array([1, None]), context=ctx).__cuda_array_interface__,
        ),
        "out of device memory": (cuda.CudaOutOfMemoryError, lambda: ctx.new_buffer(1 << 62)),
        "wrong device: stream of another device": (
            pa.ArrowInvalid,
            lambda: dbuf.copy_to_host(nbytes=1, stream=cuda.Stream(s.ctxs[(ctx.device_number + 1) % s.ndev])),
        ),
    }
    if s.ndev < 2:
        del cases["wrong device: stream of another device"]
    names = sorted(cases)
    name = names[int(rng.integers(len(names)))]
    note["case"] = name
    exc_types, fn = cases[name]
    _expect_error(exc_types, fn, name)
    # the buffer is still intact after the refusal
    expect(dbuf.size == n, "buffer size changed by a refused operation")
    with s.lock:
        s.expected[name] += 1


OPS = {
    "copy_h2d_d2h": (op_copy_h2d_d2h, 20),
    "copy_d2d": (op_copy_d2d, 10),
    "pinned": (op_pinned, 8),
    "reader_writer": (op_reader_writer, 6),
    "typed_roundtrip": (op_typed_roundtrip, 14),
    "typed_slice": (op_typed_slice, 8),
    "ipc_message": (op_ipc_message, 4),
    "streams_events": (op_streams_events, 8),
    "ipc": (op_ipc, 4),
    "numba": (op_numba, 6),
    "transfer_options": (op_transfer_options, 1),
    "errors": (op_errors, 8),
}


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


def worker(s, index, seed, phase, kinds, weights):
    rng = np.random.default_rng([seed, index, phase])
    ops = 0
    s.progress[index] = (0, time.monotonic(), None)
    while not s.stop.is_set():
        kind = kinds[int(rng.choice(len(kinds), p=weights))]
        fn = OPS[kind][0]
        note = {}
        s.progress[index] = (ops, time.monotonic(), kind)
        try:
            fn(s, rng, note)
            with s.lock:
                s.counts[kind] += 1
        except BaseException:  # noqa: BLE001 - every failure is reported
            s.record_failure(kind, index, ops, note, traceback.format_exc())
        ops += 1
        del note
        if s.args.inject_leak and ops % 20 == 0 and phase >= 1:
            # the self-test of the checks: a device buffer and a pinned result kept
            leak = s.ctxs[0].buffer_from_data(b"leak" * 256)
            with s.lock:
                s.leaked.append((leak, leak.copy_to_host()))
    s.progress[index] = (ops, time.monotonic(), None)


def run_phase(s, seconds, threads, phase, kinds, weights, log):
    s.stop.clear()
    ts = [
        threading.Thread(target=worker, args=(s, i, s.args.seed, phase, kinds, weights), name=f"soak-{i}", daemon=True)
        for i in range(threads)
    ]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    deadline = t0 + seconds
    next_report = t0 + s.args.report_every
    while time.monotonic() < deadline:
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        if time.monotonic() >= next_report:
            next_report += s.args.report_every
            with s.lock:
                done = sum(s.counts.values())
                failed = sum(s.failures.values())
            log(
                f"[soak] {phase}: {time.monotonic() - t0:6.0f} s, {done} ops, {failed} failures, "
                f"rss {_rss_bytes() / MiB:.0f} MiB"
            )
    s.stop.set()
    hung = []
    join_deadline = time.monotonic() + s.args.join_timeout
    for t in ts:
        t.join(max(0.0, join_deadline - time.monotonic()))
        if t.is_alive():
            hung.append(t.name)
    return time.monotonic() - t0, hung


def fix_malloc_threshold(threshold=128 * 1024):
    """Make glibc serve every allocation of `threshold` bytes or more with its
    own mmap, given back to the system when freed.

    By default glibc raises its mmap threshold each time such a block is
    freed, up to 32 MiB, and from then on keeps freed blocks of up to that
    size in its per-thread arenas, resident: with 16 threads copying buffers
    of up to 32 MiB that retention alone grows RSS by hundreds of MiB (even
    after malloc_trim), which would hide a real leak.  Fixing the threshold
    (mallopt M_MMAP_THRESHOLD) turns that adaptation off, so that RSS
    measures live memory.  Returns True when it could."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_MMAP_THRESHOLD = -3
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=60, help="length of the measured phase")
    p.add_argument("--warmup", type=float, default=None, help="warm-up seconds (default: 10%% of --seconds, 3..30)")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--summary", default=None, help="write the summary (markdown) here too")
    p.add_argument("--max-bytes", type=int, default=32 * MiB, help="largest copy (default 32 MiB)")
    p.add_argument("--rss-mib", type=float, default=64, help="allowed host RSS growth: this many MiB + 5%%")
    p.add_argument(
        "--checkpoint-every",
        type=float,
        default=60.0,
        help="stop all threads about every this many seconds to compare the figures and sample RSS "
        "(0: only at the end)",
    )
    p.add_argument("--report-every", type=float, default=10.0, help="progress line every this many seconds")
    p.add_argument("--join-timeout", type=float, default=180.0, help="seconds threads get to finish their last op")
    p.add_argument(
        "--keep-malloc-defaults",
        action="store_true",
        help="leave glibc's dynamic mmap threshold on (then RSS also measures the allocator's retention)",
    )
    p.add_argument(
        "--inject-leak",
        action="store_true",
        help="keep a device buffer and a pinned copy every 20 ops of each thread (to see the checks fail)",
    )
    p.add_argument("--only", default=None, help="comma-separated operation kinds to run (default: all)")
    args = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    faulthandler.enable()
    if not args.keep_malloc_defaults:
        fix_malloc_threshold()
    started = time.time()
    s = Soak(args)
    cuda = s.cuda
    kinds = [k for k in OPS if args.only is None or k in args.only.split(",")]
    if "numba" in kinds and s.numba is None:
        kinds.remove("numba")
    if "ipc" in kinds:
        s.start_child()
    w = np.array([OPS[k][1] for k in kinds], dtype=float)
    weights = w / w.sum()
    info = cuda.driver_info()
    log(
        f"[soak] driver: {'host emulation' if info['emulated'] else 'real'} ({info['path']}), {s.ndev} device(s), "
        f"{args.threads} threads, {args.seconds:.0f} s, seed {args.seed}, max copy {args.max_bytes} B"
    )
    for k, why in s.skipped.items():
        log(f"[soak] skipped {k}: {why}")

    warmup = args.warmup if args.warmup is not None else min(30.0, max(3.0, args.seconds * 0.1))
    # The last resort against a deadlock that no join timeout can reach: all
    # threads' stacks, then exit.
    faulthandler.dump_traceback_later(warmup + args.seconds + 2 * args.join_timeout + 300, exit=True)
    warm_s, hung = run_phase(s, warmup, args.threads, 0, kinds, weights, log)
    s.options_restore = None
    cuda.set_transfer_options(**s.defaults)
    warm_counts = dict(s.counts)
    warm_failures = dict(s.failures)
    start_exact, start_reported = s.measure(trim=True)
    log(
        f"[soak] warm-up: {warm_s:.1f} s, {sum(warm_counts.values())} ops; "
        f"start: rss {start_reported['host.rss_bytes'] / MiB:.0f} MiB"
    )
    s.counts.clear()
    s.expected.clear()
    measured_s = 0.0
    # The measured phase in segments: between two, every thread stops, and
    # the exact figures are compared with the start there too (a leak that
    # something later frees would otherwise hide), and RSS is sampled, so
    # that its course (a plateau, or steady growth) is in the report.
    segments = max(1, int(round(args.seconds / args.checkpoint_every))) if args.checkpoint_every > 0 else 1
    checkpoints = []
    checkpoint_drift = {}
    for seg in range(segments):
        if hung:
            break
        seg_s, hung = run_phase(s, args.seconds / segments, args.threads, 1 + seg, kinds, weights, log)
        measured_s += seg_s
        if hung or seg == segments - 1:
            break
        cuda.set_transfer_options(**s.defaults)
        ex, rep = s.measure(trim=True)
        for k in sorted(set(start_exact) | set(ex)):
            if start_exact.get(k, 0) != ex.get(k, 0):
                checkpoint_drift.setdefault(k, []).append(
                    {"seconds": round(measured_s, 1), "start": start_exact.get(k, 0), "value": ex.get(k, 0)}
                )
        checkpoints.append(
            {"seconds": round(measured_s, 1), "ops": sum(s.counts.values()), "rss": rep["host.rss_bytes"],
             "drift": sum(1 for k in ex if start_exact.get(k, 0) != ex[k])}
        )  # fmt: skip
        log(f"[soak] checkpoint at {measured_s:.0f} s: rss {rep['host.rss_bytes'] / MiB:.1f} MiB, "
            f"{checkpoints[-1]['drift']} figures differ from the start")  # fmt: skip
    if hung:
        log(f"[soak] HUNG threads: {hung}; their stacks:")
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        sys.stdout.flush()
    cuda.set_transfer_options(**s.defaults)
    end_exact, end_reported = s.measure(trim=True) if not hung else ({}, {"host.rss_bytes": _rss_bytes()})

    drift = {}
    for k in sorted(set(start_exact) | set(end_exact)):
        a, b = start_exact.get(k, 0), end_exact.get(k, 0)
        if a != b:
            drift[k] = {"start": a, "end": b, "delta": b - a}
    if hung:
        drift = {}
    rss0, rss1 = start_reported["host.rss_bytes"], end_reported["host.rss_bytes"]
    rss_bound = int(args.rss_mib * MiB + 0.05 * rss0)
    rss_ok = rss1 - rss0 <= rss_bound
    child_exit = s.child.close() if s.child is not None else None
    failures = sum(s.failures.values())
    if hung:
        checkpoint_drift = {}
    passed = (
        not hung
        and failures == 0
        and not drift
        and not checkpoint_drift
        and rss_ok
        and sum(warm_failures.values()) == 0
    )
    checkpoints.append(
        {"seconds": round(measured_s, 1), "ops": sum(s.counts.values()), "rss": rss1, "drift": len(drift)}
    )
    report = {
        "passed": passed,
        "driver": "emulated" if s.emulated else "real",
        "driver_path": info["path"],
        "driver_version": info["version"],
        "devices": s.ndev,
        "device_name": s.ctxs[0].device_name,
        "threads": args.threads,
        "seed": args.seed,
        "max_bytes": args.max_bytes,
        "warmup_seconds": round(warm_s, 1),
        "seconds": round(measured_s, 1),
        "wall_seconds": round(time.time() - started, 1),
        "ops_total": sum(s.counts.values()),
        "ops": dict(sorted(s.counts.items())),
        "warmup_ops": dict(sorted(warm_counts.items())),
        "failures_total": failures + sum(warm_failures.values()),
        "failures": dict(sorted(s.failures.items())),
        "warmup_failures": warm_failures,
        "failure_details": s.failure_details,
        "expected_errors_total": sum(s.expected.values()),
        "expected_errors": dict(sorted(s.expected.items())),
        "skipped": s.skipped,
        "hung_threads": hung,
        "drift": drift,
        "start": start_exact,
        "end": end_exact,
        "reported_start": start_reported,
        "reported_end": end_reported,
        "pinned_pool_cached_bytes_end": end_reported.get("pinned_pool.cached_bytes"),
        "rss": {"start": rss0, "end": rss1, "growth": rss1 - rss0, "bound": rss_bound, "ok": rss_ok},
        "checkpoints": checkpoints,
        "checkpoint_drift": checkpoint_drift,
        "ipc_child_exit": child_exit,
        "host": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"pyarrow {pa.__version__}, numpy {np.__version__}",
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    text = summary(report)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text + "\n")
    log(text)
    sys.stdout.flush()
    sys.stderr.flush()
    code = 2 if hung else (0 if passed else 1)
    faulthandler.cancel_dump_traceback_later()
    if hung:
        os._exit(code)  # hung threads would keep the process alive
    return code


def summary(r):
    lines = [
        f"# Soak: {'PASS' if r['passed'] else 'FAIL'}",
        "",
        f"- driver: {r['driver']} ({r['device_name']}, {r['devices']} device(s)), {r['threads']} threads, "
        f"{r['seconds']} s measured after {r['warmup_seconds']} s of warm-up, seed {r['seed']}, "
        f"copies up to {r['max_bytes']} B",
        f"- operations: {r['ops_total']} ({r['ops_total'] / max(r['seconds'], 1e-9):.0f}/s); "
        + ", ".join(f"{k} {v}" for k, v in r["ops"].items()),
        f"- failures: {r['failures_total']}"
        + (f" ({r['failures']}, warm-up {r['warmup_failures']})" if r["failures_total"] else ""),
        f"- expected errors raised: {r['expected_errors_total']} of {len(r['expected_errors'])} kinds",
        "- drift (after warm-up vs checkpoints and end, must be none): "
        + (
            "none"
            if not r["drift"] and not r["checkpoint_drift"]
            else ", ".join(f"{k} {v['start']} -> {v['end']}" for k, v in r["drift"].items()) or "at checkpoints"
        ),
        f"- compared exactly: {len(r['start'])} figures (device bytes, device pools' used bytes, pinned pool in use, "
        "pyarrow bytes, live objects" + (", emulation counts" if r["driver"] == "emulated" else "") + ", IPC child)",
        f"- pinned pool cached at the end (trimmed before comparing): {r['pinned_pool_cached_bytes_end']} B",
        f"- host RSS: {r['rss']['start'] / MiB:.1f} -> {r['rss']['end'] / MiB:.1f} MiB "
        f"(growth {r['rss']['growth'] / MiB:+.1f} MiB, bound {r['rss']['bound'] / MiB:.1f} MiB: "
        f"{'ok' if r['rss']['ok'] else 'EXCEEDED'})",
    ]
    cached = {k: v for k, v in r["reported_end"].items() if k.endswith("pool_cached_bytes")}
    if cached:
        lines.append(
            "- device memory pools cached at the end (trimmed before comparing): "
            + ", ".join(f"{k.split('.')[0]} {v} B" for k, v in cached.items())
        )
    if len(r["checkpoints"]) > 1:
        lines.append(
            "- host RSS at each checkpoint (s: MiB): "
            + ", ".join(f"{c['seconds']:.0f}: {c['rss'] / MiB:.1f}" for c in r["checkpoints"])
        )
    if r["checkpoint_drift"]:
        lines.append(f"- DRIFT at checkpoints: {r['checkpoint_drift']}")
    used = {k: v for k, v in r["reported_end"].items() if k.endswith("driver_used_bytes")}
    for k, v in used.items():
        v0 = r["reported_start"].get(k)
        lines.append(f"- {k} (driver's view, pools included): {v0} -> {v}")
    for k, why in r["skipped"].items():
        lines.append(f"- skipped {k}: {why}")
    if r["hung_threads"]:
        lines.append(f"- HUNG threads: {r['hung_threads']}")
    for d in r["failure_details"][:5]:
        last = d["error"].strip().splitlines()[-1]
        lines.append(f"- failure {d['kind']} (thread {d['thread']}, op {d['op']}, {d['params']}): {last}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
