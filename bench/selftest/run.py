#!/usr/bin/env python3
"""Check bench.py end to end without a GPU: every code path, peers included.

Runs the benchmark in this process on cuarrow's host emulation of the CUDA
driver, with host-memory stand-ins for CuPy, Numba and PyTorch
(``fakes/``: only the calls bench.py makes, with numpy behind them) so that
the peers' cases, the raw cudaMemcpy cases, the ratios and the targets are
all exercised.  If ``cuarrow.cuda.to_device`` does not exist yet, a stand-in
(buffer by buffer, through cuarrow) is installed for the table cases.

    CUARROW_CUDA_DRIVER=emulated python3 bench/selftest/run.py [--keep DIR]

The figures it prints are meaningless (host memcpy on both sides); it checks
that every case runs, reads back the right bytes, and that results.json
(summaries), samples.json, results.txt, summary.md (and results.png with
matplotlib) are written, and written again the same by --report-from.
Never put ``fakes/`` on a real run's path.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("CUARROW_CUDA_DRIVER", "emulated")
sys.path.insert(0, str(HERE / "fakes"))
sys.path.insert(0, str(HERE.parent))

import bench  # noqa: E402 - found through the sys.path set above, beside the fakes

from cuarrow import cuda  # noqa: E402 - after the driver choice above


class StandInDeviceTable:
    """A stand-in for cuarrow.cuda.to_device's result: per-buffer copies."""

    def __init__(self, table):
        ctx = cuda.Context(0)
        self.table = table
        self.buffers = [ctx.buffer_from_data(b) for b in bench.table_buffers(table)]

    def to_host(self):
        for b in self.buffers:
            b.copy_to_host()
        return self.table


def main() -> int:
    args = sys.argv[1:]
    keep = None
    if "--keep" in args:
        keep = Path(args[args.index("--keep") + 1])
    if not hasattr(cuda, "to_device"):
        print("selftest: cuarrow.cuda.to_device missing; using a stand-in for the table cases", flush=True)
        cuda.to_device = StandInDeviceTable
    real_load_peers = bench.load_peers
    bench.load_peers = lambda emulated, notes: real_load_peers(False, notes)  # the fakes run on the emulation
    out = keep or Path(tempfile.mkdtemp(prefix="cuarrow-bench-selftest-"))
    rc = bench.main(
        [
            "--quick",
            "--sizes",
            "4,4K,1M,2M",
            "--table-bytes",
            "4M",
            "--columns",
            "1000",
            "--column-bytes",
            "4K",
            "--budget",
            "0.02",
            "--samples",
            "--out",
            str(out),
        ]
    )
    problems = []
    if rc != 0:
        problems.append(f"bench.main returned {rc}")
    data = json.loads((out / "results.json").read_text())
    results = data["results"]
    if data["errors"]:
        problems.append(f"failed cases: {data['errors']}")
    wrong = [r["name"] for r in results if r["verified"] is False]
    if wrong:
        problems.append(f"wrong data: {wrong}")
    for group in bench.GROUPS + bench.TABLE_GROUPS:
        impls = {r["impl"] for r in results if r["group"] == group}
        missing = {"raw", "cuarrow", "cupy", "numba", "torch"} - impls
        if missing:
            problems.append(f"{group}: no case for {sorted(missing)}")
    if not any(r["label"] == "cuda.to_device(table)" for r in results):
        problems.append("no to_device case")
    if any(r.get("ratio_link") is None for r in results):
        problems.append("rows without a '× link' ratio")
    if not data["targets"]:
        problems.append("no target judged")
    for name in ("results.txt", "summary.md"):
        if not (out / name).is_file():
            problems.append(f"{name} not written")
    # results.json keeps summaries; every call's seconds go to samples.json (--samples)
    if any(
        "samples_s" in r
        or "n_samples" not in r
        or not r["min_s"] <= r["p10_s"] <= r["median_s"] <= r["p90_s"] <= r["max_s"]
        for r in results
    ):
        problems.append("results.json holds samples, or a case's summary is missing or out of order")
    samples = json.loads((out / "samples.json").read_text()) if (out / "samples.json").is_file() else []
    if [len(s["samples_s"]) for s in samples] != [r["n_samples"] for r in results]:
        problems.append("samples.json does not hold each case's samples")
    # the reports come out the same from results.json alone
    again = out / "again"
    bench.main(["--report-from", str(out), "--out", str(again), "--no-plot"])
    for name in ("results.txt", "summary.md"):
        if not (again / name).is_file() or (again / name).read_text() != (out / name).read_text():
            problems.append(f"--report-from wrote another {name}")
    try:
        import matplotlib  # noqa: F401

        if not (out / "results.png").is_file():
            problems.append("results.png not written")
    except ImportError:
        print("selftest: matplotlib missing, the plot is not checked")
    for p in problems:
        print("selftest PROBLEM:", p)
    print(f"selftest {'FAILED' if problems else 'passed'}: {len(results)} cases, output in {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
