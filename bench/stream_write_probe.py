#!/usr/bin/env python3
"""An IPC stream written into device memory with and without cuarrow's
gather kernel (transfer_options device_gather), beside a raw
device-to-device copy of as many bytes, for issue 14's "at least 0.9 x raw
device-to-device" (bench/ipc_bench.py measures the default; this says what
the kernel changed).

    PYTHONPATH=<installed cuarrow> python3 bench/stream_write_probe.py [--table-bytes 2.2G] [--out probe.json]

Each case also records the writer's own account of one more write
(``stats()``: layout, metadata, allocation, queueing and waiting, on the
calling thread), which says whether the host or the copies take the
time.  It also times the writes with the gather kernel's line
(``device_gather_max_run_bytes``: the runs from it on take the copy
engines) at each of --lines.  Two device tables of ipc_bench's 17
columns: the table moved with cuda.to_device (one batch per 2^21-row
part: 8 for 2.2 GiB, what ipc_bench writes) and the same table read back
from a Feather file (pyarrow's 64 Ki-row chunks: 226 batches, thousands
of buffers).  Each
write is timed (median of --reps), gather on and off, in one process.
Needs CuPy for the raw copy.  Times mean something only on the GPU
machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.feather as feather

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ipc_bench  # noqa: E402 - found through the line above
from bench import median_time, parse_size, parse_size_or_zero  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-bytes", type=parse_size, default=parse_size("2.2G"))
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--lines",
        type=lambda v: [parse_size_or_zero(x) for x in v.split(",")],
        default=[parse_size_or_zero(x) for x in ("1M", "8M", "32M", "0")],
        help="device_gather_max_run_bytes values to time (0: no line)",
    )
    args = ap.parse_args()

    import cupy

    from cuarrow import cuda, ipc

    ctx = cuda.Context(0)
    table = ipc_bench.build_table(args.table_bytes)
    path = args.dir / "stream-write-probe.feather"
    feather.write_feather(table, str(path), compression="uncompressed")
    tables = {"to_device": cuda.to_device(table, ctx), "read_feather": ipc.read_feather(str(path))}
    path.unlink()
    result: dict[str, Any] = {"gather_status": ctx.gather_status(), "cases": []}
    print(f"gather kernel: {result['gather_status']}", flush=True)
    saved = cuda.transfer_options()
    for name, device_table in tables.items():
        last: dict[str, Any] = {}
        parts: dict[str, list[float]] = {"new_stream": [], "write_table": [], "close": []}

        def write(t: Any = device_table, last: dict[str, Any] = last, parts: dict = parts) -> Any:
            t0 = time.perf_counter()
            w = ipc.new_stream(ctx, table.schema)
            t1 = time.perf_counter()
            w.write_table(t)
            t2 = time.perf_counter()
            out = w.close()
            t3 = time.perf_counter()
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
                parts[k].append(v)
            last.clear()
            last.update(w.stats())
            return out

        size = write().size
        src, dst = cupy.empty(size, dtype=cupy.uint8), cupy.empty(size, dtype=cupy.uint8)

        def raw(d: int = dst.data.ptr, s: int = src.data.ptr, n: int = size) -> None:
            cupy.cuda.runtime.memcpy(d, s, n, cupy.cuda.runtime.memcpyDeviceToDevice)
            cupy.cuda.runtime.streamSynchronize(0)

        t_raw = median_time(raw, args.reps)
        row: dict[str, Any] = {"table": name, "batches": len(device_table.to_batches()), "bytes": size, "raw_s": t_raw}
        for gather in (True, False):
            cuda.set_transfer_options(device_gather=gather)
            for v in parts.values():
                v.clear()
            t = median_time(write, args.reps)
            row["gather_s" if gather else "driver_s"] = t
            # Where a call's time falls: the writer's making (the schema
            # message), the write (copies queued; with the gather kernel it
            # does not wait for them) and close (the wait), medians.
            row["gather_calls_s" if gather else "driver_calls_s"] = {
                k: statistics.median(v) for k, v in parts.items() if v
            }
            write()
            row["gather_stats" if gather else "driver_stats"] = dict(last)
        # Where the kernel's runs end and the copy engines' begin
        # (device_gather_max_run_bytes; 0: the kernel takes every run).
        row["gather_lines"] = []
        for line in args.lines:
            cuda.set_transfer_options(device_gather=True, device_gather_max_run_bytes=line)
            t = median_time(write, args.reps)
            write()
            row["gather_lines"].append({"max_run_bytes": line, "s": t, "stats": dict(last)})
            shown = f"{line / 2**20:g} MiB" if line else "none"
            print(f"  {name}: kernel's line {shown}: {t * 1e3:.2f} ms ({t_raw / t:.2f} x raw)", flush=True)
        cuda.set_transfer_options(**saved)
        del src, dst
        result["cases"].append(row)
        print(
            f"{name:12s} {row['batches']:4d} batches {size / 1e9:.2f} GB: raw D2D {t_raw * 1e3:.2f} ms; "
            f"gather kernel {row['gather_s'] * 1e3:.2f} ms ({t_raw / row['gather_s']:.2f} x raw); "
            f"driver copies {row['driver_s'] * 1e3:.2f} ms ({t_raw / row['driver_s']:.2f} x raw)",
            flush=True,
        )
        calls = row["gather_calls_s"]
        print(
            "  a call's parts (gather kernel): " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in calls.items()),
            flush=True,
        )
        st = row["gather_stats"]
        print(
            "  the writer's time (gather kernel): "
            + ", ".join(f"{k[:-8]} {v * 1e3:.3f} ms" for k, v in st.items() if k.endswith("_seconds") and v)
            + f"; {st['body_pieces']} body pieces",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
