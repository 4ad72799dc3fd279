#!/usr/bin/env python3
"""cuarrow's transfer benchmark: cuarrow beside CuPy, Numba, PyTorch and raw cudaMemcpy.

One command, one run, every figure side by side::

    python3 bench/bench.py                 # full sizes (about 5 minutes on an H200)
    python3 bench/bench.py --quick         # smaller sizes, fewer samples (under a minute)
    python3 bench/bench.py --out DIR --sizes 4,4K,1M,64M,1G

Cases: host to device and device to host from pageable and pinned memory,
device to device, for each size; a mixed ~1 GiB ``pa.Table``, a table of
1000 columns of 1 MiB and one of 1000 columns of 4 KiB, to the device and back.  Every case is warmed up, then
called repeatedly; each call is timed on its own (``perf_counter_ns``) and
the median, min and max are reported in GB/s (1 GB = 1e9 bytes) and in µs
per call.  Every call has synchronous semantics: cuarrow's calls without
``stream=`` are synchronous; every other library's call is followed by a
synchronization of the stream it used, inside the timed region.

Output: progress on stderr, the result table on stdout, and in the output
folder ``results.json`` (machine, versions, each case's summary: median,
min, max, 10th and 90th percentiles, number of calls), ``results.txt`` (the
table), ``summary.md`` (the targets) and ``results.png`` (the plot); with
``--samples``, ``samples.json`` (every call's seconds: large, never
committed).  ``--report-from DIR`` writes the last three again from DIR's
results.json.  See bench/README.md for what each case measures and how to
read the ratios.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import importlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

FULL_SIZES = [4, 4 * KiB, MiB, 64 * MiB, GiB]
QUICK_SIZES = [4, 4 * KiB, MiB, 64 * MiB]

GROUPS = ["H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned", "D2D"]
TABLE_GROUPS = ["table→device", "table→host"]
SECTIONS = {"h2d": GROUPS[:2], "d2h": GROUPS[2:4], "d2d": GROUPS[4:], "tables": TABLE_GROUPS}
PEERS = ("cupy", "numba", "torch")
EMULATION_BANNER = (
    "*** EMULATION: cuarrow runs on its host emulation of the CUDA driver. 'Device' memory is host\n"
    "*** memory, so every figure below measures host memcpy, not a GPU: the numbers are meaningless\n"
    "*** as performance figures (this run only checks the benchmark end to end)."
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_size(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            v = n / unit
            return f"{v:.0f} {name}" if v == int(v) else f"{v:.2f} {name}"
    return f"{n} B"


def parse_size(text: str) -> int:
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = 1
    if t and t[-1] in "KMG":
        mult = {"K": KiB, "M": MiB, "G": GiB}[t[-1]]
        t = t[:-1]
    value = int(float(t) * mult)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def parse_size_or_zero(text: str) -> int:
    """A size, or 0 (for options where 0 means "none")."""
    return 0 if text.strip() == "0" else parse_size(text)


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(s) for s in text.split(",") if s.strip()})


# ---------------------------------------------------------------------------
# Reading and clearing the first/last bytes of any implementation's memory
# (used once per case, outside the timed region, to check the copy happened)
# ---------------------------------------------------------------------------

ENDS = 64


def _kind(obj: Any) -> str:
    mod = type(obj).__module__ or ""
    for name in ("cupy", "numba", "torch"):
        if mod.startswith(name):
            return name
    if isinstance(obj, np.ndarray):
        return "numpy"
    name = type(obj).__name__
    if name == "CudaBuffer":
        return "cuarrow-device"
    if name == "HostBuffer":  # before pa.Buffer: cuarrow's HostBuffer is one
        return "cuarrow-host"
    if isinstance(obj, pa.Buffer):
        return "pyarrow"
    return name


def read_ends(obj: Any, n: int) -> np.ndarray:
    """Bytes [0, k) and [n-k, n) of obj (k = min(64, n)) as one host array."""
    k = min(ENDS, n)
    spans = [(0, k), (n - k, n)]
    kind = _kind(obj)
    out = []
    for a, b in spans:
        if kind == "numpy":
            out.append(np.asarray(obj).view(np.uint8)[a:b].copy())
        elif kind in ("pyarrow", "cuarrow-host"):
            out.append(np.frombuffer(obj, dtype=np.uint8)[a:b].copy())
        elif kind == "cuarrow-device":
            out.append(np.frombuffer(obj.copy_to_host(position=a, nbytes=b - a), dtype=np.uint8).copy())
        elif kind == "cupy":
            out.append(obj[a:b].get())
        elif kind == "numba":
            out.append(obj[a:b].copy_to_host())
        elif kind == "torch":
            out.append(obj[a:b].cpu().numpy().copy())
        else:
            raise TypeError(f"cannot read {type(obj).__name__}")
    return np.concatenate(out)


def zero_ends(obj: Any, n: int) -> None:
    """Clear bytes [0, k) and [n-k, n) of a destination before a case runs."""
    k = min(ENDS, n)
    zeros = np.zeros(k, dtype=np.uint8)
    kind = _kind(obj)
    for a in (0, n - k):
        if kind == "numpy":
            obj[a : a + k] = 0
        elif kind == "cuarrow-host":
            np.frombuffer(obj, dtype=np.uint8)[a : a + k] = 0
        elif kind == "cuarrow-device":
            obj.copy_from_host(zeros, position=a)
        elif kind == "cupy":
            obj[a : a + k] = 0
            importlib.import_module("cupy").cuda.get_current_stream().synchronize()
        elif kind == "numba":
            obj[a : a + k].copy_to_device(zeros)
        elif kind == "torch":
            obj[a : a + k].zero_()
            importlib.import_module("torch").cuda.synchronize()
        else:
            raise TypeError(f"cannot clear {type(obj).__name__}")


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


class Case:
    """One measured operation at one size."""

    def __init__(
        self,
        group: str,
        impl: str,
        label: str,
        nbytes: int,
        fn: Callable[[], Any],
        semantics: str,
        *,
        size_label: str | None = None,
        dest: Any = None,
        expect: np.ndarray | None = None,
        verify: Callable[[Any], bool] | None = None,
        note: str = "",
    ) -> None:
        self.group = group
        self.impl = impl  # raw, cuarrow, cupy, numba, torch
        self.label = label
        self.nbytes = nbytes
        self.fn = fn
        self.semantics = semantics  # "alloc": the call allocates its result; "into": pre-allocated destination
        self.size_label = size_label or fmt_size(nbytes)
        self.dest = dest  # for "into" cases: the destination to read back
        self.expect = expect  # expected first/last bytes (read_ends of the source)
        self.verify_fn = verify
        self.note = note

    @property
    def name(self) -> str:
        return f"{self.impl} {self.label}" if self.impl != "raw" else self.label

    def verify(self, result: Any) -> bool | None:
        if self.verify_fn is not None:
            return bool(self.verify_fn(result))
        if self.expect is None:
            return None
        target = self.dest if self.dest is not None else result
        return bool(np.array_equal(read_ends(target, self.nbytes), self.expect))

    def reset(self) -> None:
        if self.dest is not None and self.expect is not None:
            zero_ends(self.dest, self.nbytes)


class Timing:
    def __init__(self, quick: bool, budget: float, min_reps: int, max_reps: int) -> None:
        self.quick = quick
        self.budget = budget
        self.min_reps = min_reps
        self.max_reps = max_reps


def time_calls(fn: Callable[[], Any], reps: int, warmups: int = 1) -> list[float]:
    """The wall times (seconds) of `reps` calls of `fn`, each timed on its
    own, after `warmups` untimed ones (the probes' simple timing; the
    benchmark's own is measure())."""
    for _ in range(warmups):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def median_time(fn: Callable[[], Any], reps: int, warmups: int = 1) -> float:
    """The median of time_calls(fn, reps, warmups)."""
    return statistics.median(time_calls(fn, reps, warmups))


def sample_summary(samples: list[float]) -> dict[str, Any]:
    """What results.json keeps of a case's timed calls (seconds): their
    number, median, extremes and 10th / 90th percentiles."""
    deciles = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 else samples * 9
    return {
        "n_samples": len(samples),
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "p10_s": deciles[0],
        "p90_s": deciles[-1],
    }


def measure(case: Case, timing: Timing, before_each: Callable[[], None] | None = None) -> dict[str, Any]:
    """Warm up, then time calls one by one until the time budget and the
    minimum sample count are both reached (or max_reps).  The result of each
    call is dropped after its timer stops: freeing is not timed.
    `before_each`, untimed, runs before every call (ipc_bench.py's cold
    reads drop the page cache there)."""
    case.reset()
    warmups = 1 if case.nbytes >= 256 * MiB else 2
    prepare = before_each or (lambda: None)
    prepare()
    result = case.fn()
    verified = case.verify(result)
    del result
    for _ in range(warmups - 1):
        prepare()
        result = case.fn()
        del result
    samples: list[float] = []
    clock = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        start = clock()
        while True:
            prepare()
            t0 = clock()
            result = case.fn()
            t1 = clock()
            del result
            samples.append((t1 - t0) * 1e-9)
            if len(samples) >= timing.max_reps:
                break
            if len(samples) >= timing.min_reps and (t1 - start) * 1e-9 >= timing.budget:
                break
    finally:
        gc.enable()
    gc.collect()
    summary = sample_summary(samples)
    med = summary["median_s"]
    n = case.nbytes
    return {
        "group": case.group,
        "impl": case.impl,
        "label": case.label,
        "name": case.name,
        "semantics": case.semantics,
        "nbytes": n,
        "size_label": case.size_label,
        "note": case.note,
        "verified": verified,
        "samples_s": [round(x, 9) for x in samples],  # only in samples.json (write_json leaves it out)
        **summary,
        "gbps_median": n / med / 1e9,
        "gbps_min": n / max(samples) / 1e9,
        "gbps_max": n / min(samples) / 1e9,
        "us_median": med * 1e6,
    }


# ---------------------------------------------------------------------------
# Host memory shared by every implementation
# ---------------------------------------------------------------------------


class HostData:
    """Pageable source and destination arrays of the largest size, created
    once and touched (written) before any timing, so page faults are not part
    of the figures of pre-allocated memory.  APIs that allocate their result
    (copy_to_host(), .get(), .cpu(), numba copy_to_host()) allocate fresh host
    memory on every call and pay its page faults: that is what they do."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        rng = np.random.default_rng(12345)
        self.src = rng.integers(0, 256, size=max_bytes, dtype=np.uint8)
        self.dst = np.empty(max_bytes, dtype=np.uint8)
        self.dst.fill(1)  # touch every page

    def expect(self, n: int) -> np.ndarray:
        return read_ends(self.src, n)


# ---------------------------------------------------------------------------
# Implementations: each gives its cases for a group and a size
# ---------------------------------------------------------------------------


class Impl:
    name = "?"

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        return []

    @staticmethod
    def returning(sync: Callable[[], Any]) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
        """A case's call for an "alloc" copy: `f`, then `sync`, giving `f`'s result."""

        def wrap(f: Callable[[], Any]) -> Callable[[], Any]:
            def fn() -> Any:
                r = f()
                sync()
                return r

            return fn

        return wrap

    @staticmethod
    def completing(sync: Callable[[], Any]) -> Callable[[Callable[[], Any]], Callable[[], None]]:
        """A case's call for an "into" copy: `f`, then `sync`."""

        def wrap(f: Callable[[], Any]) -> Callable[[], None]:
            def fn() -> None:
                f()
                sync()

            return fn

        return wrap


class Cuarrow(Impl):
    name = "cuarrow"

    def __init__(self, cuda: Any, host: HostData) -> None:
        self.cuda = cuda
        self.ctx = cuda.Context(0)
        m = host.max_bytes
        self.pinned = cuda.new_host_buffer(m)
        np.frombuffer(self.pinned, dtype=np.uint8)[:] = host.src
        self.dsrc = self.ctx.buffer_from_data(host.src)
        self.ddst = self.ctx.new_buffer(m)

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        ctx, src, exp = self.ctx, host.src[:n], host.expect(n)
        pin, dsrc, ddst = self.pinned.slice(0, n), self.dsrc.slice(0, n), self.ddst.slice(0, n)
        dst = host.dst[:n]

        def C(label, fn, sem, **kw):
            return Case(group, "cuarrow", label, n, fn, sem, expect=exp, **kw)

        if group == "H2D pageable":
            return [
                C("buffer_from_data(ndarray)", lambda: ctx.buffer_from_data(src), "alloc"),
                C("copy_from_host(ndarray)", lambda: ddst.copy_from_host(src), "into", dest=ddst),
            ]
        if group == "H2D pinned":
            return [
                C("buffer_from_data(HostBuffer)", lambda: ctx.buffer_from_data(pin), "alloc"),
                C("copy_from_host(HostBuffer)", lambda: ddst.copy_from_host(pin), "into", dest=ddst),
            ]
        if group == "D2H pageable":
            return [
                C("copy_to_host()", lambda: dsrc.copy_to_host(), "alloc"),
                C("copy_to_host(buf=ndarray)", lambda: dsrc.copy_to_host(buf=dst), "into", dest=dst),
            ]
        if group == "D2H pinned":
            return [C("copy_to_host(buf=HostBuffer)", lambda: dsrc.copy_to_host(buf=pin), "into", dest=pin)]
        if group == "D2D":
            return [
                C("copy_from_device", lambda: ddst.copy_from_device(dsrc), "into", dest=ddst),
                C("buffer_from_data(CudaBuffer)", lambda: ctx.buffer_from_data(dsrc), "alloc"),
            ]
        return []


def _memcpy_kinds(rt: Any) -> tuple[int, int, int]:
    """cudaMemcpyHostToDevice, DeviceToHost, DeviceToDevice (CUDA's values if CuPy lacks the names)."""
    return (
        getattr(rt, "memcpyHostToDevice", 1),
        getattr(rt, "memcpyDeviceToHost", 2),
        getattr(rt, "memcpyDeviceToDevice", 3),
    )


class Raw(Impl):
    """cudaMemcpy through CuPy's runtime bindings, + cudaStreamSynchronize(0)."""

    name = "raw"

    def __init__(self, cupy: Any, host: HostData) -> None:
        self.cupy = cupy
        rt = cupy.cuda.runtime
        self.rt = rt
        m = host.max_bytes
        self.pinned_mem = cupy.cuda.alloc_pinned_memory(m)
        self.pinned = np.frombuffer(self.pinned_mem, dtype=np.uint8, count=m)
        self.pinned[:] = host.src
        self.dsrc = cupy.asarray(host.src)
        self.ddst = cupy.empty(m, dtype=cupy.uint8)
        cupy.cuda.runtime.deviceSynchronize()

    def copy_fn(self, dst: int, src: int, n: int, kind: int) -> Callable[[], None]:
        memcpy, sync = self.rt.memcpy, self.rt.streamSynchronize

        def fn() -> None:
            memcpy(dst, src, n, kind)
            sync(0)

        return fn

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        rt, exp = self.rt, host.expect(n)
        dptr_src, dptr_dst = self.dsrc.data.ptr, self.ddst.data.ptr
        ddst = self.ddst[:n]
        H2D, D2H, D2D = _memcpy_kinds(rt)

        def C(label, fn, dest):
            return Case(group, "raw", label, n, fn, "into", dest=dest, expect=exp)

        if group == "H2D pageable":
            return [C("raw cudaMemcpy pageable", self.copy_fn(dptr_dst, host.src.ctypes.data, n, H2D), ddst)]
        if group == "H2D pinned":
            return [C("raw cudaMemcpy pinned (link)", self.copy_fn(dptr_dst, self.pinned.ctypes.data, n, H2D), ddst)]
        if group == "D2H pageable":
            return [C("raw cudaMemcpy pageable", self.copy_fn(host.dst.ctypes.data, dptr_src, n, D2H), host.dst[:n])]
        if group == "D2H pinned":
            pin = self.pinned[:n]
            return [C("raw cudaMemcpy pinned (link)", self.copy_fn(self.pinned.ctypes.data, dptr_src, n, D2H), pin)]
        if group == "D2D":
            return [C("raw cudaMemcpy D2D", self.copy_fn(dptr_dst, dptr_src, n, D2D), ddst)]
        return []


class Cupy(Impl):
    name = "cupy"

    def __init__(self, cupy: Any, host: HostData) -> None:
        self.cp = cupy
        m = host.max_bytes
        self.pinned_mem = cupy.cuda.alloc_pinned_memory(m)
        self.pinned = np.frombuffer(self.pinned_mem, dtype=np.uint8, count=m)
        self.pinned[:] = host.src
        self.dsrc = cupy.asarray(host.src)
        self.ddst = cupy.empty(m, dtype=cupy.uint8)
        self.stream = cupy.cuda.get_current_stream()
        self.stream.synchronize()

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        cp, sync, exp = self.cp, self.stream.synchronize, host.expect(n)
        src, dst, pin = host.src[:n], host.dst[:n], self.pinned[:n]
        dsrc, ddst = self.dsrc[:n], self.ddst[:n]

        def C(label, fn, sem, **kw):
            return Case(group, "cupy", label, n, fn, sem, expect=exp, **kw)

        alloc, into = self.returning(sync), self.completing(sync)

        if group == "H2D pageable":
            return [
                C("cupy.asarray(ndarray)", alloc(lambda: cp.asarray(src)), "alloc"),
                C("ndarray.set(ndarray)", into(lambda: ddst.set(src)), "into", dest=ddst),
            ]
        if group == "H2D pinned":
            return [
                C("cupy.asarray(pinned)", alloc(lambda: cp.asarray(pin)), "alloc"),
                C("ndarray.set(pinned)", into(lambda: ddst.set(pin)), "into", dest=ddst),
            ]
        if group == "D2H pageable":
            return [
                C(".get()", alloc(lambda: dsrc.get()), "alloc"),
                C(".get(out=ndarray)", into(lambda: dsrc.get(out=dst)), "into", dest=dst),
            ]
        if group == "D2H pinned":
            return [C(".get(out=pinned)", into(lambda: dsrc.get(out=pin)), "into", dest=pin)]
        if group == "D2D":
            return [
                C(".copy()", alloc(lambda: dsrc.copy()), "alloc"),
                C("cupy.copyto", into(lambda: cp.copyto(ddst, dsrc)), "into", dest=ddst),
            ]
        return []


class Numba(Impl):
    name = "numba"

    def __init__(self, nbcuda: Any, host: HostData) -> None:
        self.nb = nbcuda
        m = host.max_bytes
        self.pinned = nbcuda.pinned_array(m, dtype=np.uint8)
        self.pinned[:] = host.src
        self.dsrc = nbcuda.to_device(host.src)
        self.ddst = nbcuda.device_array(m, dtype=np.uint8)
        self.stream = nbcuda.default_stream()
        nbcuda.synchronize()

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        nb, sync, exp = self.nb, self.stream.synchronize, host.expect(n)
        src, dst, pin = host.src[:n], host.dst[:n], self.pinned[:n]
        dsrc, ddst = self.dsrc[:n], self.ddst[:n]

        def C(label, fn, sem, **kw):
            return Case(group, "numba", label, n, fn, sem, expect=exp, **kw)

        alloc, into = self.returning(sync), self.completing(sync)

        if group == "H2D pageable":
            return [
                C("cuda.to_device(ndarray)", alloc(lambda: nb.to_device(src)), "alloc"),
                C(".copy_to_device(ndarray)", into(lambda: ddst.copy_to_device(src)), "into", dest=ddst),
            ]
        if group == "H2D pinned":
            return [
                C("cuda.to_device(pinned)", alloc(lambda: nb.to_device(pin)), "alloc"),
                C(".copy_to_device(pinned)", into(lambda: ddst.copy_to_device(pin)), "into", dest=ddst),
            ]
        if group == "D2H pageable":
            return [
                C(".copy_to_host()", alloc(lambda: dsrc.copy_to_host()), "alloc"),
                C(".copy_to_host(ndarray)", into(lambda: dsrc.copy_to_host(dst)), "into", dest=dst),
            ]
        if group == "D2H pinned":
            return [C(".copy_to_host(pinned)", into(lambda: dsrc.copy_to_host(pin)), "into", dest=pin)]
        if group == "D2D":
            return [C(".copy_to_device(device array)", into(lambda: ddst.copy_to_device(dsrc)), "into", dest=ddst)]
        return []


class Torch(Impl):
    name = "torch"

    def __init__(self, torch: Any, host: HostData) -> None:
        self.torch = torch
        m = host.max_bytes
        self.hsrc = torch.from_numpy(host.src)
        self.hdst = torch.from_numpy(host.dst)
        self.pinned = torch.empty(m, dtype=torch.uint8, pin_memory=True)
        self.pinned.numpy()[:] = host.src
        self.dsrc = self.hsrc.cuda()
        self.ddst = torch.empty(m, dtype=torch.uint8, device="cuda")
        self.stream = torch.cuda.current_stream()
        torch.cuda.synchronize()

    def cases(self, group: str, n: int, host: HostData) -> list[Case]:
        sync, exp = self.stream.synchronize, host.expect(n)
        src, dst, pin = self.hsrc[:n], self.hdst[:n], self.pinned[:n]
        dsrc, ddst = self.dsrc[:n], self.ddst[:n]

        def C(label, fn, sem, **kw):
            return Case(group, "torch", label, n, fn, sem, expect=exp, **kw)

        alloc, into = self.returning(sync), self.completing(sync)

        if group == "H2D pageable":
            return [
                C(".cuda()", alloc(lambda: src.cuda()), "alloc"),
                C("dev.copy_(host)", into(lambda: ddst.copy_(src)), "into", dest=ddst),
            ]
        if group == "H2D pinned":
            return [
                C(".cuda(non_blocking=True)", alloc(lambda: pin.cuda(non_blocking=True)), "alloc"),
                C(
                    "dev.copy_(pinned, non_blocking=True)",
                    into(lambda: ddst.copy_(pin, non_blocking=True)),
                    "into",
                    dest=ddst,
                ),
            ]
        if group == "D2H pageable":
            return [
                C(".cpu()", alloc(lambda: dsrc.cpu()), "alloc"),
                C("host.copy_(dev)", into(lambda: dst.copy_(dsrc)), "into", dest=dst),
            ]
        if group == "D2H pinned":
            return [
                C(
                    "pinned.copy_(dev, non_blocking=True)",
                    into(lambda: pin.copy_(dsrc, non_blocking=True)),
                    "into",
                    dest=pin,
                )
            ]
        if group == "D2D":
            return [
                C(".clone()", alloc(lambda: dsrc.clone()), "alloc"),
                C("dev.copy_(dev)", into(lambda: ddst.copy_(dsrc)), "into", dest=ddst),
            ]
        return []


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------


def build_mixed_table(target_bytes: int, seed: int = 7) -> pa.Table:
    """int64, float64, utf8 with ~10% nulls (0..32 characters), list<int32>
    (0..8 values): about `target_bytes` of Arrow buffers, one chunk each."""
    rng = np.random.default_rng(seed)
    # bytes per row: 8 + 8 + (4 offset + ~14.4 chars + 1/8 validity) + (4 offset + 4 * 4 values)
    rows = max(int(target_bytes / 54.6), 8)
    ints = pa.array(rng.integers(0, 1 << 40, size=rows, dtype=np.int64))
    floats = pa.array(rng.random(rows))
    valid = rng.random(rows) >= 0.1
    lengths = rng.integers(0, 33, size=rows, dtype=np.int64)
    lengths[~valid] = 0
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError("table too large for utf8 offsets; use a smaller --table-bytes")
    chars = rng.integers(97, 123, size=int(offsets[-1]), dtype=np.uint8)
    validity = np.packbits(valid, bitorder="little")
    strings = pa.StringArray.from_buffers(
        rows,
        pa.py_buffer(offsets.astype(np.int32)),
        pa.py_buffer(chars),
        pa.py_buffer(validity),
        null_count=int(rows - valid.sum()),
    )
    llen = rng.integers(0, 9, size=rows, dtype=np.int64)
    loff = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(llen, out=loff[1:])
    values = pa.array(rng.integers(0, 1 << 20, size=int(loff[-1]), dtype=np.int32))
    lists = pa.ListArray.from_arrays(pa.array(loff.astype(np.int32)), values)
    table = pa.table({"i64": ints, "f64": floats, "str": strings, "list_i32": lists})
    table.validate(full=False)
    return table


def build_wide_table(columns: int, column_bytes: int) -> pa.Table:
    """`columns` float64 columns of `column_bytes` each, every column its own allocation."""
    k = max(column_bytes // 8, 1)
    arrays = {}
    for i in range(columns):
        a = np.empty(k, dtype=np.float64)
        a.fill(float(i))
        arrays[f"c{i:04d}"] = pa.array(a)
    return pa.table(arrays)


def table_buffers(table: pa.Table) -> list[pa.Buffer]:
    out = []
    for col in table.columns:
        for chunk in col.chunks:
            out.extend(b for b in chunk.buffers() if b is not None)
    return out


class TableSet:
    def __init__(self, key: str, title: str, table: pa.Table) -> None:
        self.key = key  # "mixed", "wide" or "small" (columns)
        self.title = title
        self.table = table
        self.buffers = table_buffers(table)
        self.nbytes = sum(b.size for b in self.buffers)
        self.views = [np.frombuffer(b, dtype=np.uint8) for b in self.buffers]


def table_cases(ts: TableSet, impls: dict[str, Any], host: HostData, cuda: Any, notes: list[str]) -> list[Case]:
    n = ts.nbytes
    size_label = f"{ts.title} ({fmt_size(n)})"
    cases: list[Case] = []

    def C(group: str, impl: str, label: str, fn: Callable[[], Any], sem: str, **kw: Any) -> Case:
        return Case(group, impl, label, n, fn, sem, size_label=size_label, **kw)

    raw: Raw | None = impls.get("raw")
    if raw is not None:
        h2d, d2h, _ = _memcpy_kinds(raw.rt)
        cases.append(
            C(
                "table→device",
                "raw",
                "raw cudaMemcpy pinned, one buffer (link)",
                raw.copy_fn(raw.ddst.data.ptr, raw.pinned.ctypes.data, n, h2d),
                "into",
            )
        )
        cases.append(
            C(
                "table→host",
                "raw",
                "raw cudaMemcpy pinned, one buffer (link)",
                raw.copy_fn(raw.pinned.ctypes.data, raw.dsrc.data.ptr, n, d2h),
                "into",
            )
        )
    ca: Cuarrow | None = impls.get("cuarrow")
    if ca is not None:
        ctx = ca.ctx
        src, dsrc = host.src[:n], ca.dsrc.slice(0, n)
        cases.append(
            C(
                "table→device",
                "cuarrow",
                "buffer_from_data, one buffer of the same bytes",
                lambda: ctx.buffer_from_data(src),
                "alloc",
            )
        )
        cases.append(
            C(
                "table→host",
                "cuarrow",
                "copy_to_host(), one buffer of the same bytes",
                lambda: dsrc.copy_to_host(),
                "alloc",
            )
        )
        to_device = getattr(cuda, "to_device", None)
        dev0 = None
        if to_device is not None:
            try:  # once, untimed: the device table that to_host() copies back, and its type's name
                dev0 = to_device(ts.table)
            except Exception as e:  # noqa: BLE001
                notes.append(
                    f"FAILED: cuarrow.cuda.to_device({ts.title}) raised {type(e).__name__}: {e}; its cases are left out"
                )
                log(notes[-1])
        if dev0 is not None:
            table = ts.table
            back = getattr(dev0, "to_host", None)
            if back is None and hasattr(cuda, "to_host"):

                def back():
                    return cuda.to_host(dev0)

                back_label = "cuda.to_host(device table)"
            else:
                back_label = f"{type(dev0).__name__}.to_host()"

            def same(result: Any) -> bool:
                if isinstance(result, pa.RecordBatch):
                    result = pa.Table.from_batches([result])
                return bool(result.equals(table))

            cases.append(
                C(
                    "table→device",
                    "cuarrow",
                    "cuda.to_device(table)",
                    lambda: to_device(table),
                    "alloc",
                    verify=lambda dev: same(dev.to_host() if hasattr(dev, "to_host") else cuda.to_host(dev)),
                )
            )
            if back is None:
                notes.append(
                    f"skipped: {ts.title} to the host: {type(dev0).__name__} has no to_host() and "
                    "cuarrow.cuda has no to_host"
                )
                log(notes[-1])
            else:
                cases.append(C("table→host", "cuarrow", back_label, back, "alloc", verify=same))
        bufs = ts.buffers
        cases.append(
            C(
                "table→device",
                "cuarrow",
                "buffer_from_data per buffer",
                lambda: [ctx.buffer_from_data(b) for b in bufs],
                "alloc",
            )
        )
        dev_bufs = [ctx.buffer_from_data(b) for b in bufs]
        cases.append(
            C(
                "table→host",
                "cuarrow",
                "copy_to_host() per buffer",
                lambda: [d.copy_to_host() for d in dev_bufs],
                "alloc",
            )
        )
    views = ts.views
    cp_impl: Cupy | None = impls.get("cupy")
    if cp_impl is not None:
        cp, sync = cp_impl.cp, cp_impl.stream.synchronize
        cp_dev = [cp.asarray(v) for v in views]
        sync()

        def cp_up() -> Any:
            r = [cp.asarray(v) for v in views]
            sync()
            return r

        def cp_down() -> Any:
            r = [a.get() for a in cp_dev]
            sync()
            return r

        cases.append(C("table→device", "cupy", "cupy.asarray per buffer", cp_up, "alloc"))
        cases.append(C("table→host", "cupy", ".get() per buffer", cp_down, "alloc"))
    nb_impl: Numba | None = impls.get("numba")
    if nb_impl is not None:
        nb, nsync = nb_impl.nb, nb_impl.stream.synchronize
        nb_dev = [nb.to_device(v) for v in views]

        def nb_up() -> Any:
            r = [nb.to_device(v) for v in views]
            nsync()
            return r

        def nb_down() -> Any:
            r = [a.copy_to_host() for a in nb_dev]
            nsync()
            return r

        cases.append(C("table→device", "numba", "cuda.to_device per buffer", nb_up, "alloc"))
        cases.append(C("table→host", "numba", ".copy_to_host() per buffer", nb_down, "alloc"))
    th_impl: Torch | None = impls.get("torch")
    if th_impl is not None:
        torch, tsync = th_impl.torch, th_impl.stream.synchronize
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only Arrow buffers: torch warns, we never write
            tviews = [torch.from_numpy(v) for v in views]
        th_dev = [t.cuda() for t in tviews]

        def th_up() -> Any:
            r = [t.cuda() for t in tviews]
            tsync()
            return r

        def th_down() -> Any:
            r = [t.cpu() for t in th_dev]
            tsync()
            return r

        cases.append(C("table→device", "torch", ".cuda() per buffer", th_up, "alloc"))
        cases.append(C("table→host", "torch", ".cpu() per buffer", th_down, "alloc"))
    for c in cases:
        c.table_key = ts.key  # type: ignore[attr-defined]
    return cases


# ---------------------------------------------------------------------------
# Ratios and targets
# ---------------------------------------------------------------------------


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return r["group"], r["size_label"]


def add_ratios(results: list[dict[str, Any]]) -> None:
    """× link: this figure / raw cudaMemcpy from (to) pinned memory, same
    direction and size (device to device: raw D2D).  × best peer: this figure
    / the fastest of CuPy, Numba, PyTorch in the same group and size with the
    same semantics (allocating or pre-allocated; any semantics if none)."""
    link: dict[tuple[str, str], float] = {}
    for r in results:
        if r["impl"] != "raw":
            continue
        g = r["group"]
        if g in ("H2D pinned", "D2H pinned", "D2D") or g in TABLE_GROUPS:
            link[_key(r)] = r["gbps_median"]
            if g == "H2D pinned":
                link[("H2D pageable", r["size_label"])] = r["gbps_median"]
            if g == "D2H pinned":
                link[("D2H pageable", r["size_label"])] = r["gbps_median"]
    for r in results:
        ref = link.get(_key(r))
        r["ratio_link"] = r["gbps_median"] / ref if ref else None
        peers = [p for p in results if p["impl"] in PEERS and _key(p) == _key(r)]
        same = [p for p in peers if p["semantics"] == r["semantics"]] or peers
        if same:
            best = max(same, key=lambda p: p["gbps_median"])
            r["ratio_best_peer"] = r["gbps_median"] / best["gbps_median"]
            r["best_peer"] = best["name"]
        else:
            r["ratio_best_peer"] = None
            r["best_peer"] = None


def _find(results: list[dict[str, Any]], group: str, size_label: str, impl: str, label: str) -> dict | None:
    for r in results:
        if r["group"] == group and r["size_label"] == size_label and r["impl"] == impl and r["label"] == label:
            return r
    return None


def evaluate_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 5's targets, checked against this run's medians.  Each verdict is
    attached to its row (r["target"], r["met"]) and returned as a list."""
    verdicts = []

    def judge(r: dict, text: str, ok: bool | None, value: str) -> None:
        r["target"] = text
        r["met"] = ok
        verdicts.append(
            {"group": r["group"], "size": r["size_label"], "name": r["name"], "target": text, "value": value, "met": ok}
        )

    big = {64 * MiB, GiB}
    for r in results:
        if r["impl"] != "cuarrow":
            continue
        g, n, lab = r["group"], r["nbytes"], r["label"]
        gb = r["gbps_median"]
        if g == "H2D pageable" and lab == "buffer_from_data(ndarray)":
            if n in big:
                judge(r, "≥ 40 GB/s", gb >= 40, f"{gb:.1f} GB/s")
            elif n == 4:
                judge(r, "≤ 12 µs", r["us_median"] <= 12, f"{r['us_median']:.1f} µs")
        elif g == "D2H pageable" and lab == "copy_to_host()":
            if n in big:
                judge(r, "≥ 45 GB/s", gb >= 45, f"{gb:.1f} GB/s")
            elif n == 4:
                judge(r, "≤ 12 µs", r["us_median"] <= 12, f"{r['us_median']:.1f} µs")
        elif g == "D2H pageable" and lab == "copy_to_host(buf=ndarray)":
            if n in big:
                judge(r, "≥ 25 GB/s", gb >= 25, f"{gb:.1f} GB/s")
            elif n == 4:
                judge(r, "≤ 12 µs", r["us_median"] <= 12, f"{r['us_median']:.1f} µs")
        elif g in ("H2D pinned", "D2H pinned") and n >= 64 * MiB:
            lk = r.get("ratio_link")
            judge(
                r,
                "≥ 0.95 × raw pinned",
                None if lk is None else lk >= 0.95,
                "no raw figure" if lk is None else f"{lk:.2f} × raw",
            )
        elif g == "D2D" and lab == "copy_from_device" and n >= 64 * MiB:
            lk = r.get("ratio_link")
            judge(
                r,
                "≥ 0.9 × raw D2D",
                None if lk is None else lk >= 0.9,
                "no raw figure" if lk is None else f"{lk:.2f} × raw",
            )
        elif g in TABLE_GROUPS and (
            lab == "cuda.to_device(table)" or lab.endswith(".to_host()") or lab.startswith("cuda.to_host")
        ):
            key = r.get("table_key")
            if key == "mixed" and n >= 0.9 * GiB:
                judge(r, "≥ 35 GB/s", gb >= 35, f"{gb:.1f} GB/s")
            elif key == "wide" and r.get("table_columns", 0) >= 1000 and r.get("table_column_bytes") == MiB:
                ref_label = (
                    "buffer_from_data, one buffer of the same bytes"
                    if g == "table→device"
                    else "copy_to_host(), one buffer of the same bytes"
                )
                ref = _find(results, g, r["size_label"], "cuarrow", ref_label)
                if ref is None:
                    judge(r, "≥ 0.8 × one buffer", None, "no single-buffer figure")
                else:
                    x = gb / ref["gbps_median"]
                    judge(r, "≥ 0.8 × one buffer", x >= 0.8, f"{x:.2f} × one buffer ({ref['gbps_median']:.1f} GB/s)")
    return verdicts


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def _fmt_gbps(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.01:
        return f"{x:.2f}"
    return f"{x:.1e}"


def _fmt_us(x: float) -> str:
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


IMPL_ORDER = {"raw": 0, "cuarrow": 1, "cupy": 2, "numba": 3, "torch": 4}


TABLE_ORDER = {"mixed": 0, "wide": 1, "small": 2}


def display_order(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group order, then size (tables: mixed, wide, small columns), then raw, cuarrow, peers."""
    groups = GROUPS + TABLE_GROUPS

    def key(ir: tuple[int, dict[str, Any]]) -> tuple:
        i, r = ir
        if r["group"] in TABLE_GROUPS:
            return (
                1,
                TABLE_ORDER.get(r.get("table_key"), 9),
                groups.index(r["group"]),
                IMPL_ORDER.get(r["impl"], 9),
                i,
            )
        return (0, groups.index(r["group"]), r["nbytes"], IMPL_ORDER.get(r["impl"], 9), i)

    return [r for _, r in sorted(enumerate(results), key=key)]


def render_table(results: list[dict[str, Any]]) -> str:
    head = [
        "operation",
        "size",
        "implementation",
        "GB/s",
        "µs/call",
        "min–max",
        "× link",
        "× best peer",
        "data",
        "target",
        "met",
    ]
    results = display_order(results)
    rows = []
    for r in results:
        met = {True: "met", False: "MISSED", None: "?"}.get(r.get("met"), "") if "target" in r else ""
        bp = r.get("ratio_best_peer")
        bp_text = "–" if bp is None else f"{bp:.2f} ({r['best_peer'].split(' ')[0]})"
        if r["nbytes"] <= 4 * KiB:  # latency-bound: the spread in µs
            spread = f"{r['min_s'] * 1e6:.1f}–{r['max_s'] * 1e6:.1f} µs"
        else:
            spread = f"{_fmt_gbps(r['gbps_min'])}–{_fmt_gbps(r['gbps_max'])} GB/s"
        rows.append(
            [
                r["group"],
                r["size_label"],
                r["name"],
                _fmt_gbps(r["gbps_median"]),
                _fmt_us(r["us_median"]),
                spread,
                _fmt_ratio(r.get("ratio_link")),
                bp_text,
                {True: "ok", False: "WRONG", None: "–"}[r.get("verified")],
                r.get("target", ""),
                met,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    right = {3, 4, 5, 6}
    lines = []

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines.append(line(head).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    prev = None
    for r, cells in zip(results, rows):
        key = (r["group"], r["size_label"])
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append(line(cells).rstrip())
    return "\n".join(lines)


def render_summary(meta: dict[str, Any], verdicts: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    out = [f"# cuarrow transfer benchmark, {meta['date_utc']} on {meta['machine']['hostname']}", ""]
    gpu = meta["machine"].get("gpu_name") or "?"
    m = meta["machine"]
    out.append(
        f"- machine: {gpu}; {m.get('nvidia_smi') or 'nvidia-smi not available'}; "
        f"{m['cpu_count']} CPUs ({m.get('cpu_model', '?')}; {m.get('cpu_cores', '?')} cores), "
        f"{m.get('mem_total', '?')} RAM; "
        f"Python {m['python']}"
    )
    out.append(f"- code: {meta.get('git_commit') or 'commit unknown'}; wall time {meta.get('wall_s')} s")
    out.append(f"- command: `{meta['command']}`")
    out.append("- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v))
    if meta.get("emulated"):
        out.append("- **EMULATION: the figures are host memcpy, meaningless as performance figures**")
    out += [
        "",
        "| operation | size | implementation | target | this run | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        met = {True: "yes", False: "**no**", None: "?"}[v["met"]]
        out.append(f"| {v['group']} | {v['size']} | {v['name']} | {v['target']} | {v['value']} | {met} |")
    links = [
        r
        for r in results
        if r["impl"] == "raw" and r["group"] in ("H2D pinned", "D2H pinned", "D2D") and r["nbytes"] >= MiB
    ]
    if links:
        out += [
            "",
            "Raw cudaMemcpy (the references): "
            + "; ".join(f"{r['group']} {r['size_label']} {_fmt_gbps(r['gbps_median'])} GB/s" for r in links),
        ]
    wrong = [r for r in results if r.get("verified") is False]
    if wrong:
        out += [
            "",
            "**Wrong data** (read back after the warm-up): "
            + ", ".join(f"{r['group']} {r['size_label']} {r['name']}" for r in wrong),
        ]
    return "\n".join(out) + "\n"


def _size_axis(ax: Any, rows: list[dict[str, Any]]) -> None:
    sizes = sorted({r["nbytes"] for r in rows})
    ax.set_xscale("log", base=2)
    if sizes:
        ax.set_xticks(sizes)
        ax.set_xticklabels([fmt_size(x) for x in sizes], fontsize=8)
        ax.minorticks_off()
    ax.set_xlabel("bytes per call")
    ax.grid(True, which="both", alpha=0.3)


IMPL_COLORS = {"raw": "black", "cuarrow": "tab:red", "cupy": "tab:blue", "numba": "tab:green", "torch": "tab:orange"}


def plot(results: list[dict[str, Any]], path: Path, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped the plot: matplotlib not installed"
    table_rows = [r for r in display_order(results) if r["group"] in TABLE_GROUPS]
    fig = plt.figure(figsize=(18, 11 + 0.16 * len(table_rows)))
    grid = fig.add_gridspec(3, 3, height_ratios=[1, 1, max(0.25, 0.022 * len(table_rows))])
    axes = [fig.add_subplot(grid[i // 3, i % 3]) for i in range(6)]
    for ax, group in zip(axes, GROUPS):
        rows = [r for r in results if r["group"] == group]
        names: list[str] = []
        for r in rows:
            if r["name"] not in names:
                names.append(r["name"])
        for name in names:
            mine = [r for r in rows if r["name"] == name]
            pts = sorted((r["nbytes"], r["gbps_median"]) for r in mine)
            impl, sem = mine[0]["impl"], mine[0]["semantics"]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                "-" if impl == "raw" or sem == "alloc" else "--",
                marker="o",
                ms=3,
                color=IMPL_COLORS.get(impl, "gray"),
                lw=2.2 if impl in ("raw", "cuarrow") else 1.2,
                label=name,
            )
        _size_axis(ax, rows)
        ax.set_yscale("log")
        ax.set_title(group)
        ax.set_ylabel("GB/s (median)")
        if names:
            ax.legend(fontsize=6.5, loc="upper left")
    # cuarrow as a fraction of the link (raw cudaMemcpy pinned; D2D: raw D2D)
    ax = axes[5]
    rows = [r for r in results if r["impl"] == "cuarrow" and r["group"] in GROUPS and r.get("ratio_link")]
    names = []
    for r in rows:
        if (r["group"], r["name"]) not in names:
            names.append((r["group"], r["name"]))
    for group, name in names:
        pts = sorted((r["nbytes"], r["ratio_link"]) for r in rows if r["group"] == group and r["name"] == name)
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            ms=3,
            lw=1.2,
            label=f"{group}: {name[len('cuarrow ') :]}",
        )
    if names:
        ax.axhline(1.0, color="black", lw=1)
        ax.axhline(0.95, color="black", lw=0.8, ls=":")
        _size_axis(ax, rows)
        ax.set_title("cuarrow × link (÷ raw pinned; D2D: ÷ raw D2D)")
        ax.set_ylabel("× link (median)")
        ax.legend(fontsize=6, loc="upper left")
    else:
        ax.text(
            0.5,
            0.5,
            "no raw cudaMemcpy figures in this run\n(CuPy not usable)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    if table_rows:
        ax = fig.add_subplot(grid[2, :])
        labels = [f"{r['size_label'].split(' (')[0]} {r['group'][5:]}: {r['name']}" for r in table_rows]
        y = np.arange(len(table_rows))
        vals = [r["gbps_median"] for r in table_rows]
        ax.barh(y, vals, color=[IMPL_COLORS.get(r["impl"], "gray") for r in table_rows])
        for yi, v in zip(y, vals):
            ax.text(v, yi, f" {_fmt_gbps(v)}", va="center", fontsize=7)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("GB/s (median)")
        ax.set_title("tables: to the device and back")
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------
# Machine information
# ---------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def cpu_topology() -> dict[str, Any]:
    """The cores the CPUs are (a CPU's SMT siblings share one): how many
    this machine has, and CPUs per core.  Host-bound figures (decoding,
    compressing) scale with cores, not CPUs.  Empty where Linux's sysfs
    does not say."""
    cores = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*"):
        try:
            cores.add((cpu / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            continue
    if not cores:
        return {}
    cpus = os.cpu_count() or 0
    return {"cpu_cores": len(cores), "cpu_threads_per_core": round(cpus / len(cores), 2) if cpus else None}


def machine_info(ctx: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0],
    }
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    info["cpu_model"] = ln.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    info.update(cpu_topology())
    try:
        info["gpu_name"] = ctx.device_name
        info["gpu_properties"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in ctx._ctx.properties.items()}
    except Exception as e:  # noqa: BLE001
        info["gpu_name"] = f"? ({e})"
    fields = (
        "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,"
        "pcie.link.width.current,pcie.link.width.max,clocks.max.sm,clocks.max.mem"
    )
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
        if out.returncode == 0 and out.stdout.strip():
            line = out.stdout.strip().splitlines()[0]
            vals = [v.strip() for v in line.split(",")]
            info["nvidia_smi_fields"] = dict(zip(fields.split(","), vals))
            d = info["nvidia_smi_fields"]
            info["nvidia_smi"] = (
                f"driver {d.get('driver_version')}, PCIe gen {d.get('pcie.link.gen.current')} "
                f"(max {d.get('pcie.link.gen.max')}) x{d.get('pcie.link.width.current')}"
            )
    except (OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = None
    return info


def git_commit(repo: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode != 0:
            return None
        commit = out.stdout.strip()
        # --no-optional-locks: read only, never refresh the index of a repository others work in
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
        return commit + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def write_json(path: Path, meta: dict, results: list[dict], verdicts: list[dict], errors: list[dict]) -> None:
    """One JSON document; the metadata indented, then one line per case: its
    summary (seconds), not its samples (write_samples), which would make the
    file megabytes."""
    with open(path, "w") as f:
        f.write('{"meta": ' + json.dumps(meta, indent=1, default=str) + ',\n"targets": [\n')
        f.write(",\n".join(json.dumps(v, default=str, ensure_ascii=False) for v in verdicts))
        f.write('\n],\n"errors": ' + json.dumps(errors, default=str) + ',\n"results": [\n')
        f.write(
            ",\n".join(
                json.dumps({k: v for k, v in r.items() if k != "samples_s"}, default=str, ensure_ascii=False)
                for r in results
            )
        )
        f.write("\n]}\n")


def write_samples(path: Path, results: list[dict]) -> None:
    """Every timed call's seconds, one line per case (--samples; .gitignore keeps them out of the repository)."""
    with open(path, "w") as f:
        f.write(
            "[\n"
            + ",\n".join(
                json.dumps({k: r[k] for k in ("group", "size_label", "name", "samples_s")}, ensure_ascii=False)
                for r in results
            )
            + "\n]\n"
        )


def render_report(
    results: list[dict], verdicts: list[dict], notes: list[str], errors: list[dict], emulated: bool
) -> str:
    """results.txt: how to read it, the table, notes, failures and the targets."""
    table_text = render_table(results)
    header = []
    if emulated:
        header.append(EMULATION_BANNER)
    header.append(
        "GB/s = bytes / median seconds per call (1 GB = 1e9 B); min–max over the timed calls. "
        "× link = this / raw cudaMemcpy pinned, same direction and size (D2D: raw D2D). "
        "× best peer = this / fastest of CuPy, Numba, PyTorch, same operation and size, "
        "same semantics (allocating vs pre-allocated). Pre-allocated pageable memory was touched "
        "before timing (no page faults in those figures); calls that allocate their result "
        "(copy_to_host(), .get(), .cpu(), ...) pay their own page faults, as their users do."
    )
    report = "\n".join(header[:-1] + textwrap.wrap(header[-1], 110)) + "\n\n" + table_text + "\n"
    if notes:
        report += "\n" + "\n".join(notes) + "\n"
    if errors:
        report += (
            "\nFAILED cases:\n"
            + "\n".join(f"  {e['group']} {e['size_label']} {e['name']}: {e['error']}" for e in errors)
            + "\n"
        )
    met = sum(1 for v in verdicts if v["met"] is True)
    missed = sum(1 for v in verdicts if v["met"] is False)
    report += f"\ntargets (issue 5): {met} met, {missed} missed, {len(verdicts) - met - missed} not judged\n"
    for v in verdicts:
        word = {True: "met   ", False: "MISSED", None: "?     "}[v["met"]]
        report += f"  {word} {v['group']} {v['size']} {v['name']}: {v['value']} (target {v['target']})\n"
    if emulated:
        report += "\n" + EMULATION_BANNER + "\n"
    return report


def plot_title(meta: dict[str, Any], host_name: str) -> str:
    return f"cuarrow transfers, {meta['date_utc']}, {meta['machine'].get('gpu_name')} on {host_name}" + (
        "  [EMULATION: meaningless numbers]" if meta["emulated"] else ""
    )


def report_from(src: Path, out_dir: Path, no_plot: bool) -> int:
    """results.txt, summary.md and results.png written again from src/results.json
    (the targets and ratios as the JSON records them)."""
    data = json.loads((src / "results.json").read_text())
    meta, results, verdicts, errors = data["meta"], data["results"], data["targets"], data["errors"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.txt").write_text(
        render_report(results, verdicts, meta.get("notes", []), errors, meta["emulated"])
    )
    (out_dir / "summary.md").write_text(render_summary(meta, verdicts, results))
    if not no_plot:
        host_name = meta.get("machine", {}).get("hostname") or src.name.split("-")[-1]
        why = plot(results, out_dir / "results.png", plot_title(meta, host_name))
        if why:
            log(why)
    log(f"wrote {out_dir}/results.txt, summary.md" + ("" if no_plot else ", results.png") + f" from {src}")
    return 0


def load_peers(
    emulated: bool,
    notes: list[str],
    names: tuple[str, ...] = PEERS,
    without_raw: str = "no '× link' ratios",
) -> dict[str, Any]:
    """The peers among `names` that can run here; a printed note for each one
    that cannot (and, without CuPy, one saying raw cudaMemcpy is skipped,
    ending with `without_raw`: what the run lacks then)."""
    mods: dict[str, Any] = {}
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name == "numba":
                    from numba import cuda as mod  # type: ignore
                else:
                    mod = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (ImportError, or a broken install)
            notes.append(f"skipped: {name} not available ({type(e).__name__}: {e})")
            continue
        if emulated:
            notes.append(
                f"skipped: {name} (installed), because cuarrow runs on the emulation: a peer would "
                "measure a real GPU, or fail without one"
            )
            continue
        try:
            if name == "cupy":
                ok = mod.cuda.runtime.getDeviceCount() > 0
            elif name == "numba":
                ok = mod.is_available()
            else:
                ok = mod.cuda.is_available()
        except Exception as e:  # noqa: BLE001
            ok = False
            notes.append(f"skipped: {name} installed but sees no GPU ({type(e).__name__}: {e})")
            continue
        if not ok:
            notes.append(f"skipped: {name} installed but sees no GPU")
            continue
        mods[name] = mod
    if "cupy" not in mods:
        notes.append(
            "skipped: raw cudaMemcpy (it is called through cupy.cuda.runtime, and CuPy is not usable "
            f"here): {without_raw}"
        )
    return mods


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="sizes 4 B..64 MiB, 64 MiB tables (1000 columns of 64 KiB), fewer samples"
    )
    ap.add_argument("--out", type=Path, help="output folder (default bench/results/<UTC date-time>-<host>)")
    ap.add_argument("--sizes", type=parse_sizes, help="comma-separated sizes, e.g. 4,4K,1M,64M,1G")
    ap.add_argument(
        "--sections",
        default="h2d,d2h,d2d,tables",
        help="which sections to run (comma-separated from h2d, d2h, d2d, tables)",
    )
    ap.add_argument("--table-bytes", type=parse_size, help="bytes of the mixed table (default 1G; quick 64M)")
    ap.add_argument("--columns", type=int, default=1000, help="columns of the wide table (default 1000)")
    ap.add_argument("--column-bytes", type=parse_size, help="bytes per wide-table column (default 1M; quick 64K)")
    ap.add_argument(
        "--small-column-bytes",
        type=parse_size_or_zero,
        default=4 * KiB,
        help="bytes per column of the table of small columns, as many as the wide table's (default 4K; 0: none)",
    )
    ap.add_argument("--budget", type=float, help="seconds of timed calls per case (default 0.5; quick 0.1)")
    ap.add_argument("--min-reps", type=int, help="minimum timed calls per case (default 5; quick 3)")
    ap.add_argument("--max-reps", type=int, default=1000, help="maximum timed calls per case (default 1000)")
    ap.add_argument("--no-plot", action="store_true", help="do not write results.png")
    ap.add_argument(
        "--samples",
        action="store_true",
        help="also write samples.json: every timed call's seconds (megabytes; not for the repository)",
    )
    ap.add_argument(
        "--report-from",
        type=Path,
        metavar="DIR",
        help="run nothing: write results.txt, summary.md and results.png again from DIR/results.json "
        "(into --out, default DIR)",
    )
    args = ap.parse_args(argv)
    if args.report_from is not None:
        return report_from(args.report_from, args.out or args.report_from, args.no_plot)

    t_begin = time.time()
    quick = args.quick
    sizes = args.sizes or (QUICK_SIZES if quick else FULL_SIZES)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {bad}; choose from {list(SECTIONS)}")
    groups = [g for s in ("h2d", "d2h", "d2d") if s in sections for g in SECTIONS[s]]
    run_tables = "tables" in sections
    table_bytes = args.table_bytes or (64 * MiB if quick else GiB)
    column_bytes = args.column_bytes or (64 * KiB if quick else MiB)
    timing = Timing(
        quick,
        args.budget if args.budget is not None else (0.1 if quick else 0.5),
        args.min_reps or (3 if quick else 5),
        args.max_reps,
    )
    now = _dt.datetime.now(_dt.timezone.utc)
    host_name = socket.gethostname()
    out_dir = args.out or Path(__file__).resolve().parent / "results" / f"{now:%Y-%m-%d-%H%M}-{host_name}"

    # -- cuarrow and the driver ------------------------------------------------
    from cuarrow import cuda

    why_emulated = cuda.use_emulation_if_no_gpu()
    emulated = cuda.is_emulated()
    if emulated:
        log(EMULATION_BANNER)
        log(f"    (emulation selected because: {why_emulated or 'CUARROW_CUDA_DRIVER'})")
    ctx = cuda.Context(0)
    notes: list[str] = []
    if not hasattr(cuda, "to_device"):
        notes.append(
            "skipped: cuarrow.cuda.to_device not available (the table cases time buffer-by-buffer "
            "copies and the single-buffer references only)"
        )

    peers = load_peers(emulated, notes)
    for n in notes:
        log(n)

    # -- data ------------------------------------------------------------------
    tables: list[TableSet] = []
    if run_tables:
        log(
            f"building the mixed table (~{fmt_size(table_bytes)}) and {args.columns} columns × "
            f"{fmt_size(column_bytes)} ..."
        )
        t0 = time.time()
        tables.append(TableSet("mixed", "mixed table", build_mixed_table(table_bytes)))
        tables.append(
            TableSet(
                "wide", f"{args.columns} cols × {fmt_size(column_bytes)}", build_wide_table(args.columns, column_bytes)
            )
        )
        if args.small_column_bytes:
            tables.append(
                TableSet(
                    "small",
                    f"{args.columns} cols × {fmt_size(args.small_column_bytes)}",
                    build_wide_table(args.columns, args.small_column_bytes),
                )
            )
        for ts in tables:
            log(
                f"  {ts.title}: {ts.table.num_rows} rows, {ts.table.num_columns} columns, {len(ts.buffers)} buffers, "
                f"{fmt_size(ts.nbytes)} ({ts.nbytes} bytes)  [{time.time() - t0:.1f} s]"
            )
    max_bytes = max([s for s in sizes] + [ts.nbytes for ts in tables])
    log(f"allocating and touching host and device memory ({fmt_size(max_bytes)} per buffer) ...")
    host = HostData(max_bytes)
    impls: dict[str, Any] = {}
    try:
        impls["cuarrow"] = Cuarrow(cuda, host)
    except Exception as e:  # noqa: BLE001
        log(f"cuarrow setup failed: {type(e).__name__}: {e}")
        raise
    builders = {"cupy": Cupy, "numba": Numba, "torch": Torch}
    if "cupy" in peers:
        try:
            impls["raw"] = Raw(peers["cupy"], host)
        except Exception as e:  # noqa: BLE001
            notes.append(f"skipped: raw cudaMemcpy (setup failed: {type(e).__name__}: {e})")
            log(notes[-1])
    for name in PEERS:
        if name in peers:
            try:
                impls[name] = builders[name](peers[name], host)
            except Exception as e:  # noqa: BLE001
                notes.append(f"skipped: {name} (setup failed: {type(e).__name__}: {e})")
                log(notes[-1])
    order = ["raw", "cuarrow", "cupy", "numba", "torch"]

    # -- cases -------------------------------------------------------------------
    cases: list[Case] = []
    for group in groups:
        for n in sizes:
            for name in order:
                if name in impls:
                    cases.extend(impls[name].cases(group, n, host))
    for ts in tables:
        tc = table_cases(ts, impls, host, cuda, notes)
        for c in tc:
            c.table_columns = ts.table.num_columns if ts.key == "wide" else None  # type: ignore[attr-defined]
            c.table_column_bytes = column_bytes if ts.key == "wide" else None  # type: ignore[attr-defined]
        cases.extend(tc)

    log(
        f"{len(cases)} cases; {timing.budget:g} s of timed calls per case (at least {timing.min_reps} calls, "
        f"at most {timing.max_reps}); sizes {', '.join(fmt_size(s) for s in sizes)}"
    )
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    width = len(str(len(cases)))
    for i, case in enumerate(cases, 1):
        prefix = f"[{i:>{width}}/{len(cases)} {time.time() - t_begin:6.1f}s] {case.group} {case.size_label} {case.name}"
        try:
            r = measure(case, timing)
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"
            log(f"{prefix}: FAILED {msg}")
            errors.append({"group": case.group, "size_label": case.size_label, "name": case.name, "error": msg})
            continue
        for attr in ("table_key", "table_columns", "table_column_bytes"):
            if hasattr(case, attr):
                r[attr] = getattr(case, attr)
        results.append(r)
        check = {True: "", False: "  WRONG DATA", None: ""}[r["verified"]]
        if case.nbytes <= 4 * KiB:
            fig = f"{r['us_median']:.2f} µs/call ({_fmt_gbps(r['gbps_median'])} GB/s)"
        else:
            fig = f"{_fmt_gbps(r['gbps_median'])} GB/s ({r['us_median']:.0f} µs/call)"
        log(f"{prefix}: {fig}, {r['n_samples']} calls{check}")

    # -- report ---------------------------------------------------------------------
    add_ratios(results)
    verdicts = evaluate_targets(results)
    report = render_report(results, verdicts, notes, errors, emulated)
    print(report, flush=True)

    repo = Path(__file__).resolve().parent.parent
    versions = {
        "cuarrow": getattr(importlib.import_module("cuarrow"), "__version__", None),
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "cupy": _version("cupy")
        or _version("cupy-cuda13x")
        or _version("cupy-cuda12x")
        or getattr(peers.get("cupy"), "__version__", None),
        "numba": _version("numba"),
        "numba-cuda": _version("numba-cuda"),
        "torch": getattr(peers.get("torch"), "__version__", None) or _version("torch"),
        "matplotlib": _version("matplotlib"),
    }
    for key, get in (
        ("cuda_driver_api", lambda: cuda.driver_info()["version"]),
        ("cupy_cuda_runtime", lambda: peers["cupy"].cuda.runtime.runtimeGetVersion()),
        ("torch_cuda", lambda: peers["torch"].version.cuda),
    ):
        try:
            versions[key] = get()
        except Exception:  # noqa: BLE001  (absent library or attribute: leave it out)
            pass
    meta = {
        "date_utc": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        # The caller's word first: the GPU machine's copy of the tree may carry a stale .git.
        "git_commit": os.environ.get("CUARROW_COMMIT") or git_commit(repo),
        "emulated": emulated,
        "driver": cuda.driver_info(),
        "machine": machine_info(ctx),
        "versions": versions,
        "options": {
            "quick": quick,
            "sizes": sizes,
            "sections": sections,
            "table_bytes": table_bytes,
            "columns": args.columns,
            "column_bytes": column_bytes,
            "budget_s": timing.budget,
            "min_reps": timing.min_reps,
            "max_reps": timing.max_reps,
        },
        "tables": [
            {
                "key": ts.key,
                "title": ts.title,
                "rows": ts.table.num_rows,
                "columns": ts.table.num_columns,
                "buffers": len(ts.buffers),
                "nbytes": ts.nbytes,
                "schema": str(ts.table.schema)
                if ts.table.num_columns <= 20
                else f"{ts.table.num_columns} columns of {ts.table.schema.field(0).type}",
            }
            for ts in tables
        ],
        "notes": notes,
        "cuarrow_env": {k: v for k, v in os.environ.items() if k.startswith("CUARROW_")},
        "wall_s": None,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    meta["wall_s"] = round(time.time() - t_begin, 1)
    write_json(out_dir / "results.json", meta, results, verdicts, errors)
    if args.samples:
        write_samples(out_dir / "samples.json", results)
    (out_dir / "results.txt").write_text(report)
    (out_dir / "summary.md").write_text(render_summary(meta, verdicts, results))
    plotted = False
    if not args.no_plot:
        why = plot(results, out_dir / "results.png", plot_title(meta, host_name))
        plotted = why is None
        if why:
            log(why)
    log(
        f"wrote {out_dir}/results.json, results.txt, summary.md"
        + (", results.png" if plotted else "")
        + f"  ({time.time() - t_begin:.0f} s in all)"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
