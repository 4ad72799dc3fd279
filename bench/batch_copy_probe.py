"""What the driver's copies cost on the GPU, for the copy engine's and the
device stream writer's rules (issue 14): the same bytes within one device
moved by one cuMemcpyDtoDAsync, by one call per piece, or by one
cuMemcpyBatchAsync of all the pieces; a memset of those bytes; and many
tiny copies in one batch (how the stream writer zeroes the padding between
buffers).  The copy engine sends device-to-device pieces of 8 MiB or more
one call each and smaller ones batched; the writer zeroes the padding by
tiny batched copies while the stream has 4 MiB per gap, else by a memset
of the whole stream.  This says whether those thresholds are right.

    python3 bench/batch_copy_probe.py [--device 0] [--total-mib 1024] [--reps 5] [--out probe.json]

The driver is used directly (ctypes, every entry point through
cuGetProcAddress, as cuarrow loads it): libcuda.so.1, or the library named
by --driver (cuarrow's emulation runs it without a GPU, for a smoke test:
its times mean nothing).  GPU times come from events around each case on a
stream of its own; host times are the wall time of queuing the calls.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from typing import Any, Callable

CU_STREAM_NON_BLOCKING = 1
CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
MiB = 1 << 20


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class MemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", MemLocation),
        ("dstLocHint", MemLocation),
        ("flags", ctypes.c_uint),
    ]


class Driver:
    """The entry points the probe uses, from cuGetProcAddress_v2."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        self._get = lib.cuGetProcAddress_v2
        self._get.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_void_p,
        ]
        self._check(lib.cuInit(0), "cuInit")

    @staticmethod
    def _check(r: int, what: str) -> None:
        if r != 0:
            raise RuntimeError(f"{what} failed: CUresult {r}")

    def fn(self, name: str, version: int, *argtypes: Any) -> Callable[..., None]:
        p = ctypes.c_void_p()
        self._check(self._get(name.encode(), ctypes.byref(p), version, 0, None), f"cuGetProcAddress({name})")
        if not p.value:
            raise RuntimeError(f"the driver has no {name} (version {version})")
        raw = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)

        def call(*args: Any) -> None:
            self._check(raw(*args), name)

        return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--total-mib", type=int, default=1024, help="bytes each case moves (MiB)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per case (after one warm-up); the median is shown")
    ap.add_argument("--driver", default="libcuda.so.1", help="the driver library (default libcuda.so.1)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    d = Driver(args.driver)
    vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    dev_get = d.fn("cuDeviceGet", 2000, ctypes.POINTER(ctypes.c_int), ctypes.c_int)
    retain = d.fn("cuDevicePrimaryCtxRetain", 7000, ctypes.POINTER(vp), ctypes.c_int)
    push_current = d.fn("cuCtxPushCurrent", 4000, vp)
    alloc = d.fn("cuMemAlloc", 3020, ctypes.POINTER(u64), sz)
    free = d.fn("cuMemFree", 3020, u64)
    stream_create = d.fn("cuStreamCreate", 2000, ctypes.POINTER(vp), ctypes.c_uint)
    sync = d.fn("cuStreamSynchronize", 2000, vp)
    event_create = d.fn("cuEventCreate", 2000, ctypes.POINTER(vp), ctypes.c_uint)
    record = d.fn("cuEventRecord", 2000, vp, vp)
    event_sync = d.fn("cuEventSynchronize", 2000, vp)
    elapsed = d.fn("cuEventElapsedTime", 2000, ctypes.POINTER(ctypes.c_float), vp, vp)
    dtod = d.fn("cuMemcpyDtoDAsync", 3020, u64, u64, sz, vp)
    memset = d.fn("cuMemsetD8Async", 3020, u64, ctypes.c_ubyte, sz, vp)
    batch = d.fn(
        "cuMemcpyBatchAsync",
        13000,
        ctypes.POINTER(u64),
        ctypes.POINTER(u64),
        ctypes.POINTER(sz),
        sz,
        ctypes.POINTER(MemcpyAttributes),
        ctypes.POINTER(sz),
        sz,
        vp,
    )

    device = ctypes.c_int()
    dev_get(ctypes.byref(device), args.device)
    ctx = vp()
    retain(ctypes.byref(ctx), device)
    push_current(ctx)
    total = args.total_mib * MiB
    src, dst, zeros = u64(), u64(), u64()
    alloc(ctypes.byref(src), total)
    alloc(ctypes.byref(dst), total)
    alloc(ctypes.byref(zeros), 4096)
    s = vp()
    stream_create(ctypes.byref(s), CU_STREAM_NON_BLOCKING)
    memset(zeros, 0, 4096, s)
    begin, end = vp(), vp()
    event_create(ctypes.byref(begin), 0)
    event_create(ctypes.byref(end), 0)
    attrs = MemcpyAttributes(
        CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device.value),
        MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device.value),
        0,
    )
    attrs_index = (sz * 1)(0)

    def batched(dsts: list[int], srcs: list[int], sizes: list[int]) -> Callable[[], None]:
        calls = []
        for at in range(0, len(sizes), 4096):  # at most 4096 copies a call, as cuarrow issues them
            n = len(sizes[at : at + 4096])
            calls.append(
                (
                    (u64 * n)(*dsts[at : at + n]),
                    (u64 * n)(*srcs[at : at + n]),
                    (sz * n)(*sizes[at : at + n]),
                    n,
                )
            )

        def run() -> None:
            for ds, ss, ns, n in calls:
                batch(ds, ss, ns, n, ctypes.byref(attrs), attrs_index, 1, s)

        return run

    def measure(name: str, run: Callable[[], None], nbytes: int, copies: int) -> dict[str, Any]:
        run()  # warm-up
        sync(s)
        gpu, host = [], []
        for _ in range(args.reps):
            record(begin, s)
            t = time.perf_counter()
            run()
            host.append(time.perf_counter() - t)
            record(end, s)
            event_sync(end)
            ms = ctypes.c_float()
            elapsed(ctypes.byref(ms), begin, end)
            gpu.append(ms.value / 1e3)
        g, h = statistics.median(gpu), statistics.median(host)
        r = {"case": name, "bytes": nbytes, "copies": copies, "gpu_s": g, "host_s": h, "gb_s": nbytes / g / 1e9}
        line = f"{name:<48} {copies:>6} copies  GPU {g * 1e3:8.3f} ms  {r['gb_s']:8.1f} GB/s"
        print(f"{line}  queued in {h * 1e6:9.1f} us")
        return r

    results = [measure("one cuMemcpyDtoDAsync", lambda: dtod(dst, src, total, s), total, 1)]
    for k in (8, 64, 512, 4096):
        piece = total // k
        offs = [i * piece for i in range(k)]
        dsts, srcs, sizes = [dst.value + o for o in offs], [src.value + o for o in offs], [piece] * k

        def each(dsts: list[int] = dsts, srcs: list[int] = srcs, piece: int = piece) -> None:
            for a, b in zip(dsts, srcs):
                dtod(a, b, piece, s)

        mib = piece / MiB
        results.append(measure(f"{k} pieces of {mib:g} MiB, a call each", each, piece * k, k))
        results.append(
            measure(f"{k} pieces of {mib:g} MiB, cuMemcpyBatchAsync", batched(dsts, srcs, sizes), piece * k, k)
        )
    results.append(measure("cuMemsetD8Async of the same bytes", lambda: memset(dst, 0, total, s), total, 1))
    for g in (256, 2048, 8192):
        stride = total // g
        dsts = [dst.value + i * stride + stride - 4 for i in range(g)]
        results.append(
            measure(f"{g} copies of 4 bytes (padding) batched", batched(dsts, [zeros.value] * g, [4] * g), 4 * g, g)
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "total_bytes": total, "reps": args.reps, "results": results}, f, indent=1)
    sync(s)
    for p in (src, dst, zeros):
        free(p)


if __name__ == "__main__":
    main()
