#!/usr/bin/env python3
"""Where a column projection's read goes, for issue 14's "10% of the
columns cost at most 15% of the whole read" (bench/ipc_bench.py measures
the ratio; this says why it is what it is).

    PYTHONPATH=<installed cuarrow> python3 bench/projection_probe.py [--table-bytes 2.2G] [--out probe.json]

Writes ipc_bench's 17-column table to one uncompressed Feather file, then
runs, in a child process per setting of the staging pipeline's knobs
(CUARROW_STAGING_CHUNK, CUARROW_STAGING_THREADS_TO_DEVICE, and
CUARROW_BODY_GROUP_BYTES=0: one device allocation a batch, as before
bodies shared allocations):
the whole file and projections of 2, 4 and 8 columns, each timed (median),
one more read of each with the reader's stats, and the projection's parts
as read_feather runs them (open the reader, read the batches, make the
table).  Also a threaded pread, into host memory, of pieces of the size and
spacing of the 2-column projection's: what the page cache gives such reads.
Times mean something only on the GPU machine; elsewhere (the emulation,
CUARROW_CUDA_DRIVER=emulated) it is a smoke test.

The whole file is also read by 16 threads of `pread` into host memory
(ipc_bench's reference), so that a run says where the machine stands.

--against SITE runs another build of cuarrow (installed with `pip install
--target SITE`) on the same file and machine: each of --rounds rounds runs
every setting with this build, then with that one, so that a run says
whether a figure moved with the code or with the machine.  Another commit's source, to build on
the GPU machine: `git archive REV | tar x -C build/ab-old` here, carried
there, then `pip install --no-build-isolation --no-deps --target
/tmp/ab-old build/ab-old`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ipc_bench  # noqa: E402 - found through the line above
from bench import median_time, parse_size  # noqa: E402

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "an allocation a batch": {"CUARROW_BODY_GROUP_BYTES": "0"},
    "chunk 1 MiB": {"CUARROW_STAGING_CHUNK": str(1 << 20)},
    "chunk 2 MiB": {"CUARROW_STAGING_CHUNK": str(2 << 20)},
    "chunk 8 MiB": {"CUARROW_STAGING_CHUNK": str(8 << 20)},
    "24 threads": {"CUARROW_STAGING_THREADS_TO_DEVICE": "24"},
}


def child(path: str, reps: int) -> dict[str, Any]:
    """One setting's figures (run in a child process: the knobs are read once)."""
    from cuarrow import ipc

    schema = pa.ipc.open_file(path).schema
    names = list(ipc_bench.PROJECTED) + [n for n in schema.names if n not in ipc_bench.PROJECTED]
    out: dict[str, Any] = {}
    out["whole_s"] = median_time(lambda: ipc.read_feather(path), max(3, reps // 3))
    stats: dict[str, Any] = {}
    ipc.read_feather(path, stats=stats)
    out["whole_stats"] = stats
    for k in (2, 4, 8):
        cols = names[:k]
        out[f"proj{k}_s"] = median_time(lambda c=cols: ipc.read_feather(path, columns=c), reps)
        st: dict[str, Any] = {}
        ipc.read_feather(path, columns=cols, stats=st)
        out[f"proj{k}_stats"] = st
    # read_feather's parts for the 2-column projection
    cols = names[:2]
    parts: dict[str, list[float]] = {"open": [], "read_batches": [], "make_table": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        reader = ipc.RecordBatchFileReader(path, columns=cols)
        t1 = time.perf_counter()
        batches = reader._read_batches(list(range(reader.num_record_batches)))
        t2 = time.perf_counter()
        ipc.DeviceTable._make(batches, reader.schema, reader._where)
        t3 = time.perf_counter()
        parts["open"].append(t1 - t0)
        parts["read_batches"].append(t2 - t1)
        parts["make_table"].append(t3 - t2)
    out["proj2_parts_s"] = {k: statistics.median(v) for k, v in parts.items()}
    return out


def timeline(path: str, reps: int) -> dict[str, Any]:
    """The 2-column projection's calls on a time line (run in a child under
    the tracing driver, bench/driver_trace.c): when the reader is open, when
    the first and last host-to-device copy are queued (the staging job's
    waits are event waits, which the tracer does not record) and when the
    call returns, in µs from the call.  Says where the time outside the
    staging job's DMAs goes."""
    from stream_launch_probe import trace_taker

    from cuarrow import ipc

    _, take = trace_taker()

    schema = pa.ipc.open_file(path).schema
    names = list(ipc_bench.PROJECTED) + [n for n in schema.names if n not in ipc_bench.PROJECTED]
    cols = names[:2]
    rows: list[dict[str, Any]] = []
    kept = None
    for rep in range(reps + 2):
        kept = None  # the last table is freed before the call, not inside it
        take()
        t0 = time.perf_counter_ns()
        reader = ipc.RecordBatchFileReader(path, columns=cols)
        t1 = time.perf_counter_ns()
        batches = reader._read_batches(list(range(reader.num_record_batches)))
        t2 = time.perf_counter_ns()
        kept = ipc.DeviceTable._make(batches, reader.schema, reader._where)
        t3 = time.perf_counter_ns()
        events = take()
        if rep < 2:
            continue

        def us(ns: int, start: int = t0) -> float:
            return (ns - start) / 1e3

        copies = [e for e in events if e[0] in ("cuMemcpyHtoDAsync", "cuMemcpyBatchAsync", "cuMemcpyAsync")]
        counts: dict[str, int] = {}
        for e in events:
            counts[e[0]] = counts.get(e[0], 0) + 1
        row: dict[str, Any] = {
            "open_us": us(t1),
            "read_return_us": us(t2),
            "table_us": us(t3),
            "calls": counts,
            "copy_bytes": sum(e[3] for e in copies),
        }
        if copies:
            row["first_copy_queued_us"] = us(copies[0][1])
            row["last_copy_queued_us"] = us(max(e[2] for e in copies))
        allocs = [e for e in events if e[0].startswith("cuMemAlloc") or e[0] == "cuMemHostAlloc"]
        row["alloc_us"] = sum((e[2] - e[1]) / 1e3 for e in allocs)
        rows.append(row)
    del kept
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, float)})
    return {
        "columns": cols,
        "median": {k: statistics.median(r[k] for r in rows if k in r) for k in keys},
        "calls": rows[-1]["calls"] if rows else {},
        "rows": rows,
    }


