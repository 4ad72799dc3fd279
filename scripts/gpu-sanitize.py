#!/usr/bin/env python3
"""compute-sanitizer over the GPU suite, on the GPU machine (scripts/gpu-suite.sh sanitize).

Runs every (tool, target) pair -- tools memcheck (with leak checking),
racecheck, synccheck, initcheck; targets the C++ suites against the real
driver (build/gpu/bin, from `gpu-suite.sh prepare`), the CUDA kernel test and
the Python suite -- several at a time, each under a time limit, and writes a
summary: per pair the tests' own result, the sanitizer's error count, and
what the errors are, split into

- hazards: memory access errors, races, synchronization and initialization
  errors, leaks -- any of these is a failure;
- CUDA API errors: calls that returned an error.  Some are deliberate (a test
  asking for more memory than the device has, a probe the library makes of a
  pointer the driver does not know); every distinct one is listed with its
  count and classified by the table DELIBERATE below, and an unlisted one is a
  failure.

Output: <out>/sanitize.md (the summary), <out>/sanitize-logs.tar.gz (every log).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

TOOLS = {
    "memcheck": ["--tool", "memcheck", "--leak-check", "full"],
    "racecheck": ["--tool", "racecheck"],
    "synccheck": ["--tool", "synccheck"],
    "initcheck": ["--tool", "initcheck"],
}

# CUDA API errors the suites cause on purpose, by (error name, API call):
# why each is expected.  Anything else is a finding.
DELIBERATE = {
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc"): "tests that allocate more than the device has (out_of_memory is typed)",
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAllocAsync"): "tests that allocate more than the device has",
    ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc_v2"): "tests that allocate more than the device has",
    ("CUDA_ERROR_INVALID_VALUE", "cuPointerGetAttribute"): "the copy engine asks whether host memory is pinned; "
    "for ordinary (pageable) memory the driver answers INVALID_VALUE",
    ("CUDA_ERROR_INVALID_VALUE", "cuIpcGetMemHandle"): "a GPU-only test shows the driver refusing IPC of pool memory",
    ("CUDA_ERROR_INVALID_CONTEXT", "cuIpcOpenMemHandle"): "a GPU-only test shows the driver refusing to open a "
    "handle in its own process",
    ("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "cuMemHostUnregister"): "ending a registration that went with a "
    "destroyed context (the lifetime test)",
}

API_ERROR = re.compile(r"Program hit (CUDA_ERROR_\w+) \(error \d+\) due to \"[^\"]*\" on CUDA API call to (\w+)")
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
HAZARD_HINTS = (
    "Invalid __global__",
    "Invalid __shared__",
    "Invalid __local__",
    "Uninitialized __global__ memory read",
    "Race reported",
    "Barrier error",
    "Leaked",
    "bytes leaked",
    "Host API memory access error",
    "Unused memory",
    "Divergent",
    "Address ",
)


def find_sanitizer() -> str:
    for candidate in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer"):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("compute-sanitizer not found (looked on PATH and in /usr/local/cuda/bin)")


def targets(args: argparse.Namespace) -> dict:
    binaries = Path(args.bin)
    out = {}
    for name, exe in [
        ("cpp-suite", "cuarrow_test"),
        ("cpp-gpu-only", "cuarrow_gpu_test"),
        ("cpp-arrow", "cuarrow_arrow_test"),
        ("cpp-arrow-batching", "cuarrow_arrow_batching_test"),
        ("cuda-kernels", "cuarrow_arrow_kernel_test"),
    ]:
        if (binaries / exe).exists():
            out[name] = [str(binaries / exe)]
    out["python-suite"] = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"]
    return out


def classify(text: str) -> dict:
    api = Counter()
    hazards = []
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        m = API_ERROR.search(line)
        if m:
            api[(m.group(1), m.group(2))] += 1
            continue
        body = line.strip("= ").strip()
        if any(h in body for h in HAZARD_HINTS) and not body.startswith("ERROR SUMMARY"):
            hazards.append(body)
    m = SUMMARY.findall(text)
    return {"api": api, "hazards": hazards, "summary": int(m[-1]) if m else None}


def run_one(sanitizer: str, tool: str, name: str, cmd: list, logdir: Path, timeout: int) -> dict:
    log = logdir / f"{tool}-{name}.log"
    full = [sanitizer, *TOOLS[tool], "--target-processes", "all", "--print-limit", "200", *cmd]
    t0 = time.time()
    timed_out = False
    with open(log, "w") as f:
        f.write("$ " + " ".join(full) + "\n")
        f.flush()
        try:
            rc = subprocess.run(full, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    text = log.read_text(errors="replace")
    result = classify(text)
    tail = [line for line in text.splitlines() if re.search(r"passed|failed|PASSED|FAILED", line)]
    result.update(tool=tool, target=name, rc=rc, timed_out=timed_out, seconds=time.time() - t0,
                  tests=tail[-1].strip() if tail else "")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "build/gpu-out"))
    ap.add_argument("--bin", default="build/gpu/bin")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--targets", default="", help="comma-separated subset of the targets (default: all)")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=480, help="seconds for one (tool, target) run")
    args = ap.parse_args()

    sanitizer = find_sanitizer()
    out = Path(args.out)
    logdir = out / "sanitize-logs"
    logdir.mkdir(parents=True, exist_ok=True)
    all_targets = targets(args)
    wanted = [t for t in args.targets.split(",") if t] or list(all_targets)
    jobs = [(tool, name) for tool in args.tools.split(",") for name in wanted if name in all_targets]
    # The longest first: the Python suite under each tool.
    jobs.sort(key=lambda j: j[1] != "python-suite")
    env_note = os.environ.get("CUARROW_CUDA_DRIVER", "")
    if env_note:
        print(f"note: CUARROW_CUDA_DRIVER={env_note} is set; the sanitizer needs the real driver", flush=True)

    results = []
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, sanitizer, tool, name, all_targets[name], logdir, args.timeout)
                   for tool, name in jobs]
        for f in cf.as_completed(futures):
            r = f.result()
            results.append(r)
            print(f"[{r['tool']:<9}] {r['target']:<20} rc={r['rc']} errors={r['summary']} "
                  f"hazards={len(r['hazards'])} {r['seconds']:.0f}s {r['tests']}", flush=True)

    results.sort(key=lambda r: (list(TOOLS).index(r["tool"]), r["target"]))
    api_total = Counter()
    lines = ["# compute-sanitizer over the GPU suite", "",
             f"- sanitizer: {subprocess.run([sanitizer, '--version'], capture_output=True, text=True).stdout.strip().splitlines()[-1]}",
             f"- date: {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}", "",
             "| tool | target | tests | sanitizer errors | hazards | CUDA API errors (deliberate / other) | time |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    failed = False
    for r in results:
        deliberate = sum(n for k, n in r["api"].items() if k in DELIBERATE)
        other = sum(n for k, n in r["api"].items() if k not in DELIBERATE)
        api_total.update(r["api"])
        # The suite's own result counts too (the sanitizer passes its exit code on).
        ok = not r["timed_out"] and r["rc"] == 0 and not r["hazards"] and other == 0
        failed |= not ok
        status = "TIMEOUT" if r["timed_out"] else r["tests"].replace("|", "/")
        lines.append(f"| {r['tool']} | {r['target']} | {status} (rc {r['rc']}) | {r['summary']} | "
                     f"{len(r['hazards'])} | {deliberate} / {other} | {r['seconds']:.0f} s |")
    lines += ["", "CUDA API errors seen (all runs):", ""]
    for (err, call), n in api_total.most_common():
        why = DELIBERATE.get((err, call), "NOT DELIBERATE: a finding")
        lines.append(f"- {err} from {call}: {n} — {why}")
    hazards = [(r["tool"], r["target"], h) for r in results for h in r["hazards"]]
    lines += ["", f"Hazards (memory errors, races, sync, initialization, leaks): {len(hazards)}", ""]
    for tool, target, h in hazards[:200]:
        lines.append(f"- {tool} / {target}: {h}")
    (out / "sanitize.md").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / "sanitize-logs.tar.gz", "w:gz") as tar:
        tar.add(logdir, arcname="sanitize-logs")
    shutil.rmtree(logdir)
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
