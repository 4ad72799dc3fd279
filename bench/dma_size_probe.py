#!/usr/bin/env python3
"""What a host-to-device DMA's size costs the link, for issue 14's column
projection (bench/projection_probe.py): its 237 MB go to the device in about
360 DMAs of 0.5-1 MiB (one per batch body a staging chunk touches), the
whole file's in chunk-sized ones.  If small DMAs leave the link idle between
them, fewer and larger DMAs (batch bodies next to one another in one
allocation) would pay.

    python3 bench/dma_size_probe.py [--bytes 237M] [--out dma_size_probe.json]

Needs CuPy and a GPU (not cuarrow: the probe times the driver and the link
alone).  From one page-locked host buffer into one device buffer, on one
stream: the same bytes in DMAs of each size, queued by one thread ahead of
time (the link's own cost) and by 16 threads each queueing its share as the
staging pipeline's workers do; timed with events, median of --reps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import parse_size  # noqa: E402 - found through the line above

SIZES = [128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20, 0]  # 0: one DMA


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=parse_size, default=parse_size("237M"))
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import cupy as cp

    n = args.bytes
    host = cp.cuda.alloc_pinned_memory(n)
    dev = cp.cuda.alloc(n)
    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    h2d = rt.memcpyHostToDevice

    def queue(pieces: list[tuple[int, int]]) -> None:
        for at, size in pieces:
            rt.memcpyAsync(dev.ptr + at, host.ptr + at, size, h2d, stream.ptr)

    def timed(size: int, threads: int) -> float:
        step = size or n
        pieces = [(at, min(step, n - at)) for at in range(0, n, step)]
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(args.reps):
            stream.synchronize()
            start.record(stream)
            if threads <= 1:
                queue(pieces)
            else:
                parts = [pieces[k::threads] for k in range(threads)]
                ts = [threading.Thread(target=queue, args=(p,)) for p in parts]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    timed(0, 1)  # warm the link and the driver
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        for threads in (1, args.threads):
            if size == 0 and threads > 1:
                continue
            s = timed(size, threads)
            count = -(-n // (size or n))
            rows.append({"dma_bytes": size or n, "dmas": count, "threads": threads, "seconds": s, "gbps": n / s / 1e9})
            print(
                f"{(size or n) >> 10:8d} KiB DMAs x {count:5d}, {threads:2d} thread(s): {s * 1e3:7.3f} ms "
                f"{n / s / 1e9:6.1f} GB/s",
                flush=True,
            )
    result = {
        "bytes": n,
        "reps": args.reps,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