def scattered_pread(path: Path, piece: int, stride: int, threads: int, reps: int) -> dict[str, Any]:
    size = path.stat().st_size
    spans = [(a, min(piece, size - a)) for a in range(0, size, stride)]
    total = sum(n for _, n in spans)
    dest = np.ones(total, dtype=np.uint8)
    at = np.cumsum([0] + [n for _, n in spans])
    view = memoryview(dest)
    pool = ThreadPoolExecutor(threads)

    def run() -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            list(pool.map(lambda i: os.preadv(fd, [view[at[i] : at[i] + spans[i][1]]], spans[i][0]), range(len(spans))))
        finally:
            os.close(fd)

    t = median_time(run, reps)
    pool.shutdown()
    return {"piece": piece, "stride": stride, "threads": threads, "bytes": total, "seconds": t, "gbps": total / t / 1e9}


def run_timeline(path: Path, reps: int) -> dict[str, Any]:
    """timeline() in a child process over the tracing driver
    (stream_launch_probe.traced_env)."""
    from stream_launch_probe import traced_env

    r = run_child(["--child-timeline", str(path), "--reps", str(reps)], traced_env(), "timeline")
    if "error" in r:
        return r
    m = r["median"]
    print("timeline (µs from the call, medians): " + ", ".join(f"{k} {v:.0f}" for k, v in m.items()), flush=True)
    print(f"    driver calls of one read: {r['calls']}", flush=True)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-bytes", type=parse_size, default=parse_size("2.2G"))
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="also put the 2-column projection on a time line under bench/driver_trace.c "
        "(CUARROW_TRACE_SO names it built; else cc builds it)",
    )
    ap.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"which settings, comma-separated (default all: {', '.join(SETTINGS)})",
    )
    ap.add_argument("--against", type=Path, help="another cuarrow's site folder, run beside this one (A/B)")
    ap.add_argument("--rounds", type=int, default=2, help="A/B rounds with --against (default 2)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-timeline", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.reps)))
        return 0
    if args.child_timeline:
        print(json.dumps(timeline(args.child_timeline, args.reps)))
        return 0
    path = args.dir / "projection-probe.feather"
    t0 = time.perf_counter()
    table = ipc_bench.build_table(args.table_bytes)
    feather.write_feather(table, str(path), compression="uncompressed")
    print(f"file {path}: {path.stat().st_size / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s", flush=True)
    result: dict[str, Any] = {"table_bytes": args.table_bytes, "file_bytes": path.stat().st_size, "settings": {}}
    batches = pa.ipc.open_file(str(path)).num_record_batches
    piece = ipc_bench.table_bytes(table.select([ipc_bench.PROJECTED[0]])) // batches & ~4095
    stride = path.stat().st_size // batches // 2  # two pieces a batch, as the 2-column projection reads
    result["batches"] = batches
    result["pread_scattered"] = [scattered_pread(path, piece, stride, t, 9) for t in (8, 16, 24) if piece > 0]
    chosen = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {list(SETTINGS)}")
    reference = ipc_bench.ThreadedPread(path, 16)
    try:
        pread_s = median_time(reference, 5)
    finally:
        reference.close()
        del reference
    result["pread_whole"] = {"threads": 16, "median_s": pread_s, "gbps": path.stat().st_size / pread_s / 1e9}
    print(f"the whole file by 16 threads of pread: {pread_s * 1e3:.1f} ms", flush=True)
    # Who runs: this cuarrow, and with --against the other, alternately.
    runs = [("this", None)]
    if args.against:
        runs = [("this", None), ("against", args.against)] * max(1, args.rounds)
        result["against"] = str(args.against)
        result["rounds"] = []
    for who, site in runs:
        for name in chosen:
            r = run_setting(path, name, args.reps, site)
            if who == "this":
                result["settings"][name] = r
            if "rounds" in result:
                result["rounds"].append(
                    {"who": who, "setting": name, **{k: v for k, v in r.items() if k.endswith("_s")}}
                )
            if "error" not in r:
                print_setting(f"{who}: {name}" if args.against else name, r, pread_s)
    if args.timeline:
        result["timeline"] = run_timeline(path, args.reps)
    for p in result["pread_scattered"]:
        print(f"scattered pread {p['piece'] >> 10} KiB pieces, {p['threads']} threads: {p['gbps']:.1f} GB/s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    path.unlink()
    return 0


def run_setting(path: Path, name: str, reps: int, site: Path | None) -> dict[str, Any]:
    """One setting's figures from a child process (`site`: another cuarrow first on its path)."""
    env = SETTINGS[name]
    child_env = {**os.environ, **env}
    if site is not None:
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    r = run_child(["--child", str(path), "--reps", str(reps)], child_env, name)
    r["env"] = env
    return r


def run_child(flags: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """This script in a child process with `flags` and `env`: the JSON of
    its last line, or {"error": its stderr's end} (printed, named `what`)."""
    proc = subprocess.run([sys.executable, __file__, *flags], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{what}: FAILED\n{proc.stderr[-2000:]}", flush=True)
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_setting(label: str, r: dict[str, Any], pread_s: float) -> None:
    """One line of a setting's figures (the whole file also against pread's), one of its projection's stats."""
    w = r["whole_s"]
    print(
        f"{label:28s} whole {w * 1e3:6.1f} ms ({pread_s / w:.2f}x pread)  "
        + "  ".join(f"{k}col {r[f'proj{k}_s'] * 1e3:5.2f} ms ({r[f'proj{k}_s'] / w:.3f}x)" for k in (2, 4, 8))
        + "  parts "
        + " ".join(f"{k} {v * 1e3:.2f}" for k, v in r["proj2_parts_s"].items()),
        flush=True,
    )
    st = r["proj2_stats"]
    print(
        f"    proj2 stats: {st.get('dmas', '?')} DMAs, "
        + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in st.items() if k.endswith("_seconds") and v),
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
