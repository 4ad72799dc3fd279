#!/usr/bin/env python3
"""Check dask_bench.py end to end without a GPU.

Runs the Dask benchmark in this process, on cuarrow's host emulation of the
CUDA driver, at a small size (a real two-worker LocalCluster over TCP), and
fails if it exits non-zero, reports wrong data, leaves a timing out, judges
the target (the emulation must not be judged), or does not write its files.
Then it runs again with a table maker that drops the last row on worker A,
and fails unless that run reports the wrong table and exits non-zero (the
check on B can catch a wrong answer).  The figures are meaningless.

    CUARROW_CUDA_DRIVER=emulated python3 bench/selftest/dask_run.py [--keep DIR]
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("CUARROW_CUDA_DRIVER", "emulated")
sys.path.insert(0, str(HERE.parent))

import cloudpickle  # noqa: E402
import dask_bench  # noqa: E402 - found through the sys.path set above

# The workers get the benchmark's functions by value, as when it runs as a
# script (so the stand-in below reaches them too).
cloudpickle.register_pickle_by_value(dask_bench)

ARGS = ["--quick", "--bytes", "4M", "--repeat", "2"]


def _short_table(host, move):
    """A wrong table: the host table less its last row."""
    from cuarrow import cuda

    return cuda.to_device(host.slice(0, host.num_rows - 1), cuda.Context(0))


def check(out: Path, rc: int) -> list:
    problems = []
    if rc != 0:
        problems.append(f"dask_bench.main returned {rc}")
    for name in ("results.json", "summary.md"):
        if not (out / name).is_file():
            problems.append(f"{name} not written")
    if problems:
        return problems
    res = json.loads((out / "results.json").read_text())["results"]
    if res["correct"] is not True:
        problems.append("the data was reported wrong")
    for kind in ("table", "array"):
        r = res[kind]
        for measure in ("transfer", "task"):
            if not r.get(measure) or r[measure]["n"] != 2 or not r[measure]["median_s"] > 0:
                problems.append(f"{kind} {measure}: {r.get(measure)}")
        if r["first"]["task_s"] is None or r["first"]["transfer_s"] is None:
            problems.append(f"{kind}: no first move")
    if res["verdict"]["met"] is not None or res["verdict"]["measure"] != "transfer":
        problems.append(f"verdict on the emulation: {res['verdict']}")
    if res["table"]["columns"] != 10 or res["table"]["nbytes"] < 3 << 20:
        problems.append(f"table: {res['table']}")
    text = (out / "summary.md").read_text()
    for line in ("| DeviceTable |", "| NumPy array |", "Target (issue 15)", "Data: checked, correct"):
        if line not in text:
            problems.append(f"summary.md lacks {line!r}")
    return problems


def main() -> int:
    keep = Path(sys.argv[sys.argv.index("--keep") + 1]) if "--keep" in sys.argv else None
    out = keep or Path(tempfile.mkdtemp(prefix="cuarrow-dask-bench-selftest-"))
    problems = check(out / "good", dask_bench.main(ARGS + ["--out", str(out / "good")]))

    good = dask_bench._to_device
    dask_bench._to_device = _short_table
    try:
        rc_bad = dask_bench.main(ARGS + ["--out", str(out / "bad")])
    finally:
        dask_bench._to_device = good
    bad = json.loads((out / "bad" / "results.json").read_text())["results"]
    if rc_bad == 0 or bad["correct"] is not False or bad["verdict"]["met"] is not False:
        seen = f"rc {rc_bad}, correct {bad['correct']}, verdict {bad['verdict']}"
        problems.append(f"a table short of a row was not reported ({seen})")

    for p in problems:
        print("selftest PROBLEM:", p)
    print(f"selftest {'FAILED' if problems else 'passed'}: output in {out}")
    if not keep and not problems:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
