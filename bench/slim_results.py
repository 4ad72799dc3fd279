#!/usr/bin/env python3
"""Rewrite results.json files that hold every timed call's seconds
(``samples_s``, as bench.py wrote them before it kept summaries only) in
bench.py's summary form: each case's recorded figures (median, min, max and
the rates and ratios from them) stay as they are; ``samples_s`` gives way to
``n_samples``, ``p10_s`` and ``p90_s`` (bench.sample_summary of the same
samples).

    python3 bench/slim_results.py bench/results/*/results.json

A file without samples is left alone.  Check afterwards that the reports
come out the same: ``python3 bench/bench.py --report-from DIR --out TMP``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402 - beside this script


def slim(path: Path) -> bool:
    data = json.loads(path.read_text())
    results = data["results"]
    if not any("samples_s" in r for r in results):
        return False
    slimmed = []
    for r in results:
        samples = r.get("samples_s")
        if samples is None:
            slimmed.append(r)
            continue
        summary = bench.sample_summary(samples)
        for key in ("median_s", "min_s", "max_s"):  # the samples are rounded to the ns: the same figures
            if not math.isclose(summary[key], r[key], rel_tol=1e-6, abs_tol=2e-9):
                raise SystemExit(
                    f"{path}: {r['name']} {r['size_label']}: {key} {r[key]} is not its samples' {summary[key]}"
                )
        out = {}
        for k, v in r.items():
            if k == "samples_s":
                out.update(n_samples=summary["n_samples"])
            elif k == "max_s":
                out.update(max_s=v, p10_s=summary["p10_s"], p90_s=summary["p90_s"])
            else:
                out[k] = v
        slimmed.append(out)
    bench.write_json(path, data["meta"], slimmed, data["targets"], data["errors"])
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        path = Path(name)
        before = path.stat().st_size
        if slim(path):
            print(f"{path}: {before} -> {path.stat().st_size} bytes")
        else:
            print(f"{path}: no samples, left alone")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
