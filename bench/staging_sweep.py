#!/usr/bin/env python3
"""Tuning sweep of the pinned staging pipeline (chunk size x thread count).

Measures, on the GPU machine, the pageable host<->device paths that go through
cuarrow's staging pipeline for every combination of chunk size and thread
count, plus the host's own memcpy bandwidth with 1..N threads (the other
resource the pipeline spends).  The defaults in include/cuarrow/copy.hpp are
chosen from its output::

    PYTHONPATH=<installed cuarrow> python3 bench/staging_sweep.py --out DIR

Each figure is the median of timed calls (GB/s, 1 GB = 1e9 bytes), as in
bench/bench.py.  Writes DIR/sweep.json and DIR/sweep.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

MiB = 1 << 20


def timed(fn, reps: int, budget_s: float) -> float:
    fn()  # warm-up
    fn()
    samples = []
    t_end = time.perf_counter() + budget_s
    while len(samples) < reps or (time.perf_counter() < t_end and len(samples) < 200):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) * 1e-9)
    return statistics.median(samples)


def host_memcpy_gbps(nbytes: int, threads: int) -> float:
    """Aggregate bandwidth of `threads` numpy copies (which release the GIL) of nbytes/threads each."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    part = nbytes // threads

    def run():
        ts = [
            threading.Thread(target=np.copyto, args=(dst[i * part : (i + 1) * part], src[i * part : (i + 1) * part]))
            for i in range(threads)
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return nbytes / timed(run, 5, 0.3) / 1e9


def run_variants(args) -> int:
    """The sweep once per variant and round, in fresh processes (the knobs
    are read once per process); one combined sweep.txt / sweep.json."""
    import subprocess
    import tempfile

    variants = []
    for item in args.variants.split(","):
        name, _, knobs = item.partition("=")
        variants.append((name, dict(kv.split("=", 1) for kv in knobs.split())))
    skip = {"--variants", "--rounds", "--out"}
    cleaned, drop = [], False
    for a in sys.argv[1:]:
        if drop:
            drop = False
            continue
        if a in skip:
            drop = True
            continue
        if a.split("=", 1)[0] in skip:
            continue
        cleaned.append(a)
    passthrough = cleaned
    lines, rows = [], []
    for r in range(args.rounds):
        for name, knobs in variants:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUARROW_STAGING")}
            env.update(knobs)
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, __file__, *passthrough, "--out", tmp], env=env, check=True)
                lines.append(f"## variant {name} (round {r + 1})")
                lines.extend((Path(tmp) / "sweep.txt").read_text().splitlines())
                for row in json.loads((Path(tmp) / "sweep.json").read_text()):
                    rows.append(dict(row, variant=name, round=r + 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(rows, indent=1))
    (out / "sweep.txt").write_text("\n".join(lines) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/sweep")
    ap.add_argument("--sizes", default="64,1024", help="MiB, comma-separated")
    ap.add_argument("--chunks", default="1,2,4,8,16", help="chunk sizes in MiB")
    ap.add_argument("--threads", default="2,4,8,12,16")
    ap.add_argument("--no-memcpy", action="store_true", help="skip the host memcpy line")
    ap.add_argument("--budget", type=float, default=0.25, help="seconds of timed calls per case")
    ap.add_argument(
        "--variants",
        default="",
        help="comma-separated NAME=KNOBS runs of this sweep, each in a fresh process with the knobs "
        "(e.g. 'base=,nt=CUARROW_STAGING_STREAMING_LIMIT=1G CUARROW_STAGING_NT=2'); "
        "--rounds times over",
    )
    ap.add_argument("--rounds", type=int, default=1, help="with --variants: repeat the whole list (drift shows)")
    args = ap.parse_args()
    if args.variants:
        return run_variants(args)

    from cuarrow import cuda

    sizes = [int(s) * MiB for s in args.sizes.split(",")]
    chunks = [int(c) * MiB for c in args.chunks.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    ctx = cuda.Context(0)
    biggest = max(sizes)
    src = np.arange(biggest, dtype=np.uint8)  # written: no page faults in the timing
    dst = np.zeros(biggest, dtype=np.uint8)
    dev = ctx.new_buffer(biggest)
    saved = cuda.transfer_options()
    rows = []
    lines = []

    def say(text):
        print(text, flush=True)
        lines.append(text)

    knobs = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("CUARROW_STAGING"))
    say(f"# staging sweep  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {knobs or '(no CUARROW_STAGING_* knobs)'}")
    if not args.no_memcpy:
        say(
            "host memcpy, GB/s by threads (1 GiB):  "
            + "  ".join(f"{t}: {host_memcpy_gbps(1 << 30, t):.1f}" for t in sorted(set([1] + threads)))
        )
    say(f"{'size':>6} {'chunk':>6} {'thr':>4} {'h2d alloc':>10} {'h2d into':>10} {'d2h into':>10}")
    try:
        for n in sizes:
            for c in chunks:
                for t in threads:
                    cuda.set_transfer_options(
                        staging_chunk_bytes=c,
                        staging_threads=t,
                        staging_threads_to_device=t,
                        staging_threshold_bytes=4 * MiB,
                    )
                    h2d_alloc = n / timed(lambda n=n: ctx.buffer_from_data(src[:n]), 5, args.budget) / 1e9
                    h2d_into = n / timed(lambda n=n: dev.copy_from_host(src[:n]), 5, args.budget) / 1e9
                    d2h_into = n / timed(lambda n=n: dev.copy_to_host(0, n, buf=dst[:n]), 5, args.budget) / 1e9
                    rows.append(
                        dict(size=n, chunk=c, threads=t, h2d_alloc=h2d_alloc, h2d_into=h2d_into, d2h_into=d2h_into)
                    )
                    say(f"{n // MiB:>5}M {c // MiB:>5}M {t:>4} {h2d_alloc:>10.1f} {h2d_into:>10.1f} {d2h_into:>10.1f}")
        assert np.array_equal(dst[:1024], src[:1024])
    finally:
        cuda.set_transfer_options(**saved)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(rows, indent=1))
    (out / "sweep.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
