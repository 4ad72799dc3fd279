#!/usr/bin/env python3
"""Where a compressed write_feather's time goes (issue 14: cuarrow's LZ4 and
ZSTD writes ran slower than pyarrow's to_host + write_feather on the GPU
machines, 0.78 against 1.13 GB/s on the H200 on 2026-12-06).

    PYTHONPATH=<installed cuarrow> python3 bench/compressed_write_probe.py [--table-bytes 2.2G] [--out FILE]

In a child process per setting (environment knobs, read once): the IPC
benchmark's table on the device, then write_feather with each codec
--reps times, each with the writer's stats (compress_copy_seconds: the
device bytes copied to host memory first; compress_seconds: that copy and
the compression; file_write_seconds) and the pinned pool's stats after it;
and pyarrow's to_host + write_feather of the same table beside it.  Times
mean something only on the GPU machine; elsewhere (the emulation) it is a
smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import parse_size  # noqa: E402 - found through the line above

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "pinned pool 16 GiB": {"CUARROW_PINNED_POOL_LIMIT": str(16 << 30)},
}


def child(table_bytes: int, reps: int, out_dir: str) -> dict[str, Any]:
    """One setting's figures (a child process: the knobs are read once)."""
    import ipc_bench
    import pyarrow.feather as feather

    from cuarrow import cuda, ipc

    table = ipc_bench.build_table(table_bytes)
    ctx = cuda.Context(0)
    device = cuda.to_device(table, ctx)
    path = os.path.join(out_dir, "compressed-write-probe.feather")
    out: dict[str, Any] = {"bytes": ipc_bench.table_bytes(table), "batches": len(device.to_batches())}
    for codec in ("lz4", "zstd"):
        rows = []
        for _ in range(reps):
            stats: dict[str, Any] = {}
            t0 = time.perf_counter()
            ipc.write_feather(device, path, compression=codec, stats=stats)
            rows.append({"seconds": time.perf_counter() - t0, "stats": stats, "pinned_pool": cuda.pinned_pool_stats()})
        out[f"cuarrow_{codec}"] = rows
        times = []
        for _ in range(max(1, reps - 1)):
            t0 = time.perf_counter()
            feather.write_feather(device.to_host(), path, compression=codec)
            times.append(time.perf_counter() - t0)
        out[f"pyarrow_{codec}_seconds"] = times
    os.unlink(path)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-bytes", type=parse_size, default=parse_size("2.2G"))
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="which settings, comma-separated (default: all)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.table_bytes, args.reps, args.dir)))
        return 0
    result: dict[str, Any] = {}
    for name in args.settings.split(","):
        env = SETTINGS[name]
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--table-bytes", str(args.table_bytes), "--reps", str(args.reps)]
            + ["--dir", args.dir],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            result[name] = {"env": env, "error": proc.stderr[-2000:]}
            print(f"{name}: FAILED\n{proc.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["env"] = env
        result[name] = r
        gb = r["bytes"] / 1e9
        for codec in ("lz4", "zstd"):
            pa_s = min(r[f"pyarrow_{codec}_seconds"])
            print(f"{name}, {codec}: pyarrow {gb / pa_s:.2f} GB/s; cuarrow:", flush=True)
            for row in r[f"cuarrow_{codec}"]:
                st = row["stats"]
                print(
                    f"    {gb / row['seconds']:.2f} GB/s ({row['seconds']:.3f} s): copy "
                    f"{st.get('compress_copy_seconds', 0):.3f}, compress+copy {st.get('compress_seconds', 0):.3f}, "
                    f"file {st.get('file_write_seconds', 0):.3f} s; pinned pool {row['pinned_pool']}",
                    flush=True,
                )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
